/* tests/check_dist.c - base distributions: known values, finite-difference gradients (double build),
 * normalisation in 1-D (GSL quadrature) and 2-D (grid), samplers against their densities (moments and
 * a chi-square on a histogram), and option errors.  Every check loops over the three types. */
#include <check.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "distributions/dist.h"

#ifdef NF_DOUBLE
#define TOL_VALUE 1e-10
#define TOL_NORM 1e-8
#else
#define TOL_VALUE 2e-5
#define TOL_NORM 2e-5
#endif

typedef struct {
    const char *type, *options;
} dist_case;

static const dist_case cases[] = {
    {"normal", ""},
    {"diag-normal", ""},
    {"gmm", "k=3, spread=0.8"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double relerr(double a, double b, double floor)
{
    double m = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / m;
}

/* A distribution with parameters moved away from their initial values, so no term is trivially zero. */
typedef struct {
    nf_dist d;
    nf_params *P;
    nf_rng *rng;
} fixture;

static void fixture_make(fixture *f, const dist_case *c, int dim, uint64_t seed)
{
    f->P = nf_params_alloc();
    f->rng = nf_rng_alloc(seed, 0);
    ck_assert_ptr_nonnull(f->P);
    const nf_dist_type *t = nf_dist_type_find(c->type);
    ck_assert_msg(t != NULL, "type %s not registered", c->type);
    int rc = nf_dist_create(&f->d, t, dim, "base", c->options, f->P, NULL, f->rng);
    ck_assert_msg(rc == NF_OK, "%s: create failed: %s", c->type, nf_strerror_last());
    nf_rng *r = nf_rng_alloc(seed, 7);
    for (size_t i = 0; i < f->P->n; i++) f->P->value[i] += (nf_real)(0.7 * (nf_rng_uniform(r) - 0.5));
    nf_rng_free(r);
}

static void fixture_free(fixture *f)
{
    nf_dist_destroy(&f->d);
    nf_params_free(f->P);
    nf_rng_free(f->rng);
}

static double logp1(nf_dist *d, const nf_real *z)
{
    nf_real lp;
    ck_assert_int_eq(d->type->log_prob(d, &lp, z, NULL, 1), NF_OK);
    return lp;
}

/* ---- known values, against GSL's Gaussian density ---- */

START_TEST(test_known_values)
{
    const nf_real z[2] = {2.385, -0.713};
    fixture f;
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 11 + c);
        const nf_real *v = f.P->value;
        double expect;
        if (c == 0) {
            expect = log(gsl_ran_gaussian_pdf(2.385, 1) * gsl_ran_gaussian_pdf(-0.713, 1));
        } else if (c == 1) {
            const nf_real *mu = v + nf_params_find(f.P, "base.mean")->offset;
            const nf_real *s = v + nf_params_find(f.P, "base.log_scale")->offset;
            expect = 0;
            for (int j = 0; j < 2; j++) expect += log(gsl_ran_gaussian_pdf(z[j] - mu[j], exp(s[j])));
        } else {
            const nf_param_slice *sa = nf_params_find(f.P, "base.logits");
            ck_assert_ptr_nonnull(sa);
            ck_assert_uint_eq(sa->size, 3);
            const nf_real *a = v + sa->offset, *mu = v + nf_params_find(f.P, "base.mean")->offset;
            const nf_real *s = v + nf_params_find(f.P, "base.log_scale")->offset;
            double za = 0, p = 0;
            for (int k = 0; k < 3; k++) za += exp(a[k]);
            for (int k = 0; k < 3; k++)
                p += exp(a[k]) / za * gsl_ran_gaussian_pdf(z[0] - mu[2 * k], exp(s[2 * k])) *
                     gsl_ran_gaussian_pdf(z[1] - mu[2 * k + 1], exp(s[2 * k + 1]));
            expect = log(p);
        }
        double got = logp1(&f.d, z);
        ck_assert_msg(relerr(got, expect, 1) < TOL_VALUE, "%s: log p = %.12g, expected %.12g", cases[c].type, got,
                      expect);
        fixture_free(&f);
    }
}
END_TEST

#ifdef NF_DOUBLE
/* ---- finite-difference gradients of L = sum_i w_i log p(z_i) wrt z and every parameter ---- */

#define GN 4
#define GD 3
static const double gw[GN] = {0.83, -1.27, 0.46, 2.05};

