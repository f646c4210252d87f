/* The GPT example's decoder (gpt_build_decoder, examples/models/gpt_model.h)
 * for GPT-2 and LLaMA blocks (grouped-query heads; and with Llama 3.1's
 * rope scaling), its decode step run by hand one position at a time:
 *
 * - its logits at every position are the training model's forward logits
 *   (gpt_build_logits: the whole sequence at once, no cache) to f32
 *   rounding, with parameters from the same names and seed;
 * - pipelined on 2 stages (gpipe and std1f1b, 2 microbatches in flight) it
 *   gives the loop's logits bit for bit: the cache variables of the later
 *   stages are updated on the ranks that read them;
 * - split over 2 model ranks (tensor_parallel 2: attention by heads, each
 *   rank caching its own key/value heads, the MLP by its hidden width, wte
 *   and the tied head by vocabulary rows) it gives the whole decoder's
 *   logits to f32 rounding, and on 2 stages the split loop's bit for bit;
 * - greedy mpmd_generate on it draws the forward's argmax at every position;
 * - the errors: a position past the caches, heads the model axis does not
 *   divide. */
#include "gpt_model.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { B = 4, T = 12, V = 40 };
enum { GPT2, LLAMA, LLAMA_SCALED, N_KINDS };
static const char *const kind_name[N_KINDS] = {"gpt-2", "llama", "llama, rope scaling"};

static gpt_config config(int kind, int stages) {
    gpt_config c = gpt_config_default();
    c.vocab = V, c.seq = T, c.width = 16, c.heads = 2, c.layers = 2, c.stages = stages;
    c.batch = B, c.microbatches = 2, c.tie_embeddings = 1;
    if (kind != GPT2) c.arch = GPT_ARCH_LLAMA, c.heads = 4, c.kv_heads = 2, c.rope_base = 300.0f;
    if (kind == LLAMA_SCALED) c.rope_scaling = (mpmd_rope_scaling){4.0f, 1.0f, 4.0f, 8};
    return c;
}

/* NaN-aware: the larger of w and |a - b| / (1 + |b|). */
static double worse(double w, double a, double b) {
    double d = fabs(a - b) / (1 + fabs(b));
    return isnan(d) || d > w ? d : w;
}

/* logits of every position [T][B * V] from the decoder on schedule s,
 * split over tp model ranks, run by hand: tokens and positions set, run,
 * logits gathered */
static int decode_all(int kind, const mpmd_schedule *s, int stages, int tp, const int32_t *tok, float *out) {
    gpt_config c = config(kind, stages);
    c.tensor_parallel = tp;
    gpt_decoder d;
    mpmd_error err;
    if (gpt_build_decoder(&c, &d, &err)) {
        CHECK(0, "%s: %s", kind_name[kind], err.msg);
        return 0;
    }
    if (tp > 1) { /* split indeed: this rank's part of the first dense layer, read and written whole */
        mpmd_value k = mpmd_lookup(d.g, kind == GPT2 ? "block_0/attn/qkv/kernel" : "block_0/attn/q/kernel");
        mpmd_type part = mpmd_value_type(d.g, k), whole = mpmd_value_whole_type(d.g, k);
        CHECK(mpmd_tensor_parallel(d.g) == tp && part.dim[1] * tp == whole.dim[1],
              "%s over %d model ranks: [%lld, %lld] of [%lld, %lld]", kind_name[kind], tp,
              (long long)part.dim[0], (long long)part.dim[1], (long long)whole.dim[0],
              (long long)whole.dim[1]);
    }
    mpmd_step *st = tu_step(d.g, s, 9, "the decoder");
    int ok = st != NULL;
    for (int p = 0; ok && p < T; p++) {
        int32_t col[B], pos[B];
        for (int b = 0; b < B; b++)
            col[b] = tok[b * T + p], pos[b] = p;
        ok = mpmd_step_set_input(st, d.io.tokens, col, sizeof col) == MPMD_OK &&
             mpmd_step_set_input(st, d.io.positions, pos, sizeof pos) == MPMD_OK &&
             mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, d.io.logits, out + (size_t)p * B * V, sizeof(float) * B * V) == MPMD_OK;
        CHECK(ok, "%s, position %d: %s", kind_name[kind], p, mpmd_step_error(st));
    }
    if (st) { /* a position past the caches: the run fails naming it */
        int32_t col[B] = {0}, pos[B] = {0, 0, T, 0};
        CHECK(mpmd_step_set_input(st, d.io.tokens, col, sizeof col) == MPMD_OK &&
                  mpmd_step_set_input(st, d.io.positions, pos, sizeof pos) == MPMD_OK &&
                  mpmd_step_run(st) != MPMD_OK && strstr(mpmd_step_error(st), "12"),
              "a position past the caches: %s", mpmd_step_error(st));
    }
    mpmd_step_free(st);
    gpt_decoder_free(&d);
    return ok;
}

