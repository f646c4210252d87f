/* bench_pipeline - how close pipelined steps come to their bounds.
 *
 * Three measurements, each validated before it is timed (the pipelined
 * step must give the one-rank loop's loss and parameters bit for bit; a
 * mismatch prints what differs and exits 1):
 *
 * (a) efficiency: the GPT of bench_train's small config with 8 layers
 *     (width 256, 4 heads, vocab 8192, seq 64), a batch of 8 sequences in 8
 *     microbatches, on 2 ranks x 1 kernel thread against the one-rank loop
 *     (mpmd_exec) on 1 thread. For every schedule that fits 2 ranks:
 *
 *         speedup          = loop step time / pipelined step time
 *         analytic_speedup = 2 (1 - b), b the schedule's bubble in the
 *                            simulation with JaxPP's unit costs (F 1, B 2,
 *                            A 1, W 1), which assumes equal stages
 *         ratio            = speedup / analytic_speedup   (target >= 0.9)
 *
 *     Interleaved schedules and DualPipeV get 4 stages (2 per rank), the
 *     others 2. The stages are not equal: the last one also holds the LM
 *     head (2 C V flops per token against 24 C^2 per block). So each line
 *     also gives flop_bound_speedup, the simulation's 2 (1 - b) with every
 *     stage's cost scaled by its matmul flops: what a perfect runtime
 *     could reach with these stages. Loop and pipelined steps are timed
 *     in turns (the machine may be shared); speedup is the median of the
 *     pairs' ratios, best_speedup the fastest loop step over the fastest
 *     pipelined one. A last line runs Std1F1B on a model
 *     whose stages are equal (8 of the tutorial's Blocks of the same
 *     width, MSE loss): the runtime against 2 (1 - b) itself.
 *
 * (b) runtime overhead per task: an MLP of width 4 with 8 layers, a marker
 *     after each, Interleaved1F1B on 4 ranks with 64 microbatches of one
 *     row, where kernels cost next to nothing. The one-rank loop runs the
 *     same kernels; what the pipeline takes beyond it, divided by the tasks
 *     it runs, is the runtime's cost per task: us_per_task in wall time,
 *     cpu_us_per_task in CPU time of the whole process. Stricter:
 *     busiest_rank_us_per_task, the pipelined step's wall time over the
 *     tasks of its busiest rank (kernels and dependency waits included).
 *
 * (c) compile time: mpmd_jit_with_loop alone (median of 3) for a 96-layer
 *     MLP with a marker per layer, 96 stages on 96 ranks and 256
 *     microbatches, Std1F1B and GPipe; the compiled step is run once and
 *     checked against the one-rank loop first.
 *
 * (d) scaling: the loop on 1 .. all cores' threads and Std1F1B on 2 .. as
 *     many ranks as cores (a 16-layer GPT), with the measured and the
 *     simulated bubble (below, at bench_scaling).
 *
 * Progress goes to stderr; after it, stdout gets one JSON object per line.
 *
 *     bench_pipeline [--only efficiency|overhead|compile|scaling] [--schedule NAME] [--steps N]
 *
 * --schedule limits (a) to one schedule (its command-line name, e.g.
 * std1f1b); --steps is the number of timed steps of (a) (default 5; (b)
 * takes ten times as many).
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mlp_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- timing ------------------------------------------------------------------ */

/* CPU time of every thread of the process. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The 1-minute load average, to judge how noisy the numbers are. */
static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* The JSON lines, printed at the end after all progress output. */
static char *json_out = NULL;
static size_t json_len = 0;
static FILE *json = NULL;

/* ---- one step through either runner --------------------------------------------- */

typedef struct feed {
    int n;
    const mpmd_value *inputs;
    void *const *data;
    const size_t *bytes;
} feed;

/* A GPT built for one benchmark run with the feed of its token batch (the
 * batch is shared between runs). Built in place: the feed points into it. */
typedef struct gpt_run {
    gpt_model m;
    mpmd_value in[2];
    void *data[2];
    size_t bytes[2];
    feed f;
} gpt_run;

static int gpt_run_new(const gpt_config *c, int32_t *tok, int32_t *tgt, gpt_run *r) {
    mpmd_error err;
    if (gpt_build(c, 1, &r->m, &err)) {
        fprintf(stderr, "bench_pipeline: gpt: %s\n", err.msg);
        return 1;
    }
    size_t nb = (size_t)(c->batch * c->seq) * sizeof(int32_t);
    r->in[0] = r->m.tokens, r->in[1] = r->m.targets;
    r->data[0] = tok, r->data[1] = tgt;
    r->bytes[0] = r->bytes[1] = nb;
    r->f = (feed){2, r->in, r->data, r->bytes};
    return 0;
}

typedef struct runner {
    mpmd_exec *ex;
    mpmd_step *st;
} runner;

