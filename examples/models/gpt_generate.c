/* The GPT decode step with a key/value cache, and sampling (gpt_generate.h). */
#include "gpt_generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model ranks a configuration splits over (1: none). */
static int model_ranks(const gpt_config *c) { return c->tensor_parallel > 1 ? c->tensor_parallel : 1; }

/* Tensor parallelism (M model ranks): attention's dense layers split as
 * mpmd_self_attention splits the training step's, with its names and whole
 * shapes, so that one checkpoint or weights file loads into either. qkv by
 * output columns, this rank's heads' q, k and v columns (3 groups) from the
 * whole input h: [b, 1, 3 C/M]. */
static mpmd_value qkv_columns(mpmd_graph *g, mpmd_value h, int64_t C) {
    const mpmd_dtype dt = mpmd_value_type(g, h).dtype;
    mpmd_scope_push(g, "qkv");
    mpmd_value k = mpmd_param_split(g, "kernel", MPMD_SHAPE(C, 3 * C), MPMD_LECUN, 1, 3);
    mpmd_value bias = mpmd_param_split(g, "bias", MPMD_SHAPE(3 * C), MPMD_ZEROS, 0, 3);
    mpmd_scope_pop(g);
    mpmd_value y = mpmd_matmul(g, mpmd_pvary(g, h, "model"), mpmd_cast(g, k, dt), 0);
    return mpmd_add(g, y, mpmd_cast(g, bias, dt));
}

/* out by input rows: this rank's heads a [b, 1, C/M] times its rows of the
 * kernel, summed over the ranks, plus the whole bias: [b, 1, C]. */
static mpmd_value out_rows(mpmd_graph *g, mpmd_value a, int64_t C) {
    const mpmd_dtype dt = mpmd_value_type(g, a).dtype;
    mpmd_scope_push(g, "out");
    mpmd_value k = mpmd_param_split(g, "kernel", MPMD_SHAPE(C, C), MPMD_LECUN, 0, 1);
    mpmd_value bias = mpmd_param(g, "bias", MPMD_SHAPE(C), MPMD_ZEROS);
    mpmd_scope_pop(g);
    mpmd_value y = mpmd_all_reduce(g, mpmd_matmul(g, a, mpmd_cast(g, k, dt), 0), "model");
    return mpmd_add(g, y, mpmd_cast(g, bias, dt));
}

/* One block at one position: x [b, 1, C]; kc, vc the microbatch's cache rows
 * [b, T, H, Dh] (this model rank's H/M heads with tensor parallelism); *kn,
 * *vn get them with this position's k and v written. */
static mpmd_value block(mpmd_graph *g, const gpt_config *c, const char *name, mpmd_value x, mpmd_value kc,
                        mpmd_value vc, mpmd_value valid, mpmd_value at, mpmd_value neg, mpmd_value *kn,
                        mpmd_value *vn) {
    const int M = model_ranks(c);
    const int64_t C = c->width, dh = C / c->heads, H = c->heads / M, Cl = C / M,
                  b = c->batch / c->microbatches;
    static const int to_heads[4] = {0, 2, 1, 3}; /* [b, t, H, Dh] <-> [b, H, t, Dh] */
    mpmd_scope_push(g, name);
    mpmd_value h = mpmd_layer_norm_layer(g, "ln_0", x, 1e-5f);
    mpmd_scope_push(g, "attn");
    /* [b, 1, 3 Cl]: q, k, v blocks, head-major */
    mpmd_value qkv = M > 1 ? qkv_columns(g, h, C) : mpmd_dense(g, "qkv", h, 3 * C, 1);
    mpmd_value q = mpmd_reshape(g, mpmd_slice(g, qkv, 2, 0, Cl), MPMD_SHAPE(b, 1, H, dh));
    mpmd_value k = mpmd_reshape(g, mpmd_slice(g, qkv, 2, Cl, 2 * Cl), MPMD_SHAPE(b, 1, H, dh));
    mpmd_value v = mpmd_reshape(g, mpmd_slice(g, qkv, 2, 2 * Cl, 3 * Cl), MPMD_SHAPE(b, 1, H, dh));
    *kn = mpmd_where(g, at, k, kc); /* [b, T, H, Dh]: the cache with position p written */
    *vn = mpmd_where(g, at, v, vc);
    mpmd_value s = mpmd_matmul_scaled(g, mpmd_permute(g, q, to_heads), mpmd_permute(g, *kn, to_heads),
                                      MPMD_TRANS_B, 1.0f / sqrtf((float)dh)); /* [b, H, 1, T] */
    mpmd_value p = mpmd_softmax(g, mpmd_where(g, valid, s, neg));
    mpmd_value a = mpmd_matmul(g, p, mpmd_permute(g, *vn, to_heads), 0); /* [b, H, 1, Dh] */
    a = mpmd_reshape(g, mpmd_permute(g, a, to_heads), MPMD_SHAPE(b, 1, Cl));
    x = mpmd_add(g, x, M > 1 ? out_rows(g, a, C) : mpmd_dense(g, "out", a, C, 1));
    mpmd_scope_pop(g);
    x = mpmd_add(g, x, mpmd_mlp(g, "mlp", mpmd_layer_norm_layer(g, "ln_1", x, 1e-5f), 4 * C, C));
    mpmd_scope_pop(g);
    return x;
}

