/* tests/check_datasets.c - the built-in data sets: samplers against densities, normalisation,
 * entropies against reference values, quadrature against brute force, gmm moments, the teacher
 * flow, splits and error paths.
 *
 * Histogram test: the density is evaluated at the centres of a fine grid over a box covering the
 * support (midpoint rule, cells at most a third of the narrowest feature), which gives both its
 * integral over the box (must be 1 within 1e-2) and each coarse bin's probability; 200k samples are
 * binned and compared by a chi-square statistic over the bins expecting at least 20 points (plus
 * one pooled bin for the rest), which must stay below dof + 5 sqrt(2 dof), and no bin may be more
 * than 5.5 standard deviations off.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/dataset.h"
#include "flows/flow.h"
#include "tests/testutil.h"

#define LOG_2PI 1.8378770664093454836
#define PI 3.14159265358979323846

/* ---- sampler vs density on a grid ------------------------------------------------------------ */

typedef struct hist_case {
    const char *name;
    double lo0, hi0, lo1, hi1; /* box covering the support */
    int fine0, fine1;          /* density grid cells along x0, x1 */
    int sub;                   /* fine cells per histogram bin side */
} hist_case;

static const hist_case hist_cases[] = {
    {"checkerboard", -4.0, 4.0, -4.0, 4.0, 80, 80, 2},      /* cell edges on the squares' edges */
    {"8gaussians", -4.6, 4.6, -4.6, 4.6, 92, 92, 2},        /* std 0.354, cells 0.1 */
    {"circles", -4.5, 4.5, -4.5, 4.5, 120, 120, 3},         /* std 0.24, cells 0.075 */
    {"rings", -3.6, 3.6, -3.6, 3.6, 300, 300, 10},          /* std 0.08, cells 0.024 */
    {"crescent", -2.6, 10.4, -4.8, 4.8, 130, 96, 3},        /* std 0.37, cells 0.1 */
    {"sinewave", -4.8, 4.8, -3.0, 3.0, 320, 200, 8},        /* slope 5: width 0.074, cells 0.03 */
    {"moons", -4.0, 4.0, -2.8, 3.2, 100, 75, 3},            /* std 0.2, cells 0.08 */
    {"swissroll", -3.8, 3.8, -3.8, 3.8, 95, 95, 3},         /* std 0.2, cells 0.08 */
    {"2spirals", -4.0, 4.0, -4.0, 4.0, 160, 160, 4},        /* std 0.1 + jitter, cells 0.05 */
    {"pinwheel", -5.2, 5.2, -5.2, 5.2, 160, 160, 4},        /* tangential std 0.2, cells 0.065 */
};
#define NHIST ((int)(sizeof hist_cases / sizeof hist_cases[0]))

/* Density at the fine-grid centres (fine0 * fine1, index a * fine1 + b); returns the cell area. */
static double grid_density(nf_dataset *ds, const hist_case *c, double *p)
{
    size_t m = (size_t)c->fine0 * c->fine1;
    double d0 = (c->hi0 - c->lo0) / c->fine0, d1 = (c->hi1 - c->lo1) / c->fine1;
    double *pts = malloc(2 * m * sizeof *pts);
    ck_assert_ptr_nonnull(pts);
    for (int a = 0; a < c->fine0; a++)
        for (int b = 0; b < c->fine1; b++) {
            pts[2 * ((size_t)a * c->fine1 + b)] = c->lo0 + (a + 0.5) * d0;
            pts[2 * ((size_t)a * c->fine1 + b) + 1] = c->lo1 + (b + 0.5) * d1;
        }
    int rc = nf_dataset_log_prob(ds, m, pts, p);
    ck_assert_msg(rc == NF_OK, "%s: log_prob on the grid failed: %s", c->name, nf_strerror_last());
    for (size_t i = 0; i < m; i++) p[i] = exp(p[i]);
    free(pts);
    return d0 * d1;
}

