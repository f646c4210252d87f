/* reduce.c - reductions over a set of axes: sum, mean, max, and the fused
 * backward op of max.
 *
 * Attributes (all three ops; the accessors are in backend/op_descs.h):
 * axes, the bitmask of the reduced input axes, and keepdims; mean also
 * keeps its factor 1/count as its scale.
 *
 * Summation order (the CPU kernels in src/backend/cpu/reduce.c implement
 * exactly this; the tests check it bit for bit). Drop the axes of size 1,
 * then merge neighbouring axes that are both reduced or both kept, giving
 * groups of axes. Then for each output element:
 * - if the last group is reduced (contiguous runs of length L): the result
 *   is mpmd_sum_f32 of the first run, then += mpmd_sum_f32 of each further
 *   run, runs taken in row-major order of the other reduced groups;
 * - if the last group is kept: the result is the first reduced element,
 *   then += each further reduced element in row-major order.
 * The order depends only on the shape and the axes, never on the thread
 * count. mean is that sum multiplied by the f32 value 1/count.
 */
#include "graph/graph.h"
#include "backend/op_descs.h"

#include <string.h>

extern const mpmd_op_desc mpmd_op_sum, mpmd_op_mean, mpmd_op_max, mpmd_op_max_grad;

/* " axes=[0,2] keepdims=1" */
static void reduce_attrs(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    size_t k = strlen(buf);
    const mpmd_type *xt = mpmd_type_of(g, mpmd_in(n, 0));
    int ndim = xt ? xt->ndim : MPMD_MAX_DIMS;
    if (k < len) k += (size_t)snprintf(buf + k, len - k, " axes=[");
    int first = 1;
    for (int i = 0; i < ndim && k < len; i++) {
        if (!(mpmd_attr_axes(n) & (1 << i))) continue;
        k += (size_t)snprintf(buf + k, len - k, first ? "%d" : ",%d", i);
        first = 0;
    }
    if (k < len) snprintf(buf + k, len - k, "] keepdims=%d", mpmd_attr_keepdims(n));
}

/* Shared constructor: validates the axes, computes the mask and the output
 * type, emits `op`. */
static mpmd_value reduce_build(mpmd_graph *g, const mpmd_op_desc *op, const char *fname, mpmd_value a,
                               int naxes, const int *axes, int keepdims) {
    if (!mpmd_check_operands(g, fname, 1, &a)) return MPMD_NONE;
    const mpmd_type *at = mpmd_type_of(g, a);
    if (!mpmd_dtype_is_float(at->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: a is %s, expected a float tensor (f32, bf16, f16)", fname,
                         mpmd_tstr(g, a));
    if (naxes < 0 || naxes > at->ndim || (naxes > 0 && !axes))
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: %d axes given for %s (ndim %d); expected 0..%d axes",
                         fname, naxes, mpmd_tstr(g, a), at->ndim, at->ndim);
    int mask = 0;
    if (naxes == 0) {
        mask = (1 << at->ndim) - 1; /* all axes */
    } else {
        for (int i = 0; i < naxes; i++) {
            int ax = mpmd_norm_axis(axes[i], at->ndim);
            if (ax < 0)
                return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: axis %d is out of range for %s (ndim %d)", fname,
                                 axes[i], mpmd_tstr(g, a), at->ndim);
            if (mask & (1 << ax))
                return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: axis %d (axis %d of %s) is listed twice", fname,
                                 axes[i], ax, mpmd_tstr(g, a));
            mask |= 1 << ax;
        }
    }
    int64_t count = 1, dims[MPMD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < at->ndim; i++) {
        if (mask & (1 << i)) {
            count *= at->dim[i];
            if (keepdims) dims[nd++] = 1;
        } else {
            dims[nd++] = at->dim[i];
        }
    }
    if (count == 0 && op != &mpmd_op_sum)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the reduced axes of %s hold no elements", fname,
                         mpmd_tstr(g, a));
    mpmd_value y = mpmd_emit(g, op, 1, &a, mpmd_make_type(at->dtype, nd, dims));
    mpmd_node *n = mpmd_node_of(g, y);
    if (n) {
        mpmd_attr_set_reduce(n, mask, keepdims ? 1 : 0);
        mpmd_attr_set_scale(n, op == &mpmd_op_mean ? 1.0f / (float)count : 1.0f);
    }
    return y;
}

mpmd_value mpmd_sum(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims) {
    return reduce_build(g, &mpmd_op_sum, "mpmd_sum", a, naxes, axes, keepdims);
}

mpmd_value mpmd_mean(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims) {
    return reduce_build(g, &mpmd_op_mean, "mpmd_mean", a, naxes, axes, keepdims);
}

mpmd_value mpmd_max(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims) {
    return reduce_build(g, &mpmd_op_max, "mpmd_max", a, naxes, axes, keepdims);
}

/* The input's shape with the reduced axes set to 1 (the keepdims shape). */
static void keepdims_shape(const mpmd_type *xt, int64_t mask, int64_t *dims) {
    for (int i = 0; i < xt->ndim; i++)
        dims[i] = (mask & (1 << i)) ? 1 : xt->dim[i];
}

/* y = sum_R x (mean: times s = 1/count): dx = broadcast(dy) (times s).
 * Without keepdims, dy is first reshaped to the keepdims shape so that
 * broadcasting lines its axes up with x's. */
static void sum_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type xt = *mpmd_type_of(g, mpmd_in(n, 0));
    int64_t kd[MPMD_MAX_DIMS];
    keepdims_shape(&xt, mpmd_attr_axes(n), kd);
    mpmd_value t = gy;
    if (n->op == &mpmd_op_mean) t = mpmd_mul_scalar(g, t, mpmd_attr_scale(n));
    if (!mpmd_attr_keepdims(n)) t = mpmd_reshape(g, t, xt.ndim, kd);
    gin[0] = mpmd_broadcast_to(g, t, xt.ndim, xt.dim);
}

/* y = max_R x: dx_i = dy / c at the positions i where x_i == y (c of them:
 * ties split the gradient equally, as JAX does), 0 elsewhere. One fused op
 * (max_grad), which recomputes y from x. */
static void max_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_value x = mpmd_in(n, 0);
    mpmd_type xt = *mpmd_type_of(g, x);
    int64_t mask = mpmd_attr_axes(n);
    int keep = mpmd_attr_keepdims(n);
    mpmd_value in[2] = {x, gy};
    mpmd_value gx = mpmd_emit(g, &mpmd_op_max_grad, 2, in, xt);
    mpmd_node *m = mpmd_node_of(g, gx);
    if (m) mpmd_attr_set_reduce(m, mask, keep);
    gin[0] = gx;
}

const mpmd_op_desc mpmd_op_sum = {"sum", 1, -1, 0, reduce_attrs, sum_vjp};
const mpmd_op_desc mpmd_op_mean = {"mean", 1, -1, 0, reduce_attrs, sum_vjp};
const mpmd_op_desc mpmd_op_max = {"max", 1, -1, 0, reduce_attrs, max_vjp};
/* inputs (x, dy of max); output dx, x's type. Not differentiable again. */
const mpmd_op_desc mpmd_op_max_grad = {"max_grad", 2, -1, 0, reduce_attrs, NULL};
