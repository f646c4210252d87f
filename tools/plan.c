/* `mpmd plan`: choose a layout before running it.
 *
 *   mpmd plan --cluster NAME|FILE --model NAME|FILE --gpus N [--tp T] [--pp P] ...
 *       a transformer on a GPU cluster (include/mpmd_plan.h): the mesh, stages,
 *       schedule, microbatches, remat and FSDP, by predicted step time, MFU and
 *       every rank's memory
 *   mpmd plan --ranks D --layers L --batch B [--cost-f X ...] [--keep BYTES ...]
 *       a model given by its own per-sample costs and bytes (what gpt --auto
 *       measures), on D ranks, by simulation alone
 *
 * Exit status: 0 a layout fits; 2 a bad argument or description, or no
 * layout fits (the smallest peak in the message); 1 anything else. */
#include "plan.h"

#include "mpmd_plan.h"
#include "mpmd_schedule.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXIT_USAGE 2

static const char help[] =
    "usage: mpmd plan --cluster NAME|FILE --model NAME|FILE --gpus N [layout options]\n"
    "       mpmd plan --cluster NAME|FILE --layers L --hidden H --heads A --vocab V --seq S\n"
    "                 --batch B --gpus N [--ffn F] [--dtype bf16|f16|f32] [--untied] [layout options]\n"
    "       mpmd plan --ranks D --layers L --batch B [cost options]\n"
    "\n"
    "Choose how to lay a training step out: every layout is predicted and the fastest\n"
    "whose every rank fits the memory wins; the top ones are printed with their step\n"
    "time, model FLOP utilisation (MFU) and peak memory, then the choice's time split\n"
    "and every rank's memory (each stage its own), then why the others lose.\n"
    "\n"
    "A transformer on a GPU cluster (docs/planner.md):\n"
    "  --cluster NAME|FILE  dgx-a100 or dgx-h100, or a file of `key = value` lines: base (a\n"
    "                       preset), name, gpus_per_node, peak_f32, peak_bf16, peak_f16\n"
    "                       (FLOP/s), memory, memory_bandwidth, node_bandwidth, net_bandwidth\n"
    "                       (bytes, bytes/s; suffixes k M G T, Ki Mi Gi Ti), node_latency,\n"
    "                       net_latency (s, ms, us, ns)\n"
    "  --model NAME|FILE    gpt3-175b, or a file with base, name, layers, hidden, heads, ffn,\n"
    "                       vocab, seq, batch, dtype, tied; the options below override it\n"
    "  --layers --hidden --heads --ffn --vocab --seq --batch N, --dtype T, --untied\n"
    "  --gpus N             GPUs in all (required)\n"
    "layout options (each fixes what the search would choose; by default all are searched):\n"
    "  --tp T --pp P --dp D tensor-parallel ranks a stage, pipeline ranks, data-parallel replicas\n"
    "  --fsdp no|task|step  FSDP over the replicas, gathered per task or per step\n"
    "  --stages-per-rank V  stages a pipeline rank runs (any V for the interleaved schedules;\n"
    "                       searched: 1, 2 for dualpipev, 2..8 for the interleaved ones)\n"
    "  --microbatch B       sequences a microbatch (searched: divisors of a replica's batch, <= 16)\n"
    "  --schedules LIST     comma-separated schedule names (gpipe, std1f1b, eager1f1b,\n"
    "                       interleaved1f1b, kimik2, zerobubble, dualpipev, interleavedgpipe)\n"
    "  --remat LIST         comma-separated: none, dots, block\n"
    "  --memory-limit BYTES per GPU (default the cluster's memory), e.g. 72G\n"
    "\n"
    "A model given by its own costs (the time unit is yours; what gpt --auto measures):\n"
    "  --ranks D            ranks to lay the model on (required)\n"
    "  --layers L           layers of the model: at most L stages (required)\n"
    "  --batch B            samples per step (required)\n"
    "  --cost-f X           forward time of one sample through the whole model (default 1)\n"
    "  --cost-b X           its full backward (default 2); --cost-a and --cost-w its halves\n"
    "                       for the split schedules: given --cost-b alone they are half of it\n"
    "                       each, given both alone --cost-b is their sum\n"
    "  --transfer X         latency of every transfer between ranks (default 0)\n"
    "  --keep BYTES         what one sample's forward keeps for its backward, whole model\n"
    "  --keep-w-share X     the share of those bwdA leaves for bwdW (default 0.5)\n"
    "  --remat-keep BYTES   also try rematerialisation: a sample keeps BYTES, and the backward\n"
    "                       runs the forward again first (B and A grow by F)\n"
    "  --model-bytes BYTES  parameters and optimizer state of the whole model\n"
    "  --memory-limit BYTES per rank (default: none)\n"
    "  Stages: D, any multiple of D up to L (at most 8 a rank) for the interleaved schedules,\n"
    "  2D for DualPipeV; microbatches: D, 2D, 4D, ... dividing B.\n"
    "\n"
    "  -f, --format FMT     text (default) or json (every layout, ranked)\n"
    "  -h, --help           this text\n"
    "\n"
    "exit status: 0 success; 2 an invalid argument or description, or no layout fits (the\n"
    "smallest peak found in the message); 1 anything else (out of memory).\n";

