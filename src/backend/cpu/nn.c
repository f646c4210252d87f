/* CPU kernels of the neural-network family (ops in src/ops/nn.c).
 *
 * Every kernel splits its work over output elements (rows, column blocks, or
 * matrices of a batch), so each output is computed by one thread, and every
 * reduction runs in an order fixed by the sizes alone (mpmd_sum_f32 and the
 * eight-lane loops below): the bits never depend on the thread count. Every
 * matrix product is an sgemm. Threads are asked for with mpmd_threads_for,
 * and each region partitions by the team it actually got.
 */
#include "cpu.h"
#include "backend/shape_plan.h"

#include "../../ops/nn.h"
#include "../../util/rope.h"

#include <math.h>
#include <string.h>

/* sum over i of exp(x[i] - m), in chunks of 256 (exp into a stack buffer,
 * mpmd_sum_f32 per chunk, chunk sums added in order): a fixed order that
 * depends only on n, and x is only read (in-place callers stay correct). */
#define NN_CHUNK 256
MPMD_VEC_CLONES
static float sum_exp_shift(const float *x, int64_t n, float m) {
    float buf[NN_CHUNK];
    float s = 0.0f;
    for (int64_t i0 = 0; i0 < n; i0 += NN_CHUNK) {
        int64_t len = n - i0 < NN_CHUNK ? n - i0 : NN_CHUNK;
#pragma omp simd
        for (int64_t k = 0; k < len; k++)
            buf[k] = mpmd_exp_f32(x[i0 + k] - m);
        s += mpmd_sum_f32(buf, len);
    }
    return s;
}

/* Rows of a tensor: all leading axes folded; the last axis is the row. */
static int64_t last_dim(const mpmd_type *t) { return t->ndim ? t->dim[t->ndim - 1] : 1; }

/* ---- matmul ------------------------------------------------------------------------ */

/* OpenBLAS 0.3.21 does not give the same bits on 1 and 2 threads (its
 * threaded driver blocks a product differently; tests/test_ops_nn.c shows
 * it on [256,768] x [768,3072]). So the kernel never lets OpenBLAS thread:
 * it cuts the output into a grid of tiles that depends on (M, N, K) only,
 * computes each tile with a one-thread sgemm, and hands whole tiles to the
 * threads. The same calls run whatever the thread count, hence the same bits.
 *
 * The grid: about one tile per 2^24 flops (0.15 ms), at most 16, none
 * narrower or lower than 256, an even count where there is a choice (so
 * that two threads balance). One side of C is cut first, then the other;
 * of the two orders the one giving more tiles, and on a tie the one that
 * cuts the longer side first: every column of tiles packs its rows of A
 * again and every row of tiles its columns of B, so the operand with more
 * to pack is packed once. (The LM head's weight gradient, 50257 x 768 with
 * K = 256, went from 8 tiles down and 2 across to 16 down: A packed once
 * instead of twice.) Tile edges are multiples of 16, the kernels' unroll. */
typedef struct mm_grid {
    int64_t mb, nb; /* tile height and width */
    int64_t tm, tn; /* tiles down and across */
} mm_grid;

static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }

