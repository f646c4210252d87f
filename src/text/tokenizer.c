/* Encoding and decoding with a loaded tokenizer (include/mpmd_tokenizer.h):
 * added tokens, then the pre-tokenizer's splits, then byte-level BPE on
 * each piece, as Hugging Face's tokenizers library does it.
 *
 * Speed. Text repeats its words, so each call keeps a cache from a piece's
 * bytes (pointing into the caller's text, no copy) to its ids; a piece not
 * seen before is merged with the pair->(rank, token) hash map, by a scan
 * over an array for short pieces and by a heap over a linked list for long
 * ones (a megabyte of letters without a space is one piece, which a scan
 * would merge in quadratic time). The expressions run JIT-compiled, on
 * text validated as UTF-8 once (PCRE2 would check the whole subject again
 * at every match otherwise).
 */
#include "text/tok_state.h"

#include <stdio.h>
#include <stdlib.h>

/* Pieces up to this many bytes are merged by scanning and cached. */
#define SHORT_PIECE 256
/* The cache stops growing at this many entries (a few hundred MB of text
 * has fewer distinct words; past it, pieces are merged every time). */
#define CACHE_MAX_ENTRIES (1u << 21)

typedef struct cache_slot {
    const unsigned char *key; /* NULL: empty */
    uint32_t len, hash32;
    uint32_t off, count; /* its ids: enc.cids[off .. off + count) */
} cache_slot;

typedef struct enc {
    const mpmd_tokenizer *t;
    int special;
    mpmd_error *err;
    mpmd_status rc;
    const unsigned char *text; /* for error offsets */
    /* the output */
    int32_t *ids;
    size_t n, cap;
    /* the cache */
    cache_slot *slots;
    size_t mask, count;
    int32_t *cids;
    size_t cn, ccap;
    /* PCRE2 */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    size_t jstack_size;
    /* merge scratch */
    int32_t *sym;
    uint32_t *rank;
    int32_t *made;
    int32_t *prev, *next;
    uint64_t *heap;
    size_t scap;
} enc;

static mpmd_status efail(enc *e, mpmd_status code, const char *what) {
    if (!e->rc) e->rc = mpmd_error_set(e->err, code, "tokenizer %s: %s", e->t->name, what);
    return e->rc;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int emit(enc *e, int32_t id) {
    if (e->n == e->cap && grow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids))
        return efail(e, MPMD_ERR_NOMEM, "out of memory for the ids");
    e->ids[e->n++] = id;
    return 0;
}

/* ---- BPE on one piece ------------------------------------------------------ */

static int scratch(enc *e, size_t n) {
    if (n <= e->scap) return 0;
    size_t c = e->scap ? e->scap : 256;
    while (c < n)
        c *= 2;
    free(e->sym), free(e->rank), free(e->made), free(e->prev), free(e->next), free(e->heap);
    e->sym = malloc(c * sizeof *e->sym);
    e->rank = malloc(c * sizeof *e->rank);
    e->made = malloc(c * sizeof *e->made);
    e->prev = malloc(c * sizeof *e->prev);
    e->next = malloc(c * sizeof *e->next);
    e->heap = malloc(3 * c * sizeof *e->heap); /* m - 1 pairs, then at most 2 per merge */
    e->scap = c;
    if (!e->sym || !e->rank || !e->made || !e->prev || !e->next || !e->heap) {
        e->scap = 0;
        return efail(e, MPMD_ERR_NOMEM, "out of memory for a piece of text");
    }
    return 0;
}

/* The rank of merging a and b (UINT32_MAX: none) and the token it makes. */
static inline uint32_t rank_of(const mpmd_tokenizer *t, int32_t a, int32_t b, int32_t *made) {
    const tok_merge_slot *m = tok_merge_find(&t->merges, a, b);
    if (!m) return UINT32_MAX;
    *made = m->id;
    return m->rank;
}

/* A short piece: sym[0 .. m) the tokens, rank[i] the rank of merging
 * sym[i] with sym[i + 1]. Each round merges the lowest rank, the leftmost
 * of equal ones, and updates the two ranks around it. Returns the count. */
static size_t merge_scan(enc *e, size_t m) {
    const mpmd_tokenizer *t = e->t;
    int32_t *sym = e->sym, *made = e->made;
    uint32_t *rank = e->rank;
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = rank_of(t, sym[i], sym[i + 1], &made[i]);
    while (m > 1) {
        size_t best = 0;
        uint32_t r = rank[0];
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < r) r = rank[i], best = i;
        if (r == UINT32_MAX) break;
        sym[best] = made[best];
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof *rank);
        memmove(made + best + 1, made + best + 2, (m - best - 2) * sizeof *made);
        m--;
        if (best > 0) rank[best - 1] = rank_of(t, sym[best - 1], sym[best], &made[best - 1]);
        if (best + 1 < m) rank[best] = rank_of(t, sym[best], sym[best + 1], &made[best]);
    }
    return m;
}

