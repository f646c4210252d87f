/* gpt_model.h - a GPT-2-style language model as an mpmd training step, and
 * the data it trains on (bytes of a text, or token ids of an llm.c token
 * file). Shared by examples/gpt, the tests and the benchmarks.
 *
 * The step graph (gpt_build):
 *
 *   inputs  "tokens", "targets"   i32 [batch, seq]
 *           "dropout_key"          i32 [2], with dropout only (gpt_set_inputs)
 *   loop over `microbatches` microbatches (mpmd_loop_begin):
 *     x = wte[tokens] + wpe                      token + position embeddings
 *                                                (LLaMA: no wpe; rotary in attention)
 *     x = dropout(x)                             with dropout only
 *     x = block_i(x), i = 0 .. layers-1          pre-LN GPT-2 blocks, causal (LLaMA
 *                                                blocks with arch LLAMA); with dropout,
 *                                                on each residual branch
 *     logits = ln_f(x) @ lm_head                 (or @ wte^T when tied; LLaMA: norm_f,
 *                                                an RMS norm)
 *     loss = mean(cross_entropy(logits, targets)) / microbatches
 *     grads = d loss / d params                  mpmd_grad, all parameters
 *     loss and every gradient loop-reduced with ADD
 *   after the loop: AdamW on every parameter; the summed loss is kept.
 *
 * Dividing each microbatch's mean loss by the microbatch count makes the
 * loop-summed loss (and gradients) those of the mean over the whole batch.
 *
 * Pipeline stages: with `stages` S, a stage marker follows every layers/S
 * blocks; the embeddings go with the first stage, the final LN, the LM head
 * and the loss with the last one, which a final marker closes.
 *
 * Parameter names (flax style): wte/embedding, wpe/embedding,
 * block_<i>/{ln_0,attn/qkv,attn/out,ln_1,mlp/dense_0,mlp/dense_1}/...,
 * ln_f/{scale,bias}, lm_head/kernel (untied only).
 */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include "mpmd.h"
#include "mpmd_tokenizer.h"

#include <stdint.h>

typedef struct gpt_config {
    int64_t vocab;      /* token ids are in [0, vocab) */
    int64_t seq;        /* sequence length (positions) */
    int64_t width;      /* model width C */
    int heads;          /* attention heads; must divide width */
    int layers;         /* GPT-2 blocks */
    int64_t batch;      /* sequences per step */
    int microbatches;   /* must divide batch */
    int stages;         /* pipeline stages; must divide layers unless balance_stages */
    int balance_stages; /* place the markers by estimated cost (the LM head weighs on the last
                           stage) instead of every layers/stages blocks */
    int tie_embeddings; /* LM head = x @ wte^T instead of its own kernel */
    float lr;           /* AdamW learning rate */
    mpmd_adam_opts adam;
    float clip;          /* clip the gradients to this global norm (mpmd_clip_by_global_norm); 0: none */
    int decay_all;       /* AdamW's weight decay on every parameter; 0 (the default): on the matrices and
                            embeddings (2 or more dimensions) only, as GPT-2 and nanoGPT train */
    mpmd_dtype compute;  /* compute dtype (f32, bf16, f16): parameters and optimizer state stay f32 */
    int remat;           /* 0: keep every activation; else each block is a rematerialisation region of
                            this mpmd_remat_policy (SAVE_NOTHING: "block", SAVE_DOTS: "dots") */
    int fused_attention; /* 1: mpmd_attention's fused op; 0: the composition that keeps the
                            probabilities (mpmd_set_fused_attention) */
    int tensor_parallel; /* model ranks each block is split over (mpmd_set_tensor_parallel); 0 or 1: none */
    float dropout;       /* dropout rate of the embeddings and of every block's residual branches
                            (GPT-2's embd_pdrop and resid_pdrop); 0: none */
    int arch;            /* GPT_ARCH_GPT2 or GPT_ARCH_LLAMA (the fields below) */
    int kv_heads;        /* LLaMA: key/value heads (grouped-query attention), dividing heads; 0: heads */
    int64_t mlp_hidden;  /* LLaMA: the SwiGLU width; 0: 8C/3 rounded up to a multiple of 8 */
    float rope_base;     /* LLaMA: the rotary embeddings' base (default 10000) */
    float norm_eps;      /* LLaMA: the RMS norms' epsilon (default 1e-5; 0 means 1e-5) */
    mpmd_rope_scaling rope_scaling; /* LLaMA: Llama 3.1's rotary frequencies (factor 0, the default: none) */
} gpt_config;

