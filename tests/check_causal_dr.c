/* tests/check_causal_dr.c - double robustness of the causal kind's bias correction on causal-poly
 * (b = 2).  After the nuisance stage, one of the two nuisance models is replaced by a deliberately
 * wrong one and the target stage is trained against it:
 *
 *   wrong outcome model, right propensity: the representation R(x) is set so that the propensity
 *     logit is exactly the true one, -(b x - b^2 / 2), through R_0 = tanh(eps xs) ~ eps xs, while the
 *     outcome flow, which reads R, now sees R ~ 0 for every unit: an outcome model blind to x.  The
 *     corrected target flows stay near the true densities; the uncorrected ones (CE alone) and the
 *     plug-in do not.
 *   right outcome model, wrong propensity: pi = 1/2 for every unit.  The corrected target flow of
 *     arm 1 (whose outcome model the nuisance stage learns well) stays near the truth.
 *
 * The nuisance stage is stepped by hand (nf_trainer_step), the target stage run by a second
 * trainer created on the model in its last stage. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/causal.h"
#include "training/model_causal.h"
#include "training/trainer.h"

static const double B = 2.0;

typedef struct fixture {
    nf_causal_data d, test;
    nf_source *all, *train, *val;
} fixture;

static void fixture_init(fixture *f)
{
    ck_assert_int_eq(nf_causal_make(&f->d, "causal-poly", 1000, B, 31), NF_OK);
    ck_assert_int_eq(nf_causal_make(&f->test, "causal-poly", 2000, B, 32), NF_OK);
    ck_assert_int_eq(nf_causal_source(&f->all, &f->d), NF_OK);
    ck_assert_int_eq(nf_source_split(f->all, 0.2, 1, &f->val, &f->train), NF_OK);
}

static void fixture_free(fixture *f)
{
    nf_source_free(f->train), nf_source_free(f->val), nf_source_free(f->all);
    nf_causal_data_free(&f->d), nf_causal_data_free(&f->test);
}

static void train_config(nf_train_config *tc, long steps)
{
    nf_train_config_init(tc);
    tc->batch = 64;
    tc->max_steps = steps;
    tc->eval_every = 100;
    tc->clip = 5;
    tc->seed = 5;
    tc->optim.lr = 5e-3;
    nf_schedule_init(&tc->schedule, NF_SCHED_COSINE, 5e-3);
    tc->schedule.total = steps;
}

/* A model after the nuisance stage (stepped by hand). */
static nf_model *nuisance_fit(fixture *f)
{
    nf_causal_config c;
    nf_causal_config_init(&c);
    c.grid = 100;
    c.seed = 4;
    nf_model *m;
    ck_assert_int_eq(nf_model_causal_create(&m, &c, f->train), NF_OK);
    nf_train_config tc;
    train_config(&tc, 1000);
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, f->train, f->val), NF_OK);
    for (long s = 0; s < tc.max_steps; s++) {
        double metric;
        int evaluated;
        ck_assert_msg(nf_trainer_step(t, &metric, &evaluated) == NF_OK, "%s", nf_strerror_last());
    }
    nf_trainer_free(t);
    ck_assert_int_eq(m->stage, 0);
    return m;
}

static void target_fit(fixture *f, nf_model *m)
{
    ck_assert_int_eq(nf_model_set_stage(m, 1), NF_OK);
    nf_train_config tc;
    train_config(&tc, 800);
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, f->train, f->val), NF_OK);
    ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_trainer_free(t);
}

/* truth - estimate of the mean log-density of the test units' Y[a] */
static double gap(fixture *f, nf_model *m, nf_causal_estimator e, int a)
{
    const double *y = a ? f->test.y1 : f->test.y0, *lt = a ? f->test.logp1 : f->test.logp0;
    double *lp = malloc(f->test.n * sizeof *lp), g = 0;
    ck_assert_int_eq(nf_causal_logp(m, e, a, y, f->test.n, lp), NF_OK);
    for (size_t i = 0; i < f->test.n; i++) g += (lt[i] - lp[i]) / (double)f->test.n;
    free(lp);
    return g;
}

static nf_real *slice(nf_model *m, const char *name, size_t size)
{
    const nf_param_slice *s = nf_params_find(m->P, name);
    ck_assert_msg(s && s->size == size, "slice %s of %zu entries", name, size);
    return m->P->value + s->offset;
}

START_TEST(wrong_outcome_right_propensity)
{
    fixture f;
    fixture_init(&f);
    nf_model *m = nuisance_fit(&f);
    const nf_causal_config *c = nf_model_causal_config(m);
    const size_t R = (size_t)c->repr;
    nf_real *Wr = slice(m, "nuisance.repr.weight", R), *br = slice(m, "nuisance.repr.bias", R);
    nf_real *wp = slice(m, "nuisance.propensity.weight", R), *bp = slice(m, "nuisance.propensity.bias", 1);
    const nf_param_slice *sm = nf_params_find(m->S, "stats.x_mean"), *ss = nf_params_find(m->S, "stats.x_scale");
    double mx = m->S->value[sm->offset], sx = m->S->value[ss->offset], eps = 1e-3;
    /* g = w_p0 tanh(eps xs) + b_p ~ w_p0 eps xs + b_p = -(b (sx xs + mx) - b^2 / 2) */
    for (size_t j = 0; j < R; j++) Wr[j] = br[j] = wp[j] = 0;
    Wr[0] = (nf_real)eps;
    wp[0] = (nf_real)(-B * sx / eps);
    bp[0] = (nf_real)(-B * mx + B * B / 2);
    target_fit(&f, m);
    for (int a = 0; a < 2; a++) {
        double gt = gap(&f, m, NF_CAUSAL_TARGET, a), gn = gap(&f, m, NF_CAUSAL_NOBC, a),
               gp = gap(&f, m, NF_CAUSAL_PLUGIN, a);
        fprintf(stderr, "wrong outcome model, arm %d: gaps target %.4f, no BC %.4f, plug-in %.4f\n", a, gt, gn, gp);
        ck_assert_msg(fabs(gt) < 0.1, "arm %d: the corrected estimate is %g nats from the truth", a, gt);
        ck_assert_msg(gn > 0.2 && gp > 0.2, "arm %d: the uncorrected estimates are only %g and %g nats away", a, gn, gp);
    }
    nf_model_free(m);
    fixture_free(&f);
}
END_TEST

START_TEST(right_outcome_wrong_propensity)
{
    fixture f;
    fixture_init(&f);
    nf_model *m = nuisance_fit(&f);
    const size_t R = (size_t)nf_model_causal_config(m)->repr;
    nf_real *wp = slice(m, "nuisance.propensity.weight", R), *bp = slice(m, "nuisance.propensity.bias", 1);
    for (size_t j = 0; j < R; j++) wp[j] = 0;
    bp[0] = 0; /* pi = 1/2 everywhere */
    target_fit(&f, m);
    double gt = gap(&f, m, NF_CAUSAL_TARGET, 1), gn = gap(&f, m, NF_CAUSAL_NOBC, 1);
    fprintf(stderr, "wrong propensity, arm 1: gaps target %.4f, no BC %.4f\n", gt, gn);
    ck_assert_msg(fabs(gt) < 0.1, "arm 1: the corrected estimate is %g nats from the truth", gt);
    nf_model_free(m);
    fixture_free(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("causal_dr");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 900);
    tcase_add_test(t, wrong_outcome_right_propensity);
    tcase_add_test(t, right_outcome_wrong_propensity);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
