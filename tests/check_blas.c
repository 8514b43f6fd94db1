/* tests/check_blas.c - matrix products: nf_gemm against a naive double-precision product for every
 * transpose pair, sizes around the kernel's tile edges (12 rows, 2-vector strips, 256-deep blocks),
 * strides wider than the matrices, alpha and beta (beta = 0 must clear NaN), K = 0; the same bits on
 * one and two threads (native backend); and the native backend against OpenBLAS.  The native
 * backend runs where the CPU has AVX-512 (every build carries it); elsewhere, and with
 * NF_KERNEL=blas, the same checks run on OpenBLAS, and test_backend_choice checks the choice. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL 1e-12
#else
#define TOL 2e-5
#endif

/* C (M, N), ldc; op(A) (M, K); op(B) (K, N). */
static void ref_gemm(int ta, int tb, int M, int N, int K, double alpha, const nf_real *A, int lda, const nf_real *B,
                     int ldb, double beta, const nf_real *C0, int ldc, double *out)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, scale = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                scale += fabs(a * b);
            }
            double c = beta == 0 ? 0 : beta * C0[(size_t)i * ldc + j];
            out[2 * ((size_t)i * N + j)] = alpha * s + c;
            out[2 * ((size_t)i * N + j) + 1] = fabs(alpha) * scale + fabs(c); /* size of the terms */
        }
}

typedef struct shape {
    int M, N, K;
} shape;

static const shape shapes[] = {{1, 1, 1},     {13, 33, 7},  {12, 32, 256}, {25, 17, 257}, {37, 70, 300},
                               {5, 64, 513},  {100, 3, 2},  {4, 31, 64},   {29, 48, 19},  {64, 64, 64},
                               {131, 96, 40}, {7, 129, 33}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* One product checked against the reference; C has stride ldc = N + 3 and its padding must survive. */
static void check_one(int ta, int tb, shape s, double alpha, double beta, uint64_t seed)
{
    const int M = s.M, N = s.N, K = s.K, pad = 3;
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    nf_real *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
    nf_real *C0 = malloc(nc * sizeof *C0);
    double *want = malloc(2 * (size_t)M * N * sizeof *want);
    ck_assert(A && B && C && C0 && want);
    nf_test_fill_uniform(A, na, -1.3, 1.1, seed);
    nf_test_fill_uniform(B, nb, -0.9, 1.4, seed + 1);
    nf_test_fill_uniform(C0, nc, -2.1, 0.7, seed + 2);
    if (beta == 0)
        for (size_t i = 0; i < nc; i++)
            if ((i % ldc) < (size_t)N) C0[i] = NAN; /* beta = 0 must not read C */
    memcpy(C, C0, nc * sizeof *C);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc, want);
    nf_gemm(ta, tb, M, N, K, (nf_real)alpha, A, lda, B, ldb, (nf_real)beta, C, ldc);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double got = C[(size_t)i * ldc + j], w = want[2 * ((size_t)i * N + j)];
            double size = want[2 * ((size_t)i * N + j) + 1];
            ck_assert_msg(fabs(got - w) <= TOL * (size + 1e-3),
                          "%c%c M=%d N=%d K=%d alpha=%g beta=%g: C[%d,%d] = %.9g, expected %.9g", "NT"[ta], "NT"[tb], M,
                          N, K, alpha, beta, i, j, got, w);
        }
        for (int j = N; j < ldc; j++) ck_assert(memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof *C) == 0);
    }
    free(A), free(B), free(C), free(C0), free(want);
}

START_TEST(test_gemm_reference)
{
    const double ab[][2] = {{1, 0}, {1, 1}, {-0.735, 1.62}, {2.385, 0}};
    uint64_t seed = 10;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int s = 0; s < NSHAPES; s++)
                for (int v = 0; v < 4; v++) check_one(ta, tb, shapes[s], ab[v][0], ab[v][1], seed += 3);
}
END_TEST

/* K = 0 or alpha = 0: C = beta C (and beta = 0 clears). */
START_TEST(test_gemm_degenerate)
{
    nf_real A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 2, 3, 4, 5, 6}, C[4] = {1.5, -2.25, 3.0, NAN};
    nf_gemm(0, 0, 2, 2, 0, 1, A, 1, B, 2, (nf_real)0.5, C, 2);
    ck_assert(C[0] == (nf_real)0.75 && C[1] == (nf_real)-1.125 && C[2] == (nf_real)1.5 && isnan(C[3]));
    nf_gemm(0, 0, 2, 2, 3, 0, A, 3, B, 2, 0, C, 2);
    for (int i = 0; i < 4; i++) ck_assert(C[i] == 0);
    nf_gemm(0, 0, 0, 2, 3, 1, A, 3, B, 2, 0, NULL, 2); /* empty: nothing touched */
}
END_TEST

