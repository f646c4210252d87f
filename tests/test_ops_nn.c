/* Neural-network ops: matmul, softmax / log-softmax / causal softmax, layer
 * norm, embedding, cross-entropy, attention.
 *
 * - forward values against naive double-precision references;
 * - every gradient against finite differences (tu_gradcheck), several
 *   through an intermediate value so that the in-place kernels run in place;
 * - the weight gradient of a 2-D b under a batched a is one folded matmul;
 * - run-time errors for ids and labels out of range, build-time shape errors;
 * - the same bits on 1, 2 and 3 threads, forward and backward, on sizes above
 *   the parallel threshold (including an sgemm of [256,768] x [768,3072]).
 */
#include "testutil.h"

#include "graph/graph.h"

#include <math.h>
#include <string.h>

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static mpmd_type ty(mpmd_dtype dt, int ndim, const int64_t *dims) {
    mpmd_type t = tu_f32(ndim, dims);
    t.dtype = dt;
    return t;
}

static float *fill_new(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    tu_fill(x, n, seed);
    return x;
}

/* ids in [0, v) with repeats: a fixed pseudo-random walk. */
static int32_t *ids_new(int64_t n, int32_t v, uint64_t seed) {
    int32_t *x = malloc((size_t)n * sizeof *x);
    uint64_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % (uint64_t)v);
    }
    return x;
}

/* ---- a runner: inputs of any dtype, an op, optionally its gradients -------- */

typedef struct ins {
    int n;
    mpmd_type t[6];
    const void *d[6];
} ins;

typedef mpmd_value (*op_fn)(mpmd_graph *g, const mpmd_value *xs, void *ctx);

/* Build y = f(inputs) with the inputs as mpmd_input values; with `grads`,
 * also loss = sum(y * r) for a fixed random r and d loss / d input for every
 * f32 input. Run on `threads` threads. On success *out holds y followed by
 * the gradients (malloc'd, *nout floats). Returns the run's status; err gets
 * the executor's message. */
static mpmd_status run_case(const ins *in, op_fn f, void *ctx, int threads, int grads, float **out,
                            int64_t *nout, char *err, size_t errlen) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xs[6], wrt[6], gr[6];
    int nw = 0;
    for (int i = 0; i < in->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        xs[i] = mpmd_input(g, name, in->t[i].dtype, in->t[i].ndim, in->t[i].dim);
        if (in->t[i].dtype == MPMD_F32) wrt[nw++] = xs[i];
    }
    mpmd_value y = f(g, xs, ctx);
    mpmd_keep(g, y);
    mpmd_type yt = mpmd_value_type(g, y);
    int64_t ny = mpmd_type_numel(&yt), total = ny;
    if (grads) {
        float *r = fill_new(ny, 777);
        mpmd_value rc = mpmd_constant(g, MPMD_F32, yt.ndim, yt.dim, r);
        free(r);
        mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, rc), 0, NULL, 0);
        mpmd_grad(g, loss, nw, wrt, gr);
        for (int i = 0; i < nw; i++) {
            mpmd_keep(g, gr[i]);
            mpmd_type t = mpmd_value_type(g, wrt[i]);
            total += mpmd_type_numel(&t);
        }
    }
    mpmd_exec *ex = tu_exec(g, threads);
    for (int i = 0; i < in->n; i++)
        CHECK(mpmd_exec_set_input(ex, xs[i], in->d[i], mpmd_type_bytes(&in->t[i])) == MPMD_OK, "%s",
              mpmd_exec_error(ex));
    mpmd_status st = mpmd_exec_run(ex);
    if (err) snprintf(err, errlen, "%s", mpmd_exec_error(ex));
    *out = NULL;
    *nout = 0;
    if (st == MPMD_OK) {
        float *o = malloc((size_t)total * sizeof *o);
        int64_t k = 0;
        CHECK(mpmd_exec_read(ex, y, o, (size_t)ny * sizeof *o) == MPMD_OK, "%s", mpmd_exec_error(ex));
        k = ny;
        for (int i = 0; grads && i < nw; i++) {
            mpmd_type t = mpmd_value_type(g, wrt[i]);
            int64_t n = mpmd_type_numel(&t);
            CHECK(mpmd_exec_read(ex, gr[i], o + k, (size_t)n * sizeof *o) == MPMD_OK, "%s",
                  mpmd_exec_error(ex));
            k += n;
        }
        *out = o;
        *nout = total;
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return st;
}

static float *run_fwd(const ins *in, op_fn f, void *ctx, int threads, int64_t *n) {
    float *out;
    char err[MPMD_ERROR_MSG_MAX];
    mpmd_status st = run_case(in, f, ctx, threads, 0, &out, n, err, sizeof err);
    CHECK(st == MPMD_OK, "run failed: %s", err);
    return out;
}

/* The same bits, forward and backward, on 1, 2 and 3 threads (3 splits
 * every partition unevenly). */
static void check_threads(const char *label, const ins *in, op_fn f, void *ctx) {
    float *o1, *o2;
    int64_t n1, n2;
    char err[MPMD_ERROR_MSG_MAX];
    mpmd_status s1 = run_case(in, f, ctx, 1, 1, &o1, &n1, err, sizeof err);
    CHECK(s1 == MPMD_OK, "%s: %s", label, err);
    for (int threads = 2; threads <= 3; threads++) {
        mpmd_status s2 = run_case(in, f, ctx, threads, 1, &o2, &n2, err, sizeof err);
        CHECK(s2 == MPMD_OK, "%s: %s", label, err);
        if (s1 == MPMD_OK && s2 == MPMD_OK) {
            int64_t diff = -1;
            for (int64_t i = 0; i < n1 && diff < 0; i++)
                if (memcmp(&o1[i], &o2[i], sizeof(float)) != 0) diff = i;
            CHECK(n1 == n2 && diff < 0, "%s: 1 and %d threads differ at element %lld of %lld (%.9g vs %.9g)",
                  label, threads, (long long)diff, (long long)n1, diff >= 0 ? o1[diff] : 0.0,
                  diff >= 0 ? o2[diff] : 0.0);
        }
        free(o2);
    }
    free(o1);
}

/* |got - want| <= atol + rtol |want| everywhere; reports the first miss. */
static void check_close(const char *label, const float *got, const double *want, int64_t n, double atol,
                        double rtol) {
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]))) {
            CHECK(0, "%s: element %lld is %.9g, expected %.9g", label, (long long)i, got[i], want[i]);
            return;
        }
    }
    CHECK(1, "%s", label);
}

/* ---- matmul ------------------------------------------------------------------ */

typedef struct mm_case {
    int nda, ndb;
    int64_t da[4], db[4];
    int flags;
} mm_case;

static mpmd_value op_matmul(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    return mpmd_matmul(g, xs[0], xs[1], ((const mm_case *)ctx)->flags);
}

/* Naive reference: C[i, m, n] = sum_k op(A_i)[m, k] op(B_i)[k, n]. */
static void ref_matmul(const mm_case *c, const float *a, const float *b, double *out, double *scale) {
    int tra = (c->flags & MPMD_TRANS_A) != 0, trb = (c->flags & MPMD_TRANS_B) != 0;
    int64_t m = c->da[c->nda - 2 + tra], k = c->da[c->nda - 1 - tra], n = c->db[c->ndb - 1 - trb];
    int64_t batch = 1;
    for (int i = 0; i < c->nda - 2; i++)
        batch *= c->da[i];
    int shared = c->ndb == 2;
    for (int64_t bi = 0; bi < batch; bi++) {
        const float *A = a + bi * m * k, *B = b + (shared ? 0 : bi * k * n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, sa = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = tra ? A[p * m + i] : A[i * k + p];
                    double y = trb ? B[j * k + p] : B[p * n + j];
                    s += x * y;
                    sa += fabs(x * y);
                }
                out[(bi * m + i) * n + j] = s;
                scale[(bi * m + i) * n + j] = sa;
            }
    }
}