static const char *runner_error(const runner *r) {
    return r->ex ? mpmd_exec_error(r->ex) : mpmd_step_error(r->st);
}

/* One step; its loss into *loss. */
static mpmd_status run_step(runner *r, const feed *f, mpmd_value loss_v, float *loss) {
    mpmd_status rc;
    for (int i = 0; i < f->n; i++) {
        rc = r->ex ? mpmd_exec_set_input(r->ex, f->inputs[i], f->data[i], f->bytes[i])
                   : mpmd_step_set_input(r->st, f->inputs[i], f->data[i], f->bytes[i]);
        if (rc) return rc;
    }
    if ((rc = r->ex ? mpmd_exec_run(r->ex) : mpmd_step_run(r->st))) return rc;
    return r->ex ? mpmd_exec_read(r->ex, loss_v, loss, sizeof *loss)
                 : mpmd_step_read(r->st, loss_v, loss, sizeof *loss);
}

static void runner_sha(runner *r, char hex[65]) {
    if (r->ex)
        mpmd_exec_params_sha256(r->ex, hex);
    else
        mpmd_step_params_sha256(r->st, hex);
}

/* A first step (validation and warm-up) and `steps` timed ones: *loss and
 * sha are the first step's, wall and cpu the medians of the timed steps. */
typedef struct timing {
    float loss;
    char sha[65];
    double wall_ms, cpu_ms;
} timing;

static int time_steps(const char *what, runner *r, const feed *f, mpmd_value loss_v, int steps, timing *t) {
    double *wall = malloc((size_t)(steps + 1) * sizeof *wall),
           *cpu = malloc((size_t)(steps + 1) * sizeof *cpu);
    int rc = 1;
    if (!wall || !cpu) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        goto done;
    }
    for (int s = 0; s <= steps; s++) {
        float l;
        double w0 = bench_now(), c0 = cpu_s();
        if (run_step(r, f, loss_v, &l)) {
            fprintf(stderr, "bench_pipeline: %s: %s\n", what, runner_error(r));
            goto done;
        }
        double w = bench_now() - w0, c = cpu_s() - c0;
        if (s == 0) {
            t->loss = l;
            runner_sha(r, t->sha);
        } else {
            wall[s - 1] = w, cpu[s - 1] = c;
        }
    }
    t->wall_ms = steps ? 1e3 * bench_median(wall, steps) : 0;
    t->cpu_ms = steps ? 1e3 * bench_median(cpu, steps) : 0;
    rc = 0;
done:
    free(wall), free(cpu);
    return rc;
}

/* The pipeline's first step against the loop's, bit for bit. */
static int same_bits(const char *what, const timing *loop, const timing *pipe) {
    if (!memcmp(&loop->loss, &pipe->loss, sizeof loop->loss) && !strcmp(loop->sha, pipe->sha)) return 1;
    fprintf(
        stderr,
        "bench_pipeline: %s: NOT bitwise equal to the one-rank loop: loss %.9g vs %.9g, params_sha256 %s vs "
        "%s\n",
        what, pipe->loss, loop->loss, pipe->sha, loop->sha);
    return 0;
}

/* Loop and pipeline steps taken in turns, so that both see the same load
 * on a shared machine: the medians of each and the median of the per-pair
 * speedups (loop time / pipeline time). */
typedef struct paired {
    double loop_ms, pipe_ms, speedup;
    double best_speedup; /* fastest loop step / fastest pipelined step: noise only adds time */
} paired;

static int time_paired(const char *what, runner *loop, runner *pipe, const feed *f, mpmd_value loss_v,
                       int steps, paired *out) {
    double *lt = malloc((size_t)steps * sizeof *lt), *pt = malloc((size_t)steps * sizeof *pt),
           *ratio = malloc((size_t)steps * sizeof *ratio);
    int rc = 1;
    if (!lt || !pt || !ratio) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        goto done;
    }
    for (int s = 0; s < steps; s++) {
        float l;
        double t0 = bench_now();
        if (run_step(loop, f, loss_v, &l)) {
            fprintf(stderr, "bench_pipeline: %s: one-rank loop: %s\n", what, runner_error(loop));
            goto done;
        }
        double t1 = bench_now();
        if (run_step(pipe, f, loss_v, &l)) {
            fprintf(stderr, "bench_pipeline: %s: %s\n", what, runner_error(pipe));
            goto done;
        }
        double t2 = bench_now();
        lt[s] = t1 - t0, pt[s] = t2 - t1, ratio[s] = lt[s] / pt[s];
    }
    out->loop_ms = 1e3 * bench_median(lt, steps); /* sorts lt: lt[0] is the fastest */
    out->pipe_ms = 1e3 * bench_median(pt, steps);
    out->speedup = bench_median(ratio, steps);
    out->best_speedup = lt[0] / pt[0];
    rc = 0;
