/* reduce.c - CPU kernels of the reduction ops (src/ops/reduce.c: sum, mean,
 * max, max_grad) and the shape ops (src/ops/shape.c: reshape, permute,
 * slice, slice_grad, concat).
 *
 * Reductions first simplify the layout: axes of size 1 are dropped and
 * neighbouring axes that are both reduced or both kept are merged into
 * groups (at most MPMD_MAX_DIMS). Two kernels then cover every layout:
 * - the last group is reduced ("inner"): each output is a sum of
 *   contiguous runs, mpmd_sum_f32 per run, runs added in row-major order;
 *   threads split the outputs;
 * - the last group is kept ("outer"): the output block of the last group
 *   is accumulated row by row (reduced indices in row-major order),
 *   vectorised over the block; threads split the output elements, so a
 *   block may be shared between threads column-wise.
 * Either way each output element is computed by one thread in an order that
 * depends only on the shape and axes (documented in src/ops/reduce.c).
 *
 * Shape ops move 4-byte elements (f32 or i32) and copy contiguous runs
 * with memcpy; permute copies whole rows when the last axis stays last and
 * otherwise transposes two axes in 32x32 tiles through a small buffer.
 */
#include "cpu.h"
#include "backend/op_descs.h"
#include "backend/shape_plan.h"

#include <string.h>

/* ---- iteration helpers -------------------------------------------------------- */

/* An odometer over a multi-index (row-major: the last index runs fastest)
 * that tracks two offsets with their own strides (e.g. input and output). */
typedef struct odo {
    int n;
    int64_t size[MPMD_MAX_DIMS], sa[MPMD_MAX_DIMS], sb[MPMD_MAX_DIMS], idx[MPMD_MAX_DIMS];
    int64_t a, b; /* current offsets */
} odo;

static int64_t odo_count(const odo *o) {
    int64_t c = 1;
    for (int k = 0; k < o->n; k++)
        c *= o->size[k];
    return c;
}

/* Position the odometer at flat index `flat`. */
static void odo_seek(odo *o, int64_t flat) {
    o->a = o->b = 0;
    for (int k = o->n - 1; k >= 0; k--) {
        o->idx[k] = flat % o->size[k];
        flat /= o->size[k];
        o->a += o->idx[k] * o->sa[k];
        o->b += o->idx[k] * o->sb[k];
    }
}

static inline void odo_next(odo *o) {
    for (int k = o->n - 1; k >= 0; k--) {
        o->a += o->sa[k];
        o->b += o->sb[k];
        if (++o->idx[k] < o->size[k]) return;
        o->a -= o->sa[k] * o->size[k];
        o->b -= o->sb[k] * o->size[k];
        o->idx[k] = 0;
    }
}

static void odo_push(odo *o, int64_t size, int64_t sa, int64_t sb) {
    o->size[o->n] = size;
    o->sa[o->n] = sa;
    o->sb[o->n] = sb;
    o->n++;
}

/* ---- reduction layout ---------------------------------------------------------- */

/* The groups of mpmd_reduce_groups_make (src/backend/shape_plan.c, shared
 * with the CUDA kernels), every group but the last on an odometer. */
typedef struct rlayout {
    int inner;   /* 1: the last group is reduced */
    int64_t len; /* size of the last group (1 when there is no group) */
    odo kept;    /* inner: all kept groups; outer: the kept groups but the last */
    odo redo;    /* inner: the reduced groups but the last; outer: all reduced groups */
} rlayout;

static void rlayout_make(const mpmd_type *t, int64_t mask, rlayout *L) {
    mpmd_reduce_groups G;
    mpmd_reduce_groups_make(&G, t, mask);
    memset(L, 0, sizeof *L);
    L->inner = G.inner;
    L->len = G.len;
    /* Every group but the last goes to an odometer (input strides). Inner
     * layout: `kept` walks single outputs, `redo` the runs. Outer layout:
     * `kept` walks the output blocks, `redo` the rows of reduced indices. */
    for (int k = 0; k < G.m - 1; k++) {
        if (G.red[k])
            odo_push(&L->redo, G.size[k], G.stride[k], 0);
        else
            odo_push(&L->kept, G.size[k], G.stride[k], 0);
    }
}

