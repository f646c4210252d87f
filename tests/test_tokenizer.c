/* The tokenizer's API (include/mpmd_tokenizer.h) on small tokenizer.json
 * texts built here (tokenizer_npm compares whole vocabularies with other
 * implementations):
 * - BPE merges by rank, the leftmost of equal ranks; long pieces (merged by
 *   a heap) against a plain quadratic BPE written here, on random words of
 *   1 to 700 letters;
 * - ignore_merges; added tokens: special ones only with
 *   MPMD_TOKENIZE_SPECIAL, others always, leftmost then longest;
 *   id_of, token_of, is_special, vocab_size with gaps;
 * - decode(encode(x)) == x on edge cases and random UTF-8; text that is not
 *   UTF-8 refused with its offset; \s is Unicode's White_Space (U+0085 is a
 *   space, U+FEFF is not), as in Hugging Face's and tiktoken's Rust;
 * - Split pre-tokenizers: a literal String, a Sequence of two, an
 *   expression that matches empty strings, one that exceeds PCRE2's match
 *   limit (an error, not a hang);
 * - every refused or malformed tokenizer.json an error that names the file
 *   and the field; threads encoding with one tokenizer at once. */
#include "mpmd_tokenizer.h"
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's byte alphabet, written out independently of the library's table. */
static void byte_char(unsigned b, char *out) {
    static unsigned map[256];
    static int ready;
    if (!ready) {
        unsigned n = 0;
        for (unsigned c = 0; c < 256; c++) {
            int self = (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae;
            map[c] = self ? c : 0x100 + n++;
        }
        ready = 1;
    }
    unsigned cp = map[b];
    if (cp < 0x80)
        snprintf(out, 8, "%s%c", cp == '"' || cp == '\\' ? "\\" : "", (char)cp);
    else
        snprintf(out, 8, "%c%c", (char)(0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f)));
}

/* A byte string in the byte alphabet, as JSON string content. */
static void bl(const char *s, size_t n, char *out) {
    out[0] = 0;
    for (size_t i = 0; i < n; i++)
        byte_char((unsigned char)s[i], out + strlen(out));
}

typedef struct spec {
    const char *merges[16][2];  /* plain bytes; ids 256, 257, ... in order */
    const char *extra_vocab[4]; /* more plain-byte tokens, ids after the merges */
    const char *pre;            /* the pre_tokenizer's JSON (default: GPT-2's ByteLevel) */
    const char *added;          /* the added_tokens list's JSON (default []) */
    const char *model_extra;    /* more fields of "model" */
} spec;

static char *make_json(const spec *sp) {
    size_t cap = 1 << 16;
    char *j = malloc(cap), t[256], u[256];
    int k =
        snprintf(j, cap,
                 "{\"normalizer\": null, \"added_tokens\": %s, \"pre_tokenizer\": %s, "
                 "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\"%s%s, \"vocab\": {",
                 sp->added ? sp->added : "[]",
                 sp->pre ? sp->pre : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
                 sp->model_extra ? ", " : "", sp->model_extra ? sp->model_extra : "");
    for (unsigned b = 0; b < 256; b++) {
        char c[8];
        byte_char(b, c);
        k += snprintf(j + k, cap - (size_t)k, "%s\"%s\": %u", b ? ", " : "", c, b);
    }
    int id = 256;
    for (int m = 0; m < 16 && sp->merges[m][0]; m++) {
        char both[64];
        snprintf(both, sizeof both, "%s%s", sp->merges[m][0], sp->merges[m][1]);
        bl(both, strlen(both), t);
        k += snprintf(j + k, cap - (size_t)k, ", \"%s\": %d", t, id++);
    }
    for (int e = 0; e < 4 && sp->extra_vocab[e]; e++) {
        bl(sp->extra_vocab[e], strlen(sp->extra_vocab[e]), t);
        k += snprintf(j + k, cap - (size_t)k, ", \"%s\": %d", t, id++);
    }
    k += snprintf(j + k, cap - (size_t)k, "}, \"merges\": [");
    for (int m = 0; m < 16 && sp->merges[m][0]; m++) {
        bl(sp->merges[m][0], strlen(sp->merges[m][0]), t);
        bl(sp->merges[m][1], strlen(sp->merges[m][1]), u);
        k += snprintf(j + k, cap - (size_t)k, "%s[\"%s\", \"%s\"]", m ? ", " : "", t, u);
    }
    snprintf(j + k, cap - (size_t)k, "]}}");
    return j;
}

