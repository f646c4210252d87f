/* CUDA kernel of sum_to (src/ops/elementwise.c; the CPU kernel in
 * src/backend/cpu/elementwise.c is the specification), for the elementwise
 * family's rules (elementwise.cu).
 *
 * sum_to coalesces with the CPU's plan (mpmd_sum_plan_make) and sums each
 * output in f32 in an order fixed by the shapes alone (no atomics), rounding
 * to the output's dtype once per output:
 *  - last group kept (a bias gradient [N, C] -> [C]): the reduced positions
 *    are cut into S chunks; a block of 8 warps takes 32 column lanes (of 4
 *    columns, one 16-byte f32 or 8-byte 16-bit vector, when C % 4 == 0 and
 *    the input is aligned; else 1) of one chunk, warp w adds rows w, w + 8,
 *    ... of the chunk in order, and the 8 warp sums are added in warp order.
 *    With S > 1 the chunk sums go to f32 scratch [S][outputs] and a second
 *    kernel adds them in chunk order per output. The order per column does
 *    not depend on the lane width.
 *  - last group reduced ([N, C] -> [N, 1], everything -> [1]): one warp per
 *    (output, chunk); lane l adds positions l, l + 32, ... of the chunk in
 *    order, then a fixed shuffle tree; with S > 1 a second kernel adds the
 *    chunk sums of each output with one warp the same way.
 *  - nothing reduced: a device copy.
 * S depends only on the shapes, not the dtype (the scratch function computes
 * the same), so a 16-bit sum is the f32 kernel's sum of the widened input,
 * rounded once.
 *
 */
#include "elementwise.cuh"

/* ---- sum_to ------------------------------------------------------------------------------------- */

enum { SUM_COPY, SUM_KEEP, SUM_RED };

#define KEEP_LANES 32      /* column lanes per block (one warp), each 1 or 4 columns */
#define KEEP_WARPS 8       /* warps per block, each a row lane */
#define KEEP_MIN_ROWS 64   /* fewest reduced rows worth a chunk of their own (x the vector width) */
#define KEEP_BLOCKS 1024   /* blocks to aim for when splitting into chunks */
#define RED_MIN_CHUNK 2048 /* fewest elements per warp worth a chunk of their own */
#define RED_WARPS 4096     /* warps to aim for when splitting into chunks */
#define RED_MAX_S 1024

/* The schedule of one sum_to, from the shapes alone (not the dtype). */
struct sum_args {
    int mode;
    int S;            /* chunks per output (1: no scratch) */
    int64_t chunk;    /* reduced positions (KEEP: rows, RED: elements) per chunk */
    int64_t inner;    /* size of the last group: columns (KEEP) or run length (RED) */
    int64_t R;        /* KEEP: reduced rows per output; RED: elements summed per output */
    int64_t out_rows; /* KEEP: outputs / columns */
    int vec;          /* KEEP: columns in 4s planned (inner % 4 == 0) */
    int64_t nout, nin;
    int nk, nr; /* kept and reduced outer groups, outermost first */
    int64_t ksize[MAX_OUTER], kstride[MAX_OUTER], rsize[MAX_OUTER], rstride[MAX_OUTER];
};

/* Coalesce the input's axes (aligned with the target) into kept / reduced
 * groups (mpmd_sum_plan_make, as on the CPU), then choose the chunks. */
static void plan_sum(sum_args *p, const mpmd_type *in, const mpmd_type *out) {
    mpmd_sum_plan g;
    mpmd_sum_plan_make(&g, in, out);
    const int64_t *size = g.size, *sx = g.sx;
    const int *red = g.red;
    memset(p, 0, sizeof *p);
    p->nin = g.in_numel;
    p->nout = g.out_numel;
    p->S = 1;
    if (!g.any_red) {
        p->mode = SUM_COPY;
        return;
    }
    int last = g.ng - 1;
    for (int k = 0; k < last; k++) {
        if (red[k]) {
            p->rsize[p->nr] = size[k];
            p->rstride[p->nr++] = sx[k];
        } else {
            p->ksize[p->nk] = size[k];
            p->kstride[p->nk++] = sx[k];
        }
    }
    p->inner = size[last];
    if (!red[last]) {
        p->mode = SUM_KEEP;
        p->out_rows = p->nout / p->inner;
        p->R = p->nin / p->nout;
        p->vec = p->inner % 4 == 0;
        int width = p->vec ? 4 : 1;
        int64_t blocks = ceil_div(p->inner, KEEP_LANES * width) * p->out_rows, S = 1;
        if (p->R > KEEP_MIN_ROWS * width && blocks < KEEP_BLOCKS) {
            S = ceil_div(p->R, KEEP_MIN_ROWS * width);
            int64_t want = ceil_div(KEEP_BLOCKS, blocks);
            if (S > want) S = want;
        }
        p->chunk = ceil_div(p->R, S);
        p->S = (int)ceil_div(p->R, p->chunk);
    } else {
        p->mode = SUM_RED;
        p->R = p->nin / p->nout;
        int64_t S = 1;
        if (p->nout < RED_WARPS && p->R > RED_MIN_CHUNK) {
            S = ceil_div(p->R, RED_MIN_CHUNK);
            int64_t want = ceil_div(RED_WARPS, p->nout);
            if (S > want) S = want;
            if (S > RED_MAX_S) S = RED_MAX_S;
        }
        p->chunk = ceil_div(p->R, S);
        p->S = (int)ceil_div(p->R, p->chunk);
    }
}

