/* FSDP (ZeRO-3) over the mesh's data axis: which values each replica holds
 * only a shard of, which values each GATHER instruction gathers, and why a
 * parameter stays whole.
 *
 * A parameter is sharded with everything its update touches: the update
 * (mpmd_sgd, mpmd_adamw) runs element by element, so replica d can run it
 * on its own part of the parameter, of the optimizer state (Adam's mu and
 * nu) and of the gradient, and get the bits every replica of plain data
 * parallelism gets for those elements. The gradient is a chain of
 * element-wise values after the loop: a loop result (the sum over
 * microbatches), the adds that sum a parameter's per-use loop results
 * (tied embeddings), and a product with a scalar (the factor of
 * mpmd_clip_by_global_norm). The replicas' sum of the loop results becomes
 * a reduce-scatter that combines, in replica order, only replica d's part:
 * the arithmetic the all-reduce computes for those elements.
 *
 * Mixed precision: a layer reads a parameter through its cast to the
 * compute dtype, made once before the loop. That cast is sharded with the
 * parameter (each replica casts its own shard) and it is the 16-bit copy
 * the replicas gather for the tasks that read it: half f32's bytes.
 *
 * A parameter qualifies when every use of it, of its state and of its
 * gradient chain is one of those: the body's ops (which read it, or its
 * cast, gathered) on ranks whose replicas meet after their tasks to combine
 * a loop result (so that no replica updates its shard while another still
 * gathers it), its update, the chain's ops, the global norm of
 * mpmd_clip_by_global_norm (which sums each replica's part). Anything else
 * keeps the whole group unsharded, so FSDP never changes a number, only
 * where bytes live; the plan keeps the reason (mpmd_plan_whole_reason) for
 * the run summary and for the error when nothing at all can be sharded.
 *
 * Gathers: per task (before each task that reads sharded values, dropped
 * after its last read: least memory) or per step (once, before the rank's
 * first task, held through the loop: least traffic). */
#include "backend/op_descs.h"
#include "compiler/compiler.h"
#include "ops/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why a parameter stays whole: pl->whole[node] = reason | culprit << 4. */
enum {
    WHY_NONE = 0,
    WHY_NO_UPDATE,   /* no mpmd_sgd / mpmd_adamw updates it */
    WHY_TWO_UPDATES, /* two updates share it or its state */
    WHY_GRADIENT,    /* its update's gradient (culprit) is not an element-wise chain of loop sums */
    WHY_READ_BEFORE, /* read before the loop by the culprit */
    WHY_READ_AFTER,  /* it, its state or its gradient read after the loop by the culprit */
    WHY_NO_MEETING,  /* read in the loop on a rank whose replicas do not meet after its tasks */
    WHY_READ_OTHER   /* read by the culprit some other way */
};

/* A scalar the same on every replica (not in a group) multiplying a
 * chain value: the clip factor. */
static int scalar_factor(const mpmd_graph *g, const int32_t *grp, int v) {
    return grp[v] < 0 && mpmd_type_numel(&g->nodes[v].type) == 1 && g->nodes[v].region != MPMD_REGION_BODY;
}

/* Add the gradient chain ending at v to group u: loop sums, the after-loop
 * adds of equal shapes that sum a parameter's per-use loop sums, products
 * with a scalar factor. 0 when v is not such a chain; *culprit then names
 * the value that is not. */
static int chain(const mpmd_graph *g, int v, int u, int32_t *grp, int depth, int *culprit) {
    const mpmd_node *n = &g->nodes[v];
    *culprit = v;
    if (depth > 64 || (grp[v] >= 0 && grp[v] != u)) return 0;
    if (n->type.dtype != MPMD_F32 || n->region != MPMD_REGION_POST) return 0;
    if (n->op == &mpmd_op_loop_reduce) {
        if (n->ia[0] != MPMD_REDUCE_ADD) return 0;
        grp[v] = u;
        return 1;
    }
    if (n->op == &mpmd_op_add && n->n_in == 2 && mpmd_type_equal(&g->nodes[n->in[0]].type, &n->type) &&
        mpmd_type_equal(&g->nodes[n->in[1]].type, &n->type)) {
        grp[v] = u;
        return chain(g, n->in[0], u, grp, depth + 1, culprit) &&
               chain(g, n->in[1], u, grp, depth + 1, culprit);
    }
    if (n->op == &mpmd_op_mul && n->n_in == 2) {
        for (int j = 0; j < 2; j++)
            if (mpmd_type_equal(&g->nodes[n->in[j]].type, &n->type) && scalar_factor(g, grp, n->in[1 - j])) {
                grp[v] = u;
                return chain(g, n->in[j], u, grp, depth + 1, culprit);
            }
    }
    return 0;
}

