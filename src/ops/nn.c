/* The neural-network op family: matmul, softmax / log-softmax (plain and
 * causal), layer and RMS norms, rotary embeddings, embedding lookup,
 * cross-entropy, and fused attention. Each op is one descriptor: its
 * constructor checks the operands, its VJP rule emits the backward ops as
 * ordinary graph nodes. The CPU kernels are in src/backend/cpu/nn.c.
 *
 * Conventions for the math in the comments: gy is the cotangent of the op's
 * output (d loss / d y), gx of an input. Rows are the last axis.
 */
#include "nn.h"

#include <math.h>
#include <string.h>

/* ---- attribute printers ----------------------------------------------------- */

static void attrs_matmul(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    int k = snprintf(buf, len, "%s%s", (mpmd_matmul_flags(n) & MPMD_TRANS_A) ? " trans_a" : "",
                     (mpmd_matmul_flags(n) & MPMD_TRANS_B) ? " trans_b" : "");
    if (mpmd_matmul_has_alpha(n) && k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, " alpha=%.9g", (double)mpmd_matmul_alpha(n));
}

static void attrs_eps(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " eps=%g", (double)mpmd_norm_eps(n));
}

static void attrs_attention(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, "%s scale=%.9g", mpmd_attention_causal(n) ? " causal" : "",
             (double)mpmd_attention_scale(n));
}

static void attrs_vocab(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " rows=%lld", (long long)mpmd_embedding_grad_rows(n));
}

/* ---- descriptors ---------------------------------------------------------------- */

