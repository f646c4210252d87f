/* The MPI wire (wire.h) between the processes of the MPI launcher
 * (launch_mpi.c), one process per point of the mesh, each running the
 * program of its rank on the calling thread (MPI_THREAD_FUNNELED).
 *
 * A transfer is a non-blocking point-to-point message on the communicator
 * of its replica's pipeline; its tag is (value, microbatch), so nothing can
 * be confused. Messages go from the sender's planned buffer straight into
 * the receiver's. Receives are posted ahead: before an instruction runs,
 * every receive up to the second task after it is posted (the plan keeps
 * their buffers from there on: recv_ahead), so data arrives while the rank
 * computes; a send completes in the background and is waited for at its
 * `reuse` instruction, when the plan is about to overwrite its buffer (the
 * receiver has it by then; the wait only tells MPI). Loop results are combined
 * across replicas on the communicator of a rank's replicas: an allgather,
 * then the same sum in replica order on every replica, so replicas stay
 * bitwise identical.
 *
 * On a backend whose buffers are not host memory (a GPU), messages travel
 * through host copies: each send and receive instruction has a host buffer
 * of its own; a send copies its value there (after the kernels that made
 * it) and sends that, a receive lands there and is copied to the planned
 * device buffer once it has arrived. Replica sums gather host copies and
 * combine them on the host, in the same order and arithmetic as the
 * in-process combine, then copy the result to the device.
 *
 * FSDP: a sharded loop result is reduce-scattered with an all-to-all on
 * the same communicator (replica d receives every replica's part d, then
 * sums them in replica order, the combine's arithmetic for those
 * elements), and a task's sharded parameters are gathered with an
 * allgather of the shards just before it.
 *
 * The requests of every send, receive and gather, the host copies, and one
 * scratch area as large as the program's largest collective needs (the
 * parts an allgather or all-to-all receives, and on a device backend the
 * host copies they are combined in) are made at set-up: a running step
 * allocates nothing here.
 *
 * Built only when CMake finds MPI (MPMD_HAVE_MPI).
 */
#include "runtime/wire.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MPMD_HAVE_MPI
#include <mpi.h>

typedef struct {
    MPI_Comm pipe;      /* the ranks of this replica, rank r = pipeline rank r */
    MPI_Comm data;      /* the replicas of this pipeline rank (and model rank), in replica order */
    MPI_Comm model;     /* the model ranks of this pipeline rank and replica, in model rank order */
    MPI_Comm mesh;      /* every process of the step (mesh_sum) */
    MPI_Request *rreq;  /* [program length]: posted receives */
    MPI_Request *sreq;  /* [program length]: sends in flight */
    int *peer;          /* [program length]: the rank each send in flight goes to (messages) */
    MPI_Request **greq; /* [program length]: FSDP gathers posted ahead (one request per parameter), or NULL */
    MPI_Request coll;   /* a collective the watchdog gave up on (it still writes `space`) */
    int coll_open;
    char *space;      /* a collective's received parts and host copies: the most any of this
                         rank's takes (coll_space), planned at set-up */
    void **parts;     /* [max(replicas, model ranks)]: a combine's operands */
    uint32_t sum[64]; /* mesh_sum's result */
    int tag_ub;
    char **stage; /* [program length]: host copies of sends and receives (device backends), else NULL */
} mpi_state;

/* A message's host copy: page-locked where the backend has such memory
 * (faster copies to and from the GPU). */
static void *stage_alloc(const mpmd_backend *be, size_t bytes) {
    return be->device.host_alloc ? be->device.host_alloc(bytes) : malloc(bytes);
}
static void stage_free(const mpmd_backend *be, void *p) {
    if (be->device.host_alloc)
        be->device.host_free(p);
    else
        free(p);
}

/* The bytes of m->space: the most that one collective of program p takes,
 * in the layouts that mpi_allreduce, mpi_reduce_scatter, mpi_allgather
 * (device backends) and mpi_model_collective describe. */
