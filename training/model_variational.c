/* training/model_variational.c - the "variational" kind: a flow q fit to an unnormalised target p~
 * by reverse KL, without data.
 *
 * With x_i = T(z_i), z_i ~ base (reparameterised: the draw moves with the parameters),
 *     L = (1/n) sum_i [log q(x_i) - log p~(x_i)]  =  KL(q || p) - log Z  (in expectation) = -ELBO.
 * Gradient: dL/dx_i = -(1/n) grad log p~(x_i) and dL/dlog q(x_i) = 1/n, handed to
 * nf_flow_sample_backward, which takes them back through every inverse and the base.
 * The per-item metric is the log importance weight log w_i = log p~(x_i) - log q(x_i): its mean is
 * the ELBO, logsumexp(log w) - log n estimates log Z (from below), and (sum w)^2 / sum w^2 is the
 * effective sample size.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributions/target.h"
#include "training/model.h"

typedef struct {
    nf_target *target;
    int cap;
    nf_real *x, *logq, *dx, *dlogq;   /* (cap, dim), (cap), (cap, dim), (cap) */
    double *xd, *logp, *grad;         /* (cap, dim), (cap), (cap, dim) double copies for the target */
} vi_state;

static void vi_free_buffers(vi_state *st)
{
    free(st->x), free(st->logq), free(st->dx), free(st->dlogq), free(st->xd), free(st->logp), free(st->grad);
    st->x = st->logq = st->dx = st->dlogq = NULL;
    st->xd = st->logp = st->grad = NULL;
    st->cap = 0;
}

static void vi_destroy(nf_model *m)
{
    vi_state *st = m->state;
    if (st) {
        vi_free_buffers(st);
        nf_target_free(st->target);
        free(st);
    }
    nf_flow_free(m->flow);
    m->flow = NULL;
    m->P = m->S = NULL;
    m->state = NULL;
}

static int vi_reserve(nf_model *m, int n)
{
    vi_state *st = m->state;
    if (n <= st->cap) return NF_OK;
    vi_free_buffers(st);
    size_t nd = (size_t)n * m->flow->dim;
    st->x = malloc(nd * sizeof *st->x);
    st->dx = malloc(nd * sizeof *st->dx);
    st->logq = malloc((size_t)n * sizeof *st->logq);
    st->dlogq = malloc((size_t)n * sizeof *st->dlogq);
    st->xd = malloc(nd * sizeof *st->xd);
    st->grad = malloc(nd * sizeof *st->grad);
    st->logp = malloc((size_t)n * sizeof *st->logp);
    if (!st->x || !st->dx || !st->logq || !st->dlogq || !st->xd || !st->grad || !st->logp) {
        vi_free_buffers(st);
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d draws", n);
    }
    st->cap = n;
    return NF_OK;
}

/* Draw n points from q and evaluate the target there (with its gradient when want_grad). */
static int vi_draw(nf_model *m, int n, nf_rng *rng, int want_grad)
{
    vi_state *st = m->state;
    if (!rng) return nf_error(NF_EINVAL, "a variational model needs a random stream to draw from q");
    NF_TRY(vi_reserve(m, n));
    NF_TRY(nf_flow_sample(m->flow, st->x, st->logq, NULL, n, rng));
    size_t nd = (size_t)n * m->flow->dim;
    for (size_t k = 0; k < nd; k++) st->xd[k] = st->x[k];
    return nf_target_log_prob(st->target, (size_t)n, st->xd, st->logp, want_grad ? st->grad : NULL);
}

static int vi_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    vi_state *st = m->state;
    const int n = b->n, D = m->flow->dim;
    NF_TRY(vi_draw(m, n, rng, 1));
    double s = 0;
    for (int i = 0; i < n; i++) {
        double li = (double)st->logq[i] - st->logp[i];
        if (!isfinite(li))
            return nf_error(NF_ENONFINITE, "log q - log p~ of draw %d is %g (the flow put mass where the target has "
                                           "none, or overflowed)", i, li);
        s += li;
        st->dlogq[i] = (nf_real)(1.0 / n);
    }
    for (size_t k = 0; k < (size_t)n * D; k++) st->dx[k] = (nf_real)(-st->grad[k] / n);
    *loss = s / n;
    return nf_flow_sample_backward(m->flow, st->dx, st->dlogq, NULL);
}

static int vi_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    vi_state *st = m->state;
    NF_TRY(vi_draw(m, b->n, rng, 0));
    for (int i = 0; i < b->n; i++) values[i] = st->logp[i] - (double)st->logq[i];
    return NF_OK;
}

static void vi_set_training(nf_model *m, int training) { nf_flow_set_training(m->flow, training); }

