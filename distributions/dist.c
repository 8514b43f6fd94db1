/* distributions/dist.c - creating and destroying base distributions, and the registry of types.
 *
 * nf_dist_create fills the common fields, reads the "k=v" options through nf_opts (the type's
 * create() reads what it knows), and then refuses any option nobody read, naming it, so that a typo
 * in "base=gmm(kk=4)" is an error and never silently ignored.  Also the pieces every type shares:
 * the context option and the standard normal log-CDF used by the closed-form tails.
 */
#include "distributions/dist.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const nf_dist_type *const nf_dist_types[] = {&nf_dist_normal, &nf_dist_diag_normal, &nf_dist_gmm, NULL};

const nf_dist_type *nf_dist_type_find(const char *name)
{
    if (name)
        for (int i = 0; nf_dist_types[i]; i++)
            if (strcmp(nf_dist_types[i]->name, name) == 0) return nf_dist_types[i];
    char known[256] = "";
    size_t at = 0;
    for (int i = 0; nf_dist_types[i] && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", nf_dist_types[i]->name);
    nf_error(NF_EINVAL, "unknown base distribution '%s': expected one of %s", name ? name : "(null)", known);
    return NULL;
}

int nf_dist_create(nf_dist *d, const nf_dist_type *type, int dim, int ctx_dim, const char *name,
                   const char *options, nf_params *P, nf_params *S, nf_rng *rng)
{
    if (!d) return nf_error(NF_EINVAL, "nf_dist_create: the distribution must not be NULL");
    memset(d, 0, sizeof *d);
    /* A NULL type usually comes straight from nf_dist_type_find, whose message says which name failed. */
    if (!type) return nf_strerror_last()[0] ? NF_EINVAL : nf_error(NF_EINVAL, "nf_dist_create: no distribution type");
    if (dim < 1) return nf_error(NF_EINVAL, "%s: dimension %d, expected at least 1", type->name, dim);
    if (ctx_dim < 0) return nf_error(NF_EINVAL, "%s: context width %d, expected 0 or more", type->name, ctx_dim);
    if (!name || !name[0]) name = type->name;
    if (strlen(name) >= sizeof d->name)
        return nf_error(NF_EINVAL, "%s: name '%s' is longer than %zu characters", type->name, name,
                        sizeof d->name - 1);
    d->type = type;
    d->dim = dim;
    d->ctx_dim = ctx_dim;
    strcpy(d->name, name);
    d->P = P;
    d->S = S;

    nf_opts opts;
    nf_opts_init(&opts, type->name);
    int rc = options ? nf_opts_parse(&opts, options) : NF_OK;
    if (rc == NF_OK) rc = type->create(d, &opts, rng);
    if (rc != NF_OK) {
        nf_dist_destroy(d);
        return rc;
    }
    if ((rc = nf_opts_check_used(&opts)) != NF_OK) {
        nf_dist_destroy(d);
        return rc;
    }
    return NF_OK;
}

void nf_dist_destroy(nf_dist *d)
{
    if (!d) return;
    if (d->type && d->type->destroy) d->type->destroy(d);
    d->state = NULL;
}

int nf_dist_opt_context(nf_dist *d, nf_opts *opts, int *linear)
{
    NF_TRY(nf_opts_choice(opts, "context", "none|linear", 0, linear));
    if (!*linear) {
        d->ctx_dim = 0;
        return NF_OK;
    }
    if (d->ctx_dim < 1)
        return nf_error(NF_EINVAL, "%s (%s): option context=linear needs a per-sample context, but the model has "
                                   "context width 0 (use context=none, or give the model a context)",
                        d->name, d->type->name);
    return NF_OK;
}

int nf_dist_check_ctx(const nf_dist *d, const nf_real *ctx)
{
    if (d->ctx_dim > 0 && !ctx)
        return nf_error(NF_EINVAL, "%s: conditional on a context of width %d, but no context was given", d->name,
                        d->ctx_dim);
    return NF_OK;
}

#define NF_HALF_LOG_2PI 0.91893853320467274178
#define NF_SQRT1_2 0.70710678118654752440

/* Mills-type series for x < -30:  Phi(x) = phi(x) / (-x) * S(x),
 *   S(x) = 1 - 1/x^2 + 3/x^4 - 15/x^6 + ... ;  12 terms leave a relative error below 1e-24 at x = -30. */
static double ndtr_series(double x)
{
    const double x2 = x * x;
    double t = 1, s = 1;
    for (int k = 1; k <= 12; k++) {
        t *= -(2.0 * k - 1) / x2;
        s += t;
    }
    return s;
}

/* log Phi(x): log1p(-Q) on the right (keeps the tiny 1 - Phi), log(erfc(-x/sqrt2)/2) down to -30 (erfc
 * keeps its relative accuracy there), and -x^2/2 - log(-x) - log sqrt(2 pi) + log S(x) below. */
double nf_log_ndtr(double x)
{
    if (x > 0) return log1p(-0.5 * erfc(x * NF_SQRT1_2));
    if (x > -30) return log(0.5 * erfc(-x * NF_SQRT1_2));
    return -0.5 * x * x - log(-x) - NF_HALF_LOG_2PI + log(ndtr_series(x));
}

/* phi(x) / Phi(x) = exp(log phi(x) - log Phi(x)), and -x / S(x) below -30 (no cancellation). */
double nf_ndtr_ratio(double x)
{
    if (x > -30) return exp(-0.5 * x * x - NF_HALF_LOG_2PI - nf_log_ndtr(x));
    return -x / ndtr_series(x);
}
