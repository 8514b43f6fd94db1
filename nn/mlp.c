/* nn/mlp.c - the network every conditioner uses: building it, its workspace, and the plain MLP.
 *
 * Plain:    h_0 = [x | ctx];  a_l = Linear_l(h_l);  z_l = LayerNorm_l(a_l) (optional);
 *           h_{l+1} = act(z_l or a_l) for l < layers;  y = Linear_out(h_layers).
 * Residual: see nn/mlp_residual.c.
 * MADE puts masks (nn/made.c) on every linear; layer norm would mix all hidden units of a row and
 * break the autoregressive property, so MADE refuses it.  The context enters the first linear (dense
 * on the context columns) in every variant; residual skips carry it to later blocks.  MADE also feeds
 * it to the output linear, Linear_out([h | ctx]), because the outputs of the first input in the
 * order see no hidden unit and would otherwise ignore the context.
 *
 * Workspace: [scratch of each linear (weight norm: effective W; masks: dW)] then, for a batch of n,
 * per hidden layer l [a_l | h_l | z_l | cache_l (n,2)] (n, hidden) each, z and cache only with layer
 * norm, then two (n, hidden) buffers for the gradients travelling down in backward.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

static int check_config(const nf_mlp_config *c, const char *name)
{
    if (c->in < 0 || c->ctx < 0 || c->in + c->ctx < 1)
        return nf_error(NF_EINVAL, "network '%s': in=%d, ctx=%d; expected in, ctx >= 0 and in + ctx >= 1", name,
                        c->in, c->ctx);
    if (c->out < 1) return nf_error(NF_EINVAL, "network '%s': out=%d; expected >= 1", name, c->out);
    if (c->layers < 0) return nf_error(NF_EINVAL, "network '%s': layers=%d; expected >= 0", name, c->layers);
    if ((c->layers > 0 || c->residual) && c->hidden < 1)
        return nf_error(NF_EINVAL, "network '%s': hidden=%d; expected >= 1", name, c->hidden);
    if ((int)c->act < 0 || (int)c->act > (int)NF_ACT_IDENTITY)
        return nf_error(NF_EINVAL, "network '%s': activation %d is unknown; expected " NF_ACTIVATION_CHOICES, name,
                        (int)c->act);
    if (c->made) {
        int opi = c->out_per_input > 0 ? c->out_per_input : 1;
        if (c->in < 1) return nf_error(NF_EINVAL, "MADE '%s': in=%d; expected >= 1", name, c->in);
        if (c->out != c->in * opi)
            return nf_error(NF_EINVAL, "MADE '%s': out=%d; expected in * out_per_input = %d * %d = %d", name, c->out,
                            c->in, opi, c->in * opi);
        if (c->order < NF_ORDER_NATURAL || c->order > NF_ORDER_RANDOM)
            return nf_error(NF_EINVAL, "MADE '%s': order %d; expected " NF_ORDER_CHOICES " (0, 1 or 2)", name,
                            c->order);
        if (c->layer_norm)
            return nf_error(NF_EINVAL, "MADE '%s': layer norm mixes all hidden units and would break the "
                                       "autoregressive masks; expected layer_norm=0", name);
    }
    return NF_OK;
}

/* Degrees and masks; returns the mask of each linear through lmask (NULL entries: unmasked). */
static int build_made(nf_mlp *m, const unsigned char **lmask, nf_rng *rng, const char *name)
{
    const nf_mlp_config *c = &m->cfg;
    const int D = c->in, C = c->ctx, H = c->hidden, opi = c->out_per_input;
    const int direct = !c->residual && c->layers == 0;
    const int nhid = c->residual ? 2 * c->layers : c->layers - 1; /* hidden -> hidden linears */
    size_t size = direct ? (size_t)c->out * (D + C)
                         : (size_t)H * (D + C) + (nhid > 0 ? (size_t)H * H : 0) + (size_t)c->out * (H + C);
    m->deg = nf_calloc((size_t)D, sizeof(int), "MADE input degrees");
    m->hdeg = nf_calloc(H > 0 ? (size_t)H : 1, sizeof(int), "MADE hidden degrees");
    m->masks = nf_calloc(size, 1, "MADE masks");
    if (!m->deg || !m->hdeg || !m->masks) return nf_error_context(NF_ENOMEM, "MADE '%s'", name);
    NF_TRY(nf_made_input_degrees(m->deg, D, c->order, rng));
    if (direct) {
        nf_made_mask_direct(m->masks, m->deg, D, opi, C);
        lmask[0] = m->masks;
        return NF_OK;
    }
    nf_made_hidden_degrees(m->hdeg, H, D);
    unsigned char *min = m->masks, *mhid = min + (size_t)H * (D + C), *mout = mhid + (nhid > 0 ? (size_t)H * H : 0);
    nf_made_mask_input(min, m->hdeg, H, m->deg, D, C);
    if (nhid > 0) nf_made_mask_hidden(mhid, m->hdeg, H);
    nf_made_mask_output(mout, m->deg, D, opi, m->hdeg, H, C);
    for (int l = 0; l < m->nlin; l++) lmask[l] = mhid;
    lmask[0] = min;
    lmask[m->nlin - 1] = mout;
    return NF_OK;
}

