/* reduce.cu - CUDA kernels of the reduction ops (src/ops/reduce.c: sum,
 * mean, max, max_grad) and the shape ops (src/ops/shape.c: reshape,
 * permute, slice, slice_grad, concat). The CPU kernels in
 * src/backend/cpu/reduce.c are the specification.
 *
 * Reductions simplify the layout as the CPU does (axes of size 1 dropped,
 * neighbouring axes that are both reduced or both kept merged into groups),
 * then use one of two schemes:
 * - "inner" (the last group is reduced: each output reads contiguous runs):
 *   G threads per output, G = 1 (at most 16 elements), a warp, or a block of
 *   512 (long reductions over few outputs). Thread t folds elements t,
 *   t + G, ... of the output's (segment of the) reduced range in row-major
 *   order, then the G values meet in a fixed shuffle / shared-memory tree;
 * - "outer" (the last group is kept: each output is a column of rows, as in
 *   a bias gradient [N, C] -> [C]): blocks of CW columns x RY rows (256
 *   threads, CW = 32 unless the columns are fewer); thread (c, r) folds rows
 *   r, r + RY, ... of its column, then a fixed shared-memory tree over r.
 * When few outputs share a long reduction, the reduced range is cut into S
 * segments (S depends only on the shape; the scratch functions compute the
 * same plan): partials go to scratch [S][outputs] and a second kernel folds
 * them in segment order. Max propagates NaN (a group holding a NaN has max
 * NaN). max_grad runs the same reduction on (max, tie count) pairs, writes
 * (max, dy / count) per output to scratch, then visits the elements again
 * in the same layout writing dy / count where x equals the max, 0 elsewhere
 * (ties split the gradient equally, as on the CPU).
 *
 * 16-bit floats (bf16, f16): the reductions load each element, widen it to
 * f32 exactly and run the very same f32 code (same fold order, f32 partials
 * in scratch, f32 statistics), rounding to the output dtype (nearest even)
 * once, on the final store; so a bf16 / f16 result is bit for bit the f32
 * kernel's result on the widened input, rounded. Kernels are templated on
 * each operand's storage type (float, __nv_bfloat16, __half); the f32
 * instantiations compute exactly as the f32-only kernels did. max_grad takes
 * x and dy in any two float dtypes (dx has x's).
 *
 * Shape ops move elements of 2 or 4 bytes (f32, i32, bf16, f16) without
 * converting them: reshape is a cudaMemcpyAsync (nothing when given its
 * input's buffer); slice and concat copy runs (one thread per element, or
 * per 16-, 8- or 4-byte vector when sizes and pointers allow); slice_grad
 * writes rows [zeros | dy | zeros]; permute simplifies the permutation as
 * the CPU does and is a plain index map (coalesced reads and writes of whole
 * rows, vectorised) when the last axis stays last, as in the attention
 * transposes [B,T,H,D] <-> [B,H,T,D], and otherwise a 32x32 tiled transpose
 * through shared memory (a plain map when one side is under 8).
 * Index arithmetic is 32-bit where the values fit.
 */
#include "cuda.h"

#include "backend/op_descs.h"
#include "backend/shape_plan.h"

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace {

typedef long long i64;

enum { RBLK = 512, OBLK = 256, EBLK = 256 };

/* ---- index helpers ------------------------------------------------------------ */

/* q = a / b, r = a % b (a >= 0, b > 0), in 32 bits when both fit. */
__device__ __forceinline__ void qr(i64 a, i64 b, i64 &q, i64 &r) {
    if ((((unsigned long long)a) | ((unsigned long long)b)) >> 32 == 0) {
        unsigned ua = (unsigned)a, ub = (unsigned)b, uq = ua / ub;
        q = uq;
        r = ua - uq * ub;
    } else {
        q = a / b;
        r = a - q * b;
    }
}

/* Axes walked in row-major order (the last fastest), each with two element
 * strides (e.g. input and output). */
struct Axes {
    int n;
    i64 size[MPMD_MAX_DIMS], sa[MPMD_MAX_DIMS], sb[MPMD_MAX_DIMS];
};

static void axes_push(Axes *A, i64 size, i64 sa, i64 sb) {
    A->size[A->n] = size;
    A->sa[A->n] = sa;
    A->sb[A->n] = sb;
    A->n++;
}

static i64 axes_count(const Axes *A) {
    i64 c = 1;
    for (int k = 0; k < A->n; k++)
        c *= A->size[k];
    return c;
}

/* The sa-offset of flat index i (i < the product of the sizes). */
__device__ __forceinline__ i64 axes_off(const Axes &A, i64 i) {
    i64 off = 0;
#pragma unroll
    for (int k = MPMD_MAX_DIMS - 1; k >= 1; k--) {
        if (k < A.n) {
            i64 q, r;
            qr(i, A.size[k], q, r);
            off += r * A.sa[k];
            i = q;
        }
    }
    return A.n > 0 ? off + i * A.sa[0] : 0;
}

/* Both offsets of flat index i. */
__device__ __forceinline__ void axes_off2(const Axes &A, i64 i, i64 &oa, i64 &ob) {
    oa = 0;
    ob = 0;
#pragma unroll
    for (int k = MPMD_MAX_DIMS - 1; k >= 1; k--) {
        if (k < A.n) {
            i64 q, r;
            qr(i, A.size[k], q, r);
            oa += r * A.sa[k];
            ob += r * A.sb[k];
            i = q;
        }
    }
    if (A.n > 0) {
        oa += i * A.sa[0];
        ob += i * A.sb[0];
    }
}

static i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }

