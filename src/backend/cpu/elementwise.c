/* CPU kernels of the elementwise family (ops in src/ops/elementwise.c).
 *
 * Binary ops and broadcast_to: the output shape and the operands' shapes
 * (aligned at the last axis) are first "coalesced" (mpmd_bcast_plan_make,
 * src/backend/shape_plan.c, shared with the CUDA kernels): output axes of
 * size 1 are dropped and neighbouring axes that are broadcast the same way
 * in both operands are merged. What is left is a short list of groups, each with an
 * element stride per operand (0 where the operand is broadcast). The common
 * cases become one or two groups:
 *   equal shapes            [n]         strides (1, 1)
 *   scalar operand          [n]         strides (1, 0)
 *   row broadcast [R,C]+[C] [R][C]      strides (1,0)(1,1)
 *   column  [R,C]/[R,1]     [R][C]      strides (1,1)(1,0)
 * and the kernel runs the last group as a flat inner loop specialised on
 * its strides (vectorised with `omp simd`), the other groups as an
 * odometer over rows. Work is split over output elements; every output
 * element is computed by one thread from its own inputs, so results do not
 * depend on the thread count. When out == in[0] (in place) each element
 * reads its inputs before writing itself: correct.
 *
 * sum_to: see the comment above sum_to_kernel for its fixed summation order.
 *
 * The unary ops and their fused backward ops are generated from the lists
 * of src/ops/elementwise_ops.h: each op's formula is written once, in the
 * "formulas" section, and its loop function, kernel and table
 * row come from the list.
 */
#include "cpu.h"
#include "backend/op_descs.h"
#include "backend/shape_plan.h"
#include "util/half.h"
#include "util/philox.h"

#include <math.h>
#include <string.h>

/* ---- binary ops and broadcast_to ---------------------------------------------------- */

/* the formulas of MPMD_BINARY_OPS (src/ops/elementwise_ops.h) */
static inline float bn_add(float x, float y) { return x + y; }
static inline float bn_sub(float x, float y) { return x - y; }
static inline float bn_mul(float x, float y) { return x * y; }
static inline float bn_div(float x, float y) { return x / y; }
/* a NaN operand gives NaN (x != x: x is NaN; else y, NaN or not) */
static inline float bn_maximum(float x, float y) { return x > y || x != x ? x : y; }
static inline float bn_minimum(float x, float y) { return x < y || x != x ? x : y; }

/* BIN_EQ .. BIN_GE in mpmd_cmp's order */
enum bin_kind {
#define BIN_ENUM(name, tol) BIN_##name,
    MPMD_BINARY_OPS(BIN_ENUM) BIN_COPY,
    BIN_MAXW,
    BIN_EQ,
    BIN_NE,
    BIN_LT,
    BIN_LE,
    BIN_GT,
    BIN_GE
};

/* One run of n outputs: x walks a with stride sa, y walks b with stride sb,
 * each stride 0 or 1. The four stride cases are separate loops so that each
 * vectorises. */
#define ROW_LOOP(EXPR)                                                                                       \
    do {                                                                                                     \
        if (sa && sb) {                                                                                      \
            _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                                            \
                float x = a[j], y = b[j];                                                                    \
                o[j] = (EXPR);                                                                               \
            }                                                                                                \
        } else if (sa) {                                                                                     \
            const float y = b[0];                                                                            \
            _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                                            \
                float x = a[j];                                                                              \
                o[j] = (EXPR);                                                                               \
            }                                                                                                \
        } else if (sb) {                                                                                     \
            const float x = a[0];                                                                            \
            _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                                            \
                float y = b[j];                                                                              \
                o[j] = (EXPR);                                                                               \
            }                                                                                                \
        } else {                                                                                             \
            const float x = a[0], y = b[0], v = (EXPR);                                                      \
            for (int64_t j = 0; j < n; j++)                                                                  \
                o[j] = v;                                                                                    \
        }                                                                                                    \
    } while (0)

