/* tests/testutil.c - shared test helpers and the table-driven bijector checks.
 *
 * Every bijector suite runs the same four checks on each row of its table:
 *   round trip      inverse(forward(x)) == x, forward(inverse(z)) == z, and the two log-determinants
 *                   cancel, on inputs with an unremarkable spread (plus far-tail rows);
 *   log-determinant forward's log|det J| equals log|det| of a difference-quotient Jacobian;
 *   gradients       backward against central differences of L = sum(w * y) + sum(u * logdet) for
 *                   parameters, inputs and context;
 *   inverse grads   the same for inverse / inverse_backward, where the type supports it.
 * All four run in both builds, each with steps and tolerances derived from its precision (below,
 * FD_STEP): the float build's kernels (fast exp, tanh, log) are checked in float.
 * Inputs are Gaussian unless an nf_bij_inputs says otherwise (a bounded domain, init_data first).
 */
#include "tests/testutil.h"

#include <float.h>
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "training/model_file.h"

double nf_test_relerr(double a, double b, double floor)
{
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    if (m < floor) m = floor;
    return fabs(a - b) / m;
}

void nf_test_fill_uniform(nf_real *x, size_t n, double lo, double hi, uint64_t seed)
{
    nf_rng *r = nf_rng_alloc(seed, 0);
    nf_rng_fill_uniform(r, x, n, lo, hi);
    nf_rng_free(r);
}

void nf_test_fill_normal(nf_real *x, size_t n, double scale, uint64_t seed)
{
    nf_rng *r = nf_rng_alloc(seed, 1);
    nf_rng_fill_normal(r, x, n);
    for (size_t i = 0; i < n; i++) x[i] *= (nf_real)scale;
    nf_rng_free(r);
}

/* A bijector built for a test case, with its stores, inputs and buffers. */
typedef struct harness {
    const nf_bij_case *c;
    const nf_bij_inputs *in; /* never NULL */
    nf_bijector b;
    nf_params *P, *S;
    int n, D, C;
    nf_real *x, *y, *x2, *ctx, *ld, *ld2, *ws, *w, *u, *dx, *dy, *dctx;
    unsigned char *frozen;   /* (P->n) 1 for structurally fixed entries (masked weights) */
    double scale;            /* sqrt(sum (w y)^2 + (u logdet)^2) at the point checked: L's rounding scale */
} harness;

#define TEST_N 6

static const nf_bij_inputs default_inputs;

static int bounded(const nf_bij_inputs *in) { return in->hi > in->lo; }

