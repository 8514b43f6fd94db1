/* nn/convnet.h - the convolutional conditioner of Glow / RealNVP coupling layers on NHWC images.
 *
 *   z1 = conv_kxk(x) + Wc ctx_b      (cin -> hidden; the context term is one bias per image)
 *   a1 = relu(z1)
 *   a2 = relu(conv_1x1(a1))          (hidden -> hidden)
 *   y  = conv_kxk(a2)                (hidden -> out, zero-initialised: the network starts at y = 0,
 *                                     so a coupling built on it starts as the identity)
 *
 * x is (n, h, w, in), y (n, h, w, out), ctx (n, ctx) or NULL when ctx = 0.  The context enters as a
 * per-image bias of the first layer through Wc (hidden, ctx) (no bias of its own: the convolution
 * has one), so a class-conditional flow adds one small product per batch.  The convolutions are
 * nn/conv2d.h layers (im2col + one nf_gemm over the whole batch).
 *
 * Conventions as nf_mlp (nn/nn.h): parameters under "<name>." in the store ("<name>.in.weight",
 * "<name>.mid.bias", "<name>.out.weight", "<name>.ctx.weight"), nf_convnet_workspace(m, n, h, w)
 * nf_reals per batch, the same workspace passed to forward and then backward (forward caches the
 * activations there; backward leaves them intact, so it may run again), backward ACCUMULATES into
 * dx, dctx (either may be NULL) and P->grad.  Nothing allocates.
 */
#ifndef NF_CONVNET_H
#define NF_CONVNET_H

#include "nn/conv2d.h"

typedef struct nf_convnet_config {
    int in;                /* input channels */
    int ctx;               /* context width (0: none) */
    int hidden;            /* channels of both hidden layers */
    int out;               /* output channels */
    int k;                 /* kernel size of the first and last convolution (odd); the middle one is 1x1 */
    int zero_init_output;  /* 1: the last convolution starts at zero */
} nf_convnet_config;

typedef struct nf_convnet {
    nf_convnet_config cfg;
    nf_conv2d in, mid, out;
    size_t wc;             /* offset of Wc (hidden, ctx) when ctx > 0 */
} nf_convnet;

/* Register and initialise the parameters (uniform +-1/sqrt(fan_in) as torch; Wc with fan_in ctx).
 * NF_EINVAL naming `name` and the bad size. */
int nf_convnet_init(nf_convnet *m, nf_params *P, const char *name, const nf_convnet_config *cfg, nf_rng *rng);
size_t nf_convnet_workspace(const nf_convnet *m, int n, int h, int w);
/* y (n, h, w, out) = net(x (n, h, w, in), ctx (n, ctx) or NULL). */
void nf_convnet_forward(const nf_convnet *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                        const nf_real *ctx, int n, int h, int w);
/* After forward with the same ws and inputs: dx += dL/dx, dctx += dL/dctx (either may be NULL),
 * P->grad += dL/dtheta, for dy = dL/dy (n, h, w, out). */
void nf_convnet_backward(const nf_convnet *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                         const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int h, int w);

#endif
