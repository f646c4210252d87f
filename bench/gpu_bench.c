/* gpu_bench - GPT-2 124M training steps on a GPU (make bench-gpu).
 *
 * The model of ../shared/anchors/torch_gpt2.py: 12 layers, width 768, 12
 * heads, vocab 50257, tied embeddings, AdamW, batch 16 x sequence 1024 =
 * 16384 tokens a step, on random tokens. Two configurations, each timed as
 * the median of --steps steps after one warm-up step:
 *
 *   one rank    the one-rank loop (mpmd_exec), one microbatch
 *   pipeline    --stages stages as many ranks sharing the one GPU (a
 *               stream each), Std1F1B over --microbatches microbatches
 *
 * Prints progress on stderr, then one JSON line per configuration on
 * stdout: ms/step, tokens/s, model TFLOP/s (6 x params x tokens/s) and, for
 * the pipeline, its speed relative to the one rank. With --profile it also
 * prints the one rank's time by op (each op's device time, matrix products
 * by shape). --attention picks mpmd_attention's form (composed by default,
 * the faster one on cuBLAS today; fused: the fused kernels).
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mpmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    const char *backend;
    mpmd_dtype compute;
    int steps, stages, micro, profile, layers, fused;
    long long batch, seq;
} opts;

/* One configuration: stages == 0 is the one-rank loop. Returns the median
 * step in ms, or a negative number on failure. */
static double run(const opts *o, int stages, int micro, int64_t *params_out) {
    gpt_config c = gpt_config_default();
    c.layers = o->layers;
    c.width = 768;
    c.heads = 12;
    c.vocab = 50257;
    c.seq = o->seq;
    c.batch = o->batch;
    c.microbatches = micro;
    c.stages = stages ? stages : 1;
    c.tie_embeddings = 1;
    c.lr = 1e-4f;
    c.adam.weight_decay = 0.1f;
    c.compute = o->compute;
    c.fused_attention = o->fused;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        fprintf(stderr, "gpu_bench: %s\n", err.msg);
        return -1;
    }
    *params_out = gpt_param_count(&c);
    mpmd_exec *ex = NULL;
    mpmd_step *st = NULL;
    mpmd_schedule *s = NULL;
    if (!stages) {
        mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
        eo.backend = o->backend;
        eo.seed = 1;
        ex = mpmd_exec_new(m.g, &eo, &err);
    } else if (mpmd_schedule_std1f1b(stages, micro, &s, &err) == MPMD_OK) {
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.backend = o->backend;
        so.seed = 1;
        st = mpmd_jit_with_loop(m.g, s, &so, &err);
    }
    if (!ex && !st) {
        fprintf(stderr, "gpu_bench: %s\n", err.msg);
        mpmd_schedule_free(s);
        gpt_model_free(&m);
        return -1;
    }
    size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    double *t = malloc(sizeof(double) * (size_t)o->steps);
    double ms = -1;
    int ok = tok && tgt && t;
    for (int k = 0; ok && k <= o->steps; k++) {
        gpt_random_batch(c.vocab, c.batch, c.seq, 7, (uint64_t)k, tok, tgt);
        float loss = 0;
        double t0 = bench_now();
        if (ex) {
            ok = !mpmd_exec_set_input(ex, m.tokens, tok, nb) &&
                 !mpmd_exec_set_input(ex, m.targets, tgt, nb) && !mpmd_exec_run(ex) &&
                 !mpmd_exec_read(ex, m.loss, &loss, sizeof loss);
        } else {
            ok = !mpmd_step_set_input(st, m.tokens, tok, nb) &&
                 !mpmd_step_set_input(st, m.targets, tgt, nb) && !mpmd_step_run(st) &&
                 !mpmd_step_read(st, m.loss, &loss, sizeof loss);
        }
        double dt = bench_now() - t0;
        if (!ok) fprintf(stderr, "gpu_bench: %s\n", ex ? mpmd_exec_error(ex) : mpmd_step_error(st));
        if (k > 0) t[k - 1] = dt;
        fprintf(stderr, "  %s step %d: %.1f ms, loss %.4f\n", ex ? "one rank" : "pipeline", k, 1e3 * dt,
                loss);
    }
    if (ok) ms = 1e3 * bench_median(t, o->steps);
    if (ok && ex && o->profile) {
        mpmd_exec_set_profiling(ex, 1);
        if (mpmd_exec_run(ex) == MPMD_OK) mpmd_exec_print_profile(ex, stderr);
    }
    free(tok), free(tgt), free(t);
    mpmd_exec_free(ex);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
    return ms;
}

