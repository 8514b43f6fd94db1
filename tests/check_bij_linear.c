/* tests/check_bij_linear.c - actnorm, batchnorm, lu and fftconv: the shared table-driven checks
 * (round trip, brute-force Jacobian, finite-difference gradients both directions) plus
 *   actnorm    data-dependent init gives zero mean / unit variance and is never redone (also after a
 *              state copy, as after loading);
 *   batchnorm  running averages follow the momentum update, eval mode uses them, training gradients;
 *   lu         log|det| equals GSL's log|det W| of the assembled map, and it starts as a rotation;
 *   fftconv    matches a direct O(N^2) circular convolution and a direct DFT log-determinant, refuses a
 *              kernel with a zero in its spectrum (NF_ESINGULAR) and shapes that do not fit;
 *   all        backward and inverse_backward accumulate (+=) instead of overwriting.
 */
#include <check.h>
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/bijector.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL 1e-10
#else
#define TOL 2e-5
#endif

static const nf_bij_case cases[] = {
    /* type        options                              D  C  scale inv skip train */
    {"actnorm", "", 3, 0, 0, 0, 0, 0},                    /* before init: plain affine map */
    {"actnorm", "", 5, 0, 2.385, 0, 0, 1},                /* after data-dependent init */
    {"actnorm", "", 4, 2, 0, 0, 0, 0},                    /* context is ignored */
    {"batchnorm", "", 4, 0, 0, 0, 0, 1},                  /* batch statistics */
    {"batchnorm", "", 4, 0, 0, 0, 0, 0},                  /* running averages */
    {"batchnorm", "momentum=0.3, eps=1e-3", 3, 2, 1.7, 0, 0, 1},
    {"batchnorm", "eps=0.01", 3, 2, 0, 0, 0, 0},
    {"lu", "", 1, 0, 0, 0, 0, 0},
    {"lu", "", 3, 0, 0, 0, 0, 0},
    {"lu", "", 8, 0, 0, 0, 0, 0},
    {"lu", "", 5, 3, 0.9, 0, 0, 0},
    {"fftconv", "", 8, 0, 0, 0, 0, 0},                    /* 1-D, even length */
    {"fftconv", "", 7, 0, 0, 0, 0, 0},                    /* 1-D, odd length */
    {"fftconv", "height=2, width=4", 8, 0, 0, 0, 0, 0},   /* 2-D */
    {"fftconv", "channels=2", 6, 2, 0, 0, 0, 0},          /* two 1-D channels of 3 */
    {"fftconv", "channels=2, height=2, width=3", 12, 0, 0, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

/* A bijector with its stores. */
typedef struct {
    nf_bijector b;
    nf_params *P, *S;
    nf_real *ws;
} fix;

static void fix_make(fix *f, const char *type, const char *options, int dim, uint64_t seed)
{
    f->P = nf_params_alloc();
    f->S = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert_msg(nf_bijector_type_find(type) != NULL, "type %s is not registered", type);
    int rc = nf_bijector_create(&f->b, nf_bijector_type_find(type), dim, 0, "b0", options, f->P, f->S, r);
    ck_assert_msg(rc == NF_OK, "%s(%s): %s", type, options, nf_strerror_last());
    nf_rng_free(r);
    f->ws = calloc(f->b.type->workspace(&f->b, 64) + 1, sizeof(nf_real));
}

static void fix_free(fix *f)
{
    nf_bijector_destroy(&f->b);
    nf_params_free(f->P);
    nf_params_free(f->S);
    free(f->ws);
}

static nf_real *param(fix *f, const char *piece)
{
    char nm[128];
    snprintf(nm, sizeof nm, "b0.%s", piece);
    const nf_param_slice *s = nf_params_find(f->P, nm);
    if (!s) s = nf_params_find(f->S, nm);
    ck_assert_msg(s != NULL, "slice %s missing", nm);
    return (nf_params_find(f->P, nm) ? f->P->value : f->S->value) + s->offset;
}

static void column_moments(const nf_real *y, int n, int D, int j, double *mean, double *var)
{
    double m = 0, v = 0;
    for (int i = 0; i < n; i++) m += y[(size_t)i * D + j];
    m /= n;
    for (int i = 0; i < n; i++) v += (y[(size_t)i * D + j] - m) * (y[(size_t)i * D + j] - m);
    *mean = m, *var = v / n;
}

START_TEST(test_actnorm_init)
{
    enum { N = 40, D = 3 };
    fix f;
    fix_make(&f, "actnorm", "", D, 11);
    nf_real x[N * D], y[N * D], ld[N] = {0};
    const double centre[D] = {2.385, -0.731, 5.12}, spread[D] = {1.7, 0.43, 3.9};
    nf_test_fill_normal(x, N * D, 1, 5);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) x[i * D + j] = (nf_real)(centre[j] + spread[j] * x[i * D + j]);
    /* evaluation mode never initialises */
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
    ck_assert(*param(&f, "initialized") == 0);
    for (int k = 0; k < N * D; k++) ck_assert(y[k] == x[k]);
    /* the first training batch comes out standardised */
    f.b.training = 1;
    memset(ld, 0, sizeof ld);
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
    ck_assert(*param(&f, "initialized") == 1);
    double sum_s = 0;
    for (int j = 0; j < D; j++) {
        double m, v;
        column_moments(y, N, D, j, &m, &v);
        ck_assert_msg(fabs(m) < 1e-5 && fabs(v - 1) < 1e-4, "column %d: mean %g var %g", j, m, v);
        sum_s += param(&f, "log_scale")[j];
    }
    ck_assert_msg(fabs(ld[0] - sum_s) < TOL * 10 && fabs(ld[N - 1] - sum_s) < TOL * 10, "logdet %g, sum s %g",
                  (double)ld[0], sum_s);
    ck_assert(fabs(sum_s + log(1.7 * 0.43 * 3.9)) < 0.5); /* about -sum log(spread) */
    /* a second, different batch does not re-initialise */
    nf_real keep[2 * D];
    memcpy(keep, param(&f, "loc"), D * sizeof(nf_real));
    memcpy(keep + D, param(&f, "log_scale"), D * sizeof(nf_real));
    nf_real x2[N * D];
    for (int k = 0; k < N * D; k++) x2[k] = (nf_real)(3.1 * x[k] + 0.77);
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x2, NULL, N, f.ws), NF_OK);
    ck_assert(memcmp(keep, param(&f, "loc"), D * sizeof(nf_real)) == 0);
    ck_assert(memcmp(keep + D, param(&f, "log_scale"), D * sizeof(nf_real)) == 0);
    double m, v;
    column_moments(y, N, D, 0, &m, &v);
    ck_assert_msg(fabs(v - 9.61) < 1e-3 && fabs(m) > 0.5, "second batch mean %g var %g", m, v);
    /* a model rebuilt and loaded (parameters and state copied) is not re-initialised either */
    fix g;
    fix_make(&g, "actnorm", "", D, 12);
    ck_assert_int_eq(nf_params_copy(g.P, f.P, 0), NF_OK);
    ck_assert_int_eq(nf_params_copy(g.S, f.S, 0), NF_OK);
    g.b.training = 1;
    ck_assert_int_eq(g.b.type->forward(&g.b, y, ld, x2, NULL, N, g.ws), NF_OK);
    ck_assert(memcmp(keep, param(&g, "loc"), D * sizeof(nf_real)) == 0);
    fix_free(&g);
    fix_free(&f);
}
END_TEST

