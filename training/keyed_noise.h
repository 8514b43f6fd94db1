/* training/keyed_noise.h - random numbers that are functions of a key, not draws from a stream:
 * the dequantisation and augmentation noise of the image and video kinds.  The noise of item idx at
 * training draw `draw` (the number of training losses so far, kept in the model's state) is keyed by
 * (seed, draw, idx), so it is the same in any number of processes (each computes its items of a
 * batch) and after a resume; draw 0 is evaluation's fixed noise. */
#ifndef NF_KEYED_NOISE_H
#define NF_KEYED_NOISE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

/* A uniform in (0, 1) that depends only on (key, k). */
static inline double nf_keyed_uniform(uint64_t key, uint64_t k)
{
    return ((double)(nf_mix64(key ^ nf_mix64(k + 0x9e3779b97f4a7c15ULL)) >> 11) + 0.5) * 0x1.0p-53;
}

/* The key of item idx at training draw `draw` of a model seeded with seed. */
static inline uint64_t nf_noise_key(uint64_t seed, uint64_t draw, size_t idx)
{
    return nf_mix64(seed * 0x632be59bd9b4e019ULL ^ nf_mix64(draw * 0xd1b54a32d192ed03ULL + 0x5851f42d4c957f2dULL) ^
                    nf_mix64((uint64_t)idx + 0x9e3779b97f4a7c15ULL));
}

/* A standard normal from the uniforms k and k + 1 of a key (Box-Muller). */
static inline double nf_keyed_normal(uint64_t key, uint64_t k)
{
    const double u1 = nf_keyed_uniform(key, k), u2 = nf_keyed_uniform(key, k + 1);
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
