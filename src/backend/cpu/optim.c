/* CPU kernels of the optimizer ops (src/ops/optim.c).
 *
 * Each update is one fused pass over the parameter's elements: it reads the
 * gradient and the state and writes the parameter and the state in place
 * (the executor passes the storage of parameters and variables as the input
 * buffers). Elements are independent, so the result is the same for any
 * split over threads; threads take contiguous blocks (mpmd_split).
 *
 * The Adam loop uses 4-wide SSE where available: sqrtps and divps are
 * correctly rounded like their scalar forms, so the vector lanes and the
 * scalar tail give the same bits as the scalar loop. (gcc does not vectorise
 * sqrtf without -fno-math-errno, and at -O2 not loops with a remainder.)
 */
#include "cpu.h"
#include "backend/shape_plan.h"
#include "../../ops/optim.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* t = t + 1 on the i32 step counter. */
static int k_optim_step(const mpmd_kargs *a) {
    int32_t *t = (int32_t *)a->in[0];
    if (*t == INT32_MAX) {
        snprintf(a->err, a->err_len, "optim_step: the step counter is at %d and cannot be incremented", *t);
        return 1;
    }
    *t += 1;
    return 0;
}

/* p = p - lr g: the same bits as optax's p + (-lr g). Blocks of 8 with a
 * fixed-count inner loop, which gcc vectorises at -O2. */
static void sgd_range(float *p, const float *gr, float lr, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
        for (int j = 0; j < 8; j++)
            p[i + j] = p[i + j] - lr * gr[i + j];
    for (; i < hi; i++)
        p[i] = p[i] - lr * gr[i];
}

static int k_sgd(const mpmd_kargs *a) {
    float *p = (float *)a->in[0];
    const float *gr = (const float *)a->in[1];
    const float lr = *(const float *)a->in[2];
    int64_t n = mpmd_type_numel(a->in_type[0]);
    int nt = mpmd_threads_for(a->nthreads, n);
    if (nt <= 1) {
        sgd_range(p, gr, lr, 0, n);
        return 0;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        mpmd_split(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        sgd_range(p, gr, lr, lo, hi);
    }
    return 0;
}

/* The per-step constants of one Adam update: mpmd_adam_consts
 * (shape_plan.h, shared with CUDA). */
typedef mpmd_adam_consts adam_k;

/* One element, in optax's order of operations:
 *   mu = (1-b1) g + b1 mu;  nu = (1-b2) g^2 + b2 nu
 *   u = (mu / bc1) / (sqrt(nu / bc2) + eps) + wd p;  p = p - lr u */
static inline void adam_elem(const adam_k *k, float *p, const float *gr, float *mu, float *nu, int64_t i) {
    float gi = gr[i];
    float m = k->c1 * gi + k->b1 * mu[i];
    float v = k->c2 * (gi * gi) + k->b2 * nu[i];
    mu[i] = m;
    nu[i] = v;
    float u = (m / k->bc1) / (sqrtf(v / k->bc2) + k->eps) + k->wd * p[i];
    p[i] = p[i] - k->lr * u;
}

/* The Adam loop over [lo, hi) with 8-wide AVX: the same operations as the
 * SSE loop below, lane for lane (no FMA), so the same bits; it returns
 * where it stopped, and the rest goes to the narrower loops. Chosen when
 * the CPU has AVX (and after the 16-wide AVX-512 loop where it has that):
 * division and square root are most of this loop, and wider vectors do
 * more lanes per instruction. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX__) && !defined(MPMD_NO_VEC_CLONES)
#include <immintrin.h>
#define ADAM_AVX 1
__attribute__((target("avx"))) static int64_t adam_avx(const adam_k *k, float *p, const float *gr, float *mu,
                                                       float *nu, int64_t lo, int64_t hi) {
    const __m256 b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2), c1 = _mm256_set1_ps(k->c1),
                 c2 = _mm256_set1_ps(k->c2), bc1 = _mm256_set1_ps(k->bc1), bc2 = _mm256_set1_ps(k->bc2),
                 eps = _mm256_set1_ps(k->eps), wd = _mm256_set1_ps(k->wd), lr = _mm256_set1_ps(k->lr);
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 gi = _mm256_loadu_ps(gr + i), pi = _mm256_loadu_ps(p + i);
        __m256 m = _mm256_add_ps(_mm256_mul_ps(c1, gi), _mm256_mul_ps(b1, _mm256_loadu_ps(mu + i)));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(c2, _mm256_mul_ps(gi, gi)),
                                 _mm256_mul_ps(b2, _mm256_loadu_ps(nu + i)));
        _mm256_storeu_ps(mu + i, m);
        _mm256_storeu_ps(nu + i, v);
        __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(v, bc2)), eps);
        __m256 u = _mm256_add_ps(_mm256_div_ps(_mm256_div_ps(m, bc1), den), _mm256_mul_ps(wd, pi));
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, u)));
    }
    return i;
}

/* The same, 16 lanes wide, where the CPU has AVX-512. */
__attribute__((target("avx512f"))) static int64_t adam_avx512(const adam_k *k, float *p, const float *gr,
                                                              float *mu, float *nu, int64_t lo, int64_t hi) {
    const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2), c1 = _mm512_set1_ps(k->c1),
                 c2 = _mm512_set1_ps(k->c2), bc1 = _mm512_set1_ps(k->bc1), bc2 = _mm512_set1_ps(k->bc2),
                 eps = _mm512_set1_ps(k->eps), wd = _mm512_set1_ps(k->wd), lr = _mm512_set1_ps(k->lr);
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 gi = _mm512_loadu_ps(gr + i), pi = _mm512_loadu_ps(p + i);
        __m512 m = _mm512_add_ps(_mm512_mul_ps(c1, gi), _mm512_mul_ps(b1, _mm512_loadu_ps(mu + i)));
        __m512 v = _mm512_add_ps(_mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)),
                                 _mm512_mul_ps(b2, _mm512_loadu_ps(nu + i)));
        _mm512_storeu_ps(mu + i, m);
        _mm512_storeu_ps(nu + i, v);
        __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(v, bc2)), eps);
        __m512 u = _mm512_add_ps(_mm512_div_ps(_mm512_div_ps(m, bc1), den), _mm512_mul_ps(wd, pi));
        _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(lr, u)));
    }
    return i;
}
#endif

