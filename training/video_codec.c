/* training/video_codec.c - the truncated orthonormal block DCT (training/video_codec.h).
 *
 * FFTW's unnormalised transforms of length B (per axis):
 *   REDFT10 (DCT-II):  Y_k = 2 sum_n x_n cos(pi (2n+1) k / 2B)
 *   REDFT01 (DCT-III): y_n = X_0 + 2 sum_{k>=1} X_k cos(pi (2n+1) k / 2B)
 * The orthonormal DCT-II is X_k = a_k sum_n x_n cos(...) = (a_k / 2) Y_k, so encode scales the 2-D
 * REDFT10 output by g_u g_v, g_k = a_k / 2.  Its inverse x_n = sum_k a_k X_k cos(...) is REDFT01 of
 * X'_k = f_k X_k with f_0 = a_0 and f_k = a_k / 2 (k >= 1), so decode scales by f_u f_v first.
 */
#include "training/video_codec.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef NF_DOUBLE
#define VC(x) fftw_##x
#else
#define VC(x) fftwf_##x
#endif

struct nf_dct_codec {
    int h, w, ch, block, keep;
    int th, tw, tc, dim;
    double g[NF_DCT_MAX_BLOCK], f[NF_DCT_MAX_BLOCK];   /* encode and decode scales per axis */
    VC(plan) fwd, inv;                                  /* REDFT10 and REDFT01 of one B x B block */
};

void nf_dct_codec_free(nf_dct_codec *c)
{
    if (!c) return;
    if (c->fwd) VC(destroy_plan)(c->fwd);
    if (c->inv) VC(destroy_plan)(c->inv);
    free(c);
}

static int codec_plans(nf_dct_codec *c)
{
    int B = c->block;
    nf_real *a = VC(malloc)(sizeof(nf_real) * (size_t)(B * B)), *b = VC(malloc)(sizeof(nf_real) * (size_t)(B * B));
    int rc = NF_OK;
    if (!a || !b) {
        rc = nf_error(NF_ENOMEM, "DCT codec: out of memory planning %d x %d transforms", B, B);
    } else {
        const unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
        c->fwd = VC(plan_r2r_2d)(B, B, a, b, FFTW_REDFT10, FFTW_REDFT10, flags);
        c->inv = VC(plan_r2r_2d)(B, B, a, b, FFTW_REDFT01, FFTW_REDFT01, flags);
        if (!c->fwd || !c->inv) rc = nf_error(NF_EINVAL, "DCT codec: FFTW could not plan %d x %d DCTs", B, B);
    }
    if (a) VC(free)(a);
    if (b) VC(free)(b);
    return rc;
}

int nf_dct_codec_create(nf_dct_codec **out, int h, int w, int ch, int block, int keep)
{
    *out = NULL;
    if (h < 1 || w < 1 || ch < 1)
        return nf_error(NF_EINVAL, "DCT codec: frames of %d x %d x %d (expected height, width and channels >= 1)", h,
                        w, ch);
    if (block < 1 || block > NF_DCT_MAX_BLOCK || h % block || w % block)
        return nf_error(NF_EINVAL, "DCT codec: block %d for frames of %d x %d (expected a block of 1..%d pixels that "
                        "divides the height and the width)", block, h, w, NF_DCT_MAX_BLOCK);
    if (keep < 1 || keep > block)
        return nf_error(NF_EINVAL, "DCT codec: keep %d (expected 1..%d, at most the block side)", keep, block);
    nf_dct_codec *c = calloc(1, sizeof *c);
    if (!c) return nf_error(NF_ENOMEM, "DCT codec: out of memory");
    *c = (nf_dct_codec){.h = h, .w = w, .ch = ch, .block = block, .keep = keep, .th = h / block, .tw = w / block,
                        .tc = keep * keep * ch};
    c->dim = c->th * c->tw * c->tc;
    for (int k = 0; k < block; k++) {
        double a = sqrt((k ? 2.0 : 1.0) / block);
        c->g[k] = a / 2;
        c->f[k] = k ? a / 2 : a;
    }
    int rc = codec_plans(c);
    if (rc != NF_OK) {
        nf_dct_codec_free(c);
        return rc;
    }
    *out = c;
    return NF_OK;
}

int nf_dct_codec_dim(const nf_dct_codec *c) { return c->dim; }

void nf_dct_codec_shape(const nf_dct_codec *c, int *th, int *tw, int *tc)
{
    if (th) *th = c->th;
    if (tw) *tw = c->tw;
    if (tc) *tc = c->tc;
}

