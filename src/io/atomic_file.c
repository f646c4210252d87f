/* Files written whole or not at all (src/io/atomic_file.h), and the public
 * mpmd_file_* calls built on them (include/mpmd.h). */
#if !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* realpath */
#endif
#include "io/atomic_file.h"

#include "mpmd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* 64 random bits for a temporary name. Without a source of randomness the
 * clock, the pid and a counter stand in: O_EXCL still keeps two writers
 * apart, they only retry more often. */
static uint64_t random64(void) {
    uint64_t r = 0;
#if defined(__linux__)
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
#endif
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, &r, sizeof r);
        close(fd);
        if (n == (ssize_t)sizeof r) return r;
    }
    static atomic_uint_least64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return mix64((uint64_t)ts.tv_nsec ^ mix64((uint64_t)ts.tv_sec) ^ mix64((uint64_t)getpid() << 20) ^
                 mix64(atomic_fetch_add(&counter, 1) + (uint64_t)(uintptr_t)&r));
}

int mpmd_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding path, so that the rename itself is durable.
 * File systems that cannot sync a directory (EINVAL) are fine. */
static int sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = dup_str(".");
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
        }
    }
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc != 0 && (errno == EINVAL || errno == EROFS)) rc = 0;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

static void release(mpmd_atomic_file *a) {
    free(a->dest);
    free(a->tmp);
    a->dest = a->tmp = NULL;
    a->fd = -1;
}

/* A failure while the temporary file is being written: remove it, name the
 * step and the cause. */
static mpmd_status fail_tmp(mpmd_atomic_file *a, const char *step, int e, mpmd_error *err) {
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
    mpmd_status rc;
    if (a->tmp) {
        unlink(a->tmp);
        rc = mpmd_error_set(err, MPMD_ERR_IO,
                            "cannot write %s: %s the temporary file %s: %s (%s was left as it was)", a->dest,
                            step, a->tmp, strerror(e), a->dest);
    } else {
        rc = mpmd_error_set(err, MPMD_ERR_IO, "cannot write %s: %s: %s", a->dest, step, strerror(e));
    }
    release(a);
    return rc;
}

mpmd_status mpmd_atomic_open(const char *path, int in_place_ok, mpmd_atomic_file *a, mpmd_error *err) {
    a->dest = a->tmp = NULL;
    a->fd = -1;
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "cannot write a file without a name");
    struct stat ls, sb;
    int is_link = lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode);
    int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
        /* a device or a pipe: a rename would put a plain file in its place */
        if (!in_place_ok)
            return mpmd_error_set(
                err, MPMD_ERR_IO,
                "cannot write %s: it is not a regular file (a device, a pipe or a socket); give "
                "the name of a file",
                path);
        if (!(a->dest = dup_str(path)))
            return mpmd_error_set(err, MPMD_ERR_NOMEM, "cannot write %s: out of memory", path);
        a->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (a->fd < 0) {
            int e = errno;
            release(a);
            return mpmd_error_set(err, MPMD_ERR_IO, "cannot write %s: %s", path, strerror(e));
        }
        return MPMD_OK;
    }
    /* a link: replace what it names and keep the link (a directory it names
     * fails at the rename, as a directory named directly does) */
    char *real = is_link && exists ? realpath(path, NULL) : NULL;
    a->dest = real ? real : dup_str(path);
    size_t tl = a->dest ? strlen(a->dest) + 64 : 0;
    a->tmp = a->dest ? malloc(tl) : NULL;
    if (!a->dest || !a->tmp) {
        release(a);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "cannot write %s: out of memory", path);
    }
    int e = 0;
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(a->tmp, tl, "%s.tmp.%ld.%016llx", a->dest, (long)getpid(), (unsigned long long)random64());
        a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (a->fd >= 0) return MPMD_OK;
        if ((e = errno) != EEXIST && e != EINTR) break;
    }
    mpmd_status rc = mpmd_error_set(
        err, MPMD_ERR_IO, "cannot write %s: creating the temporary file %s: %s (%s was left as it was)",
        a->dest, a->tmp, strerror(e), a->dest);
    release(a);
    return rc;
}

