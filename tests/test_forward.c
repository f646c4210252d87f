/* Forward-only pipelines (inference, evaluation): a loop body without
 * gradients compiles to forward tasks only, on every schedule, and returns
 * exactly the one-rank loop's outputs: the predictions stacked over the
 * microbatches (a CONCAT loop result) and a summed loss (ADD), bit for
 * bit. Each rank runs one task per (stage, microbatch) it owns and no
 * other, and the schedule's name says it is forward only.
 *
 * And loopless graphs (JaxPP's mpmd_jit_by_yield): stage markers without
 * mpmd_loop_begin make the function a loop of one microbatch; pipelined on
 * GPipe over 4 ranks it gives the bits of its one-rank run and of the same
 * function written with an explicit loop of one, kept values (one kept
 * before the first marker, a gradient) read through their own handles. */
#include "testutil.h"

#include <stddef.h>
#include <string.h>

enum { STAGES = 4, MB = 8, ROWS = 2, W = 12 };

typedef struct fmodel {
    mpmd_graph *g;
    mpmd_value x, y, preds, loss;
} fmodel;

/* Four stages of h = tanh(h w_s + b_s); the predictions stacked, and the
 * squared error against y summed over the loop. No gradients, no optimizer. */
static fmodel build(void) {
    fmodel m;
    mpmd_graph *g = m.g = mpmd_graph_new();
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(MB * ROWS, W));
    m.y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(MB * ROWS, W));
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_microbatch(g, m.x);
    for (int s = 0; s < STAGES; s++) {
        char name[16];
        snprintf(name, sizeof name, "layer_%d", s);
        h = mpmd_enter_stage(g, mpmd_tanh(g, mpmd_dense(g, name, h, W, 1)));
    }
    mpmd_value d = mpmd_sub(g, h, mpmd_microbatch(g, m.y));
    m.preds = mpmd_loop_reduce(g, h, MPMD_REDUCE_CONCAT);
    m.loss = mpmd_loop_reduce(g, mpmd_sum(g, mpmd_mul(g, d, d), 0, NULL, 0), MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_keep(g, m.preds), mpmd_keep(g, m.loss);
    return m;
}

typedef struct outcome {
    float preds[MB * ROWS * W], loss;
    int tasks[8], ranks;
    char name[256];
} outcome;

static int run(const fmodel *m, const mpmd_schedule *s, outcome *o, const char *label) {
    mpmd_error err;
    mpmd_step *st = tu_step(m->g, s, 0, label);
    if (!st) return 0;
    mpmd_step_set_recording(st, 1);
    float x[MB * ROWS * W], y[MB * ROWS * W];
    tu_fill(x, MB * ROWS * W, 1);
    tu_fill(y, MB * ROWS * W, 2);
    int ok = mpmd_step_set_input(st, m->x, x, sizeof x) == MPMD_OK &&
             mpmd_step_set_input(st, m->y, y, sizeof y) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, m->preds, o->preds, sizeof o->preds) == MPMD_OK &&
             mpmd_step_read(st, m->loss, &o->loss, sizeof o->loss) == MPMD_OK;
    CHECK(ok, "%s: %s", label, mpmd_step_error(st));
    mpmd_step_stats stats;
    o->ranks = mpmd_step_num_ranks(st);
    if (ok && mpmd_step_summary(st, &stats, &err) == MPMD_OK) {
        for (int r = 0; r < o->ranks && r < 8; r++)
            o->tasks[r] = stats.ranks[r].tasks;
        mpmd_step_stats_free(&stats);
    }
    mpmd_step_free(st);
    return ok;
}

/* x -> 4 stages of tanh(dense) -> sum of squares; h0 (the first layer's
 * output) kept before the first marker, the loss and the gradient of the
 * first kernel kept. explicit: the same with mpmd_loop_begin(g, 1). */
typedef struct lmodel {
    mpmd_graph *g;
    mpmd_value x, h0, y, loss, grad;
} lmodel;

static lmodel build_loopless(int explicit_loop) {
    lmodel m;
    mpmd_graph *g = m.g = mpmd_graph_new();
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS, W));
    if (explicit_loop) mpmd_loop_begin(g, 1);
    mpmd_value h = mpmd_tanh(g, mpmd_dense(g, "layer_0", m.x, W, 1));
    m.h0 = h;
    if (!explicit_loop) mpmd_keep(g, h); /* kept before the first marker */
    for (int s = 0; s < STAGES; s++) {
        if (s) {
            char name[16];
            snprintf(name, sizeof name, "layer_%d", s);
            h = mpmd_tanh(g, mpmd_dense(g, name, h, W, 1));
        }
        h = mpmd_enter_stage(g, h);
    }
    m.y = h;
    m.loss = mpmd_sum(g, mpmd_mul(g, h, h), 0, NULL, 0);
    mpmd_value k0 = mpmd_lookup(g, "layer_0/kernel");
    mpmd_grad(g, m.loss, 1, &k0, &m.grad);
    if (explicit_loop) {
        m.h0 = mpmd_loop_reduce(g, m.h0, MPMD_REDUCE_ADD);
        m.y = mpmd_loop_reduce(g, m.y, MPMD_REDUCE_ADD);
        m.loss = mpmd_loop_reduce(g, m.loss, MPMD_REDUCE_ADD);
        m.grad = mpmd_loop_reduce(g, m.grad, MPMD_REDUCE_ADD);
        mpmd_loop_end(g);
        mpmd_keep(g, m.h0);
    }
    mpmd_keep(g, m.y), mpmd_keep(g, m.loss), mpmd_keep(g, m.grad);
    return m;
}

