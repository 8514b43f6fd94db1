/* tests/check_flow.c - flows as a whole: spec parsing, presets, the change-of-variables formula,
 * sampling consistency, and gradients of log_prob and of the sampling direction (reverse KL). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_linalg.h>

#include "core/rng.h"
#include "flows/flow.h"
#include "flows/spec.h"
#include "tests/testutil.h"

/* Perturb the parameters away from their (often identity) start.  Entries that are zero with a
 * zero gradient are structural (masked MADE weights) and stay zero, or the map would stop being
 * autoregressive. */
static __attribute__((unused)) const char *slice_of(const nf_params *P, size_t i)
{
    for (size_t k = 0; k < P->nslices; k++)
        if (i >= P->slices[k].offset && i < P->slices[k].offset + P->slices[k].size) return P->slices[k].name;
    return "?";
}

static void randomize(nf_flow *f, double scale, uint64_t seed)
{
    enum { N = 8 };
    nf_real x[N * 16], ctx[N * 16], lp[N], w[N];
    ck_assert(f->dim <= 16 && f->ctx_dim <= 16);
    nf_test_fill_normal(x, (size_t)N * f->dim, 1.0, seed + 1);
    nf_test_fill_normal(ctx, (size_t)N * f->ctx_dim, 1.0, seed + 2);
    for (int i = 0; i < N; i++) w[i] = 1;
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, f->ctx_dim ? ctx : NULL, NULL, N), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, w, NULL, NULL), NF_OK);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < f->P->n; i++)
        if (f->P->value[i] != 0 || f->P->grad[i] != 0) f->P->value[i] += (nf_real)(scale * nf_rng_normal(r));
    nf_params_zero_grad(f->P);
    nf_rng_free(r);
}

START_TEST(spec_errors_point_at_the_bad_part)
{
    nf_flow *f = NULL;
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling, afine-coupling", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_null(f);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "position 18"));
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "unknown bijector 'afine-coupling'"));
    ck_assert_int_eq(nf_flow_create(&f, "3*(permute, affine-coupling", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "missing ')'"));
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling(hidden=abc)", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "hidden=abc"));
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling(hiden=8)", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "unknown option 'hiden'"));
    ck_assert_int_eq(nf_flow_create(&f, "permute; base=cauchy", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "unknown base distribution 'cauchy'"));
    ck_assert_int_eq(nf_flow_create(&f, "permute,, permute", 4, 0, 1), NF_EINVAL);
    ck_assert_int_eq(nf_flow_create(&f, "permute ) permute", 4, 0, 1), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "unexpected ')"));
}
END_TEST

START_TEST(repeat_expands)
{
    nf_spec s;
    ck_assert_int_eq(nf_spec_parse(&s, " 3*( permute(order=reverse) , affine-coupling(hidden=8) ), actnorm ; base=diag-normal"),
                     NF_OK);
    ck_assert_int_eq(s.n, 7);
    ck_assert_str_eq(s.items[0].type->name, "permute");
    ck_assert_str_eq(s.items[5].type->name, "affine-coupling");
    ck_assert_str_eq(s.items[5].options, "hidden=8");
    ck_assert_str_eq(s.items[6].type->name, "actnorm");
    ck_assert_str_eq(s.base, "diag-normal");
    nf_spec_free(&s);
}
END_TEST

START_TEST(every_preset_builds_and_runs)
{
    const char *names[] = {"realnvp", "nice", "maf", "iaf", "nsf-coupling", "nsf-ar", "glow"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char spec[1 << 14];
        nf_preset_knobs kn = {.layers = 2, .hidden = 8, .blocks = 1, .bins = 4};
        ck_assert_int_eq(nf_preset_expand(names[k], &kn, spec, sizeof spec), NF_OK);
        nf_flow *f;
        int rc = nf_flow_create(&f, spec, 3, 0, 7);
        ck_assert_msg(rc == NF_OK, "preset %s: %s", names[k], nf_strerror_last());
        nf_real x[5 * 3], lp[5];
        nf_test_fill_normal(x, 15, 1.2, 3);
        nf_flow_set_training(f, 1);
        ck_assert_msg(nf_flow_log_prob(f, lp, x, NULL, NULL, 5) == NF_OK, "%s: %s", names[k], nf_strerror_last());
        for (int i = 0; i < 5; i++) ck_assert(isfinite(lp[i]));
        nf_flow_free(f);
    }
    char spec[64];
    ck_assert_int_eq(nf_preset_expand("nsf", NULL, spec, sizeof spec), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "unknown preset 'nsf'"));
}
END_TEST

