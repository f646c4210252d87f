/* The promise: for every schedule, the loss and every updated parameter
 * after a step are bitwise equal to the one-rank microbatch loop, for an
 * MLP with a marker per layer and SGD, and for a GPT with tied embeddings
 * and AdamW, whatever the number of threads each rank uses. Also the
 * compiler's errors and its placement. */
#include "gpt_model.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static mpmd_schedule *make_sched(const tu_pcase *c) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_new(c->kind, c->stages, c->ranks, c->micro, c->fuse, &s, &err) != MPMD_OK) {
        fprintf(stderr, "schedule: %s\n", err.msg);
        abort();
    }
    return s;
}

/* Reference: one rank, the plain loop; then the pipeline; compare loss and
 * parameter hash after each of two steps. */
static void compare(const char *what, mpmd_graph *g, const mpmd_value *inputs, void *const *data,
                    const size_t *bytes, int n_inputs, mpmd_value loss, const mpmd_schedule *s, int tpr) {
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    eo.seed = 7;
    eo.backend = tu_backend();
    mpmd_error err;
    mpmd_exec *ex = mpmd_exec_new(g, &eo, &err);
    CHECK(ex != NULL, "%s: exec: %s", what, err.msg);
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = tpr;
    so.seed = 7;
    so.backend = tu_backend();
    mpmd_step *st = mpmd_jit_with_loop(g, s, &so, &err);
    CHECK(st != NULL, "%s: %s: jit: %s", what, s->name, err.msg);
    if (!ex || !st) {
        mpmd_exec_free(ex);
        mpmd_step_free(st);
        return;
    }
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < n_inputs; i++) {
            mpmd_exec_set_input(ex, inputs[i], data[i], bytes[i]);
            mpmd_step_set_input(st, inputs[i], data[i], bytes[i]);
        }
        mpmd_status a = mpmd_exec_run(ex), b = mpmd_step_run(st);
        CHECK(a == MPMD_OK, "%s: exec run: %s", what, mpmd_exec_error(ex));
        CHECK(b == MPMD_OK, "%s: %s: step run: %s", what, s->name, mpmd_step_error(st));
        if (a || b) break;
        float la, lb;
        mpmd_exec_read(ex, loss, &la, sizeof la);
        mpmd_step_read(st, loss, &lb, sizeof lb);
        char ha[65], hb[65];
        mpmd_exec_params_sha256(ex, ha);
        mpmd_step_params_sha256(st, hb);
        CHECK(memcmp(&la, &lb, sizeof la) == 0,
              "%s: %s, %d threads/rank, step %d: loss %.9g vs one-rank %.9g", what, s->name, tpr, step, lb,
              la);
        CHECK(strcmp(ha, hb) == 0, "%s: %s, %d threads/rank, step %d: params differ from the one-rank loop",
              what, s->name, tpr, step);
    }
    mpmd_exec_free(ex);
    mpmd_step_free(st);
}

static void test_mlp_equivalence(void) {
    for (int c = 0; c < tu_num_pcases; c++) {
        const tu_pcase *pc = &tu_pcases[c];
        tu_mlp_case mc = tu_mlp_case_new(c);
        tu_mlp m = mc.m;
        CHECK(mpmd_graph_status(m.g) == MPMD_OK, "mlp graph: %s", mpmd_graph_error(m.g));
        mpmd_schedule *s = make_sched(pc);
        compare("mlp", m.g, mc.in, mc.data, mc.bytes, 2, m.loss, s, 1);
        if (!tu_quick()) compare("mlp", m.g, mc.in, mc.data, mc.bytes, 2, m.loss, s, 2);
        mpmd_schedule_free(s);
        tu_mlp_case_free(&mc);
    }
}

/* The GPT of every equivalence case, in f32 and (mixed precision: bf16
 * compute, f32 master weights) in bf16. */
