/* tests/check_dependent.c - dependence structures and the minibatch estimator (distributions/dependent.h):
 * block-equicorrelation and kinship log-determinants and precisions against GSL's Cholesky of the dense
 * Sigma, their theta-derivatives against finite differences, the joint log-likelihood against the dense
 * formula, unbiasedness of the minibatch estimator (its mean over every batch of a small n equals the
 * joint log-likelihood), rho -> 0 and lambda -> 1 giving the i.i.d. terms, the alternating update's
 * lambda and rho (shared and per block) against scans of the profiled joint, finite-difference
 * gradients of the estimator with respect to the latents and the parameters (alone and as a flow's
 * base, through the flow), the kinship lookups started ahead on the worker pool (the same bits as
 * without, whatever comes between), and the errors for a kinship matrix
 * that is not square, of the wrong size, not symmetric or not positive semi-definite. */
#include <check.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blas.h"
#include "distributions/dependent.h"
#include "flows/flow.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL 1e-10
#define TOL_FD 1e-6
#define TOL_UNBIASED 1e-10
#else
#define TOL 2e-5
#define TOL_FD 3e-2
#define TOL_UNBIASED 2e-4
#endif

/* Arbitrary ids: blocks of sizes 5, 3, 2, 1, 1 (in order of first appearance: 42, 7, -3, 100, 5). */
static const int64_t groups[] = {42, 7, 42, -3, 7, 42, 100, 7, 42, -3, 5, 42};
#define NG ((size_t)(sizeof groups / sizeof groups[0]))

/* K = B B^T / r normalised to unit diagonal, B (n x r) with r < n: PSD with n - r zero eigenvalues. */
static double *kinship_matrix(size_t n, size_t r, uint64_t seed)
{
    nf_real *B = malloc(n * r * sizeof *B);
    double *K = malloc(n * n * sizeof *K);
    nf_test_fill_normal(B, n * r, 1.0, seed);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t k = 0; k < r; k++) s += (double)B[i * r + k] * B[j * r + k];
            K[i * n + j] = s;
        }
    double *dg = malloc(n * sizeof *dg);
    for (size_t i = 0; i < n; i++) dg[i] = sqrt(K[i * n + i]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) K[i * n + j] /= dg[i] * dg[j];
    free(dg);
    free(B);
    return K;
}

/* K of families (several connected components, their points interleaved): point i in family
 * (5 i + 2) mod 4, except point 3 alone, each family's block a kinship_matrix of its size (rank
 * min(m, 3)), zero across families.  For n = 9: {2, 6}, {7}, {0, 4, 8}, {1, 5}, {3}. */
static double *kinship_families(size_t n, uint64_t seed)
{
    double *K = calloc(n * n, sizeof *K);
    for (int f = 0; f < 5; f++) {
        size_t pts[64], m = 0;
        for (size_t i = 0; i < n && m < 64; i++)
            if ((i == 3 ? 4 : (int)((5 * i + 2) % 4)) == f) pts[m++] = i;
        if (!m) continue;
        double *B = kinship_matrix(m, m < 3 ? m : 3, seed + (uint64_t)f);
        for (size_t r = 0; r < m; r++)
            for (size_t q = 0; q < m; q++) K[pts[r] * n + pts[q]] = B[r * m + q];
        free(B);
    }
    return K;
}

/* The dense Sigma of a structure at theta. */
static gsl_matrix *dense_sigma(const nf_dep *d, const double *theta, const double *K)
{
    size_t n = d->n;
    gsl_matrix *S = gsl_matrix_alloc(n, n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double v;
            if (d->kind == NF_DEP_EQUI)
                v = i == j ? 1 : d->block[i] == d->block[j] ? theta[nf_dep_param_of(d, i)] : 0;
            else
                v = (i == j ? theta[0] : 0) + (1 - theta[0]) * K[i * n + j];
            gsl_matrix_set(S, i, j, v);
        }
    return S;
}

/* log det and A = Sigma^-1 by GSL's Cholesky. */
static double cholesky_reference(gsl_matrix *S, gsl_matrix **Ainv)
{
    size_t n = S->size1;
    ck_assert_int_eq(gsl_linalg_cholesky_decomp1(S), 0);
    double L = 0;
    for (size_t i = 0; i < n; i++) L += 2 * log(gsl_matrix_get(S, i, i));
    *Ainv = gsl_matrix_alloc(n, n);
    gsl_matrix_memcpy(*Ainv, S);
    ck_assert_int_eq(gsl_linalg_cholesky_invert(*Ainv), 0);
    return L;
}

/* Compare log det and every precision entry (in a shuffled batch of all points) with the Cholesky. */
static void check_against_cholesky(nf_dep *d, const double *theta, const double *K)
{
    size_t n = d->n;
    gsl_matrix *S = dense_sigma(d, theta, K), *Ai;
    double Lref = cholesky_reference(S, &Ai);
    double L = nf_dep_log_det(d, theta, NULL);
    ck_assert_msg(nf_test_relerr(L, Lref, 1e-3) < TOL, "log det %.12g, Cholesky %.12g", L, Lref);
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = (i * 5 + 3) % n; /* a permutation (n not a multiple of 5) */
    double *A = malloc(n * n * sizeof *A);
    ck_assert_int_eq(nf_dep_precision(d, theta, idx, (int)n, A, NULL), NF_OK);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double ref = gsl_matrix_get(Ai, idx[i], idx[j]);
            ck_assert_msg(nf_test_relerr(A[i * n + j], ref, 1.0) < TOL * 10, "A[%zu,%zu] = %.12g, Cholesky %.12g",
                          idx[i], idx[j], A[i * n + j], ref);
        }
    free(A);
    free(idx);
    gsl_matrix_free(S);
    gsl_matrix_free(Ai);
}

