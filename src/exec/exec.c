/* The one-rank executor: runs a step's graph on the CPU.
 *
 * The step is one linear program: the before-loop ops, the body (run once
 * per microbatch, in microbatch order), the loop reductions at the end of
 * each body run, then the after-loop ops. That is exactly the program a
 * one-rank pipeline plan gives, and the reference every schedule is
 * compared with bit for bit.
 *
 * Storage classes of values:
 * - parameters, variables, constants: persistent buffers owned by the
 *   executor, initialised once (optimizer ops update them in place);
 * - inputs: persistent buffers filled by mpmd_exec_set_input;
 * - microbatch slices: views into their batch value, no copy;
 * - everything else: an offset in one arena, planned from lifetimes
 *   (src/exec/plan.c); in-place ops reuse a dying input's block.
 *
 * Every buffer comes from the executor's backend (exec opts' backend name;
 * the CPU by default), every kernel runs through it, and data enters and
 * leaves through its upload and download.
 *
 * Loop reductions (mpmd_loop_reduce) accumulate in a fixed order:
 * acc = x_0, then acc = acc + x_m (or max) for m = 1..n-1, elementwise;
 * concat writes x_m at rows m*b .. (m+1)*b-1.
 */
#include "backend/backend.h"
#include "compiler/arena.h"
#include "graph/graph.h"
#include "util/sha256.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SLOT_NONE = 0, SLOT_STORAGE, SLOT_INPUT, SLOT_ARENA, SLOT_VIEW };

typedef struct {
    int kind;
    void *ptr;     /* storage and input buffers */
    size_t off;    /* arena offset */
    int def, last; /* positions, for the plan printout */
} slot;

