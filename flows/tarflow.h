/* flows/tarflow.h - hooks into a TarFlow block (flows/tarflow.c) for a loss on its transformer's
 * hidden state besides the likelihood: reverse representation alignment (training/image_align.h)
 * reads the final hidden state h (n, T, d) of a block's last density-direction forward and hands
 * back dL/dh, which the block's backward adds to what the likelihood sends through its transformer.
 *
 * Token order: position t of a block predicts token t, the patch at raster index t, or T-1-t when
 * the block has reverse=1; h[i, t] has read the tokens before t (and the context) only.
 *
 * Use: nf_flow_log_prob, then h = nf_tarflow_hidden(b, n) for the chosen blocks, the second loss
 * and its dL/dh, nf_tarflow_set_hidden_grad(b, dh) on each, nf_flow_backward, then
 * nf_tarflow_set_hidden_grad(b, NULL).  The pointers stay owned by the flow (h) and the caller (dh).
 */
#ifndef NF_TARFLOW_H
#define NF_TARFLOW_H

#include "flows/bijector.h"

extern const nf_bijector_type nf_bijector_tarflow;

/* 1 if b is a tarflow block. */
int nf_tarflow_is(const nf_bijector *b);
/* Its tokens T, transformer width d and token order (reverse 1: raster order reversed); NF_EINVAL
 * naming the bijector for another type. */
int nf_tarflow_shape(const nf_bijector *b, int *T, int *d, int *reverse);
/* The hidden state (n, T, d) of the last forward (density direction) of n rows, in the block's
 * token order, valid until the flow's next call; NULL for another type, another n, or after an
 * inverse. */
const nf_real *nf_tarflow_hidden(const nf_bijector *b, int n);
/* Every following backward adds dh (n, T, d) (block token order) to dL/dh; NULL stops it. */
void nf_tarflow_set_hidden_grad(nf_bijector *b, const nf_real *dh);

#endif
