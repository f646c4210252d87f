/* bench_precision - what bf16 compute costs and saves against f32.
 *
 * The GPT of bench_train's two sizes (small: 4 layers, width 256, vocab
 * 8192; 124m-shaped: 12 layers, width 768, vocab 50257; seq 64, batch 8;
 * untied embeddings, so that what crosses ranks is activations only),
 * pipelined with Std1F1B over 2 stages on 2 ranks of one kernel thread in 4
 * microbatches, once with f32 compute and once with bf16 compute (f32
 * master weights and optimizer state). For each, from recorded steps:
 *
 *   peak_bytes  most bytes of step values a rank held at once (measured)
 *   sent_bytes  bytes the ranks sent each other in one step
 *   ms          the median step time
 *
 * and the bf16 / f32 ratios. sent_bytes is 0.5: activations cross ranks in
 * their own dtype. peak_bytes falls toward 0.5 only where activations
 * outweigh the bf16 copies of the weights (made once a step, before the
 * loop), which these short sequences (64 tokens) do not; time is measured on
 * this CPU, which has no bf16 arithmetic (16-bit values are widened to f32
 * around kernels): the cost of the conversions. One JSON line per size.
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct result {
    double ms;
    int64_t peak, sent;
} result;

static int run(gpt_config c, mpmd_dtype compute, int steps, result *r) {
    c.compute = compute;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        fprintf(stderr, "bench_precision: %s\n", err.msg);
        return 1;
    }
    mpmd_schedule *s = NULL;
    mpmd_step *st = NULL;
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = 1;
    so.seed = 1;
    if (mpmd_schedule_std1f1b(2, c.microbatches, &s, &err) || !(st = mpmd_jit_with_loop(m.g, s, &so, &err))) {
        fprintf(stderr, "bench_precision: %s\n", err.msg);
        mpmd_schedule_free(s);
        gpt_model_free(&m);
        return 1;
    }
    mpmd_step_set_recording(st, 1);
    size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    double *t = malloc(sizeof(double) * (size_t)steps);
    int rc = !tok || !tgt || !t;
    memset(r, 0, sizeof *r);
    for (int k = 0; !rc && k <= steps; k++) {
        gpt_random_batch(c.vocab, c.batch, c.seq, 7, (uint64_t)k, tok, tgt);
        mpmd_step_set_input(st, m.tokens, tok, nb);
        mpmd_step_set_input(st, m.targets, tgt, nb);
        double t0 = bench_now();
        if (mpmd_step_run(st)) {
            fprintf(stderr, "bench_precision: %s\n", mpmd_step_error(st));
            rc = 1;
            break;
        }
        if (k > 0) t[k - 1] = bench_now() - t0;
    }
    mpmd_step_stats ss;
    if (!rc && mpmd_step_summary(st, &ss, &err) == MPMD_OK) {
        for (int k = 0; k < ss.num_ranks; k++) {
            if (ss.ranks[k].peak_bytes > r->peak) r->peak = ss.ranks[k].peak_bytes;
            r->sent += ss.ranks[k].sent_bytes;
        }
        mpmd_step_stats_free(&ss);
        r->ms = 1e3 * bench_median(t, steps);
    } else if (!rc) {
        fprintf(stderr, "bench_precision: %s\n", err.msg);
        rc = 1;
    }
    free(tok), free(tgt), free(t);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
    return rc;
}

int main(int argc, char **argv) {
    program_start("bench_precision", argv);
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    if (steps < 1 || bench_smoke()) steps = 1;
    struct {
        const char *name;
        int layers;
        int64_t width, vocab;
        int heads;
    } sizes[] = {{"gpt2-small", 4, 256, 8192, 4}, {"gpt2-124m", 12, 768, 50257, 12}};
    for (int i = 0; i < (bench_smoke() ? 1 : 2); i++) {
        gpt_config c = gpt_config_default();
        c.layers = sizes[i].layers;
        c.width = sizes[i].width;
        c.heads = sizes[i].heads;
        c.vocab = sizes[i].vocab;
        c.seq = 64;
        c.batch = 8;
        c.microbatches = 4;
        c.stages = 2;
        c.tie_embeddings = 0; /* only activations and their gradients cross the ranks */
        c.lr = 1e-4f;
        result f, b;
        fprintf(stderr, "bench_precision: %s f32 ...\n", sizes[i].name);
        if (run(c, MPMD_F32, steps, &f)) return 1;
        fprintf(stderr, "bench_precision: %s bf16 ...\n", sizes[i].name);
        if (run(c, MPMD_BF16, steps, &b)) return 1;
        printf("{\"bench\": \"precision\", \"model\": \"%s\", \"schedule\": \"std1f1b\", \"ranks\": 2, "
               "\"f32_ms\": %.1f, \"bf16_ms\": %.1f, \"time_ratio\": %.3f, \"f32_peak_bytes\": %lld, "
               "\"bf16_peak_bytes\": %lld, \"peak_ratio\": %.3f, \"f32_sent_bytes\": %lld, "
               "\"bf16_sent_bytes\": %lld, "
               "\"sent_ratio\": %.3f}\n",
               sizes[i].name, f.ms, b.ms, b.ms / f.ms, (long long)f.peak, (long long)b.peak,
               (double)b.peak / (double)f.peak, (long long)f.sent, (long long)b.sent,
               (double)b.sent / (double)f.sent);
        fflush(stdout);
    }
    return 0;
}
