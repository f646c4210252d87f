/* Decoding with a key/value cache (mpmd_set_decode):
 *
 * - two blocks of each kind that decodes (LLaMA blocks with grouped-query
 *   rotary attention, plain and with Llama 3.1's rope scaling; GPT-2
 *   blocks; the tutorial's post-LN Block, causal), fed a batch one
 *   position per run, give at every position the output of their forward
 *   pass over the whole sequences (to f32 rounding), with the same
 *   parameters (same names and seed); two positions per run give it too
 *   (the cache written at two places, causal inside the run);
 * - each sequence at its own position: sequence 1 one run behind sequence
 *   0 (its first position fed twice) ends with the same outputs;
 * - in a microbatch loop (2 microbatches of sequences) the decoder gives
 *   the graph without a loop's outputs, and pipelined on 2 stages
 *   (gpipe, std1f1b) the loop's bit for bit; split over 2 model ranks
 *   (tensor_parallel 2: each rank caching its key/value heads) the whole
 *   one's to rounding, and pipelined the split loop's bits;
 * - the caches are variables named after the layers, [B, length, KV, Dh];
 * - errors: a position past the cache (at run time, naming it), positions
 *   of another shape, non-causal attention, a bad set_decode, a stage
 *   marker after decoding layers in a graph without mpmd_loop_begin. */
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { B = 4, T = 7, C = 16, HEADS = 4, KV = 2, HID = 24 };
enum { LLAMA, LLAMA_SCALED, GPT, TUTORIAL, N_KINDS };
static const char *const kind_name[N_KINDS] = {"llama", "llama (llama3 rope scaling)", "gpt-2",
                                               "tutorial block"};

/* Two blocks of a kind on x [b, t, C], a stage marker after the first when
 * `staged` (the second closed by the caller). */
static mpmd_value blocks(mpmd_graph *g, int kind, mpmd_value x, int staged) {
    if (kind == LLAMA_SCALED) {
        const mpmd_rope_scaling l3 = {8.0f, 1.0f, 4.0f, 4};
        mpmd_set_rope_scaling(g, &l3);
    }
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "blk%d", i);
        if (kind == LLAMA || kind == LLAMA_SCALED)
            x = mpmd_llama_block(g, name, x, HEADS, KV, HID, 500.0f, 1e-5f);
        else if (kind == GPT)
            x = mpmd_gpt_block(g, name, x, HEADS);
        else
            x = mpmd_transformer_block(g, name, x, HEADS, MPMD_CAUSAL);
        if (i == 0 && staged) x = mpmd_enter_stage(g, x);
    }
    return x;
}

/* The forward pass over whole sequences x [B, T, C]: y [B, T, C]. */
static int full_forward(int kind, const float *x, float *y) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_value yv = blocks(g, kind, xv, 0);
    mpmd_keep(g, yv);
    CHECK(mpmd_graph_status(g) == MPMD_OK, "%s forward: %s", kind_name[kind], mpmd_graph_error(g));
    mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
    o.threads = 1, o.seed = 5;
    mpmd_error err;
    mpmd_exec *ex = mpmd_exec_new(g, &o, &err);
    int ok = ex && mpmd_exec_set_input(ex, xv, x, sizeof(float) * B * T * C) == MPMD_OK &&
             mpmd_exec_run(ex) == MPMD_OK && mpmd_exec_read(ex, yv, y, sizeof(float) * B * T * C) == MPMD_OK;
    CHECK(ok, "%s forward: %s", kind_name[kind], ex ? mpmd_exec_error(ex) : err.msg);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return ok;
}

/* A decoder of `step` new positions per run: in a graph without a loop
 * (micro 0) on an executor, or in a loop of `micro` microbatches compiled
 * for schedule s (NULL: the loop) over tp model ranks, stage markers when s
 * is given. Runs positions pos[r][b] (x's rows at them), r < runs, and
 * writes each run's output to out[r] [B, step, C]. */
typedef struct decoder {
    int kind, step, micro, tp;
    const mpmd_schedule *s;
} decoder;

