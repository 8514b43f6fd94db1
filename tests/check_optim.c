/* tests/check_optim.c - optimizers against hand-computed PyTorch updates, convergence on a quadratic,
 * gradient clipping, learning-rate schedules, and error paths. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "training/optim.h"
#include "training/schedule.h"

#ifdef NF_DOUBLE
#define TOL 1e-12
#else
#define TOL 2e-6
#endif

/* Three parameters in two slices, three steps with the gradients G and rates LR below. */
static const double th0[3] = {2.385, -0.713, 0.0417};
static const double G[3][3] = {{0.516, -1.273, 0.0089}, {-0.341, 0.962, 0.155}, {0.877, 0.214, -0.602}};
static const double LR[3] = {0.0137, 0.0121, 0.0093};

/* Expected parameters after each step, from the torch.optim formulas evaluated in double (Python):
 *   Adam  (betas 0.87, 0.995; eps 1e-8; weight_decay 0.031):
 *     g += wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *     p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   AdamW (same betas and eps; weight_decay 0.047): p *= 1 - lr wd, then the Adam update without wd
 *   SGD   (lr = 3.7 LR[t]; momentum 0.83; weight_decay 0.021; dampening 0):
 *     g += wd p; buf = g at t = 1, else buf = mu buf + g; p -= lr buf                          */
static const double expect_adam[3][3] = {
    {2.37130000023223, -0.699300000105783, 0.0280000134409789},
    {2.36782533069021, -0.698233727964509, 0.018361194403668},
    {2.36162492536605, -0.69834868069745, 0.0228713646467745},
};
static const double expect_adamw[3][3] = {
    {2.3697642987655, -0.69884089940762, 0.0279731647632411},
    {2.36681912642786, -0.697608686091699, 0.0183770556994302},
    {2.36024303568963, -0.697637193145218, 0.0228995644300891},
};
static const double expect_sgd[3][3] = {
    {2.35630515135, -0.64771264863, 0.041204469767},
    {2.34832118481236, -0.642312511124838, 0.0338631243467892},
    {2.31135345165554, -0.645767178986765, 0.04987018151462},
};

/* A store of n entries holding the 3-entry pattern repeated (n = 3 is the plain case). */
static nf_params *make_store(size_t n)
{
    nf_params *P = nf_params_alloc();
    size_t off;
    ck_assert_int_eq(nf_params_add(P, "layer.w", 2 * n / 3, &off), NF_OK);
    ck_assert_int_eq(nf_params_add(P, "layer.b", n - 2 * n / 3, &off), NF_OK);
    for (size_t i = 0; i < n; i++) P->value[i] = (nf_real)th0[i % 3];
    return P;
}

static void run_hand_case(nf_optim *o, double lr_scale, const double expect[3][3], size_t n)
{
    nf_params *P = make_store(n);
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < n; i++) P->grad[i] = (nf_real)G[t][i % 3];
        ck_assert_int_eq(nf_optim_step(o, P, LR[t] * lr_scale), NF_OK);
        ck_assert_int_eq(o->t, t + 1);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs(P->value[i] - expect[t][i % 3]) < TOL * 3, "%s n=%zu step %d entry %zu: %.15g, expected %.15g",
                          nf_optim_name(o->type), n, t + 1, i, (double)P->value[i], expect[t][i % 3]);
    }
    nf_params_free(P);
}

START_TEST(test_adam_hand)
{
    for (int big = 0; big <= 1; big++) {
        nf_optim o;
        nf_optim_init(&o, NF_OPTIM_ADAM);
        o.beta1 = 0.87, o.beta2 = 0.995, o.weight_decay = 0.031;
        run_hand_case(&o, 1.0, expect_adam, big ? 120003 : 3); /* big: the threaded path */
    }
}
END_TEST

