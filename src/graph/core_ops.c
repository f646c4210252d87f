/* The structural ops: leaves (inputs, parameters, variables, constants), the
 * microbatch loop (microbatch slices and loop reductions), pipeline stage
 * markers and state assignment. Their kernels, where they have one, are in
 * src/backend/cpu/core.c; the executor treats the rest itself. */
#include "graph.h"
#include "util/init.h"

#include <stdlib.h>
#include <string.h>

static void attrs_init(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    switch (n->init.kind) {
    case MPMD_INIT_ZEROS: snprintf(buf, len, " init=zeros"); break;
    case MPMD_INIT_CONST: snprintf(buf, len, " init=const(%g)", n->init.a); break;
    case MPMD_INIT_NORMAL: snprintf(buf, len, " init=normal(%g,%g)", n->init.a, n->init.b); break;
    case MPMD_INIT_UNIFORM: snprintf(buf, len, " init=uniform(%g,%g)", n->init.a, n->init.b); break;
    case MPMD_INIT_LECUN: snprintf(buf, len, " init=lecun_normal"); break;
    }
}

static void attrs_constant(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    if (!n->data) snprintf(buf, len, " fill=%g", n->fa[0]);
}

static void attrs_reduce(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    static const char *names[] = {"add", "max", "concat"};
    snprintf(buf, len, " op=%s", names[n->ia[0]]);
}

static void attrs_marker(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " stage=%lld%s", (long long)n->ia[0], n->ia[1] ? " backward" : "");
}

static void attrs_microbatch(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    snprintf(buf, len, " of=%d", g->n_micro);
}

static void vjp_marker(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

const mpmd_op_desc mpmd_op_input = {"input", 0, -1, MPMD_OPF_LEAF, NULL, NULL};
const mpmd_op_desc mpmd_op_param = {"param", 0, -1, MPMD_OPF_LEAF | MPMD_OPF_STORAGE, attrs_init, NULL};
const mpmd_op_desc mpmd_op_variable = {"variable", 0, -1, MPMD_OPF_LEAF | MPMD_OPF_STORAGE, attrs_init, NULL};
const mpmd_op_desc mpmd_op_constant = {"constant", 0, -1, MPMD_OPF_LEAF, attrs_constant, NULL};
const mpmd_op_desc mpmd_op_microbatch = {"microbatch", 1, -1, MPMD_OPF_STRUCTURAL, attrs_microbatch, NULL};
const mpmd_op_desc mpmd_op_loop_reduce = {"loop_reduce", 1,   -1, MPMD_OPF_STRUCTURAL | MPMD_OPF_LOOP_OUT,
                                          attrs_reduce,  NULL};
const mpmd_op_desc mpmd_op_stage_marker = {"enter_stage", 1, 0, 0, attrs_marker, vjp_marker};
const mpmd_op_desc mpmd_op_assign = {"assign", 2, -1, MPMD_OPF_SIDE_EFFECT, NULL, NULL};

/* ---- leaves ---------------------------------------------------------------- */

static int check_dims(mpmd_graph *g, const char *fn, const char *name, int ndim, const int64_t *dims) {
    if (ndim < 0 || ndim > MPMD_MAX_DIMS) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": %d dimensions; between 0 and %d are supported", fn, name,
                  ndim, MPMD_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && !dims) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s \"%s\": %d dimensions but no dims (NULL)", fn, name, ndim);
        return 0;
    }
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0) {
            mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": dimension %d is %lld; dimensions must be positive", fn,
                      name, i, (long long)dims[i]);
            return 0;
        }
    }
    return 1;
}

/* Create a named leaf after checking the name is new. */
static mpmd_value named_leaf(mpmd_graph *g, const mpmd_op_desc *op, const char *fn, const char *name,
                             int scoped, mpmd_dtype dt, int ndim, const int64_t *dims) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (!name || !*name) return mpmd_fail(g, MPMD_ERR_INVALID, "%s: a name is required", fn);
    char full[768];
    if (scoped && g->scope[0])
        snprintf(full, sizeof full, "%s/%s", g->scope, name);
    else
        snprintf(full, sizeof full, "%s", name);
    if (!check_dims(g, fn, full, ndim, dims)) return MPMD_NONE;
    if (dt != MPMD_I32 && !mpmd_dtype_is_float(dt))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "%s \"%s\": dtype must be f32, bf16, f16 or i32", fn, full);
    if (mpmd_is_value(mpmd_lookup(g, full)))
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: the name \"%s\" is already used in this graph", fn, full);
    /* Leaves always belong before the loop, wherever they are created (a
     * layer called in the body makes its parameters there): they are
     * defined once per step and live across microbatches and steps. */
    int saved = g->region;
    g->region = MPMD_REGION_PRE;
    mpmd_value v = mpmd_emit(g, op, 0, NULL, mpmd_make_type(dt, ndim, dims));
    g->region = saved;
    mpmd_node *n = mpmd_node_of(g, v);
    if (!n) return MPMD_NONE;
    n->name = malloc(strlen(full) + 1);
    if (!n->name) return mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory", fn);
    strcpy(n->name, full);
    return v;
}

