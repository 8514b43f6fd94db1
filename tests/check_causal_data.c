/* tests/check_causal_data.c - the causal data sets (datasets/causal.h): the closed-form Y[0]
 * density of causal-poly against GSL quadrature of its definition, every interventional density
 * integrating to one, the propensity against Bayes' rule on the generated arms, the generated
 * outcomes' means against the exact ones, the file round trip and the validation errors. */
#include <check.h>
#include <gsl/gsl_integration.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "datasets/causal.h"

static const double LOG_2PI = 1.8378770664093454836;

typedef struct {
    double y, b;
} y0_arg;

/* the definition: p(Y[0] = y) = int p_X(x) N(y; 1.5 + 2.18 x, 1) dx, p_X = 0.5 N(b, 1) + 0.5 N(0, 1) */
static double y0_definition(double x, void *p)
{
    const y0_arg *q = p;
    double px = 0.5 * exp(-0.5 * (x - q->b) * (x - q->b) - 0.5 * LOG_2PI) + 0.5 * exp(-0.5 * x * x - 0.5 * LOG_2PI);
    double r = q->y - 1.5 - 2.18 * x;
    return px * exp(-0.5 * r * r - 0.5 * LOG_2PI);
}

START_TEST(poly_y0_closed_form_matches_quadrature)
{
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(500);
    const double bs[] = {2.0, 3.0, 4.0}, ys[] = {-7.3, -1.25, 1.5, 4.385, 9.7, 14.2};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++) {
            y0_arg q = {.y = ys[j], .b = bs[i]};
            gsl_function F = {.function = y0_definition, .params = &q};
            double v, err, lp;
            gsl_integration_qagi(&F, 0, 1e-12, 500, w, &v, &err);
            ck_assert_int_eq(nf_causal_truth_logp("causal-poly", bs[i], 0, &ys[j], 1, &lp), NF_OK);
            ck_assert_msg(fabs(lp - log(v)) < 1e-8, "b %g y %g: closed form %.12g, quadrature %.12g", bs[i], ys[j], lp,
                          log(v));
        }
    gsl_integration_workspace_free(w);
}
END_TEST

/* int exp(logp) over a fine grid (trapezoid on a wide range) */
static double integral_1d(const char *fam, double b, int arm)
{
    const int n = 12001;
    const double lo = -30, hi = 150, h = (hi - lo) / (n - 1);
    double *y = malloc(n * sizeof *y), *lp = malloc(n * sizeof *lp), s = 0;
    for (int i = 0; i < n; i++) y[i] = lo + h * i;
    ck_assert_int_eq(nf_causal_truth_logp(fam, b, arm, y, n, lp), NF_OK);
    for (int i = 0; i < n; i++) s += (i == 0 || i == n - 1 ? 0.5 : 1) * exp(lp[i]) * h;
    free(y), free(lp);
    return s;
}

START_TEST(poly_densities_integrate_to_one)
{
    for (int arm = 0; arm < 2; arm++)
        for (double b = 2; b <= 4; b += 1) {
            double s = integral_1d("causal-poly", b, arm);
            ck_assert_msg(fabs(s - 1) < 1e-6, "arm %d b %g: integral %.9f", arm, b, s);
        }
}
END_TEST

START_TEST(moons_densities_integrate_to_one)
{
    const int n = 121;
    const double lo = -2.5, hi = 2.5, h = (hi - lo) / (n - 1);
    double *y = malloc((size_t)n * n * 2 * sizeof *y), *lp = malloc((size_t)n * n * sizeof *lp);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) y[2 * (i * n + j)] = lo + h * i, y[2 * (i * n + j) + 1] = lo + h * j;
    for (int arm = 0; arm < 2; arm++) {
        ck_assert_int_eq(nf_causal_truth_logp("causal-moons", 0, arm, y, (size_t)n * n, lp), NF_OK);
        double s = 0;
        for (int k = 0; k < n * n; k++) s += exp(lp[k]) * h * h;
        ck_assert_msg(fabs(s - 1) < 2e-3, "moons arm %d: integral %.6f", arm, s);
    }
    free(y), free(lp);
}
END_TEST

