/* gpt_files.h - the files gpt reads besides text, written by the tests
 * themselves (no downloads): token files in llm.c's format, optionally
 * broken in one named way (test_gpt_tokens). */
#ifndef MPMD_TEST_GPT_FILES_H
#define MPMD_TEST_GPT_FILES_H

#include <stdint.h>

/* A token file of llm.c's format: a header of 256 int32 (magic, version,
 * count, zeros) and the n ids as little-endian uint16. 0 on success. */
int tu_tokens_write(const char *path, const uint16_t *ids, int64_t n, int32_t magic, int32_t version,
                    int32_t count);

#endif
