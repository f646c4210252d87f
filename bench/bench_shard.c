/* bench_shard - what sharding inside a stage saves in memory and costs in
 * time: FSDP (ZeRO-3, mpmd_step_opts.fsdp) against plain data parallelism,
 * and tensor parallelism (mpmd_set_tensor_parallel) against the whole
 * model.
 *
 * The model is bench_train's GPT small: 4 layers, width 256, 4 heads,
 * vocab 8192, seq 64, untied, AdamW. The graph describes one replica: its
 * batch is the replica's share of the global batch, and mpmd_step_set_input
 * gets the global batch (replica d takes the d-th share).
 *
 * (a) memory: Std1F1B over 2 stages on 2 ranks, 8 sequences per replica in
 *     4 microbatches, with R = 2 and R = 4 replicas of each rank, plain
 *     data parallelism and then FSDP, 2 recorded steps each (one kernel
 *     thread per rank). One JSON line per (R, mode) with, per pipeline rank
 *     (replica 0's; every replica holds the same):
 *
 *       state             parameters + optimizer_state bytes (mpmd_step_memory)
 *       planned           every byte the rank allocates, planned; measured:
 *                         its backend's count (must be equal, else exit 1)
 *       gathered          of the arena at its fullest, FSDP's parameters
 *                         gathered whole for a task (0 without FSDP)
 *       act_peak          the most bytes of body values alive at once, planned
 *                         and measured in the recorded run (mpmd_step_summary)
 *       collective        bytes replica 0 took from the other replicas in the
 *                         last step (gathers, reduce-scatters), measured and
 *                         the textbook (R - 1) / R volume (0 without FSDP)
 *
 *     and on the FSDP line: state_ratio = FSDP state / plain state per rank
 *     and its largest (target for R = 4: <= 0.3, the "pass" field; a byte
 *     count, not a timing: exits 1 when it is over), planned_ratio_max (the
 *     same for every planned byte), and bitwise_equal: the
 *     parameters (params_sha256) and loss after the steps equal the plain
 *     run's (exits 1 when not).
 *
 *     Then tensor parallelism: Std1F1B over 4 stages (one block each) with
 *     every block split over M = 2 model ranks (no replicas), against the
 *     whole model on it: the parameter bytes a rank holds (model rank 0's;
 *     each holds the same split) and weight_ratio = split / whole per rank
 *     (the embedding and the LM head split by vocabulary rows, the norms
 *     and position table whole). Target: <= 0.55 on every rank (a byte
 *     count: exits 1 when over).
 *
 * (b) step time: the whole training step of GPT small on a global batch of
 *     8 sequences, microbatches of 2 sequences, one kernel thread per rank
 *     (threads_per_rank = 1), the median of --steps timed steps (default 5)
 *     after one warm-up:
 *
 *       loop       the unpipelined loop on one rank, 8 sequences, 4 microbatches
 *       loop x DP 2    two replicas, 4 sequences each in 2 microbatches
 *       loop x FSDP 2  the same, sharded
 *       loop x TP 2    every block split over 2 model ranks, 8 sequences
 *                      in 4 microbatches (its loss within 1e-4 of the loop's)
 *
 *     with time_ratio = ms / loop ms and speedup = loop ms / ms against the
 *     loop measured in the same run. With 2 cores, 2 replicas are at best 2x.
 *     FSDP 2's parameters must equal DP 2's (exits 1 when not).
 *
 * (c) FSDP in bf16: the same Std1F1B over 2 stages with R = 4 replicas,
 *     compute in bf16 (the layers cast their f32 parameters): plain data
 *     parallelism, FSDP gathered per task and per step (and per step with 8
 *     microbatches), and f32 FSDP per task. One JSON line "fsdp_bf16" with
 *     the parameter + optimizer bytes per rank (state_ratio_max against
 *     plain: target <= 0.3), the bytes gathered per step (of the collective
 *     bytes, mpmd_rank_stats.gathered_bytes) against f32 FSDP's (target 0.5
 *     +- 5%: the 16-bit copies), the per-step policy's at 4 and 8
 *     microbatches (target: equal, one copy per step) and the gathered
 *     bytes it holds; pass, and bitwise_equal (FSDP's parameters and loss
 *     plain data parallelism's). Exits 1 when a target or the bits fail.
 *
 * MPMD_BENCH_SMOKE=1: a tiny GPT (2 layers, width 64, vocab 512, seq 16),
 * one step of each, to show that it runs (timing nothing; the byte checks
 * still apply). Options: --steps N, --only memory|time. Progress goes to
 * stderr; stdout gets one JSON object per measurement. */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RANKS = 4 };

