/* Tensor parallelism over the model axis, against its unsplit meaning:
 *
 * - each collective (all_reduce, all_gather, reduce_scatter, pvary) and its
 *   gradient: a graph split over 2 and 4 model ranks, whose values differ
 *   per rank through a parameter split over the axis, computes the loss
 *   and, after one SGD step of rate 1, the parameters that the same
 *   function written on whole tensors gives (float tolerance: the split
 *   sums run in another order), the same bits run to run and on a 2-stage
 *   pipeline;
 * - a split parameter is initialised, read, written and saved whole, and a
 *   checkpoint written by the split step loads into the unsplit one (and
 *   back) with the same bytes;
 * - the vocabulary-parallel embedding and cross-entropy against the whole
 *   ones (the loss and both gradients);
 * - bad input: a dimension the axis does not divide, an axis that does not
 *   exist or is not the graph's, a layer whose heads or width the axis does
 *   not divide, the axis set after building: each a message naming it;
 * - misuse of each model-axis call (the four collectives, the split
 *   embedding and cross-entropy): in a graph of one model rank, after the
 *   loop, before it (refused when the loop begins), in a graph that never
 *   gets a loop (refused when it compiles): each a message naming the call
 *   and what to do, never a crash at run time; and the legitimate use
 *   without an explicit loop (before the first stage marker, which makes
 *   the function a loop of one) runs, the same bits as an explicit loop.
 */
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { R = 4, C = 12, MB = 2 }; /* x [R, C] per microbatch; P whole [R, C] ... */

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

typedef struct net {
    mpmd_graph *g;
    mpmd_value x, p, q, loss;
} net;

/* loss = sum(a Ka) + sum(b Kb) + sum(all_gather(c) Kc) + sum(all_reduce(pvary(q) P) Kd) with, per model
 * rank m of M, xm = x P_m (P_m its columns of P [R, M W]):
 *   a = all_reduce(xm), b = all_gather(xm, 1), c = reduce_scatter(xm, 1);
 * and the same written on whole tensors (M = 1: P's column blocks). stages
 * 2 (split only): a marker after xm. */