static mpmd_tokenizer *load(const spec *sp) {
    char *j = make_json(sp);
    mpmd_tokenizer *t = NULL;
    mpmd_error err;
    if (mpmd_tokenizer_load_json(j, strlen(j), "t.json", &t, &err)) CHECK(0, "loading: %s", err.msg);
    free(j);
    return t;
}

/* encode text (with flags), compare with want[0 .. nw), check the round trip */
static void expect_ids(const mpmd_tokenizer *t, const char *text, size_t len, unsigned flags,
                       const int32_t *want, size_t nw, const char *what) {
    int32_t *ids;
    size_t n;
    mpmd_error err;
    if (mpmd_tokenizer_encode(t, text, len, flags, &ids, &n, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        return;
    }
    int same = n == nw && (!n || !memcmp(ids, want, n * sizeof *ids));
    CHECK(same, "%s: %zu ids (first %d), want %zu (first %d)", what, n, n ? ids[0] : -1, nw,
          nw ? want[0] : -1);
    char *back;
    size_t bn;
    CHECK(mpmd_tokenizer_decode(t, ids, n, &back, &bn, &err) == MPMD_OK, "%s: decode: %s", what, err.msg);
    CHECK(bn == len && !memcmp(back, text, len) && back[bn] == 0, "%s: decode(encode(x)) != x", what);
    free(back);
    free(ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static void test_merges(void) {
    spec a = {.merges = {{"a", "b"}, {"b", "c"}}};
    mpmd_tokenizer *t = load(&a);
    expect_ids(t, "abc", 3, 0, IDS(256, 'c'), "the lower rank first");
    mpmd_tokenizer_free(t);
    spec b = {.merges = {{"b", "c"}, {"a", "b"}}};
    t = load(&b);
    expect_ids(t, "abc", 3, 0, IDS('a', 256), "ranks the other way");
    mpmd_tokenizer_free(t);
    spec c = {.merges = {{"a", "a"}, {"aa", "aa"}}};
    t = load(&c);
    expect_ids(t, "aaa", 3, 0, IDS(256, 'a'), "the leftmost of equal ranks");
    expect_ids(t, "aaaaa", 5, 0, IDS(257, 'a'), "merged merges");
    expect_ids(t, "aa aa", 5, 0, IDS(256, ' ', 256), "pieces merge apart");
    mpmd_tokenizer_free(t);
    /* ignore_merges: a piece that is a vocabulary entry is that entry */
    spec d = {.merges = {{"a", "b"}}, .extra_vocab = {"abc"}, .model_extra = "\"ignore_merges\": true"};
    t = load(&d);
    expect_ids(t, "abc", 3, 0, IDS(257), "ignore_merges: the whole piece");
    expect_ids(t, "abcd", 4, 0, IDS(256, 'c', 'd'), "ignore_merges: merges otherwise");
    mpmd_tokenizer_free(t);
    d.model_extra = NULL;
    t = load(&d);
    expect_ids(t, "abc", 3, 0, IDS(256, 'c'), "without ignore_merges");
    mpmd_tokenizer_free(t);
}

/* A plain BPE: merge the pair of lowest rank, leftmost first, until none. */
static size_t naive_bpe(const char *s, size_t n, const char *merges[][2], int nm, int32_t *out) {
    static char tok[800][800];
    size_t m = n;
    for (size_t i = 0; i < n; i++)
        tok[i][0] = s[i], tok[i][1] = 0;
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            for (int r = 0; r < nm && (best < 0 || r < best); r++)
                if (!strcmp(tok[i], merges[r][0]) && !strcmp(tok[i + 1], merges[r][1])) best = r, at = i;
        if (best < 0) break;
        size_t la = strlen(tok[at]);
        memcpy(tok[at] + la, tok[at + 1], strlen(tok[at + 1]) + 1);
        memmove(tok[at + 1], tok[at + 2], (m - at - 2) * sizeof tok[0]);
        m--;
    }
    for (size_t i = 0; i < m; i++) {
        out[i] = (unsigned char)tok[i][0];
        for (int r = 0; r < nm; r++) {
            char both[64];
            snprintf(both, sizeof both, "%s%s", merges[r][0], merges[r][1]);
            if (!strcmp(both, tok[i])) out[i] = 256 + r;
        }
    }
    return m;
}

static void test_long_pieces(void) {
    spec sp = {.merges = {{"a", "b"},
                          {"b", "a"},
                          {"ab", "ab"},
                          {"c", "c"},
                          {"ba", "c"},
                          {"abab", "cc"},
                          {"a", "a"},
                          {"cc", "c"},
                          {"aa", "b"},
                          {"bac", "ab"}}};
    int nm = 10;
    mpmd_tokenizer *t = load(&sp);
    static char word[800];
    static int32_t want[800];
    uint64_t s = 12345;
    int lengths = tu_quick() ? 120 : 700;
    for (int len = 1; len <= lengths; len += len < 300 ? 1 : 7) {
        for (int i = 0; i < len; i++) {
            s = tu_mix64(s);
            word[i] = "abc"[s % 3];
        }
        size_t nw = naive_bpe(word, (size_t)len, sp.merges, nm, want);
        char what[64];
        snprintf(what, sizeof what, "a word of %d letters", len);
        expect_ids(t, word, (size_t)len, 0, want, nw, what);
    }
    mpmd_tokenizer_free(t);
}

static void test_added(void) {
    spec sp = {.merges = {{"t", "h"}},
               .added = "[{\"id\": 300, \"content\": \"<|eot|>\", \"special\": true, \"normalized\": false},"
                        " {\"id\": 301, \"content\": \"<x>\", \"special\": false, \"normalized\": true},"
                        " {\"id\": 302, \"content\": \"<x>y\", \"special\": false, \"normalized\": true},"
                        " {\"id\": 1000, \"content\": \"<|pad|>\", \"special\": true}]"};
    mpmd_tokenizer *t = load(&sp);
    const char *s = "th<|eot|>th";
    expect_ids(t, s, strlen(s), MPMD_TOKENIZE_SPECIAL, IDS(256, 300, 256), "a special token, matched");
    expect_ids(t, s, strlen(s), 0, IDS(256, '<', '|', 'e', 'o', 't', '|', '>', 256),
               "a special token as text");
    s = "a<x>b<x>y";
    expect_ids(t, s, strlen(s), 0, IDS('a', 301, 'b', 302), "added tokens always, the longest");
    s = "<|eot|<|eot|>>";
    expect_ids(t, s, strlen(s), MPMD_TOKENIZE_SPECIAL, IDS('<', '|', 'e', 'o', 't', '|', 300, '>'),
               "the leftmost match");
    CHECK(mpmd_tokenizer_vocab_size(t) == 1001, "vocab size %d, want 1001 (the largest id + 1)",
          mpmd_tokenizer_vocab_size(t));
    CHECK(mpmd_tokenizer_id_of(t, "<|eot|>") == 300 && mpmd_tokenizer_id_of(t, "th") == 256 &&
              mpmd_tokenizer_id_of(t, "nope") == -1 && mpmd_tokenizer_id_of(t, "<|pad|>") == 1000,
          "id_of");
    size_t len;
    const char *txt = mpmd_tokenizer_token_of(t, 300, &len);
    CHECK(txt && len == 7 && !strcmp(txt, "<|eot|>"), "token_of(300)");
    txt = mpmd_tokenizer_token_of(t, ' ', &len);
    CHECK(txt && len == 1 && txt[0] == ' ', "token_of(32) is the byte, not its alphabet character");
    CHECK(mpmd_tokenizer_token_of(t, 500, &len) == NULL && len == 0, "token_of a hole");
    CHECK(mpmd_tokenizer_token_of(t, -1, NULL) == NULL && mpmd_tokenizer_token_of(t, 1001, NULL) == NULL,
          "token_of out of range");
    CHECK(mpmd_tokenizer_is_special(t, 300) && !mpmd_tokenizer_is_special(t, 301) &&
              !mpmd_tokenizer_is_special(t, 256),
          "is_special");
    /* decode: an id that is no token names it and its place */
    int32_t bad[3] = {256, 500, 1};
    char *back;
    size_t bn;
    mpmd_error err;
    CHECK(mpmd_tokenizer_decode(t, bad, 3, &back, &bn, &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "id 500 at position 1 is no token") && back == NULL,
          "decode of a hole: %s", err.msg);
    bad[1] = 1001;
    CHECK(mpmd_tokenizer_decode(t, bad, 3, &back, &bn, &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "id 1001"),
          "decode past the end: %s", err.msg);
    mpmd_tokenizer_free(t);
}

static void test_text(void) {
    spec sp = {.merges = {{" ", "\xc2"}, {" ", "\xef"}, {"'", "s"}}};
    mpmd_tokenizer *t = load(&sp);
    static const char *const edge[] = {"",
                                       " ",
                                       "   ",
                                       "\n\n\n",
                                       "\t \t",
                                       "a",
                                       "'s",
                                       "'S's",
                                       "  x  ",
                                       "\r\n",
                                       "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
                                       "e\xcc\x81",
                                       "12345 678",
                                       "\xf4\x8f\xbf\xbf",
                                       "<|endoftext|>"};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        int32_t *ids;
        size_t n;
        mpmd_error err;
        CHECK(mpmd_tokenizer_encode(t, edge[i], strlen(edge[i]), MPMD_TOKENIZE_SPECIAL, &ids, &n, &err) ==
                  MPMD_OK,
              "%s", err.msg);
        char *back;
        size_t bn;
        CHECK(mpmd_tokenizer_decode(t, ids, n, &back, &bn, &err) == MPMD_OK && bn == strlen(edge[i]) &&
                  !memcmp(back, edge[i], bn),
              "round trip of edge case %zu", i);
        CHECK(strlen(edge[i]) || (n == 0 && ids == NULL), "the empty text has no ids");
        free(ids), free(back);
    }
    /* NUL bytes are text */
    expect_ids(t, "a\0b", 3, 0, IDS('a', 0, 'b'), "NUL bytes");
    /* random UTF-8: every code point class, 4-byte ones too */
    uint64_t s = 99;
    for (int r = 0; r < (tu_quick() ? 50 : 400); r++) {
        char buf[256];
        size_t k = 0;
        while (k < 200) {
            s = tu_mix64(s);
            unsigned cp = (unsigned)(s % 5 == 0   ? s % 0x110000
                                     : s % 5 == 1 ? s % 0x80
                                     : s % 5 == 2 ? 0x20
                                                  : s % 0x3000);
            if (cp >= 0xd800 && cp <= 0xdfff) continue;
            if (cp < 0x80)
                buf[k++] = (char)cp;
            else if (cp < 0x800)
                buf[k++] = (char)(0xc0 | cp >> 6), buf[k++] = (char)(0x80 | (cp & 0x3f));
            else if (cp < 0x10000)
                buf[k++] = (char)(0xe0 | cp >> 12), buf[k++] = (char)(0x80 | ((cp >> 6) & 0x3f)),
                buf[k++] = (char)(0x80 | (cp & 0x3f));
            else
                buf[k++] = (char)(0xf0 | cp >> 18), buf[k++] = (char)(0x80 | ((cp >> 12) & 0x3f)),
                buf[k++] = (char)(0x80 | ((cp >> 6) & 0x3f)), buf[k++] = (char)(0x80 | (cp & 0x3f));
        }
        int32_t *ids;
        size_t n, bn;
        char *back;
        mpmd_error err;
        CHECK(mpmd_tokenizer_encode(t, buf, k, 0, &ids, &n, &err) == MPMD_OK, "random text %d: %s", r,
              err.msg);
        CHECK(mpmd_tokenizer_decode(t, ids, n, &back, &bn, &err) == MPMD_OK && bn == k &&
                  !memcmp(back, buf, k),
              "random text %d: decode(encode(x)) != x", r);
        free(ids), free(back);
    }
    /* not UTF-8: refused with the offset */
    static const struct {
        const char *s;
        size_t at;
    } bad[] = {{"ab\x80", 2},      {"\xc0\x80", 0}, {"x\xed\xa0\x80", 1}, {"\xf4\x90\x80\x80", 0},
               {"abc\xe2\x82", 3}, {"\xff", 0},     {"\xe2\x28\xa1", 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 7;
        mpmd_error err;
        char at[64];
        snprintf(at, sizeof at, "not UTF-8 at byte %zu", bad[i].at);
        CHECK(mpmd_tokenizer_encode(t, bad[i].s, strlen(bad[i].s), 0, &ids, &n, &err) == MPMD_ERR_FORMAT &&
                  strstr(err.msg, at) && strstr(err.msg, "t.json") && ids == NULL && n == 0,
              "bad UTF-8 %zu: %s", i, err.msg);
    }
    /* \s is Unicode's White_Space: U+0085 is a space of its own (" " and it
       are two pieces, the merge of " " with its first byte cannot apply),
       U+FEFF is not (" " joins it, as " ?[^\s\p{L}\p{N}]+" says) */
    expect_ids(t, "a \xc2\x85z", 5, 0, IDS('a', ' ', 0xc2, 0x85, 'z'), "U+0085 is white space");
    expect_ids(t, "a \xef\xbb\xbfz", 6, 0, IDS('a', 256 + 1, 0xbb, 0xbf, 'z'), "U+FEFF is not white space");
    expect_ids(t, "it's", 4, 0, IDS('i', 't', 258), "'s a piece");
    mpmd_tokenizer_free(t);
}

static void test_splits(void) {
    /* a literal String split: "." is a dot, not any character */
    spec sp = {
        .merges = {{"a", "."}, {"a", "b"}},
        .pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": "
               "\".\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
               "\"use_regex\": false}]}"};
    mpmd_tokenizer *t = load(&sp);
    expect_ids(t, "a.ab", 4, 0, IDS('a', '.', 257), "a String split");
    mpmd_tokenizer_free(t);
    /* two Splits in a Sequence: digits apart, then a hyphen apart */
    sp.pre =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"\\\\d+\"}, \"behavior\": \"Isolated\"}, {\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, "
        "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    t = load(&sp);
    expect_ids(t, "a.12ab", 6, 0, IDS(256, '1', '2', 'a', 'b'), "two Splits");
    mpmd_tokenizer_free(t);
    /* an expression that matches the empty string: no hang, nothing lost */
    sp.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
             "\"x*\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    t = load(&sp);
    expect_ids(t, "abxxa.", 6, 0, IDS(257, 'x', 'x', 256), "empty matches");
    mpmd_tokenizer_free(t);
    /* catastrophic backtracking: PCRE2's match limit, an error */
    sp.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
             "\"(a+)+$\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    t = load(&sp);
    const char *evil = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab";
    int32_t *ids;
    size_t n;
    mpmd_error err;
    CHECK(mpmd_tokenizer_encode(t, evil, strlen(evil), 0, &ids, &n, &err) == MPMD_ERR_RUNTIME &&
              strstr(err.msg, "pre-tokenizer expression 0 fails"),
          "the match limit: %s", err.msg);
    mpmd_tokenizer_free(t);
}

/* A tokenizer.json with one field changed from a good one, and what the
 * error must say. */
static void expect_refused(const char *json, const char *needle) {
    mpmd_tokenizer *t = (mpmd_tokenizer *)1;
    mpmd_error err;
    err.msg[0] = 0;
    mpmd_status rc = mpmd_tokenizer_load_json(json, strlen(json), "t.json", &t, &err);
    CHECK(rc == MPMD_ERR_FORMAT && t == NULL, "%s: status %d", needle, rc);
    CHECK(strstr(err.msg, "tokenizer t.json: ") == err.msg && strstr(err.msg, needle), "wanted \"%s\" in: %s",
          needle, err.msg);
    mpmd_tokenizer_free(rc ? NULL : t);
}

static void test_errors(void) {
    spec sp = {.merges = {{"a", "b"}}};
    char *good = make_json(&sp);
    mpmd_tokenizer *t;
    mpmd_error err;
    CHECK(mpmd_tokenizer_load_json(good, strlen(good), "t.json", &t, &err) == MPMD_OK, "%s", err.msg);
    mpmd_tokenizer_free(t);
    /* one substitution in the good file each */
    static const struct {
        const char *from, *to, *needle;
    } subs[] = {
        {"{\"normalizer\"", "[{\"normalizer\"", "not valid JSON at line 1"},
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "only BPE models"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer is \"NFC\""},
        {"\"type\": \"BPE\"", "\"type\": \"BPE\", \"byte_fallback\": true", "model.byte_fallback is set"},
        {"\"type\": \"BPE\"", "\"type\": \"BPE\", \"dropout\": 0.1", "model.dropout is set"},
        {"\"a\": 97, ", "", "has no token for byte 0x61"},
        {"[\"a\", \"b\"]", "\"a b c\"", "model.merges[0] \"a b c\" is not two tokens"},
        {"[\"a\", \"b\"]", "[\"a\", \"zz\"]", "model.merges[0]: \"zz\" is not in the vocabulary"},
        {"[\"a\", \"b\"]", "[\"b\", \"a\"]",
         "model.merges[0]: the merged token \"ba\" is not in the vocabulary"},
        {"\"b\": 98", "\"b\": 97", "id 97 is given to both \"a\" and \"b\""},
        {"\"b\": 98", "\"b\": 1e9", "id 1000000000 is not a whole number from 0 to 16777215"},
        {"\"b\": 98", "\"b\": 98.5", "is not a whole number"},
        {"\"b\": 98", "\"b\": \"98\"", "model.vocab[\"b\"]: the id is not a number"},
        {"\"merges\": [", "\"merges\": 7, \"x\": [", "model.merges is missing or not a list"},
        {"\"added_tokens\": []", "\"added_tokens\": [{\"id\": 300, \"content\": \"<m>\", \"lstrip\": true}]",
         "added_tokens[0].lstrip is set"},
        {"\"added_tokens\": []", "\"added_tokens\": [{\"id\": 97, \"content\": \"<m>\"}]",
         "added_tokens[0]: id 97 is the vocabulary's \"a\", not \"<m>\""},
        {"\"added_tokens\": []", "\"added_tokens\": [{\"id\": 300, \"content\": \"\"}]",
         "added_tokens[0].content is missing"},
        {"\"added_tokens\": []",
         "\"added_tokens\": [{\"id\": 300, \"content\": \"<m>\"}, {\"id\": 301, \"content\": \"<m>\"}]",
         "added_tokens[1]: \"<m>\" is added twice"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"Metaspace\"",
         "pre_tokenizer is \"Metaspace\""},
        {"\"add_prefix_space\": false", "\"add_prefix_space\": true", "add_prefix_space is true"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
         "pre_tokenizer.pretokenizers[0].pattern: the expression does not compile at offset 1"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"a\"}, \"behavior\": \"Removed\"}, {\"type\": \"ByteLevel\"}]}",
         "behavior is \"Removed\": only \"Isolated\""},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
         "{\"type\": "
         "\"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}]}",
         "ByteLevel must come last"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}]}",
         "the Sequence has no ByteLevel"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "\"pre_tokenizer\": null", "pre_tokenizer is missing"},
        {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"Metaspace\"}",
         "decoder is \"Metaspace\""},
        {"\"normalizer\": null", "\"normalizer\": null, \"truncation\": {\"max_length\": 5}", "truncation"},
        {"\"model\": {", "\"modelx\": {", "model is missing or not an object"},
    };
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++) {
        const char *at = strstr(good, subs[i].from);
        CHECK(at != NULL, "case %zu: \"%s\" is not in the good file", i, subs[i].from);
        if (!at) continue;
        size_t pre = (size_t)(at - good), fl = strlen(subs[i].from), tl = strlen(subs[i].to);
        char *bad = malloc(strlen(good) + tl + 1);
        memcpy(bad, good, pre);
        memcpy(bad + pre, subs[i].to, tl);
        strcpy(bad + pre + tl, at + fl);
        expect_refused(bad, subs[i].needle);
        free(bad);
    }
    expect_refused("[1, 2]", "the JSON is not an object");
    expect_refused("{\"model\": 1,\n \"x\": }", "not valid JSON at line 2, column 7");
    free(good);
    /* files */
    CHECK(mpmd_tokenizer_load("no/such/tokenizer.json", &t, &err) == MPMD_ERR_IO && t == NULL &&
              strstr(err.msg, "cannot open tokenizer no/such/tokenizer.json"),
          "a missing file: %s", err.msg);
    CHECK(mpmd_tokenizer_load(".", &t, &err) == MPMD_ERR_IO &&
              strstr(err.msg, "tokenizer .: not a regular file"),
          "a directory: %s", err.msg);
    CHECK(mpmd_tokenizer_load(NULL, &t, &err) == MPMD_ERR_INVALID, "NULL path");
    CHECK(mpmd_tokenizer_encode(NULL, "x", 1, 0, NULL, NULL, &err) == MPMD_ERR_INVALID, "NULL tokenizer");
}