static size_t coll_space(const struct mpmd_step *st, const mpmd_program *p, int staged) {
    const mpmd_plan *pl = st->plan;
    const size_t R = (size_t)pl->replicas, M = (size_t)pl->model;
    size_t most = 1;
#define MOST(b) most = (b) > most ? (b) : most
    for (int x = 0; x < p->n; x++) {
        const mpmd_instr *in = &p->ins[x];
        if (in->op == MPMD_I_ALLREDUCE) {
            const size_t b = rt_bytes(pl->g, in->node);
            MOST(R * b + (staged ? 2 * b : 0) + 1);
        } else if (in->op == MPMD_I_REDUCE_SCATTER) {
            const size_t es = mpmd_dtype_size(pl->g->nodes[in->node].type.dtype),
                         full = rt_bytes(pl->g, in->node);
            const size_t L = (size_t)mpmd_shard_len(&pl->mesh, in->node) * es;
            const size_t head = R * L + (staged ? full + L : 0);
            MOST((head + sizeof(int) - 1) / sizeof(int) * sizeof(int) + 4 * R * sizeof(int) + 1);
        } else if (in->op == MPMD_I_GATHER && staged) {
            int n;
            const int32_t *list = mpmd_gather_list(pl, in, &n);
            for (int q = 0; q < n; q++)
                MOST((R + 1) * mpmd_held_bytes(&pl->mesh, list[q]) + 1);
        }
    }
    /* the model axis's collectives, wherever in the graph (a few, small) */
    for (int i = 0; M > 1 && i < pl->g->n_nodes; i++) {
        const mpmd_node *nd = &pl->g->nodes[i];
        if (!(nd->op->flags & MPMD_OPF_COLLECTIVE) || !mpmd_collective_exchanges(nd->op)) continue;
        const size_t b = rt_bytes(pl->g, nd->in[0]), ob = rt_bytes(pl->g, i);
        MOST(M * b + (!pl->be->host_memory ? b + ob : 0) + 1);
    }
#undef MOST
    return most;
}