static void harness_open(harness *h, const nf_bij_case *c, const nf_bij_inputs *in)
{
    memset(h, 0, sizeof *h);
    h->c = c;
    h->in = in ? in : &default_inputs;
    h->n = TEST_N;
    h->D = c->dim;
    h->C = c->ctx_dim;
    const nf_bijector_type *t = nf_bijector_type_find(c->type_name);
    ck_assert_msg(t != NULL, "bijector type '%s' is not in the registry", c->type_name);
    h->P = nf_params_alloc();
    h->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(2385, 0);
    int rc = nf_bijector_create(&h->b, t, h->D, h->C, "t0", c->options, h->P, h->S, rng);
    ck_assert_msg(rc == NF_OK, "%s(%s): create failed: %s", c->type_name, c->options, nf_strerror_last());
    h->b.training = c->training;
    h->b.invert_method = NF_INVERT_SEQUENTIAL;
    size_t nd = (size_t)h->n * h->D;
    size_t ws = h->b.type->workspace(&h->b, h->n);
    h->x = calloc(nd, sizeof(nf_real));
    h->y = calloc(nd, sizeof(nf_real));
    h->x2 = calloc(nd, sizeof(nf_real));
    h->dx = calloc(nd, sizeof(nf_real));
    h->dy = calloc(nd, sizeof(nf_real));
    h->w = calloc(nd, sizeof(nf_real));
    h->ctx = calloc((size_t)h->n * (h->C ? h->C : 1), sizeof(nf_real));
    h->dctx = calloc((size_t)h->n * (h->C ? h->C : 1), sizeof(nf_real));
    h->ld = calloc(h->n, sizeof(nf_real));
    h->ld2 = calloc(h->n, sizeof(nf_real));
    h->u = calloc(h->n, sizeof(nf_real));
    h->ws = calloc(ws ? ws : 1, sizeof(nf_real));
    double scale = c->input_scale > 0 ? c->input_scale : 1.3;
    if (bounded(h->in)) nf_test_fill_uniform(h->x, nd, h->in->lo, h->in->hi, 17);
    else nf_test_fill_normal(h->x, nd, scale, 17);
    nf_test_fill_normal(h->ctx, (size_t)h->n * h->C, 0.8, 23);
    nf_test_fill_normal(h->w, nd, 0.7, 29);
    nf_test_fill_normal(h->u, h->n, 0.9, 31);
    if (h->in->init_data) {
        ck_assert_msg(t->init_data != NULL, "%s(%s): the case asks for init_data but the type has none", c->type_name,
                      c->options);
        rc = t->init_data(&h->b, h->x, h->n);
        ck_assert_msg(rc == NF_OK, "%s(%s): init_data failed: %s", c->type_name, c->options, nf_strerror_last());
    }
    /* Entries that are zero with a zero gradient are structurally fixed (masked MADE weights kept at
     * zero by masked gradients): they are neither perturbed nor finite-differenced.  The probe runs in
     * evaluation mode, so it neither triggers a data-dependent initialisation nor moves running
     * averages, and training-mode cases get the same protection. */
    h->frozen = calloc(h->P->n ? h->P->n : 1, 1);
    if (h->P->n) {
        h->b.training = 0;
        nf_real *ld = calloc(h->n, sizeof(nf_real));
        if (h->b.type->forward(&h->b, h->y, ld, h->x, h->C ? h->ctx : NULL, h->n, h->ws) == NF_OK) {
            nf_params_zero_grad(h->P);
            h->b.type->backward(&h->b, h->dx, h->C ? h->dctx : NULL, h->w, h->u, h->x, h->y, h->C ? h->ctx : NULL, h->n,
                                h->ws);
            for (size_t i = 0; i < h->P->n; i++) h->frozen[i] = h->P->value[i] == 0 && h->P->grad[i] == 0;
            nf_params_zero_grad(h->P);
        }
        free(ld);
        h->b.training = c->training;
        memset(h->dx, 0, nd * sizeof(nf_real));
        memset(h->dctx, 0, (size_t)h->n * (h->C ? h->C : 1) * sizeof(nf_real));
    }
    /* Move parameters away from their (often identity) initial values. */
    if (!c->skip_param_randomize) {
        const double noise = h->in->param_noise > 0 ? h->in->param_noise : 0.25;
        for (size_t i = 0; i < h->P->n; i++)
            if (!h->frozen[i]) h->P->value[i] += (nf_real)(noise * nf_rng_normal(rng));
    }
    nf_rng_free(rng);
}

static void harness_close(harness *h)
{
    nf_bijector_destroy(&h->b);
    nf_params_free(h->P);
    nf_params_free(h->S);
    free(h->x); free(h->y); free(h->x2); free(h->dx); free(h->dy); free(h->w);
    free(h->ctx); free(h->dctx); free(h->ld); free(h->ld2); free(h->u); free(h->ws);
    free(h->frozen);
}

static const nf_real *ctx_of(const harness *h) { return h->C ? h->ctx : NULL; }

static void fwd(harness *h, nf_real *y, nf_real *ld, const nf_real *x)
{
    memset(ld, 0, h->n * sizeof(nf_real));
    int rc = h->b.type->forward(&h->b, y, ld, x, ctx_of(h), h->n, h->ws);
    ck_assert_msg(rc == NF_OK, "%s(%s): forward failed: %s", h->c->type_name, h->c->options, nf_strerror_last());
}

static void inv(harness *h, nf_real *x, nf_real *ld, const nf_real *y)
{
    memset(ld, 0, h->n * sizeof(nf_real));
    int rc = h->b.type->inverse(&h->b, x, ld, y, ctx_of(h), h->n, h->ws);
    ck_assert_msg(rc == NF_OK, "%s(%s): inverse failed: %s", h->c->type_name, h->c->options, nf_strerror_last());
}

