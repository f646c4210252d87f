/* The registry of backends and the one way a kernel is run. */
#include "backend/backend.h"

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

const char *mpmd_backend_names(void) {
#ifdef MPMD_HAVE_CUDA
    return "cpu, cuda";
#else
    return "cpu";
#endif
}

int mpmd_backend_run(const mpmd_backend *be, void *dev, const mpmd_graph *g, int node, const mpmd_kernel *k,
                     void *out, mpmd_ptr_fn ptr, void *ctx, int nthreads, void *scratch, int mb, char *err,
                     size_t errlen) {
    const mpmd_node *n = &g->nodes[node];
    if (n->op == &mpmd_op_assign) {
        void *dst = ptr(ctx, n->in[0]), *src = ptr(ctx, n->in[1]);
        if (dst == src) return 0;
        if (be->copy(dev, dst, src, mpmd_type_bytes(&g->nodes[n->in[0]].type))) {
            snprintf(err, errlen, "copy failed");
            return 1;
        }
        return 0;
    }
    void *in_small[8];
    const mpmd_type *ty_small[8];
    void **in = n->n_in <= 8 ? in_small : malloc((size_t)n->n_in * sizeof *in);
    const mpmd_type **ty = n->n_in <= 8 ? ty_small : malloc((size_t)n->n_in * sizeof *ty);
    int rc = 0;
    if (!in || !ty) {
        snprintf(err, errlen, "out of memory gathering the %d inputs", n->n_in);
        rc = 1;
    } else {
        for (int j = 0; j < n->n_in; j++) {
            in[j] = ptr(ctx, n->in[j]);
            ty[j] = &g->nodes[n->in[j]].type;
        }
        mpmd_kargs a = {g, n, out, in, ty, nthreads, scratch, mb < 0 ? 0 : mb, err, errlen, dev};
        err[0] = '\0';
        rc = be->launch(dev, k, &a);
        if (rc && !err[0]) snprintf(err, errlen, "kernel failed");
    }
    if (in != in_small) free(in);
    if (ty != ty_small) free((void *)ty);
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

const char *mpmd_backends(void) { return mpmd_backend_names(); }

int mpmd_backend_check(const char *name, char *why, size_t len) {
    const mpmd_backend *be = mpmd_backend_get(name);
    if (!be) {
        snprintf(why, len, "unknown backend \"%s\"; this build has: %s", name, mpmd_backend_names());
        return 1;
    }
    return be->available(why, len);
}