static void test_gpt_equivalence(mpmd_dtype compute) {
    for (int c = 0; c < tu_num_pcases; c++) {
        const tu_pcase *pc = &tu_pcases[c];
        if (tu_quick() && c % 3 != 0) continue;
        gpt_config cfg = gpt_config_default();
        cfg.vocab = 64;
        cfg.seq = 8;
        cfg.width = 16;
        cfg.heads = 2;
        cfg.layers = pc->stages;
        cfg.stages = pc->stages;
        cfg.microbatches = pc->micro;
        cfg.batch = pc->micro * 2;
        cfg.tie_embeddings = 1;
        cfg.adam.weight_decay = 0.01f;
        cfg.compute = compute;
        gpt_model m;
        mpmd_error err;
        if (gpt_build(&cfg, 1, &m, &err) != MPMD_OK) {
            CHECK(0, "gpt build: %s", err.msg);
            continue;
        }
        size_t nb = (size_t)(cfg.batch * cfg.seq) * sizeof(int32_t);
        int32_t *tok = malloc(nb), *tgt = malloc(nb);
        gpt_random_batch(cfg.vocab, cfg.batch, cfg.seq, 5, c, tok, tgt);
        mpmd_value in[2] = {m.tokens, m.targets};
        void *data[2] = {tok, tgt};
        size_t bytes[2] = {nb, nb};
        mpmd_schedule *s = make_sched(pc);
        const char *what = compute == MPMD_F32 ? "gpt" : "gpt bf16";
        compare(what, m.g, in, data, bytes, 2, m.loss, s, 1);
        if (!tu_quick() && c % 2 == 0) compare(what, m.g, in, data, bytes, 2, m.loss, s, 2);
        /* tied embedding: the token embedding lives with the first and last stages */
        mpmd_value wte = mpmd_lookup(m.g, "wte/embedding");
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
        if (st) {
            int ranks[8];
            int nr = mpmd_step_where(st, wte, ranks, 8);
            int first = s->stage_rank[0], lastr = s->stage_rank[pc->stages - 1];
            int want = first == lastr ? 1 : 2;
            CHECK(nr == want, "%s: wte on %d ranks, expected %d", s->name, nr, want);
            mpmd_step_free(st);
        }
        mpmd_schedule_free(s);
        free(tok), free(tgt);
        gpt_model_free(&m);
    }
}

static void test_errors(void) {
    tu_mlp m = tu_build_mlp(3, 4, 2, 4);
    mpmd_schedule *s = NULL;
    mpmd_error err;
    mpmd_schedule_std1f1b(2, 4, &s, &err);
    CHECK(mpmd_jit_with_loop(m.g, s, NULL, &err) == NULL, "wrong marker count accepted");
    CHECK(strstr(err.msg, "has 3 stage markers") && strstr(err.msg, "has 2 stages"), "%s", err.msg);
    mpmd_schedule_free(s);
    mpmd_schedule_std1f1b(3, 8, &s, &err);
    CHECK(mpmd_jit_with_loop(m.g, s, NULL, &err) == NULL && strstr(err.msg, "4 microbatches") &&
              strstr(err.msg, "has 8"),
          "%s", err.msg);
    mpmd_schedule_free(s);
    /* a user schedule that takes a stage's microbatches out of order */
    const char *txt = "fwd_0__1 fwd_0__0 bwd_0__0 bwd_0__1\n";
    mpmd_graph_free(m.g);
    m = tu_build_mlp(1, 2, 2, 4);
    if (mpmd_schedule_parse(txt, strlen(txt), "test", &s, &err) == MPMD_OK) {
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
        CHECK(st == NULL && strstr(err.msg, "microbatches in order"), "%s", st ? "accepted" : err.msg);
        mpmd_step_free(st);
        mpmd_schedule_free(s);
    }
    /* a schedule whose dependencies cannot be met */
    const char *bad = "fwd_0__0 bwd_0__0\nbwd_1__0 fwd_1__0\n";
    mpmd_graph_free(m.g);
    m = tu_build_mlp(2, 1, 2, 4);
    if (mpmd_schedule_parse(bad, strlen(bad), "bad", &s, &err) == MPMD_OK) {
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
        CHECK(st == NULL && err.code == MPMD_ERR_SCHEDULE, "deadlocking schedule: %s",
              st ? "accepted" : err.msg);
        mpmd_step_free(st);
        mpmd_schedule_free(s);
    }
    mpmd_graph_free(m.g);
    /* an op that no task can run: a forward op reading a gradient */
    {
        mpmd_graph *gg = mpmd_graph_new();
        mpmd_value x = mpmd_input(gg, "x", MPMD_F32, MPMD_SHAPE(4, 2));
        mpmd_value w = mpmd_param(gg, "w", MPMD_SHAPE(2), MPMD_ONES);
        mpmd_loop_begin(gg, 2);
        mpmd_value h = mpmd_enter_stage(gg, mpmd_mul(gg, mpmd_microbatch(gg, x), w));
        mpmd_value l = mpmd_enter_stage(gg, mpmd_sum(gg, mpmd_square(gg, h), 0, NULL, 0));
        mpmd_value gw;
        mpmd_grad(gg, l, 1, &w, &gw);
        mpmd_value pen = mpmd_sum(gg, mpmd_mul(gg, gw, gw), 0, NULL, 0); /* a gradient penalty */
        mpmd_value tot = mpmd_loop_reduce(gg, pen, MPMD_REDUCE_ADD);
        mpmd_loop_end(gg);
        mpmd_keep(gg, tot);
        mpmd_schedule_std1f1b(2, 2, &s, &err);
        mpmd_step *st = mpmd_jit_with_loop(gg, s, NULL, &err);
        CHECK(st == NULL && strstr(err.msg, "cannot place") && strstr(err.msg, "backward pass"), "%s",
              st ? "accepted" : err.msg);
        mpmd_step_free(st);
        mpmd_schedule_free(s);
        mpmd_graph_free(gg);
    }
    /* a graph without a loop */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_param(g, "w", MPMD_SHAPE(2), MPMD_ZEROS);
    mpmd_schedule_gpipe(1, 1, &s, &err);
    CHECK(mpmd_jit_with_loop(g, s, NULL, &err) == NULL && strstr(err.msg, "no microbatch loop"), "%s",
          err.msg);
    mpmd_schedule_free(s);
    mpmd_graph_free(g);
}