done:
    free(lt), free(pt), free(ratio);
    return rc;
}

/* ---- an MLP with a marker per layer (mlp_model.h) ------------------------------- */

/* mlp_build, saying why when it fails; the caller frees m->g either way. */
static int build_mlp(int layers, int micro, int rows_per_mb, int width, mlp_model *m) {
    mpmd_status st = mlp_build(layers, micro, rows_per_mb, width, m);
    if (st == MPMD_ERR_NOMEM)
        fprintf(stderr, "bench_pipeline: mlp: out of memory\n");
    else if (st)
        fprintf(stderr, "bench_pipeline: mlp: %s\n", mpmd_graph_error(m->g));
    return st != MPMD_OK;
}

/* Deterministic data in [-1, 1). */
static void fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
    }
}

static mpmd_schedule *new_schedule(mpmd_schedule_kind kind, int stages, int ranks, int micro) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_new(kind, stages, ranks, micro, 0, &s, &err)) {
        fprintf(stderr, "bench_pipeline: %s\n", err.msg);
        return NULL;
    }
    return s;
}

static int64_t total_tasks(const mpmd_schedule *s) {
    int64_t t = 0;
    for (int r = 0; r < s->num_ranks; r++)
        t += s->ranks[r].num_tasks;
    return t;
}

/* ---- (a) pipeline efficiency ---------------------------------------------------- */

/* The GPT's forward matmul flops per token of each stage: 24 C^2 per block
 * (qkv 6 C^2, out 2 C^2, MLP 16 C^2) plus 4 T C of attention, and 2 C V for
 * the LM head on the last stage. Backward costs twice the forward on every
 * stage alike, so the forward's proportions are the stage's. */
static void stage_flops(int layers, int64_t width, int64_t seq, int64_t vocab, int stages, const int *blocks,
                        double *scale) {
    double block = 24.0 * (double)width * (double)width + 4.0 * (double)seq * (double)width;
    double sum = 0;
    for (int s = 0; s < stages; s++) {
        int nb = blocks ? blocks[s] : layers / stages;
        scale[s] = block * nb + (s == stages - 1 ? 2.0 * (double)width * (double)vocab : 0);
        sum += scale[s];
    }
    for (int s = 0; s < stages; s++)
        scale[s] *= stages / sum; /* mean 1 */
}

/* NULL: every schedule; otherwise only the one of this command-line name */
static const char *only_schedule = NULL;

/* One graph with `stages` markers: the one-rank loop (1 thread) against
 * each named schedule on 2 ranks x 1 thread. scale: the stages' relative
 * costs for the flop bound. */
static int efficiency_on(const char *model, const mpmd_graph *g, const feed *f, mpmd_value loss, int stages,
                         int micro, const double *scale, const char *const *names, int nnames, int steps) {
    const int D = 2;
    mpmd_error err;
    /* the loop's first step, from fresh parameters, is what every
     * pipelined first step must reproduce */
    timing loop;
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    eo.seed = 1;
    runner lr = {mpmd_exec_new(g, &eo, &err), NULL};
    char what[160];
    snprintf(what, sizeof what, "%s, %d stages, one-rank loop", model, stages);
    if (!lr.ex) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", what, err.msg);
        return 1;
    }
    int rc = time_steps(what, &lr, f, loss, 0, &loop);
    for (int k = 0; k < nnames && !rc; k++) {
        if (only_schedule && strcmp(only_schedule, names[k])) continue;
        int kind = mpmd_schedule_kind_from_name(names[k]);
        mpmd_schedule *s = kind < 0 ? NULL : new_schedule((mpmd_schedule_kind)kind, stages, D, micro);
        if (!s) {
            rc = 1;
            break;
        }
        mpmd_sim *sim = NULL, *wsim = NULL;
        mpmd_cost_model wc = MPMD_COST_DEFAULTS;
        wc.stage_scale = scale;
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.threads_per_rank = 1;
        so.seed = 1;
        runner pr = {NULL, NULL};
        timing first;
        paired p;
        if (mpmd_schedule_simulate(s, NULL, &sim, &err, NULL) ||
            mpmd_schedule_simulate(s, &wc, &wsim, &err, NULL) ||
            !(pr.st = mpmd_jit_with_loop(g, s, &so, &err))) {
            fprintf(stderr, "bench_pipeline: %s: %s\n", s->name, err.msg);
            rc = 1;
        } else if (time_steps(s->name, &pr, f, loss, 0, &first) || !same_bits(s->name, &loop, &first) ||
                   time_paired(s->name, &lr, &pr, f, loss, steps, &p)) {
            rc = 1;
        } else {
            double analytic = D * (1.0 - sim->bubble), bound = D * (1.0 - wsim->bubble);
            fprintf(stderr,
                    "  %s, %s: loop %.1f ms, pipeline %.1f ms, speedup %.2f, analytic %.2f, ratio %.2f\n",
                    model, s->name, p.loop_ms, p.pipe_ms, p.speedup, analytic, p.speedup / analytic);
            fprintf(json,
                    "{\"bench\": \"pipeline_efficiency\", \"model\": \"%s\", \"schedule\": \"%s\", "
                    "\"name\": \"%s\", \"stages\": %d, \"ranks\": %d, \"microbatches\": %d, "
                    "\"threads_per_rank\": 1, \"loop_ms\": %.2f, \"pipeline_ms\": %.2f, \"speedup\": %.3f, "
                    "\"bubble\": %.4f, \"analytic_speedup\": %.3f, \"ratio\": %.3f, "
                    "\"flop_bound_speedup\": %.3f, \"ratio_to_flop_bound\": %.3f, \"best_speedup\": %.3f, "
                    "\"bitwise_equal\": true, \"load_avg\": %.2f}\n",
                    model, names[k], s->name, stages, D, micro, p.loop_ms, p.pipe_ms, p.speedup, sim->bubble,
                    analytic, p.speedup / analytic, bound, p.speedup / bound, p.best_speedup, loadavg());
        }
        mpmd_step_free(pr.st);
        mpmd_sim_free(sim);
        mpmd_sim_free(wsim);
        mpmd_schedule_free(s);
    }
    mpmd_exec_free(lr.ex);
    return rc;
}