/* Whether every live reader of value v is a body op (not a microbatch
 * slice) on a rank whose replicas meet: then v may be read gathered. On 0,
 * *culprit is a reader that is not (or -1 when v has no reader). */
typedef struct {
    int32_t *head, *next, *who; /* readers of each value: head[v], then next[e]; who[e] the reader */
} readers;

static int body_reads_only(const mpmd_plan *pl, const readers *rd, const int32_t *meets, int v, int *culprit,
                           int *why) {
    const mpmd_graph *g = pl->g;
    for (int e = rd->head[v]; e >= 0; e = rd->next[e]) {
        const int c = rd->who[e];
        const mpmd_node *cn = &g->nodes[c];
        if (cn->region != MPMD_REGION_BODY || cn->op == &mpmd_op_microbatch) {
            *culprit = c, *why = cn->region == MPMD_REGION_PRE ? WHY_READ_BEFORE : WHY_READ_AFTER;
            return 0;
        }
        if (pl->home[c] < 0 || !meets[pl->home[c]]) {
            *culprit = c, *why = WHY_NO_MEETING;
            return 0;
        }
    }
    return 1;
}

static void set_why(mpmd_plan *pl, int node, int why, int culprit) {
    if (pl->whole[node] == WHY_NONE) pl->whole[node] = why | (culprit + 1) << 4;
}

/* The gather lists: per task kind k (list k, in the order its ops first
 * read them), or per rank r (list S*4 + r: every task of the rank's, in
 * the order of its stages' tasks). */
static mpmd_status gather_lists(mpmd_plan *pl, int32_t *mark, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    const int K = pl->num_stages * MPMD_TASK_KINDS, L = K + pl->num_ranks;
    pl->n_gather = L;
    pl->gather = calloc((size_t)L + 1, sizeof *pl->gather);
    pl->gather_n = calloc((size_t)L + 1, sizeof *pl->gather_n);
    if (!pl->gather || !pl->gather_n) goto nomem;
    for (int i = 0; i < g->n_nodes; i++)
        mark[i] = -1;
    for (int l = 0; l < L; l++) {
        int bound = 1;
        for (int k = 0; k < K; k++)
            if (l < K ? k == l : pl->stage_rank[k / MPMD_TASK_KINDS] == l - K)
                for (int c = 0; c < pl->cl.count[k]; c++)
                    bound += g->nodes[pl->cl.nodes[k][c]].n_in;
        if (!(pl->gather[l] = malloc((size_t)bound * sizeof **pl->gather))) goto nomem;
        int cnt = 0;
        for (int k = 0; k < K; k++) {
            if (l < K ? k != l : pl->stage_rank[k / MPMD_TASK_KINDS] != l - K) continue;
            for (int c = 0; c < pl->cl.count[k]; c++) {
                const mpmd_node *nd = &g->nodes[pl->cl.nodes[k][c]];
                for (int j = 0; j < nd->n_in; j++) {
                    int v = nd->in[j];
                    if (!mpmd_sharded(&pl->mesh, v) || g->nodes[v].region != MPMD_REGION_PRE || mark[v] == l)
                        continue;
                    mark[v] = l;
                    pl->gather[l][cnt++] = v;
                }
            }
        }
        pl->gather_n[l] = cnt;
    }
    return MPMD_OK;
nomem:
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory sharding the parameters");
}

/* Every reader of a group's value must be the group's update, one of its
 * chain's ops, a clip's global norm, or (the parameter) a body op or a
 * cast of it that only body ops read: bad[u] says why group u stays whole
 * where one is not. */