/* The two block families gpt_build makes:
 *   GPT_ARCH_GPT2   learned positions (wpe), pre-LN GPT-2 blocks (layer
 *                   norms, attention with biases, GELU MLP), final layer norm
 *   GPT_ARCH_LLAMA  no position table: rotary embeddings in attention;
 *                   pre-norm LLaMA blocks (RMS norms, grouped-query
 *                   attention without biases, SwiGLU MLP), final RMS norm
 *                   "norm_f". Parameter names block_<i>/{rms_0, attn/{q,k,v,o},
 *                   rms_1, mlp/{gate,up,down}}/... */
enum { GPT_ARCH_GPT2 = 0, GPT_ARCH_LLAMA = 1 };

/* The SwiGLU width of a LLaMA configuration (mlp_hidden, or its default). */
int64_t gpt_mlp_hidden(const gpt_config *c);

/* A small byte-level default: vocab 256, seq 64, width 128, 4 heads, 4
 * layers, batch 8, 4 microbatches, 1 stage, untied, lr 3e-3, AdamW with
 * b1 0.9, b2 0.95, eps 1e-8, weight decay 0. */
gpt_config gpt_config_default(void);

/* Check a configuration; on a bad one fill err with what is wrong and what is
 * expected and return MPMD_ERR_INVALID. */
mpmd_status gpt_config_check(const gpt_config *c, mpmd_error *err);

/* Blocks of each pipeline stage ([stages]): layers/stages each, or with
 * balance_stages a split by estimated forward FLOPs (24 C^2 + 4 T C a block,
 * 2 C V for the LM head on the last stage), at least one block a stage. */
void gpt_stage_blocks(const gpt_config *c, int *blocks);

/* Number of trainable parameters of a configuration. */
int64_t gpt_param_count(const gpt_config *c);

/* The built training step. The graph is owned by the model. */
typedef struct gpt_model {
    gpt_config cfg;
    mpmd_graph *g;
    mpmd_value tokens, targets; /* the step inputs, i32 [batch, seq] */
    mpmd_value dropout_key;     /* with dropout: the input "dropout_key", i32 [2]
                                   (gpt_dropout_key); else MPMD_NONE */
    mpmd_value loss;            /* the loop-summed loss (the batch mean), kept */
    int n_params;
    mpmd_value *params;   /* the parameters, in creation order (owned) */
    mpmd_value *grads;    /* their loop-reduced gradients, kept (owned) */
    mpmd_value grad_norm; /* with clip: the gradients' global norm before clipping, kept; else MPMD_NONE */
    mpmd_value logits;    /* gpt_build_logits: f32 [batch, seq, vocab], kept; else MPMD_NONE */
} gpt_model;

/* Build the training step for a checked configuration. On failure (a bad
 * configuration or a graph error) fills err, frees what it made and returns
 * its code; on success the caller frees the model with gpt_model_free.
 * With `with_optimizer` 0 no AdamW is built (the gradients are still kept):
 * tests compare gradients without the update. */
mpmd_status gpt_build(const gpt_config *c, int with_optimizer, gpt_model *m, mpmd_error *err);
void gpt_model_free(gpt_model *m);

/* The evaluation step of the same model: the loop's summed loss (kept as
 * m->loss) and nothing else: no gradients, no optimizer, no dropout (grads
 * stays NULL). Compiled with a schedule it is a forward-only pipeline. */
mpmd_status gpt_build_eval(const gpt_config *c, gpt_model *m, mpmd_error *err);

/* The forward pass alone with its logits: input "tokens" only, the logits
 * of every position stacked over the microbatches and kept as m->logits, f32
 * [batch, seq, vocab] (gathered whole over the model ranks); no loss. What a
 * decoder's tokens are checked against. */
