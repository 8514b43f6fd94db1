/* core/blas.h - row-major matrix products in the build's real type.
 *
 *   C (M x N) = alpha * op(A) op(B) + beta * C,  op(A) is M x K, op(B) is K x N,
 * with lda/ldb/ldc the row strides of A, B and C as stored.  transA/transB are 0 or 1.
 *
 * Two implementations (backends):
 *   native    our own AVX-512 kernel (core/blas_avx512.c, the one file compiled for AVX-512), used
 *             where cpuid reports AVX-512F; the rest of nf is built for the x86-64 baseline, so the
 *             same binary runs everywhere.  It packs op(B) in strips of 2 vectors, broadcasts
 *             op(A) in place and keeps a 12 x 2-vector tile of C in registers; the rows go in
 *             blocks whose op(A) panel and C block stay in L2 while every strip passes over them.  On the machine nf was
 *             first benchmarked on (AMD EPYC, AVX-512, OpenBLAS pinned to its Haswell kernels by
 *             OPENBLAS_CORETYPE) it ran the network's products 1.4-1.9x faster than OpenBLAS.
 *   openblas  CBLAS through OpenBLAS: CPUs without AVX-512, NF_KERNEL=blas in the environment (read
 *             at the first product), and on request (nf_blas_set_backend).
 * nf_gemv and nf_axpy always use OpenBLAS.
 *
 * Threads (decided by measuring on the 2-core benchmark VM, see core/threads.h):
 *   - OpenBLAS's own threads are never used (nf_blas_set_threads keeps it at one thread, with either
 *     backend): they spin while waiting and fought nf's workers for two busy cores.  With the native
 *     backend training was 4x slower; with the OpenBLAS backend (a CPU without AVX-512), letting
 *     OpenBLAS thread its products made two threads slower than one for the point-process model
 *     (bench/RESULTS.md), and splitting products over nf's pool instead made the flows of
 *     bench/compare_revisions.sh 1.7-2.3x faster at two threads.
 *   - OpenMP regions are not used for products either: under OMP_WAIT_POLICY=PASSIVE (which nf sets,
 *     so idle threads do not spin against busy cores) each region paid ~200 us of wake-ups in the VM,
 *     as much as a network pass.
 *   - Instead, networks (nn/) split whole passes over the batch's rows into parts of a small pool of
 *     threads that spin briefly between jobs (core/threads.h), with one-thread products inside: two
 *     or three hand-offs per network and step instead of one per product.  A product called outside
 *     such a pass (over 4 MFLOP) is split the same way, by strips of columns or tiles of rows (the
 *     native kernel), or by blocks of rows starting at multiples of 48, each a one-thread OpenBLAS
 *     product (OpenBLAS).
 *   - Every element of C is summed in the same order whatever the split (native: tiles, strips and
 *     the narrow-C path do not depend on M; OpenBLAS: its row tiles divide 48), so a product does not
 *     depend on the thread count or on timing.  (With OpenBLAS, a network pass that splits its rows
 *     over threads may still cut OpenBLAS's row tiles elsewhere, so a fit on two threads can differ
 *     from one thread in the last bits; on one thread count runs repeat exactly.)
 * nf_blas_get_threads() is how many threads a product or a network pass may use.
 *
 * The native kernel needs up to 48 KB of stack per thread (packed strip, narrow-C buffer) and
 * allocates nothing.
 */
#ifndef NF_BLAS_H
#define NF_BLAS_H

#include <stdint.h>

#include "core/error.h"

void nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
             const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc);
/* C = op(A) op(B) + bias in every row (bias: N values): a layer's forward pass.  The same numbers as
 * filling C's rows with the bias and nf_gemm with alpha = beta = 1, but nf's kernel adds the bias as
 * it stores C, so C is written once. */
void nf_gemm_bias(int transA, int transB, int M, int N, int K, const nf_real *A, int lda, const nf_real *B, int ldb,
                  const nf_real *bias, nf_real *C, int ldc);
/* y (M) = alpha * op(A) x + beta * y, A stored M x N row-major (op = A or A^T). */
void nf_gemv(int transA, int M, int N, nf_real alpha, const nf_real *A, int lda, const nf_real *x,
             nf_real beta, nf_real *y);
/* y += alpha * x */
void nf_axpy(int n, nf_real alpha, const nf_real *x, nf_real *y);
/* d (w) += the sum of the rows of x (n rows of w, row-major), added row after row: the bias gradient
 * of a layer (1^T X).  Vectorised across the w columns (core/simd.h), the same sums as the plain
 * double loop. */
void nf_add_row_sums(nf_real *d, const nf_real *x, int64_t n, int w);
/* Threads for one product (n >= 1; n <= 0 restores the default, omp_get_max_threads()). */
void nf_blas_set_threads(int n);
int nf_blas_get_threads(void);

typedef enum nf_blas_backend { NF_BLAS_AUTO = 0, NF_BLAS_OPENBLAS = 1, NF_BLAS_NATIVE = 2 } nf_blas_backend;
/* Pick the backend: AUTO (the default) is NATIVE where the kernel is compiled in and the CPU has
 * AVX-512, unless NF_KERNEL=blas (or openblas) is set; an explicit NATIVE ignores NF_KERNEL.
 * Returns the backend now in use (NF_BLAS_OPENBLAS when NATIVE cannot run here).  Not thread-safe:
 * call it before the products start, as nf_blas_set_threads. */
nf_blas_backend nf_blas_set_backend(nf_blas_backend b);
nf_blas_backend nf_blas_get_backend(void);
/* The kernel nf_gemm runs now, in words, with the reason when it is OpenBLAS:
 * "nf-avx512", "openblas (this CPU has no AVX-512)", "openblas (NF_KERNEL=blas)", ... */
const char *nf_blas_kernel_name(void);
/* 1 where cpuid reports AVX-512F: for the other files compiled for it (nn/attention_avx512.c,
 * nn/layernorm_avx512.c), whose callers check this first. */
int nf_cpu_avx512(void);

#endif
