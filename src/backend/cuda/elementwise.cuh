/* elementwise.cuh - what the CUDA kernels of the elementwise family
 * (elementwise.cu, sum_to.cu) share: 16-byte vectors of each storage type,
 * launch sizes, the operands' common dtype, index decomposition.
 */
#ifndef MPMD_CUDA_ELEMENTWISE_CUH
#define MPMD_CUDA_ELEMENTWISE_CUH

#include "cuda.h"

#include "backend/op_descs.h"
#include "backend/shape_plan.h"

#include <stdint.h>
#include <string.h>

#include <type_traits>

#define THREADS 256
#define MAX_GRID (1 << 20)
#define MAX_OUTER (MPMD_MAX_DIMS - 1) /* outer groups besides the last one */

/* ---- storage types ------------------------------------------------------------------------ */

/* Elements per 16-byte vector of T, as a shift: 4 f32 (2), 8 bf16 or f16 (3). */
template <typename T> struct vec16 {
    static constexpr int lg = sizeof(T) == 4 ? 2 : 3;
    static constexpr int n = 1 << lg;
};

/* V elements of T, aligned to their size (one vector load or store). */
template <typename T, int V> struct alignas(sizeof(T) * V) pack { T v[V]; };

/* (to_f32 / from_f32: cuda.h) */

/* The V elements at p (aligned to V elements), raw. Kernels move vectors as
 * whole packs, converting element by element (not through f32 arrays, which
 * keep the compiler from unrolling the grid-stride loops). The f32 vector
 * code of map2 and bcast stays the float4 code: with packs the compiler
 * would no longer unswitch their loops on the operands' strides. */
template <int V, typename T> __device__ __forceinline__ pack<T, V> load_pack(const T *p) {
    return *reinterpret_cast<const pack<T, V> *>(p);
}

/* A pack of V copies of x */
template <int V, typename T> __device__ __forceinline__ pack<T, V> splat(T x) {
    pack<T, V> r;
#pragma unroll
    for (int k = 0; k < V; k++)
        r.v[k] = x;
    return r;
}

/* ---- host helpers --------------------------------------------------------------------- */

static inline int64_t numel_of(const mpmd_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->dim[d];
    return n;
}

/* Blocks for `work` items at THREADS per block, capped (kernels grid-stride). */
static inline unsigned grid_for(int64_t work) {
    unsigned b = mpmd_cuda_blocks(work, THREADS);
    return b > MAX_GRID ? MAX_GRID : b;
}

static inline int aligned_to(const void *p, size_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }
static inline int aligned16(const void *p) { return aligned_to(p, 16); }

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The dtype of the output when it is f32, bf16 or f16 and the first n_in
 * operands have it too; else -1 with a message. */
static inline int common_dtype(const mpmd_kargs *a, int n_in) {
    mpmd_dtype d = a->node->type.dtype;
    int ok = d == MPMD_F32 || d == MPMD_BF16 || d == MPMD_F16;
    for (int i = 0; i < n_in; i++)
        ok = ok && a->in_type[i]->dtype == d;
    if (ok) return (int)d;
    snprintf(a->err, a->err_len,
             "%s: the CUDA kernel takes operands of the output's dtype, one of f32, bf16, f16 (output %s, "
             "operands %s%s%s)",
             a->node->op->name, mpmd_dtype_name(d), mpmd_dtype_name(a->in_type[0]->dtype),
             n_in > 1 ? ", " : "", n_in > 1 ? mpmd_dtype_name(a->in_type[1]->dtype) : "");
    return -1;
}

template <typename T> struct type_tag { typedef T type; };

/* g(type_tag<T>()) for the storage type T of dtype d (f32, bf16, f16). */
template <class G> static int by_dtype(int d, G g) {
    switch (d) {
    case MPMD_BF16: return g(type_tag<__nv_bfloat16>());
    case MPMD_F16: return g(type_tag<__half>());
    default: return g(type_tag<float>());
    }
}

/* ---- device helpers -------------------------------------------------------------------- */

/* Offset of position r of a row-major index space over n groups (sizes,
 * strides; outermost first): the innermost group varies fastest. The
 * outermost group needs no division (r is below its size). */
template <typename I>
__device__ __forceinline__ I decompose(I r, int n, const int64_t *size, const int64_t *stride) {
    I off = 0;
#pragma unroll
    for (int q = MAX_OUTER - 1; q >= 0; q--) {
        if (q < n) {
            I idx;
            if (q == 0) {
                idx = r;
            } else {
                I sz = (I)size[q], t = r / sz;
                idx = r - t * sz;
                r = t;
            }
            off += idx * (I)stride[q];
        }
    }
    return off;
}

__device__ __forceinline__ int64_t gtid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t gstride() { return (int64_t)gridDim.x * blockDim.x; }

#endif
