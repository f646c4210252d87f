/* The CUDA backend's model-axis collectives (src/ops/collective.c), on
 * device buffers, with the CPU backend's arithmetic (src/backend/cpu/
 * collective.c): sums in rank order in f32, a 16-bit result rounded once,
 * positions in order for the embedding gradient, so the bits are the
 * CPU's.
 *
 * model_combine reads every model rank's input directly: the in-process
 * model ranks of a pipeline rank open the same device (rank % devices), and
 * the wire has made every input complete before, and waits for this
 * queue after (wire_local.c). Under MPI the wire combines host
 * copies with the CPU backend's arithmetic instead (wire_mpi.c). */
#include "cuda.h"

#define MODEL_MAX 64 /* model ranks a combine takes (its pointers travel by value) */

struct model_inputs {
    const void *p[MODEL_MAX];
};

static unsigned grid_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* out[k] = in_0[k] + ... + in_{M-1}[k] */
__global__ void model_all_reduce(model_inputs in, int M, int dt, void *out, int64_t n) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        float v = mpmd_cuda_ld(in.p[0], dt, k);
        for (int j = 1; j < M; j++)
            v += mpmd_cuda_ld(in.p[j], dt, k);
        mpmd_cuda_st(out, dt, k, v);
    }
}

/* outer rows of `row` elements: out row o is the M inputs' rows o side by side */
__global__ void model_all_gather(model_inputs in, int M, int dt, void *out, int64_t outer, int64_t row) {
    const int64_t n = outer * M * row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = i / (M * row), r = i % (M * row), j = r / row, k = r % row;
        mpmd_cuda_st(out, dt, i, mpmd_cuda_ld(in.p[j], dt, o * row + k));
    }
}

/* part m of each input row, summed over the ranks */
__global__ void model_reduce_scatter(model_inputs in, int M, int m, int dt, void *out, int64_t outer,
                                     int64_t row) {
    const int64_t part = row / M, n = outer * part;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t at = (i / part) * row + m * part + i % part;
        float v = mpmd_cuda_ld(in.p[0], dt, at);
        for (int j = 1; j < M; j++)
            v += mpmd_cuda_ld(in.p[j], dt, at);
        mpmd_cuda_st(out, dt, i, v);
    }
}

/* outer x (dimension d's size x inner) of type t */
static void around(const mpmd_type *t, int d, int64_t *outer, int64_t *row) {
    *outer = 1, *row = 1;
    for (int k = 0; k < t->ndim; k++) {
        if (k < d)
            *outer *= t->dim[k];
        else
            *row *= t->dim[k];
    }
}

static int launched(const char *what, char *err, size_t len) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    snprintf(err, len, "%s: CUDA kernel launch failed: %s", what, cudaGetErrorString(e));
    return 1;
}

extern "C" int mpmd_cuda_model_combine(void *p, const mpmd_graph *g, int node, int m, int M,
                                       const void *const *ins, void *out, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    const mpmd_node *n = &g->nodes[node];
    if (M > MODEL_MAX) {
        snprintf(err, len, "%s over %d model ranks: the CUDA backend takes at most %d", n->op->name, M,
                 MODEL_MAX);
        return 1;
    }
    model_inputs in;
    for (int j = 0; j < M; j++)
        in.p[j] = ins[j];
    const int dt = (int)n->type.dtype;
    int64_t outer, row;
    around(&g->nodes[n->in[0]].type, (int)n->ia[1], &outer, &row);
    if (n->op == &mpmd_op_all_reduce) {
        const int64_t cnt = mpmd_type_numel(&n->type);
        model_all_reduce<<<grid_for(cnt), 256, 0, d->stream>>>(in, M, dt, out, cnt);
    } else if (n->op == &mpmd_op_all_gather) {
        model_all_gather<<<grid_for(outer * M * row), 256, 0, d->stream>>>(in, M, dt, out, outer, row);
    } else if (n->op == &mpmd_op_reduce_scatter) {
        model_reduce_scatter<<<grid_for(outer * (row / M)), 256, 0, d->stream>>>(in, M, m, dt, out, outer,
                                                                                 row);
    } else {
        snprintf(err, len, "%s is not a collective of the model axis", n->op->name);
        return 1;
    }
    return launched(n->op->name, err, len);
}

/* ---- the ops of the rank's own values ----------------------------------- */

/* part m of each row (axis_slice) */
__global__ void model_slice(const void *x, int dt, void *out, int64_t outer, int64_t row, int64_t part,
                            int m) {
    const int64_t n = outer * part;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mpmd_cuda_st(out, dt, i, mpmd_cuda_ld(x, dt, (i / part) * row + m * part + i % part));
}

/* rows of the table part [rows, c] for the ids it holds, zeros for the others */
__global__ void model_embedding(const float *table, const int32_t *ids, float *y, int64_t cnt, int64_t c,
                                int64_t rows, int64_t lo) {
    const int64_t n = cnt * c;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = (int64_t)ids[i / c] - lo;
        y[i] = r >= 0 && r < rows ? table[r * c + i % c] : 0.0f;
    }
}

