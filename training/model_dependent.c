/* training/model_dependent.c - the "dependent" kind: a flow on a dependent base (distributions/dependent.h),
 * fit by the unbiased minibatch estimator of the joint likelihood of dependent rows. */
#include "training/model_dependent.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF_HALF_LOG_2PI 0.91893853320467274178

typedef struct {
    nf_dep *dep;          /* attached structure (owned), NULL after a load until attached */
    nf_dep_kind kind;     /* what the model was built for */
    size_t n;
    int n_params, per_block, learn;
    int update_every;     /* learned: steps between the alternating updates of theta,
                             NF_DEP_UPDATE_DOUBLING (at steps 100, 200, 400, ...), or 0: by gradient */
    size_t sched_off;     /* update_every != 0: in S, the steps taken and the step of the next update */
    size_t ml_off;        /* pooled per-block rho, updated: in S, the blocks' maximisers (n_params), then
                             the pooling's prior (mu, s; s = 0 before the first update) */
    double table_from;    /* a learned lambda on one component: the step from which batches read the
                             cached precision (through the eigenbasis before; deferred_table) */
    nf_dep_source src;    /* where the structure comes from; src.path "" if unknown */
    nf_real *logp;        /* (cap) evaluation buffer */
    int cap;
} dep_state;

static const char *kind_name(nf_dep_kind k) { return k == NF_DEP_EQUI ? "equi" : "kinship"; }

static void dependent_destroy(nf_model *m)
{
    dep_state *st = m->state;
    if (st) {
        nf_dep_free(st->dep);
        free(st->logp);
    }
    free(st);
    nf_flow_free(m->flow); /* the flow owns the model's store, as in the density kind */
    m->flow = NULL;
    m->P = m->S = NULL;
    m->state = NULL;
}

/* Learned parameters are set by alternating updates (alternating(st)) unless update_every is 0 (then
 * trained by gradient with the flow, through theta = sigmoid(u)): theta stays fixed for update_every
 * steps, in which a kinship batch uses the cached precision like a fixed lambda (O(b^2 p) per batch
 * instead of O(b n p) through the eigenbasis), and the base keeps every point's latest latent; then
 * theta becomes the maximiser of the exact joint of those latents with an offset and a scale per
 * latent dimension profiled out (nf_dep_best_theta: the flow's log-determinants do not depend on
 * theta, so this is a full-batch maximisation over theta and the latents' offset and scale, those
 * left for the flow to take up in the following steps).  By gradient, a minibatch sees few pairs of
 * a block or of relatives, and theta creeps along the ridge between itself and the latents' scale:
 * rho per block barely left its start 0.5 in 3000 steps on dependent-crescent (true 0.5-0.99), and
 * the fit was worse than an i.i.d. one (bench/RESULTS.md).  Latents, theta and the step count live in
 * the state store, so a checkpoint resumes the same sequence of updates. */
static int alternating(const dep_state *st) { return st->learn && st->update_every != 0; }
static int pooled_updates(const dep_state *st) { return alternating(st) && st->per_block == 2; }
/* The step of the update after the one at `step` (0: the first): every update_every steps, except
 * that a rho (cheap to update) is updated ten times as often in the first 5 update_every steps: while
 * rho lags behind the data early on, the flow takes tight blocks into its marginal density instead of
 * leaving them to the correlation, and does not give them back (dependent-crescent seed 1: rho error
 * 0.156 with updates every 100 steps, 0.052 with every 10 for the first 500; bench/RESULTS.md).
 * NF_DEP_UPDATE_DOUBLING: at steps 100, 200, 400, ... */
static double next_update(const dep_state *st, double step)
{
    if (st->update_every < 0) return step > 0 ? 2 * step : 100;
    double every = st->update_every;
    if (st->kind == NF_DEP_EQUI && step < 5 * every) every = every >= 10 ? floor(every / 10) : 1;
    return (floor(step / every) + 1) * every; /* on the multiples, also after an update that waited */
}

