/* core/blas.c - thin CBLAS wrappers choosing s/d by the build's real type. */
#include "core/blas.h"

#include <cblas.h>

void openblas_set_num_threads(int num_threads);

#ifdef NF_DOUBLE
#define GEMM cblas_dgemm
#define GEMV cblas_dgemv
#define AXPY cblas_daxpy
#else
#define GEMM cblas_sgemm
#define GEMV cblas_sgemv
#define AXPY cblas_saxpy
#endif

void nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
             const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    GEMM(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
         alpha, A, lda, B, ldb, beta, C, ldc);
}

void nf_gemv(int transA, int M, int N, nf_real alpha, const nf_real *A, int lda, const nf_real *x,
             nf_real beta, nf_real *y)
{
    GEMV(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, M, N, alpha, A, lda, x, 1, beta, y, 1);
}

void nf_axpy(int n, nf_real alpha, const nf_real *x, nf_real *y) { AXPY(n, alpha, x, 1, y, 1); }

void nf_blas_set_threads(int n) { openblas_set_num_threads(n); }
