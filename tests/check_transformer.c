/* tests/check_transformer.c - the pre-norm transformer block and the causal transformer conditioner
 * (nn/transformer.h).
 *
 * The block's forward against its definition composed from the layers it is made of (layer norm,
 * attention, linear, GELU, each tested in its own suite), both builds.  Backward of the block and of
 * the conditioner (context, start token, positional embeddings, every block, with and without QK
 * norm) against fourth-order central finite differences of L = sum(w * y) for every parameter,
 * input and context entry in the double build, with gradients accumulating onto pre-filled buffers.
 * The conditioner is causal in the strict sense an autoregressive flow needs: changing x_t moves no
 * output at positions <= t and does move position t + 1.  Decoding token by token (block step with
 * its cache; the conditioner's decoder, including a rewind) equals the rows of the full forward.
 * Weights are the initial ones plus noise (never the zero-initialised output layer), inputs
 * unremarkable.  zero_init_output gives exactly zero outputs; bad configurations are refused.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "core/rng.h"
#include "nn/transformer.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-12
#else
#define TOL_FWD 3e-5
#endif
#define TOL_GRAD 1e-7
#define FD_STEP 1e-4

static void add_noise(nf_params *P, double a, uint64_t seed)
{
    nf_real *noise = malloc(P->n * sizeof *noise);
    ck_assert(noise);
    nf_test_fill_uniform(noise, P->n, -a, a, seed);
    for (size_t i = 0; i < P->n; i++) P->value[i] += noise[i];
    free(noise);
}

/* A network under test: forward into y from the current x, ctx and parameters. */
typedef struct fcase {
    nf_params *P;
    nf_real *x, *ctx, *y;
    size_t nx, nc, ny;
    void (*forward)(struct fcase *c);
    void (*backward)(struct fcase *c, const nf_real *dy, nf_real *dx, nf_real *dctx);
    nf_tblock *blk;
    nf_transformer *tf;
    nf_real *ws, *sc;
    int n, T;
} fcase;

static void block_fwd(fcase *c) { nf_tblock_forward(c->blk, c->P, c->ws, c->sc, c->y, c->x, c->n, c->T); }
static void block_bwd(fcase *c, const nf_real *dy, nf_real *dx, nf_real *dctx)
{
    (void)dctx;
    nf_tblock_backward(c->blk, c->P, c->ws, c->sc, dx, dy, c->x, c->n, c->T);
}
static void tf_fwd(fcase *c) { nf_transformer_forward(c->tf, c->P, c->ws, c->y, c->x, c->ctx, c->n); }
static void tf_bwd(fcase *c, const nf_real *dy, nf_real *dx, nf_real *dctx)
{
    nf_transformer_backward(c->tf, c->P, c->ws, dx, dctx, dy, c->x, c->ctx, c->n);
}

#ifdef NF_DOUBLE /* finite differences need the double build */
static double loss(fcase *c, const nf_real *w)
{
    c->forward(c);
    double s = 0;
    for (size_t i = 0; i < c->ny; i++) s += (double)w[i] * c->y[i];
    return s;
}

static double fd(fcase *c, const nf_real *w, nf_real *v)
{
    const nf_real v0 = *v;
    const double off[4] = {-2, -1, 1, 2};
    double f[4];
    for (int k = 0; k < 4; k++) {
        *v = (nf_real)(v0 + off[k] * FD_STEP);
        f[k] = loss(c, w);
    }
    *v = v0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * FD_STEP);
}

