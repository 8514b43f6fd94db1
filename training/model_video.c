/* training/model_video.c - the "video" model kind (formulas in training/model_video.h). */
#include "training/model_video.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "training/keyed_noise.h"
#include "training/micro_batch.h"
#include "training/video_autoencoder.h"
#include "training/video_codec.h"
#include "training/video_denoiser.h"

#define LN2 0.69314718055994530942

/* ---- configuration ------------------------------------------------------------------------------ */

void nf_video_config_init(nf_video_config *c)
{
    memset(c, 0, sizeof *c);
    c->frames = 16, c->h = c->w = 32, c->c = 1, c->levels = 256;
    c->block = 8, c->keep = 4;
    c->local_blocks = 2, c->local_layers = 1;
    c->global_blocks = 1, c->global_layers = 4;
    c->width = 64, c->heads = 4;
    c->context = 1; /* a window of one earlier frame: better held-out bits/dim than all (bench/RESULTS.md) */
    c->noise = 0.02;
    c->denoiser_layers = 2, c->denoiser_width = 32;
    c->ae_width = 16;
    c->seed = 1;
}

int nf_video_config_check(const nf_video_config *c)
{
    if (c->frames < 1 || c->frames > 4096) return nf_error(NF_EINVAL, "%d frames: expected 1..4096", c->frames);
    if (c->h < 1 || c->w < 1 || c->c < 1 || (double)c->frames * c->h * c->w * c->c > (1 << 24))
        return nf_error(NF_EINVAL, "video shape %d x %dx%dx%d: expected sides >= 1 and at most 2^24 values", c->frames,
                        c->h, c->w, c->c);
    if (c->levels < 2 || c->levels > 65536) return nf_error(NF_EINVAL, "%d grey levels: expected 2..65536", c->levels);
    if (c->block < 1 || c->block > 32 || c->h % c->block || c->w % c->block)
        return nf_error(NF_EINVAL, "DCT block %d: expected 1..32 dividing the frame sides (%dx%d)", c->block, c->h, c->w);
    if (c->keep < 1 || c->keep > c->block)
        return nf_error(NF_EINVAL, "keep %d: expected 1..%d (the block side)", c->keep, c->block);
    if (c->codec != 0 && c->codec != 1) return nf_error(NF_EINVAL, "codec %d: expected 0 (dct) or 1 (autoencoder)", c->codec);
    if (c->codec == 1 && (c->block < 2 || (c->block & (c->block - 1))))
        return nf_error(NF_EINVAL, "an autoencoder codec halves the frame per level: block %d (expected a power of two "
                                   "in 2..32)", c->block);
    if (c->codec == 1 && (c->ae_width < 1 || c->ae_width > 4096))
        return nf_error(NF_EINVAL, "autoencoder width %d: expected 1..4096", c->ae_width);
    if (c->local_blocks < 0 || c->local_blocks > 64 || c->global_blocks < 1 || c->global_blocks > 64)
        return nf_error(NF_EINVAL, "%d local and %d global blocks: expected 0..64 and 1..64", c->local_blocks,
                        c->global_blocks);
    if (c->local_layers < 1 || c->local_layers > 64 || c->global_layers < 1 || c->global_layers > 64)
        return nf_error(NF_EINVAL, "%d local and %d global layers: expected 1..64 each", c->local_layers,
                        c->global_layers);
    if (c->width < 1 || c->heads < 1 || c->width % c->heads || c->width > 4096)
        return nf_error(NF_EINVAL, "transformer width %d and %d heads: the width (<= 4096) must be a multiple of the "
                                   "heads", c->width, c->heads);
    if (c->context < 0 || c->context > 4096)
        return nf_error(NF_EINVAL, "context of %d frames: expected 0 (all earlier frames) .. 4096", c->context);
    if (!(c->noise >= 0 && c->noise <= 1)) return nf_error(NF_EINVAL, "latent noise %g: expected 0..1", c->noise);
    if (c->denoiser != 0 && c->denoiser != 1)
        return nf_error(NF_EINVAL, "denoiser %d: expected 0 (none) or 1 (learned)", c->denoiser);
    if (c->denoiser) {
        if (c->denoiser_layers < 1 || c->denoiser_layers > 64)
            return nf_error(NF_EINVAL, "%d denoiser layers: expected 1..64", c->denoiser_layers);
        if (c->denoiser_width < 1 || c->denoiser_width > 4096 || c->denoiser_width % c->heads)
            return nf_error(NF_EINVAL, "denoiser width %d: expected 1..4096 and a multiple of the %d heads",
                            c->denoiser_width, c->heads);
        if (!(c->noise > 0))
            return nf_error(NF_EINVAL, "a learned denoiser needs latent noise to remove (noise %g: expected > 0)",
                            c->noise);
    }
    return NF_OK;
}

