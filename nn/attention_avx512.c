/* nn/attention_avx512.c - attention's row kernels in AVX-512 (nn/attention.c): the QK RMS norm
 * sixteen rows at a time, and the softmax of a row of scores and its backward.
 *
 * Each gives the bits of the portable code in nn/attention.c (the same operations in the same order,
 * every one correctly rounded, no fused multiply-adds: the build uses -ffp-contract=off), which the
 * vector clones there compiled into scalar chains: a row's sums halved in a tree of 16 lanes went
 * through memory one scalar at a time.  Here the trees are shuffles within registers.  Only this file
 * is compiled for AVX-512 (the Makefile adds -mavx512f on x86-64); nn/attention.c calls it only for
 * the float build on a CPU with AVX-512F.
 *
 * QK norm.  A row of the norm is one head's q or k, dh values (16 in TarFlow's default width 64 with 4 heads):
 *     forward   s = sum_i u_i^2,  r = 1 / sqrt(s / dh + eps),  out_i = (g_i u_i) r
 *     backward  s = sum_i ((g_i dy_i) u_i) r,  m = s / dh,  du_i = r ((g_i dy_i) - (u_i r) m)
 * One row at a time, each sum is a horizontal reduction of one vector and then a scalar square root
 * and division: a chain of dependent operations that left the norm at about a tenth of a TarFlow
 * step.  Here sixteen rows go together: each row's sixteen lane sums (lane l sums entries l, l + 16,
 * ... in order) are transposed into one vector of sixteen row sums by four stages of shuffles, then
 * one vector square root and division serve all sixteen rows.
 *
 * The result is bit for bit that of the scalar reference in nn/attention.c (rms_row and
 * rms_row_backward): the same lane sums, halved in the same tree (stage w adds lane l + w to lane l,
 * w = 8, 4, 2, 1; each stage below is that addition for several rows at once), every operation
 * correctly rounded and in the same order (no fused multiply-adds: the build uses
 * -ffp-contract=off).  Only this file is compiled for AVX-512 (the Makefile adds -mavx512f on
 * x86-64); nn/attention.c calls it only for the float build, dh a multiple of 16 and a CPU with
 * AVX-512F.
 */
#include "nn/attention_avx512.h"

#if defined(__AVX512F__) && !defined(NF_DOUBLE)
#include <immintrin.h>

#include "core/simd512.h"
#include "nn/simd512.h"

int nf_rms16_compiled(void) { return 1; }

/* Sixteen vectors of lane sums (v[r]: row r's) into one vector of the sixteen rows' tree sums. */
static __m512 transpose_sums(__m512 v[16])
{
    __m512 a[8], b[4], c[2];
    /* w = 8: rows 2k, 2k+1 -> [row 2k's lanes 0-7 | row 2k+1's], each lane l + its lane l + 8 */
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
    /* w = 4: 128-bit lane q of b[j] holds row 4j + q's lanes 0-3 */
    for (int j = 0; j < 4; j++)
        b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xDD));
    /* w = 2: 128-bit lane q of c[i] holds rows 8i + q and 8i + 4 + q, lanes 0-1 each */
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* w = 1: entry 4q + s holds row q + 4s; put row r at entry r */
    const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, d);
}

void nf_rms16_forward(float *out, size_t ldo, float *rstd, size_t ldr, const float *u, size_t ldu, const float *g,
                      int dh, float eps)
{
    __m512 v[16];
    for (int r = 0; r < 16; r++) {
        const float *ur = u + r * ldu;
        __m512 s = _mm512_setzero_ps();
        for (int i = 0; i < dh; i += 16) {
            const __m512 x = _mm512_loadu_ps(ur + i);
            s = _mm512_add_ps(s, _mm512_mul_ps(x, x));
        }
        v[r] = s;
    }
    const __m512 s = transpose_sums(v);
    const __m512 rv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(_mm512_add_ps(
                                                              _mm512_div_ps(s, _mm512_set1_ps((float)dh)), _mm512_set1_ps(eps))));
    float rs[16];
    _mm512_storeu_ps(rs, rv);
    for (int r = 0; r < 16; r++) {
        const float *ur = u + r * ldu;
        float *orow = out + r * ldo;
        const __m512 rr = _mm512_set1_ps(rs[r]);
        for (int i = 0; i < dh; i += 16)
            _mm512_storeu_ps(orow + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(ur + i)), rr));
        rstd[r * ldr] = rs[r];
    }
}

