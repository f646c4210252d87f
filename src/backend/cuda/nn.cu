/* CUDA kernels of the neural-network family (ops in src/ops/nn.c), all but
 * matmul (core.cu): softmax / log-softmax (plain, causal) and their
 * gradients, layer norm and its two gradients, embedding lookup and its
 * scatter-add gradient, cross-entropy and its gradient.
 *
 * Row ops (the last axis is the row) give each row to one group of threads:
 * a warp for rows of up to 1024 (eight rows to a block of 256), else a whole
 * block (256, 512 or 1024 threads by the row's length), in a grid-stride
 * loop over rows. Thread t of a group reads elements t, t + S, t + 2S, ...
 * (S the group's size, coalesced), keeps its own partial in element order,
 * and the group combines the partials in a fixed tree (warp shuffles, then
 * one value per warp through shared memory). Max and exp-sum are taken in
 * one pass, as (max, sum of exp(x - max)) pairs merged with a rescale.
 * Layer norm in warp mode keeps the row in registers.
 *
 * Sums over all rows never use atomics:
 *   layer_norm_grad_gamma: row statistics into scratch, then per-column
 *     partial sums over fixed runs of rows, then the partials added in order;
 *   embedding_grad: the positions sorted by (id, position) (a bitonic sort of
 *     distinct 64-bit keys, so the order is unique), each id's range found by
 *     binary search, then one thread per (chunk of up to 64 of an id's
 *     positions, column) adds those rows of gy in position order, and one
 *     thread per (id, column) adds the id's chunk sums in order (an id seen
 *     at most 64 times gets the CPU's order exactly); unused ids get 0.
 * Launch shapes depend only on the tensor shapes (and, for the float4 paths
 * of the copies, on pointer alignment, which never changes a result). An id
 * or label out of range is recorded with mpmd_cuda_raise and its row is
 * written as zeros (embedding, cross_entropy_grad), 0 (cross_entropy), or
 * left out of the sums (embedding_grad).
 */
#include "cuda.h"

extern "C" {
#include "ops/nn.h"
}

#include <limits.h>
#include <math.h>
#include <stdint.h>

#define FULL_MASK 0xffffffffu
#define MAX_GRID (1u << 30)

/* ---- row scheduling ------------------------------------------------------------------ */

#define ROW_WARP_MAX 1024  /* rows up to this long: a warp per row */
#define ROW_WARP_BLOCK 256 /* threads per block in warp mode (8 rows) */

typedef struct row_shape {
    int warp;        /* 1: a warp per row, 0: a block per row */
    int threads;     /* block size */
    unsigned blocks; /* grid size */
} row_shape;

static unsigned cap_grid(int64_t b) {
    if (b < 1) return 1;
    return b > (int64_t)MAX_GRID ? MAX_GRID : (unsigned)b;
}

static row_shape row_shape_for(int64_t rows, int64_t n) {
    row_shape s;
    if (n <= ROW_WARP_MAX) {
        s.warp = 1;
        s.threads = ROW_WARP_BLOCK;
        s.blocks = cap_grid((rows + ROW_WARP_BLOCK / 32 - 1) / (ROW_WARP_BLOCK / 32));
    } else {
        s.warp = 0;
        s.threads = n <= 4096 ? 256 : n <= 16384 ? 512 : 1024;
        s.blocks = cap_grid(rows);
    }
    return s;
}

/* This thread's place: first row, row step, index t in its group of S. */
template <bool W> struct row_iter {
    int t, S;
    int64_t r0, rstep;
    __device__ __forceinline__ row_iter() {
        if constexpr (W) {
            int per = (int)(blockDim.x >> 5);
            t = (int)(threadIdx.x & 31);
            S = 32;
            r0 = (int64_t)blockIdx.x * per + (threadIdx.x >> 5);
            rstep = (int64_t)gridDim.x * per;
        } else {
            t = (int)threadIdx.x;
            S = (int)blockDim.x;
            r0 = blockIdx.x;
            rstep = gridDim.x;
        }
    }
};

/* ---- fixed-order group reductions ---------------------------------------------------------- */

/* Sum over the warp: a shuffle-down tree into lane 0, then lane 0's value
 * to every lane. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(FULL_MASK, v, o);
    return __shfl_sync(FULL_MASK, v, 0);
}

__device__ __forceinline__ void warp_sum2(float &a, float &b) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(FULL_MASK, a, o);
        b += __shfl_down_sync(FULL_MASK, b, o);
    }
    a = __shfl_sync(FULL_MASK, a, 0);
    b = __shfl_sync(FULL_MASK, b, 0);
}

/* Sum over the row's group (W: the warp; else the block: warp sums, then
 * the per-warp sums in warp order by warp 0's tree, read by every warp).
 * Every thread of the group must call it; sh holds 64 floats. */
template <bool W> __device__ __forceinline__ float row_sum(float v, float *sh) {
    v = warp_sum(v);
    if constexpr (!W) {
        int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
        if (lane == 0) sh[w] = v;
        __syncthreads();
        v = warp_sum(lane < nw ? sh[lane] : 0.0f);
        __syncthreads(); /* sh free for the next reduction */
    }
    return v;
}

