/* nn/mlp_plain.c - the plain MLP's passes (MADE included), on a thread's rows of the batch.
 *
 *   h_0 = [x | ctx];  a_l = Linear_l(h_l);  z_l = LayerNorm_l(a_l) (optional);
 *   h_{l+1} = act(z_l or a_l) for l < L;  y = Linear_out([h_L | ctx] or h_L)   (MADE: with ctx)
 * Backward, on rows:  dh_L = dy W_out;  for l = L-1..0:  dz_l = act'(.) dh;  da_l = LN'(dz_l) or dz_l;
 *   dh = da_l W_l (or dx, dctx += da_0 W_0).  The da_l (and dz_l) stay in the workspace, so the
 *   parameter gradients dW_l += da_l^T h_l, db_l += sum da_l (and LN's) come afterwards, each
 *   thread taking a share of the rows of every W over the whole batch.
 *
 * Workspace (after the linears' scratch): per hidden layer [a | h | z | cache (n,2)], z and cache
 * only with layer norm; per hidden layer [da | dz], dz only with layer norm; then dh (n, H).
 * All (n, H) but cache; a thread's rows r0..r1 of each are a contiguous slice.
 */
#include <string.h>

#include "core/blas.h"
#include "nn/nn_internal.h"

typedef struct plain_ws {
    nf_real *a, *h, *z, *cache, *da, *dz;
} plain_ws;

static size_t layer_size(const nf_mlp *m, int n)
{
    const size_t nH = (size_t)n * m->cfg.hidden;
    return 2 * nH + (m->cfg.layer_norm ? nH + 2 * (size_t)n : 0);
}

static size_t grad_size(const nf_mlp *m, int n)
{
    return (size_t)n * m->cfg.hidden * (m->cfg.layer_norm ? 2 : 1);
}

size_t nf_mlp_plain_workspace(const nf_mlp *m, int n)
{
    const size_t L = (size_t)m->cfg.layers;
    return L * (layer_size(m, n) + grad_size(m, n)) + (L > 0 ? (size_t)n * m->cfg.hidden : 0);
}

/* Layer l's arrays, advanced to row r0. */
static plain_ws layer_at(const nf_mlp *m, nf_real *ws, int n, int l, int r0)
{
    const int H = m->cfg.hidden, L = m->cfg.layers;
    const size_t nH = (size_t)n * H, o = (size_t)r0 * H;
    nf_real *base = ws + m->fixed_ws + (size_t)l * layer_size(m, n);
    nf_real *g = ws + m->fixed_ws + (size_t)L * layer_size(m, n) + (size_t)l * grad_size(m, n);
    plain_ws w = {base + o, base + nH + o, NULL, NULL, g + o, NULL};
    if (m->cfg.layer_norm) {
        w.z = base + 2 * nH + o;
        w.cache = base + 3 * nH + 2 * (size_t)r0;
        w.dz = g + nH + o;
    }
    return w;
}

static nf_real *dh_at(const nf_mlp *m, nf_real *ws, int n, int r0)
{
    return ws + m->fixed_ws + (size_t)m->cfg.layers * (layer_size(m, n) + grad_size(m, n)) + (size_t)r0 * m->cfg.hidden;
}

void nf_mlp_plain_forward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                               const nf_real *ctx, int n, int r0, int r1)
{
    const int L = m->cfg.layers, H = m->cfg.hidden, nc = m->cfg.ctx, rows = r1 - r0;
    if (rows <= 0) return;
    const nf_real *xr = x + (size_t)r0 * m->cfg.in, *cr = nc ? ctx + (size_t)r0 * nc : NULL;
    nf_real *yr = y + (size_t)r0 * m->cfg.out;
    const nf_real *h = xr; /* input of the current linear */
    for (int l = 0; l < L; l++) {
        plain_ws w = layer_at(m, ws, n, l, r0);
        if (l == 0)
            nf_linear_apply(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], w.a, xr, cr, nc, 0, rows);
        else
            nf_linear_apply(&m->lin[l], nf_mlp_blocks(m, l), P, ws + m->lin_ws[l], w.a, h, NULL, 0, 0, rows);
        const nf_real *pre = w.a;
        if (m->cfg.layer_norm) {
            nf_layernorm_forward(&m->ln[l], P, w.z, w.cache, w.a, rows);
            pre = w.z;
        }
        nf_act_forward_ex(m->cfg.act, m->slope, w.h, pre, (size_t)rows * H);
        h = w.h;
    }
    if (L == 0)
        nf_linear_apply(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], yr, xr, cr, nc, 0, rows);
    else
        nf_linear_apply(&m->lin[L], nf_mlp_blocks(m, L), P, ws + m->lin_ws[L], yr, h, m->out_ctx ? cr : NULL,
                        m->out_ctx, 0, rows);
}

