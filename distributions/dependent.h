/* distributions/dependent.h - dependence between data points: the sample covariance Sigma (n x n) of
 * the latents of a flow trained on dependent data (Kirchler, Lippert, Kloft, ICML 2023), its algebra,
 * and the unbiased minibatch estimator of the joint log-likelihood.
 *
 * The latents Z (n x p) of the n training points are jointly Gaussian, vec(Z) ~ N(0, I_p kron Sigma),
 * with Sigma_ii = 1 (so every point's latent is N(0, I) marginally, the i.i.d. density of a new point):
 *
 *   log p(Z) = -(np/2) log 2pi - (p/2) log det Sigma - 1/2 tr(Z^T A Z),   A = Sigma^-1.
 *
 * Two structures (nf_dep), each with its parameters theta in (0, 1):
 *
 *   equi     block equicorrelation: a group per point; within a block of size m
 *            Sigma_b = (1 - rho) I + rho 11^T,
 *            det Sigma_b = (1 - rho)^(m-1) (1 + (m-1) rho),
 *            A_b = [I - rho / (1 + (m-1) rho) 11^T] / (1 - rho),
 *            one rho shared by every block or one per block (theta = rho);
 *   kinship  Sigma = lambda I + (1 - lambda) K with a known symmetric PSD K = U diag(e) U^T (one
 *            eigendecomposition, LAPACK dsyevd): s_k = lambda + (1 - lambda) e_k,
 *            log det Sigma = sum_k log s_k,  A_ij = sum_k U_ik U_jk / s_k  (theta = lambda).
 *            K's graph (i ~ j when K_ij != 0) falls into connected components, families of
 *            relatives: each has its own eigenpairs (an m x m eigendecomposition per component of
 *            m points, instead of one of n x n), and A_ij = 0 across components.
 *
 * The minibatch estimator: for a batch B of b distinct points drawn uniformly, point i in B gets
 *
 *   t_i = -(p/2) log 2pi - (p/(2n)) log det Sigma
 *         - 1/2 [A_ii |z_i|^2 + ((n-1)/(b-1)) sum_{j in B, j != i} A_ij z_i.z_j],
 *
 * and (n/b) sum_{i in B} t_i is unbiased for log p(Z) (a pair i != j is in B with probability
 * b(b-1)/(n(n-1))).  A flow adds log|det J(x_i)| to t_i.  The parameters are trained through
 * theta = sigmoid(u); nf_dep_batch_backward returns dL/dz (to chain through the flow) and dL/du.
 * A batch of one point has no pair term (then the estimator is biased; trainers use b >= 2).
 *
 * Cost of a batch: equi O(b p) (sums of the batch's latents per block); kinship O(b n p) through
 * the eigenbasis (never forming A: lambda trained by gradient), or, with nf_dep_kinship_cache, O(b^2 p)
 * by looking entries up in the whole A (n^2 memory, n^3 multiply-adds whenever lambda changes: a
 * fixed lambda, or one set between steps by nf_dep_best_theta; with components, only their blocks:
 * sum of m^3 multiply-adds, sum of m^2 entries).  Those lookups are memory latency (b (b + 1) / 2
 * reads at random places of the n x n table; with components, reads only within one, of a table
 * small enough for the caches); with two or more threads nf_dep_batch_prepare starts them on the
 * worker pool before the flow's forward pass.
 *
 * An nf_dep keeps a per-batch workspace (grown when a larger batch arrives): one instance must not
 * be used from two threads at once (the pool's workers it starts excepted, which it waits for).
 * Points are indexed 0..n-1 in the order of the training source.
 */
#ifndef NF_DEPENDENT_H
#define NF_DEPENDENT_H

#include <stddef.h>
#include <stdint.h>

#include "distributions/dist.h"

typedef enum nf_dep_kind { NF_DEP_EQUI = 1, NF_DEP_KINSHIP = 2 } nf_dep_kind;

