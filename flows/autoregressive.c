/* flows/autoregressive.c - the MADE-conditioned autoregressive map shared by maf, iaf, spline-ar and
 * spline-iaf: fast and slow directions and their gradients (see autoregressive.h for the math). */
#include "flows/autoregressive.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/fastmath.h"
#include "flows/jacobi.h"

int nf_ar_create(nf_ar *ar, nf_bijector *b, nf_opts *opts, nf_rng *rng, const nf_ar_elem *elem, const void *cfg,
                 int per_dim)
{
    memset(ar, 0, sizeof *ar);
    const char *who = b->type->name, *act = NULL;
    nf_mlp_config mc;
    memset(&mc, 0, sizeof mc);
    NF_TRY(nf_opts_int(opts, "hidden", 64, 1, 1 << 16, &mc.hidden));
    NF_TRY(nf_opts_int(opts, "layers", 2, 0, 256, &mc.layers));
    NF_TRY(nf_opts_int(opts, "residual", 0, 0, 1, &mc.residual));
    NF_TRY(nf_opts_int(opts, "weight_norm", 0, 0, 1, &mc.weight_norm));
    NF_TRY(nf_opts_int(opts, "zero_init", 1, 0, 1, &mc.zero_init_output));
    NF_TRY(nf_opts_choice(opts, "order", NF_ORDER_CHOICES, NF_ORDER_NATURAL, &mc.order));
    NF_TRY(nf_opts_string(opts, "activation", "relu", &act));
    if (nf_activation_parse(act, &mc.act) != NF_OK)
        return nf_error(NF_EINVAL, "%s (%s): option activation=%s: expected one of %s", who, b->name, act,
                        NF_ACTIVATION_CHOICES);
    if (mc.residual && mc.layers < 1)
        return nf_error(NF_EINVAL, "%s (%s): residual=1 needs layers >= 1 (residual blocks), got layers=%d", who,
                        b->name, mc.layers);
    ar->elem = elem;
    ar->cfg = cfg;
    ar->D = b->dim;
    ar->C = b->ctx_dim;
    ar->P = per_dim;
    mc.in = ar->D;
    mc.ctx = ar->C;
    mc.out = ar->D * per_dim;
    mc.made = 1;
    mc.out_per_input = per_dim;
    char name[96];
    snprintf(name, sizeof name, "%s.made", b->name);
    int rc = nf_mlp_create(&ar->made, &mc, b->P, name, rng);
    if (rc != NF_OK) return nf_error_context(rc, "%s (%s): conditioner", who, b->name);

    ar->levels = nf_mlp_has_levels(ar->made);
    /* Group the dimensions by MADE degree: level k holds the dims a sequential pass k can fix. */
    const int *deg = nf_mlp_input_degrees(ar->made);
    int maxdeg = 0;
    for (int i = 0; i < ar->D; i++) maxdeg = deg[i] > maxdeg ? deg[i] : maxdeg;
    ar->depth = maxdeg;
    ar->level_start = nf_calloc((size_t)maxdeg + 1, sizeof(int), "autoregressive levels");
    ar->level_dims = nf_calloc((size_t)ar->D, sizeof(int), "autoregressive levels");
    if (!ar->level_start || !ar->level_dims) {
        nf_ar_free(ar);
        return nf_error_context(NF_ENOMEM, "%s (%s)", who, b->name);
    }
    int at = 0;
    for (int k = 1; k <= maxdeg; k++) {
        for (int i = 0; i < ar->D; i++)
            if (deg[i] == k) ar->level_dims[at++] = i;
        ar->level_start[k] = at;
    }
    return NF_OK;
}

void nf_ar_free(nf_ar *ar)
{
    if (!ar) return;
    nf_mlp_free(ar->made);
    free(ar->level_start);
    free(ar->level_dims);
    ar->made = NULL;
    ar->level_start = ar->level_dims = NULL;
}

/* Workspace regions (offsets in nf_reals).  The slow direction borrows the slow backward's
 * regions: g, r, del, sp hold the active rows gathered (input, w, output, log T'), dtheta the row
 * lists of the solver. */