START_TEST(test_histogram)
{
    const hist_case *c = &hist_cases[_i];
    nf_dataset *ds;
    ck_assert_int_eq(nf_dataset_alloc(&ds, c->name, NULL), NF_OK);
    size_t m = (size_t)c->fine0 * c->fine1;
    double *p = malloc(m * sizeof *p);
    ck_assert_ptr_nonnull(p);
    double area = grid_density(ds, c, p), mass = 0;
    for (size_t i = 0; i < m; i++) mass += p[i] * area;
    ck_assert_msg(fabs(mass - 1) < 1e-2, "%s: density integrates to %.5f over the box, expected 1", c->name, mass);

    int nb0 = c->fine0 / c->sub, nb1 = c->fine1 / c->sub;
    double *prob = calloc((size_t)nb0 * nb1, sizeof *prob);
    long *count = calloc((size_t)nb0 * nb1, sizeof *count);
    ck_assert(prob && count);
    for (int a = 0; a < nb0 * c->sub; a++)
        for (int b = 0; b < nb1 * c->sub; b++)
            prob[(a / c->sub) * nb1 + b / c->sub] += p[(size_t)a * c->fine1 + b] * area;
    const size_t N = 200000;
    double *x = malloc(2 * N * sizeof *x);
    ck_assert_ptr_nonnull(x);
    nf_rng *r = nf_rng_alloc(2385 + (uint64_t)_i, 0);
    ck_assert_int_eq(nf_dataset_sample(ds, r, N, x, NULL), NF_OK);
    double w0 = (c->hi0 - c->lo0) / c->fine0 * c->sub, w1 = (c->hi1 - c->lo1) / c->fine1 * c->sub;
    for (size_t i = 0; i < N; i++) {
        int a = (int)floor((x[2 * i] - c->lo0) / w0), b = (int)floor((x[2 * i + 1] - c->lo1) / w1);
        if (a >= 0 && a < nb0 && b >= 0 && b < nb1) count[a * nb1 + b]++;
    }
    double chi2 = 0, zmax = 0, e_in = 0;
    long o_in = 0;
    int dof = 0;
    for (int k = 0; k < nb0 * nb1; k++) {
        double E = N * prob[k];
        if (E < 20) continue;
        double z = (count[k] - E) / sqrt(E);
        chi2 += z * z;
        if (fabs(z) > zmax) zmax = fabs(z);
        e_in += E;
        o_in += count[k];
        dof++;
    }
    double e_rest = N - e_in, o_rest = (double)N - (double)o_in;
    if (e_rest >= 20) {
        chi2 += (o_rest - e_rest) * (o_rest - e_rest) / e_rest;
        dof++;
    }
    ck_assert_msg(dof > 30, "%s: only %d bins expect 20 points", c->name, dof);
    ck_assert_msg(chi2 < dof + 5 * sqrt(2.0 * dof), "%s: chi-square %.1f over %d bins, expected below %.1f", c->name,
                  chi2, dof, dof + 5 * sqrt(2.0 * dof));
    ck_assert_msg(zmax < 5.5, "%s: a bin is %.2f standard deviations off", c->name, zmax);
    nf_rng_free(r);
    free(x);
    free(prob);
    free(count);
    free(p);
    nf_dataset_free(ds);
}
END_TEST

/* ---- entropies against reference values ------------------------------------------------------ */

typedef struct entropy_case {
    const char *name;
    double ref, ref_err; /* reference entropy (nats) and its own error */
    size_t n;            /* sample size: fewer for the quadrature sets */
} entropy_case;

static const entropy_case entropy_cases[] = {
    {"checkerboard", 3.465735902799726, 1e-12, 50000}, /* ln 32 */
    {"8gaussians", 2.832, 0.002, 200000},
    {"rings", 2.623, 0.002, 200000},
    {"circles", 3.268, 0.002, 200000},
    {"crescent", 1.837877066409345, 1e-12, 200000}, /* ln(2 pi e) - 1 */
    {"sinewave", 1.837877066409345, 1e-12, 200000},
    {"moons", 2.394, 0.002, 20000},
    {"swissroll", 2.670, 0.002, 20000},
    {"2spirals", 2.645, 0.002, 8000},
    {"pinwheel", 2.3178, 0.0002, 100000}, /* quadrature of an independent density, tests/data/pinwheel_entropy.py */
};
#define NENT ((int)(sizeof entropy_cases / sizeof entropy_cases[0]))

START_TEST(test_entropy)
{
    const entropy_case *c = &entropy_cases[_i];
    nf_dataset *ds;
    ck_assert_int_eq(nf_dataset_alloc(&ds, c->name, NULL), NF_OK);
    nf_rng *r = nf_rng_alloc(4711 + (uint64_t)_i, 0);
    double H, se;
    int rc = nf_dataset_entropy(ds, r, c->n, &H, &se);
    ck_assert_msg(rc == NF_OK, "%s: %s", c->name, nf_strerror_last());
    double tol = 3 * se + c->ref_err + 1e-6;
    ck_assert_msg(fabs(H - c->ref) < tol, "%s: entropy %.4f +- %.4f, reference %.4f (tolerance %.4f)", c->name, H, se,
                  c->ref, tol);
    nf_rng_free(r);
    nf_dataset_free(ds);
}
END_TEST

