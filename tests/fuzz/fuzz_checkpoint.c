/* libFuzzer: the checkpoint reader. Every input is written to a file and
 * read by every function that reads checkpoints: the metadata alone, the
 * full verification with its tensor list, a load into a two-rank step of
 * the fuzz model, and a load of its parameters alone. Any file must load
 * or give an error that says why, never a crash or a leak, and a failed
 * load leaves the step's state as it was (the promise of mpmd_step_load).
 * Seeds: corpus/checkpoint (make_seeds). */
#include "fuzz_model.h"

#include <mpmd_checkpoint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static mpmd_graph *g;
static mpmd_step *st;
static char path[64];

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (!st) {
        mpmd_value x;
        g = fuzz_model(&x);
        if (!(st = fuzz_model_step(g))) abort();
        snprintf(path, sizeof path, "/tmp/mpmd_fuzz_checkpoint_%d.safetensors", (int)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    mpmd_error err;
    mpmd_checkpoint_info info;
    if (mpmd_checkpoint_read_info(path, &info, &err) != MPMD_OK && !err.msg[0]) abort();
    FILE *null = fopen("/dev/null", "w");
    if (mpmd_checkpoint_verify(path, null, &err) != MPMD_OK && !err.msg[0]) abort();
    if (null) fclose(null);

    char before[65], after[65];
    mpmd_step_params_sha256(st, before);
    if (mpmd_step_load(st, path, &info, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        mpmd_step_params_sha256(st, after);
        if (strcmp(before, after)) {
            fprintf(stderr, "a failed load (%s) changed the parameters\n", err.msg);
            abort();
        }
    }
    mpmd_param_load_report rep;
    mpmd_step_params_sha256(st, before);
    if (mpmd_step_load_params(st, path, NULL, &rep, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        mpmd_step_params_sha256(st, after);
        if (strcmp(before, after)) {
            fprintf(stderr, "a failed parameter load (%s) changed the parameters\n", err.msg);
            abort();
        }
    }
    unlink(path);
    return 0;
}