/* A learned lambda on a K of one component (every pair related) moves most in its first updates
 * (pedigree sets: by 0.035-0.045 at step 100 and 0.02 at step 200, then 0.001-0.01 an update), and each
 * move of the cached precision costs a rebuild of the whole n x n table (n^3 / 2 multiply-adds, 1.3 s
 * at n = 5,000 on one core: thousands of steps).  So until the third update such a fit's batches go
 * through the eigenbasis (O(b n p) a batch, about 0.7 ms at b = 256, n = 5,000, no table), and the
 * table is built once, at the third update's lambda; a later move of more than NF_DEP_UPDATE_TOL still
 * rebuilds it.  Both ways give the same estimator; the step count decides, so a resumed fit takes the
 * same way as an uninterrupted one.  With several components a rebuild costs the sum of their m^3 and
 * the table is used from the start. */
static int deferred_table(const dep_state *st, const nf_dep *dep)
{
    return alternating(st) && dep->kind == NF_DEP_KINSHIP && dep->n_comp == 1;
}

/* The flow of `spec` on the standard normal, whose base is then replaced by a dependent base with
 * the structure's parameters (theta = sigmoid(u), u starting at logit(theta0)). */
static int build(nf_model *m, const char *spec, int dim, int ctx_dim, uint64_t seed, double theta0)
{
    dep_state *st = m->state;
    NF_TRY(nf_flow_create(&m->flow, spec, dim, ctx_dim, seed));
    nf_flow *f = m->flow;
    m->P = f->P;
    m->S = f->S;
    m->ctx_dim = f->ctx_dim;
    if (f->base.type != &nf_dist_normal)
        return nf_error(NF_EINVAL, "a dependent model needs a flow on the standard normal base (got base=%s): every "
                                   "row's latent is N(0, I) marginally", f->base.type->name);
    nf_dist_destroy(&f->base);
    char opts[160];
    snprintf(opts, sizeof opts, "params=%d, init=%.17g, learn=%d, points=%zu", st->n_params,
             log(theta0 / (1 - theta0)), alternating(st) ? 2 : st->learn, alternating(st) ? st->n : 0);
    int rc = nf_dist_create(&f->base, &nf_dist_dependent, dim, ctx_dim, "base", opts, m->P, m->S, NULL);
    if (rc != NF_OK) return nf_error_context(rc, "the dependent base");
    if (alternating(st)) {
        NF_TRY(nf_params_add(m->S, "dependence.update_schedule", 2, &st->sched_off));
        m->S->value[st->sched_off + 1] = (nf_real)next_update(st, 0);
        st->table_from = next_update(st, next_update(st, next_update(st, 0)));
    }
    if (pooled_updates(st)) {
        NF_TRY(nf_params_add(m->S, "dependence.rho_maximisers", (size_t)st->n_params + 2, &st->ml_off));
        for (int k = 0; k < st->n_params; k++) m->S->value[st->ml_off + k] = (nf_real)theta0;
    }
    return NF_OK;
}

/* The best theta for the latents z: with pooled per-block rho, the coordinate ascent goes on from
 * the maximisers kept in S (and leaves its new ones there), theta gets the pooled rho. */
static int best_theta_for(dep_state *st, nf_model *m, const nf_real *z, int p, double *theta, int sweeps)
{
    if (!pooled_updates(st)) return nf_dep_best_theta(st->dep, z, p, theta, sweeps);
    const int np = st->n_params;
    nf_real *kept = m->S->value + st->ml_off;
    double *ml = malloc((size_t)np * sizeof *ml), prior[2] = {kept[np], kept[np + 1]};
    if (!ml) return nf_error(NF_ENOMEM, "out of memory for %d maximisers", np);
    for (int k = 0; k < np; k++) ml[k] = kept[k];
    int rc = nf_dep_best_theta_pooled(st->dep, z, p, ml, theta, prior, sweeps);
    for (int k = 0; rc == NF_OK && k < np; k++) kept[k] = (nf_real)ml[k];
    if (rc == NF_OK) kept[np] = (nf_real)prior[0], kept[np + 1] = (nf_real)prior[1];
    free(ml);
    return rc;
}

/* The steps taken so far (counted for alternating updates only; 0 otherwise). */
static double steps_taken(const nf_model *m)
{
    const dep_state *st = m->state;
    return alternating(st) ? m->S->value[st->sched_off] : 0;
}

