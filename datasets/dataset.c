/* datasets/dataset.c - the registry of built-in data sets, instances, entropy estimates and splits. */
#include "datasets/dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const nf_dataset_type *const nf_dataset_types[] = {
    &nf_dataset_moons,     &nf_dataset_circles,      &nf_dataset_rings,     &nf_dataset_8gaussians,
    &nf_dataset_pinwheel,  &nf_dataset_2spirals,     &nf_dataset_checkerboard, &nf_dataset_swissroll,
    &nf_dataset_crescent,  &nf_dataset_sinewave,     &nf_dataset_gmm,       &nf_dataset_teacher,
    NULL,
};

const nf_dataset_type *nf_dataset_type_find(const char *name)
{
    if (name)
        for (int i = 0; nf_dataset_types[i]; i++)
            if (strcmp(nf_dataset_types[i]->name, name) == 0) return nf_dataset_types[i];
    char known[512] = "";
    size_t at = 0;
    for (int i = 0; nf_dataset_types[i] && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", nf_dataset_types[i]->name);
    nf_error(NF_EINVAL, "unknown data set '%s': expected one of %s", name ? name : "(null)", known);
    return NULL;
}

void nf_dataset_opts_default(nf_dataset_opts *o)
{
    o->dim = NF_DATASET_DEFAULT_DIM;
    o->components = NF_DATASET_DEFAULT_COMPONENTS;
    o->model_seed = NF_DATASET_DEFAULT_MODEL_SEED;
    o->flow = NF_DATASET_DEFAULT_FLOW;
}

int nf_dataset_alloc(nf_dataset **out, const char *name, const nf_dataset_opts *o)
{
    if (!out) return nf_error(NF_EINVAL, "nf_dataset_alloc: output pointer must not be NULL");
    *out = NULL;
    const nf_dataset_type *t = nf_dataset_type_find(name);
    if (!t) return NF_EINVAL;
    nf_dataset_opts def;
    nf_dataset_opts_default(&def);
    if (!o) o = &def;
    if (!t->dim && (o->dim < 1 || o->dim > 1024))
        return nf_error(NF_EINVAL, "data set %s: dimension %d, expected 1 to 1024", t->name, o->dim);
    if (t == &nf_dataset_gmm && (o->components < 1 || o->components > 1000))
        return nf_error(NF_EINVAL, "data set %s: %d components, expected 1 to 1000", t->name, o->components);
    const char *flow = o->flow ? o->flow : NF_DATASET_DEFAULT_FLOW;
    nf_dataset *ds = nf_calloc(1, sizeof *ds, "a data set");
    if (!ds) return NF_ENOMEM;
    if (strlen(flow) >= sizeof ds->flow_name) {
        free(ds);
        return nf_error(NF_EINVAL, "data set %s: flow name '%s' is too long", t->name, flow);
    }
    ds->type = t;
    ds->dim = t->dim ? t->dim : o->dim;
    ds->opts = *o;
    strcpy(ds->flow_name, flow);
    ds->opts.flow = ds->flow_name;
    if (t->create) {
        int rc = t->create(ds);
        if (rc != NF_OK) {
            nf_dataset_free(ds);
            return rc;
        }
    }
    *out = ds;
    return NF_OK;
}

void nf_dataset_free(nf_dataset *ds)
{
    if (!ds) return;
    if (ds->type->destroy) ds->type->destroy(ds);
    free(ds);
}

int nf_dataset_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    if (!ds || !rng || (!x && n)) return nf_error(NF_EINVAL, "nf_dataset_sample: NULL data set, rng or output");
    if (n == 0) return NF_OK;
    NF_TRY(ds->type->sample(ds, rng, n, x, logp));
    if (logp && !ds->type->sample_gives_logp) NF_TRY(nf_dataset_log_prob(ds, n, x, logp));
    return NF_OK;
}

int nf_dataset_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    if (!ds || (n && (!x || !logp))) return nf_error(NF_EINVAL, "nf_dataset_log_prob: NULL data set or array");
    if (!ds->type->log_prob || ds->type->density == NF_DENSITY_NONE)
        return nf_error(NF_EINVAL, "data set %s has no known density", ds->type->name);
    if (n == 0) return NF_OK;
    return ds->type->log_prob(ds, n, x, logp);
}

int nf_dataset_make(const char *name, const nf_dataset_opts *o, size_t n, nf_rng *rng, double *x, double *logp)
{
    nf_dataset *ds;
    NF_TRY(nf_dataset_alloc(&ds, name, o));
    int rc = nf_dataset_sample(ds, rng, n, x, logp);
    nf_dataset_free(ds);
    return rc;
}

/* H = -(1/n) sum logp_i, se = sd / sqrt(n) with the unbiased variance; two-pass, in double. */
int nf_entropy_from_logp(const double *logp, size_t n, double *H, double *se)
{
    if (n < 2) return nf_error(NF_EINVAL, "entropy estimate: %zu log-densities, expected at least 2", n);
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(logp[i]))
            return nf_error(NF_ENONFINITE, "entropy estimate: log-density %zu is %g, expected a finite value", i,
                            logp[i]);
        s += logp[i];
    }
    double mean = s / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) ss += (logp[i] - mean) * (logp[i] - mean);
    *H = -mean;
    *se = sqrt(ss / (double)(n - 1) / (double)n);
    return NF_OK;
}

int nf_dataset_entropy(nf_dataset *ds, nf_rng *rng, size_t n, double *H, double *se)
{
    if (n < 2) return nf_error(NF_EINVAL, "entropy estimate: sample of %zu points, expected at least 2", n);
    if (!ds || ds->type->density == NF_DENSITY_NONE)
        return nf_error(NF_EINVAL, "entropy estimate: data set %s has no known density", ds ? ds->type->name : "NULL");
    double *x = malloc(n * (size_t)ds->dim * sizeof *x), *lp = malloc(n * sizeof *lp);
    int rc = (x && lp) ? NF_OK : nf_error(NF_ENOMEM, "entropy estimate: out of memory for %zu points", n);
    if (rc == NF_OK) rc = nf_dataset_sample(ds, rng, n, x, lp);
    if (rc == NF_OK) rc = nf_entropy_from_logp(lp, n, H, se);
    free(x);
    free(lp);
    return rc;
}

int nf_dataset_split(size_t n, double val_frac, double test_frac, uint64_t seed, size_t *perm, size_t count[3])
{
    if (!(val_frac >= 0 && val_frac < 1) || !(test_frac >= 0 && test_frac < 1))
        return nf_error(NF_EINVAL, "split: fractions val=%g test=%g, expected each in [0, 1)", val_frac, test_frac);
    size_t nv = (size_t)llround((double)n * val_frac), nt = (size_t)llround((double)n * test_frac);
    if (nv + nt >= n)
        return nf_error(NF_EINVAL,
                        "split: %zu rows with val=%g and test=%g leave no training rows, expected smaller fractions",
                        n, val_frac, test_frac);
    nf_rng *r = nf_rng_alloc(seed, 0x5e11);
    if (!r) return NF_ENOMEM;
    nf_rng_permutation(r, perm, n);
    nf_rng_free(r);
    count[0] = n - nv - nt;
    count[1] = nv;
    count[2] = nt;
    return NF_OK;
}
