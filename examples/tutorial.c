/* tutorial - JaxPP's tutorial notebook, in C.
 *
 * The notebook trains a Transformer of 8 Blocks (post-LN: attention,
 * residual, LayerNorm, Dense 4x, gelu, Dense, residual, LayerNorm) on a
 * regression with an MSE loss and optax.adamw(1e-3), the batch of 8
 * sequences cut into 4 microbatches. It trains it three ways and shows
 * that the numbers do not change:
 *
 *   1. the plain microbatch loop on one device (jax.lax.scan);
 *   2. pipelined with Interleaved1F1B(num_stages=4, mpmd_dim=4): a
 *      pipeline_yield after every 2 Blocks, one stage per device;
 *   3. pipelined with Interleaved1F1B(num_stages=8, mpmd_dim=4): a
 *      pipeline_yield after every Block, two stages per device.
 *
 * Here the same: the step is one graph (the microbatch loop over the
 * forward and backward pass, then AdamW), built once per stage count since
 * the stage markers (mpmd_enter_stage) are part of the graph. Run 1 is
 * mpmd_exec; runs 2 and 3 are mpmd_jit_with_loop on 4 in-process ranks.
 * For each run it prints the losses, the median step time, and for the
 * pipelined runs each rank's task list and the ranks that hold each
 * Block's parameters (the notebook's MpmdArray mpmd_idxs), and checks that
 * the losses and the parameters are bitwise equal to run 1's.
 *
 * As in the notebook, each microbatch's loss is the mean over its
 * elements and the loop sums them (treduce with Add), so the printed loss
 * is the sum of the 4 microbatch means. The width and the sequence are
 * scaled down (the notebook: d_model 1024, seq 2048) to run in seconds on
 * a CPU.
 *
 *     build/examples/tutorial [--steps N] [--d-model N] [--seq N] [--threads N] [--print-program]
 *
 * With --fsdp it goes on as the notebook's baseline does, with the
 * parameters sharded inside the data axis (FSDP, ZeRO-3), 4 replicas of
 * the batch's share in all:
 *
 *   4. FSDP only: the loop on 4 replicas, 2 sequences each;
 *   5. the pipeline with FSDP inside: Interleaved1F1B(num_stages=4,
 *      mpmd_dim=2) with 2 FSDP replicas of each rank, 4 sequences each.
 *
 * Each is checked bitwise against plain data parallelism of the same
 * layout (the same graph, every replica holding every parameter), and
 * prints the parameter and optimizer-state bytes a rank holds either way.
 * (The replicas average their losses and gradients, so these runs train
 * as the loop does but not with its bits.)
 *
 * With --tensor-parallel M every Block is split over M model ranks
 * (Megatron's way: attention by heads, the MLP by its hidden width):
 *
 *   6. tensor parallelism only: the loop on M model ranks, against run 1
 *      within float tolerance (the split sums run in another order);
 *   7. the pipeline with tensor parallelism inside: Interleaved1F1B(
 *      num_stages=4, mpmd_dim=2) with M model ranks each, bitwise equal to
 *      run 6, and the parameter bytes each rank holds against run 1's.
 *
 * Exit status: 0 when every pipelined run matches the one-rank loop
 * bitwise (and every FSDP run its data-parallel twin), 1 when one does not
 * or a run fails, 2 for bad options.
 */
#include "program.h"
#include "mpmd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    NUM_LAYERS = 8, /* Blocks */
    NUM_MB = 4,     /* microbatches */
    BATCH = 8,      /* sequences per step */
    HEADS = 8,      /* attention heads of each Block */
    NUM_RANKS = 4   /* pipeline ranks (the notebook's 4 GPUs) */
};