typedef struct ar_ws {
    size_t theta;   /* (n, D*P) conditioner output at the last pass */
    size_t dtheta;  /* (n, D*P) its gradient */
    size_t lde;     /* (n, D) per-element log T' */
    size_t tmp;     /* (n, D) second Jacobi iterate; lambda in slow backward */
    size_t g, r, del, sp; /* (n, D) each, slow backward */
    size_t row;     /* (n) */
    size_t ctx;     /* (n, C) the active rows' context, slow direction */
    size_t cache;   /* the transform's cache (forward to backward), if it keeps one */
    size_t mlp;     /* the MADE's workspace */
    size_t total;
} ar_ws;

static ar_ws layout(const nf_ar *ar, int n)
{
    ar_ws w;
    size_t nd = (size_t)n * ar->D, ndp = nd * ar->P;
    w.theta = 0;
    w.dtheta = w.theta + ndp;
    w.lde = w.dtheta + (ndp > 3 * (size_t)n ? ndp : 3 * (size_t)n); /* also 3n ints */
    w.tmp = w.lde + nd;
    w.g = w.tmp + nd;
    w.r = w.g + nd;
    w.del = w.r + nd;
    w.sp = w.del + nd;
    w.row = w.sp + nd;
    w.ctx = w.row + (size_t)n;
    w.cache = w.ctx + (size_t)n * ar->C;
    w.mlp = w.cache + (ar->elem->cache_size ? ar->elem->cache_size(ar->cfg, n, ar->D) : 0);
    w.total = w.mlp + nf_mlp_workspace(ar->made, n);
    return w;
}

size_t nf_ar_workspace(const nf_ar *ar, int n) { return layout(ar, n).total; }

static int nonfinite(const nf_bijector *b, const char *dir, int row)
{
    return nf_error(NF_ENONFINITE, "%s (%s): %s produced a non-finite output or log-determinant in row %d "
                    "(non-finite input or context, or a diverged conditioner)", b->type->name, b->name, dir, row);
}

static int check_rows(const nf_bijector *b, const char *dir, const nf_real *out, const nf_real *logdet, int n, int D)
{
    if (!nf_any_nonfinite(out, (size_t)n * D) && !nf_any_nonfinite(logdet, (size_t)n)) return NF_OK;
    for (int r = 0; r < n; r++) {
        nf_real probe = 0; /* stays 0 unless an entry is inf or NaN */
        for (int j = 0; j < D; j++) probe += 0 * out[(size_t)r * D + j];
        if (probe != 0 || !isfinite(logdet[r])) return nonfinite(b, dir, r);
    }
    return NF_OK;
}

/* fast: theta = MADE(v);  w = T(v; theta);  logdet += sum_i log T'(v_i; theta_i). */
int nf_ar_fast(nf_bijector *b, const nf_ar *ar, nf_real *w, nf_real *logdet, const nf_real *v, const nf_real *ctx,
               int n, nf_real *ws)
{
    ar_ws L = layout(ar, n);
    b->last_sweeps = 1;
    b->last_fell_back = 0;
    nf_mlp_forward(ar->made, b->P, ws + L.mlp, ws + L.theta, v, ar->C ? ctx : NULL, n);
    if (ar->elem->forward_cached)
        ar->elem->forward_cached(ar->cfg, w, logdet, NULL, v, ws + L.theta, n, ar->D, ar->D, ws + L.cache);
    else
        ar->elem->forward(ar->cfg, w, logdet, NULL, v, ws + L.theta, n, ar->D, ar->D);
    return check_rows(b, "the fast (one-pass) direction", w, logdet, n, ar->D);
}

/* The sweep g(v) = T^-1(w; MADE(v)) for flows/jacobi.c, on the dims of degree lo..hi of the listed
 * rows (all when rows is NULL).  A subset of rows is gathered into compact buffers first, so the MADE
 * runs on those rows only. */
typedef struct ar_sweep {
    const nf_ar *ar;
    const nf_params *P;
    const nf_real *w, *ctx;
    nf_real *mlp_ws, *theta, *lde;
    nf_real *vc, *wc, *oc, *lc, *cc; /* (n, D) x4 and (n, C): the active rows */
    int level_done;                  /* the last level computed incrementally on all rows, or 0 */
} ar_sweep;

static void inverse_dims(const nf_ar *ar, nf_real *out, nf_real *lde, const nf_real *w, const nf_real *theta, int m,
                         int lo, int hi)
{
    const int D = ar->D, P = ar->P;
    if (lo <= 1 && hi >= ar->depth) {
        ar->elem->inverse(ar->cfg, out, NULL, lde, w, theta, m, D, D);
        return;
    }
    for (int a = ar->level_start[lo - 1]; a < ar->level_start[hi]; a++) {
        int j = ar->level_dims[a];
        ar->elem->inverse(ar->cfg, out + j, NULL, lde + j, w + j, theta + (size_t)j * P, m, 1, D);
    }
}

