/* The built-in schedules: the worked examples of docs/schedules.md (and
 * shared/SCHEDULES.md) pinned task for task, more small cases derived by
 * hand from the rules, invariants over a grid of S, D and n checked by an
 * independent (slow, obvious) checker, and every parameter error with its
 * message. */
#include "testutil.h"

#include <string.h>

/* One rank's list as text, entries separated by one space. */
static char *rank_text(const mpmd_schedule *s, int r, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int e = 0; e < s->ranks[r].num_entries && n < len; e++) {
        int nt;
        const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
        char one[MPMD_ENTRY_STR_MAX];
        mpmd_entry_str(t, nt, one, sizeof one);
        n += (size_t)snprintf(buf + n, len - n, "%s%s", e ? " " : "", one);
    }
    return buf;
}

static void expect_rank(const mpmd_schedule *s, int r, const char *want, const char *label) {
    static char got[1 << 16];
    rank_text(s, r, got, sizeof got);
    CHECK(strcmp(got, want) == 0, "%s rank %d:\n  got  %s\n  want %s", label, r, got, want);
}

static mpmd_schedule *make(mpmd_schedule_kind kind, int S, int D, int n, int fuse) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    mpmd_status st = mpmd_schedule_new(kind, S, D, n, fuse, &s, &err);
    CHECK(st == MPMD_OK, "%s S=%d D=%d n=%d: %s", mpmd_schedule_kind_name(kind), S, D, n, err.msg);
    return s;
}

/* The examples of SCHEDULES.md, exactly. */
static void test_worked_examples(void) {
    mpmd_schedule *s = make(MPMD_SCHED_INTERLEAVED1F1B, 4, 4, 4, 0);
    if (s) {
        expect_rank(s, 2, "fwd_2__0 fwd_2__1 fwd_2__2 bwd_2__0 fwd_2__3 bwd_2__1 bwd_2__2 bwd_2__3",
                    "Interleaved1F1B(4,4) n=4");
        expect_rank(
            s, 3,
            "FusedTask(fwd_3__0, bwd_3__0) FusedTask(fwd_3__1, bwd_3__1) FusedTask(fwd_3__2, bwd_3__2) "
            "FusedTask(fwd_3__3, bwd_3__3)",
            "Interleaved1F1B(4,4) n=4");
        mpmd_schedule_free(s);
    }
    s = make(MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 4, 0);
    if (s) {
        expect_rank(
            s, 0,
            "fwd_0__0 fwd_0__1 fwd_0__2 fwd_0__3 fwd_4__0 fwd_4__1 fwd_4__2 fwd_4__3 bwd_4__0 bwd_4__1 "
            "bwd_4__2 bwd_4__3 bwd_0__0 bwd_0__1 bwd_0__2 bwd_0__3",
            "Interleaved1F1B(8,4) n=4");
        /* The tutorial notebook's rank 3: the last stage fuses F and B. */
        expect_rank(
            s, 3,
            "fwd_3__0 fwd_3__1 fwd_3__2 fwd_3__3 FusedTask(fwd_7__0, bwd_7__0) FusedTask(fwd_7__1, bwd_7__1) "
            "FusedTask(fwd_7__2, bwd_7__2) FusedTask(fwd_7__3, bwd_7__3) bwd_3__0 bwd_3__1 bwd_3__2 bwd_3__3",
            "Interleaved1F1B(8,4) n=4");
        mpmd_schedule_free(s);
    }
    s = make(MPMD_SCHED_STD1F1B, 4, 4, 8, 0);
    if (s) {
        expect_rank(
            s, 1,
            "fwd_1__0 fwd_1__1 fwd_1__2 bwd_1__0 fwd_1__3 bwd_1__1 fwd_1__4 bwd_1__2 fwd_1__5 bwd_1__3 "
            "fwd_1__6 bwd_1__4 fwd_1__7 bwd_1__5 bwd_1__6 bwd_1__7",
            "Std1F1B(4) n=8");
        mpmd_schedule_free(s);
    }
    s = make(MPMD_SCHED_ZEROBUBBLE, 4, 4, 8, 0);
    if (s) {
        expect_rank(
            s, 1,
            "fwd_1__0 fwd_1__1 fwd_1__2 bwdA_1__0 fwd_1__3 bwdA_1__1 bwdW_1__0 fwd_1__4 bwdA_1__2 bwdW_1__1 "
            "fwd_1__5 bwdA_1__3 bwdW_1__2 fwd_1__6 bwdA_1__4 bwdW_1__3 fwd_1__7 bwdA_1__5 bwdW_1__4 "
            "bwdA_1__6 bwdW_1__5 bwdA_1__7 bwdW_1__6 bwdW_1__7",
            "ZeroBubble(4) n=8");
        CHECK(s->split_backward == 1, "ZeroBubble splits the backward");
        mpmd_schedule_free(s);
    }
}

