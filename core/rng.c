/* core/rng.c - GSL-backed random streams. */
#include "core/rng.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

struct nf_rng {
    gsl_rng *g;
};

uint64_t nf_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

nf_rng *nf_rng_alloc(uint64_t seed, uint64_t stream)
{
    nf_rng *r = nf_calloc(1, sizeof *r, "random number generator");
    if (!r) return NULL;
    r->g = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r->g) {
        free(r);
        nf_error(NF_ENOMEM, "out of memory allocating a random number generator");
        return NULL;
    }
    uint64_t s = nf_mix64(seed ^ nf_mix64(stream + 0x5851f42d4c957f2dULL));
    gsl_rng_set(r->g, (unsigned long)(s & 0xffffffffUL) | 1UL);
    return r;
}

void nf_rng_free(nf_rng *r)
{
    if (!r) return;
    gsl_rng_free(r->g);
    free(r);
}

void *nf_rng_gsl(nf_rng *r) { return r->g; }

double nf_rng_uniform(nf_rng *r) { return gsl_rng_uniform_pos(r->g); }

double nf_rng_normal(nf_rng *r) { return gsl_ran_gaussian_ziggurat(r->g, 1.0); }

uint64_t nf_rng_u64(nf_rng *r)
{
    /* mt19937 yields 32 bits per call. */
    uint64_t hi = gsl_rng_get(r->g), lo = gsl_rng_get(r->g);
    return (hi << 32) | lo;
}

size_t nf_rng_index(nf_rng *r, size_t n)
{
    if (n <= 1) return 0;
    if (n <= 0xffffffffUL) return gsl_rng_uniform_int(r->g, (unsigned long)n);
    return (size_t)(nf_rng_u64(r) % n);
}

size_t nf_rng_categorical(nf_rng *r, const double *w, size_t k)
{
    double total = 0;
    for (size_t i = 0; i < k; i++) total += w[i];
    double u = nf_rng_uniform(r) * total, acc = 0;
    for (size_t i = 0; i < k; i++) {
        acc += w[i];
        if (u < acc) return i;
    }
    return k - 1;
}

void nf_rng_permutation(nf_rng *r, size_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = nf_rng_index(r, i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void nf_rng_fill_normal(nf_rng *r, nf_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = (nf_real)gsl_ran_gaussian_ziggurat(r->g, 1.0);
}

void nf_rng_fill_uniform(nf_rng *r, nf_real *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = (nf_real)(lo + (hi - lo) * gsl_rng_uniform(r->g));
}

size_t nf_rng_state_size(const nf_rng *r) { return gsl_rng_size(r->g); }

void nf_rng_state_get(const nf_rng *r, void *bytes) { memcpy(bytes, gsl_rng_state(r->g), gsl_rng_size(r->g)); }

/* GSL's mt19937 state: 624 words of 32 bits (in unsigned longs) and the position mti in 0..624.
 * A state outside that (a corrupt checkpoint) would index out of bounds, and an all-zero state
 * yields only zeros, on which rejection samplers loop forever. */
int nf_rng_state_valid(const nf_rng *r, const void *bytes)
{
    enum { N = 624 };
    if (gsl_rng_size(r->g) < N * sizeof(unsigned long) + sizeof(int)) return 0;
    const unsigned long *mt = bytes;
    int mti;
    memcpy(&mti, (const char *)bytes + N * sizeof(unsigned long), sizeof mti);
    if (mti < 0 || mti > N) return 0;
    unsigned long any = 0;
    for (int i = 0; i < N; i++) {
        if (mt[i] > 0xffffffffUL) return 0;
        any |= mt[i];
    }
    return any != 0;
}

void nf_rng_state_set(nf_rng *r, const void *bytes) { memcpy(gsl_rng_state(r->g), bytes, gsl_rng_size(r->g)); }
