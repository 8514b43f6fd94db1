/* training/model.c - the model registry, evaluation over a source, and the "density" kind. */
#include "training/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const nf_model_type nf_model_tpp; /* training/model_tpp.h */
extern const nf_model_type nf_model_dependent; /* training/model_dependent.h */
extern const nf_model_type nf_model_causal;    /* training/model_causal.h */
extern const nf_model_type nf_model_image;     /* training/model_image.h */
extern const nf_model_type nf_model_video;     /* training/model_video.h */
const nf_model_type *const nf_model_types[] = {&nf_model_density, &nf_model_variational, &nf_model_tpp,
                                               &nf_model_dependent, &nf_model_causal, &nf_model_image,
                                               &nf_model_video, NULL};

enum { MAX_REGISTERED = 16 };
static const nf_model_type *registered[MAX_REGISTERED];
static int n_registered;

static const nf_model_type *find_kind(const char *kind)
{
    for (int i = 0; nf_model_types[i]; i++)
        if (!strcmp(nf_model_types[i]->kind, kind)) return nf_model_types[i];
    for (int i = 0; i < n_registered; i++)
        if (!strcmp(registered[i]->kind, kind)) return registered[i];
    return NULL;
}

int nf_model_type_register(const nf_model_type *t)
{
    if (!t || !t->kind || !t->loss || !t->eval || !t->save || !t->load || !t->destroy)
        return nf_error(NF_EINVAL, "a model kind needs a name and loss, eval, save, load and destroy");
    if (find_kind(t->kind)) return nf_error(NF_EINVAL, "model kind '%s' is already known", t->kind);
    if (t->n_stages > 1 && (!t->set_stage || !t->stage_names))
        return nf_error(NF_EINVAL, "model kind '%s' has %d stages but no set_stage or stage names", t->kind, t->n_stages);
    if (n_registered >= MAX_REGISTERED)
        return nf_error(NF_EINVAL, "too many model kinds registered (at most %d)", MAX_REGISTERED);
    registered[n_registered++] = t;
    return NF_OK;
}

int nf_model_stages(const nf_model *m) { return m->type->n_stages > 1 ? m->type->n_stages : 1; }

const char *nf_model_type_metric(const nf_model_type *t, int stage)
{
    if (t->stage_metrics && t->n_stages > 1 && stage >= 0 && stage < t->n_stages && t->stage_metrics[stage])
        return t->stage_metrics[stage];
    return t->metric;
}

const char *nf_model_metric(const nf_model *m) { return nf_model_type_metric(m->type, m->stage); }

const char *nf_model_stage_name(const nf_model *m, int k)
{
    return m->type->n_stages > 1 && k >= 0 && k < m->type->n_stages ? m->type->stage_names[k] : "";
}

int nf_model_set_stage(nf_model *m, int k)
{
    if (k < 0 || k >= nf_model_stages(m))
        return nf_error(NF_EINVAL, "stage %d of a %s model (it has %d)", k, m->type->kind, nf_model_stages(m));
    if (m->type->set_stage) NF_TRY(m->type->set_stage(m, k));
    m->stage = k;
    return NF_OK;
}

nf_params nf_model_trainable(const nf_model *m)
{
    if (m->train_count == 0) return nf_params_view(m->P, 0, m->P->n);
    return nf_params_view(m->P, m->train_first, m->train_count);
}

const nf_model_type *nf_model_type_find(const char *kind)
{
    const nf_model_type *t = find_kind(kind);
    if (t) return t;
    char names[256] = "";
    for (int i = 0; nf_model_types[i]; i++) {
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, nf_model_types[i]->kind, sizeof names - strlen(names) - 1);
    }
    nf_error(NF_EINVAL, "unknown model kind '%s' (this nf knows: %s; is the file from a newer nf?)", kind, names);
    return NULL;
}

void nf_model_free(nf_model *m)
{
    if (!m) return;
    if (m->type && m->type->destroy) m->type->destroy(m);
    free(m);
}

void nf_model_set_training(nf_model *m, int training)
{
    if (m->type->set_training) m->type->set_training(m, training);
}

