/* training/model_causal.h - the "causal" model kind: interventional normalizing flows (Melnychuk,
 * Frauen and Feuerriegel, ICML 2023), the density of each potential outcome p(Y[a] = y) from
 * observational (X, A, Y), trained by the one trainer in two stages (formulas in model_causal.c):
 *
 *   stage "nuisance"  a representation R(x), a propensity logit g(x) and a conditional spline flow
 *                     p(y | x, a) on [R(x), a], by outcome NLL + alpha * propensity cross-entropy;
 *   stage "target"    one unconditional flow q_a per arm, by the grid cross-entropy to the
 *                     nuisance's mixture (outcomes of 2 or more columns: the cross-entropy over
 *                     M draws of the nuisance per unit) plus the one-step bias correction (BC),
 *                     with an exponential moving average of its weights used for evaluation and
 *                     sampling.
 *
 * Data: a "rows" source of units whose row is the outcome y and whose context is [x, a]
 * (datasets/causal.h: nf_causal_source).  The two ablations come with every model: stage 2 trains,
 * next to q_a, a second flow per arm on CE alone (no BC), and the plug-in is the mixture of the
 * nuisance conditionals over reference covariates kept from the training data; nf_causal_logp
 * reads any of the three.
 *
 * Cost: stage 2 needs p(y_k | x_i, a) on the whole grid for every unit of a batch (2K nuisance rows
 * per unit; wider outcomes 2M draws).  The nuisance is fixed in that stage, so the values are kept
 * per unit (by its index in the source, checked against its context row and a checksum of the
 * nuisance weights) and a step after the first epoch evaluates only the target flows.
 */
#ifndef NF_MODEL_CAUSAL_H
#define NF_MODEL_CAUSAL_H

#include "training/model.h"
#include "training/trainer.h"

typedef struct nf_causal_config {
    int dx, dy;           /* covariate and outcome widths (set from the data by create) */
    int repr;             /* width of R(x) (16) */
    int hidden;           /* width of the spline conditioners (32) */
    int bins;             /* spline bins (8) */
    int grid;             /* K: grid points over the outcome range for stage 2, 1-D outcomes (200) */
    int draws;            /* M: draws of the nuisance per unit and arm for stage 2, wider outcomes (32) */
    double noise_r;       /* training noise on R(x) in the nuisance flow's context (0.05) */
    double noise_y;       /* training noise on the standardised outcome (0.05) */
    double alpha;         /* weight of the propensity cross-entropy (1) */
    double clip;          /* units with pi_a(x) below this are left out of BC (0.05) */
    double ema;           /* decay of the target flows' moving average (0.995) */
    int n_ref;            /* reference covariates kept for the plug-in (set by create, <= 1000) */
    double margin;        /* grid and spline range: the training range +- margin sd (0.5) */
    int shift;            /* 1: the nuisance's outcome is shifted by a linear function of the covariates per
                             arm, ys - B_a xs, before its flow (extrapolates linearly; 0) */
    uint64_t seed;
} nf_causal_config;

extern const nf_model_type nf_model_causal;

void nf_causal_config_init(nf_causal_config *c);
int nf_causal_config_check(const nf_causal_config *c);
/* A model for the training units (widths, standardisation, outcome range and reference covariates
 * from them, and every flow's ActNorm from a fixed sample of them: nothing is left to the first
 * batch, so the processes of a parallel run start from the same model); train is a rows source
 * with context [x, a] (nf_causal_source).  Refuses a share of the units (nf_causal_source_share):
 * that takes the processes' communicator, below. */
int nf_model_causal_create(nf_model **m, const nf_causal_config *cfg, const nf_source *train);
/* The same in every process of a parallel run, each holding a share of the units: the moments and
 * the outcome range are sums and maxima over the units each process holds, combined by comm (which
 * needs max_double), so every process builds the model one process would build from all units (to
 * the rounding of the sums' order).  comm NULL or of size 1: nf_model_causal_create. */
int nf_model_causal_create_shared(nf_model **m, const nf_causal_config *cfg, const nf_source *train,
                                  const nf_train_comm *comm);
const nf_causal_config *nf_model_causal_config(const nf_model *m);

/* What an interventional density is read from. */
typedef enum nf_causal_estimator {
    NF_CAUSAL_TARGET,   /* the target flow q_a (its moving average once trained) */
    NF_CAUSAL_NOBC,     /* the ablation: a target flow trained on CE alone, without BC */
    NF_CAUSAL_PLUGIN    /* mean over the reference covariates of p(y | x_j, a) */
} nf_causal_estimator;

/* out[i] = log p(Y[arm] = y_i) in the data's units, y (n, dy) doubles. */
int nf_causal_logp(nf_model *m, nf_causal_estimator est, int arm, const double *y, size_t n, double *out);
/* n draws of Y[arm] (n, dy) from a target flow (TARGET or NOBC; its moving average). */
int nf_causal_sample(nf_model *m, nf_causal_estimator est, int arm, size_t n, nf_rng *rng, double *y);
/* Mean of Y[arm] (dy values) under an estimate: by a fine grid for 1-D outcomes, else by 20,000
 * draws (the plug-in's from the nuisance flow at the reference covariates in turn; a fixed seed). */
int nf_causal_mean(nf_model *m, nf_causal_estimator est, int arm, double *mean);
/* Swap the target flows' weights with their moving average (a second call swaps back); a no-op
 * before stage 2 has taken a step. */
void nf_causal_swap_ema(nf_model *m);

#endif
