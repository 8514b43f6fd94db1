/* flows/coupling_mask.h - what coupling bijectors share: the split of the D dimensions into a
 * conditioning part and a transformed part, and the conditioner network that reads the first.
 *
 * A coupling layer leaves the conditioning dimensions x_c unchanged and transforms the others x_t
 * elementwise with parameters computed from [x_c | ctx].  Which dimensions condition:
 *
 *   mask=halves   the first floor(D/2) dimensions condition, the rest are transformed;
 *   mask=alt      the even indices (0, 2, 4, ...) condition, the odd ones are transformed;
 *   flip=1        swaps the two roles (so stacking flip=0 and flip=1 touches every dimension).
 *
 * nf_coupling_create() reads the options every coupling type shares (mask, flip, hidden, layers,
 * activation, residual, layer_norm, weight_norm), builds the split and the conditioner nf_mlp
 * "<b->name>.net" mapping [x_c (dc) | ctx (C)] to dt * per_dim outputs (column k * per_dim + j is
 * parameter j of the k-th transformed dimension), with its output layer zero-initialised so the
 * coupling starts as the identity.  The batch-sized buffers (x_c gathered, the conditioner's
 * output and its gradient) live in the caller's workspace, laid out by nf_coupling_ws_layout().
 */
#ifndef NF_COUPLING_MASK_H
#define NF_COUPLING_MASK_H

#include "core/opts.h"
#include "flows/bijector.h"
#include "nn/nn.h"

enum { NF_MASK_HALVES = 0, NF_MASK_ALT = 1 };
#define NF_MASK_CHOICES "halves|alt"

/* Options every coupling reads, for the types' options_help lines. */
#define NF_COUPLING_OPTIONS_HELP \
    "mask=halves|alt flip=0|1 hidden=64 layers=2 activation=relu residual=0|1 layer_norm=0|1 weight_norm=0|1"

typedef struct nf_coupling {
    int D, C;
    int dc, dt;       /* conditioning and transformed counts, dc + dt = D, both >= 1 */
    int *cond;        /* (dc) column indices of x_c, ascending */
    int *trans;       /* (dt) column indices of x_t, ascending */
    int per_dim;      /* conditioner outputs per transformed dimension */
    nf_mlp *net;      /* [x_c | ctx] -> (n, dt * per_dim) */
    int mask, flip;
} nf_coupling;

/* Workspace regions for a batch of n, as offsets in nf_reals from the start of ws. */
typedef struct nf_coupling_ws {
    size_t xc;        /* (n, dc)          x_c gathered: the conditioner's input */
    size_t h;         /* (n, dt*per_dim)  conditioner output (types may rewrite it for backward) */
    size_t dh;        /* (n, dt*per_dim)  gradient of the conditioner output */
    size_t dxc;       /* (n, dc)          gradient of x_c from the conditioner */
    size_t net;       /* the nf_mlp's own workspace */
    size_t total;
} nf_coupling_ws;

/* Read the shared options from opts, build the split (D >= 2 required) and the conditioner.
 * On failure nothing is left allocated (parameters already registered stay in b->P). */
int nf_coupling_create(nf_coupling *c, nf_bijector *b, nf_opts *opts, nf_rng *rng, int per_dim);
void nf_coupling_free(nf_coupling *c);
nf_coupling_ws nf_coupling_ws_layout(const nf_coupling *c, int n);

/* out (n, k) = x[:, idx] for x (n, D). */
void nf_coupling_gather(nf_real *out, const nf_real *x, const int *idx, int k, int D, int n);
/* x[:, idx] += in (n, k) for x (n, D). */
void nf_coupling_scatter_add(nf_real *x, const nf_real *in, const int *idx, int k, int D, int n);

/* NF_OK if out (n, D) and logdet (n; NULL to skip) are all finite, else NF_ENONFINITE naming the
 * bijector, the direction and the first bad row: the check that ends every coupling's forward and
 * inverse (one vectorised pass when all is well). */
int nf_coupling_check(const nf_bijector *b, const char *dir, const nf_real *out, const nf_real *logdet, int n);

/* Run the conditioner: gather x_c from src (n, D) into ws and write its output into ws + h. */
void nf_coupling_condition(const nf_coupling *c, const nf_params *P, nf_real *ws, const nf_real *src,
                           const nf_real *ctx, int n);
/* Backpropagate dh (already in ws + dh) through the conditioner: P->grad +=, dctx += (if not
 * NULL) and dsrc[:, cond] += (if not NULL). */
void nf_coupling_condition_backward(const nf_coupling *c, nf_params *P, nf_real *ws, nf_real *dsrc,
                                    nf_real *dctx, const nf_real *ctx, int n);

#endif
