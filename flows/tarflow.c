/* flows/tarflow.c - one block of a transformer autoregressive flow (TarFlow, Zhai et al. 2024) on
 * the image in the first h*w*c entries (flows/image_shape.h; the rest passes through).
 *
 * The image is cut into T = (h/p)(w/p) patches of p x p pixels, each a token of din = p*p*c values
 * (entry (di, dj, k) of a patch at (di*p + dj)*c + k), tokens in raster order, or reversed when
 * reverse=1 (blocks alternate, so every token is conditioned on every other one across a flow).
 * A causal transformer (nn/transformer.h) reads the tokens x_0 .. x_{t-1} before token t (and the
 * class one-hot context) and gives per entry a raw log-scale a and a shift mu:
 *
 *   z_t = (x_t - mu_t) exp(-s_t),   s_t = clamp tanh(a_t / clamp),   log|det dz/dx| = -sum_t s_t
 *
 * (the soft clamp of affine-coupling: s = 0 at a = 0, so the zero-initialised output makes a new
 * block the identity, and exp never overflows).  The density direction is one transformer pass.
 * The sampling direction solves x_t = z_t exp(s_t(x_<t)) + mu_t(x_<t):
 *   sequential  token by token with the transformer's key/value cache (T cached steps, each costing
 *               what one token of a full pass costs);
 *   jacobi      x^{k+1} = g(x^k) over all tokens at once, a full pass per sweep, until the largest
 *               change is below jacobi_tol (flows/jacobi.h); token t is exact after t + 1 sweeps, so
 *               at most T sweeps; the start is x^0 = 0 (the data's centre);
 *   auto        sequential (Jacobi with blocks when jacobi_block is set): on a CPU the cached token
 *               steps cost one transformer pass in all, Jacobi a whole pass per sweep, so sequential
 *               is the faster (shapes 16x16, 64 images: 0.17 s against 1.7 s for 82 sweeps at tol
 *               1e-4); Jacobi's fewer passes pay where each pass runs in parallel (a GPU).
 *   blocks      (b->jacobi_block = m > 0) Jacobi over blocks of m tokens in turn, earlier blocks in the
 *               cache (inverse_blocks below).
 * b->last_sweeps counts transformer passes (sequential: T token steps = one pass in cost, reported
 * as T sequential steps).
 *
 * frames=K: the image is K frames stacked vertically (rows f h/K .. (f + 1) h/K - 1 are frame f),
 * and each frame is its own sequence of T tokens through the same transformer: the block is then a
 * frame-local flow (the video flow's local blocks, training/model_video.h), computed as one batch of
 * n K sequences, the log-determinant of row i the sum over its frames.
 * time_pos=F (F >= 2): the image's T tokens are F frames of T/F (a video's global block), and the
 * positional embedding of a token is that of its place in the frame plus that of its frame
 * (nn/transformer.h, pos_frames), so what the block learns about one frame's places holds for all.
 * seq_frames=F window=K (K >= 0): the T tokens are F frames of T/F, and a token attends only to its
 * own frame and the K before it (nn/attention.h's window; a video's global block: motion is read from
 * the last frames, and each frame's attention is not spread over the whole past).
 *
 * Classifier-free guidance (b->guidance = w, conditional blocks, sampling only): the conditioner's
 * outputs become (1 + w) f(x_<t, class) - w f(x_<t, empty context), both passes per step or sweep
 * (the model learns the empty context from the class dropout of training, training/model_image.h).
 *
 * Backward of the density direction, with e = exp(-s), z = (x - mu) e, L(z, logdet):
 *   dL/dx_t (direct) = dz e;  dL/dmu = -dz e;  dL/ds = -dz z - dL/dlogdet;  ds/da = 1 - (s/clamp)^2,
 * then the transformer's backward from d(a, mu) adds the path through x_<t.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/tarflow.h"

#include "core/blas.h"
#include "core/threads.h"
#include "core/simd.h"
#include "flows/fastmath.h"
#include "flows/image_shape.h"
#include "flows/jacobi.h"
#include "nn/transformer.h"

typedef struct tarflow_state {
    nf_image_shape img;
    int p, T, din;           /* patch side, tokens (of one frame), token width */
    int frames;              /* K frames stacked vertically, each its own sequence of T tokens (1: one image) */
    int reverse;
    nf_real clamp;
    nf_transformer *tf;
    nf_transformer_decoder *dec, *dec_u; /* created on the first sequential inverse (dec_u: the
                                           unconditional one of guided sampling) */
    int dec_n, dec_m;        /* rows and block length the decoders hold */
    int *tok_of;             /* (K T din) position in the image of token entry e (after the order) */
    nf_real *fwd_ws;         /* workspace of the last density-direction forward (NULL after an inverse) */
    int fwd_n;               /* its rows */
    const nf_real *dh;       /* (n, T, d) extra gradient of the hidden state (nf_tarflow_set_hidden_grad) */
} tarflow_state;