static mm_grid matmul_grid(int64_t m, int64_t n, int64_t k) {
    mm_grid gr = {m, n, 1, 1};
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int64_t want = (int64_t)(flops / 16777216.0);
    if (want > 16) want = 16;
    if (want < 2) return gr;
    /* both orders of cutting; the one with more tiles, and on a tie the one
     * that cuts the longer side first (the operand with more to pack) */
    int64_t tm = 1, tn = 1;
    for (int rows_first = 0; rows_first < 2; rows_first++) {
        int64_t a1 = rows_first ? m : n, a2 = rows_first ? n : m;
        int64_t t1 = a1 / 256 < want ? a1 / 256 : want;
        if (t1 < 1) t1 = 1;
        if (t1 > 1 && t1 % 2) t1--;
        int64_t t2 = a2 / 256 < want / t1 ? a2 / 256 : want / t1;
        if (t2 < 1) t2 = 1;
        if (t2 > 1 && t2 % 2 && t1 % 2) t2--;
        int64_t cm = rows_first ? t1 : t2, cn = rows_first ? t2 : t1;
        if (cm * cn > tm * tn || (cm * cn == tm * tn && rows_first && m > n)) tm = cm, tn = cn;
    }
    if (tm * tn == 1) { /* a mid-sized product: halves of at least 128 */
        if (n >= m && n >= 256)
            tn = 2;
        else if (m >= 256)
            tm = 2;
    }
    gr.nb = round_up((n + tn - 1) / tn, 16);
    gr.mb = round_up((m + tm - 1) / tm, 16);
    gr.tn = (n + gr.nb - 1) / gr.nb;
    gr.tm = (m + gr.mb - 1) / gr.mb;
    return gr;
}

/* C[..., M, N] = op(A) op(B) (see mpmd_matmul). A 2-D b with an untransposed
 * a is one product with the batch folded into M; otherwise one product per
 * batch item (the dimensions: mpmd_matmul_dims_make, shared with CUDA).
 * Work units are (item, tile) pairs, split over the threads in contiguous
 * runs; each is one single-threaded sgemm. */
typedef struct {
    const mpmd_matmul_dims *md;
    const mm_grid *gr;
    float alpha;
    const float *A, *B;
    float *C;
} matmul_job;

/* units [lo, hi) of (item, tile) */
static void matmul_part(void *ctx, int64_t lo, int64_t hi) {
    const matmul_job *j = ctx;
    const mpmd_matmul_dims *md = j->md;
    const mm_grid gr = *j->gr;
    const int64_t m = md->m, n = md->n, k = md->k, lda = md->lda, ldb = md->ldb, per_item = gr.tm * gr.tn;
    for (int64_t u = lo; u < hi; u++) {
        int64_t item = u / per_item, t = u % per_item;
        int64_t m0 = (t / gr.tn) * gr.mb, n0 = (t % gr.tn) * gr.nb;
        int64_t mm = m - m0 < gr.mb ? m - m0 : gr.mb, nn = n - n0 < gr.nb ? n - n0 : gr.nb;
        const float *Ai = j->A + item * md->sa + (md->tra ? m0 : m0 * lda);
        const float *Bi = j->B + item * md->sb + (md->trb ? n0 * ldb : n0);
        mpmd_sgemm(1, md->tra, md->trb, mm, nn, k, j->alpha, Ai, lda, Bi, ldb, 0.0f,
                   j->C + item * md->sc + m0 * n + n0, n);
    }
}

static int k_matmul(const mpmd_kargs *a) {
    mpmd_matmul_dims md;
    mpmd_matmul_dims_make(&md, a->in_type[0], a->in_type[1], mpmd_matmul_flags(a->node));
    const float alpha = mpmd_matmul_alpha(a->node);
    mm_grid gr = matmul_grid(md.m, md.n, md.k);
    int64_t per_item = gr.tm * gr.tn, units = md.batch * per_item;
    int nt = a->nthreads < units ? a->nthreads : (int)units;
    matmul_job j = {&md, &gr, alpha, a->in[0], a->in[1], a->out};
    mpmd_cpu_for(a->dev, nt, units, matmul_part, &j);
    return 0;
}

/* ---- softmax family ------------------------------------------------------------------- */

/* Row kernels. `n` is the row length, `len` (<= n) the unmasked prefix for
 * the causal variants (len = n otherwise); entries len..n-1 are set to 0. */

/* y = exp(x - max) / sum(exp(x - max)). In place (y == x) is fine: x[i] is
 * read once, before y[i] is written. */
MPMD_VEC_CLONES
static void softmax_row(const float *x, float *y, int64_t len, int64_t n) {
    float m = mpmd_max_f32(x, len);
#pragma omp simd
    for (int64_t i = 0; i < len; i++)
        y[i] = mpmd_exp_f32(x[i] - m);
    float inv = 1.0f / mpmd_sum_f32(y, len);
#pragma omp simd
    for (int64_t i = 0; i < len; i++)
        y[i] *= inv;
    for (int64_t i = len; i < n; i++)
        y[i] = 0.0f;
}