static int build(nf_mlp *m, nf_params *P, const char *name, nf_rng *rng)
{
    const nf_mlp_config *c = &m->cfg;
    const int in = c->in + c->ctx, H = c->hidden, L = c->layers;
    char sub[NF_PARAM_NAME_MAX + 32];
    m->nlin = c->residual ? 2 * L + 2 : L + 1;
    m->nln = c->layer_norm ? (c->residual ? 2 * L : L) : 0;
    m->out_ctx = c->made && (c->residual || L > 0) ? c->ctx : 0;
    m->lin = nf_calloc((size_t)m->nlin, sizeof *m->lin, "network layers");
    m->lin_ws = nf_calloc((size_t)m->nlin, sizeof *m->lin_ws, "network workspace table");
    m->ln = nf_calloc(m->nln > 0 ? (size_t)m->nln : 1, sizeof *m->ln, "network layer norms");
    const unsigned char **lmask = nf_calloc((size_t)m->nlin, sizeof *lmask, "network masks");
    if (!m->lin || !m->lin_ws || !m->ln || !lmask) {
        free(lmask);
        return nf_error_context(NF_ENOMEM, "network '%s'", name);
    }
    int rc = c->made ? build_made(m, lmask, rng, name) : NF_OK;
    for (int l = 0; rc == NF_OK && l < m->nlin; l++) {
        int lin_in = l == 0 ? in : l == m->nlin - 1 ? H + m->out_ctx : H, lin_out = l == m->nlin - 1 ? c->out : H;
        if (l == m->nlin - 1)
            snprintf(sub, sizeof sub, "%s.out", name);
        else if (!c->residual)
            snprintf(sub, sizeof sub, "%s.fc%d", name, l);
        else if (l == 0)
            snprintf(sub, sizeof sub, "%s.in", name);
        else
            snprintf(sub, sizeof sub, "%s.block%d.fc%d", name, (l - 1) / 2, (l - 1) % 2);
        rc = nf_linear_init(&m->lin[l], P, sub, lin_in, lin_out, c->weight_norm, lmask[l], rng);
        /* A residual block's second linear starts near zero, so each block starts near the identity. */
        if (rc == NF_OK && c->residual && l > 0 && l < m->nlin - 1 && (l - 1) % 2 == 1)
            nf_linear_init_uniform(&m->lin[l], P, 1e-3, rng);
    }
    for (int k = 0; rc == NF_OK && k < m->nln; k++) {
        if (c->residual)
            snprintf(sub, sizeof sub, "%s.block%d.ln%d", name, k / 2, k % 2);
        else
            snprintf(sub, sizeof sub, "%s.ln%d", name, k);
        rc = nf_layernorm_init(&m->ln[k], P, sub, H);
    }
    free(lmask);
    if (rc != NF_OK) return rc;
    if (c->zero_init_output) nf_linear_zero(&m->lin[m->nlin - 1], P);
    m->fixed_ws = 0;
    for (int l = 0; l < m->nlin; l++) {
        m->lin_ws[l] = m->fixed_ws;
        m->fixed_ws += nf_linear_workspace(&m->lin[l], 0);
    }
    return NF_OK;
}