/* Equal stages: 8 of the tutorial's Blocks (width 256, 4 heads, seq 64)
 * with an MSE loss, a marker after every 8 / stages Blocks, AdamW. Without
 * an embedding or an LM head every stage does the same work, so this is
 * the runtime against 2 (1 - b) itself. */
static int build_blocks(int layers, int64_t width, int heads, int64_t seq, int64_t batch, int micro,
                        int stages, mpmd_graph **out, mpmd_value *x, mpmd_value *y, mpmd_value *loss_out) {
    mpmd_graph *g = *out = mpmd_graph_new();
    if (!g) return 1;
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(batch, seq, width));
    *y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(batch, seq, width));
    mpmd_loop_begin(g, micro);
    mpmd_value h = mpmd_microbatch(g, *x), t = mpmd_microbatch(g, *y);
    for (int i = 0; i < layers; i++) {
        char name[32];
        snprintf(name, sizeof name, "block_%d", i);
        h = mpmd_transformer_block(g, name, h, heads, 0);
        if ((i + 1) % (layers / stages) == 0 && i + 1 < layers) h = mpmd_enter_stage(g, h);
    }
    mpmd_value loss =
        mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, mpmd_sub(g, h, t)), 0, NULL, 0), 1.0f / (float)micro);
    loss = mpmd_enter_stage(g, loss);
    int np = mpmd_graph_params(g, NULL, 0);
    mpmd_value *ps = malloc((size_t)np * sizeof *ps), *gs = malloc((size_t)np * sizeof *gs);
    if (!ps || !gs) {
        free(ps), free(gs);
        return 1;
    }
    mpmd_graph_params(g, ps, np);
    mpmd_grad(g, loss, np, ps, gs);
    *loss_out = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_adamw(g, np, ps, gs, mpmd_scalar(g, 1e-4f), MPMD_ADAM_DEFAULTS);
    mpmd_keep(g, *loss_out);
    free(ps), free(gs);
    if (mpmd_graph_status(g) != MPMD_OK) {
        fprintf(stderr, "bench_pipeline: blocks: %s\n", mpmd_graph_error(g));
        return 1;
    }
    return 0;
}

