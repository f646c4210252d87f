/* Generation with a key/value cache (examples/models/gpt_generate.h):
 *
 * - the decoder, fed a sequence one position at a time, gives the logits
 *   the training model's full-sequence forward gives: the mean
 *   cross-entropy of its per-position logits equals the evaluation step's
 *   loss on the same batch (to f32 rounding; the sums run in another
 *   order), with parameters from the same names and seed;
 * - pipelined on 2 stages (gpipe and std1f1b, 2 microbatches in flight) it
 *   gives the loop's logits bit for bit at every position: the cache
 *   variables of the later stages are updated on the ranks that read them;
 * - split over 2 model ranks (tensor_parallel 2: attention by heads, each
 *   rank caching its own, the MLP by its hidden width, wte and the tied
 *   head by vocabulary rows) it gives the whole decoder's logits to f32
 *   rounding, and on 2 stages the split loop's bit for bit;
 * - sampling: temperature 0 and top-k 1 are the argmax; top-k draws only
 *   among the k largest; the draws follow the softmax (a rough frequency
 *   check) and are a pure function of (seed, sequence, position); top-k
 *   draws the tokens of the former O(k V) selection (kept here as the
 *   reference), and k near the vocabulary costs milliseconds;
 * - the errors: a position past the cache, a LLaMA model, heads the model
 *   axis does not divide. */
#include "gpt_generate.h"
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>

enum { B = 4, T = 12, V = 40 };

static gpt_config config(int stages) {
    gpt_config c = gpt_config_default();
    c.vocab = V, c.seq = T, c.width = 16, c.heads = 2, c.layers = 2, c.stages = stages;
    c.batch = B, c.microbatches = 2, c.tie_embeddings = 1;
    return c;
}

/* logits of every position [T][B * V] from the decoder on schedule s,
 * split over tp model ranks */
static int decode_all(const mpmd_schedule *s, int stages, int tp, const int32_t *tok, float *out) {
    gpt_config c = config(stages);
    c.tensor_parallel = tp;
    gpt_decoder d;
    mpmd_error err;
    if (gpt_build_decoder(&c, &d, &err)) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    if (tp > 1) { /* split indeed: this rank's part of qkv, read and written whole */
        mpmd_value k = mpmd_lookup(d.g, "block_0/attn/qkv/kernel");
        mpmd_type part = mpmd_value_type(d.g, k), whole = mpmd_value_whole_type(d.g, k);
        CHECK(mpmd_tensor_parallel(d.g) == tp && part.dim[1] == 3 * 16 / tp && whole.dim[1] == 3 * 16,
              "the decoder over %d model ranks: qkv kernel [%lld, %lld] of [%lld, %lld]", tp,
              (long long)part.dim[0], (long long)part.dim[1], (long long)whole.dim[0],
              (long long)whole.dim[1]);
    }
    mpmd_step *st = tu_step(d.g, s, 9, "the decoder");
    int ok = st != NULL;
    for (int p = 0; ok && p < T; p++) {
        int32_t col[B];
        for (int b = 0; b < B; b++)
            col[b] = tok[b * T + p];
        ok = gpt_decode(st, &d, col, p, out + (size_t)p * B * V, &err) == MPMD_OK;
        CHECK(ok, "position %d: %s", p, err.msg);
    }
    if (st) {
        int32_t col[B] = {0};
        float tmp[B * V];
        CHECK(gpt_decode(st, &d, col, T, tmp, &err) == MPMD_ERR_INVALID && strstr(err.msg, "position 12"),
              "a position past the cache: %s", err.msg);
    }
    mpmd_step_free(st);
    gpt_decoder_free(&d);
    return ok;
}

