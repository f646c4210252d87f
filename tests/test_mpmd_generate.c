/* Generation in the library (mpmd_generate, mpmd_sample_token), on a small
 * language model made of the library's blocks (an embedding, two LLaMA
 * blocks, an RMS norm and an LM head):
 *
 * - greedy generation after prompts of different lengths draws, at every
 *   position, the argmax of the full forward pass's logits over the
 *   sequence it generated (the training graph's forward, no cache): the
 *   same tokens; pipelined on 2 stages (std1f1b), the loop's tokens;
 * - sampled generation (temperature, top-k) draws the same tokens again,
 *   and pipelined;
 * - max_new, eos (a sequence ends after drawing it, the others go on) and
 *   on_token (every token, in order; non-zero ends the generation);
 * - errors, kept on the step: a prompt longer than the caches or holding an
 *   id outside the vocabulary, a decoder whose values do not fit, logits
 *   that are not finite (weights that hold NaN);
 * - the sampler: temperature 0 and top-k 1 are the argmax; top-k draws only
 *   among the k largest; the draws follow the softmax (a frequency check)
 *   and are a pure function of (seed, sequence, position); top-k draws the
 *   tokens of an O(k V) selection written here, and k near the vocabulary
 *   costs milliseconds. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>

enum { B = 4, T = 12, V = 37, C = 16, HEADS = 4, KV = 2, HID = 24, MICRO = 2 };

/* The model on tokens tok [b, t] (with t positions: the decoder's when it
 * decodes): logits [b, t, V]; a stage marker after the first block when
 * staged. */
static mpmd_value lm(mpmd_graph *g, mpmd_value tok, int staged) {
    mpmd_value x = mpmd_embed(g, "wte", tok, V, C);
    x = mpmd_llama_block(g, "block_0", x, HEADS, KV, HID, 1000.0f, 1e-5f);
    if (staged) x = mpmd_enter_stage(g, x);
    x = mpmd_llama_block(g, "block_1", x, HEADS, KV, HID, 1000.0f, 1e-5f);
    x = mpmd_rms_norm_layer(g, "norm_f", x, 1e-5f);
    return mpmd_dense(g, "lm_head", x, V, MPMD_NO_BIAS);
}

typedef struct decoder {
    mpmd_graph *g;
    mpmd_step *st;
    mpmd_decoder d;
} decoder;

/* The decoder of B sequences in MICRO microbatches, on schedule s (NULL:
 * the loop), parameters from seed 3. */
static int decoder_new(decoder *dc, const mpmd_schedule *s) {
    mpmd_graph *g = dc->g = mpmd_graph_new();
    mpmd_value tok = mpmd_input(g, "tokens", MPMD_I32, MPMD_SHAPE(B, 1));
    mpmd_value pos = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(B, 1));
    mpmd_set_decode(g, pos, T);
    mpmd_loop_begin(g, MICRO);
    mpmd_value l = lm(g, mpmd_microbatch(g, tok), s != NULL);
    l = mpmd_reshape(g, l, MPMD_SHAPE(B / MICRO, V));
    if (s) l = mpmd_enter_stage(g, l);
    dc->d = (mpmd_decoder){tok, pos, mpmd_loop_reduce(g, l, MPMD_REDUCE_CONCAT), T};
    mpmd_loop_end(g);
    mpmd_keep(g, dc->d.logits);
    CHECK(mpmd_graph_status(g) == MPMD_OK, "decoder: %s", mpmd_graph_error(g));
    dc->st = mpmd_graph_status(g) ? NULL : tu_step(g, s, 3, "decoder");
    return dc->st != NULL;
}

static void decoder_free(decoder *dc) {
    mpmd_step_free(dc->st);
    mpmd_graph_free(dc->g);
}

