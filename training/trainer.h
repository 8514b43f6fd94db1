/* training/trainer.h - training of any model (training/model.h) on a data source, resumable to the bit.
 *
 * The trainer is written once for every kind of model: a density flow, a variational flow, and the
 * research systems built on them.  It owns everything a run needs besides the model and the data: the optimizer and its
 * schedule, the shuffling stream, the position in the epoch, the best parameters seen on the
 * validation set, the last known-good parameters, and the history.  All of it is written by
 * nf_trainer_save() and read back by nf_trainer_load(), so a run killed after a checkpoint and
 * resumed continues with exactly the batches, rates and random numbers it would have used, and (same
 * build, same thread count) ends with the same parameters as a run that was never interrupted.
 *
 * One step: take the next `batch` items of this epoch's permutation of the training source (a kind
 * that trains without data gets `batch` item indices and draws what it needs from the trainer's
 * random stream), compute the model's mean loss and its gradient, clip the global norm, and take an optimizer step at the
 * scheduled rate times lr_scale.  A non-finite loss or gradient is a divergence: the last good
 * parameters (every `good_every` steps, the parameters that just gave a finite loss and gradient,
 * taken before the update) are restored and lr_scale is halved; after
 * max_failures consecutive divergences the run stops with NF_ENONFINITE, keeping the good model.
 * Validation (the mean of the model's per-item metric over the validation source, or over
 * eval_items draws of a fixed stream for a kind without data) runs at the end of every epoch and
 * every eval_every steps if set; with patience > 0,
 * that many evaluations without improvement stop the run, and the best parameters are restored at
 * the end of every run that had a validation set.
 *
 * With ema = d > 0 the trainer also keeps an exponentially weighted average of the weights after
 * each step k = 1, 2, ... of a stage, normalised so the weights of the iterates sum to one:
 *     e_k = sum_{i<=k} d^(k-i) theta_i / sum_{i<=k} d^(k-i),
 *     e_k = e_{k-1} + (theta_k - e_{k-1}) / w_k,   w_k = d w_{k-1} + 1 = (1 - d^k) / (1 - d),
 * (the bias-corrected moving average: no pull towards the initial weights, e_1 = theta_1).
 * Validation reads the average (so early stopping and the best parameters are the average's), and a
 * stage or run that ends leaves the model with it; the raw weights go on training and are what a
 * checkpoint resumes from.  Averaging smooths the last steps' noise (an effective window of about
 * 1 / (1 - d) steps), as image and video flows are trained (TarFlow, STARFlow).
 *
 * The library never prints: progress and checkpoints go through the hooks the caller provides.
 */
#ifndef NF_TRAINER_H
#define NF_TRAINER_H

#include "core/h5.h"
#include "datasets/source.h"
#include "flows/flow.h"
#include "training/model.h"
#include "training/optim.h"
#include "training/schedule.h"

typedef struct nf_train_config {
    int batch;              /* rows per step (default 512; capped at the training set size) */
    int epochs;             /* 0: no epoch limit */
    long max_steps;         /* 0: no step limit */
    double max_seconds;     /* 0: no time limit (counts time across resumes) */
    int patience;           /* evaluations without improvement before stopping; 0: never */
    long eval_every;        /* 0: validate at the end of each epoch only */
    double clip;            /* global gradient-norm clip; 0: off */
    int max_failures;       /* consecutive divergences tolerated (default 5) */
    long good_every;        /* steps between known-good snapshots (default 100) */
    long checkpoint_every;  /* steps between checkpoint hooks; 0: only at the end */
    uint64_t seed;          /* shuffling stream (and the draws of kinds that train without data) */
    long eval_items;        /* kinds without data: draws per validation; 0: no validation */
    double ema;             /* decay d of the moving average of the weights (Polyak averaging); 0: off */
    nf_optim optim;
    nf_schedule schedule;
} nf_train_config;

/* Defaults: batch 512, epochs 0, max_failures 5, good_every 100, Adam 1e-3, constant schedule. */
void nf_train_config_init(nf_train_config *c);

typedef struct nf_history {
    long n, cap;
    long *step;
    double *epoch;          /* fractional epochs */
    double *train_ll;       /* mean train metric (-loss: log-likelihood, ELBO) since the previous entry */
    double *val_ll;         /* validation metric; NaN without a validation set */
    double *lr;
    double *seconds;
} nf_history;

typedef struct nf_train_progress {
    long step, total_steps;   /* total_steps 0 if unknown */
    int epoch, epochs;        /* epochs: 0 when unlimited or when the model trains without data */
    int has_data;             /* 0 for a kind that trains without data (no epochs) */
    double train_ll;          /* running mean of -loss over recent steps */
    const char *metric;       /* what train_ll and val_ll are: the model's metric ("log_likelihood") */
    double val_ll, best_val;  /* NaN until known */
    double lr, steps_per_sec, seconds, eta_seconds;  /* eta NaN if unknown */
    int evaluated;            /* 1 if this step ended with a validation */
} nf_train_progress;

typedef struct nf_trainer nf_trainer;

