/* testutil.h - small helpers shared by the tests: checks that report
 * file:line, and the finite-difference gradient checker every op uses. */
#ifndef MPMD_TESTUTIL_H
#define MPMD_TESTUTIL_H

#include "mlp_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>

extern int tu_failures;
extern int tu_checks;

/* Record a check; on failure print file:line and the message. */
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        tu_checks++;                                                                                         \
        if (!(cond)) {                                                                                       \
            tu_failures++;                                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
        }                                                                                                    \
    } while (0)

/* A value dropped on purpose (an op built only for its error): the op
 * constructors warn on an unused result, and a cast to void does not
 * silence that warning. */
#define TU_DROP(expr)                                                                                        \
    do {                                                                                                     \
        mpmd_value tu_dropped_ = (expr);                                                                     \
        (void)tu_dropped_;                                                                                   \
    } while (0)

/* Print "<name>: N passed, M failed" and return the exit status. */
int tu_report(const char *name);

/* The backend the pipeline tests run on: MPMD_TEST_BACKEND ("cpu" when
 * unset). tu_backend_or_skip exits 77 (CTest's skip) with the reason when
 * that backend cannot run here, say "cuda" on a machine without a GPU. */
const char *tu_backend(void);
void tu_backend_or_skip(const char *test);
/* 1 when MPMD_TEST_QUICK is set (sanitizer runs): tests shrink their sizes. */
int tu_quick(void);

/* splitmix64's mixing function, and a uniform double in [0, 1) drawn from
 * the state *s (advanced): the tests' deterministic random numbers. */
uint64_t tu_mix64(uint64_t x);
double tu_unif(uint64_t *s);
/* Deterministic pseudo-random floats in [-1, 1) from a seed. */
void tu_fill(float *x, int64_t n, uint64_t seed);

/* Build a graph with executor; abort the test with the graph's message if
 * building failed (tests only: programs under test report, tests abort). */
mpmd_exec *tu_exec(mpmd_graph *g, int threads);
/* g compiled for schedule s (NULL: the one-rank loop), one thread per rank,
 * step seed `seed`; NULL after a failed check naming `label` and why. */
mpmd_step *tu_step(const mpmd_graph *g, const mpmd_schedule *s, uint64_t seed, const char *label);

/* Gradient check of one op (or any small composition).
 *
 * The checker makes one f32 parameter per entry of in_shapes (initialised
 * normal(0, 1) from `seed`, so shift them inside `build` if the op needs a
 * domain, e.g. log of exp(x)), calls build(g, params, ctx) to get y, forms
 * loss = sum(y * r) with a fixed random r, and compares mpmd_grad's gradient
 * for every parameter element (up to 64 sampled per parameter) with a
 * finite difference: central differences at steps h and h/2 (the steps
 * actually taken in f32), combined by Richardson extrapolation (error
 * O(h^4)). Passes when every checked element has
 *   |fd - ad| <= r |fd| + 1e-3 max|fd|,   r = min(tol, 2e-3)
 * (relative where a gradient is large, absolute in the tensor's own scale
 * where f32 noise in the loss dominates): a gradient off by 0.5% fails
 * (test_ops_elementwise shows it with tu_gradcheck_ad_scale). Prints the
 * worst element otherwise (unless tu_gradcheck_quiet). Returns 1 on pass.
 * `label` names the case in messages. */
typedef mpmd_value (*tu_build_fn)(mpmd_graph *g, const mpmd_value *params, void *ctx);
/* Multiplies the autodiff gradient before the comparison (1: the checker
 * as is): a test of the checker itself. */
extern double tu_gradcheck_ad_scale;
extern int tu_gradcheck_quiet;
/* The largest error of the checks so far, as a share of its tolerance
 * (tu_report prints it). */
extern double tu_gradcheck_worst;
int tu_gradcheck(const char *label, int n_in, const mpmd_type *in_shapes, tu_build_fn build, void *ctx,
                 double h, double tol);

/* The MLP the pipeline tests share (mlp_build in examples/models/mlp_model.h):
 * inputs "x" and "y" f32[micro * rows, width]; `layers` dense layers with
 * tanh between and a stage marker after each (the last closing the last
 * stage); MSE loss divided by the microbatch count; gradients of every
 * parameter loop-reduced; SGD (lr 0.05) after the loop; the summed loss
 * kept. A graph error stays on m.g for the test to check; running out of
 * memory aborts the test. */
typedef mlp_model tu_mlp;
tu_mlp tu_build_mlp(int layers, int micro, int rows_per_mb, int width);

/* The compiler issue's equivalence list: (ranks, stages, microbatches,
 * schedule, fuse_steady_state). */
typedef struct tu_pcase {
    int ranks, stages, micro;
    mpmd_schedule_kind kind;
    int fuse;
} tu_pcase;
extern const tu_pcase tu_pcases[];
extern const int tu_num_pcases;

/* One plan of every schedule by its name, for the tests that walk them all
 * over a 4-stage model (the memory plan, remat): stages, ranks and whether
 * the steady state is fused. */
typedef struct tu_named_schedule {
    const char *name;
    int stages, ranks, fuse;
} tu_named_schedule;
extern const tu_named_schedule tu_every_schedule[];
extern const int tu_num_every_schedule;

/* The MLP of equivalence case c and its data, the same in-process
 * (test_pipeline) and under MPI (mpi_check): tu_build_mlp(stages, micro,
 * 3, 8) and inputs x, y f32[micro * 3, 8] from tu_fill with seeds 11 + c
 * and 99 + c, laid out as the compare loops take them (in, data, bytes).
 * Free with tu_mlp_case_free. */
typedef struct tu_mlp_case {
    tu_mlp m;
    float *x, *y;
    mpmd_value in[2];
    void *data[2];
    size_t bytes[2];
} tu_mlp_case;
tu_mlp_case tu_mlp_case_new(int c);
void tu_mlp_case_free(tu_mlp_case *mc);

/* Convenience: an f32 type from dims. */
mpmd_type tu_f32(int ndim, const int64_t *dims);

#endif
