/* libFuzzer: the graph builder, through the public API only. The input is a
 * small program: a header (flags, 1-3 f32 inputs, an optional i32 input of
 * ids and labels, 0-3 parameters, and what to do at the end), then up to 40
 * op steps, each an opcode byte with operand and attribute bytes. Operands
 * come from a pool of the values made so far; shapes stay small (dims 1..6,
 * at most 4096 elements a value), but operands are also deliberately wrong
 * (shapes, dtypes, MPMD_NONE, ids of no value, NULL arrays) and some shapes
 * absurd (2^80 elements). One flag byte builds the ops inside a microbatch
 * loop with stage markers instead of a flat graph. The byte of the input
 * count also picks a model axis (none, 2 or 4 ranks, or 1 set explicitly:
 * mpmd_set_tensor_parallel), so that the layers split themselves and the
 * model axis' calls (collectives, split embedding and cross-entropy, split
 * parameters) run, and for a loop one of them made before mpmd_loop_begin
 * or after mpmd_loop_end, where it is misuse. If the graph has no error,
 * a loss is differentiated (mpmd_grad or mpmd_value_and_grad), an optimizer
 * added, and the step compiled and run on an executor (mpmd_exec), and for a
 * loop also as a pipelined step (mpmd_jit_with_loop) under a built-in
 * schedule. Seeds: corpus/graph.
 *
 * Promises checked (abort() when broken):
 * - a constructor that returns no value leaves the graph with an error
 *   status and a non-empty message; a value it returns is a value of the
 *   graph with a sane type (for the common ops: the type the op promises);
 * - the first error is sticky: the status never goes back to MPMD_OK and
 *   the status and message never change afterwards; no error, no message;
 * - absurd shapes (more than 2^62 bytes, dims <= 0) are refused with an
 *   error, never allocated;
 * - the model axis' calls are refused where no step can run them, with a
 *   message naming the call: at once in a graph of one model rank or after
 *   the loop, when the loop begins for one made before it; a flat graph
 *   that holds one and never became a loop (no stage marker) is refused
 *   when it compiles, and one that did compiles and runs;
 * - mpmd_grad / mpmd_sgd / mpmd_adamw return the graph's status; after a
 *   successful mpmd_grad every gradient is a value of its wrt's type;
 * - an error-free graph compiles (mpmd_exec_new); with every input set and
 *   every id in range it runs, and its kept values and parameters read back;
 *   any failure (ids out of range, an input not set, a wrong size) is an
 *   error status with a message, never a crash;
 * - results do not depend on the thread count (1 vs 3 threads, bit for
 *   bit), and a pipelined step matches the executor bit for bit (the loss
 *   and the updated parameters' SHA-256);
 * - no leak, no out-of-bounds access, no undefined behaviour (sanitizers).
 *
 * FUZZ_GRAPH_VERBOSE=1 in the environment prints the graph an input builds.
 */
#include <mpmd.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

#define POOL_MAX 48
#define MAX_STEPS 40
#define MAX_INPUTS 8
#define MAX_PARAMS 96
#define MAX_KEPT 24
#define CAP_NUMEL 4096              /* a value larger than this never enters the pool (so it is dead) */
#define CAP_WORK ((int64_t)1 << 17) /* bound on the products and attention scores the ops make */
#define HUGE_DIM ((int64_t)1 << 40)

/* ---- the input bytes ---------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    size_t n, i;
} reader;

/* the next byte, 0 once the input is exhausted */
static unsigned rd(reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }

/* a small signed number for axes: -4..6 (negative, in range, out of range) */
static int rd_axis(reader *r) { return (int)(rd(r) % 11) - 4; }

static float rd_float(reader *r) {
    static const float special[8] = {0.0f, 1.0f, -1.0f, 1e-3f, 1e30f, -1e30f, INFINITY, NAN};
    unsigned b = rd(r);
    return b >= 248 ? special[b - 248] : ((float)b - 124.0f) / 32.0f;
}

/* ---- the state of one run ------------------------------------------------ */

typedef struct {
    reader r;
    mpmd_graph *g;
    mpmd_value pool[POOL_MAX];
    int npool, nfixed, nrepl;
    mpmd_value inputs[MAX_INPUTS];
    int ninputs;
    int64_t id_limit; /* ids and labels must lie in [0, id_limit) for the run to succeed */
    int bad_const;    /* an i32 constant holds an id out of every table's range */
    int loop;         /* building a loop body */
    int model;        /* model ranks (mpmd_set_tensor_parallel; 1: none) */
    int names;        /* for unique names */
    int failed;       /* the graph has had an error */
    mpmd_status first;
    char first_msg[MPMD_ERROR_MSG_MAX];
    const char *op; /* the call being checked, for messages */
} fz;

static int verbose = -1; /* FUZZ_GRAPH_VERBOSE set: print the graph an input builds */

static void die(const fz *z, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;

static void die(const fz *z, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_graph: broken promise after %s: ", z->op ? z->op : "?");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  graph status %d, message \"%s\"\n", (int)mpmd_graph_status(z->g),
            mpmd_graph_error(z->g));
    if (verbose > 0) mpmd_graph_print(z->g, stderr);
    abort();
}

static mpmd_type ty(const fz *z, mpmd_value v) { return mpmd_value_type(z->g, v); }
/* as reads see it: a parameter split over the model axis whole */
static mpmd_type whole_ty(const fz *z, mpmd_value v) { return mpmd_value_whole_type(z->g, v); }

static int64_t numel(const fz *z, mpmd_value v) {
    mpmd_type t = ty(z, v);
    return mpmd_type_numel(&t);
}

static int is_float(const fz *z, mpmd_value v) {
    return mpmd_is_value(v) && mpmd_dtype_is_float(ty(z, v).dtype);
}

/* The sticky-error promise, checked after every call that may fail. */
static void observe(fz *z) {
    mpmd_status s = mpmd_graph_status(z->g);
    const char *m = mpmd_graph_error(z->g);
    if (!m) die(z, "mpmd_graph_error returned NULL");
    if (z->failed) {
        if (s == MPMD_OK) die(z, "the status went back to MPMD_OK after an error");
        if (s != z->first || strcmp(m, z->first_msg))
            die(z, "the first error (%d \"%s\") was replaced", (int)z->first, z->first_msg);
    } else if (s != MPMD_OK) {
        if (!m[0]) die(z, "an error status with an empty message");
        z->failed = 1;
        z->first = s;
        snprintf(z->first_msg, sizeof z->first_msg, "%s", m);
    } else if (m[0]) {
        die(z, "a message without an error status");
    }
}

/* What a constructor returned: no value only with an error; a value of the
 * graph with a sane type. */
static mpmd_value result(fz *z, const char *op, mpmd_value v) {
    z->op = op;
    observe(z);
    if (!mpmd_is_value(v)) {
        if (mpmd_graph_status(z->g) == MPMD_OK) die(z, "no value returned (id %d) but no error", (int)v.id);
        return MPMD_NONE;
    }
    if (v.id >= mpmd_graph_num_values(z->g))
        die(z, "returned id %d of %d values", (int)v.id, mpmd_graph_num_values(z->g));
    mpmd_type t = ty(z, v);
    if (t.ndim < 0 || t.ndim > MPMD_MAX_DIMS) die(z, "a result with %d dims", t.ndim);
    if (t.dtype != MPMD_TOKEN && !mpmd_dtype_is_float(t.dtype) && t.dtype != MPMD_I32)
        die(z, "a result of dtype %d", (int)t.dtype);
    for (int i = 0; i < t.ndim; i++)
        if (t.dim[i] < 0) die(z, "a result with dim %d = %lld", i, (long long)t.dim[i]);
    return v;
}

/* A call that returns a status: an error in it is on the graph. */
static void status_result(fz *z, const char *op, mpmd_status rc, int exact) {
    z->op = op;
    observe(z);
    mpmd_status s = mpmd_graph_status(z->g);
    if (rc != MPMD_OK && s == MPMD_OK) die(z, "returned %d but the graph has no error", (int)rc);
    if (exact && rc != s) die(z, "returned %d, the graph's status is %d", (int)rc, (int)s);
}

/* An absurd request: refused, with an error. */
static void refused(fz *z, const char *op, mpmd_value v) {
    if (mpmd_is_value(result(z, op, v))) {
        mpmd_type t = ty(z, v);
        char tb[160];
        die(z, "accepted an absurd shape: %s", mpmd_type_str(&t, tb, sizeof tb));
    }
}

static void pool_add(fz *z, mpmd_value v) {
    if (!mpmd_is_value(v)) return;
    mpmd_type t = ty(z, v);
    if (t.dtype != MPMD_TOKEN && mpmd_type_numel(&t) > CAP_NUMEL) return; /* stays dead: never computed */
    for (int i = 0; i < z->npool; i++)
        if (z->pool[i].id == v.id) return;
    if (z->npool < POOL_MAX)
        z->pool[z->npool++] = v;
    else
        z->pool[z->nfixed + z->nrepl++ % (POOL_MAX - z->nfixed)] = v;
}

static mpmd_value pick(fz *z) { return z->npool ? z->pool[rd(&z->r) % (unsigned)z->npool] : MPMD_NONE; }

/* a pool value of a float dtype (want 1) or i32 (want 0), or any value if none */
static mpmd_value pick_kind(fz *z, int want_float) {
    if (!z->npool) return MPMD_NONE;
    int start = (int)(rd(&z->r) % (unsigned)z->npool);
    for (int k = 0; k < z->npool; k++) {
        mpmd_value v = z->pool[(start + k) % z->npool];
        mpmd_dtype d = ty(z, v).dtype;
        if (want_float ? mpmd_dtype_is_float(d) : d == MPMD_I32) return v;
    }
    return z->pool[start];
}

static void limit_ids(fz *z, int64_t n) {
    if (n < z->id_limit) z->id_limit = n;
}

static void rd_dims(fz *z, int ndim, int64_t *dims) {
    for (int i = 0; i < ndim; i++)
        dims[i] = 1 + rd(&z->r) % 6;
}

static const char *next_name(fz *z, const char *prefix, char *buf, size_t len) {
    snprintf(buf, len, "%s%d", prefix, z->names++);
    return buf;
}

/* ---- expected result types -------------------------------------------------- */

