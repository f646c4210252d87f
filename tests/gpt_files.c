/* GPT-2 files in Hugging Face's layout and llm.c token files, for the
 * tests (gpt_files.h). */
#include "gpt_files.h"

#include "io/safetensors.h"
#include "testutil.h"
#include "util/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tu_hf_opts tu_hf_defaults(void) {
    tu_hf_opts o;
    memset(&o, 0, sizeof o);
    o.layers = 2, o.width = 16, o.vocab = 64, o.positions = 32;
    o.prefix = "", o.dtype = "F32", o.masks = 1, o.seed = 1;
    return o;
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

float tu_hf_value(uint64_t seed, const char *name, int64_t k) {
    uint64_t s = tu_mix64(seed ^ name_hash(name)) ^ (uint64_t)k * 0x9e3779b97f4a7c15ull;
    return (float)(2.0 * tu_unif(&s) - 1.0);
}

float tu_hf_stored(const char *dtype, uint64_t seed, const char *name, int64_t k) {
    float v = tu_hf_value(seed, name, k);
    if (!strcmp(dtype, "BF16")) return mpmd_bf16_to_f32(mpmd_f32_to_bf16(v));
    if (!strcmp(dtype, "F16")) return mpmd_f16_to_f32(mpmd_f32_to_f16(v));
    return v;
}

/* One tensor to write, with the storage of its name, shape and bytes. */
typedef struct hf_tensor {
    char name[96];
    char dtype[8];
    int ndim;
    int64_t dim[4];
    void *data;
} hf_tensor;

static int64_t count(const hf_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dim[i];
    return n;
}

/* Fill t with tu_hf_value of `base` (the name without the prefix) in its dtype. */
static int fill(hf_tensor *t, const tu_hf_opts *o, const char *base, const char *dtype) {
    int64_t n = count(t);
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    int size = mpmd_st_dtype_size(dtype);
    if (!(t->data = malloc((size_t)(n * size)))) return 0;
    for (int64_t k = 0; k < n; k++) {
        float v = tu_hf_value(o->seed, base, k);
        if (size == 4 && !strcmp(dtype, "I32")) {
            int32_t x = (int32_t)(v * 1000);
            memcpy((char *)t->data + 4 * k, &x, 4);
        } else if (size == 4) {
            memcpy((char *)t->data + 4 * k, &v, 4);
        } else {
            uint16_t x = !strcmp(dtype, "BF16") ? mpmd_f32_to_bf16(v) : mpmd_f32_to_f16(v);
            memcpy((char *)t->data + 2 * k, &x, 2);
        }
    }
    return 1;
}