static int put(char *spec, size_t size, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int put(char *spec, size_t size, size_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(spec + *at, size - *at, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= size - *at) return nf_error(NF_EINVAL, "video flow spec longer than %zu characters", size);
    *at += (size_t)k;
    return NF_OK;
}

/* The frame-local blocks (tarflow frames=T, token order alternating), appended to spec. */
static int put_local(const nf_video_config *c, char *spec, size_t size, size_t *at)
{
    const int th = c->h / c->block, tw = c->w / c->block, tc = c->keep * c->keep * c->c, T = c->frames;
    for (int k = 0; k < c->local_blocks; k++)
        NF_TRY(put(spec, size, at, "%starflow(h=%d,w=%d,c=%d,frames=%d,width=%d,heads=%d,layers=%d,reverse=%d)",
                   *at ? ", " : "", T * th, tw, tc, T, c->width, c->heads, c->local_layers, k % 2));
    return NF_OK;
}

/* The global blocks over all frames' tokens (with context, each layer's attention windowed to the
 * token's frame and the context before it), appended to spec.  The baseline's see one frame at a
 * time (positions embedded one by one in the video's: factorised ones, tarflow time_pos=T, learnt
 * no faster, bench/RESULTS.md). */
static int put_global(const nf_video_config *c, char *spec, size_t size, size_t *at)
{
    const int th = c->h / c->block, tw = c->w / c->block, tc = c->keep * c->keep * c->c, T = c->frames;
    char frames[64] = "";
    if (c->independent) snprintf(frames, sizeof frames, "frames=%d,", T);
    else if (c->context > 0) snprintf(frames, sizeof frames, "seq_frames=%d,window=%d,", T, c->context);
    for (int k = 0; k < c->global_blocks; k++)
        NF_TRY(put(spec, size, at, "%starflow(h=%d,w=%d,c=%d,%swidth=%d,heads=%d,layers=%d)", *at ? ", " : "", T * th,
                   tw, tc, frames, c->width, c->heads, c->global_layers));
    return NF_OK;
}

int nf_video_spec(const nf_video_config *c, char *spec, size_t size)
{
    NF_TRY(nf_video_config_check(c));
    size_t at = 0;
    spec[0] = '\0';
    if (c->global_first) {
        NF_TRY(put_global(c, spec, size, &at));
        return put_local(c, spec, size, &at);
    }
    NF_TRY(put_local(c, spec, size, &at));
    return put_global(c, spec, size, &at);
}

/* ---- state -------------------------------------------------------------------------------------- */

typedef struct {
    nf_video_config cfg;
    nf_dct_codec *codec;  /* the DCT (cfg.codec 0), or */
    nf_video_ae *ae;      /* the autoencoder (cfg.codec 1), its entries P[ae_first, +ae_count) */
    size_t ae_first, ae_count;
    int D, F, L;          /* pixels a video, latent values a frame, latent values a video (T F) */
    int cap;              /* videos the buffers hold */
    nf_real *y;           /* (cap, D) dequantised pixels */
    nf_real *z;           /* (cap, L) latents */
    nf_real *logp, *dlogp;/* (cap) */
    size_t s_draws;       /* offset in S of the count of training losses: the key of their noise */
    /* the learned denoiser (cfg.denoiser): its entries of P follow the flow's [0, flow_count) */
    nf_video_denoiser *dn;
    size_t flow_count, dn_count;
    nf_real *g, *dd;      /* (cap, L) the flow's scaled score; the denoiser's output, then dL/dD */
    double *frame_err;    /* (cap T) the codec's error per frame */
    nf_real *gsave;       /* (P->n) the gradient held while a score is computed (grown once) */
    size_t gsave_cap;
    double denoise_s;     /* wall time of the last sample's denoising */
    nf_micro_batches micro; /* the flow's training batches in micro-batches (training/micro_batch.h) */
} video_state;

static int reserve(video_state *st, int n)
{
    if (n <= st->cap) return NF_OK;
    free(st->y), free(st->z), free(st->logp), free(st->dlogp), free(st->g), free(st->dd), free(st->frame_err);
    st->frame_err = malloc((size_t)n * st->cfg.frames * sizeof *st->frame_err);
    st->y = malloc((size_t)n * st->D * sizeof *st->y);
    st->z = malloc((size_t)n * st->L * sizeof *st->z);
    st->logp = malloc((size_t)n * sizeof *st->logp);
    st->dlogp = malloc((size_t)n * sizeof *st->dlogp);
    st->g = malloc((size_t)n * st->L * sizeof *st->g);
    st->dd = malloc((size_t)n * st->L * sizeof *st->dd);
    if (!st->y || !st->z || !st->logp || !st->dlogp || !st->g || !st->dd || !st->frame_err) {
        st->cap = 0;
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d videos of %d values", n, st->D);
    }
    st->cap = n;
    return NF_OK;
}

/* y = (x + u) / L - 1/2: u keyed by (seed, draw, the video's index) (draw 0: evaluation's), or
 * drawn from rng when given. */
static int dequantize(const video_state *st, nf_real *y, const nf_real *x, const size_t *idx, int n, nf_rng *rng,
                      uint64_t draw)
{
    const int D = st->D;
    const double L = st->cfg.levels;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < D; k++) {
            const double v = x[(size_t)i * D + k];
            if (!(v >= 0 && v <= L - 1))
                return nf_error(NF_EDATA, "video %zu, value %d (frame %d) is %g; expected a grey level in 0..%d",
                                idx ? idx[i] : (size_t)i, k, k / (st->cfg.h * st->cfg.w * st->cfg.c), v,
                                st->cfg.levels - 1);
        }
    /* keyed uniforms: each video's from its own key, so the videos split over the threads and the
     * values stay the same for any thread count */
#pragma omp parallel for schedule(static) if (!rng && n > 1 && (size_t)n * D > 8192)
    for (int i = 0; i < n; i++) {
        const uint64_t key = nf_noise_key(st->cfg.seed, draw, idx ? idx[i] : (size_t)i);
        for (int k = 0; k < D; k++) {
            const double u = rng ? nf_rng_uniform(rng) : nf_keyed_uniform(key, (uint64_t)k);
            y[(size_t)i * D + k] = (nf_real)((x[(size_t)i * D + k] + u) / L - 0.5);
        }
    }
    return NF_OK;
}

static double bpd_of(const video_state *st, double logp)
{
    return -(logp - st->L * log((double)st->cfg.levels)) / (st->L * LN2);
}

/* st->z = E st->y (+ noise eps keyed by (seed, draw, idx) when `noisy`; draw 0's is evaluation's
 * fixed draw, independent of its dequantisation, which uses the first D uniforms of the key). */
/* z (nframes, F) of dequantised frames y by the model's codec, and back */
static void codec_encode(const nf_model *m, nf_real *z, const nf_real *y, int nframes)
{
    video_state *st = m->state;
    if (st->ae) nf_video_ae_encode(st->ae, m->P, m->S, z, y, nframes);
    else nf_dct_encode(st->codec, z, y, nframes);
}

static void codec_decode(const nf_model *m, nf_real *y, const nf_real *z, int nframes)
{
    video_state *st = m->state;
    if (st->ae) nf_video_ae_decode(st->ae, m->P, m->S, y, z, nframes);
    else nf_dct_decode(st->codec, y, z, nframes);
}