/* Inner layout, outputs [lo, hi): y[o] = op over runs r of f(run r), where
 * f is mpmd_sum_f32 (or mpmd_max_f32) of the L contiguous elements of the
 * run and runs go in row-major order of the outer reduced groups. */
static void reduce_inner(const rlayout *L, int is_max, float scale, const float *x, float *y, int64_t lo,
                         int64_t hi) {
    odo k = L->kept, r = L->redo;
    /* In the inner layout `kept` holds every kept group (the last group is
     * reduced); its offsets are input offsets of the output's elements. */
    int64_t nr = odo_count(&r), len = L->len;
    odo_seek(&k, lo);
    for (int64_t o = lo; o < hi; o++, odo_next(&k)) {
        const float *base = x + k.a;
        odo_seek(&r, 0);
        float s = is_max ? mpmd_max_f32(base, len) : mpmd_sum_f32(base, len);
        for (int64_t j = 1; j < nr; j++) {
            odo_next(&r);
            if (is_max) {
                float v = mpmd_max_f32(base + r.a, len);
                s = v > s ? v : s;
            } else {
                s += mpmd_sum_f32(base + r.a, len);
            }
        }
        y[o] = is_max ? s : s * scale;
    }
}

/* Outer layout, outputs [lo, hi): for each block of the last (kept) group,
 * columns [c0, c1) of it: acc = row of the first reduced index, then
 * acc += row (or max) for each further reduced index in row-major order.
 * Rows are taken four at a time, acc = (((acc + r0) + r1) + r2) + r3, which
 * is the same sequence of roundings as one at a time with a quarter of the
 * loads and stores of acc. */
static void reduce_outer(const rlayout *L, int is_max, float scale, const float *x, float *y, int64_t lo,
                         int64_t hi) {
    odo k = L->kept, r = L->redo;
    int64_t nr = odo_count(&r), len = L->len;
    int64_t b0 = lo / len, b1 = (hi + len - 1) / len;
    odo_seek(&k, b0);
    for (int64_t b = b0; b < b1; b++, odo_next(&k)) {
        int64_t c0 = lo - b * len > 0 ? lo - b * len : 0;
        int64_t c1 = hi - b * len < len ? hi - b * len : len;
        float *restrict acc = y + b * len;
        const float *base = x + k.a;
        odo_seek(&r, 0);
        memcpy(acc + c0, base + c0, (size_t)(c1 - c0) * sizeof(float));
        int64_t j = 1;
        for (; j + 4 <= nr; j += 4) {
            const float *restrict r0, *restrict r1, *restrict r2, *restrict r3;
            odo_next(&r), r0 = base + r.a;
            odo_next(&r), r1 = base + r.a;
            odo_next(&r), r2 = base + r.a;
            odo_next(&r), r3 = base + r.a;
            if (is_max) {
#pragma omp simd
                for (int64_t c = c0; c < c1; c++) {
                    float v = acc[c];
                    v = r0[c] > v ? r0[c] : v;
                    v = r1[c] > v ? r1[c] : v;
                    v = r2[c] > v ? r2[c] : v;
                    acc[c] = r3[c] > v ? r3[c] : v;
                }
            } else {
#pragma omp simd
                for (int64_t c = c0; c < c1; c++)
                    acc[c] = (((acc[c] + r0[c]) + r1[c]) + r2[c]) + r3[c];
            }
        }
        for (; j < nr; j++) {
            odo_next(&r);
            const float *restrict row = base + r.a;
            if (is_max) {
#pragma omp simd
                for (int64_t c = c0; c < c1; c++)
                    acc[c] = row[c] > acc[c] ? row[c] : acc[c];
            } else {
#pragma omp simd
                for (int64_t c = c0; c < c1; c++)
                    acc[c] += row[c];
            }
        }
        if (!is_max && scale != 1.0f) {
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                acc[c] *= scale;
        }
    }
}

/* sum, mean (times its scale) and max over the reduced axes. */
typedef struct {
    const rlayout *L;
    int is_max;
    float scale;
    const float *x;
    float *y;
} reduce_job;