/* ---- quadrature against a brute-force trapezoid rule, from the written-down definitions ------- */

static double npdf2(double x0, double x1, double c0, double c1, double s)
{
    double d0 = x0 - c0, d1 = x1 - c1;
    return exp(-(d0 * d0 + d1 * d1) / (2 * s * s)) / (2 * PI * s * s);
}

/* Phi(u) - Phi(v) for u > v, from whichever tail keeps it accurate. */
static double Phi_diff(double u, double v)
{
    if (v > 0) return 0.5 * (erfc(v / sqrt(2.0)) - erfc(u / sqrt(2.0)));    /* upper tails */
    return 0.5 * (erfc(-u / sqrt(2.0)) - erfc(-v / sqrt(2.0)));             /* lower tails */
}

/* p(x) by the trapezoid rule with m intervals over the latent parameter. */
static double brute_density(const char *name, double x0, double x1, int m)
{
    double sum = 0;
    if (!strcmp(name, "moons")) { /* 1/2 sum_moon (1/pi) int_0^pi N(x; c(t), 0.2^2) dt */
        double h = PI / m;
        for (int j = 0; j <= m; j++) {
            double t = j * h, w = (j == 0 || j == m) ? 0.5 : 1;
            sum += w * (npdf2(x0, x1, 2 * cos(t) - 1, 2 * sin(t) - 0.2, 0.2) +
                        npdf2(x0, x1, 1 - 2 * cos(t), 0.8 - 2 * sin(t), 0.2));
        }
        return sum * h / (2 * PI);
    }
    if (!strcmp(name, "swissroll")) { /* (1/3pi) int N(x; (t cos t, t sin t)/5, 0.2^2) dt */
        double a = 1.5 * PI, h = 3 * PI / m;
        for (int j = 0; j <= m; j++) {
            double t = a + j * h, w = (j == 0 || j == m) ? 0.5 : 1;
            sum += w * npdf2(x0, x1, t * cos(t) / 5, t * sin(t) / 5, 0.2);
        }
        return sum * h / (3 * PI);
    }
    /* 2spirals: n has density 2n/(3pi)^2; spiral 1 = (c(n) + b)/3 + e, spiral 2 = -(c(n) + b)/3 + e,
     * b ~ U[0, 0.5]^2, e ~ N(0, 0.1^2 I); per coordinate U[0, h] (or U[-h, 0]) convolved with N. */
    const double s = 0.1, hb = 0.5 / 3, N = 3 * PI;
    double h = N / m;
    for (int j = 0; j <= m; j++) {
        double t = j * h, w = (j == 0 || j == m) ? 0.5 : 1;
        double c0 = -t * cos(t) / 3, c1 = t * sin(t) / 3;
        double y0 = x0 - c0, y1 = x1 - c1, z0 = x0 + c0, z1 = x1 + c1;
        double p1 = Phi_diff(y0 / s, (y0 - hb) / s) * Phi_diff(y1 / s, (y1 - hb) / s) / (hb * hb);
        double p2 = Phi_diff((z0 + hb) / s, z0 / s) * Phi_diff((z1 + hb) / s, z1 / s) / (hb * hb);
        sum += w * 0.5 * (2 * t / (N * N)) * (p1 + p2);
    }
    return sum * h;
}

START_TEST(test_quadrature_brute_force)
{
    const char *names[] = {"moons", "swissroll", "2spirals"};
    for (int s = 0; s < 3; s++) {
        nf_dataset *ds;
        ck_assert_int_eq(nf_dataset_alloc(&ds, names[s], NULL), NF_OK);
        double x[2 * 12], lp[12];
        nf_rng *r = nf_rng_alloc(977, (uint64_t)s);
        ck_assert_int_eq(nf_dataset_sample(ds, r, 9, x, NULL), NF_OK);
        const double extra[6] = {0.0123, -0.0217, 2.385, -3.141, -3.9, 3.7}; /* centre, off-curve, far */
        memcpy(x + 18, extra, sizeof extra);
        ck_assert_int_eq(nf_dataset_log_prob(ds, 12, x, lp), NF_OK);
        for (int i = 0; i < 12; i++) {
            double ref = brute_density(names[s], x[2 * i], x[2 * i + 1], 60000);
            ck_assert_msg(ref > 0 && fabs(exp(lp[i]) / ref - 1) < 1e-6,
                          "%s at (%g, %g): quadrature %.10g, brute force %.10g", names[s], x[2 * i], x[2 * i + 1],
                          exp(lp[i]), ref);
        }
        nf_rng_free(r);
        nf_dataset_free(ds);
    }
}
END_TEST

