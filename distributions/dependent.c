/* distributions/dependent.c - dependence structures between data points (block equicorrelation, kinship
 * mixture), their log-determinants and precisions, the unbiased minibatch estimator of the joint
 * log-likelihood with its gradients, and the flow base built on it.  The maths is in dependent.h and
 * above each function. */
#include "distributions/dependent.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/simd.h"
#include "core/threads.h"

#define NF_HALF_LOG_2PI 0.91893853320467274178

/* LAPACK (OpenBLAS): eigenpairs of a symmetric matrix, divide and conquer.  The trailing lengths are
 * gfortran's hidden string lengths. */
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                    double *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t, size_t);

static double sigmoid(double u) { return u >= 0 ? 1 / (1 + exp(-u)) : exp(u) / (1 + exp(u)); }

static void ahead_stop(nf_dep *d);

void nf_dep_free(nf_dep *d)
{
    if (!d) return;
    ahead_stop(d);
    free(d->block);
    free(d->block_size);
    free(d->eval);
    free(d->evec);
    free(d->evec_r);
    free(d->comp);
    free(d->comp_start);
    free(d->comp_pts);
    free(d->comp_cols);
    free(d->comp_last);
    free(d->group_pos);
    free(d->group_start);
    free(d->pair_ij);
    free(d->pair_a);
    free(d->A);
    free(d->dA);
    free(d->theta);
    free(d->dtheta);
    free(d->M);
    free(d->W);
    free(d->kd);
    free(d->kpart);
    free(d->Acache);
    free(d->blk);
    free(d->seen);
    free(d->es);
    free(d);
}

static int alloc_common(nf_dep **out, nf_dep_kind kind, size_t n, int n_params)
{
    nf_dep *d = nf_calloc(1, sizeof *d, "dependence structure");
    if (!d) return NF_ENOMEM;
    d->kind = kind;
    d->n = n;
    d->n_params = n_params;
    d->theta = nf_calloc((size_t)n_params, sizeof *d->theta, "dependence parameters");
    d->dtheta = nf_calloc((size_t)n_params, sizeof *d->dtheta, "dependence parameters");
    d->seen = nf_calloc(n, 1, "dependence structure");
    if (!d->theta || !d->dtheta || !d->seen) {
        nf_dep_free(d);
        return NF_ENOMEM;
    }
    *out = d;
    return NF_OK;
}

/* ---- block equicorrelation ---------------------------------------------------------------------- */

/* Group ids to blocks 0..B-1 in order of first appearance: sort (id, point) pairs, then number the
 * runs of equal ids by their first point. */
typedef struct {
    int64_t g;
    size_t i;
} id_point;

static int cmp_id_point(const void *a, const void *b)
{
    const id_point *x = a, *y = b;
    if (x->g != y->g) return x->g < y->g ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int nf_dep_equi_create(nf_dep **out, const int64_t *group, size_t n, int per_block)
{
    *out = NULL;
    if (n < 1) return nf_error(NF_EINVAL, "equicorrelation over %zu points (expected at least 1)", n);
    if (n > (size_t)INT32_MAX) return nf_error(NF_EINVAL, "equicorrelation over %zu points (at most 2^31 - 1)", n);
    id_point *order = malloc(n * sizeof *order);
    int *first_block = malloc(n * sizeof *first_block);
    int *block = malloc(n * sizeof *block);
    if (!order || !first_block || !block) {
        free(order), free(first_block), free(block);
        return nf_error(NF_ENOMEM, "out of memory grouping %zu points", n);
    }
    for (size_t i = 0; i < n; i++) order[i] = (id_point){group[i], i};
    qsort(order, n, sizeof *order, cmp_id_point);
    /* runs of equal ids; a run's block number is the rank of its first point among the runs' first points */
    size_t runs = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || order[k].g != order[k - 1].g) runs++;
        first_block[order[k].i] = (int)(runs - 1);
    }
    /* renumber runs by first appearance */
    int *run_to_block = malloc(runs * sizeof *run_to_block);
    if (!run_to_block) {
        free(order), free(first_block), free(block);
        return nf_error(NF_ENOMEM, "out of memory grouping %zu points", n);
    }
    for (size_t r = 0; r < runs; r++) run_to_block[r] = -1;
    int next = 0;
    for (size_t i = 0; i < n; i++) {
        int r = first_block[i];
        if (run_to_block[r] < 0) run_to_block[r] = next++;
        block[i] = run_to_block[r];
    }
    free(run_to_block);
    free(order);
    free(first_block);
    nf_dep *d;
    int rc = alloc_common(&d, NF_DEP_EQUI, n, per_block ? next : 1);
    if (rc != NF_OK) {
        free(block);
        return nf_error(rc, "out of memory creating an equicorrelation over %zu points", n);
    }
    d->n_blocks = next;
    d->per_block = per_block != 0;
    d->pooled = per_block == 2;
    d->block = block;
    d->block_size = nf_calloc((size_t)next, sizeof *d->block_size, "block sizes");
    if (!d->block_size) {
        nf_dep_free(d);
        return NF_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) d->block_size[block[i]]++;
    *out = d;
    return NF_OK;
}

/* One block of size m with correlation rho:
 *   D = (1 - rho)(1 + (m-1) rho),  A_ii = (1 + (m-2) rho) / D,  A_ij = -rho / D  (i != j),
 *   dD = (m-2) - 2 (m-1) rho,  dA_ii = ((m-2) D - (1 + (m-2) rho) dD) / D^2,  dA_ij = -(D - rho dD) / D^2. */
static void equi_entries(double m, double rho, double *a_ii, double *a_ij, double *da_ii, double *da_ij)
{
    double D = (1 - rho) * (1 + (m - 1) * rho), dD = (m - 2) - 2 * (m - 1) * rho;
    *a_ii = (1 + (m - 2) * rho) / D;
    *a_ij = -rho / D;
    *da_ii = ((m - 2) * D - (1 + (m - 2) * rho) * dD) / (D * D);
    *da_ij = -(D - rho * dD) / (D * D);
}

/* ---- kinship mixture ---------------------------------------------------------------------------- */

/* Eigenpairs of the symmetric m x m matrix a (column-major, overwritten by the eigenvectors as its
 * columns), eigenvalues ascending into w: LAPACK dsyevd. */
static int eigh(double *a, int m, double *w)
{
    int lwork = -1, liwork = -1, info = 0, iw = 0;
    double wq = 0;
    dsyevd_("V", "U", &m, a, &m, w, &wq, &lwork, &iw, &liwork, &info, 1, 1);
    lwork = (int)wq + 1;
    liwork = iw;
    double *work = malloc((size_t)lwork * sizeof *work);
    int *iwork = malloc((size_t)liwork * sizeof *iwork);
    if (!work || !iwork) info = -1000;
    else dsyevd_("V", "U", &m, a, &m, w, work, &lwork, iwork, &liwork, &info, 1, 1);
    free(work);
    free(iwork);
    if (info == -1000) return nf_error(NF_ENOMEM, "out of memory for the eigendecomposition of K");
    if (info != 0) return nf_error(NF_ENOCONV, "eigendecomposition of the kinship matrix failed (LAPACK dsyevd info %d)", info);
    return NF_OK;
}

static int find_root(int *up, int i)
{
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
}

/* d->comp, d->comp_start, d->comp_pts: the connected components of K's graph (union-find over the
 * nonzero entries off the diagonal), numbered by their smallest point; and the per-component and
 * per-batch buffers beside them (comp_cols is filled once the eigenvectors are sorted). */
static int kin_components(nf_dep *d, const double *K)
{
    const size_t n = d->n;
    int *up = malloc(n * sizeof *up);
    d->comp = malloc(n * sizeof *d->comp);
    d->comp_start = calloc(n + 1, sizeof *d->comp_start);
    d->comp_pts = malloc(n * sizeof *d->comp_pts);
    d->comp_cols = malloc(n * sizeof *d->comp_cols);
    d->group_pos = malloc(n * sizeof *d->group_pos);
    d->group_start = malloc((n + 1) * sizeof *d->group_start);
    if (!up || !d->comp || !d->comp_start || !d->comp_pts || !d->comp_cols || !d->group_pos || !d->group_start) {
        free(up);
        return nf_error(NF_ENOMEM, "out of memory for the families of a kinship matrix");
    }
    for (size_t i = 0; i < n; i++) up[i] = (int)i;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (K[i * n + j] != 0 || K[j * n + i] != 0) {
                int a = find_root(up, (int)i), b = find_root(up, (int)j);
                if (a != b) up[a > b ? a : b] = a < b ? a : b;
            }
    d->n_comp = 0;
    for (size_t i = 0; i < n; i++) { /* a root is its component's smallest point: numbered in order */
        int r = find_root(up, (int)i);
        d->comp[i] = r == (int)i ? d->n_comp++ : d->comp[r];
    }
    d->comp_last = malloc((size_t)d->n_comp * sizeof *d->comp_last);
    if (!d->comp_last) {
        free(up);
        return nf_error(NF_ENOMEM, "out of memory for the families of a kinship matrix");
    }
    for (int c = 0; c < d->n_comp; c++) d->comp_last[c] = -1;
    for (size_t i = 0; i < n; i++) d->comp_start[d->comp[i] + 1]++;
    for (int c = 0; c < d->n_comp; c++) d->comp_start[c + 1] += d->comp_start[c];
    free(up);
    size_t *fill = malloc((size_t)d->n_comp * sizeof *fill);
    if (!fill) return nf_error(NF_ENOMEM, "out of memory for the families of a kinship matrix");
    memcpy(fill, d->comp_start, (size_t)d->n_comp * sizeof *fill);
    for (size_t i = 0; i < n; i++) d->comp_pts[fill[d->comp[i]]++] = (int)i;
    free(fill);
    return NF_OK;
}

int nf_dep_families(const nf_dep *d, size_t *largest)
{
    size_t mmax = 0;
    for (int c = 0; c < d->n_comp; c++) {
        size_t m = d->comp_start[c + 1] - d->comp_start[c];
        mmax = m > mmax ? m : mmax;
    }
    if (largest) *largest = mmax;
    return d->n_comp;
}

typedef struct {
    double value;
    int column;
} eigen_key;

static int by_eigenvalue(const void *a, const void *b)
{
    const eigen_key *x = a, *y = b;
    return x->value < y->value ? -1 : x->value > y->value ? 1 : x->column - y->column;
}

/* U and the eigenvalues of K (made exactly symmetric), one component at a time: a component of m
 * points costs an m x m eigendecomposition (K of families of relatives: a few m^3 instead of n^3).
 * a (n x n) receives U column-major, columns in the order of the components; w their eigenvalues;
 * col_comp the component of each column. */
static int kin_eigen(nf_dep *d, const double *K, double *a, double *w, int *col_comp)
{
    const size_t n = d->n;
    size_t mmax;
    nf_dep_families(d, &mmax);
    double *blk = d->n_comp > 1 ? malloc(mmax * mmax * sizeof *blk) : a;
    if (!blk) return nf_error(NF_ENOMEM, "out of memory for the eigendecomposition of K");
    if (d->n_comp > 1) memset(a, 0, n * n * sizeof *a);
    int rc = NF_OK;
    for (int c = 0; c < d->n_comp && rc == NF_OK; c++) {
        const size_t off = d->comp_start[c], m = d->comp_start[c + 1] - off;
        const int *pts = d->comp_pts + off;
        for (size_t r = 0; r < m; r++)
            for (size_t q = 0; q < m; q++) {
                size_t i = (size_t)pts[r], j = (size_t)pts[q];
                blk[q * m + r] = 0.5 * (K[i * n + j] + K[j * n + i]);
            }
        rc = eigh(blk, (int)m, w + off);
        for (size_t k = 0; rc == NF_OK && k < m; k++) {
            col_comp[off + k] = c;
            if (d->n_comp > 1)
                for (size_t r = 0; r < m; r++) a[(off + k) * n + (size_t)pts[r]] = blk[k * m + r];
        }
    }
    if (blk != a) free(blk);
    return rc;
}