START_TEST(test_equi_against_cholesky)
{
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    ck_assert_int_eq(d->n_blocks, 5);
    ck_assert_int_eq(d->n_params, 5);
    ck_assert_int_eq((int)d->block_size[0], 5);
    ck_assert_int_eq((int)d->block_size[1], 3);
    ck_assert_int_eq(d->block[3], 2);
    double theta[5] = {0.615, 0.283, 0.947, 0.5, 0.125};
    check_against_cholesky(d, theta, NULL);
    nf_dep_free(d);
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    ck_assert_int_eq(d->n_params, 1);
    double shared = 0.7385;
    check_against_cholesky(d, &shared, NULL);
    nf_dep_free(d);
}
END_TEST

/* _i = 0: one dense K; 1: a K of five families (components), each with its own eigenpairs */
START_TEST(test_kinship_against_cholesky)
{
    size_t n = 9;
    double *K = _i ? kinship_families(n, 11) : kinship_matrix(n, 6, 11);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    ck_assert_int_eq(d->n_params, 1);
    ck_assert_int_eq(d->n_comp, _i ? 5 : 1);
    for (size_t k = 1; k < n; k++) ck_assert(d->eval[k - 1] <= d->eval[k]);
    const double lambdas[] = {0.0375, 0.385, 0.5, 0.9127};
    for (int k = 0; k < 4; k++) check_against_cholesky(d, &lambdas[k], K);
    /* the cached whole precision (its lower triangle, rebuilt for each lambda) gives the same entries */
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    for (int k = 0; k < 4; k++) check_against_cholesky(d, &lambdas[k], K);
    nf_dep_free(d);
    free(K);
}
END_TEST

/* v^T A v for one column v (n) from the one-column joint of nf_dep_joint_log_prob (checked against
 * the dense Cholesky above). */
static double quad_form(const nf_dep *d, const double *theta, const nf_real *v, double ld)
{
    double jl;
    ck_assert_int_eq(nf_dep_joint_log_prob(d, theta, v, 1, &jl), NF_OK);
    return -2 * (jl + 0.5 * (double)d->n * log(2 * M_PI) + 0.5 * ld);
}

/* The profile the alternating update maximises, -(p/2) log det Sigma - (n/2) sum_j log e_j with
 * e_j = z_j^T A z_j - (1^T A z_j)^2 / 1^T A 1, the cross term by polarisation:
 * 2 1^T A z = (z + 1)^T A (z + 1) - z^T A z - 1^T A 1. */
static double profiled_joint(const nf_dep *d, const double *theta, const nf_real *Z, size_t n, size_t p, nf_real *col)
{
    double ld = nf_dep_log_det(d, theta, NULL), v = -0.5 * p * ld;
    for (size_t i = 0; i < n; i++) col[i] = 1;
    double oo = quad_form(d, theta, col, ld);
    for (size_t j = 0; j < p; j++) {
        for (size_t i = 0; i < n; i++) col[i] = Z[i * p + j];
        double zz = quad_form(d, theta, col, ld);
        for (size_t i = 0; i < n; i++) col[i] += 1;
        double oz = 0.5 * (quad_form(d, theta, col, ld) - zz - oo);
        v -= 0.5 * n * log(zz - oz * oz / oo);
    }
    return v;
}

/* Z (n x p) = L e with Sigma = L L^T the dense Sigma(theta), column j then scaled by scale[j] and
 * shifted by 0.8 j - 0.5. */
static nf_real *correlated_latents(const nf_dep *d, const double *theta, const double *K, size_t p,
                                   const double *scale, uint64_t seed)
{
    size_t n = d->n;
    gsl_matrix *S = dense_sigma(d, theta, K);
    ck_assert_int_eq(gsl_linalg_cholesky_decomp1(S), 0);
    nf_real *e = malloc(n * p * sizeof *e), *Z = calloc(n * p, sizeof *Z);
    nf_test_fill_normal(e, n * p, 1.0, seed);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k <= i; k++)
            for (size_t j = 0; j < p; j++) Z[i * p + j] += (nf_real)(scale[j] * gsl_matrix_get(S, i, k) * e[k * p + j]);
    for (size_t i = 0; i < n * p; i++) Z[i] += (nf_real)(0.8 * (double)(i % p) - 0.5);
    gsl_matrix_free(S);
    free(e);
    return Z;
}

/* The alternating update of a kinship lambda and a shared rho: the maximiser of the profile against a
 * scan over theta in steps of 1e-4, near the generating value (latents drawn with Sigma(truth), then
 * scaled and shifted per dimension, which the profile must not see). */