static mpmd_status mpi_setup(struct mpmd_step *st, mpmd_error *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* started by a launcher (Open MPI, PMI, PMIx, Slurm) or not */
        const char *launched = getenv("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE"
                               : getenv("PMI_RANK")           ? "PMI_RANK"
                               : getenv("PMIX_RANK")          ? "PMIX_RANK"
                               : getenv("SLURM_PROCID")       ? "SLURM_PROCID"
                                                              : NULL;
        if (launched)
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "the MPI runtime needs mpmd_mpi_init(&argc, &argv, &err) "
                                  "at the start of main; this process was started by an MPI launcher (%s is "
                                  "set) but never initialised MPI",
                                  launched);
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the MPI runtime needs mpmd_mpi_init(&argc, &argv, &err) at "
                              "the start of main, and the program started by mpirun (mpirun -np N program)");
    }
    mpi_state *m = calloc(1, sizeof *m);
    if (!m) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    st->tx = m;
    st->rs[0].tx = m;
    const mpmd_program *p = &st->plan->prog[st->rs[0].rank];
    m->rreq = malloc((size_t)(p->n + 1) * sizeof *m->rreq);
    m->sreq = malloc((size_t)(p->n + 1) * sizeof *m->sreq);
    m->peer = calloc((size_t)p->n + 1, sizeof *m->peer);
    if (!m->rreq || !m->sreq || !m->peer) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    for (int x = 0; x < p->n; x++)
        m->rreq[x] = m->sreq[x] = MPI_REQUEST_NULL;
    if (!st->plan->be->host_memory) {
        if (!(m->stage = calloc((size_t)p->n + 1, sizeof *m->stage)))
            return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
        for (int x = 0; x < p->n; x++)
            if ((p->ins[x].op == MPMD_I_SEND || p->ins[x].op == MPMD_I_RECV) &&
                !(m->stage[x] =
                      stage_alloc(st->plan->be, mpmd_held_bytes(&st->plan->mesh, p->ins[x].node) + 1)))
                return mpmd_error_set(err, MPMD_ERR_NOMEM,
                                      "out of memory for the host copies of rank %d's messages",
                                      st->rs[0].rank);
    }
    const int M = st->plan->model;
    MPI_Comm_split(MPI_COMM_WORLD, st->rs[0].replica * M + st->rs[0].model, st->rs[0].rank, &m->pipe);
    MPI_Comm_split(MPI_COMM_WORLD, st->rs[0].rank * M + st->rs[0].model, st->rs[0].replica, &m->data);
    MPI_Comm_split(MPI_COMM_WORLD, st->rs[0].rank * st->plan->replicas + st->rs[0].replica, st->rs[0].model,
                   &m->model);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->mesh);
    int *ub = NULL, flag = 0;
    if (st->plan->be->host_memory && st->plan->mesh.shard) { /* FSDP's gathers, posted one task ahead */
        if (!(m->greq = calloc((size_t)p->n + 1, sizeof *m->greq)))
            return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
        for (int x = 0; x < p->n; x++) {
            const mpmd_instr *in = &p->ins[x];
            if (in->op != MPMD_I_GATHER) continue;
            int n;
            const int32_t *list = mpmd_gather_list(st->plan, in, &n);
            if (!(m->greq[x] = malloc((size_t)(n ? n : 1) * sizeof **m->greq)))
                return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
            for (int q = 0; q < n; q++) {
                m->greq[x][q] = MPI_REQUEST_NULL;
                const size_t b = (size_t)st->plan->replicas * mpmd_held_bytes(&st->plan->mesh, list[q]);
                if (b > (size_t)INT_MAX)
                    return mpmd_error_set(err, MPMD_ERR_INVALID,
                                          "%%%d has %zu bytes to gather; MPI counts stop at %d", list[q], b,
                                          INT_MAX);
            }
        }
    }
    const int R = st->plan->replicas;
    if (!(m->space = malloc(coll_space(st, p, m->stage != NULL))) ||
        !(m->parts = calloc((size_t)(R > M ? R : M), sizeof *m->parts)))
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for rank %d's collectives", st->rs[0].rank);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    m->tag_ub = flag && ub ? *ub : 32767;
    int64_t need = (int64_t)st->plan->g->n_nodes * (st->plan->num_micro + 1);
    if (need > m->tag_ub)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%lld message tags needed (values x microbatches) but this MPI "
                              "allows tags up to %d",
                              (long long)need, m->tag_ub);
    return MPMD_OK;
}

static void mpi_teardown(struct mpmd_step *st) {
    mpi_state *m = st->tx;
    if (!m) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        if (m->pipe != MPI_COMM_NULL && m->pipe) MPI_Comm_free(&m->pipe);
        if (m->data != MPI_COMM_NULL && m->data) MPI_Comm_free(&m->data);
        if (m->model != MPI_COMM_NULL && m->model) MPI_Comm_free(&m->model);
        if (m->mesh != MPI_COMM_NULL && m->mesh) MPI_Comm_free(&m->mesh);
    }
    if (m->stage) {
        const mpmd_program *p = &st->plan->prog[st->rs[0].rank];
        for (int x = 0; x < p->n; x++)
            stage_free(st->plan->be, m->stage[x]);
        free(m->stage);
    }
    if (m->greq)
        for (int x = 0; x < st->plan->prog[st->rs[0].rank].n; x++)
            free(m->greq[x]);
    free(m->greq);
    free(m->rreq), free(m->sreq), free(m->peer), free(m->space), free(m->parts), free(m);
    st->tx = NULL;
    st->rs[0].tx = NULL;
}

/* Post GATHER `slot`'s allgathers (host memory: straight into its planned
 * buffers, which live from here on). */