mpmd_status mpmd_atomic_commit(mpmd_atomic_file *a, mpmd_error *err) {
    if (a->fd >= 0) {
        /* in place (a device): nothing to rename, and many devices cannot sync */
        if (fsync(a->fd) != 0 && (a->tmp || (errno != EINVAL && errno != EROFS && errno != ENOTSUP)))
            return fail_tmp(a, "flushing", errno, err);
        int fd = a->fd;
        a->fd = -1;
        if (close(fd) != 0) return fail_tmp(a, "closing", errno, err);
    }
    if (!a->tmp) {
        release(a);
        return MPMD_OK;
    }
    if (rename(a->tmp, a->dest) != 0) {
        int e = errno;
        mpmd_status rc = mpmd_error_set(err, MPMD_ERR_IO,
                                        "cannot write %s: renaming %s over it: %s (%s was left as it was)",
                                        a->dest, a->tmp, strerror(e), a->dest);
        unlink(a->tmp);
        release(a);
        return rc;
    }
    mpmd_status rc = MPMD_OK;
    if (sync_dir(a->dest) != 0)
        rc = mpmd_error_set(
            err, MPMD_ERR_IO,
            "%s was written, but syncing its directory failed: %s (the new file may not survive a "
            "crash)",
            a->dest, strerror(errno));
    release(a);
    return rc;
}

void mpmd_atomic_abort(mpmd_atomic_file *a) {
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
    if (a->tmp) unlink(a->tmp);
    release(a);
}

/* ---- the public calls: a FILE over the temporary file ----------------------- */

struct mpmd_file {
    mpmd_atomic_file a;
    FILE *f;
};

mpmd_status mpmd_file_create(const char *path, mpmd_file **out, mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_file_create: no place for the file (out is NULL)");
    *out = NULL;
    mpmd_file *file = calloc(1, sizeof *file);
    if (!file)
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "cannot write %s: out of memory", path ? path : "(null)");
    mpmd_status rc = mpmd_atomic_open(path, 1, &file->a, err);
    if (rc) {
        free(file);
        return rc;
    }
    if (!(file->f = fdopen(file->a.fd, "w"))) {
        rc = fail_tmp(&file->a, "opening", errno, err);
        free(file);
        return rc;
    }
    *out = file;
    return MPMD_OK;
}

FILE *mpmd_file_stream(mpmd_file *file) { return file ? file->f : NULL; }

mpmd_status mpmd_file_commit(mpmd_file *file, mpmd_error *err) {
    if (!file) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_file_commit: no file (NULL)");
    mpmd_atomic_file at = file->a, *a = &at;
    FILE *f = file->f;
    free(file);
    /* a write that failed earlier (a full disk) left the stream's error flag
     * set; errno may no longer say why, the flush usually repeats it */
    errno = 0;
    int flushed = fflush(f) == 0, e = errno;
    if (!flushed || ferror(f)) {
        fclose(f);
        a->fd = -1;
        return fail_tmp(a, "writing", e ? e : EIO, err);
    }
    if (fsync(fileno(f)) != 0 && (a->tmp || (errno != EINVAL && errno != EROFS && errno != ENOTSUP))) {
        e = errno;
        fclose(f);
        a->fd = -1;
        return fail_tmp(a, "flushing", e, err);
    }
    a->fd = -1;
    if (fclose(f) != 0) return fail_tmp(a, "closing", errno, err);
    return mpmd_atomic_commit(a, err);
}

void mpmd_file_discard(mpmd_file *file) {
    if (!file) return;
    if (file->f) fclose(file->f);
    file->a.fd = -1;
    mpmd_atomic_abort(&file->a);
    free(file);
}
