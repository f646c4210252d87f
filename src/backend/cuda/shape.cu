/* shape.cu - CUDA kernels of the shape ops (src/ops/shape.c: reshape,
 * permute, slice, slice_grad, concat). The CPU kernels in
 * src/backend/cpu/reduce.c are the specification.
 *
 * Shape ops move elements of 2 or 4 bytes (f32, i32, bf16, f16) without
 * converting them: reshape is a cudaMemcpyAsync (nothing when given its
 * input's buffer); slice and concat copy runs (one thread per element, or
 * per 16-, 8- or 4-byte vector when sizes and pointers allow); slice_grad
 * writes rows [zeros | dy | zeros]; permute simplifies the permutation as
 * the CPU does and is a plain index map (coalesced reads and writes of whole
 * rows, vectorised) when the last axis stays last, as in the attention
 * transposes [B,T,H,D] <-> [B,H,T,D], and otherwise a 32x32 tiled transpose
 * through shared memory (a plain map when one side is under 8).
 * Index arithmetic is 32-bit where the values fit.
 */
#include "reduce.cuh"

namespace {

/* ---- copies ---------------------------------------------------------------------------- */

/* Run i (of `run` elements E) from src + i*ss to dst + i*ds; I indexes. */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_copy_runs(E *__restrict__ dst, I ds, const E *__restrict__ src, I ss, I run, I total) {
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I i = e / run, c = e - i * run;
        dst[i * ds + c] = src[i * ss + c];
    }
}

template <class E>
static void copy_runs_as(cudaStream_t st, void *dst, i64 ds, const void *src, i64 ss, i64 n_runs, i64 run) {
    const i64 total = n_runs * run;
    const i64 wide = ds > ss ? ds : ss;
    if (n_runs * (wide > run ? wide : run) < ((i64)1 << 31))
        k_copy_runs<unsigned, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dst, (unsigned)ds, (const E *)src, (unsigned)ss, (unsigned)run, (unsigned)total);
    else
        k_copy_runs<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dst, (unsigned long long)ds, (const E *)src, (unsigned long long)ss, (unsigned long long)run,
            (unsigned long long)total);
}

/* The unit elements move in: the widest of 16, 8 and 4 bytes that divides
 * every byte count in v[] and aligns both pointers, else es, the element
 * size (2 or 4). */
static i64 unit_for(i64 es, const void *p, const void *q, const i64 *v, int nv) {
    for (i64 u = 16; u > es; u >>= 1) {
        int ok = aligned(p, u) && aligned(q, u);
        for (int k = 0; ok && k < nv; k++)
            ok = v[k] % u == 0;
        if (ok) return u;
    }
    return es;
}

/* f((E *)0) with E the unsigned type of u bytes (unit_for's). */
template <class F> static void with_unit(i64 u, F &&f) {
    switch (u) {
    case 16: f((uint4 *)NULL); break;
    case 8: f((uint2 *)NULL); break;
    case 4: f((uint32_t *)NULL); break;
    default: f((uint16_t *)NULL); break;
    }
}

/* The element size of a data dtype the shape ops move (f32, i32: 4; bf16,
 * f16: 2), or 0 with a message. */
static i64 elem_size(const mpmd_kargs *a, mpmd_dtype d) {
    const i64 es = (i64)mpmd_dtype_size(d);
    if (es == 2 || es == 4) return es;
    snprintf(a->err, a->err_len, "%s: cannot move %s elements", a->node->op->name, mpmd_dtype_name(d));
    return 0;
}

/* Copy n_runs runs of `run` elements of es bytes, run i from src + i*ss to
 * dst + i*ds (strides in elements). */
