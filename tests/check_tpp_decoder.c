/* tests/check_tpp_decoder.c - the inter-event time decoders (training/tpp_decoder.h): each density
 * integrates to 1 over tau > 0, the survival is the integral of the density beyond tau (GSL
 * quadrature), samples have the density's mean, and gradients of log p and log S match finite
 * differences in the parameters and the history embedding (double build). */
#include <check.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "training/tpp_decoder.h"

enum { C = 3, M = 4 };
static const nf_real CTX[M * C] = {0.4, -1.1, 0.3, 1.3, 0.2, -0.7, -0.6, 0.9, 0.5, 0.1, 0.1, -0.2};

typedef struct {
    nf_params *P, *S;
    nf_tpp_decoder d;
} fixture;

static void make(fixture *f, nf_tpp_decoder_kind k)
{
    f->P = nf_params_alloc();
    f->S = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(2385, (uint64_t)k);
    int rc = nf_tpp_decoder_create(&f->d, k, C, 4, 1, 8, -0.3, 1.2, f->P, f->S, "decoder.", r);
    ck_assert_msg(rc == NF_OK, "%s: %s", nf_tpp_decoder_name(k), nf_strerror_last());
    /* every parameter perturbed but the flow's masked ones: in the 1-D MADE the first layer's column
     * of y is masked (stored as zeros, nn/linear.h), and it must stay zero, or the spline's
     * parameters would depend on the y they transform and the density would not be one */
    unsigned char *masked = calloc(f->P->n, 1);
    for (size_t i = 0; i < f->P->nslices; i++) {
        const nf_param_slice *sl = &f->P->slices[i];
        const size_t len = strlen(sl->name);
        if (len >= 10 && !strcmp(sl->name + len - 10, "fc0.weight"))
            for (size_t j = 0; j < sl->size; j++) masked[sl->offset + j] = f->P->value[sl->offset + j] == 0;
    }
    for (size_t i = 0; i < f->P->n; i++)
        if (!masked[i]) f->P->value[i] += (nf_real)(0.15 * nf_rng_normal(r));
    free(masked);
    if (k == NF_TPP_RMTPP) f->P->value[f->d.off_w] = (nf_real)-0.35; /* a decaying intensity: S(inf) > 0 */
    nf_rng_free(r);
}

static void unmake(fixture *f)
{
    nf_tpp_decoder_destroy(&f->d);
    nf_params_free(f->P);
    nf_params_free(f->S);
}

typedef struct {
    fixture *f;
    int row, moment;
} qarg;

static double density(double t, void *p)
{
    qarg *q = p;
    nf_real tau = (nf_real)t, lp;
    if (t <= 0 || nf_tpp_decoder_eval(&q->f->d, 0, &lp, &tau, CTX + q->row * C, 1) != NF_OK) return 0;
    return exp(lp) * (q->moment ? t : 1);
}

START_TEST(densities_survival_and_samples)
{
    nf_tpp_decoder_kind k = (nf_tpp_decoder_kind)_i;
    fixture f;
    make(&f, k);
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(2000);
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    const double tol = sizeof(nf_real) == 8 ? 1e-6 : 3e-4;
    for (int row = 0; row < M; row++) {
        qarg q = {&f, row, 0};
        gsl_function F = {density, &q};
        double total, err;
        gsl_integration_qagiu(&F, 0, 1e-11, 1e-9, 2000, w, &total, &err);
        nf_real tau0 = (nf_real)2.385, ls;
        ck_assert_int_eq(nf_tpp_decoder_eval(&f.d, 1, &ls, &tau0, CTX + row * C, 1), NF_OK);
        double beyond;
        gsl_integration_qagiu(&F, 2.385, 1e-11, 1e-9, 2000, w, &beyond, &err);
        if (k == NF_TPP_RMTPP) {
            /* a decaying intensity may never fire: the density holds 1 - S(infinity) */
            double a = 0;
            for (int j = 0; j < C; j++) a += f.P->value[f.d.off_v + j] * CTX[row * C + j];
            a += f.P->value[f.d.off_b];
            double s_inf = exp(exp(a) / f.P->value[f.d.off_w]);
            ck_assert_msg(fabs(total + s_inf - 1) < tol, "rmtpp row %d: mass %g + S(inf) %g", row, total, s_inf);
            beyond += s_inf;
        } else {
            ck_assert_msg(fabs(total - 1) < tol, "%s row %d: density integrates to %g", nf_tpp_decoder_name(k), row,
                          total);
        }
        ck_assert_msg(fabs(exp(ls) - beyond) < tol, "%s row %d: S(2.385) = %g, quadrature %g", nf_tpp_decoder_name(k),
                      row, exp(ls), beyond);
    }
    /* samples: the mean of tau for one context, against the integral of tau p(tau) */
    if (k != NF_TPP_RMTPP) {
        enum { NS = 40000 };
        nf_real *ctx = malloc(NS * C * sizeof *ctx), *tau = malloc(NS * sizeof *tau);
        for (int i = 0; i < NS; i++) memcpy(ctx + i * C, CTX + C, C * sizeof *ctx);
        nf_rng *r = nf_rng_alloc(77, 0);
        ck_assert_int_eq(nf_tpp_decoder_sample(&f.d, tau, ctx, NS, r), NF_OK);
        double m = 0, m2 = 0;
        for (int i = 0; i < NS; i++) m += tau[i] / NS, m2 += (double)tau[i] * tau[i] / NS;
        qarg q = {&f, 1, 1};
        gsl_function F = {density, &q};
        double mean, err;
        gsl_integration_qagiu(&F, 0, 1e-10, 1e-8, 2000, w, &mean, &err);
        double se = sqrt((m2 - m * m) / NS);
        ck_assert_msg(fabs(m - mean) < 5 * se, "%s: sample mean %g, density mean %g (se %g)", nf_tpp_decoder_name(k), m,
                      mean, se);
        nf_rng_free(r);
        free(ctx);
        free(tau);
    }
    gsl_set_error_handler(old);
    gsl_integration_workspace_free(w);
    unmake(&f);
}
END_TEST