static void vjp_matmul(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_softmax(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_softmax_causal(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_log_softmax(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_layer_norm(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_rms_norm(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_rope(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

static void attrs_rope(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    int k = n->n_in == 1 ? snprintf(buf, len, " base=%g offset=%lld", (double)mpmd_rope_base(n),
                                    (long long)mpmd_rope_offset(n))
                         : snprintf(buf, len, " base=%g", (double)mpmd_rope_base(n));
    if (mpmd_rope_factor(n) > 0.0f && k >= 0 && (size_t)k < len)
        k += snprintf(buf + k, len - (size_t)k, " llama3(factor=%g low=%g high=%g original=%lld)",
                      (double)mpmd_rope_factor(n), (double)mpmd_rope_low_freq_factor(n),
                      (double)mpmd_rope_high_freq_factor(n), (long long)mpmd_rope_original_positions(n));
    if (mpmd_rope_inverse(n) && k >= 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, " inverse");
}
static void vjp_embedding(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_cross_entropy(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_attention(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

/* {name, n_in, inplace, flags, attrs, vjp}. inplace names the input whose buffer the
 * kernel may overwrite (src/backend/cpu/nn.c keeps each one correct when it does). */
const mpmd_op_desc mpmd_op_matmul = {"matmul", 2, -1, 0, attrs_matmul, vjp_matmul};
const mpmd_op_desc mpmd_op_softmax = {"softmax", 1, 0, 0, NULL, vjp_softmax};
const mpmd_op_desc mpmd_op_log_softmax = {"log_softmax", 1, 0, 0, NULL, vjp_log_softmax};
const mpmd_op_desc mpmd_op_softmax_causal = {"softmax_causal", 1, 0, 0, NULL, vjp_softmax_causal};
const mpmd_op_desc mpmd_op_softmax_grad = {"softmax_grad", 2, 1, 0, NULL, NULL};
const mpmd_op_desc mpmd_op_softmax_causal_grad = {"softmax_causal_grad", 2, 1, 0, NULL, NULL};
const mpmd_op_desc mpmd_op_log_softmax_grad = {"log_softmax_grad", 2, 1, 0, NULL, NULL};
const mpmd_op_desc mpmd_op_layer_norm = {"layer_norm", 3, 0, 0, attrs_eps, vjp_layer_norm};
const mpmd_op_desc mpmd_op_layer_norm_grad_x = {"layer_norm_grad_x", 3, 2, 0, attrs_eps, NULL};
const mpmd_op_desc mpmd_op_layer_norm_grad_gamma = {"layer_norm_grad_gamma", 2, -1, 0, attrs_eps, NULL};
const mpmd_op_desc mpmd_op_rms_norm = {"rms_norm", 2, 0, 0, attrs_eps, vjp_rms_norm};
const mpmd_op_desc mpmd_op_rms_norm_grad_x = {"rms_norm_grad_x", 3, 2, 0, attrs_eps, NULL};
const mpmd_op_desc mpmd_op_rms_norm_grad_scale = {"rms_norm_grad_scale", 2, -1, 0, attrs_eps, NULL};
const mpmd_op_desc mpmd_op_rope = {"rope", 1, 0, 0, attrs_rope, vjp_rope};
const mpmd_op_desc mpmd_op_rope_at = {"rope_at", 2, 0, 0, attrs_rope, vjp_rope};
const mpmd_op_desc mpmd_op_embedding = {"embedding", 2, -1, 0, NULL, vjp_embedding};
const mpmd_op_desc mpmd_op_embedding_grad = {"embedding_grad", 2, -1, 0, attrs_vocab, NULL};
const mpmd_op_desc mpmd_op_cross_entropy = {"cross_entropy", 2, -1, 0, NULL, vjp_cross_entropy};
const mpmd_op_desc mpmd_op_cross_entropy_grad = {"cross_entropy_grad", 4, 0, 0, NULL, NULL};
const mpmd_op_desc mpmd_op_attention = {"attention", 3, -1, 0, attrs_attention, vjp_attention};
const mpmd_op_desc mpmd_op_attention_grad = {"attention_grad", 5, -1, 0, attrs_attention, NULL};

/* Emit an internal (gradient) op whose operands the rule built itself. */
static mpmd_value emit_internal(mpmd_graph *g, const mpmd_op_desc *op, int n_in, const mpmd_value *in,
                                mpmd_type out) {
    if (!mpmd_check_operands(g, op->name, n_in, in)) return MPMD_NONE;
    return mpmd_emit(g, op, n_in, in, out);
}

/* ---- matmul ----------------------------------------------------------------------- */

mpmd_value mpmd_matmul(mpmd_graph *g, mpmd_value a, mpmd_value b, int flags) {
    mpmd_value in[2] = {a, b};
    if (!mpmd_check_operands(g, "mpmd_matmul", 2, in)) return MPMD_NONE;
    const mpmd_type ta = *mpmd_type_of(g, a), tb = *mpmd_type_of(g, b);
    if (flags & ~(MPMD_TRANS_A | MPMD_TRANS_B))
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_matmul: unknown flags 0x%x; expected MPMD_TRANS_A | MPMD_TRANS_B",
                         (unsigned)flags);
    if (!mpmd_dtype_is_float(ta.dtype) || ta.dtype != tb.dtype)
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "mpmd_matmul: operands must be float tensors of one dtype (f32, bf16, f16; mpmd_cast "
            "converts); a is %s, b is %s",
            mpmd_tstr(g, a), mpmd_tstr(g, b));
    if (ta.ndim < 2 || tb.ndim < 2)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_matmul: operands must have at least 2 dimensions; a is %s, b is %s",
                         mpmd_tstr(g, a), mpmd_tstr(g, b));
    if (tb.ndim != 2 && tb.ndim != ta.ndim)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_matmul: b must be a matrix or batched with exactly a's leading dimensions; "
                         "a is %s, b is %s",
                         mpmd_tstr(g, a), mpmd_tstr(g, b));
    if (tb.ndim == ta.ndim)
        for (int i = 0; i < ta.ndim - 2; i++)
            if (ta.dim[i] != tb.dim[i])
                return mpmd_fail(
                    g, MPMD_ERR_SHAPE,
                    "mpmd_matmul: batch dimension %d differs: a is %s, b is %s (a batched b must have "
                    "a's leading dimensions)",
                    i, mpmd_tstr(g, a), mpmd_tstr(g, b));
    int tra = (flags & MPMD_TRANS_A) != 0, trb = (flags & MPMD_TRANS_B) != 0;
    int64_t m = ta.dim[ta.ndim - 2 + tra], ka = ta.dim[ta.ndim - 1 - tra];
    int64_t kb = tb.dim[tb.ndim - 2 + trb], nn = tb.dim[tb.ndim - 1 - trb];
    if (ka != kb)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_matmul: contracted dimensions differ: a is %s (K = %lld), b is %s (K = %lld); "
                         "expected a [..., %s] and b [%s]",
                         mpmd_tstr(g, a), (long long)ka, mpmd_tstr(g, b), (long long)kb,
                         tra ? "K, M" : "M, K", trb ? "N, K" : "K, N");
    mpmd_type out = ta;
    out.dim[out.ndim - 2] = m;
    out.dim[out.ndim - 1] = nn;
    mpmd_value r = mpmd_emit(g, &mpmd_op_matmul, 2, in, out);
    mpmd_node *node = mpmd_node_of(g, r);
    if (node) mpmd_matmul_set_flags(node, flags);
    return r;
}

mpmd_value mpmd_matmul_scaled(mpmd_graph *g, mpmd_value a, mpmd_value b, int flags, float alpha) {
    if (!isfinite(alpha))
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_matmul_scaled: alpha is %g; it must be finite",
                         (double)alpha);
    mpmd_value r = mpmd_matmul(g, a, b, flags);
    mpmd_node *node = mpmd_node_of(g, r);
    if (node && alpha != 1.0f) mpmd_matmul_set_alpha(node, alpha);
    return r;
}

/* C = A' B' with A' = op(A) [M, K] and B' = op(B) [K, N] (op transposes when
 * the flag is set). Then dA' = dC B'^T and dB' = A'^T dC, and
 *   dA = dA'             or, with TRANS_A, dA'^T = B' dC^T
 *   dB = dB'             or, with TRANS_B, dB'^T = dC^T A'
 * each written as one matmul with the right flags. When a 2-D b serves a
 * batched a, dB sums over the batch: the batch is folded into the summed
 * dimension (a as [R, K], dC as [R, N] with R = batch x M) so that the
 * weight gradient is one large sgemm. */
/* A scaled product (alpha) scales both gradients by alpha, inside their
 * matmuls. */
#define mpmd_matmul(g, x, y, f) mpmd_matmul_scaled(g, x, y, f, alpha)
static void vjp_matmul(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    const float alpha = mpmd_matmul_alpha(n);
    mpmd_value a = mpmd_in(n, 0), b = mpmd_in(n, 1);
    const mpmd_type ta = *mpmd_type_of(g, a), tb = *mpmd_type_of(g, b);
    int tra = (mpmd_matmul_flags(n) & MPMD_TRANS_A) != 0, trb = (mpmd_matmul_flags(n) & MPMD_TRANS_B) != 0;
    int shared_b = tb.ndim == 2 && ta.ndim > 2;
    /* matmul(x, y, f) computes op(x) op(y); B'^T is b itself under TRANS_B. */
    int bt_flag = trb ? 0 : MPMD_TRANS_B; /* op(b) = B'^T */
    if (!tra)
        gin[0] = mpmd_matmul(g, gy, b, bt_flag); /* dA = dC B'^T */
    else if (!shared_b)
        gin[0] = mpmd_matmul(g, b, gy, (trb ? MPMD_TRANS_A : 0) | MPMD_TRANS_B); /* dA = B' dC^T */
    else
        gin[0] = mpmd_transpose(g, mpmd_matmul(g, gy, b, bt_flag)); /* dA = (dC B'^T)^T per item */

    if (!shared_b) {
        if (!trb)
            gin[1] = mpmd_matmul(g, a, gy, tra ? 0 : MPMD_TRANS_A); /* dB = A'^T dC */
        else
            gin[1] = mpmd_matmul(g, gy, a, MPMD_TRANS_A | (tra ? MPMD_TRANS_B : 0)); /* dB = dC^T A' */
    } else {
        int64_t k = tra ? ta.dim[ta.ndim - 2] : ta.dim[ta.ndim - 1];
        int64_t ncols = n->type.dim[n->type.ndim - 1];
        mpmd_value an = tra ? mpmd_transpose(g, a) : a; /* A' per item: [..., M, K] */
        mpmd_value a2 = mpmd_reshape(g, an, MPMD_SHAPE(-1, k));
        mpmd_value g2 = mpmd_reshape(g, gy, MPMD_SHAPE(-1, ncols));
        gin[1] = trb ? mpmd_matmul(g, g2, a2, MPMD_TRANS_A)  /* dB [N, K] = dC^T A' */
                     : mpmd_matmul(g, a2, g2, MPMD_TRANS_A); /* dB [K, N] = A'^T dC */
    }
}
#undef mpmd_matmul

/* ---- softmax family ------------------------------------------------------------------ */

static mpmd_value softmax_like(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, mpmd_value x,
                               int causal) {
    if (!mpmd_check_operands(g, fn, 1, &x)) return MPMD_NONE;
    const mpmd_type t = *mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(t.dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the operand must be a float tensor (f32, bf16, f16), got %s",
                         fn, mpmd_tstr(g, x));
    if (t.ndim < (causal ? 2 : 1))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the operand needs at least %d dimension%s, got %s", fn,
                         causal ? 2 : 1, causal ? "s ([..., T, T])" : "", mpmd_tstr(g, x));
    if (causal && t.dim[t.ndim - 1] != t.dim[t.ndim - 2])
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: expected square scores [..., T, T] over the last two axes, got %s", fn,
                         mpmd_tstr(g, x));
    return mpmd_emit(g, op, 1, &x, t);
}

mpmd_value mpmd_softmax(mpmd_graph *g, mpmd_value a) {
    return softmax_like(g, &mpmd_op_softmax, "mpmd_softmax", a, 0);
}
mpmd_value mpmd_log_softmax(mpmd_graph *g, mpmd_value a) {
    return softmax_like(g, &mpmd_op_log_softmax, "mpmd_log_softmax", a, 0);
}
mpmd_value mpmd_softmax_causal(mpmd_graph *g, mpmd_value a) {
    return softmax_like(g, &mpmd_op_softmax_causal, "mpmd_softmax_causal", a, 1);
}

/* y = softmax(x) per row: dx = y * (gy - sum(gy * y)). The causal variant
 * has y = 0 on masked entries, so the same formula gives 0 there; its kernel
 * sums over the unmasked columns only. */
static void vjp_softmax(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value in[2] = {mpmd_out(n), gy};
    gin[0] = emit_internal(g, &mpmd_op_softmax_grad, 2, in, n->type);
}
static void vjp_softmax_causal(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value in[2] = {mpmd_out(n), gy};
    gin[0] = emit_internal(g, &mpmd_op_softmax_causal_grad, 2, in, n->type);
}
/* y = x - logsumexp(x) per row: dx = gy - exp(y) * sum(gy). */
static void vjp_log_softmax(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value in[2] = {mpmd_out(n), gy};
    gin[0] = emit_internal(g, &mpmd_op_log_softmax_grad, 2, in, n->type);
}

/* ---- layer norm ------------------------------------------------------------------------- */

mpmd_value mpmd_layer_norm(mpmd_graph *g, mpmd_value x, mpmd_value gamma, mpmd_value beta, float eps) {
    mpmd_value in[3] = {x, gamma, beta};
    if (!mpmd_check_operands(g, "mpmd_layer_norm", 3, in)) return MPMD_NONE;
    const mpmd_type tx = *mpmd_type_of(g, x), tg = *mpmd_type_of(g, gamma), tbe = *mpmd_type_of(g, beta);
    if (!mpmd_dtype_is_float(tx.dtype) || tx.ndim < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_layer_norm: x must be a float tensor with at least one axis, got %s",
                         mpmd_tstr(g, x));
    int64_t c = tx.dim[tx.ndim - 1];
    if (tg.dtype != tx.dtype || tg.ndim != 1 || tg.dim[0] != c || tbe.dtype != tx.dtype || tbe.ndim != 1 ||
        tbe.dim[0] != c)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_layer_norm: x is %s, gamma is %s, beta is %s; gamma and beta must be %s[%lld] "
                         "(x's dtype and last axis)",
                         mpmd_tstr(g, x), mpmd_tstr(g, gamma), mpmd_tstr(g, beta), mpmd_dtype_name(tx.dtype),
                         (long long)c);
    if (!(eps >= 0.0f) || isinf(eps))
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_layer_norm: eps is %g; it must be finite and >= 0",
                         (double)eps);
    mpmd_value r = mpmd_emit(g, &mpmd_op_layer_norm, 3, in, tx);
    mpmd_node *node = mpmd_node_of(g, r);
    if (node) mpmd_norm_set_eps(node, eps);
    return r;
}