gpt_model gpt_decoder_model(const gpt_decoder *d) {
    gpt_model m;
    memset(&m, 0, sizeof m);
    m.cfg = d->cfg, m.g = d->g, m.n_params = d->n_params, m.params = d->params;
    m.tokens = m.targets = m.loss = m.dropout_key = MPMD_NONE;
    return m;
}

void gpt_decoder_free(gpt_decoder *d) {
    if (!d) return;
    mpmd_graph_free(d->g);
    free(d->params);
    memset(d, 0, sizeof *d);
}

mpmd_status gpt_build_decoder(const gpt_config *cfg, gpt_decoder *d, mpmd_error *err) {
    memset(d, 0, sizeof *d);
    gpt_config c = *cfg;
    c.dropout = 0.0f, c.remat = 0;
    mpmd_status st = gpt_config_check(&c, err);
    if (st) return st;
    if (c.arch != GPT_ARCH_GPT2)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "gpt: generation decodes GPT-2 blocks; LLaMA's rotary positions are fixed when "
                              "its graph is built");
    const int M = model_ranks(&c);
    if (c.heads % M)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "gpt: generation splits attention by heads over the model axis, and %d heads are not "
            "divisible by tensor_parallel %d",
            c.heads, M);
    d->cfg = c;
    /* H: this model rank's heads (all without tensor parallelism) */
    const int64_t C = c.width, H = c.heads / M, dh = C / c.heads, T = c.seq, B = c.batch, L = c.layers;
    mpmd_graph *g = d->g = mpmd_graph_new();
    if (!g) return mpmd_error_set(err, MPMD_ERR_NOMEM, "gpt: out of memory for the decoder");
    if (M > 1) mpmd_set_tensor_parallel(g, M); /* the embedding and the MLPs split themselves */
    mpmd_set_compute_dtype(g, c.compute);
    d->tokens = mpmd_input(g, "tokens", MPMD_I32, MPMD_SHAPE(B, 1));
    d->positions = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(B, 1));
    d->valid = mpmd_input(g, "valid", MPMD_F32, MPMD_SHAPE(1, 1, 1, T));
    d->at = mpmd_input(g, "at", MPMD_F32, MPMD_SHAPE(1, T, 1, 1));
    mpmd_scope_push(g, "wpe");
    mpmd_value wpe = mpmd_param(g, "embedding", MPMD_SHAPE(T, C), MPMD_NORMAL(0.01f));
    mpmd_scope_pop(g);
    mpmd_value *kc = calloc((size_t)(2 * L), sizeof *kc), *vc = kc ? kc + L : NULL;
    mpmd_value *kr = calloc((size_t)(2 * L), sizeof *kr), *vr = kr ? kr + L : NULL;
    int *blocks = malloc((size_t)c.stages * sizeof *blocks);
    if (!kc || !kr || !blocks) {
        free(kc), free(kr), free(blocks);
        gpt_decoder_free(d);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "gpt: out of memory for the decoder");
    }
    for (int i = 0; i < L; i++) {
        char name[48];
        snprintf(name, sizeof name, "cache/block_%d/k", i);
        kc[i] = mpmd_variable(g, name, c.compute, MPMD_SHAPE(B, T, H, dh), MPMD_ZEROS);
        snprintf(name, sizeof name, "cache/block_%d/v", i);
        vc[i] = mpmd_variable(g, name, c.compute, MPMD_SHAPE(B, T, H, dh), MPMD_ZEROS);
    }
    /* the masks in the compute dtype (made once, before the loop) */
    mpmd_value valid = mpmd_cast(g, d->valid, c.compute), at = mpmd_cast(g, d->at, c.compute);
    mpmd_value neg = mpmd_cast(g, mpmd_full(g, -1e30f, 0, NULL), c.compute); /* a masked score */
    mpmd_loop_begin(g, c.microbatches);
    mpmd_value tok = mpmd_microbatch(g, d->tokens);
    mpmd_value pos = mpmd_microbatch(g, d->positions);
    mpmd_value x = mpmd_embed(g, "wte", tok, c.vocab, C); /* [b, 1, C] */
    x = mpmd_add(g, x, mpmd_cast(g, mpmd_embedding(g, wpe, pos), c.compute));
    gpt_stage_blocks(&c, blocks);
    for (int i = 0, s = 0, left = blocks[0]; i < L; i++) {
        char name[32];
        snprintf(name, sizeof name, "block_%d", i);
        mpmd_value kn, vn;
        x = block(g, &c, name, x, mpmd_microbatch(g, kc[i]), mpmd_microbatch(g, vc[i]), valid, at, neg, &kn, &vn);
        kr[i] = mpmd_loop_reduce(g, kn, MPMD_REDUCE_CONCAT);
        vr[i] = mpmd_loop_reduce(g, vn, MPMD_REDUCE_CONCAT);
        if (--left == 0 && s + 1 < c.stages) {
            x = mpmd_enter_stage(g, x);
            left = blocks[++s];
        }
    }
    free(blocks);
    x = mpmd_layer_norm_layer(g, "ln_f", x, 1e-5f);
    /* tensor parallel with a vocabulary the ranks divide: the head split by
     * vocabulary columns as the training step's is (wte by rows), each
     * rank's logits gathered whole */
    const int vsplit = M > 1 && c.vocab % M == 0;
    if (vsplit) x = mpmd_pvary(g, x, "model");
    mpmd_value logits;
    if (c.tie_embeddings) {
        logits = mpmd_matmul(g, x, mpmd_cast(g, mpmd_lookup(g, "wte/embedding"), c.compute), MPMD_TRANS_B);
    } else if (vsplit) {
        mpmd_scope_push(g, "lm_head");
        mpmd_value k = mpmd_param_split(g, "kernel", MPMD_SHAPE(C, c.vocab), MPMD_LECUN, 1, 1);
        mpmd_scope_pop(g);
        logits = mpmd_matmul(g, x, mpmd_cast(g, k, c.compute), 0);
    } else {
        logits = mpmd_dense(g, "lm_head", x, c.vocab, MPMD_NO_BIAS);
    }
    if (vsplit) logits = mpmd_all_gather(g, logits, 2, "model"); /* [b, 1, vocab] */
    logits = mpmd_cast(g, mpmd_reshape(g, logits, MPMD_SHAPE(B / c.microbatches, c.vocab)), MPMD_F32);
    logits = mpmd_enter_stage(g, logits);
    d->logits = mpmd_loop_reduce(g, logits, MPMD_REDUCE_CONCAT);
    mpmd_loop_end(g);
    mpmd_keep(g, d->logits);
    for (int i = 0; i < L; i++) {
        mpmd_assign(g, kc[i], kr[i]);
        mpmd_assign(g, vc[i], vr[i]);
    }
    free(kc), free(kr);
    int np = mpmd_graph_params(g, NULL, 0);
    if (!(d->params = calloc((size_t)(np > 0 ? np : 1), sizeof *d->params))) {
        gpt_decoder_free(d);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "gpt: out of memory for the decoder");
    }
    d->n_params = mpmd_graph_params(g, d->params, np);
    if ((st = mpmd_graph_status(g)) != MPMD_OK) {
        mpmd_error_set(err, st, "gpt: building the decoder failed: %s", mpmd_graph_error(g));
        gpt_decoder_free(d);
        return st;
    }
    return MPMD_OK;
}