int nf_mlp_create(nf_mlp **out, const nf_mlp_config *cfg, nf_params *P, const char *name, nf_rng *rng)
{
    *out = NULL;
    if (!cfg || !P || !name) return nf_error(NF_EINVAL, "nf_mlp_create: configuration, store and name are required");
    NF_TRY(check_config(cfg, name));
    if (!rng) return nf_error(NF_EINVAL, "network '%s': a random number generator is needed to initialise it", name);
    nf_mlp *m = nf_calloc(1, sizeof *m, "network");
    if (!m) return nf_error_context(NF_ENOMEM, "network '%s'", name);
    m->cfg = *cfg;
    if (m->cfg.out_per_input < 1) m->cfg.out_per_input = 1;
    m->slope = cfg->leaky_slope != 0 ? cfg->leaky_slope : 0.01;
    int rc = build(m, P, name, rng);
    if (rc != NF_OK) {
        nf_mlp_free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

void nf_mlp_free(nf_mlp *m)
{
    if (!m) return;
    free(m->lin);
    free(m->lin_ws);
    free(m->ln);
    free(m->deg);
    free(m->hdeg);
    free(m->masks);
    free(m);
}

const nf_mlp_config *nf_mlp_get_config(const nf_mlp *m) { return &m->cfg; }

const int *nf_mlp_input_degrees(const nf_mlp *m) { return m->cfg.made ? m->deg : NULL; }

/* Per hidden layer: a, h (and z, cache with layer norm). */
static size_t plain_layer_size(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    return 2 * nH + (m->cfg.layer_norm ? nH + 2 * (size_t)n : 0);
}

size_t nf_mlp_workspace(const nf_mlp *m, int n)
{
    if (n < 0) n = 0;
    if (m->cfg.residual) return m->fixed_ws + nf_mlp_residual_workspace(m, n);
    const int L = m->cfg.layers;
    return m->fixed_ws + (size_t)L * plain_layer_size(m, n) + (L > 0 ? 2 * (size_t)n * m->cfg.hidden : 0);
}

void nf_mlp_forward(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                    const nf_real *ctx, int n)
{
    if (n <= 0) return;
    if (m->cfg.residual) {
        nf_mlp_residual_forward(m, P, ws, y, x, ctx, n);
        return;
    }
    const int L = m->cfg.layers, H = m->cfg.hidden, nc = m->cfg.ctx;
    const size_t nH = (size_t)n * H, per = plain_layer_size(m, n);
    nf_real *act = ws + m->fixed_ws;
    const nf_real *h = x; /* input of the current linear */
    for (int l = 0; l < L; l++) {
        nf_real *a = act + l * per, *hl = a + nH, *z = hl + nH, *cache = z + nH;
        if (l == 0)
            nf_linear_forward_cat(&m->lin[0], P, ws + m->lin_ws[0], a, x, ctx, nc, 0, n);
        else
            nf_linear_forward(&m->lin[l], P, ws + m->lin_ws[l], a, h, n);
        const nf_real *pre = a;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[l], P, z, cache, a, n);
            pre = z;
        }
        nf_act_forward_ex(m->cfg.act, m->slope, hl, pre, nH);
        h = hl;
    }
    if (L == 0)
        nf_linear_forward_cat(&m->lin[0], P, ws + m->lin_ws[0], y, x, ctx, nc, 0, n);
    else
        nf_linear_forward_cat(&m->lin[L], P, ws + m->lin_ws[L], y, h, ctx, m->out_ctx, 0, n);
}

/* Walks forward in reverse: dh -> act' -> (layer norm') -> linear' -> dh of the layer below. */
void nf_mlp_backward(const nf_mlp *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                     const nf_real *dy, const nf_real *x, const nf_real *ctx, int n)
{
    if (n <= 0) return;
    if (m->cfg.residual) {
        nf_mlp_residual_backward(m, P, ws, dx, dctx, dy, x, ctx, n);
        return;
    }
    const int L = m->cfg.layers, H = m->cfg.hidden, nc = m->cfg.ctx;
    const size_t nH = (size_t)n * H, per = plain_layer_size(m, n);
    nf_real *act = ws + m->fixed_ws;
    if (L == 0) {
        nf_linear_backward_cat(&m->lin[0], P, ws + m->lin_ws[0], dx, dctx, dy, x, ctx, nc, 1, n);
        return;
    }
    nf_real *G1 = act + L * per, *G2 = G1 + nH;
    nf_real *dh = G1, *tmp = G2;
    nf_linear_backward_cat(&m->lin[L], P, ws + m->lin_ws[L], dh, dctx, dy, act + (L - 1) * per + nH, ctx,
                           m->out_ctx, 0, n);
    for (int l = L - 1; l >= 0; l--) {
        nf_real *a = act + l * per, *hl = a + nH, *z = hl + nH, *cache = z + nH;
        const nf_real *pre = m->cfg.layer_norm ? z : a;
        nf_act_backward_ex(m->cfg.act, m->slope, tmp, dh, pre, hl, nH, 0);
        nf_real *da = tmp;
        if (m->cfg.layer_norm) {
            memset(dh, 0, nH * sizeof *dh);
            nf_layernorm_backward(&m->ln[l], P, dh, tmp, a, cache, n);
            da = dh;
        }
        if (l == 0) {
            nf_linear_backward_cat(&m->lin[0], P, ws + m->lin_ws[0], dx, dctx, da, x, ctx, nc, 1, n);
        } else {
            nf_real *next = da == G1 ? G2 : G1;
            nf_linear_backward_cat(&m->lin[l], P, ws + m->lin_ws[l], next, NULL, da, a - per + nH, NULL, 0, 0, n);
            dh = next;
            tmp = next == G1 ? G2 : G1;
        }
    }
}
