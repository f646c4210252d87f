/* The ranks' values from outside a run: which rank state of this process
 * holds a value, reads and writes of parameters, variables and kept
 * values (whole, or one model rank's part, or this process's own parts),
 * and what the last runs measured (profiles, memory, collective bytes,
 * recorded events). The launcher (fetch), the step API (step.c) and the
 * checkpoints (io/checkpoint.c) reach rank state through these. */
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

/* The state of (rank, replica, model rank) when this process runs it, else
 * NULL. The rank states here are consecutive world indices ((replica M +
 * model) D + rank), from rs[0]'s. */
mpmd_rank_state *mpmd_runtime_state(const struct mpmd_step *st, int rank, int replica, int model) {
    const int D = st->plan->num_ranks, M = st->plan->model;
    if (!st->rs || rank < 0 || rank >= D || replica < 0 || replica >= st->plan->replicas || model < 0 ||
        model >= M)
        return NULL;
    int li = ((replica * M + model) * D + rank) - (st->rs[0].lane * D + st->rs[0].rank);
    return li >= 0 && li < st->num_local ? &st->rs[li] : NULL;
}

/* (rank, replica)'s state with the lowest model rank this process runs:
 * in-process model rank 0, under MPI the process's own (any of them) */
static mpmd_rank_state *replica_state(const struct mpmd_step *st, int rank, int replica) {
    mpmd_rank_state *rs = NULL;
    for (int m = 0; !rs && m < st->plan->model; m++)
        rs = mpmd_runtime_state(st, rank, replica, m);
    return rs;
}

/* The state of pipeline rank `rank` in this process, its lowest lane here
 * (in-process: replica 0, model rank 0); NULL when this process runs no
 * lane of it. */
static mpmd_rank_state *state_of(const struct mpmd_step *st, int rank) {
    if (!st->rs || rank < 0 || rank >= st->plan->num_ranks) return NULL;
    const int D = st->plan->num_ranks, M = st->plan->model, first = st->rs[0].lane * D + st->rs[0].rank;
    int lane = first / D + (rank < first % D);
    return mpmd_runtime_state(st, rank, lane / M, lane % M);
}

/* Where (rank state rs) holds value `node` after a run: a value outside
 * the body, or a kept body value's last microbatch. */
static void *held(mpmd_rank_state *rs, int node) {
    if (!rs || !rs->glob) return NULL;
    if (rs->glob[node]) return rs->glob[node];
    const mpmd_plan *pl = rs->st->plan;
    return pl->g->nodes[node].region == MPMD_REGION_BODY && pl->num_micro > 0
               ? rt_value_ptr(rs, node, pl->num_micro - 1)
               : NULL;
}

void *mpmd_runtime_value(struct mpmd_step *st, int rank, int node) {
    mpmd_rank_state *rs = state_of(st, rank);
    return st->plan->be->host_memory && !mpmd_mesh_partial(&st->plan->mesh, node) ? held(rs, node) : NULL;
}

void *mpmd_runtime_replica_value(struct mpmd_step *st, int rank, int replica, int model, int node) {
    mpmd_rank_state *rs = mpmd_runtime_state(st, rank, replica, model);
    return st->plan->be->host_memory && !mpmd_mesh_partial(&st->plan->mesh, node) ? held(rs, node) : NULL;
}

int mpmd_runtime_holds(struct mpmd_step *st, int rank, int replica, int node) {
    return held(replica_state(st, rank, replica), node) != NULL;
}

static mpmd_status download(struct mpmd_step *st, mpmd_rank_state *rs, int node, void *dst, const void *src,
                            size_t bytes) {
    char e[512];
    st->plan->be->device.enter(rs->dev);
    if (st->plan->be->queue.download(rs->dev, dst, src, bytes) ||
        st->plan->be->queue.sync(rs->dev, e, sizeof e)) {
        snprintf(st->err, sizeof st->err,
                 "copying %%%d from rank %d (replica %d, model rank %d) on the %s backend "
                 "failed",
                 node, rs->rank, rs->replica, rs->model, st->plan->be->name);
        return MPMD_ERR_RUNTIME;
    }
    return MPMD_OK;
}

/* One model rank's value (its part of a split one) from (rank, replica,
 * model), FSDP's shards assembled from every replica: all must be here. */
mpmd_status mpmd_runtime_read_model(struct mpmd_step *st, int rank, int replica, int model, int node,
                                    void *dst) {
    if (!mpmd_sharded(&st->plan->mesh, node)) {
        mpmd_rank_state *rs = mpmd_runtime_state(st, rank, replica, model);
        const void *src = held(rs, node);
        return src ? download(st, rs, node, dst, src, rt_bytes(st->plan->g, node)) : MPMD_ERR_INVALID;
    }
    const size_t es = mpmd_dtype_size(st->plan->g->nodes[node].type.dtype);
    for (int d = 0; d < st->plan->replicas; d++) {
        mpmd_rank_state *rs = mpmd_runtime_state(st, rank, d, model);
        const void *src = held(rs, node);
        if (!src) return MPMD_ERR_INVALID;
        int64_t lo, cnt;
        mpmd_shard_part(&st->plan->mesh, node, d, &lo, &cnt);
        mpmd_status rc = download(st, rs, node, (char *)dst + (size_t)lo * es, src, (size_t)cnt * es);
        if (rc) return rc;
    }
    return MPMD_OK;
}

