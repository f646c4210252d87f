/* cpu.h - the CPU backend's kernel tables, threading and the deterministic
 * numeric helpers every CPU kernel uses (included only by src/backend/cpu/
 * and by tests and benchmarks of the CPU kernels themselves).
 *
 * A kernel (backend.h) computes one node's output from its inputs' buffers.
 * Each family of ops (src/backend/cpu/<family>.c) exports a table of entries
 * keyed by the op descriptor's address; cpu_backend.c lists the tables and
 * fills the backend interface.
 *
 * Determinism rule: a kernel must give the same bits for any thread count.
 * Split work over output elements (rows, columns, blocks) so each output is
 * computed by one thread, and keep every reduction's order fixed (use
 * mpmd_sum_f32 / mpmd_dot_f32, whose order does not depend on threads).
 * Every matrix product goes through mpmd_sgemm (OpenBLAS), one thread per call.
 * Kernels run their parallel parts on the rank's pool (mpmd_cpu_parallel,
 * mpmd_cpu_for), never in OpenMP parallel regions: OpenMP's idle workers
 * spin unless the program's environment says otherwise before it starts.
 */
#ifndef MPMD_CPU_H
#define MPMD_CPU_H

#include "backend/backend.h"
#include "util/pool.h"

#include <stdint.h>
#include <string.h>

/* Kernel tables, each ended by an entry with op == NULL. */
extern const mpmd_kernel mpmd_cpu_core_kernels[];
extern const mpmd_kernel mpmd_cpu_elementwise_kernels[];
extern const mpmd_kernel mpmd_cpu_reduce_kernels[];
extern const mpmd_kernel mpmd_cpu_nn_kernels[];
extern const mpmd_kernel mpmd_cpu_optim_kernels[];
extern const mpmd_kernel mpmd_cpu_attention_kernels[];
/* All of the CPU's tables, NULL-terminated: what mpmd_cpu_find searches
 * (and the tests' coverage checks walk). */
extern const mpmd_kernel *const mpmd_cpu_kernel_tables[];

/* The entry for an op, or NULL if the CPU backend has no kernel for it. */
const mpmd_kernel *mpmd_cpu_find(const mpmd_op_desc *op);

/* n 16-bit floats (bf16, f16) to f32 and back (nearest even), on up to
 * nthreads threads of dev's pool. */
void mpmd_cpu_widen(void *dev, int nthreads, mpmd_dtype d, const void *src, float *dst, int64_t n);
void mpmd_cpu_narrow(void *dev, int nthreads, mpmd_dtype d, const float *src, void *dst, int64_t n);

/* The CPU's loop fold and replica combine (host memory, f32). */
void mpmd_cpu_fold(const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x, int mb);
void mpmd_cpu_combine(const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas, float *out,
                      int64_t count);

/* ---- threading ---------------------------------------------------------- */

/* Each rank's instance of the CPU backend owns a pool of its kernel threads
 * (src/util/pool.h): the rank's own thread and threads_per_rank - 1
 * workers that sleep when the rank has nothing to compute. */

/* fn(ctx, t, nt) for every t in [0, nt), on the pool of dev (the kernel's
 * a->dev; NULL runs every t on the caller in turn). */
void mpmd_cpu_parallel(void *dev, int nt, mpmd_work_fn fn, void *ctx);

/* fn(ctx, lo, hi) for each of nt contiguous, balanced blocks [lo, hi) of
 * [0, n) that is not empty (mpmd_split's blocks), on the pool of dev. */
typedef void (*mpmd_range_fn)(void *ctx, int64_t lo, int64_t hi);
void mpmd_cpu_for(void *dev, int nt, int64_t n, mpmd_range_fn fn, void *ctx);

/* Rows [lo, hi) of n for thread t of nt: contiguous, balanced blocks. */
static inline void mpmd_split(int64_t n, int t, int nt, int64_t *lo, int64_t *hi) {
    int64_t q = n / nt, r = n % nt;
    *lo = t * q + (t < r ? t : r);
    *hi = *lo + q + (t < r ? 1 : 0);
}

/* Threads worth using for `work` elementary operations: one per
 * MPMD_THREAD_GRAIN of them, at most nthreads (at least 1). A worker that
 * joins a run costs a wake-up when it was asleep, so a small op on a
 * many-core rank asks for a few threads, not all of them. The result never
 * changes what a kernel computes, only how fast. */
#ifndef MPMD_THREAD_GRAIN
#define MPMD_THREAD_GRAIN 32768
#endif
static inline int mpmd_threads_for(int nthreads, int64_t work) {
    int64_t t = work / MPMD_THREAD_GRAIN;
    return t < 1 || nthreads < 1 ? 1 : t < nthreads ? (int)t : nthreads;
}

