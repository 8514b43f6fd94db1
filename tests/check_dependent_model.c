/* tests/check_dependent_model.c - the "dependent" model kind (training/model_dependent.h): the loss's
 * gradient through the store against finite differences (flow and rho), the model's loss averaged over
 * every batch of a small data set equals its joint log-likelihood (nf_model_dependent_joint), eval is the
 * marginal flow density, the trainer recovers a known rho from block-correlated data and a known lambda
 * from kinship-correlated data (alternating updates on their schedule), save / open /
 * attach round trip, the errors (a base other than normal, a structure that does not fit), and nf data
 * make's kinship sets (their K and the lambda of their inputs). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "datasets/dependent_data.h"
#include "training/model_dependent.h"
#include "training/model_file.h"
#include "training/trainer.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL 1e-9
#else
#define TOL 2e-4
#endif

#define SPEC "affine-coupling(hidden=8), lu, affine-coupling(hidden=8)"

static const int64_t groups[] = {42, 7, 42, -3, 7, 42, 100, 7, 42, -3, 5, 42};
#define NG ((size_t)(sizeof groups / sizeof groups[0]))

static nf_model *small_model(int per_block, double theta0, int learn)
{
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, per_block), NF_OK);
    nf_model *m;
    ck_assert_msg(nf_model_dependent_create(&m, SPEC, 2, 0, 9, d, theta0, learn, 0) == NF_OK, "%s", nf_strerror_last());
    /* move the flow off its initial (near identity) parameters */
    for (size_t k = 0; k < m->P->n; k++) m->P->value[k] += (nf_real)(0.05 * sin(1.3 * k + 0.2));
    return m;
}

static double loss_of(nf_model *m, const nf_batch *b)
{
    double l;
    ck_assert_int_eq(m->type->loss(m, b, NULL, &l), NF_OK);
    return l;
}

START_TEST(test_loss_gradient)
{
#ifndef NF_DOUBLE
    return; /* finite differences need the double build */
#endif
    nf_model *m = small_model(1, 0.35, 1);
    nf_real x[7 * 2];
    size_t idx[7] = {11, 0, 4, 2, 9, 3, 1};
    nf_test_fill_normal(x, 14, 1.0, 4);
    nf_batch b = {.n = 7, .idx = idx, .dim = 2, .x = x};
    nf_params_zero_grad(m->P);
    loss_of(m, &b);
    nf_real *g = malloc(m->P->n * sizeof *g);
    memcpy(g, m->P->grad, m->P->n * sizeof *g);
    const double h = 1e-6;
    for (size_t k = 0; k < m->P->n; k++) {
        nf_real keep = m->P->value[k];
        m->P->value[k] = keep + h;
        double lp = loss_of(m, &b);
        m->P->value[k] = keep - h;
        double lm = loss_of(m, &b);
        m->P->value[k] = keep;
        double fd = (lp - lm) / (2 * h);
        ck_assert_msg(nf_test_relerr(g[k], fd, 1e-2) < 1e-5, "dloss/dP[%zu] (%s) = %g, fd %g", k,
                      k + 5 >= m->P->n ? "rho" : "flow", (double)g[k], fd);
    }
    free(g);
    nf_model_free(m);
}
END_TEST

/* mean over every batch of size b of -n * loss = the joint log-likelihood of all rows */
START_TEST(test_loss_unbiased_for_joint)
{
    nf_model *m = small_model(1, 0.6, 1);
    nf_real x[NG * 2];
    nf_test_fill_normal(x, NG * 2, 1.2, 8);
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, NG, 2, 0), NF_OK);
    double joint, iid;
    ck_assert_int_eq(nf_model_dependent_joint(m, src, &joint, &iid), NF_OK);
    const int B = 3;
    int pos[3] = {0, 1, 2};
    size_t idx[3];
    nf_batch bt = {0};
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    long count = 0;
    for (;;) {
        for (int i = 0; i < B; i++) idx[i] = (size_t)pos[(i + 1) % B];
        ck_assert_int_eq(nf_source_fetch(src, idx, B, &bt), NF_OK);
        nf_params_zero_grad(m->P);
        double v = -(double)NG * loss_of(m, &bt);
        sum += v, lo = fmin(lo, v), hi = fmax(hi, v);
        count++;
        int k = B - 1;
        while (k >= 0 && pos[k] == (int)NG - B + k) k--;
        if (k < 0) break;
        pos[k]++;
        for (int j = k + 1; j < B; j++) pos[j] = pos[j - 1] + 1;
    }
    ck_assert_int_eq(count, 220);
    ck_assert_msg(nf_test_relerr(sum / count, joint, 1.0) < TOL * 10, "mean %.12g, joint %.12g", sum / count, joint);
    ck_assert(hi - lo > 1); /* the batches differ: the check is not vacuous */
    /* the i.i.d. sum is the marginal flow density: eval's values */
    double mean, se;
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 5, NULL, &mean, &se, NULL), NF_OK);
    ck_assert_msg(nf_test_relerr(mean * NG, iid, 1.0) < TOL * 10, "eval %g, iid %g", mean * NG, iid);
    ck_assert(fabs(iid - joint) > 1e-3);
    nf_batch_free(&bt);
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* Train m on the rows x (n x 2): batch 100, `steps` steps, Adam 2e-2, cosine over the steps or
 * constant. */
