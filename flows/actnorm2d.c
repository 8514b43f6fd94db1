/* flows/actnorm2d.c - ActNorm for images (Glow): one affine map per channel, shared by every pixel.
 *
 * On the image (h, w, c) in the first h*w*c entries of a row (NHWC, flows/image_shape.h):
 *
 *   forward  y_pk = (x_pk - b_k) e^{s_k}       log|det| = h w sum_k s_k
 *   inverse  x_pk = y_pk e^{-s_k} + b_k        log|det| = -h w sum_k s_k
 *
 * for pixel p and channel k; the tail after the image passes through.  The conventions of the vector
 * ActNorm (flows/actnorm.c): parameters "<name>.loc" b (c) and "<name>.log_scale" s (c), both 0 at
 * creation (the identity); state "<name>.initialized" (1) in b->S.
 *
 * Data-dependent initialisation, as Glow: b_k = the mean of channel k over the n h w values of a
 * batch and s_k = -1/2 log(var_k + eps) (biased variance, eps = 1e-6), so that batch leaves with zero
 * mean and unit variance per channel; the flag is set.  It happens on the first forward in training
 * mode (b->training == 1) while the flag is 0, like actnorm, and on init_data (a flow's
 * nf_flow_init_data, on the data passed through the bijectors before it), which always sets the
 * statistics.  Options h=, w=, c=.  Context is ignored.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flows/bijector.h"
#include "flows/image_shape.h"

#define ACTNORM2D_EPS 1e-6
#define ACTNORM2D_CHUNK 64 /* channels summed together in one pass over the rows */

typedef struct {
    nf_image_shape s;
    size_t loc, log_scale; /* offsets in P: (c) each */
    size_t init;           /* offset in S: (1) 1 once initialised */
} actnorm2d_state;

static void actnorm2d_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int actnorm2d_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    nf_image_shape s;
    NF_TRY(nf_image_shape_read(&s, b, opts));
    actnorm2d_state *st = nf_calloc(1, sizeof *st, "actnorm2d state");
    if (!st) return NF_ENOMEM;
    st->s = s;
    b->state = st;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc;
    snprintf(nm, sizeof nm, "%s.loc", b->name);
    rc = nf_params_add(b->P, nm, (size_t)s.c, &st->loc);
    snprintf(nm, sizeof nm, "%s.log_scale", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, (size_t)s.c, &st->log_scale);
    snprintf(nm, sizeof nm, "%s.initialized", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, 1, &st->init);
    if (rc != NF_OK) actnorm2d_destroy(b);
    return rc;
}

/* (c): e^{+-s_k}, computed once per call instead of once per pixel. */
static size_t actnorm2d_workspace(const nf_bijector *b, int n)
{
    (void)n;
    const actnorm2d_state *st = b->state;
    return (size_t)st->s.c;
}

/* b_k = mean over rows and pixels of x_pk,  s_k = -1/2 log(var_k + eps); two passes in double, each
 * over the rows once with a block of up to ACTNORM2D_CHUNK channels innermost. */
static void actnorm2d_initialise(nf_bijector *b, const nf_real *x, int n)
{
    actnorm2d_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const double cnt = (double)n * hw;
    nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    for (int k0 = 0; k0 < c; k0 += ACTNORM2D_CHUNK) {
        const int m = c - k0 < ACTNORM2D_CHUNK ? c - k0 : ACTNORM2D_CHUNK;
        double mean[ACTNORM2D_CHUNK] = {0}, var[ACTNORM2D_CHUNK] = {0};
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                const nf_real *xp = x + (size_t)i * D + (size_t)p * c + k0;
                for (int k = 0; k < m; k++) mean[k] += xp[k];
            }
        for (int k = 0; k < m; k++) mean[k] /= cnt;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                const nf_real *xp = x + (size_t)i * D + (size_t)p * c + k0;
                for (int k = 0; k < m; k++) var[k] += (xp[k] - mean[k]) * (xp[k] - mean[k]);
            }
        for (int k = 0; k < m; k++) {
            loc[k0 + k] = (nf_real)mean[k];
            s[k0 + k] = (nf_real)(-0.5 * log(var[k] / cnt + ACTNORM2D_EPS));
        }
    }
    b->S->value[st->init] = 1;
}

