/* CUDA kernels of the neural-network family (ops in src/ops/nn.c), all but
 * matmul (core.cu): softmax / log-softmax (plain, causal) and their
 * gradients, layer norm and RMS norm and their two gradients each, rotary
 * position embedding, embedding lookup and its scatter-add gradient,
 * cross-entropy and its gradient. This file holds the softmax family and
 * cross-entropy; nn_norm.cu the norms, nn_embed.cu rotary embedding and
 * embedding; nn_rows.cuh what they share. The rules below hold for all.
 *
 * Row ops (the last axis is the row) give each row to one group of threads:
 * a warp for rows of up to 1024 (eight rows to a block of 256), else a whole
 * block (256, 512 or 1024 threads by the row's length), in a grid-stride
 * loop over rows. Thread t of a group reads elements t, t + S, t + 2S, ...
 * (S the group's size, coalesced), keeps its own partial in element order,
 * and the group combines the partials in a fixed tree (warp shuffles, then
 * one value per warp through shared memory). Max and exp-sum are taken in
 * one pass, as (max, sum of exp(x - max)) pairs merged with a rescale.
 * Layer norm and RMS norm in warp mode keep the row in registers.
 *
 * 16-bit floats (bf16, f16): every kernel takes them natively. Each element
 * is converted to f32 exactly on load, everything (statistics, sums, max,
 * exp) is computed in f32, and the output is rounded to nearest even once,
 * on store; the f32 kernels are the same templates with f32 storage, so
 * their arithmetic is unchanged. Operands whose dtypes differ from the
 * usual pattern (e.g. a bf16 y with an f16 gy) run a scalar instantiation
 * that reads each operand's dtype at run time ("dyn"). Row ops on 16-bit
 * data work in chunks of V consecutive elements (V = 8 when the row length
 * divides by 8, else 1; a function of the shape only): thread t of a group
 * takes chunks t, t + S, ... and loads a chunk with one 16-byte access when
 * every row is aligned for it (else element by element, in the same order,
 * so alignment never changes a result). In warp mode the 16-bit
 * softmax kernels and their gradients hold the row in registers: one read
 * of memory, max then exp-sum in f32, one store.
 *
 * Sums over all rows never use atomics:
 *   layer_norm_grad_gamma and rms_norm_grad_scale: row statistics into
 *     scratch, then per-column partial sums over fixed runs of rows, then
 *     the partials added in order;
 *   embedding_grad: the positions sorted by (id, position) (a bitonic sort of
 *     distinct 64-bit keys, so the order is unique), each id's range found by
 *     binary search, then one thread per (chunk of up to 64 of an id's
 *     positions, column) adds those rows of gy in position order, and one
 *     thread per (id, column) adds the id's chunk sums in order (an id seen
 *     at most 64 times gets the CPU's order exactly); unused ids get 0.
 *   Both keep their partial sums in f32 scratch whatever the dtype.
 * Launch shapes depend only on the tensor shapes (and, for the vector paths
 * of the copies and the per-column sums, on pointer alignment, which never
 * changes a result). An id or label out of range is recorded with
 * mpmd_cuda_raise and its row is written as zeros (embedding,
 * cross_entropy_grad), 0 (cross_entropy), or left out of the sums
 * (embedding_grad).
 */
#include "nn_rows.cuh"

/* ---- softmax family ---------------------------------------------------------------------- */

enum { SM_SOFTMAX, SM_CAUSAL, SM_LOG, SM_GRAD, SM_CAUSAL_GRAD, SM_LOG_GRAD };

/* softmax:     y = exp(x - max) / sum(exp(x - max)) over the first len
 *              entries (len = n, or r % n + 1 in the causal one), 0 after;
 * log_softmax: y = (x - max) - log(sum(exp(x - max))).
 * y may alias x: each thread reads the elements it later writes. */
