/* The worker pool of pool.h.
 *
 * Each worker has a word the caller writes to start it (`gen`, the number
 * of the run it is to join) and its own mutex and condition variable to
 * sleep on. A worker that watches its word is started by the store alone; a
 * sleeping one also needs a signal. Whether it sleeps is a flag it sets
 * before its last look at the word, and the caller reads the flag after its
 * store (both sequentially consistent), so at least one of them sees the
 * other: either the worker sees its new run, or the caller sees the flag
 * and signals under the worker's mutex. The caller's wait for the end of a
 * run uses the same pattern with `pending`.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "util/pool.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct worker {
    _Atomic unsigned gen; /* the run to join next */
    _Atomic int sleeping; /* on cv, or about to be */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int index; /* 1 .. n - 1 */
    struct mpmd_pool *pool;
} worker;

struct mpmd_pool {
    int n;                /* threads, the caller included */
    worker *w;            /* w[1 .. n - 1]; w[0] unused */
    int started;          /* workers started (for a failed start) */
    double spin;          /* seconds an idle thread watches; < 0: without limit */
    double budget, score; /* the caller's next watch (next_budget) */
    _Atomic int stop;
    /* the current run, written before the workers' words */
    mpmd_work_fn fn;
    void *ctx;
    int nt, used; /* parts, and threads running them */
    unsigned gen;
    _Atomic int pending;        /* workers of the run not yet finished */
    _Atomic int caller_waiting; /* the caller sleeps on done, or is about to */
    pthread_mutex_t mu;
    pthread_cond_t done;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static double env_us(const char *v, int *set) {
    char *end;
    double us = v && *v ? strtod(v, &end) : 0;
    *set = v && *v && !*end && us >= 0 && us <= 1e7;
    return *set ? us : 0;
}

double mpmd_pool_spin_us(void) {
    int set;
    double us = env_us(getenv("MPMD_POOL_SPIN_US"), &set);
    if (set) return us;
    const char *w = getenv("OMP_WAIT_POLICY");
    if (w && !strcasecmp(w, "passive")) return 0;
    if (w && !strcasecmp(w, "active")) return -1;
    return MPMD_POOL_SPIN_DEFAULT_US;
}

/* Watch for ready(arg) for up to *budget seconds (< 0: without limit);
 * 1 once it holds (or the pool stops), 0 when the time is up first. */
static int watch(const mpmd_pool *p, const double *budget, int (*ready)(const void *), const void *arg) {
    if (*budget == 0) return 0;
    const double until = *budget < 0 ? INFINITY : now() + *budget;
    for (unsigned i = 1;; i++) {
        if (ready(arg) || atomic_load(&p->stop)) return 1;
        relax();
        if (!(i & 63)) {
            if (now() >= until) return 0;
            /* a thread that is runnable on this core (another process's,
             * or the rank's own thread) gets the core rather than wait for
             * this watch to end: where none is, this returns at once */
            sched_yield();
        }
    }
}

/* A waiter's next watch, from how long its recent waits took: `score` is
 * a running share (weight 1/8 for the newest) of the waits that ended
 * within the pool's watch, that is, that watching would have caught
 * without a sleep. The waiter watches while at least 3 in 4 of them did;
 * otherwise the work comes later than a watch lasts, or the thread that
 * brings it does not get a core (another process or rank holds it), and
 * watching would only take the core from busy work. The score goes on
 * counting while the waiter sleeps at once, so watching resumes when waits
 * become short again. */
static void next_budget(const mpmd_pool *p, double *budget, double *score, double waited) {
    if (p->spin <= 0) return; /* no watch, or one without limit: fixed */
    *score = *score * 0.875 + (waited <= p->spin ? 0.125 : 0.0);
    *budget = *score >= 0.75 ? p->spin : 0;
}

typedef struct {
    worker *w;
    unsigned seen;
} gen_watch;

static int new_run(const void *arg) {
    const gen_watch *g = arg;
    return atomic_load(&g->w->gen) != g->seen;
}

static int run_done(const void *arg) { return atomic_load(&((mpmd_pool *)arg)->pending) == 0; }

static void *worker_main(void *arg) {
    worker *w = arg;
    mpmd_pool *p = w->pool;
    unsigned seen = 0;
    double budget = p->spin, score = 1;
    for (;;) {
        const double t0 = now();
        if (!watch(p, &budget, new_run, &(gen_watch){w, seen})) {
            atomic_store(&w->sleeping, 1);
            pthread_mutex_lock(&w->mu);
            while (atomic_load(&w->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
            atomic_store(&w->sleeping, 0);
        }
        if (atomic_load(&p->stop)) return NULL;
        next_budget(p, &budget, &score, now() - t0);
        seen = atomic_load(&w->gen);
        for (int t = w->index; t < p->nt; t += p->used)
            p->fn(p->ctx, t, p->nt);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

mpmd_pool *mpmd_pool_new(int threads, char *err, size_t len) {
    mpmd_pool *p = calloc(1, sizeof *p);
    if (p) p->w = calloc((size_t)(threads > 1 ? threads : 1), sizeof *p->w);
    if (!p || !p->w) {
        free(p);
        snprintf(err, len, "out of memory for a pool of %d threads", threads);
        return NULL;
    }
    p->n = threads > 1 ? threads : 1;
    p->spin = mpmd_pool_spin_us() * 1e-6;
    p->budget = p->spin;
    p->score = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->done, NULL);
    /* Workers take no signals: they go to the program's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = 0;
    for (int i = 1; i < p->n && !e; i++) {
        worker *w = &p->w[i];
        w->index = i;
        w->pool = p;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (!(e = pthread_create(&w->th, NULL, worker_main, w))) {
            p->started = i;
#ifdef __GLIBC__
            pthread_setname_np(w->th, "mpmd-worker");
#endif
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        snprintf(err, len, "could not start worker thread %d of %d: %s", p->started + 1, p->n - 1,
                 strerror(e));
        mpmd_pool_free(p);
        return NULL;
    }
    return p;
}

void mpmd_pool_free(mpmd_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    for (int i = 1; i <= p->started; i++) {
        pthread_mutex_lock(&p->w[i].mu);
        pthread_cond_signal(&p->w[i].cv);
        pthread_mutex_unlock(&p->w[i].mu);
    }
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->w[i].th, NULL);
    for (int i = 1; i < p->n; i++) {
        pthread_mutex_destroy(&p->w[i].mu);
        pthread_cond_destroy(&p->w[i].cv);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->done);
    free(p->w);
    free(p);
}

int mpmd_pool_threads(const mpmd_pool *p) { return p ? p->n : 1; }

void mpmd_pool_run(mpmd_pool *p, int nt, mpmd_work_fn fn, void *ctx) {
    if (!p || p->n <= 1 || nt <= 1) {
        for (int t = 0; t < nt; t++)
            fn(ctx, t, nt);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->nt = nt;
    p->used = nt < p->n ? nt : p->n;
    atomic_store(&p->pending, p->used - 1);
    p->gen++;
    for (int i = 1; i < p->used; i++) {
        worker *w = &p->w[i];
        atomic_store(&w->gen, p->gen);
        if (atomic_load(&w->sleeping)) {
            pthread_mutex_lock(&w->mu);
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
    }
    for (int t = 0; t < nt; t += p->used)
        fn(ctx, t, nt);
    const double t0 = now();
    if (!watch(p, &p->budget, run_done, p)) {
        atomic_store(&p->caller_waiting, 1);
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) != 0)
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
        atomic_store(&p->caller_waiting, 0);
    }
    next_budget(p, &p->budget, &p->score, now() - t0);
}

/* ---- cores ------------------------------------------------------------------ */

/* A cgroup's CPU quota in cores (rounded up), or 0 when there is none:
 * cgroup v2's cpu.max ("max 100000" or "QUOTA PERIOD"), else v1's
 * cfs_quota_us and cfs_period_us. */
static int quota_cores(void) {
    long long q = 0, per = 0;
    char word[32];
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        int ok = fscanf(f, "%31s %lld", word, &per) == 2;
        fclose(f);
        if (!ok || !strcmp(word, "max")) return 0;
        q = strtoll(word, NULL, 10);
    } else {
        if (!(f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) return 0;
        int ok = fscanf(f, "%lld", &q) == 1;
        fclose(f);
        if (!ok || q <= 0 || !(f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) return 0;
        ok = fscanf(f, "%lld", &per) == 1;
        fclose(f);
        if (!ok) return 0;
    }
    return q > 0 && per > 0 ? (int)((q + per - 1) / per) : 0;
}

int mpmd_cores_why(char *why, size_t len) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = online > 0 ? (int)online : 1;
    const char *what = "online CPUs";
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    int ncpu = conf > cores ? (int)conf : cores;
    if (ncpu < 1024) ncpu = 1024;
    cpu_set_t *set = CPU_ALLOC(ncpu);
    size_t size = CPU_ALLOC_SIZE(ncpu);
    if (set && !sched_getaffinity(0, size, set)) {
        int in_set = CPU_COUNT_S(size, set);
        if (in_set > 0 && in_set < cores) cores = in_set, what = "CPUs in this process's affinity mask";
    }
    if (set) CPU_FREE(set);
    int quota = quota_cores();
    if (quota > 0 && quota < cores) cores = quota, what = "cores of this process's cgroup CPU quota";
    if (why && len) snprintf(why, len, "%d %s", cores, what);
    return cores;
}

int mpmd_cores_available(void) { return mpmd_cores_why(NULL, 0); }
