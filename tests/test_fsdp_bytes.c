/* FSDP's collective bytes in the run summary (mpmd_step_summary,
 * mpmd_step_print_summary) against figures worked out here from the
 * parameter sizes and the schedule alone.
 *
 * The model: S stages, stage j computing pre_j = h_j w_j + b_j (w_j [d_j,
 * d_j+1], b_j [d_j+1], h_0 the input) and h_j+1 = tanh(pre_j), except the
 * last, z = (h w) * g + b with a scale g [d_S] too; the loss sum(z^2).
 * AdamW updates every parameter, so with fsdp all of them are sharded: over
 * R replicas each into shards of L = ceil(n / R) elements, replica d holding
 * elements [d L, min((d + 1) L, n)) (possibly none).
 *
 * Which tasks read which parameter, from the math of the gradients:
 * - forward of stage j: w_j, b_j (and g on the last stage);
 * - backward of stage j: the input's cotangent is (dpre_j) w_j^T, so it
 *   reads w_j, except on stage 0, whose input (the data) needs no
 *   cotangent; on the last stage dpre = dz * g reads g too. The weight
 *   gradients (h^T dpre, sums of cotangents, sum of (h w) dz) read only
 *   activations and cotangents, and no gradient reads a bias;
 * - with the backward split (ZeroBubble), the part that makes the input's
 *   cotangent (A) reads what the backward reads, the weight-gradient part
 *   (W) nothing;
 * - the one-rank loop runs the whole forward and backward in one task per
 *   microbatch: every parameter read once per microbatch.
 *
 * What replica d of a rank takes from the other replicas in one step: for
 * each task it runs and each parameter the task reads, the R - 1 other
 * shards (R - 1) L elements (a gather copies whole padded shards); for each
 * parameter whose gradient lives on the rank, the other replicas' values
 * of its own part, (R - 1) x its part's elements, once (the reduce-scatter
 * after the loop). The textbook figure (mpmd_rank_stats, the summary's
 * "params gathered twice a microbatch, gradients reduce-scattered once"):
 * (R - 1) / R of the bytes of every parameter a task of the rank's stages
 * gathers, twice per microbatch, and of every gradient the rank
 * reduce-scatters, once; for replica 0, rounded down to whole bytes. */
#include "runtime/runtime.h"
#include "testutil.h"

#include <string.h>

enum { MB = 4, ROWS = 2, MAXS = 4, MAXP = 3 * MAXS };

/* widths d_0 .. d_S of the 2- and 4-stage models: sizes 3 and 2 mostly do
 * not divide, and the last stage's g and b have 2 elements (over 3
 * replicas: the third one's shard is all padding) */
static int64_t widths2[3] = {5, 7, 2};
static const int64_t widths4[5] = {5, 7, 3, 6, 2};

typedef struct model {
    mpmd_graph *g;
    mpmd_value x;
    int S, np;
    mpmd_value p[MAXP];
    int64_t numel[MAXP];
    int stage[MAXP];          /* the stage that reads it */
    int fwd[MAXP], bwd[MAXP]; /* read by that stage's forward, backward */
} model;

static int add_param(model *m, const char *name, int ndim, const int64_t *dims, int stage, int bwd) {
    int k = m->np++;
    m->p[k] = mpmd_param(m->g, name, ndim, dims, MPMD_NORMAL(0.5f));
    m->numel[k] = ndim == 1 ? dims[0] : dims[0] * dims[1];
    m->stage[k] = stage, m->fwd[k] = 1, m->bwd[k] = bwd;
    return k;
}

