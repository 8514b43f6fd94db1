/* core/blas.h - row-major matrix products over CBLAS (OpenBLAS), in the build's real type.
 *
 *   C (M x N) = alpha * op(A) op(B) + beta * C,  op(A) is M x K, op(B) is K x N,
 * with lda/ldb/ldc the row strides of A, B and C as stored.  transA/transB are 0 or 1.
 */
#ifndef NF_BLAS_H
#define NF_BLAS_H

#include "core/error.h"

void nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
             const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc);
/* y (M) = alpha * op(A) x + beta * y, A stored M x N row-major (op = A or A^T). */
void nf_gemv(int transA, int M, int N, nf_real alpha, const nf_real *A, int lda, const nf_real *x,
             nf_real beta, nf_real *y);
/* y += alpha * x */
void nf_axpy(int n, nf_real alpha, const nf_real *x, nf_real *y);
/* Pin OpenBLAS to n threads (we thread batch loops ourselves with OpenMP). */
void nf_blas_set_threads(int n);

#endif
