/* The mesh's geometry (mesh.h): shards, splits, and which values differ
 * between model ranks. */
#include "mesh/mesh.h"

#include <stdlib.h>
#include <string.h>

/* A value varies over the model axis when it is a split parameter or
 * variable (this rank's part), or made by an op that gives each rank its
 * own part (pvary's result is typed as one, like JAX's pvary; a slice, a
 * reduce-scatter, the vocabulary-parallel ops), or computed from a value
 * that varies. A sum over the ranks (all_reduce) or their concatenation
 * (all_gather) is the same on every rank. Nodes come in a topological
 * order, so one pass suffices. */
static void model_variance(const mpmd_graph *g, unsigned char *v) {
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        int axis, groups;
        if (n->op == &mpmd_op_all_reduce || n->op == &mpmd_op_all_gather)
            v[i] = 0;
        else if (n->op == &mpmd_op_pvary || n->op == &mpmd_op_reduce_scatter ||
                 n->op == &mpmd_op_axis_slice || n->op == &mpmd_op_axis_embedding ||
                 n->op == &mpmd_op_axis_embedding_grad || n->op == &mpmd_op_axis_pick ||
                 n->op == &mpmd_op_axis_pick_grad)
            v[i] = 1;
        else if (n->op->flags & MPMD_OPF_LEAF)
            v[i] = (unsigned char)mpmd_split_of(g, i, &axis, &groups);
        else {
            v[i] = 0;
            for (int j = 0; j < n->n_in && !v[i]; j++)
                v[i] = v[n->in[j]];
        }
    }
}

int mpmd_mesh_init(mpmd_mesh *l, const mpmd_graph *g, int replicas, int model) {
    memset(l, 0, sizeof *l);
    l->g = g;
    l->replicas = replicas > 1 ? replicas : 1;
    l->model = model > 1 ? model : 1;
    if (l->model > 1) {
        if (!(l->varies = calloc((size_t)g->n_nodes + 1, 1))) return 1;
        model_variance(g, l->varies);
    }
    return 0;
}

void mpmd_mesh_free(mpmd_mesh *l) {
    free(l->shard), free(l->varies);
    l->shard = l->varies = NULL;
}

/* ---- shards ---------------------------------------------------------------- */

/* The pieces of n elements cut into `parts` equal ones (ceil(n / parts)
 * each, the last ones short or empty): piece k's first element and count. */
static void piece(int64_t n, int parts, int k, int64_t *lo, int64_t *count) {
    const int64_t len = (n + parts - 1) / parts, a = (int64_t)k * len, b = a + len < n ? a + len : n;
    *lo = a < n ? a : n;
    *count = b > *lo ? b - *lo : 0;
}

int64_t mpmd_shard_len(const mpmd_mesh *l, int node) {
    int64_t n = mpmd_type_numel(&l->g->nodes[node].type), R = l->replicas;
    return (n + R - 1) / R;
}

void mpmd_shard_part(const mpmd_mesh *l, int node, int replica, int64_t *lo, int64_t *count) {
    piece(mpmd_type_numel(&l->g->nodes[node].type), l->replicas, replica, lo, count);
}

size_t mpmd_held_bytes(const mpmd_mesh *l, int node) {
    const mpmd_type *t = &l->g->nodes[node].type;
    if (!mpmd_sharded(l, node)) return mpmd_type_bytes(t);
    return (size_t)mpmd_shard_len(l, node) * mpmd_dtype_size(t->dtype);
}

size_t mpmd_gathered_bytes(const mpmd_mesh *l, int node) {
    return (size_t)l->replicas * mpmd_held_bytes(l, node);
}

/* ---- splits ---------------------------------------------------------------- */

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

/* ---- what a mesh point holds ---------------------------------------------- */

int mpmd_mesh_partial(const mpmd_mesh *l, int node) {
    int axis, groups;
    return mpmd_sharded(l, node) || mpmd_split_of(l->g, node, &axis, &groups);
}

void mpmd_mesh_count_part(const mpmd_mesh *l, int node, int replica, int model, int64_t *lo, int64_t *count) {
    int64_t a, c; /* the replica's piece of the value, in the value's elements */
    mpmd_shard_part(l, node, replica, &a, &c);
    const int64_t base = mpmd_sharded(l, node) ? a : 0; /* a shard's buffer starts at its piece */
    if (!mpmd_varies(l, node) && l->model > 1) {
        int64_t b, d; /* the same on every model rank: each counts its piece of the replica's */
        piece(c, l->model, model, &b, &d);
        a += b, c = d;
    }
    *lo = a - base;
    *count = c;
}
