/* CUDA kernels of the elementwise family (ops in src/ops/elementwise.c; the
 * CPU kernels in src/backend/cpu/elementwise.c are the specification), but
 * sum_to (sum_to.cu); what both use is in elementwise.cuh.
 *
 * Every kernel takes f32, bf16 and f16 natively: the operands and the output
 * of a node share one dtype (the graph's rule), the kernels are templated on
 * its storage type T (float, __nv_bfloat16, __half), load each element and
 * convert it to f32 exactly, compute in f32 exactly as the f32 kernel does,
 * and round to T (nearest even) once, on store. On f32 the conversions are
 * the identity and the code is the f32 kernel's.
 *
 * Unary ops, scalar ops and the fused *_grad ops are flat maps: a grid-stride
 * loop over 16-byte vectors (4 f32 or 8 16-bit elements, when the buffers are
 * 16-byte aligned) and then the remaining tail elements, one thread per
 * element.
 *
 * Binary ops and broadcast_to coalesce the output shape against the operands
 * with the CPU's plan (mpmd_bcast_plan_make, src/backend/shape_plan.c:
 * groups with a stride 0 or 1 per operand in the last group, a general
 * stride in the outer ones). One group is a flat map (an operand of stride
 * 0 is a single element); more groups run a kernel
 * where each thread takes V consecutive outputs of one row (f32: 4 when the
 * last group's size is a multiple of 4 and the buffers 16-byte aligned;
 * 16-bit: 8 or 4 likewise, as 16- or 8-byte vectors; else 1), finds its row
 * by division and the operands' offsets by decomposing the row over the outer
 * groups. Index arithmetic is 32-bit when it cannot overflow (n plus one grid
 * stride below 2^31), else 64-bit. Every output is computed by one thread
 * from its own inputs, reading before writing, so out == in[0] (in place) is
 * correct.
 *
 * maximum, minimum, max_weight and compare are binary ops like add (the
 * same plan and kernels), with the CPU's selects: a NaN operand wins in
 * maximum / minimum, max_weight gives 1, 1/2 or 0, compare 1 or 0; the
 * values are exact, so they are the CPU's bits in every dtype. where (three
 * operands of one shape) and where_grad are flat selects; sigmoid, silu and
 * their gradients flat maps.
 *
 * dropout draws the CPU's mask: one thread per group of 4 elements i, i + 1,
 * i + 2, i + 3 (i = 4 blk) takes the Philox-4x32-10 words of the counter
 * (blk as 64 bits, microbatch, stream) under the key (src/util/philox.h,
 * the CPU's code compiled for the device), reading the key from the device.
 *
 * The maths functions are CUDA's expf/logf/tanhf/sqrtf and IEEE division
 * (as built without fast-math); gelu is the tanh form computed as the CPU
 * does, x / (1 + e^(-2u)).
 */
#include "elementwise.cuh"
#include "util/philox.h"

/* ---- functors (f32 in, f32 out) ----------------------------------------------------------- */

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

