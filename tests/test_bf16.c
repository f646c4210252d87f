/* test_bf16 - 16-bit floats (bf16, f16) on the CPU.
 *
 * 1. Every float op, on 16-bit operands against f32. Small graphs built with
 *    the public constructors and mpmd_grad, their float inputs bf16 (then
 *    f16) filled with random f32 values rounded to the dtype, run node by
 *    node through the CPU backend as an executor runs them. For each node
 *    with a 16-bit operand or result, the op's f32 kernel runs again on the
 *    same operands widened to f32 (exact), and the two results are compared:
 *    - within the op's tolerance (table below), in units of the dtype's unit
 *      roundoff u (2^-8 bf16, 2^-11 f16: the largest relative error of one
 *      rounding to nearest);
 *    - and, where the kernel does not take 16-bit operands natively (so the
 *      backend widens them), bit for bit the f32 result rounded to nearest
 *      even: the rule "compute in f32, round once on store" (backend.h).
 *    Every op of the CPU's kernel tables must be checked so in both dtypes
 *    (but cast, tested in 2, and the optimizers, which only see f32). The
 *    same graphs then run through the public executor (memory plan, in-place
 *    reuse, two threads), which must give the node-by-node values bit for bit.
 * 2. Rounding, exactly: mpmd_cast between f32, bf16 and f16 on values whose
 *    results are worked out by hand: ties to even, just above and below a
 *    tie, carries into the exponent, overflow to inf (bf16 past the largest
 *    f32 tie, f16 from 65520 up), subnormals and underflow, inf, NaN (also
 *    signalling NaN and all-ones payloads, which naive rounding turns into
 *    inf or -0), -0; and adds whose exact sums are ties.
 * 3. Storage: a bf16 or f16 tensor takes half the bytes of an f32 one.
 * 4. A GPT-shaped model (embedding, two mpmd_gpt_block, final layer norm,
 *    LM head, cross-entropy) built in bf16 and in f32 from the same f32
 *    parameters (same names and seed): losses within 2% over a few AdamW
 *    steps, and the first step's f32 parameter gradients (through the casts)
 *    within 3% (relative L2; 5% for any one parameter).
 */
#include "testutil.h"

#include "backend/backend.h"
#include "backend/op_descs.h"
#include "backend/cpu/cpu.h"
#include "graph/graph.h"
#include "ops/nn.h"
#include "ops/optim.h"
#include "util/half.h"

#include "gpt_model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 777u

static int is16(mpmd_dtype d) { return d == MPMD_BF16 || d == MPMD_F16; }

static float widen1(mpmd_dtype d, uint16_t h) {
    return d == MPMD_BF16 ? mpmd_bf16_to_f32(h) : mpmd_f16_to_f32(h);
}

static uint16_t round1(mpmd_dtype d, float v) {
    return d == MPMD_BF16 ? mpmd_f32_to_bf16(v) : mpmd_f32_to_f16(v);
}

