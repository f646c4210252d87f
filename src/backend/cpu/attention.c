/* CPU kernels of fused attention (mpmd_attention and its gradient, ops in
 * src/ops/nn.c), apart from the rest of the neural-network family
 * (nn.c): the same rules, every output computed by one thread in an order
 * fixed by the shapes, every product an sgemm.
 */
#include "cpu.h"

#include "../../ops/nn.h"

#include <math.h>
#include <string.h>

/* ---- attention ------------------------------------------------------------------------------ */

/* q, k, v and o are [B, T, H, D]: head h of position t of item b is the D
 * floats at ((b T + t) H + h) D, so one head's positions are H D apart, and
 * every product below reads and writes them where they lie (sgemm's leading
 * dimension H D): nothing is gathered. The queries of a head go in blocks of
 * ATT_QB (half that below 256 positions, where skipping the masked part of
 * a short causal square in finer steps gains more than larger products); a
 * block [i0, i1) needs the keys [0, kend), kend = T, or i1 when causal
 * (every later key is masked for all its rows). Its scores S = scale Q_blk
 * K^T [i1 - i0, kend] go to the thread's slot of scratch, and each row
 * becomes E = exp(S - max) over its unmasked prefix (j <= i when causal;
 * the masked entries exactly 0) with r = 1 / sum(E), as in softmax_row;
 * P = r E. The forward computes O_blk = E V and scales each row by r (a
 * pass over D numbers instead of kend). All in f32, each product one
 * single-threaded sgemm (as in k_matmul). An output element is written by
 * one thread in an order fixed by the shapes alone: the same bits on any
 * thread count. No [T, T] tensor is ever stored.
 *
 * Scratch: the thread count is not known when scratch is planned, so it is
 * sized for ATT_SLOTS slots (fewer when there are fewer work units) and at
 * most that many threads run. A slot holds a block's E and its r (forward),
 * or P, dP and r (backward): about 64 T floats, twice that backward. */
static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }

#define ATT_QB 64
#define ATT_SLOTS 32

typedef struct att_shape {
    int64_t B, T, H, D;
    int64_t qb, nqb; /* query block size, blocks per head */
    int64_t ld;      /* H D: the distance between a head's positions */
    int causal;
    float scale;
} att_shape;

static att_shape att_shape_of(const mpmd_type *t, const mpmd_node *n) {
    att_shape s;
    s.B = t->dim[0], s.T = t->dim[1], s.H = t->dim[2], s.D = t->dim[3];
    s.qb = s.T < 256 ? ATT_QB / 2 : ATT_QB;
    if (s.qb > s.T) s.qb = s.T;
    s.nqb = s.qb ? (s.T + s.qb - 1) / s.qb : 0;
    s.ld = s.H * s.D;
    s.causal = mpmd_attention_causal(n);
    s.scale = mpmd_attention_scale(n);
    return s;
}

/* Floats of one slot, each part a multiple of 16 (64-byte aligned). */
static int64_t att_slot_floats(const att_shape *s, int grad) {
    int64_t tt = round_up(s->qb * s->T, 16), r = round_up(s->qb, 16);
    return (grad ? 2 * tt : tt) + r;
}
static int64_t att_slots(int64_t units) { return units < ATT_SLOTS ? units : ATT_SLOTS; }

/* Work units: forward (b, h, query block), backward (b, h) (dK and dV sum
 * over a head's query blocks, in order, on one thread). */
static int64_t att_units(const att_shape *s, int grad) { return s->B * s->H * (grad ? 1 : s->nqb); }

static size_t scratch_attention_common(const mpmd_graph *g, const mpmd_node *n, int grad) {
    att_shape s = att_shape_of(mpmd_type_of(g, mpmd_in(n, 0)), n);
    return (size_t)(att_slots(att_units(&s, grad)) * att_slot_floats(&s, grad)) * sizeof(float);
}
static size_t scratch_attention(const mpmd_graph *g, const mpmd_node *n) {
    return scratch_attention_common(g, n, 0);
}
static size_t scratch_attention_grad(const mpmd_graph *g, const mpmd_node *n) {
    return scratch_attention_common(g, n, 1);
}