/* y = (x - max) - log(sum(exp(x - max))). */
static void log_softmax_row(const float *x, float *y, int64_t n) {
    float m = mpmd_max_f32(x, n);
    float ls = logf(sum_exp_shift(x, n, m));
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] - m) - ls;
}

/* gx = y * (gy - sum(gy * y)); gx may alias gy. */
static void softmax_grad_row(const float *y, const float *gy, float *gx, int64_t len, int64_t n) {
    float d = mpmd_dot_f32(gy, y, len);
#pragma omp simd
    for (int64_t i = 0; i < len; i++)
        gx[i] = y[i] * (gy[i] - d);
    for (int64_t i = len; i < n; i++)
        gx[i] = 0.0f;
}

/* gx = gy - exp(y) * sum(gy); gx may alias gy. */
MPMD_VEC_CLONES
static void log_softmax_grad_row(const float *y, const float *gy, float *gx, int64_t n) {
    float s = mpmd_sum_f32(gy, n);
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        gx[i] = gy[i] - mpmd_exp_f32(y[i]) * s;
}

enum { SM_SOFTMAX, SM_CAUSAL, SM_LOG, SM_GRAD, SM_CAUSAL_GRAD, SM_LOG_GRAD };

/* All six ops over rows: parallel over rows, each row on one thread. In the
 * causal ones, row r of a [..., T, T] tensor is query r % T. */
typedef struct {
    const mpmd_kargs *a;
    int kind;
} softmax_job;

static void softmax_rows(void *ctx, int64_t lo, int64_t hi) {
    const softmax_job *j = ctx;
    const mpmd_kargs *a = j->a;
    const int kind = j->kind;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0];
    const float *gy = (kind >= SM_GRAD) ? (const float *)a->in[1] : NULL;
    float *y = a->out;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        int64_t len = (kind == SM_CAUSAL || kind == SM_CAUSAL_GRAD) ? r % n + 1 : n;
        switch (kind) {
        case SM_SOFTMAX:
        case SM_CAUSAL: softmax_row(xr, yr, len, n); break;
        case SM_LOG: log_softmax_row(xr, yr, n); break;
        case SM_GRAD:
        case SM_CAUSAL_GRAD: softmax_grad_row(xr, gy + r * n, yr, len, n); break;
        case SM_LOG_GRAD: log_softmax_grad_row(xr, gy + r * n, yr, n); break;
        }
    }
}

static int softmax_family(const mpmd_kargs *a, int kind) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), rows = n ? mpmd_type_numel(t) / n : 0;
    softmax_job j = {a, kind};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, rows * n * 4), rows, softmax_rows, &j);
    return 0;
}

static int k_softmax(const mpmd_kargs *a) { return softmax_family(a, SM_SOFTMAX); }
static int k_softmax_causal(const mpmd_kargs *a) { return softmax_family(a, SM_CAUSAL); }
static int k_log_softmax(const mpmd_kargs *a) { return softmax_family(a, SM_LOG); }
static int k_softmax_grad(const mpmd_kargs *a) { return softmax_family(a, SM_GRAD); }
static int k_softmax_causal_grad(const mpmd_kargs *a) { return softmax_family(a, SM_CAUSAL_GRAD); }
static int k_log_softmax_grad(const mpmd_kargs *a) { return softmax_family(a, SM_LOG_GRAD); }

/* ---- layer norm ---------------------------------------------------------------------- */

/* Row statistics, shared by the forward and both backward kernels so they
 * agree bit for bit: mean = sum(x) / n (mpmd_sum_f32), then the variance of
 * the centred row (eight interleaved partial sums, as mpmd_sum_f32), and
 * rstd = 1 / sqrt(var + eps). Two passes: no cancellation from E[x^2] - E[x]^2. */
