/* The in-process wire: every (rank, replica) is a thread of this process
 * (the in-process launcher, launcher.c).
 *
 * A send puts the address of the value's planned buffer on the sender in
 * the destination rank's mailbox (a list under a mutex, with a condition
 * variable for the receiver); the receive copies it into its own planned
 * buffer. The message itself is the sender's record for that send
 * instruction, made at set-up: a send allocates nothing. The sender's plan leaves that buffer untouched until
 * the sender knows the copy is done (the SEND's `reuse`), so no buffer is owned by the wire. Sends never
 * block, so the programs' check (every receive has its send, nothing deadlocks) is all that is needed.
 *
 * A message carries the backend event after which its buffer is complete;
 * the receiver's queue waits for it before copying, so an asynchronous
 * device (CUDA) needs no host synchronisation per send. The copy is queued
 * before anything the receiver sends afterwards, so when the sender learns
 * of it (and may overwrite its buffer) the copy has happened.
 *
 * The replicas of one pipeline rank meet in a group (a barrier) to combine
 * a loop result: each puts its buffer in the group, and every replica
 * computes the same sum in replica order, so all copies have equal bits.
 * With FSDP each computes only its shard's part of that sum (the
 * reduce-scatter), and before a task that reads sharded parameters the
 * replicas meet once and each copies every replica's shards (the gather).
 *
 * A failing rank wakes every mailbox and group (wake), so that no rank
 * stays blocked; the others stop at their next instruction or wait.
 *
 * A receive whose value has not come yet sleeps on the condition variable.
 * Waking it costs time: the summary of a recorded run shows, per rank, the
 * part of its waits between a value's send and the receiver running again
 * (about 0.1 ms a receive on this project's 2-core virtual machines, 6-8
 * points of a 2-rank, 16-microbatch GPT pipeline's bubble). With
 * MPMD_SPIN_US=N a receive first watches its mailbox for N microseconds
 * and takes a value sent meanwhile without sleeping. It is off by default:
 * measured on those machines, 50-100 us gave no faster step on 2 ranks,
 * 300 us 2% faster, and with 8 ranks on 2 cores 50 us made the step 1.5%
 * slower (the watching thread holds a core another rank needs).
 */
#include "runtime/wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct msg {
    struct msg *next;
    int32_t src, tag; /* the sender's pipeline rank, rt_tag */
    const void *buf;  /* the sender's planned buffer */
    void *ev;         /* the backend event after which buf is complete, or NULL */
    double sent;      /* when it was posted (recorded runs) */
} msg;

/* One rank's mailbox, on cache lines of its own (the ranks' threads lock
 * their mailboxes concurrently). */
typedef struct {
    _Alignas(128) pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *inbox;
    atomic_uint posted; /* messages put in the inbox so far, for receives that watch it */
    msg *out;           /* [program length]: the message of this rank's send instruction x, made at set-up
                           (each send runs once a run, and its message is taken before the run ends) */
    void **part;        /* [replicas]: a combine's operands */
    unsigned gathers;   /* FSDP gathers this run: their parity picks the group's bank */
} mailbox;

/* The replicas of one pipeline rank (and model rank) meet here to combine
 * loop results; the model ranks of one pipeline rank and replica, to run a
 * collective of the model axis. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, size;
    const char *who; /* "replicas" or "model ranks", for messages */
    unsigned generation;
    void **bufs;         /* [size] */
    const void **shards; /* data groups under FSDP: [2 banks][size][most] the members' shards of a gather */
    int most;            /* the longest gather list */
} group;

typedef struct {
    mailbox *box; /* [num_local]: rank state li's, at rs[li].tx */
    int nbox;
    group *groups; /* [num_ranks x model ranks]: replicas of (rank r, model rank m) at r M + m; ngroups of
                      them (data groups, when replicas > 1), then [num_ranks x replicas] model groups,
                      (rank r, replica d) at r R + d (when model ranks > 1) */
    int ngroups, ndata;
    double spin; /* seconds a receive watches its mailbox before it sleeps */
} local_state;