static int decode(const decoder *d, const float *x, int runs, const int32_t (*pos)[B][2], float *out) {
    const int t = d->step;
    mpmd_graph *g = mpmd_graph_new();
    if (d->tp > 1) mpmd_set_tensor_parallel(g, d->tp);
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, t, C));
    mpmd_value pv = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(B, t));
    CHECK(mpmd_set_decode(g, pv, T) == MPMD_OK, "%s", mpmd_graph_error(g));
    mpmd_value yv;
    if (d->micro) {
        mpmd_loop_begin(g, d->micro);
        mpmd_value y = blocks(g, d->kind, mpmd_microbatch(g, xv), d->s != NULL);
        if (d->s) y = mpmd_enter_stage(g, y);
        yv = mpmd_loop_reduce(g, y, MPMD_REDUCE_CONCAT);
        mpmd_loop_end(g);
    } else {
        yv = blocks(g, d->kind, xv, 0);
    }
    mpmd_keep(g, yv);
    int ok = mpmd_graph_status(g) == MPMD_OK;
    CHECK(ok, "%s decoder: %s", kind_name[d->kind], mpmd_graph_error(g));
    if (ok) { /* the caches: named after their layers, this rank's key/value heads */
        int kvh = d->kind == LLAMA || d->kind == LLAMA_SCALED ? KV : HEADS;
        mpmd_type ct = mpmd_value_type(g, mpmd_lookup(g, "blk1/attn/cache/v"));
        CHECK(ct.ndim == 4 && ct.dim[0] == B && ct.dim[1] == T && ct.dim[2] == kvh / d->tp &&
                  ct.dim[3] == C / HEADS,
              "%s: blk1/attn/cache/v is [%lld, %lld, %lld, %lld]", kind_name[d->kind], (long long)ct.dim[0],
              (long long)ct.dim[1], (long long)ct.dim[2], (long long)ct.dim[3]);
    }
    mpmd_exec *ex = NULL;
    mpmd_step *st = NULL;
    mpmd_error err;
    if (ok && d->micro) {
        ok = (st = tu_step(g, d->s, 5, kind_name[d->kind])) != NULL;
    } else if (ok) {
        mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
        o.threads = 1, o.seed = 5;
        ok = (ex = mpmd_exec_new(g, &o, &err)) != NULL;
        CHECK(ok, "%s", err.msg);
    }
    float xs[B * 2 * C];
    int32_t ps[B * 2];
    for (int r = 0; ok && r < runs; r++) {
        for (int b = 0; b < B; b++)
            for (int i = 0; i < t; i++) {
                ps[b * t + i] = pos[r][b][i];
                memcpy(xs + (b * t + i) * C, x + ((size_t)b * T + pos[r][b][i]) * C, sizeof(float) * C);
            }
        size_t xb = sizeof(float) * B * t * C, pb = sizeof(int32_t) * B * t;
        float *o = out + (size_t)r * B * t * C;
        if (st)
            ok = mpmd_step_set_input(st, xv, xs, xb) == MPMD_OK &&
                 mpmd_step_set_input(st, pv, ps, pb) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                 mpmd_step_read(st, yv, o, xb) == MPMD_OK;
        else
            ok = mpmd_exec_set_input(ex, xv, xs, xb) == MPMD_OK &&
                 mpmd_exec_set_input(ex, pv, ps, pb) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
                 mpmd_exec_read(ex, yv, o, xb) == MPMD_OK;
        CHECK(ok, "%s, run %d: %s", kind_name[d->kind], r, st ? mpmd_step_error(st) : mpmd_exec_error(ex));
    }
    mpmd_step_free(st);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return ok;
}

/* The larger of w and |a - b| / (1 + |b|), NaN winning (fmax would drop it). */
static double worse(double w, double a, double b) {
    double d = fabs(a - b) / (1 + fabs(b));
    return isnan(d) || d > w ? d : w;
}

/* The worst |a - b| / (1 + |b|) of run r's outputs (positions pos[r])
 * against the full forward's rows y at the same positions. */