/* log p(x) of standardize -> reverse permutation -> diagonal normal, written out by hand. */
START_TEST(change_of_variables_by_hand)
{
    nf_flow *f;
    ck_assert_int_eq(nf_flow_create(&f, "standardize, permute(order=reverse); base=diag-normal", 3, 0, 5), NF_OK);
    nf_real data[4 * 3] = {1.5, -2.25, 0.75, 2.385, 0.5, -1.25, -0.625, 1.75, 3.125, 0.375, -0.875, 2.0};
    ck_assert_int_eq(nf_flow_init_data(f, data, NULL, 4), NF_OK);
    const nf_param_slice *mu = nf_params_find(f->P, "base.mean"), *ls = nf_params_find(f->P, "base.log_scale");
    ck_assert_ptr_nonnull(mu);
    ck_assert_ptr_nonnull(ls);
    double m[3] = {0.3, -0.45, 0.125}, s[3] = {0.2, -0.35, 0.05};
    for (int j = 0; j < 3; j++) {
        f->P->value[mu->offset + j] = (nf_real)m[j];
        f->P->value[ls->offset + j] = (nf_real)s[j];
    }
    double mean[3] = {0}, sd[3] = {0};
    for (int j = 0; j < 3; j++) {
        for (int i = 0; i < 4; i++) mean[j] += data[i * 3 + j] / 4.0;
        for (int i = 0; i < 4; i++) sd[j] += (data[i * 3 + j] - mean[j]) * (data[i * 3 + j] - mean[j]) / 4.0;
    }
    nf_real x[3] = {0.9, -1.1, 2.4}, lp;
    ck_assert_int_eq(nf_flow_log_prob(f, &lp, x, NULL, NULL, 1), NF_OK);
    /* The standardize bijector may use the population or the sample variance; accept either. */
    double best = INFINITY;
    for (int unbiased = 0; unbiased < 2; unbiased++) {
        double expect = 0;
        for (int j = 0; j < 3; j++) {
            double sdj = sqrt(sd[j] * (unbiased ? 4.0 / 3.0 : 1.0));
            double u = (x[j] - mean[j]) / sdj;
            int k = 2 - j; /* reverse permutation: z_k = u_{2-k} */
            double zk = u;
            expect += -0.5 * log(2 * M_PI) - s[k] - 0.5 * pow((zk - m[k]) / exp(s[k]), 2) - log(sdj);
        }
        if (fabs(expect - lp) < best) best = fabs(expect - lp);
    }
    ck_assert_msg(best < 1e-4, "log p differs from the hand computation by %g", best);
    nf_flow_free(f);
}
END_TEST

#ifdef NF_DOUBLE
/* log p(x) = log N(f(x)) + log|det J_f(x)| with J_f by central differences over the whole chain. */
START_TEST(log_prob_matches_brute_force_jacobian)
{
    const char *spec = "affine-coupling(hidden=8), lu, spline-coupling(hidden=8,bins=5,flip=1), actnorm, maf(hidden=12)";
    const int D = 4;
    nf_flow *f;
    ck_assert_msg(nf_flow_create(&f, spec, D, 0, 11) == NF_OK, "%s", nf_strerror_last());
    randomize(f, 0.2, 5);
    nf_real x[D], xp[D], lp, z[D], zp[D], zm[D];
    nf_test_fill_normal(x, D, 1.1, 9);
    ck_assert_int_eq(nf_flow_log_prob(f, &lp, x, NULL, NULL, 1), NF_OK);
    memcpy(z, f->h + (size_t)f->nb * D, sizeof z);
    double J[D * D];
    for (int j = 0; j < D; j++) {
        nf_real tmp;
        memcpy(xp, x, sizeof xp);
        xp[j] += 1e-6;
        nf_flow_log_prob(f, &tmp, xp, NULL, NULL, 1);
        memcpy(zp, f->h + (size_t)f->nb * D, sizeof zp);
        xp[j] -= 2e-6;
        nf_flow_log_prob(f, &tmp, xp, NULL, NULL, 1);
        memcpy(zm, f->h + (size_t)f->nb * D, sizeof zm);
        for (int k = 0; k < D; k++) J[k * D + j] = (zp[k] - zm[k]) / 2e-6;
    }
    gsl_matrix_view mv = gsl_matrix_view_array(J, D, D);
    gsl_permutation *p = gsl_permutation_alloc(D);
    int sign;
    gsl_linalg_LU_decomp(&mv.matrix, p, &sign);
    double logdet = gsl_linalg_LU_lndet(&mv.matrix);
    gsl_permutation_free(p);
    double base = 0;
    for (int k = 0; k < D; k++) base += -0.5 * log(2 * M_PI) - 0.5 * z[k] * z[k];
    ck_assert_msg(fabs(base + logdet - lp) < 1e-6, "log p %.10g, by hand %.10g", (double)lp, base + logdet);
    nf_flow_free(f);
}
END_TEST