template <bool W> __device__ __forceinline__ void row_sum2(float &a, float &b, float *sh) {
    warp_sum2(a, b);
    if constexpr (!W) {
        int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
        if (lane == 0) {
            sh[w] = a;
            sh[32 + w] = b;
        }
        __syncthreads();
        a = lane < nw ? sh[lane] : 0.0f;
        b = lane < nw ? sh[32 + lane] : 0.0f;
        warp_sum2(a, b);
        __syncthreads();
    }
}

/* (m, s): the running max of the elements seen and the sum of exp(x - m)
 * over them; (-inf, 0) is the empty set. -inf elements add nothing, NaN
 * makes s NaN. */
__device__ __forceinline__ void ms_push(float &m, float &s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else if (x != -INFINITY) {
        s += expf(x - m);
    }
}

__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    float M = fmaxf(m, m2);
    float a = s == 0.0f ? 0.0f : s * expf(m - M);
    float b = s2 == 0.0f ? 0.0f : s2 * expf(m2 - M);
    m = M;
    s = a + b;
}

__device__ __forceinline__ void warp_ms(float &m, float &s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_down_sync(FULL_MASK, m, o);
        float s2 = __shfl_down_sync(FULL_MASK, s, o);
        ms_merge(m, s, m2, s2);
    }
    m = __shfl_sync(FULL_MASK, m, 0);
    s = __shfl_sync(FULL_MASK, s, 0);
}

template <bool W> __device__ __forceinline__ void row_ms(float &m, float &s, float *sh) {
    warp_ms(m, s);
    if constexpr (!W) {
        int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
        if (lane == 0) {
            sh[w] = m;
            sh[32 + w] = s;
        }
        __syncthreads();
        m = lane < nw ? sh[lane] : -INFINITY;
        s = lane < nw ? sh[32 + lane] : 0.0f;
        warp_ms(m, s);
        __syncthreads();
    }
}

/* This thread's (m, s) over xr[t], xr[t + S], ... below len, in order,
 * four loads in flight. */
__device__ __forceinline__ void ms_local(const float *xr, int64_t len, int t, int S, float &m, float &s) {
    m = -INFINITY;
    s = 0.0f;
    int64_t i = t, s1 = S, s2 = 2 * (int64_t)S, s3 = 3 * (int64_t)S, s4 = 4 * (int64_t)S;
    for (; i + s3 < len; i += s4) {
        float a0 = xr[i], a1 = xr[i + s1], a2 = xr[i + s2], a3 = xr[i + s3];
        ms_push(m, s, a0);
        ms_push(m, s, a1);
        ms_push(m, s, a2);
        ms_push(m, s, a3);
    }
    for (; i < len; i += S)
        ms_push(m, s, xr[i]);
}

/* ---- softmax family ---------------------------------------------------------------------- */

enum { SM_SOFTMAX, SM_CAUSAL, SM_LOG, SM_GRAD, SM_CAUSAL_GRAD, SM_LOG_GRAD };

/* softmax:     y = exp(x - max) / sum(exp(x - max)) over the first len
 *              entries (len = n, or r % n + 1 in the causal one), 0 after;
 * log_softmax: y = (x - max) - log(sum(exp(x - max))).
 * y may alias x: each thread reads the elements it later writes. */
template <bool W, int K>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024) softmax_fwd(const float *x, float *y, int64_t rows, int64_t n) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        int64_t len = K == SM_CAUSAL ? r % n + 1 : n;
        float m, s;
        ms_local(xr, len, it.t, it.S, m, s);
        row_ms<W>(m, s, sh);
        if constexpr (K == SM_LOG) {
            float ls = logf(s);
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                yr[i] = (xr[i] - m) - ls;
        } else {
            float inv = 1.0f / s;
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                yr[i] = i < len ? expf(xr[i] - m) * inv : 0.0f;
        }
    }
}

/* softmax(_causal)_grad: gx = y * (gy - sum(gy * y)) over the first len
 *                        entries, 0 after;
 * log_softmax_grad:      gx = gy - exp(y) * sum(gy).
 * gx may alias gy (read before written, by the same thread). */
template <bool W, int K>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    softmax_bwd(const float *y, const float *gy, float *gx, int64_t rows, int64_t n) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        const float *yr = y + r * n, *gr = gy + r * n;
        float *xr = gx + r * n;
        if constexpr (K == SM_LOG_GRAD) {
            float acc = 0.0f;
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                acc += gr[i];
            float sg = row_sum<W>(acc, sh);
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                xr[i] = gr[i] - expf(yr[i]) * sg;
        } else {
            int64_t len = K == SM_CAUSAL_GRAD ? r % n + 1 : n;
            float acc = 0.0f;
#pragma unroll 4
            for (int64_t i = it.t; i < len; i += it.S)
                acc += gr[i] * yr[i];
            float d = row_sum<W>(acc, sh);
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                xr[i] = i < len ? yr[i] * (gr[i] - d) : 0.0f;
        }
    }
}

static int64_t last_dim(const mpmd_type *t) { return t->ndim ? t->dim[t->ndim - 1] : 1; }

template <int K> static int softmax_family(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), rows = n ? mpmd_type_numel(t) / n : 0;
    if (rows == 0) return 0;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    row_shape rs = row_shape_for(rows, n);
    const float *x = (const float *)a->in[0];
    float *y = (float *)a->out;
    if constexpr (K < SM_GRAD) {
        if (rs.warp)
            softmax_fwd<true, K><<<rs.blocks, rs.threads, 0, st>>>(x, y, rows, n);
        else
            softmax_fwd<false, K><<<rs.blocks, rs.threads, 0, st>>>(x, y, rows, n);
    } else {
        const float *gy = (const float *)a->in[1];
        if (rs.warp)
            softmax_bwd<true, K><<<rs.blocks, rs.threads, 0, st>>>(x, gy, y, rows, n);
        else
            softmax_bwd<false, K><<<rs.blocks, rs.threads, 0, st>>>(x, gy, y, rows, n);
    }
    return mpmd_cuda_launched(a, a->node->op->name);
}