static void *xmalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) / 64 * 64 : 64)) {
        fprintf(stderr, "test_bf16: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ======================================================================== */
/* 1. every float op: 16-bit against f32                                     */
/* ======================================================================== */

/* The tolerance of an op's 16-bit result against its f32 result on the same
 * operands, in units of u: |r16 - r32| <= ulps * u * |r32| (+ in f16, where
 * results may be subnormal, half its subnormal spacing 2^-25 when ulps > 0).
 *   0  data movement and selection: the result is some of the operands'
 *      values, which are 16-bit already, so nothing is rounded;
 *   1  one formula per element, computed in f32 and rounded once: at most
 *      half an ulp, u relative;
 *   2  sums, products and row statistics: one rounding of the f32 result,
 *      and one more u of slack for a native 16-bit kernel that accumulates
 *      (in f32) in an order of its own (the CPU widens, so it gets 1). */
typedef struct op_tol {
    const mpmd_op_desc *op;
    int ulps;
} op_tol;

static const op_tol op_tols[] = {
    {&mpmd_op_add_scalar, 1},
    {&mpmd_op_mul_scalar, 1},
    {&mpmd_op_broadcast_to, 0},
    {&mpmd_op_sum_to, 2},
    {&mpmd_op_sum, 2},
    {&mpmd_op_mean, 2},
    {&mpmd_op_max, 0},
    {&mpmd_op_max_grad, 1}, /* gy / (number of ties) */
    {&mpmd_op_reshape, 0},
    {&mpmd_op_permute, 0},
    {&mpmd_op_slice, 0},
    {&mpmd_op_slice_grad, 0},
    {&mpmd_op_concat, 0},
    {&mpmd_op_matmul, 2},
    {&mpmd_op_softmax, 2},
    {&mpmd_op_softmax_causal, 2},
    {&mpmd_op_log_softmax, 2},
    {&mpmd_op_softmax_grad, 2},
    {&mpmd_op_softmax_causal_grad, 2},
    {&mpmd_op_log_softmax_grad, 2},
    {&mpmd_op_layer_norm, 2},
    {&mpmd_op_layer_norm_grad_x, 2},
    {&mpmd_op_layer_norm_grad_gamma, 2},
    {&mpmd_op_embedding, 0},
    {&mpmd_op_embedding_grad, 2},
    {&mpmd_op_cross_entropy, 2}, /* an f32 loss from 16-bit logits: must equal the f32 kernel's */
    {&mpmd_op_cross_entropy_grad, 2},
    {&mpmd_op_stage_marker, 0},
    {&mpmd_op_compare, 0},
    {&mpmd_op_max_weight, 0},
    {&mpmd_op_where, 0},
    {&mpmd_op_where_grad, 0},
    {&mpmd_op_dropout, 1},
/* the lists of src/ops/elementwise_ops.h: a formula (ELEM) 1, a
 * selection (EXACT) 0 */
// clang-format off
#define ULPS_ELEM 1
#define ULPS_EXACT 0
#define UNARY_TOL(name, reads, tol, ...) {&mpmd_op_##name, ULPS_##tol},
#define UNARY_GRAD_TOL(name, reads, tol, ...) {&mpmd_op_##name, ULPS_##tol}, {&mpmd_op_##name##_grad, ULPS_##tol},
#define BINARY_TOL(name, tol) {&mpmd_op_##name, ULPS_##tol},
    MPMD_BINARY_OPS(BINARY_TOL) MPMD_UNARY_OPS(UNARY_TOL) MPMD_UNARY_GRAD_OPS(UNARY_GRAD_TOL)
    // clang-format on
    {&mpmd_op_rms_norm, 2},
    {&mpmd_op_rms_norm_grad_x, 2},
    {&mpmd_op_rms_norm_grad_scale, 2},
    {&mpmd_op_rope, 2},
    {&mpmd_op_rope_at, 2},
    {&mpmd_op_attention, 2},
    {&mpmd_op_attention_grad, 2},
};
#define N_TOLS ((int)(sizeof op_tols / sizeof op_tols[0]))

static int tol_index(const mpmd_op_desc *op) {
    for (int i = 0; i < N_TOLS; i++)
        if (op_tols[i].op == op) return i;
    return -1;
}

/* Ops of the CPU's tables this part does not check: cast (part 2 checks its
 * rounding exactly) and the optimizers, which update f32 master parameters
 * with f32 gradients and state (no graph gives them 16-bit operands). */
static int not_checked_here(const mpmd_op_desc *op) {
    return op == &mpmd_op_cast || op == &mpmd_op_sgd || op == &mpmd_op_adamw || op == &mpmd_op_optim_step;
}

/* Per op and dtype (0 bf16, 1 f16): nodes checked, elements, the largest
 * error seen in units of u. */
typedef struct opstat {
    int nodes[N_TOLS][2];
    int64_t elems[N_TOLS][2];
    double max_u[N_TOLS][2];
} opstat;

/* ---- building the graphs ---------------------------------------------- */

#define MAX_IN 16

typedef struct bb {
    mpmd_graph *g;
    mpmd_dtype dt; /* the dtype of the float inputs */
    int n_in;
    struct {
        int id;
        float lo, hi, step;
        int32_t classes;
    } in[MAX_IN];
    uint64_t seed;
    mpmd_value loss;
} bb;

#define D(...) MPMD_SHAPE(__VA_ARGS__)

static mpmd_value input(bb *b, const char *name, mpmd_dtype dt, float lo, float hi, float step,
                        int32_t classes, int ndim, const int64_t *dims) {
    mpmd_value v = mpmd_input(b->g, name, dt, ndim, dims);
    if (mpmd_is_value(v) && b->n_in < MAX_IN) {
        b->in[b->n_in].id = v.id;
        b->in[b->n_in].lo = lo, b->in[b->n_in].hi = hi, b->in[b->n_in].step = step;
        b->in[b->n_in].classes = classes;
        b->n_in++;
    }
    return v;
}

/* A float input of the graph's dtype, uniform in [lo, hi), rounded to it. */
static mpmd_value fin(bb *b, const char *name, float lo, float hi, int ndim, const int64_t *dims) {
    return input(b, name, b->dt, lo, hi, 0.0f, 0, ndim, dims);
}

static mpmd_value iin(bb *b, const char *name, int32_t classes, int ndim, const int64_t *dims) {
    return input(b, name, MPMD_I32, 0, 0, 0, classes, ndim, dims);
}

/* loss += sum(f32(y) * r), r a fixed random f32 constant of y's shape: the
 * loss is f32, and y's cotangent (r) enters y's op cast back to its dtype. */
static void acc(bb *b, mpmd_value y) {
    mpmd_graph *g = b->g;
    if (mpmd_graph_status(g) != MPMD_OK) return;
    y = mpmd_cast(g, y, MPMD_F32);
    mpmd_type t = mpmd_value_type(g, y);
    int64_t n = mpmd_type_numel(&t);
    float *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    if (!r) exit(1);
    uint64_t s = tu_mix64(++b->seed * 7919u);
    for (int64_t i = 0; i < n; i++)
        r[i] = (float)(tu_unif(&s) * 2.0 - 1.0);
    mpmd_value l = mpmd_sum(g, mpmd_mul(g, y, mpmd_constant(g, MPMD_F32, t.ndim, t.dim, r)), 0, NULL, 0);
    free(r);
    b->loss = mpmd_is_value(b->loss) ? mpmd_add(g, b->loss, l) : l;
}

/* A stage marker before the loop (the node mpmd_enter_stage makes in one). */
static mpmd_value marker(mpmd_graph *g, mpmd_value x) {
    if (mpmd_graph_status(g) != MPMD_OK) return MPMD_NONE;
    mpmd_value r = mpmd_emit(g, &mpmd_op_stage_marker, 1, &x, mpmd_value_type(g, x));
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) n->ia[0] = 0, n->ia[1] = 0;
    return r;
}

static void g_unary(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value u = fin(b, "u", -2.0f, 2.0f, D(7, 33));
    mpmd_value p = fin(b, "p", 0.25f, 3.0f, D(7, 33));
    /* every op of the lists in src/ops/elementwise_ops.h, on p where the
     * list says POS */
    mpmd_value on[2] = {u, p};
    enum { ANY, POS };
#define UNARY_ACC(name, reads, tol, domain, ...) acc(b, mpmd_##name(g, on[domain]));
    MPMD_UNARY_OPS(UNARY_ACC)
    MPMD_UNARY_GRAD_OPS(UNARY_ACC)
    acc(b, mpmd_add_scalar(g, u, 0.75f));
    acc(b, mpmd_mul_scalar(g, u, -1.5f));
    acc(b, mpmd_exp(g, marker(g, mpmd_mul_scalar(g, u, 0.5f))));
}

static void g_binary(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value a = fin(b, "a", -1.0f, 1.0f, D(4, 7, 33));
    mpmd_value r = fin(b, "r", -1.0f, 1.0f, D(7, 33));
    mpmd_value m = fin(b, "m", -1.0f, 1.0f, D(4, 1, 33));
    mpmd_value l = fin(b, "l", -1.0f, 1.0f, D(4, 7, 1));
    mpmd_value q = fin(b, "q", 0.5f, 2.0f, D(4, 7, 33));
    mpmd_value s = fin(b, "s", 0.5f, 1.5f, 0, NULL);
    acc(b, mpmd_add(g, a, r));
    acc(b, mpmd_sub(g, a, m));
    acc(b, mpmd_mul(g, a, l));
    acc(b, mpmd_div(g, a, q));
    acc(b, mpmd_div(g, s, q));
    acc(b, mpmd_mul(g, s, a));
    acc(b, mpmd_add(g, m, l));
    acc(b, mpmd_broadcast_to(g, l, D(2, 4, 7, 5)));
    acc(b, mpmd_sum_to(g, a, D(7, 1)));
    acc(b, mpmd_sum_to(g, a, 0, NULL));
}

static void g_reduce(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value x = fin(b, "x", -1.0f, 1.0f, D(5, 7, 33));
    mpmd_value w = fin(b, "w", -1.0f, 1.0f, D(6, 130));
    /* on a grid of 0.5: ties, which max's gradient splits */
    mpmd_value t = input(b, "t", b->dt, -1.0f, 1.0f, 0.5f, 0, D(6, 9, 10));
    acc(b, mpmd_sum(g, x, MPMD_AXES(0), 0));
    acc(b, mpmd_sum(g, x, MPMD_AXES(-1), 1));
    acc(b, mpmd_sum(g, w, 0, NULL, 0));
    acc(b, mpmd_mean(g, x, MPMD_AXES(0, 1), 1));
    acc(b, mpmd_mean(g, w, MPMD_AXES(1), 0));
    acc(b, mpmd_max(g, x, MPMD_AXES(2), 1));
    acc(b, mpmd_max(g, w, MPMD_AXES(0), 0));
    acc(b, mpmd_max(g, t, MPMD_AXES(2), 0));
    acc(b, mpmd_max(g, t, 0, NULL, 1));
}

static void g_shape(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value x = fin(b, "x", -1.0f, 1.0f, D(2, 7, 5, 33));
    mpmd_value y = fin(b, "y", -1.0f, 1.0f, D(2, 7, 5, 3));
    acc(b, mpmd_permute(g, x, (const int[]){0, 2, 1, 3}));
    acc(b, mpmd_transpose(g, x));
    acc(b, mpmd_reshape(g, x, D(14, 165)));
    acc(b, mpmd_slice(g, x, 1, 2, 6));
    acc(b, mpmd_slice(g, x, -1, 3, 30));
    mpmd_value p0 = mpmd_slice(g, x, 2, 0, 2);
    mpmd_value p2 = mpmd_slice(g, x, 2, 4, 5);
    mpmd_value parts[3] = {p0, x, p2};
    acc(b, mpmd_concat(g, 3, parts, 2));
    mpmd_value wide[2] = {y, x};
    acc(b, mpmd_concat(g, 2, wide, -1));
}

static void g_matmul(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value a = fin(b, "a", -1.0f, 1.0f, D(7, 33));
    mpmd_value at = fin(b, "at", -1.0f, 1.0f, D(33, 7));
    mpmd_value w = fin(b, "w", -1.0f, 1.0f, D(33, 20));
    mpmd_value wt = fin(b, "wt", -1.0f, 1.0f, D(20, 33));
    mpmd_value a3 = fin(b, "a3", -1.0f, 1.0f, D(3, 7, 33));
    mpmd_value b3 = fin(b, "b3", -1.0f, 1.0f, D(3, 33, 9));
    acc(b, mpmd_matmul(g, a, w, 0));
    acc(b, mpmd_matmul(g, at, w, MPMD_TRANS_A));
    acc(b, mpmd_matmul(g, a, wt, MPMD_TRANS_B));
    acc(b, mpmd_matmul(g, at, wt, MPMD_TRANS_A | MPMD_TRANS_B));
    acc(b, mpmd_matmul(g, a3, w, 0)); /* a 2-D b shared by a batch */
    acc(b, mpmd_matmul(g, a3, b3, 0));
    acc(b, mpmd_matmul_scaled(g, a3, b3, 0, 0.37f));
}

static void g_softmax(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value x = fin(b, "x", -3.0f, 3.0f, D(3, 7, 33));
    mpmd_value s = fin(b, "s", -3.0f, 3.0f, D(2, 3, 17, 17));
    acc(b, mpmd_softmax(g, x));
    acc(b, mpmd_log_softmax(g, x));
    acc(b, mpmd_softmax_causal(g, s));
}

/* Layer norm with x, gamma and beta all in the dtype (casts of f32
 * parameters), embedding from a table in the dtype, cross-entropy on
 * logits in the dtype (its loss is f32). */
static void g_nn(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value x = fin(b, "x", -1.0f, 3.0f, D(6, 130));
    mpmd_value gamma = mpmd_param(g, "gamma", D(130), (mpmd_init){MPMD_INIT_UNIFORM, 0.5f, 1.5f});
    mpmd_value beta = mpmd_param(g, "beta", D(130), MPMD_NORMAL(0.5f));
    acc(b, mpmd_layer_norm(g, x, mpmd_cast(g, gamma, b->dt), mpmd_cast(g, beta, b->dt), 1e-5f));
    mpmd_value table = mpmd_param(g, "table", D(50, 33), MPMD_NORMAL(1.0f));
    mpmd_value ids = iin(b, "ids", 50, D(4, 7));
    acc(b, mpmd_embedding(g, mpmd_cast(g, table, b->dt), ids));
    mpmd_value logits = fin(b, "logits", -3.0f, 3.0f, D(3, 7, 40));
    mpmd_value labels = iin(b, "labels", 40, D(3, 7));
    acc(b, mpmd_cross_entropy(g, logits, labels));
}

/* The LLaMA family: sigmoid, silu, maximum / minimum, compare, where,
 * dropout, RMS norm, rotary embeddings (and their gradients). */
static void g_llama(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value u = fin(b, "u", -3.0f, 3.0f, D(7, 33));
    mpmd_value w = fin(b, "w", -3.0f, 3.0f, D(33));
    acc(b, mpmd_sigmoid(g, u));
    acc(b, mpmd_silu(g, u));
    acc(b, mpmd_maximum(g, u, w));
    acc(b, mpmd_minimum(g, w, u));
    acc(b, mpmd_where(g, mpmd_compare(g, u, w, MPMD_CMP_GT), u, mpmd_mul_scalar(g, w, 0.5f)));
    acc(b, mpmd_dropout(g, u, 0.3f, iin(b, "key", 1000, D(2))));
    mpmd_value x = fin(b, "x", -1.0f, 3.0f, D(6, 130));
    mpmd_value scale = mpmd_param(g, "rms_scale", D(130), (mpmd_init){MPMD_INIT_UNIFORM, 0.5f, 1.5f});
    acc(b, mpmd_rms_norm(g, x, mpmd_cast(g, scale, b->dt), 1e-6f));
    acc(b, mpmd_rope(g, fin(b, "q", -2.0f, 2.0f, D(2, 9, 3, 16)), 10000.0f, 4));
    const mpmd_rope_scaling l3 = {8.0f, 1.0f, 4.0f, 64};
    acc(b, mpmd_rope_at(g, fin(b, "qa", -2.0f, 2.0f, D(2, 9, 3, 16)), iin(b, "pos", 5000, D(2, 9)), 500000.0f,
                        &l3));
}

/* Attention (causal and not) and a GPT-2 block, as the layers make them. */
static void g_blocks(bb *b) {
    mpmd_graph *g = b->g;
    mpmd_value q = fin(b, "q", -1.5f, 1.5f, D(2, 7, 3, 5));
    mpmd_value k = fin(b, "k", -1.5f, 1.5f, D(2, 7, 3, 5));
    mpmd_value v = fin(b, "v", -1.0f, 1.0f, D(2, 7, 3, 5));
    acc(b, mpmd_attention(g, q, k, v, 1));
    acc(b, mpmd_attention(g, q, k, v, 0));
    mpmd_value x = fin(b, "x", -1.0f, 1.0f, D(2, 9, 36));
    acc(b, mpmd_gpt_block(g, "block", x, 4));
}

typedef struct gcase {
    const char *name;
    void (*build)(bb *b);
} gcase;

static const gcase gcases[] = {
    {"unary", g_unary}, {"binary", g_binary}, {"reduce", g_reduce},
    {"shape", g_shape}, {"matmul", g_matmul}, {"softmax", g_softmax},
    {"nn", g_nn},       {"blocks", g_blocks}, {"llama", g_llama},
};
#define N_GCASES ((int)(sizeof gcases / sizeof gcases[0]))

/* The loss's gradients with respect to every parameter and float input,
 * kept with the loss. */
static void finish(bb *b) {
    mpmd_graph *g = b->g;
    if (mpmd_graph_status(g) != MPMD_OK) return;
    mpmd_value wrt[64], gr[64];
    int n = mpmd_graph_params(g, NULL, 0);
    if (n + b->n_in > 64) {
        mpmd_fail(g, MPMD_ERR_INVALID, "test: %d parameters and %d inputs (at most 64)", n, b->n_in);
        return;
    }
    mpmd_graph_params(g, wrt, n);
    for (int i = 0; i < b->n_in; i++)
        if (b->in[i].classes == 0) wrt[n++] = (mpmd_value){b->in[i].id};
    if (mpmd_grad(g, b->loss, n, wrt, gr) != MPMD_OK) return;
    mpmd_keep(g, b->loss);
    for (int i = 0; i < n; i++)
        mpmd_keep(g, gr[i]);
}

/* The starting bytes of leaf i: inputs from their fill, the others from
 * mpmd_leaf_initial_value. */
static void leaf_value(const bb *b, int ci, const mpmd_node *n, void *dst) {
    if (n->op != &mpmd_op_input) {
        mpmd_leaf_initial_value(n, dst, SEED);
        return;
    }
    int k = 0;
    while (k < b->n_in && b->in[k].id != n->id)
        k++;
    int64_t cnt = mpmd_type_numel(&n->type);
    uint64_t s = tu_mix64(((uint64_t)ci << 32) ^ (uint64_t)n->id);
    for (int64_t e = 0; e < cnt; e++) {
        double u = tu_unif(&s);
        if (n->type.dtype == MPMD_I32) {
            ((int32_t *)dst)[e] = (int32_t)(u * b->in[k].classes);
            continue;
        }
        float v;
        if (b->in[k].step > 0) {
            int steps = (int)((b->in[k].hi - b->in[k].lo) / b->in[k].step + 0.5);
            v = b->in[k].lo + b->in[k].step * (float)(int)(u * (steps + 1));
        } else {
            v = (float)(b->in[k].lo + (b->in[k].hi - b->in[k].lo) * u);
        }
        if (is16(n->type.dtype))
            ((uint16_t *)dst)[e] = round1(n->type.dtype, v); /* a random f32 rounded */
        else
            ((float *)dst)[e] = v;
    }
}

static void *ptr_of(void *ctx, int v) { return ((void **)ctx)[v]; }

/* Node i of g (just run into vals[i]) against its op's f32 kernel on the
 * same operands widened. */
static void twin_check(const mpmd_graph *g, int i, const mpmd_kernel *k, void **vals, void *dev,
                       void *scratch, const char *cname, opstat *os) {
    const mpmd_node *n = &g->nodes[i];
    int any16 = is16(n->type.dtype);
    for (int j = 0; j < n->n_in; j++)
        any16 |= is16(g->nodes[n->in[j]].type.dtype);
    if (!any16 || n->op == &mpmd_op_cast) return;
    int ti = tol_index(n->op);
    if (ti < 0) {
        CHECK(0, "%s: op %s ran on 16-bit operands but has no tolerance in op_tols", cname, n->op->name);
        return;
    }
    if (n->n_in > 8) {
        CHECK(0, "%s: op %s has %d operands (at most 8 here)", cname, n->op->name, n->n_in);
        return;
    }
    /* which 16-bit dtype: the output's, else the first 16-bit operand's */
    mpmd_dtype dt16 = n->type.dtype;
    for (int j = 0; !is16(dt16) && j < n->n_in; j++)
        dt16 = g->nodes[n->in[j]].type.dtype;
    const int di = dt16 == MPMD_BF16 ? 0 : 1;
    const double u = dt16 == MPMD_BF16 ? 0x1p-8 : 0x1p-11;
    const double tiny = dt16 == MPMD_BF16 ? 0x1p-126 : 0x1p-14; /* the smallest normal */

    void *in[8];
    mpmd_type ty[8];
    const mpmd_type *typ[8];
    for (int j = 0; j < n->n_in; j++) {
        ty[j] = g->nodes[n->in[j]].type;
        typ[j] = &ty[j];
        in[j] = vals[n->in[j]];
        if (!is16(ty[j].dtype)) continue;
        int64_t c = mpmd_type_numel(&ty[j]);
        float *w = xmalloc((size_t)c * sizeof(float));
        for (int64_t e = 0; e < c; e++)
            w[e] = widen1(ty[j].dtype, ((const uint16_t *)in[j])[e]);
        in[j] = w;
        ty[j].dtype = MPMD_F32;
    }
    mpmd_node twin = *n;
    if (is16(twin.type.dtype)) twin.type.dtype = MPMD_F32;
    const int64_t cnt = mpmd_type_numel(&n->type);
    float *r32 = xmalloc((size_t)cnt * sizeof(float));
    char err[256] = "";
    mpmd_kargs a = {g, &twin, r32, in, typ, 1, scratch, 0, err, sizeof err, dev};
    int rc = k->fn(&a);
    CHECK(rc == 0, "%s: %%%d = %s: the f32 kernel failed: %s", cname, i, n->op->name, err);
    const int strict = !mpmd_kernel_native(k, g, n); /* widened by the backend: must be r32 rounded */
    const int ulps = op_tols[ti].ulps;
    const double atol = (dt16 == MPMD_F16 && ulps > 0) ? 0x1p-25 : 0.0;
    int64_t bad_tol = -1, bad_bits = -1; /* the first element out of tolerance, not rounded so */
    double worst = 0, tv = 0, tr = 0, bv = 0, br = 0;
    for (int64_t e = 0; rc == 0 && e < cnt; e++) {
        double r = r32[e], v;
        int bits_ok;
        if (is16(n->type.dtype)) {
            uint16_t h = ((const uint16_t *)vals[i])[e], want = round1(n->type.dtype, r32[e]);
            v = widen1(n->type.dtype, h);
            bits_ok = h == want || (isnan(v) && isnan(r));
        } else {
            v = ((const float *)vals[i])[e];
            bits_ok = memcmp(&((const float *)vals[i])[e], &r32[e], sizeof(float)) == 0;
        }
        double diff = fabs(v - r);
        if (bad_tol < 0 && !(isnan(v) && isnan(r)) && !(v == r) && !(diff <= ulps * u * fabs(r) + atol))
            bad_tol = e, tv = v, tr = r;
        if (bad_bits < 0 && strict && !bits_ok) bad_bits = e, bv = v, br = r;
        /* the error in u, over normal results (a subnormal's relative error is larger: atol) */
        if (fabs(r) >= tiny && isfinite(r) && isfinite(v) && diff / (u * fabs(r)) > worst)
            worst = diff / (u * fabs(r));
    }
    CHECK(bad_tol<0, "%s/%s: %%%d = %s element %lld: %.9g, the f32 kernel's %.9g: |diff| %.3g > %d u |f32|%s",
                  cname, mpmd_dtype_name(dt16), i, n->op->name, (long long)bad_tol, tv, tr, fabs(tv - tr),
                  ulps, atol> 0
              ? " + 2^-25"
              : "");
    CHECK(bad_bits < 0,
          "%s/%s: %%%d = %s element %lld: %.9g is not the f32 kernel's %.9g rounded to nearest even (compute "
          "in "
          "f32, round once)",
          cname, mpmd_dtype_name(dt16), i, n->op->name, (long long)bad_bits, bv, br);
    os->nodes[ti][di]++;
    os->elems[ti][di] += cnt;
    if (worst > os->max_u[ti][di]) os->max_u[ti][di] = worst;
    for (int j = 0; j < n->n_in; j++)
        if (in[j] != vals[n->in[j]]) free(in[j]);
    free(r32);
}

/* Build gcases[ci] in dtype dt, run it node by node with the twin checks,
 * then through mpmd_exec, whose kept values must match bit for bit. */
static void run_gcase(int ci, mpmd_dtype dt, opstat *os) {
    const gcase *gc = &gcases[ci];
    char cname[64];
    snprintf(cname, sizeof cname, "%s", gc->name);
    bb b;
    memset(&b, 0, sizeof b);
    b.g = mpmd_graph_new();
    b.dt = dt;
    b.loss = MPMD_NONE;
    b.seed = (uint64_t)ci * 100 + (uint64_t)dt;
    if (!b.g) exit(1);
    gc->build(&b);
    finish(&b);
    mpmd_graph *g = b.g;
    CHECK(mpmd_graph_status(g) == MPMD_OK, "%s/%s: building failed: %s", cname, mpmd_dtype_name(dt),
          mpmd_graph_error(g));
    if (mpmd_graph_status(g) != MPMD_OK) {
        mpmd_graph_free(g);
        return;
    }
    const int nn = g->n_nodes;
    unsigned char *live = mpmd_live_nodes(g);
    void **vals = calloc((size_t)nn, sizeof *vals);
    char err[512];
    void *dev = mpmd_backend_cpu.device.open(0, 1, err, sizeof err);
    if (!live || !vals || !dev) exit(1);
    size_t sb = 64;
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        const mpmd_kernel *k = (n->op->flags & MPMD_OPF_LEAF) ? NULL : mpmd_cpu_find(n->op);
        if (live[i] && k && mpmd_kernel_workspace(k, g, n) > sb) sb = mpmd_kernel_workspace(k, g, n);
    }
    void *scratch = xmalloc(sb);
    int ok = 1;
    for (int i = 0; i < nn && ok; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!live[i] || n->type.dtype == MPMD_TOKEN) continue;
        vals[i] = xmalloc(mpmd_type_bytes(&n->type));
        if (n->op->flags & MPMD_OPF_LEAF) {
            leaf_value(&b, ci, n, vals[i]);
            continue;
        }
        const mpmd_kernel *k = mpmd_cpu_find(n->op);
        if (!k) {
            CHECK(0, "%s: no cpu kernel for %s", cname, n->op->name);
            ok = 0;
            break;
        }
        int rc = mpmd_backend_run(&mpmd_backend_cpu, dev, g, i, k, vals[i], ptr_of, vals, 1, scratch, 0, err,
                                  sizeof err);
        CHECK(rc == 0, "%s/%s: %%%d = %s: %s", cname, mpmd_dtype_name(dt), i, n->op->name, err);
        if (rc) {
            ok = 0;
            break;
        }
        twin_check(g, i, k, vals, dev, scratch, cname, os);
    }

    /* the public executor: planned buffers, in-place reuse, two threads */
    if (ok) {
        mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
        o.threads = 2;
        o.seed = SEED;
        mpmd_error e;
        mpmd_exec *ex = mpmd_exec_new(g, &o, &e);
        CHECK(ex != NULL, "%s/%s: mpmd_exec_new: %s", cname, mpmd_dtype_name(dt), ex ? "" : e.msg);
        for (int k = 0; ex && k < b.n_in; k++) {
            const mpmd_node *n = &g->nodes[b.in[k].id];
            if (vals[n->id])
                CHECK(mpmd_exec_set_input(ex, mpmd_out(n), vals[n->id], mpmd_type_bytes(&n->type)) == MPMD_OK,
                      "%s: set_input %s: %s", cname, n->name, mpmd_exec_error(ex));
        }
        if (ex) CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s: run: %s", cname, mpmd_exec_error(ex));
        int kept = 0, same = 0;
        for (int i = 0; ex && i < nn; i++) {
            const mpmd_node *n = &g->nodes[i];
            if (!(n->flags & MPMD_NODE_KEEP) || !vals[i]) continue;
            size_t bytes = mpmd_type_bytes(&n->type);
            void *got = xmalloc(bytes);
            if (mpmd_exec_read(ex, mpmd_out(n), got, bytes) == MPMD_OK) {
                kept++;
                same += memcmp(got, vals[i], bytes) == 0;
            }
            free(got);
        }
        CHECK(ex == NULL || (kept > 0 && same == kept),
              "%s/%s: the executor's kept values differ from the node-by-node run (%d of %d equal)", cname,
              mpmd_dtype_name(dt), same, kept);
        mpmd_exec_free(ex);
    }

    for (int i = 0; i < nn; i++)
        free(vals[i]);
    free(vals);
    free(scratch);
    free(live);
    mpmd_backend_cpu.device.close(dev);
    mpmd_graph_free(g);
}

