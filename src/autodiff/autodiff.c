/* Reverse-mode autodiff as a graph-to-graph pass (mpmd_grad).
 *
 * The pass walks the nodes between the wrt values and the loss in reverse
 * creation order (a reverse topological order) and calls each op's VJP
 * rule, which appends ordinary ops to the same graph. Cotangents of a value
 * used several times are summed in the order the uses are visited (last use
 * first). Every appended op is tagged as backward, with the stage of the
 * forward op whose rule created it, so the pipeline compiler can cut the
 * backward into per-stage clusters.
 *
 * The sum of a wrt value's per-use gradients is marked MPMD_NODE_GRADSUM:
 * mpmd_loop_reduce then reduces each use separately and adds after the loop
 * (the order a cross-rank all-reduce of a shared parameter reproduces).
 *
 * Rematerialisation: a rule never reads a forward value of a remat region
 * that its policy does not keep; it reads a copy of it, emitted just before
 * the rule (as part of the same backward), from copies of that value's own
 * operands down to the region's inputs and kept values. Each is copied once
 * per mpmd_grad and reused by every later rule; copies no rule reads are
 * dead and never run. The same ops on the same operands: the same bits.
 */
#include "graph/graph.h"
#include "ops/nn.h"

#include <stdlib.h>
#include <string.h>

mpmd_value mpmd_grad_add(mpmd_graph *g, mpmd_value a, mpmd_value b) {
    if (!mpmd_is_value(a)) return b;
    if (!mpmd_is_value(b)) return a;
    return mpmd_add(g, a, b);
}

/* A forward value the backward recomputes instead of keeping. */
static int recomputed(const mpmd_node *u) {
    if (!u->remat || u->is_bwd || u->region != MPMD_REGION_BODY) return 0;
    if ((u->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) || u->op == &mpmd_op_stage_marker) return 0;
    if (u->remat == MPMD_REMAT_SAVE_DOTS && (u->op == &mpmd_op_matmul || u->op == &mpmd_op_attention))
        return 0; /* the products: fused attention is two */
    if (u->remat == MPMD_REMAT_SAVE_NAMED && (u->flags & MPMD_NODE_REMAT_SAVE)) return 0;
    return 1;
}

/* The value the backward reads for forward value u: u, or its copy. */
static mpmd_value recompute(mpmd_graph *g, int32_t *copy_of, int u) {
    if (!recomputed(&g->nodes[u])) return (mpmd_value){u};
    if (copy_of[u] >= 0) return (mpmd_value){copy_of[u]};
    mpmd_node src = g->nodes[u]; /* the node array may move while copies are emitted */
    mpmd_value small[8] = {{0}}, *in = src.n_in <= 8 ? small : malloc((size_t)src.n_in * sizeof *in);
    if (!in) return mpmd_fail(g, MPMD_ERR_NOMEM, "mpmd_grad: out of memory");
    for (int j = 0; j < src.n_in; j++)
        in[j] = recompute(g, copy_of, src.in[j]);
    mpmd_value v = mpmd_emit_copy(g, &src, in);
    if (in != small) free(in);
    if (mpmd_is_value(v)) {
        copy_of[u] = v.id;
        mpmd_node_of(g, v)->flags |= MPMD_NODE_RECOMPUTED;
    }
    return v;
}

typedef struct {
    mpmd_value *cot;    /* cotangent per original node, MPMD_NONE if none yet */
    unsigned char *rel; /* node lies on a path wrt -> loss */
    unsigned char *iswrt;
} ad_state;

static void accumulate(mpmd_graph *g, ad_state *s, int id, mpmd_value c) {
    if (!mpmd_is_value(s->cot[id])) {
        s->cot[id] = c;
        return;
    }
    mpmd_value sum = mpmd_add(g, s->cot[id], c);
    mpmd_node *n = mpmd_node_of(g, sum);
    if (n && s->iswrt[id]) n->flags |= MPMD_NODE_GRADSUM;
    s->cot[id] = sum;
}

/* Emitted ops from now on are the backward of forward op fwd in stage
 * `stage` (bwd 1), or forward ops of no particular stage (bwd 0). */
static void emit_as(mpmd_graph *g, int bwd, int stage, int fwd) {
    g->emit_bwd = bwd;
    g->emit_stage = stage;
    g->emit_fwd = fwd;
}