START_TEST(test_batchnorm_running)
{
    enum { N = 30, D = 2 };
    fix f;
    fix_make(&f, "batchnorm", "momentum=0.25, eps=1e-4", D, 3);
    nf_real x[N * D], y[N * D], ld[N] = {0}, x2[N * D], ld2[N];
    nf_test_fill_normal(x, N * D, 1.9, 7);
    for (int k = 0; k < N * D; k++) x[k] += (nf_real)(k % 2 ? -1.25 : 3.5);
    nf_real *rm = param(&f, "running_mean"), *rv = param(&f, "running_var");
    ck_assert(rm[0] == 0 && rv[1] == 1);
    f.b.training = 1;
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
    double sld = 0;
    for (int j = 0; j < D; j++) {
        double m, v, my, vy;
        column_moments(x, N, D, j, &m, &v);
        column_moments(y, N, D, j, &my, &vy);
        /* training output standardised by the batch statistics */
        ck_assert_msg(fabs(my) < 1e-5 && fabs(vy - v / (v + 1e-4)) < 1e-4, "column %d: %g %g", j, my, vy);
        /* running averages moved by momentum 0.25 toward the batch mean and unbiased variance */
        ck_assert_msg(fabs(rm[j] - 0.25 * m) < TOL * 10 * (1 + fabs(m)), "rm %g vs %g", (double)rm[j], 0.25 * m);
        double vu = v * N / (N - 1);
        ck_assert_msg(fabs(rv[j] - (0.75 + 0.25 * vu)) < TOL * 10 * (1 + vu), "rv %g vs %g", (double)rv[j],
                      0.75 + 0.25 * vu);
        sld += -0.5 * log(v + 1e-4);
    }
    ck_assert_msg(fabs(ld[0] - sld) < 1e-4 * (1 + fabs(sld)), "training logdet %g vs %g", (double)ld[0], sld);
    /* many batches from the same data: the running averages converge to its statistics */
    for (int it = 0; it < 80; it++) ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
    for (int j = 0; j < D; j++) {
        double m, v;
        column_moments(x, N, D, j, &m, &v);
        ck_assert_msg(fabs(rm[j] - m) < 1e-4 * (1 + fabs(m)), "rm %g vs batch mean %g", (double)rm[j], m);
        ck_assert_msg(fabs(rv[j] - v * N / (N - 1)) < 1e-4 * (1 + v), "rv %g vs %g", (double)rv[j], v * N / (N - 1));
    }
    /* evaluation mode: the fixed affine map of the running averages, with the parameters */
    nf_real *g = param(&f, "log_gamma"), *beta = param(&f, "beta");
    g[0] = 0.385f, g[1] = -0.62f, beta[0] = 0.41f, beta[1] = -1.3f;
    rm[0] = 1.9f, rv[0] = 2.7f, rm[1] = -0.45f, rv[1] = 0.33f;
    f.b.training = 0;
    memset(ld, 0, sizeof ld);
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
    double want_ld = 0;
    for (int j = 0; j < D; j++) want_ld += g[j] - 0.5 * log(rv[j] + 1e-4);
    for (int i = 0; i < N; i++) {
        ck_assert(fabs(ld[i] - want_ld) < TOL * 10);
        for (int j = 0; j < D; j++) {
            double want = (x[i * D + j] - rm[j]) / sqrt(rv[j] + 1e-4) * exp(g[j]) + beta[j];
            ck_assert_msg(fabs(y[i * D + j] - want) < TOL * 10 * (1 + fabs(want)), "eval y %g vs %g",
                          (double)y[i * D + j], want);
        }
    }
    ck_assert(rm[0] == 1.9f && rv[1] == 0.33f); /* evaluation does not touch the averages */
    /* the inverse uses the running averages in training mode too */
    f.b.training = 1;
    memset(ld2, 0, sizeof ld2);
    ck_assert_int_eq(f.b.type->inverse(&f.b, x2, ld2, y, NULL, N, f.ws), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(fabs(x2[k] - x[k]) < 1e-4 * (1 + fabs(x[k])));
    ck_assert(fabs(ld2[0] + want_ld) < TOL * 10);
    fix_free(&f);
}
END_TEST

static double gsl_logabsdet(double *A, int D)
{
    gsl_matrix_view m = gsl_matrix_view_array(A, D, D);
    gsl_permutation *p = gsl_permutation_alloc(D);
    int s;
    gsl_linalg_LU_decomp(&m.matrix, p, &s);
    double ld = gsl_linalg_LU_lndet(&m.matrix);
    gsl_permutation_free(p);
    return ld;
}

START_TEST(test_lu_logdet)
{
    enum { D = 6 };
    fix f;
    fix_make(&f, "lu", "", D, 21);
    /* starts as a rotation: norms kept, log|det| = 0, signs +-1 */
    nf_real x[(D + 1) * D], y[(D + 1) * D], ld[D + 1] = {0};
    nf_test_fill_normal(x, D * D, 1.3, 4);
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, D, f.ws), NF_OK);
    for (int i = 0; i < D; i++) {
        double nx = 0, ny = 0;
        for (int j = 0; j < D; j++) nx += x[i * D + j] * x[i * D + j], ny += y[i * D + j] * y[i * D + j];
        ck_assert_msg(fabs(nx - ny) < 1e-4 * nx, "row %d: |x|^2 %g, |Wx|^2 %g", i, nx, ny);
        ck_assert(fabs(ld[i]) < 1e-5);
        ck_assert(fabs(fabs(param(&f, "sign")[i]) - 1) == 0);
    }
    /* perturbed parameters: W from the images of the unit vectors, minus the bias (image of 0) */
    nf_rng *r = nf_rng_alloc(8, 0);
    for (size_t k = 0; k < f.P->n; k++) f.P->value[k] += (nf_real)(0.4 * nf_rng_normal(r));
    nf_rng_free(r);
    memset(x, 0, sizeof x);
    for (int j = 0; j < D; j++) x[j * D + j] = 1;
    memset(ld, 0, sizeof ld);
    ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, D + 1, f.ws), NF_OK);
    double W[D * D];
    for (int j = 0; j < D; j++)
        for (int i = 0; i < D; i++) W[i * D + j] = (double)y[j * D + i] - y[D * D + i];
    double want = gsl_logabsdet(W, D);
    ck_assert_msg(fabs(ld[0] - want) < (TOL * 100) * (1 + fabs(want)), "logdet %.10g, GSL log|det W| %.10g",
                  (double)ld[0], want);
    ck_assert(fabs(want) > 0.1); /* the check is not 0 == 0 */
    fix_free(&f);
}
END_TEST