mpmd_value mpmd_input(mpmd_graph *g, const char *name, mpmd_dtype dtype, int ndim, const int64_t *dims) {
    return named_leaf(g, &mpmd_op_input, "mpmd_input", name, 0, dtype, ndim, dims);
}

mpmd_value mpmd_param(mpmd_graph *g, const char *name, int ndim, const int64_t *dims, mpmd_init init) {
    mpmd_value v = named_leaf(g, &mpmd_op_param, "mpmd_param", name, 1, MPMD_F32, ndim, dims);
    mpmd_node *n = mpmd_node_of(g, v);
    if (n) {
        n->init = init;
        n->flags |= MPMD_NODE_TRAINABLE;
    }
    return v;
}

mpmd_value mpmd_variable(mpmd_graph *g, const char *name, mpmd_dtype dtype, int ndim, const int64_t *dims,
                         mpmd_init init) {
    mpmd_value v = named_leaf(g, &mpmd_op_variable, "mpmd_variable", name, 0, dtype, ndim, dims);
    mpmd_node *n = mpmd_node_of(g, v);
    if (n) n->init = init;
    return v;
}

mpmd_value mpmd_full(mpmd_graph *g, float v, int ndim, const int64_t *dims) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (!check_dims(g, "mpmd_full", "constant", ndim, dims)) return MPMD_NONE;
    mpmd_value r = mpmd_emit(g, &mpmd_op_constant, 0, NULL, mpmd_make_type(MPMD_F32, ndim, dims));
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) n->fa[0] = v;
    return r;
}

mpmd_value mpmd_scalar(mpmd_graph *g, float v) { return mpmd_full(g, v, 0, NULL); }

mpmd_value mpmd_constant(mpmd_graph *g, mpmd_dtype dtype, int ndim, const int64_t *dims, const void *data) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    if (!check_dims(g, "mpmd_constant", "constant", ndim, dims)) return MPMD_NONE;
    if (dtype != MPMD_I32 && !mpmd_dtype_is_float(dtype))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_constant: dtype must be f32, bf16, f16 or i32");
    if (!data) return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_constant: data is NULL");
    if (!mpmd_dims_fit(ndim, dims, (int64_t)mpmd_dtype_size(dtype)))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_constant: the shape has more elements than fit in memory");
    mpmd_type t = mpmd_make_type(dtype, ndim, dims);
    size_t bytes = mpmd_type_bytes(&t);
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) return mpmd_fail(g, MPMD_ERR_NOMEM, "mpmd_constant: out of memory for %zu bytes", bytes);
    memcpy(copy, data, bytes);
    mpmd_value r = mpmd_emit(g, &mpmd_op_constant, 0, NULL, t);
    mpmd_node *n = mpmd_node_of(g, r);
    if (!n) {
        free(copy);
        return MPMD_NONE;
    }
    n->data = copy;
    return r;
}

void mpmd_leaf_initial_value(const mpmd_node *n, void *dst, uint64_t seed) {
    if (n->op != &mpmd_op_constant) {
        mpmd_init_fill(dst, &n->type, n->name, n->init, seed);
    } else if (n->data) {
        memcpy(dst, n->data, mpmd_type_bytes(&n->type));
    } else {
        for (int64_t k = 0; k < mpmd_type_numel(&n->type); k++)
            ((float *)dst)[k] = n->fa[0];
    }
}

/* ---- the microbatch loop ---------------------------------------------------- */

