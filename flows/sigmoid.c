/* flows/sigmoid.c - the logistic map, the mirror image of logit: it sends R onto (0, 1), e.g. to
 * put a flow's output on a bounded latent or to undo a logit inside a chain.
 *
 *   y = sigma(x) = 1 / (1 + e^-x),   log|det J| = sum_j log sigma(x_j) + log(1 - sigma(x_j))
 *                                               = -sum_j softplus(-x_j) + softplus(x_j),
 *
 * computed through softplus so the log-determinant stays finite even where sigma(x) rounds to 0
 * or 1.  The inverse x = log y - log(1 - y) needs y strictly inside (0, 1); anything else is
 * refused with NF_EDATA naming the entry.  No options.
 */
#include "flows/bijector.h"
#include "flows/elementwise.h"

static int sigmoid_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)b, (void)opts, (void)rng;
    return NF_OK;
}

static size_t sigmoid_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* forward: y = sigma(x);  logdet += -sum_j softplus(-x_j) + softplus(x_j). */
static int sigmoid_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real ld = 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            y[k] = nf_ew_sigmoid(x[k]);
            ld -= nf_ew_softplus(-x[k]) + nf_ew_softplus(x[k]);
        }
        /* y is in [0, 1] whenever x is not NaN, and ld is NaN or -inf exactly when some x is not finite */
        if (!isfinite(ld))
            return nf_error(NF_ENONFINITE, "%s (%s): forward input row %d is not finite", b->type->name, b->name, i);
        logdet[i] += ld;
    }
    return NF_OK;
}

/* inverse: x = log y - log(1 - y) for y in (0, 1);  logdet += -sum_j log y_j + log(1 - y_j). */
static int sigmoid_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real ld = 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            if (!(y[k] > 0 && y[k] < 1))
                return nf_error(NF_EDATA, "%s (%s): inverse input y[%d][%d] = %g: expected a value strictly between 0 "
                                "and 1", b->type->name, b->name, i, j, (double)y[k]);
            nf_real ly = NF_EW_LOG(y[k]), l1y = NF_EW_LOG1P(-y[k]);
            x[k] = ly - l1y;
            ld -= ly + l1y;
        }
        if (!isfinite(ld))
            return nf_error(NF_ENONFINITE, "%s (%s): inverse log-determinant is not finite in row %d", b->type->name,
                            b->name, i);
        logdet[i] += ld;
    }
    return NF_OK;
}

/* backward: dy/dx = s (1 - s);  d logdet/dx = (1 - s) - s;  dx += dy s (1 - s) + u ((1 - s) - s),
 * with 1 - s = sigma(-x) computed directly (no cancellation for large x). */
static int sigmoid_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx, (void)ws;
    if (!dx) return NF_OK;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            nf_real s = nf_ew_sigmoid(x[k]), r = nf_ew_sigmoid(-x[k]);
            dx[k] += dy[k] * s * r + u * (r - s);
        }
    }
    return NF_OK;
}

/* inverse backward: dx/dy = 1 / (y (1 - y));  d logdet/dy = (2y - 1) / (y (1 - y));
 *   dy += (v + u (2y - 1)) / (y (1 - y)). */
static int sigmoid_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)x, (void)ctx, (void)ws;
    if (!dy) return NF_OK;
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            nf_real v = y[k];
            dy[k] += (dx[k] + u * (2 * v - 1)) / (v * (1 - v));
        }
    }
    return NF_OK;
}

const nf_bijector_type nf_bijector_sigmoid = {
    .name = "sigmoid",
    .options_help = "(no options)",
    .create = sigmoid_create,
    .destroy = NULL,
    .workspace = sigmoid_workspace,
    .forward = sigmoid_forward,
    .inverse = sigmoid_inverse,
    .backward = sigmoid_backward,
    .inverse_backward = sigmoid_inverse_backward,
    .init_data = NULL,
};
