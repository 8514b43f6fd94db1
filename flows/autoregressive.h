/* flows/autoregressive.h - what the MADE-conditioned autoregressive bijectors share (maf, iaf,
 * spline-ar, spline-iaf): the conditioner, the fast and slow directions, and their gradients.
 *
 * An autoregressive map w = F(v) applies an elementwise monotone transform T whose parameters for
 * dimension i come from a MADE on v:
 *
 *   w_i = T(v_i; theta_i(v_<i, ctx)),   log|det dF/dv| = sum_i l_i,   l_i = log T'(v_i; theta_i).
 *
 * The fast direction v -> w is one MADE pass.  The slow direction w -> v solves v = g(v) with
 * g(v)_i = T^-1(w_i; theta_i(v)) by flows/jacobi.c (sequential, Jacobi or auto, as b says) and adds
 * -sum_i l_i at the solution.  maf and spline-ar take v = data (forward fast: density); iaf and
 * spline-iaf take v = latent (inverse fast: sampling), so each type is two of these four calls.
 *
 * Gradients of the slow direction.  With gv = dL/dv and gl = dL/dlogdet, v = F^-1(w) gives
 *   dL/dw = lambda,  J_F^T lambda = gv - gl grad_v(sum l)     (J_F triangular in the MADE order)
 *   dL/dphi = -lambda^T dF/dphi - gl d(sum l)/dphi            (phi: MADE weights, likewise ctx)
 * nf_ar_slow_backward() reruns the MADE at the solution (so its cache matches v), then solves for
 * lambda by the transposed iteration lambda <- (gv' - M^T(lambda s_theta)) / T', feeding the MADE
 * backward only the CHANGE of lambda each pass: the MADE's input gradients then sum to M^T(lambda
 * s_theta) and its weight and context gradients to exactly the second line.  It is exact after at
 * most depth passes (the transposed system is nilpotent like the forward one) and stops earlier when
 * lambda stops changing.
 *
 * The elementwise transform is a small vtable (affine in maf.c, the rational-quadratic spline in
 * spline_ar.c) on the array layout of flows/rqspline.h: n rows of d elements, element (r, e) at
 * [r * stride + e], parameters at theta[(r * stride + e) * P]; ld (n, may be NULL) gets the added
 * row sums of the map's log-determinant, lde (may be NULL) each element's forward log T'.
 */
#ifndef NF_AUTOREGRESSIVE_H
#define NF_AUTOREGRESSIVE_H

#include "flows/bijector.h"
#include "nn/nn.h"

typedef struct nf_ar_elem {
    /* w = T(v); ld[r] += sum l */
    void (*forward)(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v, const nf_real *theta,
                    int n, int d, int stride);
    /* v = T^-1(w); ld[r] -= sum l (at v) */
    void (*inverse)(const void *cfg, nf_real *v, nf_real *ld, nf_real *lde, const nf_real *w, const nf_real *theta,
                    int n, int d, int stride);
    /* after forward at v: dv += gw T' + gl dl/dv (dv may be NULL), dtheta += gw dT/dtheta + gl dl/dtheta
     * (accumulate = 0: dtheta = ..., every parameter of the n x d elements written, so the caller
     * need not zero it); gw (n x d) and gl (n) may be NULL (zero) */
    void (*backward)(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                     const nf_real *v, const nf_real *theta, int n, int d, int stride, int accumulate);
    /* Optional (all NULL when the transform is cheap to recompute): a forward that keeps in cache
     * (cache_size(cfg, n, d) nf_reals) what backward would recompute, and the backward reading it
     * (then without v and theta), for the same n, d and stride. */
    size_t (*cache_size)(const void *cfg, int n, int d);
    void (*forward_cached)(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v,
                           const nf_real *theta, int n, int d, int stride, nf_real *cache);
    void (*backward_cached)(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                            const nf_real *cache, int n, int d, int stride, int accumulate);
} nf_ar_elem;

typedef struct nf_ar {
    nf_mlp *made;            /* v (n, D) [+ ctx] -> theta (n, D * P) */
    const nf_ar_elem *elem;
    const void *cfg;         /* the transform's configuration (lives in the owner's state) */
    int D, C, P;             /* dimensions, context width, parameters per dimension */
    int depth;               /* largest MADE input degree: passes of an exact sequential solve */
    int *level_start;        /* (depth + 1): dims of degree k are level_dims[level_start[k-1] .. level_start[k]) */
    int *level_dims;         /* (D) */
    int levels;              /* the MADE computes level by level (nf_mlp_forward_level): a sequential
                                solve costs one network pass, so auto inversion takes it */
} nf_ar;