/* init_data: the statistics of x (n rows), refusing too few values or non-finite ones. */
static int actnorm2d_init_data(nf_bijector *b, const nf_real *x, int n)
{
    const actnorm2d_state *st = b->state;
    const int D = b->dim;
    if (n < 1 || (long long)n * st->s.hw < 2)
        return nf_error(NF_EDATA, "%s (%s): %d sample(s) of %d pixel(s) to set the per-channel statistics from: "
                        "expected at least 2 values per channel", b->type->name, b->name, n, st->s.hw);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < st->s.n; j++)
            if (!isfinite(x[(size_t)i * D + j]))
                return nf_error(NF_EDATA, "%s (%s): data x[%d][%d] = %g is not finite", b->type->name, b->name, i, j,
                                (double)x[(size_t)i * D + j]);
    actnorm2d_initialise(b, x, n);
    return NF_OK;
}

static double actnorm2d_logdet(const nf_bijector *b)
{
    const actnorm2d_state *st = b->state;
    const nf_real *s = b->P->value + st->log_scale;
    double ld = 0;
    for (int k = 0; k < st->s.c; k++) ld += s[k];
    return ld * st->s.hw;
}

/* y_pk = (x_pk - b_k) e^{s_k};  log|det| = h w sum_k s_k (the same for every row). */
static int actnorm2d_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)ctx;
    actnorm2d_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    if (b->training && b->S->value[st->init] == 0 && n > 0) actnorm2d_initialise(b, x, n);
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    nf_real *e = ws; /* (c) */
    for (int k = 0; k < c; k++) e[k] = (nf_real)exp((double)s[k]);
    const double ld = actnorm2d_logdet(b);
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < hw; p++) {
            const nf_real *xp = x + (size_t)i * D + (size_t)p * c;
            nf_real *yp = y + (size_t)i * D + (size_t)p * c;
            for (int k = 0; k < c; k++) yp[k] = (xp[k] - loc[k]) * e[k];
        }
        logdet[i] += (nf_real)ld;
    }
    nf_image_tail(&st->s, D, y, x, n, 0);
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* x_pk = y_pk e^{-s_k} + b_k;  log|det| = -h w sum_k s_k. */
static int actnorm2d_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)ctx;
    const actnorm2d_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    nf_real *e = ws; /* (c) */
    for (int k = 0; k < c; k++) e[k] = (nf_real)exp(-(double)s[k]);
    const double ld = actnorm2d_logdet(b);
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < hw; p++) {
            const nf_real *yp = y + (size_t)i * D + (size_t)p * c;
            nf_real *xp = x + (size_t)i * D + (size_t)p * c;
            for (int k = 0; k < c; k++) xp[k] = yp[k] * e[k] + loc[k];
        }
        logdet[i] -= (nf_real)ld;
    }
    nf_image_tail(&st->s, D, x, y, n, 0);
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* The sums both backward passes need, over rows i and pixels p, for channels k0 .. k0+m-1 (one pass
 * over the rows, the channels innermost):  s1_k = sum g_ipk,  s2_k = sum g_ipk (v_ipk - off_k) (off
 * NULL: 0), and out_ipk += g_ipk e_k where out is not NULL. */
static void actnorm2d_sums(const actnorm2d_state *st, int D, int n, int k0, int m, const nf_real *g, const nf_real *v,
                           const nf_real *off, const nf_real *e, nf_real *out, double *s1, double *s2)
{
    const int c = st->s.c, hw = st->s.hw;
    for (int k = 0; k < m; k++) s1[k] = s2[k] = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const size_t at = (size_t)i * D + (size_t)p * c + k0;
            const nf_real *gp = g + at, *vp = v + at;
            for (int k = 0; k < m; k++) {
                const double gk = gp[k];
                s1[k] += gk;
                s2[k] += gk * ((double)vp[k] - (off ? (double)off[k0 + k] : 0));
            }
            if (out)
                for (int k = 0; k < m; k++) out[at + k] += gp[k] * e[k0 + k];
        }
}

