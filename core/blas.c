/* core/blas.c - matrix products: nf's own AVX-512 kernel (core/blas_avx512.c) where the CPU has
 * AVX-512, CBLAS (OpenBLAS) otherwise.  See blas.h.
 *
 * The binary is built for the x86-64 baseline; only core/blas_avx512.c is compiled for AVX-512.
 * Which kernel runs is decided once, at the first product: the native one when it is compiled in,
 * cpuid reports AVX-512F (with the operating system saving its registers) and NF_KERNEL does not
 * ask for OpenBLAS.
 */
#include "core/blas.h"

#include <cblas.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas_avx512.h"
#include "core/simd.h"
#include "core/threads.h"
#ifdef _OPENMP
#include <omp.h>
#endif

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

static int blas_threads; /* 0: omp_get_max_threads() */
static nf_blas_backend blas_backend = NF_BLAS_AUTO;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int cpu_ok;      /* the kernel is compiled in and the CPU runs it */
static int cpu_avx512;  /* the CPU runs AVX-512F */
static int env_blas;    /* NF_KERNEL=blas (or openblas) */

static void openblas_call(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                         const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc)
{
    GEMM(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
         lda, B, ldb, beta, C, ldc);
}

/* OpenBLAS runs on one thread (nf_blas_set_threads keeps it there); a large product outside a
 * network pass is split over nf's pool instead, by blocks of OB_ROWS rows of C, each a one-thread
 * OpenBLAS product with the whole K.  OpenBLAS sums an element of C in an order that depends on where
 * its row falls in the kernel's tiles of rows (24 for single precision on Haswell and Zen, 16 or 4
 * elsewhere), so the blocks start at multiples of 48 and a split product is bit-identical to the
 * unsplit one (tests/check_blas.c); splitting the columns is not, so it is never done. */
#define OB_PAR_MIN_FLOPS 4e6
#define OB_ROWS 48
typedef struct openblas_job {
    int transA, transB, M, N, K, lda, ldb, ldc;
    nf_real alpha, beta;
    const nf_real *A, *B, *bias;
    nf_real *C;
} openblas_job;

/* Rows r0..r1 of C = bias, for a product that then adds into them (beta = 1). */
static void fill_bias_rows(nf_real *C, int ldc, const nf_real *bias, int N, int r0, int r1)
{
    for (int i = r0; i < r1; i++) memcpy(C + (size_t)i * ldc, bias, (size_t)N * sizeof *C);
}

static void openblas_part(void *arg, int part, int nparts)
{
    const openblas_job *g = arg;
    const int blocks = (g->M + OB_ROWS - 1) / OB_ROWS;
    const int r0 = (int)((long)blocks * part / nparts) * OB_ROWS;
    int r1 = (int)((long)blocks * (part + 1) / nparts) * OB_ROWS;
    if (r1 > g->M) r1 = g->M;
    if (r0 >= r1) return;
    if (g->bias) fill_bias_rows(g->C, g->ldc, g->bias, g->N, r0, r1);
    /* rows r0..r1 of op(A) and of C */
    openblas_call(g->transA, g->transB, r1 - r0, g->N, g->K, g->alpha, g->A + (size_t)r0 * (g->transA ? 1 : g->lda),
                  g->lda, g->B, g->ldb, g->bias ? 1 : g->beta, g->C + (size_t)r0 * g->ldc, g->ldc);
}

static void openblas_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                          const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc)
{
    int T = nf_blas_get_threads();
    if (2.0 * M * N * K < OB_PAR_MIN_FLOPS || nf_threads_in_parallel()) T = 1;
    if (T > M / OB_ROWS) T = M / OB_ROWS;
    if (T <= 1) {
        if (bias) fill_bias_rows(C, ldc, bias, N, 0, M);
        openblas_call(transA, transB, M, N, K, alpha, A, lda, B, ldb, bias ? 1 : beta, C, ldc);
        return;
    }
    openblas_job g = {transA, transB, M, N, K, lda, ldb, ldc, alpha, beta, A, B, bias, C};
    nf_threads_run(T, T, openblas_part, &g);
}

int nf_blas_get_threads(void)
{
#ifdef _OPENMP
    return blas_threads > 0 ? blas_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

/* Is the native kernel usable here, and did the environment ask for OpenBLAS? */
static void probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    cpu_avx512 = __builtin_cpu_supports("avx512f") != 0;
    cpu_ok = nf_blas_avx512_compiled() && cpu_avx512;
#endif
    const char *e = getenv("NF_KERNEL");
    env_blas = e && (!strcmp(e, "blas") || !strcmp(e, "openblas"));
}

int nf_cpu_avx512(void)
{
    pthread_once(&probe_once, probe);
    return cpu_avx512;
}

static int native_active(void)
{
    pthread_once(&probe_once, probe);
    if (!cpu_ok) return 0;
    return blas_backend == NF_BLAS_NATIVE || (blas_backend == NF_BLAS_AUTO && !env_blas);
}

const char *nf_blas_kernel_name(void)
{
    if (native_active()) return "nf-avx512";
    if (!nf_blas_avx512_compiled()) return "openblas (the avx512 kernel is not in this build)";
    if (!cpu_ok) return "openblas (this CPU has no AVX-512)";
    if (blas_backend == NF_BLAS_OPENBLAS) return "openblas (chosen by the program)";
    return "openblas (NF_KERNEL=blas)";
}

nf_blas_backend nf_blas_get_backend(void) { return native_active() ? NF_BLAS_NATIVE : NF_BLAS_OPENBLAS; }

nf_blas_backend nf_blas_set_backend(nf_blas_backend b)
{
    blas_backend = b;
    openblas_set_num_threads(1);
    return nf_blas_get_backend();
}

void nf_blas_set_threads(int n)
{
    blas_threads = n > 0 ? n : 0;
    openblas_set_num_threads(1);
}

static void gemm_with(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                      const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (native_active()) {
        if (K <= 0 || alpha == 0) { /* C = beta C (BLAS semantics: beta = 0 clears, even NaN), or the bias */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    C[(size_t)i * ldc + j] = bias ? bias[j] : beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
            return;
        }
        nf_blas_avx512_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
        return;
    }
    openblas_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

void nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
             const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc)
{
    gemm_with(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc);
}

void nf_gemm_bias(int transA, int transB, int M, int N, int K, const nf_real *A, int lda, const nf_real *B, int ldb,
                  const nf_real *bias, nf_real *C, int ldc)
{
    gemm_with(transA, transB, M, N, K, 1, A, lda, B, ldb, 0, bias, C, ldc);
}

void nf_gemv(int transA, int M, int N, nf_real alpha, const nf_real *A, int lda, const nf_real *x,
             nf_real beta, nf_real *y)
{
    GEMV(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, M, N, alpha, A, lda, x, 1, beta, y, 1);
}

void nf_axpy(int n, nf_real alpha, const nf_real *x, nf_real *y) { AXPY(n, alpha, x, 1, y, 1); }

static NF_SIMD_CLONES void add_row_sums_simd(nf_real *d, const nf_real *x, int64_t n, int w)
{
    for (int64_t t = 0; t < n; t++) {
        const nf_real *row = x + (size_t)t * w;
#pragma omp simd
        for (int j = 0; j < w; j++) d[j] += row[j];
    }
}

void nf_add_row_sums(nf_real *d, const nf_real *x, int64_t n, int w) { add_row_sums_simd(d, x, n, w); }