mpmd_status gpt_build_logits(const gpt_config *c, gpt_model *m, mpmd_error *err);

/* ---- generation ------------------------------------------------------------
 *
 * The decode step of the same model (mpmd_set_decode): its blocks, with the
 * training step's parameter names, decoding one position per run against
 * key/value caches of `seq` positions, for `batch` sequences in
 * `microbatches` microbatches (the groups of sequences in flight through a
 * pipeline), the stage markers where gpt_build puts them, split over model
 * ranks as the training step is. Run it with mpmd_generate (d->io):
 *
 *   inputs  "tokens", "positions"  i32 [batch, 1]
 *   loop over the microbatches: the model (GPT-2: wte[token] + wpe[position])
 *     up to the logits [b, vocab], f32, gathered whole over the model ranks
 *   kept    the logits stacked, f32 [batch, vocab]
 *   variables  block_<i>/attn/cache/{k,v}, assigned after the loop
 *
 * No dropout, no remat, no optimizer: the parameters come from a
 * checkpoint or weights file by name (mpmd_step_load_params) or an import. */
typedef struct gpt_decoder {
    gpt_config cfg; /* the model; batch = sequences, seq = the caches' positions */
    mpmd_graph *g;
    mpmd_decoder io; /* tokens, positions, logits and length, as mpmd_generate takes them */
    int n_params;
    mpmd_value *params; /* the parameters, as gpt_model's (owned) */
} gpt_decoder;

mpmd_status gpt_build_decoder(const gpt_config *c, gpt_decoder *d, mpmd_error *err);
void gpt_decoder_free(gpt_decoder *d);
/* The decoder seen as a gpt_model with its parameters (the importers take one). */
gpt_model gpt_decoder_model(const gpt_decoder *d);

/* Copy every parameter of dm (step dst) from the same-named parameter of
 * sm (step src): a collective call under MPI (mpmd_step_gather), then
 * mpmd_step_write on each copy dst holds here. (mpmd_step_copy_params does
 * the same for two steps of one process, not under MPI.) */
mpmd_status gpt_copy_params(mpmd_step *dst, const gpt_model *dm, mpmd_step *src, const gpt_model *sm,
                            mpmd_error *err);

/* The dropout keys of a step for `replicas` data-parallel replicas, 2
 * int32 each (replica d's at key[2d]): (a mix of seed and d, step). So the
 * masks are a pure function of (seed, step, replica), the same whatever
 * the schedule, and a resumed run draws those it would have drawn. */
void gpt_dropout_key(uint64_t seed, uint64_t step, int replicas, int32_t *key);

/* Feed a step its batch: tokens and targets of `bytes` each (one replica's
 * share, or all `replicas`' together, as mpmd_step_set_input takes them)
 * and, with dropout, the keys of (seed, step) for as many replicas. */
mpmd_status gpt_set_inputs(mpmd_step *st, const gpt_model *m, const int32_t *tok, const int32_t *tgt,
                           size_t bytes, uint64_t seed, uint64_t step, int replicas);

/* ---- data ------------------------------------------------------------------ */

/* A corpus of token ids: the bytes of a text (each byte is an id in
 * [0, 256)), the ids of a token file in llm.c's format, or a text encoded by
 * a tokenizer. Exactly one of `bytes`, `ids` and `ids32` is set; a byte
 * corpus keeps one byte per id, a token corpus two bytes per id while the
 * vocabulary fits 16 bits and four past it. */
typedef struct gpt_corpus {
    uint8_t *bytes;  /* a byte corpus: id i is bytes[i] (or NULL) */
    uint16_t *ids;   /* a token corpus: id i is ids[i] (or NULL) */
    int64_t len;     /* ids in the corpus */
    uint32_t *ids32; /* a token corpus of a vocabulary past 65536: id i is ids32[i] (or NULL) */
} gpt_corpus;

/* Id i of a corpus (0 <= i < len). */
static inline int32_t gpt_corpus_id(const gpt_corpus *c, int64_t i) {
    return c->ids ? (int32_t)c->ids[i] : c->ids32 ? (int32_t)c->ids32[i] : (int32_t)c->bytes[i];
}

