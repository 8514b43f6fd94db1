/* training/model_causal.c - the "causal" kind: interventional normalizing flows (Melnychuk, Frauen
 * and Feuerriegel, ICML 2023).  Units (x, a, y) arrive as rows y with context [x, a].
 *
 * Standardisation (fixed at create, kept in the state store S): xs = (x - m_x) / s_x,
 * ys = (y - m_y) / s_y; every density below is of ys, and log p(y) = log p(ys) - sum log s_y.
 * The flows' ActNorm layers are set at create too, from the training units and the grid
 * (causal_init_data), so nothing depends on the first batch (or on a process's part of it).
 *
 * Stage 1, "nuisance".  R = tanh(W_r xs + b_r) (n, R); propensity logit g = w_p . R + b_p,
 * pi_1(x) = sigma(g), pi_0 = 1 - pi_1; p(ys | x, a) a flow on ys with context [R + s_r eps, a]
 * ("spline-ar(...), maf(...), actnorm" in the density direction: a conditional rational-quadratic
 * spline, whose parameters come from the context only at 1-D, then a conditional affine (location
 * and scale from the context) and a learned affine, on a standard normal base), ys read with noise
 * s_y eps' in training.  Per unit
 *     l_i = -log p(ys_i + s_y eps' | R_i + s_r eps, a_i) + alpha [softplus(g_i) - a_i g_i]
 * and the loss is the batch mean.  Backward: dL/dlog p = -1/n through the flow into its weights and
 * the context; dL/dR = dctx[:R] + (alpha / n)(sigma(g) - a) w_p; dL/d(W_r xs + b_r) = dL/dR (1 - R^2).
 * With cfg.shift the flow reads ys - B_a xs instead of ys (a shift: no Jacobian term), B (2, dy, dx)
 * each arm's least-squares slopes on the training units, fixed at create (shift_start; in S): the
 * flow models the residual of a linear fit, so a trend in x extrapolates linearly beyond an arm's
 * covariates, where the tanh networks level off.  (Training B with the flow as well let the networks
 * take part of the trend back, and extrapolated worse: bench/RESULTS.md.)  Every use of p(y | x, a)
 * below (grid, draws, plug-in) goes through the same shift (shift_rows).
 *
 * Stage 2, "target".  On a grid y_1..y_K spanning the standardised training range +- margin
 * (spacing D), with p_iak = p(y_k | x_i, a) from the nuisance (evaluation mode, no noise) and
 * w_ia = 1{A_i = a} 1{pi_a(x_i) >= clip} / pi_a(x_i), each arm's flow q_a ("spline-ar(...),
 * actnorm", unconditional) has the loss
 *     CE_a + BC_a = (1/n) sum_i [ sum_k D (1 - w_ia) p_iak (-log q_a(y_k)) + w_ia (-log q_a(Y_i)) ],
 * i.e. CE = -sum_k D xi_a(y_k) log q_a(y_k), xi_a the batch mean of p(. | x_i, a), and
 * BC = mean_i w_ia (-log q_a(Y_i) - CE_ia), CE_ia the grid cross-entropy under p(. | x_i, a).  The
 * loss of the batch is the sum over both arms; its gradient reaches log q_a as
 *     dL/dlog q_a(y_k) = -(D/n) sum_i (1 - w_ia) p_iak,   dL/dlog q_a(Y_i) = -w_ia / n.
 * Next to each q_a the ablation q'_a is trained on CE alone (w = 0), on the same grid and batch; the
 * stage's loss is the sum of the four flows' losses (they share no parameters).
 * Outcomes of two or more dimensions have no grid: the expectation under p(. | x_i, a) is taken over
 * M draws y_i1..y_iM of the nuisance flow (evaluation mode; latents from a stream keyed by the unit's
 * index, so a unit's draws are the same in any batch or process), CE_ia = -(1/M) sum_j log q_a(y_ij),
 * and q_a is an autoregressive spline flow (two spline-ar layers, the second in reversed order):
 *     dL/dlog q_a(y_ij) = -(1 - w_ia) / (n M),   dL/dlog q_a(Y_i) = -w_ia / n.
 * The per-unit metric is minus unit i's term.  Before each step the moving average of the target
 * weights is updated, ema <- d ema + (1 - d) theta (the weights before the step; ema = theta at the
 * first), and validation and every use after training read the average (nf_causal_swap_ema).
 */
#include "training/model_causal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>

#include "datasets/causal.h"
#include "nn/nn.h"

typedef struct causal_state {
    nf_causal_config cfg;
    nf_linear repr, prop;
    nf_flow *nu, *q[2][2];             /* q[v][a]: v 0 with BC, v 1 without (the ablation) */
    size_t nuis_count;                 /* stage 1 trains P[0, nuis_count) */
    size_t tgt_first, tgt_count;       /* stage 2 trains P[tgt_first, +tgt_count) */
    size_t s_xm, s_xs, s_ym, s_ys, s_lo, s_hi, s_ref, s_ema, s_steps; /* offsets in S */
    size_t s_shift;                    /* with cfg.shift: B (2, dy, dx) in S, arm a's (dy, dx) at a dy dx */
    int training;
    /* unit buffers (cap rows) */
    int cap;
    nf_real *xs, *h, *r, *dr, *dh, *ctx, *dctx, *ys, *lp, *dlp, *g, *dg, *lws;
    /* grid buffers: (cap_g) nuisance rows, (cap_q) target rows */
    size_t cap_g, cap_q;
    nf_real *ctxg, *yg, *zg, *lpg, *pk, *yq, *lq, *dlq, *w;
    /* stage 2: grid values of units by index, one cache for the training batches and one for the
     * validation's (see nuisance_grid) */
    struct grid_cache {
        size_t n;
        nf_real *p, *ctx;          /* (n, unit_values), (n, dx + 1) */
        unsigned char *ok;         /* (n) */
        double sum;                /* nuisance_checksum when filled */
        int valid;
    } cache[2];
} causal_state;

static const char *const stage_names[] = {"nuisance", "target"};

/* ---- buffers ------------------------------------------------------------------------------------ */

static void free_buffers(causal_state *st)
{
    nf_real **p[] = {&st->xs, &st->h,  &st->r,   &st->dr,  &st->dh,  &st->ctx, &st->dctx, &st->ys,
                     &st->lp, &st->dlp, &st->g,  &st->dg,  &st->lws, &st->ctxg, &st->yg, &st->zg, &st->lpg,
                     &st->pk, &st->yq, &st->lq, &st->dlq, &st->w};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
    for (int c = 0; c < 2; c++) {
        free(st->cache[c].p), free(st->cache[c].ctx), free(st->cache[c].ok);
        memset(&st->cache[c], 0, sizeof st->cache[c]);
    }
    st->cap = 0;
    st->cap_g = st->cap_q = 0;
}

static int grow(nf_real **p, size_t n)
{
    nf_real *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q) return nf_error(NF_ENOMEM, "out of memory for a causal batch");
    *p = q;
    return NF_OK;
}

enum { CACHE_MAX_ENTRIES = 1 << 26 }; /* nf_reals of grid values kept across steps (256 MiB in float) */

/* The values stage 2 keeps per unit, both arms: its grid densities (2K) for a 1-D outcome, else its
 * draws (2 M dy). */
static size_t unit_values(const causal_state *st)
{
    return st->cfg.dy == 1 ? 2 * (size_t)st->cfg.grid : 2 * (size_t)st->cfg.draws * (size_t)st->cfg.dy;
}

/* nuisance rows of one unit's stage-2 values (both arms) */
static size_t unit_rows(const causal_state *st)
{
    return st->cfg.dy == 1 ? 2 * (size_t)st->cfg.grid : 2 * (size_t)st->cfg.draws;
}

static int cache_grow(const causal_state *st, struct grid_cache *gc, size_t n)
{
    size_t want = n > 2 * gc->n ? n : 2 * gc->n, K2 = unit_values(st), W = (size_t)st->cfg.dx + 1;
    if (want * (K2 + W) > CACHE_MAX_ENTRIES) want = n;
    nf_real *p = realloc(gc->p, want * K2 * sizeof *p);
    if (p) gc->p = p;
    nf_real *c = p ? realloc(gc->ctx, want * W * sizeof *c) : NULL;
    if (c) gc->ctx = c;
    unsigned char *ok = c ? realloc(gc->ok, want) : NULL;
    if (!ok) return nf_error(NF_ENOMEM, "out of memory for the grid values of %zu units", want);
    gc->ok = ok;
    memset(ok + gc->n, 0, want - gc->n);
    gc->n = want;
    return NF_OK;
}