static const char *usage = "usage: tutorial [options]\n"
                           "JaxPP's tutorial in C: an 8-Block transformer trained with the one-rank\n"
                           "microbatch loop, then pipelined with Interleaved1F1B on 4 in-process ranks\n"
                           "(4 and 8 stages); checks that all three give the same bits.\n"
                           "\n"
                           "  --steps N          training steps of each run, at least 2 (default 6)\n"
                           "  --d-model N        model width, a multiple of 8 heads (default 64)\n"
                           "  --seq N            sequence length (default 32)\n"
                           "  --threads N        kernel threads of the one-rank loop, 0 for all cores\n"
                           "                     (default 0; each pipelined rank gets cores / 4)\n"
                           "  --backend NAME     cpu (default) or cuda, for every run\n"
                           "  --precision P      compute dtype of the Blocks: f32 (default) or bf16\n"
                           "  --print-program    also print each pipelined step's per-rank programs\n"
                           "  --fsdp             then FSDP: the loop on 4 sharded replicas, and the\n"
                           "                     pipeline on 2 ranks with 2 sharded replicas each\n"
                           "  --tensor-parallel M  then every Block split over M model ranks (M divides\n"
                           "                     the 8 heads): the loop, and the pipeline on 2 ranks\n"
                           "  --help             this text\n";

typedef struct options {
    long long steps, d_model, seq, threads;
    int print_program, fsdp;
    long long tensor_parallel;
    const char *backend;
    mpmd_dtype precision;
} options;

static int bad_option(const char *msg, const char *arg) {
    fprintf(stderr, "tutorial: %s \"%s\"\n(run tutorial --help for the options)\n", msg, arg);
    return 2;
}

/* An integer in [lo, hi] for option `opt`. */
static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr,
                "tutorial: %s expects an integer, got \"%s\"\n(run tutorial --help for the options)\n", opt,
                s);
        return 2;
    }
    if (v < lo || v > hi) {
        fprintf(
            stderr,
            "tutorial: %s must be between %lld and %lld, got %lld\n(run tutorial --help for the options)\n",
            opt, lo, hi, v);
        return 2;
    }
    *out = v;
    return 0;
}

/* 0 to go on, 2 for a bad option, -1 after --help. */
static int parse_args(int argc, char **argv, options *o) {
    o->steps = 6;
    o->d_model = 64;
    o->seq = 32;
    o->threads = 0;
    o->print_program = 0;
    o->fsdp = 0;
    o->tensor_parallel = 1;
    o->backend = NULL;
    o->precision = MPMD_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (!strcmp(a, "--print-program")) {
            o->print_program = 1;
            continue;
        }
        if (!strcmp(a, "--fsdp")) {
            o->fsdp = 1;
            continue;
        }
        if (!strcmp(a, "--precision")) {
            if (i + 1 >= argc) return bad_option("a value is needed after", a);
            const char *p = argv[++i];
            if (!strcmp(p, "f32"))
                o->precision = MPMD_F32;
            else if (!strcmp(p, "bf16"))
                o->precision = MPMD_BF16;
            else
                return bad_option("--precision is f32 or bf16, got", p);
            continue;
        }
        if (!strcmp(a, "--backend")) {
            if (i + 1 >= argc || !argv[i + 1][0]) return bad_option("a value is needed after", a);
            o->backend = argv[++i];
            continue;
        }
        long long *dst = NULL, lo = 1, hi = 4096;
        if (!strcmp(a, "--steps"))
            dst = &o->steps, lo = 2, hi = 100000;
        else if (!strcmp(a, "--d-model"))
            dst = &o->d_model;
        else if (!strcmp(a, "--seq"))
            dst = &o->seq;
        else if (!strcmp(a, "--threads"))
            dst = &o->threads, lo = 0, hi = 1024;
        else if (!strcmp(a, "--tensor-parallel"))
            dst = &o->tensor_parallel, lo = 1, hi = HEADS;
        if (!dst) return bad_option(strncmp(a, "--", 2) ? "unexpected argument" : "unknown option", a);
        if (i + 1 >= argc) return bad_option("a value is needed after", a);
        int rc = parse_int(a, argv[++i], lo, hi, dst);
        if (rc) return rc;
    }
    if (HEADS % o->tensor_parallel) {
        fprintf(stderr, "tutorial: --tensor-parallel %lld does not divide the %d attention heads\n",
                o->tensor_parallel, HEADS);
        return 2;
    }
    if (o->d_model % HEADS) {
        fprintf(stderr, "tutorial: --d-model %lld is not a multiple of the %d attention heads\n", o->d_model,
                HEADS);
        return 2;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* splitmix64: data that is the same on every machine */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* n floats uniform in [-1, 1) drawn from `seed` */
static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        x[i] =
            (float)((double)(mix64(seed * 0x100000001b3ull + (uint64_t)i) >> 11) / 4503599627370496.0 - 1.0);
}