static net build(int M, int W, int stages, int parts) {
    net n;
    mpmd_graph *g = n.g = mpmd_graph_new();
    if (M > 1) mpmd_set_tensor_parallel(g, M);
    /* parts: the column blocks of P (M when split; the unsplit twin of M
     * ranks has M blocks) */
    n.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(MB * R, W));
    n.p = M > 1 ? mpmd_param_split(g, "p", MPMD_SHAPE(R, parts * W), MPMD_NORMAL(1.0f), 1, 1)
                : mpmd_param(g, "p", MPMD_SHAPE(R, parts * W), MPMD_NORMAL(1.0f));
    n.q = mpmd_param(g, "q", MPMD_SHAPE(R, W), MPMD_NORMAL(1.0f));
    float ka[R * C], kb[R * 4 * C], kc[R * C], kd[R * C];
    tu_fill(ka, R * W, 11), tu_fill(kb, R * parts * W, 12), tu_fill(kc, R * W, 13), tu_fill(kd, R * W, 14);
    mpmd_value Ka = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(R, W), ka);
    mpmd_value Kb = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(R, parts * W), kb);
    mpmd_value Kc = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(R, W), kc);
    mpmd_value Kd = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(R, W), kd);
    mpmd_loop_begin(g, MB);
    mpmd_value x = mpmd_microbatch(g, n.x);
    mpmd_value loss;
    if (M > 1) {
        mpmd_value xm = mpmd_mul(g, x, n.p);
        if (stages == 2) xm = mpmd_enter_stage(g, xm);
        mpmd_value a = mpmd_all_reduce(g, xm, "model");
        mpmd_value b = mpmd_all_gather(g, xm, 1, "model");
        loss = mpmd_add(g, mpmd_sum(g, mpmd_mul(g, a, Ka), MPMD_ALL_AXES, MPMD_DROP_DIMS),
                        mpmd_sum(g, mpmd_mul(g, b, Kb), MPMD_ALL_AXES, MPMD_DROP_DIMS));
        mpmd_value c = mpmd_all_gather(g, mpmd_reduce_scatter(g, xm, 1, "model"), 1, "model");
        mpmd_value d = mpmd_all_reduce(g, mpmd_mul(g, mpmd_pvary(g, n.q, "model"), n.p), "model");
        loss = mpmd_add(g, loss, mpmd_sum(g, mpmd_mul(g, c, Kc), MPMD_ALL_AXES, MPMD_DROP_DIMS));
        loss = mpmd_add(g, loss, mpmd_sum(g, mpmd_mul(g, d, Kd), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    } else {
        mpmd_value blk[4], qb[4];
        for (int k = 0; k < parts; k++) {
            mpmd_value pk = mpmd_slice(g, n.p, 1, k * W, (k + 1) * W);
            blk[k] = mpmd_mul(g, x, pk);
            qb[k] = mpmd_mul(g, n.q, pk);
        }
        mpmd_value a = blk[0], d = qb[0];
        for (int k = 1; k < parts; k++)
            a = mpmd_add(g, a, blk[k]), d = mpmd_add(g, d, qb[k]);
        mpmd_value b = mpmd_concat(g, parts, blk, 1);
        loss = mpmd_add(g, mpmd_sum(g, mpmd_mul(g, a, Ka), MPMD_ALL_AXES, MPMD_DROP_DIMS),
                        mpmd_sum(g, mpmd_mul(g, b, Kb), MPMD_ALL_AXES, MPMD_DROP_DIMS));
        /* all_gather(reduce_scatter(xm)) is the sum a itself */
        loss = mpmd_add(g, loss, mpmd_sum(g, mpmd_mul(g, a, Kc), MPMD_ALL_AXES, MPMD_DROP_DIMS));
        loss = mpmd_add(g, loss, mpmd_sum(g, mpmd_mul(g, d, Kd), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    }
    if (stages == 2) loss = mpmd_enter_stage(g, loss);
    mpmd_value ws[2] = {n.p, n.q}, gs[2];
    n.loss = mpmd_value_and_grad(g, loss, 0, NULL, 2, ws, gs, NULL);
    mpmd_sgd(g, 2, ws, gs, mpmd_scalar(g, 1.0f));
    mpmd_keep(g, n.loss);
    return n;
}

typedef struct outcome {
    float loss, p[R * 4 * C], q[R * C];
    char sha[65];
} outcome;

static int run(const net *n, const mpmd_schedule *s, int W, int parts, outcome *o, const char *label) {
    mpmd_step *st = tu_step(n->g, s, 9, label);
    if (!st) return 0;
    float x[MB * R * C];
    tu_fill(x, MB * R * W, 5);
    int ok = mpmd_step_set_input(st, n->x, x, sizeof(float) * MB * R * W) == MPMD_OK &&
             mpmd_step_run(st) == MPMD_OK &&
             mpmd_step_read(st, n->loss, &o->loss, sizeof o->loss) == MPMD_OK &&
             mpmd_step_read(st, n->p, o->p, sizeof(float) * R * parts * W) == MPMD_OK &&
             mpmd_step_read(st, n->q, o->q, sizeof(float) * R * W) == MPMD_OK;
    CHECK(ok, "%s: %s", label, mpmd_step_error(st));
    mpmd_step_params_sha256(st, o->sha);
    mpmd_step_free(st);
    return ok;
}

static int close_to(const float *a, const float *b, int n, float tol) {
    for (int i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > tol * (1.0f + fabsf(b[i]))) return 0;
    return 1;
}

static void collectives(int M) {
    const int W = M == 2 ? 6 : 4, parts = M; /* W: a multiple of M (reduce_scatter) */
    char label[96];
    /* the unsplit twin has `parts` column blocks of width W */
    net whole = build(1, W, 1, parts);
    net split = build(M, W, 1, M);
    CHECK(mpmd_graph_status(whole.g) == MPMD_OK && mpmd_graph_status(split.g) == MPMD_OK, "M=%d: %s / %s", M,
          mpmd_graph_error(whole.g), mpmd_graph_error(split.g));
    outcome want, got, again;
    snprintf(label, sizeof label, "unsplit twin of %d ranks", M);
    int ok = run(&whole, NULL, W, parts, &want, label);
    snprintf(label, sizeof label, "split over %d model ranks", M);
    ok &= run(&split, NULL, W, parts, &got, label) && run(&split, NULL, W, parts, &again, label);
    if (ok) {
        CHECK(fabsf(got.loss - want.loss) <= 1e-5f * (1 + fabsf(want.loss)), "M=%d: loss %.9g, unsplit %.9g",
              M, got.loss, want.loss);
        CHECK(close_to(got.p, want.p, R * parts * W, 1e-5f),
              "M=%d: the split parameter after the step (its gradient through all_reduce, all_gather, "
              "reduce_scatter) is not the unsplit one's",
              M);
        CHECK(close_to(got.q, want.q, R * W, 1e-5f),
              "M=%d: q's gradient through pvary is not the unsplit one", M);
        CHECK(!strcmp(got.sha, again.sha) && got.loss == again.loss, "M=%d: two runs differ", M);
        /* the gradient changed the parameters: the test can fail */
        outcome fresh;
        mpmd_step *st = tu_step(split.g, NULL, 9, "fresh");
        if (st) {
            CHECK(mpmd_step_read(st, split.p, fresh.p, sizeof(float) * R * parts * W) == MPMD_OK &&
                      !close_to(fresh.p, got.p, R * parts * W, 1e-3f),
                  "M=%d: the step did not move p", M);
            mpmd_step_free(st);
        }
    }
    /* a 2-stage pipeline of the split graph: the split loop's bits */
    if (M == 2) {
        net piped = build(M, W, 2, M);
        mpmd_schedule *s = NULL;
        mpmd_error err;
        outcome pip, loop2;
        net flat = build(M, W, 0, M);
        if (mpmd_schedule_std1f1b(2, MB, &s, &err) == MPMD_OK &&
            run(&piped, s, W, parts, &pip, "std1f1b, split") &&
            run(&flat, NULL, W, parts, &loop2, "loop, split"))
            CHECK(fabsf(pip.loss - loop2.loss) <= 1e-5f * (1 + fabsf(loop2.loss)) &&
                      close_to(pip.p, loop2.p, R * parts * W, 1e-5f),
                  "std1f1b over split ranks: loss %.9g vs the loop's %.9g", pip.loss, loop2.loss);
        mpmd_schedule_free(s);
        mpmd_graph_free(piped.g), mpmd_graph_free(flat.g);
    }
    mpmd_graph_free(whole.g), mpmd_graph_free(split.g);
}

/* A checkpoint written split over 2 model ranks loads into the unsplit
 * graph with the same values, and saved again gives the same bytes. */
static void checkpoints(void) {
    const int M = 2, W = C / M;
    net split = build(M, W, 1, M), whole = build(1, W, 1, M);
    mpmd_step *a = tu_step(split.g, NULL, 9, "split"), *b = tu_step(whole.g, NULL, 3, "whole");
    char d[] = "/tmp/mpmd_tp_XXXXXX";
    CHECK(mkdtemp(d) != NULL, "mkdtemp");
    char p1[64], p2[64];
    snprintf(p1, sizeof p1, "%s/a.safetensors", d), snprintf(p2, sizeof p2, "%s/b.safetensors", d);
    mpmd_error err;
    float x[MB * R * C];
    tu_fill(x, MB * R * W, 5);
    if (a && b) {
        CHECK(mpmd_step_set_input(a, split.x, x, sizeof(float) * MB * R * W) == MPMD_OK &&
                  mpmd_step_run(a) == MPMD_OK,
              "run: %s", mpmd_step_error(a));
        CHECK(mpmd_step_save(a, p1, NULL, &err) == MPMD_OK, "save split: %s", err.msg);
        CHECK(mpmd_step_load(b, p1, NULL, &err) == MPMD_OK, "load into the unsplit step: %s", err.msg);
        CHECK(mpmd_step_save(b, p2, NULL, &err) == MPMD_OK, "save unsplit: %s", err.msg);
        FILE *f1 = fopen(p1, "rb"), *f2 = fopen(p2, "rb");
        int same = f1 && f2;
        while (same) {
            int c1 = fgetc(f1), c2 = fgetc(f2);
            if (c1 != c2) same = 0;
            if (c1 == EOF || c2 == EOF) break;
        }
        if (f1) fclose(f1);
        if (f2) fclose(f2);
        CHECK(same, "the split step's checkpoint, loaded unsplit and saved again, differs");
        float pa[R * 2 * C], pb[R * 2 * C];
        CHECK(mpmd_step_read(a, split.p, pa, sizeof(float) * R * 2 * W) == MPMD_OK &&
                  mpmd_step_read(b, whole.p, pb, sizeof(float) * R * 2 * W) == MPMD_OK &&
                  !memcmp(pa, pb, sizeof(float) * R * 2 * W),
              "p read whole: split and unsplit differ after the load");
        /* and back: written whole into the split step, read whole */
        tu_fill(pa, R * 2 * W, 99);
        CHECK(mpmd_step_write(a, split.p, pa, sizeof(float) * R * 2 * W) == MPMD_OK &&
                  mpmd_step_read(a, split.p, pb, sizeof(float) * R * 2 * W) == MPMD_OK &&
                  !memcmp(pa, pb, sizeof(float) * R * 2 * W),
              "a split parameter written whole does not read back whole");
        CHECK(mpmd_step_read(a, split.p, pb, sizeof(float) * R * W) == MPMD_ERR_SHAPE,
              "reading a split parameter with its part's size is an error");
        /* the graph says both sizes: the part this rank holds, the whole reads take */
        mpmd_type part = mpmd_value_type(split.g, split.p), all = mpmd_value_whole_type(split.g, split.p);
        mpmd_type q = mpmd_value_type(split.g, split.q), qw = mpmd_value_whole_type(split.g, split.q);
        CHECK(part.dim[0] == R && part.dim[1] == W && all.dim[0] == R && all.dim[1] == 2 * W &&
                  mpmd_type_bytes(&qw) == mpmd_type_bytes(&q) && qw.dim[1] == q.dim[1],
              "mpmd_value_whole_type: p [%lld, %lld] of [%lld, %lld]", (long long)part.dim[0],
              (long long)part.dim[1], (long long)all.dim[0], (long long)all.dim[1]);
    }
    unlink(p1), unlink(p2), rmdir(d);
    mpmd_step_free(a), mpmd_step_free(b);
    mpmd_graph_free(split.g), mpmd_graph_free(whole.g);
}

/* Vocabulary parallelism: an embedding table and an output matrix split
 * by vocabulary rows over M ranks, the cross-entropy over split logits,
 * against the whole ones: the loss, and both parameters after an SGD step
 * of rate 1 (their gradients). */
static mpmd_graph *vocab_net(int M, mpmd_value *x, mpmd_value *t, mpmd_value *e, mpmd_value *w,
                             mpmd_value *loss) {
    enum { V = 8, CW = 4, N = 6 };
    mpmd_graph *g = mpmd_graph_new();
    if (M > 1) mpmd_set_tensor_parallel(g, M);
    *x = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(MB * N));
    *t = mpmd_input(g, "targets", MPMD_I32, MPMD_SHAPE(MB * N));
    *e = M > 1 ? mpmd_param_split(g, "e", MPMD_SHAPE(V, CW), MPMD_NORMAL(1.0f), 0, 1)
               : mpmd_param(g, "e", MPMD_SHAPE(V, CW), MPMD_NORMAL(1.0f));
    *w = M > 1 ? mpmd_param_split(g, "w", MPMD_SHAPE(V, CW), MPMD_NORMAL(1.0f), 0, 1)
               : mpmd_param(g, "w", MPMD_SHAPE(V, CW), MPMD_NORMAL(1.0f));
    mpmd_loop_begin(g, MB);
    mpmd_value ids = mpmd_microbatch(g, *x), tg = mpmd_microbatch(g, *t), l;
    if (M > 1) {
        mpmd_value rows = mpmd_tanh(g, mpmd_embedding_split(g, *e, ids, "model"));
        mpmd_value logits = mpmd_matmul(g, mpmd_pvary(g, rows, "model"), *w, MPMD_TRANS_B);
        l = mpmd_mean(g, mpmd_cross_entropy_split(g, logits, tg, "model"), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    } else {
        mpmd_value rows = mpmd_tanh(g, mpmd_embedding(g, *e, ids));
        l = mpmd_mean(g, mpmd_cross_entropy(g, mpmd_matmul(g, rows, *w, MPMD_TRANS_B), tg), MPMD_ALL_AXES,
                      MPMD_DROP_DIMS);
    }
    mpmd_value ws[2] = {*e, *w}, gs[2];
    *loss = mpmd_value_and_grad(g, l, 0, NULL, 2, ws, gs, NULL);
    mpmd_sgd(g, 2, ws, gs, mpmd_scalar(g, 1.0f));
    mpmd_keep(g, *loss);
    return g;
}

static void vocabulary(int M) {
    enum { V = 8, CW = 4, N = 6 };
    int32_t ids[MB * N], tg[MB * N];
    for (int i = 0; i < MB * N; i++)
        ids[i] = (i * 5 + 1) % V, tg[i] = (i * 3 + 2) % V;
    float loss[2], e[2][V * CW], w[2][V * CW];
    for (int k = 0; k < 2; k++) {
        mpmd_value x, t, pe, pw, l;
        mpmd_graph *g = vocab_net(k ? M : 1, &x, &t, &pe, &pw, &l);
        CHECK(mpmd_graph_status(g) == MPMD_OK, "vocab M=%d: %s", M, mpmd_graph_error(g));
        mpmd_step *st = tu_step(g, NULL, 4, "vocabulary");
        if (st)
            CHECK(mpmd_step_set_input(st, x, ids, sizeof ids) == MPMD_OK &&
                      mpmd_step_set_input(st, t, tg, sizeof tg) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                      mpmd_step_read(st, l, &loss[k], sizeof loss[k]) == MPMD_OK &&
                      mpmd_step_read(st, pe, e[k], sizeof e[k]) == MPMD_OK &&
                      mpmd_step_read(st, pw, w[k], sizeof w[k]) == MPMD_OK,
                  "vocab M=%d: %s", M, mpmd_step_error(st));
        mpmd_step_free(st);
        mpmd_graph_free(g);
    }
    CHECK(fabsf(loss[1] - loss[0]) <= 1e-5f * fabsf(loss[0]), "vocab M=%d: loss %.9g, whole %.9g", M, loss[1],
          loss[0]);
    CHECK(close_to(e[1], e[0], V * CW, 1e-5f),
          "vocab M=%d: the split embedding's gradient is not the whole one's", M);
    CHECK(close_to(w[1], w[0], V * CW, 1e-5f),
          "vocab M=%d: the split logits' gradient is not the whole one's", M);
}

static void bad_input(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 4);
    mpmd_value p = mpmd_param_split(g, "w", MPMD_SHAPE(3, 6), MPMD_ZEROS, 1, 1);
    CHECK(!mpmd_is_value(p) &&
              has(mpmd_graph_error(g),
                  "\"w\": dimension 1 (6) is not divisible by the model axis (tensor_parallel 4)"),
          "split not divisible: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 2);
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_all_reduce(g, x, "expert")) &&
              has(mpmd_graph_error(g),
                  "no mesh axis \"expert\"; the axes are \"mpmd\", \"data\" and \"model\""),
          "unknown axis: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 2);
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_all_gather(g, x, 0, "data")) &&
              has(mpmd_graph_error(g), "the \"data\" axis is the step's"),
          "data axis: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 4);
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 6));
    CHECK(!mpmd_is_value(mpmd_reduce_scatter(g, x, 1, "model")) &&
              has(mpmd_graph_error(g),
                  "dimension 1 of f32[4,6] (6) is not divisible by the model axis (4 ranks)"),
          "reduce_scatter: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 4);
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 8, 24));
    CHECK(!mpmd_is_value(mpmd_gpt_block(g, "h0", x, 6)) &&
              has(mpmd_graph_error(g),
                  "\"h0/attn\": 6 heads are not divisible by the model axis (tensor_parallel 4)"),
          "heads: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 3);
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 8, 24));
    CHECK(!mpmd_is_value(mpmd_mlp(g, "mlp", x, 32, 24)) &&
              has(mpmd_graph_error(g),
                  "\"mlp\": 32 hidden features are not divisible by the model axis (tensor_parallel 3)"),
          "mlp: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2, 8));
    CHECK(mpmd_set_tensor_parallel(g, 2) != MPMD_OK &&
              has(mpmd_graph_error(g), "call it before building the graph"),
          "late: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

/* ---- misuse of the model axis' calls ---------------------------------- */

static const char *const axis_calls[6] = {"mpmd_all_reduce",      "mpmd_pvary",
                                          "mpmd_all_gather",      "mpmd_reduce_scatter",
                                          "mpmd_embedding_split", "mpmd_cross_entropy_split"};

/* Call k of axis_calls on operands of the right shapes: x f32 [n, 4] (also
 * the logits), table a split parameter [8, 4], ids i32 [n]. */
static mpmd_value axis_call(mpmd_graph *g, int k, mpmd_value x, mpmd_value table, mpmd_value ids) {
    switch (k) {
    case 0: return mpmd_all_reduce(g, x, "model");
    case 1: return mpmd_pvary(g, x, "model");
    case 2: return mpmd_all_gather(g, x, 1, "model");
    case 3: return mpmd_reduce_scatter(g, x, 1, "model");
    case 4: return mpmd_embedding_split(g, table, ids, "model");
    default: return mpmd_cross_entropy_split(g, x, ids, "model");
    }
}

enum { BEFORE_LOOP = 0, IN_BODY = 1, AFTER_LOOP = 2 };
static const char *const where_names[3] = {"before the loop", "in the body", "after the loop"};

/* A graph of M model ranks with a loop of 2 microbatches and call k made
 * `where`; *y gets what the call returned. The graph stops at the first
 * error (the message says where). */
static mpmd_graph *axis_graph(int M, int k, int where, mpmd_value *y) {
    mpmd_graph *g = mpmd_graph_new();
    if (M > 1) mpmd_set_tensor_parallel(g, M);
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(8, 4)),
               ids = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(8));
    mpmd_value table = mpmd_param_split(g, "table", MPMD_SHAPE(8, 4), MPMD_NORMAL(1.0f), 0, 1);
    *y = MPMD_NONE;
    if (where == BEFORE_LOOP) *y = axis_call(g, k, x, table, ids);
    mpmd_loop_begin(g, 2);
    mpmd_value xm = mpmd_microbatch(g, x), im = mpmd_microbatch(g, ids);
    if (where == IN_BODY) *y = axis_call(g, k, xm, table, im);
    mpmd_value xs = mpmd_loop_reduce(g, mpmd_tanh(g, xm), MPMD_REDUCE_CONCAT);
    mpmd_value is = mpmd_loop_reduce(g, im, MPMD_REDUCE_CONCAT);
    mpmd_loop_end(g);
    if (where == AFTER_LOOP) *y = axis_call(g, k, xs, table, is);
    return g;
}

