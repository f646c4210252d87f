/* compiler.h - mpmd_jit_with_loop: from one step's graph and a schedule to
 * one program per rank.
 *
 *   cluster.c  body op -> (stage, F/B/A/W): the tasks' contents
 *   place.c    before/after-loop ops -> the ranks that run them
 *   lower.c    per-rank instruction lists: run task, send, receive, free,
 *              the loop reductions; validated by simulation
 *   jit.c      the entry point, the step's accessors and its printouts
 *
 * and at run time (src/runtime/):
 *   run.c              the interpreter: sets up this process's ranks and
 *                      runs their programs (mpmd_runtime_* below)
 *   transport.h        what crosses ranks (send, receive, the cross-replica
 *                      sum, end of step, fetch), the step's st->tr:
 *   transport_local.c    in-process, one thread per rank, mailboxes
 *   mpi.c                MPI, one process per rank (MPMD_HAVE_MPI)
 *   runtime.h          a rank's state and the interpreter's services that
 *                      the transports use
 *   record.c           recorded runs: timelines, traces, summaries
 */
#ifndef MPMD_COMPILER_H
#define MPMD_COMPILER_H

#include "backend/backend.h"
#include "graph/graph.h"

#include <pthread.h>
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
    MPMD_I_RUN_PRE = 0, /* a before-loop op: node */
    MPMD_I_TASK,        /* run task (kind, stage, microbatch) */
    MPMD_I_SEND,        /* value (node, microbatch) to rank peer */
    MPMD_I_RECV,        /* value (node, microbatch) from rank peer */
    MPMD_I_FREE,        /* value (node, microbatch) is dead on this rank */
    MPMD_I_RUN_POST,    /* an after-loop op: node */
    MPMD_I_ALLREDUCE    /* combine loop result `node` across the data-parallel replicas */
};

typedef struct mpmd_instr {
    int8_t op;
    int8_t kind;  /* TASK: task kind */
    int8_t moved; /* SEND: the value's last use here: its buffer itself goes */
    int8_t pad;
    int32_t node; /* RUN_*, SEND, RECV, FREE: the value */
    int32_t stage;
    int32_t mb;    /* microbatch; -1 for values outside the body */
    int32_t peer;  /* SEND: destination, RECV: source */
    int32_t entry; /* TASK: entry index in the rank's schedule list */
} mpmd_instr;

typedef struct mpmd_program {
    int rank;
    int n, cap;
    mpmd_instr *ins;
    int64_t peak_bytes; /* most bytes of step values alive at once (planned) */
    size_t scratch_bytes;
} mpmd_program;

/* ---- the compiled step ----------------------------------------------------- */

typedef struct mpmd_rank_state mpmd_rank_state;
struct mpmd_transport;

/* One executed instruction of a recorded run: seconds since the step began,
 * and (receives) the part spent blocked waiting for the message. */
typedef struct mpmd_event {
    int32_t instr; /* index in the rank's program */
    double t0, t1, wait;
} mpmd_event;

struct mpmd_step {
    const mpmd_graph *g;
    mpmd_schedule *sched; /* a copy's owner: the step keeps what it needs */
    int num_ranks, num_stages, num_micro;
    int threads_per_rank;
    uint64_t seed;
    unsigned char *live;
    mpmd_clusters cl;
    int32_t *stage_rank; /* [S] */
    uint64_t *runs;      /* [n_nodes * words] ranks that run/hold each value */
    int words;
    int32_t *home;                   /* [n_nodes] body: rank computing it; loop_reduce: rank accumulating */
    unsigned char *cross;            /* [n_nodes] body value read by another task (lives past its task) */
    mpmd_program *prog;              /* [D] */
    const mpmd_kernel **kern;        /* [n_nodes] */
    const mpmd_backend *be;          /* every rank's backend */
    int replicas;                    /* data-parallel replicas of every rank (mesh data axis) */
    int runtime;                     /* mpmd_runtime_kind */
    int num_local;                   /* rank states run by this process */
    int mpi_rank, mpi_replica;       /* MPI: the rank and replica of this process (else 0) */
    const struct mpmd_transport *tr; /* what crosses ranks (runtime/transport.h), set by the jit */
    void *tx;                        /* the transport's state */
    mpmd_rank_state *rs;             /* [num_local]: in-process, replica d rank r at d * D + r */
    void **inputs;                   /* [n_nodes] shared input buffers */
    unsigned char *input_set;
    int32_t *reduce_head, *reduce_next; /* loop reductions reading each body value */
    int32_t **free_head;                /* [S*4][position]: in-task values dying after that op */
    int32_t *free_next;
    int record;            /* time every instruction (mpmd_step_record) */
    double t_start, t_end; /* wall clock of the last run */
    int abort_flag;        /* a rank failed: the others stop */
    pthread_mutex_t abort_mu;
    int mutex_ready;
    int ran;
    char err[MPMD_ERROR_MSG_MAX];
};

static inline int mpmd_runs_on(const struct mpmd_step *st, int node, int r) {
    return (int)((st->runs[(size_t)node * st->words + (r >> 6)] >> (r & 63)) & 1u);
}
static inline void mpmd_set_runs(struct mpmd_step *st, int node, int r) {
    st->runs[(size_t)node * st->words + (r >> 6)] |= (uint64_t)1 << (r & 63);
}

/* Body values every reading rank makes itself instead of receiving them:
 * microbatch slices (views of the batch) and constants. */
static inline int mpmd_replicated(const mpmd_node *n) {
    return n->op == &mpmd_op_microbatch || n->op == &mpmd_op_constant;
}

mpmd_status mpmd_place(struct mpmd_step *st, mpmd_error *err);
mpmd_status mpmd_lower(struct mpmd_step *st, mpmd_error *err);
mpmd_status mpmd_program_check(struct mpmd_step *st, mpmd_error *err);
void mpmd_program_push(mpmd_program *p, mpmd_instr in, int *oom);

/* run time (runtime/run.c; st->tr must be set) */
mpmd_status mpmd_runtime_init(struct mpmd_step *st, mpmd_error *err);
void mpmd_runtime_free(struct mpmd_step *st);
mpmd_status mpmd_runtime_run(struct mpmd_step *st);
/* A rank's buffer of a value outside the body (host backends only: NULL
 * elsewhere). */
void *mpmd_runtime_value(struct mpmd_step *st, int rank, int node);
/* The same for (rank, replica): NULL when not held in this process or not
 * host memory; and whether that rank and replica hold value node here. */
void *mpmd_runtime_replica_value(struct mpmd_step *st, int rank, int replica, int node);
int mpmd_runtime_holds(struct mpmd_step *st, int rank, int replica, int node);
/* Copy a value outside the body held by (rank, replica) in this process to
 * dst, or src into it (a parameter or variable). MPMD_ERR_INVALID when that
 * rank and replica hold no such value here. */
mpmd_status mpmd_runtime_read(struct mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes);
mpmd_status mpmd_runtime_write(struct mpmd_step *st, int rank, int replica, int node, const void *src,
                               size_t bytes);
/* Input `node` changed in its host staging buffer: copy it to every rank of
 * this process that reads it (non-host backends). */
mpmd_status mpmd_runtime_input_set(struct mpmd_step *st, int node);
/* The recorded instructions of rank's last run, and its measured peak of
 * body-value bytes. */
const mpmd_event *mpmd_runtime_events(const struct mpmd_step *st, int rank, int *n, int64_t *peak_bytes);

#endif
