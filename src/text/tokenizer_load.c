/* Loading a Hugging Face tokenizer.json (include/mpmd_tokenizer.h): the JSON
 * is parsed by cJSON, every field checked, and the vocabulary, the merges,
 * the added tokens and the pre-tokenizer's expressions turned into the
 * tables the encoder reads (tok_state.h). Whatever the file holds,
 * the result is a tokenizer or an error that names the file and the field;
 * tests/fuzz/fuzz_tokenizer.c holds the loader to that.
 */
#include "text/tok_state.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* GPT-2's pre-tokenizer (a ByteLevel pre-tokenizer with use_regex): the
 * contractions, a letter run, a digit run or a run of other non-space
 * characters (each with an optional space before), then whitespace. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- building ---------------------------------------------------------------- */

typedef struct loader {
    mpmd_tokenizer *t;
    const char *name;
    mpmd_error *err;
    mpmd_status rc;
} loader;

static mpmd_status lfail(loader *l, mpmd_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static mpmd_status lfail(loader *l, mpmd_status code, const char *fmt, ...) {
    if (l->rc) return l->rc; /* the first error stays */
    char msg[MPMD_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->rc = mpmd_error_set(l->err, code, "tokenizer %s: %s", l->name, msg);
    return l->rc;
}

static mpmd_status nomem(loader *l) { return lfail(l, MPMD_ERR_NOMEM, "out of memory"); }

/* A string for a message: at most 40 bytes of s, with quotes. */
static const char *quoted(char *buf, size_t cap, const char *s, size_t n) {
    size_t k = n < 40 ? n : 40;
    snprintf(buf, cap, "\"%.*s%s\"", (int)k, s, n > 40 ? "..." : "");
    return buf;
}

/* Append n bytes to the pool (plus a NUL, so that token_of's texts are C
 * strings too); returns the offset, or UINT32_MAX when out of memory or
 * past 4 GiB. */
static uint32_t pool_put(mpmd_tokenizer *t, const void *s, size_t n) {
    if (t->pool_len + n + 1 > UINT32_MAX) return UINT32_MAX;
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + n + 1)
            cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p) return UINT32_MAX;
        t->pool = p;
        t->pool_cap = cap;
    }
    uint32_t off = (uint32_t)t->pool_len;
    if (n) memcpy(t->pool + off, s, n);
    t->pool[off + n] = 0;
    t->pool_len += n + 1;
    return off;
}

static int map_init(tok_strmap *m, size_t entries) {
    size_t cap = 16;
    while (cap < entries * 2)
        cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].id = -1;
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

/* Insert (text at pool offset off, id); returns the id already there for
 * the same text, or -1 after inserting. The map never fills: it was sized
 * for every entry. */
static int32_t map_insert(mpmd_tokenizer *t, tok_strmap *m, uint32_t off, uint32_t n, int32_t id) {
    uint64_t h = tok_hash(t->pool + off, n);
    size_t i = (size_t)h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        tok_strmap_slot *e = &m->slots[i];
        if (e->id < 0) break;
        if (e->hash32 == (uint32_t)h && e->len == n && !memcmp(t->pool + e->off, t->pool + off, n))
            return e->id;
    }
    m->slots[i] = (tok_strmap_slot){off, n, id, (uint32_t)h};
    m->count++;
    return -1;
}

/* The byte a character of the byte alphabet stands for, or -1: the inverse
 * of tok_byte_char. U+0100 + k is the k-th byte that does not stand for
 * itself: 0x00..0x20 (33 of them), 0x7F..0xA0 (34), then 0xAD. */
static int byte_of_char(unsigned cp) {
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
        return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    unsigned k = cp - 0x100;
    return k < 33 ? (int)k : k < 67 ? (int)(0x7f + k - 33) : 0xad;
}

/* A byte-level string (a vocabulary entry, one side of a merge) to the bytes
 * it stands for, in out (at least strlen(s) bytes). Returns the length, or
 * -1 when s holds a character outside the byte alphabet: then out holds s
 * itself, which is what Hugging Face's ByteLevel decoder makes of such a
 * token. */
