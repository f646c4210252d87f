/* The elementwise op family: forward values against naive loops (every
 * broadcasting pattern the kernels specialise, and the general strided
 * path), sum_to's documented summation order, gradient checks of every op
 * against finite differences, error messages, bitwise equality across
 * thread counts, and in-place kernels (out == in[0]). */
#include "backend/cpu/cpu.h"
#include "graph/graph.h"
#include "ops/elementwise_ops.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static mpmd_type shape_of(int ndim, const int64_t *dims) { return tu_f32(ndim, dims); }

static float *alloc_f(int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) abort();
    return p;
}

/* Offset in an operand of type t of output element i (numpy broadcasting). */
static int64_t bidx(const mpmd_type *out, const mpmd_type *t, int64_t i) {
    int64_t off = 0, stride = 1;
    int n = out->ndim;
    for (int d = n - 1; d >= 0; d--) {
        int64_t id = i % out->dim[d];
        i /= out->dim[d];
        int k = d - (n - t->ndim);
        if (k >= 0) {
            if (t->dim[k] != 1) off += id * stride;
            stride *= t->dim[k];
        }
    }
    return off;
}

/* Run graph g on one executor with `threads`, after feeding inputs, and read
 * value y into dst. */
static void run_graph(mpmd_graph *g, int threads, int n_in, const mpmd_value *in, float *const *data,
                      mpmd_value y, float *dst) {
    mpmd_exec *ex = tu_exec(g, threads);
    for (int i = 0; i < n_in; i++) {
        mpmd_type t = mpmd_value_type(g, in[i]);
        CHECK(mpmd_exec_set_input(ex, in[i], data[i], mpmd_type_bytes(&t)) == MPMD_OK, "set: %s",
              mpmd_exec_error(ex));
    }
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "run: %s", mpmd_exec_error(ex));
    mpmd_type ty = mpmd_value_type(g, y);
    CHECK(mpmd_exec_read(ex, y, dst, mpmd_type_bytes(&ty)) == MPMD_OK, "read: %s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
}

/* ---- binary ops: forward against a naive broadcasting loop ------------------------------------ */

/* The binary ops under test: the list MPMD_BINARY_OPS of
 * src/ops/elementwise_ops.h, each with its float reference ref_<name>. */
static float ref_add(float x, float y) { return x + y; }
static float ref_sub(float x, float y) { return x - y; }
static float ref_mul(float x, float y) { return x * y; }
static float ref_div(float x, float y) { return x / y; }
static float ref_maximum(float x, float y) { return x > y ? x : y; }
static float ref_minimum(float x, float y) { return x < y ? x : y; }

typedef struct bin_op {
    const char *name;
    mpmd_value (*make)(mpmd_graph *g, mpmd_value a, mpmd_value b);
    float (*ref)(float x, float y);
} bin_op;
static const bin_op bin_ops[] = {
#define BIN_ROW(name, tol) {#name, mpmd_##name, ref_##name},
    MPMD_BINARY_OPS(BIN_ROW)};
#define N_BIN ((int)(sizeof bin_ops / sizeof bin_ops[0]))

static mpmd_value make_bin(mpmd_graph *g, int op, mpmd_value a, mpmd_value b) {
    return bin_ops[op].make(g, a, b);
}
static float ref_bin(int op, float x, float y) { return bin_ops[op].ref(x, y); }
static int is_bin(int op, const char *name) { return strcmp(bin_ops[op].name, name) == 0; }

typedef struct shape_pair {
    int na;
    int64_t a[MPMD_MAX_DIMS];
    int nb;
    int64_t b[MPMD_MAX_DIMS];
    int no;
    int64_t o[MPMD_MAX_DIMS]; /* the expected broadcast shape */
} shape_pair;

static const shape_pair pairs[] = {
    {2, {4, 3}, 2, {4, 3}, 2, {4, 3}},                               /* equal shapes */
    {2, {4, 3}, 1, {3}, 2, {4, 3}},                                  /* row broadcast */
    {1, {3}, 2, {4, 3}, 2, {4, 3}},                                  /* row broadcast, a side */
    {2, {4, 3}, 2, {4, 1}, 2, {4, 3}},                               /* column broadcast */
    {2, {4, 1}, 2, {4, 3}, 2, {4, 3}},                               /* column broadcast, a side */
    {2, {4, 1}, 2, {1, 5}, 2, {4, 5}},                               /* outer product */
    {2, {1, 5}, 2, {4, 1}, 2, {4, 5}},                               /* outer product, swapped */
    {2, {4, 3}, 0, {0}, 2, {4, 3}},                                  /* scalar b */
    {0, {0}, 2, {4, 3}, 2, {4, 3}},                                  /* scalar a */
    {2, {4, 3}, 1, {1}, 2, {4, 3}},                                  /* [1] b */
    {0, {0}, 0, {0}, 0, {0}},                                        /* scalar with scalar */
    {2, {1, 1}, 1, {3}, 2, {1, 3}},                                  /* size-1 axes only on a */
    {3, {2, 3, 4}, 2, {3, 1}, 3, {2, 3, 4}},                         /* general: three groups */
    {3, {5, 1, 4}, 3, {1, 3, 1}, 3, {5, 3, 4}},                      /* general: both sides broadcast */
    {5, {2, 1, 3, 1, 2}, 3, {3, 4, 1}, 5, {2, 1, 3, 4, 2}},          /* general, five axes */
    {6, {2, 1, 3, 2, 1, 2}, 4, {3, 1, 4, 2}, 6, {2, 1, 3, 2, 4, 2}}, /* six axes */
    {3, {2, 37, 45}, 1, {45}, 3, {2, 37, 45}},                       /* rows longer than a vector */
};