/* C = alpha op(A) op(B) + beta C, row-major, through OpenBLAS with
 * `nthreads` threads for this call only. OpenBLAS's result depends on its
 * thread count: deterministic kernels pass 1 and split the product into a
 * fixed tile grid themselves (as the matmul kernel does). */
void mpmd_sgemm(int nthreads, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* ---- deterministic reductions -------------------------------------------- */

/* Sum and dot product with eight interleaved partial sums combined in a
 * fixed order: vectorisable without -ffast-math, and the same bits on every
 * thread count (the order depends only on n). */
float mpmd_sum_f32(const float *x, int64_t n);
float mpmd_dot_f32(const float *x, const float *y, int64_t n);
/* max over n >= 1 elements */
float mpmd_max_f32(const float *x, int64_t n);

/* ---- vectorisable elementwise math ---------------------------------------- */

/* The hot loops (exp-based elementwise ops, softmax and cross-entropy rows,
 * the fixed-order sums, AdamW) are built three times, for AVX-512, for AVX2 and
 * for the build's baseline (x86-64-v2, 4-wide SSE), and the loader picks
 * the widest the CPU runs (function multiversioning: target_clones, an
 * ifunc: gcc and clang on x86-64 with glibc; MPMD_NO_VEC_CLONES builds the
 * baseline alone, as tests/vec_widths.cmake does to compare the widths).
 * Only static functions are cloned (clang makes a clone's resolver only in
 * its own file). No clone uses fused multiply-add (the build sets
 * -ffp-contract=off), and every operation in them is an IEEE add,
 * multiply, divide, compare or bit operation per lane: all give the same
 * bits; only the vector width differs. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__AVX2__) &&                  \
    !defined(MPMD_NO_VEC_CLONES)
#define MPMD_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MPMD_VEC_CLONES
#endif

/* Bit casts and a branch-free select: the vectoriser will not if-convert
 * floating-point code behind a branch (it "could trap"), so the clamps below
 * select on bits instead. */
static inline uint32_t mpmd_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float mpmd_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline float mpmd_select_f32(int c, float a, float b) { /* c ? a : b */
    uint32_t m = 0u - (uint32_t)c;
    return mpmd_u2f((mpmd_f2u(a) & m) | (mpmd_f2u(b) & ~m));
}

/* exp(x) in a form gcc vectorises (no libm call): x = n ln2 + r with
 * |r| <= ln2/2, e^r by the Cephes minimax polynomial, times 2^n built in the
 * exponent bits; n is read from the bits of x log2(e) + 1.5 * 2^23, whose low
 * mantissa bits hold round(x log2(e)). Within 1 ulp of e^x on [-87, 88]
 * (tests/test_vmath.c: 0.96 ulp at worst over 4.4 million floats of that
 * range, spread evenly over their bit patterns). 0 below -87 (e^x < 1.7e-38) and
 * for -inf, saturating above 88 (the kernels call it on x - max <= 0 only),
 * NaN stays NaN. A pure function of x: the same bits on every thread count
 * and vector width (no fused multiply-add: C11 mode keeps fp-contract off). */
static inline float mpmd_exp_f32(float x) {
    const float lo = -87.0f, hi = 88.0f;
    float xc = mpmd_select_f32(lo > x, lo, x); /* NaN passes through */
    xc = mpmd_select_f32(xc > hi, hi, xc);
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f; /* ln2 split in two for an exact n ln2 */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * (r * r) + r) + 1.0f;
    uint32_t keep = 0u - (uint32_t)(x >= lo); /* 2^n, or 0 below the range */
    return p * mpmd_u2f(((mpmd_f2u(t) - 0x4B400000u + 127u) << 23) & keep);
}

/* 1 / (1 + e^-z), the logistic function, on mpmd_exp_f32: exactly 0 where
 * e^-z is past the exp's range (z < -88, the value below 6e-39, the limit),
 * 1 for z > 87 (e^-z rounds away against 1); NaN stays NaN. */
static inline float mpmd_sigmoid_f32(float z) {
    float s = 1.0f / (1.0f + mpmd_exp_f32(-z));
    return mpmd_select_f32(z < -88.0f, 0.0f, s);
}

/* The model axis' collectives and the ops of the rank's own values on host
 * memory (collective.c; mpmd_backend.model_combine and model_local). */
int mpmd_cpu_model_combine(void *dev, const mpmd_graph *g, int node, int m, int M, const void *const *ins,
                           void *out, char *err, size_t len);
int mpmd_cpu_model_local(void *dev, const mpmd_graph *g, int node, int m, void *const *in, void *out,
                         char *err, size_t len);

#endif