static long bytes_of(const char *s, size_t n, unsigned char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        unsigned cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < n) {
            cp = (c & 0x1f) << 6 | (u[i + 1] & 0x3f);
            i += 2;
        } else {
            cp = 0x7fffffff; /* three bytes or more: past the alphabet */
            i = n;
        }
        int b = byte_of_char(cp);
        if (b < 0) {
            memcpy(out, s, n);
            return -1;
        }
        out[k++] = (unsigned char)b;
    }
    return (long)k;
}

/* An id: an integral number in [0, TOK_MAX_ID]. */
static int get_id(loader *l, const cJSON *v, const char *what, int32_t *id) {
    if (!cJSON_IsNumber(v)) return lfail(l, MPMD_ERR_FORMAT, "%s: the id is not a number", what), -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= TOK_MAX_ID) || d != (double)(int32_t)d)
        return lfail(l, MPMD_ERR_FORMAT,
                     "%s: id %.17g is not a whole number from 0 to %d (the largest id mpmd accepts)", what, d,
                     TOK_MAX_ID),
               -1;
    *id = (int32_t)d;
    return 0;
}

/* A field that must be absent, null or false (or 0, or ""): a feature mpmd
 * does not implement, refused rather than ignored. */
static int refuse_set(loader *l, const cJSON *obj, const char *field, const char *where, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0) ||
        (cJSON_IsString(v) && !*v->valuestring))
        return 0;
    return lfail(l, MPMD_ERR_FORMAT, "%s.%s is set: %s", where, field, why), -1;
}

/* A boolean field: absent gives dflt. */
static int get_bool(loader *l, const cJSON *obj, const char *field, const char *where, int dflt, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) return lfail(l, MPMD_ERR_FORMAT, "%s.%s is not true or false", where, field), -1;
    *out = cJSON_IsTrue(v);
    return 0;
}

static const char *type_of(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* Compile one pre-tokenizer expression into the next split. */
static int add_split(loader *l, const char *pattern, size_t n, int literal, const char *where) {
    mpmd_tokenizer *t = l->t;
    if (t->n_splits >= TOK_MAX_SPLITS)
        return lfail(l, MPMD_ERR_FORMAT, "%s: more than %d Split pre-tokenizers", where, TOK_MAX_SPLITS), -1;
    int code;
    PCRE2_SIZE at;
    /* a literal takes the text as it is (PCRE2 allows no other options with it) */
    uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, n, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", code);
        if (code == PCRE2_ERROR_NOMEMORY) return nomem(l), -1;
        return lfail(l, MPMD_ERR_FORMAT, "%s: the expression does not compile at offset %zu: %s", where,
                     (size_t)at, (const char *)msg),
               -1;
    }
    /* JIT where the machine has it; the interpreter otherwise, same matches */
    t->splits[t->n_splits].jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    t->splits[t->n_splits++].re = re;
    return 0;
}

static int load_byte_level(loader *l, const cJSON *pt, const char *where) {
    int prefix, use_regex;
    if (get_bool(l, pt, "add_prefix_space", where, 0, &prefix) ||
        get_bool(l, pt, "use_regex", where, 1, &use_regex))
        return -1;
    if (prefix)
        return lfail(l, MPMD_ERR_FORMAT,
                     "%s.add_prefix_space is true: not supported (it adds a space the text does not have, so "
                     "decoding would not give the text back)",
                     where),
               -1;
    if (use_regex) return add_split(l, gpt2_pattern, sizeof gpt2_pattern - 1, 0, where);
    return 0;
}

