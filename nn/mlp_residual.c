/* nn/mlp_residual.c - the residual MLP (nflows' ResidualNet, and MADE with residual blocks).
 *
 *   r_0 = Linear_in([x | ctx])                                   (n, H)
 *   block b:  u = LN0(r_b)?   p = act(u or r_b)   q = Linear_b0(p)
 *             v = LN1(q)?     s = act(v or q)     r_{b+1} = r_b + Linear_b1(s)
 *   f = act(r_B),  y = Linear_out(f)
 * Layer norm sits where nflows puts batch norm (before each activation of a block).  Linear_b1 starts
 * at U(-1e-3, 1e-3) so every block starts near the identity.  For MADE all hidden layers share the
 * same sorted degrees, so the skips respect the masks; the context enters Linear_in (dense on the
 * context columns) and reaches later blocks through the skips (nflows' MaskedResidualBlock adds a
 * context linear in every block instead); MADE also feeds it to Linear_out([f | ctx]).
 *
 * Workspace after the linears' scratch: r_0, then per block [u cu | p | q | v cv | s | r_{b+1}]
 * (u, v, cu, cv only with layer norm; caches (n, 2)), then f, then dr, G1, G2 for backward.
 */
#include <string.h>

#include "nn/nn_internal.h"

static size_t block_size(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    return 4 * nH + (m->cfg.layer_norm ? 2 * nH + 4 * (size_t)n : 0);
}

size_t nf_mlp_residual_workspace(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    return nH + (size_t)m->cfg.layers * block_size(m, n) + nH + 3 * nH;
}

/* Pointers into one block's part of the workspace. */
typedef struct block_ws {
    nf_real *u, *cu, *p, *q, *v, *cv, *s, *r_next;
} block_ws;

static block_ws block_at(const nf_mlp *m, nf_real *base, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    block_ws b;
    nf_real *at = base;
    b.u = b.cu = b.v = b.cv = NULL;
    if (m->cfg.layer_norm) {
        b.u = at, at += nH;
        b.cu = at, at += 2 * (size_t)n;
    }
    b.p = at, at += nH;
    b.q = at, at += nH;
    if (m->cfg.layer_norm) {
        b.v = at, at += nH;
        b.cv = at, at += 2 * (size_t)n;
    }
    b.s = at, at += nH;
    b.r_next = at;
    return b;
}

void nf_mlp_residual_forward(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                             const nf_real *ctx, int n)
{
    const int B = m->cfg.layers;
    const size_t nH = (size_t)n * m->cfg.hidden;
    const nf_activation a = m->cfg.act;
    nf_real *r = ws + m->fixed_ws;
    nf_linear_forward_cat(&m->lin[0], P, ws + m->lin_ws[0], r, x, ctx, m->cfg.ctx, 0, n);
    for (int k = 0; k < B; k++) {
        block_ws b = block_at(m, r + nH, n);
        const nf_linear *l0 = &m->lin[1 + 2 * k], *l1 = &m->lin[2 + 2 * k];
        const nf_real *pre = r;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[2 * k], P, b.u, b.cu, r, n);
            pre = b.u;
        }
        nf_act_forward_ex(a, m->slope, b.p, pre, nH);
        nf_linear_forward(l0, P, ws + m->lin_ws[1 + 2 * k], b.q, b.p, n);
        pre = b.q;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[2 * k + 1], P, b.v, b.cv, b.q, n);
            pre = b.v;
        }
        nf_act_forward_ex(a, m->slope, b.s, pre, nH);
        memcpy(b.r_next, r, nH * sizeof *r);
        nf_linear_forward_cat(l1, P, ws + m->lin_ws[2 + 2 * k], b.r_next, b.s, NULL, 0, 1, n);
        r = b.r_next;
    }
    nf_real *f = r + nH;
    nf_act_forward_ex(a, m->slope, f, r, nH);
    nf_linear_forward_cat(&m->lin[m->nlin - 1], P, ws + m->lin_ws[m->nlin - 1], y, f, ctx, m->out_ctx, 0, n);
}

/* Reverse of forward.  dr carries dL/dr_b down the skip path: each block adds its branch's
 * contribution act'(.) (LN'(.)) W_b0^T act'(.) (LN'(.)) W_b1^T dr to it. */
void nf_mlp_residual_backward(const nf_mlp *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                              const nf_real *dy, const nf_real *x, const nf_real *ctx, int n)
{
    const int B = m->cfg.layers;
    const size_t nH = (size_t)n * m->cfg.hidden, bs = block_size(m, n);
    const nf_activation a = m->cfg.act;
    nf_real *r0 = ws + m->fixed_ws;
    nf_real *rB = r0 + (size_t)B * bs; /* r_B: r_0 if no blocks, else the last block's r_next */
    nf_real *f = rB + nH, *dr = f + nH, *G1 = dr + nH, *G2 = G1 + nH;
    const int lo = m->nlin - 1;
    nf_linear_backward_cat(&m->lin[lo], P, ws + m->lin_ws[lo], G1, dctx, dy, f, ctx, m->out_ctx, 0, n);
    nf_act_backward_ex(a, m->slope, dr, G1, rB, f, nH, 0);
    for (int k = B - 1; k >= 0; k--) {
        nf_real *r = r0 + (size_t)k * bs; /* r_k */
        block_ws b = block_at(m, r + nH, n);
        const nf_linear *l0 = &m->lin[1 + 2 * k], *l1 = &m->lin[2 + 2 * k];
        nf_linear_backward_cat(l1, P, ws + m->lin_ws[2 + 2 * k], G1, NULL, dr, b.s, NULL, 0, 0, n);
        nf_act_backward_ex(a, m->slope, G2, G1, m->cfg.layer_norm ? b.v : b.q, b.s, nH, 0);
        nf_real *dq = G2;
        if (m->cfg.layer_norm) {
            memset(G1, 0, nH * sizeof *G1);
            nf_layernorm_backward(&m->ln[2 * k + 1], P, G1, G2, b.q, b.cv, n);
            dq = G1;
        }
        nf_real *dp = dq == G1 ? G2 : G1;
        nf_linear_backward_cat(l0, P, ws + m->lin_ws[1 + 2 * k], dp, NULL, dq, b.p, NULL, 0, 0, n);
        if (m->cfg.layer_norm) {
            nf_act_backward_ex(a, m->slope, dq, dp, b.u, b.p, nH, 0); /* du, in dq's free buffer */
            nf_layernorm_backward(&m->ln[2 * k], P, dr, dq, r, b.cu, n);
        } else {
            nf_act_backward_ex(a, m->slope, dr, dp, r, b.p, nH, 1);
        }
    }
    nf_linear_backward_cat(&m->lin[0], P, ws + m->lin_ws[0], dx, dctx, dr, x, ctx, m->cfg.ctx, 1, n);
}
