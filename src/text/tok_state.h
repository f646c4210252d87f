/* tok_state.h - what the tokenizer's loader (tokenizer_load.c) and
 * its encoder and decoder (tokenizer.c) share: the loaded tokenizer, its two
 * hash maps, GPT-2's byte-to-character table and a UTF-8 validator.
 *
 * A loaded tokenizer never changes, so that any number of threads may encode
 * and decode with it at once; per-call state (the pre-token cache, PCRE2's
 * match data) lives in the call.
 */
#ifndef MPMD_TEXT_TOK_STATE_H
#define MPMD_TEXT_TOK_STATE_H

#include "mpmd_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdint.h>
#include <string.h>

/* The largest id a tokenizer.json may give (real vocabularies stay below a
 * million); a larger one would make a tiny hostile file allocate gigabytes. */
#define TOK_MAX_ID ((1 << 24) - 1)
/* Split pre-tokenizers in one Sequence. */
#define TOK_MAX_SPLITS 8

/* ---- hashing ------------------------------------------------------------- */

/* A 64-bit hash of a byte string: 8 bytes at a time, each word mixed by a
 * multiply and xor-shift (the usual fast string hash; not for adversaries,
 * which a tokenizer's own vocabulary is not). */
static inline uint64_t tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}

static inline uint64_t tok_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Byte strings to ids: open addressing with linear probing, the keys kept
 * in the tokenizer's pool (off, len). A slot's id is -1 when it is empty. */
typedef struct tok_strmap_slot {
    uint32_t off, len;
    int32_t id;
    uint32_t hash32; /* the hash's low bits, to skip most memcmp's */
} tok_strmap_slot;

typedef struct tok_strmap {
    tok_strmap_slot *slots;
    size_t mask; /* slot count - 1 (a power of two) */
    size_t count;
} tok_strmap;

/* A merge: the pair of token ids (left << 32 | right) to its rank (its
 * place in the merges list: lower merges first) and the id it makes. */
typedef struct tok_merge_slot {
    uint64_t key; /* UINT64_MAX: empty */
    uint32_t rank;
    int32_t id;
} tok_merge_slot;

typedef struct tok_mergemap {
    tok_merge_slot *slots;
    size_t mask;
    size_t count;
} tok_mergemap;

static inline uint64_t tok_pair(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* The merge of (a, b), or NULL. */
static inline const tok_merge_slot *tok_merge_find(const tok_mergemap *m, int32_t a, int32_t b) {
    uint64_t key = tok_pair(a, b);
    size_t i = (size_t)tok_mix64(key) & m->mask;
    for (;;) {
        const tok_merge_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

/* ---- the tokenizer --------------------------------------------------------- */

enum tok_kind {
    TOK_NONE = 0,    /* no token has this id (a hole in the numbering) */
    TOK_MODEL = 1,   /* a token of the BPE model's vocabulary */
    TOK_ADDED = 2,   /* an added token (matched in the text before pre-tokenization) */
    TOK_SPECIAL = 3, /* an added token marked special */
};

typedef struct tok_added {
    uint32_t off, len; /* its text, in the pool */
    int32_t id;
    int special;
    int normalized; /* Hugging Face matches these in a second pass (see tokenizer.c) */
} tok_added;

typedef struct tok_split {
    pcre2_code *re;
    int jit; /* JIT-compiled */
} tok_split;

struct mpmd_tokenizer {
    char *name;                  /* the file, for messages */
    int32_t n_ids;               /* the largest id + 1 */
    uint8_t *kind;               /* [n_ids] enum tok_kind */
    uint32_t *tok_off, *tok_len; /* [n_ids] each token's text (decoded bytes) in the pool */
    char *pool;
    size_t pool_len, pool_cap;
    int32_t byte_id[256]; /* the token of each single byte */
    tok_strmap text_ids;  /* text -> id: model tokens made of byte characters, then added tokens */
    tok_mergemap merges;
    int ignore_merges; /* a pre-token that is a whole vocabulary entry is that token, merges or not */
    tok_added *added;
    int n_added;
    /* the added tokens by first byte: added[added_order[k]] for k in
       [added_start[b], added_start[b + 1]) start with byte b */
    int added_start[257];
    int *added_order;
    tok_split splits[TOK_MAX_SPLITS];
    int n_splits;
};

/* The token of a text (any kind), or -1. */
int32_t tok_strmap_find(const mpmd_tokenizer *t, const tok_strmap *m, const void *s, size_t n);

/* GPT-2's byte-level alphabet: byte b is the code point tok_byte_char[b] in
 * a tokenizer.json's strings; printable ASCII and Latin-1 stand for
 * themselves, the other 68 bytes for U+0100 onwards, in byte order. */
extern const uint16_t tok_byte_char[256];

/* Length of the valid UTF-8 prefix of s[0 .. n): n when all of it is valid.
 * Valid as RFC 3629 says: shortest forms only, no surrogates, nothing past
 * U+10FFFF (what PCRE2 and every JSON and Rust string require). */
size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n);

#endif
