/* The MPI launcher (launcher.h): one process per point of the mesh,
 * started by mpirun; and the public mpmd_mpi_* functions (include/mpmd.h).
 *
 * Every process compiles the same plan (the processes first compare what
 * they built: agree) and runs the program of its point on the calling
 * thread (MPI_THREAD_FUNNELED); world rank w runs pipeline rank w % D of
 * replica w / D / M, model rank w / D % M. Its wire is wire_mpi.c. A value
 * held by another process is fetched with a broadcast from the process
 * that holds it (a sharded one: a broadcast from each replica).
 *
 * Built only when CMake finds MPI (MPMD_HAVE_MPI); otherwise there is no
 * MPI launcher (mpmd_launcher_for says so) and the public functions say
 * that this build has no MPI.
 */
#include "runtime/launcher.h"

#include <stdlib.h>
#include <string.h>

#ifdef MPMD_HAVE_MPI
#include <mpi.h>

int mpmd_mpi_available(void) { return 1; }

mpmd_status mpmd_mpi_init(int *argc, char ***argv, mpmd_error *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return MPMD_OK;
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return mpmd_error_set(err, MPMD_ERR_RUNTIME, "mpmd_mpi_init: MPI_Init_thread failed");
    return MPMD_OK;
}

void mpmd_mpi_finalize(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Finalize();
}