void nf_rms16_backward(float *du, size_t lddu, const float *dy, size_t lddy, const float *u, size_t ldu,
                       const float *rstd, size_t ldr, const float *g, int dh, float *dg)
{
    __m512 v[16];
    for (int r = 0; r < 16; r++) {
        const float *ur = u + r * ldu, *dyr = dy + r * lddy;
        const __m512 rr = _mm512_set1_ps(rstd[r * ldr]);
        __m512 s = _mm512_setzero_ps();
        for (int i = 0; i < dh; i += 16) {
            const __m512 gd = _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(dyr + i));
            s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_mul_ps(gd, _mm512_loadu_ps(ur + i)), rr));
        }
        v[r] = s;
    }
    float ms[16];
    _mm512_storeu_ps(ms, _mm512_div_ps(transpose_sums(v), _mm512_set1_ps((float)dh)));
    for (int r = 0; r < 16; r++) {
        const float *ur = u + r * ldu, *dyr = dy + r * lddy;
        float *dur = du + r * lddu;
        const __m512 rr = _mm512_set1_ps(rstd[r * ldr]), mm = _mm512_set1_ps(ms[r]);
        for (int i = 0; i < dh; i += 16) {
            const __m512 gd = _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(dyr + i));
            const __m512 ur_m = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(ur + i), rr), mm);
            _mm512_storeu_ps(dur + i, _mm512_mul_ps(rr, _mm512_sub_ps(gd, ur_m)));
        }
    }
    if (dg) /* the gains' sums, row by row in order: dg += (dy u) r */
        for (int i = 0; i < dh; i += 16) {
            __m512 acc = _mm512_loadu_ps(dg + i);
            for (int r = 0; r < 16; r++) {
                const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(dy + r * lddy + i), _mm512_loadu_ps(u + r * ldu + i));
                acc = _mm512_add_ps(acc, _mm512_mul_ps(t, _mm512_set1_ps(rstd[r * ldr])));
            }
            _mm512_storeu_ps(dg + i, acc);
        }
}
/* flows/fastmath.h's nf_fast_expf, operation for operation. */
static inline __attribute__((always_inline)) __m512 exp_ps(__m512 x)
{
    __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(-87.3f)); /* NaN -> -87.3, as x > -87.3f ? x : -87.3f */
    xc = _mm512_min_ps(xc, _mm512_set1_ps(88.0f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), big), big);
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(127)), 23);
    const __m512 r = _mm512_add_ps(_mm512_sub_ps(xc, _mm512_mul_ps(k, _mm512_set1_ps(0.693359375f))),
                                   _mm512_mul_ps(k, _mm512_set1_ps(2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
    const __m512 v = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x, v);
}

static __mmask16 below(int j0, int n) { return n - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j0)) - 1); }