static int bench_efficiency(int steps) {
    /* every schedule that fits 2 ranks: S = D = 2, or 2 stages per rank */
    static const char *const two[] = {"gpipe", "std1f1b", "eager1f1b", "zerobubble"};
    static const char *const four[] = {"interleaved1f1b", "kimik2", "dualpipev", "interleavedgpipe"};
    static const char *const equal[] = {"std1f1b"};
    const int micro = 8;
    gpt_config c = gpt_config_default();
    c.layers = 8;
    c.width = 256;
    c.heads = 4;
    c.vocab = 8192;
    c.seq = 64;
    c.batch = 8;
    c.microbatches = micro;
    c.tie_embeddings = 0;
    c.lr = 1e-4f;
    size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    if (!tok || !tgt) {
        free(tok), free(tgt);
        return 1;
    }
    gpt_random_batch(c.vocab, c.batch, c.seq, 7, 0, tok, tgt); /* one batch for every run and step */
    int rc = 0;
    /* the graph depends on the stage count: one one-rank loop per graph */
    for (int stages = 2; stages <= 4 && !rc; stages += 2) {
        c.stages = stages;
        gpt_run r;
        if ((rc = gpt_run_new(&c, tok, tgt, &r))) break;
        double scale[4];
        stage_flops(c.layers, c.width, c.seq, c.vocab, stages, NULL, scale);
        rc = efficiency_on("gpt-small-8l", r.m.g, &r.f, r.m.loss, stages, micro, scale,
                           stages == 2 ? two : four, 4, steps);
        gpt_model_free(&r.m);
    }
    /* the same GPT with its 2 stages balanced by cost (gpt_stage_blocks:
     * the LM head's stage gets fewer blocks) */
    if (!rc) {
        c.stages = 2;
        c.balance_stages = 1;
        gpt_run r;
        if (!(rc = gpt_run_new(&c, tok, tgt, &r))) {
            int blocks[2];
            double scale[2];
            gpt_stage_blocks(&c, blocks);
            stage_flops(c.layers, c.width, c.seq, c.vocab, 2, blocks, scale);
            rc =
                efficiency_on("gpt-small-8l-balanced", r.m.g, &r.f, r.m.loss, 2, micro, scale, two, 4, steps);
            gpt_model_free(&r.m);
        }
        c.balance_stages = 0;
    }
    free(tok), free(tgt);
    if (rc || (only_schedule && strcmp(only_schedule, equal[0]))) return rc;

    mpmd_graph *g = NULL;
    mpmd_value x, y, loss;
    const int64_t numel = c.batch * c.seq * c.width;
    float *xd = malloc((size_t)numel * sizeof *xd), *yd = malloc((size_t)numel * sizeof *yd);
    rc = 1;
    if (xd && yd && !build_blocks(c.layers, c.width, c.heads, c.seq, c.batch, micro, 2, &g, &x, &y, &loss)) {
        fill(xd, numel, 5);
        fill(yd, numel, 6);
        mpmd_value in[2] = {x, y};
        void *data[2] = {xd, yd};
        size_t bytes[2] = {(size_t)numel * sizeof(float), (size_t)numel * sizeof(float)};
        feed f = {2, in, data, bytes};
        double scale[2];
        stage_flops(c.layers, c.width, c.seq, 0, 2, NULL, scale);
        rc = efficiency_on("blocks-8l", g, &f, loss, 2, micro, scale, equal, 1, steps);
    }
    mpmd_graph_free(g);
    free(xd), free(yd);
    return rc;
}

/* ---- (b) runtime overhead per task ------------------------------------------------- */

static int bench_overhead(int steps) {
    const int layers = 8, D = 4, micro = 64, rows = 1, width = 4;
    steps *= 10; /* steps take milliseconds here */
    mlp_model m;
    if (build_mlp(layers, micro, rows, width, &m)) {
        mpmd_graph_free(m.g);
        return 1;
    }
    const int64_t n = (int64_t)micro * rows * width;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    int rc = 1;
    mpmd_schedule *s = new_schedule(MPMD_SCHED_INTERLEAVED1F1B, layers, D, micro);
    runner loop_r = {NULL, NULL}, pipe_r = {NULL, NULL};
    mpmd_error err;
    if (!x || !y || !s) goto done;
    fill(x, n, 1);
    fill(y, n, 2);
    mpmd_value in[2] = {m.x, m.y};
    void *data[2] = {x, y};
    size_t bytes[2] = {(size_t)n * sizeof(float), (size_t)n * sizeof(float)};
    feed f = {2, in, data, bytes};
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = 1;
    timing loop, pipe;
    if (!(loop_r.ex = mpmd_exec_new(m.g, &eo, &err)) ||
        !(pipe_r.st = mpmd_jit_with_loop(m.g, s, &so, &err))) {
        fprintf(stderr, "bench_pipeline: overhead: %s\n", err.msg);
        goto done;
    }
    if (time_steps("overhead: one-rank loop", &loop_r, &f, m.loss, steps, &loop) ||
        time_steps(s->name, &pipe_r, &f, m.loss, steps, &pipe) || !same_bits(s->name, &loop, &pipe))
        goto done;
    int64_t tasks = total_tasks(s), busiest = 0;
    for (int r = 0; r < s->num_ranks; r++)
        if (s->ranks[r].num_tasks > busiest) busiest = s->ranks[r].num_tasks;
    double wall_us = 1e3 * (pipe.wall_ms - loop.wall_ms) / (double)tasks;
    double cpu_us = 1e3 * (pipe.cpu_ms - loop.cpu_ms) / (double)tasks;
    fprintf(stderr, "  overhead, %s: loop %.3f ms, pipeline %.3f ms, %lld tasks: %.2f us/task (cpu %.2f)\n",
            s->name, loop.wall_ms, pipe.wall_ms, (long long)tasks, wall_us, cpu_us);
    fprintf(
        json,
        "{\"bench\": \"runtime_overhead\", \"model\": \"mlp-w4-8l\", \"schedule\": \"%s\", \"tasks\": %lld, "
        "\"loop_ms\": %.3f, \"pipeline_ms\": %.3f, \"us_per_task\": %.2f, \"upper_us_per_task\": %.2f, "
        "\"cpu_us_per_task\": %.2f, \"busiest_rank_us_per_task\": %.2f, \"bitwise_equal\": true, "
        "\"load_avg\": %.2f}\n",
        s->name, (long long)tasks, loop.wall_ms, pipe.wall_ms, wall_us, 1e3 * pipe.wall_ms / (double)tasks,
        cpu_us, 1e3 * pipe.wall_ms / (double)busiest, loadavg());
    rc = 0;
done:
    mpmd_exec_free(loop_r.ex);
    mpmd_step_free(pipe_r.st);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
    free(x), free(y);
    return rc;
}

