/* flows/flow.h - a flow: a chain of bijectors on a base distribution, built from a text spec.
 *
 * Spec grammar (stored verbatim in model files, so a model is rebuilt exactly):
 *
 *   spec  := chain [ ';' 'base' '=' NAME [ '(' opts ')' ] ]
 *   chain := item { ',' item }
 *   item  := NAME [ '(' opts ')' ]  |  INT '*' '(' chain ')'
 *   opts  := key=value { ',' key=value }
 *
 *   "4*(actnorm, lu, affine-coupling(hidden=64, mask=alt)); base=diag-normal"
 *
 * Presets (realnvp, nice, maf, iaf, nsf-coupling, nsf-ar, glow) expand to specs with
 * nf_preset_expand().  Every random choice in construction (initial weights, random permutations
 * and orders) comes from `seed`, so (spec, dim, ctx_dim, seed) rebuilds the same structure and a
 * saved parameter store then restores the model.
 *
 * Use: nf_flow_log_prob() then nf_flow_backward() for maximum likelihood (gradients accumulate in
 * flow->P->grad); nf_flow_sample() then nf_flow_sample_backward() for reverse KL.  The flow owns
 * one workspace, grown (outside the hot path) when a larger batch arrives.
 */
#ifndef NF_FLOW_H
#define NF_FLOW_H

#include "distributions/dist.h"
#include "flows/bijector.h"

typedef struct nf_flow {
    int dim, ctx_dim;
    uint64_t seed;
    char *spec;            /* canonical spec */
    char prefix[32];       /* name prefix of its slices in the store ("" or "target.") */
    int owns_params;       /* 1: P and S are the flow's own; 0: a model's store, shared */
    int nb;                /* number of bijectors */
    nf_bijector *b;        /* (nb) */
    nf_dist base;
    nf_params *P;          /* trainable */
    nf_params *S;          /* state */
    /* workspace for the last batch (internal) */
    int cap_n, last_n, last_dir;   /* last_dir: 1 log_prob, -1 sample, 2 log_survival */
    nf_real *h;            /* (nb + 1, cap_n, dim) activations between bijectors */
    nf_real *g, *g2;       /* (cap_n, dim) gradient ping-pong */
    nf_real *ld;           /* (cap_n) log-determinant sum */
    nf_real *dld;          /* (cap_n) */
    nf_real *ws;           /* per-bijector workspaces */
    size_t *ws_off;        /* (nb + 1) */
    const nf_real *last_ctx;
    const size_t *last_idx;
    int borrows;           /* 1: a replica (nf_flow_replica): P->value and S->value are another flow's */
    size_t p_first, s_first; /* entries of P and S before the flow's own when it was built */
} nf_flow;

/* A flow with its own parameter store. */
int nf_flow_create(nf_flow **f, const char *spec, int dim, int ctx_dim, uint64_t seed);
/* A flow built into a model's stores P and S (not freed with the flow), its slices named
 * "<prefix>b0.actnorm...", "<prefix>base...".  P = S = NULL gives the flow its own stores. */
int nf_flow_build(nf_flow **f, const char *spec, int dim, int ctx_dim, uint64_t seed, nf_params *P, nf_params *S,
                  const char *prefix);
void nf_flow_free(nf_flow *f);
/* A replica of f for passes that run beside f's own (micro-batches of one training batch on several
 * threads): the same bijectors and base with a workspace of their own, whose stores borrow f's values
 * (trainable and state) and keep gradients of their own, so a replica's nf_flow_backward leaves f's
 * P->grad alone.  f's stores must hold f's slices first, at the same offsets as a flow built alone
 * (a flow's own stores, or a model's that begins with the flow).  nf_flow_replica_sync re-points the
 * borrowed values at f's arrays (call it before each use: adding slices to f's stores may move them);
 * the replica must be freed before f's stores. */
int nf_flow_replica(nf_flow **out, const nf_flow *f);
/* 1 if f can have replicas: it was built into stores that were empty then. */
int nf_flow_replicable(const nf_flow *f);
void nf_flow_replica_sync(nf_flow *r, const nf_flow *f);
/* 1 if each row's log-density depends on that row alone in a training pass now, so a batch may run
 * in micro-batches: no bijector that couples the batch's rows (batchnorm; an ActNorm not yet
 * started) and a base without a batch-level density (the dependent base). */
int nf_flow_rows_independent(const nf_flow *f);
/* Rows of a chunk whose workspace stays within NF_FLOW_CHUNK_BYTES (1 to `most`): how many samples a
 * caller that only needs log-densities or samples should pass at a time, since a flow reserves
 * workspace for the largest batch it is given (an image flow's convolutions keep k^2 x cin values
 * for every pixel of every image: 1,000 images of 32 x 32 took 3.4 GB in one call). */
