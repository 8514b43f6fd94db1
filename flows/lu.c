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
 * log|det| = 0.  No options.  Context is ignored.
 *
 * Batches are row-major (n, D): Y = X W^T + bias.  The forward and inverse write the assembled
 * factors in the workspace and the backward calls read them:
 *   ws = Lf (D, D) | Uf (D, D) | W (D, D) | dW (D, D) | dM (D, D) | dU (D, D) | H (n, D) | G (n, D)
 * with Lf = L and Uf = U' as full row-major matrices.
 */
#include "flows/bijector.h"

#include <gsl/gsl_cblas.h>
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"

#ifdef NF_DOUBLE
#define LU_TRMM cblas_dtrmm
#define LU_TRSM cblas_dtrsm
#else
#define LU_TRMM cblas_strmm
#define LU_TRSM cblas_strsm
#endif

typedef struct {
    size_t lower, upper, log_s, bias; /* offsets in P */
    size_t perm, sign;                /* offsets in S: (D) each */
} lu_state;

static void lu_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

/* Q: a Haar-random orthogonal matrix; then P_gsl Q = L U.  GSL's P_gsl has P[p_j][j] = 1, so
 * Q = P_gsl^T L U and (P_gsl^T M)_j = M_{p_j}: our perm is GSL's p.  Works on caller buffers only,
 * so no GSL allocation (and no GSL error handler) is involved. */
static int lu_init(nf_bijector *b, nf_rng *rng)
{
    lu_state *st = b->state;
    const int D = b->dim;
    double *A = nf_calloc((size_t)D * D * 3 + 2 * (size_t)D, sizeof(double), "lu initialisation");
    size_t *pd = nf_calloc((size_t)D, sizeof(size_t), "lu initialisation permutation");
    if (!A || !pd) {
        free(A);
        free(pd);
        return NF_ENOMEM;
    }
    double *Q = A + (size_t)D * D, *R = Q + (size_t)D * D, *tau = R + (size_t)D * D;
    for (size_t k = 0; k < (size_t)D * D; k++) A[k] = rng ? nf_rng_normal(rng) : (k % (D + 1) == 0);
    gsl_matrix_view a = gsl_matrix_view_array(A, D, D), q = gsl_matrix_view_array(Q, D, D),
                    r = gsl_matrix_view_array(R, D, D);
    gsl_vector_view t = gsl_vector_view_array(tau, D);
    gsl_linalg_QR_decomp(&a.matrix, &t.vector);
    gsl_linalg_QR_unpack(&a.matrix, &t.vector, &q.matrix, &r.matrix);
    for (int j = 0; j < D; j++)
        if (R[(size_t)j * D + j] < 0)
            for (int i = 0; i < D; i++) Q[(size_t)i * D + j] = -Q[(size_t)i * D + j];
    gsl_permutation p = {(size_t)D, pd};
    int signum;
    gsl_linalg_LU_decomp(&q.matrix, &p, &signum);
    nf_real *lo = b->P->value + st->lower, *up = b->P->value + st->upper;
    nf_real *ls = b->P->value + st->log_s, *perm = b->S->value + st->perm, *sg = b->S->value + st->sign;
    for (int i = 0, k = 0; i < D; i++)
        for (int j = 0; j < i; j++) lo[k++] = (nf_real)Q[(size_t)i * D + j];
    for (int i = 0, k = 0; i < D; i++)
        for (int j = i + 1; j < D; j++) up[k++] = (nf_real)Q[(size_t)i * D + j];
    for (int i = 0; i < D; i++) {
        double u = Q[(size_t)i * D + i];
        ls[i] = (nf_real)log(fabs(u));
        sg[i] = u < 0 ? -1 : 1;
        perm[i] = (nf_real)pd[i];
    }
    free(A);
    free(pd);
    return NF_OK;
}

