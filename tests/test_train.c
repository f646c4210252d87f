/* Training end to end: an MLP with SGD, the JaxPP tutorial's Block model
 * with Adam and an MSE loss, and a small GPT with AdamW and tied embeddings
 * all learn; the microbatch loop matches one big batch; runs are bitwise
 * reproducible, also across thread counts; the optimizers match a hand
 * computation of optax's formulas; bad optimizer and model input is
 * reported. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "gpt_model.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* ---- an MLP regression with SGD ------------------------------------------- */

/* y = sin(x . a) + 0.5 cos(x . b): smooth, so a small MLP fits it. */
static void mlp_data(float *x, float *y, int64_t rows, int64_t in, uint64_t seed) {
    tu_fill(x, rows * in, seed);
    for (int64_t r = 0; r < rows; r++) {
        float s = 0, t = 0;
        for (int64_t j = 0; j < in; j++) {
            s += x[r * in + j] * (float)(j % 3 - 1);
            t += x[r * in + j] * (j % 2 ? 0.5f : -0.25f);
        }
        y[r] = sinf(s) + 0.5f * cosf(t);
    }
}

static void test_mlp_sgd(void) {
    const int64_t rows = 64, in = 8;
    const int steps = tu_quick() ? 15 : 40;
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(rows, in));
    mpmd_value y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(rows, 1));
    mpmd_loop_begin(g, 4);
    mpmd_value h = mpmd_relu(g, mpmd_dense(g, "dense_0", mpmd_microbatch(g, x), 32, 1));
    h = mpmd_enter_stage(g, h);
    mpmd_value pred = mpmd_dense(g, "dense_1", h, 1, 1);
    mpmd_value d = mpmd_sub(g, pred, mpmd_microbatch(g, y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), 0, NULL, 0), 0.25f);
    loss = mpmd_enter_stage(g, loss);
    mpmd_value params[4], grads[4];
    int np = mpmd_graph_params(g, params, 4);
    CHECK(np == 4, "MLP has %d parameters", np);
    mpmd_grad(g, loss, np, params, grads);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    CHECK(mpmd_sgd(g, np, params, grads, mpmd_scalar(g, 0.1f)) == MPMD_OK, "%s", mpmd_graph_error(g));
    mpmd_keep(g, total);
    CHECK(mpmd_is_value(mpmd_lookup(g, "dense_0/kernel")) && mpmd_is_value(mpmd_lookup(g, "dense_1/bias")),
          "flax-style names");
    mpmd_exec *ex = tu_exec(g, 2);
    float xs[64 * 8], ys[64];
    mlp_data(xs, ys, rows, in, 7);
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        mpmd_exec_set_input(ex, x, xs, sizeof xs);
        mpmd_exec_set_input(ex, y, ys, sizeof ys);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        mpmd_exec_read(ex, total, &last, sizeof last);
        if (s == 0) first = last;
    }
    CHECK(isfinite(last) && last < 0.5f * first, "MLP loss %g -> %g after %d SGD steps", first, last, steps);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* ---- the tutorial Block with MSE and Adam ----------------------------------- */

/* Targets: per position, the standardised sum of the token and the mean of
 * the tokens before it, which needs attention (the prefix mean) and the
 * post-LN output scale. */
static void block_data(float *x, float *y, int64_t b, int64_t t, int64_t c, uint64_t seed) {
    tu_fill(x, b * t * c, seed);
    for (int64_t i = 0; i < b; i++) {
        for (int64_t p = 0; p < t; p++) {
            float *yr = y + (i * t + p) * c, mean = 0, var = 0;
            for (int64_t k = 0; k < c; k++) {
                float pre = 0;
                for (int64_t q = 0; q <= p; q++)
                    pre += x[(i * t + q) * c + k];
                yr[k] = x[(i * t + p) * c + k] + pre / (float)(p + 1);
                mean += yr[k];
            }
            mean /= (float)c;
            for (int64_t k = 0; k < c; k++)
                var += (yr[k] - mean) * (yr[k] - mean);
            float inv = 1.0f / sqrtf(var / (float)c + 1e-5f);
            for (int64_t k = 0; k < c; k++)
                yr[k] = (yr[k] - mean) * inv;
        }
    }
}