/* The ids from position `from` on, as a corpus of its own that shares c's
 * memory (the held-out part of --eval); not to be freed. */
gpt_corpus gpt_corpus_tail(const gpt_corpus *c, int64_t from);

/* A deterministic English-like text of `len` bytes from `seed`: sentences
 * drawn from a small grammar over a fixed vocabulary of words, so a model
 * can learn spelling, spacing and word order and the loss falls well below
 * ln(256). Returns MPMD_ERR_NOMEM or MPMD_OK. */
mpmd_status gpt_corpus_generate(gpt_corpus *c, int64_t len, uint64_t seed, mpmd_error *err);

/* The bytes of a file. MPMD_ERR_IO when it cannot be read, MPMD_ERR_FORMAT
 * when it is shorter than min_len bytes. */
mpmd_status gpt_corpus_load(gpt_corpus *c, const char *path, int64_t min_len, mpmd_error *err);

/* GPT-2's vocabulary: the token ids of its BPE are in [0, 50257). */
#define GPT2_VOCAB 50257

/* llm.c's token files (its dev/data scripts write them, e.g. tinyshakespeare
 * and fineweb shards, and so does `mpmd tokenize`): a header of 256
 * little-endian int32,
 *   header[0] = 20240520 (the magic), header[1] = 1 (the version),
 *   header[2] = n (the token count), the rest 0,
 * then n little-endian uint16 token ids, and nothing after them. Its
 * format for vocabularies past 16 bits (data_common.py's "llama-3") has
 * magic 20240801, version 7 and uint32 ids. */
#define GPT_TOKENS_MAGIC 20240520
#define GPT_TOKENS_VERSION 1
#define GPT_TOKENS_MAGIC_WIDE 20240801
#define GPT_TOKENS_VERSION_WIDE 7
#define GPT_TOKENS_HEADER_INTS 256

/* The ids of a token file (either format). MPMD_ERR_IO when it cannot be
 * opened or read (or is not a regular file); MPMD_ERR_FORMAT, naming the
 * file and what is wrong, for a wrong magic or version, a count that does
 * not match the file's size, fewer than min_len tokens, or a token >= vocab. */
mpmd_status gpt_corpus_load_tokens(gpt_corpus *c, const char *path, int64_t vocab, int64_t min_len,
                                   mpmd_error *err);

/* The text of a file encoded by a tokenizer (mpmd_tokenizer.h; special
 * tokens written in the text become their ids), in memory. MPMD_ERR_IO for
 * a file that cannot be read; MPMD_ERR_FORMAT for text that is not UTF-8 or
 * gives fewer than min_len tokens, or a token >= vocab; the message names
 * the file. */
mpmd_status gpt_corpus_from_text(gpt_corpus *c, const char *path, const mpmd_tokenizer *tok, int64_t vocab,
                                 int64_t min_len, mpmd_error *err);

/* MPMD_OK when every id of the corpus is below vocab; else MPMD_ERR_FORMAT
 * naming `what` (the file, say), the first id out of range and its
 * position. */
mpmd_status gpt_corpus_check_vocab(const gpt_corpus *c, int64_t vocab, const char *what, mpmd_error *err);
void gpt_corpus_free(gpt_corpus *c);

/* The batch of a step, a pure function of (corpus, seed, step): row b is the
 * window of seq+1 ids at an offset drawn from (seed, step, b); tokens are
 * its first seq ids, targets the next-id shift. Both i32 [batch, seq].
 * The corpus must hold at least seq+1 ids. A byte corpus and a token corpus
 * holding the same ids give the same batches. */
void gpt_sample_batch(const gpt_corpus *c, int64_t batch, int64_t seq, uint64_t seed, uint64_t step,
                      int32_t *tokens, int32_t *targets);

/* Uniformly random tokens in [0, vocab) and their targets (the sequence
 * shifted by one), a pure function of (seed, step): for benchmarks. */
void gpt_random_batch(int64_t vocab, int64_t batch, int64_t seq, uint64_t seed, uint64_t step,
                      int32_t *tokens, int32_t *targets);

#endif
