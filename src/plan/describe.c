/* Clusters and models for the planner (include/mpmd_plan.h): the built-in
 * ones, the key = value text, the checks.
 *
 * The presets' figures are the vendors' data sheets (docs/planner.md names
 * them); the latencies are typical values of one message on such a link,
 * which matter only for small messages. */
#include "plan/plan_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const mpmd_cluster presets[] = {
    /* DGX A100 80GB: A100 SXM 312 TFLOP/s bf16/f16 dense, 19.5 f32; 2039 GB/s HBM2e;
     * NVLink 3 600 GB/s both ways; 8 x 200 Gb/s HDR InfiniBand, one per GPU */
    {"dgx-a100", 8, {19.5e12, 312e12, 312e12}, 80 * GIB, 2039e9, 300e9, 3e-6, 25e9, 5e-6},
    /* DGX H100: H100 SXM 989 TFLOP/s bf16/f16 dense, 67 f32; 3.35 TB/s HBM3;
     * NVLink 4 900 GB/s both ways; 8 x 400 Gb/s NDR InfiniBand, one per GPU */
    {"dgx-h100", 8, {67e12, 989e12, 989e12}, 80 * GIB, 3.35e12, 450e9, 3e-6, 50e9, 5e-6},
};

static const mpmd_transformer model_presets[] = {
    /* GPT-3 175B as Megatron-LM trains it (the vocabulary padded to 51200) */
    {"gpt3-175b", 96, 12288, 96, 0, 51200, 2048, 1536, MPMD_PLAN_BF16, 0},
};

mpmd_status mpmd_cluster_preset(const char *name, mpmd_cluster *out, mpmd_error *err) {
    for (size_t i = 0; name && out && i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(name, presets[i].name)) {
            *out = presets[i];
            return MPMD_OK;
        }
    return mpmd_error_set(err, MPMD_ERR_INVALID,
                          "no cluster preset named \"%s\"; the presets are dgx-a100, dgx-h100",
                          name ? name : "(null)");
}

mpmd_status mpmd_transformer_preset(const char *name, mpmd_transformer *out, mpmd_error *err) {
    for (size_t i = 0; name && out && i < sizeof model_presets / sizeof *model_presets; i++)
        if (!strcmp(name, model_presets[i].name)) {
            *out = model_presets[i];
            return MPMD_OK;
        }
    return mpmd_error_set(err, MPMD_ERR_INVALID, "no model preset named \"%s\"; the presets are gpt3-175b",
                          name ? name : "(null)");
}

/* ---- numbers with units ---- */

/* A whole-string number with an optional suffix: k M G T P (1000s), Ki Mi
 * Gi Ti (1024s; a trailing "B" or "iB" is allowed), and with `time` s ms us
 * ns. 0 and *out, or -1. */
static int parse_quantity(const char *s, int time, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v)) return -1;
    double mul = 1;
    if (time) {
        if (!strcmp(end, "ms"))
            mul = 1e-3, end += 2;
        else if (!strcmp(end, "us"))
            mul = 1e-6, end += 2;
        else if (!strcmp(end, "ns"))
            mul = 1e-9, end += 2;
        else if (!strcmp(end, "s"))
            end += 1;
    } else {
        static const char units[] = "kMGTP";
        const char *u = *end ? strchr(units, *end) : NULL;
        if (*end == 'K') u = units; /* Ki as well as ki */
        if (u) {
            int k = (int)(u - units) + 1;
            end++;
            if (*end == 'i') {
                mul = pow(1024.0, k);
                end++;
            } else {
                mul = pow(1000.0, k);
            }
        }
        if (*end == 'B') end++;
    }
    if (*end) return -1;
    *out = v * mul;
    return isfinite(*out) ? 0 : -1;
}

/* ---- the key = value text ---- */

typedef struct kv_line {
    char key[32], value[96];
    int line;
} kv_line;

