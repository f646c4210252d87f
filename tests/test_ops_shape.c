/* Shape ops: reshape, permute/transpose, slice, concat. Forward values
 * against naive index loops (exact: they only move data), f32 and i32,
 * gradients against finite differences, build-time errors, and the same
 * bytes on 1 and 2 threads for large tensors. */
#include "testutil.h"

#include <string.h>

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ---- a small runner: inputs of any dtype, one output ---------------------- */

typedef mpmd_value (*op_fn)(mpmd_graph *g, const mpmd_value *xs, void *ctx);

/* Build y = f(inputs), run on `threads` threads, copy y into out (capacity
 * cap elements). Returns y's type. */
static mpmd_type run_op(int n, const mpmd_type *types, void *const *data, op_fn f, void *ctx, int threads,
                        void *out, int64_t cap) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xs[8];
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        xs[i] = mpmd_input(g, name, types[i].dtype, types[i].ndim, types[i].dim);
    }
    mpmd_value y = f(g, xs, ctx);
    mpmd_keep(g, y);
    mpmd_exec *ex = tu_exec(g, threads);
    for (int i = 0; i < n; i++)
        CHECK(mpmd_exec_set_input(ex, xs[i], data[i], mpmd_type_bytes(&types[i])) == MPMD_OK, "%s",
              mpmd_exec_error(ex));
    mpmd_type yt = mpmd_value_type(g, y);
    CHECK(mpmd_type_numel(&yt) <= cap, "output too large");
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_read(ex, y, out, mpmd_type_bytes(&yt)) == MPMD_OK, "%s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return yt;
}

static mpmd_type ty(mpmd_dtype dt, int ndim, const int64_t *dims) {
    mpmd_type t = tu_f32(ndim, dims);
    t.dtype = dt;
    return t;
}

static void fill_i32(int32_t *x, int64_t n, int32_t base) {
    for (int64_t i = 0; i < n; i++)
        x[i] = base + (int32_t)(i * 7919 % 100003);
}

/* ---- naive references ------------------------------------------------------ */

/* y = permute(x, perm) by index arithmetic; 4-byte elements. */
static void ref_permute(const mpmd_type *xt, const int *perm, const uint32_t *x, uint32_t *y) {
    int nd = xt->ndim;
    int64_t xs[MPMD_MAX_DIMS], s = 1, n = mpmd_type_numel(xt);
    for (int i = nd - 1; i >= 0; i--)
        xs[i] = s, s *= xt->dim[i];
    for (int64_t o = 0; o < n; o++) {
        int64_t rem = o, off = 0;
        for (int i = nd - 1; i >= 0; i--) {
            int64_t d = xt->dim[perm[i]];
            off += (rem % d) * xs[perm[i]];
            rem /= d;
        }
        y[o] = x[off];
    }
}

/* ---- reshape ------------------------------------------------------------------ */

typedef struct shape_arg {
    int ndim;
    int64_t dims[MPMD_MAX_DIMS];
} shape_arg;

static mpmd_value op_reshape(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    const shape_arg *s = ctx;
    return mpmd_reshape(g, xs[0], s->ndim, s->dims);
}

/* reshape of a value computed in the graph (its buffer may be reused) */
static mpmd_value op_reshape_of_sum(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    const shape_arg *s = ctx;
    return mpmd_reshape(g, mpmd_add(g, xs[0], xs[0]), s->ndim, s->dims);
}

