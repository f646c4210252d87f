/* Generation: drawing tokens from logits (mpmd_sample_token) and the
 * decode loop that feeds a compiled decode step one position at a time
 * (mpmd_generate). The step is any graph built with mpmd_set_decode
 * (src/layers/decode.c) whose inputs are the tokens and their positions and
 * whose kept output is the next token's logits; pipelined, split over model
 * ranks or run by MPI processes as any step is.
 *
 * The loop runs every sequence in lockstep: run p feeds position p of each
 * sequence, its prompt's token there while the prompt lasts, else the token
 * it drew at run p - 1; from the last prompt position on, the logits give
 * the next token. A sequence ends when it has drawn max_new tokens, drawn
 * the end-of-sequence token, or filled the caches; the loop ends when all
 * have (those that ended go on being fed their last token, whose logits
 * are not read). Starting again at position 0 overwrites what the caches
 * held: a position attends only to the ones at or before it, each written
 * in this generation before it is read, so a step generates any number of
 * times.
 */
#include "runtime.h"

#include "../graph/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- sampling --------------------------------------------------------------------------- */

/* The uniform number in [0, 1) of one draw: splitmix64's mixing applied to
 * the seed and then to each of (sequence, position), 53 bits kept. */
static double draw(uint64_t seed, int64_t sequence, int64_t pos) {
    uint64_t x = seed ^ 0x67656e6572617465ull; /* "generate" */
    uint64_t w[2] = {(uint64_t)sequence, (uint64_t)pos};
    for (int i = 0; i < 3; i++) {
        x += 0x9e3779b97f4a7c15ull + (i ? w[i - 1] : 0);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
    }
    return (double)(x >> 11) * 0x1.0p-53;
}

/* A min-heap of k floats: move heap[i] down until neither child is smaller. */
static void sift_down(float *heap, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        if (l < k && heap[l] < heap[m]) m = l;
        if (l + 1 < k && heap[l + 1] < heap[m]) m = l + 1;
        if (m == i) return;
        float t = heap[i];
        heap[i] = heap[m], heap[m] = t, i = m;
    }
}

/* The k-th largest of x[0..n) (1 <= k <= n; ties counted: the k-th entry of
 * x sorted in descending order), with a min-heap of the k largest seen so
 * far: O(n log k). heap has room for k values. NaN counts as below every
 * number. */
static float kth_largest(const float *x, int64_t n, int64_t k, float *heap) {
    for (int64_t i = 0; i < k; i++)
        heap[i] = isnan(x[i]) ? -INFINITY : x[i];
    for (int64_t i = k / 2; i-- > 0;)
        sift_down(heap, k, i);
    for (int64_t i = k; i < n; i++)
        if (x[i] > heap[0]) { /* one of the k largest so far: the smallest kept drops out */
            heap[0] = x[i];
            sift_down(heap, k, 0);
        }
    return heap[0]; /* the smallest of the k largest */
}

/* Greedy: the first largest logit. Sampled: with m the largest logit and
 * F the k-th largest (-inf without top-k), the tokens v with logit >= F
 * weigh w_v = exp((logit_v - m) / temperature), in double; u = draw() times
 * their sum picks the first v whose running sum exceeds u. */
int32_t mpmd_sample_token(const float *logits, int64_t vocab, const mpmd_sampling *s, int64_t sequence,
                          int64_t position) {
    if (!logits || vocab < 1 || vocab > INT32_MAX) return -1;
    const mpmd_sampling greedy = MPMD_GREEDY;
    if (!s) s = &greedy;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (!(s->temperature > 0.0f)) return (int32_t)best;
    double floor_v = -INFINITY;
    if (s->top_k > 0 && s->top_k < vocab) {
        float *heap = malloc((size_t)s->top_k * sizeof *heap);
        if (!heap) return -1;
        floor_v = kth_largest(logits, vocab, s->top_k, heap);
        free(heap);
    }
    const double temp = s->temperature, mx = logits[best];
    double total = 0;
    for (int64_t v = 0; v < vocab; v++)
        if (logits[v] >= floor_v) total += exp(((double)logits[v] - mx) / temp);
    double u = draw(s->seed, sequence, position) * total, acc = 0;
    int64_t last = best;
    for (int64_t v = 0; v < vocab; v++) {
        if (logits[v] < floor_v) continue;
        acc += exp(((double)logits[v] - mx) / temp);
        last = v;
        if (u < acc) return (int32_t)v;
    }
    return (int32_t)last;
}