static void test_block_adam(void) {
    const int64_t B = 8, T = 6, C = 16;
    const int steps = tu_quick() ? 15 : 30;
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_value y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_microbatch(g, x);
    h = mpmd_enter_stage(g, mpmd_transformer_block(g, "block_0", h, 2, 1));
    h = mpmd_transformer_block(g, "block_1", h, 2, 1);
    mpmd_value d = mpmd_sub(g, h, mpmd_microbatch(g, y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), 0, NULL, 0), 0.5f);
    loss = mpmd_enter_stage(g, loss);
    int np = mpmd_graph_params(g, NULL, 0);
    CHECK(np == 2 * 12, "two Blocks have %d parameters, expected 24", np);
    mpmd_value params[32], grads[32];
    mpmd_graph_params(g, params, 32);
    mpmd_grad(g, loss, np, params, grads);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 1e-2f), MPMD_ADAM_DEFAULTS);
    mpmd_keep(g, total);
    const char *names[] = {"block_0/attn/qkv/kernel",    "block_0/attn/out/bias",    "block_0/ln_0/scale",
                           "block_1/mlp/dense_0/kernel", "block_1/mlp/dense_1/bias", "block_1/ln_1/bias"};
    for (int i = 0; i < 6; i++)
        CHECK(mpmd_is_value(mpmd_lookup(g, names[i])), "no parameter %s", names[i]);
    mpmd_type kt = mpmd_value_type(g, mpmd_lookup(g, "block_1/mlp/dense_0/kernel"));
    CHECK(kt.ndim == 2 && kt.dim[0] == C && kt.dim[1] == 4 * C, "the Block's MLP widens 4x");
    mpmd_exec *ex = tu_exec(g, 2);
    float *xs = malloc(sizeof(float) * B * T * C), *ys = malloc(sizeof(float) * B * T * C);
    block_data(xs, ys, B, T, C, 3);
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        mpmd_exec_set_input(ex, x, xs, sizeof(float) * B * T * C);
        mpmd_exec_set_input(ex, y, ys, sizeof(float) * B * T * C);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        mpmd_exec_read(ex, total, &last, sizeof last);
        if (s == 0) first = last;
    }
    CHECK(isfinite(last) && last < 0.6f * first, "Block loss %g -> %g after %d Adam steps", first, last,
          steps);
    free(xs);
    free(ys);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* ---- the GPT ----------------------------------------------------------------- */

static gpt_config small_gpt(void) {
    gpt_config c = gpt_config_default();
    c.seq = tu_quick() ? 8 : 16;
    c.width = 32;
    c.heads = 2;
    c.layers = 2;
    c.batch = 8;
    c.microbatches = 4;
    c.stages = 2;
    c.tie_embeddings = 1;
    c.lr = 1e-2f;
    c.adam.weight_decay = 0.01f;
    return c;
}

/* Train `steps` steps; the losses go to losses[] (may be NULL), the hash of
 * the parameters to hex. Returns 0 when building or running failed. */
