/* Layers: small compositions of ops with their parameters, named the way
 * flax names them. A layer "name" pushes a scope, so its parameters are
 * "<scope>/<name>/kernel", "<scope>/<name>/bias", ... and an error inside it
 * names the scope too. Layers add no kernels and no gradient rules of their
 * own: they are ordinary ops, differentiated op by op.
 */
#include "layers.h"

#include "../ops/nn.h"

/* A layer's parameter. Layers are called while the loop body is traced (as
 * in mpmd.h's example), but mpmd_param refuses to be called in the body;
 * a parameter is a leaf that belongs before the loop either way (the graph
 * core emits every leaf there), so the layer creates it from there. */
static mpmd_value layer_param(mpmd_graph *g, const char *name, int ndim, const int64_t *dims,
                              mpmd_init init) {
    int saved = g->region;
    if (g->region == MPMD_REGION_BODY) g->region = MPMD_REGION_PRE;
    mpmd_value p = mpmd_param(g, name, ndim, dims, init);
    g->region = saved;
    return p;
}

/* The same for a parameter split over the model axis (mpmd_param_split):
 * dims whole, this rank's part along `axis`. */
static mpmd_value layer_param_split(mpmd_graph *g, const char *name, int ndim, const int64_t *dims,
                                    mpmd_init init, int axis, int groups) {
    int saved = g->region;
    if (g->region == MPMD_REGION_BODY) g->region = MPMD_REGION_PRE;
    mpmd_value p = mpmd_param_split(g, name, ndim, dims, init, axis, groups);
    g->region = saved;
    return p;
}

/* Tensor parallelism (mpmd_set_tensor_parallel): a dense layer whole on
 * every model rank, split by its output columns (each rank computes its
 * columns from the whole input: the input goes through pvary, whose
 * gradient sums the ranks' parts), or by its input rows (each rank's part
 * of the input times its rows, summed over the ranks by an all-reduce; the
 * bias, whole, added after). `groups` splits the columns in that many
 * blocks each (a fused q|k|v kernel). */
enum { DENSE_WHOLE = 0, DENSE_COLUMNS = 1, DENSE_ROWS = 2, DENSE_COLUMNS_VARIED = 3 };

/* The input of several column-split layers: through pvary once, so that
 * their input gradients are summed over the ranks by one all-reduce (each
 * layer then takes DENSE_COLUMNS_VARIED). */
static mpmd_value varied(mpmd_graph *g, mpmd_value x) {
    return g->model_parallel > 1 ? mpmd_pvary(g, x, "model") : x;
}

/* A layer's size that the model axis must divide: 1 when it does. */
static int model_divides(mpmd_graph *g, const char *fn, const char *name, const char *what, int64_t n) {
    if (n % g->model_parallel == 0) return 1;
    mpmd_fail(g, MPMD_ERR_SHAPE,
              "%s \"%s%s%s\": %lld %s are not divisible by the model axis (tensor_parallel %d)", fn, g->scope,
              g->scope[0] ? "/" : "", name, (long long)n, what, g->model_parallel);
    return 0;
}

/* Every layer checks its input the same way before pushing its scope. */
static int layer_input_ok(mpmd_graph *g, const char *fn, const char *name, mpmd_value x) {
    if (!mpmd_check_operands(g, fn, 1, &x)) return 0;
    if (!name || !*name) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: a layer name is required", fn);
        return 0;
    }
    return 1;
}

/* A layer's input checked as a float tensor [..., features]. */
static int features_input_ok(mpmd_graph *g, const char *fn, const char *name, mpmd_value x) {
    if (!layer_input_ok(g, fn, name, x)) return 0;
    const mpmd_type *xt = mpmd_type_of(g, x);
    if (mpmd_dtype_is_float(xt->dtype) && xt->ndim >= 1) return 1;
    mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": input is %s; a float tensor [..., features] is expected", fn,
              name, mpmd_tstr(g, x));
    return 0;
}

/* A layer's f32 parameter as its input's dtype (mixed precision: the f32
 * master stays the parameter; the cast's gradient comes back in f32). */
static mpmd_value like(mpmd_graph *g, mpmd_value p, mpmd_dtype dt) {
    return mpmd_is_value(p) ? mpmd_cast(g, p, dt) : p;
}