/* Products big enough to be split over threads give the same bits on one and two threads (with
 * either backend: both split C, never K), and the native backend agrees with OpenBLAS. */
START_TEST(test_gemm_threads_and_backends)
{
    const shape big[] = {{512, 256, 256}, {300, 40, 520}, {48, 512, 256}};
    for (int t = 0; t < 3; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = big[t].M, N = big[t].N, K = big[t].K;
                const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
                nf_real *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
                nf_real *C1 = malloc(nc * sizeof *C1), *C2 = malloc(nc * sizeof *C2), *C3 = malloc(nc * sizeof *C3);
                nf_test_fill_uniform(A, na, -1.2, 1.0, 90 + t);
                nf_test_fill_uniform(B, nb, -1.0, 1.3, 91 + t);
                nf_test_fill_uniform(C1, nc, -1, 1, 92 + t);
                memcpy(C2, C1, nc * sizeof *C1);
                memcpy(C3, C1, nc * sizeof *C1);
                const int lda = ta ? M : K, ldb = tb ? K : N;
                nf_blas_set_threads(1);
                nf_gemm(ta, tb, M, N, K, (nf_real)0.87, A, lda, B, ldb, (nf_real)0.5, C1, N);
                nf_blas_set_threads(2);
                nf_gemm(ta, tb, M, N, K, (nf_real)0.87, A, lda, B, ldb, (nf_real)0.5, C2, N);
                ck_assert_msg(memcmp(C1, C2, nc * sizeof *C1) == 0, "%c%c %dx%dx%d: 1 and 2 threads differ",
                              "NT"[ta], "NT"[tb], M, N, K);
                nf_blas_backend was = nf_blas_get_backend();
                ck_assert(nf_blas_set_backend(NF_BLAS_OPENBLAS) == NF_BLAS_OPENBLAS);
                nf_gemm(ta, tb, M, N, K, (nf_real)0.87, A, lda, B, ldb, (nf_real)0.5, C3, N);
                nf_blas_set_backend(was);
                for (size_t i = 0; i < nc; i++)
                    ck_assert(fabs((double)C1[i] - C3[i]) <= 50 * TOL * (fabs((double)C3[i]) + sqrt((double)K)));
                nf_blas_set_threads(0);
                free(A), free(B), free(C1), free(C2), free(C3);
            }
    ck_assert(nf_blas_get_threads() >= 1);
}
END_TEST

/* Networks split a product's rows over threads: rows computed in two calls are the same bits as in
 * one call (native backend), for every transpose pair and narrow C (which takes another path). */
START_TEST(test_gemm_row_split)
{
    if (nf_blas_get_backend() != NF_BLAS_NATIVE) return;
    const shape sh[] = {{300, 5, 600}, {77, 40, 300}, {129, 1, 70}, {64, 33, 520}};
    for (size_t t = 0; t < sizeof sh / sizeof sh[0]; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = sh[t].M, N = sh[t].N, K = sh[t].K, lda = ta ? M : K, ldb = tb ? K : N;
                const size_t nc = (size_t)M * N;
                nf_real *A = malloc((size_t)M * K * sizeof *A), *B = malloc((size_t)K * N * sizeof *B);
                nf_real *C1 = malloc(nc * sizeof *C1), *C2 = malloc(nc * sizeof *C2);
                nf_test_fill_uniform(A, (size_t)M * K, -1.2, 1.0, 70 + t);
                nf_test_fill_uniform(B, (size_t)K * N, -1.0, 1.3, 71 + t);
                nf_test_fill_uniform(C1, nc, -1, 1, 72 + t);
                memcpy(C2, C1, nc * sizeof *C1);
                nf_gemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 1, C1, N);
                const int h = M / 8 + 1; /* rows [0, h) then [h, M) */
                nf_gemm(ta, tb, h, N, K, 1, A, lda, B, ldb, 1, C2, N);
                nf_gemm(ta, tb, M - h, N, K, 1, ta ? A + h : A + (size_t)h * lda, lda, B, ldb, 1, C2 + (size_t)h * N, N);
                ck_assert_msg(memcmp(C1, C2, nc * sizeof *C1) == 0, "%c%c %dx%dx%d: rows split differently",
                              "NT"[ta], "NT"[tb], M, N, K);
                free(A), free(B), free(C1), free(C2);
            }
}
END_TEST

/* nf_gemm_bias is the same bits as filling C's rows with the bias and nf_gemm(alpha = beta = 1), on
 * both backends, one and two threads: over tile edges, K past one 256-deep block (the bias enters
 * with the first block only), narrow C (its own path), and a leading dimension wider than N. */
