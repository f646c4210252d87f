/* runtime.h - the step (a compiled plan and the run state around it), a
 * rank's run-time state, the interpreter's entry points (mpmd_runtime_*),
 * and the services of the interpreter (run.c) that the wires use: failing
 * a rank, the planned buffer of a value sent or received.
 *
 *   step.c          the public step API: mpmd_jit_with_loop (compile a
 *                   plan, then mpmd_runtime_init) and mpmd_step_*
 *   run.c           the interpreter: sets up the ranks, runs their
 *                   programs; the step's launcher (st->la, launcher.h)
 *                   starts them, its wire (st->wire, wire.h) reaches the
 *                   other ranks
 *   launcher.c      the launchers; the in-process one (a thread per point)
 *   launch_mpi.c    the MPI launcher (a process per point)
 *   wire_local.c    the in-process wire: mailboxes, replica groups
 *   wire_mpi.c      the MPI wire (with MPMD_HAVE_MPI)
 *   rank_values.c   the ranks' values read and written from outside a run
 *   step_agree.c    the processes of one job compare what they built
 *   record.c        recorded runs: timelines, traces, summaries
 *
 * The plan (compiler/compiler.h, st->plan) is read here and never changed;
 * the run state below is the runtime's own. The wires include this header
 * and wire.h, never each other; run.c calls them only through the
 * mpmd_wire table, and the launcher through mpmd_launcher.
 */
#ifndef MPMD_RUNTIME_H
#define MPMD_RUNTIME_H

#include "compiler/compiler.h"

#include <pthread.h>

typedef struct mpmd_rank_state mpmd_rank_state;
struct mpmd_launcher;
struct mpmd_wire;
/* A point of the mesh: (pipeline rank, replica, model rank). */
typedef struct mpmd_point {
    int rank, replica, model;
} mpmd_point;

/* One executed instruction of a recorded run: seconds since the step began,
 * and (receives) the part spent blocked waiting for the message. */
typedef struct mpmd_event {
    int32_t instr; /* index in the rank's program */
    double t0, t1, wait;
    double late; /* of the wait, the seconds after the value was sent (in-process receives) */
} mpmd_event;

/* ---- the step: a plan and its run state ---- */
struct mpmd_step {
    const mpmd_plan *plan; /* the compiler's product, owned by the step, never changed here */
    int threads_per_rank;
    int threads;           /* kernel threads each rank runs (threads_per_rank or the default) */
    char threads_why[192]; /* why that many, for the run summary */
    uint64_t seed;
    int num_local;                  /* rank states run by this process */
    const struct mpmd_launcher *la; /* which points run here, and how (launcher.h) */
    void *lx;                       /* the launcher's state */
    struct mpmd_point here;         /* the point this process runs first (launcher's place) */
    const struct mpmd_wire *wire;   /* what crosses ranks (wire.h): la->wire */
    void *tx;                       /* the wire's state */
    mpmd_rank_state *rs;            /* [num_local]: in-process, (rank r, replica d, model rank m) at
                                       ((d M + m) D + r) */
    int profiling, prof_runs;       /* time every op (mpmd_exec_set_profiling) */
    double timeout_opt;             /* mpmd_step_opts.step_timeout */
    double wait_limit;              /* this run's watchdog in seconds (0: none) */
    double slowest_step;            /* the longest successful run so far, seconds */
    int broken;                     /* a rank did not stop after a failure: no more runs */
    void **inputs;                  /* [n_nodes] shared input buffers */
    unsigned char *input_set;
    int record;            /* time every instruction (mpmd_step_set_recording) */
    double t_start, t_end; /* wall clock of the last run */
    int abort_flag;        /* a rank failed: the others stop */
    double abort_time;     /* when it was set (rt_now) */
    pthread_mutex_t abort_mu;
    int mutex_ready;
    int ran;
    int busy; /* a thread's call holds the step (rt_step_enter) */
    char err[MPMD_ERROR_MSG_MAX];
};

/* A public call `fn` on step st holds it while it runs (one thread at a
 * time; the same thread may nest calls): 0, or 1 after recording, for this
 * thread's mpmd_step_error, that another thread holds it. */
int rt_step_enter(struct mpmd_step *st, const char *fn);
void rt_step_leave(struct mpmd_step *st);

/* ---- the step's points, as its launcher (launcher.c) places them ---- */
/* Every point of the step runs in this process (a value is read whole
 * here); 0: each process runs one point (MPI), and whole values are
 * gathered by the launcher (mpmd_step_gather, saves). */