/* Blocks for n items at `per` items per block, capped (kernels loop). */
static unsigned grid_for(i64 n, i64 per) {
    i64 b = cdiv(n, per);
    if (b < 1) b = 1;
    if (b > (1 << 22)) b = 1 << 22;
    return (unsigned)b;
}

/* p is aligned to u bytes (a power of two). */
static int aligned(const void *p, i64 u) { return ((uintptr_t)p & (uintptr_t)(u - 1)) == 0; }

/* ---- storage types -------------------------------------------------------------- */

/* A float operand is stored as float, __nv_bfloat16 or __half (to_f32 /
 * from_f32 in cuda.h). */

/* f((T *)0) with T the storage type of float dtype d; 1 when d is no float. */
template <class F> static int with_float_type(mpmd_dtype d, F &&f) {
    switch (d) {
    case MPMD_F32: f((float *)NULL); return 0;
    case MPMD_BF16: f((__nv_bfloat16 *)NULL); return 0;
    case MPMD_F16: f((__half *)NULL); return 0;
    default: return 1;
    }
}

/* ---- reduction plan ----------------------------------------------------------- */

/* The layout of a reduction and its launch shape (from the shape alone). */
struct RPlan {
    int inner; /* 1: the last group is reduced */
    i64 L;     /* size of the last group: run length (inner) or columns (outer) */
    i64 nk;    /* kept index count: outputs (inner) or column blocks (outer) */
    i64 nr;    /* reduced index count: runs (inner) or rows (outer) */
    i64 n_out;
    Axes kept; /* sa: input offset of a kept index (outer: all kept groups but the last) */
    Axes red;  /* sa: input offset of a reduced index (inner: all reduced groups but the last) */
    int G;     /* inner: threads per output (1, 32, RBLK); outer: columns per block (CW) */
    i64 tiles; /* outer: column tiles of CW per column block */
    i64 S;     /* segments of the reduced range */
    i64 seg;   /* elements (inner) or rows (outer) per segment */
};

/* The groups of mpmd_reduce_groups_make (src/backend/shape_plan.c, as on the
 * CPU), then the launch shape. */
static void rplan_make(const mpmd_type *t, i64 mask, RPlan *P) {
    memset(P, 0, sizeof *P);
    mpmd_reduce_groups g;
    mpmd_reduce_groups_make(&g, t, (int64_t)mask);
    P->inner = g.inner;
    P->L = g.len;
    for (int k = 0; k < g.m - 1; k++)
        axes_push(g.red[k] ? &P->red : &P->kept, g.size[k], g.stride[k], 0);
    P->nk = axes_count(&P->kept);
    P->nr = axes_count(&P->red);
    P->n_out = P->inner ? P->nk : P->nk * P->L;
    i64 S = 1;
    if (P->inner) {
        i64 R = P->nr * P->L;
        P->G = R <= 16 ? 1 : (R <= 4096 || P->n_out >= 4096) ? 32 : RBLK;
        if (P->G == RBLK && P->n_out < 1024) {
            S = cdiv(1024, P->n_out);
            i64 cap = cdiv(R, (i64)RBLK * 16);
            if (S > cap) S = cap;
            if (S < 1) S = 1;
        }
        P->seg = cdiv(R, S);
        P->S = cdiv(R, P->seg);
    } else {
        int cw = 32;
        while (cw > 1 && cw / 2 >= P->L)
            cw /= 2;
        P->G = cw;
        P->tiles = cdiv(P->L, cw);
        i64 nb = P->nk * P->tiles, ry = OBLK / cw;
        if (nb < 1024) {
            S = cdiv(1024, nb);
            i64 cap = cdiv(P->nr, ry * 16);
            if (S > cap) S = cap;
            if (S < 1) S = 1;
        }
        P->seg = cdiv(P->nr, S);
        P->S = cdiv(P->nr, P->seg);
    }
}

/* Nothing is reduced (every reduced axis has size 1): an elementwise map. */
static int rplan_ident(const RPlan *P) { return !P->inner && P->nr == 1; }

/* ---- reduction operators --------------------------------------------------------- */

/* Where a reduction's results go: y (sum, mean, max) or stats (max_grad).
 * The Op knows the storage types of y and dy. */
struct Sink {
    void *y;
    float scale;    /* sum's factor: 1, or mean's 1/count */
    float2 *stats;  /* max_grad: (max, dy / count) per output */
    const void *dy; /* max_grad */
};

/* TY: y's storage type (f32 results rounded to it once). */
template <class TY> struct OpSum {
    typedef float T;
    static __device__ __forceinline__ T id() { return 0.0f; }
    static __device__ __forceinline__ T one(float v) { return v; }
    static __device__ __forceinline__ T comb(T a, T b) { return a + b; }
    static __device__ __forceinline__ T down(T a, int d) { return __shfl_down_sync(0xffffffffu, a, d); }
    static __device__ __forceinline__ void finish(const Sink &k, i64 o, T v) {
        ((TY *)k.y)[o] = from_f32<TY>(v * k.scale);
    }
};

/* b wins when larger or NaN (a is the earlier value): NaN propagates. */
__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

template <class TY> struct OpMax {
    typedef float T;
    static __device__ __forceinline__ T id() { return __int_as_float((int)0xff800000u); }
    static __device__ __forceinline__ T one(float v) { return v; }
    static __device__ __forceinline__ T comb(T a, T b) { return max_nan(a, b); }
    static __device__ __forceinline__ T down(T a, int d) { return __shfl_down_sync(0xffffffffu, a, d); }
    static __device__ __forceinline__ void finish(const Sink &k, i64 o, T v) {
        ((TY *)k.y)[o] = from_f32<TY>(v);
    }
};

/* The max and how many elements equal it. */
struct MaxCnt {
    float m;
    unsigned c;
};

