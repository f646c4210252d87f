/* basic - a setup check: a pipelined step and the unpipelined loop, side by
 * side. It serves as JaxPP's examples/basic.py serves JaxPP (run it first
 * on a new machine), but it is not a port of it: the model, the task and
 * the output are its own.
 *
 * A small model of the tutorial's transformer Blocks (attention, residual,
 * LayerNorm, Dense 4x, gelu, Dense, residual, LayerNorm), one pipeline stage
 * per Block, trained with Adam on a synthetic regression task with an MSE
 * loss. The training step is one graph: the microbatch loop (JaxPP's
 * treduce) over the forward and backward pass, then the Adam update.
 *
 * The task: for each sequence of random vectors, predict at every position
 * the standardised sum of the vector and the mean of the vectors up to it.
 * The prefix mean needs causal attention; the standardisation fits the
 * Block's closing LayerNorm.
 *
 * The step runs twice side by side on the same batches:
 * pipelined (a schedule over ranks, mpmd_jit_with_loop) and unpipelined
 * (the same call without a schedule); every step's losses must have the same
 * bits, and so must the parameters at the end. Both losses are printed every
 * 10 steps.
 *
 *     build/examples/basic [--schedule NAME] [--blocks B] [--ranks D] [--steps N] [--threads N]
 *                          [--backend cpu|cuda] [--precision f32|bf16]
 */
#include "program.h"
#include "mpmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BATCH = 32,       /* sequences per step */
    SEQ = 8,          /* positions per sequence */
    WIDTH = 32,       /* features per position */
    HEADS = 4,        /* attention heads */
    MICROBATCHES = 4, /* microbatches per step */
    DATASET = 1024    /* sequences in the training set */
};

static const char usage[] =
    "usage: basic [--schedule NAME] [--blocks B] [--ranks D] [--steps N] [--threads N]\n"
    "             [--backend cpu|cuda] [--precision f32|bf16]\n"
    "  --schedule NAME  gpipe, std1f1b (default), eager1f1b, zerobubble, interleaved1f1b, kimik2,\n"
    "                   dualpipev, interleavedgpipe\n"
    "  --blocks B       Blocks, one pipeline stage each (default 2)\n"
    "  --ranks D        pipeline ranks (default: the schedule's, B or B/2)\n"
    "  --steps N        training steps (default 300)\n"
    "  --threads N      kernel threads of the loop; each rank gets N / D (default 0: all cores)\n";

