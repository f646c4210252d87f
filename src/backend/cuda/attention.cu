/* CUDA kernels of fused attention (src/ops/nn.c: attention, attention_grad).
 *
 * q, k, v and o are [B, T, H, D]: head h of position t of sequence b is the
 * D values at ((b T + t) H + h) D, so one head's positions are H D apart.
 * Nothing of size [T, T] is ever stored: the forward keeps a running max and
 * sum per query row (online softmax) and the backward recomputes the
 * probabilities from each row's log-sum-exp.
 *
 * Tensor-core path (bf16 and f16 operands of one dtype, D a multiple of 16
 * up to 64, rows 16-byte aligned), in the manner of FlashAttention-2:
 *   forward  a block takes 64 query rows (a warp each 16) and walks the keys
 *            in tiles of 32 (only those at or before its last row when
 *            causal): S = Q K^T on tensor cores (f32 accumulation), the
 *            row's max and exp-sum updated in f32, P held as the sum of two
 *            values of the operands' dtype (split2), O += P V on tensor cores
 *            into f32 rows that are rescaled as the max moves; O / sum
 *            rounded once on store.
 *   backward first each row's log-sum-exp (the forward's kernel, stopping
 *            after the statistics) and Di = sum(dO o) per row; then one
 *            kernel per key tile of 64 (a warp each 16 keys) walks the query
 *            tiles after it and accumulates dV += P^T dO and dK += dS^T Q in
 *            tensor-core accumulators, and one kernel per query tile of 64
 *            walks the key tiles before it and accumulates dQ += dS K, with
 *            dS = P (dP - Di), dP = dO V^T.
 * General path (f32, or any other D): one block per query row (forward,
 * dQ) or key row (dK, dV), scores in shared memory, in f32.
 *
 * Determinism: every output element is owned by one warp or block and its
 * sums run in a fixed order (warp shuffles in a fixed tree, tiles in
 * order); no atomics. Launch shapes depend only on the tensor shapes and on
 * the path, which depends on the dtype, D and alignment.
 */
#include "cuda.h"

extern "C" {
#include "ops/nn.h"
}

#include <math.h>
#include <mma.h>
#include <stdint.h>

using namespace nvcuda;

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* The shape of one launch. */
typedef struct att_dims {
    int B, T, H, D;
    int causal;
    float scale;
} att_dims;

static att_dims dims_of(const mpmd_kargs *a) {
    const mpmd_type *t = a->in_type[0];
    att_dims d;
    d.B = (int)t->dim[0], d.T = (int)t->dim[1], d.H = (int)t->dim[2], d.D = (int)t->dim[3];
    d.causal = mpmd_attention_causal(a->node);
    d.scale = mpmd_attention_scale(a->node);
    return d;
}

/* Element offset of (b, t, h, 0). */
__device__ __forceinline__ int64_t row_at(int b, int t, int h, int T, int H, int D) {
    return (((int64_t)b * T + t) * H + h) * D;
}

/* ==== tensor-core path ============================================================== */

enum { TC_Q = 64, TC_K = 32, TC_WARPS = 4, TC_THREADS = 128 };

/* rows [r0, r0 + n) of one head (b, h) of x into smem rows of ld elements
 * (zeros past T), with 16-byte accesses, by the whole block. */
template <typename T, int D>
__device__ __forceinline__ void load_rows(T *dst, int ld, const T *x, int b, int h, int r0, int n, int TT,
                                          int H) {
    const int chunks = D / 8;
    for (int c = threadIdx.x; c < n * chunks; c += blockDim.x) {
        int r = c / chunks, q = c % chunks;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < TT) v = *(const uint4 *)(x + row_at(b, r0 + r, h, TT, H, D) + 8 * q);
        *(uint4 *)(dst + r * ld + 8 * q) = v;
    }
}

/* rows [r0, r0 + 16) of a head into a warp's smem (ld elements), by the warp. */
template <typename T, int D>
__device__ __forceinline__ void warp_load_rows(T *dst, int ld, const T *x, int b, int h, int r0, int TT,
                                               int H) {
    const int lane = threadIdx.x & 31, chunks = D / 8;
    for (int c = lane; c < 16 * chunks; c += 32) {
        int r = c / chunks, q = c % chunks;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < TT) v = *(const uint4 *)(x + row_at(b, r0 + r, h, TT, H, D) + 8 * q);
        *(uint4 *)(dst + r * ld + 8 * q) = v;
    }
}

/* p as hi + lo, both of type T: hi = p rounded, lo = the rest rounded, so
 * hi + lo is p to about 2^-17 of it. The products that take probabilities
 * (P V, P^T dO) or their gradients (dS K, dS^T Q) run once on each part,
 * accumulating in f32: as if p had entered in f32, within that bound, so
 * the 16-bit result is the f32 computation's rounded once (to within a
 * rare neighbouring rounding) rather than one with p rounded first. */
