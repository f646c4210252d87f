/* shape.c - ops that move data without arithmetic: reshape, permute
 * (transpose), slice (and its backward, slice_grad), concat. They work on
 * f32 and i32 tensors alike (both are 4-byte elements).
 *
 * Attributes:
 *   reshape     none (the output type is the new shape)
 *   permute     perm: out.dim[i] = a.dim[perm[i]]
 *   slice       axis, start, stop
 *   slice_grad  the same as the slice it differentiates
 *   concat      axis
 */
#include "graph/graph.h"
#include "backend/op_descs.h"

#include <string.h>

extern const mpmd_op_desc mpmd_op_reshape, mpmd_op_permute, mpmd_op_slice, mpmd_op_slice_grad, mpmd_op_concat;

static size_t attr_end(char *buf, size_t len) {
    size_t k = strlen(buf);
    return k < len ? k : len;
}

/* "[2,-1,4]" of a dims array, for messages. */
static const char *dims_str(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

static int is_data_dtype(mpmd_dtype d) { return d == MPMD_I32 || mpmd_dtype_is_float(d); }

/* ---- reshape ---------------------------------------------------------------- */

mpmd_value mpmd_reshape(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims) {
    if (!mpmd_check_operands(g, "mpmd_reshape", 1, &a)) return MPMD_NONE;
    const mpmd_type *at = mpmd_type_of(g, a);
    char db[160];
    if (!is_data_dtype(at->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_reshape: a is %s, expected an f32 or i32 tensor",
                         mpmd_tstr(g, a));
    if (ndim < 0 || ndim > MPMD_MAX_DIMS || (ndim > 0 && !dims))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_reshape: cannot reshape %s to %d dimensions (at most %d)",
                         mpmd_tstr(g, a), ndim, MPMD_MAX_DIMS);
    int64_t out[MPMD_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == -1 && infer < 0) {
            infer = i;
        } else if (dims[i] < 0) {
            return mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "mpmd_reshape: bad target shape %s for %s: dims must be >= 0, with at most one -1",
                dims_str(db, sizeof db, ndim, dims), mpmd_tstr(g, a));
        } else {
            if (dims[i] > 0 && known > ((int64_t)1 << 62) / dims[i]) /* before the product can overflow */
                return mpmd_fail(
                    g, MPMD_ERR_SHAPE,
                    "mpmd_reshape: the target shape %s of %s has more elements than fit in memory",
                    dims_str(db, sizeof db, ndim, dims), mpmd_tstr(g, a));
            known *= dims[i];
        }
        out[i] = dims[i];
    }
    int64_t numel = mpmd_type_numel(at);
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "mpmd_reshape: cannot reshape %s (%lld elements) to %s: no size for the -1 dim fits",
                mpmd_tstr(g, a), (long long)numel, dims_str(db, sizeof db, ndim, dims));
        out[infer] = numel / known;
    } else if (known != numel) {
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "mpmd_reshape: cannot reshape %s (%lld elements) to %s (%lld elements): counts differ",
            mpmd_tstr(g, a), (long long)numel, dims_str(db, sizeof db, ndim, dims), (long long)known);
    }
    return mpmd_emit(g, &mpmd_op_reshape, 1, &a, mpmd_make_type(at->dtype, ndim, out));
}

/* y = reshape(x): dx = reshape(dy, shape of x). */
static void reshape_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type xt = *mpmd_type_of(g, mpmd_in(n, 0));
    if (!mpmd_dtype_is_float(xt.dtype)) return;
    gin[0] = mpmd_reshape(g, gy, xt.ndim, xt.dim);
}

/* ---- permute, transpose ------------------------------------------------------ */

static void permute_attrs(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    size_t k = attr_end(buf, len);
    if (k < len) k += (size_t)snprintf(buf + k, len - k, " perm=[");
    for (int i = 0; i < n->type.ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ",%d" : "%d", mpmd_attr_perm(n, i));
    if (k < len) snprintf(buf + k, len - k, "]");
}

