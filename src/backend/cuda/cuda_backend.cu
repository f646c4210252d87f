/* The CUDA backend: one GPU, stream and cuBLAS handle per rank.
 *
 * Rank r uses device r % devices (MPMD_CUDA_DEVICE=k puts every rank on
 * device k). Buffers are cudaMalloc'ed (the executors allocate them at set
 * up and keep them, so a step allocates nothing once it has run); copies and
 * kernels are queued on the rank's stream; an event recorded there lets
 * another rank's stream wait for a value without the host waiting.
 *
 * Failures: a launch error is reported by the kernel that met it; a fault
 * while the queue runs, and the run-time errors kernels record in the
 * instance's device flag (an id out of range), surface at the next sync,
 * which every step ends with, and name the rank.
 *
 * Determinism: cuBLAS gets a fixed workspace per handle and the default
 * (non-atomic) reduction modes; every kernel here reduces in a fixed order.
 *
 * 16-bit floats: a kernel that does not take bf16 or f16 natively (its
 * table entry says which it takes) gets its 16-bit operands widened to f32
 * in stream-ordered temporaries and its output rounded back, the CPU's rule
 * (compute in f32, round once on store).
 */
#include "cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int g_devices = -1; /* device count, once */

static int device_count(char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) snprintf(why, len, "no usable CUDA device (%s)", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why) snprintf(why, len, "no CUDA device");
    return n;
}

static int cuda_available(char *why, size_t len) {
    if (g_devices < 0) g_devices = device_count(NULL, 0);
    if (g_devices > 0) return 0;
    device_count(why, len);
    return 1;
}

static const char *blas_status(cublasStatus_t s) { return cublasGetStatusString(s); }

#define WORKSPACE_BYTES ((size_t)32 << 20)

static void cuda_close(void *p) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!d) return;
    cudaSetDevice(d->device);
    if (d->stream) cudaStreamSynchronize(d->stream);
    if (d->blas) cublasDestroy(d->blas);
    if (d->workspace) cudaFree(d->workspace);
    if (d->flag) cudaFree(d->flag);
    if (d->sumsq) cudaFree(d->sumsq);
    free(d->bufs);
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d);
}