static void ln_stats(const float *x, int64_t n, float eps, float *mean, float *rstd) {
    float mu = mpmd_sum_f32(x, n) / (float)n;
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            float d = x[i + j] - mu;
            s[j] += d * d;
        }
    float v = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (; i < n; i++)
        v += (x[i] - mu) * (x[i] - mu);
    *mean = mu;
    *rstd = 1.0f / sqrtf(v / (float)n + eps);
}

/* The row kernels below run over rows [lo, hi) with the kernel's
 * arguments as their context (over_rows). */
static int over_rows(const mpmd_kargs *a, int64_t per_elem, mpmd_range_fn fn) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), rows = n ? mpmd_type_numel(t) / n : 0;
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, rows * n * per_elem), rows, fn, (void *)a);
    return 0;
}

/* y = (x - mean) * rstd * gamma + beta, per row; y may alias x. */
static void layer_norm_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0], *gamma = a->in[1], *beta = a->in[2];
    float *y = a->out;
    const float eps = mpmd_norm_eps(a->node);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float mu, rs;
        ln_stats(xr, n, eps, &mu, &rs);
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            yr[i] = ((xr[i] - mu) * rs) * gamma[i] + beta[i];
    }
}
static int k_layer_norm(const mpmd_kargs *a) { return over_rows(a, 4, layer_norm_rows); }

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * gamma,
 * xhat = (x - mean) * rstd, per row (statistics recomputed). Both sums run
 * in eight interleaved lanes in a fixed order. dx may alias gy: each row's
 * gy is fully read by the sums before the row is written. */
static void layer_norm_grad_x_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0], *gamma = a->in[1], *gy = a->in[2];
    float *dx = a->out;
    const float eps = mpmd_norm_eps(a->node);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n, *gr = gy + r * n;
        float *dr = dx + r * n;
        float mu, rs;
        ln_stats(xr, n, eps, &mu, &rs);
        float s1[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) {
                float gg = gr[i + j] * gamma[i + j];
                float xh = (xr[i + j] - mu) * rs;
                s1[j] += gg;
                s2[j] += gg * xh;
            }
        float sg = ((s1[0] + s1[4]) + (s1[2] + s1[6])) + ((s1[1] + s1[5]) + (s1[3] + s1[7]));
        float sgx = ((s2[0] + s2[4]) + (s2[2] + s2[6])) + ((s2[1] + s2[5]) + (s2[3] + s2[7]));
        for (; i < n; i++) {
            float gg = gr[i] * gamma[i];
            sg += gg;
            sgx += gg * ((xr[i] - mu) * rs);
        }
        float mg = sg / (float)n, mgx = sgx / (float)n;
#pragma omp simd
        for (int64_t k = 0; k < n; k++) {
            float gg = gr[k] * gamma[k];
            float xh = (xr[k] - mu) * rs;
            dr[k] = rs * ((gg - mg) - xh * mgx);
        }
    }
}
static int k_layer_norm_grad_x(const mpmd_kargs *a) { return over_rows(a, 6, layer_norm_grad_x_rows); }

/* ---- RMS norm ------------------------------------------------------------------------------ */

/* r = 1 / sqrt(mean(x^2) + eps) of one row, the sum of squares in eight
 * interleaved lanes (mpmd_dot_f32): the same in all three kernels. */
static float rms_r(const float *x, int64_t n, float eps) {
    return 1.0f / sqrtf(mpmd_dot_f32(x, x, n) / (float)n + eps);
}

/* y = x * r * scale, per row; y may alias x. */
static void rms_norm_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0], *scale = a->in[1];
    float *y = a->out;
    const float eps = mpmd_norm_eps(a->node);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float rs = rms_r(xr, n, eps);
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            yr[i] = (xr[i] * rs) * scale[i];
    }
}
static int k_rms_norm(const mpmd_kargs *a) { return over_rows(a, 3, rms_norm_rows); }