/* A 2-layer, 2-stage GPT of 16 tokens, 2 microbatches of batch / 2. */
static gpt_config tiny_gpt(int64_t batch) {
    gpt_config cfg = gpt_config_default();
    cfg.vocab = 16;
    cfg.seq = 4;
    cfg.width = 8;
    cfg.heads = 2;
    cfg.layers = 2;
    cfg.stages = 2;
    cfg.microbatches = 2;
    cfg.batch = batch;
    return cfg;
}

/* A failing rank stops every rank with its message instead of a hang. */
static void test_failure_stops_all(void) {
    gpt_config cfg = tiny_gpt(4);
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&cfg, 1, &m, &err) != MPMD_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(2, 2, &s, &err);
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.backend = tu_backend();
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &so, &err);
    CHECK(st != NULL, "%s", err.msg);
    if (st) {
        int32_t tok[16], tgt[16];
        gpt_random_batch(16, 4, 4, 1, 1, tok, tgt);
        tgt[13] = 999; /* a label outside the vocabulary, on the last stage */
        mpmd_step_set_input(st, m.tokens, tok, sizeof tok);
        mpmd_step_set_input(st, m.targets, tgt, sizeof tgt);
        mpmd_status rc = mpmd_step_run(st);
        CHECK(rc == MPMD_ERR_RUNTIME, "bad label ran: %d", rc);
        CHECK(strstr(mpmd_step_error(st), "rank 1") && strstr(mpmd_step_error(st), "999"), "message: %s",
              mpmd_step_error(st));
        /* the step still works with good data */
        tgt[13] = 3;
        mpmd_step_set_input(st, m.targets, tgt, sizeof tgt);
        CHECK(mpmd_step_run(st) == MPMD_OK, "after a failure: %s", mpmd_step_error(st));
        mpmd_step_free(st);
    }
    mpmd_schedule_free(s);
    gpt_model_free(&m);
}

/* A data-parallel step that failed (a bad label on one replica) runs again
 * with good data exactly as a fresh step: no replica is left counted at the
 * barrier where the replicas combine their gradients. */
static void test_failure_then_data_parallel(void) {
    gpt_config cfg = tiny_gpt(4); /* 4 sequences per replica */
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&cfg, 1, &m, &err) != MPMD_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(2, 2, &s, &err);
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.backend = tu_backend();
    so.data_parallel = 2;
    mpmd_step *a = mpmd_jit_with_loop(m.g, s, &so, &err), *b = mpmd_jit_with_loop(m.g, s, &so, &err);
    CHECK(a && b, "%s", err.msg);
    if (a && b) {
        int32_t tok[32], tgt[32], bad[32];
        gpt_random_batch(16, 8, 4, 1, 1, tok, tgt);
        memcpy(bad, tgt, sizeof bad);
        bad[29] = 999; /* replica 1's share, on the last stage */
        mpmd_step_set_input(a, m.tokens, tok, sizeof tok);
        mpmd_step_set_input(a, m.targets, bad, sizeof bad);
        CHECK(mpmd_step_run(a) == MPMD_ERR_RUNTIME, "a bad label ran");
        char ha[65], hb[65];
        for (int k = 0; k < 2; k++) {
            mpmd_step_set_input(a, m.targets, tgt, sizeof tgt);
            mpmd_step_set_input(b, m.tokens, tok, sizeof tok);
            mpmd_step_set_input(b, m.targets, tgt, sizeof tgt);
            CHECK(mpmd_step_run(a) == MPMD_OK, "after the failure: %s", mpmd_step_error(a));
            CHECK(mpmd_step_run(b) == MPMD_OK, "%s", mpmd_step_error(b));
        }
        mpmd_step_replica_params_sha256(a, 1, ha);
        mpmd_step_replica_params_sha256(b, 1, hb);
        CHECK(strcmp(ha, hb) == 0, "after a failed step, data-parallel steps differ from a fresh step's");
    }
    mpmd_step_free(a);
    mpmd_step_free(b);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
}

