/* The CPU backend: host buffers, memcpy copies, kernels looked up in one
 * table per op family, and work that is done when its call returns (so
 * sync and events have nothing to wait for).
 *
 * 16-bit floats (bf16, f16) are storage here: a kernel that does not take
 * them natively gets its 16-bit operands widened to f32 (exact) and its
 * output rounded back to nearest even, so every op computes in f32 and
 * rounds once on store. Matrix products too: Debian's OpenBLAS (0.3.21)
 * declares cblas_sbgemm in cblas.h but is built without it (the symbol is
 * not in libopenblas), so bf16 operands are widened for sgemm. */
#include "cpu.h"
#include "util/exact.h"
#include "util/half.h"

#include <sys/resource.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const mpmd_kernel *const mpmd_cpu_kernel_tables[] = {
    mpmd_cpu_core_kernels,
    mpmd_cpu_elementwise_kernels,
    mpmd_cpu_reduce_kernels,
    mpmd_cpu_nn_kernels,
    mpmd_cpu_attention_kernels,
    mpmd_cpu_optim_kernels,
    NULL,
};

const mpmd_kernel *mpmd_cpu_find(const mpmd_op_desc *op) {
    for (const mpmd_kernel *const *t = mpmd_cpu_kernel_tables; *t; t++)
        for (const mpmd_kernel *e = *t; e->op; e++)
            if (e->op == op) return e;
    return NULL;
}

static int is16(mpmd_dtype d) { return d == MPMD_BF16 || d == MPMD_F16; }

static float load16(mpmd_dtype d, const void *p, int64_t k) {
    uint16_t h = ((const uint16_t *)p)[k];
    return d == MPMD_BF16 ? mpmd_bf16_to_f32(h) : mpmd_f16_to_f32(h);
}

static void store16(mpmd_dtype d, void *p, int64_t k, float v) {
    ((uint16_t *)p)[k] = d == MPMD_BF16 ? mpmd_f32_to_bf16(v) : mpmd_f32_to_f16(v);
}

/* acc = x_0, then acc = acc + x_m (ADD) or max (MAX), elementwise, in
 * microbatch order (16-bit: computed in f32, rounded on store); CONCAT puts
 * x_m at rows m*b.. . */
void mpmd_cpu_fold(const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x, int mb) {
    const mpmd_type *xt = &g->nodes[reduce->in[0]].type;
    size_t bytes = mpmd_type_bytes(xt);
    int64_t cnt = mpmd_type_numel(xt);
    if (reduce->ia[0] == MPMD_REDUCE_CONCAT) {
        memcpy((char *)acc + (size_t)mb * bytes, x, bytes);
    } else if (mb == 0) {
        memcpy(acc, x, bytes);
    } else if (is16(xt->dtype)) {
        int add = reduce->ia[0] == MPMD_REDUCE_ADD;
        for (int64_t k = 0; k < cnt; k++) {
            float a = load16(xt->dtype, acc, k), b = load16(xt->dtype, x, k);
            store16(xt->dtype, acc, k, add ? a + b : (b > a ? b : a));
        }
    } else {
        float *a = acc;
        const float *b = x;
        if (reduce->ia[0] == MPMD_REDUCE_ADD)
            for (int64_t k = 0; k < cnt; k++)
                a[k] += b[k];
        else
            for (int64_t k = 0; k < cnt; k++)
                a[k] = b[k] > a[k] ? b[k] : a[k];
    }
}

/* out = b_0, then out += b_d (or max) for d = 1.., then (ADD) out *= 1/replicas
 * (16-bit: in f32, rounded once at the end). */
