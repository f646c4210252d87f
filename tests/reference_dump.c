/* reference_dump - what mpmd computes, written out for an independent
 * reference (tests/torch_reference.py, PyTorch in float64) to check.
 *
 *   reference_dump DIR
 *
 * writes safetensors files (the format's reader in the script is a dozen
 * lines of Python) into DIR:
 *
 *   gpt.safetensors    the GPT example's model (tied embeddings, 2 layers,
 *                      2 microbatches): the batch, every parameter before
 *                      the step, its loop-summed gradient, and after one
 *                      AdamW step; the loss and the configuration as
 *                      metadata
 *   block.safetensors  the tutorial's post-LN Block, two of them, with the
 *                      MSE loss of the tutorial: the same quantities
 *   op_<name>.safetensors  one op (or a short chain of them) on random
 *                      operands: the operands, a fixed random weight r, the
 *                      output y, and the gradients of sum(y * r) with
 *                      respect to every float operand
 *
 * Each is the unpipelined loop's result: the pipeline tests show every
 * schedule gives the same bits. */
#include "gpt_model.h"
#include "graph/graph.h"
#include "io/safetensors.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXT = 256 };

/* The tensors of one file, named, with their data kept until written. */
typedef struct out_file {
    mpmd_st_out t[MAXT];
    char *names[MAXT];
    int64_t *dims[MAXT];
    void *data[MAXT];
    int n;
    mpmd_st_kv meta[8];
    int nmeta;
} out_file;