/* Whether the batch of step `step` (1, 2, ...) reads the cached whole kinship precision (O(b^2) a
 * batch): with a fixed or alternately updated lambda (up to NF_DEP_CACHE_MAX points), but for a learned
 * lambda on one component only from the table_from-th step (deferred_table). */
static int table_at(const nf_model *m, const nf_dep *dep, double step)
{
    const dep_state *st = m->state;
    if (dep->kind != NF_DEP_KINSHIP || !(!st->learn || alternating(st)) || dep->n > NF_DEP_CACHE_MAX) return 0;
    return !deferred_table(st, dep) || step >= st->table_from;
}

/* The same for the next step. */
static int wants_table(const nf_model *m, const nf_dep *dep) { return table_at(m, dep, steps_taken(m) + 1); }

/* Hand the structure to the base, with the cached precision if the fit reads it (wants_table). */
static int use_structure(nf_model *m, nf_dep *dep)
{
    NF_TRY(nf_dist_dependent_attach(&m->flow->base, dep));
    return nf_dep_kinship_cache(dep, wants_table(m, dep));
}

static int alloc_model(nf_model **out)
{
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) return NF_ENOMEM;
    m->type = &nf_model_dependent;
    m->state = nf_calloc(1, sizeof(dep_state), "model");
    if (!m->state) {
        free(m);
        return NF_ENOMEM;
    }
    *out = m;
    return NF_OK;
}