int mpmd_mpi_world_rank(void) {
    int inited = 0, r = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int mpmd_mpi_world_size(void) {
    int inited = 0, n = 1;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void mpmd_mpi_abort(int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

mpmd_status mpmd_mpi_any(int *flags, int n, mpmd_error *err) {
    if (n < 0 || (n && !flags))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_mpi_any: %d flags at %p", n, (void *)flags);
    for (int i = 0; i < n; i++)
        flags[i] = flags[i] != 0;
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin || n == 0) return MPMD_OK;
    if (MPI_Allreduce(MPI_IN_PLACE, flags, n, MPI_INT, MPI_LOR, MPI_COMM_WORLD) != MPI_SUCCESS)
        return mpmd_error_set(err, MPMD_ERR_RUNTIME, "mpmd_mpi_any: MPI_Allreduce of %d flags failed", n);
    return MPMD_OK;
}

/* ---- the launcher -------------------------------------------------------- */

static mpmd_status mpi_place(int D, int R, int M, mpmd_point *here, mpmd_error *err) {
    const int w = mpmd_mpi_world_rank(), ws = mpmd_mpi_world_size();
    if (ws != D * R * M) {
        if (M > 1)
            return mpmd_error_set(
                err, MPMD_ERR_INVALID,
                "the MPI job has %d processes but the mesh needs %d (%d ranks x %d replicas x %d "
                "model ranks): run mpirun -np %d",
                ws, D * R * M, D, R, M, D * R * M);
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "the MPI job has %d processes but the mesh needs %d (%d ranks x %d replicas): run "
            "mpirun -np %d",
            ws, D * R, D, R, D * R);
    }
    *here = (mpmd_point){w % D, w / D / M, w / D % M};
    return MPMD_OK;
}

static int mpi_layout(const struct mpmd_step *st, int *first) {
    *first = (st->here.replica * st->plan->model + st->here.model) * st->plan->num_ranks + st->here.rank;
    return 1;
}

/* The one rank state of this process runs on the calling thread. */
static mpmd_status mpi_launch(struct mpmd_step *st, void *(*rank_main)(void *)) {
    st->rs[0].status = MPMD_OK;
    rank_main(&st->rs[0]);
    return MPMD_OK;
}

/* An allgather of the words on the job's world (the step's communicators
 * do not exist yet). */
static int mpi_agree(const uint64_t *mine, int n, uint64_t **all, int *procs) {
    int ws = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    *procs = ws;
    *all = malloc((size_t)ws * (size_t)n * sizeof **all + 1);
    if (!*all) return 1;
    return MPI_Allgather(mine, n, MPI_UINT64_T, *all, n, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS;
}

/* The part of `node` (rank, replica, model) holds, from the process that
 * runs it, broadcast to every process: bytes [lo, lo + n) of the model
 * rank's value. */
static void bcast_part(struct mpmd_step *st, int rank, int replica, int model, int node, char *dst,
                       size_t n) {
    const int root = (replica * st->plan->model + model) * st->plan->num_ranks + rank;
    const mpmd_rank_state *rs = &st->rs[0];
    if (rs->rank == rank && rs->replica == replica && rs->model == model) {
        const void *src = st->rs[0].glob[node];
        if (src)
            st->plan->be->queue.download(st->rs[0].dev, dst, src, n);
        else
            memset(dst, 0, n);
    }
    if (n) MPI_Bcast(dst, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
}

static mpmd_status mpi_fetch(struct mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes) {
    int axis, groups;
    const int split = mpmd_split_of(st->plan->g, node, &axis, &groups),
              sharded = mpmd_sharded(&st->plan->mesh, node);
    if (!split && !sharded) {
        bcast_part(st, rank, replica, 0, node, dst, bytes);
        return MPMD_OK;
    }
    /* every model rank's part (tensor parallelism), each assembled from
     * every replica's shard (FSDP) */
    const size_t b = rt_bytes(st->plan->g, node), es = mpmd_dtype_size(st->plan->g->nodes[node].type.dtype);
    char *part = split ? malloc(b + 1) : dst;
    if (!part) return MPMD_ERR_NOMEM;
    for (int mr = 0; mr < st->plan->model; mr++) {
        if (!sharded) {
            bcast_part(st, rank, replica, mr, node, part, b);
        } else {
            for (int d = 0; d < st->plan->replicas; d++) {
                int64_t lo, cnt;
                mpmd_shard_part(&st->plan->mesh, node, d, &lo, &cnt);
                bcast_part(st, rank, d, mr, node, part + (size_t)lo * es, (size_t)cnt * es);
            }
        }
        if (split) mpmd_split_copy(st->plan->g, node, mr, dst, part, 1);
    }
    if (split) free(part);
    return MPMD_OK;
}

static int mpi_writer(void) { return mpmd_mpi_world_rank() == 0; }

/* Processes of the job on this machine, as Open MPI (or MPICH) tells them. */
static int mpi_local_procs(void) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local) local = getenv("MPI_LOCALNRANKS");
    return local ? atoi(local) : 0;
}

const mpmd_launcher mpmd_launcher_mpi = {
    .name = "mpi",
    .wire = &mpmd_wire_mpi,
    .whole = 0,
    .place = mpi_place,
    .layout = mpi_layout,
    .setup = NULL,
    .teardown = NULL,
    .launch = mpi_launch,
    .launch_threads = 0,
    .settle = NULL, /* the rank ran on the calling thread */
    .fetch = mpi_fetch,
    .agree = mpi_agree,
    .procs = mpmd_mpi_world_size,
    .writer = mpi_writer,
    .local_procs = mpi_local_procs,
};

#else /* no MPI in this build */

int mpmd_mpi_available(void) { return 0; }
mpmd_status mpmd_mpi_init(int *argc, char ***argv, mpmd_error *err) {
    (void)argc, (void)argv;
    return mpmd_error_set(
        err, MPMD_ERR_INVALID,
        "this build of mpmd has no MPI runtime (install libopenmpi-dev and openmpi-bin, then "
        "rebuild)");
}
void mpmd_mpi_finalize(void) {}
int mpmd_mpi_world_rank(void) { return 0; }
int mpmd_mpi_world_size(void) { return 1; }
void mpmd_mpi_abort(int code) { exit(code); }
mpmd_status mpmd_mpi_any(int *flags, int n, mpmd_error *err) {
    if (n < 0 || (n && !flags))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_mpi_any: %d flags at %p", n, (void *)flags);
    for (int i = 0; i < n; i++)
        flags[i] = flags[i] != 0; /* the job is this process */
    return MPMD_OK;
}

#endif
