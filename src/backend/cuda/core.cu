/* CUDA kernels of the structural ops that compute something, and the matrix
 * product.
 *
 * A stage marker is the identity: a device-to-device copy on the stream
 * unless the planner made it in place.
 *
 * matmul goes through cuBLAS on the instance's handle (bound by the backend
 * to the stream and a fixed workspace, so the same shapes run the same
 * algorithm and give the same bits). cuBLAS is column-major and our tensors
 * are row-major: a row-major [M, N] C is the column-major [N, M] C^T, so the
 * kernel asks for C^T = op(B)^T op(A)^T, i.e. it passes B first and swaps M
 * and N; the transpose flags carry over unchanged. As on the CPU, a 2-D b
 * with an untransposed a is one product with the batch folded into M;
 * otherwise one strided-batched product (b's stride 0 when it is shared).
 * f32 with f32 accumulation, or TF32 tensor cores when the instance allows
 * them (MPMD_CUDA_TF32=1); bf16 and f16 operands on tensor cores with f32
 * accumulation, the result rounded once to the operands' dtype.
 *
 * cast converts between float dtypes through f32 (mpmd_cuda_convert).
 */
#include "cuda.h"

#include "backend/shape_plan.h"

extern "C" {
#include "ops/nn.h"
}

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ---- stage marker ---------------------------------------------------------------- */

