/* The safetensors format, reading: a strict header parser and the checks
 * of the tensor table (src/io/safetensors.h describes the format and the
 * guarantees; safetensors_write.c writes it).
 *
 * The parser accepts exactly the JSON a safetensors header needs: one
 * object of objects, strings (with every JSON escape), non-negative integers
 * and arrays of them. Anything else (floats, negative numbers, nested
 * values where none belong, duplicate keys, unknown fields, invalid UTF-8,
 * NUL characters, bytes after the closing brace other than whitespace) is a
 * format error that says where it is.
 */
#include "io/safetensors.h"

#include "mpmd.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- dtypes ----------------------------------------------------------------- */

static const struct {
    const char *name;
    int size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},
};

int mpmd_st_dtype_size(const char *dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) return dtypes[i].size;
    return 0;
}

/* ---- the header parser ------------------------------------------------------ */

typedef struct parser {
    const uint8_t *s; /* the 8 + N raw bytes; JSON starts at 8 */
    size_t len, pos;
    const char *path;
    mpmd_error *err;
    mpmd_st_header *h;
    int tensor_cap, meta_cap;
} parser;

/* Report a problem at the current position (bytes counted from the start of
 * the JSON header, as a hex dump of the file shows them minus 8). */
static mpmd_status perr(parser *p, const char *what) {
    return mpmd_error_set(p->err, MPMD_ERR_FORMAT, "%s: safetensors header: %s at byte %zu of the header",
                          p->path, what, p->pos >= 8 ? p->pos - 8 : 0);
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past
 * U+10FFFF. Returns the offset of the first bad byte, or len. */
static size_t utf8_check(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0)
            n = 1, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            n = 2, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (len - i <= (size_t)n) return i;
        for (int k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += (size_t)n + 1;
    }
    return len;
}

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(parser *p) {
    while (p->pos < p->len && is_ws(p->s[p->pos]))
        p->pos++;
}

/* What is at the current position, for messages, into b[24]. */
static const char *describe(const parser *p, char *b) {
    if (p->pos >= p->len) return "the end of the header";
    uint8_t c = p->s[p->pos];
    if (c >= 0x20 && c < 0x7F)
        snprintf(b, 24, "'%c'", c);
    else
        snprintf(b, 24, "byte 0x%02x", c);
    return b;
}

static mpmd_status expect(parser *p, uint8_t c, const char *context) {
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == c) {
        p->pos++;
        return MPMD_OK;
    }
    char what[256], found[24];
    snprintf(what, sizeof what, "expected '%c' %s, found %s", c, context, describe(p, found));
    return perr(p, what);
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u16(parser *p, uint32_t *out) {
    if (p->len - p->pos < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + (size_t)i]);
        if (h < 0) return 0;
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

/* A JSON string at the current position (after whitespace), decoded into a
 * new NUL-terminated UTF-8 string. raw_begin/raw_end get the span between
 * the quotes. The input is already known to be valid UTF-8. */