typedef struct args {
    int json;
    int64_t mem_limit;
    /* a transformer on a cluster */
    const char *cluster, *model;
    int gpus, tp, pp, dp, v, microbatch, fsdp, untied, dtype;
    uint32_t schedules, remats;
    int layers, hidden, heads, ffn, vocab, seq;
    int64_t batch;
    /* a model by its own costs */
    int ranks;
    double cost[4];
    int cost_given[4];
    double transfer, keep, keep_w_share, model_bytes, remat_keep;
    int remat_given;
} args;

static int usage(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static int usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mpmd plan: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see `mpmd plan --help`)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* A whole-string integer in [1, max]. */
static int count_of(const char *opt, const char *s, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < 1 || v > max)
        return usage("%s: expected a whole number from 1 to %lld, got '%s'", opt, max, s);
    *out = v;
    return 0;
}

/* A whole-string finite number >= 0. */
static int number_of(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0)
        return usage("%s: expected a finite number >= 0, got '%s'", opt, s);
    *out = v;
    return 0;
}

/* A comma-separated list of names from `names` as a bit mask of their values. */
static int mask_of(const char *opt, const char *s, const char *const *names, const int *values, int n,
                   uint32_t *out) {
    *out = 0;
    const char *p = s;
    while (1) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (strlen(names[i]) == len && !strncmp(p, names[i], len)) found = values[i];
        if (found < 0) return usage("%s: unknown name '%.*s' in '%s'", opt, (int)len, p, s);
        *out |= 1u << found;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

static const char *const sched_names[] = {"gpipe",  "std1f1b",    "eager1f1b", "interleaved1f1b",
                                          "kimik2", "zerobubble", "dualpipev", "interleavedgpipe"};
static const int sched_values[] = {
    MPMD_SCHED_GPIPE,  MPMD_SCHED_STD1F1B,    MPMD_SCHED_EAGER1F1B, MPMD_SCHED_INTERLEAVED1F1B,
    MPMD_SCHED_KIMIK2, MPMD_SCHED_ZEROBUBBLE, MPMD_SCHED_DUALPIPEV, MPMD_SCHED_INTERLEAVED_GPIPE};

/* One option with a value; 0, or an exit status. */
static int take(args *a, const char *opt, const char *v) {
    static const char *const remat_names[] = {"none", "dots", "block"};
    static const int remat_values[] = {MPMD_PLAN_REMAT_NONE, MPMD_PLAN_REMAT_DOTS, MPMD_PLAN_REMAT_BLOCK};
    long long n;
    struct {
        const char *name;
        int *dst;
        long long max;
    } counts[] = {{"--gpus", &a->gpus, 1 << 24},
                  {"--tp", &a->tp, 1 << 24},
                  {"--pp", &a->pp, 1 << 24},
                  {"--dp", &a->dp, 1 << 24},
                  {"--stages-per-rank", &a->v, 1 << 16},
                  {"--microbatch", &a->microbatch, 1 << 24},
                  {"--layers", &a->layers, 1 << 24},
                  {"--hidden", &a->hidden, 1 << 24},
                  {"--heads", &a->heads, 1 << 24},
                  {"--ffn", &a->ffn, 1 << 26},
                  {"--vocab", &a->vocab, 1 << 26},
                  {"--seq", &a->seq, 1 << 24},
                  {"--ranks", &a->ranks, 1 << 24}};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        if (!strcmp(opt, counts[i].name)) {
            if (count_of(opt, v, counts[i].max, &n)) return EXIT_USAGE;
            *counts[i].dst = (int)n;
            return 0;
        }
    if (!strcmp(opt, "--batch")) {
        if (count_of(opt, v, 1LL << 40, &n)) return EXIT_USAGE;
        a->batch = n;
    } else if (!strcmp(opt, "--cluster")) {
        a->cluster = v;
    } else if (!strcmp(opt, "--model")) {
        a->model = v;
    } else if (!strcmp(opt, "--dtype")) {
        a->dtype = !strcmp(v, "f32")    ? MPMD_PLAN_F32
                   : !strcmp(v, "bf16") ? MPMD_PLAN_BF16
                   : !strcmp(v, "f16")  ? MPMD_PLAN_F16
                                        : -2;
        if (a->dtype == -2) return usage("--dtype: expected bf16, f16 or f32, got '%s'", v);
    } else if (!strcmp(opt, "--fsdp")) {
        a->fsdp = !strcmp(v, "no")     ? MPMD_PLAN_FSDP_OFF
                  : !strcmp(v, "task") ? MPMD_PLAN_FSDP_TASK
                  : !strcmp(v, "step") ? MPMD_PLAN_FSDP_STEP
                                       : -2;
        if (a->fsdp == -2) return usage("--fsdp: expected no, task or step, got '%s'", v);
    } else if (!strcmp(opt, "--schedules")) {
        return mask_of(opt, v, sched_names, sched_values, 8, &a->schedules);
    } else if (!strcmp(opt, "--remat")) {
        return mask_of(opt, v, remat_names, remat_values, 3, &a->remats);
    } else if (!strcmp(opt, "--memory-limit") || !strcmp(opt, "--keep") || !strcmp(opt, "--model-bytes") ||
               !strcmp(opt, "--remat-keep")) {
        int64_t b;
        if (mpmd_parse_bytes(v, &b))
            return usage("%s: expected a byte count like 512M or 2G, got '%s'", opt, v);
        if (!strcmp(opt, "--memory-limit"))
            a->mem_limit = b;
        else if (!strcmp(opt, "--keep"))
            a->keep = (double)b;
        else if (!strcmp(opt, "--model-bytes"))
            a->model_bytes = (double)b;
        else
            a->remat_keep = (double)b, a->remat_given = 1;
    } else if (!strncmp(opt, "--cost-", 7) && opt[7] && !opt[8] && strchr("fbaw", opt[7])) {
        int k = (int)(strchr("fbaw", opt[7]) - "fbaw"); /* MPMD_TASK_F, _B, _A, _W */
        if (number_of(opt, v, &a->cost[k])) return EXIT_USAGE;
        a->cost_given[k] = 1;
    } else if (!strcmp(opt, "--transfer")) {
        return number_of(opt, v, &a->transfer);
    } else if (!strcmp(opt, "--keep-w-share")) {
        if (number_of(opt, v, &a->keep_w_share)) return EXIT_USAGE;
        if (a->keep_w_share > 1) return usage("--keep-w-share is a share in [0, 1], got '%s'", v);
    } else if (!strcmp(opt, "-f") || !strcmp(opt, "--format")) {
        if (strcmp(v, "text") && strcmp(v, "json"))
            return usage("--format: expected text or json, got '%s'", v);
        a->json = !strcmp(v, "json");
    } else {
        return usage("unknown option '%s'", opt);
    }
    return 0;
}

static int parse(int argc, char **argv, args *a) {
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            return -1;
        }
        if (!strcmp(s, "--untied")) {
            a->untied = 1;
            continue;
        }
        if (!strcmp(s, "-S") || !strcmp(s, "--stages") || !strcmp(s, "-n") || !strcmp(s, "--microbatches") ||
            !strcmp(s, "--stage-scale") || !strcmp(s, "--fuse-steady-state") || !strcmp(s, "-o") ||
            !strcmp(s, "--output"))
            return usage("%s: plan chooses the layout itself (see `mpmd plan --help`)", s);
        if (s[0] != '-') return usage("unexpected '%s'; plan takes options only", s);
        char opt[64];
        const char *eq = !strncmp(s, "--", 2) ? strchr(s, '=') : NULL, *v;
        if (eq && (size_t)(eq - s) < sizeof opt) {
            memcpy(opt, s, (size_t)(eq - s));
            opt[eq - s] = 0;
            v = eq + 1;
        } else {
            snprintf(opt, sizeof opt, "%s", s);
            if (i + 1 >= argc) return usage("%s needs a value", opt);
            v = argv[++i];
        }
        int rc = take(a, opt, v);
        if (rc) return rc;
    }
    return 0;
}