void mpmd_cpu_combine(const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas, float *out,
                      int64_t count) {
    int64_t cnt = count;
    mpmd_dtype dt = n->type.dtype;
    if (is16(dt)) {
        int add = n->ia[0] == MPMD_REDUCE_ADD;
        const float inv = 1.0f / (float)replicas;
        for (int64_t k = 0; k < cnt; k++) {
            float v = load16(dt, bufs[0], k);
            for (int d = 1; d < replicas; d++) {
                float b = load16(dt, bufs[d], k);
                v = add ? v + b : (b > v ? b : v);
            }
            store16(dt, out, k, add ? v * inv : v);
        }
        return;
    }
    const float *b0 = bufs[0];
    for (int64_t k = 0; k < cnt; k++)
        out[k] = b0[k];
    for (int d = 1; d < replicas; d++) {
        const float *b = bufs[d];
        if (n->ia[0] == MPMD_REDUCE_ADD)
            for (int64_t k = 0; k < cnt; k++)
                out[k] += b[k];
        else
            for (int64_t k = 0; k < cnt; k++)
                out[k] = b[k] > out[k] ? b[k] : out[k];
    }
    if (n->ia[0] == MPMD_REDUCE_ADD) {
        const float inv = 1.0f / (float)replicas;
        for (int64_t k = 0; k < cnt; k++)
            out[k] *= inv;
    }
}

typedef struct cpu_dev {
    int nthreads;
    mpmd_pool *pool;     /* nthreads - 1 workers; the rank's thread is the first */
    size_t in_use, peak; /* bytes of buffers from cpu_alloc */
} cpu_dev;

/* bf16 <-> f32 as integer arithmetic on the bits, in loops the compiler
 * vectorises (the same results as mpmd_bf16_to_f32 / mpmd_f32_to_bf16). */
static void widen_bf16(const uint16_t *src, uint32_t *dst, int64_t n) {
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        dst[k] = (uint32_t)src[k] << 16;
}

