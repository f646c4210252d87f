/* pool.h - the worker threads a rank's CPU kernels share.
 *
 * A pool of n threads runs one function at a time on up to n of them: the
 * thread that calls mpmd_pool_run is thread 0, and n - 1 workers started
 * with the pool are the others. Between runs a worker watches for the next
 * one for a short while (kernels of one task come back to back), then
 * sleeps until it is woken, so an idle rank does not hold cores a busy rank
 * needs, whatever the environment says about OpenMP. The caller, once its
 * own share is done, waits for the workers the same way.
 *
 * How long an idle thread watches before it sleeps (mpmd_pool_spin_us):
 * MPMD_POOL_SPIN_US=N microseconds when set; otherwise 0 when
 * OMP_WAIT_POLICY=passive, without limit when OMP_WAIT_POLICY=active (a
 * program that asks for spinning workers gets them), else
 * MPMD_POOL_SPIN_DEFAULT_US. A watching thread yields its core to any
 * other thread runnable on it every 64 looks, so a watch does not slow a
 * rank or another process that shares its core.
 *
 * The partition is the caller's: fn(ctx, t, nt) runs once for every t in
 * [0, nt), on whichever thread, so a kernel that computes each output on one
 * t gives the same bits with any pool (or none: mpmd_pool_run(NULL, ...)
 * runs every t on the caller in turn).
 */
#ifndef MPMD_POOL_H
#define MPMD_POOL_H

#include <stddef.h>

typedef void (*mpmd_work_fn)(void *ctx, int t, int nt);
typedef struct mpmd_pool mpmd_pool;

/* Microseconds an idle worker watches for work before it sleeps, unless the
 * environment says otherwise (see above). Measured on the 2-core build
 * machine: bench_threads. */
#ifndef MPMD_POOL_SPIN_DEFAULT_US
#define MPMD_POOL_SPIN_DEFAULT_US 50
#endif

/* A pool of `threads` threads (the caller and threads - 1 workers), or NULL
 * with a message in err when a worker cannot start. threads <= 1 starts
 * none. */
mpmd_pool *mpmd_pool_new(int threads, char *err, size_t len);
/* Stops and joins the workers. NULL is allowed. */
void mpmd_pool_free(mpmd_pool *p);
/* Threads of the pool, the caller included (1 for NULL). */
int mpmd_pool_threads(const mpmd_pool *p);
/* fn(ctx, t, nt) for every t in [0, nt); returns when all have returned.
 * One run at a time per pool (a rank's kernels run in order). */
void mpmd_pool_run(mpmd_pool *p, int nt, mpmd_work_fn fn, void *ctx);
/* The watch before sleeping this process uses, in microseconds (a negative
 * value: without limit). */
double mpmd_pool_spin_us(void);

/* Cores this process may use: the CPUs of its affinity mask, at most its
 * cgroup's CPU quota rounded up (a container's cpu.max); at least 1. When
 * why is not NULL it gets what set the count, in words. */
int mpmd_cores_available(void);
int mpmd_cores_why(char *why, size_t len);

#endif
