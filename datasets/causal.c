/* datasets/causal.c - causal data sets with exact interventional densities, their file, and the
 * view of units as rows for the trainer.
 *
 * causal-poly (shift b).  Half the units are control with X ~ N(b, 1), half treated with X ~ N(0, 1),
 * so the covariates' marginal is p_X = 0.5 N(b, 1) + 0.5 N(0, 1) and
 *     P(A = 1 | x) = N(x; 0, 1) / (N(x; 0, 1) + N(x; b, 1)) = 1 / (1 + exp(b x - b^2 / 2)).
 * Y[0] = 1.5 + 2.18 X + e and Y[1] = 2 - 1.82 X + X^2 + e, e ~ N(0, 1).  The interventional
 * density is p(Y[a] = y) = E_X N(y; f_a(X), 1):
 *     Y[0]: 0.5 N(1.5 + 2.18 b, 2.18^2 + 1) + 0.5 N(1.5, 2.18^2 + 1)   (closed form),
 *     Y[1]: sum over the two components c of 0.5 int N(x; m_c, 1) N(y; 2 - 1.82 x + x^2, 1) dx
 *           (adaptive Gauss-Kronrod, GSL qag, on m_c +- 12).
 * Means: E Y[0] = 1.5 + 2.18 E X, E Y[1] = 2 - 1.82 E X + E X^2, with E X = b / 2 and
 * E X^2 = 1 + b^2 / 2.
 *
 * causal-moons (angle theta, default pi/4).  Label A ~ Bernoulli(1/2), t ~ U(0, pi), moon centre
 * mu_0(t) = (cos t, sin t), mu_1(t) = (1 - cos t, 1/2 - sin t), X = mu_A(t) + s_m eps (s_m = 0.1),
 * Y[a] = rot(theta_a) X + s_y e (s_y = 0.1), theta_0 = -theta, theta_1 = +theta.  Then
 * Y[a] | (label l, t) ~ N(rot_a mu_l(t), (s_m^2 + s_y^2) I) (a rotation keeps an isotropic normal), so
 *     p(Y[a] = y) = sum_l 0.5 (1/pi) int_0^pi N2(y; rot_a mu_l(t), s^2 I) dt,   s^2 = s_m^2 + s_y^2,
 * and P(A = 1 | x) = p(x | 1) / (p(x | 0) + p(x | 1)), p(x | l) = (1/pi) int N2(x; mu_l(t), s_m^2 I) dt,
 * both by the same quadrature.
 */
#include "datasets/causal.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "core/rng.h"
#include "datasets/ds_internal.h"

enum { FAM_POLY, FAM_MOONS };
static const double MOON_SM = 0.1, MOON_SY = 0.1;
enum { QUAD_LIMIT = 200 };

static int family_parse(const char *family, int *fam, int *dx, int *dy)
{
    if (family && !strcmp(family, "causal-poly")) {
        *fam = FAM_POLY, *dx = 1, *dy = 1;
        return NF_OK;
    }
    if (family && !strcmp(family, "causal-moons")) {
        *fam = FAM_MOONS, *dx = 2, *dy = 2;
        return NF_OK;
    }
    return nf_error(NF_EINVAL, "unknown causal family '%s' (expected causal-poly or causal-moons)",
                    family ? family : "");
}

static double moon_angle(double shift) { return shift != 0 ? shift : NF_DS_PI / 4; }

static void moon_centre(int label, double t, double *m)
{
    m[0] = label ? 1 - cos(t) : cos(t);
    m[1] = label ? 0.5 - sin(t) : sin(t);
}

/* ---- quadrature ---------------------------------------------------------------------------- */

typedef struct quad_arg {
    int fam, arm, label;
    double y, y2[2], m, angle, s;
} quad_arg;

/* causal-poly Y[1]: N(x; m, 1) N(y; 2 - 1.82 x + x^2, 1) */
static double poly1_integrand(double x, void *p)
{
    const quad_arg *q = p;
    double f = 2 - 1.82 * x + x * x;
    return exp(nf_ds_lognormal1(x, q->m, 1) + nf_ds_lognormal1(q->y, f, 1));
}

/* causal-moons: N2(y; rot mu_l(t), s^2 I) / pi */
static double moons_integrand(double t, void *p)
{
    const quad_arg *q = p;
    double mu[2], c = cos(q->angle), sn = sin(q->angle);
    moon_centre(q->label, t, mu);
    double r0 = c * mu[0] - sn * mu[1], r1 = sn * mu[0] + c * mu[1];
    return exp(nf_ds_lognormal1(q->y2[0], r0, q->s) + nf_ds_lognormal1(q->y2[1], r1, q->s)) / NF_DS_PI;
}