static int k_softmax(const mpmd_kargs *a) { return softmax_family<SM_SOFTMAX>(a); }
static int k_softmax_causal(const mpmd_kargs *a) { return softmax_family<SM_CAUSAL>(a); }
static int k_log_softmax(const mpmd_kargs *a) { return softmax_family<SM_LOG>(a); }
static int k_softmax_grad(const mpmd_kargs *a) { return softmax_family<SM_GRAD>(a); }
static int k_softmax_causal_grad(const mpmd_kargs *a) { return softmax_family<SM_CAUSAL_GRAD>(a); }
static int k_log_softmax_grad(const mpmd_kargs *a) { return softmax_family<SM_LOG_GRAD>(a); }

/* ---- layer norm ------------------------------------------------------------------------------ */

/* Rows of up to 1024 (warp mode) are held in registers: lane t keeps
 * elements t + 32k, k < LN_VPL, so the row is read from memory once and
 * every load of a pass is in flight at the same time. Longer rows (block
 * mode) are read again for each pass. The statistics are the CPU's:
 * mean = sum(x) / n, var = sum((x - mean)^2) / n (two passes),
 * rstd = 1 / sqrt(var + eps); every thread of the group gets both. */
#define LN_VPL (ROW_WARP_MAX / 32)

__device__ __forceinline__ void load_row(const float *r, int64_t n, int t, float (&v)[LN_VPL]) {
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
        int64_t i = t + 32 * k;
        v[k] = i < n ? r[i] : 0.0f;
    }
}

__device__ __forceinline__ void ln_stats_regs(const float (&v)[LN_VPL], int64_t n, int t, float eps, float &mu,
                                              float &rs) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++)
        acc += v[k]; /* the padding is 0 */
    mu = warp_sum(acc) / (float)n;
    acc = 0.0f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
        float d = v[k] - mu;
        if (t + 32 * k < n) acc += d * d;
    }
    rs = 1.0f / sqrtf(warp_sum(acc) / (float)n + eps);
}

template <bool W>
__device__ __forceinline__ void ln_stats(const float *xr, int64_t n, int t, int S, float eps, float *sh, float &mu,
                                         float &rs) {
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t i = t; i < n; i += S)
        acc += xr[i];
    mu = row_sum<W>(acc, sh) / (float)n;
    acc = 0.0f;
#pragma unroll 4
    for (int64_t i = t; i < n; i += S) {
        float d = xr[i] - mu;
        acc += d * d;
    }
    float v = row_sum<W>(acc, sh);
    rs = 1.0f / sqrtf(v / (float)n + eps);
}

/* y = (x - mean) * rstd * gamma + beta; y may alias x (each element is read
 * before written, by the same thread). */
template <bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024) layer_norm_fwd(const float *x, const float *gamma, const float *beta, float *y,
                                                       int64_t rows, int64_t n, float eps) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float mu, rs;
        if constexpr (W) {
            float v[LN_VPL];
            load_row(xr, n, it.t, v);
            ln_stats_regs(v, n, it.t, eps, mu, rs);
#pragma unroll
            for (int k = 0; k < LN_VPL; k++) {
                int64_t i = it.t + 32 * k;
                if (i < n) yr[i] = ((v[k] - mu) * rs) * gamma[i] + beta[i];
            }
        } else {
            ln_stats<W>(xr, n, it.t, it.S, eps, sh, mu, rs);
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S)
                yr[i] = ((xr[i] - mu) * rs) * gamma[i] + beta[i];
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * gamma rounded
 * once (__fmul_rn: the sums and the output see the same g, so a row of one
 * element gives exactly 0, as on the CPU); dx may alias gy (each element is
 * read before written, by the same thread). */
template <bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024) layer_norm_grad_x(const float *x, const float *gamma, const float *gy,
                                                          float *dx, int64_t rows, int64_t n, float eps) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        const float *xr = x + r * n, *gr = gy + r * n;
        float *dr = dx + r * n;
        float mu, rs;
        if constexpr (W) {
            float v[LN_VPL], g[LN_VPL];
            load_row(xr, n, it.t, v);
            load_row(gr, n, it.t, g);
            ln_stats_regs(v, n, it.t, eps, mu, rs);
            float sg = 0.0f, sgx = 0.0f;
#pragma unroll
            for (int k = 0; k < LN_VPL; k++) {
                int64_t i = it.t + 32 * k;
                g[k] = i < n ? __fmul_rn(g[k], gamma[i]) : 0.0f;
                v[k] = (v[k] - mu) * rs; /* xhat */
                sg += g[k];
                sgx += g[k] * v[k];
            }
            warp_sum2(sg, sgx);
            float mg = sg / (float)n, mgx = sgx / (float)n;
#pragma unroll
            for (int k = 0; k < LN_VPL; k++) {
                int64_t i = it.t + 32 * k;
                if (i < n) dr[i] = rs * ((g[k] - mg) - v[k] * mgx);
            }
        } else {
            ln_stats<W>(xr, n, it.t, it.S, eps, sh, mu, rs);
            float sg = 0.0f, sgx = 0.0f;
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S) {
                float gg = __fmul_rn(gr[i], gamma[i]);
                sg += gg;
                sgx += gg * ((xr[i] - mu) * rs);
            }
            row_sum2<W>(sg, sgx, sh);
            float mg = sg / (float)n, mgx = sgx / (float)n;