void nf_attn512_softmax_row(float *s, int len, int padded, float *stat)
{
    __m512 mx = _mm512_set1_ps(s[0]);
    for (int j0 = 0; j0 < len; j0 += 16)
        mx = _mm512_mask_max_ps(mx, below(j0, len), mx, _mm512_maskz_loadu_ps(below(j0, len), s + j0));
    const float m = _mm512_reduce_max_ps(mx);
    const __m512 mv = _mm512_set1_ps(m);
    __m512 lane = _mm512_setzero_ps();
    for (int j0 = 0; j0 < padded; j0 += 16) {
        const __mmask16 in = below(j0, padded), valid = below(j0, len);
        const __m512 e = _mm512_maskz_mov_ps(valid, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(in, s + j0), mv)));
        _mm512_mask_storeu_ps(s + j0, in, e);
        lane = _mm512_add_ps(lane, e);
    }
    const float inv = 1 / nf_tree_ps(lane);
    const __m512 iv = _mm512_set1_ps(inv);
    for (int j0 = 0; j0 < padded; j0 += 16) {
        const __mmask16 in = below(j0, padded);
        _mm512_mask_storeu_ps(s + j0, in, _mm512_mul_ps(_mm512_maskz_loadu_ps(in, s + j0), iv));
    }
    if (stat) stat[0] = m, stat[1] = inv;
}

void nf_attn512_softmax_rows8(float *p, size_t ldp, int i0, int T, float *stat, int again)
{
    int len[8], padded[8];
    float m[8], inv[8] = {0};
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const int i = i0 + r, up = (i + 16) / 16 * 16;
        len[r] = i + 1, padded[r] = up <= T ? up : T;
    }
    const int nb = (padded[7] + 15) / 16;
    if (again) {
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) m[r] = stat[2 * r], inv[r] = stat[2 * r + 1];
    } else {
        __m512 mx[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) mx[r] = _mm512_set1_ps(p[r * ldp]);
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __mmask16 valid = below(16 * b, len[r]);
                mx[r] = _mm512_mask_max_ps(mx[r], valid, mx[r], _mm512_maskz_loadu_ps(valid, p + r * ldp + 16 * b));
            }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) m[r] = _mm512_reduce_max_ps(mx[r]);
    }
    __m512 lane[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) lane[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const __mmask16 in = below(16 * b, padded[r]), valid = below(16 * b, len[r]);
            float *row = p + r * ldp + 16 * b;
            __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(in, row), _mm512_set1_ps(m[r])));
            if (again) e = _mm512_mul_ps(e, _mm512_set1_ps(inv[r]));
            e = _mm512_maskz_mov_ps(valid, e);
            _mm512_mask_storeu_ps(row, in, e);
            lane[r] = _mm512_add_ps(lane[r], e);
        }
    if (again) return;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) inv[r] = 1 / nf_tree_ps(lane[r]);
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const __mmask16 in = below(16 * b, padded[r]);
            float *row = p + r * ldp + 16 * b;
            _mm512_mask_storeu_ps(row, in, _mm512_mul_ps(_mm512_maskz_loadu_ps(in, row), _mm512_set1_ps(inv[r])));
        }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) stat[2 * r] = m[r], stat[2 * r + 1] = inv[r];
}

void nf_attn512_softmax_grad_row(const float *p, float *s, int n, float scale)
{
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 in = below(j0, n);
        const __m512 pv = _mm512_maskz_loadu_ps(in, p + j0), sv = _mm512_maskz_loadu_ps(in, s + j0);
        lo = _mm512_add_pd(lo, _mm512_mul_pd(nf_lo_pd(pv), nf_lo_pd(sv)));
        hi = _mm512_add_pd(hi, _mm512_mul_pd(nf_hi_pd(pv), nf_hi_pd(sv)));
    }
    const __m512 dt = _mm512_set1_ps((float)nf_tree_pd(lo, hi)), sc = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 in = below(j0, n);
        const __m512 pv = _mm512_maskz_loadu_ps(in, p + j0), sv = _mm512_maskz_loadu_ps(in, s + j0);
        _mm512_mask_storeu_ps(s + j0, in, _mm512_mul_ps(_mm512_mul_ps(pv, _mm512_sub_ps(sv, dt)), sc));
    }
}
void nf_attn512_transpose_k(float *kt, const float *k, size_t ldk, int T)
{
    for (int j0 = 0; j0 < T; j0 += 16) {
        __m512 r[16];
        for (int q = 0; q < 16; q++) r[q] = _mm512_loadu_ps(k + (size_t)(j0 + q) * ldk);
        nf_transpose16_ps(r);
        for (int c = 0; c < 16; c++) _mm512_storeu_ps(kt + (size_t)c * T + j0, r[c]);
    }
}