static void row_op(int kind, float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
    switch (kind) {
#define BIN_CASE(name, tol)                                                                                  \
    case BIN_##name: ROW_LOOP(bn_##name(x, y)); break;
        MPMD_BINARY_OPS(BIN_CASE)
    case BIN_COPY: ROW_LOOP(((void)y, x)); break;
    case BIN_MAXW: ROW_LOOP(x > y ? 1.0f : x == y ? 0.5f : 0.0f); break;
    case BIN_EQ: ROW_LOOP(x == y ? 1.0f : 0.0f); break;
    case BIN_NE: ROW_LOOP(x != y ? 1.0f : 0.0f); break;
    case BIN_LT: ROW_LOOP(x < y ? 1.0f : 0.0f); break;
    case BIN_LE: ROW_LOOP(x <= y ? 1.0f : 0.0f); break;
    case BIN_GT: ROW_LOOP(x > y ? 1.0f : 0.0f); break;
    case BIN_GE: ROW_LOOP(x >= y ? 1.0f : 0.0f); break;
    }
}

typedef struct bin_ctx {
    const mpmd_bcast_plan *p;
    int kind;
    float *o;
    const float *a, *b;
    int64_t numel;
} bin_ctx;

/* Output elements [lo, hi) of this thread: rows of the last group, walked
 * with an odometer over the outer groups. */
static void bin_work(void *vctx, int t, int nt) {
    const bin_ctx *c = vctx;
    const mpmd_bcast_plan *p = c->p;
    int64_t lo, hi;
    mpmd_split(c->numel, t, nt, &lo, &hi);
    if (lo >= hi) return;
    int last = p->ng - 1;
    int64_t cols = p->size[last], sac = p->sa[last], sbc = p->sb[last];
    int64_t idx[MPMD_MAX_DIMS], offa = 0, offb = 0, rem = lo / cols, col = lo % cols;
    for (int k = last - 1; k >= 0; k--) {
        idx[k] = rem % p->size[k];
        rem /= p->size[k];
        offa += idx[k] * p->sa[k];
        offb += idx[k] * p->sb[k];
    }
    for (int64_t i = lo; i < hi;) {
        int64_t n = cols - col;
        if (n > hi - i) n = hi - i;
        row_op(c->kind, c->o + i, c->a + offa + col * sac, sac, c->b + offb + col * sbc, sbc, n);
        i += n;
        col = 0;
        for (int k = last - 1; k >= 0; k--) { /* next row */
            offa += p->sa[k];
            offb += p->sb[k];
            if (++idx[k] < p->size[k]) break;
            offa -= p->sa[k] * p->size[k];
            offb -= p->sb[k] * p->size[k];
            idx[k] = 0;
        }
    }
}

static int run_binary(const mpmd_kargs *a, int kind) {
    const mpmd_type *out = &a->node->type;
    mpmd_bcast_plan p;
    mpmd_bcast_plan_make(&p, out, a->in_type[0], kind == BIN_COPY ? NULL : a->in_type[1]);
    bin_ctx c = {&p, kind, a->out, a->in[0], kind == BIN_COPY ? a->in[0] : a->in[1], mpmd_type_numel(out)};
    mpmd_cpu_parallel(a->dev, mpmd_threads_for(a->nthreads, c.numel), bin_work, &c);
    return 0;
}

#define BIN_KERNEL(name, tol)                                                                                \
    static int k_##name(const mpmd_kargs *a) { return run_binary(a, BIN_##name); }
MPMD_BINARY_OPS(BIN_KERNEL)
static int k_max_weight(const mpmd_kargs *a) { return run_binary(a, BIN_MAXW); }
static int k_compare(const mpmd_kargs *a) { return run_binary(a, BIN_EQ + mpmd_attr_cmp(a->node)); }
/* broadcast_to: out[i] = a[broadcast index of i] */
static int k_broadcast_to(const mpmd_kargs *a) { return run_binary(a, BIN_COPY); }