/* y = xhat * gamma + beta with xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps)
 * per row of C. With g = gy * gamma:
 *   dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))   (layer_norm_grad_x)
 *   dgamma = sum over rows of gy * xhat                      (layer_norm_grad_gamma)
 *   dbeta  = sum over rows of gy                             (sum_to)
 * Three separate ops, so that a compiler can put the activation gradient
 * (dx) and the weight gradients in different tasks. */
static void vjp_layer_norm(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value x = mpmd_in(n, 0), gamma = mpmd_in(n, 1);
    float eps = mpmd_norm_eps(n);
    int64_t c = n->type.dim[n->type.ndim - 1];
    gin[2] = mpmd_sum_to(g, gy, 1, &c);
    mpmd_value ing[2] = {x, gy};
    gin[1] = emit_internal(g, &mpmd_op_layer_norm_grad_gamma, 2, ing, *mpmd_type_of(g, gamma));
    mpmd_node *ng = mpmd_node_of(g, gin[1]);
    if (ng) mpmd_norm_set_eps(ng, eps);
    mpmd_value inx[3] = {x, gamma, gy};
    gin[0] = emit_internal(g, &mpmd_op_layer_norm_grad_x, 3, inx, n->type);
    mpmd_node *nx = mpmd_node_of(g, gin[0]);
    if (nx) mpmd_norm_set_eps(nx, eps);
}

