/* app - a program built against an installed copy of mpmd.
 *
 * tests/install/run.sh installs the build into a temporary prefix and builds
 * this file against it with find_package(mpmd) and with pkg-config, linked
 * to the shared and to the static library. It only sees the installed
 * header, so it also checks that the header set is complete.
 *
 * The step: a two-layer MLP with a stage marker after each layer, an MSE
 * loss, 4 microbatches and SGD. It is trained two steps on one rank
 * (mpmd_exec), then compiled for a 2-rank Std1F1B pipeline
 * (mpmd_jit_with_loop) and trained two steps from the same initial values.
 * Checks: the losses are finite and fall, each layer's kernel lives on the
 * rank of its stage, and the pipeline gives the one-rank loop's bits (loss
 * and parameter hash). Prints one line and exits 0 on success, prints what
 * failed and exits 1 otherwise. */
#include <mpmd.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { ROWS = 16, IN = 8, HIDDEN = 12, MICRO = 4, STEPS = 2 };

static int failures;

#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            failures++;                                                                                      \
            fprintf(stderr, "app: %s:%d: ", __FILE__, __LINE__);                                             \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
        }                                                                                                    \
    } while (0)

/* Inputs: x[i][j] in [-1, 1) from a small LCG; y = a fixed linear map of x. */
static void make_data(float *x, float *y) {
    uint32_t s = 12345u;
    for (int i = 0; i < ROWS * IN; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
    }
    for (int i = 0; i < ROWS; i++) {
        float acc = 0;
        for (int j = 0; j < IN; j++)
            acc += x[i * IN + j] * (float)(j % 3 - 1);
        y[i] = acc;
    }
}

int main(void) {
    static float xdata[ROWS * IN], ydata[ROWS];
    make_data(xdata, ydata);

    /* The step, built once; both runners use this graph. */
    mpmd_graph *g = mpmd_graph_new();
    if (!g) {
        fprintf(stderr, "app: out of memory\n");
        return 1;
    }
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS, IN));
    mpmd_value y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(ROWS, 1));
    mpmd_loop_begin(g, MICRO);
    mpmd_value h = mpmd_tanh(g, mpmd_dense(g, "dense_0", mpmd_microbatch(g, x), HIDDEN, 1));
    h = mpmd_enter_stage(g, h); /* stage 0 ends */
    mpmd_value d = mpmd_sub(g, mpmd_dense(g, "dense_1", h, 1, 1), mpmd_microbatch(g, y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), 0, NULL, 0), 1.0f / MICRO);
    loss = mpmd_enter_stage(g, loss); /* stage 1 ends */
    mpmd_value params[4], grads[4];
    int np = mpmd_graph_params(g, params, 4);
    EXPECT(np == 4, "%d parameters, expected 4", np);
    mpmd_grad(g, loss, np, params, grads);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_sgd(g, np, params, grads, mpmd_scalar(g, 0.05f));
    mpmd_keep(g, total);
    if (mpmd_graph_status(g)) {
        fprintf(stderr, "app: building the step failed: %s\n", mpmd_graph_error(g));
        mpmd_graph_free(g);
        return 1;
    }

    /* One rank. */
    mpmd_error err;
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    eo.seed = 3;
    mpmd_exec *ex = mpmd_exec_new(g, &eo, &err);
    if (!ex) {
        fprintf(stderr, "app: mpmd_exec_new: %s\n", err.msg);
        mpmd_graph_free(g);
        return 1;
    }
    float one[STEPS] = {0};
    char one_hash[65] = "";
    for (int s = 0; s < STEPS; s++) {
        mpmd_exec_set_input(ex, x, xdata, sizeof xdata);
        mpmd_exec_set_input(ex, y, ydata, sizeof ydata);
        if (mpmd_exec_run(ex) || mpmd_exec_read(ex, total, &one[s], sizeof one[s])) {
            fprintf(stderr, "app: one-rank step %d: %s\n", s + 1, mpmd_exec_error(ex));
            failures++;
            break;
        }
        EXPECT(isfinite(one[s]), "one-rank step %d: loss %g is not finite", s + 1, one[s]);
    }
    EXPECT(one[1] < one[0], "one-rank loss did not fall: %g then %g", one[0], one[1]);
    mpmd_exec_params_sha256(ex, one_hash);
    mpmd_exec_free(ex);

    /* Two ranks, Std1F1B, same seed: the same bits. */
    mpmd_schedule *sched = NULL;
    if (mpmd_schedule_std1f1b(2, MICRO, &sched, &err)) {
        fprintf(stderr, "app: mpmd_schedule_std1f1b: %s\n", err.msg);
        mpmd_graph_free(g);
        return 1;
    }
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = 1;
    so.seed = 3;
    mpmd_step *st = mpmd_jit_with_loop(g, sched, &so, &err);
    mpmd_schedule_free(sched);
    if (!st) {
        fprintf(stderr, "app: mpmd_jit_with_loop: %s\n", err.msg);
        mpmd_graph_free(g);
        return 1;
    }
    EXPECT(mpmd_step_num_ranks(st) == 2, "%d ranks, expected 2", mpmd_step_num_ranks(st));
    const char *kernels[2] = {"dense_0/kernel", "dense_1/kernel"};
    for (int r = 0; r < 2; r++) {
        int where[4];
        int n = mpmd_step_where(st, mpmd_lookup(g, kernels[r]), where, 4);
        EXPECT(n == 1 && where[0] == r, "%s lives on %d rank(s), first %d; expected rank %d only", kernels[r],
               n, n > 0 ? where[0] : -1, r);
    }
    float pipe[STEPS] = {0};
    for (int s = 0; s < STEPS; s++) {
        mpmd_step_set_input(st, x, xdata, sizeof xdata);
        mpmd_step_set_input(st, y, ydata, sizeof ydata);
        if (mpmd_step_run(st) || mpmd_step_read(st, total, &pipe[s], sizeof pipe[s])) {
            fprintf(stderr, "app: pipeline step %d: %s\n", s + 1, mpmd_step_error(st));
            failures++;
            break;
        }
        EXPECT(memcmp(&pipe[s], &one[s], sizeof(float)) == 0,
               "step %d: pipeline loss %.9g, one-rank loss %.9g", s + 1, pipe[s], one[s]);
    }
    char pipe_hash[65] = "";
    mpmd_step_params_sha256(st, pipe_hash);
    EXPECT(strcmp(pipe_hash, one_hash) == 0, "parameters after %d steps differ: pipeline %s, one rank %s",
           STEPS, pipe_hash, one_hash);
    mpmd_step_free(st);
    mpmd_graph_free(g);

    if (failures) return 1;
    printf("app: loss %.6f -> %.6f on one rank; 2-rank Std1F1B gives the same bits\n", one[0], one[1]);
    return 0;
}
