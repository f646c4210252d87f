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

/* A layout is an mpmd_layout (include/mpmd_schedule.h) with its remat
 * policy by name; predicted times in ms. */
typedef mpmd_layout gpt_layout;

/* "none", "dots" or "block", and the policy of such a name (0: none). */
const char *gpt_remat_name(int remat);
int gpt_remat_policy(const char *name);

/* FSDP for the planner: `replicas` >= 2 with fsdp set lays every layout out
 * sharded over the replicas, and weighs when FSDP gathers (`gather`: an
 * mpmd_fsdp_gather, or -1 for both): per task (least memory) or per step
 * (least traffic), each predicted with its gathered bytes at this
 * machine's measured copy rate (the in-process gathers are copies) on top
 * of the ops' time, its memory from the plan. */
typedef struct gpt_plan_fsdp {
    int replicas, fsdp, gather;
} gpt_plan_fsdp;

/* Search the layouts of `base` (its batch, model and precision) on `ranks`
 * ranks with `threads` kernel threads each, under `limit` bytes per rank (0:
 * none); fsdp NULL: no FSDP. Every layout considered goes to *all
 * (malloc'ed, ranked by mpmd_layouts_rank), its count to *n_all; *best is
 * the first. The report of mpmd_layouts_report goes to `report` (NULL:
 * none). MPMD_ERR_INVALID when nothing fits, with the smallest peak found
 * in the message. */
mpmd_status gpt_plan(const gpt_config *base, int ranks, int threads, int64_t limit, const gpt_plan_fsdp *fsdp,
                     FILE *report, gpt_layout *best, gpt_layout **all, int *n_all, mpmd_error *err);

/* The configuration and schedule of a layout. */
gpt_config gpt_layout_config(const gpt_config *base, const gpt_layout *l);
mpmd_status gpt_layout_schedule(const gpt_layout *l, mpmd_schedule **out, mpmd_error *err);

#endif