static void narrow_bf16(const uint32_t *src, uint16_t *dst, int64_t n) {
#pragma omp simd
    for (int64_t k = 0; k < n; k++) {
        uint32_t u = src[k];
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* nearest even */
        uint32_t q = (u >> 16) | 0x40u;                      /* a NaN stays a (quiet) NaN */
        dst[k] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

typedef struct {
    mpmd_dtype d;
    const void *src;
    void *dst;
} convert_job;

static void widen_part(void *ctx, int64_t lo, int64_t hi) {
    const convert_job *j = ctx;
    if (j->d == MPMD_BF16)
        widen_bf16((const uint16_t *)j->src + lo, (uint32_t *)j->dst + lo, hi - lo);
    else
        for (int64_t k = lo; k < hi; k++)
            ((float *)j->dst)[k] = load16(j->d, j->src, k);
}

static void narrow_part(void *ctx, int64_t lo, int64_t hi) {
    const convert_job *j = ctx;
    if (j->d == MPMD_BF16)
        narrow_bf16((const uint32_t *)j->src + lo, (uint16_t *)j->dst + lo, hi - lo);
    else
        for (int64_t k = lo; k < hi; k++)
            store16(j->d, j->dst, k, ((const float *)j->src)[k]);
}

void mpmd_cpu_widen(void *dev, int nthreads, mpmd_dtype d, const void *src, float *dst, int64_t n) {
    convert_job j = {d, src, dst};
    mpmd_cpu_for(dev, mpmd_threads_for(nthreads, n), n, widen_part, &j);
}

void mpmd_cpu_narrow(void *dev, int nthreads, mpmd_dtype d, const float *src, void *dst, int64_t n) {
    convert_job j = {d, src, dst};
    mpmd_cpu_for(dev, mpmd_threads_for(nthreads, n), n, narrow_part, &j);
}

void mpmd_cpu_parallel(void *dev, int nt, mpmd_work_fn fn, void *ctx) {
    mpmd_pool_run(dev ? ((cpu_dev *)dev)->pool : NULL, nt, fn, ctx);
}

typedef struct {
    mpmd_range_fn fn;
    void *ctx;
    int64_t n;
} range_job;

static void range_part(void *ctx, int t, int nt) {
    const range_job *j = ctx;
    int64_t lo, hi;
    mpmd_split(j->n, t, nt, &lo, &hi);
    if (hi > lo) j->fn(j->ctx, lo, hi);
}

void mpmd_cpu_for(void *dev, int nt, int64_t n, mpmd_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job j = {fn, ctx, n};
    mpmd_cpu_parallel(dev, nt, range_part, &j);
}

static int cpu_convert(void *dev, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from, int64_t n) {
    cpu_dev *d = dev;
    if (to == MPMD_F32 && is16(from))
        mpmd_cpu_widen(d, d->nthreads, from, src, dst, n);
    else if (from == MPMD_F32 && is16(to))
        mpmd_cpu_narrow(d, d->nthreads, to, src, dst, n);
    else
        return 1;
    return 0;
}

static int cpu_launch(void *dev, const mpmd_kernel *k, const mpmd_kargs *a) {
    if (mpmd_kernel_native(k, a->g, a->node)) return k->fn(a);
    return mpmd_launch_widened(dev, k, a, cpu_convert);
}

static int cpu_available(char *why, size_t len) {
    (void)why, (void)len;
    return 0;
}

/* OpenBLAS (0.3, x86-64) maps a work buffer of 128 MiB and a page for each
 * thread that multiplies (the ranks' threads are new each run, so each
 * maps its own), and when the address-space limit (ulimit -v, RLIMIT_AS)
 * refuses one it retries forever. So before a step starts its threads,
 * the limit must leave room for their buffers and for what each thread
 * maps besides: its stack and its malloc arena (glibc reserves 64 MiB for
 * each thread's). */
#define BLAS_BUFFER ((int64_t)(128 << 20) + 4096)
#define THREAD_ARENA ((int64_t)64 << 20)

static int cpu_room(int threads, char *why, size_t len) {
    struct rlimit rl, stack;
    if (getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY) return 0;
    long page = sysconf(_SC_PAGESIZE);
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    int have = f && fscanf(f, "%lu", &pages) == 1;
    if (f) fclose(f);
    if (!have || page <= 0) return 0; /* no way to tell what is mapped: nothing to check */
    const int64_t stack_bytes = !getrlimit(RLIMIT_STACK, &stack) && stack.rlim_cur != RLIM_INFINITY
                                    ? (int64_t)stack.rlim_cur
                                    : (int64_t)8 << 20;
    const int64_t mapped = (int64_t)pages * page, limit = (int64_t)rl.rlim_cur;
    const int64_t need = (int64_t)threads * (BLAS_BUFFER + stack_bytes + THREAD_ARENA);
    if (mapped + need <= limit) return 0;
    snprintf(
        why, len,
        "the address-space limit (ulimit -v) is %.0f MiB and this process maps %.0f MiB; its %d threads "
        "that may multiply at once need about %.0f MiB more (OpenBLAS maps a %.0f MiB work buffer for each, "
        "and retries forever when the limit refuses one; each thread's stack and malloc arena): raise the "
        "limit to at least %.0f MiB, or run fewer threads (threads_per_rank, ranks)",
        (double)limit / 1048576, (double)mapped / 1048576, threads, (double)need / 1048576,
        (double)BLAS_BUFFER / 1048576, (double)(mapped + need) / 1048576 + 1);
    return 1;
}

static void *cpu_open(int rank, int nthreads, char *err, size_t len) {
    cpu_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, len, "out of memory opening the cpu backend for rank %d", rank);
        return NULL;
    }
    d->nthreads = nthreads > 0 ? nthreads : 1;
    char why[160];
    if (d->nthreads > 1 && !(d->pool = mpmd_pool_new(d->nthreads, why, sizeof why))) {
        snprintf(err, len, "rank %d's kernel threads: %s", rank, why);
        free(d);
        return NULL;
    }
    return d;
}

static void cpu_close(void *dev) {
    if (dev) mpmd_pool_free(((cpu_dev *)dev)->pool);
    free(dev);
}
static void cpu_enter(void *dev) { (void)dev; }

/* A buffer is 64-byte aligned and a multiple of 64 bytes, after a 64-byte
 * header that holds its size (for the instance's count). */
enum { CPU_GRANULE = 64 };