/* The full forward's logits [B, T, V] over sequences seq [B, T]. */
static int forward(const int32_t *seq, float *logits) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value tok = mpmd_input(g, "tokens", MPMD_I32, MPMD_SHAPE(B, T));
    mpmd_value l = lm(g, tok, 0);
    mpmd_keep(g, l);
    mpmd_step *st = tu_step(g, NULL, 3, "forward");
    int ok = st && mpmd_step_set_input(st, tok, seq, sizeof(int32_t) * B * T) == MPMD_OK &&
             mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, l, logits, sizeof(float) * B * T * V) == MPMD_OK;
    CHECK(ok, "forward: %s", st ? mpmd_step_error(st) : "");
    mpmd_step_free(st);
    mpmd_graph_free(g);
    return ok;
}

static const int32_t p0[] = {5}, p1[] = {1, 2, 3}, p2[] = {36, 0}, p3[] = {7, 7, 7, 7, 7};
static const int32_t *const prompts[B] = {p0, p1, p2, p3};
static const int64_t lens[B] = {1, 3, 2, 5};

typedef struct seen {
    int n, stop_at;
    int64_t seq[B * T], pos[B * T];
    int32_t tok[B * T];
} seen;

static int on_token(void *user, int64_t sequence, int64_t position, int32_t token) {
    seen *s = user;
    s->seq[s->n] = sequence, s->pos[s->n] = position, s->tok[s->n] = token;
    return ++s->n == s->stop_at;
}

