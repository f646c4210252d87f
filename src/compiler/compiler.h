/* compiler.h - mpmd_compile: from one step's graph, a schedule and a
 * backend to a plan (mpmd_plan): the tasks, the placement, one program per
 * rank and the lists the interpreter follows.
 *
 *   compile.c  the entry point: checks, then the passes below; the plan's
 *              release and its printout
 *   cluster.c  body op -> (stage, F/B/A/W): the tasks' contents
 *   place.c    before/after-loop ops -> the ranks that run them
 *   lower.c    per-rank instruction lists: run task, send, receive, free,
 *              the loop reductions; validated by simulation (which also
 *              finds when a sent buffer may be reused); the loop
 *              reductions of each value and the in-task free lists
 *   shard.c    FSDP: the values each data-parallel replica holds a shard
 *              of, and the parameters each task gathers
 *   memory.c   one arena per rank: every buffer a rank's program writes,
 *              its lifetime and its offset (arena.c places them)
 *
 * The compiler includes nothing from src/runtime/ and calls nothing there.
 * The runtime (src/runtime/, runtime.h) reads a plan and never changes it;
 * the step API there (step.c: mpmd_jit_with_loop, mpmd_step_*) compiles a
 * plan and sets up the run state around it.
 */
#ifndef MPMD_COMPILER_H
#define MPMD_COMPILER_H

#include "backend/backend.h"
#include "graph/graph.h"
#include "mesh/mesh.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- clusters ---------------------------------------------------------- */

typedef struct mpmd_clusters {
    int num_stages;
    int split;      /* backward cut into A and W (stage > 0) */
    int32_t *stage; /* [n_nodes] stage of each live body node, -1 otherwise */
    int8_t *kind;   /* [n_nodes] MPMD_TASK_F/B/A/W of each live body node */
    /* nodes of task kind k of stage s, in creation order:
     * nodes[(s * 4 + k)] of count[(s * 4 + k)] */
    int32_t **nodes;
    int32_t *count;
} mpmd_clusters;

mpmd_status mpmd_cluster(const mpmd_graph *g, const unsigned char *live, int num_stages, int split,
                         mpmd_clusters *out, mpmd_error *err);
void mpmd_clusters_free(mpmd_clusters *c);

/* ---- instructions -------------------------------------------------------- */

enum {
    MPMD_I_RUN_PRE = 0,    /* a before-loop op: node */
    MPMD_I_TASK,           /* run task (kind, stage, microbatch) */
    MPMD_I_SEND,           /* value (node, microbatch) to rank peer */
    MPMD_I_RECV,           /* value (node, microbatch) from rank peer */
    MPMD_I_FREE,           /* value (node, microbatch) is dead on this rank */
    MPMD_I_RUN_POST,       /* an after-loop op: node */
    MPMD_I_ALLREDUCE,      /* combine loop result `node` across the data-parallel replicas */
    MPMD_I_REDUCE_SCATTER, /* FSDP: the same for this replica's shard of loop result `node` only */
    MPMD_I_GATHER          /* FSDP: gather the sharded values of its `list` (mpmd_gather_list: what
                              the next task reads, or per step every task of the rank) from every
                              replica's shard */
};

typedef struct mpmd_instr {
    int8_t op;
    int8_t kind;  /* TASK: task kind */
    int8_t moved; /* SEND: the value's last use here (it dies on this rank once sent) */
    int8_t pad;
    int32_t node; /* RUN_*, SEND, RECV, FREE: the value */
    int32_t stage;
    int32_t mb;    /* microbatch; -1 for values outside the body */
    int32_t peer;  /* SEND: destination, RECV: source */
    int32_t entry; /* TASK: entry index in the rank's schedule list */
    int32_t post;  /* RECV: the instruction before which its buffer may start to fill */
    int32_t list;  /* GATHER: which of pl->gather it gathers (mpmd_gather_list) */
    int32_t reuse; /* SEND: the instruction after which the sent buffer may be overwritten
                      (this rank then knows the receiver has it); the program's length: the
                      end of the step */
} mpmd_instr;

typedef struct mpmd_program {
    int rank;
    int n, cap;
    mpmd_instr *ins;
    int64_t peak_bytes; /* most bytes of body values alive at once, op by op (memory.c) */
    size_t scratch_bytes;
} mpmd_program;

/* ---- memory ------------------------------------------------------------------ */

/* What a buffer of a rank's arena holds. */
enum {
    MPMD_BUF_BODY = 0, /* a body value of one microbatch */
    MPMD_BUF_VALUE,    /* a value outside the body: a before- or after-loop result, a loop result */
    MPMD_BUF_COMBINED, /* a loop result after the cross-replica sum (ALLREDUCE, REDUCE_SCATTER) */
    MPMD_BUF_GATHERED  /* FSDP: a parameter gathered whole for one task (GATHER) */
};