static mpmd_status parse_string(parser *p, const char *context, char **out, size_t *raw_begin,
                                size_t *raw_end) {
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != '"') {
        char what[256], found[24];
        snprintf(what, sizeof what, "expected a string (%s), found %s", context, describe(p, found));
        return perr(p, what);
    }
    p->pos++;
    size_t start = p->pos, end = start;
    while (end < p->len && p->s[end] != '"')
        end += p->s[end] == '\\' && end + 1 < p->len ? 2 : 1;
    if (end >= p->len) return perr(p, "unterminated string");
    /* decoding never grows a string: an escape of k bytes yields <= k bytes */
    char *d = malloc(end - start + 1);
    if (!d) return mpmd_error_set(p->err, MPMD_ERR_NOMEM, "%s: out of memory reading the header", p->path);
    size_t k = 0;
    while (p->pos < end) {
        uint8_t c = p->s[p->pos];
        if (c < 0x20) {
            free(d);
            return perr(p, "control character inside a string (must be escaped)");
        }
        if (c != '\\') {
            d[k++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        uint8_t e = p->s[p->pos++];
        uint32_t cp;
        switch (e) {
        case '"': d[k++] = '"'; continue;
        case '\\': d[k++] = '\\'; continue;
        case '/': d[k++] = '/'; continue;
        case 'b': d[k++] = '\b'; continue;
        case 'f': d[k++] = '\f'; continue;
        case 'n': d[k++] = '\n'; continue;
        case 'r': d[k++] = '\r'; continue;
        case 't': d[k++] = '\t'; continue;
        case 'u':
            if (!read_u16(p, &cp) || p->pos > end) {
                free(d);
                return perr(p, "bad \\u escape (four hex digits expected)");
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(d);
                return perr(p, "lone low surrogate in a \\u escape");
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (end - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(d);
                    return perr(p, "high surrogate in a \\u escape without its low half");
                }
                p->pos += 2;
                if (!read_u16(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    free(d);
                    return perr(p, "high surrogate in a \\u escape without its low half");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) {
                free(d);
                return perr(p, "NUL character (\\u0000) in a string");
            }
            if (cp < 0x80) {
                d[k++] = (char)cp;
            } else if (cp < 0x800) {
                d[k++] = (char)(0xC0 | cp >> 6);
                d[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                d[k++] = (char)(0xE0 | cp >> 12);
                d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
                d[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                d[k++] = (char)(0xF0 | cp >> 18);
                d[k++] = (char)(0x80 | (cp >> 12 & 0x3F));
                d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
                d[k++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        default:
            p->pos--;
            free(d);
            return perr(p, "unknown escape in a string");
        }
    }
    d[k] = '\0';
    p->pos = end + 1;
    if (raw_begin) *raw_begin = start;
    if (raw_end) *raw_end = end;
    *out = d;
    return MPMD_OK;
}

/* A non-negative JSON integer up to INT64_MAX (the format's usize; larger
 * values cannot describe a real file). */
static mpmd_status parse_uint(parser *p, const char *context, uint64_t *out) {
    skip_ws(p);
    char what[256], found[24];
    if (p->pos < p->len && p->s[p->pos] == '-') {
        snprintf(what, sizeof what, "negative number in %s", context);
        return perr(p, what);
    }
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') {
        snprintf(what, sizeof what, "expected a non-negative integer in %s, found %s", context,
                 describe(p, found));
        return perr(p, what);
    }
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        uint64_t digit = (uint64_t)(p->s[p->pos] - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10) {
            snprintf(what, sizeof what, "integer too large in %s", context);
            return perr(p, what);
        }
        v = v * 10 + digit;
        p->pos++;
    }
    if (p->s[start] == '0' && p->pos - start > 1) {
        p->pos = start;
        snprintf(what, sizeof what, "integer with a leading zero in %s", context);
        return perr(p, what);
    }
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        snprintf(what, sizeof what, "expected an integer in %s, found a fraction or exponent", context);
        return perr(p, what);
    }
    *out = v;
    return MPMD_OK;
}

/* [n0, n1, ...] into vals (at most cap); *count gets how many. */
static mpmd_status parse_uint_array(parser *p, const char *context, uint64_t *vals, int cap, int *count) {
    mpmd_status rc = expect(p, '[', context);
    if (rc) return rc;
    int n = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        *count = 0;
        return MPMD_OK;
    }
    for (;;) {
        if (n == cap) {
            char what[256];
            snprintf(what, sizeof what, "too many entries in %s (at most %d)", context, cap);
            return perr(p, what);
        }
        if ((rc = parse_uint(p, context, &vals[n]))) return rc;
        n++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if ((rc = expect(p, ']', context))) return rc;
        break;
    }
    *count = n;
    return MPMD_OK;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} for tensor t. */
static mpmd_status parse_tensor(parser *p, mpmd_st_tensor *t) {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "after the name of tensor \"%.120s\"", t->name);
    mpmd_status rc = expect(p, '{', ctx);
    if (rc) return rc;
    int have_dtype = 0, have_shape = 0, have_off = 0;
    skip_ws(p);
    int empty = p->pos < p->len && p->s[p->pos] == '}';
    if (empty) p->pos++;
    while (!empty) {
        char *key = NULL;
        snprintf(ctx, sizeof ctx, "a field name of tensor \"%.120s\"", t->name);
        if ((rc = parse_string(p, ctx, &key, NULL, NULL))) return rc;
        snprintf(ctx, sizeof ctx, "after field \"%.40s\" of tensor \"%.120s\"", key, t->name);
        if ((rc = expect(p, ':', ctx))) {
            free(key);
            return rc;
        }
        char what[300];
        int dup = 0;
        if (strcmp(key, "dtype") == 0) {
            dup = have_dtype++;
            char *v = NULL;
            if (!dup) {
                snprintf(ctx, sizeof ctx, "the dtype of tensor \"%.120s\"", t->name);
                if ((rc = parse_string(p, ctx, &v, NULL, NULL))) {
                    free(key);
                    return rc;
                }
                t->elem_size = mpmd_st_dtype_size(v);
                if (!t->elem_size || strlen(v) >= sizeof t->dtype) {
                    snprintf(what, sizeof what, "tensor \"%.120s\" has unknown dtype \"%.40s\"", t->name, v);
                    free(v);
                    free(key);
                    return perr(p, what);
                }
                strcpy(t->dtype, v);
                free(v);
            }
        } else if (strcmp(key, "shape") == 0) {
            dup = have_shape++;
            if (!dup) {
                uint64_t dims[MPMD_ST_MAX_DIMS];
                snprintf(ctx, sizeof ctx, "the shape of tensor \"%.120s\"", t->name);
                if ((rc = parse_uint_array(p, ctx, dims, MPMD_ST_MAX_DIMS, &t->ndim))) {
                    free(key);
                    return rc;
                }
                for (int i = 0; i < t->ndim; i++)
                    t->dim[i] = (int64_t)dims[i];
            }
        } else if (strcmp(key, "data_offsets") == 0) {
            dup = have_off++;
            if (!dup) {
                uint64_t off[2];
                int n;
                snprintf(ctx, sizeof ctx, "the data_offsets of tensor \"%.120s\"", t->name);
                if ((rc = parse_uint_array(p, ctx, off, 2, &n))) {
                    free(key);
                    return rc;
                }
                if (n != 2) {
                    snprintf(what, sizeof what,
                             "data_offsets of tensor \"%.120s\" has %d entries, expected 2", t->name, n);
                    free(key);
                    return perr(p, what);
                }
                t->begin = off[0];
                t->end = off[1];
            }
        } else {
            snprintf(what, sizeof what, "tensor \"%.120s\" has an unknown field \"%.40s\"", t->name, key);
            free(key);
            return perr(p, what);
        }
        if (dup) {
            snprintf(what, sizeof what, "tensor \"%.120s\" has field \"%.40s\" twice", t->name, key);
            free(key);
            return perr(p, what);
        }
        free(key);
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        snprintf(ctx, sizeof ctx, "to close tensor \"%.120s\"", t->name);
        if ((rc = expect(p, '}', ctx))) return rc;
        break;
    }
    if (!have_dtype || !have_shape || !have_off) {
        char what[300];
        snprintf(what, sizeof what, "tensor \"%.120s\" lacks its \"%s\" field", t->name,
                 !have_dtype   ? "dtype"
                 : !have_shape ? "shape"
                               : "data_offsets");
        return perr(p, what);
    }
    return MPMD_OK;
}

static mpmd_status parse_metadata(parser *p) {
    mpmd_status rc = expect(p, '{', "after \"__metadata__\"");
    if (rc) return rc;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return MPMD_OK;
    }
    mpmd_st_header *h = p->h;
    for (;;) {
        if (h->n_meta == p->meta_cap) {
            int cap = p->meta_cap ? 2 * p->meta_cap : 8;
            mpmd_st_meta *m = realloc(h->meta, (size_t)cap * sizeof *m);
            if (!m)
                return mpmd_error_set(p->err, MPMD_ERR_NOMEM, "%s: out of memory reading the header",
                                      p->path);
            h->meta = m;
            p->meta_cap = cap;
        }
        mpmd_st_meta *m = &h->meta[h->n_meta];
        m->key = m->value = NULL;
        if ((rc = parse_string(p, "a __metadata__ key", &m->key, NULL, NULL))) return rc;
        h->n_meta++;
        char ctx[200];
        snprintf(ctx, sizeof ctx, "after __metadata__ key \"%.120s\"", m->key);
        if ((rc = expect(p, ':', ctx))) return rc;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] != '"') {
            char what[300];
            snprintf(what, sizeof what,
                     "__metadata__ value of \"%.120s\" is not a string (the format allows strings only)",
                     m->key);
            return perr(p, what);
        }
        snprintf(ctx, sizeof ctx, "the __metadata__ value of \"%.120s\"", m->key);
        if ((rc = parse_string(p, ctx, &m->value, &m->raw_begin, &m->raw_end))) return rc;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        return expect(p, '}', "to close __metadata__");
    }
}