/* Split text into key = value lines (*out malloc'ed), or an error. */
static mpmd_status kv_split(const char *text, const char *source, kv_line **out, int *n, mpmd_error *err) {
    int cap = 16, cnt = 0, line = 0;
    kv_line *v = malloc((size_t)cap * sizeof *v);
    if (!v) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", source);
    const char *p = text;
    while (*p) {
        line++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[256];
        if (len >= sizeof buf) {
            free(v);
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s:%d: a line longer than %d characters", source,
                                  line, (int)sizeof buf - 1);
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        p = eol ? eol + 1 : p + len;
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *s = buf;
        while (isspace((unsigned char)*s))
            s++;
        char *e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1]))
            *--e = 0;
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            free(v);
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s:%d: expected \"key = value\", got \"%s\"", source,
                                  line, s);
        }
        char *k = s, *ke = eq, *val = eq + 1;
        while (ke > k && isspace((unsigned char)ke[-1]))
            ke--;
        *ke = 0;
        while (isspace((unsigned char)*val))
            val++;
        if (!*k || !*val || strlen(k) >= sizeof v->key || strlen(val) >= sizeof v->value) {
            free(v);
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s:%d: expected \"key = value\" (a key and a value of "
                                  "at most 95 characters), got \"%s = %s\"",
                                  source, line, k, val);
        }
        if (cnt == cap) {
            kv_line *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", source);
            }
            v = nv;
        }
        snprintf(v[cnt].key, sizeof v[cnt].key, "%s", k);
        snprintf(v[cnt].value, sizeof v[cnt].value, "%s", val);
        v[cnt++].line = line;
    }
    *out = v;
    *n = cnt;
    return MPMD_OK;
}

static char *read_all(const char *path, mpmd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read it: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap) break;
        if (cap >= ((size_t)1 << 20)) { /* a description is a few lines */
            free(buf);
            fclose(f);
            mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: more than 1 MiB; a description is a few lines", path);
            return NULL;
        }
        char *nb = realloc(buf, cap *= 2);
        if (!nb) free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) {
        mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    if (bad) {
        free(buf);
        mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read it", path);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: holds a NUL byte; a description is text", path);
        return NULL;
    }
    return buf;
}

/* ---- clusters ---- */

typedef struct field {
    const char *key;
    size_t off; /* of a double in mpmd_cluster */
    int time;
} field;

static const field cluster_fields[] = {
    {"peak_f32", offsetof(mpmd_cluster, peak_flops) + MPMD_PLAN_F32 * sizeof(double), 0},
    {"peak_bf16", offsetof(mpmd_cluster, peak_flops) + MPMD_PLAN_BF16 * sizeof(double), 0},
    {"peak_f16", offsetof(mpmd_cluster, peak_flops) + MPMD_PLAN_F16 * sizeof(double), 0},
    {"memory", offsetof(mpmd_cluster, memory), 0},
    {"memory_bandwidth", offsetof(mpmd_cluster, memory_bandwidth), 0},
    {"node_bandwidth", offsetof(mpmd_cluster, node_bandwidth), 0},
    {"node_latency", offsetof(mpmd_cluster, node_latency), 1},
    {"net_bandwidth", offsetof(mpmd_cluster, net_bandwidth), 0},
    {"net_latency", offsetof(mpmd_cluster, net_latency), 1},
};
#define N_CLUSTER_FIELDS ((int)(sizeof cluster_fields / sizeof *cluster_fields))

/* A whole-string count in [1, max]. */
static int parse_count(const char *s, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)*s) || *end || errno || v < 1 || v > max) return -1;
    *out = v;
    return 0;
}

static mpmd_status cluster_line(mpmd_cluster *c, const kv_line *l, const char *source, unsigned *set,
                                mpmd_error *err) {
    if (!strcmp(l->key, "name")) {
        snprintf(c->name, sizeof c->name, "%s", l->value);
        return MPMD_OK;
    }
    if (!strcmp(l->key, "gpus_per_node")) {
        long long v;
        if (parse_count(l->value, 1 << 20, &v))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s:%d: gpus_per_node: expected a whole number from 1 to "
                                  "1048576, got \"%s\"",
                                  source, l->line, l->value);
        c->gpus_per_node = (int)v;
        *set |= 1u << N_CLUSTER_FIELDS;
        return MPMD_OK;
    }
    for (int i = 0; i < N_CLUSTER_FIELDS; i++) {
        if (strcmp(l->key, cluster_fields[i].key)) continue;
        double v;
        if (parse_quantity(l->value, cluster_fields[i].time, &v) || v <= 0)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s:%d: %s: expected a positive number%s, got \"%s\"",
                                  source, l->line, l->key,
                                  cluster_fields[i].time
                                      ? " of seconds (suffix s, ms, us or ns)"
                                      : " with an optional suffix (k, M, G, T, P; Ki, Mi, Gi, Ti)",
                                  l->value);
        *(double *)((char *)c + cluster_fields[i].off) = v;
        *set |= 1u << i;
        return MPMD_OK;
    }
    return mpmd_error_set(
        err, MPMD_ERR_FORMAT,
        "%s:%d: unknown key \"%s\"; a cluster has base, name, gpus_per_node, peak_f32, peak_bf16, "
        "peak_f16, memory, memory_bandwidth, node_bandwidth, node_latency, net_bandwidth, "
        "net_latency",
        source, l->line, l->key);
}

