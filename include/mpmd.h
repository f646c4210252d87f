/* mpmd.h - MPMD pipeline-parallel training in C.
 *
 * mpmd builds a training step as a graph of tensor ops, differentiates it,
 * and runs it: on one rank with a microbatch loop, or (with a schedule) as
 * one program per pipeline rank. This header is the whole public API.
 *
 * A step in brief (README.md's first example, the same lines): a
 * two-layer MLP trained with AdamW, 4 microbatches, as a two-stage
 * pipeline.
 *
 *     #include "mpmd.h"
 *
 *     mpmd_graph *g = mpmd_graph_new();
 *     mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(64, 16));
 *     mpmd_value y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(64, 1));
 *
 *     mpmd_loop_begin(g, 4);                          // 4 microbatches of 16 rows
 *     mpmd_value xb = mpmd_microbatch(g, x), yb = mpmd_microbatch(g, y);
 *     mpmd_value h = mpmd_relu(g, mpmd_dense(g, "dense_0", xb, 32, MPMD_BIAS));
 *     h = mpmd_enter_stage(g, h);                     // stage 0 ends here
 *     mpmd_value d = mpmd_sub(g, mpmd_dense(g, "dense_1", h, 1, MPMD_BIAS), yb);
 *     mpmd_value loss = mpmd_mean(g, mpmd_square(g, d), MPMD_ALL_AXES, MPMD_DROP_DIMS);
 *     loss = mpmd_enter_stage(g, loss);               // stage 1 ends here
 *
 *     mpmd_value params[4], grads[4];                 // treduce(value_and_grad(...)): backward ops in the
 *     int np;                                         // same body; loss, gradients summed over microbatches
 *     mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 4, params, grads, &np);
 *     mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 1e-3f), MPMD_ADAM_DEFAULTS);
 *
 *     mpmd_schedule *sched;                           // 2 stages on 2 ranks, 4 microbatches
 *     mpmd_error err;
 *     mpmd_schedule_std1f1b(2, 4, &sched, &err);
 *     mpmd_step *st = mpmd_jit_with_loop(g, sched, NULL, &err);   // one program per rank
 *     mpmd_step_set_input(st, x, xdata, sizeof xdata);
 *     mpmd_step_set_input(st, y, ydata, sizeof ydata);
 *     mpmd_step_run(st);                              // one step, one thread per rank
 *     float l;
 *     mpmd_step_read(st, total, &l, sizeof l);
 *
 * The same graph runs unpipelined, the reference the pipeline matches bit
 * for bit: mpmd_exec_new(g, NULL, &err), mpmd_exec_set_input, mpmd_exec_run.
 *
 * Conventions.
 * - Values are SSA: every op returns a new value; nothing runs until an
 *   executor runs the graph. Tensors are dense, row-major, f32, bf16, f16
 *   or i32 (see Precision for the mixed-precision policy).
 * - Errors follow one rule, by what a call does, and every failure is also
 *   in its return value (MPMD_NONE, NULL or a status other than MPMD_OK):
 *   . building a graph: the first error is kept on the graph (sticky;
 *     mpmd_graph_status / mpmd_graph_error) and the failing constructor
 *     returns MPMD_NONE; constructors given MPMD_NONE return MPMD_NONE, so
 *     checking once after building is enough;
 *   . a call that makes something (a step, an executor, a schedule, a
 *     file, a timeline, a summary, a prediction) fills the mpmd_error * it
 *     is given (NULL: no message) and returns NULL or a status;
 *   . a call on an existing step or executor in place (set an input, run,
 *     read, write) returns a status and keeps the message on that object
 *     (mpmd_step_error / mpmd_exec_error) until its next call.
 *   Messages name the call, the values, the shapes and the scope.
 * - Ownership: the graph owns its nodes and names; an executor owns its
 *   buffers; pointers returned by getters stay valid until the owner is
 *   freed (or, for node data, until the graph grows).
 * - Determinism: every kernel computes each output element on one thread (or
 *   one GPU block) in a fixed order, so results do not depend on the thread
 *   count, the rank or the stream that runs it.
 * - Backends: executors allocate and run on a backend named in their
 *   options ("cpu", or "cuda" in a build with CUDA); values go in and out
 *   by copy (set_input, read, write), never by pointer, except through the
 *   *_var_data accessors, which are CPU-only.
 */
#ifndef MPMD_H
#define MPMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mpmd_error.h"
#include "mpmd_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

MPMD_API_BEGIN

/* ------------------------------------------------------------------------ */
/* Types and values                                                          */
/* ------------------------------------------------------------------------ */

typedef enum mpmd_dtype {
    MPMD_F32 = 0,
    MPMD_I32 = 1,
    MPMD_TOKEN = 2, /* no data: the result of an op run for its effect */
    MPMD_BF16 = 3,  /* bfloat16: f32's exponent, 8 significant bits, 2 bytes */
    MPMD_F16 = 4    /* IEEE binary16, 2 bytes */
} mpmd_dtype;

#define MPMD_MAX_DIMS 6

/* A tensor type: dtype and shape. ndim 0 is a scalar. */
typedef struct mpmd_type {
    mpmd_dtype dtype;
    int ndim;
    int64_t dim[MPMD_MAX_DIMS];
} mpmd_type;

/* A value of a graph (the output of one node). id < 0 is "no value". */
typedef struct mpmd_value {
    int32_t id;
} mpmd_value;

#define MPMD_NONE ((mpmd_value){-1})

/* Op constructors carry the compiler's unused-result warning (leaves, which
 * can be found again by name, do not): an op whose result is dropped is
 * never computed, and a dropped stage marker
 * (`mpmd_enter_stage(g, h);` instead of `h = mpmd_enter_stage(g, h);`)
 * leaves a stage empty. */
#if defined(__GNUC__)
#define MPMD_NODISCARD __attribute__((warn_unused_result))
#else
#define MPMD_NODISCARD
#endif

static inline int mpmd_is_value(mpmd_value v) { return v.id >= 0; }

/* Shape arguments: `MPMD_SHAPE(4, 16)` expands to `2, (int64_t[]){4, 16}`,
 * i.e. the (ndim, dims) pair every shape-taking function expects. */
