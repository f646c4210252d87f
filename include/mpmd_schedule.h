/* mpmd_schedule.h - pipeline schedules, their validation and simulation.
 *
 * A schedule says, for every pipeline rank, in which order it runs the
 * forward and backward tasks of its stages over the microbatches. The
 * built-in schedules produce exactly JaxPP's task lists (the rules are in
 * docs/schedules.md); a user can also write a schedule as text, one line
 * per rank. Everything here is plain data the compiler can walk.
 *
 *     mpmd_schedule *s;
 *     mpmd_error err;
 *     if (mpmd_schedule_std1f1b(4, 8, &s, &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *     for (int r = 0; r < s->num_ranks; r++) {
 *         const mpmd_schedule_rank *rk = &s->ranks[r];
 *         for (int e = 0; e < rk->num_entries; e++) {
 *             int nt;
 *             const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);  // 1..3 tasks
 *             char buf[MPMD_ENTRY_STR_MAX];
 *             mpmd_entry_str(t, nt, buf, sizeof buf);    // "fwd_1__0", "FusedTask(...)"
 *         }
 *     }
 *     mpmd_sim *sim;                                     // validate + time it
 *     if (mpmd_schedule_simulate(s, NULL, &sim, &err, NULL) == MPMD_OK)
 *         printf("bubble %.3f\n", sim->bubble);
 *     mpmd_sim_free(sim);
 *     mpmd_schedule_free(s);
 *
 * Vocabulary: S stages (0..S-1), D ranks, n microbatches (0..n-1). A task is
 * (kind, stage, microbatch); its text form is JaxPP's: fwd_<s>__<m>,
 * bwd_<s>__<m>, bwdA_<s>__<m>, bwdW_<s>__<m>. An entry of a rank's list is
 * one task, or 2..3 tasks run as one program, a FusedTask, written
 * "FusedTask(fwd_7__0, bwd_7__0)".
 *
 * Ownership: a schedule, a simulation result and a timeline own all their
 * arrays; free them with their _free function. Report strings returned
 * through `char **report` are malloc'ed; the caller frees them with free().
 */
#ifndef MPMD_SCHEDULE_H
#define MPMD_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mpmd_error.h"