mpmd_status tu_hf_write(const char *path, const tu_hf_opts *o, mpmd_error *err) {
    const int64_t C = o->width, V = o->vocab, P = o->positions;
    /* the names without the prefix and their shapes */
    struct {
        const char *name;
        int ndim;
        int64_t d0, d1;
    } top[] = {{"wte.weight", 2, V, C},
               {"wpe.weight", 2, P, C},
               {"ln_f.weight", 1, C, 0},
               {"ln_f.bias", 1, C, 0}},
      block[] = {{"ln_1.weight", 1, C, 0},
                 {"ln_1.bias", 1, C, 0},
                 {"attn.c_attn.weight", 2, C, 3 * C},
                 {"attn.c_attn.bias", 1, 3 * C, 0},
                 {"attn.c_proj.weight", 2, C, C},
                 {"attn.c_proj.bias", 1, C, 0},
                 {"ln_2.weight", 1, C, 0},
                 {"ln_2.bias", 1, C, 0},
                 {"mlp.c_fc.weight", 2, C, 4 * C},
                 {"mlp.c_fc.bias", 1, 4 * C, 0},
                 {"mlp.c_proj.weight", 2, 4 * C, C},
                 {"mlp.c_proj.bias", 1, C, 0}};
    int nb = (int)(sizeof block / sizeof block[0]), cap = 4 + o->layers * (nb + 1) + 1, n = 0;
    hf_tensor *ts = calloc((size_t)cap, sizeof *ts);
    if (!ts) return mpmd_error_set(err, MPMD_ERR_NOMEM, "tu_hf_write: out of memory");
    int ok = 1;
    for (int i = -1; i < o->layers; i++) { /* -1: the tensors outside the blocks */
        int m = i < 0 ? 4 : nb;
        for (int j = 0; j < m; j++) {
            char base[96];
            int ndim = i < 0 ? top[j].ndim : block[j].ndim;
            int64_t d0 = i < 0 ? top[j].d0 : block[j].d0, d1 = i < 0 ? top[j].d1 : block[j].d1;
            if (i < 0)
                snprintf(base, sizeof base, "%s", top[j].name);
            else
                snprintf(base, sizeof base, "h.%d.%s", i, block[j].name);
            if (o->drop && !strcmp(base, o->drop)) continue;
            hf_tensor *t = &ts[n++];
            snprintf(t->name, sizeof t->name, "%s%s", o->prefix, base);
            t->ndim = ndim, t->dim[0] = d0, t->dim[1] = d1;
            if (o->reshape && !strcmp(base, o->reshape)) t->dim[ndim - 1]--;
            ok = ok && fill(t, o, base, o->as_i32 && !strcmp(base, o->as_i32) ? "I32" : o->dtype);
        }
        if (i >= 0 && o->masks) { /* a buffer HF's older exports carry: the causal mask */
            hf_tensor *t = &ts[n++];
            snprintf(t->name, sizeof t->name, "%sh.%d.attn.bias", o->prefix, i);
            snprintf(t->dtype, sizeof t->dtype, "F32");
            t->ndim = 4, t->dim[0] = 1, t->dim[1] = 1, t->dim[2] = P, t->dim[3] = P;
            float *mask = t->data = malloc((size_t)(P * P) * sizeof *mask);
            ok = ok && mask;
            for (int64_t r = 0; mask && r < P; r++)
                for (int64_t c = 0; c < P; c++)
                    mask[r * P + c] = c <= r ? 1.0f : 0.0f;
        }
    }
    if (o->lm_head) { /* a GPT2LMHeadModel's head, outside "transformer." */
        hf_tensor *t = &ts[n++];
        snprintf(t->name, sizeof t->name, "lm_head.weight");
        t->ndim = 2, t->dim[0] = V, t->dim[1] = C;
        tu_hf_opts other = *o;
        other.seed = o->lm_head == 1 ? o->seed : o->seed + 1;
        ok = ok && fill(t, &other, "wte.weight", o->dtype);
    }
    mpmd_status rc = MPMD_ERR_NOMEM;
    mpmd_st_out *out = calloc((size_t)n + 1, sizeof *out);
    if (ok && out) {
        for (int k = 0; k < n; k++)
            out[k] = (mpmd_st_out){ts[k].name, ts[k].dtype, ts[k].ndim, ts[k].dim, ts[k].data};
        const mpmd_st_kv meta[] = {{"format", "pt"}}; /* what Hugging Face's files carry */
        rc = mpmd_st_write(path, n, out, 1, meta, 0, err);
    } else {
        mpmd_error_set(err, rc, "tu_hf_write: out of memory");
    }
    for (int k = 0; k < n; k++)
        free(ts[k].data);
    free(ts), free(out);
    return rc;
}

int tu_tokens_write(const char *path, const uint16_t *ids, int64_t n, int32_t magic, int32_t version,
                    int32_t count) {
    uint8_t head[1024] = {0};
    int32_t h3[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            head[4 * i + b] = (uint8_t)((uint32_t)h3[i] >> (8 * b));
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    for (int64_t k = 0; ok && k < n; k++) {
        uint8_t b[2] = {(uint8_t)(ids[k] & 0xff), (uint8_t)(ids[k] >> 8)};
        ok = fwrite(b, 1, 2, f) == 2;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}