static void add(out_file *f, const char *name, const char *dtype, int ndim, const int64_t *dim,
                const void *src, size_t bytes) {
    if (f->n == MAXT) {
        fprintf(stderr, "reference_dump: too many tensors\n");
        exit(1);
    }
    int k = f->n++;
    f->names[k] = strdup(name);
    f->dims[k] = malloc(sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
    memcpy(f->dims[k], dim, sizeof(int64_t) * (size_t)ndim);
    f->data[k] = malloc(bytes ? bytes : 1);
    memcpy(f->data[k], src, bytes);
    f->t[k] = (mpmd_st_out){f->names[k], dtype, ndim, f->dims[k], f->data[k]};
}

static void meta(out_file *f, const char *key, const char *value) {
    f->meta[f->nmeta++] = (mpmd_st_kv){strdup(key), strdup(value)};
}

static int write_file(out_file *f, const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    mpmd_error err;
    int rc = mpmd_st_write(path, f->n, f->t, f->nmeta, f->meta, 0, &err);
    if (rc) fprintf(stderr, "reference_dump: %s\n", err.msg);
    for (int k = 0; k < f->n; k++)
        free(f->names[k]), free(f->dims[k]), free(f->data[k]);
    for (int k = 0; k < f->nmeta; k++)
        free((char *)f->meta[k].key), free((char *)f->meta[k].value);
    memset(f, 0, sizeof *f);
    return rc;
}

/* Read value v of a step into a fresh buffer. */
static void *read_value(mpmd_step *st, const mpmd_graph *g, mpmd_value v, size_t *bytes) {
    *bytes = mpmd_type_bytes(mpmd_type_of(g, v));
    void *p = malloc(*bytes ? *bytes : 1);
    if (mpmd_step_read(st, v, p, *bytes)) {
        fprintf(stderr, "reference_dump: reading %%%d: %s\n", (int)v.id, mpmd_step_error(st));
        exit(1);
    }
    return p;
}

static void add_value(out_file *f, const char *prefix, mpmd_step *st, const mpmd_graph *g, mpmd_value v,
                      const char *name) {
    size_t b;
    void *p = read_value(st, g, v, &b);
    const mpmd_type *t = mpmd_type_of(g, v);
    char full[512];
    snprintf(full, sizeof full, "%s/%s", prefix, name);
    add(f, full, t->dtype == MPMD_I32 ? "I32" : "F32", t->ndim, t->dim, p, b);
    free(p);
}

/* One training step of a model: parameters before, gradients, parameters
 * after, and the inputs. */
static int dump_step(const char *dir, const char *name, mpmd_graph *g, int np, const mpmd_value *params,
                     const mpmd_value *grads, mpmd_value loss, mpmd_value norm, int nin,
                     const mpmd_value *inputs, void **in_data, const char *config) {
    mpmd_error err;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.seed = 3;
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    if (!st) {
        fprintf(stderr, "reference_dump: %s: %s\n", name, err.msg);
        return 1;
    }
    out_file *f = calloc(1, sizeof *f);
    for (int i = 0; i < np; i++)
        add_value(f, "init", st, g, params[i], mpmd_value_name(g, params[i]));
    for (int i = 0; i < nin; i++) {
        const mpmd_type *t = mpmd_type_of(g, inputs[i]);
        if (mpmd_step_set_input(st, inputs[i], in_data[i], mpmd_type_bytes(t))) {
            fprintf(stderr, "reference_dump: %s\n", mpmd_step_error(st));
            return 1;
        }
        char full[256];
        snprintf(full, sizeof full, "input/%s", mpmd_value_name(g, inputs[i]));
        add(f, full, t->dtype == MPMD_I32 ? "I32" : "F32", t->ndim, t->dim, in_data[i], mpmd_type_bytes(t));
    }
    if (mpmd_step_run(st)) {
        fprintf(stderr, "reference_dump: %s: %s\n", name, mpmd_step_error(st));
        return 1;
    }
    for (int i = 0; i < np; i++) {
        add_value(f, "grad", st, g, grads[i], mpmd_value_name(g, params[i]));
        add_value(f, "after", st, g, params[i], mpmd_value_name(g, params[i]));
    }
    float l;
    if (mpmd_step_read(st, loss, &l, sizeof l)) return 1;
    char lb[64];
    snprintf(lb, sizeof lb, "%.9g", (double)l);
    meta(f, "loss", lb);
    char nb[64]; /* the gradients' global norm before clipping, when the step clips */
    if (mpmd_is_value(norm)) {
        float nv;
        if (mpmd_step_read(st, norm, &nv, sizeof nv)) return 1;
        snprintf(nb, sizeof nb, "%.9g", (double)nv);
        meta(f, "grad_norm", nb);
    }
    meta(f, "config", config);
    mpmd_step_free(st);
    int rc = write_file(f, dir, name);
    free(f);
    return rc;
}

/* The GPT example's step (clip > 0: its gradients clipped to that global
 * norm before AdamW, gpt --clip), as name.safetensors. */
static int dump_gpt(const char *dir, const char *name, float clip) {
    gpt_config c = gpt_config_default();
    c.vocab = 64, c.seq = 16, c.width = 32, c.heads = 4, c.layers = 2, c.batch = 4, c.microbatches = 2;
    c.tie_embeddings = 1, c.lr = 1e-2f, c.clip = clip;
    /* clipping: an eps of 0.1, above the gradients, makes AdamW's first step
     * nearly linear in them, so the update shows whether they were clipped */
    c.adam = (mpmd_adam_opts){0.9f, 0.95f, clip > 0 ? 0.1f : 1e-8f, 0.1f, NULL};
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        fprintf(stderr, "reference_dump: %s\n", err.msg);
        return 1;
    }
    size_t n = (size_t)(c.batch * c.seq);
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    gpt_random_batch(c.vocab, c.batch, c.seq, 11, 1, tok, tgt);
    char config[512];
    snprintf(
        config, sizeof config,
        "{\"vocab\": %lld, \"seq\": %lld, \"width\": %lld, \"heads\": %d, \"layers\": %d, \"batch\": %lld, "
        "\"microbatches\": %d, \"lr\": %.9g, \"b1\": %.9g, \"b2\": %.9g, \"eps\": %.9g, \"wd\": %.9g, "
        "\"clip\": %.9g, \"decay\": \"%s\"}",
        (long long)c.vocab, (long long)c.seq, (long long)c.width, c.heads, c.layers, (long long)c.batch,
        c.microbatches, (double)c.lr, (double)c.adam.b1, (double)c.adam.b2, (double)c.adam.eps,
        (double)c.adam.weight_decay, (double)c.clip, c.decay_all ? "all" : "matrices");
    mpmd_value inputs[2] = {m.tokens, m.targets};
    void *data[2] = {tok, tgt};
    int rc = dump_step(dir, name, m.g, m.n_params, m.params, m.grads, m.loss, m.grad_norm, 2, inputs, data,
                       config);
    free(tok), free(tgt);
    gpt_model_free(&m);
    return rc;
}