static int reserve_units(causal_state *st, int n)
{
    if (n <= st->cap) return NF_OK;
    const size_t R = (size_t)st->cfg.repr, N = (size_t)n;
    size_t lw = nf_linear_workspace(&st->repr, n) + nf_linear_workspace(&st->prop, n);
    int rc = NF_OK;
    struct {
        nf_real **p;
        size_t size;
    } b[] = {{&st->xs, N * st->cfg.dx}, {&st->h, N * R},  {&st->r, N * R},  {&st->dr, N * R},
             {&st->dh, N * R},          {&st->ctx, N * (R + 1)}, {&st->dctx, N * (R + 1)},
             {&st->ys, N * st->cfg.dy}, {&st->lp, N},     {&st->dlp, N},    {&st->g, N},
             {&st->dg, N},              {&st->lws, lw},   {&st->w, 2 * N},
             {&st->pk, N * unit_values(st)}};
    for (size_t i = 0; rc == NF_OK && i < sizeof b / sizeof b[0]; i++) rc = grow(b[i].p, b[i].size);
    if (rc == NF_OK) st->cap = n;
    return rc;
}

/* rows_g: nuisance rows of one call (2K for a unit's grid, or the plug-in's references); the
 * batch's grid values pk (2, n, K) are sized by reserve_units. */
static int reserve_grid(causal_state *st, size_t rows_g, size_t rows_q)
{
    const size_t R = (size_t)st->cfg.repr;
    if (rows_g > st->cap_g) {
        NF_TRY(grow(&st->ctxg, rows_g * (R + 1)));
        NF_TRY(grow(&st->yg, rows_g * st->cfg.dy));
        NF_TRY(grow(&st->zg, rows_g * st->cfg.dy));
        NF_TRY(grow(&st->lpg, 2 * rows_g * st->cfg.dy)); /* log-densities, then one unit's values */
        st->cap_g = rows_g;
    }
    if (rows_q > st->cap_q) {
        NF_TRY(grow(&st->yq, rows_q * st->cfg.dy));
        NF_TRY(grow(&st->lq, rows_q));
        NF_TRY(grow(&st->dlq, rows_q));
        st->cap_q = rows_q;
    }
    return NF_OK;
}

/* ---- shared pieces ------------------------------------------------------------------------------ */

static double log_scale_y(const nf_model *m)
{
    const causal_state *st = m->state;
    double s = 0;
    for (int j = 0; j < st->cfg.dy; j++) s += log(m->S->value[st->s_ys + j]);
    return s;
}

/* xs, h = W_r xs + b_r, r = tanh(h), g = w_p . r + b_p for covariates x (n rows, stride ldx). */
static void encode(nf_model *m, const nf_real *x, int ldx, int n)
{
    causal_state *st = m->state;
    const int dx = st->cfg.dx, R = st->cfg.repr;
    const nf_real *S = m->S->value;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dx; j++)
            st->xs[(size_t)i * dx + j] = (x[(size_t)i * ldx + j] - S[st->s_xm + j]) / S[st->s_xs + j];
    nf_linear_forward(&st->repr, m->P, st->lws, st->h, st->xs, n);
    nf_act_forward(NF_ACT_TANH, st->r, st->h, (size_t)n * R);
    nf_linear_forward(&st->prop, m->P, st->lws, st->g, st->r, n);
}

/* pi_a(x_i) from the logit g_i, without overflow */
static double prop_arm(double g, int a) { return a ? 1 / (1 + exp(-g)) : 1 / (1 + exp(g)); }

static void standardise_y(const nf_model *m, nf_real *ys, const nf_real *y, int n)
{
    const causal_state *st = m->state;
    const int dy = st->cfg.dy;
    const nf_real *S = m->S->value;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dy; j++)
            ys[(size_t)i * dy + j] = (y[(size_t)i * dy + j] - S[st->s_ym + j]) / S[st->s_ys + j];
}

/* The nuisance's linear shift (cfg.shift): y -= sign B_a xs over n rows of y (dy each) sharing the
 * standardised covariates xs (dx), or one row of xs per row of y when xs_stride is dx.  Without the
 * shift nothing changes. */
static void shift_rows(const nf_model *m, nf_real *y, int n, const nf_real *xs, int xs_stride, int a, double sign)
{
    const causal_state *st = m->state;
    if (!st->cfg.shift) return;
    const int dx = st->cfg.dx, dy = st->cfg.dy;
    const nf_real *B = m->S->value + st->s_shift + (size_t)a * dy * dx;
    for (int i = 0; i < n; i++) {
        const nf_real *x = xs + (size_t)i * xs_stride;
        for (int j = 0; j < dy; j++) {
            double s = 0;
            for (int k = 0; k < dx; k++) s += (double)B[(size_t)j * dx + k] * x[k];
            y[(size_t)i * dy + j] -= (nf_real)(sign * s);
        }
    }
}

/* shift_rows for n units (encode() done): each one's outcome ys_i (dy) less its own arm's line at its
 * covariates; ctx the units' [x, a] rows. */
static void shift_units(const nf_model *m, nf_real *ys, const nf_real *ctx, int n)
{
    const causal_state *st = m->state;
    const int dx = st->cfg.dx;
    for (int i = 0; st->cfg.shift && i < n; i++)
        shift_rows(m, ys + (size_t)i * st->cfg.dy, 1, st->xs + (size_t)i * dx, dx,
                   ctx[(size_t)i * (dx + 1) + dx] == 1, 1);
}

/* The shift (cfg.shift, at create): per arm the ridge least-squares slopes of the standardised
 * outcomes on the standardised covariates of that arm's n_a units (intercept by centring),
 *     B_a = argmin sum_{i: A_i = a} ||(ys_i - mean) - B (xs_i - mean)||^2 + n_a 1e-3 ||B||^2,
 * so the flow models the residuals and its network need not carry a trend it cannot extrapolate.
 * xs (n, dx) and ys (n, dy) of the units, a_i their arms.  An arm without units keeps B_a = 0. */
static int shift_start(nf_model *m, const nf_real *xs, const nf_real *ys, const nf_real *ctx, int n)
{
    causal_state *st = m->state;
    const int dx = st->cfg.dx, dy = st->cfg.dy, W = dx + 1;
    gsl_matrix *G = gsl_matrix_alloc((size_t)dx, (size_t)dx);
    gsl_vector *r = gsl_vector_alloc((size_t)dx), *mx = gsl_vector_alloc((size_t)dx);
    double *my = malloc((size_t)dy * sizeof *my);
    int rc = G && r && mx && my ? NF_OK : nf_error(NF_ENOMEM, "out of memory for the causal shift's start");
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    for (int a = 0; rc == NF_OK && a < 2; a++) {
        int na = 0;
        gsl_vector_set_zero(mx);
        for (int j = 0; j < dy; j++) my[j] = 0;
        for (int i = 0; i < n; i++)
            if ((ctx[(size_t)i * W + dx] == 1) == a) {
                na++;
                for (int k = 0; k < dx; k++) mx->data[k] += xs[(size_t)i * dx + k];
                for (int j = 0; j < dy; j++) my[j] += ys[(size_t)i * dy + j];
            }
        if (na < 2) continue;
        gsl_vector_scale(mx, 1.0 / na);
        for (int j = 0; j < dy; j++) my[j] /= na;
        gsl_matrix_set_zero(G);
        for (int i = 0; i < n; i++)
            if ((ctx[(size_t)i * W + dx] == 1) == a)
                for (int k = 0; k < dx; k++)
                    for (int l = 0; l <= k; l++)
                        G->data[k * dx + l] +=
                            (xs[(size_t)i * dx + k] - mx->data[k]) * (xs[(size_t)i * dx + l] - mx->data[l]);
        for (int k = 0; k < dx; k++) G->data[k * dx + k] += 1e-3 * na;
        if (gsl_linalg_cholesky_decomp1(G) != GSL_SUCCESS) continue; /* lower triangle read; SPD by the ridge */
        for (int j = 0; j < dy; j++) {
            gsl_vector_set_zero(r);
            for (int i = 0; i < n; i++)
                if ((ctx[(size_t)i * W + dx] == 1) == a)
                    for (int k = 0; k < dx; k++)
                        r->data[k] += (xs[(size_t)i * dx + k] - mx->data[k]) * (ys[(size_t)i * dy + j] - my[j]);
            gsl_linalg_cholesky_svx(G, r);
            for (int k = 0; k < dx; k++)
                m->S->value[st->s_shift + ((size_t)a * dy + j) * dx + k] = (nf_real)r->data[k];
        }
    }
    gsl_set_error_handler(old);
    gsl_matrix_free(G), gsl_vector_free(r), gsl_vector_free(mx), free(my);
    return rc;
}