/* Direct circular convolution of every channel (double). */
static void direct_conv(double *y, const nf_real *k, const nf_real *x, int n, int c, int h, int w)
{
    for (int i = 0; i < n; i++)
        for (int q = 0; q < c; q++)
            for (int a = 0; a < h; a++)
                for (int bb = 0; bb < w; bb++) {
                    double s = 0;
                    for (int ja = 0; ja < h; ja++)
                        for (int jb = 0; jb < w; jb++)
                            s += (double)k[(q * h + ja) * w + jb] *
                                 x[((size_t)i * c + q) * h * w + ((a - ja + h) % h) * w + (bb - jb + w) % w];
                    y[((size_t)i * c + q) * h * w + a * w + bb] = s;
                }
}

START_TEST(test_fftconv_direct)
{
    static const struct { int c, h, w; const char *opts; } shapes[] = {
        {2, 3, 4, "channels=2, height=3, width=4"},
        {1, 1, 5, ""},
        {3, 1, 6, "channels=3"},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int c = shapes[s].c, h = shapes[s].h, w = shapes[s].w, D = c * h * w, n = 3;
        fix f;
        fix_make(&f, "fftconv", shapes[s].opts, D, 31 + s);
        nf_real *k = param(&f, "kernel");
        nf_rng *r = nf_rng_alloc(40 + s, 0);
        for (int j = 0; j < D; j++) k[j] += (nf_real)(0.3 * nf_rng_normal(r));
        nf_rng_free(r);
        nf_real x[3 * 24], y[3 * 24], ld[3] = {0};
        double want[3 * 24];
        nf_test_fill_normal(x, (size_t)n * D, 1.4, 9 + s);
        ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, n, f.ws), NF_OK);
        direct_conv(want, k, x, n, c, h, w);
        for (int i = 0; i < n * D; i++)
            ck_assert_msg(fabs(y[i] - want[i]) < 10 * TOL * (1 + fabs(want[i])), "shape %zu: y[%d] %g, direct %g", s, i,
                          (double)y[i], want[i]);
        /* log|det| against the full complex DFT of each kernel, computed directly */
        double lds = 0;
        for (int q = 0; q < c; q++)
            for (int u = 0; u < h; u++)
                for (int v = 0; v < w; v++) {
                    double re = 0, im = 0;
                    for (int a = 0; a < h; a++)
                        for (int bb = 0; bb < w; bb++) {
                            double t = -2 * 3.14159265358979323846 * ((double)u * a / h + (double)v * bb / w);
                            re += k[(q * h + a) * w + bb] * cos(t), im += k[(q * h + a) * w + bb] * sin(t);
                        }
                    lds += 0.5 * log(re * re + im * im);
                }
        ck_assert_msg(fabs(ld[1] - lds) < 10 * TOL * (1 + fabs(lds)), "shape %zu: logdet %g, direct DFT %g", s,
                      (double)ld[1], lds);
        fix_free(&f);
    }
}
END_TEST