/* A binary min-heap of (rank << 32 | position). */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

/* A long piece: the same merges in the same order (lowest rank first, then
 * leftmost: the heap's order of (rank, position)), in O(m log m). A popped
 * entry is stale when its left token has merged away or its pair has
 * changed since it was pushed; a pair's rank names its merge, so checking
 * the current pair's rank suffices. Leaves the result in sym[0 .. count). */
static size_t merge_heap(enc *e, size_t m) {
    const mpmd_tokenizer *t = e->t;
    int32_t *sym = e->sym, *prev = e->prev, *next = e->next, made;
    uint64_t *heap = e->heap;
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        uint32_t r = rank_of(t, sym[i], sym[i + 1], &made);
        if (r != UINT32_MAX) heap_push(heap, &hn, (uint64_t)r << 32 | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(top >> 32);
        int32_t i = (int32_t)(uint32_t)top;
        if (sym[i] < 0 || next[i] < 0) continue; /* merged away, or last */
        int32_t j = next[i];
        if (rank_of(t, sym[i], sym[j], &made) != r) continue;
        sym[i] = made;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (prev[i] >= 0) {
            uint32_t rp = rank_of(t, sym[prev[i]], sym[i], &made);
            if (rp != UINT32_MAX) heap_push(heap, &hn, (uint64_t)rp << 32 | (uint32_t)prev[i]);
        }
        if (next[i] >= 0) {
            uint32_t rn = rank_of(t, sym[i], sym[next[i]], &made);
            if (rn != UINT32_MAX) heap_push(heap, &hn, (uint64_t)rn << 32 | (uint32_t)i);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        sym[k++] = sym[i];
    return k;
}

static cache_slot *cache_find(enc *e, const unsigned char *s, size_t n, uint64_t h) {
    if (!e->slots) return NULL;
    for (size_t i = (size_t)h & e->mask;; i = (i + 1) & e->mask) {
        cache_slot *c = &e->slots[i];
        if (!c->key) return c;
        if (c->hash32 == (uint32_t)h && c->len == n && !memcmp(c->key, s, n)) return c;
    }
}

/* Remember the ids of a piece (best effort: a full or failed cache only
 * costs speed). */
static void cache_put(enc *e, const unsigned char *s, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (e->count >= CACHE_MAX_ENTRIES) return;
    if (!e->slots || 2 * (e->count + 1) > e->mask + 1) {
        size_t cap = e->slots ? 2 * (e->mask + 1) : 1 << 12;
        cache_slot *ns = calloc(cap, sizeof *ns);
        if (!ns) return;
        for (size_t i = 0; e->slots && i <= e->mask; i++) {
            if (!e->slots[i].key) continue;
            size_t j = (size_t)tok_hash(e->slots[i].key, e->slots[i].len) & (cap - 1);
            while (ns[j].key)
                j = (j + 1) & (cap - 1);
            ns[j] = e->slots[i];
        }
        free(e->slots);
        e->slots = ns;
        e->mask = cap - 1;
    }
    if (grow((void **)&e->cids, &e->ccap, e->cn + k, sizeof *e->cids)) return;
    cache_slot *c = cache_find(e, s, n, h);
    *c = (cache_slot){s, (uint32_t)n, (uint32_t)h, (uint32_t)e->cn, (uint32_t)k};
    memcpy(e->cids + e->cn, ids, k * sizeof *ids);
    e->cn += k;
    e->count++;
}

static int bpe_piece(enc *e, const unsigned char *s, size_t n) {
    const mpmd_tokenizer *t = e->t;
    if (n == 1) return emit(e, t->byte_id[s[0]]);
    uint64_t h = 0;
    if (n <= SHORT_PIECE) {
        h = tok_hash(s, n);
        cache_slot *c = cache_find(e, s, n, h);
        if (c && c->key) {
            if (grow((void **)&e->ids, &e->cap, e->n + c->count, sizeof *e->ids))
                return efail(e, MPMD_ERR_NOMEM, "out of memory for the ids");
            memcpy(e->ids + e->n, e->cids + c->off, c->count * sizeof *e->ids);
            e->n += c->count;
            return 0;
        }
    }
    if (t->ignore_merges) {
        int32_t id = tok_strmap_find(t, &t->text_ids, s, n);
        if (id >= 0) return emit(e, id);
    }
    if (scratch(e, n)) return e->rc;
    for (size_t i = 0; i < n; i++)
        e->sym[i] = t->byte_id[s[i]];
    size_t k = n <= SHORT_PIECE ? merge_scan(e, n) : merge_heap(e, n);
    if (grow((void **)&e->ids, &e->cap, e->n + k, sizeof *e->ids))
        return efail(e, MPMD_ERR_NOMEM, "out of memory for the ids");
    memcpy(e->ids + e->n, e->sym, k * sizeof *e->ids);
    e->n += k;
    if (n <= SHORT_PIECE) cache_put(e, s, n, h, e->sym, k);
    return 0;
}

/* ---- pre-tokenization ------------------------------------------------------ */

/* Split s[0 .. n) by split `level` (matches and the text between them each
 * a piece, as the Isolated behaviour has it) and pass each piece to the
 * next level; past the last, to BPE. The subject is the piece alone, so
 * that a look-ahead stops at its end, as it does in Hugging Face's, where
 * each piece is a string of its own. An empty match adds nothing: the
 * search goes on one character further. */
static int split_piece(enc *e, int level, const unsigned char *s, size_t n) {
    const mpmd_tokenizer *t = e->t;
    if (!n) return 0;
    if (level == t->n_splits) return bpe_piece(e, s, n);
    const tok_split *sp = &t->splits[level];
    size_t start = 0, prev = 0;
    while (start < n) {
        int rc = sp->jit ? pcre2_jit_match(sp->re, s, n, start, 0, e->md, e->mctx)
                         : pcre2_match(sp->re, s, n, start, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && e->jstack_size < ((size_t)64 << 20)) {
            /* a deep match: retry with a larger JIT stack (32 KiB on the machine stack by default) */
            size_t size = e->jstack_size ? 4 * e->jstack_size : (size_t)1 << 20;
            pcre2_jit_stack *js = pcre2_jit_stack_create(32 << 10, size, NULL);
            if (!js) return efail(e, MPMD_ERR_NOMEM, "out of memory for the pre-tokenizer's match stack");
            pcre2_jit_stack_free(e->jstack);
            e->jstack = js;
            e->jstack_size = size;
            pcre2_jit_stack_assign(e->mctx, NULL, js);
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[200];
            char what[400];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
                snprintf((char *)msg, sizeof msg, "error %d", rc);
            snprintf(what, sizeof what, "pre-tokenizer expression %d fails at byte %zu of the text: %s",
                     level, (size_t)(s + start - e->text), (const char *)msg);
            return efail(e, rc == PCRE2_ERROR_NOMEMORY ? MPMD_ERR_NOMEM : MPMD_ERR_RUNTIME, what);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty (or \K-reversed) match: one character on */
            start = ms > start ? ms : start;
            start++;
            while (start < n && (s[start] & 0xc0) == 0x80)
                start++;
            continue;
        }
        if (ms > prev && split_piece(e, level + 1, s + prev, ms - prev)) return e->rc;
        if (split_piece(e, level + 1, s + ms, me - ms)) return e->rc;
        prev = start = me;
    }
    if (prev < n) return split_piece(e, level + 1, s + prev, n - prev);
    return 0;
}

/* ---- added tokens ---------------------------------------------------------- */

/* Find the added tokens of pass `pass` in s[0 .. n), leftmost first and then
 * the longest at that place, and encode the text between them with the
 * next pass. Hugging Face looks for the tokens that are matched on the text
 * as written (normalized: false, every special token by default) first, and
 * for the others in what is left; mpmd has no normalizer, but keeps that
 * order, which decides between overlapping tokens of the two kinds. */
static int added_pass(enc *e, int pass, const unsigned char *s, size_t n) {
    const mpmd_tokenizer *t = e->t;
    if (!n) return 0;
    if (pass == 2) return split_piece(e, 0, s, n);
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        int lo = t->added_start[s[i]], hi = t->added_start[s[i] + 1];
        if (lo == hi) continue;
        const tok_added *best = NULL;
        for (int k = lo; k < hi; k++) {
            const tok_added *a = &t->added[t->added_order[k]];
            if (a->normalized != pass || (a->special && !e->special)) continue;
            if (a->len > n - i || (best && a->len <= best->len)) continue;
            if (!memcmp(t->pool + a->off, s + i, a->len)) best = a;
        }
        if (!best) continue;
        if (added_pass(e, pass + 1, s + prev, i - prev) || emit(e, best->id)) return e->rc;
        i += best->len - 1;
        prev = i + 1;
    }
    return added_pass(e, pass + 1, s + prev, n - prev);
}

mpmd_status mpmd_tokenizer_encode(const mpmd_tokenizer *t, const char *text, size_t len, unsigned flags,
                                  int32_t **ids, size_t *n, mpmd_error *err) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || (!text && len) || !ids || !n)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_tokenizer_encode: NULL %s",
                              !t     ? "tokenizer"
                              : !ids ? "ids"
                              : !n   ? "n"
                                     : "text");
    if (flags & ~MPMD_TOKENIZE_SPECIAL)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_tokenizer_encode: unknown flags 0x%x",
                              flags & ~MPMD_TOKENIZE_SPECIAL);
    if (len > INT32_MAX) /* positions in a piece are 32-bit */
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "tokenizer %s: %zu bytes of text at once; encode at most 2 GiB in one call",
                              t->name, len);
    const unsigned char *s = (const unsigned char *)text;
    size_t ok = tok_utf8_valid_prefix(s, len);
    if (ok != len)
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "tokenizer %s: the text is not UTF-8 at byte %zu (0x%02x); encode takes UTF-8 text", t->name, ok,
            s[ok]);
    enc e = {0};
    e.t = t;
    e.special = (flags & MPMD_TOKENIZE_SPECIAL) != 0;
    e.err = err;
    e.text = s;
    e.cap = len / 3 + 16; /* about four bytes a token in English; grown as needed */
    e.ids = malloc(e.cap * sizeof *e.ids);
    e.mctx = pcre2_match_context_create(NULL);
    /* ovector pairs for the largest capture count of the splits */
    uint32_t pairs = 1;
    for (int i = 0; i < t->n_splits; i++) {
        uint32_t c = 0;
        pcre2_pattern_info(t->splits[i].re, PCRE2_INFO_CAPTURECOUNT, &c);
        if (c + 1 > pairs) pairs = c + 1;
    }
    e.md = pcre2_match_data_create(pairs, NULL);
    if (!e.ids || !e.mctx || !e.md)
        efail(&e, MPMD_ERR_NOMEM, "out of memory");
    else
        added_pass(&e, 0, s, len);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    pcre2_jit_stack_free(e.jstack);
    free(e.slots), free(e.cids);
    free(e.sym), free(e.rank), free(e.made), free(e.prev), free(e.next), free(e.heap);
    if (e.rc) {
        free(e.ids);
        return e.rc;
    }
    if (!e.n) {
        free(e.ids);
        e.ids = NULL;
    }
    *ids = e.ids;
    *n = e.n;
    return MPMD_OK;
}

