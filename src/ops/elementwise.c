/* The elementwise op family: binary arithmetic with numpy broadcasting,
 * scalar variants, unary maths, broadcast_to / sum_to, and the fused
 * backward ops their gradient rules use. Kernels: src/backend/cpu/elementwise.c.
 *
 * Broadcasting (numpy): operand shapes are aligned at their last axis; an
 * axis missing on one side counts as 1; a 1 stretches to the other side's
 * size; any other mismatch is an error naming both shapes. The result has
 * the larger rank and, per axis, the larger size.
 *
 * Gradient rules reduce each operand's cotangent back to the operand's own
 * shape with mpmd_sum_to, which emits nothing when the shapes are equal.
 * Where a derivative needs several elementwise steps (tanh, sqrt, rsqrt,
 * square, relu, gelu) the rule emits ONE fused backward op "<op>_grad"(gy, v),
 * v being the forward output y or input x, whichever the formula needs: a
 * single pass over memory instead of a chain of small nodes. These backward
 * ops have no gradient rule of their own (no second derivatives).
 *
 * Every op here takes float tensors (f32, bf16, f16) and computes in the
 * operands' dtype; the two operands of a binary op have the same dtype. An
 * i32 or token operand, or mixed float dtypes, is a shape error that names
 * the op and the dtypes. mpmd_cast converts between dtypes; its gradient
 * casts back.
 */
#include "../graph/graph.h"
#include "backend/op_descs.h"

#include <string.h>