static void misuse(void) {
    char want[512];
    for (int k = 0; k < 6; k++) {
        const char *fn = axis_calls[k];
        for (int where = 0; where < 3; where++) {
            /* one model rank: refused where it is made, wherever that is */
            mpmd_value y;
            mpmd_graph *g = axis_graph(1, k, where, &y);
            snprintf(want, sizeof want,
                     "%s: the model axis has 1 rank (call mpmd_set_tensor_parallel(g, M) with M >= 2 before "
                     "building the graph)",
                     fn);
            CHECK(!mpmd_is_value(y) && !strcmp(mpmd_graph_error(g), want), "%s %s, 1 model rank: %s", fn,
                  where_names[where], mpmd_graph_error(g));
            mpmd_graph_free(g);
            /* two: in the body it is built; after the loop refused at once;
             * before it refused when the loop begins (until then a stage
             * marker could still make it the body of a loop of one) */
            g = axis_graph(2, k, where, &y);
            if (where == IN_BODY) {
                CHECK(mpmd_is_value(y) && mpmd_graph_status(g) == MPMD_OK, "%s in the body: %s", fn,
                      mpmd_graph_error(g));
            } else if (where == AFTER_LOOP) {
                snprintf(want, sizeof want,
                         "%s: collectives over the model axis run inside the microbatch loop body; this one "
                         "is after the loop (build it between mpmd_loop_begin and mpmd_loop_end)",
                         fn);
                CHECK(!mpmd_is_value(y) && !strcmp(mpmd_graph_error(g), want), "%s after the loop: %s", fn,
                      mpmd_graph_error(g));
            } else {
                snprintf(
                    want, sizeof want,
                    "%s: collectives over the model axis run inside the microbatch loop body; this one (%%",
                    fn);
                CHECK(mpmd_is_value(y) && !strncmp(mpmd_graph_error(g), want, strlen(want)) &&
                          has(mpmd_graph_error(g), ") is before the loop (build it after mpmd_loop_begin)"),
                      "%s before the loop: %s", fn, mpmd_graph_error(g));
            }
            mpmd_graph_free(g);
        }
        /* a graph that never gets a loop: refused when it compiles, by the
         * step and by the executor */
        mpmd_graph *g = mpmd_graph_new();
        mpmd_set_tensor_parallel(g, 2);
        mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 4)),
                   ids = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(4));
        mpmd_value table = mpmd_param_split(g, "table", MPMD_SHAPE(8, 4), MPMD_NORMAL(1.0f), 0, 1);
        mpmd_value l = mpmd_sum(g, axis_call(g, k, x, table, ids), MPMD_ALL_AXES, MPMD_DROP_DIMS);
        mpmd_keep(g, l);
        CHECK(mpmd_graph_status(g) == MPMD_OK, "%s without a loop: %s", fn, mpmd_graph_error(g));
        mpmd_error err;
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.threads_per_rank = 1;
        mpmd_step *st = mpmd_jit_with_loop(g, NULL, &o, &err);
        snprintf(want, sizeof want,
                 "mpmd_jit_with_loop: %s: collectives over the model axis run inside the microbatch loop "
                 "body; this one (%%",
                 fn);
        CHECK(!st && !strncmp(err.msg, want, strlen(want)) &&
                  has(err.msg,
                      ") is in a graph without a loop (build it between mpmd_loop_begin and mpmd_loop_end, "
                      "or before a stage marker, which makes the ops before it a loop of one)"),
              "%s without a loop, compiled: %s", fn, st ? "compiled" : err.msg);
        mpmd_step_free(st);
        mpmd_exec *ex = mpmd_exec_new(g, NULL, &err);
        CHECK(!ex && has(err.msg, "mpmd_exec_new: ") && has(err.msg, fn) &&
                  has(err.msg, "in a graph without a loop"),
              "%s without a loop, mpmd_exec_new: %s", fn, ex ? "compiled" : err.msg);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
}