int nf_dep_kinship_create(nf_dep **out, const double *K, size_t rows, size_t cols, size_t n)
{
    *out = NULL;
    if (rows != cols) return nf_error(NF_EINVAL, "kinship matrix is %zu x %zu (expected a square matrix)", rows, cols);
    if (rows != n)
        return nf_error(NF_EINVAL, "kinship matrix is %zu x %zu but there are %zu points (expected %zu x %zu)", rows,
                        cols, n, n, n);
    if (n < 1 || n > 46340) return nf_error(NF_EINVAL, "kinship matrix of %zu points (expected 1 to 46340)", n);
    double kmax = 0;
    for (size_t i = 0; i < n * n; i++) {
        if (!isfinite(K[i]))
            return nf_error(NF_EINVAL, "kinship matrix entry (%zu, %zu) is %g (expected finite)", i / n, i % n, K[i]);
        kmax = fmax(kmax, fabs(K[i]));
    }
    double stol = 1e-9 * fmax(kmax, 1e-300);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (fabs(K[i * n + j] - K[j * n + i]) > stol)
                return nf_error(NF_EINVAL,
                                "kinship matrix is not symmetric: entry (%zu, %zu) = %g but (%zu, %zu) = %g "
                                "(expected a symmetric positive semi-definite matrix)",
                                i, j, K[i * n + j], j, i, K[j * n + i]);
    nf_dep *d;
    if (alloc_common(&d, NF_DEP_KINSHIP, n, 1) != NF_OK)
        return nf_error(NF_ENOMEM, "out of memory creating a kinship structure");
    d->ld_lam = NAN; /* no log det kept yet */
    d->eval = malloc(n * sizeof *d->eval);
    d->evec = malloc(n * n * sizeof *d->evec);
    d->evec_r = malloc(n * n * sizeof *d->evec_r);
    double *a = malloc(n * n * sizeof *a), *w = malloc(n * sizeof *w);
    int *order = malloc(n * sizeof *order), *col_comp = malloc(n * sizeof *col_comp);
    eigen_key *key = malloc(n * sizeof *key);
    int rc = d->eval && d->evec && d->evec_r && a && w && order && col_comp && key
                 ? NF_OK
                 : nf_error(NF_ENOMEM, "out of memory for the eigenvectors of a %zu x %zu kinship matrix", n, n);
    if (rc == NF_OK) rc = kin_components(d, K);
    if (rc == NF_OK) rc = kin_eigen(d, K, a, w, col_comp);
    if (rc == NF_OK) { /* all eigenvalues ascending (stable: a component's columns keep their order) */
        for (size_t k = 0; k < n; k++) key[k] = (eigen_key){w[k], (int)k};
        qsort(key, n, sizeof *key, by_eigenvalue);
        for (size_t k = 0; k < n; k++) order[k] = key[k].column, d->eval[k] = key[k].value;
        double emax = fmax(fabs(d->eval[0]), fabs(d->eval[n - 1]));
        if (d->eval[0] < -1e-8 * fmax(emax, 1e-300))
            rc = nf_error(NF_EINVAL,
                          "kinship matrix is not positive semi-definite: smallest eigenvalue %g (largest %g; "
                          "expected a symmetric positive semi-definite matrix)", d->eval[0], d->eval[n - 1]);
    }
    if (rc == NF_OK) {
        for (size_t k = 0; k < n; k++)
            if (d->eval[k] < 0) d->eval[k] = 0;
        /* column-major a[k n + i] = U_ik in the components' order; keep U row-major, columns sorted */
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < n; k++) {
                d->evec[i * n + k] = a[(size_t)order[k] * n + i];
                d->evec_r[i * n + k] = (nf_real)a[(size_t)order[k] * n + i];
            }
        /* each component's columns, in sorted order */
        size_t *fill = malloc((size_t)d->n_comp * sizeof *fill);
        if (!fill) rc = nf_error(NF_ENOMEM, "out of memory for the families of a kinship matrix");
        for (int c = 0; fill && c < d->n_comp; c++) fill[c] = d->comp_start[c];
        for (size_t k = 0; fill && k < n; k++) d->comp_cols[fill[col_comp[order[k]]]++] = (int)k;
        free(fill);
    }
    free(a), free(w), free(order), free(col_comp), free(key);
    if (rc != NF_OK) {
        nf_dep_free(d);
        return rc;
    }
    *out = d;
    return NF_OK;
}

/* ---- the algebra -------------------------------------------------------------------------------- */

int nf_dep_param_of(const nf_dep *d, size_t i) { return d->kind == NF_DEP_EQUI && d->per_block ? d->block[i] : 0; }

/* equi: sum over blocks of (m-1) log(1 - rho) + log(1 + (m-1) rho),
 *       d/drho = -(m-1)/(1 - rho) + (m-1)/(1 + (m-1) rho);
 * kinship: sum_k log s_k, s_k = lambda + (1 - lambda) e_k,  d/dlambda = sum_k (1 - e_k)/s_k. */
double nf_dep_log_det(const nf_dep *d, const double *theta, double *dlogdet)
{
    double L = 0;
    if (dlogdet)
        for (int k = 0; k < d->n_params; k++) dlogdet[k] = 0;
    if (d->kind == NF_DEP_EQUI) {
        for (int c = 0; c < d->n_blocks; c++) {
            double m = (double)d->block_size[c], rho = theta[d->per_block ? c : 0];
            L += (m - 1) * log1p(-rho) + log1p((m - 1) * rho);
            if (dlogdet) dlogdet[d->per_block ? c : 0] += -(m - 1) / (1 - rho) + (m - 1) / (1 + (m - 1) * rho);
        }
    } else {
        double lam = theta[0], dl = 0;
        for (size_t k = 0; k < d->n; k++) {
            double s = lam + (1 - lam) * d->eval[k];
            L += log(s);
            dl += (1 - d->eval[k]) / s;
        }
        if (dlogdet) dlogdet[0] = dl;
    }
    return L;
}

/* nf_dep_log_det at d->theta for a batch: a kinship log det is a sum over all n eigenvalues (5,000
 * logarithms, about 0.1 ms), so it is kept for the lambda it was computed at. */
static double batch_log_det(nf_dep *d, double *dlogdet)
{
    if (d->kind != NF_DEP_KINSHIP) return nf_dep_log_det(d, d->theta, dlogdet);
    if (d->ld_lam != d->theta[0]) {
        d->ld = nf_dep_log_det(d, d->theta, &d->ld_dlam);
        d->ld_lam = d->theta[0];
    }
    if (dlogdet) dlogdet[0] = d->ld_dlam;
    return d->ld;
}

static void ahead_finish(nf_dep *d);

static int reserve(nf_dep *d, int b)
{
    ahead_finish(d); /* d->A may move */
    size_t w = d->kind == NF_DEP_KINSHIP ? 2 * (size_t)b * d->n : 0;
    if (b <= d->cap_b && w <= d->cap_w) return NF_OK;
    size_t bb = (size_t)b * b;
    double *A = realloc(d->A, bb * sizeof *A), *dA = A ? realloc(d->dA, bb * sizeof *dA) : NULL;
    if (A) d->A = A;
    if (dA) d->dA = dA;
    nf_real *M = dA ? realloc(d->M, bb * sizeof *M) : NULL;
    if (M) d->M = M;
    nf_real *W = M && w ? realloc(d->W, w * sizeof *W) : d->W;
    if (W) d->W = W;
    int *blk = M ? realloc(d->blk, (size_t)b * sizeof *blk) : NULL;
    if (blk) d->blk = blk;
    if (!M || !blk || (w && !W)) return nf_error(NF_ENOMEM, "out of memory for a dependent batch of %d points", b);
    d->cap_b = b;
    d->cap_w = w;
    return NF_OK;
}

static int first_bad_index(nf_dep *d, const size_t *idx, int b, int *twice);

/* Indices in range and distinct, or one clear error. */
static int check_idx(nf_dep *d, const size_t *idx, int b)
{
    if (!idx) return nf_error(NF_EINVAL, "a dependent likelihood needs the points' indices");
    int twice, i = first_bad_index(d, idx, b, &twice);
    if (i >= 0 && !twice)
        return nf_error(NF_EINVAL, "point index %zu at batch position %d (the structure has %zu points)", idx[i], i,
                        d->n);
    /* a batch is a set of points; repeated points would break the pair weights */
    if (i >= 0) return nf_error(NF_EINVAL, "point %zu is twice in a batch (expected distinct points)", idx[i]);
    return NF_OK;
}

/* kinship: A_BB = (U_B diag(1/s)) U_B^T and dA_BB = -(U_B diag((1-e)/s^2)) U_B^T, two products
 * b x b x n through nf_gemm (W holds U_B scaled, W + b n holds U_B). */
static void kinship_block(nf_dep *d, double lam, const size_t *idx, int b, double *out, int deriv)
{
    size_t n = d->n;
    nf_real *W = d->W, *UB = d->W + (size_t)b * n;
    for (int i = 0; i < b; i++) memcpy(UB + (size_t)i * n, d->evec_r + idx[i] * n, n * sizeof *UB);
    for (int i = 0; i < b; i++)
        for (size_t k = 0; k < n; k++) {
            double s = lam + (1 - lam) * d->eval[k];
            double f = deriv ? -(1 - d->eval[k]) / (s * s) : 1 / s;
            W[(size_t)i * n + k] = (nf_real)(UB[(size_t)i * n + k] * f);
        }
    nf_gemm(0, 1, b, b, (int)n, 1, W, (int)n, UB, (int)n, 0, d->M, b);
    for (size_t k = 0; k < (size_t)b * b; k++) out[k] = d->M[k];
}

/* A of several components: within component c of m points, A_cc = W_c W_c^T with W_c = U restricted to
 * its points and its own eigenvectors, scaled by s^-1/2 (m x m; sum over components of m^3 multiply-
 * adds); A is zero across components, where the lookups read nothing (kin_lookup_rows). */
static int kin_cache_components(nf_dep *d, double lam)
{
    const size_t n = d->n;
    size_t mmax;
    nf_dep_families(d, &mmax);
    nf_real *W = malloc(2 * mmax * mmax * sizeof *W), *T = W + mmax * mmax;
    if (!W) return nf_error(NF_ENOMEM, "out of memory for the precision of a kinship structure");
    for (int c = 0; c < d->n_comp; c++) {
        const size_t off = d->comp_start[c], m = d->comp_start[c + 1] - off;
        const int *pts = d->comp_pts + off, *cols = d->comp_cols + off;
        for (size_t r = 0; r < m; r++)
            for (size_t q = 0; q < m; q++) {
                size_t k = (size_t)cols[q];
                W[r * m + q] = (nf_real)(d->evec[(size_t)pts[r] * n + k] / sqrt(lam + (1 - lam) * d->eval[k]));
            }
        nf_gemm(0, 1, (int)m, (int)m, (int)m, 1, W, (int)m, W, (int)m, 0, T, (int)m);
        for (size_t r = 0; r < m; r++) /* points ascending: pts[q] <= pts[r] for q <= r, the lower triangle */
            for (size_t q = 0; q <= r; q++) d->Acache[(size_t)pts[r] * n + (size_t)pts[q]] = T[r * m + q];
    }
    free(W);
    d->cache_lam = lam;
    return NF_OK;
}

/* The whole A = U diag(1/s) U^T = W W^T, W = U diag(s^-1/2) (n x n), rebuilt when lambda changes: the
 * lower triangle by blocks of rows (block r: rows r of W against rows 0..r1 of W, n^3 multiply-adds
 * in all, half the full product), or component by component; lookups read the lower triangle. */
static int kin_cache(nf_dep *d, double lam)
{
    ahead_finish(d);
    if (d->Acache && d->cache_lam == lam) return NF_OK;
    size_t n = d->n;
    if (!d->Acache) d->Acache = malloc(n * n * sizeof *d->Acache);
    if (d->Acache && d->n_comp > 1) return kin_cache_components(d, lam); /* the pages between stay untouched */
    nf_real *W = malloc(n * n * sizeof *W);
    if (!d->Acache || !W) {
        free(W);
        return nf_error(NF_ENOMEM, "out of memory for the %zu x %zu precision of a kinship structure", n, n);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < n; k++)
            W[i * n + k] = (nf_real)(d->evec[i * n + k] / sqrt(lam + (1 - lam) * d->eval[k]));
    const size_t R = 256;
    for (size_t r0 = 0; r0 < n; r0 += R) {
        size_t r1 = r0 + R < n ? r0 + R : n;
        nf_gemm(0, 1, (int)(r1 - r0), (int)r1, (int)n, 1, W + r0 * n, (int)n, W, (int)n, 0, d->Acache + r0 * n,
                (int)n);
    }
    free(W);
    d->cache_lam = lam;
    return NF_OK;
}

/* A_BB from the cache: each pair once (j <= i) from its lower triangle (row max, column min of the
 * two points), rows split over the thread pool in parts of equal area, then mirrored by tiles.  The
 * reads land at random in a table of n^2 entries (100 MB at n = 5,000), mostly outside the caches
 * during training: a read costs memory latency, which threads overlap. */
typedef struct {
    const nf_dep *d;
    const size_t *idx;
    int b;
    double *A;
} kin_lookup_job;

/* A_ij for j <= i of the rows i0 <= i < i1.  Each read misses the caches, and a core keeps only so
 * many misses in flight: the entries of row i + AHEAD are prefetched (into L2) while row i is read,
 * which overlaps the two rows' misses (27% less time a batch in a microbenchmark of 256-point batches
 * of a 5,000-point table). */