/* |a - b| <= tol (1 + |b|) */
static int close_enough(double a, double b, double tol) { return fabs(a - b) <= tol * (1.0 + fabs(b)); }

/* Fill y (n, D) with latents for the inverse direction: N(0, 1.1^2), or on a bounded domain the
 * forward images of fresh in-domain x (so every latent is one the inverse accepts).  Uses h->x2. */
static void draw_latents(harness *h, nf_real *y, uint64_t seed)
{
    size_t nd = (size_t)h->n * h->D;
    if (!bounded(h->in)) {
        nf_test_fill_normal(y, nd, 1.1, seed);
        return;
    }
    nf_test_fill_uniform(h->x2, nd, h->in->lo, h->in->hi, seed);
    fwd(h, y, h->ld2, h->x2);
}

static void roundtrip(const nf_bij_case *c, const nf_bij_inputs *in)
{
    harness h;
    harness_open(&h, c, in);
    if (c->training) fwd(&h, h.y, h.ld, h.x); /* let data-dependent initialisation happen first */
    size_t nd = (size_t)h.n * h.D;
    /* Make the last row far in the tails to exercise tails and large scales; on a bounded domain, move
     * it close to the bounds instead (1/25 of the way from the nearer one), staying inside. */
    for (int j = 0; j < h.D; j++) {
        nf_real *v = &h.x[(size_t)(h.n - 1) * h.D + j];
        if (!bounded(h.in)) {
            *v *= 4.1;
        } else {
            double lo = h.in->lo, hi = h.in->hi, edge = *v - lo < hi - *v ? lo : hi;
            *v = (nf_real)(edge + (*v - edge) / 25);
        }
    }
    fwd(&h, h.y, h.ld, h.x);
    h.b.training = 0; /* the inverse of a batch-statistics map is defined in evaluation mode only */
    if (c->training) fwd(&h, h.y, h.ld, h.x);
    inv(&h, h.x2, h.ld2, h.y);
    for (size_t i = 0; i < nd; i++)
        ck_assert_msg(close_enough(h.x2[i], h.x[i], NF_TEST_TOL_ROUNDTRIP), "%s(%s): inverse(forward(x))[%zu] = %g, x = %g",
                      c->type_name, c->options, i, (double)h.x2[i], (double)h.x[i]);
    for (int i = 0; i < h.n; i++)
        ck_assert_msg(close_enough(h.ld[i] + h.ld2[i], 0, 10 * NF_TEST_TOL_ROUNDTRIP),
                      "%s(%s): forward logdet %g + inverse logdet %g != 0 (row %d)", c->type_name, c->options,
                      (double)h.ld[i], (double)h.ld2[i], i);
    /* forward(inverse(z)) == z */
    draw_latents(&h, h.y, 41);
    inv(&h, h.x2, h.ld2, h.y);
    fwd(&h, h.x, h.ld, h.x2);
    for (size_t i = 0; i < nd; i++)
        ck_assert_msg(close_enough(h.x[i], h.y[i], NF_TEST_TOL_ROUNDTRIP), "%s(%s): forward(inverse(z))[%zu] = %g, z = %g",
                      c->type_name, c->options, i, (double)h.x[i], (double)h.y[i]);
    harness_close(&h);
}

/* Finite differences in the build's precision (EPS: its machine epsilon).  A difference quotient
 * with step h has a rounding error ~ EPS |L| / h and a truncation error ~ h^2 |L'''| / 6.
 *   double  h = 1e-6: both far below the tolerance, 1e-6 relative.
 *   float   h = 2^-8, about cbrt(FLT_EPSILON), balances the two (and x +- h is exact for |x| < 2^16),
 *           leaving errors of order FLT_EPSILON^(2/3) = 2.4e-5 relative.  Tolerances: a relative
 *           part, a small multiple of that, plus the rounding floor NOISE EPS S / h, with S the root
 *           sum of squares of L's terms (derivatives) or the rounding gain of the log-determinant
 *           (logdet_noise_gain: a nearly singular Jacobian gets the tolerance its difference
 *           quotients can resolve).  Measured over every table row (38888 derivatives, 744
 *           log-determinants): the median error is 0.04 (0.11) of that floor, 96% (97%) are within
 *           it, and what exceeds 2 floors (2%) is a ReLU kink or spline knot within the step, which
 *           the one-sided and smaller-step fallbacks below take.
 * The log-determinant's Jacobian uses fourth-order central differences
 * (8 (y(h) - y(-h)) - (y(2h) - y(-2h))) / 12h.
 */