static int sweep(void *user, nf_real *v_new, const nf_real *v_old, const int *rows, int m, int lo, int hi)
{
    ar_sweep *u = user;
    const nf_ar *ar = u->ar;
    const int D = ar->D, C = ar->C;
    const size_t rb = (size_t)D * sizeof(nf_real);
    if (!rows && lo == hi && ar->levels && (lo == 1 || u->level_done == lo - 1)) {
        /* a sequential pass right after the previous level: only what degree lo adds */
        nf_mlp_forward_level(ar->made, u->P, u->mlp_ws, u->theta, v_old, C ? u->ctx : NULL, m, lo);
        u->level_done = lo;
        inverse_dims(ar, v_new, u->lde, u->w, u->theta, m, lo, hi);
        return NF_OK;
    }
    u->level_done = 0;
    if (!rows) {
        nf_mlp_forward(ar->made, u->P, u->mlp_ws, u->theta, v_old, C ? u->ctx : NULL, m);
        inverse_dims(ar, v_new, u->lde, u->w, u->theta, m, lo, hi);
        return NF_OK;
    }
    for (int i = 0; i < m; i++) {
        memcpy(u->vc + (size_t)i * D, v_old + (size_t)rows[i] * D, rb);
        memcpy(u->wc + (size_t)i * D, u->w + (size_t)rows[i] * D, rb);
        if (C) memcpy(u->cc + (size_t)i * C, u->ctx + (size_t)rows[i] * C, (size_t)C * sizeof(nf_real));
    }
    nf_mlp_forward(ar->made, u->P, u->mlp_ws, u->theta, u->vc, C ? u->cc : NULL, m);
    inverse_dims(ar, u->oc, u->lc, u->wc, u->theta, m, lo, hi);
    const int all = lo <= 1 && hi >= ar->depth;
    for (int i = 0; i < m; i++) {
        const size_t at = (size_t)rows[i] * D, ac = (size_t)i * D;
        if (all) {
            memcpy(v_new + at, u->oc + ac, rb);
            memcpy(u->lde + at, u->lc + ac, rb);
            continue;
        }
        for (int a = ar->level_start[lo - 1]; a < ar->level_start[hi]; a++) {
            int j = ar->level_dims[a];
            v_new[at + j] = u->oc[ac + j];
            u->lde[at + j] = u->lc[ac + j];
        }
    }
    return NF_OK;
}

/* The exact sequential solve of a plain MADE, level by level: for each degree k in order, what level
 * k adds to the MADE's pass (nf_mlp_forward_level), then the inverse of the dims of degree k.  The
 * rows are independent, so parts of them run on the pool's threads, each through every level (one
 * level alone is too small a product to split): the same values as the solver's sequential passes
 * over all rows at once, on any number of threads. */
typedef struct ar_levels {
    const nf_ar *ar;
    const nf_params *P;
    const nf_real *w, *ctx;
    nf_real *v, *mlp_ws, *theta, *lde;
    int n;
} ar_levels;

static void levels_rows(void *arg, int r0, int r1)
{
    const ar_levels *u = arg;
    const nf_ar *ar = u->ar;
    const size_t o = (size_t)r0 * ar->D;
    for (int k = 1; k <= ar->depth; k++) {
        nf_mlp_forward_level_rows(ar->made, u->P, u->mlp_ws, u->theta, u->v, ar->C ? u->ctx : NULL, u->n, r0, r1, k);
        inverse_dims(ar, u->v + o, u->lde + o, u->w + o, u->theta + o * ar->P, r1 - r0, k, k);
    }
}

/* slow: v = g(v) with g(v)_i = T^-1(w_i; theta_i(v)), from v = w, each row until its own change is
 * within tolerance;  logdet -= sum_i log T'(v_i; theta_i). */
