/* safetensors.h - the safetensors file format, read and written here.
 *
 * A safetensors file (Hugging Face's format, read by PyTorch, JAX, numpy and
 * the HF tools) is three parts:
 *
 *   8 bytes   N, the header length, an unsigned little-endian 64-bit integer
 *   N bytes   a UTF-8 JSON object: one entry per tensor,
 *               "name": {"dtype": "F32", "shape": [4, 16], "data_offsets": [b, e]}
 *             and optionally "__metadata__": {"key": "value", ...} whose
 *             values are strings only. It starts with '{' and may be padded
 *             with trailing spaces (our writer pads 8 + N to a multiple of 8).
 *   the rest  the data section: each tensor's bytes, row-major and
 *             little-endian, at [b, e) relative to the start of this section.
 *             The tensors tile the section exactly: no gaps, no overlaps, no
 *             trailing bytes (the reference implementation rejects those too).
 *
 * The reader is defensive (the file may be truncated, corrupted or hostile):
 * a strict parser of just the JSON the format needs, every number and range
 * checked before it is used, and every failure an MPMD_ERR_FORMAT or
 * MPMD_ERR_IO message naming the file, the tensor and what is wrong.
 *
 * The writer is atomic (src/io/atomic_file.h): it writes a temporary file
 * beside <path> with a name no other writer uses, flushes it to disk,
 * renames it over <path> and syncs the directory; on any failure it removes
 * the temporary file and leaves an existing <path> as it was.
 */
#ifndef MPMD_IO_SAFETENSORS_H
#define MPMD_IO_SAFETENSORS_H

#include "mpmd_error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The largest header accepted: the reference implementation's limit. */
#define MPMD_ST_MAX_HEADER ((uint64_t)100 << 20)
/* The most dimensions a tensor of a file may have. */
#define MPMD_ST_MAX_DIMS 16

/* One tensor of a parsed header. */
typedef struct mpmd_st_tensor {
    char *name;     /* decoded, UTF-8, owned by the file */
    char dtype[12]; /* the format's dtype name: "F32", "I32", "BF16", ... */
    int elem_size;  /* bytes per element of that dtype */
    int ndim;
    int64_t dim[MPMD_ST_MAX_DIMS];
    uint64_t begin, end; /* data_offsets, relative to the data section */
} mpmd_st_tensor;

/* A metadata entry: key and value decoded; the raw span of the value (the
 * characters between its quotes) in the header bytes, for checksums. */
typedef struct mpmd_st_meta {
    char *key, *value;
    size_t raw_begin, raw_end;
} mpmd_st_meta;

/* A parsed header. */
typedef struct mpmd_st_header {
    char *path;        /* the file's name, for messages (owned) */
    uint64_t n;        /* header length N */
    uint64_t data_len; /* bytes of the data section */
    uint8_t *raw;      /* the 8 + N bytes of the prefix and header (owned) */
    int n_tensors;
    mpmd_st_tensor *tensors; /* sorted by name (strcmp, i.e. code-point order) */
    int n_meta;
    mpmd_st_meta *meta; /* in file order */
} mpmd_st_header;

/* Bytes per element of a dtype name of the format, 0 if unknown. */
int mpmd_st_dtype_size(const char *dtype);

/* Parse and check a header: `raw` holds the 8-byte prefix and the N header
 * bytes (8 + N bytes), `data_len` is the size of the data section that
 * follows in the file. Checks the JSON, the entries, the dtype sizes against
 * the shapes and the offsets against each other and against data_len. `path`
 * names the file in messages. On success `out` owns a copy of raw (free with
 * mpmd_st_header_free); on failure `out` is left empty. */
mpmd_status mpmd_st_parse(const uint8_t *raw, uint64_t raw_len, uint64_t data_len, const char *path,
                          mpmd_st_header *out, mpmd_error *err);

/* Open `path`, read and check its header (mpmd_st_parse). On success the
 * file is left open in *f, positioned at the start of the data section (the
 * caller closes it). */
mpmd_status mpmd_st_open(const char *path, mpmd_st_header *out, FILE **f, mpmd_error *err);

void mpmd_st_header_free(mpmd_st_header *h);

/* The tensor named `name` (binary search), or NULL. */
const mpmd_st_tensor *mpmd_st_find(const mpmd_st_header *h, const char *name);
/* The metadata entry `key`, or NULL. */
const mpmd_st_meta *mpmd_st_meta_find(const mpmd_st_header *h, const char *key);

/* ---- writing ------------------------------------------------------------- */

/* A tensor to write: `data` holds numel * elem_size bytes in host order
 * (2-, 4- and 8-byte elements are written little-endian on any host). */
typedef struct mpmd_st_out {
    const char *name;
    const char *dtype; /* a dtype name of the format */
    int ndim;
    const int64_t *dim;
    const void *data;
} mpmd_st_out;

typedef struct mpmd_st_kv {
    const char *key, *value;
} mpmd_st_kv;

/* Write a safetensors file atomically (see the top of this file): tensors
 * sorted by name, data contiguous in that order, metadata in the order
 * given. With `checksums`, two metadata entries are added:
 *   "sha256"         SHA-256 of the data section, 64 lowercase hex digits;
 *   "header_sha256"  SHA-256 of the 8-byte prefix and the N header bytes in
 *                    which this entry's own 64 digits read as '0's.
 * Names must be unique and non-empty; keys must not repeat. */
mpmd_status mpmd_st_write(const char *path, int n, const mpmd_st_out *tensors, int n_meta,
                          const mpmd_st_kv *meta, int checksums, mpmd_error *err);

/* ---- checksums ----------------------------------------------------------- */

/* Verify "header_sha256" of a parsed header (see mpmd_st_write). Returns
 * MPMD_OK when it matches, MPMD_ERR_FORMAT (with a message) when it does
 * not or is malformed, and MPMD_ERR_INVALID (no message) when absent. */
mpmd_status mpmd_st_check_header_sha256(const mpmd_st_header *h, mpmd_error *err);

/* The header checksum: SHA-256 of the len bytes at raw (prefix and header)
 * with the span [b, e) read as '0's. */
void mpmd_st_header_hash(const uint8_t *raw, size_t len, size_t b, size_t e, uint8_t out[32]);

#endif