/* Without mpmd_loop_begin, the model axis' ops made before the first stage
 * marker are the body of a loop of one (and so are those after it): the
 * same bits as the function with an explicit loop of one microbatch. */
static mpmd_graph *loop_of_one(int explicit_loop, mpmd_value *x, mpmd_value *loss) {
    enum { N = 4, W = 6, M = 2 };
    mpmd_graph *g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, M);
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(N, W / M));
    mpmd_value p = mpmd_param_split(g, "p", MPMD_SHAPE(N, W), MPMD_NORMAL(1.0f), 1, 1);
    mpmd_value e = mpmd_param_split(g, "e", MPMD_SHAPE(8, W), MPMD_NORMAL(1.0f), 0, 1);
    int32_t idv[N] = {7, 0, 3, 5};
    mpmd_value ids = mpmd_constant(g, MPMD_I32, MPMD_SHAPE(N), idv);
    mpmd_value xv = *x;
    if (explicit_loop) {
        mpmd_loop_begin(g, 1);
        xv = mpmd_microbatch(g, *x);
    }
    mpmd_value xm = mpmd_mul(g, mpmd_pvary(g, xv, "model"), p);
    mpmd_value a = mpmd_all_reduce(g, xm, "model"), b = mpmd_all_gather(g, xm, 1, "model");
    mpmd_value c = mpmd_reduce_scatter(g, b, 1, "model");
    mpmd_value rows = mpmd_embedding_split(g, e, ids, "model"); /* [N, W] */
    mpmd_value ce = mpmd_cross_entropy_split(g, mpmd_matmul(g, rows, e, MPMD_TRANS_B), ids, "model");
    mpmd_value l = mpmd_add(g, mpmd_sum(g, mpmd_mul(g, a, c), MPMD_ALL_AXES, MPMD_DROP_DIMS),
                            mpmd_sum(g, ce, MPMD_ALL_AXES, MPMD_DROP_DIMS));
    l = mpmd_add(g, l, mpmd_sum(g, mpmd_mul(g, b, b), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    l = mpmd_enter_stage(g, l); /* without a loop: the ops above become its body */
    if (explicit_loop) {
        l = mpmd_loop_reduce(g, l, MPMD_REDUCE_ADD);
        mpmd_loop_end(g);
    }
    mpmd_keep(g, l);
    *loss = l;
    return g;
}

static void implicit_loop(void) {
    float got[2] = {NAN, NAN}, x[4 * 3];
    tu_fill(x, 4 * 3, 21);
    for (int k = 0; k < 2; k++) {
        mpmd_value in, loss;
        mpmd_graph *g = loop_of_one(k, &in, &loss);
        CHECK(mpmd_graph_status(g) == MPMD_OK && mpmd_graph_num_microbatches(g) == 1, "%s loop of one: %s",
              k ? "an explicit" : "an implicit", mpmd_graph_error(g));
        mpmd_step *st = tu_step(g, NULL, 5, k ? "explicit loop of one" : "implicit loop of one");
        if (st)
            CHECK(mpmd_step_set_input(st, in, x, sizeof x) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                      mpmd_step_read(st, loss, &got[k], sizeof got[k]) == MPMD_OK,
                  "%s loop of one: %s", k ? "an explicit" : "an implicit", mpmd_step_error(st));
        mpmd_step_free(st);
        mpmd_graph_free(g);
    }
    CHECK(isfinite(got[0]) && memcmp(&got[0], &got[1], sizeof got[0]) == 0,
          "the model axis' ops in an implicit loop of one: loss %.9g, with an explicit loop %.9g", got[0],
          got[1]);
}

int main(void) {
    collectives(2);
    collectives(4);
    checkpoints();
    vocabulary(2);
    vocabulary(4);
    bad_input();
    misuse();
    implicit_loop();
    return tu_report("test_tensor_parallel");
}
