/* The planner's search (mpmd_planner_search): every layout of a GPU count
 * that the options allow, predicted and ranked.
 *
 * The space: tensor-parallel ranks tp dividing the GPUs, the heads and the
 * MLP width; pipeline ranks pp dividing the rest, at most the layers; the
 * replicas dp = GPUs / (tp pp), dividing the batch; a microbatch size
 * dividing a replica's batch (at most MAX_MICROBATCH sequences unless one
 * is given); every remat policy; FSDP off, gathered per task or per step
 * (dp > 1); and for pp > 1 every built-in schedule with its stage counts:
 * pp stages (GPipe, Std1F1B, Eager1F1B, ZeroBubble), 2 pp (DualPipeV) and
 * v pp for v = 2 .. MAX_V with v pp <= layers (the interleaved kinds; any
 * v when given). One pipeline rank runs the plain loop. */
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MICROBATCH 16
#define MAX_V 8

typedef struct found {
    mpmd_run_prediction *l;
    int n, cap;
} found;

static int push(found *f, const mpmd_run_prediction *p) {
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 256;
        mpmd_run_prediction *nl = realloc(f->l, (size_t)cap * sizeof *nl);
        if (!nl) return -1;
        f->l = nl, f->cap = cap;
    }
    f->l[f->n++] = *p;
    return 0;
}

/* Simulated and fitting, fastest first; bounded, by their bound; the rest
 * (over the limit) by peak, smallest first. */
static int group(const mpmd_run_prediction *p) { return p->fits ? 0 : p->bound ? 1 : 2; }

static int by_choice(const void *pa, const void *pb) {
    const mpmd_run_prediction *a = pa, *b = pb;
    int ga = group(a), gb = group(b);
    if (ga != gb) return ga - gb;
    if (ga < 2) return (a->step > b->step) - (a->step < b->step);
    return (a->peak > b->peak) - (a->peak < b->peak);
}

/* Simulate the bounded layouts from the smallest bound up, until a bound
 * exceeds the fastest that fits: those left keep their bound, which no
 * simulation could bring below the choice. Layouts whose schedule cannot
 * take their counts drop out. */
static mpmd_status refine(const mpmd_cluster *c, const mpmd_transformer *m, double limit, found *f,
                          mpmd_error *err) {
    qsort(f->l, (size_t)f->n, sizeof *f->l, by_choice); /* the bounded ones first (nothing fits yet) */
    double best = INFINITY;
    int kept = 0;
    for (int i = 0; i < f->n; i++) {
        mpmd_run_prediction p = f->l[i];
        if (p.bound && p.step <= best) {
            plan_schedule_cache cache = {0};
            const mpmd_run_layout l = p.layout; /* (p is overwritten) */
            mpmd_status rc = plan_predict(c, m, &l, limit, &p, NULL, NULL, &cache, 0, err);
            plan_schedule_cache_free(&cache);
            if (rc) return rc;
            if (!p.valid) continue;
            if (p.fits && p.step < best) best = p.step;
        }
        f->l[kept++] = p;
    }
    f->n = kept;
    qsort(f->l, (size_t)f->n, sizeof *f->l, by_choice);
    return MPMD_OK;
}

static int allowed(uint32_t mask, int bit) { return !mask || (mask >> bit & 1u); }

/* The stages per rank a schedule kind takes: [*lo, *hi]; 0 when none. */
static int stage_range(const mpmd_transformer *m, const mpmd_planner_opts *o, int pp, int kind, int *lo,
                       int *hi) {
    const int interleaved = kind == MPMD_SCHED_INTERLEAVED1F1B || kind == MPMD_SCHED_KIMIK2 ||
                            kind == MPMD_SCHED_INTERLEAVED_GPIPE;
    if (interleaved) { /* any multiple when asked for; else 2 .. MAX_V */
        *lo = o->stages_per_rank ? o->stages_per_rank : 2;
        *hi = o->stages_per_rank ? o->stages_per_rank : (m->layers / pp < MAX_V ? m->layers / pp : MAX_V);
    } else { /* the loop and the flat kinds run one stage a rank, DualPipeV two */
        *lo = *hi = kind == MPMD_SCHED_DUALPIPEV ? 2 : 1;
        if (o->stages_per_rank && o->stages_per_rank != *lo) return 0;
    }
    return *lo <= *hi;
}

/* Every remat policy and FSDP choice of layout l, bounded (not simulated). */
static mpmd_status try_variants(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_planner_opts *o,
                                mpmd_run_layout l, double limit, found *f, mpmd_error *err) {
    mpmd_status rc = MPMD_OK;
    for (int remat = MPMD_PLAN_REMAT_NONE; remat <= MPMD_PLAN_REMAT_BLOCK && !rc; remat++) {
        if (!allowed(o->remats, remat)) continue;
        for (int fsdp = MPMD_PLAN_FSDP_OFF; fsdp <= MPMD_PLAN_FSDP_STEP && !rc; fsdp++) {
            if ((o->fsdp >= 0 && fsdp != o->fsdp) || (fsdp && l.dp < 2)) continue;
            l.remat = remat, l.fsdp = fsdp;
            mpmd_run_prediction p;
            rc = plan_predict(c, m, &l, limit, &p, NULL, NULL, NULL, 1, err);
            if (!rc && p.valid && push(f, &p))
                rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the layouts");
        }
    }
    return rc;
}