/* Small cases worked out by hand from the rules of docs/schedules.md. */
static void test_hand_derived(void) {
    mpmd_schedule *s = make(MPMD_SCHED_GPIPE, 2, 0, 2, 0);
    if (s) {
        expect_rank(s, 0, "fwd_0__0 fwd_0__1 bwd_0__0 bwd_0__1", "GPipe(2) n=2");
        expect_rank(s, 1, "fwd_1__0 fwd_1__1 bwd_1__0 bwd_1__1", "GPipe(2) n=2");
        mpmd_schedule_free(s);
    }
    s = make(MPMD_SCHED_EAGER1F1B, 3, 0, 4, 0);
    if (s) {
        expect_rank(s, 0, "fwd_0__0 fwd_0__1 fwd_0__2 fwd_0__3 bwd_0__0 bwd_0__1 bwd_0__2 bwd_0__3",
                    "Eager1F1B(3)");
        expect_rank(s, 1, "fwd_1__0 fwd_1__1 fwd_1__2 bwd_1__0 fwd_1__3 bwd_1__1 bwd_1__2 bwd_1__3",
                    "Eager1F1B(3)");
        expect_rank(s, 2, "fwd_2__0 bwd_2__0 fwd_2__1 bwd_2__1 fwd_2__2 bwd_2__2 fwd_2__3 bwd_2__3",
                    "Eager1F1B(3)");
        mpmd_schedule_free(s);
    }
    /* ZeroBubble with one stage: JaxPP crashes, ours gives F A W F A W ... */
    s = make(MPMD_SCHED_ZEROBUBBLE, 1, 0, 3, 0);
    if (s) {
        expect_rank(s, 0,
                    "fwd_0__0 bwdA_0__0 bwdW_0__0 fwd_0__1 bwdA_0__1 bwdW_0__1 fwd_0__2 bwdA_0__2 bwdW_0__2",
                    "ZeroBubble(1)");
        mpmd_schedule_free(s);
    }
    /* KimiK2(4, 2), n=4: v=2, rounds R=2 of k=2; w = 5 on rank 0, 3 on rank 1. */
    s = make(MPMD_SCHED_KIMIK2, 4, 2, 4, 0);
    if (s) {
        expect_rank(
            s, 0,
            "fwd_0__0 fwd_0__1 fwd_2__0 fwd_2__1 fwd_0__2 fwd_0__3 bwd_2__0 fwd_2__2 bwd_2__1 fwd_2__3 "
            "bwd_0__0 bwd_0__1 bwd_2__2 bwd_2__3 bwd_0__2 bwd_0__3",
            "KimiK2(4,2) n=4");
        expect_rank(
            s, 1,
            "fwd_1__0 fwd_1__1 fwd_3__0 FusedTask(fwd_3__1, bwd_3__0) fwd_1__2 bwd_3__1 fwd_1__3 bwd_1__0 "
            "FusedTask(fwd_3__2, bwd_1__1) FusedTask(fwd_3__3, bwd_3__2) bwd_3__3 bwd_1__2 bwd_1__3",
            "KimiK2(4,2) n=4");
        mpmd_schedule_free(s);
    }
    /* fuse_steady_state fuses every steady-state pair. */
    s = make(MPMD_SCHED_INTERLEAVED1F1B, 4, 4, 4, 1);
    if (s) {
        expect_rank(
            s, 2,
            "fwd_2__0 fwd_2__1 FusedTask(fwd_2__2, bwd_2__0) FusedTask(fwd_2__3, bwd_2__1) bwd_2__2 bwd_2__3",
            "Interleaved1F1B(4,4,fuse) n=4");
        mpmd_schedule_free(s);
    }
    /* DualPipeV(4, 2), n=4: rank 0 runs stages 0 and 3, rank 1 stages 1 and 2. */
    s = make(MPMD_SCHED_DUALPIPEV, 4, 2, 4, 0);
    if (s) {
        expect_rank(
            s, 0,
            "fwd_0__0 fwd_0__1 fwd_0__2 fwd_3__0 bwdA_3__0 bwdW_3__0 fwd_3__1 "
            "FusedTask(fwd_0__3, bwdA_3__1, bwdW_3__1) FusedTask(fwd_3__2, bwdA_0__0, bwdW_0__0) "
            "FusedTask(bwdA_3__2, bwdW_3__2) FusedTask(fwd_3__3, bwdA_0__1, bwdW_0__1) "
            "FusedTask(bwdA_3__3, bwdW_3__3) FusedTask(bwdA_0__2, bwdW_0__2) FusedTask(bwdA_0__3, bwdW_0__3)",
            "DualPipeV(4,2) n=4");
        expect_rank(s, 1,
                    "fwd_1__0 fwd_2__0 fwd_1__1 fwd_2__1 fwd_1__2 FusedTask(bwdA_2__0, bwdW_2__0) "
                    "FusedTask(fwd_2__2, bwdA_1__0, bwdW_1__0) FusedTask(fwd_1__3, bwdA_2__1, bwdW_2__1) "
                    "FusedTask(fwd_2__3, bwdA_1__1, bwdW_1__1) FusedTask(bwdA_2__2, bwdW_2__2) "
                    "FusedTask(bwdA_1__2, bwdW_1__2) bwdA_2__3 FusedTask(bwdA_1__3, bwdW_1__3) bwdW_2__3",
                    "DualPipeV(4,2) n=4");
        CHECK(s->stage_rank[0] == 0 && s->stage_rank[1] == 1 && s->stage_rank[2] == 1 &&
                  s->stage_rank[3] == 0,
              "DualPipeV places stages in a V");
        mpmd_schedule_free(s);
    }
    /* InterleavedGPipe(4, 2), n=3: rounds of D=2 microbatches, {0,1} then {2}. */
    s = make(MPMD_SCHED_INTERLEAVED_GPIPE, 4, 2, 3, 0);
    if (s) {
        expect_rank(
            s, 0,
            "fwd_0__0 fwd_0__1 fwd_2__0 fwd_2__1 fwd_0__2 fwd_2__2 bwd_2__0 bwd_2__1 bwd_0__0 bwd_0__1 "
            "bwd_2__2 bwd_0__2",
            "InterleavedGPipe(4,2) n=3");
        mpmd_schedule_free(s);
    }
}

