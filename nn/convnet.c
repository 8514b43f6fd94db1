/* nn/convnet.c - conv kxk -> relu -> conv 1x1 -> relu -> conv kxk, with a per-image context bias.
 *
 * Workspace (nf_reals, R = n*h*w pixels, H = hidden):
 *   a1 (R, H)  relu of the first layer (cached by forward)
 *   a2 (R, H)  relu of the middle layer (cached by forward)
 *   g2 (R, H)  backward: dL/dz2
 *   g1 (R, H)  backward: dL/dz1
 *   cb (n, H)  the context bias Wc ctx_b (forward), then its gradient summed over pixels (backward)
 *   scratch    the largest im2col scratch of the three convolutions, shared (conv2d.h)
 * The ReLU derivative is read from the cached outputs (a > 0), so no pre-activations are kept.
 */
#include "nn/convnet.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"
#include "nn/nn.h"

typedef struct convnet_ws {
    nf_real *a1, *a2, *g2, *g1, *cb, *scratch;
} convnet_ws;

static size_t pixels(int n, int h, int w) { return (size_t)n * h * w; }

static convnet_ws layout(const nf_convnet *m, nf_real *ws, int n, int h, int w)
{
    const size_t rh = pixels(n, h, w) * m->cfg.hidden;
    convnet_ws l;
    l.a1 = ws;
    l.a2 = l.a1 + rh;
    l.g2 = l.a2 + rh;
    l.g1 = l.g2 + rh;
    l.cb = l.g1 + rh;
    l.scratch = l.cb + (m->cfg.ctx > 0 ? (size_t)n * m->cfg.hidden : 0);
    return l;
}

int nf_convnet_init(nf_convnet *m, nf_params *P, const char *name, const nf_convnet_config *cfg, nf_rng *rng)
{
    if (cfg->in < 1 || cfg->out < 1 || cfg->hidden < 1 || cfg->ctx < 0)
        return nf_error(NF_EINVAL, "conv net '%s': in=%d, hidden=%d, out=%d, ctx=%d; expected in, hidden, out >= 1 and "
                        "ctx >= 0", name, cfg->in, cfg->hidden, cfg->out, cfg->ctx);
    if (!rng) return nf_error(NF_EINVAL, "conv net '%s': no random number generator to initialise it", name);
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    char sub[NF_PARAM_NAME_MAX + 16];
    snprintf(sub, sizeof sub, "%s.in", name);
    NF_TRY(nf_conv2d_init(&m->in, P, sub, cfg->in, cfg->hidden, cfg->k, rng));
    snprintf(sub, sizeof sub, "%s.mid", name);
    NF_TRY(nf_conv2d_init(&m->mid, P, sub, cfg->hidden, cfg->hidden, 1, rng));
    snprintf(sub, sizeof sub, "%s.out", name);
    NF_TRY(nf_conv2d_init(&m->out, P, sub, cfg->hidden, cfg->out, cfg->k, rng));
    if (cfg->zero_init_output) nf_conv2d_zero(&m->out, P);
    if (cfg->ctx > 0) {
        snprintf(sub, sizeof sub, "%s.ctx.weight", name);
        NF_TRY(nf_params_add(P, sub, (size_t)cfg->hidden * cfg->ctx, &m->wc));
        const double bound = 1.0 / sqrt((double)cfg->ctx);
        nf_rng_fill_uniform(rng, P->value + m->wc, (size_t)cfg->hidden * cfg->ctx, -bound, bound);
    }
    return NF_OK;
}

size_t nf_convnet_workspace(const nf_convnet *m, int n, int h, int w)
{
    if (n <= 0) return 0;
    size_t s = nf_conv2d_workspace(&m->in, n, h, w), t = nf_conv2d_workspace(&m->out, n, h, w);
    if (t > s) s = t; /* the 1x1 middle layer needs none */
    return 4 * pixels(n, h, w) * m->cfg.hidden + (m->cfg.ctx > 0 ? (size_t)n * m->cfg.hidden : 0) + s;
}

