/* plan_internal.h - the planner's pieces shared by its files.
 *
 *   describe.c  clusters and models: presets, the key = value text, checks
 *   cost.c      what a link, a collective and a stage cost; one layout's prediction
 *   search.c    every layout of a GPU count, ranked
 *   report.c    the ranked layouts as text and JSON
 */
#ifndef MPMD_PLAN_INTERNAL_H
#define MPMD_PLAN_INTERNAL_H

#include "mpmd_plan.h"
#include "mpmd_schedule.h"

/* ---- links and collectives (cost.c) ----
 * A group of n GPUs, per_node of them in each node it spans (n / per_node
 * nodes). Rings: inside a node over the node's links; across nodes
 * hierarchical (reduce-scatter in the node, the ring across nodes on
 * 1/per_node of the bytes, all-gather in the node), each GPU on its share
 * of the network. Each step of a ring also pays the link's latency. */
double plan_allreduce_time(const mpmd_cluster *c, int n, int per_node, double bytes);
/* An all-gather (or a reduce-scatter) of `bytes` in all: half a ring all-reduce. */
double plan_allgather_time(const mpmd_cluster *c, int n, int per_node, double bytes);
/* One message of `bytes` between two GPUs, inside a node or across nodes. */
double plan_p2p_time(const mpmd_cluster *c, int same_node, double bytes);
/* Members per node of a group of n GPUs whose GPU numbers are `stride`
 * apart (GPU numbers run through nodes of gpus_per_node in order). */
int plan_group_per_node(const mpmd_cluster *c, int n, int stride);
/* Whether GPUs a and b share a node. */
int plan_same_node(const mpmd_cluster *c, int64_t a, int64_t b);

/* ---- one layout (cost.c) ----
 * mpmd_planner_predict with a schedule kept between calls (a search
 * predicting the remat and FSDP choices of one schedule, microbatch count
 * and mesh in a row builds it once); with bound_only, no schedule and no
 * simulation: out->bound set, out->step a lower bound (the busiest rank's
 * tasks back to back and its work around the loop) and out->peak the
 * stages' own bytes, or not set (over the limit already). */
typedef struct plan_schedule_cache {
    int valid;
    int key[4];       /* kind, stages, ranks, microbatches */
    mpmd_schedule *s; /* NULL: the kind cannot take these counts (why) */
    char why[160];
} plan_schedule_cache;
mpmd_status plan_predict(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_run_layout *l,
                         double memory_limit, mpmd_run_prediction *out, double *rank_peak,
                         mpmd_stage_cost *stages, plan_schedule_cache *cache, int bound_only,
                         mpmd_error *err);
void plan_schedule_cache_free(plan_schedule_cache *cache);

/* Bytes per element of a compute dtype. */
static inline double plan_dtype_bytes(int dtype) { return dtype == MPMD_PLAN_F32 ? 4.0 : 2.0; }

#endif