/* Workspace layout for n rows: xt, out, zt, dxt (token arrays), then the transformer's. */
typedef struct tf_ws {
    nf_real *xt;   /* (n, T, din) input tokens */
    nf_real *out;  /* (n, T, 2 din): raw log-scales a then shifts mu of each token */
    nf_real *zt;   /* (n, T, din) output tokens; Jacobi's second iterate */
    nf_real *dxt;  /* (n, T, din) token gradient; Jacobi's start */
    nf_real *dout; /* (n, T, 2 din) */
    nf_real *ctx;  /* (n, C) gathered contexts (Jacobi on a subset of rows) */
    nf_real *zctx; /* (n, C) the empty context (guidance) */
    nf_real *outu; /* (n, T, 2 din) unconditional outputs (guidance) */
    int *iwork;    /* (3 n) */
    nf_real *tfws;
} tf_ws;

/* Token entries of n rows: K T din each, i.e. n K sequences of T tokens. */
static size_t tok_len(const tarflow_state *st, int n) { return (size_t)n * st->frames * st->T * st->din; }

static tf_ws split_ws(const nf_bijector *b, nf_real *ws, int n)
{
    const tarflow_state *st = b->state;
    tf_ws w;
    size_t L = tok_len(st, n);
    w.xt = ws, ws += L;
    w.out = ws, ws += 2 * L;
    w.zt = ws, ws += L;
    w.dxt = ws, ws += L;
    w.dout = ws, ws += 2 * L;
    w.ctx = ws, ws += (size_t)n * (b->ctx_dim ? b->ctx_dim : 1);
    w.zctx = ws, ws += (size_t)n * (b->ctx_dim ? b->ctx_dim : 1);
    w.outu = ws, ws += 2 * L;
    w.iwork = (int *)ws, ws += (size_t)3 * n * st->frames; /* an int fits in an nf_real's bytes */
    w.tfws = ws;
    return w;
}

static size_t tarflow_workspace(const nf_bijector *b, int n)
{
    const tarflow_state *st = b->state;
    return 9 * tok_len(st, n) + (size_t)2 * n * (b->ctx_dim ? b->ctx_dim : 1) + (size_t)3 * n * st->frames +
           nf_transformer_workspace(st->tf, n * st->frames);
}

/* tokens[i, e] = x[i, tok_of[e]] (gather) and its adjoint (scatter, optionally adding). */
static void gather(const tarflow_state *st, nf_real *tok, const nf_real *x, int D, int n)
{
    const int E = st->frames * st->T * st->din;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < E; e++) tok[(size_t)i * E + e] = x[(size_t)i * D + st->tok_of[e]];
}

static void scatter(const tarflow_state *st, nf_real *x, const nf_real *tok, int D, int n, int add)
{
    const int E = st->frames * st->T * st->din;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < E; e++) {
            nf_real *d = x + (size_t)i * D + st->tok_of[e];
            *d = add ? *d + tok[(size_t)i * E + e] : tok[(size_t)i * E + e];
        }
}

static inline nf_real soft_clamp(nf_real a, nf_real c) { return c * NF_TANH(a / c); }

/* Guided conditioner outputs: out <- (1 + w) out - w outu, over len entries. */
static void guide(nf_real *out, const nf_real *outu, double w, size_t len)
{
    for (size_t k = 0; k < len; k++) out[k] = (nf_real)((1 + w) * out[k] - w * outu[k]);
}

/* Whether the sampling direction is guided: a weight, and a context to guide with. */
static int guided(const nf_bijector *b, const nf_real *ctx) { return b->guidance != 0 && b->ctx_dim > 0 && ctx; }

/* Split the elementwise loops over R sequences of T tokens over the OpenMP threads when large. */
static int split_rows(int R, const tarflow_state *st)
{
    return R > 1 && (size_t)R * st->T * st->din > 8192 && !nf_threads_in_parallel();
}

