/* The exact sum of squares of f32 vectors on the GPU (util/exact.h), for
 * global norms.
 *
 * Each square is m^2 2^(2e - 300) with m^2 < 2^48: the squares are summed
 * as integers, bin by bin of their exponent e. A block takes a chunk of at
 * most SUMSQ_CHUNK elements, so no 64-bit bin of it can overflow (2^16
 * adds of < 2^48); each warp has bins of its own in shared memory, added
 * with integer atomics (exact, so the order of the adds changes nothing:
 * the determinism rule of cuda.h, which forbids float atomics, holds).
 * A second kernel adds the blocks' bins into 128-bit sums (high, low),
 * which the host folds into the fixed-point accumulator. */
#include "cuda.h"
#include "util/exact.h"

#define SUMSQ_CHUNK 65535
#define SUMSQ_THREADS 256
#define SUMSQ_WARPS (SUMSQ_THREADS / 32)

/* out[b][0 .. MPMD_EXACT_BINS): block b's sums of m^2 by exponent (256:
 * NaNs, 257: infinities) for elements [b CHUNK, (b + 1) CHUNK) of x. */
__global__ void sumsq_bins(const float *x, int64_t n, unsigned long long *out) {
    __shared__ unsigned long long bins[SUMSQ_WARPS][MPMD_EXACT_BINS];
    for (int i = threadIdx.x; i < SUMSQ_WARPS * MPMD_EXACT_BINS; i += blockDim.x)
        bins[i / MPMD_EXACT_BINS][i % MPMD_EXACT_BINS] = 0;
    __syncthreads();
    const int w = threadIdx.x / 32;
    const int64_t lo = (int64_t)blockIdx.x * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const unsigned u = __float_as_uint(x[i]);
        unsigned e = (u >> 23) & 255u, m = u & 0x7fffffu;
        if (e == 255u) {
            atomicAdd(&bins[w][m ? 256 : 257], 1ull);
            continue;
        }
        const unsigned h = e != 0u; /* the hidden bit; a subnormal has e = 1 without it */
        m |= h << 23;
        e += 1u - h;
        atomicAdd(&bins[w][e], (unsigned long long)m * m);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < MPMD_EXACT_BINS; e += blockDim.x) {
        unsigned long long s = 0; /* at most a chunk's adds: no overflow */
        for (int k = 0; k < SUMSQ_WARPS; k++)
            s += bins[k][e];
        out[(size_t)blockIdx.x * MPMD_EXACT_BINS + e] = s;
    }
}

/* sum[e] (high, low) += the blocks' bins e. */
__global__ void sumsq_fold(const unsigned long long *in, int blocks, unsigned long long *sum) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= MPMD_EXACT_BINS) return;
    unsigned long long hi = sum[2 * e], lo = sum[2 * e + 1];
    for (int b = 0; b < blocks; b++) {
        const unsigned long long v = in[(size_t)b * MPMD_EXACT_BINS + e];
        lo += v;
        hi += lo < v;
    }
    sum[2 * e] = hi, sum[2 * e + 1] = lo;
}

extern "C" int mpmd_cuda_sumsq(void *p, int n, const void *const *x, const int64_t *count, uint32_t *acc,
                               char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    int most = 1; /* blocks of the largest vector */
    for (int i = 0; i < n; i++) {
        const int64_t b = (count[i] + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
        if (b > most) most = (int)b;
    }
    /* the sums (2 words a bin), then one set of bins per block */
    const size_t words = 2 * (size_t)MPMD_EXACT_BINS + (size_t)most * MPMD_EXACT_BINS;
    cudaError_t e = cudaSuccess;
    if (d->sumsq_cap < words) {
        if (d->sumsq) cudaStreamSynchronize(d->stream), cudaFree(d->sumsq);
        d->sumsq = NULL, d->sumsq_cap = 0;
        if ((e = cudaMalloc((void **)&d->sumsq, words * sizeof *d->sumsq)) != cudaSuccess) goto fail;
        d->sumsq_cap = words;
    }
    {
        unsigned long long *sum = d->sumsq, *bins = d->sumsq + 2 * MPMD_EXACT_BINS;
        if ((e = cudaMemsetAsync(sum, 0, 2 * MPMD_EXACT_BINS * sizeof *sum, d->stream)) != cudaSuccess)
            goto fail;
        for (int i = 0; i < n; i++) {
            if (count[i] <= 0) continue;
            const int blocks = (int)((count[i] + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
            sumsq_bins<<<blocks, SUMSQ_THREADS, 0, d->stream>>>((const float *)x[i], count[i], bins);
            sumsq_fold<<<(MPMD_EXACT_BINS + 127) / 128, 128, 0, d->stream>>>(bins, blocks, sum);
            if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
        }
        uint64_t host[2 * MPMD_EXACT_BINS];
        if ((e = cudaMemcpyAsync(host, sum, sizeof host, cudaMemcpyDeviceToHost, d->stream)) != cudaSuccess ||
            (e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
            goto fail;
        mpmd_exact_add_bins(acc, host);
    }
    return 0;
fail:
    snprintf(err, len, "GPU %d: the sum of squares failed: %s", d->device, cudaGetErrorString(e));
    return 1;
}
