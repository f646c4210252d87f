/* The pipeline tests' and benchmarks' MLP. See mlp_model.h for the graph. */
#include "mlp_model.h"

#include <stdio.h>
#include <stdlib.h>

mpmd_status mlp_build(int layers, int micro, int rows_per_mb, int width, mlp_model *m) {
    mpmd_graph *g = m->g = mpmd_graph_new();
    if (!g) return MPMD_ERR_NOMEM;
    int64_t B = (int64_t)micro * rows_per_mb;
    m->x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, width));
    m->y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(B, width));
    mpmd_loop_begin(g, micro);
    mpmd_value h = mpmd_microbatch(g, m->x), yb = mpmd_microbatch(g, m->y);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "dense_%d", l);
        h = mpmd_dense(g, name, h, width, MPMD_BIAS);
        if (l + 1 < layers) h = mpmd_enter_stage(g, mpmd_tanh(g, h));
    }
    mpmd_value d = mpmd_sub(g, h, yb);
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), MPMD_ALL_AXES, MPMD_DROP_DIMS),
                                      1.0f / (float)micro);
    loss = mpmd_enter_stage(g, loss);
    int np = mpmd_graph_params(g, NULL, 0);
    mpmd_value *ps = malloc((size_t)np * sizeof *ps), *gs = malloc((size_t)np * sizeof *gs);
    if (!ps || !gs) {
        free(ps), free(gs);
        return MPMD_ERR_NOMEM;
    }
    mpmd_graph_params(g, ps, np);
    mpmd_grad(g, loss, np, ps, gs);
    m->loss = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_sgd(g, np, ps, gs, mpmd_scalar(g, 0.05f));
    mpmd_keep(g, m->loss);
    free(ps), free(gs);
    return mpmd_graph_status(g);
}