/* Every parameter, input and context entry; backward must add onto the pre-filled buffers. */
static void check_fd(fcase *c, const char *what)
{
    nf_real *w = malloc(c->ny * sizeof *w), *dx = malloc(c->nx * sizeof *dx);
    nf_real *dc = malloc((c->nc ? c->nc : 1) * sizeof *dc);
    nf_test_fill_uniform(w, c->ny, -1.3, 1.1, 91);
    for (size_t i = 0; i < c->nx; i++) dx[i] = (nf_real)0.37;
    for (size_t i = 0; i < c->nc; i++) dc[i] = (nf_real)-0.53;
    for (size_t i = 0; i < c->P->n; i++) c->P->grad[i] = (nf_real)0.29;
    c->forward(c);
    c->backward(c, w, dx, c->nc ? dc : NULL);
    for (size_t i = 0; i < c->P->n; i++) {
        const double g = c->P->grad[i] - 0.29, num = fd(c, w, &c->P->value[i]);
        const char *name = "?";
        for (size_t s = 0; s < c->P->nslices; s++)
            if (i >= c->P->slices[s].offset && i < c->P->slices[s].offset + c->P->slices[s].size)
                name = c->P->slices[s].name;
        ck_assert_msg(nf_test_relerr(g, num, 1e-3) < TOL_GRAD, "%s: parameter %zu (%s): backward %.12g, FD %.12g",
                      what, i, name, g, num);
    }
    for (size_t i = 0; i < c->nx; i++) {
        const double g = dx[i] - 0.37, num = fd(c, w, &c->x[i]);
        ck_assert_msg(nf_test_relerr(g, num, 1e-3) < TOL_GRAD, "%s: input %zu: backward %.12g, FD %.12g", what, i, g,
                      num);
    }
    for (size_t i = 0; i < c->nc; i++) {
        const double g = dc[i] + 0.53, num = fd(c, w, &c->ctx[i]);
        ck_assert_msg(nf_test_relerr(g, num, 1e-3) < TOL_GRAD, "%s: context %zu: backward %.12g, FD %.12g", what, i,
                      g, num);
    }
    free(w), free(dx), free(dc);
}
#endif

/* ---------------------------------------------------------------------------------- block */

static void block_setup(fcase *c, nf_tblock *B, int n, int T, int d, int H, int r, int qk, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(seed, 0);
    ck_assert_int_eq(nf_tblock_init(B, c->P, "blk", d, H, r, qk, rng), NF_OK);
    nf_rng_free(rng);
    add_noise(c->P, 0.3, seed + 1);
    c->blk = B, c->n = n, c->T = T;
    c->nx = c->ny = (size_t)n * T * d;
    c->x = malloc(c->nx * sizeof *c->x);
    c->y = malloc(c->ny * sizeof *c->y);
    nf_test_fill_uniform(c->x, c->nx, -1.6, 1.8, seed + 2);
    c->ws = malloc(nf_tblock_workspace(B, n, T) * sizeof *c->ws);
    c->sc = malloc(nf_tblock_scratch(B, n, T) * sizeof *c->sc);
    c->forward = block_fwd, c->backward = block_bwd;
}

static void fcase_teardown(fcase *c)
{
    free(c->x), free(c->ctx), free(c->y), free(c->ws), free(c->sc);
    nf_transformer_free(c->tf);
    nf_params_free(c->P);
}

/* y = h + fc2(GELU(fc1(LN2(h)))), h = x + Attn(LN1(x)), from the layers' own calls. */
START_TEST(test_block_forward)
{
    fcase c;
    nf_tblock B;
    const int n = 2, T = 6, d = 8, N = n * T;
    block_setup(&c, &B, n, T, d, 2, 3, NF_QK_RMS, 100);
    c.forward(&c);
    const size_t Nd = (size_t)N * d, Nh = (size_t)N * B.hidden;
    nf_real *a = malloc(Nd * sizeof *a), *cache = malloc((size_t)N * 2 * sizeof *cache), *h = malloc(Nd * sizeof *h);
    nf_real *m = malloc(Nh * sizeof *m), *y = malloc(Nd * sizeof *y);
    nf_real *aws = malloc(nf_attention_workspace(&B.attn, n, T) * sizeof *aws);
    nf_real *asc = malloc(nf_attention_scratch(&B.attn, n, T) * sizeof *asc);
    nf_layernorm_forward(&B.ln1, c.P, a, cache, c.x, N);
    nf_attention_forward(&B.attn, c.P, aws, asc, h, a, n, T);
    for (size_t i = 0; i < Nd; i++) h[i] += c.x[i];
    nf_layernorm_forward(&B.ln2, c.P, a, cache, h, N);
    nf_linear_forward(&B.fc1, c.P, NULL, m, a, N);
    nf_act_forward(NF_ACT_GELU, m, m, Nh);
    nf_linear_forward(&B.fc2, c.P, NULL, y, m, N);
    for (size_t i = 0; i < Nd; i++)
        ck_assert_msg(nf_test_relerr(c.y[i], (double)y[i] + h[i], 1) < TOL_FWD, "block y[%zu] = %g, expected %g", i,
                      (double)c.y[i], (double)y[i] + h[i]);
    free(a), free(cache), free(h), free(m), free(y), free(aws), free(asc);
    fcase_teardown(&c);
}
END_TEST