int rt_whole(const struct mpmd_step *st);
/* The point this process runs first (its only one where points are
 * processes). */
mpmd_point rt_here(const struct mpmd_step *st);
/* This process writes the files of a save (the job's first process). */
int rt_writer(const struct mpmd_step *st);

/* ---- the interpreter's entry points (run.c; st->plan and st->tr set) ----
 * mpmd_step_new_plan (step.c) makes a step from a compiled plan on the
 * in-process wire (mpmd_exec: the loop's plan). */
struct mpmd_step *mpmd_step_new_plan(mpmd_plan *pl, int threads, uint64_t seed, mpmd_error *err);
mpmd_status mpmd_runtime_init(struct mpmd_step *st, mpmd_error *err);
void mpmd_runtime_free(struct mpmd_step *st);
mpmd_status mpmd_runtime_run(struct mpmd_step *st);
/* A rank's buffer of a value outside the body (host backends only: NULL
 * elsewhere). */
void *mpmd_runtime_value(struct mpmd_step *st, int rank, int node);
/* The same for (rank, replica, model rank): NULL when not held in this
 * process, only a part of it is held (mpmd_mesh_partial) or not host
 * memory; and whether that rank and replica hold value node here. */
void *mpmd_runtime_replica_value(struct mpmd_step *st, int rank, int replica, int model, int node);
int mpmd_runtime_holds(struct mpmd_step *st, int rank, int replica, int node);
/* Copy a value outside the body held by (rank, replica) in this process to
 * dst, or src into it (a parameter or variable). MPMD_ERR_INVALID when that
 * rank and replica hold no such value here. */
mpmd_status mpmd_runtime_read(struct mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes);
/* Model rank `model`'s value (its part of a split one) from (rank,
 * replica), FSDP's shards assembled from every replica: all must be here. */
mpmd_status mpmd_runtime_read_model(struct mpmd_step *st, int rank, int replica, int model, int node,
                                    void *dst);
mpmd_status mpmd_runtime_write(struct mpmd_step *st, int rank, int replica, int node, const void *src,
                               size_t bytes);
/* Time every op of the following runs (each waited for), or stop and
 * forget the times; the seconds per node of local rank state `local`. */
mpmd_status mpmd_runtime_set_profiling(struct mpmd_step *st, int on);
const double *mpmd_runtime_op_seconds(const struct mpmd_step *st, int local);
/* What rank's backend instance counted (mpmd_backend.memory); 0 when this
 * process does not run the rank. */
int mpmd_runtime_backend_memory(const struct mpmd_step *st, int rank, size_t *peak, size_t *own);
/* The executor's step (exec.c). */
struct mpmd_step *mpmd_exec_step(mpmd_exec *ex);
/* Input `node` changed in its host staging buffer: copy it to every rank of
 * this process that reads it (non-host backends). */
mpmd_status mpmd_runtime_input_set(struct mpmd_step *st, int node);
/* The parts of value node that (rank, replica) holds in this process (its
 * model ranks' splits, its FSDP shard of each) into their places in dst, the
 * whole value, leaving the rest of dst as it is: what mpmd_runtime_write
 * writes back unchanged. */
mpmd_status mpmd_runtime_read_own(struct mpmd_step *st, int rank, int replica, int node, void *dst);
/* The state of (rank, replica, model rank) when this process runs it, else NULL. */
mpmd_rank_state *mpmd_runtime_state(const struct mpmd_step *st, int rank, int replica, int model);
/* FSDP: bytes rank's first replica in this process took from the others
 * in its last run (-1: this process does not run the rank). */
int64_t mpmd_runtime_collective_bytes(const struct mpmd_step *st, int rank, int64_t *gathered);
/* The recorded instructions of rank's last run, and its measured peak of
 * body-value bytes. */
const mpmd_event *mpmd_runtime_events(const struct mpmd_step *st, int rank, int *n, int64_t *peak_bytes);