/* y = x @ kernel (+ bias): x [..., in], kernel [in, out], bias [out]; with
 * the model axis split as `mode` says (x is then this rank's part of the
 * input for DENSE_ROWS, out the whole output width). */
static mpmd_value dense(mpmd_graph *g, const char *name, mpmd_value x, int64_t out, int use_bias, int mode,
                        int groups) {
    const char *fn = "mpmd_dense";
    if (!features_input_ok(g, fn, name, x)) return MPMD_NONE;
    mpmd_type xt = *mpmd_type_of(g, x);
    if (out < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": %lld output features; at least 1 is required", fn,
                         name, (long long)out);
    const int M = g->model_parallel;
    if (M < 2) mode = DENSE_WHOLE;
    int64_t in = xt.dim[xt.ndim - 1];
    const int cols = mode == DENSE_COLUMNS || mode == DENSE_COLUMNS_VARIED;
    const int64_t in_whole = mode == DENSE_ROWS ? in * M : in, out_here = cols ? out / M : out;
    mpmd_scope_push(g, name);
    mpmd_value k, b = MPMD_NONE;
    if (mode == DENSE_WHOLE) {
        k = layer_param(g, "kernel", MPMD_SHAPE(in, out), MPMD_LECUN);
        if (use_bias) b = layer_param(g, "bias", MPMD_SHAPE(out), MPMD_ZEROS);
    } else if (cols) {
        k = layer_param_split(g, "kernel", MPMD_SHAPE(in, out), MPMD_LECUN, 1, groups);
        if (use_bias) b = layer_param_split(g, "bias", MPMD_SHAPE(out), MPMD_ZEROS, 0, groups);
    } else {
        k = layer_param_split(g, "kernel", MPMD_SHAPE(in_whole, out), MPMD_LECUN, 0, 1);
        if (use_bias) b = layer_param(g, "bias", MPMD_SHAPE(out), MPMD_ZEROS);
    }
    mpmd_scope_pop(g);
    k = like(g, k, xt.dtype);
    b = like(g, b, xt.dtype);
    if (mode == DENSE_COLUMNS) x = mpmd_pvary(g, x, "model");
    /* A vector is a one-row matrix for the product. */
    mpmd_value x2 = xt.ndim == 1 ? mpmd_reshape(g, x, MPMD_SHAPE(1, in)) : x;
    mpmd_value y = mpmd_matmul(g, x2, k, 0);
    if (xt.ndim == 1) y = mpmd_reshape(g, y, MPMD_SHAPE(out_here));
    if (mode == DENSE_ROWS) y = mpmd_all_reduce(g, y, "model");
    if (use_bias) y = mpmd_add(g, y, b);
    return y;
}

mpmd_value mpmd_dense(mpmd_graph *g, const char *name, mpmd_value x, int64_t out, int use_bias) {
    return dense(g, name, x, out, use_bias, DENSE_WHOLE, 1);
}

/* A norm layer over the last axis: parameter name/scale (ones), and with a
 * bias name/bias (zeros): layer norm; without: RMS norm. */
static mpmd_value norm_layer(mpmd_graph *g, const char *fn, const char *name, mpmd_value x, float eps,
                             int layer_norm) {
    if (!features_input_ok(g, fn, name, x)) return MPMD_NONE;
    mpmd_type xt = *mpmd_type_of(g, x);
    int64_t c = xt.dim[xt.ndim - 1];
    mpmd_scope_push(g, name);
    mpmd_value scale = layer_param(g, "scale", MPMD_SHAPE(c), MPMD_ONES);
    mpmd_value bias = layer_norm ? layer_param(g, "bias", MPMD_SHAPE(c), MPMD_ZEROS) : MPMD_NONE;
    mpmd_scope_pop(g);
    if (layer_norm) return mpmd_layer_norm(g, x, like(g, scale, xt.dtype), like(g, bias, xt.dtype), eps);
    return mpmd_rms_norm(g, x, like(g, scale, xt.dtype), eps);
}

/* (x - mean) / sqrt(var + eps) * scale + bias over the last axis. */
mpmd_value mpmd_layer_norm_layer(mpmd_graph *g, const char *name, mpmd_value x, float eps) {
    return norm_layer(g, "mpmd_layer_norm_layer", name, x, eps, 1);
}