/* ---- RMS norm -------------------------------------------------------------------------------- */

mpmd_value mpmd_rms_norm(mpmd_graph *g, mpmd_value x, mpmd_value scale, float eps) {
    mpmd_value in[2] = {x, scale};
    if (!mpmd_check_operands(g, "mpmd_rms_norm", 2, in)) return MPMD_NONE;
    const mpmd_type tx = *mpmd_type_of(g, x), ts = *mpmd_type_of(g, scale);
    if (!mpmd_dtype_is_float(tx.dtype) || tx.ndim < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_rms_norm: x must be a float tensor with at least one axis, got %s",
                         mpmd_tstr(g, x));
    int64_t c = tx.dim[tx.ndim - 1];
    if (ts.dtype != tx.dtype || ts.ndim != 1 || ts.dim[0] != c)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_rms_norm: x is %s, scale is %s; scale must be %s[%lld] (x's dtype "
                         "and last axis)",
                         mpmd_tstr(g, x), mpmd_tstr(g, scale), mpmd_dtype_name(tx.dtype), (long long)c);
    if (!(eps >= 0.0f) || isinf(eps))
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_rms_norm: eps is %g; it must be finite and >= 0",
                         (double)eps);
    mpmd_value r = mpmd_emit(g, &mpmd_op_rms_norm, 2, in, tx);
    mpmd_node *node = mpmd_node_of(g, r);
    if (node) mpmd_norm_set_eps(node, eps);
    return r;
}