struct mpmd_exec {
    const mpmd_graph *g;
    const mpmd_backend *be;
    void *dev; /* the backend instance */
    int nthreads;
    uint64_t seed;
    slot *slots;
    const mpmd_kernel **kern;
    unsigned char *input_set;
    char *arena;
    size_t arena_bytes;
    void *scratch;
    size_t scratch_bytes;
    int *pos;     /* position of each node in the linear program */
    int body_end; /* position of the end-of-body reductions */
    int npos;
    int ran;             /* a step has completed */
    unsigned char *live; /* nodes that need to run (mpmd_live_nodes) */
    double *prof;        /* [n_nodes] seconds spent in each node over the profiled runs, or NULL */
    int prof_runs;
    char err[MPMD_ERROR_MSG_MAX];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *xaligned(mpmd_exec *ex, size_t bytes) { return ex->be->alloc(ex->dev, bytes ? bytes : 64); }

static void xfree(mpmd_exec *ex, void *p) {
    if (p) ex->be->free(ex->dev, p);
}

void mpmd_exec_free(mpmd_exec *ex) {
    if (!ex) return;
    if (ex->dev) {
        char e[256];
        ex->be->sync(ex->dev, e, sizeof e); /* nothing may still be using the buffers */
        if (ex->slots)
            for (int i = 0; i < ex->g->n_nodes; i++)
                if (ex->slots[i].kind == SLOT_STORAGE || ex->slots[i].kind == SLOT_INPUT)
                    xfree(ex, ex->slots[i].ptr);
        xfree(ex, ex->arena);
        xfree(ex, ex->scratch);
        ex->be->close(ex->dev);
    }
    free(ex->slots);
    free(ex->kern);
    free(ex->input_set);
    free(ex->pos);
    free(ex->live);
    free(ex->prof);
    free(ex);
}

static int is_view(const mpmd_node *n) { return n->op == &mpmd_op_microbatch; }

mpmd_exec *mpmd_exec_new(const mpmd_graph *g, const mpmd_exec_opts *opts, mpmd_error *err) {
    if (!g) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: graph is NULL");
        return NULL;
    }
    if (g->status != MPMD_OK) {
        mpmd_error_set(err, g->status, "mpmd_exec_new: the graph has an error: %s", g->err);
        return NULL;
    }
    if (g->n_micro > 0 && g->region == MPMD_REGION_BODY) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_exec_new: the microbatch loop is still open (call mpmd_loop_end)");
        return NULL;
    }
    mpmd_exec_opts o = opts ? *opts : MPMD_EXEC_DEFAULTS;
    if (o.threads < 0) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_exec_new: threads = %d; use 0 (all cores) or a positive count", o.threads);
        return NULL;
    }
    const mpmd_backend *be = mpmd_backend_get(o.backend);
    if (!be) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: unknown backend \"%s\"; this build has: %s",
                       o.backend, mpmd_backend_names());
        return NULL;
    }
    char why[512];
    if (be->available(why, sizeof why)) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: the %s backend cannot run here: %s", be->name,
                       why);
        return NULL;
    }
    const int nn = g->n_nodes;
    mpmd_exec *ex = calloc(1, sizeof *ex);
    mpmd_arena_item *items = NULL;
    size_t *offs = NULL;
    void *host = NULL;
    if (!ex) goto oom;
    ex->g = g;
    ex->be = be;
    ex->nthreads = o.threads ? o.threads : num_cores();
    if (!(ex->dev = be->open(0, ex->nthreads, why, sizeof why))) {
        mpmd_error_set(err, MPMD_ERR_RUNTIME, "mpmd_exec_new: %s", why);
        goto fail;
    }
    be->enter(ex->dev);
    ex->seed = o.seed;
    ex->slots = calloc((size_t)nn + 1, sizeof *ex->slots);
    ex->kern = calloc((size_t)nn + 1, sizeof *ex->kern);
    ex->input_set = calloc((size_t)nn + 1, 1);
    ex->pos = calloc((size_t)nn + 1, sizeof *ex->pos);
    items = calloc((size_t)nn + 1, sizeof *items);
    offs = calloc((size_t)nn + 1, sizeof *offs);
    ex->live = mpmd_live_nodes(g);
    if (!ex->slots || !ex->kern || !ex->input_set || !ex->pos || !items || !offs || !ex->live) goto oom;

    /* Positions: before-loop nodes, body nodes, the end of the body, then
     * after-loop nodes, each region in creation order. */
    int p = 0;
    for (int r = MPMD_REGION_PRE; r <= MPMD_REGION_POST; r++) {
        for (int i = 0; i < nn; i++)
            if (g->nodes[i].region == r) ex->pos[i] = p++;
        if (r == MPMD_REGION_BODY) ex->body_end = p++;
    }
    ex->npos = p + 1;
    int first_body = ex->body_end;
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].region == MPMD_REGION_BODY && ex->pos[i] < first_body) first_body = ex->pos[i];

    /* Storage classes, kernels and lifetimes. */
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        slot *s = &ex->slots[i];
        size_t bytes = mpmd_type_bytes(&n->type);
        s->def = s->last = ex->pos[i];
        if (n->op == &mpmd_op_param || n->op == &mpmd_op_variable || n->op == &mpmd_op_constant) {
            s->kind = SLOT_STORAGE;
            if (!(s->ptr = xaligned(ex, bytes))) goto oom;
            if (be->host_memory) {
                mpmd_leaf_initial_value(n, s->ptr, ex->seed);
            } else {
                free(host);
                if (!(host = malloc(bytes ? bytes : 1))) goto oom;
                mpmd_leaf_initial_value(n, host, ex->seed);
                if (be->upload(ex->dev, s->ptr, host, bytes)) goto devfail;
            }
        } else if (n->op == &mpmd_op_input) {
            s->kind = SLOT_INPUT;
            if (!(s->ptr = xaligned(ex, bytes))) goto oom;
            if (be->host_memory) {
                memset(s->ptr, 0, bytes);
            } else {
                free(host);
                if (!(host = calloc(1, bytes ? bytes : 1))) goto oom;
                if (be->upload(ex->dev, s->ptr, host, bytes)) goto devfail;
            }
        } else if (is_view(n)) {
            s->kind = SLOT_VIEW;
        } else if (n->type.dtype == MPMD_TOKEN || !ex->live[i]) {
            s->kind = SLOT_NONE; /* no data, or never runs */
        } else {
            s->kind = SLOT_ARENA;
        }
        if (n->op == &mpmd_op_loop_reduce) s->def = first_body; /* written during the loop */
        if (ex->live[i] && !(n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) &&
            n->op != &mpmd_op_assign) {
            ex->kern[i] = be->find(n->op);
            if (!ex->kern[i]) {
                mpmd_error_set(err, MPMD_ERR_INVALID,
                               "mpmd_exec_new: the %s backend has no kernel for %s (%%%d)", be->name,
                               n->op->name, i);
                goto fail;
            }
            if (ex->kern[i]->scratch) {
                size_t sb = ex->kern[i]->scratch(g, n);
                if (sb > ex->scratch_bytes) ex->scratch_bytes = sb;
            }
        }
    }
    /* Last uses. A before-loop value read in the body lives to the end of
     * the body (the body runs n times); a body value read by a loop
     * reduction lives to the end-of-body position. */
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!ex->live[i]) continue;
        int up = ex->pos[i];
        if (n->op == &mpmd_op_loop_reduce) up = ex->body_end;
        for (int j = 0; j < n->n_in; j++) {
            int v = n->in[j];
            int use = up;
            if (g->nodes[v].region == MPMD_REGION_PRE && n->region == MPMD_REGION_BODY) use = ex->body_end;
            /* a view keeps its batch value alive as long as the view is used */
            if (ex->slots[v].last < use) ex->slots[v].last = use;
        }
    }
    /* views pass their lifetime on to the value they look into */
    for (int i = nn - 1; i >= 0; i--) {
        const mpmd_node *n = &g->nodes[i];
        if (is_view(n)) {
            int v = n->in[0];
            int need = ex->slots[i].last > ex->body_end ? ex->slots[i].last : ex->body_end;
            if (ex->slots[v].last < need) ex->slots[v].last = need;
        }
    }
    for (int i = 0; i < nn; i++) {
        const mpmd_node *n = &g->nodes[i];
        slot *s = &ex->slots[i];
        items[i].alias = -1;
        if (s->kind != SLOT_ARENA) continue;
        if (n->flags & MPMD_NODE_KEEP) s->last = ex->npos - 1;
        items[i].bytes = mpmd_type_bytes(&n->type);
        items[i].def = s->def;
        items[i].last = s->last;
        int k = n->op->inplace;
        if (k >= 0 && k < n->n_in) {
            int v = n->in[k];
            if (ex->slots[v].kind == SLOT_ARENA && ex->slots[v].last == s->def &&
                !(g->nodes[v].flags & MPMD_NODE_KEEP) && mpmd_type_bytes(&g->nodes[v].type) == items[i].bytes)
                items[i].alias = v;
        }
    }
    size_t arena = mpmd_arena_plan(nn, items, ex->npos, offs);
    if (arena == (size_t)-1) goto oom;
    ex->arena_bytes = arena;
    if (!(ex->arena = xaligned(ex, arena))) goto oom;
    for (int i = 0; i < nn; i++)
        ex->slots[i].off = offs[i];
    if (ex->scratch_bytes && !(ex->scratch = xaligned(ex, ex->scratch_bytes))) goto oom;
    if (be->sync(ex->dev, why, sizeof why)) goto devfail;
    free(items);
    free(offs);
    free(host);
    return ex;