#pragma unroll 4
            for (int64_t i = it.t; i < n; i += it.S) {
                float gg = __fmul_rn(gr[i], gamma[i]);
                float xh = (xr[i] - mu) * rs;
                dr[i] = rs * ((gg - mg) - xh * mgx);
            }
        }
    }
}

/* (mean, rstd) of every row into stats[2r], stats[2r + 1]. */
template <bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024) layer_norm_stats(const float *x, float *stats, int64_t rows, int64_t n,
                                                         float eps) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        float mu, rs;
        if constexpr (W) {
            float v[LN_VPL];
            load_row(x + r * n, n, it.t, v);
            ln_stats_regs(v, n, it.t, eps, mu, rs);
        } else {
            ln_stats<W>(x + r * n, n, it.t, it.S, eps, sh, mu, rs);
        }
        if (it.t == 0) {
            stats[2 * r] = mu;
            stats[2 * r + 1] = rs;
        }
    }
}

static int k_layer_norm(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), numel = mpmd_type_numel(t);
    if (n == 0 || numel == 0) return 0;
    int64_t rows = numel / n;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    row_shape rs = row_shape_for(rows, n);
    const float *x = (const float *)a->in[0], *gamma = (const float *)a->in[1], *beta = (const float *)a->in[2];
    float *y = (float *)a->out;
    float eps = a->node->fa[0];
    if (rs.warp)
        layer_norm_fwd<true><<<rs.blocks, rs.threads, 0, st>>>(x, gamma, beta, y, rows, n, eps);
    else
        layer_norm_fwd<false><<<rs.blocks, rs.threads, 0, st>>>(x, gamma, beta, y, rows, n, eps);
    return mpmd_cuda_launched(a, "layer_norm");
}

static int k_layer_norm_grad_x(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), numel = mpmd_type_numel(t);
    if (n == 0 || numel == 0) return 0;
    int64_t rows = numel / n;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    row_shape rs = row_shape_for(rows, n);
    const float *x = (const float *)a->in[0], *gamma = (const float *)a->in[1], *gy = (const float *)a->in[2];
    float *dx = (float *)a->out;
    float eps = a->node->fa[0];
    if (rs.warp)
        layer_norm_grad_x<true><<<rs.blocks, rs.threads, 0, st>>>(x, gamma, gy, dx, rows, n, eps);
    else
        layer_norm_grad_x<false><<<rs.blocks, rs.threads, 0, st>>>(x, gamma, gy, dx, rows, n, eps);
    return mpmd_cuda_launched(a, "layer_norm_grad_x");
}

/* dgamma[c] = sum over rows of gy[r, c] * xhat[r, c]. The rows are cut into
 * chunks of LNG_CHUNK_MIN rows or more (at most LNG_CHUNKS_MAX chunks, a
 * function of the row count only); pass 1 puts each row's statistics in
 * scratch, pass 2 gives each (chunk, column) one thread that sums its rows
 * in order into partial[chunk, c], pass 3 adds each column's partials: 8
 * threads take every 8th chunk in order, then a fixed tree adds the 8.
 * Scratch: 2 floats per row, then chunks x C floats. */
#define LNG_CHUNK_MIN 16
#define LNG_CHUNKS_MAX 1024
#define LNG_THREADS 256
#define LNG_LANES 8

static int64_t lng_rows_per_chunk(int64_t rows) {
    int64_t r = (rows + LNG_CHUNKS_MAX - 1) / LNG_CHUNKS_MAX;
    return r < LNG_CHUNK_MIN ? LNG_CHUNK_MIN : r;
}

static size_t scratch_ln_grad_gamma(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *t = mpmd_type_of(g, mpmd_in(n, 0));
    int64_t c = last_dim(t), numel = mpmd_type_numel(t);
    if (c == 0 || numel == 0) return 0;
    int64_t rows = numel / c, rpc = lng_rows_per_chunk(rows), chunks = (rows + rpc - 1) / rpc;
    return (size_t)(2 * rows + chunks * c) * sizeof(float);
}

__global__ void lng_partial(const float *x, const float *gy, const float *stats, float *partial, int64_t rows,
                            int64_t n, int64_t rpc) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    int64_t r0 = (int64_t)blockIdx.y * rpc, r1 = r0 + rpc < rows ? r0 + rpc : rows;
    float acc = 0.0f;
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++) {
        float mu = stats[2 * r], rs = stats[2 * r + 1];
        acc += gy[r * n + c] * ((x[r * n + c] - mu) * rs);
    }
    partial[(int64_t)blockIdx.y * n + c] = acc;
}

/* Block (32, LNG_LANES): 32 columns, LNG_LANES threads down each. */
__global__ void lng_combine(const float *partial, float *dg, int64_t n, int64_t chunks) {
    __shared__ float sh[LNG_LANES][32];
    int x = (int)threadIdx.x, y = (int)threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * 32 + x;
    float acc = 0.0f;
    if (c < n)
        for (int64_t k = y; k < chunks; k += LNG_LANES)
            acc += partial[k * n + c];
    sh[y][x] = acc;
#pragma unroll
    for (int s = LNG_LANES / 2; s > 0; s >>= 1) {
        __syncthreads();
        if (y < s) sh[y][x] += sh[y + s][x];
    }
    if (y == 0 && c < n) dg[c] = sh[0][x];
}

