/* nn/conv2d.h - a 2-D convolution layer on NHWC image batches, with a hand-written backward.
 *
 * Images are channels last, row-major: image b of a batch is h*w*c consecutive reals and entry
 * (i, j, ch) of it is at (i*w + j)*c + ch, so a batch of n images is the (n, h*w*c) row batch every
 * other nf module uses, and equally an (n*h*w, c) matrix with one row per pixel.
 *
 * The layer is stride 1 with 'same' zero padding (p = k/2) and an odd kernel size k:
 *
 *   y[b,i,j,o] = bias[o] + sum_{di,dj<k} sum_{ch<cin} W[o, (di*k + dj)*cin + ch] x[b, i+di-p, j+dj-p, ch]
 *
 * with x outside the image read as 0.  W (cout, k*k*cin) is row-major in the parameter store (each
 * output channel's filter laid out as its own small NHWC patch), bias (cout).  It is computed by
 * im2col: the patch of every output pixel of the whole batch becomes one row of cols
 * (n*h*w, k*k*cin), and one matrix product  y = cols W^T  (nf_gemm) gives the (n*h*w, cout) output,
 * which is the NHWC output itself.  For k = 1 the input is its own cols and nothing is copied.  A
 * narrowing layer (cout < cin) takes its columns on the output side instead: one product
 * Z = x Wt^T (n*h*w, k*k*cout), then each pixel sums its taps' slices of Z (conv2d.c says why).
 *
 * Conventions as nn/nn.h: parameters are offsets into an nf_params store; backward ACCUMULATES into
 * dx (may be NULL) and P->grad.  The workspace is scratch only (the columns): backward rebuilds
 * them from x, which is cheap beside the products, so the scratch need not survive from forward to
 * backward and a network can share one scratch among all its convolutions.  nf_conv2d_workspace
 * says how many nf_reals a batch needs (0 for k = 1).
 */
#ifndef NF_CONV2D_H
#define NF_CONV2D_H

#include "core/params.h"
#include "core/rng.h"

typedef struct nf_conv2d {
    int cin, cout, k;
    size_t w, b;      /* offsets in the store: W (cout, k*k*cin), bias (cout) */
} nf_conv2d;

/* Register "<name>.weight" and "<name>.bias" and draw both from U(-1/sqrt(k*k*cin), +1/sqrt(k*k*cin))
 * (as torch.nn.Conv2d).  NF_EINVAL unless cin, cout >= 1 and k is odd in 1..15. */
int nf_conv2d_init(nf_conv2d *L, nf_params *P, const char *name, int cin, int cout, int k, nf_rng *rng);
/* Zero W and bias (the last layer of a conditioner, so a flow starts as the identity). */
void nf_conv2d_zero(nf_conv2d *L, nf_params *P);
/* Scratch nf_reals forward and backward need for n images of h x w: n*h*w*k*k*cin, or for a
 * narrowing layer n*h*w*k*k*cout + 2*k*k*cout*cin; 0 when k = 1. */
size_t nf_conv2d_workspace(const nf_conv2d *L, int n, int h, int w);
/* y (n, h, w, cout) = conv(x (n, h, w, cin)) + bias; overwrites y. */
void nf_conv2d_forward(const nf_conv2d *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x, int n,
                       int h, int w);
/* dW += dy^T cols(x),  dbias += sum over pixels of dy,  dx += col2im(dy W) (dx may be NULL). */
void nf_conv2d_backward(const nf_conv2d *L, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dy,
                        const nf_real *x, int n, int h, int w);

/* The patches of x (n, h, w, cin) as rows: cols (n*h*w, k*k*cin), zeros outside the image. */
void nf_conv2d_im2col(nf_real *cols, const nf_real *x, int n, int h, int w, int cin, int k);
/* The adjoint: x (n, h, w, cin) += every column entry added back to the pixel it was read from. */
void nf_conv2d_col2im_add(nf_real *x, const nf_real *cols, int n, int h, int w, int cin, int k);

#endif
