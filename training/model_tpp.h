/* training/model_tpp.h - the "tpp" model kind: intensity-free temporal point processes on event
 * sequences (formulas in training/model_tpp.c): a recurrent history encoder (a GRU, nn/gru.h, or a
 * tanh RNN, nn/rnn.h), a decoder of the next inter-event time (training/tpp_decoder.h) and a
 * categorical mark head, trained by the one trainer on a "sequences" source (datasets/sequences.h).
 *
 * What a fitted model gives besides its likelihood (training/model_tpp_sample.c):
 *   nf_model_tpp_simulate          whole sequences drawn on given windows, from scratch or
 *                                  continuing given histories, all sequences stepping together
 *                                  (per round, one decoder draw, one mark draw and one encoder step
 *                                  for every sequence still open);
 *   nf_model_tpp_intensity         the conditional intensity lambda*(t) = p(tau | c) / S(tau | c)
 *                                  along one sequence, on a time grid;
 *   nf_model_tpp_interval_density  the model's marginal inter-event density: the mean of
 *                                  p(tau | c_j) over the events j of a source, on a tau grid (to set
 *                                  against the data's histogram of intervals);
 *   nf_model_tpp_mark_accuracy     how often the most probable mark under the model is the true one.
 *
 *   nf_tpp_samples smp;
 *   double ts[2] = {0, 0}, te[2] = {50, 50};
 *   nf_model_tpp_simulate(m, 2, ts, te, NULL, NULL, rng, 0, &smp);  // smp.source: 2 sequences on [0, 50]
 *   nf_source_sequences_save("sim.h5", smp.source);
 *   nf_tpp_samples_free(&smp);
 */
#ifndef NF_MODEL_TPP_H
#define NF_MODEL_TPP_H

#include "training/model.h"
#include "training/tpp_decoder.h"

/* The history encoder's cell. */
typedef enum nf_tpp_rnn_kind { NF_TPP_RNN_GRU = 0, NF_TPP_RNN_TANH = 1 } nf_tpp_rnn_kind;
#define NF_TPP_RNN_NAMES "gru|rnn"
int nf_tpp_rnn_parse(const char *name, nf_tpp_rnn_kind *kind);
const char *nf_tpp_rnn_name(nf_tpp_rnn_kind kind);

typedef struct nf_tpp_config {
    nf_tpp_decoder_kind decoder;  /* lognormmix (default), flow, exponential, rmtpp */
    nf_tpp_rnn_kind rnn;          /* gru (default; model files without the field) or rnn */
    int hidden;                   /* GRU width H (64) */
    int components;               /* lognormmix: K (64) */
    int flow_layers, flow_hidden; /* flow decoder: spline-ar layers (2) of width (64) */
    int mark_dim;                 /* mark embedding width (32); unused without marks */
    int num_marks;                /* mark types (0 or 1: no marks); set from the data by create */
    double shift, scale;          /* mean and sd of log tau; set from the data by create */
    uint64_t seed;                /* initial weights */
} nf_tpp_config;

extern const nf_model_type nf_model_tpp;

void nf_tpp_config_init(nf_tpp_config *c);
int nf_tpp_config_check(const nf_tpp_config *c);
/* A model for the training sequences (their log tau statistics and mark count fill the config;
 * train NULL: the config as given). */
int nf_model_tpp_create(nf_model **m, const nf_tpp_config *cfg, const nf_source *train);
/* The same in each process of a parallel run whose training sequences are spread over the processes
 * (nf_source_sequences_load_share): the statistics are summed over them through comm
 * (training/trainer.h; NULL: one process, as nf_model_tpp_create), so every process builds the
 * same model.  All processes call it together. */
struct nf_train_comm;
int nf_model_tpp_create_shared(nf_model **m, const nf_tpp_config *cfg, const nf_source *train,
                               const struct nf_train_comm *comm);
/* The configuration of a tpp model (NULL for a model of another kind). */
const nf_tpp_config *nf_model_tpp_config(const nf_model *m);

