/* basic - the counterpart of JaxPP's examples/basic.py.
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
 * Block's closing LayerNorm. The loss is printed every 10 steps.
 *
 *     build/examples/basic [--threads N]
 */
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
    BLOCKS = 2,       /* Blocks = pipeline stages */
    MICROBATCHES = 4, /* microbatches per step */
    STEPS = 300,      /* training steps */
    DATASET = 1024    /* sequences in the training set */
};

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
    int threads = 0;
    const char *backend = NULL;
    mpmd_dtype precision = MPMD_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > 1024) {
                fprintf(stderr, "basic: --threads expects a count >= 0, got \"%s\"\n", argv[i]);
                return 2;
            }
            threads = (int)v;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = argv[++i];
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *p = argv[++i];
            if (strcmp(p, "f32") && strcmp(p, "bf16")) {
                fprintf(stderr, "basic: --precision is f32 or bf16, got \"%s\"\n", p);
                return 2;
            }
            precision = strcmp(p, "bf16") ? MPMD_F32 : MPMD_BF16;
        } else {
            fprintf(stderr, "usage: basic [--threads N] [--backend cpu|cuda] [--precision f32|bf16]\n");
            return 2;
        }
    }

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
        h = mpmd_transformer_block(g, name, h, HEADS, 1);
        h = mpmd_enter_stage(g, h); /* one stage per Block; the last marker closes the loss's stage */
    }
    /* MSE over this microbatch, scaled so the loop's sum is the batch mean */
    mpmd_value d = mpmd_sub(g, mpmd_cast(g, h, MPMD_F32), mpmd_microbatch(g, y));
    mpmd_value loss = mpmd_mul_scalar(g, mpmd_mean(g, mpmd_square(g, d), 0, NULL, 0), 1.0f / MICROBATCHES);
    int np = mpmd_graph_params(g, NULL, 0);
    mpmd_value *params = malloc(sizeof(mpmd_value) * (size_t)(np + 1));
    mpmd_value *grads = malloc(sizeof(mpmd_value) * (size_t)(np + 1));
    if (!params || !grads) {
        fprintf(stderr, "basic: out of memory\n");
        return 1;
    }
    mpmd_graph_params(g, params, np);
    mpmd_grad(g, loss, np, params, grads);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < np; i++)
        grads[i] = mpmd_loop_reduce(g, grads[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_adamw(g, np, params, grads, mpmd_scalar(g, 3e-3f), MPMD_ADAM_DEFAULTS); /* optax.adam(3e-3) */
    mpmd_keep(g, total);
    if (mpmd_graph_status(g)) {
        fprintf(stderr, "basic: building the step failed: %s\n", mpmd_graph_error(g));
        return 1;
    }

    mpmd_error err;
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = threads;
    eo.backend = backend;
    mpmd_exec *ex = mpmd_exec_new(g, &eo, &err);
    if (!ex) {
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
    printf("basic: %d Blocks (width %d, %d heads), %d parameter tensors, batch %d in %d microbatches\n",
           BLOCKS, WIDTH, HEADS, np, BATCH, MICROBATCHES);
    const size_t batch_bytes = sizeof(float) * BATCH * SEQ * WIDTH;
    int rc = 0;
    for (int step = 1; step <= STEPS; step++) {
        /* batches walk through the data set in order */
        int64_t first = ((int64_t)(step - 1) * BATCH) % DATASET;
        mpmd_exec_set_input(ex, x, xs + first * SEQ * WIDTH, batch_bytes);
        mpmd_exec_set_input(ex, y, ys + first * SEQ * WIDTH, batch_bytes);
        float l;
        if (mpmd_exec_run(ex) || mpmd_exec_read(ex, total, &l, sizeof l)) {
            fprintf(stderr, "basic: step %d: %s\n", step, mpmd_exec_error(ex));
            rc = 1;
            break;
        }
        if (!isfinite(l)) {
            fprintf(stderr, "step %d: loss is %s\n", step, isnan(l) ? "nan" : "inf");
            rc = 1;
            break;
        }
        if (step % 10 == 0 || step == 1) printf("step %3d  loss %.5f\n", step, l);
    }
    free(xs);
    free(ys);
    free(params);
    free(grads);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return rc;
}
