/* CUDA kernels of the neural-network family (ops in src/ops/nn.c), all but
 * matmul (core.cu): softmax / log-softmax (plain, causal) and their
 * gradients, layer norm and RMS norm and their two gradients each, rotary
 * position embedding, embedding lookup and its scatter-add gradient,
 * cross-entropy and its gradient.
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
#include "cuda.h"

extern "C" {
#include "ops/nn.h"
}
#include "util/rope.h"

#include <initializer_list>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#define FULL_MASK 0xffffffffu
#define MAX_GRID (1u << 30)

/* ---- storage types ------------------------------------------------------------------------- */

/* A kernel is instantiated for the storage type S of its float operands:
 * float, bf16, f16, or dyn (each operand's dtype read at run time). rd<S>
 * reads elements as f32 (exactly), wr<S> writes f32 values rounded to S. */
typedef __nv_bfloat16 bf16;
typedef __half f16;
struct dyn {};

template <typename S> struct is16 : std::false_type {};
template <> struct is16<bf16> : std::true_type {};
template <> struct is16<f16> : std::true_type {};

/* The storage of an operand that is f32 in the usual pattern (a loss, its
 * cotangent): float, or dyn in the dyn instantiation. */
template <typename S>
using f32_or_dyn = typename std::conditional<std::is_same<S, dyn>::value, dyn, float>::type;

/* (to_f32 / from_f32: cuda.h) */

/* The low 16 bits of b as a value of 16-bit type T, in f32 (exact). */
template <typename T> __device__ __forceinline__ float bits_f32(unsigned b);
template <> __device__ __forceinline__ float bits_f32<bf16>(unsigned b) { return __uint_as_float(b << 16); }
template <> __device__ __forceinline__ float bits_f32<f16>(unsigned b) {
    return __half2float(__ushort_as_half((unsigned short)(b & 0xffffu)));
}

/* (a, b) rounded to T (nearest even), a in the low half of the word. */
template <typename T> __device__ __forceinline__ unsigned pack2(float a, float b);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return (unsigned)__bfloat16_as_ushort(h.x) | (unsigned)__bfloat16_as_ushort(h.y) << 16;
}
template <> __device__ __forceinline__ unsigned pack2<f16>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return (unsigned)__half_as_ushort(h.x) | (unsigned)__half_as_ushort(h.y) << 16;
}

/* load<V>(i, f, al) reads elements i .. i + V - 1 (i a multiple of V): with
 * one access of V elements when al (the caller checked the alignment), else
 * one by one; the values are the same either way. */