/* ---- the decode loop -------------------------------------------------------------------- */

/* Record a message on the step (its mpmd_step_error) and return code. */
static mpmd_status fail(mpmd_step *st, mpmd_status code, const char *fmt, ...) {
    static const char prefix[] = "mpmd_generate: ";
    char msg[MPMD_ERROR_MSG_MAX - sizeof prefix + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap); /* the format may quote st->err itself */
    va_end(ap);
    memcpy(st->err, prefix, sizeof prefix - 1);
    memcpy(st->err + sizeof prefix - 1, msg, strlen(msg) + 1);
    return code;
}

/* The decoder's values checked against its graph: B sequences, V logits. */
static mpmd_status check_decoder(mpmd_step *st, const mpmd_decoder *d, int64_t *B, int64_t *V) {
    const mpmd_graph *g = st->plan->g;
    const mpmd_node *tn = mpmd_node_of(g, d->tokens), *pn = mpmd_node_of(g, d->positions),
                    *ln = mpmd_node_of(g, d->logits);
    if (!tn || !pn || !ln || tn->op != &mpmd_op_input || pn->op != &mpmd_op_input)
        return fail(st, MPMD_ERR_INVALID,
                    "the decoder's tokens and positions must be inputs of the step's graph, "
                    "and its logits a value of it");
    const mpmd_type *tt = &tn->type, *pt = &pn->type, *lt = &ln->type;
    if (tt->dtype != MPMD_I32 || tt->ndim != 2 || tt->dim[1] != 1 || !mpmd_type_equal(tt, pt))
        return fail(st, MPMD_ERR_SHAPE, "tokens %s and positions %s: both i32 [sequences, 1] are expected",
                    mpmd_type_str(tt, (char[64]){0}, 64), mpmd_type_str(pt, (char[64]){0}, 64));
    if (lt->dtype != MPMD_F32 || lt->ndim != 2 || lt->dim[0] != tt->dim[0])
        return fail(st, MPMD_ERR_SHAPE, "logits %s for %lld sequences: f32 [%lld, vocabulary] is expected",
                    mpmd_type_str(lt, (char[64]){0}, 64), (long long)tt->dim[0], (long long)tt->dim[0]);
    if (d->length < 1)
        return fail(st, MPMD_ERR_INVALID, "the decoder's length is %lld", (long long)d->length);
    *B = tt->dim[0], *V = lt->dim[1];
    return MPMD_OK;
}

/* The checks that come before the first run: prompts that fit and hold
 * tokens of the vocabulary. */
static mpmd_status check_prompts(mpmd_step *st, const mpmd_decoder *d, int64_t B, int64_t V,
                                 const int32_t *const *prompts, const int64_t *lens,
                                 const mpmd_generate_opts *o) {
    if (!prompts || !lens) return fail(st, MPMD_ERR_INVALID, "no prompts (NULL)");
    if (o->max_new < 0)
        return fail(st, MPMD_ERR_INVALID, "max_new is %lld; 0 or more", (long long)o->max_new);
    if (o->sampling.top_k < 0 || !(o->sampling.temperature >= 0.0f) || isinf(o->sampling.temperature))
        return fail(st, MPMD_ERR_INVALID,
                    "temperature %g and top_k %d: a finite temperature >= 0 and top_k >= 0",
                    (double)o->sampling.temperature, o->sampling.top_k);
    if (o->eos >= V)
        return fail(st, MPMD_ERR_INVALID, "eos %d is outside the vocabulary [0, %lld)", (int)o->eos,
                    (long long)V);
    for (int64_t b = 0; b < B; b++) {
        if (lens[b] < 1 || lens[b] > d->length || !prompts[b])
            return fail(st, MPMD_ERR_INVALID,
                        "prompt %lld has %lld tokens%s; between 1 and %lld (the caches' length)",
                        (long long)b, (long long)lens[b], prompts[b] ? "" : " (NULL)", (long long)d->length);
        for (int64_t i = 0; i < lens[b]; i++)
            if (prompts[b][i] < 0 || prompts[b][i] >= V)
                return fail(st, MPMD_ERR_INVALID,
                            "prompt %lld: token %lld is %d, outside the vocabulary [0, %lld)", (long long)b,
                            (long long)i, (int)prompts[b][i], (long long)V);
    }
    return MPMD_OK;
}