/* Data-parallel training across processes (apps/mpi.c implements this over MPI; the library itself
 * does not depend on MPI).  Every process holds the same model and trainer and walks the same
 * shuffled order of the same items; of each global batch a process computes the items it holds
 * (nf_source_owns, when the source is a share loaded by nf_source_rows_load_share), or else the
 * batch positions i = rank mod size; and the loss and gradient of the whole batch are
 *     L = sum_r w_r L_r / sum_r w_r,   grad L = sum_r (w_r / W) grad L_r,   W = sum_r w_r,
 * with L_r the process's mean loss over its w_r units (items, or what the kind's batch_weight
 * counts): one sum of two numbers, then one in-place sum of the gradient buffer (nf_real, P->n
 * entries).  Every process then takes the same clipped optimizer step.  Validation sums (metric,
 * count) the same way; the stop request and the elapsed time are agreed every step, so all stop
 * together.  Random numbers drawn inside the loss come from a per-process stream seeded by the seed
 * and the rank; the shuffle stream stays shared (and checkpointed), so a run resumes with any
 * number of processes. */
typedef struct nf_train_comm {
    int rank, size;
    void *user;
    int (*sum_real)(void *user, nf_real *buf, size_t n);    /* buf = its sum over all processes */
    int (*sum_double)(void *user, double *buf, size_t n);
    /* buf = its entrywise maximum over all processes; optional (NULL): the trainer never needs it,
     * a model kind whose set-up wants a range over data spread across processes (nf causal's
     * outcome range) does */
    int (*max_double)(void *user, double *buf, size_t n);
} nf_train_comm;

typedef struct nf_train_hooks {
    void *user;
    void (*progress)(void *user, const nf_train_progress *p);      /* after every step */
    int (*checkpoint)(void *user, nf_trainer *t);                  /* every checkpoint_every steps and at the end */
    volatile int *stop;       /* set to nonzero (e.g. from a signal handler) to stop after the current step */
} nf_train_hooks;

struct nf_trainer {
    nf_train_config cfg;
    nf_model *model;
    const nf_source *train;   /* NULL for a kind without data */
    const nf_source *val;     /* NULL: no validation set */
    size_t n;                 /* training items (0 without data) */
    size_t nv;                /* validation items (eval_items without data) */
    /* state saved in checkpoints */
    long step;
    int epoch;                /* completed epochs */
    size_t pos;               /* rows of the current epoch already used */
    uint32_t *perm;           /* (n) this epoch's order: a function of order_state, not saved itself */
    unsigned char *order_state; /* the state of rng that drew this epoch's order */
    int order_stored;         /* 1: the order was read as indices from an old checkpoint (saved so again) */
    nf_rng *rng;
    double best_val;          /* -inf until the first validation */
    long best_step;
    int bad_evals, failures;
    double lr_scale;
    double seconds;           /* training time so far, across resumes */
    nf_params *best_P, *best_S;   /* best validation parameters */
    nf_params *good_P, *good_S;   /* last known-good parameters (with optimizer moments) */
    nf_params *ema_P;         /* cfg.ema > 0: the moving average of P's values (else NULL) */
    long ema_count;           /* steps averaged in this stage */
    nf_history hist;
    int n_done;               /* a model trained in stages: stages completed before this one */
    nf_history *done;         /* (n_done) their histories */
    /* not saved */
    double acc_ll;            /* sum of batch mean -losses since the last history entry */
    long acc_steps;
    nf_batch batch;           /* the current batch (buffers reused across steps) */
    size_t *idx;              /* (cfg.batch) item indices of a batch */
    const nf_train_comm *comm;/* NULL: one process */
    nf_rng *noise;            /* the loss's random stream of this process (parallel runs) */
    char stop_reason[128];
};

/* A trainer for `model` on the training source (NULL for a kind without data) with an optional
 * validation source.  The sources must match the model's kind and widths; they must outlive t. */
int nf_trainer_create(nf_trainer **t, nf_model *model, const nf_train_config *cfg, const nf_source *train,
                      const nf_source *val);
void nf_trainer_free(nf_trainer *t);
/* Train across processes (see nf_train_comm; comm must outlive t).  NULL or size 1: one process. */
int nf_trainer_set_comm(nf_trainer *t, const nf_train_comm *comm);
/* One optimizer step on the next batch (or a divergence handled), for callers that own the loop;
 * *metric receives the batch's -loss (NaN after a divergence).  Starts a new epoch when needed and
 * validates at an epoch end or every eval_every steps (*evaluated set to 1 then). */
int nf_trainer_step(nf_trainer *t, double *metric, int *evaluated);
/* Train until a limit, early stopping, a stop request or an error.  Restores the best validation
 * parameters before returning (when there is a validation set).  t->stop_reason says why it ended. */
int nf_trainer_run(nf_trainer *t, const nf_train_hooks *hooks);
/* 1 if the run has reached a limit (epochs, steps, time, patience) in its last stage and would do
 * nothing more.  A model trained in stages (nf_model_stages > 1) runs its stages in order under the
 * same settings, each to its own limit: at a stage's end the best validation parameters of that
 * stage are kept, its history is filed (t->done), the model switches to the next stage and the
 * optimizer starts afresh (step 0, zero moments), and the checkpoint hook is called. */
int nf_trainer_finished(const nf_trainer *t);

/* Write / read the resumable state under `group` (the model's parameters are saved separately).
 * Loading checks every field against this trainer (permutation, position, counters, finite
 * numbers, random state) and names the one that is wrong. */
int nf_trainer_save(const nf_trainer *t, nf_h5 *f, const char *group);
int nf_trainer_load(nf_trainer *t, nf_h5 *f, const char *group);

/* Mean log-likelihood of arrays (x, ctx) under a flow, in batches (evaluation mode), and its
 * standard error; logp_out (n) may be NULL.  (nf_model_evaluate does the same for any model.) */
int nf_evaluate(nf_flow *flow, const nf_real *x, const nf_real *ctx, size_t n, int batch, double *mean,
                double *stderr_mean, nf_real *logp_out);

#endif