int nf_model_evaluate(nf_model *m, const nf_source *src, size_t count, int batch, nf_rng *rng, double *mean,
                      double *stderr_mean, double *values)
{
    size_t n = src ? src->n : count;
    if (n == 0) return nf_error(NF_EDATA, "no items to evaluate (expected at least one)");
    if (batch < 1) batch = 1024;
    int b = (size_t)batch < n ? batch : (int)n;
    nf_batch bt = {0};
    double *v = values ? NULL : malloc((size_t)b * sizeof *v);
    size_t *idx = malloc((size_t)b * sizeof *idx);
    int rc = (values || v) && idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory evaluating");
    if (rc == NF_OK && !src) rc = nf_batch_reserve_rows(&bt, b, 0, 0);
    nf_model_set_training(m, 0);
    double s = 0, s2 = 0;
    for (size_t at = 0; rc == NF_OK && at < n; at += (size_t)b) {
        int k = (int)(n - at < (size_t)b ? n - at : (size_t)b);
        for (int i = 0; i < k; i++) idx[i] = at + i;
        if (src) {
            rc = nf_source_fetch(src, idx, k, &bt);
        } else {
            memcpy(bt.idx, idx, (size_t)k * sizeof *idx);
            bt.n = k;
        }
        double *out = values ? values + at : v;
        if (rc == NF_OK) rc = m->type->eval(m, &bt, rng, out);
        if (rc != NF_OK) rc = nf_error_context(rc, "items %zu to %zu", at, at + k - 1);
        for (int i = 0; rc == NF_OK && i < k; i++) {
            s += out[i];
            s2 += out[i] * out[i];
        }
    }
    free(v);
    free(idx);
    nf_batch_free(&bt);
    if (rc != NF_OK) return rc;
    *mean = s / n;
    double var = n > 1 ? (s2 - s * s / n) / (n - 1) : 0;
    if (stderr_mean) *stderr_mean = sqrt(var > 0 ? var / n : 0);
    return NF_OK;
}

/* ---- flows as model components ------------------------------------------------------------------ */

/* A component flow's configuration: spec, widths and construction seed, as attributes of `group`. */
int nf_model_flow_save(const nf_flow *f, nf_h5 *h, const char *group)
{
    NF_TRY(nf_h5_group(h, group));
    NF_TRY(nf_h5_attr_set_string(h, group, "spec", f->spec));
    NF_TRY(nf_h5_attr_set_int64(h, group, "dim", f->dim));
    NF_TRY(nf_h5_attr_set_int64(h, group, "ctx_dim", f->ctx_dim));
    NF_TRY(nf_h5_attr_set_int64(h, group, "seed", (int64_t)f->seed));
    return nf_h5_attr_set_string(h, group, "prefix", f->prefix);
}

int nf_model_flow_load(nf_flow **out, nf_h5 *h, const char *group, nf_params *P, nf_params *S)
{
    char spec[1 << 16], prefix[32] = "";
    int64_t dim = 0, ctx_dim = 0, seed = 0;
    NF_TRY(nf_h5_attr_get_string(h, group, "spec", spec, sizeof spec));
    NF_TRY(nf_h5_attr_get_int64(h, group, "dim", &dim));
    NF_TRY(nf_h5_attr_get_int64(h, group, "ctx_dim", &ctx_dim));
    NF_TRY(nf_h5_attr_get_int64(h, group, "seed", &seed));
    if (nf_h5_attr_exists(h, group, "prefix")) NF_TRY(nf_h5_attr_get_string(h, group, "prefix", prefix, sizeof prefix));
    if (dim < 1 || dim > (1 << 24) || ctx_dim < 0 || ctx_dim > (1 << 24))
        return nf_error(NF_EFORMAT, "%s:%s: dimensions %lld and %lld (expected 1..2^24 and 0..2^24)", nf_h5_path(h),
                        group, (long long)dim, (long long)ctx_dim);
    int rc = nf_flow_build(out, spec, (int)dim, (int)ctx_dim, (uint64_t)seed, P, S, prefix);
    if (rc != NF_OK) rc = nf_error_context(rc, "%s: cannot rebuild the flow of %s", nf_h5_path(h), group);
    return rc;
}

/* ---- "density" ---------------------------------------------------------------------------------- */

typedef struct {
    nf_real *logp;   /* (cap) evaluation buffer */
    int cap;
} density_state;

static void density_destroy(nf_model *m)
{
    density_state *st = m->state;
    if (st) free(st->logp);
    free(st);
    nf_flow_free(m->flow);   /* the flow owns the store */
    m->flow = NULL;
    m->P = m->S = NULL;
    m->state = NULL;
}

static int density_attach(nf_model *m, nf_flow *flow)
{
    m->flow = flow;
    m->P = flow->P;
    m->S = flow->S;
    m->ctx_dim = flow->ctx_dim;
    m->state = nf_calloc(1, sizeof(density_state), "model");
    return m->state ? NF_OK : NF_ENOMEM;
}

