/* CPU kernels of the optimizer ops (src/ops/optim.c).
 *
 * Each update is one fused pass over the parameter's elements: it reads the
 * gradient and the state and writes the parameter and the state in place
 * (the executor passes the storage of parameters and variables as the input
 * buffers). Elements are independent, so the result is the same for any
 * split over threads; threads take contiguous blocks (mpmd_split).
 *
 * The Adam loop is one elementwise loop, vectorised for each width
 * (adam_range): the lanes and the tail give the scalar loop's bits.
 */
#include "cpu.h"
#include "backend/shape_plan.h"
#include "../../ops/optim.h"

#include <math.h>
#include <stdint.h>

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

typedef struct {
    float *p;
    const float *gr;
    float lr;
} sgd_job;

static void sgd_part(void *ctx, int64_t lo, int64_t hi) {
    const sgd_job *j = ctx;
    sgd_range(j->p, j->gr, j->lr, lo, hi);
}

static int k_sgd(const mpmd_kargs *a) {
    sgd_job j = {(float *)a->in[0], (const float *)a->in[1], *(const float *)a->in[2]};
    int64_t n = mpmd_type_numel(a->in_type[0]);
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, n), n, sgd_part, &j);
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

/* The Adam loop: every element by adam_elem, vectorised (sqrtps and divps
 * are correctly rounded like their scalar forms, and no FMA is formed) and
 * built for each vector width like the loops of cpu.h; division and square
 * root are most of its time, and wider vectors do more lanes per
 * instruction. This file is compiled with -fno-math-errno (CMakeLists.txt),
 * without which gcc calls sqrtf rather than vectorise it. */
MPMD_VEC_CLONES
static void adam_range(const adam_k *k, float *p, const float *gr, float *mu, float *nu, int64_t lo,
                       int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; i++)
        adam_elem(k, p, gr, mu, nu, i);
}

typedef struct {
    const adam_k *k;
    float *p;
    const float *gr;
    float *mu, *nu;
} adam_job;

static void adam_part(void *ctx, int64_t lo, int64_t hi) {
    const adam_job *j = ctx;
    adam_range(j->k, j->p, j->gr, j->mu, j->nu, lo, hi);
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
    adam_job j = {&k, p, gr, mu, nu};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, 8 * n), n, adam_part, &j);
    return 0;
}

const mpmd_kernel mpmd_cpu_optim_kernels[] = {
    {&mpmd_op_optim_step, k_optim_step, NULL, 0},
    {&mpmd_op_sgd, k_sgd, NULL, 0},
    {&mpmd_op_adamw, k_adamw, NULL, 0},
    {0},
};