static void test_binary_forward(void) {
    for (size_t c = 0; c < sizeof pairs / sizeof pairs[0]; c++) {
        const shape_pair *p = &pairs[c];
        mpmd_type ta = shape_of(p->na, p->a), tb = shape_of(p->nb, p->b), to = shape_of(p->no, p->o);
        int64_t na = mpmd_type_numel(&ta), nb = mpmd_type_numel(&tb), no = mpmd_type_numel(&to);
        float *a = alloc_f(na), *b = alloc_f(nb), *y = alloc_f(no);
        tu_fill(a, na, 11 + c);
        tu_fill(b, nb, 97 + c);
        for (int64_t i = 0; i < nb; i++)
            b[i] += b[i] >= 0 ? 0.25f : -0.25f; /* no zero denominators */
        for (int op = 0; op < N_BIN; op++) {
            mpmd_graph *g = mpmd_graph_new();
            mpmd_value in[2] = {mpmd_input(g, "a", MPMD_F32, p->na, p->a),
                                mpmd_input(g, "b", MPMD_F32, p->nb, p->b)};
            mpmd_value v = make_bin(g, op, in[0], in[1]);
            mpmd_type vt = mpmd_value_type(g, v);
            CHECK(mpmd_type_equal(&vt, &to), "case %zu %s: result type %s", c, bin_ops[op].name,
                  mpmd_tstr(g, v));
            mpmd_keep(g, v);
            float *data[2] = {a, b};
            memset(y, 0, (size_t)no * sizeof *y);
            run_graph(g, 1, 2, in, data, v, y);
            int bad = 0;
            for (int64_t i = 0; i < no; i++) {
                float e = ref_bin(op, a[bidx(&to, &ta, i)], b[bidx(&to, &tb, i)]);
                if (memcmp(&e, &y[i], sizeof e) != 0 && bad++ < 3)
                    fprintf(stderr, "case %zu %s: element %lld is %.9g, expected %.9g\n", c, bin_ops[op].name,
                            (long long)i, y[i], e);
            }
            CHECK(bad == 0, "case %zu %s: %d elements differ", c, bin_ops[op].name, bad);
            mpmd_graph_free(g);
        }
        free(a), free(b), free(y);
    }
}

/* ---- unary ops: forward against double-precision references ----------------------------------- */

/* The unary ops under test: the scalar ops, then the lists of
 * src/ops/elementwise_ops.h, row for row, each op with its reference in
 * double, ref_<name>, and (MPMD_UNARY_GRAD_OPS) its derivative dref_<name>:
 * an op added to a list without them does not compile. */
static double ref_add_scalar(double x) { return x + 0.375; }
static double ref_mul_scalar(double x) { return x * -1.75; }
static double ref_neg(double x) { return -x; }
static double ref_exp(double x) { return exp(x); }
static double ref_log(double x) { return log(x); }
static double ref_tanh(double x) { return tanh(x); }
static double dref_tanh(double x) { return 1 - tanh(x) * tanh(x); }
static double ref_sqrt(double x) { return sqrt(x); }
static double dref_sqrt(double x) { return 0.5 / sqrt(x); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double dref_rsqrt(double x) { return -0.5 * pow(x, -1.5); }
static double ref_square(double x) { return x * x; }
static double dref_square(double x) { return 2 * x; }
static double ref_relu(double x) { return x > 0 ? x : 0; }
static double dref_relu(double x) { return x > 0 ? 1 : 0; }
static double ref_gelu(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
static double dref_gelu(double x) {
    double hh = 1e-4; /* gelu'(x) by a central difference in double */
    return (ref_gelu(x + hh) - ref_gelu(x - hh)) / (2 * hh);
}
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double dref_sigmoid(double x) { return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x))); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double dref_silu(double x) {
    return 1 / (1 + exp(-x)) + x * exp(-x) / ((1 + exp(-x)) * (1 + exp(-x)));
}
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double dref_softplus(double x) { return 1 / (1 + exp(-x)); }

static mpmd_value make_add_scalar(mpmd_graph *g, mpmd_value x) { return mpmd_add_scalar(g, x, 0.375f); }
static mpmd_value make_mul_scalar(mpmd_graph *g, mpmd_value x) { return mpmd_mul_scalar(g, x, -1.75f); }

enum { ANY, POS }; /* the lists' domain column */
typedef struct un_op {
    const char *name;
    mpmd_value (*make)(mpmd_graph *g, mpmd_value x);
    double (*ref)(double x);
    double (*dref)(double x); /* the fused backward op's derivative, NULL: none */
    int pos;                  /* inputs must be positive (log, sqrt, rsqrt) */
} un_op;

static const un_op un_ops[] = {{"add_scalar", make_add_scalar, ref_add_scalar, NULL, ANY},
                               {"mul_scalar", make_mul_scalar, ref_mul_scalar, NULL, ANY},
#define UN_ROW(name, reads, tol, domain, ...) {#name, mpmd_##name, ref_##name, NULL, domain},
#define UN_GRAD_ROW(name, reads, tol, domain, ...) {#name, mpmd_##name, ref_##name, dref_##name, domain},
                               MPMD_UNARY_OPS(UN_ROW) MPMD_UNARY_GRAD_OPS(UN_GRAD_ROW)};
#define N_UN ((int)(sizeof un_ops / sizeof un_ops[0]))

static mpmd_value make_un(mpmd_graph *g, int op, mpmd_value x) { return un_ops[op].make(g, x); }
static int positive_domain(int op) { return un_ops[op].pos == POS; }
static int is_op(int op, const char *name) { return strcmp(un_ops[op].name, name) == 0; }
/* one float operation each, exact in double: the result must be that
 * operation's float result bit for bit */
static int single_rounding(int op) {
    return is_op(op, "add_scalar") || is_op(op, "mul_scalar") || is_op(op, "neg") || is_op(op, "square") ||
           is_op(op, "relu");
}

