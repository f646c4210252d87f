/* The graph: node storage, types, sticky errors, scopes, lookups and the
 * text printout. Op constructors live with their families in src/ops/. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* ---- types ---------------------------------------------------------------- */

int64_t mpmd_type_numel(const mpmd_type *t) {
    if (!t || t->dtype == MPMD_TOKEN) return 0; /* no type (NULL) holds nothing */
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dim[i];
    return n;
}

/* The dtype table: name and element size. */
static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtypes[] = {
    [MPMD_F32] = {"f32", 4, 1},   [MPMD_I32] = {"i32", 4, 0}, [MPMD_TOKEN] = {"token", 0, 0},
    [MPMD_BF16] = {"bf16", 2, 1}, [MPMD_F16] = {"f16", 2, 1},
};

static int known_dtype(mpmd_dtype d) { return (unsigned)d < sizeof dtypes / sizeof dtypes[0]; }

size_t mpmd_dtype_size(mpmd_dtype d) { return known_dtype(d) ? dtypes[d].size : 0; }
int mpmd_dtype_is_float(mpmd_dtype d) { return known_dtype(d) && dtypes[d].is_float; }

size_t mpmd_type_bytes(const mpmd_type *t) {
    return t ? (size_t)mpmd_type_numel(t) * mpmd_dtype_size(t->dtype) : 0;
}

const char *mpmd_dtype_name(mpmd_dtype d) { return known_dtype(d) ? dtypes[d].name : "?"; }

char *mpmd_type_str(const mpmd_type *t, char *buf, size_t len) {
    if (!buf) return NULL;
    if (!t) {
        snprintf(buf, len, "(no type)");
        return buf;
    }
    size_t k = (size_t)snprintf(buf, len, "%s", mpmd_dtype_name(t->dtype));
    if (t->dtype == MPMD_TOKEN) return buf;
    if (k < len) k += (size_t)snprintf(buf + k, len - k, "[");
    for (int i = 0; i < t->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ",%lld" : "%lld", (long long)t->dim[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

mpmd_type mpmd_make_type(mpmd_dtype dt, int ndim, const int64_t *dims) {
    mpmd_type t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    for (int i = 0; i < ndim && i < MPMD_MAX_DIMS; i++)
        t.dim[i] = dims[i];
    return t;
}

int mpmd_type_equal(const mpmd_type *a, const mpmd_type *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

int mpmd_norm_axis(int axis, int ndim) {
    if (axis < 0) axis += ndim;
    return (axis < 0 || axis >= ndim) ? -1 : axis;
}

/* ---- graph lifetime ------------------------------------------------------- */

mpmd_graph *mpmd_graph_new(void) {
    mpmd_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->region = MPMD_REGION_PRE;
    g->model_parallel = 1;
    g->emit_stage = -1;
    g->emit_fwd = -1;
    g->decode_positions = g->decode_table = g->decode_row = g->decode_neg = MPMD_NONE;
    return g;
}

void mpmd_graph_free(mpmd_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].in);
        free(g->nodes[i].data);
        free(g->nodes[i].name);
    }
    free(g->nodes);
    for (int i = 0; i < g->n_old; i++)
        free(g->old_nodes[i]);
    free(g->old_nodes);
    free(g->alias);
    free(g);
}

mpmd_status mpmd_set_compute_dtype(mpmd_graph *g, mpmd_dtype dtype) {
    if (!g) return MPMD_ERR_INVALID;
    if (!mpmd_dtype_is_float(dtype)) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_set_compute_dtype: %s is not a float dtype (f32, bf16, f16)",
                  mpmd_dtype_name(dtype));
        return MPMD_ERR_INVALID;
    }
    g->compute_dtype = dtype;
    return MPMD_OK;
}

mpmd_dtype mpmd_compute_dtype(const mpmd_graph *g) { return g ? g->compute_dtype : MPMD_F32; }

mpmd_status mpmd_set_fused_attention(mpmd_graph *g, int fused) {
    if (!g) return MPMD_ERR_INVALID;
    g->unfused_attention = !fused;
    return MPMD_OK;
}

mpmd_status mpmd_set_layer_dropout(mpmd_graph *g, float rate, mpmd_value key) {
    const char *fn = "mpmd_set_layer_dropout";
    if (!g) return MPMD_ERR_INVALID;
    if (!(rate >= 0.0f && rate < 1.0f)) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: rate %g is outside [0, 1)", fn, (double)rate);
        return MPMD_ERR_INVALID;
    }
    if (rate > 0.0f) {
        if (!mpmd_check_operands(g, fn, 1, &key)) return g->status;
        const mpmd_type *t = mpmd_type_of(g, key);
        if (t->dtype != MPMD_I32 || mpmd_type_numel(t) != 2) {
            mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the key must be i32 with 2 elements (a seed pair), got %s", fn,
                      mpmd_tstr(g, key));
            return MPMD_ERR_SHAPE;
        }
    }
    g->layer_dropout = rate;
    g->layer_dropout_key = rate > 0.0f ? key : MPMD_NONE;
    return MPMD_OK;
}

