/* half.h - the 16-bit float formats as bits: bfloat16 (f32's sign and
 * exponent, 7 mantissa bits) and IEEE binary16. Conversions from f32 round
 * to nearest, ties to even; NaN stays NaN (quiet); to f32 they are exact.
 * Header-only: the CPU backend, checkpoints and tests share it. */
#ifndef MPMD_HALF_H
#define MPMD_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t mpmd_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float mpmd_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t mpmd_f32_to_bf16(float f) {
    uint32_t u = mpmd_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float mpmd_bf16_to_f32(uint16_t h) { return mpmd_bits_f32((uint32_t)h << 16); }

static inline uint16_t mpmd_f32_to_f16(float f) {
    uint32_t u = mpmd_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity (or is one) */
    if (a < 0x38800000u) {                                   /* subnormal or zero in f16 */
        if (a < 0x33000000u) return (uint16_t)sign;          /* below half the smallest subnormal */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14 .. 24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float mpmd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return mpmd_bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) {
        if (!m) return mpmd_bits_f32(sign);
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    return mpmd_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