static void test_unary_forward(void) {
    const int64_t n = 7 * 13;
    float *x = alloc_f(n), *y = alloc_f(n);
    for (int op = 0; op < N_UN; op++) {
        tu_fill(x, n, 5 + op);
        for (int64_t i = 0; i < n; i++)
            x[i] = positive_domain(op) ? 0.01f + 2.0f * fabsf(x[i]) : 3.0f * x[i];
        x[0] = positive_domain(op) ? 1.0f : 0.0f; /* relu(0) = 0, gelu(0) = 0 */
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value in = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(7, 13));
        mpmd_value v = make_un(g, op, in);
        mpmd_keep(g, v);
        run_graph(g, 1, 1, &in, &x, v, y);
        /* single float operations must match the same operation in float
         * bit for bit; libm's float functions are within a few ulp of the
         * double result (measured against max(1, |y|): gelu cancels for
         * negative x, where only the absolute error is small) */
        int exact = single_rounding(op);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = un_ops[op].ref(x[i]);
            if (exact) {
                float ef = (float)e; /* each of these is one float operation, exact in double */
                worst = fmax(worst, memcmp(&ef, &y[i], sizeof ef) != 0);
            } else {
                worst = fmax(worst, fabs(y[i] - e) / fmax(1.0, fabs(e)));
            }
        }
        CHECK(worst <= (exact ? 0.0 : 2e-6), "%s: worst error %.3g", un_ops[op].name, worst);
        mpmd_graph_free(g);
    }
    /* relu keeps NaN visible (loss checks depend on it), and clamps -inf */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value in = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(3));
    mpmd_value v = mpmd_relu(g, in);
    mpmd_keep(g, v);
    float xs[3] = {NAN, -INFINITY, 2.0f}, ys[3];
    float *xp = xs;
    run_graph(g, 1, 1, &in, &xp, v, ys);
    CHECK(isnan(ys[0]) && ys[1] == 0.0f && ys[2] == 2.0f, "relu: %g %g %g", ys[0], ys[1], ys[2]);
    mpmd_graph_free(g);
    /* softplus does not overflow: x for large x, e^x for very negative x
     * (not 0: log1p), 0 at -inf's side, NaN stays */
    g = mpmd_graph_new();
    in = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(3));
    v = mpmd_softplus(g, in);
    mpmd_keep(g, v);
    float xl[3] = {1e30f, 100.0f, -20.0f}, yl[3];
    xp = xl;
    run_graph(g, 1, 1, &in, &xp, v, yl);
    CHECK(yl[0] == 1e30f && yl[1] == 100.0f && fabs(yl[2] - exp(-20.0)) <= 1e-6 * exp(-20.0),
          "softplus: %g %g %g", yl[0], yl[1], yl[2]);
    xl[0] = NAN, xl[1] = -1e30f;
    run_graph(g, 1, 1, &in, &xp, v, yl);
    CHECK(isnan(yl[0]) && yl[1] == 0.0f, "softplus(NaN) = %g, softplus(-1e30) = %g", yl[0], yl[1]);
    mpmd_graph_free(g);
    free(x), free(y);
}

/* ---- fused backward ops: forward values -------------------------------------------------------- */

/* Emit the gradient rule of node y with an input cotangent gy, outside
 * mpmd_grad, to look at the backward op it makes. */
static mpmd_value vjp_of(mpmd_graph *g, mpmd_value y, mpmd_value gy, int i) {
    mpmd_node copy = *mpmd_node_of(g, y);
    mpmd_value gin[2] = {MPMD_NONE, MPMD_NONE};
    copy.op->vjp(g, &copy, gy, gin);
    return gin[i];
}

static void test_grad_ops_forward(void) {
    const int64_t n = 50;
    float *x = alloc_f(n), *gy = alloc_f(n), *out = alloc_f(n);
    for (int op = 0, k = 0; op < N_UN; op++) {
        if (!un_ops[op].dref) continue;
        char name[64];
        snprintf(name, sizeof name, "%s_grad", un_ops[op].name);
        tu_fill(x, n, 300 + k);
        tu_fill(gy, n, 400 + k);
        k++;
        for (int64_t i = 0; i < n; i++)
            x[i] = positive_domain(op) ? 0.05f + 2.0f * fabsf(x[i]) : 3.0f * x[i];
        if (is_op(op, "relu")) x[3] = 0.0f; /* relu'(0) = 0 */
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value in[2] = {mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(5, 10)),
                            mpmd_input(g, "gy", MPMD_F32, MPMD_SHAPE(5, 10))};
        mpmd_value y = make_un(g, op, in[0]);
        mpmd_value gx = vjp_of(g, y, in[1], 0);
        const mpmd_node *gn = mpmd_node_of(g, gx);
        CHECK(gn && strcmp(gn->op->name, name) == 0, "%s: the rule emits one fused op, got %s", name,
              gn ? gn->op->name : "nothing");
        mpmd_keep(g, gx);
        float *data[2] = {x, gy};
        run_graph(g, 1, 2, in, data, gx, out);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = gy[i] * un_ops[op].dref(x[i]);
            worst = fmax(worst, fabs(out[i] - e) / fmax(1.0, fabs(e)));
        }
        CHECK(worst < 1e-5, "%s: worst relative error %.3g", name, worst);
        if (is_op(op, "relu")) CHECK(out[3] == 0.0f, "relu'(0) must be 0, got gradient %g", out[3]);
        mpmd_graph_free(g);
    }
    free(x), free(gy), free(out);
}

/* ---- broadcast_to and sum_to ------------------------------------------------------------------ */

typedef struct shape_to {
    int nin;
    int64_t in[MPMD_MAX_DIMS];
    int nout;
    int64_t out[MPMD_MAX_DIMS];
} shape_to;

static void test_broadcast_to(void) {
    static const shape_to cases[] = {
        {1, {3}, 2, {4, 3}},    {2, {4, 1}, 2, {4, 5}},
        {0, {0}, 2, {2, 3}},    {3, {2, 1, 3}, 4, {4, 2, 5, 3}},
        {1, {1}, 3, {2, 2, 2}}, {2, {1, 40}, 3, {3, 2, 40}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_to *s = &cases[c];
        mpmd_type ti = shape_of(s->nin, s->in), to = shape_of(s->nout, s->out);
        int64_t ni = mpmd_type_numel(&ti), no = mpmd_type_numel(&to);
        float *x = alloc_f(ni), *y = alloc_f(no);
        tu_fill(x, ni, 21 + c);
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value in = mpmd_input(g, "x", MPMD_F32, s->nin, s->in);
        mpmd_value v = mpmd_broadcast_to(g, in, s->nout, s->out);
        mpmd_keep(g, v);
        run_graph(g, 1, 1, &in, &x, v, y);
        int bad = 0;
        for (int64_t i = 0; i < no; i++)
            bad += y[i] != x[bidx(&to, &ti, i)];
        CHECK(bad == 0, "broadcast_to case %zu: %d elements differ", c, bad);
        mpmd_graph_free(g);
        free(x), free(y);
    }
    /* equal shapes: no op at all */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3));
    CHECK(mpmd_broadcast_to(g, a, MPMD_SHAPE(2, 3)).id == a.id,
          "broadcast_to of the same shape emits nothing");
    CHECK(mpmd_sum_to(g, a, MPMD_SHAPE(2, 3)).id == a.id, "sum_to of the same shape emits nothing");
    mpmd_graph_free(g);
}