static void test_matmul_values(void) {
    const mm_case cases[] = {
        {2, 2, {3, 4}, {4, 5}, 0},
        {2, 2, {4, 3}, {4, 5}, MPMD_TRANS_A},
        {2, 2, {3, 4}, {5, 4}, MPMD_TRANS_B},
        {2, 2, {4, 3}, {5, 4}, MPMD_TRANS_A | MPMD_TRANS_B},
        {3, 2, {2, 7, 6}, {6, 5}, 0},
        {4, 2, {2, 3, 6, 7}, {6, 5}, MPMD_TRANS_A},
        {3, 2, {4, 7, 6}, {5, 6}, MPMD_TRANS_B},
        {3, 2, {4, 6, 7}, {5, 6}, MPMD_TRANS_A | MPMD_TRANS_B},
        {3, 3, {3, 7, 6}, {3, 6, 5}, 0},
        {4, 4, {2, 3, 6, 7}, {2, 3, 6, 5}, MPMD_TRANS_A},
        {3, 3, {3, 7, 6}, {3, 5, 6}, MPMD_TRANS_B},
        {3, 3, {3, 6, 7}, {3, 5, 6}, MPMD_TRANS_A | MPMD_TRANS_B},
        {3, 3, {48, 64, 64}, {48, 64, 64}, MPMD_TRANS_B}, /* parallel over the batch on 2 threads */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const mm_case *c = &cases[ci];
        ins in = {2, {ty(MPMD_F32, c->nda, c->da), ty(MPMD_F32, c->ndb, c->db)}, {0}};
        float *a = fill_new(mpmd_type_numel(&in.t[0]), 10 + ci),
              *b = fill_new(mpmd_type_numel(&in.t[1]), 20 + ci);
        in.d[0] = a, in.d[1] = b;
        for (int threads = 1; threads <= 2; threads++) {
            int64_t n;
            float *y = run_fwd(&in, op_matmul, (void *)c, threads, &n);
            double *want = malloc((size_t)n * sizeof *want), *scale = malloc((size_t)n * sizeof *scale);
            ref_matmul(c, a, b, want, scale);
            int64_t bad = -1;
            for (int64_t i = 0; y && i < n && bad < 0; i++)
                if (!(fabs(y[i] - want[i]) <= 1e-5 * scale[i] + 1e-6)) bad = i;
            CHECK(y && bad < 0, "matmul case %zu (flags %d, %d threads): element %lld is %.9g, expected %.9g",
                  ci, c->flags, threads, (long long)bad, bad >= 0 ? y[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
            free(y), free(want), free(scale);
        }
        free(a), free(b);
    }
}

static mpmd_value g_matmul(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    return mpmd_matmul(g, p[0], p[1], ((const mm_case *)ctx)->flags);
}

static void test_matmul_grads(void) {
    const mm_case cases[] = {
        {2, 2, {3, 4}, {4, 5}, 0},
        {2, 2, {4, 3}, {4, 5}, MPMD_TRANS_A},
        {2, 2, {3, 4}, {5, 4}, MPMD_TRANS_B},
        {2, 2, {4, 3}, {5, 4}, MPMD_TRANS_A | MPMD_TRANS_B},
        /* batched a, 2-D b: the folded weight gradient (and, transposed, dA
         * by a per-item product and a transpose) */
        {3, 2, {2, 3, 4}, {4, 5}, 0},
        {4, 2, {2, 2, 4, 3}, {4, 5}, MPMD_TRANS_A},
        {3, 2, {2, 3, 4}, {5, 4}, MPMD_TRANS_B},
        {3, 2, {2, 4, 3}, {5, 4}, MPMD_TRANS_A | MPMD_TRANS_B},
        /* batched a and b */
        {3, 3, {2, 3, 4}, {2, 4, 5}, 0},
        {3, 3, {2, 4, 3}, {2, 4, 5}, MPMD_TRANS_A},
        {4, 4, {2, 2, 3, 4}, {2, 2, 5, 4}, MPMD_TRANS_B},
        {3, 3, {2, 4, 3}, {2, 5, 4}, MPMD_TRANS_A | MPMD_TRANS_B},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const mm_case *c = &cases[ci];
        mpmd_type ts[2] = {tu_f32(c->nda, c->da), tu_f32(c->ndb, c->db)};
        char label[64];
        snprintf(label, sizeof label, "matmul case %zu (%dD x %dD, flags %d)", ci, c->nda, c->ndb, c->flags);
        CHECK(tu_gradcheck(label, 2, ts, g_matmul, (void *)c, 1e-2, 1e-2), "%s", label);
    }
}

/* With a 2-D b under a batched a, d loss / d b is one matmul of 2-D operands
 * whose summed dimension is batch x M: a weight gradient at sgemm speed. */
static void test_matmul_folded_weight_grad(void) {
    for (int flags = 0; flags < 4; flags++) {
        mpmd_graph *g = mpmd_graph_new();
        int tra = flags & MPMD_TRANS_A, trb = flags & MPMD_TRANS_B;
        mpmd_value a = tra ? mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4, 8, 16, 12))
                           : mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4, 8, 12, 16));
        int64_t bd[2] = {trb ? 32 : 16, trb ? 16 : 32};
        mpmd_value b = mpmd_param(g, "b", 2, bd, MPMD_LECUN);
        mpmd_value y = mpmd_matmul(g, a, b, flags);
        mpmd_value loss = mpmd_sum(g, y, 0, NULL, 0);
        mpmd_value gb;
        mpmd_grad(g, loss, 1, &b, &gb);
        CHECK(mpmd_graph_status(g) == MPMD_OK, "%s", mpmd_graph_error(g));
        const mpmd_node *n = mpmd_node_of(g, gb);
        CHECK(n && strcmp(n->op->name, "matmul") == 0, "flags %d: dB is %s, expected one matmul", flags,
              n ? n->op->name : "none");
        if (n && strcmp(n->op->name, "matmul") == 0) {
            const mpmd_type *t0 = mpmd_type_of(g, mpmd_in(n, 0)), *t1 = mpmd_type_of(g, mpmd_in(n, 1));
            CHECK(t0->ndim == 2 && t1->ndim == 2 && t0->dim[0] == 4 * 8 * 12 && t1->dim[0] == 4 * 8 * 12,
                  "flags %d: dB = matmul(%s, %s); expected the batch folded into 384 summed rows", flags,
                  mpmd_tstr(g, mpmd_in(n, 0)), mpmd_tstr(g, mpmd_in(n, 1)));
        }
        /* and no per-item product is summed anywhere: one matmul for dB
         * (plus the forward and dA) */
        int mms = 0;
        for (int i = 0; i < mpmd_graph_num_values(g); i++)
            if (strcmp(mpmd_node_of(g, (mpmd_value){i})->op->name, "matmul") == 0) mms++;
        CHECK(mms == 3, "flags %d: %d matmuls in forward + backward, expected 3", flags, mms);
        mpmd_graph_free(g);
    }
}

/* ---- softmax family ----------------------------------------------------------------- */

enum { SM_PLAIN, SM_LOG, SM_CAUSAL };

/* The softmaxes read an intermediate (x * 1.5) that dies at them, so the
 * executor runs them in place. */
static mpmd_value op_softmax(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    int kind = *(const int *)ctx;
    mpmd_value x = mpmd_mul_scalar(g, xs[0], 1.5f);
    return kind == SM_PLAIN ? mpmd_softmax(g, x)
           : kind == SM_LOG ? mpmd_log_softmax(g, x)
                            : mpmd_softmax_causal(g, x);
}

static void ref_softmax(int kind, const float *x, int64_t rows, int64_t n, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = kind == SM_CAUSAL ? r % n + 1 : n;
        const float *xr = x + r * n;
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < len; i++)
            m = fmax(m, 1.5 * xr[i]);
        for (int64_t i = 0; i < len; i++)
            s += exp(1.5 * xr[i] - m);
        for (int64_t i = 0; i < n; i++) {
            double v = 1.5 * xr[i] - m;
            y[r * n + i] = i >= len ? 0.0 : kind == SM_LOG ? v - log(s) : exp(v) / s;
        }
    }
}