/* Data parallelism in-process: 2 stages x 2 replicas match the one-rank
 * loop on the whole batch to float tolerance, and the replicas' parameters
 * are bitwise identical. */
static void test_data_parallel(void) {
    const int R = 2, S = 2, n = 4, rows = 3, width = 8;
    tu_mlp dp = tu_build_mlp(S, n, rows, width);      /* one replica's share */
    tu_mlp ref = tu_build_mlp(S, n, rows * R, width); /* the whole batch */
    int64_t B = (int64_t)R * n * rows;
    float *x = malloc((size_t)B * width * sizeof *x), *y = malloc((size_t)B * width * sizeof *y);
    tu_fill(x, B * width, 5);
    tu_fill(y, B * width, 6);
    size_t bytes = (size_t)B * width * sizeof(float);
    mpmd_schedule *s;
    mpmd_error err;
    mpmd_schedule_std1f1b(S, n, &s, &err);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.seed = 3;
    o.data_parallel = R;
    o.threads_per_rank = 1;
    o.backend = tu_backend();
    mpmd_step *st = mpmd_jit_with_loop(dp.g, s, &o, &err);
    CHECK(st != NULL, "data parallel jit: %s", err.msg);
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.seed = 3;
    eo.threads = 1;
    eo.backend = tu_backend();
    mpmd_exec *ex = mpmd_exec_new(ref.g, &eo, &err);
    if (st && ex) {
        CHECK(mpmd_step_set_input(st, dp.x, x, 10) == MPMD_ERR_SHAPE &&
                  strstr(mpmd_step_error(st), "per replica"),
              "%s", mpmd_step_error(st));
        for (int step = 0; step < 3; step++) {
            mpmd_step_set_input(st, dp.x, x, bytes); /* the global batch: each replica takes its share */
            mpmd_step_set_input(st, dp.y, y, bytes);
            mpmd_exec_set_input(ex, ref.x, x, bytes);
            mpmd_exec_set_input(ex, ref.y, y, bytes);
            CHECK(mpmd_step_run(st) == MPMD_OK, "%s", mpmd_step_error(st));
            CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
            float la, lb;
            mpmd_exec_read(ex, ref.loss, &la, sizeof la);
            mpmd_step_read(st, dp.loss, &lb, sizeof lb);
            CHECK(fabsf(la - lb) <= 1e-5f * fabsf(la) + 1e-6f, "step %d: data-parallel loss %.9g vs %.9g",
                  step, lb, la);
        }
        char h0[65], h1[65];
        mpmd_step_replica_params_sha256(st, 0, h0);
        mpmd_step_replica_params_sha256(st, 1, h1);
        CHECK(strcmp(h0, h1) == 0, "replicas differ");
        /* and the parameters are those of the whole-batch loop, to tolerance */
        mpmd_value w = mpmd_lookup(dp.g, "dense_1/kernel"), wr = mpmd_lookup(ref.g, "dense_1/kernel");
        float a[64], b[64];
        mpmd_step_read(st, w, a, sizeof a);
        mpmd_exec_read(ex, wr, b, sizeof b);
        float worst = 0;
        for (int k = 0; k < 64; k++)
            worst = fmaxf(worst, fabsf(a[k] - b[k]));
        CHECK(worst < 1e-5f, "params differ from the whole-batch loop by %g", worst);
    }
    mpmd_step_free(st);
    mpmd_exec_free(ex);
    mpmd_schedule_free(s);
    free(x), free(y);
    mpmd_graph_free(dp.g);
    mpmd_graph_free(ref.g);
}

int main(void) {
    tu_backend_or_skip("test_pipeline");
    test_data_parallel();
    test_errors();
    test_mlp_equivalence();
    test_gpt_equivalence(MPMD_F32);
    test_gpt_equivalence(MPMD_BF16);
    test_failure_stops_all();
    test_failure_then_data_parallel();
    return tu_report("test_pipeline");
}