/* The tutorial's model at a small size: two post-LN Blocks (not causal),
 * the MSE loss summed over 2 microbatches, optax.adamw(1e-3) with weight
 * decay 1e-4. */
static int dump_block(const char *dir) {
    enum { B = 4, T = 6, C = 16, H = 2, MB = 2 };
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_value y = mpmd_input(g, "targets", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_microbatch(g, x), t = mpmd_microbatch(g, y);
    h = mpmd_transformer_block(g, "block_0", h, H, 0);
    h = mpmd_transformer_block(g, "block_1", h, H, 0);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, mpmd_sub(g, h, t)), 0, NULL, 0);
    mpmd_value params[64], grads[64];
    int np = mpmd_graph_params(g, params, 64);
    mpmd_grad(g, loss, np, params, grads);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++) {
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
        mpmd_keep(g, grads[i]);
    }
    mpmd_loop_end(g);
    mpmd_adam_opts adam = MPMD_ADAM_DEFAULTS;
    adam.weight_decay = 1e-4f;
    mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 1e-3f), adam);
    mpmd_keep(g, total);
    if (mpmd_graph_status(g)) {
        fprintf(stderr, "reference_dump: block: %s\n", mpmd_graph_error(g));
        return 1;
    }
    float xs[B * T * C], ys[B * T * C];
    tu_fill(xs, B * T * C, 21);
    tu_fill(ys, B * T * C, 22);
    mpmd_value inputs[2] = {x, y};
    void *data[2] = {xs, ys};
    char config[256];
    snprintf(config, sizeof config,
             "{\"heads\": %d, \"eps\": 1e-6, \"microbatches\": %d, \"lr\": 1e-3, \"b1\": 0.9, \"b2\": 0.999, "
             "\"eps_adam\": 1e-8, \"wd\": 1e-4}",
             H, MB);
    int rc = dump_step(dir, "block", g, np, params, grads, total, MPMD_NONE, 2, inputs, data, config);
    mpmd_graph_free(g);
    return rc;
}

/* ---- ops ------------------------------------------------------------------ */

typedef mpmd_value (*op_fn)(mpmd_graph *g, const mpmd_value *p);

#define OP(name, body)                                                                                       \
    static mpmd_value op_##name(mpmd_graph *g, const mpmd_value *p) {                                        \
        (void)g, (void)p;                                                                                    \
        body                                                                                                 \
    }

static const int AX1[1] = {1}, AX0[1] = {0}, PERM[3] = {2, 0, 1};
static mpmd_value g_ids, g_labels; /* the integer operands of the case being built */

