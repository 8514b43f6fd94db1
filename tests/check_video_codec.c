/* tests/check_video_codec.c - the truncated orthonormal block DCT (training/video_codec.h): the DCT
 * of a block against the direct O(N^4) sum, the latent layout over blocks and channels, exactness
 * on the latent space (encode(decode(z)) = z), the identity at keep = block, the norm inequality
 * (equality at keep = block), the reconstruction error, concurrent calls, and the errors. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "training/video_codec.h"

#define PI 3.14159265358979323846
#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

#ifdef NF_DOUBLE
#define TOL 1e-11
#else
#define TOL 2e-5
#endif

typedef struct codec_case { int h, w, ch, block, keep; } codec_case;
static const codec_case CASES[] = {
    {8, 8, 1, 8, 8}, {8, 8, 1, 8, 3}, {12, 8, 2, 4, 2}, {16, 16, 3, 4, 1}, {6, 9, 1, 3, 2}, {32, 32, 1, 8, 4},
    {5, 5, 2, 1, 1}, {64, 32, 1, 32, 7},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

/* The orthonormal 2-D DCT-II of channel k of block (bi, bj), coefficient (u, v), by the direct sum. */
static double dct_direct(const nf_real *x, int w, int ch, int B, int bi, int bj, int k, int u, int v)
{
    double au = sqrt((u ? 2.0 : 1.0) / B), av = sqrt((v ? 2.0 : 1.0) / B), s = 0;
    for (int m = 0; m < B; m++)
        for (int n = 0; n < B; n++)
            s += x[((size_t)(bi * B + m) * w + bj * B + n) * ch + k] * cos(PI * (2 * m + 1) * u / (2.0 * B)) *
                 cos(PI * (2 * n + 1) * v / (2.0 * B));
    return au * av * s;
}

static double sumsq(const nf_real *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

START_TEST(test_direct_formula_and_layout)
{
    for (size_t ci = 0; ci < NCASES; ci++) {
        const codec_case *q = &CASES[ci];
        nf_dct_codec *c;
        OK(nf_dct_codec_create(&c, q->h, q->w, q->ch, q->block, q->keep));
        int th, tw, tc, K = q->keep, B = q->block;
        nf_dct_codec_shape(c, &th, &tw, &tc);
        ck_assert_int_eq(th, q->h / B);
        ck_assert_int_eq(tw, q->w / B);
        ck_assert_int_eq(tc, K * K * q->ch);
        ck_assert_int_eq(nf_dct_codec_dim(c), th * tw * tc);
        size_t d = (size_t)q->h * q->w * q->ch;
        nf_real *x = malloc(2 * d * sizeof *x), *z = malloc(2 * (size_t)nf_dct_codec_dim(c) * sizeof *z);
        nf_test_fill_uniform(x, 2 * d, -1.7, 2.385, 100 + ci);
        nf_dct_encode(c, z, x, 2);
        double worst = 0;
        for (int f = 0; f < 2; f++)
            for (int bi = 0; bi < th; bi++)
                for (int bj = 0; bj < tw; bj++)
                    for (int u = 0; u < K; u++)
                        for (int v = 0; v < K; v++)
                            for (int k = 0; k < q->ch; k++) {
                                double want = dct_direct(x + f * d, q->w, q->ch, B, bi, bj, k, u, v);
                                double got = z[(size_t)f * nf_dct_codec_dim(c) + ((size_t)bi * tw + bj) * tc +
                                               (u * K + v) * q->ch + k];
                                double e = fabs(got - want);
                                if (e > worst) worst = e;
                            }
        ck_assert_msg(worst < 50 * TOL, "case %zu: DCT differs from the direct sum by %g", ci, worst);
        free(x), free(z);
        nf_dct_codec_free(c);
    }
}
END_TEST

START_TEST(test_exact_on_latent_space)
{
    for (size_t ci = 0; ci < NCASES; ci++) {
        const codec_case *q = &CASES[ci];
        nf_dct_codec *c;
        OK(nf_dct_codec_create(&c, q->h, q->w, q->ch, q->block, q->keep));
        int T = 3, dim = nf_dct_codec_dim(c);
        size_t d = (size_t)q->h * q->w * q->ch;
        nf_real *z = malloc((size_t)T * dim * sizeof *z), *z2 = malloc((size_t)T * dim * sizeof *z2),
                *x = malloc((size_t)T * d * sizeof *x);
        nf_test_fill_normal(z, (size_t)T * dim, 1.3, 7 + ci);
        nf_dct_decode(c, x, z, T);
        nf_dct_encode(c, z2, x, T);
        for (size_t i = 0; i < (size_t)T * dim; i++)
            ck_assert_msg(fabs(z2[i] - z[i]) < TOL * 10, "case %zu: encode(decode(z))[%zu] = %g, z = %g", ci, i,
                          (double)z2[i], (double)z[i]);
        /* the decoded frames carry exactly the latent's energy (D is an isometry on the latent space) */
        double ez = sumsq(z, (size_t)T * dim), ex = sumsq(x, (size_t)T * d);
        ck_assert_msg(fabs(ez - ex) < 100 * TOL * ez, "case %zu: ||z||^2 %g, ||decode z||^2 %g", ci, ez, ex);
        free(z), free(z2), free(x);
        nf_dct_codec_free(c);
    }
}
END_TEST

START_TEST(test_norms_and_full_keep)
{
    for (size_t ci = 0; ci < NCASES; ci++) {
        const codec_case *q = &CASES[ci];
        nf_dct_codec *c;
        OK(nf_dct_codec_create(&c, q->h, q->w, q->ch, q->block, q->keep));
        int T = 2, dim = nf_dct_codec_dim(c);
        size_t d = (size_t)q->h * q->w * q->ch;
        nf_real *x = malloc((size_t)T * d * sizeof *x), *r = malloc((size_t)T * d * sizeof *r),
                *z = malloc((size_t)T * dim * sizeof *z);
        nf_test_fill_uniform(x, (size_t)T * d, 0, 255, 50 + ci);
        nf_dct_encode(c, z, x, T);
        double ex = sumsq(x, (size_t)T * d), ez = sumsq(z, (size_t)T * dim);
        ck_assert_msg(ez <= ex * (1 + 10 * TOL), "case %zu: ||Ex||^2 %g > ||x||^2 %g", ci, ez, ex);
        double rms = nf_dct_codec_recon_error(c, x, T);
        if (q->keep == q->block) {
            ck_assert_msg(fabs(ez - ex) < 10 * TOL * ex, "case %zu, keep = block: ||Ex||^2 %g != ||x||^2 %g", ci, ez, ex);
            nf_dct_decode(c, r, z, T);
            for (size_t i = 0; i < (size_t)T * d; i++)
                ck_assert_msg(fabs(r[i] - x[i]) < 255 * 10 * TOL, "case %zu: decode(encode(x))[%zu] = %g, x = %g", ci,
                              i, (double)r[i], (double)x[i]);
            ck_assert_msg(rms < 255 * 10 * TOL, "case %zu: recon error %g at keep = block", ci, rms);
        } else {
            /* Pythagoras: ||x||^2 = ||Ex||^2 + ||x - DEx||^2 (D E an orthogonal projection) */
            double lost = rms * rms * (double)T * (double)d;
            ck_assert_msg(fabs(ex - ez - lost) < 1e3 * TOL * ex, "case %zu: %g != %g + %g", ci, ex, ez, lost);
            ck_assert_msg(rms > 1, "case %zu: recon error %g of uniform noise too small", ci, rms);
        }
        free(x), free(r), free(z);
        nf_dct_codec_free(c);
    }
}
END_TEST

/* A frame constant on each block lies in the keep = 1 subspace: reconstructed exactly. */
START_TEST(test_blockwise_constant)
{
    nf_dct_codec *c;
    OK(nf_dct_codec_create(&c, 8, 12, 2, 4, 1));
    nf_real x[8 * 12 * 2];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 12; j++)
            for (int k = 0; k < 2; k++) x[(i * 12 + j) * 2 + k] = (nf_real)(2.385 * (i / 4) - 1.25 * (j / 4) + 3 * k);
    double rms = nf_dct_codec_recon_error(c, x, 1);
    ck_assert_msg(rms < 10 * TOL * 10, "block-constant frame: recon error %g", rms);
    nf_real z[6 * 2];
    nf_dct_encode(c, z, x, 1);
    /* the DC coefficient of a B x B block of value a is B a */
    ck_assert_msg(fabs(z[(1 * 3 + 2) * 2 + 1] - 4 * (2.385 - 2.5 + 3)) < 10 * TOL * 10, "DC of block (1, 2) channel 1: %g",
                  (double)z[(1 * 3 + 2) * 2 + 1]);
    nf_dct_codec_free(c);
}
END_TEST

