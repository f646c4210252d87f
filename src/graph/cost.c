/* What ops cost, for balancing pipeline stages (include/mpmd.h):
 * mpmd_op_flops, mpmd_graph_flops, mpmd_balance_stages. */
#include "graph/graph.h"
#include "ops/nn.h"

#include <stdlib.h>

double mpmd_op_flops(const mpmd_graph *g, mpmd_value v) {
    const mpmd_node *n = mpmd_node_of(g, v);
    if (!n || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) || n->type.dtype == MPMD_TOKEN) return 0;
    double out = (double)mpmd_type_numel(&n->type);
    if (n->op == &mpmd_op_matmul) { /* 2 K per output element */
        const mpmd_type *a = &g->nodes[n->in[0]].type;
        int64_t k = (n->ia[0] & MPMD_TRANS_A) ? a->dim[a->ndim - 2] : a->dim[a->ndim - 1];
        return 2.0 * out * (double)k;
    }
    if (n->op == &mpmd_op_attention || n->op == &mpmd_op_attention_grad) {
        /* q [B, T, H, D]: the two products Q K^T and P V take 2 T D each per
         * query row and head (half of that when causal: only the keys up to
         * the query), 4 B H T^2 D in all; the gradient recomputes the scores
         * and has four products more, 2.5 times the forward */
        const mpmd_type *q = &g->nodes[n->in[0]].type;
        double t = (double)q->dim[1], fwd = 4.0 * (double)mpmd_type_numel(q) * t;
        if (n->ia[0]) fwd *= 0.5;
        return n->op == &mpmd_op_attention ? fwd : 2.5 * fwd;
    }
    /* elementwise, reductions, normalisations: a few operations per element
     * read or written */
    double in = 0;
    for (int j = 0; j < n->n_in; j++)
        in += (double)mpmd_type_numel(&g->nodes[n->in[j]].type);
    return out > in ? out : in;
}

double mpmd_graph_flops(const mpmd_graph *g, mpmd_value from, mpmd_value to) {
    double total = 0;
    if (!g) return 0;
    for (int i = from.id < 0 ? 0 : from.id; i <= to.id && i < g->n_nodes; i++)
        total += mpmd_op_flops(g, (mpmd_value){i});
    return total;
}

/* Stages needed when no stage may exceed t (each piece alone fits). */
static int stages_needed(const double *c, int n, double t) {
    int k = 1;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        if (acc > 0 && acc + c[i] > t) k++, acc = 0;
        acc += c[i];
    }
    return k;
}

mpmd_status mpmd_balance_stages(const double *costs, int n, int S, int *first, mpmd_error *err) {
    if (!costs || !first || n < 1 || S < 1 || S > n)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "mpmd_balance_stages: %d pieces into %d stages (1 <= stages <= pieces, costs and "
            "first given)",
            n, S);
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        if (!(costs[i] >= 0) || costs[i] > 1e300)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_balance_stages: cost %d is %g; costs are >= 0",
                                  i, costs[i]);
        if (costs[i] > lo) lo = costs[i];
        hi += costs[i];
    }
    /* the smallest largest stage: bisection on the bound */
    for (int it = 0; it < 200 && hi - lo > 1e-12 * (hi > 1 ? hi : 1); it++) {
        double mid = 0.5 * (lo + hi);
        if (stages_needed(costs, n, mid) <= S)
            hi = mid;
        else
            lo = mid;
    }
    /* fill stages from the left under that bound, leaving each later stage
     * at least one piece */
    int s = 0;
    double acc = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        int left = n - i, stages_left = S - s - 1;
        if (i > first[s] && stages_left > 0 && (acc + costs[i] > hi * (1 + 1e-12) || left == stages_left)) {
            first[++s] = i;
            acc = 0;
        }
        acc += costs[i];
    }
    /* fewer stages used than asked (the bound fit in fewer): split the
     * largest until there are S, each at its best cut */
    while (s + 1 < S) {
        int best = -1;
        double bw = -1;
        for (int q = 0; q <= s; q++) {
            int b = first[q], e = q == s ? n : first[q + 1];
            double w = 0;
            for (int i = b; i < e; i++)
                w += costs[i];
            if (e - b > 1 && w > bw) bw = w, best = q;
        }
        int b = first[best], e = best == s ? n : first[best + 1], cut = b + 1;
        double acc2 = 0, bestm = 1e308;
        for (int i = b + 1; i < e; i++) {
            acc2 += costs[i - 1];
            double m = acc2 > bw - acc2 ? acc2 : bw - acc2;
            if (m < bestm) bestm = m, cut = i;
        }
        for (int q = s; q > best; q--)
            first[q + 1] = first[q];
        first[best + 1] = cut;
        s++;
    }
    return MPMD_OK;
}