/* One sequence of T tokens (din values each; token t's (a, mu) in out[t * 2 din ..]): z = (x - mu)
 * exp(-s), s = soft_clamp(a); returns sum s.  Vectorised over each token's values (SIMD clones). */
NF_SIMD_CLONES static double affine_seq_forward(nf_real *z, const nf_real *x, const nf_real *out, int T, int din,
                                                nf_real clamp)
{
    double ld = 0;
    for (int t = 0; t < T; t++) {
        const nf_real *a = out + (size_t)t * 2 * din, *mu = a + din, *xv = x + (size_t)t * din;
        nf_real *zv = z + (size_t)t * din, lt = 0;
#pragma omp simd reduction(+ : lt)
        for (int k = 0; k < din; k++) {
            nf_real sk = soft_clamp(a[k], clamp);
            zv[k] = (xv[k] - mu[k]) * NF_EXP(-sk);
            lt += sk;
        }
        ld += lt;
    }
    return ld;
}

/* z = (x - mu) exp(-s) over R sequences of tokens; logdet[i / K] -= sum s (sequence i is frame
 * i mod K of row i / K). */
typedef struct affine_job {
    const tarflow_state *st;
    nf_real *z, *logdet, *dx, *dout;
    const nf_real *x, *out, *dz, *dl;
} affine_job;

/* Rows r0..r1 of logdet, each with its K sequences in order, so a thread owns each entry it writes. */
static void affine_forward_range(void *arg, size_t r0, size_t r1)
{
    const affine_job *j = arg;
    const int T = j->st->T, din = j->st->din, K = j->st->frames;
    const size_t E = (size_t)T * din;
    for (size_t r = r0; r < r1; r++) {
        double ld = 0;
        for (size_t i = r * K; i < (r + 1) * K; i++)
            ld += affine_seq_forward(j->z + i * E, j->x + i * E, j->out + 2 * i * E, T, din, j->st->clamp);
        j->logdet[r] -= (nf_real)ld;
    }
}

static void affine_forward(const tarflow_state *st, nf_real *zt, nf_real *logdet, const nf_real *xt,
                           const nf_real *out, int R)
{
    affine_job j = {st, zt, logdet, NULL, NULL, xt, out, NULL, NULL};
    nf_threads_ranges(split_rows(R, st) ? nf_blas_get_threads() : 1, (size_t)(R / st->frames), 1, affine_forward_range, &j);
}

/* Backward of affine_seq_forward for one sequence, its logdet's gradient dl (of -sum s) included:
 * with e = exp(-s), z = (x - mu) e:  dx = dz e,  dmu = -dz e,  da = (-dz z - dl) (1 - (s / c)^2). */
NF_SIMD_CLONES static void affine_seq_backward(nf_real *dx, nf_real *dout, const nf_real *dz, const nf_real *x,
                                               const nf_real *out, nf_real dl, int T, int din, nf_real clamp)
{
    for (int t = 0; t < T; t++) {
        const nf_real *a = out + (size_t)t * 2 * din, *mu = a + din, *xv = x + (size_t)t * din;
        const nf_real *dzv = dz + (size_t)t * din;
        nf_real *da = dout + (size_t)t * 2 * din, *dmu = da + din, *dxv = dx + (size_t)t * din;
#pragma omp simd
        for (int k = 0; k < din; k++) {
            nf_real sk = soft_clamp(a[k], clamp), e = NF_EXP(-sk), zk = (xv[k] - mu[k]) * e, r = sk / clamp;
            dxv[k] = dzv[k] * e;
            dmu[k] = -dzv[k] * e;
            da[k] = (-dzv[k] * zk - dl) * (1 - r * r);
        }
    }
}

static void affine_backward_range(void *arg, size_t i0, size_t i1)
{
    const affine_job *j = arg;
    const int T = j->st->T, din = j->st->din;
    const size_t E = (size_t)T * din;
    for (size_t i = i0; i < i1; i++)
        affine_seq_backward(j->dx + i * E, j->dout + 2 * i * E, j->dz + i * E, j->x + i * E, j->out + 2 * i * E,
                            j->dl[i / j->st->frames], T, din, j->st->clamp);
}