static int k_layer_norm_grad_gamma(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), numel = mpmd_type_numel(t);
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    float *dg = (float *)a->out;
    if (n == 0) return 0;
    if (numel == 0) { /* no rows: the sums are 0 */
        cudaError_t e = cudaMemsetAsync(dg, 0, (size_t)n * sizeof(float), st);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "layer_norm_grad_gamma: device memset failed: %s", cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    int64_t rows = numel / n, rpc = lng_rows_per_chunk(rows), chunks = (rows + rpc - 1) / rpc;
    const float *x = (const float *)a->in[0], *gy = (const float *)a->in[1];
    float *stats = (float *)a->scratch, *partial = stats + 2 * rows;
    float eps = a->node->fa[0];
    row_shape rs = row_shape_for(rows, n);
    if (rs.warp)
        layer_norm_stats<true><<<rs.blocks, rs.threads, 0, st>>>(x, stats, rows, n, eps);
    else
        layer_norm_stats<false><<<rs.blocks, rs.threads, 0, st>>>(x, stats, rows, n, eps);
    dim3 grid(mpmd_cuda_blocks(n, LNG_THREADS), (unsigned)chunks);
    lng_partial<<<grid, LNG_THREADS, 0, st>>>(x, gy, stats, partial, rows, n, rpc);
    lng_combine<<<mpmd_cuda_blocks(n, 32), dim3(32, LNG_LANES), 0, st>>>(partial, dg, n, chunks);
    return mpmd_cuda_launched(a, "layer_norm_grad_gamma");
}

/* ---- embedding ------------------------------------------------------------------------------- */