START_TEST(test_adamw_hand)
{
    for (int big = 0; big <= 1; big++) {
        nf_optim o;
        nf_optim_init(&o, NF_OPTIM_ADAMW);
        o.beta1 = 0.87, o.beta2 = 0.995, o.weight_decay = 0.047;
        run_hand_case(&o, 1.0, expect_adamw, big ? 120003 : 3);
    }
}
END_TEST

START_TEST(test_sgd_hand)
{
    for (int big = 0; big <= 1; big++) {
        nf_optim o;
        nf_optim_init(&o, NF_OPTIM_SGD);
        o.momentum = 0.83, o.weight_decay = 0.021;
        run_hand_case(&o, 3.7, expect_sgd, big ? 120003 : 3);
    }
}
END_TEST

/* f(theta) = 1/2 sum_i a_i (theta_i - c_i)^2, badly conditioned (a spans 30x); minimum at c. */
START_TEST(test_quadratic_converges)
{
    static const double a[4] = {0.37, 2.9, 11.3, 1.05}, c[4] = {1.7, -0.62, 0.215, -3.1};
    for (int type = 0; type < 3; type++) {
        nf_optim o;
        nf_optim_init(&o, (nf_optim_type)type);
        o.weight_decay = 0;
        nf_schedule s;
        nf_schedule_init(&s, NF_SCHED_COSINE, type == NF_OPTIM_SGD ? 0.05 : 0.08);
        s.warmup = 50, s.total = 3000, s.final_frac = 0.01;
        nf_params *P = nf_params_alloc();
        size_t off;
        ck_assert_int_eq(nf_params_add(P, "x", 4, &off), NF_OK);
        double f0 = 0;
        for (int i = 0; i < 4; i++) f0 += 0.5 * a[i] * c[i] * c[i];
        for (long t = 0; t < 3000; t++) {
            for (int i = 0; i < 4; i++) P->grad[i] = (nf_real)(a[i] * (P->value[i] - c[i]));
            ck_assert_int_eq(nf_optim_step(&o, P, nf_schedule_lr(&s, o.t)), NF_OK);
        }
        double f = 0;
        for (int i = 0; i < 4; i++) {
            f += 0.5 * a[i] * (P->value[i] - c[i]) * (P->value[i] - c[i]);
            ck_assert_msg(fabs(P->value[i] - c[i]) < 1e-3, "%s: theta[%d] = %g, minimum at %g", nf_optim_name(o.type),
                          i, (double)P->value[i], c[i]);
        }
        ck_assert_msg(f < 1e-6 * f0, "%s: f = %g from %g", nf_optim_name(o.type), f, f0);
        nf_params_free(P);
    }
}
END_TEST

START_TEST(test_clip)
{
    static const double g[5] = {3.1, -4.7, 0.52, 2.2, -0.083};
    double n2 = 0;
    for (int i = 0; i < 5; i++) n2 += g[i] * g[i];
    const double norm = sqrt(n2);
    nf_params *P = nf_params_alloc();
    size_t off;
    ck_assert_int_eq(nf_params_add(P, "w", 5, &off), NF_OK);

    /* above the limit: returns the old norm, scales to max_norm (torch: coef = max / (norm + 1e-6)) */
    for (int i = 0; i < 5; i++) P->grad[i] = (nf_real)g[i];
    double got = nf_clip_grad_norm(P, 1.93);
    ck_assert_msg(fabs(got - norm) < 1e-6 * norm, "returned %g, norm before clipping %g", got, norm);
    ck_assert_msg(fabs(nf_params_grad_norm(P) - 1.93) < 1e-5, "norm after clipping %g", nf_params_grad_norm(P));
    for (int i = 0; i < 5; i++)
        ck_assert_msg(fabs(P->grad[i] - g[i] * 1.93 / (norm + 1e-6)) < 1e-6, "entry %d: %g", i, (double)P->grad[i]);

    /* below the limit, or max_norm <= 0: untouched */
    for (int i = 0; i < 5; i++) P->grad[i] = (nf_real)g[i];
    ck_assert(fabs(nf_clip_grad_norm(P, 6.5) - norm) < 1e-6 * norm);
    ck_assert(fabs(nf_clip_grad_norm(P, 0) - norm) < 1e-6 * norm);
    for (int i = 0; i < 5; i++) ck_assert(P->grad[i] == (nf_real)g[i]);

    /* non-finite: returned as is, nothing scaled */
    P->grad[3] = (nf_real)INFINITY;
    ck_assert(!isfinite(nf_clip_grad_norm(P, 1.0)));
    ck_assert(P->grad[0] == (nf_real)g[0]);
    nf_params_free(P);
}
END_TEST

