/* tests/check_causal.c - the "causal" model kind (training/model_causal.h): finite-difference
 * gradients of the whole nuisance loss (outcome NLL through the spline flow, its context, the
 * representation, plus the propensity cross-entropy) and of the target loss with CE alone and with
 * CE + BC; the per-unit metric averages to the loss; the two stages train different entries; a
 * model file round-trips; trained on causal-poly the target flow approaches the true
 * interventional densities. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/causal.h"
#include "training/model_causal.h"
#include "training/model_file.h"
#include "training/trainer.h"
#include "tests/testutil.h"

static void register_kind(void)
{
    if (!nf_model_type_find("causal")) ck_assert_int_eq(nf_model_type_register(&nf_model_causal), NF_OK);
    nf_error_clear();
}

static nf_source *poly_source(size_t n, double b, uint64_t seed, nf_causal_data *d)
{
    ck_assert_int_eq(nf_causal_make(d, "causal-poly", n, b, seed), NF_OK);
    nf_source *s;
    ck_assert_msg(nf_causal_source(&s, d) == NF_OK, "%s", nf_strerror_last());
    return s;
}

static void small_config(nf_causal_config *c)
{
    nf_causal_config_init(c);
    c->repr = 5;
    c->hidden = 6;
    c->bins = 5;
    c->grid = 17;
    c->clip = 0.1;
    c->seed = 11;
}

/* Relative error between the stage's analytic gradient and central differences over up to
 * `count` entries spread over the stage's slice of P. */
static const char *slice_name(const nf_params *P, size_t k)
{
    for (size_t q = 0; q < P->nslices; q++)
        if (k >= P->slices[q].offset && k < P->slices[q].offset + P->slices[q].size) return P->slices[q].name;
    return "";
}

/* ... over the entries whose slice name begins with `prefix` ("" for all); errors relative to the
 * larger of the two gradients or `floor`. */
static double gradient_error(nf_model *m, const nf_batch *b, const unsigned char *mask, const char *prefix, int count,
                             double floor, int *checked)
{
    nf_params v = nf_model_trainable(m);
    size_t first = m->train_first, len = v.n;
    nf_params_zero_grad(m->P);
    double loss;
    ck_assert_msg(m->type->loss(m, b, NULL, &loss) == NF_OK, "%s", nf_strerror_last());
    nf_real *grad = malloc(m->P->n * sizeof *grad); /* the losses below add to P->grad */
    memcpy(grad, m->P->grad, m->P->n * sizeof *grad);
    double worst = 0;
#ifdef NF_DOUBLE
    const double eps = 1e-6;
#else
    const double eps = 2e-3;
#endif
    *checked = 0;
    size_t step = len / (size_t)count ? len / (size_t)count : 1;
    for (size_t k = first; k < first + len; k += step) {
        if (mask[k] || strncmp(slice_name(m->P, k), prefix, strlen(prefix))) continue;
        nf_real keep = m->P->value[k];
        double lp, lm;
        m->P->value[k] = (nf_real)(keep + eps);
        ck_assert_int_eq(m->type->loss(m, b, NULL, &lp), NF_OK);
        m->P->value[k] = (nf_real)(keep - eps);
        ck_assert_int_eq(m->type->loss(m, b, NULL, &lm), NF_OK);
        m->P->value[k] = keep;
        double fd = (lp - lm) / (2 * eps), an = grad[k];
        double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), floor);
        if (err > 1e-3 && getenv("NF_CAUSAL_DEBUG")) fprintf(stderr, "%s: fd %g analytic %g\n", slice_name(m->P, k), fd, an);
        if (err > worst) worst = err;
        (*checked)++;
    }
    /* no gradient leaves the stage's slice */
    for (size_t k = 0; k < m->P->n; k++)
        if (k < first || k >= first + len) ck_assert_msg(grad[k] == 0, "gradient outside the stage at %zu", k);
    free(grad);
    return worst;
}

/* Entries a MADE masks: zero and without gradient at the unperturbed model (its forward does not
 * multiply by the mask, so they must stay zero).  Found from one loss at the current point. */