static void copy_runs(cudaStream_t st, void *dst, i64 ds, const void *src, i64 ss, i64 n_runs, i64 run,
                      i64 es) {
    if (n_runs <= 0 || run <= 0) return;
    if (n_runs == 1 || (ds == run && ss == run)) {
        cudaMemcpyAsync(dst, src, (size_t)(n_runs * run * es), cudaMemcpyDeviceToDevice, st);
        return;
    }
    const i64 v[3] = {run * es, ds * es, ss * es};
    const i64 k = unit_for(es, dst, src, v, 3) / es; /* elements per unit */
    with_unit(k * es, [&](auto tag) {
        copy_runs_as<std::remove_pointer_t<decltype(tag)>>(st, dst, ds / k, src, ss / k, n_runs, run / k);
    });
}

/* reshape: the same bytes; copy only when not given the input's buffer. */
static int k_reshape(const mpmd_kargs *a) {
    const i64 numel = mpmd_type_numel(&a->node->type);
    const i64 es = (i64)mpmd_dtype_size(a->node->type.dtype);
    if (a->out != a->in[0] && numel > 0)
        cudaMemcpyAsync(a->out, a->in[0], (size_t)(numel * es), cudaMemcpyDeviceToDevice,
                        mpmd_cuda_of(a)->stream);
    return mpmd_cuda_launched(a, "reshape");
}

/* slice: y[o, j, i] = x[o, start + j, i] for j < stop - start: one run per o. */
static int k_slice(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner;
    const i64 start = mpmd_attr_start(n), w = mpmd_attr_stop(n) - mpmd_attr_start(n);
    const i64 es = elem_size(a, a->in_type[0]->dtype);
    if (!es) return 1;
    mpmd_axis_split(a->in_type[0], mpmd_attr_axis(n), &outer, &d, &inner);
    copy_runs(mpmd_cuda_of(a)->stream, a->out, w * inner, (const char *)a->in[0] + start * inner * es,
              d * inner, outer, w * inner, es);
    return mpmd_cuda_launched(a, "slice");
}

/* dx[o, c] = dy[o, c - s0] for s0 <= c < s1, else 0 (rows of `row` E). */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_slice_grad_rows(E *__restrict__ dx, const E *__restrict__ dy, I total, I row, I s0, I s1) {
    const I w = s1 - s0;
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I o = e / row, c = e - o * row;
        dx[e] = (c >= s0 && c < s1) ? dy[o * w + (c - s0)] : E();
    }
}

template <class E>
static void slice_grad_as(cudaStream_t st, void *dx, const void *dy, i64 total, i64 row, i64 s0, i64 s1) {
    if (total < ((i64)1 << 31))
        k_slice_grad_rows<unsigned, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dx, (const E *)dy, (unsigned)total, (unsigned)row, (unsigned)s0, (unsigned)s1);
    else
        k_slice_grad_rows<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)dx, (const E *)dy, (unsigned long long)total, (unsigned long long)row,
            (unsigned long long)s0, (unsigned long long)s1);
}

/* slice_grad: dx[o, j, i] = dy[o, j - start, i] for start <= j < stop, else 0. */
static int k_slice_grad(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner;
    mpmd_axis_split(&n->type, mpmd_attr_axis(n), &outer, &d, &inner);
    const i64 row = d * inner, s0 = mpmd_attr_start(n) * inner, s1 = mpmd_attr_stop(n) * inner,
              total = outer * row;
    const i64 es = elem_size(a, n->type.dtype);
    if (!es) return 1;
    if (total == 0) return 0;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    const i64 v[3] = {row * es, s0 * es, s1 * es};
    const i64 k = unit_for(es, a->out, a->in[0], v, 3) / es; /* elements per unit */
    with_unit(k * es, [&](auto tag) {
        slice_grad_as<std::remove_pointer_t<decltype(tag)>>(st, a->out, a->in[0], total / k, row / k, s0 / k,
                                                            s1 / k);
    });
    return mpmd_cuda_launched(a, "slice_grad");
}