/* TD: dy's storage type. */
template <class TD> struct OpMaxCnt {
    typedef MaxCnt T;
    static __device__ __forceinline__ T id() {
        T r;
        r.m = __int_as_float((int)0xff800000u);
        r.c = 0;
        return r;
    }
    static __device__ __forceinline__ T one(float v) {
        T r;
        r.m = v;
        r.c = 1;
        return r;
    }
    static __device__ __forceinline__ T comb(T a, T b) {
        if (b.m > a.m || b.m != b.m) return b;
        if (b.m == a.m) a.c += b.c;
        return a;
    }
    static __device__ __forceinline__ T down(T a, int d) {
        T r;
        r.m = __shfl_down_sync(0xffffffffu, a.m, d);
        r.c = __shfl_down_sync(0xffffffffu, a.c, d);
        return r;
    }
    /* A NaN max equals no element: the whole group gets 0. */
    static __device__ __forceinline__ void finish(const Sink &k, i64 o, T v) {
        float g = (v.m == v.m && v.c) ? to_f32(((const TD *)k.dy)[o]) / (float)v.c : 0.0f;
        k.stats[o] = make_float2(v.m, g);
    }
};

/* Fold the G values of a group (G = 1, 32, or the block) in a fixed tree;
 * the result is valid in the group's first thread. */
template <class Op, int G>
__device__ __forceinline__ typename Op::T group_reduce(typename Op::T v, typename Op::T *sm) {
    if constexpr (G == 1) {
        return v;
    } else {
#pragma unroll
        for (int d = 16; d >= 1; d >>= 1)
            v = Op::comb(v, Op::down(v, d));
        if constexpr (G > 32) {
            const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
            if (lane == 0) sm[w] = v;
            __syncthreads();
            if (w == 0) {
                v = lane < G / 32 ? sm[lane] : Op::id();
#pragma unroll
                for (int d = 16; d >= 1; d >>= 1)
                    v = Op::comb(v, Op::down(v, d));
            }
        }
        return v;
    }
}

/* ---- visiting the elements of an output ------------------------------------------- */

/* Inner layout: f(offset) for the elements of segment s of the output whose
 * kept offset is `base` that lane `lane` of G takes, in a fixed order:
 * flat reduced positions j = lane, lane + G, ... of the segment (j = run *
 * L + i, runs in row-major order of the reduced groups but the last). */
template <int G, class F>
__device__ __forceinline__ void inner_visit(const RPlan &P, i64 base, i64 s, int lane, F &f) {
    const i64 L = P.L, j0 = s * P.seg;
    const i64 j1 = j0 + P.seg < P.nr * L ? j0 + P.seg : P.nr * L;
    if (P.nr == 1) {
#pragma unroll 4
        for (i64 j = j0 + lane; j < j1; j += G)
            f(base + j);
    } else if (L >= G) {
        /* run by run: no division per element */
        for (i64 r = j0 / L, r1 = (j1 - 1) / L; r <= r1; r++) {
            const i64 rb = base + axes_off(P.red, r), at = r * L;
            const i64 lo = j0 > at ? j0 - at : 0, hi = j1 - at < L ? j1 - at : L;
#pragma unroll 4
            for (i64 i = lo + lane; i < hi; i += G)
                f(rb + i);
        }
    } else {
        for (i64 j = j0 + lane; j < j1; j += G) {
            i64 r, i;
            qr(j, L, r, i);
            f(base + axes_off(P.red, r) + i);
        }
    }
}

/* Outer layout: f(offset) for rows ty, ty + ry, ... of segment s of the
 * column at `col` (its kept offset plus the column index). */
template <class F>
__device__ __forceinline__ void outer_visit(const RPlan &P, i64 col, i64 s, int ty, int ry, F &f) {
    const i64 r0 = s * P.seg, r1 = r0 + P.seg < P.nr ? r0 + P.seg : P.nr;
    if (P.red.n <= 1) {
        const i64 st = P.red.n ? P.red.sa[0] : 0;
#pragma unroll 4
        for (i64 r = r0 + ty; r < r1; r += ry)
            f(col + r * st);
    } else {
        for (i64 r = r0 + ty; r < r1; r += ry)
            f(col + axes_off(P.red, r));
    }
}

/* ---- reduction kernels ------------------------------------------------------------ */

/* Inner layout: group (output o, segment s) per G threads; 256 threads a
 * block for G <= 32. TX: x's storage type. */
template <class Op, int G, class TX>
__global__ void __launch_bounds__(G <= 32 ? 256 : G)
    k_inner_reduce(const TX *__restrict__ x, const RPlan P, const Sink sink,
                   typename Op::T *__restrict__ part) {
    typedef typename Op::T T;
    __shared__ T sm[32];
    constexpr int PER = G <= 32 ? 256 / G : 1;
    const int lane = (int)(threadIdx.x % G);
    const i64 nG = P.n_out * P.S;
    for (i64 g = (i64)blockIdx.x * PER + threadIdx.x / G; g < nG; g += (i64)gridDim.x * PER) {
        const i64 o = g / P.S, s = g - o * P.S;
        T acc = Op::id();
        auto f = [&](i64 off) { acc = Op::comb(acc, Op::one(to_f32(x[off]))); };
        inner_visit<G>(P, axes_off(P.kept, o), s, lane, f);
        acc = group_reduce<Op, G>(acc, sm);
        if (lane == 0) {
            if (P.S == 1)
                Op::finish(sink, o, acc);
            else
                part[s * P.n_out + o] = acc;
        }
        if constexpr (G > 32) __syncthreads();
    }
}

/* Outer layout: block (column block b, tile of CW columns, segment s);
 * thread (tx, ty) = threadIdx.x % CW, / CW. */
