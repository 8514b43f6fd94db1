/* nn/mlp_residual.c - the residual MLP (nflows' ResidualNet, and MADE with residual blocks), on a
 * thread's rows of the batch.
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
 * Backward, on rows, with dR_b = dL/dr_b:  dR_B = act'(r_B) (dy W_out);  for b = B-1..0:
 *   ds = dR_{b+1} W_b1;  dv = act'(.) ds;  dq = LN1'(dv) or dv;  dp = dq W_b0;  du = act'(.) dp;
 *   dR_b = dR_{b+1} + (LN0'(du) or du);   then dx, dctx += dR_0 W_in.
 * Every dR_b, dq, dv, du stays in the workspace for the parameter gradients that follow
 * (Linear_b1 gets dR_{b+1}, Linear_b0 dq, Linear_in dR_0, Linear_out dy).
 *
 * Workspace after the linears' scratch: r_0, then per block [u cu | p | q | v cv | s | r_{b+1}]
 * (u, v, cu, cv only with layer norm; caches (n, 2)), then f, G (n, H), dR_0..dR_B, and per block
 * [dq | dv | du] (dv, du only with layer norm).
 */
#include <string.h>

#include "nn/nn_internal.h"

static size_t block_size(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    return 4 * nH + (m->cfg.layer_norm ? 2 * nH + 4 * (size_t)n : 0);
}

static size_t block_grad_size(const nf_mlp *m, int n)
{
    return (size_t)n * m->cfg.hidden * (m->cfg.layer_norm ? 3 : 1);
}

size_t nf_mlp_residual_workspace(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden, B = (size_t)m->cfg.layers;
    return nH + B * block_size(m, n) + 2 * nH + (B + 1) * nH + B * block_grad_size(m, n);
}

/* Pointers into one block's part of the workspace, advanced to row r0. */
typedef struct block_ws {
    nf_real *r, *u, *cu, *p, *q, *v, *cv, *s, *r_next; /* forward (r: the block's input r_b) */
    nf_real *dR, *dR_next, *dq, *dv, *du;             /* backward */
} block_ws;

/* The regions shared by all blocks. */
typedef struct res_ws {
    nf_real *r0, *f, *G, *dR0;
} res_ws;

static res_ws res_at(const nf_mlp *m, nf_real *ws, int n, int r0)
{
    const size_t nH = (size_t)n * m->cfg.hidden, o = (size_t)r0 * m->cfg.hidden;
    nf_real *base = ws + m->fixed_ws;
    nf_real *f = base + nH + (size_t)m->cfg.layers * block_size(m, n);
    res_ws w = {base + o, f + o, f + nH + o, f + 2 * nH + o};
    return w;
}

static block_ws block_at(const nf_mlp *m, nf_real *ws, int n, int k, int r0)
{
    const size_t nH = (size_t)n * m->cfg.hidden, o = (size_t)r0 * m->cfg.hidden, oc = 2 * (size_t)r0;
    const res_ws R = res_at(m, ws, n, 0);
    block_ws b;
    nf_real *at = R.r0 + nH + (size_t)k * block_size(m, n);
    b.r = (k == 0 ? R.r0 : at - nH) + o;
    b.u = b.cu = b.v = b.cv = b.dv = b.du = NULL;
    if (m->cfg.layer_norm) {
        b.u = at + o, at += nH;
        b.cu = at + oc, at += 2 * (size_t)n;
    }
    b.p = at + o, at += nH;
    b.q = at + o, at += nH;
    if (m->cfg.layer_norm) {
        b.v = at + o, at += nH;
        b.cv = at + oc, at += 2 * (size_t)n;
    }
    b.s = at + o, at += nH;
    b.r_next = at + o;
    b.dR = R.dR0 + (size_t)k * nH + o;
    b.dR_next = b.dR + nH;
    nf_real *g = R.dR0 + (size_t)(m->cfg.layers + 1) * nH + (size_t)k * block_grad_size(m, n);
    b.dq = g + o;
    if (m->cfg.layer_norm) {
        b.dv = g + nH + o;
        b.du = g + 2 * nH + o;
    }
    return b;
}

void nf_mlp_residual_forward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                                  const nf_real *ctx, int n, int r0, int r1)
{
    const int B = m->cfg.layers, nc = m->cfg.ctx, rows = r1 - r0;
    if (rows <= 0) return;
    const size_t rH = (size_t)rows * m->cfg.hidden;
    const nf_activation a = m->cfg.act;
    const nf_real *cr = nc ? ctx + (size_t)r0 * nc : NULL;
    const res_ws R = res_at(m, ws, n, r0);
    nf_linear_apply(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], R.r0, x + (size_t)r0 * m->cfg.in, cr, nc,
                    0, rows);
    const nf_real *r = R.r0;
    for (int k = 0; k < B; k++) {
        block_ws b = block_at(m, ws, n, k, r0);
        const int l0 = 1 + 2 * k, l1 = 2 + 2 * k;
        const nf_real *pre = r;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[2 * k], P, b.u, b.cu, r, rows);
            pre = b.u;
        }
        nf_act_forward_ex(a, m->slope, b.p, pre, rH);
        nf_linear_apply(&m->lin[l0], nf_mlp_blocks(m, l0), P, ws + m->lin_ws[l0], b.q, b.p, NULL, 0, 0, rows);
        pre = b.q;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[2 * k + 1], P, b.v, b.cv, b.q, rows);
            pre = b.v;
        }
        nf_act_forward_ex(a, m->slope, b.s, pre, rH);
        nf_linear_apply_res(&m->lin[l1], nf_mlp_blocks(m, l1), P, ws + m->lin_ws[l1], b.r_next, r, b.s, rows);
        r = b.r_next;
    }
    nf_act_forward_ex(a, m->slope, R.f, r, rH);
    const int lo = m->nlin - 1;
    nf_linear_apply(&m->lin[lo], nf_mlp_blocks(m, lo), P, ws + m->lin_ws[lo], y + (size_t)r0 * m->cfg.out, R.f,
                    m->out_ctx ? cr : NULL, m->out_ctx, 0, rows);
}

