/* datasets/tpp_kinds.c - the six point processes of tpp_process.h: options, per-event likelihood
 * terms (closed-form compensators), the intensity by direct summation, and simulation.
 *
 * Notation: t0 the window start, t_{-1} := t0, tau_i = t_i - t_{i-1}, Lambda(s, t) = int_s^t lambda*.
 * terms() writes ll[i] = log lambda*(t_i) - Lambda(t_{i-1}, t_i) and comp[i] = Lambda(t_{i-1}, t_i),
 * comp[n] = Lambda(t_{n-1}, t1); sequences reach it checked (strictly increasing, inside the window).
 */
#include "datasets/tpp_process.h"

#include <float.h>
#include <gsl/gsl_sf_erf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846
#define HALF_LOG_2PI 0.91893853320467274178
#define LOG2 0.69314718055994530942
#define SQRT2 1.41421356237309504880

static void free_state(nf_tpp_process *p)
{
    free(p->state);
    p->state = NULL;
}

static int keep_state(nf_tpp_process *p, const void *s, size_t size)
{
    void *st = nf_calloc(1, size, "point-process parameters");
    if (!st) return NF_ENOMEM;
    memcpy(st, s, size);
    p->state = st;
    return NF_OK;
}

/* E ~ Exp(1) */
static double draw_exp(nf_rng *rng) { return -log(nf_rng_uniform(rng)); }

/* log(e^y - 1) for y > 0, without overflow for large y. */
static double log_expm1(double y) { return y > 1 ? y + log1p(-exp(-y)) : log(expm1(y)); }

/* softplus(y) = log(1 + e^y), without overflow. */
static double softplus(double y) { return y > 0 ? y + log1p(exp(-y)) : log1p(exp(y)); }

/* The time t_{-1} of the last event before s among t[0..n-1] (t0 if none), and their count. */
static double last_before(size_t n, const double *t, double t0, double s, size_t *count)
{
    size_t k = 0;
    while (k < n && t[k] < s) k++;
    if (count) *count = k;
    return k ? t[k - 1] : t0;
}

/* ---- poisson: lambda = rate ------------------------------------------------------------------- */

typedef struct {
    double rate;
} poisson_state;

static int poisson_create(nf_tpp_process *p, nf_opts *o)
{
    poisson_state s;
    NF_TRY(nf_opts_double(o, "rate", 1.0, 1e-12, 1e12, &s.rate));
    return keep_state(p, &s, sizeof s);
}

/* ll_i = log rate - rate tau_i,  comp_i = rate tau_i,  comp_n = rate (t1 - t_{n-1}) */
static void poisson_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                          double *comp)
{
    const poisson_state *s = p->state;
    double prev = t0, lr = log(s->rate);
    for (size_t i = 0; i < n; i++) {
        double L = s->rate * (t[i] - prev);
        if (ll) ll[i] = lr - L;
        if (comp) comp[i] = L;
        prev = t[i];
    }
    if (comp) comp[n] = s->rate * (t1 - prev);
}

static double poisson_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    (void)n, (void)t, (void)t0, (void)s;
    return ((const poisson_state *)p->state)->rate;
}

