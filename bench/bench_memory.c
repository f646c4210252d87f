/* bench_memory - what rematerialisation saves and costs, and how well the
 * layout planner predicts and chooses.
 *
 * (a) remat: the GPT of bench_train's two sizes (small: 4 layers, width
 *     256, vocab 8192; 124m-shaped: 12 layers, width 768, vocab 50257; seq
 *     64, batch 8), Std1F1B over 4 stages on 4 ranks of one kernel thread,
 *     8 microbatches, with --remat none, dots and block. Per mode:
 *
 *       kept       the most bytes of activations kept past their task at once
 *                  (for the backward or a send: what remat trades), per rank
 *                  and the largest
 *       act_peak   the most bytes of all activations alive at once, transient
 *                  ones too (a stage's embedding gradient, its logits)
 *       planned    every byte the largest rank allocates (parameters,
 *                  optimizer state, arena, workspace); measured: its backend's
 *                  count, which must be equal
 *       ms         the median step time
 *
 *     and against none: kept_ratio (target for block: <= 0.35), act_ratio
 *     and time_ratio (target for block: <= 1.4). Every mode's parameters after
 *     the steps must equal none's bit for bit, else it exits 1.
 *
 * (b) planner: the small GPT (4 layers, width 128, batch 8) on 2 ranks.
 *     gpt_plan (what gpt --auto runs) without a limit: its first choice's
 *     predicted and measured step (target: within 15%). Then under a limit
 *     that rules out the fastest unlimited layout: every layout that fits is
 *     measured, and the choice's measured step is compared with the best
 *     measured one (choice_vs_best, 1 is perfect).
 *
 * Options: --only remat|planner, --model small|124m (remat), --steps N.
 * One JSON line per measurement. */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "gpt_plan.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_steps = 3;

typedef struct result {
    double ms;
    int64_t act[8], kept[8], planned[8], measured[8];
    int ranks;
    char hash[65];
} result;

/* Median step time of `steps` runs after one warm-up, and the memory. */
static int measure(const gpt_config *c, const mpmd_schedule *s, int threads, result *r) {
    gpt_model m;
    mpmd_error err;
    memset(r, 0, sizeof *r);
    if (gpt_build(c, 1, &m, &err)) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        return 1;
    }
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = threads;
    so.seed = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &so, &err);
    if (!st) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        gpt_model_free(&m);
        return 1;
    }
    size_t nb = (size_t)(c->batch * c->seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    double *t = malloc(sizeof(double) * (size_t)(g_steps + 1));
    int rc = !tok || !tgt || !t;
    for (int k = 0; !rc && k <= g_steps; k++) {
        gpt_random_batch(c->vocab, c->batch, c->seq, 7, (uint64_t)k, tok, tgt);
        double t0 = bench_now();
        rc = mpmd_step_set_input(st, m.tokens, tok, nb) || mpmd_step_set_input(st, m.targets, tgt, nb) ||
             mpmd_step_run(st);
        if (k) t[k - 1] = bench_now() - t0;
    }
    if (rc) fprintf(stderr, "bench_memory: %s\n", mpmd_step_error(st));
    if (!rc) {
        r->ms = 1e3 * bench_median(t, g_steps);
        r->ranks = mpmd_step_num_ranks(st);
        for (int q = 0; q < r->ranks && q < 8; q++) {
            mpmd_memory_stats ms;
            mpmd_step_memory(st, q, &ms);
            r->act[q] = mpmd_step_peak_bytes(st, q);
            r->kept[q] = ms.kept;
            r->planned[q] = ms.planned;
            r->measured[q] = ms.measured;
        }
        mpmd_step_params_sha256(st, r->hash);
    }
    free(tok), free(tgt), free(t);
    mpmd_step_free(st);
    gpt_model_free(&m);
    return rc;
}

static int64_t largest(const int64_t *v, int n) {
    int64_t x = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > x) x = v[i];
    return x;
}

