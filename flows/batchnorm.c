/* flows/batchnorm.c - batch normalisation as a bijector (RealNVP, MAF).
 *
 *   forward  y_j = (x_j - mu_j) r_j e^{g_j} + beta_j,   r_j = 1 / sqrt(v_j + eps)
 *            log|det| = sum_j (g_j - 1/2 log(v_j + eps))
 *
 * Parameters: "<name>.log_gamma" g (D) and "<name>.beta" beta (D), both 0 at creation.  State (b->S):
 * "<name>.running_mean" (D, starts at 0) and "<name>.running_var" (D, starts at 1).
 * Options: momentum (default 0.1, as torch), eps (default 1e-5).
 *
 * Training mode (b->training == 1): mu, v are the batch mean and biased batch variance, so every row
 * depends on the whole batch and backward differentiates through them, including the log-determinant
 * (it depends on x through v).  Each training forward also moves the running averages,
 *   running_mean += momentum (mu - running_mean),  running_var += momentum (v_unbiased - running_var),
 * with the unbiased variance v n/(n-1) as torch does (the biased one when n == 1).
 * Evaluation mode: mu, v are the running averages and the map is a fixed affine map.
 *
 * The inverse always uses the running averages (the evaluation-mode map), also when b->training is
 * 1: a batch-statistics map has no per-sample inverse.  So in training mode inverse(forward(x)) is not
 * x; sample in evaluation mode.
 *
 * Workspace (2 D + 1): the mu_j and r_j the last forward/inverse used, and whether they were batch
 * statistics, so backward differentiates exactly the map that was applied.
 */
#include "flows/bijector.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t g, beta;        /* offsets in P: (D) each */
    size_t rmean, rvar;    /* offsets in S: (D) each */
    double momentum, eps;
} batchnorm_state;

static void batchnorm_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int batchnorm_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    batchnorm_state *st = nf_calloc(1, sizeof *st, "batchnorm state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc = nf_opts_double(opts, "momentum", 0.1, 0.0, 1.0, &st->momentum);
    if (rc == NF_OK) rc = nf_opts_double(opts, "eps", 1e-5, 1e-12, 1.0, &st->eps);
    snprintf(nm, sizeof nm, "%s.log_gamma", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, (size_t)b->dim, &st->g);
    snprintf(nm, sizeof nm, "%s.beta", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, (size_t)b->dim, &st->beta);
    snprintf(nm, sizeof nm, "%s.running_mean", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, (size_t)b->dim, &st->rmean);
    snprintf(nm, sizeof nm, "%s.running_var", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, (size_t)b->dim, &st->rvar);
    if (rc != NF_OK) {
        batchnorm_destroy(b);
        return rc;
    }
    for (int j = 0; j < b->dim; j++) b->S->value[st->rvar + j] = 1;
    return NF_OK;
}

static size_t batchnorm_workspace(const nf_bijector *b, int n)
{
    (void)n;
    return 2 * (size_t)b->dim + 1;
}

/* Fill ws with (mu (D), r (D), batch flag): batch statistics of x (updating the running averages) in
 * training mode, the running averages otherwise. */
static void batchnorm_stats(nf_bijector *b, const nf_real *x, int n, int batch, nf_real *ws)
{
    batchnorm_state *st = b->state;
    const int D = b->dim;
    nf_real *mu = ws, *r = ws + D;
    nf_real *rm = b->S->value + st->rmean, *rv = b->S->value + st->rvar;
    for (int j = 0; j < D; j++) {
        double m, v;
        if (batch) {
            m = 0, v = 0;
            for (int i = 0; i < n; i++) m += x[(size_t)i * D + j];
            m /= n;
            for (int i = 0; i < n; i++) {
                double d = x[(size_t)i * D + j] - m;
                v += d * d;
            }
            double vu = n > 1 ? v / (n - 1) : v / n;
            v /= n;
            rm[j] = (nf_real)(rm[j] + st->momentum * (m - rm[j]));
            rv[j] = (nf_real)(rv[j] + st->momentum * (vu - rv[j]));
        } else {
            m = rm[j];
            v = rv[j];
        }
        mu[j] = (nf_real)m;
        r[j] = (nf_real)(1.0 / sqrt(v + st->eps));
    }
    ws[2 * D] = (nf_real)batch;
}

/* y_ij = (x_ij - mu_j) r_j e^{g_j} + beta_j;  log|det| = sum_j (g_j + log r_j), the same for every row. */
static int batchnorm_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)ctx;
    batchnorm_state *st = b->state;
    const int D = b->dim;
    if (n < 1) return NF_OK;
    batchnorm_stats(b, x, n, b->training != 0, ws);
    const nf_real *mu = ws, *r = ws + D;
    const nf_real *g = b->P->value + st->g, *beta = b->P->value + st->beta;
    double ld = 0;
    for (int j = 0; j < D; j++) ld += g[j] + log((double)r[j]);
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D;
        nf_real *yi = y + (size_t)i * D;
        for (int j = 0; j < D; j++) yi[j] = (xi[j] - mu[j]) * r[j] * (nf_real)exp((double)g[j]) + beta[j];
        logdet[i] += (nf_real)ld;
    }
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* x_ij = (y_ij - beta_j) e^{-g_j} / r_j + mu_j with the running averages;
 * log|det| = -sum_j (g_j + log r_j). */