/* loss = -(1/n) sum_i log p(x_i | c_i); the flow accumulates the gradient. */
static int density_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    (void)rng;
    nf_flow *f = m->flow;
    return nf_flow_nll_step(f, b->x, f->ctx_dim ? b->ctx : NULL, b->idx, b->n, loss);
}

static int density_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    density_state *st = m->state;
    nf_flow *f = m->flow;
    if (b->n > st->cap) {
        nf_real *p = realloc(st->logp, (size_t)b->n * sizeof *p);
        if (!p) return nf_error(NF_ENOMEM, "out of memory evaluating a batch of %d", b->n);
        st->logp = p;
        st->cap = b->n;
    }
    NF_TRY(nf_flow_log_prob(f, st->logp, b->x, f->ctx_dim ? b->ctx : NULL, b->idx, b->n));
    for (int i = 0; i < b->n; i++) values[i] = st->logp[i];
    return NF_OK;
}

/* Data-dependent layers (standardize, ActNorm) see at most the first 100,000 training rows. */
static int density_init_data(nf_model *m, const nf_source *train)
{
    int n = (int)(train->n < 100000 ? train->n : 100000);
    nf_rows r = nf_source_rows(train);
    if (r.x) return nf_flow_init_data(m->flow, r.x, m->flow->ctx_dim ? r.ctx : NULL, n);
    /* rows that are not in memory (read from the file, or an index view): fetch the first n */
    int D = train->dim, C = m->flow->ctx_dim;
    nf_real *x = malloc((size_t)n * D * sizeof *x), *c = C ? malloc((size_t)n * C * sizeof *c) : NULL;
    size_t *idx = malloc(4096 * sizeof *idx);
    nf_batch b = {0};
    int rc = x && idx && (!C || c) ? NF_OK : nf_error(NF_ENOMEM, "out of memory initialising from %d rows", n);
    for (int at = 0; rc == NF_OK && at < n; at += 4096) {
        int k = n - at < 4096 ? n - at : 4096;
        for (int i = 0; i < k; i++) idx[i] = (size_t)(at + i);
        rc = nf_source_fetch(train, idx, k, &b);
        if (rc == NF_OK) memcpy(x + (size_t)at * D, b.x, (size_t)k * D * sizeof *x);
        if (rc == NF_OK && C) memcpy(c + (size_t)at * C, b.ctx, (size_t)k * C * sizeof *c);
    }
    if (rc == NF_OK) rc = nf_flow_init_data(m->flow, x, c, n);
    nf_batch_free(&b);
    free(x), free(c), free(idx);
    return rc;
}

static void density_set_training(nf_model *m, int training) { nf_flow_set_training(m->flow, training); }

static int density_save(const nf_model *m, nf_h5 *f, const char *group)
{
    char path[256];
    snprintf(path, sizeof path, "%s/flow", group);
    return nf_model_flow_save(m->flow, f, path);
}

static int density_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    char path[256];
    snprintf(path, sizeof path, "%s/flow", group);
    nf_flow *flow = NULL;
    /* version 1 kept the flow's attributes on the model group itself */
    NF_TRY(nf_model_flow_load(&flow, f, version < 2 ? group : path, NULL, NULL));
    int rc = density_attach(m, flow);
    if (rc != NF_OK) nf_flow_free(flow);
    return rc;
}

const nf_model_type nf_model_density = {
    .kind = "density",
    .summary = "a flow fit by maximum likelihood to samples (optionally conditioned on a context)",
    .command = "nf fit",
    .source_kind = "rows",
    .metric = "log_likelihood",
    .loss = density_loss,
    .eval = density_eval,
    .init_data = density_init_data,
    .set_training = density_set_training,
    .save = density_save,
    .load = density_load,
    .destroy = density_destroy,
};

int nf_model_density_wrap(nf_model **out, nf_flow *flow)
{
    *out = NULL;
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) return NF_ENOMEM;
    m->type = &nf_model_density;
    int rc = density_attach(m, flow);
    if (rc != NF_OK) {
        free(m->state);
        free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

int nf_model_density_create(nf_model **out, const char *spec, int dim, int ctx_dim, uint64_t seed)
{
    *out = NULL;
    nf_flow *flow;
    NF_TRY(nf_flow_create(&flow, spec, dim, ctx_dim, seed));
    int rc = nf_model_density_wrap(out, flow);
    if (rc != NF_OK) nf_flow_free(flow);
    return rc;
}