START_TEST(gradients)
{
#ifdef NF_DOUBLE
    nf_tpp_decoder_kind k = (nf_tpp_decoder_kind)_i;
    fixture f;
    make(&f, k);
    nf_real tau[M] = {0.35, 2.385, 0.08, 1.1}, ctx[M * C], out[M], dout[M] = {0.7, -1.3, 0.45, 2.1};
    memcpy(ctx, CTX, sizeof ctx);
    for (int which = 0; which < 2; which++) {
        nf_real dctx[M * C] = {0};
        nf_params_zero_grad(f.P);
        ck_assert_int_eq(nf_tpp_decoder_eval(&f.d, which, out, tau, ctx, M), NF_OK);
        ck_assert_int_eq(nf_tpp_decoder_backward(&f.d, which, dout, dctx), NF_OK);
        const double h = 1e-6;
#define LOSS(v)                                                   \
    do {                                                          \
        nf_tpp_decoder_eval(&f.d, which, out, tau, ctx, M);       \
        v = 0;                                                    \
        for (int i_ = 0; i_ < M; i_++) v += dout[i_] * out[i_];   \
    } while (0)
        for (size_t j = 0; j < f.P->n; j++) {
            double lp, lm, keep = f.P->value[j];
            f.P->value[j] = keep + h;
            LOSS(lp);
            f.P->value[j] = keep - h;
            LOSS(lm);
            f.P->value[j] = keep;
            double fd = (lp - lm) / (2 * h);
            ck_assert_msg(fabs(f.P->grad[j] - fd) <= 1e-5 * (1 + fabs(fd)), "%s %s: d/dparam %zu: %g, fd %g",
                          nf_tpp_decoder_name(k), which ? "log S" : "log p", j, (double)f.P->grad[j], fd);
        }
        for (int j = 0; j < M * C; j++) {
            double lp, lm, keep = ctx[j];
            ctx[j] = keep + h;
            LOSS(lp);
            ctx[j] = keep - h;
            LOSS(lm);
            ctx[j] = keep;
            double fd = (lp - lm) / (2 * h);
            ck_assert_msg(fabs(dctx[j] - fd) <= 1e-5 * (1 + fabs(fd)), "%s %s: d/dctx %d: %g, fd %g",
                          nf_tpp_decoder_name(k), which ? "log S" : "log p", j, (double)dctx[j], fd);
        }
#undef LOSS
    }
    unmake(&f);
#endif
}
END_TEST

START_TEST(errors)
{
    fixture f;
    make(&f, NF_TPP_LOGNORMMIX);
    nf_real tau[2] = {0.5, 0}, out[2];
    ck_assert_int_eq(nf_tpp_decoder_eval(&f.d, 0, out, tau, CTX, 2), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "position 1"));
    unmake(&f);
    nf_tpp_decoder_kind k;
    ck_assert_int_eq(nf_tpp_decoder_parse("hawkes", &k), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "lognormmix"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tpp_decoder");
    TCase *tc = tcase_create("tpp_decoder");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, densities_survival_and_samples, 0, 4);
    tcase_add_loop_test(tc, gradients, 0, 4);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
