/* flows/logit.c - the logit map with a margin, for data in [0, 1] (RealNVP's preprocessing of
 * dequantised pixels): it sends the unit interval to the whole real line, where a Gaussian base
 * fits.  With the margin alpha (option alpha, default 1e-6; RealNVP used 0.05 for images)
 *
 *   p = alpha + (1 - 2 alpha) x,   q = 1 - p = alpha + (1 - 2 alpha)(1 - x),   y = log p - log q,
 *   log|det J| = sum_j [log(1 - 2 alpha) - log p_j - log q_j].
 *
 * q is computed from 1 - x rather than as 1 - p, so it keeps its precision near x = 1.
 *
 * Domain.  The map is a bijection from the open interval where p and q are positive,
 * (-alpha/(1-2 alpha), (1-alpha)/(1-2 alpha)) (which contains [0, 1] when alpha > 0), onto R; the
 * inverse x = (sigma(y) - alpha) / (1 - 2 alpha) is defined for every y and may return values up to
 * alpha/(1-2 alpha) outside [0, 1] for latents beyond logit(alpha).  forward accepts that whole
 * domain, so samples always round-trip, and refuses anything else with NF_EDATA naming the bijector
 * and the entry (data not scaled to [0, 1], e.g. raw pixel values 0..255).
 */
#include <stdio.h>
#include <stdlib.h>

#include "flows/bijector.h"
#include "flows/elementwise.h"

typedef struct logit_state {
    nf_real alpha;
} logit_state;

static int logit_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    double alpha;
    NF_TRY(nf_opts_double(opts, "alpha", 1e-6, 0, 0.45, &alpha));
    logit_state *st = nf_calloc(1, sizeof *st, "logit state");
    if (!st) return NF_ENOMEM;
    st->alpha = (nf_real)alpha;
    b->state = st;
    return NF_OK;
}

static void logit_destroy(nf_bijector *b) { free(b->state); }

static size_t logit_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* forward: y = log p - log q;  logdet += sum_j log(1 - 2a) - log p_j - log q_j. */
static int logit_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                         nf_real *ws)
{
    (void)ctx, (void)ws;
    const logit_state *st = b->state;
    const nf_real a = st->alpha, w = 1 - 2 * a, logw = NF_EW_LOG(w);
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real ld = 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            nf_real p = a + w * x[k], q = a + w * (1 - x[k]);
            if (!(p > 0 && q > 0))
                return nf_error(NF_EDATA, "%s (%s): input x[%d][%d] = %g is outside the map's domain: expected data "
                                "in [0, 1] (alpha = %g)", b->type->name, b->name, i, j, (double)x[k], (double)a);
            nf_real lp = NF_EW_LOG(p), lq = NF_EW_LOG(q);
            y[k] = lp - lq;
            ld += logw - lp - lq;
        }
        if (!isfinite(ld))
            return nf_error(NF_ENONFINITE, "%s (%s): forward log-determinant is not finite in row %d (an input at 0 "
                            "or 1 with alpha = 0?)", b->type->name, b->name, i);
        logdet[i] += ld;
    }
    return NF_OK;
}

/* inverse: s = sigma(y), x = (s - a) / (1 - 2a);
 * logdet += sum_j log s_j + log(1 - s_j) - log(1 - 2a), with log s = -softplus(-y), log(1-s) = -softplus(y). */
static int logit_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                         nf_real *ws)
{
    (void)ctx, (void)ws;
    const logit_state *st = b->state;
    const nf_real a = st->alpha, w = 1 - 2 * a, logw = NF_EW_LOG(w);
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real ld = 0, probe = 0; /* probe stays 0 unless an output is inf or NaN */
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            x[k] = (nf_ew_sigmoid(y[k]) - a) / w;
            probe += 0 * x[k];
            ld -= nf_ew_softplus(-y[k]) + nf_ew_softplus(y[k]) + logw;
        }
        if (!isfinite(ld) || probe != 0)
            return nf_error(NF_ENONFINITE, "%s (%s): inverse input row %d is not finite", b->type->name, b->name, i);
        logdet[i] += ld;
    }
    return NF_OK;
}

/* backward: dy/dx = (1 - 2a) / (p q);  d logdet/dx = (1 - 2a)(p - q) / (p q);
 *   dx += (1 - 2a) (dy + u (p - q)) / (p q). */
static int logit_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                          const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx, (void)ws;
    if (!dx) return NF_OK;
    const logit_state *st = b->state;
    const nf_real a = st->alpha, w = 1 - 2 * a;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            nf_real p = a + w * x[k], q = a + w * (1 - x[k]);
            dx[k] += w * (dy[k] + u * (p - q)) / (p * q);
        }
    }
    return NF_OK;
}

/* inverse backward: dx/dy = s (1 - s) / (1 - 2a);  d logdet/dy = 1 - 2s = (1 - s) - s;
 *   dy += v s (1 - s) / (1 - 2a) + u ((1 - s) - s), with 1 - s = sigma(-y) computed directly. */
static int logit_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                  const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx, int n,
                                  nf_real *ws)
{
    (void)dctx, (void)x, (void)ctx, (void)ws;
    if (!dy) return NF_OK;
    const logit_state *st = b->state;
    const nf_real w = 1 - 2 * st->alpha;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            nf_real s = nf_ew_sigmoid(y[k]), r = nf_ew_sigmoid(-y[k]);
            dy[k] += dx[k] * s * r / w + u * (r - s);
        }
    }
    return NF_OK;
}

const nf_bijector_type nf_bijector_logit = {
    .name = "logit",
    .options_help = "alpha=1e-6 (margin: y = logit(alpha + (1 - 2 alpha) x) for x in [0, 1])",
    .create = logit_create,
    .destroy = logit_destroy,
    .workspace = logit_workspace,
    .forward = logit_forward,
    .inverse = logit_inverse,
    .backward = logit_backward,
    .inverse_backward = logit_inverse_backward,
    .init_data = NULL,
};
