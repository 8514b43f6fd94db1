/* datasets/toy2d.c - two-dimensional sets whose density has a closed form.
 *
 * checkerboard  (FFJORD)  x1 ~ U[-4, 4); x2 uniform on the two squares of side 2 above x1 that
 *                         alternate with floor(x1/2); p = 1/32 on the 8 squares, 0 elsewhere.
 * 8gaussians    (FFJORD)  equal mixture of N(c_k, s^2 I), c_k = (4/1.414)(cos k pi/4, sin k pi/4),
 *                         s = 0.5/1.414.
 * circles       (FFJORD, sklearn make_circles(factor=0.5, noise=0.08) * 3)  equal mixture of rings
 *                         of radius 3 and 1.5, angle uniform, noise N(0, 0.24^2 I).
 * rings         (FFJORD)  equal mixture of rings of radius 3, 2.25, 1.5, 0.75, noise N(0, 0.08^2 I).
 * crescent      (NSF)     z1, z2 ~ N(0, 1); x = (z1^2/2 - 1 + z2/e, z1).
 * sinewave      (NSF)     z1, z2 ~ N(0, 1); x = (z1, sin(5 z1) + z2/e).
 *
 * A ring of radius R under N(0, s^2 I) noise has the Rice density: averaging the Gaussian over the
 * angle gives (1/2pi) int exp(k cos t) dt = I0(k) with k = r R / s^2, so
 *     p(x) = exp(-(r - R)^2 / 2s^2) I0s(k) / (2 pi s^2),   r = |x|,  I0s(k) = exp(-k) I0(k)
 * (GSL's scaled Bessel function keeps it finite for any k).
 */
#include <gsl/gsl_sf_bessel.h>
#include <math.h>

#include "datasets/dataset.h"
#include "datasets/ds_internal.h"

/* ---- checkerboard ---------------------------------------------------------------------------- */

/* floor(v) mod 2 in {0, 1}, as Python's % gives it for negative v too. */
static double floor_mod2(double v)
{
    double f = floor(v);
    return f - 2 * floor(f / 2);
}

static int checker_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double x1 = nf_rng_uniform(rng) * 4 - 2;
        double x2 = nf_rng_uniform(rng) - 2.0 * (double)nf_rng_index(rng, 2);
        x2 += floor_mod2(x1);
        x[2 * i] = 2 * x1;
        x[2 * i + 1] = 2 * x2;
    }
    return NF_OK;
}

/* In unit coordinates (s1, s2) = x/2: s1 in [-2, 2) and s2 - (floor(s1) mod 2) in [0,1) u [-2,-1). */
static int checker_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    for (size_t i = 0; i < n; i++) {
        double s1 = x[2 * i] / 2, s2 = x[2 * i + 1] / 2;
        int in = 0;
        if (s1 >= -2 && s1 < 2) {
            double v = s2 - floor_mod2(s1);
            in = (v >= 0 && v < 1) || (v >= -2 && v < -1);
        }
        logp[i] = in ? -log(32.0) : -INFINITY;
    }
    return NF_OK;
}

const nf_dataset_type nf_dataset_checkerboard = {
    .name = "checkerboard",
    .summary = "8 squares of side 2 in a 4x4 chequer on [-4,4]^2, uniform (FFJORD)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: 1/32 on the 8 squares, 0 elsewhere",
    .sample = checker_sample,
    .log_prob = checker_log_prob,
};

/* ---- 8gaussians ------------------------------------------------------------------------------ */

#define G8_SCALE (4.0 / 1.414)
#define G8_STD (0.5 / 1.414)

static int g8_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double a = (double)nf_rng_index(rng, 8) * NF_DS_PI / 4;
        double e0 = nf_rng_normal(rng), e1 = nf_rng_normal(rng);
        x[2 * i] = G8_SCALE * cos(a) + G8_STD * e0;
        x[2 * i + 1] = G8_SCALE * sin(a) + G8_STD * e1;
    }
    return NF_OK;
}

/* log p = log sum_k (1/8) N(x; c_k, s^2 I). */
static int g8_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    for (size_t i = 0; i < n; i++) {
        double acc = -INFINITY;
        for (int k = 0; k < 8; k++) {
            double a = k * NF_DS_PI / 4;
            double lp = nf_ds_lognormal1(x[2 * i], G8_SCALE * cos(a), G8_STD) +
                        nf_ds_lognormal1(x[2 * i + 1], G8_SCALE * sin(a), G8_STD);
            acc = nf_ds_logaddexp(acc, lp);
        }
        logp[i] = acc - log(8.0);
    }
    return NF_OK;
}

const nf_dataset_type nf_dataset_8gaussians = {
    .name = "8gaussians",
    .summary = "8 Gaussians (std 0.354) on a circle of radius 2.83 (FFJORD)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: equal mixture of 8 isotropic Gaussians",
    .sample = g8_sample,
    .log_prob = g8_log_prob,
};

/* ---- rings and circles: equal mixtures of noisy circles ----------------------------------------- */

typedef struct ring_set {
    int k;
    double radius[4];
    double std;
} ring_set;

