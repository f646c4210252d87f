/* bench_train - the training-step benchmark of a GPT-2-shaped model.
 *
 * Two sizes, one and two threads each:
 *   gpt2-small  4 layers, width 256, 4 heads, vocab 8192, seq 64, batch 4
 *   gpt2-124m  12 layers, width 768, 12 heads, vocab 50257, seq 64, batch 4,
 *              tied embeddings
 * One step is the whole training step (forward, backward, AdamW) on random
 * tokens, one microbatch. It also measures, in the same run, the machine's
 * single-thread cblas_sgemm rate on a 1024^3 product (median of products
 * timed before and between the configurations), the yardstick:
 *
 *   model_gflops = 6 x params x tokens_per_s / 1e9
 *   ratio        = model_gflops / sgemm_gflops   (target >= 0.6 for 124M, 1 thread)
 *
 * Then the contention row: gpt2-small with another process keeping one core
 * busy (a child this benchmark starts and stops), on the default thread
 * count (every core) and on one thread; target: the default at most 1.1
 * times one thread's step (the library's idle kernel threads stop watching
 * for work when that does not pay: src/util/pool.h).
 *
 * Progress goes to stderr; after it, stdout gets one JSON object per
 * configuration, one per line, with the OpenBLAS kernel set (blas_core).
 *
 * Options: --model small|124m (default both), --threads N (default 1 and 2),
 * --steps N timed steps (default 5; the median is reported), --profile (after
 * the timed steps, one more step with every op timed; the op times go to
 * stderr, largest first).
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"
#include "mpmd.h"

#include <cblas.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The yardstick: single-thread C[1024,1024] = A[1024,1024] B[1024,1024].
 * Samples are taken before the first configuration and after each one, so
 * that a machine shared with other work weighs on the yardstick as it does
 * on the steps; the rate is the median over all samples. */
enum { SGEMM_N = 1024, SGEMM_MAX_SAMPLES = 64 };
typedef struct sgemm_bench {
    float *a, *b, *c;
    double t[SGEMM_MAX_SAMPLES];
    int n;
} sgemm_bench;

static int sgemm_init(sgemm_bench *s) {
    const int n = SGEMM_N;
    memset(s, 0, sizeof *s);
    s->a = malloc(sizeof(float) * n * n);
    s->b = malloc(sizeof(float) * n * n);
    s->c = malloc(sizeof(float) * n * n);
    if (!s->a || !s->b || !s->c) return 1;
    for (int i = 0; i < n * n; i++) {
        s->a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        s->b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    return 0;
}

/* Time `count` products (after one untimed warm-up product). */
static void sgemm_sample(sgemm_bench *s, int count) {
    const int n = SGEMM_N;
    omp_set_num_threads(1); /* the OpenMP build of OpenBLAS follows the calling thread's setting */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, s->a, n, s->b, n, 0.0f, s->c, n);
    for (int r = 0; r < count && s->n < SGEMM_MAX_SAMPLES; r++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, s->a, n, s->b, n, 0.0f, s->c,
                    n);
        s->t[s->n++] = bench_now() - t0;
    }
}

/* GFLOP/s of the median sample; also the fastest and slowest. */
static double sgemm_gflops(sgemm_bench *s, double *lo, double *hi) {
    double flop = 2.0 * SGEMM_N * (double)SGEMM_N * SGEMM_N;
    double t[SGEMM_MAX_SAMPLES];
    memcpy(t, s->t, sizeof(double) * (size_t)s->n);
    double med = bench_median(t, s->n); /* sorts t */
    *lo = flop / t[s->n - 1] / 1e9;
    *hi = flop / t[0] / 1e9;
    return flop / med / 1e9;
}

static void sgemm_free(sgemm_bench *s) {
    free(s->a);
    free(s->b);
    free(s->c);
}

typedef struct bench_model {
    const char *name;
    gpt_config cfg;
} bench_model;