template <typename T> __device__ __forceinline__ void split2(float p, T *hi, T *lo) {
    T h = from_f32<T>(p);
    *hi = h;
    *lo = from_f32<T>(p - to_f32(h));
}

template <typename T> using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_a_col = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major>;
template <typename T> using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows [r0, r0 + 16) of a head as a warp's A fragments (16 x D), staged
 * through `stage` (16 x (D + 8) elements of the warp's own shared memory). */
template <typename T, int D>
__device__ __forceinline__ void warp_frags(frag_a<T> (&f)[D / 16], T *stage, const T *x, int b, int h, int r0,
                                           int TT, int H) {
    warp_load_rows<T, D>(stage, D + 8, x, b, h, r0, TT, H);
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wmma::load_matrix_sync(f[kk], stage + kk * 16, D + 8);
    __syncwarp();
}

/* out [16, 32] = A tile^T: a warp's 16 rows (fragments) against 32 rows of
 * a tile in shared memory (leading dimension ld), f32, stored row-major
 * with leading dimension lds. */
template <typename T, int D>
__device__ __forceinline__ void rows_by_tile(const frag_a<T> (&a)[D / 16], const T *tile, int ld, float *out,
                                             int lds) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            frag_b_col<T> bf; /* tile^T: column n is tile row n */
            wmma::load_matrix_sync(bf, tile + (j * 16) * ld + kk * 16, ld);
            wmma::mma_sync(acc, a[kk], bf, acc);
        }
        wmma::store_matrix_sync(out + j * 16, acc, lds, wmma::mem_row_major);
    }
}

/* A warp's accumulators (16 rows x D) times mul, rounded once into rows
 * [r0, r0 + 16) of head (b, h) of out (those before T), through `stage`
 * (16 x 16 floats of the warp's own shared memory). */
template <typename T, int D>
__device__ __forceinline__ void write_rows(frag_c (&acc)[D / 16], float *stage, T *out, int b, int h, int r0,
                                           int TT, int H, float mul) {
    const int lane = threadIdx.x & 31;
    for (int dt = 0; dt < D / 16; dt++) {
        wmma::store_matrix_sync(stage, acc[dt], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int i = e / 16, c = e % 16, t = r0 + i;
            if (t < TT) out[row_at(b, t, h, TT, H, D) + dt * 16 + c] = from_f32<T>(stage[e] * mul);
        }
        __syncwarp();
    }
}

/* Forward (STATS = 0: o; STATS = 1: each row's log-sum-exp into lse, the
 * backward's first pass, which then stops before P V). Grid (ceil(T / 64),
 * B H), 128 threads. */
