/* philox.h - the Philox-4x32-10 counter-based generator (Salmon, Moraes,
 * Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
 * as dropout draws its masks: four 32-bit words from a 128-bit counter and
 * a 64-bit key, a pure function of both, so any thread, rank or device
 * draws the same words for the same (key, counter). Header-only, C and
 * CUDA (MPMD_PHILOX_FN marks the functions for both sides there).
 */
#ifndef MPMD_PHILOX_H
#define MPMD_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define MPMD_PHILOX_FN static __host__ __device__ __forceinline__
#else
#define MPMD_PHILOX_FN static inline
#endif

/* One round: two 32x32 -> 64-bit products mix the four words, then the key
 * is bumped by the Weyl constants (the golden ratio and sqrt(3) - 1). */
MPMD_PHILOX_FN void mpmd_philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
}

/* out = Philox-4x32-10(counter, key) */
MPMD_PHILOX_FN void mpmd_philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]}, k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r) k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
        mpmd_philox_round(c, k);
    }
    out[0] = c[0], out[1] = c[1], out[2] = c[2], out[3] = c[3];
}

/* A word u keeps its element when u >= this: rate 2^32 rounded to the
 * nearest integer, so an element is kept with probability 1 - rate to
 * within 2^-33 (rate in (0, 1)). */
MPMD_PHILOX_FN uint32_t mpmd_dropout_threshold(float rate) {
    double t = (double)rate * 4294967296.0 + 0.5;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

#endif
