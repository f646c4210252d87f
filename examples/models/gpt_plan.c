/* The GPT layout planner (gpt_plan.h). */
#include "gpt_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *gpt_remat_name(int remat) {
    return remat == MPMD_REMAT_SAVE_DOTS ? "dots" : remat == MPMD_REMAT_SAVE_NOTHING ? "block" : "none";
}

int gpt_remat_policy(const char *name) {
    return !strcmp(name, "dots")    ? MPMD_REMAT_SAVE_DOTS
           : !strcmp(name, "block") ? MPMD_REMAT_SAVE_NOTHING
                                    : 0;
}

gpt_config gpt_layout_config(const gpt_config *base, const gpt_layout *l) {
    gpt_config c = *base;
    c.stages = l->stages;
    c.microbatches = l->microbatches;
    c.remat = gpt_remat_policy(l->remat);
    c.balance_stages = 1; /* markers by cost: any stage count up to the layers */
    return c;
}

mpmd_status gpt_layout_schedule(const gpt_layout *l, mpmd_schedule **out, mpmd_error *err) {
    int kind = mpmd_schedule_kind_from_name(l->schedule);
    if (kind < 0) return mpmd_error_set(err, MPMD_ERR_INVALID, "unknown schedule \"%s\"", l->schedule);
    return mpmd_schedule_new((mpmd_schedule_kind)kind, l->stages, l->ranks, l->microbatches, 0, out, err);
}

/* One profiled step of the unpipelined loop of configuration c. */
static mpmd_step *profile(const gpt_model *m, int threads, mpmd_error *err) {
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = threads;
    mpmd_step *st = mpmd_jit_with_loop(m->g, NULL, &o, err);
    if (!st) return NULL;
    size_t n = (size_t)(m->cfg.batch * m->cfg.seq);
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    mpmd_status rc = tok && tgt ? MPMD_OK : MPMD_ERR_NOMEM;
    if (!rc) {
        gpt_random_batch(m->cfg.vocab, m->cfg.batch, m->cfg.seq, 1, 1, tok, tgt);
        rc = gpt_set_inputs(st, m, tok, tgt, n * sizeof *tok, 1, 1, 1);
    }
    /* a warm-up run (first touches of memory), then the profiled one */
    if (!rc) rc = mpmd_step_run(st);
    if (!rc) rc = mpmd_step_set_profiling(st, 1);
    if (!rc) rc = mpmd_step_run(st);
    if (rc) {
        mpmd_error_set(err, rc, "profiling the loop: %s", mpmd_step_error(st));
        mpmd_step_free(st);
        st = NULL;
    }
    free(tok), free(tgt);
    return st;
}

/* Bytes per second of a large memcpy on this machine: the best of a few
 * copies of 64 MiB (what an in-process FSDP gather does, replica by
 * replica). */
static double copy_rate(void) {
    const size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n), memset(b, 2, n);
        for (int k = 0; k < 3; k++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            memcpy(b, a, n);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (s > 0 && (double)n / s > best) best = (double)n / s;
        }
    }
    free(a), free(b);
    return best > 0 ? best : 1e9;
}

