/* Dropout (mpmd_dropout) and the generator behind it:
 *
 * - Philox-4x32-10 reproduces the published known-answer vectors;
 * - the mask keeps about 1 - rate of the elements, scales them by exactly
 *   1 / (1 - rate), is the same on 1 and 3 threads, follows the key, and
 *   differs between microbatches and between two dropout ops;
 * - the gradient is the cotangent through the same mask, bit for bit;
 * - a 4-stage model with dropout in every stage, keyed by a (seed, step)
 *   input, trains to the same bits (loss and parameters after two steps)
 *   on the one-rank loop and on every schedule, with and without remat of
 *   the stages (the recomputed forward draws the mask it drew before);
 * - the threshold rounds rate 2^32 as documented. */
#include "graph/graph.h"
#include "testutil.h"
#include "util/philox.h"

#include <math.h>
#include <string.h>

static void test_philox_known_answers(void) {
    /* Salmon et al.'s vectors for philox4x32_10: zeros, all ones, and the
     * digits of pi */
    static const uint32_t ctr[3][4] = {
        {0, 0, 0, 0}, {~0u, ~0u, ~0u, ~0u}, {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {~0u, ~0u}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        mpmd_philox4x32(ctr[k], key[k], out);
        CHECK(memcmp(out, want[k], sizeof out) == 0, "philox vector %d: %08x %08x %08x %08x", k, out[0],
              out[1], out[2], out[3]);
    }
    CHECK(mpmd_dropout_threshold(0.5f) == 0x80000000u, "threshold(0.5) = %08x", mpmd_dropout_threshold(0.5f));
    CHECK(mpmd_dropout_threshold(0.25f) == 0x40000000u, "threshold(0.25) = %08x",
          mpmd_dropout_threshold(0.25f));
}

enum { R = 64, C = 1000 };

/* y = dropout(x, rate, key) and, for loss sum(y * w), dx; with `two`, a
 * second dropout op on the same x is kept too. threads as given. */
typedef struct one_run {
    float *y, *y2, *dx;
} one_run;

static one_run run_once(float rate, const int32_t key[2], int threads, int two) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_param(g, "x", MPMD_SHAPE(R, C), MPMD_ONES);
    mpmd_value k = mpmd_constant(g, MPMD_I32, MPMD_SHAPE(2), key);
    mpmd_value y = mpmd_dropout(g, x, rate, k), y2 = MPMD_NONE;
    float *w = malloc((size_t)R * C * sizeof *w);
    tu_fill(w, (int64_t)R * C, 3);
    mpmd_value wc = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(R, C), w);
    free(w);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, wc), 0, NULL, 0), dx;
    mpmd_grad(g, loss, 1, &x, &dx);
    mpmd_keep(g, y), mpmd_keep(g, dx);
    if (two) y2 = mpmd_dropout(g, x, rate, k), mpmd_keep(g, y2);
    CHECK(mpmd_graph_status(g) == MPMD_OK, "%s", mpmd_graph_error(g));
    one_run o = {calloc((size_t)R * C, sizeof(float)), calloc((size_t)R * C, sizeof(float)),
                 calloc((size_t)R * C, sizeof(float))};
    mpmd_exec *ex = tu_exec(g, threads);
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    size_t bytes = (size_t)R * C * sizeof(float);
    CHECK(mpmd_exec_read(ex, y, o.y, bytes) == MPMD_OK && mpmd_exec_read(ex, dx, o.dx, bytes) == MPMD_OK &&
              (!two || mpmd_exec_read(ex, y2, o.y2, bytes) == MPMD_OK),
          "%s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return o;
}

static void free_run(one_run *o) { free(o->y), free(o->y2), free(o->dx); }