template <typename S, int V, bool W, int K>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    softmax_fwd(rd<S> x, wr<S> y, int64_t rows, int64_t n, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> xr = x.at(r * n);
        wr<S> yr = y.at(r * n);
        int64_t len = K == SM_CAUSAL ? r % n + 1 : n;
        float m, s;
        ms_local<S, V>(xr, len, it.t, it.G, al, m, s);
        row_ms<W>(m, s, sh);
        if constexpr (K == SM_LOG) {
            float ls = logf(s);
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float f[V];
                xr.template load<V>(c * V, f, al);
#pragma unroll
                for (int j = 0; j < V; j++)
                    f[j] = (f[j] - m) - ls;
                yr.template store<V>(c * V, f, al);
            }
        } else {
            float inv = 1.0f / s;
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float f[V];
                if (c * V < len) {
                    xr.template load<V>(c * V, f, al);
#pragma unroll
                    for (int j = 0; j < V; j++)
                        f[j] = c * V + j < len ? expf(f[j] - m) * inv : 0.0f;
                } else {
#pragma unroll
                    for (int j = 0; j < V; j++)
                        f[j] = 0.0f;
                }
                yr.template store<V>(c * V, f, al);
            }
        }
    }
}

/* softmax(_causal)_grad: gx = y * (gy - sum(gy * y)) over the first len
 *                        entries, 0 after;
 * log_softmax_grad:      gx = gy - exp(y) * sum(gy).
 * gx may alias gy (read before written, by the same thread). */
template <typename S, int V, bool W, int K>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    softmax_bwd(rd<S> y, rd<S> gy, wr<S> gx, int64_t rows, int64_t n, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> yr = y.at(r * n), gr = gy.at(r * n);
        wr<S> xr = gx.at(r * n);
        if constexpr (K == SM_LOG_GRAD) {
            float acc = 0.0f;
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float g[V];
                gr.template load<V>(c * V, g, al);
#pragma unroll
                for (int j = 0; j < V; j++)
                    acc += g[j];
            }
            float sg = row_sum<W>(acc, sh);
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float g[V], yv[V];
                gr.template load<V>(c * V, g, al);
                yr.template load<V>(c * V, yv, al);
#pragma unroll
                for (int j = 0; j < V; j++)
                    g[j] = g[j] - expf(yv[j]) * sg;
                xr.template store<V>(c * V, g, al);
            }
        } else {
            int64_t len = K == SM_CAUSAL_GRAD ? r % n + 1 : n;
            float acc = 0.0f;
#pragma unroll 4
            for (int64_t c = it.t; c * V < len; c += it.G) {
                float g[V], yv[V];
                gr.template load<V>(c * V, g, al);
                yr.template load<V>(c * V, yv, al);
#pragma unroll
                for (int j = 0; j < V; j++)
                    if (c * V + j < len) acc += g[j] * yv[j];
            }
            float d = row_sum<W>(acc, sh);
#pragma unroll 4
            for (int64_t c = it.t; c < nc; c += it.G) {
                float g[V];
                if (c * V < len) {
                    float yv[V];
                    gr.template load<V>(c * V, g, al);
                    yr.template load<V>(c * V, yv, al);
#pragma unroll
                    for (int j = 0; j < V; j++)
                        g[j] = c * V + j < len ? yv[j] * (g[j] - d) : 0.0f;
                } else {
#pragma unroll
                    for (int j = 0; j < V; j++)
                        g[j] = 0.0f;
                }
                xr.template store<V>(c * V, g, al);
            }
        }
    }
}

/* 16-bit rows of up to ROW_WARP_MAX, a warp per row, held in registers:
 * lane t keeps chunks t + 32k (k < RC), read once (the causal variants skip
 * the chunks wholly past len); the row's max, then the sum of exp(x - max)
 * in f32 (lane partials in element order, then the warp tree); one store of
 * each chunk. y may alias x. */
template <int V> struct regs_of {
    enum { RC = ROW_WARP_MAX / (32 * V) };
};