static void same_type(fz *z, mpmd_value a, mpmd_value y) {
    if (!mpmd_is_value(y)) return;
    mpmd_type ta = ty(z, a), t = ty(z, y);
    char b1[160], b2[160];
    if (ta.dtype != t.dtype || ta.ndim != t.ndim || memcmp(ta.dim, t.dim, (size_t)t.ndim * sizeof t.dim[0]))
        die(z, "an elementwise op of %s gave %s", mpmd_type_str(&ta, b1, sizeof b1),
            mpmd_type_str(&t, b2, sizeof b2));
}

static void broadcast_type(fz *z, mpmd_value a, mpmd_value b, mpmd_value y) {
    if (!mpmd_is_value(y)) return;
    mpmd_type ta = ty(z, a), tb = ty(z, b), t = ty(z, y);
    int n = ta.ndim > tb.ndim ? ta.ndim : tb.ndim;
    int ok = t.ndim == n && t.dtype == ta.dtype;
    for (int k = 0; ok && k < n; k++) {
        int64_t da = k < ta.ndim ? ta.dim[ta.ndim - 1 - k] : 1,
                db = k < tb.ndim ? tb.dim[tb.ndim - 1 - k] : 1;
        ok = (da == db || da == 1 || db == 1) && t.dim[n - 1 - k] == (da > db ? da : db);
    }
    if (!ok) {
        char b1[160], b2[160], b3[160];
        die(z, "%s and %s broadcast to %s", mpmd_type_str(&ta, b1, sizeof b1),
            mpmd_type_str(&tb, b2, sizeof b2), mpmd_type_str(&t, b3, sizeof b3));
    }
}

/* ---- the op steps ------------------------------------------------------------ */

/* the opcodes (an op byte modulo NUM_OPS); the seeds' script numbers them in this order */
/* clang-format off */
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_ADD_SCALAR, OP_MUL_SCALAR, OP_NEG, OP_EXP, OP_LOG, OP_TANH, OP_SQRT,
    OP_RSQRT, OP_SQUARE, OP_RELU, OP_GELU, OP_BROADCAST_TO, OP_SUM_TO, OP_CAST, OP_SUM, OP_MEAN, OP_MAX,
    OP_RESHAPE, OP_PERMUTE, OP_TRANSPOSE, OP_SLICE, OP_CONCAT, OP_MATMUL, OP_MATMUL_SCALED, OP_SOFTMAX,
    OP_LOG_SOFTMAX, OP_SOFTMAX_CAUSAL, OP_LAYER_NORM, OP_EMBEDDING, OP_CROSS_ENTROPY, OP_ATTENTION, OP_DENSE,
    OP_LEAF, OP_BAD_OPERAND, OP_ABSURD, OP_SCOPE, OP_LAYER, OP_ASSIGN, OP_COMPUTE_DTYPE, OP_STAGE, OP_MISC,
    NUM_OPS /* OP_MISC's steps include the model axis' calls (do_model_axis) */
};
/* clang-format on */

static mpmd_value unary_op(fz *z, int op, mpmd_value a) {
    switch (op) {
    case OP_NEG: return result(z, "mpmd_neg", mpmd_neg(z->g, a));
    case OP_EXP: return result(z, "mpmd_exp", mpmd_exp(z->g, a));
    case OP_LOG: return result(z, "mpmd_log", mpmd_log(z->g, a));
    case OP_TANH: return result(z, "mpmd_tanh", mpmd_tanh(z->g, a));
    case OP_SQRT: return result(z, "mpmd_sqrt", mpmd_sqrt(z->g, a));
    case OP_RSQRT: return result(z, "mpmd_rsqrt", mpmd_rsqrt(z->g, a));
    case OP_SQUARE: return result(z, "mpmd_square", mpmd_square(z->g, a));
    case OP_RELU: return result(z, "mpmd_relu", mpmd_relu(z->g, a));
    default: return result(z, "mpmd_gelu", mpmd_gelu(z->g, a));
    }
}

static mpmd_value do_binary(fz *z, int op, mpmd_value a, mpmd_value b) {
    mpmd_value y;
    switch (op) {
    case OP_ADD: y = result(z, "mpmd_add", mpmd_add(z->g, a, b)); break;
    case OP_SUB: y = result(z, "mpmd_sub", mpmd_sub(z->g, a, b)); break;
    case OP_MUL: y = result(z, "mpmd_mul", mpmd_mul(z->g, a, b)); break;
    default: y = result(z, "mpmd_div", mpmd_div(z->g, a, b)); break;
    }
    broadcast_type(z, a, b, y);
    return y;
}

static mpmd_value do_broadcast_to(fz *z, mpmd_value a) {
    reader *r = &z->r;
    mpmd_type ta = ty(z, a);
    int64_t dims[MPMD_MAX_DIMS];
    int nd;
    if (rd(r) % 3 == 0) { /* random: mostly refused */
        nd = (int)(rd(r) % 5);
        rd_dims(z, nd, dims);
    } else { /* valid: new leading dims, and 1s stretched */
        nd = ta.ndim + (int)(rd(r) % 3);
        if (nd > 4) nd = ta.ndim > 4 ? ta.ndim : 4;
        int lead = nd - ta.ndim;
        for (int i = 0; i < lead; i++)
            dims[i] = 1 + rd(r) % 3;
        for (int i = 0; i < ta.ndim; i++)
            dims[lead + i] = ta.dim[i] == 1 ? 1 + rd(r) % 3 : ta.dim[i];
        int64_t n = 1;
        for (int i = 0; i < nd; i++)
            n *= dims[i];
        if (n > CAP_NUMEL) return MPMD_NONE;
    }
    mpmd_value y = result(z, "mpmd_broadcast_to", mpmd_broadcast_to(z->g, a, nd, dims));
    if (mpmd_is_value(y)) {
        mpmd_type t = ty(z, y);
        if (t.ndim != nd || memcmp(t.dim, dims, (size_t)nd * sizeof dims[0])) die(z, "not the target shape");
    }
    return y;
}

static mpmd_value do_sum_to(fz *z, mpmd_value a) {
    reader *r = &z->r;
    mpmd_type ta = ty(z, a);
    int64_t dims[MPMD_MAX_DIMS];
    int nd;
    if (rd(r) % 3 == 0) {
        nd = (int)(rd(r) % 5);
        rd_dims(z, nd, dims);
    } else { /* drop leading dims, set some to 1 */
        int drop = ta.ndim ? (int)(rd(r) % (unsigned)(ta.ndim + 1)) : 0;
        nd = ta.ndim - drop;
        for (int i = 0; i < nd; i++)
            dims[i] = (rd(r) & 1) ? 1 : ta.dim[drop + i];
    }
    return result(z, "mpmd_sum_to", mpmd_sum_to(z->g, a, nd, dims));
}

static mpmd_value do_reduce(fz *z, int op, mpmd_value a) {
    reader *r = &z->r;
    int axes[5] = {0}, nax = (int)(rd(r) % 4); /* 5: room for mode 2's count on a 5-d value */
    for (int i = 0; i < nax; i++)
        axes[i] = rd_axis(r);
    int mode = (int)(rd(r) % 8), keep = (int)(rd(r) % 3); /* keepdims 0, 1, and 2 (true) */
    const int *ax = axes;
    if (mode == 0) nax = 0, ax = NULL; /* MPMD_ALL_AXES */
    if (mode == 1) ax = NULL;          /* NULL with naxes > 0: refused */
    if (mode == 2) nax = 5;            /* more axes than dims: refused */
    mpmd_value y;
    const char *name = op == OP_SUM ? "mpmd_sum" : op == OP_MEAN ? "mpmd_mean" : "mpmd_max";
    if (op == OP_SUM)
        y = mpmd_sum(z->g, a, nax, ax, keep);
    else if (op == OP_MEAN)
        y = mpmd_mean(z->g, a, nax, ax, keep);
    else
        y = mpmd_max(z->g, a, nax, ax, keep);
    y = result(z, name, y);
    if (mpmd_is_value(y)) {
        mpmd_type ta = ty(z, a), t = ty(z, y);
        int want = keep ? ta.ndim : nax == 0 ? 0 : ta.ndim - nax;
        if (t.ndim != want || t.dtype != ta.dtype)
            die(z, "%d dims from %d reduced over %d axes", t.ndim, ta.ndim, nax);
    }
    return y;
}

static mpmd_value do_reshape(fz *z, mpmd_value a) {
    reader *r = &z->r;
    mpmd_type ta = ty(z, a);
    int64_t n = mpmd_type_numel(&ta), dims[MPMD_MAX_DIMS + 2];
    int nd = 0;
    const int64_t *dp = dims;
    switch (rd(r) % 9) {
    case 0: nd = 1, dims[0] = n; break;
    case 1: nd = 2, dims[0] = -1, dims[1] = ta.ndim ? ta.dim[ta.ndim - 1] : 1; break;
    case 2:
        nd = ta.ndim < 4 ? ta.ndim + 1 : ta.ndim;
        dims[0] = 1;
        for (int i = 0; i < ta.ndim && i + 1 < nd; i++)
            dims[i + 1] = ta.dim[i];
        if (nd == ta.ndim) memcpy(dims, ta.dim, (size_t)nd * sizeof dims[0]);
        break;
    case 3: nd = (int)(rd(r) % 5), rd_dims(z, nd, dims); break; /* random: mostly refused */
    case 4:
        nd = 1 + (int)(rd(r) % 4), rd_dims(z, nd, dims);
        dims[rd(r) % (unsigned)nd] = -1;
        break;
    case 5: nd = 2, dims[0] = -1, dims[1] = -1; break;                   /* two -1: refused */
    case 6: nd = 2, dims[0] = n, dims[1] = -(int64_t)(rd(r) % 3); break; /* 0 or negative */
    case 7: {                                                            /* a factorisation of n */
        int64_t left = n;
        nd = 1 + (int)(rd(r) % 4);
        for (int i = 0; i + 1 < nd; i++) {
            int64_t f = 1 + rd(r) % 6;
            while (left % f)
                f--;
            dims[i] = f, left /= f;
        }
        dims[nd - 1] = left;
        break;
    }
    default:
        if (rd(r) & 1)
            nd = 2, dp = NULL; /* NULL dims: refused */
        else
            nd = rd(r) & 1 ? MPMD_MAX_DIMS + 1 : -1; /* too many / negative: refused */
        break;
    }
    mpmd_value y = result(z, "mpmd_reshape", mpmd_reshape(z->g, a, nd, dp));
    if (mpmd_is_value(y)) {
        mpmd_type t = ty(z, y);
        if (mpmd_type_numel(&t) != n || t.ndim != nd || t.dtype != ta.dtype)
            die(z, "reshape changed the count");
    }
    return y;
}

