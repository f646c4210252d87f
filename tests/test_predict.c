/* mpmd_predict's time against a case worked out by hand, and the memory
 * planner's peaks against known plans.
 *
 * The time: a two-stage MLP's loop is profiled, and its measured op times
 * are then replaced by chosen ones (one op of each task 1, 2, 3 and 4 ms a
 * microbatch, one optimizer op 5 ms, every other op 0), so that the
 * prediction is arithmetic: the loop takes 4 microbatches x 10 ms + 5 ms,
 * Std1F1B over 2 ranks 28 ms + 5 ms (the timeline is drawn below).
 *
 * The peaks: mpmd_arena_plan on lifetimes where best fit gives a size one
 * can count on one's fingers and first fit, worst fit or a planner that
 * does not merge free neighbours give more; and the arenas of the MLP's
 * Std1F1B plan, pinned: a change to the planner that moves them must say
 * why in this file. */
#include "compiler/arena.h"
#include "runtime/runtime.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

#define N_MICRO 4
/* the MLP's Std1F1B(2) plan, f32 on the CPU: each rank's arena and total bytes */
#define ARENA0 14336
#define ARENA1 6720
#define TOTAL0 21504
#define TOTAL1 8064

typedef struct mlp {
    mpmd_graph *g;
    mpmd_value x, y, h, d;
} mlp;

