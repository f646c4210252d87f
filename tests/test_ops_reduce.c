/* Reductions: sum, mean and max over axis sets. Forward values against
 * naive loops (and, for sums, bit for bit against the documented summation
 * order), gradients against finite differences, max's tie rule, build-time
 * errors, and the same bits on 1 and 2 threads. */
#include "backend/cpu/cpu.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

enum { K_SUM, K_MEAN, K_MAX };
static const char *kind_name[] = {"sum", "mean", "max"};

static mpmd_value reduce_op(mpmd_graph *g, int kind, mpmd_value x, int naxes, const int *axes, int keep) {
    if (kind == K_SUM) return mpmd_sum(g, x, naxes, axes, keep);
    if (kind == K_MEAN) return mpmd_mean(g, x, naxes, axes, keep);
    return mpmd_max(g, x, naxes, axes, keep);
}

/* Run y = reduce(x) on `threads` threads; y's data into out (capacity cap). */
static mpmd_type run_reduce(int kind, const mpmd_type *xt, const float *xd, int naxes, const int *axes,
                            int keep, int threads, float *out, int64_t cap) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, xt->ndim, xt->dim);
    mpmd_value y = reduce_op(g, kind, x, naxes, axes, keep);
    mpmd_keep(g, y);
    mpmd_exec *ex = tu_exec(g, threads);
    mpmd_type yt = mpmd_value_type(g, y);
    int64_t n = mpmd_type_numel(&yt);
    CHECK(n <= cap, "output too large");
    CHECK(mpmd_exec_set_input(ex, x, xd, mpmd_type_bytes(xt)) == MPMD_OK, "%s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_read(ex, y, out, (size_t)n * sizeof(float)) == MPMD_OK, "%s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return yt;
}

/* The documented order, written independently of the kernels: gather each
 * output's reduced elements in row-major order; if the last axis of size
 * > 1 is reduced, L = the product of the trailing reduced axes (size-1 axes
 * skipped) and the result is sum_f32(run 0) + sum_f32(run 1) + ... over
 * runs of L; otherwise the gathered elements are added one by one. */
static void ref_reduce(int kind, const mpmd_type *xt, int mask, const float *x, float *y, float *buf) {
    int nd = xt->ndim;
    int64_t L = 1, count = 1, n_out = 1;
    int inner = 0;
    for (int i = nd - 1; i >= 0; i--) {
        if (xt->dim[i] == 1) continue;
        if (!(mask & (1 << i))) break;
        inner = 1;
        L *= xt->dim[i];
    }
    for (int i = 0; i < nd; i++) {
        if (mask & (1 << i))
            count *= xt->dim[i];
        else
            n_out *= xt->dim[i];
    }
    int64_t stride[MPMD_MAX_DIMS], s = 1;
    for (int i = nd - 1; i >= 0; i--)
        stride[i] = s, s *= xt->dim[i];
    for (int64_t o = 0; o < n_out; o++) {
        /* the kept multi-index of o, then every reduced multi-index in order */
        int64_t base = 0, rem = o;
        for (int i = nd - 1; i >= 0; i--)
            if (!(mask & (1 << i))) base += (rem % xt->dim[i]) * stride[i], rem /= xt->dim[i];
        for (int64_t r = 0; r < count; r++) {
            int64_t off = base, rr = r;
            for (int i = nd - 1; i >= 0; i--)
                if (mask & (1 << i)) off += (rr % xt->dim[i]) * stride[i], rr /= xt->dim[i];
            buf[r] = x[off];
        }
        float acc;
        if (kind == K_MAX) {
            acc = buf[0];
            for (int64_t r = 1; r < count; r++)
                acc = buf[r] > acc ? buf[r] : acc;
        } else if (inner) {
            acc = mpmd_sum_f32(buf, L);
            for (int64_t r = L; r < count; r += L)
                acc += mpmd_sum_f32(buf + r, L);
        } else {
            acc = buf[0];
            for (int64_t r = 1; r < count; r++)
                acc += buf[r];
        }
        if (kind == K_MEAN) acc *= 1.0f / (float)count;
        y[o] = acc;
    }
}