/* y = xhat * scale with xhat = x * r, r = 1/sqrt(mean(x^2) + eps) per row.
 * With g = gy * scale:
 *   dx     = r * (g - xhat * mean(g * xhat))    (rms_norm_grad_x)
 *   dscale = sum over rows of gy * xhat          (rms_norm_grad_scale) */
static void vjp_rms_norm(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value x = mpmd_in(n, 0), scale = mpmd_in(n, 1);
    float eps = mpmd_norm_eps(n);
    mpmd_type ts = *mpmd_type_of(g, scale), tx = n->type;
    mpmd_value ins[2] = {x, gy};
    gin[1] = emit_internal(g, &mpmd_op_rms_norm_grad_scale, 2, ins, ts);
    mpmd_node *ns = mpmd_node_of(g, gin[1]);
    if (ns) mpmd_norm_set_eps(ns, eps);
    mpmd_value inx[3] = {x, scale, gy};
    gin[0] = emit_internal(g, &mpmd_op_rms_norm_grad_x, 3, inx, tx);
    mpmd_node *nx = mpmd_node_of(g, gin[0]);
    if (nx) mpmd_norm_set_eps(nx, eps);
}

/* ---- rotary position embedding --------------------------------------------------------------- */

/* One constructor for both forms: positions MPMD_NONE turns row t of x by
 * position offset + t ("rope"); an i32 value turns each row by its own
 * position ("rope_at"). The attributes (accessors in nn.h): base, the
 * Llama 3.1 factor, low and high frequency factors (factor 0: none), the
 * offset, inverse (1 for the inverse rotation), the original
 * positions L (src/util/rope.h has the math). */
mpmd_value mpmd_rope_op(mpmd_graph *g, const char *fn, mpmd_value x, mpmd_value positions, float base,
                        const mpmd_rope_scaling *scaling, int64_t offset) {
    mpmd_value in[2] = {x, positions};
    const int at = mpmd_is_value(positions);
    if (!mpmd_check_operands(g, fn, at ? 2 : 1, in)) return MPMD_NONE;
    const mpmd_type t = *mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(t.dtype) || t.ndim < 3)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: x must be a float [..., T, H, D] (mpmd_attention's layout), got %s", fn,
                         mpmd_tstr(g, x));
    if (t.dim[t.ndim - 1] % 2)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: the head size D = %lld of %s must be even (it rotates pairs)", fn,
                         (long long)t.dim[t.ndim - 1], mpmd_tstr(g, x));
    if (!(base > 1.0f) || isinf(base))
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: base is %g; it must be finite and > 1 (10000 is usual)",
                         fn, (double)base);
    if (offset < 0 || offset > ((int64_t)1 << 40))
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: position offset %lld is outside [0, 2^40]", fn,
                         (long long)offset);
    if (at) {
        /* [..., T] (a position per row) or [T] (the same for every leading index) */
        const mpmd_type *tp = mpmd_type_of(g, positions);
        int rows = tp->ndim == t.ndim - 2, same = tp->dtype == MPMD_I32 && (rows || tp->ndim == 1);
        for (int d = 0; same && d < tp->ndim; d++)
            same = tp->dim[d] == t.dim[rows ? d : t.ndim - 3];
        if (!same)
            return mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "%s: positions are %s for x %s; i32 [..., T] (x's dimensions but the last two) or [T] "
                "is expected",
                fn, mpmd_tstr(g, positions), mpmd_tstr(g, x));
    }
    const mpmd_rope_scaling none = MPMD_ROPE_NO_SCALING, *s = scaling ? scaling : &none;
    if (!mpmd_rope_scaling_ok(s))
        return mpmd_fail(
            g, MPMD_ERR_INVALID,
            "%s: Llama 3.1 rope scaling factor %g, low_freq_factor %g, high_freq_factor %g, original "
            "positions %lld; a finite factor >= 1, 0 < low < high and positions >= 1 are expected "
            "(factor 0: no scaling)",
            fn, (double)s->factor, (double)s->low_freq_factor, (double)s->high_freq_factor,
            (long long)s->original_positions);
    mpmd_value r = mpmd_emit(g, at ? &mpmd_op_rope_at : &mpmd_op_rope, at ? 2 : 1, in, t);
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) {
        mpmd_rope_set(n, base, offset, 0);
        if (s->factor != 0.0f) mpmd_rope_set_scaling(n, s);
    }
    return r;
}