#ifdef NF_DOUBLE
#define EPS DBL_EPSILON
#define FD_STEP 1e-6
#define FD_TOL 1e-6
#define LD_TOL 1e-6      /* forward logdet against the brute-force Jacobian, relative to 1 + |logdet| */
#define LD_INV_TOL 1e-7  /* inverse logdet against -forward logdet */
#else
#define EPS FLT_EPSILON
#define FD_STEP 0x1p-8
#define FD_TOL (40 * 2.4e-5) /* 40 FLT_EPSILON^(2/3), 1e-3 */
#define LD_TOL (20 * 2.4e-5) /* 5e-4 */
#define LD_INV_TOL (10 * NF_TEST_TOL_ROUNDTRIP) /* as the round trip's */
#endif
#define FD_NOISE 4
#define LD_NOISE 2

static double log_abs_det(double *J, int D)
{
    gsl_matrix_view m = gsl_matrix_view_array(J, D, D);
    gsl_permutation *p = gsl_permutation_alloc(D);
    int sign;
    gsl_linalg_LU_decomp(&m.matrix, p, &sign);
    double ld = gsl_linalg_LU_lndet(&m.matrix);
    gsl_permutation_free(p);
    return ld;
}

/* How far rounding moves log|det| of a difference-quotient Jacobian J (D, D): d log|det J| =
 * tr(J^-1 dJ), and entry (r, j) carries an error of order EPS |y_r| / h, independent from entry to
 * entry, so the size of the error is EPS / h sqrt(sum_jr ((J^-1)_jr y_r)^2); this returns the square
 * root (infinite for a singular J). */
static double logdet_noise_gain(const double *J, const nf_real *y, int D)
{
    double *A = malloc((size_t)D * D * sizeof(double)), *B = malloc((size_t)D * D * sizeof(double));
    memcpy(A, J, (size_t)D * D * sizeof(double));
    gsl_matrix_view a = gsl_matrix_view_array(A, D, D), b = gsl_matrix_view_array(B, D, D);
    gsl_permutation *p = gsl_permutation_alloc(D);
    int sign;
    double s = INFINITY;
    gsl_linalg_LU_decomp(&a.matrix, p, &sign);
    if (gsl_linalg_LU_det(&a.matrix, sign) != 0 && gsl_linalg_LU_invert(&a.matrix, p, &b.matrix) == 0) {
        s = 0;
        for (int j = 0; j < D; j++)
            for (int r = 0; r < D; r++) s += (B[j * D + r] * y[r]) * (B[j * D + r] * y[r]);
        s = sqrt(s);
    }
    gsl_permutation_free(p);
    free(A);
    free(B);
    return s;
}

/* log|det| of a row's Jacobian with column j taken from est[side[j]] (each (D, D) row-major, column
 * j = d/dx_j: central, left and right differences), for every choice of sides; 1 if one is within
 * tol (absolute) of want.  Used only when the central differences miss: a ReLU kink or a spline knot within 2h
 * of x_j bends that column's central difference, and the one-sided differences from the side
 * without it measure the derivative of the piece that holds x (the analytic Jacobian).  A wrong
 * log-determinant matches no choice: where no kink is near, a column's three estimates agree. */
static int any_sides_match(double *const est[3], int D, double want, double tol, double *best)
{
    double J[64];
    int side[8] = {0};
    *best = NAN;
    if (D > 8) return 0;
    for (;;) {
        for (int r = 0; r < D; r++)
            for (int j = 0; j < D; j++) J[r * D + j] = est[side[j]][r * D + j];
        double ld = log_abs_det(J, D);
        if (isnan(*best) || fabs(ld - want) < fabs(*best - want)) *best = ld;
        if (fabs(ld - want) < tol) return 1;
        int j = 0;
        while (j < D && side[j] == 2) side[j++] = 0;
        if (j == D) return 0;
        side[j]++;
    }
}

