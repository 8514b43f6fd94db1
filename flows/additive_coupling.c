/* flows/additive_coupling.c - the additive coupling layer of NICE (Dinh et al. 2015).
 *
 * The dimensions are split into a conditioning part x_c and a transformed part x_t (options mask,
 * flip: see coupling_mask.h); a conditioner network maps [x_c | ctx] to a shift t per transformed
 * dimension, and
 *
 *   y_c = x_c,   y_t = x_t + t(x_c, ctx),   log|det J| = 0  (volume preserving).
 *
 * The inverse is exact in one pass: x_t = y_t - t(y_c, ctx).  With the zero-initialised output
 * layer the layer starts as the identity.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/coupling_mask.h"

typedef struct additive_state {
    nf_coupling cp;
} additive_state;

static int additive_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    additive_state *st = nf_calloc(1, sizeof *st, "additive-coupling state");
    if (!st) return NF_ENOMEM;
    int rc = nf_coupling_create(&st->cp, b, opts, rng, 1);
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

static void additive_destroy(nf_bijector *b)
{
    additive_state *st = b->state;
    if (!st) return;
    nf_coupling_free(&st->cp);
    free(st);
}

static size_t additive_workspace(const nf_bijector *b, int n)
{
    const additive_state *st = b->state;
    return nf_coupling_ws_layout(&st->cp, n).total;
}

/* y = x with y_t += sign * t: the forward (sign +1) and inverse (sign -1) maps.  Checks that every
 * output is finite. */
static int shift(nf_bijector *b, nf_real *out, const nf_real *in, const nf_real *ctx, int n, nf_real *ws, nf_real sign,
                 const char *dir)
{
    additive_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    nf_coupling_condition(cp, b->P, ws, in, ctx, n);
    const nf_real *h = ws + w.h; /* (n, dt) */
    const int D = cp->D, dt = cp->dt;
    memcpy(out, in, (size_t)n * D * sizeof(nf_real));
    for (int i = 0; i < n; i++) {
        nf_real *oi = out + (size_t)i * D;
        const nf_real *hi = h + (size_t)i * dt;
        for (int k = 0; k < dt; k++) oi[cp->trans[k]] += sign * hi[k];
    }
    return nf_coupling_check(b, dir, out, NULL, n);
}

/* forward: y_c = x_c, y_t = x_t + t(x_c);  logdet += 0. */
static int additive_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                            nf_real *ws)
{
    (void)logdet;
    return shift(b, y, x, ctx, n, ws, 1, "forward");
}

/* inverse: x_c = y_c, x_t = y_t - t(y_c);  logdet += 0. */
static int additive_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                            nf_real *ws)
{
    (void)logdet;
    return shift(b, x, y, ctx, n, ws, -1, "inverse");
}

/* Both backward passes: with g the incoming gradient of the output,
 *   d(input) += g;  dt = sign * g_t;  d(input)_c += conditioner backward of dt.
 * The log-determinant is constant, so dL/dlogdet contributes nothing. */
static void shift_backward(nf_bijector *b, nf_real *din, nf_real *dctx, const nf_real *g, const nf_real *ctx, int n,
                           nf_real *ws, nf_real sign)
{
    additive_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    nf_real *dh = ws + w.dh;
    const int D = cp->D, dt = cp->dt;
    nf_coupling_gather(dh, g, cp->trans, dt, D, n);
    if (sign < 0)
        for (size_t k = 0; k < (size_t)n * dt; k++) dh[k] = -dh[k];
    if (din)
        for (size_t k = 0; k < (size_t)n * D; k++) din[k] += g[k];
    nf_coupling_condition_backward(cp, b->P, ws, din, dctx, ctx, n);
}

static int additive_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                             const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dlogdet, (void)x, (void)y;
    shift_backward(b, dx, dctx, dy, ctx, n, ws, 1);
    return NF_OK;
}

static int additive_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                     const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                     int n, nf_real *ws)
{
    (void)dlogdet, (void)x, (void)y;
    shift_backward(b, dy, dctx, dx, ctx, n, ws, -1);
    return NF_OK;
}

const nf_bijector_type nf_bijector_additive_coupling = {
    .name = "additive-coupling",
    .options_help = NF_COUPLING_OPTIONS_HELP,
    .create = additive_create,
    .destroy = additive_destroy,
    .workspace = additive_workspace,
    .forward = additive_forward,
    .inverse = additive_inverse,
    .backward = additive_backward,
    .inverse_backward = additive_inverse_backward,
    .init_data = NULL,
};