/* forward:  z1 = conv_in(x) + (ctx_b Wc^T at every pixel of image b),  a1 = relu(z1),
 *           a2 = relu(conv_mid(a1)),  y = conv_out(a2). */
void nf_convnet_forward(const nf_convnet *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                        const nf_real *ctx, int n, int h, int w)
{
    if (n <= 0 || h <= 0 || w <= 0) return;
    const int H = m->cfg.hidden, C = m->cfg.ctx;
    const size_t hw = (size_t)h * w, rh = pixels(n, h, w) * H;
    convnet_ws l = layout(m, ws, n, h, w);
    nf_conv2d_forward(&m->in, P, l.scratch, l.a1, x, n, h, w);
    if (C > 0 && ctx) {
        nf_gemm(0, 1, n, H, C, 1, ctx, C, P->value + m->wc, C, 0, l.cb, H);
        for (int b = 0; b < n; b++) {
            const nf_real *cbb = l.cb + (size_t)b * H;
            nf_real *z = l.a1 + (size_t)b * hw * H;
            for (size_t p = 0; p < hw; p++)
                for (int c = 0; c < H; c++) z[p * H + c] += cbb[c];
        }
    }
    nf_act_forward(NF_ACT_RELU, l.a1, l.a1, rh); /* in place; the shared kernel is branch-free and vectorised */
    nf_conv2d_forward(&m->mid, P, l.scratch, l.a2, l.a1, n, h, w);
    nf_act_forward(NF_ACT_RELU, l.a2, l.a2, rh);
    nf_conv2d_forward(&m->out, P, l.scratch, y, l.a2, n, h, w);
}

/* backward, in reverse:  g2 = (dy through conv_out) [a2 > 0];  g1 = (g2 through conv_mid) [a1 > 0];
 *   context: s_b = sum over the pixels of image b of g1,  dWc += s^T ctx,  dctx += s Wc;
 *   dx += g1 through conv_in.  Every conv backward also adds its weight and bias gradients. */
void nf_convnet_backward(const nf_convnet *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                         const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int h, int w)
{
    if (n <= 0 || h <= 0 || w <= 0) return;
    const int H = m->cfg.hidden, C = m->cfg.ctx;
    const size_t hw = (size_t)h * w, rh = pixels(n, h, w) * H;
    convnet_ws l = layout(m, ws, n, h, w);
    memset(l.g2, 0, rh * sizeof *l.g2);
    nf_conv2d_backward(&m->out, P, l.scratch, l.g2, dy, l.a2, n, h, w);
    nf_act_backward_ex(NF_ACT_RELU, 0, l.g2, l.g2, l.a2, l.a2, rh, 0); /* g2 *= [a2 > 0] */
    memset(l.g1, 0, rh * sizeof *l.g1);
    nf_conv2d_backward(&m->mid, P, l.scratch, l.g1, l.g2, l.a1, n, h, w);
    nf_act_backward_ex(NF_ACT_RELU, 0, l.g1, l.g1, l.a1, l.a1, rh, 0);
    if (C > 0 && ctx) {
        for (int b = 0; b < n; b++) {
            nf_real *s = l.cb + (size_t)b * H;
            const nf_real *g = l.g1 + (size_t)b * hw * H;
            for (int c = 0; c < H; c++) s[c] = 0;
            for (size_t p = 0; p < hw; p++)
                for (int c = 0; c < H; c++) s[c] += g[p * H + c];
        }
        nf_gemm(1, 0, H, C, n, 1, l.cb, H, ctx, C, 1, P->grad + m->wc, C);
        if (dctx) nf_gemm(0, 0, n, C, H, 1, l.cb, H, P->value + m->wc, C, 1, dctx, C);
    }
    nf_conv2d_backward(&m->in, P, l.scratch, dx, l.g1, x, n, h, w);
}