/* ------------------------------------------------------------------------ */
/* An independent checker: obvious, quadratic, shares no code with the       */
/* library's validator.                                                      */
/* ------------------------------------------------------------------------ */

static int expected_rank(mpmd_schedule_kind kind, int S, int D, int stage) {
    if (kind == MPMD_SCHED_DUALPIPEV) return stage < D ? stage : S - 1 - stage;
    return stage % D;
}

/* Returns 1 when every invariant holds; reports the first broken one. */
static int check_invariants(const mpmd_schedule *s, const char *label) {
    int S = s->num_stages, D = s->num_ranks, n = s->num_microbatches;
    int split = s->split_backward;
    /* seen[kind][stage][mb] */
    int *seen = calloc((size_t)4 * S * n, sizeof *seen);
    int *done = calloc((size_t)4 * S * n, sizeof *done);
    int *pos = calloc((size_t)D, sizeof *pos);
    int ok = 1;
#define AT(arr, k, st, m) arr[((size_t)(k)*S + (size_t)(st)) * n + (size_t)(m)]
    for (int r = 0; r < D && ok; r++) {
        for (int e = 0; e < s->ranks[r].num_entries && ok; e++) {
            int nt;
            const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
            if (nt < 1 || nt > 3) {
                CHECK(0, "%s: rank %d entry %d has %d tasks", label, r, e, nt);
                ok = 0;
            }
            for (int i = 0; i < nt && ok; i++) {
                if (t[i].stage < 0 || t[i].stage >= S || t[i].microbatch < 0 || t[i].microbatch >= n) {
                    CHECK(0, "%s: rank %d entry %d: task out of range", label, r, e);
                    ok = 0;
                    break;
                }
                if (expected_rank(s->kind, S, D, t[i].stage) != r || s->stage_rank[t[i].stage] != r) {
                    CHECK(0, "%s: rank %d runs a task of stage %d", label, r, t[i].stage);
                    ok = 0;
                }
                if (split ? t[i].kind == MPMD_TASK_B
                          : (t[i].kind == MPMD_TASK_A || t[i].kind == MPMD_TASK_W)) {
                    CHECK(0, "%s: kind %d in a schedule with split=%d", label, t[i].kind, split);
                    ok = 0;
                }
                if (AT(seen, t[i].kind, t[i].stage, t[i].microbatch)++) {
                    CHECK(0, "%s: task kind %d stage %d mb %d twice", label, t[i].kind, t[i].stage,
                          t[i].microbatch);
                    ok = 0;
                }
                /* stage 0: A immediately followed by W of the same microbatch */
                if (t[i].kind == MPMD_TASK_A && t[i].stage == 0) {
                    const mpmd_task *next = NULL;
                    int nt2;
                    if (i + 1 < nt)
                        next = &t[i + 1];
                    else if (nt == 1 && e + 1 < s->ranks[r].num_entries) {
                        const mpmd_task *t2 = mpmd_schedule_entry(s, r, e + 1, &nt2);
                        if (nt2 == 1) next = t2;
                    }
                    if (!next || next->kind != MPMD_TASK_W || next->stage != 0 ||
                        next->microbatch != t[i].microbatch) {
                        CHECK(0, "%s: rank %d entry %d: stage 0's A not followed by its W", label, r, e);
                        ok = 0;
                    }
                }
            }
        }
    }
    for (int st = 0; st < S && ok; st++)
        for (int m = 0; m < n && ok; m++) {
            int want = AT(seen, MPMD_TASK_F, st, m) == 1 &&
                       (split ? AT(seen, MPMD_TASK_A, st, m) == 1 && AT(seen, MPMD_TASK_W, st, m) == 1
                              : AT(seen, MPMD_TASK_B, st, m) == 1);
            if (!want) {
                CHECK(0, "%s: stage %d microbatch %d lacks a task", label, st, m);
                ok = 0;
            }
        }
    /* Dependencies: sweep the ranks until nothing moves. */
    int moved = 1;
    while (ok && moved) {
        moved = 0;
        for (int r = 0; r < D; r++) {
            while (pos[r] < s->ranks[r].num_entries) {
                int nt;
                const mpmd_task *t = mpmd_schedule_entry(s, r, pos[r], &nt);
                int ready = 1;
                for (int i = 0; i < nt && ready; i++) {
                    /* members run in order: mark as we go, undo if not ready */
                    int st = t[i].stage, m = t[i].microbatch;
                    switch (t[i].kind) {
                    case MPMD_TASK_F: ready = st == 0 || AT(done, MPMD_TASK_F, st - 1, m); break;
                    case MPMD_TASK_W: ready = AT(done, MPMD_TASK_A, st, m); break;
                    default:
                        ready = AT(done, MPMD_TASK_F, st, m) &&
                                (st == S - 1 || AT(done, MPMD_TASK_B, st + 1, m) ||
                                 AT(done, MPMD_TASK_A, st + 1, m));
                    }
                    if (ready) AT(done, t[i].kind, st, m) = 1;
                }
                if (!ready) {
                    for (int i = 0; i < nt; i++)
                        AT(done, t[i].kind, t[i].stage, t[i].microbatch) = 0;
                    break;
                }
                pos[r]++;
                moved = 1;
            }
        }
    }
    for (int r = 0; r < D && ok; r++)
        if (pos[r] != s->ranks[r].num_entries) {
            CHECK(0, "%s: deadlock: rank %d stops at entry %d of %d", label, r, pos[r],
                  s->ranks[r].num_entries);
            ok = 0;
        }
#undef AT
    free(seen);
    free(done);
    free(pos);
    return ok;
}