static void test_greedy(void) {
    decoder dc;
    if (!decoder_new(&dc, NULL)) {
        decoder_free(&dc);
        return;
    }
    int32_t out[B * T], pipe[B * T];
    int64_t out_lens[B], pipe_lens[B];
    seen sn = {0, -1, {0}, {0}, {0}};
    mpmd_generate_opts o = MPMD_GENERATE_DEFAULTS;
    o.max_new = T, o.on_token = on_token, o.user = &sn;
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, out, out_lens) == MPMD_OK, "%s",
          mpmd_step_error(dc.st));
    /* every sequence filled the caches, its prompt first */
    int drawn = 0;
    for (int b = 0; b < B; b++) {
        CHECK(out_lens[b] == T && !memcmp(out + b * T, prompts[b], (size_t)lens[b] * sizeof(int32_t)),
              "sequence %d: %lld tokens, prompt kept", b, (long long)out_lens[b]);
        drawn += (int)(out_lens[b] - lens[b]);
    }
    /* on_token saw each drawn token once, position by position */
    int order = sn.n == drawn;
    for (int i = 0; order && i < sn.n; i++)
        order = out[sn.seq[i] * T + sn.pos[i]] == sn.tok[i] &&
                (i == 0 || sn.pos[i] > sn.pos[i - 1] ||
                 (sn.pos[i] == sn.pos[i - 1] && sn.seq[i] > sn.seq[i - 1]));
    CHECK(order, "on_token: %d calls for %d tokens, in order", sn.n, drawn);
    /* the full forward over the generated sequences: each drawn token its argmax */
    float *logits = malloc(sizeof(float) * B * T * V);
    int diff = 0, checked = 0;
    if (forward(out, logits))
        for (int b = 0; b < B; b++)
            for (int64_t p = lens[b] - 1; p + 1 < out_lens[b]; p++) {
                const float *l = logits + ((size_t)b * T + p) * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (l[v] > l[best]) best = v;
                diff += best != out[b * T + p + 1], checked++;
            }
    CHECK(diff == 0 && checked == drawn, "greedy: %d of %d tokens differ from the full forward's argmax",
          diff, checked);
    free(logits);
    /* the distinct tokens drawn: a model that says something */
    int distinct = 0, hit[V] = {0};
    for (int b = 0; b < B; b++)
        for (int64_t p = lens[b]; p < T; p++)
            distinct += !hit[out[b * T + p]]++;
    CHECK(distinct >= 3, "greedy drew %d distinct tokens", distinct);
    printf("test_mpmd_generate: greedy sequence 1:");
    for (int p = 0; p < T; p++)
        printf(" %d", out[T + p]);
    printf("\n");
    /* pipelined: the loop's tokens */
    mpmd_schedule *s;
    mpmd_error err;
    decoder dp;
    if (mpmd_schedule_new(MPMD_SCHED_STD1F1B, 2, 2, MICRO, 0, &s, &err) == MPMD_OK && decoder_new(&dp, s)) {
        o.on_token = NULL;
        CHECK(mpmd_generate(dp.st, &dp.d, prompts, lens, &o, pipe, pipe_lens) == MPMD_OK, "%s",
              mpmd_step_error(dp.st));
        CHECK(!memcmp(out, pipe, sizeof out) && !memcmp(out_lens, pipe_lens, sizeof out_lens),
              "std1f1b on 2 stages: other tokens than the loop's");
        decoder_free(&dp);
        mpmd_schedule_free(s);
    }
    /* max_new 2, and eos: sequence 1's first drawn token ends it there */
    o.max_new = 2, o.on_token = NULL;
    int32_t o2[B * T];
    int64_t l2[B];
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, o2, l2) == MPMD_OK, "%s", mpmd_step_error(dc.st));
    int same = 1;
    for (int b = 0; b < B; b++)
        same &= l2[b] == lens[b] + 2 && !memcmp(o2 + b * T, out + b * T, (size_t)l2[b] * sizeof *o2);
    CHECK(same, "max_new 2: each prompt and the first 2 tokens of the full run");
    o.max_new = T, o.eos = out[T + lens[1]];
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, o2, l2) == MPMD_OK, "%s", mpmd_step_error(dc.st));
    CHECK(l2[1] == lens[1] + 1 && o2[T + lens[1]] == o.eos, "eos %d: sequence 1 ends after it (%lld tokens)",
          o.eos, (long long)l2[1]);
    for (int b = 0; b < B; b++) { /* the others end at their first eos, if any */
        int64_t want = T;
        for (int64_t p = lens[b]; p < T && want == T; p++)
            if (out[b * T + p] == o.eos) want = p + 1;
        CHECK(l2[b] == want && !memcmp(o2 + b * T, out + b * T, (size_t)want * sizeof *o2),
              "eos: sequence %d has %lld tokens, %lld expected", b, (long long)l2[b], (long long)want);
    }
    /* on_token's non-zero ends the generation after that position */
    o.eos = -1, o.on_token = on_token, o.user = &sn;
    sn.n = 0, sn.stop_at = 3;
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, o2, l2) == MPMD_OK, "%s", mpmd_step_error(dc.st));
    int64_t last = sn.pos[2], total = 0;
    for (int b = 0; b < B; b++) {
        total += l2[b] - lens[b];
        CHECK(l2[b] <= (last + 1 > lens[b] ? last + 1 : lens[b]),
              "stopped at position %lld: sequence %d has %lld", (long long)last, b, (long long)l2[b]);
    }
    CHECK(sn.n >= 3 && total == sn.n, "on_token stop: %d calls, %lld tokens", sn.n, (long long)total);
    decoder_free(&dc);
}

static void test_sampled(void) {
    decoder dc, dp;
    mpmd_schedule *s;
    mpmd_error err;
    if (!decoder_new(&dc, NULL) || mpmd_schedule_new(MPMD_SCHED_GPIPE, 2, 2, MICRO, 0, &s, &err) ||
        !decoder_new(&dp, s)) {
        CHECK(0, "decoders");
        return;
    }
    mpmd_generate_opts o = MPMD_GENERATE_DEFAULTS;
    o.max_new = 6, o.sampling = (mpmd_sampling){1.5f, 5, 42};
    int32_t a[B * T], b2[B * T], c[B * T];
    int64_t la[B], lb[B], lc[B];
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, a, la) == MPMD_OK &&
              mpmd_generate(dc.st, &dc.d, prompts, lens, &o, b2, lb) == MPMD_OK &&
              mpmd_generate(dp.st, &dp.d, prompts, lens, &o, c, lc) == MPMD_OK,
          "%s / %s", mpmd_step_error(dc.st), mpmd_step_error(dp.st));
    int same = 1;
    for (int b = 0; b < B; b++)
        same &= la[b] == lens[b] + 6 && la[b] == lb[b] && la[b] == lc[b] &&
                !memcmp(a + b * T, b2 + b * T, (size_t)la[b] * 4) &&
                !memcmp(a + b * T, c + b * T, (size_t)la[b] * 4);
    CHECK(same, "sampled twice and pipelined: the same tokens");
    o.sampling.seed = 43;
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, b2, lb) == MPMD_OK, "%s", mpmd_step_error(dc.st));
    CHECK(memcmp(a, b2, sizeof a) != 0, "another seed: other tokens");
    decoder_free(&dc), decoder_free(&dp);
    mpmd_schedule_free(s);
}

