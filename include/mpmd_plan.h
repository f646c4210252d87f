/* mpmd_plan.h - plan a training run on a GPU cluster before buying it.
 *
 * Given a cluster (GPUs per node, peak FLOP/s, memory and its bandwidth,
 * the links inside a node and the network between nodes) and a
 * transformer (layers, width, heads, vocabulary, sequence, batch), the
 * planner predicts what a layout of the training step would do: its step
 * time, its model FLOP utilisation (MFU) and every pipeline rank's peak
 * memory. A layout is the mesh (pipeline ranks, tensor-parallel ranks
 * inside a stage, data-parallel replicas with or without FSDP), the stages
 * (any multiple of the pipeline ranks), the schedule, the microbatch size
 * and the rematerialisation policy. mpmd_planner_search tries every layout
 * of a GPU count and ranks them; `mpmd plan --cluster ...` prints the
 * result.
 *
 *     mpmd_cluster c;
 *     mpmd_transformer m;
 *     mpmd_error err;
 *     mpmd_cluster_preset("dgx-a100", &c, &err);
 *     mpmd_transformer_preset("gpt3-175b", &m, &err);   // or fill the fields
 *     mpmd_planner_opts o = MPMD_PLANNER_OPTS_DEFAULTS;
 *     o.gpus = 64;
 *     mpmd_planner_result *r;
 *     if (mpmd_planner_search(&c, &m, &o, &r, &err) == MPMD_OK) {
 *         mpmd_planner_report(stdout, &c, &m, r);       // r->layouts[0]: the fastest that fits
 *         mpmd_planner_result_free(r);
 *     }
 *
 * How a layout is costed (docs/planner.md has it with the numbers): every
 * stage's F, B, A and W tasks get their time from the matrix products'
 * FLOPs at MPMD_PLAN_GEMM_EFFICIENCY of the GPU's peak, the memory-bound
 * kernels' bytes at MPMD_PLAN_MEMORY_EFFICIENCY of its memory bandwidth,
 * and the tensor-parallel all-reduces inside the task; the schedule is then
 * simulated (mpmd_schedule_simulate) with each stage's own times, each
 * boundary's transfer time on its link (inside a node or across the
 * network) and each stage's own bytes. The step adds what mpmd's runtime
 * does not overlap: FSDP's per-step gather before the loop, the
 * data-parallel all-reduce (or FSDP's reduce-scatter) and the tied
 * embedding's all-reduce after it, and the optimizer. Transfers between
 * pipeline ranks overlap with compute (they delay only the task that
 * waits for them); FSDP's per-task gathers overlap with the task before.
 * Collectives are rings (hierarchical across nodes) at
 * MPMD_PLAN_LINK_EFFICIENCY of the link's bandwidth, plus its latency per
 * step. Ranks are placed model axis innermost, then pipeline, then data:
 * a tensor-parallel group of at most a node's GPUs stays inside a node.
 */
#ifndef MPMD_PLAN_H
#define MPMD_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "mpmd_error.h"