static void part_ops(void) {
    opstat *os = calloc(1, sizeof *os);
    if (!os) exit(1);
    for (int ci = 0; ci < N_GCASES; ci++) {
        run_gcase(ci, MPMD_BF16, os);
        run_gcase(ci, MPMD_F16, os);
    }
    /* coverage: every op of the CPU's tables checked in both dtypes */
    for (const mpmd_kernel *const *t = mpmd_cpu_kernel_tables; *t; t++)
        for (const mpmd_kernel *e = *t; e->op; e++) {
            if (not_checked_here(e->op)) continue;
            int ti = tol_index(e->op);
            CHECK(ti >= 0, "coverage: the cpu has a kernel for %s, which has no tolerance in op_tols",
                  e->op->name);
            if (ti < 0) continue;
            CHECK(os->nodes[ti][0] > 0, "coverage: %s never ran on bf16 operands", e->op->name);
            CHECK(os->nodes[ti][1] > 0, "coverage: %s never ran on f16 operands", e->op->name);
        }
    printf("16-bit kernels against f32 (nodes, elements, largest error of a normal result in units of u:\n"
           "2^-8 bf16, 2^-11 f16):\n");
    printf("  %-22s %5s %7s %9s %5s %7s %9s  %s\n", "op", "bf16", "elems", "max", "f16", "elems", "max",
           "bound");
    for (int i = 0; i < N_TOLS; i++)
        printf("  %-22s %5d %7lld %8.3fu %5d %7lld %8.3fu  %du\n", op_tols[i].op->name, os->nodes[i][0],
               (long long)os->elems[i][0], os->max_u[i][0], os->nodes[i][1], (long long)os->elems[i][1],
               os->max_u[i][1], op_tols[i].ulps);
    free(os);
}