/* tau ~ Exp(rate) */
static int poisson_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                            size_t *n, size_t *cap)
{
    const poisson_state *s = p->state;
    double now = t0;
    for (size_t k = 0; !max || k < max; k++) {
        now += draw_exp(rng) / s->rate;
        if (now > t1) break;
        NF_TRY(nf_tpp_append(t, n, cap, now));
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_poisson = {
    .name = "poisson",
    .summary = "homogeneous Poisson process, lambda = rate",
    .options_help = "rate=1",
    .defaults = "rate=1",
    .create = poisson_create,
    .destroy = free_state,
    .terms = poisson_terms,
    .intensity = poisson_intensity,
    .simulate = poisson_simulate,
};

/* ---- hawkes: exponential kernels ----------------------------------------------------------------- */

typedef struct {
    double mu;
    int J;
    double alpha[NF_TPP_MAX_KERNELS], beta[NF_TPP_MAX_KERNELS];
} hawkes_state;

/* "0.4:0.4" into v[0..*k-1], each in [lo, hi]. */
static int parse_list(nf_opts *o, const char *key, const char *def, double lo, double hi, double *v, int *k)
{
    const char *text;
    NF_TRY(nf_opts_string(o, key, def, &text));
    const char *c = text;
    *k = 0;
    for (;;) {
        char *end;
        double x = strtod(c, &end);
        if (end == c || (*end && *end != ':') || !isfinite(x) || x < lo || x > hi || *k == NF_TPP_MAX_KERNELS)
            return nf_error(NF_EINVAL,
                            "%s: option %s=%s: expected 1 to %d numbers from %g to %g separated by ':'",
                            o->owner, key, text, NF_TPP_MAX_KERNELS, lo, hi);
        v[(*k)++] = x;
        if (!*end) return NF_OK;
        c = end + 1;
    }
}

static int hawkes_create(nf_tpp_process *p, nf_opts *o)
{
    hawkes_state s;
    int ka, kb;
    NF_TRY(nf_opts_double(o, "mu", 0.2, 1e-12, 1e12, &s.mu));
    NF_TRY(parse_list(o, "alpha", "0.8", 0, 1, s.alpha, &ka));
    NF_TRY(parse_list(o, "beta", "1", 1e-12, 1e12, s.beta, &kb));
    if (ka != kb)
        return nf_error(NF_EINVAL, "%s: alpha has %d entries and beta %d: expected one beta per alpha", o->owner,
                        ka, kb);
    double sum = 0;
    for (int j = 0; j < ka; j++) sum += s.alpha[j];
    if (sum >= 1)
        return nf_error(NF_EINVAL, "%s: the alphas sum to %g: expected a sum below 1 (a stationary process)",
                        o->owner, sum);
    s.J = ka;
    return keep_state(p, &s, sizeof s);
}

/* With B_j(s) = sum_{t_k <= s} exp(-beta_j (s - t_k)) the kernel state just after s:
 *   lambda*(t_i)          = mu + sum_j alpha_j beta_j B_j(t_{i-1}) exp(-beta_j tau_i)
 *   Lambda(t_{i-1}, t_i)  = mu tau_i + sum_j alpha_j B_j(t_{i-1}) (1 - exp(-beta_j tau_i))
 *   B_j(t_i)              = B_j(t_{i-1}) exp(-beta_j tau_i) + 1,     B_j(t0) = 0
 * O(n J) in all; 1 - e^{-x} as -expm1(-x) for short intervals. */
static void hawkes_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                         double *comp)
{
    const hawkes_state *s = p->state;
    double B[NF_TPP_MAX_KERNELS] = {0}, prev = t0;
    for (size_t i = 0; i <= n; i++) {
        double tau = (i < n ? t[i] : t1) - prev, L = s->mu * tau, lam = s->mu;
        for (int j = 0; j < s->J; j++) {
            L += s->alpha[j] * B[j] * -expm1(-s->beta[j] * tau);
            B[j] *= exp(-s->beta[j] * tau);
            lam += s->alpha[j] * s->beta[j] * B[j];
        }
        if (comp) comp[i] = L;
        if (i == n) break;
        if (ll) ll[i] = log(lam) - L;
        for (int j = 0; j < s->J; j++) B[j] += 1;
        prev = t[i];
    }
}

/* lambda*(s) = mu + sum_{t_k < s} sum_j alpha_j beta_j exp(-beta_j (s - t_k)) */
static double hawkes_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    (void)t0;
    const hawkes_state *st = p->state;
    double lam = st->mu;
    for (size_t k = 0; k < n && t[k] < s; k++)
        for (int j = 0; j < st->J; j++) lam += st->alpha[j] * st->beta[j] * exp(-st->beta[j] * (s - t[k]));
    return lam;
}

/* Ogata thinning.  Between events lambda* only decays (alpha_j beta_j >= 0), so M = lambda*(s+) at
 * the current time s bounds it until the next event: propose s + w, w ~ Exp(M), accept with
 * probability lambda*(s + w) / M; either way the proposal becomes the current time, and the next
 * bound is the (decayed or jumped) intensity there. */