static int bench_remat(const char *model) {
    gpt_config c = gpt_config_default();
    int big = !strcmp(model, "124m");
    c.layers = big ? 12 : 4, c.width = big ? 768 : 256, c.heads = big ? 12 : 4;
    c.vocab = big ? 50257 : 8192, c.seq = 64, c.batch = 8, c.microbatches = 8, c.stages = 4;
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(4, 8, &s, &err)) return 1;
    static const int modes[] = {0, MPMD_REMAT_SAVE_DOTS, MPMD_REMAT_SAVE_NOTHING};
    result base, r;
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        c.remat = modes[k];
        if ((rc = measure(&c, s, 1, k ? &r : &base))) break;
        result *x = k ? &r : &base;
        if (k && strcmp(r.hash, base.hash)) {
            fprintf(stderr, "bench_memory: remat %s changed the parameters (%s vs %s)\n",
                    gpt_remat_name(modes[k]), r.hash, base.hash);
            rc = 1;
            break;
        }
        int64_t act = largest(x->act, x->ranks), act0 = largest(base.act, base.ranks);
        int64_t kept = largest(x->kept, x->ranks), kept0 = largest(base.kept, base.ranks);
        int64_t pl = largest(x->planned, x->ranks), me = largest(x->measured, x->ranks);
        printf(
            "{\"bench\": \"remat\", \"model\": \"gpt-%s\", \"schedule\": \"Std1F1B(S=4, D=4, n=8)\", "
            "\"remat\": \"%s\", \"kept_per_rank\": [%lld, %lld, %lld, %lld], \"kept_peak\": %lld, "
            "\"act_peak\": %lld, \"planned\": %lld, \"measured\": %lld, \"ms\": %.1f, \"kept_ratio\": %.3f, "
            "\"act_ratio\": %.3f, \"time_ratio\": %.3f, \"bitwise_equal\": true}\n",
            model, gpt_remat_name(modes[k]), (long long)x->kept[0], (long long)x->kept[1],
            (long long)x->kept[2], (long long)x->kept[3], (long long)kept, (long long)act, (long long)pl,
            (long long)me, x->ms, (double)kept / (double)kept0, (double)act / (double)act0, x->ms / base.ms);
        fflush(stdout);
        if (pl != me) {
            fprintf(stderr, "bench_memory: planned %lld bytes but the backend counted %lld\n", (long long)pl,
                    (long long)me);
            rc = 1;
        }
    }
    mpmd_schedule_free(s);
    return rc;
}

static int bench_planner(void) {
    gpt_config c = gpt_config_default(); /* 4 layers, width 128, seq 64, batch 8 */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores / 2 > 0 ? (int)(cores / 2) : 1;
    gpt_layout best, *all = NULL;
    int n = 0;
    mpmd_error err;
    if (gpt_plan(&c, 2, threads, 0, NULL, NULL, &best, &all, &n, &err)) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        return 1;
    }
    gpt_config bc = gpt_layout_config(&c, &best);
    mpmd_schedule *s;
    result r;
    if (gpt_layout_schedule(&best, &s, &err) || measure(&bc, s, threads, &r)) return 1;
    mpmd_schedule_free(s);
    printf(
        "{\"bench\": \"planner\", \"model\": \"gpt-default\", \"ranks\": 2, \"limit\": null, \"choice\": "
        "\"%s S=%d "
        "n=%d remat %s\", \"predicted_ms\": %.2f, \"measured_ms\": %.2f, \"measured_over_predicted\": %.3f, "
        "\"layouts\": %d}\n",
        best.schedule, best.stages, best.microbatches, best.remat, best.predicted, r.ms,
        r.ms / best.predicted, n);
    fflush(stdout);
    /* a limit just under the fastest layout's peak */
    int64_t limit = best.peak_bytes - 1;
    free(all);
    if (gpt_plan(&c, 2, threads, limit, NULL, NULL, &best, &all, &n, &err)) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        return 1;
    }
    int fit = 0;
    double best_ms = 0, choice_ms = 0;
    char best_name[96] = "";
    for (int i = 0; i < n && all[i].fits; i++, fit++) {
        gpt_config lc = gpt_layout_config(&c, &all[i]);
        if (gpt_layout_schedule(&all[i], &s, &err) || measure(&lc, s, threads, &r)) return 1;
        mpmd_schedule_free(s);
        if (i == 0) choice_ms = r.ms;
        if (i == 0 || r.ms < best_ms) {
            best_ms = r.ms;
            snprintf(best_name, sizeof best_name, "%s S=%d n=%d remat %s", all[i].schedule, all[i].stages,
                     all[i].microbatches, all[i].remat);
        }
    }
    printf("{\"bench\": \"planner\", \"model\": \"gpt-default\", \"ranks\": 2, \"limit\": %lld, \"choice\": "
           "\"%s "
           "S=%d n=%d remat %s\", \"predicted_ms\": %.2f, \"measured_ms\": %.2f, \"best_measured\": \"%s\", "
           "\"best_ms\": %.2f, \"choice_vs_best\": %.3f, \"fitting_layouts_measured\": %d}\n",
           (long long)limit, best.schedule, best.stages, best.microbatches, best.remat, best.predicted,
           choice_ms, best_name, best_ms, choice_ms / best_ms, fit);
    free(all);
    return 0;
}

int main(int argc, char **argv) {
    program_start("bench_memory", argv);
    const char *only = NULL, *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            g_steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_memory [--only remat|planner] [--model small|124m] [--steps N]\n");
            return 2;
        }
    }
    if (g_steps < 1 || (only && strcmp(only, "remat") && strcmp(only, "planner")) ||
        (model && strcmp(model, "small") && strcmp(model, "124m"))) {
        fprintf(stderr,
                "bench_memory: bad option (--only remat|planner, --model small|124m, --steps >= 1)\n");
        return 2;
    }
    int rc = 0;
    if (bench_smoke()) g_steps = 1, model = model ? model : "small";
    if (!only || !strcmp(only, "remat")) {
        if (!model || !strcmp(model, "small")) rc |= bench_remat("small");
        if (!model || !strcmp(model, "124m")) rc |= bench_remat("124m");
    }
    if (!only || !strcmp(only, "planner")) rc |= bench_planner();
    return rc;
}