/* ======================================================================== */
/* 2. rounding, exactly                                                      */
/* ======================================================================== */

static float f32_of(uint32_t u) { return mpmd_bits_f32(u); }

typedef struct conv_case {
    uint32_t in;   /* the input's bits (f32: 32, bf16 and f16: 16) */
    uint32_t want; /* the result's bits; NAN_BITS: any NaN */
    const char *what;
} conv_case;

#define NAN_BITS 0xffffffffu

/* Run cast(x, to) for x of dtype `from` holding cs[].in; check every result. */
static void check_casts(mpmd_dtype from, mpmd_dtype to, const conv_case *cs, int n) {
    mpmd_graph *g = mpmd_graph_new();
    int64_t dim = n;
    mpmd_value x = mpmd_input(g, "x", from, 1, &dim);
    mpmd_value y = mpmd_cast(g, x, to);
    mpmd_keep(g, y);
    mpmd_exec *ex = tu_exec(g, 1);
    size_t es = mpmd_dtype_size(from), os = mpmd_dtype_size(to);
    unsigned char *in = calloc((size_t)n, es), *out = calloc((size_t)n, os);
    if (!in || !out) exit(1);
    for (int i = 0; i < n; i++) {
        if (es == 4)
            memcpy(in + 4 * i, &cs[i].in, 4);
        else {
            uint16_t h = (uint16_t)cs[i].in;
            memcpy(in + 2 * i, &h, 2);
        }
    }
    CHECK(mpmd_exec_set_input(ex, x, in, (size_t)n * es) == MPMD_OK, "set_input: %s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "run: %s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_read(ex, y, out, (size_t)n * os) == MPMD_OK, "read: %s", mpmd_exec_error(ex));
    for (int i = 0; i < n; i++) {
        uint32_t got;
        double gv;
        if (os == 4) {
            memcpy(&got, out + 4 * i, 4);
            gv = f32_of(got);
        } else {
            uint16_t h;
            memcpy(&h, out + 2 * i, 2);
            got = h;
            gv = widen1(to, h);
        }
        if (cs[i].want == NAN_BITS)
            CHECK(isnan(gv), "cast %s -> %s of 0x%0*x (%s): 0x%0*x, expected a NaN", mpmd_dtype_name(from),
                  mpmd_dtype_name(to), (int)(2 * es), (unsigned)cs[i].in, cs[i].what, (int)(2 * os),
                  (unsigned)got);
        else
            CHECK(got == cs[i].want, "cast %s -> %s of 0x%0*x (%s): 0x%0*x (%.9g), expected 0x%0*x",
                  mpmd_dtype_name(from), mpmd_dtype_name(to), (int)(2 * es), (unsigned)cs[i].in, cs[i].what,
                  (int)(2 * os), (unsigned)got, gv, (int)(2 * os), (unsigned)cs[i].want);
    }
    free(in);
    free(out);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

#define NC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void part_rounding(void) {
    /* f32 -> bf16: keep the top 16 bits, rounding the low 16 to nearest,
     * ties (low half exactly 0x8000) to the even top half. */
    static const conv_case f32_bf16[] = {
        {0x3f800000, 0x3f80, "1"},
        {0x3f808000, 0x3f80, "1 + 2^-8, a tie: to 1 (even)"},
        {0x3f808001, 0x3f81, "1 + 2^-8 + 2^-23, above the tie: up"},
        {0x3f807fff, 0x3f80, "1 + 2^-8 - 2^-23, below the tie: down"},
        {0x3f818000, 0x3f82, "1 + 3 2^-8, a tie: to 1 + 2^-6 (even)"},
        {0xbf818000, 0xbf82, "-(1 + 3 2^-8): to -(1 + 2^-6)"},
        {0x3f810000, 0x3f81, "1 + 2^-7, exact"},
        {0x3fffffff, 0x4000, "2 - 2^-23: the carry reaches the exponent, 2"},
        {0x7f7f7fff, 0x7f7f, "just below the last tie: the largest bf16, 3.39e38"},
        {0x7f7f8000, 0x7f80, "the tie above the largest bf16: to inf (even)"},
        {0x7f7fffff, 0x7f80, "the largest f32: inf"},
        {0xff7fffff, 0xff80, "-(the largest f32): -inf"},
        {0x7f800000, 0x7f80, "inf"},
        {0xff800000, 0xff80, "-inf"},
        {0x7fc00000, NAN_BITS, "NaN"},
        {0xffc00000, NAN_BITS, "-NaN"},
        {0x7f800001, NAN_BITS, "a signalling NaN, payload in the low bits only (truncation gives inf)"},
        {0x7fffffff, NAN_BITS, "NaN with every payload bit (rounding up would carry into -0)"},
        {0x80000000, 0x8000, "-0"},
        {0x00000000, 0x0000, "0"},
        {0x00010000, 0x0001, "a subnormal, exact"},
        {0x00008000, 0x0000, "subnormal tie between 0 and the smallest: to 0"},
        {0x00018000, 0x0002, "subnormal tie between 1 and 2 units: to 2"},
        {0x00000001, 0x0000, "the smallest f32: 0"},
        {0x007fffff, 0x0080, "the largest subnormal: up to the smallest normal"},
    };
    /* f32 -> f16: 11 significant bits, exponents -14..15, subnormals down to
     * 2^-24; ties to even; past 65520 (the tie above 65504) inf. */
    static const conv_case f32_f16[] = {
        {0x3f800000, 0x3c00, "1"},
        {0x3f801000, 0x3c00, "1 + 2^-11, a tie: to 1"},
        {0x3f803000, 0x3c02, "1 + 3 2^-11, a tie: to 1 + 2^-9"},
        {0x3f801001, 0x3c01, "1 + 2^-11 + 2^-23: up"},
        {0x3dcccccd, 0x2e66, "0.1"},
        {0x477fe000, 0x7bff, "65504, the largest f16"},
        {0x477fef00, 0x7bff, "65519: below the tie, 65504"},
        {0x477ff000, 0x7c00, "65520, the tie above 65504: to inf (even)"},
        {0x47800000, 0x7c00, "65536: inf"},
        {0x47c35000, 0x7c00, "1e5: inf"},
        {0xc7c35000, 0xfc00, "-1e5: -inf"},
        {0x7f7fffff, 0x7c00, "the largest f32: inf"},
        {0x38800000, 0x0400, "2^-14, the smallest normal"},
        {0x387fe000, 0x0400, "2^-14 - 2^-25, a tie between the largest subnormal and 2^-14: up (even)"},
        {0x33800000, 0x0001, "2^-24, the smallest subnormal"},
        {0xb3800000, 0x8001, "-2^-24"},
        {0x33000000, 0x0000, "2^-25, a tie between 0 and 2^-24: to 0"},
        {0x33000001, 0x0001, "just above 2^-25: up to 2^-24"},
        {0x32800000, 0x0000, "2^-26: 0"},
        {0x33c00000, 0x0002, "3 2^-25, a tie between 1 and 2 units: to 2"},
        {0x34200000, 0x0002, "5 2^-25, a tie between 2 and 3 units: to 2"},
        {0x0001b4f7, 0x0000, "1e-40, an f32 subnormal: 0"},
        {0x7f800000, 0x7c00, "inf"},
        {0xff800000, 0xfc00, "-inf"},
        {0x7fc00000, NAN_BITS, "NaN"},
        {0x7f800001, NAN_BITS, "a signalling NaN"},
        {0x80000000, 0x8000, "-0"},
    };
    static const conv_case bf16_f32[] = {
        {0x3f81, 0x3f810000, "1 + 2^-7"}, {0x0001, 0x00010000, "the smallest bf16 subnormal"},
        {0x7f80, 0x7f800000, "inf"},      {0xff81, NAN_BITS, "NaN"},
        {0x8000, 0x80000000, "-0"},
    };
    static const conv_case f16_f32[] = {
        {0x0001, 0x33800000, "2^-24, the smallest subnormal"},
        {0x03ff, 0x387fc000, "the largest subnormal, 1023 2^-24"},
        {0x8001, 0xb3800000, "-2^-24"},
        {0x0400, 0x38800000, "2^-14"},
        {0x7bff, 0x477fe000, "65504"},
        {0x3555, 0x3eaaa000, "0.33325"},
        {0x7c00, 0x7f800000, "inf"},
        {0x7e00, NAN_BITS, "NaN"},
    };
    static const conv_case bf16_f16[] = {
        {0x3f81, 0x3c08, "1 + 2^-7: exact"},
        {0x477f, 0x7bf8, "65280: exact"},
        {0x4780, 0x7c00, "65536: inf"},
        {0x5015, 0x7c00, "1e10: inf"},
        {0x3380, 0x0001, "2^-24: the smallest subnormal"},
        {0x3300, 0x0000, "2^-25, a tie: to 0"},
        {0x3340, 0x0001, "1.5 2^-25: up to 2^-24"},
        {0x3080, 0x0000, "2^-30: 0"},
        {0x7fc0, NAN_BITS, "NaN"},
        {0xff80, 0xfc00, "-inf"},
    };
    static const conv_case f16_bf16[] = {
        {0x3c04, 0x3f80, "1 + 2^-8, a tie: to 1"},
        {0x3c0c, 0x3f82, "1 + 3 2^-8, a tie: to 1 + 2^-6"},
        {0x3c01, 0x3f80, "1 + 2^-10: down"},
        {0x3c06, 0x3f81, "1 + 3 2^-9: up"},
        {0x7bff, 0x4780, "65504: up to 65536"},
        {0x0001, 0x3380, "2^-24: exact"},
        {0x7c00, 0x7f80, "inf"},
        {0xfc00, 0xff80, "-inf"},
        {0x7e00, NAN_BITS, "NaN"},
        {0x8000, 0x8000, "-0"},
    };
    check_casts(MPMD_F32, MPMD_BF16, f32_bf16, NC(f32_bf16));
    check_casts(MPMD_F32, MPMD_F16, f32_f16, NC(f32_f16));
    check_casts(MPMD_BF16, MPMD_F32, bf16_f32, NC(bf16_f32));
    check_casts(MPMD_F16, MPMD_F32, f16_f32, NC(f16_f32));
    check_casts(MPMD_BF16, MPMD_F16, bf16_f16, NC(bf16_f16));
    check_casts(MPMD_F16, MPMD_BF16, f16_bf16, NC(f16_bf16));

    /* An op rounds its exact f32 result once, to nearest even: bf16 adds
     * whose sums are ties, or just off them. */
    {
        static const uint16_t a[] = {0x3f80, 0x3f81, 0x3f80, 0x4380, 0x4381};
        static const uint16_t b[] = {0x3b80, 0x3b80, 0x3b81, 0x3f80, 0x3f80};
        /* 1 + 2^-8 -> 1; 1 + 2^-7 + 2^-8 -> 1 + 2^-6; 1 + 2^-8 + 2^-15 -> 1 + 2^-7;
         * 256 + 1 -> 256 (even); 258 + 1 -> 260 (even) */
        static const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x4380, 0x4382};
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "a", MPMD_BF16, D(5)), y = mpmd_input(g, "b", MPMD_BF16, D(5));
        mpmd_value s = mpmd_add(g, x, y);
        mpmd_keep(g, s);
        mpmd_exec *ex = tu_exec(g, 1);
        uint16_t got[5] = {0};
        mpmd_exec_set_input(ex, x, a, sizeof a);
        mpmd_exec_set_input(ex, y, b, sizeof b);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "bf16 add: %s", mpmd_exec_error(ex));
        mpmd_exec_read(ex, s, got, sizeof got);
        for (int i = 0; i < 5; i++)
            CHECK(got[i] == want[i], "bf16 add %d: 0x%04x + 0x%04x = 0x%04x, expected 0x%04x", i, a[i], b[i],
                  got[i], want[i]);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
    {
        /* f16: 1 + 2^-11 -> 1; 2048 + 1 -> 2048 (even); 2050 + 1 -> 2052;
         * 65504 + 16 = 65520 -> inf; 2^-14 - 2^-24 (subnormal sum) exact */
        static const uint16_t a[] = {0x3c00, 0x6800, 0x6801, 0x7bff, 0x0400};
        static const uint16_t b[] = {0x1000, 0x3c00, 0x3c00, 0x4c00, 0x8001};
        static const uint16_t want[] = {0x3c00, 0x6800, 0x6802, 0x7c00, 0x03ff};
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "a", MPMD_F16, D(5)), y = mpmd_input(g, "b", MPMD_F16, D(5));
        mpmd_value s = mpmd_add(g, x, y);
        mpmd_keep(g, s);
        mpmd_exec *ex = tu_exec(g, 1);
        uint16_t got[5] = {0};
        mpmd_exec_set_input(ex, x, a, sizeof a);
        mpmd_exec_set_input(ex, y, b, sizeof b);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "f16 add: %s", mpmd_exec_error(ex));
        mpmd_exec_read(ex, s, got, sizeof got);
        for (int i = 0; i < 5; i++)
            CHECK(got[i] == want[i], "f16 add %d: 0x%04x + 0x%04x = 0x%04x, expected 0x%04x", i, a[i], b[i],
                  got[i], want[i]);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
}

