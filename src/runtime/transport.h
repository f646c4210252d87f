/* transport.h - what crosses ranks: set-up, starting the ranks of a run,
 * send, receive, the cross-replica sum of a loop result, end of step, and
 * the fetch of a value held elsewhere.
 *
 * mpmd_jit_with_loop picks the step's transport once (st->tr, from the
 * runtime kind); the interpreter (run.c) calls it only through this table
 * and never asks which one it has. Two implementations:
 *
 *   transport_local.c  in-process: one thread per (rank, replica); a
 *                      transfer goes to the receiver's mailbox, replicas
 *                      meet in a group to combine loop results
 *   mpi.c              MPI: one process per (rank, replica), non-blocking
 *                      point-to-point messages, an allgather to combine
 *                      (FSDP: all-to-all to reduce-scatter, allgather);
 *                      only with MPMD_HAVE_MPI (without it there is no MPI
 *                      transport, and mpmd_transport_for returns NULL)
 *
 * A transport uses the interpreter's services (runtime.h: rt_fail, the
 * planned buffer of a value with rt_buffer) and the step's backend
 * (st->plan->be: copies, events, combine), never another transport. It
 * owns no buffers of values: a send is read from the sender's planned
 * buffer, which the plan leaves untouched until the SEND's `reuse`
 * instruction (when the sender knows that the receiver has it), and a
 * receive lands in the receiver's planned buffer.
 *
 * Functions that fail call rt_fail (so every rank stops) and return nonzero.
 */
#ifndef MPMD_TRANSPORT_H
#define MPMD_TRANSPORT_H

#include "runtime/runtime.h"