/* MPMD_SPIN_US: microseconds a receive watches its mailbox before it sleeps;
 * 0 (sleep at once) when unset or not a number in [0, 1e6]. */
static double spin_seconds(void) {
    const char *v = getenv("MPMD_SPIN_US");
    char *end;
    double us = v && *v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !(us >= 0 && us <= 1e6)) us = 0;
    return us * 1e-6;
}

static group *data_group(mpmd_rank_state *rs) {
    return &((local_state *)rs->st->tx)->groups[rs->rank * rs->st->plan->model + rs->model];
}

static group *model_group(mpmd_rank_state *rs) {
    local_state *ls = rs->st->tx;
    return &ls->groups[ls->ndata + rs->rank * rs->st->plan->replicas + rs->replica];
}

static void local_teardown(struct mpmd_step *st) {
    local_state *ls = st->tx;
    if (!ls) return;
    for (int li = 0; li < ls->nbox; li++) {
        mailbox *b = &ls->box[li];
        mpmd_rank_state *rs = &st->rs[li];
        if (b->inbox) st->plan->be->device.enter(rs->dev);
        while (b->inbox) {
            msg *m = b->inbox;
            b->inbox = m->next;
            if (m->ev) st->plan->be->queue.event_free(rs->dev, m->ev);
        }
        free(b->out), free(b->part);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        rs->tx = NULL;
    }
    for (int r = 0; r < ls->ngroups; r++) {
        pthread_mutex_destroy(&ls->groups[r].mu);
        pthread_cond_destroy(&ls->groups[r].cv);
        free(ls->groups[r].bufs);
        free(ls->groups[r].shards);
    }
    free(ls->box);
    free(ls->groups);
    free(ls);
    st->tx = NULL;
}

static mpmd_status local_setup(struct mpmd_step *st, mpmd_error *err) {
    const int L = st->num_local, D = st->plan->num_ranks, R = st->plan->replicas, M = st->plan->model;
    local_state *ls = calloc(1, sizeof *ls);
    if (!ls) goto nomem;
    st->tx = ls;
    size_t bytes = (size_t)(L > 0 ? L : 1) * sizeof *ls->box; /* a multiple of the alignment */
    if (!(ls->box = aligned_alloc(_Alignof(mailbox), bytes))) goto nomem;
    memset(ls->box, 0, bytes);
    ls->spin = spin_seconds();
    for (int li = 0; li < L; li++) {
        atomic_init(&ls->box[li].posted, 0);
        pthread_mutex_init(&ls->box[li].mu, NULL);
        pthread_cond_init(&ls->box[li].cv, NULL);
        st->rs[li].tx = &ls->box[li];
        ls->nbox++;
        const int n = st->plan->prog[st->rs[li].rank].n;
        if (!(ls->box[li].out = calloc((size_t)n + 1, sizeof(msg))) ||
            !(ls->box[li].part = calloc((size_t)R, sizeof(void *))))
            goto nomem;
    }
    ls->ndata = R > 1 ? D * M : 0;
    const int total = ls->ndata + (M > 1 ? D * R : 0) + 1; /* the last: every rank state (mesh_sum) */
    if (!(ls->groups = calloc((size_t)total, sizeof *ls->groups))) goto nomem;
    for (int k = 0; k < total; k++) {
        group *gr = &ls->groups[k];
        pthread_mutex_init(&gr->mu, NULL);
        pthread_cond_init(&gr->cv, NULL);
        ls->ngroups++;
        gr->size = k == total - 1 ? L : k < ls->ndata ? R : M;
        gr->who = k == total - 1 ? "ranks" : k < ls->ndata ? "replicas" : "model ranks";
        if (!(gr->bufs = calloc((size_t)gr->size, sizeof(void *)))) goto nomem;
        if (k < ls->ndata && st->plan->mesh.shard) { /* FSDP's gathers */
            for (int l = 0; l < st->plan->n_gather; l++)
                gr->most = st->plan->gather_n[l] > gr->most ? st->plan->gather_n[l] : gr->most;
            if (!(gr->shards = calloc(2 * (size_t)gr->size * (size_t)(gr->most + 1), sizeof *gr->shards)))
                goto nomem;
        }
    }
    return MPMD_OK;
nomem:
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory setting up the ranks (%s backend)",
                          st->plan->be->name);
}