static int train_gpt(const gpt_config *c, int threads, int steps, const gpt_corpus *corpus, float *losses,
                     char hex[65]) {
    gpt_model m;
    mpmd_error err;
    if (gpt_build(c, 1, &m, &err)) {
        CHECK(0, "gpt_build: %s", err.msg);
        return 0;
    }
    mpmd_exec *ex = tu_exec(m.g, threads);
    size_t nb = (size_t)(c->batch * c->seq);
    int32_t *tok = malloc(nb * 4), *tgt = malloc(nb * 4);
    int ok = 1;
    for (int s = 0; s < steps && ok; s++) {
        gpt_sample_batch(corpus, c->batch, c->seq, 5, (uint64_t)s, tok, tgt);
        mpmd_exec_set_input(ex, m.tokens, tok, nb * 4);
        mpmd_exec_set_input(ex, m.targets, tgt, nb * 4);
        ok = mpmd_exec_run(ex) == MPMD_OK;
        CHECK(ok, "step %d: %s", s, mpmd_exec_error(ex));
        float l = NAN;
        mpmd_exec_read(ex, m.loss, &l, sizeof l);
        if (losses) losses[s] = l;
    }
    if (ok) {
        /* The AdamW state is named after the parameters and counts the steps. */
        mpmd_value mu = mpmd_lookup(m.g, "optim/mu/wte/embedding");
        mpmd_value nu = mpmd_lookup(m.g, "optim/nu/block_1/mlp/dense_1/kernel");
        mpmd_value st = mpmd_lookup(m.g, "optim/step");
        CHECK(mpmd_is_value(mu) && mpmd_is_value(nu) && mpmd_is_value(st), "AdamW state variables by name");
        CHECK(!mpmd_is_value(mpmd_lookup(m.g, "lm_head/kernel")), "tied embeddings have no lm_head");
        int32_t t = -1;
        if (mpmd_is_value(st)) mpmd_exec_read(ex, st, &t, sizeof t);
        CHECK(t == steps, "optim/step is %d after %d steps", (int)t, steps);
        mpmd_exec_params_sha256(ex, hex);
    }
    free(tok);
    free(tgt);
    mpmd_exec_free(ex);
    gpt_model_free(&m);
    return ok;
}

static void test_gpt_trains_and_reproduces(const gpt_corpus *corpus) {
    gpt_config c = small_gpt();
    const int steps = tu_quick() ? 8 : 15;
    float l1[32], l2[32], l3[32];
    char h1[65] = "", h2[65] = "", h3[65] = "";
    if (!train_gpt(&c, 2, steps, corpus, l1, h1)) return;
    CHECK(fabsf(l1[0] - logf(256.0f)) < 0.3f, "first loss %g is near ln(256) = %g", l1[0], log(256.0));
    float head = (l1[0] + l1[1]) / 2, tail = (l1[steps - 2] + l1[steps - 1]) / 2;
    CHECK(tail < head - 0.5f, "GPT loss %g -> %g after %d AdamW steps", head, tail, steps);
    /* two runs: the same bits */
    train_gpt(&c, 2, steps, corpus, l2, h2);
    CHECK(memcmp(l1, l2, sizeof(float) * (size_t)steps) == 0 && strcmp(h1, h2) == 0,
          "two runs differ: loss %.9g vs %.9g, params %s vs %s", l1[steps - 1], l2[steps - 1], h1, h2);
    /* one thread: the same bits as two */
    train_gpt(&c, 1, steps, corpus, l3, h3);
    CHECK(memcmp(l1, l3, sizeof(float) * (size_t)steps) == 0 && strcmp(h1, h3) == 0,
          "1 vs 2 threads differ: loss %.9g vs %.9g, params %s vs %s", l3[steps - 1], l1[steps - 1], h3, h1);
}

/* The built step: the parameters the formula counts, one forward marker per
 * stage (the last one on the loss) and its backward twin, the optimizer
 * after the loop. */
static void test_gpt_structure(void) {
    gpt_config c = small_gpt();
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        CHECK(0, "gpt_build: %s", err.msg);
        return;
    }
    int64_t n = 0;
    for (int i = 0; i < m.n_params; i++) {
        mpmd_type t = mpmd_value_type(m.g, m.params[i]);
        n += mpmd_type_numel(&t);
    }
    CHECK(n == gpt_param_count(&c), "the graph has %lld parameters, gpt_param_count says %lld", (long long)n,
          (long long)gpt_param_count(&c));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mpmd_graph_print(m.g, f);
    fclose(f);
    int fwd[3] = {0, 0, 0}, bwd[3] = {0, 0, 0}, adam = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = strstr(line, "= enter_stage ");
        int st;
        if (p && (p = strstr(p, "stage=")) && sscanf(p, "stage=%d", &st) == 1 && st >= 0 && st < 3)
            (strstr(p, "backward") ? bwd : fwd)[st]++;
        adam += strstr(line, "= adamw ") != NULL;
    }
    free(buf);
    CHECK(fwd[0] == 1 && fwd[1] == 1 && fwd[2] == 0, "forward markers per stage: %d %d %d", fwd[0], fwd[1],
          fwd[2]);
    CHECK(bwd[0] == 1 && bwd[1] == 1 && bwd[2] == 0, "backward markers per stage: %d %d %d", bwd[0], bwd[1],
          bwd[2]);
    CHECK(adam == m.n_params, "%d adamw updates for %d parameters", adam, m.n_params);
    gpt_model_free(&m);
}