static void test_errors(void) {
    decoder dc;
    if (!decoder_new(&dc, NULL)) {
        decoder_free(&dc);
        return;
    }
    int32_t out[B * T], longp[T + 1] = {0}, badp[2] = {3, V};
    int64_t ol[B];
    const int32_t *pr[B] = {p0, p1, p2, p3};
    int64_t ln[B] = {1, 3, 2, 5};
    mpmd_generate_opts o = MPMD_GENERATE_DEFAULTS;
    pr[2] = longp, ln[2] = T + 1;
    CHECK(mpmd_generate(dc.st, &dc.d, pr, ln, &o, out, ol) == MPMD_ERR_INVALID &&
              strstr(mpmd_step_error(dc.st), "mpmd_generate: prompt 2 has 13 tokens; between 1 and 12"),
          "%s", mpmd_step_error(dc.st));
    pr[2] = badp, ln[2] = 2;
    CHECK(mpmd_generate(dc.st, &dc.d, pr, ln, &o, out, ol) == MPMD_ERR_INVALID &&
              strstr(mpmd_step_error(dc.st), "prompt 2: token 1 is 37, outside the vocabulary [0, 37)"),
          "%s", mpmd_step_error(dc.st));
    mpmd_decoder bad = dc.d;
    bad.logits = bad.tokens;
    CHECK(mpmd_generate(dc.st, &bad, prompts, lens, &o, out, ol) == MPMD_ERR_SHAPE &&
              strstr(mpmd_step_error(dc.st), "f32 [4, vocabulary] is expected"),
          "%s", mpmd_step_error(dc.st));
    /* NaN in the head: named, with the sequence and the position */
    float *k = calloc((size_t)C * V, sizeof *k);
    k[5] = NAN;
    CHECK(mpmd_step_write(dc.st, mpmd_lookup(dc.g, "lm_head/kernel"), k, sizeof(float) * C * V) == MPMD_OK,
          "%s", mpmd_step_error(dc.st));
    CHECK(mpmd_generate(dc.st, &dc.d, prompts, lens, &o, out, ol) == MPMD_ERR_RUNTIME &&
              strstr(mpmd_step_error(dc.st),
                     "sequence 0, position 0: 1 of the 37 logits are NaN or infinite (the "
                     "first, token 5, is NaN)"),
          "%s", mpmd_step_error(dc.st));
    free(k);
    CHECK(mpmd_generate(NULL, &dc.d, prompts, lens, &o, out, ol) == MPMD_ERR_INVALID, "no step");
    CHECK(mpmd_generate(dc.st, NULL, prompts, lens, &o, out, ol) == MPMD_ERR_INVALID &&
              strstr(mpmd_step_error(dc.st), "(NULL)"),
          "%s", mpmd_step_error(dc.st));
    decoder_free(&dc);
}

/* ---- the sampler ------------------------------------------------------------------------- */