static int copy_threads(int64_t cols) { /* a warp multiple, 32 to 256 */
    int64_t t = (cols + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : (int)t;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* y[p, :] = table[ids[p], :]: a block per position (grid-stride), threads
 * over the row in float4 (VEC 4) or float groups. A bad id: zeros. */
template <int VEC>
__global__ void embedding_fwd(const float *table, const int32_t *ids, float *y, int64_t npos, int64_t c, int64_t v,
                              int *flag, int *info) {
    int64_t cv = c / VEC;
    for (int64_t p = blockIdx.x; p < npos; p += gridDim.x) {
        int32_t id = ids[p];
        bool ok = id >= 0 && (int64_t)id < v;
        if (!ok && threadIdx.x == 0)
            mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_EMBEDDING_ID, (int)id, (int)p, (int)v);
        const float *src = table + (ok ? (int64_t)id : 0) * c;
        float *dst = y + p * c;
        if constexpr (VEC == 4) {
            const float4 *s4 = (const float4 *)src;
            float4 *d4 = (float4 *)dst;
            for (int64_t j = threadIdx.x; j < cv; j += blockDim.x)
                d4[j] = ok ? s4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else {
            for (int64_t j = threadIdx.x; j < cv; j += blockDim.x)
                dst[j] = ok ? src[j] : 0.0f;
        }
    }
}

static int k_embedding(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tt = a->in_type[0], *ti = a->in_type[1];
    int64_t v = tt->dim[0], c = tt->dim[1], n = mpmd_type_numel(ti);
    if (n == 0 || c == 0) return 0;
    const float *table = (const float *)a->in[0];
    const int32_t *ids = (const int32_t *)a->in[1];
    float *y = (float *)a->out;
    if (c % 4 == 0 && aligned16(table) && aligned16(y))
        embedding_fwd<4><<<cap_grid(n), copy_threads(c / 4), 0, d->stream>>>(table, ids, y, n, c, v, d->flag,
                                                                             d->flag_info);
    else
        embedding_fwd<1><<<cap_grid(n), copy_threads(c), 0, d->stream>>>(table, ids, y, n, c, v, d->flag,
                                                                         d->flag_info);
    return mpmd_cuda_launched(a, "embedding");
}

/* dtable[v, :] = sum of gy[p, :] over the positions p with ids[p] == v, in
 * position order (0 where there is none).
 *
 * 1. keys[i] = id << 32 | i for position i (an id out of range: V << 32 | i,
 *    after every valid id; padding to a power of two N: all ones). The keys
 *    are distinct, so sorting them gives one order: by id, then position.
 * 2. A bitonic sort of the N keys: tiles of up to EMB_TILE keys sorted in
 *    shared memory, then for each larger merge size the strides of a tile
 *    or more one global step each and the rest in shared memory.
 * 3. bounds[v] = the first key >= v << 32 (v = 0..V): id v owns sorted
 *    entries [bounds[v], bounds[v + 1]).
 * 4. Each id's entries are cut into chunks of EMB_CHUNK from its first; a
 *    block per chunk, a thread per column (or float4 group), sums the
 *    chunk's rows of gy in position order: straight into dtable when the
 *    id has one chunk, else into partial[first entry of the chunk, :].
 * 5. A block per vocabulary row writes the rows step 4 did not: 0 for an
 *    unused id, the chunk partials added in order for an id with several
 *    (so a frequent id costs no single thread more than EMB_CHUNK rows plus
 *    its chunk count).
 * Scratch: N keys (8 bytes), V + 1 ints (rounded up to 16 bytes), then
 * positions x C floats of partials. */
#define EMB_TILE 2048

static int64_t emb_sort_size(int64_t n) {
    int64_t N = 2;
    while (N < n)
        N <<= 1;
    return N;
}

#define EMB_CHUNK 64

static size_t emb_bounds_bytes(int64_t v) { return ((size_t)(v + 1) * sizeof(int) + 15) / 16 * 16; }

static size_t scratch_embedding_grad(const mpmd_graph *g, const mpmd_node *n) {
    int64_t npos = mpmd_type_numel(mpmd_type_of(g, mpmd_in(n, 0)));
    int64_t v = n->type.dim[0], c = n->type.dim[1];
    if (npos == 0 || v == 0 || c == 0) return 0;
    return (size_t)emb_sort_size(npos) * sizeof(unsigned long long) + emb_bounds_bytes(v) +
           (size_t)(npos * c) * sizeof(float);
}

__device__ __forceinline__ void bitonic_cmpx(unsigned long long *k, int i, int j, bool asc) {
    unsigned long long a = k[i], b = k[j];
    if ((a > b) == asc) {
        k[i] = b;
        k[j] = a;
    }
}

/* Steps of stride `from` down to 1 on this block's tile (size T = 2 *
 * blockDim.x) in shared memory, for merge size `size` (the direction of a
 * pair from the global index). */
__device__ __forceinline__ void bitonic_tile_steps(unsigned long long *sk, int64_t base, int64_t size, int from) {
    int t = (int)threadIdx.x;
    for (int stride = from; stride > 0; stride >>= 1) {
        __syncthreads();
        int i = 2 * stride * (t / stride) + (t % stride);
        bitonic_cmpx(sk, i, i + stride, ((base + i) & size) == 0);
    }
}

/* Build the keys of this tile and sort it completely (merge sizes 2..T). */
__global__ void __launch_bounds__(EMB_TILE / 2)
    emb_sort_init(const int32_t *ids, unsigned long long *keys, int64_t npos, int64_t v, int *flag, int *info) {
    __shared__ unsigned long long sk[EMB_TILE];
    int T = 2 * (int)blockDim.x;
    int64_t base = (int64_t)blockIdx.x * T;
    for (int k = (int)threadIdx.x; k < T; k += (int)blockDim.x) {
        int64_t p = base + k;
        unsigned long long key = ~0ull;
        if (p < npos) {
            int32_t id = ids[p];
            unsigned long long kid = (unsigned long long)id;
            if (id < 0 || (int64_t)id >= v) {
                mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_EMBEDDING_ID, (int)id, (int)p, (int)v);
                kid = (unsigned long long)v;
            }
            key = kid << 32 | (unsigned long long)p;
        }
        sk[k] = key;
    }
    for (int size = 2; size <= T; size <<= 1)
        bitonic_tile_steps(sk, base, size, size / 2);
    __syncthreads();
    for (int k = (int)threadIdx.x; k < T; k += (int)blockDim.x)
        keys[base + k] = sk[k];
}

/* One global step (merge size, stride >= a tile): a thread per pair. */
__global__ void emb_sort_step(unsigned long long *keys, int64_t half, int64_t size, int64_t stride) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < half; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = 2 * stride * (t / stride) + (t % stride);
        unsigned long long x = keys[i], y = keys[i + stride];
        bool asc = (i & size) == 0;
        if ((x > y) == asc) {
            keys[i] = y;
            keys[i + stride] = x;
        }
    }
}

/* The strides below a tile of merge size `size`, in shared memory. */
__global__ void __launch_bounds__(EMB_TILE / 2) emb_sort_merge(unsigned long long *keys, int64_t size) {
    __shared__ unsigned long long sk[EMB_TILE];
    int T = 2 * (int)blockDim.x;
    int64_t base = (int64_t)blockIdx.x * T;
    for (int k = (int)threadIdx.x; k < T; k += (int)blockDim.x)
        sk[k] = keys[base + k];
    bitonic_tile_steps(sk, base, size, T / 2);
    __syncthreads();
    for (int k = (int)threadIdx.x; k < T; k += (int)blockDim.x)
        keys[base + k] = sk[k];
}

/* bounds[v] = the number of keys below v << 32, for v = 0..V. */
__global__ void emb_bounds(const unsigned long long *keys, int64_t nkeys, int *bounds, int64_t v) {
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id <= v; id += (int64_t)gridDim.x * blockDim.x) {
        unsigned long long want = (unsigned long long)id << 32;
        int64_t lo = 0, hi = nkeys;
        while (lo < hi) {
            int64_t mid = (lo + hi) >> 1;
            if (keys[mid] < want)
                lo = mid + 1;
            else
                hi = mid;
        }
        bounds[id] = (int)lo;
    }
}

