/* flows/actnorm.c - ActNorm (Glow): a per-dimension affine map with data-dependent initialisation.
 *
 *   forward  y_j = (x_j - b_j) e^{s_j}          log|det| = sum_j s_j
 *   inverse  x_j = y_j e^{-s_j} + b_j           log|det| = -sum_j s_j
 *
 * (the "subtract a shift, then scale by a log-parameterised factor" form; Glow's y = s (x + b) is the
 * same map with b -> -b and s -> e^s).  Parameters: "<name>.loc" b (D) and "<name>.log_scale" s (D),
 * both 0 at creation, so the map starts as the identity.  State: "<name>.initialized" (1) in b->S.
 *
 * Data-dependent initialisation: the first forward in training mode (b->training == 1) while the
 * flag is 0 sets b_j = mean_i x_ij and s_j = -1/2 log(var_j + eps) (biased variance over the batch,
 * eps = 1e-6 keeps a constant column finite) so that this batch comes out with zero mean and unit
 * variance per dimension, and sets the flag.  The flag lives in the state store, so it is saved with
 * the model and the initialisation is never redone after loading.  A model kind that gives the flow
 * data first (nf_flow_init_data: nf fit's first 100,000 rows) sets it from those rows instead, so
 * the processes of a parallel run, which see different parts of the first batch, start alike.
 * No options.  Context is ignored.
 */
#include "flows/bijector.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACTNORM_EPS 1e-6

typedef struct {
    size_t loc, log_scale; /* offsets in P: (D) each */
    size_t init;           /* offset in S: (1) 1 once initialised */
} actnorm_state;

static void actnorm_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int actnorm_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)opts, (void)rng;
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    actnorm_state *st = nf_calloc(1, sizeof *st, "actnorm state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc;
    snprintf(nm, sizeof nm, "%s.loc", b->name);
    rc = nf_params_add(b->P, nm, (size_t)b->dim, &st->loc);
    snprintf(nm, sizeof nm, "%s.log_scale", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, (size_t)b->dim, &st->log_scale);
    snprintf(nm, sizeof nm, "%s.initialized", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, 1, &st->init);
    if (rc != NF_OK) actnorm_destroy(b);
    return rc;
}

static size_t actnorm_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* b_j = mean_i x_ij,  s_j = -1/2 log(var_j + eps): the batch becomes zero-mean, unit-variance. */
static void actnorm_initialise(nf_bijector *b, const nf_real *x, int n)
{
    actnorm_state *st = b->state;
    const int D = b->dim;
    nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    for (int j = 0; j < D; j++) {
        double m = 0, v = 0;
        for (int i = 0; i < n; i++) m += x[(size_t)i * D + j];
        m /= n;
        for (int i = 0; i < n; i++) {
            double d = x[(size_t)i * D + j] - m;
            v += d * d;
        }
        v /= n;
        loc[j] = (nf_real)m;
        s[j] = (nf_real)(-0.5 * log(v + ACTNORM_EPS));
    }
    b->S->value[st->init] = 1;
}

/* init_data (nf_flow_init_data: the data that reaches this layer, the same rows in every process of
 * a parallel run): the statistics of all n rows instead of the first training batch. */
static int actnorm_init_data(nf_bijector *b, const nf_real *x, int n)
{
    for (size_t k = 0; k < (size_t)n * b->dim; k++)
        if (!isfinite(x[k])) return nf_error(NF_EDATA, "%s: initialising from data with a non-finite value (row %zu)",
                                             b->name, k / (size_t)b->dim);
    if (n >= 2) actnorm_initialise(b, x, n);
    return NF_OK;
}