/* Rows of embedding [vocab, width] picked by the i32 ids. */
mpmd_value mpmd_embed(mpmd_graph *g, const char *name, mpmd_value ids, int64_t vocab, int64_t width) {
    const char *fn = "mpmd_embed";
    if (!layer_input_ok(g, fn, name, ids)) return MPMD_NONE;
    if (mpmd_type_of(g, ids)->dtype != MPMD_I32)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": ids are %s; i32 token ids are expected", fn, name,
                         mpmd_tstr(g, ids));
    if (vocab < 1 || width < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": vocab %lld and width %lld must be positive", fn, name,
                         (long long)vocab, (long long)width);
    mpmd_scope_push(g, name);
    /* tensor parallel: the table split by rows of the vocabulary when the
     * model axis divides it (vocabulary parallelism), else whole */
    const int split = g->model_parallel > 1 && vocab % g->model_parallel == 0;
    mpmd_value table =
        split ? layer_param_split(g, "embedding", MPMD_SHAPE(vocab, width), MPMD_NORMAL(0.02f), 0, 1)
              : layer_param(g, "embedding", MPMD_SHAPE(vocab, width), MPMD_NORMAL(0.02f));
    mpmd_scope_pop(g);
    /* the rows in the compute dtype: gathered from the table's cast to it
     * (the same values as casting the rows: a 16-bit copy of the table, the
     * one FSDP gathers, and a gradient rounded to it per microbatch like
     * every layer's), or (vocabulary parallel) from the f32 table, then cast */
    const mpmd_dtype cd = mpmd_compute_dtype(g);
    mpmd_value rows =
        split ? mpmd_embedding_split(g, table, ids, "model") : mpmd_embedding(g, like(g, table, cd), ids);
    return mpmd_cast(g, rows, cd);
}

/* dense_0 (hidden) -> gelu -> dense_1 (out). */
mpmd_value mpmd_mlp(mpmd_graph *g, const char *name, mpmd_value x, int64_t hidden, int64_t out) {
    if (!layer_input_ok(g, "mpmd_mlp", name, x)) return MPMD_NONE;
    if (!model_divides(g, "mpmd_mlp", name, "hidden features", hidden)) return MPMD_NONE;
    mpmd_scope_push(g, name);
    /* tensor parallel: dense_0 by columns, dense_1 by rows */
    mpmd_value h = mpmd_gelu(g, dense(g, "dense_0", x, hidden, 1, DENSE_COLUMNS, 1));
    mpmd_value y = dense(g, "dense_1", h, out, 1, DENSE_ROWS, 1);
    mpmd_scope_pop(g);
    return y;
}

/* x [B, T, C] -> qkv = x W_qkv + b [B, T, 3C]; q, k, v its three column
 * blocks, each seen as [B, T, H, C/H]; a = attention(q, k, v) [B, T, H, C/H]
 * seen as [B, T, C]; y = a W_out + b. */