/* The schedules and stage counts of one mesh and microbatch size. */
static mpmd_status try_schedules(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_planner_opts *o,
                                 mpmd_run_layout l, double limit, found *f, mpmd_error *err) {
    static const int kinds[] = {
        MPMD_SCHED_GPIPE,     MPMD_SCHED_STD1F1B,         MPMD_SCHED_EAGER1F1B, MPMD_SCHED_ZEROBUBBLE,
        MPMD_SCHED_DUALPIPEV, MPMD_SCHED_INTERLEAVED1F1B, MPMD_SCHED_KIMIK2,    MPMD_SCHED_INTERLEAVED_GPIPE};
    const int nk = l.pp > 1 ? (int)(sizeof kinds / sizeof *kinds) : 1;
    for (int k = 0; k < nk; k++) {
        int kind = l.pp > 1 ? kinds[k] : MPMD_PLAN_LOOP, lo, hi;
        if ((l.pp > 1 && !allowed(o->schedules, kind)) || !stage_range(m, o, l.pp, kind, &lo, &hi)) continue;
        for (int v = lo; v <= hi; v++) {
            l.schedule = kind;
            l.stages = v * l.pp;
            mpmd_status rc = try_variants(c, m, o, l, limit, f, err);
            if (rc) return rc;
        }
    }
    return MPMD_OK;
}

/* Every microbatch size of one mesh. */
static mpmd_status try_mesh(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_planner_opts *o,
                            int tp, int pp, int dp, double limit, found *f, mpmd_error *err) {
    const int64_t per_replica = m->batch / dp;
    for (int64_t b = 1; b <= per_replica; b++) {
        if (per_replica % b || (o->microbatch ? b != o->microbatch : b > MAX_MICROBATCH)) continue;
        mpmd_run_layout l = {tp, pp, dp, MPMD_PLAN_FSDP_OFF, 1, MPMD_PLAN_LOOP, (int)b, MPMD_PLAN_REMAT_NONE};
        mpmd_status rc = try_schedules(c, m, o, l, limit, f, err);
        if (rc) return rc;
    }
    return MPMD_OK;
}

static mpmd_status check_opts(const mpmd_transformer *m, const mpmd_planner_opts *o, mpmd_error *err) {
    if (!o || o->gpus < 1)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "the planner needs a GPU count (gpus >= 1)");
    const struct {
        const char *name;
        int v;
    } c[] = {{"tp", o->tp},
             {"pp", o->pp},
             {"dp", o->dp},
             {"stages per rank", o->stages_per_rank},
             {"microbatch size", o->microbatch}};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        if (c[i].v < 0)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "the %s must be >= 1 (0: searched), got %d",
                                  c[i].name, c[i].v);
    const int fixed[3] = {o->tp, o->pp, o->dp};
    int64_t prod = 1;
    for (int i = 0; i < 3; i++)
        if (fixed[i]) prod *= fixed[i];
    if (o->gpus % prod || (o->tp && o->pp && o->dp && prod != o->gpus))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "tp %d x pp %d x dp %d (0: searched) cannot make %d GPUs", o->tp, o->pp, o->dp,
                              o->gpus);
    if (o->pp > m->layers)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%d pipeline ranks for %d layers: each rank needs a layer", o->pp, m->layers);
    if (o->fsdp < -1 || o->fsdp > MPMD_PLAN_FSDP_STEP)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "fsdp %d is not -1 (searched) or an MPMD_PLAN_FSDP_*",
                              o->fsdp);
    if (o->memory_limit < 0 || !isfinite(o->memory_limit))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the memory limit must be finite and >= 0 (0: the cluster's)");
    return MPMD_OK;
}

mpmd_status mpmd_planner_search(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_planner_opts *o,
                                mpmd_planner_result **out, mpmd_error *err) {
    if (!out) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_planner_search: no place for the result");
    *out = NULL;
    mpmd_status rc = mpmd_transformer_check(m, err);
    if (rc || (rc = check_opts(m, o, err))) return rc;
    if (!c) return mpmd_error_set(err, MPMD_ERR_INVALID, "no cluster (NULL)");
    const double limit = o->memory_limit > 0 ? o->memory_limit : c->memory;
    found f = {0};
    for (int tp = 1; tp <= o->gpus && tp <= m->heads && !rc; tp++) { /* tp divides the heads */
        if (o->gpus % tp || (o->tp && tp != o->tp)) continue;
        if (m->heads % tp || (m->ffn ? m->ffn : 4 * m->hidden) % tp) continue;
        for (int pp = 1; pp <= o->gpus / tp && pp <= m->layers && !rc; pp++) {
            if ((o->gpus / tp) % pp || (o->pp && pp != o->pp)) continue;
            int dp = o->gpus / tp / pp;
            if ((o->dp && dp != o->dp) || m->batch % dp) continue;
            rc = try_mesh(c, m, o, tp, pp, dp, limit, &f, err);
        }
    }
    if (!rc) rc = refine(c, m, limit, &f, err);
    if (rc) {
        free(f.l);
        return rc;
    }
    if (!f.n)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "no layout of %d GPUs runs this model (batch %lld, %d layers, %d heads) under these "
            "options: the counts do not divide",
            o->gpus, (long long)m->batch, m->layers, m->heads);
    mpmd_planner_result *r = calloc(1, sizeof *r);
    if (!r) {
        free(f.l);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the result");
    }
    r->layouts = f.l, r->n = f.n, r->memory_limit = limit, r->gpus = o->gpus;
    while (r->fit < r->n && r->layouts[r->fit].fits)
        r->fit++;
    *out = r;
    if (!r->fit) {
        char what[160];
        mpmd_run_layout_str(&r->layouts[0].layout, r->layouts[0].microbatches, what, sizeof what);
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "no layout fits in %.2f GiB per GPU; the smallest peak found is %.2f GiB (%s)",
                              limit / (1 << 30), r->layouts[0].peak / (1 << 30), what);
    }
    return MPMD_OK;
}

void mpmd_planner_result_free(mpmd_planner_result *r) {
    if (!r) return;
    free(r->layouts);
    free(r);
}