/* ---- (c) compile time ---------------------------------------------------------------- */

static int bench_compile(void) {
    const int layers = 96, micro = 256, rows = 1, width = 4;
    static const mpmd_schedule_kind kinds[] = {MPMD_SCHED_STD1F1B, MPMD_SCHED_GPIPE};
    mlp_model m;
    double t0 = bench_now();
    if (build_mlp(layers, micro, rows, width, &m)) {
        mpmd_graph_free(m.g);
        return 1;
    }
    double build_ms = 1e3 * (bench_now() - t0);
    const int64_t n = (int64_t)micro * rows * width;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    int rc = 1;
    runner loop_r = {NULL, NULL};
    mpmd_error err;
    timing loop;
    if (!x || !y) goto done;
    fill(x, n, 3);
    fill(y, n, 4);
    mpmd_value in[2] = {m.x, m.y};
    void *data[2] = {x, y};
    size_t bytes[2] = {(size_t)n * sizeof(float), (size_t)n * sizeof(float)};
    feed f = {2, in, data, bytes};
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    if (!(loop_r.ex = mpmd_exec_new(m.g, &eo, &err))) {
        fprintf(stderr, "bench_pipeline: compile: %s\n", err.msg);
        goto done;
    }
    if (time_steps("compile: one-rank loop", &loop_r, &f, m.loss, 1, &loop)) goto done;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        mpmd_schedule *s = new_schedule(kinds[k], layers, 0, micro);
        if (!s) goto done;
        double t[3], run_ms = 0;
        int ok = 1;
        for (int rep = 0; rep < 3 && ok; rep++) {
            double c0 = bench_now();
            mpmd_step *st = mpmd_jit_with_loop(m.g, s, NULL, &err);
            t[rep] = bench_now() - c0;
            if (!st) {
                fprintf(stderr, "bench_pipeline: compile: %s: %s\n", s->name, err.msg);
                ok = 0;
                break;
            }
            if (rep == 0) { /* validate the plan by running it */
                runner r = {NULL, st};
                timing pipe;
                double r0 = bench_now();
                ok = !time_steps(s->name, &r, &f, m.loss, 0, &pipe) && same_bits(s->name, &loop, &pipe);
                run_ms = 1e3 * (bench_now() - r0);
            }
            mpmd_step_free(st);
        }
        if (ok) {
            double ms = 1e3 * bench_median(t, 3);
            fprintf(stderr, "  compile %s: %.1f ms (a step runs in %.0f ms)\n", s->name, ms, run_ms);
            fprintf(json,
                    "{\"bench\": \"compile_time\", \"model\": \"mlp-w4-96l\", \"schedule\": \"%s\", "
                    "\"stages\": %d, "
                    "\"ranks\": %d, \"microbatches\": %d, \"tasks\": %lld, \"graph_build_ms\": %.2f, "
                    "\"compile_ms\": %.2f, \"first_step_ms\": %.1f, \"bitwise_equal\": true, \"load_avg\": "
                    "%.2f}\n",
                    s->name, layers, s->num_ranks, micro, (long long)total_tasks(s), build_ms, ms, run_ms,
                    loadavg());
        }
        mpmd_schedule_free(s);
        if (!ok) goto done;
    }
    rc = 0;
done:
    mpmd_exec_free(loop_r.ex);
    mpmd_graph_free(m.g);
    free(x), free(y);
    return rc;
}

/* ---- (d) scaling on this machine's cores ---------------------------------------- */

/* A GPT of 16 layers (width 256, 4 heads, vocab 8192, seq 64), a batch of 16
 * sequences in 16 microbatches: the one-rank loop on 1, 2, 4, ... threads up
 * to the machine's cores, then Std1F1B on 2, 4, 8, 16 ranks of one thread
 * each (as many as there are cores). Each pipeline's first step is checked
 * bit for bit against the loop of its own graph; its last step is recorded
 * for the measured bubble, against the one simulated with the stages'
 * measured times (the gap is what the runtime loses: transfers, wake-ups,
 * memory bandwidth). bound = D (1 - b) of the schedule with each stage's
 * matmul flops; ratio = speedup over the 1-thread loop / bound. */
