/* CUDA kernels of the optimizer ops (src/ops/optim.c).
 *
 * As on the CPU, each update is one fused pass over the parameter's
 * elements, reading the gradient and the state and writing the parameter
 * and the state in place (in[i] are the storage of the parameters and
 * variables). Elements are independent: each is updated by one thread, in a
 * grid-stride loop over float4 groups (when every buffer is 16-byte aligned)
 * and then a scalar tail. The scalars the step depends on (the learning
 * rate, the step counter) live on the device and are read inside the
 * kernels, so nothing waits for the host.
 *
 * The arithmetic is the CPU's, operation for operation, with the correctly
 * rounded intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn): nvcc
 * would otherwise contract a * b + c into fused multiply-adds, which the CPU
 * (C11, fp-contract off) does not. The updates then give the CPU's bits; only
 * Adam's bias corrections 1 - b^t may differ by a rounding (see adam_consts).
 */
#include "cuda.h"

#include "backend/shape_plan.h"

extern "C" {
#include "ops/optim.h"
}

#include <math.h>
#include <stdint.h>

#define OPT_THREADS 256
#define OPT_MAX_BLOCKS 4096 /* grid-stride beyond this: a few groups per thread */

/* Vector groups of 4 when all pointers allow float4 accesses, else none. */
static int64_t vec_groups(int64_t n, const void *p0, const void *p1, const void *p2, const void *p3) {
    uintptr_t u = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3;
    return (u & 15) == 0 ? n / 4 : 0;
}

static unsigned opt_blocks(int64_t n, int64_t nv) {
    unsigned b = mpmd_cuda_blocks(nv > 0 ? nv : n, OPT_THREADS);
    return b > OPT_MAX_BLOCKS ? OPT_MAX_BLOCKS : b;
}

/* ---- optim_step ------------------------------------------------------------------ */

/* t = t + 1 on the i32 step counter. The CPU refuses to step past INT32_MAX;
 * here the counter stays there (there is no device error code for it). */
static __global__ void optim_step_kernel(int32_t *t) {
    int32_t v = *t;
    if (v != INT32_MAX) *t = v + 1;
}

static int k_optim_step(const mpmd_kargs *a) {
    optim_step_kernel<<<1, 1, 0, mpmd_cuda_of(a)->stream>>>((int32_t *)a->in[0]);
    return mpmd_cuda_launched(a, "optim_step");
}

/* ---- sgd --------------------------------------------------------------------------- */

/* p = p - lr g (the CPU's sgd_range, the same bits). */
__device__ __forceinline__ float sgd_one(float p, float g, float lr) {
    return __fsub_rn(p, __fmul_rn(lr, g));
}

static __global__ void sgd_kernel(float *__restrict__ p, const float *__restrict__ gr,
                                  const float *__restrict__ lrp, int64_t n, int64_t nv) {
    const float lr = *lrp;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float4 *p4 = (float4 *)p;
    const float4 *g4 = (const float4 *)gr;
    for (int64_t i = tid; i < nv; i += stride) {
        float4 x = p4[i], g = g4[i];
        x.x = sgd_one(x.x, g.x, lr);
        x.y = sgd_one(x.y, g.y, lr);
        x.z = sgd_one(x.z, g.z, lr);
        x.w = sgd_one(x.w, g.w, lr);
        p4[i] = x;
    }
    for (int64_t i = 4 * nv + tid; i < n; i += stride)
        p[i] = sgd_one(p[i], gr[i], lr);
}

static int k_sgd(const mpmd_kargs *a) {
    float *p = (float *)a->in[0];
    const float *gr = (const float *)a->in[1];
    const float *lr = (const float *)a->in[2];
    int64_t n = mpmd_type_numel(a->in_type[0]);
    if (n <= 0) return 0;
    int64_t nv = vec_groups(n, p, gr, p, gr);
    sgd_kernel<<<opt_blocks(n, nv), OPT_THREADS, 0, mpmd_cuda_of(a)->stream>>>(p, gr, lr, n, nv);
    return mpmd_cuda_launched(a, "sgd");
}

/* ---- adamw -------------------------------------------------------------------------- */

/* The per-step constants of one Adam update: the CPU's (mpmd_adam_consts,
 * src/backend/shape_plan.h). b1, b2, c1, c2, eps and wd are computed on the
 * host as on the CPU; the bias corrections bc1, bc2 and lr on the device. */