static void reduce_part(void *ctx, int64_t lo, int64_t hi) {
    const reduce_job *j = ctx;
    if (j->L->inner)
        reduce_inner(j->L, j->is_max, j->scale, j->x, j->y, lo, hi);
    else
        reduce_outer(j->L, j->is_max, j->scale, j->x, j->y, lo, hi);
}

static int k_reduce(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const float *x = a->in[0];
    float *y = a->out;
    int is_max = n->op == &mpmd_op_max;
    float scale = n->op == &mpmd_op_mean ? mpmd_attr_scale(n) : 1.0f;
    int64_t numel = mpmd_type_numel(a->in_type[0]);
    int64_t n_out = mpmd_type_numel(&n->type);
    if (numel == 0) { /* sum over nothing: zeros (max and mean refuse this at build time) */
        for (int64_t i = 0; i < n_out; i++)
            y[i] = 0.0f;
        return 0;
    }
    rlayout L;
    rlayout_make(a->in_type[0], mpmd_attr_axes(n), &L);
    int nt = mpmd_threads_for(a->nthreads, numel);
    if (nt > n_out) nt = (int)n_out;
    reduce_job j = {&L, is_max, scale, x, y};
    mpmd_cpu_for(a->dev, nt, n_out, reduce_part, &j);
    return 0;
}

/* max_grad(x, dy) = dx: per output element o with m = max of its group and
 * c = number of elements equal to m, dx = dy[o] / c where x == m, else 0.
 * (If the group holds a NaN, no element equals m when m is NaN; then dx is
 * 0 for the whole group.) */
static void max_grad_inner(const rlayout *L, const float *x, const float *dy, float *dx, int64_t lo,
                           int64_t hi) {
    odo k = L->kept, r = L->redo;
    int64_t nr = odo_count(&r), len = L->len;
    odo_seek(&k, lo);
    for (int64_t o = lo; o < hi; o++, odo_next(&k)) {
        const float *xb = x + k.a;
        float *gb = dx + k.a;
        float m = mpmd_max_f32(xb, len);
        odo_seek(&r, 0);
        for (int64_t j = 1; j < nr; j++) {
            odo_next(&r);
            float v = mpmd_max_f32(xb + r.a, len);
            m = v > m ? v : m;
        }
        int64_t cnt = 0;
        odo_seek(&r, 0);
        for (int64_t j = 0; j < nr; j++, odo_next(&r))
            for (int64_t i = 0; i < len; i++)
                cnt += xb[r.a + i] == m;
        float v = cnt ? dy[o] / (float)cnt : 0.0f;
        odo_seek(&r, 0);
        for (int64_t j = 0; j < nr; j++, odo_next(&r))
            for (int64_t i = 0; i < len; i++)
                gb[r.a + i] = xb[r.a + i] == m ? v : 0.0f;
    }
}

/* The outer layout keeps the running max and tie count per output element
 * in scratch (2 floats per output, indexed by output: threads own disjoint
 * outputs). */
static void max_grad_outer(const rlayout *L, const float *x, const float *dy, float *dx, float *mx, float *cn,
                           int64_t lo, int64_t hi) {
    odo k = L->kept, r = L->redo;
    int64_t nr = odo_count(&r), len = L->len;
    int64_t b0 = lo / len, b1 = (hi + len - 1) / len;
    odo_seek(&k, b0);
    for (int64_t b = b0; b < b1; b++, odo_next(&k)) {
        int64_t c0 = lo - b * len > 0 ? lo - b * len : 0;
        int64_t c1 = hi - b * len < len ? hi - b * len : len;
        const float *xb = x + k.a;
        float *gb = dx + k.a, *m = mx + b * len, *c = cn + b * len;
        odo_seek(&r, 0);
        for (int64_t i = c0; i < c1; i++) {
            m[i] = xb[i];
            c[i] = 1.0f;
        }
        for (int64_t j = 1; j < nr; j++) {
            odo_next(&r);
            const float *row = xb + r.a;
            for (int64_t i = c0; i < c1; i++) {
                if (row[i] > m[i]) {
                    m[i] = row[i];
                    c[i] = 1.0f;
                } else if (row[i] == m[i]) {
                    c[i] += 1.0f;
                }
            }
        }
        for (int64_t i = c0; i < c1; i++)
            c[i] = m[i] == m[i] ? dy[b * len + i] / c[i] : 0.0f;
        odo_seek(&r, 0);
        for (int64_t j = 0; j < nr; j++, odo_next(&r)) {
            const float *row = xb + r.a;
            float *grow = gb + r.a;
            for (int64_t i = c0; i < c1; i++)
                grow[i] = row[i] == m[i] ? c[i] : 0.0f;
        }
    }
}

