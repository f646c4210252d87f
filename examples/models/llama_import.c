/* LLaMA-family weights in Hugging Face's layout into a gpt_model's
 * parameters (llama_import.h has the name map and why only the Linear
 * weights are transposed). config.json and the shard index are read with
 * cJSON; the weights with the library's safetensors reader
 * (src/io/safetensors.h: a defensive parser whose every offset is checked
 * against the file's size), one tensor at a time. */
#include "llama_import.h"
#include "hf_tensors.h"

#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Bounds on what a config may ask for: gpt --layers is at most 1000, and a
 * JSON file of a config, or of an index of shards, is small. */
#define LLAMA_HF_MAX_LAYERS 1000
#define LLAMA_HF_MAX_JSON ((long)64 << 20)
#define LLAMA_HF_MAX_SHARDS 4096

/* ---- files ---------------------------------------------------------------- */

/* The model directory of `path`: itself when it is a directory, else the
 * directory of the file it names. */
static void model_dir(const char *path, char *dir, size_t len) {
    struct stat sb;
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(dir, len, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else
        snprintf(dir, len, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

/* The whole of a (small) file, 0-terminated, or NULL after a message. */
static char *read_small(const char *path, mpmd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mpmd_error_set(err, MPMD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode) || sb.st_size > LLAMA_HF_MAX_JSON) {
        fclose(f);
        mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: not a regular file of at most %ld bytes", path,
                       LLAMA_HF_MAX_JSON);
        return NULL;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)sb.st_size, f) : 0;
    int bad = !buf || got != (size_t)sb.st_size || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        mpmd_error_set(err, buf ? MPMD_ERR_IO : MPMD_ERR_NOMEM, "cannot read %s", path);
        return NULL;
    }
    buf[got] = '\0';
    return buf;
}

/* A JSON file parsed, or NULL after a message naming where it stops
 * being JSON. */
static cJSON *read_json(const char *path, mpmd_error *err) {
    char *text = read_small(path, err);
    if (!text) return NULL;
    const char *end = NULL;
    size_t n = strlen(text);
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j) {
        size_t at = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        mpmd_error_set(err, MPMD_ERR_FORMAT, "%s is not JSON (at byte %zu: \"%.20s\")", path, at, text + at);
    } else if (!cJSON_IsObject(j)) {
        mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: a JSON object is expected", path);
        cJSON_Delete(j);
        j = NULL;
    }
    free(text);
    return j;
}

static int is_file(const char *path) {
    struct stat sb;
    return !stat(path, &sb) && S_ISREG(sb.st_mode);
}

/* ---- config.json ----------------------------------------------------------- */

/* An integer field in [lo, hi]; `def` when absent (def < lo: required). */
static mpmd_status int_field(const cJSON *cfg, const char *path, const char *key, int64_t lo, int64_t hi,
                             int64_t def, int64_t *out, mpmd_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < lo) return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: field \"%s\" is missing", path, key);
        *out = def;
        return MPMD_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: \"%s\" must be an integer in [%lld, %lld]", path,
                              key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return MPMD_OK;
}

/* A number field in (lo, hi); def when absent. */
static mpmd_status num_field(const cJSON *cfg, const char *path, const char *key, double lo, double hi,
                             double def, double *out, mpmd_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return MPMD_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d > lo && d < hi))
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: \"%s\" must be a number in (%g, %g)", path, key, lo,
                              hi);
    *out = d;
    return MPMD_OK;
}

/* A boolean field, def when absent; `want` >= 0: only that value is read
 * (the blocks have no other), the message says why. */
static mpmd_status bool_field(const cJSON *cfg, const char *path, const char *key, int def, int want,
                              const char *why, int *out, mpmd_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    int b = def;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v))
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
        b = cJSON_IsTrue(v);
    }
    if (want >= 0 && b != want)
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: \"%s\" is %s: %s", path, key, b ? "true" : "false",
                              why);
    *out = b;
    return MPMD_OK;
}