/* ---- stage 1 ------------------------------------------------------------------------------------ */

/* Per-unit l_i (values, may be NULL) and the mean loss; with grad the gradient is added to P. */
static int nuisance_pass(nf_model *m, const nf_batch *b, nf_rng *rng, int grad, double *values, double *loss)
{
    causal_state *st = m->state;
    const int n = b->n, R = st->cfg.repr, dx = st->cfg.dx, C = R + 1;
    NF_TRY(reserve_units(st, n));
    encode(m, b->ctx, dx + 1, n);
    const int noisy = st->training && rng;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < R; j++)
            st->ctx[(size_t)i * C + j] =
                st->r[(size_t)i * R + j] + (nf_real)(noisy && st->cfg.noise_r > 0 ? st->cfg.noise_r * nf_rng_normal(rng) : 0);
        st->ctx[(size_t)i * C + R] = b->ctx[(size_t)i * (dx + 1) + dx];
    }
    standardise_y(m, st->ys, b->x, n);
    if (noisy && st->cfg.noise_y > 0)
        for (size_t k = 0; k < (size_t)n * st->cfg.dy; k++) st->ys[k] += (nf_real)(st->cfg.noise_y * nf_rng_normal(rng));
    shift_units(m, st->ys, b->ctx, n);
    NF_TRY(nf_flow_log_prob(st->nu, st->lp, st->ys, st->ctx, NULL, n));
    const double lsy = log_scale_y(m), alpha = st->cfg.alpha;
    double total = 0;
    for (int i = 0; i < n; i++) {
        double a = b->ctx[(size_t)i * (dx + 1) + dx], g = st->g[i];
        double bce = (g > 0 ? g + log1p(exp(-g)) : log1p(exp(g))) - a * g;
        double li = -(st->lp[i] - lsy) + alpha * bce;
        if (values) values[i] = -li;
        total += li;
    }
    *loss = total / n;
    if (!isfinite(*loss)) return nf_error(NF_ENONFINITE, "nuisance loss is %g", *loss);
    if (!grad) return NF_OK;
    for (int i = 0; i < n; i++) {
        double a = b->ctx[(size_t)i * (dx + 1) + dx];
        st->dlp[i] = (nf_real)(-1.0 / n);
        st->dg[i] = (nf_real)(alpha / n * (prop_arm(st->g[i], 1) - a));
    }
    memset(st->dctx, 0, (size_t)n * C * sizeof(nf_real));
    NF_TRY(nf_flow_backward(st->nu, st->dlp, NULL, st->dctx));
    for (int i = 0; i < n; i++) memcpy(st->dr + (size_t)i * R, st->dctx + (size_t)i * C, (size_t)R * sizeof(nf_real));
    nf_linear_backward(&st->prop, m->P, st->lws, st->dr, st->dg, st->r, n);
    memset(st->dh, 0, (size_t)n * R * sizeof(nf_real));
    nf_act_backward(NF_ACT_TANH, st->dh, st->dr, st->h, st->r, (size_t)n * R);
    nf_linear_backward(&st->repr, m->P, st->lws, NULL, st->dh, st->xs, n);
    return NF_OK;
}

/* ---- stage 2 ------------------------------------------------------------------------------------ */

static double grid_step(const causal_state *st, const nf_params *S)
{
    return (S->value[st->s_hi] - S->value[st->s_lo]) / (st->cfg.grid - 1);
}

/* A checksum of the nuisance entries of P: the stage-2 cache is valid while it is unchanged. */
static double nuisance_checksum(const nf_model *m)
{
    const causal_state *st = m->state;
    double s = 0;
    for (size_t k = 0; k < st->nuis_count; k++) s += (double)m->P->value[k] * (double)(k % 7 + 1);
    return s;
}

/* p(y_k | x_i, a) for one unit, both arms: out[a K + k], from its representation r (R).  One flow
 * call per unit, so a unit's values never depend on the batch it came in (resumed runs, which
 * refill the cache in other batches, stay bit-identical). */
static int unit_grid(nf_model *m, const nf_real *r, const nf_real *xs, nf_real *out)
{
    causal_state *st = m->state;
    const int K = st->cfg.grid, R = st->cfg.repr, C = R + 1;
    const double lo = m->S->value[st->s_lo], D = grid_step(st, m->S);
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < K; k++) {
            size_t row = (size_t)a * K + k;
            memcpy(st->ctxg + row * C, r, (size_t)R * sizeof(nf_real));
            st->ctxg[row * C + R] = (nf_real)a;
            st->yg[row] = (nf_real)(lo + D * k);
        }
    for (int a = 0; a < 2; a++) shift_rows(m, st->yg + (size_t)a * K, K, xs, 0, a, 1);
    NF_TRY(nf_flow_log_prob(st->nu, st->lpg, st->yg, st->ctxg, NULL, 2 * K));
    for (int k = 0; k < 2 * K; k++) out[k] = (nf_real)exp(st->lpg[k]);
    return NF_OK;
}

/* M draws of y ~ p(. | x, a) for one unit, both arms: out[(a M + j) dy + d], from its representation
 * r (R), in evaluation mode; the latents come from a stream keyed by the unit's index u in its
 * source (and the cache it fills), so its draws never depend on the batch or the process. */
static int unit_draws(nf_model *m, const nf_real *r, const nf_real *xs, size_t u, int which, nf_real *out)
{
    causal_state *st = m->state;
    const int M = st->cfg.draws, R = st->cfg.repr, C = R + 1;
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < M; j++) {
            size_t row = (size_t)a * M + j;
            memcpy(st->ctxg + row * C, r, (size_t)R * sizeof(nf_real));
            st->ctxg[row * C + R] = (nf_real)a;
        }
    nf_rng *rng = nf_rng_alloc(st->cfg.seed ^ 0xd4a3u, 2 * (uint64_t)u + (uint64_t)which);
    if (!rng) return nf_error(NF_ENOMEM, "out of memory for a unit's draws");
    nf_rng_fill_normal(rng, st->zg, unit_values(st));
    nf_rng_free(rng);
    NF_TRY(nf_flow_sample_latent(st->nu, out, NULL, st->zg, st->ctxg, 2 * M));
    for (int a = 0; a < 2; a++) shift_rows(m, out + (size_t)a * M * st->cfg.dy, M, xs, 0, a, -1);
    return NF_OK;
}

/* A 1-D outcome: p_iak = p(y_k | x_i, a) into st->pk[(a n + i) K + k]; wider ones: unit i's draws
 * from p(. | x_i, a) into st->pk[(a n + i) M dy ...]; w_ia into st->w[a n + i], for the
 * batch's units (encode() done).  The grid values of each unit are kept in cache[which] (0 for
 * training batches, 1 for evaluation) by its index in the source with a copy of its context row,
 * and reused while the nuisance entries of P are unchanged (stage 2 holds them fixed): after the
 * first epoch a step evaluates no nuisance. */
