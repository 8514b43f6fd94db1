/* nn/gru.h - a gated recurrent unit over batches of ragged sequences, with backpropagation through
 * time: the history encoder of the point-process models (Shchur et al. 2020).
 *
 * The cell is torch.nn.GRU's, gates in its order r, z, n, so weights load unchanged from PyTorch:
 *     r  = sigma(W_ir x + b_ir + W_hr h + b_hr)
 *     z  = sigma(W_iz x + b_iz + W_hz h + b_hz)
 *     n  = tanh(W_in x + b_in + r * (W_hn h + b_hn))
 *     h' = (1 - z) * n + z * h
 * Parameters (slices of the model's store, named "<name>.<piece>"): weight_ih (3H, I) = [W_ir; W_iz;
 * W_in], weight_hh (3H, H) = [W_hr; W_hz; W_hn], bias_ih (3H), bias_hh (3H), all U(-1/sqrt(H),
 * 1/sqrt(H)) as PyTorch; and h0 (H, zero at first) unless the initial state is zero:
 *     NF_GRU_H0_ZERO      h_0 = 0;
 *     NF_GRU_H0_LEARNED   h_0 = h0: the first context and the state the recurrence starts from;
 *     NF_GRU_H0_CONTEXT   the first context is h0 but the recurrence starts from 0 (the layout of the
 *                         authors' code: a learned context_init in front of a GRU run from zeros).
 *
 * Batches are packed like the event sequences of datasets/source.h: B sequences, sequence b has the
 * steps offsets[b] .. offsets[b+1] - 1 (zero steps is allowed), T = offsets[B] in all; the input x is
 * (T, I), one row per step.  The output h is (T + B, H): sequence b owns rows offsets[b] + b ..
 * offsets[b+1] + b, and row offsets[b] + b + j is its state after j steps, j = 0 .. L_b.  So for a
 * point process, the context of event j (j = 0 .. L_b - 1) is row offsets[b] + b + j (the history of
 * events < j) and the survival term's context is the last row, offsets[b+1] + b.
 *
 * Use (nn/ conventions: offsets into the store, a caller-provided workspace, backward ADDS):
 *     nf_gru g;  nf_gru_init(&g, P, "encoder.gru", I, H, NF_GRU_H0_LEARNED, rng);
 *     ws = malloc(nf_gru_workspace(&g, T, B) * sizeof(nf_real));
 *     nf_gru_forward(&g, P, ws, h, x, offsets, B);            // h (T + B, H)
 *     ...                                                     // dh (T + B, H) = dL/dh
 *     nf_gru_backward(&g, P, ws, dx, dh, x, offsets, B);      // P->grad += dL/dtheta, dx += dL/dx
 * The steps run time-parallel across the batch: one product X W_ih^T for all T steps up front (with
 * one input, x_t W_ih^T row by row inside the steps), then at step s one product h W_hh^T over the
 * sequences that have a step s.  The sequences are cut into
 * groups of about g->group (contiguous, balanced by steps) that threads (core/threads.h) run side by
 * side; the cut depends on the batch only, so with nf's own matrix kernel results are bit-identical
 * for any thread count (OpenBLAS's threaded products may round the final sums differently).  One
 * thread runs a batch of 64 about 10% faster as one group (g->group = 64) than as two.
 */
#ifndef NF_GRU_H
#define NF_GRU_H

#include <stdint.h>

#include "core/params.h"
#include "core/rng.h"

typedef enum nf_gru_h0 { NF_GRU_H0_ZERO = 0, NF_GRU_H0_LEARNED = 1, NF_GRU_H0_CONTEXT = 2 } nf_gru_h0;

/* Sequences per group when g->group is 0. */
#define NF_GRU_GROUP 32

typedef struct nf_gru {
    int in, hidden;          /* I, H */
    nf_gru_h0 h0_mode;
    int group;               /* sequences per group of the parallel recurrence (0: NF_GRU_GROUP) */
    size_t w_ih, w_hh;       /* offsets in the store: (3H, I), (3H, H) */
    size_t b_ih, b_hh;       /* (3H), (3H) */
    size_t h0;               /* (H), unless h0_mode is NF_GRU_H0_ZERO */
} nf_gru;

/* Register the parameters under "<name>." in P and draw them from rng (h0 starts at zero).
 * NF_EINVAL naming the layer for sizes below 1, an unknown h0 mode or no rng. */
int nf_gru_init(nf_gru *g, nf_params *P, const char *name, int in, int hidden, nf_gru_h0 h0, nf_rng *rng);

/* nf_reals of workspace for a batch of n_seq sequences with n_steps steps in all: 8 H n_steps, and
 * 9 H + 3 H^2 for each of up to 8 groups' gradient sums (0 for no steps). */
size_t nf_gru_workspace(const nf_gru *g, int64_t n_steps, int n_seq);

/* h (T + B, H) = the states of every sequence (layout above) for x (T, I) and offsets (B + 1,
 * offsets[0] = 0, non-decreasing).  Caches in ws what backward needs. */
void nf_gru_forward(const nf_gru *g, const nf_params *P, nf_real *ws, nf_real *h, const nf_real *x,
                    const int64_t *offsets, int n_seq);
/* After forward with the same ws, x and offsets, given dh (T + B, H) = dL/dh for every state:
 * P->grad += dL/dtheta (and dL/dh0), dx (T, I) += dL/dx (dx may be NULL).  ws is consumed. */
void nf_gru_backward(const nf_gru *g, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dh,
                     const nf_real *x, const int64_t *offsets, int n_seq);

/* One step for n independent rows, for samplers that grow sequences event by event (no backward):
 * h_new (n, H) = cell(x (n, I), h (n, H)); h_new may be h.  ws: nf_gru_step_workspace(g, n) = 6 H n. */
size_t nf_gru_step_workspace(const nf_gru *g, int n);
void nf_gru_step(const nf_gru *g, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                 const nf_real *x, int n);
/* Where a sequence starts (H each, either may be NULL): context = row 0 of its states, state = what
 * the first step reads.  They differ only with NF_GRU_H0_CONTEXT (context h0, state 0).  A sampler
 * continuing a history of L >= 1 steps continues from its last row of h (row offsets[b+1] + b). */
void nf_gru_start(const nf_gru *g, const nf_params *P, nf_real *context, nf_real *state);

#endif
