/* training/video_codec.h - the latent codec of a video model: an orthonormal block DCT truncated to
 * each block's lowest frequencies.
 *
 * A frame (h, w, ch), NHWC as datasets/images.h, is cut into (h/B) x (w/B) blocks of B x B pixels
 * (B = block).  Each channel of each block gets the orthonormal 2-D DCT-II
 *     X[u][v] = a_u a_v sum_{m,n=0}^{B-1} x[m][n] cos(pi (2m+1) u / 2B) cos(pi (2n+1) v / 2B),
 *     a_0 = sqrt(1/B), a_k = sqrt(2/B) (k >= 1),
 * (u the vertical, v the horizontal frequency) and only the keep x keep lowest, u, v < keep, are
 * kept.  The map E: frame -> latent is a set of orthonormal rows, so decode D = E^T is its adjoint:
 * E D = I (exact on the latent space), D E the orthogonal projection onto the kept frequencies,
 * ||E x|| <= ||x||, and at keep = block D E = I.
 *
 * Latent layout.  The latent of a frame is an image of th = h/B rows, tw = w/B columns and
 * tc = keep*keep*ch channels, NHWC: latent pixel (bi, bj) holds the kept coefficients of block
 * (bi, bj) (pixels bi*B..bi*B+B-1 down, bj*B..bj*B+B-1 across), and coefficient X[u][v] of channel
 * k sits at
 *     z[(bi*tw + bj)*tc + (u*keep + v)*ch + k]
 * (channel-minor; the DC terms of all channels come first).  nf_dct_codec_dim = th*tw*tc.
 *
 * Threads.  FFTW plans (REDFT10 forward, REDFT01 inverse, of one B x B block, fftw3 in the double
 * build and fftw3f in the float build) are made once in create (FFTW's planner is not thread-safe:
 * create codecs from one thread, as any FFTW plan); encode and decode run them with FFTW's new-array
 * execute on buffers on the caller's stack (block <= NF_DCT_MAX_BLOCK), so concurrent calls on one
 * codec are safe and allocate nothing.  A call over many frames runs its frames on OpenMP threads.
 *
 *   nf_dct_codec *c;
 *   nf_dct_codec_create(&c, 32, 32, 1, 4, 2);      // 8 x 8 blocks of 4 x 4, 2 x 2 kept: dim 256
 *   nf_dct_encode(c, z, x, T);                     // x (T, 32*32*1) -> z (T, 256)
 *   nf_dct_decode(c, xr, z, T);                    // z -> xr (T, 1024), the low-pass frames
 *   nf_dct_codec_free(c);
 */
#ifndef NF_TRAINING_VIDEO_CODEC_H
#define NF_TRAINING_VIDEO_CODEC_H

#include "core/error.h"

#define NF_DCT_MAX_BLOCK 32

typedef struct nf_dct_codec nf_dct_codec;

/* A codec for frames of h x w x ch: block divides h and w, 1 <= block <= NF_DCT_MAX_BLOCK,
 * 1 <= keep <= block, ch >= 1.  NF_EINVAL naming the sizes and what was expected. */
int nf_dct_codec_create(nf_dct_codec **c, int h, int w, int ch, int block, int keep);
void nf_dct_codec_free(nf_dct_codec *c);   /* NULL is harmless */
/* Latent values per frame: (h/block) * (w/block) * keep*keep * ch. */
int nf_dct_codec_dim(const nf_dct_codec *c);
/* The latent as an image (layout above): th = h/block, tw = w/block, tc = keep*keep*ch. */
void nf_dct_codec_shape(const nf_dct_codec *c, int *th, int *tw, int *tc);
/* z (nframes, dim) = E x, x (nframes, h*w*ch). */
void nf_dct_encode(const nf_dct_codec *c, nf_real *z, const nf_real *x, int nframes);
/* x (nframes, h*w*ch) = E^T z, z (nframes, dim): the adjoint, the inverse on the kept subspace. */
void nf_dct_decode(const nf_dct_codec *c, nf_real *x, const nf_real *z, int nframes);
/* RMS of x - decode(encode(x)) over all nframes*h*w*ch values, in x's units (computed in
 * double); NAN (with the error set) when out of memory. */
double nf_dct_codec_recon_error(const nf_dct_codec *c, const nf_real *x, int nframes);

#endif
