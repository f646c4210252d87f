/* CUDA kernels of layer norm and RMS norm and their gradients (ops in
 * src/ops/nn.c): the neural-network family's rules (nn.cu), with the
 * scale gradients summed over rows without atomics.
 */
#include "nn_rows.cuh"

/* ---- layer norm ------------------------------------------------------------------------------ */

/* Rows of up to 1024 (warp mode) are held in registers: lane t keeps
 * chunks t + 32k (k < LN_VPL / V; chunks of V elements, V = 1 for f32), so
 * the row is read from memory once and every load of a pass is in flight at
 * the same time. Longer rows (block mode) are read again for each pass. The
 * statistics are the CPU's: mean = sum(x) / n, var = sum((x - mean)^2) / n
 * (two passes), rstd = 1 / sqrt(var + eps), all in f32; every thread of the
 * group gets both. RMS norm is the same with mean 0 (its one pass is the
 * variance pass: x - 0 is x), so one set of kernels serves both norms. */
#define LN_VPL (ROW_WARP_MAX / 32)

template <typename S, int V>
__device__ __forceinline__ void load_row(const rd<S> &r, int64_t nc, int t, bool al,
                                         float (&v)[LN_VPL / V][V]) {
#pragma unroll
    for (int k = 0; k < LN_VPL / V; k++) {
        int64_t c = t + 32 * k;
        if (c < nc) {
            r.template load<V>(c * V, v[k], al);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                v[k][j] = 0.0f;
        }
    }
}

template <int V, bool RMS>
__device__ __forceinline__ void ln_stats_regs(const float (&v)[LN_VPL / V][V], int64_t n, int64_t nc, int t,
                                              float eps, float &mu, float &rs) {
    float acc = 0.0f;
    mu = 0.0f;
    if constexpr (!RMS) {
#pragma unroll
        for (int k = 0; k < LN_VPL / V; k++)
#pragma unroll
            for (int j = 0; j < V; j++)
                acc += v[k][j]; /* the padding is 0 */
        mu = warp_sum(acc) / (float)n;
        acc = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < LN_VPL / V; k++)
#pragma unroll
        for (int j = 0; j < V; j++) {
            float d = v[k][j] - mu;
            if (t + 32 * k < nc) acc += d * d;
        }
    rs = 1.0f / sqrtf(warp_sum(acc) / (float)n + eps);
}

template <typename S, int V, bool W, bool RMS>
__device__ __forceinline__ void ln_stats(const rd<S> &xr, int64_t n, int t, int G, bool al, float eps,
                                         float *sh, float &mu, float &rs) {
    int64_t nc = n / V;
    float acc = 0.0f;
    mu = 0.0f;
    if constexpr (!RMS) {
#pragma unroll 4
        for (int64_t c = t; c < nc; c += G) {
            float f[V];
            xr.template load<V>(c * V, f, al);
#pragma unroll
            for (int j = 0; j < V; j++)
                acc += f[j];
        }
        mu = row_sum<W>(acc, sh) / (float)n;
        acc = 0.0f;
    }
#pragma unroll 4
    for (int64_t c = t; c < nc; c += G) {
        float f[V];
        xr.template load<V>(c * V, f, al);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float d = f[j] - mu;
            acc += d * d;
        }
    }
    float v = row_sum<W>(acc, sh);
    rs = 1.0f / sqrtf(v / (float)n + eps);
}

/* y = (x - mean) * rstd * gamma + beta (RMS: (x * r) * scale, no beta); y
 * may alias x (each element is read before written, by the same thread). */
template <typename S, int V, bool W, bool RMS>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    norm_fwd(rd<S> x, rd<S> gamma, rd<S> beta, wr<S> y, int64_t rows, int64_t n, float eps, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> xr = x.at(r * n);
        wr<S> yr = y.at(r * n);
        float mu, rs;
        if constexpr (W) {
            float v[LN_VPL / V][V];
            load_row<S, V>(xr, nc, it.t, al, v);
            ln_stats_regs<V, RMS>(v, n, nc, it.t, eps, mu, rs);
#pragma unroll
            for (int k = 0; k < LN_VPL / V; k++) {
                int64_t c = it.t + 32 * k;
                if (c < nc) {
                    float gm[V], bt[V], o[V];
                    gamma.template load<V>(c * V, gm, al);
                    if constexpr (!RMS) beta.template load<V>(c * V, bt, al);
#pragma unroll
                    for (int j = 0; j < V; j++) {
                        o[j] = ((v[k][j] - mu) * rs) * gm[j];
                        if constexpr (!RMS) o[j] += bt[j];
                    }
                    yr.template store<V>(c * V, o, al);
                }
            }
        } else {
            ln_stats<S, V, W, RMS>(xr, n, it.t, it.G, al, eps, sh, mu, rs);
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float f[V], gm[V], bt[V];
                xr.template load<V>(c * V, f, al);
                gamma.template load<V>(c * V, gm, al);
                if constexpr (!RMS) beta.template load<V>(c * V, bt, al);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    f[j] = ((f[j] - mu) * rs) * gm[j];
                    if constexpr (!RMS) f[j] += bt[j];
                }
                yr.template store<V>(c * V, f, al);
            }
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * gamma rounded
 * once (__fmul_rn: the sums and the output see the same g, so a row of one
 * element gives exactly 0, as on the CPU); RMS: dx = r * (g - xhat * mean(g
 * xhat)), xhat = x r. dx may alias gy (each element is read before
 * written, by the same thread). */
