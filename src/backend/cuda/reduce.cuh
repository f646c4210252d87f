/* reduce.cuh - what the CUDA kernels of the reduction ops (reduce.cu) and
 * the shape ops (shape.cu) share: index helpers over simplified layouts and
 * the float storage types.
 */
#ifndef MPMD_CUDA_REDUCE_CUH
#define MPMD_CUDA_REDUCE_CUH

#include "cuda.h"

#include "backend/op_descs.h"
#include "backend/shape_plan.h"

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace {

typedef long long i64;

enum { RBLK = 512, OBLK = 256, EBLK = 256 };

/* ---- index helpers ------------------------------------------------------------ */

/* q = a / b, r = a % b (a >= 0, b > 0), in 32 bits when both fit. */
__device__ __forceinline__ void qr(i64 a, i64 b, i64 &q, i64 &r) {
    if ((((unsigned long long)a) | ((unsigned long long)b)) >> 32 == 0) {
        unsigned ua = (unsigned)a, ub = (unsigned)b, uq = ua / ub;
        q = uq;
        r = ua - uq * ub;
    } else {
        q = a / b;
        r = a - q * b;
    }
}

/* Axes walked in row-major order (the last fastest), each with two element
 * strides (e.g. input and output). */
struct Axes {
    int n;
    i64 size[MPMD_MAX_DIMS], sa[MPMD_MAX_DIMS], sb[MPMD_MAX_DIMS];
};

static inline void axes_push(Axes *A, i64 size, i64 sa, i64 sb) {
    A->size[A->n] = size;
    A->sa[A->n] = sa;
    A->sb[A->n] = sb;
    A->n++;
}

static inline i64 axes_count(const Axes *A) {
    i64 c = 1;
    for (int k = 0; k < A->n; k++)
        c *= A->size[k];
    return c;
}

/* The sa-offset of flat index i (i < the product of the sizes). */
__device__ __forceinline__ i64 axes_off(const Axes &A, i64 i) {
    i64 off = 0;
#pragma unroll
    for (int k = MPMD_MAX_DIMS - 1; k >= 1; k--) {
        if (k < A.n) {
            i64 q, r;
            qr(i, A.size[k], q, r);
            off += r * A.sa[k];
            i = q;
        }
    }
    return A.n > 0 ? off + i * A.sa[0] : 0;
}

/* Both offsets of flat index i. */
__device__ __forceinline__ void axes_off2(const Axes &A, i64 i, i64 &oa, i64 &ob) {
    oa = 0;
    ob = 0;
#pragma unroll
    for (int k = MPMD_MAX_DIMS - 1; k >= 1; k--) {
        if (k < A.n) {
            i64 q, r;
            qr(i, A.size[k], q, r);
            oa += r * A.sa[k];
            ob += r * A.sb[k];
            i = q;
        }
    }
    if (A.n > 0) {
        oa += i * A.sa[0];
        ob += i * A.sb[0];
    }
}

static inline i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }

/* Blocks for n items at `per` items per block, capped (kernels loop). */
static inline unsigned grid_for(i64 n, i64 per) {
    i64 b = cdiv(n, per);
    if (b < 1) b = 1;
    if (b > (1 << 22)) b = 1 << 22;
    return (unsigned)b;
}

/* p is aligned to u bytes (a power of two). */
static inline int aligned(const void *p, i64 u) { return ((uintptr_t)p & (uintptr_t)(u - 1)) == 0; }

/* ---- storage types -------------------------------------------------------------- */

/* A float operand is stored as float, __nv_bfloat16 or __half (to_f32 /
 * from_f32 in cuda.h). */

/* f((T *)0) with T the storage type of float dtype d; 1 when d is no float. */
template <class F> static int with_float_type(mpmd_dtype d, F &&f) {
    switch (d) {
    case MPMD_F32: f((float *)NULL); return 0;
    case MPMD_BF16: f((__nv_bfloat16 *)NULL); return 0;
    case MPMD_F16: f((__half *)NULL); return 0;
    default: return 1;
    }
}

} /* namespace */

#endif