static int nuisance_grid(nf_model *m, const nf_batch *b, int which)
{
    struct grid_cache *gc = &((causal_state *)m->state)->cache[which];
    causal_state *st = m->state;
    const int n = b->n, R = st->cfg.repr, dx = st->cfg.dx, W = dx + 1, dy = st->cfg.dy;
    const size_t V = unit_values(st), L = V / 2, rows = (size_t)n * L;
    NF_TRY(reserve_grid(st, unit_rows(st), dy == 1 ? (size_t)st->cfg.grid + n : (size_t)n * (st->cfg.draws + 1)));
    double sum = nuisance_checksum(m);
    if (sum != gc->sum || !gc->valid) {
        if (gc->ok) memset(gc->ok, 0, gc->n);
        gc->sum = sum;
        gc->valid = 1;
    }
    nf_flow_set_training(st->nu, 0);
    int rc = NF_OK;
    nf_real *tmp = st->lpg + unit_rows(st); /* (V) after the log-densities */
    for (int i = 0; rc == NF_OK && i < n; i++) {
        size_t u = b->idx[i];
        const nf_real *row = b->ctx + (size_t)i * W;
        int use = (u + 1) * (V + W) <= CACHE_MAX_ENTRIES;
        if (use && u >= gc->n) rc = cache_grow(st, gc, u + 1);
        nf_real *p = use && rc == NF_OK ? gc->p + u * V : tmp;
        if (rc == NF_OK && !(use && gc->ok[u] && !memcmp(gc->ctx + u * W, row, (size_t)W * sizeof *row))) {
            const nf_real *ri = st->r + (size_t)i * R, *xi = st->xs + (size_t)i * dx;
            rc = dy == 1 ? unit_grid(m, ri, xi, p) : unit_draws(m, ri, xi, u, which, p);
            if (rc == NF_OK && use) {
                memcpy(gc->ctx + u * W, row, (size_t)W * sizeof *row);
                gc->ok[u] = 1;
            }
        }
        for (int a = 0; rc == NF_OK && a < 2; a++)
            memcpy(st->pk + a * rows + (size_t)i * L, p + (size_t)a * L, L * sizeof *p);
    }
    nf_flow_set_training(st->nu, st->training);
    for (int a = 0; rc == NF_OK && a < 2; a++)
        for (int i = 0; i < n; i++) {
            int ai = b->ctx[(size_t)i * W + dx] == 1;
            double pi = prop_arm(st->g[i], a);
            st->w[a * n + i] = (nf_real)(ai == a && pi >= st->cfg.clip ? 1 / pi : 0);
        }
    return rc;
}

static void ema_update(nf_model *m)
{
    causal_state *st = m->state;
    nf_real *e = m->S->value + st->s_ema, *steps = m->S->value + st->s_steps;
    const nf_real *p = m->P->value + st->tgt_first;
    const double d = st->cfg.ema;
    if (*steps == 0) memcpy(e, p, st->tgt_count * sizeof *e);
    else
        for (size_t k = 0; k < st->tgt_count; k++) e[k] = (nf_real)(d * e[k] + (1 - d) * p[k]);
    *steps += 1;
}

void nf_causal_swap_ema(nf_model *m)
{
    causal_state *st = m->state;
    if (m->S->value[st->s_steps] == 0) return;
    nf_real *e = m->S->value + st->s_ema, *p = m->P->value + st->tgt_first;
    for (size_t k = 0; k < st->tgt_count; k++) {
        nf_real t = e[k];
        e[k] = p[k];
        p[k] = t;
    }
}

/* CE + BC of both arms and both variants by the nuisance draws (outcomes of 2 or more dimensions;
 * st->pk, st->w and st->ys filled by target_pass); per flow one log_prob of the n M draws, then the
 * units that enter BC. */
static int target_pass_draws(nf_model *m, int n, int grad, double *values, double *total)
{
    causal_state *st = m->state;
    const int M = st->cfg.draws, dy = st->cfg.dy;
    const size_t L = (size_t)M * dy;
    for (int v = 0; v < 2; v++)
        for (int a = 0; a < 2; a++) {
            const nf_real *draws = st->pk + (size_t)a * n * L, *w = st->w + a * n;
            const int nd = n * M;
            int nq = nd;
            memcpy(st->yq, draws, (size_t)n * L * sizeof *draws);
            for (int i = 0; v == 0 && i < n; i++)
                if (w[i] != 0) memcpy(st->yq + (size_t)nq++ * dy, st->ys + (size_t)i * dy, (size_t)dy * sizeof *st->ys);
            NF_TRY(nf_flow_log_prob(st->q[v][a], st->lq, st->yq, NULL, NULL, nq));
            for (int i = 0, j = nd; i < n; i++) {
                double wi = v == 0 ? w[i] : 0, c = (1 - wi) / M, ti = 0;
                for (int t = 0; t < M; t++) {
                    ti -= c * st->lq[(size_t)i * M + t];
                    st->dlq[(size_t)i * M + t] = (nf_real)(-c / n);
                }
                if (wi != 0) {
                    ti -= wi * st->lq[j];
                    st->dlq[j++] = (nf_real)(-wi / n);
                }
                *total += ti;
                if (values) values[i] -= ti;
            }
            if (grad) NF_TRY(nf_flow_backward(st->q[v][a], st->dlq, NULL, NULL));
        }
    return NF_OK;
}

static int target_pass(nf_model *m, const nf_batch *b, int grad, double *values, double *loss)
{
    causal_state *st = m->state;
    const int n = b->n, K = st->cfg.grid, dx = st->cfg.dx;
    NF_TRY(reserve_units(st, n));
    encode(m, b->ctx, dx + 1, n);
    NF_TRY(nuisance_grid(m, b, grad ? 0 : 1));
    standardise_y(m, st->ys, b->x, n);
    if (st->cfg.dy > 1) {
        double total = 0;
        if (values)
            for (int i = 0; i < n; i++) values[i] = 0;
        NF_TRY(target_pass_draws(m, n, grad, values, &total));
        *loss = total / n;
        if (!isfinite(*loss)) return nf_error(NF_ENONFINITE, "target loss is %g", *loss);
        return NF_OK;
    }
    const double lo = m->S->value[st->s_lo], D = grid_step(st, m->S);
    const size_t rows = (size_t)n * K;
    if (values)
        for (int i = 0; i < n; i++) values[i] = 0;
    double total = 0;
    for (int v = 0; v < 2; v++)
        for (int a = 0; a < 2; a++) {
            /* rows: the grid, then the units that enter BC (none for the ablation v = 1) */
            const nf_real *pk = st->pk + a * rows, *w = st->w + a * n;
            int nq = K;
            for (int k = 0; k < K; k++) st->yq[k] = (nf_real)(lo + D * k);
            for (int i = 0; v == 0 && i < n; i++)
                if (w[i] != 0) st->yq[nq++] = st->ys[i];
            NF_TRY(nf_flow_log_prob(st->q[v][a], st->lq, st->yq, NULL, NULL, nq));
            for (int k = 0; k < K; k++) st->dlq[k] = 0;
            for (int i = 0, j = K; i < n; i++) {
                double wi = v == 0 ? w[i] : 0, ti = 0;
                for (int k = 0; k < K; k++) {
                    double c = D * (1 - wi) * pk[(size_t)i * K + k];
                    ti -= c * st->lq[k];
                    st->dlq[k] -= (nf_real)(c / n);
                }
                if (wi != 0) {
                    ti -= wi * st->lq[j];
                    st->dlq[j++] = (nf_real)(-wi / n);
                }
                total += ti;
                if (values) values[i] -= ti;
            }
            if (grad) NF_TRY(nf_flow_backward(st->q[v][a], st->dlq, NULL, NULL));
        }
    *loss = total / n;
    if (!isfinite(*loss)) return nf_error(NF_ENONFINITE, "target loss is %g", *loss);
    return NF_OK;
}

/* ---- the kind ----------------------------------------------------------------------------------- */

static int check_batch(const nf_model *m, const nf_batch *b)
{
    const causal_state *st = m->state;
    if (b->dim != st->cfg.dy || b->ctx_dim != st->cfg.dx + 1 || !b->ctx)
        return nf_error(NF_EINVAL, "units with %d outcome and %d context columns (expected %d and %d: x then a)",
                        b->dim, b->ctx_dim, st->cfg.dy, st->cfg.dx + 1);
    return NF_OK;
}

static int causal_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    NF_TRY(check_batch(m, b));
    if (m->stage == 0) return nuisance_pass(m, b, rng, 1, NULL, loss);
    return target_pass(m, b, 1, NULL, loss);
}

/* The moving average advances once per step of stage 2, in every process (one that holds no unit
 * of a small batch too), with the weights before the step. */
