/* op_descs.h - the op descriptors that the backends' kernel tables key on,
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

#ifdef __cplusplus
extern "C" {
#endif

/* elementwise */
extern const mpmd_op_desc mpmd_op_add, mpmd_op_sub, mpmd_op_mul, mpmd_op_div;
extern const mpmd_op_desc mpmd_op_add_scalar, mpmd_op_mul_scalar, mpmd_op_neg, mpmd_op_exp, mpmd_op_log;
extern const mpmd_op_desc mpmd_op_tanh, mpmd_op_sqrt, mpmd_op_rsqrt, mpmd_op_square, mpmd_op_relu,
    mpmd_op_gelu;
extern const mpmd_op_desc mpmd_op_broadcast_to, mpmd_op_sum_to;
extern const mpmd_op_desc mpmd_op_tanh_grad, mpmd_op_sqrt_grad, mpmd_op_rsqrt_grad, mpmd_op_square_grad;
extern const mpmd_op_desc mpmd_op_relu_grad, mpmd_op_gelu_grad;
extern const mpmd_op_desc mpmd_op_sigmoid, mpmd_op_silu, mpmd_op_sigmoid_grad, mpmd_op_silu_grad;
extern const mpmd_op_desc mpmd_op_maximum, mpmd_op_minimum, mpmd_op_compare, mpmd_op_max_weight;
extern const mpmd_op_desc mpmd_op_where, mpmd_op_where_grad, mpmd_op_dropout;

/* reduce and shape */
extern const mpmd_op_desc mpmd_op_sum, mpmd_op_mean, mpmd_op_max, mpmd_op_max_grad;
extern const mpmd_op_desc mpmd_op_reshape, mpmd_op_permute, mpmd_op_slice, mpmd_op_slice_grad, mpmd_op_concat;

#ifdef __cplusplus
}
#endif

#endif