static int batchnorm_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)ctx;
    batchnorm_state *st = b->state;
    const int D = b->dim;
    batchnorm_stats(b, y, n, 0, ws);
    const nf_real *mu = ws, *r = ws + D;
    const nf_real *g = b->P->value + st->g, *beta = b->P->value + st->beta;
    double ld = 0;
    for (int j = 0; j < D; j++) ld += g[j] + log((double)r[j]);
    for (int i = 0; i < n; i++) {
        const nf_real *yi = y + (size_t)i * D;
        nf_real *xi = x + (size_t)i * D;
        for (int j = 0; j < D; j++) xi[j] = (nf_real)(((double)yi[j] - beta[j]) * exp(-(double)g[j]) / r[j] + mu[j]);
        logdet[i] -= (nf_real)ld;
    }
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* With xhat = (x - mu) r, a = e^g, U = sum_i dlogdet_i:
 *   dL/dbeta_j = sum_i dy_ij;   dL/dg_j = sum_i dy_ij a_j xhat_ij + U.
 * Evaluation mode: dL/dx_ij = dy_ij a_j r_j.
 * Training mode (mu, v functions of the batch), with e_ij = dy_ij a_j:
 *   dL/dx_ij = r_j / n (n e_ij - sum_k e_kj - xhat_ij sum_k e_kj xhat_kj)   (through y)
 *              - U r_j xhat_ij / n                                           (through -1/2 log(v + eps)),
 * using dv_j/dx_ij = 2 (x_ij - mu_j) / n. */
static int batchnorm_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                              const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    batchnorm_state *st = b->state;
    const int D = b->dim;
    if (n < 1) return NF_OK;
    const nf_real *mu = ws, *r = ws + D;
    const int batch = ws[2 * D] != 0;
    const nf_real *g = b->P->value + st->g;
    nf_real *gg = b->P->grad + st->g, *gbeta = b->P->grad + st->beta;
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    for (int j = 0; j < D; j++) {
        const double a = exp((double)g[j]), rj = r[j];
        double sdy = 0, sex = 0;
        for (int i = 0; i < n; i++) {
            const double d = dy[(size_t)i * D + j];
            const double xh = ((double)x[(size_t)i * D + j] - mu[j]) * rj;
            sdy += d;
            sex += d * a * xh;
        }
        const double se = sdy * a;
        gbeta[j] += (nf_real)sdy;
        gg[j] += (nf_real)(sex + U);
        if (!dx) continue;
        for (int i = 0; i < n; i++) {
            const double e = (double)dy[(size_t)i * D + j] * a;
            if (!batch) {
                dx[(size_t)i * D + j] += (nf_real)(e * rj);
            } else {
                const double xh = ((double)x[(size_t)i * D + j] - mu[j]) * rj;
                dx[(size_t)i * D + j] += (nf_real)(rj / n * (n * e - se - xh * sex) - U * rj * xh / n);
            }
        }
    }
    return NF_OK;
}

/* Sampling direction x = (y - beta) e^{-g} / r + mu (running averages, a fixed affine map):
 *   dL/dy_ij = dx_ij e^{-g_j} / r_j;   dL/dbeta_j = -sum_i dx_ij e^{-g_j} / r_j;
 *   dL/dg_j = -sum_i dx_ij (x_ij - mu_j) - U   (U = sum_i dlogdet_i). */
static int batchnorm_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                      const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                      int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    batchnorm_state *st = b->state;
    const int D = b->dim;
    const nf_real *mu = ws, *r = ws + D;
    const nf_real *g = b->P->value + st->g;
    nf_real *gg = b->P->grad + st->g, *gbeta = b->P->grad + st->beta;
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    for (int j = 0; j < D; j++) {
        const double c = exp(-(double)g[j]) / r[j];
        double sd = 0, sdx = 0;
        for (int i = 0; i < n; i++) {
            const double d = dx[(size_t)i * D + j];
            sd += d;
            sdx += d * ((double)x[(size_t)i * D + j] - mu[j]);
            if (dy) dy[(size_t)i * D + j] += (nf_real)(d * c);
        }
        gbeta[j] += (nf_real)(-sd * c);
        gg[j] += (nf_real)(-sdx - U);
    }
    return NF_OK;
}

/* Training passes normalise by the batch's own mean and variance. */
static int batchnorm_batch_coupled(const nf_bijector *b) { return b->training; }

const nf_bijector_type nf_bijector_batchnorm = {
    .name = "batchnorm",
    .options_help = "momentum=0.1 eps=1e-5 (batch statistics in training mode, running averages otherwise)",
    .create = batchnorm_create,
    .destroy = batchnorm_destroy,
    .workspace = batchnorm_workspace,
    .forward = batchnorm_forward,
    .inverse = batchnorm_inverse,
    .backward = batchnorm_backward,
    .inverse_backward = batchnorm_inverse_backward,
    .init_data = NULL,
    .batch_coupled = batchnorm_batch_coupled,
};