/* Why a constructor may refuse (S, D, n); NULL if it must accept. */
static const char *expected_refusal(mpmd_schedule_kind kind, int S, int D, int n) {
    switch (kind) {
    case MPMD_SCHED_ZEROBUBBLE: return n < S ? "n >= S" : NULL;
    case MPMD_SCHED_DUALPIPEV: return S != 2 * D ? "S == 2 D" : n < S ? "n >= S" : NULL;
    case MPMD_SCHED_INTERLEAVED1F1B:
    case MPMD_SCHED_KIMIK2: {
        if (S % D) return "multiple";
        int R = n / D > 1 ? n / D : 1;
        return n % R ? "rounds" : NULL;
    }
    case MPMD_SCHED_INTERLEAVED_GPIPE: return S % D ? "multiple" : NULL;
    default: return NULL;
    }
}

static void test_invariants_grid(void) {
    static const int Ss[] = {1, 2, 3, 4, 5, 6, 8, 12, 16};
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 24};
    int quick = tu_quick(), built = 0, refused = 0;
    for (int kind = 0; kind < MPMD_SCHED_USER; kind++) {
        for (size_t i = 0; i < sizeof Ss / sizeof Ss[0]; i++) {
            int S = Ss[i];
            if (quick && S > 8) continue;
            for (int D = 1; D <= S; D++) {
                int single = kind == MPMD_SCHED_GPIPE || kind == MPMD_SCHED_STD1F1B ||
                             kind == MPMD_SCHED_EAGER1F1B || kind == MPMD_SCHED_ZEROBUBBLE;
                if (single && D != S) continue;
                if (kind == MPMD_SCHED_DUALPIPEV && D != S / 2 && D != S) continue;
                for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
                    for (int fuse = 0;
                         fuse <= (kind == MPMD_SCHED_INTERLEAVED1F1B || kind == MPMD_SCHED_KIMIK2); fuse++) {
                        int n = ns[j];
                        char label[128];
                        snprintf(label, sizeof label, "%s(S=%d, D=%d, n=%d%s)",
                                 mpmd_schedule_kind_name((mpmd_schedule_kind)kind), S, D, n,
                                 fuse ? ", fuse" : "");
                        mpmd_schedule *s = NULL;
                        mpmd_error err;
                        mpmd_status st = mpmd_schedule_new((mpmd_schedule_kind)kind, S, D, n, fuse, &s, &err);
                        const char *why = expected_refusal((mpmd_schedule_kind)kind, S, D, n);
                        if (why) {
                            CHECK(st == MPMD_ERR_INVALID && s == NULL, "%s should be refused (%s)", label,
                                  why);
                            refused++;
                            continue;
                        }
                        CHECK(st == MPMD_OK, "%s: %s", label, err.msg);
                        if (st) continue;
                        built++;
                        CHECK(s->num_stages == S && s->num_ranks == D && s->num_microbatches == n,
                              "%s: counts", label);
                        if (check_invariants(s, label)) {
                            char *report = NULL;
                            st = mpmd_schedule_validate(s, &err, &report);
                            CHECK(st == MPMD_OK && report == NULL, "%s: validate: %s", label, err.msg);
                            free(report);
                        }
                        mpmd_schedule_free(s);
                    }
                }
            }
        }
    }
    CHECK(built > 500 && refused > 50, "grid covered %d schedules and %d refusals", built, refused);
}