static void local_wake(struct mpmd_step *st) {
    local_state *ls = st->tx;
    if (!ls) return;
    for (int li = 0; li < ls->nbox; li++) {
        pthread_mutex_lock(&ls->box[li].mu);
        pthread_cond_broadcast(&ls->box[li].cv);
        pthread_mutex_unlock(&ls->box[li].mu);
    }
    for (int r = 0; r < ls->ngroups; r++) {
        pthread_mutex_lock(&ls->groups[r].mu);
        pthread_cond_broadcast(&ls->groups[r].cv);
        pthread_mutex_unlock(&ls->groups[r].mu);
    }
}

static int local_recv(mpmd_rank_state *rs, int slot, void *buf, size_t bytes, int peer, int tag) {
    struct mpmd_step *st = rs->st;
    mailbox *b = rs->tx;
    struct timespec until;
    int have_deadline = 0, timed = 0;
    double started = 0;
    double wait_from = -1;   /* when this rank began to wait (recorded runs) */
    double watch_until = -1; /* MPMD_SPIN_US: the time the watching stops */
    pthread_mutex_lock(&b->mu);
    for (;;) {
        msg **pp = &b->inbox;
        while (*pp && !((*pp)->src == peer && (*pp)->tag == tag))
            pp = &(*pp)->next;
        if (*pp) {
            msg *m = *pp;
            *pp = m->next;
            pthread_mutex_unlock(&b->mu);
            /* it came while this rank waited: the time from its posting to
             * here is the wake-up, not the sender's lateness */
            if (wait_from >= 0) rs->late += rt_now() - (m->sent > wait_from ? m->sent : wait_from);
            int bad = 0;
            if (m->ev) {
                bad = st->plan->be->queue.event_wait(rs->dev, m->ev);
                st->plan->be->queue.event_free(rs->dev, m->ev);
            }
            if (!bad) bad = st->plan->be->queue.copy(rs->dev, buf, m->buf, bytes);
            if (bad) {
                char ib[400];
                rt_fail(rs, MPMD_ERR_RUNTIME, "receiving %s from rank %d failed",
                        rt_instr_str(st, rs->rank, slot, ib, sizeof ib), peer);
            }
            return bad;
        }
        if (rt_aborted(st)) {
            pthread_mutex_unlock(&b->mu);
            return 1;
        }
        double t0 = st->record ? rt_now() : 0;
        if (st->record && wait_from < 0) wait_from = t0;
        const double spin = ((local_state *)st->tx)->spin;
        const double now = spin > 0 ? rt_now() : 0;
        if (spin > 0 && watch_until < 0) watch_until = now + spin;
        if (spin > 0 && now < watch_until) { /* watch until a new message comes or the time is up */
            unsigned seen = atomic_load_explicit(&b->posted, memory_order_relaxed);
            pthread_mutex_unlock(&b->mu);
            while (atomic_load_explicit(&b->posted, memory_order_relaxed) == seen && !rt_aborted(st)) {
                for (int k = 0; k < 32; k++)
                    cpu_relax();
                if (rt_now() >= watch_until) break;
            }
            pthread_mutex_lock(&b->mu);
            if (st->record) rs->wait += rt_now() - t0;
            continue; /* look again: the message may be another one */
        }
        if (!have_deadline) {
            have_deadline = 1;
            timed = rt_deadline(st, &until);
            started = rt_now();
        }
        int w = timed ? pthread_cond_timedwait(&b->cv, &b->mu, &until) : pthread_cond_wait(&b->cv, &b->mu);
        if (st->record) rs->wait += rt_now() - t0;
        if (w == ETIMEDOUT) {
            pthread_mutex_unlock(&b->mu);
            char ib[400];
            rt_fail(
                rs, MPMD_ERR_RUNTIME,
                "waited %.3f s for %s from rank %d, which has not sent it: that rank is stuck or slower than "
                "the watchdog allows (step_timeout)",
                rt_now() - started, rt_instr_str(st, rs->rank, slot, ib, sizeof ib), peer);
            return 1;
        }
    }
}