/* The arguments: a float scalar loss, float values to differentiate. */
static mpmd_status check_grad_args(mpmd_graph *g, mpmd_value loss, int n, const mpmd_value *wrt) {
    if (!mpmd_check_operands(g, "mpmd_grad (loss)", 1, &loss)) return g->status;
    if (n < 0 || (n > 0 && !wrt)) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_grad: %d values to differentiate with respect to", n);
        return g->status;
    }
    if (!mpmd_check_operands(g, "mpmd_grad (wrt)", n, wrt)) return g->status;
    const mpmd_node *ln = mpmd_node_of(g, loss);
    if (ln->type.dtype != MPMD_F32 || mpmd_type_numel(&ln->type) != 1) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_grad: the loss must be an f32 scalar, got %s (%%%d)",
                  mpmd_tstr(g, loss), (int)loss.id);
        return g->status;
    }
    for (int k = 0; k < n; k++)
        if (!mpmd_dtype_is_float(mpmd_node_of(g, wrt[k])->type.dtype)) {
            mpmd_fail(g, MPMD_ERR_SHAPE,
                      "mpmd_grad: wrt[%d] (%%%d) is %s; gradients exist only for float values", k,
                      (int)wrt[k].id, mpmd_tstr(g, wrt[k]));
            return g->status;
        }
    return MPMD_OK;
}

/* s->rel: the loss depends on the node, and the node depends on a wrt
 * value, both along float paths. -1: out of memory. */
static int mark_relevant(const mpmd_graph *g, ad_state *s, int lid, int n, const mpmd_value *wrt) {
    unsigned char *need = calloc((size_t)g->n_nodes, 1);
    if (!need) return -1;
    need[lid] = 1;
    for (int i = lid; i >= 0; i--) {
        if (!need[i]) continue;
        const mpmd_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++)
            if (mpmd_dtype_is_float(g->nodes[nd->in[j]].type.dtype)) need[nd->in[j]] = 1;
    }
    for (int k = 0; k < n; k++)
        s->iswrt[wrt[k].id] = 1;
    for (int i = 0; i <= lid; i++) {
        const mpmd_node *nd = &g->nodes[i];
        int from = s->iswrt[i];
        for (int j = 0; j < nd->n_in && !from; j++)
            from = s->rel[nd->in[j]];
        s->rel[i] = (unsigned char)(from && need[i] && mpmd_dtype_is_float(nd->type.dtype));
    }
    free(need);
    return 0;
}

/* Node i's gradient rule, on its cotangent: its inputs' cotangents, checked
 * and accumulated. Returns 0 to go on to earlier nodes, -1 to stop (the
 * graph holds the error). */
static int backprop_node(mpmd_graph *g, ad_state *s, int32_t *copy_of, int i) {
    mpmd_node copy = g->nodes[i]; /* the node array may move while the rule emits */
    if (copy.n_in == 0) return 0;
    int any = 0;
    for (int j = 0; j < copy.n_in; j++)
        any |= s->rel[copy.in[j]];
    if (!any) return 0;
    if (!copy.op->vjp) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "mpmd_grad: the loss depends on %%%d = %s (%s) through a value to differentiate, but %s has "
            "no gradient rule",
            i, copy.op->name, mpmd_tstr(g, (mpmd_value){i}), copy.op->name);
        return -1;
    }
    mpmd_value gin_small[4];
    mpmd_value *gin = copy.n_in <= 4 ? gin_small : malloc((size_t)copy.n_in * sizeof *gin);
    /* the rule reads recomputed copies of what a remat region drops */
    const int32_t *orig_in = copy.in;
    int32_t in_small[8], *in_ids = copy.n_in <= 8 ? in_small : malloc((size_t)copy.n_in * sizeof *in_ids);
    if (!gin || !in_ids) {
        if (gin != gin_small) free(gin);
        if (in_ids != in_small) free(in_ids);
        mpmd_fail(g, MPMD_ERR_NOMEM, "mpmd_grad: out of memory");
        return -1;
    }
    for (int j = 0; j < copy.n_in; j++)
        gin[j] = MPMD_NONE;
    /* A value made before the loop but used in it (a parameter's cast)
     * gets its gradient in the stage that made its cotangent. */
    int stage = copy.stage;
    if (stage < 0 && copy.region != g->nodes[s->cot[i].id].region) stage = g->nodes[s->cot[i].id].stage;
    emit_as(g, 1, stage, i);
    for (int j = 0; j < copy.n_in; j++)
        in_ids[j] = recompute(g, copy_of, orig_in[j]).id;
    copy.in = in_ids;
    copy.id = recompute(g, copy_of, i).id;
    if (g->status == MPMD_OK) copy.op->vjp(g, &copy, s->cot[i], gin);
    copy.in = (int32_t *)orig_in;
    copy.id = i;
    if (in_ids != in_small) free(in_ids);
    emit_as(g, 0, -1, -1);
    for (int j = 0; j < copy.n_in && g->status == MPMD_OK; j++) {
        int in = copy.in[j];
        if (!s->rel[in] || !mpmd_is_value(gin[j])) continue;
        const mpmd_type *want = &g->nodes[in].type, *got = &g->nodes[gin[j].id].type;
        if (!mpmd_type_equal(want, got)) {
            mpmd_fail(
                g, MPMD_ERR_SHAPE,
                "mpmd_grad: the gradient rule of %s (%%%d) gave input %d a cotangent of %s; expected %s",
                copy.op->name, i, j, mpmd_tstr_type(g, got), mpmd_tstr_type(g, want));
            break;
        }
        /* Tag the accumulation like the rule's ops: it belongs to the
         * backward of the same forward op. */
        emit_as(g, 1, stage, i);
        accumulate(g, s, in, gin[j]);
        emit_as(g, 0, -1, -1);
    }
    if (gin != gin_small) free(gin);
    return 0;
}