START_TEST(test_block_gradients)
{
#ifdef NF_DOUBLE
    for (int qk = 0; qk <= 1; qk++) {
        fcase c;
        nf_tblock B;
        block_setup(&c, &B, 2, 5, 8, 2, 2, qk, 200 + (uint64_t)qk);
        check_fd(&c, qk ? "block, QK norm" : "block");
        fcase_teardown(&c);
    }
#endif
}
END_TEST

START_TEST(test_block_decode)
{
    fcase c;
    nf_tblock B;
    const int n = 3, T = 7, d = 12, Tmax = 9;
    block_setup(&c, &B, n, T, d, 3, 4, NF_QK_RMS, 300);
    c.forward(&c);
    nf_real *kv = malloc(nf_attention_kv_size(&B.attn, n, Tmax) * sizeof *kv);
    nf_real *ws = malloc(nf_tblock_step_workspace(&B, n, Tmax) * sizeof *ws);
    nf_real *xt = malloc((size_t)n * d * sizeof *xt), *yt = malloc((size_t)n * d * sizeof *yt);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < n; b++) memcpy(xt + (size_t)b * d, c.x + ((size_t)b * T + t) * d, (size_t)d * sizeof *xt);
        ck_assert_int_eq(nf_tblock_step(&B, c.P, ws, kv, Tmax, yt, xt, t, n), NF_OK);
        for (int b = 0; b < n; b++)
            for (int j = 0; j < d; j++) {
                const double full = c.y[((size_t)b * T + t) * d + j], step = yt[(size_t)b * d + j];
                ck_assert_msg(nf_test_relerr(full, step, 1) < TOL_FWD, "block step t=%d b=%d j=%d: %.10g vs %.10g", t,
                              b, j, step, full);
            }
    }
    free(kv), free(ws), free(xt), free(yt);
    fcase_teardown(&c);
}
END_TEST

/* ---------------------------------------------------------------------------- conditioner */

static void tf_setup(fcase *c, const nf_transformer_config *cfg, int n, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(seed, 0);
    ck_assert_int_eq(nf_transformer_create(&c->tf, cfg, c->P, "tf", rng), NF_OK);
    nf_rng_free(rng);
    add_noise(c->P, 0.3, seed + 1);
    c->n = n, c->T = cfg->T;
    c->nx = (size_t)n * cfg->T * cfg->din;
    c->ny = (size_t)n * cfg->T * cfg->dout;
    c->nc = (size_t)n * cfg->ctx;
    c->x = malloc(c->nx * sizeof *c->x);
    c->y = malloc(c->ny * sizeof *c->y);
    c->ctx = c->nc ? malloc(c->nc * sizeof *c->ctx) : NULL;
    nf_test_fill_uniform(c->x, c->nx, -1.5, 1.7, seed + 2);
    if (c->nc) nf_test_fill_uniform(c->ctx, c->nc, -0.9, 1.2, seed + 3);
    c->ws = malloc(nf_transformer_workspace(c->tf, n) * sizeof *c->ws);
    c->forward = tf_fwd, c->backward = tf_bwd;
}