typedef struct mpmd_transport {
    const char *name;
    /* The (rank, replica) states this process runs: returns their count and
     * sets *first; they are world indices first .. first + count - 1, world
     * index w being pipeline rank w % num_ranks of replica w / num_ranks.
     * In-process: all of them from 0; MPI: this process's one. */
    int (*layout)(const struct mpmd_step *st, int *first);
    /* Once the rank states are set up (st->rs, every rs->dev open): the
     * transport's state, st->tx and each rs->tx. */
    mpmd_status (*setup)(struct mpmd_step *st, mpmd_error *err);
    /* Release it, before the ranks' backends close; also after a failed or
     * partial set-up. */
    void (*teardown)(struct mpmd_step *st);
    /* The start of a run: call rank_main(rs) for every rank state of this
     * process (resetting rs->status first) and return when all have
     * finished. In-process: one thread each; MPI: on the calling thread, as
     * MPI_THREAD_FUNNELED wants. An error that started no rank: st->err. */
    mpmd_status (*launch)(struct mpmd_step *st, void *(*rank_main)(void *));
    /* launch starts a thread per rank state (counted against the process's
     * thread budget when the step is set up) */
    int launch_threads;
    /* Before instruction x of the rank's program runs; NULL when there is
     * nothing to do. MPI: posts the receives of the next two tasks. */
    void (*prepare)(mpmd_rank_state *rs, int x);
    /* Receives are posted this many tasks ahead (the RECV's `post`: its
     * buffer may be written from there on); 0: at the receive itself. */
    int recv_ahead;
    /* The value (in->node, in->mb) to rank in->peer of the same replica,
     * from rt_buffer(rs, in); never blocks. An asynchronous backend's writes
     * are ordered with st->plan->be->event_record / event_wait. */
    int (*send)(mpmd_rank_state *rs, const mpmd_instr *in);
    /* After instruction `reuse` of a SEND: the buffer of send instruction x
     * is about to be overwritten; finish with it. NULL: nothing to do. */
    void (*send_done)(mpmd_rank_state *rs, int x);
    /* The value (in->node, in->mb) from rank in->peer into rt_buffer(rs,
     * in); blocks until it is there (rs->wait counts the time when
     * recording). `in` points into the rank's program. */
    int (*recv)(mpmd_rank_state *rs, const mpmd_instr *in);
    /* Combine loop result rs->glob[node] across the data-parallel replicas of
     * this pipeline rank with st->plan->be->combine, in replica order, into
     * `out` (the combined result's planned buffer): every replica gets the
     * same bits. */
    int (*allreduce)(mpmd_rank_state *rs, int node, void *out);
    /* FSDP: the same combine, of this replica's part of the value only
     * (mpmd_shard_part), into `out` (its shard): the bits allreduce gives
     * those elements. */
    int (*reduce_scatter)(mpmd_rank_state *rs, int node, void *out);
    /* FSDP: the sharded parameters nodes[0 .. n) whole, for one task: out[q]
     * gets every replica's shard of nodes[q] (rs->glob[node] on each), replica
     * d's at d x mpmd_held_bytes. A shard is read only once its replica has
     * finished the update that wrote it. x: the GATHER instruction (its
     * `post` says from where its buffers may be written: MPI posts the
     * allgathers there, in prepare). */
    int (*allgather)(mpmd_rank_state *rs, int x, const int32_t *nodes, int n, void *const *out);
    /* Tensor parallelism: collective `node` (all_reduce, pvary, all_gather,
     * reduce_scatter, axis_slice; ops/collective.c) of the task running on
     * this rank, over the model ranks of this rank and replica: `in` this
     * rank's input, `out` its result (rt_model_combine's arithmetic, the
     * same on every rank). `where` names the task for messages. */
    int (*model_collective)(mpmd_rank_state *rs, int node, const void *in, void *out, const char *where);
    /* The sum of n words acc over every rank state of the mesh (all pipeline
     * ranks, replicas and model ranks of the step), into acc on each: exact
     * unsigned integer sums (util/exact.h), so their order does not matter. */
    int (*mesh_sum)(mpmd_rank_state *rs, uint32_t *acc, int n);
    /* Before a step is made (collective: every process of the job makes
     * the same call): every process's n words into *all (malloc'ed, procs
     * x n, process p's at p n) and the process count into *procs; 0, or
     * nonzero when it failed. NULL: one process (nothing to compare). */
    int (*agree)(const uint64_t *mine, int n, uint64_t **all, int *procs);
    /* A rank failed (rt_fail): wake every rank blocked in the transport;
     * NULL when nothing can be woken. */
    void (*wake)(struct mpmd_step *st);
    /* After a run, for every rank state of this process: finish or drop what
     * is still in flight (sends, messages never received). */
    void (*end_step)(mpmd_rank_state *rs);
    /* After a run the watchdog cut short (st->broken: a rank thread that
     * did not stop, a message a peer never took): settle what it left if
     * that has finished since, waiting up to `wait` seconds for it.
     * Returns 1 when nothing is left (the step may run again, or be freed),
     * 0 while something still runs. */
    int (*settle)(struct mpmd_step *st, double wait);
    /* The value `node` held by (rank, replica) copied to dst on this
     * process. In-process: a download through the backend; MPI: a
     * broadcast from the process that holds it (collective: every process
     * makes the same calls in the same order). A sharded value (FSDP) is
     * assembled from every replica's shard, whatever `replica` says. */
    mpmd_status (*fetch)(struct mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes);
} mpmd_transport;

extern const mpmd_transport mpmd_transport_local; /* transport_local.c */
#ifdef MPMD_HAVE_MPI
extern const mpmd_transport mpmd_transport_mpi; /* mpi.c */
#endif

/* The transport of a runtime kind (mpmd_runtime_kind); NULL when this build
 * has none (MPI without MPMD_HAVE_MPI) or the kind is unknown. */
static inline const mpmd_transport *mpmd_transport_for(int runtime) {
    if (runtime == MPMD_RUNTIME_LOCAL) return &mpmd_transport_local;
#ifdef MPMD_HAVE_MPI
    if (runtime == MPMD_RUNTIME_MPI) return &mpmd_transport_mpi;
#endif
    return NULL;
}

#endif