static void mpi_post_gather(mpmd_rank_state *rs, int slot, int n, const int32_t *nodes,
                            const void *const *mine, void *const *out) {
    struct mpmd_step *st = rs->st;
    mpi_state *m = rs->tx;
    if (!m->greq) return; /* a device backend: gathered through host copies at the gather */
    for (int q = 0; q < n; q++) {
        const int b = (int)mpmd_held_bytes(&st->plan->mesh, nodes[q]);
        MPI_Iallgather(mine[q], b, MPI_BYTE, out[q], b, MPI_BYTE, m->data, &m->greq[slot][q]);
    }
}

/* Wait for a request under the watchdog: poll until it completes or the
 * step's wait_limit passes, then fail naming what was awaited (`what`, a
 * phrase with the peer and the value) and return nonzero. Without a limit,
 * MPI_Wait. */
static int wait_for(mpmd_rank_state *rs, MPI_Request *req, const char *what) {
    struct mpmd_step *st = rs->st;
    if (st->broken) return 1; /* one wait already ran out: do not wait again */
    if (st->wait_limit <= 0) {
        MPI_Wait(req, MPI_STATUS_IGNORE);
        return 0;
    }
    double t0 = rt_now(), now = t0;
    for (long i = 0;; i++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return 0;
        if (i % 64 == 0) now = rt_now();
        if (now - t0 > st->wait_limit) break;
        if (now - t0 > 1e-3) { /* a long wait: poll less often */
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
    rt_fail(rs, MPMD_ERR_RUNTIME,
            "waited %.3f s for %s: that rank is stuck or slower than the watchdog allows (step_timeout)",
            now - t0, what);
    return 1;
}

/* Receive `slot` straight into buf, or (a device backend) into its host
 * copy. */
static void mpi_post_recv(mpmd_rank_state *rs, int slot, void *buf, size_t bytes, int peer, int tag) {
    mpi_state *m = rs->tx;
    MPI_Irecv(m->stage ? m->stage[slot] : buf, (int)bytes, MPI_BYTE, peer, tag, m->pipe, &m->rreq[slot]);
}

static int mpi_recv(mpmd_rank_state *rs, int slot, void *buf, size_t bytes, int peer, int tag) {
    (void)tag; /* posted by mpi_post_recv */
    mpi_state *m = rs->tx;
    double t0 = rs->st->record ? rt_now() : 0;
    char what[400], ib[300];
    rt_instr_str(rs->st, rs->rank, slot, ib, sizeof ib);
    snprintf(what, sizeof what, "%s from rank %d, which has not sent it", ib, peer);
    int bad = wait_for(rs, &m->rreq[slot], what);
    if (rs->st->record) rs->wait += rt_now() - t0;
    if (!bad && m->stage && rs->st->plan->be->queue.upload(rs->dev, buf, m->stage[slot], bytes)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "copying %s, received from rank %d, to the %s backend failed", ib, peer,
                rs->st->plan->be->name);
        bad = 1;
    }
    return bad;
}

static int mpi_send(mpmd_rank_state *rs, int slot, const void *buf, size_t bytes, int peer, int tag) {
    struct mpmd_step *st = rs->st;
    mpi_state *m = rs->tx;
    /* a device value: its host copy, once the kernels that make it are done */
    if (m->stage && st->plan->be->queue.download(rs->dev, m->stage[slot], buf, bytes)) {
        char ib[300];
        rt_fail(rs, MPMD_ERR_RUNTIME, "copying %s from the %s backend to send it to rank %d failed",
                rt_instr_str(st, rs->rank, slot, ib, sizeof ib), st->plan->be->name, peer);
        return 1;
    }
    m->peer[slot] = peer;
    MPI_Isend(m->stage ? m->stage[slot] : buf, (int)bytes, MPI_BYTE, peer, tag, m->pipe, &m->sreq[slot]);
    return 0;
}

static void send_what(mpmd_rank_state *rs, int x, char *what, size_t n) {
    char ib[300];
    snprintf(what, n, "rank %d to take %s, sent to it", ((mpi_state *)rs->tx)->peer[x],
             rt_instr_str(rs->st, rs->rank, x, ib, sizeof ib));
}

static void mpi_send_done(mpmd_rank_state *rs, int x) {
    mpi_state *m = rs->tx;
    char what[400];
    send_what(rs, x, what, sizeof what);
    if (wait_for(rs, &m->sreq[x], what)) rs->st->broken = 1; /* the send still reads its buffer */
}

static int mpi_allreduce(mpmd_rank_state *rs, int node, const void *in, void *out) {
    struct mpmd_step *st = rs->st;
    mpi_state *m = rs->tx;
    const int R = st->plan->replicas;
    size_t b = rt_bytes(st->plan->g, node);
    const int staged = m->stage != NULL; /* device buffers: gather and combine host copies */
    /* staged: this replica's host copy and the combined result after the
     * gathered ones, in the one buffer a collective the watchdog gives up
     * on keeps (coll_buf) */
    char *all = m->space;
    void **bufs = m->parts;
    char *mine = staged ? all + (size_t)R * b : NULL;
    double t0 = st->record ? rt_now() : 0;
    if (staged && st->plan->be->queue.download(rs->dev, mine, in, b)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "copying %%%d from the %s backend to combine it across replicas failed",
                node, st->plan->be->name);
        return 1;
    }
    MPI_Request req;
    MPI_Iallgather(staged ? mine : in, (int)b, MPI_BYTE, all, (int)b, MPI_BYTE, m->data, &req);
    char what[400], vb[300];
    snprintf(what, sizeof what, "the other replicas of rank %d to combine %s", rs->rank,
             rt_value_str(st, node, vb, sizeof vb));
    if (wait_for(rs, &req, what)) {
        st->broken = 1; /* the collective still writes `all`: kept until it ends (mpi_settle) */
        m->coll = req, m->coll_open = 1;
        return 1;
    }
    if (st->record) rs->wait += rt_now() - t0;
    for (int d = 0; d < R; d++)
        bufs[d] = all + (size_t)d * b;
    int bad;
    if (staged) /* the in-process combine's order and arithmetic, on the host, then to the device */
        bad = mpmd_backend_cpu.kernels.combine(NULL, st->plan->g, &st->plan->g->nodes[node], bufs, R,
                                               mine + b, mpmd_type_numel(&st->plan->g->nodes[node].type)) ||
              st->plan->be->queue.upload(rs->dev, out, mine + b, b);
    else
        bad = st->plan->be->kernels.combine(rs->dev, st->plan->g, &st->plan->g->nodes[node], bufs, R, out,
                                            mpmd_type_numel(&st->plan->g->nodes[node].type));
    if (bad) rt_fail(rs, MPMD_ERR_RUNTIME, "combining %%%d across replicas failed", node);
    return bad;
}

