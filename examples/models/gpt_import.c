/* GPT-2 weights in Hugging Face's safetensors layout into a gpt_model's
 * parameters (see gpt_import.h for the name map and why nothing is
 * transposed). The file is read with the library's safetensors reader
 * (src/io/safetensors.h: a defensive parser whose every offset is checked
 * against the file's size), one tensor at a time. */
#include "gpt_import.h"
#include "hf_tensors.h"

#include "io/safetensors.h"
#include "util/half.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Our parameter names and Hugging Face's, outside the blocks and inside
 * block <i> (as "h.<i>." + the second column). */
static const char *const top_names[][2] = {
    {"wte/embedding", "wte.weight"},
    {"wpe/embedding", "wpe.weight"},
    {"ln_f/scale", "ln_f.weight"},
    {"ln_f/bias", "ln_f.bias"},
};
static const char *const block_names[][2] = {
    {"ln_0/scale", "ln_1.weight"},
    {"ln_0/bias", "ln_1.bias"},
    {"attn/qkv/kernel", "attn.c_attn.weight"},
    {"attn/qkv/bias", "attn.c_attn.bias"},
    {"attn/out/kernel", "attn.c_proj.weight"},
    {"attn/out/bias", "attn.c_proj.bias"},
    {"ln_1/scale", "ln_2.weight"},
    {"ln_1/bias", "ln_2.bias"},
    {"mlp/dense_0/kernel", "mlp.c_fc.weight"},
    {"mlp/dense_0/bias", "mlp.c_fc.bias"},
    {"mlp/dense_1/kernel", "mlp.c_proj.weight"},
    {"mlp/dense_1/bias", "mlp.c_proj.bias"},
};
/* A bound on the blocks of a file (GPT-2 xl has 48; gpt --layers is at most
 * 1000): a name like h.9999999.x must not make a model of that size. */
#define GPT_HF_MAX_LAYERS 1000
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* The file's name for our parameter `name` into out; 0 when there is none
 * (lm_head/kernel: GPT-2's head is wte). */
static int hf_name(const char *prefix, const char *name, char *out, size_t len) {
    for (int k = 0; k < COUNT(top_names); k++)
        if (!strcmp(name, top_names[k][0])) {
            snprintf(out, len, "%s%s", prefix, top_names[k][1]);
            return 1;
        }
    int block = -1, at = 0;
    if (sscanf(name, "block_%d/%n", &block, &at) != 1 || at == 0 || block < 0) return 0;
    for (int k = 0; k < COUNT(block_names); k++)
        if (!strcmp(name + at, block_names[k][0])) {
            snprintf(out, len, "%sh.%d.%s", prefix, block, block_names[k][1]);
            return 1;
        }
    return 0;
}

/* The helpers both importers use (hf_tensors.h). */
void gpt_hf_shape_str(int ndim, const int64_t *dim, char *buf, size_t len) {

    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)dim[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

int gpt_hf_loadable(const mpmd_st_tensor *t) {

    return !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16");
}

mpmd_status gpt_hf_read_f32(FILE *f, long long data_start, const mpmd_st_tensor *t, int64_t n, uint8_t *raw,
                            float *out, const char *where, mpmd_error *err) {

    size_t bytes = (size_t)n * (size_t)t->elem_size;
    if (fseeko(f, (off_t)(data_start + (long long)t->begin), SEEK_SET) != 0 ||
        fread(raw, 1, bytes, f) != bytes)
        return mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read tensor %s: %s", where, t->name,
                              ferror(f) ? strerror(errno) : "the file shrank while reading");
    if (t->elem_size == 4) { /* F32, little-endian on any host */
        for (int64_t k = 0; k < n; k++) {
            const uint8_t *b = raw + 4 * k;
            out[k] = mpmd_bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                   (uint32_t)b[3] << 24);
        }
        return MPMD_OK;
    }
    int bf16 = !strcmp(t->dtype, "BF16");
    for (int64_t k = 0; k < n; k++) {
        uint16_t x = (uint16_t)(raw[2 * k] | raw[2 * k + 1] << 8);
        out[k] = bf16 ? mpmd_bf16_to_f32(x) : mpmd_f16_to_f32(x);
    }
    return MPMD_OK;
}

