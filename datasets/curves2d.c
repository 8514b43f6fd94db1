/* datasets/curves2d.c - noisy curves (moons, 2spirals, swissroll): densities by quadrature.
 *
 * Each set draws a branch b, a latent t with density w(t) on [a, c], and adds noise to the curve
 * point: x = c_b(t) + noise.  Its density is a one-dimensional integral over t,
 *
 *     p(x) = sum_b pi_b int_a^c w(t) k(x - c_b(t)) dt,
 *
 * with no closed form (an arc or a spiral seen through a Gaussian).  Per point and branch we
 *   1. evaluate the log-integrand f(t) = log pi_b + log w(t) + log k(x - c_b(t)) on a midpoint grid
 *      fine enough to resolve its peaks (the noise width over the curve's speed) - a cheap
 *      approximation of f may stand in for this scan;
 *   2. take every local maximum within 60 nats of the largest as a breakpoint and G = the largest
 *      exact f there, so the integrand exp(f - G) is at most about 1 and never underflows;
 *   3. integrate exp(f - G) over the segments between breakpoints with GSL's adaptive
 *      Gauss-Kronrod QAG (21 points, absolute tolerance 1e-12, relative 1e-10);
 *   4. log p = logsumexp_b (G_b + log integral_b).
 * The relative error of p is below 1e-9.  Points run on OpenMP threads, each with its own GSL
 * workspace and scan buffer.
 */
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_sf_erf.h>
#include <math.h>
#include <stdlib.h>

#include "datasets/dataset.h"
#include "datasets/ds_internal.h"

#define QUAD_LIMIT 256
#define QUAD_EPSABS 1e-12
#define QUAD_EPSREL 1e-10
#define MAX_PEAKS 64
#define PEAK_WINDOW 60.0

typedef struct curve_def {
    const char *name;
    int nbranch;
    double a, c;  /* latent range */
    int grid;     /* scan points per branch */
    double (*logf)(int b, double t, const double *x);
    double (*logf_scan)(int b, double t, const double *x); /* NULL: the scan uses logf */
} curve_def;

typedef struct quad_ctx {
    const curve_def *def;
    int b;
    const double *x;
    double G;
} quad_ctx;

static double integrand(double t, void *p)
{
    const quad_ctx *q = p;
    return exp(q->def->logf(q->b, t, q->x) - q->G);
}

/* log of the branch-b integral at x, or -inf; *err_rel receives the quadrature's relative error. */
static int branch_log_integral(const curve_def *d, int b, const double *x, double *g,
                               gsl_integration_workspace *w, double *out)
{
    double (*scan)(int, double, const double *) = d->logf_scan ? d->logf_scan : d->logf;
    double h = (d->c - d->a) / d->grid, gmax = -INFINITY;
    for (int j = 0; j < d->grid; j++) {
        g[j] = scan(b, d->a + (j + 0.5) * h, x);
        if (g[j] > gmax) gmax = g[j];
    }
    if (gmax == -INFINITY) {
        *out = -INFINITY;
        return NF_OK;
    }
    /* breakpoints: the ends and the peaks; seg_max[s] is the largest scanned value in segment s */
    double pts[MAX_PEAKS + 2], seg_max[MAX_PEAKS + 1];
    int np = 0;
    pts[np++] = d->a;
    seg_max[0] = -INFINITY;
    double G = -INFINITY;
    for (int j = 0; j < d->grid; j++) {
        int left = j == 0 || g[j] >= g[j - 1], right = j == d->grid - 1 || g[j] >= g[j + 1];
        if (g[j] > seg_max[np - 1]) seg_max[np - 1] = g[j];
        if (!left || !right || g[j] < gmax - PEAK_WINDOW || np > MAX_PEAKS) continue;
        double t = d->a + (j + 0.5) * h;
        pts[np] = t;
        seg_max[np++] = g[j];
        double f = d->logf(b, t, x);
        if (f > G) G = f;
    }
    pts[np++] = d->c;
    if (G == -INFINITY) G = gmax;
    quad_ctx q = {d, b, x, G};
    gsl_function F = {integrand, &q};
    double sum = 0, err = 0;
    for (int s = 0; s + 1 < np; s++) {
        /* a segment whose scan stays PEAK_WINDOW below the top adds less than e^-60 of the total */
        if (pts[s + 1] <= pts[s] || seg_max[s] < gmax - PEAK_WINDOW) continue;
        double r, e;
        int st = gsl_integration_qag(&F, pts[s], pts[s + 1], QUAD_EPSABS, QUAD_EPSREL, QUAD_LIMIT,
                                     GSL_INTEG_GAUSS21, w, &r, &e);
        if (st != GSL_SUCCESS && !(e <= 1e-7 * fabs(r) || e <= QUAD_EPSABS * 100)) return NF_ENOCONV;
        sum += r;
        err += e;
    }
    if (err > 1e-6 * sum + 1e-10) return NF_ENOCONV;
    *out = sum > 0 ? G + log(sum) : -INFINITY;
    return NF_OK;
}