int nf_model_dependent_create(nf_model **out, const char *spec, int dim, int ctx_dim, uint64_t seed, nf_dep *dep,
                              double theta0, int learn, int update_every)
{
    *out = NULL;
    if (!dep) return nf_error(NF_EINVAL, "a dependent model needs a dependence structure");
    if (!(theta0 > 0 && theta0 < 1)) {
        const char *what = dep->kind == NF_DEP_EQUI ? "rho" : "lambda";
        nf_dep_free(dep);
        return nf_error(NF_EINVAL, "starting %s %g (expected strictly between 0 and 1)", what, theta0);
    }
    if (update_every < 0 && update_every != NF_DEP_UPDATE_DOUBLING) {
        nf_dep_free(dep);
        return nf_error(NF_EINVAL, "updates every %d steps (expected at least 1, 0: by gradient, or doubling)",
                        update_every);
    }
    nf_model *m;
    int rc = alloc_model(&m);
    if (rc != NF_OK) {
        nf_dep_free(dep);
        return rc;
    }
    dep_state *st = m->state;
    st->dep = dep;
    st->kind = dep->kind;
    st->n = dep->n;
    st->n_params = dep->n_params;
    st->per_block = dep->pooled ? 2 : dep->per_block;
    st->learn = learn != 0;
    st->update_every = st->learn ? update_every : 0;
    rc = build(m, spec, dim, ctx_dim, seed, theta0);
    if (rc == NF_OK) rc = use_structure(m, dep);
    if (rc != NF_OK) {
        nf_model_free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

int nf_model_dependent_attach(nf_model *m, nf_dep *dep)
{
    if (m->type != &nf_model_dependent) {
        nf_dep_free(dep);
        return nf_error(NF_EINVAL, "a dependence structure attached to a %s model (expected a dependent one)",
                        m->type->kind);
    }
    dep_state *st = m->state;
    int rc = NF_OK;
    if (dep->kind != st->kind)
        rc = nf_error(NF_EINVAL, "the model was trained with a %s structure, not %s", kind_name(st->kind),
                      kind_name(dep->kind));
    else if (dep->n != st->n)
        rc = nf_error(NF_EINVAL, "the model's structure has %zu points, this one %zu", st->n, dep->n);
    else if (dep->n_params != st->n_params)
        rc = nf_error(NF_EINVAL, "the model's structure has %d parameters, this one %d (%d blocks%s)", st->n_params,
                      dep->n_params, dep->n_blocks, dep->per_block ? ", one rho each" : "");
    if (rc == NF_OK) rc = use_structure(m, dep);
    if (rc != NF_OK) {
        nf_dep_free(dep);
        return rc;
    }
    nf_dep_free(st->dep);
    st->dep = dep;
    return NF_OK;
}

int nf_model_dependent_set_source(nf_model *m, const nf_dep_source *s)
{
    if (m->type != &nf_model_dependent) return nf_error(NF_EINVAL, "a %s model has no dependence structure", m->type->kind);
    dep_state *st = m->state;
    if (s->kind != st->kind) return nf_error(NF_EINVAL, "a %s source for a %s structure", kind_name(s->kind), kind_name(st->kind));
    st->src = *s;
    return NF_OK;
}

int nf_model_dependent_source(const nf_model *m, nf_dep_source *s)
{
    if (m->type != &nf_model_dependent) return nf_error(NF_EINVAL, "a %s model has no dependence structure", m->type->kind);
    const dep_state *st = m->state;
    if (!st->src.path[0]) return nf_error(NF_EINVAL, "the model does not say where its dependence structure comes from");
    *s = st->src;
    return NF_OK;
}

nf_dep *nf_model_dependent_structure(const nf_model *m)
{
    return m && m->type == &nf_model_dependent ? ((dep_state *)m->state)->dep : NULL;
}

int nf_model_dependent_describe(const nf_model *m, nf_dep_kind *kind, size_t *n, int *n_params, int *learned,
                                double *theta, int max)
{
    if (m->type != &nf_model_dependent) return nf_error(NF_EINVAL, "a %s model has no dependence structure", m->type->kind);
    const dep_state *st = m->state;
    if (kind) *kind = st->kind;
    if (n) *n = st->n;
    if (n_params) *n_params = st->n_params;
    if (learned) *learned = st->learn;
    nf_real *u;
    NF_TRY(nf_dist_dependent_params(&m->flow->base, NULL, &u, NULL));
    for (int k = 0; theta && k < st->n_params && k < max; k++) theta[k] = 1 / (1 + exp(-(double)u[k]));
    return NF_OK;
}

int nf_model_dependent_update_every(const nf_model *m)
{
    return m->type == &nf_model_dependent && alternating(m->state) ? ((const dep_state *)m->state)->update_every : 0;
}

/* At the scheduled steps, once every point has a latent: theta = the maximiser of the joint of the
 * latest latents with their scale profiled out (nf_dep_best_theta); a kinship lambda is kept unless
 * it moved by more than NF_DEP_UPDATE_TOL while the batches read the cached n x n precision (each
 * change costs a rebuild; before a deferred table is read, or without one, a move costs nothing).  A
 * failure (out of memory) leaves theta where it is and tries again next step.  The counters are
 * floats in S: exact to 2^24 steps, after which the updates stop. */
static void dependent_before_step(nf_model *m)
{
    dep_state *st = m->state;
    if (!alternating(st) || !st->dep) return;
    if (!st->dep->use_cache && wants_table(m, st->dep))
        (void)nf_dep_kinship_cache(st->dep, 1); /* the table is built at the first batch that reads it */
    nf_real *sched = m->S->value + st->sched_off, *z, *u;
    sched[0] += 1;
    if (sched[0] < sched[1]) return;
    const int p = m->flow->dim;
    int complete;
    if (nf_dist_dependent_latents(&m->flow->base, &z, &complete) != NF_OK || !complete) return; /* wait for all */
    if (nf_dist_dependent_params(&m->flow->base, NULL, &u, NULL) != NF_OK) return;
    const int np = st->n_params;
    const int keep_small = table_at(m, st->dep, sched[0] - 1); /* a move would rebuild a table in use */
    double *theta = malloc(2 * (size_t)np * sizeof *theta), *old = theta + np;
    if (!theta) return;
    nf_dep_theta(st->dep, u, old);
    memcpy(theta, old, (size_t)np * sizeof *theta);
    if (best_theta_for(st, m, z, p, theta, NF_DEP_UPDATE_SWEEPS) == NF_OK) {
        for (int k = 0; k < np; k++)
            if (!keep_small || fabs(theta[k] - old[k]) > NF_DEP_UPDATE_TOL)
                u[k] = (nf_real)log(theta[k] / (1 - theta[k]));
        sched[1] = (nf_real)next_update(st, sched[0]);
    }
    free(theta);
}

/* loss = -(1/b) sum_{i in B} [t_i + log|det J(x_i)|]: the base computes t_i from the batch's latents
 * and row indices, and its backward the estimator's dL/dz and dL/du; the flow chains the rest. */
static int dependent_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    (void)rng;
    dep_state *st = m->state;
    if (!st->dep)
        return nf_error(NF_EINVAL, "a dependent model needs its structure to train (attach the group ids or kinship "
                                   "matrix it was trained with)");
    if (!b->idx) return nf_error(NF_EINVAL, "a dependent model trains on batches that carry their rows' indices");
    nf_flow *f = m->flow;
    return nf_flow_nll_step(f, b->x, f->ctx_dim ? b->ctx : NULL, b->idx, b->n, loss);
}

static int reserve(dep_state *st, int n)
{
    if (n <= st->cap) return NF_OK;
    nf_real *p = realloc(st->logp, (size_t)n * sizeof *p);
    if (!p) return nf_error(NF_ENOMEM, "out of memory evaluating a batch of %d", n);
    st->logp = p;
    st->cap = n;
    return NF_OK;
}

/* The marginal log-density of a new row: the flow on N(0, I) (the base without row indices). */
static int dependent_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    dep_state *st = m->state;
    nf_flow *f = m->flow;
    NF_TRY(reserve(st, b->n));
    NF_TRY(nf_flow_log_prob(f, st->logp, b->x, f->ctx_dim ? b->ctx : NULL, NULL, b->n));
    for (int i = 0; i < b->n; i++) values[i] = st->logp[i];
    return NF_OK;
}