static int tensor_by_name(const void *a, const void *b) {
    return strcmp(((const mpmd_st_tensor *)a)->name, ((const mpmd_st_tensor *)b)->name);
}

static int tensor_by_offset(const void *a, const void *b) {
    const mpmd_st_tensor *x = *(const mpmd_st_tensor *const *)a, *y = *(const mpmd_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int meta_by_key(const void *a, const void *b) {
    return strcmp((*(const mpmd_st_meta *const *)a)->key, (*(const mpmd_st_meta *const *)b)->key);
}

static void shape_str(const mpmd_st_tensor *t, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "%s[", t->dtype);
    for (int i = 0; i < t->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)t->dim[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* The checks that need the whole table: unique names and keys, each
 * tensor's byte count, and offsets that tile the data section. */
static mpmd_status check_table(mpmd_st_header *h, const char *path, mpmd_error *err) {
    char sh[160];
    if (h->n_tensors > 1) qsort(h->tensors, (size_t)h->n_tensors, sizeof *h->tensors, tensor_by_name);
    for (int i = 1; i < h->n_tensors; i++)
        if (strcmp(h->tensors[i - 1].name, h->tensors[i].name) == 0)
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: safetensors header: tensor \"%.200s\" appears twice", path,
                                  h->tensors[i].name);
    if (h->n_meta > 1) {
        const mpmd_st_meta **m = malloc((size_t)h->n_meta * sizeof *m);
        if (!m) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory reading the header", path);
        for (int i = 0; i < h->n_meta; i++)
            m[i] = &h->meta[i];
        qsort(m, (size_t)h->n_meta, sizeof *m, meta_by_key);
        for (int i = 1; i < h->n_meta; i++)
            if (strcmp(m[i - 1]->key, m[i]->key) == 0) {
                mpmd_status rc = mpmd_error_set(
                    err, MPMD_ERR_FORMAT, "%s: safetensors header: __metadata__ key \"%.200s\" appears twice",
                    path, m[i]->key);
                free(m);
                return rc;
            }
        free(m);
    }
    for (int i = 0; i < h->n_tensors; i++) {
        const mpmd_st_tensor *t = &h->tensors[i];
        shape_str(t, sh, sizeof sh);
        uint64_t bytes = (uint64_t)t->elem_size;
        int overflow = 0;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t dim = (uint64_t)t->dim[d];
            if (dim && bytes > (uint64_t)INT64_MAX / dim)
                overflow = 1;
            else
                bytes *= dim;
        }
        if (overflow)
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: tensor \"%.200s\": shape %s is too large for any file", path, t->name,
                                  sh);
        if (t->end < t->begin)
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: tensor \"%.200s\": data_offsets [%llu, %llu] end before they begin",
                                  path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->end - t->begin != bytes)
            return mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: tensor \"%.200s\": data_offsets [%llu, %llu] hold %llu bytes but %s needs %llu", path,
                t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)(t->end - t->begin), sh, (unsigned long long)bytes);
    }
    /* tile [0, data_len): sorted by offset, each begins where the last ended */
    const mpmd_st_tensor **order = malloc((size_t)(h->n_tensors ? h->n_tensors : 1) * sizeof *order);
    if (!order) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory reading the header", path);
    for (int i = 0; i < h->n_tensors; i++)
        order[i] = &h->tensors[i];
    qsort(order, (size_t)h->n_tensors, sizeof *order, tensor_by_offset);
    uint64_t at = 0;
    const mpmd_st_tensor *prev = NULL;
    mpmd_status rc = MPMD_OK;
    for (int i = 0; i < h->n_tensors && !rc; i++) {
        const mpmd_st_tensor *t = order[i];
        if (t->begin < at)
            rc =
                mpmd_error_set(err, MPMD_ERR_FORMAT,
                               "%s: tensor \"%.200s\" (data_offsets [%llu, %llu]) overlaps tensor \"%.200s\" "
                               "(which ends at %llu)",
                               path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                               prev->name, (unsigned long long)at);
        else if (t->begin > at)
            rc = mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %llu unused bytes in the data section before tensor \"%.200s\" (data_offsets "
                "[%llu, %llu]); the format has no gaps",
                path, (unsigned long long)(t->begin - at), t->name, (unsigned long long)t->begin,
                (unsigned long long)t->end);
        at = t->end;
        prev = t;
    }
    free(order);
    if (rc) return rc;
    if (at > h->data_len)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: truncated: the header describes %llu bytes of tensor data but only %llu follow "
            "it (tensor \"%.200s\" ends at %llu)",
            path, (unsigned long long)at, (unsigned long long)h->data_len, prev ? prev->name : "",
            (unsigned long long)at);
    if (at < h->data_len)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: %llu bytes follow the last tensor's data (the header describes %llu bytes of "
            "data, the file holds %llu)",
            path, (unsigned long long)(h->data_len - at), (unsigned long long)at,
            (unsigned long long)h->data_len);
    return MPMD_OK;
}