/* The threads for `units` units of attention work: those worth it for its
 * flops, at most one per unit and one per slot. */
static int att_threads(const mpmd_kargs *a, int64_t units, double per_unit_flops) {
    int nt = mpmd_threads_for(a->nthreads, (int64_t)((double)units * per_unit_flops));
    int64_t slots = att_slots(units);
    return nt < slots ? nt : (int)slots;
}

/* E = exp(scale Q_blk K[0:kend]^T - row max) for the query block [i0, i0 +
 * m), E [m, kend] row-major, masked entries 0; r[row] = 1 / sum(E[row]).
 * The forward's and the backward's recomputation alike. */
MPMD_VEC_CLONES
static void att_exp(const att_shape *s, const float *qb, const float *kh, int64_t i0, int64_t m, int64_t kend,
                    float *e, float *r) {
    mpmd_sgemm(1, 0, 1, m, kend, s->D, s->scale, qb, s->ld, kh, s->ld, 0.0f, e, kend);
    for (int64_t row = 0; row < m; row++) {
        float *x = e + row * kend;
        int64_t len = s->causal ? i0 + row + 1 : kend;
        float mx = mpmd_max_f32(x, len);
#pragma omp simd
        for (int64_t j = 0; j < len; j++)
            x[j] = mpmd_exp_f32(x[j] - mx);
        r[row] = 1.0f / mpmd_sum_f32(x, len);
        for (int64_t j = len; j < kend; j++)
            x[j] = 0.0f;
    }
}

static int att_no_scratch(const mpmd_kargs *a, const char *op, size_t need) {
    snprintf(a->err, a->err_len, "%s: the executor gave no scratch buffer (%zu bytes needed)", op, need);
    return 1;
}

/* o = attention(q, k, v), parallel over (b, h, query block); part t
 * uses scratch slot t. */
static void attention_part(void *ctx, int tid, int nt) {
    const mpmd_kargs *a = ctx;
    const att_shape s = att_shape_of(a->in_type[0], a->node);
    const float *q = a->in[0], *k = a->in[1], *v = a->in[2];
    float *o = a->out;
    const int64_t units = att_units(&s, 0), slot = att_slot_floats(&s, 0);
    float *e = (float *)a->scratch + tid * slot, *r = e + round_up(s.qb * s.T, 16);
    int64_t lo, hi;
    mpmd_split(units, tid, nt, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        int64_t bh = u / s.nqb, i0 = (u % s.nqb) * s.qb;
        int64_t m = s.T - i0 < s.qb ? s.T - i0 : s.qb, kend = s.causal ? i0 + m : s.T;
        int64_t base = ((bh / s.H) * s.T * s.H + bh % s.H) * s.D; /* (b, t = 0, h) */
        float *ob = o + base + i0 * s.ld;
        att_exp(&s, q + base + i0 * s.ld, k + base, i0, m, kend, e, r);
        mpmd_sgemm(1, 0, 0, m, s.D, kend, 1.0f, e, kend, v + base, s.ld, 0.0f, ob, s.ld);
        for (int64_t row = 0; row < m; row++) {
            float *orow = ob + row * s.ld, rr = r[row];
#pragma omp simd
            for (int64_t d = 0; d < s.D; d++)
                orow[d] *= rr;
        }
    }
}

static int k_attention(const mpmd_kargs *a) {
    const att_shape s = att_shape_of(a->in_type[0], a->node);
    const int64_t units = att_units(&s, 0);
    if (units == 0) return 0;
    if (!a->scratch) return att_no_scratch(a, "attention", scratch_attention(a->g, a->node));
    int nt = att_threads(a, units, 4.0 * (double)s.qb * (double)s.T * (double)s.D);
    mpmd_cpu_parallel(a->dev, nt, attention_part, (void *)a);
    return 0;
}