static void train_rows(nf_model *m, const nf_real *x, size_t n, int steps, int cosine)
{
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, n, 2, 0), NF_OK);
    ck_assert_int_eq(m->type->init_data(m, src), NF_OK);
    nf_train_config c;
    nf_train_config_init(&c);
    c.batch = 100;
    c.max_steps = steps;
    c.seed = 5;
    c.optim.lr = 2e-2;
    nf_schedule_init(&c.schedule, cosine ? NF_SCHED_COSINE : NF_SCHED_CONSTANT, 2e-2);
    c.schedule.total = steps;
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, src, NULL), NF_OK);
    ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_trainer_free(t);
    nf_source_free(src);
}

/* Train m on the rows x (n x 2): 1500 steps, cosine; its (first) rho or lambda. */
static double fit_theta(nf_model *m, const nf_real *x, size_t n)
{
    train_rows(m, x, n, 1500, 1);
    double theta;
    ck_assert_int_eq(nf_model_dependent_describe(m, NULL, NULL, NULL, NULL, &theta, 1), NF_OK);
    return theta;
}

/* The exact maximum-likelihood rho of rows x (n x 2) under an affine flow (what "actnorm, lu" can
 * be): with the map and the offset profiled out, the joint is, up to a constant,
 *   -(n/2) log det M(rho) - (p/2) log det Sigma(rho),  M = X^T A X - (X^T A 1)(1^T A X) / 1^T A 1,
 * each quadratic form from a one-column nf_dep_joint_log_prob (polarisation for the cross terms);
 * scanned in steps of 1e-3. */
static double quad(const nf_dep *d, double rho, const nf_real *v, double ld)
{
    double jl;
    ck_assert_int_eq(nf_dep_joint_log_prob(d, &rho, v, 1, &jl), NF_OK);
    return -2 * (jl + 0.5 * (double)d->n * log(2 * 3.14159265358979323846) + 0.5 * ld);
}

static double affine_mle_rho(const nf_dep *d, const nf_real *x)
{
    size_t n = d->n;
    nf_real *v = malloc(3 * n * sizeof *v), *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++) v[i] = x[2 * i], v[n + i] = x[2 * i + 1], v[2 * n + i] = 1;
    double best = -INFINITY, best_at = 0;
    for (int g = 1; g < 1000; g++) {
        double rho = g * 1e-3, ld = nf_dep_log_det(d, &rho, NULL), q[3][3];
        for (int a = 0; a < 3; a++) q[a][a] = quad(d, rho, v + a * n, ld);
        for (int a = 0; a < 3; a++)
            for (int b = a + 1; b < 3; b++) {
                for (size_t i = 0; i < n; i++) w[i] = v[a * n + i] + v[b * n + i];
                q[a][b] = q[b][a] = 0.5 * (quad(d, rho, w, ld) - q[a][a] - q[b][b]);
            }
        double m00 = q[0][0] - q[0][2] * q[0][2] / q[2][2], m11 = q[1][1] - q[1][2] * q[1][2] / q[2][2];
        double m01 = q[0][1] - q[0][2] * q[1][2] / q[2][2];
        double f = -0.5 * (double)n * log(m00 * m11 - m01 * m01) - ld;
        if (f > best) best = f, best_at = rho;
    }
    free(v), free(w);
    return best_at;
}

/* Rows x (n x 2, n = nb * m) = L z + mu with z block-equicorrelated: nb blocks of m rows (interleaved
 * across the rows, group ids 1000 + block), one rho. */
