/* Parameters alone, by name (mpmd_step_load_params, mpmd_step_copy_params):
 *
 * - a training checkpoint (AdamW state included) into an eval graph of the
 *   same model without an optimizer: every parameter loaded, the optimizer
 *   state reported unexpected, the parameters equal to the trained ones;
 * - into a step with SGD instead of AdamW;
 * - from a step of this process, without a file;
 * - part of a model (`only`), and under other names (`from`/`to`);
 * - a parameter of another shape: an error, and nothing changes. */
#include "gpt_model.h"
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static mpmd_step *loop_step(mpmd_graph *g) {
    mpmd_error err;
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.seed = 17; /* the loading steps start from other values than the trained ones */
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    return st;
}

/* d0 and d1 dense layers under `scope` (NULL: none), MSE, and AdamW or SGD. */
static mpmd_graph *mlp(const char *scope, int adam, int width, mpmd_value *x, mpmd_value *y) {
    mpmd_graph *g = mpmd_graph_new();
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    *y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(4, 1));
    mpmd_loop_begin(g, 2);
    if (scope) mpmd_scope_push(g, scope);
    mpmd_value h = mpmd_dense(g, "d0", mpmd_microbatch(g, *x), width, 1);
    h = mpmd_dense(g, "d1", mpmd_tanh(g, h), 1, 1);
    if (scope) mpmd_scope_pop(g);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, mpmd_sub(g, h, mpmd_microbatch(g, *y))), 0, NULL, 0);
    mpmd_value ps[8], gs[8];
    int np = mpmd_graph_params(g, ps, 8);
    mpmd_grad(g, loss, np, ps, gs);
    for (int i = 0; i < np; i++)
        gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    if (adam)
        mpmd_adamw(g, np, ps, gs, mpmd_scalar(g, 1e-2f), MPMD_ADAM_DEFAULTS);
    else
        mpmd_sgd(g, np, ps, gs, mpmd_scalar(g, 1e-2f));
    return g;
}

static void train(mpmd_step *st, mpmd_value x, mpmd_value y) {
    float xs[24], ys[4];
    tu_fill(xs, 24, 3), tu_fill(ys, 4, 4);
    for (int k = 0; k < 2; k++)
        CHECK(mpmd_step_set_input(st, x, xs, sizeof xs) == MPMD_OK &&
                  mpmd_step_set_input(st, y, ys, sizeof ys) == MPMD_OK && mpmd_step_run(st) == MPMD_OK,
              "%s", mpmd_step_error(st));
}

static int same_params(mpmd_step *a, mpmd_step *b) {
    char ha[65], hb[65];
    mpmd_step_params_sha256(a, ha);
    mpmd_step_params_sha256(b, hb);
    return !strcmp(ha, hb);
}

