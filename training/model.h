/* training/model.h - models: what the trainer trains, as const type objects.
 *
 * A model is anything learnt by minimising a mean loss over batches of items: a density flow fit by
 * maximum likelihood ("density"), a flow fit to an unnormalised target by reverse KL
 * ("variational"), and the research systems that follow (point processes, interventional pairs of
 * flows, image and video flows).  Like a bijector, a kind is a const struct of functions
 * (nf_model_type) and an instance (nf_model) holds its configuration.  All trainable numbers of all
 * of its components live in ONE parameter store P (and non-trainable state in S), each component
 * under its own name prefix ("target.b3.affine-coupling..."), so an optimizer step, a checkpoint, a
 * gradient check and an all-reduce stay one call over one buffer.
 *
 * The contract the trainer (training/trainer.h) relies on:
 *   loss      mean loss of the batch's items; ADDS its gradient into P->grad.  `b` comes from the
 *             model's data source (kind `source_kind`), or, for a kind that trains without data
 *             (source_kind NULL), carries only b->n items and their indices.  rng is the trainer's
 *             stream (checkpointed), for kinds that draw random numbers inside the loss.
 *   eval      a per-item metric where higher is better (log-likelihood, ELBO term), written to
 *             values[0..b->n-1]; evaluation mode, no gradients.
 *   init_data optional: set data-dependent parts (standardisation, ActNorm) from the training data.
 *   before_step optional: advance state that moves with the optimizer steps rather than the items,
 *             once per step in every process (a parallel run's processes hold parts of a batch).
 *   save/load the model's configuration (not its parameters: the model file writes the store) under
 *             a group, so that load rebuilds the same components and slice table.
 *   stages    optional: a kind trained in stages (the interventional flows: a nuisance model, then a
 *             target model against it) names them; set_stage makes loss and eval those of the stage
 *             and sets m->train_first/train_count, the entries of P that stage trains (the others
 *             are held fixed, whatever gradient reaches them).  The trainer runs the stages one
 *             after the other, each with a fresh optimizer, all resumable after a kill.
 * The library never prints; every call returns an NF_E* code with a message.
 */
#ifndef NF_MODEL_H
#define NF_MODEL_H

#include "core/h5.h"
#include "core/params.h"
#include "core/rng.h"
#include "datasets/source.h"
#include "flows/flow.h"

typedef struct nf_model nf_model;
typedef struct nf_model_type nf_model_type;

struct nf_model_type {
    const char *kind;          /* "density", "variational"; stored in model files */
    const char *summary;       /* one line for nf info */
    const char *command;       /* the nf command that trains and uses this kind: "nf fit" */
    const char *source_kind;   /* kind of data source it trains on ("rows"), NULL: no data */
    const char *metric;        /* what eval's values are: "log_likelihood", "elbo" */
    /* What the training loss and eval's values are per, when that is not one item of the source
     * (shown beside them: "ll/event"); NULL: per item.  The tpp kind: loss per event, values per
     * sequence. */
    const char *loss_per, *metric_per;
    int (*loss)(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss);
    int (*eval)(nf_model *m, const nf_batch *b, nf_rng *rng, double *values);
    /* What loss is a mean over, for combining the losses of parallel processes (NULL: the batch's
     * items; the tpp kind: its events). */
    double (*batch_weight)(const nf_model *m, const nf_batch *b);
    int (*init_data)(nf_model *m, const nf_source *train);      /* optional */
    void (*set_training)(nf_model *m, int training);
    int (*save)(const nf_model *m, nf_h5 *f, const char *group);
    /* Build m's components (into m->P, m->S) from a configuration written by save; `version` is the
     * model file's format version (1: the flat layout of the first files). */
    int (*load)(nf_model *m, nf_h5 *f, const char *group, int version);
    void (*destroy)(nf_model *m);
    /* 1: the flow models the data after a transformation of the kind (images: dequantised and
     * rescaled), so nf eval / sample / logprob / plot, which read the flow as a density of the data
     * file's rows, refuse the model and name the kind's command (nf_model_load). */
    int flow_on_transformed_data;
    int n_stages;                     /* 0 or 1: one stage */
    const char *const *stage_names;   /* (n_stages), stored in checkpoints */
    const char *const *stage_metrics; /* optional (n_stages): a stage's metric where it is not `metric`
                                         (the video denoiser's stage: "neg_mse") */
    int (*set_stage)(nf_model *m, int stage);
    /* Optional: called by the trainer when it moves the model on to a new stage (after set_stage;
     * not when a run resumes inside a stage), with the training items: settings of the new stage
     * that depend on the data and on what the stages before it trained (the video kind's latent
     * scale from its trained codec).  Every process of a parallel run calls it alike. */
    int (*stage_begin)(nf_model *m, const nf_source *train);
    /* Optional: called once per optimizer step, before the loss, in every process of a parallel run
     * (also one that holds no item of the batch): state that advances with the steps, not with the
     * items (the causal kind's moving average of its target weights). */
    void (*before_step)(nf_model *m);
    /* Optional: called once when a run has finished (after its best or averaged parameters are
     * kept, before the final checkpoint), with the training items: state fitted to the final
     * parameters (the dependent kind's theta for the final flow's latents of all rows).  Every
     * process of a parallel run calls it alike. */
    int (*train_end)(nf_model *m, const nf_source *train);
};