void nf_mlp_residual_backward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                   const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int r0, int r1)
{
    (void)x, (void)ctx;
    const int B = m->cfg.layers, nc = m->cfg.ctx, rows = r1 - r0;
    if (rows <= 0) return;
    const size_t rH = (size_t)rows * m->cfg.hidden;
    const nf_activation a = m->cfg.act;
    nf_real *dcr = dctx && nc ? dctx + (size_t)r0 * nc : NULL;
    const res_ws R = res_at(m, ws, n, r0);
    const int lo = m->nlin - 1;
    nf_real *dRB = R.dR0 + (size_t)B * n * m->cfg.hidden; /* dR_B */
    const nf_real *rB = B ? block_at(m, ws, n, B - 1, r0).r_next : R.r0;
    nf_linear_grad_input(&m->lin[lo], nf_mlp_blocks(m, lo), P, ws + m->lin_ws[lo], R.G, m->out_ctx ? dcr : NULL,
                         dy + (size_t)r0 * m->cfg.out, m->out_ctx, 0, rows);
    nf_act_backward_ex(a, m->slope, dRB, R.G, rB, R.f, rH, 0);
    for (int k = B - 1; k >= 0; k--) {
        block_ws b = block_at(m, ws, n, k, r0);
        const int l0 = 1 + 2 * k, l1 = 2 + 2 * k;
        nf_linear_grad_input(&m->lin[l1], nf_mlp_blocks(m, l1), P, ws + m->lin_ws[l1], R.G, NULL, b.dR_next, 0, 0,
                             rows);
        if (m->cfg.layer_norm) {
            nf_act_backward_ex(a, m->slope, b.dv, R.G, b.v, b.s, rH, 0);
            memset(b.dq, 0, rH * sizeof *b.dq);
            nf_layernorm_grad_input(&m->ln[2 * k + 1], P, b.dq, b.dv, b.q, b.cv, rows);
        } else {
            nf_act_backward_ex(a, m->slope, b.dq, R.G, b.q, b.s, rH, 0);
        }
        nf_linear_grad_input(&m->lin[l0], nf_mlp_blocks(m, l0), P, ws + m->lin_ws[l0], R.G, NULL, b.dq, 0, 0, rows);
        memcpy(b.dR, b.dR_next, rH * sizeof *b.dR);
        if (m->cfg.layer_norm) {
            nf_act_backward_ex(a, m->slope, b.du, R.G, b.u, b.p, rH, 0);
            nf_layernorm_grad_input(&m->ln[2 * k], P, b.dR, b.du, b.r, b.cu, rows);
        } else {
            nf_act_backward_ex(a, m->slope, b.dR, R.G, b.r, b.p, rH, 1);
        }
    }
    nf_linear_grad_input(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], dx ? dx + (size_t)r0 * m->cfg.in : NULL,
                         dcr, R.dR0, nc, 1, rows);
}

void nf_mlp_residual_backward_params(const nf_mlp *m, nf_params *P, nf_real *ws, const nf_real *dy,
                                     const nf_real *x, const nf_real *ctx, int n, int part, int parts)
{
    const int B = m->cfg.layers, H = m->cfg.hidden, lo = m->nlin - 1;
    const int c0 = (int)((long)H * part / parts), c1 = (int)((long)H * (part + 1) / parts);
    const res_ws R = res_at(m, ws, n, 0);
    nf_linear_grad_params(&m->lin[lo], nf_mlp_blocks(m, lo), P, ws + m->lin_ws[lo], dy, R.f, ctx, m->out_ctx, n, part,
                          parts);
    for (int k = 0; k < B; k++) {
        block_ws b = block_at(m, ws, n, k, 0);
        const int l0 = 1 + 2 * k, l1 = 2 + 2 * k;
        nf_linear_grad_params(&m->lin[l1], nf_mlp_blocks(m, l1), P, ws + m->lin_ws[l1], b.dR_next, b.s, NULL, 0, n,
                              part, parts);
        nf_linear_grad_params(&m->lin[l0], nf_mlp_blocks(m, l0), P, ws + m->lin_ws[l0], b.dq, b.p, NULL, 0, n, part,
                              parts);
        if (m->cfg.layer_norm) {
            nf_layernorm_grad_params(&m->ln[2 * k + 1], P, b.dv, b.q, b.cv, n, c0, c1);
            nf_layernorm_grad_params(&m->ln[2 * k], P, b.du, b.r, b.cu, n, c0, c1);
        }
    }
    nf_linear_grad_params(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], R.dR0, x, ctx, m->cfg.ctx, n, part,
                          parts);
}