#ifdef __cplusplus
extern "C" {
#endif

MPMD_API_BEGIN

/* The efficiency constants: the shares of a device's peaks that the
 * planner assumes every layout reaches, the same for every cluster, model
 * and layout. They are stated here once; the report prints them. */
#define MPMD_PLAN_GEMM_EFFICIENCY 0.75   /* matrix products: of the peak FLOP/s of the compute dtype */
#define MPMD_PLAN_MEMORY_EFFICIENCY 0.75 /* memory-bound kernels: of the memory bandwidth */
#define MPMD_PLAN_LINK_EFFICIENCY 0.75   /* collectives and transfers: of a link's bandwidth */

/* Compute dtypes: what the matrix products run in (parameters and
 * optimizer state stay f32, as mpmd keeps them). */
enum { MPMD_PLAN_F32 = 0, MPMD_PLAN_BF16 = 1, MPMD_PLAN_F16 = 2 };

/* A cluster of identical nodes. Bandwidths are per GPU, each way, in
 * bytes/s; latencies in seconds per message; peaks are dense FLOP/s. */
typedef struct mpmd_cluster {
    char name[64];
    int gpus_per_node;
    double peak_flops[3];    /* by compute dtype (MPMD_PLAN_F32, _BF16, _F16) */
    double memory;           /* bytes of memory per GPU */
    double memory_bandwidth; /* bytes/s between a GPU and its memory */
    double node_bandwidth;   /* between two GPUs of one node (NVLink) */
    double node_latency;
    double net_bandwidth; /* a GPU's share of its node's network links */
    double net_latency;
} mpmd_cluster;

/* A built-in cluster by name: "dgx-a100" (8 A100 80GB SXM a node, NVLink 3,
 * 8 x 200 Gb/s InfiniBand HDR: Selene's nodes) or "dgx-h100" (8 H100 80GB
 * SXM, NVLink 4, 8 x 400 Gb/s NDR). MPMD_ERR_INVALID names the presets. */
mpmd_status mpmd_cluster_preset(const char *name, mpmd_cluster *out, mpmd_error *err);
/* A cluster from text: one `key = value` per line, '#' starts a comment.
 * Keys: base (a preset to start from), name, gpus_per_node, peak_f32,
 * peak_bf16, peak_f16 (FLOP/s), memory (bytes), memory_bandwidth,
 * node_bandwidth, net_bandwidth (bytes/s), node_latency, net_latency
 * (seconds). Numbers take a suffix: k, M, G, T, P (powers of 1000) or Ki,
 * Mi, Gi, Ti (powers of 1024), a trailing B allowed ("80GiB" is 80 x 2^30,
 * "2039GB" 2039 x 10^9); latencies s, ms, us, ns. Every key but base and name must end up set,
 * positive and finite. Errors name SOURCE:LINE and the key
 * (MPMD_ERR_FORMAT); `source` names the text in them. */
mpmd_status mpmd_cluster_parse(const char *text, const char *source, mpmd_cluster *out, mpmd_error *err);
/* mpmd_cluster_parse of a file (MPMD_ERR_IO if it cannot be read). */
mpmd_status mpmd_cluster_load(const char *path, mpmd_cluster *out, mpmd_error *err);

/* A GPT-style decoder: `layers` blocks of attention (`heads` heads over
 * `hidden`) and an MLP of width `ffn` (0: 4 x hidden), a token embedding of
 * `vocab` rows and a learned position table of `seq` rows, a final layer
 * norm and the LM head (tied to the embedding unless `untied`); `batch`
 * sequences of `seq` tokens a step. */
typedef struct mpmd_transformer {
    char name[64];
    int layers, hidden, heads, ffn, vocab, seq;
    int64_t batch;
    int dtype;  /* MPMD_PLAN_BF16 (the default), _F16 or _F32 */
    int untied; /* 1: the LM head is a parameter of its own */
} mpmd_transformer;

/* A built-in model by name: "gpt3-175b" (96 layers, hidden 12288, 96
 * heads, vocabulary 51200, sequence 2048, batch 1536). */
mpmd_status mpmd_transformer_preset(const char *name, mpmd_transformer *out, mpmd_error *err);
/* A model from text, as mpmd_cluster_parse: keys base, name, layers,
 * hidden, heads, ffn, vocab, seq, batch, dtype (f32, bf16, f16), tied
 * (1 or 0). Then checked (mpmd_transformer_check). */
mpmd_status mpmd_transformer_parse(const char *text, const char *source, mpmd_transformer *out,
                                   mpmd_error *err);
mpmd_status mpmd_transformer_load(const char *path, mpmd_transformer *out, mpmd_error *err);
/* Every count at least 1, heads dividing hidden, sizes whose products fit
 * (MPMD_ERR_INVALID naming the field). */
mpmd_status mpmd_transformer_check(const mpmd_transformer *m, mpmd_error *err);
/* Parameters of the whole model (the tied head counted once), and the
 * FLOPs of one training step without recomputation (3 x the forward's
 * matrix products: Narayanan et al. 2021's model FLOPs). */
double mpmd_transformer_params(const mpmd_transformer *m);
double mpmd_transformer_step_flops(const mpmd_transformer *m);

/* Rematerialisation policies of the planner (mpmd_remat_begin's, by the
 * GPT example's names): none; "dots" keeps the matrix products and
 * recomputes the rest; "block" keeps each block's input and recomputes the
 * whole block in the backward (Megatron's full recomputation). */
enum { MPMD_PLAN_REMAT_NONE = 0, MPMD_PLAN_REMAT_DOTS = 1, MPMD_PLAN_REMAT_BLOCK = 2 };
/* FSDP: off, parameters gathered before each task, or once per step. */
enum { MPMD_PLAN_FSDP_OFF = 0, MPMD_PLAN_FSDP_TASK = 1, MPMD_PLAN_FSDP_STEP = 2 };
/* The schedule of a layout with one pipeline rank: the plain microbatch loop. */
#define MPMD_PLAN_LOOP (-1)

/* A layout: tp x pp x dp GPUs. */
typedef struct mpmd_run_layout {
    int tp, pp, dp; /* model ranks per stage, pipeline ranks, data-parallel replicas */
    int fsdp;       /* MPMD_PLAN_FSDP_OFF, _TASK or _STEP (dp > 1) */
    int stages;     /* a multiple of pp (1 with pp 1) */
    int schedule;   /* an mpmd_schedule_kind, or MPMD_PLAN_LOOP with pp 1 */
    int microbatch; /* sequences per microbatch; batch / (dp x microbatch) microbatches */
    int remat;      /* MPMD_PLAN_REMAT_NONE, _DOTS or _BLOCK */
} mpmd_run_layout;

/* What the planner predicts for a layout. Times in seconds; bytes per GPU. */
typedef struct mpmd_run_prediction {
    mpmd_run_layout layout;
    int microbatches;
    int valid;     /* 0: the layout cannot run (the reason in `why`); nothing else is set */
    int simulated; /* 1: the schedule was simulated (step, peak and parts are set) */
    /* not simulated (mpmd_planner_search): bound 1, step is a lower bound
     * already slower than the choice; bound 0, its parameters and state
     * alone exceed the limit (peak is those bytes, step NAN) */
    int bound;
    double step; /* one training step */
    /* where the step goes, on the rank that decides it: its tasks' compute
     * and the tensor-parallel all-reduces inside them; the loop's idle time
     * (waiting for other ranks and for transfers); before the loop (FSDP's
     * per-step gather); after it, the gradients' combine (data-parallel
     * all-reduce or FSDP's reduce-scatter, and the tied embedding's
     * all-reduce) and the optimizer. They add up to step (on step_rank). */
    double compute, tp_comm, idle, before, dp_comm, optimizer;
    double tokens_per_s;
    double mfu;              /* model FLOPs (no recomputation) / (step x GPUs x peak) */
    double hw_flops_per_gpu; /* FLOP/s per GPU counting recomputed products (Narayanan et al.'s measure) */
    double peak;             /* the largest rank's bytes */
    int peak_rank;
    int step_rank; /* the rank whose loop end and work after the loop make the step */
    int fits;      /* peak within the limit */
    char why[160]; /* an invalid layout's reason */
} mpmd_run_prediction;

/* One stage's costs and bytes in a layout (per GPU of the stage). */
typedef struct mpmd_stage_cost {
    int first_layer, layers; /* its blocks */
    int embedding, head;     /* holds the token embedding / the final norm and LM head */
    int rank;
    double time[4];        /* F, B, A, W of one microbatch, s */
    double tp_time[4];     /* of those, the tensor-parallel all-reduces */
    double link;           /* s: the value to stage + 1 (when on another rank) */
    double params;         /* parameters held (this GPU's part) */
    double static_bytes;   /* parameters, gradients, optimizer state */
    double keep_f, keep_w; /* kept from F for the backward per microbatch; of it, kept from A until W */
    double work;           /* the most one of its tasks needs while it runs */
} mpmd_stage_cost;

/* Predict one layout on `gpus` = tp x pp x dp GPUs of cluster c.
 * rank_peak (NULL or [pp]) gets every rank's peak bytes, stages (NULL or
 * [layout->stages]) every stage's costs. An impossible layout (counts that
 * do not divide, a schedule that cannot take them) gives MPMD_OK with
 * valid 0 and the reason; MPMD_ERR_INVALID is for bad descriptions. */
mpmd_status mpmd_planner_predict(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_run_layout *l,
                                 double memory_limit, mpmd_run_prediction *out, double *rank_peak,
                                 mpmd_stage_cost *stages, mpmd_error *err);

/* The search: fixed values restrict it, 0 (or -1, or empty masks) search. */
typedef struct mpmd_planner_opts {
    int gpus;            /* required */
    int tp, pp, dp;      /* 0: every divisor that works */
    int stages_per_rank; /* 0: 1, and for the interleaved schedules every v >= 2 with v x pp <= layers */
    int microbatch;      /* 0: every divisor of a replica's batch */
    int fsdp;            /* -1: off and both gathers; else MPMD_PLAN_FSDP_OFF, _TASK or _STEP */
    uint32_t schedules;  /* bits (1u << mpmd_schedule_kind); 0: every built-in schedule */
    uint32_t remats;     /* bits (1u << MPMD_PLAN_REMAT_NONE, _DOTS, _BLOCK); 0: all three */
    double memory_limit; /* bytes per GPU; 0: the cluster's memory */
} mpmd_planner_opts;
#define MPMD_PLANNER_OPTS_DEFAULTS ((mpmd_planner_opts){0, 0, 0, 0, 0, 0, -1, 0, 0, 0.0})

typedef struct mpmd_planner_result {
    int n;                        /* layouts predicted */
    mpmd_run_prediction *layouts; /* [n]: those that fit, fastest first; then those left bounded, by bound;
                                     then those over the limit, smallest peak first */
    int fit;                      /* how many fit */
    double memory_limit;          /* bytes per GPU the search used */
    int gpus;
} mpmd_planner_result;

/* Predict every layout of opts->gpus GPUs that opts allows. MPMD_OK when
 * at least one layout fits (r->layouts[0] is the choice); when none does,
 * MPMD_ERR_INVALID with the smallest peak found in the message, and *out
 * still gets the ranked result (to report why). Bad descriptions or
 * options: MPMD_ERR_INVALID, *out NULL. */
mpmd_status mpmd_planner_search(const mpmd_cluster *c, const mpmd_transformer *m,
                                const mpmd_planner_opts *opts, mpmd_planner_result **out, mpmd_error *err);
void mpmd_planner_result_free(mpmd_planner_result *r);

/* The result as text: the cluster, the model and the efficiency
 * constants; the top layouts that fit with step time, MFU and peak
 * memory; the choice's time split and every rank's memory (each stage
 * its own); then why the others lose (the fastest of each other pipeline
 * shape and schedule, with what costs them most, and the smallest of
 * those over the limit). */
void mpmd_planner_report(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m,
                         const mpmd_planner_result *r);
/* The result as one JSON object (every layout, ranked). */
void mpmd_planner_write_json(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m,
                             const mpmd_planner_result *r);

/* A layout as text: "tp 8 x pp 8 x dp 1, interleaved1f1b 24 stages, microbatch 1 (64), remat block". */
int mpmd_run_layout_str(const mpmd_run_layout *l, int microbatches, char *buf, size_t len);

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