START_TEST(test_best_theta_one)
{
    const size_t n = 40, p = 3;
    const double scale[3] = {2.5, 0.4, 1.0};
    double *K = kinship_matrix(n, 12, 51);
    int64_t *grp = malloc(n * sizeof *grp);
    for (size_t i = 0; i < n; i++) grp[i] = (int64_t)(i % 5);
    nf_real *col = malloc(n * sizeof *col);
    for (int kind = 0; kind < 2; kind++) {
        nf_dep *d;
        double truth = kind == 0 ? 0.3 : 0.6, got = -1, best = -INFINITY, best_at = 0;
        if (kind == 0) ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
        else ck_assert_int_eq(nf_dep_equi_create(&d, grp, n, 0), NF_OK);
        nf_real *Z = correlated_latents(d, &truth, K, p, scale, 52);
        ck_assert_msg(nf_dep_best_theta(d, Z, (int)p, &got, 1) == NF_OK, "%s", nf_strerror_last());
        for (int g = 1; g < 10000; g++) {
            double t = g * 1e-4, v = profiled_joint(d, &t, Z, n, p, col);
            if (v > best) best = v, best_at = t;
        }
        ck_assert_msg(best_at > 0.01 && best_at < 0.99, "the scan's maximum %g is not interior", best_at);
        ck_assert_msg(fabs(got - best_at) < 2e-4, "%s: best %.6f, scan %.4f", kind ? "rho" : "lambda", got, best_at);
        ck_assert_msg(fabs(got - truth) < 0.25, "best %.4f far from the generating %.2f", got, truth);
        free(Z);
        nf_dep_free(d);
    }
    free(K), free(grp), free(col);
}
END_TEST

/* Per-block rho: one sweep raises the profile, and enough sweeps end at a coordinate-wise maximum
 * (no block's rho, scanned in steps of 1e-3 with the others held, does better); a block of one point
 * keeps its starting rho.  (Not compared
 * with the generating rho: a block tells its rho through the p squares of its sum alone, so one
 * block's estimate is noisy at any block size.) */
START_TEST(test_best_theta_blocks)
{
    const size_t p = 2, sizes[] = {60, 40, 25, 12, 2, 1};
    const double truth[] = {0.8, 0.55, 0.3, 0.9, 0.5, 0.5}, scale[2] = {1.7, 0.6};
    const int nb = 6;
    size_t n = 0;
    for (int b = 0; b < nb; b++) n += sizes[b];
    int64_t *grp = malloc(n * sizeof *grp);
    for (size_t i = 0, at = 0; (int)i < nb; i++)
        for (size_t k = 0; k < sizes[i]; k++) grp[at++] = (int64_t)i;
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, grp, n, 1), NF_OK);
    ck_assert_int_eq(d->n_blocks, nb);
    nf_real *Z = correlated_latents(d, truth, NULL, p, scale, 53), *col = malloc(n * sizeof *col);
    double got[6] = {0.5, 0.5, 0.5, 0.5, 0.5, 0.123};
    double start = profiled_joint(d, got, Z, n, p, col);
    ck_assert_msg(nf_dep_best_theta(d, Z, (int)p, got, 1) == NF_OK, "%s", nf_strerror_last());
    double one = profiled_joint(d, got, Z, n, p, col);
    ck_assert_msg(one > start, "one sweep: %.9g, start %.9g", one, start);
    ck_assert_msg(nf_dep_best_theta(d, Z, (int)p, got, 1000) == NF_OK, "%s", nf_strerror_last());
    ck_assert_double_eq(got[5], 0.123);
    double at = profiled_joint(d, got, Z, n, p, col);
    ck_assert_msg(at >= one, "converged: %.9g, after one sweep %.9g", at, one);
    for (int b = 0; b < 5; b++) {
        double t[6];
        memcpy(t, got, sizeof t);
        for (int g = 1; g < 1000; g++) {
            t[b] = g * 1e-3;
            double v = profiled_joint(d, t, Z, n, p, col);
            ck_assert_msg(v <= at + 1e-6 * fabs(at), "block %d: rho %.3f gives %.9g > %.9g at %.6f", b, t[b], v, at,
                          got[b]);
        }
    }
    free(Z), free(col), free(grp);
    nf_dep_free(d);
}
END_TEST

/* Pooled per-block rho (per_block 2) on 48 blocks of 3 to 40 points with rho spread over [0.5, 0.95]:
 * closer to the generating rho on average than each block's own maximiser (per_block 1), by pulling
 * the small blocks' scattered maximisers together, while the largest blocks, whose points decide
 * their rho, stay near their maximiser (moved less than half as far as the smallest). */
START_TEST(test_best_theta_pooled)
{
    const size_t p = 2, sizes[] = {3, 5, 8, 12, 20, 40};
    const double scale[2] = {1.3, 0.7};
    const int nb = 48;
    size_t n = 0;
    for (int b = 0; b < nb; b++) n += sizes[b % 6];
    int64_t *grp = malloc(n * sizeof *grp);
    double truth[48], ml[48], pooled[48];
    for (int b = 0; b < nb; b++) truth[b] = 0.5 + 0.45 * ((b * 7) % 48) / 47.0;
    for (size_t b = 0, at = 0; (int)b < nb; b++)
        for (size_t k = 0; k < sizes[b % 6]; k++) grp[at++] = (int64_t)b;
    nf_dep *d1, *d2;
    ck_assert_int_eq(nf_dep_equi_create(&d1, grp, n, 1), NF_OK);
    ck_assert_int_eq(nf_dep_equi_create(&d2, grp, n, 2), NF_OK);
    ck_assert(!d1->pooled && d2->pooled && d2->per_block);
    nf_real *Z = correlated_latents(d1, truth, NULL, p, scale, 57);
    for (int b = 0; b < nb; b++) ml[b] = pooled[b] = 0.5;
    ck_assert_msg(nf_dep_best_theta(d1, Z, (int)p, ml, 200) == NF_OK, "%s", nf_strerror_last());
    ck_assert_msg(nf_dep_best_theta(d2, Z, (int)p, pooled, 200) == NF_OK, "%s", nf_strerror_last());
    double e_ml = 0, e_pooled = 0, move_small = 0, move_large = 0;
    for (int b = 0; b < nb; b++) {
        ck_assert(pooled[b] > 0 && pooled[b] < 1);
        e_ml += fabs(ml[b] - truth[b]) / nb, e_pooled += fabs(pooled[b] - truth[b]) / nb;
        if (sizes[b % 6] == 3) move_small += fabs(pooled[b] - ml[b]) / 8;
        if (sizes[b % 6] == 40) move_large += fabs(pooled[b] - ml[b]) / 8;
    }
    ck_assert_msg(e_pooled < 0.8 * e_ml, "mean error pooled %.4f, maximisers %.4f", e_pooled, e_ml);
    ck_assert_msg(move_large < 0.03 && move_large < 0.5 * move_small,
                  "pooling moved the blocks of 40 points by %.4f on average, those of 3 by %.4f", move_large, move_small);
    free(Z), free(grp);
    nf_dep_free(d1), nf_dep_free(d2);
}
END_TEST