static unsigned char *masked_entries(nf_model *m, const nf_batch *b)
{
    unsigned char *mask = calloc(m->P->n, 1);
    double loss;
    nf_params_zero_grad(m->P);
    ck_assert_int_eq(m->type->loss(m, b, NULL, &loss), NF_OK);
    for (size_t k = 0; k < m->P->n; k++) mask[k] = m->P->value[k] == 0 && m->P->grad[k] == 0;
    return mask;
}

static void perturb(nf_model *m, const unsigned char *mask, uint64_t seed, double scale)
{
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t k = 0; k < m->P->n; k++) {
        double e = scale * nf_rng_normal(r);
        if (!mask[k]) m->P->value[k] += (nf_real)e;
    }
    nf_rng_free(r);
}

static nf_batch fetch_all(const nf_source *s)
{
    nf_batch b = {0};
    size_t *idx = malloc(s->n * sizeof *idx);
    for (size_t i = 0; i < s->n; i++) idx[i] = i;
    ck_assert_int_eq(nf_source_fetch(s, idx, (int)s->n, &b), NF_OK);
    free(idx);
    return b;
}

#ifdef NF_DOUBLE
#define GRAD_TOL 1e-5
#else
#define GRAD_TOL 0.1
#endif

/* --linear-shift: each arm's shift is its least-squares slope, computed here from the units (in the
 * original units; the model's ridge of 1e-3 per unit on the standardised covariates shrinks it by
 * about 0.2%), and near the truth's: 2.18 for Y[0] = 1.5 + 2.18 X + e, -1.82 for Y[1] = 2 - 1.82 X +
 * X^2 + e with X ~ N(0, 1) (standard errors at 2,000 units an arm 0.02 and 0.07: X^2 is
 * heteroscedastic noise about the line).  Without the option there is no shift. */
START_TEST(linear_shift_is_each_arms_least_squares_slope)
{
    nf_causal_data d;
    nf_source *s = poly_source(4000, 2.0, 9, &d);
    nf_causal_config c;
    small_config(&c);
    for (int on = 0; on < 2; on++) {
        c.shift = on;
        nf_model *m;
        ck_assert_msg(nf_model_causal_create(&m, &c, s) == NF_OK, "%s", nf_strerror_last());
        const nf_param_slice *B = nf_params_find(m->S, "stats.shift");
        if (!on) {
            ck_assert_ptr_null(B);
        } else {
            ck_assert_ptr_nonnull(B);
            ck_assert_uint_eq(B->size, 2);
            const nf_real *S = m->S->value;
            double sx = S[nf_params_find(m->S, "stats.x_scale")->offset];
            double sy = S[nf_params_find(m->S, "stats.y_scale")->offset];
            for (int a = 0; a < 2; a++) {
                double n = 0, mx = 0, my = 0, sxy = 0, sxx = 0;
                for (size_t i = 0; i < d.n; i++)
                    if (d.a[i] == a) n++, mx += d.x[i], my += d.y[i];
                mx /= n, my /= n;
                for (size_t i = 0; i < d.n; i++)
                    if (d.a[i] == a) sxy += (d.x[i] - mx) * (d.y[i] - my), sxx += (d.x[i] - mx) * (d.x[i] - mx);
                double ols = sxy / sxx, slope = S[B->offset + (size_t)a] * sy / sx, truth = a ? -1.82 : 2.18;
                ck_assert_msg(fabs(slope - ols) < 0.005 * fabs(ols) && fabs(ols - truth) < 0.3,
                              "arm %d: slope %g, least squares %g, truth %g", a, slope, ols, truth);
            }
        }
        nf_model_free(m);
    }
    nf_source_free(s);
    nf_causal_data_free(&d);
}
END_TEST

static nf_source *moons_source(size_t n, uint64_t seed, nf_causal_data *d)
{
    ck_assert_int_eq(nf_causal_make(d, "causal-moons", n, 0, seed), NF_OK);
    nf_source *s;
    ck_assert_msg(nf_causal_source(&s, d) == NF_OK, "%s", nf_strerror_last());
    return s;
}