START_TEST(test_fftconv_singular_and_shapes)
{
    fix f;
    fix_make(&f, "fftconv", "", 8, 5);
    nf_real *k = param(&f, "kernel");
    memset(k, 0, 8 * sizeof(nf_real));
    k[0] = 1.3f, k[1] = 1.3f; /* K(4) = 1.3 - 1.3 = 0 */
    nf_real y[2 * 8], x[2 * 8], ld[2] = {0};
    nf_test_fill_normal(y, 16, 1, 3);
    ck_assert_int_eq(f.b.type->inverse(&f.b, x, ld, y, NULL, 2, f.ws), NF_ESINGULAR);
    ck_assert_msg(strstr(nf_strerror_last(), "b0") && strstr(nf_strerror_last(), "(0, 4)"), "message: %s",
                  nf_strerror_last());
    /* close to singular but above tol is accepted; a larger tol refuses it */
    k[1] = 1.29f;
    ck_assert_int_eq(f.b.type->inverse(&f.b, x, ld, y, NULL, 2, f.ws), NF_OK);
    fix_free(&f);
    fix_make(&f, "fftconv", "height=2, width=4, tol=0.01", 8, 5);
    k = param(&f, "kernel");
    memset(k, 0, 8 * sizeof(nf_real));
    k[0] = 1.3f, k[4] = 1.29f; /* along the height: K(1, w) = 1.3 - 1.29 */
    ck_assert_int_eq(f.b.type->inverse(&f.b, x, ld, y, NULL, 2, f.ws), NF_ESINGULAR);
    ck_assert_msg(strstr(nf_strerror_last(), "frequency (1, "), "message: %s", nf_strerror_last());
    fix_free(&f);
    /* shapes that do not fit the dimension */
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_bijector b;
    const nf_bijector_type *t = nf_bijector_type_find("fftconv");
    ck_assert_int_eq(nf_bijector_create(&b, t, 10, 0, "c", "channels=3", P, S, NULL), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "10"), "message: %s", nf_strerror_last());
    ck_assert_int_eq(nf_bijector_create(&b, t, 8, 0, "d", "height=2, width=3", P, S, NULL), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "2 x 3"), "message: %s", nf_strerror_last());
    ck_assert_int_eq(nf_bijector_create(&b, t, 8, 0, "e", "depth=2", P, S, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_bijector_create(&b, nf_bijector_type_find("batchnorm"), 3, 0, "f", "momentum=1.5", P, S, NULL),
                     NF_EINVAL);
    nf_params_free(P);
    nf_params_free(S);
}
END_TEST

