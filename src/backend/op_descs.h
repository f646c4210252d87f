/* op_descs.h - the op descriptors that the backends' kernel tables key on,
 * and typed accessors of their attributes,
 * for the op families whose src/ops/ file has no header of its own:
 * elementwise (src/ops/elementwise.c) and reduce and shape (src/ops/reduce.c,
 * src/ops/shape.c). nn and optim are in src/ops/nn.h and src/ops/optim.h,
 * cast and the structural ops in src/graph/graph.h.
 *
 * C11 that also compiles as C++ (the CUDA files include it).
 */
#ifndef MPMD_OP_DESCS_H
#define MPMD_OP_DESCS_H

#include "graph/graph.h"
#include "ops/elementwise_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* elementwise */
extern const mpmd_op_desc mpmd_op_add_scalar, mpmd_op_mul_scalar;
extern const mpmd_op_desc mpmd_op_broadcast_to, mpmd_op_sum_to;
/* the binary and unary ops of the lists in src/ops/elementwise_ops.h */
#define MPMD_BINARY_DECL(name, ...) extern const mpmd_op_desc mpmd_op_##name;
MPMD_BINARY_OPS(MPMD_BINARY_DECL)
#undef MPMD_BINARY_DECL
#define MPMD_UNARY_DECL(name, ...) extern const mpmd_op_desc mpmd_op_##name;
#define MPMD_UNARY_GRAD_DECL(name, ...) extern const mpmd_op_desc mpmd_op_##name, mpmd_op_##name##_grad;
MPMD_UNARY_OPS(MPMD_UNARY_DECL)
MPMD_UNARY_GRAD_OPS(MPMD_UNARY_GRAD_DECL)
#undef MPMD_UNARY_DECL
#undef MPMD_UNARY_GRAD_DECL
extern const mpmd_op_desc mpmd_op_compare, mpmd_op_max_weight;
extern const mpmd_op_desc mpmd_op_where, mpmd_op_where_grad, mpmd_op_dropout;

/* The elementwise ops' attributes, by name rather than by slot: the
 * constructors set them, the printers, gradient rules and kernels read
 * them.
 *   compare      cmp: the mpmd_cmp (checked by mpmd_compare)
 *   where_grad   side: 0: gy where cond != 0, else 0; 1: the other way
 *   add_scalar,
 *   mul_scalar   scalar: s
 *   dropout      rate, and stream: how many dropout ops mpmd_dropout made
 *                before it (copies made by remat and the backward keep it) */
static inline int mpmd_attr_cmp(const mpmd_node *n) { return (int)n->ia[0]; }
static inline void mpmd_attr_set_cmp(mpmd_node *n, int cmp) { n->ia[0] = cmp; }
static inline int mpmd_attr_where_side(const mpmd_node *n) { return (int)n->ia[0]; }
static inline void mpmd_attr_set_where_side(mpmd_node *n, int side) { n->ia[0] = side; }
static inline float mpmd_attr_scalar(const mpmd_node *n) { return n->fa[0]; }
static inline void mpmd_attr_set_scalar(mpmd_node *n, float s) { n->fa[0] = s; }
static inline float mpmd_attr_dropout_rate(const mpmd_node *n) { return n->fa[0]; }
static inline int64_t mpmd_attr_dropout_stream(const mpmd_node *n) { return n->ia[0]; }
static inline void mpmd_attr_set_dropout(mpmd_node *n, float rate, int64_t stream) {
    n->fa[0] = rate;
    n->ia[0] = stream;
}

/* The reduction and shape ops' attributes, likewise.
 *   sum, mean, max, max_grad  axes: the bitmask of the reduced input axes;
 *                             keepdims; scale: mean's 1/count (1 otherwise)
 *   slice, slice_grad         axis and the range [start, stop) on it
 *   concat                    axis
 *   permute                   perm: out.dim[i] = a.dim[perm[i]] */
static inline int64_t mpmd_attr_axes(const mpmd_node *n) { return n->ia[0]; }
static inline int mpmd_attr_keepdims(const mpmd_node *n) { return (int)n->ia[1]; }
static inline float mpmd_attr_scale(const mpmd_node *n) { return n->fa[0]; }
static inline void mpmd_attr_set_reduce(mpmd_node *n, int64_t axes, int keepdims) {
    n->ia[0] = axes;
    n->ia[1] = keepdims;
}
static inline void mpmd_attr_set_scale(mpmd_node *n, float scale) { n->fa[0] = scale; }
static inline int mpmd_attr_axis(const mpmd_node *n) { return (int)n->ia[0]; }
static inline void mpmd_attr_set_axis(mpmd_node *n, int axis) { n->ia[0] = axis; }
static inline int64_t mpmd_attr_start(const mpmd_node *n) { return n->ia[1]; }
static inline int64_t mpmd_attr_stop(const mpmd_node *n) { return n->ia[2]; }
static inline void mpmd_attr_set_slice(mpmd_node *n, int axis, int64_t start, int64_t stop) {
    n->ia[0] = axis;
    n->ia[1] = start;
    n->ia[2] = stop;
}
static inline int mpmd_attr_perm(const mpmd_node *n, int i) { return (int)n->ia[i]; }
static inline const int64_t *mpmd_attr_perms(const mpmd_node *n) { return n->ia; }
static inline void mpmd_attr_set_perm(mpmd_node *n, int i, int p) { n->ia[i] = p; }

/* reduce and shape */
extern const mpmd_op_desc mpmd_op_sum, mpmd_op_mean, mpmd_op_max, mpmd_op_max_grad;
extern const mpmd_op_desc mpmd_op_reshape, mpmd_op_permute, mpmd_op_slice, mpmd_op_slice_grad, mpmd_op_concat;

#ifdef __cplusplus
}
#endif

#endif
