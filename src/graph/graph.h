/* graph.h - the graph's internals: nodes, op descriptors, and the helpers
 * every op constructor uses.
 *
 * A value is the single output of one node; value id == node id. Nodes are
 * appended in creation order, which is always a topological order, and the
 * executor runs them in that order within each region.
 *
 * An op is described once, by an mpmd_op_desc in the file of its family
 * (src/ops/<family>.c): name, arity, in-place rule, attribute printer and
 * gradient (VJP) rule. Its public constructor checks the operands, computes
 * the output type and calls mpmd_emit. Kernels live per backend
 * (src/backend/cpu/<family>.c), keyed by the descriptor's address.
 */
#ifndef MPMD_GRAPH_INTERNAL_H
#define MPMD_GRAPH_INTERNAL_H

#include "mpmd.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" { /* the CUDA backend's files are CUDA C++ */
#endif

typedef struct mpmd_node mpmd_node;

/* Regions of a step. A graph without a loop has only MPMD_REGION_PRE. */
enum { MPMD_REGION_PRE = 0, MPMD_REGION_BODY = 1, MPMD_REGION_POST = 2 };

/* Op descriptor flags. */
enum {
    MPMD_OPF_LEAF = 1u << 0,        /* input, param, variable, constant: no kernel of its own */
    MPMD_OPF_SIDE_EFFECT = 1u << 1, /* writes persistent state; never removed */
    MPMD_OPF_STRUCTURAL = 1u << 2,  /* handled by the executor (microbatch, loop_reduce) */
    MPMD_OPF_COLLECTIVE = 1u << 3,  /* run by the step's wire over the model axis (ops/collective.c) */
    MPMD_OPF_MESH = 1u << 4,        /* run by the runtime over every point of the mesh (ops/clip.c) */
    MPMD_OPF_STORAGE = 1u << 5,     /* param, variable: persistent state a step keeps between runs */
    MPMD_OPF_LOOP_OUT = 1u << 6     /* loop_reduce: takes a body value out of the loop */
};

/* The gradient rule: given the node and the cotangent gy of its output
 * (same type as the output), set gin[i] to the cotangent of input i, or
 * leave MPMD_NONE where no gradient flows (i32 inputs, constants). `n`
 * points to a copy of the node: it stays valid while the rule emits. */
typedef void (*mpmd_vjp_fn)(mpmd_graph *g, const mpmd_node *n, mpmd_value gy, mpmd_value *gin);

/* Appends the op's attributes, e.g. " axes=[0,1] keepdims=0", to buf. */
typedef void (*mpmd_attr_fn)(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len);

typedef struct mpmd_op_desc {
    const char *name;   /* as printed: "add", "matmul", ... */
    int n_in;           /* number of inputs, -1 for variadic */
    int inplace;        /* input whose buffer the output may reuse when that input dies here, or -1 */
    unsigned flags;     /* MPMD_OPF_* */
    mpmd_attr_fn attrs; /* NULL: no attributes to print */
    mpmd_vjp_fn vjp;    /* NULL: not differentiable (mpmd_grad reports it) */
} mpmd_op_desc;

/* Node flags. */
enum {
    MPMD_NODE_TRAINABLE = 1u << 0,  /* a parameter */
    MPMD_NODE_KEEP = 1u << 1,       /* readable after a run */
    MPMD_NODE_GRADSUM = 1u << 2,    /* an add made by mpmd_grad to sum a parameter's per-use gradients */
    MPMD_NODE_REMAT_SAVE = 1u << 3, /* kept for the backward in a MPMD_REMAT_SAVE_NAMED region */
    MPMD_NODE_RECOMPUTED = 1u << 4  /* a forward op's copy that mpmd_grad made for the backward (remat) */
};