static void encode(const nf_model *m, int n, const size_t *idx, uint64_t draw, int noisy)
{
    video_state *st = m->state;
    codec_encode(m, st->z, st->y, n * st->cfg.frames);
    if (noisy && st->cfg.noise > 0)
#pragma omp parallel for schedule(static) if (n > 1 && (size_t)n * st->L > 16384)
        for (int i = 0; i < n; i++) {
            const uint64_t key = nf_noise_key(st->cfg.seed, draw, idx ? idx[i] : (size_t)i);
            for (int k = 0; k < st->L; k++)
                st->z[(size_t)i * st->L + k] += (nf_real)(st->cfg.noise * nf_keyed_normal(key, (uint64_t)st->D + 2 * (uint64_t)k));
        }
}

/* logp (n) of the latents of n dequantised videos st->y, no latent noise, with nothing to follow
 * (evaluation): the flow in chunks whose workspace stays bounded (nf_flow_chunk_rows), each video's
 * log-density its own, so the numbers are those of one call. */
static int latent_logp_only(nf_model *m, int n, const size_t *idx)
{
    video_state *st = m->state;
    encode(m, n, idx, 0, 0);
    const int L = m->flow->dim, rows = nf_flow_rows_independent(m->flow) ? nf_flow_chunk_rows(m->flow, n) : n;
    for (int at = 0; at < n; at += rows) {
        const int k = n - at < rows ? n - at : rows;
        NF_TRY(nf_flow_log_prob(m->flow, st->logp + at, st->z + (size_t)at * L, NULL, idx ? idx + at : NULL, k));
    }
    return NF_OK;
}

/* out (n, L) = sigma^2 d/dz log p(z): the flow's log_prob, then its backward with dL/dlogp = 1 and
 * the input gradient; the flow is held fixed, so P->grad is given back as it was (the flow's
 * parameter gradient of this pass is not the loss's). */
static int flow_score(nf_model *m, nf_real *out, const nf_real *z, const size_t *idx, int n)
{
    video_state *st = m->state;
    if (st->gsave_cap < m->P->n) {
        free(st->gsave);
        st->gsave = malloc(m->P->n * sizeof *st->gsave);
        st->gsave_cap = st->gsave ? m->P->n : 0;
        if (!st->gsave) return nf_error(NF_ENOMEM, "out of memory for the flow's score");
    }
    NF_TRY(nf_flow_log_prob(m->flow, st->logp, z, NULL, idx, n));
    for (int i = 0; i < n; i++) st->dlogp[i] = 1;
    memset(out, 0, (size_t)n * st->L * sizeof *out);
    memcpy(st->gsave, m->P->grad, m->P->n * sizeof *st->gsave);
    const int rc = nf_flow_backward(m->flow, st->dlogp, out, NULL);
    memcpy(m->P->grad, st->gsave, m->P->n * sizeof *st->gsave);
    NF_TRY(rc);
    const nf_real s2 = (nf_real)(st->cfg.noise * st->cfg.noise);
    for (size_t k = 0; k < (size_t)n * st->L; k++) out[k] *= s2;
    return NF_OK;
}

/* Stage "denoiser" on n videos x (levels): zt = E y + sigma eps (training draw `draw`, or with
 * draw 0 evaluation's fixed noise), g = sigma^2 grad log p(zt) (the flow fixed),
 *     e_i = ||D(zt_i) - g_i||^2 / L,   loss = (1/n) sum_i e_i,   values[i] = -e_i (may be NULL);
 * with `grad`: dL/dD_i = 2 (D(zt_i) - g_i) / (n L), backpropagated into the denoiser's entries. */
static int denoiser_pass(nf_model *m, const nf_real *x, const size_t *idx, int n, uint64_t draw, int grad, double *loss,
                         double *values)
{
    video_state *st = m->state;
    if (!st->dn) return nf_error(NF_EINVAL, "the video model has no learned denoiser (fit with --denoiser)");
    NF_TRY(reserve(st, n));
    NF_TRY(dequantize(st, st->y, x, idx, n, NULL, draw));
    encode(m, n, idx, draw, 1);
    NF_TRY(flow_score(m, st->g, st->z, idx, n));
    NF_TRY(nf_video_denoiser_forward(st->dn, m->P, st->dd, st->z, n));
    const int L = st->L;
    double s = 0;
    for (int i = 0; i < n; i++) {
        double e = 0;
        for (int k = 0; k < L; k++) {
            const double r = (double)st->dd[(size_t)i * L + k] - st->g[(size_t)i * L + k];
            e += r * r;
        }
        e /= L;
        if (values) values[i] = -e;
        s += e;
    }
    *loss = s / n;
    if (!grad) return NF_OK;
    const double c = 2.0 / ((double)n * L);
    for (size_t k = 0; k < (size_t)n * L; k++) st->dd[k] = (nf_real)(c * ((double)st->dd[k] - st->g[k]));
    nf_video_denoiser_backward(st->dn, m->P, st->dd, n);
    return NF_OK;
}

/* Stage "codec" on n videos x (levels): the autoencoder's reconstruction error of the dequantised
 * frames (training draw `draw`, 0: evaluation's fixed one), loss = mean over all values; values[i]
 * (may be NULL) minus video i's mean; with grad the codec's gradient. */
static int codec_pass(nf_model *m, const nf_real *x, const size_t *idx, int n, uint64_t draw, int grad, double *loss,
                      double *values)
{
    video_state *st = m->state;
    const int T = st->cfg.frames;
    NF_TRY(reserve(st, n));
    NF_TRY(dequantize(st, st->y, x, idx, n, NULL, draw));
    NF_TRY(nf_video_ae_loss(st->ae, m->P, st->y, n * T, grad, 1.0, loss, st->frame_err));
    for (int i = 0; values && i < n; i++) {
        double e = 0;
        for (int t = 0; t < T; t++) e += st->frame_err[(size_t)i * T + t];
        values[i] = -e / T;
    }
    return NF_OK;
}

/* What the current stage trains: the codec (an autoencoder's first stage), the flow, the denoiser. */
typedef enum { ROLE_CODEC, ROLE_FLOW, ROLE_DENOISER } stage_role;

static stage_role role_of(const nf_model *m, int stage)
{
    const video_state *st = m->state;
    const int k = stage - (st->ae ? 1 : 0);
    return k < 0 ? ROLE_CODEC : k == 0 ? ROLE_FLOW : ROLE_DENOISER;
}