static void vjp_add(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_sub(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_mul(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_div(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_add_scalar(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_mul_scalar(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_neg(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_exp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_log(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_broadcast_to(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_sum_to(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_cast(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_maximum(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_minimum(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_compare(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_where(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_dropout(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

static void attrs_compare(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    int cmp = mpmd_attr_cmp(n);
    snprintf(buf, len, " %s", cmp >= 0 && cmp < 6 ? cmp_names[cmp] : "?");
}

static void attrs_where_grad(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " %s", mpmd_attr_where_side(n) ? "false" : "true");
}

static void attrs_dropout(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " rate=%.9g stream=%lld", (double)mpmd_attr_dropout_rate(n),
             (long long)mpmd_attr_dropout_stream(n));
}

static void attrs_scalar(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " s=%.9g", (double)mpmd_attr_scalar(n));
}

/* Binary ops may write over input 0: when the executor lets them, the
 * output has input 0's size, hence its shape up to leading 1s. */
#define BINARY_DESC(name, tol) const mpmd_op_desc mpmd_op_##name = {#name, 2, 0, 0, NULL, vjp_##name};
MPMD_BINARY_OPS(BINARY_DESC)
const mpmd_op_desc mpmd_op_add_scalar = {"add_scalar", 1, 0, 0, attrs_scalar, vjp_add_scalar};
const mpmd_op_desc mpmd_op_mul_scalar = {"mul_scalar", 1, 0, 0, attrs_scalar, vjp_mul_scalar};
const mpmd_op_desc mpmd_op_broadcast_to = {"broadcast_to", 1, -1, 0, NULL, vjp_broadcast_to};
const mpmd_op_desc mpmd_op_sum_to = {"sum_to", 1, -1, 0, NULL, vjp_sum_to};
/* cast: each element converted to the output's dtype (to a 16-bit float:
 * rounded to nearest, ties to even). Never in place: the sizes differ. */
const mpmd_op_desc mpmd_op_cast = {"cast", 1, -1, 0, NULL, vjp_cast};

/* The unary ops of the lists in elementwise_ops.h, and the fused backward
 * ops of MPMD_UNARY_GRAD_OPS: inputs (gy, v), output of gy's shape (the
 * list states each formula). */
#define UNARY_DESC(name, reads, tol, domain, cost, gcost)                                                    \
    const mpmd_op_desc mpmd_op_##name = {#name, 1, 0, 0, NULL, vjp_##name};
#define UNARY_GRAD_DESC(name, reads, tol, domain, cost, gcost)                                               \
    static void vjp_##name(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);               \
    const mpmd_op_desc mpmd_op_##name = {#name, 1, 0, 0, NULL, vjp_##name};                                  \
    const mpmd_op_desc mpmd_op_##name##_grad = {#name "_grad", 2, 0, 0, NULL, NULL};
MPMD_UNARY_OPS(UNARY_DESC)
MPMD_UNARY_GRAD_OPS(UNARY_GRAD_DESC)

/* compare (attribute cmp, op_descs.h): 1 where a <cmp> b holds, else 0 */
const mpmd_op_desc mpmd_op_compare = {"compare", 2, 0, 0, attrs_compare, vjp_compare};
/* max_weight(a, b): 1 where a > b, 1/2 where a == b, else 0: the share of a
 * maximum's cotangent that goes to a (emitted by the gradient rules only) */
const mpmd_op_desc mpmd_op_max_weight = {"max_weight", 2, 0, 0, NULL, NULL};
/* where(cond, a, b), all of one shape: a where cond != 0, else b */
const mpmd_op_desc mpmd_op_where = {"where", 3, 1, 0, NULL, vjp_where};
/* where_grad(gy, cond), attribute side: 0: gy where cond != 0, else 0; 1: the other way */
const mpmd_op_desc mpmd_op_where_grad = {"where_grad", 2, 0, 0, attrs_where_grad, NULL};
/* dropout(x, key), attributes rate and stream: how many dropout
 * ops mpmd_dropout made before it, so stage markers and other ops do not
 * change it (copies made by remat and the backward keep it) */
const mpmd_op_desc mpmd_op_dropout = {"dropout", 2, 0, 0, attrs_dropout, vjp_dropout};

/* ---- operand checks ---------------------------------------------------------- */

static int check_f32(mpmd_graph *g, const char *fn, const char *which, mpmd_value v) {
    const mpmd_type *t = mpmd_type_of(g, v);
    if (mpmd_dtype_is_float(t->dtype)) return 1;
    mpmd_fail(g, MPMD_ERR_SHAPE,
              "%s: operand %s is %s, but elementwise ops take float tensors (f32, bf16, f16), not %s", fn,
              which, mpmd_tstr(g, v), mpmd_dtype_name(t->dtype));
    return 0;
}

/* Both operands of a binary op in one dtype. */
static int check_same_dtype(mpmd_graph *g, const char *fn, mpmd_value a, mpmd_value b) {
    if (mpmd_type_of(g, a)->dtype == mpmd_type_of(g, b)->dtype) return 1;
    mpmd_fail(g, MPMD_ERR_SHAPE, "%s: operands %s and %s have different dtypes; convert one with mpmd_cast",
              fn, mpmd_tstr(g, a), mpmd_tstr(g, b));
    return 0;
}

/* A target shape given by the caller: rank in range, every dim positive. */
static int check_target(mpmd_graph *g, const char *fn, int ndim, const int64_t *dims) {
    if (ndim < 0 || ndim > MPMD_MAX_DIMS) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "%s: target has %d dimensions; between 0 and %d are supported", fn, ndim,
                  MPMD_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && !dims) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: target dims is NULL with %d dimensions", fn, ndim);
        return 0;
    }
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0) {
            mpmd_fail(g, MPMD_ERR_SHAPE, "%s: target dimension %d is %lld; dimensions must be positive", fn,
                      i, (long long)dims[i]);
            return 0;
        }
    }
    return 1;
}

/* numpy broadcasting of a and b into *out. Returns -1 on success, else the
 * offending axis counted from the end (0 = last axis). */
static int broadcast_shape(const mpmd_type *a, const mpmd_type *b, mpmd_type *out) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    *out = mpmd_make_type(MPMD_F32, 0, NULL);
    out->ndim = n;
    for (int k = 0; k < n; k++) { /* k counts from the last axis */
        int64_t da = k < a->ndim ? a->dim[a->ndim - 1 - k] : 1;
        int64_t db = k < b->ndim ? b->dim[b->ndim - 1 - k] : 1;
        if (da != db && da != 1 && db != 1) return k;
        out->dim[n - 1 - k] = da > db ? da : db;
    }
    return -1;
}

/* ---- binary ops ---------------------------------------------------------------- */

static mpmd_value binary(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, mpmd_value a, mpmd_value b) {
    mpmd_value in[2] = {a, b};
    if (!mpmd_check_operands(g, fn, 2, in)) return MPMD_NONE;
    if (!check_f32(g, fn, "a", a) || !check_f32(g, fn, "b", b) || !check_same_dtype(g, fn, a, b))
        return MPMD_NONE;
    const mpmd_type *ta = mpmd_type_of(g, a), *tb = mpmd_type_of(g, b);
    mpmd_type out;
    int k = broadcast_shape(ta, tb, &out);
    out.dtype = ta->dtype;
    if (k >= 0)
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "%s: shapes %s and %s do not broadcast: axis -%d is %lld vs %lld (numpy rules: aligned "
            "from the last axis, sizes must be equal or 1)",
            fn, mpmd_tstr(g, a), mpmd_tstr(g, b), k + 1, (long long)ta->dim[ta->ndim - 1 - k],
            (long long)tb->dim[tb->ndim - 1 - k]);
    return mpmd_emit(g, op, 2, in, out);
}

#define BINARY_CTOR(name, tol)                                                                               \
    mpmd_value mpmd_##name(mpmd_graph *g, mpmd_value a, mpmd_value b) {                                      \
        return binary(g, &mpmd_op_##name, "mpmd_" #name, a, b);                                              \
    }
MPMD_BINARY_OPS(BINARY_CTOR)

mpmd_value mpmd_compare(mpmd_graph *g, mpmd_value a, mpmd_value b, mpmd_cmp cmp) {
    if ((int)cmp < 0 || (int)cmp > MPMD_CMP_GE)
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_compare: comparison %d is not an mpmd_cmp (MPMD_CMP_EQ .. GE)", (int)cmp);
    mpmd_value r = binary(g, &mpmd_op_compare, "mpmd_compare", a, b);
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) mpmd_attr_set_cmp(n, cmp);
    return r;
}

/* where: the mask and both operands broadcast to their common shape (no
 * node when one already has it), then one flat select. */
mpmd_value mpmd_where(mpmd_graph *g, mpmd_value cond, mpmd_value a, mpmd_value b) {
    const char *fn = "mpmd_where";
    mpmd_value in[3] = {cond, a, b};
    if (!mpmd_check_operands(g, fn, 3, in)) return MPMD_NONE;
    if (!check_f32(g, fn, "cond", cond) || !check_f32(g, fn, "a", a) || !check_f32(g, fn, "b", b) ||
        !check_same_dtype(g, fn, a, b) || !check_same_dtype(g, fn, cond, a))
        return MPMD_NONE;
    const mpmd_type *tc = mpmd_type_of(g, cond), *ta = mpmd_type_of(g, a), *tb = mpmd_type_of(g, b);
    mpmd_type ab, out;
    int k = broadcast_shape(ta, tb, &ab);
    if (k < 0) k = broadcast_shape(&ab, tc, &out);
    if (k >= 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: cond %s, a %s and b %s do not broadcast to one shape (numpy rules: axis -%d "
                         "differs)",
                         fn, mpmd_tstr(g, cond), mpmd_tstr(g, a), mpmd_tstr(g, b), k + 1);
    out.dtype = ta->dtype;
    for (int i = 0; i < 3; i++)
        in[i] = mpmd_broadcast_to(g, in[i], out.ndim, out.dim);
    return mpmd_emit(g, &mpmd_op_where, 3, in, out);
}

mpmd_value mpmd_dropout(mpmd_graph *g, mpmd_value x, float rate, mpmd_value key) {
    const char *fn = "mpmd_dropout";
    mpmd_value in[2] = {x, key};
    if (!mpmd_check_operands(g, fn, 2, in)) return MPMD_NONE;
    if (!check_f32(g, fn, "x", x)) return MPMD_NONE;
    const mpmd_type *tk = mpmd_type_of(g, key);
    if (tk->dtype != MPMD_I32 || mpmd_type_numel(tk) != 2)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the key must be i32 with 2 elements (a seed pair), got %s",
                         fn, mpmd_tstr(g, key));
    if (!(rate >= 0.0f && rate < 1.0f))
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: rate %g is outside [0, 1)", fn, (double)rate);
    if (rate == 0.0f) return x; /* nothing dropped */
    mpmd_value r = mpmd_emit(g, &mpmd_op_dropout, 2, in, *mpmd_type_of(g, x));
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) mpmd_attr_set_dropout(n, rate, g->n_dropout++);
    return r;
}

/* ---- unary ops ------------------------------------------------------------------- */

static mpmd_value unary(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, mpmd_value a) {
    if (!mpmd_check_operands(g, fn, 1, &a)) return MPMD_NONE;
    if (!check_f32(g, fn, "a", a)) return MPMD_NONE;
    return mpmd_emit(g, op, 1, &a, *mpmd_type_of(g, a));
}

static mpmd_value unary_scalar(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, mpmd_value a, float s) {
    mpmd_value r = unary(g, op, fn, a);
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) mpmd_attr_set_scalar(n, s);
    return r;
}

mpmd_value mpmd_add_scalar(mpmd_graph *g, mpmd_value a, float s) {
    return unary_scalar(g, &mpmd_op_add_scalar, "mpmd_add_scalar", a, s);
}
mpmd_value mpmd_mul_scalar(mpmd_graph *g, mpmd_value a, float s) {
    return unary_scalar(g, &mpmd_op_mul_scalar, "mpmd_mul_scalar", a, s);
}

#define UNARY_CTOR(name, reads, tol, domain, cost, gcost)                                                    \
    mpmd_value mpmd_##name(mpmd_graph *g, mpmd_value a) {                                                    \
        return unary(g, &mpmd_op_##name, "mpmd_" #name, a);                                                  \
    }
MPMD_UNARY_OPS(UNARY_CTOR)
MPMD_UNARY_GRAD_OPS(UNARY_CTOR)

/* A fused backward op (gy, v): both have the forward op's type. */
static mpmd_value grad_op(mpmd_graph *g, const mpmd_op_desc *op, mpmd_value gy, mpmd_value v) {
    mpmd_value in[2] = {gy, v};
    if (!mpmd_check_operands(g, op->name, 2, in)) return MPMD_NONE;
    const mpmd_type *tg = mpmd_type_of(g, gy), *tv = mpmd_type_of(g, v);
    if (!mpmd_type_equal(tg, tv))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: cotangent %s and operand %s must have the same type",
                         op->name, mpmd_tstr(g, gy), mpmd_tstr(g, v));
    return mpmd_emit(g, op, 2, in, *tg);
}

/* ---- broadcast_to and sum_to ------------------------------------------------------ */

mpmd_value mpmd_broadcast_to(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims) {
    const char *fn = "mpmd_broadcast_to";
    if (!mpmd_check_operands(g, fn, 1, &a)) return MPMD_NONE;
    if (!check_f32(g, fn, "a", a) || !check_target(g, fn, ndim, dims)) return MPMD_NONE;
    mpmd_type ta = *mpmd_type_of(g, a), t = mpmd_make_type(ta.dtype, ndim, dims);
    if (ta.ndim > ndim)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: %s has more axes than the target %s", fn, mpmd_tstr(g, a),
                         mpmd_tstr_type(g, &t));
    for (int k = 0; k < ta.ndim; k++) {
        int64_t da = ta.dim[ta.ndim - 1 - k], dt = t.dim[ndim - 1 - k];
        if (da != dt && da != 1)
            return mpmd_fail(g, MPMD_ERR_SHAPE,
                             "%s: %s does not broadcast to %s: axis -%d is %lld, must be %lld or 1", fn,
                             mpmd_tstr(g, a), mpmd_tstr_type(g, &t), k + 1, (long long)da, (long long)dt);
    }
    if (mpmd_type_equal(&ta, &t)) return a; /* nothing to broadcast */
    return mpmd_emit(g, &mpmd_op_broadcast_to, 1, &a, t);
}

mpmd_value mpmd_sum_to(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims) {
    const char *fn = "mpmd_sum_to";
    if (!mpmd_check_operands(g, fn, 1, &a)) return MPMD_NONE;
    if (!check_f32(g, fn, "a", a) || !check_target(g, fn, ndim, dims)) return MPMD_NONE;
    mpmd_type ta = *mpmd_type_of(g, a), t = mpmd_make_type(ta.dtype, ndim, dims);
    if (ndim > ta.ndim)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the target %s has more axes than %s", fn,
                         mpmd_tstr_type(g, &t), mpmd_tstr(g, a));
    for (int k = 0; k < ndim; k++) {
        int64_t da = ta.dim[ta.ndim - 1 - k], dt = t.dim[ndim - 1 - k];
        if (da != dt && dt != 1)
            return mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "%s: cannot sum %s to %s: the target must broadcast to the operand, but its axis -%d "
                "is %lld, neither %lld nor 1",
                fn, mpmd_tstr(g, a), mpmd_tstr_type(g, &t), k + 1, (long long)dt, (long long)da);
    }
    if (mpmd_type_equal(&ta, &t)) return a; /* nothing to sum */
    return mpmd_emit(g, &mpmd_op_sum_to, 1, &a, t);
}