template <class Op, class TX>
__global__ void __launch_bounds__(OBLK) k_outer_reduce(const TX *__restrict__ x, const RPlan P,
                                                       const Sink sink, typename Op::T *__restrict__ part) {
    typedef typename Op::T T;
    __shared__ T sm[OBLK];
    const int cw = P.G, ry = OBLK / cw;
    const int tx = (int)threadIdx.x % cw, ty = (int)threadIdx.x / cw;
    const i64 nB = P.nk * P.tiles * P.S;
    for (i64 blk = blockIdx.x; blk < nB; blk += gridDim.x) {
        const i64 t = blk / P.S, s = blk - t * P.S;
        const i64 b = t / P.tiles, c = (t - b * P.tiles) * cw + tx;
        T acc = Op::id();
        if (c < P.L) {
            auto f = [&](i64 off) { acc = Op::comb(acc, Op::one(to_f32(x[off]))); };
            outer_visit(P, axes_off(P.kept, b) + c, s, ty, ry, f);
        }
        sm[threadIdx.x] = acc;
        __syncthreads();
        for (int h = ry >> 1; h >= 1; h >>= 1) {
            if (ty < h) sm[threadIdx.x] = Op::comb(sm[threadIdx.x], sm[threadIdx.x + h * cw]);
            __syncthreads();
        }
        if (ty == 0 && c < P.L) {
            const i64 o = b * P.L + c;
            if (P.S == 1)
                Op::finish(sink, o, sm[tx]);
            else
                part[s * P.n_out + o] = sm[tx];
        }
        __syncthreads();
    }
}

/* Segment partials [S][n] -> results, one thread per output, s in order. */
template <class Op>
__global__ void __launch_bounds__(EBLK)
    k_combine(const typename Op::T *__restrict__ part, i64 S, i64 n, const Sink sink) {
    for (i64 o = (i64)blockIdx.x * EBLK + threadIdx.x; o < n; o += (i64)gridDim.x * EBLK) {
        typename Op::T acc = Op::id();
        for (i64 s = 0; s < S; s++)
            acc = Op::comb(acc, part[s * n + o]);
        Op::finish(sink, o, acc);
    }
}

/* The same with a warp per output (many segments): lane l folds segments
 * l, l + 32, ..., then a fixed shuffle tree. */
template <class Op>
__global__ void __launch_bounds__(EBLK)
    k_combine_warp(const typename Op::T *__restrict__ part, i64 S, i64 n, const Sink sink) {
    const int lane = threadIdx.x & 31;
    for (i64 o = (i64)blockIdx.x * (EBLK / 32) + (threadIdx.x >> 5); o < n;
         o += (i64)gridDim.x * (EBLK / 32)) {
        typename Op::T acc = Op::id();
        for (i64 s = lane; s < S; s += 32)
            acc = Op::comb(acc, part[s * n + o]);
        acc = group_reduce<Op, 32>(acc, NULL);
        if (lane == 0) Op::finish(sink, o, acc);
    }
}

/* Nothing reduced: y[i] = finish(x[i]). */
template <class Op, class TX>
__global__ void __launch_bounds__(EBLK) k_ident(const TX *__restrict__ x, i64 n, const Sink sink) {
    for (i64 i = (i64)blockIdx.x * EBLK + threadIdx.x; i < n; i += (i64)gridDim.x * EBLK)
        Op::finish(sink, i, Op::one(to_f32(x[i])));
}

/* Queue the reduction of x by plan P into sink (part: scratch for S > 1). */
template <class Op, class TX>
static void launch_reduce(const RPlan &P, const TX *x, const Sink &sink, void *scratch, cudaStream_t st) {
    typedef typename Op::T T;
    T *part = P.S > 1 ? (T *)scratch : NULL;
    if (rplan_ident(&P)) {
        k_ident<Op, TX><<<grid_for(P.n_out, EBLK), EBLK, 0, st>>>(x, P.n_out, sink);
        return;
    }
    if (P.inner) {
        const i64 nG = P.n_out * P.S;
        if (P.G == 1)
            k_inner_reduce<Op, 1, TX><<<grid_for(nG, 256), 256, 0, st>>>(x, P, sink, part);
        else if (P.G == 32)
            k_inner_reduce<Op, 32, TX><<<grid_for(nG, 8), 256, 0, st>>>(x, P, sink, part);
        else
            k_inner_reduce<Op, RBLK, TX><<<grid_for(nG, 1), RBLK, 0, st>>>(x, P, sink, part);
    } else {
        k_outer_reduce<Op, TX><<<grid_for(P.nk * P.tiles * P.S, 1), OBLK, 0, st>>>(x, P, sink, part);
    }
    if (P.S > 1) {
        if (P.S > 64)
            k_combine_warp<Op><<<grid_for(P.n_out, EBLK / 32), EBLK, 0, st>>>(part, P.S, P.n_out, sink);
        else
            k_combine<Op><<<grid_for(P.n_out, EBLK), EBLK, 0, st>>>(part, P.S, P.n_out, sink);
    }
}

/* ---- max_grad's second pass --------------------------------------------------------- */

/* dx = dy / count where x == max, else 0, over the same groups as the
 * reduction (stats[o] = (max, dy / count)). */