/* ---- the kind ----------------------------------------------------------------------------------- */

/* loss = mean_i bpd_i with fresh dequantisation and latent noise: dL/dlogp_i = -1 / (n L ln 2). */
static int video_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    (void)rng; /* the noise is keyed by the count of draws and each video's index */
    video_state *st = m->state;
    const int n = b->n;
    NF_TRY(reserve(st, n));
    const uint64_t draw = (uint64_t)m->S->value[st->s_draws] + 1;
    m->S->value[st->s_draws] += 1;
    const stage_role role = role_of(m, m->stage);
    if (role == ROLE_CODEC) return codec_pass(m, b->x, b->idx, n, draw, 1, loss, NULL);
    if (role == ROLE_DENOISER) return denoiser_pass(m, b->x, b->idx, n, draw, 1, loss, NULL);
    NF_TRY(dequantize(st, st->y, b->x, b->idx, n, NULL, draw));
    for (int i = 0; i < n; i++) st->dlogp[i] = (nf_real)(-1.0 / (n * st->L * LN2));
    encode(m, n, b->idx, draw, 1);
    /* each video's loss its own: in micro-batches */
    NF_TRY(nf_micro_batches_run(&st->micro, m->flow, st->logp, st->z, NULL, b->idx, st->dlogp, n,
                                nf_micro_batch_rows(st->L, 0, n)));
    double s = 0;
    for (int i = 0; i < n; i++) s += bpd_of(st, st->logp[i]);
    *loss = s / n;
    return NF_OK;
}

/* values[i] = -bpd of video i, deterministic dequantisation, no latent noise; in stage "denoiser"
 * minus the denoiser's error e_i on evaluation's fixed noise. */
static int video_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    video_state *st = m->state;
    double loss;
    const stage_role role = role_of(m, m->stage);
    if (role == ROLE_CODEC) return codec_pass(m, b->x, b->idx, b->n, 0, 0, &loss, values);
    if (role == ROLE_DENOISER) return denoiser_pass(m, b->x, b->idx, b->n, 0, 0, &loss, values);
    NF_TRY(reserve(st, b->n));
    NF_TRY(dequantize(st, st->y, b->x, b->idx, b->n, NULL, 0));
    NF_TRY(latent_logp_only(m, b->n, b->idx));
    for (int i = 0; i < b->n; i++) values[i] = -bpd_of(st, st->logp[i]);
    return NF_OK;
}

static void video_set_training(nf_model *m, int training) { nf_flow_set_training(m->flow, training); }

/* Stage "codec" trains P[ae_first, +ae_count), "flow" P[0, flow_count), "denoiser" P[flow_count,
 * +dn_count). */
static int video_set_stage(nf_model *m, int stage)
{
    const video_state *st = m->state;
    switch (role_of(m, stage)) {
    case ROLE_CODEC: m->train_first = st->ae_first, m->train_count = st->ae_count; break;
    case ROLE_FLOW: m->train_first = 0, m->train_count = st->flow_count; break;
    case ROLE_DENOISER: m->train_first = st->flow_count, m->train_count = st->dn_count; break;
    }
    return NF_OK;
}

/* The flow's stage begins after the codec's: the latents' per-channel mean and scale from the
 * trained autoencoder on the frames of the first (up to) 64 training videos, at evaluation's fixed
 * dequantisation (the same videos in every process: a share reads those it does not hold). */
static int video_stage_begin(nf_model *m, const nf_source *train)
{
    video_state *st = m->state;
    if (!st->ae || role_of(m, m->stage) != ROLE_FLOW) return NF_OK;
    const int n = (int)(train->n < 64 ? train->n : 64);
    if (n < 1) return nf_error(NF_EDATA, "%s: no training videos to set the latent scale from", train->name);
    size_t idx[64];
    for (int i = 0; i < n; i++) idx[i] = (size_t)i;
    nf_batch b = {0};
    int rc = nf_source_fetch(train, idx, n, &b);
    if (rc == NF_OK) rc = reserve(st, n);
    if (rc == NF_OK) rc = dequantize(st, st->y, b.x, b.idx, n, NULL, 0);
    if (rc == NF_OK) rc = nf_video_ae_set_stats(st->ae, m->P, m->S, st->y, n * st->cfg.frames);
    nf_batch_free(&b);
    return rc;
}

static const nf_model_type nf_model_video_denoised;

static const nf_model_type nf_model_video_ae, nf_model_video_ae_denoised;

static const char *const INT_FIELDS[] = {"frames", "h", "w", "c", "levels", "block", "keep", "local_blocks",
                                         "local_layers", "global_blocks", "global_layers", "width", "heads"};
static int *int_field(nf_video_config *c, int k)
{
    int *f[] = {&c->frames,       &c->h,           &c->w,           &c->c,     &c->levels,
                &c->block,        &c->keep,        &c->local_blocks, &c->local_layers,
                &c->global_blocks, &c->global_layers, &c->width,      &c->heads};
    return f[k];
}
#define N_INT_FIELDS ((int)(sizeof INT_FIELDS / sizeof INT_FIELDS[0]))

static int video_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const video_state *st = m->state;
    nf_video_config c = st->cfg;
    char path[256];
    snprintf(path, sizeof path, "%s/video", group);
    NF_TRY(nf_h5_group(f, path));
    for (int k = 0; k < N_INT_FIELDS; k++) NF_TRY(nf_h5_attr_set_int64(f, path, INT_FIELDS[k], *int_field(&c, k)));
    NF_TRY(nf_h5_attr_set_double(f, path, "noise", c.noise));
    NF_TRY(nf_h5_attr_set_int64(f, path, "seed", (int64_t)c.seed));
    NF_TRY(nf_h5_attr_set_int64(f, path, "independent", c.independent));
    /* the order and the window only when set (an unset one reads back as the files before them meant) */
    if (c.global_first) NF_TRY(nf_h5_attr_set_int64(f, path, "global_first", c.global_first));
    if (c.context) NF_TRY(nf_h5_attr_set_int64(f, path, "context", c.context));
    if (c.denoiser) { /* only then: a model without one writes the files it always wrote */
        NF_TRY(nf_h5_attr_set_int64(f, path, "denoiser", c.denoiser));
        NF_TRY(nf_h5_attr_set_int64(f, path, "denoiser_layers", c.denoiser_layers));
        NF_TRY(nf_h5_attr_set_int64(f, path, "denoiser_width", c.denoiser_width));
    }
    if (c.codec) { /* likewise */
        NF_TRY(nf_h5_attr_set_int64(f, path, "codec", c.codec));
        NF_TRY(nf_h5_attr_set_int64(f, path, "ae_width", c.ae_width));
    }
    snprintf(path, sizeof path, "%s/flow", group);
    return nf_model_flow_save(m->flow, f, path);
}