/* ---- gradient rules ----------------------------------------------------------------- */

/* The cotangent of a broadcast result, summed back to operand i's shape
 * (unchanged when the operand was not broadcast). */
static mpmd_value unbroadcast(mpmd_graph *g, mpmd_value gy, const mpmd_type *t) {
    return mpmd_sum_to(g, gy, t->ndim, t->dim);
}

/* Input types are copied first: emitting may move the node array. */
static void in_types(const mpmd_graph *g, const mpmd_node *n, mpmd_type *ta, mpmd_type *tb) {
    *ta = *mpmd_type_of(g, mpmd_in(n, 0));
    *tb = *mpmd_type_of(g, mpmd_in(n, 1));
}

/* y = a + b:  ga = sum_to(gy), gb = sum_to(gy) */
static void vjp_add(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta, tb;
    in_types(g, n, &ta, &tb);
    gin[0] = unbroadcast(g, gy, &ta);
    gin[1] = unbroadcast(g, gy, &tb);
}

/* y = a - b:  ga = sum_to(gy), gb = -sum_to(gy) (negated after summing: the
 * smaller tensor when b was broadcast) */
static void vjp_sub(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta, tb;
    in_types(g, n, &ta, &tb);
    gin[0] = unbroadcast(g, gy, &ta);
    gin[1] = mpmd_neg(g, unbroadcast(g, gy, &tb));
}