template <typename S, int V, int K>
__global__ void __launch_bounds__(ROW_WARP_BLOCK)
    softmax_fwd_regs(rd<S> x, wr<S> y, int64_t rows, int64_t n, bool al) {
    constexpr int C = regs_of<V>::RC;
    row_iter<true> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> xr = x.at(r * n);
        wr<S> yr = y.at(r * n);
        int64_t len = K == SM_CAUSAL ? r % n + 1 : n;
        float v[C][V];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < C; k++) {
            int64_t c = it.t + 32 * k;
            if (c < nc && c * V < len) {
                xr.template load<V>(c * V, v[k], al);
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    v[k][j] = -INFINITY;
            }
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (c * V + j >= len) v[k][j] = -INFINITY;
                m = fmaxf(m, v[k][j]);
            }
        }
        m = warp_max(m);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < C; k++) {
            int64_t c = it.t + 32 * k;
#pragma unroll
            for (int j = 0; j < V; j++)
                if (c * V + j < len) {
                    float e = expf(v[k][j] - m);
                    s += e;
                    if constexpr (K != SM_LOG) v[k][j] = e;
                }
        }
        s = warp_sum(s);
        if constexpr (K == SM_LOG) {
            float ls = logf(s);
#pragma unroll
            for (int k = 0; k < C; k++) {
                int64_t c = it.t + 32 * k;
                if (c < nc) {
                    float o[V];
#pragma unroll
                    for (int j = 0; j < V; j++)
                        o[j] = (v[k][j] - m) - ls;
                    yr.template store<V>(c * V, o, al);
                }
            }
        } else {
            float inv = 1.0f / s;
#pragma unroll
            for (int k = 0; k < C; k++) {
                int64_t c = it.t + 32 * k;
                if (c < nc) {
                    float o[V];
#pragma unroll
                    for (int j = 0; j < V; j++)
                        o[j] = c * V + j < len ? v[k][j] * inv : 0.0f;
                    yr.template store<V>(c * V, o, al);
                }
            }
        }
    }
}

/* The gradients the same way (y and gy in registers); gx may alias gy. */
template <typename S, int V, int K>
__global__ void __launch_bounds__(ROW_WARP_BLOCK)
    softmax_bwd_regs(rd<S> y, rd<S> gy, wr<S> gx, int64_t rows, int64_t n, bool al) {
    constexpr int C = regs_of<V>::RC;
    row_iter<true> it;
    int64_t nc = n / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> yr = y.at(r * n), gr = gy.at(r * n);
        wr<S> xr = gx.at(r * n);
        int64_t len = K == SM_CAUSAL_GRAD ? r % n + 1 : n;
        float yv[C][V], g[C][V];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < C; k++) {
            int64_t c = it.t + 32 * k;
            if (c < nc && c * V < len) {
                yr.template load<V>(c * V, yv[k], al);
                gr.template load<V>(c * V, g[k], al);
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    yv[k][j] = g[k][j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < V; j++)
                if (c * V + j < len) {
                    if constexpr (K == SM_LOG_GRAD)
                        acc += g[k][j];
                    else
                        acc += g[k][j] * yv[k][j];
                }
        }
        float d = warp_sum(acc);
#pragma unroll
        for (int k = 0; k < C; k++) {
            int64_t c = it.t + 32 * k;
            if (c < nc) {
                float o[V];
#pragma unroll
                for (int j = 0; j < V; j++) {
                    if constexpr (K == SM_LOG_GRAD)
                        o[j] = g[k][j] - expf(yv[k][j]) * d;
                    else
                        o[j] = c * V + j < len ? yv[k][j] * (g[k][j] - d) : 0.0f;
                }
                xr.template store<V>(c * V, o, al);
            }
        }
    }
}

template <int K> static int softmax_family(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    row_plan rp;
    if (!row_plan_of(t, &rp)) return 0;
    const int64_t n = rp.n, rows = rp.rows;
    const row_shape rs = rp.rs;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const bool grad = K >= SM_GRAD;
    mpmd_dtype dx = t->dtype, dg = grad ? a->in_type[1]->dtype : dx, dy = a->node->type.dtype;
    const void *gp = grad ? a->in[1] : a->in[0];
    by_storage(storage_of({dx, dg, dy}), [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> x = rd_of<S>(a->in[0], dx), g = rd_of<S>(gp, dg);
        wr<S> y = wr_of<S>(a->out, dy);
        int v = row_vec<S>(n);
        bool al = chunks_aligned<S>(v, {a->in[0], gp, a->out});
        with_vec<S>(v, [&](auto vc) {
            constexpr int V = decltype(vc)::value;
            if constexpr (K < SM_GRAD) {
                if (!rs.warp)
                    softmax_fwd<S, V, false, K><<<rs.blocks, rs.threads, 0, st>>>(x, y, rows, n, al);
                else if constexpr (is16<S>::value)
                    softmax_fwd_regs<S, V, K><<<rs.blocks, rs.threads, 0, st>>>(x, y, rows, n, al);
                else
                    softmax_fwd<S, V, true, K><<<rs.blocks, rs.threads, 0, st>>>(x, y, rows, n, al);
            } else {
                if (!rs.warp)
                    softmax_bwd<S, V, false, K><<<rs.blocks, rs.threads, 0, st>>>(x, g, y, rows, n, al);
                else if constexpr (is16<S>::value)
                    softmax_bwd_regs<S, V, K><<<rs.blocks, rs.threads, 0, st>>>(x, g, y, rows, n, al);
                else
                    softmax_bwd<S, V, true, K><<<rs.blocks, rs.threads, 0, st>>>(x, g, y, rows, n, al);
            }
        });
    });
    return mpmd_cuda_launched(a, a->node->op->name);
}