static void video_destroy(nf_model *m)
{
    video_state *st = m->state;
    if (st) {
        nf_dct_codec_free(st->codec);
        nf_video_ae_free(st->ae);
        nf_video_denoiser_free(st->dn);
        free(st->y), free(st->z), free(st->logp), free(st->dlogp), free(st->g), free(st->dd), free(st->gsave);
        free(st->frame_err);
        nf_micro_batches_free(&st->micro);
    }
    free(st);
    nf_flow_free(m->flow);
    m->flow = NULL;
    m->P = m->S = NULL;
    m->state = NULL;
}

/* m's components for configuration c: the codec, and the flow from c's spec or (f not NULL) rebuilt
 * from the file's group; the flow owns the store. */
static int build(nf_model *m, const nf_video_config *c, nf_h5 *f, const char *group)
{
    video_state *st = nf_calloc(1, sizeof *st, "video model");
    if (!st) return NF_ENOMEM;
    st->cfg = *c;
    m->state = st;
    m->type = &nf_model_video;
    st->D = c->frames * c->h * c->w * c->c;
    int rc = nf_dct_codec_create(&st->codec, c->h, c->w, c->c, c->block, c->keep);
    if (rc == NF_OK) {
        st->F = nf_dct_codec_dim(st->codec);
        st->L = c->frames * st->F;
    }
    char *spec = rc == NF_OK && !f ? malloc(NF_VIDEO_SPEC_MAX) : NULL;
    if (rc == NF_OK && !f && !spec) rc = nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK && !f) rc = nf_video_spec(c, spec, NF_VIDEO_SPEC_MAX);
    nf_flow *flow = NULL;
    if (rc == NF_OK) rc = f ? nf_model_flow_load(&flow, f, group, NULL, NULL) : nf_flow_build(&flow, spec, st->L, 0, c->seed, NULL, NULL, "");
    free(spec);
    m->flow = flow;
    if (flow) m->P = flow->P, m->S = flow->S;
    if (rc == NF_OK && (flow->dim != st->L || flow->ctx_dim != 0))
        rc = nf_error(NF_EFORMAT, "the flow has %d dimensions and %d context values; the video's latent %d and none",
                      flow->dim, flow->ctx_dim, st->L);
    if (rc == NF_OK) rc = nf_params_add(m->S, "video.draws", 1, &st->s_draws);
    if (rc == NF_OK) st->flow_count = m->P->n;
    if (rc == NF_OK && c->denoiser) {
        /* after the flow's entries, so the flow's weights are those of the model without one */
        const int th = c->h / c->block, tw = c->w / c->block;
        rc = nf_video_denoiser_create(&st->dn, m->P, c->frames * th * tw, c->keep * c->keep * c->c, c->denoiser_width,
                                      c->heads, c->denoiser_layers, c->seed);
        st->dn_count = m->P->n - st->flow_count;
        m->type = &nf_model_video_denoised;
    }
    if (rc == NF_OK && c->codec == 1) {
        /* last, so the flow's and the denoiser's weights are those of a model on the DCT */
        rc = nf_video_ae_create(&st->ae, m->P, m->S, c->h, c->w, c->c, c->block, c->keep * c->keep * c->c, c->ae_width,
                                c->seed ^ 0xae5eedu);
        if (rc == NF_OK) nf_video_ae_params(st->ae, &st->ae_first, &st->ae_count);
        m->type = c->denoiser ? &nf_model_video_ae_denoised : &nf_model_video_ae;
    }
    if (rc == NF_OK && (c->denoiser || c->codec)) {
        /* a new model starts with its first stage; a saved one is finished (its last stage) unless
         * the trainer resumes it at the stage of its checkpoint */
        m->stage = f ? m->type->n_stages - 1 : 0;
        rc = video_set_stage(m, m->stage);
    }
    return rc;
}

