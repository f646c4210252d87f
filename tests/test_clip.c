/* Global norms and clipping (mpmd_global_norm, mpmd_clip_by_global_norm):
 *
 * - the exact sum of squares (util/exact.h): sums of values whose squares
 *   add exactly in double equal the double sum; any split of a vector into
 *   parts, added in any order, gives the same bits; a large random vector
 *   is within a double's rounding of a compensated sum; NaN and infinity
 *   come through;
 * - the norm of a model's gradients is sqrt of their sum of squares (f32
 *   gradients read back, summed in double), and the same bits on the loop,
 *   on 2-stage pipelines (1F1B, ZeroBubble: a weight used on both stages,
 *   its gradient held by two ranks), under data parallelism with and
 *   without FSDP (2 and 3 replicas: the shards' parts), in every case with
 *   the parameters after the clipped step equal to the unsharded run's;
 * - the clipped gradients are the gradients times min(max / (norm + 1e-6),
 *   1), computed here in f32;
 * - misuse is an error that names the call. */
#include "runtime/runtime.h"
#include "testutil.h"
#include "util/exact.h"

#include <math.h>
#include <string.h>

enum { ROWS = 4, W = 6, MB = 2 };

/* ---- the exact accumulator ---------------------------------------------- */

static double exact_of(const float *x, int64_t n) {
    uint32_t acc[MPMD_EXACT_WORDS] = {0};
    mpmd_exact_add_squares(acc, x, n);
    return mpmd_exact_value(acc);
}

static void exact_sums(void) {
    /* integers below 1000 times 2^-5 .. 2^4: squares on a grid of 2^-10
     * below 2^30, a sum of 1000 below 2^40: every partial sum is exact in
     * double (50 bits), so the double sum is the answer */
    float a[1000];
    double want = 0;
    uint64_t s = 7;
    for (int i = 0; i < 1000; i++) {
        a[i] = (float)ldexp((double)(int)(tu_unif(&s) * 2000 - 1000), (int)(tu_unif(&s) * 10) - 5);
        want += (double)a[i] * a[i];
    }
    CHECK(exact_of(a, 1000) == want, "integers: %.17g, want %.17g", exact_of(a, 1000), want);
    /* subnormals and the largest floats */
    float edge[4] = {1e-45f, -3e-39f, 3.4e38f, -1.5e-42f};
    double ew = 0;
    for (int i = 0; i < 4; i++)
        ew += (double)edge[i] * edge[i]; /* 3.4e38^2 dominates; the others are below its ulp */
    CHECK(exact_of(edge, 4) == ew, "extremes: %.17g, want %.17g", exact_of(edge, 4), ew);
    float tiny[3] = {ldexpf(1, -149), -ldexpf(1, -149), ldexpf(2, -149)}; /* squares 2^-298, 2^-298, 2^-296 */
    CHECK(exact_of(tiny, 3) == ldexp(6.0, -298), "subnormals: %.17g", exact_of(tiny, 3));
    /* a long vector of mixed magnitudes: split into parts at random places,
     * accumulated in another order, the same bits; close to a compensated
     * long double sum */
    const int64_t n = tu_quick() ? 50000 : 400000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((tu_unif(&s) - 0.5) * ldexp(1.0, (int)(tu_unif(&s) * 60) - 30));
    uint32_t whole[MPMD_EXACT_WORDS] = {0}, parts[MPMD_EXACT_WORDS] = {0};
    mpmd_exact_add_squares(whole, x, n);
    int64_t cut[6] = {0, 1, 777, n / 3, n / 2 + 5, n};
    for (int k = 4; k >= 0; k--) { /* the parts last to first, each its own accumulator */
        uint32_t one[MPMD_EXACT_WORDS] = {0};
        mpmd_exact_add_squares(one, x + cut[k], cut[k + 1] - cut[k]);
        mpmd_exact_add(parts, one);
    }
    CHECK(!memcmp(whole, parts, sizeof whole), "a split vector's parts summed in another order differ");
    long double sum = 0, comp = 0;
    for (int64_t i = 0; i < n; i++) { /* Kahan-Babuska in long double */
        long double v = (long double)x[i] * x[i], t = sum + v;
        comp += fabsl(sum) >= fabsl(v) ? (sum - t) + v : (v - t) + sum;
        sum = t;
    }
    const double ref = (double)(sum + comp), got = mpmd_exact_value(whole);
    CHECK(fabs(got - ref) <= 2e-16 * ref, "random vector: %.17g, compensated %.17g", got, ref);
    free(x);
    float bad[3] = {1.0f, INFINITY, 2.0f};
    CHECK(isinf(exact_of(bad, 3)), "an infinity gives %g", exact_of(bad, 3));
    bad[2] = NAN;
    CHECK(isnan(exact_of(bad, 3)), "a NaN gives %g", exact_of(bad, 3));
    CHECK(exact_of(bad, 0) == 0.0, "no values: %g", exact_of(bad, 0));
}