enum { NF_FLOW_CHUNK_BYTES = 64 << 20 };
int nf_flow_chunk_rows(const nf_flow *f, int most);
/* Call each(arg, at, k) for rows at .. at+k-1 of n, in order, in chunks of nf_flow_chunk_rows(f, n)
 * rows but at least min_rows (a sampler that draws its latents in row order gets the samples of one
 * call).  Afterwards each bijector's last_sweeps is the most of any chunk, so nf_flow_last_sweeps reads
 * as the sequential passes of the slowest chunk.  Stops at the first error. */
int nf_flow_in_chunks(nf_flow *f, int n, int min_rows, int (*each)(void *arg, int at, int k), void *arg);
void nf_flow_set_training(nf_flow *f, int training);
void nf_flow_set_invert(nf_flow *f, nf_invert_method method, double tol, int max_sweeps);
/* Jacobi over blocks of `block` positions, one block after another with the earlier ones cached
 * (tarflow: tokens; 0 turns it off): sweeps of block length instead of sequence length, and a
 * block converges from the previous one's values in few of them (bijector.h, jacobi_block). */
void nf_flow_set_jacobi_block(nf_flow *f, int block);
/* Classifier-free guidance weight w for the sampling direction of the bijectors that support it
 * (tarflow): their conditioner outputs become (1 + w) f(x, ctx) - w f(x, 0).  0 turns it off. */
void nf_flow_set_guidance(nf_flow *f, double w);
/* Sum of last_sweeps over autoregressive bijectors in the last slow-direction call. */
int nf_flow_last_sweeps(const nf_flow *f);

/* logp[i] = log p(x_i | ctx_i).  idx (n, may be NULL) are the rows' indices in their data source,
 * handed to the base for densities that couple data points.  Caches what nf_flow_backward needs
 * (x, ctx and idx must stay valid until then). */
int nf_flow_log_prob(nf_flow *f, nf_real *logp, const nf_real *x, const nf_real *ctx, const size_t *idx, int n);
/* After log_prob: z (n, dim) = the base-space points T(x) of its rows (the latents that
 * nf_flow_sample_latent maps back to x). */
int nf_flow_last_latent(const nf_flow *f, nf_real *z);
/* After log_prob: given dlogp = dL/dlogp (n), accumulate P->grad, and dx, dctx if not NULL. */
int nf_flow_backward(nf_flow *f, const nf_real *dlogp, nf_real *dx, nf_real *dctx);
/* 1-D flows of increasing maps (the spline, affine and standardising layers; not lu or fftconv):
 * out[i] = log P(X > x_i | ctx_i) = the base's log-survival at z_i = f(x_i), and its backward
 * (given dL/dout, accumulate P->grad, dx and dctx when not NULL).  The survival term of a point
 * process's last open interval.  A base without a closed-form survival is an error. */
int nf_flow_log_survival(nf_flow *f, nf_real *out, const nf_real *x, const nf_real *ctx, int n);
int nf_flow_log_survival_backward(nf_flow *f, const nf_real *dout, nf_real *dx, nf_real *dctx);
/* Mean negative log-likelihood of the batch and its gradient (accumulated into P->grad). */
int nf_flow_nll_step(nf_flow *f, const nf_real *x, const nf_real *ctx, const size_t *idx, int n, double *nll);
/* x (n, dim) samples and logp (n) their log-densities (may be NULL); ctx (n, ctx_dim) or NULL. */
int nf_flow_sample(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng);
/* The same from given base draws z (n, dim) instead of the base's sampler (a temperature, a fixed
 * latent); logp needs the base's log-density at z. */
int nf_flow_sample_latent(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *z, const nf_real *ctx, int n);
/* After sample: given dL/dx and dL/dlogp (either may be NULL), accumulate P->grad and dctx. */
int nf_flow_sample_backward(nf_flow *f, const nf_real *dx, const nf_real *dlogp, nf_real *dctx);
/* Give data-dependent bijectors (standardize) a sample of data to set themselves from. */
int nf_flow_init_data(nf_flow *f, const nf_real *x, const nf_real *ctx, int n);

/* Preset knobs; 0 / NULL means the preset's default. */
typedef struct nf_preset_knobs {
    int layers, hidden, blocks, bins;
    double tail;
    const char *activation;
} nf_preset_knobs;
#define NF_PRESET_NAMES "realnvp|nice|maf|iaf|nsf-coupling|nsf-ar|glow"
int nf_preset_expand(const char *name, const nf_preset_knobs *k, char *spec, size_t size);
int nf_preset_is(const char *name);

#endif