static int vi_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const vi_state *st = m->state;
    char path[256];
    snprintf(path, sizeof path, "%s/flow", group);
    NF_TRY(nf_model_flow_save(m->flow, f, path));
    snprintf(path, sizeof path, "%s/target", group);
    NF_TRY(nf_h5_group(f, path));
    NF_TRY(nf_h5_attr_set_string(f, path, "name", st->target->type->name));
    NF_TRY(nf_h5_attr_set_string(f, path, "options", st->target->options));
    NF_TRY(nf_h5_attr_set_int64(f, path, "dim", st->target->dim));
    return nf_h5_attr_set_double(f, path, "log_z", st->target->log_z);
}

static int vi_attach(nf_model *m, nf_flow *flow, nf_target *target)
{
    if (flow->dim != target->dim) {
        nf_target_free(target);
        return nf_error(NF_EINVAL, "the flow has dimension %d but target %s has %d", flow->dim, target->type->name,
                        target->dim);
    }
    if (flow->ctx_dim) {
        nf_target_free(target);
        return nf_error(NF_EINVAL, "a variational flow takes no context (the flow has context width %d)", flow->ctx_dim);
    }
    vi_state *st = nf_calloc(1, sizeof *st, "model");
    if (!st) {
        nf_target_free(target);
        return NF_ENOMEM;
    }
    st->target = target;
    m->state = st;
    m->flow = flow;
    m->P = flow->P;
    m->S = flow->S;
    return NF_OK;
}

static int vi_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    char path[256], name[64], options[256];
    snprintf(path, sizeof path, "%s/target", group);
    NF_TRY(nf_h5_attr_get_string(f, path, "name", name, sizeof name));
    NF_TRY(nf_h5_attr_get_string(f, path, "options", options, sizeof options));
    nf_target *target;
    NF_TRY(nf_target_create(&target, name, options));
    nf_flow *flow = NULL;
    snprintf(path, sizeof path, "%s/flow", group);
    int rc = nf_model_flow_load(&flow, f, path, NULL, NULL);
    if (rc != NF_OK) {
        nf_target_free(target);
        return rc;
    }
    rc = vi_attach(m, flow, target);
    if (rc != NF_OK) nf_flow_free(flow);
    return rc;
}

const nf_model_type nf_model_variational = {
    .kind = "variational",
    .summary = "a flow fit to an unnormalised target density by reverse KL (no data)",
    .command = "nf fit --target",
    .source_kind = NULL,
    .metric = "elbo",
    .loss = vi_loss,
    .eval = vi_eval,
    .init_data = NULL,
    .set_training = vi_set_training,
    .save = vi_save,
    .load = vi_load,
    .destroy = vi_destroy,
};

int nf_model_variational_create(nf_model **out, const char *spec, const char *target_name,
                                const char *target_options, uint64_t seed)
{
    *out = NULL;
    nf_target *target;
    NF_TRY(nf_target_create(&target, target_name, target_options ? target_options : ""));
    nf_flow *flow;
    int rc = nf_flow_create(&flow, spec, target->dim, 0, seed);
    if (rc != NF_OK) {
        nf_target_free(target);
        return rc;
    }
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) {
        nf_flow_free(flow);
        nf_target_free(target);
        return NF_ENOMEM;
    }
    m->type = &nf_model_variational;
    rc = vi_attach(m, flow, target);
    if (rc != NF_OK) {
        nf_flow_free(flow);
        free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

const nf_target *nf_model_variational_target(const nf_model *m)
{
    if (!m || m->type != &nf_model_variational) return NULL;
    return ((const vi_state *)m->state)->target;
}

int nf_model_variational_report(nf_model *m, size_t n, int batch, nf_rng *rng, nf_vi_report *r)
{
    if (m->type != &nf_model_variational) return nf_error(NF_EINVAL, "not a variational model");
    if (n < 2) return nf_error(NF_EINVAL, "%zu draws (expected at least 2)", n);
    double *w = malloc(n * sizeof *w);
    if (!w) return nf_error(NF_ENOMEM, "out of memory for %zu importance weights", n);
    memset(r, 0, sizeof *r);
    int rc = nf_model_evaluate(m, NULL, n, batch, rng, &r->elbo, &r->elbo_stderr, w);
    if (rc == NF_OK) {
        double mx = -INFINITY;
        for (size_t i = 0; i < n; i++) mx = fmax(mx, w[i]);
        double s1 = 0, s2 = 0;   /* sum e^{w - mx}, sum e^{2 (w - mx)} */
        for (size_t i = 0; i < n; i++) {
            double e = exp(w[i] - mx);
            s1 += e;
            s2 += e * e;
        }
        r->log_z = mx + log(s1) - log((double)n);
        r->ess_frac = s1 * s1 / s2 / (double)n;
        r->n = n;
        r->log_z_true = nf_model_variational_target(m)->log_z;
    }
    free(w);
    return rc;
}
