/* training/tpp_decoder.c - next inter-event time decoders (formulas in tpp_decoder.h). */
#include "training/tpp_decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"lognormmix", "flow", "exponential", "rmtpp"};

int nf_tpp_decoder_parse(const char *name, nf_tpp_decoder_kind *kind)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, NAMES[i])) {
            *kind = (nf_tpp_decoder_kind)i;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "decoder '%s' (expected one of %s)", name, NF_TPP_DECODER_NAMES);
}

const char *nf_tpp_decoder_name(nf_tpp_decoder_kind kind) { return kind <= NF_TPP_RMTPP ? NAMES[kind] : "?"; }

int nf_tpp_decoder_create(nf_tpp_decoder *d, nf_tpp_decoder_kind kind, int ctx_dim, int components, int layers,
                          int hidden, double shift, double scale, nf_params *P, nf_params *S, const char *prefix,
                          nf_rng *rng)
{
    memset(d, 0, sizeof *d);
    if (ctx_dim < 1) return nf_error(NF_EINVAL, "a point-process decoder needs a history embedding (width %d)", ctx_dim);
    if (!(scale > 0) || !isfinite(shift) || !isfinite(scale))
        return nf_error(NF_EINVAL, "log inter-event time statistics %g, %g (expected finite, scale > 0)", shift, scale);
    *d = (nf_tpp_decoder){.kind = kind, .ctx_dim = ctx_dim, .components = components, .layers = layers,
                          .hidden = hidden, .shift = shift, .scale = scale, .P = P, .S = S};
    char name[96], opts[128];
    switch (kind) {
    case NF_TPP_LOGNORMMIX:
        snprintf(name, sizeof name, "%smix", prefix);
        snprintf(opts, sizeof opts, "k=%d, context=linear", components);
        return nf_dist_create(&d->mix, &nf_dist_gmm, 1, ctx_dim, name, opts, P, S, rng);
    case NF_TPP_FLOW: {
        char spec[160];
        snprintf(name, sizeof name, "%sflow.", prefix);
        snprintf(spec, sizeof spec, "%d*(spline-ar(hidden=%d, bins=8, tail=5))", layers, hidden);
        return nf_flow_build(&d->flow, spec, 1, ctx_dim, nf_rng_u64(rng), P, S, name);
    }
    case NF_TPP_EXPONENTIAL:
    case NF_TPP_RMTPP:
        snprintf(name, sizeof name, "%sv", prefix);
        NF_TRY(nf_params_add(P, name, (size_t)ctx_dim, &d->off_v));
        snprintf(name, sizeof name, "%sb", prefix);
        NF_TRY(nf_params_add(P, name, 1, &d->off_b));
        /* lambda = 1 / mean tau ~ e^{-shift} to start with; small random weights on the history */
        P->value[d->off_b] = (nf_real)-shift;
        for (int j = 0; j < ctx_dim; j++) P->value[d->off_v + j] = (nf_real)(0.01 * nf_rng_normal(rng));
        if (kind == NF_TPP_RMTPP) {
            snprintf(name, sizeof name, "%sw", prefix);
            NF_TRY(nf_params_add(P, name, 1, &d->off_w));
            P->value[d->off_w] = (nf_real)0.01;
        }
        return NF_OK;
    }
    return nf_error(NF_EINVAL, "unknown decoder kind %d", (int)kind);
}

void nf_tpp_decoder_destroy(nf_tpp_decoder *d)
{
    if (d->kind == NF_TPP_LOGNORMMIX && d->mix.type) nf_dist_destroy(&d->mix);
    nf_flow_free(d->flow);
    free(d->y), free(d->buf), free(d->buf2);
    memset(d, 0, sizeof *d);
}

static int reserve(nf_tpp_decoder *d, int n)
{
    if (n <= d->cap) return NF_OK;
    free(d->y), free(d->buf), free(d->buf2);
    d->y = malloc((size_t)n * sizeof *d->y);
    d->buf = malloc((size_t)n * sizeof *d->buf);
    d->buf2 = malloc((size_t)n * sizeof *d->buf2);
    d->cap = d->y && d->buf && d->buf2 ? n : 0;
    return d->cap ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %d inter-event times", n);
}

/* a_i = v . c_i + b, into d->buf */
static void linear_rate(nf_tpp_decoder *d, const nf_real *ctx, int n)
{
    const nf_real *v = d->P->value + d->off_v, b = d->P->value[d->off_b];
    for (int i = 0; i < n; i++) {
        double a = b;
        for (int j = 0; j < d->ctx_dim; j++) a += (double)v[j] * ctx[(size_t)i * d->ctx_dim + j];
        d->buf[i] = (nf_real)a;
    }
}

/* g(w, tau) = (e^{w tau} - 1) / w and dg/dw = (w tau e^{w tau} - (e^{w tau} - 1)) / w^2, with their
 * series near w tau = 0 (g -> tau, dg/dw -> tau^2 / 2). */
static void rmtpp_g(double w, double tau, double *g, double *gw)
{
    double x = w * tau;
    if (fabs(x) < 1e-4) {
        *g = tau * (1 + x / 2 + x * x / 6);
        *gw = tau * tau * (0.5 + x / 3 + x * x / 8);
    } else {
        double em1 = expm1(x);
        *g = em1 / w;
        *gw = (x * (em1 + 1) - em1) / (w * w);
    }
}