/* The notebook's model and training step. */
typedef struct model {
    mpmd_graph *g;
    mpmd_value x, targets; /* f32 [BATCH, seq, d_model] */
    mpmd_value loss;       /* the sum of the microbatch losses, kept */
} model;

/* The Transformer of NUM_LAYERS Blocks; with num_stages > 0 it is the
 * notebook's AnnotatedTransformer: a stage marker after every
 * NUM_LAYERS / num_stages Blocks, the last one after the loss. */
static mpmd_status build_split(const options *o, int num_stages, int64_t batch, int num_mb, int model_ranks,
                               model *m, mpmd_error *err) {
    mpmd_graph *g = m->g = mpmd_graph_new();
    if (!g) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    if (model_ranks > 1) mpmd_set_tensor_parallel(g, model_ranks); /* the Blocks split themselves */
    const int64_t C = o->d_model, T = o->seq;
    m->x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(batch, T, C));
    m->targets = mpmd_input(g, "targets", MPMD_F32, MPMD_SHAPE(batch, T, C));

    mpmd_loop_begin(g, num_mb); /* jaxpp.api.treduce over the microbatches */
    mpmd_value x = mpmd_microbatch(g, m->x), t = mpmd_microbatch(g, m->targets);
    x = mpmd_cast(g, x, o->precision); /* the Blocks compute in it; their parameters stay f32 */
    for (int i = 0; i < NUM_LAYERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "block_%d", i);
        x = mpmd_transformer_block(g, name, x, HEADS, MPMD_NOT_CAUSAL);
        if (num_stages > 0 && (i + 1) % (NUM_LAYERS / num_stages) == 0 && i + 1 < NUM_LAYERS)
            x = mpmd_enter_stage(g, x); /* pipeline_yield */
    }
    /* loss_fn: mean((predictions - targets) ** 2) */
    mpmd_value loss = mpmd_mean(g, mpmd_square(g, mpmd_sub(g, mpmd_cast(g, x, MPMD_F32), t)), MPMD_ALL_AXES,
                                MPMD_DROP_DIMS);
    if (num_stages > 0) loss = mpmd_enter_stage(g, loss); /* closes the last stage */

    int cap = mpmd_graph_params(g, NULL, 0), np;
    mpmd_value *params = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *params);
    mpmd_value *grads = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *grads);
    if (!params || !grads) {
        free(params), free(grads);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    }
    /* treduce(jax.value_and_grad(loss_fn)): gradients, the loop's sums, its end */
    m->loss = mpmd_value_and_grad(g, loss, 0, NULL, cap, params, grads, &np);

    /* state.apply_gradients with optax.adamw(learning_rate=0.001), whose
     * weight decay defaults to 1e-4 */
    mpmd_adam_opts adam = MPMD_ADAM_DEFAULTS;
    adam.weight_decay = 1e-4f;
    mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 1e-3f), adam);
    free(params), free(grads);
    if (mpmd_graph_status(g) != MPMD_OK)
        return mpmd_error_set(err, mpmd_graph_status(g), "building the model: %s", mpmd_graph_error(g));
    return MPMD_OK;
}

static mpmd_status build_share(const options *o, int num_stages, int64_t batch, int num_mb, model *m,
                               mpmd_error *err) {
    return build_split(o, num_stages, batch, num_mb, 1, m, err);
}

