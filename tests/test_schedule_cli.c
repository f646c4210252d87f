/* The `mpmd` command: exit statuses, help texts, and its outputs. JSON
 * outputs are parsed here with a small strict parser: `--format json` must
 * be exactly one array of arrays of task strings and nothing else, equal
 * to the library's lists; traces and reports must be valid JSON.
 * The tool's path comes from tests/schedule.cmake (MPMD_TOOL). */
#define _POSIX_C_SOURCE 200809L /* WEXITSTATUS, getpid */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MPMD_TOOL
#error "MPMD_TOOL (the path of the mpmd tool) is set by tests/schedule.cmake"
#endif

/* ------------------------------------------------------------------------ */
/* A strict JSON parser (RFC 8259), enough to validate and to pull out the   */
/* strings of an array of arrays.                                            */
/* ------------------------------------------------------------------------ */

typedef struct jp {
    const char *p;
    /* when collecting: strings of the array nested at depth 2 */
    char **strs;
    int *row; /* the outer index of each string */
    int n, cap, depth, outer;
} jp;

static void ws(jp *j) {
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
        j->p++;
}

static int value(jp *j);

static int string(jp *j, char **out) {
    if (*j->p != '"') return 0;
    const char *start = ++j->p;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) return 0;
        if (c == '\\') {
            j->p++;
            if (*j->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i]) return 0;
                j->p += 4;
            } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
                return 0;
            }
        }
        j->p++;
    }
    if (out) {
        size_t len = (size_t)(j->p - start);
        *out = malloc(len + 1);
        memcpy(*out, start, len);
        (*out)[len] = 0;
    }
    j->p++;
    return 1;
}

static int number(jp *j) {
    const char *s = j->p;
    if (*j->p == '-') j->p++;
    if (*j->p == '0')
        j->p++;
    else if (*j->p >= '1' && *j->p <= '9')
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    else
        return 0;
    if (*j->p == '.') {
        j->p++;
        if (!(*j->p >= '0' && *j->p <= '9')) return 0;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        j->p++;
        if (*j->p == '+' || *j->p == '-') j->p++;
        if (!(*j->p >= '0' && *j->p <= '9')) return 0;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    return j->p > s;
}

static int array(jp *j) {
    j->p++;
    j->depth++;
    int index = 0;
    ws(j);
    if (*j->p == ']') {
        j->p++;
        j->depth--;
        return 1;
    }
    for (;;) {
        if (j->depth == 1) j->outer = index;
        ws(j);
        if (j->depth == 2 && j->strs && *j->p == '"') {
            if (j->n == j->cap) {
                j->cap = j->cap ? 2 * j->cap : 64;
                j->strs = realloc(j->strs, (size_t)j->cap * sizeof *j->strs);
                j->row = realloc(j->row, (size_t)j->cap * sizeof *j->row);
            }
            j->row[j->n] = j->outer;
            if (!string(j, &j->strs[j->n])) return 0;
            j->n++;
        } else if (!value(j)) {
            return 0;
        }
        ws(j);
        index++;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == ']') {
            j->p++;
            j->depth--;
            return 1;
        }
        return 0;
    }
}

static int object(jp *j) {
    j->p++;
    j->depth++;
    ws(j);
    if (*j->p == '}') {
        j->p++;
        j->depth--;
        return 1;
    }
    for (;;) {
        ws(j);
        if (!string(j, NULL)) return 0;
        ws(j);
        if (*j->p++ != ':') return 0;
        if (!value(j)) return 0;
        ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == '}') {
            j->p++;
            j->depth--;
            return 1;
        }
        return 0;
    }
}

static int value(jp *j) {
    ws(j);
    switch (*j->p) {
    case '{': return object(j);
    case '[': return array(j);
    case '"': return string(j, NULL);
    case 't': return strncmp(j->p, "true", 4) == 0 ? (j->p += 4, 1) : 0;
    case 'f': return strncmp(j->p, "false", 5) == 0 ? (j->p += 5, 1) : 0;
    case 'n': return strncmp(j->p, "null", 4) == 0 ? (j->p += 4, 1) : 0;
    default: return number(j);
    }
}

/* Exactly one JSON value and only white space after it. `first` gets its
 * opening character. */
static int json_one(const char *text, char *first, jp *j) {
    j->p = text;
    ws(j);
    if (first) *first = *j->p;
    if (!value(j)) return 0;
    ws(j);
    return *j->p == 0;
}