static void equi_rows(int nb, int m, double rho, int64_t **grp_out, nf_real **x_out)
{
    const int n = nb * m;
    int64_t *grp = malloc(n * sizeof *grp);
    nf_real *x = malloc((size_t)n * 2 * sizeof *x), *g = malloc((size_t)nb * 2 * sizeof *g);
    nf_real *e = malloc((size_t)n * 2 * sizeof *e);
    nf_test_fill_normal(g, (size_t)nb * 2, 1.0, 21);
    nf_test_fill_normal(e, (size_t)n * 2, 1.0, 22);
    for (int i = 0; i < n; i++) {
        int c = (i * 7) % nb; /* blocks interleaved across the rows */
        grp[i] = 1000 + c;
        double z0 = sqrt(rho) * g[2 * c] + sqrt(1 - rho) * e[2 * i];
        double z1 = sqrt(rho) * g[2 * c + 1] + sqrt(1 - rho) * e[2 * i + 1];
        x[2 * i] = (nf_real)(1.7 * z0 + 0.4);
        x[2 * i + 1] = (nf_real)(0.6 * z0 + 0.8 * z1 - 1.1);
    }
    free(g), free(e);
    *grp_out = grp, *x_out = x;
}

/* Rows x = L z + mu with z block-equicorrelated (40 blocks of 25, rho = 0.7): the trainer learns rho,
 * by gradient with the flow (_i = 0) and by alternating updates every 100 steps (_i = 1, as nf fit
 * does), near the generating rho and, the updates, at the exact maximum-likelihood rho of the affine
 * flow (0.730 on these rows; by gradient 0.721 in 1500 steps). */
START_TEST(test_recovers_rho)
{
    const int every = _i ? 100 : 0;
    const int nb = 40, n = nb * 25;
    const double rho = 0.7;
    int64_t *grp;
    nf_real *x;
    equi_rows(nb, 25, rho, &grp, &x);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, grp, (size_t)n, 0), NF_OK);
    nf_model *m;
    ck_assert_int_eq(nf_model_dependent_create(&m, "actnorm, lu", 2, 0, 3, d, 0.2, 1, every), NF_OK);
    double theta = fit_theta(m, x, (size_t)n);
    if (getenv("NF_TEST_VERBOSE")) fprintf(stderr, "learned rho %g (true %g), updates %d\n", theta, rho, every);
    ck_assert_msg(fabs(theta - rho) < 0.08, "learned rho %g (true %g), updates %d", theta, rho, every);
    if (every) {
        const nf_param_slice *sl = nf_params_find(m->S, "dependence.update_schedule");
        ck_assert_ptr_nonnull(sl);
        ck_assert_msg(m->S->value[sl->offset] == 1500 && m->S->value[sl->offset + 1] == 1600,
                      "steps %g, next update %g (expected 1500, 1600)", (double)m->S->value[sl->offset],
                      (double)m->S->value[sl->offset + 1]);
        nf_dep *d2;
        ck_assert_int_eq(nf_dep_equi_create(&d2, grp, (size_t)n, 0), NF_OK);
        double mle = affine_mle_rho(d2, x);
        if (getenv("NF_TEST_VERBOSE")) fprintf(stderr, "maximum-likelihood rho %g\n", mle);
        ck_assert_msg(fabs(theta - mle) < 0.01, "learned rho %g, maximum-likelihood rho %g", theta, mle);
        nf_dep_free(d2);
    }
    nf_model_free(m);
    free(grp), free(x);
}
END_TEST

/* A run ends with theta set for the final flow's own latents of all rows (the trainer's train_end
 * hook), not for the latents cached in the steps before the last update: per-block rho, a constant
 * learning rate (the flow still moving), and 1550 steps, so that 50 steps follow the last update. */
START_TEST(test_final_theta)
{
    const int nb = 40, n = nb * 25;
    int64_t *grp;
    nf_real *x;
    equi_rows(nb, 25, 0.7, &grp, &x);
    nf_dep *d, *d2;
    ck_assert_int_eq(nf_dep_equi_create(&d, grp, (size_t)n, 1), NF_OK);
    ck_assert_int_eq(nf_dep_equi_create(&d2, grp, (size_t)n, 1), NF_OK);
    nf_model *m;
    ck_assert_int_eq(nf_model_dependent_create(&m, "actnorm, lu, affine-coupling(hidden=8)", 2, 0, 3, d, 0.2, 1, 100),
                     NF_OK);
    train_rows(m, x, (size_t)n, 1550, 0);
    double theta[40], fresh[40];
    ck_assert_int_eq(nf_model_dependent_describe(m, NULL, NULL, NULL, NULL, theta, nb), NF_OK);
    nf_real *z = malloc((size_t)n * 2 * sizeof *z), *lp = malloc((size_t)n * sizeof *lp);
    ck_assert_int_eq(nf_flow_log_prob(m->flow, lp, x, NULL, NULL, n), NF_OK);
    ck_assert_int_eq(nf_flow_last_latent(m->flow, z), NF_OK);
    memcpy(fresh, theta, sizeof fresh);
    ck_assert_int_eq(nf_dep_best_theta(d2, z, 2, fresh, 20), NF_OK);
    double worst = 0;
    for (int k = 0; k < nb; k++) worst = fmax(worst, fabs(theta[k] - fresh[k]));
    if (getenv("NF_TEST_VERBOSE")) fprintf(stderr, "final rho against the best for the final latents: %g\n", worst);
    /* 20 more sweeps of the coordinate ascent (blocks coupled through the profiled scale) move it by
     * about 1e-4; without the hook it is 0.03 off */
    ck_assert_msg(worst < 2e-3, "final rho off the best for the final latents by %g", worst);
    free(z), free(lp);
    nf_model_free(m);
    nf_dep_free(d2);
    free(grp), free(x);
}
END_TEST