static size_t s_max_grad(const mpmd_graph *g, const mpmd_node *n) {
    const mpmd_type *gt = mpmd_type_of(g, mpmd_in(n, 1)); /* dy: one element per output */
    return 2 * (size_t)mpmd_type_numel(gt) * sizeof(float);
}

typedef struct {
    const rlayout *L;
    const float *x, *dy;
    float *dx, *mx, *cn;
} max_grad_job;

static void max_grad_part(void *ctx, int64_t lo, int64_t hi) {
    const max_grad_job *j = ctx;
    if (j->L->inner)
        max_grad_inner(j->L, j->x, j->dy, j->dx, lo, hi);
    else
        max_grad_outer(j->L, j->x, j->dy, j->dx, j->mx, j->cn, lo, hi);
}

static int k_max_grad(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const float *x = a->in[0], *dy = a->in[1];
    float *dx = a->out;
    int64_t numel = mpmd_type_numel(a->in_type[0]);
    int64_t n_out = mpmd_type_numel(a->in_type[1]);
    if (numel == 0) return 0;
    rlayout L;
    rlayout_make(a->in_type[0], mpmd_attr_axes(n), &L);
    float *mx = a->scratch, *cn = mx ? mx + n_out : NULL;
    if (!L.inner && !mx) {
        snprintf(a->err, a->err_len, "max_grad: the executor gave no scratch buffer (%lld bytes needed)",
                 (long long)(2 * n_out * (int64_t)sizeof(float)));
        return 1;
    }
    int nt = mpmd_threads_for(a->nthreads, numel);
    if (nt > n_out) nt = (int)n_out;
    max_grad_job j = {&L, x, dy, dx, mx, cn};
    mpmd_cpu_for(a->dev, nt, n_out, max_grad_part, &j);
    return 0;
}

/* ---- copies ------------------------------------------------------------------------ */

/* Copy n_runs runs of `run` 4-byte elements, run i from src + i*ss to
 * dst + i*ds (strides in elements). Threads split the concatenated
 * elements into contiguous ranges, so a few long runs and many short ones
 * both spread over the threads. */
typedef struct {
    uint32_t *dst;
    int64_t ds;
    const uint32_t *src;
    int64_t ss, run;
} runs_job;

static void runs_part(void *ctx, int64_t lo, int64_t hi) {
    const runs_job *j = ctx;
    int64_t i = lo / j->run, c = lo % j->run, pos = lo;
    while (pos < hi) {
        int64_t k = j->run - c < hi - pos ? j->run - c : hi - pos;
        memcpy(j->dst + i * j->ds + c, j->src + i * j->ss + c, (size_t)k * 4);
        pos += k;
        i++;
        c = 0;
    }
}

static void copy_runs(const mpmd_kargs *a, uint32_t *dst, int64_t ds, const uint32_t *src, int64_t ss,
                      int64_t n_runs, int64_t run) {
    int64_t total = n_runs * run;
    runs_job j = {dst, ds, src, ss, run};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, total), total, runs_part, &j);
}

/* reshape: the same bytes; copy only when not given the input's buffer
 * (16-bit elements: one memcpy, no conversion). */
static int k_reshape(const mpmd_kargs *a) {
    if (a->out == a->in[0]) return 0;
    if (mpmd_dtype_size(a->node->type.dtype) == 4)
        copy_runs(a, a->out, 0, a->in[0], 0, 1, mpmd_type_numel(&a->node->type));
    else
        memcpy(a->out, a->in[0], mpmd_type_bytes(&a->node->type));
    return 0;
}

/* slice: y[o, j, i] = x[o, start + j, i] for j < stop - start (o: the axes
 * before, i: the axes after): one contiguous run per o. */
