/* gpt_files.h - the files gpt reads besides text, written by the tests
 * themselves (no downloads): GPT-2 weights in Hugging Face's safetensors
 * layout with deterministic random values, and token files in llm.c's
 * format, each optionally broken in one named way. test_gpt_import and
 * test_gpt_tokens call these; the gpt_files tool (gpt_files_main.c) writes
 * the same files for the shell test of the gpt program (gpt_files.sh). */
#ifndef MPMD_TEST_GPT_FILES_H
#define MPMD_TEST_GPT_FILES_H

#include "mpmd.h"

#include <stdint.h>

/* A GPT-2 file in Hugging Face's layout (gpt_import.h lists the names). */
typedef struct tu_hf_opts {
    int layers;
    int64_t width, vocab, positions;
    const char *prefix;  /* "" or "transformer." before every name but lm_head.weight */
    const char *dtype;   /* "F32", "BF16" or "F16" */
    const char *drop;    /* a tensor (name without the prefix) left out, or NULL */
    const char *reshape; /* a tensor whose last dimension is one less, or NULL */
    const char *as_i32;  /* a tensor written with dtype I32, or NULL */
    int lm_head;         /* 0: none; 1: lm_head.weight equal to wte.weight; 2: different */
    int masks;           /* also the causal-mask buffers h.<i>.attn.bias [1, 1, P, P] */
    uint64_t seed;
} tu_hf_opts;

/* 2 layers, width 16, vocab 64, 32 positions, no prefix, F32, masks, seed 1. */
tu_hf_opts tu_hf_defaults(void);

/* The value element k of tensor `name` (without the prefix) has in F32: a
 * pseudo-random float in [-1, 1) with all mantissa bits in use. A file of
 * another dtype holds it rounded to that dtype. */
float tu_hf_value(uint64_t seed, const char *name, int64_t k);
/* tu_hf_value as a file of `dtype` holds it, widened back to f32. */
float tu_hf_stored(const char *dtype, uint64_t seed, const char *name, int64_t k);

/* Write the file; MPMD_OK or the writer's error. */
mpmd_status tu_hf_write(const char *path, const tu_hf_opts *o, mpmd_error *err);

/* A token file of llm.c's format: a header of 256 int32 (magic, version,
 * count, zeros) and the n ids as little-endian uint16. 0 on success. */
int tu_tokens_write(const char *path, const uint16_t *ids, int64_t n, int32_t magic, int32_t version,
                    int32_t count);

#endif
