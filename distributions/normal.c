/* distributions/normal.c - the standard normal N(0, I) on R^D: no parameters, no options, ignores any
 * context.  Closed-form tails: log P(Z <= z) = sum_j log Phi(z_j), log P(Z > z) = sum_j log Phi(-z_j). */
#include "distributions/dist.h"

#include <math.h>

#define NF_HALF_LOG_2PI 0.91893853320467274178

static int normal_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    (void)opts, (void)rng;
    d->ctx_dim = 0;
    return NF_OK;
}

static void normal_destroy(nf_dist *d) { (void)d; }

/* log p(z) = -1/2 sum_j z_j^2 - D/2 log(2 pi) */
static int normal_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx,
                           int n)
{
    (void)ctx, (void)idx;
    const int D = d->dim;
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D > 65536)
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        double s = 0;
        for (int j = 0; j < D; j++) s += (double)zi[j] * zi[j];
        double lp = -0.5 * s - D * NF_HALF_LOG_2PI;
        logp[i] = (nf_real)lp;
        if (!isfinite(lp)) {
#pragma omp critical(nf_normal_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    if (bad >= 0)
        return nf_error(NF_ENONFINITE, "%s: log-density of row %d is not finite (non-finite latent)", d->name, bad);
    return NF_OK;
}

/* d log p / d z_j = -z_j */
static int normal_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                           const nf_real *ctx, const size_t *idx, int n)
{
    (void)dctx, (void)ctx, (void)idx;
    if (!dz) return NF_OK;
    const size_t N = (size_t)n * d->dim;
    const int D = d->dim;
#pragma omp parallel for schedule(static) if (N > 65536)
    for (size_t k = 0; k < N; k++) dz[k] -= dlogp[k / D] * z[k];
    return NF_OK;
}

/* z ~ N(0, I) drawn row by row from one stream (so the draw does not depend on the thread count). */
static int normal_sample(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    (void)ctx;
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    nf_rng_fill_normal(rng, z, (size_t)n * d->dim);
    if (logp) return normal_log_prob(d, logp, z, NULL, NULL, n);
    return NF_OK;
}

/* No parameters: a reparameterised draw z = eps carries no parameter gradient. */
static int normal_sample_backward(nf_dist *d, nf_real *dctx, const nf_real *dz, const nf_real *dlogp,
                                  const nf_real *z, const nf_real *ctx, int n)
{
    (void)d, (void)dctx, (void)dz, (void)dlogp, (void)z, (void)ctx, (void)n;
    return NF_OK;
}

/* sign +1: log P(Z <= z) = sum_j log Phi(z_j);  sign -1: log P(Z > z) = sum_j log Phi(-z_j) */
static int normal_tail(nf_dist *d, nf_real *out, const nf_real *z, int n, double sign)
{
    const int D = d->dim;
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D > 8192)
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        double s = 0;
        for (int j = 0; j < D; j++) s += nf_log_ndtr(sign * zi[j]);
        out[i] = (nf_real)s;
        if (!isfinite(s)) {
#pragma omp critical(nf_normal_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    if (bad >= 0)
        return nf_error(NF_ENONFINITE, "%s: log-%s of row %d is not finite (non-finite latent)", d->name,
                        sign > 0 ? "CDF" : "survival", bad);
    return NF_OK;
}

/* d/dz_j sum_j log Phi(sign z_j) = sign phi(sign z_j) / Phi(sign z_j) */
static void normal_tail_backward(nf_dist *d, nf_real *dz, const nf_real *dval, const nf_real *z, int n, double sign)
{
    if (!dz) return;
    const size_t N = (size_t)n * d->dim;
    const int D = d->dim;
#pragma omp parallel for schedule(static) if (N > 8192)
    for (size_t k = 0; k < N; k++) dz[k] += (nf_real)(dval[k / D] * sign * nf_ndtr_ratio(sign * z[k]));
}

static int normal_log_cdf(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    (void)ctx;
    return normal_tail(d, out, z, n, 1.0);
}

static int normal_log_survival(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    (void)ctx;
    return normal_tail(d, out, z, n, -1.0);
}

static int normal_log_cdf_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                   const nf_real *ctx, int n)
{
    (void)dctx, (void)ctx;
    normal_tail_backward(d, dz, dval, z, n, 1.0);
    return NF_OK;
}

static int normal_log_survival_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval,
                                        const nf_real *z, const nf_real *ctx, int n)
{
    (void)dctx, (void)ctx;
    normal_tail_backward(d, dz, dval, z, n, -1.0);
    return NF_OK;
}

const nf_dist_type nf_dist_normal = {
    .name = "normal",
    .options_help = "(no options)",
    .create = normal_create,
    .destroy = normal_destroy,
    .log_prob = normal_log_prob,
    .backward = normal_backward,
    .sample = normal_sample,
    .sample_backward = normal_sample_backward,
    .log_cdf = normal_log_cdf,
    .log_survival = normal_log_survival,
    .log_cdf_backward = normal_log_cdf_backward,
    .log_survival_backward = normal_log_survival_backward,
};
