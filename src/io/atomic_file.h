/* atomic_file.h - files written whole or not at all: checkpoints, weights
 * exports (src/io/safetensors_write.c) and the public mpmd_file_* calls
 * (include/mpmd.h) that programs use for their own outputs.
 *
 * The bytes go to a temporary file beside the destination,
 * "<dest>.tmp.<pid>.<16 hex digits>", created with O_EXCL: a name that
 * exists is never reused (a new one is drawn), and the digits come from
 * getrandom(2) (or /dev/urandom), so two writers of one path - two threads,
 * two processes, two containers whose processes share a pid - never write
 * one inode. The commit checks every step: fsync of the file, close, rename
 * over the destination, fsync of the directory. On a failure before the
 * rename the temporary file is removed and the destination left as it was;
 * a failed directory sync is reported too (the new file is in place but
 * may not survive a crash).
 *
 * The destination is the path itself, or, when the path is a symbolic link,
 * what it names (the link stays a link). A path that exists
 * and is neither a regular file nor a directory (a device such as
 * /dev/null, /dev/stdout, a pipe) cannot be replaced by a rename, and a
 * rename must never replace a device node: such a path is written in place
 * when the caller allows it, else refused. A directory is left to the
 * rename, which refuses it.
 */
#ifndef MPMD_IO_ATOMIC_FILE_H
#define MPMD_IO_ATOMIC_FILE_H

#include "mpmd_error.h"

typedef struct mpmd_atomic_file {
    char *dest; /* what the rename replaces (owned) */
    char *tmp;  /* the temporary file (owned); NULL when writing in place */
    int fd;     /* open for writing; -1 once closed */
} mpmd_atomic_file;

/* Create the temporary file for `path` (or open a device in place when
 * `in_place_ok`). Messages: "cannot write PATH: ...". */
mpmd_status mpmd_atomic_open(const char *path, int in_place_ok, mpmd_atomic_file *a, mpmd_error *err);

/* fsync, close, rename, fsync the directory (see above); frees a's names
 * whatever happens. */
mpmd_status mpmd_atomic_commit(mpmd_atomic_file *a, mpmd_error *err);

/* Close and remove the temporary file; frees a's names. */
void mpmd_atomic_abort(mpmd_atomic_file *a);

/* Write all n bytes to fd (retrying short writes and EINTR): 0, or -1 with
 * errno set. */
int mpmd_write_all(int fd, const void *data, size_t n);

#endif
