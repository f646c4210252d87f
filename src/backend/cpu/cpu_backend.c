/* The CPU backend: host buffers, memcpy copies, kernels looked up in one
 * table per op family, and work that is done when its call returns (so
 * sync and events have nothing to wait for). */
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mpmd_kernel *const tables[] = {
    mpmd_cpu_core_kernels, mpmd_cpu_elementwise_kernels, mpmd_cpu_reduce_kernels,
    mpmd_cpu_nn_kernels,   mpmd_cpu_optim_kernels,
};

const mpmd_kernel *mpmd_cpu_find(const mpmd_op_desc *op) {
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (const mpmd_kernel *e = tables[t]; e->op; e++)
            if (e->op == op) return e;
    return NULL;
}

/* acc = x_0, then acc = acc + x_m (ADD) or max (MAX), elementwise, in
 * microbatch order; CONCAT puts x_m at rows m*b.. . */
void mpmd_cpu_fold(const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x, int mb) {
    const mpmd_type *xt = &g->nodes[reduce->in[0]].type;
    size_t bytes = mpmd_type_bytes(xt);
    int64_t cnt = mpmd_type_numel(xt);
    if (reduce->ia[0] == MPMD_REDUCE_CONCAT) {
        memcpy((char *)acc + (size_t)mb * bytes, x, bytes);
    } else if (mb == 0) {
        memcpy(acc, x, bytes);
    } else {
        float *a = acc;
        const float *b = x;
        if (reduce->ia[0] == MPMD_REDUCE_ADD)
            for (int64_t k = 0; k < cnt; k++) a[k] += b[k];
        else
            for (int64_t k = 0; k < cnt; k++) a[k] = b[k] > a[k] ? b[k] : a[k];
    }
}

/* out = b_0, then out += b_d (or max) for d = 1.., then (ADD) out *= 1/replicas. */
void mpmd_cpu_combine(const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas, float *out) {
    int64_t cnt = mpmd_type_numel(&n->type);
    const float *b0 = bufs[0];
    for (int64_t k = 0; k < cnt; k++) out[k] = b0[k];
    for (int d = 1; d < replicas; d++) {
        const float *b = bufs[d];
        if (n->ia[0] == MPMD_REDUCE_ADD)
            for (int64_t k = 0; k < cnt; k++) out[k] += b[k];
        else
            for (int64_t k = 0; k < cnt; k++) out[k] = b[k] > out[k] ? b[k] : out[k];
    }
    if (n->ia[0] == MPMD_REDUCE_ADD) {
        const float inv = 1.0f / (float)replicas;
        for (int64_t k = 0; k < cnt; k++) out[k] *= inv;
    }
}

typedef struct cpu_dev {
    int nthreads;
} cpu_dev;

static int cpu_available(char *why, size_t len) {
    (void)why, (void)len;
    return 0;
}

static void *cpu_open(int rank, int nthreads, char *err, size_t len) {
    cpu_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, len, "out of memory opening the cpu backend for rank %d", rank);
        return NULL;
    }
    d->nthreads = nthreads;
    return d;
}

static void cpu_close(void *dev) { free(dev); }
static void cpu_enter(void *dev) { (void)dev; }

static void *cpu_alloc(void *dev, size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64)) return NULL;
    return p;
}

static void cpu_free(void *dev, void *p) { free(p); }

static int cpu_memcpy(void *dev, void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
    return 0;
}

static int cpu_fold(void *dev, const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x, int mb) {
    mpmd_cpu_fold(g, reduce, acc, x, mb);
    return 0;
}

static int cpu_combine(void *dev, const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas,
                       void *out) {
    mpmd_cpu_combine(g, n, bufs, replicas, out);
    return 0;
}

static int cpu_sync(void *dev, char *err, size_t len) { return 0; }
static void *cpu_event_record(void *dev) { return NULL; }
static int cpu_event_wait(void *dev, void *ev) { return 0; }
static void cpu_event_free(void *dev, void *ev) {}

const mpmd_backend mpmd_backend_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .available = cpu_available,
    .open = cpu_open,
    .close = cpu_close,
    .enter = cpu_enter,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .find = mpmd_cpu_find,
    .fold = cpu_fold,
    .combine = cpu_combine,
    .sync = cpu_sync,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .event_free = cpu_event_free,
};