/* The loop over n microbatches computes the loss and gradients of the whole
 * batch: compare n = 4 with n = 1 (no optimizer; same initial parameters). */
static void test_microbatch_equivalence(const gpt_corpus *corpus) {
    gpt_config c4 = small_gpt(), c1 = small_gpt();
    c4.tie_embeddings = c1.tie_embeddings = 0; /* also check an untied head */
    c1.microbatches = 1;
    gpt_model m4, m1;
    mpmd_error err;
    if (gpt_build(&c4, 0, &m4, &err) || gpt_build(&c1, 0, &m1, &err)) {
        CHECK(0, "gpt_build: %s", err.msg);
        return;
    }
    CHECK(m4.n_params == m1.n_params, "same parameters");
    mpmd_exec *e4 = tu_exec(m4.g, 2), *e1 = tu_exec(m1.g, 1);
    size_t nb = (size_t)(c1.batch * c1.seq);
    int32_t *tok = malloc(nb * 4), *tgt = malloc(nb * 4);
    gpt_sample_batch(corpus, c1.batch, c1.seq, 9, 0, tok, tgt);
    mpmd_exec *es[2] = {e4, e1};
    gpt_model *ms[2] = {&m4, &m1};
    float loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        mpmd_exec_set_input(es[k], ms[k]->tokens, tok, nb * 4);
        mpmd_exec_set_input(es[k], ms[k]->targets, tgt, nb * 4);
        CHECK(mpmd_exec_run(es[k]) == MPMD_OK, "%s", mpmd_exec_error(es[k]));
        mpmd_exec_read(es[k], ms[k]->loss, &loss[k], sizeof(float));
    }
    CHECK(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[1]), "loss with 4 microbatches %.9g, with 1 %.9g",
          loss[0], loss[1]);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < m1.n_params; i++) {
        const char *name = mpmd_value_name(m1.g, m1.params[i]);
        CHECK(strcmp(name, mpmd_value_name(m4.g, m4.params[i])) == 0, "parameter order %s", name);
        mpmd_type t = mpmd_value_type(m1.g, m1.params[i]);
        int64_t n = mpmd_type_numel(&t);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        CHECK(mpmd_exec_read(e4, m4.grads[i], a, (size_t)n * 4) == MPMD_OK, "%s", mpmd_exec_error(e4));
        CHECK(mpmd_exec_read(e1, m1.grads[i], b, (size_t)n * 4) == MPMD_OK, "%s", mpmd_exec_error(e1));
        double scale = 0, diff = 0;
        for (int64_t k = 0; k < n; k++) {
            scale = fmax(scale, fabs(b[k]));
            diff = fmax(diff, fabs((double)a[k] - b[k]));
        }
        double rel = diff / (scale > 0 ? scale : 1);
        if (rel > worst) {
            worst = rel;
            worst_name = name;
        }
        CHECK(scale > 0, "gradient of %s is zero", name);
        free(a);
        free(b);
    }
    CHECK(worst <= 1e-5, "gradients with 4 vs 1 microbatches differ by %g (relative to the largest) in %s",
          worst, worst_name);
    free(tok);
    free(tgt);
    mpmd_exec_free(e4);
    mpmd_exec_free(e1);
    gpt_model_free(&m4);
    gpt_model_free(&m1);
}

/* ---- the optimizers against optax's formulas -------------------------------- */