static int load_split(loader *l, const cJSON *pt, const char *where) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
    if (!cJSON_IsObject(pat) || (!cJSON_IsString(re) && !cJSON_IsString(str)))
        return lfail(l, MPMD_ERR_FORMAT, "%s.pattern is not {\"Regex\": \"...\"} or {\"String\": \"...\"}",
                     where),
               -1;
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
        return lfail(l, MPMD_ERR_FORMAT,
                     "%s.behavior is %s%s%s: only \"Isolated\" is supported (every match its own piece)",
                     where, cJSON_IsString(beh) ? "\"" : "",
                     cJSON_IsString(beh) ? beh->valuestring : "missing", cJSON_IsString(beh) ? "\"" : ""),
               -1;
    if (refuse_set(l, pt, "invert", where, "inverted splits are not supported")) return -1;
    const char *p = cJSON_IsString(re) ? re->valuestring : str->valuestring;
    if (!*p) return lfail(l, MPMD_ERR_FORMAT, "%s.pattern is empty", where), -1;
    char w[200];
    snprintf(w, sizeof w, "%s.pattern", where);
    return add_split(l, p, strlen(p), !cJSON_IsString(re), w);
}

static int load_pre_tokenizer(loader *l, const cJSON *pt) {
    const char *ty = type_of(pt);
    if (!cJSON_IsObject(pt) || !ty)
        return lfail(l, MPMD_ERR_FORMAT,
                     "pre_tokenizer is %s: a byte-level BPE needs a ByteLevel pre-tokenizer (or a Sequence "
                     "that "
                     "ends with one)",
                     cJSON_IsNull(pt) || !pt ? "missing" : "not an object with a \"type\""),
               -1;
    if (!strcmp(ty, "ByteLevel")) return load_byte_level(l, pt, "pre_tokenizer");
    if (strcmp(ty, "Sequence") != 0)
        return lfail(l, MPMD_ERR_FORMAT,
                     "pre_tokenizer is \"%s\": supported are ByteLevel and a Sequence of Split and ByteLevel",
                     ty),
               -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (!cJSON_IsArray(list))
        return lfail(l, MPMD_ERR_FORMAT, "pre_tokenizer.pretokenizers is not a list"), -1;
    int n = cJSON_GetArraySize(list), k = 0, byte_level = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        char where[96];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", k);
        const char *sub = type_of(it);
        if (!sub) return lfail(l, MPMD_ERR_FORMAT, "%s has no \"type\"", where), -1;
        if (!strcmp(sub, "ByteLevel")) {
            if (k != n - 1)
                return lfail(
                           l, MPMD_ERR_FORMAT,
                           "%s: ByteLevel must come last in the Sequence (later pre-tokenizers would see its "
                           "byte characters)",
                           where),
                       -1;
            if (load_byte_level(l, it, where)) return -1;
            byte_level = 1;
        } else if (!strcmp(sub, "Split")) {
            if (load_split(l, it, where)) return -1;
        } else {
            return lfail(l, MPMD_ERR_FORMAT,
                         "%s is \"%s\": inside a Sequence only Split and ByteLevel are supported", where,
                         sub),
                   -1;
        }
        k++;
    }
    if (!byte_level)
        return lfail(l, MPMD_ERR_FORMAT,
                     "pre_tokenizer: the Sequence has no ByteLevel pre-tokenizer, which a byte-level BPE "
                     "needs"),
               -1;
    return 0;
}

/* The vocabulary: every (text, id); the ids' table is sized already. */
static int load_vocab(loader *l, const cJSON *vocab, unsigned char *scratch) {
    mpmd_tokenizer *t = l->t;
    const cJSON *it;
    char q[64];
    cJSON_ArrayForEach(it, vocab) {
        const char *s = it->string;
        size_t n = strlen(s);
        char where[96];
        snprintf(where, sizeof where, "model.vocab[%s]", quoted(q, sizeof q, s, n));
        int32_t id;
        if (get_id(l, it, where, &id)) return -1;
        if (t->kind[id] != TOK_NONE) {
            char q2[64];
            return lfail(l, MPMD_ERR_FORMAT, "model.vocab: id %d is given to both %s and %s", (int)id,
                         quoted(q2, sizeof q2, t->pool + t->tok_off[id], t->tok_len[id]),
                         quoted(q, sizeof q, s, n)),
                   -1;
        }
        long k = bytes_of(s, n, scratch);
        size_t len = k < 0 ? n : (size_t)k;
        uint32_t off = pool_put(t, scratch, len);
        if (off == UINT32_MAX) return nomem(l), -1;
        t->kind[id] = TOK_MODEL;
        t->tok_off[id] = off;
        t->tok_len[id] = (uint32_t)len;
        /* only byte-level entries can come out of BPE; the others are decoded, never made */
        if (k >= 0 && map_insert(t, &t->text_ids, off, (uint32_t)len, id) >= 0)
            return lfail(l, MPMD_ERR_FORMAT, "model.vocab has %s twice", quoted(q, sizeof q, s, n)), -1;
    }
    return 0;
}

