/* Data parallelism with 3 and 4 replicas, on the loop and on a 2-stage
 * pipeline, against each replica's share run on its own:
 *
 * - an ADD loop result is the sum of the replicas' results in replica
 *   order, times 1/R (float), the same bits on every replica;
 * - a MAX loop result is the largest of the replicas' results;
 * - a CONCAT loop result stays each replica's own;
 * - after an SGD step every replica holds the same parameters;
 * - with FSDP (each replica holding a shard of the parameters and
 *   gradients) the gradients, the loss and the parameters after the step
 *   are those bits.
 *
 * With 3 or more replicas the order of the sum shows: (a + b) + c is not
 * (c + a) + b. */
#include "runtime/runtime.h"
#include "testutil.h"

#include <string.h>

enum { ROWS = 4, W = 4, MB = 2 };

typedef struct model {
    mpmd_graph *g;
    mpmd_value x, w1, w2, loss, g1, g2, mx, cat;
} model;

/* Two stages: tanh(x w1) | tanh(h w2), the loss sum(h^2); per microbatch
 * also the column max of h and h itself. */
static model build(void) {
    model m;
    mpmd_graph *g = m.g = mpmd_graph_new();
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS, W));
    m.w1 = mpmd_param(g, "w1", MPMD_SHAPE(W, W), MPMD_NORMAL(0.7f));
    m.w2 = mpmd_param(g, "w2", MPMD_SHAPE(W, W), MPMD_NORMAL(0.7f));
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_tanh(g, mpmd_matmul(g, mpmd_microbatch(g, m.x), m.w1, 0));
    h = mpmd_enter_stage(g, h);
    h = mpmd_tanh(g, mpmd_matmul(g, h, m.w2, 0));
    static const int ax0[1] = {0};
    mpmd_value mx = mpmd_max(g, h, 1, ax0, 0);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, h, h), 0, NULL, 0);
    loss = mpmd_enter_stage(g, loss);
    mpmd_value ws[2] = {m.w1, m.w2}, gs[2];
    mpmd_grad(g, loss, 2, ws, gs);
    m.loss = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    m.g1 = mpmd_loop_reduce(g, gs[0], MPMD_REDUCE_ADD);
    m.g2 = mpmd_loop_reduce(g, gs[1], MPMD_REDUCE_ADD);
    m.mx = mpmd_loop_reduce(g, mx, MPMD_REDUCE_MAX);
    m.cat = mpmd_loop_reduce(g, h, MPMD_REDUCE_CONCAT);
    mpmd_loop_end(g);
    mpmd_value red[2] = {m.g1, m.g2};
    mpmd_sgd(g, 2, ws, red, mpmd_scalar(g, 0.1f));
    mpmd_keep(g, m.loss), mpmd_keep(g, m.g1), mpmd_keep(g, m.g2), mpmd_keep(g, m.mx), mpmd_keep(g, m.cat);
    return m;
}

typedef struct result {
    float loss, g1[W * W], g2[W * W], mx[W], cat[ROWS * W];
} result;

static int read_all(mpmd_step *st, const model *m, int replica, result *r) {
    struct {
        mpmd_value v;
        void *dst;
        size_t bytes;
    } outs[5] = {{m->loss, &r->loss, sizeof r->loss},
                 {m->g1, r->g1, sizeof r->g1},
                 {m->g2, r->g2, sizeof r->g2},
                 {m->mx, r->mx, sizeof r->mx},
                 {m->cat, r->cat, sizeof r->cat}};
    for (int k = 0; k < 5; k++) {
        int ranks[4];
        int nr = mpmd_step_where(st, outs[k].v, ranks, 4);
        if (nr < 1 || mpmd_runtime_read(st, ranks[0], replica, outs[k].v.id, outs[k].dst, outs[k].bytes))
            return 0;
    }
    return 1;
}