static int k_slice(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner, start = mpmd_attr_start(n), w = mpmd_attr_stop(n) - mpmd_attr_start(n);
    mpmd_axis_split(a->in_type[0], mpmd_attr_axis(n), &outer, &d, &inner);
    copy_runs(a, a->out, w * inner, (const uint32_t *)a->in[0] + start * inner, d * inner, outer, w * inner);
    return 0;
}

/* slice_grad: dx[o, j, i] = dy[o, j - start, i] for start <= j < stop, else
 * 0. Threads split dx's elements; each row o is [zeros | dy run | zeros]. */
typedef struct {
    const float *dy;
    float *dx;
    int64_t row, s0, s1, wrow; /* row: dx's, wrow: dy's */
} slice_grad_job;

static void slice_grad_part(void *ctx, int64_t lo, int64_t hi) {
    const slice_grad_job *j = ctx;
    int64_t pos = lo;
    while (pos < hi) {
        int64_t o = pos / j->row, c = pos % j->row;
        /* the segment of this row holding c: [0,s0) zeros, [s0,s1) copy, [s1,row) zeros */
        int64_t end = c < j->s0 ? j->s0 : c < j->s1 ? j->s1 : j->row;
        if (end - c > hi - pos) end = c + (hi - pos);
        if (c >= j->s0 && c < j->s1)
            memcpy(j->dx + pos, j->dy + o * j->wrow + (c - j->s0), (size_t)(end - c) * sizeof(float));
        else
            memset(j->dx + pos, 0, (size_t)(end - c) * sizeof(float));
        pos += end - c;
    }
}

static int k_slice_grad(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int64_t outer, d, inner, w = mpmd_attr_stop(n) - mpmd_attr_start(n);
    mpmd_axis_split(&n->type, mpmd_attr_axis(n), &outer, &d, &inner);
    int64_t row = d * inner, s0 = mpmd_attr_start(n) * inner, s1 = mpmd_attr_stop(n) * inner,
            total = outer * row;
    const float *dy = a->in[0];
    float *dx = a->out;
    slice_grad_job j = {dy, dx, row, s0, s1, w * inner};
    mpmd_cpu_for(a->dev, mpmd_threads_for(a->nthreads, total), total, slice_grad_part, &j);
    return 0;
}

/* concat: y[o, off_k + j, i] = x_k[o, j, i]: per operand k, one run per o. */
static int k_concat(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    int ax = mpmd_attr_axis(n);
    int64_t outer, dt, inner, off = 0;
    mpmd_axis_split(&n->type, ax, &outer, &dt, &inner);
    for (int k = 0; k < n->n_in; k++) {
        int64_t dk = a->in_type[k]->dim[ax];
        copy_runs(a, (uint32_t *)a->out + off * inner, dt * inner, a->in[k], dk * inner, outer, dk * inner);
        off += dk;
    }
    return 0;
}

/* ---- permute ----------------------------------------------------------------------- */

/* The permutation is simplified by mpmd_perm_plan_make (shape_plan.c, shared
 * with the CUDA kernels): size-1 axes dropped, input axes that stay adjacent
 * and in order in the output merged; in_size[] are the merged input axes,
 * q[] the permutation over them (output axis i = merged input axis q[i]). */

#define TILE 32

typedef struct {
    const uint32_t *x;
    uint32_t *y;
    const odo *walk;               /* rows, or the axes besides the two transposed */
    int64_t len;                   /* rows: elements per row */
    int64_t ntile, na, nb, sa, tb; /* tiles: see k_permute */
} perm_job;

static void perm_rows_part(void *ctx, int64_t lo, int64_t hi) {
    const perm_job *j = ctx;
    odo o = *j->walk;
    odo_seek(&o, lo);
    for (int64_t r = lo; r < hi; r++, odo_next(&o))
        memcpy(j->y + r * j->len, j->x + o.a, (size_t)j->len * 4);
}

