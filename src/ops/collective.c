/* Tensor parallelism: the mesh's model axis in the graph.
 *
 * A graph built with mpmd_set_tensor_parallel(g, M) describes one of M
 * model ranks (JAX's shard_map body): a parameter made by mpmd_param_split
 * is this rank's part of the whole parameter, and the collectives below
 * combine values over the M ranks of the axis. Every other op runs as it
 * would on one device, on the rank's own values.
 *
 * The collectives and their gradients (Megatron's conjugate pairs; the
 * loss, like every value outside the split layers, is the same on every
 * model rank, so a cotangent arriving at a collective's output is too):
 *
 *   all_reduce(x)            sum over the ranks          gradient: the cotangent
 *   pvary(x)                 x (the same on every rank)  gradient: all_reduce
 *   all_gather(x, d)         the ranks' x concatenated   gradient: axis_slice
 *                            along axis d, rank order    (this rank's slice of
 *                                                         the cotangent, no sum)
 *   reduce_scatter(x, d)     this rank's slice along d   gradient: all_gather
 *                            of the sum over the ranks
 *
 * Vocabulary parallelism (an embedding table and the logits split by rows
 * of the vocabulary) needs this rank's place on the axis, known at run
 * time only: axis_embedding (rows of this rank's part of the table for the
 * ids it holds, zeros for the others; summed over the ranks by an
 * all-reduce, the whole table's rows) and axis_pick (each row's value at
 * its target when this rank holds the target's column, else 0), with their
 * gradients axis_embedding_grad and axis_pick_grad. They move no data.
 *
 * The sums run in rank order on every rank, so all ranks get the same bits.
 * They are run by the step's wire (src/runtime), not by a backend
 * kernel: MPMD_OPF_COLLECTIVE.
 *
 * They exist only where a step runs them: in a graph split over M >= 2
 * model ranks, inside the microbatch loop body. A graph without a loop yet
 * may still get one (its first stage marker makes the ops before it the
 * body of a loop of one, core_ops.c), so an op made there is checked again
 * when the loop begins and when the graph is compiled
 * (mpmd_model_axis_misplaced).
 *
 * ia[0]: the axis (MPMD_AXIS_MODEL), ia[1]: the dimension of all_gather,
 * reduce_scatter and axis_slice, ia[2]: the axis size M when built, ia[3]:
 * the public call that made it (MPMD_CALL_*), for messages.
 */
#include "../graph/graph.h"

#include <string.h>