template <typename T, int D, int STATS>
__global__ void __launch_bounds__(TC_THREADS)
    att_fwd_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ o,
               float *__restrict__ lse, int TT, int H, int causal, float scale) {
    constexpr int LDK = D + 8, LDS = TC_K + 4, LDP = TC_K + 8, LDO = D + 4;
    __shared__ __align__(32) T ks[TC_K * LDK];
    __shared__ __align__(32) T vs[TC_K * LDK];
    __shared__ __align__(32) float s_w[TC_WARPS][16 * LDS];
    __shared__ __align__(32) T p_w[TC_WARPS][2][16 * LDP]; /* P as hi + lo */
    __shared__ __align__(32) float o_w[TC_WARPS][16 * LDO];
    __shared__ float m_w[TC_WARPS][16], l_w[TC_WARPS][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = blockIdx.x * TC_Q, r0 = q0 + 16 * warp;
    float *S = s_w[warp], *O = o_w[warp];
    T *P = p_w[warp][0], *PL = p_w[warp][1];
    /* this warp's 16 query rows as fragments (staged through its O rows) */
    frag_a<T> qa[D / 16];
    warp_frags<T, D>(qa, (T *)O, q, b, h, r0, TT, H); /* 16 x (D + 8) elements fit in 16 x (D + 4) floats */
    for (int c = lane; c < 16 * LDO; c += 32)
        O[c] = 0.0f;
    if (lane < 16) m_w[warp][lane] = -INFINITY, l_w[warp][lane] = 0.0f;
    __syncwarp();
    const int kend = causal ? min(TT, q0 + TC_Q) : TT;
    for (int kb = 0; kb < kend; kb += TC_K) {
        __syncthreads(); /* the last tile's K and V are no longer read */
        load_rows<T, D>(ks, LDK, k, b, h, kb, TC_K, TT, H);
        if (!STATS) load_rows<T, D>(vs, LDK, v, b, h, kb, TC_K, TT, H);
        __syncthreads();
        if (r0 >= TT || (causal && kb > r0 + 15)) continue; /* no row of this warp sees these keys */
        rows_by_tile<T, D>(qa, ks, LDK, S, LDS);            /* S [16, 32] = Q K^T */
        __syncwarp();
        /* online softmax: lanes i and i + 16 share row i, each with half the
         * tile's keys; the halves combine with one exchange (max, then a sum
         * that both lanes form as a + b, so they agree) */
        {
            const int i = lane & 15, half = lane >> 4, t = r0 + i, c0 = 16 * half;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const int key = kb + c0 + c;
                const bool ok = t < TT && key < TT && (!causal || key <= t);
                const float s = ok ? S[i * LDS + c0 + c] * scale : -INFINITY;
                S[i * LDS + c0 + c] = s;
                mx = fmaxf(mx, s);
            }
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 16));
            const float m_old = m_w[warp][i], m_new = fmaxf(m_old, mx);
            float part = 0.0f;
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const float s = S[i * LDS + c0 + c];
                const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
                if (!STATS) split2(p, &P[i * LDP + c0 + c], &PL[i * LDP + c0 + c]);
                part += p;
            }
            const float other = __shfl_xor_sync(FULL_MASK, part, 16);
            const float sum = half ? other + part : part + other;
            const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            if (!STATS && alpha != 1.0f) /* the max moved: rescale the row's sums */
                for (int c = half; c < D; c += 2)
                    O[i * LDO + c] *= alpha;
            __syncwarp();
            if (!half) l_w[warp][i] = l_w[warp][i] * alpha + sum, m_w[warp][i] = m_new;
            __syncwarp();
        }
        if constexpr (!STATS) {
            /* O [16, D] += P [16, 32] V [32, D] */
#pragma unroll
            for (int dt = 0; dt < D / 16; dt++) {
                frag_c acc;
                wmma::load_matrix_sync(acc, O + dt * 16, LDO, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < TC_K / 16; kk++) {
                    frag_a<T> pf, pl;
                    frag_b_row<T> vf;
                    wmma::load_matrix_sync(pf, P + kk * 16, LDP);
                    wmma::load_matrix_sync(pl, PL + kk * 16, LDP);
                    wmma::load_matrix_sync(vf, vs + (kk * 16) * LDK + dt * 16, LDK);
                    wmma::mma_sync(acc, pf, vf, acc);
                    wmma::mma_sync(acc, pl, vf, acc);
                }
                wmma::store_matrix_sync(O + dt * 16, acc, LDO, wmma::mem_row_major);
            }
            __syncwarp();
        }
    }
    __syncwarp();
    for (int i = 0; i < 16; i++) {
        const int t = r0 + i;
        if (t >= TT) break;
        if (STATS) {
            if (lane == 0) lse[(int64_t)bh * TT + t] = m_w[warp][i] + logf(l_w[warp][i]);
            continue;
        }
        const float inv = 1.0f / l_w[warp][i];
        T *dst = o + row_at(b, t, h, TT, H, D);
        for (int c = lane; c < D; c += 32)
            dst[c] = from_f32<T>(O[i * LDO + c] * inv);
    }
}

/* dK and dV of 64 keys (a warp each 16), over the query tiles of 32 at or
 * after them. Grid (ceil(T / 64), B H), 128 threads. */