template <int G, class TX>
__global__ void __launch_bounds__(G <= 32 ? 256 : G)
    k_inner_scatter(const TX *__restrict__ x, const RPlan P, const float2 *__restrict__ stats,
                    TX *__restrict__ dx) {
    constexpr int PER = G <= 32 ? 256 / G : 1;
    const int lane = (int)(threadIdx.x % G);
    const i64 nG = P.n_out * P.S;
    for (i64 g = (i64)blockIdx.x * PER + threadIdx.x / G; g < nG; g += (i64)gridDim.x * PER) {
        const i64 o = g / P.S, s = g - o * P.S;
        const float2 mv = stats[o];
        const TX gv = from_f32<TX>(mv.y), zero = from_f32<TX>(0.0f);
        auto f = [&](i64 off) { dx[off] = to_f32(x[off]) == mv.x ? gv : zero; };
        inner_visit<G>(P, axes_off(P.kept, o), s, lane, f);
    }
}

template <class TX>
__global__ void __launch_bounds__(OBLK)
    k_outer_scatter(const TX *__restrict__ x, const RPlan P, const float2 *__restrict__ stats,
                    TX *__restrict__ dx) {
    const int cw = P.G, ry = OBLK / cw;
    const int tx = (int)threadIdx.x % cw, ty = (int)threadIdx.x / cw;
    const i64 nB = P.nk * P.tiles * P.S;
    for (i64 blk = blockIdx.x; blk < nB; blk += gridDim.x) {
        const i64 t = blk / P.S, s = blk - t * P.S;
        const i64 b = t / P.tiles, c = (t - b * P.tiles) * cw + tx;
        if (c < P.L) {
            const float2 mv = stats[b * P.L + c];
            const TX gv = from_f32<TX>(mv.y), zero = from_f32<TX>(0.0f);
            auto f = [&](i64 off) { dx[off] = to_f32(x[off]) == mv.x ? gv : zero; };
            outer_visit(P, axes_off(P.kept, b) + c, s, ty, ry, f);
        }
    }
}

/* Nothing reduced: each element is its own max, with count 1. */
template <class TX, class TD>
__global__ void __launch_bounds__(EBLK)
    k_max_grad_ident(const TX *__restrict__ x, const TD *__restrict__ dy, TX *__restrict__ dx, i64 n) {
    for (i64 i = (i64)blockIdx.x * EBLK + threadIdx.x; i < n; i += (i64)gridDim.x * EBLK) {
        const float v = to_f32(x[i]);
        dx[i] = from_f32<TX>(v == v ? to_f32(dy[i]) : 0.0f);
    }
}

/* ---- sum, mean, max, max_grad ------------------------------------------------------- */

/* Scratch: the segment partials, f32 whatever x's dtype: sized by element
 * count (S partials per output), never by x's bytes. */
static size_t s_reduce(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *xt = mpmd_type_of(g, mpmd_in(n, 0));
    if (!xt || mpmd_type_numel(xt) == 0) return 0;
    RPlan P;
    rplan_make(xt, n->ia[0], &P);
    return P.S > 1 ? (size_t)(P.S * P.n_out) * sizeof(float) : 0;
}

/* sum, mean (times fa[0]) and max over the axes in ia[0]; x and y in one
 * float dtype (y has x's, src/ops/reduce.c). */
static int k_reduce(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const mpmd_dtype dt = a->in_type[0]->dtype;
    if (!mpmd_dtype_is_float(dt) || n->type.dtype != dt) {
        snprintf(a->err, a->err_len, "%s: input %s, output %s; expected one float dtype (f32, bf16, f16)",
                 n->op->name, mpmd_dtype_name(dt), mpmd_dtype_name(n->type.dtype));
        return 1;
    }
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const i64 numel = mpmd_type_numel(a->in_type[0]), n_out = mpmd_type_numel(&n->type);
    if (numel == 0) { /* sum over nothing: zeros (+0 in every float dtype) */
        if (n_out > 0) cudaMemsetAsync(a->out, 0, (size_t)n_out * mpmd_dtype_size(dt), st);
        return mpmd_cuda_launched(a, n->op->name);
    }
    RPlan P;
    rplan_make(a->in_type[0], n->ia[0], &P);
    if (P.S > 1 && !a->scratch) {
        snprintf(a->err, a->err_len, "%s: the executor gave no scratch buffer (%lld bytes needed)",
                 n->op->name, (long long)(P.S * P.n_out * (i64)sizeof(float)));
        return 1;
    }
    Sink sink;
    sink.y = a->out;
    sink.scale = n->op == &mpmd_op_mean ? n->fa[0] : 1.0f;
    sink.stats = NULL;
    sink.dy = NULL;
    const int is_max = n->op == &mpmd_op_max;
    with_float_type(dt, [&](auto tag) {
        typedef std::remove_pointer_t<decltype(tag)> TX;
        const TX *x = (const TX *)a->in[0];
        if (is_max)
            launch_reduce<OpMax<TX>>(P, x, sink, a->scratch, st);
        else
            launch_reduce<OpSum<TX>>(P, x, sink, a->scratch, st);
    });
    return mpmd_cuda_launched(a, n->op->name);
}

/* Scratch: (max, dy / count) per output, then the segment partials, f32
 * whatever the dtypes: sized by element count, never by x's bytes. */
static size_t s_max_grad(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *xt = mpmd_type_of(g, mpmd_in(n, 0));
    if (!xt || mpmd_type_numel(xt) == 0) return 0;
    RPlan P;
    rplan_make(xt, n->ia[0], &P);
    if (rplan_ident(&P)) return 0;
    return (size_t)P.n_out * sizeof(float2) + (P.S > 1 ? (size_t)(P.S * P.n_out) * sizeof(MaxCnt) : 0);
}