/* ---- formulas of the unary ops (src/ops/elementwise_ops.h) ------------------------------- */

/* One function per op: un_<name>(x) = y, and for MPMD_UNARY_GRAD_OPS
 * gr_<name>(gy, v) = the cotangent of x, v being y or x as the list says.
 * They are inlined into the loops below, which vectorise where the
 * formula has no libm call: gelu, sigmoid and silu use the vectorised exp
 * of cpu.h; exp, log, tanh (and softplus's log1p) use libm's expf/logf/
 * tanhf as they are (no -ffast-math), for their full range. */

/* gelu, tanh form: gelu(x) = 0.5 x (1 + tanh(u)), u = k (x + c x^3),
 * k = sqrt(2/pi), c = 0.044715. Since 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u))
 * = s, the kernel computes gelu(x) = x s with the vectorised exp of cpu.h:
 * the same function, without the cancellation of 1 + tanh(u) for negative
 * x. For x very negative s = 0 and x s = -0, the limit. */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u),
 * u' = k (1 + 3 c x^2); with 1 + t = 2 s and 1 - t^2 = 4 s (1 - s):
 * d gelu / dx = s + 2 x s (1 - s) u'. */
static inline float gelu_grad1(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    float s = mpmd_sigmoid_f32(2.0f * u);
    return s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

static inline float un_neg(float x) { return -x; }
static inline float un_exp(float x) { return expf(x); }
static inline float un_log(float x) { return logf(x); }
static inline float un_tanh(float x) { return tanhf(x); }
static inline float un_sqrt(float x) { return sqrtf(x); }
static inline float un_rsqrt(float x) { return 1.0f / sqrtf(x); }
static inline float un_square(float x) { return x * x; }
/* max(x, 0); written so that NaN passes through (seen by loss checks) */
static inline float un_relu(float x) { return x < 0.0f ? 0.0f : x; }
static inline float un_gelu(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    return x * mpmd_sigmoid_f32(2.0f * u);
}
/* 1 / (1 + e^-x), and x sigmoid(x) */
static inline float un_sigmoid(float x) { return mpmd_sigmoid_f32(x); }
static inline float un_silu(float x) { return x * mpmd_sigmoid_f32(x); }

static inline float gr_tanh(float gy, float y) { return gy * (1.0f - y * y); }
static inline float gr_sqrt(float gy, float y) { return gy * 0.5f / y; }
/* y = x^(-1/2): dy/dx = -x^(-3/2) / 2 = -0.5 y^3 */
static inline float gr_rsqrt(float gy, float y) { return -0.5f * gy * (y * y * y); }
static inline float gr_square(float gy, float x) { return 2.0f * x * gy; }
/* gy where y > 0, else 0 (relu'(0) = 0); gy is loaded unconditionally, so the select vectorises */
static inline float gr_relu(float gy, float y) { return y > 0.0f ? gy : 0.0f; }
static inline float gr_gelu(float gy, float x) { return gy * gelu_grad1(x); }
static inline float gr_sigmoid(float gy, float y) { return gy * (y * (1.0f - y)); }
/* s = sigmoid(x):  gy s (1 + x (1 - s)) */
static inline float gr_silu(float gy, float x) {
    float s = mpmd_sigmoid_f32(x);
    return gy * (s * (1.0f + x * (1.0f - s)));
}

/* log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): e^-|x| <= 1 never overflows,
 * and log1p keeps it where it is below an ulp of 1 (very negative x); NaN
 * passes */
static inline float un_softplus(float x) { return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x))); }
/* d softplus / dx = sigmoid(x) */
static inline float gr_softplus(float gy, float x) { return gy * mpmd_sigmoid_f32(x); }

/* ---- unary ops ------------------------------------------------------------------------ */

/* One loop function per op (an op added to the list leaves the code of the
 * others as it was), run on the range [lo, hi) of a thread. */
typedef void (*un_loop)(float *o, const float *x, int64_t n, float s);