static int arg_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || end == s || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    program_start("gpu_bench", argv);
    opts o = {"cuda", MPMD_BF16, 10, 4, 4, 0, 12, 0, 16, 1024};
    for (int i = 1; i < argc; i++) {
        long long v = 0;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--profile")) {
            o.profile = 1;
            continue;
        }
        if (!val)
            bad = 1;
        else if (!strcmp(a, "--backend"))
            o.backend = val;
        else if (!strcmp(a, "--precision"))
            bad = !strcmp(val, "f32")    ? (o.compute = MPMD_F32, 0)
                  : !strcmp(val, "bf16") ? (o.compute = MPMD_BF16, 0)
                                         : 1;
        else if (!strcmp(a, "--attention"))
            bad = !strcmp(val, "fused") ? (o.fused = 1, 0) : !strcmp(val, "composed") ? (o.fused = 0, 0) : 1;
        else if (!strcmp(a, "--steps"))
            bad = arg_int(val, 1, 1000, &v), o.steps = (int)v;
        else if (!strcmp(a, "--stages"))
            bad = arg_int(val, 0, 12, &v), o.stages = (int)v;
        else if (!strcmp(a, "--microbatches"))
            bad = arg_int(val, 1, 1024, &v), o.micro = (int)v;
        else if (!strcmp(a, "--layers"))
            bad = arg_int(val, 1, 96, &v), o.layers = (int)v;
        else if (!strcmp(a, "--batch"))
            bad = arg_int(val, 1, 4096, &o.batch);
        else if (!strcmp(a, "--seq"))
            bad = arg_int(val, 1, 1 << 16, &o.seq);
        else
            bad = 1;
        if (bad) {
            fprintf(stderr,
                    "usage: gpu_bench [--backend NAME] [--precision f32|bf16] [--steps N] [--stages S (0: "
                    "none)]\n"
                    "                 [--microbatches M] [--layers L] [--batch B] [--seq T] [--profile]\n"
                    "                 [--attention fused|composed (default composed)]\n");
            return 2;
        }
        i++;
    }
    char why[512];
    if (mpmd_backend_check(o.backend, why, sizeof why)) {
        fprintf(stderr, "gpu_bench: backend %s: %s\n", o.backend, why);
        return 1;
    }
    int64_t params = 0;
    double one = run(&o, 0, 1, &params);
    if (one < 0) return 1;
    double tps = (double)(o.batch * o.seq) / (one / 1e3);
    printf("{\"bench\": \"gpu_train\", \"backend\": \"%s\", \"precision\": \"%s\", \"model\": \"gpt2-124m\", "
           "\"attention\": \"%s\", \"layers\": %d, \"params\": %lld, "
           "\"batch\": %lld, \"seq\": %lld, \"ranks\": 1, \"ms_per_step\": %.2f, \"tokens_per_s\": %.0f, "
           "\"model_tflops\": %.1f}\n",
           o.backend, mpmd_dtype_name(o.compute), o.fused ? "fused" : "composed", o.layers, (long long)params,
           o.batch, o.seq, one, tps, 6.0 * (double)params * tps / 1e12);
    fflush(stdout);
    if (o.stages > 0) {
        double pp = run(&o, o.stages, o.micro, &params);
        if (pp < 0) return 1;
        double ptps = (double)(o.batch * o.seq) / (pp / 1e3);
        printf("{\"bench\": \"gpu_train\", \"backend\": \"%s\", \"precision\": \"%s\", \"model\": "
               "\"gpt2-124m\", \"attention\": \"%s\", \"schedule\": \"std1f1b\", "
               "\"stages\": %d, \"ranks\": %d, \"microbatches\": %d, \"ms_per_step\": %.2f, "
               "\"tokens_per_s\": %.0f, "
               "\"model_tflops\": %.1f, \"speed_vs_one_rank\": %.3f}\n",
               o.backend, mpmd_dtype_name(o.compute), o.fused ? "fused" : "composed", o.stages, o.stages,
               o.micro, pp, ptps, 6.0 * (double)params * ptps / 1e12, one / pp);
    }
    return 0;
}
