/* test_backend_ops - every op's kernel on every backend against the CPU's
 * (in the spirit of ggml's test-backend-ops).
 *
 * Usage: test_backend_ops          every backend this build has and that can
 *                                  run here (the CPU against itself always;
 *                                  others print "skipped: <why>" if unavailable)
 *        test_backend_ops <name>   that backend only; exit 77 (CTest's skip
 *                                  code) if it cannot run here, 1 if this build
 *                                  does not have it
 *
 * Cases are small graphs built with the public constructors, without a
 * microbatch loop (every node before the loop), with random inputs in a range
 * that suits their ops and parameters from mpmd_leaf_initial_value under a
 * fixed seed. Most end in a scalar loss (a sum of each output times a fixed
 * random tensor, so that cotangents are O(1) and distinct) and call
 * mpmd_grad, so the backward ops run too; two end in SGD and AdamW updates.
 *
 * A mini executor drives a backend through its interface only (open, alloc,
 * upload, mpmd_backend_run, sync, download, copy; no memory planning: one
 * buffer per live value). For each (backend B, case):
 *   ref  the CPU runs the graph, values chained from node to node;
 *   iso  B runs every node on the CPU's values of its inputs (uploaded into
 *        the input buffers just before), so each node's error is its kernel's
 *        alone and is held to that op's tolerance (table below). Ops with an
 *        in-place input (op->inplace) run a second time with the output
 *        buffer being (a copy of) that input's buffer, which must give the
 *        same bits as the out-of-place run and match the CPU;
 *   iso2 the same again on 2 threads: every value must be bitwise equal to
 *        iso's (determinism, also across the thread count);
 *   e2e  B runs the graph chained, as an executor would; errors compound, so
 *        values are held to max(op tolerance, the case's end-to-end one).
 * Nodes B has no kernel for are fed the CPU's result in iso (and the e2e run
 * is skipped). The CPU against itself must match bit for bit everywhere.
 * Leaves are compared after the run too: parameters and optimizer state
 * after the updates, variables after assign.
 *
 * Precision: every case runs in f32, and again with 16-bit operands: the
 * same graph built with its float inputs in bf16 (every case) or f16 (a
 * few), parameters cast to that dtype where an op takes them directly
 * (layer norm, embedding; the layers cast their own), so that every float op
 * runs on 16-bit operands, and the loss summed in f32 from a cast of each
 * output (mpmd_grad's cotangents then enter the 16-bit ops through casts
 * back). 16-bit inputs are random f32 values rounded to the dtype. A
 * 16-bit result is held to its own tolerance (the table's bf16 and f16
 * columns), a 16-bit case's chained run to its own end-to-end one. A case of
 * casts covers every direction between f32, bf16 and f16 and the values a
 * conversion must get right (ties, overflow, subnormals, inf, NaN).
 *
 * Coverage: every op of the table below that a backend has a kernel for must
 * have run at least once on it, and at least once with a bf16 operand or
 * result (but the optimizers, which only ever see f32 master parameters),
 * and cast in each of the six directions between f32, bf16 and f16; every op
 * in the CPU's kernel tables must be in the table (so a new op cannot go
 * untested silently).
 */
#include "testutil.h"

#include "backend/backend.h"
#include "backend/op_descs.h"
#include "backend/cpu/cpu.h"
#include "util/exact.h"
#include "graph/graph.h"
#include "ops/nn.h"
#include "ops/optim.h"
#include "util/half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tolerances ------------------------------------------------------------
 * A float element passes when |a - b| <= atol + rtol |b| (b: the CPU's value);
 * i32 elements must be equal. The inputs are O(1) (uniform in [-4, 4] at
 * most), so atol is an absolute error on O(1) data. These hold a kernel run
 * on the CPU's inputs (iso); the chained run adds the case's own tolerance.
 *
 * Each family has three columns, by the dtype of the result: f32, bf16, f16.
 * 16-bit results: every kernel computes in f32 and rounds once on store, to
 * nearest even (backend.h), so a 16-bit result is its f32 result rounded.
 * Two backends whose f32 results differ in the last bits (the f32 column)
 * round them to the same 16-bit value, or, when a rounding boundary lies
 * between them, to neighbours: one ulp of the result apart, and one ulp is
 * at most 2^-7 |b| in bf16 (8 significant bits) and 2^-10 |b| in f16 (11).
 * So a formula per element (T_ELEM) gets one ulp. Where the f32 results
 * differ by reordering (sums, matmul, softmax, xent, norm), a result that
 * cancels to near zero has an f32 difference that is a good part of its
 * (small) ulp: two ulps. atol stays the f32 one, the bound on that absolute
 * difference near zero (f16's subnormal spacing, 6e-8, is far below it). */
#define ULP_BF16 (1.0 / 128.0) /* 2^-7 = 7.8e-3 */
#define ULP_F16 (1.0 / 1024.0) /* 2^-10 = 9.8e-4 */
enum { T_EXACT, T_ELEM, T_SUM, T_MATMUL, T_SOFTMAX, T_XENT, T_NORM, T_OPTIM, T_NFAM };
/* The columns of a tolerance: the dtype of the result. */
enum { P_F32, P_BF16, P_F16, P_N };
static const char *const p_name[P_N] = {"f32", "bf16", "f16"};
typedef struct tol {
    double rtol, atol;
} tol;
static const struct {
    const char *name;
    tol t[P_N]; /* f32, bf16, f16 results */
} fam[T_NFAM] = {
    /* Data movement and selection (copies, permutes, slices, concat,
     * broadcasts, gathers, neg, relu, max) and conversions (cast, correctly
     * rounded: one right answer): any backend must give the CPU's values
     * exactly, in every dtype. */
    [T_EXACT] = {"exact", {{0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}}},
    /* One elementwise formula per element in f32: the sides differ only in
     * the last bits of exp/log/tanh/sqrt (CUDA's are within 2 ulp) and in
     * fused multiply-adds; the default tolerance. 16-bit: one ulp. */
    [T_ELEM] = {"elementwise", {{1e-4, 1e-5}, {ULP_BF16, 1e-5}, {ULP_F16, 1e-5}}},
    /* Sums over an axis (sum, mean, sum_to, embedding_grad,
     * layer_norm_grad_gamma, the sums of cotangents): backends add in
     * different orders (the CPU in 8 interleaved partial sums, a GPU in
     * trees). The error grows like eps * sum |x| (up to ~1000 terms here),
     * not like |sum|, so a sum that cancels needs the larger atol. 16-bit:
     * two ulps (reordered). */
    [T_SUM] = {"sum", {{1e-4, 1e-4}, {2 * ULP_BF16, 1e-4}, {2 * ULP_F16, 1e-4}}},
    /* sgemm with K up to 144 (and R = batch x rows for folded weight
     * gradients): blocking and summation order differ between BLAS
     * libraries; dot products of O(1) terms cancel like sums do. 16-bit:
     * two ulps (cuBLAS multiplies bf16/f16 on tensor cores, exactly, and
     * accumulates in f32 in its own order). */
    [T_MATMUL] = {"matmul", {{1e-4, 1e-4}, {2 * ULP_BF16, 1e-4}, {2 * ULP_F16, 1e-4}}},
    /* softmax (plain, causal) and its gradient: a row max, exps and a sum
     * of positive terms (no cancellation) then a division; the gradient
     * y (gy - sum(gy y)) cancels in the sum. Fused attention and its
     * gradient too: products of such rows with O(1) operands (K up to 130
     * here). 16-bit: two ulps. */
    [T_SOFTMAX] = {"softmax", {{1e-4, 2e-5}, {2 * ULP_BF16, 2e-5}, {2 * ULP_F16, 2e-5}}},
    /* log_softmax and cross-entropy: exp/log chains over rows of up to 1000
     * classes; the result is x - logsumexp(x) with |logsumexp| ~ 10, so its
     * absolute error scales with that (eps * 10 * a few ulps of log/exp),
     * and the gradients are softmax(x) - onehot: small probabilities keep
     * the relative error of exp. 16-bit: two ulps (the loss itself is f32). */
    [T_XENT] = {"xent", {{2e-4, 5e-5}, {2 * ULP_BF16, 5e-5}, {2 * ULP_F16, 5e-5}}},
    /* Layer norm: a mean and a variance per row in different orders, rstd
     * by rsqrt; the gradient dx = rstd (g - mean(g) - xhat mean(g xhat))
     * cancels twice. 16-bit: two ulps (the statistics stay f32). */
    [T_NORM] = {"norm", {{1e-4, 5e-5}, {2 * ULP_BF16, 5e-5}, {2 * ULP_F16, 5e-5}}},
    /* Optimizer updates, and the parameters and state they write: a few
     * correctly rounded operations per element (Adam's sqrt and divisions);
     * the update lr u is ~1e-2 of p, so atol still sees a 0.1% error in it.
     * Parameters and optimizer state are always f32 (the master weights);
     * the 16-bit columns are for completeness. */
    [T_OPTIM] = {"optim", {{1e-4, 1e-5}, {2 * ULP_BF16, 1e-5}, {2 * ULP_F16, 1e-5}}},
};

/* The tolerance column of a dtype (i32 and tokens: f32's, unused). */
static int prec_of(mpmd_dtype dt) { return dt == MPMD_BF16 ? P_BF16 : dt == MPMD_F16 ? P_F16 : P_F32; }

typedef struct op_entry {
    const mpmd_op_desc *op;
    int fam;
} op_entry;

/* Every op descriptor of src/graph/graph.h and src/ops/<family>.c. */
static const op_entry op_table[] = {
    /* leaves and structural ops: no kernels; parameters and variables are
     * compared after the run with the optimizer's tolerance, since only the
     * optimizer ops and assign write them */
    {&mpmd_op_input, T_EXACT},
    {&mpmd_op_param, T_OPTIM},
    {&mpmd_op_variable, T_OPTIM},
    {&mpmd_op_constant, T_EXACT},
    {&mpmd_op_microbatch, T_EXACT},
    {&mpmd_op_loop_reduce, T_SUM},
    {&mpmd_op_stage_marker, T_EXACT},
    {&mpmd_op_assign, T_EXACT},
    /* elementwise */
    {&mpmd_op_add_scalar, T_ELEM},
    {&mpmd_op_mul_scalar, T_ELEM},
    {&mpmd_op_broadcast_to, T_EXACT},
    {&mpmd_op_sum_to, T_SUM},
    {&mpmd_op_cast, T_EXACT}, /* correctly rounded: one right answer */
    {&mpmd_op_compare, T_EXACT},
    {&mpmd_op_max_weight, T_EXACT},
    {&mpmd_op_where, T_EXACT},
    {&mpmd_op_where_grad, T_EXACT},
    {&mpmd_op_dropout, T_ELEM},
/* the lists of src/ops/elementwise_ops.h, each op (and a unary op's fused
 * backward op) at the list's tolerance */
#define UNARY_ROW(name, reads, tol, ...) {&mpmd_op_##name, T_##tol},
#define UNARY_GRAD_ROW(name, reads, tol, ...) {&mpmd_op_##name, T_##tol}, {&mpmd_op_##name##_grad, T_##tol},
#define BINARY_ROW(name, tol) {&mpmd_op_##name, T_##tol},
    MPMD_BINARY_OPS(BINARY_ROW) MPMD_UNARY_OPS(UNARY_ROW) MPMD_UNARY_GRAD_OPS(UNARY_GRAD_ROW)
    /* reductions and shapes */
    {&mpmd_op_sum, T_SUM},
    {&mpmd_op_mean, T_SUM},
    {&mpmd_op_max, T_EXACT},
    {&mpmd_op_max_grad, T_ELEM}, /* gy / (number of ties) */
    {&mpmd_op_reshape, T_EXACT},
    {&mpmd_op_permute, T_EXACT},
    {&mpmd_op_slice, T_EXACT},
    {&mpmd_op_slice_grad, T_EXACT},
    {&mpmd_op_concat, T_EXACT},
    /* neural-network ops */
    {&mpmd_op_matmul, T_MATMUL},
    {&mpmd_op_softmax, T_SOFTMAX},
    {&mpmd_op_softmax_causal, T_SOFTMAX},
    {&mpmd_op_softmax_grad, T_SOFTMAX},
    {&mpmd_op_softmax_causal_grad, T_SOFTMAX},
    {&mpmd_op_log_softmax, T_XENT},
    {&mpmd_op_log_softmax_grad, T_XENT},
    {&mpmd_op_layer_norm, T_NORM},
    {&mpmd_op_layer_norm_grad_x, T_NORM},
    {&mpmd_op_layer_norm_grad_gamma, T_SUM},
    {&mpmd_op_rms_norm, T_NORM},
    {&mpmd_op_rms_norm_grad_x, T_NORM},
    {&mpmd_op_rms_norm_grad_scale, T_SUM},
    {&mpmd_op_rope, T_ELEM},
    {&mpmd_op_rope_at, T_ELEM},
    {&mpmd_op_embedding, T_EXACT},
    {&mpmd_op_embedding_grad, T_SUM},
    {&mpmd_op_cross_entropy, T_XENT},
    {&mpmd_op_cross_entropy_grad, T_XENT},
    {&mpmd_op_attention, T_SOFTMAX},
    {&mpmd_op_attention_grad, T_SOFTMAX},
    /* optimizers */
    {&mpmd_op_optim_step, T_EXACT},
    {&mpmd_op_sgd, T_OPTIM},
    {&mpmd_op_adamw, T_OPTIM},
};
#define N_OPS ((int)(sizeof op_table / sizeof op_table[0]))

static int op_index(const mpmd_op_desc *op) {
    for (int i = 0; i < N_OPS; i++)
        if (op_table[i].op == op) return i;
    return -1;
}

/* What ran on a backend, for the coverage check: kernel runs per op, those
 * with a bf16 operand or result, and casts by [from][to] column. */
typedef struct cover {
    int count[N_OPS];
    int count_bf16[N_OPS];
    int cast[P_N][P_N];
} cover;

static void cover_add(cover *cv, const mpmd_graph *g, const mpmd_node *n) {
    int i = op_index(n->op), bf = n->type.dtype == MPMD_BF16;
    for (int j = 0; j < n->n_in; j++)
        bf |= g->nodes[n->in[j]].type.dtype == MPMD_BF16;
    cv->count[i]++;
    cv->count_bf16[i] += bf;
    if (n->op == &mpmd_op_cast) cv->cast[prec_of(g->nodes[n->in[0]].type.dtype)][prec_of(n->type.dtype)]++;
}

/* ---- random data -------------------------------------------------------------- */

#define PARAM_SEED 20240607u

/* ---- building cases ----------------------------------------------------------- */

#define MAX_SPECS 32
#define MAX_WRT 64

/* How an input is filled: a float uniform in [lo, hi) (rounded to multiples
 * of `step` when step > 0, to make ties; a 16-bit input is that f32 value
 * rounded to its dtype), or i32 uniform in [0, classes). */
typedef struct spec {
    int id;
    float lo, hi, step;
    int32_t classes;
} spec;

typedef struct cb {
    mpmd_graph *g;
    mpmd_dtype dt; /* the case's float dtype: of its float inputs, and what parameters are cast to */
    int n_spec;
    spec sp[MAX_SPECS];
    uint64_t seed; /* for random constants */
    mpmd_value loss;
} cb;

static mpmd_value add_input(cb *c, const char *name, mpmd_dtype dt, int ndim, const int64_t *dims, float lo,
                            float hi, float step, int32_t classes) {
    mpmd_value v = mpmd_input(c->g, name, dt, ndim, dims);
    if (mpmd_is_value(v) && c->n_spec < MAX_SPECS) c->sp[c->n_spec++] = (spec){v.id, lo, hi, step, classes};
    return v;
}

/* A float input in the case's dtype (f32, bf16 or f16), uniform in [lo, hi). */
static mpmd_value in_flt(cb *c, const char *name, float lo, float hi, int ndim, const int64_t *dims) {
    return add_input(c, name, c->dt, ndim, dims, lo, hi, 0.0f, 0);
}

/* The same in [lo, hi] on a grid of `step`: many equal values (ties for max). */
static mpmd_value in_fltq(cb *c, const char *name, float lo, float hi, float step, int ndim,
                          const int64_t *dims) {
    return add_input(c, name, c->dt, ndim, dims, lo, hi, step, 0);
}

static mpmd_value in_i32(cb *c, const char *name, int32_t classes, int ndim, const int64_t *dims) {
    return add_input(c, name, MPMD_I32, ndim, dims, 0, 0, 0, classes);
}

/* An f32 parameter as the case's dtype, for ops that take parameters
 * directly (layer norm, embedding): the parameter stays f32 and gets the
 * cast's gradient back in f32, as in the layers. Itself in an f32 case. */
static mpmd_value lp(cb *c, mpmd_value p) { return mpmd_cast(c->g, p, c->dt); }

/* A constant of y's shape in f32, uniform in [-1, 1). */
static mpmd_value rconst(cb *c, mpmd_value y) {
    mpmd_type t = mpmd_value_type(c->g, y);
    int64_t n = mpmd_type_numel(&t);
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) {
        fprintf(stderr, "test_backend_ops: out of memory\n");
        exit(1);
    }
    uint64_t s = tu_mix64(++c->seed * 7919u);
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)(tu_unif(&s) * 2.0 - 1.0);
    mpmd_value r = mpmd_constant(c->g, MPMD_F32, t.ndim, t.dim, d);
    free(d);
    return r;
}