static void check_readers(const mpmd_plan *pl, const readers *rd, const int32_t *meets, const int32_t *grp,
                          const unsigned char *cast_ok, int32_t *bad) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes;
    for (int c = 0; c < nn; c++) {
        const mpmd_node *cn = &g->nodes[c];
        if (!pl->live[c]) continue;
        for (int j = 0; j < cn->n_in; j++) {
            int v = cn->in[j], u = grp[v];
            if (u < 0 || c == u || grp[c] == u) continue;
            const int param = v == g->nodes[u].in[0];
            if (cn->op == &mpmd_op_global_norm && g->nodes[v].region == MPMD_REGION_POST) continue;
            if (param && cast_ok[c]) continue;
            if (param && cn->region == MPMD_REGION_BODY && cn->op != &mpmd_op_microbatch) {
                if (pl->home[c] >= 0 && meets[pl->home[c]]) continue;
                if (!bad[u]) bad[u] = WHY_NO_MEETING | (c + 1) << 4;
                continue;
            }
            int why = cn->region == MPMD_REGION_PRE    ? WHY_READ_BEFORE
                      : cn->region == MPMD_REGION_POST ? WHY_READ_AFTER
                                                       : WHY_READ_OTHER;
            if (param && cn->op == &mpmd_op_cast && cn->region == MPMD_REGION_PRE) {
                int culprit = c, w2 = why; /* the cast's own readers say why */
                body_reads_only(pl, rd, meets, c, &culprit, &w2);
                if (!bad[u]) bad[u] = w2 | (culprit + 1) << 4;
                continue;
            }
            if (!bad[u]) bad[u] = why | (c + 1) << 4;
        }
    }
}

/* FSDP was asked for and nothing can be sharded: why, from the first
 * parameter left whole. */
static mpmd_status none_sharded_error(const mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    char why[400] = "";
    int whole = 0, first = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (pl->whole[i]) whole++, first = first < 0 ? i : first;
    if (first >= 0) mpmd_plan_whole_reason(pl, first, why, sizeof why);
    return mpmd_error_set(err, MPMD_ERR_INVALID,
                          "fsdp is on but no parameter can be sharded: %s%s%s%s "
                          "(mpmd_step_opts.fsdp shards the parameters an optimizer updates, their state and "
                          "gradients; %d parameter%s left whole)",
                          first >= 0 ? "\"" : "the graph has no parameters",
                          first >= 0 ? g->nodes[first].name : "", first >= 0 ? "\" " : "", why, whole,
                          whole == 1 ? "" : "s");
}

mpmd_status mpmd_plan_shards(mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes;
    if (!pl->fsdp || pl->replicas < 2) return MPMD_OK;
    mpmd_status rc = MPMD_OK;
    int32_t *grp = malloc((size_t)(nn + 1) * sizeof *grp), *mark = malloc((size_t)(nn + 1) * sizeof *mark);
    int32_t *meets = calloc((size_t)pl->num_ranks + 1, sizeof *meets),
            *bad = calloc((size_t)nn + 1, sizeof *bad);
    unsigned char *cast_ok = calloc((size_t)nn + 1, 1);
    readers rd = {malloc((size_t)(nn + 1) * sizeof(int32_t)), NULL, NULL};
    int edges = 0;
    for (int c = 0; c < nn; c++)
        edges += pl->live[c] ? g->nodes[c].n_in : 0;
    rd.next = malloc((size_t)(edges + 1) * sizeof(int32_t));
    rd.who = malloc((size_t)(edges + 1) * sizeof(int32_t));
    pl->mesh.shard = calloc((size_t)nn + 1, 1);
    pl->whole = calloc((size_t)nn + 1, sizeof *pl->whole);
    if (!grp || !mark || !meets || !bad || !cast_ok || !rd.head || !rd.next || !rd.who || !pl->mesh.shard ||
        !pl->whole) {
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory sharding the parameters");
        goto done;
    }
    for (int i = 0; i < nn; i++)
        grp[i] = -1, rd.head[i] = -1;
    for (int c = nn - 1, e = 0; c >= 0; c--) /* readers in creation order */
        for (int j = pl->live[c] ? g->nodes[c].n_in - 1 : -1; j >= 0; j--, e++) {
            int v = g->nodes[c].in[j];
            rd.who[e] = c, rd.next[e] = rd.head[v], rd.head[v] = e;
        }
    /* the ranks whose replicas meet after their last task (to combine a
     * loop result): a replica updates its shard only after every replica
     * of a rank reading it has finished gathering it, so a parameter read
     * on a rank without such a meeting stays whole */
    for (int i = 0; i < nn; i++)
        if (pl->live[i] && g->nodes[i].op == &mpmd_op_loop_reduce &&
            g->nodes[i].ia[0] != MPMD_REDUCE_CONCAT && pl->home[i] >= 0)
            meets[pl->home[i]] = 1;
    /* the groups: each update with its parameter, state and gradient chain;
     * bad[u] = why | culprit << 4 when the group stays whole */
    for (int u = 0; u < nn; u++) {
        const mpmd_node *n = &g->nodes[u];
        if (!pl->live[u] || (n->op != &mpmd_op_sgd && n->op != &mpmd_op_adamw)) continue;
        int nst = n->op == &mpmd_op_adamw ? 3 : 1; /* param (+ mu, nu) */
        for (int j = 0; j < nst; j++) {
            int v = n->in[j == 0 ? 0 : j + 1];
            if (grp[v] >= 0) {
                if (!bad[grp[v]]) bad[grp[v]] = WHY_TWO_UPDATES | (u + 1) << 4;
                if (!bad[u]) bad[u] = WHY_TWO_UPDATES | (grp[v] + 1) << 4;
            }
            grp[v] = u;
        }
        int culprit;
        if (!chain(g, n->in[1], u, grp, 0, &culprit) && !bad[u]) bad[u] = WHY_GRADIENT | (culprit + 1) << 4;
    }
    /* a parameter's casts before the loop that only the body reads (its
     * compute copy, gathered in the compute dtype) */
    for (int c = 0; c < nn; c++) {
        const mpmd_node *cn = &g->nodes[c];
        int culprit, why;
        cast_ok[c] = pl->live[c] && cn->op == &mpmd_op_cast && cn->region == MPMD_REGION_PRE &&
                     grp[cn->in[0]] >= 0 && g->nodes[cn->in[0]].op == &mpmd_op_param &&
                     body_reads_only(pl, &rd, meets, c, &culprit, &why);
    }
    check_readers(pl, &rd, meets, grp, cast_ok, bad);
    for (int i = 0; i < nn; i++) {
        if (!pl->live[i]) continue;
        if (grp[i] >= 0 && !bad[grp[i]]) pl->mesh.shard[i] = 1;
        if (cast_ok[i] && !bad[grp[g->nodes[i].in[0]]]) pl->mesh.shard[i] = 1;
    }
    /* why each parameter left whole is */
    for (int i = 0; i < nn; i++) {
        if (!pl->live[i] || g->nodes[i].op != &mpmd_op_param || pl->mesh.shard[i]) continue;
        if (grp[i] < 0)
            set_why(pl, i, WHY_NO_UPDATE, -1);
        else
            pl->whole[i] = bad[grp[i]];
    }
    if (!mpmd_plan_sharded_params(pl)) {
        rc = none_sharded_error(pl, err);
        goto done;
    }
    rc = gather_lists(pl, mark, err);
done:
    free(grp), free(mark), free(meets), free(bad), free(cast_ok), free(rd.head), free(rd.next), free(rd.who);
    return rc;
}

