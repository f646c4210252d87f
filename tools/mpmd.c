/* mpmd - the command-line tool: pipeline schedules and their simulation.
 *
 *   mpmd schedule NAME --stages S [--ranks D] --microbatches N [--format text|json|svg|trace] [-o FILE]
 *   mpmd simulate NAME ... [--cost-f X ...] [--format text|json|svg|trace] [-o FILE]
 *   mpmd plan --cluster NAME|FILE --model NAME|FILE --gpus N [...]   (tools/plan.c)
 *   mpmd plan --ranks D --layers L --batch B [--cost-f X ...]           (tools/plan.c)
 *   mpmd tokenize IN -o OUT.bin --tokenizer tokenizer.json      (tools/tokenize.c)
 *
 * Exit status: 0 success; 2 a bad argument or an invalid schedule (the
 * message on stderr); 1 anything else (an output file that cannot be
 * written, out of memory). */
#include "mpmd.h"
#include "plan.h"
#include "tokenize.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXIT_USAGE 2

static const char main_help[] =
    "mpmd - MPMD pipeline-parallel training in C: the command-line tool\n"
    "\n"
    "usage: mpmd <command> [options]\n"
    "\n"
    "commands:\n"
    "  schedule   print a pipeline schedule, checked: its task list per rank as text or\n"
    "             JSON, or its timeline as an SVG picture or a Chrome trace\n"
    "  simulate   time a schedule with a cost model: makespan, bubble, busy time and\n"
    "             peak microbatches in flight per rank, against the analytic bubble\n"
    "  plan       choose a layout: for a transformer on a GPU cluster, the mesh (pipeline,\n"
    "             tensor and data parallel, FSDP), stages, schedule, microbatches and remat\n"
    "             by predicted step time, MFU and memory; or for D ranks from a model's own\n"
    "             costs and bytes\n"
    "  tokenize   encode a text file with a Hugging Face tokenizer.json into a token file\n"
    "             in llm.c's format (what gpt --tokens reads)\n"
    "  help       this text\n"
    "\n"
    "`mpmd <command> --help` explains a command and its options. Examples:\n"
    "  mpmd schedule std1f1b --stages 4 --microbatches 8\n"
    "  mpmd schedule interleaved1f1b --stages 8 --ranks 4 --microbatches 8 --format svg -o i1f1b.svg\n"
    "  mpmd simulate zerobubble --stages 4 --microbatches 8\n"
    "  mpmd plan --cluster dgx-a100 --model gpt3-175b --gpus 1024\n"
    "  mpmd plan --ranks 4 --layers 12 --batch 32 --keep 6M --model-bytes 2G --memory-limit 1G\n"
    "  mpmd schedule file:my.sched --format json\n"
    "  mpmd tokenize input.txt -o input.bin --tokenizer tokenizer.json\n"
    "\n"
    "exit status: 0 success; 2 an invalid argument or schedule (message on stderr);\n"
    "1 any other failure (e.g. an output file that cannot be written).\n";