static void test_sum_to(void) {
    static const shape_to cases[] = {
        {2, {6, 5}, 1, {5}},                /* bias gradient: columns path */
        {2, {6, 5}, 2, {6, 1}},             /* row sums: runs path */
        {2, {6, 5}, 0, {0}},                /* everything, to a scalar */
        {2, {6, 5}, 1, {1}},                /* everything, to [1] */
        {4, {2, 3, 4, 5}, 3, {3, 1, 5}},    /* columns path with an outer kept group */
        {4, {2, 3, 4, 5}, 4, {1, 3, 4, 1}}, /* runs path with an outer reduced group */
        {3, {3, 1, 4}, 2, {1, 4}},          /* size-1 axes dropped */
        {2, {1, 3}, 1, {3}},                /* nothing reduced: a copy */
        {4, {2, 3, 1, 4}, 3, {3, 1, 1}},    /* reduced, kept, reduced */
        {3, {7, 3, 70}, 1, {70}},           /* columns longer than a block of 16 */
        {2, {3, 100}, 2, {3, 1}},           /* runs longer than mpmd_sum_f32's lanes */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_to *s = &cases[c];
        mpmd_type ti = shape_of(s->nin, s->in), to = shape_of(s->nout, s->out);
        int64_t ni = mpmd_type_numel(&ti), no = mpmd_type_numel(&to);
        float *x = alloc_f(ni), *y = alloc_f(no);
        double *ref = calloc((size_t)no, sizeof *ref);
        tu_fill(x, ni, 31 + c);
        for (int64_t i = 0; i < ni; i++)
            ref[bidx(&ti, &to, i)] += x[i];
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value in = mpmd_input(g, "x", MPMD_F32, s->nin, s->in);
        mpmd_value v = mpmd_sum_to(g, in, s->nout, s->out);
        mpmd_type vt = mpmd_value_type(g, v);
        CHECK(mpmd_type_equal(&vt, &to), "sum_to case %zu: type %s", c, mpmd_tstr(g, v));
        mpmd_keep(g, v);
        run_graph(g, 1, 1, &in, &x, v, y);
        double worst = 0;
        for (int64_t i = 0; i < no; i++)
            worst = fmax(worst, fabs(y[i] - ref[i]));
        CHECK(worst < 1e-5 * (double)ni / (double)no, "sum_to case %zu: worst error %.3g", c, worst);
        mpmd_graph_free(g);
        free(x), free(y), free(ref);
    }

    /* The documented order, bit for bit. [N, C] -> [C]: rows added one by
     * one from 0. [N, C] -> [N, 1]: mpmd_sum_f32 of each row. */
    const int64_t N = 37, C = 29;
    float *x = alloc_f(N * C), *y = alloc_f(N * C);
    tu_fill(x, N * C, 77);
    for (int64_t i = 0; i < N * C; i++)
        x[i] *= (float)(1 + i % 7) * 100.0f; /* make the order visible */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value in = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(N, C));
    mpmd_value cols = mpmd_sum_to(g, in, MPMD_SHAPE(C));
    mpmd_value rows = mpmd_sum_to(g, in, MPMD_SHAPE(N, 1));
    mpmd_keep(g, cols);
    mpmd_keep(g, rows);
    run_graph(g, 2, 1, &in, &x, cols, y);
    int bad = 0;
    for (int64_t c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int64_t r = 0; r < N; r++)
            acc += x[r * C + c];
        bad += memcmp(&acc, &y[c], sizeof acc) != 0;
    }
    CHECK(bad == 0, "sum_to [N,C]->[C]: %d columns not summed in row order", bad);
    run_graph(g, 2, 1, &in, &x, rows, y);
    bad = 0;
    for (int64_t r = 0; r < N; r++) {
        float s = mpmd_sum_f32(x + r * C, C);
        bad += memcmp(&s, &y[r], sizeof s) != 0;
    }
    CHECK(bad == 0, "sum_to [N,C]->[N,1]: %d rows differ from mpmd_sum_f32", bad);
    mpmd_graph_free(g);
    free(x), free(y);
}

/* ---- gradient checks ------------------------------------------------------------------------- */

/* Keep x away from 0 (for denominators, log, sqrt, rsqrt): x^2 + 0.5. */
static mpmd_value positive(mpmd_graph *g, mpmd_value x) {
    return mpmd_add_scalar(g, mpmd_square(g, x), 0.5f);
}

/* A binary op differentiated with respect to one operand (`wrt`), the
 * other a fixed random constant of type `other`. One operand at a time:
 * tu_gradcheck reads a later input's gradient after perturbing the earlier
 * inputs (see the note in test_gradients). */
typedef struct bin_ctx {
    int op, wrt;
    mpmd_type other;
} bin_ctx;

static mpmd_value gc_bin(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const bin_ctx *c = ctx;
    int64_t n = mpmd_type_numel(&c->other);
    float *d = alloc_f(n);
    tu_fill(d, n, 555);
    for (int64_t i = 0; i < n; i++)
        d[i] += d[i] >= 0 ? 0.5f : -0.5f; /* a denominator away from 0 */
    mpmd_value k = mpmd_constant(g, MPMD_F32, c->other.ndim, c->other.dim, d);
    free(d);
    mpmd_value x = p[0];
    if (is_bin(c->op, "maximum") || is_bin(c->op, "minimum")) {
        /* the parameter shifted by -6 or +6 element by element: each side
         * wins somewhere, and no finite difference step crosses a kink
         * (the operands differ by ~4 or more) */
        mpmd_type tp = mpmd_value_type(g, x);
        int64_t np = mpmd_type_numel(&tp);
        float *sh = alloc_f(np);
        for (int64_t i = 0; i < np; i++)
            sh[i] = i % 2 ? 6.0f : -6.0f;
        x = mpmd_add(g, x, mpmd_constant(g, MPMD_F32, tp.ndim, tp.dim, sh));
        free(sh);
    }
    if (c->wrt == 0) return make_bin(g, c->op, x, k);
    return make_bin(g, c->op, k, is_bin(c->op, "div") ? positive(g, x) : x);
}

static mpmd_value gc_un(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    int op = *(const int *)ctx;
    return make_un(g, op, positive_domain(op) ? positive(g, p[0]) : p[0]);
}

typedef struct to_ctx {
    int sum; /* 1: sum_to, 0: broadcast_to */
    int n;
    int64_t dims[MPMD_MAX_DIMS];
} to_ctx;

static mpmd_value gc_to(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    const to_ctx *c = ctx;
    return c->sum ? mpmd_sum_to(g, p[0], c->n, c->dims) : mpmd_broadcast_to(g, p[0], c->n, c->dims);
}

/* a / a and a * a: both operands are the same value, so the two gradient
 * contributions must add up. */
