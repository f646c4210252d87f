/* What the tokenizer's encoder (tokenizer.c) and its loader
 * (tokenizer_load.c) both use: GPT-2's byte alphabet, the UTF-8 check and
 * the lookup of a token's text (src/text/tok_state.h). */
#include "text/tok_state.h"

#include <string.h>

/* GPT-2's bytes_to_unicode, as a table: bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF are their own code points; the others (control characters,
 * space, 0x7F..0xA0, 0xAD) are U+0100, U+0101, ... in byte order. */
#define R8(a) a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7
const uint16_t tok_byte_char[256] = {
    R8(0x100), R8(0x108), R8(0x110), R8(0x118), 0x120,    R8(0x21),  R8(0x29),  R8(0x31),  R8(0x39),
    R8(0x41),  R8(0x49),  R8(0x51),  R8(0x59),  R8(0x61), R8(0x69),  R8(0x71),  0x79,      0x7a,
    0x7b,      0x7c,      0x7d,      0x7e,      0x121,    R8(0x122), R8(0x12a), R8(0x132), R8(0x13a),
    0x142,     0xa1,      0xa2,      0xa3,      0xa4,     0xa5,      0xa6,      0xa7,      0xa8,
    0xa9,      0xaa,      0xab,      0xac,      0x143,    0xae,      0xaf,      R8(0xb0),  R8(0xb8),
    R8(0xc0),  R8(0xc8),  R8(0xd0),  R8(0xd8),  R8(0xe0), R8(0xe8),  R8(0xf0),  R8(0xf8)};
#undef R8

size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            /* ASCII runs, 8 bytes at a time */
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            if (i < n && s[i] < 0x80) i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0; /* no overlong 3-byte forms */
            if (c == 0xed) hi = 0x9f; /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90; /* no overlong 4-byte forms */
            if (c == 0xf4) hi = 0x8f; /* nothing past U+10FFFF */
        } else
            return i;
        if (n - i <= need) return i; /* cut short */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80) return i;
        i += need + 1;
    }
    return n;
}

int32_t tok_strmap_find(const mpmd_tokenizer *t, const tok_strmap *m, const void *s, size_t n) {
    uint64_t h = tok_hash(s, n);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const tok_strmap_slot *e = &m->slots[i];
        if (e->id < 0) return -1;
        if (e->hash32 == (uint32_t)h && e->len == n && !memcmp(t->pool + e->off, s, n)) return e->id;
    }
}