static int video_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    nf_video_config c;
    nf_video_config_init(&c);
    char path[256];
    snprintf(path, sizeof path, "%s/video", group);
    for (int k = 0; k < N_INT_FIELDS; k++) {
        int64_t v;
        NF_TRY(nf_h5_attr_get_int64(f, path, INT_FIELDS[k], &v));
        if (v < 0 || v > (1 << 24))
            return nf_error(NF_EFORMAT, "%s:%s: %s is %lld", nf_h5_path(f), path, INT_FIELDS[k], (long long)v);
        *int_field(&c, k) = (int)v;
    }
    int64_t seed;
    NF_TRY(nf_h5_attr_get_double(f, path, "noise", &c.noise));
    NF_TRY(nf_h5_attr_get_int64(f, path, "seed", &seed));
    c.seed = (uint64_t)seed;
    int64_t ind = 0;
    NF_TRY(nf_h5_attr_get_int64(f, path, "independent", &ind));
    c.independent = ind != 0;
    c.global_first = c.context = 0; /* absent: local blocks first, every earlier frame (files before them) */
    if (nf_h5_attr_exists(f, path, "global_first")) {
        NF_TRY(nf_h5_attr_get_int64(f, path, "global_first", &ind));
        c.global_first = ind != 0;
    }
    if (nf_h5_attr_exists(f, path, "context")) {
        NF_TRY(nf_h5_attr_get_int64(f, path, "context", &ind));
        if (ind < 0 || ind > 4096) return nf_error(NF_EFORMAT, "%s:%s: context %lld", nf_h5_path(f), path, (long long)ind);
        c.context = (int)ind;
    }
    c.denoiser = c.denoiser_layers = c.denoiser_width = 0; /* absent: none (files before the denoiser) */
    if (nf_h5_attr_exists(f, path, "codec")) { /* absent: the DCT (files before the autoencoder) */
        int64_t v, w;
        NF_TRY(nf_h5_attr_get_int64(f, path, "codec", &v));
        NF_TRY(nf_h5_attr_get_int64(f, path, "ae_width", &w));
        if (v < 0 || v > 1 || w < 1 || w > 4096)
            return nf_error(NF_EFORMAT, "%s:%s: codec %lld, ae_width %lld", nf_h5_path(f), path, (long long)v,
                            (long long)w);
        c.codec = (int)v, c.ae_width = (int)w;
    }
    if (nf_h5_attr_exists(f, path, "denoiser")) {
        static const char *const DN[] = {"denoiser", "denoiser_layers", "denoiser_width"};
        int *dst[] = {&c.denoiser, &c.denoiser_layers, &c.denoiser_width};
        for (int k = 0; k < 3; k++) {
            int64_t v;
            NF_TRY(nf_h5_attr_get_int64(f, path, DN[k], &v));
            if (v < 0 || v > 4096)
                return nf_error(NF_EFORMAT, "%s:%s: %s is %lld", nf_h5_path(f), path, DN[k], (long long)v);
            *dst[k] = (int)v;
        }
    }
    int rc = nf_video_config_check(&c);
    snprintf(path, sizeof path, "%s/flow", group);
    if (rc == NF_OK) rc = build(m, &c, f, path);
    if (rc != NF_OK) {
        video_destroy(m);
        return nf_error_context(rc, "%s", nf_h5_path(f));
    }
    return NF_OK;
}

#define VIDEO_KIND_FIELDS                                                                                            \
    .kind = "video", .command = "nf video", .source_kind = "rows", .metric = "neg_bits_per_dim",                      \
    .flow_on_transformed_data = 1, .loss = video_loss, .eval = video_eval, .set_training = video_set_training,        \
    .save = video_save, .load = video_load, .destroy = video_destroy, .stage_begin = video_stage_begin

const nf_model_type nf_model_video = {
    VIDEO_KIND_FIELDS,
    .summary = "a latent video flow (block-DCT codec, frame-local and causal global TarFlow blocks), in bits per "
               "dimension",
};

static const char *const STAGE_NAMES[] = {"flow", "denoiser"};
/* the denoiser stage's eval is minus its mean squared error per latent value */
static const char *const STAGE_METRICS[] = {"neg_bits_per_dim", "neg_mse"};

/* The same kind with a learned denoiser: two stages (the validation metric of the second is minus
 * the denoiser's mean squared error per latent value). */
static const nf_model_type nf_model_video_denoised = {
    VIDEO_KIND_FIELDS,
    .summary = "a latent video flow (block-DCT codec, frame-local and causal global TarFlow blocks), in bits per "
               "dimension, with a learned causal denoiser (stages: flow, denoiser)",
    .n_stages = 2,
    .stage_names = STAGE_NAMES,
    .stage_metrics = STAGE_METRICS,
    .set_stage = video_set_stage,
};

/* With the learned autoencoder: its stage "codec" first (metric: minus the reconstruction's mean
 * squared error per value). */
static const char *const AE_STAGE_NAMES[] = {"codec", "flow", "denoiser"};
static const char *const AE_STAGE_METRICS[] = {"neg_mse", "neg_bits_per_dim", "neg_mse"};

static const nf_model_type nf_model_video_ae = {
    VIDEO_KIND_FIELDS,
    .summary = "a latent video flow (learned autoencoder codec, frame-local and causal global TarFlow blocks), in "
               "bits per latent dimension (stages: codec, flow)",
    .n_stages = 2,
    .stage_names = AE_STAGE_NAMES,
    .stage_metrics = AE_STAGE_METRICS,
    .set_stage = video_set_stage,
};

static const nf_model_type nf_model_video_ae_denoised = {
    VIDEO_KIND_FIELDS,
    .summary = "a latent video flow (learned autoencoder codec, frame-local and causal global TarFlow blocks), in "
               "bits per latent dimension, with a learned causal denoiser (stages: codec, flow, denoiser)",
    .n_stages = 3,
    .stage_names = AE_STAGE_NAMES,
    .stage_metrics = AE_STAGE_METRICS,
    .set_stage = video_set_stage,
};