static int g_steps = 5;

/* What one compiled step measured. */
typedef struct result {
    int ranks;
    double ms, ms_min, ms_max; /* the median, fastest and slowest timed step */
    float loss;                /* after the last step */
    char hash[65];
    int64_t state[MAX_RANKS], planned[MAX_RANKS], measured[MAX_RANKS], gathered[MAX_RANKS], params[MAX_RANKS];
    int64_t act_planned[MAX_RANKS], act_measured[MAX_RANKS];
    int64_t coll[MAX_RANKS], coll_expected[MAX_RANKS], gath[MAX_RANKS];
} result;

static gpt_config model_cfg(int smoke) {
    gpt_config c = gpt_config_default();
    if (smoke) {
        c.layers = 2, c.width = 64, c.heads = 2, c.vocab = 512, c.seq = 16;
    } else {
        c.layers = 4, c.width = 256, c.heads = 4, c.vocab = 8192, c.seq = 64;
    }
    c.tie_embeddings = 0;
    c.lr = 1e-4f;
    return c;
}

/* Compile c (batch: one replica's share) under s (NULL: the loop) with
 * `replicas` replicas, plain or FSDP (gathered as `when` says), one thread
 * per rank; run `warm` untimed and `timed` timed steps on a global batch of
 * replicas x batch sequences; with `record`, record every run and take the
 * summary of the last. Fills r; 0 on success. */
static int measure(const gpt_config *c, const mpmd_schedule *s, int replicas, int fsdp, mpmd_fsdp_gather when,
                   int warm, int timed, int record, result *r) {
    const char *mode = c->tensor_parallel > 1 ? "TP" : fsdp ? "FSDP" : "plain";
    gpt_model m;
    mpmd_error err;
    memset(r, 0, sizeof *r);
    if (gpt_build(c, 1, &m, &err)) {
        fprintf(stderr, "bench_shard: %s\n", err.msg);
        return 1;
    }
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = 1;
    so.seed = 1;
    so.data_parallel = replicas;
    so.fsdp = fsdp;
    so.fsdp_gather = when;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &so, &err);
    if (!st) {
        fprintf(stderr, "bench_shard: %s\n", err.msg);
        gpt_model_free(&m);
        return 1;
    }
    if (record) mpmd_step_set_recording(st, 1);
    int64_t global = c->batch * replicas;
    size_t nb = (size_t)(global * c->seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    double *t = malloc(sizeof(double) * (size_t)(timed > 0 ? timed : 1));
    int rc = !tok || !tgt || !t;
    if (rc) fprintf(stderr, "bench_shard: out of memory\n");
    for (int k = 0; !rc && k < warm + timed; k++) {
        gpt_random_batch(c->vocab, global, c->seq, 7, (uint64_t)k, tok, tgt);
        if (gpt_set_inputs(st, &m, tok, tgt, nb, 1, (uint64_t)k, replicas)) {
            fprintf(stderr, "bench_shard: %s\n", mpmd_step_error(st));
            rc = 1;
            break;
        }
        double t0 = bench_now();
        rc = mpmd_step_run(st);
        double dt = bench_now() - t0;
        if (!rc) rc = mpmd_step_read(st, m.loss, &r->loss, sizeof r->loss);
        if (rc) {
            fprintf(stderr, "bench_shard: %s\n", mpmd_step_error(st));
            break;
        }
        if (k >= warm) t[k - warm] = dt;
        fprintf(stderr, "  R=%d %s step %d%s: %.1f ms, loss %.4f\n", replicas, mode, k,
                k < warm ? " (warm-up)" : "", 1e3 * dt, r->loss);
    }
    if (!rc && timed > 0) {
        r->ms = 1e3 * bench_median(t, timed); /* sorts t */
        r->ms_min = 1e3 * t[0];
        r->ms_max = 1e3 * t[timed - 1];
    }
    if (!rc) {
        r->ranks = mpmd_step_num_ranks(st);
        if (r->ranks > MAX_RANKS) r->ranks = MAX_RANKS;
        for (int q = 0; q < r->ranks; q++) {
            mpmd_memory_stats ms;
            mpmd_step_memory(st, q, &ms);
            r->state[q] = ms.parameters + ms.optimizer_state;
            r->planned[q] = ms.planned;
            r->measured[q] = ms.measured;
            r->gathered[q] = ms.gathered;
            r->params[q] = ms.parameters;
        }
        if (record) {
            mpmd_step_stats ss;
            if (mpmd_step_summary(st, &ss, &err)) {
                fprintf(stderr, "bench_shard: %s\n", err.msg);
                rc = 1;
            } else {
                for (int q = 0; q < r->ranks && q < ss.num_ranks; q++) {
                    r->act_planned[q] = ss.ranks[q].planned_peak_bytes;
                    r->act_measured[q] = ss.ranks[q].peak_bytes;
                    r->coll[q] = ss.ranks[q].collective_bytes;
                    r->coll_expected[q] = ss.ranks[q].collective_expected;
                    r->gath[q] = ss.ranks[q].gathered_bytes;
                }
                mpmd_step_stats_free(&ss);
            }
        }
        mpmd_step_params_sha256(st, r->hash);
    }
    free(tok), free(tgt), free(t);
    mpmd_step_free(st);
    gpt_model_free(&m);
    return rc;
}