static double worst_vs_full(int t, int runs, const int32_t (*pos)[B][2], const float *out, const float *y) {
    double worst = 0;
    for (int r = 0; r < runs; r++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < t; i++)
                for (int c = 0; c < C; c++) {
                    double got = out[(((size_t)r * B + b) * t + i) * C + c];
                    double want = y[((size_t)b * T + pos[r][b][i]) * C + c];
                    worst = worse(worst, got, want);
                }
    return worst;
}

static void test_kinds(void) {
    float x[B * T * C], y[B * T * C];
    tu_fill(x, B * T * C, 21);
    int32_t one[T][B][2], two[(T + 1) / 2][B][2], late[T + 1][B][2];
    for (int r = 0; r < T; r++)
        for (int b = 0; b < B; b++)
            one[r][b][0] = r;
    for (int r = 0; r < (T + 1) / 2; r++) /* 0 1, 2 3, 4 5, 6 5 (5 written again: the same row) */
        for (int b = 0; b < B; b++)
            two[r][b][0] = 2 * r, two[r][b][1] = 2 * r + 1 < T ? 2 * r + 1 : T - 2;
    for (int r = 0; r <= T; r++) /* odd sequences one run behind, their position 0 twice */
        for (int b = 0; b < B; b++)
            late[r][b][0] = b % 2 ? (r > 0 ? r - 1 : 0) : (r < T ? r : T - 1);
    float *out = malloc(sizeof(float) * (T + 1) * B * 2 * C), *ref = malloc(sizeof(float) * T * B * C);
    for (int kind = 0; kind < N_KINDS; kind++) {
        if (!full_forward(kind, x, y)) continue;
        decoder d = {kind, 1, 0, 1, NULL};
        if (decode(&d, x, T, (const int32_t(*)[B][2])one, out)) {
            double w = worst_vs_full(1, T, (const int32_t(*)[B][2])one, out, y);
            CHECK(w <= 2e-5, "%s, one position per run: %.3g from the full forward", kind_name[kind], w);
            memcpy(ref, out, sizeof(float) * T * B * C);
        }
        d.step = 2;
        if (decode(&d, x, (T + 1) / 2, (const int32_t(*)[B][2])two, out)) {
            double w = worst_vs_full(2, (T + 1) / 2, (const int32_t(*)[B][2])two, out, y);
            CHECK(w <= 2e-5, "%s, two positions per run: %.3g from the full forward", kind_name[kind], w);
        }
        d.step = 1;
        if (decode(&d, x, T + 1, (const int32_t(*)[B][2])late, out)) {
            double w = worst_vs_full(1, T + 1, (const int32_t(*)[B][2])late, out, y);
            CHECK(w <= 2e-5, "%s, sequences at their own positions: %.3g from the full forward",
                  kind_name[kind], w);
        }
        if (kind != LLAMA && kind != GPT) continue;
        /* the loop of 2 microbatches; pipelined, its bits */
        d.micro = 2;
        float *loop = malloc(sizeof(float) * T * B * C);
        if (decode(&d, x, T, (const int32_t(*)[B][2])one, loop)) {
            double w = worst_vs_full(1, T, (const int32_t(*)[B][2])one, loop, y);
            CHECK(w <= 2e-5, "%s in a loop: %.3g from the full forward", kind_name[kind], w);
        }
        for (int k = 0; k < 2; k++) {
            mpmd_schedule *s;
            mpmd_error err;
            if (mpmd_schedule_new(k ? MPMD_SCHED_STD1F1B : MPMD_SCHED_GPIPE, 2, 2, 2, 0, &s, &err)) {
                CHECK(0, "%s", err.msg);
                continue;
            }
            d.s = s;
            if (decode(&d, x, T, (const int32_t(*)[B][2])one, out))
                CHECK(memcmp(out, loop, sizeof(float) * T * B * C) == 0,
                      "%s, %s on 2 stages: not the loop's bits", kind_name[kind], k ? "std1f1b" : "gpipe");
            d.s = NULL;
            /* split over 2 model ranks: the whole decoder's numbers to
             * rounding; pipelined, the split loop's bits */
            d.tp = 2;
            float *split = malloc(sizeof(float) * T * B * C);
            if (k == 0 && decode(&d, x, T, (const int32_t(*)[B][2])one, split)) {
                double w = 0;
                for (int i = 0; i < T * B * C; i++)
                    w = worse(w, split[i], loop[i]);
                CHECK(w <= 2e-5, "%s over 2 model ranks: %.3g from the whole decoder", kind_name[kind], w);
                d.s = s;
                if (decode(&d, x, T, (const int32_t(*)[B][2])one, out))
                    CHECK(memcmp(out, split, sizeof(float) * T * B * C) == 0,
                          "%s over 2 model ranks, gpipe on 2 stages: not the split loop's bits",
                          kind_name[kind]);
                d.s = NULL;
            }
            d.tp = 1;
            free(split);
            mpmd_schedule_free(s);
        }
        d.micro = 0;
        free(loop);
    }
    free(out), free(ref);
}