/* forward's log|det J| equals log|det| of a difference-quotient Jacobian, row by row; inverse's is its
 * negative at the image. */
static void logdet(const nf_bij_case *c, const nf_bij_inputs *in)
{
    if (c->training) return; /* batch statistics couple rows: no per-row Jacobian */
    harness h;
    harness_open(&h, c, in);
    const int D = h.D, n = h.n;
    const size_t nd = (size_t)n * D;
    nf_real *xp = calloc(nd, sizeof(nf_real)), *ldt = calloc(n, sizeof(nf_real)), *ld_f = calloc(n, sizeof(nf_real));
    nf_real *yk[4]; /* outputs at x_j + k h, k = -2, -1, 1, 2 */
    for (int k = 0; k < 4; k++) yk[k] = calloc(nd, sizeof(nf_real));
    double *Jc = calloc(nd * D, sizeof(double)), *Jl = calloc(nd * D, sizeof(double)), *Jr = calloc(nd * D, sizeof(double));
    const double e = FD_STEP;
    fwd(&h, h.y, h.ld, h.x);
    memcpy(ld_f, h.ld, n * sizeof(nf_real));
    for (int j = 0; j < D; j++) {
        static const int step[4] = {-2, -1, 1, 2};
        for (int k = 0; k < 4; k++) {
            memcpy(xp, h.x, nd * sizeof(nf_real));
            for (int i = 0; i < n; i++) xp[(size_t)i * D + j] = (nf_real)(xp[(size_t)i * D + j] + step[k] * e);
            fwd(&h, yk[k], ldt, xp);
        }
        for (int i = 0; i < n; i++)
            for (int r = 0; r < D; r++) {
                const size_t o = (size_t)i * D + r, at = (size_t)i * D * D + (size_t)r * D + j;
                const double y0 = h.y[o], ym2 = yk[0][o], ym1 = yk[1][o], yp1 = yk[2][o], yp2 = yk[3][o];
                Jc[at] = (8 * (yp1 - ym1) - (yp2 - ym2)) / (12 * e);
                Jl[at] = (3 * y0 - 4 * ym1 + ym2) / (2 * e);
                Jr[at] = (-3 * y0 + 4 * yp1 - yp2) / (2 * e);
            }
    }
    for (int i = 0; i < n; i++) {
        double *const rows[3] = {Jc + (size_t)i * D * D, Jl + (size_t)i * D * D, Jr + (size_t)i * D * D};
        double *central = malloc((size_t)D * D * sizeof(double));
        memcpy(central, rows[0], (size_t)D * D * sizeof(double));
        const double brute = log_abs_det(central, D), want = ld_f[i];
        free(central);
        const double tol =
            LD_TOL * (1 + fabs(brute)) + LD_NOISE * EPS / e * logdet_noise_gain(rows[0], h.y + (size_t)i * D, D);
        if (fabs(brute - want) < tol) continue;
        double best;
        const int ok = any_sides_match(rows, D, want, tol, &best);
        ck_assert_msg(ok, "%s(%s): logdet %.10g but the brute-force Jacobian gives %.10g (the closest with one-sided "
                      "columns %.10g; row %d, tolerance %g)", c->type_name, c->options, want, brute, best, i, tol);
    }
    /* inverse's log-determinant is the negative at the corresponding point */
    h.b.training = 0;
    inv(&h, h.x2, h.ld2, h.y);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(h.ld2[i] + ld_f[i]) < LD_INV_TOL * (1 + fabs(ld_f[i])), "%s(%s): inverse logdet %g != -%g",
                      c->type_name, c->options, (double)h.ld2[i], (double)ld_f[i]);
    free(xp); free(ldt); free(ld_f); free(Jc); free(Jl); free(Jr);
    for (int k = 0; k < 4; k++) free(yk[k]);
    harness_close(&h);
}

/* L = sum w*out + sum u*logdet for the direction chosen (summed in double); NaN where the map refuses
 * the input (a perturbed input that left a bounded domain). */