void mpmd_st_header_free(mpmd_st_header *h) {
    if (!h) return;
    for (int i = 0; i < h->n_tensors; i++)
        free(h->tensors[i].name);
    for (int i = 0; i < h->n_meta; i++) {
        free(h->meta[i].key);
        free(h->meta[i].value);
    }
    free(h->tensors);
    free(h->meta);
    free(h->raw);
    free(h->path);
    memset(h, 0, sizeof *h);
}

static mpmd_status parse_top(parser *p) {
    mpmd_st_header *h = p->h;
    mpmd_status rc;
    if (p->len <= 8 || p->s[8] != '{') {
        p->pos = 8;
        char what[128], found[24];
        snprintf(what, sizeof what, "the header must begin with '{', found %s", describe(p, found));
        return perr(p, what);
    }
    p->pos = 9;
    int have_meta = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            char *key = NULL;
            if ((rc = parse_string(p, "a tensor name", &key, NULL, NULL))) return rc;
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (have_meta++) return perr(p, "\"__metadata__\" appears twice");
                if ((rc = expect(p, ':', "after \"__metadata__\""))) return rc;
                if ((rc = parse_metadata(p))) return rc;
            } else {
                if (h->n_tensors == p->tensor_cap) {
                    int cap = p->tensor_cap ? 2 * p->tensor_cap : 16;
                    mpmd_st_tensor *t = realloc(h->tensors, (size_t)cap * sizeof *t);
                    if (!t) {
                        free(key);
                        return mpmd_error_set(p->err, MPMD_ERR_NOMEM, "%s: out of memory reading the header",
                                              p->path);
                    }
                    h->tensors = t;
                    p->tensor_cap = cap;
                }
                mpmd_st_tensor *t = &h->tensors[h->n_tensors++];
                memset(t, 0, sizeof *t);
                t->name = key;
                char ctx[200];
                snprintf(ctx, sizeof ctx, "after tensor name \"%.120s\"", key);
                if ((rc = expect(p, ':', ctx))) return rc;
                if ((rc = parse_tensor(p, t))) return rc;
            }
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if ((rc = expect(p, '}', "after a header entry (or ',' before the next)"))) return rc;
            break;
        }
    }
    skip_ws(p);
    if (p->pos != p->len)
        return perr(p, "unexpected bytes after the header's closing '}' (only space padding may follow)");
    return MPMD_OK;
}

