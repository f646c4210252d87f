/* rope.h - the frequencies of rotary position embeddings, shared by the
 * CPU and CUDA kernels of mpmd_rope and mpmd_rope_at so that both turn
 * every pair by the same angle. Header-only, C and CUDA (MPMD_ROPE_FN
 * marks the function for both sides there).
 *
 * Pair i of a head of size D (the pair (x[i], x[i + D/2])) at position p
 * turns by the angle p w_i, with w_i = base^(-2i/D) (RoFormer's
 * frequencies, as GPT-NeoX and Hugging Face's LLaMA use them).
 *
 * Llama 3.1 stretches the low frequencies for long contexts (Hugging Face's
 * rope_type "llama3", its rope_scaling factor, low_freq_factor,
 * high_freq_factor and original_max_position_embeddings L). With the
 * wavelength lambda_i = 2 pi / w_i:
 *   lambda_i < L / high_freq_factor   w_i unchanged (high frequencies)
 *   lambda_i > L / low_freq_factor    w_i / factor   (low frequencies)
 *   otherwise                         (1 - s) w_i / factor + s w_i, with
 *                                     s = (L / lambda_i - low_freq_factor)
 *                                         / (high_freq_factor - low_freq_factor)
 * (a smooth blend between the two). factor 0 means no adjustment.
 *
 * Everything is computed in double and rounded once by the kernels (cos and
 * sin of p w_i to f32), so the angle of a position does not depend on how
 * it was given (an offset, or an i32 position).
 */
#ifndef MPMD_UTIL_ROPE_H
#define MPMD_UTIL_ROPE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MPMD_ROPE_FN static __host__ __device__ __forceinline__
#else
#define MPMD_ROPE_FN static inline
#endif

/* The frequency parameters of one rope op: base, and the Llama 3.1
 * adjustment (factor 0: none). */
typedef struct mpmd_rope_freqs {
    double base;
    double factor, low_freq_factor, high_freq_factor;
    double original_positions; /* L */
} mpmd_rope_freqs;

/* w_i for pair i of a head of size D (above). */
MPMD_ROPE_FN double mpmd_rope_inv_freq(mpmd_rope_freqs f, int64_t i, int64_t D) {
    double w = pow(f.base, -2.0 * (double)i / (double)D);
    if (!(f.factor > 0.0)) return w;
    const double two_pi = 6.283185307179586476925286766559;
    double wavelen = two_pi / w;
    if (wavelen < f.original_positions / f.high_freq_factor) return w;
    if (wavelen > f.original_positions / f.low_freq_factor) return w / f.factor;
    double s =
        (f.original_positions / wavelen - f.low_freq_factor) / (f.high_freq_factor - f.low_freq_factor);
    return (1.0 - s) * w / f.factor + s * w;
}

#endif
