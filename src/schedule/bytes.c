/* mpmd_parse_bytes: byte counts with a binary suffix (include/mpmd_schedule.h). */
#include "mpmd_schedule.h"

#include <ctype.h>
#include <string.h>

int mpmd_parse_bytes(const char *s, int64_t *out) {
    if (!s || !out || !isdigit((unsigned char)*s)) return 1;
    int64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > ((int64_t)1 << 62) / 10) return 1;
        v = v * 10 + (*s - '0');
    }
    int shift = 0;
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        s++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        s++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        s++;
        break;
    case 't':
    case 'T':
        shift = 40;
        s++;
        break;
    default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) s++; /* KiB, GiB */
    if (*s == 'b' || *s == 'B') s++;
    if (*s) return 1;
    if (shift && v > (((int64_t)1 << 62) >> shift)) return 1;
    if (v > ((int64_t)1 << 62)) return 1;
    *out = v << shift;
    return 0;
}
