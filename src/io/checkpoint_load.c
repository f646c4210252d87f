/* Checkpoints, read back: a file's metadata, loading a checkpoint or a
 * weights export into a step's state view (checked completely before
 * anything is written), parameters alone by name (from a file or another
 * step), and the inspection of a file (mpmd_checkpoint_read_info,
 * mpmd_checkpoint_verify). Views and saving: checkpoint.c. */
#include "mpmd_checkpoint.h"

#include "graph/graph.h"
#include "io/checkpoint_view.h"
#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "util/half.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- metadata ----------------------------------------------------------------- */

/* A decimal integer that fills the whole string, at most `max`. */
static int parse_dec(const char *s, uint64_t max, uint64_t *out) {
    if (!*s || (s[0] == '0' && s[1])) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (max - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static int parse_hex32(const char *s, uint8_t out[32]) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (h < 0) return 0;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(h << 4);
        else
            out[i / 2] |= (uint8_t)h;
    }
    return 1;
}

/* Every key of `keys` is in the metadata of an mpmd `what` ("checkpoint",
 * "weights file"). */
static mpmd_status require_keys(const mpmd_st_header *h, const char *what, const char *const *keys, size_t n,
                                mpmd_error *err) {
    for (size_t i = 0; i < n; i++)
        if (!mpmd_st_meta_find(h, keys[i]))
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: __metadata__ of an mpmd %s lacks \"%s\"",
                                  h->path, what, keys[i]);
    return MPMD_OK;
}

/* The "version" of an mpmd `what`: a number from 1 to `newest`. */
static mpmd_status read_version(const mpmd_st_header *h, const char *what, int newest, int *version,
                                mpmd_error *err) {
    uint64_t u;
    const char *s = mpmd_st_meta_find(h, "version")->value;
    if (!parse_dec(s, INT32_MAX, &u) || u < 1)
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: %s version \"%.40s\" is not a version number",
                              h->path, what, s);
    if (u > (uint64_t)newest)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: %s version %llu was written by a newer mpmd; this library reads version %d", h->path, what,
            (unsigned long long)u, newest);
    *version = (int)u;
    return MPMD_OK;
}

/* A weights export's metadata (both checksums are checked by the caller):
 * "version" and "dtype". */
static mpmd_status read_weights_meta(const mpmd_st_header *h, mpmd_checkpoint_info *info, mpmd_error *err) {
    static const char *const required[] = {"version", "dtype"};
    int version;
    mpmd_status rc = require_keys(h, "weights file", required, 2, err);
    if (rc || (rc = read_version(h, "weights file", MPMD_WEIGHTS_VERSION, &version, err))) return rc;
    const char *s = mpmd_st_meta_find(h, "dtype")->value;
    if (strcmp(s, "F32") && strcmp(s, "BF16") && strcmp(s, "F16"))
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: __metadata__ \"dtype\" of a weights file is \"%.40s\", not F32, BF16 or F16", h->path, s);
    info->version = version;
    info->weights_only = 1;
    return MPMD_OK;
}

/* Check the header checksum and read the metadata into info. An mpmd
 * checkpoint or weights export must carry every entry; a plain safetensors
 * file (no "format": "mpmd-checkpoint" or "mpmd-weights") loads as version
 * 0, step 0, with its checksums verified only if present. *has_hash tells
 * whether data_hash holds "sha256". */