/* max_grad with x and dx stored as TX, dy as TD. */
template <class TX, class TD> static int max_grad_as(const mpmd_kargs *a, const RPlan &P, i64 numel) {
    const TX *x = (const TX *)a->in[0];
    const TD *dy = (const TD *)a->in[1];
    TX *dx = (TX *)a->out;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    if (rplan_ident(&P)) {
        k_max_grad_ident<TX, TD><<<grid_for(numel, EBLK), EBLK, 0, st>>>(x, dy, dx, numel);
        return mpmd_cuda_launched(a, "max_grad");
    }
    if (!a->scratch) {
        snprintf(a->err, a->err_len, "max_grad: the executor gave no scratch buffer (%lld bytes needed)",
                 (long long)s_max_grad(a->g, a->node));
        return 1;
    }
    float2 *stats = (float2 *)a->scratch;
    Sink sink;
    sink.y = NULL;
    sink.scale = 1.0f;
    sink.stats = stats;
    sink.dy = dy;
    launch_reduce<OpMaxCnt<TD>>(P, x, sink, stats + P.n_out, st);
    if (P.inner) {
        const i64 nG = P.n_out * P.S;
        if (P.G == 1)
            k_inner_scatter<1, TX><<<grid_for(nG, 256), 256, 0, st>>>(x, P, stats, dx);
        else if (P.G == 32)
            k_inner_scatter<32, TX><<<grid_for(nG, 8), 256, 0, st>>>(x, P, stats, dx);
        else
            k_inner_scatter<RBLK, TX><<<grid_for(nG, 1), RBLK, 0, st>>>(x, P, stats, dx);
    } else {
        k_outer_scatter<TX><<<grid_for(P.nk * P.tiles * P.S, 1), OBLK, 0, st>>>(x, P, stats, dx);
    }
    return mpmd_cuda_launched(a, "max_grad");
}

/* max_grad(x, dy) = dx: per output o with m = max of its group and c = the
 * number of elements equal to m, dx = dy[o] / c where x == m, else 0. x and
 * dy in any float dtypes (each widened to f32), dx in x's. */
static int k_max_grad(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const mpmd_dtype xd = a->in_type[0]->dtype, dd = a->in_type[1]->dtype;
    if (!mpmd_dtype_is_float(xd) || !mpmd_dtype_is_float(dd) || n->type.dtype != xd) {
        snprintf(a->err, a->err_len, "max_grad: x %s, dy %s, dx %s; expected float dtypes with dx in x's",
                 mpmd_dtype_name(xd), mpmd_dtype_name(dd), mpmd_dtype_name(n->type.dtype));
        return 1;
    }
    const i64 numel = mpmd_type_numel(a->in_type[0]);
    if (numel == 0) return 0;
    RPlan P;
    rplan_make(a->in_type[0], n->ia[0], &P);
    int rc = 0;
    with_float_type(xd, [&](auto xtag) {
        with_float_type(dd, [&](auto dtag) {
            rc = max_grad_as<std::remove_pointer_t<decltype(xtag)>, std::remove_pointer_t<decltype(dtag)>>(
                a, P, numel);
        });
    });
    return rc;
}

/* ---- copies ---------------------------------------------------------------------------- */

/* Run i (of `run` elements E) from src + i*ss to dst + i*ds; I indexes. */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_copy_runs(E *__restrict__ dst, I ds, const E *__restrict__ src, I ss, I run, I total) {
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I i = e / run, c = e - i * run;
        dst[i * ds + c] = src[i * ss + c];
    }
}

template <class E>
static void copy_runs_as(cudaStream_t st, void *dst, i64 ds, const void *src, i64 ss, i64 n_runs, i64 run) {
    const i64 total = n_runs * run;
    const i64 wide = ds > ss ? ds : ss;
    if (n_runs * (wide > run ? wide : run) < ((i64)1 << 31))
        k_copy_runs<unsigned, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dst, (unsigned)ds, (const E *)src, (unsigned)ss, (unsigned)run, (unsigned)total);
    else
        k_copy_runs<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dst, (unsigned long long)ds, (const E *)src, (unsigned long long)ss, (unsigned long long)run,
            (unsigned long long)total);
}

/* The unit elements move in: the widest of 16, 8 and 4 bytes that divides
 * every byte count in v[] and aligns both pointers, else es, the element
 * size (2 or 4). */
static i64 unit_for(i64 es, const void *p, const void *q, const i64 *v, int nv) {
    for (i64 u = 16; u > es; u >>= 1) {
        int ok = aligned(p, u) && aligned(q, u);
        for (int k = 0; ok && k < nv; k++)
            ok = v[k] % u == 0;
        if (ok) return u;
    }
    return es;
}

/* f((E *)0) with E the unsigned type of u bytes (unit_for's). */
template <class F> static void with_unit(i64 u, F &&f) {
    switch (u) {
    case 16: f((uint4 *)NULL); break;
    case 8: f((uint2 *)NULL); break;
    case 4: f((uint32_t *)NULL); break;
    default: f((uint16_t *)NULL); break;
    }
}

/* The element size of a data dtype the shape ops move (f32, i32: 4; bf16,
 * f16: 2), or 0 with a message. */
static i64 elem_size(const mpmd_kargs *a, mpmd_dtype d) {
    const i64 es = (i64)mpmd_dtype_size(d);
    if (es == 2 || es == 4) return es;
    snprintf(a->err, a->err_len, "%s: cannot move %s elements", a->node->op->name, mpmd_dtype_name(d));
    return 0;
}

/* Copy n_runs runs of `run` elements of es bytes, run i from src + i*ss to
 * dst + i*ds (strides in elements). */
static void copy_runs(cudaStream_t st, void *dst, i64 ds, const void *src, i64 ss, i64 n_runs, i64 run,
                      i64 es) {
    if (n_runs <= 0 || run <= 0) return;
    if (n_runs == 1 || (ds == run && ss == run)) {
        cudaMemcpyAsync(dst, src, (size_t)(n_runs * run * es), cudaMemcpyDeviceToDevice, st);
        return;
    }
    const i64 v[3] = {run * es, ds * es, ss * es};
    const i64 k = unit_for(es, dst, src, v, 3) / es; /* elements per unit */
    with_unit(k * es, [&](auto tag) {
        copy_runs_as<std::remove_pointer_t<decltype(tag)>>(st, dst, ds / k, src, ss / k, n_runs, run / k);
    });
}

