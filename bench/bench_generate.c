/* bench_generate - inference: generation with the key/value cache, and the
 * evaluation step against the training step.
 *
 * Generation (mpmd_generate on gpt_build_decoder's step) of the GPT-2 124M shape (12
 * layers, width 768, 12 heads, vocab 50257, tied; random weights, seq 256)
 * at batch 1 and batch 8: N positions decoded after a one-token prompt,
 * tokens/s = batch / (the median time of a position). Three runners each:
 * the one-rank loop on 1 thread and on 2 threads, the batch in one
 * microbatch (one pass over the weights per position), and GPipe on 2
 * ranks of 1 thread with the batch in 2 microbatches (one per rank in
 * flight; batch 1: one). The pipeline's and the 2-thread loop's tokens
 * (greedy decoding) are checked to equal the 1-thread loop's.
 *
 * Evaluation: the forward-only step (gpt_build_eval) against the training
 * step on the same batch of gpt2-small (4 layers, width 256, vocab 8192, seq
 * 64, batch 8, 1 thread): eval_ratio = (train_ms / 3) / eval_ms, the eval
 * step's speed against a third of a training step (the forward's share of
 * its FLOPs; 1.0: as fast).
 *
 * Sampling: one token drawn with top-k from GPT-2's 50257 logits, at k 50,
 * 5000 and 50256 (the median of 9 draws).
 *
 * Progress to stderr; one JSON object per row to stdout. MPMD_BENCH_SMOKE=1:
 * a 2-layer model and 2 positions.
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The time of each position: on_token's calls for sequence 0 come once
 * per position, right after its run. */
typedef struct clock_ctx {
    double last, *ms;
} clock_ctx;

static int on_token(void *user, int64_t sequence, int64_t position, int32_t token) {
    (void)token;
    clock_ctx *c = user;
    if (sequence == 0) {
        double now = bench_now();
        c->ms[position - 1] = 1e3 * (now - c->last);
        c->last = now;
    }
    return 0;
}

/* Decode `n` positions greedily after the one-token prompt 0; the
 * per-position times go to ms[] (the first, the cold one, left out by the
 * caller) and the tokens drawn to out [batch x n]. */
static int decode(const gpt_config *c, const mpmd_schedule *s, int threads, int n, double *ms, int32_t *out) {
    gpt_decoder d;
    mpmd_error err;
    if (gpt_build_decoder(c, &d, &err)) {
        fprintf(stderr, "bench_generate: %s\n", err.msg);
        return 1;
    }
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = threads, o.seed = 1;
    mpmd_step *st = mpmd_jit_with_loop(d.g, s, &o, &err);
    int rc = st == NULL;
    if (rc) fprintf(stderr, "bench_generate: %s\n", err.msg);
    const int64_t B = c->batch, T = c->seq;
    const int32_t zero = 0;
    const int32_t **prompts = malloc((size_t)B * sizeof *prompts);
    int64_t *lens = malloc((size_t)B * sizeof *lens), *out_lens = malloc((size_t)B * sizeof *out_lens);
    int32_t *seqs = malloc((size_t)(B * T) * sizeof *seqs);
    if (!rc && (!prompts || !lens || !out_lens || !seqs)) rc = 1;
    for (int64_t b = 0; !rc && b < B; b++)
        prompts[b] = &zero, lens[b] = 1;
    clock_ctx ck = {bench_now(), ms};
    mpmd_generate_opts go = MPMD_GENERATE_DEFAULTS;
    go.max_new = n, go.on_token = on_token, go.user = &ck;
    if (!rc && (rc = mpmd_generate(st, &d.io, prompts, lens, &go, seqs, out_lens) != MPMD_OK))
        fprintf(stderr, "bench_generate: %s\n", mpmd_step_error(st));
    for (int64_t b = 0; !rc && b < B; b++)
        for (int p = 0; p < n; p++)
            out[b * n + p] = seqs[b * T + 1 + p];
    free(prompts), free(lens), free(out_lens), free(seqs);
    mpmd_step_free(st);
    gpt_decoder_free(&d);
    return rc;
}

/* one training or evaluation step of m, the median of `steps` runs in ms */
static double step_ms(const gpt_model *m, int steps) {
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m->g, NULL, &o, &err);
    if (!st) return -1;
    size_t n = (size_t)(m->cfg.batch * m->cfg.seq);
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    double *t = malloc((size_t)(steps + 1) * sizeof *t), med = -1;
    if (tok && tgt && t) {
        gpt_random_batch(m->cfg.vocab, m->cfg.batch, m->cfg.seq, 1, 1, tok, tgt);
        int ok = gpt_set_inputs(st, m, tok, tgt, n * sizeof *tok, 1, 1, 1) == MPMD_OK;
        for (int k = 0; ok && k <= steps; k++) { /* run 0 warms up */
            double t0 = bench_now();
            ok = mpmd_step_run(st) == MPMD_OK;
            t[k] = 1e3 * (bench_now() - t0);
        }
        if (ok) med = bench_median(t + 1, steps);
    }
    free(tok), free(tgt), free(t);
    mpmd_step_free(st);
    return med;
}

