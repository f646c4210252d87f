/* hf_tensors.h - what the GPT-2 and LLaMA importers (gpt_import.c,
 * llama_import.c) share for reading Hugging Face safetensors tensors. */
#ifndef HF_TENSORS_H
#define HF_TENSORS_H

#include "io/safetensors.h"
#include "mpmd.h"

#include <stdint.h>
#include <stdio.h>

/* "[d0, d1, ...]" into buf. */
void gpt_hf_shape_str(int ndim, const int64_t *dim, char *buf, size_t len);
/* 1 for the dtypes the importers widen to f32: F32, F16, BF16. */
int gpt_hf_loadable(const mpmd_st_tensor *t);
/* The n elements of tensor t of the file f (whose data section starts at
 * data_start) as f32, through raw (n * elem_size bytes); a read error names
 * `where` (the file) and the tensor. */
mpmd_status gpt_hf_read_f32(FILE *f, long long data_start, const mpmd_st_tensor *t, int64_t n, uint8_t *raw,
                            float *out, const char *where, mpmd_error *err);

#endif
