/* training/video_denoiser.h - the learned causal denoiser of the video kind (flow-score matching,
 * STARFlow-V): a small transformer over a video's latent tokens in the flow's frame-major order
 * (T th tw tokens of tc = keep^2 c values) that predicts the flow's own scaled score
 *     D(z)_t ~ sigma^2 d/dz_t log p(z)
 * from tokens 0..t (itself included: causal in time, so a frame's correction never reads a later
 * frame).  At sampling time z0 + D(z0) replaces the score step z0 + sigma^2 grad log p(z0), one
 * transformer pass instead of a backward pass through the whole flow.
 *
 * It is nf_transformer (nn/transformer.h: output t reads inputs 0..t-1 behind a start token) built
 * with T_tok + 1 positions on the shifted input
 *     u = [z_0, ..., z_{T_tok-1}, 0]  ->  y (T_tok + 1 rows),   D(z)_t = y_{t+1}
 * so row t + 1 reads z_0..z_t; row 0 (the start token alone) is dropped, and the last input (0) is
 * never read.  The output projection starts at zero, so a new denoiser predicts 0.  Its parameters
 * live under "denoiser." in the model's store.
 */
#ifndef NF_VIDEO_DENOISER_H
#define NF_VIDEO_DENOISER_H

#include "core/params.h"

typedef struct nf_video_denoiser nf_video_denoiser;

/* A denoiser of `tokens` tokens of `tc` values with `layers` blocks of width `width` and `heads`
 * heads, registered in P under "denoiser.", initialised from seed. */
int nf_video_denoiser_create(nf_video_denoiser **out, nf_params *P, int tokens, int tc, int width, int heads,
                             int layers, uint64_t seed);
void nf_video_denoiser_free(nf_video_denoiser *d);     /* NULL is harmless */
/* out (n, tokens tc) = D(z (n, tokens tc)); caches what backward needs (buffers grow once, when a
 * larger n arrives).  out may alias z. */
int nf_video_denoiser_forward(nf_video_denoiser *d, const nf_params *P, nf_real *out, const nf_real *z, int n);
/* After forward of the same n: given dL/dD (n, tokens tc), ADD dL/dtheta into P->grad. */
void nf_video_denoiser_backward(nf_video_denoiser *d, nf_params *P, const nf_real *dout, int n);

#endif