/* Wait for a collective (writing into m->space or the arena, both kept
 * until it ends when the watchdog gives up: mpi_settle). */
static int coll_wait(mpmd_rank_state *rs, MPI_Request *req, const char *what) {
    mpi_state *m = rs->tx;
    double t0 = rs->st->record ? rt_now() : 0;
    if (wait_for(rs, req, what)) {
        rs->st->broken = 1;
        m->coll = *req, m->coll_open = 1;
        return 1;
    }
    if (rs->st->record) rs->wait += rt_now() - t0;
    return 0;
}

/* Replica d's part of every replica's loop result: an all-to-all of the
 * parts (each replica sends part j to replica j), then the combine of the
 * R parts in replica order. */
static int mpi_reduce_scatter(mpmd_rank_state *rs, int node, const void *in, void *out) {
    struct mpmd_step *st = rs->st;
    const mpmd_plan *pl = st->plan;
    mpi_state *m = rs->tx;
    const int R = pl->replicas;
    const size_t es = mpmd_dtype_size(pl->g->nodes[node].type.dtype), full = rt_bytes(pl->g, node);
    const size_t L = (size_t)mpmd_shard_len(&pl->mesh, node) * es;
    const int staged = m->stage != NULL;
    int64_t mylo, mycnt;
    mpmd_shard_part(&pl->mesh, node, rs->replica, &mylo, &mycnt);
    if ((size_t)R * L > (size_t)INT_MAX || full > (size_t)INT_MAX) {
        rt_fail(rs, MPMD_ERR_INVALID, "%%%d: %zu bytes to reduce-scatter; MPI counts stop at %d", node, full,
                INT_MAX);
        return 1;
    }
    /* the parts received (R x L), then (staged) the whole loop result's host
     * copy and the result, then the collective's counts and displacements:
     * one buffer, which a collective the watchdog gives up on keeps whole */
    const size_t head = (size_t)R * L + (staged ? full + L : 0);
    const size_t ints_at = (head + sizeof(int) - 1) / sizeof(int) * sizeof(int);
    char *all = m->space;
    void **bufs = m->parts;
    int *scnt = (int *)(void *)(all + ints_at), *sdis = scnt + R, *rcnt = scnt + 2 * R, *rdis = scnt + 3 * R;
    char *host = staged ? all + (size_t)R * L : NULL; /* the whole loop result's host copy */
    const void *src = staged ? host : in;
    if (staged && pl->be->queue.download(rs->dev, host, in, full)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "copying %%%d from the %s backend to reduce-scatter it failed", node,
                pl->be->name);
        return 1;
    }
    for (int j = 0; j < R; j++) {
        int64_t lo, cnt;
        mpmd_shard_part(&pl->mesh, node, j, &lo, &cnt);
        scnt[j] = (int)((size_t)cnt * es), sdis[j] = (int)((size_t)lo * es);
        rcnt[j] = (int)((size_t)mycnt * es), rdis[j] = (int)((size_t)j * L);
    }
    MPI_Request req;
    MPI_Ialltoallv(src, scnt, sdis, MPI_BYTE, all, rcnt, rdis, MPI_BYTE, m->data, &req);
    char what[400], vb[300];
    snprintf(what, sizeof what, "the other replicas of rank %d to reduce-scatter %s", rs->rank,
             rt_value_str(st, node, vb, sizeof vb));
    if (coll_wait(rs, &req, what)) return 1;
    for (int d = 0; d < R; d++)
        bufs[d] = all + (size_t)d * L;
    int bad;
    if (staged) {
        char *res = all + (size_t)R * L + full;
        bad = mpmd_backend_cpu.kernels.combine(NULL, pl->g, &pl->g->nodes[node], bufs, R, res, mycnt) ||
              pl->be->queue.upload(rs->dev, out, res, (size_t)mycnt * es);
    } else {
        bad = pl->be->kernels.combine(rs->dev, pl->g, &pl->g->nodes[node], bufs, R, out, mycnt);
    }
    rs->coll_bytes += (int64_t)((size_t)(R - 1) * (size_t)mycnt * es);
    if (bad) rt_fail(rs, MPMD_ERR_RUNTIME, "reduce-scattering %%%d across replicas failed", node);
    return bad;
}