/* gelu(x) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = k (x + c x^3) */
__device__ __forceinline__ float gelu1(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

/* gelu'(x) = s + 2 x s (1 - s) u', s = 1 / (1 + e^(-2u)), u' = k (1 + 3 c x^2) */
__device__ __forceinline__ float gelu_grad1(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

/* binary: f(x, y); the formulas of MPMD_BINARY_OPS (src/ops/elementwise_ops.h)
 * as the CPU's, and a functor B_<name> for each */
__device__ __forceinline__ float bn_add(float x, float y) { return x + y; }
__device__ __forceinline__ float bn_sub(float x, float y) { return x - y; }
__device__ __forceinline__ float bn_mul(float x, float y) { return x * y; }
__device__ __forceinline__ float bn_div(float x, float y) { return x / y; }
/* a NaN operand gives NaN (x != x: x is NaN; else y, NaN or not) */
__device__ __forceinline__ float bn_maximum(float x, float y) { return x > y || x != x ? x : y; }
__device__ __forceinline__ float bn_minimum(float x, float y) { return x < y || x != x ? x : y; }
#define BIN_FUNCTOR(name, tol)                                                                               \
    struct B_##name {                                                                                        \
        __device__ float operator()(float x, float y) const { return bn_##name(x, y); }                      \
    };
MPMD_BINARY_OPS(BIN_FUNCTOR)

struct FCopy {
    __device__ float operator()(float x, float y) const { return (void)y, x; }
};
/* the share of a maximum's cotangent that goes to x: 1, 1/2 on a tie, else 0 */
struct FMaxW {
    __device__ float operator()(float x, float y) const { return x > y ? 1.0f : x == y ? 0.5f : 0.0f; }
};
/* 1 where x <op> y holds, else 0; op an mpmd_cmp (eq, ne, lt, le, gt, ge) */
struct FCmp {
    int op;
    __device__ float operator()(float x, float y) const {
        bool r;
        switch (op) {
        case 0: r = x == y; break;
        case 1: r = x != y; break;
        case 2: r = x < y; break;
        case 3: r = x <= y; break;
        case 4: r = x > y; break;
        default: r = x >= y; break;
        }
        return r ? 1.0f : 0.0f;
    }
};

/* unary: f(x) */
struct FAddS {
    float s;
    __device__ float operator()(float x) const { return x + s; }
};
struct FMulS {
    float s;
    __device__ float operator()(float x) const { return x * s; }
};

/* ---- formulas of the unary ops (src/ops/elementwise_ops.h) ------------------------------- */

/* un_<name>(x) = y, and for MPMD_UNARY_GRAD_OPS gr_<name>(gy, v) = the
 * cotangent of x, v being y or x as the list says; the CPU's formulas
 * (src/backend/cpu/elementwise.c) with CUDA's maths functions. */
__device__ __forceinline__ float un_neg(float x) { return -x; }
__device__ __forceinline__ float un_exp(float x) { return expf(x); }
__device__ __forceinline__ float un_log(float x) { return logf(x); }
__device__ __forceinline__ float un_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float un_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float un_rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float un_square(float x) { return x * x; }
/* max(x, 0), NaN passes through */
__device__ __forceinline__ float un_relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float un_gelu(float x) { return gelu1(x); }
/* 1 / (1 + e^-x); e^-x = inf gives 0, the limit */
__device__ __forceinline__ float un_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* x / (1 + e^-x) */
__device__ __forceinline__ float un_silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float gr_tanh(float g, float y) { return g * (1.0f - y * y); }
__device__ __forceinline__ float gr_sqrt(float g, float y) { return g * 0.5f / y; }
__device__ __forceinline__ float gr_rsqrt(float g, float y) { return -0.5f * g * (y * y * y); }
__device__ __forceinline__ float gr_square(float g, float x) { return 2.0f * x * g; }
__device__ __forceinline__ float gr_relu(float g, float y) { return y > 0.0f ? g : 0.0f; }
__device__ __forceinline__ float gr_gelu(float g, float x) { return g * gelu_grad1(x); }
__device__ __forceinline__ float gr_sigmoid(float g, float y) { return g * (y * (1.0f - y)); }
/* gy s (1 + x (1 - s)), s = sigmoid(x) */
__device__ __forceinline__ float gr_silu(float g, float x) {
    float s = 1.0f / (1.0f + expf(-x));
    return g * (s * (1.0f + x * (1.0f - s)));
}

/* max(x, 0) + log(1 + e^-|x|), as the CPU */
__device__ __forceinline__ float un_softplus(float x) {
    return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
}
__device__ __forceinline__ float gr_softplus(float g, float x) { return g * (1.0f / (1.0f + expf(-x))); }

/* A functor per formula: F_<name> (f(x)) and G_<name> (f(gy, v)). */
#define UN_FUNCTOR(name, ...)                                                                                \
    struct F_##name {                                                                                        \
        __device__ float operator()(float x) const { return un_##name(x); }                                  \
    };
#define GR_FUNCTOR(name, ...)                                                                                \
    UN_FUNCTOR(name)                                                                                         \
    struct G_##name {                                                                                        \
        __device__ float operator()(float g, float v) const { return gr_##name(g, v); }                      \
    };
MPMD_UNARY_OPS(UN_FUNCTOR)
MPMD_UNARY_GRAD_OPS(GR_FUNCTOR)

/* fused backward: f(gy, v) */
struct GWhereT {
    __device__ float operator()(float g, float c) const { return c != 0.0f ? g : 0.0f; }
}; /* v = the mask: gy where it is set */
struct GWhereF {
    __device__ float operator()(float g, float c) const { return c != 0.0f ? 0.0f : g; }
}; /* gy where the mask is clear */

/* ---- flat maps ---------------------------------------------------------------------------- */

/* o[i] = f(x[i]); a body of 16-byte vectors when vec, then the tail. */
template <typename T, class F> __global__ void map1_kernel(T *o, const T *x, int64_t n, int vec, F f) {
    constexpr int V = vec16<T>::n;
    typedef pack<T, V> P;
    int64_t t = gtid(), st = gstride(), nv = vec ? n >> vec16<T>::lg : 0;
    for (int64_t v = t; v < nv; v += st) {
        P a = reinterpret_cast<const P *>(x)[v], r;
#pragma unroll
        for (int k = 0; k < V; k++)
            r.v[k] = from_f32<T>(f(to_f32(a.v[k])));
        reinterpret_cast<P *>(o)[v] = r;
    }
    for (int64_t i = nv * V + t; i < n; i += st)
        o[i] = from_f32<T>(f(to_f32(x[i])));
}

/* o[i] = f(a[i sa], b[i sb]), sa and sb 0 or 1 (0: a single element). */
template <typename T, class F>
__global__ void map2_kernel(T *o, const T *a, int sa, const T *b, int sb, int64_t n, int vec, F f) {
    constexpr int V = vec16<T>::n;
    typedef pack<T, V> P;
    int64_t t = gtid(), st = gstride(), nv = vec ? n >> vec16<T>::lg : 0;
    for (int64_t v = t; v < nv; v += st) {
        if constexpr (std::is_same<T, float>::value) { /* the f32 code as it was (see load_pack) */
            float4 x, y, r;
            if (sa)
                x = reinterpret_cast<const float4 *>(a)[v];
            else
                x.x = x.y = x.z = x.w = a[0];
            if (sb)
                y = reinterpret_cast<const float4 *>(b)[v];
            else
                y.x = y.y = y.z = y.w = b[0];
            r.x = f(x.x, y.x);
            r.y = f(x.y, y.y);
            r.z = f(x.z, y.z);
            r.w = f(x.w, y.w);
            reinterpret_cast<float4 *>(o)[v] = r;
        } else {
            P x, y, r;
            if (sa)
                x = reinterpret_cast<const P *>(a)[v];
            else
                x = splat<V>(a[0]);
            if (sb)
                y = reinterpret_cast<const P *>(b)[v];
            else
                y = splat<V>(b[0]);
#pragma unroll
            for (int k = 0; k < V; k++)
                r.v[k] = from_f32<T>(f(to_f32(x.v[k]), to_f32(y.v[k])));
            reinterpret_cast<P *>(o)[v] = r;
        }
    }
    for (int64_t i = nv * V + t; i < n; i += st)
        o[i] = from_f32<T>(f(to_f32(a[sa ? i : 0]), to_f32(b[sb ? i : 0])));
}

/* Vectors and tail elements of a flat map: the threads it wants. */
template <typename T> static int64_t map_work(int64_t n, int vec) {
    int64_t nv = vec ? n >> vec16<T>::lg : 0, tail = n - nv * vec16<T>::n;
    return nv > tail ? nv : tail;
}

template <class F> static int run_map1(const mpmd_kargs *a, F f) {
    int d = common_dtype(a, 1);
    if (d < 0) return 1;
    return by_dtype(d, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        int64_t n = numel_of(&a->node->type);
        T *o = (T *)a->out;
        const T *x = (const T *)a->in[0];
        int vec = aligned16(o) && aligned16(x);
        map1_kernel<T, F>
            <<<grid_for(map_work<T>(n, vec)), THREADS, 0, mpmd_cuda_of(a)->stream>>>(o, x, n, vec, f);
        return mpmd_cuda_launched(a, a->node->op->name);
    });
}

/* ---- binary ops and broadcast_to ---------------------------------------------------------- */

/* BIN_EQ .. BIN_GE in mpmd_cmp's order */
enum {
#define BIN_ENUM(name, tol) BIN_##name,
    MPMD_BINARY_OPS(BIN_ENUM) BIN_COPY,
    BIN_MAXW,
    BIN_EQ,
    BIN_NE,
    BIN_LT,
    BIN_LE,
    BIN_GT,
    BIN_GE
};

/* The coalesced output (mpmd_bcast_plan_make, src/backend/shape_plan.c, as
 * on the CPU): groups outermost first, element strides of a and b per group,
 * 0 where broadcast. */

/* Kernel arguments for two or more groups: the outer groups and the last. */
struct bcast_args {
    int nouter;
    int64_t osize[MAX_OUTER], osa[MAX_OUTER], osb[MAX_OUTER];
    int64_t cols; /* size of the last group */
    int sa, sb;   /* the last group's strides, 0 or 1 */
    int64_t n;    /* outputs */
};

/* V consecutive outputs per thread, all in one row (cols % V == 0). When an
 * operand has stride 1 in the last group its outer strides are multiples of
 * cols, so its vector loads are aligned like its base pointer. */
template <class F, typename T, typename I, int V>
__global__ void bcast_kernel(T *o, const T *a, const T *b, bcast_args p, F f) {
    I nv = (I)(p.n / V), cols = (I)p.cols;
    I t = (I)(blockIdx.x * blockDim.x + threadIdx.x), st = (I)(gridDim.x * blockDim.x);
    for (I v = t; v < nv; v += st) {
        I i = v * V, row = i / cols, col = i - row * cols;
        I offa = p.sa ? col : 0, offb = p.sb ? col : 0;
#pragma unroll
        for (int q = MAX_OUTER - 1; q >= 0; q--) {
            if (q < p.nouter) {
                I idx;
                if (q == 0) {
                    idx = row;
                } else {
                    I sz = (I)p.osize[q], r = row / sz;
                    idx = row - r * sz;
                    row = r;
                }
                offa += idx * (I)p.osa[q];
                offb += idx * (I)p.osb[q];
            }
        }
        if constexpr (V > 1 && std::is_same<T, float>::value) { /* the f32 code as it was (see load_pack) */
            float4 x, y, r;
            if (p.sa)
                x = *reinterpret_cast<const float4 *>(a + offa);
            else
                x.x = x.y = x.z = x.w = a[offa];
            if (p.sb)
                y = *reinterpret_cast<const float4 *>(b + offb);
            else
                y.x = y.y = y.z = y.w = b[offb];
            r.x = f(x.x, y.x);
            r.y = f(x.y, y.y);
            r.z = f(x.z, y.z);
            r.w = f(x.w, y.w);
            *reinterpret_cast<float4 *>(o + i) = r;
        } else if constexpr (V > 1) {
            pack<T, V> x, y, r;
            if (p.sa)
                x = load_pack<V>(a + offa);
            else
                x = splat<V>(a[offa]);
            if (p.sb)
                y = load_pack<V>(b + offb);
            else
                y = splat<V>(b[offb]);
#pragma unroll
            for (int k = 0; k < V; k++)
                r.v[k] = from_f32<T>(f(to_f32(x.v[k]), to_f32(y.v[k])));
            *reinterpret_cast<pack<T, V> *>(o + i) = r;
        } else {
            o[i] = from_f32<T>(f(to_f32(a[offa]), to_f32(b[offb])));
        }
    }
}

template <typename T, int V, class F>
static void launch_bcast_v(cudaStream_t s, T *o, const T *a, const T *b, const bcast_args &p, F f) {
    /* 32-bit indices when every index and offset (< n, + one grid stride) fits */
    int small = p.n + (int64_t)MAX_GRID * THREADS < ((int64_t)1 << 31);
    unsigned g = grid_for(p.n / V);
    if (small)
        bcast_kernel<F, T, uint32_t, V><<<g, THREADS, 0, s>>>(o, a, b, p, f);
    else
        bcast_kernel<F, T, int64_t, V><<<g, THREADS, 0, s>>>(o, a, b, p, f);
}

/* width: outputs per thread, 1, 4, or (16-bit) 8 */
template <typename T, class F>
static void launch_bcast(cudaStream_t s, T *o, const T *a, const T *b, const bcast_args &p, int width, F f) {
    if constexpr (sizeof(T) == 2) {
        if (width == 8) return launch_bcast_v<T, 8>(s, o, a, b, p, f);
    }
    if (width == 4)
        launch_bcast_v<T, 4>(s, o, a, b, p, f);
    else
        launch_bcast_v<T, 1>(s, o, a, b, p, f);
}

/* The widest vector of a 16-byte (f32: 4, 16-bit: 8) or 8-byte (16-bit: 4)
 * one that divides the last group and to which every buffer read or written
 * in vectors is aligned; 1 when none. */
template <typename T>
static int bcast_width(const bcast_args &p, const void *o, const void *x, const void *y) {
    for (int w = vec16<T>::n; w >= 4; w /= 2) {
        size_t bytes = (size_t)w * sizeof(T);
        if (p.cols % w == 0 && aligned_to(o, bytes) && (!p.sa || aligned_to(x, bytes)) &&
            (!p.sb || aligned_to(y, bytes)))
            return w;
    }
    return 1;
}

template <typename T, class F>
static void launch_map2_f(cudaStream_t s, T *o, const T *x, int sa, const T *y, int sb, int64_t n, F f) {
    int vec = aligned16(o) && (!sa || aligned16(x)) && (!sb || aligned16(y));
    map2_kernel<T, F><<<grid_for(map_work<T>(n, vec)), THREADS, 0, s>>>(o, x, sa, y, sb, n, vec, f);
}

template <typename T>
static int launch_map2(const mpmd_kargs *a, int kind, T *o, const T *x, int sa, const T *y, int sb,
                       int64_t n) {
    cudaStream_t s = mpmd_cuda_of(a)->stream;
    switch (kind) {
#define BIN_MAP2_CASE(name, tol)                                                                             \
    case BIN_##name: launch_map2_f(s, o, x, sa, y, sb, n, B_##name()); break;
        MPMD_BINARY_OPS(BIN_MAP2_CASE)
    case BIN_COPY: launch_map2_f(s, o, x, sa, y, sb, n, FCopy()); break;
    case BIN_MAXW: launch_map2_f(s, o, x, sa, y, sb, n, FMaxW()); break;
    case BIN_EQ:
    case BIN_NE:
    case BIN_LT:
    case BIN_LE:
    case BIN_GT:
    case BIN_GE: launch_map2_f(s, o, x, sa, y, sb, n, FCmp{kind - BIN_EQ}); break;
    }
    return mpmd_cuda_launched(a, a->node->op->name);
}

template <typename T> static int run_binary_t(const mpmd_kargs *a, int kind) {
    int copy = kind == BIN_COPY;
    const mpmd_type *out = &a->node->type;
    mpmd_bcast_plan p;
    mpmd_bcast_plan_make(&p, out, a->in_type[0], copy ? NULL : a->in_type[1]);
    T *o = (T *)a->out;
    const T *x = (const T *)a->in[0], *y = (const T *)(copy ? a->in[0] : a->in[1]);
    int64_t n = numel_of(out);
    if (p.ng == 1) return launch_map2<T>(a, kind, o, x, (int)p.sa[0], y, (int)p.sb[0], n);

    bcast_args ba;
    memset(&ba, 0, sizeof ba);
    int last = p.ng - 1;
    ba.nouter = last;
    for (int k = 0; k < last; k++) {
        ba.osize[k] = p.size[k];
        ba.osa[k] = p.sa[k];
        ba.osb[k] = p.sb[k];
    }
    ba.cols = p.size[last];
    ba.sa = (int)p.sa[last];
    ba.sb = (int)p.sb[last];
    ba.n = n;
    int width = bcast_width<T>(ba, o, x, y);
    cudaStream_t s = mpmd_cuda_of(a)->stream;
    switch (kind) {
#define BIN_BCAST_CASE(name, tol)                                                                            \
    case BIN_##name: launch_bcast(s, o, x, y, ba, width, B_##name()); break;
        MPMD_BINARY_OPS(BIN_BCAST_CASE)
    case BIN_MAXW: launch_bcast(s, o, x, y, ba, width, FMaxW()); break;
    case BIN_EQ:
    case BIN_NE:
    case BIN_LT:
    case BIN_LE:
    case BIN_GT:
    case BIN_GE: launch_bcast(s, o, x, y, ba, width, FCmp{kind - BIN_EQ}); break;
    default: launch_bcast(s, o, x, y, ba, width, FCopy()); break;
    }
    return mpmd_cuda_launched(a, a->node->op->name);
}

static int run_binary(const mpmd_kargs *a, int kind) {
    int d = common_dtype(a, kind == BIN_COPY ? 1 : 2);
    if (d < 0) return 1;
    return by_dtype(d, [&](auto tag) { return run_binary_t<typename decltype(tag)::type>(a, kind); });
}

#define BIN_KERNEL(name, tol)                                                                                \
    static int k_##name(const mpmd_kargs *a) { return run_binary(a, BIN_##name); }
MPMD_BINARY_OPS(BIN_KERNEL)
static int k_max_weight(const mpmd_kargs *a) { return run_binary(a, BIN_MAXW); }
/* compare: the attribute cmp, checked by mpmd_compare */
static int k_compare(const mpmd_kargs *a) { return run_binary(a, BIN_EQ + mpmd_attr_cmp(a->node)); }
/* broadcast_to: out[i] = a[broadcast index of i] */
static int k_broadcast_to(const mpmd_kargs *a) { return run_binary(a, BIN_COPY); }

/* ---- unary ops ------------------------------------------------------------------------------ */

static int k_add_scalar(const mpmd_kargs *a) { return run_map1(a, FAddS{mpmd_attr_scalar(a->node)}); }
static int k_mul_scalar(const mpmd_kargs *a) { return run_map1(a, FMulS{mpmd_attr_scalar(a->node)}); }
#define UN_KERNEL(name, ...)                                                                                 \
    static int k_##name(const mpmd_kargs *a) { return run_map1(a, F_##name()); }
MPMD_UNARY_OPS(UN_KERNEL)
MPMD_UNARY_GRAD_OPS(UN_KERNEL)

/* ---- fused backward ops: out = f(gy, v), same shape and dtype ---------------------------------- */

template <class G> static int run_grad(const mpmd_kargs *a, G f) {
    int d = common_dtype(a, 2);
    if (d < 0) return 1;
    return by_dtype(d, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        launch_map2_f(mpmd_cuda_of(a)->stream, (T *)a->out, (const T *)a->in[0], 1, (const T *)a->in[1], 1,
                      numel_of(&a->node->type), f);
        return mpmd_cuda_launched(a, a->node->op->name);
    });
}