devfail:
    mpmd_error_set(err, MPMD_ERR_RUNTIME, "mpmd_exec_new: the %s backend failed setting up storage: %s",
                   be->name, why);
    goto fail;
oom:
    mpmd_error_set(err, MPMD_ERR_NOMEM,
                   "mpmd_exec_new: out of memory planning the graph's buffers (%s backend)", be->name);
fail:
    free(items);
    free(offs);
    free(host);
    mpmd_exec_free(ex);
    return NULL;
}

/* The buffer of value v while microbatch m runs. */
static void *ptr_of(mpmd_exec *ex, int v, int m) {
    const slot *s = &ex->slots[v];
    switch (s->kind) {
    case SLOT_STORAGE:
    case SLOT_INPUT: return s->ptr;
    case SLOT_ARENA: return ex->arena + s->off;
    case SLOT_VIEW: {
        const mpmd_node *n = &ex->g->nodes[v];
        return (char *)ptr_of(ex, n->in[0], m) + (size_t)m * mpmd_type_bytes(&n->type);
    }
    }
    return NULL;
}

typedef struct {
    mpmd_exec *ex;
    int m;
} at_mb;

static void *ptr_at(void *ctx, int v) {
    at_mb *a = ctx;
    return ptr_of(a->ex, v, a->m);
}

