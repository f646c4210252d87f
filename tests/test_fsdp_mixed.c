/* FSDP in mixed precision, its two gather policies, and what it leaves
 * whole:
 *
 * - bf16 and f16 compute (the layers cast their f32 parameters before the
 *   loop): every parameter is sharded, each replica casting its shard, and
 *   the loss and parameters after two AdamW steps are plain data
 *   parallelism's bits, gathered per task and per step, on the loop and on
 *   2-stage pipelines (1F1B, ZeroBubble, Interleaved on one rank), over 2
 *   and 3 replicas, with and without a clip by the global norm; a weight
 *   read both in f32 (stage 0) and through its cast (stage 1) is gathered
 *   in both dtypes;
 * - the bytes a replica takes from the others: the reduce-scatter of every
 *   f32 gradient, plus each gather of a parameter in the dtype it is read
 *   in, (R - 1) shards of ceil(numel / R) elements: bf16 gathers half of
 *   f32's; gathered per step, one 16-bit copy per step whatever the
 *   microbatch count;
 * - a parameter whose gradient a hand-written norm reads stays whole, and
 *   the summary says so, naming the op; FSDP with nothing to shard is an
 *   error saying why. */
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { ROWS = 2, W = 6, H = 10, MAXMB = 4 };

typedef struct model {
    mpmd_graph *g;
    mpmd_value x, loss;
    int np, mb;
    mpmd_value p[8], grad[8];
} model;

/* tied: stage 0 reads w0 in f32 (x w0, before the cast to the compute
 * dtype), stage 1 through its cast (h w0^T); a dense pair between. clip 0:
 * no clipping; norm_by_hand: the sum of squares of the first gradient is
 * kept (it then stays whole). */
static model build(mpmd_dtype dt, int mb, int tied, float clip, int norm_by_hand) {
    model m;
    memset(&m, 0, sizeof m);
    m.mb = mb;
    mpmd_graph *g = m.g = mpmd_graph_new();
    mpmd_set_compute_dtype(g, dt);
    m.x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(mb * ROWS, W));
    mpmd_value w0 = tied ? mpmd_param(g, "w0", MPMD_SHAPE(W, W), MPMD_NORMAL(0.8f)) : MPMD_NONE;
    mpmd_loop_begin(g, mb);
    mpmd_value h = mpmd_microbatch(g, m.x);
    if (tied) h = mpmd_tanh(g, mpmd_matmul(g, h, w0, 0));
    h = mpmd_cast(g, h, dt);
    h = mpmd_gelu(g, mpmd_dense(g, "d0", h, H, MPMD_BIAS));
    h = mpmd_enter_stage(g, h);
    h = mpmd_layer_norm_layer(g, "ln", mpmd_dense(g, "d1", h, W, MPMD_BIAS), 1e-5f);
    if (tied) h = mpmd_matmul(g, h, mpmd_transpose(g, mpmd_cast(g, w0, dt)), 0);
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, mpmd_cast(g, h, MPMD_F32)), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    loss = mpmd_enter_stage(g, loss);
    m.loss = mpmd_value_and_grad(g, loss, 0, NULL, 8, m.p, m.grad, &m.np);
    mpmd_value gs[8];
    memcpy(gs, m.grad, sizeof gs);
    if (clip > 0) TU_DROP(mpmd_clip_by_global_norm(g, m.np, gs, clip));
    if (norm_by_hand) mpmd_keep(g, mpmd_sum(g, mpmd_square(g, m.grad[0]), MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_adamw(g, m.np, m.p, gs, mpmd_scalar(g, 1e-2f), (mpmd_adam_opts){0.9f, 0.99f, 1e-3f, 0.01f, NULL});
    return m;
}

typedef struct outcome {
    char hash[65];
    float loss;
    int sharded;     /* parameters sharded, from the plan's printout */
    int64_t coll[2]; /* replica 0's bytes taken from the others, per step */
    int64_t gath[2]; /* of them, the gathers' */
    int ok;
} outcome;

/* The step's plan (or after a run its summary) as text in *text (freed by
 * the caller). */
static void text_of(mpmd_step *st, int summary, char **text) {
    size_t len = 0;
    *text = NULL;
    FILE *f = open_memstream(text, &len);
    if (!f) return;
    mpmd_error err;
    if (summary)
        mpmd_step_print_summary(st, f, &err);
    else
        mpmd_step_print(st, f);
    fclose(f);
}

static outcome run(const model *m, const mpmd_schedule *s, int R, int fsdp, mpmd_fsdp_gather when,
                   const float *x, const char *label) {
    outcome r;
    memset(&r, 0, sizeof r);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 4, o.data_parallel = R, o.fsdp = fsdp, o.fsdp_gather = when;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m->g, s, &o, &err);
    CHECK(st != NULL, "%s: %s", label, err.msg);
    if (!st) return r;
    char *text;
    text_of(st, 0, &text);
    const char *at = text ? strstr(text, "FSDP (") : NULL;
    if (at) r.sharded = atoi(at + 6);
    free(text);
    mpmd_step_set_recording(st, 1);
    for (int step = 0; step < 2; step++) {
        if (mpmd_step_set_input(st, m->x, x, sizeof(float) * (size_t)(R * m->mb * ROWS * W)) ||
            mpmd_step_run(st)) {
            CHECK(0, "%s: %s", label, mpmd_step_error(st));
            mpmd_step_free(st);
            return r;
        }
        mpmd_step_stats ss;
        if (!mpmd_step_summary(st, &ss, &err)) {
            r.coll[step] = ss.ranks[0].collective_bytes;
            r.gath[step] = ss.ranks[0].gathered_bytes;
            mpmd_step_stats_free(&ss);
        }
    }
    CHECK(mpmd_step_read(st, m->loss, &r.loss, sizeof r.loss) == MPMD_OK, "%s: %s", label,
          mpmd_step_error(st));
    mpmd_step_params_sha256(st, r.hash);
    mpmd_step_free(st);
    r.ok = 1;
    return r;
}

