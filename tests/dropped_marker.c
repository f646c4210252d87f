/* A newcomer's mistake: the first stage marker's result is dropped
 * (`mpmd_enter_stage(g, h);`). Built with -Werror this must not compile
 * (the op constructors warn on an unused result); built without, compiling
 * the pipeline must fail and say why (tests/dropped_marker.sh). */
#include "mpmd.h"

#include <stdio.h>

int main(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(8, 4));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_dense(g, "d0", mpmd_microbatch(g, x), 4, 1);
    mpmd_enter_stage(g, h); /* the mistake: h = mpmd_enter_stage(g, h); */
    h = mpmd_dense(g, "d1", h, 1, 1);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, h), 0, NULL, 0);
    loss = mpmd_enter_stage(g, loss);
    mpmd_value ps[4], gs[4];
    int np = mpmd_graph_params(g, ps, 4);
    mpmd_grad(g, loss, np, ps, gs);
    mpmd_loop_end(g);
    mpmd_schedule *s;
    mpmd_error err;
    mpmd_schedule_std1f1b(2, 2, &s, &err);
    mpmd_step *st = mpmd_jit_with_loop(g, s, NULL, &err);
    if (!st) {
        fprintf(stderr, "dropped_marker: %s\n", err.msg);
        return 1;
    }
    mpmd_step_free(st);
    return 0;
}