/* L = the lower Cholesky factor of S (n x n; L and S distinct). */
static void cholesky_lower(double *L, const double *S, size_t n)
{
    memset(L, 0, n * n * sizeof *L);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double v = S[i * n + j];
            for (size_t k = 0; k < j; k++) v -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = i == j ? sqrt(v) : v / L[j * n + j];
        }
}

/* n rows x = M z + mu with z ~ N(0, I_2 kron Sigma), Sigma = lambda I + (1 - lambda) K, K = B B^T
 * (rank r) with unit diagonal: one connected component.  *K_out (n x n) and *x_out (n x 2) are new. */
static void kinship_rows(size_t n, size_t r, double lambda, double **K_out, nf_real **x_out)
{
    nf_real *B = malloc(n * r * sizeof *B), *e = malloc(n * 2 * sizeof *e), *x = malloc(n * 2 * sizeof *x);
    double *K = malloc(n * n * sizeof *K), *L = calloc(n * n, sizeof *L);
    nf_test_fill_normal(B, n * r, 1.0, 31);
    nf_test_fill_normal(e, n * 2, 1.0, 32);
    for (size_t i = 0; i < n; i++) /* K = B B^T with unit diagonal (rank r) */
        for (size_t j = 0; j < n; j++) {
            double v = 0;
            for (size_t k = 0; k < r; k++) v += (double)B[i * r + k] * B[j * r + k];
            K[i * n + j] = v;
        }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) L[i * n + j] = K[i * n + j] / sqrt(K[i * n + i] * K[j * n + j]);
    memcpy(K, L, n * n * sizeof *K);
    for (size_t k = 0; k < n * n; k++) L[k] = (1 - lambda) * K[k] + (k % (n + 1) == 0 ? lambda : 0); /* Sigma */
    double *S = L;
    L = malloc(n * n * sizeof *L);
    cholesky_lower(L, S, n);
    free(S);
    for (size_t i = 0; i < n; i++) {
        double z0 = 0, z1 = 0;
        for (size_t k = 0; k <= i; k++) z0 += L[i * n + k] * e[2 * k], z1 += L[i * n + k] * e[2 * k + 1];
        x[2 * i] = (nf_real)(1.3 * z0 - 0.7);
        x[2 * i + 1] = (nf_real)(0.5 * z0 + 0.9 * z1 + 2.0);
    }
    free(B), free(e), free(L);
    *K_out = K;
    *x_out = x;
}

/* The trainer's alternating updates recover lambda (0.5) at the scheduled steps 100, 200, 400 and 800
 * of 1500. */
START_TEST(test_recovers_lambda)
{
    const size_t n = 300;
    const double lambda = 0.5;
    double *K;
    nf_real *x;
    kinship_rows(n, 40, lambda, &K, &x);
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    nf_model *m;
    ck_assert_int_eq(nf_model_dependent_create(&m, "actnorm, lu", 2, 0, 3, d, 0.2, 1, NF_DEP_UPDATE_DOUBLING), NF_OK);
    ck_assert_int_eq(nf_model_dependent_update_every(m), NF_DEP_UPDATE_DOUBLING);
    nf_real *u;
    int learned;
    ck_assert_int_eq(nf_dist_dependent_params(&m->flow->base, NULL, &u, &learned), NF_OK);
    ck_assert_int_eq(learned, 2); /* set between steps, not by gradient */
    double theta = fit_theta(m, x, n);
    if (getenv("NF_TEST_VERBOSE")) fprintf(stderr, "learned lambda %g (true %g)\n", theta, lambda);
    ck_assert_msg(fabs(theta - lambda) < 0.08, "learned lambda %g (true %g)", theta, lambda);
    const nf_param_slice *sl = nf_params_find(m->S, "dependence.update_schedule");
    ck_assert_ptr_nonnull(sl);
    ck_assert_msg(m->S->value[sl->offset] == 1500 && m->S->value[sl->offset + 1] == 1600,
                  "steps %g, next update %g (expected 1500, 1600)", (double)m->S->value[sl->offset],
                  (double)m->S->value[sl->offset + 1]);
    nf_model_free(m);
    free(x), free(K);
}
END_TEST