int nf_model_video_create(nf_model **out, const nf_video_config *cfg)
{
    *out = NULL;
    NF_TRY(nf_video_config_check(cfg));
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) return NF_ENOMEM;
    int rc = build(m, cfg, NULL, NULL);
    if (rc != NF_OK) {
        video_destroy(m);
        free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

const nf_video_config *nf_model_video_config(const nf_model *m)
{
    return m && (m->type == &nf_model_video || m->type == &nf_model_video_denoised || m->type == &nf_model_video_ae ||
                 m->type == &nf_model_video_ae_denoised)
               ? &((const video_state *)m->state)->cfg
               : NULL;
}

static int check_kind(const nf_model *m, const char *what)
{
    return nf_model_video_config(m) ? NF_OK : nf_error(NF_EINVAL, "%s needs a video model (nf video fit)", what);
}

int nf_model_video_frame_latent(const nf_model *m)
{
    return nf_model_video_config(m) ? ((const video_state *)m->state)->F : 0;
}

int nf_model_video_frame_tokens(const nf_model *m)
{
    const nf_video_config *c = nf_model_video_config(m);
    return c ? (c->h / c->block) * (c->w / c->block) : 0;
}

int nf_model_video_bpd(nf_model *m, double *bpd, const nf_real *x, int n, nf_rng *rng)
{
    NF_TRY(check_kind(m, "bits per dimension"));
    if (n < 1) return nf_error(NF_EINVAL, "%d videos: expected at least 1", n);
    video_state *st = m->state;
    NF_TRY(reserve(st, n));
    nf_model_set_training(m, 0);
    NF_TRY(dequantize(st, st->y, x, NULL, n, rng, 0));
    NF_TRY(latent_logp_only(m, n, NULL));
    for (int i = 0; i < n; i++) bpd[i] = bpd_of(st, st->logp[i]);
    return NF_OK;
}

int nf_model_video_codec_error(nf_model *m, const nf_real *x, int n, double *rms)
{
    NF_TRY(check_kind(m, "the codec error"));
    video_state *st = m->state;
    if (!st->ae) {
        double e = nf_dct_codec_recon_error(st->codec, x, n * st->cfg.frames);
        if (isnan(e)) return NF_ENOMEM;
        *rms = e;
        return NF_OK;
    }
    /* the autoencoder on each grey level's centre, (v + 1/2) / L - 1/2: its error in levels is L
     * times the error in those units */
    if (n < 1) return nf_error(NF_EINVAL, "%d videos: expected at least 1", n);
    const double L = st->cfg.levels;
    double s = 0;
    for (int at = 0; at < n; at += 16) {
        const int k = n - at < 16 ? n - at : 16;
        NF_TRY(reserve(st, k));
        for (size_t q = 0; q < (size_t)k * st->D; q++) st->y[q] = (nf_real)((x[(size_t)at * st->D + q] + 0.5) / L - 0.5);
        double mse;
        NF_TRY(nf_video_ae_loss(st->ae, m->P, st->y, k * st->cfg.frames, 0, 1.0, &mse, NULL));
        s += mse * k;
    }
    *rms = L * sqrt(s / n);
    return NF_OK;
}

void nf_video_sample_config_init(nf_video_sample_config *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 1;
    s->method = NF_INVERT_SEQUENTIAL;
    s->tol = 1e-4;
    s->by_frame = 1;
    s->denoise = NF_VIDEO_DENOISE_NONE;
}

void nf_video_sample_config_init_for(nf_video_sample_config *s, const nf_model *m)
{
    nf_video_sample_config_init(s);
    const nf_video_config *c = nf_model_video_config(m);
    if (c && c->denoiser) s->denoise = NF_VIDEO_DENOISE_LEARNED;
}

static const char *const DENOISE_NAMES[] = {"none", "flow", "learned"};

int nf_video_denoise_parse(const char *name, nf_video_denoise *out)
{
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, DENOISE_NAMES[k])) {
            *out = (nf_video_denoise)k;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "denoising '%s': expected %s", name, NF_VIDEO_DENOISE_NAMES);
}

const char *nf_video_denoise_name(nf_video_denoise d)
{
    return d >= NF_VIDEO_DENOISE_NONE && d <= NF_VIDEO_DENOISE_LEARNED ? DENOISE_NAMES[d] : "?";
}

int nf_model_video_denoiser_loss(nf_model *m, const nf_real *x, const size_t *idx, int n, uint64_t draw,
                                 double *loss, nf_real *zt, nf_real *g)
{
    NF_TRY(check_kind(m, "the denoiser's loss"));
    if (n < 1) return nf_error(NF_EINVAL, "%d videos: expected at least 1", n);
    video_state *st = m->state;
    NF_TRY(denoiser_pass(m, x, idx, n, draw, 0, loss, NULL));
    if (zt) memcpy(zt, st->z, (size_t)n * st->L * sizeof *zt);
    if (g) memcpy(g, st->g, (size_t)n * st->L * sizeof *g);
    return NF_OK;
}

int nf_model_video_denoise_latents(nf_model *m, nf_real *out, const nf_real *z, int n)
{
    NF_TRY(check_kind(m, "the learned denoiser"));
    video_state *st = m->state;
    if (!st->dn) return nf_error(NF_EINVAL, "the video model has no learned denoiser (fit with --denoiser)");
    if (n < 1) return nf_error(NF_EINVAL, "%d videos: expected at least 1", n);
    return nf_video_denoiser_forward(st->dn, m->P, out, z, n);
}

int nf_model_video_flow_score(nf_model *m, nf_real *out, const nf_real *z, int n)
{
    NF_TRY(check_kind(m, "the flow's score"));
    if (n < 1) return nf_error(NF_EINVAL, "%d videos: expected at least 1", n);
    NF_TRY(reserve(m->state, n));
    nf_model_set_training(m, 0);
    return flow_score(m, out, z, NULL, n);
}

size_t nf_model_video_denoiser_params(const nf_model *m)
{
    const video_state *st = nf_model_video_config(m) ? m->state : NULL;
    return st && st->dn ? st->dn_count : 0;
}

double nf_model_video_last_denoise_seconds(const nf_model *m)
{
    return nf_model_video_config(m) ? ((const video_state *)m->state)->denoise_s : 0;
}

/* The drawn frames' latents z0 (n, L) (frames given..T-1) moved to the posterior mean of the clean
 * latents given the noisy ones: z0 + sigma^2 grad log p(z0) (flow) or z0 + D(z0) (learned); the
 * given frames' latents are left as they are. */
static int denoise_latents(nf_model *m, nf_real *z0, int n, const nf_video_sample_config *sc)
{
    video_state *st = m->state;
    if (sc->denoise == NF_VIDEO_DENOISE_FLOW) NF_TRY(flow_score(m, st->g, z0, NULL, n));
    else NF_TRY(nf_video_denoiser_forward(st->dn, m->P, st->g, z0, n));
    for (int i = 0; i < n; i++) {
        nf_real *z = z0 + (size_t)i * st->L;
        const nf_real *step = st->g + (size_t)i * st->L;
        for (size_t k = (size_t)sc->given * st->F; k < (size_t)st->L; k++) z[k] += step[k];
    }
    return NF_OK;
}

/* With given frames: the latents of the first `given` frames of the prefix videos (centre of each
 * grey level; the later frames, which no given latent depends on, hold the last given frame), which
 * the inversion maps back to those frames. */