static void *cuda_open(int rank, int nthreads, char *err, size_t len) {
    char why[256];
    int n = device_count(why, sizeof why);
    if (n == 0) {
        snprintf(err, len, "%s", why);
        return NULL;
    }
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, len, "out of memory opening the cuda backend");
        return NULL;
    }
    d->rank = rank;
    d->device = rank % n;
    const char *pick = getenv("MPMD_CUDA_DEVICE");
    if (pick && *pick) {
        char *end;
        long k = strtol(pick, &end, 10);
        if (*end || k < 0 || k >= n) {
            snprintf(err, len, "MPMD_CUDA_DEVICE=%s: expected a device number in [0, %d)", pick, n);
            free(d);
            return NULL;
        }
        d->device = (int)k;
    }
    const char *tf = getenv("MPMD_CUDA_TF32");
    d->tf32 = tf && tf[0] == '1';
    const char *gr = getenv("MPMD_CUDA_GRAPHS");
    d->graphs = !(gr && gr[0] == '0');
    cudaError_t e;
    cublasStatus_t b;
    if ((e = cudaSetDevice(d->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&d->flag, 4 * sizeof(int))) != cudaSuccess ||
        (e = cudaMemsetAsync(d->flag, 0, 4 * sizeof(int), d->stream)) != cudaSuccess ||
        (e = cudaMalloc(&d->workspace, WORKSPACE_BYTES)) != cudaSuccess) {
        snprintf(err, len, "rank %d, GPU %d: %s", rank, d->device, cudaGetErrorString(e));
        cuda_close(d);
        return NULL;
    }
    d->flag_info = d->flag + 1;
    /* Ranks on different GPUs hand each other device buffers (a moved send
     * goes to the receiver, which computes on it): this device's kernels
     * must reach the others' memory. Without peer access that cannot work;
     * say so instead of faulting later. */
    for (int j = 0; j < n && !(pick && *pick); j++) {
        int can = 0;
        if (j == d->device) continue;
        if (cudaDeviceCanAccessPeer(&can, d->device, j) != cudaSuccess || !can) {
            snprintf(err, len,
                     "rank %d: GPU %d cannot access the memory of GPU %d (no peer access), but in-process "
                     "ranks on "
                     "different GPUs exchange device buffers; set MPMD_CUDA_DEVICE=%d to run every rank on "
                     "one GPU",
                     rank, d->device, j, d->device);
            cuda_close(d);
            return NULL;
        }
        cudaDeviceEnablePeerAccess(j, 0); /* an error here means it is already on */
    }
    cudaGetLastError();
    d->workspace_bytes = WORKSPACE_BYTES;
    if ((b = cublasCreate(&d->blas)) != CUBLAS_STATUS_SUCCESS ||
        (b = cublasSetStream(d->blas, d->stream)) != CUBLAS_STATUS_SUCCESS ||
        (b = cublasSetWorkspace(d->blas, d->workspace, d->workspace_bytes)) != CUBLAS_STATUS_SUCCESS ||
        /* f32 products stay f32 unless TF32 is asked for; 16-bit products
         * accumulate in f32, split-K reductions included */
        (b = cublasSetMathMode(d->blas,
                               (cublasMath_t)((d->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))) !=
            CUBLAS_STATUS_SUCCESS ||
        (b = cublasSetAtomicsMode(d->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, len, "rank %d, GPU %d: cuBLAS set-up failed: %s", rank, d->device, blas_status(b));
        cuda_close(d);
        return NULL;
    }
    return d;
}

static void cuda_enter(void *p) { cudaSetDevice(((mpmd_cuda_dev *)p)->device); }

enum { CUDA_GRANULE = 256 };

static void *cuda_alloc(void *p, size_t bytes) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    void *ptr = NULL;
    /* round up to 256 bytes so that vectorised kernels may read whole words */
    size_t b = ((bytes ? bytes : 1) + CUDA_GRANULE - 1) / CUDA_GRANULE * CUDA_GRANULE;
    if (d->nbufs == d->capbufs) {
        int cap = d->capbufs ? 2 * d->capbufs : 64;
        mpmd_cuda_buf *nb = (mpmd_cuda_buf *)realloc(d->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return NULL;
        d->bufs = nb, d->capbufs = cap;
    }
    if (cudaMalloc(&ptr, b) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error state of a failed allocation */
        return NULL;
    }
    d->bufs[d->nbufs].p = ptr;
    d->bufs[d->nbufs++].bytes = b;
    d->in_use += b;
    if (d->in_use > d->peak) d->peak = d->in_use;
    return ptr;
}

static void cuda_free(void *p, void *ptr) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!ptr) return;
    for (int i = d->nbufs - 1; i >= 0; i--)
        if (d->bufs[i].p == ptr) {
            d->in_use -= d->bufs[i].bytes;
            d->bufs[i] = d->bufs[--d->nbufs];
            break;
        }
    cudaFree(ptr);
}

static void cuda_memory(void *p, size_t *peak, size_t *own) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    *peak = d->peak;
    *own = d->workspace_bytes + 4 * sizeof(int); /* the cuBLAS workspace, the error words */
}

static int cuda_upload(void *p, void *dst, const void *src, size_t bytes) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!bytes) return 0;
    /* pageable host memory: the call returns once src has been read */
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream) != cudaSuccess ||
           cudaStreamSynchronize(d->stream) != cudaSuccess;
}

static int cuda_download(void *p, void *dst, const void *src, size_t bytes) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!bytes) return 0;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream) != cudaSuccess ||
           cudaStreamSynchronize(d->stream) != cudaSuccess;
}

/* src may be on another GPU (a value received from a rank there): the
 * unified address space says where each side is. */
static int cuda_copy(void *p, void *dst, const void *src, size_t bytes) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!bytes || dst == src) return 0;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->stream) != cudaSuccess;
}

static const mpmd_kernel *const tables[] = {
    mpmd_cuda_core_kernels,      mpmd_cuda_elementwise_kernels, mpmd_cuda_sum_to_kernels,
    mpmd_cuda_reduce_kernels,    mpmd_cuda_shape_kernels,       mpmd_cuda_nn_kernels,
    mpmd_cuda_norm_kernels,      mpmd_cuda_embed_kernels,       mpmd_cuda_optim_kernels,
    mpmd_cuda_attention_kernels,
};