START_TEST(poly_generated_means_and_propensity)
{
    nf_causal_data d;
    const double b = 3;
    ck_assert_int_eq(nf_causal_make(&d, "causal-poly", 20000, b, 7), NF_OK);
    ck_assert_int_eq(nf_causal_validate(&d, "made"), NF_OK);
    double m[2] = {0, 0}, t[2], n1 = 0;
    for (size_t i = 0; i < d.n; i++) m[0] += d.y0[i] / d.n, m[1] += d.y1[i] / d.n, n1 += d.a[i];
    ck_assert_msg(n1 == d.n / 2, "treated %g of %zu (expected half)", n1, d.n);
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(nf_causal_truth_mean("causal-poly", b, a, &t[a]), NF_OK);
        ck_assert_msg(fabs(m[a] - t[a]) < 0.1, "arm %d: sample mean %g, exact %g", a, m[a], t[a]);
    }
    /* the stored truths are the functions' values, and the outcome is the treated arm's */
    double lp;
    ck_assert_int_eq(nf_causal_truth_logp("causal-poly", b, 1, &d.y1[123], 1, &lp), NF_OK);
    ck_assert(fabs(lp - d.logp1[123]) < 1e-12);
    ck_assert(d.y[123] == d.y0[123] && d.y[19000] == d.y1[19000]);
    /* propensity by Bayes' rule on equal arms: N(x; 0, 1) / (N(x; 0, 1) + N(x; b, 1)) */
    double x = 1.385, p;
    ck_assert_int_eq(nf_causal_truth_propensity("causal-poly", b, &x, 1, &p), NF_OK);
    double e0 = exp(-0.5 * x * x), eb = exp(-0.5 * (x - b) * (x - b));
    ck_assert(fabs(p - e0 / (e0 + eb)) < 1e-12);
    nf_causal_data_free(&d);
}
END_TEST

START_TEST(moons_propensity_separates_the_moons)
{
    nf_causal_data d;
    ck_assert_int_eq(nf_causal_make(&d, "causal-moons", 400, 0, 3), NF_OK);
    double right = 0;
    for (size_t i = 0; i < d.n; i++) right += (d.propensity[i] > 0.5) == (d.a[i] == 1);
    ck_assert_msg(right / d.n > 0.9, "the propensity classifies %.3f of the units", right / d.n);
    /* rotations keep the norm up to noise: |y0| ~ |x| */
    double e = 0;
    for (size_t i = 0; i < d.n; i++) e += fabs(hypot(d.y0[2 * i], d.y0[2 * i + 1]) - hypot(d.x[2 * i], d.x[2 * i + 1]));
    ck_assert_msg(e / d.n < 0.2, "mean norm change %g", e / d.n);
    nf_causal_data_free(&d);
}
END_TEST

START_TEST(file_round_trip_and_validation)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_causal_%d.h5", (int)getpid());
    nf_causal_data d, e;
    ck_assert_int_eq(nf_causal_make(&d, "causal-poly", 50, 2.5, 9), NF_OK);
    ck_assert_int_eq(nf_causal_save(&d, path), NF_OK);
    ck_assert_int_eq(nf_causal_load(&e, path, NULL, NULL, NULL), NF_OK);
    ck_assert(e.n == 50 && e.dx == 1 && e.dy == 1 && !strcmp(e.family, "causal-poly") && e.shift == 2.5);
    ck_assert(e.y0 && e.logp1 && e.propensity && e.logp1[17] == d.logp1[17] && e.y[49] == d.y[49]);
    nf_source *s;
    ck_assert_int_eq(nf_causal_source(&s, &e), NF_OK);
    ck_assert(s->n == 50 && s->dim == 1 && s->ctx_dim == 2);
    nf_rows r = nf_source_rows(s);
    ck_assert(r.ctx[2 * 49 + 1] == 1 && r.ctx[1] == 0 && fabs(r.x[3] - d.y[3]) < 1e-5);
    nf_source_free(s);
    nf_causal_data_free(&e);
    /* a treatment that is not 0/1, an empty arm, a NaN outcome */
    d.a[7] = 2;
    ck_assert_int_eq(nf_causal_validate(&d, "bad.h5"), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "unit 7") && strstr(nf_strerror_last(), "0 or 1"), "%s",
                  nf_strerror_last());
    for (size_t i = 0; i < d.n; i++) d.a[i] = 0;
    ck_assert_int_eq(nf_causal_validate(&d, "bad.h5"), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "no treated"), "%s", nf_strerror_last());
    d.a[3] = 1;
    d.y[5] = NAN;
    ck_assert_int_eq(nf_causal_validate(&d, "bad.h5"), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "outcome 0 of unit 5"), "%s", nf_strerror_last());
    nf_causal_data_free(&d);
    ck_assert_int_ne(nf_causal_make(&d, "causal-nope", 50, 1, 1), NF_OK);
    unlink(path);
}
END_TEST