typedef struct nf_dep {
    nf_dep_kind kind;
    size_t n;               /* points */
    int n_params;           /* entries of theta: equi 1 or n_blocks, kinship 1 */
    /* equi */
    int n_blocks, per_block, pooled; /* pooled: per-block rho by partial pooling (nf_dep_best_theta) */
    int *block;             /* (n) block of each point, 0..n_blocks-1 in order of first appearance */
    size_t *block_size;     /* (n_blocks) */
    /* kinship */
    double *eval;           /* (n) eigenvalues of K, ascending (tiny negative rounding set to 0) */
    double *evec;           /* (n, n) row-major: row i holds U_i., point i in the eigenbasis */
    nf_real *evec_r;        /* the same as nf_real, for nf_gemm */
    /* K's graph (i ~ j when K_ij != 0) in connected components (families of relatives), each with its
     * own eigenpairs: U is block diagonal up to the order of points and columns */
    int n_comp;
    int *comp;              /* (n) component of each point */
    size_t *comp_start;     /* (n_comp + 1) offsets into comp_pts and comp_cols (a component of m points
                             * has m eigenvectors) */
    int *comp_pts;          /* (n) the points of each component, ascending */
    int *comp_cols;         /* (n) the columns of U (eigenvectors) of each component */
    int *comp_last;         /* (n_comp) -1 between calls: the batch's group of each component (kin_pairs) */
    int *group_pos;         /* (n) a batch's positions grouped by component */
    int *group_start;       /* (n + 1) the groups' offsets into group_pos */
    int *pair_ij;           /* a batch's pairs j < i within one component (2 per pair), */
    double *pair_a;         /* their A_ij, and A_ii of each position (the first b entries) */
    size_t cap_pairs, n_pairs;
    double ld_lam, ld, ld_dlam;  /* kinship: log det Sigma and its derivative at lambda ld_lam (NAN: none) */
    /* per-batch workspace (internal) */
    int cap_b;
    size_t cap_w;
    double *A, *dA;         /* (b, b) precision entries of the batch and d/dtheta of each */
    int *blk;               /* (b) equi: the batch's blocks */
    unsigned char *seen;    /* (n) zero between calls: marks a batch's points while checking them */
    double *es;             /* equi batches: block sums (2, n_blocks, p) */
    size_t cap_es;
    int equi_b;
    double *theta, *dtheta; /* (n_params) */
    nf_real *M, *W;         /* (b, b) product of the eigenbasis block, (2, b, n) rows of U */
    double *kd;             /* kinship batches: weights (2, n), products (2, n, p), (2, b, p), (2, b) */
    size_t cap_kd;
    double *kpart;          /* kinship gathers on several threads: each further part's own sums (n, p) */
    size_t cap_kpart;
    double kin_lam;         /* lambda of the weights in kd */
    int kin_b;
    int use_cache;          /* kinship: look precisions up in the whole A (nf_dep_kinship_cache) */
    nf_real *Acache;        /* (n, n) A at cache_lam: only the lower triangle (j <= i) is set */
    double cache_lam;
    struct nf_dep_ahead *ahead; /* kinship cache: a batch's lookups on the pool (nf_dep_batch_prepare) */
    int no_ahead;           /* 1: nf_dep_batch_prepare does nothing (nf_dep_lookahead) */
} nf_dep;

/* Block equicorrelation from a group id per point (any int64 values; equal ids share a block).
 * per_block: one rho shared (0), one per block by maximum likelihood (1), or one per block by
 * partial pooling (2: see nf_dep_best_theta). */
int nf_dep_equi_create(nf_dep **out, const int64_t *group, size_t n, int per_block);
/* Kinship mixture from K (rows x cols, row-major) for n points: an error unless K is n x n,
 * finite, symmetric (to 1e-9 relative) and positive semi-definite (smallest eigenvalue at least
 * -1e-8 relative to the largest). */
int nf_dep_kinship_create(nf_dep **out, const double *K, size_t rows, size_t cols, size_t n);
void nf_dep_free(nf_dep *d);    /* NULL is harmless */
/* Kinship: the number of connected components of K's graph (families of relatives; 1 when every
 * point is related to every other through some chain), and the size of the largest (may be NULL). */
int nf_dep_families(const nf_dep *d, size_t *largest);

