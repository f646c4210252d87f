/* gpt_generate.h - sampling from a trained GPT-2-style model (gpt_model.h)
 * with a key/value cache, one token per sequence per step, pipelined like
 * the training step.
 *
 * The decode step (gpt_build_decoder) is a forward-only graph over
 * `batch` sequences in `microbatches` microbatches (the prompts in flight
 * through the pipeline), one position p per call:
 *
 *   inputs  "tokens" i32 [batch, 1]   the token at position p of each sequence
 *           "positions" i32 [batch, 1]  p (indexes wpe)
 *           "valid" f32 [1, 1, 1, T]  1 at cache positions 0..p, else 0
 *           "at" f32 [1, T, 1, 1]     1 at position p, else 0
 *   variables "cache/block_<i>/k", ".../v"  [batch, T, H, Dh], the compute
 *           dtype, zeros at first
 *   loop over the microbatches:
 *     x = wte[token] + wpe[p]
 *     each block, with the training step's parameter names: ln_0; q, k, v
 *       from attn/qkv; the microbatch's cache rows with k (and v) written
 *       at p (a select by "at"); softmax(q K^T / sqrt(Dh)) over the valid
 *       positions; attn/out; the residual; ln_1, mlp, the residual
 *     logits = ln_f(x) @ head, stacked over the microbatches
 *   after the loop: each cache assigned its updated rows.
 *
 * With tensor_parallel M > 1 the decoder splits as the training step's
 * layers do (attention by heads, the MLP by its hidden width, wte and the
 * head by vocabulary rows when M divides the vocabulary, each rank's
 * logits gathered whole), each model rank caching its H/M heads; its
 * numbers are the unsplit decoder's up to the order of the split sums.
 *
 * T is the model's seq (the rows of wpe): prompt and continuation must fit.
 * The parameters come from a checkpoint or weights file by name
 * (mpmd_step_load_params), so the decoder needs no optimizer. GPT-2
 * blocks only (LLaMA's rotary positions are an attribute of the graph).
 */
#ifndef GPT_GENERATE_H
#define GPT_GENERATE_H

#include "gpt_model.h"

typedef struct gpt_decoder {
    gpt_config cfg; /* the model; batch = sequences, microbatches as given */
    mpmd_graph *g;
    mpmd_value tokens, positions, valid, at; /* the inputs above */
    mpmd_value logits;                      /* f32 [batch, vocab], kept */
    int n_params;
    mpmd_value *params; /* the parameters, as gpt_model's (owned) */
} gpt_decoder;

/* The decoder seen as a gpt_model with its parameters (for gpt_hf_import). */
gpt_model gpt_decoder_model(const gpt_decoder *d);

/* Build the decode step of model c (GPT-2 blocks) for c->batch sequences in
 * c->microbatches microbatches, stage markers as gpt_build places them. */
mpmd_status gpt_build_decoder(const gpt_config *c, gpt_decoder *d, mpmd_error *err);
void gpt_decoder_free(gpt_decoder *d);

/* Run position pos (0 <= pos < seq) with tok[b], the token there of
 * sequence b, and copy the logits for the next position, [batch, vocab],
 * to every process (collective under MPI). */
mpmd_status gpt_decode(mpmd_step *st, const gpt_decoder *d, const int32_t *tok, int64_t pos, float *logits,
                       mpmd_error *err);

/* A token drawn from logits [vocab]: greedy (the first largest) when
 * temperature is 0, else from softmax(logits / temperature) restricted to
 * the top_k largest (0: all), with a uniform number that is a pure
 * function of (seed, sequence, pos). */
int32_t gpt_sample_token(const float *logits, int64_t vocab, float temperature, int top_k, uint64_t seed,
                         int64_t sequence, int64_t pos);

#endif