/* The whole batch in NUM_MB microbatches. */
static mpmd_status build(const options *o, int num_stages, model *m, mpmd_error *err) {
    return build_share(o, num_stages, BATCH, NUM_MB, m, err);
}

/* What a run leaves for the comparison. */
typedef struct run_result {
    float *losses; /* [steps] */
    char sha[65];
    double median_ms;
} run_result;

/* One step through either runner. */
typedef struct runner {
    mpmd_exec *ex;
    mpmd_step *st;
} runner;

static mpmd_status runner_step(runner *r, const model *m, const float *x, const float *t, size_t bytes,
                               float *loss) {
    if (r->ex) {
        mpmd_status rc;
        if ((rc = mpmd_exec_set_input(r->ex, m->x, x, bytes)) ||
            (rc = mpmd_exec_set_input(r->ex, m->targets, t, bytes)) || (rc = mpmd_exec_run(r->ex)))
            return rc;
        return mpmd_exec_read(r->ex, m->loss, loss, sizeof *loss);
    }
    mpmd_status rc;
    if ((rc = mpmd_step_set_input(r->st, m->x, x, bytes)) ||
        (rc = mpmd_step_set_input(r->st, m->targets, t, bytes)) || (rc = mpmd_step_run(r->st)))
        return rc;
    return mpmd_step_read(r->st, m->loss, loss, sizeof *loss);
}

/* train_with_progress: `steps` steps on the same batch; the first warms up
 * and is not timed. Prints each step's loss and the median step time. */
static int train(runner *r, const model *m, const options *o, const float *x, const float *t,
                 run_result *res) {
    const size_t bytes = (size_t)(BATCH * o->seq * o->d_model) * sizeof(float);
    double *times = malloc((size_t)o->steps * sizeof *times);
    if (!times) {
        fprintf(stderr, "tutorial: out of memory\n");
        return 1;
    }
    for (long long s = 0; s < o->steps; s++) {
        double t0 = now_s();
        if (runner_step(r, m, x, t, bytes, &res->losses[s])) {
            fprintf(stderr, "tutorial: step %lld: %s\n", s + 1,
                    r->ex ? mpmd_exec_error(r->ex) : mpmd_step_error(r->st));
            free(times);
            return 1;
        }
        times[s] = now_s() - t0;
        printf("  training loss after step %lld: %.9g\n", s + 1, res->losses[s]);
    }
    res->median_ms = 1e3 * median(times + 1, (int)o->steps - 1);
    printf("  step time (median of steps 2..%lld): %.1f ms\n", o->steps, res->median_ms);
    if (r->ex)
        mpmd_exec_params_sha256(r->ex, res->sha);
    else
        mpmd_step_params_sha256(r->st, res->sha);
    printf("  params_sha256=%s\n", res->sha);
    free(times);
    return 0;
}

/* The notebook's "print(updated_state.params['block_i']['Dense_0']['kernel'])":
 * which ranks hold each Block's first MLP kernel, and the step counter. */
static void print_where(const mpmd_step *st, const mpmd_graph *g) {
    char name[64], tb[64];
    printf("  where the parameters live (mpmd_step_where):\n");
    for (int i = 0; i <= NUM_LAYERS; i++) {
        if (i < NUM_LAYERS)
            snprintf(name, sizeof name, "block_%d/mlp/dense_0/kernel", i);
        else
            snprintf(name, sizeof name, "optim/step");
        mpmd_value v = mpmd_lookup(g, name);
        if (!mpmd_is_value(v)) continue;
        int ranks[NUM_RANKS];
        int n = mpmd_step_where(st, v, ranks, NUM_RANKS);
        mpmd_type ty = mpmd_value_type(g, v);
        printf("    %-28s %-12s mpmd_idxs=(", name, mpmd_type_str(&ty, tb, sizeof tb));
        for (int k = 0; k < n && k < NUM_RANKS; k++)
            printf("%s%d", k ? ", " : "", ranks[k]);
        printf("%s)\n", n == 1 ? "," : "");
    }
}

