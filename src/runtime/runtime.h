/* runtime.h - what the runtimes share: a rank's run-time state, its buffer
 * pool, failure handling, and the transports (in-process mailboxes in
 * local.c, MPI in mpi.c). */
#ifndef MPMD_RUNTIME_H
#define MPMD_RUNTIME_H

#include "compiler/compiler.h"

typedef struct msg {
    struct msg *next;
    int32_t src, node, mb;
    void *buf;
    void *ev; /* the backend event after which buf is complete, or NULL */
} msg;

typedef struct {
    size_t bytes;
    void *p;
} pooled;

/* The replicas of one pipeline rank meet here to combine loop results
 * (in-process runtime). */
typedef struct mpmd_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned generation;
    void **bufs; /* [replicas] */
} mpmd_group;

#define POOL_MAX 512

struct mpmd_rank_state {
    int rank;                /* pipeline rank: the program it runs */
    int replica;             /* data-parallel replica */
    void *mpi;               /* the MPI transport's state, or NULL */
    void *dev;               /* this rank's backend instance (st->be) */
    mpmd_event *ev;          /* recorded instructions of the last run */
    int nev, capev;
    double wait;             /* seconds blocked in the current receive */
    int64_t live_bytes, peak_bytes; /* body values held, measured */
    int nthreads;
    int32_t *slot;           /* [nn] a body value's slot on this rank, -1 if it has none */
    int32_t *slot_node;      /* [nslots] the value of each slot */
    int nslots;
    void **val;              /* [nslots * n] body values by (slot, microbatch) */
    void **glob;             /* [nn] values outside the body, storage, loop results */
    unsigned char *owned;    /* [nn] glob[i] came from the pool this step */
    pooled pool[POOL_MAX];
    int npool;
    void *scratch;
    size_t scratch_bytes;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *inbox;
    struct mpmd_step *st;
    mpmd_status status;
    char err[MPMD_ERROR_MSG_MAX];
};

/* ---- shared helpers (local.c) ---- */
double rt_now(void);
void *rt_pool_get(mpmd_rank_state *rs, size_t bytes);
void rt_pool_put(mpmd_rank_state *rs, void *p, size_t bytes);
void rt_fail(mpmd_rank_state *rs, mpmd_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int rt_aborted(struct mpmd_step *st);
size_t rt_bytes(const mpmd_graph *g, int node);
/* Where a received value goes: the body store or, for loop results, glob. */
void rt_store_received(mpmd_rank_state *rs, const mpmd_instr *in, void *buf);
/* The buffer a send hands over: the value itself when the send moves it
 * (its last use here), else a copy from the pool; NULL when out of memory. */
void *rt_send_buffer(mpmd_rank_state *rs, const mpmd_instr *in);

/* ---- the MPI transport (mpi.c; only with MPMD_HAVE_MPI) ---- */
mpmd_status mpmd_mpi_setup(struct mpmd_step *st, mpmd_error *err);
void mpmd_mpi_teardown(struct mpmd_step *st);
void mpmd_mpi_prepare(mpmd_rank_state *rs, int x);
int mpmd_mpi_send(mpmd_rank_state *rs, const mpmd_instr *in);
int mpmd_mpi_recv(mpmd_rank_state *rs, const mpmd_instr *in, int x);
int mpmd_mpi_allreduce(mpmd_rank_state *rs, int node);
void mpmd_mpi_end_step(mpmd_rank_state *rs);

#endif