/* Eight rows at once: eight independent chains of fused multiply-adds (one row's chain alone waited
 * on each add), each output's own chain as nf_gemm's kernel runs it. */
void nf_attn512_score_rows(float *s, size_t lds, const float *q, size_t ldq, const float *kt, int T, int nb,
                           float scale)
{
    const __m512 sc = _mm512_set1_ps(scale);
    for (int b = 0; b < nb; b++) {
        __m512 acc[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
            const __m512 kc = _mm512_loadu_ps(kt + (size_t)c * T + 16 * b);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + c]), kc, acc[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) _mm512_storeu_ps(s + r * lds + 16 * b, _mm512_mul_ps(sc, acc[r]));
    }
}

void nf_attn512_pv_rows(float *o, size_t ldo, const float *p, size_t ldp, const float *v, size_t ldv, int n)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    for (int j = 0; j < n; j++) {
        const __m512 vj = _mm512_loadu_ps(v + (size_t)j * ldv);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ldp + j]), vj, acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) _mm512_storeu_ps(o + r * ldo, acc[r]); /* alpha 1 */
}
void nf_attn512_tn_rows(float *o, size_t ldo, const float *a, size_t lda, const float *x, size_t ldx, int i0, int i1)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    for (int i = i0; i < i1; i++) {
        const __m512 xi = _mm512_loadu_ps(x + (size_t)i * ldx);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)i * lda + r]), xi, acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) _mm512_storeu_ps(o + r * ldo, acc[r]); /* alpha 1 */
}
#else
int nf_rms16_compiled(void) { return 0; }

void nf_rms16_forward(float *out, size_t ldo, float *rstd, size_t ldr, const float *u, size_t ldu, const float *g,
                      int dh, float eps)
{
    (void)out, (void)ldo, (void)rstd, (void)ldr, (void)u, (void)ldu, (void)g, (void)dh, (void)eps;
}

void nf_rms16_backward(float *du, size_t lddu, const float *dy, size_t lddy, const float *u, size_t ldu,
                       const float *rstd, size_t ldr, const float *g, int dh, float *dg)
{
    (void)du, (void)lddu, (void)dy, (void)lddy, (void)u, (void)ldu, (void)rstd, (void)ldr, (void)g, (void)dh, (void)dg;
}

void nf_attn512_softmax_row(float *s, int len, int padded, float *stat)
{
    (void)s, (void)len, (void)padded, (void)stat;
}

void nf_attn512_softmax_grad_row(const float *p, float *s, int n, float scale)
{
    (void)p, (void)s, (void)n, (void)scale;
}

void nf_attn512_transpose_k(float *kt, const float *k, size_t ldk, int T) { (void)kt, (void)k, (void)ldk, (void)T; }

void nf_attn512_score_rows(float *s, size_t lds, const float *q, size_t ldq, const float *kt, int T, int nb,
                           float scale)
{
    (void)s, (void)lds, (void)q, (void)ldq, (void)kt, (void)T, (void)nb, (void)scale;
}

void nf_attn512_pv_rows(float *o, size_t ldo, const float *p, size_t ldp, const float *v, size_t ldv, int n)
{
    (void)o, (void)ldo, (void)p, (void)ldp, (void)v, (void)ldv, (void)n;
}

void nf_attn512_tn_rows(float *o, size_t ldo, const float *a, size_t lda, const float *x, size_t ldx, int i0, int i1)
{
    (void)o, (void)ldo, (void)a, (void)lda, (void)x, (void)ldx, (void)i0, (void)i1;
}

void nf_attn512_softmax_rows8(float *p, size_t ldp, int i0, int T, float *stat, int again)
{
    (void)p, (void)ldp, (void)i0, (void)T, (void)stat, (void)again;
}
#endif
