/* nn_rows.cuh - what the CUDA kernels of the neural-network family share
 * (nn.cu, nn_norm.cu, nn_embed.cu; the family's rules are stated at the top
 * of nn.cu): storage types that load 16-bit floats as f32 and round once on
 * store, row scheduling, and the fixed-order group reductions.
 */
#ifndef MPMD_CUDA_NN_ROWS_CUH
#define MPMD_CUDA_NN_ROWS_CUH

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
static inline int storage_of(std::initializer_list<mpmd_dtype> ds) {
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

static inline bool ptrs_aligned(size_t bytes, std::initializer_list<const void *> ps) {
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

static inline unsigned cap_grid(int64_t b) {
    if (b < 1) return 1;
    return b > (int64_t)MAX_GRID ? MAX_GRID : (unsigned)b;
}

static inline row_shape row_shape_for(int64_t rows, int64_t n) {
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

static inline int64_t last_dim(const mpmd_type *t) { return t->ndim ? t->dim[t->ndim - 1] : 1; }

/* The rows of a row op over t (the last axis is the row) and their launch
 * shape; false when there is no row (nothing to do). */
typedef struct row_plan {
    int64_t n; /* row length */
    int64_t rows;
    row_shape rs;
} row_plan;

static inline bool row_plan_of(const mpmd_type *t, row_plan *p) {
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

#endif