int nf_tpp_decoder_eval(nf_tpp_decoder *d, int which, nf_real *out, const nf_real *tau, const nf_real *ctx, int n)
{
    NF_TRY(reserve(d, n));
    for (int i = 0; i < n; i++)
        if (!(tau[i] > 0) || !isfinite(tau[i]))
            return nf_error(NF_EDATA, "inter-event time %g at position %d (expected > 0: events at distinct, "
                                      "increasing times)", (double)tau[i], i);
    d->last_tau = tau, d->last_ctx = ctx, d->last_n = n;
    if (d->kind == NF_TPP_LOGNORMMIX || d->kind == NF_TPP_FLOW) {
        for (int i = 0; i < n; i++) d->y[i] = (nf_real)((log(tau[i]) - d->shift) / d->scale);
        if (d->kind == NF_TPP_LOGNORMMIX)
            NF_TRY(which ? d->mix.type->log_survival(&d->mix, out, d->y, ctx, n)
                         : d->mix.type->log_prob(&d->mix, out, d->y, ctx, NULL, n));
        else
            NF_TRY(which ? nf_flow_log_survival(d->flow, out, d->y, ctx, n)
                         : nf_flow_log_prob(d->flow, out, d->y, ctx, NULL, n));
        if (!which)
            for (int i = 0; i < n; i++) out[i] -= (nf_real)(log(d->scale) + log(tau[i]));
        return NF_OK;
    }
    linear_rate(d, ctx, n);
    double w = d->kind == NF_TPP_RMTPP ? d->P->value[d->off_w] : 0;
    for (int i = 0; i < n; i++) {
        double a = d->buf[i], t = tau[i], g = t, gw;
        if (d->kind == NF_TPP_RMTPP) rmtpp_g(w, t, &g, &gw);
        double logs = -exp(a) * g; /* minus the compensator of the interval */
        out[i] = (nf_real)(which ? logs : a + w * t + logs);
    }
    return NF_OK;
}

int nf_tpp_decoder_backward(nf_tpp_decoder *d, int which, const nf_real *dout, nf_real *dctx)
{
    int n = d->last_n;
    const nf_real *tau = d->last_tau, *ctx = d->last_ctx;
    if (d->kind == NF_TPP_LOGNORMMIX || d->kind == NF_TPP_FLOW) {
        /* y depends on tau only (data): dL/dy is computed and dropped */
        memset(d->buf2, 0, (size_t)n * sizeof *d->buf2);
        if (d->kind == NF_TPP_LOGNORMMIX)
            return which ? d->mix.type->log_survival_backward(&d->mix, d->buf2, dctx, dout, d->y, ctx, n)
                         : d->mix.type->backward(&d->mix, d->buf2, dctx, dout, d->y, ctx, NULL, n);
        return which ? nf_flow_log_survival_backward(d->flow, dout, NULL, dctx) : nf_flow_backward(d->flow, dout, NULL, dctx);
    }
    /* d/da: log p: 1 - e^a g, log S: -e^a g;  d/dw: log p: tau - e^a g_w, log S: -e^a g_w */
    nf_real *gv = d->P->grad + d->off_v, *gb = d->P->grad + d->off_b;
    const nf_real *v = d->P->value + d->off_v;
    double w = d->kind == NF_TPP_RMTPP ? d->P->value[d->off_w] : 0, dw = 0, db = 0;
    for (int i = 0; i < n; i++) {
        double a = d->buf[i], t = tau[i], g = t, gw = 0;
        if (d->kind == NF_TPP_RMTPP) rmtpp_g(w, t, &g, &gw);
        double e = exp(a);
        double da = (which ? -e * g : 1 - e * g) * dout[i];
        dw += (which ? -e * gw : t - e * gw) * dout[i];
        db += da;
        for (int j = 0; j < d->ctx_dim; j++) {
            gv[j] += (nf_real)(da * ctx[(size_t)i * d->ctx_dim + j]);
            if (dctx) dctx[(size_t)i * d->ctx_dim + j] += (nf_real)(da * v[j]);
        }
    }
    *gb += (nf_real)db;
    if (d->kind == NF_TPP_RMTPP) d->P->grad[d->off_w] += (nf_real)dw;
    return NF_OK;
}

int nf_tpp_decoder_sample(nf_tpp_decoder *d, nf_real *tau, const nf_real *ctx, int n, nf_rng *rng)
{
    NF_TRY(reserve(d, n));
    if (d->kind == NF_TPP_LOGNORMMIX || d->kind == NF_TPP_FLOW) {
        if (d->kind == NF_TPP_LOGNORMMIX) NF_TRY(d->mix.type->sample(&d->mix, d->y, NULL, ctx, n, rng));
        else NF_TRY(nf_flow_sample(d->flow, d->y, NULL, ctx, n, rng));
        for (int i = 0; i < n; i++) tau[i] = (nf_real)exp(d->shift + d->scale * d->y[i]);
        return NF_OK;
    }
    /* inversion: S(tau) = exp(-e^a g(w, tau)) = U, so g = E e^{-a} with E = -log U ~ Exp(1), and
     * tau = log1p(w E e^{-a}) / w (infinite when w < 0 and the total intensity never reaches E) */
    linear_rate(d, ctx, n);
    double w = d->kind == NF_TPP_RMTPP ? d->P->value[d->off_w] : 0;
    for (int i = 0; i < n; i++) {
        double q = -log(nf_rng_uniform(rng)) * exp(-(double)d->buf[i]), x = w * q;
        double t = fabs(x) < 1e-8 ? q * (1 - x / 2) : (x <= -1 ? INFINITY : log1p(x) / w);
        tau[i] = (nf_real)t;
    }
    return NF_OK;
}