static void test_decoder(void) {
    int32_t tok[B * T], tgt[B * T];
    gpt_random_batch(V, B, T, 3, 1, tok, tgt);
    float *loop = malloc(sizeof(float) * T * B * V), *pipe = malloc(sizeof(float) * T * B * V);
    if (!decode_all(NULL, 1, 1, tok, loop)) return;
    /* the training model's loss on the same batch, same parameters */
    gpt_config c = config(1);
    gpt_model m;
    mpmd_error err;
    CHECK(gpt_build_eval(&c, &m, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 9;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    float want = NAN;
    CHECK(st && gpt_set_inputs(st, &m, tok, tgt, sizeof tok, 9, 1, 1) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
              mpmd_step_read(st, m.loss, &want, sizeof want) == MPMD_OK,
          "the eval step: %s", st ? mpmd_step_error(st) : err.msg);
    mpmd_step_free(st);
    gpt_model_free(&m);
    double sum = 0;
    for (int p = 0; p < T; p++)
        for (int b = 0; b < B; b++) {
            const float *l = loop + ((size_t)p * B + b) * V;
            double mx = l[0], z = 0;
            for (int v = 1; v < V; v++)
                mx = fmax(mx, l[v]);
            for (int v = 0; v < V; v++)
                z += exp(l[v] - mx);
            sum += mx + log(z) - l[tgt[b * T + p]];
        }
    double got = sum / (B * T);
    CHECK(fabs(got - want) <= 1e-5 * fabs(want), "decoder cross-entropy %.9g, the training forward's %.9g", got,
          (double)want);
    /* pipelined: the loop's logits, bit for bit */
    const char *names[2] = {"gpipe", "std1f1b"};
    for (int k = 0; k < 2; k++) {
        mpmd_schedule *s;
        if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(names[k]), 2, 2, 2, 0, &s, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        if (decode_all(s, 2, 1, tok, pipe))
            CHECK(memcmp(loop, pipe, sizeof(float) * T * B * V) == 0, "%s, 2 stages: logits differ from the loop's",
                  names[k]);
        mpmd_schedule_free(s);
    }
    /* split over 2 model ranks: the whole decoder's logits to rounding; a
     * pipeline of it, the split loop's bits */
    float *split = malloc(sizeof(float) * T * B * V);
    if (decode_all(NULL, 1, 2, tok, split)) {
        double worst = 0;
        for (int i = 0; i < T * B * V; i++)
            worst = fmax(worst, fabs((double)split[i] - loop[i]) / (1 + fabs(loop[i])));
        CHECK(worst <= 1e-5, "tensor parallel 2: logits differ from the whole decoder's by %.3g", worst);
        mpmd_schedule *s;
        if (mpmd_schedule_new(MPMD_SCHED_GPIPE, 2, 2, 2, 0, &s, &err) == MPMD_OK) {
            if (decode_all(s, 2, 2, tok, pipe))
                CHECK(memcmp(split, pipe, sizeof(float) * T * B * V) == 0,
                      "tensor parallel 2, gpipe on 2 stages: logits differ from the split loop's");
            mpmd_schedule_free(s);
        }
    }
    free(loop), free(pipe), free(split);
}

static void test_sampling(void) {
    float l[8] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f, -3.0f, 1.0f};
    CHECK(gpt_sample_token(l, 8, 0.0f, 0, 1, 0, 0) == 1, "greedy: the first largest");
    int hits[8] = {0}, outside = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t t1 = gpt_sample_token(l, 8, 1.0f, 1, 5, 0, i);
        outside += t1 != 1 && t1 != 4; /* top-1 keeps the tied largest */
        int32_t t3 = gpt_sample_token(l, 8, 1.0f, 3, 5, 1, i);
        outside += t3 != 1 && t3 != 3 && t3 != 4;
        hits[gpt_sample_token(l, 8, 1.0f, 0, 5, 2, i)]++;
    }
    CHECK(outside == 0, "top-k drew %d tokens outside the k largest", outside);
    double z = 0;
    for (int v = 0; v < 8; v++)
        z += exp(l[v]);
    int bad = 0;
    for (int v = 0; v < 8; v++) {
        double p = exp(l[v]) / z, sd = sqrt(4000 * p * (1 - p));
        bad += fabs(hits[v] - 4000 * p) > 5 * sd + 2;
    }
    CHECK(bad == 0, "sampled frequencies stray from the softmax (%d tokens)", bad);
    CHECK(gpt_sample_token(l, 8, 1.0f, 0, 7, 3, 11) == gpt_sample_token(l, 8, 1.0f, 0, 7, 3, 11),
          "a draw is a function of (seed, sequence, position)");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The sampler as it was before the top k were found with a heap: k partial
 * selections on a copy of the logits, O(k V). The reference the faster
 * selection must equal token for token. */
static double draw_ref(uint64_t seed, int64_t sequence, int64_t pos) {
    uint64_t x = seed ^ 0x67656e6572617465ull;
    uint64_t w[2] = {(uint64_t)sequence, (uint64_t)pos};
    for (int i = 0; i < 3; i++) {
        x += 0x9e3779b97f4a7c15ull + (i ? w[i - 1] : 0);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
    }
    return (double)(x >> 11) * 0x1.0p-53;
}

static int32_t sample_ref(const float *logits, int64_t vocab, float temperature, int top_k, uint64_t seed,
                          int64_t sequence, int64_t pos) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (!(temperature > 0.0f)) return (int32_t)best;
    double floor_v = -INFINITY;
    if (top_k > 0 && top_k < vocab) {
        float *tmp = malloc((size_t)vocab * sizeof *tmp);
        memcpy(tmp, logits, (size_t)vocab * sizeof *tmp);
        for (int k = 0; k < top_k; k++) {
            int64_t m = k;
            for (int64_t v = k + 1; v < vocab; v++)
                if (tmp[v] > tmp[m]) m = v;
            float s = tmp[k];
            tmp[k] = tmp[m], tmp[m] = s;
        }
        floor_v = tmp[top_k - 1];
        free(tmp);
    }
    double total = 0, mx = logits[best];
    for (int64_t v = 0; v < vocab; v++)
        if (logits[v] >= floor_v) total += exp(((double)logits[v] - mx) / temperature);
    double u = draw_ref(seed, sequence, pos) * total, acc = 0;
    int64_t last = best;
    for (int64_t v = 0; v < vocab; v++) {
        if (logits[v] < floor_v) continue;
        acc += exp(((double)logits[v] - mx) / temperature);
        last = v;
        if (u < acc) return (int32_t)v;
    }
    return (int32_t)last;
}