int nf_ar_slow(nf_bijector *b, const nf_ar *ar, nf_real *v, nf_real *logdet, const nf_real *w, const nf_real *ctx,
               int n, nf_real *ws)
{
    ar_ws L = layout(ar, n);
    ar_sweep u = {ar, b->P, w, ctx, ws + L.mlp, ws + L.theta, ws + L.lde,
                  ws + L.g, ws + L.r, ws + L.del, ws + L.sp, ws + L.ctx, 0};
    nf_jacobi_config cfg = nf_jacobi_config_of(b, ar->depth);
    /* Level by level, the exact sequential solve costs one network pass: fewer than any Jacobi solve. */
    if (ar->levels && cfg.method == NF_INVERT_AUTO) cfg.method = NF_INVERT_SEQUENTIAL;
    if (ar->levels && cfg.method == NF_INVERT_SEQUENTIAL && n > 0) {
        memcpy(v, w, (size_t)n * ar->D * sizeof *v);
        ar_levels lv = {ar, b->P, w, ctx, v, u.mlp_ws, u.theta, u.lde, n};
        nf_mlp_run_rows(ar->made, n, levels_rows, &lv);
        b->last_sweeps = ar->depth;
        b->last_fell_back = 0;
    } else {
        nf_jacobi_result res;
        int rc = nf_jacobi_solve_rows(&cfg, sweep, &u, v, w, ws + L.tmp, n, (size_t)ar->D, (int *)(ws + L.dtheta),
                                      &res);
        b->last_sweeps = res.sweeps;
        b->last_fell_back = res.fell_back;
        if (rc != NF_OK) return nf_error_context(rc, "%s (%s)", b->type->name, b->name);
    }
    const nf_real *lde = ws + L.lde;
    for (int r = 0; r < n; r++) {
        double s = 0;
        for (int j = 0; j < ar->D; j++) s += lde[(size_t)r * ar->D + j];
        logdet[r] -= (nf_real)s;
    }
    return check_rows(b, "the slow (iterative) direction", v, logdet, n, ar->D);
}

/* The transform's backward after a forward at (v, theta) on this workspace, from its cache if it
 * keeps one; dtheta overwritten. */
static void elem_backward(const nf_ar *ar, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                          const nf_real *v, const nf_real *theta, int n, const nf_real *cache)
{
    if (ar->elem->backward_cached) ar->elem->backward_cached(ar->cfg, dv, dtheta, gw, gl, cache, n, ar->D, ar->D, 0);
    else ar->elem->backward(ar->cfg, dv, dtheta, gw, gl, v, theta, n, ar->D, ar->D, 0);
}

/* fast backward: dv += gw T' + gl dl/dv;  dtheta = gw dT/dtheta + gl dl/dtheta;  then the MADE's
 * backward: dv += M_v^T dtheta, dctx += M_ctx^T dtheta, P->grad += M_phi^T dtheta. */
int nf_ar_fast_backward(nf_bijector *b, const nf_ar *ar, nf_real *dv, nf_real *dctx, const nf_real *dw,
                        const nf_real *dlogdet, const nf_real *v, const nf_real *ctx, int n, nf_real *ws)
{
    ar_ws L = layout(ar, n);
    nf_real *theta = ws + L.theta, *dtheta = ws + L.dtheta;
    elem_backward(ar, dv, dtheta, dw, dlogdet, v, theta, n, ws + L.cache);
    nf_mlp_backward(ar->made, b->P, ws + L.mlp, dv, ar->C ? dctx : NULL, dtheta, v, ar->C ? ctx : NULL, n);
    return NF_OK;
}

/* slow backward (v = F^-1(w) the solution, gv = dL/dv, gl = dL/dlogdet of -sum l):
 *   G = gv - gl dl/dv (direct);  c = -gl dl/dtheta through the MADE: r = M_v^T c (and phi, ctx grads);
 *   lambda^{t+1} = (G + r^t) / T',  r^{t+1} = r^t + M_v^T(-(lambda^{t+1} - lambda^t) dT/dtheta);
 *   dw += lambda once it stops changing (at most depth passes). */
