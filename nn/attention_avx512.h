/* nn/attention_avx512.h - attention's row kernels in AVX-512 (internal to nn/attention.c).
 *
 * nf_rms16_compiled() says whether the kernels are in this build (the float build on x86-64, where the
 * Makefile compiles nn/attention_avx512.c with -mavx512f); they may only be called on a CPU with
 * AVX-512F.  Each gives the bits of nn/attention.c's portable code.
 *
 * The QK norm sixteen rows at a time, dh a multiple of 16.  Row r (0..15) of each matrix starts at base + r * ld.  The results are
 * the bits of nn/attention.c's one-row reference (rms_row, rms_row_backward).
 *   forward:  out_r = g u_r / rms(u_r), rstd[r ldr] = 1 / rms(u_r), rms(u) = sqrt(mean(u^2) + eps)
 *             (out may be u: each row is read before it is written)
 *   backward: du_r = r (g dy_r - xhat_r mean(g dy_r xhat_r)), xhat_r = u_r r, r = rstd[r ldr];
 *             dg (dh; NULL: not) += dy_r xhat_r, row by row in order (the gains' gradients) */
#ifndef NF_ATTENTION_AVX512_H
#define NF_ATTENTION_AVX512_H

#include <stddef.h>

int nf_rms16_compiled(void);
void nf_rms16_forward(float *out, size_t ldo, float *rstd, size_t ldr, const float *u, size_t ldu, const float *g,
                      int dh, float eps);
void nf_rms16_backward(float *du, size_t lddu, const float *dy, size_t lddy, const float *u, size_t ldu,
                       const float *rstd, size_t ldr, const float *g, int dh, float *dg);
/* A pair's scores and outputs (dh 16), eight rows r at a time: kt (16 x T) = k^T (k: T rows at ldk,
 * T a multiple of 16); s_r[0..16 nb) = scale (q_r . kt[:, j]); o_r (16) = sum_{j<n} p_r[j] v_j (v: rows
 * at ldv).  Each sum as nf_gemm's kernel forms it, so the bits of the products they replace. */
void nf_attn512_transpose_k(float *kt, const float *k, size_t ldk, int T);
void nf_attn512_score_rows(float *s, size_t lds, const float *q, size_t ldq, const float *kt, int T, int nb,
                           float scale);
void nf_attn512_pv_rows(float *o, size_t ldo, const float *p, size_t ldp, const float *v, size_t ldv, int n);
/* The transposed product's rows: o_r (16) = sum_{i0 <= i < i1} a[i lda + r] x_i, r = 0..7 (eight
 * columns of a; the terms before i0 are zeros of a, which the product's sums add exactly). */
void nf_attn512_tn_rows(float *o, size_t ldo, const float *a, size_t lda, const float *x, size_t ldx, int i0, int i1);
/* The softmax of a short pair's rows i0..i0+7 (row r at p + r ldp: len i + 1, padded to whole
 * vectors within T), eight rows' chains interleaved: again = 0 as softmax_row (stat (max, 1/sum) of
 * row r at stat + 2r written), again = 1 as softmax_row_again (stat read). */
void nf_attn512_softmax_rows8(float *p, size_t ldp, int i0, int T, float *stat, int again);
/* softmax_row and softmax_grad_row of nn/attention.c (their contracts there). */
void nf_attn512_softmax_row(float *s, int len, int padded, float *stat);
void nf_attn512_softmax_grad_row(const float *p, float *s, int n, float scale);

#endif