typedef struct result {
    const char *model;
    int threads;
    int64_t params;
    double ms, tokens_per_s, model_gflops;
} result;

/* Time one configuration; 0 on success. */
static int g_profile; /* --profile: one more step, profiled, its op times on stderr */

static int run_one(const bench_model *bm, int threads, int steps, result *r) {
    const gpt_config *c = &bm->cfg;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(c, 1, &m, &err)) {
        fprintf(stderr, "bench_train: %s: %s\n", bm->name, err.msg);
        return 1;
    }
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = threads;
    eo.seed = 1;
    mpmd_exec *ex = mpmd_exec_new(m.g, &eo, &err);
    if (!ex) {
        fprintf(stderr, "bench_train: %s: %s\n", bm->name, err.msg);
        gpt_model_free(&m);
        return 1;
    }
    /* The parameters the graph really has, checked against the formula. */
    int64_t params = 0;
    for (int i = 0; i < m.n_params; i++) {
        mpmd_type t = mpmd_value_type(m.g, m.params[i]);
        params += mpmd_type_numel(&t);
    }
    if (params != gpt_param_count(c))
        fprintf(stderr, "bench_train: %s: the graph has %lld parameters, the formula says %lld\n", bm->name,
                (long long)params, (long long)gpt_param_count(c));
    size_t nb = (size_t)(c->batch * c->seq);
    int32_t *tok = malloc(nb * 4), *tgt = malloc(nb * 4);
    double *t = malloc(sizeof(double) * (size_t)steps);
    int rc = 0;
    float loss = 0;
    for (int s = 0; s <= steps && !rc; s++) { /* step 0 warms up */
        gpt_random_batch(c->vocab, c->batch, c->seq, 7, (uint64_t)s, tok, tgt);
        mpmd_exec_set_input(ex, m.tokens, tok, nb * 4);
        mpmd_exec_set_input(ex, m.targets, tgt, nb * 4);
        double t0 = bench_now();
        if (mpmd_exec_run(ex) || mpmd_exec_read(ex, m.loss, &loss, sizeof loss)) {
            fprintf(stderr, "bench_train: %s: %s\n", bm->name, mpmd_exec_error(ex));
            rc = 1;
            break;
        }
        double dt = bench_now() - t0;
        if (s > 0) t[s - 1] = dt;
        fprintf(stderr, "  %s threads=%d step %d: %.1f ms, loss %.4f\n", bm->name, threads, s, 1e3 * dt,
                loss);
    }
    if (!rc && g_profile) {
        if (mpmd_exec_set_profiling(ex, 1) || mpmd_exec_run(ex)) {
            fprintf(stderr, "bench_train: %s: %s\n", bm->name, mpmd_exec_error(ex));
            rc = 1;
        } else {
            fprintf(stderr, "%s threads=%d, a profiled step:\n", bm->name, threads);
            mpmd_exec_print_profile(ex, stderr);
        }
        mpmd_exec_set_profiling(ex, 0);
    }
    if (!rc) {
        double ms = 1e3 * bench_median(t, steps);
        r->model = bm->name;
        r->threads = threads;
        r->params = params;
        r->ms = ms;
        r->tokens_per_s = (double)nb / (ms / 1e3);
        r->model_gflops = 6.0 * (double)params * r->tokens_per_s / 1e9;
    }
    free(tok);
    free(tgt);
    free(t);
    mpmd_exec_free(ex);
    gpt_model_free(&m);
    return rc;
}

static gpt_config model_cfg(int layers, int64_t width, int heads, int64_t vocab, int tie) {
    gpt_config c = gpt_config_default();
    c.layers = layers;
    c.width = width;
    c.heads = heads;
    c.vocab = vocab;
    c.seq = 64;
    c.batch = 4;
    c.microbatches = 1;
    c.stages = 1;
    c.tie_embeddings = tie;
    c.lr = 1e-4f;
    return c;
}