/* rope_scaling: null (or type "default"), or Llama 3.1's "llama3". */
static mpmd_status rope_scaling(const cJSON *cfg, const char *path, mpmd_rope_scaling *s, mpmd_error *err) {
    *s = MPMD_ROPE_NO_SCALING;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!r || cJSON_IsNull(r)) return MPMD_OK;
    if (!cJSON_IsObject(r))
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: \"rope_scaling\" must be null or an object", path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(r, "type");
    const char *type = cJSON_GetStringValue(t);
    if (!type)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: \"rope_scaling\" has no \"rope_type\" (or \"type\") string", path);
    if (!strcmp(type, "default")) return MPMD_OK;
    if (strcmp(type, "llama3") != 0)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: rope_scaling type \"%.40s\" is not supported: the rotary embeddings know Llama 3.1's "
            "\"llama3\" frequencies (or none)",
            path, type);
    double factor, low, high;
    int64_t orig;
    mpmd_status rc;
    if ((rc = num_field(r, path, "factor", 0.0, 1e6, NAN, &factor, err)) ||
        (rc = num_field(r, path, "low_freq_factor", 0.0, 1e6, 1.0, &low, err)) ||
        (rc = num_field(r, path, "high_freq_factor", 0.0, 1e6, 4.0, &high, err)) ||
        (rc = int_field(r, path, "original_max_position_embeddings", 1, INT32_MAX, 8192, &orig, err)))
        return rc;
    if (!(factor >= 1.0) || !(high > low))
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: rope_scaling \"llama3\" with factor %g, low_freq_factor %g, high_freq_factor %g: a "
            "factor >= 1 and low_freq_factor < high_freq_factor are expected",
            path, factor, low, high);
    *s = (mpmd_rope_scaling){(float)factor, (float)low, (float)high, orig};
    return MPMD_OK;
}

static mpmd_status parse_config(const cJSON *cfg, const char *path, llama_hf_info *info, mpmd_error *err) {
    memset(info, 0, sizeof *info);
    const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "model_type"));
    if (mt && strcmp(mt, "llama") && strcmp(mt, "mistral"))
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: model_type \"%.40s\" is not a LLaMA-family model (llama or mistral) of this "
            "importer's blocks",
            path, mt);
    int64_t layers, heads, kv, width, hidden, vocab, positions, head_dim, window;
    double theta, eps;
    int b;
    mpmd_status rc;
    if ((rc = int_field(cfg, path, "hidden_size", 1, 1 << 16, -1, &width, err)) ||
        (rc = int_field(cfg, path, "intermediate_size", 1, 1 << 20, -1, &hidden, err)) ||
        (rc = int_field(cfg, path, "num_hidden_layers", 1, LLAMA_HF_MAX_LAYERS, -1, &layers, err)) ||
        (rc = int_field(cfg, path, "num_attention_heads", 1, 1 << 12, -1, &heads, err)) ||
        (rc = int_field(cfg, path, "num_key_value_heads", 1, 1 << 12, heads, &kv, err)) ||
        (rc = int_field(cfg, path, "vocab_size", 1, 1 << 24, -1, &vocab, err)) ||
        (rc = int_field(cfg, path, "max_position_embeddings", 1, INT32_MAX, 2048, &positions, err)) ||
        (rc = int_field(cfg, path, "head_dim", 1, 1 << 16, width / heads, &head_dim, err)) ||
        (rc = int_field(cfg, path, "sliding_window", 0, INT32_MAX, 0, &window, err)) ||
        (rc = num_field(cfg, path, "rope_theta", 1.0, 1e30, 10000.0, &theta, err)) ||
        (rc = num_field(cfg, path, "rms_norm_eps", 0.0, 1.0, 1e-6, &eps, err)) ||
        (rc = bool_field(cfg, path, "tie_word_embeddings", 0, -1, NULL, &info->tied, err)) ||
        (rc = bool_field(cfg, path, "attention_bias", 0, 0, "the attention has no biases", &b, err)) ||
        (rc = bool_field(cfg, path, "mlp_bias", 0, 0, "the MLP has no biases", &b, err)) ||
        (rc = rope_scaling(cfg, path, &info->rope_scaling, err)))
        return rc;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (act && !cJSON_IsNull(act) &&
        (!cJSON_GetStringValue(act) || strcmp(cJSON_GetStringValue(act), "silu")))
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: hidden_act %s%.40s%s: the MLP is SwiGLU, with silu",
                              path, cJSON_IsString(act) ? "\"" : "",
                              cJSON_IsString(act) ? act->valuestring : "(not a string)",
                              cJSON_IsString(act) ? "\"" : "");
    if (width % heads || head_dim != width / heads)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: head_dim %lld with hidden_size %lld and %lld heads: the blocks' heads are "
                              "hidden_size / num_attention_heads",
                              path, (long long)head_dim, (long long)width, (long long)heads);
    if (heads % kv)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: %lld key/value heads do not divide the %lld attention heads", path,
                              (long long)kv, (long long)heads);
    info->layers = (int)layers, info->heads = (int)heads, info->kv_heads = (int)kv;
    info->width = width, info->hidden = hidden, info->vocab = vocab, info->positions = positions;
    info->rope_theta = (float)theta, info->rms_norm_eps = (float)eps, info->sliding_window = window;
    if (!(info->rope_theta > 1.0f) || isinf(info->rope_theta))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: rope_theta %g; a base > 1 that f32 holds is expected", path, theta);
    return MPMD_OK;
}