OP(matmul, return mpmd_matmul(g, p[0], p[1], 0);)
OP(matmul_ta, return mpmd_matmul(g, p[0], p[1], MPMD_TRANS_A);)
OP(matmul_tb, return mpmd_matmul(g, p[0], p[1], MPMD_TRANS_B);)
OP(matmul_batched, return mpmd_matmul(g, p[0], p[1], 0);)
OP(matmul_scaled, return mpmd_matmul_scaled(g, p[0], p[1], MPMD_TRANS_B, 0.35f);)
OP(add_bcast, return mpmd_add(g, p[0], p[1]);)
OP(sub, return mpmd_sub(g, p[0], p[1]);)
OP(mul_bcast, return mpmd_mul(g, p[0], p[1]);)
OP(div, return mpmd_div(g, p[0], mpmd_add_scalar(g, mpmd_exp(g, p[1]), 0.5f));)
OP(exp, return mpmd_exp(g, p[0]);)
OP(log, return mpmd_log(g, mpmd_add_scalar(g, mpmd_exp(g, p[0]), 1.0f));)
OP(tanh, return mpmd_tanh(g, p[0]);)
OP(gelu, return mpmd_gelu(g, p[0]);)
OP(relu, return mpmd_relu(g, p[0]);)
OP(sqrt, return mpmd_sqrt(g, mpmd_exp(g, p[0]));)
OP(rsqrt, return mpmd_rsqrt(g, mpmd_add_scalar(g, mpmd_exp(g, p[0]), 0.1f));)
OP(square, return mpmd_square(g, p[0]);)
OP(neg_scalar, return mpmd_mul_scalar(g, mpmd_neg(g, p[0]), 1.5f);)
OP(softmax, return mpmd_softmax(g, p[0]);)
OP(log_softmax, return mpmd_log_softmax(g, p[0]);)
OP(softmax_causal, return mpmd_softmax_causal(g, p[0]);)
OP(layer_norm, return mpmd_layer_norm(g, p[0], p[1], p[2], 1e-5f);)
OP(cross_entropy, return mpmd_cross_entropy(g, p[0], g_labels);)
OP(attention, return mpmd_attention(g, p[0], p[1], p[2], 0);)
OP(attention_causal, return mpmd_attention(g, p[0], p[1], p[2], 1);)
OP(sum, return mpmd_sum(g, p[0], 1, AX1, 0);)
OP(mean, return mpmd_mean(g, p[0], 1, AX0, 1);)
OP(max, return mpmd_max(g, p[0], 1, AX1, 0);)
OP(permute, return mpmd_permute(g, p[0], PERM);)
OP(reshape, return mpmd_reshape(g, p[0], MPMD_SHAPE(4, 6));)
OP(slice, return mpmd_slice(g, p[0], 1, 1, 3);)
OP(concat, return mpmd_concat(g, 2, p, 1);)
OP(embedding, return mpmd_embedding(g, p[0], g_ids);)
OP(broadcast_to, return mpmd_broadcast_to(g, p[0], MPMD_SHAPE(3, 2, 4));)
OP(sum_to, return mpmd_sum_to(g, p[0], MPMD_SHAPE(1, 4));)
OP(sigmoid, return mpmd_sigmoid(g, p[0]);)
OP(silu, return mpmd_silu(g, p[0]);)
OP(maximum_bcast, return mpmd_maximum(g, p[0], p[1]);)
OP(minimum, return mpmd_minimum(g, p[0], p[1]);)
OP(where_gt,
   return mpmd_where(g, mpmd_compare(g, p[0], p[1], MPMD_CMP_GT), p[0], mpmd_mul_scalar(g, p[1], 0.5f));)
OP(rms_norm, return mpmd_rms_norm(g, p[0], p[1], 1e-6f);)
OP(rope, return mpmd_rope(g, p[0], 10000.0f, 3);)
OP(take_axis1, return mpmd_take(g, p[0], g_ids, 1);)

typedef struct op_case {
    const char *name;
    op_fn fn;
    int n;
    int ndim[3];
    int64_t dim[3][4];
} op_case;

