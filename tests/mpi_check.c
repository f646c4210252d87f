/* mpi_check: the MPI runtime's promises, run under mpirun.
 *
 *   mpirun -np D mpi_check            every case of the equivalence list with
 *                                      D ranks: after two steps the loss and
 *                                      the parameters' SHA-256 equal the
 *                                      one-rank loop's (MLP + SGD, GPT with
 *                                      tied embeddings + AdamW)
 *   mpirun -np 4 mpi_check --data 2   2 stages x 2 replicas vs the loop on
 *                                      the whole batch (float tolerance), and
 *                                      replicas bitwise identical
 *   mpirun -np 2 mpi_check --forever  trains until killed (the failure test)
 *   mpirun -np 2 mpi_check --forever --step-timeout S
 *                                      the same with a watchdog of S seconds
 *                                      (the stopped-rank test)
 *   mpirun -np 2 mpi_check --fail     a bad label on the last rank: the job
 *                                      must end with the rank and the cause
 *   mpirun -np 2 mpi_check --fail-both  a step in which both ranks fail (a
 *                                      bad token on rank 0 after its first
 *                                      send, a bad label on rank 1), with
 *                                      receives posted that never complete:
 *                                      they are cancelled, and the next steps
 *                                      give the loop's bits as if the failed
 *                                      step had not been tried
 *   mpirun -np 4 mpi_check --partial-load  2 replicas (FSDP) x 2 model ranks:
 *                                      loading one parameter from a checkpoint
 *                                      (mpmd_step_load_params `only`) leaves
 *                                      the others, of which each process holds
 *                                      a part, as they were
 *
 * Every process computes the one-rank reference itself (it is cheap and
 * deterministic), so every process can check; rank 0 prints the summary.
 */
#include "gpt_model.h"
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static int world, nproc;
static double step_timeout; /* --step-timeout S: the watchdog (0: the default) */

static mpmd_step *compile(mpmd_graph *g, const mpmd_schedule *s, int data) {
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.runtime = MPMD_RUNTIME_MPI;
    o.seed = 7;
    o.threads_per_rank = 1;
    o.data_parallel = data;
    o.step_timeout = step_timeout;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(g, s, &o, &err);
    if (!st) {
        fprintf(stderr, "process %d: %s\n", world, err.msg);
        mpmd_mpi_abort(1);
    }
    return st;
}

static void run_or_abort(mpmd_step *st) {
    if (mpmd_step_run(st) != MPMD_OK) {
        fprintf(stderr, "process %d: step failed: %s\n", world, mpmd_step_error(st));
        mpmd_mpi_abort(1);
    }
}

/* Two steps of the loop and of the MPI pipeline; compare bit for bit. */
static void compare(const char *what, mpmd_graph *g, const mpmd_value *in, void *const *data,
                    const size_t *bytes, mpmd_value loss, const mpmd_schedule *s) {
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    eo.seed = 7;
    mpmd_error err;
    mpmd_exec *ex = mpmd_exec_new(g, &eo, &err);
    mpmd_step *st = compile(g, s, 1);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < 2; i++) {
            mpmd_exec_set_input(ex, in[i], data[i], bytes[i]);
            mpmd_step_set_input(st, in[i], data[i], bytes[i]);
        }
        mpmd_exec_run(ex);
        run_or_abort(st);
        float la, lb;
        mpmd_exec_read(ex, loss, &la, sizeof la);
        mpmd_step_gather(st, loss, &lb, sizeof lb);
        char ha[65], hb[65];
        mpmd_exec_params_sha256(ex, ha);
        mpmd_step_params_sha256(st, hb);
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s %s step %d: loss %.9g vs one-rank %.9g", what, s->name,
              step, lb, la);
        CHECK(strcmp(ha, hb) == 0, "%s %s step %d: parameters differ from the one-rank loop", what, s->name,
              step);
    }
    if (world == 0) printf("%s %s: final_loss and params_sha256 equal to the one-rank loop\n", what, s->name);
    mpmd_step_free(st);
    mpmd_exec_free(ex);
}