/* Each parameter's shards from every replica, one allgather each: posted
 * one task ahead (host memory, mpi_post_gather) and waited for here, or (a
 * device backend) through host copies now. */
static int mpi_allgather(mpmd_rank_state *rs, int x, int n, const int32_t *nodes, const void *const *mine,
                         void *const *out) {
    struct mpmd_step *st = rs->st;
    const mpmd_plan *pl = st->plan;
    mpi_state *m = rs->tx;
    const int R = pl->replicas, staged = m->stage != NULL;
    if (m->greq && m->greq[x]) {
        for (int q = 0; q < n; q++) {
            char what[400], vb[300];
            snprintf(what, sizeof what, "the other replicas of rank %d to gather %s (FSDP)", rs->rank,
                     rt_value_str(st, nodes[q], vb, sizeof vb));
            double t0 = st->record ? rt_now() : 0;
            if (wait_for(rs, &m->greq[x][q], what)) {
                st->broken = 1; /* the collective still writes the arena: the step keeps it */
                return 1;
            }
            if (st->record) rs->wait += rt_now() - t0;
            rs->coll_bytes += (int64_t)((size_t)(R - 1) * mpmd_held_bytes(&pl->mesh, nodes[q]));
            rs->gath_bytes += (int64_t)((size_t)(R - 1) * mpmd_held_bytes(&pl->mesh, nodes[q]));
        }
        return 0;
    }
    for (int q = 0; q < n; q++) {
        const int node = nodes[q];
        const size_t b = mpmd_held_bytes(&pl->mesh, node);
        if ((size_t)R * b > (size_t)INT_MAX) {
            rt_fail(rs, MPMD_ERR_INVALID, "%%%d: %zu bytes to gather; MPI counts stop at %d", node,
                    (size_t)R * b, INT_MAX);
            return 1;
        }
        /* staged: the gathered shards, then this replica's own */
        char *host = staged ? m->space : NULL;
        if (staged && pl->be->queue.download(rs->dev, host + (size_t)R * b, mine[q], b)) {
            rt_fail(rs, MPMD_ERR_RUNTIME, "copying %%%d from the %s backend to gather it failed", node,
                    pl->be->name);
            return 1;
        }
        MPI_Request req;
        MPI_Iallgather(staged ? host + (size_t)R * b : mine[q], (int)b, MPI_BYTE, staged ? host : out[q],
                       (int)b, MPI_BYTE, m->data, &req);
        char what[400], vb[300];
        snprintf(what, sizeof what, "the other replicas of rank %d to gather %s (FSDP)", rs->rank,
                 rt_value_str(st, node, vb, sizeof vb));
        if (coll_wait(rs, &req, what)) return 1;
        if (staged) {
            if (pl->be->queue.upload(rs->dev, out[q], host, (size_t)R * b)) {
                rt_fail(rs, MPMD_ERR_RUNTIME, "copying the gathered %%%d to the %s backend failed", node,
                        pl->be->name);
                return 1;
            }
        }
        rs->coll_bytes += (int64_t)((size_t)(R - 1) * b);
        rs->gath_bytes += (int64_t)((size_t)(R - 1) * b);
    }
    return 0;
}

