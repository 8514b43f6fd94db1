/* training/image_align.h - reverse representation alignment (R-REPA; Chen et al. 2025, "Flowing
 * Backwards") for the image kind's TarFlow: a frozen encoder of the clean image, and a loss that
 * pulls chosen hidden states of the flow's generative direction towards its features.
 *
 * The encoder is a small convolutional classifier on the clean image y0 = (x + 1/2) / L - 1/2
 * (h, w, c), trained first on the data's classes and then held fixed:
 *     a1 = conv3x3(y0) (c -> 16), r1 = relu(a1), a2 = conv3x3(r1) (16 -> 32), r2 = relu(a2)
 *     e_r = mean of r2 over the p x p pixels of patch r (raster order): per-token features (T, 32)
 *     logits = Wh [e_0, ..., e_{T-1}] + bh (K),   CE = logsumexp(logits) - logits[class]
 * (the head reads the patch features side by side rather than their global mean: on 8x8 digits where
 * a stroke is tells the class, and the features aligned to are then the ones the classifier uses).
 *
 * Alignment.  The generative direction of a K-block TarFlow runs the blocks last to first; its
 * block j is the density chain's block K-1-j, and at the exact inverse that block's transformer
 * reads the same intermediate image as in the density direction.  So the hidden state the
 * generative pass computes at block j is h = the final hidden state (n, T, d) of chain block
 * K-1-j in log_prob (flows/tarflow.h), read there without a second pass.  For each chosen j, with
 * position t mapped to its raster patch r (reversed blocks: r = T-1-t), a learned projection
 * q = W_j h_t + b_j (d -> 32) and e_hat = e_r / |e_r|:
 *     cos_{i,r} = q . e_hat / |q|,    L_align = w sum_j mean_{i,r} (1 - cos_{i,r})
 *     dL/dq = -(w / (n T)) (e_hat / |q| - cos q / |q|^2)
 * and dL/dh = dL/dq W_j goes back into the block's transformer with its likelihood gradient.
 *
 * Parameters live in the model's store: "align.enc.*" (trained in stage "encoder"), the projections
 * "align.proj<j>.*" (trained with the flow in stage "flow").  Buffers grow per batch outside the
 * kernels; nothing here prints.
 */
#ifndef NF_IMAGE_ALIGN_H
#define NF_IMAGE_ALIGN_H

#include "flows/flow.h"
#include "nn/conv2d.h"
#include "nn/nn.h"

#define NF_ALIGN_C1 16     /* encoder channels: first convolution */
#define NF_ALIGN_FEAT 32   /* second convolution = the feature width aligned to */
#define NF_ALIGN_MAX_BLOCKS 64

typedef struct nf_image_align {
    int h, w, c, patch, classes, T;
    nf_conv2d conv1, conv2;
    nf_linear head;                       /* FEAT -> classes */
    int nblk;                             /* chosen generative blocks */
    int gen[NF_ALIGN_MAX_BLOCKS];         /* their generative indices j */
    int chain[NF_ALIGN_MAX_BLOCKS];       /* their bijector indices in the flow (nb-1-j) */
    int d;                                /* transformer width (the same in every chosen block) */
    nf_linear proj[NF_ALIGN_MAX_BLOCKS];  /* d -> FEAT */
    int cap;
    nf_real *a1, *r1, *a2, *r2, *pool, *logits, *dlogits, *dpool, *d2, *d1, *cws;
    nf_real *feat, *q, *dq, *hr, *dhr, *dh; /* dh: (nblk, n, T, d) */
} nf_image_align;

/* Register the encoder "align.enc.conv1|conv2|head" in P for (h, w, c) images of `classes`
 * classes cut in patches of side `patch`. */
int nf_image_align_encoder_init(nf_image_align *a, nf_params *P, int h, int w, int c, int patch, int classes,
                                nf_rng *rng);
/* Register one projection per generative block set in `layers` (bit j: block j), each a tarflow
 * block of the flow with T tokens; NF_EINVAL naming the block otherwise. */
int nf_image_align_proj_init(nf_image_align *a, nf_params *P, const nf_flow *flow, uint64_t layers, nf_rng *rng);
void nf_image_align_free(nf_image_align *a); /* the buffers (the struct is the caller's) */

/* Stage "encoder": cross-entropy of the classifier on clean images y0 (n, h*w*c) of classes cls (n);
 * ce (n) per image (may be NULL), *mean their mean; grad: add dmean/dtheta to P->grad. */
int nf_image_align_encoder_loss(nf_image_align *a, nf_params *P, const nf_real *y0, const int *cls, int n, int grad,
                                double *ce, double *mean);
/* The classifier's class of each clean image (pred (n)). */
int nf_image_align_encoder_predict(nf_image_align *a, const nf_params *P, const nf_real *y0, int n, int *pred);
/* Stage "flow", after nf_flow_log_prob(flow, ..., n): *loss = L_align for clean images y0
 * (n, h*w*c) with weight w; grad: the projections' gradients into P->grad and dL/dh handed to the
 * chosen blocks for the next nf_flow_backward (nf_image_align_clear afterwards). */
int nf_image_align_loss(nf_image_align *a, nf_params *P, nf_flow *flow, const nf_real *y0, int n, double w, int grad,
                        double *loss);
void nf_image_align_clear(nf_image_align *a, nf_flow *flow);

#endif