static void test_softmax_values(void) {
    const char *names[] = {"softmax", "log_softmax", "softmax_causal"};
    for (int kind = 0; kind < 3; kind++) {
        /* rows of 37 (a tail after the eight-lane sums) and of 300 (several
         * exp chunks... and a row long enough to be split in lanes) */
        const int64_t shapes[2][3] = {{2, 37, 37}, {4, 300, 300}};
        for (int s = 0; s < 2; s++) {
            int64_t dims[3] = {shapes[s][0], shapes[s][1], shapes[s][2]};
            ins in = {1, {ty(MPMD_F32, 3, dims)}, {0}};
            int64_t cnt = mpmd_type_numel(&in.t[0]);
            float *x = fill_new(cnt, 31 + s);
            for (int64_t i = 0; i < cnt; i++)
                x[i] *= 8.0f; /* logits in [-12, 12) */
            in.d[0] = x;
            int64_t n;
            float *y = run_fwd(&in, op_softmax, &kind, 2, &n);
            double *want = malloc((size_t)cnt * sizeof *want);
            ref_softmax(kind, x, cnt / dims[2], dims[2], want);
            char label[64];
            snprintf(label, sizeof label, "%s [%lld,%lld,%lld]", names[kind], (long long)dims[0],
                     (long long)dims[1], (long long)dims[2]);
            if (y) check_close(label, y, want, cnt, kind == SM_LOG ? 2e-6 : 1e-7, 2e-6);
            if (y && kind == SM_CAUSAL) {
                int zeros = 1;
                for (int64_t r = 0; r < cnt / dims[2]; r++)
                    for (int64_t i = r % dims[2] + 1; i < dims[2]; i++)
                        zeros &= y[r * dims[2] + i] == 0.0f;
                CHECK(zeros, "%s: masked entries (j > i) are not exactly 0", label);
            }
            free(x), free(y), free(want);
        }
    }
    /* extreme logits: no overflow, and exact zeros far below the max */
    {
        float x[6] = {1000.0f, 0.0f, -1000.0f, 999.0f, -INFINITY, 1000.0f};
        ins in = {1, {ty(MPMD_F32, 1, (int64_t[]){6})}, {x}};
        int kind = SM_PLAIN;
        int64_t n;
        float *y = run_fwd(&in, op_softmax, &kind, 1, &n);
        if (y) {
            double e = exp(-1.5), z = 2 + e;
            CHECK(fabs(y[0] - 1 / z) < 1e-6 && y[1] == 0.0f && y[2] == 0.0f && fabs(y[3] - e / z) < 1e-6 &&
                      y[4] == 0.0f && fabs(y[5] - 1 / z) < 1e-6,
                  "softmax of extreme logits: %g %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4], y[5]);
        }
        free(y);
    }
}

static mpmd_value g_softmax(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    int kind = *(const int *)ctx;
    mpmd_value x = p[0];
    return kind == SM_PLAIN ? mpmd_softmax(g, x)
           : kind == SM_LOG ? mpmd_log_softmax(g, x)
                            : mpmd_softmax_causal(g, x);
}

/* The cotangent of softmax(x) dies at softmax_grad: that kernel runs in
 * place too. Here also x is an intermediate. */
static mpmd_value g_softmax_mid(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    mpmd_value q[1] = {mpmd_mul_scalar(g, p[0], 2.0f)};
    return mpmd_mul_scalar(g, g_softmax(g, q, ctx), 3.0f);
}

static void test_softmax_grads(void) {
    int kinds[3] = {SM_PLAIN, SM_LOG, SM_CAUSAL};
    mpmd_type t = tu_f32(MPMD_SHAPE(2, 5, 5)), t11 = tu_f32(MPMD_SHAPE(3, 11));
    CHECK(tu_gradcheck("softmax", 1, &t, g_softmax, &kinds[0], 1e-2, 1e-2), "softmax");
    CHECK(tu_gradcheck("log_softmax", 1, &t, g_softmax, &kinds[1], 1e-2, 1e-2), "log_softmax");
    CHECK(tu_gradcheck("softmax_causal", 1, &t, g_softmax, &kinds[2], 1e-2, 1e-2), "softmax_causal");
    CHECK(tu_gradcheck("softmax (in place, rows of 11)", 1, &t11, g_softmax_mid, &kinds[0], 1e-2, 1e-2),
          "softmax");
    CHECK(tu_gradcheck("log_softmax (in place, rows of 11)", 1, &t11, g_softmax_mid, &kinds[1], 1e-2, 1e-2),
          "log_softmax");
    mpmd_type t10 = tu_f32(MPMD_SHAPE(2, 10, 10));
    CHECK(tu_gradcheck("softmax_causal (in place, 10x10)", 1, &t10, g_softmax_mid, &kinds[2], 1e-2, 1e-2),
          "softmax_causal");
}

/* ---- layer norm ----------------------------------------------------------------------- */

static mpmd_value op_layer_norm(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    (void)ctx;
    return mpmd_layer_norm(g, mpmd_mul_scalar(g, xs[0], 1.0f), xs[1], xs[2], 1e-5f);
}

static void test_layer_norm_values(void) {
    const int64_t shapes[2][2] = {{6, 13}, {64, 768}};
    for (int s = 0; s < 2; s++) {
        int64_t rows = shapes[s][0], c = shapes[s][1];
        ins in = {3, {ty(MPMD_F32, 2, shapes[s]), ty(MPMD_F32, 1, &c), ty(MPMD_F32, 1, &c)}, {0}};
        float *x = fill_new(rows * c, 41 + s), *ga = fill_new(c, 42), *be = fill_new(c, 43);
        for (int64_t i = 0; i < rows * c; i++)
            x[i] = 5.0f + 3.0f * x[i]; /* an offset mean: two-pass variance */
        in.d[0] = x, in.d[1] = ga, in.d[2] = be;
        int64_t n;
        float *y = run_fwd(&in, op_layer_norm, NULL, 2, &n);
        double *want = malloc((size_t)(rows * c) * sizeof *want);
        for (int64_t r = 0; r < rows; r++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < c; i++)
                m += x[r * c + i];
            m /= (double)c;
            for (int64_t i = 0; i < c; i++)
                v += (x[r * c + i] - m) * (x[r * c + i] - m);
            v /= (double)c;
            for (int64_t i = 0; i < c; i++)
                want[r * c + i] = (x[r * c + i] - m) / sqrt(v + 1e-5) * ga[i] + be[i];
        }
        if (y) check_close(s ? "layer_norm [64,768]" : "layer_norm [6,13]", y, want, rows * c, 1e-5, 1e-5);
        free(x), free(ga), free(be), free(y), free(want);
    }
}

static mpmd_value g_layer_norm(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    float eps = *(const float *)ctx;
    return mpmd_layer_norm(g, p[0], p[1], p[2], eps);
}

/* x as an intermediate and the output scaled: the gradient kernels see an
 * intermediate cotangent that dies at them (in place). */
static mpmd_value g_layer_norm_mid(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    float eps = *(const float *)ctx;
    mpmd_value x = mpmd_add_scalar(g, p[0], 0.5f);
    return mpmd_mul_scalar(g, mpmd_layer_norm(g, x, p[1], p[2], eps), 2.0f);
}

static void test_layer_norm_grads(void) {
    float eps = 1e-5f, eps_big = 0.5f;
    mpmd_type ts[3] = {tu_f32(MPMD_SHAPE(2, 3, 8)), tu_f32(MPMD_SHAPE(8)), tu_f32(MPMD_SHAPE(8))};
    CHECK(tu_gradcheck("layer_norm [2,3,8]", 3, ts, g_layer_norm, &eps, 1e-2, 1e-2), "layer_norm");
    CHECK(tu_gradcheck("layer_norm eps 0.5", 3, ts, g_layer_norm, &eps_big, 1e-2, 1e-2), "layer_norm eps");
    mpmd_type tl[3] = {tu_f32(MPMD_SHAPE(5, 19)), tu_f32(MPMD_SHAPE(19)), tu_f32(MPMD_SHAPE(19))};
    CHECK(tu_gradcheck("layer_norm [5,19] in place", 3, tl, g_layer_norm_mid, &eps, 1e-2, 1e-2),
          "layer_norm");
}

/* ---- RMS norm -------------------------------------------------------------------------- */

static mpmd_value op_rms_norm(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    (void)ctx;
    return mpmd_rms_norm(g, mpmd_mul_scalar(g, xs[0], 1.0f), xs[1], 1e-6f);
}

static void test_rms_norm_values(void) {
    const int64_t shapes[2][2] = {{6, 13}, {64, 768}};
    for (int s = 0; s < 2; s++) {
        int64_t rows = shapes[s][0], c = shapes[s][1];
        ins in = {2, {ty(MPMD_F32, 2, shapes[s]), ty(MPMD_F32, 1, &c)}, {0}};
        float *x = fill_new(rows * c, 51 + s), *sc = fill_new(c, 52);
        in.d[0] = x, in.d[1] = sc;
        int64_t n;
        float *y = run_fwd(&in, op_rms_norm, NULL, 2, &n);
        double *want = malloc((size_t)(rows * c) * sizeof *want);
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t i = 0; i < c; i++)
                ss += (double)x[r * c + i] * x[r * c + i];
            double rs = 1.0 / sqrt(ss / (double)c + 1e-6);
            for (int64_t i = 0; i < c; i++)
                want[r * c + i] = x[r * c + i] * rs * sc[i];
        }
        if (y) check_close(s ? "rms_norm [64,768]" : "rms_norm [6,13]", y, want, rows * c, 1e-5, 1e-5);
        free(x), free(sc), free(y), free(want);
    }
}

static mpmd_value g_rms_norm(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    float eps = *(const float *)ctx;
    return mpmd_rms_norm(g, p[0], p[1], eps);
}

/* x as an intermediate and the output scaled: the backward ops see a
 * cotangent that dies at them (in place) */