/* Every model rank's input by an allgather, then the in-process
 * arithmetic in rank order (mpmd_backend_cpu.kernels.model_combine), on host
 * memory: a device backend's input is copied out first and the result in. */
static int mpi_model_collective(mpmd_rank_state *rs, int node, const void *in, void *out, const char *where) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    const mpmd_backend *be = st->plan->be;
    mpi_state *m = rs->tx;
    const int M = st->plan->model, staged = !be->host_memory;
    const size_t b = rt_bytes(g, g->nodes[node].in[0]), ob = rt_bytes(g, node);
    if ((size_t)M * b > (size_t)INT_MAX) {
        rt_fail(rs, MPMD_ERR_INVALID, "%%%d = %s%s: %zu bytes to gather; MPI counts stop at %d", node,
                g->nodes[node].op->name, where, (size_t)M * b, INT_MAX);
        return 1;
    }
    /* every rank's input, then (staged) this rank's own and the result */
    char *buf = m->space;
    const void **ins = (const void **)m->parts;
    char *mine = buf + (size_t)M * b, *res = mine + b;
    if (staged && be->queue.download(rs->dev, mine, in, b)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = %s%s: copying the input from the %s backend failed", node,
                g->nodes[node].op->name, where, be->name);
        return 1;
    }
    MPI_Request req;
    MPI_Iallgather(staged ? mine : in, (int)b, MPI_BYTE, buf, (int)b, MPI_BYTE, m->model, &req);
    char what[400];
    snprintf(what, sizeof what, "the other model ranks of rank %d for %%%d = %s%s", rs->rank, node,
             g->nodes[node].op->name, where);
    if (coll_wait(rs, &req, what)) return 1;
    for (int j = 0; j < M; j++)
        ins[j] = buf + (size_t)j * b;
    char e[256];
    int bad = mpmd_backend_cpu.kernels.model_combine(NULL, g, node, rs->model, M, ins, staged ? res : out, e,
                                                     sizeof e);
    if (!bad && staged && be->queue.upload(rs->dev, out, res, ob))
        bad = 1, snprintf(e, sizeof e, "copying the result to the %s backend failed", be->name);
    if (bad) rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = %s%s: %s", node, g->nodes[node].op->name, where, e);
    return bad;
}