/* loss += sum(f32(y) * r) with a fixed random r of y's shape. A 16-bit y is
 * cast to f32 first: the loss is an f32 scalar (as mpmd_grad wants), summed
 * without rounding to 16 bits, and y's cotangent r reaches y's op through
 * the cast's gradient, a cast back to y's dtype. */
static void acc(cb *c, mpmd_value y) {
    if (mpmd_graph_status(c->g) != MPMD_OK) return;
    y = mpmd_cast(c->g, y, MPMD_F32);
    mpmd_value l = mpmd_sum(c->g, mpmd_mul(c->g, y, rconst(c, y)), 0, NULL, 0);
    c->loss = mpmd_is_value(c->loss) ? mpmd_add(c->g, c->loss, l) : l;
}

/* loss += l for a scalar l (cast to f32) */
static void acc_scalar(cb *c, mpmd_value l) {
    l = mpmd_cast(c->g, l, MPMD_F32);
    c->loss = mpmd_is_value(c->loss) ? mpmd_add(c->g, c->loss, l) : l;
}

/* d loss / d (every parameter, and every float input when with_inputs);
 * keeps the loss and the gradients. Writes the parameters and their
 * gradients to params/pgrads (when not NULL); returns how many. */
static int grads(cb *c, int with_inputs, mpmd_value *params, mpmd_value *pgrads) {
    mpmd_graph *g = c->g;
    if (mpmd_graph_status(g) != MPMD_OK) return 0;
    mpmd_value wrt[MAX_WRT], gr[MAX_WRT];
    int np = mpmd_graph_params(g, NULL, 0), n = 0;
    if (np > MAX_WRT) {
        mpmd_fail(g, MPMD_ERR_INVALID, "test: too many parameters (%d)", np);
        return 0;
    }
    mpmd_graph_params(g, wrt, np);
    n = np;
    for (int i = 0; with_inputs && i < c->n_spec && n < MAX_WRT; i++)
        if (c->sp[i].classes == 0) wrt[n++] = (mpmd_value){c->sp[i].id};
    if (mpmd_grad(g, c->loss, n, wrt, gr) != MPMD_OK) return 0;
    mpmd_keep(g, c->loss);
    for (int i = 0; i < n; i++)
        mpmd_keep(g, gr[i]);
    for (int i = 0; i < np; i++) {
        if (params) params[i] = wrt[i];
        if (pgrads) pgrads[i] = gr[i];
    }
    return np;
}

/* A stage marker before the loop (mpmd_enter_stage only works in a loop
 * body): the same node the constructor makes, for its kernel to be tested. */
static mpmd_value marker(mpmd_graph *g, mpmd_value x) {
    if (mpmd_graph_status(g) != MPMD_OK) return MPMD_NONE;
    mpmd_value r = mpmd_emit(g, &mpmd_op_stage_marker, 1, &x, mpmd_value_type(g, x));
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) n->ia[0] = 0, n->ia[1] = 0;
    return r;
}

#define D(...) MPMD_SHAPE(__VA_ARGS__)

/* ---- the cases ---------------------------------------------------------------- */

/* Every unary op on its own, with in-place reruns on the input: the ops of
 * the lists in src/ops/elementwise_ops.h (on u, or on p where the list
 * says POS), and the scalar ops. */
static void case_unary(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value u = in_flt(c, "u", -2.0f, 2.0f, D(7, 33));
    mpmd_value p = in_flt(c, "p", 0.25f, 3.0f, D(7, 33)); /* positive: log, sqrt, rsqrt */
    mpmd_value on[2] = {u, p};
    enum { ANY, POS };
#define UNARY_ACC(name, reads, tol, domain, ...) acc(c, mpmd_##name(g, on[domain]));
    MPMD_UNARY_OPS(UNARY_ACC)
    MPMD_UNARY_GRAD_OPS(UNARY_ACC)
    acc(c, mpmd_add_scalar(g, u, 0.75f));
    acc(c, mpmd_mul_scalar(g, u, -1.5f));
    grads(c, 1, NULL, NULL);
}

/* Chains of exp/log and friends on a long row (130). */
static void case_unary_chain(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value u = in_flt(c, "u", -3.0f, 3.0f, D(5, 130));
    /* softplus = log(1 + exp(u)) */
    acc(c, mpmd_log(g, mpmd_add_scalar(g, mpmd_exp(g, u), 1.0f)));
    /* 1 / sqrt(u^2 + 1) and sqrt(u^2 + 0.5) */
    acc(c, mpmd_rsqrt(g, mpmd_add_scalar(g, mpmd_square(g, u), 1.0f)));
    acc(c, mpmd_sqrt(g, mpmd_add_scalar(g, mpmd_square(g, u), 0.5f)));
    /* tanh(gelu(u)) * relu(u) */
    acc(c, mpmd_mul(g, mpmd_tanh(g, mpmd_gelu(g, u)), mpmd_relu(g, mpmd_neg(g, u))));
    grads(c, 1, NULL, NULL);
}

/* Binary ops under numpy broadcasting: leading, middle and last axes, a
 * scalar on either side, the smaller operand first, an operand used twice. */
static void case_binary(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value a = in_flt(c, "a", -1.0f, 1.0f, D(4, 7, 33));
    mpmd_value b = in_flt(c, "b", -1.0f, 1.0f, D(7, 33));    /* leading axis */
    mpmd_value m = in_flt(c, "m", -1.0f, 1.0f, D(4, 1, 33)); /* middle axis */
    mpmd_value l = in_flt(c, "l", -1.0f, 1.0f, D(4, 7, 1));  /* last axis */
    mpmd_value e = in_flt(c, "e", 0.5f, 2.0f, D(1, 7, 1));   /* positive divisor */
    mpmd_value q = in_flt(c, "q", 0.5f, 2.0f, D(4, 7, 33));  /* positive divisor */
    mpmd_value s = in_flt(c, "s", 0.5f, 1.5f, 0, NULL);      /* a scalar */
    mpmd_value r = in_flt(c, "r", -1.0f, 1.0f, D(33));       /* a row */
    acc(c, mpmd_add(g, a, b));
    acc(c, mpmd_sub(g, a, m));
    acc(c, mpmd_mul(g, a, l));
    acc(c, mpmd_div(g, a, e));
    acc(c, mpmd_div(g, a, q));
    acc(c, mpmd_add(g, a, s));
    acc(c, mpmd_mul(g, s, a)); /* operand 0 broadcast: no in-place */
    acc(c, mpmd_sub(g, b, a));
    acc(c, mpmd_div(g, s, q));
    acc(c, mpmd_mul(g, a, a)); /* the same value twice */
    acc(c, mpmd_add(g, m, l)); /* both broadcast: [4,7,33] */
    acc(c, mpmd_mul(g, r, l)); /* [33] x [4,7,1] */
    acc(c, mpmd_sub(g, s, s)); /* scalar - scalar */
    grads(c, 1, NULL, NULL);
}