static int curve_log_prob(const curve_def *d, size_t n, const double *x, double *logp)
{
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    nf_ds_fail fail = {NF_OK, 0};
#pragma omp parallel
    {
        gsl_integration_workspace *w = gsl_integration_workspace_alloc(QUAD_LIMIT);
        double *g = malloc((size_t)d->grid * sizeof *g);
        int ok = w && g;
        if (!ok) {
#pragma omp critical(nf_curves2d_fail)
            if (fail.code == NF_OK) fail = (nf_ds_fail){NF_ENOMEM, 0};
        }
#pragma omp for schedule(dynamic, 32)
        for (long i = 0; i < (long)n; i++) {
            if (!ok) continue;
            double acc = -INFINITY;
            int rc = NF_OK;
            for (int b = 0; b < d->nbranch && rc == NF_OK; b++) {
                double lb = -INFINITY;
                rc = branch_log_integral(d, b, x + 2 * i, g, w, &lb);
                acc = nf_ds_logaddexp(acc, lb);
            }
            logp[i] = acc;
            if (rc != NF_OK) {
#pragma omp critical(nf_curves2d_fail)
                if (fail.code == NF_OK || (size_t)i < fail.index) fail = (nf_ds_fail){rc, (size_t)i};
            }
        }
        gsl_integration_workspace_free(w);
        free(g);
    }
    gsl_set_error_handler(old);
    if (fail.code == NF_ENOMEM) return nf_error(NF_ENOMEM, "%s: out of memory for quadrature workspaces", d->name);
    if (fail.code != NF_OK)
        return nf_error(fail.code, "%s: quadrature for the density at point %zu (%g, %g) did not converge",
                        d->name, fail.index, x[2 * fail.index], x[2 * fail.index + 1]);
    return NF_OK;
}

/* log N(x; c, s^2 I) in two dimensions. */
static double lognormal2(const double *x, double c0, double c1, double s)
{
    double d0 = x[0] - c0, d1 = x[1] - c1;
    return -(d0 * d0 + d1 * d1) / (2 * s * s) - 2 * log(s) - NF_DS_LOG_2PI;
}

/* ---- moons: two half circles of radius 2, sklearn make_moons(noise=0.1) * 2 + (-1, -0.2) -------- */

#define MOONS_STD 0.2

static void moons_curve(int b, double t, double *c)
{
    if (b == 0) {
        c[0] = 2 * cos(t) - 1;
        c[1] = 2 * sin(t) - 0.2;
    } else {
        c[0] = 1 - 2 * cos(t);
        c[1] = 0.8 - 2 * sin(t);
    }
}

/* f = log(1/2) + log(1/pi) + log N(x; c_b(t), 0.2^2 I),  t in [0, pi]. */
static double moons_logf(int b, double t, const double *x)
{
    double c[2];
    moons_curve(b, t, c);
    return -log(2 * NF_DS_PI) + lognormal2(x, c[0], c[1], MOONS_STD);
}

static const curve_def moons_def = {"moons", 2, 0, NF_DS_PI, 192, moons_logf, NULL};

static int moons_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        int b = (int)nf_rng_index(rng, 2);
        double c[2], t = NF_DS_PI * nf_rng_uniform(rng);
        moons_curve(b, t, c);
        double e0 = nf_rng_normal(rng), e1 = nf_rng_normal(rng);
        x[2 * i] = c[0] + MOONS_STD * e0;
        x[2 * i + 1] = c[1] + MOONS_STD * e1;
    }
    return NF_OK;
}

static int moons_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    return curve_log_prob(&moons_def, n, x, logp);
}

const nf_dataset_type nf_dataset_moons = {
    .name = "moons",
    .summary = "two interleaved half circles of radius 2, noise std 0.2 (FFJORD, sklearn make_moons)",
    .dim = 2,
    .density = NF_DENSITY_NUMERICAL,
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 21) over the arc angle t in [0, pi] per "
                      "moon, breakpoints at the integrand's peaks, relative error < 1e-9",
    .sample = moons_sample,
    .log_prob = moons_log_prob,
};

/* ---- swissroll: sklearn make_swiss_roll(noise=1.0), columns (0, 2), divided by 5 ----------------- */

#define SWISS_STD 0.2

/* f = log(1/3pi) + log N(x; (t cos t, t sin t)/5, 0.2^2 I),  t in [1.5 pi, 4.5 pi]. */
static double swiss_logf(int b, double t, const double *x)
{
    (void)b;
    return -log(3 * NF_DS_PI) + lognormal2(x, t * cos(t) / 5, t * sin(t) / 5, SWISS_STD);
}

static const curve_def swiss_def = {"swissroll", 1, 1.5 * NF_DS_PI, 4.5 * NF_DS_PI, 512, swiss_logf, NULL};