/* d log det / d theta and dA / dtheta against central differences. */
static void check_theta_derivatives(nf_dep *d, const double *theta0)
{
    int np = d->n_params;
    size_t n = d->n;
    double *th = malloc(np * sizeof *th), *dl = malloc(np * sizeof *dl);
    double *A1 = malloc(n * n * sizeof *A1), *A2 = malloc(n * n * sizeof *A2), *dA = malloc(n * n * sizeof *dA);
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = n - 1 - i;
    memcpy(th, theta0, np * sizeof *th);
    nf_dep_log_det(d, th, dl);
    ck_assert_int_eq(nf_dep_precision(d, th, idx, (int)n, NULL, dA), NF_OK);
    const double h = 1e-6;
    for (int k = 0; k < np; k++) {
        th[k] = theta0[k] + h;
        double Lp = nf_dep_log_det(d, th, NULL);
        ck_assert_int_eq(nf_dep_precision(d, th, idx, (int)n, A1, NULL), NF_OK);
        th[k] = theta0[k] - h;
        double Lm = nf_dep_log_det(d, th, NULL);
        ck_assert_int_eq(nf_dep_precision(d, th, idx, (int)n, A2, NULL), NF_OK);
        th[k] = theta0[k];
        double fd = (Lp - Lm) / (2 * h);
        ck_assert_msg(nf_test_relerr(dl[k], fd, 1e-2) < 1e-6, "dlogdet/dtheta_%d = %g, fd %g", k, dl[k], fd);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) {
                if (nf_dep_param_of(d, idx[i]) != k) continue;
                double fdA = (A1[i * n + j] - A2[i * n + j]) / (2 * h);
                ck_assert_msg(nf_test_relerr(dA[i * n + j], fdA, 1e-2) < 1e-5, "dA[%zu,%zu]/dtheta_%d = %g, fd %g",
                              i, j, k, dA[i * n + j], fdA);
            }
    }
    free(th), free(dl), free(A1), free(A2), free(dA), free(idx);
}

START_TEST(test_theta_derivatives)
{
#ifndef NF_DOUBLE
    return; /* kinship precisions go through float products: differences need the double build */
#endif
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    double theta[5] = {0.615, 0.283, 0.947, 0.5, 0.125};
    check_theta_derivatives(d, theta);
    nf_dep_free(d);
    size_t n = 8;
    double *K = kinship_matrix(n, 5, 23);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    double lam = 0.3365;
    check_theta_derivatives(d, &lam);
    nf_dep_free(d);
    free(K);
}
END_TEST

/* The joint log-likelihood against -(np/2) log 2pi - (p/2) log det - 1/2 tr(Z^T A Z) with GSL's A. */
static void check_joint(nf_dep *d, const double *theta, const double *K, int p)
{
    size_t n = d->n;
    nf_real *Z = malloc(n * p * sizeof *Z);
    nf_test_fill_normal(Z, n * p, 1.1, 5);
    gsl_matrix *S = dense_sigma(d, theta, K), *Ai;
    double L = cholesky_reference(S, &Ai), tr = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            for (int k = 0; k < p; k++) tr += gsl_matrix_get(Ai, i, j) * Z[i * p + k] * Z[j * p + k];
    double ref = -0.5 * n * p * log(2 * M_PI) - 0.5 * p * L - 0.5 * tr, lp;
    ck_assert_int_eq(nf_dep_joint_log_prob(d, theta, Z, p, &lp), NF_OK);
    ck_assert_msg(nf_test_relerr(lp, ref, 1.0) < TOL * 10, "joint %.12g, dense %.12g", lp, ref);
    gsl_matrix_free(S);
    gsl_matrix_free(Ai);
    free(Z);
}

START_TEST(test_joint_log_prob)
{
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    double theta[5] = {0.615, 0.283, 0.947, 0.5, 0.125};
    check_joint(d, theta, NULL, 3);
    nf_dep_free(d);
    for (int families = 0; families < 2; families++) {
        size_t n = 10;
        double *K = families ? kinship_families(n, 31) : kinship_matrix(n, 7, 31);
        ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
        ck_assert_int_eq(d->n_comp > 1, families);
        double lam = 0.615;
        check_joint(d, &lam, K, 2);
        nf_dep_free(d);
        free(K);
    }
}
END_TEST