static int load_added(loader *l, const cJSON *added) {
    mpmd_tokenizer *t = l->t;
    int n = cJSON_GetArraySize(added), k = 0;
    t->added = calloc(n ? (size_t)n : 1, sizeof *t->added);
    if (!t->added) return nomem(l), -1;
    const cJSON *it;
    char q[64], q2[64];
    cJSON_ArrayForEach(it, added) {
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%d]", k);
        if (!cJSON_IsObject(it)) return lfail(l, MPMD_ERR_FORMAT, "%s is not an object", where), -1;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(content) || !*content->valuestring)
            return lfail(l, MPMD_ERR_FORMAT, "%s.content is missing or not a non-empty string", where), -1;
        const char *s = content->valuestring;
        size_t len = strlen(s);
        if (tok_utf8_valid_prefix((const unsigned char *)s, len) != len)
            return lfail(l, MPMD_ERR_FORMAT, "%s.content is not UTF-8", where), -1;
        int32_t id;
        int special, normalized;
        if (get_id(l, cJSON_GetObjectItemCaseSensitive(it, "id"), where, &id) ||
            get_bool(l, it, "special", where, 0, &special) ||
            get_bool(l, it, "normalized", where, !special, &normalized) ||
            refuse_set(l, it, "lstrip", where,
                       "stripping the spaces before an added token is not supported") ||
            refuse_set(l, it, "rstrip", where,
                       "stripping the spaces after an added token is not supported") ||
            refuse_set(l, it, "single_word", where, "single-word added tokens are not supported"))
            return -1;
        for (int j = 0; j < k; j++)
            if (t->added[j].len == len && !memcmp(t->pool + t->added[j].off, s, len))
                return lfail(l, MPMD_ERR_FORMAT, "%s: %s is added twice (ids %d and %d)", where,
                             quoted(q, sizeof q, s, len), (int)t->added[j].id, (int)id),
                       -1;
        if (t->kind[id] == TOK_ADDED || t->kind[id] == TOK_SPECIAL)
            return lfail(l, MPMD_ERR_FORMAT, "%s: id %d is given to both %s and %s", where, (int)id,
                         quoted(q, sizeof q, t->pool + t->tok_off[id], t->tok_len[id]),
                         quoted(q2, sizeof q2, s, len)),
                   -1;
        /* An added token may repeat a vocabulary entry (GPT-2's <|endoftext|>
         * is both), but not rename one: decode must give one text per id. */
        if (t->kind[id] == TOK_MODEL &&
            (t->tok_len[id] != len || memcmp(t->pool + t->tok_off[id], s, len) != 0))
            return lfail(l, MPMD_ERR_FORMAT, "%s: id %d is the vocabulary's %s, not %s", where, (int)id,
                         quoted(q, sizeof q, t->pool + t->tok_off[id], t->tok_len[id]),
                         quoted(q2, sizeof q2, s, len)),
                   -1;
        uint32_t off = pool_put(t, s, len);
        if (off == UINT32_MAX) return nomem(l), -1;
        t->added[k] = (tok_added){off, (uint32_t)len, id, special, normalized};
        t->kind[id] = special ? TOK_SPECIAL : TOK_ADDED;
        t->tok_off[id] = off;
        t->tok_len[id] = (uint32_t)len;
        k++;
    }
    t->n_added = k;
    /* by first byte (a counting sort), so that encode looks only at the
       added tokens that can start where it is */
    t->added_order = malloc((k ? (size_t)k : 1) * sizeof *t->added_order);
    if (!t->added_order) return nomem(l), -1;
    memset(t->added_start, 0, sizeof t->added_start);
    for (int j = 0; j < k; j++)
        t->added_start[(unsigned char)t->pool[t->added[j].off] + 1]++;
    for (int b = 0; b < 256; b++)
        t->added_start[b + 1] += t->added_start[b];
    int fill[256];
    memcpy(fill, t->added_start, sizeof fill);
    for (int j = 0; j < k; j++)
        t->added_order[fill[(unsigned char)t->pool[t->added[j].off]]++] = j;
    return 0;
}