/* column j of the part's gradient: gy's rows of the ids it holds, added in
 * position order (the CPU's order); out zeroed before */
__global__ void model_embedding_grad(const int32_t *ids, const float *gy, float *out, int64_t cnt, int64_t c,
                                     int64_t rows, int64_t lo) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c;
         j += (int64_t)gridDim.x * blockDim.x)
        for (int64_t p = 0; p < cnt; p++) {
            const int64_t r = (int64_t)ids[p] - lo;
            if (r >= 0 && r < rows) out[r * c + j] += gy[p * c + j];
        }
}

/* z[p, target - lo] where this rank holds the target's column, else 0 */
__global__ void model_pick(const void *z, int dz, const int32_t *tg, void *out, int dt, int64_t cnt,
                           int64_t cols, int64_t lo) {
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < cnt;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = (int64_t)tg[p] - lo;
        mpmd_cuda_st(out, dt, p, k >= 0 && k < cols ? mpmd_cuda_ld(z, dz, p * cols + k) : 0.0f);
    }
}

/* gy[p] at [p, target - lo] where this rank holds the target's column; out zeroed before */
__global__ void model_pick_grad(const int32_t *tg, const void *gy, int dg, void *out, int dt, int64_t cnt,
                                int64_t cols, int64_t lo) {
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < cnt;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = (int64_t)tg[p] - lo;
        if (k >= 0 && k < cols) mpmd_cuda_st(out, dt, p * cols + k, mpmd_cuda_ld(gy, dg, p));
    }
}

extern "C" int mpmd_cuda_model_local(void *p, const mpmd_graph *g, int node, int m, void *const *in,
                                     void *out, char *err, size_t len) {
    mpmd_cuda_dev *d = (mpmd_cuda_dev *)p;
    const mpmd_node *n = &g->nodes[node];
    const mpmd_type *t0 = &g->nodes[n->in[0]].type;
    const int dt = (int)n->type.dtype;
    cudaError_t e = cudaSuccess;
    if (n->op == &mpmd_op_pvary) {
        if (out != in[0])
            e = cudaMemcpyAsync(out, in[0], mpmd_type_bytes(&n->type), cudaMemcpyDeviceToDevice, d->stream);
    } else if (n->op == &mpmd_op_axis_slice) {
        int64_t outer, row;
        around(t0, (int)n->ia[1], &outer, &row);
        const int64_t part = row / n->ia[2];
        model_slice<<<grid_for(outer * part), 256, 0, d->stream>>>(in[0], dt, out, outer, row, part, m);
    } else if (n->op == &mpmd_op_axis_embedding) {
        const int64_t rows = t0->dim[0], c = t0->dim[1], cnt = mpmd_type_numel(&g->nodes[n->in[1]].type);
        model_embedding<<<grid_for(cnt * c), 256, 0, d->stream>>>(
            (const float *)in[0], (const int32_t *)in[1], (float *)out, cnt, c, rows, (int64_t)m * rows);
    } else if (n->op == &mpmd_op_axis_embedding_grad) {
        const int64_t rows = n->type.dim[0], c = n->type.dim[1], cnt = mpmd_type_numel(t0);
        e = cudaMemsetAsync(out, 0, mpmd_type_bytes(&n->type), d->stream);
        if (e == cudaSuccess)
            model_embedding_grad<<<grid_for(c), 256, 0, d->stream>>>(
                (const int32_t *)in[0], (const float *)in[1], (float *)out, cnt, c, rows, (int64_t)m * rows);
    } else if (n->op == &mpmd_op_axis_pick) {
        const int64_t cols = t0->dim[t0->ndim - 1], cnt = mpmd_type_numel(&n->type);
        model_pick<<<grid_for(cnt), 256, 0, d->stream>>>(in[0], (int)t0->dtype, (const int32_t *)in[1], out,
                                                         dt, cnt, cols, (int64_t)m * cols);
    } else if (n->op == &mpmd_op_axis_pick_grad) {
        const int64_t cols = n->type.dim[n->type.ndim - 1], cnt = mpmd_type_numel(t0);
        e = cudaMemsetAsync(out, 0, mpmd_type_bytes(&n->type), d->stream);
        if (e == cudaSuccess)
            model_pick_grad<<<grid_for(cnt), 256, 0, d->stream>>>((const int32_t *)in[0], in[1],
                                                                  (int)g->nodes[n->in[1]].type.dtype, out, dt,
                                                                  cnt, cols, (int64_t)m * cols);
    } else {
        snprintf(err, len, "%s is not a model-axis op of the rank's own values", n->op->name);
        return 1;
    }
    if (e != cudaSuccess) {
        snprintf(err, len, "%s: %s", n->op->name, cudaGetErrorString(e));
        return 1;
    }
    return launched(n->op->name, err, len);
}