static void test_reshape(void) {
    float x[120], y[120];
    tu_fill(x, 120, 1);
    mpmd_type xt = tu_f32(MPMD_SHAPE(2, 3, 4, 5));
    void *xd[1] = {x};
    shape_arg s = {3, {6, -1, 5}};
    mpmd_type yt = run_op(1, &xt, xd, op_reshape, &s, 1, y, 120);
    CHECK(yt.ndim == 3 && yt.dim[0] == 6 && yt.dim[1] == 4 && yt.dim[2] == 5, "-1 inferred: %lld",
          (long long)yt.dim[1]);
    CHECK(memcmp(x, y, sizeof x) == 0, "reshape changed the data");
    shape_arg s2 = {2, {10, 12}};
    run_op(1, &xt, xd, op_reshape_of_sum, &s2, 1, y, 120);
    int ok = 1;
    for (int i = 0; i < 120; i++)
        ok &= y[i] == x[i] + x[i];
    CHECK(ok, "reshape of a computed value");
    /* to a scalar and back */
    mpmd_type st = tu_f32(MPMD_SHAPE(1, 1));
    shape_arg s0 = {0, {0}};
    float one = 3.5f, r = 0;
    void *od[1] = {&one};
    yt = run_op(1, &st, od, op_reshape, &s0, 1, &r, 1);
    CHECK(yt.ndim == 0 && r == 3.5f, "reshape to a scalar");
    /* i32 */
    int32_t ix[120], iy[120];
    fill_i32(ix, 120, -50);
    mpmd_type it = ty(MPMD_I32, MPMD_SHAPE(4, 30));
    void *id[1] = {ix};
    shape_arg s3 = {3, {-1, 3, 8}};
    yt = run_op(1, &it, id, op_reshape, &s3, 1, iy, 120);
    CHECK(yt.dtype == MPMD_I32 && yt.dim[0] == 5 && memcmp(ix, iy, sizeof ix) == 0, "i32 reshape");
}

/* ---- permute and transpose ------------------------------------------------------ */

static mpmd_value op_permute(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    return mpmd_permute(g, xs[0], ctx);
}
static mpmd_value op_transpose(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    (void)ctx;
    return mpmd_transpose(g, xs[0]);
}

/* Next permutation in lexicographic order; 0 after the last. */
static int next_perm(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] <= p[i])
        j--;
    int t = p[i];
    p[i] = p[j], p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--)
        t = p[a], p[a] = p[b], p[b] = t;
    return 1;
}

static void test_permute(void) {
    /* every permutation of 3-D and 4-D shapes, some with size-1 axes and
     * sizes that are not multiples of the 32 tile */
    static const int64_t shapes[][6] = {{3, 3, 4, 5},      {3, 33, 2, 40},    {4, 2, 3, 4, 5},
                                        {4, 2, 1, 35, 3},  {4, 3, 34, 1, 33}, {2, 37, 45},
                                        {5, 2, 3, 2, 3, 4}};
    static float x[40000], y[40000], ref[40000];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int nd = (int)shapes[si][0];
        mpmd_type xt = tu_f32(nd, &shapes[si][1]);
        int64_t n = mpmd_type_numel(&xt);
        tu_fill(x, n, 10 + si);
        void *xd[1] = {x};
        int perm[MPMD_MAX_DIMS];
        for (int i = 0; i < nd; i++)
            perm[i] = i;
        int bad = 0, count = 0;
        do {
            mpmd_type yt = run_op(1, &xt, xd, op_permute, perm, 1, y, 40000);
            for (int i = 0; i < nd; i++)
                bad += yt.dim[i] != xt.dim[perm[i]];
            ref_permute(&xt, perm, (const uint32_t *)x, (uint32_t *)ref);
            if (memcmp(y, ref, (size_t)n * 4) != 0) {
                bad++;
                fprintf(stderr, "permute shape %zu perm %d%d%d%d: wrong data\n", si, perm[0], perm[1],
                        perm[2], nd > 3 ? perm[3] : 0);
            }
            count++;
        } while (next_perm(perm, nd));
        CHECK(bad == 0, "shape %zu: %d of %d permutations wrong", si, bad, count);
    }
    /* transpose = swap the last two axes (2-D and batched) */
    mpmd_type t2 = tu_f32(MPMD_SHAPE(37, 45));
    tu_fill(x, 37 * 45, 3);
    void *xd[1] = {x};
    mpmd_type yt = run_op(1, &t2, xd, op_transpose, NULL, 1, y, 40000);
    int ok = yt.dim[0] == 45 && yt.dim[1] == 37;
    for (int i = 0; i < 37; i++)
        for (int j = 0; j < 45; j++)
            ok &= y[j * 37 + i] == x[i * 45 + j];
    CHECK(ok, "2-D transpose");
    mpmd_type t3 = tu_f32(MPMD_SHAPE(3, 20, 70));
    tu_fill(x, 3 * 20 * 70, 4);
    run_op(1, &t3, xd, op_transpose, NULL, 1, y, 40000);
    ok = 1;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 20; i++)
            for (int j = 0; j < 70; j++)
                ok &= y[(b * 70 + j) * 20 + i] == x[(b * 20 + i) * 70 + j];
    CHECK(ok, "batched transpose");
    /* i32 permute */
    int32_t ix[120], iy[120], iref[120];
    fill_i32(ix, 120, 0);
    mpmd_type it = ty(MPMD_I32, MPMD_SHAPE(2, 3, 4, 5));
    void *id[1] = {ix};
    int p[4] = {3, 1, 0, 2};
    yt = run_op(1, &it, id, op_permute, p, 1, iy, 120);
    ref_permute(&it, p, (const uint32_t *)ix, (uint32_t *)iref);
    CHECK(yt.dtype == MPMD_I32 && memcmp(iy, iref, sizeof iy) == 0, "i32 permute");
}

