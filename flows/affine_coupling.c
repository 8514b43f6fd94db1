/* flows/affine_coupling.c - the affine coupling layer of RealNVP (Dinh et al. 2017).
 *
 * The dimensions are split into a conditioning part x_c and a transformed part x_t (options mask,
 * flip: see coupling_mask.h).  A conditioner network maps [x_c | ctx] to a shift t and a raw
 * log-scale r for every transformed dimension (column 2k is t_k, 2k+1 is r_k), and
 *
 *   y_c = x_c,   y_t = x_t * exp(s) + t,   s = clamp * tanh(r / clamp),   log|det J| = sum_k s_k.
 *
 * Why the soft clamp clamp * tanh(r / clamp) rather than Glow's scale sigmoid(r + 2): it bounds the
 * log-scale to (-clamp, clamp), so exp(s) can neither overflow nor underflow however large the
 * network's output grows (a transient spike early in training cannot produce inf or a zero scale);
 * it is smooth with a gradient everywhere (a hard clamp would stop learning at the bound); it is
 * symmetric, so it can expand as easily as contract (Glow's sigmoid caps scales below 1 and needs
 * other layers to expand); and it is the identity to first order at r = 0 with s(0) = 0 exactly, so
 * the zero-initialised output layer makes the layer start as the exact identity with log-det 0.
 * clamp defaults to 3 (scales within e^-3..e^3 per layer; stack layers for more).
 *
 * The inverse is exact in one pass: x_c = y_c (so the conditioner sees the same input),
 * x_t = (y_t - t) * exp(-s).
 */
/* Loops of arithmetic meant to become SIMD code: see flows/rqspline.c on -ftrapping-math. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/coupling_mask.h"
#include "flows/fastmath.h"
#include "core/simd.h"

typedef struct affine_state {
    nf_coupling cp;
    nf_real clamp;
} affine_state;

static int affine_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    double clamp;
    NF_TRY(nf_opts_double(opts, "clamp", 3.0, 1e-3, 1e3, &clamp));
    affine_state *st = nf_calloc(1, sizeof *st, "affine-coupling state");
    if (!st) return NF_ENOMEM;
    st->clamp = (nf_real)clamp;
    int rc = nf_coupling_create(&st->cp, b, opts, rng, 2);
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

static void affine_destroy(nf_bijector *b)
{
    affine_state *st = b->state;
    if (!st) return;
    nf_coupling_free(&st->cp);
    free(st);
}

static size_t affine_workspace(const nf_bijector *b, int n)
{
    const affine_state *st = b->state;
    return nf_coupling_ws_layout(&st->cp, n).total;
}

/* Conditioner output -> soft-clamped log-scales, written over the raw values (backward reads s);
 * e[k] = exp(+-s_k) for the elementwise loops (sign +1 forward, -1 inverse). */
NF_SIMD_CLONES static void soft_clamp(const affine_state *st, nf_real *h, nf_real *e, nf_real sign, int n)
{
    const nf_real c = st->clamp, ic = 1 / st->clamp;
    const size_t m = (size_t)n * st->cp.dt;
#pragma omp simd
    for (size_t k = 0; k < m; k++) {
        nf_real s = c * NF_TANH(h[2 * k + 1] * ic);
        h[2 * k + 1] = s;
        e[k] = NF_EXP(sign * s);
    }
}

/* dh[2k + 1] = exp(sign s_k) for every element, read (then overwritten) by the backward loops. */
NF_SIMD_CLONES static void exp_scales(nf_real *dh, const nf_real *h, nf_real sign, int n, int dt)
{
    const size_t m = (size_t)n * dt;
#pragma omp simd
    for (size_t k = 0; k < m; k++) dh[2 * k + 1] = NF_EXP(sign * h[2 * k + 1]);
}

/* forward: y_c = x_c, y_t = x_t exp(s) + t;  logdet += sum_k s_k. */
static int affine_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                          nf_real *ws)
{
    affine_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    nf_coupling_condition(cp, b->P, ws, x, ctx, n);
    nf_real *h = ws + w.h, *es = ws + w.dh; /* (n, dt, 2): t, s;  exp(s) (n, dt) in dh, free until backward */
    soft_clamp(st, h, es, 1, n);
    const int D = cp->D, dt = cp->dt, dc = cp->dc;
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D, *hi = h + (size_t)i * 2 * dt, *ei = es + (size_t)i * dt;
        nf_real *yi = y + (size_t)i * D;
        nf_real ld = 0;
        for (int k = 0; k < dc; k++) yi[cp->cond[k]] = xi[cp->cond[k]];
        for (int k = 0; k < dt; k++) {
            int j = cp->trans[k];
            yi[j] = xi[j] * ei[k] + hi[2 * k];
            ld += hi[2 * k + 1];
        }
        logdet[i] += ld;
    }
    return nf_coupling_check(b, "forward", y, logdet, n);
}