/* y = a b:  ga = sum_to(gy b), gb = sum_to(gy a) */
static void vjp_mul(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta, tb;
    in_types(g, n, &ta, &tb);
    mpmd_value a = mpmd_in(n, 0), b = mpmd_in(n, 1);
    gin[0] = unbroadcast(g, mpmd_mul(g, gy, b), &ta);
    gin[1] = unbroadcast(g, mpmd_mul(g, gy, a), &tb);
}

/* y = a / b:  ga = sum_to(gy / b); gb = sum_to(-gy a / b^2) = -sum_to((gy / b) y),
 * sharing t = gy / b between both. */
static void vjp_div(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta, tb;
    in_types(g, n, &ta, &tb);
    mpmd_value b = mpmd_in(n, 1), y = mpmd_out(n);
    mpmd_value t = mpmd_div(g, gy, b);
    gin[0] = unbroadcast(g, t, &ta);
    gin[1] = mpmd_neg(g, unbroadcast(g, mpmd_mul(g, t, y), &tb));
}

/* y = a + s:  ga = gy */
static void vjp_add_scalar(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    (void)g;
    (void)n;
    gin[0] = gy;
}

/* y = s a:  ga = s gy */
static void vjp_mul_scalar(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = mpmd_mul_scalar(g, gy, mpmd_attr_scalar(n));
}

