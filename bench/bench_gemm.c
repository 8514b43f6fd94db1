/* bench/bench_gemm.c - nf_gemm's speed (GFLOP/s, one thread) on the products of the point-process
 * step (GRU 64, lognormmix K = 64, 64 sequences of 1,024 events: T = 65,536 rows) and on weight
 * gradients dy^T x whose inner dimension K grows past the caches.  Each product is timed over
 * enough repeats for about 0.2 s after one warm-up call (beta = 1, so C is read and written).
 * Last, the products of a TarFlow step (one micro-batch of 256 token rows, width 64, MLP 256) with
 * beta = 0, twice: C in cache (one output buffer) and C fresh from memory (each call writes the
 * next of 600 output buffers, about 150 MB: what a training step does, whose activations are kept
 * for the backward pass).
 *
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -fopenmp -I. bench/bench_gemm.c build/float/libnf.a \
 *       $(pkg-config --cflags --libs gsl hdf5-serial fftw3 fftw3f cairo | sed 's/-lgslcblas//') \
 *       -lopenblas -lgif -lm -o /tmp/bench_gemm && /tmp/bench_gemm
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/blas.h"
#include "core/clock.h"

/* calloc, or the end of the program with one line */
static void *zalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        exit(1);
    }
    return p;
}

/* The operands of an M x N x K product, A (M x K) and B (K x N), filled with small values. */
static void operands(int M, int N, int K, nf_real **A, nf_real **B)
{
    *A = zalloc((size_t)M * K, sizeof(nf_real));
    *B = zalloc((size_t)K * N, sizeof(nf_real));
    for (size_t i = 0; i < (size_t)M * K; i++) (*A)[i] = (nf_real)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)K * N; i++) (*B)[i] = (nf_real)(i % 5) * 0.1f;
}

static void run(const char *what, int tA, int tB, int M, int N, int K)
{
    nf_real *A, *B, *C = zalloc((size_t)M * N, sizeof(nf_real));
    operands(M, N, K, &A, &B);
    const int lda = tA ? M : K, ldb = tB ? K : N;
    const double flops = 2.0 * M * N * K;
    int reps = (int)(0.2 / (flops / 100e9));
    reps = reps < 3 ? 3 : reps;
    nf_gemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 1, C, N);
    const double t0 = nf_seconds();
    for (int r = 0; r < reps; r++) nf_gemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 1, C, N);
    const double dt = (nf_seconds() - t0) / reps;
    printf("%-44s %c%c M %6d N %4d K %6d  %10.1f us  %6.1f GFLOP/s\n", what, tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K,
           dt * 1e6, flops / dt * 1e-9);
    free(A), free(B), free(C);
}

/* One product of a TarFlow step, C = op(A) op(B) with beta = 0, into one buffer (cold = 0) or into
 * the next of COLD_BUFFERS buffers (cold = 1: every call writes memory that left the caches). */
enum { COLD_BUFFERS = 600 };
static void run_output(const char *what, int tA, int tB, int M, int N, int K, int cold)
{
    const int nb = cold ? COLD_BUFFERS : 1;
    nf_real *A, *B, **C = zalloc((size_t)nb, sizeof *C);
    for (int b = 0; b < nb; b++) C[b] = zalloc((size_t)M * N, sizeof(nf_real));
    operands(M, N, K, &A, &B);
    const int lda = tA ? M : K, ldb = tB ? K : N, reps = 3 * COLD_BUFFERS;
    nf_gemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C[0], N);
    const double t0 = nf_seconds();
    for (int r = 0; r < reps; r++) nf_gemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C[r % nb], N);
    const double dt = (nf_seconds() - t0) / reps;
    printf("%-44s %c%c M %6d N %4d K %6d  C %-9s %6.1f GFLOP/s\n", what, tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K,
           cold ? "fresh" : "in cache", 2.0 * M * N * K / dt * 1e-9);
    for (int b = 0; b < nb; b++) free(C[b]);
    free(A), free(B), free(C);
}

int main(void)
{
    nf_blas_set_threads(1);
    printf("nf_gemm on %s, one thread\n", nf_blas_kernel_name());
    run("GRU step: h W_hh^T (one group of 32)", 0, 1, 32, 192, 64);
    run("GRU step backward: dg W_hh", 0, 0, 32, 64, 192);
    run("GRU dW_hh = dg^T h over all rows", 1, 0, 192, 64, 65536);
    run("mixture Theta = Ctx W^T (a block of rows)", 0, 1, 682, 192, 64);
    run("mixture Theta, all rows at once", 0, 1, 65536, 192, 64);
    run("mixture dCtx = dTheta W, all rows at once", 0, 0, 65536, 64, 192);
    for (int K = 1024; K <= 131072; K *= 4) run("weight gradient dy^T x (transposed A)", 1, 0, 192, 64, K);
    for (int K = 1024; K <= 131072; K *= 4) run("the same, A not transposed", 0, 0, 192, 64, K);
    for (int cold = 0; cold < 2; cold++) {
        run_output("TarFlow: QKV = x W^T", 0, 1, 256, 192, 64, cold);
        run_output("TarFlow: MLP up = x W^T", 0, 1, 256, 256, 64, cold);
        run_output("TarFlow: MLP down = h W^T", 0, 1, 256, 64, 256, cold);
        run_output("TarFlow: dh = dy W (MLP down)", 0, 0, 256, 256, 64, cold);
        run_output("TarFlow: dW = dy^T h (MLP down)", 1, 0, 64, 256, 256, cold);
    }
    return 0;
}