static int given_latents(nf_model *m, const nf_video_sample_config *sc, int n)
{
    video_state *st = m->state;
    const int T = st->cfg.frames, P = st->D / T, g = sc->given;
    const double L = st->cfg.levels;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            const nf_real *src = sc->prefix + (size_t)i * st->D + (size_t)(t < g ? t : g - 1) * P;
            nf_real *dst = st->y + (size_t)i * st->D + (size_t)t * P;
            for (int k = 0; k < P; k++) {
                const double v = src[k];
                if (!(v >= 0 && v <= L - 1))
                    return nf_error(NF_EDATA, "given video %d, frame %d, value %d is %g; expected a grey level in 0..%d", i,
                                    t, k, v, st->cfg.levels - 1);
                dst[k] = (nf_real)((v + 0.5) / L - 0.5);
            }
        }
    codec_encode(m, st->z, st->y, n * T);
    NF_TRY(nf_flow_log_prob(m->flow, st->logp, st->z, NULL, NULL, n));
    return nf_flow_last_latent(m->flow, st->z);
}

/* n videos x (n, D) from the model, all in one pass through the flow (rows of nf_model_video_sample's
 * chunks; the given frames' prefix is the chunk's); st->denoise_s gains the denoising's seconds. */
static int sample_videos(nf_model *m, nf_real *x, int n, const nf_video_sample_config *sc, nf_rng *rng)
{
    video_state *st = m->state;
    const int T = st->cfg.frames, F = st->F, P = st->D / T;
    NF_TRY(reserve(st, n));
    if (sc->given > 0) NF_TRY(given_latents(m, sc, n));
    /* the latents of the frames to draw: N(0, T^2 I), in row order */
    nf_real *draw = malloc((size_t)n * (T - sc->given) * F * sizeof *draw);
    if (!draw) return nf_error(NF_ENOMEM, "out of memory for %d videos", n);
    nf_rng_fill_normal(rng, draw, (size_t)n * (T - sc->given) * F);
    for (int i = 0; i < n; i++) {
        nf_real *z = st->z + (size_t)i * st->L + (size_t)sc->given * F;
        const nf_real *d = draw + (size_t)i * (T - sc->given) * F;
        for (size_t k = 0; k < (size_t)(T - sc->given) * F; k++) z[k] = (nf_real)(sc->temperature * d[k]);
    }
    free(draw);
    /* z -> latent frames (global blocks first, then the local ones) */
    nf_real *z0 = malloc((size_t)n * st->L * sizeof *z0);
    if (!z0) return nf_error(NF_ENOMEM, "out of memory for %d videos", n);
    int rc = nf_flow_sample_latent(m->flow, z0, NULL, st->z, NULL, n);
    if (rc == NF_OK && sc->denoise != NF_VIDEO_DENOISE_NONE) {
        const double t0 = nf_seconds();
        rc = denoise_latents(m, z0, n, sc);
        st->denoise_s += nf_seconds() - t0;
    }
    if (rc == NF_OK) codec_decode(m, st->y, z0, n * T);
    free(z0);
    NF_TRY(rc);
    const double L = st->cfg.levels;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            nf_real *dst = x + (size_t)i * st->D + (size_t)t * P;
            if (t < sc->given) {
                memcpy(dst, sc->prefix + (size_t)i * st->D + (size_t)t * P, (size_t)P * sizeof *dst);
                continue;
            }
            const nf_real *y = st->y + (size_t)i * st->D + (size_t)t * P;
            for (int k = 0; k < P; k++) {
                const double v = (y[k] + 0.5) * L - 0.5;
                dst[k] = (nf_real)(v < 0 ? 0 : v > L - 1 ? L - 1 : v);
            }
        }
    return NF_OK;
}

typedef struct video_draw {
    nf_model *m;
    nf_real *x;
    const nf_video_sample_config *sc;
    nf_rng *rng;
} video_draw;

static int draw_rows(void *arg, int at, int k)
{
    const video_draw *d = arg;
    const size_t D = (size_t)((const video_state *)d->m->state)->D;
    nf_video_sample_config sc = *d->sc;
    if (sc.given > 0) sc.prefix += (size_t)at * D;
    return sample_videos(d->m, d->x + (size_t)at * D, k, &sc, d->rng);
}

/* In chunks of at least NF_VIDEO_SAMPLE_ROWS videos whose workspace stays bounded otherwise
 * (nf_flow_in_chunks: 400 videos in one pass took 760 MB).  The latents are drawn in row order, so
 * token-by-token decoding gives the videos of one pass.  Jacobi stops a chunk's frame when no value of
 * the chunk moves more than the tolerance, so its videos depend on the others in their chunk, within
 * that tolerance (as they did on the others in one pass). */
int nf_model_video_sample(nf_model *m, nf_real *x, int n, const nf_video_sample_config *sc, nf_rng *rng, int *passes)
{
    NF_TRY(check_kind(m, "video sampling"));
    video_state *st = m->state;
    const int T = st->cfg.frames;
    if (n < 1) return nf_error(NF_EINVAL, "%d videos to sample; expected at least 1", n);
    if (!(sc->temperature > 0 && sc->temperature <= 10))
        return nf_error(NF_EINVAL, "temperature %g: expected 0 < T <= 10", sc->temperature);
    if (sc->given < 0 || sc->given >= T || (sc->given > 0 && !sc->prefix))
        return nf_error(NF_EINVAL, "%d given frames%s: expected 0..%d with the videos they come from", sc->given,
                        sc->given > 0 && !sc->prefix ? " without videos" : "", T - 1);
    if (sc->denoise < NF_VIDEO_DENOISE_NONE || sc->denoise > NF_VIDEO_DENOISE_LEARNED)
        return nf_error(NF_EINVAL, "denoising %d: expected %s", (int)sc->denoise, NF_VIDEO_DENOISE_NAMES);
    if (sc->denoise == NF_VIDEO_DENOISE_LEARNED && !st->dn)
        return nf_error(NF_EINVAL, "learned denoising: the video model has no learned denoiser (fit with --denoiser)");
    st->denoise_s = 0;
    nf_model_set_training(m, 0);
    nf_flow_set_invert(m->flow, sc->method, sc->tol, 0);
    nf_flow_set_jacobi_block(m->flow, sc->by_frame ? nf_model_video_frame_tokens(m) : 0);
    video_draw d = {.m = m, .x = x, .sc = sc, .rng = rng};
    NF_TRY(nf_flow_in_chunks(m->flow, n, NF_VIDEO_SAMPLE_ROWS, draw_rows, &d));
    if (passes) *passes = nf_flow_last_sweeps(m->flow);
    return NF_OK;
}