mpmd_status gpt_plan(const gpt_config *base, int ranks, int threads, int64_t limit, const gpt_plan_fsdp *fsdp,
                     FILE *report, gpt_layout *best, gpt_layout **all, int *n_all, mpmd_error *err) {
    static const char *const flat[] = {"gpipe", "std1f1b", "eager1f1b", "zerobubble"};
    static const char *const twice[] = {"interleaved1f1b", "kimik2", "interleavedgpipe", "dualpipev"};
    static const int remats[] = {0, MPMD_REMAT_SAVE_DOTS, MPMD_REMAT_SAVE_NOTHING};
    *all = NULL;
    *n_all = 0;
    if (ranks < 1 || ranks > base->layers)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "--auto: %d ranks for %d layers; each rank needs a layer", ranks, base->layers);
    int cap = 256, n = 0;
    gpt_layout *l = malloc((size_t)cap * sizeof *l);
    const int sharded = fsdp && fsdp->fsdp && fsdp->replicas > 1;
    const double rate = sharded ? copy_rate() : 0;
    static const char *const gathers[2] = {"task", "step"};
    if (!l) return mpmd_error_set(err, MPMD_ERR_NOMEM, "--auto: out of memory");
    mpmd_status rc = MPMD_OK;
    for (int twice_s = 0; twice_s < 2 && !rc; twice_s++) {
        int S = ranks * (twice_s + 1);
        if (S > base->layers || (twice_s && ranks < 2)) continue;
        for (int64_t micro = ranks; micro <= base->batch && !rc; micro *= 2) {
            if (base->batch % micro) continue;
            for (int ri = 0; ri < 3 && !rc; ri++) {
                gpt_layout proto = {"", S, ranks, (int)micro, "", NAN, 0, 0, ""};
                snprintf(proto.remat, sizeof proto.remat, "%s", gpt_remat_name(remats[ri]));
                gpt_config c = gpt_layout_config(base, &proto);
                gpt_model m;
                if ((rc = gpt_build(&c, 1, &m, err))) break;
                mpmd_step *prof = profile(&m, threads, err);
                if (!prof) {
                    rc = err ? err->code : MPMD_ERR_RUNTIME;
                    gpt_model_free(&m);
                    break;
                }
                mpmd_step_opts o = MPMD_STEP_DEFAULTS;
                o.threads_per_rank = threads;
                if (sharded) o.data_parallel = fsdp->replicas, o.fsdp = 1;
                for (int k = 0; k < 4 && !rc; k++) {
                    mpmd_schedule *s;
                    mpmd_error e2;
                    gpt_layout x = proto;
                    snprintf(x.schedule, sizeof x.schedule, "%s", twice_s ? twice[k] : flat[k]);
                    if (gpt_layout_schedule(&x, &s, &e2)) continue; /* this kind cannot take these counts */
                    /* FSDP: each gather policy asked for; its gathers cost their bytes at the copy rate */
                    for (int gi = 0; gi < (sharded ? 2 : 1) && !rc; gi++) {
                        if (sharded && fsdp->gather >= 0 && fsdp->gather != gi) continue;
                        if (sharded) {
                            o.fsdp_gather = (mpmd_fsdp_gather)gi;
                            snprintf(x.gather, sizeof x.gather, "%s", gathers[gi]);
                        }
                        mpmd_prediction p;
                        if (mpmd_predict(m.g, s, &o, prof, &p, &e2) != MPMD_OK) continue;
                        x.predicted = p.step_ms + (sharded ? 1e3 * (double)p.gathered_bytes / rate : 0);
                        x.peak_bytes = p.peak;
                        mpmd_prediction_free(&p);
                        if (n == cap) {
                            gpt_layout *nl = realloc(l, (size_t)(cap *= 2) * sizeof *l);
                            if (!nl) {
                                rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "--auto: out of memory");
                                break;
                            }
                            l = nl;
                        }
                        l[n++] = x;
                    }
                    mpmd_schedule_free(s);
                }
                mpmd_step_free(prof);
                gpt_model_free(&m);
            }
        }
    }
    if (!rc && n == 0)
        rc = mpmd_error_set(err, MPMD_ERR_INVALID,
                            "--auto: no layout of %d ranks fits this model (batch %lld, %d layers)", ranks,
                            (long long)base->batch, base->layers);
    if (rc) {
        free(l);
        return rc;
    }
    int fit = mpmd_layouts_rank(l, n, limit);
    if (report) {
        fprintf(report, "auto: %d ranks x %d threads: ", ranks, threads);
        mpmd_layouts_report(report, l, n, limit, "ms");
    }
    if (!fit) {
        char b[64];
        snprintf(b, sizeof b, "%lld bytes", (long long)l[0].peak_bytes);
        rc = mpmd_error_set(err, MPMD_ERR_INVALID,
                            "--auto: no layout fits in %lld bytes per rank; the smallest peak found is %s "
                            "(%s, %d stages, %d microbatches, remat %s)",
                            (long long)limit, b, l[0].schedule, l[0].stages, l[0].microbatches, l[0].remat);
    } else {
        *best = l[0];
    }
    *all = l;
    *n_all = n;
    return rc;
}