int nf_ar_slow_backward(nf_bijector *b, const nf_ar *ar, nf_real *dw, nf_real *dctx, const nf_real *dv,
                        const nf_real *dlogdet, const nf_real *v, const nf_real *ctx, int n, nf_real *ws)
{
    ar_ws L = layout(ar, n);
    const int D = ar->D;
    const size_t nd = (size_t)n * D;
    const nf_real *c = ar->C ? ctx : NULL;
    nf_real *dc = ar->C ? dctx : NULL;
    nf_real *theta = ws + L.theta, *dtheta = ws + L.dtheta, *lde = ws + L.lde, *lam = ws + L.tmp;
    nf_real *G = ws + L.g, *r = ws + L.r, *del = ws + L.del, *sp = ws + L.sp, *row = ws + L.row;

    /* The conditioner at the solution, so its cache (and theta) belong to v. */
    nf_mlp_forward(ar->made, b->P, ws + L.mlp, theta, v, c, n);
    /* del: scratch for T(v); the transform's cache then serves every backward below */
    if (ar->elem->forward_cached) ar->elem->forward_cached(ar->cfg, del, NULL, lde, v, theta, n, D, D, ws + L.cache);
    else ar->elem->forward(ar->cfg, del, NULL, lde, v, theta, n, D, D);
    for (size_t e = 0; e < nd; e++) sp[e] = (nf_real)exp((double)lde[e]);

    if (dv) memcpy(G, dv, nd * sizeof(nf_real));
    else memset(G, 0, nd * sizeof(nf_real));
    memset(r, 0, nd * sizeof(nf_real));
    int any = 0;
    for (int i = 0; i < n; i++) {
        row[i] = dlogdet ? -dlogdet[i] : 0;
        any |= row[i] != 0;
    }
    if (any) {
        elem_backward(ar, G, dtheta, NULL, row, v, theta, n, ws + L.cache);
        nf_mlp_backward(ar->made, b->P, ws + L.mlp, r, dc, dtheta, v, c, n);
    }
    memset(lam, 0, nd * sizeof(nf_real));
    for (int t = 1; t <= ar->depth; t++) {
        int changed = 0;
        for (size_t e = 0; e < nd; e++) {
            nf_real next = (G[e] + r[e]) / sp[e];
            del[e] = lam[e] - next; /* -(change of lambda) */
            changed |= del[e] != 0;
            lam[e] = next;
        }
        if (!changed) break;
        elem_backward(ar, NULL, dtheta, del, NULL, v, theta, n, ws + L.cache);
        nf_mlp_backward(ar->made, b->P, ws + L.mlp, r, dc, dtheta, v, c, n);
    }
    if (dw)
        for (size_t e = 0; e < nd; e++) dw[e] += lam[e];
    return NF_OK;
}

/* ---- the bijector-type entries (a state that begins with its nf_ar) ---------------------------------- */

#define STATE_AR(b) ((nf_ar *)(b)->state)

void nf_ar_type_destroy(nf_bijector *b)
{
    if (!b->state) return;
    nf_ar_free(STATE_AR(b));
    free(b->state);
}

size_t nf_ar_type_workspace(const nf_bijector *b, int n) { return nf_ar_workspace((const nf_ar *)b->state, n); }

/* The four directions by what they run, in the bijector table's argument order: forward and inverse
 * both take (out, logdet, in), backward and inverse_backward both (d_in, dctx, d_out, dlogdet, in,
 * out).  The fast map's v is its input; the slow map's v (the solution) is its output. */
int nf_ar_type_fast(nf_bijector *b, nf_real *out, nf_real *logdet, const nf_real *in, const nf_real *ctx, int n,
                    nf_real *ws)
{
    return nf_ar_fast(b, STATE_AR(b), out, logdet, in, ctx, n, ws);
}

int nf_ar_type_slow(nf_bijector *b, nf_real *out, nf_real *logdet, const nf_real *in, const nf_real *ctx, int n,
                    nf_real *ws)
{
    return nf_ar_slow(b, STATE_AR(b), out, logdet, in, ctx, n, ws);
}

int nf_ar_type_fast_backward(nf_bijector *b, nf_real *d_in, nf_real *dctx, const nf_real *d_out,
                             const nf_real *dlogdet, const nf_real *in, const nf_real *out, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)out;
    return nf_ar_fast_backward(b, STATE_AR(b), d_in, dctx, d_out, dlogdet, in, ctx, n, ws);
}

int nf_ar_type_slow_backward(nf_bijector *b, nf_real *d_in, nf_real *dctx, const nf_real *d_out,
                             const nf_real *dlogdet, const nf_real *in, const nf_real *out, const nf_real *ctx, int n,
                             nf_real *ws)
{
    (void)in;
    return nf_ar_slow_backward(b, STATE_AR(b), d_in, dctx, d_out, dlogdet, out, ctx, n, ws);
}