static mpmd_value g_rms_norm_mid(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    float eps = *(const float *)ctx;
    return mpmd_mul_scalar(g, mpmd_rms_norm(g, mpmd_add_scalar(g, p[0], 0.5f), p[1], eps), 2.0f);
}

static void test_rms_norm_grads(void) {
    float eps = 1e-6f, eps_big = 0.5f;
    mpmd_type ts[2] = {tu_f32(MPMD_SHAPE(2, 3, 8)), tu_f32(MPMD_SHAPE(8))};
    CHECK(tu_gradcheck("rms_norm [2,3,8]", 2, ts, g_rms_norm, &eps, 1e-2, 1e-2), "rms_norm");
    CHECK(tu_gradcheck("rms_norm eps 0.5", 2, ts, g_rms_norm, &eps_big, 1e-2, 1e-2), "rms_norm eps");
    mpmd_type tl[2] = {tu_f32(MPMD_SHAPE(5, 19)), tu_f32(MPMD_SHAPE(19))};
    CHECK(tu_gradcheck("rms_norm [5,19] in place", 2, tl, g_rms_norm_mid, &eps, 1e-2, 1e-2), "rms_norm");
}

/* ---- rotary position embedding ------------------------------------------------------------ */

typedef struct rope_ctx {
    float base;
    int64_t offset;
} rope_ctx;

static mpmd_value op_rope(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    const rope_ctx *r = ctx;
    return mpmd_rope(g, mpmd_mul_scalar(g, xs[0], 1.0f), r->base, r->offset);
}

/* x [B, T, H, D]: pair (i, i + D/2) at position offset + t turned by
 * (offset + t) base^(-2i/D), in double. */
static void test_rope_values(void) {
    const int64_t dims[4] = {2, 5, 3, 8};
    const rope_ctx cs[2] = {{10000.0f, 0}, {500.0f, 37}};
    for (int c = 0; c < 2; c++) {
        ins in = {1, {ty(MPMD_F32, 4, dims)}, {0}};
        int64_t n = mpmd_type_numel(&in.t[0]), got_n;
        float *x = fill_new(n, 61 + c);
        in.d[0] = x;
        float *y = run_fwd(&in, op_rope, (void *)&cs[c], 2, &got_n);
        double *want = malloc((size_t)n * sizeof *want);
        const int64_t T = dims[1], H = dims[2], D = dims[3];
        for (int64_t b = 0; b < dims[0]; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < H; h++) {
                    const float *xr = x + ((b * T + t) * H + h) * D;
                    double *wr = want + ((b * T + t) * H + h) * D;
                    for (int64_t i = 0; i < D / 2; i++) {
                        double ang =
                            (double)(cs[c].offset + t) * pow(cs[c].base, -2.0 * (double)i / (double)D);
                        wr[i] = xr[i] * cos(ang) - xr[i + D / 2] * sin(ang);
                        wr[i + D / 2] = xr[i] * sin(ang) + xr[i + D / 2] * cos(ang);
                    }
                }
        if (y) check_close(c ? "rope offset 37" : "rope", y, want, n, 1e-6, 1e-5);
        /* position 0 of the first case is the identity, bit for bit */
        if (y && c == 0)
            CHECK(memcmp(y, x, (size_t)(H * D) * sizeof *x) == 0, "rope at position 0 changes x");
        free(x), free(y), free(want);
    }
}

static mpmd_value g_rope(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const rope_ctx *r = ctx;
    return mpmd_rope(g, p[0], r->base, r->offset);
}

/* rope then its gradient's op: the inverse brings x back (to rounding) */
static mpmd_value g_rope_mid(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const rope_ctx *r = ctx;
    return mpmd_mul_scalar(g, mpmd_rope(g, mpmd_add_scalar(g, p[0], 0.25f), r->base, r->offset), 3.0f);
}

static void test_rope_grads(void) {
    rope_ctx r0 = {10000.0f, 0}, r1 = {100.0f, 5};
    mpmd_type t = tu_f32(MPMD_SHAPE(2, 4, 2, 6));
    CHECK(tu_gradcheck("rope", 1, &t, g_rope, &r0, 1e-2, 1e-2), "rope");
    CHECK(tu_gradcheck("rope offset 5, in place", 1, &t, g_rope_mid, &r1, 1e-2, 1e-2), "rope");
}

/* ---- rotary embedding at run-time positions (mpmd_rope_at) ---------------------------------- */

/* The Llama 3.1 frequency of pair i (D the head size), written here in
 * double from the rule in mpmd.h (mpmd_rope_scaling). */
static double ref_inv_freq(double base, const mpmd_rope_scaling *s, int64_t i, int64_t D) {
    double w = pow(base, -2.0 * (double)i / (double)D);
    if (!s || s->factor == 0.0f) return w;
    double L = (double)s->original_positions, lambda = 6.283185307179586 / w;
    if (lambda < L / s->high_freq_factor) return w;
    if (lambda > L / s->low_freq_factor) return w / s->factor;
    double sm = (L / lambda - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - sm) * w / s->factor + sm * w;
}

/* y = rope_at(x, positions) on the executor; x [B, T, H, D], positions of
 * pdims (i32); NULL after a failed check. */
static float *run_rope_at(const float *x, const int64_t *xd, const int32_t *pos, int pnd, const int64_t *pd,
                          float base, const mpmd_rope_scaling *s) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, 4, xd), pv = mpmd_input(g, "positions", MPMD_I32, pnd, pd);
    mpmd_value y = mpmd_rope_at(g, xv, pv, base, s);
    mpmd_keep(g, y);
    if (mpmd_graph_status(g)) {
        CHECK(0, "rope_at: %s", mpmd_graph_error(g));
        mpmd_graph_free(g);
        return NULL;
    }
    mpmd_type tx = mpmd_value_type(g, xv), tp = mpmd_value_type(g, pv);
    float *out = malloc(mpmd_type_bytes(&tx));
    mpmd_exec *ex = tu_exec(g, 2);
    int ok = mpmd_exec_set_input(ex, xv, x, mpmd_type_bytes(&tx)) == MPMD_OK &&
             mpmd_exec_set_input(ex, pv, pos, mpmd_type_bytes(&tp)) == MPMD_OK &&
             mpmd_exec_run(ex) == MPMD_OK && mpmd_exec_read(ex, y, out, mpmd_type_bytes(&tx)) == MPMD_OK;
    CHECK(ok, "rope_at: %s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    if (!ok) free(out);
    return ok ? out : NULL;
}

/* x [B, T, H, D] with a position per row (negative, large and repeated ones
 * among them), plain and with Llama 3.1's scaling (every branch of the rule:
 * D 16 at base 500000 puts wavelengths on both sides of L / 4 and L / 1
 * for L 64), against the rotation in double; positions [T] equal to offset
 * + t give mpmd_rope's bits; the gradient by finite differences. */
static void test_rope_at(void) {
    const int64_t xd[4] = {2, 3, 2, 16}, pd[2] = {2, 3}, B = 2, T = 3, H = 2, D = 16;
    const int32_t pos[6] = {0, 5, -7, 70000, 3, 3};
    const mpmd_rope_scaling l3 = {8.0f, 1.0f, 4.0f, 64};
    const int64_t n = B * T * H * D;
    float *x = fill_new(n, 71);
    for (int sc = 0; sc < 2; sc++) {
        const mpmd_rope_scaling *s = sc ? &l3 : NULL;
        const float base = sc ? 500000.0f : 10000.0f;
        float *y = run_rope_at(x, xd, pos, 2, pd, base, s);
        double *want = malloc((size_t)n * sizeof *want);
        int branch[3] = {0, 0, 0};
        for (int64_t i = 0; sc && i < D / 2; i++) {
            double lambda = 6.283185307179586 / pow(base, -2.0 * (double)i / (double)D);
            branch[lambda < 64.0 / 4 ? 0 : lambda > 64.0 ? 1 : 2]++;
        }
        if (sc)
            CHECK(branch[0] && branch[1] && branch[2], "the scaled case reaches every branch (%d %d %d)",
                  branch[0], branch[1], branch[2]);
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t h = 0; h < H; h++) {
                const float *xr = x + (r * H + h) * D;
                double *wr = want + (r * H + h) * D;
                for (int64_t i = 0; i < D / 2; i++) {
                    double ang = (double)pos[r] * ref_inv_freq(base, s, i, D);
                    wr[i] = xr[i] * cos(ang) - xr[i + D / 2] * sin(ang);
                    wr[i + D / 2] = xr[i] * sin(ang) + xr[i + D / 2] * cos(ang);
                }
            }
        if (y) check_close(sc ? "rope_at, llama3 scaling" : "rope_at", y, want, n, 1e-6, 1e-5);
        free(y), free(want);
    }
    /* positions [T] = 37 + t: mpmd_rope's offset form, bit for bit */
    const int32_t seq[3] = {37, 38, 39};
    float *y = run_rope_at(x, xd, seq, 1, (const int64_t[]){T}, 500.0f, NULL);
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, 4, xd), r = mpmd_rope(g, xv, 500.0f, 37);
    mpmd_keep(g, r);
    mpmd_exec *ex = tu_exec(g, 1);
    float *z = malloc((size_t)n * sizeof *z);
    CHECK(mpmd_exec_set_input(ex, xv, x, (size_t)n * sizeof *x) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, r, z, (size_t)n * sizeof *z) == MPMD_OK,
          "rope: %s", mpmd_exec_error(ex));
    CHECK(y && memcmp(y, z, (size_t)n * sizeof *z) == 0,
          "rope_at at positions 37.. differs from rope offset 37");
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    free(x), free(y), free(z);
}