mpmd_value mpmd_self_attention(mpmd_graph *g, const char *name, mpmd_value x, int heads, int causal) {
    const char *fn = "mpmd_self_attention";
    if (!layer_input_ok(g, fn, name, x)) return MPMD_NONE;
    mpmd_type xt = *mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(xt.dtype) || xt.ndim != 3)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": input is %s; float [batch, seq, width] is expected",
                         fn, name, mpmd_tstr(g, x));
    int64_t b = xt.dim[0], t = xt.dim[1], c = xt.dim[2];
    if (heads < 1 || c % heads != 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s \"%s\": %d heads do not divide the width %lld of the input %s", fn, name, heads,
                         (long long)c, mpmd_tstr(g, x));
    int64_t dh = c / heads;
    if (!model_divides(g, fn, name, "heads", heads)) return MPMD_NONE;
    /* decoding (mpmd_set_decode): t new positions against the layer's cache */
    mpmd_value pos = MPMD_NONE;
    if (mpmd_decoding(g)) {
        if (!causal)
            return mpmd_fail(
                g, MPMD_ERR_INVALID,
                "%s \"%s\": decoding (mpmd_set_decode) runs causal attention only: a new position "
                "cannot see the ones after it",
                fn, name);
        if (!mpmd_is_value(pos = mpmd_decode_positions(g, fn, name, b, t))) return MPMD_NONE;
    }
    /* tensor parallel: this rank's heads; qkv by columns (its q, k and v
     * columns: three groups), out by rows */
    const int64_t hl = heads / g->model_parallel, cl = hl * dh;
    mpmd_scope_push(g, name);
    mpmd_value qkv = dense(g, "qkv", x, 3 * c, 1, DENSE_COLUMNS, 3);
    mpmd_value q = mpmd_reshape(g, mpmd_slice(g, qkv, 2, 0, cl), MPMD_SHAPE(b, t, hl, dh));
    mpmd_value k = mpmd_reshape(g, mpmd_slice(g, qkv, 2, cl, 2 * cl), MPMD_SHAPE(b, t, hl, dh));
    mpmd_value v = mpmd_reshape(g, mpmd_slice(g, qkv, 2, 2 * cl, 3 * cl), MPMD_SHAPE(b, t, hl, dh));
    mpmd_value a = mpmd_is_value(pos)
                       ? mpmd_decode_attention(g, fn, q, k, v, pos)
                       : mpmd_reshape(g, mpmd_attention(g, q, k, v, causal), MPMD_SHAPE(b, t, cl));
    mpmd_value y = dense(g, "out", a, c, 1, DENSE_ROWS, 1);
    mpmd_scope_pop(g);
    return y;
}

/* RMSNorm layer "name": x / sqrt(mean(x^2) + eps) * scale over the last axis. */
mpmd_value mpmd_rms_norm_layer(mpmd_graph *g, const char *name, mpmd_value x, float eps) {
    return norm_layer(g, "mpmd_rms_norm_layer", name, x, eps, 0);
}

/* SwiGLU MLP "name": down(silu(gate(x)) * up(x)), three dense layers
 * without bias (LLaMA's). */
mpmd_value mpmd_swiglu_mlp(mpmd_graph *g, const char *name, mpmd_value x, int64_t hidden, int64_t out) {
    if (!layer_input_ok(g, "mpmd_swiglu_mlp", name, x)) return MPMD_NONE;
    if (!model_divides(g, "mpmd_swiglu_mlp", name, "hidden features", hidden)) return MPMD_NONE;
    mpmd_scope_push(g, name);
    /* tensor parallel: gate and up by columns, down by rows */
    x = varied(g, x);
    mpmd_value h = mpmd_mul(g, mpmd_silu(g, dense(g, "gate", x, hidden, 0, DENSE_COLUMNS_VARIED, 1)),
                            dense(g, "up", x, hidden, 0, DENSE_COLUMNS_VARIED, 1));
    mpmd_value y = dense(g, "down", h, out, 0, DENSE_ROWS, 1);
    mpmd_scope_pop(g);
    return y;
}

/* x [B, T, C] -> q = x W_q [B, T, H, Dh], k = x W_k and v = x W_v [B, T,
 * KV, Dh] (grouped-query: KV divides H), rotary embeddings on q and k, each
 * key/value head repeated for its H/KV query heads (a broadcast), causal
 * attention, y = a W_o. No biases. */