/* ---- a model by its own costs ---- */

/* F, B, A, W of one sample through the whole model: B is A + W, whichever
 * two of them are given (B alone splits in halves, as JaxPP's defaults do). */
static int derive_costs(args *a, double c[4]) {
    const int *g = a->cost_given;
    for (int k = 0; k < 4; k++)
        c[k] = a->cost[k];
    if (!g[MPMD_TASK_B] && !g[MPMD_TASK_A] && !g[MPMD_TASK_W]) {
        c[MPMD_TASK_B] = 2, c[MPMD_TASK_A] = c[MPMD_TASK_W] = 1;
    } else if (g[MPMD_TASK_B] && !g[MPMD_TASK_A] && !g[MPMD_TASK_W]) {
        c[MPMD_TASK_A] = c[MPMD_TASK_W] = c[MPMD_TASK_B] / 2;
    } else if (g[MPMD_TASK_B] && g[MPMD_TASK_A] != g[MPMD_TASK_W]) {
        int k = g[MPMD_TASK_A] ? MPMD_TASK_W : MPMD_TASK_A, o = MPMD_TASK_A + MPMD_TASK_W - k;
        c[k] = c[MPMD_TASK_B] - c[o];
        if (c[k] < 0)
            return usage("--cost-b %g is less than --cost-%c %g: the backward is bwdA + bwdW", c[MPMD_TASK_B],
                         "fbaw"[o], c[o]);
    } else if (!g[MPMD_TASK_B]) {
        if (!g[MPMD_TASK_A] || !g[MPMD_TASK_W]) return usage("give --cost-a with --cost-w (or --cost-b)");
        c[MPMD_TASK_B] = c[MPMD_TASK_A] + c[MPMD_TASK_W];
    } else if (fabs(c[MPMD_TASK_B] - c[MPMD_TASK_A] - c[MPMD_TASK_W]) > 1e-9 * c[MPMD_TASK_B]) {
        return usage("--cost-b %g is not --cost-a %g + --cost-w %g: the backward is bwdA + bwdW",
                     c[MPMD_TASK_B], c[MPMD_TASK_A], c[MPMD_TASK_W]);
    }
    if (!g[MPMD_TASK_F]) c[MPMD_TASK_F] = 1;
    return 0;
}