static const ring_set circles_def = {2, {3.0, 1.5, 0, 0}, 0.24};
static const ring_set rings_def = {4, {3.0, 2.25, 1.5, 0.75}, 0.08};

static void rings_sample_def(const ring_set *r, nf_rng *rng, size_t n, double *x)
{
    for (size_t i = 0; i < n; i++) {
        double R = r->radius[nf_rng_index(rng, (size_t)r->k)];
        double t = 2 * NF_DS_PI * nf_rng_uniform(rng);
        double e0 = nf_rng_normal(rng), e1 = nf_rng_normal(rng);
        x[2 * i] = R * cos(t) + r->std * e0;
        x[2 * i + 1] = R * sin(t) + r->std * e1;
    }
}

/* log p = log (1/K) sum_k exp(-(r - R_k)^2 / 2s^2) I0s(r R_k / s^2) / (2 pi s^2). */
static void rings_log_prob_def(const ring_set *r, size_t n, const double *x, double *logp)
{
    double s2 = r->std * r->std;
    for (size_t i = 0; i < n; i++) {
        double rho = hypot(x[2 * i], x[2 * i + 1]), acc = -INFINITY;
        for (int k = 0; k < r->k; k++) {
            double R = r->radius[k], d = rho - R;
            double lp = -d * d / (2 * s2) + log(gsl_sf_bessel_I0_scaled(rho * R / s2));
            acc = nf_ds_logaddexp(acc, lp);
        }
        logp[i] = acc - log((double)r->k) - log(2 * NF_DS_PI * s2);
    }
}

static int circles_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    rings_sample_def(&circles_def, rng, n, x);
    return NF_OK;
}

static int circles_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    rings_log_prob_def(&circles_def, n, x, logp);
    return NF_OK;
}

static int rings_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    rings_sample_def(&rings_def, rng, n, x);
    return NF_OK;
}

static int rings_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    rings_log_prob_def(&rings_def, n, x, logp);
    return NF_OK;
}

const nf_dataset_type nf_dataset_circles = {
    .name = "circles",
    .summary = "2 noisy circles of radius 3 and 1.5, noise std 0.24 (FFJORD, sklearn make_circles)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: ring convolved with Gaussian noise integrated over the angle in closed form "
                      "(Rice density, Bessel I0)",
    .sample = circles_sample,
    .log_prob = circles_log_prob,
};

const nf_dataset_type nf_dataset_rings = {
    .name = "rings",
    .summary = "4 noisy rings of radius 3, 2.25, 1.5, 0.75, noise std 0.08 (FFJORD)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: ring convolved with Gaussian noise integrated over the angle in closed form "
                      "(Rice density, Bessel I0)",
    .sample = rings_sample,
    .log_prob = rings_log_prob,
};

/* ---- crescent and sinewave: a standard normal and a conditional Gaussian of std 1/e ------------- */

#define COND_STD 0.36787944117144233 /* exp(-1) */

static int crescent_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double z1 = nf_rng_normal(rng), z2 = nf_rng_normal(rng);
        x[2 * i] = 0.5 * z1 * z1 - 1 + COND_STD * z2;
        x[2 * i + 1] = z1;
    }
    return NF_OK;
}

/* log p = log N(x2; 0, 1) + log N(x1; x2^2/2 - 1, e^-2). */
static int crescent_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    for (size_t i = 0; i < n; i++) {
        double a = x[2 * i], b = x[2 * i + 1];
        logp[i] = nf_ds_lognormal1(b, 0, 1) + nf_ds_lognormal1(a, 0.5 * b * b - 1, COND_STD);
    }
    return NF_OK;
}

static int sinewave_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)ds;
    (void)logp;
    for (size_t i = 0; i < n; i++) {
        double z1 = nf_rng_normal(rng), z2 = nf_rng_normal(rng);
        x[2 * i] = z1;
        x[2 * i + 1] = sin(5 * z1) + COND_STD * z2;
    }
    return NF_OK;
}

/* log p = log N(x1; 0, 1) + log N(x2; sin(5 x1), e^-2). */
static int sinewave_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    (void)ds;
    for (size_t i = 0; i < n; i++) {
        double a = x[2 * i], b = x[2 * i + 1];
        logp[i] = nf_ds_lognormal1(a, 0, 1) + nf_ds_lognormal1(b, sin(5 * a), COND_STD);
    }
    return NF_OK;
}

const nf_dataset_type nf_dataset_crescent = {
    .name = "crescent",
    .summary = "x2 ~ N(0,1), x1 | x2 ~ N(x2^2/2 - 1, e^-2) (neural spline flows)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: N(x2; 0, 1) N(x1; x2^2/2 - 1, exp(-2))",
    .sample = crescent_sample,
    .log_prob = crescent_log_prob,
};

const nf_dataset_type nf_dataset_sinewave = {
    .name = "sinewave",
    .summary = "x1 ~ N(0,1), x2 | x1 ~ N(sin(5 x1), e^-2) (neural spline flows)",
    .dim = 2,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: N(x1; 0, 1) N(x2; sin(5 x1), exp(-2))",
    .sample = sinewave_sample,
    .log_prob = sinewave_log_prob,
};