/* _i = 0: the nuisance as specified; 1: with the linear shift of the outcome (--linear-shift); 2: the
 * shift on a 2-D outcome. */
START_TEST(nuisance_loss_gradient)
{
    nf_causal_data d;
    nf_source *s = _i == 2 ? moons_source(14, 5, &d) : poly_source(14, 2.385, 5, &d);
    nf_causal_config c;
    small_config(&c);
    c.shift = _i > 0;
    nf_model *m;
    ck_assert_msg(nf_model_causal_create(&m, &c, s) == NF_OK, "%s", nf_strerror_last());
    nf_batch b = fetch_all(s);
    nf_model_set_training(m, 1);
    double loss;
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK); /* actnorm's data initialisation */
    unsigned char *mask = masked_entries(m, &b);
    perturb(m, mask, 3, 0.2);
    int checked;
    double err = gradient_error(m, &b, mask, "", 400, 1e-3, &checked);
    ck_assert_msg(err < GRAD_TOL, "nuisance gradient: worst relative error %g over %d entries", err, checked);
    ck_assert_int_ge(checked, 100);
    free(mask);
    /* the per-unit metric averages to minus the loss (in evaluation mode: no noise either way here) */
    double *v = malloc(b.n * sizeof *v), mean = 0;
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK);
    ck_assert_int_eq(m->type->eval(m, &b, NULL, v), NF_OK);
    for (int i = 0; i < b.n; i++) mean += v[i] / b.n;
    ck_assert_msg(fabs(mean + loss) < 1e-4 * fmax(1, fabs(loss)), "metric mean %g, loss %g", mean, loss);
    free(v);
    nf_batch_free(&b);
    nf_model_free(m);
    nf_source_free(s);
    nf_causal_data_free(&d);
}
END_TEST

/* The target loss: the flows trained on CE alone (nobc*) and on CE + BC (target*), each checked
 * on its own entries; _i = 0 a 1-D outcome (the grid), 1 a 2-D one (the nuisance's draws). */
START_TEST(target_loss_gradient)
{
    nf_causal_data d;
    nf_source *s = _i ? moons_source(16, 8, &d) : poly_source(16, 2.0, 8, &d);
    nf_causal_config c;
    small_config(&c);
    c.draws = 5;
    nf_model *m;
    ck_assert_int_eq(nf_model_causal_create(&m, &c, s), NF_OK);
    nf_batch b = fetch_all(s);
    nf_model_set_training(m, 1);
    double loss;
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK);
    ck_assert_int_eq(nf_model_set_stage(m, 1), NF_OK);
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK); /* the target flows' actnorm */
    unsigned char *mask = masked_entries(m, &b);
    perturb(m, mask, 4, 0.2);
    const char *prefixes[] = {"nobc", "target"};
    for (int k = 0; k < 2; k++) {
        int checked;
        double err = gradient_error(m, &b, mask, prefixes[k], 300, 1e-3, &checked);
        ck_assert_msg(err < GRAD_TOL, "%s gradient: worst relative error %g over %d entries", prefixes[k], err, checked);
        ck_assert_int_ge(checked, 50);
    }
    free(mask);
    nf_batch_free(&b);
    nf_model_free(m);
    nf_source_free(s);
    nf_causal_data_free(&d);
}
END_TEST

/* Both stages by the one trainer on causal-poly; the held-out log-density of the true potential
 * outcomes under the target flows comes near the truth's own, and the file round-trips. */