static int hawkes_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                           size_t *n, size_t *cap)
{
    const hawkes_state *s = p->state;
    double B[NF_TPP_MAX_KERNELS] = {0}, now = t0;
    size_t k = 0;
    while (!max || k < max) {
        double M = s->mu;
        for (int j = 0; j < s->J; j++) M += s->alpha[j] * s->beta[j] * B[j];
        double w = draw_exp(rng) / M, lam = s->mu;
        now += w;
        if (now > t1) break;
        for (int j = 0; j < s->J; j++) {
            B[j] *= exp(-s->beta[j] * w);
            lam += s->alpha[j] * s->beta[j] * B[j];
        }
        if (nf_rng_uniform(rng) * M <= lam) {
            NF_TRY(nf_tpp_append(t, n, cap, now));
            for (int j = 0; j < s->J; j++) B[j] += 1;
            k++;
        }
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_hawkes = {
    .name = "hawkes",
    .summary = "Hawkes process, lambda = mu + sum_j sum_{t_i < t} alpha_j beta_j exp(-beta_j (t - t_i))",
    .options_help = "mu=0.2, alpha=0.8, beta=1 (lists a1:a2:..., b1:b2:...)",
    .defaults = "mu=0.2,alpha=0.8,beta=1",
    .create = hawkes_create,
    .destroy = free_state,
    .terms = hawkes_terms,
    .intensity = hawkes_intensity,
    .simulate = hawkes_simulate,
};

/* ---- self-correcting: lambda = exp(mu (t - t0) - alpha N(t)) ------------------------------------- */

typedef struct {
    double mu, alpha;
} sc_state;

static int sc_create(nf_tpp_process *p, nf_opts *o)
{
    sc_state s;
    NF_TRY(nf_opts_double(o, "mu", 1.0, 1e-12, 1e6, &s.mu));
    NF_TRY(nf_opts_double(o, "alpha", 1.0, 0, 1e6, &s.alpha));
    return keep_state(p, &s, sizeof s);
}

/* With x_i = mu (t_{i-1} - t0) - alpha i (the log-intensity just after event i - 1, i events so far):
 *   log lambda*(t_i)     = mu (t_i - t0) - alpha i
 *   Lambda(t_{i-1}, t_i) = e^{x_i} (e^{mu tau_i} - 1) / mu = exp(x_i + log(expm1(mu tau_i))) / mu
 * and the open interval likewise with n events. */
static void sc_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                     double *comp)
{
    const sc_state *s = p->state;
    double prev = t0;
    for (size_t i = 0; i <= n; i++) {
        double next = i < n ? t[i] : t1, tau = next - prev, x = s->mu * (prev - t0) - s->alpha * (double)i;
        double L = tau > 0 ? exp(x + log_expm1(s->mu * tau)) / s->mu : 0;
        if (comp) comp[i] = L;
        if (i == n) break;
        if (ll) ll[i] = s->mu * (next - t0) - s->alpha * (double)i - L;
        prev = next;
    }
}

/* lambda*(s) = exp(mu (s - t0) - alpha #{t_k < s}) */
static double sc_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    const sc_state *st = p->state;
    size_t k;
    last_before(n, t, t0, s, &k);
    return exp(st->mu * (s - t0) - st->alpha * (double)k);
}

/* Exact inversion: Lambda(s, s + tau) = e^x (e^{mu tau} - 1) / mu = E ~ Exp(1) gives
 *   mu tau = log(1 + E mu e^{-x}) = softplus(log(E mu) - x). */