static mpmd_status run_node(mpmd_exec *ex, int i, int m) {
    const mpmd_graph *g = ex->g;
    const mpmd_node *n = &g->nodes[i];
    if (!ex->live[i] || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL))) return MPMD_OK;
    char kerr[512];
    at_mb ctx = {ex, m};
    double t0 = ex->prof ? now_s() : 0;
    if (mpmd_backend_run(ex->be, ex->dev, g, i, ex->kern[i], ptr_of(ex, i, m), ptr_at, &ctx, ex->nthreads,
                         ex->scratch, m, kerr, sizeof kerr) ||
        (ex->prof && ex->be->sync(ex->dev, kerr, sizeof kerr))) {
        if (n->region == MPMD_REGION_BODY)
            snprintf(ex->err, sizeof ex->err, "%%%d = %s, microbatch %d: %s", i, n->op->name, m, kerr);
        else
            snprintf(ex->err, sizeof ex->err, "%%%d = %s: %s", i, n->op->name, kerr);
        return MPMD_ERR_RUNTIME;
    }
    if (ex->prof) ex->prof[i] += now_s() - t0;
    return MPMD_OK;
}

/* End of body run m: fold x_m into every loop reduction. */
static mpmd_status reduce_step(mpmd_exec *ex, int m) {
    const mpmd_graph *g = ex->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (n->op == &mpmd_op_loop_reduce && ex->live[i] &&
            ex->be->fold(ex->dev, g, n, ptr_of(ex, i, m), ptr_of(ex, n->in[0], m), m)) {
            snprintf(ex->err, sizeof ex->err, "%%%d = loop_reduce, microbatch %d: the fold failed", i, m);
            return MPMD_ERR_RUNTIME;
        }
    }
    return MPMD_OK;
}

mpmd_status mpmd_exec_run(mpmd_exec *ex) {
    const mpmd_graph *g = ex->g;
    ex->err[0] = '\0';
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op == &mpmd_op_input && !ex->input_set[i]) {
            snprintf(ex->err, sizeof ex->err, "input \"%s\" was not set (mpmd_exec_set_input) before the run",
                     g->nodes[i].name);
            return MPMD_ERR_INVALID;
        }
    }
    mpmd_status st = MPMD_OK;
    ex->be->enter(ex->dev);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].region == MPMD_REGION_PRE && (st = run_node(ex, i, 0))) goto out;
    for (int m = 0; m < g->n_micro; m++) {
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].region == MPMD_REGION_BODY && (st = run_node(ex, i, m))) goto out;
        if ((st = reduce_step(ex, m))) goto out;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].region == MPMD_REGION_POST && (st = run_node(ex, i, 0))) goto out;
out:;
    /* queued work finishes (or reports the failure it met) before the run returns */
    char e[512];
    if (ex->be->sync(ex->dev, e, sizeof e)) {
        if (!ex->err[0]) snprintf(ex->err, sizeof ex->err, "%s", e);
        return MPMD_ERR_RUNTIME;
    }
    if (st) return st;
    ex->ran = 1;
    if (ex->prof) ex->prof_runs++;
    return MPMD_OK;
}