/* [dq, dk, dv] = attention_grad(q, k, v, o, do), parallel over (b, h). Per
 * query block (in order): E and r recomputed as the forward does, dP = dO
 * V^T, then in one pass P = r E and dS = P (dP - D_i) with D_i = dO_i . o_i
 * (0 where masked), and
 *   dQ_blk = scale dS K,  dK += scale dS^T Q_blk,  dV += P^T dO_blk
 * over the block's keys [0, kend); dK and dV start at 0. */
static void attention_grad_part(void *ctx, int tid, int nt) {
    const mpmd_kargs *a = ctx;
    const att_shape s = att_shape_of(a->in_type[0], a->node);
    const float *q = a->in[0], *k = a->in[1], *v = a->in[2], *o = a->in[3], *go = a->in[4];
    const int64_t plane = s.B * s.T * s.ld;
    float *dq = a->out, *dk = dq + plane, *dv = dk + plane;
    const int64_t units = att_units(&s, 1), slot = att_slot_floats(&s, 1);
    float *p = (float *)a->scratch + tid * slot, *dp = p + round_up(s.qb * s.T, 16);
    float *r = dp + round_up(s.qb * s.T, 16);
    int64_t lo, hi;
    mpmd_split(units, tid, nt, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t base = ((bh / s.H) * s.T * s.H + bh % s.H) * s.D; /* (b, t = 0, h) */
        for (int64_t t = 0; t < s.T; t++) {
            memset(dk + base + t * s.ld, 0, (size_t)s.D * sizeof(float));
            memset(dv + base + t * s.ld, 0, (size_t)s.D * sizeof(float));
        }
        for (int64_t i0 = 0; i0 < s.T; i0 += s.qb) {
            int64_t m = s.T - i0 < s.qb ? s.T - i0 : s.qb, kend = s.causal ? i0 + m : s.T;
            const float *qb = q + base + i0 * s.ld, *gb = go + base + i0 * s.ld;
            att_exp(&s, qb, k + base, i0, m, kend, p, r);
            mpmd_sgemm(1, 0, 1, m, kend, s.D, 1.0f, gb, s.ld, v + base, s.ld, 0.0f, dp, kend);
            for (int64_t row = 0; row < m; row++) {
                float *pr = p + row * kend, *dr = dp + row * kend, rr = r[row];
                float di = mpmd_dot_f32(gb + row * s.ld, o + base + (i0 + row) * s.ld, s.D);
                int64_t len = s.causal ? i0 + row + 1 : kend;
#pragma omp simd
                for (int64_t j = 0; j < len; j++) {
                    float pj = pr[j] * rr;
                    pr[j] = pj;
                    dr[j] = pj * (dr[j] - di);
                }
                for (int64_t j = len; j < kend; j++)
                    dr[j] = 0.0f;
            }
            mpmd_sgemm(1, 0, 0, m, s.D, kend, s.scale, dp, kend, k + base, s.ld, 0.0f, dq + base + i0 * s.ld,
                       s.ld);
            mpmd_sgemm(1, 1, 0, kend, s.D, m, s.scale, dp, kend, qb, s.ld, 1.0f, dk + base, s.ld);
            mpmd_sgemm(1, 1, 0, kend, s.D, m, 1.0f, p, kend, gb, s.ld, 1.0f, dv + base, s.ld);
        }
    }
}

static int k_attention_grad(const mpmd_kargs *a) {
    const att_shape s = att_shape_of(a->in_type[0], a->node);
    const int64_t units = att_units(&s, 1);
    if (units == 0 || s.T == 0) return 0; /* nothing to write */
    if (!a->scratch) return att_no_scratch(a, "attention_grad", scratch_attention_grad(a->g, a->node));
    int nt = att_threads(a, units, 10.0 * (double)s.T * (double)s.T * (double)s.D);
    mpmd_cpu_parallel(a->dev, nt, attention_grad_part, (void *)a);
    return 0;
}

/* ---- the table ------------------------------------------------------------------------------ */

const mpmd_kernel mpmd_cpu_attention_kernels[] = {
    {&mpmd_op_attention, k_attention, scratch_attention, 0},
    {&mpmd_op_attention_grad, k_attention_grad, scratch_attention_grad, 0},
    {0},
};