static void perm_tiles_part(void *ctx, int64_t lo, int64_t hi) {
    const perm_job *j = ctx;
    const int64_t ntile = j->ntile, na = j->na, nb = j->nb, sa = j->sa, tb = j->tb;
    uint32_t buf[TILE * TILE];
    odo o = *j->walk;
    odo_seek(&o, lo / ntile);
    for (int64_t it = lo; it < hi; it++) {
        int64_t t = it % ntile;
        if (it > lo && t == 0) odo_next(&o);
        const uint32_t *xs = j->x + o.a;
        uint32_t *ys = j->y + o.b;
        int64_t a0 = t * TILE, an = a0 + TILE < na ? TILE : na - a0;
        for (int64_t b0 = 0; b0 < nb; b0 += TILE) {
            int64_t bn = b0 + TILE < nb ? TILE : nb - b0;
            for (int64_t i = 0; i < an; i++) {
                const uint32_t *src = xs + (a0 + i) * sa + b0;
                for (int64_t k = 0; k < bn; k++)
                    buf[k * TILE + i] = src[k];
            }
            for (int64_t k = 0; k < bn; k++)
                memcpy(ys + (b0 + k) * tb + a0, buf + k * TILE, (size_t)an * 4);
        }
    }
}

/* permute: y[i_0, ..., i_{m-1}] = x at input index j with j[q[k]] = i_k. */
static int k_permute(const mpmd_kargs *a) {
    const mpmd_node *n = a->node;
    const uint32_t *x = a->in[0];
    uint32_t *y = a->out;
    int64_t numel = mpmd_type_numel(&n->type);
    if (numel == 0) return 0;
    mpmd_perm_plan P;
    mpmd_perm_plan_make(&P, a->in_type[0], mpmd_attr_perms(n));
    if (P.identity) { /* nothing moves: one copy */
        copy_runs(a, y, 0, x, 0, 1, numel);
        return 0;
    }
    int m = P.m;
    const int64_t *istr = P.istr, *ostr = P.ostr;
    int nt = mpmd_threads_for(a->nthreads, numel);
    if (P.last_stays) {
        /* The last axis stays last (e.g. [B,T,H,D] <-> [B,H,T,D]): copy rows
         * of len elements; the odometer walks output rows, offset a = input. */
        int64_t len = P.in_size[m - 1];
        odo rows = {0};
        for (int k = 0; k < m - 1; k++)
            odo_push(&rows, P.in_size[P.q[k]], istr[P.q[k]], 0);
        int64_t nrows = numel / len;
        if (nt > nrows) nt = (int)nrows;
        perm_job j = {x, y, &rows, len, 0, 0, 0, 0, 0};
        mpmd_cpu_for(a->dev, nt, nrows, perm_rows_part, &j);
        return 0;
    }
    /* The last axis moves: a 2-D transpose of input axis ia (the output's
     * last, stride sa in x, 1 in y) and the input's last axis (output axis
     * p, stride 1 in x, tb in y), for every index of the other axes
     * (odometer: a = input offset, b = output offset). It goes tile by tile
     * through a TILE x TILE buffer: whole tile rows are read from x, whole
     * tile rows written to y, so no cache line is visited twice even when
     * the strides are powers of two (where a direct strided loop thrashes
     * the cache sets). Threads split (outer index, tile row) items. */
    int ia = P.ia, p = P.p;
    int64_t na = P.in_size[ia], nb = P.in_size[m - 1], sa = istr[ia], tb = ostr[p];
    odo rest = {0};
    for (int k = 0; k < m - 1; k++)
        if (k != p) odo_push(&rest, P.in_size[P.q[k]], istr[P.q[k]], ostr[k]);
    int64_t ntile = (na + TILE - 1) / TILE, items = odo_count(&rest) * ntile;
    if (nt > items) nt = (int)items;
    perm_job j = {x, y, &rest, 0, ntile, na, nb, sa, tb};
    mpmd_cpu_for(a->dev, nt, items, perm_tiles_part, &j);
    return 0;
}

const mpmd_kernel mpmd_cpu_reduce_kernels[] = {
    {&mpmd_op_sum, k_reduce, NULL, 0},
    {&mpmd_op_mean, k_reduce, NULL, 0},
    {&mpmd_op_max, k_reduce, NULL, 0},
    {&mpmd_op_max_grad, k_max_grad, s_max_grad, 0},
    {&mpmd_op_reshape, k_reshape, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {&mpmd_op_permute, k_permute, NULL, 0},
    {&mpmd_op_slice, k_slice, NULL, 0},
    {&mpmd_op_slice_grad, k_slice_grad, NULL, 0},
    {&mpmd_op_concat, k_concat, NULL, 0},
    {0},
};