/* broadcast_to and sum_to on their own. */
static void case_broadcast_sum_to(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(7, 1));
    mpmd_value y = in_flt(c, "y", -1.0f, 1.0f, D(33));
    mpmd_value s = in_flt(c, "s", -1.0f, 1.0f, 0, NULL);
    mpmd_value z = in_flt(c, "z", -1.0f, 1.0f, D(3, 7, 33));
    acc(c, mpmd_broadcast_to(g, x, D(3, 7, 5)));
    acc(c, mpmd_broadcast_to(g, y, D(2, 7, 33)));
    acc(c, mpmd_broadcast_to(g, s, D(4, 5)));
    acc(c, mpmd_sum_to(g, z, D(7, 1)));
    acc(c, mpmd_sum_to(g, z, D(33)));
    acc(c, mpmd_sum_to(g, z, D(3, 1, 33)));
    acc(c, mpmd_sum_to(g, z, 0, NULL));
    grads(c, 1, NULL, NULL);
}

/* sum, mean, max over various axes, with and without keepdims. */
static void case_reduce(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(5, 7, 33));
    mpmd_value w = in_flt(c, "w", -1.0f, 1.0f, D(6, 130));
    acc(c, mpmd_sum(g, x, MPMD_AXES(0), 0));
    acc(c, mpmd_sum(g, x, MPMD_AXES(1), 1));
    acc(c, mpmd_sum(g, x, MPMD_AXES(-1), 0));
    acc(c, mpmd_sum(g, x, MPMD_AXES(0, 2), 1));
    acc(c, mpmd_sum(g, x, 0, NULL, 0));
    acc(c, mpmd_mean(g, x, MPMD_AXES(1), 0));
    acc(c, mpmd_mean(g, x, MPMD_AXES(0, 1), 1));
    acc(c, mpmd_mean(g, x, MPMD_AXES(2), 1));
    acc(c, mpmd_mean(g, x, 0, NULL, 1));
    acc(c, mpmd_max(g, x, MPMD_AXES(2), 1));
    acc(c, mpmd_max(g, x, MPMD_AXES(0), 0));
    acc(c, mpmd_max(g, x, MPMD_AXES(1, 2), 0));
    acc(c, mpmd_max(g, x, MPMD_AXES(0, 2), 1));
    acc(c, mpmd_max(g, x, 0, NULL, 0));
    acc(c, mpmd_sum(g, w, MPMD_AXES(1), 0));
    acc(c, mpmd_mean(g, w, MPMD_AXES(0), 1));
    acc(c, mpmd_max(g, w, MPMD_AXES(1), 1));
    grads(c, 1, NULL, NULL);
}

/* max with ties (values on a grid of 0.5): the gradient splits between them. */
static void case_max_ties(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_fltq(c, "x", -1.0f, 1.0f, 0.5f, D(6, 9, 10));
    acc(c, mpmd_max(g, x, MPMD_AXES(2), 0));
    acc(c, mpmd_max(g, x, MPMD_AXES(0), 1));
    acc(c, mpmd_max(g, x, MPMD_AXES(0, 1), 0));
    acc(c, mpmd_max(g, x, 0, NULL, 1));
    grads(c, 1, NULL, NULL);
}

/* Data movement: permutes (the attention one), transpose, reshape, slices,
 * concat; on floats of the case's dtype (with gradients) and on i32. */
static void case_shape(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(2, 7, 5, 33));
    mpmd_value y = in_flt(c, "y", -1.0f, 1.0f, D(2, 7, 5, 3));
    acc(c, mpmd_permute(g, x, (const int[]){0, 2, 1, 3})); /* [B,T,H,D] -> [B,H,T,D] */
    acc(c, mpmd_permute(g, x, (const int[]){3, 1, 0, 2}));
    acc(c, mpmd_transpose(g, x));
    acc(c, mpmd_reshape(g, mpmd_reshape(g, x, D(14, 165)), D(2, -1, 33)));
    acc(c, mpmd_slice(g, x, 1, 2, 6));
    acc(c, mpmd_slice(g, x, -1, 3, 30));
    acc(c, mpmd_slice(g, x, 0, 1, 2));
    mpmd_value parts[3] = {mpmd_slice(g, x, 2, 0, 2), x, mpmd_slice(g, x, 2, 4, 5)};
    acc(c, mpmd_concat(g, 3, parts, 2));
    mpmd_value twice[2] = {x, x};
    acc(c, mpmd_concat(g, 2, twice, 0));
    mpmd_value wide[2] = {y, x};
    acc(c, mpmd_concat(g, 2, wide, -1));
    grads(c, 1, NULL, NULL);

    /* i32: compared exactly */
    mpmd_value ids = in_i32(c, "ids", 1000, D(3, 7, 5));
    mpmd_keep(g, mpmd_permute(g, ids, (const int[]){2, 0, 1}));
    mpmd_keep(g, mpmd_slice(g, ids, 1, 3, 7));
    mpmd_keep(g, mpmd_reshape(g, ids, D(21, 5)));
    mpmd_value ip[2] = {ids, mpmd_slice(g, ids, 2, 1, 3)};
    mpmd_keep(g, mpmd_concat(g, 2, ip, 2));
}

/* Every transpose flag, 2-D, batched, and a 2-D b shared by a batched a
 * (whose gradient is one folded sgemm); scaled products. */
/* Products large enough (about 1 GFLOP) with rows whose starts are not
 * 16-byte aligned (1001, 517 columns): the GPU runs them on padded copies
 * of the operands and the result. */
static void case_matmul_rows(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value a = in_flt(c, "a", -1.0f, 1.0f, D(1000, 1001));
    mpmd_value b = in_flt(c, "b", -1.0f, 1.0f, D(1001, 517));
    mpmd_value bt = in_flt(c, "bt", -1.0f, 1.0f, D(517, 1001));
    mpmd_value at = in_flt(c, "at", -1.0f, 1.0f, D(1001, 1000));
    acc(c, mpmd_matmul(g, a, b, 0));
    acc(c, mpmd_matmul(g, a, bt, MPMD_TRANS_B));
    acc(c, mpmd_matmul(g, at, b, MPMD_TRANS_A));
    grads(c, 1, NULL, NULL);
}

static void case_matmul(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value a = in_flt(c, "a", -1.0f, 1.0f, D(7, 33));
    mpmd_value at = in_flt(c, "at", -1.0f, 1.0f, D(33, 7));
    mpmd_value b = in_flt(c, "b", -1.0f, 1.0f, D(33, 130));
    mpmd_value bt = in_flt(c, "bt", -1.0f, 1.0f, D(130, 33));
    acc(c, mpmd_matmul(g, a, b, 0));
    acc(c, mpmd_matmul(g, at, b, MPMD_TRANS_A));
    acc(c, mpmd_matmul(g, a, bt, MPMD_TRANS_B));
    acc(c, mpmd_matmul(g, at, bt, MPMD_TRANS_A | MPMD_TRANS_B));
    mpmd_value a3 = in_flt(c, "a3", -1.0f, 1.0f, D(3, 7, 33));
    mpmd_value a3t = in_flt(c, "a3t", -1.0f, 1.0f, D(3, 33, 7));
    mpmd_value w = in_flt(c, "w", -1.0f, 1.0f, D(33, 9));
    mpmd_value wt = in_flt(c, "wt", -1.0f, 1.0f, D(9, 33));
    mpmd_value b3 = in_flt(c, "b3", -1.0f, 1.0f, D(3, 33, 9));
    mpmd_value b3t = in_flt(c, "b3t", -1.0f, 1.0f, D(3, 9, 33));
    acc(c, mpmd_matmul(g, a3, w, 0));             /* shared b */
    acc(c, mpmd_matmul(g, a3t, w, MPMD_TRANS_A)); /* shared b, gradient through a transpose */
    acc(c, mpmd_matmul(g, a3, wt, MPMD_TRANS_B));
    acc(c, mpmd_matmul(g, a3, b3, 0));
    acc(c, mpmd_matmul(g, a3, b3t, MPMD_TRANS_B));
    acc(c, mpmd_matmul(g, a3t, b3, MPMD_TRANS_A));
    mpmd_value a4 = in_flt(c, "a4", -1.0f, 1.0f, D(2, 3, 7, 5));
    mpmd_value b4 = in_flt(c, "b4", -1.0f, 1.0f, D(2, 3, 5, 7));
    acc(c, mpmd_matmul(g, a4, b4, 0));
    /* scaled inside the product (attention's scores), and so its gradients */
    acc(c, mpmd_matmul_scaled(g, at, bt, MPMD_TRANS_A | MPMD_TRANS_B, 0.37f));
    acc(c, mpmd_matmul_scaled(g, a3, b3t, MPMD_TRANS_B, -1.25f));
    grads(c, 1, NULL, NULL);
}

/* softmax, log_softmax, causal softmax and their gradients. */
static void case_softmax(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -3.0f, 3.0f, D(3, 7, 33));
    mpmd_value v = in_flt(c, "v", -3.0f, 3.0f, D(130));
    mpmd_value s = in_flt(c, "s", -3.0f, 3.0f, D(2, 3, 17, 17));
    mpmd_value s1 = in_flt(c, "s1", -3.0f, 3.0f, D(33, 33));
    acc(c, mpmd_softmax(g, x));
    acc(c, mpmd_log_softmax(g, x));
    acc(c, mpmd_softmax(g, v));
    acc(c, mpmd_log_softmax(g, v));
    acc(c, mpmd_softmax_causal(g, s));
    acc(c, mpmd_softmax_causal(g, s1));
    grads(c, 1, NULL, NULL);
}

/* Row reductions over 1000 classes: cross-entropy, log_softmax, softmax. */
static void case_xent_1000(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value logits = in_flt(c, "logits", -4.0f, 4.0f, D(8, 1000));
    mpmd_value labels = in_i32(c, "labels", 1000, D(8));
    acc_scalar(c, mpmd_mean(g, mpmd_cross_entropy(g, logits, labels), 0, NULL, 0));
    acc(c, mpmd_log_softmax(g, logits));
    acc(c, mpmd_softmax(g, logits));
    grads(c, 1, NULL, NULL);
}

/* Cross-entropy over a few classes with leading axes, and its gradient with
 * a non-uniform cotangent. */
static void case_xent(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value logits = in_flt(c, "logits", -3.0f, 3.0f, D(3, 7, 33));
    mpmd_value labels = in_i32(c, "labels", 33, D(3, 7));
    acc(c, mpmd_cross_entropy(g, logits, labels));
    mpmd_value l2 = in_flt(c, "l2", -3.0f, 3.0f, D(5, 7));
    mpmd_value y2 = in_i32(c, "y2", 7, D(5));
    acc(c, mpmd_cross_entropy(g, l2, y2));
    grads(c, 1, NULL, NULL);
}

/* Layer norm with non-trivial scale and bias (x, gamma and beta all in the
 * case's dtype). */
