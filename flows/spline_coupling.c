/* flows/spline_coupling.c - rational-quadratic spline coupling (neural spline flows, Durkan et al. 2019).
 *
 * The dimensions split into a conditioning part x_c and a transformed part x_t (mask, flip: see
 * coupling_mask.h).  A conditioner on [x_c | ctx] gives the 3K - 1 unnormalised spline parameters of
 * every transformed dimension (flows/rqspline.h), and
 *
 *   y_c = x_c,   y_t = s(x_t; theta(x_c)),   log|det J| = sum_t log s'(x_t; theta_t),
 *
 * the identity outside [-tail, tail] and at theta = 0 (zero-initialised output layer).  Both
 * directions are one conditioner pass: the inverse sees y_c = x_c.  As in nflows the conditioner
 * defaults to a residual network (residual=1, layers = residual blocks).
 * Options: bins=8 tail=3 and the coupling options (mask, flip, hidden, layers, activation, ...).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/coupling_mask.h"
#include "flows/rqspline.h"

typedef struct spline_coupling_state {
    nf_coupling cp;
    nf_rqspline spline;
} spline_coupling_state;

/* The coupling's regions, then three (n, dt) buffers and the kernel's cache (forward to backward). */
typedef struct sc_ws {
    nf_coupling_ws cw;
    size_t a, g, o; /* x_t or y_t gathered; a gathered gradient; the kernel's output */
    size_t cache;   /* nf_rqspline_cache_size(n, dt) */
    size_t total;
} sc_ws;

static sc_ws layout(const spline_coupling_state *st, int n)
{
    sc_ws w;
    w.cw = nf_coupling_ws_layout(&st->cp, n);
    size_t nt = (size_t)n * st->cp.dt;
    w.a = w.cw.total;
    w.g = w.a + nt;
    w.o = w.g + nt;
    w.cache = w.o + nt;
    w.total = w.cache + nf_rqspline_cache_size(&st->spline, n, st->cp.dt);
    return w;
}

static int sc_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    int bins;
    double tail;
    NF_TRY(nf_opts_int(opts, "bins", 8, 2, NF_RQSPLINE_MAX_BINS, &bins));
    NF_TRY(nf_opts_double(opts, "tail", 3.0, 1e-6, 1e6, &tail));
    if (!nf_opts_has(opts, "residual")) NF_TRY(nf_opts_set(opts, "residual", "1")); /* nflows' ResidualNet */
    spline_coupling_state *st = nf_calloc(1, sizeof *st, "spline-coupling state");
    if (!st) return NF_ENOMEM;
    int rc = nf_rqspline_init(&st->spline, bins, tail);
    if (rc != NF_OK) {
        free(st);
        return nf_error_context(rc, "%s (%s)", b->type->name, b->name);
    }
    rc = nf_coupling_create(&st->cp, b, opts, rng, nf_rqspline_nparams(&st->spline));
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

static void sc_destroy(nf_bijector *b)
{
    spline_coupling_state *st = b->state;
    if (!st) return;
    nf_coupling_free(&st->cp);
    free(st);
}

static size_t sc_workspace(const nf_bijector *b, int n) { return layout(b->state, n).total; }

/* out[:, cond] = in[:, cond], out[:, trans] = t (n, dt); then check rows and logdet. */
static int assemble(const nf_bijector *b, const char *dir, nf_real *out, const nf_real *in, const nf_real *t,
                    const nf_real *logdet, int n)
{
    const nf_coupling *cp = &((const spline_coupling_state *)b->state)->cp;
    const int D = cp->D;
    for (int i = 0; i < n; i++) {
        nf_real *oi = out + (size_t)i * D;
        const nf_real *ii = in + (size_t)i * D, *ti = t + (size_t)i * cp->dt;
        for (int k = 0; k < cp->dc; k++) oi[cp->cond[k]] = ii[cp->cond[k]];
        for (int k = 0; k < cp->dt; k++) oi[cp->trans[k]] = ti[k];
    }
    return nf_coupling_check(b, dir, out, logdet, n);
}

/* forward: theta = net(x_c, ctx);  y_t = s(x_t; theta);  logdet += sum log s'(x_t). */
static int sc_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                      nf_real *ws)
{
    spline_coupling_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    sc_ws w = layout(st, n);
    nf_coupling_condition(cp, b->P, ws, x, ctx, n);
    nf_coupling_gather(ws + w.a, x, cp->trans, cp->dt, cp->D, n);
    nf_rqspline_forward_cached(&st->spline, ws + w.o, logdet, NULL, ws + w.a, ws + w.cw.h, n, cp->dt, cp->dt,
                               ws + w.cache);
    return assemble(b, "forward", y, x, ws + w.o, logdet, n);
}