static int k_softmax(const mpmd_kargs *a) { return softmax_family<SM_SOFTMAX>(a); }
static int k_softmax_causal(const mpmd_kargs *a) { return softmax_family<SM_CAUSAL>(a); }
static int k_log_softmax(const mpmd_kargs *a) { return softmax_family<SM_LOG>(a); }
static int k_softmax_grad(const mpmd_kargs *a) { return softmax_family<SM_GRAD>(a); }
static int k_softmax_causal_grad(const mpmd_kargs *a) { return softmax_family<SM_CAUSAL_GRAD>(a); }
static int k_log_softmax_grad(const mpmd_kargs *a) { return softmax_family<SM_LOG_GRAD>(a); }

/* ---- cross-entropy ------------------------------------------------------------------------- */

/* y[r] = (max + log(sum(exp(x - max)))) - x[label], one pass over the row
 * (logits of storage S, in chunks of V; the loss in f32). A bad label:
 * y[r] = 0. */
template <typename S, int V, bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    cross_entropy_fwd(rd<S> x, const int32_t *labels, wr<f32_or_dyn<S>> y, int64_t rows, int64_t v, int *flag,
                      int *info, bool al) {
    __shared__ float sh[64];
    row_iter<W> it;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        int32_t lab = labels[r];
        if (lab < 0 || (int64_t)lab >= v) { /* uniform over the group */
            if (it.t == 0) {
                mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_LABEL, (int)lab, (int)r, (int)v);
                y.put(r, 0.0f);
            }
            continue;
        }
        rd<S> xr = x.at(r * v);
        float m, s;
        ms_local<S, V>(xr, v, it.t, it.G, al, m, s);
        row_ms<W>(m, s, sh);
        if (it.t == 0) y.put(r, (m + logf(s)) - xr[lab]);
    }
}

/* dx = exp(x - lse) * gy[r] - onehot(label) * gy[r], lse = y[r] + x[label]
 * (y and gy f32), rounded to the logits' dtype. dx may alias x: the group
 * reads x[label] and syncs before any write. A bad label: a row of zeros. */
template <typename S, int V, bool W>
__global__ void __launch_bounds__(W ? ROW_WARP_BLOCK : 1024)
    cross_entropy_bwd(rd<S> x, const int32_t *labels, rd<f32_or_dyn<S>> yl, rd<f32_or_dyn<S>> gy, wr<S> dx,
                      int64_t rows, int64_t v, int *flag, int *info, bool al) {
    row_iter<W> it;
    int64_t nc = v / V;
    for (int64_t r = it.r0; r < rows; r += it.rstep) {
        rd<S> xr = x.at(r * v);
        wr<S> dr = dx.at(r * v);
        int32_t lab = labels[r];
        if (lab < 0 || (int64_t)lab >= v) {
            if (it.t == 0) mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_LABEL, (int)lab, (int)r, (int)v);
            for (int64_t c = it.t; c < nc; c += it.G) {
                float z[V];
#pragma unroll
                for (int j = 0; j < V; j++)
                    z[j] = 0.0f;
                dr.template store<V>(c * V, z, al);
            }
            continue;
        }
        float gr = gy[r];
        float lse = yl[r] + xr[lab];
        if constexpr (W)
            __syncwarp();
        else
            __syncthreads();
#pragma unroll 4
        for (int64_t c = it.t; c < nc; c += it.G) {
            float f[V];
            xr.template load<V>(c * V, f, al);
#pragma unroll
            for (int j = 0; j < V; j++) {
                float e = expf(f[j] - lse) * gr;
                f[j] = c * V + j == lab ? e - gr : e;
            }
            dr.template store<V>(c * V, f, al);
        }
    }
}