struct nf_model {
    const nf_model_type *type;
    nf_params *P, *S;          /* the one store: trainable values, and state */
    nf_flow *flow;             /* the flow that nf sample / logprob / plot use; NULL if none */
    int ctx_dim;               /* context width the model's data must have (0: none) */
    int stage;                 /* the stage being trained (0 for single-stage kinds) */
    size_t train_first, train_count; /* entries of P this stage trains; count 0 means all of P */
    void *state;               /* kind-specific */
};

/* The kinds, NULL-terminated; find by kind name (NULL and an NF_EINVAL message if unknown). */
extern const nf_model_type nf_model_density, nf_model_variational;
extern const nf_model_type *const nf_model_types[];
const nf_model_type *nf_model_type_find(const char *kind);
/* The metric of stage `stage` of a kind trained in stages (stage_metrics), else its metric. */
const char *nf_model_type_metric(const nf_model_type *type, int stage);
/* Add a kind defined outside the library (found by nf_model_type_find and so by nf_model_open);
 * at most 16, names unique.  The type must outlive every use. */
int nf_model_type_register(const nf_model_type *type);
/* Number of stages of m's kind (1 for single-stage kinds) and stage k's name ("" if unnamed). */
int nf_model_stages(const nf_model *m);
const char *nf_model_stage_name(const nf_model *m, int k);
/* What the values of eval are in m's current stage (the kind's metric unless its stage says). */
const char *nf_model_metric(const nf_model *m);
/* Switch m to stage k (0 <= k < nf_model_stages(m)). */
int nf_model_set_stage(nf_model *m, int k);
/* The entries of P the current stage trains, as a view. */
nf_params nf_model_trainable(const nf_model *m);

void nf_model_free(nf_model *m);          /* NULL is harmless */
void nf_model_set_training(nf_model *m, int training);

/* Mean and standard error of the model's per-item metric over a source's items (src NULL: a kind
 * without data, over `count` draws), in batches of `batch`, in evaluation mode; values (n) may be
 * NULL.  rng: for kinds that sample (NULL otherwise). */
int nf_model_evaluate(nf_model *m, const nf_source *src, size_t count, int batch, nf_rng *rng, double *mean,
                      double *stderr_mean, double *values);

/* Components: a flow's configuration (spec, widths, seed, name prefix) as attributes of `group`,
 * and the flow rebuilt from them into the stores P, S (NULL, NULL: the flow's own). */
int nf_model_flow_save(const nf_flow *f, nf_h5 *h, const char *group);
int nf_model_flow_load(nf_flow **f, nf_h5 *h, const char *group, nf_params *P, nf_params *S);

/* ---- the kinds --------------------------------------------------------------------------------- */

/* "density": a flow fit by maximum likelihood to rows (and context); loss = mean -log p(x | c). */
int nf_model_density_create(nf_model **m, const char *spec, int dim, int ctx_dim, uint64_t seed);
/* Take an existing flow (the model then owns it). */
int nf_model_density_wrap(nf_model **m, nf_flow *flow);

/* "variational": a flow q fit to an unnormalised target p~ by reverse KL, without data.
 *   loss = mean_i [log q(x_i) - log p~(x_i)],  x_i = T(z_i), z_i ~ base  (reparameterised)
 *   = -ELBO;  per-item metric: log w_i = log p~(x_i) - log q(x_i).
 * The target is named ("u1", "banana", ...) with options (distributions/target.h). */
int nf_model_variational_create(nf_model **m, const char *spec, const char *target, const char *target_options,
                                uint64_t seed);
/* The variational model's target (NULL for other kinds). */
struct nf_target;
const struct nf_target *nf_model_variational_target(const nf_model *m);
/* Importance-sampling summary of q against the target from n draws: ELBO = mean log w,
 * log Z ~ logsumexp(log w) - log n (an estimate, biased low for small n), and the effective sample
 * size (sum w)^2 / sum w^2 as a fraction of n. */
typedef struct nf_vi_report {
    double elbo, elbo_stderr, log_z, ess_frac, log_z_true;   /* log_z_true NaN when unknown */
    size_t n;
} nf_vi_report;
int nf_model_variational_report(nf_model *m, size_t n, int batch, nf_rng *rng, nf_vi_report *r);

#endif