/* ---- a model ---------------------------------------------------------------- */

typedef struct model {
    mpmd_graph *g;
    mpmd_value x, loss, norm;
    int np;
    mpmd_value p[8], grad[8], clipped[8];
} model;

/* Two stages: tanh(x w0 + b0) | tanh(h w1 + b1) h w0^T... : w0 is read by
 * both stages (its gradient is the sum of two ranks' loop results); the
 * loss is the mean square. Clipped to max_norm, then AdamW. */
static model build(float max_norm, int tp) {
    model m;
    memset(&m, 0, sizeof m);
    mpmd_graph *g = m.g = mpmd_graph_new();
    if (tp > 1) mpmd_set_tensor_parallel(g, tp);
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(MB * ROWS, W));
    mpmd_value w0 = mpmd_param(g, "w0", MPMD_SHAPE(W, W), MPMD_NORMAL(0.8f));
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_tanh(g, mpmd_matmul(g, mpmd_microbatch(g, m.x), w0, 0));
    h = mpmd_mlp(g, "mlp0", h, 2 * W, W);
    h = mpmd_enter_stage(g, h);
    h = mpmd_tanh(g, mpmd_dense(g, "d1", h, W, MPMD_BIAS));
    h = mpmd_matmul(g, h, mpmd_transpose(g, w0), 0);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, h), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    loss = mpmd_enter_stage(g, loss);
    m.loss = mpmd_value_and_grad(g, loss, 0, NULL, 8, m.p, m.grad, &m.np);
    memcpy(m.clipped, m.grad, sizeof m.grad);
    m.norm = mpmd_clip_by_global_norm(g, m.np, m.clipped, max_norm);
    for (int i = 0; i < m.np; i++)
        mpmd_keep(g, m.grad[i]), mpmd_keep(g, m.clipped[i]);
    mpmd_keep(g, m.norm);
    mpmd_adamw(g, m.np, m.p, m.clipped, mpmd_scalar(g, 1e-2f),
               (mpmd_adam_opts){0.9f, 0.999f, 1e-2f, 0.0f, NULL});
    return m;
}

typedef struct outcome {
    float norm;
    char hash[65];
    int ok;
} outcome;

static outcome run(const model *m, const mpmd_schedule *s, int replicas, int fsdp, const float *x,
                   size_t bytes, const char *label, int check_clip) {
    outcome r = {0};
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 9, o.data_parallel = replicas, o.fsdp = fsdp;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m->g, s, &o, &err);
    CHECK(st != NULL, "%s: %s", label, err.msg);
    if (!st) return r;
    if (fsdp) { /* clipping keeps every parameter sharded */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        mpmd_step_print(st, f);
        fclose(f);
        char want[64];
        snprintf(want, sizeof want, "FSDP (%d parameters sharded", m->np);
        CHECK(text && strstr(text, want), "%s: not every parameter is sharded: %.200s", label,
              text ? text : "");
        free(text);
    }
    if (mpmd_step_set_input(st, m->x, x, bytes) || mpmd_step_run(st) ||
        mpmd_step_read(st, m->norm, &r.norm, sizeof r.norm)) {
        CHECK(0, "%s: %s", label, mpmd_step_error(st));
        mpmd_step_free(st);
        return r;
    }
    mpmd_step_params_sha256(st, r.hash);
    if (check_clip) {
        /* the norm against the gradients read back (a split parameter's on
         * every model rank: each holds its part), and each clipped one */
        float factor = 0.05f / (r.norm + 1e-6f);
        factor = factor < 1.0f ? factor : 1.0f;
        CHECK(factor < 1.0f, "%s: the norm %g is under the clip: nothing clipped", label, r.norm);
        double ss = 0;
        int same = 1;
        const int M = mpmd_tensor_parallel(m->g);
        for (int i = 0; i < m->np; i++) {
            int axis, groups, rank;
            const int split = mpmd_split_of(m->g, m->p[i].id, &axis, &groups);
            const size_t nb = mpmd_type_bytes(mpmd_type_of(m->g, m->grad[i]));
            float *gv = malloc(nb), *cv = malloc(nb);
            CHECK(mpmd_step_where(st, m->grad[i], &rank, 1) >= 1, "%s: gradient %d is nowhere", label, i);
            for (int mr = 0; mr < (split ? M : 1); mr++) {
                CHECK(!mpmd_runtime_read_model(st, rank, 0, mr, m->grad[i].id, gv) &&
                          !mpmd_runtime_read_model(st, rank, 0, mr, m->clipped[i].id, cv),
                      "%s: reading gradient %d of model rank %d", label, i, mr);
                for (size_t k = 0; k < nb / sizeof(float); k++) {
                    ss += (double)gv[k] * gv[k];
                    same &= cv[k] == gv[k] * factor;
                }
            }
            free(gv), free(cv);
        }
        const float want = (float)sqrt(ss);
        CHECK(fabsf(r.norm - want) <= 1e-6f * want, "%s: norm %.9g, the gradients' %.9g", label, r.norm,
              want);
        CHECK(same, "%s: the clipped gradients are not the gradients times min(max / (norm + 1e-6), 1)",
              label);
    }
    mpmd_step_free(st);
    r.ok = 1;
    return r;
}