/* x = z exp(s) + mu for the tokens t in [t0, t1) of one row (its tokens x, z; its (a, mu) in out). */
static void affine_inverse_tokens(const tarflow_state *st, nf_real *x, const nf_real *z, const nf_real *out, int t0,
                                  int t1)
{
    const int din = st->din;
    for (int t = t0; t < t1; t++) {
        const nf_real *a = out + (size_t)t * 2 * din, *mu = a + din;
        for (int k = 0; k < din; k++)
            x[(size_t)t * din + k] = z[(size_t)t * din + k] * NF_EXP(soft_clamp(a[k], st->clamp)) + mu[k];
    }
}

static int tarflow_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    tarflow_state *st = b->state;
    tf_ws w = split_ws(b, ws, n);
    gather(st, w.xt, x, b->dim, n);
    nf_transformer_forward(st->tf, b->P, w.tfws, w.out, w.xt, ctx, n * st->frames);
    affine_forward(st, w.zt, logdet, w.xt, w.out, n * st->frames);
    scatter(st, y, w.zt, b->dim, n, 0);
    nf_image_tail(&st->img, b->dim, y, x, n, 0);
    st->fwd_ws = ws, st->fwd_n = n;
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

static int tarflow_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)x, (void)y; /* the forward's tokens are in the workspace */
    tarflow_state *st = b->state;
    tf_ws w = split_ws(b, ws, n);
    const int R = n * st->frames;
    gather(st, w.zt, dy, b->dim, n); /* dz tokens (zt is free after forward) */
    affine_job j = {st, NULL, NULL, w.dxt, w.dout, w.xt, w.out, w.zt, dlogdet};
    nf_threads_ranges(split_rows(R, st) ? nf_blas_get_threads() : 1, (size_t)R, 1, affine_backward_range, &j);
    nf_transformer_backward_hidden(st->tf, b->P, w.tfws, w.dxt, dctx, w.dout, st->dh, w.xt, ctx, R);
    if (dx) {
        scatter(st, dx, w.dxt, b->dim, n, 1);
        nf_image_tail(&st->img, b->dim, dx, dy, n, 1);
    }
    return NF_OK;
}

/* ---- the sampling direction ---------------------------------------------------------------------- */

/* The decoders for n rows and blocks of m tokens (dec_u too when guided), created or grown on first
 * use, begun; the empty context of guidance zeroed. */
static int begin_decoding(nf_bijector *b, tf_ws *w, int n, int m, int g)
{
    tarflow_state *st = b->state;
    if (!st->dec || st->dec_n < n || st->dec_m < m || (g && !st->dec_u)) {
        nf_transformer_decoder_free(st->dec);
        nf_transformer_decoder_free(st->dec_u);
        st->dec = st->dec_u = NULL;
        st->dec_n = st->dec_m = 0;
        NF_TRY(nf_transformer_decoder_create_block(&st->dec, st->tf, n, m));
        if (g) NF_TRY(nf_transformer_decoder_create_block(&st->dec_u, st->tf, n, m));
        st->dec_n = n, st->dec_m = m;
    }
    NF_TRY(nf_transformer_decode_begin(st->dec, n));
    if (g) {
        NF_TRY(nf_transformer_decode_begin(st->dec_u, n));
        memset(w->zctx, 0, (size_t)n * b->ctx_dim * sizeof(nf_real));
    }
    return NF_OK;
}

/* Sequential: token by token with the key/value cache; x tokens written into w.xt, z tokens in w.zt. */
static int inverse_sequential(nf_bijector *b, tf_ws *w, nf_real *logdet, const nf_real *ctx, int n)
{
    tarflow_state *st = b->state;
    const int T = st->T, din = st->din;
    const int g = guided(b, ctx);
    NF_TRY(begin_decoding(b, w, n, 1, g));
    nf_real *yt = w->out, *prev = w->dout; /* (n, 2 din) and (n, din) */
    for (int t = 0; t < T; t++) {
        for (int i = 0; t > 0 && i < n; i++)
            memcpy(prev + (size_t)i * din, w->xt + ((size_t)i * T + t - 1) * din, (size_t)din * sizeof(nf_real));
        NF_TRY(nf_transformer_decode_step(st->dec, b->P, yt, t, t ? prev : NULL, ctx));
        if (g) {
            NF_TRY(nf_transformer_decode_step(st->dec_u, b->P, w->outu, t, t ? prev : NULL, w->zctx));
            guide(yt, w->outu, b->guidance, (size_t)n * 2 * din);
        }
        for (int i = 0; i < n; i++) {
            const size_t at = ((size_t)i * T + t) * din;
            const nf_real *a = yt + (size_t)i * 2 * din, *mu = a + din;
            double ld = 0;
            for (int k = 0; k < din; k++) {
                nf_real s = soft_clamp(a[k], st->clamp);
                w->xt[at + k] = w->zt[at + k] * NF_EXP(s) + mu[k];
                ld += s;
            }
            logdet[i / st->frames] += (nf_real)ld;
        }
    }
    b->last_sweeps = T;
    b->last_fell_back = 0;
    return NF_OK;
}

