/* flows/spline_ar.c - autoregressive neural spline flows (Durkan et al. 2019): spline-ar (MAF-style,
 * forward fast) and spline-iaf (IAF-style, inverse fast).
 *
 * A MADE reads v and gives the 3K - 1 unnormalised parameters of a rational-quadratic spline for each
 * dimension (flows/rqspline.h), from v_<i and the context only:
 *
 *   w_i = s(v_i; theta_i(v_<i)),   log|det dw/dv| = sum_i log s'(v_i; theta_i),
 *
 * the identity outside [-tail, tail] and at theta = 0 (the MADE's output layer starts at zero).
 *
 *   spline-ar   v = data,   w = latent: forward (density) one MADE pass, inverse (sampling) slow;
 *   spline-iaf  v = latent, w = data:   inverse one pass, forward slow.
 *
 * Options: bins=8 tail=3 and the MADE's (autoregressive.h).  Gradients in both directions are exact;
 * the slow direction's go through the transposed sweep (up to D MADE backward passes).
 */
#include <stdlib.h>

#include "flows/autoregressive.h"
#include "flows/rqspline.h"

typedef struct spline_ar_state {
    nf_ar ar; /* first: nf_ar_type_* (flows/autoregressive.h) read the state as its nf_ar */
    nf_rqspline spline;
} spline_ar_state;

static void elem_forward(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v,
                         const nf_real *theta, int n, int d, int stride)
{
    nf_rqspline_forward(cfg, w, ld, lde, v, theta, n, d, stride);
}

static void elem_inverse(const void *cfg, nf_real *v, nf_real *ld, nf_real *lde, const nf_real *w,
                         const nf_real *theta, int n, int d, int stride)
{
    nf_rqspline_inverse(cfg, v, ld, lde, w, theta, n, d, stride);
}

static void elem_backward(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                          const nf_real *v, const nf_real *theta, int n, int d, int stride, int accumulate)
{
    nf_rqspline_backward_ex(cfg, dv, dtheta, gw, gl, v, theta, n, d, stride, accumulate);
}

static size_t elem_cache_size(const void *cfg, int n, int d) { return nf_rqspline_cache_size(cfg, n, d); }

static void elem_forward_cached(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v,
                                const nf_real *theta, int n, int d, int stride, nf_real *cache)
{
    nf_rqspline_forward_cached(cfg, w, ld, lde, v, theta, n, d, stride, cache);
}

static void elem_backward_cached(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                                 const nf_real *cache, int n, int d, int stride, int accumulate)
{
    nf_rqspline_backward_cached(cfg, dv, dtheta, gw, gl, cache, n, d, stride, accumulate);
}

static const nf_ar_elem spline_elem = {elem_forward, elem_inverse, elem_backward,
                                       elem_cache_size, elem_forward_cached, elem_backward_cached};

static int spline_ar_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    int bins;
    double tail;
    NF_TRY(nf_opts_int(opts, "bins", 8, 2, NF_RQSPLINE_MAX_BINS, &bins));
    NF_TRY(nf_opts_double(opts, "tail", 3.0, 1e-6, 1e6, &tail));
    spline_ar_state *st = nf_calloc(1, sizeof *st, "spline-ar state");
    if (!st) return NF_ENOMEM;
    int rc = nf_rqspline_init(&st->spline, bins, tail);
    if (rc != NF_OK) {
        free(st);
        return nf_error_context(rc, "%s (%s)", b->type->name, b->name);
    }
    rc = nf_ar_create(&st->ar, b, opts, rng, &spline_elem, &st->spline, nf_rqspline_nparams(&st->spline));
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

/* spline-ar: forward (fast) z_i = s(x_i; theta_i(x_<i)), logdet += sum log s'; inverse (slow)
 * x_i = s^-1(z_i; theta_i(x_<i)); backward dx += dz s' + dlogdet d log s'/dx + MADE^T(dz ds/dtheta +
 * dlogdet d log s'/dtheta).  spline-iaf: the same map from the latent (inverse fast, forward slow).
 * flows/autoregressive.h has the directions and the slow direction's gradient. */
const nf_bijector_type nf_bijector_spline_ar = {
    "spline-ar",
    "bins=8 tail=3 " NF_AR_OPTIONS_HELP " (forward one pass; inverse sequential/Jacobi)",
    spline_ar_create, nf_ar_type_destroy, nf_ar_type_workspace, nf_ar_type_fast, nf_ar_type_slow,
    nf_ar_type_fast_backward, nf_ar_type_slow_backward, NULL, NULL,
};

const nf_bijector_type nf_bijector_spline_iaf = {
    "spline-iaf",
    "bins=8 tail=3 " NF_AR_OPTIONS_HELP " (inverse one pass; forward sequential/Jacobi)",
    spline_ar_create, nf_ar_type_destroy, nf_ar_type_workspace, nf_ar_type_slow, nf_ar_type_fast,
    nf_ar_type_slow_backward, nf_ar_type_fast_backward, NULL, NULL,
};