/* Every axis set of several shapes (with size-1 axes in places), keepdims
 * both ways: the output type and bitwise equality with the documented
 * order (a naive gather of each output's elements by index arithmetic). */
static void test_forward(void) {
    static const int64_t shapes[][5] = {
        /* ndim, dims */
        {1, 37},      {2, 5, 7},       {2, 1, 9},       {3, 3, 4, 5},
        {3, 4, 1, 6}, {4, 2, 3, 4, 5}, {4, 3, 1, 5, 1}, {4, 2, 5, 1, 33},
    };
    float x[1024], y[1024], ref[1024], buf[1024];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        mpmd_type xt = tu_f32((int)shapes[si][0], &shapes[si][1]);
        int nd = xt.ndim;
        tu_fill(x, mpmd_type_numel(&xt), 100 + si);
        for (int mask = 1; mask < (1 << nd); mask++) {
            int axes[MPMD_MAX_DIMS], na = 0;
            for (int i = 0; i < nd; i++)
                if (mask & (1 << i)) axes[na++] = (i % 2) ? i - nd : i; /* mix negative axes in */
            for (int kind = 0; kind < 3; kind++) {
                for (int keep = 0; keep < 2; keep++) {
                    mpmd_type yt = run_reduce(kind, &xt, x, na, axes, keep, 1, y, 1024);
                    /* output type: reduced axes dropped (or kept as 1) */
                    int k = 0, okt = 1;
                    for (int i = 0; i < nd; i++) {
                        if (mask & (1 << i)) {
                            if (keep) okt &= yt.dim[k++] == 1;
                        } else {
                            okt &= yt.dim[k++] == xt.dim[i];
                        }
                    }
                    okt &= yt.ndim == k;
                    CHECK(okt, "%s shape %zu mask %d keep %d: wrong output type", kind_name[kind], si, mask,
                          keep);
                    ref_reduce(kind, &xt, mask, x, ref, buf);
                    int64_t n = mpmd_type_numel(&yt);
                    CHECK(memcmp(y, ref, (size_t)n * sizeof(float)) == 0,
                          "%s shape %zu mask %d keep %d: not the documented order (y[0] %.9g, ref %.9g)",
                          kind_name[kind], si, mask, keep, y[0], ref[0]);
                }
            }
        }
    }
}

/* Plain double-precision references for a few cases, to anchor the order
 * test above to the right mathematics. */
static void test_values(void) {
    /* x[i,j,k] = i*100 + j*10 + k on [2,3,4] */
    mpmd_type xt = tu_f32(MPMD_SHAPE(2, 3, 4));
    float x[24], y[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                x[i * 12 + j * 4 + k] = (float)(i * 100 + j * 10 + k);
    /* sum over axis 1: [2,4] */
    run_reduce(K_SUM, &xt, x, MPMD_AXES(1), 0, 1, y, 24);
    int ok = 1;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            ok &= y[i * 4 + k] == (float)(3 * (i * 100 + k) + 30);
    CHECK(ok, "sum axis 1");
    /* mean over axes (0, 2), keepdims: [1,3,1] */
    mpmd_type yt = run_reduce(K_MEAN, &xt, x, MPMD_AXES(0, -1), 1, 1, y, 24);
    CHECK(yt.ndim == 3 && yt.dim[0] == 1 && yt.dim[1] == 3 && yt.dim[2] == 1, "mean keepdims type");
    ok = 1;
    for (int j = 0; j < 3; j++)
        ok &= fabsf(y[j] - (float)(50 + j * 10 + 1.5)) < 1e-4f;
    CHECK(ok, "mean axes 0,2: %g %g %g", y[0], y[1], y[2]);
    /* max over everything: a scalar */
    yt = run_reduce(K_MAX, &xt, x, 0, NULL, 0, 1, y, 24);
    CHECK(yt.ndim == 0 && y[0] == 123.0f, "max all: ndim %d value %g", yt.ndim, y[0]);
    /* max over axis 0 of a tensor with negative numbers */
    for (int i = 0; i < 24; i++)
        x[i] = -(float)i;
    run_reduce(K_MAX, &xt, x, MPMD_AXES(0), 0, 1, y, 24);
    ok = 1;
    for (int r = 0; r < 12; r++)
        ok &= y[r] == -(float)r;
    CHECK(ok, "max axis 0 of negatives");

    /* a large random sum against doubles: the fixed order is also accurate */
    int64_t dims[3] = {16, 300, 40};
    mpmd_type bt = tu_f32(3, dims);
    int64_t n = mpmd_type_numel(&bt);
    float *bx = malloc((size_t)n * sizeof *bx), *by = malloc(16 * 40 * sizeof *by);
    tu_fill(bx, n, 9);
    run_reduce(K_SUM, &bt, bx, MPMD_AXES(1), 0, 1, by, 16 * 40);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 40; k++) {
            double s = 0;
            for (int j = 0; j < 300; j++)
                s += bx[(i * 300 + j) * 40 + k];
            worst = fmax(worst, fabs(s - by[i * 40 + k]));
        }
    CHECK(worst < 1e-4, "sum over 300 rows off by %g", worst);
    free(bx);
    free(by);
}