template <typename S> struct rd {
    const S *p;
    __host__ __device__ __forceinline__ rd at(int64_t o) const { return rd{p + o}; }
    __device__ __forceinline__ float operator[](int64_t i) const { return to_f32(p[i]); }
    template <int V> __device__ __forceinline__ void load(int64_t i, float (&f)[V], bool al) const {
        if constexpr (V == 1) {
            f[0] = to_f32(p[i]);
        } else if constexpr (std::is_same<S, float>::value) {
            static_assert(V % 4 == 0, "f32 vectors are float4");
            if (al) {
#pragma unroll
                for (int q = 0; q < V / 4; q++) {
                    float4 u = ((const float4 *)(p + i))[q];
                    f[4 * q] = u.x;
                    f[4 * q + 1] = u.y;
                    f[4 * q + 2] = u.z;
                    f[4 * q + 3] = u.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    f[j] = p[i + j];
            }
        } else {
            static_assert(V == 2 || V == 4 || V == 8, "16-bit vectors are 4, 8 or 16 bytes");
            if (al) {
                unsigned w[V / 2];
                if constexpr (V == 8) {
                    uint4 u = *(const uint4 *)(p + i);
                    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
                } else if constexpr (V == 4) {
                    uint2 u = *(const uint2 *)(p + i);
                    w[0] = u.x, w[1] = u.y;
                } else {
                    w[0] = *(const unsigned *)(p + i);
                }
#pragma unroll
                for (int k = 0; k < V / 2; k++) {
                    f[2 * k] = bits_f32<S>(w[k] & 0xffffu);
                    f[2 * k + 1] = bits_f32<S>(w[k] >> 16);
                }
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    f[j] = to_f32(p[i + j]);
            }
        }
    }
};

template <> struct rd<dyn> {
    const void *p;
    int dt; /* mpmd_dtype */
    __host__ __device__ __forceinline__ rd at(int64_t o) const {
        return rd{(const char *)p + o * (dt == MPMD_BF16 || dt == MPMD_F16 ? 2 : 4), dt};
    }
    __device__ __forceinline__ float operator[](int64_t i) const { return mpmd_cuda_ld(p, dt, i); }
    template <int V> __device__ __forceinline__ void load(int64_t i, float (&f)[V], bool al) const {
        static_assert(V == 1, "dyn operands are read one element at a time");
        f[0] = (*this)[i];
    }
};

template <typename S> struct wr {
    S *p;
    __host__ __device__ __forceinline__ wr at(int64_t o) const { return wr{p + o}; }
    __device__ __forceinline__ void put(int64_t i, float v) const { p[i] = from_f32<S>(v); }
    template <int V> __device__ __forceinline__ void store(int64_t i, const float (&f)[V], bool al) const {
        if constexpr (V == 1) {
            p[i] = from_f32<S>(f[0]);
        } else if constexpr (std::is_same<S, float>::value) {
            static_assert(V % 4 == 0, "f32 vectors are float4");
            if (al) {
#pragma unroll
                for (int q = 0; q < V / 4; q++)
                    ((float4 *)(p + i))[q] = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    p[i + j] = f[j];
            }
        } else {
            static_assert(V == 2 || V == 4 || V == 8, "16-bit vectors are 4, 8 or 16 bytes");
            if (al) {
                unsigned w[V / 2];
#pragma unroll
                for (int k = 0; k < V / 2; k++)
                    w[k] = pack2<S>(f[2 * k], f[2 * k + 1]);
                if constexpr (V == 8)
                    *(uint4 *)(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
                else if constexpr (V == 4)
                    *(uint2 *)(p + i) = make_uint2(w[0], w[1]);
                else
                    *(unsigned *)(p + i) = w[0];
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    p[i + j] = from_f32<S>(f[j]);
            }
        }
    }
};

template <> struct wr<dyn> {
    void *p;
    int dt;
    __host__ __device__ __forceinline__ wr at(int64_t o) const {
        return wr{(char *)p + o * (dt == MPMD_BF16 || dt == MPMD_F16 ? 2 : 4), dt};
    }
    __device__ __forceinline__ void put(int64_t i, float v) const { mpmd_cuda_st(p, dt, i, v); }
    template <int V> __device__ __forceinline__ void store(int64_t i, const float (&f)[V], bool al) const {
        static_assert(V == 1, "dyn operands are written one element at a time");
        put(i, f[0]);
    }
};

/* Host side: accessors over a buffer of dtype d, and the dispatch. */
template <typename S> static rd<S> rd_of(const void *p, mpmd_dtype d) {
    if constexpr (std::is_same<S, dyn>::value) {
        return rd<dyn>{p, (int)d};
    } else {
        (void)d;
        return rd<S>{(const S *)p};
    }
}

template <typename S> static wr<S> wr_of(void *p, mpmd_dtype d) {
    if constexpr (std::is_same<S, dyn>::value) {
        return wr<dyn>{p, (int)d};
    } else {
        (void)d;
        return wr<S>{(S *)p};
    }
}

enum { ST_F32, ST_BF16, ST_F16, ST_DYN };

/* The storage for operands of these dtypes: their common dtype, or dyn. */
static int storage_of(std::initializer_list<mpmd_dtype> ds) {
    mpmd_dtype d0 = *ds.begin();
    for (mpmd_dtype d : ds)
        if (d != d0) return ST_DYN;
    return d0 == MPMD_BF16 ? ST_BF16 : d0 == MPMD_F16 ? ST_F16 : d0 == MPMD_F32 ? ST_F32 : ST_DYN;
}

template <typename T> struct type_tag { typedef T type; };

/* f(type_tag<S>()) for the storage st. */
template <typename F> static void by_storage(int st, F f) {
    switch (st) {
    case ST_BF16: f(type_tag<bf16>()); break;
    case ST_F16: f(type_tag<f16>()); break;
    case ST_DYN: f(type_tag<dyn>()); break;
    default: f(type_tag<float>()); break;
    }
}

/* The chunk length of a row op: 8 for 16-bit rows whose length it divides,
 * else 1 (f32 and dyn: always 1). A function of the shape only. */
template <typename S> static int row_vec(int64_t n) {
    if constexpr (is16<S>::value) return n % 8 == 0 ? 8 : 1;
    return 1;
}

static bool ptrs_aligned(size_t bytes, std::initializer_list<const void *> ps) {
    for (const void *p : ps)
        if ((uintptr_t)p % bytes) return false;
    return true;
}

/* Whether rows of chunks of v elements of S at these base pointers can be
 * loaded a chunk at a time (every row then starts aligned: v divides n). */
template <typename S> static bool chunks_aligned(int v, std::initializer_list<const void *> ps) {
    if constexpr (is16<S>::value) return v == 1 || ptrs_aligned((size_t)v * 2, ps);
    return true;
}

/* f(integral_constant<int, V>()) for v in {8, 1} (16-bit S), else V = 1. */
template <typename S, typename F> static void with_vec(int v, F f) {
    if constexpr (is16<S>::value) {
        if (v == 8) return f(std::integral_constant<int, 8>());
    }
    f(std::integral_constant<int, 1>());
}

/* f(integral_constant<bool, W>()) with W = warp: a kernel's warp (true) or
 * block (false) instantiation for the launch shape's mode. */
template <typename F> static void with_warp(bool warp, F f) {
    if (warp)
        f(std::true_type());
    else
        f(std::false_type());
}

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

static int64_t last_dim(const mpmd_type *t) { return t->ndim ? t->dim[t->ndim - 1] : 1; }

/* The rows of a row op over t (the last axis is the row) and their launch
 * shape; false when there is no row (nothing to do). */
typedef struct row_plan {
    int64_t n; /* row length */
    int64_t rows;
    row_shape rs;
} row_plan;

static bool row_plan_of(const mpmd_type *t, row_plan *p) {
    int64_t n = last_dim(t), numel = mpmd_type_numel(t);
    if (n == 0 || numel == 0) return false;
    p->n = n;
    p->rows = numel / n;
    p->rs = row_shape_for(p->rows, n);
    return true;
}

/* This thread's place: first row, row step, index t in its group of G. */
template <bool W> struct row_iter {
    int t, G;
    int64_t r0, rstep;
    __device__ __forceinline__ row_iter() {
        if constexpr (W) {
            int per = (int)(blockDim.x >> 5);
            t = (int)(threadIdx.x & 31);
            G = 32;
            r0 = (int64_t)blockIdx.x * per + (threadIdx.x >> 5);
            rstep = (int64_t)gridDim.x * per;
        } else {
            t = (int)threadIdx.x;
            G = (int)blockDim.x;
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

/* Max over the warp (NaN ignored unless every value is NaN), same tree. */
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_down_sync(FULL_MASK, v, o));
    return __shfl_sync(FULL_MASK, v, 0);
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

/* A pair (a, b) over the row's group: warp(a, b) merges it over the warp
 * (into every lane); in block mode the per-warp pairs then meet through
 * shared memory in warp order, lanes past the warps holding (a0, 0). Every
 * thread of the group must call it; sh holds 64 floats. */
template <bool W, void (*warp)(float &, float &)>
__device__ __forceinline__ void row_pair(float &a, float &b, float *sh, float a0) {
    warp(a, b);
    if constexpr (!W) {
        int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
        if (lane == 0) {
            sh[w] = a;
            sh[32 + w] = b;
        }
        __syncthreads();
        a = lane < nw ? sh[lane] : a0;
        b = lane < nw ? sh[32 + lane] : 0.0f;
        warp(a, b);
        __syncthreads();
    }
}

template <bool W> __device__ __forceinline__ void row_sum2(float &a, float &b, float *sh) {
    row_pair<W, warp_sum2>(a, b, sh, 0.0f);
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
    row_pair<W, warp_ms>(m, s, sh, -INFINITY);
}

/* This thread's (m, s) over the elements below len of its chunks t, t + G,
 * ... (chunks of V), in order; V = 1 keeps four loads in flight. */
template <typename S, int V>
__device__ __forceinline__ void ms_local(const rd<S> &xr, int64_t len, int t, int G, bool al, float &m,
                                         float &s) {
    m = -INFINITY;
    s = 0.0f;
    if constexpr (V == 1) {
        int64_t i = t, s1 = G, s2 = 2 * (int64_t)G, s3 = 3 * (int64_t)G, s4 = 4 * (int64_t)G;
        for (; i + s3 < len; i += s4) {
            float a0 = xr[i], a1 = xr[i + s1], a2 = xr[i + s2], a3 = xr[i + s3];
            ms_push(m, s, a0);
            ms_push(m, s, a1);
            ms_push(m, s, a2);
            ms_push(m, s, a3);
        }
        for (; i < len; i += G)
            ms_push(m, s, xr[i]);
    } else {
#pragma unroll 2
        for (int64_t c = t; c * V < len; c += G) {
            float f[V];
            xr.template load<V>(c * V, f, al);
#pragma unroll
            for (int j = 0; j < V; j++)
                if (c * V + j < len) ms_push(m, s, f[j]);
        }
    }
}

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
    float eps = a->node->fa[0];
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
    float eps = a->node->fa[0];
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

/* ---- rotary position embedding ------------------------------------------------------------ */

/* x [..., T, H, D]: each (row, head) turns its pairs (i, i + D/2) by the
 * angle p w_i of its position p (src/util/rope.h; the inverse by -angle).
 * rope: P = T positions offset + t, row r at r % T; rope_at: the P
 * positions of its i32 input on the device ([..., T]: one per row, [T]:
 * row r at r % T). As on the CPU, cos and sin of every (position, i) go to
 * scratch first, computed in double and rounded once (the device's pow,
 * cos and sin are within 2 ulp of double: the same floats but for a
 * rounding boundary), then one thread per pair turns it with separately
 * rounded products and sums (__fmul_rn, no fused multiply-add), as the CPU
 * does. out may alias x: a pair is read before it is written, by the same
 * thread. */
#define ROPE_THREADS 256
#define ROPE_MAX_BLOCKS (1 << 16)

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

/* cs[p half + i] = cos(angle), sn[p half + i] = sign sin(angle), p < P, i <
 * half; position p is pos[p] when pos is given, else offset + p */
__global__ void rope_table(float *cs, float *sn, int64_t P, int64_t half, int64_t D, mpmd_rope_freqs f, double sign,
                           int64_t offset, const int32_t *pos) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < P * half;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = e / half, i = e - p * half;
        double inv = mpmd_rope_inv_freq(f, i, D);
        double ang = (double)(pos ? (int64_t)pos[p] : offset + p) * inv;
        cs[e] = (float)cos(ang);
        sn[e] = (float)(sign * sin(ang));
    }
}

/* Pair e = (row of the [..., T, H] positions, i): y1 = x1 c - x2 s, y2 =
 * x1 s + x2 c, the row's angles those of position row % P. I: 32-bit
 * indices when every element index fits. */
template <typename S, typename I>
__global__ void rope_rotate(rd<S> x, wr<S> y, const float *cs, const float *sn, I pairs, I half, I H, I P) {
    for (I e = (I)(blockIdx.x * blockDim.x + threadIdx.x); e < pairs; e += (I)(gridDim.x * blockDim.x)) {
        I rh = e / half, i = e - rh * half, p = (rh / H) % P;
        I i1 = rh * 2 * half + i, i2 = i1 + half, k = p * half + i;
        float x1 = x[i1], x2 = x[i2], c = cs[k], s = sn[k];
        y.put(i1, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
        y.put(i2, __fadd_rn(__fmul_rn(x1, s), __fmul_rn(x2, c)));
    }
}

static int k_rope(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const mpmd_type *t = &n->type;
    int64_t T = t->dim[t->ndim - 3], H = t->dim[t->ndim - 2], D = t->dim[t->ndim - 1], half = D / 2;
    int64_t numel = mpmd_type_numel(t);
    if (numel == 0 || half == 0) return 0;
    const bool at = n->op == &mpmd_op_rope_at;
    const int64_t P = at ? mpmd_type_numel(a->in_type[1]) : T;
    float *cs = (float *)a->scratch;
    if (!cs) {
        snprintf(a->err, a->err_len, "%s: the executor gave no scratch buffer (%zu bytes needed)", n->op->name,
                 (size_t)(P * half) * 2 * sizeof(float));
        return 1;
    }
    float *sn = cs + P * half;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const mpmd_rope_freqs f = {n->fa[0], n->fa[1], n->fa[2], n->fa[3], (double)n->ia[2]};
    double sign = n->ia[1] ? -1.0 : 1.0;
    rope_table<<<cap_grid((P * half + ROPE_THREADS - 1) / ROPE_THREADS), ROPE_THREADS, 0, st>>>(
        cs, sn, P, half, D, f, sign, n->ia[0], at ? (const int32_t *)a->in[1] : NULL);
    mpmd_dtype dx = a->in_type[0]->dtype, dy = t->dtype;
    int64_t pairs = numel / 2, blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    unsigned grid = cap_grid(blocks < ROPE_MAX_BLOCKS ? blocks : ROPE_MAX_BLOCKS);
    /* 32-bit when every index, plus one grid stride, stays below 2^31 */
    bool small = numel + (int64_t)ROPE_MAX_BLOCKS * ROPE_THREADS < ((int64_t)1 << 31);
    by_storage(storage_of({dx, dy}), [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> x = rd_of<S>(a->in[0], dx);
        wr<S> y = wr_of<S>(a->out, dy);
        if (small)
            rope_rotate<S, uint32_t><<<grid, ROPE_THREADS, 0, st>>>(x, y, cs, sn, (uint32_t)pairs,
                                                                    (uint32_t)half, (uint32_t)H, (uint32_t)P);
        else
            rope_rotate<S, int64_t><<<grid, ROPE_THREADS, 0, st>>>(x, y, cs, sn, pairs, half, H, P);
    });
    return mpmd_cuda_launched(a, n->op->name);
}

/* ---- embedding ------------------------------------------------------------------------------- */

static int copy_threads(int64_t cols) { /* a warp multiple, 32 to 256 */
    int64_t t = (cols + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : (int)t;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* y[p, :] = table[ids[p], :]: a block per position (grid-stride), threads
 * over the row in groups VT of elements E (float4 or float for f32; for a
 * 16-bit table the bits are copied as they are, 8, 4 or 1 to a group: the
 * same values as a round trip through f32). A bad id: zeros. */
template <typename E, typename VT>
__global__ void embedding_fwd(const E *table, const int32_t *ids, E *y, int64_t npos, int64_t c, int64_t v,
                              int *flag, int *info) {
    int64_t cv = c / (int64_t)(sizeof(VT) / sizeof(E));
    for (int64_t p = blockIdx.x; p < npos; p += gridDim.x) {
        int32_t id = ids[p];
        bool ok = id >= 0 && (int64_t)id < v;
        if (!ok && threadIdx.x == 0)
            mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_EMBEDDING_ID, (int)id, (int)p, (int)v);
        const VT *src = (const VT *)(table + (ok ? (int64_t)id : 0) * c);
        VT *dst = (VT *)(y + p * c);
        for (int64_t j = threadIdx.x; j < cv; j += blockDim.x)
            dst[j] = ok ? src[j] : VT{};
    }
}

/* The table and the output in different dtypes (dyn): element by element. */
__global__ void embedding_fwd_dyn(rd<dyn> table, const int32_t *ids, wr<dyn> y, int64_t npos, int64_t c,
                                  int64_t v, int *flag, int *info) {
    for (int64_t p = blockIdx.x; p < npos; p += gridDim.x) {
        int32_t id = ids[p];
        bool ok = id >= 0 && (int64_t)id < v;
        if (!ok && threadIdx.x == 0)
            mpmd_cuda_raise(flag, info, MPMD_CUDA_FLAG_EMBEDDING_ID, (int)id, (int)p, (int)v);
        rd<dyn> src = table.at((ok ? (int64_t)id : 0) * c);
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
            y.put(p * c + j, ok ? src[j] : 0.0f);
    }
}

static int k_embedding(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *tt = a->in_type[0], *ti = a->in_type[1];
    int64_t v = tt->dim[0], c = tt->dim[1], n = mpmd_type_numel(ti);
    if (n == 0 || c == 0) return 0;
    const int32_t *ids = (const int32_t *)a->in[1];
    mpmd_dtype dt = tt->dtype, dy = a->node->type.dtype;
    unsigned grid = cap_grid(n);
    if (dt != dy) {
        embedding_fwd_dyn<<<grid, copy_threads(c), 0, d->stream>>>(
            rd_of<dyn>(a->in[0], dt), ids, wr_of<dyn>(a->out, dy), n, c, v, d->flag, d->flag_info);
    } else if (dt == MPMD_BF16 || dt == MPMD_F16) {
        typedef unsigned short E;
        const E *table = (const E *)a->in[0];
        E *y = (E *)a->out;
        if (c % 8 == 0 && aligned16(table) && aligned16(y))
            embedding_fwd<E, uint4>
                <<<grid, copy_threads(c / 8), 0, d->stream>>>(table, ids, y, n, c, v, d->flag, d->flag_info);
        else if (c % 4 == 0 && ptrs_aligned(8, {table, y}))
            embedding_fwd<E, uint2>
                <<<grid, copy_threads(c / 4), 0, d->stream>>>(table, ids, y, n, c, v, d->flag, d->flag_info);
        else
            embedding_fwd<E, E>
                <<<grid, copy_threads(c), 0, d->stream>>>(table, ids, y, n, c, v, d->flag, d->flag_info);
    } else {
        const float *table = (const float *)a->in[0];
        float *y = (float *)a->out;
        if (c % 4 == 0 && aligned16(table) && aligned16(y))
            embedding_fwd<float, float4>
                <<<grid, copy_threads(c / 4), 0, d->stream>>>(table, ids, y, n, c, v, d->flag, d->flag_info);
        else
            embedding_fwd<float, float>
                <<<grid, copy_threads(c), 0, d->stream>>>(table, ids, y, n, c, v, d->flag, d->flag_info);
    }
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
 *    block per chunk, a thread per column (or group of 4 or 8), sums the
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
__device__ __forceinline__ void bitonic_tile_steps(unsigned long long *sk, int64_t base, int64_t size,
                                                   int from) {
    int t = (int)threadIdx.x;
    for (int stride = from; stride > 0; stride >>= 1) {
        __syncthreads();
        int i = 2 * stride * (t / stride) + (t % stride);
        bitonic_cmpx(sk, i, i + stride, ((base + i) & size) == 0);
    }
}

/* Build the keys of this tile and sort it completely (merge sizes 2..T). */
__global__ void __launch_bounds__(EMB_TILE / 2) emb_sort_init(const int32_t *ids, unsigned long long *keys,
                                                              int64_t npos, int64_t v, int *flag, int *info) {
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
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < half;
         t += (int64_t)gridDim.x * blockDim.x) {
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
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id <= v;
         id += (int64_t)gridDim.x * blockDim.x) {
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

/* Step 4: a block per sorted entry k (grid-stride); only the first entry
 * of a chunk does anything. A thread takes VEC adjacent columns (VEC from
 * the row length and the alignment: each column's sum is the same for any
 * VEC), sums in f32, and rounds once when it writes dtable itself. */
template <typename S, int VEC>
__global__ void emb_grad_chunks(const unsigned long long *keys, const int *bounds, rd<S> gy, wr<S> dt,
                                float *partial, int64_t npos, int64_t v, int64_t c) {
    int64_t cv = c / VEC;
    wr<float> part{partial};
    for (int64_t k = blockIdx.x; k < npos; k += gridDim.x) {
        int64_t id = (int64_t)(keys[k] >> 32);
        if (id >= v) continue; /* a bad id: left out */
        int lo = bounds[id], hi = bounds[id + 1];
        if ((k - lo) % EMB_CHUNK) continue;
        int end = k + EMB_CHUNK < hi ? (int)k + EMB_CHUNK : hi;
        bool direct = hi - lo <= EMB_CHUNK;
        float *dst = nullptr; /* f32: one destination pointer */
        if constexpr (std::is_same<S, float>::value) dst = direct ? dt.p + id * c : partial + k * c;
        for (int64_t j = threadIdx.x; j < cv; j += blockDim.x) {
            float acc[VEC];
#pragma unroll
            for (int e = 0; e < VEC; e++)
                acc[e] = 0.0f;
            int q = (int)k;
            for (; q + 4 <= end; q += 4) { /* four loads in flight, added in order */
                int64_t p0 = (int64_t)(uint32_t)keys[q], p1 = (int64_t)(uint32_t)keys[q + 1];
                int64_t p2 = (int64_t)(uint32_t)keys[q + 2], p3 = (int64_t)(uint32_t)keys[q + 3];
                float g0[VEC], g1[VEC], g2[VEC], g3[VEC];
                gy.template load<VEC>(p0 * c + j * VEC, g0, true);
                gy.template load<VEC>(p1 * c + j * VEC, g1, true);
                gy.template load<VEC>(p2 * c + j * VEC, g2, true);
                gy.template load<VEC>(p3 * c + j * VEC, g3, true);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += g0[e];
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += g1[e];
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += g2[e];
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += g3[e];
            }
            for (; q < end; q++) {
                float g0[VEC];
                gy.template load<VEC>((int64_t)(uint32_t)keys[q] * c + j * VEC, g0, true);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += g0[e];
            }
            if constexpr (std::is_same<S, float>::value)
                wr<float>{dst}.template store<VEC>(j * VEC, acc, true);
            else if (direct)
                dt.template store<VEC>(id * c + j * VEC, acc, true);
            else
                part.template store<VEC>(k * c + j * VEC, acc, true);
        }
    }
}

/* Step 5: a block per vocabulary row (grid-stride). */
template <typename S, int VEC>
__global__ void emb_grad_rows(const int *bounds, const float *partial, wr<S> dt, int64_t v, int64_t c) {
    int64_t cv = c / VEC;
    rd<float> part{partial};
    for (int64_t row = blockIdx.x; row < v; row += gridDim.x) {
        int lo = bounds[row], hi = bounds[row + 1];
        if (hi - lo > 0 && hi - lo <= EMB_CHUNK) continue; /* written by step 4 */
        for (int64_t j = threadIdx.x; j < cv; j += blockDim.x) {
            float acc[VEC];
#pragma unroll
            for (int e = 0; e < VEC; e++)
                acc[e] = 0.0f;
            for (int q = lo; q < hi; q += EMB_CHUNK) {
                float p[VEC];
                part.template load<VEC>((int64_t)q * c + j * VEC, p, true);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[e] += p[e];
            }
            dt.template store<VEC>(row * c + j * VEC, acc, true);
        }
    }
}

static int k_embedding_grad(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    const mpmd_type *ti = a->in_type[0];
    int64_t v = a->node->type.dim[0], c = a->node->type.dim[1], npos = mpmd_type_numel(ti);
    const int32_t *ids = (const int32_t *)a->in[0];
    mpmd_dtype dg = a->in_type[1]->dtype, dd = a->node->type.dtype;
    if (v == 0 || c == 0) return 0;
    if (npos == 0) { /* +0 in every float dtype */
        cudaError_t e = cudaMemsetAsync(a->out, 0, (size_t)(v * c) * mpmd_dtype_size(dd), d->stream);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "embedding_grad: device memset failed: %s", cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    if (npos > INT_MAX / 2 || v >= INT_MAX) {
        snprintf(a->err, a->err_len,
                 "embedding_grad: %lld positions and %lld rows; the CUDA kernel takes fewer than 2^30 "
                 "positions and "
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
    const void *gp = a->in[1];
    void *op = a->out;
    by_storage(storage_of({dg, dd}), [&](auto tag) {
        typedef typename decltype(tag)::type S;
        rd<S> gy = rd_of<S>(gp, dg);
        wr<S> dt = wr_of<S>(op, dd);
        int vec = 1;
        if constexpr (std::is_same<S, float>::value) {
            if (c % 4 == 0 && aligned16(gp) && aligned16(op) && aligned16(partial)) vec = 4;
        } else if constexpr (is16<S>::value) {
            if (c % 8 == 0 && aligned16(gp) && aligned16(op) && aligned16(partial))
                vec = 8;
            else if (c % 4 == 0 && ptrs_aligned(8, {gp, op}) && aligned16(partial))
                vec = 4;
        }
        auto launch = [&](auto vc) {
            constexpr int VEC = decltype(vc)::value;
            emb_grad_chunks<S, VEC><<<cap_grid(npos), copy_threads(c / VEC), 0, d->stream>>>(
                keys, bounds, gy, dt, partial, npos, v, c);
            emb_grad_rows<S, VEC>
                <<<cap_grid(v), copy_threads(c / VEC), 0, d->stream>>>(bounds, partial, dt, v, c);
        };
        if constexpr (std::is_same<S, float>::value) {
            if (vec == 4) return launch(std::integral_constant<int, 4>());
        } else if constexpr (is16<S>::value) {
            if (vec == 8) return launch(std::integral_constant<int, 8>());
            if (vec == 4) return launch(std::integral_constant<int, 4>());
        }
        launch(std::integral_constant<int, 1>());
    });
    return mpmd_cuda_launched(a, "embedding_grad");
}

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
    {&mpmd_op_layer_norm, k_layer_norm, NULL, NN_16BIT},
    {&mpmd_op_layer_norm_grad_x, k_layer_norm_grad_x, NULL, NN_16BIT},
    {&mpmd_op_layer_norm_grad_gamma, k_layer_norm_grad_gamma, scratch_norm_grad_scale, NN_16BIT},
    {&mpmd_op_rms_norm, k_rms_norm, NULL, NN_16BIT},
    {&mpmd_op_rms_norm_grad_x, k_rms_norm_grad_x, NULL, NN_16BIT},
    {&mpmd_op_rms_norm_grad_scale, k_rms_norm_grad_scale, scratch_norm_grad_scale, NN_16BIT},
    {&mpmd_op_rope, k_rope, scratch_rope, NN_16BIT},
    {&mpmd_op_rope_at, k_rope, scratch_rope, NN_16BIT},
    {&mpmd_op_embedding, k_embedding, NULL, NN_16BIT},
    {&mpmd_op_embedding_grad, k_embedding_grad, scratch_embedding_grad, NN_16BIT},
    {&mpmd_op_cross_entropy, k_cross_entropy, NULL, NN_16BIT},
    {&mpmd_op_cross_entropy_grad, k_cross_entropy_grad, NULL, NN_16BIT},
    {NULL, NULL, NULL, 0},
};