#define GR_KERNEL(name, ...)                                                                                 \
    static int k_##name##_grad(const mpmd_kargs *a) { return run_grad(a, G_##name()); }
MPMD_UNARY_GRAD_OPS(GR_KERNEL)
/* where_grad(gy, cond), attribute side: 0: gy where cond != 0, else 0; 1: the other way */
static int k_where_grad(const mpmd_kargs *a) {
    return mpmd_attr_where_side(a->node) ? run_grad(a, GWhereF()) : run_grad(a, GWhereT());
}

/* ---- where: out = cond != 0 ? a : b, three operands of out's shape ------------------------------ */

/* A flat select: 16-byte vectors when vec, then the tail. Each element reads
 * its three inputs before writing, so out == a (in place) is correct. */
template <typename T>
__global__ void where_kernel(T *o, const T *c, const T *a, const T *b, int64_t n, int vec) {
    constexpr int V = vec16<T>::n;
    typedef pack<T, V> P;
    int64_t t = gtid(), st = gstride(), nv = vec ? n >> vec16<T>::lg : 0;
    for (int64_t v = t; v < nv; v += st) {
        P m = reinterpret_cast<const P *>(c)[v], x = reinterpret_cast<const P *>(a)[v],
          y = reinterpret_cast<const P *>(b)[v], r;
#pragma unroll
        for (int k = 0; k < V; k++)
            r.v[k] = from_f32<T>(to_f32(m.v[k]) != 0.0f ? to_f32(x.v[k]) : to_f32(y.v[k]));
        reinterpret_cast<P *>(o)[v] = r;
    }
    for (int64_t i = nv * V + t; i < n; i += st)
        o[i] = from_f32<T>(to_f32(c[i]) != 0.0f ? to_f32(a[i]) : to_f32(b[i]));
}

