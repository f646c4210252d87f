/* What the other tests take for granted:
 *
 * - every initialiser's statistics: zeros, constants, normal (mean, std),
 *   uniform (range, mean, std), LeCun normal with fan-in the product of all
 *   dimensions but the last (std 1/sqrt(fan_in)), on non-square shapes so
 *   that a fan-in counting the wrong dimensions shows;
 * - the gradient of a parameter the loss does not use is zero;
 * - mpmd_assign stores a value into a variable after the loop, and refuses
 *   to inside it;
 * - mpmd_grad_add adds, and passes one side through when the other is
 *   MPMD_NONE. */
#include "graph/graph.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static void stats(const float *v, int64_t n, double *mean, double *sd, double *lo, double *hi) {
    double s = 0, q = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        q += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(q / (double)(n - 1));
}

static void initialisers(void) {
    static const struct {
        const char *name;
        mpmd_init init;
        int ndim;
        int64_t dim[3];
        double mean, sd, lo, hi; /* expected; lo/hi: the range (uniform, constants) */
    } cases[] = {
        {"zeros", {MPMD_INIT_ZEROS, 0, 0}, 2, {48, 20}, 0, 0, 0, 0},
        {"const 2.5", {MPMD_INIT_CONST, 2.5f, 0}, 2, {48, 20}, 2.5, 0, 2.5, 2.5},
        {"normal(0.3, 0.5)", {MPMD_INIT_NORMAL, 0.3f, 0.5f}, 2, {64, 50}, 0.3, 0.5, -INFINITY, INFINITY},
        {"uniform[-0.5, 1.5)",
         {MPMD_INIT_UNIFORM, -0.5f, 1.5f},
         2,
         {64, 50},
         0.5,
         2.0 / sqrt(12.0),
         -0.5,
         1.5},
        /* fan-in 64 (not 64 x 16, not 16) */
        {"lecun [64, 16]", {MPMD_INIT_LECUN, 0, 0}, 2, {64, 16}, 0, 0.125, -INFINITY, INFINITY},
        /* fan-in 2 x 32 = 64 */
        {"lecun [2, 32, 24]", {MPMD_INIT_LECUN, 0, 0}, 3, {2, 32, 24}, 0, 0.125, -INFINITY, INFINITY},
        /* fan-in 400: std 0.05 */
        {"lecun [400, 8]", {MPMD_INIT_LECUN, 0, 0}, 2, {400, 8}, 0, 0.05, -INFINITY, INFINITY},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value p = mpmd_param(g, "p", cases[c].ndim, cases[c].dim, cases[c].init);
        mpmd_value v = mpmd_variable(g, "v", MPMD_F32, cases[c].ndim, cases[c].dim, cases[c].init);
        mpmd_exec *ex = tu_exec(g, 1);
        int64_t n = 1;
        for (int d = 0; d < cases[c].ndim; d++)
            n *= cases[c].dim[d];
        float *buf = malloc(sizeof(float) * (size_t)n);
        for (int k = 0; k < 2; k++) {
            CHECK(mpmd_exec_read(ex, k ? v : p, buf, sizeof(float) * (size_t)n) == MPMD_OK, "%s",
                  mpmd_exec_error(ex));
            double mean, sd, lo, hi;
            stats(buf, n, &mean, &sd, &lo, &hi);
            /* sampling error of the mean ~ sd/sqrt(n), of the sd ~ sd/sqrt(2n): 5 of those */
            double em = 5 * cases[c].sd / sqrt((double)n) + 1e-7, es = 5 * cases[c].sd / sqrt(2.0 * n) + 1e-7;
            CHECK(fabs(mean - cases[c].mean) <= em && fabs(sd - cases[c].sd) <= es,
                  "%s (%s): mean %.5f sd %.5f, want %.5f and %.5f", cases[c].name,
                  k ? "variable" : "parameter", mean, sd, cases[c].mean, cases[c].sd);
            if (isfinite(cases[c].lo))
                CHECK(lo >= cases[c].lo && hi <= cases[c].hi && (cases[c].sd == 0 || hi < cases[c].hi),
                      "%s: values in [%g, %g], want [%g, %g)", cases[c].name, lo, hi, cases[c].lo,
                      cases[c].hi);
        }
        free(buf);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
}

/* d loss / d q for a q the loss does not read: zeros, in and out of a loop. */
static void unused_parameter(void) {
    for (int loop = 0; loop < 2; loop++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
        mpmd_value p = mpmd_param(g, "p", MPMD_SHAPE(3, 2), MPMD_NORMAL(1.0f));
        mpmd_value q = mpmd_param(g, "q", MPMD_SHAPE(5, 2), MPMD_NORMAL(1.0f));
        if (loop) mpmd_loop_begin(g, 2);
        mpmd_value xin = loop ? mpmd_microbatch(g, x) : x;
        mpmd_value y = mpmd_matmul(g, xin, p, 0);
        mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, y), 0, NULL, 0);
        mpmd_value ws[2] = {p, q}, gs[2];
        mpmd_grad(g, loss, 2, ws, gs);
        if (loop) {
            gs[0] = mpmd_loop_reduce(g, gs[0], MPMD_REDUCE_ADD);
            gs[1] = mpmd_loop_reduce(g, gs[1], MPMD_REDUCE_ADD);
            mpmd_loop_end(g);
        }
        mpmd_keep(g, gs[0]), mpmd_keep(g, gs[1]);
        mpmd_exec *ex = tu_exec(g, 1);
        float xs[12], gq[10], gp[6];
        tu_fill(xs, 12, 3);
        CHECK(mpmd_exec_set_input(ex, x, xs, sizeof xs) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
                  mpmd_exec_read(ex, gs[1], gq, sizeof gq) == MPMD_OK &&
                  mpmd_exec_read(ex, gs[0], gp, sizeof gp) == MPMD_OK,
              "%s", mpmd_exec_error(ex));
        int zero = 1, nonzero = 0;
        for (int i = 0; i < 10; i++)
            zero &= gq[i] == 0.0f && !signbit(gq[i]);
        for (int i = 0; i < 6; i++)
            nonzero |= gp[i] != 0.0f;
        CHECK(zero && nonzero,
              "%s: the unused parameter's gradient is not zero (%g ...), or the used one's is",
              loop ? "loop" : "no loop", gq[0]);
        mpmd_exec_free(ex);
        mpmd_graph_free(g);
    }
}

