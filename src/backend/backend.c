/* The registry of backends and the one way a kernel is run. */
#include "backend/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mpmd_backend *const registry[] = {
    &mpmd_backend_cpu,
#ifdef MPMD_HAVE_CUDA
    &mpmd_backend_cuda,
#endif
};

const mpmd_backend *mpmd_backend_get(const char *name) {
    if (!name || !name[0]) name = "cpu";
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

static char names[128];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void list_names(void) {
    size_t at = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0] && at < sizeof names; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", registry[i]->name);
}

const char *mpmd_backend_names(void) { /* the registry's names */
    pthread_once(&names_once, list_names);
    return names;
}

int mpmd_backend_run(const mpmd_backend *be, void *dev, const mpmd_graph *g, int node, const mpmd_kernel *k,
                     void *out, mpmd_ptr_fn ptr, void *ctx, int nthreads, void *scratch, int mb, char *err,
                     size_t errlen) {
    return mpmd_backend_run_part(be, dev, g, node, k, out, ptr, ctx, nthreads, scratch, mb, NULL, 0, NULL,
                                 err, errlen);
}

int mpmd_backend_run_part(const mpmd_backend *be, void *dev, const mpmd_graph *g, int node,
                          const mpmd_kernel *k, void *out, mpmd_ptr_fn ptr, void *ctx, int nthreads,
                          void *scratch, int mb, const unsigned char *part, int64_t count,
                          const mpmd_launch_room *room, char *err, size_t errlen) {
    const mpmd_node *n = &g->nodes[node];
    if (n->op == &mpmd_op_assign) {
        void *dst = ptr(ctx, n->in[0]), *src = ptr(ctx, n->in[1]);
        if (dst == src) return 0;
        if (be->queue.copy(dev, dst, src, mpmd_type_bytes(&g->nodes[n->in[0]].type))) {
            snprintf(err, errlen, "copy failed");
            return 1;
        }
        return 0;
    }
    /* a part of the values: the node and its parted operands seen as flat
     * vectors of `count` elements */
    mpmd_node shadow;
    if (part) {
        shadow = *n;
        if (part[node]) shadow.type = (mpmd_type){n->type.dtype, 1, {count}};
        n = &shadow;
    }
    void *in_small[MPMD_LAUNCH_SMALL];
    const mpmd_type *ty_small[MPMD_LAUNCH_SMALL];
    mpmd_type flat_small[MPMD_LAUNCH_SMALL];
    const int roomy = room && room->cap >= n->n_in, many = n->n_in > MPMD_LAUNCH_SMALL && !roomy;
    void **in = many ? malloc((size_t)n->n_in * sizeof *in) : roomy ? room->in : in_small;
    const mpmd_type **ty = many ? malloc((size_t)n->n_in * sizeof *ty) : roomy ? room->ty : ty_small;
    mpmd_type *flat = many ? malloc((size_t)n->n_in * sizeof *flat) : roomy ? room->flat : flat_small;
    int rc = 0;
    if (!in || !ty || !flat) {
        snprintf(err, errlen, "out of memory gathering the %d inputs", n->n_in);
        rc = 1;
    } else {
        for (int j = 0; j < n->n_in; j++) {
            in[j] = ptr(ctx, n->in[j]);
            ty[j] = &g->nodes[n->in[j]].type;
            if (part && part[n->in[j]]) {
                flat[j] = (mpmd_type){ty[j]->dtype, 1, {count}};
                ty[j] = &flat[j];
            }
        }
        mpmd_kargs a = {g, n, out, in, ty, nthreads, scratch, mb < 0 ? 0 : mb, err, errlen, dev};
        err[0] = '\0';
        rc = be->kernels.launch(dev, k, &a);
        if (rc && !err[0]) snprintf(err, errlen, "kernel failed");
    }
    if (many) free(in), free((void *)ty), free(flat);
    return rc;
}

static int takes(const mpmd_kernel *k, mpmd_dtype d) {
    if (d == MPMD_BF16) return (k->dtypes & MPMD_KERNEL_BF16) != 0;
    if (d == MPMD_F16) return (k->dtypes & MPMD_KERNEL_F16) != 0;
    return 1;
}

int mpmd_kernel_native(const mpmd_kernel *k, const mpmd_graph *g, const mpmd_node *n) {
    if (!takes(k, n->type.dtype)) return 0;
    for (int j = 0; j < n->n_in; j++)
        if (!takes(k, g->nodes[n->in[j]].type.dtype)) return 0;
    return 1;
}

