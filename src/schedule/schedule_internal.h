/* schedule_internal.h - helpers shared by the schedule module's files:
 * allocating a schedule, the builder the built-in schedules emit through,
 * and the short cell form used in reports. */
#ifndef MPMD_SCHEDULE_INTERNAL_H
#define MPMD_SCHEDULE_INTERNAL_H

#include "mpmd_schedule.h"

/* Largest S, D, n a built-in or parsed schedule may have, and largest task
 * count of one rank: every count and index fits in int32 with room. */
#define SCHED_MAX_COUNT (1 << 24)
/* At most this many (stage, microbatch) pairs, each 2 or 3 tasks: 25
 * million tasks, some 400 MB with their simulation, far beyond any real
 * pipeline (128 stages x 4096 microbatches is 2^19). */
#define SCHED_MAX_PAIRS (1LL << 23)
#define SCHED_MAX_RANK_TASKS ((int64_t)1 << 30)

/* The module's allocator for its arrays (mem.c): big blocks are mapped
 * with their pages populated. Every array of a schedule and of a
 * simulation result comes from here and goes back with sched_mem_free. */
void *sched_mem_alloc(size_t bytes);
void *sched_mem_calloc(size_t bytes);
void *sched_mem_realloc(void *p, size_t bytes);
void sched_mem_free(void *p);

/* A zeroed schedule with S, D, n, kind and split set, stage_rank allocated
 * (all -1) and D empty ranks; NULL when out of memory. */
mpmd_schedule *sched_alloc(mpmd_schedule_kind kind, int S, int D, int n, int split);

/* Set s->name to "<Kind>(S=.., D=.., n=..[, fuse_steady_state])". */
void sched_set_name(mpmd_schedule *s);

/* Builder for the built-in schedules: per-rank arrays sized exactly (a
 * rank runs (its stages) * n * (2 or 3) tasks), and a per (kind, stage)
 * counter handing out microbatches 0, 1, 2, ... in order. */
typedef struct sched_builder {
    mpmd_schedule *s;
    int32_t *next_mb; /* [4 * S] */
    int32_t *cap;     /* [D]: tasks room per rank */
    int overflow;     /* set if a rule emitted more than it should (a bug) */
} sched_builder;

/* Allocate the rank arrays of s (stage_rank must be filled) and the
 * counters. MPMD_ERR_INVALID if a rank would hold more than
 * SCHED_MAX_RANK_TASKS tasks, MPMD_ERR_NOMEM. */
mpmd_status sb_init(sched_builder *b, mpmd_schedule *s, mpmd_error *err);
/* Free the builder (not the schedule). Returns MPMD_OK, or an internal
 * MPMD_ERR_SCHEDULE if a rule overflowed or left tasks out. */
mpmd_status sb_finish(sched_builder *b, mpmd_error *err);

/* The next task of (kind, stage): the microbatch counter advances. */
static inline mpmd_task sb_next(sched_builder *b, int kind, int stage) {
    int32_t *c = &b->next_mb[kind * b->s->num_stages + stage];
    mpmd_task t = {kind, stage, *c};
    (*c)++;
    return t;
}

/* Append an entry of nt tasks to rank r's list. */
static inline void sb_entry(sched_builder *b, int r, int nt, const mpmd_task *t) {
    mpmd_schedule_rank *rk = &b->s->ranks[r];
    if (rk->num_tasks + nt > b->cap[r]) {
        b->overflow = 1;
        return;
    }
    for (int i = 0; i < nt; i++) {
        if (t[i].microbatch >= b->s->num_microbatches) b->overflow = 1;
        rk->tasks[rk->num_tasks++] = t[i];
    }
    rk->entry_start[++rk->num_entries] = rk->num_tasks;
}

/* Emit the next task of (kind, stage) alone. */
static inline void sb_one(sched_builder *b, int r, int kind, int stage) {
    mpmd_task t = sb_next(b, kind, stage);
    sb_entry(b, r, 1, &t);
}

/* Short cell text of an entry for grids: F3.0 (kind, stage, microbatch),
 * fused members joined by '+': F7.0+B7.0. Returns buf. */
char *sched_cell_str(const mpmd_task *t, int nt, char *buf, size_t len);

/* "rank R entry E (TEXT)" helper: the text of one entry into buf. */
char *sched_entry_text(const mpmd_schedule *s, int r, int e, char *buf, size_t len);

/* The time of task t under cost model c (latency times stage scale, or
 * the stage's own time): the one rule the simulation and its timeline use. */
double sched_task_time(const mpmd_cost_model *c, const mpmd_task *t);

/* A growable string for reports. On allocation failure it stays short and
 * sets `failed`; sb_str returns what it has. */
typedef struct sched_str {
    char *p;
    size_t len, cap;
    int failed;
} sched_str;
void ss_printf(sched_str *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
