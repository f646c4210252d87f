/* runtime.h - a rank's run-time state, and the services of the interpreter
 * (run.c) that the transports use: pooled buffers, failing a rank, storing
 * a received value, the buffer a send hands over.
 *
 *   run.c              the interpreter: sets up the ranks, runs their
 *                      programs, and reaches other ranks only through the
 *                      step's transport (st->tr, transport.h)
 *   transport_local.c  the in-process transport: mailboxes, replica groups
 *   mpi.c              the MPI transport (with MPMD_HAVE_MPI)
 *
 * The transports include this header and transport.h, never each other;
 * run.c calls them only through the mpmd_transport table.
 */
#ifndef MPMD_RUNTIME_H
#define MPMD_RUNTIME_H

#include "compiler/compiler.h"

typedef struct {
    size_t bytes;
    void *p;
} pooled;

#define POOL_MAX 512

struct mpmd_rank_state {
    int rank;       /* pipeline rank: the program it runs */
    int replica;    /* data-parallel replica */
    void *tx;       /* this rank's state in the step's transport */
    void *dev;      /* this rank's backend instance (st->be) */
    mpmd_event *ev; /* recorded instructions of the last run */
    int nev, capev;
    double wait;                    /* seconds blocked in the current receive */
    int64_t live_bytes, peak_bytes; /* body values held, measured */
    int nthreads;
    int32_t *slot;      /* [nn] a body value's slot on this rank, -1 if it has none */
    int32_t *slot_node; /* [nslots] the value of each slot */
    int nslots;
    void **val;           /* [nslots * n] body values by (slot, microbatch) */
    void **glob;          /* [nn] values outside the body, storage, loop results */
    unsigned char *owned; /* [nn] glob[i] came from the pool this step */
    pooled pool[POOL_MAX];
    int npool;
    void *scratch;
    size_t scratch_bytes;
    struct mpmd_step *st;
    mpmd_status status;
    char err[MPMD_ERROR_MSG_MAX];
};

/* ---- the interpreter's services (run.c) ---- */
double rt_now(void);
/* A buffer of `bytes` on this rank's backend, from the pool when one of that
 * size is there; NULL when out of memory. */
void *rt_pool_get(mpmd_rank_state *rs, size_t bytes);
void rt_pool_put(mpmd_rank_state *rs, void *p, size_t bytes);
/* This rank fails: record the message (the step's first failure wins), set
 * the abort flag and wake every rank blocked in the transport. */
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

#endif