static int integrate(gsl_integration_workspace *w, double (*f)(double, void *), quad_arg *q, double lo, double hi,
                     double *out)
{
    gsl_function F = {.function = f, .params = q};
    double err;
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    int rc = gsl_integration_qag(&F, lo, hi, 0, 1e-10, QUAD_LIMIT, GSL_INTEG_GAUSS41, w, out, &err);
    gsl_set_error_handler(old);
    /* roundoff-limited results far in the tails are still accurate to the absolute level reached */
    if (rc != GSL_SUCCESS && rc != GSL_EROUND && rc != GSL_EMAXITER)
        return nf_error(NF_EINVAL, "quadrature of an interventional density failed (GSL code %d)", rc);
    return NF_OK;
}

int nf_causal_truth_logp(const char *family, double shift, int arm, const double *y, size_t n, double *out)
{
    int fam, dx, dy;
    NF_TRY(family_parse(family, &fam, &dx, &dy));
    if (arm != 0 && arm != 1) return nf_error(NF_EINVAL, "arm %d (expected 0 or 1)", arm);
    if (fam == FAM_POLY && arm == 0) {
        double s = sqrt(2.18 * 2.18 + 1);
        for (size_t i = 0; i < n; i++)
            out[i] = nf_ds_logaddexp(nf_ds_lognormal1(y[i], 1.5 + 2.18 * shift, s), nf_ds_lognormal1(y[i], 1.5, s)) -
                     log(2.0);
        return NF_OK;
    }
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(QUAD_LIMIT);
    if (!w) return nf_error(NF_ENOMEM, "out of memory for quadrature");
    int rc = NF_OK;
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        double total = 0;
        for (int c = 0; rc == NF_OK && c < 2; c++) {
            quad_arg q = {.fam = fam, .arm = arm, .label = c};
            double v = 0;
            if (fam == FAM_POLY) {
                q.y = y[i];
                q.m = c ? 0 : shift;
                rc = integrate(w, poly1_integrand, &q, q.m - 12, q.m + 12, &v);
            } else {
                q.y2[0] = y[2 * i], q.y2[1] = y[2 * i + 1];
                q.angle = arm ? moon_angle(shift) : -moon_angle(shift);
                q.s = sqrt(MOON_SM * MOON_SM + MOON_SY * MOON_SY);
                rc = integrate(w, moons_integrand, &q, 0, NF_DS_PI, &v);
            }
            total += 0.5 * v;
        }
        out[i] = log(total);
    }
    gsl_integration_workspace_free(w);
    return rc;
}

int nf_causal_truth_propensity(const char *family, double shift, const double *x, size_t n, double *out)
{
    int fam, dx, dy;
    NF_TRY(family_parse(family, &fam, &dx, &dy));
    if (fam == FAM_POLY) {
        for (size_t i = 0; i < n; i++) out[i] = 1 / (1 + exp(shift * x[i] - shift * shift / 2));
        return NF_OK;
    }
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(QUAD_LIMIT);
    if (!w) return nf_error(NF_ENOMEM, "out of memory for quadrature");
    int rc = NF_OK;
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        double p[2] = {0, 0};
        for (int l = 0; rc == NF_OK && l < 2; l++) {
            /* p(x | l): the moons integrand with no rotation and the covariates' own noise */
            quad_arg q = {.fam = fam, .label = l, .angle = 0, .s = MOON_SM};
            q.y2[0] = x[2 * i], q.y2[1] = x[2 * i + 1];
            rc = integrate(w, moons_integrand, &q, 0, NF_DS_PI, &p[l]);
        }
        out[i] = p[0] + p[1] > 0 ? p[1] / (p[0] + p[1]) : 0.5;
    }
    gsl_integration_workspace_free(w);
    return rc;
}

int nf_causal_truth_mean(const char *family, double shift, int arm, double *mean)
{
    int fam, dx, dy;
    NF_TRY(family_parse(family, &fam, &dx, &dy));
    if (fam != FAM_POLY) return nf_error(NF_EINVAL, "%s has a 2-D outcome; its mean is not tabulated", family);
    double ex = shift / 2, ex2 = 1 + shift * shift / 2;
    *mean = arm ? 2 - 1.82 * ex + ex2 : 1.5 + 2.18 * ex;
    return NF_OK;
}

/* ---- data sets ------------------------------------------------------------------------------- */

