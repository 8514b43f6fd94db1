/* training/video_autoencoder.c - the learned latent codec (formulas in video_autoencoder.h).
 *
 * Backward, for dL/dy' on a chunk of frames (b_s, e_s, r_s, a_s the forward's activations; relu'
 * read from the post-activation values, which are > 0 exactly where the input was):
 *   decoder   for s = 0..S-1: [s > 0: mask by b_s > 0]; de_s = conv3x3^T(db_s); db_{s+1} = s2d(de_s)
 *             (d2s's adjoint is s2d); mask by b_S > 0; du = conv1x1^T(db_S)
 *   encoder   da_S = conv1x1^T(du); for s = S-1..0: dr_s = d2s(da_{s+1}); mask by r_s > 0;
 *             da_s = conv3x3^T(dr_s) (not needed at s = 0)
 * Each conv's backward adds its weight and bias gradients to P->grad (nn/conv2d.h).
 */
#include "training/video_autoencoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/conv2d.h"
#include "nn/nn.h"

#define MAX_S 5

struct nf_video_ae {
    int h, w, c, S, W, tc;
    nf_conv2d enc[MAX_S], enc_out, dec_in, dec[MAX_S];
    size_t p_first, p_count, s_mean, s_scale;
    nf_real *r[MAX_S], *a[MAX_S + 1], *e[MAX_S], *b[MAX_S + 1], *u, *g1, *g2, *ws;
};

/* pixels of a frame at level s (h >> s by w >> s) */
static size_t pixels(const nf_video_ae *ae, int s) { return (size_t)(ae->h >> s) * (size_t)(ae->w >> s); }

/* out (n, H/2, W/2, 4C) = 2 x 2 space-to-depth of in (n, H, W, C) */
static void s2d(nf_real *out, const nf_real *in, int n, int H, int Wd, int C)
{
    const int h2 = H / 2, w2 = Wd / 2;
    for (int f = 0; f < n; f++)
        for (int i = 0; i < h2; i++)
            for (int j = 0; j < w2; j++)
                for (int d = 0; d < 4; d++) {
                    const nf_real *src = in + (((size_t)f * H + 2 * i + d / 2) * Wd + 2 * j + d % 2) * C;
                    memcpy(out + (((size_t)f * h2 + i) * w2 + j) * 4 * C + (size_t)d * C, src, (size_t)C * sizeof *src);
                }
}

/* out (n, 2H, 2W, C) = depth-to-space of in (n, H, W, 4C), the inverse of s2d */
static void d2s(nf_real *out, const nf_real *in, int n, int H, int Wd, int C)
{
    const int H2 = 2 * H, W2 = 2 * Wd;
    for (int f = 0; f < n; f++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < Wd; j++)
                for (int d = 0; d < 4; d++) {
                    const nf_real *src = in + (((size_t)f * H + i) * Wd + j) * 4 * C + (size_t)d * C;
                    memcpy(out + (((size_t)f * H2 + 2 * i + d / 2) * W2 + 2 * j + d % 2) * C, src, (size_t)C * sizeof *src);
                }
}

/* ReLU in place, and g *= [a > 0] for the post-activation a: the shared vectorised kernels, as
 * nn/convnet.c uses them */
static void relu_inplace(nf_real *x, size_t n) { nf_act_forward(NF_ACT_RELU, x, x, n); }
static void relu_mask(nf_real *g, const nf_real *a, size_t n) { nf_act_backward_ex(NF_ACT_RELU, 0, g, g, a, a, n, 0); }

void nf_video_ae_free(nf_video_ae *ae)
{
    if (!ae) return;
    for (int s = 0; s <= MAX_S; s++) {
        if (s < MAX_S) free(ae->r[s]), free(ae->e[s]);
        free(ae->a[s]), free(ae->b[s]);
    }
    free(ae->u), free(ae->g1), free(ae->g2), free(ae->ws);
    free(ae);
}

