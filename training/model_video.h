/* training/model_video.h - the "video" model kind: a latent video flow in the manner of STARFlow-V
 * (Apple, 2025), at CPU scale.
 *
 * A video of T frames h x w x c of grey levels 0..L-1 (datasets/videos.h: rows of D = T h w c
 * values, frame-major) is
 *   dequantised   y = (x + u) / L - 1/2, u ~ U(0, 1)^D (keyed noise, training/keyed_noise.h);
 *   encoded       frame by frame by an orthonormal block DCT that keeps the keep x keep lowest
 *                 frequencies of each block x block block (training/video_codec.h): z0_t = E y_t, a
 *                 latent frame of th x tw "pixels" (th = h / block, tw = w / block) of
 *                 tc = keep^2 c values, F = th tw tc values a frame, T F a video, frame-major;
 *   flowed        z = G(Lc(z0)), base N(0, I):
 *                   Lc  local_blocks shallow TarFlow blocks within each frame (tarflow frames=T: a
 *                       frame's th tw tokens are their own sequence; token order alternating),
 *                   G   global_blocks deep causal TarFlow blocks over all T th tw tokens in frame-major
 *                       order, never reversed: in each attention layer a token reads the earlier
 *                       ones of its own frame and every token of the `context` frames before it
 *                       (1; 0: all earlier frames), so the block reaches layers x context frames
 *                       back; with global_first the order is z = Lc(G(z0)) instead;
 *   scored        log p(z0) = log N(z) + log|det dLc| + log|det dG|, and
 *                   bits/dim = -(log p(z0) - T F log L) / (T F ln 2)
 *                 per kept latent dimension.  The codec is orthonormal, so with keep = block it is a
 *                 rotation of the frame and this is the bits/dim of the pixels; with keep < block it
 *                 is the bits/dim of the kept DCT coefficients (the pixels' projection onto them).
 * With `codec` = 1 the encoder is a learned convolutional autoencoder to the same th x tw x tc grid
 * (training/video_autoencoder.h), trained first on the reconstruction error of the dequantised
 * frames (stage "codec"), then frozen; its latents are standardised per channel from the training
 * frames when the flow's stage begins.  The bits/dim are then those of the latents (the same formula,
 * comparable between flows on one codec, not with the DCT's).
 * Causality: the latent of frame t depends on frames 0..t only (Lc is frame-local, G causal in
 * time), so a continuation conditions on given frames by fixing their latents.
 *
 * Training minimises the batch mean of bits/dim, with Gaussian noise of std `noise` added to z0
 * (noise augmentation in latent space).  Sampling draws z ~ N(0, temperature^2 I) and inverts G (the
 * deep one) first: token by token with the key/value cache, or by video-aware Jacobi (each frame's
 * tokens a block of sweeps, starting from the previous frame's tokens, earlier frames cached:
 * flows/tarflow.c, jacobi_block), then Lc frame by frame, then decodes.
 *
 * Denoising (the flow's samples are of the noisy latents zt = z0 + sigma eps, sigma = `noise`): by
 * Tweedie, E[z0 | zt] = zt + sigma^2 grad log p(zt), computed either by the flow's own backward
 * ("flow": TarFlow's score step) or by a small causal transformer D trained to predict it
 * ("learned", flow-score matching, training/video_denoiser.h), one pass instead of a backward.  With
 * `denoiser` = 1 the model trains in two stages over one store: "flow" (the bits/dim loss, the
 * flow's entries) then "denoiser" (only D's entries, which come after the flow's):
 *     zt = E y + sigma eps,   g = sigma^2 grad_z log p(zt)  (the flow held fixed),
 *     loss = mean_i ||D(zt_i) - g_i||^2 / (T F),   validation metric: minus the same on fixed noise.
 */
#ifndef NF_MODEL_VIDEO_H
#define NF_MODEL_VIDEO_H

#include "training/model.h"

#define NF_VIDEO_SPEC_MAX 4096

typedef struct nf_video_config {
    int frames, h, w, c;      /* video shape: T frames h x w x c */
    int levels;               /* grey levels L */
    int block, keep;          /* codec: DCT block side (8), kept frequencies per side (4) */
    int codec;                /* 0 the block DCT; 1 a learned autoencoder to the same latent grid
                                 (training/video_autoencoder.h), trained first (stage "codec") */
    int ae_width;             /* the autoencoder's hidden channels (16) */
    int local_blocks;         /* frame-local TarFlow blocks (2) */
    int local_layers;         /* transformer layers in each (1) */
    int global_blocks;        /* causal TarFlow blocks over the whole video (1) */
    int global_layers;        /* transformer layers in each (4: the deep one) */
    int width, heads;         /* transformer width (64) and heads (4) */
    int independent;          /* 1: the global blocks are frame-local too (frames=T): the baseline
                                 that models each frame alone, with the same parameters */
    int context;              /* frames before its own that a global block's token attends to in each
                                 attention layer (1; 0: all): the block reaches layers x context frames
                                 back, and files before the option read as 0 */
    int global_first;         /* 1: the global blocks on the data side, z = Lc(G(z0)) (they read the
                                 codec's coefficients, where motion is a shift); 0: z = G(Lc(z0)) */
    double noise;             /* std of the latent noise in training (0.02; 0: none) */
    int denoiser;             /* 0 none, 1 a learned causal denoiser (a second training stage) */
    int denoiser_layers;      /* its transformer layers (2) */
    int denoiser_width;       /* its width (32), a multiple of heads */
    uint64_t seed;            /* weights */
} nf_video_config;