MPMD_VEC_CLONES
static void un_loop_add_scalar(float *o, const float *x, int64_t n, float s) { /* x + s */
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        o[i] = x[i] + s;
}
MPMD_VEC_CLONES
static void un_loop_mul_scalar(float *o, const float *x, int64_t n, float s) { /* x s */
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        o[i] = x[i] * s;
}
#define UN_LOOP(name, ...)                                                                                   \
    MPMD_VEC_CLONES                                                                                          \
    static void un_loop_##name(float *o, const float *x, int64_t n, float s) {                               \
        (void)s;                                                                                             \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = un_##name(x[i]);                          \
    }
MPMD_UNARY_OPS(UN_LOOP)
MPMD_UNARY_GRAD_OPS(UN_LOOP)

typedef struct un_ctx {
    un_loop loop;
    float *o;
    const float *x;
    int64_t n;
    float s;
} un_ctx;

static void un_work(void *vctx, int t, int nt) {
    const un_ctx *c = vctx;
    int64_t lo, hi;
    mpmd_split(c->n, t, nt, &lo, &hi);
    if (lo < hi) c->loop(c->o + lo, c->x + lo, hi - lo, c->s);
}

/* cost: rough elementary operations per element, for the thread threshold */
static int run_unary(const mpmd_kargs *a, un_loop loop, int cost) {
    un_ctx c = {loop, a->out, a->in[0], mpmd_type_numel(&a->node->type), mpmd_attr_scalar(a->node)};
    mpmd_cpu_parallel(a->dev, mpmd_threads_for(a->nthreads, c.n * cost), un_work, &c);
    return 0;
}

static int k_add_scalar(const mpmd_kargs *a) { return run_unary(a, un_loop_add_scalar, 1); }
static int k_mul_scalar(const mpmd_kargs *a) { return run_unary(a, un_loop_mul_scalar, 1); }
#define UN_KERNEL(name, reads, tol, domain, cost, gcost)                                                     \
    static int k_##name(const mpmd_kargs *a) { return run_unary(a, un_loop_##name, cost); }
MPMD_UNARY_OPS(UN_KERNEL)
MPMD_UNARY_GRAD_OPS(UN_KERNEL)

/* ---- fused backward ops: out = f(gy, v), same shape ---------------------------------------- */

typedef void (*gr_loop)(float *o, const float *gy, const float *v, int64_t n);

#define GR_LOOP(name, ...)                                                                                   \
    MPMD_VEC_CLONES                                                                                          \
    static void gr_loop_##name(float *o, const float *gy, const float *v, int64_t n) {                       \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = gr_##name(gy[i], v[i]);                   \
    }
MPMD_UNARY_GRAD_OPS(GR_LOOP)

/* v = the mask:  gy where it is set, else 0 */
MPMD_VEC_CLONES
static void gr_loop_where_t(float *o, const float *gy, const float *v, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = gy[i];
        o[i] = v[i] != 0.0f ? gi : 0.0f;
    }
}
/* gy where the mask is clear, else 0 */
MPMD_VEC_CLONES
static void gr_loop_where_f(float *o, const float *gy, const float *v, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = gy[i];
        o[i] = v[i] != 0.0f ? 0.0f : gi;
    }
}

typedef struct gr_ctx {
    gr_loop loop;
    float *o;
    const float *gy, *v;
    int64_t n;
} gr_ctx;

static void gr_work(void *vctx, int t, int nt) {
    const gr_ctx *c = vctx;
    int64_t lo, hi;
    mpmd_split(c->n, t, nt, &lo, &hi);
    if (lo < hi) c->loop(c->o + lo, c->gy + lo, c->v + lo, hi - lo);
}

static int run_grad(const mpmd_kargs *a, gr_loop loop, int cost) {
    gr_ctx c = {loop, a->out, a->in[0], a->in[1], mpmd_type_numel(&a->node->type)};
    mpmd_cpu_parallel(a->dev, mpmd_threads_for(a->nthreads, c.n * cost), gr_work, &c);
    return 0;
}