mpmd_status mpmd_exec_set_input(mpmd_exec *ex, mpmd_value input, const void *data, size_t bytes) {
    const mpmd_node *n = mpmd_node_of(ex->g, input);
    if (!n || n->op != &mpmd_op_input) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_set_input: %%%d is not an input", (int)input.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = mpmd_type_bytes(&n->type);
    if (bytes != want) {
        char tb[160];
        snprintf(ex->err, sizeof ex->err,
                 "mpmd_exec_set_input: input \"%s\" is %s (%zu bytes), given %zu bytes", n->name,
                 mpmd_type_str(&n->type, tb, sizeof tb), want, bytes);
        return MPMD_ERR_SHAPE;
    }
    ex->be->enter(ex->dev);
    if (ex->be->upload(ex->dev, ex->slots[input.id].ptr, data, bytes)) {
        snprintf(ex->err, sizeof ex->err,
                 "mpmd_exec_set_input: copying input \"%s\" to the %s backend failed", n->name, ex->be->name);
        return MPMD_ERR_RUNTIME;
    }
    ex->input_set[input.id] = 1;
    return MPMD_OK;
}

mpmd_status mpmd_exec_read(mpmd_exec *ex, mpmd_value v, void *dst, size_t bytes) {
    const mpmd_node *n = mpmd_node_of(ex->g, v);
    if (!n) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_read: %d is not a value of the graph", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    const slot *s = &ex->slots[v.id];
    int readable = s->kind == SLOT_STORAGE || s->kind == SLOT_INPUT || (n->flags & MPMD_NODE_KEEP);
    if (!readable) {
        snprintf(ex->err, sizeof ex->err,
                 "mpmd_exec_read: %%%d (%s) is not kept; call mpmd_keep on it when building the graph",
                 (int)v.id, n->op->name);
        return MPMD_ERR_INVALID;
    }
    if (s->kind == SLOT_ARENA && !ex->ran) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_read: %%%d has no value before the first run",
                 (int)v.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = mpmd_type_bytes(&n->type);
    if (bytes != want) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_read: %%%d has %zu bytes, asked for %zu", (int)v.id,
                 want, bytes);
        return MPMD_ERR_SHAPE;
    }
    ex->be->enter(ex->dev);
    char e[512];
    if (ex->be->download(ex->dev, dst, ptr_of(ex, v.id, 0), bytes)) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_read: copying %%%d from the %s backend failed",
                 (int)v.id, ex->be->name);
        return MPMD_ERR_RUNTIME;
    }
    if (ex->be->sync(ex->dev, e, sizeof e)) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_read: %s", e);
        return MPMD_ERR_RUNTIME;
    }
    return MPMD_OK;
}

mpmd_status mpmd_exec_write(mpmd_exec *ex, mpmd_value v, const void *src, size_t bytes) {
    const mpmd_node *n = mpmd_node_of(ex->g, v);
    if (!n || !mpmd_node_is_storage(n)) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_write: %d is not a parameter or variable", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = mpmd_type_bytes(&n->type);
    if (bytes != want) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_write: \"%s\" has %zu bytes, given %zu", n->name, want,
                 bytes);
        return MPMD_ERR_SHAPE;
    }
    ex->be->enter(ex->dev);
    if (ex->be->upload(ex->dev, ex->slots[v.id].ptr, src, bytes)) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_write: copying \"%s\" to the %s backend failed", n->name,
                 ex->be->name);
        return MPMD_ERR_RUNTIME;
    }
    return MPMD_OK;
}

void *mpmd_exec_var_data(mpmd_exec *ex, mpmd_value v) {
    const mpmd_node *n = mpmd_node_of(ex->g, v);
    if (!n || !mpmd_node_is_storage(n) || !ex->be->host_memory) return NULL;
    return ex->slots[v.id].ptr;
}

const char *mpmd_exec_backend(const mpmd_exec *ex) { return ex->be->name; }

const char *mpmd_exec_error(const mpmd_exec *ex) { return ex->err; }
const mpmd_graph *mpmd_exec_graph(const mpmd_exec *ex) { return ex->g; }
size_t mpmd_exec_arena_bytes(const mpmd_exec *ex) { return ex->arena_bytes; }