/* reshape: the same bytes; copy only when not given the input's buffer. */
static int k_reshape(const mpmd_kargs *a) {
    const i64 numel = mpmd_type_numel(&a->node->type);
    const i64 es = (i64)mpmd_dtype_size(a->node->type.dtype);
    if (a->out != a->in[0] && numel > 0)
        cudaMemcpyAsync(a->out, a->in[0], (size_t)(numel * es), cudaMemcpyDeviceToDevice,
                        mpmd_cuda_of(a)->stream);
    return mpmd_cuda_launched(a, "reshape");
}

/* slice: y[o, j, i] = x[o, start + j, i] for j < stop - start: one run per o. */
static int k_slice(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner;
    const i64 start = n->ia[1], w = n->ia[2] - n->ia[1];
    const i64 es = elem_size(a, a->in_type[0]->dtype);
    if (!es) return 1;
    mpmd_axis_split(a->in_type[0], (int)n->ia[0], &outer, &d, &inner);
    copy_runs(mpmd_cuda_of(a)->stream, a->out, w * inner, (const char *)a->in[0] + start * inner * es,
              d * inner, outer, w * inner, es);
    return mpmd_cuda_launched(a, "slice");
}

/* dx[o, c] = dy[o, c - s0] for s0 <= c < s1, else 0 (rows of `row` E). */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_slice_grad_rows(E *__restrict__ dx, const E *__restrict__ dy, I total, I row, I s0, I s1) {
    const I w = s1 - s0;
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I o = e / row, c = e - o * row;
        dx[e] = (c >= s0 && c < s1) ? dy[o * w + (c - s0)] : E();
    }
}

template <class E>
static void slice_grad_as(cudaStream_t st, void *dx, const void *dy, i64 total, i64 row, i64 s0, i64 s1) {
    if (total < ((i64)1 << 31))
        k_slice_grad_rows<unsigned, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dx, (const E *)dy, (unsigned)total, (unsigned)row, (unsigned)s0, (unsigned)s1);
    else
        k_slice_grad_rows<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dx, (const E *)dy, (unsigned long long)total, (unsigned long long)row,
            (unsigned long long)s0, (unsigned long long)s1);
}

/* slice_grad: dx[o, j, i] = dy[o, j - start, i] for start <= j < stop, else 0. */
static int k_slice_grad(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner;
    mpmd_axis_split(&n->type, (int)n->ia[0], &outer, &d, &inner);
    const i64 row = d * inner, s0 = n->ia[1] * inner, s1 = n->ia[2] * inner, total = outer * row;
    const i64 es = elem_size(a, n->type.dtype);
    if (!es) return 1;
    if (total == 0) return 0;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const i64 v[3] = {row * es, s0 * es, s1 * es};
    const i64 k = unit_for(es, a->out, a->in[0], v, 3) / es; /* elements per unit */
    with_unit(k * es, [&](auto tag) {
        slice_grad_as<std::remove_pointer_t<decltype(tag)>>(st, a->out, a->in[0], total / k, row / k, s0 / k,
                                                            s1 / k);
    });
    return mpmd_cuda_launched(a, "slice_grad");
}

/* concat: y[o, off_k + j, i] = x_k[o, j, i]: per operand k, one run per o. */
static int k_concat(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const int ax = (int)n->ia[0];
    int64_t outer, dt, inner;
    i64 off = 0;
    const i64 es = elem_size(a, n->type.dtype);
    if (!es) return 1;
    mpmd_axis_split(&n->type, ax, &outer, &dt, &inner);
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    for (int k = 0; k < n->n_in; k++) {
        const i64 dk = a->in_type[k]->dim[ax];
        copy_runs(st, (char *)a->out + off * inner * es, dt * inner, a->in[k], dk * inner, outer, dk * inner,
                  es);
        off += dk;
    }
    return mpmd_cuda_launched(a, "concat");
}

/* ---- permute ----------------------------------------------------------------------------- */

/* y[e] = x[off(row) + c], row = e / len, c = e % len (len = 1: a plain
 * map over every output axis). */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_permute_rows(E *__restrict__ y, const E *__restrict__ x, I total, I len, const Axes A) {
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I row = e / len, c = e - row * len;
        y[e] = x[axes_off(A, (i64)row) + (i64)c];
    }
}

template <class E>
static void permute_rows_as(cudaStream_t st, void *y, const void *x, i64 total, i64 len, const Axes &A) {
    if (total < ((i64)1 << 31))
        k_permute_rows<unsigned, E>
            <<<grid_for(total, EBLK), EBLK, 0, st>>>((E *)y, (const E *)x, (unsigned)total, (unsigned)len, A);
    else
        k_permute_rows<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)y, (const E *)x, (unsigned long long)total, (unsigned long long)len, A);
}

/* Tiled transpose of input axis a (stride sa in x, 1 in y) and the input's
 * last axis b (stride 1 in x, tb in y), for every index of `rest` (sa:
 * input offset, sb: output offset). Block = (rest index, a tile, b tile),
 * b tiles fastest; reads run along b, writes along a. E: the element (4 or
 * 2 bytes); a tile row is padded to an odd number of 4-byte words, so the
 * column reads hit 32 different banks. */