int mpmd_rope_scaling_ok(const mpmd_rope_scaling *s) {
    return s->factor == 0.0f || (s->factor >= 1.0f && !isinf(s->factor) && s->low_freq_factor > 0.0f &&
                                 s->high_freq_factor > s->low_freq_factor && !isinf(s->high_freq_factor) &&
                                 s->original_positions >= 1);
}

mpmd_value mpmd_rope(mpmd_graph *g, mpmd_value x, float base, int64_t offset) {
    return mpmd_rope_op(g, "mpmd_rope", x, MPMD_NONE, base, NULL, offset);
}

mpmd_value mpmd_rope_at(mpmd_graph *g, mpmd_value x, mpmd_value positions, float base,
                        const mpmd_rope_scaling *scaling) {
    if (g && g->status == MPMD_OK && !mpmd_is_value(positions))
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_rope_at: no positions (an i32 value is expected)");
    return mpmd_rope_op(g, "mpmd_rope_at", x, positions, base, scaling, 0);
}

/* A rotation's adjoint is its inverse: gx = the same op turning the other
 * way (at the same positions, which get no gradient). */
static void vjp_rope(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value in[2] = {gy, n->n_in == 2 ? mpmd_in(n, 1) : MPMD_NONE};
    gin[0] = emit_internal(g, n->op, n->n_in, in, n->type);
    mpmd_node *d = mpmd_node_of(g, gin[0]);
    if (d) {
        memcpy(d->fa, n->fa, sizeof d->fa);
        memcpy(d->ia, n->ia, sizeof d->ia);
        mpmd_rope_set(d, mpmd_rope_base(n), mpmd_rope_offset(n), !mpmd_rope_inverse(n));
    }
}

/* ---- take: gather along an axis ------------------------------------------------------------ */

/* x [A..., N, B...] and i32 ids [I...] -> [A..., I..., B...]: the axis moved
 * to the front, the rest flattened, rows picked with mpmd_embedding (whose
 * gradient is a deterministic scatter-add), and the axes put back. */
mpmd_value mpmd_take(mpmd_graph *g, mpmd_value x, mpmd_value ids, int axis) {
    const char *fn = "mpmd_take";
    mpmd_value in[2] = {x, ids};
    if (!mpmd_check_operands(g, fn, 2, in)) return MPMD_NONE;
    const mpmd_type tx = *mpmd_type_of(g, x), ti = *mpmd_type_of(g, ids);
    if (!mpmd_dtype_is_float(tx.dtype) || tx.ndim < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: x must be a float tensor with at least one axis, got %s", fn,
                         mpmd_tstr(g, x));
    if (ti.dtype != MPMD_I32)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: ids must be i32, got %s", fn, mpmd_tstr(g, ids));
    int ax = axis < 0 ? axis + tx.ndim : axis;
    if (ax < 0 || ax >= tx.ndim)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: axis %d is outside %s (%d axes)", fn, axis, mpmd_tstr(g, x),
                         tx.ndim);
    if (tx.ndim - 1 + ti.ndim > MPMD_MAX_DIMS)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: the result of %s taken along axis %d by %s would have %d axes; at "
                         "most %d are supported",
                         fn, mpmd_tstr(g, x), axis, mpmd_tstr(g, ids), tx.ndim - 1 + ti.ndim, MPMD_MAX_DIMS);
    /* [N, rest] with rest = the other axes in order */
    int perm[MPMD_MAX_DIMS], k = 0;
    perm[k++] = ax;
    int64_t rest = 1;
    for (int d = 0; d < tx.ndim; d++)
        if (d != ax) perm[k++] = d, rest *= tx.dim[d];
    mpmd_value front = ax == 0 ? x : mpmd_permute(g, x, perm);
    mpmd_value rows =
        mpmd_embedding(g, mpmd_reshape(g, front, MPMD_SHAPE(tx.dim[ax], rest)), ids); /* [I..., rest] */
    /* [I..., A..., B...] -> [A..., I..., B...] */
    int64_t dims[MPMD_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ti.ndim; d++)
        dims[nd++] = ti.dim[d];
    for (int d = 0; d < tx.ndim; d++)
        if (d != ax) dims[nd++] = tx.dim[d];
    mpmd_value y = mpmd_reshape(g, rows, nd, dims);
    if (ax == 0) return y;
    int back[MPMD_MAX_DIMS], m = 0;
    for (int d = 0; d < ax; d++)
        back[m++] = ti.ndim + d;
    for (int d = 0; d < ti.ndim; d++)
        back[m++] = d;
    for (int d = ax + 1; d < tx.ndim; d++)
        back[m++] = ti.ndim + d - 1;
    return mpmd_permute(g, y, back);
}

