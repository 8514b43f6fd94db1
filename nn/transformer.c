/* nn/transformer.c - the causal transformer conditioner of a transformer autoregressive flow
 * (nn/transformer.h): shifted input, embeddings, L pre-norm blocks, final layer norm, projection.
 *
 * Workspace for n sequences (N = n*T rows), forward part then backward scratch:
 *     u (N, din) shifted input | hs (L + 1, N, d) every block's input and the last output |
 *     block caches (L of nf_tblock_workspace) | f (N, d) = LN_f(h_L) | cf (N, 2) | ce (n, d) |
 *     scratch: dA, dB (N, d) gradients of consecutive h_l | du (N, din) | dce (n, d) |
 *              the blocks' shared scratch (nf_tblock_scratch), which forward uses too
 * The decoder keeps one key/value cache per block (nf_attention_kv_size at n_max) and the step's
 * scratch, allocated once by nf_transformer_decoder_create.
 */
#include "nn/transformer.h"
#include "nn/nn_internal.h"
#include "core/simd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct nf_transformer {
    nf_transformer_config cfg;
    size_t start, pos;          /* offsets: start token (din), positional embeddings (T, d) */
    size_t pos_time;            /* with pos_frames F >= 2: pos is (T/F, d), and pos_time (F, d) */
    int frame_len;              /* T/F tokens a frame (T without frames) */
    nf_linear in, ctx, out;     /* din -> d, C -> d (when C > 0), d -> dout */
    nf_tblock *blocks;          /* (layers) */
    nf_layernorm ln_f;
};

static int check_config(const nf_transformer_config *c, const char *name)
{
    if (c->din < 1 || c->dout < 1 || c->T < 1)
        return nf_error(NF_EINVAL, "transformer '%s': din=%d, dout=%d, T=%d; expected all >= 1", name, c->din,
                        c->dout, c->T);
    if (c->d < 1 || c->heads < 1 || c->d % c->heads != 0)
        return nf_error(NF_EINVAL, "transformer '%s': d=%d, heads=%d; expected heads >= 1 dividing d >= 1", name,
                        c->d, c->heads);
    if (c->layers < 0 || c->mlp_ratio < 0 || c->ctx < 0)
        return nf_error(NF_EINVAL, "transformer '%s': layers=%d, mlp_ratio=%d, ctx=%d; expected all >= 0", name,
                        c->layers, c->mlp_ratio, c->ctx);
    if (c->pos_frames < 0 || (c->pos_frames > 1 && c->T % c->pos_frames))
        return nf_error(NF_EINVAL, "transformer '%s': pos_frames=%d; expected 0, 1 or a divisor of T=%d", name,
                        c->pos_frames, c->T);
    if (c->qk_norm != NF_QK_NONE && c->qk_norm != NF_QK_RMS)
        return nf_error(NF_EINVAL, "transformer '%s': qk_norm=%d; expected 0 (none) or 1 (RMS)", name, c->qk_norm);
    if (c->window_group < 0 || c->window_back < 0 || (c->window_group > 0 && c->T % c->window_group))
        return nf_error(NF_EINVAL, "transformer '%s': window of groups of %d tokens, %d back; expected a group size "
                        "dividing T=%d (0: no window) and back >= 0", name, c->window_group, c->window_back, c->T);
    return NF_OK;
}