static mpmd_value gc_self(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    (void)ctx;
    mpmd_value q = positive(g, p[0]);
    return mpmd_add(g, mpmd_mul(g, p[0], p[0]), mpmd_div(g, p[0], q));
}

static void test_gradients(void) {
    /* h = 1e-2 keeps f32 rounding of the loss small against the step; a
     * wrong rule (a missing 2, a wrong sign, an unsummed broadcast) is off
     * by far more than 2e-3. */
    const double h = 1e-2, tol = 2e-3;
    for (size_t c = 0; c < sizeof pairs / sizeof pairs[0]; c++) {
        const shape_pair *p = &pairs[c];
        mpmd_type in[2] = {shape_of(p->na, p->a), shape_of(p->nb, p->b)};
        for (int op = 0; op < N_BIN; op++) {
            for (int wrt = 0; wrt < 2; wrt++) {
                bin_ctx ctx = {op, wrt, in[1 - wrt]};
                char label[64];
                snprintf(label, sizeof label, "%s case %zu, d/d%s", bin_ops[op].name, c, wrt ? "b" : "a");
                tu_gradcheck(label, 1, &in[wrt], gc_bin, &ctx, h, tol);
            }
        }
    }
    mpmd_type t = tu_f32(MPMD_SHAPE(4, 3));
    for (int op = 0; op < N_UN; op++) {
        /* relu has a kink at 0: a smaller step keeps it out of the
         * differences */
        int kink = is_op(op, "relu");
        tu_gradcheck(un_ops[op].name, 1, &t, gc_un, &op, kink ? 1e-3 : h, kink ? 1e-2 : tol);
    }
    tu_gradcheck("mul/div of a value with itself", 1, &t, gc_self, NULL, h, tol);

    static const shape_to sums[] = {
        {2, {4, 3}, 1, {3}},
        {3, {2, 3, 4}, 2, {3, 1}},
        {2, {4, 3}, 0, {0}},
        {3, {2, 3, 4}, 3, {2, 1, 4}},
    };
    for (size_t c = 0; c < sizeof sums / sizeof sums[0]; c++) {
        to_ctx ctx = {1, sums[c].nout, {0}};
        memcpy(ctx.dims, sums[c].out, sizeof ctx.dims);
        mpmd_type ti = shape_of(sums[c].nin, sums[c].in);
        char label[64];
        snprintf(label, sizeof label, "sum_to case %zu", c);
        tu_gradcheck(label, 1, &ti, gc_to, &ctx, h, tol);
    }
    static const shape_to bcs[] = {
        {1, {3}, 2, {4, 3}},
        {2, {4, 1}, 2, {4, 5}},
        {0, {0}, 2, {2, 3}},
        {3, {2, 1, 3}, 4, {2, 2, 4, 3}},
    };
    for (size_t c = 0; c < sizeof bcs / sizeof bcs[0]; c++) {
        to_ctx ctx = {0, bcs[c].nout, {0}};
        memcpy(ctx.dims, bcs[c].out, sizeof ctx.dims);
        mpmd_type ti = shape_of(bcs[c].nin, bcs[c].in);
        char label[64];
        snprintf(label, sizeof label, "broadcast_to case %zu", c);
        tu_gradcheck(label, 1, &ti, gc_to, &ctx, h, tol);
    }
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* Up to four pieces a message must contain (NULL ends the list early). */
typedef struct needles {
    const char *s[4];
} needles;

static void test_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_value b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(5));
    mpmd_value bad = mpmd_add(g, a, b);
    CHECK(!mpmd_is_value(bad), "mismatched shapes accepted");
    CHECK(mpmd_graph_status(g) == MPMD_ERR_SHAPE, "status %d", mpmd_graph_status(g));
    const char *e = mpmd_graph_error(g);
    CHECK(has(e, "mpmd_add") && has(e, "f32[4,3]") && has(e, "f32[5]") && has(e, "do not broadcast"), "%s",
          e);
    /* later ops propagate MPMD_NONE, the first message stays */
    mpmd_value c = mpmd_exp(g, bad);
    c = mpmd_mul(g, c, a);
    c = mpmd_sum_to(g, c, MPMD_SHAPE(3));
    c = mpmd_broadcast_to(g, c, MPMD_SHAPE(4, 3));
    c = mpmd_mul_scalar(g, c, 2.0f);
    CHECK(!mpmd_is_value(c), "MPMD_NONE did not propagate");
    CHECK(has(mpmd_graph_error(g), "mpmd_add"), "first error replaced: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    for (int which = 0; which < 10; which++) {
        needles expect;
        g = mpmd_graph_new();
        a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4, 3));
        mpmd_value ids = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(4, 3));
        mpmd_value r = MPMD_NONE;
        switch (which) {
        case 0:
            r = mpmd_mul(g, a, ids);
            expect = (needles){{"mpmd_mul", "i32[4,3]", "float tensors (f32, bf16, f16)", "operand b"}};
            break;
        case 1:
            r = mpmd_gelu(g, ids);
            expect = (needles){{"mpmd_gelu", "i32[4,3]", "not i32", NULL}};
            break;
        case 2:
            r = mpmd_broadcast_to(g, a, MPMD_SHAPE(4, 5));
            expect = (needles){{"mpmd_broadcast_to", "f32[4,3]", "f32[4,5]", "axis -1 is 3"}};
            break;
        case 3:
            r = mpmd_broadcast_to(g, a, MPMD_SHAPE(3));
            expect = (needles){{"mpmd_broadcast_to", "f32[4,3]", "more axes than the target f32[3]", NULL}};
            break;
        case 4:
            r = mpmd_sum_to(g, a, MPMD_SHAPE(5));
            expect = (needles){{"mpmd_sum_to", "cannot sum f32[4,3] to f32[5]", "neither 3 nor 1", NULL}};
            break;
        case 5:
            r = mpmd_sum_to(g, a, MPMD_SHAPE(2, 4, 3));
            expect = (needles){{"mpmd_sum_to", "f32[2,4,3] has more axes than f32[4,3]", NULL, NULL}};
            break;
        case 6:
            r = mpmd_broadcast_to(g, a, MPMD_SHAPE(0, 3));
            expect = (needles){{"mpmd_broadcast_to", "dimension 0 is 0", NULL, NULL}};
            break;
        case 7:
            mpmd_scope_push(g, "block_1");
            r = mpmd_div(g, a, mpmd_input(g, "c", MPMD_F32, MPMD_SHAPE(2, 4, 1, 2)));
            expect =
                (needles){{"in block_1: mpmd_div", "f32[4,3] and f32[2,4,1,2]", "axis -1 is 3 vs 2", NULL}};
            break;
        case 8:
            r = mpmd_sub(g, a, (mpmd_value){12345});
            expect = (needles){{"mpmd_sub", "operand 1", "not a value of this graph", NULL}};
            break;
        default:
            r = mpmd_add_scalar(g, ids, 1.0f);
            expect = (needles){{"mpmd_add_scalar", "i32", NULL, NULL}};
            break;
        }
        CHECK(!mpmd_is_value(r), "case %d: bad operands accepted", which);
        CHECK(mpmd_graph_status(g) != MPMD_OK, "case %d: no error recorded", which);
        for (int j = 0; j < 4 && expect.s[j]; j++)
            CHECK(has(mpmd_graph_error(g), expect.s[j]), "case %d: \"%s\" missing from: %s", which,
                  expect.s[j], mpmd_graph_error(g));
        /* and the graph stays usable for reading, without a crash */
        CHECK(!mpmd_is_value(mpmd_neg(g, r)), "case %d: NONE propagates", which);
        mpmd_graph_free(g);
    }
}