/* inverse: x_c = y_c, x_t = (y_t - t) exp(-s);  logdet += -sum_k s_k. */
static int affine_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                          nf_real *ws)
{
    affine_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    nf_coupling_condition(cp, b->P, ws, y, ctx, n); /* y_c = x_c: the same conditioner input */
    nf_real *h = ws + w.h, *es = ws + w.dh; /* exp(-s) in dh, free until backward */
    soft_clamp(st, h, es, -1, n);
    const int D = cp->D, dt = cp->dt, dc = cp->dc;
    for (int i = 0; i < n; i++) {
        const nf_real *yi = y + (size_t)i * D, *hi = h + (size_t)i * 2 * dt, *ei = es + (size_t)i * dt;
        nf_real *xi = x + (size_t)i * D;
        nf_real ld = 0;
        for (int k = 0; k < dc; k++) xi[cp->cond[k]] = yi[cp->cond[k]];
        for (int k = 0; k < dt; k++) {
            int j = cp->trans[k];
            xi[j] = (yi[j] - hi[2 * k]) * ei[k];
            ld -= hi[2 * k + 1];
        }
        logdet[i] += ld;
    }
    return nf_coupling_check(b, "inverse", x, logdet, n);
}

/* backward of forward, with u = dL/dlogdet and ds/dr = 1 - (s / clamp)^2:
 *   dx_t += dy_t exp(s);  dt = dy_t;  ds = dy_t x_t exp(s) + u;  dr = ds (1 - (s/clamp)^2);
 *   dx_c += dy_c + (conditioner backward of (dt, dr)). */
static int affine_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                           const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)y;
    affine_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    const nf_real *h = ws + w.h;
    nf_real *dh = ws + w.dh;
    const int D = cp->D, dt = cp->dt, dc = cp->dc;
    const nf_real ic2 = 1 / (st->clamp * st->clamp);
    exp_scales(dh, h, 1, n, dt);
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D, *dyi = dy + (size_t)i * D, *hi = h + (size_t)i * 2 * dt;
        nf_real *dhi = dh + (size_t)i * 2 * dt;
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int k = 0; k < dt; k++) {
            int j = cp->trans[k];
            nf_real s = hi[2 * k + 1], e = dhi[2 * k + 1], g = dyi[j] * e;
            if (dx) dx[(size_t)i * D + j] += g;
            dhi[2 * k] = dyi[j];
            dhi[2 * k + 1] = (g * xi[j] + u) * (1 - s * s * ic2);
        }
        if (dx)
            for (int k = 0; k < dc; k++) dx[(size_t)i * D + cp->cond[k]] += dyi[cp->cond[k]];
    }
    nf_coupling_condition_backward(cp, b->P, ws, dx, dctx, ctx, n);
    return NF_OK;
}

/* backward of inverse (x_t = (y_t - t) e, e = exp(-s)), with v = dL/dx, u = dL/dlogdet:
 *   dy_t += v_t e;  dt = -v_t e;  ds = -v_t x_t - u;  dr = ds (1 - (s/clamp)^2);
 *   dy_c += v_c + (conditioner backward of (dt, dr)). */
static int affine_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                   const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx, int n,
                                   nf_real *ws)
{
    (void)y;
    affine_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    nf_coupling_ws w = nf_coupling_ws_layout(cp, n);
    const nf_real *h = ws + w.h;
    nf_real *dh = ws + w.dh;
    const int D = cp->D, dt = cp->dt, dc = cp->dc;
    const nf_real ic2 = 1 / (st->clamp * st->clamp);
    exp_scales(dh, h, -1, n, dt);
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D, *dxi = dx + (size_t)i * D, *hi = h + (size_t)i * 2 * dt;
        nf_real *dhi = dh + (size_t)i * 2 * dt;
        nf_real u = dlogdet ? dlogdet[i] : 0;
        for (int k = 0; k < dt; k++) {
            int j = cp->trans[k];
            nf_real s = hi[2 * k + 1], g = dxi[j] * dhi[2 * k + 1];
            if (dy) dy[(size_t)i * D + j] += g;
            dhi[2 * k] = -g;
            dhi[2 * k + 1] = (-dxi[j] * xi[j] - u) * (1 - s * s * ic2);
        }
        if (dy)
            for (int k = 0; k < dc; k++) dy[(size_t)i * D + cp->cond[k]] += dxi[cp->cond[k]];
    }
    nf_coupling_condition_backward(cp, b->P, ws, dy, dctx, ctx, n);
    return NF_OK;
}

const nf_bijector_type nf_bijector_affine_coupling = {
    .name = "affine-coupling",
    .options_help = NF_COUPLING_OPTIONS_HELP " clamp=3",
    .create = affine_create,
    .destroy = affine_destroy,
    .workspace = affine_workspace,
    .forward = affine_forward,
    .inverse = affine_inverse,
    .backward = affine_backward,
    .inverse_backward = affine_inverse_backward,
    .init_data = NULL,
};