/* Mean over every subset B of size b of (n/b) sum_{i in B} t_i equals the joint log-likelihood. */
static void check_unbiased(nf_dep *d, const nf_real *u, int b, int p)
{
    size_t n = d->n;
    nf_real *Z = malloc(n * p * sizeof *Z), *zb = malloc((size_t)b * p * sizeof *zb), *t = malloc(b * sizeof *t);
    nf_test_fill_normal(Z, n * p, 0.9, 77);
    size_t idx[32];
    int pos[32];
    for (int i = 0; i < b; i++) pos[i] = i;
    double sum = 0;
    long count = 0;
    for (;;) {
        /* the batch in reversed order: nothing may assume sorted indices */
        for (int i = 0; i < b; i++) idx[i] = (size_t)pos[b - 1 - i];
        for (int i = 0; i < b; i++) memcpy(zb + (size_t)i * p, Z + idx[i] * p, p * sizeof *zb);
        ck_assert_int_eq(nf_dep_batch_log_prob(d, u, t, zb, idx, b, p), NF_OK);
        double s = 0;
        for (int i = 0; i < b; i++) s += t[i];
        sum += (double)n / b * s;
        count++;
        int k = b - 1;
        while (k >= 0 && pos[k] == (int)n - b + k) k--;
        if (k < 0) break;
        pos[k]++;
        for (int j = k + 1; j < b; j++) pos[j] = pos[j - 1] + 1;
    }
    double theta[64], joint;
    nf_dep_theta(d, u, theta);
    ck_assert_int_eq(nf_dep_joint_log_prob(d, theta, Z, p, &joint), NF_OK);
    ck_assert_msg(nf_test_relerr(sum / count, joint, 1.0) < TOL_UNBIASED,
                  "b = %d: mean over %ld batches %.12g, joint %.12g", b, count, sum / count, joint);
    free(Z), free(zb), free(t);
}

/* rho -> 0 and lambda -> 1 are ordinary i.i.d. training: Sigma -> I, so each term of the estimator
 * is the standard normal log-density of its latent (u = -/+ 30: theta within 1e-13 of the limit). */
START_TEST(test_iid_limits)
{
    const int b = 5, p = 3;
    nf_real z[15], t[5];
    nf_test_fill_normal(z, 15, 1.3, 61);
    size_t idx[] = {4, 0, 7, 2, 5};
    size_t n = 9;
    double *K = kinship_matrix(n, 6, 41);
    for (int kind = 0; kind < 2; kind++) {
        nf_dep *d;
        nf_real u = kind == 0 ? -30 : 30;
        if (kind == 0) ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
        else ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
        ck_assert_int_eq(nf_dep_batch_log_prob(d, &u, t, z, idx, b, p), NF_OK);
        for (int i = 0; i < b; i++) {
            double q = 0;
            for (int j = 0; j < p; j++) q += (double)z[i * p + j] * z[i * p + j];
            double iid = -0.5 * q - 0.5 * p * log(2 * M_PI);
            ck_assert_msg(fabs(t[i] - iid) < 1e-5 * (1 + fabs(iid)), "%s: term %d is %.9g, i.i.d. %.9g",
                          kind ? "lambda -> 1" : "rho -> 0", i, (double)t[i], iid);
        }
        nf_dep_free(d);
    }
    free(K);
}
END_TEST

START_TEST(test_unbiased)
{
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    nf_real u[5] = {0.47, -0.93, 2.385, 0.0, -1.7};
    for (int b = 2; b <= 12; b += 3) check_unbiased(d, u, b, 2);
    nf_dep_free(d);
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    check_unbiased(d, u, 4, 3);
    nf_dep_free(d);
    size_t n = 9;
    double *K = kinship_matrix(n, 6, 41);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    nf_real ul = -0.385;
    check_unbiased(d, &ul, 2, 2);
    check_unbiased(d, &ul, 4, 2);
    check_unbiased(d, &ul, 9, 2);
    /* the same through the cached whole precision (a fixed lambda) */
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_unbiased(d, &ul, 3, 2);
    check_unbiased(d, &ul, 9, 2);
    nf_dep_free(d);
    free(K);
    /* K in five families: through the eigenbasis, and the cache read as the batch's pairs within families */
    K = kinship_families(n, 41);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    ck_assert_int_eq(d->n_comp, 5);
    check_unbiased(d, &ul, 4, 2);
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_unbiased(d, &ul, 2, 2);
    check_unbiased(d, &ul, 5, 3);
    check_unbiased(d, &ul, 9, 2);
    nf_dep_free(d);
    free(K);
}
END_TEST