static void kin_lookup_rows(const kin_lookup_job *J, int i0, int i1)
{
    enum { AHEAD = 2 };
    const int b = J->b;
    const nf_real *C = J->d->Acache;
    const size_t n = J->d->n, *idx = J->idx;
    for (int i = i0; i < i1; i++) {
        if (i + AHEAD < b) {
            size_t pn = idx[i + AHEAD];
            for (int j = 0; j <= i + AHEAD; j++) {
                size_t pj = idx[j], hi = pn > pj ? pn : pj, lo = pn ^ pj ^ hi;
                __builtin_prefetch(C + hi * n + lo, 0, 2);
            }
        }
        size_t pi = idx[i];
        double *Ai = J->A + (size_t)i * b;
        for (int j = 0; j <= i; j++) {
            size_t pj = idx[j], hi = pi > pj ? pi : pj, lo = pi ^ pj ^ hi;
            Ai[j] = C[hi * n + lo];
        }
    }
}

/* Part p of nparts of the rows, by equal parts of the triangle's area b^2 / 2. */
static void kin_lookup_part(void *arg, int part, int nparts)
{
    const kin_lookup_job *J = arg;
    const int b = J->b;
    int i0 = (int)(b * sqrt((double)part / nparts));
    int i1 = part + 1 == nparts ? b : (int)(b * sqrt((double)(part + 1) / nparts));
    kin_lookup_rows(J, i0, i1);
}

/* A_ij = A_ji for j > i, by tiles */
static void kin_mirror(double *A, int b)
{
    enum { TILE = 32 };
    for (int i0 = 0; i0 < b; i0 += TILE)
        for (int j0 = i0; j0 < b; j0 += TILE)
            for (int i = i0; i < i0 + TILE && i < b; i++)
                for (int j = j0 > i ? j0 : i + 1; j < j0 + TILE && j < b; j++)
                    A[(size_t)i * b + j] = A[(size_t)j * b + i];
}

static int kin_pairs(nf_dep *d, const size_t *idx, int b);

/* A_BB (b x b) from the cache; with several components from the batch's pairs within them (kin_pairs),
 * zero across.  With one component, only the lower triangle (j <= i) unless mirror. */
static int kin_lookup(nf_dep *d, const size_t *idx, int b, double *A, int mirror)
{
    if (d->n_comp > 1) {
        NF_TRY(kin_pairs(d, idx, b));
        memset(A, 0, (size_t)b * b * sizeof *A);
        for (int i = 0; i < b; i++) A[(size_t)i * b + i] = d->pair_a[i];
        for (size_t q = 0; q < d->n_pairs; q++) {
            size_t i = (size_t)d->pair_ij[2 * q], j = (size_t)d->pair_ij[2 * q + 1];
            A[i * b + j] = A[j * b + i] = d->pair_a[(size_t)b + q];
        }
        return NF_OK;
    }
    kin_lookup_job J = {.d = d, .idx = idx, .b = b, .A = A};
    int T = nf_blas_get_threads(), parts = b >= 64 && T > 1 ? T : 1;
    nf_threads_run(T, parts, kin_lookup_part, &J);
    if (mirror) kin_mirror(A, b);
    return NF_OK;
}

/* ---- a batch's lookups beside the flow's forward pass (nf_dep_batch_prepare) ----------------------
 * With the cached precision, a batch's A_BB is b (b + 1) / 2 reads at random places of an n x n table
 * (32,896 reads of 100 MB at b = 256, n = 5,000): memory latency, about 0.25 ms a batch on one core,
 * half the flow's own step.  The reads need only the batch's indices, known before the flow's forward
 * pass makes the latents, so they go to the worker pool as a started job (nf_threads_start; with two
 * or more threads): its workers read while the caller runs the forward pass (serially meanwhile; a
 * flow of this size gains little from a second thread in its own passes), and the caller, once its
 * latents are ready, reads the parts no worker has taken (nf_threads_finish).  Every entry point
 * that reads or moves d->A or the cache first finishes an open job (ahead_finish). */
typedef struct nf_dep_ahead {
    kin_lookup_job job; /* A_BB of job.idx (a copy of the batch's indices) into d->A */
    size_t *idx;
    int cap;
    double lam;         /* the cache's lambda the job reads */
    int open;           /* started and not finished */
    int claimable;      /* the job's A_BB is (or will be) in d->A and nothing has used it yet */
} nf_dep_ahead;

enum { AHEAD_PARTS = 16 }; /* equal parts of the triangle, so the caller can take what is left */

static void ahead_finish(nf_dep *d)
{
    nf_dep_ahead *q = d->ahead;
    if (!q || !q->open) return;
    nf_threads_finish();
    q->open = 0;
}

static void ahead_stop(nf_dep *d)
{
    if (!d->ahead) return;
    ahead_finish(d);
    free(d->ahead->idx);
    free(d->ahead);
    d->ahead = NULL;
}

/* 1 if the last started job reads A_BB of exactly idx[0..b) at lambda lam: then it is finished (its
 * lower triangle in d->A) and used up. */
static int ahead_claim(nf_dep *d, const size_t *idx, int b, double lam)
{
    nf_dep_ahead *q = d->ahead;
    if (!q || !q->claimable) return 0;
    ahead_finish(d);
    q->claimable = 0;
    if (q->job.b != b || q->lam != lam || d->cache_lam != lam || memcmp(q->idx, idx, (size_t)b * sizeof *idx))
        return 0;
    return 1;
}

/* Indices in range and distinct (d->seen marks them on the way and is cleared after): -1, or the
 * first position that is out of range (*twice 0) or repeats an earlier one (*twice 1). */
static int first_bad_index(nf_dep *d, const size_t *idx, int b, int *twice)
{
    int i = 0;
    *twice = 0;
    for (; i < b && idx[i] < d->n && !(*twice = d->seen[idx[i]]); i++) d->seen[idx[i]] = 1;
    for (int j = 0; j < i; j++) d->seen[idx[j]] = 0;
    return i < b ? i : -1;
}

static int kin_cache(nf_dep *d, double lam);

void nf_dep_lookahead(nf_dep *d, int on)
{
    ahead_finish(d);
    d->no_ahead = !on;
}

int nf_dep_batch_prepare(nf_dep *d, const nf_real *u, const size_t *idx, int b)
{
    const int T = nf_blas_get_threads();
    if (d->kind != NF_DEP_KINSHIP || !d->use_cache || d->n_comp > 1 || !idx || b < 64 || T < 2 ||
        nf_threads_in_parallel() || d->no_ahead)
        return NF_OK; /* (several components: kin_pairs reads the few entries within them in the step) */
    int twice;
    if (first_bad_index(d, idx, b, &twice) >= 0) return NF_OK; /* the log-density will say what is wrong */
    ahead_finish(d);
    nf_dep_theta(d, u, d->theta);
    NF_TRY(reserve(d, b));
    NF_TRY(kin_cache(d, d->theta[0]));
    nf_dep_ahead *q = d->ahead;
    if (!q && !(q = d->ahead = nf_calloc(1, sizeof *q, "dependence lookups"))) return NF_ENOMEM;
    if (b > q->cap) {
        size_t *t = realloc(q->idx, (size_t)b * sizeof *t);
        if (!t) return nf_error(NF_ENOMEM, "out of memory for a dependent batch of %d points", b);
        q->idx = t;
        q->cap = b;
    }
    memcpy(q->idx, idx, (size_t)b * sizeof *idx);
    q->job = (kin_lookup_job){.d = d, .idx = q->idx, .b = b, .A = d->A};
    q->lam = d->theta[0];
    q->open = q->claimable = nf_threads_start(T, AHEAD_PARTS, kin_lookup_part, &q->job);
    return NF_OK;
}

int nf_dep_kinship_cache(nf_dep *d, int on)
{
    ahead_finish(d);
    if (d->kind != NF_DEP_KINSHIP) return NF_OK;
    if (on && d->n > NF_DEP_CACHE_MAX)
        return nf_error(NF_EINVAL, "a cached precision of %zu points would take %zu MB (at most %d points)", d->n,
                        d->n * d->n * sizeof(nf_real) >> 20, NF_DEP_CACHE_MAX);
    d->use_cache = on != 0;
    if (!on) {
        free(d->Acache);
        d->Acache = NULL;
    }
    return NF_OK;
}

/* nf_dep_precision; lower: a kinship A from the cache with one component gets its lower triangle
 * only (what the estimator reads, kin_lower_times). */
static int precision(nf_dep *d, const double *theta, const size_t *idx, int b, double *A, double *dA, int lower)
{
    ahead_finish(d);
    if (d->ahead) d->ahead->claimable = 0; /* d->A may be written */
    if (b < 1) return nf_error(NF_EINVAL, "precision of an empty batch");
    NF_TRY(check_idx(d, idx, b));
    NF_TRY(reserve(d, b));
    if (d->kind == NF_DEP_KINSHIP) {
        if (A && d->use_cache) {
            NF_TRY(kin_cache(d, theta[0]));
            NF_TRY(kin_lookup(d, idx, b, A, !lower));
        } else if (A) {
            kinship_block(d, theta[0], idx, b, A, 0);
        }
        if (dA) kinship_block(d, theta[0], idx, b, dA, 1);
        return NF_OK;
    }
    int *blk = d->blk;
    for (int j = 0; j < b; j++) blk[j] = d->block[idx[j]];
    for (int i = 0; i < b; i++) {
        int c = blk[i];
        double a_ii, a_ij, da_ii, da_ij;
        equi_entries((double)d->block_size[c], theta[d->per_block ? c : 0], &a_ii, &a_ij, &da_ii, &da_ij);
        double *Ai = A ? A + (size_t)i * b : NULL, *dAi = dA ? dA + (size_t)i * b : NULL;
        if (Ai) {
            for (int j = 0; j < b; j++) Ai[j] = blk[j] == c ? a_ij : 0;
            Ai[i] = a_ii;
        }
        if (dAi) {
            for (int j = 0; j < b; j++) dAi[j] = blk[j] == c ? da_ij : 0;
            dAi[i] = da_ii;
        }
    }
    return NF_OK;
}

int nf_dep_precision(nf_dep *d, const double *theta, const size_t *idx, int b, double *A, double *dA)
{
    return precision(d, theta, idx, b, A, dA, 0);
}

/* ---- the alternating update: the parameters that maximise the joint of given latents ------------
 *
 * With a shift c_j and a scale a_j > 0 per latent dimension profiled out,
 *   max over a, c of  log p_theta((Z - 1 c^T) diag(a)) + n sum_j log a_j
 *   = const - (p/2) log det Sigma(theta) - (n/2) sum_j log e_j(theta),
 *   e_j = z_j^T A z_j - (1^T A z_j)^2 / (1^T A 1)
 * (c_j the generalised least-squares mean 1^T A z_j / 1^T A 1, a_j^2 = n / e_j).  Both are what a
 * flow's last affine layer adjusts in the steps after an update; without the shift, a flow whose
 * offset lags behind puts n_b times its error into every block's (or relatives') sum, which reads as
 * more correlation, which makes the offset cheaper still: the updates drift above the joint optimum.
 * The three sums are sums over independent parts of Sigma:
 *   kinship, along eigenvector k of K (r = U^T Z, v = U^T 1, s_k = lambda + (1 - lambda) e_k):
 *     z_j^T A z_j = sum_k r_kj^2 / s_k,  1^T A z_j = sum_k v_k r_kj / s_k,  1^T A 1 = sum_k v_k^2 / s_k;
 *   equi, over blocks (block sums t_bj, S_bj = sum_{i in b} z_ij^2, w_b = 1 / (1 + (m_b - 1) rho_b)):
 *     z_j^T A z_j = sum_b (S_bj - t_bj^2 / m_b) / (1 - rho_b) + w_b t_bj^2 / m_b,
 *     1^T A z_j = sum_b w_b t_bj,  1^T A 1 = sum_b w_b m_b. */

/* The theta in [1e-4, 1 - 1e-4] that maximises f: a grid of 93 points in logit(theta) over
 * [-9.2, 9.2], then golden sections around the best grid point (f need not be concave in theta: the
 * grid finds the basin, the sections refine it). */
static double best_logit(double (*f)(const void *ctx, double theta), const void *ctx)
{
    const double step = 0.2, phi = 0.6180339887498949;
    double best_x = 0, best = -INFINITY;
    for (int g = 0; g <= 92; g++) {
        double x = -9.2 + step * g, v = f(ctx, sigmoid(x));
        if (v > best) best = v, best_x = x;
    }
    double a = best_x - step, b = best_x + step;
    double x1 = b - phi * (b - a), x2 = a + phi * (b - a), f1 = f(ctx, sigmoid(x1)), f2 = f(ctx, sigmoid(x2));
    while (b - a > 1e-9) {
        if (f1 > f2) b = x2, x2 = x1, f2 = f1, x1 = b - phi * (b - a), f1 = f(ctx, sigmoid(x1));
        else a = x1, x1 = x2, f1 = f2, x2 = a + phi * (b - a), f2 = f(ctx, sigmoid(x2));
    }
    double x = 0.5 * (a + b);
    return f(ctx, sigmoid(x)) >= best ? sigmoid(x) : sigmoid(best_x);
}

