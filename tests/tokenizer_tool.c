/* The tokenizer tests' helper (tests/tokenizer.cmake runs it from scripts):
 *
 *   tokenizer_tool text BYTES SEED [js-safe] OUT
 *       write the mixed test text (examples/models/mixed_text.h)
 *   tokenizer_tool encode TOKENIZER TEXT IDS
 *       encode TEXT with special tokens matched; check that decoding gives
 *       TEXT back byte for byte; write the ids as uint32 little-endian
 *   tokenizer_tool wide-json OUT
 *       write a small byte-level tokenizer.json whose ids go past 65535
 *       (merges of common English pairs from id 66000, <|endoftext|> as id
 *       70000), for the uint32 token files
 *   tokenizer_tool narrow-json OUT
 *       the same with the merges from id 300 and <|endoftext|> as 400
 *
 * Exit status 0 on success, 1 with a message otherwise. */
#include "mixed_text.h"
#include "mpmd_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *fmt, const char *a) {
    fprintf(stderr, "tokenizer_tool: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 1;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) return die("cannot write %s", path);
    return 0;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[size] = 0, *n = (size_t)size;
    return buf;
}

/* GPT-2's byte alphabet as UTF-8 (the JSON strings of a byte-level vocabulary). */
static void byte_char(unsigned b, char *out) {
    unsigned cp;
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae))
        cp = b;
    else
        cp = 0x100 + (b <= 0x20 ? b : b <= 0xa0 ? 33 + b - 0x7f : 67);
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

static int small_json(const char *path, int base, int eot) {
    /* ids 0..255 the bytes, then a gap, then the merges from `base`, <|endoftext|> at `eot` */
    static const char *const merges[][2] = {{"t", "h"},  {"th", "e"},  {"Ġ", "the"}, {"i", "n"}, {"a", "n"},
                                            {"an", "d"}, {"Ġ", "and"}, {"e", "r"},   {"o", "n"}, {"Ġ", "a"},
                                            {"r", "e"},  {"a", "t"},   {"e", "n"},   {"Ġ", "t"}, {"o", "u"}};
    size_t nm = sizeof merges / sizeof *merges;
    FILE *f = fopen(path, "w");
    if (!f) return die("cannot write %s", path);
    fprintf(f,
            "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"normalizer\":null,\n"
            "\"added_tokens\":[{\"id\":%d,\"content\":\"<|endoftext|>\",\"single_word\":false,"
            "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\n"
            "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
            "\"use_regex\":true},\n\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\n"
            "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"vocab\":{",
            eot);
    for (unsigned b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        fprintf(f, "%s\"%s%s\":%u", b ? "," : "", b == '"' || b == '\\' ? "\\" : "", c, b);
    }
    for (size_t i = 0; i < nm; i++)
        fprintf(f, ",\"%s%s\":%zu", merges[i][0], merges[i][1], (size_t)base + i);
    fprintf(f, "},\"merges\":[");
    for (size_t i = 0; i < nm; i++)
        fprintf(f, "%s\"%s %s\"", i ? "," : "", merges[i][0], merges[i][1]);
    fprintf(f, "]}}\n");
    if (fclose(f) != 0) return die("cannot write %s", path);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "text")) {
        size_t bytes = (size_t)strtoull(argv[2], NULL, 10), len;
        unsigned long long seed = strtoull(argv[3], NULL, 10);
        unsigned flags = argc >= 6 && !strcmp(argv[4], "js-safe") ? MIXED_TEXT_JS_SAFE : 0;
        char *t = mixed_text(bytes, seed, flags, &len);
        if (!t) return die("%s", "out of memory");
        int rc = write_file(argv[argc - 1], t, len);
        free(t);
        return rc;
    }
    if (argc == 5 && !strcmp(argv[1], "encode")) {
        mpmd_error err;
        mpmd_tokenizer *tok;
        if (mpmd_tokenizer_load(argv[2], &tok, &err)) return die("%s", err.msg);
        size_t n, len, back_len;
        char *text = read_file(argv[3], &len), *back = NULL;
        if (!text) return die("cannot read %s", argv[3]);
        int32_t *ids;
        if (mpmd_tokenizer_encode(tok, text, len, MPMD_TOKENIZE_SPECIAL, &ids, &n, &err) ||
            mpmd_tokenizer_decode(tok, ids, n, &back, &back_len, &err))
            return die("%s", err.msg);
        if (back_len != len || memcmp(back, text, len) != 0) {
            size_t i = 0;
            while (i < len && i < back_len && back[i] == text[i])
                i++;
            fprintf(stderr,
                    "tokenizer_tool: decode(encode(x)) != x: %zu bytes back for %zu, first difference at "
                    "byte %zu\n",
                    back_len, len, i);
            return 1;
        }
        uint32_t *le = malloc((n ? n : 1) * 4);
        if (!le) return die("%s", "out of memory");
        for (size_t i = 0; i < n; i++) {
            unsigned char *p = (unsigned char *)&le[i];
            uint32_t v = (uint32_t)ids[i];
            p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
            p[3] = (unsigned char)(v >> 24);
        }
        int rc = write_file(argv[4], le, n * 4);
        printf("%s: %zu bytes -> %zu tokens; decode(encode(text)) == text\n", argv[3], len, n);
        free(le), free(ids), free(back), free(text);
        mpmd_tokenizer_free(tok);
        return rc;
    }
    if (argc == 3 && !strcmp(argv[1], "wide-json")) return small_json(argv[2], 66000, 70000);
    if (argc == 3 && !strcmp(argv[1], "narrow-json")) return small_json(argv[2], 300, 400);
    fprintf(stderr, "usage: tokenizer_tool text BYTES SEED [js-safe] OUT | encode TOKENIZER TEXT IDS | "
                    "wide-json OUT | narrow-json OUT\n");
    return 2;
}