int main(int argc, char **argv) {
    program_start("bench_generate", argv);
    (void)argc;
    const int smoke = bench_smoke();
    const int n = smoke ? 3 : 33; /* positions; the first is left out of the median */
    gpt_config c = gpt_config_default();
    c.layers = smoke ? 2 : 12, c.width = smoke ? 64 : 768, c.heads = smoke ? 2 : 12;
    c.vocab = smoke ? 512 : 50257, c.seq = smoke ? 16 : 256, c.tie_embeddings = 1;
    const int batches[2] = {1, 8};
    int rc = 0;
    for (int bi = 0; bi < 2 && !rc; bi++) {
        c.batch = batches[bi];
        int32_t *ref = malloc(sizeof(int32_t) * (size_t)(c.batch * n)),
                *got = malloc(sizeof(int32_t) * (size_t)(c.batch * n));
        double *ms = malloc(sizeof(double) * (size_t)n);
        if (!ref || !got || !ms) return 1;
        double loop1 = 0;
        for (int r = 0; r < 3 && !rc; r++) {
            mpmd_schedule *s = NULL;
            mpmd_error err;
            int threads = r == 1 ? 2 : 1;
            c.stages = r == 2 ? 2 : 1;
            c.microbatches = r == 2 && c.batch % 2 == 0 ? 2 : 1;
            if (r == 2 && mpmd_schedule_gpipe(2, c.microbatches, &s, &err)) {
                fprintf(stderr, "bench_generate: %s\n", err.msg);
                rc = 1;
                break;
            }
            if ((rc = decode(&c, s, threads, n, ms, r ? got : ref))) break;
            int same = !r || !memcmp(ref, got, sizeof(int32_t) * (size_t)(c.batch * n));
            double med = bench_median(ms + 1, n - 1), tps = (double)c.batch * 1e3 / med;
            if (!r) loop1 = tps;
            const char *runner = r == 0   ? "loop, 1 thread"
                                 : r == 1 ? "loop, 2 threads"
                                          : "gpipe, 2 ranks x 1 thread";
            fprintf(stderr,
                    "generate %s, batch %d, %s: %.2f ms per position, %.1f tokens/s (x%.2f the 1-thread "
                    "loop)%s\n",
                    smoke ? "gpt2-smoke" : "gpt2-124m", (int)c.batch, runner, med, tps, tps / loop1,
                    same ? "" : ", SAMPLES DIFFER from the loop's");
            printf("{\"bench\": \"generate\", \"model\": \"%s\", \"batch\": %d, \"runner\": \"%s\", "
                   "\"ms_per_position\": "
                   "%.3f, \"tokens_per_s\": %.2f, \"vs_loop_1_thread\": %.3f, \"same_tokens\": %s, "
                   "\"blas_core\": \"%s\"}\n",
                   smoke ? "gpt2-smoke" : "gpt2-124m", (int)c.batch, runner, med, tps, tps / loop1,
                   same ? "true" : "false", mpmd_blas_core());
            if (!same) rc = 1;
            mpmd_schedule_free(s);
        }
        free(ref), free(got), free(ms);
    }
    if (rc) return rc;
    /* evaluation against training, gpt2-small */
    gpt_config e = gpt_config_default();
    e.layers = smoke ? 2 : 4, e.width = smoke ? 64 : 256, e.heads = 4, e.vocab = smoke ? 512 : 8192,
    e.seq = 64;
    e.batch = 8, e.microbatches = 1;
    gpt_model tm, em;
    mpmd_error err;
    if (gpt_build(&e, 1, &tm, &err) || gpt_build_eval(&e, &em, &err)) {
        fprintf(stderr, "bench_generate: %s\n", err.msg);
        return 1;
    }
    int steps = smoke ? 1 : 5;
    double train = step_ms(&tm, steps), eval = step_ms(&em, steps);
    gpt_model_free(&tm), gpt_model_free(&em);
    if (train < 0 || eval < 0) {
        fprintf(stderr, "bench_generate: a step failed\n");
        return 1;
    }
    fprintf(stderr,
            "eval step %.2f ms, training step %.2f ms: eval_ratio %.2f (1.0: the eval step runs as fast as a "
            "third of a training step)\n",
            eval, train, train / 3 / eval);
    printf(
        "{\"bench\": \"eval\", \"model\": \"%s\", \"tokens\": %lld, \"eval_ms\": %.3f, \"train_ms\": %.3f, "
        "\"eval_ratio\": %.3f, \"blas_core\": \"%s\"}\n",
        smoke ? "gpt2-smoke" : "gpt2-small", (long long)(e.batch * e.seq), eval, train, train / 3 / eval,
        mpmd_blas_core());

    /* sampling one token with top-k on GPT-2's vocabulary: the k largest are
     * found with a heap, O(V log k), so k near V costs about what k = 50 does */
    const int64_t vocab = 50257;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    if (!logits) return 1;
    uint64_t x = 1;
    for (int64_t v = 0; v < vocab; v++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        logits[v] = (float)((double)(x >> 11) * 0x1.0p-53 * 10 - 5);
    }
    const int top_ks[3] = {50, 5000, (int)vocab - 1};
    for (int ki = 0; ki < 3; ki++) {
        double t[9];
        for (int r = 0; r < 9; r++) {
            double t0 = bench_now();
            const mpmd_sampling sm = {1.0f, top_ks[ki], 1};
            (void)mpmd_sample_token(logits, vocab, &sm, 0, r);
            t[r] = 1e3 * (bench_now() - t0);
        }
        double med = bench_median(t, 9);
        fprintf(stderr, "top-k %d of %lld: %.3f ms per token\n", top_ks[ki], (long long)vocab, med);
        printf("{\"bench\": \"top_k\", \"vocab\": %lld, \"k\": %d, \"ms_per_token\": %.4f}\n",
               (long long)vocab, top_ks[ki], med);
    }
    free(logits);
    return 0;
}