typedef mpmd_adam_consts adam_consts;

/* One element, in optax's order of operations (the CPU's adam_elem):
 *   mu = (1-b1) g + b1 mu;  nu = (1-b2) g^2 + b2 nu
 *   u = (mu / bc1) / (sqrt(nu / bc2) + eps) + wd p;  p = p - lr u */
__device__ __forceinline__ void adam_one(const adam_consts &k, float &p, float g, float &mu, float &nu) {
    float m = __fadd_rn(__fmul_rn(k.c1, g), __fmul_rn(k.b1, mu));
    float v = __fadd_rn(__fmul_rn(k.c2, __fmul_rn(g, g)), __fmul_rn(k.b2, nu));
    mu = m;
    nu = v;
    float den = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, k.bc2)), k.eps);
    float u = __fadd_rn(__fdiv_rn(__fdiv_rn(m, k.bc1), den), __fmul_rn(k.wd, p));
    p = __fsub_rn(p, __fmul_rn(k.lr, u));
}

/* k arrives with b1, b2, c1, c2, eps, wd filled in. The bias corrections use
 * the already incremented step, as optax does: 1 - powf(b, (float)t) on the
 * CPU. b^t is taken in double and rounded once to float: that is the
 * correctly rounded powf, which glibc's powf gives in all but rare cases,
 * where CUDA's powf may be off by an ulp or two. A step below 1 (the CPU
 * reports "optim_step must run first") leaves everything untouched: the
 * device has no error code for it. */
static __global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ gr,
                                    float *__restrict__ mu, float *__restrict__ nu,
                                    const int32_t *__restrict__ step, const float *__restrict__ lrp,
                                    adam_consts k, int64_t n, int64_t nv) {
    const int32_t t = *step;
    if (t < 1) return;
    const double ft = (double)(float)t;
    k.bc1 = __fsub_rn(1.0f, (float)pow((double)k.b1, ft));
    k.bc2 = __fsub_rn(1.0f, (float)pow((double)k.b2, ft));
    k.lr = *lrp;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float4 *p4 = (float4 *)p, *mu4 = (float4 *)mu, *nu4 = (float4 *)nu;
    const float4 *g4 = (const float4 *)gr;
    for (int64_t i = tid; i < nv; i += stride) {
        float4 x = p4[i], g = g4[i], m = mu4[i], v = nu4[i];
        adam_one(k, x.x, g.x, m.x, v.x);
        adam_one(k, x.y, g.y, m.y, v.y);
        adam_one(k, x.z, g.z, m.z, v.z);
        adam_one(k, x.w, g.w, m.w, v.w);
        mu4[i] = m;
        nu4[i] = v;
        p4[i] = x;
    }
    for (int64_t i = 4 * nv + tid; i < n; i += stride) {
        float x = p[i], m = mu[i], v = nu[i];
        adam_one(k, x, gr[i], m, v);
        mu[i] = m;
        nu[i] = v;
        p[i] = x;
    }
}

static int k_adamw(const mpmd_kargs *a) {
    float *p = (float *)a->in[0];
    const float *gr = (const float *)a->in[1];
    float *mu = (float *)a->in[2];
    float *nu = (float *)a->in[3];
    const int32_t *step = (const int32_t *)a->in[4];
    const float *lr = (const float *)a->in[5];
    adam_consts k;
    mpmd_adam_consts_make(&k, a->node); /* bc1, bc2 and lr: set on the device from the step and lr */
    int64_t n = mpmd_type_numel(a->in_type[0]);
    if (n <= 0) return 0;
    int64_t nv = vec_groups(n, p, gr, mu, nu);
    adamw_kernel<<<opt_blocks(n, nv), OPT_THREADS, 0, mpmd_cuda_of(a)->stream>>>(p, gr, mu, nu, step, lr, k,
                                                                                 n, nv);
    return mpmd_cuda_launched(a, "adamw");
}

extern "C" const mpmd_kernel mpmd_cuda_optim_kernels[] = {
    {&mpmd_op_optim_step, k_optim_step, NULL, 0},
    {&mpmd_op_sgd, k_sgd, NULL, 0},
    {&mpmd_op_adamw, k_adamw, NULL, 0},
    {NULL, NULL, NULL, 0},
};