START_TEST(test_step_errors)
{
    nf_params *P = make_store(3);
    nf_optim o;
    nf_optim_init(&o, NF_OPTIM_ADAM);
    P->grad[0] = 0.3f, P->grad[1] = 0.2f, P->grad[2] = (nf_real)NAN;
    ck_assert_int_eq(nf_optim_step(&o, P, 1e-3), NF_ENONFINITE);
    ck_assert_msg(strstr(nf_strerror_last(), "layer.b"), "message: %s", nf_strerror_last());
    ck_assert_int_eq(o.t, 0);
    for (int i = 0; i < 3; i++) ck_assert(P->value[i] == (nf_real)th0[i] && P->m[i] == 0 && P->v[i] == 0);

    P->grad[2] = 0.1f;
    ck_assert_int_eq(nf_optim_step(&o, P, -1e-3), NF_EINVAL);
    ck_assert_int_eq(nf_optim_step(&o, P, NAN), NF_EINVAL);
    o.beta1 = 1.0;
    ck_assert_int_eq(nf_optim_step(&o, P, 1e-3), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "beta1"), "message: %s", nf_strerror_last());
    nf_optim_init(&o, NF_OPTIM_SGD);
    o.momentum = -0.2;
    ck_assert_int_eq(nf_optim_check(&o), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "momentum"), "message: %s", nf_strerror_last());
    ck_assert_int_eq(o.t, 0);

    nf_optim_type t;
    ck_assert_int_eq(nf_optim_parse("adam", &t), NF_OK);
    ck_assert_int_eq(t, NF_OPTIM_ADAM);
    ck_assert_int_eq(nf_optim_parse("adamw", &t), NF_OK);
    ck_assert_int_eq(t, NF_OPTIM_ADAMW);
    ck_assert_int_eq(nf_optim_parse("sgd", &t), NF_OK);
    ck_assert_int_eq(t, NF_OPTIM_SGD);
    ck_assert_int_eq(nf_optim_parse("adamax", &t), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "adamax") && strstr(nf_strerror_last(), NF_OPTIM_NAMES), "message: %s",
                  nf_strerror_last());
    ck_assert_str_eq(nf_optim_name(NF_OPTIM_ADAMW), "adamw");
    nf_params_free(P);
}
END_TEST

/* A store that would take more than half the machine's memory is refused before anything is
 * allocated, naming the size and the parameter; the store is unchanged and still usable. */
START_TEST(test_store_too_large)
{
    nf_params *P = make_store(3);
    size_t off = 0, huge = (size_t)1 << 50; /* 2^50 entries: 16 PiB in four arrays */
    ck_assert_int_eq(nf_params_add(P, "giant.w", huge, &off), NF_ENOMEM);
    const char *msg = nf_strerror_last();
    ck_assert_msg(strstr(msg, "giant.w") && strstr(msg, "half this machine's memory") && strstr(msg, "smaller model"),
                  "message: %s", msg);
    ck_assert_int_eq(P->n, 3);
    ck_assert_int_eq(nf_params_add(P, "small.w", 5, &off), NF_OK);
    ck_assert_int_eq(off, 3);
    ck_assert_int_eq(P->n, 8);
    nf_params_free(P);
}
END_TEST

/* ---- schedules ---- */