mpmd_status mpmd_st_parse(const uint8_t *raw, uint64_t raw_len, uint64_t data_len, const char *path,
                          mpmd_st_header *out, mpmd_error *err) {
    memset(out, 0, sizeof *out);
    if (raw_len < 10)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: safetensors header of %llu bytes is too short to be a JSON object", path,
                              (unsigned long long)(raw_len < 8 ? 0 : raw_len - 8));
    if (raw_len - 8 > MPMD_ST_MAX_HEADER)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: safetensors header of %llu bytes is beyond the format's limit", path,
                              (unsigned long long)(raw_len - 8));
    size_t bad = utf8_check(raw + 8, (size_t)raw_len - 8);
    if (bad != raw_len - 8)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: safetensors header is not valid UTF-8 (byte 0x%02x at byte %zu of the header): "
            "not a safetensors file, or a corrupted one",
            path, raw[8 + bad], bad);
    out->path = malloc(strlen(path) + 1);
    out->raw = malloc((size_t)raw_len);
    if (!out->path || !out->raw) {
        mpmd_st_header_free(out);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory reading the header", path);
    }
    strcpy(out->path, path);
    memcpy(out->raw, raw, (size_t)raw_len);
    out->n = raw_len - 8;
    out->data_len = data_len;
    parser p = {out->raw, (size_t)raw_len, 8, path, err, out, 0, 0};
    mpmd_status rc = parse_top(&p);
    if (!rc) rc = check_table(out, path, err);
    if (rc) mpmd_st_header_free(out);
    return rc;
}

