/* training/video_autoencoder.h - the learned latent codec of a video model: a small convolutional
 * autoencoder from frames to the latent grid the block DCT gives (training/video_codec.h), so the
 * flow on top is the same whichever codec is chosen.
 *
 * Frames are NHWC images of h x w x c (as datasets/images.h), the latent a th x tw x tc image with
 * th = h / B, tw = w / B for a block side B = 2^S (S = 1..5) and tc channels.  With W = `width`:
 *
 *   encoder   a_0 = y;  for s = 0..S-1:  r_s = relu(conv3x3(a_s) -> W),  a_{s+1} = s2d(r_s)  (4W)
 *             u = conv1x1(a_S) -> tc,     z = (u - m) / sd             (m, sd: per latent channel)
 *   decoder   u = sd z + m;  b_S = relu(conv1x1(u) -> 4W);
 *             for s = S-1..0:  e_s = d2s(b_{s+1}) (W),  b_s = conv3x3(e_s) -> (s > 0 ? relu, 4W : c)
 *             y' = b_0
 *
 * s2d is the 2 x 2 space-to-depth rearrangement (pixel (2i + di, 2j + dj) channel k of the input is
 * pixel (i, j) channel (2 di + dj) W + k of the output) and d2s its inverse, both free of
 * parameters; the convolutions are nn/conv2d.h layers ('same' padding).  The codec is trained on
 * the reconstruction error alone,
 *     loss = mean over the frames' values of (y' - y)^2        (u unnormalised: m, sd cancel),
 * then frozen; m and sd (the per-channel mean and standard deviation of u over a fixed set of
 * training frames, set once after training) give the flow latents of unit scale.  The encoder is not
 * invertible: a flow on z is a density of the latents, not of the pixels.
 *
 * Parameters live in the model's store P under "codec." (registered by create after whatever the
 * store already holds), m and sd in the state store S ("codec.latent_mean", "codec.latent_scale";
 * 0 and 1 until set).  Frames are processed in chunks of at most NF_VIDEO_AE_CHUNK, so the buffers
 * (allocated by create) do not grow with the batch; calls are not thread-safe (one model, one
 * caller).
 */
#ifndef NF_TRAINING_VIDEO_AUTOENCODER_H
#define NF_TRAINING_VIDEO_AUTOENCODER_H

#include <stdint.h>

#include "core/params.h"

#define NF_VIDEO_AE_CHUNK 32

typedef struct nf_video_ae nf_video_ae;

/* An autoencoder for frames h x w x c to a latent of (h/block) x (w/block) x tc, `width` hidden
 * channels, weights drawn from seed.  NF_EINVAL naming the size that does not fit: block a power of
 * two in 2..32 dividing h and w, tc and width in 1..4096. */
int nf_video_ae_create(nf_video_ae **ae, nf_params *P, nf_params *S, int h, int w, int c, int block, int tc,
                       int width, uint64_t seed);
void nf_video_ae_free(nf_video_ae *ae); /* NULL is harmless */
/* Latent values a frame: th * tw * tc. */
int nf_video_ae_dim(const nf_video_ae *ae);
/* z (n, dim) = the normalised latents of frames y (n, h*w*c). */
int nf_video_ae_encode(nf_video_ae *ae, const nf_params *P, const nf_params *S, nf_real *z, const nf_real *y, int n);
/* y (n, h*w*c) = the decoded frames of latents z (n, dim). */
int nf_video_ae_decode(nf_video_ae *ae, const nf_params *P, const nf_params *S, nf_real *y, const nf_real *z, int n);
/* The reconstruction loss of frames y (n, h*w*c): *mse = mean squared difference per value (in y's
 * units); per_frame (n, may be NULL) each frame's mean; with grad, P->grad += dL/dtheta of the
 * codec's entries for L = *mse * scale (scale: 1, or the share of a larger mean). */
int nf_video_ae_loss(nf_video_ae *ae, nf_params *P, const nf_real *y, int n, int grad, double scale, double *mse,
                     double *per_frame);
/* Set m and sd (S) from the unnormalised latents of frames y (n, h*w*c). */
int nf_video_ae_set_stats(nf_video_ae *ae, const nf_params *P, nf_params *S, const nf_real *y, int n);
/* The first entry of P the codec holds and how many (its stage trains them). */
void nf_video_ae_params(const nf_video_ae *ae, size_t *first, size_t *count);

#endif