__device__ __forceinline__ void set_zero(float &acc) { acc = 0.0f; }
__device__ __forceinline__ void set_zero(float4 &acc) { acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ void add_to(float &acc, float x) { acc += x; }
__device__ __forceinline__ void add_to(float4 &acc, float4 x) {
    acc.x += x.x;
    acc.y += x.y;
    acc.z += x.z;
    acc.w += x.w;
}

template <int VEC> struct vec_of { typedef float type; };
template <> struct vec_of<4> { typedef float4 type; };

/* Step 4: a block per sorted entry k (grid-stride); only the first entry
 * of a chunk does anything. */
template <int VEC>
__global__ void emb_grad_chunks(const unsigned long long *keys, const int *bounds, const float *gy, float *dt,
                                float *partial, int64_t npos, int64_t v, int64_t c) {
    typedef typename vec_of<VEC>::type vt;
    int64_t cv = c / VEC;
    const vt *g = (const vt *)gy;
    for (int64_t k = blockIdx.x; k < npos; k += gridDim.x) {
        int64_t id = (int64_t)(keys[k] >> 32);
        if (id >= v) continue; /* a bad id: left out */
        int lo = bounds[id], hi = bounds[id + 1];
        if ((k - lo) % EMB_CHUNK) continue;
        int end = k + EMB_CHUNK < hi ? (int)k + EMB_CHUNK : hi;
        vt *dst = (vt *)(hi - lo <= EMB_CHUNK ? dt + id * c : partial + k * c);
        for (int64_t j = threadIdx.x; j < cv; j += blockDim.x) {
            vt acc;
            set_zero(acc);
            int q = (int)k;
            for (; q + 4 <= end; q += 4) { /* four loads in flight, added in order */
                int64_t p0 = (int64_t)(uint32_t)keys[q], p1 = (int64_t)(uint32_t)keys[q + 1];
                int64_t p2 = (int64_t)(uint32_t)keys[q + 2], p3 = (int64_t)(uint32_t)keys[q + 3];
                vt g0 = g[p0 * cv + j], g1 = g[p1 * cv + j], g2 = g[p2 * cv + j], g3 = g[p3 * cv + j];
                add_to(acc, g0);
                add_to(acc, g1);
                add_to(acc, g2);
                add_to(acc, g3);
            }
            for (; q < end; q++)
                add_to(acc, g[(int64_t)(uint32_t)keys[q] * cv + j]);
            dst[j] = acc;
        }
    }
}

/* Step 5: a block per vocabulary row (grid-stride). */
template <int VEC>
__global__ void emb_grad_rows(const int *bounds, const float *partial, float *dt, int64_t v, int64_t c) {
    typedef typename vec_of<VEC>::type vt;
    int64_t cv = c / VEC;
    const vt *part = (const vt *)partial;
    vt *out = (vt *)dt;
    for (int64_t row = blockIdx.x; row < v; row += gridDim.x) {
        int lo = bounds[row], hi = bounds[row + 1];
        if (hi - lo > 0 && hi - lo <= EMB_CHUNK) continue; /* written by step 4 */
        for (int64_t j = threadIdx.x; j < cv; j += blockDim.x) {
            vt acc;
            set_zero(acc);
            for (int q = lo; q < hi; q += EMB_CHUNK)
                add_to(acc, part[(int64_t)q * cv + j]);
            out[row * cv + j] = acc;
        }
    }
}

static int k_embedding_grad(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *ti = a->in_type[0];
    int64_t v = a->node->type.dim[0], c = a->node->type.dim[1], npos = mpmd_type_numel(ti);
    const int32_t *ids = (const int32_t *)a->in[0];
    const float *gy = (const float *)a->in[1];
    float *dt = (float *)a->out;
    if (v == 0 || c == 0) return 0;
    if (npos == 0) {
        cudaError_t e = cudaMemsetAsync(dt, 0, (size_t)(v * c) * sizeof(float), d->stream);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "embedding_grad: device memset failed: %s", cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    if (npos > INT_MAX / 2 || v >= INT_MAX) {
        snprintf(a->err, a->err_len,
                 "embedding_grad: %lld positions and %lld rows; the CUDA kernel takes fewer than 2^30 positions and "
                 "2^31 - 1 rows",
                 (long long)npos, (long long)v);
        return 1;
    }
    int64_t N = emb_sort_size(npos), T = N < EMB_TILE ? N : EMB_TILE;
    unsigned long long *keys = (unsigned long long *)a->scratch;
    int *bounds = (int *)(keys + N);
    float *partial = (float *)((char *)bounds + emb_bounds_bytes(v));
    unsigned tiles = (unsigned)(N / T);
    emb_sort_init<<<tiles, (unsigned)(T / 2), 0, d->stream>>>(ids, keys, npos, v, d->flag, d->flag_info);
    for (int64_t size = 2 * T; size <= N; size <<= 1) {
        for (int64_t stride = size / 2; stride >= T; stride >>= 1)
            emb_sort_step<<<cap_grid((N / 2 + 255) / 256), 256, 0, d->stream>>>(keys, N / 2, size, stride);
        emb_sort_merge<<<tiles, (unsigned)(T / 2), 0, d->stream>>>(keys, size);
    }
    emb_bounds<<<mpmd_cuda_blocks(v + 1, 256), 256, 0, d->stream>>>(keys, N, bounds, v);
    if (c % 4 == 0 && aligned16(gy) && aligned16(dt) && aligned16(partial)) {
        emb_grad_chunks<4><<<cap_grid(npos), copy_threads(c / 4), 0, d->stream>>>(keys, bounds, gy, dt, partial, npos,
                                                                                  v, c);
        emb_grad_rows<4><<<cap_grid(v), copy_threads(c / 4), 0, d->stream>>>(bounds, partial, dt, v, c);
    } else {
        emb_grad_chunks<1><<<cap_grid(npos), copy_threads(c), 0, d->stream>>>(keys, bounds, gy, dt, partial, npos, v,
                                                                              c);
        emb_grad_rows<1><<<cap_grid(v), copy_threads(c), 0, d->stream>>>(bounds, partial, dt, v, c);
    }
    return mpmd_cuda_launched(a, "embedding_grad");
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

/* y[r] = (max + log(sum(exp(x - max)))) - x[label], one pass over the row.
 * A bad label: y[r] = 0. */
template <bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024) cross_entropy_fwd(const float *x, const int32_t *labels, float *y,
                                                          int64_t rows, int64_t v, int *flag, int *info) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        int32_t lab = labels[r];
        if (lab < 0 || (int64_t)lab >= v) { /* uniform over the group */
            if (it.t == 0) {
                mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_LABEL, (int)lab, (int)r, (int)v);
                y[r] = 0.0f;
            }
            continue;
        }
        const float *xr = x + r * v;
        float m, s;
        ms_local(xr, v, it.t, it.S, m, s);
        row_ms<W>(m, s, sh);
        if (it.t == 0) y[r] = (m + logf(s)) - xr[lab];
    }
}

