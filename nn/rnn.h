/* nn/rnn.h - a plain (Elman) tanh RNN over batches of ragged sequences, with backpropagation
 * through time: the lighter history encoder of the point-process models (nf tpp fit --rnn rnn).
 *
 * The cell is torch.nn.RNN's (nonlinearity tanh), so weights load unchanged from PyTorch:
 *     h' = tanh(W_ih x + b_ih + W_hh h + b_hh)
 * Parameters (slices of the model's store, named "<name>.<piece>"): weight_ih (H, I), weight_hh
 * (H, H), bias_ih (H), bias_hh (H), all U(-1/sqrt(H), 1/sqrt(H)) as PyTorch; and h0 (H, zero at
 * first) unless the initial state is zero, with the three modes of the GRU (nn/gru.h, nf_gru_h0).
 *
 * Everything else is the GRU's contract, so the two are interchangeable behind the same calls:
 * batches packed as datasets/source.h's sequences (offsets (B + 1), x (T, I)), states h (T + B, H)
 * with sequence b's rows offsets[b] + b .. offsets[b + 1] + b (row offsets[b] + b + j = the state
 * after j steps), backward ADDS, and the single-step API for samplers:
 *     nf_rnn r;  nf_rnn_init(&r, P, "encoder.rnn", I, H, NF_GRU_H0_LEARNED, rng);
 *     ws = malloc(nf_rnn_workspace(&r, T, B) * sizeof(nf_real));
 *     nf_rnn_forward(&r, P, ws, h, x, offsets, B);
 *     nf_rnn_backward(&r, P, ws, dx, dh, x, offsets, B);      // P->grad += dL/dtheta, dx += dL/dx
 * Steps run time-parallel across the batch: one product X W_ih^T for all T steps, then at step s one
 * product h W_hh^T over the sequences that have a step s (laid out as consecutive rows), on the
 * calling thread (the products may use nf_gemm's threads).
 */
#ifndef NF_RNN_H
#define NF_RNN_H

#include <stdint.h>

#include "core/params.h"
#include "core/rng.h"
#include "nn/gru.h"

typedef struct nf_rnn {
    int in, hidden;          /* I, H */
    nf_gru_h0 h0_mode;
    size_t w_ih, w_hh;       /* offsets in the store: (H, I), (H, H) */
    size_t b_ih, b_hh;       /* (H), (H) */
    size_t h0;               /* (H), unless h0_mode is NF_GRU_H0_ZERO */
} nf_rnn;

/* Register the parameters under "<name>." in P and draw them from rng (h0 starts at zero).
 * NF_EINVAL naming the layer for sizes below 1, an unknown h0 mode or no rng. */
int nf_rnn_init(nf_rnn *r, nf_params *P, const char *name, int in, int hidden, nf_gru_h0 h0, nf_rng *rng);

/* nf_reals of workspace for a batch of n_seq sequences with n_steps steps in all: 4 H n_steps. */
size_t nf_rnn_workspace(const nf_rnn *r, int64_t n_steps, int n_seq);

/* h (T + B, H) = the states of every sequence for x (T, I) and offsets (B + 1, offsets[0] = 0,
 * non-decreasing).  Caches in ws what backward needs. */
void nf_rnn_forward(const nf_rnn *r, const nf_params *P, nf_real *ws, nf_real *h, const nf_real *x,
                    const int64_t *offsets, int n_seq);
/* After forward with the same ws, x and offsets, given dh (T + B, H) = dL/dh for every state:
 * P->grad += dL/dtheta (and dL/dh0), dx (T, I) += dL/dx (dx may be NULL).  ws is consumed. */
void nf_rnn_backward(const nf_rnn *r, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dh,
                     const nf_real *x, const int64_t *offsets, int n_seq);

/* One step for n independent rows (no backward): h_new (n, H) = cell(x (n, I), h (n, H)); h_new
 * may be h.  ws: nf_rnn_step_workspace(r, n) = 2 H n. */
size_t nf_rnn_step_workspace(const nf_rnn *r, int n);
void nf_rnn_step(const nf_rnn *r, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                 const nf_real *x, int n);
/* Where a sequence starts (either may be NULL): as nf_gru_start. */
void nf_rnn_start(const nf_rnn *r, const nf_params *P, nf_real *context, nf_real *state);

#endif
