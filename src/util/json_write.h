/* Writing JSON: a string, quoted and escaped (the library's trace files and
 * planner reports). */
#ifndef MPMD_UTIL_JSON_WRITE_H
#define MPMD_UTIL_JSON_WRITE_H

#include <stdio.h>

/* s as a JSON string: '"' and '\' escaped, control characters as \u00XX,
 * every other byte as it is (UTF-8 passes through). */
static inline void mpmd_json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

#endif
