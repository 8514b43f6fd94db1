/* distributions/diag_normal.c - a normal with learnable mean and diagonal scale, N(mu, diag(e^{2s})).
 *
 * Parameters (slices of d->P): "<name>.mean" mu (D), initialised to 0, and "<name>.log_scale" s (D),
 * initialised to 0, so the distribution starts as the standard normal.  No options.
 * Parameter gradients are summed over the batch in double (state->acc) and then added to P->grad.
 */
#include "distributions/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF_HALF_LOG_2PI 0.91893853320467274178

typedef struct {
    size_t mu, s;   /* offsets in P */
    double *acc;    /* (2 D) batch sums of dL/dmu, dL/ds */
} diag_state;

static int diag_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    (void)opts, (void)rng;
    if (!d->P) return nf_error(NF_EINVAL, "%s: a parameter store is required", d->name);
    diag_state *st = nf_calloc(1, sizeof *st, "diag-normal state");
    if (!st) return NF_ENOMEM;
    d->state = st;
    char nm[NF_PARAM_NAME_MAX + 32];
    snprintf(nm, sizeof nm, "%s.mean", d->name);
    NF_TRY(nf_params_add(d->P, nm, (size_t)d->dim, &st->mu));
    snprintf(nm, sizeof nm, "%s.log_scale", d->name);
    NF_TRY(nf_params_add(d->P, nm, (size_t)d->dim, &st->s));
    st->acc = nf_calloc(2 * (size_t)d->dim, sizeof(double), "diag-normal gradient sums");
    return st->acc ? NF_OK : NF_ENOMEM;
}

static void diag_destroy(nf_dist *d)
{
    diag_state *st = d->state;
    if (!st) return;
    free(st->acc);
    free(st);
    d->state = NULL;
}

/* u_j = (z_j - mu_j) e^{-s_j};  log p(z) = sum_j (-1/2 u_j^2 - s_j) - D/2 log(2 pi) */
static int diag_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const size_t *idx, int n)
{
    (void)idx;
    const diag_state *st = d->state;
    const nf_real *mu = d->P->value + st->mu, *s = d->P->value + st->s;
    const int D = d->dim;
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D > 32768)
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        double acc = 0;
        for (int j = 0; j < D; j++) {
            double u = ((double)zi[j] - mu[j]) * exp(-(double)s[j]);
            acc += -0.5 * u * u - s[j];
        }
        double lp = acc - D * NF_HALF_LOG_2PI;
        logp[i] = (nf_real)lp;
        if (!isfinite(lp)) {
#pragma omp critical(nf_diag_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    if (bad >= 0)
        return nf_error(NF_ENONFINITE, "%s: log-density of row %d is not finite (non-finite latent or scale)",
                        d->name, bad);
    return NF_OK;
}

/* d log p/d z_j = -u_j e^{-s_j};  d log p/d mu_j = u_j e^{-s_j};  d log p/d s_j = u_j^2 - 1 */
static int diag_backward(nf_dist *d, nf_real *dz, const nf_real *dlogp, const nf_real *z, const size_t *idx,
                         int n)
{
    (void)idx;
    diag_state *st = d->state;
    const nf_real *mu = d->P->value + st->mu, *s = d->P->value + st->s;
    const int D = d->dim;
    double *gmu = st->acc, *gs = st->acc + D;
    memset(st->acc, 0, 2 * (size_t)D * sizeof(double));
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        const double w = dlogp[i];
        for (int j = 0; j < D; j++) {
            double is = exp(-(double)s[j]);
            double u = ((double)zi[j] - mu[j]) * is;
            if (dz) dz[(size_t)i * D + j] += (nf_real)(-w * u * is);
            gmu[j] += w * u * is;
            gs[j] += w * (u * u - 1.0);
        }
    }
    nf_real *g = d->P->grad;
    for (int j = 0; j < D; j++) {
        g[st->mu + j] += (nf_real)gmu[j];
        g[st->s + j] += (nf_real)gs[j];
    }
    return NF_OK;
}

/* eps ~ N(0, I);  z = mu + e^{s} eps;  log p(z) = sum_j (-1/2 eps_j^2 - s_j) - D/2 log(2 pi) */
static int diag_sample(nf_dist *d, nf_real *z, nf_real *logp, int n, nf_rng *rng)
{
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    const diag_state *st = d->state;
    const nf_real *mu = d->P->value + st->mu, *s = d->P->value + st->s;
    const int D = d->dim;
    nf_rng_fill_normal(rng, z, (size_t)n * D);
    for (int i = 0; i < n; i++) {
        nf_real *zi = z + (size_t)i * D;
        double acc = 0;
        for (int j = 0; j < D; j++) {
            double eps = zi[j];
            acc += -0.5 * eps * eps - s[j];
            zi[j] = (nf_real)(mu[j] + exp((double)s[j]) * eps);
        }
        if (logp) logp[i] = (nf_real)(acc - D * NF_HALF_LOG_2PI);
    }
    return NF_OK;
}

/* Reparameterised gradient of a draw with eps held fixed; eps = (z - mu) e^{-s} is recovered from z.
 *   dz_j/dmu_j = 1,  dz_j/ds_j = e^{s_j} eps_j,  d logp/dmu_j = 0,  d logp/ds_j = -1.
 * Either dz or dlogp may be NULL (no gradient through it). */
static int diag_sample_backward(nf_dist *d, const nf_real *dz, const nf_real *dlogp, const nf_real *z, int n)
{
    diag_state *st = d->state;
    const nf_real *mu = d->P->value + st->mu;
    const int D = d->dim;
    double *gmu = st->acc, *gs = st->acc + D;
    memset(st->acc, 0, 2 * (size_t)D * sizeof(double));
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        for (int j = 0; j < D; j++) {
            if (dz) {
                double g = dz[(size_t)i * D + j];
                gmu[j] += g;
                gs[j] += g * ((double)zi[j] - mu[j]); /* e^{s} eps = z - mu */
            }
            if (dlogp) gs[j] -= dlogp[i];
        }
    }
    nf_real *g = d->P->grad;
    for (int j = 0; j < D; j++) {
        g[st->mu + j] += (nf_real)gmu[j];
        g[st->s + j] += (nf_real)gs[j];
    }
    return NF_OK;
}

const nf_dist_type nf_dist_diag_normal = {
    .name = "diag-normal",
    .options_help = "(no options; learnable mean and log-scale, initialised to N(0, I))",
    .create = diag_create,
    .destroy = diag_destroy,
    .log_prob = diag_log_prob,
    .backward = diag_backward,
    .sample = diag_sample,
    .sample_backward = diag_sample_backward,
};