mpmd_value mpmd_rope_attention(mpmd_graph *g, const char *name, mpmd_value x, int heads, int kv_heads,
                               float rope_base) {
    const char *fn = "mpmd_rope_attention";
    if (!layer_input_ok(g, fn, name, x)) return MPMD_NONE;
    mpmd_type xt = *mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(xt.dtype) || xt.ndim != 3)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": input is %s; float [batch, seq, width] is expected",
                         fn, name, mpmd_tstr(g, x));
    int64_t b = xt.dim[0], t = xt.dim[1], c = xt.dim[2];
    if (heads < 1 || c % heads != 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s \"%s\": %d heads do not divide the width %lld of the input %s", fn, name, heads,
                         (long long)c, mpmd_tstr(g, x));
    if (kv_heads < 1 || heads % kv_heads != 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": %d key/value heads do not divide the %d query heads",
                         fn, name, kv_heads, heads);
    int64_t dh = c / heads, rep = heads / kv_heads;
    if (!model_divides(g, fn, name, "key/value heads", kv_heads)) return MPMD_NONE;
    /* decoding (mpmd_set_decode): t new positions against the layer's cache */
    mpmd_value pos = MPMD_NONE;
    if (mpmd_decoding(g) && !mpmd_is_value(pos = mpmd_decode_positions(g, fn, name, b, t))) return MPMD_NONE;
    /* tensor parallel: this rank's query heads and the key/value heads they
     * share; q, k, v by columns, o by rows */
    const int M = g->model_parallel;
    heads /= M, kv_heads /= M;
    const int64_t cl = heads * dh;
    mpmd_scope_push(g, name);
    x = varied(g, x);
    mpmd_value q =
        mpmd_reshape(g, dense(g, "q", x, c, 0, DENSE_COLUMNS_VARIED, 1), MPMD_SHAPE(b, t, heads, dh));
    mpmd_value k = mpmd_reshape(g, dense(g, "k", x, kv_heads * M * dh, 0, DENSE_COLUMNS_VARIED, 1),
                                MPMD_SHAPE(b, t, kv_heads, dh));
    mpmd_value v = mpmd_reshape(g, dense(g, "v", x, kv_heads * M * dh, 0, DENSE_COLUMNS_VARIED, 1),
                                MPMD_SHAPE(b, t, kv_heads, dh));
    /* rotary: at the decode positions, or at 0 .. T-1 (mpmd_rope's form
     * when no scaling is set, so that graphs without it stay as they were) */
    const mpmd_rope_scaling *sc = &g->rope_scaling;
    if (mpmd_is_value(pos)) {
        q = mpmd_rope_op(g, fn, q, pos, rope_base, sc, 0);
        k = mpmd_rope_op(g, fn, k, pos, rope_base, sc, 0);
        mpmd_value a = mpmd_decode_attention(g, fn, q, k, v, pos);
        mpmd_value y = dense(g, "o", a, c, 0, DENSE_ROWS, 1);
        mpmd_scope_pop(g);
        return y;
    }
    q = sc->factor != 0.0f ? mpmd_rope_op(g, fn, q, MPMD_NONE, rope_base, sc, 0)
                           : mpmd_rope(g, q, rope_base, 0);
    k = sc->factor != 0.0f ? mpmd_rope_op(g, fn, k, MPMD_NONE, rope_base, sc, 0)
                           : mpmd_rope(g, k, rope_base, 0);
    if (rep > 1) { /* [B, T, KV, Dh] -> [B, T, KV, rep, Dh] -> [B, T, H, Dh] */
        k = mpmd_reshape(g,
                         mpmd_broadcast_to(g, mpmd_reshape(g, k, MPMD_SHAPE(b, t, kv_heads, 1, dh)),
                                           MPMD_SHAPE(b, t, kv_heads, rep, dh)),
                         MPMD_SHAPE(b, t, heads, dh));
        v = mpmd_reshape(g,
                         mpmd_broadcast_to(g, mpmd_reshape(g, v, MPMD_SHAPE(b, t, kv_heads, 1, dh)),
                                           MPMD_SHAPE(b, t, kv_heads, rep, dh)),
                         MPMD_SHAPE(b, t, heads, dh));
    }
    mpmd_value a = mpmd_reshape(g, mpmd_attention(g, q, k, v, 1), MPMD_SHAPE(b, t, cl));
    mpmd_value y = dense(g, "o", a, c, 0, DENSE_ROWS, 1);
    mpmd_scope_pop(g);
    return y;
}

/* A residual branch's output through the graph's layer dropout, if set
 * (never while decoding: generation runs the trained model as it is). */
static mpmd_value branch(mpmd_graph *g, mpmd_value y) {
    return g->layer_dropout > 0.0f && !mpmd_decoding(g)
               ? mpmd_dropout(g, y, g->layer_dropout, g->layer_dropout_key)
               : y;
}

mpmd_status mpmd_set_rope_scaling(mpmd_graph *g, const mpmd_rope_scaling *scaling) {
    if (!g) return MPMD_ERR_INVALID;
    if (g->status != MPMD_OK) return g->status;
    const mpmd_rope_scaling none = MPMD_ROPE_NO_SCALING, *s = scaling ? scaling : &none;
    if (!mpmd_rope_scaling_ok(s)) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "mpmd_set_rope_scaling: factor %g, low_freq_factor %g, high_freq_factor %g, original positions "
            "%lld; a finite factor >= 1, 0 < low < high and positions >= 1 are expected (factor 0: none)",
            (double)s->factor, (double)s->low_freq_factor, (double)s->high_freq_factor,
            (long long)s->original_positions);
        return g->status;
    }
    g->rope_scaling = *s;
    return MPMD_OK;
}