static void vjp_all_reduce(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_pvary(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_all_gather(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_reduce_scatter(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

static int along_dim(const mpmd_node *n) {
    return n->op == &mpmd_op_all_gather || n->op == &mpmd_op_reduce_scatter || n->op == &mpmd_op_axis_slice;
}

static void attrs_coll(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    if (along_dim(n))
        snprintf(buf, len, " axis=model dim=%lld of %lld", (long long)n->ia[1], (long long)n->ia[2]);
    else
        snprintf(buf, len, " axis=model of %lld", (long long)n->ia[2]);
}

const mpmd_op_desc mpmd_op_all_reduce = {"all_reduce",        1,          -1,
                                         MPMD_OPF_COLLECTIVE, attrs_coll, vjp_all_reduce};
const mpmd_op_desc mpmd_op_pvary = {"pvary", 1, 0, MPMD_OPF_COLLECTIVE, attrs_coll, vjp_pvary};
const mpmd_op_desc mpmd_op_all_gather = {"all_gather",        1,          -1,
                                         MPMD_OPF_COLLECTIVE, attrs_coll, vjp_all_gather};
const mpmd_op_desc mpmd_op_reduce_scatter = {"reduce_scatter",    1,          -1,
                                             MPMD_OPF_COLLECTIVE, attrs_coll, vjp_reduce_scatter};
/* this rank's slice along ia[1] of a value equal on every rank (made by
 * all_gather's gradient; run by the runtime, which knows the rank) */
const mpmd_op_desc mpmd_op_axis_slice = {"axis_slice", 1, -1, MPMD_OPF_COLLECTIVE, attrs_coll, NULL};
static void vjp_axis_embedding(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
static void vjp_axis_pick(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);
/* in: table part [V / M, C], ids [...] (whole vocabulary) -> [..., C] */
const mpmd_op_desc mpmd_op_axis_embedding = {"axis_embedding",    2,          -1,
                                             MPMD_OPF_COLLECTIVE, attrs_coll, vjp_axis_embedding};
/* in: ids [...], gy [..., C] -> the table part's gradient [V / M, C] */
const mpmd_op_desc mpmd_op_axis_embedding_grad = {"axis_embedding_grad", 2,          -1,
                                                  MPMD_OPF_COLLECTIVE,   attrs_coll, NULL};
/* in: z [..., V / M], targets [...] (whole vocabulary) -> [...] */
const mpmd_op_desc mpmd_op_axis_pick = {"axis_pick", 2, -1, MPMD_OPF_COLLECTIVE, attrs_coll, vjp_axis_pick};
/* in: targets [...], gy [...] -> [..., V / M] */
const mpmd_op_desc mpmd_op_axis_pick_grad = {"axis_pick_grad", 2, -1, MPMD_OPF_COLLECTIVE, attrs_coll, NULL};

mpmd_status mpmd_set_tensor_parallel(mpmd_graph *g, int m) {
    if (!g) return MPMD_ERR_INVALID;
    if (g->status != MPMD_OK) return g->status;
    if (m < 1 || m > 4096) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_set_tensor_parallel: %d model ranks; use 1 (none) to 4096", m);
        return g->status;
    }
    if (g->n_nodes > 0 && m != g->model_parallel) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_set_tensor_parallel: call it before building the graph (it already has %d ops whose "
                  "shapes were made for %d model rank%s)",
                  g->n_nodes, g->model_parallel, g->model_parallel == 1 ? "" : "s");
        return g->status;
    }
    g->model_parallel = m;
    return MPMD_OK;
}

int mpmd_tensor_parallel(const mpmd_graph *g) { return g ? g->model_parallel : 1; }

/* A model-axis op may be made here: else the graph's error, naming fn. */
static int model_axis_ok(mpmd_graph *g, const char *fn) {
    char why[MPMD_ERROR_MSG_MAX];
    mpmd_model_axis_where_wrong(g, g->region, 0, fn, "", why, sizeof why);
    if (!why[0]) return 1;
    mpmd_fail(g, MPMD_ERR_INVALID, "%s", why);
    return 0;
}

/* Name the model-axis nodes made from node `first` on after the call. */
static void made_by(mpmd_graph *g, int first, int call) {
    for (int i = first; i < g->n_nodes; i++)
        if (g->nodes[i].op->flags & MPMD_OPF_COLLECTIVE) g->nodes[i].ia[MPMD_CALL_ATTR] = call;
}

/* The axis a collective names: "model", else an error naming what exists. */
static int axis_ok(mpmd_graph *g, const char *fn, const char *axis) {
    if (axis && !strcmp(axis, "model")) return 1;
    if (axis && (!strcmp(axis, "data") || !strcmp(axis, "mpmd")))
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "%s: collectives in the graph run over the \"model\" axis (tensor parallelism); the \"%s\" axis "
            "is the step's (%s)",
            fn, axis, !strcmp(axis, "data") ? "data_parallel and fsdp combine its replicas" : "its stages");
    else
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "%s: no mesh axis \"%s\"; the axes are \"mpmd\", \"data\" and \"model\"", fn,
                  axis ? axis : "(NULL)");
    return 0;
}

static mpmd_value collective(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, int call, mpmd_value x,
                             int dim, const char *axis) {
    if (!mpmd_check_operands(g, fn, 1, &x) || !axis_ok(g, fn, axis) || !model_axis_ok(g, fn))
        return MPMD_NONE;
    const mpmd_type *xt = mpmd_type_of(g, x);
    if (!mpmd_dtype_is_float(xt->dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: %s; a float tensor is expected", fn, mpmd_tstr(g, x));
    mpmd_type t = *xt;
    const int M = g->model_parallel;
    if (op == &mpmd_op_all_gather || op == &mpmd_op_reduce_scatter || op == &mpmd_op_axis_slice) {
        if (dim < 0) dim += xt->ndim;
        if (dim < 0 || dim >= xt->ndim)
            return mpmd_fail(g, MPMD_ERR_SHAPE, "%s: dimension %d of %s does not exist", fn, dim,
                             mpmd_tstr(g, x));
        if (op != &mpmd_op_all_gather && xt->dim[dim] % M)
            return mpmd_fail(g, MPMD_ERR_SHAPE,
                             "%s: dimension %d of %s (%lld) is not divisible by the model axis (%d ranks)",
                             fn, dim, mpmd_tstr(g, x), (long long)xt->dim[dim], M);
        if (op == &mpmd_op_all_gather)
            t.dim[dim] *= M;
        else
            t.dim[dim] /= M;
    }
    mpmd_value y = mpmd_emit(g, op, 1, &x, t);
    mpmd_node *n = mpmd_node_of(g, y);
    if (n) n->ia[0] = MPMD_AXIS_MODEL, n->ia[1] = dim, n->ia[2] = M, n->ia[MPMD_CALL_ATTR] = call;
    return y;
}

mpmd_value mpmd_all_reduce(mpmd_graph *g, mpmd_value x, const char *axis) {
    return collective(g, &mpmd_op_all_reduce, "mpmd_all_reduce", MPMD_CALL_ALL_REDUCE, x, 0, axis);
}
mpmd_value mpmd_pvary(mpmd_graph *g, mpmd_value x, const char *axis) {
    return collective(g, &mpmd_op_pvary, "mpmd_pvary", MPMD_CALL_PVARY, x, 0, axis);
}
mpmd_value mpmd_all_gather(mpmd_graph *g, mpmd_value x, int dim, const char *axis) {
    return collective(g, &mpmd_op_all_gather, "mpmd_all_gather", MPMD_CALL_ALL_GATHER, x, dim, axis);
}
mpmd_value mpmd_reduce_scatter(mpmd_graph *g, mpmd_value x, int dim, const char *axis) {
    return collective(g, &mpmd_op_reduce_scatter, "mpmd_reduce_scatter", MPMD_CALL_REDUCE_SCATTER, x, dim,
                      axis);
}

static void vjp_all_reduce(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    (void)g, (void)n;
    gin[0] = gy;
}
static void vjp_pvary(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    (void)n;
    gin[0] = mpmd_all_reduce(g, gy, "model");
}
static void vjp_all_gather(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = collective(g, &mpmd_op_axis_slice, "mpmd_all_gather's gradient", MPMD_CALL_NONE, gy,
                        (int)n->ia[1], "model");
}
static void vjp_reduce_scatter(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = mpmd_all_gather(g, gy, (int)n->ia[1], "model");
}

/* ---- vocabulary parallelism -------------------------------------------- */

static mpmd_value axis_op(mpmd_graph *g, const mpmd_op_desc *op, mpmd_value a, mpmd_value b, mpmd_type t) {
    mpmd_value in[2] = {a, b};
    if (!mpmd_check_operands(g, op->name, 2, in)) return MPMD_NONE;
    mpmd_value y = mpmd_emit(g, op, 2, in, t);
    mpmd_node *n = mpmd_node_of(g, y);
    if (n) n->ia[0] = MPMD_AXIS_MODEL, n->ia[1] = 0, n->ia[2] = g->model_parallel;
    return y;
}

static void vjp_axis_embedding(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = axis_op(g, &mpmd_op_axis_embedding_grad, mpmd_in(n, 1), gy, *mpmd_type_of(g, mpmd_in(n, 0)));
    gin[1] = MPMD_NONE;
}

static void vjp_axis_pick(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = axis_op(g, &mpmd_op_axis_pick_grad, mpmd_in(n, 1), gy, *mpmd_type_of(g, mpmd_in(n, 0)));
    gin[1] = MPMD_NONE;
}

/* Rows of a table split by rows over the model axis, for whole-vocabulary
 * ids: this rank's rows where it holds them, summed over the ranks. */
mpmd_value mpmd_embedding_split(mpmd_graph *g, mpmd_value table, mpmd_value ids, const char *axis) {
    const char *fn = "mpmd_embedding_split";
    mpmd_value in[2] = {table, ids};
    if (!mpmd_check_operands(g, fn, 2, in) || !axis_ok(g, fn, axis) || !model_axis_ok(g, fn))
        return MPMD_NONE;
    const mpmd_type tt = *mpmd_type_of(g, table), ti = *mpmd_type_of(g, ids);
    if (tt.dtype != MPMD_F32 || tt.ndim != 2 || ti.dtype != MPMD_I32 || ti.ndim + 1 > MPMD_MAX_DIMS)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: table %s and ids %s; an f32 [rows, width] table and i32 ids are expected", fn,
                         mpmd_tstr(g, table), mpmd_tstr(g, ids));
    mpmd_type t = ti;
    t.dtype = MPMD_F32, t.dim[t.ndim++] = tt.dim[1];
    const int first = g->n_nodes;
    mpmd_value y = mpmd_all_reduce(g, axis_op(g, &mpmd_op_axis_embedding, table, ids, t), axis);
    made_by(g, first, MPMD_CALL_EMBEDDING_SPLIT);
    return y;
}

/* Cross-entropy of logits split along their last axis over the model axis
 * (this rank's columns of the vocabulary), for whole-vocabulary targets:
 * log(sum exp(z - max)) - (z - max)[target], the max and both sums over
 * every rank's columns. */
mpmd_value mpmd_cross_entropy_split(mpmd_graph *g, mpmd_value logits, mpmd_value targets, const char *axis) {
    const char *fn = "mpmd_cross_entropy_split";
    mpmd_value in[2] = {logits, targets};
    if (!mpmd_check_operands(g, fn, 2, in) || !axis_ok(g, fn, axis) || !model_axis_ok(g, fn))
        return MPMD_NONE;
    const mpmd_type tl = *mpmd_type_of(g, logits), tt = *mpmd_type_of(g, targets);
    int same = tl.ndim == tt.ndim + 1 && tt.dtype == MPMD_I32 && mpmd_dtype_is_float(tl.dtype);
    for (int k = 0; same && k < tt.ndim; k++)
        same = tl.dim[k] == tt.dim[k];
    if (!same)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: logits %s and targets %s; float [..., vocab / M] and i32 [...] are expected",
                         fn, mpmd_tstr(g, logits), mpmd_tstr(g, targets));
    const int last = tl.ndim - 1, first = g->n_nodes;
    mpmd_value z = mpmd_cast(g, logits, MPMD_F32);
    /* the max over every rank's columns is the same on every rank; its use
     * in this rank's columns goes through pvary, whose gradient sums the
     * ranks' parts (zero in exact arithmetic: the shift cancels) */
    mpmd_value mx = mpmd_max(g, mpmd_all_gather(g, mpmd_max(g, z, 1, &last, 1), last, axis), 1, &last, 1);
    mpmd_value zs = mpmd_sub(g, z, mpmd_pvary(g, mx, axis));
    mpmd_value lse = mpmd_log(g, mpmd_all_reduce(g, mpmd_sum(g, mpmd_exp(g, zs), 1, &last, 0), axis));
    mpmd_value picked = mpmd_all_reduce(
        g, axis_op(g, &mpmd_op_axis_pick, zs, targets, mpmd_make_type(MPMD_F32, tt.ndim, tt.dim)), axis);
    made_by(g, first, MPMD_CALL_CE_SPLIT);
    return mpmd_sub(g, lse, picked);
}

/* ---- split parameters --------------------------------------------------- */

/* (compiler/shard.c's mpmd_split_whole_type for the public API: the graph
 * alone knows it) */
mpmd_type mpmd_value_whole_type(const mpmd_graph *g, mpmd_value v) {
    mpmd_type t = mpmd_value_type(g, v);
    const mpmd_node *n = mpmd_node_of(g, v);
    if (n && g->model_parallel > 1 && mpmd_node_is_storage(n) && n->ia[MPMD_SPLIT_AXIS] >= 1)
        t.dim[n->ia[MPMD_SPLIT_AXIS] - 1] *= g->model_parallel;
    return t;
}

mpmd_value mpmd_param_split(mpmd_graph *g, const char *name, int ndim, const int64_t *dims, mpmd_init init,
                            int axis, int groups) {
    const char *fn = "mpmd_param_split";
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    const int M = g->model_parallel;
    if (ndim < 1 || ndim > MPMD_MAX_DIMS || !dims)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": %d dimensions%s; 1 to %d are expected", fn,
                         name ? name : "", ndim, dims ? "" : " (dims NULL)", MPMD_MAX_DIMS);
    if (axis < 0 || axis >= ndim || groups < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": axis %d of %d dimensions, %d groups", fn,
                         name ? name : "", axis, ndim, groups);
    if (dims[axis] % ((int64_t)groups * M))
        return mpmd_fail(
            g, MPMD_ERR_SHAPE,
            "%s \"%s%s%s\": dimension %d (%lld) is not divisible by the model axis (tensor_parallel "
            "%d)%s",
            fn, g->scope, g->scope[0] ? "/" : "", name ? name : "", axis, (long long)dims[axis], M,
            groups > 1 ? " times its groups" : "");
    int64_t local[MPMD_MAX_DIMS];
    memcpy(local, dims, (size_t)ndim * sizeof *dims);
    local[axis] /= M;
    mpmd_value p = mpmd_param(g, name, ndim, local, init);
    mpmd_node *n = mpmd_node_of(g, p);
    if (n && M > 1) n->ia[MPMD_SPLIT_AXIS] = axis + 1, n->ia[MPMD_SPLIT_GROUPS] = groups;
    return p;
}
