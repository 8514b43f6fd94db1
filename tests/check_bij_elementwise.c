/* tests/check_bij_elementwise.c - the elementwise bijectors: logit, sigmoid, standardize.
 *
 * The shared harness draws Gaussian inputs for both directions, which fits standardize but not
 * logit (data in [0, 1]) or the inverse of sigmoid (latents in (0, 1)); so besides the table rows
 * for standardize, check_domain() runs the same checks - round trips both ways, log-determinants
 * cancelling, a brute-force Jacobian log-determinant and finite-difference input gradients through
 * forward and through inverse (double build) - on inputs drawn from each map's own domain.  Then
 * known values, the domain errors, the stability of the extremes, and standardize's statistics. */
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "flows/bijector.h"
#include "tests/testutil.h"

static const nf_bij_case cases[] = {
    {"standardize", "", 3, 0, 0, 0, 0, 0},
    {"standardize", "", 5, 2, 2.2, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

typedef struct made_bij {
    nf_bijector b;
    nf_params *P, *S;
} made_bij;

static int make(made_bij *m, const char *type, int D, const char *opts)
{
    memset(m, 0, sizeof *m);
    m->P = nf_params_alloc();
    m->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(2385, 0);
    int rc = nf_bijector_create(&m->b, nf_bijector_type_find(type), D, 0, "t0", opts, m->P, m->S, rng);
    nf_rng_free(rng);
    if (rc != NF_OK) {
        nf_params_free(m->P);
        nf_params_free(m->S);
        m->P = m->S = NULL;
    }
    return rc;
}

static void unmake(made_bij *m)
{
    nf_bijector_destroy(&m->b);
    nf_params_free(m->P);
    nf_params_free(m->S);
}

static int fwd(nf_bijector *b, nf_real *y, nf_real *ld, const nf_real *x, int n)
{
    memset(ld, 0, (size_t)n * sizeof(nf_real));
    return b->type->forward(b, y, ld, x, NULL, n, NULL);
}

static int inv(nf_bijector *b, nf_real *x, nf_real *ld, const nf_real *y, int n)
{
    memset(ld, 0, (size_t)n * sizeof(nf_real));
    return b->type->inverse(b, x, ld, y, NULL, n, NULL);
}

static int close_enough(double a, double b, double tol) { return fabs(a - b) <= tol * (1.0 + fabs(b)); }

#ifdef NF_DOUBLE
/* L = sum w * out + sum u * logdet of one direction at `in`. */
static double loss(nf_bijector *b, int dir, const nf_real *in, const nf_real *w, const nf_real *u, int n)
{
    int D = b->dim;
    nf_real *out = calloc((size_t)n * D, sizeof(nf_real)), *ld = calloc((size_t)n, sizeof(nf_real));
    ck_assert_int_eq(dir ? inv(b, out, ld, in, n) : fwd(b, out, ld, in, n), NF_OK);
    double L = 0;
    for (int k = 0; k < n * D; k++) L += (double)w[k] * out[k];
    for (int i = 0; i < n; i++) L += (double)u[i] * ld[i];
    free(out);
    free(ld);
    return L;
}

/* Finite-difference input gradients of one direction, and (forward) the brute-force log|det J|. */
static void fd_checks(nf_bijector *b, int dir, nf_real *in, int n)
{
    const int D = b->dim;
    const double eps = 1e-6;
    nf_real *w = calloc((size_t)n * D, sizeof(nf_real)), *u = calloc((size_t)n, sizeof(nf_real));
    nf_real *out = calloc((size_t)n * D, sizeof(nf_real)), *ld = calloc((size_t)n, sizeof(nf_real));
    nf_real *g = calloc((size_t)n * D, sizeof(nf_real)), *op = calloc((size_t)n * D, sizeof(nf_real));
    nf_real *om = calloc((size_t)n * D, sizeof(nf_real)), *ldt = calloc((size_t)n, sizeof(nf_real));
    nf_test_fill_normal(w, (size_t)n * D, 0.7, 29);
    nf_test_fill_normal(u, (size_t)n, 0.9, 31);
    ck_assert_int_eq(dir ? inv(b, out, ld, in, n) : fwd(b, out, ld, in, n), NF_OK);
    int rc = dir ? b->type->inverse_backward(b, g, NULL, w, u, in, out, NULL, n, NULL)
                 : b->type->backward(b, g, NULL, w, u, in, out, NULL, n, NULL);
    ck_assert_int_eq(rc, NF_OK);
    for (int k = 0; k < n * D; k++) {
        nf_real keep = in[k];
        in[k] = keep + eps;
        double Lp = loss(b, dir, in, w, u, n);
        in[k] = keep - eps;
        double Lm = loss(b, dir, in, w, u, n);
        in[k] = keep;
        double fd = (Lp - Lm) / (2 * eps);
        ck_assert_msg(nf_test_relerr(g[k], fd, 1e-2) < 1e-6, "%s %s: d/din[%d] analytic %.10g, finite difference %.10g",
                      b->type->name, dir ? "inverse" : "forward", k, (double)g[k], fd);
    }
    /* brute-force Jacobian of this direction, per row */
    double *J = calloc((size_t)D * D, sizeof(double));
    gsl_permutation *p = gsl_permutation_alloc((size_t)D);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < D; j++) {
            nf_real keep = in[i * D + j];
            in[i * D + j] = keep + eps;
            ck_assert_int_eq(dir ? inv(b, op, ldt, in, n) : fwd(b, op, ldt, in, n), NF_OK);
            in[i * D + j] = keep - eps;
            ck_assert_int_eq(dir ? inv(b, om, ldt, in, n) : fwd(b, om, ldt, in, n), NF_OK);
            in[i * D + j] = keep;
            for (int k = 0; k < D; k++) J[k * D + j] = (op[i * D + k] - om[i * D + k]) / (2 * eps);
        }
        gsl_matrix_view mv = gsl_matrix_view_array(J, (size_t)D, (size_t)D);
        int sign;
        gsl_linalg_LU_decomp(&mv.matrix, p, &sign);
        double brute = gsl_linalg_LU_lndet(&mv.matrix);
        ck_assert_msg(fabs(brute - ld[i]) < 1e-6 * (1 + fabs(brute)), "%s %s: logdet %.10g, brute force %.10g (row %d)",
                      b->type->name, dir ? "inverse" : "forward", (double)ld[i], brute, i);
    }
    gsl_permutation_free(p);
    free(J);
    free(w); free(u); free(out); free(ld); free(g); free(op); free(om); free(ldt);
}
#endif