/* dx = exp(x - lse) * gy[r] - onehot(label) * gy[r], lse = y[r] + x[label].
 * dx may alias x: the group reads x[label] and syncs before any write. A bad
 * label: a row of zeros. */
template <bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    cross_entropy_bwd(const float *x, const int32_t *labels, const float *yl, const float *gy, float *dx,
                      int64_t rows, int64_t v, int *flag, int *info) {
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        const float *xr = x + r * v;
        float *dr = dx + r * v;
        int32_t lab = labels[r];
        if (lab < 0 || (int64_t)lab >= v) {
            if (it.t == 0) mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_LABEL, (int)lab, (int)r, (int)v);
            for (int64_t i = it.t; i < v; i += it.S)
                dr[i] = 0.0f;
            continue;
        }
        float gr = gy[r];
        float lse = yl[r] + xr[lab];
        if constexpr (W)
            __syncwarp();
        else
            __syncthreads();
#pragma unroll 4
        for (int64_t i = it.t; i < v; i += it.S) {
            float e = expf(xr[i] - lse) * gr;
            dr[i] = i == lab ? e - gr : e;
        }
    }
}

static int k_cross_entropy(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tl = a->in_type[0];
    int64_t v = last_dim(tl), numel = mpmd_type_numel(tl);
    if (v == 0 || numel == 0) return 0;
    int64_t rows = numel / v;
    row_shape rs = row_shape_for(rows, v);
    const float *x = (const float *)a->in[0];
    const int32_t *labels = (const int32_t *)a->in[1];
    float *y = (float *)a->out;
    if (rs.warp)
        cross_entropy_fwd<true><<<rs.blocks, rs.threads, 0, d->stream>>>(x, labels, y, rows, v, d->flag, d->flag_info);
    else
        cross_entropy_fwd<false>
            <<<rs.blocks, rs.threads, 0, d->stream>>>(x, labels, y, rows, v, d->flag, d->flag_info);
    return mpmd_cuda_launched(a, "cross_entropy");
}

static int k_cross_entropy_grad(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tl = a->in_type[0];
    int64_t v = last_dim(tl), numel = mpmd_type_numel(tl);
    if (v == 0 || numel == 0) return 0;
    int64_t rows = numel / v;
    row_shape rs = row_shape_for(rows, v);
    const float *x = (const float *)a->in[0], *yl = (const float *)a->in[2], *gy = (const float *)a->in[3];
    const int32_t *labels = (const int32_t *)a->in[1];
    float *dx = (float *)a->out;
    if (rs.warp)
        cross_entropy_bwd<true>
            <<<rs.blocks, rs.threads, 0, d->stream>>>(x, labels, yl, gy, dx, rows, v, d->flag, d->flag_info);
    else
        cross_entropy_bwd<false>
            <<<rs.blocks, rs.threads, 0, d->stream>>>(x, labels, yl, gy, dx, rows, v, d->flag, d->flag_info);
    return mpmd_cuda_launched(a, "cross_entropy_grad");
}

/* ---- the table ---------------------------------------------------------------------------------- */

extern "C" const mpmd_kernel mpmd_cuda_nn_kernels[] = {
    {&mpmd_op_softmax, k_softmax, NULL},
    {&mpmd_op_softmax_causal, k_softmax_causal, NULL},
    {&mpmd_op_log_softmax, k_log_softmax, NULL},
    {&mpmd_op_softmax_grad, k_softmax_grad, NULL},
    {&mpmd_op_softmax_causal_grad, k_softmax_causal_grad, NULL},
    {&mpmd_op_log_softmax_grad, k_log_softmax_grad, NULL},
    {&mpmd_op_layer_norm, k_layer_norm, NULL},
    {&mpmd_op_layer_norm_grad_x, k_layer_norm_grad_x, NULL},
    {&mpmd_op_layer_norm_grad_gamma, k_layer_norm_grad_gamma, scratch_ln_grad_gamma},
    {&mpmd_op_embedding, k_embedding, NULL},
    {&mpmd_op_embedding_grad, k_embedding_grad, scratch_embedding_grad},
    {&mpmd_op_cross_entropy, k_cross_entropy, NULL},
    {&mpmd_op_cross_entropy_grad, k_cross_entropy_grad, NULL},
    {NULL, NULL, NULL},
};