/* The part of `schedule --help` and `simulate --help` that is the same. */
static const char common_help[] =
    "NAME is one of (JaxPP's schedules, same task lists):\n"
    "  gpipe             GPipe: every forward, then every backward (S == D)\n"
    "  std1f1b           Std1F1B: one forward, one backward; rank s warms up with\n"
    "                    min(S - s, N) forwards (S == D)\n"
    "  eager1f1b         Eager1F1B: 1F1B warming up with min(2(S - s) - 1, N) forwards (S == D)\n"
    "  interleaved1f1b   Interleaved1F1B: v = S / D stages per rank, stage s on rank s % D;\n"
    "                    N must be a multiple of max(1, N / D)\n"
    "  kimik2            KimiK2: Interleaved1F1B with one more warm-up forward\n"
    "  zerobubble        ZeroBubble (ZB-H1): backward split into bwdA and bwdW;\n"
    "                    needs N >= S (S == D)\n"
    "  dualpipev         DualPipeV: rank r runs stages r and 2D-1-r (S == 2D); needs N >= S\n"
    "  interleavedgpipe  InterleavedGPipe (ours): every forward, then every backward, in\n"
    "                    the interleaved stage order, microbatches in rounds of D\n"
    "  file:PATH         a schedule written as text in the file PATH (below)\n"
    "\n"
    "schedule options:\n"
    "  -S, --stages S          number of pipeline stages (required, except for file:)\n"
    "  -D, --ranks D           number of ranks; default S (S / 2 for dualpipev)\n"
    "  -n, --microbatches N    number of microbatches (required, except for file:)\n"
    "      --fuse-steady-state interleaved1f1b, kimik2: run every steady-state forward and\n"
    "                          backward pair as one FusedTask\n"
    "  For file:PATH, S, D and N come from the file; given options must agree with it.\n"
    "\n"
    "Tasks are written as JaxPP writes them: fwd_S__M is the forward of stage S on\n"
    "microbatch M, bwd_S__M the full backward, bwdA_S__M and bwdW_S__M the backward\n"
    "with respect to activations and to weights; FusedTask(t1, t2[, t3]) runs its\n"
    "tasks as one program.\n"
    "\n"
    "A schedule file has one line per rank, in rank order: entries separated by white\n"
    "space or commas; a line may start with \"rank R:\" (R must be the line's rank;\n"
    "\"rank R:\" alone is a rank without tasks); '#' starts a comment to the end of the\n"
    "line; blank and comment-only lines are skipped. The text format's output is a\n"
    "valid schedule file. Stage s runs on the rank whose line names it.\n"
    "\n"
    "Every schedule is checked before it is printed: every task once, each on the rank\n"
    "of its stage, B everywhere or bwdA/bwdW everywhere, stage 0's bwdA directly\n"
    "followed by its bwdW, and the data dependencies honoured (no deadlock). A\n"
    "schedule that fails gets a report on stderr (for a deadlock: what each rank\n"
    "waits for, and a grid of the lists up to where they stuck) and exit status 2.\n";

static const char schedule_usage[] =
    "usage: mpmd schedule NAME --stages S [--ranks D] --microbatches N\n"
    "                     [--fuse-steady-state] [--format text|json|svg|trace] [-o FILE]\n"
    "\n"
    "Print a pipeline schedule: the ordered task list of every rank.\n"
    "\n";

static const char schedule_formats[] =
    "\n"
    "output options:\n"
    "  -f, --format FMT   text (default): one line per rank, \"rank R: task task ...\"\n"
    "                     json: exactly one JSON array, one array per rank of task strings,\n"
    "                       e.g. [[\"fwd_0__0\", \"bwd_0__0\"], [\"FusedTask(fwd_1__0, bwd_1__0)\"]]\n"
    "                     svg: the schedule's timeline with the default costs\n"
    "                       (F=1, B=2, A=1, W=1): one row per rank, a box per task\n"
    "                     trace: the same timeline as Chrome trace-event JSON\n"
    "                       (open it in https://ui.perfetto.dev or chrome://tracing)\n"
    "  -o, --output FILE  write to FILE instead of stdout\n"
    "  -h, --help         this text\n"
    "\n"
    "exit status: 0 success; 2 an invalid argument or schedule; 1 a write failure.\n";

static const char simulate_usage[] =
    "usage: mpmd simulate NAME --stages S [--ranks D] --microbatches N [--fuse-steady-state]\n"
    "                     [--cost-f X] [--cost-b X] [--cost-a X] [--cost-w X] [--transfer X]\n"
    "                     [--stage-scale X,X,...] [--keep-f BYTES] [--keep-w BYTES]\n"
    "                     [--stage-bytes BYTES] [--format text|json|svg|trace] [-o FILE]\n"
    "\n"
    "Time a schedule with a discrete-event simulation. Every rank runs its list in\n"
    "order; a task starts when its rank is free and its inputs exist (F(s, m) needs\n"
    "F(s-1, m); a backward of (s, m) needs F(s, m) and the backward of (s+1, m);\n"
    "bwdW(s, m) needs bwdA(s, m)); a FusedTask takes the sum of its tasks' times.\n"
    "Stage 0's bwdA and bwdW run as one task. The report gives the makespan, each\n"
    "rank's busy and idle time, the bubble (1 - busy / (D * makespan)) next to the\n"
    "textbook value where one exists, and each rank's peak number of (stage,\n"
    "microbatch) pairs in flight (forward done, backward not finished). With\n"
    "byte counts per task it also gives each rank's peak memory.\n"
    "\n";