/* A simulated peak (a double) as a layout's byte count, saturating at
 * INT64_MAX (fits no limit): past int64 a plain conversion is undefined, and
 * on x86 gave INT64_MIN, a peak below every limit. */
static int64_t peak_of(double bytes) { return bytes >= 0x1p63 ? INT64_MAX : bytes > 0 ? (int64_t)bytes : 0; }

static int push_layout(mpmd_layout **l, int *n, int *cap, const mpmd_layout *x) {
    if (*n == *cap) {
        mpmd_layout *nl = realloc(*l, (size_t)(*cap *= 2) * sizeof **l);
        if (!nl) return 1;
        *l = nl;
    }
    (*l)[(*n)++] = *x;
    return 0;
}

/* One schedule kind at S stages and `micro` microbatches, without and with
 * remat, simulated into the list; 1 when out of memory. */
static int costed(const args *a, const double cost[4], const char *name, int S, int micro, mpmd_layout **l,
                  int *n, int *cap) {
    mpmd_schedule *s;
    mpmd_error err;
    if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(name), S, a->ranks, micro, 0, &s,
                          &err))
        return 0;                                      /* this kind cannot take these counts */
    const double share = (double)a->batch / micro / S; /* samples x the model's share in a task */
    for (int remat = 0; remat < 1 + a->remat_given; remat++) {
        mpmd_cost_model c = MPMD_COST_DEFAULTS;
        for (int k = 0; k < MPMD_TASK_KINDS; k++)
            c.latency[k] = cost[k] * share;
        if (remat) /* the forward again, before the backward needs its values */
            c.latency[MPMD_TASK_B] += cost[MPMD_TASK_F] * share,
                c.latency[MPMD_TASK_A] += cost[MPMD_TASK_F] * share;
        c.transfer = a->transfer;
        c.keep_f = (remat ? a->remat_keep : a->keep) * share;
        c.keep_w = c.keep_f * a->keep_w_share;
        c.static_bytes = a->model_bytes / S;
        mpmd_sim *sim;
        if (mpmd_schedule_simulate(s, &c, &sim, &err, NULL)) continue;
        mpmd_layout x;
        memset(&x, 0, sizeof x);
        snprintf(x.schedule, sizeof x.schedule, "%s", name);
        snprintf(x.remat, sizeof x.remat, "%s", remat ? "block" : "none");
        x.stages = S, x.ranks = a->ranks, x.microbatches = micro;
        x.predicted = sim->makespan;
        for (int r = 0; r < a->ranks; r++)
            if (peak_of(sim->peak_bytes[r]) > x.peak_bytes) x.peak_bytes = peak_of(sim->peak_bytes[r]);
        mpmd_sim_free(sim);
        if (push_layout(l, n, cap, &x)) {
            mpmd_schedule_free(s);
            return 1;
        }
    }
    mpmd_schedule_free(s);
    return 0;
}