/* d/dtheta and d/dx of sum(w * log p(x)) against central differences. */
START_TEST(log_prob_gradients)
{
    const char *spec = "affine-coupling(hidden=8), lu, spline-coupling(hidden=8,bins=5,flip=1), maf(hidden=12)";
    const int D = 3, C = 2, n = 4;
    nf_flow *f;
    ck_assert_msg(nf_flow_create(&f, spec, D, C, 13) == NF_OK, "%s", nf_strerror_last());
    randomize(f, 0.2, 6);
    nf_real x[n * D], ctx[n * C], w[n], lp[n], dx[n * D], dctx[n * C];
    nf_test_fill_normal(x, n * D, 1.0, 1);
    nf_test_fill_normal(ctx, n * C, 1.0, 2);
    nf_test_fill_normal(w, n, 1.0, 3);
    memset(dx, 0, sizeof dx);
    memset(dctx, 0, sizeof dctx);
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, ctx, NULL, n), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, w, dx, dctx), NF_OK);
    double *grad = malloc(f->P->n * sizeof(double));
    for (size_t i = 0; i < f->P->n; i++) grad[i] = f->P->grad[i];
#define LOSS(out)                                                   \
    do {                                                            \
        nf_flow_log_prob(f, lp, x, ctx, NULL, n);                         \
        out = 0;                                                    \
        for (int i_ = 0; i_ < n; i_++) out += w[i_] * lp[i_];       \
    } while (0)
    nf_rng *r = nf_rng_alloc(4, 0);
    for (int k = 0; k < 200; k++) {
        size_t i = nf_rng_index(r, f->P->n);
        if (f->P->value[i] == 0 && grad[i] == 0) continue; /* masked weight */
        double keep = f->P->value[i], Lp, Lm;
        f->P->value[i] = keep + 1e-6;
        LOSS(Lp);
        f->P->value[i] = keep - 1e-6;
        LOSS(Lm);
        f->P->value[i] = keep;
        double fd = (Lp - Lm) / 2e-6;
        ck_assert_msg(nf_test_relerr(grad[i], fd, 1e-2) < 1e-6, "dtheta[%zu] (%s) %g vs %g", i, slice_of(f->P, i),
                      grad[i], fd);
    }
    nf_rng_free(r);
    for (int i = 0; i < n * D; i++) {
        double keep = x[i], Lp, Lm;
        x[i] = keep + 1e-6;
        LOSS(Lp);
        x[i] = keep - 1e-6;
        LOSS(Lm);
        x[i] = keep;
        ck_assert_msg(nf_test_relerr(dx[i], (Lp - Lm) / 2e-6, 1e-2) < 1e-6, "dx[%d]", i);
    }
    for (int i = 0; i < n * C; i++) {
        double keep = ctx[i], Lp, Lm;
        ctx[i] = keep + 1e-6;
        LOSS(Lp);
        ctx[i] = keep - 1e-6;
        LOSS(Lm);
        ctx[i] = keep;
        ck_assert_msg(nf_test_relerr(dctx[i], (Lp - Lm) / 2e-6, 1e-2) < 1e-6, "dctx[%d]", i);
    }
#undef LOSS
    free(grad);
    nf_flow_free(f);
}
END_TEST

