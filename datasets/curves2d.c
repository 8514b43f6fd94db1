/* datasets/curves2d.c - noisy curves (moons, 2spirals, swissroll): densities by quadrature.
 *
 * Each set draws a branch b, a latent t with density w(t) on [a, c], and adds noise to the curve
 * point: x = c_b(t) + noise.  Its density is a one-dimensional integral over t,
 *
 *     p(x) = sum_b pi_b int_a^c w(t) k(x - c_b(t)) dt,
 *
 * with no closed form (an arc or a spiral seen through a Gaussian).  Per point and branch we
 *   1. scan the log-integrand on a midpoint grid fine enough to resolve its peaks (the noise width
 *      over the curve's speed), with a Gaussian kernel of the noise's variance standing in for k
 *      (exact for Gaussian noise; for 2spirals the Gaussian of the same mean and variance);
 *   2. keep the cells within 2 cells of one that is at most 40 nats below the top (the rest adds
 *      less than e^-40 of the integral), split each run of kept cells at its local maxima, and
 *      take G = the largest exact log-integrand at those peaks, so exp(f - G) stays near 1;
 *   3. integrate exp(f - G) over each piece with GSL's adaptive Gauss-Kronrod QAG (41 points,
 *      absolute tolerance 1e-12, relative 1e-10);
 *   4. log p = logsumexp_b (G_b + log integral_b).
 * The relative error of p is below 1e-9 (tests/check_datasets.c compares with a brute-force
 * trapezoid rule).  Points run on OpenMP threads, each with its own GSL workspace and scan table.
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
#define PEAK_WINDOW 40.0
#define SCAN_MARGIN 2

typedef struct curve_def {
    const char *name;
    int nbranch;
    double a, c;      /* latent range */
    int grid;         /* scan points per branch */
    double scan_var;  /* variance of the Gaussian kernel the scan uses */
    /* Scan: centre p of the scan kernel at t and logw = log(branch weight * latent density). */
    void (*scan_point)(int b, double t, double *p, double *logw);
    /* The exact log-integrand f(t) at x. */
    double (*logf)(int b, double t, const double *x);
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

/* log of the branch-b integral at x (or -inf).  tab: the scan table (3 * nbranch * grid: p0, p1,
 * logw at each grid point), g: scan buffer of 2 * grid doubles. */
static int branch_log_integral(const curve_def *d, int b, const double *x, const double *tab, double *g,
                               gsl_integration_workspace *w, double *out)
{
    int M = d->grid;
    double h = (d->c - d->a) / M, gmax = -INFINITY, iv = 1 / (2 * d->scan_var);
    const double *row = tab + (size_t)3 * b * M;
    for (int j = 0; j < M; j++) {
        double d0 = x[0] - row[3 * j], d1 = x[1] - row[3 * j + 1];
        g[j] = row[3 * j + 2] - (d0 * d0 + d1 * d1) * iv;
        if (g[j] > gmax) gmax = g[j];
    }
    *out = -INFINITY;
    if (gmax == -INFINITY) return NF_OK;
    /* active cells: within SCAN_MARGIN cells of one that is at most PEAK_WINDOW below the top;
     * the rest of the range adds less than e^-40 of the total and is skipped */
    double thr = gmax - PEAK_WINDOW, *active = g + M;
    for (int j = 0; j < M; j++) active[j] = 0;
    for (int j = 0; j < M; j++)
        if (g[j] >= thr)
            for (int k = j - SCAN_MARGIN; k <= j + SCAN_MARGIN; k++)
                if (k >= 0 && k < M) active[k] = 1;
    /* breakpoints: the ends of each run of active cells and the peaks inside it */
    double pts[MAX_PEAKS + 2];
    int np = 0, nrun = 0;
    double G = -INFINITY;
    int run_start[MAX_PEAKS], run_end[MAX_PEAKS];
    for (int j = 0; j < M;) {
        if (!active[j]) {
            j++;
            continue;
        }
        int j0 = j;
        while (j < M && active[j]) j++;
        if (nrun == MAX_PEAKS) return NF_ENOCONV;
        run_start[nrun] = j0;
        run_end[nrun++] = j;
    }
    double sum = 0, err = 0;
    quad_ctx q = {d, b, x, 0};
    gsl_function F = {integrand, &q};
    for (int pass = 0; pass < 2; pass++) {   /* pass 0 finds G, pass 1 integrates */
        for (int r = 0; r < nrun; r++) {
            np = 0;
            pts[np++] = d->a + run_start[r] * h;
            for (int j = run_start[r]; j < run_end[r] && np <= MAX_PEAKS; j++) {
                int left = j == 0 || g[j] >= g[j - 1], right = j == M - 1 || g[j] >= g[j + 1];
                if (!left || !right || g[j] < thr) continue;
                double t = d->a + (j + 0.5) * h;
                pts[np++] = t;
                if (pass == 0) {
                    double f = d->logf(b, t, x);
                    if (f > G) G = f;
                }
            }
            pts[np++] = d->a + run_end[r] * h;
            if (pass == 0) continue;
            for (int s = 0; s + 1 < np; s++) {
                double v, e;
                int st = gsl_integration_qag(&F, pts[s], pts[s + 1], QUAD_EPSABS, QUAD_EPSREL, QUAD_LIMIT,
                                             GSL_INTEG_GAUSS41, w, &v, &e);
                if (st != GSL_SUCCESS && !(e <= 1e-7 * fabs(v) || e <= QUAD_EPSABS * 100)) return NF_ENOCONV;
                sum += v;
                err += e;
            }
        }
        if (pass == 0) q.G = G == -INFINITY ? gmax : G;
    }
    if (err > 1e-6 * sum + 1e-10) return NF_ENOCONV;
    if (sum > 0) *out = q.G + log(sum);
    return NF_OK;
}

