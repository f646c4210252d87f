/* sha256.h - streaming SHA-256 (FIPS 180-4), for parameter fingerprints. */
#ifndef MPMD_SHA256_H
#define MPMD_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct mpmd_sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} mpmd_sha256_ctx;

void mpmd_sha256_init(mpmd_sha256_ctx *c);
void mpmd_sha256_update(mpmd_sha256_ctx *c, const void *data, size_t len);
void mpmd_sha256_final(mpmd_sha256_ctx *c, uint8_t out[32]);
/* A digest as 64 lowercase hex digits and a terminator; and finishing
 * straight into that form. */
void mpmd_sha256_hex(const uint8_t d[32], char hex[65]);
void mpmd_sha256_final_hex(mpmd_sha256_ctx *c, char hex[65]);

#endif
