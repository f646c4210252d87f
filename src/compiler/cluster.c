/* Clustering: which task runs each op of the loop body.
 *
 * Forward ops: a stage marker closes its stage; every other forward op
 * belongs to the latest stage among its inputs (a marker's output counts as
 * the next stage), so an op is placed by its inputs first. An op with no
 * body inputs (a constant, an op on parameters only) is placed by its uses:
 * the earliest stage that uses it. Ops after the final marker (a loss
 * computed past it) belong to the last stage.
 *
 * Backward ops: the stage of the forward op whose gradient rule made them;
 * a backward marker belongs to its stage. For schedules that split the
 * backward (ZeroBubble, DualPipeV), each backward cluster but stage 0's is
 * cut into A, the ops the previous stages need (the activation gradients,
 * and everything they depend on), and W, the rest (weight gradients).
 */
#include "compiler/compiler.h"

#include <stdlib.h>
#include <string.h>

static int is_fwd_marker(const mpmd_node *n) { return n->op == &mpmd_op_stage_marker && !n->ia[1]; }

void mpmd_clusters_free(mpmd_clusters *c) {
    if (c->nodes)
        for (int i = 0; i < c->num_stages * MPMD_TASK_KINDS; i++)
            free(c->nodes[i]);
    free(c->nodes);
    free(c->count);
    free(c->stage);
    free(c->kind);
    memset(c, 0, sizeof *c);
}

static int body_live(const mpmd_graph *g, const unsigned char *live, int i) {
    return g->nodes[i].region == MPMD_REGION_BODY && live[i];
}

/* A forward op cannot read a backward value: a forward task would wait
 * for a backward task of its own microbatch, which waits for it. */
static mpmd_status check_forward_reads(const mpmd_graph *g, const unsigned char *live, mpmd_error *err) {
    for (int i = 0; i < g->n_nodes; i++) {
        if (!body_live(g, live, i) || g->nodes[i].is_bwd) continue;
        const mpmd_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            const mpmd_node *u = &g->nodes[n->in[j]];
            if (u->region != MPMD_REGION_BODY || !u->is_bwd) continue;
            char tb[160];
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "cannot place %%%d = %s (%s): it is a forward op but reads %%%d = %s, a "
                                  "value of the backward pass; no pipeline task can run it (compute it after "
                                  "the loop, from the loop's reductions)",
                                  i, n->op->name, mpmd_type_str(&n->type, tb, sizeof tb), (int)u->id,
                                  u->op->name);
        }
    }
    return MPMD_OK;
}

/* The stage of op i of the pass (forward 0, backward 1) from its inputs:
 * a marker's own; a backward op its forward op's (or, for the gradient of
 * a value made before the loop, where its cotangent is); a forward op the
 * latest of its inputs'. -1: none of those says. */
static int stage_by_inputs(const mpmd_graph *g, const mpmd_clusters *c, int i, int bwd) {
    const mpmd_node *n = &g->nodes[i];
    int st = -1;
    if (n->op == &mpmd_op_stage_marker) return (int)n->ia[0];
    if (bwd && n->fwd >= 0 && g->nodes[n->fwd].region == MPMD_REGION_BODY) return c->stage[n->fwd];
    if (bwd && n->fwd < 0) return -1;
    for (int j = 0; j < n->n_in; j++) {
        int u = n->in[j];
        if (g->nodes[u].region != MPMD_REGION_BODY) continue;
        int os = !bwd && is_fwd_marker(&g->nodes[u]) ? (int)g->nodes[u].ia[0] + 1 : c->stage[u];
        if (os > st) st = os;
    }
    return st;
}

/* Forward ops first (backward ops take their stage from them): by inputs
 * in creation order, then, for those still without a stage, by uses in
 * reverse order (every use of a value comes after it). */
static void place_stages(const mpmd_graph *g, const unsigned char *live, int S, mpmd_clusters *c,
                         int32_t *cand) {
    const int nn = g->n_nodes;
    for (int bwd = 0; bwd < 2; bwd++) {
        for (int i = 0; i < nn; i++) {
            if (!body_live(g, live, i) || g->nodes[i].is_bwd != bwd) continue;
            int st = stage_by_inputs(g, c, i, bwd);
            c->stage[i] = st > S - 1 ? S - 1 : st;
            c->kind[i] = bwd ? MPMD_TASK_B : MPMD_TASK_F;
        }
        for (int i = nn - 1; i >= 0; i--) {
            if (!body_live(g, live, i) || g->nodes[i].is_bwd != bwd) continue;
            if (c->stage[i] < 0) {
                /* Used by no op of its kind and using none: it feeds the
                 * loop's reductions only (a constant gradient, say). The
                 * last stage computes it; its sum goes where it is needed. */
                c->stage[i] = cand[i] == INT32_MAX ? S - 1 : cand[i];
            }
            const mpmd_node *n = &g->nodes[i];
            for (int j = 0; j < n->n_in; j++) {
                int u = n->in[j];
                if (g->nodes[u].region == MPMD_REGION_BODY && g->nodes[u].is_bwd == bwd && c->stage[u] < 0 &&
                    c->stage[i] < cand[u])
                    cand[u] = c->stage[i];
            }
        }
    }
}

