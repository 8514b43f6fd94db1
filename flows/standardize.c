/* flows/standardize.c - a fixed affine standardisation set from data statistics.
 *
 *   y_j = (x_j - m_j) / s_j,   x_j = y_j s_j + m_j,   log|det J| = -sum_j log s_j.
 *
 * m and s live in the non-trainable store b->S as "<name>.mean" and "<name>.std" (D each), so a saved
 * model keeps them; nothing is trained.  Until init_data(b, x, n) sets them from a sample of the
 * data (mean and population standard deviation per dimension, accumulated in double), m = 0 and
 * s = 1 and the map is the identity.  A (nearly) constant dimension would give s = 0 and an infinite
 * log-determinant, so s_j is floored at 1e-8 relative to the dimension's magnitude
 * max(|m_j|, s_j) (or, for an all-zero column, to the largest magnitude over all dimensions, or 1).
 * The context is ignored.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flows/bijector.h"

#ifdef NF_DOUBLE
#define LOG log
#else
#define LOG logf
#endif

typedef struct standardize_state {
    size_t mean, std; /* offsets of (D) slices in b->S */
} standardize_state;

static int standardize_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)opts, (void)rng;
    standardize_state *st = nf_calloc(1, sizeof *st, "standardize state");
    if (!st) return NF_ENOMEM;
    char name[NF_PARAM_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s.mean", b->name);
    int rc = nf_params_add(b->S, name, (size_t)b->dim, &st->mean);
    snprintf(name, sizeof name, "%s.std", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, name, (size_t)b->dim, &st->std);
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    for (int j = 0; j < b->dim; j++) b->S->value[st->std + j] = 1; /* the identity until init_data */
    b->state = st;
    return NF_OK;
}

static void standardize_destroy(nf_bijector *b) { free(b->state); }

static size_t standardize_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* Mean and population standard deviation of each column of x (n, D), two passes in double. */
static int standardize_init_data(nf_bijector *b, const nf_real *x, int n)
{
    const standardize_state *st = b->state;
    const int D = b->dim;
    if (n < 2)
        return nf_error(NF_EDATA, "%s (%s): %d sample(s) to set the statistics from: expected at least 2",
                        b->type->name, b->name, n);
    for (size_t k = 0; k < (size_t)n * D; k++)
        if (!isfinite(x[k]))
            return nf_error(NF_EDATA, "%s (%s): data x[%zu][%zu] = %g is not finite", b->type->name, b->name,
                            k / (size_t)D, k % (size_t)D, (double)x[k]);
    nf_real *m = b->S->value + st->mean, *s = b->S->value + st->std;
    double largest = 0;
    for (int j = 0; j < D; j++) {
        double sum = 0, ss = 0;
        for (int i = 0; i < n; i++) sum += x[(size_t)i * D + j];
        double mu = sum / n;
        for (int i = 0; i < n; i++) {
            double d = x[(size_t)i * D + j] - mu;
            ss += d * d;
        }
        double sd = sqrt(ss / n), mag = fabs(mu) > sd ? fabs(mu) : sd;
        if (mag > largest) largest = mag;
        m[j] = (nf_real)mu;
        s[j] = (nf_real)sd;
    }
    for (int j = 0; j < D; j++) {
        double mag = fabs((double)m[j]) > s[j] ? fabs((double)m[j]) : s[j];
        double floor_j = 1e-8 * (mag > 0 ? mag : largest > 0 ? largest : 1);
        if (s[j] < floor_j) s[j] = (nf_real)floor_j;
    }
    return NF_OK;
}

/* -sum_j log s_j, or NF_ENONFINITE if the stored statistics are unusable (s <= 0, not finite). */
static int logdet_of(const nf_bijector *b, nf_real *out)
{
    const standardize_state *st = b->state;
    const nf_real *m = b->S->value + st->mean, *s = b->S->value + st->std;
    nf_real ld = 0, probe = 0;
    for (int j = 0; j < b->dim; j++) {
        ld -= LOG(s[j]);
        probe += 0 * m[j];
    }
    if (!isfinite(ld) || probe != 0)
        return nf_error(NF_ENONFINITE, "%s (%s): stored statistics are not usable (std <= 0 or not finite)",
                        b->type->name, b->name);
    *out = ld;
    return NF_OK;
}

static int nonfinite_row(const nf_bijector *b, const char *dir, int i)
{
    return nf_error(NF_ENONFINITE, "%s (%s): %s input row %d is not finite", b->type->name, b->name, dir, i);
}

/* forward: y = (x - m) / s;  logdet += -sum_j log s_j. */
static int standardize_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx,
                               int n, nf_real *ws)
{
    (void)ctx, (void)ws;
    const standardize_state *st = b->state;
    const nf_real *m = b->S->value + st->mean, *s = b->S->value + st->std;
    const int D = b->dim;
    nf_real ld;
    NF_TRY(logdet_of(b, &ld));
    for (int i = 0; i < n; i++) {
        nf_real probe = 0; /* stays 0 unless an output is inf or NaN */
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            y[k] = (x[k] - m[j]) / s[j];
            probe += 0 * y[k];
        }
        if (probe != 0) return nonfinite_row(b, "forward", i);
        logdet[i] += ld;
    }
    return NF_OK;
}

/* inverse: x = y s + m;  logdet += sum_j log s_j. */
static int standardize_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx,
                               int n, nf_real *ws)
{
    (void)ctx, (void)ws;
    const standardize_state *st = b->state;
    const nf_real *m = b->S->value + st->mean, *s = b->S->value + st->std;
    const int D = b->dim;
    nf_real ld;
    NF_TRY(logdet_of(b, &ld));
    for (int i = 0; i < n; i++) {
        nf_real probe = 0;
        for (int j = 0; j < D; j++) {
            size_t k = (size_t)i * D + j;
            x[k] = y[k] * s[j] + m[j];
            probe += 0 * x[k];
        }
        if (probe != 0) return nonfinite_row(b, "inverse", i);
        logdet[i] -= ld;
    }
    return NF_OK;
}

/* backward: dy/dx = 1 / s and the log-determinant is constant:  dx += dy / s. */
static int standardize_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                                const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    if (!dx) return NF_OK;
    const standardize_state *st = b->state;
    const nf_real *s = b->S->value + st->std;
    const int D = b->dim;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) dx[(size_t)i * D + j] += dy[(size_t)i * D + j] / s[j];
    return NF_OK;
}

/* inverse backward: dx/dy = s:  dy += dx s. */
static int standardize_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                        const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                        int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    if (!dy) return NF_OK;
    const standardize_state *st = b->state;
    const nf_real *s = b->S->value + st->std;
    const int D = b->dim;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) dy[(size_t)i * D + j] += dx[(size_t)i * D + j] * s[j];
    return NF_OK;
}

const nf_bijector_type nf_bijector_standardize = {
    .name = "standardize",
    .options_help = "(no options; mean and std are set from data by init_data)",
    .create = standardize_create,
    .destroy = standardize_destroy,
    .workspace = standardize_workspace,
    .forward = standardize_forward,
    .inverse = standardize_inverse,
    .backward = standardize_backward,
    .inverse_backward = standardize_inverse_backward,
    .init_data = standardize_init_data,
};
