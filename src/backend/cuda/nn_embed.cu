/* CUDA kernels of rotary position embedding and embedding lookup with its
 * scatter-add gradient (ops in src/ops/nn.c): the neural-network family's
 * rules (nn.cu).
 */
#include "nn_rows.cuh"

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
__global__ void rope_table(float *cs, float *sn, int64_t P, int64_t half, int64_t D, mpmd_rope_freqs f,
                           double sign, int64_t offset, const int32_t *pos) {
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
        snprintf(a->err, a->err_len, "%s: the executor gave no scratch buffer (%zu bytes needed)",
                 n->op->name, (size_t)(P * half) * 2 * sizeof(float));
        return 1;
    }
    float *sn = cs + P * half;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const mpmd_rope_freqs f = {mpmd_rope_base(n), mpmd_rope_factor(n), mpmd_rope_low_freq_factor(n),
                               mpmd_rope_high_freq_factor(n), (double)mpmd_rope_original_positions(n)};
    double sign = mpmd_rope_inverse(n) ? -1.0 : 1.0;
    rope_table<<<cap_grid((P * half + ROPE_THREADS - 1) / ROPE_THREADS), ROPE_THREADS, 0, st>>>(
        cs, sn, P, half, D, f, sign, mpmd_rope_offset(n), at ? (const int32_t *)a->in[1] : NULL);
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

/* ---- the table ---------------------------------------------------------------------------------- */

#define NN_16BIT (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_embed_kernels[] = {
    {&mpmd_op_rope, k_rope, scratch_rope, NN_16BIT},
    {&mpmd_op_rope_at, k_rope, scratch_rope, NN_16BIT},
    {&mpmd_op_embedding, k_embedding, NULL, NN_16BIT},
    {&mpmd_op_embedding_grad, k_embedding_grad, scratch_embedding_grad, NN_16BIT},
    {NULL, NULL, NULL, 0},
};
