/* model_axis.c - where an op over the model axis (src/ops/collective.c)
 * may stand in a graph, and what to say when it may not. The collectives'
 * constructors ask before they emit, mpmd_loop_begin (core_ops.c) and the
 * compiler ask of the nodes already made; all of them sit above this file,
 * which needs the graph alone. */
#include "graph.h"

#include <stdio.h>

static const char *const call_names[] = {"mpmd_all_reduce",      "mpmd_pvary",
                                         "mpmd_all_gather",      "mpmd_reduce_scatter",
                                         "mpmd_embedding_split", "mpmd_cross_entropy_split"};

/* the call's name; a gradient's node (MPMD_CALL_NONE) by its op's */
const char *mpmd_model_axis_call(const mpmd_node *n) {
    const int64_t c = n->ia[MPMD_CALL_ATTR];
    return c >= 1 && c <= (int64_t)(sizeof call_names / sizeof call_names[0]) ? call_names[c - 1]
                                                                              : n->op->name;
}

/* Why an op over the model axis cannot be made (or run) where it is, into
 * buf: "" when it can. `region` and the graph's loop state say where it is;
 * `which` names the node (" (%5)") once it exists. Before any loop nothing
 * is said yet: the graph may still become a loop of one. */
void mpmd_model_axis_where_wrong(const mpmd_graph *g, int region, int made, const char *fn, const char *which,
                                 char *buf, size_t len) {
    buf[0] = '\0';
    if (g->model_parallel < 2)
        snprintf(buf, len,
                 "%s: the model axis has 1 rank (call mpmd_set_tensor_parallel(g, M) with M >= 2 before "
                 "building the graph)",
                 fn);
    else if (region == MPMD_REGION_POST)
        snprintf(buf, len,
                 "%s: collectives over the model axis run inside the microbatch loop body; this one%s is "
                 "after the loop (build it between mpmd_loop_begin and mpmd_loop_end)",
                 fn, which);
    else if (region == MPMD_REGION_PRE && g->n_micro > 0)
        snprintf(buf, len,
                 "%s: collectives over the model axis run inside the microbatch loop body; this one%s is "
                 "before the loop (build it after mpmd_loop_begin)",
                 fn, which);
    else if (region == MPMD_REGION_PRE && made)
        snprintf(
            buf, len,
            "%s: collectives over the model axis run inside the microbatch loop body; this one%s is in a "
            "graph without a loop (build it between mpmd_loop_begin and mpmd_loop_end, or before a stage "
            "marker, which makes the ops before it a loop of one)",
            fn, which);
}

int mpmd_model_axis_misplaced(const mpmd_graph *g, int i, char *why, size_t len) {
    const mpmd_node *n = &g->nodes[i];
    why[0] = '\0';
    if (!(n->op->flags & MPMD_OPF_COLLECTIVE)) return 0;
    char which[32];
    snprintf(which, sizeof which, " (%%%d)", i);
    mpmd_model_axis_where_wrong(g, n->region, 1, mpmd_model_axis_call(n), which, why, len);
    return why[0] != '\0';
}