/* ======================================================================== */
/* 3. storage                                                                */
/* ======================================================================== */

static void part_storage(void) {
    CHECK(mpmd_dtype_size(MPMD_F32) == 4 && mpmd_dtype_size(MPMD_BF16) == 2 && mpmd_dtype_size(MPMD_F16) == 2,
          "element sizes f32 %zu, bf16 %zu, f16 %zu", mpmd_dtype_size(MPMD_F32), mpmd_dtype_size(MPMD_BF16),
          mpmd_dtype_size(MPMD_F16));
    CHECK(mpmd_dtype_is_float(MPMD_BF16) && mpmd_dtype_is_float(MPMD_F16) && !mpmd_dtype_is_float(MPMD_I32),
          "float dtypes");
    mpmd_type t = {MPMD_F32, 3, {3, 5, 7}};
    size_t f32 = mpmd_type_bytes(&t);
    t.dtype = MPMD_BF16;
    size_t bf = mpmd_type_bytes(&t);
    t.dtype = MPMD_F16;
    size_t h = mpmd_type_bytes(&t);
    CHECK(f32 == 420 && bf == 210 && h == 210, "bytes of [3,5,7]: f32 %zu, bf16 %zu, f16 %zu", f32, bf, h);
    char buf[64];
    t.dtype = MPMD_BF16;
    CHECK(strcmp(mpmd_type_str(&t, buf, sizeof buf), "bf16[3,5,7]") == 0, "type string %s", buf);

    /* an executor holds a bf16 value in 2 bytes an element: the input takes
     * exactly that many, and a chain of ops plans half the f32 arena */
    size_t arena[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        mpmd_dtype dt = v ? MPMD_BF16 : MPMD_F32;
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "x", dt, D(64, 64));
        mpmd_value y = mpmd_tanh(g, mpmd_mul(g, mpmd_exp(g, x), mpmd_add_scalar(g, x, 1.0f)));
        mpmd_keep(g, mpmd_sum(g, mpmd_mul(g, y, mpmd_gelu(g, y)), MPMD_AXES(1), 0));
        mpmd_exec *ex = tu_exec(g, 1);
        size_t elems = 64 * 64;
        void *data = calloc(elems, 4);
        if (!data) exit(1);
        if (v) {
            CHECK(mpmd_exec_set_input(ex, x, data, elems * 4) != MPMD_OK,
                  "a bf16[64,64] input took f32's %zu bytes", elems * 4);
            CHECK(mpmd_exec_set_input(ex, x, data, elems * 2) == MPMD_OK, "a bf16[64,64] input: %s",
                  mpmd_exec_error(ex));
        }
        arena[v] = mpmd_exec_arena_bytes(ex);
        free(data);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
    CHECK(arena[0] > 0 && arena[1] * 2 == arena[0], "activation arena: f32 %zu bytes, bf16 %zu (not half)",
          arena[0], arena[1]);
}

