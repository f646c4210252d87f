/* test_vmath - the CPU backend's vectorised exp and logistic (cpu.h), on
 * which softmax, cross-entropy, attention, gelu, sigmoid and silu rest.
 *
 * 1. Accuracy against libm's exp in double, over a dense sweep of the
 *    floats: mpmd_exp_f32 within 1.5 ulp of e^x on [-87, 88], the logistic
 *    within 3 ulp; their edges (0 below the range, 1 above it, NaN through).
 * 2. The same bits at every vector width: the loops built for AVX2 and for
 *    AVX-512 (as the target_clones of the kernels are) against the build's
 *    baseline, over the same sweep, where the CPU runs them; and the
 *    kernels themselves on
 *    1 and 3 threads over odd lengths (each thread's lanes and tails fall on
 *    other elements).
 */
#include "backend/cpu/cpu.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

/* |got - want| in units of the last place of want as a float. */
static double ulps(float got, double want) {
    if (want == 0) return got == 0 ? 0 : INFINITY;
    int e;
    frexp(want, &e);                 /* want = f 2^e, 0.5 <= |f| < 1 */
    double ulp = ldexp(1.0, e - 24); /* a float's spacing at want */
    if (ulp < ldexp(1.0, -149)) ulp = ldexp(1.0, -149);
    return fabs((double)got - want) / ulp;
}

/* Every `step`-th float bit pattern whose value lies in [lo, hi]. */
static int64_t sweep(float lo, float hi, uint32_t step, float *out, int64_t cap) {
    int64_t n = 0;
    for (uint64_t b = 0; b <= 0xFFFFFFFFu && n < cap; b += step) {
        float x = mpmd_u2f((uint32_t)b);
        if (x >= lo && x <= hi) out[n++] = x;
    }
    return n;
}

/* The loops built for the baseline (x86-64-v2). */
static void exp_base(float *o, const float *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        o[i] = mpmd_exp_f32(x[i]);
}
static void sig_base(float *o, const float *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        o[i] = mpmd_sigmoid_f32(x[i]);
}
/* The same loops built for a wider ISA: the kernels' clones (cpu.h). */
#define WIDE_LOOPS(isa, name)                                                                                \
    __attribute__((target(isa))) static void exp_##name(float *o, const float *x, int64_t n) {               \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = mpmd_exp_f32(x[i]);                       \
    }                                                                                                        \
    __attribute__((target(isa))) static void sig_##name(float *o, const float *x, int64_t n) {               \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = mpmd_sigmoid_f32(x[i]);                   \
    }
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_WIDE_BUILDS 1
WIDE_LOOPS("avx2", avx2)
WIDE_LOOPS("avx512f", avx512)
typedef void (*loop_fn)(float *, const float *, int64_t);
static const struct {
    const char *isa;
    loop_fn exp, sig;
} wide[2] = {{"avx2", exp_avx2, sig_avx2}, {"avx512f", exp_avx512, sig_avx512}};

/* Each wider build of `which` (0 exp, 1 sigmoid) against the baseline's
 * result `want`, bit for bit, where the CPU runs it. */
static void compare_widths(int which, const float *x, const float *want, float *got, int64_t n) {
    for (int w = 0; w < 2; w++) {
        int has = w == 0 ? __builtin_cpu_supports("avx2") : __builtin_cpu_supports("avx512f");
        if (!has) {
            printf("this CPU has no %s: that build is not compared\n", wide[w].isa);
            continue;
        }
        (which ? wide[w].sig : wide[w].exp)(got, x, n);
        CHECK(memcmp(want, got, sizeof(float) * (size_t)n) == 0, "%s: the %s loop gives other bits",
              which ? "sigmoid" : "exp", wide[w].isa);
    }
}
#endif

static void test_accuracy_and_widths(void) {
    enum { CAP = 1 << 23 };
    float *x = malloc(sizeof(float) * CAP), *y = malloc(sizeof(float) * CAP),
          *y2 = malloc(sizeof(float) * CAP);
    /* exp: every 509th bit pattern in [-87, 88] (about 4.4 million floats) */
    int64_t n = sweep(-87.0f, 88.0f, 509, x, CAP);
    CHECK(n > 1000000, "the exp sweep has %lld floats", (long long)n);
    exp_base(y, x, n);
    double worst = 0;
    float at = 0;
    for (int64_t i = 0; i < n; i++) {
        double u = ulps(y[i], exp((double)x[i]));
        if (u > worst) worst = u, at = x[i];
    }
    CHECK(worst <= 1.5, "exp: %.2f ulp at x = %.9g", worst, at);
    printf("mpmd_exp_f32: %lld floats in [-87, 88], worst %.2f ulp (x = %.9g)\n", (long long)n, worst, at);
#ifdef HAVE_WIDE_BUILDS
    compare_widths(0, x, y, y2, n);
#endif

    /* the logistic: every 509th bit pattern in [-88, 88] */
    n = sweep(-88.0f, 88.0f, 509, x, CAP);
    sig_base(y, x, n);
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = 1.0 / (1.0 + exp(-(double)x[i]));
        double u = ulps(y[i], want);
        if (u > worst) worst = u, at = x[i];
    }
    CHECK(worst <= 3.0, "sigmoid: %.2f ulp at x = %.9g", worst, at);
    printf("mpmd_sigmoid_f32: %lld floats in [-88, 88], worst %.2f ulp (x = %.9g)\n", (long long)n, worst,
           at);
#ifdef HAVE_WIDE_BUILDS
    compare_widths(1, x, y, y2, n);
