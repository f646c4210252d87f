/* mpmd_tokenizer.h - text to token ids and back, with the tokenizer of a
 * Hugging Face model (its tokenizer.json): byte-level BPE as GPT-2, Llama 3
 * and the Qwen-class models use it.
 *
 *     mpmd_tokenizer *tok;
 *     mpmd_error err;
 *     if (mpmd_tokenizer_load("tokenizer.json", &tok, &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *     int32_t *ids;
 *     size_t n;
 *     if (mpmd_tokenizer_encode(tok, text, strlen(text), MPMD_TOKENIZE_SPECIAL, &ids, &n, &err)) ...
 *     int32_t eot = mpmd_tokenizer_id_of(tok, "<|endoftext|>");   // -1 if there is none
 *     char *back;
 *     size_t len;
 *     if (mpmd_tokenizer_decode(tok, ids, n, &back, &len, &err)) ...   // back == text, len == strlen(text)
 *     free(ids);
 *     free(back);
 *     mpmd_tokenizer_free(tok);
 *
 * What encode does, as Hugging Face's tokenizers library does it:
 * 1. Added tokens (the file's "added_tokens") are found in the text first,
 *    leftmost and then longest, and become their ids; those marked
 *    "special" only with MPMD_TOKENIZE_SPECIAL (without it their text is
 *    encoded like any other text).
 * 2. The text between them is pre-tokenized: split by the pre-tokenizer's
 *    regular expression (GPT-2's with a ByteLevel pre-tokenizer; each
 *    Split's, in order, inside a Sequence, e.g. Llama 3's and Qwen's),
 *    matches and the text between them each one piece. The expressions run
 *    in PCRE2 in UTF mode with Unicode properties (\p{L}, \p{N}; \s is
 *    Unicode's White_Space), JIT-compiled where the machine allows.
 * 3. Each piece is one BPE word: its bytes become their tokens, then the
 *    merge of lowest rank among adjacent pairs is applied, leftmost first,
 *    until none applies (with "ignore_merges", a piece that is a whole
 *    vocabulary entry is that token at once).
 * decode concatenates the tokens' bytes (ByteLevel decoding), so
 * decode(encode(x)) == x for every valid UTF-8 text x.
 *
 * What a tokenizer.json must be (anything else is refused at load with an
 * MPMD_ERR_FORMAT error that names the file and the field): model "BPE"
 * with "vocab" and "merges" (strings "a b" or pairs ["a", "b"]), no
 * dropout, byte_fallback, continuing_subword_prefix or end_of_word_suffix;
 * normalizer null (mpmd does no Unicode normalization, so NFC tokenizers
 * are refused); pre_tokenizer ByteLevel, or a Sequence of Split (pattern
 * Regex or String, behavior Isolated, invert false) and ByteLevel with
 * use_regex false; ByteLevel without add_prefix_space; decoder ByteLevel;
 * every byte having its token; added tokens without lstrip, rstrip and
 * single_word; no truncation. The post_processor is not applied: encode
 * returns the text's tokens only, and a caller adds a beginning-of-text
 * token itself (mpmd_tokenizer_id_of). Ids are below 2^24.
 *
 * Threads: a loaded tokenizer is never changed, so any number of threads
 * may call encode, decode and the lookups on it at once.
 */
#ifndef MPMD_TOKENIZER_H
#define MPMD_TOKENIZER_H

#include "mpmd_error.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

MPMD_API_BEGIN

typedef struct mpmd_tokenizer mpmd_tokenizer;

/* Flags of mpmd_tokenizer_encode. */
#define MPMD_TOKENIZE_SPECIAL 1u /* special tokens written in the text become their ids */

/* Load a tokenizer.json. On success *out is a tokenizer the caller owns
 * (mpmd_tokenizer_free). Errors: MPMD_ERR_IO (cannot read the file),
 * MPMD_ERR_FORMAT (not JSON, with line and column; a field missing, of the
 * wrong type or refused, by its path, e.g. model.merges[12]),
 * MPMD_ERR_NOMEM, MPMD_ERR_INVALID (a NULL argument); every message names
 * the file. On failure *out is NULL. */
mpmd_status mpmd_tokenizer_load(const char *path, mpmd_tokenizer **out, mpmd_error *err);

/* The same from `len` bytes of JSON in memory (not NUL-terminated, not kept
 * after the call); `name` stands for the file in messages. */
mpmd_status mpmd_tokenizer_load_json(const char *json, size_t len, const char *name, mpmd_tokenizer **out,
                                     mpmd_error *err);

/* Free a tokenizer; NULL is allowed. Every pointer it returned is invalid after. */
void mpmd_tokenizer_free(mpmd_tokenizer *tok);

/* The size of the id space: the largest id of a token (model or added) + 1.
 * Every id encode returns is below it. */
int32_t mpmd_tokenizer_vocab_size(const mpmd_tokenizer *tok);

/* Encode `len` bytes of UTF-8 text (NUL bytes are text too). On success
 * *ids is a malloc'ed array of *n ids (NULL when *n is 0) that the caller
 * frees with free(). flags: 0 or MPMD_TOKENIZE_SPECIAL. Errors:
 * MPMD_ERR_FORMAT for text that is not UTF-8 (the message gives the byte
 * offset), MPMD_ERR_RUNTIME when a pre-tokenizer's expression exceeds
 * PCRE2's match limit, MPMD_ERR_NOMEM, MPMD_ERR_INVALID. */
mpmd_status mpmd_tokenizer_encode(const mpmd_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                  int32_t **ids, size_t *n, mpmd_error *err);

/* The text of n ids: their tokens' bytes, one after the other (an added
 * token's bytes are its text as written in the file). On success *text is
 * a malloc'ed buffer of *len bytes plus a terminating NUL, which the caller
 * frees with free(); it may hold bytes that are not UTF-8 where the ids cut
 * a character. MPMD_ERR_INVALID for an id that is no token (the message
 * names it and its position). */
mpmd_status mpmd_tokenizer_decode(const mpmd_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                                  size_t *len, mpmd_error *err);

/* The id of the token whose text is exactly `text` (NUL-terminated), e.g.
 * "<|endoftext|>" or "<|end_of_text|>"; added tokens first, then the
 * model's; -1 when there is none. */
int32_t mpmd_tokenizer_id_of(const mpmd_tokenizer *tok, const char *text);

/* The text of token `id` (its decoded bytes, *len of them; NUL-terminated
 * too), owned by the tokenizer and valid until mpmd_tokenizer_free; NULL
 * (and *len 0) when no token has that id. len may be NULL. */
const char *mpmd_tokenizer_token_of(const mpmd_tokenizer *tok, int32_t id, size_t *len);

/* 1 if `id` is an added token marked special (matched in text only with
 * MPMD_TOKENIZE_SPECIAL), else 0. */
int mpmd_tokenizer_is_special(const mpmd_tokenizer *tok, int32_t id);

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