static void test_optimizer_math(void) {
    enum { N = 6 };
    const float p0[N] = {0.5f, -1.25f, 2.0f, 0.0f, -0.1f, 3.0f};
    const float gs[2][N] = {{0.1f, -0.2f, 0.0f, 1.5f, -3.0f, 0.25f}, {-0.3f, 0.4f, 0.05f, 1.0f, 2.0f, -0.5f}};
    const float lrs[2] = {0.01f, 0.005f};
    const mpmd_adam_opts o = {0.9f, 0.99f, 1e-3f, 0.1f, NULL};

    /* AdamW, the learning rate fed as an input (a schedule needs no rebuild) */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value p = mpmd_param(g, "w", MPMD_SHAPE(N), MPMD_ZEROS);
    mpmd_value gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(N));
    mpmd_value lr = mpmd_input(g, "lr", MPMD_F32, 0, NULL);
    CHECK(mpmd_adamw(g, 1, &p, &gr, lr, o) == MPMD_OK, "%s", mpmd_graph_error(g));
    mpmd_value mu = mpmd_lookup(g, "optim/mu/w"), nu = mpmd_lookup(g, "optim/nu/w"),
               st = mpmd_lookup(g, "optim/step");
    CHECK(mpmd_is_value(mu) && mpmd_is_value(nu) && mpmd_is_value(st), "AdamW state by name");
    mpmd_exec *ex = tu_exec(g, 1);
    memcpy(mpmd_exec_var_data(ex, p), p0, sizeof p0);
    double ep[N], em[N] = {0}, ev[N] = {0};
    for (int i = 0; i < N; i++)
        ep[i] = p0[i];
    for (int s = 0; s < 2; s++) {
        mpmd_exec_set_input(ex, gr, gs[s], sizeof gs[s]);
        mpmd_exec_set_input(ex, lr, &lrs[s], sizeof(float));
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        /* optax.adamw by hand, in double: count += 1; mu, nu; bias-corrected
         * update; decayed weights added; scaled by -lr. */
        int t = s + 1;
        for (int i = 0; i < N; i++) {
            em[i] = (1 - o.b1) * gs[s][i] + o.b1 * em[i];
            ev[i] = (1 - o.b2) * (double)gs[s][i] * gs[s][i] + o.b2 * ev[i];
            double mh = em[i] / (1 - pow(o.b1, t)), vh = ev[i] / (1 - pow(o.b2, t));
            double u = mh / (sqrt(vh) + o.eps) + o.weight_decay * ep[i];
            ep[i] = ep[i] - lrs[s] * u;
        }
        float rp[N], rm[N], rv[N];
        int32_t rt = 0;
        mpmd_exec_read(ex, p, rp, sizeof rp);
        mpmd_exec_read(ex, mu, rm, sizeof rm);
        mpmd_exec_read(ex, nu, rv, sizeof rv);
        mpmd_exec_read(ex, st, &rt, sizeof rt);
        CHECK(rt == t, "optim/step %d after step %d", (int)rt, t);
        for (int i = 0; i < N; i++) {
            CHECK(fabs(rp[i] - ep[i]) <= 1e-6 * fmax(1, fabs(ep[i])),
                  "adamw step %d p[%d] = %.9g, expected %.9g", t, i, rp[i], ep[i]);
            CHECK(fabs(rm[i] - em[i]) <= 1e-6 * fmax(1e-3, fabs(em[i])),
                  "step %d mu[%d] = %.9g, expected %.9g", t, i, rm[i], em[i]);
            CHECK(fabs(rv[i] - ev[i]) <= 1e-6 * fmax(1e-3, fabs(ev[i])),
                  "step %d nu[%d] = %.9g, expected %.9g", t, i, rv[i], ev[i]);
        }
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);

    /* A long tensor exercises the vector lanes, the scalar tail and the
     * split over threads: 1 and 2 threads give the same bits, and every
     * element matches the scalar formula of its own lane. */
    const int64_t n = 100003;
    float *pl[2], *gl = malloc((size_t)n * 4);
    tu_fill(gl, n, 11);
    for (int th = 0; th < 2; th++) {
        g = mpmd_graph_new();
        p = mpmd_param(g, "w", MPMD_SHAPE(n), MPMD_NORMAL(1.0f));
        gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(n));
        mpmd_adamw(g, 1, &p, &gr, mpmd_scalar(g, 0.01f), o);
        ex = tu_exec(g, th + 1);
        for (int s = 0; s < 2; s++) {
            mpmd_exec_set_input(ex, gr, gl, (size_t)n * 4);
            CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        }
        pl[th] = malloc((size_t)n * 4);
        mpmd_exec_read(ex, p, pl[th], (size_t)n * 4);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
    CHECK(memcmp(pl[0], pl[1], (size_t)n * 4) == 0, "AdamW with 1 and 2 threads differs");
    free(pl[0]);
    free(pl[1]);
    free(gl);

    /* SGD: p - lr g, exactly in f32 */
    g = mpmd_graph_new();
    p = mpmd_param(g, "w", MPMD_SHAPE(N), MPMD_ZEROS);
    gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(N));
    CHECK(mpmd_sgd(g, 1, &p, &gr, mpmd_scalar(g, 0.25f)) == MPMD_OK, "%s", mpmd_graph_error(g));
    ex = tu_exec(g, 1);
    memcpy(mpmd_exec_var_data(ex, p), p0, sizeof p0);
    float want[N];
    memcpy(want, p0, sizeof want);
    for (int s = 0; s < 2; s++) {
        mpmd_exec_set_input(ex, gr, gs[s], sizeof gs[s]);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
        for (int i = 0; i < N; i++)
            want[i] = want[i] - 0.25f * gs[s][i];
    }
    float got[N];
    mpmd_exec_read(ex, p, got, sizeof got);
    CHECK(memcmp(got, want, sizeof got) == 0, "sgd p[0] = %.9g, expected %.9g", got[0], want[0]);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* ---- bad input ---------------------------------------------------------------- */

