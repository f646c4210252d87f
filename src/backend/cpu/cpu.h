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
 */
#ifndef MPMD_CPU_H
#define MPMD_CPU_H

#include "backend/backend.h"

#include <stdint.h>

/* Kernel tables, each ended by an entry with op == NULL. */
extern const mpmd_kernel mpmd_cpu_core_kernels[];
extern const mpmd_kernel mpmd_cpu_elementwise_kernels[];
extern const mpmd_kernel mpmd_cpu_reduce_kernels[];
extern const mpmd_kernel mpmd_cpu_nn_kernels[];
extern const mpmd_kernel mpmd_cpu_optim_kernels[];

/* The entry for an op, or NULL if the CPU backend has no kernel for it. */
const mpmd_kernel *mpmd_cpu_find(const mpmd_op_desc *op);

/* n 16-bit floats (bf16, f16) to f32 and back (nearest even), on up to
 * nthreads threads. */
void mpmd_cpu_widen(mpmd_dtype d, const void *src, float *dst, int64_t n, int nthreads);
void mpmd_cpu_narrow(mpmd_dtype d, const float *src, void *dst, int64_t n, int nthreads);

/* The CPU's loop fold and replica combine (host memory, f32). */
void mpmd_cpu_fold(const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x, int mb);
void mpmd_cpu_combine(const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas, float *out,
                      int64_t count);

/* ---- threading ---------------------------------------------------------- */

/* Rows [lo, hi) of n for thread t of nt: contiguous, balanced blocks. */
static inline void mpmd_split(int64_t n, int t, int nt, int64_t *lo, int64_t *hi) {
    int64_t q = n / nt, r = n % nt;
    *lo = t * q + (t < r ? t : r);
    *hi = *lo + q + (t < r ? 1 : 0);
}

/* Threads worth using for `work` elementary operations: 1 below a fixed
 * threshold (so tiny ops do not pay for a parallel region), else nthreads.
 * The result never changes what a kernel computes, only how fast. */
static inline int mpmd_threads_for(int nthreads, int64_t work) { return work < 32768 ? 1 : nthreads; }

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

#endif