/* Round trips from x (data domain) and from z (latent domain), and the double-build checks. */
static void check_domain(nf_bijector *b, nf_real *x, nf_real *z, int n)
{
    const int D = b->dim;
    size_t nd = (size_t)n * D;
    nf_real *y = calloc(nd, sizeof(nf_real)), *x2 = calloc(nd, sizeof(nf_real));
    nf_real *ld = calloc((size_t)n, sizeof(nf_real)), *ld2 = calloc((size_t)n, sizeof(nf_real));
    ck_assert_int_eq(fwd(b, y, ld, x, n), NF_OK);
    ck_assert_int_eq(inv(b, x2, ld2, y, n), NF_OK);
    for (size_t k = 0; k < nd; k++)
        ck_assert_msg(close_enough(x2[k], x[k], NF_TEST_TOL_ROUNDTRIP), "%s: inverse(forward(x))[%zu] = %.9g, x = %.9g",
                      b->type->name, k, (double)x2[k], (double)x[k]);
    for (int i = 0; i < n; i++)
        ck_assert_msg(close_enough(ld[i] + ld2[i], 0, 10 * NF_TEST_TOL_ROUNDTRIP), "%s: logdets %g + %g (row %d)",
                      b->type->name, (double)ld[i], (double)ld2[i], i);
    ck_assert_int_eq(inv(b, x2, ld2, z, n), NF_OK);
    ck_assert_int_eq(fwd(b, y, ld, x2, n), NF_OK);
    for (size_t k = 0; k < nd; k++)
        ck_assert_msg(close_enough(y[k], z[k], NF_TEST_TOL_ROUNDTRIP), "%s: forward(inverse(z))[%zu] = %.9g, z = %.9g",
                      b->type->name, k, (double)y[k], (double)z[k]);
#ifdef NF_DOUBLE
    fd_checks(b, 0, x, n);
    fd_checks(b, 1, z, n);
#endif
    free(y); free(x2); free(ld); free(ld2);
}

START_TEST(test_logit_domain_checks)
{
    enum { N = 7, D = 3 };
    const char *opts[] = {"", "alpha=0.05", "alpha=0"};
    for (int o = 0; o < 3; o++) {
        made_bij m;
        ck_assert_int_eq(make(&m, "logit", D, opts[o]), NF_OK);
        nf_real x[N * D], z[N * D];
        nf_test_fill_uniform(x, N * D, 0.015, 0.985, 5);
        nf_test_fill_normal(z, N * D, 1.9, 6);
        check_domain(&m.b, x, z, N);
        unmake(&m);
    }
}
END_TEST