static int k_identity(const mpmd_kargs *a) {
    if (a->out == a->in[0]) return 0;
    size_t bytes = mpmd_type_bytes(&a->node->type);
    if (bytes == 0) return 0;
    cudaError_t e =
        cudaMemcpyAsync(a->out, a->in[0], bytes, cudaMemcpyDeviceToDevice, mpmd_cuda_of(a)->stream);
    if (e != cudaSuccess) {
        snprintf(a->err, a->err_len, "%s: device copy of %zu bytes failed: %s", a->node->op->name, bytes,
                 cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

/* ---- matmul ---------------------------------------------------------------------- */

static int fits_int(int64_t x) { return x >= 0 && x <= INT_MAX; }

static int blas_failed(const mpmd_kargs *a, cublasStatus_t s, int64_t m, int64_t n, int64_t k,
                       int64_t batch) {
    snprintf(a->err, a->err_len,
             "matmul: cuBLAS failed on [%lld x %lld] x [%lld x %lld] (batch %lld): %s (%s)", (long long)m,
             (long long)k, (long long)k, (long long)n, (long long)batch, cublasGetStatusName(s),
             cublasGetStatusString(s));
    return 1;
}

/* ---- products with misaligned rows ---------------------------------------------
 * cuBLAS's fast Hopper kernels want rows whose starts are 16-byte aligned
 * and dimensions that are multiples of 8; GPT-2's 50257-word vocabulary
 * gives neither, and its logits products ran 6 to 9 times slower than with
 * 50304 words (16384 x 50257 x 768: 97 TFLOP/s against 802 on an H100;
 * the other two 145 and 155 against 966 and 955). A large product with
 * such an operand therefore runs as a padded problem in the kernel's
 * scratch: each dimension that is not a multiple of 8 grows to a multiple
 * of 64, the operands that change are copied in with zeros in the new rows
 * and columns (which add exact zeros to every sum), and the result's part
 * is copied out. The copies are exact, one pass over each matrix; the
 * result's bits are fixed by the shapes, as any product's. Small products
 * are not worth the copies. */

enum { PAD_ROW_BYTES = 128 };
#define PAD_MIN_FLOPS 1e9

typedef struct pad_plan {
    int a, b, c;                /* operand copied (A, B in; C out) */
    int64_t m, n, k;            /* the problem as it runs */
    int64_t lda, ldb, ldc;      /* its leading dimensions */
    size_t off_a, off_b, off_c; /* places in the scratch */
    size_t bytes;
} pad_plan;

static int misaligned(int64_t ld, size_t es) { return ((size_t)ld * es) % 16 != 0; }
static int64_t padded_ld(int64_t cols, size_t es) {
    int64_t q = PAD_ROW_BYTES / (int64_t)es;
    return (cols + q - 1) / q * q;
}
static int64_t padded_dim(int64_t d) { return d % 8 ? (d + 63) / 64 * 64 : d; }
static size_t round256(size_t x) { return (x + 255) / 256 * 256; }

/* 1 when the product of md (elements of es bytes) runs padded. */
static int pad_plan_make(const mpmd_matmul_dims *md, size_t es, pad_plan *p) {
    memset(p, 0, sizeof *p);
    p->m = md->m, p->n = md->n, p->k = md->k;
    p->lda = md->lda, p->ldb = md->ldb, p->ldc = md->ldc;
    if (md->batch != 1 || 2.0 * (double)md->m * (double)md->n * (double)md->k < PAD_MIN_FLOPS) return 0;
    const int64_t m = padded_dim(md->m), n = padded_dim(md->n), k = padded_dim(md->k);
    p->a = misaligned(md->lda, es) || m != md->m || k != md->k;
    p->b = misaligned(md->ldb, es) || k != md->k || n != md->n;
    p->c = misaligned(md->ldc, es) || m != md->m || n != md->n;
    if (!p->a && !p->b && !p->c) return 0;
    p->m = m, p->n = n, p->k = k;
    size_t off = 0;
    if (p->a) {
        p->lda = padded_ld(md->tra ? m : k, es), p->off_a = off;
        off += round256((size_t)((md->tra ? k : m) * p->lda) * es);
    }
    if (p->b) {
        p->ldb = padded_ld(md->trb ? k : n, es), p->off_b = off;
        off += round256((size_t)((md->trb ? n : k) * p->ldb) * es);
    }
    if (p->c) p->ldc = padded_ld(n, es), p->off_c = off, off += round256((size_t)(m * p->ldc) * es);
    p->bytes = off;
    return 1;
}

static size_t scratch_matmul(const mpmd_graph *g, const mpmd_node *n) {
    mpmd_matmul_dims md;
    mpmd_matmul_dims_make(&md, &g->nodes[n->in[0]].type, &g->nodes[n->in[1]].type, mpmd_matmul_flags(n));
    pad_plan p;
    return pad_plan_make(&md, mpmd_dtype_size(n->type.dtype), &p) ? p.bytes : 0;
}

/* dst (rows of dld elements) = src (rows of sld), `rows` rows of `cols` elements. */
static cudaError_t copy_rows(void *dst, int64_t dld, const void *src, int64_t sld, int64_t cols, int64_t rows,
                             size_t es, cudaStream_t st) {
    return cudaMemcpy2DAsync(dst, (size_t)dld * es, src, (size_t)sld * es, (size_t)cols * es, (size_t)rows,
                             cudaMemcpyDeviceToDevice, st);
}

/* An operand of rows x cols (leading dimension sld) into a padded copy of
 * prows rows of dld elements: the values, then zeros to the right of them
 * and below. */
static cudaError_t copy_padded(char *dst, int64_t dld, int64_t prows, const void *src, int64_t sld,
                               int64_t cols, int64_t rows, size_t es, cudaStream_t st) {
    cudaError_t e = cudaSuccess;
    if (dld > cols)
        e = cudaMemset2DAsync(dst + (size_t)cols * es, (size_t)dld * es, 0, (size_t)(dld - cols) * es,
                              (size_t)rows, st);
    if (e == cudaSuccess && prows > rows)
        e = cudaMemsetAsync(dst + (size_t)(rows * dld) * es, 0, (size_t)((prows - rows) * dld) * es, st);
    if (e == cudaSuccess) e = copy_rows(dst, dld, src, sld, cols, rows, es, st);
    return e;
}

/* C [..., M, N] = op(A) op(B) (see mpmd_matmul in src/ops/nn.c). */
static int k_matmul(const mpmd_kargs *a) {
    mpmd_cuda_dev *d = mpmd_cuda_of(a);
    mpmd_matmul_dims md; /* the CPU's dimensions: batch folded into M for a 2-D b and an untransposed a */
    mpmd_matmul_dims_make(&md, a->in_type[0], a->in_type[1], mpmd_matmul_flags(a->node));
    const int tra = md.tra, trb = md.trb;
    const int64_t batch = md.batch;
    if (md.m == 0 || md.n == 0 || batch == 0) return 0;
    const void *A = a->in[0], *B = a->in[1];
    void *C = a->out;
    mpmd_dtype dtype = a->node->type.dtype;
    cudaDataType_t dt = dtype == MPMD_BF16 ? CUDA_R_16BF : dtype == MPMD_F16 ? CUDA_R_16F : CUDA_R_32F;
    if (md.k == 0) { /* an empty sum: C = 0 (cuBLAS would reject the zero leading dimensions) */
        cudaError_t e =
            cudaMemsetAsync(C, 0, (size_t)(batch * md.m * md.n) * mpmd_dtype_size(dtype), d->stream);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "matmul: clearing the output failed: %s", cudaGetErrorString(e));
            return 1;
        }
        return 0;
    }
    /* Row-major leading dimensions, as on the CPU; they are the column-major
     * leading dimensions of the transposed views cuBLAS sees. */
    const size_t es = mpmd_dtype_size(dtype);
    pad_plan pp;
    const int pad = pad_plan_make(&md, es, &pp) && a->scratch;
    const int64_t lda = pad ? pp.lda : md.lda, ldb = pad ? pp.ldb : md.ldb, ldc = pad ? pp.ldc : md.ldc;
    const int64_t m = pad ? pp.m : md.m, n = pad ? pp.n : md.n, k = pad ? pp.k : md.k;
    if (pad) { /* misaligned rows or dimensions: the padded problem (see the top) */
        char *scr = (char *)a->scratch;
        cudaError_t e = cudaSuccess;
        if (pp.a)
            e = copy_padded(scr + pp.off_a, lda, tra ? k : m, A, md.lda, md.lda, tra ? md.k : md.m, es,
                            d->stream),
            A = scr + pp.off_a;
        if (pp.b && e == cudaSuccess)
            e = copy_padded(scr + pp.off_b, ldb, trb ? n : k, B, md.ldb, md.ldb, trb ? md.n : md.k, es,
                            d->stream),
            B = scr + pp.off_b;
        if (pp.c) C = scr + pp.off_c;
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "matmul: copying an operand to its padded place failed: %s",
                     cudaGetErrorString(e));
            return 1;
        }
    }
    const long long sa = (long long)md.sa, sb = (long long)md.sb, sc = (long long)md.sc;
    cublasOperation_t opa = tra ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasComputeType_t ct = d->tf32 && dt == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = mpmd_matmul_alpha(a->node), zero = 0.0f; /* C = alpha op(A) op(B) */
    int small =
        fits_int(m) && fits_int(n) && fits_int(k) && fits_int(lda) && fits_int(ldb) && fits_int(batch);
    cublasStatus_t s;
    /* Column-major: C^T [N, M] = op(B)^T [N, K] op(A)^T [K, M]. */
    if (batch == 1) {
        if (small)
            s = cublasGemmEx(d->blas, opb, opa, (int)n, (int)m, (int)k, &one, B, dt, (int)ldb, A, dt,
                             (int)lda, &zero, C, dt, (int)ldc, ct, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasGemmEx_64(d->blas, opb, opa, n, m, k, &one, B, dt, ldb, A, dt, lda, &zero, C, dt, ldc,
                                ct, CUBLAS_GEMM_DEFAULT);
    } else {
        if (small)
            s = cublasGemmStridedBatchedEx(d->blas, opb, opa, (int)n, (int)m, (int)k, &one, B, dt, (int)ldb,
                                           sb, A, dt, (int)lda, sa, &zero, C, dt, (int)ldc, sc, (int)batch,
                                           ct, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasGemmStridedBatchedEx_64(d->blas, opb, opa, n, m, k, &one, B, dt, ldb, sb, A, dt, lda,
                                              sa, &zero, C, dt, ldc, sc, batch, ct, CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS) return blas_failed(a, s, m, n, k, batch);
    if (pad && pp.c) {
        cudaError_t e = copy_rows(a->out, md.ldc, C, ldc, md.n, md.m, es, d->stream);
        if (e != cudaSuccess) {
            snprintf(a->err, a->err_len, "matmul: copying the result from padded rows failed: %s",
                     cudaGetErrorString(e));
            return 1;
        }
    }
    return mpmd_cuda_launched(a, "matmul");
}

/* ---- cast ------------------------------------------------------------------------ */

static int k_cast(const mpmd_kargs *a) {
    if (mpmd_cuda_convert(mpmd_cuda_of(a), a->out, a->node->type.dtype, a->in[0], a->in_type[0]->dtype,
                          mpmd_type_numel(&a->node->type))) {
        snprintf(a->err, a->err_len, "cast: no conversion from %s to %s",
                 mpmd_dtype_name(a->in_type[0]->dtype), mpmd_dtype_name(a->node->type.dtype));
        return 1;
    }
    return mpmd_cuda_launched(a, "cast");
}

#define F16S (MPMD_KERNEL_BF16 | MPMD_KERNEL_F16)

extern "C" const mpmd_kernel mpmd_cuda_core_kernels[] = {
    {&mpmd_op_stage_marker, k_identity, NULL, F16S},
    {&mpmd_op_matmul, k_matmul, scratch_matmul, F16S},
    {&mpmd_op_cast, k_cast, NULL, F16S},
    {NULL, NULL, NULL, 0},
};
