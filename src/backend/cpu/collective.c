/* The CPU backend's model-axis collectives (src/ops/collective.c): what
 * model rank m computes from the M ranks' inputs (model_combine: in-process
 * on the peers' buffers; MPI on an allgather of them, also the host
 * arithmetic of device backends staged through host memory), and the ops
 * that read only the rank's own values (model_local). Sums run in rank
 * order in f32; a 16-bit result is rounded once: the same bits on every
 * rank and in either runtime. */
#include "cpu.h"
#include "util/half.h"

#include <stdio.h>
#include <string.h>

static float ld(mpmd_dtype dt, const void *p, int64_t k) {
    if (dt == MPMD_BF16) return mpmd_bf16_to_f32(((const uint16_t *)p)[k]);
    if (dt == MPMD_F16) return mpmd_f16_to_f32(((const uint16_t *)p)[k]);
    return ((const float *)p)[k];
}

static void st(mpmd_dtype dt, void *p, int64_t k, float v) {
    if (dt == MPMD_BF16)
        ((uint16_t *)p)[k] = mpmd_f32_to_bf16(v);
    else if (dt == MPMD_F16)
        ((uint16_t *)p)[k] = mpmd_f32_to_f16(v);
    else
        ((float *)p)[k] = v;
}

/* outer x (the dim's size x inner) of type t around dimension d */
static void around(const mpmd_type *t, int d, int64_t *outer, int64_t *row) {
    *outer = 1, *row = 1;
    for (int k = 0; k < t->ndim; k++) {
        if (k < d)
            *outer *= t->dim[k];
        else
            *row *= t->dim[k];
    }
}

int mpmd_cpu_model_combine(void *dev, const mpmd_graph *g, int node, int m, int M, const void *const *ins,
                           void *out, char *err, size_t len) {
    (void)dev;
    const mpmd_node *n = &g->nodes[node];
    const mpmd_type *it = &g->nodes[n->in[0]].type;
    const mpmd_dtype dt = n->type.dtype;
    const size_t es = mpmd_dtype_size(dt);
    if (n->op == &mpmd_op_all_reduce) {
        const int64_t cnt = mpmd_type_numel(&n->type);
        for (int64_t k = 0; k < cnt; k++) {
            float v = ld(dt, ins[0], k);
            for (int j = 1; j < M; j++)
                v += ld(dt, ins[j], k);
            st(dt, out, k, v);
        }
        return 0;
    }
    const int d = (int)n->ia[1];
    int64_t outer, row; /* the input's rows: outer x row elements */
    around(it, d, &outer, &row);
    if (n->op == &mpmd_op_all_gather) { /* out rows: the M inputs' rows side by side */
        for (int64_t o = 0; o < outer; o++)
            for (int j = 0; j < M; j++)
                memcpy((char *)out + ((size_t)o * (size_t)M + (size_t)j) * (size_t)row * es,
                       (const char *)ins[j] + (size_t)o * (size_t)row * es, (size_t)row * es);
        return 0;
    }
    const int64_t part = row / M; /* reduce_scatter: part m of each input row */
    if (n->op == &mpmd_op_reduce_scatter) {
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < part; k++) {
                const int64_t at = o * row + m * part + k;
                float v = ld(dt, ins[0], at);
                for (int j = 1; j < M; j++)
                    v += ld(dt, ins[j], at);
                st(dt, out, o * part + k, v);
            }
        return 0;
    }
    snprintf(err, len, "%s is not a collective of the model axis", n->op->name);
    return 1;
}

int mpmd_cpu_model_local(void *dev, const mpmd_graph *g, int node, int m, void *const *in, void *out,
                         char *err, size_t len) {
    (void)dev;
    const mpmd_node *n = &g->nodes[node];
    const mpmd_type *t0 = &g->nodes[n->in[0]].type;
    const mpmd_dtype dt = n->type.dtype;
    const size_t es = mpmd_dtype_size(dt);
    if (n->op == &mpmd_op_pvary) {
        if (out != in[0]) memcpy(out, in[0], mpmd_type_bytes(&n->type));
        return 0;
    }
    if (n->op == &mpmd_op_axis_slice) { /* part m of each row around dimension ia[1] */
        const int M = (int)n->ia[2];
        int64_t outer, row;
        around(t0, (int)n->ia[1], &outer, &row);
        const int64_t part = row / M;
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)out + (size_t)(o * part) * es,
                   (const char *)in[0] + (size_t)(o * row + m * part) * es, (size_t)part * es);
        return 0;
    }
    if (n->op == &mpmd_op_axis_embedding) { /* table part [V/M, C], ids -> rows or zeros */
        const int64_t rows = t0->dim[0], c = t0->dim[1], lo = (int64_t)m * rows;
        const int64_t cnt = mpmd_type_numel(&g->nodes[n->in[1]].type);
        const int32_t *ids = in[1];
        for (int64_t p = 0; p < cnt; p++) {
            float *y = (float *)out + p * c;
            const int64_t r = (int64_t)ids[p] - lo;
            if (r >= 0 && r < rows)
                memcpy(y, (const float *)in[0] + r * c, (size_t)c * sizeof(float));
            else
                memset(y, 0, (size_t)c * sizeof(float));
        }
        return 0;
    }
    if (n->op == &mpmd_op_axis_embedding_grad) { /* ids, gy -> the part's rows, summed in position order */
        const int64_t rows = n->type.dim[0], c = n->type.dim[1], lo = (int64_t)m * rows;
        const int64_t cnt = mpmd_type_numel(t0);
        const int32_t *ids = in[0];
        memset(out, 0, mpmd_type_bytes(&n->type));
        for (int64_t p = 0; p < cnt; p++) {
            const int64_t r = (int64_t)ids[p] - lo;
            if (r < 0 || r >= rows) continue;
            float *d = (float *)out + r * c;
            const float *gy = (const float *)in[1] + p * c;
            for (int64_t j = 0; j < c; j++)
                d[j] += gy[j];
        }
        return 0;
    }
    if (n->op == &mpmd_op_axis_pick) { /* z [..., V/M], targets -> z[target] here, else 0 */
        const int64_t cols = t0->dim[t0->ndim - 1], lo = (int64_t)m * cols, cnt = mpmd_type_numel(&n->type);
        const int32_t *tg = in[1];
        for (int64_t p = 0; p < cnt; p++) {
            const int64_t k = (int64_t)tg[p] - lo;
            st(dt, out, p, k >= 0 && k < cols ? ld(t0->dtype, in[0], p * cols + k) : 0.0f);
        }
        return 0;
    }
    if (n->op == &mpmd_op_axis_pick_grad) { /* targets, gy [...] -> [..., V/M]: gy at the target here */
        const int64_t cols = n->type.dim[n->type.ndim - 1], lo = (int64_t)m * cols, cnt = mpmd_type_numel(t0);
        const int32_t *tg = in[0];
        memset(out, 0, mpmd_type_bytes(&n->type));
        for (int64_t p = 0; p < cnt; p++) {
            const int64_t k = (int64_t)tg[p] - lo;
            if (k >= 0 && k < cols) st(dt, out, p * cols + k, ld(g->nodes[n->in[1]].type.dtype, in[1], p));
        }
        return 0;
    }
    snprintf(err, len, "%s is not a model-axis op of the rank's own values", n->op->name);
    return 1;
}
