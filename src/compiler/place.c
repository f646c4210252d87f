/* Placement: which ranks run or hold each value.
 *
 * - A body op runs on the rank of its task's stage (its "home").
 * - Parameters live on every rank whose ops use them; a parameter shared by
 *   stages on different ranks (tied embeddings) has a copy on each, all
 *   initialised identically (the initialisers depend on name and seed only).
 * - A loop reduction accumulates on the home of the value it reduces.
 * - After-loop ops run where they are needed; an update of a parameter
 *   runs on every rank holding the parameter, so all copies stay equal.
 *   A sum of per-use gradients held on different ranks thus runs on each of
 *   those ranks, on the same operands in the same order: a cross-rank
 *   all-reduce whose every copy has the same bits.
 * - Before-loop ops run on every rank that needs their result (a parameter
 *   cast before the loop puts the parameter, and its update, there too).
 * Demand flows backwards, so one pass in reverse creation order suffices.
 */
#include "compiler/compiler.h"

#include <stdlib.h>
#include <string.h>

static int any_rank(const mpmd_step *st, int node) {
    for (int w = 0; w < st->words; w++)
        if (st->runs[(size_t)node * st->words + w]) return 1;
    return 0;
}

static void or_ranks(mpmd_step *st, int dst, int src) {
    for (int w = 0; w < st->words; w++)
        st->runs[(size_t)dst * st->words + w] |= st->runs[(size_t)src * st->words + w];
}

mpmd_status mpmd_place(mpmd_step *st, mpmd_error *err) {
    const mpmd_graph *g = st->g;
    const int nn = g->n_nodes;
    st->words = (st->num_ranks + 63) / 64;
    st->runs = calloc((size_t)nn * st->words + 1, sizeof *st->runs);
    st->home = malloc((size_t)(nn + 1) * sizeof *st->home);
    if (!st->runs || !st->home)
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_jit_with_loop: out of memory placing the graph");
    for (int i = 0; i < nn; i++)
        st->home[i] = -1;

    /* body ops and what they read from before the loop */
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_BODY || !st->live[i]) continue;
        int r = st->stage_rank[st->cl.stage[i]];
        st->home[i] = r;
        mpmd_set_runs(st, i, r);
        for (int j = 0; j < n->n_in; j++) {
            int u = n->in[j];
            if (g->nodes[u].region == MPMD_REGION_PRE) mpmd_set_runs(st, u, r);
            /* a microbatch slice or a constant of the body is made on every
             * rank that reads it, never sent */
            if (mpmd_replicated(&g->nodes[u])) {
                mpmd_set_runs(st, u, r);
                if (g->nodes[u].n_in) mpmd_set_runs(st, g->nodes[u].in[0], r);
            }
        }
    }
    /* Before-loop values read by before-loop ops (a parameter's cast) live
     * where those run; settled before the updates below are placed, so that
     * a parameter's update runs on every rank holding a copy. */
    for (int i = nn - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_PRE || !st->live[i]) continue;
        for (int j = 0; j < n->n_in; j++)
            if (g->nodes[n->in[j]].region == MPMD_REGION_PRE) or_ranks(st, n->in[j], i);
    }
    /* everything else, by demand */
    for (int i = nn - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region == MPMD_REGION_BODY || !st->live[i]) continue;
        if (n->op == &mpmd_op_loop_reduce) {
            st->home[i] = st->home[n->in[0]];
            mpmd_set_runs(st, i, st->home[i]);
            continue; /* its input is a body value: sent by the lowering */
        }
        if (n->op->flags & MPMD_OPF_SIDE_EFFECT) {
            /* an update runs wherever the parameter it updates lives */
            for (int j = 0; j < n->n_in; j++)
                if (g->nodes[n->in[j]].flags & MPMD_NODE_TRAINABLE) or_ranks(st, i, n->in[j]);
        }
        if (!any_rank(st, i)) {
            /* Wanted by no rank: a kept result, a parameter no op reads, a
             * state update nobody reads. It goes with its first input that
             * has a home (a loop reduction), else to rank 0. */
            int r = 0;
            for (int j = 0; j < n->n_in; j++)
                if (st->home[n->in[j]] >= 0) {
                    r = st->home[n->in[j]];
                    break;
                }
            mpmd_set_runs(st, i, r);
        }
        for (int j = 0; j < n->n_in; j++)
            if (g->nodes[n->in[j]].region != MPMD_REGION_BODY) or_ranks(st, n->in[j], i);
    }
    return MPMD_OK;
}