static void causal_before_step(nf_model *m)
{
    if (m->stage == 1) ema_update(m);
}

static int causal_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    NF_TRY(check_batch(m, b));
    double loss;
    if (m->stage == 0) return nuisance_pass(m, b, NULL, 0, values, &loss);
    nf_causal_swap_ema(m);
    int rc = target_pass(m, b, 0, values, &loss);
    nf_causal_swap_ema(m);
    return rc;
}

static void causal_set_training(nf_model *m, int training)
{
    causal_state *st = m->state;
    st->training = training;
    nf_flow_set_training(st->nu, training);
    for (int k = 0; k < 4; k++) nf_flow_set_training(st->q[k / 2][k % 2], training);
}

static int causal_set_stage(nf_model *m, int stage)
{
    causal_state *st = m->state;
    if (stage == 0) m->train_first = 0, m->train_count = st->nuis_count;
    else m->train_first = st->tgt_first, m->train_count = st->tgt_count;
    return NF_OK;
}

/* Every flow's ActNorm from a fixed sample, once, before training: the nuisance flow's from the
 * first min(n, 4096) training units (standardised outcomes, context [R(x), a] at the initial
 * weights, no noise), each target flow's from the K grid points of its cross-entropy.  Left alone,
 * ActNorm would set itself from the first batch it meets in training mode, which in a parallel run
 * is a different part of the batch in each process (the processes would then train different
 * models), and in stage 2 depends on which units of the batch enter the bias correction.  The sample
 * depends on the training items only, not on the batch or the number of processes; flows already
 * initialised are left as they are.  Without a grid (outcomes of 2 or more dimensions) the target
 * flows' ActNorm comes from the sample's standardised outcomes. */
static int causal_init_data(nf_model *m, const nf_source *train)
{
    enum { INIT_UNITS = 4096 };
    causal_state *st = m->state;
    const int n = (int)(train->n < INIT_UNITS ? train->n : INIT_UNITS), K = st->cfg.grid;
    const int R = st->cfg.repr, C = R + 1, dx = st->cfg.dx;
    if (n < 1) return nf_error(NF_EDATA, "%s: no training units to initialise the causal flows from", train->name);
    size_t *idx = malloc((size_t)n * sizeof *idx);
    nf_batch b = {0};
    int rc = idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory initialising from %d units", n);
    for (int i = 0; rc == NF_OK && i < n; i++) idx[i] = (size_t)i;
    if (rc == NF_OK) rc = nf_source_fetch(train, idx, n, &b);
    if (rc == NF_OK) rc = check_batch(m, &b);
    if (rc == NF_OK) rc = reserve_units(st, n);
    if (rc == NF_OK) rc = reserve_grid(st, 0, (size_t)(K > n ? K : n));
    if (rc == NF_OK) {
        encode(m, b.ctx, dx + 1, n);
        for (int i = 0; i < n; i++) {
            memcpy(st->ctx + (size_t)i * C, st->r + (size_t)i * R, (size_t)R * sizeof(nf_real));
            st->ctx[(size_t)i * C + R] = b.ctx[(size_t)i * (dx + 1) + dx];
        }
        standardise_y(m, st->ys, b.x, n);
        if (st->cfg.shift) rc = shift_start(m, st->xs, st->ys, b.ctx, n);
        shift_units(m, st->ys, b.ctx, n);
        nf_flow_set_training(st->nu, 1);
        if (rc == NF_OK) rc = nf_flow_log_prob(st->nu, st->lp, st->ys, st->ctx, NULL, n);
        nf_flow_set_training(st->nu, st->training);
    }
    const int dy = st->cfg.dy, nq = dy == 1 ? K : n;
    const double lo = m->S->value[st->s_lo], D = grid_step(st, m->S);
    for (int k = 0; rc == NF_OK && k < K && dy == 1; k++) st->yq[k] = (nf_real)(lo + D * k);
    if (rc == NF_OK && dy > 1) memcpy(st->yq, st->ys, (size_t)n * dy * sizeof *st->yq);
    for (int k = 0; rc == NF_OK && k < 4; k++) {
        nf_flow *q = st->q[k / 2][k % 2];
        nf_flow_set_training(q, 1);
        rc = nf_flow_log_prob(q, st->lq, st->yq, NULL, NULL, nq);
        nf_flow_set_training(q, st->training);
    }
    nf_batch_free(&b);
    free(idx);
    free_buffers(st); /* sized for the sample; training's batches grow their own */
    return rc;
}

static void causal_destroy(nf_model *m)
{
    causal_state *st = m->state;
    if (st) {
        free_buffers(st);
        nf_flow_free(st->nu);
        for (int k = 0; k < 4; k++) nf_flow_free(st->q[k / 2][k % 2]);
        free(st);
    }
    nf_params_free(m->P);
    nf_params_free(m->S);
    m->P = m->S = NULL;
    m->state = NULL;
    m->flow = NULL;
}

#define CFG_FIELDS(X)                                                                                                 \
    X(dx) X(dy) X(repr) X(hidden) X(bins) X(grid) X(noise_r) X(noise_y) X(alpha) X(clip) X(ema)        \
    X(n_ref) X(margin) X(draws) X(shift)

static int causal_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const causal_state *st = m->state;
    char path[256];
    snprintf(path, sizeof path, "%s/causal", group);
    NF_TRY(nf_h5_group(f, path));
#define SAVE(name) NF_TRY(nf_h5_attr_set_double(f, path, #name, (double)st->cfg.name));
    CFG_FIELDS(SAVE)
#undef SAVE
    return nf_h5_attr_set_int64(f, path, "seed", (int64_t)st->cfg.seed);
}

/* The components into a fresh store, in a fixed order: stage 1's entries first, then stage 2's. */
static int build(nf_model *m, const nf_causal_config *c, double tail)
{
    causal_state *st = nf_calloc(1, sizeof *st, "causal model");
    m->P = nf_params_alloc();
    m->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(c->seed, 0xca05a1);
    m->state = st;
    if (!st || !m->P || !m->S || !rng) {
        nf_rng_free(rng);
        return nf_error(NF_ENOMEM, "out of memory building a causal model");
    }
    st->cfg = *c;
    char spec[256];
    int rc = nf_linear_init(&st->repr, m->P, "nuisance.repr", c->dx, c->repr, 0, NULL, rng);
    if (rc == NF_OK) rc = nf_linear_init(&st->prop, m->P, "nuisance.propensity", c->repr, 1, 0, NULL, rng);
    snprintf(spec, sizeof spec,
             "spline-ar(bins=%d,tail=%.17g,hidden=%d,layers=2,activation=tanh), maf(hidden=%d,layers=1,activation=tanh), "
             "actnorm",
             c->bins, tail, c->hidden, c->hidden);
    if (rc == NF_OK) rc = nf_flow_build(&st->nu, spec, c->dy, c->repr + 1, c->seed + 1, m->P, m->S, "nuisance.flow.");
    st->nuis_count = m->P->n;
    st->tgt_first = m->P->n;
    if (c->dy == 1)
        snprintf(spec, sizeof spec, "spline-ar(bins=%d,tail=%.17g,hidden=8,layers=1), actnorm", c->bins, tail);
    else
        snprintf(spec, sizeof spec,
                 "spline-ar(bins=%d,tail=%.17g,hidden=%d,layers=2), spline-ar(bins=%d,tail=%.17g,hidden=%d,layers=2,"
                 "order=reversed), actnorm",
                 c->bins, tail, c->hidden, c->bins, tail, c->hidden);
    const char *prefix[4] = {"target0.", "target1.", "nobc0.", "nobc1."};
    for (int k = 0; rc == NF_OK && k < 4; k++)
        rc = nf_flow_build(&st->q[k / 2][k % 2], spec, c->dy, 0, c->seed + 2 + k, m->P, m->S, prefix[k]);
    if (rc == NF_OK) st->tgt_count = m->P->n - st->tgt_first;
    const struct {
        const char *name;
        size_t size, *off;
    } s[] = {{"stats.x_mean", (size_t)c->dx, &st->s_xm},          {"stats.x_scale", (size_t)c->dx, &st->s_xs},
             {"stats.y_mean", (size_t)c->dy, &st->s_ym},          {"stats.y_scale", (size_t)c->dy, &st->s_ys},
             {"stats.grid_lo", (size_t)c->dy, &st->s_lo},         {"stats.grid_hi", (size_t)c->dy, &st->s_hi},
             {"plugin.x", (size_t)c->n_ref * c->dx, &st->s_ref}, {"ema.target", st->tgt_count, &st->s_ema},
             {"ema.steps", 1, &st->s_steps}};
    for (size_t k = 0; rc == NF_OK && k < sizeof s / sizeof s[0]; k++) rc = nf_params_add(m->S, s[k].name, s[k].size, s[k].off);
    if (rc == NF_OK && c->shift) rc = nf_params_add(m->S, "stats.shift", 2 * (size_t)c->dy * c->dx, &st->s_shift);
    nf_rng_free(rng);
    m->ctx_dim = c->dx + 1;
    return rc;
}