template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS)
    att_bwd_dkdv_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                    const T *__restrict__ go, const float *__restrict__ lse, const float *__restrict__ di,
                    T *__restrict__ dk, T *__restrict__ dv, int TT, int H, int causal, float scale) {
    constexpr int BQ = 32, LDQ = D + 8, LDS = BQ + 4, LDP = BQ + 8;
    __shared__ __align__(32) T qs[BQ * LDQ];
    __shared__ __align__(32) T gs[BQ * LDQ];
    __shared__ float lse_s[BQ], di_s[BQ];
    __shared__ __align__(32) float st_w[TC_WARPS][2][16 * LDS]; /* S^T and dP^T [16 keys, 32 queries] */
    __shared__ __align__(32) T pt_w[TC_WARPS][4][16 * LDP];     /* P^T and dS^T, each as hi + lo */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int k0 = blockIdx.x * TC_Q, r0 = k0 + 16 * warp; /* this warp's keys */
    float *ST = st_w[warp][0], *DPT = st_w[warp][1];
    T *PT = pt_w[warp][0], *DST = pt_w[warp][1], *PTL = pt_w[warp][2], *DSTL = pt_w[warp][3];
    frag_a<T> kf[D / 16], vf[D / 16];
    T *stage = (T *)st_w[warp]; /* 16 x (D + 8) elements fit in 2 x 16 x 36 floats */
    warp_frags<T, D>(kf, stage, k, b, h, r0, TT, H);
    warp_frags<T, D>(vf, stage, v, b, h, r0, TT, H);
    frag_c dka[D / 16], dva[D / 16];
#pragma unroll
    for (int dt = 0; dt < D / 16; dt++)
        wmma::fill_fragment(dka[dt], 0.0f), wmma::fill_fragment(dva[dt], 0.0f);
    for (int qb = causal ? k0 : 0; qb < TT; qb += BQ) {
        __syncthreads();
        load_rows<T, D>(qs, LDQ, q, b, h, qb, BQ, TT, H);
        load_rows<T, D>(gs, LDQ, go, b, h, qb, BQ, TT, H);
        if (threadIdx.x < BQ) {
            int t = qb + threadIdx.x;
            lse_s[threadIdx.x] = t < TT ? lse[(int64_t)bh * TT + t] : 0.0f;
            di_s[threadIdx.x] = t < TT ? di[(int64_t)bh * TT + t] : 0.0f;
        }
        __syncthreads();
        if (r0 >= TT || (causal && qb + BQ - 1 < r0))
            continue;                              /* every query of the tile is before these keys */
        rows_by_tile<T, D>(kf, qs, LDQ, ST, LDS);  /* S^T [16, 32] = K Q^T */
        rows_by_tile<T, D>(vf, gs, LDQ, DPT, LDS); /* dP^T = V dO^T */
        __syncwarp();
        /* P^T and dS^T: lane = query within the tile */
        for (int i = 0; i < 16; i++) {
            const int key = r0 + i, t = qb + lane;
            const bool ok = key < TT && t < TT && (!causal || key <= t);
            const float p = ok ? expf(ST[i * LDS + lane] * scale - lse_s[lane]) : 0.0f;
            const float ds = p * (DPT[i * LDS + lane] - di_s[lane]);
            split2(p, &PT[i * LDP + lane], &PTL[i * LDP + lane]);
            split2(ds, &DST[i * LDP + lane], &DSTL[i * LDP + lane]);
        }
        __syncwarp();
        /* dV += P^T dO, dK += dS^T Q */
#pragma unroll
        for (int dt = 0; dt < D / 16; dt++) {
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
                frag_a<T> pa, sa;
                frag_b_row<T> gb, qbf;
                wmma::load_matrix_sync(gb, gs + (kk * 16) * LDQ + dt * 16, LDQ);
                wmma::load_matrix_sync(qbf, qs + (kk * 16) * LDQ + dt * 16, LDQ);
                wmma::load_matrix_sync(pa, PT + kk * 16, LDP);
                wmma::load_matrix_sync(sa, DST + kk * 16, LDP);
                wmma::mma_sync(dva[dt], pa, gb, dva[dt]);
                wmma::mma_sync(dka[dt], sa, qbf, dka[dt]);
                wmma::load_matrix_sync(pa, PTL + kk * 16, LDP);
                wmma::load_matrix_sync(sa, DSTL + kk * 16, LDP);
                wmma::mma_sync(dva[dt], pa, gb, dva[dt]);
                wmma::mma_sync(dka[dt], sa, qbf, dka[dt]);
            }
        }
        __syncwarp();
    }
    /* round once: dK scaled, dV as summed */
    write_rows<T, D>(dka, st_w[warp][0], dk, b, h, r0, TT, H, scale);
    write_rows<T, D>(dva, st_w[warp][0], dv, b, h, r0, TT, H, 1.0f);
}

/* dQ of 64 query rows (a warp each 16), over the key tiles of 32 at or
 * before them. Grid (ceil(T / 64), B H), 128 threads. */
