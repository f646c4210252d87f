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

/* The tensors and keys as given: names, dtypes, shapes, data, no two
 * tensors or keys alike; slots[] sorted by name with their offsets. */
static mpmd_status check_outputs(const char *path, int n, const mpmd_st_out *tensors, int n_meta,
                                 const mpmd_st_kv *meta, int checksums, out_slot *slots, mpmd_error *err) {
    for (int i = 0; i < n; i++) {
        const mpmd_st_out *t = &tensors[i];
        slots[i].t = t;
        slots[i].elem = t->dtype ? mpmd_st_dtype_size(t->dtype) : 0;
        if (!t->name || !*t->name)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor %d has no name", path,
                                  i);
        if (!slots[i].elem)
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "safetensors write %s: tensor \"%s\" has unknown dtype %s", path, t->name,
                                  t->dtype ? t->dtype : "(null)");
        if (t->ndim < 0 || t->ndim > MPMD_ST_MAX_DIMS || (t->ndim && !t->dim))
            return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor \"%s\" has %d dims",
                                  path, t->name, t->ndim);
        uint64_t bytes = (uint64_t)slots[i].elem;
        for (int d = 0; d < t->ndim; d++) {
            if (t->dim[d] < 0)
                return mpmd_error_set(err, MPMD_ERR_INVALID,
                                      "safetensors write %s: tensor \"%s\" has dim %lld", path, t->name,
                                      (long long)t->dim[d]);
            bytes *= (uint64_t)t->dim[d];
        }
        if (bytes && !t->data)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: tensor \"%s\" has no data",
                                  path, t->name);
        slots[i].bytes = bytes;
    }
    qsort(slots, (size_t)n, sizeof *slots, slot_by_name);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i && strcmp(slots[i - 1].t->name, slots[i].t->name) == 0)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: two tensors are named \"%s\"",
                                  path, slots[i].t->name);
        slots[i].begin = at;
        at += slots[i].bytes;
    }
    for (int i = 0; i < n_meta; i++) {
        int clash = !meta[i].key || !meta[i].value ||
                    (checksums && (!strcmp(meta[i].key, "sha256") || !strcmp(meta[i].key, "header_sha256")));
        for (int j = 0; j < i && !clash; j++)
            clash = !strcmp(meta[i].key, meta[j].key);
        if (clash)
            return mpmd_error_set(
                err, MPMD_ERR_INVALID,
                "safetensors write %s: metadata key \"%s\" is missing, repeated or reserved", path,
                meta[i].key ? meta[i].key : "(null)");
    }
    return MPMD_OK;
}

/* The header into b: its length, the metadata with placeholder checksums
 * of 64 '0's (fixed length; where they go in *data_hash_at and
 * *header_hash_at), the tensors, padded so the data starts 8-aligned. */
static void build_header(strbuf *b, int n, const out_slot *slots, int n_meta, const mpmd_st_kv *meta,
                         int checksums, size_t *data_hash_at, size_t *header_hash_at) {
    static const char zeros[] = "0000000000000000000000000000000000000000000000000000000000000000";
    sb_put(b, "\0\0\0\0\0\0\0\0", 8);
    sb_str(b, "{");
    if (n_meta || checksums) {
        sb_str(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(b, ",");
            sb_json(b, meta[i].key);
            sb_str(b, ":");
            sb_json(b, meta[i].value);
        }
        if (checksums) {
            sb_str(b, n_meta ? ",\"sha256\":\"" : "\"sha256\":\"");
            *data_hash_at = b->len;
            sb_str(b, zeros);
            sb_str(b, "\",\"header_sha256\":\"");
            *header_hash_at = b->len;
            sb_str(b, zeros);
            sb_str(b, "\"");
        }
        sb_str(b, "}");
    }
    for (int i = 0; i < n; i++) {
        const mpmd_st_out *t = slots[i].t;
        if (i || n_meta || checksums) sb_str(b, ",");
        sb_json(b, t->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, t->dtype);
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_str(b, ",");
            sb_u64(b, (uint64_t)t->dim[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, slots[i].begin);
        sb_str(b, ",");
        sb_u64(b, slots[i].begin + slots[i].bytes);
        sb_str(b, "]}");
    }
    sb_str(b, "}");
    while (b->len % 8)
        sb_str(b, " ");
    if (b->oom) return;
    uint64_t hn = b->len - 8;
    for (int i = 0; i < 8; i++)
        b->s[i] = (char)(hn >> (8 * i) & 0xFF);
}

/* Write the header, then the data (hashed on the way), then the header
 * again with the checksums filled in. Nonzero: a write failed (errno). */
static int write_file(int fd, strbuf *b, int n, const out_slot *slots, int checksums, size_t data_hash_at,
                      size_t header_hash_at) {
    int fail = mpmd_write_all(fd, b->s, b->len) != 0;
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    for (int i = 0; i < n && !fail; i++)
        fail = write_tensor(fd, slots[i].t->data, slots[i].bytes, slots[i].elem, &c) != 0;
    if (fail || !checksums) return fail;
    uint8_t d[32];
    char hex[65];
    mpmd_sha256_final(&c, d);
    mpmd_sha256_hex(d, hex);
    memcpy(b->s + data_hash_at, hex, 64);
    mpmd_st_header_hash((const uint8_t *)b->s, b->len, header_hash_at, header_hash_at + 64, d);
    mpmd_sha256_hex(d, hex);
    memcpy(b->s + header_hash_at, hex, 64);
    size_t done = 0;
    while (done < b->len) {
        ssize_t w = pwrite(fd, b->s + done, b->len - done, (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return 1;
        }
        done += (size_t)w;
    }
    return 0;
}

mpmd_status mpmd_st_write(const char *path, int n, const mpmd_st_out *tensors, int n_meta,
                          const mpmd_st_kv *meta, int checksums, mpmd_error *err) {
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write: no file name");
    if (n < 0 || n_meta < 0 || (n && !tensors) || (n_meta && !meta))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "safetensors write %s: bad tensor or metadata count",
                              path);
    out_slot *slots = malloc((size_t)(n ? n : 1) * sizeof *slots);
    if (!slots) return mpmd_error_set(err, MPMD_ERR_NOMEM, "safetensors write %s: out of memory", path);
    mpmd_status rc = check_outputs(path, n, tensors, n_meta, meta, checksums, slots, err);
    strbuf b = {0};
    size_t data_hash_at = 0, header_hash_at = 0;
    if (!rc) build_header(&b, n, slots, n_meta, meta, checksums, &data_hash_at, &header_hash_at);
    if (!rc && b.oom) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "safetensors write %s: out of memory", path);
    /* to a temporary file renamed over path once complete (src/io/atomic_file.h) */
    mpmd_atomic_file af;
    if (!rc && !(rc = mpmd_atomic_open(path, 0, &af, err))) {
        if (write_file(af.fd, &b, n, slots, checksums, data_hash_at, header_hash_at)) {
            int e = errno;
            rc = mpmd_error_set(err, MPMD_ERR_IO,
                                "cannot write %s: writing the temporary file %s: %s (%s was left as it was)",
                                af.dest, af.tmp, strerror(e), af.dest);
            mpmd_atomic_abort(&af);
        } else {
            rc = mpmd_atomic_commit(&af, err);
        }
    }
    free(b.s);
    free(slots);
    return rc;
}