#define GR_KERNEL(name, reads, tol, domain, cost, gcost)                                                     \
    static int k_##name##_grad(const mpmd_kargs *a) { return run_grad(a, gr_loop_##name, gcost); }
MPMD_UNARY_GRAD_OPS(GR_KERNEL)
static int k_where_grad(const mpmd_kargs *a) {
    return run_grad(a, mpmd_attr_where_side(a->node) ? gr_loop_where_f : gr_loop_where_t, 1);
}

/* ---- where: out = cond != 0 ? a : b, three operands of out's shape ----------------------------- */

typedef struct where_ctx {
    float *o;
    const float *c, *a, *b;
    int64_t n;
} where_ctx;

static void where_work(void *vctx, int t, int nt) {
    const where_ctx *w = vctx;
    int64_t lo, hi;
    mpmd_split(w->n, t, nt, &lo, &hi);
    const float *c = w->c, *a = w->a, *b = w->b;
    float *o = w->o;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        float x = a[i], y = b[i]; /* both loaded, so the select vectorises (o may alias a) */
        o[i] = c[i] != 0.0f ? x : y;
    }
}

static int k_where(const mpmd_kargs *a) {
    where_ctx w = {a->out, a->in[0], a->in[1], a->in[2], mpmd_type_numel(&a->node->type)};
    mpmd_cpu_parallel(a->dev, mpmd_threads_for(a->nthreads, w.n), where_work, &w);
    return 0;
}

/* ---- dropout ------------------------------------------------------------------------------------- */

/* Element i of microbatch mb keeps its value when the 32-bit word
 * philox(key, counter)[i % 4] >= rate 2^32, counter = (i / 4 as 64 bits,
 * mb, stream): a pure function of those, so any split of the elements over
 * threads, and any rank, draws the same mask. */
typedef struct drop_ctx {
    float *o;
    const float *x;
    int64_t n;
    uint32_t key[2], mb, stream, threshold;
    float scale;
} drop_ctx;

static void drop_work(void *vctx, int t, int nt) {
    const drop_ctx *d = vctx;
    int64_t blocks = (d->n + 3) / 4, lo, hi;
    mpmd_split(blocks, t, nt, &lo, &hi);
    for (int64_t blk = lo; blk < hi; blk++) {
        uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)((uint64_t)blk >> 32), d->mb, d->stream}, r[4];
        mpmd_philox4x32(ctr, d->key, r);
        int64_t i0 = blk * 4;
        for (int j = 0; j < 4 && i0 + j < d->n; j++)
            d->o[i0 + j] = r[j] >= d->threshold ? d->x[i0 + j] * d->scale : 0.0f;
    }
}

static int k_dropout(const mpmd_kargs *a) {
    const int32_t *key = a->in[1];
    float rate = mpmd_attr_dropout_rate(a->node);
    drop_ctx d = {a->out,
                  a->in[0],
                  mpmd_type_numel(&a->node->type),
                  {(uint32_t)key[0], (uint32_t)key[1]},
                  (uint32_t)a->mb,
                  (uint32_t)mpmd_attr_dropout_stream(a->node),
                  mpmd_dropout_threshold(rate),
                  1.0f / (1.0f - rate)};
    mpmd_cpu_parallel(a->dev, mpmd_threads_for(a->nthreads, d.n * 8), drop_work, &d);
    return 0;
}

/* ---- sum_to ------------------------------------------------------------------------------------ */

/* sum_to(x, shape): out[o] = sum of x over the positions that broadcast to o.
 *
 * The input's axes (aligned with the target's) are coalesced into groups
 * that are either kept (target size = input size) or reduced (target size
 * 1); axes of size 1 are dropped (mpmd_sum_plan_make, shape_plan.c). The summation order for each output
 * element is fixed by the shapes alone:
 *  - last group kept (e.g. a bias gradient [N, C] -> [C]): the reduced
 *    positions are added one by one in row-major order, starting from 0:
 *    out[c] = ((0 + x[0,c]) + x[1,c]) + ... Threads split the columns of
 *    the last group, and the inner loop over columns is vectorised.
 *  - last group reduced (e.g. [N, C] -> [N, 1], or everything -> [1]): each
 *    innermost run is summed with mpmd_sum_f32 (eight interleaved partial
 *    sums), and those run sums are added in row-major order starting from
 *    0. Threads split the output elements.
 *  - no reduced group: a copy.
 */