/* ---- kernels called directly: threads and in-place ----------------------------------------------- */

/* Run the CPU kernel of value v with these buffers. */
static int run_kernel(mpmd_graph *g, mpmd_value v, void *out, void **in, int nthreads) {
    const mpmd_node *n = mpmd_node_of(g, v);
    const mpmd_kernel *e = mpmd_cpu_find(n->op);
    if (!e) {
        CHECK(e != NULL, "no CPU kernel for %s", n->op->name);
        return -1;
    }
    const mpmd_type *ty[2] = {NULL, NULL};
    for (int i = 0; i < n->n_in && i < 2; i++)
        ty[i] = mpmd_type_of(g, mpmd_in(n, i));
    char err[256] = "";
    mpmd_kargs a = {g, n, out, in, ty, nthreads, NULL, 0, err, sizeof err, NULL};
    return e->fn(&a);
}

/* A node under test: built on inputs whose buffers the test fills. */
typedef struct kcase {
    const char *label;
    mpmd_graph *g;
    mpmd_value v;
    int n_in;
    float *in[2];
} kcase;

static void kcase_input(kcase *k, int i, int ndim, const int64_t *dims, uint64_t seed, int positive_only) {
    char name[8];
    snprintf(name, sizeof name, "in%d", i);
    mpmd_value x = mpmd_input(k->g, name, MPMD_F32, ndim, dims);
    mpmd_type t = mpmd_value_type(k->g, x);
    int64_t n = mpmd_type_numel(&t);
    k->in[i] = alloc_f(n);
    tu_fill(k->in[i], n, seed);
    for (int64_t j = 0; j < n; j++)
        k->in[i][j] =
            positive_only ? 0.1f + fabsf(k->in[i][j]) : k->in[i][j] + (k->in[i][j] >= 0 ? 0.1f : -0.1f);
    k->n_in = i + 1;
}

/* Out-of-place with 1 and 2 threads must agree bit for bit; when the
 * output has input 0's size, the kernel run in place must agree too. */
static void check_kernel(kcase *k) {
    if (mpmd_graph_status(k->g) != MPMD_OK) {
        CHECK(0, "%s: %s", k->label, mpmd_graph_error(k->g));
        for (int i = 0; i < k->n_in; i++)
            free(k->in[i]);
        mpmd_graph_free(k->g);
        return;
    }
    const mpmd_node *n = mpmd_node_of(k->g, k->v);
    mpmd_type to = n->type, t0 = *mpmd_type_of(k->g, mpmd_in(n, 0));
    int64_t no = mpmd_type_numel(&to), n0 = mpmd_type_numel(&t0);
    float *o1 = alloc_f(no), *o2 = alloc_f(no);
    void *in[2] = {k->in[0], k->n_in > 1 ? k->in[1] : NULL};
    run_kernel(k->g, k->v, o1, in, 1);
    run_kernel(k->g, k->v, o2, in, 2);
    CHECK(memcmp(o1, o2, (size_t)no * sizeof *o1) == 0, "%s: 1 and 2 threads differ", k->label);
    if (n->op->inplace == 0 && n0 == no) {
        float *io = alloc_f(no);
        memcpy(io, k->in[0], (size_t)no * sizeof *io);
        void *in_place[2] = {io, k->n_in > 1 ? k->in[1] : NULL};
        run_kernel(k->g, k->v, io, in_place, 2);
        CHECK(memcmp(o1, io, (size_t)no * sizeof *o1) == 0, "%s: in place differs", k->label);
        free(io);
    }
    free(o1), free(o2);
    for (int i = 0; i < k->n_in; i++)
        free(k->in[i]);
    mpmd_graph_free(k->g);
}