mpmd_status llama_hf_inspect(const char *path, llama_hf_info *info, mpmd_error *err) {
    char dir[4096], file[4200];
    model_dir(path, dir, sizeof dir);
    snprintf(file, sizeof file, "%s/config.json", dir);
    if (!is_file(file))
        return mpmd_error_set(
            err, MPMD_ERR_IO,
            "%s: no config.json there: a Hugging Face model directory (config.json and "
            "model.safetensors, or model.safetensors.index.json and its shards) is expected",
            dir);
    cJSON *cfg = read_json(file, err);
    if (!cfg) return MPMD_ERR_FORMAT;
    mpmd_status rc = parse_config(cfg, file, info, err);
    cJSON_Delete(cfg);
    if (rc) return rc;
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    if (is_file(file)) return MPMD_OK;
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", dir);
    if (is_file(file)) {
        info->sharded = 1;
        return MPMD_OK;
    }
    return mpmd_error_set(err, MPMD_ERR_IO,
                          "%s: no model.safetensors nor model.safetensors.index.json: no weights", dir);
}

mpmd_status llama_hf_configure(const char *path, const llama_hf_info *info, const gpt_hf_given *given,
                               gpt_config *c, mpmd_error *err) {
    char dir[4096];
    model_dir(path, dir, sizeof dir);
    const mpmd_status bad = MPMD_ERR_SHAPE;
    struct {
        int given;
        long long asked, have;
        const char *option, *field;
    } checks[] = {
        {given->layers, c->layers, info->layers, "--layers", "num_hidden_layers"},
        {given->width, c->width, info->width, "--width", "hidden_size"},
        {given->heads, c->heads, info->heads, "--heads", "num_attention_heads"},
        {given->kv_heads, c->kv_heads ? c->kv_heads : c->heads, info->kv_heads, "--kv-heads",
         "num_key_value_heads"},
        {given->vocab, c->vocab, info->vocab, "--vocab", "vocab_size"},
        {given->mlp_hidden, c->mlp_hidden, info->hidden, "--mlp-hidden", "intermediate_size"},
        {given->tie_embeddings, c->tie_embeddings, info->tied, "--tie-embeddings", "tie_word_embeddings"},
    };
    for (size_t k = 0; k < sizeof checks / sizeof checks[0]; k++)
        if (checks[k].given && checks[k].asked != checks[k].have)
            return mpmd_error_set(err, bad, "%s/config.json: %s is %lld, but %s %lld was given", dir,
                                  checks[k].field, checks[k].have, checks[k].option, checks[k].asked);
    if (given->rope_base && c->rope_base != info->rope_theta)
        return mpmd_error_set(err, bad, "%s/config.json: rope_theta is %g, but --rope-base %g was given", dir,
                              (double)info->rope_theta, (double)c->rope_base);
    if (given->seq && c->seq > info->positions)
        return mpmd_error_set(
            err, bad,
            "%s/config.json: max_position_embeddings is %lld; --seq %lld is past the positions the "
            "model knows",
            dir, (long long)info->positions, (long long)c->seq);
    c->arch = GPT_ARCH_LLAMA;
    c->layers = info->layers, c->width = info->width, c->heads = info->heads, c->kv_heads = info->kv_heads;
    c->vocab = info->vocab, c->mlp_hidden = info->hidden, c->tie_embeddings = info->tied;
    c->rope_base = info->rope_theta, c->norm_eps = info->rms_norm_eps, c->rope_scaling = info->rope_scaling;
    if (c->seq > info->positions) c->seq = info->positions;
    if (info->sliding_window && info->sliding_window < c->seq)
        return mpmd_error_set(
            err, bad,
            "%s/config.json: sliding_window is %lld, shorter than seq %lld: the attention sees "
            "every position before it (give --seq %lld or less)",
            dir, (long long)info->sliding_window, (long long)c->seq, (long long)info->sliding_window);
    return MPMD_OK;
}

