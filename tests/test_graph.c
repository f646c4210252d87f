/* The graph core, the loop region, autodiff's bookkeeping and the executor:
 * errors that name what and where, loop reductions, the per-use split of a
 * shared parameter's gradient, stage tags, memory reuse, hashes and
 * initialisers. */
#include "graph/graph.h"
#include "testutil.h"
#include "util/init.h"

#include <math.h>
#include <string.h>

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(4, 3));
    CHECK(mpmd_is_value(a), "input");
    mpmd_value dup = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2));
    CHECK(!mpmd_is_value(dup), "duplicate name accepted");
    CHECK(mpmd_graph_status(g) == MPMD_ERR_INVALID, "status %d", mpmd_graph_status(g));
    CHECK(has(mpmd_graph_error(g), "\"a\" is already used"), "message: %s", mpmd_graph_error(g));
    /* the first error wins; later ones do not overwrite it */
    mpmd_value bad = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(0));
    CHECK(!mpmd_is_value(bad), "zero dim accepted after an error");
    CHECK(has(mpmd_graph_error(g), "already used"), "first error replaced: %s", mpmd_graph_error(g));
    /* MPMD_NONE propagates without a crash */
    CHECK(!mpmd_is_value(mpmd_add(g, dup, a)), "none propagates");
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_value z = mpmd_input(g, "z", MPMD_F32, MPMD_SHAPE(3, 0));
    CHECK(!mpmd_is_value(z) && has(mpmd_graph_error(g), "dimension 1 is 0"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* scopes name parameters and prefix messages */
    g = mpmd_graph_new();
    mpmd_scope_push(g, "block_3");
    mpmd_scope_pushf(g, "mlp_%d", 0);
    mpmd_value w = mpmd_param(g, "kernel", MPMD_SHAPE(2, 2), MPMD_ZEROS);
    CHECK(strcmp(mpmd_value_name(g, w), "block_3/mlp_0/kernel") == 0, "name %s", mpmd_value_name(g, w));
    CHECK(mpmd_lookup(g, "block_3/mlp_0/kernel").id == w.id, "lookup");
    TU_DROP(mpmd_microbatch(g, w));
    CHECK(has(mpmd_graph_error(g), "in block_3/mlp_0: mpmd_microbatch: only inside the loop body"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* regions: a body value used after the loop without a reduction */
    g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(8, 2));
    mpmd_loop_begin(g, 4);
    mpmd_value xb = mpmd_microbatch(g, x);
    mpmd_loop_end(g);
    mpmd_value y = mpmd_add(g, xb, xb);
    CHECK(!mpmd_is_value(y) && has(mpmd_graph_error(g), "loop-body value") &&
              has(mpmd_graph_error(g), "mpmd_loop_reduce"),
          "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* batch not divisible by the microbatch count */
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(10, 2));
    mpmd_loop_begin(g, 4);
    TU_DROP(mpmd_microbatch(g, x));
    CHECK(has(mpmd_graph_error(g), "batch of 10 rows (f32[10,2]) is not divisible by 4 microbatches"), "%s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* a loss that is not a scalar */
    g = mpmd_graph_new();
    w = mpmd_param(g, "w", MPMD_SHAPE(3), MPMD_ONES);
    mpmd_value gr;
    CHECK(mpmd_grad(g, mpmd_mul(g, w, w), 1, &w, &gr) == MPMD_ERR_SHAPE, "non-scalar loss");
    CHECK(has(mpmd_graph_error(g), "the loss must be an f32 scalar, got f32[3]"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* loop misuse */
    g = mpmd_graph_new();
    mpmd_loop_begin(g, 0);
    CHECK(has(mpmd_graph_error(g), "0 microbatches"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    mpmd_loop_end(g);
    CHECK(has(mpmd_graph_error(g), "not inside a loop"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new(); /* a marker after the loop (without one, it makes a loop of one: test_forward) */
    mpmd_loop_begin(g, 1);
    mpmd_loop_end(g);
    TU_DROP(mpmd_enter_stage(g, mpmd_scalar(g, 1.0f)));
    CHECK(has(mpmd_graph_error(g), "not after mpmd_loop_end"), "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* an executor refuses a failed graph, with its message */
    g = mpmd_graph_new();
    mpmd_input(g, "q", MPMD_F32, MPMD_SHAPE(-1));
    mpmd_error err;
    CHECK(mpmd_exec_new(g, NULL, &err) == NULL && has(err.msg, "dimension 0 is -1"), "%s", err.msg);
    mpmd_graph_free(g);
}

/* Loop reductions: add, max and concat of the microbatch slices. */
static void test_loop_reduce(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(8, 3));
    mpmd_loop_begin(g, 4);
    mpmd_value xb = mpmd_microbatch(g, x);
    mpmd_value sq = mpmd_mul_scalar(g, xb, 2.0f);
    mpmd_value s = mpmd_loop_reduce(g, sq, MPMD_REDUCE_ADD);
    mpmd_value m = mpmd_loop_reduce(g, xb, MPMD_REDUCE_MAX);
    mpmd_value c = mpmd_loop_reduce(g, sq, MPMD_REDUCE_CONCAT);
    mpmd_loop_end(g);
    mpmd_keep(g, s), mpmd_keep(g, m), mpmd_keep(g, c);
    CHECK(mpmd_graph_num_microbatches(g) == 4, "n");
    mpmd_exec *ex = tu_exec(g, 2);
    float xd[24], sd[6], md[6], cd[24];
    tu_fill(xd, 24, 7);
    CHECK(mpmd_exec_run(ex) == MPMD_ERR_INVALID && has(mpmd_exec_error(ex), "input \"x\" was not set"), "%s",
          mpmd_exec_error(ex));
    CHECK(mpmd_exec_set_input(ex, x, xd, 10) == MPMD_ERR_SHAPE &&
              has(mpmd_exec_error(ex), "f32[8,3] (96 bytes)"),
          "%s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_set_input(ex, x, xd, sizeof xd) == MPMD_OK, "set");
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    mpmd_exec_read(ex, s, sd, sizeof sd);
    mpmd_exec_read(ex, m, md, sizeof md);
    mpmd_exec_read(ex, c, cd, sizeof cd);
    for (int k = 0; k < 6; k++) {
        /* the documented order: acc = x0, then acc += x_m */
        float want = xd[k] * 2.0f;
        float mx = xd[k];
        for (int mb = 1; mb < 4; mb++) {
            want += xd[mb * 6 + k] * 2.0f;
            mx = xd[mb * 6 + k] > mx ? xd[mb * 6 + k] : mx;
        }
        CHECK(sd[k] == want, "add %d: %g vs %g", k, sd[k], want);
        CHECK(md[k] == mx, "max %d", k);
    }
    for (int k = 0; k < 24; k++)
        CHECK(cd[k] == xd[k] * 2.0f, "concat %d", k);
    /* a body value cannot be read; a kept one can */
    float tmp[6];
    CHECK(mpmd_exec_read(ex, sq, tmp, sizeof tmp) == MPMD_ERR_INVALID && has(mpmd_exec_error(ex), "not kept"),
          "%s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* A parameter used twice (like tied embeddings): its gradient is reduced
 * use by use and summed after the loop; values match the math. */
static void test_shared_param_grad(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(3), MPMD_NORMAL(1.0f));
    mpmd_loop_begin(g, 2);
    mpmd_value xb = mpmd_microbatch(g, x);
    mpmd_value h = mpmd_mul(g, xb, w);
    h = mpmd_enter_stage(g, h);
    mpmd_value o = mpmd_mul(g, h, w); /* second use, next stage */
    mpmd_value loss = mpmd_sum(g, o, 0, NULL, 0);
    loss = mpmd_enter_stage(g, loss);
    mpmd_value gw;
    CHECK(mpmd_grad(g, loss, 1, &w, &gw) == MPMD_OK, "%s", mpmd_graph_error(g));
    const mpmd_node *gn = mpmd_node_of(g, gw);
    CHECK(gn && (gn->flags & MPMD_NODE_GRADSUM), "gradient of a twice-used param is a marked sum");
    mpmd_value tot = mpmd_loop_reduce(g, gw, MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    const mpmd_node *tn = mpmd_node_of(g, tot);
    CHECK(tn->region == MPMD_REGION_POST && tn->n_in == 2, "after-loop sum of the per-use reductions");
    CHECK(g->nodes[tn->in[0]].op == &mpmd_op_loop_reduce && g->nodes[tn->in[1]].op == &mpmd_op_loop_reduce,
          "both operands are loop reductions");
    /* stage tags: forward ops in trace order, backward ops of stage 1 before stage 0's */
    CHECK(mpmd_node_of(g, h)->stage == 0 && mpmd_node_of(g, o)->stage == 1, "forward stages");
    int bwd_markers = 0, last_bwd_stage = 2, ordered = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (n->op == &mpmd_op_stage_marker && n->ia[1]) {
            bwd_markers++;
            ordered &= n->ia[0] < last_bwd_stage;
            last_bwd_stage = (int)n->ia[0];
            CHECK(n->is_bwd && n->stage == n->ia[0], "backward marker tagged with its stage");
        }
    }
    CHECK(bwd_markers == 2 && ordered, "two backward markers, stage 1 then stage 0");
    mpmd_keep(g, tot);
    mpmd_exec *ex = tu_exec(g, 1);
    float xd[12], gd[3];
    tu_fill(xd, 12, 3);
    mpmd_exec_set_input(ex, x, xd, sizeof xd);
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    mpmd_exec_read(ex, tot, gd, sizeof gd);
    const float *wd = mpmd_exec_var_data(ex, w);
    for (int k = 0; k < 3; k++) {
        /* loss = sum x w^2 -> d/dw = 2 w sum_rows x */
        double sx = 0;
        for (int r = 0; r < 4; r++)
            sx += xd[r * 3 + k];
        double want = 2.0 * wd[k] * sx;
        CHECK(fabs(gd[k] - want) < 1e-5 * (1 + fabs(want)), "grad %d: %g vs %g", k, gd[k], want);
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

/* Printing: regions, names, types, stage tags. */
static void test_print(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 2));
    mpmd_value w = mpmd_param(g, "dense/kernel", MPMD_SHAPE(2, 2), MPMD_LECUN);
    mpmd_loop_begin(g, 2);
    mpmd_value y = mpmd_enter_stage(g, mpmd_mul(g, mpmd_microbatch(g, x), w));
    mpmd_value r = mpmd_loop_reduce(g, y, MPMD_REDUCE_CONCAT);
    mpmd_loop_end(g);
    mpmd_keep(g, r);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mpmd_graph_print(g, f);
    fclose(f);
    CHECK(has(buf, "before loop:"), "%s", buf);
    CHECK(has(buf, "loop body (2 microbatches):"), "%s", buf);
    CHECK(has(buf, "after loop:"), "%s", buf);
    CHECK(has(buf, "%1:f32[2,2] = param \"dense/kernel\" init=lecun_normal"), "%s", buf);
    CHECK(has(buf, "= enter_stage %"), "%s", buf);
    CHECK(has(buf, "f32[4,2] = loop_reduce %"), "%s", buf);
    CHECK(has(buf, "op=concat"), "%s", buf);
    free(buf);
    mpmd_graph_free(g);
}

/* The planner reuses dead buffers: a chain of 16 ops needs a few buffers. */
static void test_memory_reuse(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(1024));
    mpmd_value y = mpmd_exp(g, x);
    for (int i = 0; i < 16; i++)
        y = mpmd_add_scalar(g, mpmd_mul_scalar(g, y, 0.5f), 1.0f);
    mpmd_keep(g, y);
    mpmd_exec *ex = tu_exec(g, 1);
    CHECK(mpmd_exec_arena_bytes(ex) <= 3 * 4096, "arena %zu bytes for 33 values of 4096",
          mpmd_exec_arena_bytes(ex));
    float xd[1024], yd[1024];
    tu_fill(xd, 1024, 9);
    mpmd_exec_set_input(ex, x, xd, sizeof xd);
    CHECK(mpmd_exec_run(ex) == MPMD_OK, "%s", mpmd_exec_error(ex));
    mpmd_exec_read(ex, y, yd, sizeof yd);
    for (int k = 0; k < 1024; k += 97) {
        float v = expf(xd[k]);
        for (int i = 0; i < 16; i++)
            v = v * 0.5f + 1.0f;
        CHECK(v == yd[k], "chain value %d: %g vs %g", k, yd[k], v);
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

static void test_sha256_and_init(void) {
    uint8_t d[32];
    mpmd_sha256("abc", 3, d);
    static const uint8_t abc[4] = {0xba, 0x78, 0x16, 0xbf};
    CHECK(memcmp(d, abc, 4) == 0 && d[31] == 0xad, "sha256(abc)");
    char big[1000];
    memset(big, 'a', sizeof big);
    mpmd_sha256(big, sizeof big, d); /* 41edece4...b9737ea3 (sha256sum of 1000 "a") */
    CHECK(d[0] == 0x41 && d[1] == 0xed && d[31] == 0xa3, "sha256 of 1000 bytes: %02x%02x..%02x", d[0], d[1],
          d[31]);

    mpmd_type t = tu_f32(MPMD_SHAPE(100, 100));
    float *a = malloc(10000 * sizeof *a), *b = malloc(10000 * sizeof *b);
    mpmd_init_fill(a, &t, "layer/kernel", MPMD_NORMAL(0.02f), 5);
    mpmd_init_fill(b, &t, "layer/kernel", MPMD_NORMAL(0.02f), 5);
    CHECK(memcmp(a, b, 10000 * sizeof *a) == 0, "same seed and name, same values");
    double mean = 0, var = 0;
    for (int i = 0; i < 10000; i++)
        mean += a[i];
    mean /= 10000;
    for (int i = 0; i < 10000; i++)
        var += (a[i] - mean) * (a[i] - mean);
    var /= 10000;
    CHECK(fabs(mean) < 0.001 && fabs(sqrt(var) - 0.02) < 0.001, "normal(0.02): mean %g std %g", mean,
          sqrt(var));
    mpmd_init_fill(b, &t, "layer/bias", MPMD_NORMAL(0.02f), 5);
    CHECK(memcmp(a, b, 10000 * sizeof *a) != 0, "another name, other values");
    mpmd_init_fill(b, &t, "layer/kernel", MPMD_NORMAL(0.02f), 6);
    CHECK(memcmp(a, b, 10000 * sizeof *a) != 0, "another seed, other values");
    mpmd_init_fill(a, &t, "u", (mpmd_init){MPMD_INIT_UNIFORM, -2.0f, 3.0f}, 1);
    float lo = 9, hi = -9;
    for (int i = 0; i < 10000; i++)
        lo = a[i] < lo ? a[i] : lo, hi = a[i] > hi ? a[i] : hi;
    CHECK(lo >= -2.0f && hi < 3.0f && lo < -1.9f && hi > 2.9f, "uniform range [%g, %g]", lo, hi);
    free(a), free(b);
}

/* The largest stage of the best contiguous split of c[0..n-1] into S
 * non-empty stages, by trying every split. */
static double brute_best(const double *c, int n, int S) {
    if (S == 1) {
        double t = 0;
        for (int i = 0; i < n; i++)
            t += c[i];
        return t;
    }
    double best = 1e300, head = 0;
    for (int k = 1; k <= n - (S - 1); k++) {
        head += c[k - 1];
        double rest = brute_best(c + k, n - k, S - 1), m = head > rest ? head : rest;
        if (m < best) best = m;
    }
    return best;
}

/* mpmd_balance_stages finds the best split (against every split tried),
 * every stage non-empty; mpmd_op_flops counts a product's 2 M N K. */
static void test_balance(void) {
    uint64_t seed = 99;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)(tu_unif(&seed) * 9), S = 1 + (int)(tu_unif(&seed) * n);
        double c[10];
        for (int i = 0; i < n; i++)
            c[i] = trial % 3 ? floor(tu_unif(&seed) * 10) : tu_unif(&seed) * 5;
        int first[10];
        mpmd_error err;
        CHECK(mpmd_balance_stages(c, n, S, first, &err) == MPMD_OK, "%s", err.msg);
        double worst = 0;
        int ok = first[0] == 0;
        for (int s = 0; s < S; s++) {
            int b = first[s], e = s + 1 < S ? first[s + 1] : n;
            ok &= e > b;
            double w = 0;
            for (int i = b; i < e; i++)
                w += c[i];
            if (w > worst) worst = w;
        }
        double want = brute_best(c, n, S);
        CHECK(ok && fabs(worst - want) <= 1e-9 * (want + 1), "trial %d: n %d S %d: largest stage %g, best %g",
              trial, n, S, worst, want);
    }
    mpmd_error err;
    double c1[2] = {1, 1};
    int f[4];
    CHECK(mpmd_balance_stages(c1, 2, 3, f, &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "2 pieces into 3 stages"),
          "more stages than pieces: %s", err.msg);
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(2, 3, 4)),
               b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(5, 4));
    mpmd_value y = mpmd_matmul(g, a, b, MPMD_TRANS_B);
    CHECK(mpmd_op_flops(g, y) == 2.0 * 2 * 3 * 5 * 4 && mpmd_graph_flops(g, a, y) == mpmd_op_flops(g, y),
          "matmul flops %g", mpmd_op_flops(g, y));
    mpmd_graph_free(g);
}

/* mpmd_value_and_grad is the manual sequence (grad, loop sums, loop end,
 * keep): the same graph, op for op; and it says what is wrong. */
static mpmd_graph *vag_graph(int helper, mpmd_value *total, int *np) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_dense(g, "d", mpmd_microbatch(g, x), 2, MPMD_BIAS);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, h), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value ps[4], gs[4];
    if (helper) {
        *total = mpmd_value_and_grad(g, loss, 0, NULL, 4, ps, gs, np);
    } else {
        *np = mpmd_graph_params(g, ps, 4);
        mpmd_grad(g, loss, *np, ps, gs);
        *total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
        for (int i = 0; i < *np; i++)
            gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
        mpmd_loop_end(g);
        mpmd_keep(g, *total);
    }
    mpmd_sgd(g, *np, ps, gs, mpmd_scalar(g, 0.1f));
    return g;
}

static void test_value_and_grad(void) {
    mpmd_value t1, t2;
    int n1, n2;
    mpmd_graph *a = vag_graph(1, &t1, &n1), *b = vag_graph(0, &t2, &n2);
    char *pa = NULL, *pb = NULL;
    size_t la = 0, lb = 0;
    FILE *fa = open_memstream(&pa, &la), *fb = open_memstream(&pb, &lb);
    mpmd_graph_print(a, fa), mpmd_graph_print(b, fb);
    fclose(fa), fclose(fb);
    CHECK(mpmd_graph_status(a) == MPMD_OK && n1 == 2 && n2 == 2 && t1.id == t2.id && !strcmp(pa, pb),
          "mpmd_value_and_grad differs from the manual sequence: %s", mpmd_graph_error(a));
    free(pa), free(pb);
    mpmd_graph_free(a), mpmd_graph_free(b);
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_dense(g, "d", mpmd_microbatch(g, x), 2, MPMD_BIAS);
    mpmd_value ps[1], gs[1];
    int n;
    mpmd_value t =
        mpmd_value_and_grad(g, mpmd_sum(g, h, MPMD_ALL_AXES, MPMD_DROP_DIMS), 0, NULL, 1, ps, gs, &n);
    CHECK(!mpmd_is_value(t) && strstr(mpmd_graph_error(g), "2 parameters but room for 1"), "cap: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);
}

/* A schedule from the graph's own stage and microbatch counts. */
static void test_schedule_for_graph(void) {
    tu_mlp m = tu_build_mlp(3, 5, 2, 4); /* 3 stages, 5 microbatches */
    mpmd_schedule *s;
    mpmd_error err;
    CHECK(mpmd_schedule_for_graph(m.g, MPMD_SCHED_STD1F1B, 0, MPMD_NO_FUSE, &s, &err) == MPMD_OK &&
              s->num_stages == 3 && s->num_ranks == 3 && s->num_microbatches == 5,
          "%s", err.msg);
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
    CHECK(st != NULL, "%s", err.msg);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
    mpmd_graph *g = mpmd_graph_new();
    CHECK(mpmd_schedule_for_graph(g, MPMD_SCHED_GPIPE, 0, MPMD_NO_FUSE, &s, &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "0 microbatches and 0 markers"),
          "no loop: %s", err.msg);
    mpmd_graph_free(g);
}

int main(void) {
    test_schedule_for_graph();
    test_value_and_grad();
    test_balance();
    test_errors();
    test_loop_reduce();
    test_shared_param_grad();
    test_print();
    test_memory_reuse();
    test_sha256_and_init();
    return tu_report("test_graph");
}