/* Data-dependent layers as in the density kind; the training rows must be the structure's points. */
static int dependent_init_data(nf_model *m, const nf_source *train)
{
    dep_state *st = m->state;
    if (st->dep && train->n != st->n)
        return nf_error(NF_EINVAL, "%s: %zu training rows but the dependence structure has %zu points (expected "
                                   "one point per row, in the same order)", train->name, train->n, st->n);
    return nf_model_density.init_data(m, train);
}

static void dependent_set_training(nf_model *m, int training) { nf_flow_set_training(m->flow, training); }

static int dependent_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const dep_state *st = m->state;
    char path[256];
    snprintf(path, sizeof path, "%s/flow", group);
    NF_TRY(nf_model_flow_save(m->flow, f, path));
    snprintf(path, sizeof path, "%s/dependence", group);
    NF_TRY(nf_h5_group(f, path));
    NF_TRY(nf_h5_attr_set_string(f, path, "structure", kind_name(st->kind)));
    NF_TRY(nf_h5_attr_set_int64(f, path, "points", (int64_t)st->n));
    NF_TRY(nf_h5_attr_set_int64(f, path, "params", st->n_params));
    NF_TRY(nf_h5_attr_set_int64(f, path, "per_block", st->per_block));
    if (st->src.path[0]) {
        NF_TRY(nf_h5_attr_set_string(f, path, "source_file", st->src.path));
        NF_TRY(nf_h5_attr_set_string(f, path, "source_dataset", st->src.dataset));
    }
    if (alternating(st)) NF_TRY(nf_h5_attr_set_int64(f, path, "update_every", st->update_every));
    return nf_h5_attr_set_int64(f, path, "learn", st->learn);
}