/* Options every autoregressive type reads, for the types' options_help lines. */
#define NF_AR_OPTIONS_HELP \
    "hidden=64 layers=2 residual=0|1 order=natural|reversed|random activation=relu weight_norm=0|1 zero_init=1|0"

/* Read the shared options, build the MADE "<b->name>.made" with per_dim outputs per dimension.
 * zero_init=1 (default) zero-initialises its output layer: theta = 0 at the start, which both
 * transforms map to the identity; zero_init=0 keeps the random (torch.nn.Linear) initialisation, an
 * untrained MADE (the MADE's masked weights stay zero either way).  On failure nothing is left
 * allocated. */
int nf_ar_create(nf_ar *ar, nf_bijector *b, nf_opts *opts, nf_rng *rng, const nf_ar_elem *elem, const void *cfg,
                 int per_dim);
void nf_ar_free(nf_ar *ar);
size_t nf_ar_workspace(const nf_ar *ar, int n);

/* w = F(v), logdet += sum l.  One MADE pass (b->last_sweeps = 1); caches it in ws for nf_ar_fast_backward. */
int nf_ar_fast(nf_bijector *b, const nf_ar *ar, nf_real *w, nf_real *logdet, const nf_real *v, const nf_real *ctx,
               int n, nf_real *ws);
/* v = F^-1(w), logdet -= sum l at v; records b->last_sweeps. */
int nf_ar_slow(nf_bijector *b, const nf_ar *ar, nf_real *v, nf_real *logdet, const nf_real *w, const nf_real *ctx,
               int n, nf_real *ws);
/* After nf_ar_fast: dv += dL/dv, dctx += dL/dctx, P->grad += dL/dphi. */
int nf_ar_fast_backward(nf_bijector *b, const nf_ar *ar, nf_real *dv, nf_real *dctx, const nf_real *dw,
                        const nf_real *dlogdet, const nf_real *v, const nf_real *ctx, int n, nf_real *ws);
/* After nf_ar_slow (v its solution): dw += dL/dw, dctx += dL/dctx, P->grad += dL/dphi. */
int nf_ar_slow_backward(nf_bijector *b, const nf_ar *ar, nf_real *dw, nf_real *dctx, const nf_real *dv,
                        const nf_real *dlogdet, const nf_real *v, const nf_real *ctx, int n, nf_real *ws);

/* The bijector-type entries of the four types, whose states begin with their nf_ar (so b->state is
 * read as one) and hold nothing else to free: destroy, workspace, and the directions by what they
 * run.  maf and spline-ar take v = data: forward = fast, inverse = slow, backward = fast_backward,
 * inverse_backward = slow_backward; iaf and spline-iaf take v = latent, the other way round.
 * forward/inverse arguments (out, logdet, in), backward/inverse_backward (d_in, dctx, d_out,
 * dlogdet, in, out), as the bijector table has them (flows/bijector.h). */
void nf_ar_type_destroy(nf_bijector *b);
size_t nf_ar_type_workspace(const nf_bijector *b, int n);
int nf_ar_type_fast(nf_bijector *b, nf_real *out, nf_real *logdet, const nf_real *in, const nf_real *ctx, int n,
                    nf_real *ws);
int nf_ar_type_slow(nf_bijector *b, nf_real *out, nf_real *logdet, const nf_real *in, const nf_real *ctx, int n,
                    nf_real *ws);
int nf_ar_type_fast_backward(nf_bijector *b, nf_real *d_in, nf_real *dctx, const nf_real *d_out,
                             const nf_real *dlogdet, const nf_real *in, const nf_real *out, const nf_real *ctx, int n,
                             nf_real *ws);
int nf_ar_type_slow_backward(nf_bijector *b, nf_real *d_in, nf_real *dctx, const nf_real *d_out,
                             const nf_real *dlogdet, const nf_real *in, const nf_real *out, const nf_real *ctx, int n,
                             nf_real *ws);

#endif
