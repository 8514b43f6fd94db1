/* flows/bijector.h - the bijector interface: one invertible map of R^D, optionally conditioned.
 *
 * A bijector type is a const struct of function pointers, like GSL's gsl_rng_type; an instance
 * (nf_bijector) holds its dimension, context width, the shared parameter stores and a type-specific
 * state.  Directions are explicit:
 *
 *   forward  y = f(x; ctx)       data -> latent (the density direction)
 *   inverse  x = f^-1(y; ctx)    latent -> data (the sampling direction)
 *
 * and each ADDS the per-sample log|det J| of the map it applies into logdet[0..n-1] (so a chain
 * sums without temporaries; inverse adds -log|det df/dx| at the x it returns).
 *
 * Gradients.  After forward(x -> y) with workspace ws, backward() receives dy = dL/dy (n, D) and
 * dlogdet = dL/dlogdet_i (n) and ACCUMULATES dx += dL/dx, dctx += dL/dctx (either may be NULL) and
 * P->grad += dL/dtheta.  After inverse(y -> x) with workspace ws, inverse_backward() does the same
 * for the sampling direction (dx given, dy accumulated): it is what reverse-KL training needs, and a
 * type may leave it NULL if it does not support it.  x, y and ctx are passed back to the backward
 * calls, so a type caches in ws only what it cannot recompute cheaply.  Inputs and outputs never alias.
 *
 * Workspace.  workspace(b, n) is the number of nf_reals a call with a batch of n needs; the flow
 * hands each bijector its own region that lives from forward to backward.  Nothing allocates during
 * forward, inverse or backward.
 *
 * Autoregressive types know their fast direction; the slow one runs sequentially (D passes, exact)
 * or by Jacobi sweeps (all dimensions from the previous estimate until the largest change is below
 * jacobi_tol or jacobi_max_sweeps is reached), as b->invert_method says; they record the passes
 * they used in b->last_sweeps (b->last_fell_back: the Jacobi sweeps were not enough).  AUTO means
 * Jacobi, falling back to sequential if it has not converged within the sweep cap; except where the conditioner computes level by level (a plain
 * MADE, nf_mlp_forward_level), where the exact sequential solve costs one network pass in all,
 * less than any Jacobi solve, and AUTO takes it.
 *
 * Adding a bijector: write flows/<name>.c defining `const nf_bijector_type nf_bijector_<name>`,
 * reading its options in create() with nf_opts_* (unknown options are refused by the caller),
 * registering parameters with nf_params_add under b->name, and add it to flows/registry.c:
 * tests/check_registry.c then runs the shared checks (tests/testutil.c) on every registered type with
 * default options (a type needing other options or inputs gets a row with the reason in its `notes`),
 * and the type-specific tests and option variants go in its family's suite, tests/check_bij_coupling.c,
 * check_bij_autoregressive.c, check_bij_linear.c or check_bij_elementwise.c.  See docs/ARCHITECTURE.md.
 */
#ifndef NF_BIJECTOR_H
#define NF_BIJECTOR_H

#include "core/opts.h"
#include "core/params.h"
#include "core/rng.h"

typedef enum nf_invert_method { NF_INVERT_AUTO = 0, NF_INVERT_SEQUENTIAL = 1, NF_INVERT_JACOBI = 2 } nf_invert_method;

typedef struct nf_bijector nf_bijector;
typedef struct nf_bijector_type nf_bijector_type;

struct nf_bijector {
    const nf_bijector_type *type;
    int dim;                 /* D */
    int ctx_dim;             /* C, 0 if unconditional */
    char name[64];           /* unique prefix of its parameter slices, e.g. "b3.affine-coupling" */
    nf_params *P;            /* trainable parameters (shared by the whole model) */
    nf_params *S;            /* non-trainable state saved with the model (running stats, flags) */
    int training;            /* 1: batch statistics / data-dependent init allowed */
    nf_invert_method invert_method;
    double jacobi_tol;       /* default 1e-9 (double) / 1e-5 (float) of max |change| */
    int jacobi_max_sweeps;   /* default D + 1 */
    int jacobi_block;        /* > 0: Jacobi over blocks of this many positions in turn, earlier blocks
                                cached (types that support it: tarflow); 0: all positions at once */
    int last_sweeps;         /* passes the last slow-direction call used */
    int last_fell_back;      /* 1: that call's Jacobi sweeps did not converge and it finished sequentially */
    double guidance;         /* classifier-free guidance w of conditional sampling (types that support
                                it: tarflow), 0 off: parameters (1 + w) f(ctx) - w f(empty context) */
    void *state;             /* type-specific */
};

struct nf_bijector_type {
    const char *name;          /* as written in specs, e.g. "affine-coupling" */
    const char *options_help;  /* one line: "hidden=128 layers=2 mask=halves|alt flip=0|1 ..." */
    /* b->type, dim, ctx_dim, name, P, S and defaults are set; read options, build state, add params. */
    int (*create)(nf_bijector *b, nf_opts *opts, nf_rng *rng);
    void (*destroy)(nf_bijector *b);
    size_t (*workspace)(const nf_bijector *b, int n);
    int (*forward)(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                   nf_real *ws);
    int (*inverse)(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                   nf_real *ws);
    int (*backward)(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                    const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws);
    int (*inverse_backward)(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                            const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                            int n, nf_real *ws);
    /* Optional: set data-dependent state from a sample of its inputs (standardize); NULL if none. */
    int (*init_data)(nf_bijector *b, const nf_real *x, int n);
    /* Optional: 1 while its next training forward pass couples the rows of the batch (batch
     * statistics; ActNorm's start from the first batch still to come), so the batch may not be split
     * (nf_flow_rows_independent); NULL: never. */
    int (*batch_coupled)(const nf_bijector *b);
};

/* Build an instance of `type` for dimension dim and context width ctx_dim from "k=v,..." options.
 * Refuses unknown options.  name must be unique within P. */
int nf_bijector_create(nf_bijector *b, const nf_bijector_type *type, int dim, int ctx_dim, const char *name,
                       const char *options, nf_params *P, nf_params *S, nf_rng *rng);
void nf_bijector_destroy(nf_bijector *b);
/* NF_ENONFINITE naming the bijector, the direction ("forward"/"inverse") and the first bad row if
 * an output or a log-determinant is NaN or infinite; every forward/inverse ends with this check. */
int nf_bijector_check_output(const nf_bijector *b, const nf_real *out, const nf_real *logdet, int n, const char *dir);

/* The registry of types by spec name (flows/registry.c): nf_bijector_ntypes entries. */
extern const nf_bijector_type *const nf_bijector_types[];
extern const size_t nf_bijector_ntypes;
const nf_bijector_type *nf_bijector_type_find(const char *name);

#endif