/* y = -a:  ga = -gy */
static void vjp_neg(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    (void)n;
    gin[0] = mpmd_neg(g, gy);
}

/* y = exp(x):  gx = gy y */
static void vjp_exp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = mpmd_mul(g, gy, mpmd_out(n));
}

/* y = log(x):  gx = gy / x */
static void vjp_log(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = mpmd_div(g, gy, mpmd_in(n, 0));
}

/* y = f(x) of MPMD_UNARY_GRAD_OPS:  gx = <name>_grad(gy, v), v = y or x as
 * the list's `reads` column says (relu reads y: y > 0 exactly where x > 0,
 * and the output is what the backward pass keeps). */
#define GRAD_V_OUT(n) mpmd_out(n)
#define GRAD_V_IN(n) mpmd_in(n, 0)
#define UNARY_VJP(name, reads, tol, domain, cost, gcost)                                                     \
    static void vjp_##name(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {              \
        gin[0] = grad_op(g, &mpmd_op_##name##_grad, gy, GRAD_V_##reads(n));                                  \
    }
MPMD_UNARY_GRAD_OPS(UNARY_VJP)

/* max_weight(a, b) at the broadcast shape */
static mpmd_value max_weight(mpmd_graph *g, mpmd_value a, mpmd_value b) {
    mpmd_type t;
    broadcast_shape(mpmd_type_of(g, a), mpmd_type_of(g, b), &t);
    t.dtype = mpmd_type_of(g, a)->dtype;
    mpmd_value in[2] = {a, b};
    return mpmd_emit(g, &mpmd_op_max_weight, 2, in, t);
}

/* y = maximum(a, b):  ga = sum_to(gy w(a, b)), gb = sum_to(gy w(b, a)),
 * w = max_weight: a tie splits the cotangent evenly. minimum is the same
 * with the operands' roles in w swapped. */