int mpmd_plan_sharded_params(const mpmd_plan *pl) {
    int n = 0;
    for (int i = 0; pl->mesh.shard && i < pl->g->n_nodes; i++)
        n += pl->mesh.shard[i] && pl->g->nodes[i].op == &mpmd_op_param;
    return n;
}

int mpmd_plan_whole_reason(const mpmd_plan *pl, int node, char *buf, size_t len) {
    if (!pl->whole || !pl->whole[node]) return 0;
    const int why = pl->whole[node] & 15, c = (pl->whole[node] >> 4) - 1;
    char ob[256] = "";
    if (c >= 0) mpmd_operand_str(pl->g, c, ob, sizeof ob);
    const char *op = c >= 0 ? pl->g->nodes[c].op->name : "";
    switch (why) {
    case WHY_NO_UPDATE: snprintf(buf, len, "is not updated by mpmd_sgd or mpmd_adamw"); break;
    case WHY_TWO_UPDATES:
        snprintf(buf, len, "shares a parameter or optimizer state with the update %s", ob);
        break;
    case WHY_GRADIENT:
        snprintf(buf, len,
                 "has an update whose gradient %s (%s) is not a sum of loop results (their adds, a scalar "
                 "factor such as mpmd_clip_by_global_norm's)",
                 ob, op);
        break;
    case WHY_READ_BEFORE: snprintf(buf, len, "is read before the loop by %s (%s)", ob, op); break;
    case WHY_READ_AFTER:
        snprintf(buf, len,
                 "is read after the loop by %s (%s), its state or gradient other than by its update (a norm "
                 "written by hand: use mpmd_clip_by_global_norm)",
                 ob, op);
        break;
    case WHY_NO_MEETING:
        snprintf(buf, len, "is read in the loop by %s (%s) on rank %d, whose replicas combine no loop result",
                 ob, op, pl->home[c]);
        break;
    default: snprintf(buf, len, "is read by %s (%s)", ob, op); break;
    }
    return 1;
}