/* Every parameter error, with the numbers in its message. */
static void expect_error(mpmd_status st, const mpmd_error *err, const char *const *needles,
                         const char *label) {
    CHECK(st == MPMD_ERR_INVALID, "%s: status %d", label, (int)st);
    for (int i = 0; needles[i]; i++)
        CHECK(strstr(err->msg, needles[i]) != NULL, "%s: message lacks '%s': %s", label, needles[i],
              err->msg);
}

static void test_errors(void) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    expect_error(mpmd_schedule_interleaved1f1b(6, 4, 4, 0, &s, &err), &err,
                 (const char *[]){"Interleaved1F1B(S=6, D=4, n=4)", "multiple", "6 stages on 4 ranks", NULL},
                 "S not a multiple of D");
    expect_error(mpmd_schedule_kimik2(4, 2, 5, 0, &s, &err), &err,
                 (const char *[]){"KimiK2(S=4, D=2, n=5)", "max(1, n / D) = 2 rounds", "leave 1 over", NULL},
                 "KimiK2 n not a multiple of the rounds");
    /* n = 6 on 4 ranks is one round of 6 microbatches: accepted. */
    CHECK(mpmd_schedule_interleaved1f1b(8, 4, 6, 0, &s, &err) == MPMD_OK, "Interleaved1F1B(8,4,6): %s",
          err.msg);
    mpmd_schedule_free(s);
    s = NULL;
    expect_error(mpmd_schedule_interleaved1f1b(8, 4, 9, 0, &s, &err), &err,
                 (const char *[]){"Interleaved1F1B(S=8, D=4, n=9)", "2 rounds", "multiple of 2", NULL},
                 "n not a multiple of the rounds");
    expect_error(mpmd_schedule_dualpipev(6, 4, 8, &s, &err), &err,
                 (const char *[]){"DualPipeV(S=6, D=4, n=8)", "S == 2 D", "would need 8 stages", NULL},
                 "DualPipeV S != 2D");
    expect_error(mpmd_schedule_dualpipev(8, 4, 7, &s, &err), &err,
                 (const char *[]){"DualPipeV(S=8, D=4, n=7)", "n >= S", "7 microbatches for 8 stages", NULL},
                 "DualPipeV n < S");
    expect_error(mpmd_schedule_zerobubble(4, 3, &s, &err), &err,
                 (const char *[]){"ZeroBubble(S=4, n=3)", "n >= S", "3 microbatches for 4 stages", NULL},
                 "ZeroBubble n < S");
    expect_error(mpmd_schedule_std1f1b(0, 4, &s, &err), &err,
                 (const char *[]){"Std1F1B(S=0, n=4)", ">= 1", "0 stages", NULL}, "zero stages");
    expect_error(mpmd_schedule_gpipe(4, -2, &s, &err), &err,
                 (const char *[]){"GPipe(S=4, n=-2)", "-2 microbatches", NULL}, "negative microbatches");
    expect_error(mpmd_schedule_interleaved_gpipe(4, 0, 2, &s, &err), &err,
                 (const char *[]){"InterleavedGPipe(S=4, D=0, n=2)", "0 ranks", NULL}, "zero ranks");
    expect_error(mpmd_schedule_new(MPMD_SCHED_STD1F1B, 4, 2, 8, 0, &s, &err), &err,
                 (const char *[]){"Std1F1B(S=4, n=8)", "4 stages and 2 ranks", NULL}, "S != D for Std1F1B");
    expect_error(mpmd_schedule_new(MPMD_SCHED_USER, 4, 4, 8, 0, &s, &err), &err,
                 (const char *[]){"not a built-in", NULL}, "user kind");
    expect_error(mpmd_schedule_std1f1b(1 << 25, 4, &s, &err), &err, (const char *[]){"at most", NULL},
                 "absurd counts");
    CHECK(s == NULL, "no schedule on error");
}