/* dx = r * (g - xhat * mean(g * xhat)), g = gy * scale, xhat = x * r, per
 * row. dx may alias gy: the row's sum reads all of gy before it is written. */
static void rms_norm_grad_x_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0], *scale = a->in[1], *gy = a->in[2];
    float *dx = a->out;
    const float eps = mpmd_norm_eps(a->node);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n, *gr = gy + r * n;
        float *dr = dx + r * n;
        float rs = rms_r(xr, n, eps);
        float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                s[j] += (gr[i + j] * scale[i + j]) * (xr[i + j] * rs);
        float sgx = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
        for (; i < n; i++)
            sgx += (gr[i] * scale[i]) * (xr[i] * rs);
        float mgx = sgx / (float)n;
#pragma omp simd
        for (int64_t k = 0; k < n; k++)
            dr[k] = rs * ((gr[k] * scale[k]) - (xr[k] * rs) * mgx);
    }
}
static int k_rms_norm_grad_x(const mpmd_kargs *a) { return over_rows(a, 5, rms_norm_grad_x_rows); }

/* ---- the scale gradient of both norms ------------------------------------------------------ */

/* dscale[c] = sum over rows r, in order, of gy[r, c] * xhat[r, c], xhat =
 * (x - mean) * rstd (for RMS norm mean 0 and rstd its r, so that x - 0 is
 * x). First every row's (mean, rstd) into scratch (parallel over rows),
 * then threads split blocks of 16 columns and walk all rows: each column's
 * sum has the same order on any thread count. */
static size_t scratch_norm_grad_scale(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *t = mpmd_type_of(g, mpmd_in(n, 0));
    return (size_t)(mpmd_type_numel(t) / last_dim(t)) * 2 * sizeof(float);
}

typedef struct {
    const mpmd_kargs *a;
    int rms;
} norm_scale_job;

/* each row's (mean, rstd) into scratch */
static void norm_stats_rows(void *ctx, int64_t lo, int64_t hi) {
    const norm_scale_job *j = ctx;
    const mpmd_kargs *a = j->a;
    const int64_t n = last_dim(a->in_type[0]);
    const float *x = a->in[0];
    float *stats = a->scratch;
    const float eps = mpmd_norm_eps(a->node);
    for (int64_t r = lo; r < hi; r++) {
        if (j->rms)
            stats[2 * r] = 0.0f, stats[2 * r + 1] = rms_r(x + r * n, n, eps);
        else
            ln_stats(x + r * n, n, eps, &stats[2 * r], &stats[2 * r + 1]);
    }
}

/* the column blocks [lo, hi) of 16, over every row in order */
static void norm_scale_cols(void *ctx, int64_t lo, int64_t hi) {
    const norm_scale_job *j = ctx;
    const mpmd_kargs *a = j->a;
    const mpmd_type *t = a->in_type[0];
    const int64_t n = last_dim(t), rows = mpmd_type_numel(t) / n;
    const float *x = a->in[0], *gy = a->in[1], *stats = a->scratch;
    float *dg = a->out;
    int64_t c0 = lo * 16, c1 = hi * 16 < n ? hi * 16 : n;
    for (int64_t c = c0; c < c1; c++)
        dg[c] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *gr = gy + r * n;
        float mu = stats[2 * r], rs = stats[2 * r + 1];
#pragma omp simd
        for (int64_t c = c0; c < c1; c++)
            dg[c] += gr[c] * ((xr[c] - mu) * rs);
    }
}

static int norm_grad_scale(const mpmd_kargs *a, int rms) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), rows = mpmd_type_numel(t) / n;
    int nt = mpmd_threads_for(a->nthreads, rows * n * 4);
    norm_scale_job j = {a, rms};
    mpmd_cpu_for(a->dev, nt, rows, norm_stats_rows, &j);
    mpmd_cpu_for(a->dev, nt, (n + 15) / 16, norm_scale_cols, &j);
    return 0;
}