START_TEST(learns_poly_and_round_trips)
{
    register_kind();
    nf_causal_data d, test;
    nf_source *all = poly_source(1000, 2.0, 21, &d), *train, *val;
    ck_assert_int_eq(nf_causal_make(&test, "causal-poly", 2000, 2.0, 22), NF_OK);
    ck_assert_int_eq(nf_source_split(all, 0.2, 1, &val, &train), NF_OK);
    nf_causal_config c;
    nf_causal_config_init(&c);
    c.seed = 3;
    c.grid = 100;
    nf_model *m;
    ck_assert_int_eq(nf_model_causal_create(&m, &c, train), NF_OK);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.batch = 64;
    tc.max_steps = 1500;
    tc.eval_every = 100;
    tc.clip = 5;
    tc.optim.lr = 5e-3;
    nf_schedule_init(&tc.schedule, NF_SCHED_COSINE, 5e-3);
    tc.schedule.total = tc.max_steps;
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, train, val), NF_OK);
    ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(m->stage, 1);
    double *lp = malloc(test.n * sizeof *lp), gap[2], gap_plugin[2];
    for (int a = 0; a < 2; a++) {
        const double *y = a ? test.y1 : test.y0, *truth = a ? test.logp1 : test.logp0;
        double est = 0, tr = 0, pl = 0;
        ck_assert_int_eq(nf_causal_logp(m, NF_CAUSAL_TARGET, a, y, test.n, lp), NF_OK);
        for (size_t i = 0; i < test.n; i++) est += lp[i] / test.n, tr += truth[i] / test.n;
        ck_assert_int_eq(nf_causal_logp(m, NF_CAUSAL_PLUGIN, a, y, test.n, lp), NF_OK);
        for (size_t i = 0; i < test.n; i++) pl += lp[i] / test.n;
        gap[a] = tr - est, gap_plugin[a] = tr - pl;
        fprintf(stderr, "arm %d: truth %.4f target %.4f plug-in %.4f\n", a, tr, est, pl);
    }
    ck_assert_msg(fabs(gap[0]) < 0.15 && fabs(gap[1]) < 0.15, "gaps to the truth %g, %g", gap[0], gap[1]);
    (void)gap_plugin;
    /* file round trip: the same densities from the reopened model */
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_causal_model_%d.h5", (int)getpid());
    ck_assert_msg(nf_model_save(path, m, NULL, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *back;
    ck_assert_msg(nf_model_open(path, &back, NULL) == NF_OK, "%s", nf_strerror_last());
    double y[3] = {-1.25, 2.385, 7.5}, p1[3], p2[3];
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(nf_causal_logp(m, NF_CAUSAL_TARGET, a, y, 3, p1), NF_OK);
        ck_assert_int_eq(nf_causal_logp(back, NF_CAUSAL_TARGET, a, y, 3, p2), NF_OK);
        for (int i = 0; i < 3; i++) ck_assert_msg(p1[i] == p2[i], "arm %d y %g: %g then %g", a, y[i], p1[i], p2[i]);
    }
    unlink(path);
    free(lp);
    nf_model_free(back);
    nf_trainer_free(t);
    nf_model_free(m);
    nf_source_free(train);
    nf_source_free(val);
    nf_source_free(all);
    nf_causal_data_free(&d);
    nf_causal_data_free(&test);
}
END_TEST

/* A 2-D outcome's stage 2 draws each unit's nuisance samples from a stream keyed by the unit's
 * index: a unit's target terms are the same, to the bit, whether it comes with all units in order or
 * in a smaller batch in another order, in a fresh model (an empty cache) - what keeps a resumed or
 * parallel run on the same draws.  Other draws (another unit's stream) give other terms. */