mpmd_status gpt_decode(mpmd_step *st, const gpt_decoder *d, const int32_t *tok, int64_t pos, float *logits,
                       mpmd_error *err) {
    const gpt_config *c = &d->cfg;
    const int64_t B = c->batch, T = c->seq;
    if (pos < 0 || pos >= T)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "gpt: position %lld is outside the model's %lld positions",
                              (long long)pos, (long long)T);
    int32_t *p = malloc((size_t)B * sizeof *p);
    float *valid = malloc((size_t)T * sizeof *valid), *at = malloc((size_t)T * sizeof *at);
    mpmd_status rc = p && valid && at ? MPMD_OK : MPMD_ERR_NOMEM;
    if (rc) mpmd_error_set(err, rc, "gpt: out of memory decoding");
    for (int64_t i = 0; !rc && i < B; i++)
        p[i] = (int32_t)pos;
    for (int64_t t = 0; !rc && t < T; t++)
        valid[t] = t <= pos ? 1.0f : 0.0f, at[t] = t == pos ? 1.0f : 0.0f;
    if (!rc && ((rc = mpmd_step_set_input(st, d->tokens, tok, (size_t)B * sizeof *tok)) ||
                (rc = mpmd_step_set_input(st, d->positions, p, (size_t)B * sizeof *p)) ||
                (rc = mpmd_step_set_input(st, d->valid, valid, (size_t)T * sizeof *valid)) ||
                (rc = mpmd_step_set_input(st, d->at, at, (size_t)T * sizeof *at)) || (rc = mpmd_step_run(st)) ||
                (rc = mpmd_step_gather(st, d->logits, logits, (size_t)(B * c->vocab) * sizeof *logits))))
        mpmd_error_set(err, rc, "gpt: decoding position %lld: %s", (long long)pos, mpmd_step_error(st));
    free(p), free(valid), free(at);
    return rc;
}