/* A pipelined run: Interleaved1F1B(num_stages, NUM_RANKS) on the model
 * built with num_stages markers. Returns 0 when it ran and matched `ref`. */
static int pipelined(const options *o, int num_stages, const float *x, const float *t,
                     const run_result *ref) {
    model m;
    mpmd_error err;
    mpmd_schedule *s = NULL;
    mpmd_step *st = NULL;
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.backend = o->backend;
    run_result res = {NULL, "", 0};
    int rc = 1;
    printf(
        "\n== pipelined: Interleaved1F1B(num_stages=%d, mpmd_dim=%d), a marker after every %d Block%s ==\n",
        num_stages, NUM_RANKS, NUM_LAYERS / num_stages, NUM_LAYERS / num_stages > 1 ? "s" : "");
    if (build(o, num_stages, &m, &err)) {
        fprintf(stderr, "tutorial: %s\n", err.msg);
        mpmd_graph_free(m.g);
        return 1;
    }
    if (mpmd_schedule_interleaved1f1b(num_stages, NUM_RANKS, NUM_MB, 0, &s, &err) ||
        !(st = mpmd_jit_with_loop(m.g, s, &so, &err))) {
        fprintf(stderr, "tutorial: %s\n", err.msg);
        goto done;
    }
    printf("  task lists (mpmd_step_print_tasks):\n");
    fflush(stdout);
    mpmd_step_print_tasks(st, stdout);
    print_where(st, m.g);
    if (o->print_program) {
        printf("  per-rank programs (mpmd_step_print):\n");
        mpmd_step_print(st, stdout);
    }
    if (!(res.losses = malloc((size_t)o->steps * sizeof *res.losses))) {
        fprintf(stderr, "tutorial: out of memory\n");
        goto done;
    }
    runner r = {NULL, st};
    if (train(&r, &m, o, x, t, &res)) goto done;
    int same =
        !strcmp(res.sha, ref->sha) && !memcmp(res.losses, ref->losses, (size_t)o->steps * sizeof(float));
    printf("  speedup over the one-rank loop: %.2fx\n", ref->median_ms / res.median_ms);
    printf("  bitwise equal to the one-rank loop: %s\n", same ? "yes" : "no");
    if (!same)
        for (long long k = 0; k < o->steps; k++)
            if (memcmp(&res.losses[k], &ref->losses[k], sizeof(float)))
                fprintf(stderr, "tutorial: step %lld: loss %.9g, the one-rank loop's %.9g\n", k + 1,
                        res.losses[k], ref->losses[k]);
    rc = same ? 0 : 1;
done:
    free(res.losses);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
    return rc;
}

/* Parameter and optimizer-state bytes rank 0 holds. */
static long long state_bytes(const mpmd_step *st) {
    mpmd_memory_stats ms;
    return mpmd_step_memory(st, 0, &ms) ? -1 : (long long)(ms.parameters + ms.optimizer_state);
}

/* `replicas` replicas of each of `ranks` ranks (the loop when num_stages is
 * 0), each on BATCH / replicas sequences in `num_mb` microbatches: plain
 * data parallelism, then FSDP, which must give its bits. Returns 0 when it
 * did. */