START_TEST(test_logit_values_and_edges)
{
    made_bij m;
    ck_assert_int_eq(make(&m, "logit", 4, "alpha=0.05"), NF_OK);
    nf_real x[8] = {0.3125f, 0, 1, 0.8125f, -0.04f, 1.03f, 0.5f, 0.125f}, y[8], x2[8], ld[2], ld2[2];
    ck_assert_int_eq(fwd(&m.b, y, ld, x, 2), NF_OK);
    double tol = 20 * NF_REAL_EPS;
    ck_assert(close_enough(y[0], log(0.33125 / 0.66875), tol));
    ck_assert(close_enough(y[1], log(0.05 / 0.95), tol));
    ck_assert(close_enough(y[2], log(0.95 / 0.05), tol));
    double want = 0;
    for (int j = 0; j < 4; j++) {
        double p = 0.05 + 0.9 * x[j];
        want += log(0.9) - log(p) - log(1 - p);
    }
    ck_assert_msg(close_enough(ld[0], want, tol), "logdet %.9g, expected %.9g", (double)ld[0], want);
    /* the margin lets values just outside [0, 1] (from samples beyond logit(alpha)) round-trip */
    ck_assert_int_eq(inv(&m.b, x2, ld2, y, 2), NF_OK);
    for (int k = 0; k < 8; k++) ck_assert(close_enough(x2[k], x[k], NF_TEST_TOL_ROUNDTRIP));
    /* and every latent, however far, maps back inside the domain */
    nf_real zf[4] = {60, -60, 13.5f, -7.25f}, xf[4];
    ck_assert_int_eq(inv(&m.b, xf, ld2, zf, 1), NF_OK);
    for (int j = 0; j < 4; j++) ck_assert(isfinite(xf[j]) && xf[j] > -0.0556 && xf[j] < 1.0556);
    ck_assert(isfinite(ld2[0]));
    unmake(&m);

    /* alpha = 1e-6 (default): 0 and 1 themselves are fine */
    ck_assert_int_eq(make(&m, "logit", 2, ""), NF_OK);
    nf_real e[2] = {0, 1}, ey[2], ex[2];
    ck_assert_int_eq(fwd(&m.b, ey, ld, e, 1), NF_OK);
    ck_assert(isfinite(ld[0]) && ey[0] < -13 && ey[1] > 13);
    ck_assert_int_eq(inv(&m.b, ex, ld2, ey, 1), NF_OK);
    ck_assert(fabs(ex[0]) < 1e-5 && fabs(ex[1] - 1) < 1e-5);
    unmake(&m);
}
END_TEST

START_TEST(test_logit_refuses_outside)
{
    made_bij m;
    ck_assert_int_eq(make(&m, "logit", 3, ""), NF_OK);
    nf_real y[6], ld[2];
    const nf_real bad[] = {1.5f, -0.2f, 255, (nf_real)NAN, (nf_real)INFINITY};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        nf_real x[6] = {0.25f, 0.5f, 0.75f, 0.125f, 0.375f, 0.625f};
        x[4] = bad[t];
        ck_assert_int_eq(fwd(&m.b, y, ld, x, 2), NF_EDATA);
        const char *msg = nf_strerror_last();
        ck_assert_ptr_nonnull(strstr(msg, "logit"));
        ck_assert_ptr_nonnull(strstr(msg, "[0, 1]"));
        ck_assert_ptr_nonnull(strstr(msg, "x[1][1]"));
    }
    unmake(&m);
    /* without a margin the end points themselves are outside the domain */
    ck_assert_int_eq(make(&m, "logit", 1, "alpha=0"), NF_OK);
    nf_real zero = 0, one = 1;
    ck_assert_int_eq(fwd(&m.b, y, ld, &zero, 1), NF_EDATA);
    ck_assert_int_eq(fwd(&m.b, y, ld, &one, 1), NF_EDATA);
    unmake(&m);
    ck_assert_int_eq(make(&m, "logit", 2, "alpha=0.5"), NF_EINVAL);
    ck_assert_int_eq(make(&m, "logit", 2, "margin=0.1"), NF_EINVAL);
}
END_TEST