void nf_mlp_plain_backward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int r0, int r1)
{
    (void)x, (void)ctx;
    const int L = m->cfg.layers, H = m->cfg.hidden, nc = m->cfg.ctx, rows = r1 - r0;
    if (rows <= 0) return;
    const size_t rH = (size_t)rows * H;
    const nf_real *dyr = dy + (size_t)r0 * m->cfg.out;
    nf_real *dxr = dx ? dx + (size_t)r0 * m->cfg.in : NULL, *dcr = dctx && nc ? dctx + (size_t)r0 * nc : NULL;
    if (L == 0) {
        nf_linear_grad_input(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], dxr, dcr, dyr, nc, 1, rows);
        return;
    }
    nf_real *dh = dh_at(m, ws, n, r0);
    nf_linear_grad_input(&m->lin[L], nf_mlp_blocks(m, L), P, ws + m->lin_ws[L], dh, m->out_ctx ? dcr : NULL, dyr,
                         m->out_ctx, 0, rows);
    for (int l = L - 1; l >= 0; l--) {
        plain_ws w = layer_at(m, ws, n, l, r0);
        if (m->cfg.layer_norm) {
            nf_act_backward_ex(m->cfg.act, m->slope, w.dz, dh, w.z, w.h, rH, 0);
            memset(w.da, 0, rH * sizeof *w.da);
            nf_layernorm_grad_input(&m->ln[l], P, w.da, w.dz, w.a, w.cache, rows);
        } else {
            nf_act_backward_ex(m->cfg.act, m->slope, w.da, dh, w.a, w.h, rH, 0);
        }
        if (l == 0)
            nf_linear_grad_input(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], dxr, dcr, w.da, nc, 1, rows);
        else
            nf_linear_grad_input(&m->lin[l], nf_mlp_blocks(m, l), P, ws + m->lin_ws[l], dh, NULL, w.da, 0, 0, rows);
    }
}

void nf_mlp_plain_backward_params(const nf_mlp *m, nf_params *P, nf_real *ws, const nf_real *dy, const nf_real *x,
                                  const nf_real *ctx, int n, int part, int parts)
{
    const int L = m->cfg.layers, H = m->cfg.hidden, nc = m->cfg.ctx;
    if (L == 0) {
        nf_linear_grad_params(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], dy, x, ctx, nc, n, part, parts);
        return;
    }
    const plain_ws last = layer_at(m, ws, n, L - 1, 0);
    nf_linear_grad_params(&m->lin[L], nf_mlp_blocks(m, L), P, ws + m->lin_ws[L], dy, last.h, ctx, m->out_ctx, n,
                          part, parts);
    for (int l = 0; l < L; l++) {
        plain_ws w = layer_at(m, ws, n, l, 0);
        if (l == 0)
            nf_linear_grad_params(&m->lin[0], nf_mlp_blocks(m, 0), P, ws + m->lin_ws[0], w.da, x, ctx, nc, n, part,
                                  parts);
        else
            nf_linear_grad_params(&m->lin[l], nf_mlp_blocks(m, l), P, ws + m->lin_ws[l], w.da,
                                  layer_at(m, ws, n, l - 1, 0).h, NULL, 0, n, part, parts);
        if (m->cfg.layer_norm)
            nf_layernorm_grad_params(&m->ln[l], P, w.dz, w.a, w.cache, n, (int)((long)H * part / parts),
                                     (int)((long)H * (part + 1) / parts));
    }
}

