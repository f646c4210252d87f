/* gpt_plan.h - choose a pipeline layout for a GPT: schedule, stage count,
 * microbatch count and rematerialisation, by predicted step time under a
 * memory limit per rank (gpt --auto; bench_planner).
 *
 * For every stage count (the ranks, and twice the ranks for the
 * interleaved schedules and DualPipeV), microbatch count (multiples of the
 * ranks that divide the batch) and remat policy (none, dots, block) the
 * model is built (stage markers placed by cost), its unpipelined loop runs
 * one profiled step on the threads a rank would have, and mpmd_predict
 * gives every schedule of that stage count its exact per-rank memory (the
 * compiler's plan) and its step time (the schedule simulated with the
 * measured op times). The fastest layout whose largest rank fits wins. */
#ifndef GPT_PLAN_H
#define GPT_PLAN_H

#include "gpt_model.h"

#include <stdio.h>

typedef struct gpt_layout {
    char schedule[32];  /* a schedule name for mpmd_schedule_kind_from_name */
    int stages, ranks, microbatches;
    int remat;          /* 0, or an mpmd_remat_policy */
    double predicted_ms;
    int64_t peak_bytes; /* the largest rank's planned bytes */
    int fits;           /* peak_bytes <= the limit */
} gpt_layout;

/* "none", "dots" or "block". */
const char *gpt_remat_name(int remat);

/* Search the layouts of `base` (its batch, model and precision) on `ranks`
 * ranks with `threads` kernel threads each, under `limit` bytes per rank (0:
 * none). Every layout considered goes to *all (malloc'ed, sorted: those
 * that fit first, by predicted time; then the others by peak), its count to
 * *n_all; *best is the first. A report of the top choices and why the
 * others lose goes to `report` (NULL: none). MPMD_ERR_INVALID when nothing
 * fits, with the smallest peak found in the message. */
mpmd_status gpt_plan(const gpt_config *base, int ranks, int threads, int64_t limit, FILE *report,
                     gpt_layout *best, gpt_layout **all, int *n_all, mpmd_error *err);

/* The configuration and schedule of a layout. */
gpt_config gpt_layout_config(const gpt_config *base, const gpt_layout *l);
mpmd_status gpt_layout_schedule(const gpt_layout *l, mpmd_schedule **out, mpmd_error *err);

#endif