/* Flax's LayerNorm epsilon for the tutorial Block, GPT-2's for gpt_block. */
#define BLOCK_LN_EPS 1e-6f
#define GPT_LN_EPS 1e-5f

static int block_input_ok(mpmd_graph *g, const char *fn, const char *name, mpmd_value x) {
    if (!layer_input_ok(g, fn, name, x)) return 0;
    const mpmd_type *xt = mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(xt->dtype) || xt->ndim != 3) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": input is %s; float [batch, seq, width] is expected", fn,
                  name, mpmd_tstr(g, x));
        return 0;
    }
    return 1;
}

/* The JaxPP tutorial's Block (post-LN):
 *   x = ln_0(x + attn(x));  x = ln_1(x + mlp(x)), mlp = dense(4C) -> gelu -> dense(C). */
mpmd_value mpmd_transformer_block(mpmd_graph *g, const char *name, mpmd_value x, int heads, int causal) {
    const char *fn = "mpmd_transformer_block";
    if (!block_input_ok(g, fn, name, x)) return MPMD_NONE;
    int64_t c = mpmd_type_of(g, x)->dim[2];
    mpmd_scope_push(g, name);
    x = mpmd_layer_norm_layer(
        g, "ln_0", mpmd_add(g, x, branch(g, mpmd_self_attention(g, "attn", x, heads, causal))), BLOCK_LN_EPS);
    x = mpmd_layer_norm_layer(g, "ln_1", mpmd_add(g, x, branch(g, mpmd_mlp(g, "mlp", x, 4 * c, c))),
                              BLOCK_LN_EPS);
    mpmd_scope_pop(g);
    return x;
}

/* A GPT-2 block (pre-LN, causal):
 *   x = x + attn(ln_0(x));  x = x + mlp(ln_1(x)), mlp = dense(4C) -> gelu -> dense(C). */
mpmd_value mpmd_gpt_block(mpmd_graph *g, const char *name, mpmd_value x, int heads) {
    const char *fn = "mpmd_gpt_block";
    if (!block_input_ok(g, fn, name, x)) return MPMD_NONE;
    int64_t c = mpmd_type_of(g, x)->dim[2];
    mpmd_scope_push(g, name);
    x = mpmd_add(
        g, x,
        branch(g, mpmd_self_attention(g, "attn", mpmd_layer_norm_layer(g, "ln_0", x, GPT_LN_EPS), heads, 1)));
    x = mpmd_add(g, x,
                 branch(g, mpmd_mlp(g, "mlp", mpmd_layer_norm_layer(g, "ln_1", x, GPT_LN_EPS), 4 * c, c)));
    mpmd_scope_pop(g);
    return x;
}

/* A LLaMA block "name" (pre-norm, causal):
 *   x = x + attn(rms_0(x));  x = x + swiglu(rms_1(x)). */
mpmd_value mpmd_llama_block(mpmd_graph *g, const char *name, mpmd_value x, int heads, int kv_heads,
                            int64_t hidden, float rope_base, float eps) {
    const char *fn = "mpmd_llama_block";
    if (!block_input_ok(g, fn, name, x)) return MPMD_NONE;
    if (hidden < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": MLP width %lld; at least 1 is required", fn, name,
                         (long long)hidden);
    int64_t c = mpmd_type_of(g, x)->dim[2];
    mpmd_scope_push(g, name);
    x = mpmd_add(g, x,
                 branch(g, mpmd_rope_attention(g, "attn", mpmd_rms_norm_layer(g, "rms_0", x, eps), heads,
                                               kv_heads, rope_base)));
    x = mpmd_add(g, x,
                 branch(g, mpmd_swiglu_mlp(g, "mlp", mpmd_rms_norm_layer(g, "rms_1", x, eps), hidden, c)));
    mpmd_scope_pop(g);
    return x;
}