/* ---- slice ------------------------------------------------------------------------ */

typedef struct slice_arg {
    int axis;
    int64_t start, stop;
} slice_arg;

static mpmd_value op_slice(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    const slice_arg *s = ctx;
    return mpmd_slice(g, xs[0], s->axis, s->start, s->stop);
}

/* naive slice of 4-byte elements on a tensor of type xt */
static void ref_slice(const mpmd_type *xt, int ax, int64_t start, int64_t stop, const uint32_t *x,
                      uint32_t *y) {
    int64_t outer = 1, inner = 1, d = xt->dim[ax];
    for (int i = 0; i < ax; i++)
        outer *= xt->dim[i];
    for (int i = ax + 1; i < xt->ndim; i++)
        inner *= xt->dim[i];
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = start; j < stop; j++)
            for (int64_t i = 0; i < inner; i++)
                y[k++] = x[(o * d + j) * inner + i];
}

static void test_slice(void) {
    float x[360], y[360], ref[360];
    tu_fill(x, 360, 5);
    mpmd_type xt = tu_f32(MPMD_SHAPE(3, 4, 5, 6));
    void *xd[1] = {x};
    static const slice_arg cases[] = {{0, 1, 3},  {1, 0, 2},  {2, 2, 5}, {3, 1, 4},
                                      {-1, 0, 6}, {-4, 0, 1}, {-2, 4, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mpmd_type yt = run_op(1, &xt, xd, op_slice, (void *)&cases[i], 1, y, 360);
        int ax = cases[i].axis < 0 ? cases[i].axis + 4 : cases[i].axis;
        CHECK(yt.dim[ax] == cases[i].stop - cases[i].start, "slice %zu type", i);
        ref_slice(&xt, ax, cases[i].start, cases[i].stop, (const uint32_t *)x, (uint32_t *)ref);
        CHECK(memcmp(y, ref, mpmd_type_bytes(&yt)) == 0, "slice case %zu (axis %d [%lld,%lld))", i,
              cases[i].axis, (long long)cases[i].start, (long long)cases[i].stop);
    }
    int32_t ix[360], iy[360], iref[360];
    fill_i32(ix, 360, 1000);
    mpmd_type it = ty(MPMD_I32, MPMD_SHAPE(3, 4, 5, 6));
    void *id[1] = {ix};
    slice_arg s = {2, 1, 4};
    mpmd_type yt = run_op(1, &it, id, op_slice, &s, 1, iy, 360);
    ref_slice(&it, 2, 1, 4, (const uint32_t *)ix, (uint32_t *)iref);
    CHECK(yt.dtype == MPMD_I32 && memcmp(iy, iref, mpmd_type_bytes(&yt)) == 0, "i32 slice");
}

/* ---- concat ------------------------------------------------------------------------- */

static mpmd_value op_concat(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    const int *c = ctx; /* n, axis */
    return mpmd_concat(g, c[0], xs, c[1]);
}

/* naive concat of n tensors of types ts along ax */
static void ref_concat(int n, const mpmd_type *ts, int ax, void *const *xs, uint32_t *y) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++)
        outer *= ts[0].dim[i];
    for (int i = ax + 1; i < ts[0].ndim; i++)
        inner *= ts[0].dim[i];
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int t = 0; t < n; t++) {
            int64_t run = ts[t].dim[ax] * inner;
            memcpy(y + k, (const uint32_t *)xs[t] + o * run, (size_t)run * 4);
            k += run;
        }
}