START_TEST(test_gemm_bias)
{
    const shape sh[] = {{512, 256, 64}, {77, 40, 300}, {129, 5, 70}, {13, 33, 520}, {1, 1, 1}};
    const nf_blas_backend was = nf_blas_get_backend();
    for (int be = 0; be < 2; be++) {
        if (be == 1) nf_blas_set_backend(NF_BLAS_OPENBLAS);
        for (int threads = 1; threads <= 2; threads++)
            for (size_t t = 0; t < sizeof sh / sizeof sh[0]; t++)
                for (int ta = 0; ta < 2; ta++)
                    for (int tb = 0; tb < 2; tb++) {
                        const int M = sh[t].M, N = sh[t].N, K = sh[t].K, lda = ta ? M : K, ldb = tb ? K : N;
                        const int ldc = N + 3;
                        const size_t nc = (size_t)M * ldc;
                        nf_real *A = malloc((size_t)M * K * sizeof *A), *B = malloc((size_t)K * N * sizeof *B);
                        nf_real *bias = malloc((size_t)N * sizeof *bias);
                        nf_real *C1 = malloc(nc * sizeof *C1), *C2 = malloc(nc * sizeof *C2);
                        nf_test_fill_uniform(A, (size_t)M * K, -1.2, 1.0, 40 + t);
                        nf_test_fill_uniform(B, (size_t)K * N, -1.0, 1.3, 41 + t);
                        nf_test_fill_uniform(bias, N, -2, 2, 42 + t);
                        nf_test_fill_uniform(C1, nc, -1, 1, 43 + t); /* the padding columns must survive */
                        memcpy(C2, C1, nc * sizeof *C1);
                        nf_blas_set_threads(threads);
                        for (int i = 0; i < M; i++) memcpy(C1 + (size_t)i * ldc, bias, (size_t)N * sizeof *C1);
                        nf_gemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 1, C1, ldc);
                        C2[0] = NAN; /* beta is not used: what C held does not matter */
                        nf_gemm_bias(ta, tb, M, N, K, A, lda, B, ldb, bias, C2, ldc);
                        ck_assert_msg(memcmp(C1, C2, nc * sizeof *C1) == 0,
                                      "%s, %d threads, %c%c %dx%dx%d: bias product differs", be ? "openblas" : "default",
                                      threads, "NT"[ta], "NT"[tb], M, N, K);
                        free(A), free(B), free(bias), free(C1), free(C2);
                    }
    }
    nf_blas_set_threads(0);
    ck_assert(nf_blas_set_backend(was) == was);
}
END_TEST

/* The OpenBLAS backend passes the same reference checks. */
START_TEST(test_gemm_openblas_backend)
{
    nf_blas_backend was = nf_blas_get_backend();
    nf_blas_set_backend(NF_BLAS_OPENBLAS);
    check_one(1, 0, shapes[4], -0.735, 1.62, 5);
    check_one(0, 1, shapes[3], 1, 0, 6);
    ck_assert(nf_blas_set_backend(was) == was);
}
END_TEST

/* The kernel in use follows the CPU (cpuid) and NF_KERNEL, and can be switched both ways. */
START_TEST(test_backend_choice)
{
    const char *e = getenv("NF_KERNEL");
    const int env_blas = e && (!strcmp(e, "blas") || !strcmp(e, "openblas"));
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int cpu = __builtin_cpu_supports("avx512f");
#else
    const int cpu = 0;
#endif
    nf_blas_backend was = nf_blas_get_backend();
    ck_assert_msg(was == (cpu && !env_blas ? NF_BLAS_NATIVE : NF_BLAS_OPENBLAS),
                  "backend %d with avx512f=%d and NF_KERNEL=%s (%s)", (int)was, cpu, e ? e : "(unset)",
                  nf_blas_kernel_name());
    ck_assert(strstr(nf_blas_kernel_name(), was == NF_BLAS_NATIVE ? "avx512" : "openblas") != NULL);
    ck_assert(nf_blas_set_backend(NF_BLAS_OPENBLAS) == NF_BLAS_OPENBLAS);
    ck_assert(strncmp(nf_blas_kernel_name(), "openblas", 8) == 0);
    ck_assert(nf_blas_set_backend(NF_BLAS_NATIVE) == (cpu ? NF_BLAS_NATIVE : NF_BLAS_OPENBLAS));
    nf_blas_set_backend(NF_BLAS_AUTO);
    ck_assert(nf_blas_get_backend() == was);
}
END_TEST

static Suite *blas_suite(void)
{
    Suite *s = suite_create("blas");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_gemm_reference);
    tcase_add_test(t, test_gemm_degenerate);
    tcase_add_test(t, test_gemm_threads_and_backends);
    tcase_add_test(t, test_gemm_row_split);
    tcase_add_test(t, test_gemm_bias);
    tcase_add_test(t, test_gemm_openblas_backend);
    tcase_add_test(t, test_backend_choice);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(blas_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