static int local_send(mpmd_rank_state *rs, int slot, const void *buf, size_t bytes, int peer, int tag) {
    (void)bytes; /* the receiver copies as many as it expects */
    struct mpmd_step *st = rs->st;
    mailbox *own = rs->tx;
    msg *m = &own->out[slot];
    m->src = rs->rank, m->tag = tag, m->buf = buf;
    m->sent = st->record ? rt_now() : 0;
    m->ev = st->plan->be->queue.event_record(rs->dev); /* the receiver waits for the kernels that wrote buf */
    /* the peer pipeline rank of the same lane (replica and model rank) */
    mailbox *dst = st->rs[rs->lane * st->plan->num_ranks + peer].tx;
    pthread_mutex_lock(&dst->mu);
    m->next = NULL;
    msg **pp = &dst->inbox;
    while (*pp)
        pp = &(*pp)->next;
    *pp = m;
    atomic_fetch_add_explicit(&dst->posted, 1, memory_order_relaxed);
    pthread_cond_broadcast(&dst->cv);
    pthread_mutex_unlock(&dst->mu);
    return 0;
}

/* Wait until every member of the group (the replicas of a pipeline rank,
 * or its model ranks) has reached the barrier (or a rank failed: returns
 * 1); `what` they meet for, for the watchdog's message. */
static int group_meet(mpmd_rank_state *rs, group *gr, const char *what) {
    struct mpmd_step *st = rs->st;
    pthread_mutex_lock(&gr->mu);
    unsigned gen = gr->generation;
    if (++gr->arrived == gr->size) {
        gr->arrived = 0;
        gr->generation++;
        pthread_cond_broadcast(&gr->cv);
    } else {
        struct timespec until;
        int timed = rt_deadline(st, &until), late = 0;
        double started = rt_now();
        while (gen == gr->generation && !rt_aborted(st) && !late)
            late = (timed ? pthread_cond_timedwait(&gr->cv, &gr->mu, &until)
                          : pthread_cond_wait(&gr->cv, &gr->mu)) == ETIMEDOUT;
        if (late && gen == gr->generation) {
            pthread_mutex_unlock(&gr->mu);
            rt_fail(rs, MPMD_ERR_RUNTIME,
                    "waited %.3f s for the other %s of rank %d to %s: one is stuck or slower than the "
                    "watchdog allows (step_timeout)",
                    rt_now() - started, gr->who, rs->rank, what);
            return 1;
        }
    }
    pthread_mutex_unlock(&gr->mu);
    return rt_aborted(st);
}

static int group_barrier(mpmd_rank_state *rs, group *gr) {
    return group_meet(rs, gr, "combine the loop results");
}

/* The replicas of one pipeline rank combine a loop result: every replica
 * computes the same sum, in replica order, so all copies have equal bits;
 * elements lo .. lo + count - 1 of it (all of it, or FSDP's shard). */
static int group_combine(mpmd_rank_state *rs, int node, const void *in, void *out, int64_t lo,
                         int64_t count) {
    struct mpmd_step *st = rs->st;
    group *gr = data_group(rs);
    const int R = st->plan->replicas;
    const size_t es = mpmd_dtype_size(st->plan->g->nodes[node].type.dtype);
    char e[512];
    void **part = ((mailbox *)rs->tx)->part;
    gr->bufs[rs->replica] = (void *)in;
    /* every replica's buffer is complete before any replica reads it */
    if (st->plan->be->queue.sync(rs->dev, e, sizeof e)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%s", e);
        return 1;
    }
    if (group_barrier(rs, gr)) return 1;
    for (int d = 0; d < R; d++)
        part[d] = (char *)gr->bufs[d] + (size_t)lo * es;
    int bad =
        st->plan->be->kernels.combine(rs->dev, st->plan->g, &st->plan->g->nodes[node], part, R, out, count) ||
        st->plan->be->queue.sync(rs->dev, e, sizeof e);
    if (bad) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "combining %%%d across replicas failed", node);
        group_barrier(rs, gr);
        return 1;
    }
    if (mpmd_sharded(&st->plan->mesh, node)) /* a reduce-scatter: this replica took the others' parts */
        rs->coll_bytes += (int64_t)((size_t)(R - 1) * (size_t)count * es);
    return group_barrier(rs, gr); /* all have read every buffer */
}