typedef struct mpmd_buffer {
    int32_t node, mb;  /* mb -1 outside the body */
    int8_t what;       /* MPMD_BUF_* */
    int8_t received;   /* written by a receive */
    int32_t def, last; /* positions: written first, read last (the arena's lifetime) */
    size_t off, bytes;
} mpmd_buffer;

/* One rank's memory plan. Positions number the rank's program at op
 * granularity: every instruction has one, a task one per op it runs
 * (pos[x] + c for its op c); pos[n] is the end of the step. Every value a
 * program writes (and every receive) has a buffer at a fixed offset of one
 * arena of arena_bytes; parameters, variables, constants and inputs live
 * in buffers of their own, outside it. */
typedef struct mpmd_rank_memory {
    int32_t *slot;      /* [n_nodes] a body value's slot on this rank, -1 if it has none */
    int32_t *slot_node; /* [nslots] */
    int nslots;
    int32_t *body_buf; /* [nslots * num_micro]: buffer of (slot, microbatch), -1: none */
    int32_t *val_buf;  /* [n_nodes]: buffer of a value outside the body, -1: none */
    int32_t *comb_buf; /* [n_nodes]: buffer of a combined loop result, -1: none */
    int32_t *gath_buf; /* [program length]: a GATHER's first buffer (the task's parameters'
                          follow in pl->gather order), -1: not a GATHER */
    mpmd_buffer *buf;
    int nbuf;
    int32_t *pos; /* [program length + 1] */
    int npos;
    /* the SENDs whose `reuse` is instruction x: reuse_head[x], then
     * reuse_next[send] (instruction indices, -1 ends) */
    int32_t *reuse_head, *reuse_next;
    size_t arena_bytes;
    size_t scratch_bytes; /* the largest kernel workspace of the rank, a buffer of its own */
    /* Everything the rank allocates from its backend, each allocation as
     * the backend rounds it (mpmd_backend_alloc_bytes): trainable
     * parameters; other storage (optimizer state, step counters,
     * constants); its own copies of inputs (backends without host memory);
     * then the arena and the workspace. total is their sum. */
    size_t params_bytes, state_bytes, input_bytes, total_bytes;
    /* The arena at its fullest (the most bytes of buffers alive at one
     * position, at most arena_bytes): body values made here, values
     * received, loop results (gradients), other values. */
    size_t live_peak, live_activations, live_received, live_loop_results, live_other, live_gathered;
    /* The most bytes of body values kept past their task at once (for a
     * later task: the backward, a send), received ones included: what
     * rematerialisation trades for recomputation. */
    size_t kept_peak;
} mpmd_rank_memory;

/* Storage (parameters, variables, constants, a rank's input copy) is
 * allocated with this many bytes past its end, so that a vectorised kernel
 * may read a whole last word. */
#define MPMD_STORAGE_PAD 64

/* ---- the plan -------------------------------------------------------------- */

/* The compiler's product: everything mpmd_compile computes from one step's
 * graph, a schedule, the backend and the data-parallel replica count. The
 * runtime reads it through a const pointer and never changes it; run state
 * (rank states, transport, inputs, timing) lives in struct mpmd_step
 * (runtime/runtime.h). */
typedef struct mpmd_plan {
    const mpmd_graph *g;
    mpmd_schedule *sched; /* a copy's owner: the plan keeps what it needs */
    int num_ranks, num_stages, num_micro;
    int replicas;   /* data-parallel replicas of every rank (mesh data axis) */
    int fsdp;       /* MPMD_FSDP_*: shard parameters, their optimizer state and gradients over the
                       replicas, gathered per task or per step */
    int model;      /* model ranks of every rank and replica (mesh model axis, the graph's) */
    mpmd_mesh mesh; /* which part of each value a replica and model rank hold (mesh/mesh.h; FSDP's
                       shards set by shard.c) */
    /* FSDP: what each GATHER gathers (list ids: S*4 task kinds, each task's own values; then D ranks,
       every value of the rank's tasks): gather[l] of gather_n[l] values, parameters or their casts */
    int32_t **gather;
    int32_t *gather_n;
    int n_gather;
    int32_t *whole; /* [n_nodes] FSDP: why a parameter stays whole (mpmd_plan_whole_reason), 0: sharded */
    unsigned char *live;
    mpmd_clusters cl;
    int32_t *stage_rank; /* [S] */
    uint64_t *runs;      /* [n_nodes * words] ranks that run/hold each value */
    int words;
    int32_t *home;             /* [n_nodes] body: rank computing it; loop_reduce: rank accumulating */
    unsigned char *cross;      /* [n_nodes] body value read by another task (lives past its task) */
    mpmd_program *prog;        /* [D] */
    const mpmd_backend *be;    /* every rank's backend */
    const mpmd_kernel **kern;  /* [n_nodes] the backend's kernel of each op */
    unsigned char *task_meets; /* [S*4] the task has collectives of the model axis (it meets its peers) */
    int32_t *reduce_head, *reduce_next; /* loop reductions reading each body value */
    int32_t **free_head;                /* [S*4][position]: in-task values dying after that op */
    int32_t *free_next;
    int recv_ahead;            /* tasks ahead that a receive may be posted (the wire's) */
    mpmd_rank_memory *mem;     /* [D] */
    int32_t own_stage_rank[1]; /* the unpipelined loop's (no schedule) */
} mpmd_plan;