static int sharded(const options *o, const char *title, int num_stages, int ranks, int replicas, int num_mb,
                   const float *x, const float *t, double loop_ms) {
    model m;
    mpmd_error err;
    mpmd_schedule *s = NULL;
    mpmd_step *st[2] = {NULL, NULL};
    run_result res[2] = {{NULL, "", 0}, {NULL, "", 0}};
    int rc = 1;
    printf("\n== %s ==\n", title);
    if (build_share(o, num_stages, BATCH / replicas, num_mb, &m, &err) ||
        (num_stages && mpmd_schedule_interleaved1f1b(num_stages, ranks, num_mb, 0, &s, &err))) {
        fprintf(stderr, "tutorial: %s\n", err.msg);
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.backend = o->backend;
        so.data_parallel = replicas;
        so.fsdp = k;
        printf(k ? "  FSDP: each replica holds 1/%d of the parameters, gradients and AdamW state\n"
                 : "  plain data parallelism over %d replicas (every replica holds every parameter)\n",
               replicas);
        if (!(st[k] = mpmd_jit_with_loop(m.g, s, &so, &err)) ||
            !(res[k].losses = malloc((size_t)o->steps * sizeof(float)))) {
            fprintf(stderr, "tutorial: %s\n", st[k] ? "out of memory" : err.msg);
            goto done;
        }
        runner r = {NULL, st[k]};
        if (train(&r, &m, o, x, t, &res[k])) goto done;
        printf(
            "  rank 0 holds %lld bytes of parameters and optimizer state; %.2fx the one-rank loop's speed\n",
            state_bytes(st[k]), loop_ms / res[k].median_ms);
    }
    int same = !strcmp(res[0].sha, res[1].sha) &&
               !memcmp(res[0].losses, res[1].losses, (size_t)o->steps * sizeof(float));
    printf("  FSDP holds %.2fx the state bytes of plain data parallelism; bitwise equal to it: %s\n",
           (double)state_bytes(st[1]) / (double)state_bytes(st[0]), same ? "yes" : "no");
    rc = same ? 0 : 1;
done:
    for (int k = 0; k < 2; k++)
        free(res[k].losses), mpmd_step_free(st[k]);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
    return rc;
}

/* Parameter bytes rank 0 holds. */
static long long param_bytes(const mpmd_step *st) {
    mpmd_memory_stats ms;
    return mpmd_step_memory(st, 0, &ms) ? -1 : (long long)ms.parameters;
}

/* 6. and 7.: the Blocks split over M model ranks, the loop then the
 * pipeline; 0 when the pipeline gave the split loop's bits. */
static int tensor_parallel(const options *o, const float *x, const float *t, const run_result *ref) {
    const int M = (int)o->tensor_parallel;
    long long whole_params = -1; /* the one-rank loop's, compiled again to count them */
    {
        model w;
        mpmd_error e;
        mpmd_step *ws = NULL;
        if (!build(o, 0, &w, &e) && (ws = mpmd_jit_with_loop(w.g, NULL, NULL, &e)))
            whole_params = param_bytes(ws);
        mpmd_step_free(ws);
        mpmd_graph_free(w.g);
    }
    model m[2] = {{NULL, {-1}, {-1}, {-1}}, {NULL, {-1}, {-1}, {-1}}};
    mpmd_error err;
    mpmd_schedule *s = NULL;
    mpmd_step *st[2] = {NULL, NULL};
    run_result res[2] = {{NULL, "", 0}, {NULL, "", 0}};
    int rc = 1;
    for (int k = 0; k < 2; k++) {
        printf(k ? "\n== pipeline with tensor parallelism inside: Interleaved1F1B(num_stages=4, mpmd_dim=2) "
                   "x %d model "
                   "ranks ==\n"
                 : "\n== tensor parallelism only: the loop, every Block split over %d model ranks ==\n",
               M);
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.backend = o->backend;
        if (build_split(o, k ? 4 : 0, BATCH, NUM_MB, M, &m[k], &err) ||
            (k && mpmd_schedule_interleaved1f1b(4, 2, NUM_MB, 0, &s, &err)) ||
            !(st[k] = mpmd_jit_with_loop(m[k].g, k ? s : NULL, &so, &err))) {
            fprintf(stderr, "tutorial: %s\n", err.msg);
            goto done;
        }
        if (!(res[k].losses = malloc((size_t)o->steps * sizeof(float)))) goto done;
        runner r = {NULL, st[k]};
        if (train(&r, &m[k], o, x, t, &res[k])) goto done;
        printf("  rank 0 (model rank 0) holds %lld parameter bytes, %.2fx the one-rank loop's\n",
               param_bytes(st[k]), (double)param_bytes(st[k]) / (double)whole_params);
    }
    double worst = 0;
    for (long long k = 0; k < o->steps; k++) {
        double d =
            fabs((double)res[0].losses[k] - (double)ref->losses[k]) / (fabs((double)ref->losses[k]) + 1e-30);
        if (d > worst) worst = d;
    }
    int same = !strcmp(res[0].sha, res[1].sha) &&
               !memcmp(res[0].losses, res[1].losses, (size_t)o->steps * sizeof(float));
    printf("  losses of the split loop against the one-rank loop: within %.2g (relative)\n", worst);
    printf("  the pipeline bitwise equal to the split loop: %s\n", same ? "yes" : "no");
    rc = same && worst < 1e-4 ? 0 : 1;
done:
    for (int k = 0; k < 2; k++)
        free(res[k].losses), mpmd_step_free(st[k]), mpmd_graph_free(m[k].g);
    mpmd_schedule_free(s);
    return rc;
}