static void test_concat(void) {
    float a[120], b[120], c[120], y[400], ref[400];
    tu_fill(a, 120, 1), tu_fill(b, 120, 2), tu_fill(c, 120, 3);
    void *xd[3] = {a, b, c};
    for (int ax = 0; ax < 3; ax++) {
        /* three operands differing on axis ax: sizes 2, 3, 1 there, [2,3,4] elsewhere */
        mpmd_type ts[3];
        int64_t base[3] = {2, 3, 4}, on[3] = {2, 3, 1};
        for (int t = 0; t < 3; t++) {
            int64_t d[3] = {base[0], base[1], base[2]};
            d[ax] = on[t];
            ts[t] = tu_f32(3, d);
        }
        int arg[2] = {3, ax == 2 ? -1 : ax};
        mpmd_type yt = run_op(3, ts, xd, op_concat, arg, 1, y, 400);
        CHECK(yt.dim[ax] == 6, "concat axis %d type", ax);
        ref_concat(3, ts, ax, xd, (uint32_t *)ref);
        CHECK(memcmp(y, ref, mpmd_type_bytes(&yt)) == 0, "concat axis %d data", ax);
    }
    /* one operand: a copy */
    mpmd_type t1 = tu_f32(MPMD_SHAPE(4, 5));
    int arg1[2] = {1, 1};
    run_op(1, &t1, xd, op_concat, arg1, 1, y, 400);
    CHECK(memcmp(y, a, 20 * sizeof(float)) == 0, "concat of one");
    /* i32 */
    int32_t ia[60], ib[60], iy[120], iref[120];
    fill_i32(ia, 60, 0), fill_i32(ib, 60, 500000);
    mpmd_type its[2] = {ty(MPMD_I32, MPMD_SHAPE(3, 4, 5)), ty(MPMD_I32, MPMD_SHAPE(3, 4, 5))};
    void *id[2] = {ia, ib};
    int arg2[2] = {2, 1};
    mpmd_type yt = run_op(2, its, id, op_concat, arg2, 1, iy, 120);
    ref_concat(2, its, 1, id, (uint32_t *)iref);
    CHECK(yt.dtype == MPMD_I32 && yt.dim[1] == 8 && memcmp(iy, iref, sizeof iy) == 0, "i32 concat");
}

/* ---- gradients ------------------------------------------------------------------------- */

static mpmd_value g_reshape(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const shape_arg *s = ctx;
    /* multiply by a position-dependent factor after the reshape, so a
     * gradient that lands in the wrong element shows */
    mpmd_value y = mpmd_reshape(g, p[0], s->ndim, s->dims);
    return mpmd_mul(g, y, y);
}
static mpmd_value g_permute(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    return mpmd_permute(g, p[0], ctx);
}
static mpmd_value g_transpose(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    (void)ctx;
    return mpmd_transpose(g, p[0]);
}
static mpmd_value g_slice(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const slice_arg *s = ctx;
    return mpmd_slice(g, p[0], s->axis, s->start, s->stop);
}
static mpmd_value g_concat(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    int axis = *(const int *)ctx;
    /* the middle operand used twice: its gradient sums two slices */
    mpmd_value xs[4] = {p[0], p[1], p[2], p[1]};
    return mpmd_concat(g, 4, xs, axis);
}
/* slice then concat back: exercises slice_grad's accumulation into one input */
static mpmd_value g_slice_concat(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    (void)ctx;
    mpmd_value a = mpmd_slice(g, p[0], 1, 0, 2), b = mpmd_slice(g, p[0], 1, 1, 5);
    mpmd_value xs[2] = {b, a};
    return mpmd_concat(g, 2, xs, 1);
}