static int sc_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                       size_t *n, size_t *cap)
{
    const sc_state *s = p->state;
    double now = t0;
    for (size_t k = 0; !max || k < max; k++) {
        double x = s->mu * (now - t0) - s->alpha * (double)k;
        now += softplus(log(draw_exp(rng) * s->mu) - x) / s->mu;
        if (now > t1) break;
        NF_TRY(nf_tpp_append(t, n, cap, now));
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_self_correcting = {
    .name = "self-correcting",
    .summary = "self-correcting process, lambda = exp(mu (t - t_start) - alpha N(t))",
    .options_help = "mu=1, alpha=1",
    .defaults = "mu=1,alpha=1",
    .create = sc_create,
    .destroy = free_state,
    .terms = sc_terms,
    .intensity = sc_intensity,
    .simulate = sc_simulate,
};

/* ---- the log-normal interval law (renewal, nonstationary-renewal) ------------------------------- */

typedef struct {
    double mean, sd, m, s;   /* log tau ~ N(m, s^2) */
} lognormal;

/* s^2 = log(1 + sd^2 / mean^2), m = log(mean) - s^2 / 2: E tau = mean, sd tau = sd. */
static int lognormal_read(nf_opts *o, double def_sd, lognormal *ln)
{
    NF_TRY(nf_opts_double(o, "mean", 1.0, 1e-12, 1e12, &ln->mean));
    NF_TRY(nf_opts_double(o, "sd", def_sd, 1e-6, 1e12, &ln->sd));
    double r = ln->sd / ln->mean;
    ln->s = sqrt(log1p(r * r));
    ln->m = log(ln->mean) - 0.5 * ln->s * ln->s;
    return NF_OK;
}

/* log f(tau) = -log tau - log s - log sqrt(2 pi) - z^2 / 2,  z = (log tau - m) / s */
static double lognormal_log_pdf(const lognormal *ln, double tau)
{
    double z = (log(tau) - ln->m) / ln->s;
    return -log(tau) - log(ln->s) - HALF_LOG_2PI - 0.5 * z * z;
}

/* log S(tau) = log(erfc(z / sqrt 2) / 2), finite far into the upper tail; 0 at tau = 0 */
static double lognormal_log_surv(const lognormal *ln, double tau)
{
    if (!(tau > 0)) return 0;
    return gsl_sf_log_erfc((log(tau) - ln->m) / (ln->s * SQRT2)) - LOG2;
}

static double lognormal_hazard(const lognormal *ln, double tau)
{
    return tau > 0 ? exp(lognormal_log_pdf(ln, tau) - lognormal_log_surv(ln, tau)) : 0;
}

static double lognormal_draw(const lognormal *ln, nf_rng *rng) { return exp(ln->m + ln->s * nf_rng_normal(rng)); }

/* ---- renewal: i.i.d. log-normal intervals -------------------------------------------------------- */

static int renewal_create(nf_tpp_process *p, nf_opts *o)
{
    lognormal s;
    NF_TRY(lognormal_read(o, 6.0, &s));
    return keep_state(p, &s, sizeof s);
}

/* lambda*(t) = f(tau) / S(tau), so log lambda*(t_i) - Lambda(t_{i-1}, t_i) = log f(tau_i) exactly:
 *   ll_i = log f(tau_i),  comp_i = -log S(tau_i),  comp_n = -log S(t1 - t_{n-1}) */
static void renewal_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                          double *comp)
{
    const lognormal *s = p->state;
    double prev = t0;
    for (size_t i = 0; i < n; i++) {
        double tau = t[i] - prev;
        if (ll) ll[i] = lognormal_log_pdf(s, tau);
        if (comp) comp[i] = -lognormal_log_surv(s, tau);
        prev = t[i];
    }
    if (comp) comp[n] = -lognormal_log_surv(s, t1 - prev);
}

/* lambda*(s) = h(s - last event before s, or t0) */
static double renewal_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    return lognormal_hazard(p->state, s - last_before(n, t, t0, s, NULL));
}