template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS)
    att_bwd_dq_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                  const T *__restrict__ go, const float *__restrict__ lse, const float *__restrict__ di,
                  T *__restrict__ dq, int TT, int H, int causal, float scale) {
    constexpr int LDK = D + 8, LDS = TC_K + 4, LDP = TC_K + 8;
    __shared__ __align__(32) T ks[TC_K * LDK];
    __shared__ __align__(32) T vs[TC_K * LDK];
    __shared__ __align__(32) float s_w[TC_WARPS][2][16 * LDS]; /* S and dP [16 queries, 32 keys] */
    __shared__ __align__(32) T ds_w[TC_WARPS][2][16 * LDP];    /* dS as hi + lo */
    __shared__ float lse_w[TC_WARPS][16], di_w[TC_WARPS][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = blockIdx.x * TC_Q, r0 = q0 + 16 * warp;
    float *S = s_w[warp][0], *DP = s_w[warp][1];
    T *DS = ds_w[warp][0], *DSL = ds_w[warp][1];
    frag_a<T> qa[D / 16], ga[D / 16];
    warp_frags<T, D>(qa, (T *)s_w[warp], q, b, h, r0, TT, H);
    warp_frags<T, D>(ga, (T *)s_w[warp], go, b, h, r0, TT, H);
    if (lane < 16) {
        int t = r0 + lane;
        lse_w[warp][lane] = t < TT ? lse[(int64_t)bh * TT + t] : 0.0f;
        di_w[warp][lane] = t < TT ? di[(int64_t)bh * TT + t] : 0.0f;
    }
    __syncwarp();
    frag_c dqa[D / 16];
#pragma unroll
    for (int dt = 0; dt < D / 16; dt++)
        wmma::fill_fragment(dqa[dt], 0.0f);
    const int kend = causal ? min(TT, q0 + TC_Q) : TT;
    for (int kb = 0; kb < kend; kb += TC_K) {
        __syncthreads();
        load_rows<T, D>(ks, LDK, k, b, h, kb, TC_K, TT, H);
        load_rows<T, D>(vs, LDK, v, b, h, kb, TC_K, TT, H);
        __syncthreads();
        if (r0 >= TT || (causal && kb > r0 + 15)) continue;
        rows_by_tile<T, D>(qa, ks, LDK, S, LDS);  /* S [16, 32] = Q K^T */
        rows_by_tile<T, D>(ga, vs, LDK, DP, LDS); /* dP = dO V^T */
        __syncwarp();
        for (int i = 0; i < 16; i++) {
            const int t = r0 + i, key = kb + lane;
            const bool ok = t < TT && key < TT && (!causal || key <= t);
            const float p = ok ? expf(S[i * LDS + lane] * scale - lse_w[warp][i]) : 0.0f;
            split2(p * (DP[i * LDS + lane] - di_w[warp][i]), &DS[i * LDP + lane], &DSL[i * LDP + lane]);
        }
        __syncwarp();
        /* dQ [16, D] += dS [16, 32] K [32, D] */
#pragma unroll
        for (int dt = 0; dt < D / 16; dt++) {
#pragma unroll
            for (int kk = 0; kk < TC_K / 16; kk++) {
                frag_a<T> sa, sl;
                frag_b_row<T> kb_;
                wmma::load_matrix_sync(sa, DS + kk * 16, LDP);
                wmma::load_matrix_sync(sl, DSL + kk * 16, LDP);
                wmma::load_matrix_sync(kb_, ks + (kk * 16) * LDK + dt * 16, LDK);
                wmma::mma_sync(dqa[dt], sa, kb_, dqa[dt]);
                wmma::mma_sync(dqa[dt], sl, kb_, dqa[dt]);
            }
        }
        __syncwarp();
    }
    write_rows<T, D>(dqa, s_w[warp][0], dq, b, h, r0, TT, H, scale);
}

/* ==== general path ================================================================== */

enum { GEN_THREADS = 128, GEN_MAX_T = 8192 };

/* Block-wide max or sum of v in a fixed tree (warps, then the warp sums in
 * order); red holds GEN_THREADS / 32 floats. Every thread gets the result. */
__device__ float block_reduce(float v, float *red, int is_max) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < GEN_THREADS / 32; w++)
        r = is_max ? fmaxf(r, red[w]) : r + red[w];
    return r;
}

/* scale * q_row . k_row in f32, in element order. */
__device__ __forceinline__ float dot_rows(const void *a, int da, int64_t ia, const void *b, int db,
                                          int64_t ib, int D) {
    float s = 0.0f;
    for (int c = 0; c < D; c++)
        s += mpmd_cuda_ld(a, da, ia + c) * mpmd_cuda_ld(b, db, ib + c);
    return s;
}

/* Forward, or (lse != NULL) each row's log-sum-exp and Di = sum(go o): one
 * block per query row. Grid (T, B H); shared memory T + 4 floats (the
 * compiler may read the scores in wider words than one float). */
__global__ void att_fwd_rows(const void *q, const void *k, const void *v, void *o, int dt, const void *go,
                             float *lse, float *di, int TT, int H, int D, int causal, float scale) {
    extern __shared__ float sc[];
    __shared__ float red[GEN_THREADS / 32];
    const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
    const int n = causal ? t + 1 : TT;
    const int64_t qi = row_at(b, t, h, TT, H, D);
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float s = scale * dot_rows(q, dt, qi, k, dt, row_at(b, j, h, TT, H, D), D);
        sc[j] = s;
        m = fmaxf(m, s);
    }
    m = block_reduce(m, red, 1);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float p = expf(sc[j] - m);
        sc[j] = p;
        sum += p;
    }
    sum = block_reduce(sum, red, 0);
    if (lse) {
        float d = 0.0f;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            d += mpmd_cuda_ld(go, dt, qi + c) * mpmd_cuda_ld(o, dt, qi + c);
        d = block_reduce(d, red, 0);
        if (threadIdx.x == 0) lse[(int64_t)bh * TT + t] = m + logf(sum), di[(int64_t)bh * TT + t] = d;
        return;
    }
    __syncthreads();
    const float inv = 1.0f / sum;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++)
            acc += sc[j] * mpmd_cuda_ld(v, dt, row_at(b, j, h, TT, H, D) + c);
        mpmd_cuda_st(o, dt, qi + c, acc * inv);
    }
}

