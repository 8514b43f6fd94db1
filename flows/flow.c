/* flows/flow.c - a chain of bijectors on a base distribution.
 *
 * Density direction (x -> z):  h_0 = x, h_{i+1} = f_i(h_i), z = h_L,
 *     log p(x) = log p_base(z) + sum_i log|det df_i/dh_i|.
 * Sampling direction (z -> x): z ~ p_base, h_i = f_i^-1(h_{i+1}), x = h_0,
 *     log p(x) = log p_base(z) - sum_i log|det df_i^-1/dh_{i+1}|   (inverse adds -log|det df/dx|).
 * Backward of log_prob with g = dL/dlogp: dL/dz from the base, every bijector receives
 * dlogdet = g, and dL/dh_i flows down the chain.  Backward of sample with dL/dx and dL/dlogp: each
 * inverse receives dlogdet = -dL/dlogp and dL/dh_i flows up to z, where the base adds its part.
 *
 * All intermediate h_i stay in one buffer (they are the inputs the backward calls need) and every
 * bijector has its own workspace region, so forward caches survive until backward.
 */
#include "flows/flow.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/spec.h"

int nf_flow_create(nf_flow **out, const char *spec_text, int dim, int ctx_dim, uint64_t seed)
{
    return nf_flow_build(out, spec_text, dim, ctx_dim, seed, NULL, NULL, "");
}

int nf_flow_build(nf_flow **out, const char *spec_text, int dim, int ctx_dim, uint64_t seed, nf_params *P,
                  nf_params *S, const char *prefix)
{
    *out = NULL;
    if (!P != !S) return nf_error(NF_EINVAL, "a flow built into a model's store needs both its stores (P and S)");
    if (!prefix) prefix = "";
    if (dim < 1) return nf_error(NF_EINVAL, "flow dimension %d (expected at least 1)", dim);
    if (ctx_dim < 0) return nf_error(NF_EINVAL, "context width %d (expected 0 or more)", ctx_dim);
    nf_spec spec;
    NF_TRY(nf_spec_parse(&spec, spec_text));
    nf_flow *f = nf_calloc(1, sizeof *f, "flow");
    nf_rng *rng = nf_rng_alloc(seed, 0x666c6f77);
    int rc = f && rng ? NF_OK : NF_ENOMEM;
    if (rc == NF_OK) {
        f->dim = dim;
        f->ctx_dim = ctx_dim;
        f->seed = seed;
        f->spec = strdup(spec_text);
        f->owns_params = P == NULL;
        f->P = P ? P : nf_params_alloc();
        f->S = S ? S : nf_params_alloc();
        f->p_first = P ? P->n : 0;
        f->s_first = S ? S->n : 0;
        snprintf(f->prefix, sizeof f->prefix, "%s", prefix);
        f->b = nf_calloc(spec.n ? (size_t)spec.n : 1, sizeof(nf_bijector), "flow bijectors");
        if (!f->spec || !f->P || !f->S || !f->b) rc = nf_error(NF_ENOMEM, "out of memory creating a flow");
    }
    for (int i = 0; rc == NF_OK && i < spec.n; i++) {
        char name[64];
        if (snprintf(name, sizeof name, "%sb%d.%s", prefix, i, spec.items[i].type->name) >= (int)sizeof name) {
            rc = nf_error(NF_EINVAL, "component prefix '%s' is too long (the names of its pieces exceed %zu "
                                     "characters)", prefix, sizeof name - 1);
            break;
        }
        rc = nf_bijector_create(&f->b[i], spec.items[i].type, dim, ctx_dim, name, spec.items[i].options, f->P,
                                f->S, rng);
        if (rc != NF_OK) rc = nf_error_context(rc, "flow spec item %d (%s)", i + 1, spec.items[i].type->name);
        else f->nb = i + 1;
    }
    if (rc == NF_OK) {
        char name[64];
        snprintf(name, sizeof name, "%sbase", prefix);
        rc = nf_dist_create(&f->base, nf_dist_type_find(spec.base), dim, ctx_dim, name, spec.base_options, f->P, f->S,
                            rng);
        if (rc != NF_OK) rc = nf_error_context(rc, "flow spec base");
    }
    nf_spec_free(&spec);
    nf_rng_free(rng);
    if (rc != NF_OK) {
        nf_flow_free(f);
        return rc;
    }
    *out = f;
    return NF_OK;
}