static double loss(nf_dist *d, const nf_real *z)
{
    nf_real lp[GN];
    ck_assert_int_eq(d->type->log_prob(d, lp, z, NULL, GN), NF_OK);
    double L = 0;
    for (int i = 0; i < GN; i++) L += gw[i] * lp[i];
    return L;
}

START_TEST(test_gradients)
{
    const double h = 1e-5;
    fixture f;
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], GD, 21 + c);
        nf_real z[GN * GD], dz[GN * GD], w[GN];
        nf_rng *r = nf_rng_alloc(5, 1);
        for (int i = 0; i < GN * GD; i++) z[i] = (nf_real)(1.4 * nf_rng_normal(r));
        nf_rng_free(r);
        for (int i = 0; i < GN; i++) w[i] = (nf_real)gw[i];
        /* Pre-filled buffers: backward must add, not overwrite. */
        for (int i = 0; i < GN * GD; i++) dz[i] = 0.25;
        for (size_t q = 0; q < f.P->n; q++) f.P->grad[q] = 0.125;
        nf_real lp[GN];
        ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, NULL, GN), NF_OK);
        ck_assert_int_eq(f.d.type->backward(&f.d, dz, w, z, NULL, GN), NF_OK);
        for (int i = 0; i < GN * GD; i++) {
            nf_real keep = z[i];
            z[i] = keep + h;
            double Lp = loss(&f.d, z);
            z[i] = keep - h;
            double Lm = loss(&f.d, z);
            z[i] = keep;
            double fd = (Lp - Lm) / (2 * h), an = dz[i] - 0.25;
            ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s: dL/dz[%d] = %.10g, finite difference %.10g",
                          cases[c].type, i, an, fd);
        }
        for (size_t q = 0; q < f.P->n; q++) {
            nf_real keep = f.P->value[q];
            f.P->value[q] = keep + h;
            double Lp = loss(&f.d, z);
            f.P->value[q] = keep - h;
            double Lm = loss(&f.d, z);
            f.P->value[q] = keep;
            double fd = (Lp - Lm) / (2 * h), an = f.P->grad[q] - 0.125;
            ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s: dL/dtheta[%zu] = %.10g, finite difference %.10g",
                          cases[c].type, q, an, fd);
        }
        fixture_free(&f);
    }
}
END_TEST

/* Reparameterised draws: L(theta) = sum c_ij z_ij + sum_i w_i logp_i over draws with a fixed seed. */
static double sample_loss(nf_dist *d, const nf_real *c, int with_logp)
{
    nf_real z[GN * GD], lp[GN];
    nf_rng *r = nf_rng_alloc(99, 3);
    ck_assert_int_eq(d->type->sample(d, z, lp, GN, r), NF_OK);
    nf_rng_free(r);
    double L = 0;
    for (int i = 0; i < GN * GD; i++) L += c[i] * z[i];
    if (with_logp)
        for (int i = 0; i < GN; i++) L += gw[i] * lp[i];
    return L;
}

START_TEST(test_sample_backward)
{
    const double h = 1e-5;
    fixture f;
    nf_real c[GN * GD], w[GN], z[GN * GD], lp[GN];
    for (int i = 0; i < GN * GD; i++) c[i] = (nf_real)(0.3 + 0.17 * i - 0.021 * i * i);
    for (int i = 0; i < GN; i++) w[i] = (nf_real)gw[i];
    for (int with_logp = 0; with_logp <= 1; with_logp++) {
        fixture_make(&f, &cases[1], GD, 31);
        nf_rng *r = nf_rng_alloc(99, 3);
        ck_assert_int_eq(f.d.type->sample(&f.d, z, lp, GN, r), NF_OK);
        nf_rng_free(r);
        for (size_t q = 0; q < f.P->n; q++) f.P->grad[q] = -0.5;
        ck_assert_int_eq(f.d.type->sample_backward(&f.d, c, with_logp ? w : NULL, z, GN), NF_OK);
        for (size_t q = 0; q < f.P->n; q++) {
            nf_real keep = f.P->value[q];
            f.P->value[q] = keep + h;
            double Lp = sample_loss(&f.d, c, with_logp);
            f.P->value[q] = keep - h;
            double Lm = sample_loss(&f.d, c, with_logp);
            f.P->value[q] = keep;
            double fd = (Lp - Lm) / (2 * h), an = f.P->grad[q] + 0.5;
            ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "diag-normal sample_backward (logp %d): dtheta[%zu] = %.10g, "
                          "finite difference %.10g", with_logp, q, an, fd);
        }
        fixture_free(&f);
    }
    /* normal: nothing to do, but it must accept the call; gmm: documented as not reparameterisable. */
    fixture_make(&f, &cases[0], GD, 32);
    ck_assert_int_eq(f.d.type->sample_backward(&f.d, c, w, z, GN), NF_OK);
    fixture_free(&f);
    ck_assert(nf_dist_gmm.sample_backward == NULL);
}
END_TEST
#endif