static mpmd_status read_meta(const mpmd_st_header *h, mpmd_checkpoint_info *info, int *has_hash,
                             uint8_t data_hash[32], mpmd_error *err) {
    *info = MPMD_CHECKPOINT_INFO_INIT;
    info->version = 0;
    *has_hash = 0;
    const mpmd_st_meta *fmt = mpmd_st_meta_find(h, "format");
    int weights = fmt && strcmp(fmt->value, WEIGHTS_FORMAT) == 0;
    int ours = weights || (fmt && strcmp(fmt->value, FORMAT_NAME) == 0);
    mpmd_status rc = mpmd_st_check_header_sha256(h, err);
    if (rc == MPMD_ERR_INVALID) {
        if (ours)
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: __metadata__ lacks \"header_sha256\" (an mpmd %s always has it): the "
                                  "header is corrupted",
                                  h->path, weights ? "weights file" : "checkpoint");
        rc = MPMD_OK;
    }
    if (rc) return rc;
    const mpmd_st_meta *sha = mpmd_st_meta_find(h, "sha256");
    if (sha) {
        if (!parse_hex32(sha->value, data_hash))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: __metadata__ \"sha256\" is not 64 lowercase hex digits: \"%.80s\"",
                                  h->path, sha->value);
        *has_hash = 1;
    } else if (ours) {
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: __metadata__ lacks \"sha256\" (the data checksum)",
                              h->path);
    }
    if (!ours) return MPMD_OK;
    if (weights) return read_weights_meta(h, info, err);

    static const char *const required[] = {"version", "step", "seed", "rng_state"};
    if ((rc = require_keys(h, "checkpoint", required, 4, err)) ||
        (rc = read_version(h, "checkpoint", MPMD_CHECKPOINT_VERSION, &info->version, err)))
        return rc;
    uint64_t u;
    const char *s;
    s = mpmd_st_meta_find(h, "step")->value;
    if (!parse_dec(s, INT64_MAX, &u))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: __metadata__ \"step\" is \"%.40s\", not a step count", h->path, s);
    info->step = (int64_t)u;
    s = mpmd_st_meta_find(h, "seed")->value;
    if (!parse_dec(s, UINT64_MAX, &info->seed))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: __metadata__ \"seed\" is \"%.40s\", not a 64-bit seed", h->path, s);
    s = mpmd_st_meta_find(h, "rng_state")->value;
    char word[24];
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int ok = len < sizeof word && (i < 3 ? c != NULL : c == NULL);
        if (ok) {
            memcpy(word, p, len);
            word[len] = '\0';
            ok = parse_dec(word, UINT64_MAX, &info->rng_state[i]);
        }
        if (!ok)
            return mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: __metadata__ \"rng_state\" is \"%.120s\", not four comma-separated 64-bit "
                "numbers",
                h->path, s);
        p = c ? c + 1 : p + len;
    }
    const mpmd_st_meta *cfg = mpmd_st_meta_find(h, "config");
    if (cfg) snprintf(info->config, sizeof info->config, "%s", cfg->value);
    return MPMD_OK;
}

/* ---- loading ------------------------------------------------------------------ */

/* A message listing problems: items are added while they fit, the rest is
 * counted and reported as "... and N more". */
typedef struct report {
    char *buf;
    size_t cap, len;
    int omitted;
} report;

static void report_add(report *r, const char *item) {
    size_t need = strlen(item) + 2;
    if (r->len + need + 24 >= r->cap) { /* room for "; ... and 999999 more" */
        r->omitted++;
        return;
    }
    r->len += (size_t)snprintf(r->buf + r->len, r->cap - r->len, "; %s", item);
}

/* Whether the file's tensor t loads into entry e: the same shape and a
 * dtype that loads into e's (ckpt_loads_into). */
static int fits(const entry *e, const mpmd_st_tensor *t) {
    int same = ckpt_loads_into(t->dtype, e->type.dtype) && t->ndim == e->type.ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = t->dim[d] == e->type.dim[d];
    return same;
}

/* Check every tensor of the file against the view; on a mismatch fill err
 * with every problem found and return MPMD_ERR_SHAPE. */