/* The README's example: dense 16 -> 32, relu | dense 32 -> 1, mean squared error. */
static mlp build(void) {
    mlp m;
    m.g = mpmd_graph_new();
    m.x = mpmd_input(m.g, "x", MPMD_F32, MPMD_SHAPE(64, 16));
    m.y = mpmd_input(m.g, "y", MPMD_F32, MPMD_SHAPE(64, 1));
    mpmd_loop_begin(m.g, N_MICRO);
    mpmd_value xb = mpmd_microbatch(m.g, m.x), yb = mpmd_microbatch(m.g, m.y);
    m.h = mpmd_relu(m.g, mpmd_dense(m.g, "dense_0", xb, 32, MPMD_BIAS));
    mpmd_value h = mpmd_enter_stage(m.g, m.h);
    m.d = mpmd_sub(m.g, mpmd_dense(m.g, "dense_1", h, 1, MPMD_BIAS), yb);
    mpmd_value loss = mpmd_mean(m.g, mpmd_square(m.g, m.d), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    loss = mpmd_enter_stage(m.g, loss);
    mpmd_value params[4], grads[4];
    int np;
    TU_DROP(mpmd_value_and_grad(m.g, loss, 0, NULL, 4, params, grads, &np));
    mpmd_adamw(m.g, np, params, grads, mpmd_scalar(m.g, 1e-3f), MPMD_ADAM_DEFAULTS);
    return m;
}

static void set_inputs(mpmd_step *st, const mlp *m) {
    float xd[64 * 16], yd[64];
    tu_fill(xd, 64 * 16, 1);
    tu_fill(yd, 64, 2);
    mpmd_step_set_input(st, m->x, xd, sizeof xd);
    mpmd_step_set_input(st, m->y, yd, sizeof yd);
}

/* Std1F1B(2), 4 microbatches; F0 1, F1 2, B0 3, B1 4 ms (rank = stage):
 *
 *   rank 0: F0 [0,1] F1 [1,2] . B0 [7,10] F2 [10,11] . B1 [13,16] F3 [16,17] . B2 [19,22] . B3 [25,28]
 *   rank 1: . F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13] F2 [13,15] B2 [15,19] F3 [19,21] B3 [21,25]
 *
 * rank 1's 6 ms a microbatch sets the pace: 4 x 6 + F0 + B0 = 28 ms. */
static void test_time_by_hand(void) {
    mlp m = build();
    mpmd_schedule *s;
    mpmd_error err;
    CHECK(!mpmd_schedule_std1f1b(2, N_MICRO, &s, &err), "std1f1b: %s", err.msg);
    mpmd_step *pipe = tu_step(m.g, s, 1, "std1f1b"), *loop = tu_step(m.g, NULL, 1, "loop");
    if (!pipe || !loop) return;
    set_inputs(loop, &m);
    CHECK(!mpmd_step_run(loop) && !mpmd_step_set_profiling(loop, 1) && !mpmd_step_run(loop),
          "profiled run: %s", mpmd_step_error(loop));
    /* every op's measured time replaced: one op of each task, one after the loop */
    const mpmd_plan *pl = pipe->plan;
    const int n_nodes = m.g->n_nodes;
    double *prof = loop->rs[0].prof;
    for (int i = 0; i <= n_nodes; i++)
        prof[i] = 0;
    const double ms[2][2] = {{1e-3, 3e-3}, {2e-3, 4e-3}}; /* [stage][F, B] per microbatch */
    for (int stage = 0; stage < 2; stage++)
        for (int k = 0; k < 2; k++) {
            int kind = k ? MPMD_TASK_B : MPMD_TASK_F;
            CHECK(pl->cl.count[stage * 4 + kind] > 0, "stage %d has a %c task", stage, "FB"[k]);
            prof[pl->cl.nodes[stage * 4 + kind][0]] = N_MICRO * ms[stage][k]; /* the loop ran it 4 times */
        }
    int post = -1; /* the first op rank 0 runs after the loop */
    for (int x = 0; x < pl->prog[0].n && post < 0; x++)
        if (pl->prog[0].ins[x].op == MPMD_I_RUN_POST) post = pl->prog[0].ins[x].node;
    CHECK(post >= 0, "an op after the loop");
    if (post >= 0) prof[post] = 5e-3;
    mpmd_prediction p;
    CHECK(!mpmd_predict(m.g, s, NULL, loop, &p, &err), "predict std1f1b: %s", err.msg);
    CHECK(fabs(p.step_ms - 33.0) < 1e-9, "Std1F1B over 2 ranks: predicted %.6f ms, by hand 28 + 5 = 33",
          p.step_ms);
    CHECK(fabs(p.bubble - (1 - (4 * 4.0 + 4 * 6) / (2 * 28.0))) < 1e-12,
          "its bubble: %.6f, by hand 1 - 40/56", p.bubble);
    mpmd_prediction_free(&p);
    CHECK(!mpmd_predict(m.g, NULL, NULL, loop, &p, &err), "predict the loop: %s", err.msg);
    CHECK(fabs(p.step_ms - 45.0) < 1e-9, "the loop: predicted %.6f ms, by hand 4 x 10 + 5 = 45", p.step_ms);
    mpmd_prediction_free(&p);
    mpmd_step_free(pipe);
    mpmd_step_free(loop);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
}

/* Best fit by hand. Sizes are multiples of the arena's 64-byte alignment.
 *   position 0: A 256, B 64, C 128, B' 64 are written:
 *               A [0,256) B [256,320) C [320,448) B' [448,512)
 *   position 1: A and C die: free [0,256) and [320,448)
 *   position 2: D 128 takes C's block exactly, E 256 takes A's: 512 bytes.
 * First fit (or worst fit) puts D into A's block, and E no longer fits:
 * 768 bytes. */
static void test_best_fit(void) {
    const mpmd_arena_item items[] = {{256, 0, 1, -1}, {64, 0, 3, -1},  {128, 0, 1, -1},
                                     {64, 0, 3, -1},  {128, 2, 3, -1}, {256, 2, 3, -1}};
    size_t off[6];
    size_t size = mpmd_arena_plan(6, items, 4, off);
    CHECK(size == 512 && off[4] == 320 && off[5] == 0,
          "best fit: %zu bytes (D at %zu, E at %zu), by hand 512 (320, 0)", size, off[4], off[5]);
    /* Free neighbours merge: X and Y die side by side, W takes both.
     *   position 0: X 128 [0,128), Y 128 [128,256), Z 64 [256,320); position 1: X, Y die
     *   position 2: W 256 at 0: 320 bytes (576 without the merge) */
    const mpmd_arena_item merge[] = {{128, 0, 1, -1}, {128, 0, 1, -1}, {64, 0, 3, -1}, {256, 2, 3, -1}};
    size = mpmd_arena_plan(4, merge, 4, off);
    CHECK(size == 320 && off[3] == 0, "merged neighbours: %zu bytes (W at %zu), by hand 320 (0)", size,
          off[3]);
    /* an in-place op takes over the block of the value dying where it is written */
    const mpmd_arena_item inplace[] = {{640, 0, 1, -1}, {640, 1, 2, 0}};
    size = mpmd_arena_plan(2, inplace, 3, off);
    CHECK(size == 640 && off[1] == off[0], "in place: %zu bytes, by hand 640", size);
}

/* The MLP's Std1F1B plan: each rank's arena and total, pinned (f32, CPU).
 * Every parameter and AdamW moment is counted by mpmd_step_memory's
 * fields; the arena is the planner's: moved by a planner change, it must
 * be re-pinned here with the reason. */
static void test_known_plan(void) {
    mlp m = build();
    mpmd_schedule *s;
    mpmd_error err;
    CHECK(!mpmd_schedule_std1f1b(2, N_MICRO, &s, &err), "std1f1b: %s", err.msg);
    mpmd_prediction p;
    CHECK(!mpmd_predict(m.g, s, NULL, NULL, &p, &err), "predict: %s", err.msg);
    static const int64_t arena[2] = {ARENA0, ARENA1}, total[2] = {TOTAL0, TOTAL1};
    for (int r = 0; r < 2 && p.ranks; r++) {
        CHECK(p.ranks[r].arena_live <= p.ranks[r].arena, "rank %d: the arena holds its fullest", r);
        CHECK(p.ranks[r].arena == arena[r], "rank %d: planned arena %lld bytes, pinned %lld", r,
              (long long)p.ranks[r].arena, (long long)arena[r]);
        CHECK(p.ranks[r].planned == total[r], "rank %d: planned %lld bytes in all, pinned %lld", r,
              (long long)p.ranks[r].planned, (long long)total[r]);
    }
    CHECK(p.peak == (TOTAL0 > TOTAL1 ? TOTAL0 : TOTAL1), "the peak is the larger rank's: %lld",
          (long long)p.peak);
    mpmd_prediction_free(&p);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
}

int main(void) {
    test_time_by_hand();
    test_best_fit();
    test_known_plan();
    return tu_report("test_predict");
}