/* ---- embedding ------------------------------------------------------------------------------ */

mpmd_value mpmd_embedding(mpmd_graph *g, mpmd_value table, mpmd_value ids) {
    mpmd_value in[2] = {table, ids};
    if (!mpmd_check_operands(g, "mpmd_embedding", 2, in)) return MPMD_NONE;
    const mpmd_type tt = *mpmd_type_of(g, table), ti = *mpmd_type_of(g, ids);
    if (!mpmd_dtype_is_float(tt.dtype) || tt.ndim != 2)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_embedding: table must be a float [V, C] (f32, bf16, f16), got %s (ids are %s)",
                         mpmd_tstr(g, table), mpmd_tstr(g, ids));
    if (ti.dtype != MPMD_I32)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_embedding: ids must be i32, got %s (table is %s)",
                         mpmd_tstr(g, ids), mpmd_tstr(g, table));
    if (ti.ndim + 1 > MPMD_MAX_DIMS)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_embedding: ids %s have too many axes for a [..., C] result",
                         mpmd_tstr(g, ids));
    mpmd_type out = ti;
    out.dtype = tt.dtype;
    out.dim[out.ndim++] = tt.dim[1];
    return mpmd_emit(g, &mpmd_op_embedding, 2, in, out);
}

/* y[p, :] = table[ids[p], :]: dtable[v, :] = sum of gy[p, :] over the positions
 * p with ids[p] == v (a scatter-add, in position order). No gradient for ids. */
static void vjp_embedding(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value table = mpmd_in(n, 0), ids = mpmd_in(n, 1);
    const mpmd_type tt = *mpmd_type_of(g, table);
    mpmd_value in[2] = {ids, gy};
    gin[0] = emit_internal(g, &mpmd_op_embedding_grad, 2, in, tt);
    mpmd_node *ng = mpmd_node_of(g, gin[0]);
    if (ng) mpmd_embedding_grad_set_rows(ng, tt.dim[0]);
    gin[1] = MPMD_NONE;
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

mpmd_value mpmd_cross_entropy(mpmd_graph *g, mpmd_value logits, mpmd_value labels) {
    mpmd_value in[2] = {logits, labels};
    if (!mpmd_check_operands(g, "mpmd_cross_entropy", 2, in)) return MPMD_NONE;
    const mpmd_type tl = *mpmd_type_of(g, logits), tb = *mpmd_type_of(g, labels);
    if (!mpmd_dtype_is_float(tl.dtype) || tl.ndim < 1)
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "mpmd_cross_entropy: logits must be a float [..., V] (f32, bf16, f16), got %s (labels "
            "are %s)",
            mpmd_tstr(g, logits), mpmd_tstr(g, labels));
    int ok = tb.dtype == MPMD_I32 && tb.ndim == tl.ndim - 1;
    for (int i = 0; ok && i < tb.ndim; i++)
        ok = tb.dim[i] == tl.dim[i];
    if (!ok) {
        mpmd_type want = tl;
        want.dtype = MPMD_I32;
        want.ndim--;
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_cross_entropy: logits are %s, labels are %s; expected labels %s",
                         mpmd_tstr(g, logits), mpmd_tstr(g, labels), mpmd_tstr_type(g, &want));
    }
    mpmd_type out = tb;
    out.dtype = MPMD_F32;
    return mpmd_emit(g, &mpmd_op_cross_entropy, 2, in, out);
}