typedef struct sum_ctx {
    const mpmd_sum_plan *p;
    float *o;
    const float *x;
} sum_ctx;

/* Last group kept, of C columns: this thread owns a block of columns in
 * every output row; it walks the input rows in row-major order (an odometer
 * over the outer groups) and adds each into its output row. Columns are
 * split in blocks of 16 floats (a cache line) to keep threads apart. */
static void sum_cols_work(void *vctx, int t, int nt) {
    const sum_ctx *c = vctx;
    const mpmd_sum_plan *p = c->p;
    int last = p->ng - 1;
    int64_t C = p->size[last], lo, hi;
    mpmd_split((C + 15) / 16, t, nt, &lo, &hi);
    lo *= 16;
    hi *= 16;
    if (hi > C) hi = C;
    if (lo >= hi) return;
    int64_t w = hi - lo, out_rows = p->out_numel / C, in_rows = p->in_numel / C;
    for (int64_t r = 0; r < out_rows; r++)
        memset(c->o + r * C + lo, 0, (size_t)w * sizeof(float));
    int64_t idx[MPMD_MAX_DIMS] = {0}, ox = 0, oo = 0;
    for (int64_t r = 0; r < in_rows; r++) {
        float *o = c->o + oo + lo;
        const float *x = c->x + ox + lo;
#pragma omp simd
        for (int64_t j = 0; j < w; j++)
            o[j] += x[j];
        for (int k = last - 1; k >= 0; k--) { /* next input row */
            ox += p->sx[k];
            oo += p->so[k];
            if (++idx[k] < p->size[k]) break;
            ox -= p->sx[k] * p->size[k];
            oo -= p->so[k] * p->size[k];
            idx[k] = 0;
        }
    }
}

/* Last group reduced, runs of L elements: this thread owns a range of
 * output elements; for each it adds the run sums over the outer reduced
 * groups in row-major order. */
static void sum_runs_work(void *vctx, int t, int nt) {
    const sum_ctx *c = vctx;
    const mpmd_sum_plan *p = c->p;
    int last = p->ng - 1;
    int64_t L = p->size[last], lo, hi;
    mpmd_split(p->out_numel, t, nt, &lo, &hi);
    /* the outer reduced groups, and how many run sums each output adds */
    int rg[MPMD_MAX_DIMS], nr = 0;
    int64_t runs = 1;
    for (int k = 0; k < last; k++)
        if (p->red[k]) {
            rg[nr++] = k;
            runs *= p->size[k];
        }
    for (int64_t e = lo; e < hi; e++) {
        /* input offset of output element e: its kept-group indices */
        int64_t base = 0, rem = e;
        for (int k = last - 1; k >= 0; k--) {
            if (p->red[k]) continue;
            base += (rem % p->size[k]) * p->sx[k];
            rem /= p->size[k];
        }
        int64_t idx[MPMD_MAX_DIMS] = {0}, off = 0;
        float acc = 0.0f;
        for (int64_t r = 0; r < runs; r++) {
            acc += mpmd_sum_f32(c->x + base + off, L);
            for (int q = nr - 1; q >= 0; q--) { /* next reduced position */
                int k = rg[q];
                off += p->sx[k];
                if (++idx[k] < p->size[k]) break;
                off -= p->sx[k] * p->size[k];
                idx[k] = 0;
            }
        }
        c->o[e] = acc;
    }
}