#define MPMD_SHAPE(...)                                                                                      \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }
/* Axis lists: `MPMD_AXES(0, 1)` expands to `2, (int[]){0, 1}`. */
#define MPMD_AXES(...)                                                                                       \
    (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (const int[]) { __VA_ARGS__ }
/* A scalar's shape (no dimensions; `MPMD_SHAPE()` with nothing in it is
 * not standard C), and "every axis" for the reductions. */
#define MPMD_SCALAR_SHAPE 0, (const int64_t *)NULL
#define MPMD_ALL_AXES 0, (const int *)NULL
/* Named flags, so that call sites read: a dense layer's bias, a
 * reduction's kept dimensions, causal attention, a schedule's fused steady
 * state. */
enum {
    MPMD_NO_BIAS = 0,
    MPMD_BIAS = 1,
    MPMD_DROP_DIMS = 0,
    MPMD_KEEP_DIMS = 1,
    MPMD_NOT_CAUSAL = 0,
    MPMD_CAUSAL = 1,
    MPMD_NO_FUSE = 0,
    MPMD_FUSE = 1
};

/* Number of elements, and of bytes, of a type. */
int64_t mpmd_type_numel(const mpmd_type *t);
size_t mpmd_type_bytes(const mpmd_type *t);
/* Bytes of one element (4, 4, 0, 2, 2), and whether a dtype is a float. */
size_t mpmd_dtype_size(mpmd_dtype d);
int mpmd_dtype_is_float(mpmd_dtype d);
/* "f32[4,16]" into buf (always terminated); returns buf. */
char *mpmd_type_str(const mpmd_type *t, char *buf, size_t len);
const char *mpmd_dtype_name(mpmd_dtype d);

/* ------------------------------------------------------------------------ */
/* The graph                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct mpmd_graph mpmd_graph;

mpmd_graph *mpmd_graph_new(void); /* NULL only when out of memory */
void mpmd_graph_free(mpmd_graph *g);

/* The first error met while building (MPMD_OK if none) and its message
 * ("" if none). */
mpmd_status mpmd_graph_status(const mpmd_graph *g);
const char *mpmd_graph_error(const mpmd_graph *g);

/* Type and name of a value. The name is the full hierarchical name of an
 * input, parameter or variable, NULL for other values. */
mpmd_type mpmd_value_type(const mpmd_graph *g, mpmd_value v);
const char *mpmd_value_name(const mpmd_graph *g, mpmd_value v);
/* The value with this full name (input, parameter or variable), or MPMD_NONE. */
MPMD_NODISCARD mpmd_value mpmd_lookup(const mpmd_graph *g, const char *name);
int mpmd_graph_num_values(const mpmd_graph *g);

/* The trainable parameters in creation order: writes up to `cap` values to
 * `out` (out may be NULL) and returns how many there are. */
int mpmd_graph_params(const mpmd_graph *g, mpmd_value *out, int cap);

/* The persistent state of a step: every parameter and variable (optimizer
 * moments, step counters), in creation order; what a checkpoint holds.
 * Same calling convention as mpmd_graph_params. */
int mpmd_graph_state(const mpmd_graph *g, mpmd_value *out, int cap);

/* Print the graph as text, one op per line with its output type, in the
 * regions "before loop", "loop body" and "after loop". */
void mpmd_graph_print(const mpmd_graph *g, FILE *f);

/* Name scopes: parameters created inside get "a/b/name" names, as flax
 * modules do (block_3/mlp/dense_0/kernel). Errors name the scope too. */
void mpmd_scope_push(mpmd_graph *g, const char *name);
void mpmd_scope_pushf(mpmd_graph *g, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void mpmd_scope_pop(mpmd_graph *g);

/* ------------------------------------------------------------------------ */
/* Leaves: inputs, parameters, variables, constants                          */
/* ------------------------------------------------------------------------ */

/* A step input (e.g. the batch), fed with mpmd_exec_set_input before each
 * run. Its name is taken as given (no scope). */
mpmd_value mpmd_input(mpmd_graph *g, const char *name, mpmd_dtype dtype, int ndim, const int64_t *dims);

/* How a parameter or variable starts. Every draw is a pure function of
 * (executor seed, full name, element index), so initial values do not depend
 * on creation order, thread count or layout. */
typedef enum mpmd_init_kind {
    MPMD_INIT_ZEROS = 0,
    MPMD_INIT_CONST,   /* every element = a */
    MPMD_INIT_NORMAL,  /* mean a, standard deviation b */
    MPMD_INIT_UNIFORM, /* uniform in [a, b) */
    MPMD_INIT_LECUN    /* normal(0, 1/sqrt(fan_in)), fan_in = product of all dims but the last */
} mpmd_init_kind;

typedef struct mpmd_init {
    mpmd_init_kind kind;
    float a, b;
} mpmd_init;

#define MPMD_ZEROS ((mpmd_init){MPMD_INIT_ZEROS, 0.0f, 0.0f})
#define MPMD_ONES ((mpmd_init){MPMD_INIT_CONST, 1.0f, 0.0f})
#define MPMD_NORMAL(std) ((mpmd_init){MPMD_INIT_NORMAL, 0.0f, (std)})
#define MPMD_LECUN ((mpmd_init){MPMD_INIT_LECUN, 0.0f, 0.0f})

/* A trainable f32 parameter named "<scope>/<name>". It lives in the
 * executor across steps. Names must be unique. */
mpmd_value mpmd_param(mpmd_graph *g, const char *name, int ndim, const int64_t *dims, mpmd_init init);

/* Persistent, non-trainable state (optimizer moments, step counters), named
 * as given (no scope). Updated only by mpmd_assign and optimizer ops. */
mpmd_value mpmd_variable(mpmd_graph *g, const char *name, mpmd_dtype dtype, int ndim, const int64_t *dims,
                         mpmd_init init);

/* Constants: a scalar, a filled tensor, or a tensor with the given data
 * (copied into the graph; `data` holds numel elements of `dtype`). */
MPMD_NODISCARD mpmd_value mpmd_scalar(mpmd_graph *g, float v);
MPMD_NODISCARD mpmd_value mpmd_full(mpmd_graph *g, float v, int ndim, const int64_t *dims);
MPMD_NODISCARD mpmd_value mpmd_constant(mpmd_graph *g, mpmd_dtype dtype, int ndim, const int64_t *dims,
                                        const void *data);

/* ------------------------------------------------------------------------ */
/* Elementwise ops (numpy broadcasting between operands)                     */
/* ------------------------------------------------------------------------ */

MPMD_NODISCARD mpmd_value mpmd_add(mpmd_graph *g, mpmd_value a, mpmd_value b);
MPMD_NODISCARD mpmd_value mpmd_sub(mpmd_graph *g, mpmd_value a, mpmd_value b);
MPMD_NODISCARD mpmd_value mpmd_mul(mpmd_graph *g, mpmd_value a, mpmd_value b);
MPMD_NODISCARD mpmd_value mpmd_div(mpmd_graph *g, mpmd_value a, mpmd_value b);
MPMD_NODISCARD mpmd_value mpmd_add_scalar(mpmd_graph *g, mpmd_value a, float s); /* a + s */
MPMD_NODISCARD mpmd_value mpmd_mul_scalar(mpmd_graph *g, mpmd_value a, float s); /* a * s */
MPMD_NODISCARD mpmd_value mpmd_neg(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_exp(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_log(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_tanh(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_sqrt(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_rsqrt(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_square(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_relu(mpmd_graph *g, mpmd_value a);
/* gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
MPMD_NODISCARD mpmd_value mpmd_gelu(mpmd_graph *g, mpmd_value a);
/* 1 / (1 + e^-a), and silu (swish) a / (1 + e^-a) */
MPMD_NODISCARD mpmd_value mpmd_sigmoid(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_silu(mpmd_graph *g, mpmd_value a);
/* log(1 + e^a), computed without overflow (a for large a); its gradient is
 * sigmoid(a) */
MPMD_NODISCARD mpmd_value mpmd_softplus(mpmd_graph *g, mpmd_value a);
/* Elementwise larger and smaller of a and b (NaN wins); at a tie each
 * operand gets half of the cotangent. */
MPMD_NODISCARD mpmd_value mpmd_maximum(mpmd_graph *g, mpmd_value a, mpmd_value b);
MPMD_NODISCARD mpmd_value mpmd_minimum(mpmd_graph *g, mpmd_value a, mpmd_value b);
typedef enum mpmd_cmp {
    MPMD_CMP_EQ,
    MPMD_CMP_NE,
    MPMD_CMP_LT,
    MPMD_CMP_LE,
    MPMD_CMP_GT,
    MPMD_CMP_GE
} mpmd_cmp;
/* 1 where `a cmp b` holds, else 0, in a's dtype (a mask for mpmd_where or
 * mpmd_mul); no gradient flows through it. */
MPMD_NODISCARD mpmd_value mpmd_compare(mpmd_graph *g, mpmd_value a, mpmd_value b, mpmd_cmp cmp);
/* a where cond != 0, else b; the three broadcast to one shape (numpy) and
 * have one dtype. The mask gets no gradient. */
MPMD_NODISCARD mpmd_value mpmd_where(mpmd_graph *g, mpmd_value cond, mpmd_value a, mpmd_value b);
/* Inverted dropout: each element of x kept with probability 1 - rate and
 * scaled by 1 / (1 - rate), else 0. The mask is a function of key (an i32[2]
 * value, typically an input set to (seed, step) every step), the element,
 * the microbatch and the op (its place among the graph's dropout ops, so
 * stage markers do not change it), drawn with Philox-4x32-10: the same in the
 * one-rank loop and in every schedule, on every thread count, and drawn
 * again by the backward instead of stored. rate 0 returns x. */
MPMD_NODISCARD mpmd_value mpmd_dropout(mpmd_graph *g, mpmd_value x, float rate, mpmd_value key);
/* Broadcast to a shape (numpy rules), and its adjoint: sum over the
 * broadcast dimensions down to a shape. */
MPMD_NODISCARD mpmd_value mpmd_broadcast_to(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims);
MPMD_NODISCARD mpmd_value mpmd_sum_to(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims);

/* ------------------------------------------------------------------------ */
/* Precision                                                                 */
/* ------------------------------------------------------------------------ */

/* Convert x to dtype (f32, bf16, f16; to a 16-bit float rounding to nearest,
 * ties to even). Its gradient is the cotangent cast back to x's dtype, so a
 * bf16 computation on a cast of an f32 parameter yields an f32 gradient.
 * x itself when it already has that dtype. */
MPMD_NODISCARD mpmd_value mpmd_cast(mpmd_graph *g, mpmd_value x, mpmd_dtype dtype);

/* Mixed precision, the policy of JAX's jmp and PyTorch's autocast made
 * explicit. Float ops compute in their operands' dtype (both operands of a
 * binary op, and a matmul's, must agree; cast to convert). The layers below
 * (mpmd_dense, mpmd_layer_norm_layer, mpmd_mlp, attention, blocks) keep
 * their parameters in f32 (the master weights the optimizer updates) and
 * use a cast of each in their input's dtype; mpmd_embed's output is in the
 * graph's compute dtype. Layer norm, softmax and cross-entropy keep their
 * statistics in f32 whatever the storage dtype, cross-entropy's loss is
 * f32, and a loop-reduced gradient of an f32 parameter is summed in f32.
 * The compute dtype is f32 unless set (before the layers are built). */
mpmd_status mpmd_set_compute_dtype(mpmd_graph *g, mpmd_dtype dtype);
mpmd_dtype mpmd_compute_dtype(const mpmd_graph *g);

/* ------------------------------------------------------------------------ */
/* Reductions and shape ops                                                  */
/* ------------------------------------------------------------------------ */

/* Reduce over `axes` (negative counts from the end; naxes 0 means all
 * axes). keepdims keeps reduced axes with size 1. Sums run in index order. */
MPMD_NODISCARD mpmd_value mpmd_sum(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims);
MPMD_NODISCARD mpmd_value mpmd_mean(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims);
MPMD_NODISCARD mpmd_value mpmd_max(mpmd_graph *g, mpmd_value a, int naxes, const int *axes, int keepdims);

/* Same data, new shape; one dim may be -1 (inferred). */
MPMD_NODISCARD mpmd_value mpmd_reshape(mpmd_graph *g, mpmd_value a, int ndim, const int64_t *dims);
/* out.dim[i] = a.dim[perm[i]] */
MPMD_NODISCARD mpmd_value mpmd_permute(mpmd_graph *g, mpmd_value a, const int *perm);
/* Swap the last two axes. */
MPMD_NODISCARD mpmd_value mpmd_transpose(mpmd_graph *g, mpmd_value a);
/* Elements start <= i < stop along one axis. */
MPMD_NODISCARD mpmd_value mpmd_slice(mpmd_graph *g, mpmd_value a, int axis, int64_t start, int64_t stop);
MPMD_NODISCARD mpmd_value mpmd_concat(mpmd_graph *g, int n, const mpmd_value *xs, int axis);

/* ------------------------------------------------------------------------ */
/* Neural-network ops                                                        */
/* ------------------------------------------------------------------------ */

#define MPMD_TRANS_A 1
#define MPMD_TRANS_B 2
/* Matrix product over the last two axes. a is [..., M, K] ([..., K, M] with
 * MPMD_TRANS_A), b is [K, N] ([N, K] with MPMD_TRANS_B) or batched with the
 * same leading dims as a; a and b have one float dtype. Result [..., M, N].
 * On the CPU every product is an OpenBLAS sgemm (16-bit operands widened);
 * on CUDA a cuBLAS product (bf16/f16 on tensor cores, f32 accumulation). */
MPMD_NODISCARD mpmd_value mpmd_matmul(mpmd_graph *g, mpmd_value a, mpmd_value b, int flags);
/* alpha op(a) op(b), the scale applied inside the product (one pass, as in
 * attention's scores); its gradients are scaled the same way. */
MPMD_NODISCARD mpmd_value mpmd_matmul_scaled(mpmd_graph *g, mpmd_value a, mpmd_value b, int flags,
                                             float alpha);

/* Softmax and log-softmax over the last axis. The causal variant takes
 * [..., T, T] scores and masks j > i (row i attends to columns 0..i). */
MPMD_NODISCARD mpmd_value mpmd_softmax(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_log_softmax(mpmd_graph *g, mpmd_value a);
MPMD_NODISCARD mpmd_value mpmd_softmax_causal(mpmd_graph *g, mpmd_value a);

/* Layer norm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta,
 * gamma and beta of shape [C]. One fused kernel each way. */
MPMD_NODISCARD mpmd_value mpmd_layer_norm(mpmd_graph *g, mpmd_value x, mpmd_value gamma, mpmd_value beta,
                                          float eps);

/* RMS norm over the last axis (LLaMA's): x / sqrt(mean(x^2) + eps) * scale,
 * scale of shape [C]. One fused kernel each way. */
MPMD_NODISCARD mpmd_value mpmd_rms_norm(mpmd_graph *g, mpmd_value x, mpmd_value scale, float eps);

/* Rotary position embedding of x [..., T, H, D] (mpmd_attention's layout,
 * D even): in each head, the pair (x[i], x[i + D/2]) at position p = offset
 * + t is turned by the angle p base^(-2i/D) (the half-split pairing of
 * GPT-NeoX and Hugging Face's LLaMA). base is usually 10000; offset is the
 * first position (0 in training, the cache length when generating). */
MPMD_NODISCARD mpmd_value mpmd_rope(mpmd_graph *g, mpmd_value x, float base, int64_t offset);
/* Llama 3.1's adjustment of the rotary frequencies for long contexts
 * (Hugging Face's rope_scaling of rope_type "llama3"). With w_i = base^(-2i/D)
 * and its wavelength l_i = 2 pi / w_i, L = original_positions:
 *   l_i < L / high_freq_factor   w_i           (high frequencies kept)
 *   l_i > L / low_freq_factor    w_i / factor  (low frequencies stretched)
 *   otherwise                    (1 - s) w_i / factor + s w_i,
 *                                s = (L / l_i - low_freq_factor) / (high_freq_factor - low_freq_factor).
 * factor 0 is no adjustment; otherwise factor >= 1, 0 < low_freq_factor <
 * high_freq_factor and L >= 1 (else an error naming the numbers). */
typedef struct mpmd_rope_scaling {
    float factor; /* 0: none */
    float low_freq_factor, high_freq_factor;
    int64_t original_positions; /* original_max_position_embeddings */
} mpmd_rope_scaling;
#define MPMD_ROPE_NO_SCALING ((mpmd_rope_scaling){0.0f, 0.0f, 0.0f, 0})
/* mpmd_rope with the positions a value of the step (generation: each
 * sequence at its own place, set every run) instead of an attribute: row
 * (..., t) of x [..., T, H, D] turns by the angle p w_i, p the i32
 * positions[..., t] (positions [..., T]: x's dimensions but the last two)
 * or positions[t] (positions [T]: the same for every leading index). Any
 * int32 position turns (a negative one the other way). scaling: NULL or a
 * factor of 0 for the plain frequencies. A position gives the same angles
 * as mpmd_rope's offset + t, so the two agree bit for bit. The positions
 * get no gradient. */
MPMD_NODISCARD mpmd_value mpmd_rope_at(mpmd_graph *g, mpmd_value x, mpmd_value positions, float base,
                                       const mpmd_rope_scaling *scaling);

/* Rows of table [V, C] picked by i32 ids [...]: result [..., C]. An id
 * outside [0, V) is a run-time error naming the id. */
MPMD_NODISCARD mpmd_value mpmd_embedding(mpmd_graph *g, mpmd_value table, mpmd_value ids);
/* Gather along an axis (numpy's take): x [A..., N, B...] and i32 ids [I...]
 * give [A..., I..., B...] with the axis' index replaced by the ids. The
 * gradient sums into the picked rows in a fixed order. */
MPMD_NODISCARD mpmd_value mpmd_take(mpmd_graph *g, mpmd_value x, mpmd_value ids, int axis);

/* Per-position cross-entropy of logits [..., V] against i32 labels [...]:
 * logsumexp(logits) - logits[label]; result [...]. */
MPMD_NODISCARD mpmd_value mpmd_cross_entropy(mpmd_graph *g, mpmd_value logits, mpmd_value labels);

/* Multi-head attention on q, k, v of shape [B, T, H, Dh]: softmax(q k^T /
 * sqrt(Dh)) v per head, causal (each position attends to itself and the
 * ones before it) or not. Result [B, T, H, Dh]. One fused op: the [T, T]
 * scores are never stored, forward or backward (whose op recomputes them). */
MPMD_NODISCARD mpmd_value mpmd_attention(mpmd_graph *g, mpmd_value q, mpmd_value k, mpmd_value v, int causal);
/* fused 0: mpmd_attention calls made after this build the composition
 * instead (permutes, the scaled score product, a (causal) softmax, the
 * product with v), whose backward keeps the [B, H, T, T] probabilities:
 * B H T^2 more values per layer, and no recomputation. On the CUDA backend
 * the composition (cuBLAS products) is faster than the fused kernels today
 * (README, GPU figures); the GPT example uses it there. Default 1. */
mpmd_status mpmd_set_fused_attention(mpmd_graph *g, int fused);

/* ------------------------------------------------------------------------ */
/* Tensor parallelism: the mesh's model axis                                 */
/* ------------------------------------------------------------------------ */

/* The graph describes one of m model ranks (JAX's shard_map body over the
 * "model" axis, Megatron's tensor-parallel rank): a step of it runs m
 * ranks per pipeline rank and replica (in-process threads, or under MPI
 * mpirun -np stages x data_parallel x m). Call it before building
 * anything. With m > 1 the layers split themselves Megatron's way:
 * mpmd_self_attention by heads (name/qkv by output columns, name/out by
 * input rows, an all-reduce after it), mpmd_mlp and mpmd_swiglu_mlp by
 * their hidden width (first dense layers by columns, the last by rows, an
 * all-reduce after it), mpmd_rope_attention by heads and key/value heads,
 * mpmd_embed by vocabulary rows when m divides the vocabulary (below);
 * norms stay whole on every rank. A width, head count or
 * hidden size that m does not divide is an error naming the layer. Results
 * are those of the unsplit model up to the order of the split sums (float
 * rounding), the same run to run and in-process or under MPI. Default 1. */
mpmd_status mpmd_set_tensor_parallel(mpmd_graph *g, int m);
int mpmd_tensor_parallel(const mpmd_graph *g);
/* A parameter split over the model axis: dims is the whole parameter's
 * shape, initialised as the whole one would be (name and seed), and this
 * rank holds its part along `axis`, which groups * m must divide: the axis
 * seen as [groups, m, n / (groups m)], rank r holds [:, r, :] (groups 3
 * for a fused q|k|v kernel split by heads). Checkpoints, reads and hashes
 * see the whole parameter. */
MPMD_NODISCARD mpmd_value mpmd_param_split(mpmd_graph *g, const char *name, int ndim, const int64_t *dims,
                                           mpmd_init init, int axis, int groups);
/* A value's type as a step's reads, writes and checkpoints see it
 * (mpmd_step_read, mpmd_step_write, mpmd_exec_read, mpmd_step_save): a
 * parameter split over the model axis (and its optimizer state) whole,
 * any other value as mpmd_value_type gives it. */
mpmd_type mpmd_value_whole_type(const mpmd_graph *g, mpmd_value v);
/* Collectives over a mesh axis (only "model" in the graph; the data axis is
 * the step's: data_parallel, fsdp), summing in rank order on every rank:
 *   all_reduce      the sum over the ranks; gradient: the cotangent
 *   pvary           x (equal on every rank); gradient: all_reduce
 *   all_gather      the ranks' x concatenated along dim, in rank order;
 *                   gradient: this rank's slice of the cotangent
 *   reduce_scatter  this rank's slice along dim of the sum (m divides it);
 *                   gradient: all_gather
 * The gradients take the cotangent to be equal on every model rank, as it
 * is for a loss computed the same on each (Megatron's f and g). These and
 * the split embedding and cross-entropy below run inside the microbatch
 * loop body of a graph of m >= 2 model ranks: made with m = 1 or after
 * mpmd_loop_end they are an error at once, before mpmd_loop_begin an error
 * when the loop begins, in a graph that never gets a loop (no stage marker
 * either, which makes the ops before it a loop of one) an error when it
 * compiles; each message names the call. */
MPMD_NODISCARD mpmd_value mpmd_all_reduce(mpmd_graph *g, mpmd_value x, const char *axis);
MPMD_NODISCARD mpmd_value mpmd_pvary(mpmd_graph *g, mpmd_value x, const char *axis);
MPMD_NODISCARD mpmd_value mpmd_all_gather(mpmd_graph *g, mpmd_value x, int dim, const char *axis);
MPMD_NODISCARD mpmd_value mpmd_reduce_scatter(mpmd_graph *g, mpmd_value x, int dim, const char *axis);
/* Vocabulary parallelism over the model axis. mpmd_embedding_split: rows
 * of an f32 table split by rows (this rank's part, [vocab / m, width], as
 * mpmd_param_split(..., axis 0, 1 group) makes it) for ids of the whole
 * vocabulary, each rank contributing the rows it holds, summed by an
 * all-reduce: the whole table's rows. mpmd_cross_entropy_split: the
 * cross-entropy of logits split along their last axis ([..., vocab / m],
 * this rank's columns) for targets of the whole vocabulary, per position:
 * log(sum exp(z - max)) - (z - max)[target], the max and the sums taken
 * over every rank's columns. Both with their gradients; the rank's place
 * on the axis is applied when the step runs. mpmd_embed splits its table
 * this way when m > 1 divides the vocabulary. */
MPMD_NODISCARD mpmd_value mpmd_embedding_split(mpmd_graph *g, mpmd_value table, mpmd_value ids,
                                               const char *axis);
MPMD_NODISCARD mpmd_value mpmd_cross_entropy_split(mpmd_graph *g, mpmd_value logits, mpmd_value targets,
                                                   const char *axis);

/* ------------------------------------------------------------------------ */
/* The microbatch loop and pipeline stages                                    */
/* ------------------------------------------------------------------------ */

/* Ops built between loop_begin and loop_end form the loop body: it runs
 * once per microbatch, microbatches 0..n-1 in order. Ops before run once
 * before the loop, ops after once after it (the optimizer). */
void mpmd_loop_begin(mpmd_graph *g, int num_microbatches);
void mpmd_loop_end(mpmd_graph *g);
int mpmd_graph_num_microbatches(const mpmd_graph *g); /* 0 without a loop */

/* Inside the body: microbatch m of a before-loop value x (rows
 * m*B/n .. (m+1)*B/n-1 of axis 0). B must be divisible by n. */
MPMD_NODISCARD mpmd_value mpmd_microbatch(mpmd_graph *g, mpmd_value x);

typedef enum mpmd_reduce_op {
    MPMD_REDUCE_ADD = 0, /* acc = x_0; acc = acc + x_m for m = 1..n-1, elementwise */
    MPMD_REDUCE_MAX,     /* acc = x_0; acc = max(acc, x_m) */
    MPMD_REDUCE_CONCAT   /* x_0 .. x_{n-1} concatenated along axis 0 (not a scalar) */
} mpmd_reduce_op;

/* Reduce a body value over the microbatches; the result is an after-loop
 * value. A parameter gradient from mpmd_grad that sums several uses of the
 * parameter is reduced use by use and the per-use sums are added after the
 * loop, in the order of the uses: that is the order a pipeline's cross-rank
 * all-reduce reproduces, so both give the same bits. */
MPMD_NODISCARD mpmd_value mpmd_loop_reduce(mpmd_graph *g, mpmd_value x, mpmd_reduce_op op);

/* Mark the end of a pipeline stage (JaxPP's pipeline_enter_stage). Returns
 * x unchanged in value; ops after it belong to the next stage. The last
 * stage is closed by a final marker too. The _n form marks several values
 * at once, replacing xs[i] in place. In a graph without mpmd_loop_begin
 * (JaxPP's jit_by_yield) the first marker makes the whole function a
 * loop of one microbatch: the ops made so far become its stage 0, no
 * mpmd_loop_end is needed, and mpmd_keep of a body value keeps its loop
 * result, read through the value's own handle (mpmd_loop_end, then the
 * loop's reductions by hand, for an optimizer after it). */
MPMD_NODISCARD mpmd_value mpmd_enter_stage(mpmd_graph *g, mpmd_value x);
void mpmd_enter_stage_n(mpmd_graph *g, int n, mpmd_value *xs);

/* Balancing stages. mpmd_op_flops estimates an op's floating-point
 * operations (a matrix product 2 K per output element, attention 4 T Dh
 * per output element, half that when causal, other ops one per element
 * read or written); mpmd_graph_flops sums them over the values
 * from..to (creation order: build the model once without markers and take
 * each layer's range). mpmd_balance_stages splits n consecutive pieces of
 * these costs (or measured ones) into S contiguous stages whose largest
 * total is as small as can be, every stage at least one piece: first[s] is
 * stage s's first piece (first[0] = 0); put a marker after the last piece
 * of every stage. */
double mpmd_op_flops(const mpmd_graph *g, mpmd_value v);
double mpmd_graph_flops(const mpmd_graph *g, mpmd_value from, mpmd_value to);
mpmd_status mpmd_balance_stages(const double *costs, int n, int S, int *first, mpmd_error *err);

/* Rematerialisation (JAX's jax.checkpoint): the forward values made
 * between mpmd_remat_begin and mpmd_remat_end in the loop body are not
 * kept for the backward but computed again inside it, from the region's
 * inputs, by mpmd_grad. The recomputation runs in the backward task of the
 * stage (its A part where a schedule splits the backward), so nothing
 * crosses ranks twice, and it gives the same bits: a run with remat equals
 * one without, bit for bit, with fewer activation bytes alive. The policy
 * says what the region keeps anyway:
 *   MPMD_REMAT_SAVE_NOTHING  recompute every value of the region
 *   MPMD_REMAT_SAVE_DOTS     keep the matrix products (mpmd_matmul's and
 *                            mpmd_attention's results), recompute the rest
 *                            (JAX's dots_saveable)
 *   MPMD_REMAT_SAVE_NAMED    keep only the values marked with
 *                            mpmd_remat_save (save_only_these_names)
 * Regions do not nest and must close before mpmd_loop_end. */
typedef enum mpmd_remat_policy {
    MPMD_REMAT_SAVE_NOTHING = 1,
    MPMD_REMAT_SAVE_DOTS = 2,
    MPMD_REMAT_SAVE_NAMED = 3
} mpmd_remat_policy;
void mpmd_remat_begin(mpmd_graph *g, mpmd_remat_policy policy);
void mpmd_remat_end(mpmd_graph *g);
/* Keep x for the backward under MPMD_REMAT_SAVE_NAMED; returns x. */
mpmd_value mpmd_remat_save(mpmd_graph *g, mpmd_value x);

/* ------------------------------------------------------------------------ */
/* Autodiff                                                                  */
/* ------------------------------------------------------------------------ */

/* Reverse mode: append to the graph, in the region of `loss`, the ops that
 * compute d loss / d wrt[i] into grads[i]. loss must be an f32 scalar;
 * wrt are parameters (or any float values the loss depends on). A wrt value
 * the loss does not depend on gets a zero gradient. Each backward op takes
 * the stage of the forward op it differentiates. */
mpmd_status mpmd_grad(mpmd_graph *g, mpmd_value loss, int n, const mpmd_value *wrt, mpmd_value *grads);

/* The end of a training step's loop body in one call, JaxPP's
 * treduce(value_and_grad(loss_fn)): differentiate the microbatch's loss
 * with respect to every trainable parameter (wrt NULL) or the n_wrt given,
 * reduce the loss and each gradient over the microbatches
 * (MPMD_REDUCE_ADD), close the loop and keep the reduced loss, which it
 * returns. The parameters and their reduced gradients go to params and
 * grads (room for cap each; fewer is an error) and their count to *n; an
 * optimizer call follows:
 *
 *     mpmd_value ps[8], gs[8];
 *     int n;
 *     mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 8, ps, gs, &n);
 *     mpmd_adamw(g, n, ps, gs, mpmd_scalar(g, 1e-3f), MPMD_ADAM_DEFAULTS);
 *
 * Errors go to the graph (MPMD_NONE returned). */
MPMD_NODISCARD mpmd_value mpmd_value_and_grad(mpmd_graph *g, mpmd_value loss, int n_wrt,
                                              const mpmd_value *wrt, int cap, mpmd_value *params,
                                              mpmd_value *grads, int *n);

/* ------------------------------------------------------------------------ */
/* State updates, layers and optimizers                                      */
/* ------------------------------------------------------------------------ */

/* At this point of the step, store `value` into the variable or parameter
 * `var` (same type). Returns a token. */
mpmd_value mpmd_assign(mpmd_graph *g, mpmd_value var, mpmd_value value);

/* Keep a value readable after a run (mpmd_exec_read). Parameters and
 * variables are always readable. */
void mpmd_keep(mpmd_graph *g, mpmd_value v);

/* Dense layer "name": x[..., in] @ kernel[in, out] (+ bias[out]);
 * parameters name/kernel (LeCun normal) and name/bias (zeros). */
MPMD_NODISCARD mpmd_value mpmd_dense(mpmd_graph *g, const char *name, mpmd_value x, int64_t out,
                                     int use_bias);
/* LayerNorm layer "name" over the last axis: parameters name/scale (ones)
 * and name/bias (zeros). */
MPMD_NODISCARD mpmd_value mpmd_layer_norm_layer(mpmd_graph *g, const char *name, mpmd_value x, float eps);
/* Embedding layer "name": parameter name/embedding [vocab, width], normal(0.02). */
MPMD_NODISCARD mpmd_value mpmd_embed(mpmd_graph *g, const char *name, mpmd_value ids, int64_t vocab,
                                     int64_t width);
/* MLP "name": dense(hidden) -> gelu -> dense(out). */
MPMD_NODISCARD mpmd_value mpmd_mlp(mpmd_graph *g, const char *name, mpmd_value x, int64_t hidden,
                                   int64_t out);
/* Self-attention "name" on x [B, T, C]: one dense to q, k, v (name/qkv),
 * mpmd_attention over `heads` heads, dense back to C (name/out). Causal,
 * after mpmd_set_decode it decodes against a key/value cache (below). */
MPMD_NODISCARD mpmd_value mpmd_self_attention(mpmd_graph *g, const char *name, mpmd_value x, int heads,
                                              int causal);
/* The JaxPP tutorial's Block "name" (post-LN): x = LN(x + attn(x));
 * x = LN(x + Dense(Dense(x, 4C) -> gelu, C)). */
MPMD_NODISCARD mpmd_value mpmd_transformer_block(mpmd_graph *g, const char *name, mpmd_value x, int heads,
                                                 int causal);
/* A GPT-2 block "name" (pre-LN, causal): x = x + attn(LN(x)); x = x + mlp(LN(x)). */
MPMD_NODISCARD mpmd_value mpmd_gpt_block(mpmd_graph *g, const char *name, mpmd_value x, int heads);
/* RMSNorm layer "name" over the last axis: parameter name/scale (ones). */
MPMD_NODISCARD mpmd_value mpmd_rms_norm_layer(mpmd_graph *g, const char *name, mpmd_value x, float eps);
/* SwiGLU MLP "name" (LLaMA's): down(silu(gate(x)) * up(x)), dense layers
 * name/{gate,up,down} without bias, gate and up of width `hidden`. */
MPMD_NODISCARD mpmd_value mpmd_swiglu_mlp(mpmd_graph *g, const char *name, mpmd_value x, int64_t hidden,
                                          int64_t out);
/* Causal self-attention "name" with rotary embeddings on x [B, T, C]:
 * name/{q,k,v,o} without bias; kv_heads key/value heads (grouped-query
 * attention when fewer than `heads`, which they must divide; each is shared
 * by heads / kv_heads query heads). Llama 3.1's frequencies with
 * mpmd_set_rope_scaling; after mpmd_set_decode it decodes against a
 * key/value cache, turning q and k by the run-time positions. */
MPMD_NODISCARD mpmd_value mpmd_rope_attention(mpmd_graph *g, const char *name, mpmd_value x, int heads,
                                              int kv_heads, float rope_base);
/* A LLaMA block "name" (pre-norm, causal): x = x + attn(RMS(x)) with rotary
 * attention; x = x + swiglu(RMS(x)) of width `hidden`. */
MPMD_NODISCARD mpmd_value mpmd_llama_block(mpmd_graph *g, const char *name, mpmd_value x, int heads,
                                           int kv_heads, int64_t hidden, float rope_base, float eps);
/* Dropout in the blocks above (transformer, GPT-2, LLaMA) built after this
 * call: each residual branch's output (attention, MLP) goes through
 * mpmd_dropout(rate, key) before it is added. rate 0 (the default) turns
 * it off; key as mpmd_dropout's. Blocks that decode (below) drop nothing. */
mpmd_status mpmd_set_layer_dropout(mpmd_graph *g, float rate, mpmd_value key);
/* Llama 3.1's rotary frequencies (mpmd_rope_scaling) in the rotary layers
 * built after this call (mpmd_rope_attention, mpmd_llama_block); NULL or a
 * factor of 0 (the default) for the plain ones. A scaling out of range is
 * an error on the graph, named with its numbers. */
mpmd_status mpmd_set_rope_scaling(mpmd_graph *g, const mpmd_rope_scaling *scaling);

/* ---- generation: decoding with a key/value cache ----
 * mpmd_set_decode turns the causal attention layers built after it
 * (mpmd_self_attention with causal set, mpmd_rope_attention, and the
 * blocks made of them: mpmd_gpt_block, mpmd_llama_block, a causal
 * mpmd_transformer_block) into their decoding form, flax's decode=True:
 * their input x [b, t, C] holds t new positions of each of b sequences,
 * at the places `positions` says, and the positions before them come from
 * a cache the layer keeps. positions is an i32 value [B, t] made before
 * the loop (an input, set every run): in a graph without a loop B = b; in
 * the loop body B = b x microbatches and each layer reads its microbatch's
 * rows. Each layer keeps the keys and values of every position run so far
 * in two variables named after it, "<layer>/cache/k" and
 * "<layer>/cache/v" ("block_3/attn/cache/k"), [B, length, key/value heads
 * (this model rank's with tensor parallelism), head size] in x's dtype,
 * zeros at first. A run writes its keys and values at their positions (the
 * caches are assigned with mpmd_assign after the loop, on the ranks of the
 * layer's stage, or at once without a loop), and each new position p
 * attends to the cached positions 0..p; rotary layers turn q and k by the
 * positions (mpmd_rope_at). So feeding a sequence's positions 0, 1, 2, ...
 * in turn, one or a few per run, gives what its full forward pass gives
 * at each position (to float rounding: the sums run in other orders).
 * A position outside [0, length) is a run-time error naming it; the
 * positions of one run must differ within a sequence. Non-causal attention
 * cannot decode (an error naming the layer), the blocks' dropout is off,
 * and a graph with stage markers needs mpmd_loop_begin before its layers.
 * positions MPMD_NONE turns decoding off for the layers built after (length
 * ignored). Errors (positions not an i32 [B, t] before the loop, length
 * outside [1, 2^24]) go to the graph and are returned. */
mpmd_status mpmd_set_decode(mpmd_graph *g, mpmd_value positions, int64_t length);

/* Optimizers, built after the loop. lr is an f32 scalar value (a constant,
 * an input, or computed), so a learning-rate schedule needs no rebuild. */
mpmd_status mpmd_sgd(mpmd_graph *g, int n, const mpmd_value *params, const mpmd_value *grads, mpmd_value lr);

/* Adam/AdamW with optax's semantics (optax.adamw): t = t + 1;
 * mu = b1 mu + (1-b1) g; nu = b2 nu + (1-b2) g^2;
 * p = p - lr (mu/(1-b1^t) / (sqrt(nu/(1-b2^t)) + eps) + wd p).
 * State variables: "optim/step", "optim/mu/<param>", "optim/nu/<param>". */
typedef struct mpmd_adam_opts {
    float b1, b2, eps, weight_decay;
    /* Which of the n parameters weight decay applies to (optax's mask):
     * NULL every one, else those with decay[i] != 0 (GPT-2 practice decays
     * the matrices and embeddings, not the biases and norm scales). Read
     * during the call only. */
    const unsigned char *decay;
} mpmd_adam_opts;
#define MPMD_ADAM_DEFAULTS ((mpmd_adam_opts){0.9f, 0.999f, 1e-8f, 0.0f, NULL})
mpmd_status mpmd_adamw(mpmd_graph *g, int n, const mpmd_value *params, const mpmd_value *grads, mpmd_value lr,
                       mpmd_adam_opts opts);

/* The global L2 norm of n f32 values outside the loop body (the loop's
 * gradients, say): sqrt of the sum of the squares of all their elements, an
 * f32 scalar (optax.global_norm). The sum is exact and rounded once, so
 * the norm is the same bits in every layout: pipelined or not, data
 * parallel, FSDP-sharded or split over the model axis (each element counted
 * once where it lives, the parts added over the whole mesh). Errors go to
 * the graph (MPMD_NONE returned). */
MPMD_NODISCARD mpmd_value mpmd_global_norm(mpmd_graph *g, int n, const mpmd_value *xs);
/* Clip gradients by their global norm, as optax.clip_by_global_norm and
 * PyTorch's clip_grad_norm_ (in f32): factor = min(max_norm / (norm +
 * 1e-6), 1) and grads[i] = grads[i] * factor, replaced in place; returns
 * the norm before clipping. Between mpmd_value_and_grad and the optimizer:
 *
 *     mpmd_clip_by_global_norm(g, n, gs, 1.0f);
 *     mpmd_adamw(g, n, ps, gs, lr, MPMD_ADAM_DEFAULTS);
 *
 * FSDP keeps clipped parameters sharded (each replica scales its shard). */
mpmd_value mpmd_clip_by_global_norm(mpmd_graph *g, int n, mpmd_value *grads, float max_norm);

/* ------------------------------------------------------------------------ */
/* The one-rank executor                                                     */
/* ------------------------------------------------------------------------ */

typedef struct mpmd_exec_opts {
    int threads;   /* kernel threads of this executor; 0: all cores */
    uint64_t seed; /* initialiser seed for parameters and variables */
    /* Where buffers live and kernels run: "cpu" (NULL or "" means "cpu")
     * or "cuda" in a build with CUDA (MPMD_WITH_CUDA). An unknown name, or
     * a backend that cannot run here (no GPU), is an error saying which. */
    const char *backend;
} mpmd_exec_opts;
#define MPMD_EXEC_DEFAULTS ((mpmd_exec_opts){0, 0, NULL})

typedef struct mpmd_exec mpmd_exec;

/* Plan memory and initialise parameters and variables. The graph must be
 * error-free and must outlive the executor. NULL on error (err filled). */
mpmd_exec *mpmd_exec_new(const mpmd_graph *g, const mpmd_exec_opts *opts, mpmd_error *err);
void mpmd_exec_free(mpmd_exec *ex);

/* Copy the data of an input (bytes must equal its size). */
mpmd_status mpmd_exec_set_input(mpmd_exec *ex, mpmd_value input, const void *data, size_t bytes);
/* Run one step: before-loop ops, the body per microbatch, after-loop ops. */
mpmd_status mpmd_exec_run(mpmd_exec *ex);
/* Copy out a kept value, a parameter or a variable after a run. */
mpmd_status mpmd_exec_read(mpmd_exec *ex, mpmd_value v, void *dst, size_t bytes);
/* Copy new contents into a parameter or variable (bytes must equal its size). */
mpmd_status mpmd_exec_write(mpmd_exec *ex, mpmd_value v, const void *src, size_t bytes);
/* Direct access to a parameter's or variable's storage: NULL if v is not
 * one, or if the backend's buffers are not host memory (CPU only; use
 * mpmd_exec_read and mpmd_exec_write elsewhere). */
void *mpmd_exec_var_data(mpmd_exec *ex, mpmd_value v);
/* The name of the backend the executor runs on ("cpu", "cuda"). */
const char *mpmd_exec_backend(const mpmd_exec *ex);
/* The backends this build has, as "cpu, cuda"; and 0 if backend `name`
 * can run here, else non-zero with the reason in why. */
const char *mpmd_backends(void);
int mpmd_backend_check(const char *name, char *why, size_t len);
/* What backend `name` runs best, for a program's defaults: the compute
 * dtype (MPMD_BF16 on "cuda", whose tensor cores multiply bf16; MPMD_F32
 * on "cpu", which widens 16-bit operands to f32 around its kernels) and
 * whether mpmd_attention's fused op (1) or the composed ops (0) are its
 * faster attention. NULL or "" is "cpu"; MPMD_ERR_INVALID for a name this
 * build lacks or a NULL out. */
typedef struct mpmd_backend_defaults {
    mpmd_dtype compute;
    int fused_attention;
} mpmd_backend_defaults;
mpmd_status mpmd_backend_defaults_of(const char *name, mpmd_backend_defaults *out);
/* The BLAS behind the CPU backend: OpenBLAS's kernel set ("Haswell",
 * "SkylakeX", ...; OPENBLAS_CORETYPE chooses another). And NULL, or a
 * warning to print when that set is a generic one on a CPU with AVX2 or
 * AVX-512 (OpenBLAS did not recognise the CPU): it names OPENBLAS_CORETYPE
 * and a value for it. */
const char *mpmd_blas_core(void);
const char *mpmd_blas_warning(void);
/* The last error's message. */
const char *mpmd_exec_error(const mpmd_exec *ex);
/* The graph the executor runs. */
const mpmd_graph *mpmd_exec_graph(const mpmd_exec *ex);
/* Bytes of the planned arena (for inspection) and a printout of the memory
 * plan: every buffer with its offset and lifetime (mpmd_step_print_memory). */
size_t mpmd_exec_arena_bytes(const mpmd_exec *ex);
void mpmd_exec_print_plan(const mpmd_exec *ex, FILE *f);

/* SHA-256 over every parameter's bytes, parameters in name order, as 64
 * lowercase hex digits plus a terminator. */
void mpmd_exec_params_sha256(mpmd_exec *ex, char hex[65]);

/* Time every op of the following runs (on the CPU each op is timed on the
 * host clock; on a GPU between events queued around it, so the device time
 * without the launch gaps); 0 turns it off and forgets the times. Profiled
 * runs launch kernel by kernel (no CUDA graphs). */
mpmd_status mpmd_exec_set_profiling(mpmd_exec *ex, int on);
/* The profiled runs' op times summed by op name (matrix products by shape:
 * "matmul MxNxK NT"), largest first: calls, ms per run and share of the
 * total. */
void mpmd_exec_print_profile(const mpmd_exec *ex, FILE *f);

/* ------------------------------------------------------------------------ */
/* Pipelined steps: mpmd_jit_with_loop and the in-process runtime            */
/* ------------------------------------------------------------------------ */

/* A training step compiled for a pipeline: one program per rank.
 *
 * Threads: a step is used by one thread at a time (its own rank threads
 * are the library's business). While a call that touches its state runs
 * (mpmd_step_run, _set_input, _read, _write, _gather, the saves and loads
 * of mpmd_checkpoint.h), another thread's such call on the same step fails
 * at once with MPMD_ERR_INVALID, and mpmd_step_error on that thread says
 * the step is in use; freeing a step another thread uses is undefined.
 * Different steps, executors and graphs may be used from different threads
 * at once; a graph is built by one thread at a time and must not change
 * while a step compiled from it is made or used. */
typedef struct mpmd_step mpmd_step;

/* Where the ranks run: threads of this process, or one MPI process per
 * rank (and replica), started by mpirun. */
typedef enum mpmd_runtime_kind { MPMD_RUNTIME_LOCAL = 0, MPMD_RUNTIME_MPI = 1 } mpmd_runtime_kind;

/* When FSDP gathers the sharded parameters (mpmd_step_opts.fsdp_gather). */
typedef enum mpmd_fsdp_gather { MPMD_GATHER_PER_TASK = 0, MPMD_GATHER_PER_STEP = 1 } mpmd_fsdp_gather;

typedef struct mpmd_step_opts {
    /* Kernel threads of each rank; 0: the cores this process may use (its
     * affinity mask, its cgroup's CPU quota; under MPI shared with the
     * job's other processes on the machine) divided among its ranks, so
     * threads never outnumber cores. Each rank's threads beyond its own are
     * workers that watch for work briefly after each kernel, then sleep,
     * so an idle rank leaves its cores to busy ones (how long they watch:
     * MPMD_POOL_SPIN_US, OMP_WAIT_POLICY; docs/guide.md, "Threads"). */
    int threads_per_rank;
    uint64_t seed; /* initialiser seed (as mpmd_exec_opts.seed) */
    mpmd_runtime_kind runtime;
    /* The mesh's data axis: replicas of every pipeline rank (0 or 1: none).
     * Each replica runs the same programs on its share of the batch; after
     * the loop every loop result (ADD: the mean over replicas, MAX: the max;
     * CONCAT stays per replica) is combined across the replicas, in replica
     * order, so all replicas apply identical updates. The graph describes one
     * replica: its inputs are one replica's share. */
    int data_parallel;
    /* The backend every rank runs on (as mpmd_exec_opts.backend). Each
     * in-process rank opens its own instance: on "cuda", GPU rank % devices
     * with a stream of its own. */
    const char *backend;
    /* The watchdog: seconds a rank may wait for a peer (a message, the
     * replicas' combine) before the step fails with a message naming the
     * rank waited on, what was awaited and for how long. 0: the default,
     * the longer of 300 s and 20 times the slowest step so far; negative:
     * wait forever. A rank stuck in a kernel is found the same way (its
     * peers time out); the step refuses to run again until that rank has
     * stopped, and mpmd_step_free waits for it (30 s at least, then leaves
     * the step's memory to it). */
    double step_timeout;
    /* FSDP (ZeRO-3) over the data axis: each replica holds 1/data_parallel
     * of every parameter that an optimizer updates (mpmd_sgd, mpmd_adamw),
     * of its optimizer state and of its gradient. The tasks read the
     * parameters gathered whole from every replica's shard (fsdp_gather
     * says when); a parameter the layers cast to the compute dtype before
     * the loop (bf16, f16) is cast shard by shard and gathered in that
     * dtype, half f32's bytes. The loop's gradients are reduce-scattered
     * (each replica combines its part, in replica order, in f32) and each
     * replica updates its own part. Parameters and the loss are bitwise
     * those of plain data parallelism with the same layout. Values are
     * read, written, hashed and saved whole (mpmd_step_read assembles the
     * shards; under MPI use mpmd_step_gather). Needs data_parallel >= 2.
     * A parameter whose value, state or gradient is read other than by the
     * body's ops, its cast for them, its update, its gradient's sums and
     * mpmd_clip_by_global_norm (say a gradient norm written by hand) stays
     * whole on every replica: the run summary names each such parameter
     * and why, and a step with nothing to shard is an error. */
    int fsdp;
    /* When FSDP gathers: MPMD_GATHER_PER_TASK (0, the default) before every
     * task that reads sharded parameters, dropped after the task's last
     * read: the least memory, each parameter gathered again by every task
     * (twice a microbatch: forward and backward). MPMD_GATHER_PER_STEP once
     * before the rank's first task, held through the loop: one gather per
     * step (JaxPP's choice), holding a whole compute copy of the rank's
     * sharded parameters. */
    mpmd_fsdp_gather fsdp_gather;
} mpmd_step_opts;
#define MPMD_STEP_DEFAULTS ((mpmd_step_opts){0, 0, MPMD_RUNTIME_LOCAL, 1, NULL, 0.0, 0, MPMD_GATHER_PER_TASK})

/* The built-in schedule `kind` for graph g, its stage count (the loop
 * body's stage markers) and microbatch count taken from the graph;
 * num_ranks 0: the kind's default (S, or S / 2 for DualPipeV). */
mpmd_status mpmd_schedule_for_graph(const mpmd_graph *g, mpmd_schedule_kind kind, int num_ranks,
                                    int fuse_steady_state, mpmd_schedule **out, mpmd_error *err);

/* JaxPP's mpmd_jit_with_loop(...).compile(): split the step's graph at its
 * stage markers into forward and backward tasks per stage (A and W where the
 * schedule splits the backward), place parameters and the code before and
 * after the loop on the ranks, lower the schedule into one program per
 * rank, checked by simulation before anything runs, and plan each rank's
 * intermediate values in one arena (its parameters, optimizer state,
 * inputs and the kernels' workspace are allocated beside it). The graph must have one microbatch loop with
 * as many stage markers per microbatch as the schedule has stages, and as
 * many microbatches as the schedule. The step copies what it needs of the
 * schedule; the graph must outlive it. On error NULL, with err saying what
 * and where.
 *
 * sched NULL: the unpipelined loop on one rank (any graph, with or without
 * a loop or stage markers): the before-loop ops, the whole body once per
 * microbatch in order, the after-loop ops; the reference every schedule
 * matches bit for bit, with data_parallel and the MPI runtime as for any
 * step (mpmd_exec is this step behind the executor's calls). */
mpmd_step *mpmd_jit_with_loop(const mpmd_graph *g, const mpmd_schedule *sched, const mpmd_step_opts *opts,
                              mpmd_error *err);
void mpmd_step_free(mpmd_step *st);

int mpmd_step_num_ranks(const mpmd_step *st);
/* Copy an input; every rank reads its microbatches from it. With bytes the
 * input's size, every replica this process runs gets the same data; with
 * bytes = replicas x size (the global batch), replica d gets the d-th
 * share along axis 0. Under MPI a process passes its own share (or the
 * global batch, of which it keeps its share); a process whose rank does not
 * read the input keeps nothing (JaxPP's partially addressable arrays). */
mpmd_status mpmd_step_set_input(mpmd_step *st, mpmd_value input, const void *data, size_t bytes);
/* Run one step on one thread per rank. */
mpmd_status mpmd_step_run(mpmd_step *st);
/* Copy out a parameter, a variable or a kept value from a rank holding it. */
mpmd_status mpmd_step_read(mpmd_step *st, mpmd_value v, void *dst, size_t bytes);
/* The ranks holding a value (JaxPP's MpmdArray.mpmd_idxs): writes up to cap
 * rank numbers to ranks and returns how many there are. */
int mpmd_step_where(const mpmd_step *st, mpmd_value v, int *ranks, int cap);
/* A rank's storage of a parameter or variable (NULL if it holds none, if
 * the backend's buffers are not host memory: CPU only, or if the rank holds
 * a part of it only: FSDP's shard, a parameter split over the model axis;
 * with tensor parallelism, model rank 0's copy). */
void *mpmd_step_var_data(mpmd_step *st, int rank, mpmd_value v);
const char *mpmd_step_error(const mpmd_step *st);
/* As mpmd_exec_params_sha256: equal hashes mean bitwise equal parameters.
 * Replica 0's parameters; under MPI a collective call (every process calls
 * it and gets the hash). */
void mpmd_step_params_sha256(mpmd_step *st, char hex[65]);
/* The same for the parameters of one replica (collective under MPI). */
void mpmd_step_replica_params_sha256(mpmd_step *st, int replica, char hex[65]);
/* Under MPI: copy a kept value, parameter or variable to every process from
 * the process holding it (replica 0) — a collective call. In-process, the
 * same as mpmd_step_read. */
mpmd_status mpmd_step_gather(mpmd_step *st, mpmd_value v, void *dst, size_t bytes);

/* ---- MPI ----
 * Programs that may run under mpirun call mpmd_mpi_init first and
 * mpmd_mpi_finalize last. Every process builds the same graph and compiles
 * the same step with runtime MPMD_RUNTIME_MPI; process w runs pipeline rank
 * w % D of replica w / D, and the job must have D x data_parallel
 * processes. Without MPI support in this build, mpmd_mpi_available is 0 and
 * the functions fail with a message saying so. */
int mpmd_mpi_available(void);
mpmd_status mpmd_mpi_init(int *argc, char ***argv, mpmd_error *err);
void mpmd_mpi_finalize(void);
int mpmd_mpi_world_rank(void); /* 0 without MPI */
int mpmd_mpi_world_size(void); /* 1 without MPI */
/* End the whole job now with this exit code (every process): what a
 * program does when a rank fails, so that no process waits forever. */
void mpmd_mpi_abort(int code);
/* Agree on flags across the job: every process calls it with the same n,
 * and on return flags[i] is 1 on every process when it was non-zero on
 * any, else 0 (an all-reduce with logical or). So the processes of one job
 * decide together, e.g. to stop after the same step when a signal reached
 * only some of them. Collective like a step's run: call it from the thread
 * that runs the steps. Without MPI, or before mpmd_mpi_init, the job is
 * this process: each flag becomes 1 or 0 as it is. */
mpmd_status mpmd_mpi_any(int *flags, int n, mpmd_error *err);
/* The per-rank programs as text (JaxPP's per-rank jaxprs): tasks with their
 * microbatch, sends and receives with peers, frees. */
void mpmd_step_print(const mpmd_step *st, FILE *f);
/* Each rank's task list, one line per rank, in the schedule's text form. */
void mpmd_step_print_tasks(const mpmd_step *st, FILE *f);
/* Planned peak bytes of body values alive at once on a rank, counted as
 * the runtime counts them (mpmd_rank_stats.peak_bytes: the same bytes). */
int64_t mpmd_step_peak_bytes(const mpmd_step *st, int rank);
/* The bytes of a rank's arena: every buffer its program writes (values of
 * the body and around it, receives, loop results) at offsets fixed by the
 * plan; parameters, variables, inputs and the kernels' workspace are
 * outside it. And the plan itself as text: each buffer with its value,
 * microbatch, offset, size and the positions it lives between (rank -1:
 * every rank). */
size_t mpmd_step_arena_bytes(const mpmd_step *st, int rank);
void mpmd_step_print_memory(const mpmd_step *st, int rank, FILE *f);

/* A rank's memory: what the plan says it allocates from its backend (each
 * allocation rounded as the backend rounds it), what fills its arena at the
 * fullest point, and what the backend counted. No buffer is allocated while a
 * step runs, so measured equals planned once the step is set up. */
typedef struct mpmd_memory_stats {
    int64_t parameters;      /* trainable parameters */
    int64_t optimizer_state; /* other variables (optimizer moments, counters) and constants */
    int64_t inputs;          /* the rank's own copies of inputs (GPU); host inputs are shared */
    int64_t arena;           /* every buffer the program writes */
    int64_t workspace;       /* the kernels' scratch and f32 copies of widened 16-bit operands */
    int64_t planned;         /* the sum of the five above */
    /* the arena at its fullest: the most bytes alive at once, and what they
     * are (gathered: FSDP's parameters gathered whole for a task) */
    int64_t arena_live, activations, received, loop_results, other;
    /* the most bytes of activations kept past their task at once (for the
     * backward, or to send): what rematerialisation trades for time */
    int64_t kept;
    /* counted by the rank's backend: the most bytes of buffers it held at
     * once, and what it keeps for itself (the cuBLAS workspace); -1 when
     * this process does not run the rank (MPI) */
    int64_t measured, backend_own;
    int64_t gathered; /* (of arena_live) FSDP's gathered parameters */
} mpmd_memory_stats;
mpmd_status mpmd_step_memory(const mpmd_step *st, int rank, mpmd_memory_stats *out);

/* Before compiling a step for real: what graph g under schedule s (NULL:
 * the loop) with opts would allocate on each rank, from the same plan
 * mpmd_jit_with_loop would make (nothing is allocated; the backend need not
 * be able to run here), and how long a step would take. The time comes
 * from `profiled`, a step of the same graph (any schedule, or the loop)
 * after at least one run with mpmd_step_set_profiling on: each task costs
 * what its ops took per microbatch there, each rank's before- and
 * after-loop ops add what they took, and the schedule is simulated with
 * these times (transfers free). profiled NULL: memory only (step_ms NAN).
 * Measured op times carry the profiled run's thread count: profile with
 * the threads per rank the layout will have. */
typedef struct mpmd_prediction {
    double step_ms; /* NAN without a profiled step */
    double bubble;  /* of the simulated schedule (0 for the loop) */
    int num_ranks;
    mpmd_memory_stats *ranks; /* [num_ranks]: the planned fields (measured -1) */
    int64_t peak;             /* the largest planned total of a rank */
    /* FSDP: the most bytes a replica of one rank takes from the others in
     * gathers per step (the planned GATHERs: (R - 1) shards of each
     * value), 0 without FSDP; the transfers the time above leaves out */
    int64_t gathered_bytes;
} mpmd_prediction;
mpmd_status mpmd_predict(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                         const mpmd_step *profiled, mpmd_prediction *out, mpmd_error *err);
void mpmd_prediction_free(mpmd_prediction *p);
/* The backend the ranks run on ("cpu", "cuda"). */
const char *mpmd_step_backend(const mpmd_step *st);
/* Copy new contents into a parameter or variable: every copy of it this
 * process holds (each rank, each replica), so copies stay equal. */
mpmd_status mpmd_step_write(mpmd_step *st, mpmd_value v, const void *src, size_t bytes);
/* Time every op of the following runs (as mpmd_exec_set_profiling); 0
 * turns it off and forgets the times. The profile sums the times by op name
 * (matrix products by shape) over the ranks of this process, largest first:
 * calls, ms per run and share of the total. */
mpmd_status mpmd_step_set_profiling(mpmd_step *st, int on);
void mpmd_step_print_profile(const mpmd_step *st, FILE *f);

/* ---- measured runs ---- */

/* Record every instruction of every rank (start, end, time blocked in
 * receives) in the following runs; costs two clock reads per instruction. */
void mpmd_step_set_recording(mpmd_step *st, int on);
/* The last recorded run's tasks as a timeline, drawn with
 * mpmd_timeline_write_svg like a simulated schedule. Its unit follows the
 * step's length (us below 1 ms, ms below 1 s, s below 2 minutes, min), so
 * that the drawing's scale fits the step; set tl->width for a fixed width.
 * Free with mpmd_timeline_free. MPMD_ERR_INVALID if no recorded run. */
mpmd_status mpmd_step_timeline(const mpmd_step *st, mpmd_timeline **out, mpmd_error *err);
/* The last recorded run as Chrome trace-event JSON (opens in Perfetto): one
 * process track per rank, an event per task, send, receive (with its wait
 * nested inside), before- and after-loop op, and collective over the data
 * axis (data parallelism's all-reduces, FSDP's gathers and
 * reduce-scatters). */
mpmd_status mpmd_step_write_trace(const mpmd_step *st, FILE *f, mpmd_error *err);

typedef struct mpmd_rank_stats {
    int tasks;
    double busy_ms;             /* running tasks and before/after-loop ops */
    double wait_ms;             /* blocked in receives */
    double wake_ms;             /* of wait_ms, from the value's send to the rank running again: its
                                 * wake-up (in-process ranks; 0 under MPI, whose clocks differ) */
    double bubble;              /* 1 - busy / step time */
    int64_t peak_bytes;         /* most bytes of body values held at once, measured */
    int64_t planned_peak_bytes; /* the same, predicted from the program */
    int64_t memory_planned;     /* every byte the rank allocates, planned (mpmd_step_memory) */
    int64_t memory_measured;    /* the most its backend held, counted there (-1: not this process) */
    int64_t sent_bytes;         /* bytes this rank sent to other pipeline ranks (each value in its dtype) */
    /* FSDP: bytes replica 0 of this rank took from its other replicas
     * (gathered parameters, reduce-scattered gradients), measured, and the
     * textbook volume for the same tasks: (R - 1) / R of each gathered
     * parameter per gather and of each gradient once; 0 without FSDP */
    int64_t collective_bytes, collective_expected;
    /* of collective_bytes, those of the gathers (each parameter in the
     * dtype the tasks read it in: a cast parameter's 16-bit copy) */
    int64_t gathered_bytes;
} mpmd_rank_stats;

typedef struct mpmd_step_stats {
    int num_ranks;
    double step_ms;          /* wall time of the run */
    double bubble;           /* 1 - sum(busy) / (ranks * step time) */
    double simulated_bubble; /* the schedule simulated with each stage's own measured F, B, A, W times */
    double simulated_ms;     /* and its makespan, in ms */
    /* Each stage's measured time per microbatch (its tasks' mean times
     * added): the slowest stage, its time, and imbalance = slowest / mean
     * (1: even). */
    int slowest_stage;
    double slowest_stage_ms, imbalance;
    double transfer_ms;     /* time in sends and receives, waiting left out, summed over ranks */
    double analytic_bubble; /* the schedule's textbook bubble, NAN if none */
    char analytic_formula[128];
    int threads_per_rank;     /* kernel threads each rank ran on (the CPU backend's) */
    char threads_reason[192]; /* why that many: as asked, or the cores this process may use per rank */
    mpmd_rank_stats *ranks;   /* [num_ranks], owned: mpmd_step_stats_free */
} mpmd_step_stats;

/* The summary of the last recorded run. */
mpmd_status mpmd_step_summary(const mpmd_step *st, mpmd_step_stats *out, mpmd_error *err);
void mpmd_step_stats_free(mpmd_step_stats *s);
/* The summary as a table: per rank tasks, busy and wait time, bubble, peak
 * activation bytes measured and planned, memory planned and measured;
 * measured, simulated and analytic bubble of the whole step; the kernel
 * threads per rank and why that many; the slowest
 * stage and the imbalance; the time in transfers. */
mpmd_status mpmd_step_print_summary(const mpmd_step *st, FILE *f, mpmd_error *err);

/* SHA-256 of a byte string (used for params_sha256; exposed for tools). */
void mpmd_sha256(const void *data, size_t len, uint8_t out[32]);

/* ---- files written whole or not at all ----
 * What checkpoints do, for a program's own outputs (gpt's --trace and
 * --timeline, the mpmd tool's -o): mpmd_file_create opens a new temporary
 * file beside `path` under a name no other writer uses (created
 * exclusively, with random digits: two threads or processes writing one
 * path never share it); write to mpmd_file_stream(file); mpmd_file_commit
 * checks every write, flushes the file to disk, renames it over `path` and
 * syncs the directory, or on any failure (a full disk) removes it, leaves
 * `path` as it was and returns MPMD_ERR_IO naming the path and the cause.
 * mpmd_file_discard drops the temporary file instead. Both free `file`.
 * A symbolic link to a file keeps the link and replaces the file; a path
 * that is a device or a pipe (/dev/stdout) is written in place, since a
 * rename cannot replace it. */
typedef struct mpmd_file mpmd_file;
mpmd_status mpmd_file_create(const char *path, mpmd_file **out, mpmd_error *err);
FILE *mpmd_file_stream(mpmd_file *file);
mpmd_status mpmd_file_commit(mpmd_file *file, mpmd_error *err);
void mpmd_file_discard(mpmd_file *file);

/* ------------------------------------------------------------------------ */
/* Generation                                                                */
/* ------------------------------------------------------------------------ */

/* Text out of a trained model: a decode step (a graph built with
 * mpmd_set_decode, compiled like any step: the loop, a pipeline whose
 * microbatches are groups of sequences in flight, model ranks, MPI) run
 * one position at a time by mpmd_generate, each next token drawn by
 * mpmd_sample_token. A LLaMA decoder:
 *
 *     mpmd_value tok = mpmd_input(g, "tokens", MPMD_I32, MPMD_SHAPE(B, 1));
 *     mpmd_value pos = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(B, 1));
 *     mpmd_set_decode(g, pos, T);                  // caches of T positions
 *     mpmd_loop_begin(g, M);                       // M groups of sequences
 *     mpmd_value x = mpmd_embed(g, "wte", mpmd_microbatch(g, tok), V, C);
 *     for (...) x = mpmd_llama_block(g, name, x, H, KV, F, 10000.0f, 1e-5f);
 *     x = mpmd_rms_norm_layer(g, "norm_f", x, 1e-5f);
 *     mpmd_value l = mpmd_reshape(g, mpmd_dense(g, "lm_head", x, V, 0), MPMD_SHAPE(B / M, V));
 *     mpmd_decoder d = {tok, pos, mpmd_loop_reduce(g, l, MPMD_REDUCE_CONCAT), T};
 *     mpmd_loop_end(g);
 *     mpmd_keep(g, d.logits);
 *     ... compile, load the weights (mpmd_step_load_params), then
 *     mpmd_generate(st, &d, prompts, lens, &opts, out, out_lens);
 */

/* How a token is drawn from a row of logits. */
typedef struct mpmd_sampling {
    float temperature; /* 0: greedy (the first largest logit); else softmax(logits / temperature) */
    int top_k;         /* draw among the k largest logits (all those equal to the k-th kept); 0: all */
    uint64_t seed;     /* a draw is a pure function of (seed, sequence, position) */
} mpmd_sampling;
#define MPMD_GREEDY ((mpmd_sampling){0.0f, 0, 0})

/* The token drawn from logits [vocab] as sequence `sequence`'s token at
 * `position` (s NULL: greedy). Greedy takes the first largest logit.
 * Otherwise, with m the largest logit and F the k-th largest (-inf without
 * top-k), every token with logit >= F weighs exp((logit - m) / temperature)
 * (in double), and a uniform number u in [0, 1) drawn from (seed, sequence,
 * position) by splitmix64 picks the first token whose running sum of
 * weights passes u times their total: the same token for the same inputs
 * on any machine, layout or thread. Returns the token, or -1 when logits is
 * NULL, vocab is outside [1, 2^31) or the top-k scratch cannot be had. */
int32_t mpmd_sample_token(const float *logits, int64_t vocab, const mpmd_sampling *s, int64_t sequence,
                          int64_t position);

/* A decode step's values, as mpmd_generate feeds and reads them. */
typedef struct mpmd_decoder {
    mpmd_value tokens;    /* i32 input [B, 1]: each sequence's token at the position run */
    mpmd_value positions; /* i32 input [B, 1]: that position (mpmd_set_decode's positions) */
    mpmd_value logits;    /* f32 kept value [B, V]: each sequence's logits for the position after */
    int64_t length;       /* mpmd_set_decode's length: positions 0 .. length - 1 */
} mpmd_decoder;

/* What to draw and when to stop. on_token (NULL: none) is called with each
 * token drawn, sequence by sequence at each position, in order: return 0 to
 * go on, anything else to end the generation after this position
 * (mpmd_generate returns MPMD_OK). */
typedef struct mpmd_generate_opts {
    mpmd_sampling sampling;
    int64_t max_new; /* tokens drawn after each prompt, at most (fewer when the caches fill) */
    int32_t eos;     /* a sequence ends once it draws this token (kept as its last); -1: none */
    int (*on_token)(void *user, int64_t sequence, int64_t position, int32_t token);
    void *user;
} mpmd_generate_opts;
#define MPMD_GENERATE_DEFAULTS ((mpmd_generate_opts){MPMD_GREEDY, 16, -1, NULL, NULL})

/* Generate after B prompts (B the decoder's sequences; prompts[b] holds
 * lens[b] >= 1 token ids of the vocabulary, at most d->length). Every
 * sequence runs in lockstep, one position per run of st: position p gets
 * its prompt's token while the prompt lasts, then the token drawn from the
 * logits of position p - 1 (mpmd_sample_token with opts' sampling,
 * sequence b, position p). A sequence ends after max_new tokens, after
 * drawing eos, or when it fills the caches; the generation ends when all
 * have. out gets, for sequence b at out + b * d->length, its prompt and the
 * tokens drawn, and out_lens[b] their count. Each run starts over from
 * position 0, so a step generates any number of times; inputs of st other
 * than the decoder's stay as the caller set them. Under MPI a collective
 * call (every process gets the logits, draws the same tokens and calls
 * on_token). opts NULL: MPMD_GENERATE_DEFAULTS. Errors (arguments, a prompt
 * that does not fit or holds an id outside the vocabulary, a failed run,
 * logits that are NaN or infinite, which weights holding them give) are
 * returned and kept on the step (mpmd_step_error), naming the sequence and
 * the position. */
mpmd_status mpmd_generate(mpmd_step *st, const mpmd_decoder *d, const int32_t *const *prompts,
                          const int64_t *lens, const mpmd_generate_opts *opts, int32_t *out,
                          int64_t *out_lens);

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
