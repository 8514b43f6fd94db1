/* distributions/diag_normal.c - a normal with learnable mean and diagonal scale, N(mu, diag(e^{2s})).
 *
 * Parameters (slices of d->P): "<name>.mean" mu (D), initialised to 0, and "<name>.log_scale" s (D),
 * initialised to 0, so the distribution starts as the standard normal.
 * Option context=none|linear.  With linear (and a context of width C), (mu, s)_i = (mu, s) + W ctx_i
 * with "<name>.context.W" (2D, C), rows 0..D-1 for the mean and D..2D-1 for the log-scale, initialised
 * to 0; backward adds dW = dtheta ctx^T, d(mu, s) = dtheta and dctx = W^T dtheta.  The unconditional
 * paths are the original code, untouched; the conditional ones compute theta_i on the fly.
 * Tails: log P(Z <= z) = sum_j log Phi(u_j), log P(Z > z) = sum_j log Phi(-u_j), u = (z - mu) e^{-s}.
 * Parameter gradients are summed over the batch in double (state->acc, accW) and then added to P->grad.
 */
#include "distributions/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF_HALF_LOG_2PI 0.91893853320467274178

typedef struct {
    size_t mu, s;   /* offsets in P */
    size_t W;       /* offset in P of the context weights (2D, C); conditional only */
    double *acc;    /* (2 D) batch sums of dL/dmu, dL/ds */
    double *accW;   /* (2 D, C) batch sums of dL/dW; conditional only */
} diag_state;

static int diag_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    int linear;
    NF_TRY(nf_dist_opt_context(d, opts, &linear));
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
    if (!st->acc) return NF_ENOMEM;
    if (d->ctx_dim > 0) {
        const size_t nw = 2 * (size_t)d->dim * d->ctx_dim;
        snprintf(nm, sizeof nm, "%s.context.W", d->name);
        NF_TRY(nf_params_add(d->P, nm, nw, &st->W));
        st->accW = nf_calloc(nw, sizeof(double), "diag-normal context gradient sums");
        if (!st->accW) return NF_ENOMEM;
    }
    return NF_OK;
}

static void diag_destroy(nf_dist *d)
{
    diag_state *st = d->state;
    if (!st) return;
    free(st->acc);
    free(st->accW);
    free(st);
    d->state = NULL;
}

/* ---- conditional parameters: theta_i = b + W ctx_i ---- */

/* mu_j and s_j of the row with context ci (NULL: unconditional). */
static inline void diag_theta(const nf_dist *d, const diag_state *st, const nf_real *ci, int j, double *mu,
                              double *s)
{
    const nf_real *v = d->P->value;
    double m = v[st->mu + j], l = v[st->s + j];
    if (ci) {
        const int C = d->ctx_dim, D = d->dim;
        const nf_real *wm = v + st->W + (size_t)j * C, *ws = v + st->W + (size_t)(D + j) * C;
        for (int c = 0; c < C; c++) {
            m += (double)wm[c] * ci[c];
            l += (double)ws[c] * ci[c];
        }
    }
    *mu = m;
    *s = l;
}

/* The row's dL/dmu_j, dL/ds_j into the batch sums: d(b) += dtheta, dW += dtheta ci^T, dci += W^T dtheta. */
static inline void diag_theta_backward(const nf_dist *d, diag_state *st, const nf_real *ci, nf_real *dci, int j,
                                       double gmu, double gs)
{
    st->acc[j] += gmu;
    st->acc[d->dim + j] += gs;
    if (!ci) return;
    const int C = d->ctx_dim, D = d->dim;
    double *am = st->accW + (size_t)j * C, *as = st->accW + (size_t)(D + j) * C;
    for (int c = 0; c < C; c++) {
        am[c] += gmu * ci[c];
        as[c] += gs * ci[c];
    }
    if (dci) {
        const nf_real *wm = d->P->value + st->W + (size_t)j * C, *ws = d->P->value + st->W + (size_t)(D + j) * C;
        for (int c = 0; c < C; c++) dci[c] += (nf_real)(wm[c] * gmu + ws[c] * gs);
    }
}