extern const nf_model_type nf_model_video;

void nf_video_config_init(nf_video_config *c);
/* Checks every field, with a message naming it and what was expected. */
int nf_video_config_check(const nf_video_config *c);
/* The flow spec over the T F latent values (local blocks, then global blocks). */
int nf_video_spec(const nf_video_config *c, char *spec, size_t size);
int nf_model_video_create(nf_model **m, const nf_video_config *cfg);
/* The configuration of a video model (NULL for another kind). */
const nf_video_config *nf_model_video_config(const nf_model *m);
/* Latent values a frame (F) and tokens a frame (th tw). */
int nf_model_video_frame_latent(const nf_model *m);
int nf_model_video_frame_tokens(const nf_model *m);

/* Bits per kept dimension of n videos x (n, D) in level units, one dequantisation draw each from
 * rng (NULL: the fixed keyed draw of evaluation, by the video's position); bpd (n). */
int nf_model_video_bpd(nf_model *m, double *bpd, const nf_real *x, int n, nf_rng *rng);
/* RMS difference, in grey levels, between n videos and their codec reconstruction (the loss of the
 * dropped DCT coefficients, or the autoencoder's error on the frames' grey-level centres). */
int nf_model_video_codec_error(nf_model *m, const nf_real *x, int n, double *rms);

/* Denoising of sampled latents: none, the flow's score step, the learned denoiser. */
typedef enum { NF_VIDEO_DENOISE_NONE, NF_VIDEO_DENOISE_FLOW, NF_VIDEO_DENOISE_LEARNED } nf_video_denoise;
#define NF_VIDEO_DENOISE_NAMES "none|flow|learned"
/* Parse "none", "flow", "learned"; NF_EINVAL naming the choices otherwise. */
int nf_video_denoise_parse(const char *name, nf_video_denoise *out);
const char *nf_video_denoise_name(nf_video_denoise d);

/* The stage-2 loss of a denoiser model (its mean over n videos x in levels, on noise of training
 * draw `draw`, 0: evaluation's fixed noise; idx may be NULL) without gradients, and the flow's scaled
 * score g = sigma^2 grad log p at the noisy latents zt: zt, g (n, T F) may be NULL.  For tests and
 * measurements. */
int nf_model_video_denoiser_loss(nf_model *m, const nf_real *x, const size_t *idx, int n, uint64_t draw,
                                 double *loss, nf_real *zt, nf_real *g);
/* Entries of P the learned denoiser holds (0: none); they follow the flow's. */
size_t nf_model_video_denoiser_params(const nf_model *m);
/* The learned denoiser's output D(z) (n, T F) at latents z (n, T F); NF_EINVAL without one. */
int nf_model_video_denoise_latents(nf_model *m, nf_real *out, const nf_real *z, int n);
/* The flow's scaled score sigma^2 grad log p(z) (n, T F) at latents z (n, T F). */
int nf_model_video_flow_score(nf_model *m, nf_real *out, const nf_real *z, int n);

typedef struct nf_video_sample_config {
    double temperature;       /* z ~ N(0, T^2 I) (1) */
    nf_invert_method method;  /* the global and local blocks' inversion (NF_INVERT_SEQUENTIAL) */
    double tol;               /* Jacobi: largest change, in y units (1/L a grey level) (1e-4) */
    int by_frame;             /* Jacobi: 1 each frame's tokens in turn (video-aware), 0 all at once */
    int given;                /* frames given: 0 unconditional, 1 image-to-video, k continuation */
    const nf_real *prefix;    /* (n, D) videos whose first `given` frames are kept (levels) */
    nf_video_denoise denoise; /* of the drawn frames' latents before decoding (init: NONE; init_for:
                                 LEARNED when the model has a denoiser) */
} nf_video_sample_config;
void nf_video_sample_config_init(nf_video_sample_config *s);
/* The same with the model's default denoising (learned when it has a denoiser, else none). */
void nf_video_sample_config_init_for(nf_video_sample_config *s, const nf_model *m);
/* Videos sampled in one pass at least (more where the flow's workspace allows, nf_flow_in_chunks).
 * Token by token, a step is one small product per token for every video of the pass: below about 16
 * videos its fixed costs show (6 a pass sampled 30-40% slower than 16 or more), while sampling touches
 * far less than the training workspace nf_flow_chunk_rows counts (the backward pass's caches: about
 * 10 MB a video of the default model, of which sampling touches 1 to 2). */
enum { NF_VIDEO_SAMPLE_ROWS = 32 };
/* Draw n videos x (n, D) in level units (clamped to [0, L-1], not rounded); the given frames are
 * copied from the prefix.  *passes (may be NULL): the sequential passes of the inversion (token
 * steps, or Jacobi sweeps, of all blocks). */
int nf_model_video_sample(nf_model *m, nf_real *x, int n, const nf_video_sample_config *sc, nf_rng *rng, int *passes);
/* Wall-clock seconds the denoising of the last nf_model_video_sample took (0: none). */
double nf_model_video_last_denoise_seconds(const nf_model *m);

#endif