static const mpmd_kernel *cuda_find(const mpmd_op_desc *op) {
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (const mpmd_kernel *e = tables[t]; e->op; e++)
            if (e->op == op) return e;
    return NULL;
}

/* ---- 16-bit floats ------------------------------------------------------------ */

__global__ void convert_kernel(void *dst, int to, const void *src, int from, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mpmd_cuda_st(dst, to, i, mpmd_cuda_ld(src, from, i));
}

static unsigned grid_for(int64_t n);

static int is16(mpmd_dtype d) { return d == MPMD_BF16 || d == MPMD_F16; }

/* Four elements a thread, in one access per side (16 bytes of f32, 8 of a
 * 16-bit type): the casts of a step (every parameter to the compute dtype,
 * every gradient back) move a few hundred MB and run at memory speed. */
template <typename T> struct alignas(4 * sizeof(T)) quad { T v[4]; };

template <typename S, typename D> __global__ void convert4_kernel(D *dst, const S *src, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        quad<S> x = ((const quad<S> *)src)[i];
        quad<D> y;
#pragma unroll
        for (int k = 0; k < 4; k++)
            y.v[k] = from_f32<D>(to_f32(x.v[k]));
        ((quad<D> *)dst)[i] = y;
    }
}

template <typename S, typename D>
static void convert4(mpmd_cuda_dev *d, void *dst, const void *src, int64_t n4) {
    convert4_kernel<S, D><<<grid_for(n4), 256, 0, d->stream>>>((D *)dst, (const S *)src, n4);
}

/* The f32 <-> 16-bit pairs in quads; 0 when the pair has no quad kernel. */
static int convert_quads(mpmd_cuda_dev *d, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from,
                         int64_t n4) {
    if (from == MPMD_F32 && to == MPMD_BF16) return convert4<float, __nv_bfloat16>(d, dst, src, n4), 1;
    if (from == MPMD_F32 && to == MPMD_F16) return convert4<float, __half>(d, dst, src, n4), 1;
    if (from == MPMD_BF16 && to == MPMD_F32) return convert4<__nv_bfloat16, float>(d, dst, src, n4), 1;
    if (from == MPMD_F16 && to == MPMD_F32) return convert4<__half, float>(d, dst, src, n4), 1;
    return 0;
}

extern "C" int mpmd_cuda_convert(mpmd_cuda_dev *d, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from,
                                 int64_t n) {
    if (!mpmd_dtype_is_float(to) || !mpmd_dtype_is_float(from)) return 1;
    if (n == 0) return 0;
    if (to == from)
        return cudaMemcpyAsync(dst, src, (size_t)n * mpmd_dtype_size(to), cudaMemcpyDeviceToDevice,
                               d->stream) != cudaSuccess;
    /* the same roundings either way: quads where both sides are aligned for
     * them, then the rest one by one */
    int64_t done = 0;
    const size_t qa = 4 * mpmd_dtype_size(from), qb = 4 * mpmd_dtype_size(to);
    if (n >= 4 && (uintptr_t)src % qa == 0 && (uintptr_t)dst % qb == 0 &&
        convert_quads(d, dst, to, src, from, n / 4))
        done = n / 4 * 4;
    if (done < n)
        convert_kernel<<<grid_for(n - done), 256, 0, d->stream>>>(
            (char *)dst + (size_t)done * mpmd_dtype_size(to), (int)to,
            (const char *)src + (size_t)done * mpmd_dtype_size(from), (int)from, n - done);
    return 0;
}

static int cuda_convert(void *p, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from, int64_t n) {
    return mpmd_cuda_convert((mpmd_cuda_dev *)p, dst, to, src, from, n);
}

/* k on f32 copies of the 16-bit operands it does not take (see the top), in
 * the planned workspace. */
static int cuda_launch(void *p, const mpmd_kernel *k, const mpmd_kargs *a) {
    if (mpmd_kernel_native(k, a->g, a->node)) return k->fn(a);
    int rc = mpmd_launch_widened(p, k, a, cuda_convert);
    if (!rc) rc = mpmd_cuda_launched(a, a->node->op->name);
    return rc;
}

/* ---- loop fold and replica combine ----------------------------------------- */

__global__ void fold_add(float *acc, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = acc[i] + x[i];
}

