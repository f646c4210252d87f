/* elementwise_ops.h - the lists of the elementwise family's binary and unary ops, from
 * which everything per op is generated: the descriptors and public
 * constructors (src/ops/elementwise.c), their declarations
 * (src/backend/op_descs.h), the CPU and CUDA kernel tables
 * (src/backend/cpu/elementwise.c, src/backend/cuda/elementwise.cu) and
 * the tests' rows (tests/test_backend_ops.c, tests/test_bf16.c,
 * tests/test_ops_elementwise.c). "Adding an op" in docs/pipeline.md walks
 * through one.
 *
 * Each list is an X-macro: MPMD_UNARY_GRAD_OPS(X) calls X once per op with
 * its columns, and the including file defines X to emit what it needs.
 *
 * MPMD_UNARY_GRAD_OPS: y = f(x), whose gradient is ONE fused backward op
 * "<name>_grad"(gy, v) = gy f'(x), v being y or x, whichever the formula
 * needs (a single pass over memory instead of a chain of small nodes; the
 * backward op has no gradient of its own). Columns:
 *   name    descriptors mpmd_op_<name>, mpmd_op_<name>_grad; constructor
 *           mpmd_<name>(g, a), declared in include/mpmd.h. Each backend
 *           writes the formulas once, as un_<name>(x) and gr_<name>(gy, v),
 *           in the "formulas" section of its elementwise file.
 *   reads   OUT: v = the forward output y; IN: v = the input x
 *   tol     the test tolerance of both ops across backends: ELEM (a formula
 *           per element; the last bits of exp/log/tanh may differ) or EXACT
 *           (selections and single roundings: the same bits everywhere)
 *   domain  inputs the tests draw: ANY, or POS (x > 0: sqrt, log)
 *   cost    rough elementary operations per element of the forward and of
 *   gcost   the backward op (the CPU's threshold for using more threads)
 *
 * MPMD_UNARY_OPS: y = f(x) whose gradient rule (vjp_<name> in
 * src/ops/elementwise.c) is composed of other ops; the same columns, reads
 * and gcost unused.
 */
#ifndef MPMD_ELEMENTWISE_OPS_H
#define MPMD_ELEMENTWISE_OPS_H

/* MPMD_BINARY_OPS: y = f(a, b) with numpy broadcasting (the public
 * constructor mpmd_<name>(g, a, b)), whose gradient rule vjp_<name> is
 * written in src/ops/elementwise.c. Each backend writes the formula once,
 * bn_<name>(x, y). Columns: name; tol as above (EXACT: a selection). */

/* X(name, tol) */
// clang-format off
#define MPMD_BINARY_OPS(X)                                                                                          \
    X(add, ELEM)                             /* a + b */                                                            \
    X(sub, ELEM)                             /* a - b */                                                            \
    X(mul, ELEM)                             /* a b */                                                              \
    X(div, ELEM)                             /* a / b */                                                            \
    X(maximum, EXACT)                        /* the larger, NaN wins; a tie splits the cotangent */                 \
    X(minimum, EXACT)                        /* the smaller, NaN wins; a tie splits the cotangent */                \
    /* new rows above this line */
// clang-format on

/* X(name, reads, tol, domain, cost, gcost); a table, aligned by hand */
// clang-format off
#define MPMD_UNARY_OPS(X)                                                                                           \
    X(neg, OUT, EXACT, ANY, 1, 0)            /* -x */                                                               \
    X(exp, OUT, ELEM, ANY, 16, 0)            /* e^x */                                                              \
    X(log, OUT, ELEM, POS, 16, 0)            /* ln x */                                                             \
    /* new rows above this line */

#define MPMD_UNARY_GRAD_OPS(X)                                                                                      \
    X(tanh, OUT, ELEM, ANY, 16, 1)           /* gx = gy (1 - y^2) */                                                \
    X(sqrt, OUT, ELEM, POS, 4, 2)            /* gx = gy / (2 y) */                                                  \
    X(rsqrt, OUT, ELEM, POS, 4, 1)           /* y = x^(-1/2): gx = -gy y^3 / 2 */                                   \
    X(square, IN, ELEM, ANY, 1, 1)           /* gx = 2 x gy */                                                      \
    X(relu, OUT, EXACT, ANY, 1, 1)           /* gx = gy where y > 0, else 0 (relu'(0) = 0) */                       \
    X(gelu, IN, ELEM, ANY, 16, 16)           /* tanh form; gx = gy gelu'(x) */                                      \
    X(sigmoid, OUT, ELEM, ANY, 16, 1)        /* gx = gy y (1 - y) */                                                \
    X(silu, IN, ELEM, ANY, 16, 16)           /* x sigmoid(x); gx = gy s (1 + x (1 - s)), s = sigmoid(x) */          \
    X(softplus, IN, ELEM, ANY, 32, 16)       /* log(1 + e^x); gx = gy sigmoid(x) */                                 \
    /* new rows above this line */
// clang-format on

#endif