/* A learned lambda on one component (deferred_table in model_dependent.c): until the third update's step
 * (here 30 of updates every 10) the batches go through the eigenbasis and no n x n table exists; from
 * then on they read the table, built at that update's lambda.  A fixed lambda reads the table from the
 * first step. */
START_TEST(test_deferred_table)
{
    const size_t n = 200;
    double *K;
    nf_real *x;
    kinship_rows(n, 30, 0.5, &K, &x);
    for (int steps = 25; steps <= 60; steps += 35) {
        nf_dep *d;
        ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
        ck_assert_int_eq(d->n_comp, 1);
        nf_model *m;
        ck_assert_int_eq(nf_model_dependent_create(&m, "actnorm, lu", 2, 0, 3, d, 0.2, 1, 10), NF_OK);
        ck_assert_int_eq(d->use_cache, 0);
        train_rows(m, x, n, steps, 0);
        double theta;
        ck_assert_int_eq(nf_model_dependent_describe(m, NULL, NULL, NULL, NULL, &theta, 1), NF_OK);
        if (steps < 30) { /* (lambda set by the updates at steps 10 and 20, and once more at the end) */
            ck_assert_msg(!d->use_cache && !d->Acache, "a table before the third update (%d steps)", steps);
            ck_assert_msg(fabs(theta - 0.2) > 0.05, "lambda %g: not updated from 0.2 in %d steps", theta, steps);
        } else {
            ck_assert_msg(d->use_cache && d->Acache, "no table after %d steps", steps);
        }
        nf_model_free(m);
    }
    nf_dep *d;
    ck_assert_int_eq(nf_dep_kinship_create(&d, K, n, n, n), NF_OK);
    nf_model *m;
    ck_assert_int_eq(nf_model_dependent_create(&m, "actnorm, lu", 2, 0, 3, d, 0.5, 0, 0), NF_OK);
    ck_assert_int_eq(d->use_cache, 1);
    nf_model_free(m);
    free(x), free(K);
}
END_TEST

/* nf data make's kinship sets (datasets/dependent_data.h), families (_i = 0) and pedigree (_i = 1).
 * Their K: the upper triangle well formed (unit diagonal, entries in (0, 1), each pair once), families
 * contiguous blocks holding every pair of their members at one kappa in [0.5, 0.99] and nothing
 * across blocks, and K accepted by nf_dep_kinship_create (symmetric, positive semi-definite).  Their
 * inputs g (recovered from x): with Sigma = lambda I + (1 - lambda) K from the K written beside them,
 * each column's g^T Sigma^-1 g is chi-square with n degrees of freedom, so over R data sets the mean
 * of g^T Sigma^-1 g / n is 1 within a few sqrt(2 / (2 n R)) (0.005 here); inputs without the
 * correlation (g i.i.d.) would give tr(Sigma^-1) / n instead: 1.50 for these families, 1.22 for
 * these pedigrees. */
static void kinship_set(nf_dep_data *D, int pedigree, size_t n, double lambda, uint64_t seed, double *K, nf_real *Z)
{
    nf_rng *rng = nf_rng_alloc(seed, 1);
    ck_assert_int_eq(nf_dep_data_make(D, "sign", NF_DEP_KINSHIP, pedigree ? NF_DEP_PEDIGREE : NF_DEP_FAMILIES, n,
                                      lambda, rng),
                     NF_OK);
    nf_rng_free(rng);
    memset(K, 0, n * n * sizeof *K);
    size_t diag = 0;
    for (size_t q = 0; q < D->nnz; q++) {
        int64_t i = D->row[q], j = D->col[q];
        ck_assert_msg(i >= 0 && i <= j && j < (int64_t)n, "triplet %zu at (%lld, %lld)", q, (long long)i, (long long)j);
        ck_assert_msg(K[i * n + j] == 0, "(%lld, %lld) twice", (long long)i, (long long)j);
        K[i * n + j] = K[j * n + i] = D->val[q];
        if (i == j) diag++;
        ck_assert(i == j ? fabs(D->val[q] - 1) < 1e-12 : D->val[q] > 0 && D->val[q] < 1);
    }
    ck_assert_uint_eq(diag, n);
    for (size_t i = 0; i < n; i++) { /* sign: x1 = g1, x2 = sign(x1) + x1 + e^-1.5 g2 */
        double x1 = D->x[2 * i];
        Z[2 * i] = (nf_real)x1;
        Z[2 * i + 1] = (nf_real)((D->x[2 * i + 1] - ((x1 > 0) - (x1 < 0)) - x1) / exp(-1.5));
    }
}

