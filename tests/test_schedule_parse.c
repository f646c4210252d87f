/* User schedules: the text form round trip (text -> schedule -> text), the
 * grammar's rules (comments, blank lines, "rank R:", commas, CRLF), every
 * parse error with its line and column, and the validator's messages on
 * hand-written bad schedules, the deadlock report with its grid included. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "testutil.h"

#include <string.h>

static char *text_of(const mpmd_schedule *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    mpmd_schedule_write_text(s, f);
    fclose(f);
    return buf;
}

static mpmd_schedule *parse(const char *text, mpmd_error *err) {
    mpmd_schedule *s = NULL;
    mpmd_schedule_parse(text, strlen(text), "test", &s, err);
    return s;
}

/* Every built-in schedule survives text -> schedule -> text unchanged, and
 * the parsed one has the same counts, placement and entries. */
static void test_round_trip(void) {
    static const struct {
        mpmd_schedule_kind kind;
        int S, D, n, fuse;
    } cases[] = {{MPMD_SCHED_GPIPE, 3, 3, 4, 0},
                 {MPMD_SCHED_STD1F1B, 4, 4, 8, 0},
                 {MPMD_SCHED_EAGER1F1B, 4, 4, 3, 0},
                 {MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 8, 0},
                 {MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 8, 1},
                 {MPMD_SCHED_KIMIK2, 6, 3, 6, 0},
                 {MPMD_SCHED_ZEROBUBBLE, 4, 4, 8, 0},
                 {MPMD_SCHED_DUALPIPEV, 8, 4, 10, 0},
                 {MPMD_SCHED_INTERLEAVED_GPIPE, 6, 2, 5, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mpmd_schedule *s = NULL, *p = NULL;
        mpmd_error err;
        if (mpmd_schedule_new(cases[i].kind, cases[i].S, cases[i].D, cases[i].n, cases[i].fuse, &s, &err)) {
            CHECK(0, "case %zu: %s", i, err.msg);
            continue;
        }
        char *t1 = text_of(s);
        mpmd_status st = mpmd_schedule_parse(t1, strlen(t1), "round trip", &p, &err);
        CHECK(st == MPMD_OK, "%s: parse of its own text: %s", s->name, err.msg);
        if (!st) {
            char *t2 = text_of(p);
            CHECK(strcmp(t1, t2) == 0, "%s: text differs after the round trip", s->name);
            free(t2);
            CHECK(p->kind == MPMD_SCHED_USER && p->num_stages == s->num_stages &&
                      p->num_ranks == s->num_ranks && p->num_microbatches == s->num_microbatches &&
                      p->split_backward == s->split_backward,
                  "%s: counts after the round trip", s->name);
            int same = 1;
            for (int st2 = 0; st2 < s->num_stages; st2++)
                same &= p->stage_rank[st2] == s->stage_rank[st2];
            for (int r = 0; r < s->num_ranks; r++) {
                same &= p->ranks[r].num_entries == s->ranks[r].num_entries &&
                        p->ranks[r].num_tasks == s->ranks[r].num_tasks;
                if (!same) break;
                same &= memcmp(p->ranks[r].entry_start, s->ranks[r].entry_start,
                               (size_t)(s->ranks[r].num_entries + 1) * sizeof(int32_t)) == 0;
                same &= memcmp(p->ranks[r].tasks, s->ranks[r].tasks,
                               (size_t)s->ranks[r].num_tasks * sizeof(mpmd_task)) == 0;
            }
            CHECK(same, "%s: placement and lists after the round trip", s->name);
            CHECK(mpmd_schedule_validate(p, &err, NULL) == MPMD_OK, "%s parsed: %s", s->name, err.msg);
        }
        free(t1);
        mpmd_schedule_free(p);
        mpmd_schedule_free(s);
    }
}

/* The lenient parts of the grammar. */
static void test_grammar(void) {
    mpmd_error err;
    const char *text = "# a 2-stage GPipe, written by hand\r\n"
                       "\n"
                       "rank 0: fwd_0__0, fwd_0__1   bwd_0__0 bwd_0__1  # comment after tasks\r\n"
                       "   # an indented comment line\n"
                       "\t rank  1 :FusedTask(fwd_1__0,bwd_1__0)  FusedTask( fwd_1__1 , bwd_1__1 )\n"
                       "rank 2:\n"; /* a rank without tasks */
    mpmd_schedule *s = parse(text, &err);
    CHECK(s != NULL, "lenient text: %s", err.msg);
    if (s) {
        CHECK(s->num_ranks == 3 && s->num_stages == 2 && s->num_microbatches == 2, "counts %d %d %d",
              s->num_ranks, s->num_stages, s->num_microbatches);
        CHECK(s->ranks[0].num_entries == 4 && s->ranks[1].num_entries == 2 && s->ranks[2].num_entries == 0,
              "entries");
        CHECK(s->stage_rank[0] == 0 && s->stage_rank[1] == 1, "placement from the lines");
        CHECK(s->split_backward == 0, "no split");
        CHECK(strstr(s->name, "test (S=2, D=3, n=2)") == s->name, "name %s", s->name);
        CHECK(mpmd_schedule_validate(s, &err, NULL) == MPMD_OK, "valid: %s", err.msg);
        char *t = text_of(s);
        CHECK(strcmp(t, "rank 0: fwd_0__0 fwd_0__1 bwd_0__0 bwd_0__1\n"
                        "rank 1: FusedTask(fwd_1__0, bwd_1__0) FusedTask(fwd_1__1, bwd_1__1)\n"
                        "rank 2:\n") == 0,
              "canonical text:\n%s", t);
        free(t);
        mpmd_schedule_free(s);
    }
    /* No prefixes at all, and no trailing newline. */
    s = parse("fwd_0__0 bwd_0__0\nfwd_1__0 bwd_1__0", &err);
    CHECK(s && s->num_ranks == 2, "plain lines: %s", err.msg);
    mpmd_schedule_free(s);
}

static void expect_parse_error(const char *text, const char *where, const char *what) {
    mpmd_error err;
    mpmd_schedule *s = NULL;
    mpmd_status st = mpmd_schedule_parse(text, strlen(text), "f.sched", &s, &err);
    CHECK(st == MPMD_ERR_FORMAT && s == NULL, "'%s' should not parse (status %d)", text, (int)st);
    if (st != MPMD_ERR_FORMAT) return;
    CHECK(strstr(err.msg, where) == err.msg, "'%s': message should start with '%s': %s", text, where,
          err.msg);
    CHECK(strstr(err.msg, what) != NULL, "'%s': message lacks '%s': %s", text, what, err.msg);
}

static void test_parse_errors(void) {
    expect_parse_error("fwd_0__0 fwd_0__1\nfwd_1__0 fwX_1__1\n", "f.sched:2:10:", "expected a task");
    expect_parse_error("fwd_0__0 fwd_0_1\n", "f.sched:1:15:", "'__' between the stage and the microbatch");
    expect_parse_error("fwd_a__0\n", "f.sched:1:5:", "expected a stage number, found 'a__0'");
    expect_parse_error("fwd_0__\n", "f.sched:1:8:", "expected a microbatch number, found end of line");
    expect_parse_error("fwd_0__0x\n", "f.sched:1:9:", "after the task");
    expect_parse_error("fwd_0__99999999999\n", "f.sched:1:8:", "too large");
    expect_parse_error("FusedTask(fwd_0__0)\n", "f.sched:1:1:", "2 or 3 tasks");
    expect_parse_error("FusedTask(fwd_0__0, bwd_0__0, fwd_0__1, bwd_0__1)\n", "f.sched:1:1:", "at most 3");
    expect_parse_error("FusedTask(fwd_0__0, bwd_0__0\n", "f.sched:1:29:", "',' or ')' in the FusedTask");
    expect_parse_error("FusedTask(fwd_0__0 bwd_0__0)\n", "f.sched:1:20:", "',' or ')'");
    expect_parse_error("fwd_0__0,,fwd_0__1\n", "f.sched:1:10:", "a task after ','");
    expect_parse_error("fwd_0__0 ,\n", "f.sched:1:11:", "a task after ','");
    expect_parse_error("rank 1: fwd_0__0\n", "f.sched:1:1:", "says rank 1, but it is the line of rank 0");
    expect_parse_error("rank 0 fwd_0__0\n", "f.sched:1:8:", "':' after 'rank R'");
    expect_parse_error("rank x: fwd_0__0\n", "f.sched:1:6:", "a rank number");
    expect_parse_error("fwd_0__0 bwd_0__0\n# comment\nfwd_1__0 fwd_0__1\n",
                       "f.sched:3:10:", "stage 0 is already on rank 0 (line 1)");
    expect_parse_error("fwd_0__0 \x01\n", "f.sched:1:10:", "\\x01");
    expect_parse_error("", "f.sched:", "no ranks");
    expect_parse_error("# only a comment\n\n", "f.sched:", "no ranks");
    expect_parse_error("rank 0:\nrank 1:\n", "f.sched:", "no tasks on any of its 2 ranks");
    /* Files. */
    mpmd_schedule *s = NULL;
    mpmd_error err;
    CHECK(mpmd_schedule_load("/nonexistent/x.sched", &s, &err) == MPMD_ERR_IO && s == NULL, "missing file");
    CHECK(strstr(err.msg, "file:/nonexistent/x.sched: cannot open") != NULL, "missing file message: %s",
          err.msg);
}

/* Validation of parsed schedules: each rule with its message. */
static void expect_invalid(const char *text, const char *const *needles, const char *label) {
    mpmd_error err;
    mpmd_schedule *s = parse(text, &err);
    CHECK(s != NULL, "%s: should parse: %s", label, err.msg);
    if (!s) return;
    char *report = NULL;
    mpmd_status st = mpmd_schedule_validate(s, &err, &report);
    CHECK(st == MPMD_ERR_SCHEDULE, "%s: should be invalid", label);
    CHECK(report != NULL, "%s: a report", label);
    for (int i = 0; needles[i]; i++) {
        CHECK(strstr(err.msg, needles[i]) != NULL, "%s: message lacks '%s':\n%s", label, needles[i], err.msg);
        CHECK(report && strstr(report, needles[i]) != NULL, "%s: report lacks '%s'", label, needles[i]);
    }
    /* simulate refuses it the same way */
    mpmd_sim *sim = NULL;
    CHECK(mpmd_schedule_simulate(s, NULL, &sim, NULL, NULL) == MPMD_ERR_SCHEDULE && sim == NULL,
          "%s: simulate", label);
    free(report);
    mpmd_schedule_free(s);
}

static void test_validation_errors(void) {
    /* microbatches out of order on a stage: the validator refuses what
     * mpmd_jit_with_loop could not run with the loop's numbers (one rule) */
    expect_invalid("fwd_0__1 fwd_0__0 bwd_0__0 bwd_0__1\n",
                   (const char *[]){"rank 0 runs fwd_0__1 where microbatch 0 of F(0) comes next",
                                    "microbatches in order", NULL},
                   "microbatches out of order");
    expect_invalid("fwd_0__0 fwd_0__0 bwd_0__0\n",
                   (const char *[]){"fwd_0__0 appears twice: rank 0 entry 0 and rank 0 entry 1", NULL},
                   "duplicate");
    expect_invalid(
        "fwd_0__0 fwd_0__1 bwd_0__0\n",
        (const char *[]){"1 task is missing, the first is bwd_0__1 (stage 0 runs on rank 0)", NULL},
        "missing");
    expect_invalid("fwd_0__0 fwd_0__1 bwd_0__0 bwd_0__1\nfwd_2__0 fwd_2__1 bwd_2__0 bwd_2__1\n",
                   (const char *[]){"stage 1 runs on no rank", NULL}, "a stage nowhere");
    expect_invalid(
        "fwd_0__0 bwd_0__0\nfwd_1__0 bwdA_1__0 bwdW_1__0\n",
        (const char *[]){"split into bwdA_ and bwdW_ tasks, yet the schedule also has bwd_0__0", NULL},
        "mixed backward");
    expect_invalid("fwd_0__0 bwdA_0__0 fwd_0__1 bwdW_0__0 bwdA_0__1 bwdW_0__1\n",
                   (const char *[]){"rank 0 entry 1: bwdA_0__0 must be immediately followed by bwdW_0__0",
                                    "found fwd_0__1", NULL},
                   "stage 0 A without W");
    expect_invalid(
        "fwd_0__0 FusedTask(bwdA_0__0, fwd_0__1) bwdW_0__0 bwdA_0__1 bwdW_0__1\n",
        (const char *[]){"bwdA_0__0 must be immediately followed by bwdW_0__0", "found fwd_0__1", NULL},
        "stage 0 A without W in a FusedTask");
    expect_invalid(
        "fwd_0__0 bwdA_0__0 bwdW_0__1 fwd_0__1 bwdA_0__1 bwdW_0__0\n",
        (const char *[]){"bwdA_0__0 must be immediately followed by bwdW_0__0", "found bwdW_0__1", NULL},
        "stage 0 A followed by another microbatch's W");
    /* A deadlock: each rank's next task, what it waits for, and the grid. */
    const char *bad = "# rank 0 runs B(0,0) before F(0,1); rank 1 wants F(0,1) before B(1,0)\n"
                      "rank 0: fwd_0__0 bwd_0__0 fwd_0__1 bwd_0__1\n"
                      "rank 1: fwd_1__0 fwd_1__1 bwd_1__1 bwd_1__0\n"
                      "rank 2: fwd_2__0 fwd_2__1 bwd_2__0 bwd_2__1\n";
    expect_invalid(
        bad,
        (const char *[]){"does not honour its data dependencies: 3 of 12 programs ran",
                         "rank 0: next bwd_0__0 (entry 1) waits for bwd_1__0, rank 1's entry 3; rank 1 is "
                         "stuck at entry 1 (fwd_1__1)",
                         "rank 1: next fwd_1__1 (entry 1) waits for fwd_0__1, rank 0's entry 2",
                         "rank 2: next fwd_2__1 (entry 1) waits for fwd_1__1, rank 1's entry 1", NULL},
        "deadlock");
    mpmd_error err;
    mpmd_schedule *s = parse(bad, &err);
    char *report = NULL;
    if (s && mpmd_schedule_validate(s, &err, &report) == MPMD_ERR_SCHEDULE && report) {
        const char *grid = strstr(report, "entry | rank 0");
        CHECK(grid != NULL, "report has a grid:\n%s", report);
        CHECK(strstr(report, "    0 | F0.0   F1.0   F2.0\n    1 | [B0.0] [F1.1] [F2.1]\n") != NULL,
              "grid rows with the stuck entries marked:\n%s", report);
    } else {
        CHECK(0, "deadlock report");
    }
    free(report);
    mpmd_schedule_free(s);
    /* A FusedTask whose members are out of order waits for itself. */
    expect_invalid(
        "fwd_0__0 bwd_0__0\nFusedTask(bwd_1__0, fwd_1__0)\n",
        (const char *[]){"rank 1: next FusedTask(bwd_1__0, fwd_1__0) (entry 0) waits for fwd_1__0, "
                         "which comes later in the same FusedTask",
                         NULL},
        "fused out of order");
    /* A rank that runs its own stage's backward before the forward. */
    expect_invalid("bwd_0__0 fwd_0__0\n",
                   (const char *[]){"waits for fwd_0__0, which comes later in its own list (entry 1)", NULL},
                   "own order");
}

/* A schedule built by hand (plain structs) validates like any other, and
 * malformed structs get a message rather than a crash. */
static void test_hand_built(void) {
    mpmd_task tasks0[] = {{MPMD_TASK_F, 0, 0}, {MPMD_TASK_B, 0, 0}};
    mpmd_task tasks1[] = {{MPMD_TASK_F, 1, 0}, {MPMD_TASK_B, 1, 0}};
    int32_t es0[] = {0, 1, 2}, es1[] = {0, 2};
    mpmd_schedule_rank ranks[2] = {{2, 2, es0, tasks0}, {1, 2, es1, tasks1}};
    int32_t stage_rank[2] = {0, 1};
    mpmd_schedule s = {MPMD_SCHED_USER, "hand-built", 2, 2, 1, 0, 0, stage_rank, ranks, 0};
    mpmd_error err;
    CHECK(mpmd_schedule_validate(&s, &err, NULL) == MPMD_OK, "hand-built: %s", err.msg);
    tasks1[1].stage = 0;
    CHECK(mpmd_schedule_validate(&s, &err, NULL) == MPMD_ERR_SCHEDULE &&
              strstr(err.msg, "rank 1 entry 0: bwd_0__0 belongs on rank 0, which runs stage 0"),
          "wrong rank: %s", err.msg);
    tasks1[1].stage = 7;
    CHECK(mpmd_schedule_validate(&s, &err, NULL) == MPMD_ERR_SCHEDULE && strstr(err.msg, "stages 0..1"),
          "stage out of range: %s", err.msg);
    tasks1[1].stage = 1;
    tasks1[1].kind = 9;
    CHECK(mpmd_schedule_validate(&s, &err, NULL) == MPMD_ERR_SCHEDULE && strstr(err.msg, "not F, B, A or W"),
          "bad kind: %s", err.msg);
    tasks1[1].kind = MPMD_TASK_B;
    es1[1] = 1;
    CHECK(mpmd_schedule_validate(&s, &err, NULL) == MPMD_ERR_SCHEDULE && strstr(err.msg, "malformed"),
          "bad entry_start: %s", err.msg);

    /* forward only: the forwards alone are complete, a backward is wrong */
    es1[1] = 2;
    mpmd_task f0[] = {{MPMD_TASK_F, 0, 0}}, f1[] = {{MPMD_TASK_F, 1, 0}, {MPMD_TASK_B, 1, 0}};
    int32_t fe0[] = {0, 1}, fe1[] = {0, 1, 2};
    mpmd_schedule_rank fr[2] = {{1, 1, fe0, f0}, {1, 1, fe1, f1}};
    mpmd_schedule fs = {MPMD_SCHED_USER, "forward", 2, 2, 1, 0, 0, stage_rank, fr, 1};
    CHECK(mpmd_schedule_validate(&fs, &err, NULL) == MPMD_OK, "forward only: %s", err.msg);
    fs.forward_only = 0;
    CHECK(mpmd_schedule_validate(&fs, &err, NULL) == MPMD_ERR_SCHEDULE && strstr(err.msg, "missing"),
          "forwards alone, not forward only: %s", err.msg);
    fs.forward_only = 1;
    fr[1].num_entries = 2, fr[1].num_tasks = 2;
    CHECK(mpmd_schedule_validate(&fs, &err, NULL) == MPMD_ERR_SCHEDULE &&
              strstr(err.msg, "a forward-only schedule has bwd_1__0"),
          "a backward in a forward-only schedule: %s", err.msg);
}

int main(void) {
    test_round_trip();
    test_grammar();
    test_parse_errors();
    test_validation_errors();
    test_hand_built();
    return tu_report("test_schedule_parse");
}
