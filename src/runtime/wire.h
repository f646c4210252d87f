/* wire.h - what moves bytes between the ranks of a step: sends and
 * receives of a value's planned buffer, waited for at the plan's reuse
 * point, and ordered collectives over a mesh axis (the replicas' sum in
 * replica order, its FSDP reduce-scatter, the FSDP gather, the model
 * axis's collectives, an exact sum over the whole mesh).
 *
 * Which ranks exist, which of them this process runs, how their runs start
 * and stop, and how whole values are assembled for reads and checkpoints
 * is the launcher's (launcher.h); a launcher names its wire, and the
 * interpreter (run.c) calls the wire only through this table, never asking
 * which one it has. Two wires:
 *
 *   wire_local.c  in-process: a transfer goes to the receiver's mailbox,
 *                 replicas meet in a group to combine loop results
 *   wire_mpi.c    MPI: non-blocking point-to-point messages, an allgather
 *                 to combine (FSDP: all-to-all to reduce-scatter,
 *                 allgather); only with MPMD_HAVE_MPI
 *
 * The interpreter hands a wire the buffers, sizes, peers and tags of what
 * moves; while a run goes, the wire reads neither the rank's program nor
 * its values (set-up, end of step and teardown walk the program's slots). A wire uses the interpreter's
 * services (runtime.h: rt_fail, rt_instr_str for messages) and the step's
 * backend (st->plan->be: copies, events, combine), never another wire. It
 * owns no buffers of values: a send is read from the sender's planned
 * buffer, which the plan leaves untouched until the SEND's `reuse`
 * instruction (when the sender knows that the receiver has it), and a
 * receive lands in the receiver's planned buffer. What it needs per message
 * (message records, requests, staging copies) it plans in setup from the
 * rank's program, so a running step allocates nothing.
 *
 * Functions that fail call rt_fail (so every rank stops) and return nonzero.
 */
#ifndef MPMD_WIRE_H
#define MPMD_WIRE_H

#include "runtime/runtime.h"

typedef struct mpmd_wire {
    const char *name;
    /* Once the rank states are set up (st->rs, every rs->dev open): the
     * wire's state, st->tx and each rs->tx, with everything a run needs. */
    mpmd_status (*setup)(struct mpmd_step *st, mpmd_error *err);
    /* Release it, before the ranks' backends close; also after a failed or
     * partial set-up. */
    void (*teardown)(struct mpmd_step *st);
    /* Before the ranks of a run start, on the calling thread: NULL when
     * there is nothing to do (in-process: groups a failed run left start
     * empty). */
    void (*start)(struct mpmd_step *st);
    /* Point to point. A message is named on its rank by its slot (the
     * index of its SEND or RECV instruction: what a wire keeps per message,
     * it plans per slot at set-up) and on the wire by its tag (rt_tag: the
     * value and microbatch, the same on both ends); peer is the pipeline
     * rank of the same lane (replica and model rank). rt_instr_str(st,
     * rs->rank, slot) names the message in errors. */
    /* `bytes` of buf to peer; never blocks. buf stays untouched until
     * send_done(slot). An asynchronous backend's writes to it are ordered
     * with st->plan->be->queue.event_record / event_wait (the MPI wire on a device
     * backend instead waits for them as it copies buf to the host). */
    int (*send)(mpmd_rank_state *rs, int slot, const void *buf, size_t bytes, int peer, int tag);
    /* The plan is about to overwrite the buffer of send `slot` (after its
     * SEND's `reuse`): finish with it. NULL: nothing to do. */
    void (*send_done)(mpmd_rank_state *rs, int slot);
    /* Receives are posted this many tasks ahead (the RECV's `post`: its
     * buffer may be written from there on); 0: at the receive itself. */
    int recv_ahead;
    /* The interpreter posts receive `slot` into buf from its RECV's `post`
     * on; NULL: the wire takes the message at recv. */
    void (*post_recv)(mpmd_rank_state *rs, int slot, void *buf, size_t bytes, int peer, int tag);
    /* Receive `slot`, `bytes` from peer into buf; blocks until they are
     * there (rs->wait counts the time when recording). */
    int (*recv)(mpmd_rank_state *rs, int slot, void *buf, size_t bytes, int peer, int tag);
    /* Combine loop result `in` (this replica's, of value node) across the
     * data-parallel replicas of this pipeline rank with
     * st->plan->be->kernels.combine, in replica order, into `out` (the combined
     * result's planned buffer): every replica gets the same bits. */
    int (*allreduce)(mpmd_rank_state *rs, int node, const void *in, void *out);
    /* FSDP: the same combine, of this replica's part of the value only
     * (mpmd_shard_part), into `out` (its shard): the bits allreduce gives
     * those elements. */
    int (*reduce_scatter)(mpmd_rank_state *rs, int node, const void *in, void *out);
    /* FSDP: the sharded parameters nodes[0 .. n) whole, for one task
     * (GATHER instruction `slot`): out[q] gets every replica's shard of
     * nodes[q], this replica's being mine[q], replica d's at d x
     * mpmd_held_bytes. A shard is read only once its replica has finished
     * the update that wrote it. */
    int (*allgather)(mpmd_rank_state *rs, int slot, int n, const int32_t *nodes, const void *const *mine,
                     void *const *out);
    /* The interpreter posts that gather from its GATHER's `post` on (out
     * may be written from there; mine and out are read during the call
     * only); NULL: the wire gathers at allgather. */
    void (*post_gather)(mpmd_rank_state *rs, int slot, int n, const int32_t *nodes, const void *const *mine,
                        void *const *out);
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
    /* A rank failed (rt_fail): wake every rank blocked in the wire;
     * NULL when nothing can be woken. */
    void (*wake)(struct mpmd_step *st);
    /* After a run, for every rank state of this process: finish or drop what
     * is still in flight (sends, messages never received). */
    void (*end_step)(mpmd_rank_state *rs);
    /* After a run the watchdog cut short (st->broken), once the launcher's
     * ranks have all stopped: settle the messages it left (a message a peer
     * never took) if they have finished since, waiting up to `wait` seconds.
     * Returns 1 when nothing is left (the step may run again, or be freed),
     * 0 while something still runs. */
    int (*settle)(struct mpmd_step *st, double wait);
} mpmd_wire;

extern const mpmd_wire mpmd_wire_local; /* wire_local.c */
#ifdef MPMD_HAVE_MPI
extern const mpmd_wire mpmd_wire_mpi; /* wire_mpi.c */
#endif

#endif