/* ---- normalisation ---- */

static double density_1d(double x, void *p)
{
    nf_real z = (nf_real)x;
    return exp(logp1(p, &z));
}

START_TEST(test_normalised_1d)
{
    fixture f;
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(1000);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 1, 41 + c);
        gsl_function F = {density_1d, &f.d};
        double I, err;
        gsl_integration_qagi(&F, 1e-12, 1e-10, 1000, ws, &I, &err); /* float: may report roundoff, value checked */
        ck_assert_msg(fabs(I - 1) < TOL_NORM, "%s: integral of p over R = %.12g", cases[c].type, I);
        fixture_free(&f);
    }
    gsl_integration_workspace_free(ws);
}
END_TEST

/* Midpoint rule on [-L, L]^2; also returns the first two moments of each coordinate. */
#define GRID 600
static double grid_2d(nf_dist *d, double L, double mom[5])
{
    static nf_real z[GRID * 2], lp[GRID];
    const double hgrid = 2 * L / GRID;
    double I = 0;
    for (int q = 0; q < 5; q++) mom[q] = 0;
    for (int a = 0; a < GRID; a++) {
        for (int b = 0; b < GRID; b++) {
            z[2 * b] = (nf_real)(-L + (a + 0.5) * hgrid);
            z[2 * b + 1] = (nf_real)(-L + (b + 0.5) * hgrid);
        }
        ck_assert_int_eq(d->type->log_prob(d, lp, z, NULL, GRID), NF_OK);
        for (int b = 0; b < GRID; b++) {
            double p = exp(lp[b]) * hgrid * hgrid, x = z[2 * b], y = z[2 * b + 1];
            I += p;
            mom[0] += p * x, mom[1] += p * y, mom[2] += p * x * x, mom[3] += p * y * y, mom[4] += p * x * y;
        }
    }
    return I;
}

START_TEST(test_normalised_2d)
{
    fixture f;
    double mom[5];
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 51 + c);
        double I = grid_2d(&f.d, 12.0, mom);
        ck_assert_msg(fabs(I - 1) < TOL_NORM * 10, "%s: integral of p over the 2-D grid = %.12g", cases[c].type, I);
        fixture_free(&f);
    }
}
END_TEST

/* ---- samplers against densities ---- */

#define NS 200000
#define NBIN 20