#define MPMD_NODE_IATTR 8
/* A parameter split over the model axis (mpmd_param_split) and the Adam
 * state made for it: ia[MPMD_SPLIT_AXIS] = the axis + 1 (0: whole on every
 * model rank), ia[MPMD_SPLIT_GROUPS] = groups (the axis is seen as [groups,
 * M, n / (groups M)] and rank m holds [:, m, :]). */
enum { MPMD_SPLIT_AXIS = 6, MPMD_SPLIT_GROUPS = 7 };
/* Mesh axes a collective names. */
enum { MPMD_AXIS_MPMD = 0, MPMD_AXIS_DATA = 1, MPMD_AXIS_MODEL = 2 };
/* Where ops over the model axis (ops/collective.c) may stand
 * (graph/model_axis.c). A model-axis node keeps the public call that made
 * it in ia[MPMD_CALL_ATTR], for messages: the ops mpmd_embedding_split and
 * mpmd_cross_entropy_split make are named after them, the user's call; a
 * gradient's (MPMD_CALL_NONE) by its op. */
enum { MPMD_CALL_ATTR = 3 };
enum {
    MPMD_CALL_NONE = 0,
    MPMD_CALL_ALL_REDUCE,
    MPMD_CALL_PVARY,
    MPMD_CALL_ALL_GATHER,
    MPMD_CALL_REDUCE_SCATTER,
    MPMD_CALL_EMBEDDING_SPLIT,
    MPMD_CALL_CE_SPLIT
};
/* The name of the call that made model-axis node n. */
const char *mpmd_model_axis_call(const mpmd_node *n);
/* Why an op over the model axis cannot be made (made = 0) or run (made = 1)
 * in `region` of g as it stands, into buf (len bytes), naming fn and
 * `which` (" (%5)", or ""); "" when it can. */
void mpmd_model_axis_where_wrong(const mpmd_graph *g, int region, int made, const char *fn, const char *which,
                                 char *buf, size_t len);
/* 1 when node i is an op over the model axis that no step can run where it
 * is: outside the microbatch loop body, or in a graph of one model rank;
 * why (len bytes) gets the message, which names the public call that made
 * it. 0 (why "") otherwise. */
int mpmd_model_axis_misplaced(const mpmd_graph *g, int i, char *why, size_t len);
#define MPMD_NODE_FATTR 4

struct mpmd_node {
    int32_t id; /* this node's value id */
    const mpmd_op_desc *op;
    mpmd_type type; /* output type */
    int n_in;
    int32_t *in;                 /* input value ids (owned by the graph) */
    int64_t ia[MPMD_NODE_IATTR]; /* integer attributes; meaning per op */
    float fa[MPMD_NODE_FATTR];   /* float attributes; meaning per op */
    void *data;                  /* constant data (owned), or NULL */
    char *name;                  /* full name of inputs, params, variables (owned), or NULL */
    mpmd_init init;              /* params and variables */
    uint8_t region;              /* MPMD_REGION_* */
    uint8_t is_bwd;              /* made by mpmd_grad */
    uint16_t flags;              /* MPMD_NODE_* */
    int32_t stage; /* pipeline stage in trace order (markers seen before it), -1 outside the body */
    int32_t fwd;   /* for backward ops: the forward node they differentiate, else -1 */
    int8_t remat;  /* the mpmd_remat_policy of the region that made it, 0: none */
};