static int k_layer_norm_grad_gamma(const mpmd_kargs *a) { return norm_grad_scale(a, 0); }
static int k_rms_norm_grad_scale(const mpmd_kargs *a) { return norm_grad_scale(a, 1); }

/* ---- rotary position embedding ------------------------------------------------------------ */

/* x [..., T, H, D]: the angles of the P positions the op turns by go to
 * scratch first, cos and sin of p w_i for i < D/2 (src/util/rope.h: w_i in
 * double, the cos and sin in double, rounded once), then each (row, head)
 * turns its pairs (i, i + D/2):
 *   y[i] = x[i] cos - x[i + D/2] sin,  y[i + D/2] = x[i] sin + x[i + D/2] cos.
 * rope: P = T positions offset + t, row r at r % T. rope_at: the positions
 * read from its i32 input, P of them ([..., T]: one per row, [T]: row r at
 * r % T). The inverse turns by -angle. out may alias x: a pair is read
 * before it is written. */
static int64_t rope_positions(const mpmd_node *n) {
    const mpmd_type *t = &n->type;
    if (n->op == &mpmd_op_rope) return t->dim[t->ndim - 3];
    int64_t p = 1;
    for (int d = 0; d < t->ndim - 2; d++)
        p *= t->dim[d];
    return p; /* at most: [T] positions use the first T entries */
}

static size_t scratch_rope(const mpmd_graph *g, const mpmd_node *n) {
    (void)g;
    const mpmd_type *t = &n->type;
    return (size_t)rope_positions(n) * (size_t)(t->dim[t->ndim - 1] / 2) * 2 * sizeof(float);
}

typedef struct {
    const float *x;
    float *y;
    const float *cs, *sn;
    int64_t P, H, D;
} rope_job;

/* rows [lo, hi) of [..., T]: each head's pairs turned by its position's angles */
static void rope_rows(void *ctx, int64_t lo, int64_t hi) {
    const rope_job *j = ctx;
    const int64_t H = j->H, D = j->D, half = D / 2;
    for (int64_t r = lo; r < hi; r++) {
        int64_t p = r % j->P;
        const float *c = j->cs + p * half, *s = j->sn + p * half;
        for (int64_t h = 0; h < H; h++) {
            const float *xr = j->x + (r * H + h) * D;
            float *yr = j->y + (r * H + h) * D;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                float x1 = xr[i], x2 = xr[i + half];
                yr[i] = x1 * c[i] - x2 * s[i];
                yr[i + half] = x1 * s[i] + x2 * c[i];
            }
        }
    }
}

static int k_rope(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const mpmd_type *t = &n->type;
    int64_t T = t->dim[t->ndim - 3], H = t->dim[t->ndim - 2], D = t->dim[t->ndim - 1], half = D / 2;
    int64_t outer = mpmd_type_numel(t) / (T * H * D);
    const int at = n->op == &mpmd_op_rope_at;
    /* P positions: row r of the [..., T] rows uses position r % P */
    const int64_t P = at ? mpmd_type_numel(a->in_type[1]) : T;
    const int32_t *pos = at ? a->in[1] : NULL;
    const float *x = a->in[0];
    float *y = a->out, *cs = a->scratch, *sn = cs + P * half;
    const double sign = mpmd_rope_inverse(n) ? -1.0 : 1.0;
    const mpmd_rope_freqs f = {mpmd_rope_base(n), mpmd_rope_factor(n), mpmd_rope_low_freq_factor(n),
                               mpmd_rope_high_freq_factor(n), (double)mpmd_rope_original_positions(n)};
    for (int64_t i = 0; i < half; i++) {
        double inv = mpmd_rope_inv_freq(f, i, D);
        for (int64_t p = 0; p < P; p++) {
            double ang = (double)(at ? (int64_t)pos[p] : mpmd_rope_offset(n) + p) * inv;
            cs[p * half + i] = (float)cos(ang);
            sn[p * half + i] = (float)(sign * sin(ang));
        }
    }
    int64_t rows = outer * T;
    rope_job j = {x, y, cs, sn, P, H, D};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, rows * H * D * 3), rows, rope_rows, &j);
    return 0;
}