/* Reverse KL: L = sum_i (a . x_i + b log q(x_i)) over samples drawn with a fixed seed. */
START_TEST(sampling_direction_gradients)
{
    const char *spec = "affine-coupling(hidden=8), iaf(hidden=10), lu, affine-coupling(hidden=8,flip=1); base=diag-normal";
    const int D = 3, n = 5;
    nf_flow *f;
    ck_assert_msg(nf_flow_create(&f, spec, D, 0, 17) == NF_OK, "%s", nf_strerror_last());
    randomize(f, 0.2, 8);
    nf_real x[n * D], lp[n], dx[n * D], dlp[n];
    nf_test_fill_normal(dx, n * D, 1.0, 21);
    nf_test_fill_normal(dlp, n, 1.0, 22);
    nf_rng *r = nf_rng_alloc(3, 0);
    ck_assert_int_eq(nf_flow_sample(f, x, lp, NULL, n, r), NF_OK);
    nf_rng_free(r);
    nf_params_zero_grad(f->P);
    ck_assert_msg(nf_flow_sample_backward(f, dx, dlp, NULL) == NF_OK, "%s", nf_strerror_last());
    double *grad = malloc(f->P->n * sizeof(double));
    for (size_t i = 0; i < f->P->n; i++) grad[i] = f->P->grad[i];
    nf_rng *pick = nf_rng_alloc(5, 0);
    for (int k = 0; k < 150; k++) {
        size_t i = nf_rng_index(pick, f->P->n);
        if (f->P->value[i] == 0 && grad[i] == 0) continue; /* masked weight */
        double keep = f->P->value[i], L[2];
        for (int s = 0; s < 2; s++) {
            f->P->value[i] = keep + (s ? -1e-6 : 1e-6);
            nf_rng *rr = nf_rng_alloc(3, 0);
            nf_flow_sample(f, x, lp, NULL, n, rr);
            nf_rng_free(rr);
            L[s] = 0;
            for (int j = 0; j < n * D; j++) L[s] += dx[j] * x[j];
            for (int j = 0; j < n; j++) L[s] += dlp[j] * lp[j];
        }
        f->P->value[i] = keep;
        double fd = (L[0] - L[1]) / 2e-6;
        ck_assert_msg(nf_test_relerr(grad[i], fd, 1e-2) < 1e-6, "sample dtheta[%zu] (%s) %g vs %g", i,
                      slice_of(f->P, i), grad[i], fd);
    }
    nf_rng_free(pick);
    free(grad);
    nf_flow_free(f);
}
END_TEST
#endif

START_TEST(samples_log_prob_agrees)
{
    nf_flow *f;
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling(hidden=8), lu, spline-coupling(hidden=8), maf(hidden=8)", 4, 0, 3),
                     NF_OK);
    randomize(f, 0.15, 2);
    nf_real x[50 * 4], lp[50], lp2[50];
    nf_rng *r = nf_rng_alloc(9, 0);
    ck_assert_int_eq(nf_flow_sample(f, x, lp, NULL, 50, r), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(f, lp2, x, NULL, NULL, 50), NF_OK);
    for (int i = 0; i < 50; i++)
        ck_assert_msg(fabs(lp[i] - lp2[i]) < 2e-3 * (1 + fabs(lp2[i])), "sample %d: %g vs %g", i, (double)lp[i],
                      (double)lp2[i]);
    nf_rng_free(r);
    nf_flow_free(f);
}
END_TEST

START_TEST(nll_step_is_mean_negative_log_prob)
{
    nf_flow *f;
    ck_assert_int_eq(nf_flow_create(&f, "affine-coupling(hidden=8), permute(order=reverse), affine-coupling(hidden=8)", 2, 0, 3),
                     NF_OK);
    randomize(f, 0.1, 1);
    nf_real x[16 * 2], lp[16];
    nf_test_fill_normal(x, 32, 1.3, 4);
    double nll;
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_nll_step(f, x, NULL, NULL, 16, &nll), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, 16), NF_OK);
    double s = 0;
    for (int i = 0; i < 16; i++) s -= lp[i];
    ck_assert(fabs(s / 16 - nll) < 1e-5 * (1 + fabs(nll)));
    ck_assert(nf_params_grad_norm(f->P) > 0);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, 0), NF_EINVAL);
    nf_flow_free(f);
}
END_TEST

/* Two flows built into one model's store under prefixes: their slices are named by prefix, each
 * computes what the same flow with its own store computes, and each one's backward accumulates into
 * its own entries of the shared gradient only. */