struct mpmd_graph {
    mpmd_node *nodes;
    int n_nodes, cap_nodes;
    void **old_nodes; /* earlier node arrays, freed with the graph (see mpmd_emit) */
    int n_old;
    mpmd_status status;
    char err[MPMD_ERROR_MSG_MAX];
    /* scopes: "a/b/c" and the lengths to pop back to */
    char scope[512];
    int scope_len[32];
    int n_scopes;
    /* loop state */
    int region;               /* region new nodes go to */
    int n_micro;              /* microbatches (0: no loop) */
    int cur_stage;            /* markers seen so far in the body */
    int n_markers;            /* markers in the body (forward) */
    mpmd_dtype compute_dtype; /* what mpmd_embed emits (mpmd_set_compute_dtype) */
    int unfused_attention;    /* mpmd_attention as a composition (mpmd_set_fused_attention(g, 0)) */
    int model_parallel;       /* model ranks the graph is one of (mpmd_set_tensor_parallel), 1: none */
    float layer_dropout;      /* the blocks' dropout rate (mpmd_set_layer_dropout), 0: none */
    int n_dropout;            /* dropout ops made by mpmd_dropout so far: the next one's stream */
    /* a loop of one opened by a stage marker without mpmd_loop_begin: the
     * graph stays in the body (no mpmd_loop_end needed), and a kept body
     * value v is read through its loop result alias[v] */
    int implicit_loop;
    int32_t *alias;
    int n_alias;
    mpmd_value layer_dropout_key;
    /* generation (mpmd_set_decode, src/layers/decode.c): while decode_len >
     * 0 the attention layers run new positions against key/value caches of
     * decode_len positions, at decode_positions (an i32 [B, t] before the
     * loop); table f32 [L, 1] and row f32 [L] hold 0 .. L-1 (the masks),
     * neg is -inf (a masked score) */
    int64_t decode_len;
    mpmd_value decode_positions, decode_table, decode_row, decode_neg;
    /* the rotary layers' frequency adjustment (mpmd_set_rope_scaling) */
    mpmd_rope_scaling rope_scaling;
    /* tagging of nodes emitted by a VJP rule */
    int emit_bwd, emit_stage, emit_fwd;
    int remat;         /* the open rematerialisation region's policy, 0: none */
    char tbuf[4][160]; /* rotating buffers for mpmd_tstr */
    int tnext;
};

/* ---- helpers for op constructors ---------------------------------------- */

/* Operand v for printouts and messages: "%5", or with a name when it has
 * one (an input, a parameter, a variable): "%5 \"d0/kernel\"". Returns buf. */
const char *mpmd_operand_str(const mpmd_graph *g, int v, char *buf, size_t len);
/* What node i is about, for messages: its own name, or its first named
 * operand's ("d1/kernel" for that parameter's AdamW update); NULL if none. */
const char *mpmd_node_subject(const mpmd_graph *g, int i);

/* The node of a value; NULL for an invalid id. The pointer is valid until the
 * next node is appended. */
mpmd_node *mpmd_node_of(const mpmd_graph *g, mpmd_value v);
/* The value a read of v reads: v's loop result where the implicit loop of
 * one made one for a kept body value, else v. */
mpmd_value mpmd_read_target(const mpmd_graph *g, mpmd_value v);
void mpmd_keep_implicit(mpmd_graph *g, mpmd_value v);
/* The loop is still open: in the body of an explicit loop (an implicit one
 * needs no end). */
static inline int mpmd_loop_open(const mpmd_graph *g) {
    return g->n_micro > 0 && g->region == MPMD_REGION_BODY && !g->implicit_loop;
}
const mpmd_type *mpmd_type_of(const mpmd_graph *g, mpmd_value v);

/* 1 if every operand is a value of g. Otherwise 0, and (unless the graph
 * already failed) records "<op>: operand <i> is not a value of this graph". */
int mpmd_check_operands(mpmd_graph *g, const char *op, int n, const mpmd_value *in);

/* Record an error (the first one wins), prefixed with the current scope;
 * returns MPMD_NONE so a constructor can `return mpmd_fail(...)`. */