/* splitmix64 of a few words: the uniform number of one draw */
static double draw(uint64_t seed, int64_t sequence, int64_t pos) {
    uint64_t x = seed ^ 0x67656e6572617465ull;
    uint64_t w[2] = {(uint64_t)sequence, (uint64_t)pos};
    for (int i = 0; i < 3; i++) {
        x += 0x9e3779b97f4a7c15ull + (i ? w[i - 1] : 0);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
    }
    return (double)(x >> 11) * 0x1.0p-53;
}

/* A min-heap of k floats: move heap[i] down until neither child is smaller. */
static void sift_down(float *heap, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        if (l < k && heap[l] < heap[m]) m = l;
        if (l + 1 < k && heap[l + 1] < heap[m]) m = l + 1;
        if (m == i) return;
        float t = heap[i];
        heap[i] = heap[m], heap[m] = t, i = m;
    }
}

/* The k-th largest of x[0..n) (1 <= k <= n; ties counted: the k-th entry
 * of x sorted in descending order), with a min-heap of the k largest seen
 * so far: O(n log k) at worst (the k partial selections it replaces took
 * O(k n): 0.7 s a token at k 50,256 of GPT-2's 50,257). heap has room for
 * k values. NaN counts as below every number. */
static float kth_largest(const float *x, int64_t n, int64_t k, float *heap) {
    for (int64_t i = 0; i < k; i++)
        heap[i] = isnan(x[i]) ? -INFINITY : x[i];
    for (int64_t i = k / 2; i-- > 0;)
        sift_down(heap, k, i);
    for (int64_t i = k; i < n; i++)
        if (x[i] > heap[0]) { /* one of the k largest so far: the smallest kept drops out */
            heap[0] = x[i];
            sift_down(heap, k, 0);
        }
    return heap[0]; /* the smallest of the k largest */
}

int32_t gpt_sample_token(const float *logits, int64_t vocab, float temperature, int top_k, uint64_t seed,
                         int64_t sequence, int64_t pos) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (!(temperature > 0.0f)) return (int32_t)best;
    /* the threshold of the top k: the k-th largest value (ties all kept) */
    double floor_v = -INFINITY;
    if (top_k > 0 && top_k < vocab) {
        float *heap = malloc((size_t)top_k * sizeof *heap);
        if (heap) {
            floor_v = kth_largest(logits, vocab, top_k, heap);
            free(heap);
        }
    }
    double total = 0, mx = logits[best];
    for (int64_t v = 0; v < vocab; v++)
        if (logits[v] >= floor_v) total += exp(((double)logits[v] - mx) / temperature);
    double u = draw(seed, sequence, pos) * total, acc = 0;
    int64_t last = best;
    for (int64_t v = 0; v < vocab; v++) {
        if (logits[v] < floor_v) continue;
        acc += exp(((double)logits[v] - mx) / temperature);
        last = v;
        if (u < acc) return (int32_t)v;
    }
    return (int32_t)last;
}