static int lu_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)opts;
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    lu_state *st = nf_calloc(1, sizeof *st, "lu state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    const size_t D = (size_t)b->dim, tri = D * (D - 1) / 2;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc = NF_OK;
    if (tri) {
        snprintf(nm, sizeof nm, "%s.lower", b->name);
        rc = nf_params_add(b->P, nm, tri, &st->lower);
        snprintf(nm, sizeof nm, "%s.upper", b->name);
        if (rc == NF_OK) rc = nf_params_add(b->P, nm, tri, &st->upper);
    }
    snprintf(nm, sizeof nm, "%s.log_s", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, D, &st->log_s);
    snprintf(nm, sizeof nm, "%s.bias", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->P, nm, D, &st->bias);
    snprintf(nm, sizeof nm, "%s.perm", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, D, &st->perm);
    snprintf(nm, sizeof nm, "%s.sign", b->name);
    if (rc == NF_OK) rc = nf_params_add(b->S, nm, D, &st->sign);
    if (rc == NF_OK) rc = lu_init(b, rng);
    if (rc != NF_OK) lu_destroy(b);
    return rc;
}

static size_t lu_workspace(const nf_bijector *b, int n)
{
    const size_t D = (size_t)b->dim;
    return 6 * D * D + 2 * (size_t)(n > 0 ? n : 0) * D;
}

/* Lf = L, Uf = U + diag(sign e^{log_s}); with_w: W = P Lf Uf as well (dW holds Lf Uf on the way). */
static void lu_assemble(const nf_bijector *b, nf_real *ws, int with_w)
{
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D;
    nf_real *Lf = ws, *Uf = ws + DD, *W = ws + 2 * DD, *M = ws + 3 * DD;
    const nf_real *lo = b->P->value + st->lower, *up = b->P->value + st->upper, *ls = b->P->value + st->log_s;
    const nf_real *perm = b->S->value + st->perm, *sg = b->S->value + st->sign;
    memset(Lf, 0, 2 * DD * sizeof(nf_real));
    for (int i = 0, k = 0; i < D; i++) {
        for (int j = 0; j < i; j++) Lf[(size_t)i * D + j] = lo[k++];
        Lf[(size_t)i * D + i] = 1;
    }
    for (int i = 0, k = 0; i < D; i++) {
        Uf[(size_t)i * D + i] = sg[i] * (nf_real)exp((double)ls[i]);
        for (int j = i + 1; j < D; j++) Uf[(size_t)i * D + j] = up[k++];
    }
    if (!with_w) return;
    memcpy(M, Uf, DD * sizeof(nf_real));
    LU_TRMM(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, D, D, 1, Lf, D, M, D);
    for (int i = 0; i < D; i++) memcpy(W + (size_t)i * D, M + (size_t)perm[i] * D, (size_t)D * sizeof(nf_real));
}