/* ---- gradients ------------------------------------------------------------------ */

typedef struct rcase {
    int kind, naxes, axes[4], keep;
} rcase;

static mpmd_value build_reduce(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const rcase *c = ctx;
    return reduce_op(g, c->kind, p[0], c->naxes, c->naxes ? c->axes : NULL, c->keep);
}

static void test_gradients(void) {
    static const rcase cases[] = {
        {K_SUM, 1, {1}, 0},      {K_SUM, 2, {0, 2}, 1}, {K_SUM, 1, {-1}, 0}, {K_SUM, 0, {0}, 0},
        {K_SUM, 2, {-3, -2}, 1}, {K_SUM, 1, {0}, 1},    {K_MEAN, 1, {1}, 0}, {K_MEAN, 2, {0, 2}, 1},
        {K_MEAN, 0, {0}, 0},     {K_MEAN, 1, {-1}, 1},  {K_MAX, 1, {1}, 0},  {K_MAX, 1, {-1}, 1},
        {K_MAX, 2, {0, 2}, 0},   {K_MAX, 0, {0}, 0},    {K_MAX, 1, {0}, 1},
    };
    mpmd_type t3 = tu_f32(MPMD_SHAPE(3, 4, 5));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[96];
        const rcase *c = &cases[i];
        snprintf(label, sizeof label, "%s naxes=%d axes[0]=%d keep=%d", kind_name[c->kind], c->naxes,
                 c->axes[0], c->keep);
        /* max is piecewise linear: a small step keeps the argmax in place */
        double h = c->kind == K_MAX ? 1e-3 : 1e-2;
        CHECK(tu_gradcheck(label, 1, &t3, build_reduce, (void *)c, h, 1e-2), "%s", label);
    }
    /* 4-D, outer and middle axes, and the same op used twice (a chain) */
    mpmd_type t4 = tu_f32(MPMD_SHAPE(2, 3, 4, 5));
    rcase c4[] = {
        {K_SUM, 2, {0, 3}, 0}, {K_MEAN, 2, {1, 2}, 1}, {K_MAX, 2, {-4, -2}, 0}, {K_SUM, 3, {0, 1, 3}, 1}};
    for (size_t i = 0; i < sizeof c4 / sizeof c4[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "4-D %s case %zu", kind_name[c4[i].kind], i);
        CHECK(tu_gradcheck(label, 1, &t4, build_reduce, &c4[i], c4[i].kind == K_MAX ? 1e-3 : 1e-2, 1e-2),
              "%s", label);
    }
}

/* max's gradient at ties: dy is split equally among the positions equal to
 * the max. x rows: [1, 3, 3, 0] (two ties), [2, 2, 2, 2] (four), [5, 1, 0, -1]. */