static const op_case cases[] = {
    {"matmul", op_matmul, 2, {2, 2}, {{3, 4}, {4, 5}}},
    {"matmul_ta", op_matmul_ta, 2, {2, 2}, {{4, 3}, {4, 5}}},
    {"matmul_tb", op_matmul_tb, 2, {3, 2}, {{2, 3, 4}, {5, 4}}},
    {"matmul_batched", op_matmul_batched, 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}},
    {"matmul_scaled", op_matmul_scaled, 2, {2, 2}, {{3, 4}, {5, 4}}},
    {"add_bcast", op_add_bcast, 2, {2, 1}, {{3, 4}, {4}}},
    {"sub", op_sub, 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"mul_bcast", op_mul_bcast, 2, {3, 2}, {{2, 3, 4}, {3, 1}}},
    {"div", op_div, 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"exp", op_exp, 1, {2}, {{3, 4}}},
    {"log", op_log, 1, {2}, {{3, 4}}},
    {"tanh", op_tanh, 1, {2}, {{3, 4}}},
    {"gelu", op_gelu, 1, {2}, {{3, 4}}},
    {"relu", op_relu, 1, {2}, {{3, 4}}},
    {"sqrt", op_sqrt, 1, {2}, {{3, 4}}},
    {"rsqrt", op_rsqrt, 1, {2}, {{3, 4}}},
    {"square", op_square, 1, {2}, {{3, 4}}},
    {"neg_scalar", op_neg_scalar, 1, {2}, {{3, 4}}},
    {"softmax", op_softmax, 1, {2}, {{3, 7}}},
    {"log_softmax", op_log_softmax, 1, {2}, {{3, 7}}},
    {"softmax_causal", op_softmax_causal, 1, {3}, {{2, 5, 5}}},
    {"layer_norm", op_layer_norm, 3, {2, 1, 1}, {{3, 8}, {8}, {8}}},
    {"cross_entropy", op_cross_entropy, 1, {2}, {{6, 7}}},
    {"attention", op_attention, 3, {4, 4, 4}, {{2, 5, 2, 4}, {2, 5, 2, 4}, {2, 5, 2, 4}}},
    {"attention_causal", op_attention_causal, 3, {4, 4, 4}, {{2, 5, 2, 4}, {2, 5, 2, 4}, {2, 5, 2, 4}}},
    /* more positions than the CPU kernel's query block: several blocks */
    {"attention_long", op_attention, 3, {4, 4, 4}, {{1, 150, 2, 8}, {1, 150, 2, 8}, {1, 150, 2, 8}}},
    {"attn_causal_long", op_attention_causal, 3, {4, 4, 4}, {{1, 150, 2, 8}, {1, 150, 2, 8}, {1, 150, 2, 8}}},
    {"sum", op_sum, 1, {3}, {{2, 3, 4}}},
    {"mean", op_mean, 1, {2}, {{3, 4}}},
    {"max", op_max, 1, {2}, {{3, 5}}},
    {"permute", op_permute, 1, {3}, {{2, 3, 4}}},
    {"reshape", op_reshape, 1, {3}, {{2, 3, 4}}},
    {"slice", op_slice, 1, {2}, {{3, 5}}},
    {"concat", op_concat, 2, {2, 2}, {{3, 2}, {3, 4}}},
    {"embedding", op_embedding, 1, {2}, {{10, 4}}},
    {"broadcast_to", op_broadcast_to, 1, {2}, {{2, 4}}},
    {"sum_to", op_sum_to, 1, {3}, {{2, 3, 4}}},
    {"sigmoid", op_sigmoid, 1, {2}, {{3, 4}}},
    {"silu", op_silu, 1, {2}, {{3, 4}}},
    {"maximum_bcast", op_maximum_bcast, 2, {2, 1}, {{3, 4}, {4}}},
    {"minimum", op_minimum, 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"where_gt", op_where_gt, 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"rms_norm", op_rms_norm, 2, {2, 1}, {{3, 8}, {8}}},
    {"rope", op_rope, 1, {4}, {{2, 5, 2, 6}}},
    {"take_axis1", op_take_axis1, 1, {3}, {{2, 10, 3}}},
};