static int k_where(const mpmd_kargs *a) {
    int d = common_dtype(a, 3);
    if (d < 0) return 1;
    return by_dtype(d, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        int64_t n = numel_of(&a->node->type);
        T *o = (T *)a->out;
        const T *c = (const T *)a->in[0], *x = (const T *)a->in[1], *y = (const T *)a->in[2];
        int vec = aligned16(o) && aligned16(c) && aligned16(x) && aligned16(y);
        where_kernel<T>
            <<<grid_for(map_work<T>(n, vec)), THREADS, 0, mpmd_cuda_of(a)->stream>>>(o, c, x, y, n, vec);
        return mpmd_cuda_launched(a, "where");
    });
}

/* ---- dropout ------------------------------------------------------------------------------------- */

/* Element i of microbatch mb keeps its value, times scale = 1 / (1 - rate),
 * when the word philox(key, counter)[i % 4] >= thr (rate 2^32), counter =
 * (i / 4 as 64 bits, mb, stream); else 0. The CPU's mask, bit for bit. A
 * thread per group of 4 (one 4-element vector when vec and the group is
 * whole); key: the two i32 words on the device. */
template <typename T>
__global__ void dropout_kernel(T *o, const T *x, int64_t n, const int32_t *key, uint32_t mb, uint32_t stream,
                               uint32_t thr, float scale, int vec) {
    const uint32_t k[2] = {(uint32_t)key[0], (uint32_t)key[1]};
    int64_t groups = (n + 3) / 4;
    for (int64_t blk = gtid(); blk < groups; blk += gstride()) {
        uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)((uint64_t)blk >> 32), mb, stream}, r[4];
        mpmd_philox4x32(ctr, k, r);
        int64_t i0 = blk * 4;
        if (vec && i0 + 4 <= n) {
            pack<T, 4> v = load_pack<4>(x + i0), w;
#pragma unroll
            for (int j = 0; j < 4; j++)
                w.v[j] = from_f32<T>(r[j] >= thr ? to_f32(v.v[j]) * scale : 0.0f);
            *reinterpret_cast<pack<T, 4> *>(o + i0) = w;
        } else {
            for (int j = 0; j < 4 && i0 + j < n; j++)
                o[i0 + j] = from_f32<T>(r[j] >= thr ? to_f32(x[i0 + j]) * scale : 0.0f);
        }
    }
}

