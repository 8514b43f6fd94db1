/* distributions/dist.h - base and output distributions: log-density, tails, sampling and gradients,
 * optionally conditioned on a per-sample context.
 *
 * Same shape as bijectors: a const type object and an instance with its dimension and slices in the
 * model's parameter store.  All calls work on a batch of n rows: z (n, dim) and, for a conditional
 * instance (d->ctx_dim > 0), ctx (n, ctx_dim), the context of each row; an unconditional instance
 * (ctx_dim 0) ignores ctx, which may then be NULL.
 *
 * log_prob WRITES logp[i] = log p(z_i | ctx_i); idx (may be NULL) gives each row's index in the data
 * set, for bases that couple the latents of different points.  backward ACCUMULATES dz += dL/dz,
 * dctx += dL/dctx (dz, dctx may be NULL) and P->grad += dL/dtheta given dlogp = dL/dlogp_i.
 * sample WRITES z_i ~ p(. | ctx_i) (and logp if not NULL); sample_backward (optional, for reverse-KL
 * training) accumulates the parameter and context gradients of a reparameterised draw given dL/dz and
 * dL/dlogp (either may be NULL), holding the draw's noise fixed; a flow calls backward for the
 * density's own dependence on z and theta, then sample_backward with dlogp NULL for the path z(theta).
 * log_cdf / log_survival (NULL where not closed-form) WRITE log P(Z <= z_i | ctx_i) and
 * log P(Z > z_i | ctx_i), componentwise over dimensions: P(Z_1 <= z_1, ..., Z_D <= z_D) (resp. >),
 * finite far into the tails; their _backward accumulate dz, dctx and P->grad like backward.
 * Sums over dimensions accumulate in double.  An instance keeps per-call tables in its state, so one
 * instance must not be used from two threads at once.
 *
 * Conditional types (option context=linear of diag-normal and gmm) make their parameters theta an
 * affine function of the context, theta_i = b + W ctx_i: b are the unconditional slices (same names,
 * same initial values) and W, "<name>.context.W" (rows: the entries of theta, columns: the context),
 * starts at zero, so an untrained conditional base equals the unconditional one.
 */
#ifndef NF_DIST_H
#define NF_DIST_H

#include "core/opts.h"
#include "core/params.h"
#include "core/rng.h"

typedef struct nf_dist nf_dist;
typedef struct nf_dist_type nf_dist_type;

struct nf_dist {
    const nf_dist_type *type;
    int dim;
    int ctx_dim;        /* width of the context the instance reads; 0 = unconditional */
    char name[64];
    nf_params *P, *S;
    void *state;
};

struct nf_dist_type {
    const char *name;          /* "normal", "diag-normal", "gmm" */
    const char *options_help;
    /* d->type, dim, ctx_dim (the width the caller can supply), name, P, S are set; read options, build
     * state, add params.  A type that does not read the context sets d->ctx_dim = 0. */
    int (*create)(nf_dist *d, nf_opts *opts, nf_rng *rng);
    void (*destroy)(nf_dist *d);
    int (*log_prob)(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx, int n);
    int (*backward)(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                    const nf_real *ctx, const size_t *idx, int n);
    int (*sample)(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng);
    int (*sample_backward)(nf_dist *d, nf_real *dctx, const nf_real *dz, const nf_real *dlogp, const nf_real *z,
                           const nf_real *ctx, int n);
    int (*log_cdf)(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n);
    int (*log_survival)(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n);
    int (*log_cdf_backward)(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                            const nf_real *ctx, int n);
    int (*log_survival_backward)(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                 const nf_real *ctx, int n);
    /* Optional: the rows idx[0..n) will be scored (log_prob) once the flow's forward pass has made
     * their latents; work that needs only the rows can start now, beside that pass.  NULL: none. */
    int (*prepare)(nf_dist *d, const size_t *idx, int n);
};

/* Build an instance for dimension dim from "k=v,..." options (unknown options are refused).  ctx_dim
 * is the context width the caller can supply (0: none); only a conditional type reads it (the others
 * set d->ctx_dim to 0), and context=linear with ctx_dim 0 is an error.  name must be unique in P. */
int nf_dist_create(nf_dist *d, const nf_dist_type *type, int dim, int ctx_dim, const char *name,
                   const char *options, nf_params *P, nf_params *S, nf_rng *rng);
void nf_dist_destroy(nf_dist *d);

extern const nf_dist_type nf_dist_normal;       /* standard normal, no parameters, ignores the context */
extern const nf_dist_type nf_dist_diag_normal;  /* learnable mean and log-scale (context=none|linear) */
extern const nf_dist_type nf_dist_gmm;          /* mixture: weights, means, diagonal log-scales */
extern const nf_dist_type *const nf_dist_types[];
const nf_dist_type *nf_dist_type_find(const char *name);

/* ---- for the implementations of types ---- */

/* Reads option context=none|linear: 1 for linear (then d->ctx_dim must be > 0), 0 for none (then
 * d->ctx_dim is set to 0). */
int nf_dist_opt_context(nf_dist *d, nf_opts *opts, int *linear);
/* NF_EINVAL naming d when a conditional instance is called without a context. */
int nf_dist_check_ctx(const nf_dist *d, const nf_real *ctx);
/* log Phi(x), the standard normal log-CDF: erfc-based, and an asymptotic series below x = -30, so it
 * is finite and accurate for any finite x. */
double nf_log_ndtr(double x);
/* d/dx log Phi(x) = phi(x) / Phi(x), accurate for any finite x (about -x far in the left tail). */
double nf_ndtr_ratio(double x);

#endif