template <typename S, int V, bool W, bool RMS>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    norm_grad_x(rd<S> x, rd<S> gamma, rd<S> gy, wr<S> dx, int64_t rows, int64_t n, float eps, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> xr = x.at(r * n), gr = gy.at(r * n);
        wr<S> dr = dx.at(r * n);
        float mu, rs;
        if constexpr (W) {
            float v[LN_VPL / V][V], g[LN_VPL / V][V];
            load_row<S, V>(xr, nc, it.t, al, v);
            load_row<S, V>(gr, nc, it.t, al, g);
            ln_stats_regs<V, RMS>(v, n, nc, it.t, eps, mu, rs);
            float sg = 0.0f, sgx = 0.0f;
#pragma unroll
            for (int k = 0; k < LN_VPL / V; k++) {
                int64_t c = it.t + 32 * k;
                if (c < nc) {
                    float gm[V];
                    gamma.template load<V>(c * V, gm, al);
#pragma unroll
                    for (int j = 0; j < V; j++)
                        g[k][j] = __fmul_rn(g[k][j], gm[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < V; j++)
                        g[k][j] = 0.0f;
                }
#pragma unroll
                for (int j = 0; j < V; j++) {
                    v[k][j] = (v[k][j] - mu) * rs; /* xhat */
                    if constexpr (!RMS) sg += g[k][j];
                    sgx += g[k][j] * v[k][j];
                }
            }
            if constexpr (RMS)
                sgx = warp_sum(sgx);
            else
                warp_sum2(sg, sgx);
            float mg = sg / (float)n, mgx = sgx / (float)n; /* RMS: mg = 0, and g - 0 is g */
#pragma unroll
            for (int k = 0; k < LN_VPL / V; k++) {
                int64_t c = it.t + 32 * k;
                if (c < nc) {
                    float o[V];
#pragma unroll
                    for (int j = 0; j < V; j++)
                        o[j] = rs * ((g[k][j] - mg) - v[k][j] * mgx);
                    dr.template store<V>(c * V, o, al);
                }
            }
        } else {
            ln_stats<S, V, W, RMS>(xr, n, it.t, it.G, al, eps, sh, mu, rs);
            float sg = 0.0f, sgx = 0.0f;
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float g[V], gm[V], f[V];
                gr.template load<V>(c * V, g, al);
                gamma.template load<V>(c * V, gm, al);
                xr.template load<V>(c * V, f, al);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float gg = __fmul_rn(g[j], gm[j]);
                    if constexpr (!RMS) sg += gg;
                    sgx += gg * ((f[j] - mu) * rs);
                }
            }
            if constexpr (RMS)
                sgx = row_sum<W>(sgx, sh);
            else
                row_sum2<W>(sg, sgx, sh);
            float mg = sg / (float)n, mgx = sgx / (float)n;
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float g[V], gm[V], f[V];
                gr.template load<V>(c * V, g, al);
                gamma.template load<V>(c * V, gm, al);
                xr.template load<V>(c * V, f, al);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float gg = __fmul_rn(g[j], gm[j]);
                    float xh = (f[j] - mu) * rs;
                    g[j] = rs * ((gg - mg) - xh * mgx);
                }
                dr.template store<V>(c * V, g, al);
            }
        }
    }
}

/* layer_norm (x, gamma, beta) and layer_norm_grad_x (x, gamma, gy) (G), or
 * (RMS) rms_norm (x, scale) and rms_norm_grad_x (x, scale, gy): the same
 * rows, operands and launch shape, one kernel each. */