/* ---- embedding -------------------------------------------------------------------------- */

/* Check every id is in [0, v); name the first bad one and its position. */
static int check_ids(const mpmd_kargs *a, const char *what, const char *op, const int32_t *ids,
                     const mpmd_type *tid, int64_t v) {
    int64_t n = mpmd_type_numel(tid);
    for (int64_t p = 0; p < n; p++) {
        if (ids[p] < 0 || ids[p] >= v) {
            char tb[160];
            /* position as a flat index and as a multi-index into the ids */
            char idx[128];
            size_t k = 0;
            int64_t rem = p, stride = n;
            idx[0] = '\0';
            for (int d = 0; d < tid->ndim && k < sizeof idx; d++) {
                stride /= tid->dim[d];
                k += (size_t)snprintf(idx + k, sizeof idx - k, d ? ",%lld" : "%lld",
                                      (long long)(rem / stride));
                rem %= stride;
            }
            snprintf(a->err, a->err_len, "%s: %s %d at position %lld ([%s] of %s) is outside [0, %lld)", op,
                     what, (int)ids[p], (long long)p, idx, mpmd_type_str(tid, tb, sizeof tb), (long long)v);
            return 1;
        }
    }
    return 0;
}

/* y[p, :] = table[ids[p], :], parallel over positions. */
static void embedding_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t c = a->in_type[0]->dim[1];
    const float *table = a->in[0];
    const int32_t *ids = a->in[1];
    float *y = a->out;
    for (int64_t p = lo; p < hi; p++)
        memcpy(y + p * c, table + (int64_t)ids[p] * c, (size_t)c * sizeof(float));
}

static int k_embedding(const mpmd_kargs *a) {
    const mpmd_type *tt = a->in_type[0], *ti = a->in_type[1];
    int64_t v = tt->dim[0], c = tt->dim[1], n = mpmd_type_numel(ti);
    const int32_t *ids = a->in[1];
    if (check_ids(a, "id", "embedding", ids, ti, v)) return 1;
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, n * c), n, embedding_rows, (void *)a);
    return 0;
}

/* dtable = 0, then dtable[ids[p], :] += gy[p, :] for p in position order.
 * Threads zero their share of rows, then split the columns into blocks of
 * 16 and each walks every position: each element's sum runs in position
 * order whatever the thread count. */
static void embedding_zero_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t c = a->node->type.dim[1];
    memset((float *)a->out + lo * c, 0, (size_t)((hi - lo) * c) * sizeof(float));
}

/* the column blocks [lo, hi) of 16, over every position in order */
static void embedding_grad_cols(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t c = a->node->type.dim[1], n = mpmd_type_numel(a->in_type[0]);
    const int32_t *ids = a->in[0];
    const float *gy = a->in[1];
    float *dt = a->out;
    int64_t c0 = lo * 16, c1 = hi * 16 < c ? hi * 16 : c;
    for (int64_t p = 0; p < n; p++) {
        float *dr = dt + (int64_t)ids[p] * c;
        const float *gr = gy + p * c;
#pragma omp simd
        for (int64_t j = c0; j < c1; j++)
            dr[j] += gr[j];
    }
}

static int k_embedding_grad(const mpmd_kargs *a) {
    const mpmd_type *ti = a->in_type[0];
    int64_t v = a->node->type.dim[0], c = a->node->type.dim[1], n = mpmd_type_numel(ti);
    if (check_ids(a, "id", "embedding_grad", a->in[0], ti, v)) return 1;
    int nt = mpmd_threads_for(a->nthreads, v * c + n * c);
    mpmd_cpu_for(a->dev, nt, v, embedding_zero_rows, (void *)a);
    mpmd_cpu_for(a->dev, nt, (c + 15) / 16, embedding_grad_cols, (void *)a);
    return 0;
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

/* y[r] = (max + log(sum(exp(x - max)))) - x[label]: two passes over each row
 * (max, then the exp-sum), parallel over rows. */
static void cross_entropy_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t v = last_dim(a->in_type[0]);
    const float *x = a->in[0];
    const int32_t *labels = a->in[1];
    float *y = a->out;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * v;
        float m = mpmd_max_f32(xr, v);
        float lse = m + logf(sum_exp_shift(xr, v, m));
        y[r] = lse - xr[labels[r]];
    }
}