/* dQ of one query row. Grid (T, B H); shared memory T floats. */
__global__ void att_dq_rows(const void *q, const void *k, const void *v, const void *go, int dt,
                            const float *lse, const float *di, void *dq, int TT, int H, int D, int causal,
                            float scale) {
    extern __shared__ float sc[];
    const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
    const int n = causal ? t + 1 : TT;
    const int64_t qi = row_at(b, t, h, TT, H, D);
    const float l = lse[(int64_t)bh * TT + t], d = di[(int64_t)bh * TT + t];
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        int64_t kj = row_at(b, j, h, TT, H, D);
        float p = expf(scale * dot_rows(q, dt, qi, k, dt, kj, D) - l);
        sc[j] = p * (dot_rows(go, dt, qi, v, dt, kj, D) - d);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++)
            acc += sc[j] * mpmd_cuda_ld(k, dt, row_at(b, j, h, TT, H, D) + c);
        mpmd_cuda_st(dq, dt, qi + c, acc * scale);
    }
}

/* dK and dV of one key row, over the queries in chunks of GEN_THREADS.
 * Grid (T, B H). */
__global__ void att_dkdv_rows(const void *q, const void *k, const void *v, const void *go, int dt,
                              const float *lse, const float *di, void *dk, void *dv, int TT, int H, int D,
                              int causal, float scale) {
    __shared__ float ps[GEN_THREADS], dss[GEN_THREADS];
    const int j = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t kj = row_at(b, j, h, TT, H, D);
    /* each thread keeps the sums of columns c = threadIdx.x + GEN_THREADS i, in query order */
    float ak[4] = {0, 0, 0, 0}, av[4] = {0, 0, 0, 0};
    const int per = (D + GEN_THREADS - 1) / GEN_THREADS; /* at most 4: D <= 512 on this path */
    for (int i0 = causal ? j : 0; i0 < TT; i0 += GEN_THREADS) {
        const int i = i0 + threadIdx.x;
        float p = 0.0f, ds = 0.0f;
        if (i < TT) {
            int64_t qi = row_at(b, i, h, TT, H, D);
            p = expf(scale * dot_rows(q, dt, qi, k, dt, kj, D) - lse[(int64_t)bh * TT + i]);
            ds = p * (dot_rows(go, dt, qi, v, dt, kj, D) - di[(int64_t)bh * TT + i]);
        }
        __syncthreads();
        ps[threadIdx.x] = p, dss[threadIdx.x] = ds;
        __syncthreads();
        const int m = min(GEN_THREADS, TT - i0);
        for (int r = 0; r < per; r++) {
            int c = threadIdx.x + GEN_THREADS * r;
            if (c >= D) break;
            for (int x = 0; x < m; x++) {
                int64_t qi = row_at(b, i0 + x, h, TT, H, D);
                av[r] += ps[x] * mpmd_cuda_ld(go, dt, qi + c);
                ak[r] += dss[x] * mpmd_cuda_ld(q, dt, qi + c);
            }
        }
    }
    for (int r = 0; r < per; r++) {
        int c = threadIdx.x + GEN_THREADS * r;
        if (c >= D) break;
        mpmd_cuda_st(dk, dt, kj + c, ak[r] * scale);
        mpmd_cuda_st(dv, dt, kj + c, av[r]);
    }
}

/* ==== launches ====================================================================== */

/* The tensor-core path applies: one 16-bit dtype for every operand, D in
 * {16, 32, 48, 64}, and every buffer 16-byte aligned (rows are D elements,
 * a multiple of 16 bytes, apart). */
static int tensor_cores(const mpmd_kargs *a, const att_dims *d) {
    mpmd_dtype dt = a->node->type.dtype;
    if ((dt != MPMD_BF16 && dt != MPMD_F16) || d->D % 16 || d->D > 64) return 0;
    uintptr_t al = (uintptr_t)a->out;
    for (int j = 0; j < a->node->n_in; j++) {
        if (a->in_type[j]->dtype != dt) return 0;
        al |= (uintptr_t)a->in[j];
    }
    return (al & 15) == 0;
}

static int general_fits(const mpmd_kargs *a, const att_dims *d) {
    if (d->T <= GEN_MAX_T && d->D <= 4 * GEN_THREADS) return 1;
    snprintf(a->err, a->err_len,
             "%s: the GPU kernel for %s operands with head size %d takes sequences of up to %d positions "
             "and head sizes up to %d (the tensor-core kernel, for bf16 or f16 with head sizes 16, 32, 48 "
             "or 64, has no such limit); got T = %d",
             a->node->op->name, mpmd_dtype_name(a->node->type.dtype), d->D, GEN_MAX_T, 4 * GEN_THREADS, d->T);
    return 0;
}

