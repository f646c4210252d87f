/* optim.h - the optimizer ops, shared by their constructors (src/ops/optim.c)
 * and their CPU kernels (src/backend/cpu/optim.c).
 *
 * Every optimizer op runs after the microbatch loop and updates persistent
 * storage in place: the executor hands a kernel the storage of a parameter
 * or variable input directly, so the kernel writes through in[i]. Each op
 * yields a token (no data); the ops are side effects and are never removed.
 *
 *   optim_step  in: step (i32 scalar variable)                 step += 1
 *   sgd         in: param, grad, lr                           see optim.c
 *   adamw       in: param, grad, mu, nu, step, lr, step token see optim.c
 *               fa: b1, b2, eps, weight_decay
 *   global_norm in: the values (f32)                           see clip.c
 */
#ifndef MPMD_OPS_OPTIM_H
#define MPMD_OPS_OPTIM_H

#include "../graph/graph.h"

extern const mpmd_op_desc mpmd_op_optim_step, mpmd_op_sgd, mpmd_op_adamw;
/* src/ops/clip.c: the exact global L2 norm of its inputs, run by the
 * runtime over every point of the mesh (MPMD_OPF_MESH) */
extern const mpmd_op_desc mpmd_op_global_norm;

/* Attribute slots of adamw. */
enum { MPMD_ADAM_B1 = 0, MPMD_ADAM_B2 = 1, MPMD_ADAM_EPS = 2, MPMD_ADAM_WD = 3 };

#endif