static int bench_scaling(int steps) {
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    gpt_config c = gpt_config_default();
    c.layers = 16, c.width = 256, c.heads = 4, c.vocab = 8192, c.seq = 64, c.batch = 16, c.microbatches = 16;
    c.tie_embeddings = 0, c.lr = 1e-4f;
    if (bench_smoke()) c.layers = 4, c.width = 64, c.vocab = 512, c.batch = 4, c.microbatches = 4;
    size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    if (!tok || !tgt) {
        free(tok), free(tgt);
        return 1;
    }
    gpt_random_batch(c.vocab, c.batch, c.seq, 7, 0, tok, tgt);
    int rc = 0;
    double loop1_ms = 0;
    for (int D = 1; D <= cores && D <= c.layers && !rc; D *= 2) {
        if (c.layers % D || c.microbatches < D) break;
        c.stages = D;
        gpt_run r;
        if ((rc = gpt_run_new(&c, tok, tgt, &r))) break;
        gpt_model *m = &r.m;
        const feed *f = &r.f;
        mpmd_error err;
        char what[160];
        if (D == 1) { /* the loop on 1, 2, 4, ... threads, and on every core */
            for (int t = 1; !rc; t = t * 2 > cores && t < cores ? cores : t * 2) {
                if (t > cores) break;
                mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
                eo.threads = t, eo.seed = 1;
                runner lr = {mpmd_exec_new(m->g, &eo, &err), NULL};
                timing tm;
                snprintf(what, sizeof what, "scaling: loop, %d threads", t);
                if (!lr.ex) {
                    fprintf(stderr, "bench_pipeline: %s: %s\n", what, err.msg);
                    rc = 1;
                } else if (!(rc = time_steps(what, &lr, f, m->loss, steps, &tm))) {
                    if (t == 1) loop1_ms = tm.wall_ms;
                    fprintf(stderr, "  %s: %.1f ms, speedup %.2f\n", what, tm.wall_ms, loop1_ms / tm.wall_ms);
                    fprintf(json,
                            "{\"bench\": \"scaling\", \"runner\": \"loop\", \"threads\": %d, \"cores\": %d, "
                            "\"layers\": %d, \"microbatches\": %d, \"tokens_per_microbatch\": %lld, "
                            "\"ms\": %.2f, \"speedup\": %.3f, \"blas_core\": \"%s\", \"load_avg\": %.2f}\n",
                            t, cores, c.layers, c.microbatches, (long long)(c.batch / c.microbatches * c.seq),
                            tm.wall_ms, loop1_ms / tm.wall_ms, mpmd_blas_core(), loadavg());
                }
                mpmd_exec_free(lr.ex);
                if (t == cores) break;
            }
            gpt_model_free(m);
            continue;
        }
        /* Std1F1B on D ranks: bits against this graph's loop, then timed */
        mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
        eo.threads = 1, eo.seed = 1;
        runner lr = {mpmd_exec_new(m->g, &eo, &err), NULL};
        mpmd_schedule *s = new_schedule(MPMD_SCHED_STD1F1B, D, D, c.microbatches);
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.threads_per_rank = 1, so.seed = 1;
        runner pr = {NULL, NULL};
        timing ref, first, tm;
        double *scale = malloc((size_t)D * sizeof *scale);
        mpmd_sim *wsim = NULL;
        mpmd_cost_model wc = MPMD_COST_DEFAULTS;
        snprintf(what, sizeof what, "scaling: Std1F1B on %d ranks", D);
        if (scale) stage_flops(c.layers, c.width, c.seq, c.vocab, D, NULL, scale);
        wc.stage_scale = scale;
        if (!lr.ex || !s || !scale || mpmd_schedule_simulate(s, &wc, &wsim, &err, NULL) ||
            !(pr.st = mpmd_jit_with_loop(m->g, s, &so, &err))) {
            fprintf(stderr, "bench_pipeline: %s: %s\n", what, lr.ex ? err.msg : "the loop did not compile");
            rc = 1;
        } else if (time_steps(what, &lr, f, m->loss, 0, &ref) ||
                   time_steps(what, &pr, f, m->loss, 0, &first) || !same_bits(what, &ref, &first) ||
                   time_steps(what, &pr, f, m->loss, steps, &tm)) {
            rc = 1;
        } else {
            /* one more step, recorded, for the measured bubble */
            mpmd_step_stats ss = {0};
            float l;
            mpmd_step_set_recording(pr.st, 1);
            if (run_step(&pr, f, m->loss, &l) || mpmd_step_summary(pr.st, &ss, &err)) {
                fprintf(stderr, "bench_pipeline: %s: %s\n", what, err.msg);
                rc = 1;
            } else {
                double speedup = loop1_ms / tm.wall_ms, bound = D * (1.0 - wsim->bubble);
                /* the measured bubble's wake-ups and transfers, in points */
                double wake = 0;
                for (int q = 0; q < D; q++)
                    wake += ss.ranks[q].wake_ms;
                const double wake_pts = 100 * wake / (D * ss.step_ms),
                             xfer_pts = 100 * ss.transfer_ms / (D * ss.step_ms);
                fprintf(
                    stderr,
                    "  %s: %.1f ms, speedup %.2f, bound %.2f, ratio %.2f; bubble measured %.1f%%, simulated "
                    "with the measured stage times %.1f%%; of the measured, %.1f points wake-ups, %.1f "
                    "transfers\n",
                    what, tm.wall_ms, speedup, bound, speedup / bound, 100 * ss.bubble,
                    100 * ss.simulated_bubble, wake_pts, xfer_pts);
                fprintf(
                    json,
                    "{\"bench\": \"scaling\", \"runner\": \"std1f1b\", \"ranks\": %d, \"threads_per_rank\": "
                    "1, "
                    "\"cores\": %d, \"layers\": %d, \"microbatches\": %d, \"ms\": %.2f, \"speedup\": %.3f, "
                    "\"flop_bound_speedup\": %.3f, \"ratio_to_bound\": %.3f, \"bubble_measured\": %.4f, "
                    "\"bubble_simulated\": %.4f, \"bubble_gap_points\": %.2f, \"wake_points\": %.2f, "
                    "\"transfer_points\": %.2f, \"bitwise_equal\": true, "
                    "\"blas_core\": \"%s\", \"load_avg\": %.2f}\n",
                    D, cores, c.layers, c.microbatches, tm.wall_ms, speedup, bound, speedup / bound,
                    ss.bubble, ss.simulated_bubble, 100 * (ss.bubble - ss.simulated_bubble), wake_pts,
                    xfer_pts, mpmd_blas_core(), loadavg());
            }
            mpmd_step_stats_free(&ss);
        }
        mpmd_step_free(pr.st);
        mpmd_exec_free(lr.ex);
        mpmd_schedule_free(s);
        mpmd_sim_free(wsim);
        free(scale);
        gpt_model_free(m);
    }
    free(tok), free(tgt);
    return rc;
}