START_TEST(test_data_kinship)
{
    const double lambda = 0.5;
    size_t n = 400;
    double *K = malloc(n * n * sizeof *K), *S = malloc(n * n * sizeof *S), *L = malloc(n * n * sizeof *L);
    nf_real *Z = malloc(n * 2 * sizeof *Z);
    nf_dep_data D;
    kinship_set(&D, _i, n, lambda, 7, K, Z);
    if (_i == 0) {
        size_t pairs = 0;
        for (size_t a = 0, b; a < n; a = b) {
            for (b = a + 1; b < n && K[b * n + b - 1] != 0; b++) {}
            const double kappa = b > a + 1 ? K[a * n + a + 1] : 0.5;
            ck_assert_msg(kappa >= 0.5 && kappa <= 0.99, "family at %zu: kappa %g", a, kappa);
            for (size_t i = a; i < b; i++)
                for (size_t j = 0; j < n; j++) {
                    double want = i == j ? 1 : j >= a && j < b ? kappa : 0;
                    ck_assert_msg(K[i * n + j] == want, "K(%zu, %zu) = %g (family %zu..%zu: expected %g)", i, j,
                                  K[i * n + j], a, b - 1, want);
                }
            pairs += (b - a) * (b - a + 1) / 2;
        }
        ck_assert_uint_eq(pairs, D.nnz);
    }
    nf_dep *d;
    ck_assert_msg(nf_dep_kinship_create(&d, K, n, n, n) == NF_OK, "%s", nf_strerror_last());
    nf_dep_free(d);
    nf_dep_data_free(&D);
    /* the inputs' covariance, over R small sets */
    enum { R = 1000, NS = 40 };
    n = NS;
    double q = 0, tr = 0;
    for (int r = 0; r < R; r++) {
        kinship_set(&D, _i, n, lambda, 100 + (uint64_t)r, K, Z);
        for (size_t k = 0; k < n * n; k++) S[k] = (1 - lambda) * K[k] + (k % (n + 1) == 0 ? lambda : 0);
        cholesky_lower(L, S, n);
        for (int c = 0; c < 2; c++) { /* |L^-1 g|^2 by forward substitution */
            double y[NS];
            for (size_t i = 0; i < n; i++) {
                double v = (double)Z[2 * i + c];
                for (size_t k = 0; k < i; k++) v -= L[i * n + k] * y[k];
                y[i] = v / L[i * n + i];
                q += y[i] * y[i] / (2.0 * n * R);
            }
        }
        for (size_t i = 0; i < n; i++) { /* tr(Sigma^-1) = |L^-1|_F^2, column by column of the identity */
            double y[NS];
            for (size_t j = i; j < n; j++) {
                double v = i == j;
                for (size_t k = i; k < j; k++) v -= L[j * n + k] * y[k];
                y[j] = v / L[j * n + j];
                tr += y[j] * y[j] / ((double)n * R);
            }
        }
        nf_dep_data_free(&D);
    }
    if (getenv("NF_TEST_VERBOSE"))
        fprintf(stderr, "%s: mean g^T Sigma^-1 g / n %.4f, tr(Sigma^-1) / n %.4f\n", _i ? "pedigree" : "families", q, tr);
    ck_assert_msg(fabs(q - 1) < 0.03, "%s: mean g^T Sigma^-1 g / n = %g (expected 1)", _i ? "pedigree" : "families", q);
    free(K), free(S), free(L), free(Z);
}
END_TEST