static void vjp_extremum(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin, int minimum) {
    mpmd_type ta, tb;
    in_types(g, n, &ta, &tb);
    mpmd_value a = mpmd_in(n, 0), b = mpmd_in(n, 1);
    mpmd_value hi = minimum ? b : a, lo = minimum ? a : b;
    gin[0] = unbroadcast(g, mpmd_mul(g, gy, max_weight(g, hi, lo)), &ta);
    gin[1] = unbroadcast(g, mpmd_mul(g, gy, max_weight(g, lo, hi)), &tb);
}
static void vjp_maximum(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    vjp_extremum(g, n, gy, gin, 0);
}
static void vjp_minimum(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    vjp_extremum(g, n, gy, gin, 1);
}

/* A mask is piecewise constant: no gradient flows to either operand. */
static void vjp_compare(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    (void)g, (void)n, (void)gy;
    gin[0] = gin[1] = MPMD_NONE;
}

static mpmd_value where_grad(mpmd_graph *g, mpmd_value gy, mpmd_value cond, int side) {
    mpmd_value in[2] = {gy, cond};
    mpmd_value r = mpmd_emit(g, &mpmd_op_where_grad, 2, in, *mpmd_type_of(g, gy));
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) mpmd_attr_set_where_side(n, side);
    return r;
}

/* y = where(c, a, b) (operands already of y's shape):  ga = gy where c,
 * gb = gy where not c; none for the mask. */
static void vjp_where(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value c = mpmd_in(n, 0);
    gin[0] = MPMD_NONE;
    gin[1] = where_grad(g, gy, c, 0);
    gin[2] = where_grad(g, gy, c, 1);
}

/* y = x m / (1 - rate) with the mask m drawn from (key, element,
 * microbatch, stream):  gx = gy m / (1 - rate), the same op on gy with the
 * same key and stream, so the mask is drawn again rather than kept. */
static void vjp_dropout(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value in[2] = {gy, mpmd_in(n, 1)};
    float rate = mpmd_attr_dropout_rate(n);
    int64_t stream = mpmd_attr_dropout_stream(n);
    mpmd_value r = mpmd_emit(g, &mpmd_op_dropout, 2, in, *mpmd_type_of(g, gy));
    mpmd_node *d = mpmd_node_of(g, r);
    if (d) mpmd_attr_set_dropout(d, rate, stream);
    gin[0] = r;
    gin[1] = MPMD_NONE;
}

/* broadcast_to and sum_to are each other's adjoints. */
static void vjp_broadcast_to(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta = *mpmd_type_of(g, mpmd_in(n, 0));
    gin[0] = mpmd_sum_to(g, gy, ta.ndim, ta.dim);
}

static void vjp_sum_to(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type ta = *mpmd_type_of(g, mpmd_in(n, 0));
    gin[0] = mpmd_broadcast_to(g, gy, ta.ndim, ta.dim);
}

/* ---- cast ------------------------------------------------------------------------ */

mpmd_value mpmd_cast(mpmd_graph *g, mpmd_value x, mpmd_dtype dtype) {
    const char *fn = "mpmd_cast";
    if (!mpmd_check_operands(g, fn, 1, &x)) return MPMD_NONE;
    if (!mpmd_dtype_is_float(dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the target dtype must be f32, bf16 or f16, got %s (%d)", fn,
                         mpmd_dtype_name(dtype), (int)dtype);
    if (!check_f32(g, fn, "x", x)) return MPMD_NONE;
    mpmd_type t = *mpmd_type_of(g, x);
    if (t.dtype == dtype) return x; /* nothing to convert */
    t.dtype = dtype;
    /* A cast of a value made before the loop (a parameter) is the same for
     * every microbatch: it is made once, before the loop, and lives through
     * it, instead of once per microbatch in flight. Its gradient is still
     * taken per microbatch, in the stage of the cotangent (mpmd_grad). */
    int saved = g->region;
    if (g->region == MPMD_REGION_BODY && mpmd_node_of(g, x)->region == MPMD_REGION_PRE && !g->emit_bwd)
        g->region = MPMD_REGION_PRE;
    mpmd_value y = mpmd_emit(g, &mpmd_op_cast, 1, &x, t);
    g->region = saved;
    return y;
}

static void vjp_cast(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = mpmd_cast(g, gy, g->nodes[n->in[0]].type.dtype);
}
