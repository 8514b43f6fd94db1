/* nn/layernorm_avx512.c - layer norm rows in AVX-512 (nn/layernorm.h's kernels for nn/layernorm.c).
 *
 * The portable code's operations in its order (nn/layernorm.c: each row's sums in double, 16 lanes
 * halved in a tree, here nn/simd512.h's shuffles), so the same bits; the clones of the portable code
 * summed the lanes in a scalar loop through memory.  Only this file and nn/attention_avx512.c of
 * nn/ are compiled for AVX-512 (the Makefile adds -mavx512f on x86-64).
 */
#include "nn/layernorm_avx512.h"

#if defined(__AVX512F__) && !defined(NF_DOUBLE)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include "nn/simd512.h"

int nf_ln512_compiled(void) { return 1; }

void nf_ln512_forward(float *y, float *cache, const float *x, const float *gamma, const float *beta, int C, int n,
                      double eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * C;
        float *yr = y + (size_t)r * C;
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (int i = 0; i < C; i += 16) {
            const __m512 v = _mm512_loadu_ps(xr + i);
            lo = _mm512_add_pd(lo, nf_lo_pd(v));
            hi = _mm512_add_pd(hi, nf_hi_pd(v));
        }
        const double mean = nf_tree_pd(lo, hi) / C;
        const __m512d md = _mm512_set1_pd(mean);
        lo = hi = _mm512_setzero_pd();
        for (int i = 0; i < C; i += 16) {
            const __m512 v = _mm512_loadu_ps(xr + i);
            const __m512d a = _mm512_sub_pd(nf_lo_pd(v), md), b = _mm512_sub_pd(nf_hi_pd(v), md);
            lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
            hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
        }
        const double rstd = 1.0 / sqrt(nf_tree_pd(lo, hi) / C + eps);
        const float mu = (float)mean, rs = (float)rstd;
        const __m512 muv = _mm512_set1_ps(mu), rsv = _mm512_set1_ps(rs);
        for (int i = 0; i < C; i += 16) {
            const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + i), muv), rsv);
            _mm512_storeu_ps(yr + i, _mm512_add_ps(_mm512_mul_ps(xh, _mm512_loadu_ps(gamma + i)), _mm512_loadu_ps(beta + i)));
        }
        cache[2 * r] = mu;
        cache[2 * r + 1] = rs;
    }
}

void nf_ln512_grad_input(float *dx, const float *base, const float *dy, const float *x, const float *cache,
                         const float *gamma, int C, int n)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C, *br = base ? base + (size_t)r * C : NULL;
        float *dxr = dx + (size_t)r * C;
        const __m512 muv = _mm512_set1_ps(cache[2 * r]), rsv = _mm512_set1_ps(cache[2 * r + 1]);
        __m512d glo = _mm512_setzero_pd(), ghi = _mm512_setzero_pd(), xlo = _mm512_setzero_pd(),
                xhi = _mm512_setzero_pd();
        for (int i = 0; i < C; i += 16) {
            const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(dyr + i), _mm512_loadu_ps(gamma + i));
            const __m512 t = _mm512_mul_ps(_mm512_mul_ps(g, _mm512_sub_ps(_mm512_loadu_ps(xr + i), muv)), rsv);
            glo = _mm512_add_pd(glo, nf_lo_pd(g));
            ghi = _mm512_add_pd(ghi, nf_hi_pd(g));
            xlo = _mm512_add_pd(xlo, nf_lo_pd(t));
            xhi = _mm512_add_pd(xhi, nf_hi_pd(t));
        }
        const __m512 mg = _mm512_set1_ps((float)(nf_tree_pd(glo, ghi) / C));
        const __m512 mgx = _mm512_set1_ps((float)(nf_tree_pd(xlo, xhi) / C));
        for (int i = 0; i < C; i += 16) {
            const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + i), muv), rsv);
            const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(dyr + i), _mm512_loadu_ps(gamma + i));
            const __m512 in = _mm512_sub_ps(_mm512_sub_ps(g, mg), _mm512_mul_ps(xh, mgx));
            const __m512 b = br ? _mm512_loadu_ps(br + i) : _mm512_setzero_ps();
            _mm512_storeu_ps(dxr + i, _mm512_add_ps(b, _mm512_mul_ps(rsv, in)));
        }
    }
}
#else
int nf_ln512_compiled(void) { return 0; }

void nf_ln512_forward(float *y, float *cache, const float *x, const float *gamma, const float *beta, int C, int n,
                      double eps)
{
    (void)y, (void)cache, (void)x, (void)gamma, (void)beta, (void)C, (void)n, (void)eps;
}

void nf_ln512_grad_input(float *dx, const float *base, const float *dy, const float *x, const float *cache,
                         const float *gamma, int C, int n)
{
    (void)dx, (void)base, (void)dy, (void)x, (void)cache, (void)gamma, (void)C, (void)n;
}
#endif