START_TEST(test_save_open_attach)
{
    nf_model *m = small_model(1, 0.45, 1);
    nf_real *u;
    ck_assert_int_eq(nf_dist_dependent_params(&m->flow->base, NULL, &u, NULL), NF_OK);
    u[2] = (nf_real)1.385;
    char path[] = "/tmp/nf_check_dependent_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(nf_model_save(path, m, NULL, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *r;
    ck_assert_msg(nf_model_open(path, &r, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(r->type->kind, "dependent");
    nf_dep_kind kind;
    size_t n;
    int np, learned;
    double th[5], th0[5];
    ck_assert_int_eq(nf_model_dependent_describe(r, &kind, &n, &np, &learned, th, 5), NF_OK);
    ck_assert_int_eq(nf_model_dependent_describe(m, NULL, NULL, NULL, NULL, th0, 5), NF_OK);
    ck_assert_int_eq(kind, NF_DEP_EQUI);
    ck_assert_int_eq((int)n, (int)NG);
    ck_assert_int_eq(np, 5);
    ck_assert_int_eq(learned, 1);
    for (int k = 0; k < 5; k++) ck_assert_msg(fabs(th[k] - th0[k]) < 1e-7, "theta %d: %g vs %g", k, th[k], th0[k]);
    ck_assert_ptr_null(nf_model_dependent_structure(r));
    nf_real x[4 * 2];
    size_t idx[4] = {1, 5, 0, 7};
    nf_test_fill_normal(x, 8, 1.0, 6);
    nf_batch b = {.n = 4, .idx = idx, .dim = 2, .x = x};
    double l;
    ck_assert_int_ne(r->type->loss(r, &b, NULL, &l), NF_OK); /* no structure yet */
    nf_dep *wrong;
    ck_assert_int_eq(nf_dep_equi_create(&wrong, groups, NG, 0), NF_OK);
    ck_assert_int_eq(nf_model_dependent_attach(r, wrong), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "5 parameters, this one 1"));
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 1), NF_OK);
    ck_assert_int_eq(nf_model_dependent_attach(r, d), NF_OK);
    double lr = loss_of(r, &b), lm = loss_of(m, &b);
    ck_assert_msg(nf_test_relerr(lr, lm, 1.0) < TOL, "reloaded loss %g, original %g", lr, lm);
    /* nf sample / logprob take the flow: the marginal density */
    nf_flow *f;
    ck_assert_msg(nf_model_load(path, &f, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_real lp[4];
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, 4), NF_OK);
    double v[4];
    nf_model_set_training(m, 0);
    ck_assert_int_eq(m->type->eval(m, &b, NULL, v), NF_OK);
    for (int i = 0; i < 4; i++) ck_assert_msg(nf_test_relerr(lp[i], v[i], 1.0) < TOL, "logprob %d", i);
    nf_flow_free(f);
    nf_model_free(r);
    nf_model_free(m);
    unlink(path);
}
END_TEST

START_TEST(test_errors)
{
    nf_dep *d;
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    nf_model *m = (nf_model *)1;
    ck_assert_int_eq(nf_model_dependent_create(&m, "lu; base=diag-normal", 2, 0, 1, d, 0.5, 1, 0), NF_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "standard normal base"));
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    ck_assert_int_eq(nf_model_dependent_create(&m, "lu", 2, 0, 1, d, 1.0, 1, 0), NF_EINVAL);
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    ck_assert_int_eq(nf_model_dependent_create(&m, "lu", 2, 0, 1, d, 0.5, 1, -7), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "updates every -7 steps"));
    /* training rows that are not the structure's points */
    ck_assert_int_eq(nf_dep_equi_create(&d, groups, NG, 0), NF_OK);
    ck_assert_int_eq(nf_model_dependent_create(&m, "lu", 2, 0, 1, d, 0.5, 0, NF_DEP_UPDATE_DOUBLING), NF_OK);
    ck_assert_int_eq(nf_model_dependent_update_every(m), 0); /* fixed: no updates */
    nf_real x[20];
    nf_test_fill_normal(x, 20, 1.0, 1);
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, 10, 2, 0), NF_OK);
    ck_assert_int_eq(m->type->init_data(m, src), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "10 training rows"));
    double joint;
    ck_assert_int_eq(nf_model_dependent_joint(m, src, &joint, NULL), NF_EINVAL);
    /* a fixed rho lives in the state store: no gradient reaches it */
    ck_assert_ptr_null(nf_params_find(m->P, "base.theta"));
    ck_assert_ptr_nonnull(nf_params_find(m->S, "base.theta"));
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* Structures from files (datasets/dependent_load.h): a dense K and the same K as triplets give the same
 * structure; group ids as doubles; and the file errors. */
