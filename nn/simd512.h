/* nn/simd512.h - the 16-lane trees of nn/'s AVX-512 files (nn/attention_avx512.c,
 * nn/layernorm_avx512.c); include only where __AVX512F__ is defined.
 *
 * A row's sum in 16 lanes (lane l: entries l, l + 16, ... in order) halved in a tree: stage w adds
 * lane l + w to lane l, w = 8, 4, 2, 1, as the portable code of nn/ writes it; here with shuffles in
 * registers, the same additions, so the same bits. */
#ifndef NF_SIMD512_H
#define NF_SIMD512_H

#include <immintrin.h>

/* The tree of one row's 16 float lanes; lane 0. */
static inline float nf_tree_ps(__m512 v)
{
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}

/* The same in double over 16 lanes held as lo (lanes 0-7) and hi (8-15). */
static inline double nf_tree_pd(__m512d lo, __m512d hi)
{
    __m512d v = _mm512_add_pd(lo, hi);
    v = _mm512_add_pd(v, _mm512_shuffle_f64x2(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_pd(v, _mm512_shuffle_f64x2(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_add_pd(v, _mm512_shuffle_pd(v, v, 0x55));
    return _mm512_cvtsd_f64(v);
}

/* The low and high eight floats of v in double. */
static inline __m512d nf_lo_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline __m512d nf_hi_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

#endif
