/* One thread at a time per step: while one thread runs a step, another
 * thread's run, input, read, write, save, snapshot and load of that step
 * fail at once (well inside the first run's time: no deadlock until the
 * watchdog), with a message that thread reads from mpmd_step_error, while
 * the first run finishes with its own result; afterwards the second thread
 * uses the step normally. Two steps run from two threads at once. */
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

enum { M = 4096, K = 1024, N = 2048 };

static void nap(long us) {
    struct timespec t = {0, us * 1000L};
    nanosleep(&t, NULL);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    mpmd_graph *g;
    mpmd_value x, total, w;
} model;

/* a step of one large product per microbatch (tenths of a second) */
static model build(void) {
    model m;
    m.g = mpmd_graph_new();
    m.x = mpmd_input(m.g, "x", MPMD_F32, MPMD_SHAPE(2 * M, K));
    m.w = mpmd_param(m.g, "w", MPMD_SHAPE(K, N), MPMD_NORMAL(0.01f));
    mpmd_loop_begin(m.g, 2);
    mpmd_value h = mpmd_matmul(m.g, mpmd_microbatch(m.g, m.x), m.w, 0);
    mpmd_value l = mpmd_mean(m.g, mpmd_square(m.g, h), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    m.total = mpmd_loop_reduce(m.g, l, MPMD_REDUCE_ADD);
    mpmd_loop_end(m.g);
    mpmd_keep(m.g, m.total);
    return m;
}

typedef struct {
    mpmd_step *st;
    mpmd_status rc;
    double t0, t1;
    volatile int started;
} runner;

static void *run_it(void *arg) {
    runner *r = arg;
    r->t0 = now();
    r->started = 1;
    r->rc = mpmd_step_run(r->st);
    r->t1 = now();
    return NULL;
}

int main(void) {
    model m = build();
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err), *other = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    CHECK(st && other, "%s", err.msg);
    float *x = malloc(sizeof(float) * 2 * M * K);
    tu_fill(x, 2 * M * K, 3);
    CHECK(!mpmd_step_set_input(st, m.x, x, sizeof(float) * 2 * M * K) &&
              !mpmd_step_set_input(other, m.x, x, sizeof(float) * 2 * M * K),
          "%s", mpmd_step_error(st));
    /* a run alone, for its time and result */
    double t = now();
    CHECK(mpmd_step_run(st) == MPMD_OK, "%s", mpmd_step_error(st));
    const double alone = now() - t;
    float want, got = 0;
    mpmd_step_read(st, m.total, &want, sizeof want);

    runner r = {st, MPMD_OK, 0, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, run_it, &r);
    while (!r.started)
        nap(100);
    nap(20000); /* inside its run */
    double t0 = now();
    mpmd_status rc_run = mpmd_step_run(st);
    char msg[1100];
    snprintf(msg, sizeof msg, "%s", mpmd_step_error(st));
    mpmd_status rc_read = mpmd_step_read(st, m.total, &got, sizeof got);
    mpmd_status rc_in = mpmd_step_set_input(st, m.x, x, sizeof(float) * 2 * M * K);
    float w0 = 0;
    mpmd_status rc_write = mpmd_step_write(st, m.w, &w0, sizeof w0);
    mpmd_status rc_save = mpmd_step_save(st, "/nonexistent/x.safetensors", NULL, &err);
    char save_msg[1100];
    snprintf(save_msg, sizeof save_msg, "%s", err.msg);
    mpmd_checkpoint_snapshot *snap = NULL;
    mpmd_status rc_snap = mpmd_step_snapshot(st, NULL, &snap, &err);
    char snap_msg[1100];
    snprintf(snap_msg, sizeof snap_msg, "%s", err.msg);
    const double refused_in = now() - t0;
    /* another step, from this thread, while the first runs */
    mpmd_status rc_other = mpmd_step_run(other);
    pthread_join(th, NULL);
    printf("a run takes %.3f s alone; while one ran, this thread's calls were refused in %.6f s: %s\n", alone,
           refused_in, msg);
    CHECK(rc_run == MPMD_ERR_INVALID && strstr(msg, "mpmd_step_run: the step is in use by another thread") &&
              strstr(msg, "one thread at a time"),
          "a second run meanwhile: %d, %s", (int)rc_run, msg);
    CHECK(rc_read == MPMD_ERR_INVALID && rc_in == MPMD_ERR_INVALID && rc_write == MPMD_ERR_INVALID,
          "a read, input or write meanwhile: %d %d %d", (int)rc_read, (int)rc_in, (int)rc_write);
    CHECK(rc_save == MPMD_ERR_INVALID &&
              strstr(save_msg, "mpmd_step_save: the step is in use by another thread"),
          "a save meanwhile: %d, %s", (int)rc_save, save_msg);
    CHECK(rc_snap == MPMD_ERR_INVALID && !snap &&
              strstr(snap_msg, "mpmd_step_snapshot: the step is in use by another thread"),
          "a snapshot meanwhile: %d, %s", (int)rc_snap, snap_msg);
    mpmd_checkpoint_snapshot_free(snap);
    CHECK(r.t1 > t0 + refused_in, "the first run ended before the refusals: the test did not overlap them");
    CHECK(refused_in < 0.5 * alone, "the refusals took %.3f s of a %.3f s run: not at once", refused_in,
          alone);
    CHECK(r.rc == MPMD_OK, "the first run failed (%d)", (int)r.rc);
    CHECK(rc_other == MPMD_OK, "another step meanwhile: %s", mpmd_step_error(other));
    /* afterwards: this thread's error is its own again, and the step works */
    CHECK(mpmd_step_read(st, m.total, &got, sizeof got) == MPMD_OK && got == want,
          "after the run: %s, loss %.9g vs %.9g", mpmd_step_error(st), got, want);
    CHECK(!strstr(mpmd_step_error(st), "in use by another thread"), "a stale refusal: %s",
          mpmd_step_error(st));
    mpmd_step_free(st), mpmd_step_free(other);
    mpmd_graph_free(m.g);
    free(x);
    return tu_report("test_step_threads");
}
