/* launcher.h - which points of the mesh this process runs and how their
 * runs start and end: the launcher. The bytes between ranks go over its
 * wire (wire.h).
 *
 * A launcher decides where the (pipeline rank, replica, model rank) points
 * of a step run: all as threads of this process, or one MPI process each.
 * It checks that the job fits the mesh, says which points are here, starts
 * a run of them and waits for it, assembles whole values from the points
 * that hold them (reads, gathers, checkpoints), and compares the processes'
 * steps before one is made. Nothing outside launcher.c asks which runtime a
 * step has: the rest of mpmd asks the questions below.
 *
 *   launcher.c     the launchers by runtime kind (mpmd_launcher_for) and
 *                  the in-process one: a thread per point
 *   launch_mpi.c   MPI: one process per point, started by mpirun
 */
#ifndef MPMD_LAUNCHER_H
#define MPMD_LAUNCHER_H

#include "runtime/wire.h"

typedef struct mpmd_launcher {
    const char *name;
    const mpmd_wire *wire; /* what moves bytes between its ranks */
    /* Every point runs in this process (whole values are read here, two
     * steps can meet); 0: each process runs one point. */
    int whole;
    /* The job can run a mesh of D pipeline ranks x R replicas x M model
     * ranks: the point this process runs first into *here; else an error. */
    mpmd_status (*place)(int D, int R, int M, mpmd_point *here, mpmd_error *err);
    /* The points this process runs: their count, and *first, the world
     * index of the first; world index w is pipeline rank w % D of lane w / D
     * (lane = replica x M + model). */
    int (*layout)(const struct mpmd_step *st, int *first);
    /* Its own state, st->lx, once the ranks are set up; released before the
     * wire's. NULL: none. */
    mpmd_status (*setup)(struct mpmd_step *st, mpmd_error *err);
    void (*teardown)(struct mpmd_step *st);
    /* A run: rank_main(rs) for every rank state of this process (rs->status
     * reset first), returning when all have finished. An error that started
     * no rank: st->err. */
    mpmd_status (*launch)(struct mpmd_step *st, void *(*rank_main)(void *));
    /* launch starts a thread per rank state (counted against the process's
     * thread budget when the step is set up) */
    int launch_threads;
    /* After a run the watchdog cut short: 1 once every rank it started has
     * stopped (waiting up to `wait` seconds for them), else 0. NULL: they
     * run on the calling thread, so they have. */
    int (*settle)(struct mpmd_step *st, double wait);
    /* The value `node` held by (rank, replica) copied to dst on this
     * process (collective where points are processes: every process makes
     * the same calls in the same order). A sharded value (FSDP) is
     * assembled from every replica's shard, whatever `replica` says. */
    mpmd_status (*fetch)(struct mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes);
    /* Before a step is made (collective): every process's n words into
     * *all (malloc'ed, procs x n, process p's at p n) and the process count
     * into *procs; 0, or nonzero when it failed. NULL: one process. */
    int (*agree)(const uint64_t *mine, int n, uint64_t **all, int *procs);
    /* The processes of the job, and whether this one writes the files a
     * save makes (the first process). */
    int (*procs)(void);
    int (*writer)(void);
    /* Processes of this job on this machine (they share its cores), or 0
     * when the job does not say. NULL: this process only. */
    int (*local_procs)(void);
} mpmd_launcher;

/* The launcher of a runtime kind (mpmd_runtime_kind); NULL when the kind is
 * unknown or this build has none (MPI without MPMD_HAVE_MPI). */
const mpmd_launcher *mpmd_launcher_for(int runtime);
/* Before a step is made, under a launcher of several processes: every
 * process compares digests of the graph, schedule and options it built with
 * every other's (collective); an error naming the first difference
 * (step_agree.c). */
mpmd_status mpmd_step_agree(const mpmd_launcher *la, const mpmd_graph *g, const mpmd_schedule *s,
                            const mpmd_step_opts *o, mpmd_error *err);
/* MPMD_OK when this build has a launcher of that kind, else why not. */
mpmd_status mpmd_launcher_check(int runtime, mpmd_error *err);
/* How many tasks ahead the kind's wire posts its receives (the plan keeps
 * their buffers from there on); where this build lacks it, the MPI wire's
 * two, so that every build plans the same. */
int mpmd_launcher_recv_ahead(int runtime);

#endif