static void assign(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_value v = mpmd_variable(g, "acc", MPMD_F32, MPMD_SHAPE(3), MPMD_ONES);
    mpmd_loop_begin(g, 2);
    static const int ax0[1] = {0};
    mpmd_value colsum = mpmd_sum(g, mpmd_microbatch(g, x), 1, ax0, 0);
    mpmd_value inside = mpmd_assign(g, v, colsum);
    CHECK(!mpmd_is_value(inside) &&
              strstr(mpmd_graph_error(g), "assigned inside the loop body; assign after the loop"),
          "assign in the body: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    v = mpmd_variable(g, "acc", MPMD_F32, MPMD_SHAPE(3), MPMD_ONES);
    mpmd_loop_begin(g, 2);
    colsum = mpmd_loop_reduce(g, mpmd_sum(g, mpmd_microbatch(g, x), 1, ax0, 0), MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_assign(g, v, mpmd_add(g, v, colsum)); /* acc += column sums, every step */
    mpmd_exec *ex = tu_exec(g, 1);
    float xs[12], got[3];
    tu_fill(xs, 12, 9);
    for (int step = 0; step < 2; step++)
        CHECK(mpmd_exec_set_input(ex, x, xs, sizeof xs) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK, "%s",
              mpmd_exec_error(ex));
    CHECK(mpmd_exec_read(ex, v, got, sizeof got) == MPMD_OK, "%s", mpmd_exec_error(ex));
    for (int c = 0; c < 3; c++) {
        float s0 = xs[0 * 3 + c] + xs[1 * 3 + c], s1 = xs[2 * 3 + c] + xs[3 * 3 + c];
        float want = (1.0f + (s0 + s1)) + (s0 + s1);
        CHECK(got[c] == want, "assign: column %d is %.9g after two steps, want %.9g", c, got[c], want);
    }
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

static void grad_add(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(3));
    mpmd_value b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(3));
    CHECK(mpmd_grad_add(g, a, MPMD_NONE).id == a.id && mpmd_grad_add(g, MPMD_NONE, b).id == b.id,
          "grad_add with MPMD_NONE must pass the other side through");
    CHECK(!mpmd_is_value(mpmd_grad_add(g, MPMD_NONE, MPMD_NONE)), "grad_add of two NONE is NONE");
    mpmd_value s = mpmd_grad_add(g, a, b);
    mpmd_keep(g, s);
    mpmd_exec *ex = tu_exec(g, 1);
    float av[3] = {1.5f, -2, 0.25f}, bv[3] = {0.5f, 3, -1}, got[3];
    CHECK(mpmd_exec_set_input(ex, a, av, sizeof av) == MPMD_OK &&
              mpmd_exec_set_input(ex, b, bv, sizeof bv) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, s, got, sizeof got) == MPMD_OK,
          "%s", mpmd_exec_error(ex));
    for (int i = 0; i < 3; i++)
        CHECK(got[i] == av[i] + bv[i], "grad_add: %g + %g gave %g", av[i], bv[i], got[i]);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

int main(void) {
    initialisers();
    unused_parameter();
    assign();
    grad_add();
    return tu_report("test_init_grad");
}
