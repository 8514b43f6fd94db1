/* nn/transformer.h - pre-norm transformer blocks and the causal transformer conditioner of a
 * transformer autoregressive flow (TarFlow, Zhai et al. 2024; later the STARFlow-V video generator).
 *
 * A block (nf_tblock) on n sequences of T tokens of width d, (n*T, d) rows:
 *     h = x + Attn(LN1(x)),    y = h + MLP(LN2(h)),    MLP = Linear(d, r d) -> GELU -> Linear(r d, d)
 * with the causal attention of nn/attention.h (optionally QK-normalised) and exact GELU (x Phi(x)).
 *
 * The conditioner (nf_transformer) maps tokens x (n, T, din) to y (n, T, dout) so that y_t depends
 * only on x_0 .. x_{t-1} (strictly earlier tokens: what an autoregressive flow's parameters need):
 *     u = [s, x_0, ..., x_{T-2}]                   (s a learned start token of width din)
 *     h_0 = u Win^T + bin + pos_t [+ ctx Wc^T + bc]  (positional embeddings (T, d), or factorised
 *                                                    over frames: pos_frames; the optional
 *                                                    context (n, C), e.g. a class one-hot, is added
 *                                                    at every position)
 *     h_l = block_l(h_{l-1}), l = 1..L;   y = LN_f(h_L) Wout^T + bout
 * zero_init_output starts Wout and bout at zero, so a flow built on it starts as the identity.
 * Parameters live under "<name>." in the model's store: start (din), pos (T, d) (with pos_frames F:
 * pos (T/F, d) and pos_time (F, d)), in.*, ctx.*,
 * b<l>.{ln1,attn,ln2,fc1,fc2}.*, ln_f.*, out.*.  Positional embeddings and the start token start
 * as 0.02 N(0, 1), linears as torch.nn.Linear, layer norms as the identity.
 *
 * Training and Jacobi inversion call nf_transformer_forward on whole sequences (the Jacobi solver
 * simply calls it again on its current iterate); backward ADDS dL/dx, dL/dctx and the parameter
 * gradients after a forward with the same workspace.  Sampling decodes token by token with a
 * key/value cache per block (nf_transformer_decoder): begin(n), then step t = 0, 1, ... given
 * x_{t-1} (NULL at t = 0) returns y_t (n, dout), equal (to rounding) to row t of the full forward.
 */
#ifndef NF_TRANSFORMER_H
#define NF_TRANSFORMER_H

#include "nn/attention.h"

/* ------------------------------------------------------------------------------------ block */

typedef struct nf_tblock {
    int d, hidden;           /* width, MLP width r d */
    nf_layernorm ln1, ln2;
    nf_attention attn;
    nf_linear fc1, fc2;      /* d -> hidden, hidden -> d */
} nf_tblock;

/* Register "<name>.ln1", ".attn", ".ln2", ".fc1", ".fc2"; NF_EINVAL naming the block for bad sizes. */
int nf_tblock_init(nf_tblock *B, nf_params *P, const char *name, int d, int heads, int mlp_ratio, int qk_norm,
                   nf_rng *rng);
/* Forward cache and scratch (temporaries of forward and backward, shareable between blocks) for n
 * sequences of T tokens. */
size_t nf_tblock_workspace(const nf_tblock *B, int n, int T);
size_t nf_tblock_scratch(const nf_tblock *B, int n, int T);
/* y (n*T, d) = block(x (n*T, d)); y must not alias x. */
void nf_tblock_forward(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *scratch, nf_real *y,
                       const nf_real *x, int n, int T);
/* After forward with the same ws and x: dx += dL/dx (may be NULL), P->grad += dL/dtheta.  _set
 * writes dx = dL/dx instead (no zeroing pass; the same values as adding into zeros). */
void nf_tblock_backward(const nf_tblock *B, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                        const nf_real *dy, const nf_real *x, int n, int T);
void nf_tblock_backward_set(const nf_tblock *B, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                            const nf_real *dy, const nf_real *x, int n, int T);
/* Decoding one token per sequence at position t with the attention's cache kv (nf_attention_kv_size
 * of B->attn); y, x (n, d), y must not alias x. */
size_t nf_tblock_step_workspace(const nf_tblock *B, int n, int Tmax);
int nf_tblock_step(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                   const nf_real *x, int t, int n);
/* m tokens per sequence at positions t0..t0+m-1 at once (x, y (n, m, d)), nf_attention_block. */
size_t nf_tblock_block_workspace(const nf_tblock *B, int n, int m, int Tmax);
int nf_tblock_block(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                    const nf_real *x, int t0, int m, int n);