/* ---- closed forms at hand-computed points --------------------------------------------------- */

START_TEST(test_closed_forms)
{
    nf_dataset *ds;
    double x[4], lp[2];
    /* checkerboard: (1, 1) lies on the square [0,2)x[0,2) (floor(0.5) = 0 is even, s2 = 0.5 in [0,1));
     * (1, 3) on the square above it is empty. */
    ck_assert_int_eq(nf_dataset_alloc(&ds, "checkerboard", NULL), NF_OK);
    x[0] = 1.1, x[1] = 0.9, x[2] = 1.1, x[3] = 2.9;
    ck_assert_int_eq(nf_dataset_log_prob(ds, 2, x, lp), NF_OK);
    ck_assert_double_eq_tol(lp[0], -log(32.0), 1e-12);
    ck_assert(isinf(lp[1]) && lp[1] < 0);
    nf_dataset_free(ds);
    /* crescent at (x1, x2) = (0.385, 1.2): N(1.2; 0, 1) N(0.385; 0.72 - 1, e^-2) */
    ck_assert_int_eq(nf_dataset_alloc(&ds, "crescent", NULL), NF_OK);
    x[0] = 0.385, x[1] = 1.2;
    ck_assert_int_eq(nf_dataset_log_prob(ds, 1, x, lp), NF_OK);
    double z = (0.385 - (0.5 * 1.44 - 1)) / exp(-1.0);
    ck_assert_double_eq_tol(lp[0], -0.5 * 1.44 - 0.5 * z * z + 1 - LOG_2PI, 1e-12);
    nf_dataset_free(ds);
    /* rings against the angle integral of the Gaussian, by a 20000-point periodic trapezoid rule */
    ck_assert_int_eq(nf_dataset_alloc(&ds, "rings", NULL), NF_OK);
    x[0] = 1.385, x[1] = -1.62;
    ck_assert_int_eq(nf_dataset_log_prob(ds, 1, x, lp), NF_OK);
    const double R[4] = {3, 2.25, 1.5, 0.75};
    double ref = 0;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 20000; j++) {
            double t = 2 * PI * j / 20000;
            ref += 0.25 * npdf2(x[0], x[1], R[k] * cos(t), R[k] * sin(t), 0.08) / 20000;
        }
    ck_assert_msg(fabs(exp(lp[0]) / ref - 1) < 1e-9, "rings: %.12g vs %.12g", exp(lp[0]), ref);
    nf_dataset_free(ds);
}
END_TEST

/* ---- gmm -------------------------------------------------------------------------------------- */

/* Sample mean and covariance of (n, D) against the exact ones, each within 5 empirical standard errors. */
static void check_moments(const double *x, size_t n, int D, const double *mean, const double *cov)
{
    double *m = calloc((size_t)D, sizeof *m);
    ck_assert_ptr_nonnull(m);
    for (size_t i = 0; i < n; i++)
        for (int a = 0; a < D; a++) m[a] += x[i * D + a] / (double)n;
    for (int a = 0; a < D; a++) {
        double se = sqrt(cov[a * D + a] / (double)n);
        ck_assert_msg(fabs(m[a] - mean[a]) < 5 * se, "gmm: mean[%d] %.4f, exact %.4f", a, m[a], mean[a]);
    }
    for (int a = 0; a < D; a++)
        for (int b = 0; b < D; b++) {
            double s = 0, s2 = 0;
            for (size_t i = 0; i < n; i++) {
                double v = (x[i * D + a] - m[a]) * (x[i * D + b] - m[b]);
                s += v;
                s2 += v * v;
            }
            s /= (double)n;
            double se = sqrt((s2 / (double)n - s * s) / (double)n);
            ck_assert_msg(fabs(s - cov[a * D + b]) < 5 * se, "gmm: cov[%d][%d] %.4f, exact %.4f (se %.4f)", a, b, s,
                          cov[a * D + b], se);
        }
    free(m);
}