static void test_gradients(void) {
    mpmd_type t3 = tu_f32(MPMD_SHAPE(3, 4, 5)), t4 = tu_f32(MPMD_SHAPE(2, 3, 4, 5));
    shape_arg r1 = {2, {12, 5}}, r2 = {4, {-1, 2, 1, 10}};
    CHECK(tu_gradcheck("reshape [12,5]", 1, &t3, g_reshape, &r1, 1e-2, 1e-2), "reshape");
    CHECK(tu_gradcheck("reshape [-1,2,1,10]", 1, &t3, g_reshape, &r2, 1e-2, 1e-2), "reshape -1");

    static int p3[][3] = {{0, 2, 1}, {1, 0, 2}, {2, 0, 1}, {2, 1, 0}, {1, 2, 0}};
    for (size_t i = 0; i < sizeof p3 / sizeof p3[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "permute [%d,%d,%d]", p3[i][0], p3[i][1], p3[i][2]);
        CHECK(tu_gradcheck(label, 1, &t3, g_permute, p3[i], 1e-2, 1e-2), "%s", label);
    }
    static int p4[][4] = {{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}};
    for (size_t i = 0; i < sizeof p4 / sizeof p4[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "permute [%d,%d,%d,%d]", p4[i][0], p4[i][1], p4[i][2], p4[i][3]);
        CHECK(tu_gradcheck(label, 1, &t4, g_permute, p4[i], 1e-2, 1e-2), "%s", label);
    }
    CHECK(tu_gradcheck("transpose", 1, &t3, g_transpose, NULL, 1e-2, 1e-2), "transpose");

    static const slice_arg sl[] = {{0, 1, 2}, {1, 1, 3}, {-1, 2, 5}, {3, 0, 1}, {2, 0, 4}};
    for (size_t i = 0; i < sizeof sl / sizeof sl[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "slice axis %d [%lld,%lld)", sl[i].axis, (long long)sl[i].start,
                 (long long)sl[i].stop);
        CHECK(tu_gradcheck(label, 1, &t4, g_slice, (void *)&sl[i], 1e-2, 1e-2), "%s", label);
    }

    for (int ax = 0; ax < 3; ax++) {
        mpmd_type ts[3];
        int64_t base[3] = {2, 3, 4}, on[3] = {2, 3, 1};
        for (int t = 0; t < 3; t++) {
            int64_t d[3] = {base[0], base[1], base[2]};
            d[ax] = on[t];
            /* the reused operand (1) must match operand 0's other dims: same as base */
            ts[t] = tu_f32(3, d);
        }
        int axis = ax - 3; /* negative axes */
        char label[64];
        snprintf(label, sizeof label, "concat of 3 (+1 reused) on axis %d", axis);
        CHECK(tu_gradcheck(label, 3, ts, g_concat, &axis, 1e-2, 1e-2), "%s", label);
    }
    mpmd_type t2 = tu_f32(MPMD_SHAPE(3, 5));
    CHECK(tu_gradcheck("slice + concat", 1, &t2, g_slice_concat, NULL, 1e-2, 1e-2), "slice + concat");
}

/* ---- errors --------------------------------------------------------------------------- */

