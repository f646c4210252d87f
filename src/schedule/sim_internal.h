/* What the schedule simulator's files share (simulate.c runs the
 * simulation, sim_check.c checks a schedule's tasks before it and reports
 * a deadlock after it). */
#ifndef MPMD_SIM_INTERNAL_H
#define MPMD_SIM_INTERNAL_H

#include "schedule_internal.h"

/* Per (stage, microbatch) flags: which kinds were seen, which outputs exist. */
#define SEEN(kind) ((uint8_t)(1u << (kind)))
#define DONE_F 0x10u
#define DONE_BWD 0x20u /* the B, or the A, of a split backward */

typedef struct dep {
    int8_t bwd; /* 0: needs the forward, 1: needs the backward (B or A) */
    int32_t stage, mb;
} dep;

typedef struct heap_item {
    double start;
    int32_t rank;
} heap_item;

typedef struct sim_ctx {
    const mpmd_schedule *s;
    int32_t S, n, D;
    uint8_t *flags;              /* [S * n] */
    double *fend, *bend;         /* [S * n]: when F, and B-or-A, outputs exist (valid once DONE_*) */
    const mpmd_cost_model *cost; /* the task times, the links and the memory terms */
    double transfer;
    int32_t *pos;      /* [D]: next entry */
    double *clock;     /* [D] */
    uint8_t *queued;   /* [D]: in the heap */
    int32_t *inflight; /* [D] */
    double *kept;      /* [D]: bytes kept by forwards whose backward has not finished */
    heap_item *heap;   /* timed: ready ranks by (start, rank) */
    int32_t *work;     /* untimed: ranks to look at */
    int32_t hn;        /* items in heap or work */
    int64_t units_done;
    mpmd_sim *out; /* busy / peak / ops written here when not NULL */
} sim_ctx;

static inline size_t idx(const sim_ctx *c, int32_t stage, int32_t mb) {
    return (size_t)stage * (size_t)c->n + (size_t)mb;
}

/* sim_check.c: the task lists' shape and their tasks (units: the programs
 * to run); the report when no rank can start its next unit. */
mpmd_status sim_check_shape(const mpmd_schedule *s, mpmd_error *err);
mpmd_status sim_check_tasks(sim_ctx *c, int64_t *units, mpmd_error *err);
mpmd_status sim_deadlock(const sim_ctx *c, int64_t units, mpmd_error *err, char **report);
/* The simulation's steps that the deadlock report asks too. */

/* Entries in the unit that starts at entry e of rank r: 2 for a lone A(0)
 * (check_stage0 made sure a lone W(0) follows), else 1. */
static inline int unit_entries(const mpmd_schedule_rank *rk, int e) {
    int b = rk->entry_start[e];
    if (rk->entry_start[e + 1] - b == 1 && rk->tasks[b].kind == MPMD_TASK_A && rk->tasks[b].stage == 0)
        return 2;
    return 1;
}

static inline int deps_of(const mpmd_task *t, int32_t S, dep d[2]) {
    switch (t->kind) {
    case MPMD_TASK_F:
        if (t->stage == 0) return 0;
        d[0] = (dep){0, t->stage - 1, t->microbatch};
        return 1;
    case MPMD_TASK_W: d[0] = (dep){1, t->stage, t->microbatch}; return 1;
    default:
        d[0] = (dep){0, t->stage, t->microbatch};
        if (t->stage == S - 1) return 1;
        d[1] = (dep){1, t->stage + 1, t->microbatch};
        return 2;
    }
}

/* Is dep produced by one of the unit's members before member i? */
static inline int made_earlier(const mpmd_task *u, int i, const dep *d) {
    for (int j = 0; j < i; j++) {
        if (u[j].stage != d->stage || u[j].microbatch != d->mb) continue;
        if (d->bwd ? (u[j].kind == MPMD_TASK_B || u[j].kind == MPMD_TASK_A) : u[j].kind == MPMD_TASK_F)
            return 1;
    }
    return 0;
}

/* The time of the value crossing between stages s and s + 1 (0 without link_time). */
static inline double link_of(const mpmd_cost_model *m, int32_t s) {
    return m->link_time ? m->link_time[s] : 0.0;
}

/* Stage s's memory terms: what its F keeps (k = 0), what of that stays from
 * A until W (k = 1), what it holds all step (k = 2). */
static inline double stage_mem(const mpmd_cost_model *m, int32_t s, int k) {
    if (m->stage_memory) return m->stage_memory[(size_t)s * 3 + (size_t)k];
    return k == 0 ? m->keep_f : k == 1 ? m->keep_w : m->static_bytes;
}

/* Can rank r start its next unit? If so *start gets its start time. If
 * not, *missing (when not NULL) gets the first input it waits for. */
static inline int sim_unit_ready(const sim_ctx *c, int r, double *start, dep *missing) {
    const mpmd_schedule_rank *rk = &c->s->ranks[r];
    int e = c->pos[r];
    const mpmd_task *u = rk->tasks + rk->entry_start[e];
    int nt = rk->entry_start[e + unit_entries(rk, e)] - rk->entry_start[e];
    double t0 = c->clock ? c->clock[r] : 0.0;
    for (int i = 0; i < nt; i++) {
        dep d[2];
        int nd = deps_of(&u[i], c->S, d);
        for (int k = 0; k < nd; k++) {
            if (made_earlier(u, i, &d[k])) continue;
            size_t x = idx(c, d[k].stage, d[k].mb);
            if (!(c->flags[x] & (d[k].bwd ? DONE_BWD : DONE_F))) {
                if (missing) *missing = d[k];
                return 0;
            }
            if (!c->fend) continue; /* untimed: only "is it there" matters */
            double ready = d[k].bwd ? c->bend[x] : c->fend[x];
            if (c->s->stage_rank[d[k].stage] != r) /* the link: below a gradient, above an activation */
                ready += c->transfer + link_of(c->cost, d[k].bwd ? d[k].stage - 1 : d[k].stage);
            if (ready > t0) t0 = ready;
        }
    }
    if (start) *start = t0;
    return 1;
}

#endif