/* backward and inverse_backward add into dx and P->grad: two calls give twice one call. */
START_TEST(test_accumulate)
{
    static const char *types[] = {"actnorm", "batchnorm", "lu", "fftconv"};
    for (int dir = 0; dir < 2; dir++)
        for (int t = 0; t < 4; t++) {
            enum { N = 5, D = 4 };
            fix f;
            fix_make(&f, types[t], "", D, 50 + t);
            f.b.training = dir == 0 && t == 1;
            nf_rng *r = nf_rng_alloc(60 + t, 0);
            for (size_t k = 0; k < f.P->n; k++) f.P->value[k] += (nf_real)(0.3 * nf_rng_normal(r));
            nf_rng_free(r);
            nf_real x[N * D], y[N * D], ld[N] = {0}, g[N * D], u[N], d1[N * D] = {0};
            nf_test_fill_normal(x, N * D, 1.2, 70 + t);
            nf_test_fill_normal(g, N * D, 0.8, 80 + t);
            nf_test_fill_normal(u, N, 0.6, 90 + t);
            int (*bw)(nf_bijector *, nf_real *, nf_real *, const nf_real *, const nf_real *, const nf_real *,
                      const nf_real *, const nf_real *, int, nf_real *) =
                dir == 0 ? f.b.type->backward : f.b.type->inverse_backward;
            if (dir == 0) ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
            else ck_assert_int_eq(f.b.type->inverse(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
            ck_assert_int_eq(bw(&f.b, d1, NULL, g, u, x, y, NULL, N, f.ws), NF_OK);
            nf_real once[N * D], *pg = malloc(f.P->n * sizeof(nf_real));
            memcpy(once, d1, sizeof once);
            memcpy(pg, f.P->grad, f.P->n * sizeof(nf_real));
            ck_assert_int_eq(bw(&f.b, d1, NULL, g, u, x, y, NULL, N, f.ws), NF_OK);
            double mx = 0;
            for (int k = 0; k < N * D; k++) {
                ck_assert(fabs(d1[k] - 2 * once[k]) <= 1e-5 * (1 + fabs(once[k])));
                mx = fmax(mx, fabs(once[k]));
            }
            for (size_t k = 0; k < f.P->n; k++) ck_assert(fabs(f.P->grad[k] - 2 * pg[k]) <= 1e-4 * (1 + fabs(pg[k])));
            ck_assert_msg(mx > 1e-3, "%s: input gradient is zero", types[t]);
            free(pg);
            fix_free(&f);
        }
}
END_TEST

/* Non-finite inputs are reported with the bijector's name. */
START_TEST(test_nonfinite)
{
    static const char *types[] = {"actnorm", "batchnorm", "lu", "fftconv"};
    for (int t = 0; t < 4; t++) {
        fix f;
        fix_make(&f, types[t], "", 4, 3);
        nf_real x[8] = {0.3f, 1.2f, -0.4f, 0.8f, 0.1f, NAN, 0.2f, 0.5f}, y[8], ld[2] = {0};
        ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, 2, f.ws), NF_ENONFINITE);
        ck_assert_msg(strstr(nf_strerror_last(), "b0"), "%s: %s", types[t], nf_strerror_last());
        fix_free(&f);
    }
}
END_TEST

static Suite *bij_linear_suite(void)
{
    Suite *s = suite_create("bij_linear");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_actnorm_init);
    tcase_add_test(tc, test_batchnorm_running);
    tcase_add_test(tc, test_lu_logdet);
    tcase_add_test(tc, test_fftconv_direct);
    tcase_add_test(tc, test_fftconv_singular_and_shapes);
    tcase_add_test(tc, test_accumulate);
    tcase_add_test(tc, test_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bij_linear_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