/* top-k: the same tokens as the O(k V) sampler on logits with and without
 * ties and infinities, every k from 1 past the vocabulary, several seeds
 * and temperatures; and k near GPT-2's vocabulary takes milliseconds per
 * token, not seconds (a generous bound: 20 tokens under 3 s, where the old
 * selection took about 15 here). */
static void test_top_k(void) {
    const int64_t sizes[] = {1, 2, 7, 64, 1000};
    int mismatches = 0, cases = 0;
    uint64_t rs = 99;
    for (int si = 0; si < 5; si++) {
        const int64_t n = sizes[si];
        float *l = malloc((size_t)n * sizeof *l);
        for (int kind = 0; kind < 4; kind++) {
            for (int64_t v = 0; v < n; v++) {
                double u = tu_unif(&rs);
                l[v] = kind == 0   ? (float)(8 * u - 4)               /* distinct */
                       : kind == 1 ? (float)floor(6 * u) * 0.5f       /* many ties */
                       : kind == 2 ? (u < 0.3 ? -INFINITY : (float)u) /* masked entries */
                                   : 1.0f;                            /* all equal */
            }
            const int64_t ks[] = {0, 1, 2, 3, n / 2, n - 1, n, n + 5};
            for (int ki = 0; ki < 8; ki++)
                for (int t = 0; t < 3; t++)
                    for (uint64_t seed = 0; seed < 6; seed++) {
                        const float temp = t == 0 ? 0.5f : t == 1 ? 1.0f : 2.0f;
                        int k = (int)(ks[ki] < 0 ? 0 : ks[ki]);
                        int32_t a = gpt_sample_token(l, n, temp, k, seed, seed % 3, 7 + (int64_t)seed);
                        int32_t b = sample_ref(l, n, temp, k, seed, seed % 3, 7 + (int64_t)seed);
                        mismatches += a != b;
                        cases++;
                    }
        }
        free(l);
    }
    CHECK(mismatches == 0, "top-k: %d of %d draws differ from the O(k V) sampler's", mismatches, cases);

    /* GPT-2's vocabulary */
    const int64_t n = 50257;
    float *l = malloc((size_t)n * sizeof *l);
    for (int64_t v = 0; v < n; v++)
        l[v] = (float)(10 * tu_unif(&rs) - 5);
    int ks[3] = {1, 40, 50};
    for (int ki = 0; ki < 3; ki++)
        for (uint64_t seed = 0; seed < 3; seed++)
            mismatches += gpt_sample_token(l, n, 1.0f, ks[ki], seed, 0, 1) !=
                          sample_ref(l, n, 1.0f, ks[ki], seed, 0, 1);
    CHECK(mismatches == 0, "top-k on 50257 logits: %d draws differ from the O(k V) sampler's", mismatches);
    double t0 = now_s(), sum = 0;
    for (int i = 0; i < 20; i++)
        sum += gpt_sample_token(l, n, 1.0f, (int)n - 1 - i, 5, 0, i);
    double sec = now_s() - t0;
    CHECK(sec < 3.0, "20 tokens at top-k near %lld of %lld took %.2f s", (long long)n - 1, (long long)n, sec);
    printf("test_generate: 20 tokens at top-k near %lld of %lld in %.1f ms (token sum %.0f)\n",
           (long long)n - 1, (long long)n, 1e3 * sec, sum);
    free(l);
}

static void test_errors(void) {
    gpt_config c = config(1);
    c.arch = GPT_ARCH_LLAMA;
    gpt_decoder d;
    mpmd_error err;
    CHECK(gpt_build_decoder(&c, &d, &err) == MPMD_ERR_INVALID && strstr(err.msg, "GPT-2 blocks"), "llama: %s",
          err.msg);
    c = config(1);
    c.tensor_parallel = 4; /* 2 heads */
    CHECK(gpt_build_decoder(&c, &d, &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "2 heads are not divisible by tensor_parallel 4"),
          "heads over the model axis: %s", err.msg);
}

int main(void) {
    test_decoder();
    test_sampling();
    test_top_k();
    test_errors();
    return tu_report("test_generate");
}