START_TEST(flows_share_one_store)
{
    const char *spec_a = "affine-coupling(hidden=8), permute(order=reverse), affine-coupling(hidden=8)";
    const char *spec_b = "maf(hidden=8); base=diag-normal";
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_flow *a, *b, *a1, *b1;
    ck_assert_int_eq(nf_flow_build(&a, spec_a, 3, 0, 11, P, S, "target."), NF_OK);
    ck_assert_int_eq(nf_flow_build(&b, spec_b, 3, 2, 12, P, S, "nuisance."), NF_OK);
    ck_assert_int_eq(nf_flow_create(&a1, spec_a, 3, 0, 11), NF_OK);
    ck_assert_int_eq(nf_flow_create(&b1, spec_b, 3, 2, 12), NF_OK);
    ck_assert_int_eq(P->n, a1->P->n + b1->P->n);
    ck_assert_ptr_nonnull(nf_params_find(P, "target.b0.affine-coupling.net.fc0.weight"));
    ck_assert_ptr_nonnull(nf_params_find(P, "nuisance.base.mean"));
    for (size_t i = 0; i < P->nslices; i++)
        ck_assert_msg(!strncmp(P->slices[i].name, "target.", 7) || !strncmp(P->slices[i].name, "nuisance.", 9),
                      "slice %s has no component prefix", P->slices[i].name);
    nf_real x[5 * 3], ctx[5 * 2], la[5], lb[5];
    nf_test_fill_normal(x, 15, 1.2, 3);
    nf_test_fill_normal(ctx, 10, 0.7, 4);
    ck_assert_int_eq(nf_flow_log_prob(a, la, x, NULL, NULL, 5), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(a1, lb, x, NULL, NULL, 5), NF_OK);
    ck_assert(memcmp(la, lb, sizeof la) == 0);
    ck_assert_int_eq(nf_flow_log_prob(b, la, x, ctx, NULL, 5), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(b1, lb, x, ctx, NULL, 5), NF_OK);
    ck_assert(memcmp(la, lb, sizeof la) == 0);
    double nll, nll1;
    nf_params_zero_grad(P);
    nf_params_zero_grad(b1->P);
    ck_assert_int_eq(nf_flow_nll_step(b, x, ctx, NULL, 5, &nll), NF_OK);
    ck_assert_int_eq(nf_flow_nll_step(b1, x, ctx, NULL, 5, &nll1), NF_OK);
    ck_assert(nll == nll1);
    for (size_t i = 0; i < a1->P->n; i++) ck_assert(P->grad[i] == 0); /* the other component's entries */
    ck_assert(memcmp(P->grad + a1->P->n, b1->P->grad, b1->P->n * sizeof(nf_real)) == 0);
    nf_flow_free(a);
    nf_flow_free(b); /* the store is the model's: still there */
    ck_assert_int_eq(P->n, a1->P->n + b1->P->n);
    nf_flow_free(a1);
    nf_flow_free(b1);
    nf_params_free(P);
    nf_params_free(S);
}
END_TEST

/* A replica (nf_flow_replica) computes with its flow's values, follows them when they change,
 * keeps its gradient apart from the flow's, and is refused for a flow whose stores held other
 * entries before its own (nf_flow_replicable); nf_flow_rows_independent sees an ActNorm not yet started and batchnorm. */
