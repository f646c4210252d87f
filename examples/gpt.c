/* gpt - train a byte-level GPT-2-style model on one rank.
 *
 * The training step (examples/models/gpt_model.h) is one mpmd graph: the
 * microbatch loop over the forward and backward pass, then AdamW. The data is
 * a corpus this program generates deterministically, or a text file given
 * with --data; batches are a pure function of (seed, step), so two runs with
 * the same options print the same final line:
 *
 *     final_loss=<loss of the last step> params_sha256=<hash of the parameters>
 *
 * Exit status: 0 on success, 2 for bad options, 1 for a failure while
 * building or training (including a NaN/Inf loss, unless --no-nan-check).
 */
#include "gpt_model.h"
#include "mpmd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *usage =
    "usage: gpt [options]\n"
    "Train a byte-level GPT on a generated corpus (or --data FILE) with AdamW.\n"
    "\n"
    "  --layers N          transformer blocks (default 4)\n"
    "  --width N           model width (default 128)\n"
    "  --heads N           attention heads, dividing the width (default 4)\n"
    "  --seq N             sequence length (default 64)\n"
    "  --batch N           sequences per step (default 8)\n"
    "  --microbatches N    microbatches per step, dividing the batch (default 4)\n"
    "  --stages N          pipeline stage markers, dividing the layers (default 1)\n"
    "  --steps N           training steps (default 60)\n"
    "  --seed N            seed of the initial parameters and of the batches (default 0)\n"
    "  --threads N         kernel threads, 0 for all cores (default 0)\n"
    "  --lr F              AdamW learning rate (default 0.003)\n"
    "  --weight-decay F    AdamW weight decay (default 0)\n"
    "  --tie-embeddings    the LM head shares the token embedding\n"
    "  --data FILE         train on the bytes of FILE instead of the generated corpus\n"
    "  --log-every K       one progress line every K steps (default 5)\n"
    "  --no-nan-check      keep going when the loss is NaN or Inf\n"
    "  --help              this text\n"
    "\n"
    "After the last step it prints: final_loss=<%.9g> params_sha256=<hex>\n";

typedef struct options {
    gpt_config cfg;
    long long steps, log_every, threads;
    unsigned long long seed;
    const char *data;
    int nan_check;
} options;

static int bad_option(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "gpt: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n(run gpt --help for the options)\n");
    return 2;
}

/* An integer option value in [lo, hi]. */
static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return bad_option("%s expects an integer, got \"%s\"", opt, s);
    if (v < lo || v > hi) {
        fprintf(stderr, "gpt: %s must be between %lld and %lld, got %lld\n(run gpt --help for the options)\n",
                opt, lo, hi, v);
        return 2;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return bad_option("%s expects a finite number >= 0, got \"%s\"", opt, s);
    *out = (float)v;
    return 0;
}