/* Kinship with a fixed lambda: keep the whole A (n x n, rebuilt by one n^3 product whenever lambda
 * changes), so a batch costs O(b^2 p) like equi instead of O(b n p) through the eigenbasis.  For
 * n <= NF_DEP_CACHE_MAX; on = 0 frees it.  (A lambda trained by gradient changes every step: leave it
 * off; one set now and then by nf_dep_best_theta pays a rebuild per change.) */
#define NF_DEP_CACHE_MAX 16384
int nf_dep_kinship_cache(nf_dep *d, int on);
/* Which entry of theta point i's precision row depends on (equi per block: its block; else 0). */
int nf_dep_param_of(const nf_dep *d, size_t i);
/* log det Sigma(theta); dlogdet (n_params, may be NULL) WRITTEN with d log det / d theta. */
double nf_dep_log_det(const nf_dep *d, const double *theta, double *dlogdet);
/* A_ij and dA_ij / dtheta_{param_of(i)} for every pair of the points idx[0..b-1] (row-major b x b;
 * dA may be NULL); zero across equi blocks. */
int nf_dep_precision(nf_dep *d, const double *theta, const size_t *idx, int b, double *A, double *dA);
/* The alternating update of learned parameters: theta (n_params; per-block rho: read as the start)
 * WRITTEN with the maximiser in [1e-4, 1 - 1e-4] of the exact joint of the latents Z (n x p) of all
 * points with a shift and a scale per latent dimension profiled out,
 *   max over c_j, a_j > 0 of  log p_theta((Z - 1 c^T) diag(a)) + n sum_j log a_j
 *   = const - (p/2) log det Sigma(theta) - (n/2) sum_j log e_j(theta),
 *   e_j = z_j^T A z_j - (1^T A z_j)^2 / 1^T A 1
 * (c_j the generalised least-squares mean, a_j^2 = n / e_j).  The flow's log-determinants do not
 * depend on theta, so with the flow held fixed this is an exact maximisation over theta and the
 * latents' offset and scale (left for the flow to take up in the following steps): theta goes to
 * where the joint optimum lies instead of creeping along the ridge between theta and the scale, and
 * a flow able to shift and rescale its output is at a joint stationary point exactly when the update
 * leaves theta in place.
 * Kinship: O(n^2 p) for the rotation U^T Z, then O(n p) per trial lambda; equi: O(n p) for the
 * block sums, then O(blocks p) per trial of a shared rho, and per-block rho by at most `sweeps` sweeps
 * of coordinate ascent over the blocks (O(p) per trial; from the given rho, ending at a coordinate-wise
 * maximum when the sweeps suffice).  Each 1-D maximisation: a grid in logit(theta), then golden
 * sections.  Pooled per-block rho (per_block 2) then replaces each block's maximiser by its posterior
 * median under a normal prior on logit(rho) whose mean and spread are fitted to all blocks by their
 * marginal likelihood (empirical Bayes, by EM on a grid; each block's likelihood is the profile above
 * with the other blocks held): a block of a few points says little about its rho, and its maximiser
 * scatters widely; pooled, it leans toward what the other blocks say (dependent-sign, ten seeds:
 * mean error of blocks of ten or more points 0.043 against 0.054 unpooled, bench/RESULTS.md). */
int nf_dep_best_theta(const nf_dep *d, const nf_real *Z, int p, double *theta, int sweeps);
/* Pooled per-block rho with the maximisers kept apart: the coordinate ascent starts from ml (read)
 * and leaves its maximisers there, theta gets the pooled rho, and prior (2) the prior's (mu, s) on
 * logit rho, whose EM starts there when s > 0 (prior may be NULL).  A trainer that keeps ml and prior
 * between its updates starts each where the last one ended: from pooled values the ascent would
 * spend its sweeps again (nf_dep_best_theta on a pooled structure starts from theta). */
int nf_dep_best_theta_pooled(const nf_dep *d, const nf_real *Z, int p, double *ml, double *theta, double *prior,
                             int sweeps);