static void test_max_ties(void) {
    for (int axis_last = 0; axis_last < 2; axis_last++) {
        mpmd_graph *g = mpmd_graph_new();
        /* reduce the row (inner layout) or the same data transposed along axis 0 (outer layout) */
        mpmd_value w = axis_last ? mpmd_param(g, "w", MPMD_SHAPE(3, 4), MPMD_ZEROS)
                                 : mpmd_param(g, "w", MPMD_SHAPE(4, 3), MPMD_ZEROS);
        mpmd_value m = mpmd_max(g, w, MPMD_AXES(axis_last ? 1 : 0), 0);
        float rw[3] = {6.0f, 4.0f, 1.0f};
        mpmd_value r = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(3), rw);
        mpmd_value loss = mpmd_sum(g, mpmd_mul(g, m, r), 0, NULL, 0);
        mpmd_value gw;
        CHECK(mpmd_grad(g, loss, 1, &w, &gw) == MPMD_OK, "%s", mpmd_graph_error(g));
        mpmd_keep(g, gw);
        mpmd_keep(g, m);
        mpmd_exec *ex = tu_exec(g, 1);
        float rows[3][4] = {{1, 3, 3, 0}, {2, 2, 2, 2}, {5, 1, 0, -1}};
        float want[3][4] = {{0, 3, 3, 0}, {1, 1, 1, 1}, {1, 0, 0, 0}};
        float *wd = mpmd_exec_var_data(ex, w);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                wd[axis_last ? i * 4 + j : j * 3 + i] = rows[i][j];
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        float gd[12], md[3];
        mpmd_exec_read(ex, gw, gd, sizeof gd);
        mpmd_exec_read(ex, m, md, sizeof md);
        CHECK(md[0] == 3 && md[1] == 2 && md[2] == 5, "max values %g %g %g", md[0], md[1], md[2]);
        int ok = 1;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                ok &= gd[axis_last ? i * 4 + j : j * 3 + i] == want[i][j];
        CHECK(ok, "tie gradients (layout %s): row 0 %g %g %g %g", axis_last ? "inner" : "outer",
              gd[axis_last ? 0 : 0], gd[axis_last ? 1 : 3], gd[axis_last ? 2 : 6], gd[axis_last ? 3 : 9]);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 5));
    CHECK(!mpmd_is_value(mpmd_sum(g, x, MPMD_AXES(2), 0)), "axis 2 accepted");
    CHECK(mpmd_graph_status(g) == MPMD_ERR_SHAPE, "status");
    CHECK(has(mpmd_graph_error(g), "mpmd_sum: axis 2 is out of range for f32[4,5] (ndim 2)"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 5));
    CHECK(!mpmd_is_value(mpmd_max(g, x, MPMD_AXES(-3), 0)), "axis -3 accepted");
    CHECK(has(mpmd_graph_error(g), "mpmd_max: axis -3 is out of range for f32[4,5]"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 5));
    CHECK(!mpmd_is_value(mpmd_mean(g, x, MPMD_AXES(1, -1), 1)), "duplicate accepted");
    CHECK(has(mpmd_graph_error(g), "mpmd_mean: axis -1 (axis 1 of f32[4,5]) is listed twice"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(4, 5));
    CHECK(!mpmd_is_value(mpmd_sum(g, x, 0, NULL, 0)), "i32 accepted");
    CHECK(has(mpmd_graph_error(g), "mpmd_sum: a is i32[4,5], expected a float tensor (f32, bf16, f16)"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 5));
    CHECK(!mpmd_is_value(mpmd_sum(g, x, 3, (const int[]){0, 1, 0}, 0)), "3 axes of 2 accepted");
    CHECK(has(mpmd_graph_error(g), "mpmd_sum: 3 axes given for f32[4,5]"), "%s", mpmd_graph_error(g));
    /* the first error stays; later constructors given MPMD_NONE return MPMD_NONE */
    CHECK(!mpmd_is_value(mpmd_sum(g, MPMD_NONE, 0, NULL, 0)), "none propagates");
    CHECK(has(mpmd_graph_error(g), "3 axes given"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

/* The printout names the axes and keepdims. */
static void test_print(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    TU_DROP(mpmd_sum(g, x, MPMD_AXES(0, -1), 1));
    TU_DROP(mpmd_max(g, x, MPMD_AXES(1), 0));
    FILE *f = tmpfile();
    mpmd_graph_print(g, f);
    char text[2048] = {0};
    rewind(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    CHECK(has(text, "f32[1,3,1] = sum %0 \"x\" axes=[0,2] keepdims=1"), "%s", text);
    CHECK(has(text, "f32[2,4] = max %0 \"x\" axes=[1] keepdims=0"), "%s", text);
    mpmd_graph_free(g);
}

/* ---- threads -------------------------------------------------------------------- */

/* sum / mean / max forward, and max's gradient, give the same bits on one
 * and two threads for large inputs and every layout family. */
static void test_threads(void) {
    int64_t dims[3] = {64, 96, 130};
    if (tu_quick()) dims[0] = 8;
    mpmd_type xt = tu_f32(3, dims);
    int64_t n = mpmd_type_numel(&xt);
    float *x = malloc((size_t)n * sizeof *x), *y1 = malloc((size_t)n * sizeof *y1),
          *y2 = malloc((size_t)n * sizeof *y2), *ref = malloc((size_t)n * sizeof *ref),
          *buf = malloc((size_t)n * sizeof *buf);
    tu_fill(x, n, 77);
    static const int masks[] = {1, 2, 4, 3, 6, 5, 7};
    for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++) {
        int axes[3], na = 0;
        for (int i = 0; i < 3; i++)
            if (masks[mi] & (1 << i)) axes[na++] = i;
        for (int kind = 0; kind < 3; kind++) {
            mpmd_type yt = run_reduce(kind, &xt, x, na, axes, 0, 1, y1, n);
            run_reduce(kind, &xt, x, na, axes, 0, 2, y2, n);
            int64_t m = mpmd_type_numel(&yt);
            CHECK(memcmp(y1, y2, (size_t)m * sizeof(float)) == 0, "%s mask %d: 1 and 2 threads differ",
                  kind_name[kind], masks[mi]);
            ref_reduce(kind, &xt, masks[mi], x, ref, buf);
            CHECK(memcmp(y1, ref, (size_t)m * sizeof(float)) == 0, "%s mask %d: not the documented order",
                  kind_name[kind], masks[mi]);
        }
        /* max's gradient with respect to the input x */
        float *g1 = y1, *g2 = y2;
        for (int th = 1; th <= 2; th++) {
            mpmd_graph *g = mpmd_graph_new();
            mpmd_value xv = mpmd_input(g, "x", MPMD_F32, 3, dims);
            mpmd_value mx = mpmd_max(g, xv, na, axes, 1);
            mpmd_value loss = mpmd_sum(g, mpmd_mul(g, mx, mx), 0, NULL, 0);
            mpmd_value gx;
            mpmd_grad(g, loss, 1, &xv, &gx);
            mpmd_keep(g, gx);
            mpmd_exec *ex = tu_exec(g, th);
            mpmd_exec_set_input(ex, xv, x, (size_t)n * sizeof(float));
            CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
            mpmd_exec_read(ex, gx, th == 1 ? g1 : g2, (size_t)n * sizeof(float));
            mpmd_exec_free(ex);
            mpmd_graph_free(g);
        }
        CHECK(memcmp(g1, g2, (size_t)n * sizeof(float)) == 0, "max grad mask %d: 1 and 2 threads differ",
              masks[mi]);
        /* d/dx sum(max^2) = 2 max at the argmax (no ties in random data) */
        int64_t nz = 0;
        for (int64_t i = 0; i < n; i++)
            nz += g1[i] != 0.0f;
        int64_t per = 1;
        for (int i = 0; i < 3; i++)
            if (masks[mi] & (1 << i)) per *= dims[i];
        CHECK(nz == n / per, "max grad mask %d: %lld nonzeros, expected %lld", masks[mi], (long long)nz,
              (long long)(n / per));
    }
    free(x), free(y1), free(y2), free(ref), free(buf);
}

int main(void) {
    test_forward();
    test_values();
    test_gradients();
    test_max_ties();
    test_errors();
    test_print();
    test_threads();
    return tu_report("test_ops_reduce");
}