static void case_layer_norm(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 3.0f, D(6, 130));
    mpmd_value gamma = mpmd_param(g, "gamma", D(130), (mpmd_init){MPMD_INIT_UNIFORM, 0.5f, 1.5f});
    mpmd_value beta = mpmd_param(g, "beta", D(130), MPMD_NORMAL(0.5f));
    acc(c, mpmd_layer_norm(g, x, lp(c, gamma), lp(c, beta), 1e-5f));
    mpmd_value x2 = in_flt(c, "x2", -2.0f, 2.0f, D(2, 3, 33));
    mpmd_value g2 = mpmd_param(g, "gamma2", D(33), (mpmd_init){MPMD_INIT_UNIFORM, -1.0f, 1.0f});
    mpmd_value b2 = mpmd_param(g, "beta2", D(33), MPMD_NORMAL(1.0f));
    acc(c, mpmd_layer_norm(g, x2, lp(c, g2), lp(c, b2), 1e-3f));
    grads(c, 1, NULL, NULL);
}

/* The LLaMA family: sigmoid, silu, maximum / minimum, compare, where,
 * dropout (a key input), RMS norm and rotary embeddings, with gradients. */
static void case_llama_ops(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value u = in_flt(c, "u", -3.0f, 3.0f, D(7, 33));
    mpmd_value w = in_flt(c, "w", -3.0f, 3.0f, D(33));
    acc(c, mpmd_sigmoid(g, u));
    acc(c, mpmd_silu(g, u));
    acc(c, mpmd_maximum(g, u, w));
    acc(c, mpmd_minimum(g, w, u));
    acc(c, mpmd_where(g, mpmd_compare(g, u, w, MPMD_CMP_LE), u, mpmd_mul_scalar(g, w, 0.5f)));
    acc(c, mpmd_dropout(g, u, 0.3f, in_i32(c, "key", 1 << 30, D(2))));
    mpmd_value x = in_flt(c, "x", -1.0f, 3.0f, D(6, 130));
    mpmd_value scale = mpmd_param(g, "scale", D(130), (mpmd_init){MPMD_INIT_UNIFORM, 0.5f, 1.5f});
    acc(c, mpmd_rms_norm(g, x, lp(c, scale), 1e-6f));
    acc(c, mpmd_rope(g, in_flt(c, "q", -2.0f, 2.0f, D(2, 9, 3, 16)), 10000.0f, 4));
    /* at run-time positions: one per row, and one per t shared by the batch, Llama 3.1's scaling on one */
    const mpmd_rope_scaling l3 = {8.0f, 1.0f, 4.0f, 64};
    acc(c, mpmd_rope_at(g, in_flt(c, "qa", -2.0f, 2.0f, D(2, 9, 3, 16)), in_i32(c, "pos", 5000, D(2, 9)),
                        500000.0f, &l3));
    acc(c, mpmd_rope_at(g, in_flt(c, "qb", -2.0f, 2.0f, D(2, 9, 3, 16)), in_i32(c, "pos9", 70, D(9)),
                        10000.0f, NULL));
    grads(c, 1, NULL, NULL);
}

/* Embedding lookups with repeated ids (tables in the case's dtype); the
 * gradient is a scatter-add. */
static void case_embedding(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value table = mpmd_param(g, "table", D(50, 33), MPMD_NORMAL(1.0f));
    mpmd_value ids = in_i32(c, "ids", 50, D(4, 7));
    acc(c, mpmd_embedding(g, lp(c, table), ids));
    mpmd_value t2 = mpmd_param(g, "table2", D(7, 130), MPMD_NORMAL(1.0f));
    mpmd_value ids2 = in_i32(c, "ids2", 7, D(33));
    acc(c, mpmd_embedding(g, lp(c, t2), ids2));
    grads(c, 1, NULL, NULL);
}

/* Multi-head attention, causal and not. */
static void case_attention(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value q = in_flt(c, "q", -1.5f, 1.5f, D(2, 7, 3, 5));
    mpmd_value k = in_flt(c, "k", -1.5f, 1.5f, D(2, 7, 3, 5));
    mpmd_value v = in_flt(c, "v", -1.0f, 1.0f, D(2, 7, 3, 5));
    acc(c, mpmd_attention(g, q, k, v, 1));
    acc(c, mpmd_attention(g, q, k, v, 0));
    grads(c, 1, NULL, NULL);
}

/* Attention on shapes a GPU kernel tiles (on tensor cores in 16 bits):
 * 130 positions (two full tiles of 64 and a ragged one) of head size 64,
 * and 77 positions of head size 32, causal and not, with gradients. */
static void case_attention_tc(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value q = in_flt(c, "q", -1.5f, 1.5f, D(2, 130, 2, 64));
    mpmd_value k = in_flt(c, "k", -1.5f, 1.5f, D(2, 130, 2, 64));
    mpmd_value v = in_flt(c, "v", -1.0f, 1.0f, D(2, 130, 2, 64));
    acc(c, mpmd_attention(g, q, k, v, 1));
    acc(c, mpmd_attention(g, q, k, v, 0));
    mpmd_value q2 = in_flt(c, "q2", -1.5f, 1.5f, D(1, 77, 3, 32));
    mpmd_value k2 = in_flt(c, "k2", -1.5f, 1.5f, D(1, 77, 3, 32));
    mpmd_value v2 = in_flt(c, "v2", -1.0f, 1.0f, D(1, 77, 3, 32));
    acc(c, mpmd_attention(g, q2, k2, v2, 1));
    acc(c, mpmd_attention(g, q2, k2, v2, 0));
    grads(c, 1, NULL, NULL);
}

/* A GPT-2 block: layer norms, attention, MLP with gelu, residuals. */
static void case_gpt_block(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(2, 9, 36));
    acc(c, mpmd_gpt_block(g, "block", x, 4));
    grads(c, 1, NULL, NULL);
}

/* An MLP trained one SGD step: compare the updated parameters. */
static void case_sgd(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(7, 33));
    mpmd_value y = in_flt(c, "y", -1.0f, 1.0f, D(7, 5));
    mpmd_value h = mpmd_tanh(g, mpmd_dense(g, "dense_0", x, 17, 1));
    mpmd_value p = mpmd_dense(g, "dense_1", h, 5, 1);
    acc_scalar(c, mpmd_mean(g, mpmd_square(g, mpmd_sub(g, p, y)), 0, NULL, 0));
    mpmd_value ps[MAX_WRT], gs[MAX_WRT];
    int n = grads(c, 0, ps, gs);
    if (n > 0) mpmd_sgd(g, n, ps, gs, mpmd_scalar(g, 0.1f));
}

/* An MLP with a layer norm and a cross-entropy loss trained one AdamW step:
 * compare parameters, moments and the step counter. */
static void case_adamw(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(9, 33));
    mpmd_value labels = in_i32(c, "labels", 7, D(9));
    mpmd_value h = mpmd_gelu(g, mpmd_layer_norm_layer(g, "ln", mpmd_dense(g, "dense_0", x, 130, 1), 1e-5f));
    mpmd_value logits = mpmd_dense(g, "dense_1", h, 7, 1);
    acc_scalar(c, mpmd_mean(g, mpmd_cross_entropy(g, logits, labels), 0, NULL, 0));
    mpmd_value ps[MAX_WRT], gs[MAX_WRT];
    int n = grads(c, 0, ps, gs);
    if (n > 0)
        mpmd_adamw(g, n, ps, gs, mpmd_scalar(g, 0.01f), (mpmd_adam_opts){0.9f, 0.999f, 1e-8f, 0.01f, NULL});
}

/* A stage marker (forward and backward) and assign to a variable of the
 * case's dtype and to an i32 one. */
static void case_marker_assign(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = in_flt(c, "x", -1.0f, 1.0f, D(7, 33));
    acc(c, mpmd_exp(g, marker(g, mpmd_mul_scalar(g, x, 0.5f))));
    grads(c, 1, NULL, NULL);
    mpmd_value v = mpmd_variable(g, "state", c->dt, D(7, 33), MPMD_ZEROS);
    mpmd_assign(g, v, mpmd_add_scalar(g, x, 1.0f));
    mpmd_value ids = in_i32(c, "ids", 100, D(5));
    mpmd_value iv = mpmd_variable(g, "istate", MPMD_I32, D(5), MPMD_ZEROS);
    mpmd_assign(g, iv, ids);
}

/* Conversions in all six directions between f32, bf16 and f16 (the case
 * mixes dtypes itself): on random values, on values on a fine grid (many
 * exact ties of bf16 and f16 rounding), through gradients (a cast's
 * gradient is the cast back), and on the values a conversion must get
 * right, kept: ties to even, f16 overflow to inf (65520 is a tie that
 * rounds up to it), f16 subnormals and underflow to 0, f32 subnormals, the
 * largest f32 (inf in bf16), inf, NaN, -0. A conversion is correctly
 * rounded (T_EXACT): every backend must give the CPU's values exactly. */
static void case_cast(cb *c) {
    mpmd_graph *g = c->g;
    mpmd_value x = add_input(c, "x", MPMD_F32, D(5, 33), -4.0f, 4.0f, 0.0f, 0);
    mpmd_value xq = add_input(c, "xq", MPMD_F32, D(3, 130), -2.0f, 2.0f, 1.0f / 4096.0f, 0);
    mpmd_value xb = add_input(c, "xb", MPMD_BF16, D(5, 33), -4.0f, 4.0f, 0.0f, 0);
    mpmd_value xh = add_input(c, "xh", MPMD_F16, D(5, 33), -4.0f, 4.0f, 0.0f, 0);
    /* f32 -> bf16 -> f16 (-> f32 in acc); the gradient goes f32 -> f16 -> bf16 -> f32 */
    acc(c, mpmd_cast(g, mpmd_cast(g, x, MPMD_BF16), MPMD_F16));
    /* f32 -> f16 -> bf16 (-> f32); the gradient f32 -> bf16 -> f16 -> f32 */
    acc(c, mpmd_cast(g, mpmd_cast(g, x, MPMD_F16), MPMD_BF16));
    acc(c, mpmd_cast(g, xq, MPMD_BF16));
    acc(c, mpmd_cast(g, xq, MPMD_F16));
    acc(c, mpmd_cast(g, xb, MPMD_F16));
    acc(c, mpmd_cast(g, xh, MPMD_BF16));
    acc(c, mpmd_mul(g, xb, mpmd_cast(g, xh, MPMD_BF16)));
    grads(c, 1, NULL, NULL);

    static const float sp[] = {
        1.0f + 0x1p-8f,
        1.0f + 3 * 0x1p-8f,
        -(1.0f + 3 * 0x1p-8f),
        1.0f + 0x1p-11f,
        1.0f + 3 * 0x1p-11f,
        65504.0f,
        65519.0f,
        65520.0f,
        1e5f,
        -1e5f,
        0x1p-24f,
        0x1p-25f,
        3 * 0x1p-25f,
        0x1p-14f - 0x1p-25f,
        1e-40f,
        0x1.fffffep127f,
        3.0e38f,
        INFINITY,
        -INFINITY,
        NAN,
        -0.0f,
        0.0f,
    };
    /* bf16: inf, -inf, NaN, 1e10 and 65536 (inf in f16), 2^-30 and the
     * smallest subnormal (0 in f16), 1 + 2^-7, 65280 (exact in f16) */
    static const uint16_t spb[] = {0x7f80, 0xff80, 0x7fc0, 0x5015, 0x4780, 0x3080, 0x0001, 0x3f81, 0x477f};
    /* f16: inf, -inf, NaN, 1 + 2^-8 and 1 + 3 2^-8 (bf16 ties), 2^-24, the
     * largest subnormal, 65504 (65536 in bf16), -0 */
    static const uint16_t sph[] = {0x7c00, 0xfc00, 0x7e00, 0x3c04, 0x3c0c, 0x0001, 0x03ff, 0x7bff, 0x8000};
    int64_t nsp = (int64_t)(sizeof sp / sizeof sp[0]), nb = 9, nh = 9;
    mpmd_value s = mpmd_constant(g, MPMD_F32, 1, &nsp, sp);
    mpmd_value sb = mpmd_constant(g, MPMD_BF16, 1, &nb, spb);
    mpmd_value sh = mpmd_constant(g, MPMD_F16, 1, &nh, sph);
    mpmd_keep(g, mpmd_cast(g, s, MPMD_BF16));
    mpmd_keep(g, mpmd_cast(g, s, MPMD_F16));
    mpmd_keep(g, mpmd_cast(g, sb, MPMD_F32));
    mpmd_keep(g, mpmd_cast(g, sb, MPMD_F16));
    mpmd_keep(g, mpmd_cast(g, sh, MPMD_F32));
    mpmd_keep(g, mpmd_cast(g, sh, MPMD_BF16));
}