static int k_dropout(const mpmd_kargs *a) {
    int d = common_dtype(a, 1);
    if (d < 0) return 1;
    if (a->in_type[1]->dtype != MPMD_I32) {
        snprintf(a->err, a->err_len, "dropout: the key is %s; it must be i32",
                 mpmd_dtype_name(a->in_type[1]->dtype));
        return 1;
    }
    float rate = mpmd_attr_dropout_rate(a->node);
    uint32_t thr = mpmd_dropout_threshold(rate), mb = (uint32_t)a->mb,
             stream = (uint32_t)mpmd_attr_dropout_stream(a->node);
    float scale = 1.0f / (1.0f - rate);
    return by_dtype(d, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        int64_t n = numel_of(&a->node->type);
        T *o = (T *)a->out;
        const T *x = (const T *)a->in[0];
        int vec = aligned_to(o, 4 * sizeof(T)) && aligned_to(x, 4 * sizeof(T));
        dropout_kernel<T><<<grid_for((n + 3) / 4), THREADS, 0, mpmd_cuda_of(a)->stream>>>(
            o, x, n, (const int32_t *)a->in[1], mb, stream, thr, scale, vec);
        return mpmd_cuda_launched(a, "dropout");
    });
}

/* ---- the table ----------------------------------------------------------------------------------- */