static double loss_of(harness *h, int inverse_dir, const nf_real *in)
{
    memset(h->ld, 0, h->n * sizeof(nf_real));
    int rc = !inverse_dir ? h->b.type->forward(&h->b, h->y, h->ld, in, ctx_of(h), h->n, h->ws)
                          : h->b.type->inverse(&h->b, h->y, h->ld, in, ctx_of(h), h->n, h->ws);
    if (rc != NF_OK) return NAN;
    double L = 0;
    for (size_t i = 0; i < (size_t)h->n * h->D; i++) L += (double)h->w[i] * h->y[i];
    for (int i = 0; i < h->n; i++) L += (double)h->u[i] * h->ld[i];
    return L;
}

/* |an - fd| within FD_TOL relative (to at least 1e-2) plus the rounding floor of L's terms for a
 * difference quotient with step e. */
static int fd_ok(const harness *h, double an, double fd, double e)
{
    const double m = fmax(fmax(fabs(an), fabs(fd)), 1e-2);
    return fabs(an - fd) <= FD_TOL * m + FD_NOISE * EPS * h->scale / e;
}

/* The analytic derivative `an` of L with respect to *v (a parameter, input or context entry) against
 * the central difference (L(v + e) - L(v - e)) / 2e.  A ReLU kink or a spline knot within e of v
 * makes that average two slopes; then the second-order one-sided differences
 * (-3 L(v) + 4 L(v + e) - L(v + 2e)) / 2e and its mirror image are tried: the analytic derivative is
 * the slope of the piece that contains v, and the side without the kink measures it.  In float,
 * whose step is large (2^-8), kinks on both sides within 2e happen in networks of width 64; then,
 * but only where the three differences disagree among themselves (the sign of a kink: on a smooth
 * piece they agree, and a wrong derivative is then a failure at once), the three are tried again
 * with steps e/4, e/16 and e/64, each with the rounding floor of its step.  A step that leaves a
 * bounded domain gives NaN and matches nothing. */
static void check_entry(harness *h, int inverse_dir, const nf_real *in, nf_real *v, double an, double L0,
                        const char *what, size_t idx)
{
    const nf_real keep = *v;
    double fd0 = NAN, left0 = NAN, right0 = NAN;
#ifdef NF_DOUBLE
    const int levels = 1;
#else
    const int levels = 4;
#endif
    int lev = 0;
    for (; lev < levels; lev++) {
        const double e = FD_STEP / (double)(1 << (2 * lev));
        double L[5]; /* L(v + k e), k = -2..2, L[2] = L0 */
        for (int k = -2; k <= 2; k++) {
            if (k == 0) continue;
            *v = (nf_real)(keep + k * e);
            L[2 + k] = loss_of(h, inverse_dir, in);
        }
        L[2] = L0;
        *v = keep;
        const double fd = (L[3] - L[1]) / (2 * e);
        const double right = (-3 * L0 + 4 * L[3] - L[4]) / (2 * e), left = (3 * L0 - 4 * L[1] + L[0]) / (2 * e);
        if (lev == 0) fd0 = fd, left0 = left, right0 = right;
        if (fd_ok(h, an, fd, e) || fd_ok(h, an, right, e) || fd_ok(h, an, left, e)) return;
        /* no kink between the three (all finite and within tolerance of each other): a wrong derivative */
        if (fd_ok(h, fd, right, e) && fd_ok(h, fd, left, e) && fd_ok(h, left, right, e)) break;
    }
    ck_abort_msg("%s(%s) %s: d/d%s[%zu] analytic %.10g, finite difference %.10g (one-sided: left %.10g, right %.10g; "
                 "tolerance %g relative + %g; %s)",
                 h->c->type_name, h->c->options, inverse_dir ? "inverse" : "forward", what, idx, an, fd0, left0, right0,
                 FD_TOL, FD_NOISE * EPS * h->scale / FD_STEP,
                 lev == 0 ? "the differences agree with each other" : "smaller steps did not agree either");
}