static int renewal_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                            size_t *n, size_t *cap)
{
    double now = t0;
    for (size_t k = 0; !max || k < max; k++) {
        now += lognormal_draw(p->state, rng);
        if (now > t1) break;
        NF_TRY(nf_tpp_append(t, n, cap, now));
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_renewal = {
    .name = "renewal",
    .summary = "renewal process with log-normal intervals of the given mean and standard deviation",
    .options_help = "mean=1, sd=6",
    .defaults = "mean=1,sd=6",
    .create = renewal_create,
    .destroy = free_state,
    .terms = renewal_terms,
    .intensity = renewal_intensity,
    .simulate = renewal_simulate,
};

/* ---- the sinusoidal rate r(t) = a + b sin(w t), w = 2 pi / period ------------------------------ */

typedef struct {
    double a, b, w, c;   /* c = b / w */
} sinusoid;

static int sinusoid_read(nf_opts *o, sinusoid *r)
{
    double period;
    NF_TRY(nf_opts_double(o, "a", 1.0, 1e-12, 1e12, &r->a));
    NF_TRY(nf_opts_double(o, "b", 0.99, -1e12, 1e12, &r->b));
    NF_TRY(nf_opts_double(o, "period", 100.0, 1e-9, 1e12, &period));
    if (!(fabs(r->b) < r->a))
        return nf_error(NF_EINVAL, "%s: |b| = %g is not below a = %g: expected a rate a + b sin(2 pi t / period) "
                        "that stays positive", o->owner, fabs(r->b), r->a);
    r->w = 2 * PI / period;
    r->c = r->b / r->w;
    return NF_OK;
}

static double sin_rate(const sinusoid *r, double t) { return r->a + r->b * sin(r->w * t); }

/* R(t) - R(s) = a (t - s) - c (cos wt - cos ws) = a (t - s) + 2 c sin(w (t + s) / 2) sin(w (t - s) / 2)
 * (the product form keeps short intervals accurate). */
static double sin_dR(const sinusoid *r, double s, double t)
{
    return r->a * (t - s) + 2 * r->c * sin(0.5 * r->w * (t + s)) * sin(0.5 * r->w * (t - s));
}

/* The tau > 0 with R(s + tau) - R(s) = E.  Since a - |b| <= r <= a + |b| and |R(t) - a t + const| <= |c|,
 * tau lies in [max(E / (a + |b|), (E - 2|c|) / a), min(E / (a - |b|), (E + 2|c|) / a)]; Newton steps
 * (R' = r > 0) that leave the shrinking bracket are replaced by bisection. */
static int sin_invert(const sinusoid *r, double s, double E, double *tau)
{
    double ab = fabs(r->b), c2 = 2 * fabs(r->c);
    double lo = fmax(E / (r->a + ab), (E - c2) / r->a), hi = fmin(E / (r->a - ab), (E + c2) / r->a);
    double x = fmin(fmax(E / r->a, lo), hi);
    for (int it = 0; it < 200; it++) {
        double f = sin_dR(r, s, s + x) - E;
        if (f == 0) {   /* an exact root */
            *tau = x;
            return NF_OK;
        }
        if (f > 0) hi = x;
        else lo = x;
        double xn = x - f / sin_rate(r, s + x);
        if (!(xn > lo && xn < hi)) xn = 0.5 * (lo + hi);
        double tol = 4 * DBL_EPSILON * (fabs(s) + fabs(xn));
        if (fabs(xn - x) <= tol || hi - lo <= tol) {
            *tau = xn;
            return NF_OK;
        }
        x = xn;
    }
    if (hi - lo > 1e-9 * (fabs(s) + hi))
        return nf_error(NF_ENOCONV, "sinusoidal time change: no root of R(%.17g + tau) - R(%.17g) = %g after 200 "
                        "steps", s, s, E);
    *tau = x;
    return NF_OK;
}

/* ---- nonstationary-poisson: lambda = r(t) ---------------------------------------------------------- */

static int nsp_create(nf_tpp_process *p, nf_opts *o)
{
    sinusoid s;
    NF_TRY(sinusoid_read(o, &s));
    return keep_state(p, &s, sizeof s);
}

/* ll_i = log r(t_i) - (R(t_i) - R(t_{i-1})),  comp_i = R(t_i) - R(t_{i-1}),  comp_n = R(t1) - R(t_{n-1}) */
static void nsp_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                      double *comp)
{
    const sinusoid *r = p->state;
    double prev = t0;
    for (size_t i = 0; i < n; i++) {
        double L = sin_dR(r, prev, t[i]);
        if (ll) ll[i] = log(sin_rate(r, t[i])) - L;
        if (comp) comp[i] = L;
        prev = t[i];
    }
    if (comp) comp[n] = sin_dR(r, prev, t1);
}

static double nsp_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    (void)n, (void)t, (void)t0;
    return sin_rate(p->state, s);
}