static const char simulate_options[] =
    "\n"
    "cost options (times are in steps; all must be finite and >= 0):\n"
    "  --cost-f X          time of a forward (default 1)\n"
    "  --cost-b X          time of a full backward (default 2)\n"
    "  --cost-a X          time of a backward w.r.t. activations, bwdA (default 1)\n"
    "  --cost-w X          time of a backward w.r.t. weights, bwdW (default 1)\n"
    "  --transfer X        latency added to every input that comes from another rank\n"
    "                      (default 0)\n"
    "  --stage-scale LIST  S comma-separated multipliers of every task's time, one per\n"
    "                      stage, e.g. 1,1,1,1.5 (default: all 1)\n"
    "\n"
    "memory options (byte counts, with an optional suffix k, M, G, T: powers of 1024):\n"
    "  --keep-f BYTES      what a stage's forward keeps for its backward (its activations)\n"
    "  --keep-w BYTES      of those, what stays from bwdA until bwdW (split backward)\n"
    "  --stage-bytes BYTES what every stage holds all step (parameters, optimizer state)\n"
    "                      a rank's peak: its stages' bytes plus its kept bytes at their\n"
    "                      fullest (default: memory not modelled)\n"
    "\n"
    "output options:\n"
    "  -f, --format FMT   text (default): the report\n"
    "                     json: the report as one JSON object\n"
    "                     svg: the simulated timeline as a picture\n"
    "                     trace: the simulated timeline as Chrome trace-event JSON\n"
    "  -o, --output FILE  write to FILE instead of stdout\n"
    "  -h, --help         this text\n"
    "\n"
    "exit status: 0 success; 2 an invalid argument or schedule; 1 a write failure.\n";

enum format { FMT_TEXT, FMT_JSON, FMT_SVG, FMT_TRACE };

typedef struct options {
    const char *cmd; /* "schedule" or "simulate" */
    const char *name;
    int stages, ranks, microbatches; /* 0: not given */
    int fuse;
    enum format format;
    const char *output;
    mpmd_cost_model cost;
    double *stage_scale;
    int n_stage_scale;
} options;

/* A bad argument: the message on stderr, exit status 2. */
static int usage_error(const options *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int usage_error(const options *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpmd %s: ", o->cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see `mpmd %s --help`)\n", o->cmd);
    va_end(ap);
    return EXIT_USAGE;
}

/* A whole-string integer in [1, 2^24). */
static int parse_count(const options *o, const char *opt, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 1 || v >= (1L << 24))
        return usage_error(o, "%s: expected a whole number from 1 to 16777215, got '%s'", opt, s);
    *out = (int)v;
    return 0;
}

/* A whole-string finite number >= 0. */
static int parse_cost(const options *o, const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0)
        return usage_error(o, "%s: expected a finite number >= 0, got '%s'", opt, s);
    *out = v;
    return 0;
}

static int parse_scale_list(options *o, const char *s) {
    int n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    o->stage_scale = malloc((size_t)n * sizeof *o->stage_scale);
    if (!o->stage_scale) return 1;
    char item[64];
    const char *p = s;
    for (int i = 0; i < n; i++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, p, len);
        item[len] = 0;
        if (parse_cost(o, "--stage-scale", item, &o->stage_scale[i])) return EXIT_USAGE;
        p = c ? c + 1 : p + len;
    }
    o->n_stage_scale = n;
    return 0;
}