static int curve_log_prob(const curve_def *d, size_t n, const double *x, double *logp)
{
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    nf_ds_fail fail = {NF_OK, 0};
#pragma omp parallel
    {
        gsl_integration_workspace *w = gsl_integration_workspace_alloc(QUAD_LIMIT);
        size_t M = (size_t)d->grid;
        double *tab = malloc((3 * (size_t)d->nbranch + 2) * M * sizeof *tab), *g = tab + 3 * d->nbranch * M;
        int ok = w && tab;
        for (int b = 0; ok && b < d->nbranch; b++)
            for (size_t j = 0; j < M; j++) {
                double *e = tab + 3 * (b * M + j);
                d->scan_point(b, d->a + ((double)j + 0.5) * (d->c - d->a) / (double)M, e, e + 2);
            }
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
                rc = branch_log_integral(d, b, x + 2 * i, tab, g, w, &lb);
                acc = nf_ds_logaddexp(acc, lb);
            }
            logp[i] = acc;
            if (rc != NF_OK) {
#pragma omp critical(nf_curves2d_fail)
                if (fail.code == NF_OK || (size_t)i < fail.index) fail = (nf_ds_fail){rc, (size_t)i};
            }
        }
        gsl_integration_workspace_free(w);
        free(tab);
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

static void moons_scan(int b, double t, double *p, double *logw)
{
    moons_curve(b, t, p);
    *logw = -log(2 * NF_DS_PI);
}

static const curve_def moons_def = {"moons", 2, 0, NF_DS_PI, 192, MOONS_STD * MOONS_STD, moons_scan, moons_logf};

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
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 41) over the arc angle t in [0, pi] per "
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

static void swiss_scan(int b, double t, double *p, double *logw)
{
    (void)b;
    p[0] = t * cos(t) / 5;
    p[1] = t * sin(t) / 5;
    *logw = -log(3 * NF_DS_PI);
}

static const curve_def swiss_def = {"swissroll", 1,          1.5 * NF_DS_PI, 4.5 * NF_DS_PI, 512,
                                    SWISS_STD * SWISS_STD, swiss_scan, swiss_logf};

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
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 41) over the roll parameter t, breakpoints "
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
    if (a < 30) return log(0.5 * (erfc(a / NF_DS_SQRT2) - erfc(b / NF_DS_SQRT2))); /* no underflow yet */
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

/* The scan replaces the box-times-Gaussian kernel by the Gaussian of the same mean and variance:
 * centre s (c(n)/3 + (h/2, h/2)), variance 0.1^2 + h^2/12. */
static void spiral_scan(int b, double t, double *p, double *logw)
{
    double s = b ? -1 : 1;
    p[0] = s * (-t * cos(t) / 3 + SPIRAL_BOX / 2);
    p[1] = s * (t * sin(t) / 3 + SPIRAL_BOX / 2);
    *logw = log(t / (SPIRAL_N * SPIRAL_N));
}

static const curve_def spiral_def = {"2spirals", 2, 0, SPIRAL_N, 512,
                                     SPIRAL_STD * SPIRAL_STD + SPIRAL_BOX * SPIRAL_BOX / 12, spiral_scan, spiral_logf};

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
    .density_method = "numerical quadrature: GSL QAG (Gauss-Kronrod 41) over the spiral parameter n in [0, 3 pi] "
                      "per spiral, uniform jitter convolved with the noise in closed form (erfc), breakpoints at "
                      "the integrand's peaks, relative error < 1e-9",
    .sample = spiral_sample,
    .log_prob = spiral_log_prob,
};