int nf_video_ae_create(nf_video_ae **out, nf_params *P, nf_params *S, int h, int w, int c, int block, int tc,
                       int width, uint64_t seed)
{
    *out = NULL;
    int levels = 0;
    while (levels <= MAX_S && (1 << levels) < block) levels++;
    if (block < 2 || block > 32 || (1 << levels) != block || h % block || w % block)
        return nf_error(NF_EINVAL, "autoencoder block %d: expected a power of two in 2..32 dividing the frame sides "
                                   "(%dx%d)", block, h, w);
    if (c < 1 || tc < 1 || tc > 4096 || width < 1 || width > 4096)
        return nf_error(NF_EINVAL, "autoencoder of %d latent and %d hidden channels: expected 1..4096 each", tc, width);
    nf_video_ae *ae = nf_calloc(1, sizeof *ae, "video autoencoder");
    nf_rng *rng = nf_rng_alloc(seed, 0xae);
    if (!ae || !rng) {
        free(ae);
        nf_rng_free(rng);
        return nf_error(NF_ENOMEM, "out of memory for the video autoencoder");
    }
    ae->h = h, ae->w = w, ae->c = c, ae->S = levels, ae->W = width, ae->tc = tc;
    ae->p_first = P->n;
    const int Wd = width, N = NF_VIDEO_AE_CHUNK;
    char name[64];
    int rc = NF_OK;
    for (int s = 0; rc == NF_OK && s < levels; s++) {
        snprintf(name, sizeof name, "codec.enc%d", s);
        rc = nf_conv2d_init(&ae->enc[s], P, name, s ? 4 * Wd : c, Wd, 3, rng);
    }
    if (rc == NF_OK) rc = nf_conv2d_init(&ae->enc_out, P, "codec.enc_out", 4 * Wd, tc, 1, rng);
    if (rc == NF_OK) rc = nf_conv2d_init(&ae->dec_in, P, "codec.dec_in", tc, 4 * Wd, 1, rng);
    for (int s = levels - 1; rc == NF_OK && s >= 0; s--) {
        snprintf(name, sizeof name, "codec.dec%d", s);
        rc = nf_conv2d_init(&ae->dec[s], P, name, Wd, s ? 4 * Wd : c, 3, rng);
    }
    ae->p_count = P->n - ae->p_first;
    if (rc == NF_OK) rc = nf_params_add(S, "codec.latent_mean", (size_t)tc, &ae->s_mean);
    if (rc == NF_OK) rc = nf_params_add(S, "codec.latent_scale", (size_t)tc, &ae->s_scale);
    if (rc == NF_OK)
        for (int k = 0; k < tc; k++) S->value[ae->s_mean + k] = 0, S->value[ae->s_scale + k] = 1;
    nf_rng_free(rng);
    /* buffers for a chunk of N frames; the gradients' scratch holds the largest activation */
    const size_t top = (size_t)N * pixels(ae, 0) * (size_t)(Wd > c ? Wd : c), lat = (size_t)N * pixels(ae, levels);
    size_t ws = 0;
    for (int s = 0; s < levels; s++) {
        size_t a = nf_conv2d_workspace(&ae->enc[s], N, h >> s, w >> s), b = nf_conv2d_workspace(&ae->dec[s], N, h >> s, w >> s);
        ws = ws > a ? ws : a, ws = ws > b ? ws : b;
    }
    for (int s = 0; rc == NF_OK && s < levels; s++) {
        const size_t n = (size_t)N * pixels(ae, s) * Wd; /* r_s, a_{s+1}, e_s, b_{s+1} (s + 1 < S) */
        ae->r[s] = malloc(n * sizeof(nf_real));
        ae->a[s + 1] = malloc(n * sizeof(nf_real));
        ae->e[s] = malloc(n * sizeof(nf_real));
        if (s + 1 < levels) ae->b[s + 1] = malloc(n * sizeof(nf_real));
        if (!ae->r[s] || !ae->a[s + 1] || !ae->e[s] || (s + 1 < levels && !ae->b[s + 1])) rc = NF_ENOMEM;
    }
    if (rc == NF_OK) {
        ae->b[levels] = malloc(lat * 4 * Wd * sizeof(nf_real));
        ae->b[0] = malloc((size_t)N * pixels(ae, 0) * c * sizeof(nf_real));
        ae->u = malloc(lat * tc * sizeof(nf_real));
        ae->g1 = malloc(top * sizeof(nf_real));
        ae->g2 = malloc(top * sizeof(nf_real));
        ae->ws = malloc((ws ? ws : 1) * sizeof(nf_real));
        if (!ae->b[levels] || !ae->b[0] || !ae->u || !ae->g1 || !ae->g2 || !ae->ws) rc = NF_ENOMEM;
    }
    if (rc == NF_ENOMEM) nf_error(NF_ENOMEM, "out of memory for the video autoencoder's buffers");
    if (rc != NF_OK) {
        nf_video_ae_free(ae);
        return rc;
    }
    *out = ae;
    return NF_OK;
}