static void adam_range(const adam_k *k, float *p, const float *gr, float *mu, float *nu, int64_t lo,
                       int64_t hi) {
    int64_t i = lo;
#ifdef ADAM_AVX
    if (__builtin_cpu_supports("avx512f"))
        i = adam_avx512(k, p, gr, mu, nu, lo, hi);
    if (__builtin_cpu_supports("avx")) i = adam_avx(k, p, gr, mu, nu, i, hi);
#endif
#if defined(__SSE2__)
    const __m128 b1 = _mm_set1_ps(k->b1), b2 = _mm_set1_ps(k->b2), c1 = _mm_set1_ps(k->c1),
                 c2 = _mm_set1_ps(k->c2), bc1 = _mm_set1_ps(k->bc1), bc2 = _mm_set1_ps(k->bc2),
                 eps = _mm_set1_ps(k->eps), wd = _mm_set1_ps(k->wd), lr = _mm_set1_ps(k->lr);
    for (; i + 4 <= hi; i += 4) {
        __m128 gi = _mm_loadu_ps(gr + i), pi = _mm_loadu_ps(p + i);
        __m128 m = _mm_add_ps(_mm_mul_ps(c1, gi), _mm_mul_ps(b1, _mm_loadu_ps(mu + i)));
        __m128 v = _mm_add_ps(_mm_mul_ps(c2, _mm_mul_ps(gi, gi)), _mm_mul_ps(b2, _mm_loadu_ps(nu + i)));
        _mm_storeu_ps(mu + i, m);
        _mm_storeu_ps(nu + i, v);
        __m128 den = _mm_add_ps(_mm_sqrt_ps(_mm_div_ps(v, bc2)), eps);
        __m128 u = _mm_add_ps(_mm_div_ps(_mm_div_ps(m, bc1), den), _mm_mul_ps(wd, pi));
        _mm_storeu_ps(p + i, _mm_sub_ps(pi, _mm_mul_ps(lr, u)));
    }
#endif
    for (; i < hi; i++)
        adam_elem(k, p, gr, mu, nu, i);
}

static int k_adamw(const mpmd_kargs *a) {
    const mpmd_node *nd = a->node;
    float *p = (float *)a->in[0];
    const float *gr = (const float *)a->in[1];
    float *mu = (float *)a->in[2];
    float *nu = (float *)a->in[3];
    int32_t t = *(const int32_t *)a->in[4];
    if (t < 1) {
        snprintf(a->err, a->err_len, "adamw: the step counter is %d; optim_step must run first", (int)t);
        return 1;
    }
    adam_k k;
    mpmd_adam_consts_make(&k, nd);
    /* Bias corrections with the already incremented step, as optax does. */
    k.bc1 = 1.0f - powf(k.b1, (float)t);
    k.bc2 = 1.0f - powf(k.b2, (float)t);
    k.lr = *(const float *)a->in[5];
    int64_t n = mpmd_type_numel(a->in_type[0]);
    int nt = mpmd_threads_for(a->nthreads, 8 * n);
    if (nt <= 1) {
        adam_range(&k, p, gr, mu, nu, 0, n);
        return 0;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        mpmd_split(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        adam_range(&k, p, gr, mu, nu, lo, hi);
    }
    return 0;
}

const mpmd_kernel mpmd_cpu_optim_kernels[] = {
    {&mpmd_op_optim_step, k_optim_step, NULL, 0},
    {&mpmd_op_sgd, k_sgd, NULL, 0},
    {&mpmd_op_adamw, k_adamw, NULL, 0},
    {0},
};