static int local_allreduce(mpmd_rank_state *rs, int node, const void *in, void *out) {
    return group_combine(rs, node, in, out, 0, mpmd_type_numel(&rs->st->plan->g->nodes[node].type));
}

static int local_reduce_scatter(mpmd_rank_state *rs, int node, const void *in, void *out) {
    int64_t lo, count;
    mpmd_shard_part(&rs->st->plan->mesh, node, rs->replica, &lo, &count);
    return group_combine(rs, node, in, out, lo, count);
}

/* Every replica's shards are complete (their updates synced) once all have
 * met; each replica then copies them all, finding the others' shards in
 * the group (each puts its list there before the meeting). Nobody writes a
 * shard again before every replica has met after its last gather (the loop
 * results' reduce-scatter precedes the updates: shard.c), so one meeting
 * does; the lists alternate between two banks, so a replica that runs on
 * to its next gather writes the bank nobody reads. */
static int local_allgather(mpmd_rank_state *rs, int slot, int n, const int32_t *nodes,
                           const void *const *mine, void *const *out) {
    (void)slot;
    struct mpmd_step *st = rs->st;
    group *gr = data_group(rs);
    mailbox *b = rs->tx;
    const int R = st->plan->replicas;
    const void **bank = gr->shards + (size_t)(b->gathers++ & 1) * (size_t)R * (size_t)gr->most;
    memcpy(bank + (size_t)rs->replica * (size_t)gr->most, mine, (size_t)n * sizeof *mine);
    char e[512];
    if (st->plan->be->queue.sync(rs->dev, e, sizeof e)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%s", e);
        return 1;
    }
    double t0 = st->record ? rt_now() : 0;
    if (group_meet(rs, gr, "gather the parameters of a task (FSDP)")) return 1;
    if (st->record) rs->wait += rt_now() - t0;
    for (int q = 0; q < n; q++) {
        const size_t bytes = mpmd_held_bytes(&st->plan->mesh, nodes[q]);
        for (int d = 0; d < R; d++) {
            const void *shard = bank[(size_t)d * (size_t)gr->most + (size_t)q];
            if (st->plan->be->queue.copy(rs->dev, (char *)out[q] + (size_t)d * bytes, shard, bytes)) {
                rt_fail(rs, MPMD_ERR_RUNTIME, "gathering %%%d from replica %d failed", nodes[q], d);
                return 1;
            }
        }
        rs->coll_bytes += (int64_t)((size_t)(R - 1) * bytes);
        rs->gath_bytes += (int64_t)((size_t)(R - 1) * bytes);
    }
    return 0;
}

/* The model ranks of this rank and replica meet with their inputs
 * (complete: each synced its queue); each computes its result from all of
 * them with its backend's model_combine; they meet again before any input
 * may change. */
