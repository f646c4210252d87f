#define _GNU_SOURCE /* pthread_timedjoin_np, pthread_tryjoin_np */
/* The launchers (launcher.h): which one a runtime kind has, the questions
 * the rest of mpmd asks about a step's points, and the in-process
 * launcher, which runs every point of the mesh as a thread of this
 * process. The MPI launcher is launch_mpi.c. */
#include "runtime/launcher.h"

#include <stdlib.h>
#include <string.h>

#ifdef MPMD_HAVE_MPI
extern const mpmd_launcher mpmd_launcher_mpi; /* launch_mpi.c */
#endif
static const mpmd_launcher launcher_threads;

/* ---- the launchers by runtime kind ---------------------------------------- */

const mpmd_launcher *mpmd_launcher_for(int runtime) {
    if (runtime == MPMD_RUNTIME_LOCAL) return &launcher_threads;
#ifdef MPMD_HAVE_MPI
    if (runtime == MPMD_RUNTIME_MPI) return &mpmd_launcher_mpi;
#endif
    return NULL;
}

mpmd_status mpmd_launcher_check(int runtime, mpmd_error *err) {
    if (mpmd_launcher_for(runtime)) return MPMD_OK;
    if (runtime == MPMD_RUNTIME_MPI)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "this build of mpmd has no MPI runtime (install libopenmpi-dev and "
                              "openmpi-bin, then rebuild)");
    return mpmd_error_set(err, MPMD_ERR_INVALID, "unknown runtime %d", runtime);
}

int mpmd_launcher_recv_ahead(int runtime) {
    const mpmd_launcher *la = mpmd_launcher_for(runtime);
    return la ? la->wire->recv_ahead : 2; /* a build without MPI plans MPI's two tasks ahead */
}

/* ---- what the rest of mpmd asks --------------------------------------------- */

int rt_whole(const struct mpmd_step *st) { return st->la->whole; }
mpmd_point rt_here(const struct mpmd_step *st) { return st->here; }
int rt_writer(const struct mpmd_step *st) { return !st->la->writer || st->la->writer(); }

/* ---- the in-process launcher: a thread per point ---------------------------
 * The threads of a run are started by launch and joined before it
 * returns; their handles live in an array made at set-up. A rank that
 * fails wakes the others (the wire's wake); one stuck in a kernel never
 * returns: after a failure the launch waits for each at most the
 * watchdog's time, then leaves the step broken (the threads it still has
 * are joined by settle) rather than hang the caller. */

typedef struct {
    pthread_t *th;    /* [num_local]: the run's threads */
    pthread_t *stuck; /* [num_local]: of them, those the watchdog gave up waiting for */
    int nstuck;
} threads_state;

static mpmd_status threads_place(int D, int R, int M, mpmd_point *here, mpmd_error *err) {
    (void)D, (void)R, (void)M, (void)err;
    *here = (mpmd_point){0, 0, 0};
    return MPMD_OK;
}

static int threads_layout(const struct mpmd_step *st, int *first) {
    *first = 0;
    return st->plan->num_ranks * st->plan->replicas * st->plan->model;
}

static mpmd_status threads_setup(struct mpmd_step *st, mpmd_error *err) {
    threads_state *ts = calloc(1, sizeof *ts);
    const size_t n = (size_t)(st->num_local > 0 ? st->num_local : 1);
    if (ts) st->lx = ts;
    if (!ts || !(ts->th = calloc(n, sizeof *ts->th)) || !(ts->stuck = calloc(n, sizeof *ts->stuck)))
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory setting up %d rank threads", st->num_local);
    return MPMD_OK;
}

static void threads_teardown(struct mpmd_step *st) {
    threads_state *ts = st->lx;
    if (!ts) return;
    free(ts->th), free(ts->stuck), free(ts);
    st->lx = NULL;
}