void mpmd_loop_begin(mpmd_graph *g, int num_microbatches) {
    if (!g || g->status != MPMD_OK) return;
    if (g->n_micro > 0) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  g->implicit_loop
                      ? "mpmd_loop_begin: stage markers before it made the graph a loop of one "
                        "microbatch; begin the loop before the first marker"
                      : "mpmd_loop_begin: the graph already has a microbatch loop (one per step)");
        return;
    }
    if (num_microbatches < 1) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_loop_begin: %d microbatches; at least 1 is required",
                  num_microbatches);
        return;
    }
    g->n_micro = num_microbatches;
    g->region = MPMD_REGION_BODY;
    g->cur_stage = 0;
    /* an op over the model axis made so far is before the loop for good
     * (without this call, a stage marker could have made it the body) */
    char why[MPMD_ERROR_MSG_MAX];
    for (int i = 0; i < g->n_nodes; i++)
        if (mpmd_model_axis_misplaced(g, i, why, sizeof why)) {
            mpmd_fail(g, MPMD_ERR_INVALID, "%s", why);
            return;
        }
}

void mpmd_loop_end(mpmd_graph *g) {
    if (!g || g->status != MPMD_OK) return;
    if (g->region != MPMD_REGION_BODY) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_loop_end: not inside a loop (call mpmd_loop_begin first)");
        return;
    }
    if (g->remat) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_loop_end: a rematerialisation region is still open (call mpmd_remat_end)");
        return;
    }
    g->region = MPMD_REGION_POST;
}

/* ---- rematerialisation ------------------------------------------------------ */

void mpmd_remat_begin(mpmd_graph *g, mpmd_remat_policy policy) {
    if (!g || g->status != MPMD_OK) return;
    if (policy < MPMD_REMAT_SAVE_NOTHING || policy > MPMD_REMAT_SAVE_NAMED) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_remat_begin: policy %d; use MPMD_REMAT_SAVE_NOTHING, _DOTS or _NAMED", (int)policy);
        return;
    }
    if (g->region != MPMD_REGION_BODY) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_remat_begin: rematerialisation regions belong inside the microbatch loop body");
        return;
    }
    if (g->remat) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_remat_begin: a region is already open (regions do not nest)");
        return;
    }
    g->remat = (int)policy;
}

void mpmd_remat_end(mpmd_graph *g) {
    if (!g || g->status != MPMD_OK) return;
    if (!g->remat) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_remat_end: no region is open (call mpmd_remat_begin first)");
        return;
    }
    g->remat = 0;
}

mpmd_value mpmd_remat_save(mpmd_graph *g, mpmd_value x) {
    if (!mpmd_check_operands(g, "mpmd_remat_save", 1, &x)) return MPMD_NONE;
    mpmd_node_of(g, x)->flags |= MPMD_NODE_REMAT_SAVE;
    return x;
}

mpmd_value mpmd_microbatch(mpmd_graph *g, mpmd_value x) {
    if (!mpmd_check_operands(g, "mpmd_microbatch", 1, &x)) return MPMD_NONE;
    if (g->region != MPMD_REGION_BODY)
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_microbatch: only inside the loop body (after mpmd_loop_begin)");
    const mpmd_node *xn = mpmd_node_of(g, x);
    if (xn->region != MPMD_REGION_PRE)
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_microbatch: %%%d is not a before-loop value", (int)x.id);
    mpmd_type t = xn->type;
    if (t.ndim < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_microbatch: a scalar (%s) has no batch axis to split",
                         mpmd_tstr(g, x));
    if (t.dim[0] % g->n_micro != 0)
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "mpmd_microbatch: batch of %lld rows (%s) is not divisible by %d microbatches",
                         (long long)t.dim[0], mpmd_tstr(g, x), g->n_micro);
    t.dim[0] /= g->n_micro;
    return mpmd_emit(g, &mpmd_op_microbatch, 1, &x, t);
}

