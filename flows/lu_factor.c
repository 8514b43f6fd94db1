/* flows/lu_factor.c - the LU-factored matrix W = P L (U + diag(sign e^{log_s})) of lu and conv1x1:
 * registration, random-rotation initialisation, assembly, triangular solves and the chain rule
 * from dL/dW to the factors.  See flows/lu_factor.h. */
#include "flows/lu_factor.h"

#include <gsl/gsl_cblas.h>
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NF_DOUBLE
#define LU_TRMM cblas_dtrmm
#define LU_TRSM cblas_dtrsm
#else
#define LU_TRMM cblas_strmm
#define LU_TRSM cblas_strsm
#endif

int nf_lu_factor_add(nf_lu_factor *f, int d, const char *name, nf_params *P, nf_params *S)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    const size_t D = (size_t)d, tri = D * (D - 1) / 2;
    char nm[NF_PARAM_NAME_MAX + 32];
    int rc = NF_OK;
    if (tri) {
        snprintf(nm, sizeof nm, "%s.lower", name);
        rc = nf_params_add(P, nm, tri, &f->lower);
        snprintf(nm, sizeof nm, "%s.upper", name);
        if (rc == NF_OK) rc = nf_params_add(P, nm, tri, &f->upper);
    }
    snprintf(nm, sizeof nm, "%s.log_s", name);
    if (rc == NF_OK) rc = nf_params_add(P, nm, D, &f->log_s);
    snprintf(nm, sizeof nm, "%s.perm", name);
    if (rc == NF_OK) rc = nf_params_add(S, nm, D, &f->perm);
    snprintf(nm, sizeof nm, "%s.sign", name);
    if (rc == NF_OK) rc = nf_params_add(S, nm, D, &f->sign);
    return rc;
}

/* Q: a Haar-random orthogonal matrix; then P_gsl Q = L U.  GSL's P_gsl has P[p_j][j] = 1, so
 * Q = P_gsl^T L U and (P_gsl^T M)_j = M_{p_j}: our perm is GSL's p.  Works on caller buffers only,
 * so no GSL allocation (and no GSL error handler) is involved. */
int nf_lu_factor_init(const nf_lu_factor *f, nf_params *P, nf_params *S, nf_rng *rng)
{
    const int D = f->d;
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
    nf_real *lo = P->value + f->lower, *up = P->value + f->upper;
    nf_real *ls = P->value + f->log_s, *perm = S->value + f->perm, *sg = S->value + f->sign;
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

int nf_lu_factor_check(const nf_lu_factor *f, const nf_params *S, nf_real *ws, const char *type, const char *name)
{
    const int D = f->d;
    const nf_real *perm = S->value + f->perm, *sg = S->value + f->sign;
    nf_real *seen = ws + 4 * (size_t)D * D; /* (d) of the dM slot */
    memset(seen, 0, (size_t)D * sizeof(nf_real));
    for (int k = 0; k < D; k++) {
        const nf_real p = perm[k];
        if (!(p >= 0 && p < D && p == (nf_real)(int)p) || seen[(int)p] != 0)
            return nf_error(NF_EDATA, "%s (%s): stored %s.perm[%d] = %g: expected a permutation of 0..%d", type, name,
                            name, k, (double)p, D - 1);
        seen[(int)p] = 1;
        if (sg[k] != 1 && sg[k] != -1)
            return nf_error(NF_EDATA, "%s (%s): stored %s.sign[%d] = %g: expected +1 or -1", type, name, name, k,
                            (double)sg[k]);
    }
    return NF_OK;
}

double nf_lu_factor_logdet(const nf_lu_factor *f, const nf_params *P)
{
    const nf_real *ls = P->value + f->log_s;
    double ld = 0;
    for (int j = 0; j < f->d; j++) ld += ls[j];
    return ld;
}

/* Lf = L, Uf = U + diag(sign e^{log_s}); with_w: W = P Lf Uf as well (dW holds Lf Uf on the way). */
void nf_lu_factor_assemble(const nf_lu_factor *f, const nf_params *P, const nf_params *S, nf_real *ws, int with_w)
{
    const int D = f->d;
    const size_t DD = (size_t)D * D;
    nf_real *Lf = ws, *Uf = ws + DD, *W = ws + 2 * DD, *M = ws + 3 * DD;
    const nf_real *lo = P->value + f->lower, *up = P->value + f->upper, *ls = P->value + f->log_s;
    const nf_real *perm = S->value + f->perm, *sg = S->value + f->sign;
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

/* X W^T = Z with W^T = U'^T L^T P^T:  X U'^T L^T = Z P, two right-side triangular solves. */
void nf_lu_factor_solve(const nf_lu_factor *f, const nf_real *ws, nf_real *x, int ldx, int m)
{
    const int D = f->d;
    if (m <= 0) return;
    LU_TRSM(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasUnit, m, D, 1, ws, D, x, ldx);
    LU_TRSM(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, m, D, 1, ws + (size_t)D * D, D, x, ldx);
}

/* G = dX W^{-1}:  G P L U' = dX, so H = G P solves H L U' = dX: H = dX U'^{-1} L^{-1}. */
void nf_lu_factor_solve_transposed(const nf_lu_factor *f, const nf_real *ws, nf_real *h, int ldh, int m)
{
    const int D = f->d;
    if (m <= 0) return;
    LU_TRSM(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, m, D, 1, ws + (size_t)D * D, D, h, ldh);
    LU_TRSM(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasUnit, m, D, 1, ws, D, h, ldh);
}

/* From dL/dW (in the dW slot) to the factors:  dM = P^T dW ((dM)_{perm_i} = (dW)_i),
 *   dL = strict lower of dM U'^T,  dU' = L^T dM:  dU = its strict upper part and
 *   dL/dlog_s_i = (dU')_ii sign_i e^{log_s_i} + ldcoef   (ldcoef: the log-determinant's share). */
void nf_lu_factor_chain(const nf_lu_factor *f, nf_params *P, const nf_params *S, nf_real *ws, double ldcoef)
{
    const int D = f->d;
    const size_t DD = (size_t)D * D;
    const nf_real *Lf = ws, *Uf = ws + DD, *perm = S->value + f->perm;
    nf_real *dW = ws + 3 * DD, *dM = ws + 4 * DD, *dU = ws + 5 * DD;
    for (int i = 0; i < D; i++) memcpy(dM + (size_t)perm[i] * D, dW + (size_t)i * D, (size_t)D * sizeof(nf_real));
    memcpy(dU, dM, DD * sizeof(nf_real));
    LU_TRMM(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, D, D, 1, Uf, D, dM, D);
    LU_TRMM(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasUnit, D, D, 1, Lf, D, dU, D);
    nf_real *glo = P->grad + f->lower, *gup = P->grad + f->upper, *gls = P->grad + f->log_s;
    for (int i = 0, k = 0; i < D; i++)
        for (int j = 0; j < i; j++) glo[k++] += dM[(size_t)i * D + j];
    for (int i = 0, k = 0; i < D; i++)
        for (int j = i + 1; j < D; j++) gup[k++] += dU[(size_t)i * D + j];
    for (int i = 0; i < D; i++) gls[i] += (nf_real)((double)dU[(size_t)i * D + i] * Uf[(size_t)i * D + i] + ldcoef);
}