/* Returns 0 to go on, 2 for a bad option, -1 after --help. */
static int parse_args(int argc, char **argv, options *o) {
    o->cfg = gpt_config_default();
    o->steps = 60;
    o->log_every = 5;
    o->threads = 0;
    o->seed = 0;
    o->data = NULL;
    o->nan_check = 1;
    for (int i = 1; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *val = NULL;
        const char *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) != 0) return bad_option("unexpected argument \"%s\"%s", arg, "");
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof name) return bad_option("unknown option \"%s\"%s", arg, "");
        memcpy(name, arg, nl);
        name[nl] = '\0';
        if (!strcmp(name, "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (!strcmp(name, "--tie-embeddings") || !strcmp(name, "--no-nan-check")) {
            if (eq) return bad_option("%s takes no value%s", name, "");
            if (!strcmp(name, "--tie-embeddings"))
                o->cfg.tie_embeddings = 1;
            else
                o->nan_check = 0;
            continue;
        }
        static const char *const valued[] = {
            "--layers", "--width",     "--heads",   "--seq",  "--batch", "--microbatches", "--stages",
            "--steps",  "--log-every", "--threads", "--seed", "--lr",    "--weight-decay", "--data"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known |= !strcmp(name, valued[k]);
        if (!known) return bad_option("unknown option \"%s\"%s", name, "");
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return bad_option("%s needs a value%s", name, "");
        long long v;
        int rc = 0;
        if (!strcmp(name, "--layers")) {
            if (!(rc = parse_int(name, val, 1, 1000, &v))) o->cfg.layers = (int)v;
        } else if (!strcmp(name, "--width")) {
            if (!(rc = parse_int(name, val, 1, 1 << 16, &v))) o->cfg.width = v;
        } else if (!strcmp(name, "--heads")) {
            if (!(rc = parse_int(name, val, 1, 1 << 12, &v))) o->cfg.heads = (int)v;
        } else if (!strcmp(name, "--seq")) {
            if (!(rc = parse_int(name, val, 1, 1 << 16, &v))) o->cfg.seq = v;
        } else if (!strcmp(name, "--batch")) {
            if (!(rc = parse_int(name, val, 1, 1 << 20, &v))) o->cfg.batch = v;
        } else if (!strcmp(name, "--microbatches")) {
            if (!(rc = parse_int(name, val, 1, 1 << 20, &v))) o->cfg.microbatches = (int)v;
        } else if (!strcmp(name, "--stages")) {
            if (!(rc = parse_int(name, val, 1, 1000, &v))) o->cfg.stages = (int)v;
        } else if (!strcmp(name, "--steps")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->steps);
        } else if (!strcmp(name, "--log-every")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->log_every);
        } else if (!strcmp(name, "--threads")) {
            rc = parse_int(name, val, 0, 1024, &o->threads);
        } else if (!strcmp(name, "--seed")) {
            if (!(rc = parse_int(name, val, 0, INT64_MAX, &v))) o->seed = (unsigned long long)v;
        } else if (!strcmp(name, "--lr")) {
            rc = parse_float(name, val, &o->cfg.lr);
        } else if (!strcmp(name, "--weight-decay")) {
            rc = parse_float(name, val, &o->cfg.adam.weight_decay);
        } else { /* --data */
            if (!*val) return bad_option("%s needs a file name%s", name, "");
            o->data = val;
        }
        if (rc) return rc;
    }
    mpmd_error err;
    if (gpt_config_check(&o->cfg, &err)) {
        fprintf(stderr, "%s\n(run gpt --help for the options)\n", err.msg);
        return 2;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) return 0;
    if (rc) return rc;
    const gpt_config *c = &o.cfg;

    mpmd_error err;
    gpt_corpus corpus;
    if (o.data) {
        if (gpt_corpus_load(&corpus, o.data, c->seq + 1, &err)) {
            fprintf(stderr, "gpt: %s\n", err.msg);
            return 1;
        }
    } else if (gpt_corpus_generate(&corpus, 1 << 20, 1234, &err)) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        return 1;
    }

    gpt_model m;
    if (gpt_build(c, 1, &m, &err)) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        gpt_corpus_free(&corpus);
        return 1;
    }
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = (int)o.threads;
    eo.seed = o.seed;
    mpmd_exec *ex = mpmd_exec_new(m.g, &eo, &err);
    if (!ex) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        gpt_model_free(&m);
        gpt_corpus_free(&corpus);
        return 1;
    }
    printf(
        "gpt: %d layers, width %lld, %d heads, seq %lld, batch %lld in %d microbatches, %lld parameters%s\n",
        c->layers, (long long)c->width, c->heads, (long long)c->seq, (long long)c->batch, c->microbatches,
        (long long)gpt_param_count(c), c->tie_embeddings ? " (tied embeddings)" : "");
    printf("data: %s, %lld bytes; the loss starts near ln(256) = %.3f\n",
           o.data ? o.data : "generated corpus", (long long)corpus.len, log(256.0));
    fflush(stdout);

    size_t nb = (size_t)(c->batch * c->seq);
    int32_t *tok = malloc(nb * sizeof *tok), *tgt = malloc(nb * sizeof *tgt);
    if (!tok || !tgt) {
        fprintf(stderr, "gpt: out of memory\n");
        rc = 1;
        goto done;
    }
    float loss = NAN;
    double t_log = now_s();
    long long since = 0;
    for (long long step = 1; step <= o.steps; step++) {
        gpt_sample_batch(&corpus, c->batch, c->seq, o.seed, (uint64_t)step, tok, tgt);
        if (mpmd_exec_set_input(ex, m.tokens, tok, nb * sizeof *tok) ||
            mpmd_exec_set_input(ex, m.targets, tgt, nb * sizeof *tgt) || mpmd_exec_run(ex) ||
            mpmd_exec_read(ex, m.loss, &loss, sizeof loss)) {
            fprintf(stderr, "gpt: step %lld: %s\n", step, mpmd_exec_error(ex));
            rc = 1;
            goto done;
        }
        if (o.nan_check && !isfinite(loss)) {
            fprintf(stderr, "step %lld: loss is %s\n", step, isnan(loss) ? "nan" : "inf");
            rc = 1;
            goto done;
        }
        since++;
        if (step % o.log_every == 0 || step == o.steps) {
            double t = now_s(), dt = t - t_log;
            printf("step %lld/%lld  loss %.4f  tokens/s %.0f  ms/step %.1f\n", step, o.steps, loss,
                   (double)since * (double)nb / dt, 1e3 * dt / (double)since);
            fflush(stdout);
            t_log = t;
            since = 0;
        }
    }
    char hex[65];
    mpmd_exec_params_sha256(ex, hex);
    printf("final_loss=%.9g params_sha256=%s\n", loss, hex);
done:
    free(tok);
    free(tgt);
    mpmd_exec_free(ex);
    gpt_model_free(&m);
    gpt_corpus_free(&corpus);
    return rc;
}