static const nf_transformer_config base_cfg = {.din = 3, .dout = 4, .T = 5, .d = 8, .heads = 2, .layers = 2,
                                               .mlp_ratio = 2, .ctx = 3, .qk_norm = NF_QK_RMS,
                                               .zero_init_output = 0};

START_TEST(test_tf_gradients)
{
#ifdef NF_DOUBLE
    nf_transformer_config cfg = base_cfg;
    fcase c;
    tf_setup(&c, &cfg, 2, 400);
    check_fd(&c, "transformer, context, QK norm");
    fcase_teardown(&c);
    cfg.ctx = 0, cfg.qk_norm = NF_QK_NONE, cfg.layers = 1, cfg.heads = 4, cfg.mlp_ratio = 0;
    tf_setup(&c, &cfg, 2, 410);
    check_fd(&c, "transformer, one block, no context");
    fcase_teardown(&c);
    cfg = base_cfg, cfg.layers = 0; /* embeddings, final norm and projection only */
    tf_setup(&c, &cfg, 3, 420);
    check_fd(&c, "transformer, no blocks");
    fcase_teardown(&c);
    cfg = base_cfg, cfg.T = 1; /* the start token only */
    tf_setup(&c, &cfg, 2, 430);
    check_fd(&c, "transformer, T = 1");
    fcase_teardown(&c);
    cfg = base_cfg, cfg.T = 6, cfg.pos_frames = 3; /* positions factorised: 3 frames of 2 tokens */
    tf_setup(&c, &cfg, 2, 440);
    check_fd(&c, "transformer, positions by frame");
    fcase_teardown(&c);
#endif
}
END_TEST

#ifdef NF_DOUBLE
/* L = sum(w * y) + sum(v * h_L), h_L read through nf_transformer_hidden. */
static double hidden_loss(fcase *c, const nf_real *w, const nf_real *v, size_t nh)
{
    double s = loss(c, w);
    const nf_real *h = nf_transformer_hidden(c->tf, c->ws, c->n);
    for (size_t i = 0; i < nh; i++) s += (double)v[i] * h[i];
    return s;
}

static double hidden_fd(fcase *c, const nf_real *w, const nf_real *v, size_t nh, nf_real *x)
{
    const nf_real x0 = *x;
    const double off[4] = {-2, -1, 1, 2};
    double f[4];
    for (int k = 0; k < 4; k++) {
        *x = (nf_real)(x0 + off[k] * FD_STEP);
        f[k] = hidden_loss(c, w, v, nh);
    }
    *x = x0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * FD_STEP);
}
#endif

/* The loss below sums every hidden entry (n T d of them, each about 1), so its central differences
 * carry about 1e-10 of rounding (1e-16 of a sum near 1e2, over the stencil's 12 h with h = 1e-4):
 * gradients are compared relative to at least 1e-2 (1e-9 absolute), where the others use 1e-3.  At
 * 1e-3 an entry of 1e-3 failed when the softmax's sums changed order (the backward unchanged to the
 * 12 digits printed, the differences moved by 5e-11). */
#define HIDDEN_FLOOR 1e-2

/* The final hidden state and a second gradient into it (a loss on the hidden state besides y):
 * backward_hidden against central differences of sum(w y) + sum(v h_L) for every parameter, input
 * and context entry; with dh = NULL it is backward. */