static inline int mpmd_runs_on(const mpmd_plan *pl, int node, int r) {
    return (int)((pl->runs[(size_t)node * pl->words + (r >> 6)] >> (r & 63)) & 1u);
}
static inline void mpmd_set_runs(mpmd_plan *pl, int node, int r) {
    pl->runs[(size_t)node * pl->words + (r >> 6)] |= (uint64_t)1 << (r & 63);
}

/* Body values every reading rank makes itself instead of receiving them:
 * microbatch slices (views of the batch) and constants. */
static inline int mpmd_replicated(const mpmd_node *n) {
    return n->op == &mpmd_op_microbatch || n->op == &mpmd_op_constant;
}

/* ---- FSDP (shard.c) ---- */

/* plan.fsdp: off, or how the sharded values are gathered */
enum { MPMD_FSDP_OFF = 0, MPMD_FSDP_PER_TASK = 1, MPMD_FSDP_PER_STEP = 2 };

/* Mark the values each replica holds a shard of (pl->mesh.shard) and each
 * task's parameters to gather (nothing without pl->fsdp and replicas). */
mpmd_status mpmd_plan_shards(mpmd_plan *pl, mpmd_error *err);
/* How many parameters are sharded. */
int mpmd_plan_sharded_params(const mpmd_plan *pl);
/* Why FSDP left parameter `node` whole, as "is read after the loop by ..."
 * (for "\"name\" <reason>"): 1, or 0 when it is sharded or FSDP is off. */
int mpmd_plan_whole_reason(const mpmd_plan *pl, int node, char *buf, size_t len);
/* The values GATHER instruction `in` gathers, *n of them. */
static inline const int32_t *mpmd_gather_list(const mpmd_plan *pl, const mpmd_instr *in, int *n) {
    *n = pl->gather_n[in->list];
    return pl->gather[in->list];
}

/* The compiler's entry point (compile.c): cluster, place, lower, check the
 * programs, build the in-task free lists and look up the backend's kernels,
 * for a graph and schedule the caller has checked together
 * (mpmd_compile_check, once). Its messages name no call: the public call
 * that compiles (mpmd_jit_with_loop, mpmd_predict, mpmd_exec_new) puts its
 * own name before them. */
mpmd_plan *mpmd_compile(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_backend *be, int replicas,
                        int fsdp, int recv_ahead, mpmd_error *err);
/* The unpipelined loop as a plan: one rank, every body op in one task run
 * once per microbatch in microbatch order, before- and after-loop ops
 * around it; for any graph, with or without a loop or stage markers (the
 * reference every schedule is compared with: mpmd_exec, and
 * mpmd_jit_with_loop without a schedule). pl->sched is NULL. */
mpmd_plan *mpmd_compile_loop(const mpmd_graph *g, const mpmd_backend *be, int replicas, int fsdp,
                             int recv_ahead, mpmd_error *err);
/* Whether g and s fit together: checked once, before mpmd_compile. */
mpmd_status mpmd_compile_check(const mpmd_graph *g, const mpmd_schedule *s, mpmd_error *err);
void mpmd_plan_free(mpmd_plan *pl);
/* The task bodies and every rank's program, as text (mpmd_step_print). */
void mpmd_plan_print(const mpmd_plan *pl, FILE *f);

mpmd_status mpmd_place(mpmd_plan *pl, mpmd_error *err);
mpmd_status mpmd_lower(mpmd_plan *pl, mpmd_error *err);
/* Run the programs' communication on paper: every receive has its send,
 * nothing deadlocks. Sets each SEND's `reuse` from vector clocks: the first
 * instruction of the sender after which it knows (through the messages it
 * received since) that the receiver has the value. */
mpmd_status mpmd_program_check(mpmd_plan *pl, mpmd_error *err);
/* Every rank's memory plan (memory.c): buffers, lifetimes, offsets; sets
 * each RECV's `post` from pl->recv_ahead. */
mpmd_status mpmd_plan_memory(mpmd_plan *pl, mpmd_error *err);
/* Rank r's buffers, lifetimes and offsets, as text. */
void mpmd_plan_print_memory(const mpmd_plan *pl, int r, FILE *f);
/* The loop reductions reading each body value and the in-task free lists
 * (reduce_head/next, free_head/next). */
mpmd_status mpmd_lower_task_lists(mpmd_plan *pl, mpmd_error *err);
void mpmd_program_push(mpmd_program *p, mpmd_instr in, int *oom);

#endif