/* Gradients of L = sum_i w_i t_i with respect to z and u against central differences. */
static void check_batch_grad(nf_dep *d, nf_real *u, const size_t *idx, int b, int p)
{
    nf_real *z = malloc((size_t)b * p * sizeof *z), *t = malloc(b * sizeof *t), *w = malloc(b * sizeof *w);
    nf_real *dz = calloc((size_t)b * p, sizeof *dz), du[64] = {0};
    nf_test_fill_normal(z, (size_t)b * p, 1.2, 91);
    nf_test_fill_uniform(w, b, -1.5, 0.5, 92);
    ck_assert_int_eq(nf_dep_batch_log_prob(d, u, t, z, idx, b, p), NF_OK);
    ck_assert_int_eq(nf_dep_batch_backward(d, u, dz, du, w, z, idx, b, p), NF_OK);
    const double h = 1e-5;
#define LOSS(out)                                                                  \
    do {                                                                           \
        ck_assert_int_eq(nf_dep_batch_log_prob(d, u, t, z, idx, b, p), NF_OK);     \
        double s_ = 0;                                                             \
        for (int i_ = 0; i_ < b; i_++) s_ += (double)w[i_] * t[i_];                \
        out = s_;                                                                  \
    } while (0)
    for (int k = 0; k < b * p; k++) {
        nf_real keep = z[k];
        double lp, lm;
        z[k] = keep + h;
        LOSS(lp);
        z[k] = keep - h;
        LOSS(lm);
        z[k] = keep;
        double fd = (lp - lm) / (2 * h);
        ck_assert_msg(nf_test_relerr(dz[k], fd, 1e-2) < TOL_FD, "dz[%d] = %g, fd %g", k, (double)dz[k], fd);
    }
    for (int k = 0; k < d->n_params; k++) {
        nf_real keep = u[k];
        double lp, lm;
        u[k] = keep + h;
        LOSS(lp);
        u[k] = keep - h;
        LOSS(lm);
        u[k] = keep;
        double fd = (lp - lm) / (2 * h);
        ck_assert_msg(nf_test_relerr(du[k], fd, 1e-2) < TOL_FD, "du[%d] = %g, fd %g", k, (double)du[k], fd);
    }
#undef LOSS
    free(z), free(t), free(w), free(dz);
}

START_TEST(test_batch_gradients)
{
#ifndef NF_DOUBLE
    return; /* finite differences need the double build */
#endif
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    nf_real u[5] = {0.47, -0.93, 2.385, 0.3, -1.7};
    size_t idx[] = {8, 1, 0, 9, 4, 3, 6};
    check_batch_grad(d, u, idx, 7, 3);
    nf_dep_free(d);
    size_t n = 9;
    double *K = kinship_matrix(n, 6, 41);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    nf_real ul = -0.385;
    size_t kidx[] = {5, 2, 7, 0};
    check_batch_grad(d, &ul, kidx, 4, 2);
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_batch_grad(d, &ul, kidx, 4, 2);
    nf_dep_free(d);
    free(K);
    /* K in five families ({2, 6}, {7}, {0, 4, 8}, {1, 5}, {3}): pairs within and across them */
    K = kinship_families(n, 41);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    size_t fidx[] = {4, 1, 8, 6, 5, 0, 2};
    check_batch_grad(d, &ul, fidx, 7, 2);
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_batch_grad(d, &ul, fidx, 7, 2);
    nf_dep_free(d);
    free(K);
}
END_TEST

/* The backward is linear in dt: with every dt the same (training's batch mean) it takes a shortcut
 * (Y' = dt Y, no pass over the batch), which must equal the sum of the backwards of the one-hot dt. */
static void check_uniform_dt(nf_dep *d, const size_t *idx, int b, int p)
{
    nf_real u = -0.385, z[64], t[16], dt[16], dz[64], sum[64] = {0}, uni[64] = {0};
    nf_test_fill_normal(z, (size_t)b * p, 1.1, 93);
    ck_assert_int_eq(nf_dep_batch_log_prob(d, &u, t, z, idx, b, p), NF_OK);
    for (int r = 0; r < b; r++) {
        for (int i = 0; i < b; i++) dt[i] = i == r ? (nf_real)-0.75 : 0;
        memset(dz, 0, sizeof dz);
        ck_assert_int_eq(nf_dep_batch_backward(d, &u, dz, NULL, dt, z, idx, b, p), NF_OK);
        for (int k = 0; k < b * p; k++) sum[k] += dz[k];
    }
    for (int i = 0; i < b; i++) dt[i] = (nf_real)-0.75;
    ck_assert_int_eq(nf_dep_batch_backward(d, &u, uni, NULL, dt, z, idx, b, p), NF_OK);
    for (int k = 0; k < b * p; k++)
        ck_assert_msg(nf_test_relerr(uni[k], sum[k], 1e-2) < TOL, "dz[%d] = %g with one dt, %g summed", k,
                      (double)uni[k], (double)sum[k]);
}

START_TEST(test_uniform_dt)
{
    size_t n = 9, idx[] = {4, 1, 8, 6, 5, 0, 2};
    double *K = kinship_matrix(n, 6, 41);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    check_uniform_dt(d, idx, 7, 2); /* through the eigenbasis */
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_uniform_dt(d, idx, 7, 3); /* the cached block */
    nf_dep_free(d);
    free(K);
    K = kinship_families(n, 41);
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    check_uniform_dt(d, idx, 7, 2); /* the pairs within families */
    nf_dep_free(d);
    free(K);
}
END_TEST

/* The eigenbasis passes split over the thread pool (a batch of 64 rows or more): the same scores and
 * gradients as on one thread, up to the order of the sums. */
START_TEST(test_eigen_threads)
{
    enum { N = 150, B = 100, P = 3 };
    double *K = kinship_matrix(N, 120, 61);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, N, N, N), NF_OK);
    size_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (size_t)(37 * i + 11) % N;
    nf_real z[B * P], t[2][B], dz[2][B * P], dt[B], u = 0.3f, du[2] = {0, 0};
    nf_test_fill_normal(z, B * P, 1.0, 62);
    nf_test_fill_uniform(dt, B, -1.0, 0.2, 63); /* not uniform: the backward's own passes */
    for (int run = 0; run < 2; run++) {
        nf_blas_set_threads(run + 1);
        memset(dz[run], 0, sizeof dz[run]);
        ck_assert_int_eq(nf_dep_batch_log_prob(d, &u, t[run], z, idx, B, P), NF_OK);
        ck_assert_int_eq(nf_dep_batch_backward(d, &u, dz[run], &du[run], dt, z, idx, B, P), NF_OK);
    }
    nf_blas_set_threads(1);
    for (int i = 0; i < B; i++) ck_assert_msg(nf_test_relerr(t[1][i], t[0][i], 1.0) < TOL, "t[%d]", i);
    for (int k = 0; k < B * P; k++) ck_assert_msg(nf_test_relerr(dz[1][k], dz[0][k], 1e-2) < TOL, "dz[%d]", k);
    ck_assert_msg(nf_test_relerr(du[1], du[0], 1e-2) < TOL, "du %g against %g", (double)du[1], (double)du[0]);
    nf_dep_free(d);
    free(K);
}
END_TEST