typedef struct lout {
    float h0[ROWS * W], y[ROWS * W], loss, grad[W * W];
    int tasks;
} lout;

static int run_loopless(const lmodel *m, const mpmd_schedule *s, lout *o, const char *label) {
    mpmd_error err;
    mpmd_step *st = tu_step(m->g, s, 0, label);
    if (!st) return 0;
    mpmd_step_set_recording(st, 1);
    float x[ROWS * W];
    tu_fill(x, ROWS * W, 4);
    int ok = mpmd_step_set_input(st, m->x, x, sizeof x) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, m->h0, o->h0, sizeof o->h0) == MPMD_OK &&
             mpmd_step_read(st, m->y, o->y, sizeof o->y) == MPMD_OK &&
             mpmd_step_read(st, m->loss, &o->loss, sizeof o->loss) == MPMD_OK &&
             mpmd_step_read(st, m->grad, o->grad, sizeof o->grad) == MPMD_OK;
    CHECK(ok, "%s: %s", label, mpmd_step_error(st));
    mpmd_step_stats stats;
    o->tasks = -1;
    if (ok && s && mpmd_step_summary(st, &stats, &err) == MPMD_OK) {
        o->tasks = stats.ranks[STAGES - 1].tasks;
        mpmd_step_stats_free(&stats);
    }
    mpmd_step_free(st);
    return ok;
}

static void test_loopless(void) {
    lmodel a = build_loopless(0), b = build_loopless(1);
    CHECK(mpmd_graph_status(a.g) == MPMD_OK && mpmd_graph_status(b.g) == MPMD_OK, "%s %s",
          mpmd_graph_error(a.g), mpmd_graph_error(b.g));
    CHECK(mpmd_graph_num_microbatches(a.g) == 1, "a loopless graph is a loop of %d",
          mpmd_graph_num_microbatches(a.g));
    lout one, piped, expl;
    mpmd_schedule *s;
    mpmd_error err;
    if (run_loopless(&a, NULL, &one, "loopless, one rank") &&
        run_loopless(&b, NULL, &expl, "explicit loop of one") &&
        mpmd_schedule_gpipe(STAGES, 1, &s, &err) == MPMD_OK) {
        if (run_loopless(&a, s, &piped, "loopless, gpipe")) {
            CHECK(memcmp(&one, &piped, offsetof(lout, tasks)) == 0,
                  "loopless: gpipe on 4 ranks differs from one rank");
            CHECK(piped.tasks == 2, "loopless: the last rank ran %d tasks, want its forward and its backward",
                  piped.tasks);
        }
        CHECK(memcmp(&one, &expl, offsetof(lout, tasks)) == 0,
              "loopless: differs from the same function with an explicit loop of one");
        mpmd_schedule_free(s);
    }
    mpmd_graph_free(a.g), mpmd_graph_free(b.g);
    /* a loop begun after the first marker */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 2));
    TU_DROP(mpmd_enter_stage(g, mpmd_tanh(g, x)));
    mpmd_loop_begin(g, 2);
    CHECK(strstr(mpmd_graph_error(g), "stage markers before it made the graph a loop of one"),
          "loop after a marker: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

int main(void) {
    test_loopless();
    fmodel m = build();
    CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
    outcome ref;
    if (run(&m, NULL, &ref, "loop")) {
        for (int k = 0; k < tu_num_every_schedule; k++) {
            const tu_named_schedule *ns = &tu_every_schedule[k];
            mpmd_schedule *s;
            mpmd_error err;
            if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(ns->name), ns->stages,
                                  ns->ranks, MB, ns->fuse, &s, &err)) {
                CHECK(0, "%s: %s", ns->name, err.msg);
                continue;
            }
            outcome o;
            memset(&o, 0, sizeof o);
            if (run(&m, s, &o, ns->name)) {
                CHECK(memcmp(o.preds, ref.preds, sizeof o.preds) == 0 && o.loss == ref.loss,
                      "%s: predictions or loss (%.9g vs %.9g) differ from the loop's", ns->name,
                      (double)o.loss, (double)ref.loss);
                /* the forward tasks only: stages per rank times microbatches */
                int per_rank = ns->stages / ns->ranks * MB, bad = 0;
                for (int r = 0; r < o.ranks; r++)
                    bad += o.tasks[r] != per_rank;
                CHECK(bad == 0, "%s: rank 0 ran %d tasks, want %d forward tasks per rank", ns->name,
                      o.tasks[0], per_rank);
            }
            mpmd_schedule_free(s);
        }
    }
    /* the plan says so: compile once more and look at the schedule's name */
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_std1f1b(STAGES, MB, &s, &err) == MPMD_OK) {
        char *text = NULL;
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
        CHECK(st != NULL, "%s", err.msg);
        if (st) {
            FILE *f = tmpfile();
            if (f) {
                mpmd_step_print(st, f);
                long n = ftell(f);
                rewind(f);
                text = calloc(1, (size_t)n + 1);
                if (text && fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = 0;
                fclose(f);
            }
            CHECK(text && strstr(text, "forward only") && strstr(text, "fwd_") && !strstr(text, "bwd_"),
                  "the plan of a forward-only step names no backward task and says \"forward only\"");
            free(text);
            mpmd_step_free(st);
        }
        mpmd_schedule_free(s);
    }
    mpmd_graph_free(m.g);
    return tu_report("test_forward");
}