static void test_names(void) {
    CHECK(mpmd_schedule_kind_from_name("std1f1b") == MPMD_SCHED_STD1F1B, "std1f1b");
    CHECK(mpmd_schedule_kind_from_name("Interleaved1F1B") == MPMD_SCHED_INTERLEAVED1F1B, "class name");
    CHECK(mpmd_schedule_kind_from_name("INTERLEAVEDGPIPE") == MPMD_SCHED_INTERLEAVED_GPIPE, "any case");
    CHECK(mpmd_schedule_kind_from_name("dualpipev") == MPMD_SCHED_DUALPIPEV, "dualpipev");
    CHECK(mpmd_schedule_kind_from_name("user") == -1, "user is not a built-in name");
    CHECK(mpmd_schedule_kind_from_name("1f1b") == -1, "unknown");
    CHECK(strcmp(mpmd_schedule_kind_name(MPMD_SCHED_KIMIK2), "KimiK2") == 0, "KimiK2");
    mpmd_task t = {MPMD_TASK_W, 12, 345};
    char buf[MPMD_TASK_STR_MAX];
    CHECK(mpmd_task_str(&t, buf, sizeof buf) == 12 && strcmp(buf, "bwdW_12__345") == 0, "task text %s", buf);
    mpmd_task f[3] = {{MPMD_TASK_F, 1, 2}, {MPMD_TASK_A, 0, 0}, {MPMD_TASK_W, 0, 0}};
    char e[MPMD_ENTRY_STR_MAX];
    int len = mpmd_entry_str(f, 3, e, sizeof e);
    CHECK(strcmp(e, "FusedTask(fwd_1__2, bwdA_0__0, bwdW_0__0)") == 0 && len == (int)strlen(e),
          "fused text %s", e);
    char small[10];
    len = mpmd_entry_str(f, 3, small, sizeof small);
    CHECK(len == (int)strlen(e) && strcmp(small, "FusedTask") == 0, "truncated text keeps full length: %s",
          small);
    mpmd_schedule *s = make(MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 4, 1);
    if (s) {
        CHECK(strcmp(s->name, "Interleaved1F1B(S=8, D=4, n=4, fuse_steady_state)") == 0, "name %s", s->name);
        mpmd_schedule_free(s);
    }
}

int main(void) {
    test_worked_examples();
    test_hand_derived();
    test_names();
    test_errors();
    test_invariants_grid();
    return tu_report("test_schedule");
}