mpmd_status mpmd_runtime_read(struct mpmd_step *st, int rank, int replica, int node, void *dst,
                              size_t bytes) {
    (void)bytes; /* the whole value's: the callers check it */
    int axis, groups;
    if (!mpmd_split_of(st->plan->g, node, &axis, &groups))
        return mpmd_runtime_read_model(st, rank, replica, 0, node, dst);
    /* split over the model axis: every model rank's part into the whole */
    size_t b = rt_bytes(st->plan->g, node);
    void *part = malloc(b ? b : 1);
    if (!part) return MPMD_ERR_NOMEM;
    mpmd_status rc = MPMD_OK;
    for (int m = 0; m < st->plan->model && !rc; m++)
        if (!(rc = mpmd_runtime_read_model(st, rank, replica, m, node, part)))
            mpmd_split_copy(st->plan->g, node, m, dst, part, 1);
    free(part);
    return rc;
}

mpmd_status mpmd_runtime_read_own(struct mpmd_step *st, int rank, int replica, int node, void *dst) {
    const size_t b = rt_bytes(st->plan->g, node), es = mpmd_dtype_size(st->plan->g->nodes[node].type.dtype);
    char *part = calloc(1, b + 1);
    if (!part) return MPMD_ERR_NOMEM;
    mpmd_status rc = MPMD_OK;
    for (int m = 0; m < st->plan->model && !rc; m++) {
        mpmd_rank_state *rs = mpmd_runtime_state(st, rank, replica, m);
        const void *src = held(rs, node);
        if (!src) continue;
        int64_t lo = 0, cnt = mpmd_type_numel(&st->plan->g->nodes[node].type);
        if (mpmd_sharded(&st->plan->mesh, node)) mpmd_shard_part(&st->plan->mesh, node, replica, &lo, &cnt);
        memset(part, 0, b);
        if (!(rc = download(st, rs, node, part + (size_t)lo * es, src, (size_t)cnt * es)))
            mpmd_split_copy(st->plan->g, node, m, dst, part, 1);
    }
    free(part);
    return rc;
}

mpmd_status mpmd_runtime_write(struct mpmd_step *st, int rank, int replica, int node, const void *src,
                               size_t bytes) {
    (void)bytes;
    const size_t b = rt_bytes(st->plan->g, node), es = mpmd_dtype_size(st->plan->g->nodes[node].type.dtype);
    void *part = malloc(b ? b : 1);
    if (!part) return MPMD_ERR_NOMEM;
    mpmd_status rc = MPMD_ERR_INVALID;
    for (int m = 0; m < st->plan->model; m++) { /* every model rank of (rank, replica) here: its part */
        mpmd_rank_state *rs = mpmd_runtime_state(st, rank, replica, m);
        if (!rs || !rs->glob[node]) continue;
        mpmd_split_copy(st->plan->g, node, m, (void *)src, part, 0);
        const char *from = part;
        size_t n = b;
        if (mpmd_sharded(&st->plan->mesh, node)) { /* FSDP: this replica's part of that */
            int64_t lo, cnt;
            mpmd_shard_part(&st->plan->mesh, node, replica, &lo, &cnt);
            from += (size_t)lo * es;
            n = (size_t)cnt * es;
        }
        st->plan->be->device.enter(rs->dev);
        if (st->plan->be->queue.upload(rs->dev, rs->glob[node], from, n)) {
            snprintf(st->err, sizeof st->err, "copying %%%d to rank %d on the %s backend failed", node, rank,
                     st->plan->be->name);
            rc = MPMD_ERR_RUNTIME;
            break;
        }
        rc = MPMD_OK;
    }
    free(part);
    return rc;
}

mpmd_status mpmd_runtime_set_profiling(struct mpmd_step *st, int on) {
    st->profiling = 0;
    st->prof_runs = 0;
    for (int r = 0; r < st->num_local; r++) {
        free(st->rs[r].prof);
        st->rs[r].prof = NULL;
        if (on && !(st->rs[r].prof = calloc((size_t)st->plan->g->n_nodes + 1, sizeof *st->rs[r].prof)))
            return MPMD_ERR_NOMEM;
    }
    st->profiling = on;
    return MPMD_OK;
}

int mpmd_runtime_backend_memory(const struct mpmd_step *st, int rank, size_t *peak, size_t *own) {
    mpmd_rank_state *rs = state_of(st, rank);
    if (!rs || !rs->dev) return 0;
    st->plan->be->device.memory(rs->dev, peak, own);
    return 1;
}

const double *mpmd_runtime_op_seconds(const struct mpmd_step *st, int local) {
    return local >= 0 && local < st->num_local ? st->rs[local].prof : NULL;
}

int64_t mpmd_runtime_collective_bytes(const struct mpmd_step *st, int rank, int64_t *gathered) {
    mpmd_rank_state *rs = state_of(st, rank);
    if (gathered) *gathered = rs ? rs->gath_bytes : -1;
    return rs ? rs->coll_bytes : -1;
}

const mpmd_event *mpmd_runtime_events(const struct mpmd_step *st, int rank, int *n, int64_t *peak_bytes) {
    mpmd_rank_state *rs = state_of(st, rank);
    *n = rs ? rs->nev : 0;
    if (peak_bytes) *peak_bytes = rs ? rs->peak_bytes : 0;
    return rs ? rs->ev : NULL;
}