mpmd_status mpmd_st_open(const char *path, mpmd_st_header *out, FILE **fp, mpmd_error *err) {
    memset(out, 0, sizeof *out);
    *fp = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mpmd_error_set(err, MPMD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_IO, "cannot read %s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t pre[8];
    if (size < 8 || fread(pre, 1, 8, f) != 8) {
        fclose(f);
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: %llu bytes, too short for a safetensors file (it starts with an 8-byte header "
            "length)",
            path, (unsigned long long)size);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | pre[i];
    if (n > MPMD_ST_MAX_HEADER) {
        fclose(f);
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: header length %llu is beyond the format's limit of %llu bytes: not a safetensors "
            "file, or a corrupted one",
            path, (unsigned long long)n, (unsigned long long)MPMD_ST_MAX_HEADER);
    }
    if (n > size - 8) {
        fclose(f);
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: truncated: the header length is %llu bytes but the file has only %llu bytes "
            "after it",
            path, (unsigned long long)n, (unsigned long long)(size - 8));
    }
    uint8_t *raw = malloc((size_t)n + 8);
    if (!raw) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                              (unsigned long long)n);
    }
    memcpy(raw, pre, 8);
    if (fread(raw + 8, 1, (size_t)n, f) != n) {
        const char *why = ferror(f) ? strerror(errno) : "the file shrank while reading";
        mpmd_status rc = mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read the %llu-byte header: %s", path,
                                        (unsigned long long)n, why);
        free(raw);
        fclose(f);
        return rc;
    }
    mpmd_status rc = mpmd_st_parse(raw, n + 8, size - 8 - n, path, out, err);
    free(raw);
    if (rc) {
        fclose(f);
        return rc;
    }
    *fp = f;
    return MPMD_OK;
}

const mpmd_st_tensor *mpmd_st_find(const mpmd_st_header *h, const char *name) {
    int lo = 0, hi = h->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(h->tensors[mid].name, name);
        if (c == 0) return &h->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const mpmd_st_meta *mpmd_st_meta_find(const mpmd_st_header *h, const char *key) {
    for (int i = 0; i < h->n_meta; i++)
        if (strcmp(h->meta[i].key, key) == 0) return &h->meta[i];
    return NULL;
}

void mpmd_st_header_hash(const uint8_t *raw, size_t len, size_t b, size_t e, uint8_t out[32]) {
    static const char zeros[64] = "0000000000000000000000000000000000000000000000000000000000000000";
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    mpmd_sha256_update(&c, raw, b);
    for (size_t k = b; k < e; k += 64)
        mpmd_sha256_update(&c, zeros, e - k < 64 ? e - k : 64);
    mpmd_sha256_update(&c, raw + e, len - e);
    mpmd_sha256_final(&c, out);
}

mpmd_status mpmd_st_check_header_sha256(const mpmd_st_header *h, mpmd_error *err) {
    const mpmd_st_meta *m = mpmd_st_meta_find(h, "header_sha256");
    if (!m) return MPMD_ERR_INVALID;
    int ok = m->raw_end - m->raw_begin == 64;
    for (size_t i = m->raw_begin; ok && i < m->raw_end; i++)
        ok = (h->raw[i] >= '0' && h->raw[i] <= '9') || (h->raw[i] >= 'a' && h->raw[i] <= 'f');
    if (!ok)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: __metadata__ \"header_sha256\" is not 64 lowercase hex digits: the header is "
            "corrupted",
            h->path);
    uint8_t d[32];
    char hex[65];
    mpmd_st_header_hash(h->raw, (size_t)h->n + 8, m->raw_begin, m->raw_end, d);
    mpmd_sha256_hex(d, hex);
    if (memcmp(hex, h->raw + m->raw_begin, 64) != 0)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: header checksum mismatch (header_sha256 %.64s, the header hashes to %s): the "
            "header was changed or corrupted after it was written",
            h->path, m->value, hex);
    return MPMD_OK;
}
