/* tests/testutil.c - shared test helpers and the table-driven bijector checks.
 *
 * Every bijector suite runs the same four checks on each row of its table:
 *   round trip      inverse(forward(x)) == x, forward(inverse(z)) == z, and the two log-determinants
 *                   cancel, on inputs with an unremarkable spread (plus far-tail rows);
 *   log-determinant forward's log|det J| equals log|det| of a central-difference Jacobian (double);
 *   gradients       backward against central differences of L = sum(w * y) + sum(u * logdet) for
 *                   parameters, inputs and context (double);
 *   inverse grads   the same for inverse / inverse_backward, where the type supports it (double).
 * Inputs are Gaussian unless an nf_bij_inputs says otherwise (a bounded domain, init_data first).
 */
#include "tests/testutil.h"

#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

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

#ifdef NF_DOUBLE
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
#endif

static void logdet(const nf_bij_case *c, const nf_bij_inputs *in)
{
#ifdef NF_DOUBLE
    if (c->training) return; /* batch statistics couple rows: no per-row Jacobian */
    harness h;
    harness_open(&h, c, in);
    int D = h.D, n = h.n;
    nf_real *xp = calloc((size_t)n * D, sizeof(nf_real)), *yp = calloc((size_t)n * D, sizeof(nf_real));
    nf_real *ym = calloc((size_t)n * D, sizeof(nf_real)), *ldt = calloc(n, sizeof(nf_real));
    double *J = calloc((size_t)n * D * D, sizeof(double));
    const double eps = 1e-6;
    fwd(&h, h.y, h.ld, h.x);
    nf_real *ld_f = calloc(n, sizeof(nf_real));
    memcpy(ld_f, h.ld, n * sizeof(nf_real));
    for (int j = 0; j < D; j++) {
        memcpy(xp, h.x, (size_t)n * D * sizeof(nf_real));
        for (int i = 0; i < n; i++) xp[(size_t)i * D + j] += eps;
        fwd(&h, yp, ldt, xp);
        memcpy(xp, h.x, (size_t)n * D * sizeof(nf_real));
        for (int i = 0; i < n; i++) xp[(size_t)i * D + j] -= eps;
        fwd(&h, ym, ldt, xp);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < D; k++)
                J[(size_t)i * D * D + (size_t)k * D + j] = (yp[(size_t)i * D + k] - ym[(size_t)i * D + k]) / (2 * eps);
    }
    for (int i = 0; i < n; i++) {
        double brute = log_abs_det(J + (size_t)i * D * D, D);
        ck_assert_msg(fabs(brute - ld_f[i]) < 1e-6 * (1 + fabs(brute)),
                      "%s(%s): logdet %.10g but brute-force Jacobian gives %.10g (row %d)", c->type_name, c->options,
                      (double)ld_f[i], brute, i);
    }
    /* inverse's log-determinant is the negative at the corresponding point */
    h.b.training = 0;
    inv(&h, h.x2, h.ld2, h.y);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(h.ld2[i] + ld_f[i]) < 1e-7 * (1 + fabs(ld_f[i])), "%s(%s): inverse logdet %g != -%g",
                      c->type_name, c->options, (double)h.ld2[i], (double)ld_f[i]);
    free(xp); free(yp); free(ym); free(ldt); free(J); free(ld_f);
    harness_close(&h);
#else
    (void)c, (void)in;
#endif
}

#ifdef NF_DOUBLE
/* L = sum w*out + sum u*logdet for the direction chosen. */
static double loss_of(harness *h, int inverse_dir, const nf_real *in)
{
    if (!inverse_dir) fwd(h, h->y, h->ld, in);
    else inv(h, h->y, h->ld, in);
    double L = 0;
    for (size_t i = 0; i < (size_t)h->n * h->D; i++) L += (double)h->w[i] * h->y[i];
    for (int i = 0; i < h->n; i++) L += (double)h->u[i] * h->ld[i];
    return L;
}

#define FD_EPS 1e-6
#define FD_TOL 1e-6

/* The analytic derivative `an` of L with respect to *v (a parameter, input or context entry) against
 * the central difference (L(v + e) - L(v - e)) / 2e.  A ReLU kink or a spline knot within e of v
 * (a matter of chance with wide networks) makes that average two slopes; then the second-order
 * one-sided differences (-3 L(v) + 4 L(v + e) - L(v + 2e)) / 2e and its mirror image are tried:
 * the analytic derivative is the slope of the piece that contains v, and the side without the
 * kink measures it.  A wrong derivative matches neither side. */
static void check_entry(harness *h, int inverse_dir, const nf_real *in, nf_real *v, double an, double L0,
                        const char *what, size_t idx)
{
    const double e = FD_EPS;
    const nf_real keep = *v;
    double L[5]; /* L(v + k e), k = -2..2, L[2] = L0 */
    for (int k = -1; k <= 1; k += 2) {
        *v = keep + k * e;
        L[2 + k] = loss_of(h, inverse_dir, in);
    }
    *v = keep;
    double fd = (L[3] - L[1]) / (2 * e);
    if (nf_test_relerr(an, fd, 1e-2) < FD_TOL) return;
    for (int k = -2; k <= 2; k += 4) {
        *v = keep + k * e;
        L[2 + k] = loss_of(h, inverse_dir, in);
    }
    *v = keep;
    double right = (-3 * L0 + 4 * L[3] - L[4]) / (2 * e), left = (3 * L0 - 4 * L[1] + L[0]) / (2 * e);
    ck_assert_msg(nf_test_relerr(an, right, 1e-2) < FD_TOL || nf_test_relerr(an, left, 1e-2) < FD_TOL,
                  "%s(%s) %s: d/d%s[%zu] analytic %.10g, finite difference %.10g (one-sided: left %.10g, right %.10g)",
                  h->c->type_name, h->c->options, inverse_dir ? "inverse" : "forward", what, idx, an, fd, left, right);
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
#endif

void nf_check_bijector_roundtrip(const nf_bij_case *c) { roundtrip(c, NULL); }

void nf_check_bijector_logdet(const nf_bij_case *c) { logdet(c, NULL); }

void nf_check_bijector_gradients(const nf_bij_case *c)
{
#ifdef NF_DOUBLE
    gradients(c, NULL, 0);
#else
    (void)c;
#endif
}

void nf_check_bijector_inverse_gradients(const nf_bij_case *c)
{
#ifdef NF_DOUBLE
    if (!c->no_inverse_grad) gradients(c, NULL, 1);
#else
    (void)c;
#endif
}

void nf_check_bijector_all_inputs(const nf_bij_case *c, const nf_bij_inputs *in)
{
    roundtrip(c, in);
    logdet(c, in);
#ifdef NF_DOUBLE
    gradients(c, in, 0);
    if (!c->no_inverse_grad) gradients(c, in, 1);
#endif
}

void nf_check_bijector_all(const nf_bij_case *c) { nf_check_bijector_all_inputs(c, NULL); }