/* Parse argv[2..]; returns -1 when help was printed, 0 ok, else an exit status. */
static int parse_args(int argc, char **argv, options *o) {
    int simulate = strcmp(o->cmd, "simulate") == 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        /* --opt=value as well as --opt value */
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        char opt[64];
        if (eq && (size_t)(eq - a) < sizeof opt) {
            memcpy(opt, a, (size_t)(eq - a));
            opt[eq - a] = 0;
        } else {
            snprintf(opt, sizeof opt, "%s", a);
            eq = NULL;
        }
#define VALUE() (eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL))
#define NEED(v)                                                                                              \
    if (!(v)) return usage_error(o, "%s needs a value", opt)
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            fputs(simulate ? simulate_usage : schedule_usage, stdout);
            fputs(common_help, stdout);
            fputs(simulate ? simulate_options : schedule_formats, stdout);
            return -1;
        } else if (!strcmp(opt, "-S") || !strcmp(opt, "--stages")) {
            const char *v = VALUE();
            NEED(v);
            if (parse_count(o, "--stages", v, &o->stages)) return EXIT_USAGE;
        } else if (!strcmp(opt, "-D") || !strcmp(opt, "--ranks")) {
            const char *v = VALUE();
            NEED(v);
            if (parse_count(o, "--ranks", v, &o->ranks)) return EXIT_USAGE;
        } else if (!strcmp(opt, "-n") || !strcmp(opt, "--microbatches")) {
            const char *v = VALUE();
            NEED(v);
            if (parse_count(o, "--microbatches", v, &o->microbatches)) return EXIT_USAGE;
        } else if (!strcmp(opt, "--fuse-steady-state") && !eq) {
            o->fuse = 1;
        } else if (!strcmp(opt, "-f") || !strcmp(opt, "--format")) {
            const char *v = VALUE();
            NEED(v);
            if (!strcmp(v, "text"))
                o->format = FMT_TEXT;
            else if (!strcmp(v, "json"))
                o->format = FMT_JSON;
            else if (!strcmp(v, "svg"))
                o->format = FMT_SVG;
            else if (!strcmp(v, "trace"))
                o->format = FMT_TRACE;
            else
                return usage_error(o, "--format: expected text, json, svg or trace, got '%s'", v);
        } else if (!strcmp(opt, "-o") || !strcmp(opt, "--output")) {
            const char *v = VALUE();
            NEED(v);
            o->output = v;
        } else if (simulate && (!strcmp(opt, "--cost-f") || !strcmp(opt, "--cost-b") ||
                                !strcmp(opt, "--cost-a") || !strcmp(opt, "--cost-w"))) {
            const char *v = VALUE();
            NEED(v);
            static const char kinds[] = "fbaw"; /* --cost-f etc.: MPMD_TASK_F, _B, _A, _W */
            int k = (int)(strchr(kinds, opt[7]) - kinds);
            if (parse_cost(o, opt, v, &o->cost.latency[k])) return EXIT_USAGE;
        } else if (simulate && !strcmp(opt, "--transfer")) {
            const char *v = VALUE();
            NEED(v);
            if (parse_cost(o, "--transfer", v, &o->cost.transfer)) return EXIT_USAGE;
        } else if (simulate &&
                   (!strcmp(opt, "--keep-f") || !strcmp(opt, "--keep-w") || !strcmp(opt, "--stage-bytes"))) {
            const char *v = VALUE();
            NEED(v);
            int64_t b;
            if (mpmd_parse_bytes(v, &b))
                return usage_error(o, "%s: expected a byte count like 512M or 2G, got '%s'", opt, v);
            double *dst = !strcmp(opt, "--keep-f")   ? &o->cost.keep_f
                          : !strcmp(opt, "--keep-w") ? &o->cost.keep_w
                                                     : &o->cost.static_bytes;
            *dst = (double)b;
        } else if (simulate && !strcmp(opt, "--stage-scale")) {
            const char *v = VALUE();
            NEED(v);
            free(o->stage_scale);
            int rc = parse_scale_list(o, v);
            if (rc) return rc;
        } else if (a[0] == '-' && a[1]) {
            return usage_error(o, "unknown option '%s'", a);
        } else if (!o->name) {
            o->name = a;
        } else {
            return usage_error(o, "one schedule NAME only; got '%s' and '%s'", o->name, a);
        }
#undef VALUE
#undef NEED
    }
    return 0;
}

/* Whether -o names the file a file:PATH schedule is read from: writing it
 * would destroy the input. Existing files compare by device and inode
 * (so "x", "./x" and links to it are one file). */
