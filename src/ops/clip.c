/* Global norms and clipping by them (optax's global_norm and
 * clip_by_global_norm, PyTorch's clip_grad_norm_).
 *
 *   global_norm   in: the values (f32)   out: f32 scalar sqrt(sum over every
 *                 element of every value of its square)
 *
 * The sum is exact (util/exact.h: integers in fixed point, rounded once to
 * a double, whose square root is rounded to f32), so the norm is the same
 * bits whatever the layout: the values' elements are counted where they
 * live, each once, over every point of the mesh (pipeline ranks, FSDP
 * shards, model ranks: mesh/mesh.h mpmd_mesh_count_part), and the partial
 * sums are added in any order. The runtime runs it (MPMD_OPF_MESH): every
 * rank takes part, the ranks holding none of the values with an empty sum.
 *
 * Clipping is built from it with ordinary ops, as PyTorch computes it in
 * f32: factor = min(max_norm / (norm + 1e-6), 1), each value times factor.
 * Under FSDP the products run on each replica's shard (compiler/shard.c),
 * so clipping keeps the parameters sharded. */
#include "backend/op_descs.h"
#include "optim.h"

#include <math.h>

const mpmd_op_desc mpmd_op_global_norm = {"global_norm", -1, -1, MPMD_OPF_MESH, NULL, NULL};

mpmd_value mpmd_global_norm(mpmd_graph *g, int n, const mpmd_value *xs) {
    const char *fn = "mpmd_global_norm";
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (n < 1 || !xs)
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: %d values%s; one or more are needed", fn, n,
                         xs ? "" : " (NULL)");
    if (!mpmd_check_operands(g, fn, n, xs)) return MPMD_NONE;
    if (g->region == MPMD_REGION_BODY)
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "%s: inside the microbatch loop body; take the norm of the loop's results after "
                         "mpmd_loop_end",
                         fn);
    for (int i = 0; i < n; i++) {
        const mpmd_node *x = mpmd_node_of(g, xs[i]);
        if (x->type.dtype != MPMD_F32)
            return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: value %d is %s; f32 values (gradients) are expected", fn,
                             i, mpmd_tstr(g, xs[i]));
        if (x->region == MPMD_REGION_BODY)
            return mpmd_fail(
                g, MPMD_ERR_INVALID,
                "%s: value %d (%%%d, %s) is a value of the loop body; pass the loop's results (the "
                "gradients mpmd_value_and_grad returns)",
                fn, i, (int)xs[i].id, x->op->name);
    }
    return mpmd_emit(g, &mpmd_op_global_norm, n, xs, mpmd_make_type(MPMD_F32, 0, NULL));
}

mpmd_value mpmd_clip_by_global_norm(mpmd_graph *g, int n, mpmd_value *grads, float max_norm) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (!(max_norm > 0) || !isfinite(max_norm))
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_clip_by_global_norm: max_norm %g; a positive finite norm is expected",
                         (double)max_norm);
    mpmd_value norm = mpmd_global_norm(g, n, grads);
    if (!mpmd_is_value(norm)) return MPMD_NONE;
    mpmd_value factor = mpmd_minimum(
        g, mpmd_div(g, mpmd_scalar(g, max_norm), mpmd_add_scalar(g, norm, 1e-6f)), mpmd_scalar(g, 1.0f));
    for (int i = 0; i < n && g->status == MPMD_OK; i++)
        grads[i] = mpmd_mul(g, grads[i], factor);
    return g->status == MPMD_OK ? norm : MPMD_NONE;
}