template <bool RMS, bool G> static int norm_rows(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    row_plan rp;
    if (!row_plan_of(t, &rp)) return 0;
    const int64_t n = rp.n, rows = rp.rows;
    const row_shape rs = rp.rs;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const bool third = a->node->n_in > 2; /* beta or gy; rms_norm has none (x stands in, unread) */
    const void *zp = third ? a->in[2] : a->in[0];
    mpmd_dtype dx = t->dtype, dgm = a->in_type[1]->dtype, d3 = third ? a->in_type[2]->dtype : dx;
    mpmd_dtype dy = a->node->type.dtype;
    float eps = mpmd_norm_eps(a->node);
    by_storage(storage_of({dx, dgm, d3, dy}), [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> x = rd_of<S>(a->in[0], dx), gamma = rd_of<S>(a->in[1], dgm), z = rd_of<S>(zp, d3);
        wr<S> y = wr_of<S>(a->out, dy);
        int v = row_vec<S>(n);
        bool al = chunks_aligned<S>(v, {a->in[0], a->in[1], zp, a->out});
        with_vec<S>(v, [&](auto vc) {
            constexpr int V = decltype(vc)::value;
            with_warp(rs.warp, [&](auto wc) {
                constexpr bool W = decltype(wc)::value;
                if constexpr (G)
                    norm_grad_x<S, V, W, RMS>
                        <<<rs.blocks, rs.threads, 0, st>>>(x, gamma, z, y, rows, n, eps, al);
                else
                    norm_fwd<S, V, W, RMS>
                        <<<rs.blocks, rs.threads, 0, st>>>(x, gamma, z, y, rows, n, eps, al);
            });
        });
    });
    return mpmd_cuda_launched(a, a->node->op->name);
}

static int k_layer_norm(const mpmd_kargs *a) { return norm_rows<false, false>(a); }
static int k_layer_norm_grad_x(const mpmd_kargs *a) { return norm_rows<false, true>(a); }
static int k_rms_norm(const mpmd_kargs *a) { return norm_rows<true, false>(a); }
static int k_rms_norm_grad_x(const mpmd_kargs *a) { return norm_rows<true, true>(a); }

/* ---- the scale gradient of both norms --------------------------------------------------------- */

/* (mean, rstd) of every row into stats[2r], stats[2r + 1]; RMS: (0, r),
 * r = 1 / sqrt(mean(x^2) + eps), so that (x - mean) * rstd is x * r. */
template <typename S, int V, bool W, bool RMS>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    norm_stats(rd<S> x, float *stats, int64_t rows, int64_t n, float eps, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        float mu = 0.0f, rs;
        if constexpr (W) {
            float v[LN_VPL / V][V];
            load_row<S, V>(x.at(r * n), nc, it.t, al, v);
            ln_stats_regs<V, RMS>(v, n, nc, it.t, eps, mu, rs);
        } else {
            ln_stats<S, V, W, RMS>(x.at(r * n), n, it.t, it.G, al, eps, sh, mu, rs);
        }
        if (it.t == 0) {
            stats[2 * r] = mu;
            stats[2 * r + 1] = rs;
        }
    }
}

/* dgamma[c] = sum over rows of gy[r, c] * xhat[r, c], xhat = (x - mean) *
 * rstd (layer_norm_grad_gamma; rms_norm_grad_scale: mean 0, rstd its r, as
 * on the CPU, so that the same kernels give dscale). The rows are cut into
 * chunks of LNG_CHUNK_MIN rows or more (at most LNG_CHUNKS_MAX chunks, a
 * function of the row count only); pass 1 puts each row's statistics in
 * scratch, pass 2 gives each (chunk, column) one thread that sums its rows
 * in order into partial[chunk, c], pass 3 adds each column's partials: 8
 * threads take every 8th chunk in order, then a fixed tree adds the 8 and
 * the total is rounded to gamma's dtype. 16-bit: a thread of pass 2 takes
 * two adjacent columns (one 4-byte load) when aligned; each column's sum is
 * the same either way. Scratch (f32 whatever the dtype): 2 per row, then
 * chunks x C. */
#define LNG_CHUNK_MIN 16
#define LNG_CHUNKS_MAX 1024
#define LNG_THREADS 256
#define LNG_LANES 8

static int64_t lng_rows_per_chunk(int64_t rows) {
    int64_t r = (rows + LNG_CHUNKS_MAX - 1) / LNG_CHUNKS_MAX;
    return r < LNG_CHUNK_MIN ? LNG_CHUNK_MIN : r;
}

static size_t scratch_norm_grad_scale(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *t = mpmd_type_of(g, mpmd_in(n, 0));
    int64_t c = last_dim(t), numel = mpmd_type_numel(t);
    if (c == 0 || numel == 0) return 0;
    int64_t rows = numel / c, rpc = lng_rows_per_chunk(rows), chunks = (rows + rpc - 1) / rpc;
    return (size_t)(2 * rows + chunks * c) * sizeof(float);
}