static mpmd_status match(const state_view *v, const mpmd_st_header *h, const char *who, mpmd_error *err) {
    int missing = 0, unexpected = 0, wrong = 0;
    for (int i = 0, j = 0; i < v->n || j < h->n_tensors;) {
        int c = i == v->n ? 1 : j == h->n_tensors ? -1 : strcmp(v->e[i].name, h->tensors[j].name);
        if (c < 0)
            missing++, i++;
        else if (c > 0)
            unexpected++, j++;
        else {
            wrong += !fits(&v->e[i], &h->tensors[j]);
            i++, j++;
        }
    }
    if (!missing && !unexpected && !wrong) return MPMD_OK;
    if (!err) return MPMD_ERR_SHAPE;
    report r = {err->msg, sizeof err->msg, 0, 0};
    r.len = (size_t)snprintf(
        r.buf, r.cap,
        "%s: %.300s does not fit this model: %d missing, %d unexpected, %d with another dtype "
        "or shape (file vs model)%s",
        who, h->path, missing, unexpected, wrong,
        wrong ? ""
              : " (a strict load: mpmd_step_load_params sets the parameters the file has and leaves the "
                "rest, as "
                "PyTorch's load_state_dict(strict=False))");
    if (r.len >= r.cap) r.len = r.cap - 1;
    char item[600], a[160], b[160];
    for (int i = 0, j = 0; i < v->n || j < h->n_tensors;) {
        int c = i == v->n ? 1 : j == h->n_tensors ? -1 : strcmp(v->e[i].name, h->tensors[j].name);
        if (c < 0) {
            const entry *e = &v->e[i++];
            ckpt_type_str(ckpt_st_dtype(e->type.dtype), e->type.ndim, e->type.dim, a, sizeof a);
            snprintf(item, sizeof item, "missing \"%.200s\" %s", e->name, a);
            report_add(&r, item);
        } else if (c > 0) {
            const mpmd_st_tensor *t = &h->tensors[j++];
            ckpt_type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            snprintf(item, sizeof item, "unexpected \"%.200s\" %s", t->name, a);
            report_add(&r, item);
        } else {
            const entry *e = &v->e[i++];
            const mpmd_st_tensor *t = &h->tensors[j++];
            ckpt_type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            ckpt_type_str(ckpt_st_dtype(e->type.dtype), e->type.ndim, e->type.dim, b, sizeof b);
            if (!fits(e, t)) {
                snprintf(item, sizeof item, "\"%.200s\" %s vs %s", e->name, a, b);
                report_add(&r, item);
            }
        }
    }
    if (r.omitted) snprintf(r.buf + r.len, r.cap - r.len, "; ... and %d more", r.omitted);
    err->code = MPMD_ERR_SHAPE;
    return MPMD_ERR_SHAPE;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* A file being loaded: its header and metadata, read before the target's
 * view is built (a weights export is loaded into a view of the parameters
 * alone). */
typedef struct loading {
    const char *path;
    mpmd_st_header h;
    FILE *f;
    mpmd_checkpoint_info info;
    int has_hash;
    uint8_t want[32];
} loading;

static mpmd_status load_open(const char *path, loading *L, const char *who, mpmd_error *err) {
    memset(L, 0, sizeof *L);
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no file name", who);
    L->path = path;
    mpmd_status rc = mpmd_st_open(path, &L->h, &L->f, err);
    if (rc) return ckpt_prefixed(err, rc, who);
    rc = read_meta(&L->h, &L->info, &L->has_hash, L->want, err);
    if (rc) {
        fclose(L->f);
        mpmd_st_header_free(&L->h);
        L->f = NULL;
        return ckpt_prefixed(err, rc, who);
    }
    return MPMD_OK;
}

static void load_close(loading *L) {
    if (L->f) fclose(L->f);
    mpmd_st_header_free(&L->h);
    L->f = NULL;
}

/* Widen n 16-bit floats (little-endian bytes) to f32. */
static void widen(const uint8_t *src, size_t n, int bf16, float *dst) {
    for (size_t k = 0; k < n; k++) {
        uint16_t x = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8);
        float f = bf16 ? mpmd_bf16_to_f32(x) : mpmd_f16_to_f32(x);
        memcpy(dst + k, &f, sizeof f);
    }
}

/* Check the file against the view, read and verify its data, then copy it
 * into every holder (nothing is written before every check passed). */
/* Read and verify the file's data, then copy tensor src[i] into view entry
 * i (NULL: entry i stays as it is) and commit. */
static mpmd_status load_from(const state_view *v, loading *L, const mpmd_st_tensor *const *src_of,
                             mpmd_checkpoint_info *info_out, const char *who, mpmd_error *err);

static mpmd_status load_into(const state_view *v, loading *L, mpmd_checkpoint_info *info_out, const char *who,
                             mpmd_error *err) {
    const mpmd_st_header *h = &L->h;
    for (int j = 0; j < h->n_tensors; j++)
        if (!ckpt_loadable_dtype(h->tensors[j].dtype))
            return mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: tensor \"%.200s\" has dtype %s, which mpmd cannot load (it loads F32, "
                "BF16 and F16 into f32 values and I32 into i32 values)",
                who, L->path, h->tensors[j].name, h->tensors[j].dtype);
    mpmd_status rc = match(v, h, who, err);
    if (rc) return rc;
    const mpmd_st_tensor **src_of = malloc((size_t)(v->n + 1) * sizeof *src_of);
    if (!src_of) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < v->n; i++)
        src_of[i] = mpmd_st_find(h, v->e[i].name);
    rc = load_from(v, L, src_of, info_out, who, err);
    free(src_of);
    return rc;
}