START_TEST(test_load_files)
{
    char path[] = "/tmp/nf_check_dep_load_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    enum { N = 5 };
    /* K = tridiagonal with 1 on the diagonal and 0.3 beside it: positive definite */
    double K[N * N] = {0};
    int64_t row[2 * N], col[2 * N];
    double val[2 * N];
    int nt = 0;
    for (int i = 0; i < N; i++) {
        K[i * N + i] = 1;
        row[nt] = i, col[nt] = i, val[nt++] = 1;
        if (i + 1 < N) {
            K[i * N + i + 1] = K[(i + 1) * N + i] = 0.3;
            row[nt] = i + 1, col[nt] = i, val[nt++] = 0.3; /* lower triangle: either half is accepted */
        }
    }
    double groups[N] = {3, 3, 8, 8, 8}, bad_groups[N] = {3, 3.5, 8, 8, 8};
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_create(&f, path, "nf-data", 1), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/K", K, N, N), NF_OK);
    ck_assert_int_eq(nf_h5_group(f, "/S"), NF_OK);
    ck_assert_int_eq(nf_h5_attr_set_int64(f, "/S", "n", N), NF_OK);
    ck_assert_int_eq(nf_h5_write_int64(f, "/S/row", row, (size_t)nt, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_int64(f, "/S/col", col, (size_t)nt, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/S/value", val, (size_t)nt, 0), NF_OK);
    ck_assert_int_eq(nf_h5_group(f, "/R"), NF_OK); /* a pair given twice */
    ck_assert_int_eq(nf_h5_attr_set_int64(f, "/R", "n", N), NF_OK);
    int64_t rr[2] = {1, 2}, rc2[2] = {2, 1};
    double rv[2] = {0.3, 0.3};
    ck_assert_int_eq(nf_h5_write_int64(f, "/R/row", rr, 2, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_int64(f, "/R/col", rc2, 2, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/R/value", rv, 2, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/group", groups, N, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/bad_group", bad_groups, N, 0), NF_OK);
    ck_assert_int_eq(nf_h5_commit(f), NF_OK);

    nf_dep_source s = {.kind = NF_DEP_KINSHIP};
    snprintf(s.path, sizeof s.path, "%s", path);
    nf_dep *dense, *sparse, *d;
    snprintf(s.dataset, sizeof s.dataset, "/K");
    ck_assert_msg(nf_dep_load(&dense, &s, N) == NF_OK, "%s", nf_strerror_last());
    snprintf(s.dataset, sizeof s.dataset, "/S");
    ck_assert_msg(nf_dep_load(&sparse, &s, N) == NF_OK, "%s", nf_strerror_last());
    for (double lam = 0.15; lam < 1; lam += 0.3) {
        double a = nf_dep_log_det(dense, &lam, NULL), b = nf_dep_log_det(sparse, &lam, NULL);
        ck_assert_msg(fabs(a - b) < 1e-12 && a < 0, "log det dense %g, triplets %g", a, b);
    }
    nf_dep_free(dense);
    nf_dep_free(sparse);
    ck_assert_int_eq(nf_dep_load(&d, &s, N + 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "5 x 5 but there are 6 points"));
    snprintf(s.dataset, sizeof s.dataset, "/R");
    ck_assert_int_eq(nf_dep_load(&d, &s, N), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "given twice"));
    snprintf(s.dataset, sizeof s.dataset, "/missing");
    ck_assert_int_eq(nf_dep_load(&d, &s, N), NF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "/missing"));
    s.kind = NF_DEP_EQUI;
    snprintf(s.dataset, sizeof s.dataset, "/group");
    ck_assert_int_eq(nf_dep_load(&d, &s, N), NF_OK);
    ck_assert_int_eq(d->n_blocks, 2);
    ck_assert_int_eq((int)d->block_size[1], 3);
    nf_dep_free(d);
    ck_assert_int_eq(nf_dep_load(&d, &s, N - 1), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "5 group ids but there are 4 rows"));
    snprintf(s.dataset, sizeof s.dataset, "/bad_group");
    ck_assert_int_eq(nf_dep_load(&d, &s, N), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "entry 1 is 3.5"));
    unlink(path);
}
END_TEST

static Suite *dependent_model_suite(void)
{
    Suite *s = suite_create("dependent_model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_loss_gradient);
    tcase_add_test(tc, test_loss_unbiased_for_joint);
    tcase_add_loop_test(tc, test_recovers_rho, 0, 2);
    tcase_add_test(tc, test_final_theta);
    tcase_add_test(tc, test_recovers_lambda);
    tcase_add_test(tc, test_deferred_table);
    tcase_add_loop_test(tc, test_data_kinship, 0, 2);
    tcase_add_test(tc, test_save_open_attach);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_load_files);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dependent_model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