static void gradients(const nf_bij_case *c, const nf_bij_inputs *in_at, int inverse_dir)
{
    harness h;
    harness_open(&h, c, in_at);
    if (inverse_dir) {
        h.b.training = 0;
        if (!h.b.type->inverse_backward) {
            harness_close(&h);
            return;
        }
        if (bounded(h.in)) { /* the inverse's inputs: latents it accepts */
            fwd(&h, h.y, h.ld, h.x);
            memcpy(h.x, h.y, (size_t)h.n * h.D * sizeof(nf_real));
        }
    } else if (c->training) {
        fwd(&h, h.y, h.ld, h.x); /* data-dependent initialisation happens on the first batch */
    }
    size_t nd = (size_t)h.n * h.D, nc = (size_t)h.n * h.C;
    nf_real *in = h.x;
    const double L0 = loss_of(&h, inverse_dir, in);
    ck_assert_msg(!isnan(L0), "%s(%s): %s failed: %s", c->type_name, c->options, inverse_dir ? "inverse" : "forward",
                  nf_strerror_last());
    double s2 = 0;
    for (size_t i = 0; i < nd; i++) s2 += ((double)h.w[i] * h.y[i]) * ((double)h.w[i] * h.y[i]);
    for (int i = 0; i < h.n; i++) s2 += ((double)h.u[i] * h.ld[i]) * ((double)h.u[i] * h.ld[i]);
    h.scale = sqrt(s2);
    nf_params_zero_grad(h.P);
    memset(h.dx, 0, nd * sizeof(nf_real));
    memset(h.dctx, 0, (nc ? nc : 1) * sizeof(nf_real));
    int rc;
    if (!inverse_dir)
        rc = h.b.type->backward(&h.b, h.dx, h.C ? h.dctx : NULL, h.w, h.u, h.x, h.y, ctx_of(&h), h.n, h.ws);
    else
        rc = h.b.type->inverse_backward(&h.b, h.dx, h.C ? h.dctx : NULL, h.w, h.u, h.x, h.y, ctx_of(&h), h.n, h.ws);
    ck_assert_msg(rc == NF_OK, "%s(%s): backward failed: %s", c->type_name, c->options, nf_strerror_last());
    nf_real *grad = calloc(h.P->n ? h.P->n : 1, sizeof(nf_real));
    if (h.P->n) memcpy(grad, h.P->grad, h.P->n * sizeof(nf_real));
    /* parameters: all of them for small models, a seeded subset of 300 otherwise */
    nf_rng *rng = nf_rng_alloc(99, 0);
    size_t count = h.P->n < 300 ? h.P->n : 300;
    for (size_t k = 0; k < count; k++) {
        size_t p = h.P->n < 300 ? k : nf_rng_index(rng, h.P->n);
        if (h.frozen[p] && grad[p] == 0) continue; /* masked weight (or a dead unit's): nothing to check */
        check_entry(&h, inverse_dir, in, &h.P->value[p], grad[p], L0, "theta", p);
    }
    nf_rng_free(rng);
    for (size_t i = 0; i < nd; i++) check_entry(&h, inverse_dir, in, &in[i], h.dx[i], L0, inverse_dir ? "y" : "x", i);
    for (size_t i = 0; i < nc; i++) check_entry(&h, inverse_dir, in, &h.ctx[i], h.dctx[i], L0, "ctx", i);
    free(grad);
    harness_close(&h);
}

void nf_check_bijector_roundtrip(const nf_bij_case *c) { roundtrip(c, NULL); }

void nf_check_bijector_logdet(const nf_bij_case *c) { logdet(c, NULL); }

void nf_check_bijector_gradients(const nf_bij_case *c) { gradients(c, NULL, 0); }

void nf_check_bijector_inverse_gradients(const nf_bij_case *c)
{
    if (!c->no_inverse_grad) gradients(c, NULL, 1);
}

void nf_check_bijector_all_inputs(const nf_bij_case *c, const nf_bij_inputs *in)
{
    roundtrip(c, in);
    logdet(c, in);
    gradients(c, in, 0);
    if (!c->no_inverse_grad) gradients(c, in, 1);
}

void nf_check_bijector_all(const nf_bij_case *c) { nf_check_bijector_all_inputs(c, NULL); }