/* The block number of a name "h.<i>.<rest>" (after the prefix), or -1. */
static int block_of(const char *name) {
    if (strncmp(name, "h.", 2) != 0) return -1;
    const char *p = name + 2;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7)
        v = v * 10 + (*p++ - '0'), digits++;
    return digits && *p == '.' ? (int)v : -1;
}

/* Parse the header and fill info; on success the file stays open in *f at
 * the start of the data section. */
static mpmd_status hf_open(const char *path, mpmd_st_header *h, FILE **f, gpt_hf_info *info,
                           mpmd_error *err) {
    memset(info, 0, sizeof *info);
    mpmd_status rc = mpmd_st_open(path, h, f, err);
    if (rc) return rc;
    const char *const prefixes[] = {"", "transformer."};
    const mpmd_st_tensor *wte = NULL, *wpe = NULL;
    char name[64];
    for (int k = 0; k < 2 && !wte; k++) {
        snprintf(name, sizeof name, "%swte.weight", prefixes[k]);
        if ((wte = mpmd_st_find(h, name))) snprintf(info->prefix, sizeof info->prefix, "%s", prefixes[k]);
    }
    char ws[64], ps[64];
    if (!wte)
        rc = mpmd_error_set(err, MPMD_ERR_FORMAT,
                            "%s: no tensor wte.weight (or transformer.wte.weight): not GPT-2 weights in "
                            "Hugging Face's layout",
                            path);
    else if (wte->ndim != 2 || wte->dim[0] < 1 || wte->dim[1] < 1) {
        gpt_hf_shape_str(wte->ndim, wte->dim, ws, sizeof ws);
        rc =
            mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: %s is %s; a token embedding [vocab, width] is expected",
                           path, wte->name, ws);
    }
    if (!rc) {
        snprintf(name, sizeof name, "%swpe.weight", info->prefix);
        wpe = mpmd_st_find(h, name);
        if (!wpe)
            rc = mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: tensor %s (the position embedding) is missing",
                                path, name);
        else if (wpe->ndim != 2 || wpe->dim[1] != wte->dim[1] || wpe->dim[0] < 1) {
            gpt_hf_shape_str(wte->ndim, wte->dim, ws, sizeof ws);
            gpt_hf_shape_str(wpe->ndim, wpe->dim, ps, sizeof ps);
            rc = mpmd_error_set(err, MPMD_ERR_SHAPE,
                                "%s: %s is %s but %s is %s; [positions, %lld] is expected (the width of wte)",
                                path, wpe->name, ps, wte->name, ws, (long long)wte->dim[1]);
        }
    }
    if (rc) {
        fclose(*f);
        *f = NULL;
        mpmd_st_header_free(h);
        return rc;
    }
    info->vocab = wte->dim[0];
    info->width = wte->dim[1];
    info->positions = wpe->dim[0];
    size_t pl = strlen(info->prefix);
    for (int k = 0; k < h->n_tensors; k++) {
        const char *n = h->tensors[k].name;
        if (strncmp(n, info->prefix, pl) != 0) continue;
        int b = block_of(n + pl);
        if (b + 1 > info->layers) info->layers = b + 1;
    }
    info->has_lm_head = mpmd_st_find(h, "lm_head.weight") != NULL;
    return MPMD_OK;
}

mpmd_status gpt_hf_inspect(const char *path, gpt_hf_info *info, mpmd_error *err) {
    mpmd_st_header h;
    FILE *f;
    mpmd_status rc = hf_open(path, &h, &f, info, err);
    if (rc) return rc;
    fclose(f);
    mpmd_st_header_free(&h);
    if (info->layers < 1)
        return mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: no transformer blocks (tensors %sh.0.*)", path,
                              info->prefix);
    if (info->layers > GPT_HF_MAX_LAYERS)
        return mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: names a block %sh.%d; at most %d blocks are read",
                              path, info->prefix, info->layers - 1, GPT_HF_MAX_LAYERS);
    return MPMD_OK;
}