static mpmd_step *make(const model *m, const mpmd_schedule *s, int replicas, int fsdp, const float *x,
                       size_t bytes) {
    mpmd_error err;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.data_parallel = replicas;
    o.fsdp = fsdp;
    o.seed = 5;
    mpmd_step *st = mpmd_jit_with_loop(m->g, s, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    if (st)
        CHECK(mpmd_step_set_input(st, m->x, x, bytes) == MPMD_OK && mpmd_step_run(st) == MPMD_OK, "run: %s",
              mpmd_step_error(st));
    return st;
}

static void check(int R, const mpmd_schedule *s, const char *label) {
    model m = build();
    CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
    float x[4 * ROWS * W];
    tu_fill(x, (int64_t)R * ROWS * W, 31 + (uint64_t)R);
    /* each share on its own: the loop, one replica */
    result own[4];
    for (int d = 0; d < R; d++) {
        mpmd_step *st = make(&m, NULL, 1, 0, x + d * ROWS * W, sizeof(float) * ROWS * W);
        CHECK(st && read_all(st, &m, 0, &own[d]), "%s: share %d", label, d);
        mpmd_step_free(st);
    }
    mpmd_step *st = make(&m, s, R, 0, x, sizeof(float) * (size_t)R * ROWS * W);
    if (!st) return;
    /* FSDP: the same numbers, each replica holding a shard (16 elements
     * over 3 replicas: shards of 6, the last one padded) */
    mpmd_step *fs = make(&m, s, R, 1, x, sizeof(float) * (size_t)R * ROWS * W);
    /* what the combine must give: in replica order, then 1/R */
    result want = own[0];
    const float inv = 1.0f / (float)R;
    for (int d = 1; d < R; d++) {
        for (int k = 0; k < W * W; k++)
            want.g1[k] += own[d].g1[k], want.g2[k] += own[d].g2[k];
        want.loss += own[d].loss;
        for (int k = 0; k < W; k++)
            want.mx[k] = own[d].mx[k] > want.mx[k] ? own[d].mx[k] : want.mx[k];
    }
    for (int k = 0; k < W * W; k++)
        want.g1[k] *= inv, want.g2[k] *= inv;
    want.loss *= inv;
    char h0[65];
    mpmd_step_replica_params_sha256(st, 0, h0);
    for (int d = 0; d < R; d++) {
        result got;
        CHECK(read_all(st, &m, d, &got), "%s: replica %d: %s", label, d, mpmd_step_error(st));
        CHECK(!memcmp(got.g1, want.g1, sizeof want.g1) && !memcmp(got.g2, want.g2, sizeof want.g2),
              "%s: replica %d: the combined gradient is not the sum in replica order times 1/%d", label, d,
              R);
        CHECK(got.loss == want.loss, "%s: replica %d: loss %.9g, want %.9g", label, d, got.loss, want.loss);
        CHECK(!memcmp(got.mx, want.mx, sizeof want.mx), "%s: replica %d: the MAX result is not the largest",
              label, d);
        CHECK(!memcmp(got.cat, own[d].cat, sizeof got.cat),
              "%s: replica %d: the CONCAT result is not its own", label, d);
        char hd[65];
        mpmd_step_replica_params_sha256(st, d, hd);
        CHECK(!strcmp(hd, h0), "%s: replica %d's parameters differ from replica 0's", label, d);
    }
    if (fs) {
        result got;
        CHECK(read_all(fs, &m, 0, &got), "%s, fsdp: %s", label, mpmd_step_error(fs));
        CHECK(!memcmp(got.g1, want.g1, sizeof want.g1) && !memcmp(got.g2, want.g2, sizeof want.g2),
              "%s, fsdp: the reduce-scattered gradient is not the all-reduced one", label);
        CHECK(got.loss == want.loss, "%s, fsdp: loss %.9g, want %.9g", label, got.loss, want.loss);
        char hf[65];
        mpmd_step_params_sha256(fs, hf);
        CHECK(!strcmp(hf, h0), "%s, fsdp: the parameters after the step differ from plain data parallelism",
              label);
        mpmd_step_free(fs);
    }
    mpmd_step_free(st);
    mpmd_graph_free(m.g);
}

/* What FSDP refuses and what it leaves whole: data_parallel 1 is an error
 * naming the option; a gradient read by another op after the loop (here
 * its norm) keeps that parameter's group whole, the other one is sharded,
 * and the numbers are still plain data parallelism's. */
static void fsdp_edges(void) {
    model m = build();
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.fsdp = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    CHECK(!st && strstr(err.msg, "fsdp shards the parameters over the data axis, but data_parallel is 1"),
          "fsdp without replicas: %s", st ? "compiled" : err.msg);
    mpmd_step_free(st);
    mpmd_value norm = mpmd_sum(m.g, mpmd_square(m.g, m.g1), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_keep(m.g, norm);
    float x[2 * ROWS * W];
    tu_fill(x, 2 * ROWS * W, 77);
    char hex[2][65];
    float nrm[2];
    for (int k = 0; k < 2; k++) {
        o.data_parallel = 2;
        o.fsdp = k;
        st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
        CHECK(st != NULL, "%s", err.msg);
        if (!st) continue;
        CHECK(mpmd_step_set_input(st, m.x, x, sizeof x) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                  mpmd_step_read(st, norm, &nrm[k], sizeof nrm[k]) == MPMD_OK,
              "run: %s", mpmd_step_error(st));
        mpmd_step_params_sha256(st, hex[k]);
        if (k) {
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            mpmd_step_print(st, f);
            fclose(f);
            CHECK(text && strstr(text, "FSDP (1 parameters sharded, gathered per task)") &&
                      strstr(text, "reduce_scatter %") && strstr(text, "all_gather for fwd_0"),
                  "the plan of w1 whole (its gradient's norm) and w2 sharded: %.300s", text ? text : "");
            free(text);
        }
        mpmd_step_free(st);
    }
    CHECK(!strcmp(hex[0], hex[1]) && nrm[0] == nrm[1],
          "fsdp with a gradient norm: not data parallelism's bits");
    mpmd_graph_free(m.g);
}

int main(void) {
    fsdp_edges();
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(2, MB, &s, &err)) return 1;
    for (int R = 3; R <= 4; R++) {
        char label[64];
        snprintf(label, sizeof label, "loop x %d replicas", R);
        check(R, NULL, label);
        snprintf(label, sizeof label, "Std1F1B(2) x %d replicas", R);
        check(R, s, label);
    }
    mpmd_schedule_free(s);
    return tu_report("test_data_parallel");
}