/* One merge: "a b" or ["a", "b"], to its two sides. */
static int merge_sides(loader *l, const cJSON *m, int i, const char **a, size_t *na, const char **b,
                       size_t *nb) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
            return lfail(l, MPMD_ERR_FORMAT,
                         "model.merges[%d] \"%.60s\" is not two tokens separated by one space", i, s),
                   -1;
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next) && *m->child->valuestring && *m->child->next->valuestring) {
        *a = m->child->valuestring, *na = strlen(*a);
        *b = m->child->next->valuestring, *nb = strlen(*b);
        return 0;
    }
    return lfail(l, MPMD_ERR_FORMAT,
                 "model.merges[%d] is not a string \"a b\" or a pair [\"a\", \"b\"] of tokens", i),
           -1;
}

static int load_merges(loader *l, const cJSON *merges, unsigned char *scratch) {
    mpmd_tokenizer *t = l->t;
    size_t n = (size_t)cJSON_GetArraySize(merges), cap = 16;
    while (cap < n * 2)
        cap *= 2;
    t->merges.slots = malloc(cap * sizeof *t->merges.slots);
    if (!t->merges.slots) return nomem(l), -1;
    for (size_t i = 0; i < cap; i++)
        t->merges.slots[i].key = UINT64_MAX;
    t->merges.mask = cap - 1;
    const cJSON *m;
    int i = 0;
    char q[64];
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t na, nb;
        if (merge_sides(l, m, i, &a, &na, &b, &nb)) return -1;
        long ka = bytes_of(a, na, scratch), kb = ka < 0 ? -1 : bytes_of(b, nb, scratch + ka);
        if (ka < 0 || kb < 0) { /* a side BPE never makes: the merge cannot apply */
            i++;
            continue;
        }
        int32_t ia = tok_strmap_find(t, &t->text_ids, scratch, (size_t)ka);
        int32_t ib = tok_strmap_find(t, &t->text_ids, scratch + ka, (size_t)kb);
        int32_t im = tok_strmap_find(t, &t->text_ids, scratch, (size_t)(ka + kb));
        if (ia < 0 || ib < 0 || im < 0) {
            const char *what = ia < 0 ? a : ib < 0 ? b : NULL;
            size_t wn = ia < 0 ? na : nb;
            if (what)
                return lfail(l, MPMD_ERR_FORMAT, "model.merges[%d]: %s is not in the vocabulary", i,
                             quoted(q, sizeof q, what, wn)),
                       -1;
            char both[128];
            snprintf(both, sizeof both, "%.*s%.*s", (int)(na < 60 ? na : 60), a, (int)(nb < 60 ? nb : 60), b);
            return lfail(l, MPMD_ERR_FORMAT, "model.merges[%d]: the merged token %s is not in the vocabulary",
                         i, quoted(q, sizeof q, both, strlen(both))),
                   -1;
        }
        /* A pair listed twice keeps its last rank, as Hugging Face's map does. */
        uint64_t key = tok_pair(ia, ib);
        size_t s = (size_t)tok_mix64(key) & t->merges.mask;
        while (t->merges.slots[s].key != UINT64_MAX && t->merges.slots[s].key != key)
            s = (s + 1) & t->merges.mask;
        if (t->merges.slots[s].key == UINT64_MAX) t->merges.count++;
        t->merges.slots[s] = (tok_merge_slot){key, (uint32_t)i, im};
        i++;
    }
    return 0;
}