/* The sums of a trial theta, (2p + 1): z_j^T A z_j (p), 1^T A z_j (p), 1^T A 1. */
typedef struct {
    const nf_dep *d;
    int p, blk;            /* per-block equi: the block being maximised, else -1 */
    const double *r, *v;   /* kinship: U^T Z (p x n, by dimension), U^T 1 (n) */
    const double *S, *t;   /* equi: (n_blocks x p) S_bj - t_bj^2 / m_b, and t_bj */
    const double *rest;    /* per-block equi: the other blocks' sums */
    double *acc;           /* scratch sums */
} profile_ctx;

static double profile_of(const profile_ctx *c, double logdet)
{
    const int p = c->p;
    const double *acc = c->acc;
    double L = -0.5 * p * logdet;
    for (int j = 0; j < p; j++) L -= 0.5 * (double)c->d->n * log(acc[j] - acc[p + j] * acc[p + j] / acc[2 * p]);
    return L;
}

static double kin_profile(const void *ctx, double lam)
{
    const profile_ctx *c = ctx;
    const int p = c->p;
    double ld = 0, *acc = c->acc;
    for (int j = 0; j <= 2 * p; j++) acc[j] = 0;
    for (size_t k = 0; k < c->d->n; k++) {
        double s = lam + (1 - lam) * c->d->eval[k], vk = c->v[k] / s;
        ld += log(s);
        for (int j = 0; j < p; j++) {
            double r = c->r[(size_t)j * c->d->n + k];
            acc[j] += r * r / s;
            acc[p + j] += vk * r;
        }
        acc[2 * p] += vk * c->v[k];
    }
    return profile_of(c, ld);
}

/* Block b's sums at rho, added to acc; returns its log det. */
static double equi_block_terms(const profile_ctx *c, int b, double rho, double *acc)
{
    const int p = c->p;
    double m = (double)c->d->block_size[b], w = 1 / (1 + (m - 1) * rho);
    for (int j = 0; j < p; j++) {
        double t = c->t[(size_t)b * p + j];
        acc[j] += c->S[(size_t)b * p + j] / (1 - rho) + w * t * t / m;
        acc[p + j] += w * t;
    }
    acc[2 * p] += w * m;
    return (m - 1) * log1p(-rho) + log1p((m - 1) * rho);
}

/* equi, one rho for all blocks (blk < 0) or block blk's with the others' sums in rest. */
static double equi_profile(const void *ctx, double rho)
{
    const profile_ctx *c = ctx;
    double ld = 0;
    if (c->blk < 0) {
        for (int j = 0; j <= 2 * c->p; j++) c->acc[j] = 0;
        for (int b = 0; b < c->d->n_blocks; b++) ld += equi_block_terms(c, b, rho, c->acc);
    } else {
        for (int j = 0; j <= 2 * c->p; j++) c->acc[j] = c->rest[j];
        ld = equi_block_terms(c, c->blk, rho, c->acc);
    }
    return profile_of(c, ld);
}

/* Per-block rho: coordinate ascent over the blocks of two or more points (a block of one has no
 * rho), each a 1-D maximisation with the other blocks fixed (kept where it is unless the maximiser
 * does better, so no step lowers the profile), in at most `sweeps` sweeps, fewer once no rho moves by
 * 1e-6.  The blocks interact only through the shared shift and scale, weakly but enough that the
 * ascent converges linearly (about a tenth closer per sweep): a trainer that updates often runs a few
 * sweeps each time, from the last update's rho.  The log det of the other blocks is a constant of
 * each 1-D problem. */
static void equi_best_per_block(profile_ctx *c, double *theta, double *rest, double *own, int sweeps)
{
    const nf_dep *d = c->d;
    const int k = 2 * c->p + 1;
    c->rest = rest;
    for (int sweep = 0; sweep < sweeps; sweep++) {
        double moved = 0;
        for (int j = 0; j < k; j++) rest[j] = 0;
        for (int b = 0; b < d->n_blocks; b++) equi_block_terms(c, b, theta[b], rest);
        for (int b = 0; b < d->n_blocks; b++) {
            if (d->block_size[b] < 2) continue;
            for (int j = 0; j < k; j++) own[j] = 0;
            equi_block_terms(c, b, theta[b], own);
            for (int j = 0; j < k; j++) rest[j] -= own[j];
            c->blk = b;
            double rho = best_logit(equi_profile, c);
            if (equi_profile(c, rho) > equi_profile(c, theta[b])) {
                moved = fmax(moved, fabs(rho - theta[b]));
                theta[b] = rho;
            }
            for (int j = 0; j < k; j++) own[j] = 0;
            equi_block_terms(c, b, theta[b], own);
            for (int j = 0; j < k; j++) rest[j] += own[j];
        }
        if (moved < 1e-6) break;
    }
}

/* Partial pooling of the per-block rho (per_block 2), after equi_best_per_block.  u = logit(rho) on
 * POOL_N grid points; L_b(u) block b's own Gaussian log-likelihood at rho = sigmoid(u) of its latents
 * shifted and scaled by the profile's offset c_j and scale a_j at the maximisers (held: one block's
 * rho moves them little, the weak coupling that lets the coordinate ascent above go block by block),
 *   L_b = -(p/2) [(m-1) log(1 - rho) + log(1 + (m-1) rho)]
 *         - 1/2 sum_j a_j^2 [S_bj / (1 - rho) + (t_bj - m c_j)^2 / (m (1 + (m-1) rho))];
 * prior u ~ N(mu, s^2), (mu, s) maximising sum_b log sum_u exp(L_b(u)) N(u; mu, s) by EM (each
 * block's posterior on the grid, then mu and s^2 their pooled mean and variance) from the spread of
 * the blocks' maximisers; rho_b the posterior median, linear within a grid cell.  The likelihoods
 * are taken once (rho, 1 / (1 - rho) and log(1 - rho) of the grid precomputed); an EM iteration
 * costs POOL_N exponentials and three multiply-adds per block and grid point. */
#define POOL_U0 (-6.0)
#define POOL_DU 0.05
#define POOL_N 305 /* u in [-6, 9.2] */
#define POOL_PMAX 64 /* latent dimensions pooled (wider latents keep the maximisers) */

/* exp(L_b(u) - max) on the grid. */
static void pool_likelihood(const profile_ctx *c, int b, const double *a2, const double *off, const double *rho,
                            const double *inv1m, const double *l1m, double *out)
{
    const int p = c->p;
    const double m = (double)c->d->block_size[b];
    const double *S = c->S + (size_t)b * p, *t = c->t + (size_t)b * p;
    double sq = 0, tt = 0; /* sum_j a_j^2 S_bj and sum_j a_j^2 (t_bj - m c_j)^2 / m */
    for (int j = 0; j < p; j++) {
        const double tj = t[j] - m * off[j];
        sq += a2[j] * S[j], tt += a2[j] * tj * tj / m;
    }
    double top = -INFINITY;
    for (int g = 0; g < POOL_N; g++) {
        const double L = -0.5 * p * ((m - 1) * l1m[g] + log1p((m - 1) * rho[g])) -
                         0.5 * (sq * inv1m[g] + tt / (1 + (m - 1) * rho[g]));
        top = fmax(top, out[g] = L);
    }
    for (int g = 0; g < POOL_N; g++) out[g] = exp(out[g] - top);
}

/* sum_g q_g, sum_g q_g u_g, sum_g q_g u_g^2 with q = lik w, in POOL_LANES interleaved partial sums
 * (independent chains the compiler can keep in vector registers) added in order at the end. */
#define POOL_LANES 8
static void pool_moments(const double *lik, const double *w, const double *u, const double *u2, double *mom)
{
    double z[POOL_LANES] = {0}, e1[POOL_LANES] = {0}, e2[POOL_LANES] = {0};
    int g = 0;
    for (; g + POOL_LANES <= POOL_N; g += POOL_LANES)
        for (int l = 0; l < POOL_LANES; l++) {
            const double q = lik[g + l] * w[g + l];
            z[l] += q, e1[l] += q * u[g + l], e2[l] += q * u2[g + l];
        }
    for (; g < POOL_N; g++) {
        const double q = lik[g] * w[g];
        z[0] += q, e1[0] += q * u[g], e2[0] += q * u2[g];
    }
    mom[0] = mom[1] = mom[2] = 0;
    for (int l = 0; l < POOL_LANES; l++) mom[0] += z[l], mom[1] += e1[l], mom[2] += e2[l];
}

static int equi_pool(profile_ctx *c, double *theta, double *rest, double *prior)
{
    const nf_dep *d = c->d;
    int nb = 0;
    for (int b = 0; b < d->n_blocks; b++) nb += d->block_size[b] >= 2;
    if (nb < 2 || c->p > POOL_PMAX) return NF_OK; /* nothing to pool (or latents too wide: the maximisers) */
    double *lik = malloc(((size_t)nb + 6) * POOL_N * sizeof *lik + (size_t)nb * sizeof(double)), *mlu;
    int *which = malloc((size_t)nb * sizeof *which);
    if (!lik || !which) {
        free(lik), free(which);
        return nf_error(NF_ENOMEM, "out of memory pooling the rho of %d blocks", nb);
    }
    double *u = lik + (size_t)nb * POOL_N, *u2 = u + POOL_N, *w = u2 + POOL_N, *rho = w + POOL_N, *inv1m = rho + POOL_N,
           *l1m = inv1m + POOL_N;
    mlu = l1m + POOL_N; /* (nb) the blocks' maximisers, logit */
    for (int g = 0; g < POOL_N; g++) {
        u[g] = POOL_U0 + POOL_DU * g, u2[g] = u[g] * u[g], rho[g] = sigmoid(u[g]);
        inv1m[g] = 1 + exp(u[g]), l1m[g] = -log1p(exp(u[g])); /* 1 / (1 - rho), log(1 - rho) */
    }
    /* the profile's offset c_j = 1'A z_j / 1'A 1 and scale a_j^2 = n / e_j at the maximisers */
    const int k = 2 * c->p + 1;
    for (int j = 0; j < k; j++) rest[j] = 0;
    for (int b = 0; b < d->n_blocks; b++) equi_block_terms(c, b, theta[b], rest);
    double a2[POOL_PMAX], off[POOL_PMAX];
    for (int j = 0; j < c->p; j++) {
        off[j] = rest[c->p + j] / rest[2 * c->p];
        a2[j] = (double)d->n / (rest[j] - rest[c->p + j] * off[j]);
    }
    double mu = 0, s2 = 0; /* EM starts from the spread of the blocks' maximisers */
    for (int b = 0, i = 0; b < d->n_blocks; b++) {
        if (d->block_size[b] < 2) continue;
        pool_likelihood(c, b, a2, off, rho, inv1m, l1m, lik + (size_t)i * POOL_N);
        const double ub = mlu[i] = log(theta[b] / (1 - theta[b]));
        mu += ub, s2 += ub * ub;
        which[i++] = b;
    }
    mu /= nb, s2 = fmax(s2 / nb - mu * mu, 0.01);
    if (prior && prior[1] > 0) mu = prior[0], s2 = prior[1] * prior[1]; /* or from the last update's prior */
    for (int it = 0; it < 1000; it++) { /* EM */
        for (int g = 0; g < POOL_N; g++) w[g] = exp(-0.5 * (u[g] - mu) * (u[g] - mu) / s2);
        double m1 = 0, m2 = 0;
        for (int i = 0; i < nb; i++) {
            double mom[3];
            pool_moments(lik + (size_t)i * POOL_N, w, u, u2, mom);
            if (mom[0] > 0) m1 += mom[1] / mom[0], m2 += mom[2] / mom[0];
            else m1 += mlu[i], m2 += mlu[i] * mlu[i]; /* prior and likelihood apart beyond double's range */
        }
        const double nmu = m1 / nb, ns2 = fmax(m2 / nb - nmu * nmu, 1e-4);
        const double moved = fabs(nmu - mu) + fabs(sqrt(ns2) - sqrt(s2));
        mu = nmu, s2 = ns2;
        if (moved < 1e-7) break;
    }
    if (prior) prior[0] = mu, prior[1] = sqrt(s2);
    for (int g = 0; g < POOL_N; g++) w[g] = exp(-0.5 * (u[g] - mu) * (u[g] - mu) / s2);
    for (int i = 0; i < nb; i++) { /* posterior medians */
        const double *Lb = lik + (size_t)i * POOL_N;
        double z = 0, cum = 0, at = mlu[i];
        for (int g = 0; g < POOL_N; g++) z += Lb[g] * w[g];
        for (int g = 0; z > 0 && g < POOL_N; g++) {
            const double q = Lb[g] * w[g];
            if (cum + q >= 0.5 * z) { /* the median within grid cell g, its mass spread evenly over it */
                at = u[g] + POOL_DU * ((0.5 * z - cum) / q - 0.5);
                break;
            }
            cum += q;
        }
        theta[which[i]] = fmin(fmax(sigmoid(at), 1e-4), 1 - 1e-4);
    }
    free(lik), free(which);
    return NF_OK;
}