static void test_errors(void) {
    /* the gradient does not fit the parameter */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value p = mpmd_param(g, "w", MPMD_SHAPE(3, 4), MPMD_ZEROS);
    mpmd_value gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(4, 3));
    CHECK(mpmd_adamw(g, 1, &p, &gr, mpmd_scalar(g, 0.1f), MPMD_ADAM_DEFAULTS) == MPMD_ERR_SHAPE, "status");
    CHECK(has(mpmd_graph_error(g), "mpmd_adamw") && has(mpmd_graph_error(g), "f32[3,4]") &&
              has(mpmd_graph_error(g), "f32[4,3]"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* a learning rate that is not a scalar; not a parameter; twice */
    g = mpmd_graph_new();
    p = mpmd_param(g, "w", MPMD_SHAPE(3), MPMD_ZEROS);
    gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(3));
    CHECK(mpmd_sgd(g, 1, &p, &gr, gr) == MPMD_ERR_SHAPE &&
              has(mpmd_graph_error(g), "learning rate is f32[3]"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(3));
    mpmd_sgd(g, 1, &gr, &gr, mpmd_scalar(g, 0.1f));
    CHECK(has(mpmd_graph_error(g), "not a parameter"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    p = mpmd_param(g, "w", MPMD_SHAPE(3), MPMD_ZEROS);
    gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(3));
    mpmd_adamw(g, 1, &p, &gr, mpmd_scalar(g, 0.1f), MPMD_ADAM_DEFAULTS);
    mpmd_adamw(g, 1, &p, &gr, mpmd_scalar(g, 0.1f), MPMD_ADAM_DEFAULTS);
    CHECK(has(mpmd_graph_error(g), "optim/step"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* an optimizer inside the loop body */
    g = mpmd_graph_new();
    p = mpmd_param(g, "w", MPMD_SHAPE(3), MPMD_ZEROS);
    gr = mpmd_input(g, "g", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_loop_begin(g, 4);
    mpmd_value gb = mpmd_reshape(g, mpmd_microbatch(g, gr), MPMD_SHAPE(3));
    mpmd_sgd(g, 1, &p, &gb, mpmd_scalar(g, 0.1f));
    CHECK(has(mpmd_graph_error(g), "after mpmd_loop_end"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* layers name their scope and shapes */
    g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 5, 6));
    TU_DROP(mpmd_self_attention(g, "attn", x, 4, 1));
    CHECK(has(mpmd_graph_error(g), "4 heads") && has(mpmd_graph_error(g), "f32[2,5,6]"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 6));
    TU_DROP(mpmd_gpt_block(g, "block_0", x, 2));
    CHECK(has(mpmd_graph_error(g), "[batch, seq, width]"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* the model's configuration */
    gpt_config c = gpt_config_default();
    mpmd_error err;
    c.heads = 3;
    CHECK(gpt_config_check(&c, &err) && has(err.msg, "3 heads do not divide the width 128"), "%s", err.msg);
    c = gpt_config_default();
    c.batch = 6;
    CHECK(gpt_config_check(&c, &err) && has(err.msg, "6 sequences is not divisible by 4 microbatches"), "%s",
          err.msg);
    c = gpt_config_default();
    c.stages = 3;
    CHECK(gpt_config_check(&c, &err) && has(err.msg, "4 layers cannot be split evenly into 3 stages"), "%s",
          err.msg);
    gpt_model m;
    CHECK(gpt_build(&c, 1, &m, &err) == MPMD_ERR_INVALID && m.g == NULL, "gpt_build refuses a bad config");
}

/* AdamW's decay mask (optax's mask): a parameter it leaves out updates as
 * with weight decay 0, bit for bit, and one it keeps as with the decay. */
static float after_adam(const float *w0, const float *grad, int n, float wd, const unsigned char *mask,
                        int which) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value ps[2] = {mpmd_param(g, "a", MPMD_SHAPE(n), MPMD_ZEROS),
                        mpmd_param(g, "b", MPMD_SHAPE(n), MPMD_ZEROS)};
    mpmd_value gs[2] = {mpmd_constant(g, MPMD_F32, MPMD_SHAPE(n), grad),
                        mpmd_constant(g, MPMD_F32, MPMD_SHAPE(n), grad)};
    mpmd_adamw(g, 2, ps, gs, mpmd_scalar(g, 0.1f), (mpmd_adam_opts){0.9f, 0.999f, 1e-8f, wd, mask});
    mpmd_exec *ex = tu_exec(g, 1);
    mpmd_exec_write(ex, ps[0], w0, sizeof(float) * (size_t)n);
    mpmd_exec_write(ex, ps[1], w0, sizeof(float) * (size_t)n);
    float out[4] = {0};
    CHECK(mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, ps[which], out, sizeof(float) * (size_t)n) == MPMD_OK,
          "adam with a decay mask: %s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return out[1];
}

static void test_decay_mask(void) {
    const float w0[4] = {0.5f, -2.0f, 1.0f, 3.0f}, gr[4] = {0.1f, 0.2f, -0.3f, 0.0f};
    const unsigned char only_a[2] = {1, 0};
    const float a_masked = after_adam(w0, gr, 4, 0.5f, only_a, 0),
                a_all = after_adam(w0, gr, 4, 0.5f, NULL, 0);
    const float b_masked = after_adam(w0, gr, 4, 0.5f, only_a, 1),
                b_none = after_adam(w0, gr, 4, 0.0f, NULL, 1);
    CHECK(a_masked == a_all, "the decayed parameter: %.9g, with decay on every one %.9g", a_masked, a_all);
    CHECK(b_masked == b_none && b_masked != after_adam(w0, gr, 4, 0.5f, NULL, 1),
          "the parameter the mask leaves out: %.9g, without decay %.9g", b_masked, b_none);
}

int main(void) {
    gpt_corpus corpus;
    mpmd_error err;
    if (gpt_corpus_generate(&corpus, 1 << 16, 1, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_optimizer_math();
    test_decay_mask();
    test_errors();
    test_mlp_sgd();
    test_block_adam();
    test_gpt_structure();
    test_microbatch_equivalence(&corpus);
    test_gpt_trains_and_reproduces(&corpus);
    gpt_corpus_free(&corpus);
    return tu_report("test_train");
}