static void layouts(void) {
    model m = build(0.05f, 1);
    CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
    float x[3 * MB * ROWS * W];
    tu_fill(x, 3 * MB * ROWS * W, 41);
    const size_t one = sizeof(float) * MB * ROWS * W;
    mpmd_schedule *s1, *sz;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(2, MB, &s1, &err) || mpmd_schedule_zerobubble(2, MB, &sz, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    outcome loop = run(&m, NULL, 1, 0, x, one, "loop", 1);
    const mpmd_schedule *scheds[2] = {s1, sz};
    for (int k = 0; k < 2; k++) {
        outcome p = run(&m, scheds[k], 1, 0, x, one, k ? "zerobubble" : "std1f1b", 1);
        CHECK(p.ok && p.norm == loop.norm && !strcmp(p.hash, loop.hash), "%s: norm %.9g vs the loop's %.9g",
              k ? "zerobubble" : "std1f1b", p.norm, loop.norm);
    }
    for (int R = 2; R <= 3; R++) {
        char label[80];
        snprintf(label, sizeof label, "data parallel %d", R);
        outcome dp = run(&m, NULL, R, 0, x, one * (size_t)R, label, 1);
        for (int k = 0; k < 3; k++) {
            snprintf(label, sizeof label, "fsdp %d, %s", R,
                     k == 0   ? "loop"
                     : k == 1 ? "std1f1b"
                              : "zerobubble");
            outcome f = run(&m, k ? scheds[k - 1] : NULL, R, 1, x, one * (size_t)R, label, 1);
            CHECK(f.ok && f.norm == dp.norm && !strcmp(f.hash, dp.hash),
                  "%s: norm %.9g vs data parallel's %.9g", label, f.norm, dp.norm);
        }
    }
    mpmd_schedule_free(s1), mpmd_schedule_free(sz);
    mpmd_graph_free(m.g);
}

/* Tensor parallel 2 (the MLP split by its hidden width): the norm counts a
 * split gradient's parts once each and a whole one once, so it is the norm
 * of the whole gradients read back; a pipeline gives the split loop's bits. */
static void tensor_parallel(void) {
    model m = build(0.05f, 2);
    CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
    float x[2 * MB * ROWS * W]; /* two replicas' shares below */
    const size_t one = sizeof x / 2;
    tu_fill(x, 2 * MB * ROWS * W, 43);
    outcome loop = run(&m, NULL, 1, 0, x, one, "tensor parallel 2, loop", 1);
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(2, MB, &s, &err)) return;
    outcome p = run(&m, s, 1, 0, x, one, "tensor parallel 2, std1f1b", 1);
    CHECK(p.ok && p.norm == loop.norm && !strcmp(p.hash, loop.hash),
          "tensor parallel 2: std1f1b %.9g vs loop %.9g", p.norm, loop.norm);
    outcome f = run(&m, s, 2, 1, x, sizeof x, "tensor parallel 2, fsdp 2, std1f1b", 0);
    outcome d = run(&m, s, 2, 0, x, sizeof x, "tensor parallel 2, data parallel 2, std1f1b", 0);
    CHECK(f.ok && d.ok && f.norm == d.norm && !strcmp(f.hash, d.hash),
          "tensor parallel 2 x fsdp 2: %.9g vs %.9g", f.norm, d.norm);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
}

static void misuse(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 2));
    mpmd_loop_begin(g, 2);
    mpmd_value xb = mpmd_microbatch(g, x);
    TU_DROP(mpmd_global_norm(g, 1, &xb));
    CHECK(strstr(mpmd_graph_error(g), "mpmd_global_norm: inside the microbatch loop body"), "in the body: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    mpmd_value i = mpmd_input(g, "i", MPMD_I32, MPMD_SHAPE(3));
    TU_DROP(mpmd_global_norm(g, 1, &i));
    CHECK(strstr(mpmd_graph_error(g), "mpmd_global_norm: value 0 is i32[3]; f32 values"), "i32: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    mpmd_value f = mpmd_input(g, "f", MPMD_F32, MPMD_SHAPE(3));
    TU_DROP(mpmd_clip_by_global_norm(g, 1, &f, 0.0f));
    CHECK(strstr(mpmd_graph_error(g), "mpmd_clip_by_global_norm: max_norm 0; a positive finite norm"),
          "max 0: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    TU_DROP(mpmd_global_norm(g, 0, NULL));
    CHECK(strstr(mpmd_graph_error(g), "mpmd_global_norm: 0 values (NULL)"), "none: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

int main(void) {
    exact_sums();
    layouts();
    tensor_parallel();
    misuse();
    return tu_report("test_clip");
}