/* A/W: a backward op is in A if an op of another task uses it, or an A
 * op does; stage 0's backward stays whole. */
static void split_backward(const mpmd_graph *g, const unsigned char *live, mpmd_clusters *c,
                           unsigned char *cross, unsigned char *in_a) {
    const int nn = g->n_nodes;
    for (int i = 0; i < nn; i++) {
        if (!body_live(g, live, i)) continue;
        const mpmd_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            int u = n->in[j];
            if (g->nodes[u].region == MPMD_REGION_BODY &&
                (c->stage[u] != c->stage[i] || c->kind[u] != c->kind[i]))
                cross[u] = 1;
        }
    }
    for (int i = nn - 1; i >= 0; i--) {
        if (!body_live(g, live, i) || c->kind[i] != MPMD_TASK_B) continue;
        if (cross[i]) in_a[i] = 1;
        if (!in_a[i] && c->stage[i] > 0) continue;
        const mpmd_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            int u = n->in[j];
            if (g->nodes[u].region == MPMD_REGION_BODY && c->kind[u] == MPMD_TASK_B &&
                c->stage[u] == c->stage[i])
                in_a[u] = 1;
        }
    }
    for (int i = 0; i < nn; i++)
        if (body_live(g, live, i) && c->kind[i] == MPMD_TASK_B)
            c->kind[i] = (c->stage[i] == 0 || in_a[i]) ? MPMD_TASK_A : MPMD_TASK_W;
}

/* The clusters' node lists, in creation order. -1: out of memory. */
static int list_clusters(const mpmd_graph *g, const unsigned char *live, mpmd_clusters *c) {
    const int nn = g->n_nodes;
    for (int i = 0; i < nn; i++)
        if (body_live(g, live, i)) c->count[c->stage[i] * MPMD_TASK_KINDS + c->kind[i]]++;
    for (int k = 0; k < c->num_stages * MPMD_TASK_KINDS; k++) {
        if (!(c->nodes[k] = malloc((size_t)(c->count[k] + 1) * sizeof **c->nodes))) return -1;
        c->count[k] = 0;
    }
    for (int i = 0; i < nn; i++)
        if (body_live(g, live, i)) {
            int k = c->stage[i] * MPMD_TASK_KINDS + c->kind[i];
            c->nodes[k][c->count[k]++] = i;
        }
    return 0;
}

mpmd_status mpmd_cluster(const mpmd_graph *g, const unsigned char *live, int S, int split, mpmd_clusters *c,
                         mpmd_error *err) {
    const int nn = g->n_nodes;
    memset(c, 0, sizeof *c);
    c->num_stages = S;
    c->split = split;
    c->stage = malloc((size_t)(nn + 1) * sizeof *c->stage);
    c->kind = calloc((size_t)nn + 1, 1);
    c->nodes = calloc((size_t)S * MPMD_TASK_KINDS, sizeof *c->nodes);
    c->count = calloc((size_t)S * MPMD_TASK_KINDS, sizeof *c->count);
    int32_t *cand = malloc((size_t)(nn + 1) * sizeof *cand);
    unsigned char *cross = calloc((size_t)nn + 1, 1), *in_a = calloc((size_t)nn + 1, 1);
    mpmd_status rc = MPMD_OK;
    if (!c->stage || !c->kind || !c->nodes || !c->count || !cand || !cross || !in_a) {
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory clustering the graph");
    } else if (!(rc = check_forward_reads(g, live, err))) {
        for (int i = 0; i < nn; i++)
            c->stage[i] = -1, cand[i] = INT32_MAX;
        place_stages(g, live, S, c, cand);
        if (split) split_backward(g, live, c, cross, in_a);
        if (list_clusters(g, live, c))
            rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory clustering the graph");
    }
    free(cand), free(cross), free(in_a);
    if (rc) mpmd_clusters_free(c);
    return rc;
}