/* Passes over rows of U (kinship): four rows at a time (one pass over four rows feeds four sums), and
 * the eigen index k in chunks small enough that the four rows' pieces stay in the L1 cache while
 * each of the p dimensions (and the diagonal, or the row sums) runs over them.  A batch's rows are b n
 * values (5 MB at b = 256, n = 5,000), read once from memory by kin_gather and again, from the
 * last-level cache, by kin_scatter. */
enum { KIN_ROWS = 4, KIN_CHUNK = 512 };

/* One component: r[j n + k] += sum_i U_ik Z_ij and v[k] += sum_i U_ik over the rows i0 <= i < i1 of U
 * (in double; all n^2 values are 200 MB at n = 5,000, read once) four at a time, k in chunks as in
 * kin_gather (about 2.3 times faster than a row at a time with p strided sums: a learned lambda's
 * update is this pass). */
NF_SIMD_CLONES
static void kin_rotate_rows(const nf_dep *d, const nf_real *Z, int p, double *r, double *v, size_t i0, size_t i1)
{
    const size_t n = d->n;
    for (; i0 < i1; i0 += KIN_ROWS) {
        const size_t m = n - i0 < KIN_ROWS ? n - i0 : KIN_ROWS;
        const double *U[KIN_ROWS];
        double one[KIN_ROWS];
        for (size_t q = 0; q < KIN_ROWS; q++) U[q] = d->evec + (i0 + (q < m ? q : 0)) * n, one[q] = q < m;
        const double *u0 = U[0], *u1 = U[1], *u2 = U[2], *u3 = U[3];
        for (size_t k0 = 0; k0 < n; k0 += KIN_CHUNK) {
            const size_t k1 = k0 + KIN_CHUNK < n ? k0 + KIN_CHUNK : n;
            const double e0 = one[0], e1 = one[1], e2 = one[2], e3 = one[3];
#pragma omp simd
            for (size_t k = k0; k < k1; k++) v[k] += u0[k] * e0 + u1[k] * e1 + u2[k] * e2 + u3[k] * e3;
            for (int j = 0; j < p; j++) {
                double c[KIN_ROWS] = {0};
                for (size_t q = 0; q < m; q++) c[q] = Z[(i0 + q) * p + j];
                const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
                double *o = r + (size_t)j * n;
#pragma omp simd
                for (size_t k = k0; k < k1; k++) o[k] += u0[k] * c0 + u1[k] * c1 + u2[k] * c2 + u3[k] * c3;
            }
        }
    }
}

/* Part `part` of `parts` of `rows` rows, in whole groups of KIN_ROWS: rows [*i0, *i1). */
static void kin_part_range(size_t rows, int part, int parts, size_t *i0, size_t *i1)
{
    const size_t groups = (rows + KIN_ROWS - 1) / KIN_ROWS;
    *i0 = groups * (size_t)part / (size_t)parts * KIN_ROWS;
    *i1 = part + 1 == parts ? rows : groups * (size_t)(part + 1) / (size_t)parts * KIN_ROWS;
}

/* kin_rotate_rows over all n rows, split by row groups over the thread pool, each further part
 * summing into its own (p + 1, n) added at the end (one thread if there is no room for those). */
typedef struct {
    const nf_dep *d;
    const nf_real *Z;
    int p;
    double *r, *v, *parts; /* parts: (nparts - 1) x (p + 1) x n */
} kin_rotate_job;

static void kin_rotate_part(void *arg, int part, int nparts)
{
    const kin_rotate_job *J = arg;
    const size_t n = J->d->n, w = (size_t)(J->p + 1) * n;
    size_t i0, i1;
    kin_part_range(n, part, nparts, &i0, &i1);
    double *r = J->r, *v = J->v;
    if (part) {
        r = J->parts + (size_t)(part - 1) * w, v = r + (size_t)J->p * n;
        memset(r, 0, w * sizeof *r);
    }
    kin_rotate_rows(J->d, J->Z, J->p, r, v, i0, i1);
}

static void kin_rotate_dense(const nf_dep *d, const nf_real *Z, int p, double *r, double *v)
{
    const size_t n = d->n, w = (size_t)(p + 1) * n;
    const int T = nf_blas_get_threads();
    int parts = T > 1 && n >= 256 && !nf_threads_in_parallel() ? T : 1;
    double *sums = parts > 1 ? malloc((size_t)(parts - 1) * w * sizeof *sums) : NULL;
    if (!sums) parts = 1;
    kin_rotate_job J = {.d = d, .Z = Z, .p = p, .r = r, .v = v, .parts = sums};
    nf_threads_run(parts, parts, kin_rotate_part, &J);
    for (int q = 1; q < parts; q++) {
        const double *s = sums + (size_t)(q - 1) * w;
        for (size_t k = 0; k < (size_t)p * n; k++) r[k] += s[k];
        for (size_t k = 0; k < n; k++) v[k] += s[(size_t)p * n + k];
    }
    free(sums);
}

/* kinship: r = U^T Z (p x n, by dimension: r[j n + k]) and v = U^T 1 (n) ADDED to, one pass over U by
 * rows (with components, over each point's own component's columns only: the other entries of its
 * row are zeros, so the sums are the same, at sum of m^2 instead of n^2 reads). */
static void kin_rotate(const nf_dep *d, const nf_real *Z, int p, double *r, double *v)
{
    size_t n = d->n;
    if (d->n_comp > 1) {
        for (int c = 0; c < d->n_comp; c++) {
            const size_t off = d->comp_start[c], m = d->comp_start[c + 1] - off;
            const int *pts = d->comp_pts + off, *cols = d->comp_cols + off;
            for (size_t a = 0; a < m; a++) {
                const size_t i = (size_t)pts[a];
                const double *Ui = d->evec + i * n;
                for (size_t q = 0; q < m; q++) {
                    const size_t k = (size_t)cols[q];
                    v[k] += Ui[k];
                    for (int j = 0; j < p; j++) r[(size_t)j * n + k] += Ui[k] * Z[i * p + j];
                }
            }
        }
        return;
    }
    kin_rotate_dense(d, Z, p, r, v);
}

static int best_theta(const nf_dep *d, const nf_real *Z, int p, double *theta, double *pooled, double *prior,
                      int sweeps);

int nf_dep_best_theta(const nf_dep *d, const nf_real *Z, int p, double *theta, int sweeps)
{
    if (!d->pooled) return best_theta(d, Z, p, theta, NULL, NULL, sweeps);
    double *ml = malloc((size_t)d->n_params * sizeof *ml);
    if (!ml) return nf_error(NF_ENOMEM, "out of memory for %d maximisers", d->n_params);
    memcpy(ml, theta, (size_t)d->n_params * sizeof *ml);
    int rc = best_theta(d, Z, p, ml, theta, NULL, sweeps);
    free(ml);
    return rc;
}

int nf_dep_best_theta_pooled(const nf_dep *d, const nf_real *Z, int p, double *ml, double *theta, double *prior,
                             int sweeps)
{
    if (!d->pooled) return nf_error(NF_EINVAL, "pooled rho asked of a structure without pooling");
    return best_theta(d, Z, p, ml, theta, prior, sweeps);
}

/* theta: the maximisers (the ascent's start, read); pooled (a pooled structure): the pooled rho;
 * prior: the pooling's (mu, s), its EM's start when s > 0, or NULL. */
static int best_theta(const nf_dep *d, const nf_real *Z, int p, double *theta, double *pooled, double *prior,
                      int sweeps)
{
    size_t n = d->n, k = 2 * (size_t)p + 1;
    size_t need = d->kind == NF_DEP_EQUI ? 2 * (size_t)d->n_blocks * p : n * (size_t)p + n;
    double *w = calloc(need + 3 * k, sizeof *w);
    if (!w) return nf_error(NF_ENOMEM, "out of memory for the sums of the latents of %zu points", n);
    profile_ctx c = {.d = d, .p = p, .blk = -1, .acc = w + need};
    if (d->kind == NF_DEP_KINSHIP) {
        kin_rotate(d, Z, p, w, w + n * (size_t)p);
        c.r = w, c.v = w + n * (size_t)p;
        theta[0] = best_logit(kin_profile, &c);
    } else {
        double *S = w, *t = w + (size_t)d->n_blocks * p;
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < p; j++) {
                double z = Z[i * p + j];
                S[(size_t)d->block[i] * p + j] += z * z;
                t[(size_t)d->block[i] * p + j] += z;
            }
        for (int b = 0; b < d->n_blocks; b++)
            for (int j = 0; j < p; j++) {
                double tb = t[(size_t)b * p + j];
                S[(size_t)b * p + j] -= tb * tb / (double)d->block_size[b];
            }
        c.S = S, c.t = t;
        if (d->per_block) equi_best_per_block(&c, theta, c.acc + k, c.acc + 2 * k, sweeps);
        else theta[0] = best_logit(equi_profile, &c);
        if (d->pooled) {
            memcpy(pooled, theta, (size_t)d->n_params * sizeof *pooled);
            const int rc = equi_pool(&c, pooled, c.acc + k, prior);
            if (rc != NF_OK) {
                free(w);
                return rc;
            }
        }
    }
    int ok = 1;
    for (int j = 0; j < d->n_params; j++) ok &= isfinite(theta[j]) && (!pooled || isfinite(pooled[j]));
    free(w);
    return ok ? NF_OK : nf_error(NF_ENONFINITE, "the best dependence parameters are not finite (non-finite latents)");
}

/* log p(Z) = -(np/2) log 2pi - (p/2) log det Sigma - 1/2 tr(Z^T A Z), with
 *   equi:    tr = sum_blocks [sum_i |z_i|^2 - rho/(1 + (m-1) rho) |sum_i z_i|^2] / (1 - rho),
 *   kinship: tr = sum_k |r_k|^2 / s_k,  r_k = sum_i U_ik z_i (the rotated latents). */
int nf_dep_joint_log_prob(const nf_dep *d, const double *theta, const nf_real *Z, int p, double *logp)
{
    size_t n = d->n;
    double tr = 0;
    if (d->kind == NF_DEP_EQUI) {
        double *sum = calloc((size_t)d->n_blocks * p, sizeof *sum), *sq = calloc((size_t)d->n_blocks, sizeof *sq);
        if (!sum || !sq) {
            free(sum), free(sq);
            return nf_error(NF_ENOMEM, "out of memory for the joint log-likelihood");
        }
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < p; j++) {
                double z = Z[i * p + j];
                sum[(size_t)d->block[i] * p + j] += z;
                sq[d->block[i]] += z * z;
            }
        for (int c = 0; c < d->n_blocks; c++) {
            double m = (double)d->block_size[c], rho = theta[d->per_block ? c : 0], s2 = 0;
            for (int j = 0; j < p; j++) s2 += sum[(size_t)c * p + j] * sum[(size_t)c * p + j];
            tr += (sq[c] - rho / (1 + (m - 1) * rho) * s2) / (1 - rho);
        }
        free(sum);
        free(sq);
    } else {
        double *r = calloc(n * (size_t)p + n, sizeof *r);
        if (!r) return nf_error(NF_ENOMEM, "out of memory for the joint log-likelihood");
        kin_rotate(d, Z, p, r, r + n * (size_t)p);
        for (size_t k = 0; k < n * (size_t)p; k++) tr += r[k] * r[k] / (theta[0] + (1 - theta[0]) * d->eval[k % n]);
        free(r);
    }
    *logp = -(double)n * p * NF_HALF_LOG_2PI - 0.5 * p * nf_dep_log_det(d, theta, NULL) - 0.5 * tr;
    return NF_OK;
}

/* ---- the minibatch estimator -------------------------------------------------------------------- */

void nf_dep_theta(const nf_dep *d, const nf_real *u, double *theta)
{
    for (int k = 0; k < d->n_params; k++) theta[k] = sigmoid((double)u[k]);
}

static double pair_weight(const nf_dep *d, int b) { return b > 1 ? (double)(d->n - 1) / (b - 1) : 0; }