START_TEST(test_sigmoid)
{
    enum { N = 6, D = 4 };
    made_bij m;
    ck_assert_int_eq(make(&m, "sigmoid", D, ""), NF_OK);
    ck_assert_int_eq((int)(m.P->n + m.S->n), 0);
    nf_real x[N * D], z[N * D], y[N * D], ld[N];
    nf_test_fill_normal(x, N * D, 2.1, 7);
    nf_test_fill_uniform(z, N * D, 0.012, 0.988, 8);
    check_domain(&m.b, x, z, N);
    /* a known value */
    x[0] = (nf_real)0.7;
    ck_assert_int_eq(fwd(&m.b, y, ld, x, 1), NF_OK);
    double s = 1 / (1 + exp(-0.7)), want = log(s * (1 - s));
    for (int j = 1; j < D; j++) {
        double sj = 1 / (1 + exp(-(double)x[j]));
        want += log(sj * (1 - sj));
    }
    ck_assert(close_enough(y[0], s, 10 * NF_REAL_EPS));
    ck_assert(close_enough(ld[0], want, 50 * NF_REAL_EPS));
    /* far tails: the output saturates, the log-determinant stays finite and exact */
    nf_real big[D] = {95, -95, 41.5f, -41.5f};
    ck_assert_int_eq(fwd(&m.b, y, ld, big, 1), NF_OK);
    ck_assert(isfinite(ld[0]));
    ck_assert_msg(fabs(ld[0] + 2 * 95 + 2 * 41.5) < 1e-3, "far-tail logdet %g", (double)ld[0]);
    /* the inverse needs (0, 1) */
    const nf_real bad[] = {0, 1, 1.3f, -0.1f, (nf_real)NAN};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        nf_real zz[D] = {0.25f, 0.5f, 0.75f, 0.125f};
        zz[2] = bad[t];
        ck_assert_int_eq(inv(&m.b, y, ld, zz, 1), NF_EDATA);
        ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "sigmoid"));
        ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "y[0][2]"));
    }
    nf_real nan_in[D] = {0.5f, (nf_real)NAN, 0, 0};
    ck_assert_int_eq(fwd(&m.b, y, ld, nan_in, 1), NF_ENONFINITE);
    unmake(&m);
}
END_TEST

/* sigmoid undoes logit(alpha = 0): the composition is the identity and the log-dets cancel. */
START_TEST(test_sigmoid_undoes_logit)
{
    enum { N = 5, D = 3 };
    made_bij lg, sg;
    ck_assert_int_eq(make(&lg, "logit", D, "alpha=0"), NF_OK);
    ck_assert_int_eq(make(&sg, "sigmoid", D, ""), NF_OK);
    nf_real x[N * D], y[N * D], x2[N * D], ld[N], ld2[N];
    nf_test_fill_uniform(x, N * D, 0.03, 0.97, 12);
    ck_assert_int_eq(fwd(&lg.b, y, ld, x, N), NF_OK);
    ck_assert_int_eq(fwd(&sg.b, x2, ld2, y, N), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(close_enough(x2[k], x[k], NF_TEST_TOL_ROUNDTRIP));
    for (int i = 0; i < N; i++) ck_assert(close_enough(ld[i] + ld2[i], 0, 10 * NF_TEST_TOL_ROUNDTRIP));
    unmake(&lg);
    unmake(&sg);
}
END_TEST

START_TEST(test_standardize)
{
    enum { N = 64, D = 4 };
    made_bij m;
    ck_assert_int_eq(make(&m, "standardize", D, ""), NF_OK);
    ck_assert_int_eq((int)m.P->n, 0);
    ck_assert_ptr_nonnull(nf_params_find(m.S, "t0.mean"));
    ck_assert_ptr_nonnull(nf_params_find(m.S, "t0.std"));
    nf_real x[N * D], y[N * D], ld[N];
    const double mu[D] = {2.385, -7.1, 1031.5, 0.0}, sd[D] = {0.31, 4.2, 25.0, 1e-3};
    nf_test_fill_normal(x, N * D, 1.0, 21);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) x[i * D + j] = (nf_real)(mu[j] + sd[j] * x[i * D + j]);
    /* before init_data: the identity */
    ck_assert_int_eq(fwd(&m.b, y, ld, x, N), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(y[k] == x[k]);
    for (int i = 0; i < N; i++) ck_assert(ld[i] == 0);
    ck_assert_int_eq(m.b.type->init_data(&m.b, x, N), NF_OK);
    ck_assert_int_eq(fwd(&m.b, y, ld, x, N), NF_OK);
    double tol = 1e3 * NF_REAL_EPS, want_ld = 0;
    for (int j = 0; j < D; j++) {
        double s1 = 0, s2 = 0, m1 = 0, m2 = 0;
        for (int i = 0; i < N; i++) {
            s1 += y[i * D + j];
            s2 += (double)y[i * D + j] * y[i * D + j];
            m1 += x[i * D + j];
        }
        m1 /= N;
        for (int i = 0; i < N; i++) m2 += (x[i * D + j] - m1) * (x[i * D + j] - m1);
        want_ld -= 0.5 * log(m2 / N);
        ck_assert_msg(fabs(s1 / N) < tol, "column %d: mean %g after standardizing", j, s1 / N);
        ck_assert_msg(fabs(s2 / N - 1) < tol, "column %d: variance %g after standardizing", j, s2 / N);
    }
    for (int i = 0; i < N; i++) ck_assert_msg(close_enough(ld[i], want_ld, tol), "logdet %g, expected %g", (double)ld[i], want_ld);
    /* set again from other data (moderate offsets, so finite differences keep their precision):
     * round trips, log-determinants and gradients with the statistics in place */
    const double mu2[D] = {0.625, -1.2, 2.0, 0.0}, sd2[D] = {0.31, 4.2, 2.5, 0.05};
    nf_test_fill_normal(x, N * D, 1.0, 23);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) x[i * D + j] = (nf_real)(mu2[j] + sd2[j] * x[i * D + j]);
    ck_assert_int_eq(m.b.type->init_data(&m.b, x, N), NF_OK);
    const nf_real *s = m.S->value + nf_params_find(m.S, "t0.std")->offset;
    ck_assert(fabs(s[3] - 0.05) < 0.015 && fabs(s[1] - 4.2) < 1.2);
    nf_real z[N * D];
    nf_test_fill_normal(z, N * D, 1.3, 22);
    check_domain(&m.b, x, z, 8);
    unmake(&m);
}
END_TEST