/* concat: y[o, off_k + j, i] = x_k[o, j, i]: per operand k, one run per o. */
static int k_concat(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const int ax = mpmd_attr_axis(n);
    int64_t outer, dt, inner;
    i64 off = 0;
    const i64 es = elem_size(a, n->type.dtype);
    if (!es) return 1;
    mpmd_axis_split(&n->type, ax, &outer, &dt, &inner);
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    for (int k = 0; k < n->n_in; k++) {
        const i64 dk = a->in_type[k]->dim[ax];
        copy_runs(st, (char *)a->out + off * inner * es, dt * inner, a->in[k], dk * inner, outer, dk * inner,
                  es);
        off += dk;
    }
    return mpmd_cuda_launched(a, "concat");
}

/* ---- permute ----------------------------------------------------------------------------- */

/* y[e] = x[off(row) + c], row = e / len, c = e % len (len = 1: a plain
 * map over every output axis). */
template <class I, class E>
__global__ void __launch_bounds__(EBLK)
    k_permute_rows(E *__restrict__ y, const E *__restrict__ x, I total, I len, const Axes A) {
    for (I e = (I)blockIdx.x * EBLK + threadIdx.x; e < total; e += (I)gridDim.x * EBLK) {
        const I row = e / len, c = e - row * len;
        y[e] = x[axes_off(A, (i64)row) + (i64)c];
    }
}

template <class E>
static void permute_rows_as(cudaStream_t st, void *y, const void *x, i64 total, i64 len, const Axes &A) {
    if (total < ((i64)1 << 31))
        k_permute_rows<unsigned, E>
            <<<grid_for(total, EBLK), EBLK, 0, st>>>((E *)y, (const E *)x, (unsigned)total, (unsigned)len, A);
    else
        k_permute_rows<unsigned long long, E><<<grid_for(total, EBLK), EBLK, 0, st>>>(
            (E *)y, (const E *)x, (unsigned long long)total, (unsigned long long)len, A);
}

/* Tiled transpose of input axis a (stride sa in x, 1 in y) and the input's
 * last axis b (stride 1 in x, tb in y), for every index of `rest` (sa:
 * input offset, sb: output offset). Block = (rest index, a tile, b tile),
 * b tiles fastest; reads run along b, writes along a. E: the element (4 or
 * 2 bytes); a tile row is padded to an odd number of 4-byte words, so the
 * column reads hit 32 different banks. */
template <class E>
__global__ void __launch_bounds__(256)
    k_transpose(E *__restrict__ y, const E *__restrict__ x, i64 na, i64 nb, i64 sa, i64 tb, i64 ta_tiles,
                i64 tb_tiles, i64 nblk, const Axes rest) {
    __shared__ E tile[32][32 + 4 / sizeof(E)];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (i64 blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
        const i64 t = blk / tb_tiles, tbi = blk - t * tb_tiles;
        const i64 ri = t / ta_tiles, tai = t - ri * ta_tiles;
        i64 xo, yo;
        axes_off2(rest, ri, xo, yo);
        const i64 a0 = tai * 32, b0 = tbi * 32;
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const i64 ai = a0 + k, bi = b0 + tx;
            if (ai < na && bi < nb) tile[k][tx] = x[xo + ai * sa + bi];
        }
        __syncthreads();
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const i64 bi = b0 + k, ai = a0 + tx;
            if (ai < na && bi < nb) y[yo + bi * tb + ai] = tile[tx][k];
        }
        __syncthreads();
    }
}

/* How a permute runs: a copy (nothing moves), rows (y[e] = x[off(e / len)
 * + e % len], off over A's sa; len = 1 is a plain map over every output
 * axis), or tiles (the transpose of input axes a and b for each index of A). */
enum { PERM_COPY, PERM_ROWS, PERM_TILES };

struct PermPlan {
    int mode;
    i64 len;    /* rows */
    Axes A;     /* rows: the output axes before the last (sa: input stride); tiles: the rest (sa, sb) */
    i64 na, nb; /* tiles: sizes of input axis a (the output's last) and of the input's last axis */
    i64 sa, tb; /* tiles: input stride of a, output stride of b */
};

/* The permutation simplified by mpmd_perm_plan_make (src/backend/shape_plan.c,
 * as on the CPU: size-1 axes dropped, input axes that stay adjacent and in
 * order merged; output axis i = merged input axis q[i]), then the mode. */