int main(int argc, char **argv) {
    program_start("bench_pipeline", argv);
    int steps = 5, only = 0; /* 0 all, 1 efficiency, 2 overhead, 3 compile, 4 scaling */
    int schedule_given = 0;  /* --schedule: (a) alone of the schedule comparisons */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            const char *v = argv[++i];
            only = !strcmp(v, "efficiency") ? 1
                   : !strcmp(v, "overhead") ? 2
                   : !strcmp(v, "compile")  ? 3
                   : !strcmp(v, "scaling")  ? 4
                                            : -1;
            if (only < 0) {
                fprintf(stderr,
                        "bench_pipeline: --only is efficiency, overhead, compile or scaling, got \"%s\"\n",
                        v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--schedule") && i + 1 < argc) {
            only_schedule = argv[++i];
            schedule_given = 1;
            if (mpmd_schedule_kind_from_name(only_schedule) < 0) {
                fprintf(stderr, "bench_pipeline: --schedule: unknown schedule \"%s\"\n", only_schedule);
                return 2;
            }
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000) {
                fprintf(stderr, "bench_pipeline: --steps needs a count in [1, 1000], got \"%s\"\n", argv[i]);
                return 2;
            }
            steps = (int)v;
        } else {
            fprintf(stderr, "usage: bench_pipeline [--only efficiency|overhead|compile|scaling] [--schedule "
                            "NAME] [--steps N]\n");
            return 2;
        }
    }
    if (!(json = open_memstream(&json_out, &json_len))) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        return 1;
    }
    if (bench_smoke()) steps = 1, only_schedule = only_schedule ? only_schedule : "std1f1b";
    fprintf(stderr, "bench_pipeline: load average %.2f at the start\n", loadavg());
    int rc = 0;
    if (!rc && (only == 0 || only == 3)) rc = bench_compile();
    if (!rc && (only == 0 || only == 2)) rc = bench_overhead(steps);
    if (!rc && (only == 0 || only == 1)) rc = bench_efficiency(steps);
    if (!rc && (only == 0 || only == 4) && !schedule_given) rc = bench_scaling(steps);
    fclose(json);
    fflush(stderr);
    if (json_out) fputs(json_out, stdout);
    free(json_out);
    return rc;
}