static void *cpu_alloc(void *dev, size_t bytes) {
    cpu_dev *d = dev;
    size_t b = ((bytes ? bytes : 1) + CPU_GRANULE - 1) / CPU_GRANULE * CPU_GRANULE;
    char *p = NULL;
    if (posix_memalign((void **)&p, CPU_GRANULE, b + CPU_GRANULE)) return NULL;
    memcpy(p, &b, sizeof b);
    if (d) {
        size_t now = __atomic_add_fetch(&d->in_use, b, __ATOMIC_RELAXED), seen;
        while ((seen = __atomic_load_n(&d->peak, __ATOMIC_RELAXED)) < now &&
               !__atomic_compare_exchange_n(&d->peak, &seen, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    return p + CPU_GRANULE;
}

static void cpu_free(void *dev, void *ptr) {
    if (!ptr) return;
    char *p = (char *)ptr - CPU_GRANULE;
    size_t b;
    memcpy(&b, p, sizeof b);
    if (dev) __atomic_sub_fetch(&((cpu_dev *)dev)->in_use, b, __ATOMIC_RELAXED);
    free(p);
}

static void cpu_memory(void *dev, size_t *peak, size_t *own) {
    *peak = dev ? __atomic_load_n(&((cpu_dev *)dev)->peak, __ATOMIC_RELAXED) : 0;
    *own = 0;
}

static int cpu_memcpy(void *dev, void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
    return 0;
}

static int cpu_fold(void *dev, const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x,
                    int mb) {
    mpmd_cpu_fold(g, reduce, acc, x, mb);
    return 0;
}

static int cpu_combine(void *dev, const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas,
                       void *out, int64_t count) {
    mpmd_cpu_combine(g, n, bufs, replicas, out, count);
    return 0;
}

typedef struct {
    int n;
    const void *const *x;
    const int64_t *count;
    int64_t total;
    uint32_t (*part)[MPMD_EXACT_WORDS];
} sumsq_job;

static void sumsq_part(void *ctx, int t, int nt) {
    const sumsq_job *j = ctx;
    int64_t lo, hi;
    mpmd_split(j->total, t, nt, &lo, &hi);
    int64_t at = 0; /* the elements [lo, hi) of the vectors laid end to end */
    for (int i = 0; i < j->n && at < hi; at += j->count[i], i++) {
        const int64_t a = lo > at ? lo - at : 0, b = hi - at < j->count[i] ? hi - at : j->count[i];
        if (b > a) mpmd_exact_add_squares(j->part[t], (const float *)j->x[i] + a, b - a);
    }
}

/* Each thread takes an equal share of all the elements, across the
 * vectors, into an accumulator of its own; the shares are exact, so the
 * thread count changes nothing. */
static int cpu_sumsq(void *dev, int n, const void *const *x, const int64_t *count, uint32_t *acc, char *err,
                     size_t len) {
    (void)err, (void)len;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += count[i];
    const int nt = mpmd_threads_for(dev ? ((cpu_dev *)dev)->nthreads : 1, total);
    uint32_t part[64][MPMD_EXACT_WORDS];
    const int T = nt < 64 ? nt : 64;
    memset(part, 0, sizeof part[0] * (size_t)T);
    sumsq_job j = {n, x, count, total, part};
    mpmd_cpu_parallel(dev, T, sumsq_part, &j);
    for (int t = 0; t < T; t++)
        mpmd_exact_add(acc, part[t]);
    return 0;
}

static int cpu_sync(void *dev, char *err, size_t len) { return 0; }
static void *cpu_event_record(void *dev) { return NULL; }
static int cpu_event_wait(void *dev, void *ev) { return 0; }
static void cpu_event_free(void *dev, void *ev) {}

const mpmd_backend mpmd_backend_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .compute = MPMD_F32, /* no bf16 arithmetic: 16-bit operands are widened around f32 kernels */
    .fused_attention = 1,
    .device =
        {
            .available = cpu_available,
            .room = cpu_room,
            .open = cpu_open,
            .close = cpu_close,
            .enter = cpu_enter,
            .memory = cpu_memory,
        },
    .queue =
        {
            .alloc = cpu_alloc,
            .free = cpu_free,
            .granule = CPU_GRANULE,
            .upload = cpu_memcpy,
            .download = cpu_memcpy,
            .copy = cpu_memcpy,
            .sync = cpu_sync,
            .event_record = cpu_event_record,
            .event_wait = cpu_event_wait,
            .event_free = cpu_event_free,
        },
    .kernels =
        {
            .find = mpmd_cpu_find,
            .fold = cpu_fold,
            .combine = cpu_combine,
            .model_combine = mpmd_cpu_model_combine,
            .model_local = mpmd_cpu_model_local,
            .sumsq = cpu_sumsq,
            .launch = cpu_launch,
        },
};
