/* Setting up the rank states of this process: how many kernel threads
 * each runs (the process's thread budget), their backends, arenas, value
 * tables, storage and inputs, then the wire's and the launcher's state
 * (mpmd_runtime_init); and copying a changed input to the ranks that read
 * it. Everything a run uses is allocated here, once. */
#include "runtime/launcher.h"
#include "util/pool.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the thread budget ---------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int release;
} probe;

static void *probe_wait(void *arg) {
    probe *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->release)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* How many of `want` threads this process can have at once (want when all
 * of them): each started and kept waiting until the last, then released.
 * When one cannot be started, why says so (strerror). */
static int threads_available(int want, char *why, size_t n) {
    probe p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t *th = malloc((size_t)want * sizeof *th);
    if (!th) {
        snprintf(why, n, "out of memory");
        return 0;
    }
    int got = 0, e = 0; /* default attributes: as the rank and OpenMP threads get */
    while (got < want && !(e = pthread_create(&th[got], NULL, probe_wait, &p)))
        got++;
    if (e) snprintf(why, n, "%s", strerror(e));
    pthread_mutex_lock(&p.mu);
    p.release = 1;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < got; i++)
        pthread_join(th[i], NULL);
    free(th);
    return got;
}

/* ---- set-up and a step ---------------------------------------------------- */

/* Kernel threads per rank: as asked, or the cores this process may use
 * divided among its ranks, so that the ranks' threads never outnumber the
 * cores whatever the caller's environment. Under MPI, processes of one job
 * on one machine that all see every core share them (a launcher that
 * binds each process to its own cores has divided them already). The
 * reason goes to st->threads_why for the run summary. */
static int threads_per_rank(struct mpmd_step *st) {
    char cores_why[96];
    int cores = mpmd_cores_why(cores_why, sizeof cores_why), share = 1;
    const int local = st->la->local_procs ? st->la->local_procs() : 0;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (local > 1 && cores == online) share = local;
    const int n = st->num_local, avail = cores / share > 0 ? cores / share : 1;
    if (st->threads_per_rank > 0) {
        const int over = st->threads_per_rank * n > avail;
        snprintf(st->threads_why, sizeof st->threads_why, "threads_per_rank = %d as asked%s%s%s",
                 st->threads_per_rank, over ? "; more threads than the " : "", over ? cores_why : "",
                 over ? " (oversubscribed)" : "");
        return st->threads_per_rank;
    }
    const int tpr = avail / n > 0 ? avail / n : 1;
    if (share > 1)
        snprintf(st->threads_why, sizeof st->threads_why,
                 "%s, shared by %d processes on this machine, / %d rank%s in this process", cores_why, share,
                 n, n == 1 ? "" : "s");
    else
        snprintf(st->threads_why, sizeof st->threads_why, "%s / %d rank%s in this process%s", cores_why, n,
                 n == 1 ? "" : "s", n > avail ? ": more ranks than cores, one thread each" : "");
    return tpr;
}

/* Rank rs's buffer of parameter, variable or constant i, holding its
 * initial value: the whole value, (tensor parallel) this model rank's part
 * of it, or (FSDP) this replica's shard. 0, 1: out of memory, 2: the
 * backend failed. */
static int place_leaf(mpmd_rank_state *rs, int i) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    const mpmd_node *nd = &g->nodes[i];
    size_t b = rt_bytes(g, i), hb = mpmd_held_bytes(&st->plan->mesh, i);
    void *p = st->plan->be->queue.alloc(rs->dev, hb + MPMD_STORAGE_PAD);
    if (!p) return 1;
    rs->glob[i] = p;
    int axis, groups;
    const int split = mpmd_split_of(g, i, &axis, &groups);
    if (st->plan->be->host_memory && hb == b && !split) {
        mpmd_leaf_initial_value(nd, p, st->seed);
        return 0;
    }
    void *host = malloc(b + hb + 1);
    if (!host) return 1;
    if (split) { /* the whole value, initialised as if unsplit, then this rank's part */
        mpmd_node whole = *nd;
        whole.type = mpmd_split_whole_type(g, i);
        void *w = malloc(mpmd_type_bytes(&whole.type) + 1);
        if (!w) {
            free(host);
            return 1;
        }
        mpmd_leaf_initial_value(&whole, w, st->seed);
        mpmd_split_copy(g, i, rs->model, w, host, 0);
        free(w);
    } else {
        mpmd_leaf_initial_value(nd, host, st->seed);
    }
    const void *src = host;
    if (hb != b) {
        int64_t lo, cnt;
        size_t es = mpmd_dtype_size(nd->type.dtype);
        mpmd_shard_part(&st->plan->mesh, i, rs->replica, &lo, &cnt);
        memset((char *)host + b, 0, hb);
        memcpy((char *)host + b, (char *)host + (size_t)lo * es, (size_t)cnt * es);
        src = (char *)host + b;
    }
    int bad = st->plan->be->queue.upload(rs->dev, p, src, hb);
    free(host);
    return bad ? 2 : 0;
}