/* ---- decoding and lookups ------------------------------------------------------ */

mpmd_status mpmd_tokenizer_decode(const mpmd_tokenizer *t, const int32_t *ids, size_t n, char **text,
                                  size_t *len, mpmd_error *err) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || (!ids && n) || !text || !len)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_tokenizer_decode: NULL %s",
                              !t      ? "tokenizer"
                              : !text ? "text"
                              : !len  ? "len"
                                      : "ids");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || t->kind[ids[i]] == TOK_NONE)
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "tokenizer %s: id %lld at position %zu is no token (the ids are 0 .. %d%s)",
                                  t->name, (long long)ids[i], i, (int)t->n_ids - 1,
                                  ids[i] >= 0 && ids[i] < t->n_ids ? ", with gaps" : "");
        total += t->tok_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "tokenizer %s: out of memory for %zu bytes of text",
                              t->name, total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, t->pool + t->tok_off[ids[i]], t->tok_len[ids[i]]);
        k += t->tok_len[ids[i]];
    }
    out[k] = 0;
    *text = out;
    *len = k;
    return MPMD_OK;
}

int32_t mpmd_tokenizer_vocab_size(const mpmd_tokenizer *t) { return t ? t->n_ids : 0; }

int32_t mpmd_tokenizer_id_of(const mpmd_tokenizer *t, const char *text) {
    if (!t || !text) return -1;
    size_t n = strlen(text);
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len == n && !memcmp(t->pool + t->added[k].off, text, n)) return t->added[k].id;
    return tok_strmap_find(t, &t->text_ids, text, n);
}

const char *mpmd_tokenizer_token_of(const mpmd_tokenizer *t, int32_t id, size_t *len) {
    if (len) *len = 0;
    if (!t || id < 0 || id >= t->n_ids || t->kind[id] == TOK_NONE) return NULL;
    if (len) *len = t->tok_len[id];
    return t->pool + t->tok_off[id];
}

int mpmd_tokenizer_is_special(const mpmd_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && t->kind[id] == TOK_SPECIAL;
}