static mpmd_value g_rope_at(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    static const int32_t pos[8] = {4, 0, -3, 900, 17, 17, 2, 1};
    mpmd_value pv = mpmd_constant(g, MPMD_I32, MPMD_SHAPE(2, 4), pos);
    return mpmd_mul_scalar(g, mpmd_rope_at(g, mpmd_add_scalar(g, p[0], 0.25f), pv, 300.0f, ctx), 3.0f);
}

static void test_rope_at_grads(void) {
    const mpmd_rope_scaling l3 = {4.0f, 1.0f, 2.0f, 40};
    mpmd_type t = tu_f32(MPMD_SHAPE(2, 4, 2, 6));
    CHECK(tu_gradcheck("rope_at", 1, &t, g_rope_at, NULL, 1e-2, 1e-2), "rope_at");
    CHECK(tu_gradcheck("rope_at, llama3 scaling", 1, &t, g_rope_at, (void *)&l3, 1e-2, 1e-2),
          "rope_at scaled");
}

/* Positions of another type or shape, and a scaling out of range, are
 * errors naming the call and what is wrong. */
static void test_rope_at_errors(void) {
    struct {
        int pnd;
        int64_t pd[3];
        mpmd_dtype dt;
        mpmd_rope_scaling s;
        const char *want;
    } cs[] = {
        {2, {2, 3}, MPMD_F32, {0, 0, 0, 0}, "i32 [..., T]"},
        {2, {3, 2}, MPMD_I32, {0, 0, 0, 0}, "positions are i32[3,2] for x f32[2,3,2,16]"},
        {1, {2}, MPMD_I32, {0, 0, 0, 0}, "i32 [..., T]"},
        {3, {2, 3, 1}, MPMD_I32, {0, 0, 0, 0}, "i32 [..., T]"},
        {2, {2, 3}, MPMD_I32, {0.5f, 1.0f, 4.0f, 64}, "factor 0.5"},
        {2, {2, 3}, MPMD_I32, {8.0f, 4.0f, 4.0f, 64}, "low < high"},
        {2, {2, 3}, MPMD_I32, {8.0f, 1.0f, 4.0f, 0}, "original positions 0"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 2, 16));
        mpmd_value p = mpmd_input(g, "p", cs[k].dt, cs[k].pnd, cs[k].pd);
        TU_DROP(mpmd_rope_at(g, x, p, 10000.0f, &cs[k].s));
        CHECK(mpmd_graph_status(g) != MPMD_OK && strstr(mpmd_graph_error(g), "mpmd_rope_at") &&
                  strstr(mpmd_graph_error(g), cs[k].want),
              "case %zu: \"%s\" (want \"%s\")", k, mpmd_graph_error(g), cs[k].want);
        mpmd_graph_free(g);
    }
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 2, 16));
    TU_DROP(mpmd_rope_at(g, x, MPMD_NONE, 10000.0f, NULL));
    CHECK(strstr(mpmd_graph_error(g), "mpmd_rope_at: no positions"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

/* ---- take ------------------------------------------------------------------------------------ */

typedef struct take_ctx {
    int axis;
    int ndim;
    int64_t dims[3];
    int32_t ids[6];
} take_ctx;

static mpmd_value g_take(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const take_ctx *c = ctx;
    return mpmd_take(g, p[0], mpmd_constant(g, MPMD_I32, c->ndim, c->dims, c->ids), c->axis);
}

/* x [3, 5, 4] taken along each axis by ids [2, 3] (repeats included),
 * against the index formula; and the gradients. */
static void test_take(void) {
    const int64_t xd[3] = {3, 5, 4};
    float x[60];
    tu_fill(x, 60, 71);
    const take_ctx cs[4] = {{0, 2, {2, 3}, {2, 0, 2, 1, 1, 0}},
                            {1, 2, {2, 3}, {4, 0, 4, 3, 1, 2}},
                            {-1, 2, {2, 3}, {3, 3, 0, 1, 2, 0}},
                            {1, 1, {1}, {2}}};
    for (int c = 0; c < 4; c++) {
        const take_ctx *tc = &cs[c];
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value xv = mpmd_input(g, "x", MPMD_F32, 3, xd);
        mpmd_value y = g_take(g, &xv, (void *)tc);
        mpmd_keep(g, y);
        int ax = tc->axis < 0 ? tc->axis + 3 : tc->axis;
        mpmd_type yt = mpmd_value_type(g, y);
        /* [A..., I..., B...] */
        int ok = yt.ndim == 2 + tc->ndim;
        int k = 0;
        for (int d = 0; ok && d < ax; d++)
            ok = yt.dim[k++] == xd[d];
        for (int d = 0; ok && d < tc->ndim; d++)
            ok = yt.dim[k++] == tc->dims[d];
        for (int d = ax + 1; ok && d < 3; d++)
            ok = yt.dim[k++] == xd[d];
        CHECK(ok, "take axis %d: result %s", tc->axis, mpmd_tstr(g, y));
        mpmd_exec *ex = tu_exec(g, 1);
        CHECK(mpmd_exec_set_input(ex, xv, x, sizeof x) == MPMD_OK, "%s", mpmd_exec_error(ex));
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        int64_t ny = mpmd_type_numel(&yt), ni = 1;
        for (int d = 0; d < tc->ndim; d++)
            ni *= tc->dims[d];
        float *got = malloc((size_t)ny * sizeof *got);
        CHECK(mpmd_exec_read(ex, y, got, (size_t)ny * sizeof *got) == MPMD_OK, "%s", mpmd_exec_error(ex));
        int64_t inner = 1, outer = 1;
        for (int d = ax + 1; d < 3; d++)
            inner *= xd[d];
        for (int d = 0; d < ax; d++)
            outer *= xd[d];
        int bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < ni; j++)
                for (int64_t i = 0; i < inner; i++) {
                    float want = x[(o * xd[ax] + tc->ids[j]) * inner + i];
                    bad += memcmp(&got[(o * ni + j) * inner + i], &want, sizeof want) != 0;
                }
        CHECK(bad == 0, "take axis %d: %d elements differ from x[..., ids, ...]", tc->axis, bad);
        free(got);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
        mpmd_type t = tu_f32(3, xd);
        char label[64];
        snprintf(label, sizeof label, "take axis %d", tc->axis);
        CHECK(tu_gradcheck(label, 1, &t, g_take, (void *)tc, 1e-2, 1e-2), "%s", label);
    }
}

/* ---- embedding ------------------------------------------------------------------------- */

static mpmd_value op_embedding(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    (void)ctx;
    return mpmd_embedding(g, xs[0], xs[1]);
}

static void test_embedding_values(void) {
    int64_t v = 50, c = 24;
    ins in = {2, {ty(MPMD_F32, MPMD_SHAPE(50, 24)), ty(MPMD_I32, MPMD_SHAPE(3, 7))}, {0}};
    float *table = fill_new(v * c, 51);
    int32_t *ids = ids_new(21, (int32_t)v, 52);
    ids[0] = 0, ids[20] = (int32_t)v - 1, ids[5] = ids[6] = 17;
    in.d[0] = table, in.d[1] = ids;
    int64_t n;
    float *y = run_fwd(&in, op_embedding, NULL, 2, &n);
    int same = y && n == 21 * c;
    for (int64_t p = 0; same && p < 21; p++)
        same = memcmp(y + p * c, table + ids[p] * c, (size_t)c * 4) == 0;
    CHECK(same, "embedding rows are not the table's rows");
    free(table), free(ids), free(y);
}

typedef struct emb_ctx {
    int n;
    int32_t ids[12];
    int64_t dims[2];
    int ndim;
} emb_ctx;

static mpmd_value g_embedding(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const emb_ctx *e = ctx;
    mpmd_value ids = mpmd_constant(g, MPMD_I32, e->ndim, e->dims, e->ids);
    return mpmd_embedding(g, p[0], ids);
}

static void test_embedding_grads(void) {
    /* repeated ids (3 three times, 0 twice), ids never used (gradient 0) */
    emb_ctx e = {12, {3, 0, 5, 3, 7, 3, 0, 1, 6, 2, 9, 4}, {3, 4}, 2};
    mpmd_type t = tu_f32(MPMD_SHAPE(10, 6));
    CHECK(tu_gradcheck("embedding, repeated ids", 1, &t, g_embedding, &e, 1e-2, 1e-2), "embedding");
    /* and exactly: d table = scatter-add of the cotangent rows */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value table = mpmd_param(g, "table", MPMD_SHAPE(10, 6), MPMD_NORMAL(1.0f));
    mpmd_value ids = mpmd_constant(g, MPMD_I32, 2, e.dims, e.ids);
    float w[72];
    tu_fill(w, 72, 5);
    mpmd_value wc = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(3, 4, 6), w);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, mpmd_embedding(g, table, ids), wc), 0, NULL, 0);
    mpmd_value gt;
    mpmd_grad(g, loss, 1, &table, &gt);
    mpmd_keep(g, gt);
    mpmd_exec *ex = tu_exec(g, 2);
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    float got[60], want[60] = {0};
    CHECK(mpmd_exec_read(ex, gt, got, sizeof got) == MPMD_OK, "%s", mpmd_exec_error(ex));
    for (int p = 0; p < 12; p++)
        for (int j = 0; j < 6; j++)
            want[e.ids[p] * 6 + j] += w[p * 6 + j];
    CHECK(memcmp(got, want, sizeof got) == 0, "embedding gradient differs from the in-order scatter-add");
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