/* ------------------------------------------------------------------------------ conditioner */

typedef struct nf_transformer_config {
    int din, dout;           /* token widths in and out */
    int T;                   /* tokens per sequence */
    int d, heads, layers;    /* model width, attention heads (dividing d), blocks (>= 0) */
    int mlp_ratio;           /* MLP width / d (0: 4) */
    int ctx;                 /* context width (0: none) */
    int qk_norm;             /* NF_QK_NONE or NF_QK_RMS */
    int zero_init_output;    /* output projection starts at zero */
    int pos_frames;          /* 0 or 1: one positional embedding per position; F >= 2 (dividing T): the
                                sequence is F frames of T/F tokens, and pos_t = space_(t mod T/F) +
                                time_(t div T/F) (a video's tokens share their place in the frame
                                across frames) */
    int window_group;        /* 0: every token attends to all earlier ones; G >= 1 (dividing T): the
                                tokens are groups of G (frames), and a token attends only to its own
                                group and the window_back groups before it (nn/attention.h window) */
    int window_back;
} nf_transformer_config;

typedef struct nf_transformer nf_transformer;

int nf_transformer_create(nf_transformer **out, const nf_transformer_config *cfg, nf_params *P, const char *name,
                          nf_rng *rng);
void nf_transformer_free(nf_transformer *tf);
const nf_transformer_config *nf_transformer_get_config(const nf_transformer *tf);
/* nf_reals of workspace for a batch of n sequences (forward caches and backward scratch). */
size_t nf_transformer_workspace(const nf_transformer *tf, int n);
/* y (n, T, dout) from x (n, T, din) and ctx (n, C) (NULL when C = 0). */
void nf_transformer_forward(const nf_transformer *tf, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                            const nf_real *ctx, int n);
/* After forward with the same ws, x and ctx: dx += dL/dx, dctx += dL/dctx (either may be NULL),
 * P->grad += dL/dtheta. */
void nf_transformer_backward(const nf_transformer *tf, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                             const nf_real *dy, const nf_real *x, const nf_real *ctx, int n);

/* The final hidden state h_L (n, T, d) (before LN_f and the output projection) that the last
 * forward with workspace ws computed, a view into ws. */
const nf_real *nf_transformer_hidden(const nf_transformer *tf, const nf_real *ws, int n);
/* backward with a second gradient dh (n, T, d) added to dL/dh_L (NULL: none), for a loss that
 * reads the hidden state besides y (representation alignment, training/image_align.h). */
void nf_transformer_backward_hidden(const nf_transformer *tf, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                    const nf_real *dy, const nf_real *dh, const nf_real *x, const nf_real *ctx, int n);

/* Cached decoding for up to n_max sequences (allocates the caches once). */
typedef struct nf_transformer_decoder nf_transformer_decoder;
int nf_transformer_decoder_create(nf_transformer_decoder **out, const nf_transformer *tf, int n_max);
void nf_transformer_decoder_free(nf_transformer_decoder *dec);
/* Start n sequences (1 <= n <= n_max); NF_EINVAL otherwise. */
int nf_transformer_decode_begin(nf_transformer_decoder *dec, int n);
/* y (n, dout) = row t of the forward, given x_{t-1} (n, din) (ignored, may be NULL, at t = 0) and
 * ctx (n, C).  t may be the next position or an earlier one (decoding again from there); NF_EINVAL
 * for a t beyond the next position or >= T, or a missing x_{t-1}. */
int nf_transformer_decode_step(nf_transformer_decoder *dec, const nf_params *P, nf_real *y, int t,
                               const nf_real *xprev, const nf_real *ctx);
/* Decoders that also take blocks of up to m_max tokens per call (create = create_block with 1). */
int nf_transformer_decoder_create_block(nf_transformer_decoder **out, const nf_transformer *tf, int n_max, int m_max);
/* Rows t0..t0+m-1 of the forward at once, y (n, m, dout), given the inputs of those positions xprev
 * (n, m, din): row (b, r) is x_{t0+r-1} of sequence b (ignored for position 0), and ctx (n, C).
 * One pass over n m rows: what a Jacobi sweep over a block of tokens needs, each row attending to
 * the cache before t0 and to the block's earlier rows.  It writes the cache at t0..t0+m-1, so the
 * same block can be swept again (from a new iterate) and the next block starts at t0 + m.  t0 may
 * be at most the next position (decoded so far); NF_EINVAL otherwise or for m > m_max. */
int nf_transformer_decode_block(nf_transformer_decoder *dec, const nf_params *P, nf_real *y, int t0, int m,
                                const nf_real *xprev, const nf_real *ctx);

#endif