int nf_video_ae_dim(const nf_video_ae *ae) { return (int)pixels(ae, ae->S) * ae->tc; }

void nf_video_ae_params(const nf_video_ae *ae, size_t *first, size_t *count)
{
    *first = ae->p_first;
    *count = ae->p_count;
}

/* u (n, th, tw, tc) of n <= CHUNK frames x, the activations kept for backward */
static void encoder_forward(nf_video_ae *ae, const nf_params *P, const nf_real *x, int n)
{
    for (int s = 0; s < ae->S; s++) {
        const int hs = ae->h >> s, ws = ae->w >> s;
        nf_conv2d_forward(&ae->enc[s], P, ae->ws, ae->r[s], s ? ae->a[s] : x, n, hs, ws);
        relu_inplace(ae->r[s], (size_t)n * pixels(ae, s) * ae->W);
        s2d(ae->a[s + 1], ae->r[s], n, hs, ws, ae->W);
    }
    nf_conv2d_forward(&ae->enc_out, P, ae->ws, ae->u, ae->a[ae->S], n, ae->h >> ae->S, ae->w >> ae->S);
}

/* b_0 (n, h, w, c) from u (n, th, tw, tc), the activations kept for backward */
static void decoder_forward(nf_video_ae *ae, const nf_params *P, const nf_real *u, int n)
{
    const int S = ae->S;
    nf_conv2d_forward(&ae->dec_in, P, ae->ws, ae->b[S], u, n, ae->h >> S, ae->w >> S);
    relu_inplace(ae->b[S], (size_t)n * pixels(ae, S) * 4 * ae->W);
    for (int s = S - 1; s >= 0; s--) {
        const int hs = ae->h >> s, ws = ae->w >> s;
        d2s(ae->e[s], ae->b[s + 1], n, hs / 2, ws / 2, ae->W);
        nf_conv2d_forward(&ae->dec[s], P, ae->ws, ae->b[s], ae->e[s], n, hs, ws);
        if (s) relu_inplace(ae->b[s], (size_t)n * pixels(ae, s) * 4 * ae->W);
    }
}

/* g1 = dL/db_0 (n, h, w, c) in; P->grad += the codec's gradient (x the chunk's frames) */
static void backward(nf_video_ae *ae, nf_params *P, const nf_real *x, int n)
{
    const int S = ae->S, Wd = ae->W;
    nf_real *g1 = ae->g1, *g2 = ae->g2;
    for (int s = 0; s < S; s++) {
        const int hs = ae->h >> s, ws = ae->w >> s;
        if (s) relu_mask(g1, ae->b[s], (size_t)n * pixels(ae, s) * 4 * Wd);
        memset(g2, 0, (size_t)n * pixels(ae, s) * Wd * sizeof *g2);
        nf_conv2d_backward(&ae->dec[s], P, ae->ws, g2, g1, ae->e[s], n, hs, ws);
        s2d(g1, g2, n, hs, ws, Wd);
    }
    const int hS = ae->h >> S, wS = ae->w >> S;
    const size_t lat = (size_t)n * pixels(ae, S);
    relu_mask(g1, ae->b[S], lat * 4 * Wd);
    memset(g2, 0, lat * ae->tc * sizeof *g2);
    nf_conv2d_backward(&ae->dec_in, P, ae->ws, g2, g1, ae->u, n, hS, wS);
    memset(g1, 0, lat * 4 * Wd * sizeof *g1);
    nf_conv2d_backward(&ae->enc_out, P, ae->ws, g1, g2, ae->a[S], n, hS, wS);
    for (int s = S - 1; s >= 0; s--) {
        const int hs = ae->h >> s, ws = ae->w >> s;
        d2s(g2, g1, n, hs / 2, ws / 2, Wd);
        relu_mask(g2, ae->r[s], (size_t)n * pixels(ae, s) * Wd);
        if (s) memset(g1, 0, (size_t)n * pixels(ae, s) * 4 * Wd * sizeof *g1);
        nf_conv2d_backward(&ae->enc[s], P, ae->ws, s ? g1 : NULL, g2, s ? ae->a[s] : x, n, hs, ws);
    }
}