__global__ void fold_max(float *acc, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = x[i] > acc[i] ? x[i] : acc[i];
}

/* 16-bit: in f32, rounded on store. */
__global__ void fold16(void *acc, const void *x, int dt, int add, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float a = mpmd_cuda_ld(acc, dt, i), b = mpmd_cuda_ld(x, dt, i);
        mpmd_cuda_st(acc, dt, i, add ? a + b : (b > a ? b : a));
    }
}

static unsigned grid_for(int64_t n) {
    unsigned b = mpmd_cuda_blocks(n, 256);
    return b > 65535u * 8 ? 65535u * 8 : b;
}

/* The CPU's order: acc = x_0, then acc = acc + x_m (or max) elementwise. */
static int cuda_fold(void *p, const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x,
                     int mb) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    const mpmd_type *xt = &g->nodes[reduce->in[0]].type;
    size_t bytes = mpmd_type_bytes(xt);
    int64_t cnt = mpmd_type_numel(xt);
    if (reduce->ia[0] == MPMD_REDUCE_CONCAT) return cuda_copy(d, (char *)acc + (size_t)mb * bytes, x, bytes);
    if (mb == 0) return cuda_copy(d, acc, x, bytes);
    if (cnt == 0) return 0;
    if (is16(xt->dtype))
        fold16<<<grid_for(cnt), 256, 0, d->stream>>>(acc, x, (int)xt->dtype, reduce->ia[0] == MPMD_REDUCE_ADD,
                                                     cnt);
    else if (reduce->ia[0] == MPMD_REDUCE_ADD)
        fold_add<<<grid_for(cnt), 256, 0, d->stream>>>((float *)acc, (const float *)x, cnt);
    else
        fold_max<<<grid_for(cnt), 256, 0, d->stream>>>((float *)acc, (const float *)x, cnt);
    return cudaGetLastError() != cudaSuccess;
}

/* out = b_0, then out += b_d (or max) for d = 1.., then (ADD) out *= 1/R:
 * the CPU's order, one thread per element. */
__global__ void combine_kernel(void *out, const void *const *bufs, int dt, int replicas, int add, float inv,
                               int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = mpmd_cuda_ld(bufs[0], dt, i);
        for (int r = 1; r < replicas; r++) {
            float b = mpmd_cuda_ld(bufs[r], dt, i);
            v = add ? v + b : (b > v ? b : v);
        }
        mpmd_cuda_st(out, dt, i, add ? v * inv : v);
    }
}

static int cuda_combine(void *p, const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas,
                        void *out, int64_t count) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    int64_t cnt = count;
    if (cnt == 0) return 0;
    /* the buffer list travels as a kernel argument array on the device */
    const void **dbufs = NULL;
    if (cudaMalloc((void **)&dbufs, (size_t)replicas * sizeof *dbufs) != cudaSuccess) return 1;
    int bad = cudaMemcpyAsync(dbufs, bufs, (size_t)replicas * sizeof *dbufs, cudaMemcpyHostToDevice,
                              d->stream) != cudaSuccess;
    if (!bad) {
        int add = n->ia[0] == MPMD_REDUCE_ADD;
        combine_kernel<<<grid_for(cnt), 256, 0, d->stream>>>(out, dbufs, (int)n->type.dtype, replicas, add,
                                                             1.0f / (float)replicas, cnt);
        bad = cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(d->stream) != cudaSuccess;
    }
    cudaFree(dbufs);
    return bad;
}

/* ---- sync and events -------------------------------------------------------- */