/* The full joint log p(Z) of the latents Z (n x p) of all points (no log|det J|): O(n p) for equi,
 * O(n^2 p) for kinship (through the rotated latents U^T Z). */
int nf_dep_joint_log_prob(const nf_dep *d, const double *theta, const nf_real *Z, int p, double *logp);

/* theta = sigmoid(u) for the n_params entries of u. */
void nf_dep_theta(const nf_dep *d, const nf_real *u, double *theta);
/* The batch idx[0..b) is about to be scored with parameters u (as nf_dep_batch_log_prob): with the
 * kinship cache and two or more threads (nf_blas_get_threads()), the worker pool starts reading the
 * batch's precision entries now, so that they are ready when the latents are (the flow's forward pass
 * runs meanwhile); the next nf_dep_batch_log_prob of the same points uses them.  Otherwise, or if the
 * batch is not a valid one (the log-density reports it), nothing happens.  The results are the same
 * bits either way. */
int nf_dep_batch_prepare(nf_dep *d, const nf_real *u, const size_t *idx, int b);
/* Whether nf_dep_batch_prepare starts the lookups ahead (on, the default) or leaves them to the
 * log-density (off: for comparing the two, bench/bench_dependent.c). */
void nf_dep_lookahead(nf_dep *d, int on);
/* The estimator's terms t_i (above) for the batch of points idx (b distinct, each < n) with latents
 * z (b x p), parameters u (n_params, unconstrained): WRITES t (b). */
int nf_dep_batch_log_prob(nf_dep *d, const nf_real *u, nf_real *t, const nf_real *z, const size_t *idx, int b,
                          int p);
/* After nf_dep_batch_log_prob on the same batch: given dL/dt (b), ACCUMULATE dz (b x p) and du
 * (n_params), either may be NULL.
 *   dz_i = -dt_i A_ii z_i - (c/2) sum_{j != i} (dt_i + dt_j) A_ij z_j,   c = (n-1)/(b-1)
 *   du_k = sigmoid'(u_k) [ -(p/(2n)) (sum_i dt_i) dlogdet/dtheta_k
 *          - 1/2 sum_{i: param_of(i) = k} dt_i (dA_ii |z_i|^2 + c sum_{j != i} dA_ij z_i.z_j) ] */
int nf_dep_batch_backward(nf_dep *d, const nf_real *u, nf_real *dz, nf_real *du, const nf_real *dt,
                          const nf_real *z, const size_t *idx, int b, int p);

/* ---- as a flow's base ---------------------------------------------------------------------------
 * nf_dist_dependent: a base of p dimensions whose log_prob with the rows' indices is the estimator's
 * t_i and without them (idx NULL: new points) the marginal N(0, I); sample draws the marginal.  Its
 * parameters u ("<name>.theta", n_params entries from option params=K, default 1, starting at
 * u = init, option init=X, default 0) live in the model's parameter store P (learn=1, the default:
 * trained by gradient) or in its state store S (learn=0: held fixed; learn=2: set by the model
 * between steps, see nf_dist_dependent_latents); the structure is attached after creation (not
 * owned) with nf_dist_dependent_attach, and must have the same number of parameters.
 * Not in nf_dist_types[]: a model kind puts it under a flow (training/model_dependent.h). */
extern const nf_dist_type nf_dist_dependent;
int nf_dist_dependent_attach(nf_dist *base, nf_dep *dep);
/* A dependent base's parameters: how many, their unconstrained values u (in P or S; may be NULL),
 * and whether they are trained. */
int nf_dist_dependent_params(const nf_dist *base, int *n_params, nf_real **u, int *learned);
/* A base with learn=2 keeps, in S, the latest latent of each of its points=N training points (rows
 * idx_i of a batch's log_prob): *z (points x p); *complete = 1 once every point has been in a batch
 * (until then some rows of *z are zeros; a flag per point in S "<name>.seen"). */
int nf_dist_dependent_latents(const nf_dist *base, nf_real **z, int *complete);
/* Copy every later log_prob's latents z (n x p) into `z` (NULL: stop); the caller sizes it. */
int nf_dist_dependent_capture(nf_dist *base, nf_real *z);

#endif