static int causal_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    char path[256];
    snprintf(path, sizeof path, "%s/causal", group);
    nf_causal_config c;
    nf_causal_config_init(&c);
    int64_t n[7];
    const char *int_names[7] = {"dx", "dy", "repr", "hidden", "bins", "grid", "n_ref"};
    for (int k = 0; k < 7; k++) NF_TRY(nf_h5_attr_get_int64_in(f, path, int_names[k], 0, 1 << 24, &n[k]));
    c.dx = (int)n[0], c.dy = (int)n[1], c.repr = (int)n[2], c.hidden = (int)n[3], c.bins = (int)n[4];
    c.grid = (int)n[5], c.n_ref = (int)n[6];
    double *real[6] = {&c.noise_r, &c.noise_y, &c.alpha, &c.clip, &c.ema, &c.margin};
    const char *real_names[6] = {"noise_r", "noise_y", "alpha", "clip", "ema", "margin"};
    for (int k = 0; k < 6; k++) NF_TRY(nf_h5_attr_get_double(f, path, real_names[k], real[k]));
    int64_t draws = c.draws; /* files from before 2-D outcomes have no draws */
    if (nf_h5_attr_exists(f, path, "draws") == 1) NF_TRY(nf_h5_attr_get_int64_in(f, path, "draws", 0, 1 << 24, &draws));
    c.draws = (int)draws;
    int64_t shift = 0; /* files from before the linear shift have none */
    if (nf_h5_attr_exists(f, path, "shift") == 1) NF_TRY(nf_h5_attr_get_int64_in(f, path, "shift", 0, 1, &shift));
    c.shift = (int)shift;
    int64_t seed;
    NF_TRY(nf_h5_attr_get_int64(f, path, "seed", &seed));
    c.seed = (uint64_t)seed;
    NF_TRY(nf_causal_config_check(&c));
    /* the spline's tail is rebuilt from the grid range, which the store then holds */
    double tail;
    NF_TRY(nf_h5_attr_get_double(f, path, "tail", &tail));
    const int rc = build(m, &c, tail);
    if (rc != NF_OK) causal_destroy(m); /* the caller destroys only what loaded */
    return rc;
}

static int causal_save_all(const nf_model *m, nf_h5 *f, const char *group)
{
    NF_TRY(causal_save(m, f, group));
    const causal_state *st = m->state;
    char path[256];
    snprintf(path, sizeof path, "%s/causal", group);
    double tail = 0;
    for (int j = 0; j < st->cfg.dy; j++)
        tail = fmax(tail, fmax(fabs(m->S->value[st->s_lo + j]), fabs(m->S->value[st->s_hi + j])));
    return nf_h5_attr_set_double(f, path, "tail", tail);
}

const nf_model_type nf_model_causal = {
    .kind = "causal",
    .summary = "interventional normalizing flows: the density of each potential outcome (nuisance, then target flows)",
    .command = "nf causal",
    .source_kind = "rows",
    .metric = "log_likelihood",
    .loss = causal_loss,
    .eval = causal_eval,
    .init_data = causal_init_data,
    .set_training = causal_set_training,
    .save = causal_save_all,
    .load = causal_load,
    .destroy = causal_destroy,
    .n_stages = 2,
    .stage_names = stage_names,
    .set_stage = causal_set_stage,
    .before_step = causal_before_step,
};

void nf_causal_config_init(nf_causal_config *c)
{
    memset(c, 0, sizeof *c);
    c->dx = c->dy = 1;
    c->repr = 16;
    c->hidden = 32;
    c->bins = 8;
    c->grid = 200;
    c->noise_r = 0.05;
    c->noise_y = 0.05;
    c->alpha = 1;
    c->clip = 0.05;
    c->ema = 0.995;
    c->margin = 0.5;
    c->draws = 32;
    c->seed = 1;
}

int nf_causal_config_check(const nf_causal_config *c)
{
    if (c->dx < 1 || c->dx > 4096) return nf_error(NF_EINVAL, "%d covariates (expected 1..4096)", c->dx);
    if (c->dy < 1 || c->dy > 16) return nf_error(NF_EINVAL, "a %d-D outcome (expected 1..16 columns)", c->dy);
    if (c->draws < 1 || c->draws > 4096) return nf_error(NF_EINVAL, "%d draws per unit (expected 1..4096)", c->draws);
    if (c->repr < 1 || c->repr > 4096 || c->hidden < 1 || c->hidden > 4096)
        return nf_error(NF_EINVAL, "widths %d and %d (expected 1..4096)", c->repr, c->hidden);
    if (c->bins < 2 || c->bins > 64) return nf_error(NF_EINVAL, "%d spline bins (expected 2..64)", c->bins);
    if (c->grid < 8 || c->grid > 100000) return nf_error(NF_EINVAL, "%d grid points (expected 8..100000)", c->grid);
    if (!(c->noise_r >= 0 && c->noise_r <= 1) || !(c->noise_y >= 0 && c->noise_y <= 1))
        return nf_error(NF_EINVAL, "noise %g, %g (expected 0..1)", c->noise_r, c->noise_y);
    if (!(c->alpha >= 0 && c->alpha <= 1e6)) return nf_error(NF_EINVAL, "alpha %g (expected >= 0)", c->alpha);
    if (!(c->clip > 0 && c->clip < 0.5)) return nf_error(NF_EINVAL, "clip %g (expected in (0, 0.5))", c->clip);
    if (!(c->ema >= 0 && c->ema < 1)) return nf_error(NF_EINVAL, "moving-average decay %g (expected in [0, 1))", c->ema);
    if (!(c->margin >= 0 && c->margin <= 100)) return nf_error(NF_EINVAL, "margin %g (expected 0..100)", c->margin);
    if (c->n_ref < 0 || c->n_ref > 100000) return nf_error(NF_EINVAL, "%d reference units (expected 0..100000)", c->n_ref);
    return NF_OK;
}

const nf_causal_config *nf_model_causal_config(const nf_model *m)
{
    return m && m->type == &nf_model_causal ? &((const causal_state *)m->state)->cfg : NULL;
}

enum { MAX_REF = 1000 };

/* Every training unit this process holds (all of them in one process), in batches fetched from
 * memory: fn(user, batch) on each. */
static int each_own_unit(const nf_source *train, void (*fn)(void *user, const nf_batch *b), void *user)
{
    enum { CHUNK = 1024 };
    size_t idx[CHUNK];
    nf_batch b = {0};
    int rc = NF_OK, k = 0;
    for (size_t i = 0; rc == NF_OK && i < train->n; i++) {
        if (nf_source_owns(train, i)) idx[k++] = i;
        if (k == CHUNK || (k > 0 && i + 1 == train->n)) {
            rc = nf_source_fetch(train, idx, k, &b);
            if (rc == NF_OK) fn(user, &b);
            k = 0;
        }
    }
    nf_batch_free(&b);
    return rc;
}

/* The training units' moments, summed over the units of every process.  sum = [n, treated,
 * sum y_j (dy), sum x_j (dx)], top = [max y_j (dy), max -y_j (dy)]; then, with the means,
 * dev = [sum (y_j - ym_j)^2 (dy), sum (x_j - xm_j)^2 (dx)]. */
typedef struct {
    int dx, dy;
    double *sum, *top, *dev; /* (2 + dy + dx), (2 dy), (dy + dx) */
} unit_moments;