/* "[a, b]" of the first n values. */
static const char *list(char *buf, size_t cap, const int64_t *v, int n) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

static int bench_memory_part(int smoke) {
    gpt_config c = model_cfg(smoke);
    c.batch = 8, c.microbatches = 4, c.stages = 2;
    const int steps = smoke ? 1 : 2;
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(2, c.microbatches, &s, &err)) {
        fprintf(stderr, "bench_shard: %s\n", err.msg);
        return 1;
    }
    static const int Rs[] = {2, 4};
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        int R = Rs[i];
        result res[2];
        for (int f = 0; f < 2 && !rc; f++) {
            fprintf(stderr, "memory: Std1F1B(S=2, D=2, n=%d), R=%d, %s\n", c.microbatches, R,
                    f ? "FSDP" : "plain data parallelism");
            if ((rc = measure(&c, s, R, f, MPMD_GATHER_PER_TASK, 0, steps, 1, &res[f]))) break;
            result *x = &res[f];
            char b[8][96];
            double ratio[MAX_RANKS] = {0}, worst = 0, total_worst = 0;
            for (int q = 0; q < x->ranks; q++) {
                ratio[q] = (double)x->state[q] / (double)res[0].state[q];
                if (ratio[q] > worst) worst = ratio[q];
                double t = (double)x->planned[q] / (double)res[0].planned[q];
                if (t > total_worst) total_worst = t;
            }
            int equal = f && !strcmp(x->hash, res[0].hash) && !memcmp(&x->loss, &res[0].loss, sizeof x->loss);
            int pass = worst <= 0.3;
            printf("{\"bench\": \"fsdp_memory\", \"model\": \"gpt-%s\", \"schedule\": \"Std1F1B(S=2, D=2, "
                   "n=%d)\", "
                   "\"replicas\": %d, \"fsdp\": %s, \"batch_per_replica\": %lld, \"steps\": %d, "
                   "\"state_bytes\": %s, \"planned\": %s, \"measured\": %s, \"gathered\": %s, "
                   "\"act_peak_planned\": %s, \"act_peak_measured\": %s, \"collective_bytes\": %s, "
                   "\"collective_expected\": %s, \"loss\": %.6f, \"params_sha256\": \"%s\"",
                   smoke ? "tiny" : "small", c.microbatches, R, f ? "true" : "false", (long long)c.batch,
                   steps, list(b[0], sizeof b[0], x->state, x->ranks),
                   list(b[1], sizeof b[1], x->planned, x->ranks),
                   list(b[2], sizeof b[2], x->measured, x->ranks),
                   list(b[3], sizeof b[3], x->gathered, x->ranks),
                   list(b[4], sizeof b[4], x->act_planned, x->ranks),
                   list(b[5], sizeof b[5], x->act_measured, x->ranks),
                   list(b[6], sizeof b[6], x->coll, x->ranks),
                   list(b[7], sizeof b[7], x->coll_expected, x->ranks), (double)x->loss, x->hash);
            if (f) {
                printf(", \"state_ratio\": [%.4f, %.4f], \"state_ratio_max\": %.4f, \"planned_ratio_max\": "
                       "%.4f, "
                       "\"target\": %s, \"pass\": %s, \"bitwise_equal\": %s",
                       ratio[0], x->ranks > 1 ? ratio[1] : 0.0, worst, total_worst, R == 4 ? "0.3" : "null",
                       R == 4 ? (pass ? "true" : "false") : "null", equal ? "true" : "false");
            }
            printf("}\n");
            fflush(stdout);
            for (int q = 0; q < x->ranks; q++) {
                if (x->planned[q] != x->measured[q]) {
                    fprintf(stderr,
                            "bench_shard: R=%d %s rank %d: planned %lld bytes but the backend counted %lld\n",
                            R, f ? "FSDP" : "plain", q, (long long)x->planned[q], (long long)x->measured[q]);
                    rc = 1;
                }
            }
            if (f) {
                fprintf(stderr,
                        "memory: R=%d: FSDP holds %.3fx the parameter + optimizer-state bytes of plain data "
                        "parallelism (largest rank)%s; bitwise equal: %s\n",
                        R, worst, R == 4 ? (pass ? ", target <= 0.3 met" : ", target <= 0.3 MISSED") : "",
                        equal ? "yes" : "no");
                if (!equal) {
                    fprintf(stderr,
                            "bench_shard: R=%d: FSDP's parameters or loss differ from plain data "
                            "parallelism's (%s vs %s)\n",
                            R, x->hash, res[0].hash);
                    rc = 1;
                }
                if (R == 4 && !pass) rc = 1;
            }
        }
    }
    mpmd_schedule_free(s);
    /* tensor parallelism: 4 stages of one block each, blocks split over 2
     * model ranks */
    result tp[2];
    gpt_config t = c;
    t.layers = 4, t.stages = 4;
    if (!rc && mpmd_schedule_std1f1b(4, t.microbatches, &s, &err)) {
        fprintf(stderr, "bench_shard: %s\n", err.msg);
        return 1;
    }
    for (int k = 0; k < 2 && !rc; k++) {
        t.tensor_parallel = k ? 2 : 1;
        fprintf(stderr, "memory: Std1F1B(S=4, D=4, n=%d), %s\n", t.microbatches,
                k ? "blocks split over 2 model ranks" : "the whole model");
        rc = measure(&t, s, 1, 0, MPMD_GATHER_PER_TASK, 0, 1, 0, &tp[k]);
    }
    if (!rc) {
        double ratio[MAX_RANKS] = {0}, worst = 0;
        for (int q = 0; q < tp[1].ranks; q++) {
            ratio[q] = (double)tp[1].params[q] / (double)tp[0].params[q];
            if (ratio[q] > worst) worst = ratio[q];
        }
        char b[2][128];
        printf(
            "{\"bench\": \"tp_memory\", \"model\": \"gpt-%s\", \"schedule\": \"Std1F1B(S=4, D=4, n=%d)\", "
            "\"model_ranks\": 2, \"params_whole\": %s, \"params_split\": %s, \"weight_ratio\": [%.4f, %.4f, "
            "%.4f, %.4f], \"weight_ratio_max\": %.4f, \"target\": 0.55, \"pass\": %s, \"loss_whole\": "
            "%.6f, \"loss_split\": %.6f}\n",
            smoke ? "tiny" : "small", t.microbatches, list(b[0], sizeof b[0], tp[0].params, tp[0].ranks),
            list(b[1], sizeof b[1], tp[1].params, tp[1].ranks), ratio[0], ratio[1], ratio[2], ratio[3], worst,
            worst <= 0.55 ? "true" : "false", (double)tp[0].loss, (double)tp[1].loss);
        fflush(stdout);
        fprintf(
            stderr,
            "memory: tensor parallel 2: a rank holds at most %.3fx the whole model's parameter bytes (target "
            "<= 0.55 %s): the embedding's stage %.3fx, the blocks' %.3fx and %.3fx, the head's %.3fx\n",
            worst, worst <= 0.55 ? "met" : "MISSED", ratio[0], ratio[1], ratio[2], ratio[3]);
        if (worst > 0.55) rc = 1;
    }
    mpmd_schedule_free(s);
    return rc;
}