static model build(int S) {
    model m;
    memset(&m, 0, sizeof m);
    m.S = S;
    const int64_t *widths = S == 2 ? widths2 : widths4;
    mpmd_graph *g = m.g = mpmd_graph_new();
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(MB * ROWS, widths[0]));
    int w[MAXS], b[MAXS], gs = -1;
    for (int j = 0; j < S; j++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", j);
        w[j] = add_param(&m, name, 2, (int64_t[]){widths[j], widths[j + 1]}, j, j > 0);
        snprintf(name, sizeof name, "b%d", j);
        b[j] = add_param(&m, name, 1, (int64_t[]){widths[j + 1]}, j, 0);
    }
    gs = add_param(&m, "g", 1, (int64_t[]){widths[S]}, S - 1, 1);
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_microbatch(g, m.x), z = MPMD_NONE;
    for (int j = 0; j < S; j++) {
        mpmd_value hw = mpmd_matmul(g, h, m.p[w[j]], 0);
        if (j + 1 < S) {
            h = mpmd_enter_stage(g, mpmd_tanh(g, mpmd_add(g, hw, m.p[b[j]])));
        } else {
            z = mpmd_add(g, mpmd_mul(g, hw, m.p[gs]), m.p[b[j]]);
        }
    }
    mpmd_value loss = mpmd_enter_stage(g, mpmd_sum(g, mpmd_square(g, z), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_value ps[MAXP], grads[MAXP];
    int n = 0;
    mpmd_value total = mpmd_value_and_grad(g, loss, m.np, m.p, MAXP, ps, grads, &n);
    (void)total;
    CHECK(n == m.np, "value_and_grad gave %d parameters, want %d", n, m.np);
    CHECK(mpmd_adamw(g, n, ps, grads, mpmd_scalar(g, 0.01f), MPMD_ADAM_DEFAULTS) == MPMD_OK, "adamw: %s",
          mpmd_graph_error(g));
    return m;
}

/* A layout: the schedule (NULL: the one-rank loop), where each stage runs,
 * and whether the backward is split into A and W. */
typedef struct layout {
    const char *name;
    int S, D;
    mpmd_schedule *s;
    int split;
} layout;

static int rank_of(const layout *lo, int stage) { return lo->s ? stage % lo->D : 0; }

/* replica d's part of an n-element value over R replicas, in elements */
static int64_t part_of(int64_t n, int R, int d) {
    int64_t L = (n + R - 1) / R, lo = d * L, hi = lo + L < n ? lo + L : n;
    return hi > lo ? hi - lo : 0;
}

/* What replica d of rank r takes from the others in one step. */
static int64_t expected_measured(const model *m, const layout *lo, int R, int r, int d) {
    int64_t bytes = 0;
    for (int k = 0; k < m->np; k++) {
        if (rank_of(lo, m->stage[k]) != r) continue;
        const int64_t L = (m->numel[k] + R - 1) / R;
        /* tasks per microbatch reading it: the loop's one task; else its
         * stage's forward, and its backward (B, or A when split) */
        int reads = lo->s ? m->fwd[k] + m->bwd[k] : 1;
        bytes += (int64_t)MB * reads * (R - 1) * L * 4;
        bytes += (int64_t)(R - 1) * part_of(m->numel[k], R, d) * 4; /* its gradient's reduce-scatter */
    }
    return bytes;
}

/* The textbook figure of rank r: every parameter its tasks read twice a
 * microbatch plus every gradient it keeps once, times (R - 1) / R. */
static int64_t expected_textbook(const model *m, const layout *lo, int R, int r) {
    int64_t whole = 0;
    for (int k = 0; k < m->np; k++)
        if (rank_of(lo, m->stage[k]) == r) whole += (2 * MB + 1) * m->numel[k] * 4;
    return whole * (R - 1) / R;
}

static char *summary_text(mpmd_step *st) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    mpmd_error err;
    CHECK(mpmd_step_print_summary(st, f, &err) == MPMD_OK, "print_summary: %s", err.msg);
    fclose(f);
    return text;
}

