/* nn/mlp.c - the network every conditioner uses: building it, its workspace, and its passes.
 *
 * Plain:    h_0 = [x | ctx];  a_l = Linear_l(h_l);  z_l = LayerNorm_l(a_l) (optional);
 *           h_{l+1} = act(z_l or a_l) for l < layers;  y = Linear_out(h_layers)   (nn/mlp_plain.c).
 * Residual: see nn/mlp_residual.c.
 * MADE puts masks (nn/made.c) on every linear; layer norm would mix all hidden units of a row and
 * break the autoregressive property, so MADE refuses it.  The context enters the first linear (dense
 * on the context columns) in every variant; residual skips carry it to later blocks.  MADE also feeds
 * it to the output linear, Linear_out([h | ctx]), because the outputs of the first input in the
 * order see no hidden unit and would otherwise ignore the context.  Each masked linear gets a block
 * plan (nn/blocks.c) so its products skip the all-zero blocks of its mask.
 *
 * A pass runs on threads as described in nn_internal.h (nf_nn_threads): slices of the batch's rows,
 * then, in backward, shares of every weight's rows.
 *
 * Workspace: [scratch of each linear (weight norm: effective W and dW; masks: dW of mixed blocks,
 * one per thread)] then the per-batch part of the plain or residual network (see their files).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/threads.h"
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

static void free_blocks(nf_mlp *m)
{
    if (m->blocks)
        for (int l = 0; l < m->nlin; l++) nf_blocks_free(&m->blocks[l]);
    free(m->blocks);
    m->blocks = NULL;
}

/* MADE: the block plan of every masked linear (mode as nf_blocks_plan). */
static int plan_blocks(nf_mlp *m, int mode)
{
    if (!m->blocks) {
        m->blocks = nf_calloc((size_t)m->nlin, sizeof *m->blocks, "network block plans");
        if (!m->blocks) return NF_ENOMEM;
    }
    for (int l = 0; l < m->nlin; l++) {
        const nf_linear *L = &m->lin[l];
        /* context columns: all of the first linear's, and out_ctx of the output linear */
        int nc = l == 0 ? m->cfg.ctx : l == m->nlin - 1 ? m->out_ctx : 0;
        nf_blocks_free(&m->blocks[l]);
        int rc = nf_blocks_plan(&m->blocks[l], L->mask, L->out, L->in, L->in - nc, mode);
        if (rc != NF_OK) { /* no plan at all rather than some: dense products stay correct */
            free_blocks(m);
            return rc;
        }
    }
    return NF_OK;
}

/* Block plans: the order in which the weight-gradient pass hands out its NF_NN_MAX_THREADS shares,
 * the largest computed area (summed over the linears) first, so that the share claimed last is a
 * small one (in the sorted-degree MADE masks the last row blocks are the densest). */
static void order_param_shares(nf_mlp *m)
{
    size_t area[NF_NN_MAX_THREADS];
    for (int p = 0; p < NF_NN_MAX_THREADS; p++) {
        area[p] = 0;
        for (int l = 0; m->blocks && l < m->nlin; l++)
            area[p] += nf_blocks_share_area(&m->blocks[l], p, NF_NN_MAX_THREADS);
        int at = p; /* insertion, stable: equal areas keep their order */
        while (at > 0 && area[m->param_order[at - 1]] < area[p]) {
            m->param_order[at] = m->param_order[at - 1];
            at--;
        }
        m->param_order[at] = p;
    }
}

/* The linears' scratch, the product flops of one row's forward pass, the weight-gradient shares. */
static void set_workspace(nf_mlp *m)
{
    order_param_shares(m);
    m->fixed_ws = 0;
    m->flops_per_row = 0;
    for (int l = 0; l < m->nlin; l++) {
        const nf_blocks *bk = nf_mlp_blocks(m, l);
        m->lin_ws[l] = m->fixed_ws;
        m->fixed_ws += nf_linear_workspace_blocks(&m->lin[l], bk);
        m->flops_per_row += 2.0 * m->lin[l].out * m->lin[l].in * (bk ? bk->kept : 1.0);
    }
}

int nf_mlp_replan(nf_mlp *m, int mode)
{
    if (!m->cfg.made) return NF_OK;
    int rc = NF_OK;
    if (mode == NF_BLOCKS_NONE)
        free_blocks(m);
    else
        rc = plan_blocks(m, mode);
    set_workspace(m);
    return rc;
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
    if (c->made) NF_TRY(plan_blocks(m, NF_BLOCKS_AUTO));
    set_workspace(m);
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
    free_blocks(m);
    free(m);
}

const nf_mlp_config *nf_mlp_get_config(const nf_mlp *m) { return &m->cfg; }

const int *nf_mlp_input_degrees(const nf_mlp *m) { return m->cfg.made ? m->deg : NULL; }

size_t nf_mlp_workspace(const nf_mlp *m, int n)
{
    if (n < 0) n = 0;
    return m->fixed_ws + (m->cfg.residual ? nf_mlp_residual_workspace(m, n) : nf_mlp_plain_workspace(m, n));
}

/* A network pass shared by threads (core/threads.h): the arguments, and which phase a part runs. */
typedef struct pass_job {
    const nf_mlp *m;
    nf_params *P;
    nf_real *ws, *y, *dx, *dctx;
    const nf_real *x, *ctx, *dy;
    int n;
} pass_job;

