/* shape_plan.h - host-side planning shared by the backends: how a kernel's
 * shapes and attributes become loops (coalesced groups, strides, product
 * dimensions, per-step constants), computed once here from the types alone.
 *
 * The CPU kernels (src/backend/cpu/) and the CUDA kernels' host code
 * (src/backend/cuda/) both call these, so the two backends walk the same
 * groups in the same order and any change of plan reaches both. Nothing here
 * touches a buffer, a thread or a device.
 *
 * C11 that also compiles as C++ (the CUDA files include it).
 */
#ifndef MPMD_SHAPE_PLAN_H
#define MPMD_SHAPE_PLAN_H

#include "graph/graph.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- broadcasting (binary ops, broadcast_to) ------------------------------ */

/* The output shape coalesced against two operands aligned at the last axis:
 * output axes of size 1 dropped, neighbouring axes broadcast the same way in
 * both operands merged. Groups outermost first, with each operand's element
 * stride per group (0 where it is broadcast). Equal shapes: one group [n]
 * with strides (1, 1); a scalar operand: [n] with (1, 0); a row broadcast
 * [R, C] + [C]: [R][C] with (1, 0)(1, 1). */
typedef struct mpmd_bcast_plan {
    int ng;                                       /* groups, >= 1 (a single element: one group of 1) */
    int64_t size[MPMD_MAX_DIMS];                  /* elements per group */
    int64_t sa[MPMD_MAX_DIMS], sb[MPMD_MAX_DIMS]; /* element strides of a and b, 0 if broadcast */
} mpmd_bcast_plan;

/* Coalesce `out` against ta and tb (tb may be NULL: a single operand, whose
 * strides sb then equal sa). */
void mpmd_bcast_plan_make(mpmd_bcast_plan *p, const mpmd_type *out, const mpmd_type *ta, const mpmd_type *tb);

/* ---- sum_to ----------------------------------------------------------------- */

/* The input's axes (aligned with the target's at the last axis) coalesced
 * into groups that are kept (target size = input size) or reduced (target
 * size 1); axes of size 1 dropped. */
typedef struct mpmd_sum_plan {
    int ng;                      /* groups, outermost first (0: a single element) */
    int64_t size[MPMD_MAX_DIMS]; /* elements per group */
    int red[MPMD_MAX_DIMS];      /* 1 if the group is reduced */
    int64_t sx[MPMD_MAX_DIMS];   /* element stride in the input */
    int64_t so[MPMD_MAX_DIMS];   /* element stride in the output, 0 for reduced groups */
    int any_red;                 /* some group is reduced (else the sum is a copy) */
    int64_t in_numel, out_numel;
} mpmd_sum_plan;

void mpmd_sum_plan_make(mpmd_sum_plan *p, const mpmd_type *in, const mpmd_type *out);

/* ---- reductions (sum, mean, max, max_grad) ----------------------------------- */

/* The input's axes with a reduction mask (bit i: axis i is reduced): axes of
 * size 1 dropped, neighbouring axes that are both reduced or both kept
 * merged into groups. */
typedef struct mpmd_reduce_groups {
    int m;                         /* groups, outermost first */
    int64_t size[MPMD_MAX_DIMS];   /* elements per group */
    int64_t stride[MPMD_MAX_DIMS]; /* input element stride of a group */
    int red[MPMD_MAX_DIMS];        /* 1: reduced group */
    int inner;                     /* 1: the last group is reduced */
    int64_t len;                   /* size of the last group (1 when m == 0) */
} mpmd_reduce_groups;

void mpmd_reduce_groups_make(mpmd_reduce_groups *g, const mpmd_type *t, int64_t mask);

/* ---- permute ------------------------------------------------------------------ */

/* A permutation simplified: axes of size 1 dropped, and input axes that stay
 * adjacent and in order in the output merged. Output axis i is merged input
 * axis q[i]. */
typedef struct mpmd_perm_plan {
    int m;                          /* merged axes */
    int64_t in_size[MPMD_MAX_DIMS]; /* size of merged input axis k */
    int q[MPMD_MAX_DIMS];           /* output axis i = merged input axis q[i] */
    int64_t istr[MPMD_MAX_DIMS];    /* element stride of merged input axis k in the input */
    int64_t ostr[MPMD_MAX_DIMS];    /* element stride of output axis i in the output */
    int identity;                   /* nothing moves (q[k] == k for all k) */
    int last_stays;                 /* not identity, and the input's last axis stays last */
    int ia;                         /* not identity: the merged input axis that becomes the output's last */
    int p;                          /* not identity: the output axis of the input's last axis */
} mpmd_perm_plan;

void mpmd_perm_plan_make(mpmd_perm_plan *P, const mpmd_type *t, const int64_t *perm);

/* ---- slice, slice_grad, concat ---------------------------------------------- */

/* Elements before axis ax (outer), along it (d), and after it (inner). */
void mpmd_axis_split(const mpmd_type *t, int ax, int64_t *outer, int64_t *d, int64_t *inner);

/* ---- matmul ---------------------------------------------------------------------- */

/* C [..., M, N] = op(A) op(B) (see mpmd_matmul in src/ops/nn.c), row-major.
 * A 2-D b with an untransposed a is one product with the batch folded into
 * M; otherwise `batch` products, b's batch stride 0 when it is shared. */
typedef struct mpmd_matmul_dims {
    int tra, trb;           /* a, b transposed */
    int64_t m, n, k, batch; /* after folding */
    int shared_b;           /* b is 2-D: one b for every batch item */
    int64_t lda, ldb, ldc;  /* row-major leading dimensions */
    int64_t sa, sb, sc;     /* element strides between batch items (sb 0 when shared) */
} mpmd_matmul_dims;

/* flags: the node's ia[0] (MPMD_TRANS_A | MPMD_TRANS_B). */
void mpmd_matmul_dims_make(mpmd_matmul_dims *d, const mpmd_type *ta, const mpmd_type *tb, int64_t flags);

/* ---- adamw -------------------------------------------------------------------------- */

/* The constants of one Adam update. */
typedef struct mpmd_adam_consts {
    float b1, b2, c1, c2; /* decay rates and 1 - decay */
    float bc1, bc2;       /* bias corrections 1 - b^t (depend on the step) */
    float eps, wd, lr;
} mpmd_adam_consts;

/* b1, b2, c1, c2, eps and wd from the adamw node's attributes; bc1 = bc2 = 1
 * and lr = 0, for the caller to set from the step and the learning rate. */
void mpmd_adam_consts_make(mpmd_adam_consts *k, const mpmd_node *nd);

#ifdef __cplusplus
}
#endif

#endif
