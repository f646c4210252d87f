/* The CPU backend's kernel lookup: one table per op family. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

static const mpmd_cpu_entry *const tables[] = {
    mpmd_cpu_core_kernels, mpmd_cpu_elementwise_kernels, mpmd_cpu_reduce_kernels,
    mpmd_cpu_nn_kernels,   mpmd_cpu_optim_kernels,
};

const mpmd_cpu_entry *mpmd_cpu_find(const mpmd_op_desc *op) {
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (const mpmd_cpu_entry *e = tables[t]; e->op; e++)
            if (e->op == op) return e;
    return NULL;
}

int mpmd_cpu_run(const mpmd_graph *g, int node, const mpmd_cpu_entry *k, void *out, mpmd_ptr_fn ptr, void *ctx,
                 int nthreads, void *scratch, int mb, char *err, size_t errlen) {
    const mpmd_node *n = &g->nodes[node];
    if (n->op == &mpmd_op_assign) {
        void *dst = ptr(ctx, n->in[0]), *src = ptr(ctx, n->in[1]);
        if (dst != src) memmove(dst, src, mpmd_type_bytes(&g->nodes[n->in[0]].type));
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
        mpmd_kargs a = {g, n, out, in, ty, nthreads, scratch, mb < 0 ? 0 : mb, err, errlen};
        err[0] = '\0';
        rc = k->fn(&a);
        if (rc && !err[0]) snprintf(err, errlen, "kernel failed");
    }
    if (in != in_small) free(in);
    if (ty != ty_small) free((void *)ty);
    return rc;
}