/* Inversion: R(t_i) - R(t_{i-1}) = E_i ~ Exp(1). */
static int nsp_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                        size_t *n, size_t *cap)
{
    double now = t0, tau;
    for (size_t k = 0; !max || k < max; k++) {
        NF_TRY(sin_invert(p->state, now, draw_exp(rng), &tau));
        now += tau;
        if (now > t1) break;
        NF_TRY(nf_tpp_append(t, n, cap, now));
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_nonstationary_poisson = {
    .name = "nonstationary-poisson",
    .summary = "Poisson process with the sinusoidal rate r(t) = a + b sin(2 pi t / period)",
    .options_help = "a=1, b=0.99, period=100",
    .defaults = "a=1,b=0.99,period=100",
    .create = nsp_create,
    .destroy = free_state,
    .terms = nsp_terms,
    .intensity = nsp_intensity,
    .simulate = nsp_simulate,
};

/* ---- nonstationary-renewal: log-normal renewal in the operational time R(t) ------------------------ */

typedef struct {
    sinusoid r;
    lognormal ln;
} nsr_state;

static int nsr_create(nf_tpp_process *p, nf_opts *o)
{
    nsr_state s;
    NF_TRY(sinusoid_read(o, &s.r));
    NF_TRY(lognormal_read(o, 0.5, &s.ln));
    return keep_state(p, &s, sizeof s);
}

/* With u_i = R(t_i) - R(t_{i-1}) (i.i.d. log-normal) and lambda*(t) = r(t) h(R(t) - R(t_{i-1})):
 *   ll_i = log r(t_i) + log f(u_i)   (the Jacobian of the time change times the interval density),
 *   comp_i = -log S(u_i),  comp_n = -log S(R(t1) - R(t_{n-1})) */
static void nsr_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                      double *comp)
{
    const nsr_state *s = p->state;
    double prev = t0;
    for (size_t i = 0; i < n; i++) {
        double u = sin_dR(&s->r, prev, t[i]);
        if (ll) ll[i] = log(sin_rate(&s->r, t[i])) + lognormal_log_pdf(&s->ln, u);
        if (comp) comp[i] = -lognormal_log_surv(&s->ln, u);
        prev = t[i];
    }
    if (comp) comp[n] = -lognormal_log_surv(&s->ln, sin_dR(&s->r, prev, t1));
}

static double nsr_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    const nsr_state *st = p->state;
    double last = last_before(n, t, t0, s, NULL);
    return sin_rate(&st->r, s) * lognormal_hazard(&st->ln, sin_dR(&st->r, last, s));
}

/* u ~ log-normal, then t_i = the time where R(t) - R(t_{i-1}) = u. */
static int nsr_simulate(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                        size_t *n, size_t *cap)
{
    const nsr_state *s = p->state;
    double now = t0, tau;
    for (size_t k = 0; !max || k < max; k++) {
        NF_TRY(sin_invert(&s->r, now, lognormal_draw(&s->ln, rng), &tau));
        now += tau;
        if (now > t1) break;
        NF_TRY(nf_tpp_append(t, n, cap, now));
    }
    return NF_OK;
}

const nf_tpp_process_type nf_tpp_nonstationary_renewal = {
    .name = "nonstationary-renewal",
    .summary = "log-normal renewal process in the operational time R(t) = int a + b sin(2 pi u / period) du",
    .options_help = "a=1, b=0.99, period=100, mean=1, sd=0.5",
    .defaults = "a=1,b=0.99,period=100,mean=1,sd=0.5",
    .create = nsr_create,
    .destroy = free_state,
    .terms = nsr_terms,
    .intensity = nsr_intensity,
    .simulate = nsr_simulate,
};