/* (c) FSDP in bf16, R = 4, Std1F1B over 2 stages: plain data parallelism,
 * FSDP gathered per task and per step (the step policy also at twice the
 * microbatches), and f32 FSDP per task as the measure of the gathers. */
static int bench_bf16_part(int smoke) {
    gpt_config c = model_cfg(smoke);
    c.batch = 8, c.microbatches = 4, c.stages = 2;
    const int R = 4, steps = smoke ? 1 : 2;
    enum { PLAIN, TASK, STEP, STEP2, F32_TASK, N };
    static const char *const names[N] = {"bf16 plain", "bf16 fsdp per task", "bf16 fsdp per step",
                                         "bf16 fsdp per step, 8 microbatches", "f32 fsdp per task"};
    result res[N];
    int rc = 0;
    for (int k = 0; k < N && !rc; k++) {
        gpt_config x = c;
        x.compute = k == F32_TASK ? MPMD_F32 : MPMD_BF16;
        if (k == STEP2) x.microbatches = 8;
        mpmd_schedule *s;
        mpmd_error err;
        if (mpmd_schedule_std1f1b(2, x.microbatches, &s, &err)) {
            fprintf(stderr, "bench_shard: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "memory: %s, Std1F1B(S=2, D=2, n=%d), R=%d\n", names[k], x.microbatches, R);
        rc = measure(&x, s, R, k != PLAIN,
                     k == STEP || k == STEP2 ? MPMD_GATHER_PER_STEP : MPMD_GATHER_PER_TASK, 0, steps, 1,
                     &res[k]);
        mpmd_schedule_free(s);
    }
    if (rc) return rc;
    double state = 0, gath = 0, gath_min = 1e30;
    for (int q = 0; q < res[PLAIN].ranks; q++) {
        double a = (double)res[TASK].state[q] / (double)res[PLAIN].state[q];
        double b = (double)res[TASK].gath[q] / (double)res[F32_TASK].gath[q];
        state = a > state ? a : state;
        gath = b > gath ? b : gath;
        gath_min = b < gath_min ? b : gath_min;
    }
    const int equal = !strcmp(res[TASK].hash, res[PLAIN].hash) && !strcmp(res[STEP].hash, res[PLAIN].hash) &&
                      res[TASK].loss == res[PLAIN].loss && res[STEP].loss == res[PLAIN].loss;
    const int step_same = !memcmp(res[STEP].gath, res[STEP2].gath, sizeof res[STEP].gath);
    const int pass = state <= 0.3 && gath_min >= 0.475 && gath <= 0.525 && step_same && equal;
    char b[7][96];
    printf(
        "{\"bench\": \"fsdp_bf16\", \"model\": \"gpt-%s\", \"schedule\": \"Std1F1B(S=2, D=2, n=%d)\", "
        "\"replicas\": %d, \"state_bytes_plain\": %s, \"state_bytes_fsdp\": %s, \"state_ratio_max\": %.4f, "
        "\"gathered_f32_per_task\": %s, \"gathered_per_task\": %s, \"gathered_ratio\": [%.4f, %.4f], "
        "\"gathered_per_step\": %s, \"gathered_per_step_8_microbatches\": %s, \"gathered_held_per_step\": "
        "%s, "
        "\"targets\": \"state <= 0.3, gathered 0.5 +- 5%%, per step independent of microbatches\", "
        "\"pass\": %s, \"bitwise_equal\": %s}\n",
        smoke ? "tiny" : "small", c.microbatches, R,
        list(b[0], sizeof b[0], res[PLAIN].state, res[PLAIN].ranks),
        list(b[1], sizeof b[1], res[TASK].state, res[TASK].ranks), state,
        list(b[2], sizeof b[2], res[F32_TASK].gath, res[F32_TASK].ranks),
        list(b[3], sizeof b[3], res[TASK].gath, res[TASK].ranks), gath_min, gath,
        list(b[4], sizeof b[4], res[STEP].gath, res[STEP].ranks),
        list(b[5], sizeof b[5], res[STEP2].gath, res[STEP2].ranks),
        list(b[6], sizeof b[6], res[STEP].gathered, res[STEP].ranks), pass ? "true" : "false",
        equal ? "true" : "false");
    fflush(stdout);
    fprintf(
        stderr,
        "memory: bf16 FSDP x %d: state %.3fx plain's (target <= 0.3), gathered %.3f-%.3fx f32 FSDP's (target "
        "0.5 +- 5%%), per step %s the microbatch count; bitwise equal: %s\n",
        R, state, gath_min, gath, step_same ? "independent of" : "DEPENDS ON", equal ? "yes" : "no");
    return pass ? 0 : 1;
}

static int bench_time_part(int smoke) {
    gpt_config c = model_cfg(smoke);
    c.stages = 1;
    const int global = 8, mb_rows = 2;
    struct {
        const char *name;
        int replicas, fsdp, model;
    } lay[4] = {
        {"loop", 1, 0, 1}, {"loop x DP 2", 2, 0, 1}, {"loop x FSDP 2", 2, 1, 1}, {"loop x TP 2", 1, 0, 2}};
    result res[4];
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        c.tensor_parallel = lay[i].model;
        c.batch = global / lay[i].replicas;
        c.microbatches = (int)(c.batch / mb_rows);
        fprintf(stderr, "time: %s, %lld sequences per replica in %d microbatches\n", lay[i].name,
                (long long)c.batch, c.microbatches);
        if ((rc = measure(&c, NULL, lay[i].replicas, lay[i].fsdp, MPMD_GATHER_PER_TASK, 1, g_steps, 0,
                          &res[i])))
            break;
        result *x = &res[i];
        printf("{\"bench\": \"fsdp_time\", \"model\": \"gpt-%s\", \"layout\": \"%s\", \"replicas\": %d, "
               "\"fsdp\": %s, \"global_batch\": %d, \"batch_per_replica\": %lld, \"microbatches\": %d, "
               "\"threads_per_rank\": 1, \"steps\": %d, \"ms\": %.2f, \"ms_min\": %.2f, \"ms_max\": %.2f, "
               "\"time_ratio\": %.3f, \"speedup\": %.3f, \"loss\": %.6f",
               smoke ? "tiny" : "small", lay[i].name, lay[i].replicas, lay[i].fsdp ? "true" : "false", global,
               (long long)c.batch, c.microbatches, g_steps, x->ms, x->ms_min, x->ms_max, x->ms / res[0].ms,
               res[0].ms / x->ms, (double)x->loss);
        if (lay[i].model > 1) {
            double rel = (x->loss - res[0].loss) / res[0].loss;
            if (rel < 0) rel = -rel;
            printf(", \"model_ranks\": %d, \"loss_rel_to_loop\": %.3g", lay[i].model, rel);
            if (rel > 1e-4) {
                fprintf(stderr, "bench_shard: TP 2's loss %.9g is not the loop's %.9g\n", (double)x->loss,
                        (double)res[0].loss);
                rc = 1;
            }
        }
        if (lay[i].fsdp) {
            int equal = !strcmp(x->hash, res[1].hash) && !memcmp(&x->loss, &res[1].loss, sizeof x->loss);
            printf(", \"bitwise_equal_to_dp\": %s", equal ? "true" : "false");
            if (!equal) {
                fprintf(stderr, "bench_shard: FSDP 2's parameters or loss differ from DP 2's (%s vs %s)\n",
                        x->hash, res[1].hash);
                rc = 1;
            }
        }
        printf("}\n");
        fflush(stdout);
    }
    if (!rc)
        fprintf(
            stderr,
            "time: loop %.1f ms, loop x DP 2 %.1f ms (speedup %.2fx), loop x FSDP 2 %.1f ms (speedup %.2fx; "
            "%.2fx DP 2's time), loop x TP 2 %.1f ms (speedup %.2fx)\n",
            res[0].ms, res[1].ms, res[0].ms / res[1].ms, res[2].ms, res[0].ms / res[2].ms,
            res[2].ms / res[1].ms, res[3].ms, res[0].ms / res[3].ms);
    return rc;
}

int main(int argc, char **argv) {
    program_start("bench_shard", argv);
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            g_steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_shard [--only memory|time] [--steps N]\n");
            return 2;
        }
    }
    if (g_steps < 1 || (only && strcmp(only, "memory") && strcmp(only, "time"))) {
        fprintf(stderr, "bench_shard: bad option (--only memory|time, --steps >= 1)\n");
        return 2;
    }
    int smoke = bench_smoke();
    if (smoke) g_steps = 1;
    int rc = 0;
    if (!only || !strcmp(only, "memory")) rc |= bench_memory_part(smoke);
    if (!only || !strcmp(only, "memory")) rc |= bench_bf16_part(smoke);
    if (!only || !strcmp(only, "time")) rc |= bench_time_part(smoke);
    return rc;
}
