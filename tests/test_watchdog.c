/* The watchdog (mpmd_step_opts.step_timeout) with in-process ranks:
 *
 * - rank 0's first task is one kernel far longer than the deadline (an
 *   8192 x 2048 x 4096 matmul, 137 GFLOP, 0.9 s even at 150 GFLOP/s,
 *   against a 0.2 s watchdog, which leaves rank 0 time to start it on a
 *   loaded machine):
 *   rank 1, waiting for its
 *   activation, fails with a message naming the rank waited on, the value,
 *   the microbatch and the time; the run returns within about the deadline
 *   instead of the task's time, and says that rank 0 did not stop;
 * - while rank 0 is still in its task the step refuses to run, and once it
 *   has ended the step runs again (here: to the same watchdog failure);
 *   freeing it waits for the stuck rank, so nothing leaks (ASan);
 * - a negative step_timeout (no watchdog) and the default train to the
 *   loop's bits. */
#include "runtime/runtime.h"
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>

enum { M = 8192, K = 2048, N = 4096 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static mpmd_graph *slow_first_stage(mpmd_value *x) {
    mpmd_graph *g = mpmd_graph_new();
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2 * M, K));
    mpmd_loop_begin(g, 2);
    mpmd_value h =
        mpmd_matmul(g, mpmd_microbatch(g, *x), mpmd_param(g, "w", MPMD_SHAPE(K, N), MPMD_NORMAL(0.01f)), 0);
    h = mpmd_enter_stage(g, h);
    mpmd_value loss = mpmd_enter_stage(g, mpmd_mean(g, mpmd_square(g, h), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_value ps[1], gs[1];
    int n;
    mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 1, ps, gs, &n);
    (void)total;
    mpmd_sgd(g, n, ps, gs, mpmd_scalar(g, 1e-3f));
    return g;
}

/* a small two-stage MLP: the watchdog off, or at its default, trains to the
 * loop's bits */
