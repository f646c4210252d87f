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
    pl->mesh.shard = calloc((size_t)nn + 1, 1);
    pl->gather = calloc((size_t)K + 1, sizeof *pl->gather);
    pl->gather_n = calloc((size_t)K + 1, sizeof *pl->gather_n);
    int32_t *mark = malloc((size_t)(nn + 1) * sizeof *mark), *meets = NULL;
    if (!grp || !bad || !pl->mesh.shard || !pl->gather || !pl->gather_n || !mark) goto nomem;
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
        if (grp[i] >= 0 && !bad[grp[i]] && pl->live[i]) pl->mesh.shard[i] = 1;
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
                if (!pl->mesh.shard[v] || g->nodes[v].op != &mpmd_op_param || mark[v] == k) continue;
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
    for (int i = 0; pl->mesh.shard && i < pl->g->n_nodes; i++)
        n += pl->mesh.shard[i] && pl->g->nodes[i].op == &mpmd_op_param;
    return n;
}