static int empty(const att_dims *d) { return d->B == 0 || d->T == 0 || d->H == 0 || d->D == 0; }

/* The grid's second axis runs over (b, h). */
static int heads_fit(const mpmd_kargs *a, const att_dims *d) {
    if ((int64_t)d->B * d->H <= 65535) return 1;
    snprintf(a->err, a->err_len, "%s: B x H = %lld sequences x heads; the GPU kernels take at most 65535",
             a->node->op->name, (long long)d->B * d->H);
    return 0;
}

template <typename T, int D>
static void fwd_tc(const mpmd_kargs *a, const att_dims *d, float *lse, int stats, cudaStream_t st) {
    dim3 grid((unsigned)((d->T + TC_Q - 1) / TC_Q), (unsigned)(d->B * d->H));
    const T *q = (const T *)a->in[0], *k = (const T *)a->in[1], *v = (const T *)a->in[2];
    if (stats)
        att_fwd_tc<T, D, 1><<<grid, TC_THREADS, 0, st>>>(q, k, v, NULL, lse, d->T, d->H, d->causal, d->scale);
    else
        att_fwd_tc<T, D, 0>
            <<<grid, TC_THREADS, 0, st>>>(q, k, v, (T *)a->out, NULL, d->T, d->H, d->causal, d->scale);
}

template <typename T, int D>
static void bwd_tc(const mpmd_kargs *a, const att_dims *d, const float *lse, const float *di,
                   cudaStream_t st) {
    dim3 grid((unsigned)((d->T + TC_Q - 1) / TC_Q), (unsigned)(d->B * d->H));
    const T *q = (const T *)a->in[0], *k = (const T *)a->in[1], *v = (const T *)a->in[2],
            *go = (const T *)a->in[4];
    const int64_t plane = (int64_t)d->B * d->T * d->H * d->D;
    T *dq = (T *)a->out, *dk = dq + plane, *dv = dq + 2 * plane;
    att_bwd_dkdv_tc<T, D>
        <<<grid, TC_THREADS, 0, st>>>(q, k, v, go, lse, di, dk, dv, d->T, d->H, d->causal, d->scale);
    att_bwd_dq_tc<T, D>
        <<<grid, TC_THREADS, 0, st>>>(q, k, v, go, lse, di, dq, d->T, d->H, d->causal, d->scale);
}

/* Di = sum(go o) per row (the tensor-core path's; the general path folds it
 * into its statistics kernel): a warp per row. */
template <typename T>
__global__ void att_di(const T *__restrict__ o, const T *__restrict__ go, float *__restrict__ di, int B,
                       int TT, int H, int D) {
    const int64_t rows = (int64_t)B * H * TT;
    const int lane = threadIdx.x & 31;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int bh = (int)(r / TT), t = (int)(r % TT), b = bh / H, h = bh % H;
        const int64_t at = row_at(b, t, h, TT, H, D);
        float s = 0.0f;
        for (int c = lane; c < D; c += 32)
            s += to_f32(o[at + c]) * to_f32(go[at + c]);
        s = warp_sum(s);
        if (lane == 0) di[r] = s;
    }
}

template <typename T>
static int dispatch_fwd(const mpmd_kargs *a, const att_dims *d, float *lse, int stats, cudaStream_t st) {
    switch (d->D) {
    case 16: fwd_tc<T, 16>(a, d, lse, stats, st); return 0;
    case 32: fwd_tc<T, 32>(a, d, lse, stats, st); return 0;
    case 48: fwd_tc<T, 48>(a, d, lse, stats, st); return 0;
    case 64: fwd_tc<T, 64>(a, d, lse, stats, st); return 0;
    }
    return 1;
}

template <typename T>
static int dispatch_bwd(const mpmd_kargs *a, const att_dims *d, const float *lse, const float *di,
                        cudaStream_t st) {
    switch (d->D) {
    case 16: bwd_tc<T, 16>(a, d, lse, di, st); return 0;
    case 32: bwd_tc<T, 32>(a, d, lse, di, st); return 0;
    case 48: bwd_tc<T, 48>(a, d, lse, di, st); return 0;
    case 64: bwd_tc<T, 64>(a, d, lse, di, st); return 0;
    }
    return 1;
}