static mpmd_value permute_build(mpmd_graph *g, const char *fname, mpmd_value a, const int *perm) {
    if (!mpmd_check_operands(g, fname, 1, &a)) return MPMD_NONE;
    const mpmd_type *at = mpmd_type_of(g, a);
    if (!is_data_dtype(at->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: a is %s, expected an f32 or i32 tensor", fname,
                         mpmd_tstr(g, a));
    if (at->ndim > 0 && !perm) return mpmd_fail(g, MPMD_ERR_INVALID, "%s: perm is NULL", fname);
    int seen = 0;
    int64_t dims[MPMD_MAX_DIMS];
    for (int i = 0; i < at->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= at->ndim || (seen & (1 << perm[i]))) {
            char pb[96];
            size_t k = (size_t)snprintf(pb, sizeof pb, "[");
            for (int j = 0; j < at->ndim && k < sizeof pb; j++)
                k += (size_t)snprintf(pb + k, sizeof pb - k, j ? ",%d" : "%d", perm[j]);
            if (k < sizeof pb) snprintf(pb + k, sizeof pb - k, "]");
            return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: perm %s is not a permutation of 0..%d for %s", fname, pb,
                             at->ndim - 1, mpmd_tstr(g, a));
        }
        seen |= 1 << perm[i];
        dims[i] = at->dim[perm[i]];
    }
    const int nd = at->ndim; /* `at` points into the node array, which the emit may move */
    mpmd_value y = mpmd_emit(g, &mpmd_op_permute, 1, &a, mpmd_make_type(at->dtype, nd, dims));
    mpmd_node *n = mpmd_node_of(g, y);
    if (n)
        for (int i = 0; i < nd; i++)
            mpmd_attr_set_perm(n, i, perm[i]);
    return y;
}

mpmd_value mpmd_permute(mpmd_graph *g, mpmd_value a, const int *perm) {
    return permute_build(g, "mpmd_permute", a, perm);
}

mpmd_value mpmd_transpose(mpmd_graph *g, mpmd_value a) {
    if (!mpmd_check_operands(g, "mpmd_transpose", 1, &a)) return MPMD_NONE;
    int nd = mpmd_type_of(g, a)->ndim;
    if (nd < 2)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_transpose: a is %s, expected at least 2 dimensions",
                         mpmd_tstr(g, a));
    int perm[MPMD_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        perm[i] = i;
    perm[nd - 2] = nd - 1;
    perm[nd - 1] = nd - 2;
    return permute_build(g, "mpmd_transpose", a, perm);
}

/* y = permute(x, p), y[i...] = x[...] with out axis k = in axis p[k]:
 * dx = permute(dy, q) with q the inverse, q[p[k]] = k. */
static void permute_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    if (!mpmd_dtype_is_float(n->type.dtype)) return;
    int inv[MPMD_MAX_DIMS];
    for (int k = 0; k < n->type.ndim; k++)
        inv[mpmd_attr_perm(n, k)] = k;
    gin[0] = mpmd_permute(g, gy, inv);
}

/* ---- slice ------------------------------------------------------------------- */

static void slice_attrs(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    size_t k = attr_end(buf, len);
    if (k < len)
        snprintf(buf + k, len - k, " axis=%d start=%lld stop=%lld", mpmd_attr_axis(n),
                 (long long)mpmd_attr_start(n), (long long)mpmd_attr_stop(n));
}

mpmd_value mpmd_slice(mpmd_graph *g, mpmd_value a, int axis, int64_t start, int64_t stop) {
    if (!mpmd_check_operands(g, "mpmd_slice", 1, &a)) return MPMD_NONE;
    const mpmd_type *at = mpmd_type_of(g, a);
    if (!is_data_dtype(at->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_slice: a is %s, expected an f32 or i32 tensor",
                         mpmd_tstr(g, a));
    int ax = mpmd_norm_axis(axis, at->ndim);
    if (ax < 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_slice: axis %d is out of range for %s (ndim %d)", axis,
                         mpmd_tstr(g, a), at->ndim);
    if (start < 0 || stop > at->dim[ax] || start >= stop)
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "mpmd_slice: range [%lld, %lld) on axis %d of %s is out of range; expected 0 <= start < "
            "stop <= %lld",
            (long long)start, (long long)stop, ax, mpmd_tstr(g, a), (long long)at->dim[ax]);
    mpmd_type yt = *at;
    yt.dim[ax] = stop - start;
    mpmd_value y = mpmd_emit(g, &mpmd_op_slice, 1, &a, yt);
    mpmd_node *n = mpmd_node_of(g, y);
    if (n) {
        mpmd_attr_set_slice(n, ax, start, stop);
    }
    return y;
}