START_TEST(test_tf_hidden_gradients)
{
#ifdef NF_DOUBLE
    nf_transformer_config cfg = base_cfg;
    for (int layers = 0; layers < 3; layers += 2) {
        cfg.layers = layers;
        fcase c;
        tf_setup(&c, &cfg, 2, 440 + layers);
        const size_t nh = (size_t)c.n * cfg.T * cfg.d;
        nf_real *w = malloc(c.ny * sizeof *w), *v = malloc(nh * sizeof *v), *dx = calloc(c.nx, sizeof *dx);
        nf_real *dc = calloc(c.nc, sizeof *dc);
        nf_test_fill_uniform(w, c.ny, -1.3, 1.1, 92);
        nf_test_fill_uniform(v, nh, -0.8, 1.4, 93);
        nf_params_zero_grad(c.P);
        tf_fwd(&c);
        nf_transformer_backward_hidden(c.tf, c.P, c.ws, dx, dc, w, v, c.x, c.ctx, c.n);
        for (size_t i = 0; i < c.P->n; i++) {
            double num = hidden_fd(&c, w, v, nh, &c.P->value[i]);
            ck_assert_msg(nf_test_relerr(c.P->grad[i], num, HIDDEN_FLOOR) < TOL_GRAD, "layers %d: parameter %zu: backward %.12g, FD %.12g",
                          layers, i, c.P->grad[i], num);
        }
        for (size_t i = 0; i < c.nx; i++) {
            double num = hidden_fd(&c, w, v, nh, &c.x[i]);
            ck_assert_msg(nf_test_relerr(dx[i], num, HIDDEN_FLOOR) < TOL_GRAD, "layers %d: input %zu: backward %.12g, FD %.12g", layers, i,
                          dx[i], num);
        }
        for (size_t i = 0; i < c.nc; i++) {
            double num = hidden_fd(&c, w, v, nh, &c.ctx[i]);
            ck_assert_msg(nf_test_relerr(dc[i], num, HIDDEN_FLOOR) < TOL_GRAD, "layers %d: context %zu: backward %.12g, FD %.12g", layers,
                          i, dc[i], num);
        }
        free(w), free(v), free(dx), free(dc);
        fcase_teardown(&c);
    }
#endif
}
END_TEST

/* y_u depends on x_0 .. x_{u-1} only: moving x_t leaves u <= t alone and moves u = t + 1. */
START_TEST(test_tf_causal)
{
    nf_transformer_config cfg = base_cfg;
    cfg.T = 7;
    fcase c;
    tf_setup(&c, &cfg, 2, 500);
    const int T = cfg.T, din = cfg.din, dout = cfg.dout;
    nf_real *y0 = malloc(c.ny * sizeof *y0);
    c.forward(&c);
    memcpy(y0, c.y, c.ny * sizeof *y0);
    for (int t = 0; t < T; t++) {
        nf_real *v = &c.x[((size_t)1 * T + t) * din + 1], v0 = *v;
        *v += (nf_real)0.613;
        c.forward(&c);
        *v = v0;
        for (int b = 0; b < 2; b++)
            for (int u = 0; u < T; u++) {
                double diff = 0;
                for (int j = 0; j < dout; j++)
                    diff = fmax(diff, fabs(c.y[((size_t)b * T + u) * dout + j] - y0[((size_t)b * T + u) * dout + j]));
                if (b == 0 || u <= t)
                    ck_assert_msg(diff == 0, "x_%d of sequence 1 moved y_%d of sequence %d by %g", t, u, b, diff);
                else if (u == t + 1)
                    ck_assert_msg(diff > 1e-5, "x_%d of sequence 1 did not move y_%d", t, u);
            }
    }
    free(y0);
    fcase_teardown(&c);
}
END_TEST

