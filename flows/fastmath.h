/* flows/fastmath.h - branch-free float exp, log, log1p and tanh for the flows' elementwise kernels,
 * and a vectorised finiteness check.
 *
 * glibc's scalar expf/logf/tanhf are calls the compiler cannot vectorise; these are plain inline
 * arithmetic on the float's bits, so loops marked `omp simd` that use them become SIMD code.
 * Accuracy is a few ulp over the ranges the kernels use (the spline's softmax arguments are <= 0,
 * its logarithms act on normal positive floats); NaN propagates.  The tests that pick special cases
 * look at the bits: under GCC's default -ftrapping-math a float comparison whose result only selects
 * could be sunk into a branch, where it counts as possibly trapping and keeps the loop from being
 * if-converted.  The double build does not use the float functions (its kernels call libm, the
 * reference precision for the tests).
 */
#ifndef NF_FASTMATH_H
#define NF_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"

/* exp(x) = 2^k exp(r), x = k ln2 + r, |r| <= ln2/2 (Cody-Waite), Cephes' degree-6 polynomial;
 * x clamped to [-87.3, 88] so 2^k stays a normal float (the clamp sends NaN to -87.3, so the
 * integer conversion never sees it; the last select returns it). */
static inline float nf_fast_expf(float x)
{
    float xc = x > -87.3f ? x : -87.3f;
    xc = xc < 88.0f ? xc : 88.0f;
    /* k = round(x / ln2) by adding and removing 1.5 * 2^23 (floorf would block vectorisation) */
    float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    float r = xc - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1;
    float v = p * two_k; /* computed before the select: a conditional multiply would block if-conversion */
    return x == x ? v : x;
}

/* log(x) = e ln2 + log(m), x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' logf
 * polynomial in f = m - 1.  For normal x > 0; x = 0 gives -inf, x < 0 and NaN give NaN, +inf gives
 * +inf (denormals are not handled: the kernels never produce them). */
static inline float nf_fast_logf(float x)
{
    int32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int32_t e = ((bits >> 23) & 0xff) - 127, mb = (bits & 0x007fffff) | 0x3f800000;
    int big = mb > 0x3fb504f3; /* m > sqrt(2), on the bits (an integer test cannot trap) */
    mb -= big * (1 << 23);     /* m / 2 */
    e += big;
    float m;
    memcpy(&m, &mb, sizeof m);
    float f = m - 1, z = f * f, fe = (float)e;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    float r = f + y + 0.693359375f * fe;
    /* +0 and -0 give -inf, negatives and NaN give NaN, +inf gives +inf (tests on the bits) */
    int normal = bits > 0 && bits < 0x7f800000, zero = (bits & 0x7fffffff) == 0, inf = bits == 0x7f800000;
    float special = zero ? -INFINITY : (inf ? INFINITY : NAN);
    return normal ? r : special;
}

/* log(1 + t) for t > -1 without losing t when it is tiny: u = 1 + t, log u - ((u - 1) - t) / u. */
static inline float nf_fast_log1pf(float t)
{
    float u = 1 + t;
    return nf_fast_logf(u) - ((u - 1) - t) / u;
}

/* 1 if any of v[0..n) is inf or NaN: v - v is 0 for finite v and NaN otherwise, and a sum with a NaN
 * term is NaN.  The `omp simd` reduction lets the compiler vectorise it (the sum's order does not
 * matter here): the cheap check every output gets. */
static inline int nf_any_nonfinite(const nf_real *v, size_t n)
{
    nf_real probe = 0;
#pragma omp simd reduction(+ : probe)
    for (size_t i = 0; i < n; i++) probe += v[i] - v[i];
    return probe != 0;
}

/* tanh: Cephes' odd polynomial for |x| < 0.625, 1 - 2 / (e^{2|x|} + 1) (signed) beyond. */
static inline float nf_fast_tanhf(float x)
{
    float z = x * x, ax = fabsf(x);
    float p = ((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f;
    float small = (p * z - 3.33332819422e-1f) * z * x + x;
    float big = 1 - 2 / (nf_fast_expf(2 * ax) + 1);
    float sbig = copysignf(big, x);
    return ax < 0.625f ? small : sbig;
}

/* The flows' elementwise exp and tanh in the build's precision: libm in the double build (the tests'
 * reference), the inline float versions above otherwise (libm's are calls per element, and keep a
 * loop from vectorising). */
#ifdef NF_DOUBLE
#define NF_EXP exp
#define NF_TANH tanh
#else
#define NF_EXP nf_fast_expf
#define NF_TANH nf_fast_tanhf
#endif

#endif