int nf_video_ae_encode(nf_video_ae *ae, const nf_params *P, const nf_params *S, nf_real *z, const nf_real *y, int n)
{
    const size_t F = (size_t)nf_video_ae_dim(ae), D = pixels(ae, 0) * ae->c;
    const nf_real *m = S->value + ae->s_mean, *sd = S->value + ae->s_scale;
    for (int at = 0; at < n; at += NF_VIDEO_AE_CHUNK) {
        const int k = n - at < NF_VIDEO_AE_CHUNK ? n - at : NF_VIDEO_AE_CHUNK;
        encoder_forward(ae, P, y + (size_t)at * D, k);
        for (size_t q = 0; q < (size_t)k * F; q++) {
            const size_t ch = q % (size_t)ae->tc;
            z[(size_t)at * F + q] = (ae->u[q] - m[ch]) / sd[ch];
        }
    }
    return NF_OK;
}

int nf_video_ae_decode(nf_video_ae *ae, const nf_params *P, const nf_params *S, nf_real *y, const nf_real *z, int n)
{
    const size_t F = (size_t)nf_video_ae_dim(ae), D = pixels(ae, 0) * ae->c;
    const nf_real *m = S->value + ae->s_mean, *sd = S->value + ae->s_scale;
    for (int at = 0; at < n; at += NF_VIDEO_AE_CHUNK) {
        const int k = n - at < NF_VIDEO_AE_CHUNK ? n - at : NF_VIDEO_AE_CHUNK;
        for (size_t q = 0; q < (size_t)k * F; q++) {
            const size_t ch = q % (size_t)ae->tc;
            ae->u[q] = sd[ch] * z[(size_t)at * F + q] + m[ch];
        }
        decoder_forward(ae, P, ae->u, k);
        memcpy(y + (size_t)at * D, ae->b[0], (size_t)k * D * sizeof *y);
    }
    return NF_OK;
}

int nf_video_ae_loss(nf_video_ae *ae, nf_params *P, const nf_real *y, int n, int grad, double scale, double *mse,
                     double *per_frame)
{
    if (n < 1) return nf_error(NF_EINVAL, "%d frames: expected at least 1", n);
    const size_t D = pixels(ae, 0) * ae->c;
    const double c = 2 * scale / ((double)n * D);
    double total = 0;
    for (int at = 0; at < n; at += NF_VIDEO_AE_CHUNK) {
        const int k = n - at < NF_VIDEO_AE_CHUNK ? n - at : NF_VIDEO_AE_CHUNK;
        const nf_real *x = y + (size_t)at * D;
        encoder_forward(ae, P, x, k);
        decoder_forward(ae, P, ae->u, k);
        for (int f = 0; f < k; f++) {
            double s = 0;
            for (size_t q = 0; q < D; q++) {
                const double d = (double)ae->b[0][(size_t)f * D + q] - x[(size_t)f * D + q];
                s += d * d;
                ae->g1[(size_t)f * D + q] = (nf_real)(c * d);
            }
            if (per_frame) per_frame[at + f] = s / D;
            total += s;
        }
        if (grad) backward(ae, P, x, k);
    }
    *mse = total / ((double)n * D);
    if (!isfinite(*mse)) return nf_error(NF_ENONFINITE, "autoencoder reconstruction error is %g", *mse);
    return NF_OK;
}

int nf_video_ae_set_stats(nf_video_ae *ae, const nf_params *P, nf_params *S, const nf_real *y, int n)
{
    const int tc = ae->tc;
    const size_t D = pixels(ae, 0) * ae->c, F = (size_t)nf_video_ae_dim(ae);
    double *sum = calloc(2 * (size_t)tc, sizeof *sum);
    if (!sum) return nf_error(NF_ENOMEM, "out of memory");
    for (int at = 0; at < n; at += NF_VIDEO_AE_CHUNK) {
        const int k = n - at < NF_VIDEO_AE_CHUNK ? n - at : NF_VIDEO_AE_CHUNK;
        encoder_forward(ae, P, y + (size_t)at * D, k);
        for (size_t q = 0; q < (size_t)k * F; q++) {
            const double v = ae->u[q];
            sum[q % tc] += v, sum[tc + q % tc] += v * v;
        }
    }
    const double count = (double)n * (double)(F / tc);
    for (int ch = 0; ch < tc; ch++) {
        const double mean = sum[ch] / count, var = sum[tc + ch] / count - mean * mean;
        S->value[ae->s_mean + ch] = (nf_real)mean;
        S->value[ae->s_scale + ch] = (nf_real)(var > 1e-12 ? sqrt(var) : 1);
    }
    free(sum);
    return NF_OK;
}