START_TEST(test_tf_decode)
{
    nf_transformer_config cfg = base_cfg;
    cfg.T = 9, cfg.d = 12, cfg.heads = 3, cfg.layers = 3;
    cfg.pos_frames = _i ? 3 : 0; /* _i = 1: the positions factorised over 3 frames of 3 tokens */
    fcase c;
    const int n = 3, T = cfg.T, din = cfg.din, dout = cfg.dout;
    tf_setup(&c, &cfg, n, 600);
    c.forward(&c);
    nf_transformer_decoder *dec = NULL;
    ck_assert_int_eq(nf_transformer_decoder_create(&dec, c.tf, n + 2), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_begin(dec, n), NF_OK);
    nf_real *xp = malloc((size_t)n * din * sizeof *xp), *yt = malloc((size_t)n * dout * sizeof *yt);
    const int rewind = 4;
    for (int pass = 0; pass < 2; pass++)
        for (int t = pass ? rewind : 0; t < T; t++) {
            for (int b = 0; b < n; b++)
                if (t > 0) memcpy(xp + (size_t)b * din, c.x + ((size_t)b * T + t - 1) * din, (size_t)din * sizeof *xp);
            ck_assert_int_eq(nf_transformer_decode_step(dec, c.P, yt, t, t ? xp : NULL, c.ctx), NF_OK);
            for (int b = 0; b < n; b++)
                for (int j = 0; j < dout; j++) {
                    const double full = c.y[((size_t)b * T + t) * dout + j], step = yt[(size_t)b * dout + j];
                    ck_assert_msg(nf_test_relerr(full, step, 1) < TOL_FWD,
                                  "decode pass %d t=%d b=%d j=%d: %.10g, full forward %.10g", pass, t, b, j, step,
                                  full);
                }
        }
    /* refused: beyond the next position, a missing token, too many sequences */
    ck_assert_int_eq(nf_transformer_decode_begin(dec, n), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_step(dec, c.P, yt, 1, xp, c.ctx), NF_EINVAL);
    ck_assert_int_eq(nf_transformer_decode_step(dec, c.P, yt, 0, NULL, c.ctx), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_step(dec, c.P, yt, 1, NULL, c.ctx), NF_EINVAL);
    ck_assert_int_eq(nf_transformer_decode_begin(dec, n + 3), NF_EINVAL);
    free(xp), free(yt);
    nf_transformer_decoder_free(dec);
    fcase_teardown(&c);
}
END_TEST

/* Decoding blocks of tokens: blocks of 4, 1, 3 and 1 tokens give the rows of the full forward; a
 * block swept first from wrong inputs and then again from the right ones (a Jacobi sweep repeated)
 * gives them too, and so does every later block (its first sweep rewrote the cache). */
START_TEST(test_tf_decode_block)
{
    nf_transformer_config cfg = base_cfg;
    cfg.T = 9, cfg.d = 12, cfg.heads = 3, cfg.layers = 3;
    fcase c;
    const int n = 3, T = cfg.T, din = cfg.din, dout = cfg.dout, mmax = 4;
    tf_setup(&c, &cfg, n, 610);
    c.forward(&c);
    nf_transformer_decoder *dec = NULL;
    ck_assert_int_eq(nf_transformer_decoder_create_block(&dec, c.tf, n, mmax), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_begin(dec, n), NF_OK);
    nf_real *xp = malloc((size_t)n * mmax * din * sizeof *xp), *yt = malloc((size_t)n * mmax * dout * sizeof *yt);
    const int sizes[] = {4, 1, 3, 1};
    for (int k = 0, t0 = 0; k < 4; t0 += sizes[k++]) {
        const int m = sizes[k];
        for (int sweep = 0; sweep < 2; sweep++) {
            for (int b = 0; b < n; b++)
                for (int r = 0; r < m; r++)
                    for (int j = 0; j < din; j++)
                        xp[((size_t)b * m + r) * din + j] =
                            t0 + r == 0 ? 0 : c.x[((size_t)b * T + t0 + r - 1) * din + j] + (sweep ? 0 : (nf_real)0.37);
            ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, t0, m, xp, c.ctx), NF_OK);
        }
        for (int b = 0; b < n; b++)
            for (int r = 0; r < m; r++)
                for (int j = 0; j < dout; j++) {
                    const double full = c.y[((size_t)b * T + t0 + r) * dout + j];
                    const double blk = yt[((size_t)b * m + r) * dout + j];
                    ck_assert_msg(nf_test_relerr(full, blk, 1) < TOL_FWD,
                                  "block at %d of %d tokens, b=%d r=%d j=%d: %.10g, full forward %.10g", t0, m, b, r, j,
                                  blk, full);
                }
    }
    /* refused: a block longer than m_max, one running past T, one starting beyond the next position */
    ck_assert_int_eq(nf_transformer_decode_begin(dec, n), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, 0, mmax + 1, xp, c.ctx), NF_EINVAL);
    ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, 2, 2, xp, c.ctx), NF_EINVAL);
    ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, 0, 4, xp, c.ctx), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, 4, 4, xp, c.ctx), NF_OK);
    ck_assert_int_eq(nf_transformer_decode_block(dec, c.P, yt, 8, 2, xp, c.ctx), NF_EINVAL);
    free(xp), free(yt);
    nf_transformer_decoder_free(dec);
    fcase_teardown(&c);
}
END_TEST