static void expect_lr(const nf_schedule *s, long step, double want)
{
    double got = nf_schedule_lr(s, step);
    ck_assert_msg(fabs(got - want) <= 1e-14 * fabs(want) + 1e-300, "%s step %ld: lr %.17g, expected %.17g",
                  nf_schedule_name(s->type), step, got, want);
}

START_TEST(test_schedules)
{
    nf_schedule s;
    /* cosine: lr 0.003, warm-up 100, total 1100, final fraction 0.1 */
    nf_schedule_init(&s, NF_SCHED_COSINE, 0.003);
    s.warmup = 100, s.total = 1100, s.final_frac = 0.1;
    ck_assert_int_eq(nf_schedule_check(&s), NF_OK);
    expect_lr(&s, -5, 0.003 / 100);                      /* negative step counts as 0 */
    expect_lr(&s, 0, 0.003 / 100);                       /* warm-up start: (0 + 1) / W */
    expect_lr(&s, 49, 0.003 * 50 / 100);
    expect_lr(&s, 99, 0.003);                            /* end of warm-up */
    expect_lr(&s, 100, 0.003);                           /* p = 0 */
    expect_lr(&s, 350, 0.0026045941546018393);           /* p = 1/4: 0.003 (0.1 + 0.9 (1 + cos(pi/4)) / 2) */
    expect_lr(&s, 600, 0.003 * (0.1 + 0.9 * 0.5));      /* middle, p = 1/2 */
    expect_lr(&s, 1100, 0.0003);                         /* end: lr f */
    expect_lr(&s, 250000, 0.0003);
    ck_assert(nf_schedule_lr(&s, 777) == nf_schedule_lr(&s, 777)); /* pure */
    s.total = 100;
    ck_assert_int_eq(nf_schedule_check(&s), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "total"), "message: %s", nf_strerror_last());

    /* step decay: lr 0.02, every 250 steps times 0.63 */
    nf_schedule_init(&s, NF_SCHED_STEP, 0.02);
    s.every = 250, s.gamma = 0.63;
    ck_assert_int_eq(nf_schedule_check(&s), NF_OK);
    expect_lr(&s, 0, 0.02);
    expect_lr(&s, 249, 0.02);
    expect_lr(&s, 250, 0.0126);
    expect_lr(&s, 1000, 0.02 * 0.15752961); /* 0.63^4 */
    s.warmup = 10;
    expect_lr(&s, 4, 0.01);
    expect_lr(&s, 9, 0.02);
    s.gamma = 1.5;
    ck_assert_int_eq(nf_schedule_check(&s), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "gamma"), "message: %s", nf_strerror_last());

    /* constant with warm-up 7 */
    nf_schedule_init(&s, NF_SCHED_CONSTANT, 0.0042);
    s.warmup = 7;
    expect_lr(&s, 0, 0.0006);
    expect_lr(&s, 6, 0.0042);
    expect_lr(&s, 1000000, 0.0042);

    nf_schedule_type t;
    ck_assert_int_eq(nf_schedule_parse("constant", &t), NF_OK);
    ck_assert_int_eq(t, NF_SCHED_CONSTANT);
    ck_assert_int_eq(nf_schedule_parse("cosine", &t), NF_OK);
    ck_assert_int_eq(t, NF_SCHED_COSINE);
    ck_assert_int_eq(nf_schedule_parse("step", &t), NF_OK);
    ck_assert_int_eq(t, NF_SCHED_STEP);
    ck_assert_int_eq(nf_schedule_parse("linear", &t), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "linear") && strstr(nf_strerror_last(), NF_SCHEDULE_NAMES),
                  "message: %s", nf_strerror_last());
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_adam_hand);
    tcase_add_test(tc, test_adamw_hand);
    tcase_add_test(tc, test_sgd_hand);
    tcase_add_test(tc, test_quadratic_converges);
    tcase_add_test(tc, test_clip);
    tcase_add_test(tc, test_step_errors);
    tcase_add_test(tc, test_store_too_large);
    tcase_add_test(tc, test_schedules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(optim_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
