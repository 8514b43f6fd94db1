/* flows/lu.c - an LU-parameterised invertible linear map (Glow's 1x1 convolution in general form).
 *
 *   forward  y = W x + bias,   W = P L U',   U' = U + diag(sign e^{log_s})
 *            log|det| = sum_i log_s_i
 *   inverse  x = W^{-1} (y - bias) by two triangular solves, log|det| = -sum_i log_s_i
 *
 * P is a fixed permutation ((P A)_i = A_{perm_i}), L unit lower triangular, U strictly upper
 * triangular.  Parameters: "<name>.lower" (D(D-1)/2, the strict lower triangle of L row by row),
 * "<name>.upper" (D(D-1)/2, the strict upper triangle of U row by row), "<name>.log_s" (D) and
 * "<name>.bias" (D).  State (b->S): "<name>.perm" (D) and "<name>.sign" (D, +-1).  For D = 1 the
 * triangles are empty and not registered.
 *
 * Initialisation: a random orthogonal matrix (QR of a Gaussian matrix from the rng, the columns of Q
 * signed by diag R) decomposed with GSL's LU (P_gsl Q = L U), so the map starts as a rotation with
 * log|det| = 0.  No options.  Context is ignored.  The factors' registration, assembly, solves and
 * chain rule are flows/lu_factor.c, shared with conv1x1.
 *
 * Batches are row-major (n, D): Y = X W^T + bias.  The forward and inverse write the assembled
 * factors in the workspace and the backward calls read them:
 *   ws = Lf (D, D) | Uf (D, D) | W (D, D) | dW (D, D) | dM (D, D) | dU (D, D) | H (n, D) | G (n, D)
 * with Lf = L and Uf = U' as full row-major matrices.
 */
#include "flows/bijector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "flows/lu_factor.h"

typedef struct {
    nf_lu_factor f; /* lower, upper, log_s in P; perm, sign in S */
    size_t bias;    /* offset in P: (D) */
} lu_state;

static void lu_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int lu_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)opts;
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    lu_state *st = nf_calloc(1, sizeof *st, "lu state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc = nf_lu_factor_add(&st->f, b->dim, b->name, b->P, b->S);
    snprintf(nm, sizeof nm, "%s.bias", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, (size_t)b->dim, &st->bias);
    if (rc == NF_OK) rc = nf_lu_factor_init(&st->f, b->P, b->S, rng);
    if (rc != NF_OK) lu_destroy(b);
    return rc;
}

static size_t lu_workspace(const nf_bijector *b, int n)
{
    const size_t D = (size_t)b->dim;
    return NF_LU_FACTOR_WS(D) + 2 * (size_t)(n > 0 ? n : 0) * D;
}

/* Y = X W^T + bias;  log|det| = sum_i log_s_i. */
static int lu_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                      nf_real *ws)
{
    (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const nf_real *bias = b->P->value + st->bias;
    NF_TRY(nf_lu_factor_check(&st->f, b->S, ws, b->type->name, b->name));
    nf_lu_factor_assemble(&st->f, b->P, b->S, ws, 1);
    for (int i = 0; i < n; i++) memcpy(y + (size_t)i * D, bias, (size_t)D * sizeof(nf_real));
    nf_gemm(0, 1, n, D, D, 1, x, D, NF_LU_FACTOR_W(ws, D), D, 1, y, D);
    const double ld = nf_lu_factor_logdet(&st->f, b->P);
    for (int i = 0; i < n; i++) logdet[i] += (nf_real)ld;
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* X W^T = Y - bias with W^T = U'^T L^T P^T:  X U'^T L^T = (Y - bias) P, solved by two right-side
 * triangular solves (no explicit inverse);  log|det| = -sum_i log_s_i. */
static int lu_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                      nf_real *ws)
{
    (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const nf_real *bias = b->P->value + st->bias, *perm = b->S->value + st->f.perm;
    NF_TRY(nf_lu_factor_check(&st->f, b->S, ws, b->type->name, b->name));
    nf_lu_factor_assemble(&st->f, b->P, b->S, ws, 0);
    for (int i = 0; i < n; i++) {
        const nf_real *yi = y + (size_t)i * D;
        nf_real *xi = x + (size_t)i * D;
        for (int k = 0; k < D; k++) xi[(size_t)perm[k]] = yi[k] - bias[k]; /* (Z P)_{perm_k} = Z_k */
    }
    nf_lu_factor_solve(&st->f, ws, x, D, n);
    const double ld = nf_lu_factor_logdet(&st->f, b->P);
    for (int i = 0; i < n; i++) logdet[i] -= (nf_real)ld;
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* y = W x + bias:  dL/dX += dY W;  dL/dW = dY^T X;  dL/dbias = sum_rows dY;
 * then the factors' chain rule with ldcoef = sum_i dlogdet_i.  Reads Lf, Uf, W left in ws by forward. */
static int lu_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                       const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D;
    if (dx) nf_gemm(0, 0, n, D, D, 1, dy, D, NF_LU_FACTOR_W(ws, D), D, 1, dx, D);
    nf_gemm(1, 0, D, D, n, 1, dy, D, x, D, 0, NF_LU_FACTOR_DW(ws, D), D);
    if (n <= 0) memset(NF_LU_FACTOR_DW(ws, D), 0, DD * sizeof(nf_real));
    nf_real *gb = b->P->grad + st->bias;
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    for (int j = 0; j < D; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += dy[(size_t)i * D + j];
        gb[j] += (nf_real)s;
    }
    nf_lu_factor_chain(&st->f, b->P, b->S, ws, U);
    return NF_OK;
}

/* x = W^{-1} (y - bias):  dL/dy = W^{-T} dx, i.e. G = dX W^{-1} row-wise, from G P L U' = dX by two
 * triangular solves (H = G P: H L U' = dX, then G_k = H_{perm_k});  dL/dY += G;
 * dL/dbias = -sum_rows G;  dL/dW = -G^T X;  then the chain rule with ldcoef = -sum_i dlogdet_i.
 * Reads Lf, Uf left in ws by inverse. */
static int lu_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                               const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx, int n,
                               nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D, nd = (size_t)(n > 0 ? n : 0) * D;
    nf_real *H = ws + NF_LU_FACTOR_WS(D), *G = H + nd;
    const nf_real *perm = b->S->value + st->f.perm;
    memcpy(H, dx, nd * sizeof(nf_real));
    nf_lu_factor_solve_transposed(&st->f, ws, H, D, n);
    nf_real *gb = b->P->grad + st->bias;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < D; k++) G[(size_t)i * D + k] = H[(size_t)i * D + (size_t)perm[k]];
    if (dy) nf_axpy((int)nd, 1, G, dy);
    for (int j = 0; j < D; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += G[(size_t)i * D + j];
        gb[j] -= (nf_real)s;
    }
    nf_gemm(1, 0, D, D, n, -1, G, D, x, D, 0, NF_LU_FACTOR_DW(ws, D), D);
    if (n <= 0) memset(NF_LU_FACTOR_DW(ws, D), 0, DD * sizeof(nf_real));
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    nf_lu_factor_chain(&st->f, b->P, b->S, ws, -U);
    return NF_OK;
}

const nf_bijector_type nf_bijector_lu = {
    .name = "lu",
    .options_help = "(no options) y = P L (U + diag(sign e^{log_s})) x + bias, initialised to a random rotation",
    .create = lu_create,
    .destroy = lu_destroy,
    .workspace = lu_workspace,
    .forward = lu_forward,
    .inverse = lu_inverse,
    .backward = lu_backward,
    .inverse_backward = lu_inverse_backward,
    .init_data = NULL,
};