START_TEST(replicas_borrow_values_and_keep_their_gradients)
{
    const char *spec = "actnorm, affine-coupling(hidden=8), permute(order=reverse), maf(hidden=8); base=diag-normal";
    nf_flow *f, *r;
    ck_assert_int_eq(nf_flow_create(&f, spec, 3, 2, 5), NF_OK);
    nf_flow_set_training(f, 1);
    nf_real x[6 * 3], ctx[6 * 2], lf[6], lr[6], dl[6];
    nf_test_fill_normal(x, 18, 1.3, 7);
    nf_test_fill_normal(ctx, 12, 0.5, 8);
    ck_assert(!nf_flow_rows_independent(f)); /* ActNorm starts from its first training batch */
    ck_assert_int_eq(nf_flow_log_prob(f, lf, x, ctx, NULL, 6), NF_OK);
    ck_assert(nf_flow_rows_independent(f));
    randomize(f, 0.3, 9);
    ck_assert_int_eq(nf_flow_replica(&r, f), NF_OK);
    ck_assert(r->P->value == f->P->value && r->S->value == f->S->value && r->P->grad != f->P->grad);
    nf_flow_set_training(r, 1);
    for (int i = 0; i < 6; i++) dl[i] = (nf_real)(0.1 * (i + 1));
    nf_params_zero_grad(f->P);
    nf_params_zero_grad(r->P);
    ck_assert_int_eq(nf_flow_log_prob(r, lr, x, ctx, NULL, 6), NF_OK);
    ck_assert_int_eq(nf_flow_backward(r, dl, NULL, NULL), NF_OK);
    for (size_t i = 0; i < f->P->n; i++) ck_assert(f->P->grad[i] == 0);
    ck_assert_int_eq(nf_flow_log_prob(f, lf, x, ctx, NULL, 6), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, dl, NULL, NULL), NF_OK);
    ck_assert(memcmp(lf, lr, sizeof lf) == 0);
    ck_assert(memcmp(f->P->grad, r->P->grad, f->P->n * sizeof(nf_real)) == 0);
    /* new values of the flow (as an optimizer step writes them) are the replica's */
    for (size_t i = 0; i < f->P->n; i++) f->P->value[i] *= (nf_real)0.9;
    ck_assert_int_eq(nf_flow_log_prob(f, lf, x, ctx, NULL, 6), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(r, lr, x, ctx, NULL, 6), NF_OK);
    ck_assert(memcmp(lf, lr, sizeof lf) == 0);
    nf_flow_free(r);
    ck_assert_int_eq(nf_flow_log_prob(f, lf, x, ctx, NULL, 6), NF_OK); /* the flow's values outlive it */
    /* a store that begins with another component's slices */
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    size_t off;
    ck_assert_int_eq(nf_params_add(P, "other.w", 4, &off), NF_OK);
    nf_flow *g;
    ck_assert_int_eq(nf_flow_build(&g, spec, 3, 2, 5, P, S, "m."), NF_OK);
    ck_assert(nf_flow_replicable(f) && !nf_flow_replicable(g));
    ck_assert_int_eq(nf_flow_replica(&r, g), NF_EINVAL);
    nf_flow_free(g);
    nf_params_free(P), nf_params_free(S);
    nf_flow_free(f);
    ck_assert_int_eq(nf_flow_create(&g, "batchnorm, affine-coupling(hidden=4)", 2, 0, 1), NF_OK);
    nf_flow_set_training(g, 1);
    ck_assert(!nf_flow_rows_independent(g));
    nf_flow_set_training(g, 0);
    ck_assert(nf_flow_rows_independent(g));
    nf_flow_free(g);
}
END_TEST

/* 1-D conditional flows: log-survival equals log of the integral of the density beyond x
 * (GSL quadrature), and its gradients match finite differences (double build). */
typedef struct {
    nf_flow *f;
    const nf_real *ctx;
} surv_q;

static double surv_density(double t, void *p)
{
    surv_q *q = p;
    nf_real x = (nf_real)t, lp;
    if (nf_flow_log_prob(q->f, &lp, &x, q->ctx, NULL, 1) != NF_OK) return 0;
    return exp(lp);
}