static int count(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

/* splitmix64, for data that is the same on every machine */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* x uniform in [-1, 1); y[t] = standardise(x[t] + mean(x[0..t])). */
static void make_data(float *x, float *y) {
    for (int64_t i = 0; i < (int64_t)DATASET * SEQ * WIDTH; i++)
        x[i] = (float)(mix64((uint64_t)i) >> 40) / (float)(1 << 23) - 1.0f;
    for (int s = 0; s < DATASET; s++) {
        for (int t = 0; t < SEQ; t++) {
            float *yr = y + ((int64_t)s * SEQ + t) * WIDTH, mean = 0, var = 0;
            for (int c = 0; c < WIDTH; c++) {
                float pre = 0;
                for (int q = 0; q <= t; q++)
                    pre += x[((int64_t)s * SEQ + q) * WIDTH + c];
                yr[c] = x[((int64_t)s * SEQ + t) * WIDTH + c] + pre / (float)(t + 1);
                mean += yr[c];
            }
            mean /= WIDTH;
            for (int c = 0; c < WIDTH; c++)
                var += (yr[c] - mean) * (yr[c] - mean);
            float inv = 1.0f / sqrtf(var / WIDTH + 1e-5f);
            for (int c = 0; c < WIDTH; c++)
                yr[c] = (yr[c] - mean) * inv;
        }
    }
}

int main(int argc, char **argv) {
    program_start("basic", argv);
    long threads = 0, blocks = 2, ranks = 0, steps = 300;
    const char *backend = NULL, *schedule = "std1f1b";
    mpmd_dtype precision = MPMD_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "basic: %s needs a value\n%s", a, usage);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "--threads"))
            bad = count(v, 0, 1024, &threads);
        else if (!strcmp(a, "--blocks"))
            bad = count(v, 1, 64, &blocks);
        else if (!strcmp(a, "--ranks"))
            bad = count(v, 1, 64, &ranks);
        else if (!strcmp(a, "--steps"))
            bad = count(v, 1, 1000000, &steps);
        else if (!strcmp(a, "--schedule"))
            bad = mpmd_schedule_kind_from_name(schedule = v) < 0;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--precision")) {
            bad = strcmp(v, "f32") && strcmp(v, "bf16");
            precision = strcmp(v, "bf16") ? MPMD_F32 : MPMD_BF16;
        } else {
            fprintf(stderr, "basic: unknown option \"%s\"\n%s", a, usage);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "basic: bad value \"%s\" for %s\n%s", v, a, usage);
            return 2;
        }
    }
    const int BLOCKS = (int)blocks;

    /* The training step: inputs are the whole batch; the loop body sees one
     * microbatch of BATCH / MICROBATCHES sequences. */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(BATCH, SEQ, WIDTH));
    mpmd_value y = mpmd_input(g, "y", MPMD_F32, MPMD_SHAPE(BATCH, SEQ, WIDTH));
    mpmd_loop_begin(g, MICROBATCHES);
    mpmd_value h = mpmd_cast(g, mpmd_microbatch(g, x), precision); /* the Blocks compute in it */
    for (int i = 0; i < BLOCKS; i++) {
        char name[32];
        snprintf(name, sizeof name, "block_%d", i);
        h = mpmd_transformer_block(g, name, h, HEADS, MPMD_CAUSAL);
        h = mpmd_enter_stage(g, h); /* one stage per Block; the last marker closes the loss's stage */
    }
    /* MSE over this microbatch, scaled so the loop's sum is the batch mean */
    mpmd_value d = mpmd_sub(g, mpmd_cast(g, h, MPMD_F32), mpmd_microbatch(g, y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), MPMD_ALL_AXES, MPMD_DROP_DIMS),
                                      1.0f / MICROBATCHES);
    /* treduce(value_and_grad(...)): the gradients, the loop's sums, the loop's end */
    int cap = mpmd_graph_params(g, NULL, 0), np;
    mpmd_value *params = malloc(sizeof(mpmd_value) * (size_t)(cap + 1));
    mpmd_value *grads = malloc(sizeof(mpmd_value) * (size_t)(cap + 1));
    if (!params || !grads) {
        fprintf(stderr, "basic: out of memory\n");
        return 1;
    }
    mpmd_value total = mpmd_value_and_grad(g, loss, 0, NULL, cap, params, grads, &np);
    mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 3e-3f), MPMD_ADAM_DEFAULTS); /* optax.adam(3e-3) */
    if (mpmd_graph_status(g)) {
        fprintf(stderr, "basic: building the step failed: %s\n", mpmd_graph_error(g));
        return 1;
    }

    /* The same step twice: pipelined, and the unpipelined loop (no schedule). */
    mpmd_error err;
    mpmd_schedule *sched;
    if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(schedule), BLOCKS, (int)ranks,
                          MICROBATCHES, 0, &sched, &err)) {
        fprintf(stderr, "basic: %s\n", err.msg);
        return 1;
    }
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.backend = backend;
    so.threads_per_rank =
        threads ? (int)(threads / sched->num_ranks > 0 ? threads / sched->num_ranks : 1) : 0;
    mpmd_step *pipe = mpmd_jit_with_loop(g, sched, &so, &err);
    so.threads_per_rank = (int)threads;
    mpmd_step *loop = pipe ? mpmd_jit_with_loop(g, NULL, &so, &err) : NULL;
    if (!pipe || !loop) {
        fprintf(stderr, "basic: %s\n", err.msg);
        return 1;
    }
    float *xs = malloc(sizeof(float) * DATASET * SEQ * WIDTH),
          *ys = malloc(sizeof(float) * DATASET * SEQ * WIDTH);
    if (!xs || !ys) {
        fprintf(stderr, "basic: out of memory\n");
        return 1;
    }
    make_data(xs, ys);
    printf("basic: %d Blocks (width %d, %d heads), %d parameter tensors, batch %d in %d microbatches; %s "
           "against "
           "the loop\n",
           BLOCKS, WIDTH, HEADS, np, BATCH, MICROBATCHES, sched->name);
    const size_t batch_bytes = sizeof(float) * BATCH * SEQ * WIDTH;
    int rc = 0;
    for (long step = 1; step <= steps && !rc; step++) {
        /* batches walk through the data set in order */
        int64_t first = ((int64_t)(step - 1) * BATCH) % DATASET;
        float l[2];
        mpmd_step *both[2] = {pipe, loop};
        for (int k = 0; k < 2 && !rc; k++) {
            if (mpmd_step_set_input(both[k], x, xs + first * SEQ * WIDTH, batch_bytes) ||
                mpmd_step_set_input(both[k], y, ys + first * SEQ * WIDTH, batch_bytes) ||
                mpmd_step_run(both[k]) || mpmd_step_read(both[k], total, &l[k], sizeof l[k])) {
                fprintf(stderr, "basic: step %ld (%s): %s\n", step, k ? "loop" : "pipelined",
                        mpmd_step_error(both[k]));
                rc = 1;
            }
        }
        if (rc) break;
        if (!isfinite(l[0])) {
            fprintf(stderr, "basic: step %ld: loss is %s\n", step, isnan(l[0]) ? "nan" : "inf");
            rc = 1;
        } else if (memcmp(&l[0], &l[1], sizeof l[0])) {
            fprintf(stderr, "basic: step %ld: the pipelined loss %.9g is not the loop's %.9g\n", step, l[0],
                    l[1]);
            rc = 1;
        } else if (step % 10 == 0 || step == 1) {
            printf("step %3ld  loss %.5f  (pipelined and loop: the same bits)\n", step, l[0]);
        }
    }
    char hash[2][65];
    mpmd_step_params_sha256(pipe, hash[0]);
    mpmd_step_params_sha256(loop, hash[1]);
    if (!rc) {
        rc = strcmp(hash[0], hash[1]) != 0;
        printf("parameters: %s\n", rc ? "DIFFER from the loop's" : "bitwise equal to the loop's");
        printf("params_sha256=%s\n", hash[0]);
    }
    mpmd_step_free(pipe);
    mpmd_step_free(loop);
    mpmd_schedule_free(sched);
    free(xs);
    free(ys);
    free(params);
    free(grads);
    mpmd_graph_free(g);
    return rc;
}