START_TEST(test_gmm)
{
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.dim = 2;
    o.components = 4;
    o.model_seed = 2385;
    nf_dataset *ds;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "gmm", &o), NF_OK);
    const size_t N = 100000;
    double *x = malloc(2 * N * sizeof *x), mean[2], cov[4];
    ck_assert_ptr_nonnull(x);
    nf_rng *r = nf_rng_alloc(31, 0);
    ck_assert_int_eq(nf_dataset_sample(ds, r, N, x, NULL), NF_OK);
    ck_assert_int_eq(nf_dataset_gmm_moments(ds, mean, cov), NF_OK);
    check_moments(x, N, 2, mean, cov);
    /* normalisation and moments of the density on a grid over the sample's range plus 2 */
    hist_case c = {"gmm", 1e9, -1e9, 1e9, -1e9, 300, 300, 1};
    for (size_t i = 0; i < N; i++) {
        c.lo0 = fmin(c.lo0, x[2 * i] - 2), c.hi0 = fmax(c.hi0, x[2 * i] + 2);
        c.lo1 = fmin(c.lo1, x[2 * i + 1] - 2), c.hi1 = fmax(c.hi1, x[2 * i + 1] + 2);
    }
    double *p = malloc(300 * 300 * sizeof *p), mass = 0, gm[2] = {0, 0};
    ck_assert_ptr_nonnull(p);
    double area = grid_density(ds, &c, p), d0 = (c.hi0 - c.lo0) / 300, d1 = (c.hi1 - c.lo1) / 300;
    for (int a = 0; a < 300; a++)
        for (int b = 0; b < 300; b++) {
            double w = p[a * 300 + b] * area;
            mass += w;
            gm[0] += w * (c.lo0 + (a + 0.5) * d0);
            gm[1] += w * (c.lo1 + (b + 0.5) * d1);
        }
    ck_assert_msg(fabs(mass - 1) < 1e-2, "gmm: density integrates to %.5f", mass);
    ck_assert_msg(fabs(gm[0] - mean[0]) < 1e-2 && fabs(gm[1] - mean[1]) < 1e-2,
                  "gmm: density mean (%.4f, %.4f), exact (%.4f, %.4f)", gm[0], gm[1], mean[0], mean[1]);
    free(p);
    free(x);
    nf_dataset_free(ds);

    /* 5 dimensions, 6 components: moments, and sample() logp equal to log_prob() */
    o.dim = 5;
    o.components = 6;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "gmm", &o), NF_OK);
    double *x5 = malloc(5 * N * sizeof *x5), *lp = malloc(N * sizeof *lp), m5[5], c5[25];
    ck_assert(x5 && lp);
    ck_assert_int_eq(nf_dataset_sample(ds, r, N, x5, lp), NF_OK);
    ck_assert_int_eq(nf_dataset_gmm_moments(ds, m5, c5), NF_OK);
    check_moments(x5, N, 5, m5, c5);
    for (size_t i = 0; i < N; i++) ck_assert(isfinite(lp[i]));
    /* the same model seed gives the same distribution */
    nf_dataset *ds2;
    ck_assert_int_eq(nf_dataset_alloc(&ds2, "gmm", &o), NF_OK);
    double lp2[10];
    ck_assert_int_eq(nf_dataset_log_prob(ds2, 10, x5, lp2), NF_OK);
    for (int i = 0; i < 10; i++) ck_assert_double_eq_tol(lp2[i], lp[i], 1e-12);
    nf_dataset_free(ds2);
    o.model_seed = 2386;
    ck_assert_int_eq(nf_dataset_alloc(&ds2, "gmm", &o), NF_OK);
    ck_assert_int_eq(nf_dataset_log_prob(ds2, 10, x5, lp2), NF_OK);
    ck_assert(fabs(lp2[0] - lp[0]) > 1e-3);
    nf_dataset_free(ds2);
    ck_assert_int_eq(nf_dataset_gmm_moments(NULL, m5, c5), NF_EINVAL);
    ck_assert_int_eq(nf_dataset_alloc(&ds2, "moons", NULL), NF_OK);
    ck_assert_int_eq(nf_dataset_gmm_moments(ds2, m5, c5), NF_EINVAL);
    ck_assert(strstr(nf_strerror_last(), "moons is not gmm"));
    nf_dataset_free(ds2);
    nf_rng_free(r);
    free(x5);
    free(lp);
    nf_dataset_free(ds);
}
END_TEST