static int load_parts(nf_model *m, nf_h5 *f, const char *group)
{
    m->state = nf_calloc(1, sizeof(dep_state), "model");
    if (!m->state) return NF_ENOMEM;
    dep_state *st = m->state;
    char path[256], kind[32];
    int64_t n, np, pb, learn;
    snprintf(path, sizeof path, "%s/dependence", group);
    NF_TRY(nf_h5_attr_get_string(f, path, "structure", kind, sizeof kind));
    NF_TRY(nf_h5_attr_get_int64(f, path, "points", &n));
    NF_TRY(nf_h5_attr_get_int64(f, path, "params", &np));
    NF_TRY(nf_h5_attr_get_int64(f, path, "per_block", &pb));
    NF_TRY(nf_h5_attr_get_int64(f, path, "learn", &learn));
    if (strcmp(kind, "equi") && strcmp(kind, "kinship"))
        return nf_error(NF_EFORMAT, "%s:%s: structure '%s' (expected equi or kinship)", nf_h5_path(f), path, kind);
    if (n < 1 || np < 1 || np > n || pb < 0 || pb > 2 || (learn != 0 && learn != 1))
        return nf_error(NF_EFORMAT, "%s:%s: %lld points, %lld parameters, per_block %lld, learn %lld (expected 1 <= "
                                    "parameters <= points, per_block 0..2, learn 0 or 1)", nf_h5_path(f), path,
                        (long long)n, (long long)np, (long long)pb, (long long)learn);
    st->kind = strcmp(kind, "equi") ? NF_DEP_KINSHIP : NF_DEP_EQUI;
    st->n = (size_t)n;
    st->n_params = (int)np;
    st->per_block = (int)pb;
    st->learn = (int)learn;
    if (nf_h5_attr_exists(f, path, "update_every")) {
        int64_t every;
        NF_TRY(nf_h5_attr_get_int64(f, path, "update_every", &every));
        if ((every < 1 && every != NF_DEP_UPDATE_DOUBLING) || every > 1 << 30)
            return nf_error(NF_EFORMAT, "%s:%s: update_every %lld (expected 1..2^30, or %d: doubling)", nf_h5_path(f),
                            path, (long long)every, NF_DEP_UPDATE_DOUBLING);
        st->update_every = (int)every;
    }
    st->src.kind = st->kind;
    st->src.per_block = st->per_block;
    if (nf_h5_attr_exists(f, path, "source_file")) {
        NF_TRY(nf_h5_attr_get_string(f, path, "source_file", st->src.path, sizeof st->src.path));
        NF_TRY(nf_h5_attr_get_string(f, path, "source_dataset", st->src.dataset, sizeof st->src.dataset));
    }
    char spec[1 << 16];
    int64_t dim, ctx_dim, seed;
    snprintf(path, sizeof path, "%s/flow", group);
    NF_TRY(nf_h5_attr_get_string(f, path, "spec", spec, sizeof spec));
    NF_TRY(nf_h5_attr_get_int64(f, path, "dim", &dim));
    NF_TRY(nf_h5_attr_get_int64(f, path, "ctx_dim", &ctx_dim));
    NF_TRY(nf_h5_attr_get_int64(f, path, "seed", &seed));
    if (dim < 1 || dim > (1 << 24) || ctx_dim < 0 || ctx_dim > (1 << 24))
        return nf_error(NF_EFORMAT, "%s:%s: dimensions %lld and %lld (expected 1..2^24 and 0..2^24)", nf_h5_path(f),
                        path, (long long)dim, (long long)ctx_dim);
    int rc = build(m, spec, (int)dim, (int)ctx_dim, (uint64_t)seed, 0.5);
    if (rc != NF_OK) rc = nf_error_context(rc, "%s: cannot rebuild the flow of %s", nf_h5_path(f), path);
    return rc;
}

static int dependent_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    int rc = load_parts(m, f, group);
    if (rc != NF_OK) dependent_destroy(m); /* the file reader does not destroy a model that failed to load */
    return rc;
}

/* The flow's latents Z (n x p) of all of src's rows, in the structure's order, through the marginal
 * log-density (no row indices), in evaluation mode; and the sums of log p(x_i) and of log|det J(x_i)|
 * = log p(x_i) - log N(z_i; 0, I) when wanted (NULL: not). */
static int all_latents(nf_model *m, const nf_source *src, nf_real *Z, double *s_logp, double *s_ld)
{
    dep_state *st = m->state;
    nf_flow *f = m->flow;
    const int p = f->dim, B = 1024;
    size_t *idx = malloc(B * sizeof *idx);
    nf_batch b = {0};
    int rc = idx ? reserve(st, B) : nf_error(NF_ENOMEM, "out of memory for the latents of %zu rows", st->n);
    nf_model_set_training(m, 0);
    double sl = 0, sd = 0;
    for (size_t at = 0; rc == NF_OK && at < st->n; at += B) {
        int k = st->n - at < (size_t)B ? (int)(st->n - at) : B;
        for (int i = 0; i < k; i++) idx[i] = at + i;
        rc = nf_source_fetch(src, idx, k, &b);
        nf_real *z = Z + at * p;
        if (rc == NF_OK) rc = nf_dist_dependent_capture(&f->base, z);
        if (rc == NF_OK) rc = nf_flow_log_prob(f, st->logp, b.x, f->ctx_dim ? b.ctx : NULL, NULL, k);
        nf_dist_dependent_capture(&f->base, NULL);
        for (int i = 0; rc == NF_OK && i < k; i++) {
            double q = 0;
            for (int j = 0; j < p; j++) q += (double)z[(size_t)i * p + j] * z[(size_t)i * p + j];
            sl += st->logp[i];
            sd += st->logp[i] + 0.5 * q + p * NF_HALF_LOG_2PI;
        }
    }
    if (s_logp) *s_logp = sl;
    if (s_ld) *s_ld = sd;
    free(idx);
    nf_batch_free(&b);
    return rc;
}