/* f32 chunk sums whatever the dtype */
static size_t scratch_sum_to(const mpmd_graph *g, const mpmd_node *n) {
    sum_args p;
    plan_sum(&p, &g->nodes[n->in[0]].type, &n->type);
    return p.S > 1 ? (size_t)p.S * (size_t)p.nout * sizeof(float) : 0;
}

/* Last group kept, columns in tiles of 32 V (lane l: columns l V .. l V + V-1
 * of the tile). Block b: tile b % tiles, chunk (b / tiles) % S, output row
 * b / (tiles S). Warp w adds rows w, w + 8, ... of the chunk in order; the
 * warps' sums are added in warp order. Writes out (S == 1, D = T: rounded)
 * or part[chunk][output] (D = float). Each column's order is the same for
 * V = 1 and 4. */
template <typename T, typename D, int V>
__global__ void __launch_bounds__(KEEP_LANES *KEEP_WARPS)
    sum_keep_kernel(D *dst, const T *x, sum_args p, int64_t tiles) {
    __shared__ float sh[KEEP_WARPS][KEEP_LANES * V];
    int lane = threadIdx.x % KEEP_LANES, w = threadIdx.x / KEEP_LANES;
    int64_t b = blockIdx.x, tile = b % tiles, rest = b / tiles;
    int64_t s = rest % p.S, orow = rest / p.S;
    int64_t c = (tile * KEEP_LANES + lane) * V; /* V divides inner: all V columns or none */
    int64_t r0 = s * p.chunk, r1 = r0 + p.chunk;
    if (r1 > p.R) r1 = p.R;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        acc[k] = 0.0f;
    if (c < p.inner) {
        const T *xc = x + decompose<int64_t>(orow, p.nk, p.ksize, p.kstride) + c;
        int64_t r = r0 + w;
        if (p.nr == 1) {
            const int U = 32 / (V * (int)sizeof(T)); /* rows loaded before they are added: 32 bytes */
            int64_t st = p.rstride[0] * KEEP_WARPS;
            const T *q = xc + r * p.rstride[0];
            for (; r + (U - 1) * KEEP_WARPS < r1; r += U * KEEP_WARPS, q += U * st) {
                pack<T, V> v[U];
#pragma unroll
                for (int u = 0; u < U; u++)
                    v[u] = load_pack<V>(q + u * st);
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int k = 0; k < V; k++)
                        acc[k] += to_f32(v[u].v[k]);
            }
            for (; r < r1; r += KEEP_WARPS, q += st) {
                pack<T, V> v = load_pack<V>(q);
#pragma unroll
                for (int k = 0; k < V; k++)
                    acc[k] += to_f32(v.v[k]);
            }
        } else {
            for (; r < r1; r += KEEP_WARPS) {
                pack<T, V> v = load_pack<V>(xc + decompose<int64_t>(r, p.nr, p.rsize, p.rstride));
#pragma unroll
                for (int k = 0; k < V; k++)
                    acc[k] += to_f32(v.v[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++)
        sh[w][lane * V + k] = acc[k];
    __syncthreads();
    /* warp 0 adds the warps' sums of the block's 32 V columns, coalesced */
    if (w == 0) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            int j = k * KEEP_LANES + lane; /* column of the tile */
            int64_t cj = tile * KEEP_LANES * V + j;
            if (cj < p.inner) {
                float t = sh[0][j];
#pragma unroll
                for (int m = 1; m < KEEP_WARPS; m++)
                    t += sh[m][j];
                dst[s * p.nout + orow * p.inner + cj] = from_f32<D>(t);
            }
        }
    }
}

/* Sum of n floats at p, p[stride], ... in order: loads in batches of 8. */
__device__ __forceinline__ float sum_strided(const float *p, int64_t stride, int n) {
    float t = 0.0f;
    int s = 0;
    for (; s + 8 <= n; s += 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = p[(s + u) * stride];
#pragma unroll
        for (int u = 0; u < 8; u++)
            t += v[u];
    }
    for (; s < n; s++)
        t += p[s * stride];
    return t;
}

/* out[e] = part[0][e] + part[1][e] + ... + part[S-1][e], rounded to T */
template <typename T> __global__ void sum_chunks_kernel(T *o, const float *part, int64_t nout, int S) {
    for (int64_t e = gtid(); e < nout; e += gstride())
        o[e] = from_f32<T>(sum_strided(part + e, nout, S));
}

/* Fixed shuffle tree over a warp; lane 0 gets the sum. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, d);
    return v;
}

/* Last group reduced. Warp (output e, chunk s), e = wid / S: lane l adds the
 * elements t = l, l + 32, ... of the chunk (t runs over the reduced outer
 * positions times the run, row-major) in order, then warp_sum. Writes out
 * (S == 1, D = T: rounded) or part[e][chunk] (D = float). */
template <typename T, typename D> __global__ void sum_red_kernel(D *dst, const T *x, sum_args p) {
    int lane = threadIdx.x & 31;
    int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (wid >= p.nout * p.S) return; /* whole warps */
    int64_t e = wid / p.S, s = wid % p.S;
    int64_t t0 = s * p.chunk, t1 = t0 + p.chunk;
    if (t1 > p.R) t1 = p.R;
    const T *xe = x + decompose<int64_t>(e, p.nk, p.ksize, p.kstride);
    float acc = 0.0f;
    if (p.nr == 0) {
        for (int64_t t = t0 + lane; t < t1; t += 32)
            acc += to_f32(xe[t]);
    } else {
        for (int64_t t = t0 + lane; t < t1; t += 32) {
            int64_t r = t / p.inner, j = t - r * p.inner;
            acc += to_f32(xe[decompose<int64_t>(r, p.nr, p.rsize, p.rstride) + j]);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) dst[wid] = from_f32<D>(acc);
}

/* out[e] = sum of part[e][0..S) rounded to T: lane l adds s = l, l + 32, ...
 * in order, then warp_sum. */
template <typename T> __global__ void sum_red_chunks_kernel(T *o, const float *part, int64_t nout, int S) {
    int lane = threadIdx.x & 31;
    int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (e >= nout) return;
    float t = lane < S ? sum_strided(part + e * S + lane, 32, (S - lane + 31) / 32) : 0.0f;
    t = warp_sum(t);
    if (lane == 0) o[e] = from_f32<T>(t);
}

template <typename T> static int sum_to_t(const mpmd_kargs *a) {
    sum_args p;
    plan_sum(&p, a->in_type[0], &a->node->type);
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    T *o = (T *)a->out;
    const T *x = (const T *)a->in[0];
    if (p.mode == SUM_COPY) { /* same elements in the same order: [1,3] -> [3] */
        size_t bytes = (size_t)p.nout * sizeof(T);
        cudaError_t e = cudaMemcpyAsync(o, x, bytes, cudaMemcpyDeviceToDevice, st);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "sum_to: device copy of %zu bytes failed: %s", bytes,
                     cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    float *part = (float *)a->scratch;
    if (p.S > 1 && !part) {
        snprintf(a->err, a->err_len, "sum_to: the executor gave no scratch buffer (%zu bytes needed)",
                 (size_t)p.S * (size_t)p.nout * sizeof(float));
        return 1;
    }
    if (p.mode == SUM_KEEP) {
        /* columns in 4s when planned and the input aligned for them; the sums are the same either way */
        int vec = p.vec && aligned_to(x, 4 * sizeof(T));
        int64_t tiles = ceil_div(p.inner, KEEP_LANES * (vec ? 4 : 1)), blocks = tiles * p.S * p.out_rows;
        if (blocks > 0x7fffffff) {
            snprintf(a->err, a->err_len, "sum_to: too many column tiles (%lld)", (long long)blocks);
            return 1;
        }
        unsigned nb = (unsigned)blocks, nt = KEEP_LANES * KEEP_WARPS;
        if (p.S > 1) {
            if (vec)
                sum_keep_kernel<T, float, 4><<<nb, nt, 0, st>>>(part, x, p, tiles);
            else
                sum_keep_kernel<T, float, 1><<<nb, nt, 0, st>>>(part, x, p, tiles);
            sum_chunks_kernel<T><<<grid_for(p.nout), THREADS, 0, st>>>(o, part, p.nout, p.S);
        } else {
            if (vec)
                sum_keep_kernel<T, T, 4><<<nb, nt, 0, st>>>(o, x, p, tiles);
            else
                sum_keep_kernel<T, T, 1><<<nb, nt, 0, st>>>(o, x, p, tiles);
        }
    } else {
        int64_t warps = p.nout * p.S, blocks = ceil_div(warps, THREADS / 32);
        if (blocks > 0x7fffffff) {
            snprintf(a->err, a->err_len, "sum_to: too many outputs (%lld)", (long long)p.nout);
            return 1;
        }
        if (p.S > 1) {
            sum_red_kernel<T, float><<<(unsigned)blocks, THREADS, 0, st>>>(part, x, p);
            sum_red_chunks_kernel<T>
                <<<(unsigned)ceil_div(p.nout, THREADS / 32), THREADS, 0, st>>>(o, part, p.nout, p.S);
        } else {
            sum_red_kernel<T, T><<<(unsigned)blocks, THREADS, 0, st>>>(o, x, p);
        }
    }
    return mpmd_cuda_launched(a, "sum_to");
}

static int k_sum_to(const mpmd_kargs *a) {
    int d = common_dtype(a, 1);
    if (d < 0) return 1;
    return by_dtype(d, [&](auto tag) { return sum_to_t<typename decltype(tag)::type>(a); });
}

extern "C" const mpmd_kernel mpmd_cuda_sum_to_kernels[] = {
    {&mpmd_op_sum_to, k_sum_to, scratch_sum_to, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {0, 0, 0, 0},
};