START_TEST(draws_do_not_depend_on_the_batch)
{
    nf_causal_data d;
    nf_source *s = moons_source(24, 3, &d);
    nf_causal_config c;
    small_config(&c);
    c.draws = 7;
    nf_model *m[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(nf_model_causal_create(&m[k], &c, s) == NF_OK, "%s", nf_strerror_last());
        ck_assert_int_eq(nf_model_set_stage(m[k], 1), NF_OK);
        nf_model_set_training(m[k], 0);
    }
    nf_batch all = fetch_all(s), some = {0};
    size_t idx[5] = {17, 3, 22, 9, 0};
    ck_assert_int_eq(nf_source_fetch(s, idx, 5, &some), NF_OK);
    double va[24], vs[5];
    ck_assert_msg(m[0]->type->eval(m[0], &all, NULL, va) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(m[1]->type->eval(m[1], &some, NULL, vs), NF_OK);
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(isfinite(vs[i]), "unit %zu: %g", idx[i], vs[i]);
        ck_assert_msg(vs[i] == va[idx[i]], "unit %zu: %.17g in the whole batch, %.17g in a small one", idx[i],
                      va[idx[i]], vs[i]);
    }
    /* the same units under other indices draw other samples */
    for (int i = 0; i < 5; i++) some.idx[i] = idx[(i + 1) % 5];
    nf_model *fresh;
    ck_assert_int_eq(nf_model_causal_create(&fresh, &c, s), NF_OK);
    ck_assert_int_eq(nf_model_set_stage(fresh, 1), NF_OK);
    nf_model_set_training(fresh, 0);
    ck_assert_int_eq(fresh->type->eval(fresh, &some, NULL, vs), NF_OK);
    int differ = 0;
    for (int i = 0; i < 5; i++) differ += vs[i] != va[idx[i]];
    ck_assert_int_eq(differ, 5);
    nf_model_free(fresh);
    nf_batch_free(&all), nf_batch_free(&some);
    for (int k = 0; k < 2; k++) nf_model_free(m[k]);
    nf_source_free(s);
    nf_causal_data_free(&d);
}
END_TEST

/* ---- shares of the units (mpirun nf causal fit) -------------------------------------------------- */

typedef struct {
    nf_causal_config cfg;
    const nf_source *train;
    const nf_train_comm *comm;
    nf_model *m;
    int rc;
} create_job;

static void *create_shared(void *arg)
{
    create_job *j = arg;
    j->rc = nf_model_causal_create_shared(&j->m, &j->cfg, j->train, j->comm);
    return NULL;
}

/* Two processes, each holding half of the units of a file (datasets/causal_share.c), build the
 * model one process builds from all of them: standardisation, outcome range, reference covariates
 * and every flow's data-dependent start, to the rounding of sums taken in another order; the two
 * processes agree to the bit.  A share without the other processes is refused. */
START_TEST(shares_build_the_model_of_all_units)
{
    register_kind();
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_causal_shares_%d.h5", (int)getpid());
    nf_causal_data d;
    nf_source *all = poly_source(301, 2, 8, &d), *tr, *va;
    ck_assert_int_eq(nf_causal_save(&d, path), NF_OK);
    ck_assert_int_eq(nf_source_split(all, 0.2, 5, &va, &tr), NF_OK);
    create_job ref = {.train = tr}, job[2];
    small_config(&ref.cfg);
    create_shared(&ref);
    ck_assert_msg(ref.rc == NF_OK, "%s", nf_strerror_last());
    nf_test_pair pair;
    ck_assert_int_eq(nf_test_pair_init(&pair, 0), NF_OK);
    nf_source *sh[2], *shtr[2], *shva[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nf_causal_source_share(&sh[k], path, NULL, NULL, NULL, k, 2), NF_OK);
        ck_assert_int_eq(nf_source_split(sh[k], 0.2, 5, &shva[k], &shtr[k]), NF_OK);
        job[k] = (create_job){.cfg = ref.cfg, .train = shtr[k], .comm = &pair.comm[k]};
    }
    nf_test_pair_run(create_shared, &job[0], &job[1]);
    ck_assert_msg(job[0].rc == NF_OK && job[1].rc == NF_OK, "%s", nf_strerror_last());
    const double tol = sizeof(nf_real) == sizeof(double) ? 1e-12 : 1e-5;
    const nf_params *st[3][2] = {{ref.m->P, ref.m->S}, {job[0].m->P, job[0].m->S}, {job[1].m->P, job[1].m->S}};
    for (int w = 0; w < 2; w++) {
        ck_assert(st[0][w]->n == st[1][w]->n && st[1][w]->n == st[2][w]->n);
        for (size_t i = 0; i < st[0][w]->n; i++) {
            const double a = st[0][w]->value[i], b = st[1][w]->value[i];
            ck_assert_msg(st[1][w]->value[i] == st[2][w]->value[i], "%s entry %zu differs between the processes",
                          w ? "S" : "P", i);
            ck_assert_msg(fabs(a - b) <= tol * fmax(1, fabs(a)), "%s entry %zu: %.17g from all units, %.17g from "
                          "shares", w ? "S" : "P", i, a, b);
        }
    }
    /* the stored standardisation is not trivially equal: it moved off its defaults */
    ck_assert(nf_model_causal_config(ref.m)->dx == 1 && ref.m->S->n > 4);
    /* a share alone is refused, naming what is missing */
    nf_model *m;
    ck_assert_int_eq(nf_model_causal_create(&m, &ref.cfg, shtr[0]), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "share"), "%s", nf_strerror_last());
    for (int k = 0; k < 2; k++) {
        nf_model_free(job[k].m);
        nf_source_free(shtr[k]), nf_source_free(shva[k]), nf_source_free(sh[k]);
    }
    nf_test_pair_destroy(&pair);
    nf_model_free(ref.m);
    nf_source_free(tr), nf_source_free(va), nf_source_free(all);
    nf_causal_data_free(&d);
    unlink(path);
}
END_TEST