/* y = x[start:stop] along the axis: dx = dy written into zeros of x's
 * shape at [start:stop] (one op, slice_grad). */
static void slice_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    mpmd_type xt = *mpmd_type_of(g, mpmd_in(n, 0));
    if (!mpmd_dtype_is_float(xt.dtype)) return;
    int ax = mpmd_attr_axis(n);
    int64_t start = mpmd_attr_start(n), stop = mpmd_attr_stop(n);
    mpmd_value gx = mpmd_emit(g, &mpmd_op_slice_grad, 1, &gy, xt);
    mpmd_node *m = mpmd_node_of(g, gx);
    if (m) mpmd_attr_set_slice(m, ax, start, stop);
    gin[0] = gx;
}

/* z = zeros with z[start:stop] = u along the axis: du = dz[start:stop]. */
static void slice_grad_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gz, mpmd_value *gin) {
    gin[0] = mpmd_slice(g, gz, mpmd_attr_axis(n), mpmd_attr_start(n), mpmd_attr_stop(n));
}

/* ---- concat ------------------------------------------------------------------ */

static void concat_attrs(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    size_t k = attr_end(buf, len);
    if (k < len) snprintf(buf + k, len - k, " axis=%d", mpmd_attr_axis(n));
}

mpmd_value mpmd_concat(mpmd_graph *g, int n, const mpmd_value *xs, int axis) {
    if (n < 1)
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_concat: %d operands given, expected at least 1", n);
    if (!mpmd_check_operands(g, "mpmd_concat", n, xs)) return MPMD_NONE;
    const mpmd_type *t0 = mpmd_type_of(g, xs[0]);
    if (!is_data_dtype(t0->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_concat: operand 0 is %s, expected an f32 or i32 tensor",
                         mpmd_tstr(g, xs[0]));
    int ax = mpmd_norm_axis(axis, t0->ndim);
    if (ax < 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_concat: axis %d is out of range for operand 0 %s (ndim %d)",
                         axis, mpmd_tstr(g, xs[0]), t0->ndim);
    mpmd_type yt = *t0;
    yt.dim[ax] = 0;
    for (int i = 0; i < n; i++) {
        const mpmd_type *ti = mpmd_type_of(g, xs[i]);
        int ok = ti->dtype == t0->dtype && ti->ndim == t0->ndim;
        for (int d = 0; ok && d < t0->ndim; d++)
            ok = d == ax || ti->dim[d] == t0->dim[d];
        if (!ok)
            return mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "mpmd_concat: operand %d is %s but operand 0 is %s; expected the same dtype and the "
                "same dims except axis %d",
                i, mpmd_tstr(g, xs[i]), mpmd_tstr(g, xs[0]), ax);
        yt.dim[ax] += ti->dim[ax];
    }
    mpmd_value y = mpmd_emit(g, &mpmd_op_concat, n, xs, yt);
    mpmd_node *nd = mpmd_node_of(g, y);
    if (nd) mpmd_attr_set_axis(nd, ax);
    return y;
}

/* y = [x_0, x_1, ...] along the axis: dx_i = dy[o_i : o_i + d_i], o_i the
 * sum of the earlier operands' sizes on that axis. */
static void concat_vjp(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    if (!mpmd_dtype_is_float(n->type.dtype)) return;
    int ax = mpmd_attr_axis(n);
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t d = mpmd_type_of(g, mpmd_in(n, i))->dim[ax];
        gin[i] = mpmd_slice(g, gy, ax, off, off + d);
        off += d;
    }
}

/* reshape may reuse its input's buffer: the kernel copies only when the
 * executor gave it a different one. */
const mpmd_op_desc mpmd_op_reshape = {"reshape", 1, 0, 0, NULL, reshape_vjp};
const mpmd_op_desc mpmd_op_permute = {"permute", 1, -1, 0, permute_attrs, permute_vjp};
const mpmd_op_desc mpmd_op_slice = {"slice", 1, -1, 0, slice_attrs, slice_vjp};
const mpmd_op_desc mpmd_op_slice_grad = {"slice_grad", 1, -1, 0, slice_attrs, slice_grad_vjp};
const mpmd_op_desc mpmd_op_concat = {"concat", -1, -1, 0, concat_attrs, concat_vjp};