mpmd_status mpmd_grad(mpmd_graph *g, mpmd_value loss, int n, const mpmd_value *wrt, mpmd_value *grads) {
    if (!g) return MPMD_ERR_INVALID;
    if (n > 0 && (!wrt || !grads)) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_grad: %d values to differentiate but wrt or grads is NULL", n);
        return g->status;
    }
    for (int k = 0; k < n; k++)
        grads[k] = MPMD_NONE;
    if (g->status != MPMD_OK || check_grad_args(g, loss, n, wrt)) return g->status;

    const int nn = g->n_nodes;
    const int lid = loss.id;
    const mpmd_node *ln = mpmd_node_of(g, loss);
    ad_state s;
    s.cot = malloc((size_t)nn * sizeof *s.cot);
    s.rel = calloc((size_t)nn, 1);
    s.iswrt = calloc((size_t)nn, 1);
    int32_t *copy_of = malloc((size_t)(nn + 1) * sizeof *copy_of); /* remat: each value's copy, -1 */
    if (!s.cot || !s.rel || !s.iswrt || !copy_of || mark_relevant(g, &s, lid, n, wrt)) {
        free(s.cot), free(s.rel), free(s.iswrt), free(copy_of);
        mpmd_fail(g, MPMD_ERR_NOMEM, "mpmd_grad: out of memory");
        return g->status;
    }
    for (int i = 0; i < nn; i++)
        s.cot[i] = MPMD_NONE, copy_of[i] = -1;

    /* Backward ops go to the loss's region, whatever region is open now. */
    int saved_region = g->region;
    g->region = ln->region;
    /* the seed d loss / d loss = 1 belongs to the loss's backward */
    emit_as(g, 1, ln->stage, lid);
    s.cot[lid] = mpmd_full(g, 1.0f, ln->type.ndim, ln->type.dim);
    emit_as(g, 0, -1, -1);

    /* A wrt value's cotangent is final when it is reached (all its uses
     * come later); the walk still goes through it to earlier values. */
    for (int i = lid; i >= 0 && g->status == MPMD_OK; i--)
        if (s.rel[i] && mpmd_is_value(s.cot[i]) && backprop_node(g, &s, copy_of, i)) break;

    for (int k = 0; k < n && g->status == MPMD_OK; k++) {
        mpmd_value c = s.cot[wrt[k].id];
        if (!mpmd_is_value(c)) {
            /* a backward value of no particular stage */
            const mpmd_type *t = &g->nodes[wrt[k].id].type;
            g->emit_bwd = 1;
            c = mpmd_full(g, 0.0f, t->ndim, t->dim);
            if (t->dtype != MPMD_F32) c = mpmd_cast(g, c, t->dtype); /* a gradient has its wrt's dtype */
            g->emit_bwd = 0;
        }
        grads[k] = c;
    }
    g->region = saved_region;
    free(copy_of);
    free(s.cot);
    free(s.rel);
    free(s.iswrt);
    if (g->status != MPMD_OK)
        for (int k = 0; k < n; k++)
            grads[k] = MPMD_NONE;
    return g->status;
}

mpmd_value mpmd_value_and_grad(mpmd_graph *g, mpmd_value loss, int n_wrt, const mpmd_value *wrt, int cap,
                               mpmd_value *params, mpmd_value *grads, int *n) {
    if (n) *n = 0;
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (g->region != MPMD_REGION_BODY)
        return mpmd_fail(
            g, MPMD_ERR_INVALID,
            "mpmd_value_and_grad: call it inside the microbatch loop, on one microbatch's loss (it "
            "closes the loop)");
    if (wrt ? n_wrt < 0 : n_wrt != 0)
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_value_and_grad: %d values to differentiate with respect to", n_wrt);
    const int np = wrt ? n_wrt : mpmd_graph_params(g, NULL, 0);
    if (np > cap || (np > 0 && (!params || !grads)))
        return mpmd_fail(
            g, MPMD_ERR_INVALID,
            "mpmd_value_and_grad: %d parameters but room for %d (params and grads must hold them)", np,
            params && grads ? cap : 0);
    if (wrt)
        memcpy(params, wrt, (size_t)np * sizeof *params);
    else
        mpmd_graph_params(g, params, np);
    if (mpmd_grad(g, loss, np, params, grads) != MPMD_OK) return MPMD_NONE;
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_keep(g, total);
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (n) *n = np;
    return total;
}
