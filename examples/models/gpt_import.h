/* gpt_import.h - GPT-2 weights in Hugging Face's layout as the initial
 * parameters of a gpt_model (gpt --init-from).
 *
 * The file is a safetensors file as Hugging Face's "gpt2" model repository
 * ships it (model.safetensors; gpt2-medium, -large and -xl alike), each
 * name possibly under "transformer." (a GPT2LMHeadModel's state dict):
 *
 *   Hugging Face tensor          shape        our parameter
 *   wte.weight                   [V, C]       wte/embedding          [V, C]
 *   wpe.weight                   [P, C]       wpe/embedding          [T, C]  (its first T = seq rows)
 *   h.<i>.ln_1.weight, .bias     [C]          block_<i>/ln_0/scale, bias
 *   h.<i>.attn.c_attn.weight     [C, 3C]      block_<i>/attn/qkv/kernel   [C, 3C]
 *   h.<i>.attn.c_attn.bias       [3C]         block_<i>/attn/qkv/bias
 *   h.<i>.attn.c_proj.weight     [C, C]       block_<i>/attn/out/kernel   [C, C]
 *   h.<i>.attn.c_proj.bias       [C]          block_<i>/attn/out/bias
 *   h.<i>.ln_2.weight, .bias     [C]          block_<i>/ln_1/scale, bias
 *   h.<i>.mlp.c_fc.weight        [C, 4C]      block_<i>/mlp/dense_0/kernel [C, 4C]
 *   h.<i>.mlp.c_fc.bias          [4C]         block_<i>/mlp/dense_0/bias
 *   h.<i>.mlp.c_proj.weight      [4C, C]      block_<i>/mlp/dense_1/kernel [4C, C]
 *   h.<i>.mlp.c_proj.bias        [C]          block_<i>/mlp/dense_1/bias
 *   ln_f.weight, ln_f.bias       [C]          ln_f/scale, ln_f/bias
 *
 * Every tensor is copied as it is, no transpose and no permutation:
 * Hugging Face's Conv1D keeps its weight as [in, out] and computes
 * x @ weight + bias, which is mpmd_dense's kernel layout (y = x @ kernel +
 * bias); an embedding is [vocab or positions, width] on both sides. The
 * attention split matches too: GPT-2 splits c_attn's 3C outputs into q, k,
 * v blocks of C columns, in that order, and views each as [heads, C/heads],
 * head-major; mpmd_self_attention slices its qkv output at 0, C and 2C and
 * reshapes each slice to [heads, C/heads] the same way. GPT-2's layer norms
 * use eps 1e-5, as mpmd_gpt_block and the model's ln_f do; its MLP uses
 * the tanh form of GELU, as mpmd_gelu does; its attention scales scores by
 * 1/sqrt(C/heads) and is causal, as mpmd_attention with causal set does.
 *
 * GPT-2 ties its LM head to wte (logits = x @ wte^T): the model must be
 * built with tie_embeddings. A file that also holds "lm_head.weight" is
 * accepted when that tensor equals wte.weight, and refused otherwise.
 * Other tensors of the file (the causal-mask buffers "h.<i>.attn.bias"
 * and "h.<i>.attn.masked_bias" of older exports) are not read.
 *
 * Dtypes: F32 tensors are copied bit for bit; F16 and BF16 are widened to
 * f32 (exactly). Any other dtype is an error naming the tensor.
 */
#ifndef GPT_IMPORT_H
#define GPT_IMPORT_H

#include "gpt_model.h"

/* What a file's tensor shapes say about the model. */
typedef struct gpt_hf_info {
    char prefix[16]; /* "" or "transformer.": the prefix of every name but lm_head.weight */
    int layers;      /* blocks: the file names h.0 .. h.<layers-1> */
    int64_t vocab;   /* wte.weight is [vocab, width] */
    int64_t width;
    int64_t positions; /* wpe.weight is [positions, width] */
    int has_lm_head;   /* the file holds lm_head.weight too */
} gpt_hf_info;

/* Read the header of `path` and infer the model's shape from wte.weight,
 * wpe.weight and the block numbers of the h.<i>.* names. MPMD_ERR_IO or
 * MPMD_ERR_FORMAT (a file that is not safetensors, has no wte.weight, or
 * whose wte/wpe are not 2-D of one width), the message naming the file. */
mpmd_status gpt_hf_inspect(const char *path, gpt_hf_info *info, mpmd_error *err);

/* The options of a configuration its user set (the others are taken from
 * the file). */
typedef struct gpt_hf_given {
    int layers, width, heads, vocab, seq;
    int kv_heads, mlp_hidden, rope_base, tie_embeddings; /* LLaMA's (llama_import.h) */
} gpt_hf_given;

/* Make `c` the file's model: layers, width and vocab from the file (an
 * option the user set and the file disagree on is MPMD_ERR_SHAPE naming the
 * tensor and both shapes); seq at most the file's positions (the default
 * is cut to them; a larger seq given is an error naming wpe.weight); heads
 * width/64 (GPT-2's head size) unless given; tie_embeddings set. `path`
 * names the file in messages. */
mpmd_status gpt_hf_configure(const char *path, const gpt_hf_info *info, const gpt_hf_given *given,
                             gpt_config *c, mpmd_error *err);

/* Set every parameter of the model's compiled step `st` (each copy this
 * process holds: mpmd_step_write; a parameter split over the model axis
 * from the whole tensor, each model rank its part) from the file. First
 * every parameter's tensor is looked up and checked against the whole
 * parameter's shape (a missing tensor, another shape, a
 * dtype other than F32/F16/BF16, an untied model or an lm_head.weight that
 * differs from wte.weight is an error naming the tensor, and nothing is
 * written); then the tensors are read one at a time and written. Only a
 * read error after the checks (the file changed underneath) can leave some
 * parameters set and others not. The optimizer state is not touched. */
mpmd_status gpt_hf_import(const char *path, const gpt_model *m, mpmd_step *st, mpmd_error *err);

#endif