static int check_model(loader *l, const cJSON *model) {
    const char *ty = type_of(model);
    if (!cJSON_IsObject(model)) return lfail(l, MPMD_ERR_FORMAT, "model is missing or not an object"), -1;
    if (ty && strcmp(ty, "BPE") != 0)
        return lfail(l, MPMD_ERR_FORMAT, "model.type is \"%s\": only BPE models are supported", ty), -1;
    if (refuse_set(l, model, "dropout", "model", "BPE dropout is for training a tokenizer, not supported") ||
        refuse_set(l, model, "byte_fallback", "model",
                   "byte fallback (SentencePiece-style BPE) is not supported") ||
        refuse_set(l, model, "continuing_subword_prefix", "model", "subword prefixes are not supported") ||
        refuse_set(l, model, "end_of_word_suffix", "model", "end-of-word suffixes are not supported") ||
        get_bool(l, model, "ignore_merges", "model", 0, &l->t->ignore_merges))
        return -1;
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(model, "vocab")))
        return lfail(l, MPMD_ERR_FORMAT, "model.vocab is missing or not an object"), -1;
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(model, "merges")))
        return lfail(l, MPMD_ERR_FORMAT, "model.merges is missing or not a list"), -1;
    return 0;
}

static int build(loader *l, const cJSON *root) {
    mpmd_tokenizer *t = l->t;
    if (!cJSON_IsObject(root)) return lfail(l, MPMD_ERR_FORMAT, "the JSON is not an object"), -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (check_model(l, model)) return -1;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return lfail(
                   l, MPMD_ERR_FORMAT,
                   "normalizer is %s%s%s: not supported (mpmd applies no normalization, e.g. no Unicode NFC)",
                   type_of(norm) ? "\"" : "", type_of(norm) ? type_of(norm) : "set",
                   type_of(norm) ? "\"" : ""),
               -1;
    if (refuse_set(l, root, "truncation", "tokenizer", "truncation would drop text, not supported"))
        return -1;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!type_of(dec) || strcmp(type_of(dec), "ByteLevel") != 0)
        return lfail(l, MPMD_ERR_FORMAT, "decoder is %s%s%s: a byte-level BPE needs the ByteLevel decoder",
                     type_of(dec) ? "\"" : "", type_of(dec) ? type_of(dec) : "missing",
                     type_of(dec) ? "\"" : ""),
               -1;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return lfail(l, MPMD_ERR_FORMAT, "added_tokens is not a list"), -1;

    /* the id space first (the largest id, and the longest string for the scratch buffer) */
    int32_t max_id = -1;
    size_t longest = 1;
    const cJSON *it;
    char q[64];
    cJSON_ArrayForEach(it, vocab) {
        int32_t id;
        char where[96];
        snprintf(where, sizeof where, "model.vocab[%s]", quoted(q, sizeof q, it->string, strlen(it->string)));
        if (get_id(l, it, where, &id)) return -1;
        if (id > max_id) max_id = id;
        size_t n = strlen(it->string);
        if (n > longest) longest = n;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *idv = cJSON_GetObjectItemCaseSensitive(it, "id");
        /* a bad id is reported by load_added, with the entry's index */
        if (cJSON_IsNumber(idv) && idv->valuedouble >= 0 && idv->valuedouble <= TOK_MAX_ID &&
            (int32_t)idv->valuedouble > max_id)
            max_id = (int32_t)idv->valuedouble;
    }
    cJSON_ArrayForEach(it, merges) {
        size_t n = cJSON_IsString(it) ? strlen(it->valuestring)
                   : cJSON_IsArray(it) && cJSON_IsString(it->child) && cJSON_IsString(it->child->next)
                       ? strlen(it->child->valuestring) + strlen(it->child->next->valuestring)
                       : 0;
        if (n > longest) longest = n;
    }
    if (max_id < 0) return lfail(l, MPMD_ERR_FORMAT, "model.vocab is empty"), -1;
    t->n_ids = max_id + 1;
    t->kind = calloc((size_t)t->n_ids, 1);
    t->tok_off = calloc((size_t)t->n_ids, sizeof *t->tok_off);
    t->tok_len = calloc((size_t)t->n_ids, sizeof *t->tok_len);
    unsigned char *scratch = malloc(2 * longest + 8);
    if (!t->kind || !t->tok_off || !t->tok_len || !scratch ||
        map_init(&t->text_ids, (size_t)cJSON_GetArraySize(vocab)) != 0) {
        free(scratch);
        return nomem(l), -1;
    }
    int bad = load_vocab(l, vocab, scratch);
    if (!bad) {
        for (int b = 0; b < 256; b++) {
            unsigned char byte = (unsigned char)b;
            t->byte_id[b] = tok_strmap_find(t, &t->text_ids, &byte, 1);
            if (t->byte_id[b] < 0) {
                char ch[8];
                unsigned cp = tok_byte_char[b];
                snprintf(ch, sizeof ch, "%c%c", (char)(0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f)));
                if (cp < 0x80) snprintf(ch, sizeof ch, "%c", (char)cp);
                bad =
                    lfail(l, MPMD_ERR_FORMAT,
                          "model.vocab has no token for byte 0x%02x (\"%s\"): a byte-level BPE needs one for "
                          "each of the 256 bytes",
                          b, ch);
                break;
            }
        }
    }
    if (!bad) bad = load_merges(l, merges, scratch);
    free(scratch);
    if (bad) return -1;
    if (added && !cJSON_IsNull(added) && load_added(l, added)) return -1;
    return load_pre_tokenizer(l, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
}