static int swiss_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double t = 1.5 * NF_DS_PI * (1 + 2 * nf_rng_uniform(rng));
        double e0 = nf_rng_normal(rng), e1 = nf_rng_normal(rng);
        x[2 * i] = t * cos(t) / 5 + SWISS_STD * e0;
        x[2 * i + 1] = t * sin(t) / 5 + SWISS_STD * e1;
    }
    return NF_OK;
}

static int swiss_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    return curve_log_prob(&swiss_def, n, x, logp);
}

const nf_dataset_type nf_dataset_swissroll = {
    .name = "swissroll",
    .summary = "2-D swiss roll (t cos t, t sin t)/5, t in [1.5pi, 4.5pi], noise std 0.2 (FFJORD)",
    .dim = 2,
    .density = NF_DENSITY_NUMERICAL,
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 21) over the roll parameter t, breakpoints "
                      "at the integrand's peaks, relative error < 1e-9",
    .sample = swiss_sample,
    .log_prob = swiss_log_prob,
};

/* ---- 2spirals (FFJORD): n = 3 pi sqrt(u), d = (-n cos n, n sin n) + U[0, 0.5]^2, x = +-d/3 + 0.1 e -- */

#define SPIRAL_STD 0.1
#define SPIRAL_BOX (0.5 / 3)
#define SPIRAL_N (3 * NF_DS_PI)

/* log(Q(a) - Q(b)) for 0 <= a < b, Q the standard normal upper tail, without underflow. */
static double log_q_diff(double a, double b)
{
    if (a < 5) return log(0.5 * (erfc(a / NF_DS_SQRT2) - erfc(b / NF_DS_SQRT2)));
    double la = gsl_sf_log_erfc(a / NF_DS_SQRT2), lb = gsl_sf_log_erfc(b / NF_DS_SQRT2);
    return log(0.5) + la + log1p(-exp(lb - la));
}

/* log density of U[0, h] + N(0, s^2) at y: log((Phi(y/s) - Phi((y - h)/s)) / h). */
static double log_box_gauss(double y, double h, double s)
{
    double u = y / s, v = (y - h) / s, val;
    if (v >= 0)
        val = log_q_diff(v, u);
    else if (u <= 0)
        val = log_q_diff(-u, -v);
    else
        val = log1p(-0.5 * (erfc(u / NF_DS_SQRT2) + erfc(-v / NF_DS_SQRT2)));
    return val - log(h);
}

/* Branch b (0: +, 1: -) at -x is branch 0 at x, since the noise is symmetric:
 * f = log(1/2) + log(2n / (3 pi)^2) + sum_k log k_box(s x_k - c_k(n)/3),  n in [0, 3 pi]. */
static double spiral_logf(int b, double t, const double *x)
{
    double s = b ? -1 : 1;
    double y0 = s * x[0] + t * cos(t) / 3, y1 = s * x[1] - t * sin(t) / 3;
    return log(t / (SPIRAL_N * SPIRAL_N)) + log_box_gauss(y0, SPIRAL_BOX, SPIRAL_STD) +
           log_box_gauss(y1, SPIRAL_BOX, SPIRAL_STD);
}

/* The scan replaces the box-times-Gaussian kernel by the Gaussian of the same mean and variance. */
static double spiral_logf_scan(int b, double t, const double *x)
{
    const double v = SPIRAL_STD * SPIRAL_STD + SPIRAL_BOX * SPIRAL_BOX / 12;
    double s = b ? -1 : 1;
    double y0 = s * x[0] + t * cos(t) / 3 - SPIRAL_BOX / 2, y1 = s * x[1] - t * sin(t) / 3 - SPIRAL_BOX / 2;
    return log(t) - (y0 * y0 + y1 * y1) / (2 * v);
}

static const curve_def spiral_def = {"2spirals", 2, 0, SPIRAL_N, 512, spiral_logf, spiral_logf_scan};

static int spiral_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double t = sqrt(nf_rng_uniform(rng)) * SPIRAL_N;
        double d0 = -cos(t) * t + 0.5 * nf_rng_uniform(rng);
        double d1 = sin(t) * t + 0.5 * nf_rng_uniform(rng);
        double s = nf_rng_index(rng, 2) ? -1 : 1;
        double e0 = nf_rng_normal(rng), e1 = nf_rng_normal(rng);
        x[2 * i] = s * d0 / 3 + SPIRAL_STD * e0;
        x[2 * i + 1] = s * d1 / 3 + SPIRAL_STD * e1;
    }
    return NF_OK;
}

static int spiral_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    return curve_log_prob(&spiral_def, n, x, logp);
}

const nf_dataset_type nf_dataset_2spirals = {
    .name = "2spirals",
    .summary = "two interleaved spirals with uniform jitter and noise std 0.1 (FFJORD)",
    .dim = 2,
    .density = NF_DENSITY_NUMERICAL,
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 21) over the spiral parameter n in [0, 3 pi] "
                      "per spiral, uniform jitter convolved with the noise in closed form (erfc), breakpoints at "
                      "the integrand's peaks, relative error < 1e-9",
    .sample = spiral_sample,
    .log_prob = spiral_log_prob,
};