/* ---- kinship batches through the eigenbasis: O(b n p), no b x b block ----------------------------
 * With U_i the row of point i in U, w_k = 1/s_k and V = sum_{i in B} U_i^T z_i (n x p):
 *   Y_i = U_i (w o V) = sum_{j in B} A_ij z_j;  a_i = A_ii = sum_k U_ik^2 w_k;
 *   sum_{j != i} A_ij z_i.z_j = z_i.Y_i - a_i |z_i|^2.
 * Backward: Y'_i = U_i (w o sum_j U_j^T dt_j z_j) = sum_j A_ij dt_j z_j, so
 *   dz_i = -dt_i a_i z_i - (c/2) [dt_i (Y_i - a_i z_i) + Y'_i - a_i dt_i z_i];
 * and for lambda the same with w'_k = dw_k/dlambda = -(1 - e_k)/s_k^2 in place of w.
 * Each product is one pass over the batch's rows of U with p (the data's width, small) accumulators:
 * written as loops that read each row once (in double), which beat nf_gemm's packing for p of a
 * few; the weights w, w' are recomputed only when lambda changes.  In training every row's dt is the
 * same (the loss is the batch's mean), and then Y' = dt Y needs no pass at all (kin_backward). */
static int kin_reserve(nf_dep *d, int b, int p)
{
    size_t n = d->n, need = 2 * n * p + 2 * n + 4 * (size_t)b * p + 2 * (size_t)b;
    if (need > d->cap_kd) {
        double *w = realloc(d->kd, need * sizeof *w);
        if (!w) return nf_error(NF_ENOMEM, "out of memory for a kinship batch of %d points", b);
        d->kd = w;
        d->cap_kd = need;
        d->kin_lam = NAN;
    }
    return NF_OK;
}

/* Workspace: w, w' (n each), V, T (n x p each), Y, Y2 (b x p each), a, a' (b each), X, O (p x b each). */
#define KIN_W(d) ((d)->kd)
#define KIN_WD(d) ((d)->kd + (d)->n)
#define KIN_V(d) ((d)->kd + 2 * (d)->n)
#define KIN_T(d, p) (KIN_V(d) + (d)->n * (size_t)(p))
#define KIN_Y(d, p) (KIN_T(d, p) + (d)->n * (size_t)(p))
#define KIN_Y2(d, b, p) (KIN_Y(d, p) + (size_t)(b) * (p))
#define KIN_A(d, b, p) (KIN_Y2(d, b, p) + (size_t)(b) * (p))
#define KIN_X(d, b, p) (KIN_A(d, b, p) + 2 * (size_t)(b))
#define KIN_O(d, b, p) (KIN_X(d, b, p) + (size_t)(b) * (p))

static void kin_weights(nf_dep *d)
{
    double lam = d->theta[0];
    if (lam == d->kin_lam) return;
    double *w = KIN_W(d), *wd = KIN_WD(d);
    for (size_t k = 0; k < d->n; k++) {
        double s = lam + (1 - lam) * d->eval[k];
        w[k] = 1 / s;
        wd[k] = -(1 - d->eval[k]) / (s * s);
    }
    d->kin_lam = lam;
}

/* The rows of the group starting at i0 (m of them; the rest repeat the first, with weight 0). */
static int kin_group(const nf_dep *d, const size_t *idx, int b, int i0, const nf_real **U)
{
    const int m = b - i0 < KIN_ROWS ? b - i0 : KIN_ROWS;
    for (int r = 0; r < KIN_ROWS; r++) U[r] = d->evec_r + idx[i0 + (r < m ? r : 0)] * d->n;
    return m;
}

/* out[j n + k] += sum_i U_{idx_i, k} g_i x_ij over the row groups starting at i0 <= i < i1 */
NF_SIMD_CLONES
static void kin_gather_rows(const nf_dep *d, double *out, const nf_real *x, const nf_real *g, const size_t *idx,
                            int b, int p, int i0, int i1)
{
    const size_t n = d->n;
    for (; i0 < i1; i0 += KIN_ROWS) {
        const nf_real *U[KIN_ROWS];
        const int m = kin_group(d, idx, b, i0, U);
        const nf_real *u0 = U[0], *u1 = U[1], *u2 = U[2], *u3 = U[3];
        for (size_t k0 = 0; k0 < n; k0 += KIN_CHUNK) {
            const size_t k1 = k0 + KIN_CHUNK < n ? k0 + KIN_CHUNK : n;
            for (int j = 0; j < p; j++) {
                double c[KIN_ROWS] = {0};
                for (int r = 0; r < m; r++) c[r] = (g ? (double)g[i0 + r] : 1.0) * x[(size_t)(i0 + r) * p + j];
                const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
                double *o = out + (size_t)j * n;
#pragma omp simd
                for (size_t k = k0; k < k1; k++)
                    o[k] += (double)u0[k] * c0 + (double)u1[k] * c1 + (double)u2[k] * c2 + (double)u3[k] * c3;
            }
        }
    }
}

/* A pass over a batch's rows of U split by row groups over the thread pool: part q takes groups
 * [q G / parts, (q + 1) G / parts) of the G = ceil(b / KIN_ROWS); a gather's part q > 0 sums into its
 * own (n, p) in d->kpart, added to the first part's at the end. */
typedef struct {
    nf_dep *d;
    double *out, *diag;
    const double *f;
    const nf_real *x, *g;
    const size_t *idx;
    int b, p;
} kin_pass_job;

static void kin_part_rows(const kin_pass_job *J, int part, int parts, int *i0, int *i1)
{
    size_t r0, r1;
    kin_part_range((size_t)J->b, part, parts, &r0, &r1);
    *i0 = (int)r0, *i1 = (int)r1;
}

static void kin_gather_part(void *arg, int part, int parts)
{
    const kin_pass_job *J = arg;
    const size_t np = J->d->n * (size_t)J->p;
    double *out = part ? J->d->kpart + (size_t)(part - 1) * np : J->out;
    if (part) memset(out, 0, np * sizeof *out);
    int i0, i1;
    kin_part_rows(J, part, parts, &i0, &i1);
    kin_gather_rows(J->d, out, J->x, J->g, J->idx, J->b, J->p, i0, i1);
}

/* The threads a pass over b rows of U uses: the pool's, when the batch is large enough to share. */
static int kin_pass_threads(int b)
{
    const int T = nf_blas_get_threads();
    return T > 1 && b >= 16 * KIN_ROWS && !nf_threads_in_parallel() ? T : 1;
}

/* out (p x n, by dimension): out[j n + k] = sum_i U_{idx_i, k} g_i x_ij, g NULL meaning 1 */
static void kin_gather(nf_dep *d, double *out, const nf_real *x, const nf_real *g, const size_t *idx, int b, int p)
{
    const size_t np = d->n * (size_t)p;
    memset(out, 0, np * sizeof *out);
    int parts = kin_pass_threads(b);
    if (parts > 1 && (size_t)(parts - 1) * np > d->cap_kpart) {
        double *w = realloc(d->kpart, (size_t)(parts - 1) * np * sizeof *w);
        if (w) d->kpart = w, d->cap_kpart = (size_t)(parts - 1) * np;
        else parts = 1; /* no room for the parts' sums: one thread */
    }
    kin_pass_job J = {.d = d, .out = out, .x = x, .g = g, .idx = idx, .b = b, .p = p};
    nf_threads_run(parts, parts, kin_gather_part, &J);
    for (int q = 1; q < parts; q++) {
        const double *w = d->kpart + (size_t)(q - 1) * np;
        for (size_t k = 0; k < np; k++) out[k] += w[k];
    }
}

/* out_i = sum_k U_{idx_i, k} T[., k] (b x p) and diag_i = sum_k U_ik^2 f_k (diag may be NULL) for
 * the row groups starting at i0 <= i < i1 */
NF_SIMD_CLONES
static void kin_scatter_rows(const nf_dep *d, double *out, double *diag, const double *f, const double *T,
                             const size_t *idx, int b, int p, int i0, int i1)
{
    const size_t n = d->n;
    for (; i0 < i1; i0 += KIN_ROWS) {
        const nf_real *U[KIN_ROWS];
        const int m = kin_group(d, idx, b, i0, U);
        const nf_real *u0 = U[0], *u1 = U[1], *u2 = U[2], *u3 = U[3];
        for (int r = 0; r < m; r++)
            for (int j = 0; j < p; j++) out[(size_t)(i0 + r) * p + j] = 0;
        double a[KIN_ROWS] = {0};
        for (size_t k0 = 0; k0 < n; k0 += KIN_CHUNK) {
            const size_t k1 = k0 + KIN_CHUNK < n ? k0 + KIN_CHUNK : n;
            for (int j = 0; j < p; j++) {
                const double *t = T + (size_t)j * n;
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
                for (size_t k = k0; k < k1; k++) {
                    const double tk = t[k];
                    s0 += (double)u0[k] * tk;
                    s1 += (double)u1[k] * tk;
                    s2 += (double)u2[k] * tk;
                    s3 += (double)u3[k] * tk;
                }
                const double part[KIN_ROWS] = {s0, s1, s2, s3};
                for (int r = 0; r < m; r++) out[(size_t)(i0 + r) * p + j] += part[r];
            }
            if (!diag) continue;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (size_t k = k0; k < k1; k++) {
                const double fk = f[k], v0 = u0[k], v1 = u1[k], v2 = u2[k], v3 = u3[k];
                s0 += v0 * v0 * fk;
                s1 += v1 * v1 * fk;
                s2 += v2 * v2 * fk;
                s3 += v3 * v3 * fk;
            }
            a[0] += s0, a[1] += s1, a[2] += s2, a[3] += s3;
        }
        for (int r = 0; diag && r < m; r++) diag[i0 + r] = a[r];
    }
}

static void kin_scatter_part(void *arg, int part, int parts)
{
    const kin_pass_job *J = arg;
    int i0, i1;
    kin_part_rows(J, part, parts, &i0, &i1);
    kin_scatter_rows(J->d, J->out, J->diag, J->f, KIN_T(J->d, J->p), J->idx, J->b, J->p, i0, i1);
}

/* T = f o V (p x n, by dimension, may be V itself), then out_i = sum_k U_{idx_i, k} T[., k] (b x p) and
 * diag_i = sum_k U_ik^2 f_k (diag may be NULL). */
static void kin_scatter(nf_dep *d, double *out, double *diag, const double *f, const double *V, const size_t *idx,
                        int b, int p)
{
    const size_t n = d->n;
    double *T = KIN_T(d, p);
    for (int j = 0; j < p; j++)
        for (size_t k = 0; k < n; k++) T[(size_t)j * n + k] = f[k] * V[(size_t)j * n + k];
    const int parts = kin_pass_threads(b);
    kin_pass_job J = {.d = d, .out = out, .diag = diag, .f = f, .idx = idx, .b = b, .p = p};
    nf_threads_run(parts, parts, kin_scatter_part, &J);
}

/* With the cached precision (nf_dep_kinship_cache): the batch's block A_BB (b x b, from
 * nf_dep_precision) times the batch's latents: out_i = sum_j A_ij g_j z_j (g NULL meaning 1) and
 * diag_i = A_ii (diag may be NULL); b^2 p multiply-adds over A's rows, the latents transposed to
 * columns X (p x b) so each sum runs along a row. */
NF_SIMD_CLONES
static void kin_block_times(const double *A, double *out, double *diag, const nf_real *z, const nf_real *g, int b,
                            int p, double *X)
{
    for (int j = 0; j < b; j++)
        for (int k = 0; k < p; k++) X[(size_t)k * b + j] = (g ? (double)g[j] : 1.0) * z[(size_t)j * p + k];
    for (int i = 0; i < b; i++) {
        const double *Ai = A + (size_t)i * b;
        if (diag) diag[i] = Ai[i];
        if (p == 2) { /* the common case (2-D data): both sums in one pass over the row */
            const double *x0 = X, *x1 = X + b;
            double s0 = 0, s1 = 0;
#pragma omp simd reduction(+ : s0, s1)
            for (int j = 0; j < b; j++) {
                s0 += Ai[j] * x0[j];
                s1 += Ai[j] * x1[j];
            }
            out[(size_t)i * 2] = s0;
            out[(size_t)i * 2 + 1] = s1;
            continue;
        }
        for (int k = 0; k < p; k++) {
            const double *x = X + (size_t)k * b;
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < b; j++) sum += Ai[j] * x[j];
            out[(size_t)i * p + k] = sum;
        }
    }
}

/* The same product from the lower triangle of A_BB alone (j <= i, what the lookups write): each
 * entry read once for both of its terms, out_i += A_ij x_j and out_j += A_ij x_i (j < i), the
 * second into column accumulators O (p x b), so the block is neither mirrored nor read twice. */