mpmd_status gpt_hf_configure(const char *path, const gpt_hf_info *info, const gpt_hf_given *given,
                             gpt_config *c, mpmd_error *err) {
    const mpmd_status bad = MPMD_ERR_SHAPE;
    const char *p = info->prefix;
    if (given->layers && c->layers != info->layers) {
        if (c->layers > info->layers)
            return mpmd_error_set(err, bad,
                                  "%s: %d layers asked, but the file's blocks are %sh.0 .. %sh.%d (tensor "
                                  "%sh.%d.ln_1.weight is missing)",
                                  path, c->layers, p, p, info->layers - 1, p, info->layers);
        return mpmd_error_set(err, bad,
                              "%s: %d layers asked, but the file has %d blocks (%sh.0 .. %sh.%d): its tensor "
                              "%sh.%d.ln_1.weight has no layer to go to",
                              path, c->layers, info->layers, p, p, info->layers - 1, p, c->layers);
    }
    int64_t vocab = given->vocab ? c->vocab : info->vocab, width = given->width ? c->width : info->width;
    if (vocab != info->vocab || width != info->width)
        return mpmd_error_set(
            err, bad,
            "%s: tensor %swte.weight is [%lld, %lld]; vocab %lld and width %lld need [%lld, "
            "%lld]",
            path, p, (long long)info->vocab, (long long)info->width, (long long)vocab, (long long)width,
            (long long)vocab, (long long)width);
    if (given->seq && c->seq > info->positions)
        return mpmd_error_set(err, bad,
                              "%s: tensor %swpe.weight is [%lld, %lld]; seq %lld needs at least [%lld, %lld] "
                              "(its first seq rows)",
                              path, p, (long long)info->positions, (long long)info->width, (long long)c->seq,
                              (long long)c->seq, (long long)info->width);
    if (!given->heads) {
        if (info->width % 64 != 0)
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "%s: width %lld is not a multiple of GPT-2's head size 64, so the number "
                                  "of heads cannot be inferred; give it",
                                  path, (long long)info->width);
        c->heads = (int)(info->width / 64);
    }
    c->layers = info->layers;
    c->vocab = info->vocab;
    c->width = info->width;
    if (c->seq > info->positions) c->seq = info->positions;
    c->tie_embeddings = 1;
    return MPMD_OK;
}

/* Read the first `n` elements of tensor t as f32 into out (data section at
 * data_start); `raw` holds n * t->elem_size bytes. */
/* Check every parameter's tensor (found, loadable, shaped); src[i] gets it.
 * A parameter split over the model axis (tensor parallelism) is compared
 * whole, as mpmd_step_write takes it. */
static mpmd_status plan_import(const char *path, const mpmd_st_header *h, const gpt_hf_info *info,
                               const gpt_model *m, const mpmd_st_tensor **src, mpmd_error *err) {
    char hf[96], want[128], got[128];
    for (int i = 0; i < m->n_params; i++) {
        const char *name = mpmd_value_name(m->g, m->params[i]);
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        if (!name || !hf_name(info->prefix, name, hf, sizeof hf))
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "%s: the model's parameter %s has no tensor in GPT-2's layout", path,
                                  name ? name : "(unnamed)");
        const mpmd_st_tensor *s = src[i] = mpmd_st_find(h, hf);
        if (!s)
            return mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: tensor %s (for the model's %s) is missing", path,
                                  hf, name);
        if (!gpt_hf_loadable(s))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: tensor %s has dtype %s; F32, F16 or BF16 is expected", path, hf,
                                  s->dtype);
        /* the position table may be longer than seq: its first seq rows */
        int rows_ok = !strcmp(name, "wpe/embedding") ? s->ndim == 2 && s->dim[0] >= t.dim[0]
                                                     : s->ndim == t.ndim && s->dim[0] == t.dim[0];
        int same = rows_ok;
        for (int d = 1; same && d < t.ndim; d++)
            same = s->dim[d] == t.dim[d];
        if (!same) {
            gpt_hf_shape_str(s->ndim, s->dim, got, sizeof got);
            gpt_hf_shape_str(t.ndim, t.dim, want, sizeof want);
            return mpmd_error_set(
                err, MPMD_ERR_SHAPE, "%s: tensor %s is %s; the model's %s needs %s%s", path, hf, got, name,
                want, !strcmp(name, "wpe/embedding") ? " (or more rows: the first are taken)" : "");
        }
    }
    return MPMD_OK;
}