static void test_mask(void) {
    const int32_t key[2] = {1234, 0}, key2[2] = {1234, 1};
    const int64_t n = (int64_t)R * C;
    float w[R * C];
    tu_fill(w, n, 3);
    for (int ri = 0; ri < 2; ri++) {
        float rate = ri ? 0.1f : 0.5f, scale = 1.0f / (1.0f - rate);
        one_run a = run_once(rate, key, 1, 1), b = run_once(rate, key, 3, 0), c = run_once(rate, key2, 1, 0);
        int64_t dropped = 0, bad_value = 0, bad_grad = 0, same_key2 = 0, same_other_op = 0;
        for (int64_t i = 0; i < n; i++) {
            if (a.y[i] == 0.0f)
                dropped++;
            else if (a.y[i] != scale)
                bad_value++;
            float want = a.y[i] == 0.0f ? 0.0f : w[i] * scale;
            if (memcmp(&a.dx[i], &want, sizeof want)) bad_grad++;
            same_key2 += (a.y[i] == 0.0f) == (c.y[i] == 0.0f);
            same_other_op += (a.y[i] == 0.0f) == (a.y2[i] == 0.0f);
        }
        /* the kept share: binomial(n, rate), 5 standard deviations */
        double sd = sqrt((double)n * rate * (1 - rate));
        CHECK(fabs((double)dropped - rate * (double)n) < 5 * sd, "rate %g: %lld of %lld dropped",
              (double)rate, (long long)dropped, (long long)n);
        CHECK(bad_value == 0, "rate %g: %lld kept values are not x / (1 - rate) = %.9g", (double)rate,
              (long long)bad_value, (double)scale);
        CHECK(bad_grad == 0, "rate %g: %lld gradient elements differ from w * mask / (1 - rate)",
              (double)rate, (long long)bad_grad);
        CHECK(memcmp(a.y, b.y, (size_t)n * sizeof(float)) == 0 &&
                  memcmp(a.dx, b.dx, (size_t)n * sizeof(float)) == 0,
              "rate %g: 1 and 3 threads draw different masks", (double)rate);
        /* independent masks agree on p^2 + (1-p)^2 of the elements */
        double agree = rate * rate + (1 - rate) * (1 - rate);
        CHECK(fabs((double)same_key2 / (double)n - agree) < 0.01,
              "rate %g: another key agrees on %.4f, not ~%.4f", (double)rate, (double)same_key2 / (double)n,
              agree);
        CHECK(fabs((double)same_other_op / (double)n - agree) < 0.01,
              "rate %g: a second dropout op agrees on %.4f, not ~%.4f", (double)rate,
              (double)same_other_op / (double)n, agree);
        free_run(&a), free_run(&b), free_run(&c);
    }
}

/* ---- pipelines ------------------------------------------------------------------------------ */

enum { STAGES = 4, MB = 4, ROWS = 3, W = 16 };

typedef struct dmodel {
    mpmd_graph *g;
    mpmd_value x, y, key, loss;
} dmodel;

/* Four stages of h = dropout(tanh(h w_s), 0.25, key) (the last without
 * dropout), each a remat region when asked; MSE loss over the microbatch,
 * gradients loop-summed, SGD. */
static dmodel build(int remat) {
    dmodel m;
    mpmd_graph *g = m.g = mpmd_graph_new();
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(MB * ROWS, W));
    m.y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(MB * ROWS, W));
    m.key = mpmd_input(g, "key", MPMD_I32, MPMD_SHAPE(2));
    mpmd_value w[STAGES], gw[STAGES];
    for (int s = 0; s < STAGES; s++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", s);
        w[s] = mpmd_param(g, name, MPMD_SHAPE(W, W), MPMD_NORMAL(0.5f));
    }
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_microbatch(g, m.x);
    for (int s = 0; s < STAGES; s++) {
        if (remat) mpmd_remat_begin(g, MPMD_REMAT_SAVE_NOTHING);
        h = mpmd_tanh(g, mpmd_matmul(g, h, w[s], 0));
        if (s < STAGES - 1) h = mpmd_dropout(g, h, 0.25f, m.key);
        if (remat) mpmd_remat_end(g);
        if (s < STAGES - 1) h = mpmd_enter_stage(g, h);
    }
    mpmd_value d = mpmd_sub(g, h, mpmd_microbatch(g, m.y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_mul(g, d, d), 0, NULL, 0), 1.0f / MB);
    loss = mpmd_enter_stage(g, loss);
    mpmd_grad(g, loss, STAGES, w, gw);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int s = 0; s < STAGES; s++)
        gw[s] = mpmd_loop_reduce(g, gw[s], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_sgd(g, STAGES, w, gw, mpmd_scalar(g, 0.1f));
    mpmd_keep(g, total);
    m.loss = total;
    return m;
}