static mpmd_status load_from(const state_view *v, loading *L, const mpmd_st_tensor *const *src_of,
                             mpmd_checkpoint_info *info_out, const char *who, mpmd_error *err) {
    const mpmd_st_header *h = &L->h;
    const char *path = L->path;
    mpmd_status rc = MPMD_OK;
    /* read and verify everything before the first byte of state changes */
    uint8_t *data = malloc(h->data_len ? (size_t)h->data_len : 1);
    if (!data)
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the %llu bytes of %s", who,
                              (unsigned long long)h->data_len, path);
    if (h->data_len && fread(data, 1, (size_t)h->data_len, L->f) != h->data_len) {
        rc = mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read the data of %s: %s", who, path,
                            ferror(L->f) ? strerror(errno) : "the file shrank while reading");
        goto done;
    }
    if (L->has_hash) {
        uint8_t got[32];
        char a[65], b[65];
        mpmd_sha256(data, (size_t)h->data_len, got);
        if (memcmp(got, L->want, 32) != 0) {
            mpmd_sha256_hex(L->want, a);
            mpmd_sha256_hex(got, b);
            rc = mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: data checksum mismatch (sha256 %s in the header, the data hashes to %s): "
                "the tensor data is corrupted",
                who, path, a, b);
            goto done;
        }
    }
    for (int i = 0; i < v->n; i++) {
        const entry *e = &v->e[i];
        const mpmd_st_tensor *t = src_of[i];
        if (!t) continue;
        uint8_t *src = data + t->begin;
        size_t bytes = (size_t)(t->end - t->begin);
        if (t->elem_size == 2) { /* BF16 or F16 into f32 (match checked it) */
            if (e->nptr < 1) continue;
            widen(src, bytes / 2, strcmp(t->dtype, "BF16") == 0, e->ptr[0]);
            for (int k = 1; k < e->nptr; k++)
                memcpy(e->ptr[k], e->ptr[0], bytes * 2);
            continue;
        }
        if (!host_is_little_endian()) /* F32 or I32: 4-byte elements */
            for (size_t k = 0; k + 4 <= bytes; k += 4) {
                uint8_t x = src[k];
                src[k] = src[k + 3], src[k + 3] = x;
                x = src[k + 1], src[k + 1] = src[k + 2], src[k + 2] = x;
            }
        for (int k = 0; k < e->nptr; k++)
            memcpy(e->ptr[k], src, bytes);
    }
    if ((rc = ckpt_view_commit(v, who, err))) goto done;
    if (info_out) *info_out = L->info;
done:
    free(data);
    return rc;
}

static mpmd_status load_held(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, const char *who,
                             mpmd_error *err) {
    loading L;
    mpmd_status rc = load_open(path, &L, who, err);
    if (rc) return rc;
    state_view v;
    rc = ckpt_step_view(st, who, L.info.weights_only, &v, err);
    if (!rc) {
        rc = load_into(&v, &L, info_out, who, err);
        ckpt_view_free(&v);
    }
    load_close(&L);
    return rc;
}

/* load_held with the step held by this thread (one thread at a time) */
static mpmd_status load(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, const char *who,
                        mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (rt_step_enter(st, who)) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = load_held(st, path, info_out, who, err);
    rt_step_leave(st);
    return rc;
}

/* ---- parameters alone, by name ------------------------------------------------- */

/* Whether parameter `name` is wanted, and the name it has in the source. */
static int source_name(const mpmd_param_load_opts *o, const char *name, char *buf, size_t len) {
    if (o && o->only && strncmp(name, o->only, strlen(o->only)) != 0) return 0;
    if (o && o->to && o->from) {
        size_t n = strlen(o->to);
        if (strncmp(name, o->to, n) != 0) return 0;
        snprintf(buf, len, "%s%s", o->from, name + n);
    } else {
        snprintf(buf, len, "%s", name);
    }
    return 1;
}