/* An allreduce of the words over every process (integers: the sum is
 * exact, whatever order MPI adds them in). */
static int mpi_mesh_sum(mpmd_rank_state *rs, uint32_t *acc, int n) {
    mpi_state *m = rs->tx;
    if (n > (int)(sizeof m->sum / sizeof *m->sum)) {
        rt_fail(rs, MPMD_ERR_INVALID, "a sum over the mesh of %d words (at most 64)", n);
        return 1;
    }
    MPI_Request req;
    MPI_Iallreduce(acc, m->sum, n, MPI_UINT32_T, MPI_SUM, m->mesh, &req);
    if (coll_wait(rs, &req, "the other processes of the step to sum a global norm")) return 1;
    memcpy(acc, m->sum, (size_t)n * sizeof *acc);
    return 0;
}

static void mpi_end_step(mpmd_rank_state *rs) {
    mpi_state *m = rs->tx;
    const mpmd_program *p = &rs->st->plan->prog[rs->rank];
    for (int x = 0; x < p->n; x++) {
        if (m->sreq[x] != MPI_REQUEST_NULL) {
            char what[400];
            send_what(rs, x, what, sizeof what);
            if (wait_for(rs, &m->sreq[x], what)) rs->st->broken = 1;
        }
        /* gathers posted ahead and not waited for (a failed step): they end
         * when every replica has posted them */
        if (m->greq && m->greq[x]) {
            int n;
            mpmd_gather_list(rs->st->plan, &p->ins[x], &n);
            for (int q = 0; q < n; q++)
                if (m->greq[x][q] != MPI_REQUEST_NULL &&
                    wait_for(rs, &m->greq[x][q], "the other replicas to finish a gather of a failed step"))
                    rs->st->broken = 1;
        }
        /* receives posted but not consumed (a failed step): cancel them */
        if (m->rreq[x] != MPI_REQUEST_NULL) {
            MPI_Cancel(&m->rreq[x]);
            MPI_Wait(&m->rreq[x], MPI_STATUS_IGNORE);
        }
    }
}

static int mpi_settle(struct mpmd_step *st, double wait) {
    mpi_state *m = st->tx;
    const mpmd_program *p = &st->plan->prog[st->rs[0].rank];
    const double t0 = rt_now();
    for (;;) {
        int done = 1;
        for (int x = 0; x < p->n; x++)
            if (m->sreq[x] != MPI_REQUEST_NULL) {
                int flag = 0;
                MPI_Test(&m->sreq[x], &flag, MPI_STATUS_IGNORE);
                done &= flag;
            }
        if (m->coll_open) {
            int flag = 0;
            MPI_Test(&m->coll, &flag, MPI_STATUS_IGNORE);
            if (flag) m->coll_open = 0;
            done &= flag;
        }
        if (done || rt_now() - t0 >= wait) return done;
        struct timespec nap = {0, 1000000L};
        nanosleep(&nap, NULL);
    }
}

const mpmd_wire mpmd_wire_mpi = {
    .name = "mpi",
    .setup = mpi_setup,
    .teardown = mpi_teardown,
    .start = NULL,
    .recv_ahead = 2,
    .post_recv = mpi_post_recv,
    .send = mpi_send,
    .send_done = mpi_send_done,
    .recv = mpi_recv,
    .allreduce = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .post_gather = mpi_post_gather,
    .model_collective = mpi_model_collective,
    .mesh_sum = mpi_mesh_sum,
    .wake = NULL, /* one rank per process: no other thread here waits on it */
    .end_step = mpi_end_step,
    .settle = mpi_settle,
};

#endif