NF_SIMD_CLONES
static void kin_lower_times(const double *A, double *out, double *diag, const nf_real *z, const nf_real *g, int b,
                            int p, double *X, double *O)
{
    for (int j = 0; j < b; j++)
        for (int k = 0; k < p; k++) {
            X[(size_t)k * b + j] = (g ? (double)g[j] : 1.0) * z[(size_t)j * p + k];
            O[(size_t)k * b + j] = 0;
        }
    for (int i = 0; i < b; i++) {
        const double *Ai = A + (size_t)i * b;
        if (diag) diag[i] = Ai[i];
        if (p == 2) { /* the common case (2-D data): both dimensions in one pass over the row */
            const double *x0 = X, *x1 = X + b, xi0 = x0[i], xi1 = x1[i];
            double *o0 = O, *o1 = O + b, s0 = Ai[i] * xi0, s1 = Ai[i] * xi1;
#pragma omp simd reduction(+ : s0, s1)
            for (int j = 0; j < i; j++) {
                s0 += Ai[j] * x0[j];
                s1 += Ai[j] * x1[j];
                o0[j] += Ai[j] * xi0;
                o1[j] += Ai[j] * xi1;
            }
            o0[i] += s0;
            o1[i] += s1;
            continue;
        }
        for (int k = 0; k < p; k++) {
            const double *x = X + (size_t)k * b, xi = x[i];
            double *o = O + (size_t)k * b, sum = Ai[i] * xi;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < i; j++) {
                sum += Ai[j] * x[j];
                o[j] += Ai[j] * xi;
            }
            o[i] += sum;
        }
    }
    for (int i = 0; i < b; i++)
        for (int k = 0; k < p; k++) out[(size_t)i * p + k] = O[(size_t)k * b + i];
}

/* Several components with the cached precision: the batch's A_BB as its nonzero entries only, the
 * pairs j < i within one component (one in seven of all pairs for families of up to 1,000 in 5,000
 * points) and the diagonal, in d->pair_ij / d->pair_a, instead of a dense b x b block: the estimator
 * then costs O(pairs p) rather than several passes over b^2 entries. */
static int kin_pairs(nf_dep *d, const size_t *idx, int b)
{
    const size_t n = d->n;
    const nf_real *C = d->Acache;
    /* the positions grouped by component, by a counting sort: d->comp_last numbers the batch's
     * components for the while (-1 again after); d->group_start[g + 1] counts group g, then (prefix
     * sums) is its end, and filling from the ends with the positions in descending order leaves
     * d->group_start[g + 1] at its beginning and the positions ascending in d->group_pos */
    int *slot = d->comp_last, *start = d->group_start, *pos = d->group_pos, groups = 0;
    for (int i = 0; i < b; i++) {
        int c = d->comp[idx[i]];
        if (slot[c] < 0) slot[c] = groups++, start[groups] = 0;
        start[slot[c] + 1]++;
    }
    start[0] = 0;
    size_t np = 0;
    for (int g = 0; g < groups; g++) {
        size_t m = (size_t)start[g + 1];
        np += m * (m - 1) / 2;
        start[g + 1] += start[g];
    }
    for (int i = b - 1; i >= 0; i--) pos[--start[slot[d->comp[idx[i]]] + 1]] = i;
    for (int i = 0; i < b; i++) slot[d->comp[idx[i]]] = -1;
    if (np + (size_t)b > d->cap_pairs) {
        size_t cap = np + (size_t)b;
        int *ij = realloc(d->pair_ij, 2 * cap * sizeof *ij);
        if (ij) d->pair_ij = ij;
        double *a = ij ? realloc(d->pair_a, cap * sizeof *a) : NULL;
        if (!a) return nf_error(NF_ENOMEM, "out of memory for a kinship batch of %d points", b);
        d->pair_a = a;
        d->cap_pairs = cap;
    }
    for (int i = 0; i < b; i++) d->pair_a[i] = C[idx[i] * n + idx[i]];
    size_t q = 0;
    for (int g = 0; g < groups; g++) { /* group g spans pos[start[g + 1] .. start[g + 2] or b) */
        const int *G = pos + start[g + 1];
        const int m = (g + 1 < groups ? start[g + 2] : b) - start[g + 1];
        for (int u = 1; u < m; u++) {
            const int i = G[u];
            const size_t pi = idx[i];
            for (int v = 0; v < u; v++, q++) {
                const int j = G[v];
                const size_t pj = idx[j]; /* read the lower triangle */
                d->pair_ij[2 * q] = i, d->pair_ij[2 * q + 1] = j;
                d->pair_a[(size_t)b + q] = pi > pj ? C[pi * n + pj] : C[pj * n + pi];
            }
        }
    }
    d->n_pairs = np;
    return NF_OK;
}

/* kin_block_times from the pairs: out_i = sum_j A_ij g_j z_j (g = 1 when NULL), diag_i = A_ii. */
static void kin_pair_times(const nf_dep *d, double *out, double *diag, const nf_real *z, const nf_real *g, int b,
                           int p)
{
    const double *a = d->pair_a, *ap = d->pair_a + b;
    for (int i = 0; i < b; i++) {
        double gi = g ? (double)g[i] : 1.0;
        if (diag) diag[i] = a[i];
        for (int k = 0; k < p; k++) out[(size_t)i * p + k] = a[i] * gi * z[(size_t)i * p + k];
    }
    for (size_t q = 0; q < d->n_pairs; q++) {
        int i = d->pair_ij[2 * q], j = d->pair_ij[2 * q + 1];
        double gi = g ? (double)g[i] : 1.0, gj = g ? (double)g[j] : 1.0;
        for (int k = 0; k < p; k++) {
            out[(size_t)i * p + k] += ap[q] * gj * z[(size_t)j * p + k];
            out[(size_t)j * p + k] += ap[q] * gi * z[(size_t)i * p + k];
        }
    }
}

/* The kinship terms from Y_i = sum_{j in B} A_ij z_j and a_i = A_ii: through the eigenbasis, or
 * from the cached precision's block (looked up into d->A, kept for the backward; with several
 * components, its nonzero pairs, kin_pairs). */
static int kin_log_prob(nf_dep *d, nf_real *t, const nf_real *z, const size_t *idx, int b, int p, double base,
                        double c)
{
    NF_TRY(kin_reserve(d, b, p));
    double *Y = KIN_Y(d, p), *a = KIN_A(d, b, p);
    if (d->use_cache && d->n_comp > 1) {
        NF_TRY(check_idx(d, idx, b));
        NF_TRY(kin_cache(d, d->theta[0]));
        NF_TRY(kin_pairs(d, idx, b));
        kin_pair_times(d, Y, a, z, NULL, b, p);
    } else if (d->use_cache) {
        /* A_BB's lower triangle read beside the forward pass (nf_dep_batch_prepare), or now */
        if (!ahead_claim(d, idx, b, d->theta[0])) {
            NF_TRY(reserve(d, b)); /* before d->A is read: it may move */
            NF_TRY(precision(d, d->theta, idx, b, d->A, NULL, 1));
        }
        kin_lower_times(d->A, Y, a, z, NULL, b, p, KIN_X(d, b, p), KIN_O(d, b, p));
    } else {
        NF_TRY(check_idx(d, idx, b));
        kin_weights(d);
        double *V = KIN_V(d);
        kin_gather(d, V, z, NULL, idx, b, p);
        kin_scatter(d, Y, a, KIN_W(d), V, idx, b, p);
    }
    int bad = -1;
    for (int i = 0; i < b; i++) {
        double q = 0, zy = 0;
        for (int j = 0; j < p; j++) {
            q += (double)z[(size_t)i * p + j] * z[(size_t)i * p + j];
            zy += (double)z[(size_t)i * p + j] * Y[(size_t)i * p + j];
        }
        double ti = base - 0.5 * (a[i] * q + c * (zy - a[i] * q));
        t[i] = (nf_real)ti;
        if (!isfinite(ti) && bad < 0) bad = i;
    }
    d->kin_b = b;
    if (bad >= 0) return nf_error(NF_ENONFINITE, "dependent log-density of batch row %d is not finite", bad);
    return NF_OK;
}

static int kin_backward(nf_dep *d, nf_real *dz, double *dlam, const nf_real *dt, const nf_real *z, const size_t *idx,
                        int b, int p, double c)
{
    double *V = KIN_V(d), *Y = KIN_Y(d, p), *Y2 = KIN_Y2(d, b, p), *a = KIN_A(d, b, p), *da = a + b;
    if (!d->use_cache) kin_weights(d);
    if (dz) {
        /* Y2 = Y' = sum_j A_ij dt_j z_j: dt_0 Y when every dt is the same; V stays for the lambda part,
         * so the eigenbasis sum goes into T */
        int uniform = 1;
        for (int i = 1; i < b && uniform; i++) uniform = dt[i] == dt[0];
        if (uniform) {
            for (size_t at = 0; at < (size_t)b * p; at++) Y2[at] = (double)dt[0] * Y[at];
        } else if (d->use_cache && d->n_comp > 1) {
            kin_pair_times(d, Y2, NULL, z, dt, b, p);
        } else if (d->use_cache) {
            kin_lower_times(d->A, Y2, NULL, z, dt, b, p, KIN_X(d, b, p), KIN_O(d, b, p));
        } else {
            double *S = KIN_T(d, p);
            kin_gather(d, S, z, dt, idx, b, p);
            kin_scatter(d, Y2, NULL, KIN_W(d), S, idx, b, p);
        }
        for (int i = 0; i < b; i++) {
            double g = dt[i];
            for (int j = 0; j < p; j++) {
                size_t at = (size_t)i * p + j;
                double zi = z[at];
                dz[at] += (nf_real)(-g * a[i] * zi - 0.5 * c * (g * (Y[at] - a[i] * zi) + Y2[at] - a[i] * g * zi));
            }
        }
    }
    if (dlam) {
        /* Y2 = sum_j dA_ij/dlambda z_j and da_i = dA_ii/dlambda */
        if (d->use_cache) {
            NF_TRY(reserve(d, b)); /* before d->dA is read: it may move */
            NF_TRY(nf_dep_precision(d, d->theta, idx, b, NULL, d->dA));
            kin_block_times(d->dA, Y2, da, z, NULL, b, p, KIN_X(d, b, p));
        } else {
            kin_scatter(d, Y2, da, KIN_WD(d), V, idx, b, p);
        }
        double s = 0;
        for (int i = 0; i < b; i++) {
            double q = 0, zy = 0;
            for (int j = 0; j < p; j++) {
                q += (double)z[(size_t)i * p + j] * z[(size_t)i * p + j];
                zy += (double)z[(size_t)i * p + j] * Y2[(size_t)i * p + j];
            }
            s += -0.5 * dt[i] * (da[i] * q + c * (zy - da[i] * q));
        }
        *dlam += s;
    }
    return NF_OK;
}

/* ---- equi batches by block sums: O(b p) ---------------------------------------------------------
 * A_ij within a block is one number a (A_ii = d), so with S_c = sum of the batch's z_j in block c
 * and T_c = sum of dt_j z_j there:
 *   sum_{j != i} A_ij z_i.z_j = a (z_i.S_c - |z_i|^2),
 *   dz_i = -dt_i d z_i - (c/2) a [dt_i (S_c - z_i) + T_c - dt_i z_i],
 *   dt/drho_c through d' and a' in place of d and a. */
static int equi_reserve(nf_dep *d, int p)
{
    size_t need = 2 * (size_t)d->n_blocks * p;
    if (need > d->cap_es) {
        double *e = realloc(d->es, need * sizeof *e);
        if (!e) return nf_error(NF_ENOMEM, "out of memory for the block sums of %d blocks", d->n_blocks);
        d->es = e;
        d->cap_es = need;
    }
    return NF_OK;
}

/* out_c = sum over the batch's points i in block c of g_i x_i (g NULL: 1), for the blocks in the batch */
static void equi_sums(const nf_dep *d, double *out, const nf_real *x, const nf_real *g, const size_t *idx, int b, int p)
{
    for (int i = 0; i < b; i++) memset(out + (size_t)d->block[idx[i]] * p, 0, (size_t)p * sizeof *out);
    for (int i = 0; i < b; i++) {
        double *o = out + (size_t)d->block[idx[i]] * p, w = g ? (double)g[i] : 1.0;
        for (int j = 0; j < p; j++) o[j] += w * x[(size_t)i * p + j];
    }
}

static void equi_point(const nf_dep *d, size_t point, double *a_ii, double *a_ij, double *da_ii, double *da_ij)
{
    int c = d->block[point];
    equi_entries((double)d->block_size[c], d->theta[d->per_block ? c : 0], a_ii, a_ij, da_ii, da_ij);
}