mpmd_status mpmd_cluster_parse(const char *text, const char *source, mpmd_cluster *out, mpmd_error *err) {
    if (!source) source = "cluster";
    if (!text || !out)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no text or no place for the cluster", source);
    kv_line *l;
    int n;
    mpmd_status kst = kv_split(text, source, &l, &n, err);
    if (kst) return kst;
    mpmd_cluster c;
    memset(&c, 0, sizeof c);
    unsigned set = 0;
    const unsigned all = (1u << (N_CLUSTER_FIELDS + 1)) - 1;
    mpmd_status st = MPMD_OK;
    for (int i = 0; i < n && !st; i++) {
        if (strcmp(l[i].key, "base")) continue;
        if (i > 0) {
            st = mpmd_error_set(err, MPMD_ERR_FORMAT,
                                "%s:%d: base must be the first key (it sets every other)", source, l[i].line);
        } else if (mpmd_cluster_preset(l[i].value, &c, NULL)) {
            st = mpmd_error_set(err, MPMD_ERR_FORMAT,
                                "%s:%d: base: no cluster preset named \"%s\"; the presets are "
                                "dgx-a100, dgx-h100",
                                source, l[i].line, l[i].value);
        } else {
            set = all;
        }
    }
    for (int i = 0; i < n && !st; i++)
        if (strcmp(l[i].key, "base")) st = cluster_line(&c, &l[i], source, &set, err);
    free(l);
    if (st) return st;
    if (set != all) {
        const char *missing = "gpus_per_node";
        for (int i = 0; i < N_CLUSTER_FIELDS; i++)
            if (!(set & (1u << i))) {
                missing = cluster_fields[i].key;
                break;
            }
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: no %s given (every key but base and name is needed, or a "
                              "base preset to start from)",
                              source, missing);
    }
    if (!c.name[0]) snprintf(c.name, sizeof c.name, "%.63s", source);
    *out = c;
    return MPMD_OK;
}

mpmd_status mpmd_cluster_load(const char *path, mpmd_cluster *out, mpmd_error *err) {
    if (!path) return mpmd_error_set(err, MPMD_ERR_INVALID, "no cluster file (NULL)");
    char *text = read_all(path, err);
    if (!text) return err ? err->code : MPMD_ERR_IO;
    mpmd_status st = mpmd_cluster_parse(text, path, out, err);
    free(text);
    return st;
}

/* ---- models ---- */

static mpmd_status model_line(mpmd_transformer *m, const kv_line *l, const char *source, mpmd_error *err) {
    if (!strcmp(l->key, "name")) {
        snprintf(m->name, sizeof m->name, "%s", l->value);
        return MPMD_OK;
    }
    if (!strcmp(l->key, "dtype")) {
        int d = !strcmp(l->value, "f32")    ? MPMD_PLAN_F32
                : !strcmp(l->value, "bf16") ? MPMD_PLAN_BF16
                : !strcmp(l->value, "f16")  ? MPMD_PLAN_F16
                                            : -1;
        if (d < 0)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s:%d: dtype: expected f32, bf16 or f16, got \"%s\"",
                                  source, l->line, l->value);
        m->dtype = d;
        return MPMD_OK;
    }
    if (!strcmp(l->key, "tied")) {
        if (strcmp(l->value, "0") && strcmp(l->value, "1"))
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s:%d: tied: expected 1 or 0, got \"%s\"", source,
                                  l->line, l->value);
        m->untied = l->value[0] == '0';
        return MPMD_OK;
    }
    static const char *const keys[] = {"layers", "hidden", "heads", "ffn", "vocab", "seq", "batch"};
    int *const dst[] = {&m->layers, &m->hidden, &m->heads, &m->ffn, &m->vocab, &m->seq, NULL};
    for (int i = 0; i < 7; i++) {
        if (strcmp(l->key, keys[i])) continue;
        long long v;
        long long max = dst[i] ? (1LL << 30) : (1LL << 40);
        if (parse_count(l->value, max, &v))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s:%d: %s: expected a whole number from 1 to %lld, got \"%s\"", source,
                                  l->line, l->key, max, l->value);
        if (dst[i])
            *dst[i] = (int)v;
        else
            m->batch = v;
        return MPMD_OK;
    }
    return mpmd_error_set(
        err, MPMD_ERR_FORMAT,
        "%s:%d: unknown key \"%s\"; a model has base, name, layers, hidden, heads, ffn, vocab, "
        "seq, batch, dtype, tied",
        source, l->line, l->key);
}