static mpmd_value op_cross_entropy(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    (void)ctx;
    return mpmd_cross_entropy(g, mpmd_mul_scalar(g, xs[0], 1.0f), xs[1]);
}

static void test_cross_entropy_values(void) {
    const int64_t shapes[2][3] = {{2, 3, 17}, {4, 8, 3000}};
    for (int s = 0; s < 2; s++) {
        int64_t rows = shapes[s][0] * shapes[s][1], v = shapes[s][2];
        ins in = {2, {ty(MPMD_F32, 3, shapes[s]), ty(MPMD_I32, 2, shapes[s])}, {0}};
        float *x = fill_new(rows * v, 61 + s);
        for (int64_t i = 0; i < rows * v; i++)
            x[i] *= 10.0f;
        int32_t *lab = ids_new(rows, (int32_t)v, 62);
        in.d[0] = x, in.d[1] = lab;
        int64_t n;
        float *y = run_fwd(&in, op_cross_entropy, NULL, 2, &n);
        double *want = malloc((size_t)rows * sizeof *want);
        for (int64_t r = 0; r < rows; r++) {
            double m = -INFINITY, sum = 0;
            for (int64_t i = 0; i < v; i++)
                m = fmax(m, x[r * v + i]);
            for (int64_t i = 0; i < v; i++)
                sum += exp(x[r * v + i] - m);
            want[r] = m + log(sum) - x[r * v + lab[r]];
        }
        if (y)
            check_close(s ? "cross_entropy [4,8,3000]" : "cross_entropy [2,3,17]", y, want, rows, 1e-5, 1e-5);
        free(x), free(lab), free(y), free(want);
    }
}

typedef struct ce_ctx {
    int32_t labels[12];
    int64_t dims[2];
    int mid;
} ce_ctx;

static mpmd_value g_cross_entropy(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const ce_ctx *c = ctx;
    mpmd_value lab = mpmd_constant(g, MPMD_I32, 2, c->dims, c->labels);
    /* with mid, the logits are an intermediate that dies at the fused
     * backward op, which then writes the gradient over them */
    mpmd_value logits = c->mid ? mpmd_mul_scalar(g, p[0], 2.0f) : p[0];
    return mpmd_cross_entropy(g, logits, lab);
}

static void test_cross_entropy_grads(void) {
    ce_ctx c = {{0, 4, 9, 2, 2, 7, 1, 0, 3, 8, 5, 6}, {3, 4}, 0};
    mpmd_type t = tu_f32(MPMD_SHAPE(3, 4, 10));
    CHECK(tu_gradcheck("cross_entropy", 1, &t, g_cross_entropy, &c, 1e-2, 1e-2), "cross_entropy");
    c.mid = 1;
    CHECK(tu_gradcheck("cross_entropy (in place)", 1, &t, g_cross_entropy, &c, 1e-2, 1e-2), "cross_entropy");
}

/* ---- attention --------------------------------------------------------------------------- */

static mpmd_value op_attention(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    return mpmd_attention(g, xs[0], xs[1], xs[2], *(const int *)ctx);
}

static void ref_attention(const float *q, const float *k, const float *v, int64_t B, int64_t T, int64_t H,
                          int64_t D, int causal, double *o) {
    double *p = malloc((size_t)T * sizeof *p);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                int64_t len = causal ? i + 1 : T;
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < len; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < D; e++)
                        d += (double)q[((b * T + i) * H + h) * D + e] * k[((b * T + j) * H + h) * D + e];
                    p[j] = d / sqrt((double)D);
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < len; j++)
                    s += (p[j] = exp(p[j] - m));
                for (int64_t e = 0; e < D; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < len; j++)
                        acc += p[j] / s * v[((b * T + j) * H + h) * D + e];
                    o[((b * T + i) * H + h) * D + e] = acc;
                }
            }
    free(p);
}

/* [2, 9, 3, 4], and [1, 150, 2, 8]: more positions than the CPU kernel's
 * query block (32 at this length), so a head's queries span several
 * blocks, the last ragged. */
static void test_attention_values(void) {
    static const int64_t shapes[2][4] = {{2, 9, 3, 4}, {1, 150, 2, 8}};
    for (int sh = 0; sh < 2; sh++) {
        int64_t B = shapes[sh][0], T = shapes[sh][1], H = shapes[sh][2], D = shapes[sh][3];
        int64_t dims[4] = {B, T, H, D}, cnt = B * T * H * D;
        float *q = fill_new(cnt, 71), *k = fill_new(cnt, 72), *v = fill_new(cnt, 73);
        for (int64_t i = 0; i < cnt; i++)
            q[i] *= 3.0f;
        ins in = {3, {ty(MPMD_F32, 4, dims), ty(MPMD_F32, 4, dims), ty(MPMD_F32, 4, dims)}, {q, k, v}};
        double *want = malloc((size_t)cnt * sizeof *want);
        for (int causal = 0; causal <= 1; causal++) {
            int64_t n;
            float *y = run_fwd(&in, op_attention, &causal, 2, &n);
            ref_attention(q, k, v, B, T, H, D, causal, want);
            char label[64];
            snprintf(label, sizeof label, "attention%s T=%lld", causal ? " causal" : "", (long long)T);
            if (y) check_close(label, y, want, cnt, 1e-5, 1e-5);
            free(y);
        }
        free(q), free(k), free(v), free(want);
    }
}

static mpmd_value g_attention(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    return mpmd_attention(g, p[0], p[1], p[2], *(const int *)ctx);
}

static void test_attention_grads(void) {
    mpmd_type t = tu_f32(MPMD_SHAPE(2, 5, 2, 4));
    mpmd_type ts[3] = {t, t, t};
    int causal = 0;
    CHECK(tu_gradcheck("attention", 3, ts, g_attention, &causal, 1e-2, 1e-2), "attention");
    causal = 1;
    CHECK(tu_gradcheck("attention causal", 3, ts, g_attention, &causal, 1e-2, 1e-2), "attention causal");
    mpmd_type t3 = tu_f32(MPMD_SHAPE(2, 5, 3, 4));
    mpmd_type ts3[3] = {t3, t3, t3};
    for (causal = 0; causal <= 1; causal++)
        CHECK(tu_gradcheck(causal ? "attention causal [2,5,3,4]" : "attention [2,5,3,4]", 3, ts3, g_attention,
                           &causal, 1e-2, 1e-2),
              "attention [2,5,3,4]");
    /* 70 positions: three query blocks of the CPU kernel, so dK and dV sum
     * over blocks and the causal mask cuts the later blocks' keys */
    mpmd_type tl = tu_f32(MPMD_SHAPE(1, 70, 2, 4));
    mpmd_type tsl[3] = {tl, tl, tl};
    for (causal = 0; causal <= 1; causal++)
        CHECK(tu_gradcheck(causal ? "attention causal [1,70,2,4]" : "attention [1,70,2,4]", 3, tsl,
                           g_attention, &causal, 1e-2, 1e-2),
              "attention [1,70,2,4]");
}

/* ---- run-time errors ----------------------------------------------------------------------- */