/* y_ij = (x_ij - b_j) e^{s_j};  log|det| = sum_j s_j (the same for every row). */
static int actnorm_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    actnorm_state *st = b->state;
    const int D = b->dim;
    if (b->training && b->S->value[st->init] == 0 && n > 0) actnorm_initialise(b, x, n);
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    double ld = 0;
    for (int j = 0; j < D; j++) ld += s[j];
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D;
        nf_real *yi = y + (size_t)i * D;
        for (int j = 0; j < D; j++) yi[j] = (xi[j] - loc[j]) * (nf_real)exp((double)s[j]);
        logdet[i] += (nf_real)ld;
    }
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* x_ij = y_ij e^{-s_j} + b_j;  log|det| = -sum_j s_j. */
static int actnorm_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    actnorm_state *st = b->state;
    const int D = b->dim;
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    double ld = 0;
    for (int j = 0; j < D; j++) ld += s[j];
    for (int i = 0; i < n; i++) {
        const nf_real *yi = y + (size_t)i * D;
        nf_real *xi = x + (size_t)i * D;
        for (int j = 0; j < D; j++) xi[j] = yi[j] * (nf_real)exp(-(double)s[j]) + loc[j];
        logdet[i] -= (nf_real)ld;
    }
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* dL/dx_ij = dy_ij e^{s_j};  dL/db_j = -sum_i dy_ij e^{s_j};
 * dL/ds_j = sum_i dy_ij y_ij + sum_i dlogdet_i   (y = (x - b) e^s, so dy/ds = y). */
static int actnorm_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)x, (void)ctx, (void)ws;
    actnorm_state *st = b->state;
    const int D = b->dim;
    const nf_real *s = b->P->value + st->log_scale;
    nf_real *gloc = b->P->grad + st->loc, *gs = b->P->grad + st->log_scale;
    double su = 0;
    for (int i = 0; i < n; i++) su += dlogdet[i];
    for (int j = 0; j < D; j++) {
        const double e = exp((double)s[j]);
        double sdy = 0, sdyy = 0;
        for (int i = 0; i < n; i++) {
            const double g = dy[(size_t)i * D + j];
            sdy += g;
            sdyy += g * y[(size_t)i * D + j];
            if (dx) dx[(size_t)i * D + j] += (nf_real)(g * e);
        }
        gloc[j] += (nf_real)(-sdy * e);
        gs[j] += (nf_real)(sdyy + su);
    }
    return NF_OK;
}

/* Sampling direction, x = y e^{-s} + b:  dL/dy_ij = dx_ij e^{-s_j};  dL/db_j = sum_i dx_ij;
 * dL/ds_j = -sum_i dx_ij (x_ij - b_j) - sum_i dlogdet_i. */
static int actnorm_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx, (void)ws;
    actnorm_state *st = b->state;
    const int D = b->dim;
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    nf_real *gloc = b->P->grad + st->loc, *gs = b->P->grad + st->log_scale;
    double su = 0;
    for (int i = 0; i < n; i++) su += dlogdet[i];
    for (int j = 0; j < D; j++) {
        const double e = exp(-(double)s[j]);
        double sdx = 0, sdxx = 0;
        for (int i = 0; i < n; i++) {
            const double g = dx[(size_t)i * D + j];
            sdx += g;
            sdxx += g * ((double)x[(size_t)i * D + j] - loc[j]);
            if (dy) dy[(size_t)i * D + j] += (nf_real)(g * e);
        }
        gloc[j] += (nf_real)sdx;
        gs[j] += (nf_real)(-sdxx - su);
    }
    return NF_OK;
}

/* Until its start from the first training batch (or init_data), that batch's statistics. */
static int actnorm_batch_coupled(const nf_bijector *b)
{
    const actnorm_state *st = b->state;
    return b->S->value[st->init] == 0;
}

const nf_bijector_type nf_bijector_actnorm = {
    .name = "actnorm",
    .options_help = "(no options) y = (x - loc) e^{log_scale}, initialised from the first training batch",
    .create = actnorm_create,
    .destroy = actnorm_destroy,
    .workspace = actnorm_workspace,
    .forward = actnorm_forward,
    .inverse = actnorm_inverse,
    .backward = actnorm_backward,
    .inverse_backward = actnorm_inverse_backward,
    .init_data = actnorm_init_data,
    .batch_coupled = actnorm_batch_coupled,
};