static void test_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_reshape(g, x, MPMD_SHAPE(5, 5))), "reshape count");
    CHECK(has(mpmd_graph_error(g),
              "mpmd_reshape: cannot reshape f32[4,6] (24 elements) to [5,5] (25 elements): counts differ"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_reshape(g, x, MPMD_SHAPE(5, -1))), "reshape -1 that does not divide");
    CHECK(has(mpmd_graph_error(g), "cannot reshape f32[4,6] (24 elements) to [5,-1]"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_reshape(g, x, MPMD_SHAPE(-1, -1))), "two -1");
    CHECK(has(mpmd_graph_error(g), "bad target shape [-1,-1] for f32[4,6]"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    CHECK(!mpmd_is_value(mpmd_permute(g, x, (const int[]){0, 2, 2})), "duplicate in perm");
    CHECK(has(mpmd_graph_error(g), "mpmd_permute: perm [0,2,2] is not a permutation of 0..2 for f32[2,3,4]"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    CHECK(!mpmd_is_value(mpmd_permute(g, x, (const int[]){0, 3, 1})), "out of range in perm");
    CHECK(has(mpmd_graph_error(g), "perm [0,3,1] is not a permutation"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(7));
    CHECK(!mpmd_is_value(mpmd_transpose(g, x)), "transpose of 1-D");
    CHECK(has(mpmd_graph_error(g), "mpmd_transpose: a is f32[7], expected at least 2 dimensions"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_slice(g, x, 1, 2, 7)), "slice past the end");
    CHECK(has(mpmd_graph_error(g), "mpmd_slice: range [2, 7) on axis 1 of f32[4,6] is out of range; expected "
                                   "0 <= start < stop <= 6"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_slice(g, x, 0, 3, 3)), "empty slice");
    CHECK(has(mpmd_graph_error(g), "range [3, 3) on axis 0 of f32[4,6] is out of range"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_slice(g, x, -3, 0, 1)), "slice axis");
    CHECK(has(mpmd_graph_error(g), "mpmd_slice: axis -3 is out of range for f32[4,6] (ndim 2)"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value xs[3] = {mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3)),
                        mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(2, 4)),
                        mpmd_input(g, "c", MPMD_F32, MPMD_SHAPE(3, 3))};
    CHECK(mpmd_is_value(mpmd_concat(g, 2, xs, 1)), "concat on axis 1: %s", mpmd_graph_error(g));
    CHECK(!mpmd_is_value(mpmd_concat(g, 3, xs, 1)), "concat shape mismatch");
    CHECK(has(mpmd_graph_error(g), "mpmd_concat: operand 2 is f32[3,3] but operand 0 is f32[2,3]; expected "
                                   "the same dtype and the same "
                                   "dims except axis 1"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    xs[0] = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3));
    xs[1] = mpmd_input(g, "b", MPMD_I32, MPMD_SHAPE(2, 3));
    CHECK(!mpmd_is_value(mpmd_concat(g, 2, xs, 0)), "concat dtype mismatch");
    CHECK(has(mpmd_graph_error(g), "operand 1 is i32[2,3] but operand 0 is f32[2,3]"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    xs[0] = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3));
    CHECK(!mpmd_is_value(mpmd_concat(g, 1, xs, 2)), "concat axis");
    CHECK(has(mpmd_graph_error(g), "mpmd_concat: axis 2 is out of range for operand 0 f32[2,3] (ndim 2)"),
          "%s", mpmd_graph_error(g));
    CHECK(!mpmd_is_value(mpmd_concat(g, 0, xs, 0)), "concat of nothing");
    mpmd_graph_free(g);
}

/* The printout shows each op's attributes. */
static void test_print(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 3, 4));
    TU_DROP(mpmd_permute(g, x, (const int[]){2, 0, 1}));
    TU_DROP(mpmd_slice(g, x, -1, 1, 3));
    mpmd_value xs[2] = {x, x};
    TU_DROP(mpmd_concat(g, 2, xs, 1));
    TU_DROP(mpmd_reshape(g, x, MPMD_SHAPE(6, 4)));
    FILE *f = tmpfile();
    mpmd_graph_print(g, f);
    char text[2048] = {0};
    rewind(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    CHECK(has(text, "f32[4,2,3] = permute %0 \"x\" perm=[2,0,1]"), "%s", text);
    CHECK(has(text, "f32[2,3,2] = slice %0 \"x\" axis=2 start=1 stop=3"), "%s", text);
    CHECK(has(text, "f32[2,6,4] = concat %0 \"x\", %0 \"x\" axis=1"), "%s", text);
    CHECK(has(text, "f32[6,4] = reshape %0 \"x\""), "%s", text);
    mpmd_graph_free(g);
}

/* ---- threads ------------------------------------------------------------------------ */

static mpmd_value op_slice_grad_big(mpmd_graph *g, const mpmd_value *xs, void *ctx) {
    /* the gradient of a slice, i.e. a slice_grad, with respect to an input */
    const slice_arg *s = ctx;
    mpmd_value y = mpmd_slice(g, xs[0], s->axis, s->start, s->stop);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, y), 0, NULL, 0);
    mpmd_value gx;
    mpmd_grad(g, loss, 1, xs, &gx);
    return gx;
}

