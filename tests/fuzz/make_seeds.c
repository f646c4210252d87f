/* Writes the checkpoint fuzzer's seeds into DIR (tests/fuzz/corpus/checkpoint
 * holds their output, kept in the tree): a checkpoint of the fuzz model after
 * a step, its weights exported as f32 and as bf16.
 *   make_seeds DIR */
#include "fuzz_model.h"

#include <mpmd_checkpoint.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    mpmd_value x;
    mpmd_graph *g = fuzz_model(&x);
    mpmd_step *st = fuzz_model_step(g);
    if (!st) {
        fprintf(stderr, "make_seeds: the model does not compile\n");
        return 1;
    }
    float xs[12];
    for (int i = 0; i < 12; i++)
        xs[i] = (float)(i % 5) * 0.25f - 0.5f;
    mpmd_error err;
    char path[4096];
    int bad = mpmd_step_set_input(st, x, xs, sizeof xs) || mpmd_step_run(st);
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = 1;
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", argv[1]);
    bad = bad || mpmd_step_save(st, path, &info, &err);
    snprintf(path, sizeof path, "%s/weights_f32.safetensors", argv[1]);
    bad = bad || mpmd_step_export_weights(st, path, MPMD_F32, &err);
    snprintf(path, sizeof path, "%s/weights_bf16.safetensors", argv[1]);
    bad = bad || mpmd_step_export_weights(st, path, MPMD_BF16, &err);
    if (bad) fprintf(stderr, "make_seeds: %s %s\n", mpmd_step_error(st), err.msg);
    mpmd_step_free(st);
    mpmd_graph_free(g);
    return bad ? 1 : 0;
}