static void add_sums(void *user, const nf_batch *b)
{
    unit_moments *u = user;
    const int dx = u->dx, dy = u->dy;
    double *s = u->sum, *ys = s + 2, *xs = s + 2 + dy;
    for (int i = 0; i < b->n; i++) {
        const nf_real *c = b->ctx + (size_t)i * (dx + 1), *y = b->x + (size_t)i * dy;
        s[0] += 1, s[1] += c[dx] == 1;
        for (int j = 0; j < dy; j++) {
            ys[j] += y[j];
            u->top[j] = fmax(u->top[j], y[j]), u->top[dy + j] = fmax(u->top[dy + j], -y[j]);
        }
        for (int j = 0; j < dx; j++) xs[j] += c[j];
    }
}

static void add_deviations(void *user, const nf_batch *b)
{
    unit_moments *u = user;
    const int dx = u->dx, dy = u->dy;
    const double *ym = u->sum + 2, *xm = u->sum + 2 + dy; /* the means by now */
    for (int i = 0; i < b->n; i++) {
        const nf_real *c = b->ctx + (size_t)i * (dx + 1), *y = b->x + (size_t)i * dy;
        for (int j = 0; j < dy; j++) u->dev[j] += (y[j] - ym[j]) * (y[j] - ym[j]);
        for (int j = 0; j < dx; j++) u->dev[dy + j] += (c[j] - xm[j]) * (c[j] - xm[j]);
    }
}

/* Two passes over the units each process holds, each followed by one sum over processes (and one
 * maximum).  Leaves in u: sum[2 + j] = ym_j, sum[2 + dy + j] = xm_j, dev[j] = ys_j, dev[dy + j] =
 * xs_j, top[j] and -top[dy + j] the largest and smallest y_j, sum[0] the count. */
static int unit_moments_of(unit_moments *u, const nf_source *train, const nf_train_comm *comm)
{
    const size_t dx = (size_t)u->dx, dy = (size_t)u->dy, w = 2 + dy + dx;
    for (size_t j = 0; j < 2 * dy; j++) u->top[j] = -INFINITY;
    int rc = each_own_unit(train, add_sums, u);
    if (rc == NF_OK && comm) rc = comm->sum_double(comm->user, u->sum, w);
    if (rc == NF_OK && comm) rc = comm->max_double(comm->user, u->top, 2 * dy);
    if (rc == NF_OK) rc = nf_causal_check_arms((size_t)u->sum[0], (size_t)u->sum[1], train->name);
    NF_TRY(rc);
    const double n = u->sum[0];
    for (size_t j = 2; j < w; j++) u->sum[j] /= n;
    rc = each_own_unit(train, add_deviations, u);
    if (rc == NF_OK && comm) rc = comm->sum_double(comm->user, u->dev, dy + dx);
    for (size_t j = 0; rc == NF_OK && j < dy + dx; j++) {
        const double v = u->dev[j] / n;
        u->dev[j] = j < dy ? (v > 0 ? sqrt(v) : 1) : (v > 1e-12 ? sqrt(v) : 1);
    }
    return rc;
}

/* The plug-in's reference covariates: n_ref evenly spaced training units (the same in every
 * process; a share reads those it does not hold from the file). */
static int keep_references(nf_model *m, const nf_source *train)
{
    causal_state *st = m->state;
    const int nr = st->cfg.n_ref, dx = st->cfg.dx;
    if (nr < 1) return NF_OK;
    size_t *idx = malloc((size_t)nr * sizeof *idx);
    nf_batch b = {0};
    int rc = idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    for (int k = 0; rc == NF_OK && k < nr; k++) idx[k] = (size_t)k * train->n / (size_t)nr;
    if (rc == NF_OK) rc = nf_source_fetch(train, idx, nr, &b);
    for (int k = 0; rc == NF_OK && k < nr; k++)
        for (int j = 0; j < dx; j++) m->S->value[st->s_ref + (size_t)k * dx + j] = b.ctx[(size_t)k * (dx + 1) + j];
    nf_batch_free(&b);
    free(idx);
    return rc;
}

int nf_model_causal_create(nf_model **out, const nf_causal_config *cfg, const nf_source *train)
{
    return nf_model_causal_create_shared(out, cfg, train, NULL);
}