START_TEST(survival_of_1d_flows)
{
    const char *specs[] = {"spline-ar(hidden=8, bins=5)", "spline-ar(hidden=8), spline-ar(hidden=4, bins=3); base=gmm(k=3, context=linear)",
                           "spline-ar(hidden=8); base=diag-normal(context=linear)"};
    for (int k = 0; k < 3; k++) {
        nf_flow *f;
        ck_assert_msg(nf_flow_create(&f, specs[k], 1, 2, 7) == NF_OK, "%s: %s", specs[k], nf_strerror_last());
        nf_rng *r = nf_rng_alloc(21, (uint64_t)k);
        for (size_t i = 0; i < f->P->n; i++) f->P->value[i] += (nf_real)(0.2 * nf_rng_normal(r));
        nf_rng_free(r);
        enum { M = 4 };
        nf_real x[M] = {-1.7, 0.3, 2.385, -0.05}, ctx[2 * M] = {0.4, -1.1, 1.3, 0.2, -0.6, 0.9, 0.1, 0.1}, ls[M];
        ck_assert_msg(nf_flow_log_survival(f, ls, x, ctx, M) == NF_OK, "%s: %s", specs[k], nf_strerror_last());
        gsl_integration_workspace *w = gsl_integration_workspace_alloc(1000);
        gsl_error_handler_t *old = gsl_set_error_handler_off(); /* float densities limit the accuracy */
        for (int i = 0; i < M; i++) {
            surv_q q = {f, ctx + 2 * i};
            gsl_function F = {surv_density, &q};
            double v, err;
            gsl_integration_qagiu(&F, x[i], sizeof(nf_real) == 8 ? 1e-10 : 1e-7, 1e-8, 1000, w, &v, &err);
            ck_assert_msg(fabs(ls[i] - log(v)) < (sizeof(nf_real) == 8 ? 1e-6 : 2e-4), "%s: log S(%g) = %g, quadrature %g",
                          specs[k], (double)x[i], (double)ls[i], log(v));
        }
        gsl_set_error_handler(old);
        gsl_integration_workspace_free(w);
#ifdef NF_DOUBLE
        /* L = sum_i u_i log S(x_i | c_i) */
        const double u[M] = {0.7, -1.3, 0.45, 2.1};
        nf_real dx[M] = {0}, dctx[2 * M] = {0}, du[M];
        for (int i = 0; i < M; i++) du[i] = u[i];
        nf_params_zero_grad(f->P);
        ck_assert_int_eq(nf_flow_log_survival(f, ls, x, ctx, M), NF_OK);
        ck_assert_int_eq(nf_flow_log_survival_backward(f, du, dx, dctx), NF_OK);
#define SURV_LOSS(out)                                                           \
    do {                                                                         \
        nf_flow_log_survival(f, ls, x, ctx, M);                                  \
        out = 0;                                                                 \
        for (int i_ = 0; i_ < M; i_++) out += u[i_] * ls[i_];                    \
    } while (0)
        const double h = 1e-6;
        for (size_t j = 0; j < f->P->n; j++) {
            double g = f->P->grad[j], lp, lm, keep = f->P->value[j];
            f->P->value[j] = keep + h;
            SURV_LOSS(lp);
            f->P->value[j] = keep - h;
            SURV_LOSS(lm);
            f->P->value[j] = keep;
            double fd = (lp - lm) / (2 * h);
            ck_assert_msg(fabs(g - fd) <= 1e-5 * (1 + fabs(fd)), "%s: d/dparam %zu: %g, fd %g", specs[k], j, g, fd);
        }
        for (int j = 0; j < M; j++) {
            double lp, lm, keep = x[j];
            x[j] = keep + h;
            SURV_LOSS(lp);
            x[j] = keep - h;
            SURV_LOSS(lm);
            x[j] = keep;
            ck_assert_msg(fabs(dx[j] - (lp - lm) / (2 * h)) <= 1e-5 * (1 + fabs(dx[j])), "%s: d/dx", specs[k]);
        }
        for (int j = 0; j < 2 * M; j++) {
            double lp, lm, keep = ctx[j];
            ctx[j] = keep + h;
            SURV_LOSS(lp);
            ctx[j] = keep - h;
            SURV_LOSS(lm);
            ctx[j] = keep;
            ck_assert_msg(fabs(dctx[j] - (lp - lm) / (2 * h)) <= 1e-5 * (1 + fabs(dctx[j])), "%s: d/dctx %d: %g, fd %g",
                          specs[k], j, (double)dctx[j], (lp - lm) / (2 * h));
        }
#undef SURV_LOSS
#endif
        nf_flow_free(f);
    }
    nf_flow *g;
    ck_assert_int_eq(nf_flow_create(&g, "affine-coupling(hidden=4)", 2, 0, 1), NF_OK);
    nf_real x2[2] = {0.1, 0.2}, o;
    ck_assert_int_eq(nf_flow_log_survival(g, &o, x2, NULL, 1), NF_EINVAL);
    nf_flow_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flow");
    TCase *tc = tcase_create("flow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, spec_errors_point_at_the_bad_part);
    tcase_add_test(tc, flows_share_one_store);
    tcase_add_test(tc, replicas_borrow_values_and_keep_their_gradients);
    tcase_add_test(tc, survival_of_1d_flows);
    tcase_add_test(tc, repeat_expands);
    tcase_add_test(tc, every_preset_builds_and_runs);
    tcase_add_test(tc, change_of_variables_by_hand);
    tcase_add_test(tc, samples_log_prob_agrees);
    tcase_add_test(tc, nll_step_is_mean_negative_log_prob);
#ifdef NF_DOUBLE
    tcase_add_test(tc, log_prob_matches_brute_force_jacobian);
    tcase_add_test(tc, log_prob_gradients);
    tcase_add_test(tc, sampling_direction_gradients);
#endif
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