void nf_causal_data_free(nf_causal_data *d)
{
    if (!d) return;
    free(d->x), free(d->a), free(d->y), free(d->y0), free(d->y1), free(d->logp0), free(d->logp1);
    free(d->propensity);
    memset(d, 0, sizeof *d);
}

static int alloc_data(nf_causal_data *d, size_t n, int dx, int dy, int truths)
{
    d->n = n, d->dx = dx, d->dy = dy;
    d->x = malloc(n * dx * sizeof(double));
    d->a = malloc(n * sizeof(double));
    d->y = malloc(n * dy * sizeof(double));
    if (truths) {
        d->y0 = malloc(n * dy * sizeof(double));
        d->y1 = malloc(n * dy * sizeof(double));
        d->logp0 = malloc(n * sizeof(double));
        d->logp1 = malloc(n * sizeof(double));
        d->propensity = malloc(n * sizeof(double));
    }
    if (!d->x || !d->a || !d->y || (truths && (!d->y0 || !d->y1 || !d->logp0 || !d->logp1 || !d->propensity))) {
        nf_causal_data_free(d);
        return nf_error(NF_ENOMEM, "out of memory for %zu units", n);
    }
    return NF_OK;
}

int nf_causal_make(nf_causal_data *d, const char *family, size_t n, double shift, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    int fam, dx, dy;
    NF_TRY(family_parse(family, &fam, &dx, &dy));
    if (n < 2 || n > 100000000) return nf_error(NF_EINVAL, "%zu units (expected 2 to 1e8)", n);
    if (!isfinite(shift) || fabs(shift) > 100) return nf_error(NF_EINVAL, "shift %g (expected |shift| <= 100)", shift);
    NF_TRY(alloc_data(d, n, dx, dy, 1));
    nf_rng *r = nf_rng_alloc(seed, 0xca05a1);
    if (!r) {
        nf_causal_data_free(d);
        return nf_error(NF_ENOMEM, "out of memory");
    }
    snprintf(d->family, sizeof d->family, "%s", family);
    d->shift = shift;
    for (size_t i = 0; i < n; i++) {
        if (fam == FAM_POLY) {
            int treated = i >= n / 2; /* half each arm, the control half first */
            double x = (treated ? 0 : shift) + nf_rng_normal(r);
            d->x[i] = x;
            d->a[i] = treated;
            d->y0[i] = 1.5 + 2.18 * x + nf_rng_normal(r);
            d->y1[i] = 2 - 1.82 * x + x * x + nf_rng_normal(r);
            d->y[i] = treated ? d->y1[i] : d->y0[i];
        } else {
            int label = nf_rng_uniform(r) < 0.5;
            double t = NF_DS_PI * nf_rng_uniform(r), mu[2];
            moon_centre(label, t, mu);
            double x0 = mu[0] + MOON_SM * nf_rng_normal(r), x1 = mu[1] + MOON_SM * nf_rng_normal(r);
            d->x[2 * i] = x0, d->x[2 * i + 1] = x1;
            d->a[i] = label;
            for (int arm = 0; arm < 2; arm++) {
                double th = arm ? moon_angle(shift) : -moon_angle(shift), c = cos(th), s = sin(th);
                double *yo = arm ? d->y1 : d->y0;
                yo[2 * i] = c * x0 - s * x1 + MOON_SY * nf_rng_normal(r);
                yo[2 * i + 1] = s * x0 + c * x1 + MOON_SY * nf_rng_normal(r);
            }
            memcpy(d->y + 2 * i, (label ? d->y1 : d->y0) + 2 * i, 2 * sizeof(double));
        }
    }
    nf_rng_free(r);
    int rc = nf_causal_truth_logp(family, shift, 0, d->y0, n, d->logp0);
    if (rc == NF_OK) rc = nf_causal_truth_logp(family, shift, 1, d->y1, n, d->logp1);
    if (rc == NF_OK) rc = nf_causal_truth_propensity(family, shift, d->x, n, d->propensity);
    if (rc != NF_OK) nf_causal_data_free(d);
    return rc;
}

int nf_causal_validate_units(const nf_causal_data *d, size_t first, const char *what)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->a[i] != 0 && d->a[i] != 1)
            return nf_error(NF_EDATA, "%s: treatment of unit %zu is %g (expected 0 or 1)", what, first + i, d->a[i]);
        for (int j = 0; j < d->dx; j++)
            if (!isfinite(d->x[i * d->dx + j]))
                return nf_error(NF_EDATA, "%s: covariate %d of unit %zu is %g (expected a finite number)", what, j,
                                first + i, d->x[i * d->dx + j]);
        for (int j = 0; j < d->dy; j++)
            if (!isfinite(d->y[i * d->dy + j]))
                return nf_error(NF_EDATA, "%s: outcome %d of unit %zu is %g (expected a finite number)", what, j,
                                first + i, d->y[i * d->dy + j]);
    }
    return NF_OK;
}