/* ---- teacher ---------------------------------------------------------------------------------- */

static void check_teacher(const char *flow, int D, double mass_tol)
{
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.dim = D;
    o.flow = flow;
    o.model_seed = 2385;
    nf_dataset *ds;
    int rc = nf_dataset_alloc(&ds, "teacher", &o);
    ck_assert_msg(rc == NF_OK, "teacher %s: %s", flow, nf_strerror_last());
    const size_t N = 20000;
    double *x = malloc(N * D * sizeof *x), *lp = malloc(N * sizeof *lp), *lp2 = malloc(N * sizeof *lp2);
    ck_assert(x && lp && lp2);
    nf_rng *r = nf_rng_alloc(53, 0);
    ck_assert_int_eq(nf_dataset_sample(ds, r, N, x, lp), NF_OK);
    ck_assert_int_eq(nf_dataset_log_prob(ds, N, x, lp2), NF_OK);
    /* both directions agree; far from N(0, I): KL(p || N(0, I)) = E[log p - log N] > 0.1 */
    double kl = 0;
    for (size_t i = 0; i < N; i++) {
        ck_assert(isfinite(lp[i]));
        ck_assert_msg(fabs(lp[i] - lp2[i]) < 10 * NF_TEST_TOL_ROUNDTRIP * (1 + fabs(lp[i])),
                      "teacher %s: sample logp %.8f, log_prob %.8f", flow, lp[i], lp2[i]);
        double q = 0;
        for (int a = 0; a < D; a++) q += x[i * D + a] * x[i * D + a];
        kl += (lp[i] + 0.5 * q + 0.5 * D * LOG_2PI) / (double)N;
    }
    ck_assert_msg(kl > 0.1, "teacher %s: KL to N(0, I) only %.4f", flow, kl);
    if (D == 2) {
        hist_case c = {"teacher", 1e9, -1e9, 1e9, -1e9, 250, 250, 1};
        for (size_t i = 0; i < N; i++) {
            c.lo0 = fmin(c.lo0, x[2 * i]), c.hi0 = fmax(c.hi0, x[2 * i]);
            c.lo1 = fmin(c.lo1, x[2 * i + 1]), c.hi1 = fmax(c.hi1, x[2 * i + 1]);
        }
        double w0 = c.hi0 - c.lo0, w1 = c.hi1 - c.lo1;
        c.lo0 -= 0.3 * w0, c.hi0 += 0.3 * w0, c.lo1 -= 0.3 * w1, c.hi1 += 0.3 * w1;
        double *p = malloc(250 * 250 * sizeof *p), mass = 0;
        ck_assert_ptr_nonnull(p);
        double area = grid_density(ds, &c, p);
        for (int i = 0; i < 250 * 250; i++) mass += p[i] * area;
        ck_assert_msg(fabs(mass - 1) < mass_tol, "teacher %s: density integrates to %.5f", flow, mass);
        free(p);
    }
    nf_rng_free(r);
    free(x);
    free(lp);
    free(lp2);
    nf_dataset_free(ds);
}

START_TEST(test_teacher)
{
    check_teacher("maf", 2, 1e-2);
    check_teacher("realnvp", 2, 1e-2);
    check_teacher("maf", 5, 0);
    /* an unknown flow is refused with the flow's message */
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.flow = "no-such-flow(x=1)";
    nf_dataset dummy, *ds = &dummy;
    ck_assert_int_ne(nf_dataset_alloc(&ds, "teacher", &o), NF_OK);
    ck_assert_ptr_null(ds);
    ck_assert(strstr(nf_strerror_last(), "teacher") != NULL);
}
END_TEST

/* ---- registry, determinism, splits, errors ---------------------------------------------------- */

