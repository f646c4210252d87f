/* CPU helpers shared by every kernel family: the sgemm entry point and the
 * fixed-order reductions (see cpu.h for the determinism rule). */
#include "cpu.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <strings.h>

void mpmd_sgemm(int nthreads, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    /* The OpenMP build of OpenBLAS sizes its team from the calling thread's
     * omp_get_max_threads(), a per-thread setting. But OpenBLAS 0.3.21 gives
     * different bits for different thread counts (measured on a
     * [256,768]x[768,3072] product), so the matmul kernel calls this with
     * nthreads = 1 only, and parallelises over a fixed grid of tiles whose
     * shape depends on M, N and K alone (src/backend/cpu/nn.c). */
    if (omp_get_max_threads() != nthreads) omp_set_num_threads(nthreads > 0 ? nthreads : 1);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
                (blasint)ldc);
}

/* ---- which BLAS kernels run ---------------------------------------------- */

const char *mpmd_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

/* OpenBLAS's kernel sets that use AVX2 (or AVX-512); any other one on a CPU
 * that has AVX2 is an older, generic set: OpenBLAS did not recognise the
 * CPU (0.3.21 on CPUs newer than it), and sgemm runs 4-5x slower. */
const char *mpmd_blas_warning(void) {
#if defined(__x86_64__) || defined(__i386__)
    static char msg[256];
    static const char *const modern[] = {"haswell",        "zen",      "skylakex", "cooperlake",
                                         "sapphirerapids", "excavator"};
    const char *core = mpmd_blas_core();
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2"), avx512 = __builtin_cpu_supports("avx512f");
    if (!avx2) return NULL;
    for (size_t i = 0; i < sizeof modern / sizeof *modern; i++)
        if (!strcasecmp(core, modern[i])) return NULL;
    snprintf(msg, sizeof msg,
             "OpenBLAS runs its %s kernels on a CPU with %s: matrix products are several times slower than "
             "they can be; set OPENBLAS_CORETYPE=%s",
             core, avx512 ? "AVX-512" : "AVX2", avx512 ? "SkylakeX" : "Haswell");
    return msg;
#else
    return NULL;
#endif
}

/* Eight interleaved partial sums: s[j] collects x[j], x[j+8], ...; then
 * ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)) and the tail in index order. The
 * order depends only on n, so the result is the same on every thread count,
 * and gcc vectorises the lane loop without -ffast-math. */
MPMD_VEC_CLONES
static float sum_f32(const float *x, int64_t n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + j];
    float t = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += x[i];
    return t;
}

MPMD_VEC_CLONES
static float dot_f32(const float *x, const float *y, int64_t n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + j] * y[i + j];
    float t = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += x[i] * y[i];
    return t;
}

MPMD_VEC_CLONES
static float max_f32(const float *x, int64_t n) {
    float m[8];
    int64_t i = 0;
    if (n < 8) {
        float r = x[0];
        for (i = 1; i < n; i++)
            r = x[i] > r ? x[i] : r;
        return r;
    }
    for (int j = 0; j < 8; j++)
        m[j] = x[j];
    for (i = 8; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float r = m[0];
    for (int j = 1; j < 8; j++)
        r = m[j] > r ? m[j] : r;
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

/* The exported names call the clones: clang builds a function's clones and
 * its resolver only where it is defined, so a multiversioned function is
 * kept static and reached through these. */
float mpmd_sum_f32(const float *x, int64_t n) { return sum_f32(x, n); }
float mpmd_dot_f32(const float *x, const float *y, int64_t n) { return dot_f32(x, y, n); }
float mpmd_max_f32(const float *x, int64_t n) { return max_f32(x, n); }