typedef struct tcase {
    const char *name;
    void (*build)(cb *c);
    mpmd_dtype dt; /* the dtype of the float inputs (and of the parameters' casts) */
    /* end-to-end (chained) tolerance, on top of each op's */
    double rtol, atol;
} tcase;

/* The end-to-end tolerances: a chained run passes every kernel's error on
 * to the next node; deep chains (the GPT block's forward and backward
 * through two layer norms, attention and an MLP) compound more.
 *
 * 16-bit cases: an element whose f32 results straddle a rounding boundary
 * comes out one ulp apart (2^-8 relative in bf16, 2^-11 in f16, give or
 * take a factor 2), far more than f32's last bits, and the next ops receive
 * that. Relative errors stay at a few ulps: bf16 rtol 3e-2, f16 4e-3. The
 * absolute ones are set by sums: the cotangent of an input that several ops
 * use is accumulated in its own dtype, each add rounding, so a gradient that
 * cancels carries ulps of its largest partial sums, not of itself; and the
 * f32 loss sums thousands of 16-bit terms. atol is a few ulps of the terms
 * (O(1), up to ~10 for the inputs used most: binary_broadcast, shape,
 * matmul, and the GPT block's residual stream). Calibrated with a stand-in
 * backend, the CPU's kernels with their f32 results perturbed by up to
 * 3e-6 or 1e-5 relative before rounding (far more than the last bits of a
 * real backend), 36 runs: the worst absolute error beyond rtol was 2.0e-2
 * (bf16 unary), 1.8e-2 (bf16 mlp_adamw), 3.1e-2 (bf16 binary_broadcast),
 * 3.8e-2 (bf16 shape), 3.5e-2 (bf16 gpt_block), 5.3e-3 (f16 unary); these
 * atols are 2.5 times that or more. The cast case mixes dtypes: bf16's. */
static const tcase cases[] = {
    {"unary", case_unary, MPMD_F32, 1e-4, 1e-5},
    {"unary_chain", case_unary_chain, MPMD_F32, 1e-3, 1e-4},
    {"binary_broadcast", case_binary, MPMD_F32, 1e-4, 1e-4},
    {"broadcast_sum_to", case_broadcast_sum_to, MPMD_F32, 1e-4, 1e-4},
    {"reduce", case_reduce, MPMD_F32, 1e-4, 1e-4},
    {"max_ties", case_max_ties, MPMD_F32, 1e-4, 1e-4},
    {"shape", case_shape, MPMD_F32, 1e-4, 1e-4},
    {"matmul", case_matmul, MPMD_F32, 1e-3, 1e-4},
    {"matmul_rows", case_matmul_rows, MPMD_F32, 1e-3, 1e-4},
    {"softmax", case_softmax, MPMD_F32, 1e-3, 1e-4},
    {"xent_1000", case_xent_1000, MPMD_F32, 1e-3, 1e-4},
    {"xent", case_xent, MPMD_F32, 1e-3, 1e-4},
    {"layer_norm", case_layer_norm, MPMD_F32, 1e-3, 1e-4},
    {"llama_ops", case_llama_ops, MPMD_F32, 1e-3, 1e-4},
    {"embedding", case_embedding, MPMD_F32, 1e-4, 1e-4},
    {"attention", case_attention, MPMD_F32, 1e-3, 1e-4},
    {"attention_tc", case_attention_tc, MPMD_F32, 1e-3, 1e-4},
    {"gpt_block", case_gpt_block, MPMD_F32, 1e-2, 1e-3},
    {"mlp_sgd", case_sgd, MPMD_F32, 1e-3, 1e-4},
    {"mlp_adamw", case_adamw, MPMD_F32, 1e-3, 1e-4},
    {"marker_assign", case_marker_assign, MPMD_F32, 1e-4, 1e-5},
    {"cast", case_cast, MPMD_F32, 3e-2, 5e-2},
    /* every case again on bf16 operands */
    {"unary/bf16", case_unary, MPMD_BF16, 3e-2, 5e-2},
    {"unary_chain/bf16", case_unary_chain, MPMD_BF16, 3e-2, 5e-2},
    {"binary_broadcast/bf16", case_binary, MPMD_BF16, 3e-2, 1e-1},
    {"broadcast_sum_to/bf16", case_broadcast_sum_to, MPMD_BF16, 3e-2, 5e-2},
    {"reduce/bf16", case_reduce, MPMD_BF16, 3e-2, 5e-2},
    {"max_ties/bf16", case_max_ties, MPMD_BF16, 3e-2, 5e-2},
    {"shape/bf16", case_shape, MPMD_BF16, 3e-2, 1e-1},
    {"matmul/bf16", case_matmul, MPMD_BF16, 3e-2, 1e-1},
    {"matmul_rows/bf16", case_matmul_rows, MPMD_BF16, 3e-2, 1e-1},
    {"softmax/bf16", case_softmax, MPMD_BF16, 3e-2, 5e-2},
    {"xent_1000/bf16", case_xent_1000, MPMD_BF16, 3e-2, 5e-2},
    {"xent/bf16", case_xent, MPMD_BF16, 3e-2, 5e-2},
    {"layer_norm/bf16", case_layer_norm, MPMD_BF16, 3e-2, 5e-2},
    {"llama_ops/bf16", case_llama_ops, MPMD_BF16, 3e-2, 5e-2},
    {"embedding/bf16", case_embedding, MPMD_BF16, 3e-2, 5e-2},
    {"attention/bf16", case_attention, MPMD_BF16, 3e-2, 5e-2},
    {"attention_tc/bf16", case_attention_tc, MPMD_BF16, 3e-2, 5e-2},
    {"gpt_block/bf16", case_gpt_block, MPMD_BF16, 6e-2, 1e-1},
    {"mlp_sgd/bf16", case_sgd, MPMD_BF16, 3e-2, 5e-2},
    {"mlp_adamw/bf16", case_adamw, MPMD_BF16, 3e-2, 5e-2},
    {"marker_assign/bf16", case_marker_assign, MPMD_BF16, 3e-2, 5e-2},
    /* and a few on f16 */
    {"unary/f16", case_unary, MPMD_F16, 4e-3, 1.5e-2},
    {"binary_broadcast/f16", case_binary, MPMD_F16, 4e-3, 1.5e-2},
    {"reduce/f16", case_reduce, MPMD_F16, 4e-3, 1.5e-2},
    {"matmul/f16", case_matmul, MPMD_F16, 4e-3, 1.5e-2},
    {"softmax/f16", case_softmax, MPMD_F16, 4e-3, 1.5e-2},
    {"xent/f16", case_xent, MPMD_F16, 4e-3, 1.5e-2},
    {"layer_norm/f16", case_layer_norm, MPMD_F16, 4e-3, 1.5e-2},
    {"attention/f16", case_attention, MPMD_F16, 4e-3, 1.5e-2},
    {"attention_tc/f16", case_attention_tc, MPMD_F16, 4e-3, 1.5e-2},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- the mini executor -------------------------------------------------------- */

/* A built case, shared by every backend. */
typedef struct cdata {
    const tcase *tc;
    mpmd_graph *g;
    unsigned char *live;
    void **leaf; /* per node: the initial bytes of a live leaf, else NULL */
} cdata;

/* The values of one run, downloaded: per node, NULL where the node has no
 * data (tokens, dead nodes) or did not run on the backend. */
typedef struct run {
    void **val;
    void **inpl; /* in-place reruns */
    int ok;
    int n_inplace;
    int n_fed; /* nodes without a kernel on the backend, fed from the reference */
    char unsupported[256];
    char err[1024];
} run;

static void run_free(run *r, int nn) {
    for (int i = 0; i < nn; i++) {
        if (r->val) free(r->val[i]);
        if (r->inpl) free(r->inpl[i]);
    }
    free(r->val);
    free(r->inpl);
    memset(r, 0, sizeof *r);
}

static int has_data(const cdata *cd, int i) {
    const mpmd_node *n = &cd->g->nodes[i];
    return cd->live[i] && n->type.dtype != MPMD_TOKEN;
}

static int is_leaf(const mpmd_node *n) { return (n->op->flags & MPMD_OPF_LEAF) != 0; }

typedef struct pctx {
    void **buf;
    int over; /* value whose buffer is replaced, or -1 */
    void *over_p;
} pctx;

static void *ptr_of(void *ctx, int v) {
    pctx *p = ctx;
    return v == p->over ? p->over_p : p->buf[v];
}

/* Run cd's graph on be with `nthreads`. feed NULL: chained, every value
 * computed from the backend's own inputs, all downloaded at the end. feed
 * given (the reference run): each node runs on the reference's values of
 * its inputs, its output is downloaded, then replaced by the reference's;
 * with `inplace`, in-place capable nodes also run with the output in their
 * in-place input's buffer. Each kernel run is counted in cv (when not NULL). */
static void run_graph(const mpmd_backend *be, const cdata *cd, int nthreads, const run *feed, int inplace,
                      cover *cv, run *out) {
    const mpmd_graph *g = cd->g;
    const int nn = g->n_nodes;
    memset(out, 0, sizeof *out);
    out->val = calloc((size_t)nn, sizeof *out->val);
    out->inpl = calloc((size_t)nn, sizeof *out->inpl);
    void **buf = calloc((size_t)nn, sizeof *buf);
    void *dev = NULL, *scratch = NULL;
    char e[512];
    if (!out->val || !out->inpl || !buf) {
        snprintf(out->err, sizeof out->err, "out of memory");
        goto done;
    }
    if (!(dev = be->device.open(0, nthreads, e, sizeof e))) {
        snprintf(out->err, sizeof out->err, "open failed: %s", e);
        goto done;
    }
    be->device.enter(dev);
    size_t scratch_bytes = 0;
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!has_data(cd, i)) continue;
        size_t bytes = mpmd_type_bytes(&n->type);
        if (!(buf[i] = be->queue.alloc(dev, bytes)) || !(out->val[i] = malloc(bytes))) {
            snprintf(out->err, sizeof out->err, "out of memory allocating %%%d (%zu bytes)", i, bytes);
            goto done;
        }
        if (is_leaf(n) && be->queue.upload(dev, buf[i], cd->leaf[i], bytes)) {
            snprintf(out->err, sizeof out->err, "upload of %%%d failed", i);
            goto done;
        }
    }
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!cd->live[i] || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) ||
            n->op == &mpmd_op_assign)
            continue;
        const mpmd_kernel *k = be->kernels.find(n->op);
        size_t sb = mpmd_kernel_workspace(k, g, n); /* 16-bit operands widened there too */
        if (sb > scratch_bytes) scratch_bytes = sb;
    }
    if (scratch_bytes && !(scratch = be->queue.alloc(dev, scratch_bytes))) {
        snprintf(out->err, sizeof out->err, "out of memory allocating %zu bytes of scratch", scratch_bytes);
        goto done;
    }

    pctx pc = {buf, -1, NULL};
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!cd->live[i] || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL))) continue;
        size_t bytes = mpmd_type_bytes(&n->type);
        const mpmd_kernel *k = NULL;
        if (n->op != &mpmd_op_assign && !(k = be->kernels.find(n->op))) {
            if (!feed) {
                snprintf(out->err, sizeof out->err, "no %s kernel for %s (%%%d)", be->name, n->op->name, i);
                goto done;
            }
            /* not on this backend: its consumers get the reference's value */
            if (!strstr(out->unsupported, n->op->name) &&
                strlen(out->unsupported) + strlen(n->op->name) + 3 < sizeof out->unsupported)
                snprintf(out->unsupported + strlen(out->unsupported),
                         sizeof out->unsupported - strlen(out->unsupported), "%s%s",
                         out->unsupported[0] ? ", " : "", n->op->name);
            out->n_fed++;
            free(out->val[i]);
            out->val[i] = NULL;
            if (buf[i] && be->queue.upload(dev, buf[i], feed->val[i], bytes)) {
                snprintf(out->err, sizeof out->err, "upload of %%%d failed", i);
                goto done;
            }
            continue;
        }
        pc.over = -1;
        if (mpmd_backend_run(be, dev, g, i, k, buf[i], ptr_of, &pc, nthreads, scratch, 0, e, sizeof e)) {
            snprintf(out->err, sizeof out->err, "%%%d = %s: %s", i, n->op->name, e);
            goto done;
        }
        if (cv) cover_add(cv, g, n);
        if (!feed) continue;
        if (be->queue.sync(dev, e, sizeof e)) {
            snprintf(out->err, sizeof out->err, "%%%d = %s: %s", i, n->op->name, e);
            goto done;
        }
        if (buf[i] && (be->queue.download(dev, out->val[i], buf[i], bytes) ||
                       be->queue.upload(dev, buf[i], feed->val[i], bytes))) {
            snprintf(out->err, sizeof out->err, "download of %%%d failed", i);
            goto done;
        }
        /* in place: out = (a copy of) input k's buffer */
        int kin = n->op->inplace;
        if (!inplace || !buf[i] || kin < 0 || kin >= n->n_in) continue;
        int v = n->in[kin];
        const mpmd_type *vt = &g->nodes[v].type;
        if (!buf[v] || vt->dtype != n->type.dtype || mpmd_type_bytes(vt) != bytes) continue;
        void *tmp = be->queue.alloc(dev, bytes);
        if (!tmp || !(out->inpl[i] = malloc(bytes))) {
            if (tmp) be->queue.free(dev, tmp);
            snprintf(out->err, sizeof out->err, "out of memory");
            goto done;
        }
        pc.over = v;
        pc.over_p = tmp;
        int rc = be->queue.copy(dev, tmp, buf[v], bytes) ||
                 mpmd_backend_run(be, dev, g, i, k, tmp, ptr_of, &pc, nthreads, scratch, 0, e, sizeof e) ||
                 be->queue.sync(dev, e, sizeof e) || be->queue.download(dev, out->inpl[i], tmp, bytes);
        pc.over = -1;
        be->queue.free(dev, tmp);
        if (rc) {
            snprintf(out->err, sizeof out->err, "%%%d = %s in place: %s", i, n->op->name, e);
            goto done;
        }
        out->n_inplace++;
    }
    if (be->queue.sync(dev, e, sizeof e)) {
        snprintf(out->err, sizeof out->err, "sync: %s", e);
        goto done;
    }
    for (int i = 0; i < nn; i++) {
        /* fed runs downloaded each value as it was made; leaves change (the
         * optimizer, assign) and are read now */
        if (!buf[i] || !out->val[i] || (feed && !is_leaf(&g->nodes[i]))) continue;
        if (be->queue.download(dev, out->val[i], buf[i], mpmd_type_bytes(&g->nodes[i].type))) {
            snprintf(out->err, sizeof out->err, "download of %%%d failed", i);
            goto done;
        }
    }
    out->ok = 1;