static void test_kernels(void) {
    /* sizes above mpmd_threads_for's threshold, so 2 threads really split */
    int q = tu_quick();
    int64_t R = q ? 150 : 300, C = 257;
    kcase k;
    for (int op = 0; op < N_BIN; op++) {
        static const char *pats[] = {"same", "row", "col", "outer", "general", "scalar"};
        char lab[64];
        for (int pat = 0; pat < 6; pat++) {
            snprintf(lab, sizeof lab, "%s %s", bin_ops[op].name, pats[pat]);
            k = (kcase){lab, mpmd_graph_new(), MPMD_NONE, 0, {NULL, NULL}};
            switch (pat) {
            case 0:
                kcase_input(&k, 0, MPMD_SHAPE(R, C), 1, 0), kcase_input(&k, 1, MPMD_SHAPE(R, C), 2, 0);
                break;
            case 1:
                kcase_input(&k, 0, MPMD_SHAPE(R, C), 3, 0), kcase_input(&k, 1, MPMD_SHAPE(C), 4, 0);
                break;
            case 2:
                kcase_input(&k, 0, MPMD_SHAPE(R, C), 5, 0), kcase_input(&k, 1, MPMD_SHAPE(R, 1), 6, 0);
                break;
            case 3:
                kcase_input(&k, 0, MPMD_SHAPE(R, 1), 7, 0), kcase_input(&k, 1, MPMD_SHAPE(1, C), 8, 0);
                break;
            case 4:
                kcase_input(&k, 0, MPMD_SHAPE(R / 10, 10, 1, 27), 9, 0);
                kcase_input(&k, 1, MPMD_SHAPE(10, 13, 1), 10, 0);
                break;
            default:
                kcase_input(&k, 0, MPMD_SHAPE(R, C), 11, 0), kcase_input(&k, 1, MPMD_SHAPE(1), 12, 0);
                break;
            }
            k.v = make_bin(k.g, op, mpmd_lookup(k.g, "in0"), mpmd_lookup(k.g, "in1"));
            check_kernel(&k);
        }
    }
    /* an operand used twice, in place: x * x with out == x */
    {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(R, C));
        mpmd_value v = mpmd_mul(g, x, x);
        int64_t n = R * C;
        float *buf = alloc_f(n), *ref = alloc_f(n);
        tu_fill(buf, n, 99);
        for (int64_t i = 0; i < n; i++)
            ref[i] = buf[i] * buf[i];
        void *in[2] = {buf, buf};
        run_kernel(g, v, buf, in, 2);
        CHECK(memcmp(buf, ref, (size_t)n * sizeof *buf) == 0, "x * x in place");
        free(buf), free(ref);
        mpmd_graph_free(g);
    }
    for (int op = 0; op < N_UN; op++) {
        k = (kcase){un_ops[op].name, mpmd_graph_new(), MPMD_NONE, 0, {NULL, NULL}};
        kcase_input(&k, 0, MPMD_SHAPE(R, C), 20 + op, positive_domain(op));
        k.v = make_un(k.g, op, mpmd_lookup(k.g, "in0"));
        check_kernel(&k);
    }
    static char glab[N_UN][64];
    for (int op = 0, j = 0; op < N_UN; op++) {
        if (!un_ops[op].dref) continue;
        snprintf(glab[op], sizeof glab[op], "%s_grad", un_ops[op].name);
        k = (kcase){glab[op], mpmd_graph_new(), MPMD_NONE, 0, {NULL, NULL}};
        kcase_input(&k, 0, MPMD_SHAPE(R, C), 40 + j, 0);                   /* gy */
        kcase_input(&k, 1, MPMD_SHAPE(R, C), 50 + j, positive_domain(op)); /* x, then y = f(x) */
        j++;
        mpmd_value y = make_un(k.g, op, mpmd_lookup(k.g, "in1"));
        k.v = vjp_of(k.g, y, mpmd_lookup(k.g, "in0"), 0);
        /* the backward op reads y (tanh, sqrt, rsqrt, relu) or x: feed the
         * buffer of whichever it names */
        const mpmd_node *gn = mpmd_node_of(k.g, k.v);
        if (gn && gn->in[1] == y.id) {
            mpmd_type ty = mpmd_value_type(k.g, y);
            float *yb = alloc_f(mpmd_type_numel(&ty));
            void *in[1] = {k.in[1]};
            run_kernel(k.g, y, yb, in, 1);
            free(k.in[1]);
            k.in[1] = yb;
        }
        check_kernel(&k);
    }
    static const shape_to sums[] = {
        {2, {600, 300}, 1, {300}},           /* bias gradient */
        {2, {300, 600}, 2, {300, 1}},        /* row sums */
        {3, {8, 50, 300}, 3, {1, 50, 300}},  /* rows of a batch */
        {3, {20, 40, 50}, 2, {40, 1}},       /* runs with an outer reduced group */
        {4, {8, 50, 4, 30}, 3, {50, 1, 30}}, /* columns with an outer kept group */
        {2, {300, 300}, 0, {0}},             /* everything */
    };
    for (size_t c = 0; c < sizeof sums / sizeof sums[0]; c++) {
        char lab[32];
        snprintf(lab, sizeof lab, "sum_to case %zu", c);
        k = (kcase){lab, mpmd_graph_new(), MPMD_NONE, 0, {NULL, NULL}};
        kcase_input(&k, 0, sums[c].nin, sums[c].in, 60 + c, 0);
        k.v = mpmd_sum_to(k.g, mpmd_lookup(k.g, "in0"), sums[c].nout, sums[c].out);
        check_kernel(&k);
    }
    static const shape_to bcs[] = {{1, {300}, 2, {600, 300}}, {2, {300, 1}, 2, {300, 300}}};
    for (size_t c = 0; c < sizeof bcs / sizeof bcs[0]; c++) {
        char lab[32];
        snprintf(lab, sizeof lab, "broadcast_to case %zu", c);
        k = (kcase){lab, mpmd_graph_new(), MPMD_NONE, 0, {NULL, NULL}};
        kcase_input(&k, 0, bcs[c].nin, bcs[c].in, 70 + c, 0);
        k.v = mpmd_broadcast_to(k.g, mpmd_lookup(k.g, "in0"), bcs[c].nout, bcs[c].out);
        check_kernel(&k);
    }
}

/* The executor with 1 and 2 threads, through a small chain of ops and their
 * gradients: the same bits. */
static void test_exec_threads(void) {
    int64_t B = tu_quick() ? 64 : 256, C = 384;
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, C));
    mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(C), MPMD_NORMAL(1.0f));
    mpmd_value s = mpmd_param(g, "s", MPMD_SHAPE(B, 1), MPMD_NORMAL(1.0f));
    mpmd_value h = mpmd_gelu(g, mpmd_add(g, x, w));
    h = mpmd_div(g, mpmd_tanh(g, mpmd_mul(g, h, s)), positive(g, w));
    h = mpmd_sub(g, mpmd_relu(g, h), mpmd_exp(g, mpmd_neg(g, mpmd_square(g, h))));
    mpmd_value loss = mpmd_sum(g, h, 0, NULL, 0);
    mpmd_value gr[2], p[2] = {w, s};
    mpmd_grad(g, loss, 2, p, gr);
    mpmd_keep(g, loss), mpmd_keep(g, gr[0]), mpmd_keep(g, gr[1]);
    float *xd = alloc_f(B * C);
    tu_fill(xd, B * C, 8);
    float *res[2][3];
    for (int t = 0; t < 2; t++) {
        mpmd_exec *ex = tu_exec(g, t + 1);
        mpmd_exec_set_input(ex, x, xd, (size_t)(B * C) * sizeof(float));
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "run: %s", mpmd_exec_error(ex));
        res[t][0] = alloc_f(1), res[t][1] = alloc_f(C), res[t][2] = alloc_f(B);
        mpmd_exec_read(ex, loss, res[t][0], sizeof(float));
        mpmd_exec_read(ex, gr[0], res[t][1], (size_t)C * sizeof(float));
        mpmd_exec_read(ex, gr[1], res[t][2], (size_t)B * sizeof(float));
        mpmd_exec_free(ex);
    }
    CHECK(isfinite(res[0][0][0]), "loss %g", res[0][0][0]);
    CHECK(memcmp(res[0][0], res[1][0], sizeof(float)) == 0, "loss differs: %.9g vs %.9g", res[0][0][0],
          res[1][0][0]);
    CHECK(memcmp(res[0][1], res[1][1], (size_t)C * sizeof(float)) == 0, "grad w differs across threads");
    CHECK(memcmp(res[0][2], res[1][2], (size_t)B * sizeof(float)) == 0, "grad s differs across threads");
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 3; j++)
            free(res[t][j]);
    free(xd);
    mpmd_graph_free(g);
}