/* ---- simulation ------------------------------------------------------------------------------ */

/* Simulated sequences: the arrays (laid out as datasets/sequences.h) and a source wrapping them. */
typedef struct nf_tpp_samples {
    size_t n;                     /* sequences */
    int64_t *offsets;             /* (n + 1) */
    double *times;                /* (offsets[n]) */
    int64_t *marks;               /* (offsets[n]), NULL when the model has no marks */
    double *t_start, *t_end;      /* (n) */
    int num_marks;                /* the model's mark types (0 without marks) */
    nf_source *source;            /* a "sequences" source over the arrays above */
} nf_tpp_samples;
void nf_tpp_samples_free(nf_tpp_samples *s);   /* NULL-safe; zeroes the struct */

/* Draw n sequences from the model, sequence i on the window [t_start[i], t_end[i]] (t_end[i] >
 * t_start[i]).  Without history each starts from the learned initial state at t_start[i].  With a
 * history source, sequence i continues item history_index[i] of it (indices may repeat): the encoder
 * runs over that item's events, t_start[i] is ignored (the item's own t_start is used), its events
 * (and marks) are copied first, and the simulation continues from the item's t_end, which must lie
 * before t_end[i]: the first new interval is drawn given that no event came between the item's last
 * event and its t_end (exactly, by inverting the survival function however small it is there).  Events are
 * drawn one at a time per sequence: tau ~ p(. | c), t = t_prev + tau, stop when t > t_end[i]; the
 * mark ~ softmax(W c + b); the encoder steps on (tau, mark).  At most max_events new events per
 * sequence (0: 10^6), NF_EDATA beyond.  All open sequences step together (batched products); memory
 * grows only with the events drawn.  The same model, windows and rng state give the same sequences.
 * NF_EINVAL when the history's mark types do not fit the model. */
int nf_model_tpp_simulate(nf_model *m, size_t n, const double *t_start, const double *t_end,
                          const nf_source *history, const size_t *history_index, nf_rng *rng, size_t max_events,
                          nf_tpp_samples *out);

/* ---- intensity, densities, marks ------------------------------------------------------------- */

/* lambda[g] = lambda*(t[g]) for item `item` of the sequences source s: p(tau | c) / S(tau | c) with c
 * the context after the events strictly before t[g] and tau = t[g] - (the last of them, or t_start).
 * NaN where tau <= 0 (t[g] at or before the window's start).  t in any order. */
int nf_model_tpp_intensity(nf_model *m, const nf_source *s, size_t item, const double *t, size_t n_grid,
                           double *lambda);
/* dens[g] = (1/J) sum_j p(tau[g] | c_j) over the events j of s (the contexts the model gives them;
 * at most max_contexts of them, evenly spread over the source's events; 0: all).  tau[g] > 0. */
int nf_model_tpp_interval_density(nf_model *m, const nf_source *s, const double *tau, size_t n_grid,
                                  size_t max_contexts, double *dens);
/* Time rescaling: lambda[e] = -log S(tau_e | c_e), the model's compensator over the interval that
 * ends at event e (the first interval of a sequence from its t_start), for the events of s in order
 * (offsets[n] - offsets[0] values).  If the sequences came from the model, these are independent
 * Exp(1) draws (the time-rescaling theorem), so a KS test of them against Exp(1) (core/ks.h) checks
 * the fit without simulating; the last, open interval of each sequence is not an event and is left
 * out.  (The last event of a window is conditioned on falling before t_end, so its compensator is
 * biased short: a test wants windows of many events.)  batch: sequences per encoder pass (<= 0: 64). */
int nf_model_tpp_compensators(nf_model *m, const nf_source *s, int batch, double *lambda);
/* *correct = events of s whose most probable mark under the model (argmax of the mark head given
 * their history) is their mark, *total = events of s.  NF_EINVAL when the model or s has no marks. */
int nf_model_tpp_mark_accuracy(nf_model *m, const nf_source *s, int batch, size_t *correct, size_t *total);

#endif