int nf_causal_check_arms(size_t n, size_t treated, const char *what)
{
    if (n < 2) return nf_error(NF_EDATA, "%s: %zu units (expected at least 2)", what, n);
    if (treated == 0 || treated == n)
        return nf_error(NF_EDATA, "%s: no %s units among %zu (expected both arms)", what, treated ? "control" : "treated",
                        n);
    return NF_OK;
}

int nf_causal_validate(const nf_causal_data *d, const char *what)
{
    if (d->n < 2) return nf_causal_check_arms(d->n, 0, what);
    NF_TRY(nf_causal_validate_units(d, 0, what));
    size_t n1 = 0;
    for (size_t i = 0; i < d->n; i++) n1 += d->a[i] == 1;
    return nf_causal_check_arms(d->n, n1, what);
}

int nf_causal_save(const nf_causal_data *d, const char *path)
{
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, NF_CAUSAL_FORMAT, NF_CAUSAL_FORMAT_VERSION));
    int rc = nf_causal_write(f, d);
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

int nf_causal_write(nf_h5 *f, const nf_causal_data *d)
{
    int rc = nf_h5_write_double(f, "/x", d->x, d->n, (size_t)d->dx);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/a", d->a, d->n, 0);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/y", d->y, d->n, (size_t)d->dy);
    const struct {
        const char *name;
        const double *v;
        int w;
    } opt[] = {{"/y0", d->y0, d->dy},         {"/y1", d->y1, d->dy},          {"/logp0_true", d->logp0, 0},
               {"/logp1_true", d->logp1, 0}, {"/propensity", d->propensity, 0}};
    for (size_t k = 0; rc == NF_OK && k < sizeof opt / sizeof opt[0]; k++)
        if (opt[k].v) rc = nf_h5_write_double(f, opt[k].name, opt[k].v, d->n, (size_t)opt[k].w);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "family", d->family);
    if (rc == NF_OK) rc = nf_h5_attr_set_double(f, "/", "shift", d->shift);
    return rc;
}

/* rows idx[0..m) of a (n, w) array, or NULL for NULL */
static double *gather_rows(const double *v, size_t w, const size_t *idx, size_t m, int *oom)
{
    if (!v) return NULL;
    double *out = malloc((m ? m : 1) * w * sizeof *out);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    for (size_t i = 0; i < m; i++) memcpy(out + i * w, v + idx[i] * w, w * sizeof *out);
    return out;
}

int nf_causal_subset(nf_causal_data *out, const nf_causal_data *d, const size_t *idx, size_t m)
{
    memset(out, 0, sizeof *out);
    int oom = 0;
    const size_t dx = (size_t)d->dx, dy = (size_t)d->dy;
    *out = (nf_causal_data){.n = m, .dx = d->dx, .dy = d->dy, .shift = d->shift};
    memcpy(out->family, d->family, sizeof out->family);
    out->x = gather_rows(d->x, dx, idx, m, &oom);
    out->a = gather_rows(d->a, 1, idx, m, &oom);
    out->y = gather_rows(d->y, dy, idx, m, &oom);
    out->y0 = gather_rows(d->y0, dy, idx, m, &oom);
    out->y1 = gather_rows(d->y1, dy, idx, m, &oom);
    out->logp0 = gather_rows(d->logp0, 1, idx, m, &oom);
    out->logp1 = gather_rows(d->logp1, 1, idx, m, &oom);
    out->propensity = gather_rows(d->propensity, 1, idx, m, &oom);
    if (!oom) return NF_OK;
    nf_causal_data_free(out);
    return nf_error(NF_ENOMEM, "out of memory for %zu units", m);
}

int nf_causal_missing(const char *path, const char *ds, const char *what)
{
    return nf_error(NF_EDATA, "%s: no dataset %s (expected the %s; nf causal fit --covariates, --treatment and "
                    "--outcome name other datasets, and nf causal import or nf data make causal-poly write such a "
                    "file)", path, ds, what);
}

/* Read `ds` as (n, w) doubles; w_out 0: any width (1-D reads as n x 1).  what: the role of ds in
 * the message when it is missing ("treatment, 0/1"). */