mpmd_value mpmd_fail(mpmd_graph *g, mpmd_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* "f32[4,16]" of a value, in one of four rotating buffers of the graph (so
 * up to four can appear in one message). */
const char *mpmd_tstr(mpmd_graph *g, mpmd_value v);
const char *mpmd_tstr_type(mpmd_graph *g, const mpmd_type *t);

/* Append a node with these inputs and output type; returns its value (or
 * MPMD_NONE when out of memory). Region, stage and backward tags come from
 * the graph's current state. Attributes are set by the caller right after,
 * through mpmd_node_of(g, v). */
mpmd_value mpmd_emit(mpmd_graph *g, const mpmd_op_desc *op, int n_in, const mpmd_value *in, mpmd_type out);
/* 1 when a tensor of these dims (none negative) and elem_bytes per element
 * has at most 2^62 bytes, the bound mpmd_emit puts on every type; the
 * product is checked before it is formed, so nothing overflows. */
int mpmd_dims_fit(int ndim, const int64_t *dims, int64_t elem_bytes);
/* The same op as node src (its attributes too) on other operands: a
 * recomputation. */
mpmd_value mpmd_emit_copy(mpmd_graph *g, const mpmd_node *src, const mpmd_value *in);

/* Type constructors. */
mpmd_type mpmd_make_type(mpmd_dtype dt, int ndim, const int64_t *dims);
int mpmd_type_equal(const mpmd_type *a, const mpmd_type *b);

/* Normalise an axis (negative counts from the end); -1 if out of range. */
int mpmd_norm_axis(int axis, int ndim);

/* Live nodes (malloc'ed flags, one per node): parameters and variables,
 * side effects, kept values and everything they depend on. Other nodes
 * (say a gradient nobody reduces) need not run. NULL when out of memory. */
unsigned char *mpmd_live_nodes(const mpmd_graph *g);

/* The trainable parameters sorted by full name (the order params_sha256
 * hashes them in): a malloc'ed array of *n nodes, NULL when out of memory.
 * Valid until the graph grows. */
const mpmd_node **mpmd_params_by_name(const mpmd_graph *g, int *n);

/* Sum of two gradient contributions (used by mpmd_grad and VJP rules). */
mpmd_value mpmd_grad_add(mpmd_graph *g, mpmd_value a, mpmd_value b);

/* The value a parameter, variable or constant starts with, written to dst
 * (its type's size): constants their data or fill, the others their
 * initialiser under `seed`. The runtime sets up storage with
 * it. */
void mpmd_leaf_initial_value(const mpmd_node *n, void *dst, uint64_t seed);

/* The structural ops, for the executor and the compiler to recognise. */
extern const mpmd_op_desc mpmd_op_input, mpmd_op_param, mpmd_op_variable, mpmd_op_constant;
extern const mpmd_op_desc mpmd_op_microbatch, mpmd_op_loop_reduce, mpmd_op_stage_marker, mpmd_op_assign;
/* The dtype conversion (src/ops/elementwise.c), which every backend runs itself. */
extern const mpmd_op_desc mpmd_op_cast;
extern const mpmd_op_desc mpmd_op_all_reduce, mpmd_op_pvary, mpmd_op_all_gather, mpmd_op_reduce_scatter,
    mpmd_op_axis_slice, mpmd_op_axis_embedding, mpmd_op_axis_embedding_grad, mpmd_op_axis_pick,
    mpmd_op_axis_pick_grad;

/* Whether a model-axis collective reads the other model ranks' inputs
 * (all_reduce, all_gather, reduce_scatter: the backend's model_combine);
 * the others read only the rank's own (model_local). */
static inline int mpmd_collective_exchanges(const mpmd_op_desc *op) {
    return op == &mpmd_op_all_reduce || op == &mpmd_op_all_gather || op == &mpmd_op_reduce_scatter;
}

/* The value a node defines, and the value of its i-th input. */
static inline mpmd_value mpmd_out(const mpmd_node *n) { return (mpmd_value){n->id}; }
static inline mpmd_value mpmd_in(const mpmd_node *n, int i) { return (mpmd_value){n->in[i]}; }

static inline int mpmd_node_is_storage(const mpmd_node *n) { return (n->op->flags & MPMD_OPF_STORAGE) != 0; }

#ifdef __cplusplus
}
#endif

#endif