typedef struct outcome {
    float loss[2];
    char hash[65];
} outcome;

/* Two steps, the key (7, step); the schedule NULL: the loop. */
static int train(const dmodel *m, const mpmd_schedule *s, outcome *o, const char *label) {
    mpmd_step *st = tu_step(m->g, s, 0, label);
    if (!st) return 0;
    float x[MB * ROWS * W], y[MB * ROWS * W];
    tu_fill(x, MB * ROWS * W, 5);
    tu_fill(y, MB * ROWS * W, 6);
    int ok = 1;
    for (int step = 0; step < 2 && ok; step++) {
        int32_t key[2] = {7, step};
        ok = mpmd_step_set_input(st, m->x, x, sizeof x) == MPMD_OK &&
             mpmd_step_set_input(st, m->y, y, sizeof y) == MPMD_OK &&
             mpmd_step_set_input(st, m->key, key, sizeof key) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, m->loss, &o->loss[step], sizeof(float)) == MPMD_OK;
    }
    CHECK(ok, "%s: %s", label, mpmd_step_error(st));
    mpmd_step_params_sha256(st, o->hash);
    mpmd_step_free(st);
    return ok;
}

static void test_pipelines(void) {
    outcome plain = {{0, 0}, ""};
    for (int remat = 0; remat <= 1; remat++) {
        dmodel m = build(remat);
        CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
        outcome ref;
        if (!train(&m, NULL, &ref, remat ? "loop, remat" : "loop")) {
            mpmd_graph_free(m.g);
            continue;
        }
        CHECK(ref.loss[0] != ref.loss[1], "the two steps have the same loss %.9g", (double)ref.loss[0]);
        if (remat)
            CHECK(memcmp(plain.loss, ref.loss, sizeof ref.loss) == 0 && !strcmp(plain.hash, ref.hash),
                  "the loop with remat differs from the loop without: losses %.9g vs %.9g",
                  (double)ref.loss[1], (double)plain.loss[1]);
        else
            plain = ref;
        for (int k = 0; k < tu_num_every_schedule; k++) {
            const tu_named_schedule *ns = &tu_every_schedule[k];
            mpmd_schedule *s;
            mpmd_error err;
            if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(ns->name), ns->stages,
                                  ns->ranks, MB, ns->fuse, &s, &err)) {
                CHECK(0, "%s: %s", ns->name, err.msg);
                continue;
            }
            char label[96];
            snprintf(label, sizeof label, "%s%s", ns->name, remat ? ", remat" : "");
            outcome o;
            if (train(&m, s, &o, label))
                CHECK(memcmp(o.loss, ref.loss, sizeof o.loss) == 0 && !strcmp(o.hash, ref.hash),
                      "%s: losses %.9g %.9g vs the loop's %.9g %.9g, parameters %s", label, (double)o.loss[0],
                      (double)o.loss[1], (double)ref.loss[0], (double)ref.loss[1],
                      strcmp(o.hash, ref.hash) ? "differ" : "equal");
            mpmd_schedule_free(s);
        }
        mpmd_graph_free(m.g);
    }
}

int main(void) {
    test_philox_known_answers();
    test_mask();
    test_pipelines();
    return tu_report("test_dropout");
}