mpmd_status mpmd_graph_status(const mpmd_graph *g) { return g ? g->status : MPMD_ERR_INVALID; }
const char *mpmd_graph_error(const mpmd_graph *g) { return g ? g->err : "no graph (NULL)"; }
int mpmd_graph_num_values(const mpmd_graph *g) { return g ? g->n_nodes : 0; }
int mpmd_graph_num_microbatches(const mpmd_graph *g) { return g ? g->n_micro : 0; }

/* ---- errors ---------------------------------------------------------------- */

mpmd_value mpmd_fail(mpmd_graph *g, mpmd_status code, const char *fmt, ...) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE; /* the first error wins */
    g->status = code;
    size_t k = 0;
    if (g->n_scopes > 0) k = (size_t)snprintf(g->err, sizeof g->err, "in %s: ", g->scope);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err + k, sizeof g->err - k, fmt, ap);
    va_end(ap);
    return MPMD_NONE;
}

int mpmd_check_operands(mpmd_graph *g, const char *op, int n, const mpmd_value *in) {
    if (!g) return 0; /* no graph: nothing to build, nowhere to say so */
    if (n > 0 && !in) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: %d operands but none given (NULL)", op, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (in[i].id < 0 || in[i].id >= g->n_nodes) {
            /* MPMD_NONE after an earlier error propagates silently; anything
             * else is a value from another graph or garbage. */
            if (g->status == MPMD_OK)
                mpmd_fail(g, MPMD_ERR_INVALID, "%s: operand %d (id %d) is not a value of this graph", op, i,
                          (int)in[i].id);
            return 0;
        }
    }
    return 1;
}

const char *mpmd_tstr_type(mpmd_graph *g, const mpmd_type *t) {
    char *b = g->tbuf[g->tnext];
    g->tnext = (g->tnext + 1) % 4;
    return mpmd_type_str(t, b, sizeof g->tbuf[0]);
}

const char *mpmd_tstr(mpmd_graph *g, mpmd_value v) {
    if (v.id < 0 || v.id >= g->n_nodes) return "<none>";
    return mpmd_tstr_type(g, &g->nodes[v.id].type);
}

/* ---- nodes ----------------------------------------------------------------- */

mpmd_node *mpmd_node_of(const mpmd_graph *g, mpmd_value v) {
    if (!g || v.id < 0 || v.id >= g->n_nodes) return NULL;
    return &g->nodes[v.id];
}

const mpmd_type *mpmd_type_of(const mpmd_graph *g, mpmd_value v) {
    mpmd_node *n = mpmd_node_of(g, v);
    return n ? &n->type : NULL;
}

int mpmd_dims_fit(int ndim, const int64_t *dims, int64_t elem_bytes) {
    const int64_t limit = (int64_t)1 << 62;
    int64_t bytes = elem_bytes > 0 ? elem_bytes : 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] > 0 && bytes > limit / dims[d])) return 0;
        bytes *= dims[d];
    }
    return 1;
}

