/* bench_record: what recording a timeline costs.
 *
 * The GPT small configuration (4 layers, width 256, 4 heads, vocab 8192,
 * seq 64, batch 8 in 8 microbatches) as 2 stages on 2 in-process ranks of
 * one thread each (Std1F1B): as many threads as this machine has cores, so
 * the timing is not the OS scheduler's. Steps with recording on and off
 * alternate, so both see the same machine. Prints one JSON line: median
 * step times and the overhead (target: under 2% of the step time).
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"

#include <stdlib.h>
#include <string.h>

#define PAIRS 15

/* Alternate recording off/on for PAIRS pairs of steps; medians in ms. */
static int measure(const char *model, mpmd_step *st, int64_t tasks) {
    double off[PAIRS], on[PAIRS];
    for (int k = -1; k < PAIRS; k++) {
        for (int rec = 0; rec < 2; rec++) {
            mpmd_step_set_recording(st, rec);
            double t0 = bench_now();
            if (mpmd_step_run(st)) {
                fprintf(stderr, "bench_record: %s\n", mpmd_step_error(st));
                return 1;
            }
            double t = 1e3 * (bench_now() - t0);
            if (k >= 0) (rec ? on : off)[k] = t;
        }
    }
    double mo = bench_median(off, PAIRS), mn = bench_median(on, PAIRS);
    printf(
        "{\"bench\": \"recording_overhead\", \"model\": \"%s\", \"tasks_per_step\": %lld, \"off_ms\": %.3f, "
        "\"on_ms\": %.3f, \"overhead_pct\": %.2f, \"target_pct\": 2}\n",
        model, (long long)tasks, mo, mn, 100.0 * (mn - mo) / mo);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    program_start("bench_record", argv);
    mpmd_error err;
    gpt_config c = gpt_config_default();
    c.vocab = 8192, c.seq = 64, c.width = 256, c.heads = 4, c.layers = 4;
    c.batch = 8, c.microbatches = 8, c.stages = 2;
    gpt_model m;
    if (gpt_build(&c, 1, &m, &err)) {
        fprintf(stderr, "bench_record: %s\n", err.msg);
        return 1;
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(2, 8, &s, &err);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
    if (!st) {
        fprintf(stderr, "bench_record: %s\n", err.msg);
        return 1;
    }
    size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    gpt_random_batch(c.vocab, c.batch, c.seq, 1, 0, tok, tgt);
    mpmd_step_set_input(st, m.tokens, tok, nb);
    mpmd_step_set_input(st, m.targets, tgt, nb);
    int rc = measure("gpt_small_4l_2ranks", st, 2 * 2 * 8);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
    free(tok), free(tgt);
    return rc;
}