mpmd_status mpmd_transformer_parse(const char *text, const char *source, mpmd_transformer *out,
                                   mpmd_error *err) {
    if (!source) source = "model";
    if (!text || !out)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no text or no place for the model", source);
    kv_line *l;
    int n;
    mpmd_status kst = kv_split(text, source, &l, &n, err);
    if (kst) return kst;
    mpmd_transformer m;
    memset(&m, 0, sizeof m);
    m.dtype = MPMD_PLAN_BF16;
    mpmd_status st = MPMD_OK;
    for (int i = 0; i < n && !st; i++) {
        if (strcmp(l[i].key, "base")) {
            st = model_line(&m, &l[i], source, err);
        } else if (i > 0) {
            st = mpmd_error_set(err, MPMD_ERR_FORMAT,
                                "%s:%d: base must be the first key (it sets every other)", source, l[i].line);
        } else if (mpmd_transformer_preset(l[i].value, &m, NULL)) {
            st = mpmd_error_set(err, MPMD_ERR_FORMAT,
                                "%s:%d: base: no model preset named \"%s\"; the presets are "
                                "gpt3-175b",
                                source, l[i].line, l[i].value);
        }
    }
    free(l);
    if (st) return st;
    if (!m.name[0]) snprintf(m.name, sizeof m.name, "%.63s", source);
    if ((st = mpmd_transformer_check(&m, err))) {
        char msg[MPMD_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return mpmd_error_set(err, st, "%s: %s", source, msg);
    }
    *out = m;
    return MPMD_OK;
}

mpmd_status mpmd_transformer_load(const char *path, mpmd_transformer *out, mpmd_error *err) {
    if (!path) return mpmd_error_set(err, MPMD_ERR_INVALID, "no model file (NULL)");
    char *text = read_all(path, err);
    if (!text) return err ? err->code : MPMD_ERR_IO;
    mpmd_status st = mpmd_transformer_parse(text, path, out, err);
    free(text);
    return st;
}

mpmd_status mpmd_transformer_check(const mpmd_transformer *m, mpmd_error *err) {
    if (!m) return mpmd_error_set(err, MPMD_ERR_INVALID, "no model (NULL)");
    const struct {
        const char *name;
        long long v;
    } need[] = {{"layers", m->layers}, {"hidden", m->hidden}, {"heads", m->heads},
                {"vocab", m->vocab},   {"seq", m->seq},       {"batch", m->batch}};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (need[i].v < 1)
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "the model's %s must be at least 1, got %lld (give --%s or "
                                  "%s = N)",
                                  need[i].name, need[i].v, need[i].name, need[i].name);
    if (m->ffn < 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "the model's ffn must be >= 1 (0: 4 x hidden), got %d",
                              m->ffn);
    if (m->hidden % m->heads)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "the model's %d heads do not divide its hidden width %d",
                              m->heads, m->hidden);
    if (m->dtype < MPMD_PLAN_F32 || m->dtype > MPMD_PLAN_F16)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "the model's dtype %d is not f32, bf16 or f16",
                              m->dtype);
    /* sizes whose products stay far inside a double's exact integers */
    double tokens = (double)m->batch * m->seq, width = (double)m->hidden;
    if (tokens > 1e12 || width * width * m->layers > 1e16 || width * m->vocab > 1e14)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "the model is too large to plan (batch x seq %.3g tokens, %.3g block parameters, "
            "%.3g embedding parameters)",
            tokens, 12 * width * width * m->layers, width * m->vocab);
    return MPMD_OK;
}

static double ffn_of(const mpmd_transformer *m) { return m->ffn ? m->ffn : 4.0 * m->hidden; }

double mpmd_transformer_params(const mpmd_transformer *m) {
    if (!m) return 0;
    double h = m->hidden, f = ffn_of(m);
    /* a block: qkv and out (4h^2 + 4h), the MLP (2hf + f + h), two layer norms (4h) */
    double block = 4 * h * h + 2 * h * f + 9 * h + f;
    double head = m->untied ? (double)m->vocab * h : 0;
    return m->layers * block + (double)m->vocab * h + (double)m->seq * h + 2 * h + head;
}

double mpmd_transformer_step_flops(const mpmd_transformer *m) {
    if (!m) return 0;
    double h = m->hidden, f = ffn_of(m), s = m->seq;
    /* one sequence forward: per block 8sh^2 (qkv, out) + 4shf (MLP) + 4s^2h (scores, context); the head 2shV
     */
    double fwd = m->layers * (8 * s * h * h + 4 * s * h * f + 4 * s * s * h) + 2 * s * h * m->vocab;
    return 3 * fwd * (double)m->batch;
}