/* Slice k of r's store is slice k of f's: the same name, offset and size. */
static int same_slices(const nf_params *r, const nf_params *f)
{
    if (r->n > f->n || r->nslices > f->nslices) return 0;
    for (size_t k = 0; k < r->nslices; k++)
        if (strcmp(r->slices[k].name, f->slices[k].name) || r->slices[k].offset != f->slices[k].offset ||
            r->slices[k].size != f->slices[k].size)
            return 0;
    return 1;
}

int nf_flow_replicable(const nf_flow *f) { return f->p_first == 0 && f->s_first == 0; }

int nf_flow_replica(nf_flow **out, const nf_flow *f)
{
    *out = NULL;
    if (!nf_flow_replicable(f))
        return nf_error(NF_EINVAL, "a replica of flow '%s' needs its stores to begin with the flow's slices", f->spec);
    nf_flow *r;
    NF_TRY(nf_flow_build(&r, f->spec, f->dim, f->ctx_dim, f->seed, NULL, NULL, f->prefix));
    if (!same_slices(r->P, f->P) || !same_slices(r->S, f->S)) {
        nf_flow_free(r);
        return nf_error(NF_EINVAL, "a replica of flow '%s' needs its stores to begin with the flow's slices", f->spec);
    }
    free(r->P->value), free(r->S->value); /* the replica's own initial values: f's are used */
    r->borrows = 1;
    nf_flow_replica_sync(r, f);
    for (int i = 0; i < r->nb; i++) r->b[i].training = f->nb > i ? f->b[i].training : 0;
    *out = r;
    return NF_OK;
}

void nf_flow_replica_sync(nf_flow *r, const nf_flow *f)
{
    r->P->value = f->P->value;
    r->S->value = f->S->value;
}

int nf_flow_rows_independent(const nf_flow *f)
{
    for (int i = 0; i < f->nb; i++)
        if (f->b[i].type->batch_coupled && f->b[i].type->batch_coupled(&f->b[i])) return 0;
    return !f->base.type || !f->base.type->prepare;
}

void nf_flow_free(nf_flow *f)
{
    if (!f) return;
    for (int i = 0; i < f->nb; i++) nf_bijector_destroy(&f->b[i]);
    if (f->base.type) nf_dist_destroy(&f->base);
    free(f->b);
    free(f->spec);
    if (f->borrows) f->P->value = f->S->value = NULL; /* another flow's (nf_flow_replica) */
    if (f->owns_params) {
        nf_params_free(f->P);
        nf_params_free(f->S);
    }
    free(f->h);
    free(f->g);
    free(f->g2);
    free(f->ld);
    free(f->dld);
    free(f->ws);
    free(f->ws_off);
    free(f);
}

void nf_flow_set_training(nf_flow *f, int training)
{
    for (int i = 0; i < f->nb; i++) f->b[i].training = training;
}

void nf_flow_set_invert(nf_flow *f, nf_invert_method method, double tol, int max_sweeps)
{
    for (int i = 0; i < f->nb; i++) {
        f->b[i].invert_method = method;
        if (tol > 0) f->b[i].jacobi_tol = tol;
        if (max_sweeps > 0) f->b[i].jacobi_max_sweeps = max_sweeps;
    }
}

void nf_flow_set_jacobi_block(nf_flow *f, int block)
{
    for (int i = 0; i < f->nb; i++) f->b[i].jacobi_block = block > 0 ? block : 0;
}

void nf_flow_set_guidance(nf_flow *f, double w)
{
    for (int i = 0; i < f->nb; i++) f->b[i].guidance = w;
}

int nf_flow_last_sweeps(const nf_flow *f)
{
    int s = 0;
    for (int i = 0; i < f->nb; i++) s += f->b[i].last_sweeps;
    return s;
}