static void check_layout(const layout *lo, int R) {
    char label[96];
    snprintf(label, sizeof label, "%s x %d replicas", lo->name, R);
    model m = build(lo->S);
    const int64_t d0 = widths2[0]; /* the input's width, the same for both */
    if (mpmd_graph_status(m.g) != MPMD_OK) {
        CHECK(0, "%s: building the model: %s", label, mpmd_graph_error(m.g));
        mpmd_graph_free(m.g);
        return;
    }
    float *x = malloc(sizeof(float) * (size_t)(R * MB * ROWS * d0));
    tu_fill(x, R * MB * ROWS * d0, 17 + (uint64_t)R);
    for (int fsdp = 0; fsdp <= 1; fsdp++) {
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.threads_per_rank = 1, o.data_parallel = R, o.fsdp = fsdp, o.seed = 3;
        mpmd_error err;
        mpmd_step *st = mpmd_jit_with_loop(m.g, lo->s, &o, &err);
        CHECK(st != NULL, "%s: %s", label, err.msg);
        if (!st) continue;
        mpmd_step_set_recording(st, 1);
        /* two steps: the figures are each step's, not a running total */
        for (int step = 0; step < 2; step++) {
            if (mpmd_step_set_input(st, m.x, x, sizeof(float) * (size_t)(R * MB * ROWS * d0)) != MPMD_OK ||
                mpmd_step_run(st) != MPMD_OK) {
                CHECK(0, "%s: run: %s", label, mpmd_step_error(st));
                break;
            }
            mpmd_step_stats s;
            if (mpmd_step_summary(st, &s, &err) != MPMD_OK) {
                CHECK(0, "%s: summary: %s", label, err.msg);
                break;
            }
            CHECK(s.num_ranks == lo->D, "%s: %d ranks in the summary, want %d", label, s.num_ranks, lo->D);
            for (int r = 0; r < s.num_ranks && r < lo->D; r++) {
                const int64_t want = fsdp ? expected_measured(&m, lo, R, r, 0) : 0;
                const int64_t book = fsdp ? expected_textbook(&m, lo, R, r) : 0;
                CHECK(s.ranks[r].collective_bytes == want,
                      "%s%s, step %d, rank %d: %lld bytes taken from the other replicas measured, want %lld "
                      "(off by %lld)",
                      label, fsdp ? ", fsdp" : ", plain", step + 1, r, (long long)s.ranks[r].collective_bytes,
                      (long long)want, (long long)(s.ranks[r].collective_bytes - want));
                CHECK(s.ranks[r].collective_expected == book,
                      "%s%s, step %d, rank %d: textbook %lld bytes, want %lld (off by %lld)", label,
                      fsdp ? ", fsdp" : ", plain", step + 1, r, (long long)s.ranks[r].collective_expected,
                      (long long)book, (long long)(s.ranks[r].collective_expected - book));
                /* every replica: the last ones' parts of the gradients are
                 * shorter, or empty */
                for (int d = 1; fsdp && d < R; d++) {
                    const mpmd_rank_state *rs = mpmd_runtime_state(st, r, d, 0);
                    const int64_t wd = expected_measured(&m, lo, R, r, d);
                    CHECK(
                        rs && rs->coll_bytes == wd,
                        "%s, fsdp, step %d, rank %d replica %d: %lld bytes taken from the others, want %lld "
                        "(off by %lld)",
                        label, step + 1, r, d, rs ? (long long)rs->coll_bytes : -1LL, (long long)wd,
                        rs ? (long long)(rs->coll_bytes - wd) : 0LL);
                }
            }
            mpmd_step_stats_free(&s);
        }
        /* the printed table says the same numbers */
        char *text = summary_text(st);
        if (fsdp) {
            char line[256];
            snprintf(line, sizeof line, "FSDP over %d replicas (%d parameters sharded, gathered per task)", R,
                     m.np);
            CHECK(text && strstr(text, line), "%s: the summary lacks \"%s\": %s", label, line,
                  text ? text : "");
            for (int r = 0; r < lo->D; r++) {
                snprintf(line, sizeof line, "  %4d  %14lld B measured (", r,
                         (long long)expected_measured(&m, lo, R, r, 0));
                const char *at = text ? strstr(text, line) : NULL;
                CHECK(at, "%s: the summary lacks \"%s\": %s", label, line, text ? text : "");
                snprintf(line, sizeof line, "gathered), %14lld B textbook",
                         (long long)expected_textbook(&m, lo, R, r));
                CHECK(at && strstr(at, line), "%s: rank %d's line lacks \"%s\": %s", label, r, line,
                      text ? text : "");
            }
        } else {
            CHECK(text && !strstr(text, "FSDP over"), "%s, plain: the summary has an FSDP table: %s", label,
                  text ? text : "");
        }
        free(text);
        mpmd_step_free(st);
    }
    free(x);
    mpmd_graph_free(m.g);
}

int main(void) {
    mpmd_error err;
    layout lay[5] = {{"the loop (2-stage model)", 2, 1, NULL, 0},
                     {"Std1F1B S=2", 2, 2, NULL, 0},
                     {"GPipe S=2", 2, 2, NULL, 0},
                     {"ZeroBubble S=2", 2, 2, NULL, 1},
                     {"Interleaved1F1B S=4 D=2", 4, 2, NULL, 0}};
    if (mpmd_schedule_std1f1b(2, MB, &lay[1].s, &err) || mpmd_schedule_gpipe(2, MB, &lay[2].s, &err) ||
        mpmd_schedule_zerobubble(2, MB, &lay[3].s, &err) ||
        mpmd_schedule_interleaved1f1b(4, 2, MB, 0, &lay[4].s, &err)) {
        fprintf(stderr, "schedule: %s\n", err.msg);
        return 1;
    }
    for (int R = 2; R <= 3; R++)
        for (int i = 0; i < 5; i++)
            check_layout(&lay[i], R);
    /* 1-element parameters (the last stage's g and b): replica 0's shard is
     * the whole value, the others' all padding, and replica 0 still takes
     * the others' parts of its gradient */
    widths2[2] = 1;
    for (int R = 2; R <= 3; R++) {
        check_layout(&lay[0], R);
        check_layout(&lay[1], R);
    }
    for (int i = 0; i < 5; i++)
        mpmd_schedule_free(lay[i].s);
    return tu_report("test_fsdp_bytes");
}