/* Line and column (from 1) of offset `at` in the text. */
static void line_col(const char *s, size_t at, size_t *line, size_t *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (s[i] == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

mpmd_status mpmd_tokenizer_load_json(const char *json, size_t len, const char *name, mpmd_tokenizer **out,
                                     mpmd_error *err) {
    if (out) *out = NULL;
    if (!json || !out)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_tokenizer_load_json: NULL %s",
                              json ? "out" : "json");
    if (!name) name = "(memory)";
    loader l = {NULL, name, err, MPMD_OK};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0, line, col;
        line_col(json, at, &line, &col);
        return lfail(&l, MPMD_ERR_FORMAT, "not valid JSON at line %zu, column %zu (byte %zu)", line, col, at);
    }
    mpmd_tokenizer *t = calloc(1, sizeof *t);
    l.t = t;
    if (!t || !(t->name = strdup(name))) {
        free(t);
        cJSON_Delete(root);
        return nomem(&l);
    }
    build(&l, root);
    cJSON_Delete(root);
    if (l.rc) {
        mpmd_tokenizer_free(t);
        return l.rc;
    }
    *out = t;
    return MPMD_OK;
}

mpmd_status mpmd_tokenizer_load(const char *path, mpmd_tokenizer **out, mpmd_error *err) {
    if (out) *out = NULL;
    if (!path || !out)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_tokenizer_load: NULL %s", path ? "out" : "path");
    FILE *f = fopen(path, "rb");
    if (!f) return mpmd_error_set(err, MPMD_ERR_IO, "cannot open tokenizer %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_IO, "tokenizer %s: not a regular file", path);
    }
    /* a tokenizer.json is megabytes (Llama 3's: 9); 1 GiB is a wrong file */
    if (sb.st_size > (off_t)1 << 30) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "tokenizer %s: %lld bytes, more than the 1 GiB a tokenizer.json "
                              "may have",
                              path, (long long)sb.st_size);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "tokenizer %s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f), why = errno;
    fclose(f);
    if (got != n) {
        free(buf);
        return mpmd_error_set(err, MPMD_ERR_IO, "cannot read tokenizer %s: %s", path,
                              read_err ? strerror(why) : "the file shrank while reading");
    }
    buf[n] = 0;
    mpmd_status rc = mpmd_tokenizer_load_json(buf, n, path, out, err);
    free(buf);
    return rc;
}

void mpmd_tokenizer_free(mpmd_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_splits; i++)
        pcre2_code_free(t->splits[i].re);
    free(t->name);
    free(t->kind);
    free(t->tok_off);
    free(t->tok_len);
    free(t->pool);
    free(t->text_ids.slots);
    free(t->merges.slots);
    free(t->added);
    free(t->added_order);
    free(t);
}