/* As a flow's base: without indices the marginal N(0, I); with them the estimator, and the flow's
 * parameter gradients (theta included) match finite differences of sum_i w_i log p_i. */
START_TEST(test_flow_base)
{
    nf_flow *f;
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling(hidden=8), lu, affine-coupling(hidden=8)", 2, 0, 7), NF_OK);
    nf_dist_destroy(&f->base);
    ck_assert_int_eq(nf_dist_create(&f->base, &nf_dist_dependent, 2, 0, "base", "params=5, init=0.4", f->P, f->S, NULL),
                     NF_OK);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    ck_assert_int_ne(nf_dist_dependent_attach(&f->base, d), NF_OK); /* 5 parameters, the structure has 1 */
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "needs 1"));
    nf_dep_free(d);
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    ck_assert_int_eq(nf_dist_dependent_attach(&f->base, d), NF_OK);
    int np, learned;
    nf_real *u;
    ck_assert_int_eq(nf_dist_dependent_params(&f->base, &np, &u, &learned), NF_OK);
    ck_assert_int_eq(np, 5);
    ck_assert_int_eq(learned, 1);
    ck_assert(u >= f->P->value && u < f->P->value + f->P->n);
    size_t off = (size_t)(u - f->P->value);
    (void)off;
    for (size_t k = 0; k < f->P->n; k++) f->P->value[k] += (nf_real)(0.05 * sin(1.7 * k + 0.3));
    enum { B = 6 };
    size_t idx[B] = {0, 2, 5, 1, 11, 3};
    nf_real x[B * 2], lp[B], w[B], lp0[B];
    nf_test_fill_normal(x, B * 2, 1.0, 3);
    nf_test_fill_uniform(w, B, -1.0, 0.2, 4);
    /* marginal: log N(z) + log|det J| equals the flow on a normal base */
    nf_flow *g;
    ck_assert_int_eq(nf_flow_create(&g, "affine-coupling(hidden=8), lu, affine-coupling(hidden=8)", 2, 0, 7), NF_OK);
    memcpy(g->P->value, f->P->value, g->P->n * sizeof *g->P->value);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, B), NF_OK);
    (void)idx, (void)w;
    ck_assert_int_eq(nf_flow_log_prob(g, lp0, x, NULL, NULL, B), NF_OK);
    for (int i = 0; i < B; i++) ck_assert_msg(nf_test_relerr(lp[i], lp0[i], 1.0) < TOL, "marginal %d", i);
    nf_flow_free(g);
#ifdef NF_DOUBLE
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, idx, B), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, w, NULL, NULL), NF_OK);
    const double h = 1e-6;
    for (size_t k = 0; k < f->P->n; k++) {
        nf_real keep = f->P->value[k];
        double s[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            f->P->value[k] = keep + (sgn ? -h : h);
            ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, idx, B), NF_OK);
            s[sgn] = 0;
            for (int i = 0; i < B; i++) s[sgn] += w[i] * lp[i];
        }
        f->P->value[k] = keep;
        double fd = (s[0] - s[1]) / (2 * h);
        ck_assert_msg(nf_test_relerr(f->P->grad[k], fd, 1e-2) < TOL_FD, "dP[%zu] = %g, fd %g", k,
                      (double)f->P->grad[k], fd);
    }
    ck_assert(f->P->grad[off + 0] != 0); /* block 0 is in the batch */
#endif
    nf_flow_free(f);
    nf_dep_free(d);
}
END_TEST

static void expect_kinship_error(const double *K, size_t rows, size_t cols, size_t n, const char *phrase)
{
    nf_dep *d = (nf_dep *)1;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, rows, cols, n), NF_EINVAL);
    ck_assert_ptr_null(d);
    ck_assert_msg(strstr(nf_strerror_last(), phrase), "message '%s' lacks '%s'", nf_strerror_last(), phrase);
}

/* nf_dep_batch_prepare with the kinship cache and two threads: the pool reads A_BB ahead, and the
 * log-density and its backward are the same bits as without it, when the batch that follows is the
 * prepared one, another one, or the same one at another lambda; a bad batch prepared is reported by
 * the log-density; a structure freed with a job outstanding finishes it. */
static void kin_scores(nf_dep *d, nf_real u, const size_t *idx, int b, int p, const nf_real *z, nf_real *t,
                       nf_real *dz)
{
    nf_real w[128];
    for (int i = 0; i < b; i++) w[i] = (nf_real)(0.5 + 0.01 * i);
    memset(dz, 0, (size_t)b * p * sizeof *dz);
    ck_assert_int_eq(nf_dep_batch_log_prob(d, &u, t, z, idx, b, p), NF_OK);
    ck_assert_int_eq(nf_dep_batch_backward(d, &u, dz, NULL, w, z, idx, b, p), NF_OK);
}

