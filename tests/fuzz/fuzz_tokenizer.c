/* libFuzzer: the tokenizer.json loader (include/mpmd_tokenizer.h) and, for
 * every input it accepts, encode and decode. Any input must load or give an
 * error with a message that names the file, never a crash, a leak or a hang;
 * a loaded tokenizer must give ids below its vocabulary size and
 * decode(encode(x)) == x for texts of many kinds, the input's own bytes
 * among them when they are UTF-8. Seeds: corpus/tokenizer (small byte-level
 * tokenizers: GPT-2's pre-tokenizer, a Sequence of Splits, added and
 * special tokens, ignore_merges). */
#include <mpmd_tokenizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void round_trip(const mpmd_tokenizer *t, const char *text, size_t len, unsigned flags) {
    int32_t *ids;
    size_t n;
    mpmd_error err;
    err.msg[0] = 0;
    mpmd_status rc = mpmd_tokenizer_encode(t, text, len, flags, &ids, &n, &err);
    if (rc) {
        /* refused: not UTF-8, or an expression past PCRE2's limits; said so */
        if (!err.msg[0] || ids || n) abort();
        return;
    }
    int32_t vocab = mpmd_tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab || !mpmd_tokenizer_token_of(t, ids[i], NULL)) abort();
    char *back;
    size_t blen;
    if (mpmd_tokenizer_decode(t, ids, n, &back, &blen, &err)) abort();
    if (blen != len || memcmp(back, text, len) != 0) abort(); /* the promise: decode(encode(x)) == x */
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    mpmd_tokenizer *t = (mpmd_tokenizer *)1;
    mpmd_error err;
    err.msg[0] = 0;
    if (mpmd_tokenizer_load_json((const char *)data, size, "fuzz.json", &t, &err) != MPMD_OK) {
        if (t != NULL || strncmp(err.msg, "tokenizer fuzz.json: ", 21) != 0) abort();
        return 0;
    }
    static const char *const texts[] = {
        "Hello world! It's 12345 tokens<|endoftext|>  \tmore  \n\n",
        "ab abc  aaaa\r\n\xc2\x85\xef\xbb\xbf x",
        "\xce\x9a\xce\xb1\xce\xbb\xce\xb7 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd 'S 'll",
        "<s><|eot|></s>< s>",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (unsigned flags = 0; flags < 2; flags++)
            round_trip(t, texts[i], strlen(texts[i]), flags);
    round_trip(t, (const char *)data, size, 1); /* the input itself, if UTF-8 */
    mpmd_tokenizer_free(t);
    return 0;
}