static void diag_zero_sums(const nf_dist *d, diag_state *st)
{
    memset(st->acc, 0, 2 * (size_t)d->dim * sizeof(double));
    if (d->ctx_dim) memset(st->accW, 0, 2 * (size_t)d->dim * d->ctx_dim * sizeof(double));
}

static void diag_add_sums(const nf_dist *d, const diag_state *st)
{
    nf_real *g = d->P->grad;
    const int D = d->dim;
    for (int j = 0; j < D; j++) {
        g[st->mu + j] += (nf_real)st->acc[j];
        g[st->s + j] += (nf_real)st->acc[D + j];
    }
    const size_t nw = 2 * (size_t)D * d->ctx_dim;
    for (size_t q = 0; q < nw; q++) g[st->W + q] += (nf_real)st->accW[q];
}

static int diag_bad_row(const nf_dist *d, int bad, const char *what)
{
    return nf_error(NF_ENONFINITE, "%s: %s of row %d is not finite (non-finite latent, context or scale)", d->name,
                    what, bad);
}

/* log p(z | c) as below with (mu, s) = b + W c, row by row. */
static int diag_log_prob_ctx(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, int n)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    const diag_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D * (C + 1) > 32768)
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = ctx + (size_t)i * C;
        double acc = 0;
        for (int j = 0; j < D; j++) {
            double mu, s;
            diag_theta(d, st, ci, j, &mu, &s);
            double u = ((double)zi[j] - mu) * exp(-s);
            acc += -0.5 * u * u - s;
        }
        double lp = acc - D * NF_HALF_LOG_2PI;
        logp[i] = (nf_real)lp;
        if (!isfinite(lp)) {
#pragma omp critical(nf_diag_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    return bad >= 0 ? diag_bad_row(d, bad, "log-density") : NF_OK;
}

/* u_j = (z_j - mu_j) e^{-s_j};  log p(z) = sum_j (-1/2 u_j^2 - s_j) - D/2 log(2 pi) */
static int diag_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    if (d->ctx_dim) return diag_log_prob_ctx(d, logp, z, ctx, n);
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

/* Conditional backward: the same derivatives per row, then through theta = b + W c. */
static int diag_backward_ctx(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                             const nf_real *ctx, int n)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    diag_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    diag_zero_sums(d, st);
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = ctx + (size_t)i * C;
        const double w = dlogp[i];
        for (int j = 0; j < D; j++) {
            double mu, s;
            diag_theta(d, st, ci, j, &mu, &s);
            double is = exp(-s), u = ((double)zi[j] - mu) * is;
            if (dz) dz[(size_t)i * D + j] += (nf_real)(-w * u * is);
            diag_theta_backward(d, st, ci, dctx ? dctx + (size_t)i * C : NULL, j, w * u * is, w * (u * u - 1.0));
        }
    }
    diag_add_sums(d, st);
    return NF_OK;
}