mpmd_value mpmd_emit(mpmd_graph *g, const mpmd_op_desc *op, int n_in, const mpmd_value *in, mpmd_type out) {
    if (!g || g->status != MPMD_OK) return MPMD_NONE;
    /* every type must have an element count and a byte size that fit:
     * at most 2^62 bytes */
    if (out.dtype != MPMD_TOKEN && !mpmd_dims_fit(out.ndim, out.dim, (int64_t)mpmd_dtype_size(out.dtype))) {
        char tb[160];
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s: the result %s has more elements than fit in memory (at most 2^62 bytes)",
                         op->name, mpmd_type_str(&out, tb, sizeof tb));
    }
    /* Values flow forward through the regions: before loop -> body -> after
     * loop, and out of the body only through mpmd_loop_reduce. */
    for (int i = 0; i < n_in; i++) {
        int r = g->nodes[in[i].id].region;
        if (r == g->region || r == MPMD_REGION_PRE) continue;
        if (r == MPMD_REGION_BODY && (op->flags & MPMD_OPF_LOOP_OUT)) continue;
        if (r == MPMD_REGION_BODY)
            return mpmd_fail(
                g, MPMD_ERR_INVALID,
                "%s: operand %d (%%%d) is a loop-body value (one per microbatch); outside the body "
                "use its mpmd_loop_reduce",
                op->name, i, (int)in[i].id);
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: operand %d (%%%d) is an after-loop value, used %s",
                         op->name, i, (int)in[i].id,
                         g->region == MPMD_REGION_BODY ? "inside the loop body" : "before the loop");
    }
    if (g->n_nodes == g->cap_nodes) {
        /* Grow into a new array and keep the old one until the graph is
         * freed: a constructor that read a type through a pointer into the
         * array before emitting can still read it after (the nodes it saw
         * never change). Twice the final size at most. */
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
        mpmd_node *nn = malloc((size_t)cap * sizeof *nn);
        void **olds = realloc(g->old_nodes, (size_t)(g->n_old + 1) * sizeof *olds);
        if (!nn || !olds) {
            free(nn);
            if (olds) g->old_nodes = olds;
            return mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory growing the graph", op->name);
        }
        if (g->n_nodes) memcpy(nn, g->nodes, (size_t)g->n_nodes * sizeof *nn);
        g->old_nodes = olds;
        g->old_nodes[g->n_old++] = g->nodes;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    mpmd_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    if (n_in > 0) {
        n->in = malloc((size_t)n_in * sizeof *n->in);
        if (!n->in) return mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory", op->name);
        for (int i = 0; i < n_in; i++)
            n->in[i] = in[i].id;
    }
    n->id = g->n_nodes;
    n->op = op;
    n->type = out;
    n->n_in = n_in;
    n->region = (uint8_t)g->region;
    n->fwd = -1;
    if (g->emit_bwd) {
        n->is_bwd = 1;
        n->stage = g->emit_stage;
        n->fwd = g->emit_fwd;
    } else {
        n->stage = g->region == MPMD_REGION_BODY ? g->cur_stage : -1;
        n->remat = (int8_t)g->remat;
    }
    g->n_nodes++;
    return (mpmd_value){n->id};
}

mpmd_value mpmd_emit_copy(mpmd_graph *g, const mpmd_node *src, const mpmd_value *in) {
    mpmd_node s = *src; /* src may point into the array that grows */
    mpmd_value v = mpmd_emit(g, s.op, s.n_in, in, s.type);
    mpmd_node *n = mpmd_node_of(g, v);
    if (n) {
        memcpy(n->ia, s.ia, sizeof n->ia);
        memcpy(n->fa, s.fa, sizeof n->fa);
    }
    return v;
}

/* ---- scopes ---------------------------------------------------------------- */

void mpmd_scope_push(mpmd_graph *g, const char *name) {
    if (g && !name) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_scope_push: no name (NULL)");
        return;
    }
    mpmd_scope_pushf(g, "%s", name);
}

void mpmd_scope_pushf(mpmd_graph *g, const char *fmt, ...) {
    if (!g) return;
    if (!fmt) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_scope_push: no name (NULL)");
        return;
    }
    if (g->n_scopes >= (int)(sizeof g->scope_len / sizeof g->scope_len[0])) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_scope_push: scopes nested deeper than %d",
                  (int)(sizeof g->scope_len / sizeof g->scope_len[0]));
        return;
    }
    size_t len = strlen(g->scope);
    g->scope_len[g->n_scopes++] = (int)len;
    char part[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(part, sizeof part, fmt, ap);
    va_end(ap);
    snprintf(g->scope + len, sizeof g->scope - len, "%s%s", len ? "/" : "", part);
}

void mpmd_scope_pop(mpmd_graph *g) {
    if (!g) return;
    if (g->n_scopes == 0) {
        mpmd_fail(g, MPMD_ERR_INVALID, "mpmd_scope_pop: no scope to pop");
        return;
    }
    g->scope[g->scope_len[--g->n_scopes]] = '\0';
}

/* ---- lookups --------------------------------------------------------------- */

mpmd_type mpmd_value_type(const mpmd_graph *g, mpmd_value v) {
    const mpmd_node *n = mpmd_node_of(g, v);
    if (n) return n->type;
    mpmd_type t;
    memset(&t, 0, sizeof t);
    t.dtype = MPMD_TOKEN;
    return t;
}

const char *mpmd_value_name(const mpmd_graph *g, mpmd_value v) {
    const mpmd_node *n = mpmd_node_of(g, v);
    return n ? n->name : NULL;
}

mpmd_value mpmd_lookup(const mpmd_graph *g, const char *name) {
    if (!g || !name) return MPMD_NONE;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return (mpmd_value){i};
    return MPMD_NONE;
}