static void same_as_loop(double timeout) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(8, 6));
    mpmd_loop_begin(g, 4);
    mpmd_value h =
        mpmd_enter_stage(g, mpmd_tanh(g, mpmd_dense(g, "d0", mpmd_microbatch(g, x), 16, MPMD_BIAS)));
    mpmd_value loss = mpmd_enter_stage(
        g, mpmd_mean(g, mpmd_square(g, mpmd_dense(g, "d1", h, 1, MPMD_BIAS)), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_value ps[4], gs[4];
    int n;
    mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 4, ps, gs, &n);
    mpmd_sgd(g, n, ps, gs, mpmd_scalar(g, 0.1f));
    mpmd_error err;
    mpmd_schedule *s;
    CHECK(mpmd_schedule_for_graph(g, MPMD_SCHED_STD1F1B, 0, 0, &s, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 3, o.step_timeout = timeout;
    mpmd_step *st = mpmd_jit_with_loop(g, s, &o, &err);
    o.step_timeout = 0;
    mpmd_step *lp = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(st && lp, "%s", err.msg);
    float xs[48];
    tu_fill(xs, 48, 5);
    for (int k = 0; k < 3; k++)
        CHECK(mpmd_step_set_input(st, x, xs, sizeof xs) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                  mpmd_step_set_input(lp, x, xs, sizeof xs) == MPMD_OK && mpmd_step_run(lp) == MPMD_OK,
              "step_timeout %g: %s %s", timeout, mpmd_step_error(st), mpmd_step_error(lp));
    float a, b;
    mpmd_step_gather(st, total, &a, sizeof a);
    mpmd_step_gather(lp, total, &b, sizeof b);
    char ha[65], hb[65];
    mpmd_step_params_sha256(st, ha);
    mpmd_step_params_sha256(lp, hb);
    CHECK(a == b && !strcmp(ha, hb), "step_timeout %g: loss %.9g vs the loop's %.9g, parameters %s", timeout,
          a, b, strcmp(ha, hb) ? "differ" : "equal");
    mpmd_step_free(st), mpmd_step_free(lp);
    mpmd_schedule_free(s);
    mpmd_graph_free(g);
}

/* The unpipelined loop has one rank, which waits on no peer: the watchdog
 * watches its progress, so a kernel far longer than step_timeout ends the
 * run within about the deadline, naming the rank; the step then refuses to
 * run until the kernel has ended, and freeing it waits. */
static void lone_rank(void) {
    mpmd_value x;
    mpmd_graph *g = slow_first_stage(&x);
    mpmd_error err;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.step_timeout = 0.2;
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    float *xs = malloc(sizeof(float) * 2 * M * K);
    tu_fill(xs, 2 * M * K, 1);
    CHECK(st && mpmd_step_set_input(st, x, xs, sizeof(float) * 2 * M * K) == MPMD_OK, "%s", err.msg);
    double t0 = now();
    mpmd_status rc = st ? mpmd_step_run(st) : MPMD_ERR_INVALID;
    double took = now() - t0;
    const char *e = st ? mpmd_step_error(st) : "";
    printf("the lone rank's watchdog, after %.3f s: %s\n", took, e);
    CHECK(rc == MPMD_ERR_RUNTIME && strstr(e, "rank 0: microbatch 0 of the loop has run for") &&
              strstr(e, "without finishing") && strstr(e, "step_timeout"),
          "a loop stuck in a kernel: %d, %s", (int)rc, e);
    mpmd_step_free(st); /* waits for the kernel */
    mpmd_graph_free(g);
    free(xs);
}

/* The default watchdog, the longer of 300 s and 20 times the slowest run
 * so far, as the run computes it (a run sets wait_limit as it starts); a
 * NaN is refused when the step is made. */
static void default_limit(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_loop_begin(g, 2);
    mpmd_value l =
        mpmd_sum(g, mpmd_matmul(g, mpmd_microbatch(g, x), mpmd_param(g, "w", MPMD_SHAPE(3, 2), MPMD_ONES), 0),
                 MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_keep(g, mpmd_loop_reduce(g, l, MPMD_REDUCE_ADD));
    mpmd_loop_end(g);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    float xs[12] = {0};
    CHECK(st && !mpmd_step_set_input(st, x, xs, sizeof xs) && !mpmd_step_run(st), "%s", st ? "" : err.msg);
    if (st) {
        CHECK(st->wait_limit == 300, "a fast step's watchdog: %g s, want 300", st->wait_limit);
        st->slowest_step = 20; /* as if a run had taken 20 s */
        CHECK(!mpmd_step_run(st) && st->wait_limit == 400, "after a 20 s run: %g s, want 400",
              st->wait_limit);
        st->slowest_step = 14;
        CHECK(!mpmd_step_run(st) && st->wait_limit == 300, "after a 14 s run: %g s, want 300",
              st->wait_limit);
    }
    mpmd_step_free(st);
    o.step_timeout = NAN;
    st = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(!st && strstr(err.msg, "step_timeout is NaN"), "a NaN watchdog: %s", st ? "accepted" : err.msg);
    mpmd_step_free(st);
    mpmd_graph_free(g);
}

int main(void) {
    mpmd_value x;
    mpmd_graph *g = slow_first_stage(&x);
    mpmd_error err;
    mpmd_schedule *s;
    CHECK(mpmd_schedule_for_graph(g, MPMD_SCHED_GPIPE, 0, 0, &s, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.step_timeout = 0.2;
    mpmd_step *st = mpmd_jit_with_loop(g, s, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    float *xs = malloc(sizeof(float) * 2 * M * K);
    tu_fill(xs, 2 * M * K, 1);
    CHECK(mpmd_step_set_input(st, x, xs, sizeof(float) * 2 * M * K) == MPMD_OK, "%s", mpmd_step_error(st));

    double t0 = now();
    mpmd_status rc = mpmd_step_run(st);
    double took = now() - t0;
    const char *e = mpmd_step_error(st);
    printf("the watchdog, after %.3f s: %s\n", took, e);
    CHECK(rc == MPMD_ERR_RUNTIME, "a run longer than its watchdog returned %d", (int)rc);
    CHECK(strstr(e, "rank 1: waited") && strstr(e, "from rank 0") && strstr(e, "of microbatch 0") &&
              strstr(e, "stage 0's output") && strstr(e, "step_timeout"),
          "the message does not name the rank, the value and the microbatch: %s", e);
    CHECK(strstr(e, "rank 0 did not stop"), "the message does not say that rank 0 is still in its task: %s",
          e);

    /* rank 0 is still in its task: refused; then, once it has ended, the
     * step runs again (and times out again) */
    rc = mpmd_step_run(st);
    e = mpmd_step_error(st);
    CHECK(rc == MPMD_ERR_RUNTIME && strstr(e, "cannot run until it does"),
          "a run while rank 0 is still stuck: %d, %s", (int)rc, e);
    int refused = 0;
    t0 = now();
    while ((rc = mpmd_step_run(st)) != MPMD_OK && strstr(mpmd_step_error(st), "cannot run until it does") &&
           now() - t0 < 120) {
        refused++;
        struct timespec nap = {0, 20000000L};
        nanosleep(&nap, NULL);
    }
    e = mpmd_step_error(st);
    CHECK(rc == MPMD_ERR_RUNTIME && strstr(e, "rank 1: waited"),
          "once rank 0 had stopped, the step did not run again (%d): %s", (int)rc, e);
    printf("refused %d more times while rank 0 was stuck, then ran again\n", refused);
    mpmd_step_free(st); /* waits for rank 0 */
    mpmd_schedule_free(s);
    mpmd_graph_free(g);
    free(xs);

    lone_rank();
    same_as_loop(-1);
    same_as_loop(0);
    same_as_loop(INFINITY); /* no watchdog, like -1 */
    same_as_loop(9.3e18);   /* past what a clock holds: no watchdog either */
    default_limit();
    return tu_report("test_watchdog");
}
