/* nn/nn_internal.h - what the files of nn/ share and nobody else needs: the nf_mlp structure, its
 * workspace layout, the MADE degree and mask builders, and the re-initialisation of a linear layer. */
#ifndef NF_NN_INTERNAL_H
#define NF_NN_INTERNAL_H

#include "nn/nn.h"

/* Above this many entries, elementwise loops are split over OpenMP threads. */
#define NF_NN_PAR_MIN 32768

struct nf_mlp {
    nf_mlp_config cfg;
    double slope;              /* leaky relu slope */
    int nlin;                  /* plain: fc0..fc{L-1}, out; residual: in, (fc0, fc1) per block, out */
    nf_linear *lin;
    int nln;                   /* plain: one per hidden layer; residual: two per block */
    nf_layernorm *ln;
    size_t *lin_ws;            /* offset of each linear's scratch in the workspace */
    size_t fixed_ws;           /* all linear scratch; the activations follow */
    int out_ctx;               /* context columns also fed to the output linear (MADE with hidden layers) */
    int *deg;                  /* MADE: input degrees (in) */
    int *hdeg;                 /* MADE: hidden degrees (hidden), sorted ascending */
    unsigned char *masks;      /* MADE: every mask, one allocation */
};

/* Per-batch part of the workspace (after fixed_ws), and the residual network's passes. */
size_t nf_mlp_residual_workspace(const nf_mlp *m, int n);
void nf_mlp_residual_forward(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                             const nf_real *ctx, int n);
void nf_mlp_residual_backward(const nf_mlp *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                              const nf_real *dy, const nf_real *x, const nf_real *ctx, int n);

/* W, b ~ U(-bound, bound); masked entries zero; with weight norm g_j = |V_j|. */
void nf_linear_init_uniform(nf_linear *L, nf_params *P, double bound, nf_rng *rng);

/* MADE (nn/made.c).  deg (D): input degrees 1..D in the given order (rng for NF_ORDER_RANDOM). */
int nf_made_input_degrees(int *deg, int D, int order, nf_rng *rng);
/* m (H): hidden degrees k % max(1, D-1) + min(1, D-1) (MADE / nflows), then sorted ascending. */
void nf_made_hidden_degrees(int *m, int H, int D);
/* (H, D+C): hidden unit k sees input i iff m_k >= deg_i, and every context column. */
void nf_made_mask_input(unsigned char *mask, const int *m, int H, const int *deg, int D, int C);
/* (H, H): unit k' of the next layer sees unit k iff m_k' >= m_k. */
void nf_made_mask_hidden(unsigned char *mask, const int *m, int H);
/* (D*opi, H+C): output i*opi + k sees hidden unit h iff deg_i > m_h, and every context column. */
void nf_made_mask_output(unsigned char *mask, const int *deg, int D, int opi, const int *m, int H, int C);
/* (D*opi, D+C), no hidden layer: output i*opi + k sees input j iff deg_i > deg_j, and every context column. */
void nf_made_mask_direct(unsigned char *mask, const int *deg, int D, int opi, int C);

#endif
