/* What the importers' fuzzers (fuzz_gpt_files.c, fuzz_llama_dir.c) check
 * once a file configured a model: it builds (or is refused with a message),
 * compiles, and the import sets it or is refused with a message, leaving
 * every parameter as it was (checked before written). */
#ifndef MPMD_FUZZ_IMPORT_H
#define MPMD_FUZZ_IMPORT_H

#include "gpt_model.h"

#include <stdlib.h>
#include <string.h>

typedef mpmd_status (*fuzz_import_fn)(const char *path, const gpt_model *m, mpmd_step *st, mpmd_error *err);

static inline void fuzz_import_into_step(const gpt_config *c, const char *path, fuzz_import_fn import) {
    mpmd_error err;
    gpt_model m;
    if (gpt_build(c, 1, &m, &err) != MPMD_OK) return; /* a shape the model refuses, with a message */
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    if (!st) abort();
    char before[65], after[65];
    mpmd_step_params_sha256(st, before);
    err.msg[0] = '\0';
    if (import(path, &m, st, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        mpmd_step_params_sha256(st, after);
        if (strcmp(before, after)) abort(); /* checked before written */
    }
    mpmd_step_free(st);
    gpt_model_free(&m);
}

#endif