static mpmd_value do_permute(fz *z, mpmd_value a) {
    reader *r = &z->r;
    int nd = ty(z, a).ndim, perm[MPMD_MAX_DIMS] = {0};
    int mode = (int)(rd(r) % 6);
    if (mode == 0) return result(z, "mpmd_permute", mpmd_permute(z->g, a, nd ? NULL : perm));
    for (int i = 0; i < nd && i < MPMD_MAX_DIMS; i++)
        perm[i] = i;
    if (mode == 1) { /* raw bytes: mostly refused */
        for (int i = 0; i < nd && i < MPMD_MAX_DIMS; i++)
            perm[i] = (int)(rd(r) % 8) - 1;
    } else {
        for (int i = nd - 1; i > 0; i--) {
            int j = (int)(rd(r) % (unsigned)(i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
    }
    mpmd_value y = result(z, "mpmd_permute", mpmd_permute(z->g, a, perm));
    if (mpmd_is_value(y)) {
        mpmd_type ta = ty(z, a), t = ty(z, y);
        for (int i = 0; i < nd; i++)
            if (t.dim[i] != ta.dim[perm[i]]) die(z, "permute: dim %d is not a's dim %d", i, perm[i]);
    }
    return y;
}

static mpmd_value do_slice(fz *z, mpmd_value a) {
    reader *r = &z->r;
    mpmd_type ta = ty(z, a);
    int axis = rd_axis(r);
    int64_t start, stop;
    int ax = axis < 0 ? axis + ta.ndim : axis;
    if (rd(r) % 4 && ax >= 0 && ax < ta.ndim && ta.dim[ax] >= 1) {
        int64_t d = ta.dim[ax];
        start = (int64_t)(rd(r) % (unsigned)d);
        stop = start + 1 + (int64_t)(rd(r) % (unsigned)(d - start));
    } else {
        start = (int64_t)(rd(r) % 9) - 2;
        stop = (int64_t)(rd(r) % 9) - 2;
    }
    mpmd_value y = result(z, "mpmd_slice", mpmd_slice(z->g, a, axis, start, stop));
    if (mpmd_is_value(y) && ty(z, y).dim[ax] != stop - start) die(z, "slice: wrong length");
    return y;
}

static mpmd_value do_concat(fz *z) {
    reader *r = &z->r;
    int n = (int)(rd(r) % 4), mode = (int)(rd(r) % 4), axis = rd_axis(r);
    mpmd_value xs[3];
    xs[0] = pick(z);
    for (int i = 1; i < 3; i++)
        xs[i] = mode == 0 ? pick(z) : xs[0];
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += numel(z, xs[i]);
    if (total > CAP_NUMEL) return MPMD_NONE;
    mpmd_value y = result(z, "mpmd_concat", mpmd_concat(z->g, n, mode == 3 && n ? NULL : xs, axis));
    if (mpmd_is_value(y) && numel(z, y) != total)
        die(z, "concat: %lld elements from %lld", (long long)numel(z, y), (long long)total);
    return y;
}

static float rd_alpha(reader *r) {
    static const float alphas[8] = {1.0f, 0.5f, -2.0f, 0.0f, 0.125f, NAN, INFINITY, 3.0f};
    return alphas[rd(r) % 8];
}

static mpmd_value do_matmul(fz *z, int scaled) {
    reader *r = &z->r;
    unsigned fb = rd(r);
    int flags = fb % 16 == 15 ? 0x10 : (int)(fb % 4); /* 0x10: an unknown flag */
    mpmd_value a = pick_kind(z, 1), b;
    mpmd_type ta = ty(z, a);
    int mode = (int)(rd(r) % 4);
    if (mode == 1 && ta.ndim >= 2) { /* a fresh parameter of the right shape */
        int64_t k = ta.dim[ta.ndim - 1 - ((flags & MPMD_TRANS_A) != 0)], nn = 1 + rd(r) % 6;
        char name[32];
        b = result(z, "mpmd_param",
                   mpmd_param(z->g, next_name(z, "w", name, sizeof name),
                              MPMD_SHAPE((flags & MPMD_TRANS_B) ? nn : k, (flags & MPMD_TRANS_B) ? k : nn),
                              MPMD_LECUN));
        if (mpmd_is_value(b) && ta.dtype != MPMD_F32)
            b = result(z, "mpmd_cast", mpmd_cast(z->g, b, ta.dtype));
    } else if (mode == 2) { /* a a^T */
        b = a;
        flags = flags == 0x10 ? flags : (flags & MPMD_TRANS_A) | ((flags & MPMD_TRANS_A) ? 0 : MPMD_TRANS_B);
    } else {
        b = pick_kind(z, 1);
    }
    if (numel(z, a) * numel(z, b) > CAP_WORK) return MPMD_NONE;
    mpmd_value y = scaled
                       ? result(z, "mpmd_matmul_scaled", mpmd_matmul_scaled(z->g, a, b, flags, rd_alpha(r)))
                       : result(z, "mpmd_matmul", mpmd_matmul(z->g, a, b, flags));
    if (mpmd_is_value(y)) {
        mpmd_type tb = ty(z, b), t = ty(z, y);
        int64_t m = ta.dim[ta.ndim - 2 + ((flags & MPMD_TRANS_A) != 0)];
        int64_t nn = tb.dim[tb.ndim - 1 - ((flags & MPMD_TRANS_B) != 0)];
        if (t.ndim != ta.ndim || t.dim[t.ndim - 2] != m || t.dim[t.ndim - 1] != nn)
            die(z, "matmul: wrong shape");
    }
    return y;
}

static float rd_eps(reader *r) {
    static const float eps[8] = {1e-5f, 1e-6f, 0.0f, 1e-3f, -1.0f, NAN, INFINITY, 0.5f};
    return eps[rd(r) % 8];
}

static mpmd_value do_layer_norm(fz *z) {
    reader *r = &z->r;
    mpmd_value x = pick_kind(z, 1), gm, bt;
    mpmd_type tx = ty(z, x);
    int mode = (int)(rd(r) % 4);
    if (mode && tx.ndim >= 1) {
        int64_t c = tx.dim[tx.ndim - 1];
        char n1[32], n2[32];
        if (mode == 3) {
            gm = result(z, "mpmd_full", mpmd_full(z->g, 1.0f, 1, &c));
            bt = result(z, "mpmd_full", mpmd_full(z->g, 0.0f, 1, &c));
        } else {
            gm = result(z, "mpmd_param",
                        mpmd_param(z->g, next_name(z, "gamma", n1, sizeof n1), 1, &c, MPMD_ONES));
            bt = result(z, "mpmd_param",
                        mpmd_param(z->g, next_name(z, "beta", n2, sizeof n2), 1, &c, MPMD_ZEROS));
        }
        if (mode != 2 && tx.dtype != MPMD_F32) { /* mode 2 leaves a dtype mismatch for a bf16/f16 x */
            gm = result(z, "mpmd_cast", mpmd_cast(z->g, gm, tx.dtype));
            bt = result(z, "mpmd_cast", mpmd_cast(z->g, bt, tx.dtype));
        }
    } else {
        gm = pick(z);
        bt = pick(z);
    }
    mpmd_value y = result(z, "mpmd_layer_norm", mpmd_layer_norm(z->g, x, gm, bt, rd_eps(r)));
    same_type(z, x, y);
    return y;
}

static mpmd_value fresh_table(fz *z, int64_t v, int64_t c) {
    char name[32];
    return result(
        z, "mpmd_param",
        mpmd_param(z->g, next_name(z, "table", name, sizeof name), MPMD_SHAPE(v, c), MPMD_NORMAL(0.1f)));
}

static mpmd_value do_embedding(fz *z) {
    reader *r = &z->r;
    int mode = (int)(rd(r) % 3);
    mpmd_value table = mode ? fresh_table(z, 1 + rd(r) % 6, 1 + rd(r) % 6) : pick_kind(z, 1);
    mpmd_value ids = mode == 2 ? pick(z) : pick_kind(z, 0);
    mpmd_value y = result(z, "mpmd_embedding", mpmd_embedding(z->g, table, ids));
    if (mpmd_is_value(y)) {
        mpmd_type tt = ty(z, table), ti = ty(z, ids), t = ty(z, y);
        limit_ids(z, tt.dim[0]);
        if (t.ndim != ti.ndim + 1 || t.dim[t.ndim - 1] != tt.dim[1] || t.dtype != tt.dtype)
            die(z, "embedding: wrong shape");
    }
    return y;
}

static mpmd_value do_cross_entropy(fz *z) {
    reader *r = &z->r;
    int mode = (int)(rd(r) % 3);
    mpmd_value labels = pick_kind(z, 0), logits;
    if (mode == 1) { /* logits [..., C] from an embedding of the labels themselves */
        int64_t v = 1 + rd(r) % 6, c = 1 + rd(r) % 6;
        logits = result(z, "mpmd_embedding", mpmd_embedding(z->g, fresh_table(z, v, c), labels));
        if (mpmd_is_value(logits)) limit_ids(z, v);
        if (mpmd_is_value(logits) && rd(r) % 2)
            logits = result(z, "mpmd_cast", mpmd_cast(z->g, logits, MPMD_BF16));
    } else {
        logits = pick_kind(z, 1);
    }
    mpmd_value y = result(z, "mpmd_cross_entropy", mpmd_cross_entropy(z->g, logits, labels));
    if (mpmd_is_value(y)) {
        mpmd_type tl = ty(z, logits), t = ty(z, y);
        limit_ids(z, tl.dim[tl.ndim - 1]);
        if (t.dtype != MPMD_F32 || t.ndim != tl.ndim - 1) die(z, "cross_entropy: wrong type");
    }
    return y;
}

static mpmd_value do_attention(fz *z) {
    reader *r = &z->r;
    int mode = (int)(rd(r) % 3), causal = (int)(rd(r) % 3); /* causal 2: true too */
    mpmd_value q = pick_kind(z, 1), k, v;
    if (mode) {
        mpmd_type t = ty(z, q);
        if (t.ndim < 4 && mpmd_is_value(q)) { /* leading 1s up to [B, T, H, Dh] */
            int64_t dims[4] = {1, 1, 1, 1};
            for (int i = 0; i < t.ndim; i++)
                dims[4 - t.ndim + i] = t.dim[i];
            q = result(z, "mpmd_reshape", mpmd_reshape(z->g, q, 4, dims));
        }
        k = q;
        v = mode == 2 ? result(z, "mpmd_neg", mpmd_neg(z->g, q)) : q;
    } else {
        k = pick_kind(z, 1);
        v = pick_kind(z, 1);
    }
    mpmd_type t = ty(z, q);
    if (t.ndim == 4 && t.dim[0] * t.dim[2] * t.dim[1] * t.dim[1] > CAP_WORK) return MPMD_NONE;
    mpmd_value y = result(z, "mpmd_attention", mpmd_attention(z->g, q, k, v, causal));
    same_type(z, q, y);
    return y;
}

static mpmd_value do_dense(fz *z) {
    reader *r = &z->r;
    char name[32];
    mpmd_value x = pick_kind(z, 1);
    unsigned b = rd(r);
    int64_t out = b % 16 == 15 ? -(int64_t)(b % 2) : 1 + (int64_t)(b % 6); /* 0 or -1: refused */
    const char *nm =
        rd(r) % 8 ? next_name(z, "dense_", name, sizeof name) : "dense_0"; /* maybe a used name */
    if (numel(z, x) / (mpmd_is_value(x) && ty(z, x).ndim ? ty(z, x).dim[ty(z, x).ndim - 1] : 1) * 6 >
        CAP_NUMEL)
        return MPMD_NONE;
    mpmd_value y = result(z, "mpmd_dense", mpmd_dense(z->g, nm, x, out, (int)(rd(r) % 2)));
    if (mpmd_is_value(y) && ty(z, y).dim[ty(z, y).ndim - 1] != out) die(z, "dense: wrong width");
    return y;
}

static mpmd_value do_leaf(fz *z, int bad_ids) {
    reader *r = &z->r;
    int64_t dims[4];
    int nd = (int)(rd(r) % 4);
    rd_dims(z, nd, dims);
    mpmd_type t = {MPMD_F32, nd, {0}};
    memcpy(t.dim, dims, (size_t)nd * sizeof dims[0]);
    int64_t n = mpmd_type_numel(&t);
    switch (rd(r) % 8) {
    case 0: return result(z, "mpmd_scalar", mpmd_scalar(z->g, rd_float(r)));
    case 1: return result(z, "mpmd_full", mpmd_full(z->g, rd_float(r), nd, dims));
    case 2: {
        float *buf = malloc((size_t)n * sizeof *buf);
        if (!buf) return MPMD_NONE;
        for (int64_t i = 0; i < n; i++)
            buf[i] = rd_float(r);
        mpmd_value y = result(z, "mpmd_constant", mpmd_constant(z->g, MPMD_F32, nd, dims, buf));
        free(buf);
        return y;
    }
    case 3: { /* 16-bit floats from raw bytes (NaNs and all) */
        uint16_t *buf = malloc((size_t)n * sizeof *buf);
        if (!buf) return MPMD_NONE;
        for (int64_t i = 0; i < n; i++)
            buf[i] = (uint16_t)(rd(r) | rd(r) << 8);
        mpmd_value y =
            result(z, "mpmd_constant", mpmd_constant(z->g, rd(r) % 2 ? MPMD_BF16 : MPMD_F16, nd, dims, buf));
        free(buf);
        return y;
    }
    case 4: { /* ids: 0 fits every table (V >= 1); a bad one only when asked */
        int32_t *buf = calloc((size_t)n, sizeof *buf);
        if (!buf) return MPMD_NONE;
        if (bad_ids) {
            buf[rd(r) % (unsigned)n] = rd(r) % 2 ? -1 : 1000000;
            z->bad_const = 1;
        }
        mpmd_value y = result(z, "mpmd_constant", mpmd_constant(z->g, MPMD_I32, nd, dims, buf));
        free(buf);
        return y;
    }
    case 5: return result(z, "mpmd_constant", mpmd_constant(z->g, MPMD_F32, nd, dims, NULL)); /* refused */
    case 6: { /* a token constant, an unknown dtype: refused */
        float one = 1.0f;
        return result(z, "mpmd_constant",
                      mpmd_constant(z->g, rd(r) % 2 ? MPMD_TOKEN : (mpmd_dtype)9, 0, NULL, &one));
    }
    default: { /* one more input, mid-graph */
        char name[32];
        if (z->ninputs >= MAX_INPUTS) return MPMD_NONE;
        mpmd_value x = result(z, "mpmd_input",
                              mpmd_input(z->g, next_name(z, "in", name, sizeof name), MPMD_F32, nd, dims));
        if (mpmd_is_value(x)) z->inputs[z->ninputs++] = x;
        return x;
    }
    }
}

/* Wrong operands: MPMD_NONE, ids of no value, NULL arrays, empty names. */
static mpmd_value do_bad_operand(fz *z) {
    reader *r = &z->r;
    mpmd_value a = pick(z), junk[3] = {{12345}, {-7}, {INT32_MAX}};
    mpmd_value bad = rd(r) % 4 ? junk[rd(r) % 3] : MPMD_NONE;
    mpmd_value grads[2];
    switch (rd(r) % 18) {
    case 0: return result(z, "mpmd_add", mpmd_add(z->g, bad, a));
    case 1: return result(z, "mpmd_exp", mpmd_exp(z->g, bad));
    case 2: return result(z, "mpmd_concat", mpmd_concat(z->g, 2, NULL, 0));
    case 3: return result(z, "mpmd_sum", mpmd_sum(z->g, a, 2, NULL, 0));
    case 4: return result(z, "mpmd_reshape", mpmd_reshape(z->g, a, 2, NULL));
    case 5: return result(z, "mpmd_permute", mpmd_permute(z->g, bad, NULL));
    case 6: return result(z, "mpmd_broadcast_to", mpmd_broadcast_to(z->g, a, 2, NULL));
    case 7:
        return result(z, "mpmd_input", mpmd_input(z->g, rd(r) % 2 ? NULL : "", MPMD_F32, MPMD_SCALAR_SHAPE));
    case 8:
        return result(z, "mpmd_param",
                      mpmd_param(z->g, "x0", MPMD_SCALAR_SHAPE, MPMD_ZEROS)); /* a used name */
    case 9: return result(z, "mpmd_matmul", mpmd_matmul(z->g, a, bad, 0));
    case 10: return result(z, "mpmd_layer_norm", mpmd_layer_norm(z->g, a, bad, bad, 1e-5f));
    case 11: status_result(z, "mpmd_grad", mpmd_grad(z->g, a, 1, NULL, grads), 1); return MPMD_NONE;
    case 12:
        mpmd_keep(z->g, bad);
        z->op = "mpmd_keep";
        observe(z);
        if (mpmd_graph_status(z->g) == MPMD_OK) die(z, "kept value %d", (int)bad.id);
        return MPMD_NONE;
    case 13: return result(z, "mpmd_attention", mpmd_attention(z->g, a, bad, a, 0));
    case 14: return result(z, "mpmd_embedding", mpmd_embedding(z->g, a, bad));
    case 15: {
        mpmd_value p[1] = {a};
        status_result(z, "mpmd_sgd", mpmd_sgd(z->g, 1, p, p, bad), 1);
        if (mpmd_graph_status(z->g) == MPMD_OK) die(z, "an update with learning rate %d", (int)bad.id);
        return MPMD_NONE;
    }
    case 16: return result(z, "mpmd_dense", mpmd_dense(z->g, NULL, a, 2, 1));
    default: return result(z, "mpmd_cast", mpmd_cast(z->g, bad, MPMD_F32));
    }
}

/* Absurd shapes: refused with an error, never allocated. */
static void do_absurd(fz *z) {
    reader *r = &z->r;
    mpmd_value a = pick(z);
    mpmd_type ta = ty(z, a);
    char name[32];
    int64_t h2[2] = {HUGE_DIM, HUGE_DIM}, big1[1] = {INT64_MAX},
            h3[3] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31};
    int64_t neg[2] = {3, -(int64_t)(rd(r) % 3)};
    switch (rd(r) % 11) {
    case 0:
        refused(z, "mpmd_input", mpmd_input(z->g, next_name(z, "huge", name, sizeof name), MPMD_F32, 2, h2));
        break;
    case 1: refused(z, "mpmd_full", mpmd_full(z->g, 1.0f, 1, big1)); break;
    case 2: { /* the operand's dims under two huge leading ones: broadcastable, but too large */
        int64_t dims[MPMD_MAX_DIMS] = {HUGE_DIM, HUGE_DIM};
        int nd = ta.ndim <= 4 ? ta.ndim + 2 : 6;
        for (int i = 2; i < nd; i++)
            dims[i] = ta.dim[i - 2];
        refused(z, "mpmd_broadcast_to", mpmd_broadcast_to(z->g, a, nd, dims));
        break;
    }
    case 3:
        if (rd(r) % 3 == 0)
            refused(z, "mpmd_reshape", mpmd_reshape(z->g, a, 2, h2));
        else if (rd(r) % 2)
            refused(z, "mpmd_reshape", mpmd_reshape(z->g, a, 2, (const int64_t[]){HUGE_DIM, -1}));
        else
            refused(z, "mpmd_reshape", mpmd_reshape(z->g, a, 1, big1));
        break;
    case 4:
        refused(z, "mpmd_param",
                mpmd_param(z->g, next_name(z, "huge", name, sizeof name), 3, h3, MPMD_LECUN));
        break;
    case 5:
        refused(z, "mpmd_variable",
                mpmd_variable(z->g, next_name(z, "huge", name, sizeof name), MPMD_F32, 2, h2, MPMD_ZEROS));
        break;
    case 6: {
        float d[4] = {0};
        refused(z, "mpmd_constant", mpmd_constant(z->g, MPMD_F32, 2, rd(r) % 2 ? h2 : h3, d)); /* h3: 2^62 */
        break;
    }
    case 7:
        refused(z, "mpmd_input", mpmd_input(z->g, next_name(z, "neg", name, sizeof name), MPMD_F32, 2, neg));
        break;
    case 8: refused(z, "mpmd_full", mpmd_full(z->g, 0.0f, rd(r) % 2 ? MPMD_MAX_DIMS + 1 : -1, h2)); break;
    case 9: refused(z, "mpmd_broadcast_to", mpmd_broadcast_to(z->g, a, 2, neg)); break;
    default: refused(z, "mpmd_full", mpmd_full(z->g, 0.0f, 2, neg)); break;
    }
}

static mpmd_value do_layer(fz *z) {
    reader *r = &z->r;
    char name[32];
    next_name(z, "L", name, sizeof name);
    mpmd_value x = pick_kind(z, 1);
    mpmd_type t = ty(z, x);
    int64_t n = numel(z, x), c = t.ndim ? t.dim[t.ndim - 1] : 1;
    int heads = 1 + (int)(rd(r) % 3), causal = (int)(rd(r) % 2);
    int64_t tt = t.ndim == 3 ? t.dim[1] : 1, bb = t.ndim == 3 ? t.dim[0] : 1;
    int work_ok = n * 8 <= CAP_NUMEL && bb * heads * tt * tt <= CAP_WORK && c * c * 16 <= CAP_WORK;
    switch (rd(r) % 6) {
    case 0: return result(z, "mpmd_layer_norm_layer", mpmd_layer_norm_layer(z->g, name, x, rd_eps(r)));
    case 1: {
        int64_t vocab = 1 + rd(r) % 6, width = 1 + rd(r) % 6;
        mpmd_value ids = pick_kind(z, 0);
        mpmd_value y = result(z, "mpmd_embed", mpmd_embed(z->g, name, ids, vocab, width));
        if (mpmd_is_value(y)) limit_ids(z, vocab);
        return y;
    }
    case 2:
        if (n / c * 8 > CAP_NUMEL) return MPMD_NONE;
        return result(z, "mpmd_mlp", mpmd_mlp(z->g, name, x, 1 + rd(r) % 8, 1 + rd(r) % 6));
    case 3:
        if (!work_ok) return MPMD_NONE;
        return result(z, "mpmd_self_attention", mpmd_self_attention(z->g, name, x, heads, causal));
    case 4:
        if (!work_ok) return MPMD_NONE;
        return result(z, "mpmd_transformer_block", mpmd_transformer_block(z->g, name, x, heads, causal));
    default:
        if (!work_ok) return MPMD_NONE;
        return result(z, "mpmd_gpt_block", mpmd_gpt_block(z->g, name, x, heads));
    }
}

static mpmd_value do_assign(fz *z) {
    reader *r = &z->r;
    char name[32];
    mpmd_value v = pick(z), var;
    mpmd_type t = ty(z, v);
    int mode = (int)(rd(r) % 4);
    if (mode == 0 || !mpmd_is_value(v) || t.dtype == MPMD_TOKEN) {
        var = pick(z); /* usually not a variable: refused */
    } else {
        var = result(z, "mpmd_variable",
                     mpmd_variable(z->g, next_name(z, "var", name, sizeof name), t.dtype, t.ndim, t.dim,
                                   mode == 1 ? MPMD_ONES : MPMD_ZEROS));
        if (mode == 3) v = pick(z); /* maybe another type: refused */
    }
    return result(z, "mpmd_assign", mpmd_assign(z->g, var, v));
}

static void do_scope(fz *z) {
    reader *r = &z->r;
    switch (rd(r) % 4) {
    case 0: mpmd_scope_push(z->g, "blk"); break;
    case 1: mpmd_scope_pushf(z->g, "s%u", rd(r)); break;
    default: mpmd_scope_pop(z->g); break; /* maybe with nothing to pop: an error */
    }
    z->op = "a scope call";
    observe(z);
}

static void do_stage(fz *z) {
    reader *r = &z->r;
    unsigned i = z->npool ? rd(r) % (unsigned)z->npool : 0;
    switch (rd(r) % 6) {
    case 0:
    case 1:
    case 2:
        if (!z->npool) return;
        /* flat: the graph becomes a loop of one (mpmd_graph_num_microbatches 1) */
        z->pool[i] = result(z, "mpmd_enter_stage", mpmd_enter_stage(z->g, z->pool[i]));
        if (!mpmd_is_value(z->pool[i])) z->pool[i] = z->pool[0];
        break;
    case 3:
        mpmd_remat_begin(z->g, (mpmd_remat_policy)(rd(r) % 5));
        z->op = "mpmd_remat_begin";
        observe(z);
        break;
    case 4:
        mpmd_remat_end(z->g);
        z->op = "mpmd_remat_end";
        observe(z);
        break;
    default:
        if (!z->loop && mpmd_graph_num_microbatches(z->g) == 0) { /* outside a loop: refused */
            mpmd_loop_end(z->g);
            z->op = "mpmd_loop_end";
            observe(z);
            if (mpmd_graph_status(z->g) == MPMD_OK) die(z, "a loop ended that never began");
        } else if (z->npool) {
            mpmd_value y = result(z, "mpmd_remat_save", mpmd_remat_save(z->g, z->pool[i]));
            (void)y;
        }
        break;
    }
}

/* The LLaMA-family ops on pool values: valid operands and refused ones. */
static mpmd_value do_llama_op(fz *z) {
    reader *r = &z->r;
    mpmd_value a = pick_kind(z, 1), b = pick_kind(z, 1);
    switch (rd(r) % 10) {
    case 0: {
        mpmd_value y = result(z, "mpmd_sigmoid", mpmd_sigmoid(z->g, a));
        same_type(z, a, y);
        return y;
    }
    case 1: {
        mpmd_value y = result(z, "mpmd_silu", mpmd_silu(z->g, a));
        same_type(z, a, y);
        return y;
    }
    case 2: {
        mpmd_value y =
            result(z, "mpmd_maximum", rd(r) % 2 ? mpmd_maximum(z->g, a, b) : mpmd_minimum(z->g, a, b));
        broadcast_type(z, a, b, y);
        return y;
    }
    case 3:
        return result(z, "mpmd_compare", mpmd_compare(z->g, a, b, (mpmd_cmp)(rd(r) % 8))); /* 6, 7 refused */
    case 4: return result(z, "mpmd_where", mpmd_where(z->g, pick_kind(z, 1), a, b));
    case 5: return result(z, "mpmd_dropout", mpmd_dropout(z->g, a, rd_float(r), pick_kind(z, 0)));
    case 6: return result(z, "mpmd_rms_norm", mpmd_rms_norm(z->g, a, b, rd_float(r)));
    case 7: return result(z, "mpmd_rope", mpmd_rope(z->g, a, rd_float(r) * 1000.0f, (int64_t)rd(r) - 8));
    case 8: { /* the ids index the axis: a run succeeds only with ids below its size */
        int axis = rd_axis(r);
        mpmd_value y = result(z, "mpmd_take", mpmd_take(z->g, a, pick_kind(z, 0), axis));
        if (mpmd_is_value(y)) {
            mpmd_type ta = ty(z, a);
            limit_ids(z, ta.dim[axis < 0 ? axis + ta.ndim : axis]);
        }
        return y;
    }
    default: return result(z, "mpmd_rms_norm_layer", mpmd_rms_norm_layer(z->g, "rms", a, 1e-6f));
    }
}

/* ---- the model axis ------------------------------------------------------------ */

static const char *const axis_calls[6] = {"mpmd_all_reduce",      "mpmd_pvary",
                                          "mpmd_all_gather",      "mpmd_reduce_scatter",
                                          "mpmd_embedding_split", "mpmd_cross_entropy_split"};

/* The model axis' call k (0..5) on operand a (and i32 ids for 4 and 5: the
 * split table is a fresh split parameter, or a pool value). Returns what it
 * returned, checked: refused with the 1-rank message in a graph of one
 * model rank; else of the type it promises. */
static mpmd_value model_axis_call(fz *z, int k, mpmd_value a, mpmd_value ids) {
    reader *r = &z->r;
    const int M = z->model;
    const int was_ok = mpmd_graph_status(z->g) == MPMD_OK;
    int dim = rd_axis(r);
    mpmd_value table = MPMD_NONE, y;
    if (k == 4) {
        if (rd(r) % 4) { /* [M v, c] split by rows: this rank's [v, c] */
            char name[32];
            int64_t v = 1 + rd(r) % 6, c = 1 + rd(r) % 6;
            table = result(z, "mpmd_param_split",
                           mpmd_param_split(z->g, next_name(z, "vtable", name, sizeof name),
                                            MPMD_SHAPE(v * M, c), MPMD_NORMAL(0.1f), 0, 1));
        } else {
            table = pick_kind(z, 1);
        }
    }
    if (k == 2 && numel(z, a) * M > CAP_NUMEL) return MPMD_NONE;
    switch (k) {
    case 0: y = mpmd_all_reduce(z->g, a, "model"); break;
    case 1: y = mpmd_pvary(z->g, a, "model"); break;
    case 2: y = mpmd_all_gather(z->g, a, dim, "model"); break;
    case 3: y = mpmd_reduce_scatter(z->g, a, dim, "model"); break;
    case 4: y = mpmd_embedding_split(z->g, table, ids, "model"); break;
    default: y = mpmd_cross_entropy_split(z->g, a, ids, "model"); break;
    }
    y = result(z, axis_calls[k], y);
    int operands = mpmd_is_value(a) || k == 4;
    if (k == 4) operands = mpmd_is_value(table) && mpmd_is_value(ids);
    if (k == 5) operands = operands && mpmd_is_value(ids);
    if (M < 2 && was_ok && operands && mpmd_graph_status(z->g) == MPMD_OK)
        die(z, "%s accepted in a graph of one model rank", axis_calls[k]);
    if (M < 2 && was_ok && operands &&
        !strstr(mpmd_graph_error(z->g), "the model axis has 1 rank (call mpmd_set_tensor_parallel"))
        die(z, "%s in a graph of one model rank: not the 1-rank message", axis_calls[k]);
    if (!mpmd_is_value(y)) return MPMD_NONE;
    mpmd_type t = ty(z, y), ta = ty(z, k == 4 ? table : a);
    int ax = dim < 0 ? dim + ta.ndim : dim, ok = 1;
    if (k <= 1)
        same_type(z, a, y);
    else if (k <= 3)
        ok = t.ndim == ta.ndim && t.dim[ax] == (k == 2 ? ta.dim[ax] * M : ta.dim[ax] / M);
    else if (k == 4) {
        mpmd_type ti = ty(z, ids);
        ok = t.ndim == ti.ndim + 1 && t.dim[t.ndim - 1] == ta.dim[1] && t.dtype == MPMD_F32;
        limit_ids(z, ta.dim[0] * M); /* whole-vocabulary ids */
    } else {
        ok = t.ndim == ta.ndim - 1 && t.dtype == MPMD_F32;
        limit_ids(z, ta.dim[ta.ndim - 1] * M);
    }
    if (!ok) die(z, "%s: a result of the wrong shape", axis_calls[k]);
    return y;
}

/* A split parameter, or one of the model axis' calls on pool values. */
static mpmd_value do_model_axis(fz *z) {
    reader *r = &z->r;
    unsigned k = rd(r) % 8;
    if (k >= 6) { /* a parameter split over the axis (1 rank: whole) */
        char name[32];
        int64_t dims[3];
        int nd = 1 + (int)(rd(r) % 3), axis = (int)(rd(r) % 4), groups = 1 + (int)(rd(r) % 3);
        rd_dims(z, nd, dims);
        if (rd(r) % 2) dims[axis % nd] *= z->model * groups; /* mostly divisible */
        return result(z, "mpmd_param_split",
                      mpmd_param_split(z->g, next_name(z, "ps", name, sizeof name), nd, dims,
                                       MPMD_NORMAL(0.1f), axis, groups));
    }
    mpmd_value a = pick_kind(z, 1); /* (two statements: the order the bytes are read in is fixed) */
    mpmd_value ids = pick_kind(z, 0);
    return model_axis_call(z, (int)k, a, ids);
}

static void do_misc(fz *z) {
    reader *r = &z->r;
    switch (rd(r) % 7) {
    case 6: pool_add(z, do_model_axis(z)); break;
    case 5: pool_add(z, do_llama_op(z)); break;
    case 0: { /* names and lookups agree */
        mpmd_value x = z->inputs[rd(r) % (unsigned)z->ninputs];
        const char *nm = mpmd_value_name(z->g, x);
        if (!nm) die(z, "input %d has no name", (int)x.id);
        if (mpmd_lookup(z->g, nm).id != x.id) die(z, "lookup of \"%s\" is not %d", nm, (int)x.id);
        if (mpmd_is_value(mpmd_lookup(z->g, "no/such/name"))) die(z, "lookup of an unknown name");
        break;
    }
    case 1: {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            mpmd_graph_print(z->g, null);
            fclose(null);
        }
        int n = mpmd_graph_num_values(z->g);
        if (n > 0) {
            double f = mpmd_graph_flops(z->g, (mpmd_value){0}, (mpmd_value){n - 1});
            f += mpmd_op_flops(z->g, pick(z));
            if (f < 0) die(z, "negative flops");
        }
        break;
    }
    case 2: {
        mpmd_value v = pick(z);
        mpmd_keep(z->g, v); /* a loop-body value: refused */
        z->op = "mpmd_keep";
        observe(z);
        break;
    }
    case 3: {
        char name[32];
        int64_t dims[3];
        int nd = (int)(rd(r) % 4);
        rd_dims(z, nd, dims);
        pool_add(z, result(z, "mpmd_param",
                           mpmd_param(z->g, next_name(z, "p", name, sizeof name), nd, dims,
                                      rd(r) % 2 ? MPMD_LECUN : MPMD_NORMAL(0.1f))));
        break;
    }
    default: {
        int np = mpmd_graph_params(z->g, NULL, 0), ns = mpmd_graph_state(z->g, NULL, 0);
        if (np < 0 || ns < np) die(z, "%d parameters but %d state values", np, ns);
        break;
    }
    }
}

static void step(fz *z, int bad_ids) {
    reader *r = &z->r;
    int op = (int)(rd(r) % NUM_OPS);
    mpmd_value y = MPMD_NONE;
    switch (op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV: {
        mpmd_value a = pick(z), b = pick(z);
        y = do_binary(z, op, a, b);
        break;
    }
    case OP_ADD_SCALAR:
    case OP_MUL_SCALAR: {
        mpmd_value a = pick(z);
        float s = rd_float(r);
        y = op == OP_ADD_SCALAR ? result(z, "mpmd_add_scalar", mpmd_add_scalar(z->g, a, s))
                                : result(z, "mpmd_mul_scalar", mpmd_mul_scalar(z->g, a, s));
        same_type(z, a, y);
        break;
    }
    case OP_NEG:
    case OP_EXP:
    case OP_LOG:
    case OP_TANH:
    case OP_SQRT:
    case OP_RSQRT:
    case OP_SQUARE:
    case OP_RELU:
    case OP_GELU: {
        mpmd_value a = pick(z);
        y = unary_op(z, op, a);
        same_type(z, a, y);
        break;
    }
    case OP_BROADCAST_TO: y = do_broadcast_to(z, pick(z)); break;
    case OP_SUM_TO: y = do_sum_to(z, pick(z)); break;
    case OP_CAST: {
        static const mpmd_dtype to[6] = {MPMD_BF16, MPMD_F16, MPMD_F32, MPMD_BF16, MPMD_I32, MPMD_TOKEN};
        mpmd_value a = pick(z);
        mpmd_dtype d = to[rd(r) % 6];
        y = result(z, "mpmd_cast", mpmd_cast(z->g, a, d));
        if (mpmd_is_value(y) && ty(z, y).dtype != d)
            die(z, "cast to %s gave %s", mpmd_dtype_name(d), mpmd_dtype_name(ty(z, y).dtype));
        break;
    }
    case OP_SUM:
    case OP_MEAN:
    case OP_MAX: y = do_reduce(z, op, pick(z)); break;
    case OP_RESHAPE: y = do_reshape(z, pick(z)); break;
    case OP_PERMUTE: y = do_permute(z, pick(z)); break;
    case OP_TRANSPOSE: y = result(z, "mpmd_transpose", mpmd_transpose(z->g, pick(z))); break;
    case OP_SLICE: y = do_slice(z, pick(z)); break;
    case OP_CONCAT: y = do_concat(z); break;
    case OP_MATMUL: y = do_matmul(z, 0); break;
    case OP_MATMUL_SCALED: y = do_matmul(z, 1); break;
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
    case OP_SOFTMAX_CAUSAL: {
        mpmd_value a = pick_kind(z, 1);
        y = op == OP_SOFTMAX       ? result(z, "mpmd_softmax", mpmd_softmax(z->g, a))
            : op == OP_LOG_SOFTMAX ? result(z, "mpmd_log_softmax", mpmd_log_softmax(z->g, a))
                                   : result(z, "mpmd_softmax_causal", mpmd_softmax_causal(z->g, a));
        same_type(z, a, y);
        break;
    }
    case OP_LAYER_NORM: y = do_layer_norm(z); break;
    case OP_EMBEDDING: y = do_embedding(z); break;
    case OP_CROSS_ENTROPY: y = do_cross_entropy(z); break;
    case OP_ATTENTION: y = do_attention(z); break;
    case OP_DENSE: y = do_dense(z); break;
    case OP_LEAF: y = do_leaf(z, bad_ids); break;
    case OP_BAD_OPERAND: y = do_bad_operand(z); break;
    case OP_ABSURD: do_absurd(z); break;
    case OP_SCOPE: do_scope(z); break;
    case OP_LAYER: y = do_layer(z); break;
    case OP_ASSIGN: y = do_assign(z); break;
    case OP_COMPUTE_DTYPE: {
        static const mpmd_dtype dts[5] = {MPMD_F32, MPMD_BF16, MPMD_F16, MPMD_I32, MPMD_TOKEN};
        mpmd_dtype d = dts[rd(r) % 5];
        status_result(z, "mpmd_set_compute_dtype", mpmd_set_compute_dtype(z->g, d), 0);
        if (mpmd_graph_status(z->g) == MPMD_OK && mpmd_compute_dtype(z->g) != d)
            die(z, "compute dtype not set");
        break;
    }
    case OP_STAGE: do_stage(z); break;
    default: do_misc(z); break;
    }
    pool_add(z, y);
}

/* ---- running the graph ------------------------------------------------------- */

typedef struct {
    void *data[MAX_INPUTS];
    size_t bytes[MAX_INPUTS];
    int skip;     /* this input is not set (-1: all are) */
    int wrong;    /* this input is first given the wrong size (-1: none) */
    int bad;      /* an id out of range is in the ids */
    int must_run; /* every input set and every id in range */
} feed;

static uint32_t next_rand(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void make_feed(fz *z, feed *f, uint32_t seed, int bad_ids, int skip) {
    uint32_t s = seed * 2654435761u + 1;
    memset(f, 0, sizeof *f);
    f->skip = skip < z->ninputs ? skip : -1;
    f->wrong = -1;
    int64_t lim = z->id_limit < 7 ? z->id_limit : 7;
    for (int i = 0; i < z->ninputs; i++) {
        mpmd_type t = ty(z, z->inputs[i]);
        int64_t n = mpmd_type_numel(&t);
        f->bytes[i] = mpmd_type_bytes(&t);
        f->data[i] = calloc(f->bytes[i] + 8, 1); /* room for the wrong size given on purpose */
        if (!f->data[i]) abort();
        if (t.dtype == MPMD_I32) {
            int32_t *d = f->data[i];
            for (int64_t k = 0; k < n; k++)
                d[k] = (int32_t)(next_rand(&s) % (uint32_t)lim);
            if (bad_ids && n > 0 && z->id_limit < INT64_MAX) {
                static const int32_t wild[3] = {-1, INT32_MAX, INT32_MIN};
                uint32_t w = next_rand(&s);
                d[w % (uint32_t)n] = w % 4 == 3 ? (int32_t)z->id_limit : wild[w % 4 % 3];
                f->bad = 1;
            }
        } else {
            float *d = f->data[i];
            for (int64_t k = 0; k < n; k++)
                d[k] = (float)((int)(next_rand(&s) % 257) - 128) / 64.0f;
        }
    }
    if (seed % 5 == 4 && z->ninputs) f->wrong = (int)(seed / 5 % (uint32_t)z->ninputs);
    f->must_run = f->skip < 0 && !f->bad && !z->bad_const;
}

static void free_feed(feed *f) {
    for (int i = 0; i < MAX_INPUTS; i++)
        free(f->data[i]);
}

/* set_input on an executor or a step */
typedef mpmd_status (*set_fn)(void *obj, mpmd_value v, const void *data, size_t bytes);
static mpmd_status exec_set(void *obj, mpmd_value v, const void *d, size_t b) {
    return mpmd_exec_set_input(obj, v, d, b);
}
static mpmd_status step_set(void *obj, mpmd_value v, const void *d, size_t b) {
    return mpmd_step_set_input(obj, v, d, b);
}

static void set_inputs(fz *z, const feed *f, set_fn set, void *obj, const char *(*errf)(const void *)) {
    for (int i = 0; i < z->ninputs; i++) {
        if (i == f->skip) continue;
        if (i == f->wrong) {
            z->op = "set_input with the wrong size";
            if (set(obj, z->inputs[i], f->data[i], f->bytes[i] + 4) == MPMD_OK)
                die(z, "accepted %zu bytes", f->bytes[i] + 4);
            if (!errf(obj)[0]) die(z, "no message");
        }
        z->op = "set_input";
        if (set(obj, z->inputs[i], f->data[i], f->bytes[i]) != MPMD_OK)
            die(z, "refused an input: %s", errf(obj));
    }
}

static const char *exec_err(const void *ex) { return mpmd_exec_error(ex); }
static const char *step_err(const void *st) { return mpmd_step_error(st); }

/* Compile, feed and run the graph on an executor with `threads` threads;
 * the kept values' bytes go to out[k] (malloc'ed, NULL if unread). Returns
 * whether the run succeeded. */
static int run_exec(fz *z, const feed *f, int threads, int nk, const mpmd_value *kept, void **out,
                    char sha[65]) {
    mpmd_error err;
    mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
    o.threads = threads;
    o.seed = 7;
    z->op = "mpmd_exec_new";
    mpmd_exec *ex = mpmd_exec_new(z->g, &o, &err);
    if (!ex) die(z, "an error-free graph does not compile: %s", err.msg);
    set_inputs(z, f, exec_set, ex, exec_err);
    z->op = "mpmd_exec_run";
    mpmd_status rc = mpmd_exec_run(ex);
    if (rc != MPMD_OK && !mpmd_exec_error(ex)[0]) die(z, "a failed run without a message");
    if (rc != MPMD_OK && f->must_run) die(z, "the run failed: %s", mpmd_exec_error(ex));
    for (int k = 0; k < nk; k++) {
        mpmd_type t = whole_ty(z, kept[k]);
        size_t b = mpmd_type_bytes(&t);
        out[k] = malloc(b + 1);
        if (!out[k]) abort();
        z->op = "mpmd_exec_read";
        mpmd_status rr = mpmd_exec_read(ex, kept[k], out[k], b);
        if (rr != MPMD_OK && !mpmd_exec_error(ex)[0]) die(z, "a failed read without a message");
        if (rr != MPMD_OK && rc == MPMD_OK)
            die(z, "a kept value is unreadable after a run: %s", mpmd_exec_error(ex));
        if (rr != MPMD_OK) {
            free(out[k]);
            out[k] = NULL;
        }
    }
    if (nk > 0) { /* the wrong size, and a value that may not be kept */
        mpmd_type t = whole_ty(z, kept[0]);
        void *buf = malloc(mpmd_type_bytes(&t) + 1);
        if (!buf) abort();
        if (mpmd_exec_read(ex, kept[0], buf, mpmd_type_bytes(&t) + 1) == MPMD_OK)
            die(z, "read with the wrong size");
        if (!mpmd_exec_error(ex)[0]) die(z, "a failed read without a message");
        free(buf);
        mpmd_value v = {(int32_t)(mpmd_graph_num_values(z->g) / 2)};
        t = whole_ty(z, v);
        buf = malloc(mpmd_type_bytes(&t) + 1);
        if (!buf) abort();
        if (mpmd_exec_read(ex, v, buf, mpmd_type_bytes(&t)) != MPMD_OK && !mpmd_exec_error(ex)[0])
            die(z, "a failed read without a message");
        free(buf);
    }
    if (sha) mpmd_exec_params_sha256(ex, sha);
    mpmd_exec_free(ex);
    return rc == MPMD_OK;
}

static void free_outs(int n, void **out) {
    for (int i = 0; i < n; i++)
        free(out[i]), out[i] = NULL;
}

/* The loss, its gradients, an optimizer, the kept values. Returns the
 * number of kept values (in kept). */
static int finish_flat(fz *z, unsigned flags, unsigned loss_at, unsigned extra_at, unsigned keep_mask,
                       mpmd_value *kept) {
    int nk = 0;
    mpmd_value v = z->pool[loss_at % (unsigned)z->npool], loss = MPMD_NONE;
    if (is_float(z, v)) {
        if (ty(z, v).dtype != MPMD_F32) v = result(z, "mpmd_cast", mpmd_cast(z->g, v, MPMD_F32));
        loss = result(z, "mpmd_sum", mpmd_sum(z->g, v, MPMD_ALL_AXES, MPMD_DROP_DIMS));
        if (mpmd_is_value(loss) && (ty(z, loss).ndim != 0 || ty(z, loss).dtype != MPMD_F32))
            die(z, "not a scalar loss");
    }
    if (mpmd_is_value(loss)) {
        mpmd_keep(z->g, loss);
        kept[nk++] = loss;
    }
    mpmd_value params[MAX_PARAMS], wrt[MAX_PARAMS + 1], grads[MAX_PARAMS + 1];
    int np = mpmd_graph_params(z->g, params, MAX_PARAMS);
    if (np > MAX_PARAMS) np = MAX_PARAMS;
    if ((flags & 4) && mpmd_is_value(loss)) {
        int nw = np;
        memcpy(wrt, params, (size_t)np * sizeof *wrt);
        if (flags & 16)
            wrt[nw++] = z->pool[extra_at % (unsigned)z->npool]; /* any value: an i32 one is refused */
        status_result(z, "mpmd_grad", mpmd_grad(z->g, loss, nw, wrt, grads), 1);
        if (mpmd_graph_status(z->g) == MPMD_OK) {
            for (int k = 0; k < nw; k++) {
                mpmd_type tw = ty(z, wrt[k]), tg = ty(z, grads[k]);
                if (!mpmd_is_value(grads[k])) die(z, "no gradient for wrt[%d]", k);
                char b1[160], b2[160];
                if (tw.dtype != tg.dtype || tw.ndim != tg.ndim ||
                    memcmp(tw.dim, tg.dim, (size_t)tw.ndim * sizeof tw.dim[0]))
                    die(z, "the gradient of %s is %s", mpmd_type_str(&tw, b1, sizeof b1),
                        mpmd_type_str(&tg, b2, sizeof b2));
                if (nk < MAX_KEPT) mpmd_keep(z->g, grads[k]), kept[nk++] = grads[k];
            }
            if (flags & 8) {
                mpmd_value lr = result(z, "mpmd_scalar", mpmd_scalar(z->g, 0.05f));
                int nopt = (flags & 128) ? nw : np; /* with a non-parameter: refused */
                if (extra_at & 2)                   /* the gradients clipped by their global norm first */
                    result(z, "mpmd_clip_by_global_norm", mpmd_clip_by_global_norm(z->g, nw, grads, 0.5f));
                if (extra_at & 1)
                    status_result(
                        z, "mpmd_adamw",
                        mpmd_adamw(z->g, nopt, nopt == np ? params : wrt, grads, lr, MPMD_ADAM_DEFAULTS), 1);
                else
                    status_result(z, "mpmd_sgd", mpmd_sgd(z->g, nopt, nopt == np ? params : wrt, grads, lr),
                                  1);
            }
        }
    }
    for (int i = 0; i < z->npool && nk < MAX_KEPT; i++) {
        if (!((keep_mask >> (i % 8)) & 1)) continue;
        int token = ty(z, z->pool[i]).dtype == MPMD_TOKEN;
        if (token && !((keep_mask >> 7) & 1)) continue; /* now and then: a token, which keep refuses */
        mpmd_keep(z->g, z->pool[i]);
        z->op = "mpmd_keep";
        observe(z);
        if (token && mpmd_graph_status(z->g) == MPMD_OK) die(z, "mpmd_keep accepted a token");
        if (!token) kept[nk++] = z->pool[i];
    }
    for (int k = 0; k < np && nk < MAX_KEPT; k++)
        kept[nk++] = params[k]; /* always readable */
    return nk;
}

/* The graph holds an op over the model axis (its printout names the axis). */
static int holds_model_axis_ops(const fz *z) {
    FILE *f = tmpfile();
    if (!f) abort();
    mpmd_graph_print(z->g, f);
    rewind(f);
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, " axis=model") != NULL;
    fclose(f);
    return found;
}

static void run_flat(fz *z, unsigned flags, unsigned seed, unsigned loss_at, unsigned extra_at,
                     unsigned keep_mask) {
    mpmd_value kept[MAX_KEPT];
    int nk = finish_flat(z, flags, loss_at, extra_at, keep_mask, kept);
    if (mpmd_graph_status(z->g) != MPMD_OK) return;
    if (mpmd_graph_num_microbatches(z->g) == 0 && holds_model_axis_ops(z)) {
        /* no stage marker made it a loop of one: no step can run those ops */
        mpmd_error err;
        z->op = "mpmd_exec_new";
        mpmd_exec *ex = mpmd_exec_new(z->g, NULL, &err);
        if (ex || !strstr(err.msg, "collectives over the model axis run inside the microbatch loop body") ||
            !strstr(err.msg, "in a graph without a loop"))
            die(z, "a graph with model-axis ops and no loop: %s", ex ? "compiled" : err.msg);
        return;
    }
    feed f;
    make_feed(z, &f, seed, (flags & 32) != 0, (flags & 64) && seed % 3 == 0 ? (int)(seed / 3 % 8) : -1);
    void *out1[MAX_KEPT] = {0}, *out2[MAX_KEPT] = {0};
    int ok = run_exec(z, &f, 1, nk, kept, out1, NULL);
    if (ok && (seed & 1)) { /* thread count independence, bit for bit */
        if (!run_exec(z, &f, 3, nk, kept, out2, NULL)) die(z, "ran on 1 thread, failed on 3");
        for (int k = 0; k < nk; k++) {
            mpmd_type t = whole_ty(z, kept[k]);
            if (out1[k] && out2[k] && memcmp(out1[k], out2[k], mpmd_type_bytes(&t)))
                die(z, "value %%%d differs between 1 and 3 threads", (int)kept[k].id);
        }
    }
    free_outs(nk, out1);
    free_outs(nk, out2);
    free_feed(&f);
}

/* The loop graph's end: the loss of the microbatch, closed by a last stage
 * marker, its gradients reduced over the microbatches, the loop closed, an
 * optimizer; then the executor and a pipelined step must agree bit for bit. */
static void run_loop(fz *z, unsigned flags, unsigned seed, unsigned loss_at, unsigned sched, int after) {
    mpmd_value v = z->pool[loss_at % (unsigned)z->npool], loss = MPMD_NONE, total = MPMD_NONE;
    if (is_float(z, v)) {
        if (ty(z, v).dtype != MPMD_F32) v = result(z, "mpmd_cast", mpmd_cast(z->g, v, MPMD_F32));
        loss = result(z, "mpmd_mean", mpmd_mean(z->g, v, MPMD_ALL_AXES, MPMD_DROP_DIMS));
        loss = result(z, "mpmd_enter_stage", mpmd_enter_stage(z->g, loss));
    }
    mpmd_value ps[MAX_PARAMS], gs[MAX_PARAMS];
    int n = 0;
    if (!mpmd_is_value(loss)) {
        mpmd_loop_end(z->g);
        z->op = "mpmd_loop_end";
        observe(z);
    } else if (flags & 4) {
        total = result(z, "mpmd_value_and_grad",
                       mpmd_value_and_grad(z->g, loss, 0, NULL, MAX_PARAMS, ps, gs, &n));
    } else {
        int np = mpmd_graph_params(z->g, ps, MAX_PARAMS);
        n = np < MAX_PARAMS ? np : MAX_PARAMS;
        status_result(z, "mpmd_grad", mpmd_grad(z->g, loss, n, ps, gs), 1);
        total = result(z, "mpmd_loop_reduce", mpmd_loop_reduce(z->g, loss, MPMD_REDUCE_ADD));
        for (int i = 0; i < n; i++)
            gs[i] = result(z, "mpmd_loop_reduce", mpmd_loop_reduce(z->g, gs[i], MPMD_REDUCE_ADD));
        mpmd_loop_end(z->g);
        z->op = "mpmd_loop_end";
        observe(z);
        mpmd_keep(z->g, total);
        z->op = "mpmd_keep";
        observe(z);
    }
    if (n > 0 && (flags & 8)) {
        mpmd_value lr = result(z, "mpmd_scalar", mpmd_scalar(z->g, 0.05f));
        if (seed >> 8 & 1) /* clipped by the global norm: the step (any schedule) must give the loop's bits */
            result(z, "mpmd_clip_by_global_norm", mpmd_clip_by_global_norm(z->g, n, gs, 0.5f));
        if (flags & 128)
            status_result(z, "mpmd_adamw", mpmd_adamw(z->g, n, ps, gs, lr, MPMD_ADAM_DEFAULTS), 1);
        else
            status_result(z, "mpmd_sgd", mpmd_sgd(z->g, n, ps, gs, lr), 1);
    }
    if (after && mpmd_graph_status(z->g) == MPMD_OK && mpmd_is_value(total)) { /* misuse: refused at once */
        int call = (int)(seed % 6);
        mpmd_value ids = pick_kind(z, 0);
        mpmd_value y = model_axis_call(z, call, total, ids);
        if (mpmd_is_value(y) || (z->model > 1 && (!strstr(mpmd_graph_error(z->g), axis_calls[call]) ||
                                                  !strstr(mpmd_graph_error(z->g), "is after the loop"))))
            die(z, "%s after the loop: not refused, or not saying so", axis_calls[call]);
    }
    if (mpmd_graph_status(z->g) != MPMD_OK) return;
    feed f;
    make_feed(z, &f, seed, (flags & 32) != 0, -1);
    f.wrong = -1;
    int nk = mpmd_is_value(total) ? 1 : 0;
    void *out[1] = {0};
    char sha_exec[65], sha_step[65];
    int ok = run_exec(z, &f, 1, nk, &total, out, sha_exec);

    mpmd_error err;
    mpmd_schedule *s = NULL;
    z->op = "mpmd_schedule_for_graph";
    if (mpmd_schedule_for_graph(z->g, (mpmd_schedule_kind)(sched % MPMD_SCHED_USER), 0, (int)(sched / 8 % 2),
                                &s, &err)) {
        if (s || !err.msg[0]) die(z, "a failed schedule without a message, or with a schedule");
    } else {
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.threads_per_rank = 1;
        o.seed = 7;
        z->op = "mpmd_jit_with_loop";
        mpmd_step *st = mpmd_jit_with_loop(z->g, s, &o, &err);
        mpmd_schedule_free(s);
        if (!st) {
            if (!err.msg[0]) die(z, "a failed compile without a message");
        } else {
            set_inputs(z, &f, step_set, st, step_err);
            z->op = "mpmd_step_run";
            mpmd_status rc = mpmd_step_run(st);
            if (rc != MPMD_OK && !mpmd_step_error(st)[0]) die(z, "a failed step without a message");
            if ((rc == MPMD_OK) != ok)
                die(z, "the executor %s, the step %s (%s)", ok ? "ran" : "failed", rc ? "failed" : "ran",
                    mpmd_step_error(st));
            if (rc == MPMD_OK && nk) {
                float l = 0;
                z->op = "mpmd_step_read";
                if (mpmd_step_read(st, total, &l, sizeof l) != MPMD_OK)
                    die(z, "the loss is unreadable: %s", mpmd_step_error(st));
                if (out[0] && memcmp(&l, out[0], sizeof l))
                    die(z, "the step's loss %.9g is not the executor's %.9g", (double)l,
                        (double)*(float *)out[0]);
                mpmd_step_params_sha256(st, sha_step);
                if (strcmp(sha_exec, sha_step)) die(z, "the step's parameters differ from the executor's");
            }
            mpmd_step_free(st);
        }
    }
    free_outs(nk, out);
    free_feed(&f);
}

/* ---- the entry point ------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (verbose < 0) verbose = getenv("FUZZ_GRAPH_VERBOSE") != NULL;
    fz z;
    memset(&z, 0, sizeof z);
    z.r.p = data;
    z.r.n = size;
    z.id_limit = INT64_MAX;
    z.op = "mpmd_graph_new";
    reader *r = &z.r;
    /* the header */
    unsigned flags = rd(r); /* 1 loop, 2 i32 input, 4 grad, 8 optimizer, 16 extra wrt, 32 bad ids,
                               64 an input left unset, 128 the optimizer also gets the extra wrt / adamw */
    unsigned seed = rd(r), loss_at = rd(r), extra_at = rd(r), keep_mask = rd(r);
    z.loop = flags & 1;
    if (!(z.g = mpmd_graph_new())) return 0;
    /* the inputs' byte: their count, the model axis (none, 2 ranks, 4, 1 set
     * explicitly) and, for a loop, a model-axis call made before
     * mpmd_loop_begin (1) or after mpmd_loop_end (2), both misuse */
    unsigned nb = rd(r);
    int nin = 1 + (int)(nb % 3), outside = (int)(nb / 12 % 4);
    static const int models[4] = {0, 2, 4, 1};
    z.model = 1;
    if (models[nb / 3 % 4]) {
        z.model = models[nb / 3 % 4];
        status_result(&z, "mpmd_set_tensor_parallel", mpmd_set_tensor_parallel(z.g, z.model), 1);
        if (mpmd_tensor_parallel(z.g) != z.model)
            die(&z, "%d model ranks set, %d read", z.model, mpmd_tensor_parallel(z.g));
    }
    char name[32];
    for (int i = 0; i < nin; i++) {
        int64_t dims[3];
        int nd = (int)(rd(r) % 4);
        rd_dims(&z, nd, dims);
        if (z.loop && nd == 0) nd = 1, dims[0] = 2;
        if (z.loop) dims[0] = 2 * (1 + dims[0] % 3); /* two microbatches */
        snprintf(name, sizeof name, "x%d", i);
        mpmd_value x = result(&z, "mpmd_input", mpmd_input(z.g, name, MPMD_F32, nd, dims));
        if (!mpmd_is_value(x)) die(&z, "a valid input was refused");
        z.inputs[z.ninputs++] = x;
        pool_add(&z, x);
    }
    if (flags & 2) {
        int64_t dims[3];
        int nd = (int)(rd(r) % 4);
        rd_dims(&z, nd, dims);
        if (z.loop && nd == 0) nd = 1, dims[0] = 2;
        if (z.loop) dims[0] = 2 * (1 + dims[0] % 3);
        mpmd_value ids = result(&z, "mpmd_input", mpmd_input(z.g, "ids", MPMD_I32, nd, dims));
        if (!mpmd_is_value(ids)) die(&z, "a valid input was refused");
        z.inputs[z.ninputs++] = ids;
        pool_add(&z, ids);
    }
    int npar = (int)(rd(r) % 4);
    for (int i = 0; i < npar; i++) {
        int64_t dims[3];
        int nd = (int)(rd(r) % 4);
        rd_dims(&z, nd, dims);
        snprintf(name, sizeof name, "w%d", i + 1000);
        pool_add(&z, result(&z, "mpmd_param",
                            mpmd_param(z.g, name, nd, dims, rd(r) % 2 ? MPMD_LECUN : MPMD_NORMAL(0.1f))));
    }
    if (z.loop) {
        mpmd_value early = MPMD_NONE;
        int call = outside == 1 ? (int)(rd(r) % 6) : 0;
        if (outside == 1) early = model_axis_call(&z, call, z.inputs[0], z.inputs[z.ninputs - 1]);
        mpmd_loop_begin(z.g, 2);
        z.op = "mpmd_loop_begin";
        observe(&z);
        if (mpmd_is_value(early) &&
            (mpmd_graph_status(z.g) == MPMD_OK || !strstr(mpmd_graph_error(z.g), axis_calls[call]) ||
             !strstr(mpmd_graph_error(z.g), "is before the loop")))
            die(&z, "%s made before the loop, then mpmd_loop_begin: not refused, or without naming it",
                axis_calls[call]);
        for (int i = 0; i < z.ninputs; i++)
            pool_add(&z, result(&z, "mpmd_microbatch", mpmd_microbatch(z.g, z.inputs[i])));
    }
    z.nfixed = z.npool;
    unsigned sched = rd(r);
    for (int s = 0; s < MAX_STEPS && r->i < r->n; s++)
        step(&z, (flags & 32) != 0);
    if (mpmd_graph_status(z.g) == MPMD_OK) {
        if (z.loop)
            run_loop(&z, flags, seed, loss_at, sched, outside == 2);
        else
            run_flat(&z, flags, seed, loss_at, extra_at, keep_mask);
    }
    if (verbose) { /* FUZZ_GRAPH_VERBOSE=1: what an input built, to reproduce a finding */
        mpmd_graph_print(z.g, stderr);
        fprintf(stderr, "status %d: %s\n", (int)mpmd_graph_status(z.g), mpmd_graph_error(z.g));
    }
    mpmd_graph_free(z.g);
    return 0;
}