template <class E>
__global__ void __launch_bounds__(256)
    k_transpose(E *__restrict__ y, const E *__restrict__ x, i64 na, i64 nb, i64 sa, i64 tb, i64 ta_tiles,
                i64 tb_tiles, i64 nblk, const Axes rest) {
    __shared__ E tile[32][32 + 4 / sizeof(E)];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (i64 blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
        const i64 t = blk / tb_tiles, tbi = blk - t * tb_tiles;
        const i64 ri = t / ta_tiles, tai = t - ri * ta_tiles;
        i64 xo, yo;
        axes_off2(rest, ri, xo, yo);
        const i64 a0 = tai * 32, b0 = tbi * 32;
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const i64 ai = a0 + k, bi = b0 + tx;
            if (ai < na && bi < nb) tile[k][tx] = x[xo + ai * sa + bi];
        }
        __syncthreads();
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const i64 bi = b0 + k, ai = a0 + tx;
            if (ai < na && bi < nb) y[yo + bi * tb + ai] = tile[tx][k];
        }
        __syncthreads();
    }
}

/* How a permute runs: a copy (nothing moves), rows (y[e] = x[off(e / len)
 * + e % len], off over A's sa; len = 1 is a plain map over every output
 * axis), or tiles (the transpose of input axes a and b for each index of A). */
enum { PERM_COPY, PERM_ROWS, PERM_TILES };

struct PermPlan {
    int mode;
    i64 len;    /* rows */
    Axes A;     /* rows: the output axes before the last (sa: input stride); tiles: the rest (sa, sb) */
    i64 na, nb; /* tiles: sizes of input axis a (the output's last) and of the input's last axis */
    i64 sa, tb; /* tiles: input stride of a, output stride of b */
};

/* The permutation simplified by mpmd_perm_plan_make (src/backend/shape_plan.c,
 * as on the CPU: size-1 axes dropped, input axes that stay adjacent and in
 * order merged; output axis i = merged input axis q[i]), then the mode. */
static void perm_plan(const mpmd_type *t, const int64_t *perm, PermPlan *Q) {
    memset(Q, 0, sizeof *Q);
    mpmd_perm_plan P;
    mpmd_perm_plan_make(&P, t, perm);
    if (P.identity) {
        Q->mode = PERM_COPY;
        return;
    }
    const int m = P.m;
    const int64_t *istr = P.istr, *ostr = P.ostr;
    if (P.last_stays) {
        /* The last axis stays last: rows of len elements, walked over the
         * other output axes (their input strides: multiples of len). */
        Q->mode = PERM_ROWS;
        Q->len = P.in_size[m - 1];
        for (int k = 0; k < m - 1; k++)
            axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], 0);
        return;
    }
    /* The last axis moves: input axis ia becomes the output's last, and the
     * input's last axis lands at output axis p. */
    const int ia = P.ia, p = P.p;
    Q->na = P.in_size[ia];
    Q->nb = P.in_size[m - 1];
    if (Q->na < 8 || Q->nb < 8) { /* thin tiles: a plain map over every output axis */
        Q->mode = PERM_ROWS;
        Q->len = 1;
        for (int k = 0; k < m; k++)
            axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], 0);
        return;
    }
    Q->mode = PERM_TILES;
    Q->sa = istr[ia];
    Q->tb = ostr[p];
    for (int k = 0; k < m - 1; k++)
        if (k != p) axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], ostr[k]);
}

/* permute: y[i_0, ..., i_{m-1}] = x at merged input index j with j[q[k]] = i_k. */
static int k_permute(const mpmd_kargs *a) {
    const i64 numel = mpmd_type_numel(&a->node->type);
    if (numel == 0) return 0;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    PermPlan Q;
    perm_plan(a->in_type[0], a->node->ia, &Q);
    const i64 es = elem_size(a, a->node->type.dtype);
    if (!es) return 1;
    if (Q.mode == PERM_COPY) {
        cudaMemcpyAsync(a->out, a->in[0], (size_t)(numel * es), cudaMemcpyDeviceToDevice, st);
    } else if (Q.mode == PERM_ROWS) {
        /* k elements a unit: k divides len, hence every input row offset */
        const i64 v[1] = {Q.len * es};
        const i64 k = unit_for(es, a->out, a->in[0], v, 1) / es;
        for (int j = 0; j < Q.A.n; j++)
            Q.A.sa[j] /= k;
        with_unit(k * es, [&](auto tag) {
            permute_rows_as<std::remove_pointer_t<decltype(tag)>>(st, a->out, a->in[0], numel / k, Q.len / k,
                                                                  Q.A);
        });
    } else {
        const i64 ta = cdiv(Q.na, 32), tbt = cdiv(Q.nb, 32), nblk = axes_count(&Q.A) * ta * tbt;
        if (es == 4)
            k_transpose<uint32_t><<<grid_for(nblk, 1), 256, 0, st>>>(
                (uint32_t *)a->out, (const uint32_t *)a->in[0], Q.na, Q.nb, Q.sa, Q.tb, ta, tbt, nblk, Q.A);
        else
            k_transpose<uint16_t><<<grid_for(nblk, 1), 256, 0, st>>>(
                (uint16_t *)a->out, (const uint16_t *)a->in[0], Q.na, Q.nb, Q.sa, Q.tb, ta, tbt, nblk, Q.A);
    }
    return mpmd_cuda_launched(a, "permute");
}

} /* namespace */

extern "C" const mpmd_kernel mpmd_cuda_reduce_kernels[] = {
    {&mpmd_op_sum, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_mean, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_max, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_max_grad, k_max_grad, s_max_grad, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_reshape, k_reshape, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_permute, k_permute, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_slice, k_slice, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_slice_grad, k_slice_grad, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_concat, k_concat, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {NULL, NULL, NULL, 0},
};