struct mpmd_rank_state {
    int rank;       /* pipeline rank: the program it runs */
    int replica;    /* data-parallel replica */
    int model;      /* model rank (tensor parallelism), 0 without */
    int lane;       /* replica x model ranks + model: the ranks of one lane are a pipeline */
    void *tx;       /* this rank's state in the step's wire */
    void *dev;      /* this rank's backend instance (st->plan->be) */
    mpmd_event *ev; /* recorded instructions of the last run */
    int nev, capev;
    int64_t progress_us; /* when it last began an instruction (rt_now in us; the watchdog reads it) */
    int at;              /* that instruction */
    double wait;         /* seconds blocked in the current receive */
    double late;         /* of them, after the value was sent: the wake-up (in-process) */
    int64_t live_bytes, peak_bytes; /* body values held, measured */
    int nthreads;
    const mpmd_rank_memory *mem; /* the plan's memory plan of this rank */
    char *arena;                 /* its arena: every buffer the program writes */
    void **val;                  /* [nslots * n] body values by (slot, microbatch), into the arena */
    void **glob;                 /* [nn] values outside the body: storage, inputs, arena buffers
                                    (FSDP: a sharded value's shard) */
    void **full;                 /* [nn] FSDP: a sharded parameter gathered whole for the task
                                    running now (the body reads it there), else NULL */
    void **gather_in;   /* FSDP: a GATHER's shards of this replica, one per value of the largest list */
    void **gather_out;  /* FSDP: a GATHER's planned buffers, one per value of the largest list */
    int64_t gath_bytes; /* FSDP: of coll_bytes, the gathers' */
    int64_t coll_bytes; /* FSDP: bytes this replica took from the others this run
                           (gathers and reduce-scatters) */
    void *scratch;
    int posted;            /* this run's receives up to here are posted to the wire (run.c, post_ahead) */
    mpmd_launch_room room; /* the operand lists of launches wider than the stack's (backend.h) */
    double *prof;          /* [nn] seconds in each op over the profiled runs, or NULL */
    /* a profiled run on an asynchronous backend: each op's pair of marks
     * (backend.mark), read into prof when the run has finished */
    struct rt_mark *marks;
    int nmarks, capmarks;
    /* replayed recordings (backend.capture_*): graph[x] stands for the
     * instructions x .. seg_end[x] - 1 of the program (ops and tasks with no
     * sends or receives between), which change the live body bytes by
     * seg_delta[x] and raise them by at most seg_peak[x] on the way */
    void **graph;
    int32_t *seg_end;
    int64_t *seg_delta, *seg_peak;
    int no_graphs; /* the backend declined to record, or a recording failed */
    struct mpmd_step *st;
    mpmd_status status;
    char err[MPMD_ERROR_MSG_MAX];
};

/* The longest watchdog, in seconds (31 years): a longer step_timeout, or
 * an infinite one, means none. */
#define MPMD_WAIT_MAX 1e9

/* ---- the interpreter's services (run.c) ---- */
double rt_now(void);
/* This rank fails: record the message (the step's first failure wins), set
 * the abort flag and wake every rank blocked in the wire. */
void rt_fail(mpmd_rank_state *rs, mpmd_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int rt_aborted(struct mpmd_step *st);
/* The watchdog's deadline for a wait that starts now, on the realtime clock
 * (for pthread_cond_timedwait); 0 when there is none. */
int rt_deadline(const struct mpmd_step *st, struct timespec *until);
/* The realtime clock `seconds` from now (for the timed waits and joins). */
void rt_time_after(double seconds, struct timespec *t);
size_t rt_bytes(const mpmd_graph *g, int node);
/* A value as a message names it: `%12 "x" (matmul)` or `%12 (matmul)`. */
const char *rt_value_str(const struct mpmd_step *st, int node, char *buf, size_t len);
/* What instruction x of rank's program runs, for messages: "task fwd_0__3",
 * "microbatch 3 of the loop", `%12 "x" (matmul)`. Returns buf. */
const char *rt_instr_str(const struct mpmd_step *st, int rank, int x, char *buf, size_t len);
/* The buffer of value v for microbatch mb (-1: outside the body) on this
 * rank: its arena slot, its storage, or (FSDP, in a task) its gathered
 * whole. */
void *rt_value_ptr(mpmd_rank_state *rs, int v, int mb);
/* The tag of a message carrying value `node` of microbatch mb (-1: outside
 * the body): the same on both ends, distinct per (value, microbatch), from
 * 1 to n_nodes x (num_micro + 1). */
int rt_tag(const struct mpmd_step *st, int node, int mb);
/* The planned buffer of the value a SEND or RECV moves on this rank: a send
 * reads it (and it stays untouched until the SEND's `reuse`), a receive
 * writes it (from its RECV's `post` on). */
void *rt_buffer(mpmd_rank_state *rs, const mpmd_instr *in);

#endif