static void test_runtime_errors(void) {
    float table[40];
    tu_fill(table, 40, 1);
    int32_t ids[6] = {1, 2, 3, 4, 12, 0}; /* id 12 at position 4 = [1,1], table has 10 rows */
    ins in = {2, {ty(MPMD_F32, MPMD_SHAPE(10, 4)), ty(MPMD_I32, MPMD_SHAPE(2, 3))}, {table, ids}};
    float *out;
    int64_t n;
    char err[MPMD_ERROR_MSG_MAX];
    mpmd_status st = run_case(&in, op_embedding, NULL, 1, 0, &out, &n, err, sizeof err);
    CHECK(st != MPMD_OK && has(err, "embedding") && has(err, "id 12") && has(err, "position 4") &&
              has(err, "[0, 10)"),
          "bad id: status %d, message \"%s\"", (int)st, err);
    free(out);
    ids[4] = 2, ids[1] = -3;
    st = run_case(&in, op_embedding, NULL, 2, 1, &out, &n, err, sizeof err);
    CHECK(st != MPMD_OK && has(err, "id -3") && has(err, "position 1"),
          "negative id: status %d, message \"%s\"", (int)st, err);
    free(out);

    float logits[24];
    tu_fill(logits, 24, 2);
    int32_t labels[4] = {0, 5, 6, 1}; /* V = 6: label 6 at position 2 */
    ins ce = {2, {ty(MPMD_F32, MPMD_SHAPE(4, 6)), ty(MPMD_I32, MPMD_SHAPE(4))}, {logits, labels}};
    st = run_case(&ce, op_cross_entropy, NULL, 1, 0, &out, &n, err, sizeof err);
    CHECK(st != MPMD_OK && has(err, "cross_entropy") && has(err, "label 6") && has(err, "position 2"),
          "bad label: status %d, message \"%s\"", (int)st, err);
    free(out);
    labels[2] = 3;
    st = run_case(&ce, op_cross_entropy, NULL, 1, 1, &out, &n, err, sizeof err);
    CHECK(st == MPMD_OK, "good labels: %s", err);
    free(out);
}

/* ---- build-time shape errors --------------------------------------------------------------- */

static void expect_error(mpmd_graph *g, const char *a, const char *b, const char *c) {
    const char *msg = mpmd_graph_error(g);
    CHECK(mpmd_graph_status(g) != MPMD_OK && has(msg, a) && has(msg, b) && has(msg, c),
          "expected an error naming \"%s\", \"%s\", \"%s\"; got \"%s\"", a, b, c, msg);
}

/* The new LLaMA-family ops: each bad operand is an error naming the op and
 * what is wrong. */
static void test_llama_op_errors(void) {
    struct {
        int which;
        const char *a, *b, *c;
    } cases[] = {
        {0, "mpmd_rms_norm", "f32[3,4]", "f32[5]"},
        {1, "mpmd_rms_norm", "eps", "-1"},
        {2, "mpmd_rope", "f32[3,4]", "[..., T, H, D]"},
        {3, "mpmd_rope", "D = 5", "even"},
        {4, "mpmd_rope", "base", "0.5"},
        {5, "mpmd_rope", "offset", "-1"},
        {6, "mpmd_take", "axis 2", "f32[3,4]"},
        {7, "mpmd_take", "ids must be i32", "f32[5]"},
        {8, "mpmd_compare", "comparison 9", "mpmd_cmp"},
        {9, "mpmd_where", "f32[3,4]", "f32[5]"},
        {10, "mpmd_dropout", "rate 1", "[0, 1)"},
        {11, "mpmd_dropout", "key", "i32 with 2 elements"},
        {12, "mpmd_maximum", "f32[3,4]", "f32[5]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(3, 4));
        mpmd_value v5 = mpmd_input(g, "v5", MPMD_F32, MPMD_SHAPE(5));
        mpmd_value x4 = mpmd_input(g, "x4", MPMD_F32, MPMD_SHAPE(2, 3, 2, 5));
        mpmd_value x6 = mpmd_input(g, "x6", MPMD_F32, MPMD_SHAPE(2, 3, 2, 6));
        mpmd_value key3 = mpmd_input(g, "key3", MPMD_I32, MPMD_SHAPE(3));
        mpmd_value key = mpmd_input(g, "key", MPMD_I32, MPMD_SHAPE(2));
        mpmd_value r = MPMD_NONE;
        switch (cases[k].which) {
        case 0: r = mpmd_rms_norm(g, a, v5, 1e-6f); break;
        case 1: r = mpmd_rms_norm(g, a, mpmd_slice(g, v5, 0, 0, 4), -1.0f); break;
        case 2: r = mpmd_rope(g, a, 10000.0f, 0); break;
        case 3: r = mpmd_rope(g, x4, 10000.0f, 0); break;
        case 4: r = mpmd_rope(g, x6, 0.5f, 0); break;
        case 5: r = mpmd_rope(g, x6, 10000.0f, -1); break;
        case 6: r = mpmd_take(g, a, key, 2); break;
        case 7: r = mpmd_take(g, a, v5, 0); break;
        case 8: r = mpmd_compare(g, a, a, (mpmd_cmp)9); break;
        case 9: r = mpmd_where(g, a, a, v5); break;
        case 10: r = mpmd_dropout(g, a, 1.0f, key); break;
        case 11: r = mpmd_dropout(g, a, 0.5f, key3); break;
        default: r = mpmd_maximum(g, a, v5); break;
        }
        CHECK(!mpmd_is_value(r), "case %zu (%s) accepted", k, cases[k].a);
        expect_error(g, cases[k].a, cases[k].b, cases[k].c);
        mpmd_graph_free(g);
    }
}

static void test_shape_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(3, 4));
    mpmd_value b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(5, 6));
    CHECK(!mpmd_is_value(mpmd_matmul(g, a, b, 0)), "matmul K mismatch accepted");
    expect_error(g, "mpmd_matmul", "f32[3,4]", "f32[5,6]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(3, 4, 5));
    TU_DROP(mpmd_matmul(g, a, b, 0));
    expect_error(g, "mpmd_matmul", "f32[2,3,4]", "f32[3,4,5]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(2, 2, 4, 5));
    TU_DROP(mpmd_matmul(g, a, b, 0));
    expect_error(g, "mpmd_matmul", "f32[2,3,4]", "f32[2,2,4,5]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4));
    b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(4, 5));
    TU_DROP(mpmd_matmul(g, a, b, 0));
    expect_error(g, "mpmd_matmul", "f32[4]", "2 dimensions");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(3, 4));
    b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(3, 5));
    TU_DROP(mpmd_matmul(g, a, b, MPMD_TRANS_A | MPMD_TRANS_B)); /* a^T [4,3] b^T [5,3]: K 3 vs 5 */
    expect_error(g, "mpmd_matmul", "K = 3", "K = 5");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 4, 5));
    TU_DROP(mpmd_softmax_causal(g, a));
    expect_error(g, "mpmd_softmax_causal", "f32[2,4,5]", "[..., T, T]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    a = mpmd_input(g, "a", MPMD_I32, MPMD_SHAPE(2, 4));
    TU_DROP(mpmd_softmax(g, a));
    expect_error(g, "mpmd_softmax", "i32[2,4]", "f32");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 8));
    mpmd_value ga = mpmd_input(g, "gamma", MPMD_F32, MPMD_SHAPE(7));
    mpmd_value be = mpmd_input(g, "beta", MPMD_F32, MPMD_SHAPE(8));
    TU_DROP(mpmd_layer_norm(g, x, ga, be, 1e-5f));
    expect_error(g, "mpmd_layer_norm", "f32[4,8]", "f32[7]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value t = mpmd_input(g, "t", MPMD_F32, MPMD_SHAPE(10, 4));
    mpmd_value fi = mpmd_input(g, "ids", MPMD_F32, MPMD_SHAPE(3));
    TU_DROP(mpmd_embedding(g, t, fi));
    expect_error(g, "mpmd_embedding", "f32[3]", "i32");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value lg = mpmd_input(g, "logits", MPMD_F32, MPMD_SHAPE(4, 6, 10));
    mpmd_value lb = mpmd_input(g, "labels", MPMD_I32, MPMD_SHAPE(4, 5));
    TU_DROP(mpmd_cross_entropy(g, lg, lb));
    expect_error(g, "mpmd_cross_entropy", "f32[4,6,10]", "i32[4,6]");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value q = mpmd_input(g, "q", MPMD_F32, MPMD_SHAPE(2, 8, 4, 16));
    mpmd_value k = mpmd_input(g, "k", MPMD_F32, MPMD_SHAPE(2, 8, 4, 16));
    mpmd_value v = mpmd_input(g, "v", MPMD_F32, MPMD_SHAPE(2, 8, 64));
    TU_DROP(mpmd_attention(g, q, k, v, 1));
    expect_error(g, "mpmd_attention", "f32[2,8,64]", "[B, T, H, Dh]");
    mpmd_graph_free(g);
}