/* Give the workspace back (the next call reserves what its batch needs). */
static void release(nf_flow *f)
{
    free(f->h), free(f->g), free(f->g2), free(f->ld), free(f->dld), free(f->ws);
    f->h = f->g = f->g2 = f->ld = f->dld = f->ws = NULL;
    f->cap_n = 0;
}

/* Grow the workspace to a batch of n (outside the hot path: only when a larger batch arrives). */
static int reserve(nf_flow *f, int n)
{
    if (n <= f->cap_n) return NF_OK;
    size_t nd = (size_t)n * f->dim;
    size_t *off = realloc(f->ws_off, (size_t)(f->nb + 1) * sizeof *off);
    if (!off) return nf_error(NF_ENOMEM, "out of memory for a batch of %d", n);
    f->ws_off = off;
    size_t total = 0;
    for (int i = 0; i < f->nb; i++) {
        off[i] = total;
        size_t w = f->b[i].type->workspace(&f->b[i], n);
        total += (w + 7) / 8 * 8; /* keep every region 32/64-byte aligned relative to the base */
    }
    off[f->nb] = total;
    release(f);
    f->h = malloc((size_t)(f->nb + 1) * nd * sizeof(nf_real));
    f->g = malloc(nd * sizeof(nf_real));
    f->g2 = malloc(nd * sizeof(nf_real));
    f->ld = malloc((size_t)n * sizeof(nf_real));
    f->dld = malloc((size_t)n * sizeof(nf_real));
    f->ws = aligned_alloc(64, ((total ? total : 8) * sizeof(nf_real) + 63) / 64 * 64);
    if (!f->h || !f->g || !f->g2 || !f->ld || !f->dld || !f->ws) {
        f->cap_n = 0;
        return nf_error(NF_ENOMEM, "out of memory for the workspace of a batch of %d samples", n);
    }
    f->cap_n = n;
    return NF_OK;
}

static nf_real *level(nf_flow *f, int i, int n) { return f->h + (size_t)i * n * f->dim; }

static int check_finite(const nf_real *v, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i])) return nf_error(NF_ENONFINITE, "%s of sample %d is %g", what, i, (double)v[i]);
    return NF_OK;
}