typedef struct jacobi_ctx {
    nf_bijector *b;
    tf_ws *w;
    const nf_real *ctx;
    int n;
    nf_real *xg, *outg;  /* gathered rows: tokens (n, T, din), outputs (n, T, 2 din) */
} jacobi_ctx;

/* g(x)_t = z_t exp(s_t(x_<t)) + mu_t(x_<t) for the tokens of degree lo..hi (token t has degree t+1),
 * on the listed rows: one transformer pass over those rows. */
static int jacobi_sweep(void *user, nf_real *x_new, const nf_real *x_old, const int *rows, int nrows, int lo, int hi)
{
    jacobi_ctx *J = user;
    nf_bijector *b = J->b;
    tarflow_state *st = b->state;
    const int T = st->T, din = st->din, C = b->ctx_dim;
    const size_t E = (size_t)T * din;
    int m = rows ? nrows : J->n;
    for (int r = 0; r < m; r++) {
        int i = rows ? rows[r] : r;
        memcpy(J->xg + r * E, x_old + i * E, E * sizeof(nf_real));
        if (C) memcpy(J->w->ctx + (size_t)r * C, J->ctx + (size_t)i * C, (size_t)C * sizeof(nf_real));
    }
    nf_transformer_forward(st->tf, b->P, J->w->tfws, J->outg, J->xg, C ? J->w->ctx : NULL, m);
    if (guided(b, J->ctx)) {
        nf_transformer_forward(st->tf, b->P, J->w->tfws, J->w->outu, J->xg, J->w->zctx, m);
        guide(J->outg, J->w->outu, b->guidance, (size_t)m * 2 * E);
    }
    for (int r = 0; r < m; r++) {
        int i = rows ? rows[r] : r;
        if (x_new != x_old) memcpy(x_new + i * E, x_old + i * E, E * sizeof(nf_real));
        affine_inverse_tokens(st, x_new + i * E, J->w->zt + i * E, J->outg + r * 2 * E, lo - 1, hi);
    }
    return NF_OK;
}

static int logdet_at_solution(nf_bijector *b, tf_ws *w, nf_real *logdet, const nf_real *ctx, int n);

static int inverse_jacobi(nf_bijector *b, tf_ws *w, nf_real *logdet, const nf_real *ctx, int n)
{
    tarflow_state *st = b->state;
    const size_t E = (size_t)st->T * st->din;
    /* buffers: the iterate in w->xt, the start (zeros) in w->dxt, the second iterate in the second
     * half of w->dout and the gathered rows in its first half; their outputs in w->out */
    nf_real *xbuf = w->dout + (size_t)n * E;
    memset(w->dxt, 0, (size_t)n * E * sizeof(nf_real));
    if (b->ctx_dim) memset(w->zctx, 0, (size_t)n * b->ctx_dim * sizeof(nf_real));
    jacobi_ctx J = {.b = b, .w = w, .ctx = ctx, .n = n, .xg = w->dout, .outg = w->out};
    nf_jacobi_config cfg = nf_jacobi_config_of(b, st->T);
    nf_jacobi_result res;
    NF_TRY(nf_jacobi_solve_rows(&cfg, jacobi_sweep, &J, w->xt, w->dxt, xbuf, n, E, w->iwork, &res));
    b->last_sweeps = res.sweeps;
    b->last_fell_back = res.fell_back;
    return logdet_at_solution(b, w, logdet, ctx, n);
}