/* ---- 1 vs 2 threads ------------------------------------------------------------------------ */

static void test_threads(void) {
    int quick = tu_quick();
    /* an OpenBLAS product of the GPT-2 MLP's shape, forward and both
     * gradients: OpenBLAS must not change bits with its thread count */
    {
        mm_case c = {2, 2, {256, 768}, {768, 3072}, 0};
        if (quick) c.da[0] = 64, c.da[1] = 256, c.db[0] = 256, c.db[1] = 512;
        ins in = {2, {ty(MPMD_F32, 2, c.da), ty(MPMD_F32, 2, c.db)}, {0}};
        float *a = fill_new(mpmd_type_numel(&in.t[0]), 1), *b = fill_new(mpmd_type_numel(&in.t[1]), 2);
        in.d[0] = a, in.d[1] = b;
        check_threads("matmul [256,768]x[768,3072]", &in, op_matmul, &c);
        free(a), free(b);
    }
    /* batched a with a shared b (folded), transposed a with a shared b (per
     * item), and batched attention-shaped products (parallel over items) */
    {
        const mm_case cs[] = {
            {3, 2, {4, 64, 192}, {192, 256}, 0},
            {3, 2, {8, 96, 64}, {96, 128}, MPMD_TRANS_A},
            {4, 4, {4, 12, 64, 64}, {4, 12, 64, 64}, MPMD_TRANS_B},
            {4, 4, {2, 3, 64, 64}, {2, 3, 64, 48}, 0},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            ins in = {2, {ty(MPMD_F32, cs[i].nda, cs[i].da), ty(MPMD_F32, cs[i].ndb, cs[i].db)}, {0}};
            float *a = fill_new(mpmd_type_numel(&in.t[0]), 3), *b = fill_new(mpmd_type_numel(&in.t[1]), 4);
            in.d[0] = a, in.d[1] = b;
            char label[64];
            snprintf(label, sizeof label, "batched matmul case %zu", i);
            check_threads(label, &in, op_matmul, (void *)&cs[i]);
            free(a), free(b);
        }
    }
    for (int kind = 0; kind < 3; kind++) {
        int64_t dims[3] = {4, 128, 128};
        if (kind != SM_CAUSAL) dims[1] = 100, dims[2] = 333;
        ins in = {1, {ty(MPMD_F32, 3, dims)}, {0}};
        float *x = fill_new(mpmd_type_numel(&in.t[0]), 5);
        in.d[0] = x;
        check_threads(kind == SM_PLAIN ? "softmax"
                      : kind == SM_LOG ? "log_softmax"
                                       : "softmax_causal",
                      &in, op_softmax, &kind);
        free(x);
    }
    {
        int64_t rows = quick ? 128 : 512, c = 768;
        ins in = {3, {ty(MPMD_F32, MPMD_SHAPE(rows, c)), ty(MPMD_F32, 1, &c), ty(MPMD_F32, 1, &c)}, {0}};
        float *x = fill_new(rows * c, 6), *ga = fill_new(c, 7), *be = fill_new(c, 8);
        in.d[0] = x, in.d[1] = ga, in.d[2] = be;
        check_threads("layer_norm", &in, op_layer_norm, NULL);
        free(x), free(ga), free(be);
    }
    {
        int64_t rows = quick ? 128 : 512, c = 768;
        ins in = {2, {ty(MPMD_F32, MPMD_SHAPE(rows, c)), ty(MPMD_F32, 1, &c)}, {0}};
        float *x = fill_new(rows * c, 16), *sc = fill_new(c, 17);
        in.d[0] = x, in.d[1] = sc;
        check_threads("rms_norm", &in, op_rms_norm, NULL);
        free(x), free(sc);
    }
    {
        int64_t dims[4] = {4, 64, 4, 32};
        rope_ctx r = {10000.0f, 3};
        ins in = {1, {ty(MPMD_F32, 4, dims)}, {0}};
        float *x = fill_new(mpmd_type_numel(&in.t[0]), 18);
        in.d[0] = x;
        check_threads("rope", &in, op_rope, &r);
        free(x);
    }
    {
        int64_t v = 2000, c = 256, np = 512;
        ins in = {2, {ty(MPMD_F32, MPMD_SHAPE(v, c)), ty(MPMD_I32, MPMD_SHAPE(4, np / 4))}, {0}};
        float *table = fill_new(v * c, 9);
        int32_t *ids = ids_new(np, 300, 10); /* many repeats */
        in.d[0] = table, in.d[1] = ids;
        check_threads("embedding", &in, op_embedding, NULL);
        free(table), free(ids);
    }
    {
        int64_t rows = 64, v = quick ? 2000 : 5000;
        ins in = {2, {ty(MPMD_F32, MPMD_SHAPE(rows, v)), ty(MPMD_I32, 1, &rows)}, {0}};
        float *x = fill_new(rows * v, 11);
        int32_t *lab = ids_new(rows, (int32_t)v, 12);
        in.d[0] = x, in.d[1] = lab;
        check_threads("cross_entropy", &in, op_cross_entropy, NULL);
        free(x), free(lab);
    }
    /* two query blocks per head, and five (the last ragged) over 5 heads */
    for (int c = 0; c < 4; c++) {
        int causal = c & 1;
        int64_t dims[4] = {2, 64, 4, 32};
        if (c >= 2) dims[1] = 150, dims[2] = 5, dims[3] = 16;
        ins in = {3, {ty(MPMD_F32, 4, dims), ty(MPMD_F32, 4, dims), ty(MPMD_F32, 4, dims)}, {0}};
        int64_t cnt = mpmd_type_numel(&in.t[0]);
        float *q = fill_new(cnt, 13), *k = fill_new(cnt, 14), *v = fill_new(cnt, 15);
        in.d[0] = q, in.d[1] = k, in.d[2] = v;
        char label[64];
        snprintf(label, sizeof label, "attention%s T=%lld", causal ? " causal" : "", (long long)dims[1]);
        check_threads(label, &in, op_attention, &causal);
        free(q), free(k), free(v);
    }
}

/* The checker itself: a gradient 0.5% off fails, for every op family here. */
static void test_gradcheck_catches_half_a_percent(void) {
    static const mm_case mm = {2, 2, {3, 4}, {4, 5}, 0};
    static const int kind = SM_PLAIN;
    static const float eps = 1e-5f;
    mpmd_type tm[2] = {tu_f32(2, mm.da), tu_f32(2, mm.db)};
    mpmd_type t37 = tu_f32(2, (const int64_t[]){3, 7});
    mpmd_type tl[3] = {tu_f32(2, (const int64_t[]){3, 8}), tu_f32(1, (const int64_t[]){8}),
                       tu_f32(1, (const int64_t[]){8})};
    int saved_checks = tu_checks, saved_failures = tu_failures;
    tu_gradcheck_ad_scale = 1.005;
    tu_gradcheck_quiet = 1;
    int passed[3] = {tu_gradcheck("matmul x1.005", 2, tm, g_matmul, (void *)&mm, 1e-2, 1e-2),
                     tu_gradcheck("softmax x1.005", 1, &t37, g_softmax, (void *)&kind, 1e-2, 1e-2),
                     tu_gradcheck("layer_norm x1.005", 3, tl, g_layer_norm, (void *)&eps, 1e-2, 1e-2)};
    tu_gradcheck_ad_scale = 1.0;
    tu_gradcheck_quiet = 0;
    tu_checks = saved_checks, tu_failures = saved_failures;
    CHECK(!passed[0] && !passed[1] && !passed[2],
          "a gradient scaled by 1.005 passed the check: matmul %d, softmax %d, layer_norm %d", passed[0],
          passed[1], passed[2]);
}

int main(void) {
    test_gradcheck_catches_half_a_percent();
    test_matmul_values();
    test_matmul_grads();
    test_matmul_folded_weight_grad();
    test_softmax_values();
    test_softmax_grads();
    test_layer_norm_values();
    test_layer_norm_grads();
    test_rms_norm_values();
    test_rms_norm_grads();
    test_rope_values();
    test_rope_grads();
    test_rope_at();
    test_rope_at_grads();
    test_rope_at_errors();
    test_take();
    test_embedding_values();
    test_embedding_grads();
    test_cross_entropy_values();
    test_cross_entropy_grads();
    test_attention_values();
    test_attention_grads();
    test_runtime_errors();
    test_shape_errors();
    test_llama_op_errors();
    test_threads();
    return tu_report("test_ops_nn");
}