#ifdef __cplusplus
extern "C" {
#endif

MPMD_API_BEGIN

/* ------------------------------------------------------------------------ */
/* Tasks and schedules                                                       */
/* ------------------------------------------------------------------------ */

typedef enum mpmd_task_kind {
    MPMD_TASK_F = 0, /* forward                                   fwd_  */
    MPMD_TASK_B = 1, /* full backward                             bwd_  */
    MPMD_TASK_A = 2, /* backward w.r.t. activations (BWD_I)       bwdA_ */
    MPMD_TASK_W = 3  /* backward w.r.t. weights (BWD_W)           bwdW_ */
} mpmd_task_kind;
#define MPMD_TASK_KINDS 4

typedef struct mpmd_task {
    int32_t kind; /* mpmd_task_kind */
    int32_t stage;
    int32_t microbatch;
} mpmd_task;

/* Most tasks in one entry (a FusedTask). */
#define MPMD_FUSED_MAX 3

/* One rank's ordered list. Entry e is the tasks
 * tasks[entry_start[e]] .. tasks[entry_start[e+1] - 1]; more than one task
 * is a FusedTask, run as one program in member order. */
typedef struct mpmd_schedule_rank {
    int32_t num_entries;
    int32_t num_tasks;
    int32_t *entry_start; /* [num_entries + 1] */
    mpmd_task *tasks;     /* [num_tasks] */
} mpmd_schedule_rank;

typedef enum mpmd_schedule_kind {
    MPMD_SCHED_GPIPE = 0,
    MPMD_SCHED_STD1F1B,
    MPMD_SCHED_EAGER1F1B,
    MPMD_SCHED_INTERLEAVED1F1B,
    MPMD_SCHED_KIMIK2,
    MPMD_SCHED_ZEROBUBBLE,
    MPMD_SCHED_DUALPIPEV,
    MPMD_SCHED_INTERLEAVED_GPIPE,
    MPMD_SCHED_USER /* read from text (mpmd_schedule_parse / _load) */
} mpmd_schedule_kind;
#define MPMD_SCHED_NUM_KINDS 9

typedef struct mpmd_schedule {
    mpmd_schedule_kind kind;
    /* "Std1F1B(S=4, D=4, n=8)"; for a user schedule its source, e.g.
     * "file:my.sched (S=4, D=2, n=4)". Used in every message about it. */
    char name[256];
    int32_t num_stages;        /* S */
    int32_t num_ranks;         /* D */
    int32_t num_microbatches;  /* n */
    int split_backward;        /* 1: backwards are A and W tasks, 0: B tasks */
    int fuse_steady_state;     /* Interleaved1F1B / KimiK2 option as built */
    int32_t *stage_rank;       /* [S]: the rank that runs each stage (-1: none, user schedules only) */
    mpmd_schedule_rank *ranks; /* [D] */
    int forward_only;          /* 1: forward tasks only: a loop body without gradients, as compiled */
} mpmd_schedule;

/* The tasks of entry `e` of rank `r`; *ntasks gets their count (1..3). */
static inline const mpmd_task *mpmd_schedule_entry(const mpmd_schedule *s, int r, int e, int *ntasks) {
    const mpmd_schedule_rank *rk = &s->ranks[r];
    *ntasks = rk->entry_start[e + 1] - rk->entry_start[e];
    return rk->tasks + rk->entry_start[e];
}

/* Built-in schedules. Each returns MPMD_OK and *out (free with
 * mpmd_schedule_free), or MPMD_ERR_INVALID with a message naming the
 * schedule and the numbers (S not a multiple of D, too few microbatches,
 * S != 2D for DualPipeV, counts < 1, a schedule too large for int32).
 * The rules are in docs/schedules.md. */
/* S == D, stage s on rank s. */
mpmd_status mpmd_schedule_gpipe(int num_stages, int num_microbatches, mpmd_schedule **out, mpmd_error *err);
mpmd_status mpmd_schedule_std1f1b(int num_stages, int num_microbatches, mpmd_schedule **out, mpmd_error *err);
mpmd_status mpmd_schedule_eager1f1b(int num_stages, int num_microbatches, mpmd_schedule **out,
                                    mpmd_error *err);
/* ZB-H1; needs n >= S. */
mpmd_status mpmd_schedule_zerobubble(int num_stages, int num_microbatches, mpmd_schedule **out,
                                     mpmd_error *err);
/* S a multiple of D, stage s on rank s % D. */
mpmd_status mpmd_schedule_interleaved1f1b(int num_stages, int num_ranks, int num_microbatches,
                                          int fuse_steady_state, mpmd_schedule **out, mpmd_error *err);
mpmd_status mpmd_schedule_kimik2(int num_stages, int num_ranks, int num_microbatches, int fuse_steady_state,
                                 mpmd_schedule **out, mpmd_error *err);
mpmd_status mpmd_schedule_interleaved_gpipe(int num_stages, int num_ranks, int num_microbatches,
                                            mpmd_schedule **out, mpmd_error *err);
/* S == 2D, rank r runs stages r and 2D-1-r; needs n >= S. */
mpmd_status mpmd_schedule_dualpipev(int num_stages, int num_ranks, int num_microbatches, mpmd_schedule **out,
                                    mpmd_error *err);

/* Any built-in kind by value. num_ranks 0 means "the default": S for the
 * kinds that need S == D, S / 2 for DualPipeV, S otherwise.
 * fuse_steady_state only applies to Interleaved1F1B and KimiK2. */
mpmd_status mpmd_schedule_new(mpmd_schedule_kind kind, int num_stages, int num_ranks, int num_microbatches,
                              int fuse_steady_state, mpmd_schedule **out, mpmd_error *err);

void mpmd_schedule_free(mpmd_schedule *s);

/* JaxPP's class name of a kind ("Std1F1B", ..., "User"). */
const char *mpmd_schedule_kind_name(mpmd_schedule_kind kind);
/* The kind named by a command-line name ("gpipe", "std1f1b", "eager1f1b",
 * "interleaved1f1b", "kimik2", "zerobubble", "dualpipev",
 * "interleavedgpipe") or a class name, case-insensitive; -1 if unknown. */
int mpmd_schedule_kind_from_name(const char *name);

/* ------------------------------------------------------------------------ */
/* Text form                                                                 */
/* ------------------------------------------------------------------------ */

/* Enough for any task's and any entry's text, terminator included. */
#define MPMD_TASK_STR_MAX 32
#define MPMD_ENTRY_STR_MAX 112

/* "fwd_2__0" / "FusedTask(fwd_7__0, bwd_7__0)" into buf (always
 * terminated); returns the length of the full text, as snprintf does. */
int mpmd_task_str(const mpmd_task *t, char *buf, size_t len);
int mpmd_entry_str(const mpmd_task *tasks, int ntasks, char *buf, size_t len);

/* One line per rank, "rank R: entry entry ...", entries separated by one
 * space. This is also the text the parser reads. MPMD_ERR_IO on a write error. */
mpmd_status mpmd_schedule_write_text(const mpmd_schedule *s, FILE *f);
/* Exactly one JSON array: one array per rank of entry strings, e.g.
 * [["fwd_0__0", "bwd_0__0"], ["FusedTask(fwd_1__0, bwd_1__0)"]], and a newline. */
mpmd_status mpmd_schedule_write_json(const mpmd_schedule *s, FILE *f);

/* Read a user schedule from text. The rules (docs/schedules.md):
 * - one line per rank, ranks in order; lines that are blank or hold only a
 *   comment are skipped; `#` starts a comment that runs to the end of line;
 * - a line may start with "rank R:" (R must be that line's rank number);
 *   "rank R:" alone is a rank with no tasks;
 * - entries are separated by white space or commas; an entry is a task
 *   (fwd_S__M, bwd_S__M, bwdA_S__M, bwdW_S__M) or FusedTask(t1, t2[, t3]);
 * - a stage runs on the one rank whose line names it; S, D and n are
 *   counted from the text (highest stage + 1, lines, highest microbatch + 1).
 * `source` names the text in messages ("file:PATH" for files); errors say
 * "SOURCE:LINE:COLUMN: what was expected, what was found" (MPMD_ERR_FORMAT).
 * The result is not validated: call mpmd_schedule_validate. */
mpmd_status mpmd_schedule_parse(const char *text, size_t len, const char *source, mpmd_schedule **out,
                                mpmd_error *err);
/* mpmd_schedule_parse of a file's contents, with source "file:PATH"
 * (MPMD_ERR_IO if it cannot be read). */
mpmd_status mpmd_schedule_load(const char *path, mpmd_schedule **out, mpmd_error *err);

/* ------------------------------------------------------------------------ */
/* Validation and simulation                                                 */
/* ------------------------------------------------------------------------ */

/* Per-task times of the simulation. A task's time is latency[kind] times
 * stage_scale[stage] (1 when stage_scale is NULL), or, when stage_latency
 * is set, that stage's own time of that kind (measured times, say); a
 * FusedTask takes the sum of its members' times. `transfer` is added to every dependency whose
 * producer runs on another rank. All values must be finite and >= 0. */
typedef struct mpmd_cost_model {
    double latency[MPMD_TASK_KINDS]; /* F, B, A, W */
    double transfer;
    const double *stage_scale; /* NULL or [num_stages]; borrowed */
    /* Memory, for mpmd_sim.peak_bytes (all 0: not modelled). A stage's F
     * keeps keep_f bytes for its backward: B frees them all; where the
     * backward is split, A frees all but keep_w and W frees those. Every
     * stage also holds static_bytes for the whole step (its parameters and
     * optimizer state). */
    double keep_f, keep_w, static_bytes;
    const double
        *stage_latency; /* NULL or [num_stages * 4]: stage s's F, B, A, W at s * 4 + kind; borrowed */
    /* Stages that differ (a planner's model: the embedding's and the LM
     * head's stages, links of other kinds), each borrowed, NULL where not
     * used. link_time[s]: the time the value crossing between stages s and
     * s + 1 takes (the activation forward, its gradient back) when they run
     * on different ranks, added to `transfer`; the last entry is not read.
     * stage_memory[3 s + k]: stage s's keep_f, keep_w and static bytes
     * (k = 0, 1, 2), in place of the uniform three above. */
    const double *link_time;    /* NULL or [num_stages] */
    const double *stage_memory; /* NULL or [num_stages * 3] */
} mpmd_cost_model;
/* JaxPP's latencies: F = 1, B = 2, A = 1, W = 1; free transfers; no memory. */
#define MPMD_COST_DEFAULTS                                                                                   \
    ((mpmd_cost_model){{1.0, 2.0, 1.0, 1.0}, 0.0, NULL, 0.0, 0.0, 0.0, NULL, NULL, NULL})

/* ---- Layouts: a planner's candidates ----
 * A planner (gpt --auto, mpmd plan) predicts a step time and the largest
 * rank's bytes for each layout it considers; these rank and report them. */
typedef struct mpmd_layout {
    char schedule[32]; /* a name for mpmd_schedule_kind_from_name */
    int stages, ranks, microbatches;
    char remat[8];      /* "none", "dots", "block"; "" where not modelled */
    double predicted;   /* step time, in the planner's unit */
    int64_t peak_bytes; /* the largest rank's bytes; INT64_MAX: more than int64 holds (fits no limit) */
    int fits;           /* set by mpmd_layouts_rank */
    char gather[8];     /* FSDP's gathers: "task", "step"; "" where not modelled */
} mpmd_layout;
/* Mark which fit in `limit` bytes per rank (0: any) and sort: those that
 * fit first, fastest first; then the rest, smallest peak first. Returns how
 * many fit. */
int mpmd_layouts_rank(mpmd_layout *l, int n, int64_t limit);
/* The ranked layouts as text: the top ones that fit (the first marked as
 * chosen), then why the others lose (slower, or over the limit with the
 * smallest peak among those). `unit` names the predicted times ("ms"). */
void mpmd_layouts_report(FILE *f, const mpmd_layout *l, int n, int64_t limit, const char *unit);

/* A byte count as people write it: digits with an optional suffix k, M, G
 * or T (powers of 1024; "KiB", "MB" and the like are read the same, a
 * trailing "B" alone means bytes), e.g. "2G", "512M", "1048576". 0 on
 * success; non-zero for anything else (empty, negative, a fraction, an
 * unknown suffix, more than 2^62 bytes). */
int mpmd_parse_bytes(const char *s, int64_t *out);

/* One unit the simulation dispatched: a program run on `rank`, made of
 * entries entry .. entry + num_entries - 1 of its list. num_entries is 2
 * only where stage 0's bwdA and bwdW entries run as one task. */
typedef struct mpmd_sim_op {
    int32_t rank;
    int32_t entry;
    int32_t num_entries;
    double start, end;
} mpmd_sim_op;

typedef struct mpmd_sim {
    int32_t num_ranks;
    int64_t num_ops;
    mpmd_sim_op *ops; /* [num_ops] in dispatch order: the global order the compiler uses */
    double makespan;  /* end of the last task (the first starts at 0) */
    double *busy;     /* [num_ranks]: time each rank runs tasks */
    /* [num_ranks]: most (stage, microbatch) pairs of the rank whose forward
     * has run and whose backward has not finished (B, or W when split). */
    int32_t *peak_in_flight;
    /* [num_ranks]: the most bytes the rank holds, by the cost model's memory
     * terms: static_bytes per stage of the rank (each stage's own with
     * stage_memory), plus the kept bytes of its forwards whose backward has
     * not finished, at their fullest. */
    double *peak_bytes;
    double bubble; /* 1 - sum(busy) / (D * makespan) */
    /* The textbook bubble of this kind of schedule and its formula with the
     * numbers; or NAN, and the reason in analytic_formula, where none is
     * defined (DualPipeV, user schedules, the interleaved kinds when D does
     * not divide n). It assumes equal stages and free transfers. */
    double analytic_bubble;
    char analytic_formula[128];
    mpmd_cost_model cost; /* the model used; its arrays (stage_scale, ...) are the result's own copies */
} mpmd_sim;

/* Check a schedule against the rules of docs/schedules.md ("What the
 * compiler does with a task list"): every stage runs on one rank and every
 * task sits on the rank of its stage; every (stage, microbatch) has exactly
 * one F and either one B or one A and one W, with B everywhere or A/W
 * everywhere; stage 0's A is immediately followed by its W; and the
 * dependency simulation completes. On failure returns MPMD_ERR_SCHEDULE
 * with a message naming the schedule, the tasks, ranks and entries; a
 * deadlock names each rank's next task and what it waits for. When
 * `report` is not NULL it gets, on failure, a malloc'ed full report (for a
 * deadlock with a text grid of every rank's list up to where it stuck, the
 * stuck entries marked), which may be longer than err->msg can hold; NULL
 * on success. */
mpmd_status mpmd_schedule_validate(const mpmd_schedule *s, mpmd_error *err, char **report);

/* Validate, then run the discrete-event simulation with `cost` (NULL: the
 * defaults): every rank has a clock; repeatedly dispatch, among the ranks
 * whose next task has all its inputs ready, the one with the smallest start
 * max(clock, inputs ready) (ties: lowest rank). *out gets the dispatch
 * order, makespan, busy times, bubble and peak in-flight counts. Errors as
 * for mpmd_schedule_validate; MPMD_ERR_INVALID for a bad cost model. */
mpmd_status mpmd_schedule_simulate(const mpmd_schedule *s, const mpmd_cost_model *cost, mpmd_sim **out,
                                   mpmd_error *err, char **report);
void mpmd_sim_free(mpmd_sim *sim);

/* The analytic bubble of a schedule's kind and its formula with the
 * numbers into buf (or NAN and the reason): GPipe, Std1F1B, Eager1F1B
 * (p-1)/(m+p-1); Interleaved1F1B, KimiK2, InterleavedGPipe (p-1)/(v*m+p-1)
 * when p divides m; ZeroBubble (p-1)(F+A-W) / (m(F+A+W) + (p-1)(F+A-W)),
 * i.e. (p-1)/(3m+p-1) at unit costs: a third of 1F1B's idle time.
 * p = ranks, m = microbatches, v = stages per rank. cost NULL: defaults.
 * At equal stage costs and free transfers the simulation gives exactly
 * these values (tests/test_schedule_sim.c). */
double mpmd_schedule_analytic_bubble(const mpmd_schedule *s, const mpmd_cost_model *cost, char *buf,
                                     size_t len);

/* ------------------------------------------------------------------------ */
/* Timelines: what ran where and when, drawn as SVG or a Chrome trace         */
/* ------------------------------------------------------------------------ */

/* One box of a timeline. The members of one FusedTask are separate events
 * that share a group number (>= 0); a lone task has group -1. */
typedef struct mpmd_timeline_event {
    double start, end;
    mpmd_task task;
    int32_t group;
} mpmd_timeline_event;

/* Per rank, events in time order. Times are in `unit`s (simulated steps,
 * or e.g. ms of a measured run); unit_us converts them to microseconds
 * for the Chrome trace. */
typedef struct mpmd_timeline {
    char title[256];
    char unit[16];
    double unit_us;
    int32_t num_ranks;
    int32_t *num_events;          /* [num_ranks] */
    int32_t *cap_events;          /* [num_ranks]: allocated room */
    mpmd_timeline_event **events; /* [num_ranks][num_events[r]] */
    int32_t *rank_stages;         /* [num_ranks]: stages the rank runs (drawing hint), 0 unknown */
    double width;                 /* px of the SVG's time axis; 0: chosen from the length */
} mpmd_timeline;

/* An empty timeline of num_ranks rows: unit "step", unit_us 1000 (one
 * step draws as 1 ms in a trace viewer). NULL when out of memory. */
mpmd_timeline *mpmd_timeline_new(int num_ranks, const char *title);
/* Append an event to a rank's row (MPMD_ERR_INVALID for a bad rank or
 * end < start, MPMD_ERR_NOMEM). Events of a row must come in time order. */
mpmd_status mpmd_timeline_add(mpmd_timeline *tl, int rank, const mpmd_timeline_event *ev);
void mpmd_timeline_free(mpmd_timeline *tl);

/* The timeline of a simulation: one event per task, a FusedTask's members
 * splitting its time in proportion to their costs. Title: the schedule's
 * name, makespan and bubble. */
mpmd_status mpmd_timeline_from_sim(const mpmd_schedule *s, const mpmd_sim *sim, mpmd_timeline **out,
                                   mpmd_error *err);

/* An SVG picture: one row per rank, a box per task coloured by kind (F, B,
 * A, W), the microbatch inside (and the stage where a rank runs several),
 * FusedTask members framed together, idle time as grey, a time axis and a
 * legend. MPMD_ERR_IO on a write error. */
mpmd_status mpmd_timeline_write_svg(const mpmd_timeline *tl, FILE *f);
/* Chrome trace-event JSON (opens in Perfetto / chrome://tracing): one
 * thread track per rank named "rank R", an "X" event per task (a FusedTask
 * is an enclosing event with its members nested inside). */
mpmd_status mpmd_timeline_write_trace(const mpmd_timeline *tl, FILE *f);

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
