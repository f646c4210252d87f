/* exact.h - the exact sum of squares of f32 values, for global norms that
 * are the same bits however the values are split (over pipeline ranks,
 * FSDP shards, model ranks) and in whatever order the parts are added.
 *
 * A finite f32 x is m 2^(e - 150) with an integer m < 2^24 and e in
 * [1, 254] (a subnormal: e = 1 without the hidden bit), so x^2 = m^2
 * 2^(2e - 300), an integer of at most 48 bits at bit 2e of a fixed-point
 * number whose unit is 2^-300. The sum of up to 2^40 squares fits in 600
 * bits: MPMD_EXACT_LIMBS limbs of 16 bits each (limb k holds bits
 * [16k, 16k + 16)), then a count of NaNs and one of infinities. Limbs are
 * carried (mpmd_exact_carry) to below 2^16 before an accumulator leaves
 * the code that filled it, so up to 2^15 accumulators may be added limb by
 * limb as unsigned 32-bit integers in any order (an MPI sum) and carried
 * again: the result is exact, hence independent of the order. It is
 * rounded once, when converted to a double. */
#ifndef MPMD_EXACT_H
#define MPMD_EXACT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the CUDA backend's files are CUDA C++ */
#endif

#define MPMD_EXACT_LIMBS 38
#define MPMD_EXACT_WORDS (MPMD_EXACT_LIMBS + 2) /* the limbs, the NaN count, the infinity count */

/* acc += the squares of x[0 .. n) (acc carried on return). */
void mpmd_exact_add_squares(uint32_t *acc, const float *x, int64_t n);
/* acc += b, limb by limb, then carried. */
void mpmd_exact_add(uint32_t *acc, const uint32_t *b);
/* Carry every limb into the next, so each is below 2^16. */
void mpmd_exact_carry(uint32_t *acc);
/* The accumulated sum rounded once to the nearest double (NaN when a NaN
 * was added, infinity when an infinity was). acc must be carried. */
double mpmd_exact_value(const uint32_t *acc);
/* acc += sum over e of (bins[2e] 2^64 + bins[2e + 1]) 2^(2e), the squares'
 * m^2 summed by their f32 exponent e (1 .. 254) as 128-bit integers (high,
 * low), as a device reduces them; bins[2 * 256 + 1] NaNs and
 * bins[2 * 257 + 1] infinities. */
#define MPMD_EXACT_BINS 258
void mpmd_exact_add_bins(uint32_t *acc, const uint64_t *bins);

#ifdef __cplusplus
}
#endif

#endif
