/* The safetensors format, writing: the header as compact JSON (tensors in
 * name order, data contiguous in that order, padded so the data section
 * starts 8-aligned), the data little-endian, both checksums, and the atomic
 * temporary-file-and-rename protocol (src/io/safetensors.h).
 */
#include "io/safetensors.h"

#include "io/atomic_file.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(strbuf *b, uint64_t v) {
    char t[24];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)n);
}

/* A JSON string: quotes, backslashes and control characters escaped, other
 * bytes (UTF-8) as they are. */
static void sb_json(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Write a tensor's bytes little-endian (swapping through a small buffer on a
 * big-endian host) and hash what was written. */
static int write_tensor(int fd, const void *data, uint64_t bytes, int elem, mpmd_sha256_ctx *c) {
    if (host_is_little_endian() || elem == 1) {
        mpmd_sha256_update(c, data, (size_t)bytes);
        return mpmd_write_all(fd, data, (size_t)bytes);
    }
    uint8_t buf[4096];
    const uint8_t *p = data;
    while (bytes) {
        size_t n = bytes < sizeof buf ? (size_t)bytes : sizeof buf;
        n -= n % (size_t)elem;
        for (size_t i = 0; i < n; i += (size_t)elem)
            for (int k = 0; k < elem; k++)
                buf[i + (size_t)k] = p[i + (size_t)(elem - 1 - k)];
        mpmd_sha256_update(c, buf, n);
        if (mpmd_write_all(fd, buf, n)) return -1;
        p += n;
        bytes -= n;
    }
    return 0;
}

typedef struct {
    const mpmd_st_out *t;
    uint64_t bytes, begin;
    int elem;
} out_slot;

static int slot_by_name(const void *a, const void *b) {
    return strcmp(((const out_slot *)a)->t->name, ((const out_slot *)b)->t->name);
}