static void equivalence(void) {
    for (int c = 0; c < tu_num_pcases; c++) {
        const tu_pcase *pc = &tu_pcases[c];
        if (pc->ranks != nproc) continue;
        mpmd_schedule *s;
        mpmd_error err;
        if (mpmd_schedule_new(pc->kind, pc->stages, pc->ranks, pc->micro, pc->fuse, &s, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            mpmd_mpi_abort(1);
        }
        tu_mlp_case mc = tu_mlp_case_new(c);
        compare("mlp", mc.m.g, mc.in, mc.data, mc.bytes, mc.m.loss, s);
        tu_mlp_case_free(&mc);

        gpt_config cfg = gpt_config_default();
        cfg.vocab = 64, cfg.seq = 8, cfg.width = 16, cfg.heads = 2;
        cfg.layers = pc->stages, cfg.stages = pc->stages, cfg.microbatches = pc->micro;
        cfg.batch = pc->micro * 2, cfg.tie_embeddings = 1, cfg.adam.weight_decay = 0.01f;
        gpt_model gm;
        if (gpt_build(&cfg, 1, &gm, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            mpmd_mpi_abort(1);
        }
        size_t nb = (size_t)(cfg.batch * cfg.seq) * sizeof(int32_t);
        int32_t *tok = malloc(nb), *tgt = malloc(nb);
        gpt_random_batch(cfg.vocab, cfg.batch, cfg.seq, 5, (uint64_t)c, tok, tgt);
        mpmd_value gin[2] = {gm.tokens, gm.targets};
        void *gdata[2] = {tok, tgt};
        size_t gbytes[2] = {nb, nb};
        compare("gpt", gm.g, gin, gdata, gbytes, gm.loss, s);
        free(tok), free(tgt);
        gpt_model_free(&gm);
        mpmd_schedule_free(s);
    }
}

/* 2 stages x R replicas against the loop on the whole batch. */
static void data_parallel(int R) {
    const int S = nproc / R, n = 4, rows = 3, width = 8;
    tu_mlp dp = tu_build_mlp(S, n, rows, width), ref = tu_build_mlp(S, n, rows * R, width);
    int64_t B = (int64_t)R * n * rows;
    size_t bytes = (size_t)B * width * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    tu_fill(x, B * width, 5);
    tu_fill(y, B * width, 6);
    mpmd_schedule *s;
    mpmd_error err;
    mpmd_schedule_std1f1b(S, n, &s, &err);
    mpmd_step *st = compile(dp.g, s, R);
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.seed = 7, eo.threads = 1;
    mpmd_exec *ex = mpmd_exec_new(ref.g, &eo, &err);
    for (int step = 0; step < 3; step++) {
        mpmd_step_set_input(st, dp.x, x, bytes); /* each process keeps its replica's share */
        mpmd_step_set_input(st, dp.y, y, bytes);
        mpmd_exec_set_input(ex, ref.x, x, bytes);
        mpmd_exec_set_input(ex, ref.y, y, bytes);
        run_or_abort(st);
        mpmd_exec_run(ex);
        float la, lb;
        mpmd_exec_read(ex, ref.loss, &la, sizeof la);
        mpmd_step_gather(st, dp.loss, &lb, sizeof lb);
        CHECK(fabsf(la - lb) <= 1e-5f * fabsf(la) + 1e-6f,
              "data parallel step %d: loss %.9g vs whole batch %.9g", step, lb, la);
    }
    char h[8][65];
    for (int d = 0; d < R && d < 8; d++)
        mpmd_step_replica_params_sha256(st, d, h[d]);
    for (int d = 1; d < R && d < 8; d++)
        CHECK(strcmp(h[0], h[d]) == 0, "replica %d differs from replica 0", d);
    if (world == 0)
        printf(
            "data parallel %d stages x %d replicas: loss matches the whole-batch loop, replicas identical\n",
            S, R);
    mpmd_step_free(st);
    mpmd_exec_free(ex);
    mpmd_schedule_free(s);
    free(x), free(y);
    mpmd_graph_free(dp.g), mpmd_graph_free(ref.g);
}

/* The small GPT of the failure tests (vocab 64, batch 8 of 16 tokens in 4
 * microbatches) on `stages` ranks, compiled for Std1F1B. */
static mpmd_step *small_gpt(int stages, gpt_model *gm) {
    gpt_config cfg = gpt_config_default();
    cfg.vocab = 64, cfg.seq = 16, cfg.width = 32, cfg.heads = 2, cfg.layers = 2, cfg.stages = stages;
    cfg.microbatches = 4, cfg.batch = 8;
    mpmd_error err;
    if (gpt_build(&cfg, 1, gm, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        mpmd_mpi_abort(1);
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(stages, 4, &s, &err);
    mpmd_step *st = compile(gm->g, s, 1); /* the step keeps its own copy */
    mpmd_schedule_free(s);
    return st;
}

/* Train a 2-rank GPT for a long time (the kill test), or with a bad label
 * on the last stage (the failure test). */
static void train(int fail) {
    gpt_model gm;
    mpmd_step *st = small_gpt(nproc, &gm);
    int32_t tok[8 * 16], tgt[8 * 16];
    for (long step = 0; step < 1000000; step++) {
        gpt_random_batch(64, 8, 16, 1, (uint64_t)step, tok, tgt);
        if (fail && step == 2) tgt[5] = 4242;
        mpmd_step_set_input(st, gm.tokens, tok, sizeof tok);
        mpmd_step_set_input(st, gm.targets, tgt, sizeof tgt);
        run_or_abort(st);
        if (world == 0 && step % 50 == 0) printf("step %ld\n", step), fflush(stdout);
    }
}

/* Both ranks fail in one step, each after the other has posted receives
 * for it; the next steps must not see anything of it. */
static void fail_both(void) {
    gpt_model gm;
    mpmd_step *st = small_gpt(2, &gm);
    mpmd_error err;
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.seed = 7, eo.threads = 1;
    mpmd_exec *ex = mpmd_exec_new(gm.g, &eo, &err);
    int32_t tok[8 * 16], tgt[8 * 16], bad_tok[8 * 16], bad_tgt[8 * 16];
    int failed = 0;
    for (int step = 0; step < 3; step++) {
        gpt_random_batch(64, 8, 16, 1, (uint64_t)step, tok, tgt);
        if (step == 1) { /* rank 0: a token out of range in microbatch 1; rank 1: a label in microbatch 0 */
            memcpy(bad_tok, tok, sizeof tok), memcpy(bad_tgt, tgt, sizeof tgt);
            bad_tok[2 * 16 + 3] = 999, bad_tgt[5] = 4242;
            mpmd_step_set_input(st, gm.tokens, bad_tok, sizeof tok);
            mpmd_step_set_input(st, gm.targets, bad_tgt, sizeof tgt);
            mpmd_status rc = mpmd_step_run(st);
            failed =
                rc != MPMD_OK && (strstr(mpmd_step_error(st), "999") || strstr(mpmd_step_error(st), "4242"));
            CHECK(failed, "process %d: the bad step ran (%d): %s", world, (int)rc, mpmd_step_error(st));
            continue;
        }
        mpmd_step_set_input(st, gm.tokens, tok, sizeof tok);
        mpmd_step_set_input(st, gm.targets, tgt, sizeof tgt);
        run_or_abort(st);
        mpmd_exec_set_input(ex, gm.tokens, tok, sizeof tok);
        mpmd_exec_set_input(ex, gm.targets, tgt, sizeof tgt);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "loop: %s", mpmd_exec_error(ex));
    }
    float la, lb;
    mpmd_exec_read(ex, gm.loss, &la, sizeof la);
    mpmd_step_gather(st, gm.loss, &lb, sizeof lb);
    char ha[65], hb[65];
    mpmd_exec_params_sha256(ex, ha);
    mpmd_step_params_sha256(st, hb);
    CHECK(la == lb && !strcmp(ha, hb),
          "process %d: after the failed step: loss %.9g vs the loop's %.9g, params %s", world, lb, la,
          strcmp(ha, hb) ? "differ" : "equal");
    if (world == 0 && !tu_failures)
        printf("both ranks failed in a step (receives cancelled); the next steps equal the loop's bits\n");
    mpmd_step_free(st);
    mpmd_exec_free(ex);
    gpt_model_free(&gm);
}

/* FSDP over 2 replicas x 2 model ranks: w1 whole (sharded), w2 split over
 * the model axis (and sharded); a checkpoint, a second step, then w1 alone
 * loaded back: w2 must keep the second step's values on every process. */
static void partial_load(void) {
    enum { ROWS = 4, W = 4, MB = 2 };
    mpmd_graph *g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 2);
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS * MB, W));
    mpmd_value w1 = mpmd_param(g, "w1", MPMD_SHAPE(W, W), MPMD_NORMAL(0.7f));
    mpmd_value w2 = mpmd_param_split(g, "w2", MPMD_SHAPE(W, 2 * W), MPMD_NORMAL(0.7f), 1, 1);
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_tanh(g, mpmd_matmul(g, mpmd_microbatch(g, x), w1, 0));
    h = mpmd_all_reduce(g, mpmd_tanh(g, mpmd_matmul(g, mpmd_pvary(g, h, "model"), w2, 0)), "model");
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, h, h), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value ws[2] = {w1, w2}, gs[2];
    mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, 2, ws, gs, NULL);
    mpmd_adamw(g, 2, ws, gs, mpmd_scalar(g, 0.1f), MPMD_ADAM_DEFAULTS);
    mpmd_keep(g, total);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.runtime = MPMD_RUNTIME_MPI, o.data_parallel = 2, o.fsdp = 1, o.threads_per_rank = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(st != NULL, "partial load: %s", err.msg);
    if (!st) {
        mpmd_graph_free(g);
        return;
    }
    float xd[2 * ROWS * MB * W], before[2 * W * W], after[2 * W * W];
    tu_fill(xd, 2 * ROWS * MB * W, 3);
    char path[] = "/tmp/mpmd_partial_load.safetensors";
    CHECK(mpmd_step_set_input(st, x, xd, sizeof xd) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
              mpmd_step_save(st, path, NULL, &err) == MPMD_OK,
          "partial load: %s %s", mpmd_step_error(st), err.msg);
    run_or_abort(st);
    mpmd_step_gather(st, w2, before, sizeof before);
    mpmd_param_load_opts lo = {"w1", NULL, NULL};
    mpmd_param_load_report rep;
    CHECK(mpmd_step_load_params(st, path, &lo, &rep, &err) == MPMD_OK && rep.loaded == 1, "load: %s",
          err.msg);
    mpmd_step_gather(st, w2, after, sizeof after);
    CHECK(!memcmp(before, after, sizeof before), "loading w1 alone changed w2 (%g -> %g)", before[0],
          after[0]);
    if (world == 0) {
        printf("partial load, fsdp 2 x model ranks 2: the parameters not loaded keep their values\n");
        remove(path);
    }
    mpmd_step_free(st);
    mpmd_graph_free(g);
}

int main(int argc, char **argv) {
    mpmd_error err;
    if (mpmd_mpi_init(&argc, &argv, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    world = mpmd_mpi_world_rank();
    nproc = mpmd_mpi_world_size();
    if (argc > 3 && !strcmp(argv[2], "--step-timeout")) step_timeout = atof(argv[3]);
    if (argc > 1 && !strcmp(argv[1], "--forever")) train(0);
    if (argc > 1 && !strcmp(argv[1], "--fail")) train(1);
    if (argc > 1 && !strcmp(argv[1], "--fail-both")) {
        fail_both();
        int rc = tu_report("mpi_check --fail-both");
        mpmd_mpi_finalize();
        return rc;
    }
    if (argc > 1 && !strcmp(argv[1], "--partial-load"))
        partial_load();
    else if (argc > 2 && !strcmp(argv[1], "--data"))
        data_parallel(atoi(argv[2]));
    else
        equivalence();
    int rc = tu_failures ? 1 : 0;
    if (world == 0) rc = tu_report("mpi_check");
    mpmd_mpi_finalize();
    return rc;
}