static void forward_part(void *arg, int part, int nparts)
{
    const pass_job *j = arg;
    const int r0 = (int)((long)j->n * part / nparts), r1 = (int)((long)j->n * (part + 1) / nparts);
    if (j->m->cfg.residual)
        nf_mlp_residual_forward_rows(j->m, j->P, j->ws, j->y, j->x, j->ctx, j->n, r0, r1);
    else
        nf_mlp_plain_forward_rows(j->m, j->P, j->ws, j->y, j->x, j->ctx, j->n, r0, r1);
}

static void backward_rows_part(void *arg, int part, int nparts)
{
    const pass_job *j = arg;
    const int r0 = (int)((long)j->n * part / nparts), r1 = (int)((long)j->n * (part + 1) / nparts);
    if (j->m->cfg.residual)
        nf_mlp_residual_backward_rows(j->m, j->P, j->ws, j->dx, j->dctx, j->dy, j->x, j->ctx, j->n, r0, r1);
    else
        nf_mlp_plain_backward_rows(j->m, j->P, j->ws, j->dx, j->dctx, j->dy, j->x, j->ctx, j->n, r0, r1);
}

static void backward_params_part(void *arg, int part, int nparts)
{
    const pass_job *j = arg;
    if (j->m->blocks && nparts == NF_NN_MAX_THREADS) part = j->m->param_order[part];
    if (j->m->cfg.residual)
        nf_mlp_residual_backward_params(j->m, j->P, j->ws, j->dy, j->x, j->ctx, j->n, part, nparts);
    else
        nf_mlp_plain_backward_params(j->m, j->P, j->ws, j->dy, j->x, j->ctx, j->n, part, nparts);
}

/* Parts of a pass on T threads: one per thread, at least NF_NN_MIN_ROWS rows each.  Each part packs
 * the weights for its rows, so more parts pack more; a worker that is slow to start costs little
 * either way (the caller claims the parts nobody has started).  Two per thread were 3-8% slower
 * for maf and realnvp training at two threads once the weight gradients were balanced (below). */
static int row_parts(int T, int n)
{
    if (T <= 1) return 1;
    int p = T < n / NF_NN_MIN_ROWS ? T : n / NF_NN_MIN_ROWS;
    return p > 1 ? p : 1;
}

typedef struct rows_job {
    nf_rows_fn *fn;
    void *arg;
    int n;
} rows_job;

static void rows_part(void *arg, int part, int nparts)
{
    const rows_job *j = arg;
    j->fn(j->arg, (int)((long)j->n * part / nparts), (int)((long)j->n * (part + 1) / nparts));
}

void nf_mlp_run_rows(const nf_mlp *m, int n, nf_rows_fn *fn, void *arg)
{
    if (n <= 0) return;
    const int T = nf_nn_threads(n, n * m->flops_per_row);
    rows_job j = {fn, arg, n};
    nf_threads_run(T, row_parts(T, n), rows_part, &j);
}

void nf_mlp_forward(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                    const nf_real *ctx, int n)
{
    if (n <= 0) return;
    for (int l = 0; l < m->nlin; l++) nf_linear_prepare(&m->lin[l], P, ws + m->lin_ws[l]);
    const int T = nf_nn_threads(n, n * m->flops_per_row);
    pass_job j = {m, (nf_params *)P, ws, y, NULL, NULL, x, ctx, NULL, n};
    nf_threads_run(T, row_parts(T, n), forward_part, &j);
}

/* Shares of the weight-gradient pass on T threads.  Dense linears: one per thread (each share
 * packs its own copy of the layer's input, so more shares pack more; two a thread were 4-10%
 * slower for realnvp and nsf at two threads).  Block plans (MADE): NF_NN_MAX_THREADS, in the order
 * of m->param_order; there every row block packs its own prefix of the input whatever the shares,
 * so finer shares cost no packing and let the threads even out the masks' unequal row blocks (with
 * two shares a thread, a linear of a few large row blocks left one thread waiting for the other
 * about a fifth of the pass). */
static int param_parts(const nf_mlp *m, int T)
{
    if (T <= 1) return 1;
    if (m->blocks) return NF_NN_MAX_THREADS;
    return T < NF_NN_MAX_THREADS ? T : NF_NN_MAX_THREADS;
}

/* The chain of input gradients on parts of the batch's rows, then the parameter gradients in
 * parts of every weight's rows, each over the whole batch. */
void nf_mlp_backward(const nf_mlp *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                     const nf_real *dy, const nf_real *x, const nf_real *ctx, int n)
{
    if (n <= 0) return;
    const int T = nf_nn_threads(n, 2 * n * m->flops_per_row);
    pass_job j = {m, P, ws, NULL, dx, dctx, x, ctx, dy, n};
    nf_threads_run(T, row_parts(T, n), backward_rows_part, &j);
    nf_threads_run(T, param_parts(m, T), backward_params_part, &j);
}

int nf_nn_threads(int n, double flops)
{
    if (nf_threads_in_parallel() || flops < NF_NN_PAR_FLOPS) return 1;
    int T = nf_blas_get_threads();
    T = T < NF_NN_MAX_THREADS ? T : NF_NN_MAX_THREADS;
    T = T < n / NF_NN_MIN_ROWS ? T : n / NF_NN_MIN_ROWS;
    return T > 1 ? T : 1;
}
