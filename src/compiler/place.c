/* Placement: which ranks run or hold each value.
 *
 * - A body op runs on the rank of its task's stage (its "home").
 * - Parameters live on every rank whose ops use them; a parameter shared by
 *   stages on different ranks (tied embeddings) has a copy on each, all
 *   initialised identically (the initialisers depend on name and seed only).
 * - A loop reduction accumulates on the home of the value it reduces.
 * - After-loop ops run where they are needed; an update of a parameter or
 *   a variable runs on every rank holding it, so all copies stay equal.
 *   A sum of per-use gradients held on different ranks thus runs on each of
 *   those ranks, on the same operands in the same order: a cross-rank
 *   all-reduce whose every copy has the same bits.
 * - Before-loop ops run on every rank that needs their result (a parameter
 *   cast before the loop puts the parameter, and its update, there too).
 * - A global norm runs on every rank, each counting the part of its inputs
 *   it holds (the runtime sums the parts over the mesh); it draws none of
 *   its inputs to a rank.
 * Demand flows backwards, so one pass in reverse creation order suffices.
 */
#include "compiler/compiler.h"

#include <stdlib.h>
#include <string.h>

static int any_rank(const mpmd_plan *pl, int node) {
    for (int w = 0; w < pl->words; w++)
        if (pl->runs[(size_t)node * pl->words + w]) return 1;
    return 0;
}

static void or_ranks(mpmd_plan *pl, int dst, int src) {
    for (int w = 0; w < pl->words; w++)
        pl->runs[(size_t)dst * pl->words + w] |= pl->runs[(size_t)src * pl->words + w];
}

mpmd_status mpmd_place(mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes;
    pl->words = (pl->num_ranks + 63) / 64;
    pl->runs = calloc((size_t)nn * pl->words + 1, sizeof *pl->runs);
    pl->home = malloc((size_t)(nn + 1) * sizeof *pl->home);
    if (!pl->runs || !pl->home) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory placing the graph");
    for (int i = 0; i < nn; i++)
        pl->home[i] = -1;

    /* body ops and what they read from before the loop */
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_BODY || !pl->live[i]) continue;
        int r = pl->stage_rank[pl->cl.stage[i]];
        pl->home[i] = r;
        mpmd_set_runs(pl, i, r);
        for (int j = 0; j < n->n_in; j++) {
            int u = n->in[j];
            if (g->nodes[u].region == MPMD_REGION_PRE) mpmd_set_runs(pl, u, r);
            /* a microbatch slice or a constant of the body is made on every
             * rank that reads it, never sent */
            if (mpmd_replicated(&g->nodes[u])) {
                mpmd_set_runs(pl, u, r);
                if (g->nodes[u].n_in) mpmd_set_runs(pl, g->nodes[u].in[0], r);
            }
        }
    }
    /* Before-loop values read by before-loop ops (a parameter's cast) live
     * where those run; settled before the updates below are placed, so that
     * a parameter's update runs on every rank holding a copy. */
    for (int i = nn - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_PRE || !pl->live[i] || (n->op->flags & MPMD_OPF_MESH)) continue;
        for (int j = 0; j < n->n_in; j++)
            if (g->nodes[n->in[j]].region == MPMD_REGION_PRE) or_ranks(pl, n->in[j], i);
    }
    /* everything else, by demand */
    for (int i = nn - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region == MPMD_REGION_BODY || !pl->live[i]) continue;
        if (n->op == &mpmd_op_loop_reduce) {
            pl->home[i] = pl->home[n->in[0]];
            mpmd_set_runs(pl, i, pl->home[i]);
            continue; /* its input is a body value: sent by the lowering */
        }
        if (n->op->flags & MPMD_OPF_SIDE_EFFECT) {
            /* an update runs wherever the parameter it updates lives, and
             * an assign wherever its variable lives (a variable the body
             * reads lives where it is read: a key/value cache updated after
             * the loop from a loop result). An optimizer's own state (its
             * step counter, read by every rank's update) does not draw it. */
            for (int j = 0; j < n->n_in; j++)
                if ((g->nodes[n->in[j]].flags & MPMD_NODE_TRAINABLE) || (n->op == &mpmd_op_assign && j == 0))
                    or_ranks(pl, i, n->in[j]);
        }
        if (n->op->flags & MPMD_OPF_MESH) {
            /* a global norm: every rank takes part (each counts what it holds
             * of the inputs), and its inputs stay where they are */
            for (int r = 0; r < pl->num_ranks; r++)
                mpmd_set_runs(pl, i, r);
            continue;
        }
        if (!any_rank(pl, i)) {
            /* Wanted by no rank: a kept result, a parameter no op reads, a
             * state update nobody reads. It goes with its first input that
             * has a home (a loop reduction), else to rank 0. */
            int r = 0;
            for (int j = 0; j < n->n_in; j++)
                if (pl->home[n->in[j]] >= 0) {
                    r = pl->home[n->in[j]];
                    break;
                }
            mpmd_set_runs(pl, i, r);
        }
        for (int j = 0; j < n->n_in; j++)
            if (g->nodes[n->in[j]].region != MPMD_REGION_BODY) or_ranks(pl, n->in[j], i);
    }
    return MPMD_OK;
}
