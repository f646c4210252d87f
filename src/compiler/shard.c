/* FSDP (ZeRO-3) over the mesh's data axis: which values each replica holds
 * only a shard of, and which parameters each task gathers.
 *
 * A parameter is sharded with everything its update touches: the update
 * (mpmd_sgd, mpmd_adamw) runs element by element, so replica d can run it
 * on its own part of the parameter, of the optimizer state (Adam's mu and
 * nu) and of the gradient, and get the bits every replica of plain data
 * parallelism gets for those elements. The gradient is a loop result (or
 * the after-loop sum of the loop results of a parameter used on several
 * ranks: mpmd_loop_reduce's add of the per-use sums): the replicas' sum of it becomes a
 * reduce-scatter that combines, in replica order, only replica d's part,
 * the same arithmetic as the all-reduce computes for those elements.
 *
 * A parameter qualifies when every use of it, of its state and of its
 * gradient chain is one of those: the body's ops (which read it gathered)
 * on ranks whose replicas meet after their tasks to combine a loop result
 * (so that no replica updates its shard while another still gathers it),
 * its update, the chain's adds. Anything else after the loop or before it
 * (a norm of the gradients, a cast before the loop) keeps the whole group
 * unsharded, so FSDP never changes a number, only where bytes live.
 *
 * Shards are equal: ceil(numel / replicas) elements each, the last ones
 * padded (a shard may be all padding when numel < replicas); the padding
 * is never read. Replica d holds elements [d L, min((d + 1) L, numel)). */
#include "backend/op_descs.h"
#include "compiler/compiler.h"
#include "ops/optim.h"

#include <stdlib.h>
#include <string.h>

int64_t mpmd_shard_len(const mpmd_plan *pl, int node) {
    int64_t n = mpmd_type_numel(&pl->g->nodes[node].type), R = pl->replicas;
    return (n + R - 1) / R;
}

void mpmd_shard_part(const mpmd_plan *pl, int node, int replica, int64_t *lo, int64_t *count) {
    int64_t n = mpmd_type_numel(&pl->g->nodes[node].type), L = mpmd_shard_len(pl, node);
    int64_t a = (int64_t)replica * L, b = a + L < n ? a + L : n;
    *lo = a < n ? a : n;
    *count = b > *lo ? b - *lo : 0;
}

size_t mpmd_held_bytes(const mpmd_plan *pl, int node) {
    const mpmd_type *t = &pl->g->nodes[node].type;
    if (!mpmd_sharded(pl, node)) return mpmd_type_bytes(t);
    return (size_t)mpmd_shard_len(pl, node) * mpmd_dtype_size(t->dtype);
}

size_t mpmd_gathered_bytes(const mpmd_plan *pl, int node) {
    return (size_t)pl->replicas * mpmd_held_bytes(pl, node);
}

/* Add the gradient chain ending at v (loop results, and the after-loop adds
 * of equal shapes that sum a parameter's per-use loop results) to group u;
 * 0 when v is not such a chain. */
static int chain(const mpmd_graph *g, int v, int u, int32_t *grp, int depth) {
    const mpmd_node *n = &g->nodes[v];
    if (depth > 64 || (grp[v] >= 0 && grp[v] != u)) return 0;
    if (n->type.dtype != MPMD_F32 || n->region != MPMD_REGION_POST) return 0;
    if (n->op == &mpmd_op_loop_reduce) {
        if (n->ia[0] != MPMD_REDUCE_ADD) return 0;
        grp[v] = u;
        return 1;
    }
    if (n->op == &mpmd_op_add && n->n_in == 2 &&
        mpmd_type_equal(&g->nodes[n->in[0]].type, &n->type) && mpmd_type_equal(&g->nodes[n->in[1]].type, &n->type)) {
        grp[v] = u;
        return chain(g, n->in[0], u, grp, depth + 1) && chain(g, n->in[1], u, grp, depth + 1);
    }
    return 0;
}

