/* Test helpers: checks, deterministic data, and the gradient checker. */
#include "testutil.h"

#include <math.h>
#include <string.h>

int tu_failures = 0;
int tu_checks = 0;

double tu_gradcheck_worst = 0;

int tu_report(const char *name) {
    if (tu_gradcheck_worst > 0)
        printf("%s: gradient checks: the largest error was %.2f of its tolerance\n", name,
               tu_gradcheck_worst);
    printf("%s: %d passed, %d failed\n", name, tu_checks - tu_failures, tu_failures);
    return tu_failures ? 1 : 0;
}

int tu_quick(void) {
    const char *q = getenv("MPMD_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

void tu_fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

mpmd_type tu_f32(int ndim, const int64_t *dims) {
    mpmd_type t;
    memset(&t, 0, sizeof t);
    t.dtype = MPMD_F32;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t.dim[i] = dims[i];
    return t;
}

mpmd_step *tu_step(const mpmd_graph *g, const mpmd_schedule *s, uint64_t seed, const char *label) {
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = seed;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(g, s, &o, &err);
    CHECK(st != NULL, "%s: %s", label, err.msg);
    return st;
}

mpmd_exec *tu_exec(mpmd_graph *g, int threads) {
    if (mpmd_graph_status(g) != MPMD_OK) {
        fprintf(stderr, "graph error: %s\n", mpmd_graph_error(g));
        abort();
    }
    mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
    o.threads = threads;
    o.seed = 1;
    mpmd_error err;
    mpmd_exec *ex = mpmd_exec_new(g, &o, &err);
    if (!ex) {
        fprintf(stderr, "mpmd_exec_new: %s\n", err.msg);
        abort();
    }
    return ex;
}

/* The loss sum(y * r) of a run, summed here in double from the f32 y: the
 * finite differences then see y's own rounding, not an f32 sum's. */
typedef struct gc_loss {
    mpmd_value y;
    const float *r;
    float *ybuf;
    int64_t n;
} gc_loss;

static double run_loss(mpmd_exec *ex, const gc_loss *l) {
    if (mpmd_exec_run(ex) != MPMD_OK) {
        fprintf(stderr, "gradcheck run failed: %s\n", mpmd_exec_error(ex));
        abort();
    }
    mpmd_exec_read(ex, l->y, l->ybuf, (size_t)l->n * sizeof *l->ybuf);
    double s = 0;
    for (int64_t i = 0; i < l->n; i++)
        s += (double)l->ybuf[i] * l->r[i];
    return s;
}

double tu_gradcheck_ad_scale = 1.0;
int tu_gradcheck_quiet = 0;

int tu_gradcheck(const char *label, int n_in, const mpmd_type *in_shapes, tu_build_fn build, void *ctx,
                 double h, double tol) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value params[16], grads[16];
    if (n_in > 16) abort();
    for (int i = 0; i < n_in; i++) {
        char name[32];
        snprintf(name, sizeof name, "x%d", i);
        params[i] = mpmd_param(g, name, in_shapes[i].ndim, in_shapes[i].dim, MPMD_NORMAL(1.0f));
    }
    mpmd_value y = build(g, params, ctx);
    /* loss = sum(y * r) with a fixed random r: every output element matters,
     * each with its own weight, so a transposed or scaled gradient shows. */
    mpmd_type yt = mpmd_value_type(g, y);
    int64_t yn = mpmd_type_numel(&yt);
    float *r = malloc((size_t)(yn ? yn : 1) * sizeof *r);
    tu_fill(r, yn, 4242);
    mpmd_value rc = mpmd_constant(g, MPMD_F32, yt.ndim, yt.dim, r);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, rc), 0, NULL, 0);
    mpmd_grad(g, loss, n_in, params, grads);
    mpmd_keep(g, y);
    gc_loss lf = {y, r, malloc((size_t)(yn ? yn : 1) * sizeof(float)), yn};
    for (int i = 0; i < n_in; i++)
        mpmd_keep(g, grads[i]);
    if (mpmd_graph_status(g) != MPMD_OK) {
        fprintf(stderr, "gradcheck %s: graph error: %s\n", label, mpmd_graph_error(g));
        mpmd_graph_free(g);
        free(r), free(lf.ybuf);
        tu_checks++, tu_failures++;
        return 0;
    }
    mpmd_exec *ex = tu_exec(g, 1);
    run_loss(ex, &lf);
    /* every gradient at the unperturbed point, before any finite difference */
    float *ads[16];
    for (int i = 0; i < n_in; i++) {
        int64_t n = mpmd_type_numel(&in_shapes[i]);
        ads[i] = malloc((size_t)n * sizeof *ads[i]);
        mpmd_exec_read(ex, grads[i], ads[i], (size_t)n * sizeof *ads[i]);
    }
    int ok = 1;
    const double rtol = tol < 2e-3 ? tol : 2e-3;
    for (int i = 0; i < n_in; i++) {
        int64_t n = mpmd_type_numel(&in_shapes[i]);
        float *ad = ads[i];
        float *x = mpmd_exec_var_data(ex, params[i]);
        int64_t step = n > 64 ? n / 64 : 1, m = 0;
        double fds[64], adv[64], scale = 0;
        int64_t at[64];
        for (int64_t k = 0; k < n && m < 64; k += step, m++) {
            /* central differences at h and h/2 (the steps actually taken in
             * f32), combined by Richardson: error O(h^4) */
            double d[2];
            float save = x[k];
            for (int q = 0; q < 2; q++) {
                double hq = q ? h / 2 : h;
                x[k] = (float)(save + hq);
                double xp = x[k], lp = run_loss(ex, &lf);
                x[k] = (float)(save - hq);
                double xm = x[k], lm = run_loss(ex, &lf);
                d[q] = (lp - lm) / (xp - xm);
            }
            x[k] = save;
            fds[m] = (4 * d[1] - d[0]) / 3;
            adv[m] = ad[k] * tu_gradcheck_ad_scale;
            at[m] = k;
            if (fabs(fds[m]) > scale) scale = fabs(fds[m]);
        }
        /* |fd - ad| <= rtol |fd| + 1e-3 max|fd|: relative where the
         * gradient is large, absolute (in the tensor's own scale) where f32
         * noise in the loss dominates a small one */
        double worst = 0, wfd = 0, wad = 0;
        int64_t wk = -1;
        for (int64_t j = 0; j < m; j++) {
            double excess = fabs(fds[j] - adv[j]) / (rtol * fabs(fds[j]) + 1e-3 * scale + 1e-30);
            if (isnan(excess) || excess > worst)
                worst = isnan(excess) ? INFINITY : excess, wk = at[j], wfd = fds[j], wad = adv[j];
        }
        if (tu_gradcheck_ad_scale == 1.0 && worst > tu_gradcheck_worst) tu_gradcheck_worst = worst;
        if (worst > 1) {
            ok = 0;
            if (!tu_gradcheck_quiet)
                fprintf(
                    stderr,
                    "gradcheck %s: input %d element %lld: finite difference %.7g, autodiff %.7g (%.2f times "
                    "the tolerance %.0e relative + 1e-3 of the largest, %.4g)\n",
                    label, i, (long long)wk, wfd, wad, worst, rtol, scale);
        }
        free(ad);
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    free(r), free(lf.ybuf);
    tu_checks++;
    if (!ok) tu_failures++;
    return ok;
}