static void json_num(double v) {
    if (isfinite(v))
        printf("%.10g", v);
    else
        fputs("null", stdout);
}

static int run_costs(args *a) {
    static const char *const flat[] = {"gpipe", "std1f1b", "eager1f1b", "zerobubble"};
    static const char *const interleaved[] = {"interleaved1f1b", "kimik2", "interleavedgpipe"};
    if (!a->ranks || !a->layers || !a->batch) return usage("--ranks, --layers and --batch are required");
    if (a->ranks > a->layers)
        return usage("%d ranks for %d layers: each rank needs a layer", a->ranks, a->layers);
    double cost[4];
    if (derive_costs(a, cost)) return EXIT_USAGE;
    int cap = 64, n = 0;
    mpmd_layout *l = malloc((size_t)cap * sizeof *l);
    if (!l) return 1;
    int oom = 0;
    for (long micro = a->ranks; micro <= a->batch && !oom; micro *= 2) {
        if (a->batch % micro) continue;
        for (int k = 0; k < 4 && !oom; k++)
            oom = costed(a, cost, flat[k], a->ranks, (int)micro, &l, &n, &cap);
        if (a->ranks > 1 && 2 * a->ranks <= a->layers && !oom)
            oom = costed(a, cost, "dualpipev", 2 * a->ranks, (int)micro, &l, &n, &cap);
        for (int v = 2; a->ranks > 1 && v <= 8 && v * a->ranks <= a->layers && !oom; v++)
            for (int k = 0; k < 3 && !oom; k++)
                oom = costed(a, cost, interleaved[k], v * a->ranks, (int)micro, &l, &n, &cap);
    }
    if (oom || !n) {
        free(l);
        return oom ? 1
                   : usage("no layout of %d ranks fits %d layers and a batch of %lld", a->ranks, a->layers,
                           (long long)a->batch);
    }
    int fit = mpmd_layouts_rank(l, n, a->mem_limit);
    if (a->json) {
        printf("{\"ranks\": %d, \"memory_limit\": %lld, \"fit\": %d, \"layouts\": [", a->ranks,
               (long long)a->mem_limit, fit);
        for (int i = 0; i < n; i++) {
            printf("%s\n  {\"schedule\": \"%s\", \"stages\": %d, \"microbatches\": %d, \"remat\": \"%s\", "
                   "\"step\": ",
                   i ? "," : "", l[i].schedule, l[i].stages, l[i].microbatches, l[i].remat);
            json_num(l[i].predicted); /* null, not nan, should a step ever not be finite */
            printf(", \"peak_bytes\": %lld, \"fits\": %s}", (long long)l[i].peak_bytes,
                   l[i].fits ? "true" : "false");
        }
        printf("\n]}\n");
    } else {
        printf("costs of one sample: F %g, B %g (bwdA %g + bwdW %g)%s\n", cost[0], cost[1], cost[2], cost[3],
               a->remat_given ? "; with remat B and bwdA add F" : "");
        mpmd_layouts_report(stdout, l, n, a->mem_limit, "");
    }
    int rc = 0;
    if (!fit) {
        fprintf(stderr,
                "mpmd plan: no layout fits in %lld bytes per rank; the smallest peak found is %s%lld bytes "
                "(%s, %d "
                "stages, %d microbatches)\n",
                (long long)a->mem_limit, l[0].peak_bytes == INT64_MAX ? "more than " : "",
                (long long)l[0].peak_bytes, l[0].schedule, l[0].stages, l[0].microbatches);
        rc = EXIT_USAGE;
    }
    free(l);
    return rc;
}