START_TEST(test_registry_and_errors)
{
    int n = 0;
    for (int i = 0; nf_dataset_types[i]; i++, n++) {
        const nf_dataset_type *t = nf_dataset_types[i];
        ck_assert_ptr_eq(nf_dataset_type_find(t->name), t);
        ck_assert(t->summary && t->summary[0] && t->density_method && t->density_method[0]);
        ck_assert(t->density != NF_DENSITY_NONE && t->log_prob && t->sample);
    }
    ck_assert_int_eq(n, 12);
    nf_dataset *ds = NULL;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "moonz", NULL), NF_EINVAL);
    ck_assert_ptr_null(ds);
    ck_assert(strstr(nf_strerror_last(), "moonz") && strstr(nf_strerror_last(), "checkerboard"));
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.dim = 0;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "gmm", &o), NF_EINVAL);
    ck_assert(strstr(nf_strerror_last(), "dimension 0"));
    o.dim = 3;
    o.components = 0;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "gmm", &o), NF_EINVAL);
    /* 2-D sets ignore dim */
    o.components = 5;
    ck_assert_int_eq(nf_dataset_alloc(&ds, "moons", &o), NF_OK);
    ck_assert_int_eq(ds->dim, 2);
    /* entropy refuses tiny samples and non-finite log-densities */
    double H, se, bad[3] = {-1.5, -INFINITY, -2.5};
    ck_assert_int_eq(nf_entropy_from_logp(bad, 1, &H, &se), NF_EINVAL);
    ck_assert_int_eq(nf_entropy_from_logp(bad, 3, &H, &se), NF_ENONFINITE);
    ck_assert(strstr(nf_strerror_last(), "log-density 1"));
    double good[4] = {-1.5, -2.5, -2.0, -3.0};
    ck_assert_int_eq(nf_entropy_from_logp(good, 4, &H, &se), NF_OK);
    ck_assert_double_eq_tol(H, 2.25, 1e-12);
    ck_assert_double_eq_tol(se, sqrt((0.5625 + 0.0625 + 0.0625 + 0.5625) / 3 / 4), 1e-12);
    /* the same seed gives the same points, another seed others */
    double a[20], b[20];
    nf_rng *r1 = nf_rng_alloc(8, 0), *r2 = nf_rng_alloc(8, 0), *r3 = nf_rng_alloc(9, 0);
    ck_assert_int_eq(nf_dataset_sample(ds, r1, 10, a, NULL), NF_OK);
    ck_assert_int_eq(nf_dataset_sample(ds, r2, 10, b, NULL), NF_OK);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_int_eq(nf_dataset_sample(ds, r3, 10, b, NULL), NF_OK);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    nf_rng_free(r1);
    nf_rng_free(r2);
    nf_rng_free(r3);
    nf_dataset_free(ds);
    nf_dataset_free(NULL);
}
END_TEST

START_TEST(test_split)
{
    size_t perm[1000], perm2[1000], count[3];
    ck_assert_int_eq(nf_dataset_split(1000, 0.15, 0.2, 77, perm, count), NF_OK);
    ck_assert_uint_eq(count[0], 650);
    ck_assert_uint_eq(count[1], 150);
    ck_assert_uint_eq(count[2], 200);
    char seen[1000] = {0};
    for (int i = 0; i < 1000; i++) {
        ck_assert(perm[i] < 1000 && !seen[perm[i]]);
        seen[perm[i]] = 1;
    }
    int moved = 0;
    for (int i = 0; i < 1000; i++) moved += perm[i] != (size_t)i;
    ck_assert_int_gt(moved, 900);
    ck_assert_int_eq(nf_dataset_split(1000, 0.15, 0.2, 77, perm2, count), NF_OK);
    ck_assert_mem_eq(perm, perm2, sizeof perm);
    ck_assert_int_eq(nf_dataset_split(1000, 0.15, 0.2, 78, perm2, count), NF_OK);
    ck_assert(memcmp(perm, perm2, sizeof perm) != 0);
    ck_assert_int_eq(nf_dataset_split(1000, 0.6, 0.5, 77, perm, count), NF_EINVAL);
    ck_assert_int_eq(nf_dataset_split(1000, -0.1, 0.2, 77, perm, count), NF_EINVAL);
    ck_assert_int_eq(nf_dataset_split(3, 0.34, 0.34, 77, perm, count), NF_OK);
    ck_assert(count[0] == 1 && count[1] == 1 && count[2] == 1);
}
END_TEST

static Suite *datasets_suite(void)
{
    Suite *s = suite_create("datasets");
    TCase *tc = tcase_create("datasets");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_registry_and_errors);
    tcase_add_test(tc, test_closed_forms);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_quadrature_brute_force);
    tcase_add_loop_test(tc, test_histogram, 0, NHIST);
    tcase_add_loop_test(tc, test_entropy, 0, NENT);
    tcase_add_test(tc, test_gmm);
    tcase_add_test(tc, test_teacher);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(datasets_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