template <typename S, int V>
__global__ void lng_partial(rd<S> x, rd<S> gy, const float *stats, float *partial, int64_t rows, int64_t n,
                            int64_t rpc) {
    int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= n) return;
    int64_t r0 = (int64_t)blockIdx.y * rpc, r1 = r0 + rpc < rows ? r0 + rpc : rows;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; j++)
        acc[j] = 0.0f;
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++) {
        float mu = stats[2 * r], rs = stats[2 * r + 1];
        float g[V], f[V];
        gy.template load<V>(r * n + c, g, true);
        x.template load<V>(r * n + c, f, true);
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] += g[j] * ((f[j] - mu) * rs);
    }
#pragma unroll
    for (int j = 0; j < V; j++)
        partial[(int64_t)blockIdx.y * n + c + j] = acc[j];
}

/* Block (32, LNG_LANES): 32 columns, LNG_LANES threads down each. */
template <typename S> __global__ void lng_combine(const float *partial, wr<S> dg, int64_t n, int64_t chunks) {
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
    if (y == 0 && c < n) dg.put(c, sh[0][x]);
}

template <bool RMS> static int norm_grad_scale(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    int64_t n = last_dim(t), numel = mpmd_type_numel(t);
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    mpmd_dtype dx = t->dtype, dg = a->in_type[1]->dtype, dd = a->node->type.dtype;
    if (n == 0) return 0;
    if (numel == 0) { /* no rows: the sums are 0 (+0 in every float dtype) */
        cudaError_t e = cudaMemsetAsync(a->out, 0, (size_t)n * mpmd_dtype_size(dd), st);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "%s: device memset failed: %s", a->node->op->name,
                     cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    int64_t rows = numel / n, rpc = lng_rows_per_chunk(rows), chunks = (rows + rpc - 1) / rpc;
    float *stats = (float *)a->scratch, *partial = stats + 2 * rows;
    float eps = mpmd_norm_eps(a->node);
    row_shape rs = row_shape_for(rows, n);
    by_storage(storage_of({dx, dg, dd}), [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> x = rd_of<S>(a->in[0], dx), gy = rd_of<S>(a->in[1], dg);
        wr<S> out = wr_of<S>(a->out, dd);
        int v = row_vec<S>(n);
        bool al = chunks_aligned<S>(v, {a->in[0]});
        with_vec<S>(v, [&](auto vc) {
            constexpr int V = decltype(vc)::value;
            with_warp(rs.warp, [&](auto wc) {
                constexpr bool W = decltype(wc)::value;
                norm_stats<S, V, W, RMS><<<rs.blocks, rs.threads, 0, st>>>(x, stats, rows, n, eps, al);
            });
        });
        bool pair = false;
        if constexpr (is16<S>::value) pair = n % 2 == 0 && ptrs_aligned(4, {a->in[0], a->in[1]});
        if (pair) {
            if constexpr (is16<S>::value) {
                dim3 grid(mpmd_cuda_blocks(n / 2, LNG_THREADS), (unsigned)chunks);
                lng_partial<S, 2><<<grid, LNG_THREADS, 0, st>>>(x, gy, stats, partial, rows, n, rpc);
            }
        } else {
            dim3 grid(mpmd_cuda_blocks(n, LNG_THREADS), (unsigned)chunks);
            lng_partial<S, 1><<<grid, LNG_THREADS, 0, st>>>(x, gy, stats, partial, rows, n, rpc);
        }
        lng_combine<S><<<mpmd_cuda_blocks(n, 32), dim3(32, LNG_LANES), 0, st>>>(partial, out, n, chunks);
    });
    return mpmd_cuda_launched(a, a->node->op->name);
}

static int k_layer_norm_grad_gamma(const mpmd_kargs *a) { return norm_grad_scale<false>(a); }
static int k_rms_norm_grad_scale(const mpmd_kargs *a) { return norm_grad_scale<true>(a); }

/* ---- the table ---------------------------------------------------------------------------------- */

#define NN_16BIT (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_norm_kernels[] = {
    {&mpmd_op_layer_norm, k_layer_norm, NULL, NN_16BIT},
    {&mpmd_op_layer_norm_grad_x, k_layer_norm_grad_x, NULL, NN_16BIT},
    {&mpmd_op_layer_norm_grad_gamma, k_layer_norm_grad_gamma, scratch_norm_grad_scale, NN_16BIT},
    {&mpmd_op_rms_norm, k_rms_norm, NULL, NN_16BIT},
    {&mpmd_op_rms_norm_grad_x, k_rms_norm_grad_x, NULL, NN_16BIT},
    {&mpmd_op_rms_norm_grad_scale, k_rms_norm_grad_scale, scratch_norm_grad_scale, NN_16BIT},
    {NULL, NULL, NULL, 0},
};