/* logdet[i] += sum_t s_t(x_<t) at the solution x in w->xt: one more (parallel) pass. */
static int logdet_at_solution(nf_bijector *b, tf_ws *w, nf_real *logdet, const nf_real *ctx, int n)
{
    tarflow_state *st = b->state;
    const size_t E = (size_t)st->T * st->din;
    nf_transformer_forward(st->tf, b->P, w->tfws, w->out, w->xt, ctx, n);
    if (guided(b, ctx)) {
        nf_transformer_forward(st->tf, b->P, w->tfws, w->outu, w->xt, w->zctx, n);
        guide(w->out, w->outu, b->guidance, (size_t)n * 2 * E);
    }
    for (int i = 0; i < n; i++) {
        double ld = 0;
        for (size_t e = 0; e < E; e++) {
            size_t t = e / st->din, k = e % st->din;
            ld += soft_clamp(w->out[(size_t)i * 2 * E + t * 2 * st->din + k], st->clamp);
        }
        logdet[i / st->frames] += (nf_real)ld;
    }
    return NF_OK;
}

/* Block Jacobi (Gauss-Seidel over blocks of m = jacobi_block tokens, Jacobi within one): block by
 * block, the sweeps x^{k+1}_t = z_t exp(s_t(x^k_<t)) + mu_t(x^k_<t) for the block's tokens t, each one
 * decoder pass, until no value moves more than jacobi_tol, or m sweeps (after which every token of
 * the block, and the cache, is exact).  A block starts from the previous block's tokens (the
 * neighbouring row of patches; in a video, the previous frame's), the first from 0.
 *
 * The exact prefix is not decoded again.  Before sweep k (from 0) of a block starting at t0, tokens
 * t0 .. t0+k-1 are exact (token t0+j reads x_{t0+j-1} and earlier, exact after sweep j-1), and so are
 * the cache entries of positions t0 .. t0+k-1, last written by sweep j from the exact x_{t0+j-1}; a
 * sweep recomputing them would give the same values.  So sweep k decodes positions t0+k .. t0+m-1
 * only, m - k rows where a sweep over the whole block took m: about half the rows when a block needs
 * nearly m sweeps, the same sweeps and the same x (tests/check_bij_tarflow.c).
 * last_sweeps counts the sweeps of all blocks: the passes that have to run one after another. */
static int inverse_blocks(nf_bijector *b, tf_ws *w, nf_real *logdet, const nf_real *ctx, int n)
{
    tarflow_state *st = b->state;
    const int T = st->T, din = st->din, m = b->jacobi_block < T ? b->jacobi_block : T, g = guided(b, ctx);
    NF_TRY(begin_decoding(b, w, n, m, g));
    nf_real *xin = w->dout, *yt = w->out; /* (n, ms, din) inputs of a sweep, (n, ms, 2 din) its outputs */
    int sweeps = 0;
    for (int t0 = 0; t0 < T; t0 += m) {
        const int mb = T - t0 < m ? T - t0 : m;
        for (int i = 0; i < n; i++) {
            nf_real *x = w->xt + ((size_t)i * T + t0) * din;
            if (t0 >= m) memcpy(x, x - (size_t)m * din, (size_t)mb * din * sizeof *x);
            else memset(x, 0, (size_t)mb * din * sizeof *x);
        }
        for (int k = 0; k < mb; k++) {
            const int s0 = t0 + k, ms = mb - k; /* this sweep's positions s0 .. s0+ms-1 */
            for (int i = 0; i < n; i++)
                for (int r = 0; r < ms; r++) {
                    nf_real *in = xin + ((size_t)i * ms + r) * din;
                    if (s0 + r == 0) memset(in, 0, (size_t)din * sizeof *in); /* the start token is the model's */
                    else memcpy(in, w->xt + ((size_t)i * T + s0 + r - 1) * din, (size_t)din * sizeof *in);
                }
            NF_TRY(nf_transformer_decode_block(st->dec, b->P, yt, s0, ms, xin, ctx));
            if (g) {
                NF_TRY(nf_transformer_decode_block(st->dec_u, b->P, w->outu, s0, ms, xin, w->zctx));
                guide(yt, w->outu, b->guidance, (size_t)n * ms * 2 * din);
            }
            sweeps++;
            double change = 0;
            for (int i = 0; i < n; i++)
                for (int r = 0; r < ms; r++) {
                    const size_t at = ((size_t)i * T + s0 + r) * din;
                    const nf_real *a = yt + ((size_t)i * ms + r) * 2 * din, *mu = a + din;
                    for (int e = 0; e < din; e++) {
                        nf_real v = w->zt[at + e] * NF_EXP(soft_clamp(a[e], st->clamp)) + mu[e];
                        change = fmax(change, fabs((double)v - w->xt[at + e]));
                        w->xt[at + e] = v;
                    }
                }
            if (change <= b->jacobi_tol) break;
        }
    }
    b->last_sweeps = sweeps;
    b->last_fell_back = 0;
    return logdet_at_solution(b, w, logdet, ctx, n);
}

