/* mixed_text.h - a deterministic text that exercises a tokenizer: prose
 * with contractions in upper and lower case, words of many scripts (Latin
 * with accents and combining marks, Greek, Cyrillic, Arabic, Hebrew,
 * Devanagari, Thai, Chinese, Japanese, Korean, 4-byte letters), emoji
 * (skin tones, ZWJ sequences, flags, variation selectors), runs of spaces,
 * tabs, newlines and CR LF, Unicode spaces, digits and long numbers (ASCII,
 * Arabic-Indic, fullwidth, superscripts), code, URLs, control characters,
 * special tokens and near-misses of them, and words of a few hundred
 * letters. Shared by the tokenizer's tests and its benchmark.
 */
#ifndef MIXED_TEXT_H
#define MIXED_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Leave out the characters on which JavaScript's regular expressions and
 * Unicode's disagree (U+0085 and U+FEFF: JavaScript's \s is not Unicode's
 * White_Space; U+017F, which (?i)'s matches by case folding), so that
 * tokenizers written in JavaScript can be compared on the text. */
#define MIXED_TEXT_JS_SAFE 1u

/* At least `bytes` bytes of valid UTF-8 (a little more: the last piece is
 * whole), a pure function of (bytes, seed, flags), NUL-terminated; *len
 * gets its length. The caller frees it with free(). NULL when out of
 * memory. */
char *mixed_text(size_t bytes, uint64_t seed, unsigned flags, size_t *len);

#endif