/* y = logsumexp(x) - x[label] per row: dx = (softmax(x) - onehot(label)) * gy.
 * The fused kernel takes y too: logsumexp(x) = y + x[label], so the backward
 * needs one pass over the row instead of three. No gradient for labels. */
static void vjp_cross_entropy(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value logits = mpmd_in(n, 0);
    mpmd_value in[4] = {logits, mpmd_in(n, 1), mpmd_out(n), gy};
    gin[0] = emit_internal(g, &mpmd_op_cross_entropy_grad, 4, in, *mpmd_type_of(g, logits));
    gin[1] = MPMD_NONE;
}

/* ---- attention (fused) --------------------------------------------------------------------- */

/* softmax(scale q k^T) v per batch item and head, scale = 1/sqrt(Dh), as one
 * op (attributes causal and scale): its kernels never store the
 * [T, T] scores. */
mpmd_value mpmd_attention(mpmd_graph *g, mpmd_value q, mpmd_value k, mpmd_value v, int causal) {
    mpmd_value in[3] = {q, k, v};
    if (!mpmd_check_operands(g, "mpmd_attention", 3, in)) return MPMD_NONE;
    const mpmd_type tq = *mpmd_type_of(g, q), tk = *mpmd_type_of(g, k), tv = *mpmd_type_of(g, v);
    if (!mpmd_dtype_is_float(tq.dtype) || tq.ndim != 4 || !mpmd_type_equal(&tq, &tk) ||
        !mpmd_type_equal(&tq, &tv))
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "mpmd_attention: q is %s, k is %s, v is %s; expected three float [B, T, H, Dh] of one type",
            mpmd_tstr(g, q), mpmd_tstr(g, k), mpmd_tstr(g, v));
    if (tq.dim[3] == 0) /* the scale 1/sqrt(Dh) would be infinite */
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_attention: q, k and v are %s; the head size Dh must be at least 1",
                         mpmd_tstr(g, q));
    if (g->unfused_attention) {                  /* mpmd_set_fused_attention(g, 0): the composition */
        static const int perm[4] = {0, 2, 1, 3}; /* [B, T, H, Dh] <-> [B, H, T, Dh] */
        mpmd_value qh = mpmd_permute(g, q, perm), kh = mpmd_permute(g, k, perm),
                   vh = mpmd_permute(g, v, perm);
        /* [B, H, T, T], scaled inside the product */
        mpmd_value s = mpmd_matmul_scaled(g, qh, kh, MPMD_TRANS_B, (float)(1.0 / sqrt((double)tq.dim[3])));
        mpmd_value p = causal ? mpmd_softmax_causal(g, s) : mpmd_softmax(g, s);
        return mpmd_permute(g, mpmd_matmul(g, p, vh, 0), perm); /* [B, H, T, Dh] -> [B, T, H, Dh] */
    }
    mpmd_value r = mpmd_emit(g, &mpmd_op_attention, 3, in, tq);
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) mpmd_attention_set(n, causal, (float)(1.0 / sqrt((double)tq.dim[3])));
    return r;
}

/* o_i = sum_j p_ij v_j, p_i = softmax_j(s_ij), s_ij = scale q_i . k_j (per
 * batch item and head; j <= i when causal). With do = gy:
 *   dv_j = sum_i p_ij do_i
 *   dp_ij = do_i . v_j,  ds_ij = p_ij (dp_ij - D_i),  D_i = do_i . o_i
 *   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i
 * (D_i = sum_j p_ij dp_ij, read off the forward's output). One op computes
 * all three, recomputing p, into [3, B, T, H, Dh]; each is taken out of it
 * with a slice along the first axis. */
static void vjp_attention(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    const mpmd_type t = n->type;
    mpmd_value in[5] = {mpmd_in(n, 0), mpmd_in(n, 1), mpmd_in(n, 2), mpmd_out(n), gy};
    mpmd_type out = t;
    out.ndim = 5;
    out.dim[0] = 3;
    for (int i = 0; i < 4; i++)
        out.dim[i + 1] = t.dim[i];
    mpmd_value d = emit_internal(g, &mpmd_op_attention_grad, 5, in, out);
    mpmd_node *nd = mpmd_node_of(g, d);
    if (nd) mpmd_attention_set(nd, mpmd_attention_causal(n), mpmd_attention_scale(n));
    for (int i = 0; i < 3; i++)
        gin[i] = mpmd_reshape(g, mpmd_slice(g, d, 0, i, i + 1), 4, t.dim);
}