static int tarflow_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    tarflow_state *st = b->state;
    tf_ws w = split_ws(b, ws, n);
    st->fwd_ws = NULL; /* the sweeps overwrite the forward's caches */
    gather(st, w.zt, y, b->dim, n);
    /* the solvers work on the R = n K sequences; logdet[i / K] receives sequence i's */
    const int R = n * st->frames;
    int rc;
    if (b->invert_method == NF_INVERT_SEQUENTIAL || (b->invert_method == NF_INVERT_AUTO && b->jacobi_block == 0)) {
        rc = inverse_sequential(b, &w, logdet, ctx, R);
    } else if (b->jacobi_block > 0) {
        rc = inverse_blocks(b, &w, logdet, ctx, R);
    } else {
        rc = inverse_jacobi(b, &w, logdet, ctx, R);
    }
    if (rc != NF_OK) return nf_error_context(rc, "%s inverse", b->name);
    scatter(st, x, w.xt, b->dim, n, 0);
    nf_image_tail(&st->img, b->dim, x, y, n, 0);
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* ---- construction ---------------------------------------------------------------------------------- */

static void tarflow_destroy(nf_bijector *b);

/* The state from the options into b->state (which tarflow_create frees again when this fails). */
static int tarflow_build(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    tarflow_state *st = calloc(1, sizeof *st);
    if (!st) return nf_error(NF_ENOMEM, "%s: out of memory", b->name);
    b->state = st;
    int width, heads, layers, mlp, qk;
    double clamp;
    NF_TRY(nf_image_shape_read(&st->img, b, opts));
    NF_TRY(nf_opts_int(opts, "patch", 1, 1, 1 << 12, &st->p));
    NF_TRY(nf_opts_int(opts, "width", 64, 1, 1 << 14, &width));
    NF_TRY(nf_opts_int(opts, "heads", 4, 1, 256, &heads));
    NF_TRY(nf_opts_int(opts, "layers", 2, 0, 256, &layers));
    NF_TRY(nf_opts_int(opts, "mlp", 4, 1, 64, &mlp));
    NF_TRY(nf_opts_int(opts, "qk", 1, 0, 1, &qk));
    NF_TRY(nf_opts_int(opts, "reverse", 0, 0, 1, &st->reverse));
    NF_TRY(nf_opts_double(opts, "clamp", 4, 0.1, 50, &clamp));
    NF_TRY(nf_opts_int(opts, "frames", 1, 1, 1 << 16, &st->frames));
    int time_pos, seq_frames, window;
    NF_TRY(nf_opts_int(opts, "time_pos", 0, 0, 1 << 16, &time_pos));
    NF_TRY(nf_opts_int(opts, "seq_frames", 0, 0, 1 << 16, &seq_frames));
    NF_TRY(nf_opts_int(opts, "window", -1, -1, 1 << 16, &window));
    const nf_image_shape *im = &st->img;
    const int K = st->frames, hf = im->h / K; /* each frame hf x w */
    if (im->h % K)
        return nf_error(NF_EINVAL, "%s: frames=%d must divide the image height h=%d (frames are stacked vertically)",
                        b->name, K, im->h);
    if (K > 1 && b->ctx_dim > 0)
        return nf_error(NF_EINVAL, "%s: frames=%d with a context of %d values (frame-local blocks are unconditional)",
                        b->name, K, b->ctx_dim);
    if (hf % st->p || im->w % st->p)
        return nf_error(NF_EINVAL, "%s: patch=%d must divide the %s sides h=%d and w=%d", b->name, st->p,
                        K > 1 ? "frame" : "image", hf, im->w);
    if (width % heads)
        return nf_error(NF_EINVAL, "%s: width=%d is not a multiple of heads=%d", b->name, width, heads);
    st->clamp = (nf_real)clamp;
    st->T = (hf / st->p) * (im->w / st->p);
    st->din = st->p * st->p * im->c;
    st->tok_of = malloc((size_t)K * st->T * st->din * sizeof *st->tok_of);
    if (!st->tok_of) return nf_error(NF_ENOMEM, "%s: out of memory", b->name);
    const int pw = im->w / st->p;
    /* sequence f (frame f, image rows f hf .. (f + 1) hf - 1), token t in raster order or reversed */
    for (int f = 0; f < K; f++)
        for (int t = 0; t < st->T; t++) {
            int src = st->reverse ? st->T - 1 - t : t, bi = f * (hf / st->p) + src / pw, bj = src % pw;
            for (int di = 0; di < st->p; di++)
                for (int dj = 0; dj < st->p; dj++)
                    for (int k = 0; k < im->c; k++)
                        st->tok_of[((size_t)f * st->T + t) * st->din + (di * st->p + dj) * im->c + k] =
                            ((bi * st->p + di) * im->w + (bj * st->p + dj)) * im->c + k;
        }
    nf_transformer_config tc = {.din = st->din, .dout = 2 * st->din, .T = st->T, .d = width, .heads = heads,
                                .layers = layers, .mlp_ratio = mlp, .ctx = b->ctx_dim,
                                .qk_norm = qk ? NF_QK_RMS : NF_QK_NONE, .zero_init_output = 1,
                                .pos_frames = time_pos};
    if (time_pos > 1 && st->T % time_pos)
        return nf_error(NF_EINVAL, "%s: time_pos=%d must divide the %d tokens (frames of equal token counts)", b->name,
                        time_pos, st->T);
    if (window >= 0) {
        if (seq_frames < 1 || st->T % seq_frames)
            return nf_error(NF_EINVAL, "%s: window=%d needs seq_frames=F, the frames (of equal token counts) that the "
                            "%d tokens are; got seq_frames=%d", b->name, window, st->T, seq_frames);
        tc.window_group = st->T / seq_frames, tc.window_back = window;
    }
    char name[96];
    snprintf(name, sizeof name, "%s.tf", b->name);
    return nf_transformer_create(&st->tf, &tc, b->P, name, rng);
}