/* ======================================================================== */
/* 4. a GPT-shaped model, bf16 against f32                                   */
/* ======================================================================== */

enum { G_V = 256, G_T = 16, G_C = 32, G_H = 4, G_L = 2, G_B = 4, G_STEPS = 4 };

typedef struct gmodel {
    mpmd_graph *g;
    mpmd_value tok, tgt, loss;
    int np;
    mpmd_value params[64], grads[64];
} gmodel;

/* embed -> + positions -> 2 GPT-2 blocks -> LN -> LM head -> cross-entropy,
 * computing in dt (the layers cast their f32 parameters to it); gradients of
 * every parameter kept; AdamW after. */
static void gpt_like(gmodel *m, mpmd_dtype dt) {
    memset(m, 0, sizeof *m);
    mpmd_graph *g = m->g = mpmd_graph_new();
    if (!g) exit(1);
    mpmd_set_compute_dtype(g, dt);
    m->tok = mpmd_input(g, "tokens", MPMD_I32, D(G_B, G_T));
    m->tgt = mpmd_input(g, "targets", MPMD_I32, D(G_B, G_T));
    mpmd_value wpe = mpmd_param(g, "wpe", D(G_T, G_C), MPMD_NORMAL(0.01f));
    mpmd_value x = mpmd_embed(g, "wte", m->tok, G_V, G_C);
    x = mpmd_add(g, x, mpmd_cast(g, wpe, dt));
    for (int i = 0; i < G_L; i++) {
        char name[16];
        snprintf(name, sizeof name, "block_%d", i);
        x = mpmd_gpt_block(g, name, x, G_H);
    }
    x = mpmd_layer_norm_layer(g, "ln_f", x, 1e-5f);
    mpmd_value logits = mpmd_dense(g, "lm_head", x, G_V, 0);
    m->loss = mpmd_mean(g, mpmd_cross_entropy(g, logits, m->tgt), 0, NULL, 0);
    m->np = mpmd_graph_params(g, m->params, 64);
    if (m->np > 64) mpmd_fail(g, MPMD_ERR_INVALID, "test: %d parameters (at most 64)", m->np);
    if (mpmd_graph_status(g) == MPMD_OK) mpmd_grad(g, m->loss, m->np, m->params, m->grads);
    for (int i = 0; i < m->np; i++)
        mpmd_keep(g, m->grads[i]);
    mpmd_keep(g, m->loss);
    mpmd_adamw(g, m->np, m->params, m->grads, mpmd_scalar(g, 3e-3f), MPMD_ADAM_DEFAULTS);
}