int mpmd_graph_params(const mpmd_graph *g, mpmd_value *out, int cap) {
    int k = 0;
    if (!g) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!(g->nodes[i].flags & MPMD_NODE_TRAINABLE)) continue;
        if (out && k < cap) out[k] = (mpmd_value){i};
        k++;
    }
    return k;
}

static int node_by_name(const void *a, const void *b) {
    const mpmd_node *x = *(const mpmd_node *const *)a, *y = *(const mpmd_node *const *)b;
    return strcmp(x->name, y->name);
}

const mpmd_node **mpmd_params_by_name(const mpmd_graph *g, int *n) {
    int np = mpmd_graph_params(g, NULL, 0);
    const mpmd_node **ps = malloc((size_t)(np ? np : 1) * sizeof *ps);
    *n = 0;
    if (!ps) return NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].flags & MPMD_NODE_TRAINABLE) ps[(*n)++] = &g->nodes[i];
    qsort(ps, (size_t)np, sizeof *ps, node_by_name);
    return ps;
}

int mpmd_graph_state(const mpmd_graph *g, mpmd_value *out, int cap) {
    int k = 0;
    if (!g) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!mpmd_node_is_storage(&g->nodes[i])) continue;
        if (out && k < cap) out[k] = (mpmd_value){i};
        k++;
    }
    return k;
}

mpmd_value mpmd_read_target(const mpmd_graph *g, mpmd_value v) {
    if (g && g->alias && v.id >= 0 && v.id < g->n_alias && g->alias[v.id] >= 0)
        return (mpmd_value){g->alias[v.id]};
    return v;
}

/* ---- liveness -------------------------------------------------------------- */

unsigned char *mpmd_live_nodes(const mpmd_graph *g) {
    unsigned char *live = calloc((size_t)g->n_nodes + 1, 1);
    if (!live) return NULL;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if ((n->op->flags & MPMD_OPF_SIDE_EFFECT) || (n->flags & MPMD_NODE_KEEP) || mpmd_node_is_storage(n))
            live[i] = 1;
        if (!live[i]) continue;
        for (int j = 0; j < n->n_in; j++)
            live[n->in[j]] = 1;
    }
    return live;
}

/* ---- printing -------------------------------------------------------------- */

static const char *region_title(int r) {
    return r == MPMD_REGION_PRE ? "before loop" : r == MPMD_REGION_BODY ? "loop body" : "after loop";
}

const char *mpmd_operand_str(const mpmd_graph *g, int v, char *buf, size_t len) {
    const mpmd_node *n = v >= 0 && v < g->n_nodes ? &g->nodes[v] : NULL;
    if (n && n->name)
        snprintf(buf, len, "%%%d \"%s\"", v, n->name);
    else
        snprintf(buf, len, "%%%d", v);
    return buf;
}

const char *mpmd_node_subject(const mpmd_graph *g, int i) {
    const mpmd_node *n = &g->nodes[i];
    if (n->name) return n->name;
    for (int j = 0; j < n->n_in; j++)
        if (g->nodes[n->in[j]].name) return g->nodes[n->in[j]].name;
    return NULL;
}

void mpmd_graph_print(const mpmd_graph *g, FILE *f) {
    if (!g || !f) return;
    char tb[160], attrs[512], ob[320];
    fprintf(f, "graph {\n");
    /* each region once, its nodes in creation order */
    for (int region = MPMD_REGION_PRE; region <= MPMD_REGION_POST; region++) {
        int any = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const mpmd_node *n = &g->nodes[i];
            if (n->region != region) continue;
            if (!any++) {
                if (region == MPMD_REGION_BODY)
                    fprintf(f, "  %s (%d microbatches):\n", region_title(region), g->n_micro);
                else
                    fprintf(f, "  %s:\n", region_title(region));
            }
            fprintf(f, "    %%%d:%s = %s", i, mpmd_type_str(&n->type, tb, sizeof tb), n->op->name);
            for (int j = 0; j < n->n_in; j++)
                fprintf(f, "%s%s", j ? ", " : " ", mpmd_operand_str(g, n->in[j], ob, sizeof ob));
            if (n->name) fprintf(f, " \"%s\"", n->name);
            attrs[0] = '\0';
            if (n->op->attrs) n->op->attrs(g, n, attrs, sizeof attrs);
            fputs(attrs, f);
            if (n->region == MPMD_REGION_BODY) {
                if (n->is_bwd)
                    fprintf(f, "   # bwd stage %d (of %%%d)", n->stage, n->fwd);
                else
                    fprintf(f, "   # stage %d", n->stage);
            }
            fputc('\n', f);
        }
    }
    fprintf(f, "}\n");
}