static mpmd_status threads_launch(struct mpmd_step *st, void *(*rank_main)(void *)) {
    const int L = st->num_local;
    threads_state *ts = st->lx;
    pthread_t *th = ts->th;
    for (int r = 0; r < L; r++) { /* progress from now on: a thread slow to start is not stuck */
        st->rs[r].status = MPMD_OK;
        __atomic_store_n(&st->rs[r].progress_us, (int64_t)(1e6 * rt_now()), __ATOMIC_RELAXED);
        __atomic_store_n(&st->rs[r].at, 0, __ATOMIC_RELAXED);
    }
    int started = 0;
    for (int r = 0; r < L; r++) {
        if (pthread_create(&th[r], NULL, rank_main, &st->rs[r]) != 0) {
            rt_fail(&st->rs[r], MPMD_ERR_RUNTIME, "could not start the thread of rank %d", st->rs[r].rank);
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        if (st->wait_limit <= 0) {
            pthread_join(th[r], NULL);
            continue;
        }
        for (;;) {
            struct timespec soon;
            rt_time_after(0.01, &soon);
            if (pthread_timedjoin_np(th[r], NULL, &soon) == 0) break;
            /* a lone rank waits on no peer, so no wait of its own runs out:
             * the watchdog watches its progress instead (a kernel that never
             * returns: OpenBLAS retrying an allocation the address-space
             * limit refuses, say) */
            const mpmd_rank_state *rs = &st->rs[r];
            const double since =
                rt_now() - 1e-6 * (double)__atomic_load_n(&rs->progress_us, __ATOMIC_RELAXED);
            if (L == 1 && !rt_aborted(st) && since > st->wait_limit) {
                char ib[400];
                rt_instr_str(st, rs->rank, __atomic_load_n(&rs->at, __ATOMIC_RELAXED), ib, sizeof ib);
                rt_fail(
                    &st->rs[r], MPMD_ERR_RUNTIME,
                    "%s has run for %.3g s without finishing: a kernel stuck, or slower than the watchdog "
                    "allows (step_timeout)",
                    ib, since);
            }
            if (rt_aborted(st) && rt_now() - st->abort_time > st->wait_limit) {
                /* kept, to be joined when they end (threads_settle) */
                memcpy(ts->stuck, th + r, (size_t)(started - r) * sizeof *th);
                ts->nstuck = started - r;
                st->broken = 1;
                size_t n = strlen(st->err);
                snprintf(st->err + n, sizeof st->err - n,
                         "; rank %d did not stop within %.3g s after that (stuck in a kernel?): the step "
                         "cannot run "
                         "again until it does",
                         st->rs[r].rank, st->wait_limit);
                return MPMD_ERR_RUNTIME;
            }
        }
    }
    return MPMD_OK;
}

static int threads_settle(struct mpmd_step *st, double wait) {
    threads_state *ts = st->lx;
    struct timespec until;
    rt_time_after(wait, &until);
    int left = 0;
    for (int i = 0; i < ts->nstuck; i++)
        if ((wait > 0 ? pthread_timedjoin_np(ts->stuck[i], NULL, &until)
                      : pthread_tryjoin_np(ts->stuck[i], NULL)) != 0)
            ts->stuck[left++] = ts->stuck[i];
    ts->nstuck = left;
    return left == 0;
}

/* Every point is here: a download from that rank's backend. */
static mpmd_status threads_fetch(struct mpmd_step *st, int rank, int replica, int node, void *dst,
                                 size_t bytes) {
    return mpmd_runtime_read(st, rank, replica, node, dst, bytes);
}

static const mpmd_launcher launcher_threads = {
    .name = "threads",
    .wire = &mpmd_wire_local,
    .whole = 1,
    .place = threads_place,
    .layout = threads_layout,
    .setup = threads_setup,
    .teardown = threads_teardown,
    .launch = threads_launch,
    .launch_threads = 1,
    .settle = threads_settle,
    .fetch = threads_fetch,
    .agree = NULL, /* one process */
    .procs = NULL,
    .writer = NULL,
    .local_procs = NULL,
};
