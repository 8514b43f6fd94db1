/* core/rng.h - seeded random numbers on GSL, with independent streams per thread.
 *
 * An nf_rng is one stream (GSL's mt19937).  nf_rng_alloc(seed, stream) derives the stream's own seed
 * from (seed, stream) with a 64-bit mixing function, so thread t of a run seeded with s always gets
 * stream t of seed s: the same seed and thread count reproduce a run.  The full generator state can
 * be copied out and back (nf_rng_state_size/get/set) for checkpoints that resume exactly.
 */
#ifndef NF_RNG_H
#define NF_RNG_H

#include "core/error.h"

typedef struct nf_rng nf_rng;

nf_rng *nf_rng_alloc(uint64_t seed, uint64_t stream);
void nf_rng_free(nf_rng *r);
/* The underlying gsl_rng*, for GSL samplers not wrapped here (returned as void* to keep GSL out). */
void *nf_rng_gsl(nf_rng *r);

double nf_rng_uniform(nf_rng *r);          /* in (0, 1) */
double nf_rng_normal(nf_rng *r);           /* standard normal */
uint64_t nf_rng_u64(nf_rng *r);            /* 64 random bits */
size_t nf_rng_index(nf_rng *r, size_t n);  /* uniform in 0..n-1 */
/* Draw k from categorical weights w[0..k-1] (non-negative, not necessarily normalised). */
size_t nf_rng_categorical(nf_rng *r, const double *w, size_t k);
/* perm[0..n-1] becomes a uniformly random permutation of 0..n-1. */
void nf_rng_permutation(nf_rng *r, size_t *perm, size_t n);
void nf_rng_fill_normal(nf_rng *r, nf_real *x, size_t n);
void nf_rng_fill_uniform(nf_rng *r, nf_real *x, size_t n, double lo, double hi);

/* Generator state as bytes, for checkpoints. */
size_t nf_rng_state_size(const nf_rng *r);
void nf_rng_state_get(const nf_rng *r, void *bytes);
void nf_rng_state_set(nf_rng *r, const void *bytes);
/* 1 if bytes (nf_rng_state_size of them) is a state the generator can run from. */
int nf_rng_state_valid(const nf_rng *r, const void *bytes);

/* SplitMix64 finaliser: the mixing function used to derive stream seeds. */
uint64_t nf_mix64(uint64_t x);

#endif
