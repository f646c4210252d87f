/* reduce.cu - CUDA kernels of the reduction ops (src/ops/reduce.c: sum,
 * mean, max, max_grad); the shape ops are in shape.cu, what both use in
 * reduce.cuh. The CPU kernels in src/backend/cpu/reduce.c are the
 * specification.
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
 * Index arithmetic is 32-bit where the values fit.
 */
#include "reduce.cuh"

namespace {

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
    rplan_make(xt, mpmd_attr_axes(n), &P);
    return P.S > 1 ? (size_t)(P.S * P.n_out) * sizeof(float) : 0;
}

/* sum, mean (times its scale) and max over the reduced axes; x and y in one
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
    rplan_make(a->in_type[0], mpmd_attr_axes(n), &P);
    if (P.S > 1 && !a->scratch) {
        snprintf(a->err, a->err_len, "%s: the executor gave no scratch buffer (%lld bytes needed)",
                 n->op->name, (long long)(P.S * P.n_out * (i64)sizeof(float)));
        return 1;
    }
    Sink sink;
    sink.y = a->out;
    sink.scale = n->op == &mpmd_op_mean ? mpmd_attr_scale(n) : 1.0f;
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
    rplan_make(xt, mpmd_attr_axes(n), &P);
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
    rplan_make(a->in_type[0], mpmd_attr_axes(n), &P);
    int rc = 0;
    with_float_type(xd, [&](auto xtag) {
        with_float_type(dd, [&](auto dtag) {
            rc = max_grad_as<std::remove_pointer_t<decltype(xtag)>, std::remove_pointer_t<decltype(dtag)>>(
                a, P, numel);
        });
    });
    return rc;
}

} /* namespace */

extern "C" const mpmd_kernel mpmd_cuda_reduce_kernels[] = {
    {&mpmd_op_sum, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_mean, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_max, k_reduce, s_reduce, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_max_grad, k_max_grad, s_max_grad, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {NULL, NULL, NULL, 0},
};