/* Incremental MADE pass (nf_mlp_forward_level).  Hidden degrees are sorted ascending, so the units of
 * degree k - 1 are the columns u0..u1 of every hidden layer, and units of degree <= k - 1 the prefix
 * 0..u1.  A unit of degree k - 1 sees the inputs of degree <= k - 1 and the units of degree <= k - 1
 * below it; an output of an input of degree k sees the units of degree <= k - 1.  So level k:
 *   a_0[:, u0:u1] = b_0[u0:u1] + [x | ctx] W_0[u0:u1, :]^T          (masked columns are zero)
 *   a_l[:, u0:u1] = b_l[u0:u1] + h_{l-1}[:, :u1] W_l[u0:u1, :u1]^T,   h_l = act(a_l)
 *   y[:, rows of degree k] = b + h_L[:, :u1] W_out[rows, :u1]^T (+ ctx W_out[rows, H:]^T)
 * and over levels 1..D every hidden unit is computed exactly once: a whole sequential inversion
 * costs one network pass instead of D. */
int nf_mlp_has_levels(const nf_mlp *m)
{
    return m->cfg.made && !m->cfg.residual && !m->cfg.layer_norm && !m->cfg.weight_norm && m->cfg.layers >= 1;
}

/* y[:, o0:o1] = b[o0:o1] + h[:, :k] W[o0:o1, :k]^T (+ c W[o0:o1, in-nc:]^T): rows o0..o1 of a linear
 * layer on the first k columns of its input (row stride ldh) and its nc context columns. */
static void linear_part(const nf_linear *L, const nf_params *P, nf_real *y, int ldy, const nf_real *h, int ldh,
                        int k, const nf_real *c, int nc, int o0, int o1, int n)
{
    const int rows = o1 - o0;
    if (rows <= 0) return;
    const nf_real *W = P->value + L->w + (size_t)o0 * L->in, *b = P->value + L->b + o0;
    /* the bias enters with the first product (nf_gemm_bias), or alone when nothing reaches these rows */
    if (k > 0) nf_gemm_bias(0, 1, n, rows, k, h, ldh, W, L->in, b, y + o0, ldy);
    else if (nc > 0) nf_gemm_bias(0, 1, n, rows, nc, c, nc, W + (L->in - nc), L->in, b, y + o0, ldy);
    else
        for (int r = 0; r < n; r++) memcpy(y + (size_t)r * ldy + o0, b, (size_t)rows * sizeof *y);
    if (k > 0 && nc > 0) nf_gemm(0, 1, n, rows, nc, 1, c, nc, W + (L->in - nc), L->in, 1, y + o0, ldy);
}

void nf_mlp_forward_level_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                               const nf_real *ctx, int n, int r0, int r1, int k)
{
    const int L = m->cfg.layers, H = m->cfg.hidden, D = m->cfg.in, nc = m->cfg.ctx, opi = m->cfg.out_per_input;
    const int rows = r1 - r0;
    if (rows <= 0) return;
    int u0 = 0, u1 = 0;
    while (u0 < H && m->hdeg[u0] < k - 1) u0++;
    u1 = u0;
    while (u1 < H && m->hdeg[u1] <= k - 1) u1++;
    x += (size_t)r0 * D;
    y += (size_t)r0 * m->cfg.out;
    if (ctx) ctx += (size_t)r0 * nc;
    const nf_real *h = NULL;
    for (int l = 0; l < L; l++) {
        plain_ws w = layer_at(m, ws, n, l, r0);
        if (l == 0) linear_part(&m->lin[0], P, w.a, H, x, D, D, ctx, nc, u0, u1, rows);
        else linear_part(&m->lin[l], P, w.a, H, h, H, u1, NULL, 0, u0, u1, rows);
        if (u0 == 0 && u1 == H) /* every unit: one contiguous pass */
            nf_act_forward_ex(m->cfg.act, m->slope, w.h, w.a, (size_t)rows * H);
        else if (u1 > u0)
            for (int r = 0; r < rows; r++)
                nf_act_forward_ex(m->cfg.act, m->slope, w.h + (size_t)r * H + u0, w.a + (size_t)r * H + u0,
                                  (size_t)(u1 - u0));
        h = w.h;
    }
    for (int i = 0; i < D; i++)
        if (m->deg[i] == k)
            linear_part(&m->lin[L], P, y, m->cfg.out, h, H, u1, m->out_ctx ? ctx : NULL, m->out_ctx ? nc : 0,
                        i * opi, (i + 1) * opi, rows);
}

void nf_mlp_forward_level(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                          const nf_real *ctx, int n, int k)
{
    nf_mlp_forward_level_rows(m, P, ws, y, x, ctx, n, 0, n, k);
}