/* dL/dx_pk = dy_pk e^{s_k};  dL/db_k = -e^{s_k} sum_{i,p} dy_ipk;
 * dL/ds_k = sum_{i,p} dy_ipk y_ipk + h w sum_i dlogdet_i   (dy/ds = y);  the tail: dx += dy. */
static int actnorm2d_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                              const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)x, (void)ctx;
    const actnorm2d_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const nf_real *s = b->P->value + st->log_scale;
    nf_real *gloc = b->P->grad + st->loc, *gs = b->P->grad + st->log_scale, *e = ws; /* (c) */
    double su = 0, s1[ACTNORM2D_CHUNK], s2[ACTNORM2D_CHUNK];
    for (int i = 0; i < n; i++) su += dlogdet[i];
    for (int k = 0; k < c; k++) e[k] = (nf_real)exp((double)s[k]);
    for (int k0 = 0; k0 < c; k0 += ACTNORM2D_CHUNK) {
        const int m = c - k0 < ACTNORM2D_CHUNK ? c - k0 : ACTNORM2D_CHUNK;
        actnorm2d_sums(st, D, n, k0, m, dy, y, NULL, e, dx, s1, s2);
        for (int k = 0; k < m; k++) {
            gloc[k0 + k] += (nf_real)(-s1[k] * e[k0 + k]);
            gs[k0 + k] += (nf_real)(s2[k] + su * hw);
        }
    }
    if (dx) nf_image_tail(&st->s, D, dx, dy, n, 1);
    return NF_OK;
}

/* Sampling direction, x = y e^{-s} + b:  dL/dy_pk = dx_pk e^{-s_k};  dL/db_k = sum_{i,p} dx_ipk;
 * dL/ds_k = -sum_{i,p} dx_ipk (x_ipk - b_k) - h w sum_i dlogdet_i;  the tail: dy += dx. */
static int actnorm2d_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                      const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                      int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const actnorm2d_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const nf_real *loc = b->P->value + st->loc, *s = b->P->value + st->log_scale;
    nf_real *gloc = b->P->grad + st->loc, *gs = b->P->grad + st->log_scale, *e = ws; /* (c) */
    double su = 0, s1[ACTNORM2D_CHUNK], s2[ACTNORM2D_CHUNK];
    for (int i = 0; i < n; i++) su += dlogdet[i];
    for (int k = 0; k < c; k++) e[k] = (nf_real)exp(-(double)s[k]);
    for (int k0 = 0; k0 < c; k0 += ACTNORM2D_CHUNK) {
        const int m = c - k0 < ACTNORM2D_CHUNK ? c - k0 : ACTNORM2D_CHUNK;
        actnorm2d_sums(st, D, n, k0, m, dx, x, loc, e, dy, s1, s2);
        for (int k = 0; k < m; k++) {
            gloc[k0 + k] += (nf_real)s1[k];
            gs[k0 + k] += (nf_real)(-s2[k] - su * hw);
        }
    }
    if (dy) nf_image_tail(&st->s, D, dy, dx, n, 1);
    return NF_OK;
}

/* Until its start from the first training batch (or init_data), that batch's statistics. */
static int actnorm2d_batch_coupled(const nf_bijector *b)
{
    const actnorm2d_state *st = b->state;
    return b->S->value[st->init] == 0;
}

const nf_bijector_type nf_bijector_actnorm2d = {
    .name = "actnorm2d",
    .options_help = "h=1 w=1 c=D/(h*w): per-channel y = (x - loc_k) e^{log_scale_k} on the image in the first h*w*c "
                    "entries, initialised from data (per-channel zero mean, unit variance)",
    .create = actnorm2d_create,
    .destroy = actnorm2d_destroy,
    .workspace = actnorm2d_workspace,
    .forward = actnorm2d_forward,
    .inverse = actnorm2d_inverse,
    .backward = actnorm2d_backward,
    .inverse_backward = actnorm2d_inverse_backward,
    .init_data = actnorm2d_init_data,
    .batch_coupled = actnorm2d_batch_coupled,
};