static void perm_plan(const mpmd_type *t, const int64_t *perm, PermPlan *Q) {
    memset(Q, 0, sizeof *Q);
    mpmd_perm_plan P;
    mpmd_perm_plan_make(&P, t, perm);
    if (P.identity) {
        Q->mode = PERM_COPY;
        return;
    }
    const int m = P.m;
    const int64_t *istr = P.istr, *ostr = P.ostr;
    if (P.last_stays) {
        /* The last axis stays last: rows of len elements, walked over the
         * other output axes (their input strides: multiples of len). */
        Q->mode = PERM_ROWS;
        Q->len = P.in_size[m - 1];
        for (int k = 0; k < m - 1; k++)
            axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], 0);
        return;
    }
    /* The last axis moves: input axis ia becomes the output's last, and the
     * input's last axis lands at output axis p. */
    const int ia = P.ia, p = P.p;
    Q->na = P.in_size[ia];
    Q->nb = P.in_size[m - 1];
    if (Q->na < 8 || Q->nb < 8) { /* thin tiles: a plain map over every output axis */
        Q->mode = PERM_ROWS;
        Q->len = 1;
        for (int k = 0; k < m; k++)
            axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], 0);
        return;
    }
    Q->mode = PERM_TILES;
    Q->sa = istr[ia];
    Q->tb = ostr[p];
    for (int k = 0; k < m - 1; k++)
        if (k != p) axes_push(&Q->A, P.in_size[P.q[k]], istr[P.q[k]], ostr[k]);
}

/* permute: y[i_0, ..., i_{m-1}] = x at merged input index j with j[q[k]] = i_k. */
static int k_permute(const mpmd_kargs *a) {
    const i64 numel = mpmd_type_numel(&a->node->type);
    if (numel == 0) return 0;
    cudaStream_t st = mpmd_cuda_of(a)->stream;
    PermPlan Q;
    perm_plan(a->in_type[0], mpmd_attr_perms(a->node), &Q);
    const i64 es = elem_size(a, a->node->type.dtype);
    if (!es) return 1;
    if (Q.mode == PERM_COPY) {
        cudaMemcpyAsync(a->out, a->in[0], (size_t)(numel * es), cudaMemcpyDeviceToDevice, st);
    } else if (Q.mode == PERM_ROWS) {
        /* k elements a unit: k divides len, hence every input row offset */
        const i64 v[1] = {Q.len * es};
        const i64 k = unit_for(es, a->out, a->in[0], v, 1) / es;
        for (int j = 0; j < Q.A.n; j++)
            Q.A.sa[j] /= k;
        with_unit(k * es, [&](auto tag) {
            permute_rows_as<std::remove_pointer_t<decltype(tag)>>(st, a->out, a->in[0], numel / k, Q.len / k,
                                                                  Q.A);
        });
    } else {
        const i64 ta = cdiv(Q.na, 32), tbt = cdiv(Q.nb, 32), nblk = axes_count(&Q.A) * ta * tbt;
        if (es == 4)
            k_transpose<uint32_t><<<grid_for(nblk, 1), 256, 0, st>>>(
                (uint32_t *)a->out, (const uint32_t *)a->in[0], Q.na, Q.nb, Q.sa, Q.tb, ta, tbt, nblk, Q.A);
        else
            k_transpose<uint16_t><<<grid_for(nblk, 1), 256, 0, st>>>(
                (uint16_t *)a->out, (const uint16_t *)a->in[0], Q.na, Q.nb, Q.sa, Q.tb, ta, tbt, nblk, Q.A);
    }
    return mpmd_cuda_launched(a, "permute");
}

} /* namespace */

extern "C" const mpmd_kernel mpmd_cuda_shape_kernels[] = {
    {&mpmd_op_reshape, k_reshape, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_permute, k_permute, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_slice, k_slice, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_slice_grad, k_slice_grad, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_concat, k_concat, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {NULL, NULL, NULL, 0},
};
