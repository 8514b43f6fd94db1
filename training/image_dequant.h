/* training/image_dequant.h - variational dequantisation (Ho et al. 2019, Flow++) for the image kind:
 * a learned distribution q(u | x) of the dequantisation noise u in (0, 1)^D of a clean image x.
 *
 * u = sigmoid(v), v = g(eps; x), eps ~ N(0, I) (n, D), g a chain of K conditional affine couplings on
 * the (h, w, c) image grid.  Coupling k maps a -> a' by
 *     a'_p = a_p exp(s_p) + t_p   at the pixels it transforms,   a'_p = a_p   at the others,
 *     (r, t) = net_k([a masked to the conditioning pixels, x0]),   s = 3 tanh(r / 3),
 * with net_k an nn/convnet.h conditioner (conv kxk, relu, conv 1x1, relu, conv kxk; last layer zero,
 * so g starts as the identity) reading 2c channels: the chain's state at the conditioning pixels (0
 * elsewhere) and the clean image x0 = (x + 1/2) / L - 1/2 everywhere.  Coupling 0 transforms every
 * pixel from x0 alone (a conditional elementwise affine map); coupling k >= 1 is a checkerboard,
 * pixels with (i + j + k) odd transformed.  Then
 *     log q(v | x) = log N(eps) - sum_k sum_p s_p,
 *     log q(u | x) = log q(v | x) - sum_d log sigmoid'(v_d),  log sigmoid'(v) = -|v| - 2 log(1 + e^-|v|).
 * The derivatives used: d log sigmoid'(v)/dv = 1 - 2 sigmoid(v); for one coupling with g = dL/da'
 * and w = dL/d(sum s): dL/dt = g, dL/ds = g a exp(s) + w, dL/dr = dL/ds (1 - (s/3)^2),
 * dL/da = g exp(s) at transformed entries, g + (the conditioner's input gradient) at the others.
 *
 * Parameters "dequant.c<k>.*" in the model's store.  Buffers grow per batch outside the kernels;
 * forward caches what backward needs until the next forward.  Nothing here prints.
 */
#ifndef NF_IMAGE_DEQUANT_H
#define NF_IMAGE_DEQUANT_H

#include "nn/convnet.h"

#define NF_DEQUANT_MAX_LAYERS 16

typedef struct nf_image_dequant {
    int h, w, c, D, layers;
    nf_convnet net[NF_DEQUANT_MAX_LAYERS];
    int cap;
    size_t net_ws;       /* nf_reals of one net's workspace at cap */
    nf_real *a;          /* (layers + 1, cap, D) the chain's states: a_0 = eps, a_K = v */
    nf_real *in, *out;   /* (layers, cap*h*w, 2c) each conditioner's input and output */
    nf_real *ws;         /* (layers, net_ws) */
    nf_real *g, *g2;     /* (cap, D) gradient ping-pong */
    nf_real *dout, *din; /* (cap*h*w, 2c) */
} nf_image_dequant;

/* Register K couplings with conditioners of `hidden` channels in P ("dequant.c<k>") for (h, w, c)
 * images; NF_EINVAL naming the bad size. */
int nf_image_dequant_init(nf_image_dequant *q, nf_params *P, int h, int w, int c, int layers, int hidden, nf_rng *rng);
void nf_image_dequant_free(nf_image_dequant *q); /* the buffers (the struct is the caller's) */

/* v (n, D) = g(eps; x0) and logq (n) = log q(v | x) for base draws eps (n, D) and clean images x0
 * (n, D); caches what nf_image_dequant_backward needs. */
int nf_image_dequant_forward(nf_image_dequant *q, const nf_params *P, nf_real *v, nf_real *logq, const nf_real *eps,
                             const nf_real *x0, int n);
/* After forward on the same n: given dL/dv (n, D) and dL/dlogq (n), add dL/dtheta to P->grad. */
int nf_image_dequant_backward(nf_image_dequant *q, nf_params *P, const nf_real *dv, const nf_real *dlogq, int n);

/* log sigmoid'(v) = log sigmoid(v) + log(1 - sigmoid(v)), stable for any v. */
double nf_log_sigmoid_deriv(double v);

#endif