static int build(nf_transformer *tf, nf_params *P, const char *name, nf_rng *rng)
{
    const nf_transformer_config *c = &tf->cfg;
    char full[NF_PARAM_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s.start", name);
    NF_TRY(nf_params_add(P, full, (size_t)c->din, &tf->start));
    const int F = c->pos_frames > 1 ? c->pos_frames : 1;
    tf->frame_len = c->T / F;
    snprintf(full, sizeof full, "%s.pos", name);
    NF_TRY(nf_params_add(P, full, (size_t)tf->frame_len * c->d, &tf->pos));
    nf_rng_fill_normal(rng, P->value + tf->start, (size_t)c->din);
    nf_rng_fill_normal(rng, P->value + tf->pos, (size_t)tf->frame_len * c->d);
    for (size_t i = 0; i < (size_t)c->din; i++) P->value[tf->start + i] *= (nf_real)0.02;
    for (size_t i = 0; i < (size_t)tf->frame_len * c->d; i++) P->value[tf->pos + i] *= (nf_real)0.02;
    if (F > 1) {
        snprintf(full, sizeof full, "%s.pos_time", name);
        NF_TRY(nf_params_add(P, full, (size_t)F * c->d, &tf->pos_time));
        nf_rng_fill_normal(rng, P->value + tf->pos_time, (size_t)F * c->d);
        for (size_t i = 0; i < (size_t)F * c->d; i++) P->value[tf->pos_time + i] *= (nf_real)0.02;
    }
    snprintf(full, sizeof full, "%s.in", name);
    NF_TRY(nf_linear_init(&tf->in, P, full, c->din, c->d, 0, NULL, rng));
    if (c->ctx > 0) {
        snprintf(full, sizeof full, "%s.ctx", name);
        NF_TRY(nf_linear_init(&tf->ctx, P, full, c->ctx, c->d, 0, NULL, rng));
    }
    for (int l = 0; l < c->layers; l++) {
        snprintf(full, sizeof full, "%s.b%d", name, l);
        NF_TRY(nf_tblock_init(&tf->blocks[l], P, full, c->d, c->heads, c->mlp_ratio, c->qk_norm, rng));
        if (c->window_group > 0) NF_TRY(nf_attention_set_window(&tf->blocks[l].attn, c->window_group, c->window_back));
    }
    snprintf(full, sizeof full, "%s.ln_f", name);
    NF_TRY(nf_layernorm_init(&tf->ln_f, P, full, c->d));
    snprintf(full, sizeof full, "%s.out", name);
    NF_TRY(nf_linear_init(&tf->out, P, full, c->d, c->dout, 0, NULL, rng));
    if (c->zero_init_output) nf_linear_zero(&tf->out, P);
    return NF_OK;
}

int nf_transformer_create(nf_transformer **out, const nf_transformer_config *cfg, nf_params *P, const char *name,
                          nf_rng *rng)
{
    *out = NULL;
    NF_TRY(check_config(cfg, name));
    if (!rng) return nf_error(NF_EINVAL, "transformer '%s': no random number generator to initialise it", name);
    nf_transformer *tf = nf_calloc(1, sizeof *tf, "transformer");
    if (!tf) return NF_ENOMEM;
    tf->cfg = *cfg;
    if (tf->cfg.mlp_ratio == 0) tf->cfg.mlp_ratio = 4;
    if (cfg->layers > 0 && !(tf->blocks = nf_calloc((size_t)cfg->layers, sizeof *tf->blocks, "transformer blocks"))) {
        free(tf);
        return NF_ENOMEM;
    }
    int rc = build(tf, P, name, rng);
    if (rc != NF_OK) {
        nf_transformer_free(tf);
        return rc;
    }
    *out = tf;
    return NF_OK;
}

void nf_transformer_free(nf_transformer *tf)
{
    if (!tf) return;
    free(tf->blocks);
    free(tf);
}

const nf_transformer_config *nf_transformer_get_config(const nf_transformer *tf) { return &tf->cfg; }

static size_t blocks_ws(const nf_transformer *tf, int n)
{
    return tf->cfg.layers > 0 ? nf_tblock_workspace(&tf->blocks[0], n, tf->cfg.T) : 0;
}

static size_t blocks_sc(const nf_transformer *tf, int n)
{
    return tf->cfg.layers > 0 ? nf_tblock_scratch(&tf->blocks[0], n, tf->cfg.T) : 0;
}

size_t nf_transformer_workspace(const nf_transformer *tf, int n)
{
    const nf_transformer_config *c = &tf->cfg;
    const size_t N = (size_t)n * c->T, d = (size_t)c->d, L = (size_t)c->layers;
    size_t fwd = N * c->din + (L + 1) * N * d + L * blocks_ws(tf, n) + N * d + N * 2 + (size_t)n * d;
    size_t bwd = 2 * N * d + N * c->din + (size_t)n * d + blocks_sc(tf, n);
    return fwd + bwd;
}

typedef struct tviews {
    nf_real *u, *hs, *bws, *f, *cf, *ce;  /* forward */
    nf_real *dA, *dB, *du, *dce, *bsc;    /* backward scratch */
} tviews;

static tviews views_of(const nf_transformer *tf, nf_real *ws, int n)
{
    const nf_transformer_config *c = &tf->cfg;
    const size_t N = (size_t)n * c->T, d = (size_t)c->d, L = (size_t)c->layers;
    tviews v;
    nf_real *p = ws;
    v.u = p, p += N * c->din;
    v.hs = p, p += (L + 1) * N * d;
    v.bws = p, p += L * blocks_ws(tf, n);
    v.f = p, p += N * d;
    v.cf = p, p += N * 2;
    v.ce = p, p += (size_t)n * d;
    v.dA = p, p += N * d;
    v.dB = p, p += N * d;
    v.du = p, p += N * c->din;
    v.dce = p, p += (size_t)n * d;
    v.bsc = p;
    return v;
}

/* h (d) += pos_t: one embedding per position, or with frames space_(t mod S) + time_(t div S). */
NF_SIMD_CLONES static void add_pos(const nf_transformer *tf, const nf_params *P, nf_real *h, int t)
{
    const int d = tf->cfg.d, S = tf->frame_len;
    const nf_real *ps = P->value + tf->pos + (size_t)(t % S) * d;
#pragma omp simd
    for (int i = 0; i < d; i++) h[i] += ps[i];
    if (S < tf->cfg.T) {
        const nf_real *pt = P->value + tf->pos_time + (size_t)(t / S) * d;
#pragma omp simd
        for (int i = 0; i < d; i++) h[i] += pt[i];
    }
}

/* The embedding and gradient passes over a batch's tokens, on the pool when large (nf_nn_ranges). */
typedef struct embed_job {
    const nf_transformer *tf;
    nf_params *P;
    nf_real *h;        /* forward: the first hidden state (N, d) */
    const nf_real *ce; /* forward: the context embeddings (n, d) */
    const nf_real *e;  /* backward: dL/dh_0 (N, d) */
    int n;             /* sequences */
} embed_job;

/* Sequences b0..b1: h_{b,t} += pos_t (+ ce_b). */
static void embed_range(void *arg, size_t b0, size_t b1)
{
    const embed_job *j = arg;
    const int T = j->tf->cfg.T, d = j->tf->cfg.d, ctx = j->tf->cfg.ctx > 0;
    for (size_t b = b0; b < b1; b++)
        for (int t = 0; t < T; t++) {
            nf_real *h = j->h + (b * T + t) * d;
            add_pos(j->tf, j->P, h, t);
            if (ctx) nf_nn_add(h, j->ce + b * d, (size_t)d);
        }
}

/* Positions s0..s1 within a frame: dspace_s += sum over b, then t = s (mod S), of e_{b,t}, in that
 * order (each sum's order as one loop over all b, t would add them). */
static void pos_grad_range(void *arg, size_t s0, size_t s1)
{
    const embed_job *j = arg;
    const int T = j->tf->cfg.T, d = j->tf->cfg.d, S = j->tf->frame_len, n = j->n;
    for (size_t s = s0; s < s1; s++) {
        nf_real *gp = j->P->grad + j->tf->pos + s * d;
        for (int b = 0; b < n; b++)
            for (int t = (int)s; t < T; t += S) nf_nn_add(gp, j->e + ((size_t)b * T + t) * d, (size_t)d);
    }
}

/* Frames f0..f1: dtime_f += sum over b, then the frame's t, of e_{b,t}. */
static void time_grad_range(void *arg, size_t f0, size_t f1)
{
    const embed_job *j = arg;
    const int T = j->tf->cfg.T, d = j->tf->cfg.d, S = j->tf->frame_len, n = j->n;
    for (size_t f = f0; f < f1; f++) {
        nf_real *gt = j->P->grad + j->tf->pos_time + f * d;
        for (int b = 0; b < n; b++)
            for (int t = (int)f * S; t < (int)(f + 1) * S && t < T; t++)
                nf_nn_add(gt, j->e + ((size_t)b * T + t) * d, (size_t)d);
    }
}

/* u_{b,0} = s, u_{b,t} = x_{b,t-1};  h_0 = u Win^T + bin + pos_t + (ctx_b Wc^T + bc);
 * h_l = block_l(h_{l-1});  y = LN_f(h_L) Wout^T + bout. */
void nf_transformer_forward(const nf_transformer *tf, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                            const nf_real *ctx, int n)
{
    if (n <= 0) return;
    const nf_transformer_config *c = &tf->cfg;
    const int T = c->T, N = n * T, d = c->d, din = c->din;
    const size_t Nd = (size_t)N * d;
    tviews v = views_of(tf, ws, n);
    for (int b = 0; b < n; b++) {
        nf_real *ub = v.u + (size_t)b * T * din;
        memcpy(ub, P->value + tf->start, (size_t)din * sizeof *ub);
        memcpy(ub + din, x + (size_t)b * T * din, (size_t)(T - 1) * din * sizeof *ub);
    }
    nf_linear_forward(&tf->in, P, NULL, v.hs, v.u, N);
    if (c->ctx > 0) nf_linear_forward(&tf->ctx, P, NULL, v.ce, ctx, n);
    embed_job ej = {tf, (nf_params *)P, v.hs, v.ce, NULL, n};
    nf_nn_ranges((size_t)n, 1, Nd, embed_range, &ej);
    const size_t bw = blocks_ws(tf, n);
    for (int l = 0; l < c->layers; l++)
        nf_tblock_forward(&tf->blocks[l], P, v.bws + l * bw, v.bsc, v.hs + (l + 1) * Nd, v.hs + l * Nd, n, T);
    nf_layernorm_forward(&tf->ln_f, P, v.f, v.cf, v.hs + (size_t)c->layers * Nd, N);
    nf_linear_forward(&tf->out, P, NULL, y, v.f, N);
}

void nf_transformer_backward(const nf_transformer *tf, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                             const nf_real *dy, const nf_real *x, const nf_real *ctx, int n)
{
    nf_transformer_backward_hidden(tf, P, ws, dx, dctx, dy, NULL, x, ctx, n);
}

/* h_L is the last of the hs views (after u). */
const nf_real *nf_transformer_hidden(const nf_transformer *tf, const nf_real *ws, int n)
{
    const size_t Nd = (size_t)n * tf->cfg.T * tf->cfg.d;
    return ws + (size_t)n * tf->cfg.T * tf->cfg.din + (size_t)tf->cfg.layers * Nd;
}

/* Reverse of forward: df = dy Wout, dh_L = LN_f'(df) [+ dh, a second loss's gradient of the hidden
 * state], dh_{l-1} = block_l'(dh_l), then with e = dh_0:
 *   dpos_t += sum_b e_{b,t},  dctx_b += (sum_t e_{b,t}) Wc,  du = e Win,
 *   dx_{b,t-1} += du_{b,t} (t >= 1),  ds += sum_b du_{b,0}. */
void nf_transformer_backward_hidden(const nf_transformer *tf, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                    const nf_real *dy, const nf_real *dh, const nf_real *x, const nf_real *ctx, int n)
{
    (void)x; /* the shifted copy u in the workspace is what the input layer saw */
    if (n <= 0) return;
    const nf_transformer_config *c = &tf->cfg;
    const int T = c->T, N = n * T, d = c->d, din = c->din;
    const size_t Nd = (size_t)N * d;
    tviews v = views_of(tf, ws, n);
    nf_real *dcur = v.dA, *dprev = v.dB;
    nf_real *df = dprev; /* spent before dprev is first used */
    nf_linear_backward_cat(&tf->out, P, NULL, df, NULL, dy, v.f, NULL, 0, 0, N);
    nf_layernorm_backward_onto(&tf->ln_f, P, dcur, NULL, df, v.hs + (size_t)c->layers * Nd, v.cf, N); /* written */
    if (dh)
        for (size_t k = 0; k < Nd; k++) dcur[k] += dh[k];
    const size_t bw = blocks_ws(tf, n);
    for (int l = c->layers - 1; l >= 0; l--) {
        nf_tblock_backward_set(&tf->blocks[l], P, v.bws + l * bw, v.bsc, dprev, dcur, v.hs + l * Nd, n, T);
        nf_real *tmp = dcur;
        dcur = dprev, dprev = tmp;
    }
    const nf_real *e = dcur;
    const int S = tf->frame_len;
    embed_job ej = {tf, P, NULL, NULL, e, n};
    nf_nn_ranges((size_t)(S < T ? S : T), 1, Nd, pos_grad_range, &ej);
    if (S < T) nf_nn_ranges((size_t)((T + S - 1) / S), 1, Nd, time_grad_range, &ej);
    if (c->ctx > 0) {
        memset(v.dce, 0, (size_t)n * d * sizeof *v.dce);
        for (int b = 0; b < n; b++)
            for (int t = 0; t < T; t++) {
                const nf_real *et = e + ((size_t)b * T + t) * d;
                nf_real *db = v.dce + (size_t)b * d;
                for (int i = 0; i < d; i++) db[i] += et[i];
            }
        nf_linear_backward_cat(&tf->ctx, P, NULL, dctx, NULL, v.dce, ctx, NULL, 0, 1, n);
    }
    nf_linear_backward_cat(&tf->in, P, NULL, v.du, NULL, e, v.u, NULL, 0, 0, N);
    nf_real *gs = P->grad + tf->start;
    for (int b = 0; b < n; b++) {
        const nf_real *ub = v.du + (size_t)b * T * din;
        for (int i = 0; i < din; i++) gs[i] += ub[i];
        if (dx) {
            nf_real *xb = dx + (size_t)b * T * din;
            const size_t m = (size_t)(T - 1) * din;
            for (size_t i = 0; i < m; i++) xb[i] += ub[din + i];
        }
    }
}

/* ------------------------------------------------------------------------------ decoding */

struct nf_transformer_decoder {
    const nf_transformer *tf;
    int n_max, m_max, n, next; /* capacity (sequences, tokens per call), sequences now, next position */
    nf_real *kv;                /* (layers) caches of nf_attention_kv_size(n_max, T) */
    nf_real *ws;                /* step scratch */
    size_t kv_one;
};

/* Step scratch for N = n m rows: u (N, din) | hA, hB (N, d) | f (N, d) | cf (N, 2) | ce (n, d) |
 * block step scratch. */
static size_t step_ws(const nf_transformer *tf, int n, int m)
{
    const nf_transformer_config *c = &tf->cfg;
    const size_t N = (size_t)n * m;
    const size_t blk = c->layers > 0 ? nf_tblock_block_workspace(&tf->blocks[0], n, m, c->T) : 0;
    return N * (c->din + 3 * (size_t)c->d + 2) + (size_t)n * c->d + blk;
}

int nf_transformer_decoder_create(nf_transformer_decoder **out, const nf_transformer *tf, int n_max)
{
    return nf_transformer_decoder_create_block(out, tf, n_max, 1);
}

int nf_transformer_decoder_create_block(nf_transformer_decoder **out, const nf_transformer *tf, int n_max, int m_max)
{
    *out = NULL;
    const nf_transformer_config *c = &tf->cfg;
    if (n_max < 1) return nf_error(NF_EINVAL, "transformer decoder: n_max=%d sequences; expected >= 1", n_max);
    if (m_max < 1 || m_max > c->T)
        return nf_error(NF_EINVAL, "transformer decoder: blocks of %d tokens; expected 1..%d", m_max, c->T);
    nf_transformer_decoder *dec = nf_calloc(1, sizeof *dec, "transformer decoder");
    if (!dec) return NF_ENOMEM;
    dec->tf = tf;
    dec->n_max = n_max;
    dec->m_max = m_max;
    dec->kv_one = c->layers > 0 ? nf_attention_kv_size(&tf->blocks[0].attn, n_max, c->T) : 0;
    const size_t kv = dec->kv_one * c->layers;
    dec->kv = nf_calloc(kv ? kv : 1, sizeof *dec->kv, "transformer decoder key/value caches");
    dec->ws = nf_calloc(step_ws(tf, n_max, m_max), sizeof *dec->ws, "transformer decoder scratch");
    if (!dec->kv || !dec->ws) {
        nf_transformer_decoder_free(dec);
        return NF_ENOMEM;
    }
    *out = dec;
    return NF_OK;
}

void nf_transformer_decoder_free(nf_transformer_decoder *dec)
{
    if (!dec) return;
    free(dec->kv);
    free(dec->ws);
    free(dec);
}

int nf_transformer_decode_begin(nf_transformer_decoder *dec, int n)
{
    if (n < 1 || n > dec->n_max)
        return nf_error(NF_EINVAL, "transformer decoder: n=%d sequences; expected 1..%d (n_max at creation)", n,
                        dec->n_max);
    dec->n = n;
    dec->next = 0;
    return NF_OK;
}

int nf_transformer_decode_step(nf_transformer_decoder *dec, const nf_params *P, nf_real *y, int t,
                               const nf_real *xprev, const nf_real *ctx)
{
    return nf_transformer_decode_block(dec, P, y, t, 1, xprev, ctx);
}

/* The forward's formulas on tokens t0..t0+m-1 of every sequence (n m rows), each block's attention
 * through its cache. */
int nf_transformer_decode_block(nf_transformer_decoder *dec, const nf_params *P, nf_real *y, int t0, int m,
                                const nf_real *xprev, const nf_real *ctx)
{
    const nf_transformer *tf = dec->tf;
    const nf_transformer_config *c = &tf->cfg;
    const int n = dec->n, d = c->d, din = c->din, N = n * m;
    if (n < 1) return nf_error(NF_EINVAL, "transformer decoder: step before begin");
    if (m < 1 || m > dec->m_max)
        return nf_error(NF_EINVAL, "transformer decoder: a block of %d tokens; expected 1..%d (m_max at creation)", m,
                        dec->m_max);
    if (t0 < 0 || t0 > dec->next || t0 + m > c->T)
        return nf_error(NF_EINVAL, "transformer decoder: positions %d..%d; expected to start at 0..%d (decoded so "
                                   "far) and end below T=%d", t0, t0 + m - 1, dec->next < c->T - 1 ? dec->next : c->T - 1,
                        c->T);
    if ((t0 > 0 || m > 1) && !xprev)
        return nf_error(NF_EINVAL, "transformer decoder: no tokens given before position %d", t0 + m - 1);
    if (c->ctx > 0 && !ctx)
        return nf_error(NF_EINVAL, "transformer decoder: no context given; the network expects %d columns", c->ctx);
    const size_t nd = (size_t)N * d;
    nf_real *u = dec->ws, *hA = u + (size_t)N * din, *hB = hA + nd, *f = hB + nd, *cf = f + nd, *ce = cf + 2 * (size_t)N;
    nf_real *bws = ce + (size_t)n * d;
    /* row (b, r) reads x_{t0+r-1}: the start token at position 0 */
    for (int b = 0; b < n; b++)
        for (int r = 0; r < m; r++) {
            const size_t row = (size_t)b * m + r;
            memcpy(u + row * din, t0 + r == 0 ? P->value + tf->start : xprev + row * din, (size_t)din * sizeof *u);
        }
    nf_linear_forward(&tf->in, P, NULL, hA, u, N);
    if (c->ctx > 0) nf_linear_forward(&tf->ctx, P, NULL, ce, ctx, n);
    for (int b = 0; b < n; b++)
        for (int r = 0; r < m; r++) {
            nf_real *h = hA + ((size_t)b * m + r) * d;
            add_pos(tf, P, h, t0 + r);
            if (c->ctx > 0)
                for (int i = 0; i < d; i++) h[i] += ce[(size_t)b * d + i];
        }
    for (int l = 0; l < c->layers; l++) {
        NF_TRY(nf_tblock_block(&tf->blocks[l], P, bws, dec->kv + l * dec->kv_one, c->T, hB, hA, t0, m, n));
        nf_real *tmp = hA;
        hA = hB, hB = tmp;
    }
    nf_layernorm_forward(&tf->ln_f, P, f, cf, hA, N);
    nf_linear_forward(&tf->out, P, NULL, y, f, N);
    dec->next = t0 + m;
    return NF_OK;
}