#define F16S (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_elementwise_kernels[] = {
    {&mpmd_op_add_scalar, k_add_scalar, NULL, F16S},
    {&mpmd_op_mul_scalar, k_mul_scalar, NULL, F16S},
    {&mpmd_op_broadcast_to, k_broadcast_to, NULL, F16S},
    {&mpmd_op_max_weight, k_max_weight, NULL, F16S},
    {&mpmd_op_compare, k_compare, NULL, F16S},
    {&mpmd_op_where, k_where, NULL, F16S},
    {&mpmd_op_where_grad, k_where_grad, NULL, F16S},
    {&mpmd_op_dropout, k_dropout, NULL, F16S},
#define UN_ROW(name, ...) {&mpmd_op_##name, k_##name, NULL, F16S},
#define GR_ROW(name, ...)                                                                                    \
    {&mpmd_op_##name, k_##name, NULL, F16S}, {&mpmd_op_##name##_grad, k_##name##_grad, NULL, F16S},
#define BIN_ROW(name, tol) {&mpmd_op_##name, k_##name, NULL, F16S},
    MPMD_BINARY_OPS(BIN_ROW) MPMD_UNARY_OPS(UN_ROW) MPMD_UNARY_GRAD_OPS(GR_ROW){0, 0, 0, 0},
};