mpmd_status mpmd_plan_shards(mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes, K = pl->num_stages * MPMD_TASK_KINDS;
    if (!pl->fsdp || pl->replicas < 2) return MPMD_OK;
    int32_t *grp = malloc((size_t)(nn + 1) * sizeof *grp);
    unsigned char *bad = calloc((size_t)nn + 1, 1);
    pl->shard = calloc((size_t)nn + 1, 1);
    pl->gather = calloc((size_t)K + 1, sizeof *pl->gather);
    pl->gather_n = calloc((size_t)K + 1, sizeof *pl->gather_n);
    int32_t *mark = malloc((size_t)(nn + 1) * sizeof *mark), *meets = NULL;
    if (!grp || !bad || !pl->shard || !pl->gather || !pl->gather_n || !mark) goto nomem;
    for (int i = 0; i < nn; i++)
        grp[i] = -1, mark[i] = -1;
    /* the ranks whose replicas meet after their last task (to combine a
     * loop result): a replica updates its shard only after every replica
     * of a rank reading it has finished gathering it, so a parameter read
     * on a rank without such a meeting stays whole */
    if (!(meets = calloc((size_t)pl->num_ranks + 1, sizeof *meets))) goto nomem;
    for (int i = 0; i < nn; i++)
        if (pl->live[i] && g->nodes[i].op == &mpmd_op_loop_reduce && g->nodes[i].ia[0] != MPMD_REDUCE_CONCAT &&
            pl->home[i] >= 0)
            meets[pl->home[i]] = 1;
    /* the groups: each update with its parameter, state and gradient chain */
    for (int u = 0; u < nn; u++) {
        const mpmd_node *n = &g->nodes[u];
        if (!pl->live[u] || (n->op != &mpmd_op_sgd && n->op != &mpmd_op_adamw)) continue;
        int nst = n->op == &mpmd_op_adamw ? 3 : 1; /* param (+ mu, nu) */
        for (int j = 0; j < nst; j++) {
            int v = n->in[j == 0 ? 0 : j + 1];
            if (grp[v] >= 0) bad[grp[v]] = 1, bad[u] = 1;
            grp[v] = u;
        }
        if (!chain(g, n->in[1], u, grp, 0)) bad[u] = 1;
    }
    /* every reader of a group's value must be the group's update, one of its
     * chain's adds, or (the parameter) a body op */
    for (int c = 0; c < nn; c++) {
        const mpmd_node *cn = &g->nodes[c];
        if (!pl->live[c]) continue;
        for (int j = 0; j < cn->n_in; j++) {
            int v = cn->in[j], u = grp[v];
            if (u < 0) continue;
            int ok = c == u || grp[c] == u ||
                     (cn->region == MPMD_REGION_BODY && v == g->nodes[u].in[0] && cn->op != &mpmd_op_microbatch &&
                      pl->home[c] >= 0 && meets[pl->home[c]]);
            if (!ok) bad[u] = 1;
        }
    }
    for (int i = 0; i < nn; i++)
        if (grp[i] >= 0 && !bad[grp[i]] && pl->live[i]) pl->shard[i] = 1;
    /* each task's sharded parameters, in the order its ops first read them */
    for (int k = 0; k < K; k++) {
        int cnt = 0, bound = 1;
        for (int c = 0; c < pl->cl.count[k]; c++)
            bound += g->nodes[pl->cl.nodes[k][c]].n_in;
        if (!(pl->gather[k] = malloc((size_t)bound * sizeof **pl->gather))) goto nomem;
        for (int c = 0; c < pl->cl.count[k]; c++) {
            const mpmd_node *nd = &g->nodes[pl->cl.nodes[k][c]];
            for (int j = 0; j < nd->n_in; j++) {
                int v = nd->in[j];
                if (!pl->shard[v] || g->nodes[v].op != &mpmd_op_param || mark[v] == k) continue;
                mark[v] = k;
                pl->gather[k][cnt++] = v;
            }
        }
        pl->gather_n[k] = cnt;
    }
    free(grp), free(bad), free(mark), free(meets);
    return MPMD_OK;
nomem:
    free(grp), free(bad), free(mark), free(meets);
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_jit_with_loop: out of memory sharding the parameters");
}

int mpmd_plan_sharded_params(const mpmd_plan *pl) {
    int n = 0;
    for (int i = 0; pl->shard && i < pl->g->n_nodes; i++)
        n += pl->shard[i] && pl->g->nodes[i].op == &mpmd_op_param;
    return n;
}

/* ---- tensor parallelism: values split over the model axis ---------------- */

int mpmd_split_of(const mpmd_graph *g, int node, int *axis, int *groups) {
    const mpmd_node *n = &g->nodes[node];
    if (g->model_parallel < 2 || (n->op != &mpmd_op_param && n->op != &mpmd_op_variable) ||
        n->ia[MPMD_SPLIT_AXIS] < 1)
        return 0;
    *axis = (int)n->ia[MPMD_SPLIT_AXIS] - 1;
    *groups = (int)n->ia[MPMD_SPLIT_GROUPS];
    return 1;
}

mpmd_type mpmd_split_whole_type(const mpmd_graph *g, int node) {
    mpmd_type t = g->nodes[node].type;
    int axis, groups;
    if (mpmd_split_of(g, node, &axis, &groups)) t.dim[axis] *= g->model_parallel;
    return t;
}

/* Model rank m's part of the whole value: the axis seen as [groups, M,
 * n / (groups M)], rank m's part is [:, m, :]; outer x groups chunks of
 * n / (groups M) x inner elements. `to_whole` copies the part into the
 * whole value, else out of it. */
void mpmd_split_copy(const mpmd_graph *g, int node, int m, void *whole, void *part, int to_whole) {
    int axis, groups;
    const mpmd_type *t = &g->nodes[node].type;
    const size_t es = mpmd_dtype_size(t->dtype);
    if (!mpmd_split_of(g, node, &axis, &groups)) {
        if (to_whole)
            memcpy(whole, part, mpmd_type_bytes(t));
        else
            memcpy(part, whole, mpmd_type_bytes(t));
        return;
    }
    const int M = g->model_parallel;
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++)
        outer *= t->dim[k];
    for (int k = axis + 1; k < t->ndim; k++)
        inner *= t->dim[k];
    const size_t chunk = (size_t)(t->dim[axis] / groups * inner) * es; /* local dim = whole / M */
    for (int64_t o = 0; o < outer; o++)
        for (int gi = 0; gi < groups; gi++) {
            char *w = (char *)whole + (((size_t)o * groups + (size_t)gi) * (size_t)M + (size_t)m) * chunk;
            char *p = (char *)part + ((size_t)o * groups + (size_t)gi) * chunk;
            if (to_whole)
                memcpy(w, p, chunk);
            else
                memcpy(p, w, chunk);
        }
}