void mpmd_exec_print_plan(const mpmd_exec *ex, FILE *f) {
    const mpmd_graph *g = ex->g;
    char tb[160];
    fprintf(f, "memory plan: arena %zu bytes, %s backend, %d threads\n", ex->arena_bytes, ex->be->name,
            ex->nthreads);
    for (int i = 0; i < g->n_nodes; i++) {
        const slot *s = &ex->slots[i];
        const mpmd_node *n = &g->nodes[i];
        if (s->kind != SLOT_ARENA) continue;
        fprintf(f, "  %%%-5d %-14s %-22s offset %10zu  %10zu bytes  live [%d, %d]\n", i, n->op->name,
                mpmd_type_str(&n->type, tb, sizeof tb), s->off, mpmd_type_bytes(&n->type), s->def, s->last);
    }
}

void mpmd_exec_params_sha256(mpmd_exec *ex, char hex[65]) {
    int np;
    const mpmd_node **ps = mpmd_params_by_name(ex->g, &np);
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    void *host = NULL;
    size_t cap = 0;
    ex->be->enter(ex->dev);
    for (int i = 0; ps && i < np; i++) {
        size_t b = mpmd_type_bytes(&ps[i]->type);
        const void *p = ex->slots[ps[i]->id].ptr;
        if (!ex->be->host_memory) {
            if (b > cap) {
                void *nh = realloc(host, b);
                if (!nh) break; /* the digest of what could be read; never of garbage */
                host = nh, cap = b;
            }
            if (ex->be->download(ex->dev, host, p, b)) break;
            p = host;
        }
        mpmd_sha256_update(&c, p, b);
    }
    free(host);
    free(ps);
    mpmd_sha256_final_hex(&c, hex);
}

mpmd_status mpmd_exec_set_profiling(mpmd_exec *ex, int on) {
    free(ex->prof);
    ex->prof = NULL;
    ex->prof_runs = 0;
    if (on && !(ex->prof = calloc((size_t)ex->g->n_nodes + 1, sizeof *ex->prof))) {
        snprintf(ex->err, sizeof ex->err, "mpmd_exec_set_profiling: out of memory");
        return MPMD_ERR_NOMEM;
    }
    return MPMD_OK;
}

typedef struct prof_row {
    const char *name;
    double s;
    int calls;
} prof_row;

static int by_time(const void *a, const void *b) {
    double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
    return (x < y) - (x > y);
}

void mpmd_exec_print_profile(const mpmd_exec *ex, FILE *f) {
    const mpmd_graph *g = ex->g;
    if (!ex->prof || !ex->prof_runs) {
        fprintf(f, "no profiled run (mpmd_exec_set_profiling, then mpmd_exec_run)\n");
        return;
    }
    prof_row *rows = calloc((size_t)g->n_nodes + 1, sizeof *rows);
    if (!rows) return;
    int nr = 0;
    double total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (ex->prof[i] <= 0) continue;
        const char *name = g->nodes[i].op->name;
        int k = 0;
        while (k < nr && strcmp(rows[k].name, name) != 0)
            k++;
        if (k == nr) rows[nr++] = (prof_row){name, 0, 0};
        rows[k].s += ex->prof[i];
        rows[k].calls += g->nodes[i].region == MPMD_REGION_BODY ? g->n_micro : 1;
        total += ex->prof[i];
    }
    qsort(rows, (size_t)nr, sizeof *rows, by_time);
    fprintf(f, "time by op over %d run%s (%s backend; each op waited for), per run:\n", ex->prof_runs,
            ex->prof_runs == 1 ? "" : "s", ex->be->name);
    fprintf(f, "  %-22s %7s %11s %7s\n", "op", "calls", "ms", "share");
    for (int k = 0; k < nr; k++)
        fprintf(f, "  %-22s %7d %11.3f %6.1f%%\n", rows[k].name, rows[k].calls,
                1e3 * rows[k].s / ex->prof_runs, 100.0 * rows[k].s / (total > 0 ? total : 1));
    fprintf(f, "  %-22s %7s %11.3f\n", "total", "", 1e3 * total / ex->prof_runs);
    free(rows);
}