static int k_cross_entropy(const mpmd_kargs *a) {
    if (check_ids(a, "label", "cross_entropy", a->in[1], a->in_type[1], last_dim(a->in_type[0]))) return 1;
    return over_rows(a, 4, cross_entropy_rows);
}

/* One row of the gradient below. */
MPMD_VEC_CLONES
static void xent_grad_row(const float *xr, float *dr, int64_t v, int64_t lab, float lse, float gr) {
#pragma omp simd
    for (int64_t i = 0; i < v; i++)
        dr[i] = mpmd_exp_f32(xr[i] - lse) * gr;
    dr[lab] -= gr;
}

/* dx = (exp(x - lse) - onehot(label)) * gy[r], with lse = y[r] + x[label]
 * recovered from the forward's output: one pass over the row. dx may alias
 * x: x[label] is read before the row is written, and x[i] before dx[i]. */
static void cross_entropy_grad_rows(void *ctx, int64_t lo, int64_t hi) {
    const mpmd_kargs *a = ctx;
    const int64_t v = last_dim(a->in_type[0]);
    const float *x = a->in[0], *yl = a->in[2], *gy = a->in[3];
    const int32_t *labels = a->in[1];
    float *dx = a->out;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * v;
        int64_t lab = labels[r];
        xent_grad_row(xr, dx + r * v, v, lab, yl[r] + xr[lab], gy[r]);
    }
}

static int k_cross_entropy_grad(const mpmd_kargs *a) {
    if (check_ids(a, "label", "cross_entropy_grad", a->in[1], a->in_type[1], last_dim(a->in_type[0])))
        return 1;
    return over_rows(a, 4, cross_entropy_grad_rows);
}

/* ---- the table ------------------------------------------------------------------------------ */

const mpmd_kernel mpmd_cpu_nn_kernels[] = {
    {&mpmd_op_matmul, k_matmul, NULL, 0},
    {&mpmd_op_softmax, k_softmax, NULL, 0},
    {&mpmd_op_softmax_causal, k_softmax_causal, NULL, 0},
    {&mpmd_op_log_softmax, k_log_softmax, NULL, 0},
    {&mpmd_op_softmax_grad, k_softmax_grad, NULL, 0},
    {&mpmd_op_softmax_causal_grad, k_softmax_causal_grad, NULL, 0},
    {&mpmd_op_log_softmax_grad, k_log_softmax_grad, NULL, 0},
    {&mpmd_op_layer_norm, k_layer_norm, NULL, 0},
    {&mpmd_op_layer_norm_grad_x, k_layer_norm_grad_x, NULL, 0},
    {&mpmd_op_layer_norm_grad_gamma, k_layer_norm_grad_gamma, scratch_norm_grad_scale, 0},
    {&mpmd_op_rms_norm, k_rms_norm, NULL, 0},
    {&mpmd_op_rms_norm_grad_x, k_rms_norm_grad_x, NULL, 0},
    {&mpmd_op_rms_norm_grad_scale, k_rms_norm_grad_scale, scratch_norm_grad_scale, 0},
    {&mpmd_op_rope, k_rope, scratch_rope, 0},
    {&mpmd_op_rope_at, k_rope, scratch_rope, 0},
    {&mpmd_op_embedding, k_embedding, NULL, 0},
    {&mpmd_op_embedding_grad, k_embedding_grad, NULL, 0},
    {&mpmd_op_cross_entropy, k_cross_entropy, NULL, 0},
    {&mpmd_op_cross_entropy_grad, k_cross_entropy_grad, NULL, 0},
    {0},
};
