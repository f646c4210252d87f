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
/* simulate.c: whether rank r's next unit can start (when, or the first
 * input it misses) */
int sim_unit_ready(const sim_ctx *c, int r, double *start, dep *missing);

#endif