done:
    if (dev) {
        be->queue.sync(dev, e, sizeof e);
        for (int i = 0; i < nn; i++)
            if (buf && buf[i]) be->queue.free(dev, buf[i]);
        if (scratch) be->queue.free(dev, scratch);
        be->device.close(dev);
    }
    free(buf);
}

/* ---- building a case's data ----------------------------------------------------- */

static void cdata_free(cdata *cd) {
    if (cd->g && cd->leaf)
        for (int i = 0; i < cd->g->n_nodes; i++)
            free(cd->leaf[i]);
    free(cd->leaf);
    free(cd->live);
    mpmd_graph_free(cd->g);
    memset(cd, 0, sizeof *cd);
}

/* Build case ci; on failure a message in err and 0. */
static int cdata_build(int ci, cdata *cd, char *err, size_t len) {
    memset(cd, 0, sizeof *cd);
    cd->tc = &cases[ci];
    cb c;
    memset(&c, 0, sizeof c);
    c.g = cd->g = mpmd_graph_new();
    c.dt = cd->tc->dt;
    c.loss = MPMD_NONE;
    c.seed = (uint64_t)ci * 1000;
    if (!c.g) {
        snprintf(err, len, "out of memory");
        return 0;
    }
    cd->tc->build(&c);
    mpmd_graph *g = c.g;
    if (mpmd_graph_status(g) != MPMD_OK) {
        snprintf(err, len, "building the graph failed: %s", mpmd_graph_error(g));
        return 0;
    }
    const int nn = g->n_nodes;
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_PRE) {
            snprintf(err, len, "%%%d = %s is not before the loop", i, n->op->name);
            return 0;
        }
        if (op_index(n->op) < 0) {
            snprintf(err, len, "%%%d = %s: op missing from op_table (give it a tolerance)", i, n->op->name);
            return 0;
        }
    }
    cd->live = mpmd_live_nodes(g);
    cd->leaf = calloc((size_t)nn + 1, sizeof *cd->leaf);
    if (!cd->live || !cd->leaf) {
        snprintf(err, len, "out of memory");
        return 0;
    }
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!has_data(cd, i) || !is_leaf(n)) continue;
        size_t bytes = mpmd_type_bytes(&n->type);
        if (!(cd->leaf[i] = malloc(bytes))) {
            snprintf(err, len, "out of memory");
            return 0;
        }
        if (n->op != &mpmd_op_input) {
            mpmd_leaf_initial_value(n, cd->leaf[i], PARAM_SEED);
            continue;
        }
        const spec *sp = NULL;
        for (int k = 0; k < c.n_spec; k++)
            if (c.sp[k].id == i) sp = &c.sp[k];
        if (!sp) {
            snprintf(err, len, "input \"%s\" has no fill", n->name);
            return 0;
        }
        int64_t cnt = mpmd_type_numel(&n->type);
        uint64_t s = tu_mix64(((uint64_t)ci << 32) ^ (uint64_t)i);
        for (int64_t k = 0; k < cnt; k++) {
            double u = tu_unif(&s);
            float v;
            if (n->type.dtype == MPMD_I32) {
                ((int32_t *)cd->leaf[i])[k] = (int32_t)(u * sp->classes);
                continue;
            } else if (sp->step > 0) {
                int steps = (int)((sp->hi - sp->lo) / sp->step + 0.5);
                v = sp->lo + sp->step * (float)(int)(u * (steps + 1));
            } else {
                v = (float)(sp->lo + (sp->hi - sp->lo) * u);
            }
            if (n->type.dtype == MPMD_BF16)
                ((uint16_t *)cd->leaf[i])[k] = mpmd_f32_to_bf16(v); /* the f32 value rounded */
            else if (n->type.dtype == MPMD_F16)
                ((uint16_t *)cd->leaf[i])[k] = mpmd_f32_to_f16(v);
            else
                ((float *)cd->leaf[i])[k] = v;
        }
    }
    return 1;
}

/* ---- comparing ------------------------------------------------------------------ */

static void index_str(const mpmd_type *t, int64_t flat, char *buf, size_t len) {
    int64_t idx[MPMD_MAX_DIMS];
    int64_t r = flat;
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = r % t->dim[d];
        r /= t->dim[d];
    }
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ",%lld" : "%lld", (long long)idx[d]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static void node_str(const mpmd_graph *g, int i, char *buf, size_t len) {
    const mpmd_node *n = &g->nodes[i];
    char tb[160];
    mpmd_type_str(&n->type, tb, sizeof tb);
    if (n->name)
        snprintf(buf, len, "%%%d = %s \"%s\" %s", i, n->op->name, n->name, tb);
    else
        snprintf(buf, len, "%%%d = %s %s", i, n->op->name, tb);
}

/* Mismatching nodes printed per (backend, case, kind of comparison): one
 * wrong kernel makes every value after it wrong in a chained run. */
#define MAX_REPORTS 4

typedef struct errstat {
    double max_rel;
    int fails;
} errstat;

/* Element k of a buffer of dtype dt, as a double (16-bit floats widened:
 * exact). */
static double elem(mpmd_dtype dt, const void *p, int64_t k) {
    switch (dt) {
    case MPMD_I32: return ((const int32_t *)p)[k];
    case MPMD_BF16: return mpmd_bf16_to_f32(((const uint16_t *)p)[k]);
    case MPMD_F16: return mpmd_f16_to_f32(((const uint16_t *)p)[k]);
    default: return ((const float *)p)[k];
    }
}

/* The bits of element k (4 or 2 bytes). */
static unsigned elem_bits(size_t es, const void *p, int64_t k) {
    if (es == 2) return ((const uint16_t *)p)[k];
    uint32_t u;
    memcpy(&u, (const char *)p + 4 * k, 4);
    return u;
}

/* Compare node i's values a (backend `an`) and b (`bn`): bitwise when
 * `bitwise`, else within rtol/atol (i32 exactly; 16-bit floats compared as
 * their exact f32 values). Prints the first mismatching element; returns 1
 * when they match. */
static int compare(const char *be_name, const cdata *cd, const char *what, int i, const void *a,
                   const char *an, const void *b, const char *bn, int bitwise, double rtol, double atol,
                   errstat *st) {
    const mpmd_node *n = &cd->g->nodes[i];
    const mpmd_dtype dt = n->type.dtype;
    const size_t es = mpmd_dtype_size(dt);
    int64_t cnt = mpmd_type_numel(&n->type);
    /* relative error against max(|b|, atol / rtol): where the tolerance
     * turns from absolute to relative */
    double scale = rtol > 0 ? atol / rtol : 1e-6;
    if (scale < 1e-30) scale = 1e-30;
    for (int64_t k = 0; k < cnt; k++) {
        int bad;
        double x = elem(dt, a, k), y = elem(dt, b, k), diff = 0;
        if (dt == MPMD_I32) {
            bad = x != y;
        } else if (bitwise) {
            bad = memcmp((const char *)a + es * k, (const char *)b + es * k, es) != 0;
            if (!bad || (!isnan(x) && !isnan(y))) {
                double rel = fabs(x - y) / fmax(fabs(y), scale);
                if (rel > st->max_rel) st->max_rel = rel;
            }
        } else {
            if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) {
                bad = !(x == y || (isnan(x) && isnan(y)));
            } else {
                diff = fabs(x - y);
                bad = diff > atol + rtol * fabs(y);
                double rel = diff / fmax(fabs(y), scale);
                if (rel > st->max_rel) st->max_rel = rel;
            }
        }
        if (bad) {
            if (st->fails++ >= MAX_REPORTS) return 0; /* counted, not printed */
            char ns[256], is[96];
            node_str(cd->g, i, ns, sizeof ns);
            index_str(&n->type, k, is, sizeof is);
            if (bitwise || dt == MPMD_I32) {
                int w = (int)(2 * es);
                printf("FAIL %s: case %s: %s (%s): element %s: %s %.9g (0x%0*x), %s %.9g (0x%0*x): not "
                       "bitwise equal\n",
                       be_name, cd->tc->name, ns, what, is, an, x, w, elem_bits(es, a, k), bn, y, w,
                       elem_bits(es, b, k));
            } else {
                printf(
                    "FAIL %s: case %s: %s (%s): element %s: %s %.9g, %s %.9g, |diff| %.3g > %.3g (rtol %g, "
                    "atol %g)\n",
                    be_name, cd->tc->name, ns, what, is, an, x, bn, y, diff, atol + rtol * fabs(y), rtol,
                    atol);
            }
            return 0;
        }
    }
    return 1;
}