/* Y = X W^T + bias;  log|det| = sum_i log_s_i. */
static int lu_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                      nf_real *ws)
{
    (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const nf_real *bias = b->P->value + st->bias, *ls = b->P->value + st->log_s;
    lu_assemble(b, ws, 1);
    for (int i = 0; i < n; i++) memcpy(y + (size_t)i * D, bias, (size_t)D * sizeof(nf_real));
    nf_gemm(0, 1, n, D, D, 1, x, D, ws + 2 * (size_t)D * D, D, 1, y, D);
    double ld = 0;
    for (int j = 0; j < D; j++) ld += ls[j];
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
    const size_t DD = (size_t)D * D;
    const nf_real *bias = b->P->value + st->bias, *ls = b->P->value + st->log_s, *perm = b->S->value + st->perm;
    lu_assemble(b, ws, 0);
    for (int i = 0; i < n; i++) {
        const nf_real *yi = y + (size_t)i * D;
        nf_real *xi = x + (size_t)i * D;
        for (int k = 0; k < D; k++) xi[(size_t)perm[k]] = yi[k] - bias[k]; /* (Z P)_{perm_k} = Z_k */
    }
    if (n > 0) {
        LU_TRSM(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasUnit, n, D, 1, ws, D, x, D);
        LU_TRSM(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, n, D, 1, ws + DD, D, x, D);
    }
    double ld = 0;
    for (int j = 0; j < D; j++) ld += ls[j];
    for (int i = 0; i < n; i++) logdet[i] -= (nf_real)ld;
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* From dL/dW (in the dW slot) to the factors:  dM = P^T dW ((dM)_{perm_i} = (dW)_i),
 *   dL = strict lower of dM U'^T,  dU' = L^T dM:  dU = its strict upper part and
 *   dL/dlog_s_i = (dU')_ii sign_i e^{log_s_i} + ldcoef   (ldcoef: the log-determinant's share). */
static void lu_chain(nf_bijector *b, nf_real *ws, double ldcoef)
{
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D;
    const nf_real *Lf = ws, *Uf = ws + DD, *perm = b->S->value + st->perm;
    nf_real *dW = ws + 3 * DD, *dM = ws + 4 * DD, *dU = ws + 5 * DD;
    for (int i = 0; i < D; i++) memcpy(dM + (size_t)perm[i] * D, dW + (size_t)i * D, (size_t)D * sizeof(nf_real));
    memcpy(dU, dM, DD * sizeof(nf_real));
    LU_TRMM(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, D, D, 1, Uf, D, dM, D);
    LU_TRMM(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasUnit, D, D, 1, Lf, D, dU, D);
    nf_real *glo = b->P->grad + st->lower, *gup = b->P->grad + st->upper, *gls = b->P->grad + st->log_s;
    for (int i = 0, k = 0; i < D; i++)
        for (int j = 0; j < i; j++) glo[k++] += dM[(size_t)i * D + j];
    for (int i = 0, k = 0; i < D; i++)
        for (int j = i + 1; j < D; j++) gup[k++] += dU[(size_t)i * D + j];
    for (int i = 0; i < D; i++) gls[i] += (nf_real)((double)dU[(size_t)i * D + i] * Uf[(size_t)i * D + i] + ldcoef);
}

/* y = W x + bias:  dL/dX += dY W;  dL/dW = dY^T X;  dL/dbias = sum_rows dY;
 * then lu_chain with ldcoef = sum_i dlogdet_i.  Reads Lf, Uf, W left in ws by forward. */
static int lu_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                       const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D;
    if (dx) nf_gemm(0, 0, n, D, D, 1, dy, D, ws + 2 * DD, D, 1, dx, D);
    nf_gemm(1, 0, D, D, n, 1, dy, D, x, D, 0, ws + 3 * DD, D);
    if (n <= 0) memset(ws + 3 * DD, 0, DD * sizeof(nf_real));
    nf_real *gb = b->P->grad + st->bias;
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    for (int j = 0; j < D; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += dy[(size_t)i * D + j];
        gb[j] += (nf_real)s;
    }
    lu_chain(b, ws, U);
    return NF_OK;
}

/* x = W^{-1} (y - bias):  dL/dy = W^{-T} dx, i.e. G = dX W^{-1} row-wise, from G P L U' = dX by two
 * triangular solves (H = G P: H L = dX U'^{-1}, then G_k = H_{perm_k});  dL/dY += G;
 * dL/dbias = -sum_rows G;  dL/dW = -G^T X;  then lu_chain with ldcoef = -sum_i dlogdet_i.
 * Reads Lf, Uf left in ws by inverse. */
static int lu_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                               const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx, int n,
                               nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const lu_state *st = b->state;
    const int D = b->dim;
    const size_t DD = (size_t)D * D, nd = (size_t)(n > 0 ? n : 0) * D;
    nf_real *H = ws + 6 * DD, *G = H + nd;
    const nf_real *perm = b->S->value + st->perm;
    memcpy(H, dx, nd * sizeof(nf_real));
    if (n > 0) {
        LU_TRSM(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, n, D, 1, ws + DD, D, H, D);
        LU_TRSM(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasUnit, n, D, 1, ws, D, H, D);
    }
    nf_real *gb = b->P->grad + st->bias;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < D; k++) G[(size_t)i * D + k] = H[(size_t)i * D + (size_t)perm[k]];
    if (dy) nf_axpy((int)nd, 1, G, dy);
    for (int j = 0; j < D; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += G[(size_t)i * D + j];
        gb[j] -= (nf_real)s;
    }
    nf_gemm(1, 0, D, D, n, -1, G, D, x, D, 0, ws + 3 * DD, D);
    if (n <= 0) memset(ws + 3 * DD, 0, DD * sizeof(nf_real));
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    lu_chain(b, ws, -U);
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