static int tarflow_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    int rc = tarflow_build(b, opts, rng);
    if (rc != NF_OK) tarflow_destroy(b);
    return rc;
}

static void tarflow_destroy(nf_bijector *b)
{
    tarflow_state *st = b->state;
    if (!st) return;
    nf_transformer_decoder_free(st->dec);
    nf_transformer_decoder_free(st->dec_u);
    nf_transformer_free(st->tf);
    free(st->tok_of);
    free(st);
    b->state = NULL;
}

const nf_bijector_type nf_bijector_tarflow = {
    .name = "tarflow",
    .options_help = "h=1 w=1 c=D/(h*w) patch=1 width=64 heads=4 layers=2 mlp=4 qk=1 reverse=0|1 clamp=4 frames=1 "
                    "time_pos=0 seq_frames=0 window=-1",
    .create = tarflow_create,
    .destroy = tarflow_destroy,
    .workspace = tarflow_workspace,
    .forward = tarflow_forward,
    .inverse = tarflow_inverse,
    .backward = tarflow_backward,
    .inverse_backward = NULL,
};

/* ---- the hidden-state hooks (flows/tarflow.h) ------------------------------------------------------- */

int nf_tarflow_is(const nf_bijector *b) { return b && b->type == &nf_bijector_tarflow; }

int nf_tarflow_shape(const nf_bijector *b, int *T, int *d, int *reverse)
{
    if (!nf_tarflow_is(b)) return nf_error(NF_EINVAL, "bijector '%s': expected a tarflow block", b ? b->name : "");
    const tarflow_state *st = b->state;
    *T = st->T;
    *d = nf_transformer_get_config(st->tf)->d;
    *reverse = st->reverse;
    return NF_OK;
}

const nf_real *nf_tarflow_hidden(const nf_bijector *b, int n)
{
    if (!nf_tarflow_is(b)) return NULL;
    const tarflow_state *st = b->state;
    if (!st->fwd_ws || st->fwd_n != n || st->frames != 1) return NULL;
    tf_ws w = split_ws(b, st->fwd_ws, n);
    return nf_transformer_hidden(st->tf, w.tfws, n);
}

void nf_tarflow_set_hidden_grad(nf_bijector *b, const nf_real *dh)
{
    if (nf_tarflow_is(b)) ((tarflow_state *)b->state)->dh = dh;
}