/* Elements of node i whose bits differ between a and b. */
static int64_t count_differing(const cdata *cd, int i, const void *a, const void *b) {
    const mpmd_type *t = &cd->g->nodes[i].type;
    const size_t es = mpmd_dtype_size(t->dtype);
    int64_t cnt = mpmd_type_numel(t), d = 0;
    for (int64_t k = 0; k < cnt; k++)
        d += memcmp((const char *)a + es * k, (const char *)b + es * k, es) != 0;
    return d;
}

/* Rounding to nearest even: a 16-bit result computed, on the CPU's operands,
 * in f32 and rounded once differs from the CPU's only where the two f32
 * results straddle a rounding boundary. Sums and products of 16-bit values
 * are often exact in f32, and often ties, which a correct f32 computation
 * rounds the same way. The stand-in backend of the case tolerances (below)
 * differed in at most 12% of a node's elements (sum, sum_to), and in 22%
 * when it perturbed even exact sums and products (ties then fall either
 * way). A backend that truncates, or rounds twice, stays within one ulp
 * everywhere, which the tolerances allow, but differs in about half the
 * elements: so no node of 64 elements or more may differ from the CPU in
 * more than a quarter of them. */
#define ROUND_DIFF_MAX 0.25
#define ROUND_DIFF_MIN_ELEMS 64

/* ---- one backend on one case -------------------------------------------------------- */

/* Returns 1 when the case passes on be. */
static int test_case(const mpmd_backend *be, const cdata *cd, const run *ref, cover *cv) {
    const mpmd_graph *g = cd->g;
    const int nn = g->n_nodes;
    const int is_cpu = strcmp(be->name, "cpu") == 0;
    const char *tag = is_cpu ? "cpu'" : be->name; /* the CPU against itself */
    run iso, iso2, e2e;
    run_graph(be, cd, 1, ref, 1, cv, &iso);
    run_graph(be, cd, 2, ref, 0, NULL, &iso2);
    run_graph(be, cd, 1, NULL, 0, NULL, &e2e);
    errstat st = {0, 0}, st_e2e = {0, 0}, st_det = {0, 0};
    int e2e_skipped = 0;
    double round_frac = 0; /* the largest share of a 16-bit node's elements not equal to the cpu's */
    if (!iso.ok || !iso2.ok) {
        printf("FAIL %s: case %s: %s\n", be->name, cd->tc->name, !iso.ok ? iso.err : iso2.err);
        st.fails++;
    } else {
        for (int i = 0; i < nn; i++) {
            if (!iso.val[i] || !ref->val[i]) continue;
            const mpmd_node *n = &g->nodes[i];
            const tol t = fam[op_table[op_index(n->op)].fam].t[prec_of(n->type.dtype)];
            compare(be->name, cd, "iso", i, iso.val[i], tag, ref->val[i], "cpu", is_cpu, t.rtol, t.atol, &st);
            int64_t cnt = mpmd_type_numel(&n->type);
            if (prec_of(n->type.dtype) != P_F32 && op_table[op_index(n->op)].fam != T_EXACT &&
                cnt >= ROUND_DIFF_MIN_ELEMS) {
                int64_t d = count_differing(cd, i, iso.val[i], ref->val[i]);
                if ((double)d / (double)cnt > round_frac) round_frac = (double)d / (double)cnt;
                if ((double)d > ROUND_DIFF_MAX * (double)cnt && st.fails++ < MAX_REPORTS) {
                    char ns[256];
                    node_str(g, i, ns, sizeof ns);
                    printf(
                        "FAIL %s: case %s: %s (iso): %lld of %lld elements differ from the cpu's (more than "
                        "%g): not rounded to nearest even once?\n",
                        be->name, cd->tc->name, ns, (long long)d, (long long)cnt, ROUND_DIFF_MAX);
                }
            }
            if (iso.inpl[i]) {
                compare(be->name, cd, "in place vs cpu", i, iso.inpl[i], tag, ref->val[i], "cpu", is_cpu,
                        t.rtol, t.atol, &st);
                compare(be->name, cd, "in place vs out of place", i, iso.inpl[i], "in place", iso.val[i],
                        "out of place", 1, 0, 0, &st);
            }
            if (iso2.val[i])
                compare(be->name, cd, "determinism: 2 threads vs 1", i, iso2.val[i], "run 2", iso.val[i],
                        "run 1", 1, 0, 0, &st_det);
        }
    }
    if (!e2e.ok) {
        if (iso.ok && iso.n_fed) {
            e2e_skipped = 1; /* a node has no kernel here */
        } else {
            printf("FAIL %s: case %s: chained run: %s\n", be->name, cd->tc->name, e2e.err);
            st_e2e.fails++;
        }
    } else {
        for (int i = 0; i < nn; i++) {
            if (!e2e.val[i] || !ref->val[i]) continue;
            const mpmd_node *n = &g->nodes[i];
            const tol t = fam[op_table[op_index(n->op)].fam].t[prec_of(n->type.dtype)];
            double rtol = fmax(t.rtol, cd->tc->rtol), atol = fmax(t.atol, cd->tc->atol);
            compare(be->name, cd, "chained", i, e2e.val[i], tag, ref->val[i], "cpu", is_cpu, rtol, atol,
                    &st_e2e);
        }
    }
    const errstat *sts[3] = {&st, &st_det, &st_e2e};
    static const char *kinds[3] = {"against the cpu", "between runs", "in the chained run"};
    for (int k = 0; k < 3; k++)
        if (sts[k]->fails > MAX_REPORTS)
            printf("FAIL %s: case %s: %d more nodes differ %s\n", be->name, cd->tc->name,
                   sts[k]->fails - MAX_REPORTS, kinds[k]);
    int fails = st.fails + st_e2e.fails + st_det.fails;
    int live = 0;
    for (int i = 0; i < nn; i++)
        live += cd->live[i];
    printf("  %-5s %-22s %4d nodes %3d in place  max rel err %.2e  chained %s%.2e  %s", be->name,
           cd->tc->name, live, iso.n_inplace, st.max_rel, e2e_skipped ? "(skipped) " : "", st_e2e.max_rel,
           fails ? "FAILED" : "ok");
    if (round_frac > 0) printf("  (16-bit: up to %.1f%% of a node differs)", 100 * round_frac);
    if (iso.n_fed) printf("  (no kernel for %s: fed from the cpu)", iso.unsupported);
    printf("\n");
    fflush(stdout);
    run_free(&iso, nn);
    run_free(&iso2, nn);
    run_free(&e2e, nn);
    return fails == 0;
}

/* ---- coverage ------------------------------------------------------------------------ */

/* Every op of a CPU kernel table must be in op_table. */
static int check_cpu_tables(void) {
    int ok = 1;
    for (const mpmd_kernel *const *t = mpmd_cpu_kernel_tables; *t; t++)
        for (const mpmd_kernel *e = *t; e->op; e++)
            if (op_index(e->op) < 0) {
                printf(
                    "FAIL coverage: the cpu has a kernel for \"%s\", which is not in op_table: add it with a "
                    "tolerance and a case\n",
                    e->op->name);
                ok = 0;
            }
    return ok;
}

/* The op lists of src/ops/elementwise_ops.h are what every backend must
 * run: each op of them (and each fused backward op) needs a kernel on be.
 * A table lookup, so it holds for a backend this machine cannot run too
 * (cuda without a GPU). */
static const mpmd_op_desc *const listed_ops[] = {
#define LISTED(name, ...) &mpmd_op_##name,
#define LISTED_GRAD(name, ...) &mpmd_op_##name, &mpmd_op_##name##_grad,
    MPMD_BINARY_OPS(LISTED) MPMD_UNARY_OPS(LISTED) MPMD_UNARY_GRAD_OPS(LISTED_GRAD)};

static int check_lists(const mpmd_backend *be) {
    int ok = 1;
    for (size_t i = 0; i < sizeof listed_ops / sizeof listed_ops[0]; i++)
        if (!be->kernels.find(listed_ops[i])) {
            printf("FAIL %s: op \"%s\" of src/ops/elementwise_ops.h has no kernel on this backend\n",
                   be->name, listed_ops[i]->name);
            ok = 0;
        }
    return ok;
}

/* Ops no graph can give a 16-bit operand: the optimizers update f32 master
 * parameters (mpmd_param has no dtype) with f32 gradients and f32 state, and
 * the step counter is i32. */
static int f32_only(const mpmd_op_desc *op) {
    return op == &mpmd_op_sgd || op == &mpmd_op_adamw || op == &mpmd_op_optim_step;
}

/* Every op be has a kernel for ran at least once, and (but f32_only ones)
 * at least once with a bf16 operand or result; cast ran in all six
 * directions between f32, bf16 and f16. */
static int check_coverage(const mpmd_backend *be, const cover *cv) {
    int ok = 1;
    char missing[1024] = "";
    for (int i = 0; i < N_OPS; i++) {
        const mpmd_op_desc *op = op_table[i].op;
        if (op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL) || op == &mpmd_op_assign) continue;
        if (!be->kernels.find(op)) {
            if (strlen(missing) + strlen(op->name) + 3 < sizeof missing)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                         missing[0] ? ", " : "", op->name);
            continue;
        }
        if (cv->count[i] == 0) {
            printf("FAIL %s: coverage: op \"%s\" has a kernel but no case ran it\n", be->name, op->name);
            ok = 0;
        } else if (cv->count_bf16[i] == 0 && !f32_only(op)) {
            printf("FAIL %s: coverage: op \"%s\" has a kernel but no case ran it on bf16 operands\n",
                   be->name, op->name);
            ok = 0;
        }
    }
    if (be->kernels.find(&mpmd_op_cast))
        for (int from = 0; from < P_N; from++)
            for (int to = 0; to < P_N; to++)
                if (from != to && cv->cast[from][to] == 0) {
                    printf("FAIL %s: coverage: no case cast %s to %s\n", be->name, p_name[from], p_name[to]);
                    ok = 0;
                }
    if (missing[0]) printf("  %s: no kernel (not tested): %s\n", be->name, missing);
    return ok;
}

/* ---- main ---------------------------------------------------------------------------- */

/* ---- the model axis (model_combine, model_local) and sums of squares ----
 * Not kernels of the graph's ops but backend operations the runtime calls
 * (src/runtime): each against the CPU's on random inputs, bit for bit (the
 * same arithmetic in the same order). */

/* A backend buffer holding n bytes of host data. */
static void *upload_new(const mpmd_backend *be, void *dev, const void *src, size_t n) {
    void *p = be->queue.alloc(dev, n + 64);
    if (p && be->queue.upload(dev, p, src, n)) {
        be->queue.free(dev, p);
        return NULL;
    }
    return p;
}