/* One frame: z[(bi tw + bj) tc + (u keep + v) ch + k] = g_u g_v REDFT10(block (bi, bj) of channel k)[u][v]. */
static void encode_frame(const nf_dct_codec *c, nf_real *z, const nf_real *x)
{
    int B = c->block, K = c->keep, ch = c->ch;
    nf_real in[NF_DCT_MAX_BLOCK * NF_DCT_MAX_BLOCK], out[NF_DCT_MAX_BLOCK * NF_DCT_MAX_BLOCK];
    for (int bi = 0; bi < c->th; bi++)
        for (int bj = 0; bj < c->tw; bj++) {
            nf_real *zp = z + ((size_t)bi * c->tw + bj) * c->tc;
            for (int k = 0; k < ch; k++) {
                for (int m = 0; m < B; m++)
                    for (int n = 0; n < B; n++)
                        in[m * B + n] = x[(((size_t)bi * B + m) * c->w + (size_t)bj * B + n) * ch + k];
                VC(execute_r2r)(c->fwd, in, out);
                for (int u = 0; u < K; u++)
                    for (int v = 0; v < K; v++)
                        zp[(u * K + v) * ch + k] = (nf_real)(c->g[u] * c->g[v] * out[u * B + v]);
            }
        }
}

/* One frame: each block's channel k = REDFT01 of f_u f_v z (u, v < keep), zeros elsewhere. */
static void decode_frame(const nf_dct_codec *c, nf_real *x, const nf_real *z)
{
    int B = c->block, K = c->keep, ch = c->ch;
    nf_real in[NF_DCT_MAX_BLOCK * NF_DCT_MAX_BLOCK], out[NF_DCT_MAX_BLOCK * NF_DCT_MAX_BLOCK];
    for (int bi = 0; bi < c->th; bi++)
        for (int bj = 0; bj < c->tw; bj++) {
            const nf_real *zp = z + ((size_t)bi * c->tw + bj) * c->tc;
            for (int k = 0; k < ch; k++) {
                memset(in, 0, sizeof(nf_real) * (size_t)(B * B));
                for (int u = 0; u < K; u++)
                    for (int v = 0; v < K; v++) in[u * B + v] = (nf_real)(c->f[u] * c->f[v] * zp[(u * K + v) * ch + k]);
                VC(execute_r2r)(c->inv, in, out);
                for (int m = 0; m < B; m++)
                    for (int n = 0; n < B; n++)
                        x[(((size_t)bi * B + m) * c->w + (size_t)bj * B + n) * ch + k] = out[m * B + n];
            }
        }
}

void nf_dct_encode(const nf_dct_codec *c, nf_real *z, const nf_real *x, int nframes)
{
    size_t d = (size_t)c->h * c->w * c->ch;
#pragma omp parallel for schedule(static) if (nframes > 1 && (size_t)nframes * d > 65536)
    for (int t = 0; t < nframes; t++) encode_frame(c, z + (size_t)t * c->dim, x + (size_t)t * d);
}

void nf_dct_decode(const nf_dct_codec *c, nf_real *x, const nf_real *z, int nframes)
{
    size_t d = (size_t)c->h * c->w * c->ch;
#pragma omp parallel for schedule(static) if (nframes > 1 && (size_t)nframes * d > 65536)
    for (int t = 0; t < nframes; t++) decode_frame(c, x + (size_t)t * d, z + (size_t)t * c->dim);
}

double nf_dct_codec_recon_error(const nf_dct_codec *c, const nf_real *x, int nframes)
{
    if (nframes <= 0) return 0;
    size_t d = (size_t)c->h * c->w * c->ch, n = (size_t)nframes * d;
    nf_real *z = malloc((size_t)nframes * (size_t)c->dim * sizeof *z), *r = malloc(n * sizeof *r);
    double ss = NAN;
    if (!z || !r) {
        nf_error(NF_ENOMEM, "DCT codec: out of memory for the reconstruction of %d frames", nframes);
    } else {
        nf_dct_encode(c, z, x, nframes);
        nf_dct_decode(c, r, z, nframes);
        ss = 0;
        for (size_t i = 0; i < n; i++) ss += ((double)x[i] - r[i]) * ((double)x[i] - r[i]);
        ss = sqrt(ss / (double)n);
    }
    free(z);
    free(r);
    return ss;
}