/* nf_causal_subset (nf data split of a causal file): the chosen units with every array, in order. */
START_TEST(subset_keeps_every_array)
{
    nf_causal_data d, sub;
    ck_assert_int_eq(nf_causal_make(&d, "causal-moons", 40, 0, 5), NF_OK);
    const size_t idx[] = {39, 0, 17, 18, 2};
    ck_assert_int_eq(nf_causal_subset(&sub, &d, idx, 5), NF_OK);
    ck_assert_int_eq(sub.n, 5);
    ck_assert_int_eq(sub.dx, d.dx);
    ck_assert_int_eq(sub.dy, d.dy);
    ck_assert_str_eq(sub.family, d.family);
    ck_assert_ptr_nonnull(sub.y0);
    ck_assert_ptr_nonnull(sub.logp1);
    ck_assert_ptr_nonnull(sub.propensity);
    for (size_t i = 0; i < 5; i++) {
        const size_t u = idx[i];
        ck_assert(memcmp(sub.x + i * d.dx, d.x + u * d.dx, (size_t)d.dx * sizeof *d.x) == 0);
        ck_assert(memcmp(sub.y + i * d.dy, d.y + u * d.dy, (size_t)d.dy * sizeof *d.y) == 0);
        ck_assert(memcmp(sub.y0 + i * d.dy, d.y0 + u * d.dy, (size_t)d.dy * sizeof *d.y) == 0);
        ck_assert(memcmp(sub.y1 + i * d.dy, d.y1 + u * d.dy, (size_t)d.dy * sizeof *d.y) == 0);
        ck_assert(sub.a[i] == d.a[u] && sub.logp0[i] == d.logp0[u] && sub.logp1[i] == d.logp1[u] &&
                  sub.propensity[i] == d.propensity[u]);
    }
    nf_causal_data_free(&sub);
    nf_causal_data_free(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("causal");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, nuisance_loss_gradient, 0, 3);
    tcase_add_test(t, linear_shift_is_each_arms_least_squares_slope);
    /* the 2-D variant in the double build only: in float its 80 draws' log q, with float's step of
     * 2e-3, put differences of up to 4e-3 between the quotients and gradients of 1e-3 (the double
     * build agrees to 1e-5) */
    tcase_add_loop_test(t, target_loss_gradient, 0, sizeof(nf_real) == sizeof(double) ? 2 : 1);
    tcase_add_test(t, shares_build_the_model_of_all_units);
    tcase_add_test(t, draws_do_not_depend_on_the_batch);
    tcase_add_test(t, subset_keeps_every_array);
    if (!getenv("NF_CAUSAL_QUICK")) tcase_add_test(t, learns_poly_and_round_trips);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
