/* llm.c token files, for the tests (gpt_files.h). */
#include "gpt_files.h"

#include <stdio.h>

int tu_tokens_write(const char *path, const uint16_t *ids, int64_t n, int32_t magic, int32_t version,
                    int32_t count) {
    uint8_t head[1024] = {0};
    int32_t h3[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            head[4 * i + b] = (uint8_t)((uint32_t)h3[i] >> (8 * b));
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    for (int64_t k = 0; ok && k < n; k++) {
        uint8_t b[2] = {(uint8_t)(ids[k] & 0xff), (uint8_t)(ids[k] >> 8)};
        ok = fwrite(b, 1, 2, f) == 2;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}
