/* program.h - the first call of mpmd's example programs and benchmarks.
 *
 * program_start(name, argv):
 *
 * - When OpenBLAS runs generic kernels on a CPU with AVX2 or AVX-512, it
 *   prints mpmd_blas_warning() once, to stderr.
 *
 * Nothing here concerns threads: the library's kernel threads sleep when
 * idle whatever the environment says (src/util/pool.h), so a program that
 * links libmpmd needs no setting of its own.
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
    (void)argv;
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