START_TEST(test_sampler_1d)
{
    fixture f;
    nf_real *z = malloc(NS * sizeof *z), *lp = malloc(NS * sizeof *lp);
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(1000);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 1, 61 + c);
        gsl_function F = {density_1d, &f.d};
        /* moments of the density (mean, variance, central 4th moment) by the midpoint rule */
        double m1 = 0, m2 = 0, m4 = 0, err;
        /* 8000 midpoint nodes on [-20, 20] are far more than enough for these Gaussian tails */
        const int M = 8000;
        const double lo = -20, hx = 40.0 / M;
        for (int q = 0; q < M; q++) {
            double x = lo + (q + 0.5) * hx, p = density_1d(x, &f.d) * hx;
            m1 += p * x, m2 += p * x * x;
        }
        double var = m2 - m1 * m1;
        for (int q = 0; q < M; q++) {
            double x = lo + (q + 0.5) * hx, p = density_1d(x, &f.d) * hx;
            m4 += p * pow(x - m1, 4);
        }

        ck_assert_int_eq(f.d.type->sample(&f.d, z, lp, NS, f.rng), NF_OK);
        double s1 = 0, s2 = 0;
        for (int i = 0; i < NS; i++) s1 += z[i];
        s1 /= NS;
        for (int i = 0; i < NS; i++) s2 += (z[i] - s1) * (z[i] - s1);
        s2 /= NS - 1;
        double se_mean = sqrt(var / NS), se_var = sqrt((m4 - var * var) / NS);
        ck_assert_msg(fabs(s1 - m1) < 5 * se_mean, "%s: sample mean %.6g, density mean %.6g (se %.2g)", cases[c].type,
                      s1, m1, se_mean);
        ck_assert_msg(fabs(s2 - var) < 5 * se_var, "%s: sample variance %.6g, density variance %.6g (se %.2g)",
                      cases[c].type, s2, var, se_var);

        /* logp returned by sample is the density at the sample */
        for (int i = 0; i < 50; i++)
            ck_assert_msg(relerr(lp[i], logp1(&f.d, &z[i]), 1) < TOL_VALUE * 10, "%s: sample logp[%d] = %g, log_prob %g",
                          cases[c].type, i, lp[i], logp1(&f.d, &z[i]));

        /* chi-square on NBIN bins over mean +- 3 sd plus the two tails */
        double edges[NBIN + 1], expect[NBIN + 2], sd = sqrt(var);
        long count[NBIN + 2] = {0};
        for (int b = 0; b <= NBIN; b++) edges[b] = m1 - 3 * sd + 6 * sd * b / NBIN;
        double tail_lo, tail_hi;
        gsl_integration_qagil(&F, edges[0], 1e-13, 1e-10, 1000, ws, &tail_lo, &err);
        gsl_integration_qagiu(&F, edges[NBIN], 1e-13, 1e-10, 1000, ws, &tail_hi, &err);
        expect[0] = tail_lo * NS, expect[NBIN + 1] = tail_hi * NS;
        for (int b = 0; b < NBIN; b++) {
            double p;
            gsl_integration_qags(&F, edges[b], edges[b + 1], 1e-13, 1e-10, 1000, ws, &p, &err);
            expect[b + 1] = p * NS;
        }
        for (int i = 0; i < NS; i++) {
            int b;
            if (z[i] < edges[0]) b = 0;
            else if (z[i] >= edges[NBIN]) b = NBIN + 1;
            else {
                b = 1 + (int)((z[i] - edges[0]) / (edges[NBIN] - edges[0]) * NBIN);
                if (b > NBIN) b = NBIN;
            }
            count[b]++;
        }
        double chi2 = 0;
        for (int b = 0; b < NBIN + 2; b++) {
            ck_assert_msg(expect[b] > 5, "%s: bin %d expects only %.2f samples", cases[c].type, b, expect[b]);
            chi2 += (count[b] - expect[b]) * (count[b] - expect[b]) / expect[b];
        }
        /* 21 degrees of freedom: mean 21, sd 6.5; 70 is beyond the 1e-6 quantile */
        ck_assert_msg(chi2 < 70, "%s: histogram chi-square %.1f on %d bins", cases[c].type, chi2, NBIN + 2);
        fixture_free(&f);
    }
    gsl_integration_workspace_free(ws);
    free(z);
    free(lp);
}
END_TEST

START_TEST(test_sampler_2d)
{
    const int N = 100000;
    fixture f;
    nf_real *z = malloc(2 * (size_t)N * sizeof *z);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 71 + c);
        double mom[5];
        grid_2d(&f.d, 12.0, mom);
        double vx = mom[2] - mom[0] * mom[0], vy = mom[3] - mom[1] * mom[1], cxy = mom[4] - mom[0] * mom[1];
        ck_assert_int_eq(f.d.type->sample(&f.d, z, NULL, N, f.rng), NF_OK);
        double s[5] = {0};
        for (int i = 0; i < N; i++) {
            double x = z[2 * i], y = z[2 * i + 1];
            s[0] += x, s[1] += y, s[2] += x * x, s[3] += y * y, s[4] += x * y;
        }
        for (int q = 0; q < 5; q++) s[q] /= N;
        double svx = s[2] - s[0] * s[0], svy = s[3] - s[1] * s[1], scxy = s[4] - s[0] * s[1];
        const double k = 5 / sqrt((double)N);
        ck_assert_msg(fabs(s[0] - mom[0]) < k * sqrt(vx) && fabs(s[1] - mom[1]) < k * sqrt(vy),
                      "%s: sample mean (%g, %g), density (%g, %g)", cases[c].type, s[0], s[1], mom[0], mom[1]);
        /* variance of a variance estimate <= a few var^2 / N for these light-tailed mixtures */
        ck_assert_msg(fabs(svx - vx) < 3 * k * vx && fabs(svy - vy) < 3 * k * vy,
                      "%s: sample variances (%g, %g), density (%g, %g)", cases[c].type, svx, svy, vx, vy);
        ck_assert_msg(fabs(scxy - cxy) < 3 * k * sqrt(vx * vy), "%s: sample covariance %g, density %g",
                      cases[c].type, scxy, cxy);
        fixture_free(&f);
    }
    free(z);
}
END_TEST