static int read_block(nf_h5 *f, const char *path, const char *ds, const char *what, size_t n_expect, size_t w_expect,
                      double **v, size_t *n, size_t *w)
{
    if (!nf_h5_exists(f, ds)) return nf_causal_missing(path, ds, what);
    NF_TRY(nf_h5_read_double(f, ds, v, n, w));
    if (*w == 0) *w = 1;
    if ((n_expect && *n != n_expect) || (w_expect && *w != w_expect)) {
        free(*v);
        *v = NULL;
        return nf_error(NF_EDATA, "%s: %s is %zu x %zu (expected %zu rows%s)", path, ds, *n, *w, n_expect,
                        w_expect == 1 ? ", one column" : "");
    }
    return NF_OK;
}

int nf_causal_load(nf_causal_data *d, const char *path, const char *xds, const char *ads, const char *yds)
{
    memset(d, 0, sizeof *d);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, NF_CAUSAL_FORMAT_VERSION));
    size_t n, w, n2, w2;
    int rc = read_block(f, path, xds ? xds : "/x", "covariates, one row a unit", 0, 0, &d->x, &n, &w);
    if (rc == NF_OK) {
        d->n = n, d->dx = (int)w;
        rc = read_block(f, path, ads ? ads : "/a", "treatment, 0/1", n, 1, &d->a, &n2, &w2);
    }
    if (rc == NF_OK) rc = read_block(f, path, yds ? yds : "/y", "outcome", n, 0, &d->y, &n2, &w2);
    if (rc == NF_OK) d->dy = (int)w2;
    const struct {
        const char *name;
        double **v;
        size_t w;
    } opt[] = {{"/y0", &d->y0, (size_t)d->dy},
               {"/y1", &d->y1, (size_t)d->dy},
               {"/logp0_true", &d->logp0, 1},
               {"/logp1_true", &d->logp1, 1},
               {"/propensity", &d->propensity, 1}};
    for (size_t k = 0; rc == NF_OK && k < sizeof opt / sizeof opt[0]; k++)
        if (nf_h5_exists(f, opt[k].name))
            rc = read_block(f, path, opt[k].name, opt[k].name, n, opt[k].w, opt[k].v, &n2, &w2);
    if (rc == NF_OK && nf_h5_attr_exists(f, "/", "family"))
        rc = nf_h5_attr_get_string(f, "/", "family", d->family, sizeof d->family);
    if (rc == NF_OK && nf_h5_attr_exists(f, "/", "shift")) rc = nf_h5_attr_get_double(f, "/", "shift", &d->shift);
    nf_h5_close(f);
    if (rc == NF_OK) rc = nf_causal_validate(d, path);
    if (rc != NF_OK) nf_causal_data_free(d);
    return rc;
}

int nf_causal_rows(const nf_causal_data *d, nf_real **y, nf_real **c)
{
    size_t n = d->n, dx = (size_t)d->dx, dy = (size_t)d->dy;
    *y = malloc((n ? n : 1) * dy * sizeof **y);
    *c = malloc((n ? n : 1) * (dx + 1) * sizeof **c);
    if (!*y || !*c) {
        free(*y), free(*c);
        *y = *c = NULL;
        return nf_error(NF_ENOMEM, "out of memory for %zu units", n);
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < dy; j++) (*y)[i * dy + j] = (nf_real)d->y[i * dy + j];
        for (size_t j = 0; j < dx; j++) (*c)[i * (dx + 1) + j] = (nf_real)d->x[i * dx + j];
        (*c)[i * (dx + 1) + dx] = (nf_real)d->a[i];
    }
    return NF_OK;
}

int nf_causal_source(nf_source **s, const nf_causal_data *d)
{
    *s = NULL;
    nf_real *y, *c;
    NF_TRY(nf_causal_rows(d, &y, &c));
    size_t *perm = malloc(d->n * sizeof *perm);
    int rc = perm ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %zu units", d->n);
    for (size_t i = 0; rc == NF_OK && i < d->n; i++) perm[i] = i;
    if (rc == NF_OK) rc = nf_source_rows_wrap(s, y, c, d->n, d->dy, d->dx + 1);
    /* reordering a wrapped source gives it copies of its own (datasets/source.h): the identity
     * order makes the source own its rows, so the temporaries can go */
    if (rc == NF_OK) rc = (*s)->type->reorder(*s, perm);
    if (rc != NF_OK) {
        nf_source_free(*s);
        *s = NULL;
    }
    free(y), free(c), free(perm);
    return rc;
}