/* Replica 0's share of everything: what it takes from the others per step.
 * Gathers: each of `gathers` gathers per step of a value of n elements in
 * dtype size es: (R - 1) ceil(n / R) es bytes; reduce-scatters: each f32
 * gradient's replica-0 part, (R - 1) min(ceil(n / R), n) 4 bytes. */
static int64_t shard_bytes(int64_t n, int R, int es) { return (int64_t)(R - 1) * ((n + R - 1) / R) * es; }

static void mixed(void) {
    mpmd_schedule *sched[4] = {NULL};
    mpmd_error err;
    const int MB = 2;
    if (mpmd_schedule_std1f1b(2, MB, &sched[1], &err) || mpmd_schedule_zerobubble(2, MB, &sched[2], &err) ||
        mpmd_schedule_interleaved1f1b(2, 1, MB, 0, &sched[3], &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    static const char *const names[4] = {"loop", "std1f1b", "zerobubble", "interleaved1f1b D=1"};
    float x[3 * MAXMB * ROWS * W];
    tu_fill(x, 3 * MAXMB * ROWS * W, 5);
    for (int di = 0; di < 2; di++) {
        const mpmd_dtype dt = di ? MPMD_F16 : MPMD_BF16;
        for (int clip = 0; clip <= 1; clip++) {
            model m = build(dt, MB, 1, clip ? 0.02f : 0.0f, 0);
            CHECK(mpmd_graph_status(m.g) == MPMD_OK, "%s", mpmd_graph_error(m.g));
            for (int R = 2; R <= 3; R++) {
                for (int k = 0; k < 4; k++) {
                    if (R == 3 && k > 1 && tu_quick()) continue;
                    char label[128];
                    snprintf(label, sizeof label, "%s%s, %s x %d replicas", mpmd_dtype_name(dt),
                             clip ? ", clipped" : "", names[k], R);
                    outcome dp = run(&m, sched[k], R, 0, MPMD_GATHER_PER_TASK, x, label);
                    for (int when = 0; when < 2; when++) {
                        char fl[160];
                        snprintf(fl, sizeof fl, "%s, fsdp gathered per %s", label, when ? "step" : "task");
                        outcome f = run(&m, sched[k], R, 1, (mpmd_fsdp_gather)when, x, fl);
                        CHECK(f.ok && dp.ok && !strcmp(f.hash, dp.hash) && f.loss == dp.loss,
                              "%s: not plain data parallelism's bits (loss %.9g vs %.9g)", fl, f.loss,
                              dp.loss);
                        CHECK(f.sharded == m.np, "%s: %d of %d parameters sharded", fl, f.sharded, m.np);
                    }
                }
            }
            mpmd_graph_free(m.g);
        }
    }
    for (int k = 1; k < 4; k++)
        mpmd_schedule_free(sched[k]);
}

/* The bytes, on the loop of an untied model (every parameter read through
 * its cast, once per microbatch: the loop's one task reads them all). */
static void bytes(void) {
    float x[3 * MAXMB * ROWS * W];
    tu_fill(x, 3 * MAXMB * ROWS * W, 6);
    for (int R = 2; R <= 3; R++) {
        int64_t got[3][2]; /* [f32, bf16, f16][per task, per step] */
        for (int di = 0; di < 3; di++) {
            const mpmd_dtype dt = di == 0 ? MPMD_F32 : di == 1 ? MPMD_BF16 : MPMD_F16;
            const int es = di ? 2 : 4;
            for (int mb = 2; mb <= 4; mb += 2) {
                model m = build(dt, mb, 0, 0.0f, 0);
                int64_t rs = 0, one_copy = 0;
                for (int i = 0; i < m.np; i++) {
                    const mpmd_type t = mpmd_value_type(m.g, m.p[i]);
                    const int64_t n = mpmd_type_numel(&t);
                    const int64_t part = (n + R - 1) / R < n ? (n + R - 1) / R : n;
                    rs += (int64_t)(R - 1) * part * 4;
                    one_copy += shard_bytes(n, R, es);
                }
                for (int when = 0; when < 2; when++) {
                    char label[128];
                    snprintf(label, sizeof label, "%s, %d microbatches x %d replicas, gathered per %s",
                             mpmd_dtype_name(dt), mb, R, when ? "step" : "task");
                    outcome f = run(&m, NULL, R, 1, (mpmd_fsdp_gather)when, x, label);
                    const int64_t want = rs + one_copy * (when ? 1 : mb);
                    CHECK(f.coll[0] == want && f.coll[1] == want,
                          "%s: %lld and %lld bytes per step, want %lld", label, (long long)f.coll[0],
                          (long long)f.coll[1], (long long)want);
                    CHECK(f.gath[0] == want - rs && f.gath[1] == want - rs,
                          "%s: %lld and %lld bytes gathered, want %lld", label, (long long)f.gath[0],
                          (long long)f.gath[1], (long long)(want - rs));
                    if (mb == 2) got[di][when] = f.coll[0] - rs;
                }
                mpmd_graph_free(m.g);
            }
        }
        CHECK(got[1][0] * 2 == got[0][0] && got[2][0] * 2 == got[0][0],
              "x %d replicas: gathered per task, bf16 %lld and f16 %lld bytes are not half of f32's %lld", R,
              (long long)got[1][0], (long long)got[2][0], (long long)got[0][0]);
    }
}

static void whole(void) {
    float x[3 * MAXMB * ROWS * W];
    tu_fill(x, 3 * MAXMB * ROWS * W, 7);
    model m = build(MPMD_BF16, 2, 1, 0.0f, 1); /* w0's gradient read by a norm written by hand */
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.data_parallel = 2, o.fsdp = 1;
    mpmd_error err;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    if (st) {
        mpmd_step_set_recording(st, 1);
        CHECK(!mpmd_step_set_input(st, m.x, x, sizeof(float) * 2 * 2 * ROWS * W) && !mpmd_step_run(st), "%s",
              mpmd_step_error(st));
        char *text;
        text_of(st, 1, &text);
        CHECK(text && strstr(text, "FSDP left 1 parameter whole on every replica:") &&
                  strstr(text, "\"w0\" is read after the loop by %") && strstr(text, "(square)"),
              "the summary does not name w0 and the square reading its gradient: %s", text ? text : "");
        CHECK(text && strstr(text, "FSDP over 2 replicas (6 parameters sharded, gathered per task)"),
              "the other parameters are not all sharded: %s", text ? text : "");
        free(text);
        mpmd_step_free(st);
    }
    mpmd_graph_free(m.g);
    /* nothing to shard: every gradient read by hand */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xi = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(3, 3), MPMD_NORMAL(1.0f));
    mpmd_loop_begin(g, 2);
    mpmd_value l = mpmd_sum(g, mpmd_matmul(g, mpmd_microbatch(g, xi), w, 0), MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value p, gr;
    int n;
    TU_DROP(mpmd_value_and_grad(g, l, 0, NULL, 1, &p, &gr, &n));
    mpmd_value twice = mpmd_mul_scalar(g, gr, 2.0f);
    mpmd_sgd(g, 1, &p, &twice, mpmd_scalar(g, 0.1f));
    st = mpmd_jit_with_loop(g, NULL, &o, &err);
    CHECK(!st &&
              strstr(err.msg,
                     "fsdp is on but no parameter can be sharded: \"w\" has an update whose gradient %") &&
              strstr(err.msg, "(mul_scalar) is not a sum of loop results"),
          "nothing to shard: %s", st ? "compiled" : err.msg);
    mpmd_step_free(st);
    mpmd_graph_free(g);
}

int main(void) {
    mixed();
    bytes();
    whole();
    return tu_report("test_fsdp_mixed");
}