/* ---- the weights ----------------------------------------------------------- */

/* The open weight files: model.safetensors, or the index's shards. */
typedef struct shard {
    char *name; /* the file's name in the directory */
    mpmd_st_header h;
    FILE *f;
    long long data_start;
} shard;

typedef struct weights {
    char dir[4096];
    int n;
    shard *files;
    cJSON *map; /* the index's weight_map (an object), or NULL */
    cJSON *index;
} weights;

static void weights_close(weights *w) {
    for (int i = 0; i < w->n; i++) {
        if (w->files[i].f) {
            fclose(w->files[i].f);
            mpmd_st_header_free(&w->files[i].h);
        }
        free(w->files[i].name);
    }
    free(w->files);
    cJSON_Delete(w->index);
    memset(w, 0, sizeof *w);
}

/* Open file `name` of the directory as w's next shard (once per name). */
static int open_shard(weights *w, const char *name, mpmd_error *err) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->files[i].name, name)) return i;
    if (!*name || strchr(name, '/') || !strcmp(name, "..") || w->n == LLAMA_HF_MAX_SHARDS) {
        mpmd_error_set(err, MPMD_ERR_FORMAT,
                       "%s/model.safetensors.index.json names \"%.60s\": a file of the "
                       "directory (no '/') is expected, %d at most",
                       w->dir, name, LLAMA_HF_MAX_SHARDS);
        return -1;
    }
    shard *nf = realloc(w->files, (size_t)(w->n + 1) * sizeof *nf);
    if (!nf) {
        mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the shards of %s", w->dir);
        return -1;
    }
    w->files = nf;
    shard *s = &w->files[w->n];
    memset(s, 0, sizeof *s);
    if (!(s->name = malloc(strlen(name) + 1))) {
        mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the shards of %s", w->dir);
        return -1;
    }
    strcpy(s->name, name);
    w->n++;
    char path[8300];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    if (mpmd_st_open(path, &s->h, &s->f, err)) {
        s->f = NULL;
        return -1;
    }
    s->data_start = (long long)ftello(s->f);
    return w->n - 1;
}

static mpmd_status weights_open(const char *path, const llama_hf_info *info, weights *w, mpmd_error *err) {
    memset(w, 0, sizeof *w);
    model_dir(path, w->dir, sizeof w->dir);
    if (!info->sharded) return open_shard(w, "model.safetensors", err) < 0 ? MPMD_ERR_FORMAT : MPMD_OK;
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", w->dir);
    if (!(w->index = read_json(file, err))) return MPMD_ERR_FORMAT;
    w->map = cJSON_GetObjectItemCaseSensitive(w->index, "weight_map");
    if (!cJSON_IsObject(w->map))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: no \"weight_map\" object (tensor name -> shard file)", file);
    return MPMD_OK;
}

/* The tensor `name`, found in its file (opened on first use); NULL with
 * *s -1 when the source lacks it, or after an error (rc set). */
static const mpmd_st_tensor *find_tensor(weights *w, const char *name, int *s, mpmd_status *rc,
                                         mpmd_error *err) {
    *s = -1;
    const char *file = "model.safetensors";
    if (w->map) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(w->map, name);
        if (!v) return NULL;
        if (!(file = cJSON_GetStringValue(v))) {
            *rc = mpmd_error_set(err, MPMD_ERR_FORMAT,
                                 "%s/model.safetensors.index.json: weight_map[\"%s\"] is not a file name",
                                 w->dir, name);
            return NULL;
        }
    }
    int k = open_shard(w, file, err);
    if (k < 0) {
        *rc = MPMD_ERR_FORMAT;
        return NULL;
    }
    const mpmd_st_tensor *t = mpmd_st_find(&w->files[k].h, name);
    if (!t && w->map)
        *rc = mpmd_error_set(err, MPMD_ERR_FORMAT,
                             "%s/model.safetensors.index.json puts tensor %s in %s, which does not hold it",
                             w->dir, name, file);
    *s = t ? k : -1;
    return t;
}

/* Hugging Face's name of our parameter `name` into out, and whether its
 * Linear weight is transposed; 0 when there is none. */
