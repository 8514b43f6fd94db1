/* core/blas_avx512.h - the AVX-512 kernel behind nf_gemm (internal to core/blas.c).
 *
 * nf_blas_avx512_compiled() says whether the kernel is in this build (x86-64 with -mavx512f for
 * core/blas_avx512.c, which the Makefile adds).  nf_blas_avx512_gemm has nf_gemm's contract for
 * M, N, K > 0 and alpha != 0, and may only be called on a CPU with AVX-512F: core/blas.c asks cpuid
 * first. */
#ifndef NF_BLAS_AVX512_H
#define NF_BLAS_AVX512_H

#include "core/error.h"

int nf_blas_avx512_compiled(void);
void nf_blas_avx512_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                         const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc);

#endif