static int test_model_axis(const mpmd_backend *be) {
    enum { M = 2, T = 6, C = 8, V = 16 };
    mpmd_graph *g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, M);
    mpmd_value ids = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(T));
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(T, C));
    mpmd_value xb = mpmd_input(g, "xb", MPMD_BF16, MPMD_SHAPE(T, C));
    mpmd_value tab = mpmd_param_split(g, "table", MPMD_SHAPE(V, C), MPMD_NORMAL(1.0f), 0, 1);
    mpmd_value logits =
        mpmd_param(g, "logits", MPMD_SHAPE(T, V / M), MPMD_NORMAL(1.0f)); /* the rank's columns */
    mpmd_loop_begin(g, 1);
    mpmd_value xs[2] = {mpmd_microbatch(g, x), mpmd_microbatch(g, xb)};
    mpmd_value idb = mpmd_microbatch(g, ids);
    for (int k = 0; k < 2; k++) {
        TU_DROP(mpmd_all_reduce(g, xs[k], "model")); /* nodes of the graph, run one by one below */
        TU_DROP(mpmd_all_gather(g, xs[k], 1, "model"));
        TU_DROP(mpmd_reduce_scatter(g, xs[k], 1, "model"));
        TU_DROP(mpmd_pvary(g, xs[k], "model"));
    }
    mpmd_value lsum = mpmd_sum(g, mpmd_embedding_split(g, tab, idb, "model"), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value ce =
        mpmd_sum(g, mpmd_cross_entropy_split(g, logits, idb, "model"), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value wrt[2] = {tab, logits}, gr[2];
    mpmd_grad(g, mpmd_add(g, lsum, ce), 2, wrt, gr);
    mpmd_loop_end(g);
    /* every collective of the graph: those above, the split ops' parts and
     * their gradients (axis_embedding, axis_pick, axis_slice, ...) */
    int ok = mpmd_graph_status(g) == MPMD_OK, checked = 0, kinds = 0;
    const mpmd_op_desc *seen[16];
    if (!ok) printf("FAIL %s model axis: building: %s\n", be->name, mpmd_graph_error(g));
    char why[256];
    void *dev = ok ? be->device.open(0, 1, why, sizeof why) : NULL;
    if (ok && !dev) printf("FAIL %s model axis: open: %s\n", be->name, why), ok = 0;
    uint64_t seed = 99;
    for (int i = 0; ok && i < g->n_nodes; i++) {
        const mpmd_node *nd = &g->nodes[i];
        if (!(nd->op->flags & MPMD_OPF_COLLECTIVE)) continue;
        const int exch = mpmd_collective_exchanges(nd->op);
        /* each model rank's inputs: random floats, or ids in [0, V) */
        void *h_in[M][2], *d_in[M][2];
        size_t ib[2] = {0, 0};
        memset(d_in, 0, sizeof d_in);
        for (int m = 0; m < M; m++)
            for (int j = 0; j < nd->n_in; j++) {
                const mpmd_type *t = &g->nodes[nd->in[j]].type;
                const int64_t cnt = mpmd_type_numel(t);
                ib[j] = mpmd_type_bytes(t);
                h_in[m][j] = malloc(ib[j] + 1);
                for (int64_t k = 0; k < cnt; k++) {
                    double u = tu_unif(&seed);
                    if (t->dtype == MPMD_I32)
                        ((int32_t *)h_in[m][j])[k] = (int32_t)(u * V);
                    else if (t->dtype == MPMD_F32)
                        ((float *)h_in[m][j])[k] = (float)(2 * u - 1);
                    else
                        ((uint16_t *)h_in[m][j])[k] = t->dtype == MPMD_BF16
                                                          ? mpmd_f32_to_bf16((float)(2 * u - 1))
                                                          : mpmd_f32_to_f16((float)(2 * u - 1));
                }
                d_in[m][j] = upload_new(be, dev, h_in[m][j], ib[j]);
                if (!d_in[m][j]) ok = 0;
            }
        const size_t ob = mpmd_type_bytes(&nd->type);
        char *want = malloc(ob + 1), *got = malloc(ob + 1), err[256] = "";
        void *d_out = be->queue.alloc(dev, ob + 64);
        for (int m = 0; ok && m < M; m++) {
            const void *hin0[M], *din0[M];
            for (int r = 0; r < M; r++)
                hin0[r] = h_in[r][0], din0[r] = d_in[r][0];
            int bad =
                exch ? mpmd_backend_cpu.kernels.model_combine(NULL, g, i, m, M, hin0, want, err, sizeof err)
                     : mpmd_backend_cpu.kernels.model_local(NULL, g, i, m, h_in[m], want, err, sizeof err);
            bad = bad || !d_out ||
                  (exch ? be->kernels.model_combine(dev, g, i, m, M, din0, d_out, err, sizeof err)
                        : be->kernels.model_local(dev, g, i, m, d_in[m], d_out, err, sizeof err)) ||
                  be->queue.download(dev, got, d_out, ob) || be->queue.sync(dev, err, sizeof err);
            if (bad || memcmp(got, want, ob)) {
                printf("FAIL %s model axis: %%%d = %s, model rank %d: %s\n", be->name, i, nd->op->name, m,
                       bad ? err : "not the cpu's bits");
                ok = 0;
            }
        }
        int known = 0;
        for (int k = 0; k < kinds; k++)
            known |= seen[k] == nd->op;
        if (!known && kinds < 16) seen[kinds++] = nd->op;
        checked++;
        for (int m = 0; m < M; m++)
            for (int j = 0; j < nd->n_in; j++) {
                free(h_in[m][j]);
                if (d_in[m][j]) be->queue.free(dev, d_in[m][j]);
            }
        if (d_out) be->queue.free(dev, d_out);
        free(want), free(got);
    }
    /* all_reduce, all_gather, reduce_scatter, pvary, axis_embedding(_grad),
     * axis_pick(_grad), axis_slice: every kind */
    if (ok && kinds < 9)
        printf("FAIL %s model axis: only %d kinds of collective ran\n", be->name, kinds), ok = 0;
    if (dev) be->device.close(dev);
    mpmd_graph_free(g);
    if (ok)
        printf("ok: %s model axis: %d collectives, each model rank's result the cpu's bits\n", be->name,
               checked);
    return ok;
}

static int test_sumsq(const mpmd_backend *be) {
    char why[256], err[256] = "";
    void *dev = be->device.open(0, 2, why, sizeof why);
    if (!dev) {
        printf("FAIL %s sumsq: open: %s\n", be->name, why);
        return 0;
    }
    enum { NV = 3 };
    const int64_t cnt[NV] = {1, 70001, 300000}; /* over one chunk of a device block */
    float *h[NV];
    void *d[NV];
    uint64_t seed = 5;
    int ok = 1;
    for (int v = 0; v < NV; v++) {
        h[v] = malloc((size_t)cnt[v] * sizeof(float));
        for (int64_t k = 0; k < cnt[v]; k++)
            h[v][k] = (float)((tu_unif(&seed) - 0.5) * ldexp(1.0, (int)(tu_unif(&seed) * 80) - 60));
        d[v] = upload_new(be, dev, h[v], (size_t)cnt[v] * sizeof(float));
        ok &= d[v] != NULL;
    }
    uint32_t want[MPMD_EXACT_WORDS] = {0}, got[MPMD_EXACT_WORDS] = {0};
    ok = ok &&
         !mpmd_backend_cpu.kernels.sumsq(NULL, NV, (const void *const *)h, cnt, want, err, sizeof err) &&
         be->kernels.sumsq && !be->kernels.sumsq(dev, NV, (const void *const *)d, cnt, got, err, sizeof err);
    if (!ok || memcmp(want, got, sizeof want))
        printf("FAIL %s sumsq: %s\n", be->name,
               ok       ? "not the cpu's exact sum"
               : err[0] ? err
                        : "no sumsq"),
            ok = 0;
    else
        printf("ok: %s sumsq: the exact sum of squares of %d vectors is the cpu's (%.17g)\n", be->name, NV,
               mpmd_exact_value(got));
    for (int v = 0; v < NV; v++) {
        if (d[v]) be->queue.free(dev, d[v]);
        free(h[v]);
    }
    be->device.close(dev);
    return ok;
}

int main(int argc, char **argv) {
    if (argc > 3) {
        fprintf(stderr,
                "usage: test_backend_ops [backend [case]]   (this build has: %s; a case name runs the cases "
                "whose names start with it, for a sanitizer's slow runs)\n",
                mpmd_backend_names());
        return 1;
    }
    const char *only = argc == 3 ? argv[2] : NULL;
#ifdef MPMD_HAVE_CUDA
    if (!mpmd_backend_get("cuda")) {
        printf("FAIL: built with MPMD_HAVE_CUDA but no \"cuda\" backend is registered\n");
        return 1;
    }
#endif
    const mpmd_backend *bes[8];
    int nb = 0, list_fails = 0;
    char why[512];
    if (argc >= 2) {
        const mpmd_backend *be = argv[1][0] ? mpmd_backend_get(argv[1]) : NULL;
        if (!be) {
            printf("test_backend_ops: unknown backend \"%s\"; this build has: %s\n", argv[1],
                   mpmd_backend_names());
            return 1;
        }
        if (!check_lists(be)) return 1;
        why[0] = '\0';
        if (be->device.available(why, sizeof why)) {
            printf("test_backend_ops: %s: skipped: %s\n", be->name, why);
            return 77;
        }
        bes[nb++] = be;
    } else {
        /* "cpu, cuda" */
        const char *names = mpmd_backend_names();
        while (*names && nb < 8) {
            size_t l = strcspn(names, ", ");
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(l < sizeof name ? l : sizeof name - 1), names);
            names += l;
            names += strspn(names, ", ");
            const mpmd_backend *be = mpmd_backend_get(name);
            if (!be) {
                printf("FAIL: mpmd_backend_names lists \"%s\" but mpmd_backend_get does not find it\n", name);
                return 1;
            }
            if (!check_lists(be)) list_fails++;
            why[0] = '\0';
            if (be->device.available(why, sizeof why)) {
                printf("test_backend_ops: %s: skipped: %s\n", be->name, why);
                continue;
            }
            bes[nb++] = be;
        }
    }

    int passed = 0, failed = list_fails;
    if (check_cpu_tables())
        passed++;
    else
        failed++;

    /* Every case: built once, run on the CPU once (the reference). */
    cdata cd[N_CASES];
    run ref[N_CASES];
    memset(cd, 0, sizeof cd);
    memset(ref, 0, sizeof ref);
    int built[N_CASES];
    for (int ci = 0; ci < N_CASES; ci++) {
        char err[512];
        if (only && strncmp(cases[ci].name, only, strlen(only)) != 0) {
            built[ci] = 0;
            continue;
        }
        built[ci] = cdata_build(ci, &cd[ci], err, sizeof err);
        if (built[ci]) {
            run_graph(&mpmd_backend_cpu, &cd[ci], 1, NULL, 0, NULL, &ref[ci]);
            if (!ref[ci].ok) {
                snprintf(err, sizeof err, "the cpu reference run failed: %.400s", ref[ci].err);
                built[ci] = 0;
            }
        }
        if (!built[ci]) {
            printf("FAIL case %s: %s\n", cases[ci].name, err);
            failed++;
        }
    }

    for (int b = 0; b < nb; b++) {
        const mpmd_backend *be = bes[b];
        if (!only) { /* the runtime's operations on a backend's buffers */
            if (test_model_axis(be))
                passed++;
            else
                failed++;
            if (test_sumsq(be))
                passed++;
            else
                failed++;
        }
        printf("test_backend_ops: %s against cpu, %d cases\n", be->name, N_CASES);
        cover cv;
        memset(&cv, 0, sizeof cv);
        for (int ci = 0; ci < N_CASES; ci++) {
            if (!built[ci]) continue;
            if (test_case(be, &cd[ci], &ref[ci], &cv))
                passed++;
            else
                failed++;
        }
        if (only) continue; /* a subset covers only some kernels */
        if (check_coverage(be, &cv))
            passed++;
        else
            failed++;
    }

    for (int ci = 0; ci < N_CASES; ci++) {
        if (cd[ci].g) run_free(&ref[ci], cd[ci].g->n_nodes);
        cdata_free(&cd[ci]);
    }
    printf("test_backend_ops: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