/* Large tensors on 1 and 2 threads: the same bytes, and the right ones. */
static void test_threads(void) {
    int64_t B = tu_quick() ? 2 : 8, T = 128, H = 12, D = 64;
    mpmd_type xt = tu_f32(4, (int64_t[]){B, T, H, D});
    int64_t n = mpmd_type_numel(&xt);
    float *x = malloc((size_t)n * 4), *y1 = malloc((size_t)n * 4 * 2), *y2 = malloc((size_t)n * 4 * 2),
          *ref = malloc((size_t)n * 4 * 2);
    tu_fill(x, n, 31);
    void *xd[2] = {x, x};
    static int perms[][4] = {{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 1, 2, 0}, {2, 3, 0, 1}};
    for (size_t i = 0; i < sizeof perms / sizeof perms[0]; i++) {
        run_op(1, &xt, xd, op_permute, perms[i], 1, y1, n);
        run_op(1, &xt, xd, op_permute, perms[i], 2, y2, n);
        ref_permute(&xt, perms[i], (const uint32_t *)x, (uint32_t *)ref);
        CHECK(memcmp(y1, ref, (size_t)n * 4) == 0 && memcmp(y2, ref, (size_t)n * 4) == 0,
              "large permute %zu on 1 / 2 threads", i);
    }
    static const slice_arg sl[] = {{0, 1, 2}, {1, 5, 100}, {3, 10, 60}};
    for (size_t i = 0; i < sizeof sl / sizeof sl[0]; i++) {
        mpmd_type yt = run_op(1, &xt, xd, op_slice, (void *)&sl[i], 1, y1, n);
        run_op(1, &xt, xd, op_slice, (void *)&sl[i], 2, y2, n);
        ref_slice(&xt, sl[i].axis, sl[i].start, sl[i].stop, (const uint32_t *)x, (uint32_t *)ref);
        size_t bytes = mpmd_type_bytes(&yt);
        CHECK(memcmp(y1, ref, bytes) == 0 && memcmp(y2, ref, bytes) == 0, "large slice %zu on 1 / 2 threads",
              i);
        /* its gradient: 2 x inside the slice, 0 outside */
        run_op(1, &xt, xd, op_slice_grad_big, (void *)&sl[i], 1, y1, n);
        run_op(1, &xt, xd, op_slice_grad_big, (void *)&sl[i], 2, y2, n);
        int64_t outer = 1, inner = 1, d = xt.dim[sl[i].axis];
        for (int k = 0; k < sl[i].axis; k++)
            outer *= xt.dim[k];
        for (int k = sl[i].axis + 1; k < 4; k++)
            inner *= xt.dim[k];
        int ok = memcmp(y1, y2, (size_t)n * 4) == 0;
        for (int64_t e = 0; e < n && ok; e++) {
            int64_t j = (e / inner) % d;
            float want = j >= sl[i].start && j < sl[i].stop ? 2 * x[e] : 0.0f;
            ok &= y1[e] == want;
        }
        (void)outer;
        CHECK(ok, "large slice_grad %zu on 1 / 2 threads", i);
    }
    for (int ax = 0; ax < 4; ax++) {
        mpmd_type ts[2] = {xt, xt};
        int arg[2] = {2, ax};
        run_op(2, ts, xd, op_concat, arg, 1, y1, 2 * n);
        run_op(2, ts, xd, op_concat, arg, 2, y2, 2 * n);
        ref_concat(2, ts, ax, xd, (uint32_t *)ref);
        CHECK(memcmp(y1, ref, (size_t)n * 8) == 0 && memcmp(y2, ref, (size_t)n * 8) == 0,
              "large concat axis %d on 1 / 2 threads", ax);
    }
    free(x), free(y1), free(y2), free(ref);
}

int main(void) {
    test_reshape();
    test_permute();
    test_slice();
    test_concat();
    test_gradients();
    test_errors();
    test_print();
    test_threads();
    return tu_report("test_ops_shape");
}