int nf_flow_log_prob(nf_flow *f, nf_real *logp, const nf_real *x, const nf_real *ctx, const size_t *idx, int n)
{
    if (n <= 0) return nf_error(NF_EINVAL, "log_prob of an empty batch (expected at least one sample)");
    NF_TRY(reserve(f, n));
    size_t nd = (size_t)n * f->dim;
    if (idx && f->base.type->prepare) NF_TRY(f->base.type->prepare(&f->base, idx, n));
    memcpy(level(f, 0, n), x, nd * sizeof(nf_real));
    memset(f->ld, 0, (size_t)n * sizeof(nf_real));
    for (int i = 0; i < f->nb; i++) {
        nf_bijector *b = &f->b[i];
        int rc = b->type->forward(b, level(f, i + 1, n), f->ld, level(f, i, n), ctx, n, f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s forward", b->name);
    }
    NF_TRY(f->base.type->log_prob(&f->base, logp, level(f, f->nb, n), ctx, idx, n));
    for (int i = 0; i < n; i++) logp[i] += f->ld[i];
    f->last_n = n;
    f->last_dir = 1;
    f->last_ctx = ctx;
    f->last_idx = idx;
    return check_finite(logp, n, "log-density");
}

int nf_flow_last_latent(const nf_flow *f, nf_real *z)
{
    if (f->last_dir != 1) return nf_error(NF_EINVAL, "nf_flow_last_latent called without a preceding log_prob");
    const size_t nd = (size_t)f->last_n * f->dim;
    memcpy(z, f->h + (size_t)f->nb * nd, nd * sizeof *z);
    return NF_OK;
}

int nf_flow_backward(nf_flow *f, const nf_real *dlogp, nf_real *dx, nf_real *dctx)
{
    if (f->last_dir != 1) return nf_error(NF_EINVAL, "nf_flow_backward called without a preceding log_prob");
    int n = f->last_n;
    size_t nd = (size_t)n * f->dim;
    memset(f->g, 0, nd * sizeof(nf_real));
    NF_TRY(f->base.type->backward(&f->base, f->g, dctx, dlogp, level(f, f->nb, n), f->last_ctx, f->last_idx, n));
    for (int i = f->nb - 1; i >= 0; i--) {
        nf_bijector *b = &f->b[i];
        memset(f->g2, 0, nd * sizeof(nf_real));
        int rc = b->type->backward(b, f->g2, dctx, f->g, dlogp, level(f, i, n), level(f, i + 1, n), f->last_ctx, n,
                                   f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s backward", b->name);
        nf_real *t = f->g;
        f->g = f->g2;
        f->g2 = t;
    }
    if (dx)
        for (size_t k = 0; k < nd; k++) dx[k] += f->g[k];
    return NF_OK;
}

int nf_flow_nll_step(nf_flow *f, const nf_real *x, const nf_real *ctx, const size_t *idx, int n, double *nll)
{
    NF_TRY(reserve(f, n));
    /* f->dld doubles as the logp buffer, then as dL/dlogp = -1/n for every sample */
    NF_TRY(nf_flow_log_prob(f, f->dld, x, ctx, idx, n));
    double s = 0;
    for (int i = 0; i < n; i++) s += f->dld[i];
    *nll = -s / n;
    for (int i = 0; i < n; i++) f->dld[i] = (nf_real)(-1.0 / n);
    return nf_flow_backward(f, f->dld, NULL, NULL);
}

/* Survival of a 1-D flow of increasing maps: S(x) = P(X > x) = P(Z > f(x)) = S_base(f(x)),
 * so log S(x) = log_survival_base(z) with z = f(x).  Backward: dL/dz from the base's survival
 * backward, then every bijector's backward with dL/dlogdet = 0 (the log-determinant does not enter). */
int nf_flow_log_survival(nf_flow *f, nf_real *out, const nf_real *x, const nf_real *ctx, int n)
{
    if (n <= 0) return nf_error(NF_EINVAL, "survival of an empty batch (expected at least one sample)");
    if (f->dim != 1) return nf_error(NF_EINVAL, "survival is defined for 1-D flows (this one has %d dimensions)", f->dim);
    if (!f->base.type->log_survival)
        return nf_error(NF_EINVAL, "base %s has no closed-form survival function", f->base.type->name);
    NF_TRY(reserve(f, n));
    memcpy(level(f, 0, n), x, (size_t)n * sizeof(nf_real));
    memset(f->ld, 0, (size_t)n * sizeof(nf_real));
    for (int i = 0; i < f->nb; i++) {
        nf_bijector *b = &f->b[i];
        int rc = b->type->forward(b, level(f, i + 1, n), f->ld, level(f, i, n), ctx, n, f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s forward", b->name);
    }
    NF_TRY(f->base.type->log_survival(&f->base, out, level(f, f->nb, n), ctx, n));
    f->last_n = n;
    f->last_dir = 2;
    f->last_ctx = ctx;
    f->last_idx = NULL;
    return check_finite(out, n, "log-survival");
}

int nf_flow_log_survival_backward(nf_flow *f, const nf_real *dout, nf_real *dx, nf_real *dctx)
{
    if (f->last_dir != 2)
        return nf_error(NF_EINVAL, "nf_flow_log_survival_backward called without a preceding nf_flow_log_survival");
    int n = f->last_n;
    memset(f->g, 0, (size_t)n * sizeof(nf_real));
    memset(f->dld, 0, (size_t)n * sizeof(nf_real));
    NF_TRY(f->base.type->log_survival_backward(&f->base, f->g, dctx, dout, level(f, f->nb, n), f->last_ctx, n));
    for (int i = f->nb - 1; i >= 0; i--) {
        nf_bijector *b = &f->b[i];
        memset(f->g2, 0, (size_t)n * sizeof(nf_real));
        int rc = b->type->backward(b, f->g2, dctx, f->g, f->dld, level(f, i, n), level(f, i + 1, n), f->last_ctx, n,
                                   f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s backward", b->name);
        nf_real *t = f->g;
        f->g = f->g2;
        f->g2 = t;
    }
    if (dx)
        for (int k = 0; k < n; k++) dx[k] += f->g[k];
    return NF_OK;
}

static int invert_from_base(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *ctx, int n);

int nf_flow_sample(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    if (n <= 0) return nf_error(NF_EINVAL, "sample of %d samples (expected at least one)", n);
    NF_TRY(reserve(f, n));
    NF_TRY(f->base.type->sample(&f->base, level(f, f->nb, n), f->dld, ctx, n, rng));
    return invert_from_base(f, x, logp, ctx, n);
}

int nf_flow_sample_latent(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *z, const nf_real *ctx, int n)
{
    if (n <= 0) return nf_error(NF_EINVAL, "sample of %d samples (expected at least one)", n);
    NF_TRY(reserve(f, n));
    memcpy(level(f, f->nb, n), z, (size_t)n * f->dim * sizeof(nf_real));
    if (logp) NF_TRY(f->base.type->log_prob(&f->base, f->dld, z, ctx, NULL, n));
    return invert_from_base(f, x, logp, ctx, n);
}

/* The sampling direction from the base draw z (last level) with its log-density in f->dld: every
 * bijector's inverse, last to first; x the data, logp = log p_base(z) - sum of the inverses' logdets. */
static int invert_from_base(nf_flow *f, nf_real *x, nf_real *logp, const nf_real *ctx, int n)
{
    size_t nd = (size_t)n * f->dim;
    memset(f->ld, 0, (size_t)n * sizeof(nf_real));
    for (int i = f->nb - 1; i >= 0; i--) {
        nf_bijector *b = &f->b[i];
        int rc = b->type->inverse(b, level(f, i, n), f->ld, level(f, i + 1, n), ctx, n, f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s inverse", b->name);
    }
    memcpy(x, level(f, 0, n), nd * sizeof(nf_real));
    if (logp) {
        for (int i = 0; i < n; i++) logp[i] = f->dld[i] - f->ld[i];
        NF_TRY(check_finite(logp, n, "log-density of a sample"));
    }
    f->last_n = n;
    f->last_dir = -1;
    f->last_ctx = ctx;
    f->last_idx = NULL;
    return NF_OK;
}

int nf_flow_sample_backward(nf_flow *f, const nf_real *dx, const nf_real *dlogp, nf_real *dctx)
{
    if (f->last_dir != -1) return nf_error(NF_EINVAL, "nf_flow_sample_backward called without a preceding sample");
    int n = f->last_n;
    size_t nd = (size_t)n * f->dim;
    if (dx) memcpy(f->g, dx, nd * sizeof(nf_real));
    else memset(f->g, 0, nd * sizeof(nf_real));
    /* each inverse adds -log|det df/dx|, which enters log p(x) with a minus sign */
    for (int i = 0; i < n; i++) f->dld[i] = dlogp ? -dlogp[i] : 0;
    for (int i = 0; i < f->nb; i++) {
        nf_bijector *b = &f->b[i];
        if (!b->type->inverse_backward)
            return nf_error(NF_EINVAL, "%s cannot be trained through its sampling direction (no inverse gradient); "
                                       "use a type with a fast inverse such as iaf or a coupling layer", b->name);
        memset(f->g2, 0, nd * sizeof(nf_real));
        int rc = b->type->inverse_backward(b, f->g2, dctx, f->g, f->dld, level(f, i + 1, n), level(f, i, n),
                                           f->last_ctx, n, f->ws + f->ws_off[i]);
        if (rc != NF_OK) return nf_error_context(rc, "%s inverse backward", b->name);
        nf_real *t = f->g;
        f->g = f->g2;
        f->g2 = t;
    }
    /* z enters through the base log-density too: log p_base(z) with weight dL/dlogp */
    nf_real *z = level(f, f->nb, n);
    if (dlogp) NF_TRY(f->base.type->backward(&f->base, f->g, dctx, dlogp, z, f->last_ctx, NULL, n));
    if (f->base.type->sample_backward)
        NF_TRY(f->base.type->sample_backward(&f->base, dctx, f->g, NULL, z, f->last_ctx, n));
    return NF_OK;
}

int nf_flow_chunk_rows(const nf_flow *f, int most)
{
    enum { PROBE = 64 };
    size_t per = (size_t)(f->nb + 3) * f->dim + 2; /* levels, g, g2, ld, dld */
    for (int i = 0; i < f->nb; i++) per += (f->b[i].type->workspace(&f->b[i], PROBE) + PROBE - 1) / PROBE;
    size_t chunk = (size_t)NF_FLOW_CHUNK_BYTES / (per * sizeof(nf_real));
    return most < 1 ? 1 : chunk >= (size_t)most ? most : chunk < 1 ? 1 : (int)chunk;
}

int nf_flow_in_chunks(nf_flow *f, int n, int min_rows, int (*each)(void *arg, int at, int k), void *arg)
{
    int rows = nf_flow_chunk_rows(f, n);
    if (rows < min_rows) rows = min_rows;
    int *most = calloc((size_t)f->nb + 1, sizeof *most);
    if (!most) return nf_error(NF_ENOMEM, "out of memory");
    int rc = NF_OK;
    for (int at = 0; rc == NF_OK && at < n; at += rows) {
        rc = each(arg, at, n - at < rows ? n - at : rows);
        for (int i = 0; rc == NF_OK && i < f->nb; i++)
            if (f->b[i].last_sweeps > most[i]) most[i] = f->b[i].last_sweeps;
    }
    for (int i = 0; rc == NF_OK && i < f->nb; i++) f->b[i].last_sweeps = most[i];
    free(most);
    return rc;
}

int nf_flow_init_data(nf_flow *f, const nf_real *x, const nf_real *ctx, int n)
{
    if (n <= 0) return NF_OK;
    int last = -1; /* the last bijector that wants data */
    for (int i = 0; i < f->nb; i++)
        if (f->b[i].type->init_data) last = i;
    if (last < 0) return NF_OK;
    /* The data passes through the chain in chunks (the workspace stays batch-sized); only the
     * current level is kept whole, for the statistics.  A workspace grown for the chunks is given
     * back at the end, so training keeps only what its batches need.  No bijector keeps batch
     * statistics here, so each sample's output does not depend on the chunk it is in.  Chunks of 512
     * samples, or fewer where a sample's workspace is large (nf_flow_chunk_rows: 512 images of 32 x
     * 32 through convolutions took 1.6 GB). */
    const int CHUNK = nf_flow_chunk_rows(f, 512);
    const int cap_before = f->cap_n;
    size_t nd = (size_t)n * f->dim;
    nf_real *cur = malloc(nd * sizeof(nf_real)), *next = malloc(nd * sizeof(nf_real));
    int rc = cur && next ? reserve(f, n < CHUNK ? n : CHUNK) : nf_error(NF_ENOMEM, "out of memory initialising from %d samples", n);
    if (rc == NF_OK) memcpy(cur, x, nd * sizeof(nf_real));
    for (int i = 0; rc == NF_OK && i <= last; i++) {
        nf_bijector *b = &f->b[i];
        int training = b->training;
        b->training = 0; /* pass the data on without touching batch statistics or ActNorm */
        if (b->type->init_data) rc = b->type->init_data(b, cur, n);
        for (int at = 0; rc == NF_OK && i < last && at < n; at += CHUNK) {
            int m = n - at < CHUNK ? n - at : CHUNK;
            memset(f->ld, 0, (size_t)m * sizeof(nf_real));
            rc = b->type->forward(b, next + (size_t)at * f->dim, f->ld, cur + (size_t)at * f->dim,
                                  ctx ? ctx + (size_t)at * f->ctx_dim : NULL, m, f->ws + f->ws_off[i]);
        }
        b->training = training;
        nf_real *t = cur;
        cur = next;
        next = t;
    }
    free(cur);
    free(next);
    if (f->cap_n > cap_before) release(f);
    f->last_dir = 0;
    return rc;
}
