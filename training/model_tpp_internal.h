/* training/model_tpp_internal.h - what training/model_tpp.c (likelihood, training, the file) and
 * training/model_tpp_sample.c (simulation, intensity, densities, mark accuracy) share: the model's
 * state, the history encoder behind one set of calls (a GRU or a tanh RNN, nn/gru.h and nn/rnn.h,
 * same contract), the encoding of a batch and the mark head. */
#ifndef NF_MODEL_TPP_INTERNAL_H
#define NF_MODEL_TPP_INTERNAL_H

#include "datasets/source.h"
#include "nn/gru.h"
#include "nn/rnn.h"
#include "training/model.h"
#include "training/model_tpp.h"
#include "training/tpp_decoder.h"

typedef struct tpp_state {
    nf_tpp_config cfg;
    int in;                      /* encoder input width: 1 + mark_dim */
    nf_gru gru;                  /* cfg.rnn == NF_TPP_RNN_GRU */
    nf_rnn rnn;                  /* cfg.rnn == NF_TPP_RNN_TANH */
    nf_tpp_decoder dec;
    size_t off_emb, off_mw, off_mb;   /* mark embedding (K, E), head W (K, H), b (K) */
    /* batch buffers, grown when a larger batch arrives */
    size_t cap_t, cap_b;
    int64_t *off;                     /* (B + 1) the batch's offsets rebased to 0 */
    nf_real *x, *dx, *h, *dh, *ws;    /* (T, I), (T, I), (T+B, H), (T+B, H), encoder workspace */
    nf_real *ce, *dce, *tau, *lp, *dlp, *logits;  /* (T, H), (T, H), (T), (T), (T), (T, K) */
    nf_real *cs, *dcs, *taus, *ls, *dls;          /* survival: (B, H), (B, H), (B), (B), (B) */
    int *sb;                          /* (B) sequence of each survival row */
} tpp_state;

/* The encoder: forward, backward, one step and the start, for whichever cell the model has. */
size_t tpp_enc_workspace(const tpp_state *st, int64_t T, int B);
void tpp_enc_forward(const tpp_state *st, const nf_params *P, nf_real *h, const nf_real *x, const int64_t *off, int B);
void tpp_enc_backward(const tpp_state *st, nf_params *P, nf_real *dx, const nf_real *dh, const nf_real *x,
                      const int64_t *off, int B);
size_t tpp_enc_step_workspace(const tpp_state *st, int n);
void tpp_enc_step(const tpp_state *st, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                  const nf_real *x, int n);
void tpp_enc_start(const tpp_state *st, const nf_params *P, nf_real *context, nf_real *state);

/* The encoder's input row of one event: (log tau - shift) / scale (-10 for tau <= 0) and the mark's
 * embedding (E = cfg.mark_dim entries; none without marks). */
void tpp_input_row(const tpp_state *st, const nf_real *P, nf_real *x, double tau, int mark);

/* Grow the batch buffers for T events and B sequences. */
int tpp_reserve(tpp_state *st, size_t T, size_t B);
/* Run the encoder over batch b: st->off (rebased offsets), st->tau (T), st->x (T, I), st->h
 * (T + B, H): the context of event j of sequence s is row j + s, the state after its last event row
 * off[s + 1] + s.  NF_EINVAL when the marks do not fit the model. */
int tpp_encode(nf_model *m, const nf_batch *b);
/* logits (n, K) = ctx (n, H) W^T + b, then each row turned into log-probabilities (log softmax). */
void tpp_mark_log_probs(const tpp_state *st, const nf_real *P, nf_real *logits, const nf_real *ctx, int n);

#endif