int main(int argc, char **argv) {
    program_start("bench_train", argv);
    bench_model models[2] = {{"gpt2-small", model_cfg(4, 256, 4, 8192, 0)},
                             {"gpt2-124m", model_cfg(12, 768, 12, 50257, 1)}};
    int use[2] = {1, 1}, thr[2] = {1, 2}, nthr = 2, steps = 5;
    if (bench_smoke()) use[1] = 0, nthr = 1, steps = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            const char *v = argv[++i];
            use[0] = !strcmp(v, "small");
            use[1] = !strcmp(v, "124m");
            if (!use[0] && !use[1]) {
                fprintf(stderr, "bench_train: --model is small or 124m, got \"%s\"\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            thr[0] = atoi(argv[++i]);
            nthr = 1;
            if (thr[0] < 1) {
                fprintf(stderr, "bench_train: --threads needs a count >= 1\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
            if (steps < 1) {
                fprintf(stderr, "bench_train: --steps needs a count >= 1\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--profile")) {
            g_profile = 1;
        } else {
            fprintf(stderr,
                    "usage: bench_train [--model small|124m] [--threads N] [--steps N] [--profile]\n");
            return 2;
        }
    }
    sgemm_bench sb;
    if (sgemm_init(&sb)) {
        fprintf(stderr, "bench_train: out of memory\n");
        return 1;
    }
    sgemm_sample(&sb, 7);
    result res[4];
    int nres = 0;
    for (int k = 0; k < 2; k++) {
        if (!use[k]) continue;
        for (int j = 0; j < nthr; j++) {
            if (run_one(&models[k], thr[j], steps, &res[nres])) {
                sgemm_free(&sb);
                return 1;
            }
            nres++;
            sgemm_sample(&sb, 5);
        }
    }
    /* Contention: one core kept busy by another process (a child that
     * spins), the default thread count (every core) against one thread, in
     * the same run. The target: at most 1.1 times one thread's step. */
    result busy[2];
    int busy_ok = 0;
    if (use[0]) {
        pid_t spinner = fork();
        if (spinner == 0) {
            for (volatile unsigned long spin = 0;; spin++) {
            }
        }
        if (spinner > 0) {
            fprintf(stderr, "contention: process %d keeps a core busy\n", (int)spinner);
            busy_ok = !run_one(&models[0], 0, steps, &busy[0]) && !run_one(&models[0], 1, steps, &busy[1]);
            kill(spinner, SIGKILL);
            waitpid(spinner, NULL, 0);
        }
    }
    double lo, hi, sg = sgemm_gflops(&sb, &lo, &hi);
    sgemm_free(&sb);
    fprintf(stderr, "single-thread cblas_sgemm 1024^3: median %.1f GFLOP/s over %d products (%.1f to %.1f)\n",
            sg, sb.n, lo, hi);
    for (int i = 0; i < nres; i++)
        printf("{\"model\": \"%s\", \"threads\": %d, \"params\": %lld, \"ms_per_step\": %.2f, "
               "\"tokens_per_s\": %.1f, "
               "\"model_gflops\": %.2f, \"sgemm_gflops\": %.2f, \"ratio\": %.3f, \"blas_core\": \"%s\"}\n",
               res[i].model, res[i].threads, (long long)res[i].params, res[i].ms, res[i].tokens_per_s,
               res[i].model_gflops, sg, res[i].model_gflops / sg, mpmd_blas_core());
    if (busy_ok)
        printf("{\"contention\": \"one core busy in another process\", \"model\": \"%s\", \"cores\": %ld, "
               "\"ms_default_threads\": %.2f, \"ms_one_thread\": %.2f, \"ratio\": %.3f, \"target\": 1.1, "
               "\"omp_wait_policy\": \"%s\"}\n",
               busy[0].model, sysconf(_SC_NPROCESSORS_ONLN), busy[0].ms, busy[1].ms, busy[0].ms / busy[1].ms,
               getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "");
    return 0;
}