/* A file's lm_head.weight must be wte.weight (GPT-2 ties them): compare
 * their f32 values. */
static mpmd_status check_head(const char *path, FILE *f, long long data_start, const mpmd_st_header *h,
                              const gpt_hf_info *info, mpmd_error *err) {
    char name[64];
    snprintf(name, sizeof name, "%swte.weight", info->prefix);
    const mpmd_st_tensor *wte = mpmd_st_find(h, name), *head = mpmd_st_find(h, "lm_head.weight");
    char ws[64], hs[64];
    gpt_hf_shape_str(wte->ndim, wte->dim, ws, sizeof ws);
    gpt_hf_shape_str(head->ndim, head->dim, hs, sizeof hs);
    if (head->ndim != 2 || head->dim[0] != wte->dim[0] || head->dim[1] != wte->dim[1] ||
        !gpt_hf_loadable(head))
        return mpmd_error_set(
            err, MPMD_ERR_SHAPE,
            "%s: tensor lm_head.weight is %s %s, %s is %s %s: the head cannot be tied to the "
            "embedding (the model ties them, as GPT-2 does)",
            path, head->dtype, hs, name, wte->dtype, ws);
    int64_t n = wte->dim[0] * wte->dim[1];
    uint8_t *raw = malloc((size_t)n * 4);
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    mpmd_status rc = MPMD_OK;
    if (!raw || !a || !b)
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory comparing lm_head.weight with %s", path,
                            name);
    if (!rc) rc = gpt_hf_read_f32(f, data_start, wte, n, raw, a, path, err);
    if (!rc) rc = gpt_hf_read_f32(f, data_start, head, n, raw, b, path, err);
    if (!rc && memcmp(a, b, (size_t)n * sizeof *a) != 0)
        rc = mpmd_error_set(err, MPMD_ERR_SHAPE,
                            "%s: tensor lm_head.weight differs from %s: an untied head, which cannot be "
                            "tied to the embedding (the model ties them, as GPT-2 does)",
                            path, name);
    free(raw), free(a), free(b);
    return rc;
}

mpmd_status gpt_hf_import(const char *path, const gpt_model *m, mpmd_step *st, mpmd_error *err) {
    if (!m->cfg.tie_embeddings)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: GPT-2 ties its LM head to wte; build the model with tie_embeddings", path);
    mpmd_st_header h;
    FILE *f;
    gpt_hf_info info;
    mpmd_status rc = hf_open(path, &h, &f, &info, err);
    if (rc) return rc;
    const mpmd_st_tensor **src = calloc((size_t)m->n_params + 1, sizeof *src);
    uint8_t *raw = NULL;
    float *val = NULL;
    long long data_start = (long long)ftello(f);
    if (!src) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", path);
    if (!rc) rc = plan_import(path, &h, &info, m, src, err);
    if (!rc && info.has_lm_head) rc = check_head(path, f, data_start, &h, &info, err);
    /* every check passed: read and write one parameter at a time */
    int64_t most = 0;
    for (int i = 0; !rc && i < m->n_params; i++) {
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        if (mpmd_type_numel(&t) > most) most = mpmd_type_numel(&t);
    }
    if (!rc && (!(raw = malloc((size_t)most * 4 + 1)) || !(val = malloc((size_t)most * sizeof *val + 1))))
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for a tensor of %lld elements", path,
                            (long long)most);
    for (int i = 0; !rc && i < m->n_params; i++) {
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        int64_t n = mpmd_type_numel(&t); /* wpe: the first seq rows, which lie first in the row-major data */
        rc = gpt_hf_read_f32(f, data_start, src[i], n, raw, val, path, err);
        if (!rc && mpmd_step_write(st, m->params[i], val, (size_t)n * sizeof *val))
            rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "%s: setting %s: %s", path,
                                mpmd_value_name(m->g, m->params[i]), mpmd_step_error(st));
    }
    free(raw), free(val), free(src);
    fclose(f);
    mpmd_st_header_free(&h);
    return rc;
}