static void jp_free(jp *j) {
    for (int i = 0; i < j->n; i++)
        free(j->strs[i]);
    free(j->strs);
    free(j->row);
}

/* ------------------------------------------------------------------------ */
/* Running the tool                                                          */
/* ------------------------------------------------------------------------ */

static char out_path[64], err_path[64];
static char *out_text, *err_text;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return calloc(1, 1);
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t got;
    while ((got = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) b = realloc(b, cap *= 2);
    }
    b[len] = 0;
    fclose(f);
    return b;
}

/* Run `mpmd ARGS`, keep stdout and stderr; return the exit status. */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s >%s 2>%s", MPMD_TOOL, args, out_path, err_path);
    int st = system(cmd);
    free(out_text);
    free(err_text);
    out_text = slurp(out_path);
    err_text = slurp(err_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect_usage_error(const char *args, const char *needle) {
    int rc = run(args);
    CHECK(rc == 2, "mpmd %s: exit %d, expected 2 (stderr: %s)", args, rc, err_text);
    CHECK(strstr(err_text, needle) != NULL, "mpmd %s: stderr lacks '%s':\n%s", args, needle, err_text);
    CHECK(out_text[0] == 0, "mpmd %s: nothing on stdout, got: %.200s", args, out_text);
}

static void test_help(void) {
    int rc = run("--help");
    CHECK(rc == 0 && strstr(out_text, "usage: mpmd <command>") && strstr(out_text, "schedule") &&
              strstr(out_text, "simulate") && strstr(out_text, "exit status"),
          "mpmd --help: %d\n%s", rc, out_text);
    rc = run("");
    CHECK(rc == 2 && strstr(err_text, "usage: mpmd"), "mpmd alone: usage on stderr, exit 2 (%d)", rc);
    expect_usage_error("frobnicate", "unknown command 'frobnicate'");
    rc = run("schedule --help");
    CHECK(rc == 0, "schedule --help exit %d", rc);
    static const char *const sched_words[] = {"gpipe",
                                              "std1f1b",
                                              "eager1f1b",
                                              "interleaved1f1b",
                                              "kimik2",
                                              "zerobubble",
                                              "dualpipev",
                                              "interleavedgpipe",
                                              "file:PATH",
                                              "--stages",
                                              "--ranks",
                                              "--microbatches",
                                              "--fuse-steady-state",
                                              "--format",
                                              "text",
                                              "json",
                                              "svg",
                                              "trace",
                                              "--output",
                                              "FusedTask(",
                                              "bwdA_S__M",
                                              "exit status",
                                              NULL};
    for (int i = 0; sched_words[i]; i++)
        CHECK(strstr(out_text, sched_words[i]) != NULL, "schedule --help lacks '%s'", sched_words[i]);
    rc = run("simulate --help");
    static const char *const sim_words[] = {"--cost-f",   "--cost-b",      "--cost-a", "--cost-w",
                                            "--transfer", "--stage-scale", "makespan", "bubble",
                                            "peak",       "--format",      NULL};
    CHECK(rc == 0, "simulate --help exit %d", rc);
    for (int i = 0; sim_words[i]; i++)
        CHECK(strstr(out_text, sim_words[i]) != NULL, "simulate --help lacks '%s'", sim_words[i]);
}

/* `--format json` is one array of D arrays, equal to the library's lists. */
static void check_json_lists(const char *args, mpmd_schedule_kind kind, int S, int D, int n, int fuse) {
    int rc = run(args);
    CHECK(rc == 0 && err_text[0] == 0, "mpmd %s: exit %d, stderr %s", args, rc, err_text);
    jp j;
    memset(&j, 0, sizeof j);
    j.strs = malloc(sizeof *j.strs);
    j.row = malloc(sizeof *j.row);
    j.cap = 1;
    char first = 0;
    CHECK(json_one(out_text, &first, &j) && first == '[', "mpmd %s: stdout is not exactly one JSON array",
          args);
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_new(kind, S, D, n, fuse, &s, &err) == MPMD_OK) {
        int k = 0, same = 1;
        for (int r = 0; r < s->num_ranks; r++)
            for (int e = 0; e < s->ranks[r].num_entries; e++, k++) {
                int nt;
                const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
                char want[MPMD_ENTRY_STR_MAX];
                mpmd_entry_str(t, nt, want, sizeof want);
                if (k >= j.n || j.row[k] != r || strcmp(j.strs[k], want) != 0) same = 0;
            }
        CHECK(same && k == j.n, "mpmd %s: the JSON lists differ from the library's (%d vs %d strings)", args,
              j.n, k);
        mpmd_schedule_free(s);
    }
    jp_free(&j);
}