mpmd_value mpmd_loop_reduce(mpmd_graph *g, mpmd_value x, mpmd_reduce_op op) {
    if (!mpmd_check_operands(g, "mpmd_loop_reduce", 1, &x)) return MPMD_NONE;
    const mpmd_node *xn = mpmd_node_of(g, x);
    if (xn->region != MPMD_REGION_BODY)
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_loop_reduce: %%%d (%s) is not a loop-body value",
                         (int)x.id, mpmd_tstr(g, x));
    if (op != MPMD_REDUCE_ADD && op != MPMD_REDUCE_MAX && op != MPMD_REDUCE_CONCAT)
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_loop_reduce: unknown reduction %d", (int)op);
    if (!mpmd_dtype_is_float(xn->type.dtype) && op != MPMD_REDUCE_CONCAT)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_loop_reduce: add and max need float values, got %s",
                         mpmd_tstr(g, x));
    if (op == MPMD_REDUCE_CONCAT && xn->type.ndim < 1)
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_loop_reduce: concat needs at least one axis, got %s",
                         mpmd_tstr(g, x));
    if (op == MPMD_REDUCE_ADD && (xn->flags & MPMD_NODE_GRADSUM)) {
        /* A parameter's gradient summed over its uses: reduce each use over
         * the microbatches on its own and add the sums after the loop, in the
         * order of the uses (see mpmd.h). */
        mpmd_value a = {xn->in[0]}, b = {xn->in[1]};
        mpmd_value ra = mpmd_loop_reduce(g, a, op);
        mpmd_value rb = mpmd_loop_reduce(g, b, op);
        int saved = g->region;
        g->region = MPMD_REGION_POST;
        mpmd_value r = mpmd_add(g, ra, rb);
        g->region = saved;
        return r;
    }
    mpmd_type t = xn->type;
    if (op == MPMD_REDUCE_CONCAT) t.dim[0] *= g->n_micro;
    int saved = g->region;
    g->region = MPMD_REGION_POST;
    int saved_bwd = g->emit_bwd;
    g->emit_bwd = 0;
    mpmd_value r = mpmd_emit(g, &mpmd_op_loop_reduce, 1, &x, t);
    g->emit_bwd = saved_bwd;
    g->region = saved;
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) n->ia[0] = op;
    return r;
}

/* ---- keeping values: in a loopless graph, through the implicit loop of one ---- */

/* In the implicit loop of one, keeping a body value keeps its loop result,
 * read in its place: the sum (float) or the stack (i32) over the one
 * microbatch, which is the value itself, bit for bit. */
void mpmd_keep_implicit(mpmd_graph *g, mpmd_value v) {
    const mpmd_type t = *mpmd_type_of(g, v);
    if (t.dtype == MPMD_TOKEN) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_keep: %%%d is a token, an ordering of effects with no value to read", (int)v.id);
        return;
    }
    if (!mpmd_dtype_is_float(t.dtype) && t.ndim < 1) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_keep: %%%d (%s) is an integer scalar of a loopless graph's body; keep "
                  "it as a tensor of one element",
                  (int)v.id, mpmd_tstr(g, v));
        return;
    }
    mpmd_value r =
        mpmd_loop_reduce(g, v, mpmd_dtype_is_float(t.dtype) ? MPMD_REDUCE_ADD : MPMD_REDUCE_CONCAT);
    mpmd_node *rn = mpmd_node_of(g, r);
    if (!rn) return;
    rn->flags |= MPMD_NODE_KEEP;
    if (v.id >= g->n_alias) {
        int cap = g->n_alias ? g->n_alias : 64;
        while (cap <= v.id)
            cap *= 2;
        int32_t *na = realloc(g->alias, (size_t)cap * sizeof *na);
        if (!na) {
            mpmd_fail(g, MPMD_ERR_NOMEM, "mpmd_keep: out of memory");
            return;
        }
        for (int i = g->n_alias; i < cap; i++)
            na[i] = -1;
        g->alias = na, g->n_alias = cap;
    }
    g->alias[v.id] = r.id;
}

void mpmd_keep(mpmd_graph *g, mpmd_value v) {
    if (!g) return;
    mpmd_node *n = mpmd_node_of(g, v);
    if (!n) {
        if (g->status == MPMD_OK) mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_keep: not a value of this graph");
        return;
    }
    if (n->region == MPMD_REGION_BODY && g->implicit_loop && g->region == MPMD_REGION_BODY) {
        if (g->status == MPMD_OK && !(v.id < g->n_alias && g->alias[v.id] >= 0)) mpmd_keep_implicit(g, v);
        return;
    }
    if (n->region == MPMD_REGION_BODY) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "mpmd_keep: %%%d is a loop-body value (one per microbatch); keep its mpmd_loop_reduce instead",
            (int)v.id);
        return;
    }
    if (n->type.dtype == MPMD_TOKEN) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_keep: %%%d (%s) is a token, an ordering of effects with no value to read", (int)v.id,
                  n->op->name);
        return;
    }
    n->flags |= MPMD_NODE_KEEP;
}

/* ---- stage markers ---------------------------------------------------------- */

static mpmd_value marker(mpmd_graph *g, mpmd_value x, int stage, int backward) {
    mpmd_value r = mpmd_emit(g, &mpmd_op_stage_marker, 1, &x, mpmd_node_of(g, x)->type);
    mpmd_node *n = mpmd_node_of(g, r);
    if (n) {
        n->ia[0] = stage;
        n->ia[1] = backward;
        if (!backward) n->stage = stage;
    }
    return r;
}