START_TEST(test_tf_zero_init_and_errors)
{
    nf_transformer_config cfg = base_cfg;
    cfg.zero_init_output = 1;
    fcase c;
    memset(&c, 0, sizeof c);
    c.P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(700, 0);
    ck_assert_int_eq(nf_transformer_create(&c.tf, &cfg, c.P, "tf", rng), NF_OK);
    const int n = 2;
    c.nx = (size_t)n * cfg.T * cfg.din, c.ny = (size_t)n * cfg.T * cfg.dout, c.nc = (size_t)n * cfg.ctx;
    c.x = malloc(c.nx * sizeof *c.x), c.y = malloc(c.ny * sizeof *c.y), c.ctx = malloc(c.nc * sizeof *c.ctx);
    nf_test_fill_uniform(c.x, c.nx, -1.5, 1.7, 701);
    nf_test_fill_uniform(c.ctx, c.nc, -1, 1, 702);
    c.ws = malloc(nf_transformer_workspace(c.tf, n) * sizeof *c.ws);
    nf_transformer_forward(c.tf, c.P, c.ws, c.y, c.x, c.ctx, n);
    for (size_t i = 0; i < c.ny; i++) ck_assert_msg(c.y[i] == 0, "zero-initialised output y[%zu] = %g", i, (double)c.y[i]);
    ck_assert_int_eq(nf_transformer_get_config(c.tf)->mlp_ratio, 2);

    nf_transformer *bad = NULL;
    nf_transformer_config b = base_cfg;
    b.heads = 3;
    ck_assert_int_eq(nf_transformer_create(&bad, &b, c.P, "bad", rng), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "bad") != NULL, "message: %s", nf_strerror_last());
    b = base_cfg, b.T = 0;
    ck_assert_int_eq(nf_transformer_create(&bad, &b, c.P, "bad", rng), NF_EINVAL);
    b = base_cfg, b.qk_norm = 2;
    ck_assert_int_eq(nf_transformer_create(&bad, &b, c.P, "bad", rng), NF_EINVAL);
    b = base_cfg, b.pos_frames = 2; /* T = 5 is not 2 frames of equal length */
    ck_assert_int_eq(nf_transformer_create(&bad, &b, c.P, "bad", rng), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "pos_frames=2") != NULL, "message: %s", nf_strerror_last());
    b = base_cfg, b.window_group = 2, b.window_back = 1; /* T = 5 is not groups of 2 */
    ck_assert_int_eq(nf_transformer_create(&bad, &b, c.P, "bad", rng), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "window") != NULL, "message: %s", nf_strerror_last());
    ck_assert_ptr_null(bad);
    nf_rng_free(rng);
    fcase_teardown(&c);
}
END_TEST

static Suite *transformer_suite(void)
{
    Suite *s = suite_create("transformer");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 180);
    tcase_add_test(t, test_block_forward);
    tcase_add_test(t, test_block_gradients);
    tcase_add_test(t, test_block_decode);
    tcase_add_test(t, test_tf_gradients);
    tcase_add_test(t, test_tf_hidden_gradients);
    tcase_add_test(t, test_tf_causal);
    tcase_add_loop_test(t, test_tf_decode, 0, 2);
    tcase_add_test(t, test_tf_decode_block);
    tcase_add_test(t, test_tf_zero_init_and_errors);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(transformer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