int main(int argc, char **argv) {
    program_start("tutorial", argv);
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) return 0;
    if (rc) return rc;
    printf(
        "tutorial: %d Blocks, d_model %lld, %d heads, seq %lld, batch %d in %d microbatches, AdamW lr 1e-3\n",
        NUM_LAYERS, o.d_model, HEADS, o.seq, BATCH, NUM_MB);

    const int64_t n = BATCH * o.seq * o.d_model;
    float *x = malloc((size_t)n * sizeof *x), *t = malloc((size_t)n * sizeof *t);
    run_result ref = {malloc((size_t)o.steps * sizeof(float)), "", 0};
    model m = {NULL, {-1}, {-1}, {-1}};
    mpmd_exec *ex = NULL;
    mpmd_error err;
    rc = 1;
    if (!x || !t || !ref.losses) {
        fprintf(stderr, "tutorial: out of memory\n");
        goto done;
    }
    fill(x, n, 1);
    fill(t, n, 2);

    /* 1. The plain Transformer, the microbatch loop on one rank. */
    if (o.threads)
        printf("\n== one rank: the plain microbatch loop (mpmd_exec, %lld thread%s) ==\n", o.threads,
               o.threads > 1 ? "s" : "");
    else
        printf("\n== one rank: the plain microbatch loop (mpmd_exec, all cores) ==\n");
    if (build(&o, 0, &m, &err)) {
        fprintf(stderr, "tutorial: %s\n", err.msg);
        goto done;
    }
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = (int)o.threads;
    eo.backend = o.backend;
    if (!(ex = mpmd_exec_new(m.g, &eo, &err))) {
        fprintf(stderr, "tutorial: %s\n", err.msg);
        goto done;
    }
    runner r = {ex, NULL};
    if (train(&r, &m, &o, x, t, &ref)) goto done;

    /* 2. and 3. Pipelined over 4 ranks: 4 stages, then 8. */
    int bad = pipelined(&o, NUM_RANKS, x, t, &ref);
    bad |= pipelined(&o, NUM_LAYERS, x, t, &ref);
    /* 4. and 5. FSDP inside the data axis, with and without a pipeline */
    if (o.fsdp) {
        bad |= sharded(&o, "FSDP only: the loop on 4 replicas, 2 sequences each in 2 microbatches", 0, 1, 4,
                       2, x, t, ref.median_ms);
        bad |= sharded(&o,
                       "pipeline with FSDP inside: Interleaved1F1B(num_stages=4, mpmd_dim=2) x 2 replicas, 4 "
                       "sequences each in 4 microbatches",
                       4, 2, 2, NUM_MB, x, t, ref.median_ms);
    }
    if (o.tensor_parallel > 1) bad |= tensor_parallel(&o, x, t, &ref);
    rc = bad ? 1 : 0;
done:
    mpmd_exec_free(ex);
    mpmd_graph_free(m.g);
    free(x), free(t), free(ref.losses);
    return rc;
}