static void test_sampling(void) {
    float l[8] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f, -3.0f, 1.0f};
    CHECK(mpmd_sample_token(l, 8, NULL, 0, 0) == 1 && mpmd_sample_token(l, 8, &MPMD_GREEDY, 3, 9) == 1,
          "greedy: the first largest");
    int hits[8] = {0}, outside = 0;
    for (int i = 0; i < 4000; i++) {
        mpmd_sampling s1 = {1.0f, 1, 5}, s3 = {1.0f, 3, 5}, s0 = {1.0f, 0, 5};
        int32_t t1 = mpmd_sample_token(l, 8, &s1, 0, i);
        outside += t1 != 1 && t1 != 4; /* top-1 keeps the tied largest */
        int32_t t3 = mpmd_sample_token(l, 8, &s3, 1, i);
        outside += t3 != 1 && t3 != 3 && t3 != 4;
        hits[mpmd_sample_token(l, 8, &s0, 2, i)]++;
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
    mpmd_sampling s = {1.0f, 0, 7};
    CHECK(mpmd_sample_token(l, 8, &s, 3, 11) == mpmd_sample_token(l, 8, &s, 3, 11),
          "a draw is a function of (seed, sequence, position)");
    CHECK(mpmd_sample_token(NULL, 8, &s, 0, 0) == -1 && mpmd_sample_token(l, 0, &s, 0, 0) == -1,
          "no logits, no vocabulary: -1");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The sampler's rule written out with an O(k V) selection of the top k (k
 * partial selections on a copy of the logits): the reference the heap's
 * selection must equal token for token. The uniform number: splitmix64's
 * mixing of the seed (xor "generate"), then of the sequence and the
 * position, 53 bits. */
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

/* top-k: the reference's tokens on logits with and without ties and
 * infinities, every k from 1 past the vocabulary, several seeds and
 * temperatures; and k near GPT-2's vocabulary takes milliseconds per token
 * (a generous bound: 20 tokens under 3 s, where an O(k V) selection takes
 * about 15). */
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
                        mpmd_sampling s = {temp, k, seed};
                        int32_t a = mpmd_sample_token(l, n, &s, seed % 3, 7 + (int64_t)seed);
                        int32_t b = sample_ref(l, n, temp, k, seed, seed % 3, 7 + (int64_t)seed);
                        mismatches += a != b;
                        cases++;
                    }
        }
        free(l);
    }
    CHECK(mismatches == 0, "top-k: %d of %d draws differ from the O(k V) sampler's", mismatches, cases);

    const int64_t n = 50257; /* GPT-2's vocabulary */
    float *l = malloc((size_t)n * sizeof *l);
    for (int64_t v = 0; v < n; v++)
        l[v] = (float)(10 * tu_unif(&rs) - 5);
    int ks[3] = {1, 40, 50};
    for (int ki = 0; ki < 3; ki++)
        for (uint64_t seed = 0; seed < 3; seed++) {
            mpmd_sampling s = {1.0f, ks[ki], seed};
            mismatches += mpmd_sample_token(l, n, &s, 0, 1) != sample_ref(l, n, 1.0f, ks[ki], seed, 0, 1);
        }
    CHECK(mismatches == 0, "top-k on 50257 logits: %d draws differ from the O(k V) sampler's", mismatches);
    double t0 = now_s(), sum = 0;
    for (int i = 0; i < 20; i++) {
        mpmd_sampling s = {1.0f, (int)n - 1 - i, 5};
        sum += mpmd_sample_token(l, n, &s, 0, i);
    }
    double sec = now_s() - t0;
    CHECK(sec < 3.0, "20 tokens at top-k near %lld of %lld took %.2f s", (long long)n - 1, (long long)n, sec);
    printf("test_mpmd_generate: 20 tokens at top-k near %lld of %lld in %.1f ms (token sum %.0f)\n",
           (long long)n - 1, (long long)n, 1e3 * sec, sum);
    free(l);
}

int main(void) {
    test_greedy();
    test_sampled();
    test_errors();
    test_sampling();
    test_top_k();
    return tu_report("test_mpmd_generate");
}