int nf_model_causal_create_shared(nf_model **out, const nf_causal_config *cfg, const nf_source *train,
                                  const nf_train_comm *comm)
{
    *out = NULL;
    if (comm && comm->size <= 1) comm = NULL;
    if (strcmp(train->type->kind, "rows") || train->dim < 1 || train->ctx_dim < 2)
        return nf_error(NF_EINVAL, "%s: a causal model trains on units loaded as rows with context [x, a]",
                        train->name);
    if (train->partial && !comm)
        return nf_error(NF_EINVAL, "%s: a share of the units without the other processes (expected all units, or "
                                   "the communicator of the parallel run)", train->name);
    if (comm && !comm->max_double)
        return nf_error(NF_EINVAL, "a communicator without max_double (the outcome range is a maximum over the "
                                   "processes)");
    nf_causal_config c = *cfg;
    c.dx = train->ctx_dim - 1;
    c.dy = train->dim;
    c.n_ref = train->n < MAX_REF ? (int)train->n : MAX_REF;
    NF_TRY(nf_causal_config_check(&c));
    const size_t dx = (size_t)c.dx, dy = (size_t)c.dy;
    double *buf = calloc(2 + 5 * dy + 2 * dx, sizeof *buf), *lo = calloc(2 * dy, sizeof *lo), *hi = lo + dy;
    if (!buf || !lo) {
        free(buf), free(lo);
        return nf_error(NF_ENOMEM, "out of memory");
    }
    unit_moments u = {.dx = c.dx, .dy = c.dy, .sum = buf, .top = buf + 2 + dy + dx, .dev = buf + 2 + 3 * dy + dx};
    int rc = unit_moments_of(&u, train, comm);
    /* the standardised outcome range (a division keeps the order: these are the extremes of the
     * standardised values), rounded to the store's type first, so the tail rebuilt from the store on
     * loading is this one */
    double tail = 0;
    for (size_t j = 0; rc == NF_OK && j < dy; j++) {
        const double ym = u.sum[2 + j], ys = u.dev[j];
        lo[j] = (nf_real)((-u.top[dy + j] - ym) / ys - c.margin), hi[j] = (nf_real)((u.top[j] - ym) / ys + c.margin);
        tail = fmax(tail, fmax(fabs(lo[j]), fabs(hi[j])));
    }
    nf_model *m = rc == NF_OK ? nf_calloc(1, sizeof *m, "model") : NULL;
    if (rc == NF_OK && !m) rc = NF_ENOMEM;
    if (rc == NF_OK) {
        m->type = &nf_model_causal;
        rc = build(m, &c, tail);
    }
    if (rc == NF_OK) {
        causal_state *st = m->state;
        nf_real *S = m->S->value;
        for (size_t j = 0; j < dx; j++)
            S[st->s_xm + j] = (nf_real)u.sum[2 + dy + j], S[st->s_xs + j] = (nf_real)u.dev[dy + j];
        for (size_t j = 0; j < dy; j++) {
            S[st->s_ym + j] = (nf_real)u.sum[2 + j], S[st->s_ys + j] = (nf_real)u.dev[j];
            S[st->s_lo + j] = (nf_real)lo[j], S[st->s_hi + j] = (nf_real)hi[j];
        }
        rc = keep_references(m, train);
    }
    free(lo);
    free(buf);
    if (rc == NF_OK) {
        nf_model_set_stage(m, 0);
        rc = causal_init_data(m, train);
    }
    if (rc != NF_OK) {
        nf_model_free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

/* ---- densities, draws and means ------------------------------------------------------------------ */

int nf_causal_logp(nf_model *m, nf_causal_estimator est, int arm, const double *y, size_t n, double *out)
{
    if (m->type != &nf_model_causal) return nf_error(NF_EINVAL, "a '%s' model is not a causal model", m->type->kind);
    if (arm != 0 && arm != 1) return nf_error(NF_EINVAL, "arm %d (expected 0 or 1)", arm);
    causal_state *st = m->state;
    const int R = st->cfg.repr, C = R + 1, nr = st->cfg.n_ref, dy = st->cfg.dy;
    const double lsy = log_scale_y(m);
    const nf_real *ym = m->S->value + st->s_ym, *ys = m->S->value + st->s_ys;
    nf_model_set_training(m, 0);
    int rc = NF_OK;
    if (est == NF_CAUSAL_TARGET || est == NF_CAUSAL_NOBC) {
        nf_flow *q = st->q[est == NF_CAUSAL_NOBC][arm];
        const int chunk = 4096;
        NF_TRY(reserve_grid(st, 0, (size_t)chunk));
        nf_causal_swap_ema(m);
        for (size_t at = 0; rc == NF_OK && at < n; at += (size_t)chunk) {
            int k = (int)(n - at < (size_t)chunk ? n - at : (size_t)chunk);
            for (int i = 0; i < k; i++)
                for (int j = 0; j < dy; j++)
                    st->yq[(size_t)i * dy + j] = (nf_real)((y[(at + i) * dy + j] - ym[j]) / ys[j]);
            rc = nf_flow_log_prob(q, st->lq, st->yq, NULL, NULL, k);
            for (int i = 0; rc == NF_OK && i < k; i++) out[at + i] = st->lq[i] - lsy;
        }
        nf_causal_swap_ema(m);
        return rc;
    }
    if (nr < 1) return nf_error(NF_EINVAL, "the model keeps no reference covariates for the plug-in");
    NF_TRY(reserve_units(st, nr));
    encode(m, m->S->value + st->s_ref, st->cfg.dx, nr);
    NF_TRY(reserve_grid(st, (size_t)nr, 0));
    for (int j = 0; j < nr; j++) {
        memcpy(st->ctxg + (size_t)j * C, st->r + (size_t)j * R, (size_t)R * sizeof(nf_real));
        st->ctxg[(size_t)j * C + R] = (nf_real)arm;
    }
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        for (int k = 0; k < nr; k++)
            for (int j = 0; j < dy; j++) st->yg[(size_t)k * dy + j] = (nf_real)((y[i * dy + j] - ym[j]) / ys[j]);
        shift_rows(m, st->yg, nr, st->xs, st->cfg.dx, arm, 1);
        rc = nf_flow_log_prob(st->nu, st->lpg, st->yg, st->ctxg, NULL, nr);
        double mx = -INFINITY, s = 0;
        for (int j = 0; rc == NF_OK && j < nr; j++) mx = fmax(mx, st->lpg[j]);
        for (int j = 0; rc == NF_OK && j < nr; j++) s += exp(st->lpg[j] - mx);
        out[i] = mx + log(s / nr) - lsy;
    }
    return rc;
}

int nf_causal_sample(nf_model *m, nf_causal_estimator est, int arm, size_t n, nf_rng *rng, double *y)
{
    if (est == NF_CAUSAL_PLUGIN) return nf_error(NF_EINVAL, "draws come from a target flow (not the plug-in)");
    if (m->type != &nf_model_causal) return nf_error(NF_EINVAL, "a '%s' model is not a causal model", m->type->kind);
    if (arm != 0 && arm != 1) return nf_error(NF_EINVAL, "arm %d (expected 0 or 1)", arm);
    causal_state *st = m->state;
    const nf_real *ym = m->S->value + st->s_ym, *ys = m->S->value + st->s_ys;
    const int chunk = 4096, dy = st->cfg.dy;
    NF_TRY(reserve_grid(st, 0, (size_t)chunk));
    nf_model_set_training(m, 0);
    nf_causal_swap_ema(m);
    int rc = NF_OK;
    for (size_t at = 0; rc == NF_OK && at < n; at += (size_t)chunk) {
        int k = (int)(n - at < (size_t)chunk ? n - at : (size_t)chunk);
        rc = nf_flow_sample(st->q[est == NF_CAUSAL_NOBC][arm], st->yq, NULL, NULL, k, rng);
        for (int i = 0; rc == NF_OK && i < k; i++)
            for (int j = 0; j < dy; j++) y[(at + i) * dy + j] = ym[j] + ys[j] * st->yq[(size_t)i * dy + j];
    }
    nf_causal_swap_ema(m);
    return rc;
}

/* Draws of Y[arm] from the plug-in (n, dy): y_k ~ p(. | x_(k mod n_ref), arm), the reference
 * covariates in turn. */
static int plugin_sample(nf_model *m, int arm, size_t n, nf_rng *rng, double *y)
{
    causal_state *st = m->state;
    const int R = st->cfg.repr, C = R + 1, nr = st->cfg.n_ref, dy = st->cfg.dy;
    const nf_real *ym = m->S->value + st->s_ym, *ys = m->S->value + st->s_ys;
    if (nr < 1) return nf_error(NF_EINVAL, "the model keeps no reference covariates for the plug-in");
    nf_model_set_training(m, 0);
    NF_TRY(reserve_units(st, nr));
    encode(m, m->S->value + st->s_ref, st->cfg.dx, nr);
    NF_TRY(reserve_grid(st, (size_t)nr, 0));
    int rc = NF_OK;
    for (size_t at = 0; rc == NF_OK && at < n; at += (size_t)nr) {
        int k = (int)(n - at < (size_t)nr ? n - at : (size_t)nr);
        for (int j = 0; j < k; j++) {
            memcpy(st->ctxg + (size_t)j * C, st->r + (size_t)j * R, (size_t)R * sizeof(nf_real));
            st->ctxg[(size_t)j * C + R] = (nf_real)arm;
        }
        rc = nf_flow_sample(st->nu, st->yg, NULL, st->ctxg, k, rng);
        shift_rows(m, st->yg, k, st->xs, st->cfg.dx, arm, -1);
        for (int i = 0; rc == NF_OK && i < k; i++)
            for (int j = 0; j < dy; j++) y[(at + i) * dy + j] = ym[j] + ys[j] * st->yg[(size_t)i * dy + j];
    }
    return rc;
}

/* The mean of 20,000 draws (outcomes of 2 or more dimensions). */
static int sample_mean(nf_model *m, nf_causal_estimator est, int arm, double *mean)
{
    enum { DRAWS = 20000 };
    const int dy = ((causal_state *)m->state)->cfg.dy;
    double *y = malloc((size_t)DRAWS * dy * sizeof *y);
    nf_rng *rng = nf_rng_alloc(0x3ea9, (uint64_t)arm);
    int rc = y && rng ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK)
        rc = est == NF_CAUSAL_PLUGIN ? plugin_sample(m, arm, DRAWS, rng, y)
                                      : nf_causal_sample(m, est, arm, DRAWS, rng, y);
    for (int j = 0; rc == NF_OK && j < dy; j++) {
        double s = 0;
        for (size_t i = 0; i < DRAWS; i++) s += y[i * dy + j];
        mean[j] = s / DRAWS;
    }
    free(y);
    nf_rng_free(rng);
    return rc;
}

int nf_causal_mean(nf_model *m, nf_causal_estimator est, int arm, double *mean)
{
    if (m->type != &nf_model_causal) return nf_error(NF_EINVAL, "a '%s' model is not a causal model", m->type->kind);
    causal_state *st = m->state;
    if (st->cfg.dy > 1) return sample_mean(m, est, arm, mean);
    const int K = 801;
    const double ym = m->S->value[st->s_ym], ys = m->S->value[st->s_ys];
    /* the grid's range widened by half on each side: the estimate's mass outside is negligible */
    double lo = m->S->value[st->s_lo], hi = m->S->value[st->s_hi], w = hi - lo;
    lo -= w / 2, hi += w / 2;
    double *y = malloc(K * sizeof *y), *lp = malloc(K * sizeof *lp);
    if (!y || !lp) {
        free(y), free(lp);
        return nf_error(NF_ENOMEM, "out of memory");
    }
    for (int k = 0; k < K; k++) y[k] = ym + ys * (lo + (hi - lo) * k / (K - 1));
    int rc = nf_causal_logp(m, est, arm, y, K, lp);
    double s = 0, s1 = 0;
    for (int k = 0; rc == NF_OK && k < K; k++) s += exp(lp[k]), s1 += y[k] * exp(lp[k]);
    if (rc == NF_OK) *mean = s1 / s;
    free(y), free(lp);
    return rc;
}