static int dump_op(const char *dir, const op_case *c, uint64_t seed) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value p[3], grads[3];
    float *vals[3];
    /* the operands: inputs, made differentiable by adding a zero parameter */
    mpmd_value ins[3];
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        ins[i] = mpmd_input(g, name, MPMD_F32, c->ndim[i], c->dim[i]);
        snprintf(name, sizeof name, "p%d", i);
        mpmd_value z = mpmd_param(g, name, c->ndim[i], c->dim[i], MPMD_ZEROS);
        p[i] = mpmd_add(g, ins[i], z);
        grads[i] = z; /* differentiated with respect to the zero parameter: d/dx */
    }
    int32_t ids[6] = {3, 0, 9, 3, 7, 1}, labels[6] = {0, 6, 2, 2, 5, 1};
    g_ids = mpmd_constant(g, MPMD_I32, MPMD_SHAPE(6), ids);
    g_labels = mpmd_constant(g, MPMD_I32, MPMD_SHAPE(6), labels);
    mpmd_value y = c->fn(g, p);
    mpmd_keep(g, y);
    const mpmd_type *yt = mpmd_type_of(g, y);
    mpmd_type yty = yt ? *yt : (mpmd_type){0};
    int64_t ny = yt ? mpmd_type_numel(yt) : 0;
    mpmd_value r = mpmd_input(g, "r", MPMD_F32, yty.ndim, yty.dim);
    int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, r), yty.ndim, all, 0);
    mpmd_value zs[3];
    for (int i = 0; i < c->n; i++)
        zs[i] = grads[i];
    mpmd_grad(g, loss, c->n, zs, grads);
    for (int i = 0; i < c->n; i++)
        mpmd_keep(g, grads[i]);
    if (mpmd_graph_status(g)) {
        fprintf(stderr, "reference_dump: op %s: %s\n", c->name, mpmd_graph_error(g));
        return 1;
    }
    mpmd_error err;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    if (!st) {
        fprintf(stderr, "reference_dump: op %s: %s\n", c->name, err.msg);
        return 1;
    }
    out_file *f = calloc(1, sizeof *f);
    for (int i = 0; i < c->n; i++) {
        int64_t k = 1;
        for (int d = 0; d < c->ndim[i]; d++)
            k *= c->dim[i][d];
        vals[i] = malloc(sizeof(float) * (size_t)k);
        tu_fill(vals[i], k, seed + (uint64_t)i);
        for (int64_t j = 0; j < k; j++)
            vals[i][j] *= 2.0f; /* [-2, 2): the interesting part of every function here */
        mpmd_step_set_input(st, ins[i], vals[i], sizeof(float) * (size_t)k);
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        add(f, name, "F32", c->ndim[i], c->dim[i], vals[i], sizeof(float) * (size_t)k);
    }
    float *rv = malloc(sizeof(float) * (size_t)(ny ? ny : 1));
    tu_fill(rv, ny, seed + 100);
    mpmd_step_set_input(st, r, rv, sizeof(float) * (size_t)ny);
    add(f, "r", "F32", yty.ndim, yty.dim, rv, sizeof(float) * (size_t)ny);
    if (mpmd_step_run(st)) {
        fprintf(stderr, "reference_dump: op %s: %s\n", c->name, mpmd_step_error(st));
        return 1;
    }
    add_value(f, "out", st, g, y, "y");
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        add_value(f, "grad", st, g, grads[i], name);
    }
    meta(f, "op", c->name);
    char fname[64];
    snprintf(fname, sizeof fname, "op_%s", c->name);
    int rc = write_file(f, dir, fname);
    for (int i = 0; i < c->n; i++)
        free(vals[i]);
    free(rv), free(f);
    mpmd_step_free(st);
    mpmd_graph_free(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: reference_dump DIR\n");
        return 2;
    }
    /* clipped to 0.05: below the first step's gradient norm, so the clip acts */
    int rc = dump_gpt(argv[1], "gpt", 0.0f) || dump_gpt(argv[1], "gpt_clip", 0.05f) || dump_block(argv[1]);
    for (size_t k = 0; !rc && k < sizeof cases / sizeof cases[0]; k++)
        rc = dump_op(argv[1], &cases[k], 1000 + 10 * k);
    if (!rc)
        printf("reference_dump: gpt, block and %zu ops written to %s\n", sizeof cases / sizeof cases[0],
               argv[1]);
    return rc;
}