tu_mlp tu_build_mlp(int layers, int micro, int rows_per_mb, int width) {
    tu_mlp m;
    if (mlp_build(layers, micro, rows_per_mb, width, &m) == MPMD_ERR_NOMEM) {
        fprintf(stderr, "tu_build_mlp: out of memory\n");
        abort();
    }
    return m;
}

const tu_pcase tu_pcases[] = {
    {1, 1, 4, MPMD_SCHED_STD1F1B, 0},         {2, 2, 4, MPMD_SCHED_STD1F1B, 0},
    {3, 3, 5, MPMD_SCHED_EAGER1F1B, 0},       {4, 4, 8, MPMD_SCHED_GPIPE, 0},
    {1, 1, 1, MPMD_SCHED_INTERLEAVED1F1B, 0}, {4, 8, 1, MPMD_SCHED_INTERLEAVED1F1B, 0},
    {4, 8, 1, MPMD_SCHED_KIMIK2, 1},          {2, 4, 12, MPMD_SCHED_INTERLEAVED1F1B, 0},
    {4, 4, 4, MPMD_SCHED_ZEROBUBBLE, 0},      {4, 4, 8, MPMD_SCHED_ZEROBUBBLE, 0},
    {3, 6, 6, MPMD_SCHED_DUALPIPEV, 0},       {3, 6, 10, MPMD_SCHED_DUALPIPEV, 0},
};
const int tu_num_pcases = (int)(sizeof tu_pcases / sizeof tu_pcases[0]);

const tu_named_schedule tu_every_schedule[] = {
    {"gpipe", 4, 4, 0},  {"std1f1b", 4, 4, 0},    {"eager1f1b", 4, 4, 0}, {"interleaved1f1b", 4, 2, 0},
    {"kimik2", 4, 2, 1}, {"zerobubble", 4, 4, 0}, {"dualpipev", 4, 2, 0}, {"interleavedgpipe", 4, 2, 0},
};
const int tu_num_every_schedule = (int)(sizeof tu_every_schedule / sizeof tu_every_schedule[0]);

tu_mlp_case tu_mlp_case_new(int c) {
    const tu_pcase *pc = &tu_pcases[c];
    tu_mlp_case mc;
    mc.m = tu_build_mlp(pc->stages, pc->micro, 3, 8);
    int64_t B = (int64_t)pc->micro * 3;
    mc.x = malloc((size_t)B * 8 * sizeof *mc.x), mc.y = malloc((size_t)B * 8 * sizeof *mc.y);
    tu_fill(mc.x, B * 8, 11 + c);
    tu_fill(mc.y, B * 8, 99 + c);
    mc.in[0] = mc.m.x, mc.in[1] = mc.m.y;
    mc.data[0] = mc.x, mc.data[1] = mc.y;
    mc.bytes[0] = mc.bytes[1] = (size_t)B * 8 * sizeof(float);
    return mc;
}

void tu_mlp_case_free(tu_mlp_case *mc) {
    free(mc->x), free(mc->y);
    mpmd_graph_free(mc->m.g);
}

const char *tu_backend(void) {
    const char *b = getenv("MPMD_TEST_BACKEND");
    return b && *b ? b : "cpu";
}

void tu_backend_or_skip(const char *test) {
    char why[512];
    if (mpmd_backend_check(tu_backend(), why, sizeof why)) {
        printf("%s: skipped: backend %s: %s\n", test, tu_backend(), why);
        fflush(stdout);
        exit(77);
    }
}

uint64_t tu_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double tu_unif(uint64_t *s) {
    *s = tu_mix64(*s);
    return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}