/* inverse: theta = net(y_c, ctx) (y_c = x_c);  x_t = s^-1(y_t; theta);  logdet -= sum log s'(x_t). */
static int sc_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                      nf_real *ws)
{
    spline_coupling_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    sc_ws w = layout(st, n);
    nf_coupling_condition(cp, b->P, ws, y, ctx, n);
    nf_coupling_gather(ws + w.a, y, cp->trans, cp->dt, cp->D, n);
    nf_rqspline_inverse(&st->spline, ws + w.o, logdet, NULL, ws + w.a, ws + w.cw.h, n, cp->dt, cp->dt);
    return assemble(b, "inverse", x, y, ws + w.o, logdet, n);
}

/* backward of forward:  dx_t += dy_t s' + u d log s'/dx;  dtheta = dy_t ds/dtheta + u d log s'/dtheta;
 * dx_c += dy_c + net^T dtheta  (u = dL/dlogdet). */
static int sc_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                       const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)x, (void)y;
    spline_coupling_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    sc_ws w = layout(st, n);
    size_t nt = (size_t)n * cp->dt;
    nf_real *gyt = ws + w.g, *dxt = ws + w.o;
    if (dy) nf_coupling_gather(gyt, dy, cp->trans, cp->dt, cp->D, n);
    memset(dxt, 0, nt * sizeof(nf_real));
    /* the forward's cache holds x_t's bins and the softmaxes; dh is written whole */
    nf_rqspline_backward_cached(&st->spline, dxt, ws + w.cw.dh, dy ? gyt : NULL, dlogdet, ws + w.cache, n, cp->dt,
                                cp->dt, 0);
    if (dx) {
        nf_coupling_scatter_add(dx, dxt, cp->trans, cp->dt, cp->D, n);
        if (dy)
            for (int i = 0; i < n; i++)
                for (int k = 0; k < cp->dc; k++) dx[(size_t)i * cp->D + cp->cond[k]] += dy[(size_t)i * cp->D + cp->cond[k]];
    }
    nf_coupling_condition_backward(cp, b->P, ws, dx, dctx, ctx, n);
    return NF_OK;
}

/* backward of inverse (x_t = s^-1(y_t)):  g = dx_t - u d log s'/dx;  dy_t += g / s';
 * dtheta = -(g / s') ds/dtheta - u d log s'/dtheta;  dy_c += dx_c + net^T dtheta. */
static int sc_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx, const nf_real *dlogdet,
                               const nf_real *y, const nf_real *x, const nf_real *ctx, int n, nf_real *ws)
{
    (void)y;
    spline_coupling_state *st = b->state;
    const nf_coupling *cp = &st->cp;
    sc_ws w = layout(st, n);
    size_t nt = (size_t)n * cp->dt;
    nf_real *xt = ws + w.a, *gxt = ws + w.g, *dyt = ws + w.o;
    nf_coupling_gather(xt, x, cp->trans, cp->dt, cp->D, n);
    if (dx) nf_coupling_gather(gxt, dx, cp->trans, cp->dt, cp->D, n);
    memset(dyt, 0, nt * sizeof(nf_real));
    nf_rqspline_inverse_backward_ex(&st->spline, dyt, ws + w.cw.dh, dx ? gxt : NULL, dlogdet, xt, ws + w.cw.h, n,
                                    cp->dt, cp->dt, 0); /* dh written whole */
    if (dy) {
        nf_coupling_scatter_add(dy, dyt, cp->trans, cp->dt, cp->D, n);
        if (dx)
            for (int i = 0; i < n; i++)
                for (int k = 0; k < cp->dc; k++) dy[(size_t)i * cp->D + cp->cond[k]] += dx[(size_t)i * cp->D + cp->cond[k]];
    }
    nf_coupling_condition_backward(cp, b->P, ws, dy, dctx, ctx, n);
    return NF_OK;
}

const nf_bijector_type nf_bijector_spline_coupling = {
    "spline-coupling",
    "bins=8 tail=3 " NF_COUPLING_OPTIONS_HELP " (residual defaults to 1)",
    sc_create, sc_destroy, sc_workspace, sc_forward, sc_inverse, sc_backward, sc_inverse_backward, NULL, NULL,
};