static int hf_name(const char *name, char *out, size_t len, int *transposed) {
    static const char *const top[][2] = {{"wte/embedding", "model.embed_tokens.weight"},
                                         {"norm_f/scale", "model.norm.weight"},
                                         {"lm_head/kernel", "lm_head.weight"}};
    static const char *const block[][2] = {
        {"rms_0/scale", "input_layernorm.weight"},    {"attn/q/kernel", "self_attn.q_proj.weight"},
        {"attn/k/kernel", "self_attn.k_proj.weight"}, {"attn/v/kernel", "self_attn.v_proj.weight"},
        {"attn/o/kernel", "self_attn.o_proj.weight"}, {"rms_1/scale", "post_attention_layernorm.weight"},
        {"mlp/gate/kernel", "mlp.gate_proj.weight"},  {"mlp/up/kernel", "mlp.up_proj.weight"},
        {"mlp/down/kernel", "mlp.down_proj.weight"},
    };
    *transposed = strstr(name, "/kernel") != NULL; /* every Linear weight; not the embedding, not the norms */
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
        if (!strcmp(name, top[k][0])) {
            snprintf(out, len, "%s", top[k][1]);
            return 1;
        }
    int b = -1, at = 0;
    if (sscanf(name, "block_%d/%n", &b, &at) != 1 || at == 0 || b < 0) return 0;
    for (size_t k = 0; k < sizeof block / sizeof block[0]; k++)
        if (!strcmp(name + at, block[k][0])) {
            snprintf(out, len, "model.layers.%d.%s", b, block[k][1]);
            return 1;
        }
    return 0;
}

/* The n elements of tensor t as f32 (raw holds n * elem_size bytes). */
static mpmd_status read_f32(const weights *w, const shard *s, const mpmd_st_tensor *t, int64_t n,
                            uint8_t *raw, float *out, mpmd_error *err) {
    char where[4200];
    snprintf(where, sizeof where, "%s/%s", w->dir, s->name);
    return gpt_hf_read_f32(s->f, s->data_start, t, n, raw, out, where, err);
}

/* Every parameter's tensor, found and checked: src[i] and shard[i]. */
static mpmd_status plan_import(weights *w, const gpt_model *m, const mpmd_st_tensor **src, int *in,
                               mpmd_error *err) {
    char hf[128], want[96], got[96];
    for (int i = 0; i < m->n_params; i++) {
        const char *name = mpmd_value_name(m->g, m->params[i]);
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        int tr;
        if (!name || !hf_name(name, hf, sizeof hf, &tr))
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "%s: the model's parameter %s has no tensor in LLaMA's layout", w->dir,
                                  name ? name : "(unnamed)");
        mpmd_status rc = MPMD_OK;
        const mpmd_st_tensor *s = src[i] = find_tensor(w, hf, &in[i], &rc, err);
        if (rc) return rc;
        if (!s)
            return mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: tensor %s (for the model's %s) is missing",
                                  w->dir, hf, name);
        const char *file = w->files[in[i]].name;
        if (!gpt_hf_loadable(s))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s/%s: tensor %s has dtype %s; F32, F16 or BF16 is expected", w->dir, file,
                                  hf, s->dtype);
        /* a Linear weight is [out, in]: our kernel [in, out] transposed */
        int64_t need[2] = {t.dim[tr ? 1 : 0], t.ndim > 1 ? t.dim[tr ? 0 : 1] : 0};
        int same = s->ndim == t.ndim && s->dim[0] == need[0] && (t.ndim == 1 || s->dim[1] == need[1]);
        if (!same) {
            gpt_hf_shape_str(s->ndim, s->dim, got, sizeof got);
            gpt_hf_shape_str(t.ndim, need, want, sizeof want);
            char ours[96];
            gpt_hf_shape_str(t.ndim, t.dim, ours, sizeof ours);
            return mpmd_error_set(err, MPMD_ERR_SHAPE, "%s/%s: tensor %s is %s; the model's %s %s needs %s%s",
                                  w->dir, file, hf, got, name, ours, want,
                                  tr ? " (PyTorch's Linear weights are [out, in])" : "");
        }
    }
    return MPMD_OK;
}

