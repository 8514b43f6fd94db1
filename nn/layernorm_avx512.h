/* nn/layernorm_avx512.h - layer norm rows in AVX-512 (internal to nn/layernorm.c).
 *
 * nf_ln512_compiled() says whether the kernels are in this build (the float build on x86-64, where
 * the Makefile compiles nn/layernorm_avx512.c with -mavx512f); they may only be called on a CPU with
 * AVX-512F (nf_cpu_avx512), for a width C that is a multiple of 16.  n rows of C; the bits of
 * nn/layernorm.c's portable code:
 *   forward     y = (x - mean) rstd gamma + beta,  cache[r] = (mean, rstd)
 *   grad_input  dx += rstd (g - mean(g) - xhat mean(g xhat)),  g = dy gamma, xhat = (x - mean) rstd */
#ifndef NF_LAYERNORM_AVX512_H
#define NF_LAYERNORM_AVX512_H

int nf_ln512_compiled(void);
void nf_ln512_forward(float *y, float *cache, const float *x, const float *gamma, const float *beta, int C, int n,
                      double eps);
/* dx = base + LN'(dy) row by row (base NULL: 0; base == dx: dx +=). */
void nf_ln512_grad_input(float *dx, const float *base, const float *dy, const float *x, const float *cache,
                         const float *gamma, int C, int n);

#endif
