/* program.h - the first call of mpmd's example programs and benchmarks.
 *
 * program_start(name, argv):
 *
 * - OpenMP's worker threads spin between parallel regions by default
 *   (libgomp: about 300,000 rounds before they sleep). On a core another
 *   process holds, a spinning worker takes the time slices the rank's own
 *   work needs: measured on 2 cores with one kept busy, a GPT step on two
 *   threads took 3.7 times as long as on one. libgomp reads its wait policy
 *   once, when it is loaded, so a program cannot change it for itself: when
 *   OMP_WAIT_POLICY is not set, program_start sets it to passive (workers
 *   sleep at once) and starts the program again with the same arguments.
 *   A program that sets OMP_WAIT_POLICY itself keeps its choice.
 * - When OpenBLAS runs generic kernels on a CPU with AVX2 or AVX-512, it
 *   prints mpmd_blas_warning() once, to stderr.
 *
 * Call it first in main, before MPI or any threads start. A library user's
 * program can do the same, or export OMP_WAIT_POLICY=passive.
 *
 * program_end(name, status): main's exit status once stdout is flushed and
 * closed. Output that could not be written (a full disk, `gpt > /dev/full`)
 * is a failure like any other: a message on stderr and status 1 (or the
 * failure status main had already), never 0 with the results lost.
 */
#ifndef MPMD_PROGRAM_H
#define MPMD_PROGRAM_H

#include <errno.h>
#include <mpmd.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

static inline void program_start(const char *name, char **argv) {
    if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
        execv("/proc/self/exe", argv); /* returns only when it could not: go on as we are */
    }
    const char *w = mpmd_blas_warning();
    if (w) fprintf(stderr, "%s: warning: %s\n", name, w);
}

static inline int program_end(const char *name, int status) {
    errno = 0;
    int bad = fflush(stdout) != 0,
        e = errno; /* a failed write earlier leaves the error flag; the flush repeats it */
    bad |= ferror(stdout) != 0;
    if (fclose(stdout) != 0 && !bad) bad = 1, e = errno;
    if (!bad) return status;
    fprintf(stderr, "%s: writing to stdout failed%s%s\n", name, e ? ": " : "", e ? strerror(e) : "");
    return status ? status : 1;
}

#endif