mpmd_status mpmd_st_write(const char *path, int n, const mpmd_st_out *tensors, int n_meta,
                          const mpmd_st_kv *meta, int checksums, mpmd_error *err) {
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write: no file name");
    if (n < 0 || n_meta < 0 || (n && !tensors) || (n_meta && !meta))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: bad tensor or metadata count",
                              path);
    out_slot *slots = malloc((size_t)(n ? n : 1) * sizeof *slots);
    if (!slots) return mpmd_error_set(err, MPMD_ERR_NOMEM, "safetensors write %s: out of memory", path);
    mpmd_status rc = MPMD_OK;
    for (int i = 0; i < n && !rc; i++) {
        const mpmd_st_out *t = &tensors[i];
        slots[i].t = t;
        slots[i].elem = t->dtype ? mpmd_st_dtype_size(t->dtype) : 0;
        if (!t->name || !*t->name)
            rc =
                mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor %d has no name", path, i);
        else if (!slots[i].elem)
            rc = mpmd_error_set(err, MPMD_ERR_INVALID,
                                "safetensors write %s: tensor \"%s\" has unknown dtype %s", path, t->name,
                                t->dtype ? t->dtype : "(null)");
        else if (t->ndim < 0 || t->ndim > MPMD_ST_MAX_DIMS || (t->ndim && !t->dim))
            rc = mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor \"%s\" has %d dims",
                                path, t->name, t->ndim);
        uint64_t bytes = (uint64_t)slots[i].elem;
        for (int d = 0; !rc && d < t->ndim; d++) {
            if (t->dim[d] < 0)
                rc = mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor \"%s\" has dim %lld",
                                    path, t->name, (long long)t->dim[d]);
            bytes *= (uint64_t)t->dim[d];
        }
        if (!rc && bytes && !t->data)
            rc = mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor \"%s\" has no data",
                                path, t->name);
        slots[i].bytes = bytes;
    }
    if (rc) {
        free(slots);
        return rc;
    }
    qsort(slots, (size_t)n, sizeof *slots, slot_by_name);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i && strcmp(slots[i - 1].t->name, slots[i].t->name) == 0) {
            rc = mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: two tensors are named \"%s\"",
                                path, slots[i].t->name);
            free(slots);
            return rc;
        }
        slots[i].begin = at;
        at += slots[i].bytes;
    }
    for (int i = 0; i < n_meta; i++) {
        int clash = !meta[i].key || !meta[i].value ||
                    (checksums && (!strcmp(meta[i].key, "sha256") || !strcmp(meta[i].key, "header_sha256")));
        for (int j = 0; j < i && !clash; j++)
            clash = !strcmp(meta[i].key, meta[j].key);
        if (clash) {
            free(slots);
            return mpmd_error_set(
                err, MPMD_ERR_INVALID,
                "safetensors write %s: metadata key \"%s\" is missing, repeated or reserved", path,
                meta[i].key ? meta[i].key : "(null)");
        }
    }

    /* the header, with placeholder checksums of 64 '0's (fixed length) */
    static const char zeros[] = "0000000000000000000000000000000000000000000000000000000000000000";
    strbuf b = {0};
    size_t data_hash_at = 0, header_hash_at = 0;
    sb_put(&b, "\0\0\0\0\0\0\0\0", 8);
    sb_str(&b, "{");
    if (n_meta || checksums) {
        sb_str(&b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&b, ",");
            sb_json(&b, meta[i].key);
            sb_str(&b, ":");
            sb_json(&b, meta[i].value);
        }
        if (checksums) {
            sb_str(&b, n_meta ? ",\"sha256\":\"" : "\"sha256\":\"");
            data_hash_at = b.len;
            sb_str(&b, zeros);
            sb_str(&b, "\",\"header_sha256\":\"");
            header_hash_at = b.len;
            sb_str(&b, zeros);
            sb_str(&b, "\"");
        }
        sb_str(&b, "}");
    }
    for (int i = 0; i < n; i++) {
        const mpmd_st_out *t = slots[i].t;
        if (i || n_meta || checksums) sb_str(&b, ",");
        sb_json(&b, t->name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, t->dtype);
        sb_str(&b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_str(&b, ",");
            sb_u64(&b, (uint64_t)t->dim[d]);
        }
        sb_str(&b, "],\"data_offsets\":[");
        sb_u64(&b, slots[i].begin);
        sb_str(&b, ",");
        sb_u64(&b, slots[i].begin + slots[i].bytes);
        sb_str(&b, "]}");
    }
    sb_str(&b, "}");
    while (b.len % 8)
        sb_str(&b, " "); /* the data section starts 8-aligned */
    if (b.oom) {
        free(b.s);
        free(slots);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "safetensors write %s: out of memory", path);
    }
    uint64_t hn = b.len - 8;
    for (int i = 0; i < 8; i++)
        b.s[i] = (char)(hn >> (8 * i) & 0xFF);

    /* write: the header, then the data (hashed on the way), then the header
     * again with the checksums filled in; to a temporary file renamed over
     * path once complete (src/io/atomic_file.h) */
    mpmd_atomic_file af;
    rc = mpmd_atomic_open(path, 0, &af, err);
    if (rc) {
        free(b.s);
        free(slots);
        return rc;
    }
    const int fd = af.fd;
    int fail = mpmd_write_all(fd, b.s, b.len) != 0;
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    for (int i = 0; i < n && !fail; i++)
        fail = write_tensor(fd, slots[i].t->data, slots[i].bytes, slots[i].elem, &c) != 0;
    if (!fail && checksums) {
        uint8_t d[32];
        char hex[65];
        mpmd_sha256_final(&c, d);
        mpmd_sha256_hex(d, hex);
        memcpy(b.s + data_hash_at, hex, 64);
        mpmd_st_header_hash((const uint8_t *)b.s, b.len, header_hash_at, header_hash_at + 64, d);
        mpmd_sha256_hex(d, hex);
        memcpy(b.s + header_hash_at, hex, 64);
        size_t done = 0;
        while (!fail && done < b.len) {
            ssize_t w = pwrite(fd, b.s + done, b.len - done, (off_t)done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                if (w == 0) errno = EIO;
                fail = 1;
            } else {
                done += (size_t)w;
            }
        }
    }
    if (fail) {
        int e = errno;
        rc = mpmd_error_set(err, MPMD_ERR_IO,
                            "cannot write %s: writing the temporary file %s: %s (%s was left as it was)",
                            af.dest, af.tmp, strerror(e), af.dest);
        mpmd_atomic_abort(&af);
    } else {
        rc = mpmd_atomic_commit(&af, err);
    }
    free(b.s);
    free(slots);
    return rc;
}