static int k_attention(const mpmd_kargs *a) {
    att_dims d = dims_of(a);
    if (empty(&d)) return 0;
    if (!heads_fit(a, &d)) return 1;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    if (tensor_cores(a, &d)) {
        int bad = a->node->type.dtype == MPMD_BF16 ? dispatch_fwd<__nv_bfloat16>(a, &d, NULL, 0, st)
                                                   : dispatch_fwd<__half>(a, &d, NULL, 0, st);
        if (bad) return 1;
    } else {
        if (!general_fits(a, &d)) return 1;
        att_fwd_rows<<<dim3((unsigned)d.T, (unsigned)(d.B * d.H)), GEN_THREADS,
                       (size_t)(d.T + 4) * sizeof(float), st>>>(a->in[0], a->in[1], a->in[2], a->out,
                                                                (int)a->node->type.dtype, NULL, NULL, NULL,
                                                                d.T, d.H, d.D, d.causal, d.scale);
    }
    return mpmd_cuda_launched(a, "attention");
}

/* The backward's scratch: each row's log-sum-exp and Di, f32. */
static size_t scratch_attention_grad(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *t = &g->nodes[n->in[0]].type;
    size_t rows = (size_t)(t->dim[0] * t->dim[1] * t->dim[2]);
    return 2 * ((rows * sizeof(float) + 255) / 256 * 256);
}

static int k_attention_grad(const mpmd_kargs *a) {
    att_dims d = dims_of(a);
    if (empty(&d)) return 0;
    if (!heads_fit(a, &d)) return 1;
    if (!a->scratch) {
        snprintf(a->err, a->err_len, "attention_grad: the executor gave no scratch buffer");
        return 1;
    }
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const size_t rows = (size_t)d.B * d.T * d.H;
    float *lse = (float *)a->scratch, *di = lse + (rows * sizeof(float) + 255) / 256 * 256 / sizeof(float);
    if (tensor_cores(a, &d)) {
        const int bf = a->node->type.dtype == MPMD_BF16;
        int bad =
            bf ? dispatch_fwd<__nv_bfloat16>(a, &d, lse, 1, st) : dispatch_fwd<__half>(a, &d, lse, 1, st);
        if (bad) return 1;
        unsigned blocks = mpmd_cuda_blocks((int64_t)rows * 32, 256);
        if (blocks > 65535u * 8) blocks = 65535u * 8;
        if (bf)
            att_di<__nv_bfloat16><<<blocks, 256, 0, st>>>(
                (const __nv_bfloat16 *)a->in[3], (const __nv_bfloat16 *)a->in[4], di, d.B, d.T, d.H, d.D);
        else
            att_di<__half><<<blocks, 256, 0, st>>>((const __half *)a->in[3], (const __half *)a->in[4], di,
                                                   d.B, d.T, d.H, d.D);
        bad = bf ? dispatch_bwd<__nv_bfloat16>(a, &d, lse, di, st) : dispatch_bwd<__half>(a, &d, lse, di, st);
        if (bad) return 1;
    } else {
        if (!general_fits(a, &d)) return 1;
        /* operands of different dtypes read each at its own: the general
         * kernels take one dtype for all, so mixed ones are not expected */
        for (int j = 1; j < a->node->n_in; j++)
            if (a->in_type[j]->dtype != a->in_type[0]->dtype) {
                snprintf(a->err, a->err_len, "attention_grad: operands of different dtypes (%s and %s)",
                         mpmd_dtype_name(a->in_type[0]->dtype), mpmd_dtype_name(a->in_type[j]->dtype));
                return 1;
            }
        const int dt = (int)a->node->type.dtype;
        const dim3 grid((unsigned)d.T, (unsigned)(d.B * d.H));
        const int64_t plane = (int64_t)d.B * d.T * d.H * d.D;
        char *out = (char *)a->out;
        const size_t es = mpmd_dtype_size(a->node->type.dtype);
        att_fwd_rows<<<grid, GEN_THREADS, (size_t)(d.T + 4) * sizeof(float), st>>>(
            a->in[0], a->in[1], a->in[2], a->in[3], dt, a->in[4], lse, di, d.T, d.H, d.D, d.causal, d.scale);
        att_dq_rows<<<grid, GEN_THREADS, (size_t)(d.T + 4) * sizeof(float), st>>>(
            a->in[0], a->in[1], a->in[2], a->in[4], dt, lse, di, out, d.T, d.H, d.D, d.causal, d.scale);
        att_dkdv_rows<<<grid, GEN_THREADS, 0, st>>>(a->in[0], a->in[1], a->in[2], a->in[4], dt, lse, di,
                                                    out + (size_t)plane * es, out + 2 * (size_t)plane * es,
                                                    d.T, d.H, d.D, d.causal, d.scale);
    }
    return mpmd_cuda_launched(a, "attention_grad");
}

#define F16S (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_attention_kernels[] = {
    {&mpmd_op_attention, k_attention, NULL, F16S},
    {&mpmd_op_attention_grad, k_attention_grad, scratch_attention_grad, F16S},
    {NULL, NULL, NULL, 0},
};