START_TEST(test_standardize_edge_cases)
{
    enum { N = 10, D = 3 };
    made_bij m;
    ck_assert_int_eq(make(&m, "standardize", D, ""), NF_OK);
    nf_real x[N * D], y[N * D], ld[N];
    nf_test_fill_normal(x, N * D, 1.7, 3);
    for (int i = 0; i < N; i++) x[i * D + 1] = (nf_real)4.625; /* a constant column */
    for (int i = 0; i < N; i++) x[i * D + 2] = 0;              /* an all-zero column */
    ck_assert_int_eq(m.b.type->init_data(&m.b, x, N), NF_OK);
    ck_assert_int_eq(fwd(&m.b, y, ld, x, N), NF_OK);
    for (int i = 0; i < N; i++) {
        ck_assert(isfinite(ld[i]));
        ck_assert(y[i * D + 1] == 0 && y[i * D + 2] == 0);
    }
    const nf_real *s = m.S->value + nf_params_find(m.S, "t0.std")->offset;
    ck_assert(s[1] > 0 && s[1] < 1e-6 && s[2] > 0 && s[2] < 1e-6);
    /* refused: too few samples, non-finite data; the statistics stay as they were */
    nf_real keep = s[0];
    ck_assert_int_eq(m.b.type->init_data(&m.b, x, 1), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "standardize"));
    x[2 * D + 0] = (nf_real)NAN;
    ck_assert_int_eq(m.b.type->init_data(&m.b, x, N), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "x[2][0]"));
    ck_assert(s[0] == keep);
    ck_assert_int_eq(fwd(&m.b, y, ld, x, N), NF_ENONFINITE);
    /* corrupt stored statistics are reported, not used */
    m.S->value[nf_params_find(m.S, "t0.std")->offset] = -1;
    x[2 * D + 0] = (nf_real)0.5;
    ck_assert_int_eq(fwd(&m.b, y, ld, x, N), NF_ENONFINITE);
    unmake(&m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bij_elementwise");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_logit_domain_checks);
    tcase_add_test(tc, test_logit_values_and_edges);
    tcase_add_test(tc, test_logit_refuses_outside);
    tcase_add_test(tc, test_sigmoid);
    tcase_add_test(tc, test_sigmoid_undoes_logit);
    tcase_add_test(tc, test_standardize);
    tcase_add_test(tc, test_standardize_edge_cases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