/* Errors, each naming what is wrong. */
static void test_errors(void) {
    /* a position past the cache: the run fails naming it */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(1, 1, C));
    mpmd_value pv = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(1, 1));
    mpmd_set_decode(g, pv, 5);
    mpmd_value y = mpmd_gpt_block(g, "blk", xv, HEADS);
    mpmd_keep(g, y);
    mpmd_exec *ex = tu_exec(g, 1);
    float x[C] = {0};
    int32_t p = 5;
    CHECK(mpmd_exec_set_input(ex, xv, x, sizeof x) == MPMD_OK &&
              mpmd_exec_set_input(ex, pv, &p, sizeof p) == MPMD_OK && mpmd_exec_run(ex) != MPMD_OK &&
              strstr(mpmd_exec_error(ex), "5"),
          "position 5 of a cache of 5: %s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);

    struct {
        int what;
        const char *want;
    } cs[] = {
        {0, "decode positions are i32[2,1]"}, /* rows that do not match the input */
        {1, "causal attention only"},
        {2, "i32 [sequences, new positions]"},
        {3, "a cache of 0 positions"},
        {4, "not a before-loop value"},
        {5, "begin the loop (mpmd_loop_begin) before building them"},
        {6, "do not split into 3 microbatches"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        g = mpmd_graph_new();
        xv = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 1, C));
        pv = mpmd_input(g, "positions", MPMD_I32, MPMD_SHAPE(2, 1));
        mpmd_value x2 = mpmd_input(g, "x2", MPMD_F32, MPMD_SHAPE(1, 1, C));
        switch (cs[k].what) {
        case 0:
            mpmd_set_decode(g, pv, 8);
            TU_DROP(mpmd_llama_block(g, "blk", x2, HEADS, KV, HID, 1e4f, 1e-5f));
            break;
        case 1:
            mpmd_set_decode(g, pv, 8);
            TU_DROP(mpmd_self_attention(g, "attn", xv, HEADS, MPMD_NOT_CAUSAL));
            break;
        case 2: mpmd_set_decode(g, mpmd_input(g, "p3", MPMD_I32, MPMD_SHAPE(2, 1, 1)), 8); break;
        case 3: mpmd_set_decode(g, pv, 0); break;
        case 4:
            mpmd_loop_begin(g, 2);
            mpmd_set_decode(g, mpmd_microbatch(g, pv), 8);
            break;
        case 5: {
            mpmd_set_decode(g, pv, 8);
            mpmd_value h = mpmd_gpt_block(g, "blk", xv, HEADS);
            TU_DROP(mpmd_enter_stage(g, h));
            break;
        }
        case 6:
            mpmd_set_decode(g, pv, 8);
            mpmd_loop_begin(g, 3);
            TU_DROP(mpmd_gpt_block(g, "blk", xv, HEADS));
            break;
        }
        CHECK(mpmd_graph_status(g) != MPMD_OK && strstr(mpmd_graph_error(g), cs[k].want),
              "case %zu: \"%s\" (want \"%s\")", k, mpmd_graph_error(g), cs[k].want);
        mpmd_graph_free(g);
    }
}

int main(void) {
    test_kinds();
    test_errors();
    return tu_report("test_decode");
}
