/* cuda.h - the CUDA backend's shared declarations (CUDA C++ files only).
 *
 * A rank's instance owns a device, a stream, a cuBLAS handle with a fixed
 * workspace, and one int on the device where kernels record the first
 * run-time error (an id out of range); sync reads it back.
 *
 * Every kernel is queued on the instance's stream and returns at once. The
 * determinism rule of the CPU backend holds here: each output element is
 * computed by one thread (or one block, reducing in a fixed tree order),
 * never summed with atomics, so a result depends only on the inputs and
 * the launch shape, which depends only on the tensor shapes.
 */
#ifndef MPMD_CUDA_H
#define MPMD_CUDA_H

#include "backend/backend.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

/* A buffer from cuda_alloc and its size (as rounded). */
typedef struct mpmd_cuda_buf {
    void *p;
    size_t bytes;
} mpmd_cuda_buf;

typedef struct mpmd_cuda_dev {
    int device;
    int rank;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace; /* cuBLAS workspace, fixed per handle (determinism) */
    size_t workspace_bytes;
    int *flag;      /* device: 0, or the first MPMD_CUDA_FLAG_* a kernel met */
    int *flag_info; /* device: [3] details of that error (value, position, bound) */
    int tf32;       /* f32 products may use TF32 tensor cores (MPMD_CUDA_TF32=1) */
    int graphs;     /* record and replay rank segments as CUDA graphs (unless MPMD_CUDA_GRAPHS=0) */
    unsigned long long *sumsq; /* device scratch of mpmd_cuda_sumsq (sumsq.cu), sumsq_cap words */
    size_t sumsq_cap;
    mpmd_cuda_buf *bufs; /* buffers from cuda_alloc and their sizes, for the instance's count */
    int nbufs, capbufs;
    size_t in_use, peak;
} mpmd_cuda_dev;

/* Run-time errors kernels record on the device (first one wins). */
enum {
    MPMD_CUDA_FLAG_NONE = 0,
    MPMD_CUDA_FLAG_EMBEDDING_ID = 1, /* embedding: id outside [0, vocab) */
    MPMD_CUDA_FLAG_LABEL = 2         /* cross_entropy: label outside [0, classes) */
};

/* Record error `code` with details (a, b, c) unless one is recorded. */
__device__ static inline void mpmd_cuda_raise(int *flag, int *info, int code, int a, int b, int c) {
    if (atomicCAS(flag, 0, code) == 0) {
        info[0] = a;
        info[1] = b;
        info[2] = c;
    }
}

static inline mpmd_cuda_dev *mpmd_cuda_of(const mpmd_kargs *a) { return (mpmd_cuda_dev *)a->dev; }

/* ---- storage types ----------------------------------------------------------
 * A float value is stored as float, __nv_bfloat16 or __half: widened to f32
 * exactly on load (to_f32), rounded to nearest even once on store
 * (from_f32<T>); ld / st do the same for a dtype known only at run time. */
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float mpmd_cuda_ld(const void *p, int dt, int64_t i) {
    if (dt == MPMD_BF16) return to_f32(((const __nv_bfloat16 *)p)[i]);
    if (dt == MPMD_F16) return to_f32(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ __forceinline__ void mpmd_cuda_st(void *p, int dt, int64_t i, float v) {
    if (dt == MPMD_BF16)
        ((__nv_bfloat16 *)p)[i] = from_f32<__nv_bfloat16>(v);
    else if (dt == MPMD_F16)
        ((__half *)p)[i] = from_f32<__half>(v);
    else
        ((float *)p)[i] = v;
}

/* After a launch: 0, or 1 with "<what>: <CUDA error>" in a->err. */
static inline int mpmd_cuda_launched(const mpmd_kargs *a, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    snprintf(a->err, a->err_len, "%s: CUDA kernel launch failed: %s", what, cudaGetErrorString(e));
    return 1;
}

/* dst[k] = src[k] converted from dtype `from` to `to` (f32, bf16, f16;
 * rounding to nearest even), n elements, queued on d's stream. Non-zero for
 * a dtype it does not convert. */
#ifdef __cplusplus
extern "C"
#endif
    int
    mpmd_cuda_convert(mpmd_cuda_dev *d, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from,
                      int64_t n);

/* Blocks for n elements at `threads` per block (at least 1). */
static inline unsigned mpmd_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b);
}

/* The model axis' collectives and the ops of the rank's own values on
 * device buffers (collective.cu; mpmd_backend.model_combine and
 * model_local). */
#ifdef __cplusplus
extern "C" {
#endif
int mpmd_cuda_model_combine(void *d, const mpmd_graph *g, int node, int m, int M, const void *const *ins,
                            void *out, char *err, size_t len);
int mpmd_cuda_model_local(void *d, const mpmd_graph *g, int node, int m, void *const *in, void *out,
                          char *err, size_t len);
#ifdef __cplusplus
}
#endif

/* acc (host) += the exact sum of the squares of the f32 vectors x[i]
 * (count[i] elements each), after everything queued on d (sumsq.cu). */
#ifdef __cplusplus
extern "C"
#endif
    int
    mpmd_cuda_sumsq(void *d, int n, const void *const *x, const int64_t *count, uint32_t *acc, char *err,
                    size_t len);

#ifdef __cplusplus
extern "C" {
#endif
/* Kernel tables, each ended by an entry with op == NULL. */
extern const mpmd_kernel mpmd_cuda_core_kernels[];
extern const mpmd_kernel mpmd_cuda_elementwise_kernels[];
extern const mpmd_kernel mpmd_cuda_sum_to_kernels[];
extern const mpmd_kernel mpmd_cuda_reduce_kernels[];
extern const mpmd_kernel mpmd_cuda_shape_kernels[];
extern const mpmd_kernel mpmd_cuda_nn_kernels[];
extern const mpmd_kernel mpmd_cuda_norm_kernels[];
extern const mpmd_kernel mpmd_cuda_embed_kernels[];
extern const mpmd_kernel mpmd_cuda_optim_kernels[];
extern const mpmd_kernel mpmd_cuda_attention_kernels[];
#ifdef __cplusplus
}
#endif

#endif