int nf_test_bij_make(nf_test_bij *m, const char *type, int D, int C, const char *opts, uint64_t seed, int n,
                     double noise)
{
    memset(m, 0, sizeof *m);
    m->P = nf_params_alloc();
    m->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(seed, 0);
    int rc = nf_bijector_create(&m->b, nf_bijector_type_find(type), D, C, "t0", opts, m->P, m->S, rng);
    if (rc == NF_OK) {
        for (size_t i = 0; noise > 0 && i < m->P->n; i++) m->P->value[i] += (nf_real)(noise * nf_rng_normal(rng));
        size_t w = m->b.type->workspace(&m->b, n);
        m->ws = calloc(w ? w : 1, sizeof(nf_real));
    } else {
        nf_params_free(m->P);
        nf_params_free(m->S);
        m->P = m->S = NULL;
    }
    nf_rng_free(rng);
    return rc;
}

void nf_test_bij_free(nf_test_bij *m)
{
    nf_bijector_destroy(&m->b);
    nf_params_free(m->P);
    nf_params_free(m->S);
    free(m->ws);
    m->P = m->S = NULL;
    m->ws = NULL;
}

void nf_test_perturb(nf_params *P, double scale, uint64_t seed)
{
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < P->n; i++) P->value[i] += (nf_real)(scale * nf_rng_normal(r));
    nf_rng_free(r);
}

/* ---- two threads as two processes (nf_test_pair) ----------------------------------------------- */

static int pair_reduce(void *user, double *buf, size_t n, int max)
{
    struct nf_test_pair_side *me = user;
    nf_test_pair *p = me->pair;
    if (n > 64) return nf_error(NF_EINVAL, "nf_test_pair: %zu doubles (at most 64)", n);
    memcpy(p->d[me->rank], buf, n * sizeof *buf);
    pthread_barrier_wait(&p->bar);
    for (size_t i = 0; i < n; i++) buf[i] = max ? fmax(p->d[0][i], p->d[1][i]) : p->d[0][i] + p->d[1][i];
    pthread_barrier_wait(&p->bar);
    return NF_OK;
}

static int pair_sum_double(void *user, double *buf, size_t n) { return pair_reduce(user, buf, n, 0); }
static int pair_max_double(void *user, double *buf, size_t n) { return pair_reduce(user, buf, n, 1); }

static int pair_sum_real(void *user, nf_real *buf, size_t n)
{
    struct nf_test_pair_side *me = user;
    nf_test_pair *p = me->pair;
    p->r[me->rank] = buf;
    pthread_barrier_wait(&p->bar);
    for (size_t i = 0; i < n; i++) p->scratch[me->rank][i] = p->r[0][i] + p->r[1][i];
    pthread_barrier_wait(&p->bar);
    memcpy(buf, p->scratch[me->rank], n * sizeof *buf);
    return NF_OK;
}

int nf_test_pair_init(nf_test_pair *p, size_t max_real)
{
    memset(p, 0, sizeof *p);
    pthread_barrier_init(&p->bar, NULL, 2);
    for (int k = 0; k < 2; k++) {
        p->side[k] = (struct nf_test_pair_side){.pair = p, .rank = k};
        p->scratch[k] = malloc((max_real ? max_real : 1) * sizeof(nf_real));
        p->comm[k] = (nf_train_comm){.rank = k, .size = 2, .user = &p->side[k], .sum_real = pair_sum_real,
                                     .sum_double = pair_sum_double, .max_double = pair_max_double};
    }
    return p->scratch[0] && p->scratch[1] ? NF_OK : NF_ENOMEM;
}

void nf_test_pair_destroy(nf_test_pair *p)
{
    pthread_barrier_destroy(&p->bar);
    free(p->scratch[0]), free(p->scratch[1]);
}

void nf_test_pair_run(void *(*fn)(void *), void *arg0, void *arg1)
{
    pthread_t th[2];
    void *arg[2] = {arg0, arg1};
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_create(&th[k], NULL, fn, arg[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
}

nf_model *nf_test_model_reopen(const nf_model *m)
{
    char path[] = "/tmp/nf_test_model_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    close(fd);
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *copy = NULL;
    ck_assert_msg(nf_model_open(path, &copy, NULL) == NF_OK, "%s", nf_strerror_last());
    unlink(path);
    return copy;
}