START_TEST(test_lookup_ahead)
{
    enum { N = 150, B = 100, P = 2 };
    double *K = kinship_matrix(N, 120, 61);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, N, N, N), NF_OK);
    ck_assert_int_eq(nf_dep_kinship_cache(d, 1), NF_OK);
    size_t idx[B], other[B];
    for (int i = 0; i < B; i++) idx[i] = (size_t)(37 * i + 11) % N, other[i] = (size_t)(53 * i + 5) % N;
    nf_real z[B * P], t0[B], t1[B], dz0[B * P], dz1[B * P], u = 0.3f, u2 = -0.6f;
    nf_test_fill_normal(z, B * P, 1.0, 62);
    nf_blas_set_threads(1);
    kin_scores(d, u, idx, B, P, z, t0, dz0); /* the reference: nothing ahead */
    ck_assert_int_eq(nf_dep_batch_prepare(d, &u, idx, B), NF_OK);
    ck_assert_ptr_null(d->ahead); /* one thread: nothing ahead */
    nf_blas_set_threads(2);
    for (int round = 0; round < 3; round++) { /* the pool's worker spins, sleeps, and wakes again */
        ck_assert_int_eq(nf_dep_batch_prepare(d, &u, idx, B), NF_OK);
        ck_assert_ptr_nonnull(d->ahead);
        kin_scores(d, u, idx, B, P, z, t1, dz1);
        ck_assert_mem_eq(t0, t1, sizeof t0);
        ck_assert_mem_eq(dz0, dz1, sizeof dz0);
        if (round == 1) nanosleep(&(struct timespec){0, 5000000}, NULL); /* past the worker's spin */
    }
    /* another batch prepared: looked up again */
    ck_assert_int_eq(nf_dep_batch_prepare(d, &u, other, B), NF_OK);
    kin_scores(d, u, idx, B, P, z, t1, dz1);
    ck_assert_mem_eq(t0, t1, sizeof t0);
    ck_assert_mem_eq(dz0, dz1, sizeof dz0);
    /* prepared at one lambda, scored at another: the cache rebuilt and read for that one */
    nf_blas_set_threads(1);
    kin_scores(d, u2, idx, B, P, z, t0, dz0);
    nf_blas_set_threads(2);
    ck_assert_int_eq(nf_dep_batch_prepare(d, &u, idx, B), NF_OK);
    kin_scores(d, u2, idx, B, P, z, t1, dz1);
    ck_assert_mem_eq(t0, t1, sizeof t0);
    ck_assert_mem_eq(dz0, dz1, sizeof dz0);
    /* a bad batch: nothing posted, the log-density says what is wrong */
    size_t twice[B];
    memcpy(twice, idx, sizeof twice);
    twice[B - 1] = twice[0];
    ck_assert_int_eq(nf_dep_batch_prepare(d, &u, twice, B), NF_OK);
    ck_assert_int_eq(nf_dep_batch_log_prob(d, &u, t1, z, twice, B, P), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "twice"));
    /* freed with a job outstanding */
    ck_assert_int_eq(nf_dep_batch_prepare(d, &u, other, B), NF_OK);
    nf_dep_free(d);
    nf_blas_set_threads(1);
    free(K);
}
END_TEST

START_TEST(test_kinship_errors)
{
    size_t n = 6;
    double *K = kinship_matrix(n, 4, 51);
    expect_kinship_error(K, 6, 5, 6, "square");
    expect_kinship_error(K, 6, 6, 7, "there are 7 points");
    double keep = K[1 * n + 4];
    K[1 * n + 4] += 0.01;
    expect_kinship_error(K, 6, 6, 6, "not symmetric: entry (1, 4)");
    K[1 * n + 4] = keep;
    /* K - 0.9 I: K has two zero eigenvalues, now -0.9 */
    for (size_t i = 0; i < n; i++) K[i * n + i] -= 0.9;
    expect_kinship_error(K, 6, 6, 6, "not positive semi-definite");
    for (size_t i = 0; i < n; i++) K[i * n + i] += 0.9;
    K[2 * n + 2] = NAN;
    expect_kinship_error(K, 6, 6, 6, "(2, 2) is nan");
    K[2 * n + 2] = 1;
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    double th = 0.5, A[4];
    size_t bad[2] = {1, 6};
    ck_assert_int_eq(nf_dep_precision(d, &th, bad, 2, A, NULL), NF_EINVAL);
    size_t twice[2] = {3, 3};
    ck_assert_int_eq(nf_dep_precision(d, &th, twice, 2, A, NULL), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "twice"));
    nf_dep_free(d);
    free(K);
}
END_TEST

static Suite *dependent_suite(void)
{
    Suite *s = suite_create("dependent");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_equi_against_cholesky);
    tcase_add_loop_test(tc, test_kinship_against_cholesky, 0, 2);
    tcase_add_test(tc, test_best_theta_one);
    tcase_add_test(tc, test_best_theta_blocks);
    tcase_add_test(tc, test_best_theta_pooled);
    tcase_add_test(tc, test_theta_derivatives);
    tcase_add_test(tc, test_joint_log_prob);
    tcase_add_test(tc, test_iid_limits);
    tcase_add_test(tc, test_unbiased);
    tcase_add_test(tc, test_batch_gradients);
    tcase_add_test(tc, test_uniform_dt);
    tcase_add_test(tc, test_eigen_threads);
    tcase_add_test(tc, test_flow_base);
    tcase_add_test(tc, test_lookup_ahead);
    tcase_add_test(tc, test_kinship_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dependent_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