static mpmd_status load_params_held(mpmd_step *st, const char *path, const mpmd_param_load_opts *opts,
                                    mpmd_param_load_report *out, mpmd_error *err) {
    const char *who = "mpmd_step_load_params";
    mpmd_param_load_report r = {0, 0, 0};
    if (out) *out = r;
    if (!st || !path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step or no path", who);
    loading L;
    mpmd_status rc = load_open(path, &L, who, err);
    if (rc) return rc;
    state_view v;
    rc = ckpt_step_view(st, who, 1, &v, err);
    const mpmd_st_tensor **src_of = NULL;
    unsigned char *used = NULL;
    if (!rc) {
        src_of = calloc((size_t)v.n + 1, sizeof *src_of);
        used = calloc((size_t)L.h.n_tensors + 1, 1);
        if (!src_of || !used) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    }
    for (int i = 0; !rc && i < v.n; i++) {
        char name[512];
        if (!source_name(opts, v.e[i].name, name, sizeof name)) continue;
        const mpmd_st_tensor *t = mpmd_st_find(&L.h, name);
        if (!t) {
            r.missing++;
            continue;
        }
        if (!ckpt_loadable_dtype(t->dtype) || !fits(&v.e[i], t)) {
            char a[160], b[160];
            ckpt_type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            ckpt_type_str(ckpt_st_dtype(v.e[i].type.dtype), v.e[i].type.ndim, v.e[i].type.dim, b, sizeof b);
            rc = mpmd_error_set(err, MPMD_ERR_SHAPE,
                                "%s: %.300s: \"%s\" is %s in the file but parameter \"%s\" is %s", who, path,
                                name, a, v.e[i].name, b);
            break;
        }
        src_of[i] = t;
        used[t - L.h.tensors] = 1;
        r.loaded++;
    }
    for (int j = 0; !rc && j < L.h.n_tensors; j++)
        r.unexpected += !used[j];
    if (!rc) rc = load_from(&v, &L, src_of, NULL, who, err);
    if (!rc && out) *out = r;
    free(src_of), free(used);
    if (v.e) ckpt_view_free(&v);
    load_close(&L);
    return rc;
}

mpmd_status mpmd_step_load_params(mpmd_step *st, const char *path, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *out, mpmd_error *err) {
    if (st && rt_step_enter(st, "mpmd_step_load_params"))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = load_params_held(st, path, opts, out, err);
    if (st) rt_step_leave(st);
    return rc;
}

static mpmd_status copy_params_held(mpmd_step *dst, mpmd_step *src, const mpmd_param_load_opts *opts,
                                    mpmd_param_load_report *out, mpmd_error *err) {
    const char *who = "mpmd_step_copy_params";
    mpmd_param_load_report r = {0, 0, 0};
    if (out) *out = r;
    if (!dst || !src) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (!rt_whole(dst) || !rt_whole(src))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: both steps must run in this process (under MPI, save and load a file)",
                              who);
    state_view dv, sv;
    mpmd_status rc = ckpt_step_view(dst, who, 1, &dv, err);
    if (rc) return rc;
    if ((rc = ckpt_step_view(src, who, 1, &sv, err))) {
        ckpt_view_free(&dv);
        return rc;
    }
    unsigned char *used = calloc((size_t)sv.n + 1, 1);
    if (!used) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; !rc && i < dv.n; i++) {
        char name[512];
        if (!source_name(opts, dv.e[i].name, name, sizeof name)) continue;
        int lo = 0, hi = sv.n - 1, at = -1; /* both views are sorted by name */
        while (lo <= hi && at < 0) {
            int mid = (lo + hi) / 2, c = strcmp(sv.e[mid].name, name);
            if (!c)
                at = mid;
            else if (c < 0)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        if (at < 0 || sv.e[at].nptr < 1) {
            r.missing++;
            continue;
        }
        const mpmd_type *a = &sv.e[at].type, *b = &dv.e[i].type;
        if (!mpmd_type_equal(a, b)) {
            char ta[160], tb[160];
            rc = mpmd_error_set(
                err, MPMD_ERR_SHAPE, "%s: \"%s\" is %s in the source but parameter \"%s\" is %s", who, name,
                mpmd_type_str(a, ta, sizeof ta), dv.e[i].name, mpmd_type_str(b, tb, sizeof tb));
            break;
        }
        for (int k = 0; k < dv.e[i].nptr; k++)
            memcpy(dv.e[i].ptr[k], sv.e[at].ptr[0], mpmd_type_bytes(b));
        used[at] = 1;
        r.loaded++;
    }
    for (int j = 0; !rc && j < sv.n; j++)
        r.unexpected += !used[j];
    if (!rc) rc = ckpt_view_commit(&dv, who, err);
    if (!rc && out) *out = r;
    free(used);
    ckpt_view_free(&dv), ckpt_view_free(&sv);
    return rc;
}