/* ---- construction and errors ---- */

START_TEST(test_options_and_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(3, 0);
    nf_dist d;
    int rc = nf_dist_create(&d, &nf_dist_gmm, 2, "base", "k=3, bogus=2", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "bogus") && strstr(nf_strerror_last(), "gmm"), "message: %s",
                  nf_strerror_last());
    nf_dist_destroy(&d); /* harmless after a failed create */

    rc = nf_dist_create(&d, &nf_dist_normal, 2, "n", "k=3", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "'k'") && strstr(nf_strerror_last(), "normal"), "message: %s",
                  nf_strerror_last());

    rc = nf_dist_create(&d, &nf_dist_gmm, 2, "g0", "k=0", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "k=0"), "message: %s", nf_strerror_last());

    rc = nf_dist_create(&d, &nf_dist_gmm, 2, "g1", "k=2", P, NULL, NULL);
    ck_assert_int_eq(rc, NF_EINVAL);
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 0, "dn", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "dimension 0"), "message: %s", nf_strerror_last());

    ck_assert_int_eq(nf_dist_create(&d, nf_dist_type_find("gaussian-mix"), 2, "base", "", P, NULL, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "gaussian-mix") && strstr(nf_strerror_last(), "diag-normal"),
                  "message: %s", nf_strerror_last());
    int ntypes = 0;
    for (int i = 0; nf_dist_types[i]; i++, ntypes++)
        ck_assert_ptr_eq(nf_dist_type_find(nf_dist_types[i]->name), nf_dist_types[i]);
    ck_assert_int_eq(ntypes, 3);

    /* defaults and slice layout: gmm k=8 by default, logits 0, log-scales 0, means not all equal */
    rc = nf_dist_create(&d, &nf_dist_gmm, 3, "mix", NULL, P, NULL, r);
    ck_assert_int_eq(rc, NF_OK);
    const nf_param_slice *a = nf_params_find(P, "mix.logits"), *m = nf_params_find(P, "mix.mean"),
                         *s = nf_params_find(P, "mix.log_scale");
    ck_assert(a && m && s);
    ck_assert_uint_eq(a->size, 8);
    ck_assert_uint_eq(m->size, 24);
    ck_assert_uint_eq(s->size, 24);
    double sq = 0;
    for (size_t i = 0; i < 8; i++) ck_assert(P->value[a->offset + i] == 0);
    for (size_t i = 0; i < 24; i++) ck_assert(P->value[s->offset + i] == 0);
    for (size_t i = 0; i < 24; i++) sq += P->value[m->offset + i] * P->value[m->offset + i];
    ck_assert_msg(sq / 24 > 0.3 && sq / 24 < 3, "initial means have mean square %g, expected about 1", sq / 24);
    nf_dist_destroy(&d);

    /* diag-normal starts as the standard normal */
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 2, "dn", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_OK);
    nf_real z[2] = {2.385, -0.713}, lp;
    ck_assert_int_eq(d.type->log_prob(&d, &lp, z, NULL, 1), NF_OK);
    ck_assert(relerr(lp, -0.5 * (2.385 * 2.385 + 0.713 * 0.713) - log(2 * 3.14159265358979323846), 1) < TOL_VALUE);
    /* a non-finite latent is an error naming the row */
    nf_real zz[4] = {0.1, 0.2, NAN, 0.4}, lp2[2];
    ck_assert_int_eq(d.type->log_prob(&d, lp2, zz, NULL, 2), NF_ENONFINITE);
    ck_assert_msg(strstr(nf_strerror_last(), "row 1"), "message: %s", nf_strerror_last());
    nf_dist_destroy(&d);

    nf_params_free(P);
    nf_rng_free(r);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_known_values);
#ifdef NF_DOUBLE
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_sample_backward);
#endif
    tcase_add_test(tc, test_normalised_1d);
    tcase_add_test(tc, test_normalised_2d);
    tcase_add_test(tc, test_sampler_1d);
    tcase_add_test(tc, test_sampler_2d);
    tcase_add_test(tc, test_options_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    gsl_set_error_handler_off(); /* quadrature of a float density may stop at roundoff: values are checked */
    SRunner *sr = srunner_create(dist_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