static mpmd_status generate(mpmd_step *st, const mpmd_decoder *d, const int32_t *const *prompts,
                            const int64_t *lens, const mpmd_generate_opts *o, int32_t *out,
                            int64_t *out_lens) {
    int64_t B = 0, V = 0;
    mpmd_status rc = check_decoder(st, d, &B, &V);
    if (!rc) rc = check_prompts(st, d, B, V, prompts, lens, o);
    if (rc) return rc;
    const int64_t L = d->length;
    int32_t *tok = malloc((size_t)B * sizeof *tok), *pos = malloc((size_t)B * sizeof *pos);
    float *logits = malloc((size_t)(B * V) * sizeof *logits);
    unsigned char *done = calloc((size_t)B, 1);
    if (!tok || !pos || !logits || !done) {
        free(tok), free(pos), free(logits), free(done);
        return fail(st, MPMD_ERR_NOMEM, "out of memory for %lld sequences of %lld logits", (long long)B,
                    (long long)V);
    }
    int64_t live = B;
    for (int64_t b = 0; b < B; b++) {
        memcpy(out + b * L, prompts[b], (size_t)lens[b] * sizeof *out);
        out_lens[b] = lens[b];
        if (o->max_new == 0 || lens[b] == L) done[b] = 1, live--; /* nothing to draw, or no room */
    }
    int stop = 0;
    for (int64_t p = 0; p < L && live > 0 && !stop && !rc; p++) {
        for (int64_t b = 0; b < B; b++) { /* position p's token: the prompt's, the one drawn, or the last */
            tok[b] = out[b * L + (p < out_lens[b] ? p : out_lens[b] - 1)];
            pos[b] = (int32_t)p;
        }
        if ((rc = mpmd_step_set_input(st, d->tokens, tok, (size_t)B * sizeof *tok)) ||
            (rc = mpmd_step_set_input(st, d->positions, pos, (size_t)B * sizeof *pos)) ||
            (rc = mpmd_step_run(st)) ||
            (rc = mpmd_step_gather(st, d->logits, logits, (size_t)(B * V) * sizeof *logits))) {
            fail(st, rc, "position %lld: %.900s", (long long)p, st->err);
            break;
        }
        for (int64_t b = 0; b < B && !rc && !stop; b++) {
            if (done[b]) continue;
            const float *l = logits + b * V;
            int64_t bad = 0, at = -1;
            for (int64_t v = 0; v < V; v++) /* (weights that hold them: sampled, they would be garbage) */
                if (!isfinite(l[v])) bad++, at = at < 0 ? v : at;
            if (bad) {
                rc = fail(
                    st, MPMD_ERR_RUNTIME,
                    "sequence %lld, position %lld: %lld of the %lld logits are NaN or infinite (the first, "
                    "token %lld, is %s)",
                    (long long)b, (long long)p, (long long)bad, (long long)V, (long long)at,
                    isnan(l[at]) ? "NaN"
                    : l[at] > 0  ? "+inf"
                                 : "-inf");
                break;
            }
            if (p + 1 != out_lens[b]) continue; /* inside its prompt */
            int32_t t = mpmd_sample_token(l, V, &o->sampling, b, p + 1);
            if (t < 0) {
                rc = fail(st, MPMD_ERR_NOMEM, "out of memory for top-k %d", o->sampling.top_k);
                break;
            }
            out[b * L + p + 1] = t;
            out_lens[b] = p + 2;
            if (t == o->eos || out_lens[b] - lens[b] >= o->max_new || out_lens[b] == L) done[b] = 1, live--;
            if (o->on_token && o->on_token(o->user, b, p + 1, t)) stop = 1;
        }
    }
    free(tok), free(pos), free(logits), free(done);
    return rc;
}

mpmd_status mpmd_generate(mpmd_step *st, const mpmd_decoder *d, const int32_t *const *prompts,
                          const int64_t *lens, const mpmd_generate_opts *opts, int32_t *out,
                          int64_t *out_lens) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_generate")) return MPMD_ERR_INVALID;
    const mpmd_generate_opts defaults = MPMD_GENERATE_DEFAULTS;
    mpmd_status rc = !d || !out || !out_lens
                         ? fail(st, MPMD_ERR_INVALID, "no decoder, out or out_lens (NULL)")
                         : generate(st, d, prompts, lens, opts ? opts : &defaults, out, out_lens);
    rt_step_leave(st);
    return rc;
}