/* ---- compare, where, and maximum / minimum at ties ----------------------------------------- */

static const float cmp_a[6] = {1, 2, 3, -1, 0, 2}, cmp_b[3] = {2, 2, -1};

static void test_compare_where(void) {
    /* a [2,3] against b [3] (broadcast), every comparison, exact 0/1 */
    for (int cmp = MPMD_CMP_EQ; cmp <= MPMD_CMP_GE; cmp++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value in[2] = {mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3)),
                            mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(3))};
        mpmd_value v = mpmd_compare(g, in[0], in[1], (mpmd_cmp)cmp);
        mpmd_keep(g, v);
        float out[6], *data[2] = {(float *)cmp_a, (float *)cmp_b};
        run_graph(g, 1, 2, in, data, v, out);
        int bad = 0;
        for (int i = 0; i < 6; i++) {
            float x = cmp_a[i], y = cmp_b[i % 3];
            int t = cmp == MPMD_CMP_EQ   ? x == y
                    : cmp == MPMD_CMP_NE ? x != y
                    : cmp == MPMD_CMP_LT ? x < y
                    : cmp == MPMD_CMP_LE ? x <= y
                    : cmp == MPMD_CMP_GT ? x > y
                                         : x >= y;
            bad += out[i] != (t ? 1.0f : 0.0f);
        }
        CHECK(bad == 0, "compare %d: %d elements wrong", cmp, bad);
        mpmd_graph_free(g);
    }
    /* where(a > b, a, -1): cond [2,3], a [2,3], b a scalar; the gradient
     * goes to a where the mask is set and to b elsewhere */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_param(g, "a", MPMD_SHAPE(2, 3), MPMD_ZEROS),
               b = mpmd_param(g, "b", MPMD_SHAPE(1), MPMD_ZEROS);
    mpmd_value ca = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(2, 3), cmp_a),
               cb = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(3), cmp_b);
    mpmd_value av = mpmd_add(g, a, ca), bv = mpmd_add_scalar(g, b, -1.0f);
    mpmd_value w = mpmd_where(g, mpmd_compare(g, av, cb, MPMD_CMP_GT), av, bv);
    mpmd_value gr[2], ps[2] = {a, b};
    mpmd_grad(g, mpmd_sum(g, w, 0, NULL, 0), 2, ps, gr);
    mpmd_keep(g, w), mpmd_keep(g, gr[0]), mpmd_keep(g, gr[1]);
    mpmd_exec *ex = tu_exec(g, 1);
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    float wv[6], ga[6], gb;
    CHECK(mpmd_exec_read(ex, w, wv, sizeof wv) == MPMD_OK &&
              mpmd_exec_read(ex, gr[0], ga, sizeof ga) == MPMD_OK &&
              mpmd_exec_read(ex, gr[1], &gb, sizeof gb) == MPMD_OK,
          "%s", mpmd_exec_error(ex));
    int bad = 0, set = 0;
    for (int i = 0; i < 6; i++) {
        int t = cmp_a[i] > cmp_b[i % 3];
        set += t;
        bad += wv[i] != (t ? cmp_a[i] : -1.0f) || ga[i] != (t ? 1.0f : 0.0f);
    }
    CHECK(bad == 0 && gb == (float)(6 - set), "where: %d elements wrong, d/db %g (want %d)", bad, gb,
          6 - set);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);

    /* maximum and minimum at a tie: half of the cotangent to each side */
    for (int mx = 0; mx < 2; mx++) {
        g = mpmd_graph_new();
        mpmd_value p = mpmd_param(g, "p", MPMD_SHAPE(3), MPMD_ONES),
                   q = mpmd_param(g, "q", MPMD_SHAPE(3), MPMD_ONES);
        mpmd_value y = mx ? mpmd_maximum(g, p, q) : mpmd_minimum(g, p, q);
        mpmd_value pq[2] = {p, q}, gpq[2];
        mpmd_grad(g, mpmd_sum(g, mpmd_mul_scalar(g, y, 3.0f), 0, NULL, 0), 2, pq, gpq);
        mpmd_keep(g, gpq[0]), mpmd_keep(g, gpq[1]);
        ex = tu_exec(g, 1);
        float gp[3], gq[3];
        CHECK(mpmd_exec_run(ex) == MPMD_OK && mpmd_exec_read(ex, gpq[0], gp, sizeof gp) == MPMD_OK &&
                  mpmd_exec_read(ex, gpq[1], gq, sizeof gq) == MPMD_OK,
              "%s", mpmd_exec_error(ex));
        CHECK(gp[0] == 1.5f && gq[0] == 1.5f && gp[2] == 1.5f && gq[2] == 1.5f,
              "%s at a tie: %g and %g, want 1.5 each", mx ? "maximum" : "minimum", gp[0], gq[0]);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
    /* NaN wins */
    g = mpmd_graph_new();
    mpmd_value in[2] = {mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2)),
                        mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(2))};
    mpmd_value v = mpmd_maximum(g, in[0], in[1]);
    mpmd_keep(g, v);
    float na[2] = {NAN, 1.0f}, nb[2] = {1.0f, NAN}, out[2], *data[2] = {na, nb};
    run_graph(g, 1, 2, in, data, v, out);
    CHECK(isnan(out[0]) && isnan(out[1]), "maximum with a NaN operand: %g %g", out[0], out[1]);
    mpmd_graph_free(g);
}

int main(void) {
    test_binary_forward();
    test_unary_forward();
    test_grad_ops_forward();
    test_broadcast_to();
    test_sum_to();
    test_gradients();
    test_errors();
    test_kernels();
    test_exec_threads();
    test_compare_where();
    return tu_report("test_ops_elementwise");
}