int main(void) {
    char path[128];
    snprintf(path, sizeof path, "test_load_params_%d.safetensors", (int)getpid());
    mpmd_error err;

    /* a trained GPT's checkpoint into its eval graph (no optimizer) */
    gpt_config c = gpt_config_default();
    c.vocab = 32, c.seq = 8, c.width = 16, c.heads = 2, c.layers = 2, c.batch = 4, c.microbatches = 2;
    gpt_model train_m, eval_m;
    CHECK(gpt_build(&c, 1, &train_m, &err) == MPMD_OK && gpt_build(&c, 0, &eval_m, &err) == MPMD_OK, "%s",
          err.msg);
    mpmd_step *tr = loop_step(train_m.g), *ev = loop_step(eval_m.g);
    int32_t tok[32], tgt[32];
    gpt_random_batch(32, 4, 8, 1, 1, tok, tgt);
    mpmd_step_set_input(tr, train_m.tokens, tok, sizeof tok),
        mpmd_step_set_input(tr, train_m.targets, tgt, sizeof tgt);
    CHECK(mpmd_step_run(tr) == MPMD_OK && mpmd_step_run(tr) == MPMD_OK, "%s", mpmd_step_error(tr));
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    CHECK(mpmd_step_save(tr, path, &info, &err) == MPMD_OK, "%s", err.msg);
    CHECK(!same_params(tr, ev), "the eval step starts from other parameters");
    mpmd_checkpoint_info got;
    CHECK(mpmd_step_load(ev, path, &got, &err) == MPMD_ERR_SHAPE && strstr(err.msg, "unexpected"),
          "the strict load refuses the optimizer state: %s", err.msg);
    mpmd_param_load_report r;
    CHECK(mpmd_step_load_params(ev, path, NULL, &r, &err) == MPMD_OK, "%s", err.msg);
    int np = train_m.n_params;
    CHECK(r.loaded == np && r.missing == 0 && r.unexpected == 2 * np + 1,
          "gpt into eval: loaded %d (want %d), missing %d, unexpected %d (want %d)", r.loaded, np, r.missing,
          r.unexpected, 2 * np + 1);
    CHECK(same_params(tr, ev), "the eval step holds the trained parameters");

    /* without a file: a fresh eval step shares the training step's parameters */
    mpmd_step *ev2 = loop_step(eval_m.g);
    CHECK(mpmd_step_copy_params(ev2, tr, NULL, &r, &err) == MPMD_OK && r.loaded == np && r.unexpected == 0 &&
              same_params(tr, ev2),
          "copy: %s (loaded %d)", err.msg, r.loaded);
    mpmd_step_free(ev2);
    mpmd_step_free(tr), mpmd_step_free(ev);
    gpt_model_free(&train_m), gpt_model_free(&eval_m);

    /* AdamW's checkpoint into an SGD step */
    mpmd_value x, y, x2, y2;
    mpmd_graph *ga = mlp(NULL, 1, 5, &x, &y), *gs = mlp(NULL, 0, 5, &x2, &y2);
    mpmd_step *sa = loop_step(ga), *ss = loop_step(gs);
    train(sa, x, y);
    CHECK(mpmd_step_save(sa, path, &info, &err) == MPMD_OK, "%s", err.msg);
    CHECK(mpmd_step_load_params(ss, path, NULL, &r, &err) == MPMD_OK && r.loaded == 4 && r.missing == 0 &&
              r.unexpected == 9 && same_params(sa, ss),
          "adamw into sgd: %s; loaded %d, missing %d, unexpected %d", err.msg, r.loaded, r.missing,
          r.unexpected);
    train(ss, x2, y2); /* and it trains on */

    /* part of it: d1 only */
    mpmd_step *part = loop_step(gs);
    mpmd_param_load_opts only = {"d1/", NULL, NULL};
    CHECK(mpmd_step_load_params(part, path, &only, &r, &err) == MPMD_OK && r.loaded == 2 && r.missing == 0 &&
              r.unexpected == 11,
          "only d1/: loaded %d, unexpected %d", r.loaded, r.unexpected);
    float k0[6 * 5], want[6 * 5];
    mpmd_step_read(part, mpmd_lookup(gs, "d0/kernel"), k0, sizeof k0);
    mpmd_step_read(sa, mpmd_lookup(ga, "d0/kernel"), want, sizeof want);
    CHECK(memcmp(k0, want, sizeof k0) != 0, "only d1/: d0 must stay as it was");
    mpmd_step_free(part);

    /* under other names: the step's enc/d0/... from the file's d0/... */
    mpmd_value x3, y3;
    mpmd_graph *gn = mlp("enc", 0, 5, &x3, &y3);
    mpmd_step *sn = loop_step(gn);
    mpmd_param_load_opts map = {NULL, "", "enc/"};
    CHECK(mpmd_step_load_params(sn, path, &map, &r, &err) == MPMD_OK && r.loaded == 4 && same_params(sa, sn),
          "renamed: %s; loaded %d", err.msg, r.loaded);
    CHECK(mpmd_step_load_params(sn, path, NULL, &r, &err) == MPMD_OK && r.loaded == 0 && r.missing == 4,
          "without the map nothing matches: loaded %d, missing %d", r.loaded, r.missing);
    mpmd_step_free(sn);
    mpmd_graph_free(gn);

    /* another shape: an error, nothing changed */
    mpmd_value x4, y4;
    mpmd_graph *gw = mlp(NULL, 0, 7, &x4, &y4);
    mpmd_step *sw = loop_step(gw);
    char before[65], after[65];
    mpmd_step_params_sha256(sw, before);
    CHECK(mpmd_step_load_params(sw, path, NULL, &r, &err) == MPMD_ERR_SHAPE && strstr(err.msg, "d0/") &&
              strstr(err.msg, "F32[5]") && strstr(err.msg, "F32[7]"),
          "another shape: %s", err.msg);
    mpmd_step_params_sha256(sw, after);
    CHECK(!strcmp(before, after), "a refused load changed the parameters");
    mpmd_step_free(sw);
    mpmd_graph_free(gw);

    mpmd_step_free(sa), mpmd_step_free(ss);
    mpmd_graph_free(ga), mpmd_graph_free(gs);
    remove(path);
    return tu_report("test_load_params");
}
