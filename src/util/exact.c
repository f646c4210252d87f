/* The exact sum of squares of f32 values (exact.h). */
#include "util/exact.h"

#include <math.h>
#include <string.h>

enum { NAN_WORD = MPMD_EXACT_LIMBS, INF_WORD = MPMD_EXACT_LIMBS + 1 };

/* Up to this many m^2 (< 2^48) summed in one 64-bit bin. */
#define BIN_ADDS 65535

/* limb[] += v 2^(2e): v's 16-bit pieces into the 64-bit limb sums
 * (carried later). v < 2^64 shifted by 2e mod 16 spans five limbs. */
static void add_shifted(uint64_t *limb, uint64_t v, int e) {
    const int s = 2 * e, q = s / 16, r = s % 16;
    limb[q] += (v << r) & 0xffff;
    for (int k = 1; k <= 4; k++) {
        const int sh = 16 * k - r;
        if (sh < 64) limb[q + k] += (v >> sh) & 0xffff;
    }
}

/* acc += the 64-bit limb sums (each a sum of 16-bit pieces), carried. */
static void fold_limbs(uint32_t *acc, const uint64_t *limb, uint64_t nans, uint64_t infs) {
    uint64_t carry = 0;
    for (int k = 0; k < MPMD_EXACT_LIMBS; k++) {
        const uint64_t t = limb[k] + carry;
        carry = t >> 16;
        acc[k] += (uint32_t)(t & 0xffff);
    }
    acc[NAN_WORD] += (uint32_t)nans;
    acc[INF_WORD] += (uint32_t)infs;
    mpmd_exact_carry(acc);
}

void mpmd_exact_add_squares(uint32_t *acc, const float *x, int64_t n) {
    uint64_t bin[4][256], limb[MPMD_EXACT_LIMBS + 8];
    uint64_t nans = 0, infs = 0;
    memset(limb, 0, sizeof limb);
    int64_t i = 0;
    while (i < n) {
        memset(bin, 0, sizeof bin);
        /* four interleaved bins: the same exponent twice in a row does not
         * wait on the previous store */
        const int64_t end = n - i > 4 * (int64_t)BIN_ADDS ? i + 4 * (int64_t)BIN_ADDS : n;
        for (; i < end; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            uint32_t e = (u >> 23) & 255u, m = u & 0x7fffffu;
            if (e == 255u) {
                nans += m != 0, infs += m == 0;
                continue;
            }
            const uint32_t h = e != 0; /* the hidden bit; a subnormal has e = 1 without it */
            m |= h << 23;
            e += 1u - h;
            bin[i & 3][e] += (uint64_t)m * m;
        }
        for (int e = 1; e < 255; e++) {
            const uint64_t a = bin[0][e], b = bin[1][e], c = bin[2][e], d = bin[3][e];
            if (a) add_shifted(limb, a, e);
            if (b) add_shifted(limb, b, e);
            if (c) add_shifted(limb, c, e);
            if (d) add_shifted(limb, d, e);
        }
    }
    fold_limbs(acc, limb, nans, infs);
}

void mpmd_exact_add_bins(uint32_t *acc, const uint64_t *bins) {
    uint64_t limb[MPMD_EXACT_LIMBS + 8];
    memset(limb, 0, sizeof limb);
    for (int e = 1; e < 255; e++) {
        const uint64_t hi = bins[2 * e], lo = bins[2 * e + 1];
        if (lo) add_shifted(limb, lo, e);
        if (hi) add_shifted(limb, hi, e + 32); /* hi 2^64 2^(2e) = hi 2^(2 (e + 32)) */
    }
    fold_limbs(acc, limb, bins[2 * 256 + 1], bins[2 * 257 + 1]);
}

void mpmd_exact_carry(uint32_t *acc) {
    uint64_t carry = 0;
    for (int k = 0; k < MPMD_EXACT_LIMBS; k++) {
        const uint64_t t = acc[k] + carry;
        acc[k] = (uint32_t)(t & 0xffff);
        carry = t >> 16;
    }
}

void mpmd_exact_add(uint32_t *acc, const uint32_t *b) {
    for (int k = 0; k < MPMD_EXACT_WORDS; k++)
        acc[k] += b[k];
    mpmd_exact_carry(acc);
}

double mpmd_exact_value(const uint32_t *acc) {
    if (acc[NAN_WORD]) return NAN;
    if (acc[INF_WORD]) return INFINITY;
    int k = MPMD_EXACT_LIMBS - 1;
    while (k >= 0 && !acc[k])
        k--;
    if (k < 0) return 0.0;
    /* the top 64 bits, the bit under them and below as a sticky last bit
     * (a double keeps 53: rounding the 64-bit integer rounds the sum) */
    uint64_t mant = 0;
    int bits = 0, j = k;
    for (; j >= 0 && bits <= 48; j--)
        mant = mant << 16 | acc[j], bits += 16;
    int top = 63; /* bit length of mant */
    while (!(mant >> top & 1))
        top--;
    int fill = 63 - top; /* bits to take from the next limb down */
    uint64_t sticky = 0;
    if (fill > 0) {
        if (j >= 0) {
            mant = mant << fill | (uint64_t)acc[j] >> (16 - fill);
            sticky = acc[j] & ((1u << (16 - fill)) - 1);
        } else {
            mant <<= fill;
        }
        j--;
    }
    for (; j >= 0 && !sticky; j--)
        sticky = acc[j];
    /* mant's last bit is bit (j_low) of the fixed-point sum: 16 (k + 1) - 64 */
    const int low = 16 * (k + 1) - bits - fill;
    return ldexp((double)(mant | (sticky != 0)), low - 300);
}