/* A share of a file holds its units only and reads the others from the file on demand: the rows
 * fetched equal those of the whole file, in any mix; a bad value is named by its unit in the file,
 * whether it is in the share or read later. */
START_TEST(a_share_holds_its_units_and_reads_the_others)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_causal_share_%d.h5", (int)getpid());
    nf_causal_data d;
    ck_assert_int_eq(nf_causal_make(&d, "causal-moons", 101, 0, 4), NF_OK); /* 2 covariates, 2-D outcome */
    ck_assert_int_eq(nf_causal_save(&d, path), NF_OK);
    nf_source *all, *sh, *one;
    ck_assert_int_eq(nf_causal_source(&all, &d), NF_OK);
    ck_assert_int_eq(nf_causal_source_share(&sh, path, NULL, NULL, NULL, 1, 3), NF_OK);
    ck_assert(sh->n == 101 && sh->dim == 2 && sh->ctx_dim == 3 && sh->partial);
    for (size_t i = 0; i < 101; i++) ck_assert_int_eq(nf_source_owns(sh, i), i >= 33 && i < 67);
    const size_t idx[] = {0, 50, 100, 34, 2, 66, 67, 33, 50};
    const int n = (int)(sizeof idx / sizeof idx[0]);
    nf_batch a = {0}, b = {0};
    ck_assert_int_eq(nf_source_fetch(all, idx, n, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(sh, idx, n, &b), NF_OK);
    ck_assert(b.n == n && b.dim == 2 && b.ctx_dim == 3);
    for (int i = 0; i < n; i++) {
        ck_assert(b.idx[i] == idx[i]);
        for (int j = 0; j < 2; j++) ck_assert_msg(a.x[2 * i + j] == b.x[2 * i + j], "unit %zu, outcome %d", idx[i], j);
        for (int j = 0; j < 3; j++) ck_assert_msg(a.ctx[3 * i + j] == b.ctx[3 * i + j], "unit %zu, context %d", idx[i], j);
    }
    const size_t own[] = {40, 33, 66};
    /* a split of a share: index views over the same 101 units in every process */
    nf_source *tr, *va;
    ck_assert_int_eq(nf_source_split(sh, 0.2, 7, &va, &tr), NF_OK);
    ck_assert(tr->n + va->n == 101 && tr->partial);
    nf_source_free(tr), nf_source_free(va);
    /* one part is the whole file, loaded as nf_causal_source does */
    ck_assert_int_eq(nf_causal_source_share(&one, path, NULL, NULL, NULL, 0, 1), NF_OK);
    ck_assert(!one->partial && one->n == 101 && nf_source_rows(one).x[7] == nf_source_rows(all).x[7]);
    nf_source_free(one);
    ck_assert_int_eq(nf_causal_source_share(&one, path, NULL, NULL, NULL, 3, 3), NF_EINVAL);
    /* a NaN outcome at unit 80: the share holding it refuses to load, naming the unit; another share
     * loads, and refuses the unit when a batch asks for it */
    d.y[2 * 80 + 1] = NAN;
    ck_assert_int_eq(nf_causal_save(&d, path), NF_OK);
    ck_assert_int_eq(nf_causal_source_share(&one, path, NULL, NULL, NULL, 1, 2), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "outcome 1 of unit 80"), "%s", nf_strerror_last());
    ck_assert_int_eq(nf_causal_source_share(&one, path, NULL, NULL, NULL, 0, 2), NF_OK);
    const size_t bad[] = {3, 80};
    ck_assert_int_eq(nf_source_fetch(one, bad, 2, &b), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "outcome 1 of unit 80"), "%s", nf_strerror_last());
    nf_source_free(one);
    unlink(path);
    /* the share's file gone: its own units still come from memory, others cannot */
    ck_assert_int_eq(nf_source_fetch(sh, own, 3, &b), NF_OK);
    ck_assert_int_ne(nf_source_fetch(sh, idx, 1, &b), NF_OK);
    nf_batch_free(&a), nf_batch_free(&b);
    nf_source_free(sh), nf_source_free(all);
    nf_causal_data_free(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("causal_data");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, poly_y0_closed_form_matches_quadrature);
    tcase_add_test(t, poly_densities_integrate_to_one);
    tcase_add_test(t, moons_densities_integrate_to_one);
    tcase_add_test(t, poly_generated_means_and_propensity);
    tcase_add_test(t, moons_propensity_separates_the_moons);
    tcase_add_test(t, file_round_trip_and_validation);
    tcase_add_test(t, a_share_holds_its_units_and_reads_the_others);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