static void part_gpt(void) {
    gmodel m[2];
    gpt_like(&m[0], MPMD_F32);
    gpt_like(&m[1], MPMD_BF16);
    mpmd_type lt = mpmd_value_type(m[1].g, m[1].loss);
    CHECK(lt.dtype == MPMD_F32 && lt.ndim == 0, "the bf16 model's loss is %s, expected f32[]",
          mpmd_dtype_name(lt.dtype));
    CHECK(m[0].np == m[1].np && m[0].np > 0, "parameters: f32 %d, bf16 %d", m[0].np, m[1].np);
    mpmd_exec *ex[2];
    for (int v = 0; v < 2; v++) {
        CHECK(mpmd_graph_status(m[v].g) == MPMD_OK, "gpt (%s): %s", v ? "bf16" : "f32",
              mpmd_graph_error(m[v].g));
        if (mpmd_graph_status(m[v].g) != MPMD_OK) exit(tu_report("test_bf16"));
        mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
        o.threads = 2;
        o.seed = 2024;
        mpmd_error err;
        ex[v] = mpmd_exec_new(m[v].g, &o, &err);
        if (!ex[v]) {
            fprintf(stderr, "gpt: mpmd_exec_new: %s\n", err.msg);
            exit(1);
        }
    }
    /* the same f32 parameters: same names, shapes, seed */
    char h0[65], h1[65];
    mpmd_exec_params_sha256(ex[0], h0);
    mpmd_exec_params_sha256(ex[1], h1);
    CHECK(strcmp(h0, h1) == 0, "the f32 and bf16 models start from different parameters (%s vs %s)", h0, h1);

    gpt_corpus corpus;
    mpmd_error err;
    if (gpt_corpus_generate(&corpus, 1 << 14, 5, &err) != MPMD_OK) {
        fprintf(stderr, "gpt corpus: %s\n", err.msg);
        exit(1);
    }
    int32_t tok[G_B * G_T], tgt[G_B * G_T];
    double worst_loss = 0, worst_grad = 0, d2 = 0, n2 = 0;
    float first[2] = {0, 0}, last[2] = {0, 0};
    for (int step = 0; step < G_STEPS; step++) {
        gpt_sample_batch(&corpus, G_B, G_T, 9, (uint64_t)step, tok, tgt);
        float loss[2];
        for (int v = 0; v < 2; v++) {
            mpmd_exec_set_input(ex[v], m[v].tok, tok, sizeof tok);
            mpmd_exec_set_input(ex[v], m[v].tgt, tgt, sizeof tgt);
            CHECK(mpmd_exec_run(ex[v]) == MPMD_OK, "gpt step %d: %s", step, mpmd_exec_error(ex[v]));
            mpmd_exec_read(ex[v], m[v].loss, &loss[v], sizeof(float));
            if (step == 0) first[v] = loss[v];
            last[v] = loss[v];
        }
        double rel = fabs(loss[1] - loss[0]) / fabs(loss[0]);
        if (rel > worst_loss) worst_loss = rel;
        CHECK(isfinite(loss[1]) && rel <= 0.02, "gpt step %d: bf16 loss %.6f, f32 %.6f: %.2f%% apart (> 2%%)",
              step, loss[1], loss[0], 100 * rel);
        /* the first step's gradients (f32, through the casts), taken at the
         * same parameters (later steps start from parameters that AdamW,
         * which normalises the update, has moved apart): relative L2 error,
         * per parameter and overall */
        for (int i = 0; step == 0 && i < m[0].np; i++) {
            mpmd_type t = mpmd_value_type(m[0].g, m[0].grads[i]);
            int64_t cnt = mpmd_type_numel(&t);
            float *a = malloc((size_t)cnt * sizeof *a), *b = malloc((size_t)cnt * sizeof *b);
            if (!a || !b) exit(1);
            mpmd_exec_read(ex[0], m[0].grads[i], a, (size_t)cnt * sizeof *a);
            mpmd_exec_read(ex[1], m[1].grads[i], b, (size_t)cnt * sizeof *b);
            double pd = 0, pn = 0;
            for (int64_t e = 0; e < cnt; e++)
                pd += (double)(b[e] - a[e]) * (b[e] - a[e]), pn += (double)a[e] * a[e];
            double prel = sqrt(pd / (pn > 0 ? pn : 1));
            if (prel > worst_grad) worst_grad = prel;
            CHECK(pn > 0 && prel <= 0.05,
                  "gpt: the gradient of %s in bf16 is %.2f%% from f32's (relative L2, > 5%%)",
                  mpmd_value_name(m[0].g, m[0].params[i]), 100 * prel);
            d2 += pd, n2 += pn;
            free(a);
            free(b);
        }
    }
    double grel = sqrt(d2 / (n2 > 0 ? n2 : 1));
    CHECK(grel <= 0.03, "gpt: the bf16 gradients are %.2f%% from f32's (relative L2 over all, > 3%%)",
          100 * grel);
    CHECK(last[0] < first[0] && last[1] < first[1],
          "gpt: the loss did not fall (f32 %.4f -> %.4f, bf16 %.4f -> %.4f)", first[0], last[0], first[1],
          last[1]);
    printf(
        "gpt-like (%d blocks, width %d, vocab %d), %d AdamW steps: loss f32 %.4f -> %.4f, bf16 %.4f -> %.4f; "
        "worst loss difference %.3f%% (bound 2%%); first-step gradients %.2f%% apart (relative L2, bound "
        "3%%), "
        "worst parameter %.2f%% (bound 5%%)\n",
        G_L, G_C, G_V, G_STEPS, first[0], last[0], first[1], last[1], 100 * worst_loss,
        100 * sqrt(d2 / (n2 > 0 ? n2 : 1)), 100 * worst_grad);
    gpt_corpus_free(&corpus);
    for (int v = 0; v < 2; v++) {
        mpmd_exec_free(ex[v]);
        mpmd_graph_free(m[v].g);
    }
}

int main(void) {
    part_ops();
    part_rounding();
    part_storage();
    part_gpt();
    return tu_report("test_bf16");
}