static int cuda_sync(void *p, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    cudaError_t e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess) {
        snprintf(err, len, "GPU %d: a kernel failed: %s (%s)", d->device, cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 1;
    }
    int flag[4];
    if ((e = cudaMemcpy(flag, d->flag, sizeof flag, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        snprintf(err, len, "GPU %d: reading the error flag failed: %s", d->device, cudaGetErrorString(e));
        return 1;
    }
    if (flag[0] == MPMD_CUDA_FLAG_NONE) return 0;
    /* cleared in the stream's order, before any later kernel can raise it */
    cudaMemsetAsync(d->flag, 0, 4 * sizeof(int), d->stream);
    cudaStreamSynchronize(d->stream);
    if (flag[0] == MPMD_CUDA_FLAG_EMBEDDING_ID)
        snprintf(err, len, "embedding: id %d at position %d is outside [0, %d)", flag[1], flag[2], flag[3]);
    else if (flag[0] == MPMD_CUDA_FLAG_LABEL)
        snprintf(err, len, "cross_entropy: label %d at row %d is outside [0, %d)", flag[1], flag[2], flag[3]);
    else
        snprintf(err, len, "a kernel reported error %d", flag[0]);
    return 1;
}

static void *cuda_event_record(void *p) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
        if (cudaEventRecord(ev, d->stream) == cudaSuccess) return (void *)ev;
        cudaEventDestroy(ev);
    }
    /* no event: finish the queue, so that NULL ("complete") is true */
    cudaStreamSynchronize(d->stream);
    return NULL;
}

static int cuda_event_wait(void *p, void *ev) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    return cudaStreamWaitEvent(d->stream, (cudaEvent_t)ev, 0) != cudaSuccess;
}

static void cuda_event_free(void *p, void *ev) {
    if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

/* ---- timing marks ------------------------------------------------------------- */

static void *cuda_mark(void *p) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    cudaEvent_t ev;
    if (cudaEventCreate(&ev) != cudaSuccess) return cudaGetLastError(), (void *)NULL;
    if (cudaEventRecord(ev, d->stream) == cudaSuccess) return (void *)ev;
    cudaGetLastError(); /* not left for the next kernel's check to report */
    cudaEventDestroy(ev);
    return NULL;
}

static double cuda_mark_seconds(void *p, void *from, void *to) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 1e-3 * (double)ms;
}

/* ---- recorded work: CUDA graphs ------------------------------------------------
 * The rank's stream is captured (thread-local mode: other ranks' threads go
 * on queueing their own work) into a graph, instantiated once and launched
 * on the stream at each replay. A capture with nothing in it gives a token
 * whose replay queues nothing. MPMD_CUDA_GRAPHS=0 declines every capture
 * (the interpreter then launches kernel by kernel). */

static char empty_graph; /* the recording of a segment that queued nothing */

static int cuda_capture_begin(void *p, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (!d->graphs) return -1;
    cudaError_t e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, len, "GPU %d: starting a CUDA graph capture failed: %s", d->device,
                 cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static void *cuda_capture_end(void *p, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaStreamEndCapture(d->stream, &g);
    size_t nodes = 0;
    if (e == cudaSuccess && (e = cudaGraphGetNodes(g, NULL, &nodes)) == cudaSuccess && nodes > 0)
        e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, len, "GPU %d: recording a CUDA graph failed: %s", d->device, cudaGetErrorString(e));
        return NULL;
    }
    return nodes > 0 ? (void *)x : (void *)&empty_graph;
}

static int cuda_replay(void *p, void *graph, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    if (graph == (void *)&empty_graph) return 0;
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, d->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, len, "GPU %d: launching a CUDA graph failed: %s", d->device, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

static void cuda_graph_free(void *p, void *graph) {
    if (graph && graph != (void *)&empty_graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

extern "C" const mpmd_backend mpmd_backend_cuda = {
    "cuda",    /* name */
    0,         /* host_memory */
    MPMD_BF16, /* compute: tensor cores */
    0,         /* fused_attention: the composed ops run on cuBLAS */
    {
        cuda_available,
        NULL, /* room: the CUDA libraries' host mappings are not checked */
        cuda_open,
        cuda_close,
        cuda_enter,
        cuda_memory,
        cuda_host_alloc,
        cuda_host_free,
    }, /* device */
    {
        cuda_alloc,
        cuda_free,
        CUDA_GRANULE,
        cuda_upload,
        cuda_download,
        cuda_copy,
        cuda_sync,
        cuda_event_record,
        cuda_event_wait,
        cuda_event_free,
        cuda_mark,
        cuda_mark_seconds,
        cuda_event_free,
        cuda_capture_begin,
        cuda_capture_end,
        cuda_replay,
        cuda_graph_free,
    }, /* queue */
    {
        cuda_find,
        cuda_fold,
        cuda_combine,
        mpmd_cuda_model_combine,
        mpmd_cuda_model_local,
        mpmd_cuda_sumsq,
        cuda_launch,
    }, /* kernels */
};