static int equi_log_prob(nf_dep *d, nf_real *t, const nf_real *z, const size_t *idx, int b, int p, double base,
                         double c)
{
    NF_TRY(equi_reserve(d, p));
    double *S = d->es;
    equi_sums(d, S, z, NULL, idx, b, p);
    int bad = -1;
    for (int i = 0; i < b; i++) {
        double a_ii, a_ij, da_ii, da_ij, q = 0, zs = 0;
        equi_point(d, idx[i], &a_ii, &a_ij, &da_ii, &da_ij);
        const double *Sc = S + (size_t)d->block[idx[i]] * p;
        for (int j = 0; j < p; j++) {
            double zj = z[(size_t)i * p + j];
            q += zj * zj;
            zs += zj * Sc[j];
        }
        double ti = base - 0.5 * (a_ii * q + c * a_ij * (zs - q));
        t[i] = (nf_real)ti;
        if (!isfinite(ti) && bad < 0) bad = i;
    }
    d->equi_b = b;
    if (bad >= 0) return nf_error(NF_ENONFINITE, "dependent log-density of batch row %d is not finite", bad);
    return NF_OK;
}

static void equi_backward(nf_dep *d, nf_real *dz, double *dtheta, const nf_real *dt, const nf_real *z,
                          const size_t *idx, int b, int p, double c)
{
    double *S = d->es, *T = d->es + (size_t)d->n_blocks * p;
    if (dz) equi_sums(d, T, z, dt, idx, b, p);
    for (int i = 0; i < b; i++) {
        double a_ii, a_ij, da_ii, da_ij, g = dt[i];
        equi_point(d, idx[i], &a_ii, &a_ij, &da_ii, &da_ij);
        size_t blk = (size_t)d->block[idx[i]] * p;
        const double *Sc = S + blk, *Tc = T + blk;
        if (dz)
            for (int j = 0; j < p; j++) {
                size_t at = (size_t)i * p + j;
                double zi = z[at];
                dz[at] += (nf_real)(-g * a_ii * zi - 0.5 * c * a_ij * (g * (Sc[j] - zi) + Tc[j] - g * zi));
            }
        if (dtheta) {
            double q = 0, zs = 0;
            for (int j = 0; j < p; j++) {
                double zj = z[(size_t)i * p + j];
                q += zj * zj;
                zs += zj * Sc[j];
            }
            dtheta[nf_dep_param_of(d, idx[i])] += -0.5 * g * (da_ii * q + c * da_ij * (zs - q));
        }
    }
}

/* t_i = -(p/2) log 2pi - (p/(2n)) log det Sigma - 1/2 [A_ii |z_i|^2 + c sum_{j != i} A_ij z_i.z_j]. */
int nf_dep_batch_log_prob(nf_dep *d, const nf_real *u, nf_real *t, const nf_real *z, const size_t *idx, int b, int p)
{
    if (b < 1) return nf_error(NF_EINVAL, "dependent log-likelihood of an empty batch");
    nf_dep_theta(d, u, d->theta);
    double base = -p * NF_HALF_LOG_2PI - 0.5 * p / (double)d->n * batch_log_det(d, NULL);
    if (d->kind == NF_DEP_EQUI) {
        NF_TRY(check_idx(d, idx, b));
        return equi_log_prob(d, t, z, idx, b, p, base, pair_weight(d, b));
    }
    return kin_log_prob(d, t, z, idx, b, p, base, pair_weight(d, b));
}

/* dz_i = -dt_i A_ii z_i - (c/2) sum_{j != i} (dt_i + dt_j) A_ij z_j (A symmetric); the parameter part
 * as in dependent.h, chained through dtheta/du = theta (1 - theta). */
int nf_dep_batch_backward(nf_dep *d, const nf_real *u, nf_real *dz, nf_real *du, const nf_real *dt, const nf_real *z,
                          const size_t *idx, int b, int p)
{
    ahead_finish(d);
    double c = pair_weight(d, b);
    if (d->kind == NF_DEP_EQUI) {
        if (b < 1 || b != d->equi_b) return nf_error(NF_EINVAL, "dependent backward without a matching log_prob");
        nf_dep_theta(d, u, d->theta);
        if (du) {
            double sum_dt = 0;
            for (int i = 0; i < b; i++) sum_dt += dt[i];
            nf_dep_log_det(d, d->theta, d->dtheta);
            for (int k = 0; k < d->n_params; k++) d->dtheta[k] *= -0.5 * p / (double)d->n * sum_dt;
        }
        equi_backward(d, dz, du ? d->dtheta : NULL, dt, z, idx, b, p, c);
        for (int k = 0; du && k < d->n_params; k++)
            du[k] += (nf_real)(d->dtheta[k] * d->theta[k] * (1 - d->theta[k]));
        return NF_OK;
    }
    if (b < 1 || b != d->kin_b) return nf_error(NF_EINVAL, "dependent backward without a matching log_prob");
    nf_dep_theta(d, u, d->theta);
    double dlam = 0, dl = 0;
    NF_TRY(kin_backward(d, dz, du ? &dlam : NULL, dt, z, idx, b, p, c));
    if (du) {
        double sum_dt = 0;
        for (int i = 0; i < b; i++) sum_dt += dt[i];
        batch_log_det(d, &dl);
        dlam += -0.5 * p / (double)d->n * sum_dt * dl;
        du[0] += (nf_real)(dlam * d->theta[0] * (1 - d->theta[0]));
    }
    return NF_OK;
}

/* ---- the flow base ------------------------------------------------------------------------------ */

typedef struct {
    nf_dep *dep;        /* attached structure (not owned), NULL until attached */
    int n_params, learn;
    size_t off;         /* theta's unconstrained entries u in P (learn 1) or S (learn 0, 2) */
    size_t points;      /* learn 2: the training points whose latents are kept */
    size_t latents_off; /* learn 2: in S, each point's latest latent (points x p) */
    size_t seen_off;    /* learn 2: in S, 1 for each point whose latent has been kept, else 0 */
    nf_real *capture;   /* where log_prob copies the latents, NULL: nowhere */
} dep_base;

static nf_params *store(const nf_dist *d) { return ((const dep_base *)d->state)->learn == 1 ? d->P : d->S; }

static int base_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    d->ctx_dim = 0;
    int k;
    double init;
    NF_TRY(nf_opts_int(opts, "params", 1, 1, 1 << 30, &k));
    NF_TRY(nf_opts_double(opts, "init", 0, -30, 30, &init));
    int learn;
    int points;
    NF_TRY(nf_opts_int(opts, "learn", 1, 0, 2, &learn));
    NF_TRY(nf_opts_int(opts, "points", 0, 0, 1 << 30, &points));
    if (learn == 2 && points < 1)
        return nf_error(NF_EINVAL, "%s: learn=2 (updated between steps) needs points=N, the training points", d->name);
    dep_base *s = nf_calloc(1, sizeof *s, "dependent base");
    if (!s) return NF_ENOMEM;
    s->n_params = k;
    s->learn = learn;
    s->points = learn == 2 ? (size_t)points : 0;
    d->state = s;
    char name[NF_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.theta", d->name);
    int rc = nf_params_add(store(d), name, (size_t)k, &s->off);
    if (rc == NF_OK && s->points) {
        snprintf(name, sizeof name, "%s.latents", d->name);
        rc = nf_params_add(d->S, name, s->points * d->dim, &s->latents_off);
        snprintf(name, sizeof name, "%s.seen", d->name);
        if (rc == NF_OK) rc = nf_params_add(d->S, name, s->points, &s->seen_off);
    }
    if (rc != NF_OK) {
        free(s);
        d->state = NULL;
        return rc;
    }
    for (int i = 0; i < k; i++) store(d)->value[s->off + i] = (nf_real)init;
    return NF_OK;
}

static void base_destroy(nf_dist *d)
{
    free(d->state);
    d->state = NULL;
}

int nf_dist_dependent_attach(nf_dist *base, nf_dep *dep)
{
    if (base->type != &nf_dist_dependent) return nf_error(NF_EINVAL, "%s is not a dependent base", base->name);
    dep_base *s = base->state;
    if (dep && dep->n_params != s->n_params)
        return nf_error(NF_EINVAL, "%s has %d dependence parameters but the structure needs %d", base->name,
                        s->n_params, dep->n_params);
    s->dep = dep;
    return NF_OK;
}

int nf_dist_dependent_params(const nf_dist *base, int *n_params, nf_real **u, int *learned)
{
    if (base->type != &nf_dist_dependent) return nf_error(NF_EINVAL, "%s is not a dependent base", base->name);
    const dep_base *s = base->state;
    if (n_params) *n_params = s->n_params;
    if (u) *u = store(base)->value + s->off;
    if (learned) *learned = s->learn;
    return NF_OK;
}

int nf_dist_dependent_latents(const nf_dist *base, nf_real **z, int *complete)
{
    if (base->type != &nf_dist_dependent) return nf_error(NF_EINVAL, "%s is not a dependent base", base->name);
    const dep_base *s = base->state;
    if (!s->points) return nf_error(NF_EINVAL, "%s keeps no latents (learn=2 and points=N keep them)", base->name);
    *z = base->S->value + s->latents_off;
    const nf_real *seen = base->S->value + s->seen_off;
    *complete = 1;
    for (size_t i = 0; i < s->points && *complete; i++) *complete = seen[i] != 0;
    return NF_OK;
}

int nf_dist_dependent_capture(nf_dist *base, nf_real *z)
{
    if (base->type != &nf_dist_dependent) return nf_error(NF_EINVAL, "%s is not a dependent base", base->name);
    ((dep_base *)base->state)->capture = z;
    return NF_OK;
}

/* Before the flow's forward pass: a kinship batch's precision lookups start beside it. */
static int base_prepare(nf_dist *d, const size_t *idx, int n)
{
    dep_base *s = d->state;
    if (!idx || !s->dep) return NF_OK;
    int rc = nf_dep_batch_prepare(s->dep, store(d)->value + s->off, idx, n);
    return rc == NF_OK ? NF_OK : nf_error_context(rc, "%s", d->name);
}

/* idx NULL or no structure: log N(z; 0, I) = -1/2 |z|^2 - (p/2) log 2pi (every point's marginal). */
static int base_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx, int n)
{
    (void)ctx;
    dep_base *s = d->state;
    const int p = d->dim;
    if (s->capture) memcpy(s->capture, z, (size_t)n * p * sizeof *z);
    if (idx && s->points)
        for (int i = 0; i < n; i++)
            if (idx[i] < s->points) {
                memcpy(d->S->value + s->latents_off + idx[i] * p, z + (size_t)i * p, (size_t)p * sizeof *z);
                d->S->value[s->seen_off + idx[i]] = 1;
            }
    if (idx && s->dep) {
        int rc = nf_dep_batch_log_prob(s->dep, store(d)->value + s->off, logp, z, idx, n, p);
        return rc == NF_OK ? NF_OK : nf_error_context(rc, "%s", d->name);
    }
    for (int i = 0; i < n; i++) {
        double q = 0;
        for (int j = 0; j < p; j++) q += (double)z[(size_t)i * p + j] * z[(size_t)i * p + j];
        logp[i] = (nf_real)(-0.5 * q - p * NF_HALF_LOG_2PI);
        if (!isfinite(logp[i]))
            return nf_error(NF_ENONFINITE, "%s: log-density of row %d is not finite (non-finite latent)", d->name, i);
    }
    return NF_OK;
}

static int base_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                         const nf_real *ctx, const size_t *idx, int n)
{
    (void)dctx, (void)ctx;
    dep_base *s = d->state;
    if (idx && s->dep)
        return nf_dep_batch_backward(s->dep, store(d)->value + s->off, dz, s->learn == 1 ? d->P->grad + s->off : NULL,
                                     dlogp, z, idx, n, d->dim);
    if (dz)
        for (size_t k = 0; k < (size_t)n * d->dim; k++) dz[k] -= dlogp[k / d->dim] * z[k];
    return NF_OK;
}

/* Sampling draws the marginal N(0, I) of a new point. */
static int base_sample(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    (void)ctx;
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    nf_rng_fill_normal(rng, z, (size_t)n * d->dim);
    return logp ? base_log_prob(d, logp, z, NULL, NULL, n) : NF_OK;
}

static int base_sample_backward(nf_dist *d, nf_real *dctx, const nf_real *dz, const nf_real *dlogp, const nf_real *z,
                                const nf_real *ctx, int n)
{
    (void)d, (void)dctx, (void)dz, (void)dlogp, (void)z, (void)ctx, (void)n;
    return NF_OK;
}

const nf_dist_type nf_dist_dependent = {
    .name = "dependent",
    .options_help = "params=K (dependence parameters), init=U (their starting logit), learn=1|0|2 (trained by "
                    "gradient, fixed state, or state the model updates between steps from each point's latest "
                    "latent, kept for points=N)",
    .create = base_create,
    .destroy = base_destroy,
    .log_prob = base_log_prob,
    .backward = base_backward,
    .sample = base_sample,
    .sample_backward = base_sample_backward,
    .prepare = base_prepare,
};