static void test_outputs(void) {
    check_json_lists("schedule std1f1b --stages 4 --microbatches 8 --format json", MPMD_SCHED_STD1F1B, 4, 4,
                     8, 0);
    check_json_lists("schedule interleaved1f1b --stages 8 --ranks 4 --microbatches 4 --format=json",
                     MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 4, 0);
    CHECK(strstr(out_text, "\"FusedTask(fwd_7__0, bwd_7__0)\"") != NULL, "a FusedTask is one string");
    check_json_lists("schedule kimik2 -S 8 -D 4 -n 8 --fuse-steady-state -f json", MPMD_SCHED_KIMIK2, 8, 4, 8,
                     1);
    check_json_lists("schedule dualpipev -S 8 -n 10 -f json", MPMD_SCHED_DUALPIPEV, 8, 4, 10, 0);
    check_json_lists("schedule zerobubble -S 1 -n 3 -f json", MPMD_SCHED_ZEROBUBBLE, 1, 1, 3, 0);
    /* --ranks defaults to --stages */
    check_json_lists("schedule interleaved1f1b -S 4 -n 4 -f json", MPMD_SCHED_INTERLEAVED1F1B, 4, 4, 4, 0);

    int rc = run("schedule std1f1b -S 4 -n 8");
    CHECK(rc == 0 &&
              strncmp(out_text, "rank 0: fwd_0__0 fwd_0__1 fwd_0__2 fwd_0__3 bwd_0__0 fwd_0__4", 60) == 0 &&
              strstr(out_text, "\nrank 3: fwd_3__0 bwd_3__0 fwd_3__1") != NULL,
          "text format:\n%s", out_text);

    /* The text output is a schedule file: file: gives the same lists. */
    char path[80];
    snprintf(path, sizeof path, "sched_cli_%d.sched", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(out_text, f);
    fclose(f);
    char args[256];
    snprintf(args, sizeof args, "schedule file:%s -f json", path);
    check_json_lists(args, MPMD_SCHED_STD1F1B, 4, 4, 8, 0);
    snprintf(args, sizeof args, "schedule file:%s --stages 4 --ranks 4 --microbatches 8", path);
    CHECK(run(args) == 0, "file: with agreeing counts");
    snprintf(args, sizeof args, "schedule file:%s --microbatches 6", path);
    expect_usage_error(args, "--microbatches 6 disagrees with file:");

    /* svg and trace */
    char svg[80];
    snprintf(svg, sizeof svg, "sched_cli_%d.svg", (int)getpid());
    snprintf(args, sizeof args, "schedule dualpipev -S 8 -n 8 --format svg -o %s", svg);
    rc = run(args);
    char *pic = slurp(svg);
    CHECK(rc == 0 && out_text[0] == 0 && strncmp(pic, "<svg", 4) == 0 && strstr(pic, "</svg>"),
          "svg to a file");
    free(pic);
    remove(svg);
    rc = run("schedule std1f1b -S 2 -n 2 --format svg");
    CHECK(rc == 0 && strncmp(out_text, "<svg", 4) == 0, "svg to stdout");
    rc = run("simulate interleaved1f1b -S 8 -D 4 -n 8 --transfer 0.5 --format trace");
    jp j;
    memset(&j, 0, sizeof j);
    char first = 0;
    CHECK(rc == 0 && json_one(out_text, &first, &j) && first == '{' && strstr(out_text, "\"traceEvents\":["),
          "trace is one JSON object with traceEvents");
    CHECK(strstr(out_text,
                 "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":3,\"args\":{\"name\":\"rank 3\"}"),
          "a named track per rank");

    /* memory per rank: 1 GiB of stage bytes and 64 MiB kept per forward in flight */
    rc = run("simulate std1f1b -S 4 -n 8 --keep-f 64M --stage-bytes 1G");
    CHECK(rc == 0 && strstr(out_text, "peak bytes") && strstr(out_text, "1342177280\n") &&
              strstr(out_text, "1140850688\n"),
          "simulate memory: %s", out_text);
    rc = run("simulate std1f1b -S 4 -n 8 --keep-f 64M --format json");
    CHECK(rc == 0 && strstr(out_text, "\"peak_bytes\": 268435456") &&
              strstr(out_text, "\"keep_f\": 67108864"),
          "simulate memory as json: %s", out_text);
    expect_usage_error("simulate gpipe -S 4 -n 8 --keep-f 2X",
                       "expected a byte count like 512M or 2G, got '2X'");
    expect_usage_error("simulate gpipe -S 4 -n 8 --cost-f 1e308 --cost-b 1e308", "the makespan is infinite");
    expect_usage_error("schedule file:/tmp", "cannot read it: Is a directory");
    expect_usage_error("schedule file:/dev/zero", "file:/dev/zero: a device, not a file");
    expect_usage_error(
        "schedule gpipe --stages 65536 --microbatches 65536",
        "is 4294967296 (stage, microbatch) pairs of 2 or 3 tasks each; a schedule may have at most "
        "8388608 pairs");
    expect_usage_error("simulate kimik2 -S 8192 -D 8192 -n 8192",
                       "a schedule may have at most 8388608 pairs");

    /* plan: the chosen layout fits, and no layout that fits is faster */
    rc = run("plan --ranks 4 --layers 12 --batch 32 --keep 6M --model-bytes 2G --memory-limit 1G");
    CHECK(rc == 0 && strstr(out_text, "43 layouts, memory limit 1.00 GiB per rank") &&
              strstr(out_text, "<- chosen"),
          "plan: exit %d: %s", rc, out_text);
    rc = run("plan --ranks 4 --layers 12 --batch 32 --keep 6M --model-bytes 2G --memory-limit 600M -f json");
    {
        const char *p = out_text;
        double top = -1;
        int fits = 0, bad = 0, over = 0;
        while ((p = strstr(p, "\"step\": "))) {
            double step = atof(p + 8);
            const char *pk = strstr(p, "\"peak_bytes\": ");
            long long peak = pk ? atoll(pk + 14) : -1;
            int ok_fit = strstr(p, "\"fits\": true") && strstr(p, "\"fits\": true") < strstr(p, "}");
            if (top < 0) top = step;
            if (ok_fit) {
                fits++;
                bad |= step < top;
                over |= peak > 600LL << 20;
            }
            p += 8;
        }
        CHECK(rc == 0 && fits > 0 && !bad && !over,
              "plan json: %d fit, one faster than the first: %d, over: %d", fits, bad, over);
    }
    rc = run("plan --ranks 4 --layers 12 --batch 32 --keep 6M --model-bytes 2G --memory-limit 100M");
    CHECK(rc == 2 &&
              strstr(err_text, "no layout fits in 104857600 bytes per rank; the smallest peak found is"),
          "plan: nothing fits: exit %d: %s", rc, err_text);
    expect_usage_error("plan --layers 4 --batch 8", "--ranks, --layers and --batch are required");
    expect_usage_error("plan --ranks 2 --layers 4 --batch 8 --stages 2", "plan chooses the layout itself");
    expect_usage_error("plan --ranks 8 --layers 4 --batch 8", "8 ranks for 4 layers");

    /* simulate reports */
    rc = run("simulate std1f1b -S 4 -n 8");
    CHECK(rc == 0 && strstr(out_text, "makespan     33\n") && strstr(out_text, "27.27% simulated") &&
              strstr(out_text, "27.27% analytic, (p-1)/(m+p-1) with p=4, m=8"),
          "simulate text:\n%s", out_text);
    rc = run(
        "simulate zerobubble -S 4 -n 8 --cost-f 1 --cost-a 1.5 --cost-w 0.5 --stage-scale 1,1,1,2 -f json");
    memset(&j, 0, sizeof j);
    CHECK(rc == 0 && json_one(out_text, &first, &j) && first == '{', "simulate json is one object:\n%s",
          out_text);
    CHECK(strstr(out_text, "\"stage_scale\": [1, 1, 1, 2]") && strstr(out_text, "\"A\": 1.5") &&
              strstr(out_text, "\"per_rank\": ["),
          "simulate json fields:\n%s", out_text);
    rc = run("simulate gpipe -S 2 -n 1 --transfer 0.5 -f json");
    CHECK(rc == 0 && strstr(out_text, "\"makespan\": 7,"), "transfer in the report:\n%s", out_text);
    remove(path);
}

static void test_errors(void) {
    expect_usage_error("schedule std1f1b --stages x --microbatches 4", "--stages: expected a whole number");
    expect_usage_error("schedule std1f1b --stages 0 --microbatches 4", "--stages: expected a whole number");
    expect_usage_error("schedule std1f1b --stages 4", "std1f1b needs --microbatches N");
    expect_usage_error("schedule std1f1b --microbatches 4", "std1f1b needs --stages S");
    expect_usage_error("schedule --stages 4 --microbatches 4", "which schedule?");
    expect_usage_error("schedule std1f1b gpipe -S 4 -n 4", "one schedule NAME only");
    expect_usage_error("schedule onef1b -S 4 -n 4", "unknown schedule 'onef1b'");
    expect_usage_error("schedule std1f1b -S 4 -n 4 --frobnicate", "unknown option '--frobnicate'");
    expect_usage_error("schedule std1f1b -S 4 -n 4 --format png",
                       "--format: expected text, json, svg or trace");
    expect_usage_error("schedule std1f1b -S 4 -n", "-n needs a value");
    expect_usage_error("schedule std1f1b -S 4 -n 4 --fuse-steady-state", "--fuse-steady-state applies to");
    expect_usage_error("schedule std1f1b -S 4 -D 2 -n 4", "4 stages and 2 ranks");
    expect_usage_error("schedule interleaved1f1b -S 6 -D 4 -n 4",
                       "Interleaved1F1B(S=6, D=4, n=4): the number");
    expect_usage_error("schedule dualpipev -S 8 -n 4", "n >= S");
    expect_usage_error("schedule zerobubble -S 4 -n 2", "ZeroBubble(S=4, n=2)");
    expect_usage_error("simulate std1f1b -S 4 -n 4 --cost-b -1", "--cost-b: expected a finite number >= 0");
    expect_usage_error("simulate std1f1b -S 4 -n 4 --transfer nan", "--transfer: expected a finite number");
    expect_usage_error("simulate std1f1b -S 4 -n 4 --stage-scale 1,2", "the list has 2 numbers");
    expect_usage_error("simulate std1f1b -S 4 -n 4 --stage-scale 1,x,1,1", "--stage-scale: expected");
    expect_usage_error("schedule std1f1b -S 4 -n 4 --cost-f 2", "unknown option '--cost-f'");
    expect_usage_error("schedule file:/nonexistent/x.sched", "file:/nonexistent/x.sched: cannot open");
    expect_usage_error("schedule file:", "file: needs a path");

    /* A bad schedule file: the parse error's line and column; a deadlock's report. */
    char path[80], args[200];
    snprintf(path, sizeof path, "sched_cli_%d_bad.sched", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("fwd_0__0 bwd_0__0\nfwd_1__0 bwd_1__O\n", f);
    fclose(f);
    snprintf(args, sizeof args, "schedule file:%s", path);
    char where[120];
    snprintf(where, sizeof where, "file:%s:2:17: expected a microbatch number", path);
    expect_usage_error(args, where);
    f = fopen(path, "w");
    fputs("rank 0: fwd_0__0 bwd_0__0 fwd_0__1 bwd_0__1\nrank 1: fwd_1__0 fwd_1__1 bwd_1__1 bwd_1__0\n", f);
    fclose(f);
    expect_usage_error(args, "does not honour its data dependencies");
    CHECK(strstr(err_text, "rank 0: next bwd_0__0 (entry 1) waits for bwd_1__0") &&
              strstr(err_text, "    1 | [B0.0] [F1.1]"),
          "deadlock report with its grid on stderr:\n%s", err_text);
    snprintf(args, sizeof args, "simulate file:%s -f json", path);
    expect_usage_error(args, "does not honour");
    remove(path);

    /* An output that cannot be written: status 1. */
    int rc = run("schedule std1f1b -S 2 -n 2 --format svg -o /nonexistent/dir/x.svg");
    CHECK(rc == 1 && strstr(err_text, "cannot write /nonexistent/dir/x.svg"), "unwritable output: %d %s", rc,
          err_text);
}

/* The smallest "step" of a plan's JSON (layouts given by their costs). */
static double least_step(const char *json, int *n) {
    double least = INFINITY;
    *n = 0;
    for (const char *p = json; (p = strstr(p, "\"step\": ")); p += 8, ++*n)
        if (atof(p + 8) < least) least = atof(p + 8);
    return least;
}

/* mpmd plan with a model given by its costs: the backward's halves follow
 * --cost-b, stage counts are any multiple of the ranks, remat is derived. */
static void test_plan_costs(void) {
    /* remat given through --cost-b alone: 64 samples of F 1 + B 3 on 4 ranks
     * take at least 64 units; ZeroBubble once read its split halves from the
     * defaults (A 1 + W 1) and was predicted at 48.88 */
    int rc = run("plan --ranks 4 --layers 8 --batch 64 --cost-b 3 -f json"), n;
    double least = least_step(out_text, &n);
    CHECK(rc == 0 && n > 0 && least >= 64 && strstr(out_text, "zerobubble"),
          "plan --cost-b 3: the fastest of %d layouts at %g, below the compute floor 64", n, least);
    rc = run("plan --ranks 4 --layers 8 --batch 64 --cost-a 1 --cost-w 2 -f json");
    least = least_step(out_text, &n);
    CHECK(rc == 0 && least >= 64, "plan --cost-a 1 --cost-w 2: fastest %g, below 64", least);
    expect_usage_error("plan --ranks 4 --layers 8 --batch 64 --cost-b 3 --cost-a 1 --cost-w 1",
                       "--cost-b 3 is not --cost-a 1 + --cost-w 1");
    expect_usage_error("plan --ranks 4 --layers 8 --batch 64 --cost-b 1 --cost-a 2",
                       "--cost-b 1 is less than --cost-a 2");
    /* any multiple of the ranks, up to the layers */
    rc = run("plan --ranks 2 --layers 6 --batch 8 -f json");
    CHECK(rc == 0 && strstr(out_text, "\"schedule\": \"interleaved1f1b\", \"stages\": 6") &&
              !strstr(out_text, "\"stages\": 8"),
          "plan: 6 stages (3 a rank) tried, never more stages than layers:\n%.400s", out_text);
    /* remat: the backward pays the forward again, and keeps less */
    rc = run("plan --ranks 2 --layers 2 --batch 2 --keep 1M --remat-keep 100k -f json");
    CHECK(rc == 0 && strstr(out_text, "\"remat\": \"block\"") && strstr(out_text, "\"remat\": \"none\""),
          "plan --remat-keep: both policies tried:\n%.400s", out_text);
    rc = run("plan --ranks 1 --layers 1 --batch 1 --cost-f 1 --cost-b 2 --keep 1M --remat-keep 100k -f json");
    CHECK(rc == 0 && strstr(out_text, "\"remat\": \"none\", \"step\": 3,") &&
              strstr(out_text, "\"remat\": \"block\", \"step\": 4,"),
          "plan: one sample, F 1 + B 2, and 1 more with remat:\n%s", out_text);
}

/* mpmd plan with a transformer on a cluster, and its bad inputs. */
static void test_plan_cluster(void) {
    int rc = run("plan --cluster dgx-a100 --model gpt3-175b --batch 64 --gpus 64 --tp 8 --pp 8 --remat block "
                 "--schedules interleaved1f1b --stages-per-rank 3 --microbatch 1");
    CHECK(rc == 0 && strstr(out_text, "1 layout predicted, 1 fit") && strstr(out_text, "<- chosen") &&
              strstr(out_text, "interleaved1f1b      24") &&
              strstr(out_text, "efficiency matrix products 0.75") && strstr(out_text, "  rank  stages") &&
              strstr(out_text, "0e,8,16") && strstr(out_text, "7,15,23h"),
          "plan --cluster: exit %d:\n%s%s", rc, out_text, err_text);
    rc = run("plan --cluster dgx-h100 --layers 8 --hidden 512 --heads 8 --vocab 1000 --seq 128 --batch 32 "
             "--gpus 16 "
             "-f json");
    jp j;
    memset(&j, 0, sizeof j);
    char first;
    CHECK(rc == 0 && json_one(out_text, &first, &j) && first == '{' &&
              strstr(out_text, "\"cluster\": \"dgx-h100\""),
          "plan --cluster -f json: exit %d, one object:\n%.300s", rc, out_text);
    jp_free(&j);
    /* nothing fits: exit 2, the smallest peak named, and still the report */
    rc = run("plan --cluster dgx-a100 --model gpt3-175b --gpus 8");
    CHECK(rc == 2 && strstr(err_text, "no layout fits in 80.00 GiB per GPU; the smallest peak found is") &&
              strstr(out_text, "exceed 80.00 GiB a GPU"),
          "plan: 175B on 8 GPUs fits nowhere: exit %d\n%s", rc, err_text);
    /* descriptions that are wrong, named with file and line */
    char path[80], args[300];
    snprintf(path, sizeof path, "plan_cli_%d.cluster", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("# my cluster\nbase = dgx-a100\nnet_bandwidth = 12.5G\nnode_latency = fast\n", f);
    fclose(f);
    snprintf(args, sizeof args, "plan --cluster %s --model gpt3-175b --gpus 64", path);
    char where[160];
    snprintf(where, sizeof where, "%s:4: node_latency: expected a positive number of seconds", path);
    expect_usage_error(args, where);
    f = fopen(path, "w");
    fputs("gpus_per_node = 8\npeak_bf16 = 312T\n", f);
    fclose(f);
    snprintf(where, sizeof where, "%s: no peak_f32 given", path);
    expect_usage_error(args, where);
    f = fopen(path, "w");
    fputs("base = dgx-a100\nnvlink = 600G\n", f);
    fclose(f);
    snprintf(where, sizeof where, "%s:2: unknown key \"nvlink\"", path);
    expect_usage_error(args, where);
    remove(path);
    expect_usage_error("plan --cluster nosuch --model gpt3-175b --gpus 8",
                       "--cluster nosuch: neither a preset");
    expect_usage_error(
        "plan --cluster dgx-a100 --layers 4 --hidden 100 --heads 3 --vocab 10 --seq 8 --batch 4 --gpus 2",
        "the model's 3 heads do not divide its hidden width 100");
    expect_usage_error("plan --cluster dgx-a100 --layers 4 --hidden 64 --heads 4 --seq 8 --batch 4 --gpus 2",
                       "the model's vocab must be at least 1");
    expect_usage_error("plan --cluster dgx-a100 --model gpt3-175b --gpus 64 --tp 3", "tp 3 x pp 0 x dp 0");
    expect_usage_error("plan --cluster dgx-a100 --model gpt3-175b", "--cluster needs --gpus N");
    expect_usage_error("plan --cluster dgx-a100 --model gpt3-175b --gpus 8 --ranks 8",
                       "describe a model by its costs");
    expect_usage_error("plan --ranks 4 --layers 8 --batch 8 --hidden 64", "need --cluster");
    expect_usage_error("plan --cluster dgx-a100 --model gpt3-175b --gpus 8 --schedules std1f1b,onef1b",
                       "--schedules: unknown name 'onef1b'");
    expect_usage_error("plan --cluster dgx-a100 --model gpt3-175b --gpus 8 --fsdp sometimes",
                       "--fsdp: expected no");
}

/* The parser above rejects what is not exactly one JSON value. */
static void test_json_parser(void) {
    static const char *const good[] = {"[]", " [[\"a\", \"b\"], []]\n", "{\"a\": [1, -2.5e-3, true, null]}",
                                       "\"x\\u00e9\"", NULL};
    static const char *const bad[] = {
        "",     "[] []", "[1,]",      "[\"a\"", "{\"a\" 1}", "[01]", "[\"tab\tin string\"]",
        "[1.]", "nul",   "[\"a\"] x", NULL};
    for (int i = 0; good[i]; i++) {
        jp j;
        memset(&j, 0, sizeof j);
        CHECK(json_one(good[i], NULL, &j), "valid JSON rejected: %s", good[i]);
    }
    for (int i = 0; bad[i]; i++) {
        jp j;
        memset(&j, 0, sizeof j);
        CHECK(!json_one(bad[i], NULL, &j), "invalid JSON accepted: %s", bad[i]);
    }
}

int main(void) {
    test_json_parser();
    snprintf(out_path, sizeof out_path, "sched_cli_%d.out", (int)getpid());
    snprintf(err_path, sizeof err_path, "sched_cli_%d.err", (int)getpid());
    test_help();
    test_outputs();
    test_errors();
    test_plan_costs();
    test_plan_cluster();
    free(out_text);
    free(err_text);
    remove(out_path);
    remove(err_path);
    return tu_report("test_schedule_cli");
}