/* A stage marker in a graph without a loop (JaxPP's mpmd_jit_by_yield):
 * the whole function becomes a loop of one microbatch. Every op made so far
 * (not the leaves) moves into the body, as stage 0; later ops are body
 * ops; a kept value is read through its loop result. */
static void implicit_loop(mpmd_graph *g) {
    g->n_micro = 1;
    g->region = MPMD_REGION_BODY;
    g->cur_stage = 0;
    g->implicit_loop = 1;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        mpmd_node *n = &g->nodes[i];
        if (n->region != MPMD_REGION_PRE || (n->op->flags & MPMD_OPF_LEAF)) continue;
        if (n->op == &mpmd_op_assign) { /* it would store a body value once per microbatch */
            mpmd_fail(
                g, MPMD_ERR_INVALID,
                "mpmd_enter_stage: \"%s\" is assigned before the first stage marker of a graph without "
                "mpmd_loop_begin (a decoding layer's cache, say), and the marker makes those ops the loop "
                "body, where nothing is assigned; begin the loop (mpmd_loop_begin) before building them",
                mpmd_node_subject(g, i) ? mpmd_node_subject(g, i) : "a variable");
            return;
        }
        n->region = MPMD_REGION_BODY;
        n->stage = 0;
    }
    for (int i = 0; i < n0 && g->status == MPMD_OK; i++)
        if (g->nodes[i].region == MPMD_REGION_BODY && (g->nodes[i].flags & MPMD_NODE_KEEP)) {
            g->nodes[i].flags &= (uint16_t)~MPMD_NODE_KEEP;
            mpmd_keep_implicit(g, (mpmd_value){i});
        }
}

void mpmd_enter_stage_n(mpmd_graph *g, int n, mpmd_value *xs) {
    if (!g) { /* no graph: nothing to mark, nowhere to say so */
        for (int i = 0; xs && i < n; i++)
            xs[i] = MPMD_NONE;
        return;
    }
    if (n < 1) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_enter_stage: no values to mark");
        return;
    }
    if (!mpmd_check_operands(g, "mpmd_enter_stage", n, xs)) {
        for (int i = 0; xs && i < n; i++)
            xs[i] = MPMD_NONE;
        return;
    }
    if (g->region == MPMD_REGION_PRE && g->n_micro == 0) implicit_loop(g);
    if (g->status != MPMD_OK) {
        for (int i = 0; i < n; i++)
            xs[i] = MPMD_NONE;
        return;
    }
    if (g->region != MPMD_REGION_BODY) {
        mpmd_fail(g, MPMD_ERR_INVALID,
                  "mpmd_enter_stage: stage markers belong inside the microbatch loop body, not after "
                  "mpmd_loop_end");
        for (int i = 0; i < n; i++)
            xs[i] = MPMD_NONE;
        return;
    }
    for (int i = 0; i < n; i++)
        xs[i] = marker(g, xs[i], g->cur_stage, 0);
    g->cur_stage++;
    g->n_markers++;
}

mpmd_value mpmd_enter_stage(mpmd_graph *g, mpmd_value x) {
    mpmd_enter_stage_n(g, 1, &x);
    return x;
}

/* The transpose of a stage marker is a backward marker of the same stage. */
static void vjp_marker(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin) {
    gin[0] = marker(g, gy, (int)n->ia[0], 1);
}

/* ---- assignment ------------------------------------------------------------- */

mpmd_value mpmd_assign(mpmd_graph *g, mpmd_value var, mpmd_value value) {
    mpmd_value in[2] = {var, value};
    if (!mpmd_check_operands(g, "mpmd_assign", 2, in)) return MPMD_NONE;
    const mpmd_node *vn = mpmd_node_of(g, var);
    if (!mpmd_node_is_storage(vn))
        return mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_assign: %%%d is not a parameter or variable",
                         (int)var.id);
    if (!mpmd_type_equal(&vn->type, mpmd_type_of(g, value)))
        return mpmd_fail(g, MPMD_ERR_SHAPE, "mpmd_assign: \"%s\" is %s but the value is %s", vn->name,
                         mpmd_tstr(g, var), mpmd_tstr(g, value));
    if (g->region == MPMD_REGION_BODY)
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "mpmd_assign: \"%s\" assigned inside the loop body; assign after the loop",
                         vn->name);
    mpmd_type tok;
    memset(&tok, 0, sizeof tok);
    tok.dtype = MPMD_TOKEN;
    return mpmd_emit(g, &mpmd_op_assign, 2, in, tok);
}