typedef struct job {
    const mpmd_tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} job;

static void *encode_job(void *p) {
    job *j = p;
    mpmd_error err;
    if (mpmd_tokenizer_encode(j->t, j->text, j->len, MPMD_TOKENIZE_SPECIAL, &j->ids, &j->n, &err))
        fprintf(stderr, "test_tokenizer: a thread's encode: %s\n", err.msg);
    return NULL;
}

static void test_threads(void) {
    spec sp = {.merges = {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "r"}}};
    mpmd_tokenizer *t = load(&sp);
    size_t len = 0, cap = 200000;
    char *text = malloc(cap);
    while (len + 40 < cap) {
        memcpy(text + len, "the other thermal theory, ", 26);
        len += 26;
    }
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, text, len, NULL, 0};
        CHECK(pthread_create(&th[i], NULL, encode_job, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(jobs[i].ids && jobs[0].ids && jobs[i].n == jobs[0].n &&
                  !memcmp(jobs[i].ids, jobs[0].ids, jobs[0].n * 4),
              "thread %d encoded differently", i);
    }
    for (int i = 0; i < 4; i++)
        free(jobs[i].ids);
    free(text);
    mpmd_tokenizer_free(t);
}

int main(void) {
    test_merges();
    test_long_pieces();
    test_added();
    test_text();
    test_splits();
    test_errors();
    test_threads();
    return tu_report("test_tokenizer");
}