#endif
    free(x);
    free(y);
    free(y2);
}

static void test_edges(void) {
    const float inf = INFINITY, nan = NAN;
    CHECK(mpmd_exp_f32(0.0f) == 1.0f, "exp(0) = %.9g", mpmd_exp_f32(0.0f));
    CHECK(mpmd_exp_f32(-inf) == 0.0f, "exp(-inf) = %.9g", mpmd_exp_f32(-inf));
    CHECK(mpmd_exp_f32(-100.0f) == 0.0f, "exp(-100) = %.9g", mpmd_exp_f32(-100.0f));
    CHECK(isnan(mpmd_exp_f32(nan)), "exp(NaN) = %.9g", mpmd_exp_f32(nan));
    CHECK(isfinite(mpmd_exp_f32(1000.0f)) && mpmd_exp_f32(1000.0f) >= 1e38f, "exp(1000) saturates: %.9g",
          mpmd_exp_f32(1000.0f));
    CHECK(mpmd_sigmoid_f32(0.0f) == 0.5f, "sigmoid(0) = %.9g", mpmd_sigmoid_f32(0.0f));
    CHECK(mpmd_sigmoid_f32(100.0f) == 1.0f, "sigmoid(100) = %.9g", mpmd_sigmoid_f32(100.0f));
    CHECK(mpmd_sigmoid_f32(inf) == 1.0f, "sigmoid(inf) = %.9g", mpmd_sigmoid_f32(inf));
    CHECK(mpmd_sigmoid_f32(-100.0f) == 0.0f, "sigmoid(-100) = %.9g", mpmd_sigmoid_f32(-100.0f));
    CHECK(mpmd_sigmoid_f32(-inf) == 0.0f, "sigmoid(-inf) = %.9g", mpmd_sigmoid_f32(-inf));
    CHECK(isnan(mpmd_sigmoid_f32(nan)), "sigmoid(NaN) = %.9g", mpmd_sigmoid_f32(nan));
    float s87 = mpmd_sigmoid_f32(-87.5f);
    CHECK(s87 > 0.0f && s87 < 1e-37f, "sigmoid(-87.5) = %.9g, a small positive number", s87);
}

/* The kernels on 1 and 3 threads: gelu, sigmoid, silu, their gradients,
 * softmax and cross-entropy, over lengths that are not multiples of 8. */
static void test_kernels_threads(void) {
    const int64_t rows = 40, cols = 1003, n = rows * cols;
    float *x = malloc(sizeof(float) * (size_t)n), *gy = malloc(sizeof(float) * (size_t)n);
    int32_t lab[40];
    tu_fill(x, n, 5);
    tu_fill(gy, n, 6);
    for (int64_t i = 0; i < n; i++)
        x[i] *= 8.0f; /* reach both tails of the logistic */
    for (int r = 0; r < rows; r++)
        lab[r] = (int32_t)((r * 131) % cols);
    float *out[2][10];
    for (int t = 0; t < 2; t++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value xi = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(rows, cols));
        mpmd_value gi = mpmd_input(g, "gy", MPMD_F32, MPMD_SHAPE(rows, cols));
        mpmd_value li = mpmd_input(g, "labels", MPMD_I32, MPMD_SHAPE(rows));
        mpmd_value v[10];
        v[0] = mpmd_gelu(g, xi);
        v[1] = mpmd_sigmoid(g, xi);
        v[2] = mpmd_silu(g, xi);
        v[3] = mpmd_softmax(g, xi);
        v[4] = mpmd_cross_entropy(g, xi, li);
        mpmd_value mixed = mpmd_add(g, mpmd_add(g, v[0], v[1]), mpmd_add(g, v[2], v[3]));
        mpmd_value loss = mpmd_sum(g, mpmd_mul(g, mixed, gi), 0, NULL, 0);
        loss = mpmd_add(g, loss, mpmd_sum(g, v[4], 0, NULL, 0));
        mpmd_value wrt[1] = {xi}, gr[1];
        CHECK(mpmd_grad(g, loss, 1, wrt, gr) == MPMD_OK, "%s", mpmd_graph_error(g));
        v[5] = gr[0];
        for (int k = 0; k < 6; k++)
            mpmd_keep(g, v[k]);
        mpmd_exec *ex = tu_exec(g, t ? 3 : 1);
        mpmd_exec_set_input(ex, xi, x, sizeof(float) * (size_t)n);
        mpmd_exec_set_input(ex, gi, gy, sizeof(float) * (size_t)n);
        mpmd_exec_set_input(ex, li, lab, sizeof lab);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        for (int k = 0; k < 6; k++) {
            size_t bytes = sizeof(float) * (size_t)(k == 4 ? rows : n);
            out[t][k] = malloc(bytes);
            CHECK(mpmd_exec_read(ex, v[k], out[t][k], bytes) == MPMD_OK, "%s", mpmd_exec_error(ex));
        }
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
    const char *name[6] = {"gelu", "sigmoid", "silu", "softmax", "cross_entropy", "the gradient"};
    for (int k = 0; k < 6; k++) {
        size_t bytes = sizeof(float) * (size_t)(k == 4 ? rows : n);
        CHECK(memcmp(out[0][k], out[1][k], bytes) == 0, "%s on 1 and 3 threads differs", name[k]);
        free(out[0][k]);
        free(out[1][k]);
    }
    free(x);
    free(gy);
}

int main(void) {
    test_edges();
    test_accuracy_and_widths();
    test_kernels_threads();
    return tu_report("test_vmath");
}