/* The forward's logits [B, T, V] on tok, no cache, parameters of seed 9. */
static int forward(int kind, const int32_t *tok, float *out) {
    gpt_config c = config(kind, 1);
    gpt_model m;
    mpmd_error err;
    if (gpt_build_logits(&c, &m, &err)) {
        CHECK(0, "%s: %s", kind_name[kind], err.msg);
        return 0;
    }
    mpmd_step *st = tu_step(m.g, NULL, 9, "the forward");
    int ok = st && mpmd_step_set_input(st, m.tokens, tok, sizeof(int32_t) * B * T) == MPMD_OK &&
             mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, m.logits, out, sizeof(float) * B * T * V) == MPMD_OK;
    CHECK(ok, "%s forward: %s", kind_name[kind], st ? mpmd_step_error(st) : "");
    mpmd_step_free(st);
    gpt_model_free(&m);
    return ok;
}

static void test_decoder(int kind) {
    int32_t tok[B * T], tgt[B * T];
    gpt_random_batch(V, B, T, 3, 1, tok, tgt);
    const size_t n = (size_t)T * B * V;
    float *loop = malloc(sizeof(float) * n), *pipe = malloc(sizeof(float) * n),
          *full = malloc(sizeof(float) * n);
    if (decode_all(kind, NULL, 1, 1, tok, loop) && forward(kind, tok, full)) {
        double w = 0;
        for (int p = 0; p < T; p++)
            for (int b = 0; b < B; b++)
                for (int v = 0; v < V; v++)
                    w = worse(w, loop[((size_t)p * B + b) * V + v], full[((size_t)b * T + p) * V + v]);
        CHECK(w <= 1e-5, "%s: the decoder's logits are %.3g from the forward's", kind_name[kind], w);
    }
    /* pipelined: the loop's logits, bit for bit */
    const char *names[2] = {"gpipe", "std1f1b"};
    mpmd_error err;
    for (int k = 0; k < 2; k++) {
        mpmd_schedule *s;
        if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(names[k]), 2, 2, 2, 0, &s,
                              &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        if (decode_all(kind, s, 2, 1, tok, pipe))
            CHECK(memcmp(loop, pipe, sizeof(float) * n) == 0,
                  "%s, %s on 2 stages: logits differ from the loop's", kind_name[kind], names[k]);
        mpmd_schedule_free(s);
    }
    /* split over 2 model ranks: the whole decoder's logits to rounding; a
     * pipeline of it, the split loop's bits */
    float *split = malloc(sizeof(float) * n);
    if (decode_all(kind, NULL, 1, 2, tok, split)) {
        double w = 0;
        for (size_t i = 0; i < n; i++)
            w = worse(w, split[i], loop[i]);
        CHECK(w <= 1e-5, "%s, tensor parallel 2: logits differ from the whole decoder's by %.3g",
              kind_name[kind], w);
        mpmd_schedule *s;
        if (mpmd_schedule_new(MPMD_SCHED_GPIPE, 2, 2, 2, 0, &s, &err) == MPMD_OK) {
            if (decode_all(kind, s, 2, 2, tok, pipe))
                CHECK(memcmp(split, pipe, sizeof(float) * n) == 0,
                      "%s, tensor parallel 2, gpipe on 2 stages: logits differ from the split loop's",
                      kind_name[kind]);
            mpmd_schedule_free(s);
        }
    }
    free(loop), free(pipe), free(split), free(full);
}

/* Greedy mpmd_generate on the decoder: each token the forward's argmax. */
static void test_greedy(int kind) {
    gpt_config c = config(kind, 1);
    gpt_decoder d;
    mpmd_error err;
    if (gpt_build_decoder(&c, &d, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mpmd_step *st = tu_step(d.g, NULL, 9, "the decoder");
    static const int32_t p0[] = {3, 1, 4}, p1[] = {15, 9};
    const int32_t *prompts[B] = {p0, p1, p0, p1};
    const int64_t lens[B] = {3, 2, 3, 2};
    int32_t out[B * T];
    int64_t out_lens[B];
    mpmd_generate_opts o = MPMD_GENERATE_DEFAULTS;
    o.max_new = T;
    float *logits = malloc(sizeof(float) * B * T * V);
    if (st && mpmd_generate(st, &d.io, prompts, lens, &o, out, out_lens) == MPMD_OK &&
        forward(kind, out, logits)) {
        int diff = 0, n = 0;
        for (int b = 0; b < B; b++)
            for (int64_t p = lens[b] - 1; p + 1 < out_lens[b]; p++, n++) {
                const float *l = logits + ((size_t)b * T + p) * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (l[v] > l[best]) best = v;
                diff += best != out[b * T + p + 1];
            }
        CHECK(diff == 0 && n == 2 * (T - 3) + 2 * (T - 2), "%s: %d of %d tokens are not the forward's argmax",
              kind_name[kind], diff, n);
    } else {
        CHECK(0, "%s: %s", kind_name[kind], st ? mpmd_step_error(st) : "no step");
    }
    free(logits);
    mpmd_step_free(st);
    gpt_decoder_free(&d);
}

static void test_errors(void) {
    gpt_config c = config(GPT2, 1);
    c.tensor_parallel = 4; /* 2 heads */
    gpt_decoder d;
    mpmd_error err;
    CHECK(gpt_build_decoder(&c, &d, &err) != MPMD_OK &&
              strstr(err.msg, "2 heads are not divisible by the model axis (tensor_parallel 4)"),
          "heads over the model axis: %s", err.msg);
}

int main(void) {
    for (int kind = 0; kind < N_KINDS; kind++) {
        test_decoder(kind);
        test_greedy(kind);
    }
    test_errors();
    return tu_report("test_generate");
}