/* d log p/d z_j = -u_j e^{-s_j};  d log p/d mu_j = u_j e^{-s_j};  d log p/d s_j = u_j^2 - 1 */
static int diag_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                         const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    if (d->ctx_dim) return diag_backward_ctx(d, dz, dctx, dlogp, z, ctx, n);
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
static int diag_sample(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    const diag_state *st = d->state;
    if (d->ctx_dim) {
        /* the same draw with (mu, s) = b + W ctx_i per row */
        NF_TRY(nf_dist_check_ctx(d, ctx));
        const int D = d->dim, C = d->ctx_dim;
        nf_rng_fill_normal(rng, z, (size_t)n * D);
        for (int i = 0; i < n; i++) {
            nf_real *zi = z + (size_t)i * D;
            const nf_real *ci = ctx + (size_t)i * C;
            double acc = 0;
            for (int j = 0; j < D; j++) {
                double mu, s, eps = zi[j];
                diag_theta(d, st, ci, j, &mu, &s);
                acc += -0.5 * eps * eps - s;
                zi[j] = (nf_real)(mu + exp(s) * eps);
            }
            if (logp) logp[i] = (nf_real)(acc - D * NF_HALF_LOG_2PI);
        }
        return NF_OK;
    }
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
 * Either dz or dlogp may be NULL (no gradient through it).  Conditional: the same per row, then through
 * theta = b + W c (dctx too). */
static int diag_sample_backward(nf_dist *d, nf_real *dctx, const nf_real *dz, const nf_real *dlogp, const nf_real *z,
                                const nf_real *ctx, int n)
{
    diag_state *st = d->state;
    if (d->ctx_dim) {
        NF_TRY(nf_dist_check_ctx(d, ctx));
        const int D = d->dim, C = d->ctx_dim;
        diag_zero_sums(d, st);
        for (int i = 0; i < n; i++) {
            const nf_real *zi = z + (size_t)i * D, *ci = ctx + (size_t)i * C;
            for (int j = 0; j < D; j++) {
                double mu, s, gmu = 0, gs = 0;
                diag_theta(d, st, ci, j, &mu, &s);
                if (dz) {
                    double g = dz[(size_t)i * D + j];
                    gmu = g;
                    gs = g * ((double)zi[j] - mu);
                }
                if (dlogp) gs -= dlogp[i];
                diag_theta_backward(d, st, ci, dctx ? dctx + (size_t)i * C : NULL, j, gmu, gs);
            }
        }
        diag_add_sums(d, st);
        return NF_OK;
    }
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

/* sign +1: log P(Z <= z) = sum_j log Phi(u_j);  sign -1: log P(Z > z) = sum_j log Phi(-u_j) */
static int diag_tail(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n, double sign)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    const diag_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D * (C + 1) > 8192)
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = C ? ctx + (size_t)i * C : NULL;
        double acc = 0;
        for (int j = 0; j < D; j++) {
            double mu, s;
            diag_theta(d, st, ci, j, &mu, &s);
            acc += nf_log_ndtr(sign * ((double)zi[j] - mu) * exp(-s));
        }
        out[i] = (nf_real)acc;
        if (!isfinite(acc)) {
#pragma omp critical(nf_diag_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    return bad >= 0 ? diag_bad_row(d, bad, sign > 0 ? "log-CDF" : "log-survival") : NF_OK;
}

/* With r_j = sign phi(sign u_j) / Phi(sign u_j) = d log Phi(sign u_j)/d u_j:
 *   d/dz_j = r_j e^{-s_j},  d/dmu_j = -r_j e^{-s_j},  d/ds_j = -r_j u_j                                */
static int diag_tail_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                              const nf_real *ctx, int n, double sign)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    diag_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    diag_zero_sums(d, st);
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = C ? ctx + (size_t)i * C : NULL;
        const double w = dval[i];
        for (int j = 0; j < D; j++) {
            double mu, s;
            diag_theta(d, st, ci, j, &mu, &s);
            double is = exp(-s), u = ((double)zi[j] - mu) * is, r = w * sign * nf_ndtr_ratio(sign * u);
            if (dz) dz[(size_t)i * D + j] += (nf_real)(r * is);
            diag_theta_backward(d, st, ci, dctx && ci ? dctx + (size_t)i * C : NULL, j, -r * is, -r * u);
        }
    }
    diag_add_sums(d, st);
    return NF_OK;
}

static int diag_log_cdf(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    return diag_tail(d, out, z, ctx, n, 1.0);
}

static int diag_log_survival(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    return diag_tail(d, out, z, ctx, n, -1.0);
}

static int diag_log_cdf_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                 const nf_real *ctx, int n)
{
    return diag_tail_backward(d, dz, dctx, dval, z, ctx, n, 1.0);
}

static int diag_log_survival_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                      const nf_real *ctx, int n)
{
    return diag_tail_backward(d, dz, dctx, dval, z, ctx, n, -1.0);
}

const nf_dist_type nf_dist_diag_normal = {
    .name = "diag-normal",
    .options_help = "context=none|linear (linear: mean and log-scale affine in the context); learnable mean "
                    "and log-scale, initialised to N(0, I)",
    .create = diag_create,
    .destroy = diag_destroy,
    .log_prob = diag_log_prob,
    .backward = diag_backward,
    .sample = diag_sample,
    .sample_backward = diag_sample_backward,
    .log_cdf = diag_log_cdf,
    .log_survival = diag_log_survival,
    .log_cdf_backward = diag_log_cdf_backward,
    .log_survival_backward = diag_log_survival_backward,
};