int nf_model_dependent_joint(nf_model *m, const nf_source *src, double *joint, double *iid)
{
    dep_state *st = m->state;
    if (m->type != &nf_model_dependent) return nf_error(NF_EINVAL, "a %s model has no joint likelihood", m->type->kind);
    if (!st->dep) return nf_error(NF_EINVAL, "the joint likelihood needs the model's dependence structure");
    if (src->n != st->n)
        return nf_error(NF_EINVAL, "%s: %zu rows but the dependence structure has %zu points", src->name, src->n,
                        st->n);
    const int p = m->flow->dim;
    nf_real *Z = malloc(st->n * p * sizeof *Z);
    double *theta = malloc((size_t)st->n_params * sizeof *theta);
    double s_logp = 0, s_ld = 0, lz = 0;
    int rc = Z && theta ? all_latents(m, src, Z, &s_logp, &s_ld)
                        : nf_error(NF_ENOMEM, "out of memory for the joint likelihood");
    if (rc == NF_OK) rc = nf_model_dependent_describe(m, NULL, NULL, NULL, NULL, theta, st->n_params);
    if (rc == NF_OK) rc = nf_dep_joint_log_prob(st->dep, theta, Z, p, &lz);
    if (rc == NF_OK) {
        if (joint) *joint = lz + s_ld;
        if (iid) *iid = s_logp;
    }
    free(theta);
    free(Z);
    return rc;
}

/* When a run ends, a learned theta is set once more, to the maximiser for the final flow's latents
 * of all rows: the updates during training use each row's latest latent, computed by the parameters
 * of the step that last drew it (up to an epoch earlier), and with early stopping the update kept is
 * one before the best step.  NF_DEP_FINAL_SWEEPS sweeps of the coordinate ascent of per-block rho
 * (an update during training does NF_DEP_UPDATE_SWEEPS, going on from the last). */
#define NF_DEP_FINAL_SWEEPS 20
static int dependent_train_end(nf_model *m, const nf_source *train)
{
    dep_state *st = m->state;
    if (!alternating(st) || !st->dep || train->n != st->n) return NF_OK;
    const int p = m->flow->dim, np = st->n_params;
    nf_real *Z = malloc(st->n * p * sizeof *Z), *u;
    double *theta = malloc((size_t)np * sizeof *theta);
    int rc = Z && theta ? all_latents(m, train, Z, NULL, NULL)
                        : nf_error(NF_ENOMEM, "out of memory for the latents of %zu rows", st->n);
    if (rc == NF_OK) rc = nf_dist_dependent_params(&m->flow->base, NULL, &u, NULL);
    if (rc == NF_OK) {
        nf_dep_theta(st->dep, u, theta);
        rc = best_theta_for(st, m, Z, p, theta, NF_DEP_FINAL_SWEEPS);
    }
    for (int k = 0; rc == NF_OK && k < np; k++) u[k] = (nf_real)log(theta[k] / (1 - theta[k]));
    free(theta);
    free(Z);
    return rc;
}

const nf_model_type nf_model_dependent = {
    .kind = "dependent",
    .summary = "a flow fit by maximum likelihood to dependent rows (latents correlated across rows)",
    .command = "nf fit --dependence",
    .source_kind = "rows",
    .metric = "log_likelihood",
    .loss = dependent_loss,
    .eval = dependent_eval,
    .init_data = dependent_init_data,
    .before_step = dependent_before_step,
    .train_end = dependent_train_end,
    .set_training = dependent_set_training,
    .save = dependent_save,
    .load = dependent_load,
    .destroy = dependent_destroy,
};