static int k_cross_entropy(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tl = a->in_type[0];
    row_plan rp;
    if (!row_plan_of(tl, &rp)) return 0;
    const int64_t v = rp.n, rows = rp.rows;
    const row_shape rs = rp.rs;
    const int32_t *labels = (const int32_t *)a->in[1];
    mpmd_dtype dx = tl->dtype, dy = a->node->type.dtype;
    int st = dy == MPMD_F32 ? storage_of({dx}) : ST_DYN;
    by_storage(st, [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> x = rd_of<S>(a->in[0], dx);
        wr<f32_or_dyn<S>> y = wr_of<f32_or_dyn<S>>(a->out, dy);
        int vv = row_vec<S>(v);
        bool al = chunks_aligned<S>(vv, {a->in[0]});
        with_vec<S>(vv, [&](auto vc) {
            constexpr int V = decltype(vc)::value;
            with_warp(rs.warp, [&](auto wc) {
                constexpr bool W = decltype(wc)::value;
                cross_entropy_fwd<S, V, W><<<rs.blocks, rs.threads, 0, d->stream>>>(
                    x, labels, y, rows, v, d->flag, d->flag_info, al);
            });
        });
    });
    return mpmd_cuda_launched(a, "cross_entropy");
}

static int k_cross_entropy_grad(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tl = a->in_type[0];
    row_plan rp;
    if (!row_plan_of(tl, &rp)) return 0;
    const int64_t v = rp.n, rows = rp.rows;
    const row_shape rs = rp.rs;
    const int32_t *labels = (const int32_t *)a->in[1];
    mpmd_dtype dx = tl->dtype, dyl = a->in_type[2]->dtype, dgy = a->in_type[3]->dtype,
               dd = a->node->type.dtype;
    int st = dyl == MPMD_F32 && dgy == MPMD_F32 ? storage_of({dx, dd}) : ST_DYN;
    by_storage(st, [&](auto tag) {
        typedef typename decltype(tag)::type S;
        typedef f32_or_dyn<S> F;
        rd<S> x = rd_of<S>(a->in[0], dx);
        rd<F> yl = rd_of<F>(a->in[2], dyl), gy = rd_of<F>(a->in[3], dgy);
        wr<S> dxo = wr_of<S>(a->out, dd);
        int vv = row_vec<S>(v);
        bool al = chunks_aligned<S>(vv, {a->in[0], a->out});
        with_vec<S>(vv, [&](auto vc) {
            constexpr int V = decltype(vc)::value;
            with_warp(rs.warp, [&](auto wc) {
                constexpr bool W = decltype(wc)::value;
                cross_entropy_bwd<S, V, W><<<rs.blocks, rs.threads, 0, d->stream>>>(
                    x, labels, yl, gy, dxo, rows, v, d->flag, d->flag_info, al);
            });
        });
    });
    return mpmd_cuda_launched(a, "cross_entropy_grad");
}

/* ---- the table ---------------------------------------------------------------------------------- */

#define NN_16BIT (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_nn_kernels[] = {
    {&mpmd_op_softmax, k_softmax, NULL, NN_16BIT},
    {&mpmd_op_softmax_causal, k_softmax_causal, NULL, NN_16BIT},
    {&mpmd_op_log_softmax, k_log_softmax, NULL, NN_16BIT},
    {&mpmd_op_softmax_grad, k_softmax_grad, NULL, NN_16BIT},
    {&mpmd_op_softmax_causal_grad, k_softmax_causal_grad, NULL, NN_16BIT},
    {&mpmd_op_log_softmax_grad, k_log_softmax_grad, NULL, NN_16BIT},
    {&mpmd_op_cross_entropy, k_cross_entropy, NULL, NN_16BIT},
    {&mpmd_op_cross_entropy_grad, k_cross_entropy_grad, NULL, NN_16BIT},
    {NULL, NULL, NULL, 0},
};