mpmd_status mpmd_step_copy_params(mpmd_step *dst, mpmd_step *src, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *out, mpmd_error *err) {
    if (dst && rt_step_enter(dst, "mpmd_step_copy_params"))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(dst));
    if (src && src != dst && rt_step_enter(src, "mpmd_step_copy_params")) {
        if (dst) rt_step_leave(dst);
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(src));
    }
    mpmd_status rc = copy_params_held(dst, src, opts, out, err);
    if (src && src != dst) rt_step_leave(src);
    if (dst) rt_step_leave(dst);
    return rc;
}

mpmd_status mpmd_exec_load(mpmd_exec *ex, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err) {
    if (!ex) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_load: no executor");
    return load(mpmd_exec_step(ex), path, info_out, "mpmd_exec_load", err);
}

mpmd_status mpmd_step_load(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_step_load: no step");
    return load(st, path, info_out, "mpmd_step_load", err);
}

/* ---- inspection --------------------------------------------------------------- */

mpmd_status mpmd_checkpoint_read_info(const char *path, mpmd_checkpoint_info *info, mpmd_error *err) {
    const char *who = "mpmd_checkpoint_read_info";
    if (!path || !info) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: NULL path or info", who);
    mpmd_st_header h;
    FILE *f;
    mpmd_status rc = mpmd_st_open(path, &h, &f, err);
    if (rc) return ckpt_prefixed(err, rc, who);
    fclose(f);
    int has_hash;
    uint8_t want[32];
    mpmd_checkpoint_info got;
    rc = read_meta(&h, &got, &has_hash, want, err);
    mpmd_st_header_free(&h);
    if (rc) return ckpt_prefixed(err, rc, who);
    *info = got;
    return MPMD_OK;
}

mpmd_status mpmd_checkpoint_verify(const char *path, FILE *list, mpmd_error *err) {
    const char *who = "mpmd_checkpoint_verify";
    if (!path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: NULL path", who);
    mpmd_st_header h;
    FILE *f;
    mpmd_status rc = mpmd_st_open(path, &h, &f, err);
    if (rc) return ckpt_prefixed(err, rc, who);
    int has_hash;
    uint8_t want[32];
    mpmd_checkpoint_info info;
    rc = read_meta(&h, &info, &has_hash, want, err);
    if (rc) {
        ckpt_prefixed(err, rc, who);
    } else {
        enum { CHUNK = 1 << 20 };
        uint8_t *buf = malloc(CHUNK);
        mpmd_sha256_ctx c;
        mpmd_sha256_init(&c);
        uint64_t left = h.data_len;
        if (!buf) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
        while (!rc && left) {
            size_t n = left < CHUNK ? (size_t)left : CHUNK;
            if (fread(buf, 1, n, f) != n)
                rc = mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read the data of %s: %s", who, path,
                                    ferror(f) ? strerror(errno) : "the file shrank while reading");
            mpmd_sha256_update(&c, buf, n);
            left -= n;
        }
        free(buf);
        uint8_t got[32];
        mpmd_sha256_final(&c, got);
        if (!rc && has_hash && memcmp(got, want, 32) != 0) {
            char a[65], b[65];
            mpmd_sha256_hex(want, a);
            mpmd_sha256_hex(got, b);
            rc = mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: data checksum mismatch (sha256 %s in the header, the data hashes to %s): "
                "the tensor data is corrupted",
                who, path, a, b);
        }
    }
    if (!rc && list) {
        char ts[200];
        for (int i = 0; i < h.n_tensors; i++) {
            const mpmd_st_tensor *t = &h.tensors[i];
            ckpt_type_str(t->dtype, t->ndim, t->dim, ts, sizeof ts);
            fprintf(list, "%s %s %llu\n", t->name, ts, (unsigned long long)(t->end - t->begin));
        }
    }
    fclose(f);
    mpmd_st_header_free(&h);
    return rc;
}