/* Rank rs's view of input i: its replica's share of the host copy, read in
 * place on a host backend, else a buffer of its own. 0, 1: out of memory,
 * 2: the backend failed. */
static int place_input(mpmd_rank_state *rs, int i) {
    struct mpmd_step *st = rs->st;
    const size_t b = rt_bytes(st->plan->g, i);
    char *share = (char *)st->inputs[i] + (size_t)rs->replica * b;
    if (st->plan->be->host_memory) {
        rs->glob[i] = share;
        return 0;
    }
    if (!(rs->glob[i] = st->plan->be->queue.alloc(rs->dev, b + MPMD_STORAGE_PAD))) return 1;
    return st->plan->be->queue.upload(rs->dev, rs->glob[i], share, b) ? 2 : 0;
}

mpmd_status mpmd_runtime_init(struct mpmd_step *st, mpmd_error *err) {
    const mpmd_graph *g = st->plan->g;
    const int nn = g->n_nodes, D = st->plan->num_ranks, n = st->plan->num_micro;
    /* the rank states of this process: world indices first .. first + num_local - 1 */
    int first = 0;
    st->num_local = st->la->layout(st, &first);
    st->rs = calloc((size_t)st->num_local, sizeof *st->rs);
    st->inputs = calloc((size_t)nn + 1, sizeof *st->inputs);
    st->input_set = calloc((size_t)nn + 1, 1);
    if (!st->rs || !st->inputs || !st->input_set) goto nomem;
    pthread_mutex_init(&st->abort_mu, NULL);
    st->mutex_ready = 1;
    /* inputs: one host share per replica, replica d at d * size; a host
     * backend's ranks read it in place, others get a copy each. Only a
     * process with a rank that reads the input holds it. */
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].op == &mpmd_op_input) {
            int here = 0;
            for (int li = 0; li < st->num_local && !here; li++)
                here = mpmd_runs_on(st->plan, i, (first + li) % D);
            if (!here) continue;
            if (!(st->inputs[i] = calloc((size_t)st->plan->replicas, rt_bytes(g, i) + 1))) goto nomem;
        }
    int tpr = threads_per_rank(st);
    st->threads = tpr;
    /* OpenMP ends the process when it cannot start a kernel's threads: make
     * sure now that this process may start them all (a rank thread each
     * in-process, and tpr - 1 workers per rank) */
    int want = (st->la->launch_threads ? st->num_local : 0) + st->num_local * (tpr - 1), got;
    char twhy[160];
    if (want > 0 && (got = threads_available(want, twhy, sizeof twhy)) < want)
        return mpmd_error_set(
            err, MPMD_ERR_RUNTIME,
            "the step needs %d more threads (%d rank%s x %d threads per rank) "
            "but this process could start only %d (%s: the limit on processes per user, ulimit "
            "-u, a container's pids limit, or the address-space limit, ulimit -v, leaving no room for "
            "their stacks); lower threads_per_rank or the rank count",
            want, st->num_local, st->num_local == 1 ? "" : "s", tpr, got, twhy);
    for (int li = 0; li < st->num_local; li++) {
        mpmd_rank_state *rs = &st->rs[li];
        rs->rank = (first + li) % D;
        rs->lane = (first + li) / D;
        rs->replica = rs->lane / st->plan->model;
        rs->model = rs->lane % st->plan->model;
        int r = rs->rank;
        rs->st = st;
        rs->nthreads = tpr;
        char why[512];
        if (!(rs->dev = st->plan->be->device.open(r, tpr, why, sizeof why)))
            return mpmd_error_set(err, MPMD_ERR_RUNTIME, "rank %d: %s", r, why);
        st->plan->be->device.enter(rs->dev);
        /* the arena, and every buffer's place in it */
        const mpmd_rank_memory *mem = rs->mem = &st->plan->mem[r];
        rs->val = calloc((size_t)mem->nslots * (n > 0 ? n : 1) + 1, sizeof *rs->val);
        rs->glob = calloc((size_t)nn + 1, sizeof *rs->glob);
        if (!rs->val || !rs->glob) goto nomem;
        if (st->plan->mesh.shard) {
            int most = 0;
            for (int l = 0; l < st->plan->n_gather; l++)
                most = st->plan->gather_n[l] > most ? st->plan->gather_n[l] : most;
            rs->full = calloc((size_t)nn + 1, sizeof *rs->full);
            rs->gather_in = calloc((size_t)most + 1, sizeof *rs->gather_in);
            rs->gather_out = calloc((size_t)most + 1, sizeof *rs->gather_out);
            if (!rs->full || !rs->gather_in || !rs->gather_out) goto nomem;
        }
        if (!(rs->arena = st->plan->be->queue.alloc(rs->dev, mem->arena_bytes ? mem->arena_bytes : 64)))
            goto nomem;
        for (size_t k = 0; k < (size_t)mem->nslots * n; k++)
            if (mem->body_buf[k] >= 0) rs->val[k] = rs->arena + mem->buf[mem->body_buf[k]].off;
        for (int i = 0; i < nn; i++)
            if (mem->val_buf[i] >= 0) rs->glob[i] = rs->arena + mem->buf[mem->val_buf[i]].off;
        for (int i = 0; i < nn; i++) {
            const mpmd_node *nd = &g->nodes[i];
            if (!st->plan->live[i] || !mpmd_runs_on(st->plan, i, r)) continue;
            int bad = mpmd_node_is_storage(nd) || nd->op == &mpmd_op_constant ? place_leaf(rs, i)
                      : nd->op == &mpmd_op_input                              ? place_input(rs, i)
                                                                              : 0;
            if (bad == 1) goto nomem;
            if (bad) goto devfail;
        }
        if (mem->scratch_bytes && !(rs->scratch = st->plan->be->queue.alloc(rs->dev, mem->scratch_bytes)))
            goto nomem;
        /* the operand lists of the widest kernel launch (mpmd_launch_room) */
        int widest = 0;
        for (int i = 0; i < nn; i++)
            if (st->plan->kern[i] && g->nodes[i].n_in > widest) widest = g->nodes[i].n_in;
        if (widest > MPMD_LAUNCH_SMALL) {
            rs->room.cap = widest;
            if (!(rs->room.in = malloc((size_t)widest * sizeof *rs->room.in)) ||
                !(rs->room.ty = malloc((size_t)widest * sizeof *rs->room.ty)) ||
                !(rs->room.flat = malloc((size_t)widest * sizeof *rs->room.flat)))
                goto nomem;
        }
        char e[512];
        if (st->plan->be->queue.sync(rs->dev, e, sizeof e)) goto devfail;
    }
    /* every buffer is allocated: what the backend's libraries still map as
     * the ranks' threads compute (OpenBLAS's work buffers) must fit too */
    char rwhy[512];
    if (st->plan->be->device.room && st->plan->be->device.room(st->num_local * tpr, rwhy, sizeof rwhy))
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s", rwhy);
    mpmd_status rc = st->wire->setup(st, err);
    return rc || !st->la->setup ? rc : st->la->setup(st, err);
nomem:
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory setting up the ranks (%s backend)",
                          st->plan->be->name);
devfail:
    return mpmd_error_set(err, MPMD_ERR_RUNTIME, "the %s backend failed setting up the ranks",
                          st->plan->be->name);
}

mpmd_status mpmd_runtime_input_set(struct mpmd_step *st, int node) {
    if (st->plan->be->host_memory) return MPMD_OK;
    size_t b = rt_bytes(st->plan->g, node);
    for (int li = 0; li < st->num_local; li++) {
        mpmd_rank_state *rs = &st->rs[li];
        if (!rs->glob || !rs->glob[node]) continue;
        st->plan->be->device.enter(rs->dev);
        if (st->plan->be->queue.upload(rs->dev, rs->glob[node],
                                       (char *)st->inputs[node] + (size_t)rs->replica * b, b)) {
            snprintf(st->err, sizeof st->err, "copying input \"%s\" to rank %d on the %s backend failed",
                     st->plan->g->nodes[node].name, rs->rank, st->plan->be->name);
            return MPMD_ERR_RUNTIME;
        }
    }
    return MPMD_OK;
}
