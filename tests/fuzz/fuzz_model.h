/* The model of the checkpoint fuzzer and of its seeds (make_seeds.c): two
 * stages of dense layers with AdamW, so that a checkpoint holds parameters,
 * both moments and the step counter, spread over two ranks. */
#ifndef MPMD_FUZZ_MODEL_H
#define MPMD_FUZZ_MODEL_H

#include <mpmd.h>

static inline mpmd_graph *fuzz_model(mpmd_value *x) {
    mpmd_graph *g = mpmd_graph_new();
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_loop_begin(g, 2);
    mpmd_value h =
        mpmd_enter_stage(g, mpmd_tanh(g, mpmd_dense(g, "d0", mpmd_microbatch(g, *x), 5, MPMD_BIAS)));
    mpmd_value loss = mpmd_enter_stage(
        g, mpmd_mean(g, mpmd_square(g, mpmd_dense(g, "d1", h, 2, MPMD_BIAS)), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_value ps[4], gs[4];
    int n;
    mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 4, ps, gs, &n);
    (void)total;
    mpmd_adamw(g, n, ps, gs, mpmd_scalar(g, 1e-2f), MPMD_ADAM_DEFAULTS);
    return g;
}

/* its two-rank 1F1B step (NULL on error) */
static inline mpmd_step *fuzz_model_step(mpmd_graph *g) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_for_graph(g, MPMD_SCHED_STD1F1B, 0, 0, &s, &err)) return NULL;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 5;
    mpmd_step *st = mpmd_jit_with_loop(g, s, &o, &err);
    mpmd_schedule_free(s);
    return st;
}

#endif
