/* training/model_dependent.h - the "dependent" model kind: a flow fit to rows that are not independent
 * (Kirchler, Lippert, Kloft, ICML 2023).  The latents of the n training rows are jointly Gaussian with
 * a covariance Sigma across rows (block equicorrelation or a kinship mixture, distributions/dependent.h),
 * and every row is N(0, I) marginally.  Training minimises the unbiased minibatch estimator of the
 * joint negative log-likelihood,
 *
 *   loss = -(1/b) sum_{i in B} [t_i + log|det J(x_i)|],   (n/b) sum t_i unbiased for log p_Sigma(Z),
 *
 * with rho (equi) learned jointly through a sigmoid, lambda (kinship) learned by alternating exact
 * updates from the latents of all rows (at steps 100, 200, 400, ...), or either held fixed.  The trainer's
 * batches carry the rows' indices in the training source, which are the structure's point indices:
 * the training source must hold the rows in the structure's order (no split of the dependent data:
 * validate on a separate i.i.d. set).  eval (the trainer's validation, nf eval) is the marginal
 * log-density of a new point, log p(x) = log N(f(x); 0, I) + log|det J(x)|; so are nf logprob and nf
 * sample, which use the flow.  The joint log-likelihood of the training rows is
 * nf_model_dependent_joint.
 *
 * The model file stores the structure's kind, size and parameters (rho / lambda in the store); the
 * structure itself (group ids, the kinship matrix) is data, attached again with
 * nf_model_dependent_attach to resume training or to compute the joint likelihood.
 */
#ifndef NF_MODEL_DEPENDENT_H
#define NF_MODEL_DEPENDENT_H

#include "datasets/dependent_load.h"
#include "distributions/dependent.h"
#include "training/model.h"

extern const nf_model_type nf_model_dependent;

/* A flow (spec, whose base must be the standard normal, the default) on a dependent base for the
 * structure dep (the model takes ownership, also on failure).  theta0 in (0, 1) is the starting rho
 * or lambda of every parameter; learn = 0 holds it fixed.  A learned theta is set between the flow's
 * steps to the maximiser of the joint of all rows' latest latents (model_dependent.c) at steps
 * update_every, 2 update_every, ..., or with NF_DEP_UPDATE_DOUBLING at steps 100, 200, 400, 800, ...;
 * update_every = 0 trains it by gradient with the flow instead.  An update that moves a kinship
 * lambda by at most NF_DEP_UPDATE_TOL keeps the old value (saving a rebuild of the precision), except
 * on a K of one component before the third update, whose batches go through the eigenbasis until then
 * (model_dependent.c deferred_table). */
#define NF_DEP_UPDATE_DOUBLING (-1)
/* 0.02: after its first updates a learned lambda moves by 0.002-0.01 an update (pedigree sets), and on
 * a K of one component each kept move rebuilt the n x n precision (about a second at n = 5,000) for a
 * change the flow barely sees; the final lambda is set exactly for the final flow in any case
 * (dependent_train_end), and the fits' lambda and KL gaps were the same at 5e-3 and 2e-2
 * (bench/RESULTS.md, 2026-12-06). */
#define NF_DEP_UPDATE_TOL 2e-2
/* Per-block rho: the sweeps of coordinate ascent per update (nf_dep_best_theta), each update going on
 * from the last one's rho. */
#define NF_DEP_UPDATE_SWEEPS 3
int nf_model_dependent_create(nf_model **m, const char *spec, int dim, int ctx_dim, uint64_t seed, nf_dep *dep,
                              double theta0, int learn, int update_every);
/* The schedule of those updates: N, NF_DEP_UPDATE_DOUBLING, or 0 (fixed, or learned by gradient). */
int nf_model_dependent_update_every(const nf_model *m);
/* Attach a structure to a loaded model (the model takes ownership, also on failure): it must be of
 * the kind, size and parameter count the model was trained with. */
int nf_model_dependent_attach(nf_model *m, nf_dep *dep);
/* Where the structure comes from (file and dataset, stored in the model file so that a resumed fit
 * or nf eval can load it again); nf_model_dependent_source is an error when it was never set. */
int nf_model_dependent_set_source(nf_model *m, const nf_dep_source *s);
int nf_model_dependent_source(const nf_model *m, nf_dep_source *s);
/* The structure (NULL if none is attached, or m is not of this kind). */
nf_dep *nf_model_dependent_structure(const nf_model *m);
/* The structure's description as stored: kind (NF_DEP_EQUI / NF_DEP_KINSHIP), points, parameters,
 * whether they are learned; and theta (up to max entries written; may be NULL). */
int nf_model_dependent_describe(const nf_model *m, nf_dep_kind *kind, size_t *n, int *n_params, int *learned,
                                double *theta, int max);
/* The joint log-likelihood of the source's rows, in the structure's order (src->n must equal the
 * structure's n): log p_Sigma(Z) + sum_i log|det J(x_i)|, and its i.i.d. counterpart
 * sum_i log p(x_i) (either may be NULL), in evaluation mode. */
int nf_model_dependent_joint(nf_model *m, const nf_source *src, double *joint, double *iid);

#endif
