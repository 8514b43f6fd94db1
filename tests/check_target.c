/* tests/check_target.c - unnormalised targets: gradients against central differences, log Z against
 * 2-D grid integrals (and, for u1, a second integration in polar coordinates; for the 5-D gmm, an
 * independent mixture density and an importance-sampling estimate), exact samplers against their
 * known moments, batch consistency, and the error paths.  Targets compute in double in both builds,
 * so the tolerances do not depend on the build.  Every check loops over the cases below, which cover
 * every registered type (test_registry makes sure of that). */
#include <check.h>
#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributions/target.h"

#define PI 3.14159265358979323846

typedef struct {
    const char *name, *options;
    double grid[4];   /* 2-D: an integration box that holds all but a negligible part of the mass */
} target_case;

static const target_case cases[] = {
    {"u1", "", {-6, 6, -8, 8}},
    {"u2", "", {-6, 6, -8, 8}},
    {"u3", "", {-6, 6, -8, 8}},
    {"u4", "dim=2", {-6, 6, -8, 8}},
    {"banana", "", {-20.6, 20.6, -8, 50}},                      /* x1 within 6.5 sd, x2 around b (x1^2 - var) */
    {"banana", "b=-0.0785, var=7.3", {-17.6, 17.6, -32, 8}},
    {"funnel", "", {-30, 30, -9, 9}},                           /* (v, u) with x = e^{v/2} u: 10 sd and 9 sd */
    {"funnel", "dim=5, sigma=1.37", {0}},
    {"gmm", "", {-25, 25, -25, 25}},
    {"gmm", "dim=5, k=3, seed=7, spread=2.385, scale=0.83, log_z=-2.385", {0}},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double relerr(double a, double b, double floor)
{
    double m = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / m;
}

static nf_target *make(const target_case *c)
{
    nf_target *t = NULL;
    int rc = nf_target_create(&t, c->name, c->options);
    ck_assert_msg(rc == NF_OK, "%s(%s): create failed: %s", c->name, c->options, nf_strerror_last());
    return t;
}

static double logp1(const nf_target *t, const double *x)
{
    double lp;
    ck_assert_int_eq(nf_target_log_prob(t, 1, x, &lp, NULL), NF_OK);
    return lp;
}

/* ---- registry ---- */

START_TEST(test_registry)
{
    int ntypes = 0;
    for (int i = 0; nf_target_types[i]; i++, ntypes++) {
        const nf_target_type *T = nf_target_types[i];
        ck_assert_ptr_eq(nf_target_type_find(T->name), T);
        ck_assert_msg(T->summary && T->summary[0] && T->options_help && T->log_prob, "%s: incomplete type", T->name);
        ck_assert_msg(T->box[0] < T->box[1] && T->box[2] < T->box[3], "%s: empty plotting box", T->name);
        int covered = 0;
        for (int c = 0; c < NCASES; c++) covered |= strcmp(cases[c].name, T->name) == 0;
        ck_assert_msg(covered, "target %s is registered but no test case covers it", T->name);
        nf_target *t;
        ck_assert_int_eq(nf_target_create(&t, T->name, NULL), NF_OK);
        ck_assert_ptr_eq(t->type, T);
        ck_assert_int_eq(t->dim, T->dim ? T->dim : 2);   /* dim-chosen targets default to 2 */
        ck_assert_str_eq(t->options, "");
        nf_target_free(t);
    }
    ck_assert_int_eq(ntypes, 7);
}
END_TEST

/* ---- gradients against central differences ---- */

/* Test points: uniform in the plotting box (2-D targets) and exact draws (targets with a sampler). */
static double *test_points(const nf_target *t, int npts, uint64_t seed)
{
    const int D = t->dim;
    double *x = malloc((size_t)npts * D * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    int from = 0;
    if (t->type->sample) {
        from = D == 2 ? npts / 2 : npts;
        ck_assert_int_eq(nf_target_sample(t, r, (size_t)from, x), NF_OK);
    }
    const double *b = t->type->box;
    for (int i = from; i < npts; i++) {
        x[i * D] = b[0] + (b[1] - b[0]) * nf_rng_uniform(r);
        x[i * D + 1] = b[2] + (b[3] - b[2]) * nf_rng_uniform(r);
    }
    nf_rng_free(r);
    return x;
}

START_TEST(test_gradients)
{
    const int NP = 12;
    for (int c = 0; c < NCASES; c++) {
        nf_target *t = make(&cases[c]);
        const int D = t->dim;
        double *x = test_points(t, NP, 100 + c);
        double *g = malloc((size_t)NP * D * sizeof *g), lp[12], lp2[12];
        for (int k = 0; k < NP * D; k++) g[k] = NAN;   /* log_prob must write every entry */
        ck_assert_int_eq(nf_target_log_prob(t, NP, x, lp, g), NF_OK);
        ck_assert_int_eq(nf_target_log_prob(t, NP, x, lp2, NULL), NF_OK);
        for (int i = 0; i < NP; i++) {
            ck_assert_msg(lp[i] == lp2[i], "%s: logp[%d] differs with and without the gradient", t->type->name, i);
            ck_assert_msg(isfinite(lp[i]), "%s: logp[%d] = %g", t->type->name, i, lp[i]);
            for (int j = 0; j < D; j++) {
                double *xi = x + i * D, keep = xi[j], h = 1e-5 * fmax(1, fabs(keep));
                xi[j] = keep + h;
                double up = logp1(t, xi);
                xi[j] = keep - h;
                double dn = logp1(t, xi);
                xi[j] = keep;
                double fd = (up - dn) / (2 * h), an = g[i * D + j];
                ck_assert_msg(relerr(an, fd, 1e-2) < 1e-6,
                              "%s(%s): d log p / dx[%d][%d] = %.12g, finite difference %.12g", t->type->name,
                              t->options, i, j, an, fd);
            }
        }
        free(x);
        free(g);
        nf_target_free(t);
    }
}
END_TEST

/* A batch large enough to run rows in parallel gives the same values as rows one at a time. */
START_TEST(test_batch_consistency)
{
    const int N = 5000;
    for (int c = 0; c < NCASES; c++) {
        nf_target *t = make(&cases[c]);
        const int D = t->dim;
        double *x = test_points(t, N, 200 + c), *lp = malloc(N * sizeof *lp);
        double *g = malloc((size_t)N * D * sizeof *g), g1[8];
        ck_assert_int_eq(nf_target_log_prob(t, N, x, lp, g), NF_OK);
        for (int i = 0; i < N; i += 97) {
            double l1;
            ck_assert_int_eq(nf_target_log_prob(t, 1, x + (size_t)i * D, &l1, g1), NF_OK);
            ck_assert_msg(l1 == lp[i], "%s: row %d: batch %.17g, alone %.17g", t->type->name, i, lp[i], l1);
            for (int j = 0; j < D; j++) ck_assert(g1[j] == g[(size_t)i * D + j]);
        }
        free(x), free(lp), free(g);
        nf_target_free(t);
    }
}
END_TEST

/* ---- normalisers ---- */

/* Midpoint rule of exp(log p~) on [x0, x1] x [y0, y1] with step h; *inbox gets the part of the
 * integral inside the type's plotting box.  For the funnel (funnel = 1) the second coordinate is
 * integrated as x = e^{v/2} u (u on the grid, Jacobian e^{v/2}), which follows the neck. */
static double grid_integral(const nf_target *t, double x0, double x1, double y0, double y1, double h, int funnel,
                            double *inbox)
{
    const int nx = (int)lround((x1 - x0) / h), ny = (int)lround((y1 - y0) / h);
    double *z = malloc(2 * (size_t)ny * sizeof *z), *lp = malloc((size_t)ny * sizeof *lp);
    const double *b = t->type->box;
    double I = 0, In = 0;
    for (int a = 0; a < nx; a++) {
        double v = x0 + (a + 0.5) * h, jac = funnel ? exp(0.5 * v) : 1;
        for (int q = 0; q < ny; q++) {
            z[2 * q] = v;
            z[2 * q + 1] = (y0 + (q + 0.5) * h) * jac;
        }
        ck_assert_int_eq(nf_target_log_prob(t, (size_t)ny, z, lp, NULL), NF_OK);
        for (int q = 0; q < ny; q++) {
            double p = exp(lp[q]) * jac * h * h;
            I += p;
            if (z[2 * q] >= b[0] && z[2 * q] <= b[1] && z[2 * q + 1] >= b[2] && z[2 * q + 1] <= b[3]) In += p;
        }
    }
    free(z), free(lp);
    if (inbox) *inbox = In;
    return I;
}

/* Reference log Z of u1..u4 (u2-u4 with the wall of target.h), computed once by the grid below
 * (h = 0.01 on [-6, 6] x [-8, 8]).  u1 agrees with the polar integration to 1e-12, u2-u4 with the
 * library's closed form to 1e-12; pinned here so that a change to an energy is noticed. */
static const double u_log_z[4] = {1.877501626109, 1.958922548877, 2.518538336812, 2.587531208299};

START_TEST(test_log_z_grid)
{
    for (int c = 0; c < NCASES; c++) {
        nf_target *t = make(&cases[c]);
        if (t->dim != 2) {
            nf_target_free(t);
            continue;
        }
        const double *box = cases[c].grid;
        const char *n = t->type->name;
        const int funnel = strcmp(n, "funnel") == 0;
        double inbox, I = grid_integral(t, box[0], box[1], box[2], box[3], n[0] == 'u' ? 0.01 : 0.02, funnel, &inbox);
        if (n[0] == 'u') {
            ck_assert_msg(fabs(log(I) - u_log_z[n[1] - '1']) < 1e-8, "%s: grid log Z %.12f, reference %.12f", n, log(I),
                          u_log_z[n[1] - '1']);
            /* u1..u4: log Z by the grid is the reference; the box [-4, 4]^2 holds nearly all of the mass
             * (u4's lower band dips to z2 = -4 near z1 = 3, so a little of it lies below the box). */
            ck_assert_msg(inbox / I > (n[1] == '4' ? 0.97 : 0.999), "%s: the plotting box holds %.6f of the mass",
                          n, inbox / I);
            /* the grid is converged: doubling the step (h = 0.02) moves log Z by less than 1e-8 */
            double I2 = grid_integral(t, box[0], box[1], box[2], box[3], 0.02, 0, NULL);
            ck_assert_msg(fabs(log(I2 / I)) < 1e-8, "%s: grid log Z %.12g (h = 0.01), %.12g (h = 0.02)", n, log(I),
                          log(I2));
        }
        if (strcmp(n, "u1") == 0) {
            ck_assert(isnan(t->log_z));
            /* a second, independent integration in polar coordinates: int_0^6 int_0^{2 pi} p~ r dtheta dr
             * (midpoint in r; trapezoid in theta, exact to rounding for a smooth periodic integrand) */
            const int NR = 3000, NT = 1500;
            double *z = malloc(2 * (size_t)NT * sizeof *z), *lp = malloc((size_t)NT * sizeof *lp), P = 0;
            for (int a = 0; a < NR; a++) {
                double r = (a + 0.5) * 6.0 / NR;
                for (int q = 0; q < NT; q++) {
                    z[2 * q] = r * cos(2 * PI * q / NT);
                    z[2 * q + 1] = r * sin(2 * PI * q / NT);
                }
                ck_assert_int_eq(nf_target_log_prob(t, (size_t)NT, z, lp, NULL), NF_OK);
                for (int q = 0; q < NT; q++) P += exp(lp[q]) * r * (6.0 / NR) * (2 * PI / NT);
            }
            free(z), free(lp);
            ck_assert_msg(fabs(log(P / I)) < 1e-6, "u1: log Z on the grid %.12g, in polar coordinates %.12g", log(I),
                          log(P));
        } else {
            ck_assert_msg(isfinite(t->log_z), "%s: log_z should be known", n);
            ck_assert_msg(fabs(log(I) - t->log_z) < 1e-8, "%s(%s): log Z by the grid %.12g, target says %.12g", n,
                          t->options, log(I), t->log_z);
        }
        nf_target_free(t);
    }
}
END_TEST

/* The means the gmm target documents: mu_kj = spread * (draw kD + j of nf_rng_alloc(seed, 0)). */
static double *gmm_means(int K, int D, int seed, double spread)
{
    double *mu = malloc((size_t)K * D * sizeof *mu);
    nf_rng *r = nf_rng_alloc((uint64_t)seed, 0);
    for (int q = 0; q < K * D; q++) mu[q] = spread * nf_rng_normal(r);
    nf_rng_free(r);
    return mu;
}

/* 5-D gmm: log p~ - log_z is the mixture density computed here from GSL's Gaussian pdf, and an
 * importance-sampling estimate with a proposal that knows nothing of the target recovers log_z. */
START_TEST(test_gmm_5d)
{
    const int K = 3, D = 5, N = 300000;
    const double spread = 1.2, scale = 0.83, c = -2.385;
    nf_target *t;
    ck_assert_int_eq(nf_target_create(&t, "gmm", "dim=5,k=3,seed=7,spread=1.2,scale=0.83,log_z=-2.385"), NF_OK);
    ck_assert(t->log_z == c);
    double *mu = gmm_means(K, D, 7, spread);
    double *x = test_points(t, 40, 300);
    nf_rng *r = nf_rng_alloc(301, 0);
    for (int i = 20; i < 40; i++)   /* half exact draws, half from a wide Gaussian */
        for (int j = 0; j < D; j++) x[i * D + j] = 3.1 * nf_rng_normal(r);
    for (int i = 0; i < 40; i++) {
        double p = 0;
        for (int k = 0; k < K; k++) {
            double pk = 1.0 / K;
            for (int j = 0; j < D; j++) pk *= gsl_ran_gaussian_pdf(x[i * D + j] - mu[k * D + j], scale);
            p += pk;
        }
        double got = logp1(t, x + i * D) - c;
        ck_assert_msg(relerr(got, log(p), 1) < 1e-12, "gmm 5-D: row %d: log p~ - log_z = %.15g, mixture %.15g", i, got,
                      log(p));
    }
    free(x);

    /* Z ~ mean of p~(y) / q(y), y ~ q = N(0, s^2 I) */
    const double s = 1.8;
    double *y = malloc((size_t)N * D * sizeof *y), *lp = malloc(N * sizeof *lp), *lw = malloc(N * sizeof *lw);
    for (int q = 0; q < N * D; q++) y[q] = s * nf_rng_normal(r);
    ck_assert_int_eq(nf_target_log_prob(t, N, y, lp, NULL), NF_OK);
    double mx = -INFINITY;
    for (int i = 0; i < N; i++) {
        double lq = -D * (log(s) + 0.5 * log(2 * PI));
        for (int j = 0; j < D; j++) lq -= 0.5 * y[i * D + j] * y[i * D + j] / (s * s);
        lw[i] = lp[i] - lq;
        mx = fmax(mx, lw[i]);
    }
    double s1 = 0, s2 = 0;
    for (int i = 0; i < N; i++) {
        double w = exp(lw[i] - mx);
        s1 += w, s2 += w * w;
    }
    double mean = s1 / N, se = sqrt((s2 / N - mean * mean) / N) / mean;   /* relative standard error */
    double est = mx + log(mean);
    ck_assert_msg(se < 0.03, "gmm 5-D: importance sampling too noisy (relative se %g)", se);
    ck_assert_msg(fabs(est - c) < 5 * se, "gmm 5-D: importance-sampled log Z %.6f, target says %.6f (se %.2g)", est, c,
                  se);
    free(y), free(lp), free(lw), free(mu);
    nf_rng_free(r);
    nf_target_free(t);
}
END_TEST

/* ---- samplers against their known moments ---- */

/* Sample mean and variance of coordinate j, and the standard errors of both (from the sample's own
 * fourth central moment). */
static void moments(const double *x, int N, int D, int j, double *mean, double *var, double *se_mean, double *se_var)
{
    double m = 0, v = 0, m4 = 0;
    for (int i = 0; i < N; i++) m += x[i * D + j];
    m /= N;
    for (int i = 0; i < N; i++) {
        double d = x[i * D + j] - m;
        v += d * d, m4 += d * d * d * d;
    }
    v /= N - 1, m4 /= N;
    *mean = m, *var = v, *se_mean = sqrt(v / N), *se_var = sqrt((m4 - v * v) / N);
}

static void check_moment(const char *what, int j, double m, double v, double sm, double sv, double em, double ev)
{
    ck_assert_msg(fabs(m - em) < 5 * sm, "%s: coordinate %d: sample mean %.6g, expected %.6g (se %.2g)", what, j, m, em,
                  sm);
    ck_assert_msg(fabs(v - ev) < 5 * sv, "%s: coordinate %d: sample variance %.6g, expected %.6g (se %.2g)", what, j, v,
                  ev, sv);
}

START_TEST(test_samplers)
{
    const int N = 200000;
    nf_rng *r = nf_rng_alloc(401, 0);
    double m, v, sm, sv;
    /* banana: E x = 0, Var x1 = var, Var x2 = 1 + 2 b^2 var^2, Cov = b E x1^3 = 0 */
    const double bs[2] = {0.1, -0.0785}, vars[2] = {10, 7.3};
    for (int c = 0; c < 2; c++) {
        nf_target *t = make(&cases[4 + c]);
        double *x = malloc(2 * (size_t)N * sizeof *x), cxy = 0;
        ck_assert_int_eq(nf_target_sample(t, r, N, x), NF_OK);
        moments(x, N, 2, 0, &m, &v, &sm, &sv);
        check_moment("banana", 0, m, v, sm, sv, 0, vars[c]);
        moments(x, N, 2, 1, &m, &v, &sm, &sv);
        check_moment("banana", 1, m, v, sm, sv, 0, 1 + 2 * bs[c] * bs[c] * vars[c] * vars[c]);
        /* the residual x2 - b (x1^2 - var) is N(0, 1) and independent of x1 */
        double *e = malloc(2 * (size_t)N * sizeof *e);
        for (int i = 0; i < N; i++) {
            e[2 * i] = x[2 * i] / sqrt(vars[c]);
            e[2 * i + 1] = x[2 * i + 1] - bs[c] * (x[2 * i] * x[2 * i] - vars[c]);
        }
        for (int j = 0; j < 2; j++) {
            moments(e, N, 2, j, &m, &v, &sm, &sv);
            check_moment("banana standardised", j, m, v, sm, sv, 0, 1);
        }
        free(e);
        for (int i = 0; i < N; i++) cxy += x[2 * i] * x[2 * i + 1];
        cxy /= N;
        /* sd of x1 x2 is below sqrt(E x1^2 x2^2) <= (E x1^4 E x2^4)^{1/4}; 12 var sd is generous */
        ck_assert_msg(fabs(cxy) < 5 * sqrt(vars[c] * 12 * (1 + 2 * bs[c] * bs[c] * vars[c] * vars[c]) / N),
                      "banana: sample covariance %g", cxy);
        free(x);
        nf_target_free(t);
    }
    /* funnel (dim 5, sigma 1.37): E v = 0, Var v = sigma^2, E x_i = 0, Var x_i = E e^v = e^{sigma^2/2} */
    {
        nf_target *t = make(&cases[7]);
        const int D = 5;
        const double sg = 1.37;
        double *x = malloc((size_t)D * N * sizeof *x);
        ck_assert_int_eq(nf_target_sample(t, r, N, x), NF_OK);
        moments(x, N, D, 0, &m, &v, &sm, &sv);
        check_moment("funnel", 0, m, v, sm, sv, 0, sg * sg);
        for (int j = 1; j < D; j++) {
            moments(x, N, D, j, &m, &v, &sm, &sv);
            check_moment("funnel", j, m, v, sm, sv, 0, exp(0.5 * sg * sg));
        }
        free(x);
        nf_target_free(t);
    }
    /* gmm (5-D): E x = mean of the mu_k, Var x_j = scale^2 + (1/K) sum_k (mu_kj - m_j)^2 */
    {
        nf_target *t = make(&cases[9]);
        const int K = 3, D = 5;
        double *mu = gmm_means(K, D, 7, 2.385), *x = malloc((size_t)D * N * sizeof *x);
        ck_assert_int_eq(nf_target_sample(t, r, N, x), NF_OK);
        for (int j = 0; j < D; j++) {
            double em = 0, ev = 0.83 * 0.83;
            for (int k = 0; k < K; k++) em += mu[k * D + j] / K;
            for (int k = 0; k < K; k++) ev += (mu[k * D + j] - em) * (mu[k * D + j] - em) / K;
            moments(x, N, D, j, &m, &v, &sm, &sv);
            check_moment("gmm", j, m, v, sm, sv, em, ev);
        }
        free(x), free(mu);
        nf_target_free(t);
    }
    /* u1..u4 have no exact sampler, and say so */
    nf_target *t = make(&cases[0]);
    double x[2];
    ck_assert(t->type->sample == NULL);
    ck_assert_int_eq(nf_target_sample(t, r, 1, x), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "u1") && strstr(nf_strerror_last(), "sampler"), "message: %s",
                  nf_strerror_last());
    nf_target_free(t);
    nf_rng_free(r);
}
END_TEST

/* Stein's identity ties each sampler to its log-density gradient: for x ~ p (integrating by parts),
 *   E[d log p / dx_k] = 0   and   E[x_j d log p / dx_k] = -delta_jk. */
START_TEST(test_samplers_stein)
{
    const int N = 200000;
    nf_rng *r = nf_rng_alloc(501, 0);
    for (int c = 0; c < NCASES; c++) {
        nf_target *t = make(&cases[c]);
        if (!t->type->sample) {
            nf_target_free(t);
            continue;
        }
        const int D = t->dim;
        double *x = malloc((size_t)N * D * sizeof *x), *g = malloc((size_t)N * D * sizeof *g);
        double *lp = malloc(N * sizeof *lp), *h = malloc(N * sizeof *h);
        ck_assert_int_eq(nf_target_sample(t, r, N, x), NF_OK);
        ck_assert_int_eq(nf_target_log_prob(t, N, x, lp, g), NF_OK);
        for (int j = -1; j < D; j++)
            for (int k = 0; k < D; k++) {
                /* h_i = g_ik (j = -1) or x_ij g_ik; its mean and standard error */
                for (int i = 0; i < N; i++) h[i] = (j < 0 ? 1 : x[(size_t)i * D + j]) * g[(size_t)i * D + k];
                double m, v, sm, sv;
                moments(h, N, 1, 0, &m, &v, &sm, &sv);
                double expect = j == k ? -1 : 0;
                ck_assert_msg(fabs(m - expect) < 5 * sm + 1e-12,
                              "%s(%s): E[x_%d d log p/dx_%d] = %.5g (x_-1 meaning 1), expected %g (se %.2g)",
                              t->type->name, t->options, j, k, m, expect, sm);
            }
        free(x), free(g), free(lp), free(h);
        nf_target_free(t);
    }
    nf_rng_free(r);
}
END_TEST

/* ---- options and errors ---- */

static void expect_create_error(const char *name, const char *options, int code, const char *m1, const char *m2)
{
    static nf_target dummy;
    nf_target *t = &dummy;   /* must come back NULL */
    nf_error_clear();
    int rc = nf_target_create(&t, name, options);
    ck_assert_msg(rc == code, "%s(%s): code %d, expected %d (%s)", name, options, rc, code, nf_strerror_last());
    ck_assert_ptr_null(t);
    const char *msg = nf_strerror_last();
    ck_assert_msg(strstr(msg, m1) && (!m2 || strstr(msg, m2)), "%s(%s): message '%s' should name '%s'%s%s", name,
                  options, msg, m1, m2 ? " and " : "", m2 ? m2 : "");
}

START_TEST(test_options_and_errors)
{
    expect_create_error("u7", "", NF_EINVAL, "u7", "banana");
    expect_create_error(NULL, "", NF_EINVAL, "(null)", "funnel");
    expect_create_error("banana", "bb=2.385", NF_EINVAL, "banana", "'bb'");
    expect_create_error("banana", "b=2.385x", NF_EINVAL, "banana", "b=2.385x");
    expect_create_error("banana", "var=-2.385", NF_EINVAL, "var=-2.385", NULL);
    expect_create_error("banana", "b", NF_EINVAL, "banana", "key=value");
    expect_create_error("funnel", "dim=1", NF_EINVAL, "funnel", "dim=1");
    expect_create_error("funnel", "dim=1025", NF_EINVAL, "funnel", "dim=1025");
    expect_create_error("gmm", "dim=0", NF_EINVAL, "gmm", "dim=0");
    expect_create_error("gmm", "k=0", NF_EINVAL, "gmm", "k=0");
    expect_create_error("gmm", "scale=0", NF_EINVAL, "gmm", "scale=0");
    expect_create_error("u1", "dim=3", NF_EINVAL, "u1", "dim=3");
    expect_create_error("u2", "wall=3", NF_EINVAL, "u2", "'wall'");
    char big[400] = "", kv[32];
    for (int i = 0; i < 30; i++) snprintf(kv, sizeof kv, "%sk%02d=2.385", i ? "," : "", i), strcat(big, kv);
    expect_create_error("gmm", big, NF_EINVAL, "gmm", "longer than");
    ck_assert_int_eq(nf_target_create(NULL, "u1", ""), NF_EINVAL);
    nf_target_free(NULL);

    /* options come back canonical, and rebuilding from them gives the same target */
    nf_target *t, *t2;
    ck_assert_int_eq(nf_target_create(&t, "gmm", " k=3 , seed=7 spread=2.385"), NF_OK);
    ck_assert_str_eq(t->options, "k=3,seed=7,spread=2.385");
    ck_assert_int_eq(nf_target_create(&t2, t->type->name, t->options), NF_OK);
    const double x[4] = {2.385, -0.713, -1.91, 0.442};
    double lp[2], lp2[2];
    ck_assert_int_eq(nf_target_log_prob(t, 2, x, lp, NULL), NF_OK);
    ck_assert_int_eq(nf_target_log_prob(t2, 2, x, lp2, NULL), NF_OK);
    ck_assert(lp[0] == lp2[0] && lp[1] == lp2[1]);
    ck_assert(t->log_z == NF_TARGET_GMM_LOG_Z);
    /* another seed moves the means */
    nf_target_free(t2);
    ck_assert_int_eq(nf_target_create(&t2, "gmm", "k=3,seed=8,spread=2.385"), NF_OK);
    ck_assert_int_eq(nf_target_log_prob(t2, 2, x, lp2, NULL), NF_OK);
    ck_assert(lp[0] != lp2[0]);
    nf_target_free(t2);

    /* a non-finite input is an error naming the target, the row and the column */
    double bad[6] = {0.3, -1.2, 2.385, 0.7, 0.1, NAN}, g[6];
    ck_assert_int_eq(nf_target_log_prob(t, 3, bad, lp, g), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "gmm") && strstr(nf_strerror_last(), "row 2") &&
                      strstr(nf_strerror_last(), "column 1"),
                  "message: %s", nf_strerror_last());
    bad[5] = 0.1, bad[2] = -INFINITY;
    ck_assert_int_eq(nf_target_log_prob(t, 3, bad, lp, g), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "row 1") && strstr(nf_strerror_last(), "inf"), "message: %s",
                  nf_strerror_last());
    ck_assert_int_eq(nf_target_log_prob(t, 0, NULL, NULL, NULL), NF_OK);
    ck_assert_int_eq(nf_target_log_prob(t, 1, NULL, lp, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_target_log_prob(NULL, 1, x, lp, NULL), NF_EINVAL);
    nf_target_free(t);

    /* fixed-dimension targets accept their own dim; exact log Z where it is known */
    ck_assert_int_eq(nf_target_create(&t, "u3", "dim=2"), NF_OK);
    ck_assert_str_eq(t->options, "dim=2");
    ck_assert(isfinite(t->log_z));
    nf_target_free(t);
    ck_assert_int_eq(nf_target_create(&t, "funnel", "dim=1024"), NF_OK);
    ck_assert_int_eq(t->dim, 1024);
    ck_assert(t->log_z == 0);
    nf_target_free(t);

    /* the funnel's neck underflows to -inf, never to NaN */
    ck_assert_int_eq(nf_target_create(&t, "funnel", "dim=3"), NF_OK);
    const double neck[6] = {-800, 0.0, 2.385, -800, 0, 0};
    ck_assert_int_eq(nf_target_log_prob(t, 2, neck, lp, g), NF_OK);
    ck_assert_msg(lp[0] == -INFINITY && isfinite(lp[1]), "funnel neck: logp %g, %g", lp[0], lp[1]);
    ck_assert(g[1] == 0 && g[4] == 0 && g[5] == 0);
    nf_target_free(t);
}
END_TEST

static Suite *target_suite(void)
{
    Suite *s = suite_create("target");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_batch_consistency);
    tcase_add_test(tc, test_log_z_grid);
    tcase_add_test(tc, test_gmm_5d);
    tcase_add_test(tc, test_samplers);
    tcase_add_test(tc, test_samplers_stein);
    tcase_add_test(tc, test_options_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(target_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