/* ---- a transformer on a cluster ---- */

/* A preset's name, or a description's file. */
static int load_description(const char *opt, const char *s, int cluster, mpmd_cluster *c,
                            mpmd_transformer *m) {
    mpmd_error err;
    if (cluster ? !mpmd_cluster_preset(s, c, NULL) : !mpmd_transformer_preset(s, m, NULL)) return 0;
    struct stat sb;
    if (stat(s, &sb))
        return usage("%s %s: neither a preset (%s) nor a file (%s)", opt, s,
                     cluster ? "dgx-a100, dgx-h100" : "gpt3-175b", strerror(errno));
    if (cluster ? mpmd_cluster_load(s, c, &err) : mpmd_transformer_load(s, m, &err)) {
        fprintf(stderr, "mpmd plan: %s: %s\n", opt, err.msg);
        return err.code == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
    }
    return 0;
}

/* The model: --model's, then each option given over it. */
static int model_of(const args *a, mpmd_transformer *m) {
    memset(m, 0, sizeof *m);
    m->dtype = MPMD_PLAN_BF16;
    snprintf(m->name, sizeof m->name, "%s", "the options' model");
    if (a->model && load_description("--model", a->model, 0, NULL, m)) return EXIT_USAGE;
    const int v[] = {a->layers, a->hidden, a->heads, a->ffn, a->vocab, a->seq};
    int *const dst[] = {&m->layers, &m->hidden, &m->heads, &m->ffn, &m->vocab, &m->seq};
    for (int i = 0; i < 6; i++)
        if (v[i]) *dst[i] = v[i];
    if (a->batch) m->batch = a->batch;
    if (a->dtype >= 0) m->dtype = a->dtype;
    if (a->untied) m->untied = 1;
    mpmd_error err;
    if (mpmd_transformer_check(m, &err)) return usage("%s", err.msg);
    return 0;
}

static int run_cluster(const args *a) {
    if (!a->cluster) return usage("--model needs --cluster NAME|FILE (the GPUs it runs on)");
    if (a->ranks || a->transfer > 0 || a->keep > 0 || a->model_bytes > 0 || a->remat_given ||
        a->cost_given[0] || a->cost_given[1] || a->cost_given[2] || a->cost_given[3])
        return usage(
            "--ranks, --cost-*, --transfer, --keep, --model-bytes and --remat-keep describe a model by its "
            "costs; with --cluster give the transformer (--model, --layers, --hidden, ...) and --pp");
    if (!a->gpus) return usage("--cluster needs --gpus N, the GPUs to lay the model on");
    mpmd_cluster c;
    mpmd_transformer m;
    int rc = load_description("--cluster", a->cluster, 1, &c, NULL);
    if (rc || (rc = model_of(a, &m))) return rc;
    mpmd_planner_opts o = MPMD_PLANNER_OPTS_DEFAULTS;
    o.gpus = a->gpus, o.tp = a->tp, o.pp = a->pp, o.dp = a->dp, o.stages_per_rank = a->v;
    o.microbatch = a->microbatch, o.fsdp = a->fsdp, o.schedules = a->schedules, o.remats = a->remats;
    o.memory_limit = (double)a->mem_limit;
    mpmd_planner_result *r;
    mpmd_error err;
    mpmd_status st = mpmd_planner_search(&c, &m, &o, &r, &err);
    if (!r) {
        fprintf(stderr, "mpmd plan: %s\n", err.msg);
        return st == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
    }
    if (a->json)
        mpmd_planner_write_json(stdout, &c, &m, r);
    else
        mpmd_planner_report(stdout, &c, &m, r);
    mpmd_planner_result_free(r);
    if (st) {
        fprintf(stderr, "mpmd plan: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

int tool_plan(int argc, char **argv) {
    args a;
    memset(&a, 0, sizeof a);
    a.fsdp = -1, a.dtype = -1, a.keep_w_share = 0.5;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.cluster || a.model) return run_cluster(&a);
    if (a.gpus || a.tp || a.pp || a.dp || a.v || a.microbatch || a.hidden || a.heads || a.ffn || a.vocab ||
        a.seq || a.schedules || a.remats || a.fsdp >= 0 || a.dtype >= 0 || a.untied)
        return usage(
            "--gpus, --tp, --pp, --dp, --hidden, --heads and the other layout and transformer options need "
            "--cluster NAME|FILE");
    return run_costs(&a);
}
