/* Initialisers. Element i of tensor "name" draws from a counter-based
 * generator: splitmix64 of (hash(seed, name), i). So a parameter's initial
 * value depends only on the seed, its full name and its shape: not on the
 * creation order, the thread count, or which rank creates it. A large
 * tensor's random draws are spread over threads started for it and joined
 * after (a normal draw is a log and a cos in double: GPT-2 124M's took 4 s
 * on one thread), one per 65536 elements, at most the cores this process
 * may use. */
#include "init.h"
#include "half.h"
#include "pool.h"

#include <math.h>
#include <string.h>

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* FNV-1a of the name, mixed with the seed. */
static uint64_t stream_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name ? name : ""; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return mix(h ^ mix(seed));
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double unit(uint64_t key, uint64_t i) {
    return ((double)(mix(key ^ mix(i)) >> 11) + 0.5) / 9007199254740992.0;
}

typedef struct {
    float *d;
    uint16_t *h;
    mpmd_dtype dtype;
    mpmd_init init;
    uint64_t key;
    double std;
} fill_job;

static void fill_range(const fill_job *j, int64_t lo, int64_t hi) {
    const mpmd_init init = j->init;
    for (int64_t i = lo; i < hi; i++) {
        float v = 0.0f;
        switch (init.kind) {
        case MPMD_INIT_ZEROS: v = 0.0f; break;
        case MPMD_INIT_CONST: v = init.a; break;
        case MPMD_INIT_UNIFORM: v = (float)(init.a + (init.b - init.a) * unit(j->key, (uint64_t)i)); break;
        case MPMD_INIT_NORMAL:
        case MPMD_INIT_LECUN: {
            /* Box-Muller on two independent uniforms of element i. */
            double u1 = unit(j->key, 2 * (uint64_t)i), u2 = unit(j->key, 2 * (uint64_t)i + 1);
            double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            v = (float)((init.kind == MPMD_INIT_NORMAL ? init.a : 0.0) + j->std * z);
            break;
        }
        }
        if (j->d)
            j->d[i] = v;
        else
            j->h[i] = j->dtype == MPMD_BF16 ? mpmd_f32_to_bf16(v) : mpmd_f32_to_f16(v);
    }
}

typedef struct {
    const fill_job *job;
    int64_t n;
} fill_ctx;

static void fill_part(void *ctx, int t, int nt) {
    const fill_ctx *c = ctx;
    int64_t q = c->n / nt, r = c->n % nt, lo = t * q + (t < r ? t : r);
    fill_range(c->job, lo, lo + q + (t < r ? 1 : 0));
}

void mpmd_init_fill(void *dst, const mpmd_type *t, const char *name, mpmd_init init, uint64_t seed) {
    int64_t n = mpmd_type_numel(t);
    if (t->dtype == MPMD_I32) {
        int32_t *d = dst;
        int32_t v = init.kind == MPMD_INIT_CONST ? (int32_t)init.a : 0;
        for (int64_t i = 0; i < n; i++)
            d[i] = v;
        return;
    }
    float *d = dst;
    uint16_t *h = NULL; /* a 16-bit float: each value computed in f32, then rounded */
    if (t->dtype == MPMD_BF16 || t->dtype == MPMD_F16) h = dst, d = NULL;
    uint64_t key = stream_key(seed, name);
    double std = init.b;
    if (init.kind == MPMD_INIT_LECUN) {
        double fan_in = 1;
        for (int k = 0; k + 1 < t->ndim; k++)
            fan_in *= (double)t->dim[k];
        std = 1.0 / sqrt(fan_in);
    }
    /* elements are independent: any split over threads gives the same values */
    const int draws =
        init.kind == MPMD_INIT_NORMAL || init.kind == MPMD_INIT_LECUN || init.kind == MPMD_INIT_UNIFORM;
    fill_job j = {d, h, t->dtype, init, key, std};
    int nt = draws ? (int)(n / 65536) : 1, cores = mpmd_cores_available();
    if (nt > cores) nt = cores;
    char why[160];
    mpmd_pool *pool = nt > 1 ? mpmd_pool_new(nt, why, sizeof why) : NULL; /* none: one thread does it all */
    mpmd_pool_run(pool, nt > 1 ? nt : 1, fill_part, &(fill_ctx){&j, n});
    mpmd_pool_free(pool);
}