/* A tied model's file may hold lm_head.weight too: it must be embed_tokens. */
static mpmd_status check_tied_head(weights *w, mpmd_error *err) {
    mpmd_status rc = MPMD_OK;
    int ke, kh;
    const mpmd_st_tensor *e = find_tensor(w, "model.embed_tokens.weight", &ke, &rc, err);
    if (rc || !e) return rc;
    const mpmd_st_tensor *h = find_tensor(w, "lm_head.weight", &kh, &rc, err);
    if (rc || !h) return rc;
    char es[64], hs[64];
    gpt_hf_shape_str(e->ndim, e->dim, es, sizeof es);
    gpt_hf_shape_str(h->ndim, h->dim, hs, sizeof hs);
    if (h->ndim != 2 || e->ndim != 2 || h->dim[0] != e->dim[0] || h->dim[1] != e->dim[1] ||
        !gpt_hf_loadable(h))
        return mpmd_error_set(
            err, MPMD_ERR_SHAPE,
            "%s: tensor lm_head.weight is %s %s, model.embed_tokens.weight %s %s: config.json ties "
            "them (tie_word_embeddings), and they cannot be one",
            w->dir, h->dtype, hs, e->dtype, es);
    int64_t n = e->dim[0] * e->dim[1];
    uint8_t *raw = malloc((size_t)n * 4);
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    if (!raw || !a || !b)
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory comparing lm_head.weight", w->dir);
    if (!rc) rc = read_f32(w, &w->files[ke], e, n, raw, a, err);
    if (!rc) rc = read_f32(w, &w->files[kh], h, n, raw, b, err);
    if (!rc && memcmp(a, b, (size_t)n * sizeof *a) != 0)
        rc = mpmd_error_set(
            err, MPMD_ERR_SHAPE,
            "%s: tensor lm_head.weight differs from model.embed_tokens.weight, but config.json ties "
            "them (tie_word_embeddings): an untied head in a tied model's files",
            w->dir);
    free(raw), free(a), free(b);
    return rc;
}

mpmd_status llama_hf_import(const char *path, const gpt_model *m, mpmd_step *st, mpmd_error *err) {
    llama_hf_info info;
    mpmd_status rc = llama_hf_inspect(path, &info, err);
    if (rc) return rc;
    if (m->cfg.arch != GPT_ARCH_LLAMA || m->cfg.tie_embeddings != info.tied)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: the model must have LLaMA blocks and %s embeddings, as config.json says "
                              "(llama_hf_configure)",
                              path, info.tied ? "tied" : "untied");
    weights w;
    const mpmd_st_tensor **src = calloc((size_t)m->n_params + 1, sizeof *src);
    int *in = calloc((size_t)m->n_params + 1, sizeof *in);
    uint8_t *raw = NULL;
    float *val = NULL, *tr = NULL;
    rc = weights_open(path, &info, &w, err);
    if (!rc && (!src || !in)) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", path);
    if (!rc) rc = plan_import(&w, m, src, in, err);
    if (!rc && info.tied) rc = check_tied_head(&w, err);
    /* every check passed: read, transpose and write one parameter at a time */
    int64_t most = 0;
    for (int i = 0; !rc && i < m->n_params; i++) {
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        if (mpmd_type_numel(&t) > most) most = mpmd_type_numel(&t);
    }
    if (!rc && (!(raw = malloc((size_t)most * 4 + 1)) || !(val = malloc((size_t)most * sizeof *val + 1)) ||
                !(tr = malloc((size_t)most * sizeof *tr + 1))))
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for a tensor of %lld elements", path,
                            (long long)most);
    for (int i = 0; !rc && i < m->n_params; i++) {
        const char *name = mpmd_value_name(m->g, m->params[i]);
        mpmd_type t = mpmd_value_whole_type(m->g, m->params[i]);
        int64_t n = mpmd_type_numel(&t);
        char hf[128];
        int transposed;
        hf_name(name, hf, sizeof hf, &transposed);
        rc = read_f32(&w, &w.files[in[i]], src[i], n, raw, val, err);
        const float *out = val;
        if (!rc && transposed) { /* [out, in] -> kernel[in][out] = W[out][in] */
            const int64_t rows = src[i]->dim[0], cols = src[i]->dim[1];
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    tr[c * rows + r] = val[r * cols + c];
            out = tr;
        }
        if (!rc && mpmd_step_write(st, m->params[i], out, (size_t)n * sizeof *out))
            rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "%s: setting %s: %s", path, name, mpmd_step_error(st));
    }
    free(raw), free(val), free(tr), free(src), free(in);
    weights_close(&w);
    return rc;
}
