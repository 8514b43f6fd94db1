/* datasets/teacher.c - a fixed random normalizing flow in D dimensions as a data source.
 *
 * A "teacher" is an nf flow whose density is exact and far from N(0, I): a student flow fitted to
 * its samples can be scored against the true log-density.  From (flow, dim, model_seed):
 *   spec  = nf_preset_expand(flow, {layers 4, hidden 16, blocks 2})  (or flow itself if it is a spec)
 *   flow  = nf_flow_create(spec, D, 0, model_seed), evaluation mode
 *   theta = theta_init + 0.15 * N(0, I)      (seeded by model_seed; presets start near the
 *                                            identity, the perturbation bends every layer; masked
 *                                            weights stay zero, see perturb())
 * Samples and their exact log-densities come from nf_flow_sample (latent to data, with the
 * log-determinant of the inverse pass; autoregressive layers inverted sequentially, i.e. exactly),
 * in batches of 4096, converted to double; log_prob uses nf_flow_log_prob.  In the float build
 * the log-densities carry float rounding (about 1e-6).
 */
#include <stdlib.h>
#include <string.h>

#include "datasets/dataset.h"
#include "flows/flow.h"

#define TEACHER_BATCH 4096
#define TEACHER_PERTURB 0.15

typedef struct teacher_state {
    nf_flow *flow;
    nf_real *xb, *lb; /* (TEACHER_BATCH, D), (TEACHER_BATCH) */
} teacher_state;

static void teacher_destroy(nf_dataset *ds)
{
    teacher_state *s = ds->state;
    if (!s) return;
    nf_flow_free(s->flow);
    free(s->xb);
    free(s->lb);
    free(s);
    ds->state = NULL;
}

/* Add TEACHER_PERTURB * N(0, 1) to every parameter that can move.  Entries that must stay zero
 * (MADE's masked weights) get no gradient, so we perturb, in rounds, only entries whose gradient on
 * a random probe (x ~ N(0, 1.5^2 I), dL/dlogp ~ N(0, 1)) is nonzero: the first round reaches the
 * output layers that start at zero, the next ones the layers behind them.  Each entry moves once.
 * xb, lb: scratch of TEACHER_BATCH rows. */
static int perturb(nf_flow *f, uint64_t seed, nf_real *xb, nf_real *lb)
{
    enum { PROBE = 256, ROUNDS = 4 };
    nf_params *P = f->P;
    unsigned char *moved = nf_calloc(P->n, 1, "teacher perturbation flags");
    nf_real *dl = nf_calloc(PROBE, sizeof *dl, "teacher probe");
    nf_rng *r = nf_rng_alloc(seed, 0x7eac);
    int rc = moved && dl && r ? NF_OK : NF_ENOMEM;
    for (int round = 0; round < ROUNDS && rc == NF_OK; round++) {
        for (int i = 0; i < PROBE * f->dim; i++) xb[i] = (nf_real)(1.5 * nf_rng_normal(r));
        for (int i = 0; i < PROBE; i++) dl[i] = (nf_real)nf_rng_normal(r);
        nf_params_zero_grad(P);
        rc = nf_flow_log_prob(f, lb, xb, NULL, NULL, PROBE);
        if (rc == NF_OK) rc = nf_flow_backward(f, dl, NULL, NULL);
        for (size_t i = 0; i < P->n && rc == NF_OK; i++)
            if (!moved[i] && P->grad[i] != 0) {
                P->value[i] += (nf_real)(TEACHER_PERTURB * nf_rng_normal(r));
                moved[i] = 1;
            }
    }
    nf_params_zero_grad(P);
    free(moved);
    free(dl);
    nf_rng_free(r);
    return rc;
}

static int teacher_create(nf_dataset *ds)
{
    teacher_state *s = nf_calloc(1, sizeof *s, "teacher data set");
    if (!s) return NF_ENOMEM;
    ds->state = s;
    char spec[8192];
    const char *name = ds->opts.flow;
    if (nf_preset_is(name)) {
        nf_preset_knobs k = {.layers = 4, .hidden = 16, .blocks = 2};
        NF_TRY(nf_preset_expand(name, &k, spec, sizeof spec));
    } else {
        if (strlen(name) >= sizeof spec) return nf_error(NF_EINVAL, "teacher: flow spec too long");
        strcpy(spec, name);
    }
    int rc = nf_flow_create(&s->flow, spec, ds->dim, 0, ds->opts.model_seed);
    if (rc != NF_OK) return nf_error_context(rc, "teacher flow '%s' in %d dimensions", name, ds->dim);
    nf_flow_set_training(s->flow, 0);
    nf_flow_set_invert(s->flow, NF_INVERT_SEQUENTIAL, 0, 0); /* exact samples, not Jacobi's tolerance */
    s->xb = nf_calloc((size_t)TEACHER_BATCH * ds->dim, sizeof *s->xb, "teacher batch");
    s->lb = nf_calloc(TEACHER_BATCH, sizeof *s->lb, "teacher batch");
    if (!s->xb || !s->lb) return NF_ENOMEM;
    return perturb(s->flow, ds->opts.model_seed, s->xb, s->lb);
}

static int teacher_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    teacher_state *s = ds->state;
    size_t D = (size_t)ds->dim;
    for (size_t at = 0; at < n; at += TEACHER_BATCH) {
        int m = (int)(n - at < TEACHER_BATCH ? n - at : TEACHER_BATCH);
        NF_TRY(nf_flow_sample(s->flow, s->xb, s->lb, NULL, m, rng));
        for (size_t i = 0; i < (size_t)m * D; i++) x[at * D + i] = s->xb[i];
        if (logp)
            for (int i = 0; i < m; i++) logp[at + (size_t)i] = s->lb[i];
    }
    return NF_OK;
}

static int teacher_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    teacher_state *s = ds->state;
    size_t D = (size_t)ds->dim;
    for (size_t at = 0; at < n; at += TEACHER_BATCH) {
        int m = (int)(n - at < TEACHER_BATCH ? n - at : TEACHER_BATCH);
        for (size_t i = 0; i < (size_t)m * D; i++) s->xb[i] = (nf_real)x[at * D + i];
        NF_TRY(nf_flow_log_prob(s->flow, s->lb, s->xb, NULL, NULL, m));
        for (int i = 0; i < m; i++) logp[at + (size_t)i] = s->lb[i];
    }
    return NF_OK;
}

const nf_dataset_type nf_dataset_teacher = {
    .name = "teacher",
    .summary = "a fixed random flow (--flow preset, default maf) in --dim D, from --model-seed",
    .dim = 0,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: log-density of the teacher flow (change of variables through nf_flow_sample)",
    .sample_gives_logp = 1,
    .create = teacher_create,
    .destroy = teacher_destroy,
    .sample = teacher_sample,
    .log_prob = teacher_log_prob,
};