static int is16(mpmd_dtype d) { return d == MPMD_BF16 || d == MPMD_F16; }
static size_t round64(size_t x) { return (x + 63) / 64 * 64; }

/* Where the f32 copies go, in floats from the start of the widening area:
 * off[j] for 16-bit operand j (-1: none), off[n_in] for a 16-bit result;
 * returns the floats needed. */
static int64_t widen_layout(const mpmd_graph *g, const mpmd_node *n, int64_t *off) {
    int64_t total = 0;
    for (int j = 0; j <= n->n_in; j++) {
        const mpmd_type *t = j < n->n_in ? &g->nodes[n->in[j]].type : &n->type;
        off[j] = -1;
        if (!is16(t->dtype)) continue;
        off[j] = total;
        total += mpmd_type_numel(t);
    }
    return total;
}

enum { MAX_WIDE_IN = 8 };

size_t mpmd_kernel_workspace(const mpmd_kernel *k, const mpmd_graph *g, const mpmd_node *n) {
    size_t own = k && k->scratch ? k->scratch(g, n) : 0;
    if (!k || mpmd_kernel_native(k, g, n) || n->n_in > MAX_WIDE_IN) return own;
    int64_t off[MAX_WIDE_IN + 1];
    return round64(own) + (size_t)widen_layout(g, n, off) * sizeof(float);
}

int mpmd_launch_widened(void *dev, const mpmd_kernel *k, const mpmd_kargs *a, mpmd_convert_fn convert) {
    const mpmd_node *n = a->node;
    if (n->n_in > MAX_WIDE_IN) {
        snprintf(a->err, a->err_len, "%d operands; 16-bit operands are widened for at most %d", n->n_in,
                 MAX_WIDE_IN);
        return 1;
    }
    int64_t off[MAX_WIDE_IN + 1];
    widen_layout(a->g, n, off);
    float *wide = (float *)((char *)a->scratch + round64(k->scratch ? k->scratch(a->g, n) : 0));
    void *in[MAX_WIDE_IN];
    mpmd_type ty[MAX_WIDE_IN];
    const mpmd_type *typ[MAX_WIDE_IN];
    int out_alias = -1;
    for (int j = 0; j < n->n_in; j++) {
        ty[j] = *a->in_type[j];
        typ[j] = &ty[j];
        in[j] = a->in[j];
        if (off[j] < 0) continue;
        in[j] = wide + off[j];
        if (convert(dev, in[j], MPMD_F32, a->in[j], ty[j].dtype, mpmd_type_numel(&ty[j]))) {
            snprintf(a->err, a->err_len, "widening operand %d to f32 failed", j);
            return 1;
        }
        ty[j].dtype = MPMD_F32;
        /* an in-place op works on its operand's copy */
        if (a->in[j] == a->out && off[n->n_in] >= 0) out_alias = j;
    }
    mpmd_node nc = *n; /* the node as the kernel sees it: f32 where widened */
    void *out = a->out;
    if (off[n->n_in] >= 0) {
        nc.type.dtype = MPMD_F32;
        out = out_alias >= 0 ? in[out_alias] : (void *)(wide + off[n->n_in]);
    }
    mpmd_kargs b = *a;
    b.node = &nc;
    b.in = in;
    b.in_type = typ;
    b.out = out;
    int rc = k->fn(&b);
    if (!rc && off[n->n_in] >= 0 &&
        convert(dev, a->out, n->type.dtype, out, MPMD_F32, mpmd_type_numel(&n->type))) {
        snprintf(a->err, a->err_len, "rounding the f32 result to %s failed", mpmd_dtype_name(n->type.dtype));
        rc = 1;
    }
    return rc;
}

const char *mpmd_backends(void) { return mpmd_backend_names(); }

mpmd_status mpmd_backend_defaults_of(const char *name, mpmd_backend_defaults *out) {
    const mpmd_backend *be = mpmd_backend_get(name);
    if (!be || !out) return MPMD_ERR_INVALID;
    out->compute = be->compute;
    out->fused_attention = be->fused_attention;
    return MPMD_OK;
}

int mpmd_backend_check(const char *name, char *why, size_t len) {
    char none[8];
    if (!why) why = none, len = sizeof none; /* the answer alone, without the reason */
    const mpmd_backend *be = mpmd_backend_get(name);
    if (!be) {
        snprintf(why, len, "unknown backend \"%s\"; this build has: %s", name, mpmd_backend_names());
        return 1;
    }
    return be->device.available(why, len);
}