/* Many threads on one codec give the serial result. */
START_TEST(test_concurrent)
{
    nf_dct_codec *c;
    OK(nf_dct_codec_create(&c, 16, 16, 1, 4, 2));
    int T = 40, dim = nf_dct_codec_dim(c);
    nf_real *x = malloc((size_t)T * 256 * sizeof *x), *z1 = malloc((size_t)T * dim * sizeof *z1),
            *z2 = malloc((size_t)T * dim * sizeof *z2);
    nf_test_fill_uniform(x, (size_t)T * 256, 0, 16, 3);
    for (int t = 0; t < T; t++) nf_dct_encode(c, z1 + (size_t)t * dim, x + (size_t)t * 256, 1);
#pragma omp parallel for num_threads(4) schedule(dynamic)
    for (int t = 0; t < T; t++) nf_dct_encode(c, z2 + (size_t)t * dim, x + (size_t)t * 256, 1);
    ck_assert(!memcmp(z1, z2, (size_t)T * dim * sizeof *z1));
    free(x), free(z1), free(z2);
    nf_dct_codec_free(c);
}
END_TEST

START_TEST(test_errors)
{
    nf_dct_codec *c = (nf_dct_codec *)1;
    ck_assert_int_eq(nf_dct_codec_create(&c, 10, 8, 1, 4, 2), NF_EINVAL);
    ck_assert_ptr_null(c);
    HAS(nf_strerror_last(), "divides the height and the width");
    ck_assert_int_eq(nf_dct_codec_create(&c, 8, 8, 1, 4, 5), NF_EINVAL);
    HAS(nf_strerror_last(), "keep 5");
    ck_assert_int_eq(nf_dct_codec_create(&c, 8, 8, 1, 4, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "keep 0");
    ck_assert_int_eq(nf_dct_codec_create(&c, 128, 128, 1, 64, 2), NF_EINVAL);
    HAS(nf_strerror_last(), "block 64");
    ck_assert_int_eq(nf_dct_codec_create(&c, 8, 8, 0, 4, 2), NF_EINVAL);
    HAS(nf_strerror_last(), "channels");
    ck_assert_int_eq(nf_dct_codec_create(&c, 8, 8, 1, 0, 1), NF_EINVAL);
    nf_dct_codec_free(NULL);
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("video_codec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_direct_formula_and_layout);
    tcase_add_test(tc, test_exact_on_latent_space);
    tcase_add_test(tc, test_norms_and_full_keep);
    tcase_add_test(tc, test_blockwise_constant);
    tcase_add_test(tc, test_concurrent);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(codec_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
