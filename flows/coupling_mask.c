/* flows/coupling_mask.c - the conditioning/transformed split, the conditioner and the output check
 * shared by the coupling bijectors (affine-, additive- and spline-coupling).  See coupling_mask.h. */
#include "flows/coupling_mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/fastmath.h"

/* Mark which columns condition: halves -> the first floor(D/2), alt -> the even indices;
 * flip swaps the roles. */
static int build_split(nf_coupling *c)
{
    c->cond = malloc((size_t)c->D * sizeof(int));
    c->trans = malloc((size_t)c->D * sizeof(int));
    if (!c->cond || !c->trans) {
        free(c->cond);
        free(c->trans);
        c->cond = c->trans = NULL;
        return nf_error(NF_ENOMEM, "out of memory building a coupling mask for D = %d", c->D);
    }
    c->dc = c->dt = 0;
    for (int j = 0; j < c->D; j++) {
        int conditions = c->mask == NF_MASK_HALVES ? j < c->D / 2 : j % 2 == 0;
        if (c->flip) conditions = !conditions;
        if (conditions) c->cond[c->dc++] = j;
        else c->trans[c->dt++] = j;
    }
    return NF_OK;
}

int nf_coupling_create(nf_coupling *c, nf_bijector *b, nf_opts *opts, nf_rng *rng, int per_dim)
{
    memset(c, 0, sizeof *c);
    const char *who = b->type->name;
    if (b->dim < 2)
        return nf_error(NF_EINVAL, "%s (%s): dimension %d: a coupling needs at least 2 dimensions (one to condition on, "
                        "one to transform); use an elementwise or linear bijector for 1-D data", who, b->name, b->dim);
    c->D = b->dim;
    c->C = b->ctx_dim;
    c->per_dim = per_dim;

    nf_mlp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *act = NULL;
    NF_TRY(nf_opts_choice(opts, "mask", NF_MASK_CHOICES, NF_MASK_HALVES, &c->mask));
    NF_TRY(nf_opts_int(opts, "flip", 0, 0, 1, &c->flip));
    NF_TRY(nf_opts_int(opts, "hidden", 64, 1, 1 << 16, &cfg.hidden));
    NF_TRY(nf_opts_int(opts, "layers", 2, 0, 256, &cfg.layers));
    NF_TRY(nf_opts_string(opts, "activation", "relu", &act));
    NF_TRY(nf_opts_int(opts, "residual", 0, 0, 1, &cfg.residual));
    NF_TRY(nf_opts_int(opts, "layer_norm", 0, 0, 1, &cfg.layer_norm));
    NF_TRY(nf_opts_int(opts, "weight_norm", 0, 0, 1, &cfg.weight_norm));
    if (nf_activation_parse(act, &cfg.act) != NF_OK)
        return nf_error(NF_EINVAL, "%s: option activation=%s: expected one of %s", who, act, NF_ACTIVATION_CHOICES);

    NF_TRY(build_split(c));
    cfg.in = c->dc;
    cfg.ctx = c->C;
    cfg.out = c->dt * per_dim;
    cfg.made = 0;
    cfg.out_per_input = 1;
    cfg.order = NF_ORDER_NATURAL;
    cfg.zero_init_output = 1;
    char name[96];
    snprintf(name, sizeof name, "%s.net", b->name);
    int rc = nf_mlp_create(&c->net, &cfg, b->P, name, rng);
    if (rc != NF_OK) {
        nf_coupling_free(c);
        return nf_error_context(rc, "%s (%s): conditioner", who, b->name);
    }
    return NF_OK;
}

void nf_coupling_free(nf_coupling *c)
{
    if (!c) return;
    nf_mlp_free(c->net);
    free(c->cond);
    free(c->trans);
    c->net = NULL;
    c->cond = c->trans = NULL;
}

nf_coupling_ws nf_coupling_ws_layout(const nf_coupling *c, int n)
{
    nf_coupling_ws w;
    size_t nc = (size_t)n * c->dc, nh = (size_t)n * c->dt * c->per_dim;
    w.xc = 0;
    w.h = w.xc + nc;
    w.dh = w.h + nh;
    w.dxc = w.dh + nh;
    w.net = w.dxc + nc;
    w.total = w.net + nf_mlp_workspace(c->net, n);
    return w;
}

void nf_coupling_gather(nf_real *out, const nf_real *x, const int *idx, int k, int D, int n)
{
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D;
        nf_real *oi = out + (size_t)i * k;
        for (int j = 0; j < k; j++) oi[j] = xi[idx[j]];
    }
}

void nf_coupling_scatter_add(nf_real *x, const nf_real *in, const int *idx, int k, int D, int n)
{
    for (int i = 0; i < n; i++) {
        nf_real *xi = x + (size_t)i * D;
        const nf_real *ii = in + (size_t)i * k;
        for (int j = 0; j < k; j++) xi[idx[j]] += ii[j];
    }
}

void nf_coupling_condition(const nf_coupling *c, const nf_params *P, nf_real *ws, const nf_real *src,
                           const nf_real *ctx, int n)
{
    nf_coupling_ws w = nf_coupling_ws_layout(c, n);
    nf_coupling_gather(ws + w.xc, src, c->cond, c->dc, c->D, n);
    nf_mlp_forward(c->net, P, ws + w.net, ws + w.h, ws + w.xc, c->C ? ctx : NULL, n);
}

void nf_coupling_condition_backward(const nf_coupling *c, nf_params *P, nf_real *ws, nf_real *dsrc,
                                    nf_real *dctx, const nf_real *ctx, int n)
{
    nf_coupling_ws w = nf_coupling_ws_layout(c, n);
    nf_real *dxc = dsrc ? ws + w.dxc : NULL;
    if (dxc) memset(dxc, 0, (size_t)n * c->dc * sizeof(nf_real));
    nf_mlp_backward(c->net, P, ws + w.net, dxc, c->C ? dctx : NULL, ws + w.dh, ws + w.xc, c->C ? ctx : NULL, n);
    if (dxc) nf_coupling_scatter_add(dsrc, dxc, c->cond, c->dc, c->D, n);
}

int nf_coupling_check(const nf_bijector *b, const char *dir, const nf_real *out, const nf_real *logdet, int n)
{
    const int D = b->dim;
    if (!nf_any_nonfinite(out, (size_t)n * D) && !(logdet && nf_any_nonfinite(logdet, (size_t)n))) return NF_OK;
    int r = 0;
    while (r < n - 1 && !nf_any_nonfinite(out + (size_t)r * D, (size_t)D) && !(logdet && !isfinite(logdet[r]))) r++;
    return nf_error(NF_ENONFINITE, "%s (%s): %s produced a non-finite output%s in row %d (non-finite input or context, "
                    "or a diverged conditioner)", b->type->name, b->name, dir, logdet ? " or log-determinant" : "", r);
}