static int local_model_collective(mpmd_rank_state *rs, int node, const void *in, void *out,
                                  const char *where) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    group *gr = model_group(rs);
    char e[512];
    gr->bufs[rs->model] = (void *)in;
    if (st->plan->be->queue.sync(rs->dev, e, sizeof e)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%s", e);
        return 1;
    }
    char what[160];
    snprintf(what, sizeof what, "run %%%d = %s%s", node, g->nodes[node].op->name, where);
    double t0 = st->record ? rt_now() : 0;
    if (group_meet(rs, gr, what)) return 1;
    if (st->record) rs->wait += rt_now() - t0;
    /* each rank's combine reads every rank's input (a device backend's
     * buffers: in-process model ranks share the device), then waits for it */
    int bad = st->plan->be->kernels.model_combine(rs->dev, g, node, rs->model, st->plan->model,
                                                  (const void *const *)gr->bufs, out, e, sizeof e) ||
              st->plan->be->queue.sync(rs->dev, e, sizeof e);
    if (bad) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = %s%s: %s", node, g->nodes[node].op->name, where, e);
        group_meet(rs, gr, what);
        return 1;
    }
    return group_meet(rs, gr, what); /* all have read every input */
}

/* Every rank state of the step meets with its words; each adds them all
 * (integers: any order gives the same sum); they meet again before any
 * may change its words. */
static int local_mesh_sum(mpmd_rank_state *rs, uint32_t *acc, int n) {
    struct mpmd_step *st = rs->st;
    local_state *ls = st->tx;
    group *gr = &ls->groups[ls->ngroups - 1];
    uint32_t sum[64];
    if (n > 64) {
        rt_fail(rs, MPMD_ERR_INVALID, "a sum over the mesh of %d words (at most 64)", n);
        return 1;
    }
    gr->bufs[rs - st->rs] = acc;
    double t0 = st->record ? rt_now() : 0;
    if (group_meet(rs, gr, "sum a global norm")) return 1;
    if (st->record) rs->wait += rt_now() - t0;
    memset(sum, 0, (size_t)n * sizeof *sum);
    for (int li = 0; li < gr->size; li++)
        for (int k = 0; k < n; k++)
            sum[k] += ((const uint32_t *)gr->bufs[li])[k];
    if (group_meet(rs, gr, "sum a global norm")) return 1; /* all have read every acc */
    memcpy(acc, sum, (size_t)n * sizeof *sum);
    return 0;
}

/* Messages a failed step left in the mailbox are dropped. */
static void local_end_step(mpmd_rank_state *rs) {
    struct mpmd_step *st = rs->st;
    mailbox *b = rs->tx;
    pthread_mutex_lock(&b->mu);
    while (b->inbox) {
        msg *m = b->inbox;
        b->inbox = m->next;
        if (m->ev) st->plan->be->queue.event_free(rs->dev, m->ev);
    }
    pthread_mutex_unlock(&b->mu);
}

/* The rank threads of a run the watchdog cut short have stopped (the
 * launcher's settle): drop what they left in the mailboxes. */
static int local_settle(struct mpmd_step *st, double wait) {
    (void)wait;
    for (int r = 0; r < st->num_local; r++)
        local_end_step(&st->rs[r]);
    return 1;
}

/* A step that failed may have left replicas counted at a barrier they then
 * left: every group starts the run empty, and every rank's gathers count
 * from 0. */
static void local_start(struct mpmd_step *st) {
    local_state *ls = st->tx;
    for (int li = 0; ls && li < ls->nbox; li++)
        ls->box[li].gathers = 0;
    for (int r = 0; ls && r < ls->ngroups; r++) {
        ls->groups[r].arrived = 0;
        for (int d = 0; d < ls->groups[r].size; d++)
            ls->groups[r].bufs[d] = NULL;
    }
}

const mpmd_wire mpmd_wire_local = {
    .name = "local",
    .setup = local_setup,
    .teardown = local_teardown,
    .start = local_start,
    .recv_ahead = 0,
    .send = local_send,
    .send_done = NULL, /* the receiver's copy is ordered before the sender learns of it */
    .post_recv = NULL, /* a receive takes its message from the mailbox */
    .recv = local_recv,
    .allreduce = local_allreduce,
    .reduce_scatter = local_reduce_scatter,
    .allgather = local_allgather,
    .post_gather = NULL, /* the replicas meet at the gather */
    .model_collective = local_model_collective,
    .mesh_sum = local_mesh_sum,
    .wake = local_wake,
    .end_step = local_end_step,
    .settle = local_settle,
};