static int k_sum_to(const mpmd_kargs *a) {
    mpmd_sum_plan p;
    mpmd_sum_plan_make(&p, a->in_type[0], &a->node->type);
    sum_ctx c = {&p, a->out, a->in[0]};
    if (!p.any_red) { /* same elements in the same order: [1,3] -> [3] */
        memcpy(a->out, a->in[0], (size_t)p.out_numel * sizeof(float));
        return 0;
    }
    int nt = mpmd_threads_for(a->nthreads, p.in_numel);
    if (!p.red[p.ng - 1]) {
        int64_t blocks = (p.size[p.ng - 1] + 15) / 16;
        if (nt > blocks) nt = (int)blocks;
        mpmd_cpu_parallel(a->dev, nt, sum_cols_work, &c);
    } else {
        if (nt > p.out_numel) nt = (int)p.out_numel;
        mpmd_cpu_parallel(a->dev, nt, sum_runs_work, &c);
    }
    return 0;
}

/* ---- cast ------------------------------------------------------------------------------ */

/* Element k converted through f32 (exact from any 16-bit float), then
 * rounded to the output dtype, nearest even. */
typedef struct {
    mpmd_dtype from, to;
    const void *x;
    void *y;
} cast_job;

static void cast_part(void *ctx, int64_t lo, int64_t hi) {
    const cast_job *j = ctx;
    for (int64_t k = lo; k < hi; k++) {
        float v = j->from == MPMD_F32    ? ((const float *)j->x)[k]
                  : j->from == MPMD_BF16 ? mpmd_bf16_to_f32(((const uint16_t *)j->x)[k])
                                         : mpmd_f16_to_f32(((const uint16_t *)j->x)[k]);
        if (j->to == MPMD_F32)
            ((float *)j->y)[k] = v;
        else if (j->to == MPMD_BF16)
            ((uint16_t *)j->y)[k] = mpmd_f32_to_bf16(v);
        else
            ((uint16_t *)j->y)[k] = mpmd_f32_to_f16(v);
    }
}

static int k_cast(const mpmd_kargs *a) {
    mpmd_dtype from = a->in_type[0]->dtype, to = a->node->type.dtype;
    int64_t n = mpmd_type_numel(&a->node->type);
    const void *x = a->in[0];
    void *y = a->out;
    if (from == MPMD_F32) return mpmd_cpu_narrow(a->dev, a->nthreads, to, x, y, n), 0;
    if (to == MPMD_F32) return mpmd_cpu_widen(a->dev, a->nthreads, from, x, y, n), 0;
    cast_job j = {from, to, x, y};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, n), n, cast_part, &j);
    return 0;
}

/* ---- the table ------------------------------------------------------------------------------ */

const mpmd_kernel mpmd_cpu_elementwise_kernels[] = {
    {&mpmd_op_add_scalar, k_add_scalar, NULL, 0},
    {&mpmd_op_mul_scalar, k_mul_scalar, NULL, 0},
    {&mpmd_op_broadcast_to, k_broadcast_to, NULL, 0},
    {&mpmd_op_sum_to, k_sum_to, NULL, 0},
    {&mpmd_op_cast, k_cast, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_max_weight, k_max_weight, NULL, 0},
    {&mpmd_op_compare, k_compare, NULL, 0},
    {&mpmd_op_where, k_where, NULL, 0},
    {&mpmd_op_where_grad, k_where_grad, NULL, 0},
    {&mpmd_op_dropout, k_dropout, NULL, 0},
#define UN_ROW(name, ...) {&mpmd_op_##name, k_##name, NULL, 0},
#define GR_ROW(name, ...)                                                                                    \
    {&mpmd_op_##name, k_##name, NULL, 0}, {&mpmd_op_##name##_grad, k_##name##_grad, NULL, 0},
#define BIN_ROW(name, tol) {&mpmd_op_##name, k_##name, NULL, 0},
    MPMD_BINARY_OPS(BIN_ROW) MPMD_UNARY_OPS(UN_ROW) MPMD_UNARY_GRAD_OPS(GR_ROW){0},
};