static int output_is_input(const options *o) {
    struct stat a, b;
    return o->output && o->name && !strncmp(o->name, "file:", 5) && !stat(o->output, &a) &&
           !stat(o->name + 5, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Build (file: or built-in) and check the parameters against the options. */
static int make_schedule(const options *o, mpmd_schedule **out) {
    mpmd_error err;
    *out = NULL;
    if (!o->name) return usage_error(o, "which schedule? give a NAME, e.g. std1f1b or file:PATH");
    if (!strncmp(o->name, "file:", 5)) {
        if (!o->name[5]) return usage_error(o, "file: needs a path, e.g. file:my.sched");
        if (o->fuse)
            return usage_error(o, "--fuse-steady-state applies to interleaved1f1b and kimik2, not to %s",
                               o->name);
        mpmd_status st = mpmd_schedule_load(o->name + 5, out, &err);
        if (st) {
            fprintf(stderr, "mpmd %s: %s\n", o->cmd, err.msg);
            return st == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
        }
        const mpmd_schedule *s = *out;
        const struct {
            const char *opt;
            int given, has;
        } chk[3] = {{"--stages", o->stages, s->num_stages},
                    {"--ranks", o->ranks, s->num_ranks},
                    {"--microbatches", o->microbatches, s->num_microbatches}};
        for (int i = 0; i < 3; i++)
            if (chk[i].given && chk[i].given != chk[i].has) {
                fprintf(stderr, "mpmd %s: %s %d disagrees with %s, which has %d\n", o->cmd, chk[i].opt,
                        chk[i].given, s->name, chk[i].has);
                mpmd_schedule_free(*out);
                *out = NULL;
                return EXIT_USAGE;
            }
        return 0;
    }
    int kind = mpmd_schedule_kind_from_name(o->name);
    if (kind < 0 || kind == MPMD_SCHED_USER)
        return usage_error(
            o,
            "unknown schedule '%s'; expected gpipe, std1f1b, eager1f1b, interleaved1f1b, kimik2, "
            "zerobubble, dualpipev, interleavedgpipe or file:PATH",
            o->name);
    if (!o->stages) return usage_error(o, "%s needs --stages S", o->name);
    if (!o->microbatches) return usage_error(o, "%s needs --microbatches N", o->name);
    if (o->fuse && kind != MPMD_SCHED_INTERLEAVED1F1B && kind != MPMD_SCHED_KIMIK2)
        return usage_error(o, "--fuse-steady-state applies to interleaved1f1b and kimik2, not to %s",
                           o->name);
    mpmd_status st =
        mpmd_schedule_new((mpmd_schedule_kind)kind, o->stages, o->ranks, o->microbatches, o->fuse, out, &err);
    if (st) {
        fprintf(stderr, "mpmd %s: %s\n", o->cmd, err.msg);
        return st == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
    }
    return 0;
}

/* Print a failed check: the full report if there is one. */
static int report_failure(const options *o, mpmd_status st, const mpmd_error *err, char *report) {
    fprintf(stderr, "mpmd %s: %s", o->cmd, report ? report : err->msg);
    if (!report || !*report || report[strlen(report) - 1] != '\n') fputc('\n', stderr);
    free(report);
    return st == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.10g", v);
    else
        fputs("null", f);
}

static void stages_of(const mpmd_schedule *s, int r, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int st = 0; st < s->num_stages && n + 12 < len; st++)
        if (s->stage_rank[st] == r) n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", st);
}

static void write_report_text(FILE *f, const mpmd_schedule *s, const mpmd_sim *sim) {
    const mpmd_cost_model *c = &sim->cost;
    int64_t tasks = 0;
    for (int r = 0; r < s->num_ranks; r++)
        tasks += s->ranks[r].num_tasks;
    fprintf(f, "schedule     %s\n", s->name);
    fprintf(f, "cost model   F=%g B=%g A=%g W=%g, transfer %g, %s\n", c->latency[0], c->latency[1],
            c->latency[2], c->latency[3], c->transfer,
            c->stage_scale ? "per-stage multipliers" : "equal stages");
    fprintf(f, "tasks        %lld in %lld programs\n", (long long)tasks, (long long)sim->num_ops);
    fprintf(f, "makespan     %g\n", sim->makespan);
    fprintf(f, "bubble       %.2f%% simulated\n", 100.0 * sim->bubble);
    if (isfinite(sim->analytic_bubble))
        fprintf(f, "             %.2f%% analytic, %s\n", 100.0 * sim->analytic_bubble, sim->analytic_formula);
    else
        fprintf(f, "             (no analytic value: %s)\n", sim->analytic_formula);
    int mem = c->keep_f > 0 || c->static_bytes > 0;
    fprintf(f, "\n%4s  %-10s %10s %10s %8s  %14s%s\n", "rank", "stages", "busy", "idle", "bubble",
            "peak in flight", mem ? "      peak bytes" : "");
    char st[64];
    for (int r = 0; r < s->num_ranks; r++) {
        stages_of(s, r, st, sizeof st);
        double idle = sim->makespan - sim->busy[r];
        fprintf(f, "%4d  %-10s %10g %10g %7.2f%%  %14d", r, st, sim->busy[r], idle,
                sim->makespan > 0 ? 100.0 * idle / sim->makespan : 0.0, sim->peak_in_flight[r]);
        if (mem) fprintf(f, "  %14.0f", sim->peak_bytes[r]);
        fputc('\n', f);
    }
}

static void write_report_json(FILE *f, const mpmd_schedule *s, const mpmd_sim *sim) {
    const mpmd_cost_model *c = &sim->cost;
    fputs("{\"schedule\": ", f);
    json_str(f, s->name);
    fprintf(f, ", \"stages\": %d, \"ranks\": %d, \"microbatches\": %d,\n", s->num_stages, s->num_ranks,
            s->num_microbatches);
    fprintf(f,
            " \"cost\": {\"F\": %.10g, \"B\": %.10g, \"A\": %.10g, \"W\": %.10g, \"transfer\": %.10g, "
            "\"keep_f\": %.0f, \"keep_w\": %.0f, \"stage_bytes\": %.0f, \"stage_scale\": ",
            c->latency[0], c->latency[1], c->latency[2], c->latency[3], c->transfer, c->keep_f, c->keep_w,
            c->static_bytes);
    if (c->stage_scale) {
        fputc('[', f);
        for (int i = 0; i < s->num_stages; i++)
            fprintf(f, "%s%.10g", i ? ", " : "", c->stage_scale[i]);
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    fprintf(f, "},\n \"programs\": %lld, \"makespan\": ", (long long)sim->num_ops);
    json_num(f, sim->makespan);
    fputs(", \"bubble\": ", f);
    json_num(f, sim->bubble);
    fputs(", \"analytic_bubble\": ", f);
    json_num(f, sim->analytic_bubble);
    fputs(", \"analytic_formula\": ", f);
    json_str(f, sim->analytic_formula);
    fputs(",\n \"per_rank\": [", f);
    for (int r = 0; r < s->num_ranks; r++) {
        fprintf(f, "%s\n  {\"rank\": %d, \"busy\": ", r ? "," : "", r);
        json_num(f, sim->busy[r]);
        fputs(", \"idle\": ", f);
        json_num(f, sim->makespan - sim->busy[r]);
        fprintf(f, ", \"peak_in_flight\": %d, \"peak_bytes\": %.0f}", sim->peak_in_flight[r],
                sim->peak_bytes[r]);
    }
    fputs("\n ]}\n", f);
}

static int write_timeline(FILE *f, const mpmd_schedule *s, const mpmd_sim *sim, enum format fmt) {
    mpmd_timeline *tl;
    mpmd_error err;
    if (mpmd_timeline_from_sim(s, sim, &tl, &err)) {
        fprintf(stderr, "mpmd: %s\n", err.msg);
        return 1;
    }
    if (fmt == FMT_SVG)
        mpmd_timeline_write_svg(tl, f);
    else
        mpmd_timeline_write_trace(tl, f);
    mpmd_timeline_free(tl);
    return 0;
}

static int run(options *o) {
    if (output_is_input(o))
        return usage_error(
            o, "-o %s is the schedule file of %s: writing it would destroy the input; give -o another path",
            o->output, o->name);
    mpmd_schedule *s;
    int rc = make_schedule(o, &s);
    if (rc) return rc;
    int simulate = strcmp(o->cmd, "simulate") == 0;
    if (o->stage_scale && o->n_stage_scale != s->num_stages) {
        fprintf(stderr, "mpmd %s: --stage-scale: %s has %d stages, the list has %d numbers\n", o->cmd,
                s->name, s->num_stages, o->n_stage_scale);
        mpmd_schedule_free(s);
        return EXIT_USAGE;
    }
    o->cost.stage_scale = o->stage_scale;
    mpmd_error err;
    char *report = NULL;
    mpmd_sim *sim = NULL;
    mpmd_status st;
    /* text and json of `schedule` need only the check; everything else the timed run. */
    if (!simulate && (o->format == FMT_TEXT || o->format == FMT_JSON))
        st = mpmd_schedule_validate(s, &err, &report);
    else
        st = mpmd_schedule_simulate(s, simulate ? &o->cost : NULL, &sim, &err, &report);
    if (st) {
        mpmd_schedule_free(s);
        return report_failure(o, st, &err, report);
    }
    /* -o FILE: written whole or not at all (mpmd_file_*), as checkpoints are */
    FILE *f = stdout;
    mpmd_file *out = NULL;
    if (o->output) {
        if (mpmd_file_create(o->output, &out, &err)) {
            fprintf(stderr, "mpmd %s: %s\n", o->cmd, err.msg);
            mpmd_sim_free(sim);
            mpmd_schedule_free(s);
            return 1;
        }
        f = mpmd_file_stream(out);
    }
    rc = 0;
    if (o->format == FMT_SVG || o->format == FMT_TRACE)
        rc = write_timeline(f, s, sim, o->format);
    else if (simulate && o->format == FMT_JSON)
        write_report_json(f, s, sim);
    else if (simulate)
        write_report_text(f, s, sim);
    else if (o->format == FMT_JSON)
        mpmd_schedule_write_json(s, f);
    else
        mpmd_schedule_write_text(s, f);
    /* (stdout is checked at the end, for every command: end()) */
    if (out) {
        if (rc)
            mpmd_file_discard(out);
        else if (mpmd_file_commit(out, &err)) /* checks every write: a full disk is an error */
            fprintf(stderr, "mpmd %s: %s\n", o->cmd, err.msg), rc = 1;
    }
    mpmd_sim_free(sim);
    mpmd_schedule_free(s);
    return rc;
}

/* main's exit status once stdout is flushed and closed: output that could
 * not be written (a full disk, `mpmd plan > /dev/full`) is a failure, with
 * a message, never exit 0 with the results lost. */
static int end(int status) {
    errno = 0;
    int bad = fflush(stdout) != 0,
        e = errno; /* a failed write earlier leaves the error flag; the flush repeats it */
    bad |= ferror(stdout) != 0;
    if (fclose(stdout) != 0 && !bad) bad = 1, e = errno;
    if (!bad) return status;
    fprintf(stderr, "mpmd: writing to stdout failed%s%s\n", e ? ": " : "", e ? strerror(e) : "");
    return status ? status : 1;
}

static int tool_main(int argc, char **argv) {
    if (argc < 2) {
        fputs(main_help, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(main_help, stdout);
        return 0;
    }
    if (!strcmp(cmd, "tokenize")) return tool_tokenize(argc, argv);
    if (!strcmp(cmd, "plan")) return tool_plan(argc, argv);
    if (strcmp(cmd, "schedule") && strcmp(cmd, "simulate")) {
        fprintf(stderr,
                "mpmd: unknown command '%s'; expected schedule, simulate, plan, tokenize or help (see `mpmd "
                "--help`)\n",
                cmd);
        return EXIT_USAGE;
    }
    options o;
    memset(&o, 0, sizeof o);
    o.cmd = cmd;
    o.cost = MPMD_COST_DEFAULTS;
    int rc = parse_args(argc, argv, &o);
    if (rc == 0) rc = run(&o);
    free(o.stage_scale);
    return rc < 0 ? 0 : rc;
}

int main(int argc, char **argv) { return end(tool_main(argc, argv)); }
