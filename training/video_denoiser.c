/* training/video_denoiser.c - the video kind's learned causal denoiser (training/video_denoiser.h). */
#include "training/video_denoiser.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/transformer.h"

struct nf_video_denoiser {
    nf_transformer *tf;
    int tokens, tc;    /* T_tok tokens of tc values; the transformer has T_tok + 1 positions */
    int cap;           /* videos the buffers hold */
    nf_real *u;        /* (cap, T_tok + 1, tc) shifted input [z, 0] */
    nf_real *y;        /* (cap, T_tok + 1, tc) transformer output */
    nf_real *dy;       /* (cap, T_tok + 1, tc) */
    nf_real *ws;       /* nf_transformer_workspace(cap) */
};

int nf_video_denoiser_create(nf_video_denoiser **out, nf_params *P, int tokens, int tc, int width, int heads,
                             int layers, uint64_t seed)
{
    *out = NULL;
    if (tokens < 1 || tc < 1)
        return nf_error(NF_EINVAL, "denoiser of %d tokens of %d values: expected >= 1 of each", tokens, tc);
    nf_video_denoiser *d = nf_calloc(1, sizeof *d, "video denoiser");
    if (!d) return NF_ENOMEM;
    d->tokens = tokens, d->tc = tc;
    const nf_transformer_config c = {.din = tc, .dout = tc, .T = tokens + 1, .d = width, .heads = heads,
                                     .layers = layers, .zero_init_output = 1};
    nf_rng *rng = nf_rng_alloc(seed, 0xde4015e);
    int rc = rng ? nf_transformer_create(&d->tf, &c, P, "denoiser", rng) : nf_error(NF_ENOMEM, "out of memory");
    nf_rng_free(rng);
    if (rc != NF_OK) {
        nf_video_denoiser_free(d);
        return rc;
    }
    *out = d;
    return NF_OK;
}

void nf_video_denoiser_free(nf_video_denoiser *d)
{
    if (!d) return;
    nf_transformer_free(d->tf);
    free(d->u), free(d->y), free(d->dy), free(d->ws);
    free(d);
}

static int reserve(nf_video_denoiser *d, int n)
{
    if (n <= d->cap) return NF_OK;
    free(d->u), free(d->y), free(d->dy), free(d->ws);
    const size_t row = (size_t)(d->tokens + 1) * d->tc;
    d->u = malloc((size_t)n * row * sizeof *d->u);
    d->y = malloc((size_t)n * row * sizeof *d->y);
    d->dy = malloc((size_t)n * row * sizeof *d->dy);
    d->ws = malloc(nf_transformer_workspace(d->tf, n) * sizeof *d->ws);
    if (!d->u || !d->y || !d->dy || !d->ws) {
        free(d->u), free(d->y), free(d->dy), free(d->ws);
        d->u = d->y = d->dy = d->ws = NULL;
        d->cap = 0;
        return nf_error(NF_ENOMEM, "out of memory for the denoiser of %d videos", n);
    }
    d->cap = n;
    return NF_OK;
}

/* u_b = [z_b, 0]; y_b = transformer(u_b) (row t reads u_0..u_{t-1}); D(z_b)_t = y_b,t+1. */
int nf_video_denoiser_forward(nf_video_denoiser *d, const nf_params *P, nf_real *out, const nf_real *z, int n)
{
    NF_TRY(reserve(d, n));
    const size_t Lz = (size_t)d->tokens * d->tc, row = Lz + (size_t)d->tc;
    for (int b = 0; b < n; b++) {
        memcpy(d->u + (size_t)b * row, z + (size_t)b * Lz, Lz * sizeof *d->u);
        memset(d->u + (size_t)b * row + Lz, 0, (size_t)d->tc * sizeof *d->u);
    }
    nf_transformer_forward(d->tf, P, d->ws, d->y, d->u, NULL, n);
    for (int b = 0; b < n; b++) memcpy(out + (size_t)b * Lz, d->y + (size_t)b * row + d->tc, Lz * sizeof *out);
    return NF_OK;
}

/* dL/dy_b,0 = 0 (row 0 is dropped), dL/dy_b,t+1 = dL/dD_b,t; the transformer's backward adds
 * dL/dtheta (no input gradient: the denoiser's input is data). */
void nf_video_denoiser_backward(nf_video_denoiser *d, nf_params *P, const nf_real *dout, int n)
{
    const size_t Lz = (size_t)d->tokens * d->tc, row = Lz + (size_t)d->tc;
    for (int b = 0; b < n; b++) {
        memset(d->dy + (size_t)b * row, 0, (size_t)d->tc * sizeof *d->dy);
        memcpy(d->dy + (size_t)b * row + d->tc, dout + (size_t)b * Lz, Lz * sizeof *d->dy);
    }
    nf_transformer_backward(d->tf, P, d->ws, NULL, NULL, d->dy, d->u, NULL, n);
}
