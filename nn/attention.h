/* nn/attention.h - causal multi-head self-attention with hand-written backward and a key/value cache
 * for decoding token by token: the mixing layer of the transformer (nn/transformer.h) that TarFlow
 * and the video generator are built on.
 *
 * Input: n sequences of T tokens of width d, row-major (n, T, d), i.e. an (n*T, d) row batch.
 *     [q | k | v] = x Wqkv^T + bqkv                (one linear d -> 3d over all n*T rows)
 *     head h (H heads, dh = d / H) uses columns h*dh .. h*dh + dh - 1 of q, k and v
 *     QK norm (optional, qk_norm = NF_QK_RMS): each head's q and k row is RMS-normalised with a learned
 *         gain per head dimension, shared by all heads:  q <- g_q * q / sqrt(mean(q^2) + 1e-6),
 *         the same for k with g_k (gains start at 1).  RMS rather than layer norm: no mean to remove,
 *         one statistic per row and head, and the gain keeps the logit scale learnable.
 *     S = q k^T / sqrt(dh), masked causally (token t sees tokens 0..t, or a window of them:
 *     nf_attention_set_window), P = softmax over each row,
 *     o = P v, heads concatenated back to (n*T, d), y = o Wo^T + bo   (linear d -> d)
 * Parameters ("<name>.qkv.weight", ".qkv.bias", ".out.weight", ".out.bias", with QK norm
 * ".q_gain", ".k_gain" (dh each)) live in the model's nf_params store; the struct keeps offsets.
 *
 * Use (nn/nn.h conventions: forward caches into the caller's workspace, backward ADDS):
 *     nf_attention A;  nf_attention_init(&A, P, "b0.attn", d, heads, NF_QK_RMS, rng);
 *     ws = workspace(n, T) reals;  sc = scratch(n, T) reals;
 *     nf_attention_forward(&A, P, ws, sc, y, x, n, T);
 *     nf_attention_backward(&A, P, ws, sc, dx, dy, x, n, T);   // dx += dL/dx, P->grad += dL/dtheta
 * ws holds what backward needs, O(n T d): q, k, v, each row's softmax maximum and normaliser, the
 * concatenated heads.  The (T, T) probabilities of a (sequence, head) pair live only in a tile of
 * the scratch while that pair is computed; backward computes them again (one more q k^T product,
 * the same bits), so a deep model does not keep n H T^2 reals per layer.  The scratch, O(n T d)
 * plus two (T, T) tiles for each of up to NF_NN_MAX_THREADS parts, holds temporaries only (its
 * contents are not needed between calls), so layers can share one.
 * The per-(sequence, head) products are nf_gemm calls on strided views (lda = 3d) computed in
 * row blocks up to the diagonal (the masked upper triangle is mostly skipped); the (sequence, head)
 * pairs are split over the worker pool (core/threads.h) in fixed contiguous ranges, each with its own
 * tiles, so results do not depend on the thread count (with nf's own matrix kernel: OpenBLAS's
 * threaded projections may round differently, core/blas.h).
 *
 * Decoding: a key/value cache of nf_attention_kv_size(A, n, Tmax) reals (the normalised keys and the
 * values of up to Tmax tokens of n sequences) and nf_attention_step: given the new token x_t (n, d)
 * at position t, it stores its k and v at position t and returns y_t (n, d), equal (to rounding) to
 * row t of the full forward over x_0..x_t.  Positions after t in the cache are ignored, so stepping
 * again from an earlier t rewinds.
 */
#ifndef NF_ATTENTION_H
#define NF_ATTENTION_H

#include "nn/nn.h"

enum { NF_QK_NONE = 0, NF_QK_RMS = 1 };

typedef struct nf_attention {
    int d, heads, dh;
    int qk_norm;             /* NF_QK_NONE or NF_QK_RMS */
    nf_linear qkv;           /* d -> 3d: rows [Wq; Wk; Wv] */
    nf_linear out;           /* d -> d */
    size_t q_gain, k_gain;   /* offsets of (dh) gains, with QK norm */
    int win_group, win_back; /* window (nf_attention_set_window): groups of win_group tokens, each
                                token sees its own group and win_back earlier ones; win_back < 0: all */
} nf_attention;

/* Register the parameters under "<name>." and initialise them (linears as torch.nn.Linear, gains 1).
 * NF_EINVAL naming the layer unless d >= 1, heads >= 1 divides d, qk_norm is an NF_QK_* value. */
int nf_attention_init(nf_attention *A, nf_params *P, const char *name, int d, int heads, int qk_norm,
                      nf_rng *rng);

/* A block-causal window: the T tokens are groups of `group` (a video's frames), and token i sees
 * only keys j <= i in its own group or the `back` groups before it,
 *     lo(i) = max(0, (i div group - back) group) <= j <= i     (back < 0: lo = 0, the full causal mask).
 * With group = 1 it is a sliding window of back + 1 tokens.  Parameters are unchanged; the products
 * skip the columns left of each row block's first key.  NF_EINVAL unless group >= 1. */
int nf_attention_set_window(nf_attention *A, int group, int back);

/* nf_reals of forward cache and of scratch for n sequences of T tokens. */
size_t nf_attention_workspace(const nf_attention *A, int n, int T);
size_t nf_attention_scratch(const nf_attention *A, int n, int T);

/* y (n*T, d) = attention(x (n*T, d)); caches into ws.  y must not alias x. */
void nf_attention_forward(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *scratch, nf_real *y,
                          const nf_real *x, int n, int T);
/* After forward with the same ws and x: dx (n*T, d) += dL/dx (dx may be NULL), P->grad += dL/dtheta.
 * _set writes dx = dL/dx instead (no zeroing pass; the same values as adding into zeros). */
void nf_attention_backward(const nf_attention *A, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                           const nf_real *dy, const nf_real *x, int n, int T);
void nf_attention_backward_set(const nf_attention *A, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                               const nf_real *dy, const nf_real *x, int n, int T);

/* Decoding.  kv: nf_attention_kv_size reals, keys (n, Tmax, d) then values (n, Tmax, d); ws:
 * nf_attention_step_workspace reals.  Step t reads positions 0..t-1 of kv (written by earlier steps),
 * writes position t, and sets y (n, d).  NF_EINVAL unless 0 <= t < Tmax. */
size_t nf_attention_kv_size(const nf_attention *A, int n, int Tmax);
size_t nf_attention_step_workspace(const nf_attention *A, int n, int Tmax);
int nf_attention_step(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                      const nf_real *x, int t, int n);
/* The same for a block of m tokens per sequence at positions t0..t0+m-1 at once (one pass: x and y
 * (n, m, d), sequence-major; each row attends to the cache before t0 and to the block's rows up to
 * itself): a Jacobi sweep over the block rewrites the same cache positions, so sweeping it again
 * from a new iterate needs no rewind.  ws: nf_attention_block_workspace reals. */
size_t nf_attention_block_workspace(const nf_attention *A, int n, int m, int Tmax);
int nf_attention_block(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                       const nf_real *x, int t0, int m, int n);

#endif
