/* tests/check_micro_batch.c - a flow's batch in micro-batches on per-thread replicas
 * (training/micro_batch.h): the log-densities and the gradient equal those of the batch in one pass
 * (up to float rounding in the gradient's sums), are the same numbers to the bit at any thread
 * count, come back the same on a second call (the accumulators start from zero), and a flow that
 * cannot have replicas, or whose rows a training pass ties together, runs the batch whole. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "flows/flow.h"
#include "tests/testutil.h"
#include "training/micro_batch.h"

enum { N = 13, D = 4, C = 2 };
static const char *const SPEC = "affine-coupling(hidden=8), permute(order=reverse), maf(hidden=8), "
                                "spline-coupling(hidden=8); base=diag-normal";

/* A flow with moved parameters, its data, context and dL/dlogp. */
static nf_flow *make_flow(nf_real *x, nf_real *ctx, nf_real *dl)
{
    nf_flow *f;
    ck_assert_int_eq(nf_flow_create(&f, SPEC, D, C, 3), NF_OK);
    nf_test_fill_normal(f->P->value, f->P->n, 0.1, 4);
    nf_test_fill_normal(x, N * D, 1.0, 5);
    nf_test_fill_normal(ctx, N * C, 0.5, 6);
    for (int i = 0; i < N; i++) dl[i] = (nf_real)(-1.0 / N * (1 + 0.1 * i));
    nf_flow_set_training(f, 1);
    return f;
}

START_TEST(micro_batches_equal_the_whole_batch_at_any_thread_count)
{
    nf_real x[N * D], ctx[N * C], dl[N], lw[N], lm[N];
    nf_flow *f = make_flow(x, ctx, dl);
    const size_t np = f->P->n;
    nf_real *gw = malloc(np * sizeof *gw), *g1 = malloc(np * sizeof *g1);
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_log_prob(f, lw, x, ctx, NULL, N), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, dl, NULL, NULL), NF_OK);
    memcpy(gw, f->P->grad, np * sizeof *gw);
    double scale = 0;
    for (size_t j = 0; j < np; j++) scale = fmax(scale, fabs(gw[j]));
    const int saved = nf_blas_get_threads();
    const int rows[] = {1, 2, 3, 5, N};
    for (int r = 0; r < 5; r++) {
        nf_micro_batches mb = {0};
        for (int threads = 1; threads <= 3; threads++)
            for (int call = 0; call < 2; call++) {
                nf_blas_set_threads(threads);
                nf_params_zero_grad(f->P);
                ck_assert_int_eq(nf_micro_batches_run(&mb, f, lm, x, ctx, NULL, dl, N, rows[r]), NF_OK);
                ck_assert_msg(!memcmp(lm, lw, sizeof lw), "rows %d: the log-densities differ", rows[r]);
                if (threads == 1 && call == 0) {
                    memcpy(g1, f->P->grad, np * sizeof *g1);
                    double worst = 0;
                    for (size_t j = 0; j < np; j++) worst = fmax(worst, fabs(g1[j] - gw[j]));
                    ck_assert_msg(worst <= (sizeof(nf_real) == 8 ? 1e-12 : 1e-5) * scale,
                                  "rows %d: gradient %g from the whole batch's (largest entry %g)", rows[r], worst, scale);
                } else {
                    ck_assert_msg(!memcmp(f->P->grad, g1, np * sizeof *g1), "rows %d, %d threads, call %d: other bits",
                                  rows[r], threads, call);
                }
            }
        nf_micro_batches_free(&mb);
    }
    nf_blas_set_threads(saved);
    free(gw), free(g1);
    nf_flow_free(f);
}
END_TEST

START_TEST(a_flow_without_replicas_runs_the_batch_whole)
{
    nf_real x[N * D], ctx[N * C], dl[N], lw[N], lm[N];
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    size_t off;
    ck_assert_int_eq(nf_params_add(P, "before", 3, &off), NF_OK);
    nf_flow *g, *f = make_flow(x, ctx, dl);
    ck_assert_int_eq(nf_flow_build(&g, SPEC, D, C, 3, P, S, ""), NF_OK);
    memcpy(P->value + 3, f->P->value, f->P->n * sizeof *P->value);
    nf_flow_set_training(g, 1);
    nf_params_zero_grad(f->P);
    nf_params_zero_grad(P);
    ck_assert_int_eq(nf_flow_log_prob(f, lw, x, ctx, NULL, N), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, dl, NULL, NULL), NF_OK);
    nf_micro_batches mb = {0};
    ck_assert_int_eq(nf_micro_batches_run(&mb, g, lm, x, ctx, NULL, dl, N, 2), NF_OK);
    ck_assert(mb.rep[0] == NULL);
    ck_assert(!memcmp(lm, lw, sizeof lw));
    ck_assert(!memcmp(P->grad + 3, f->P->grad, f->P->n * sizeof *P->grad));
    ck_assert_int_eq(nf_micro_batches_run(&mb, g, lm, x, ctx, NULL, dl, N, 0), NF_EINVAL);
    nf_micro_batches_free(&mb);
    nf_flow_free(g), nf_flow_free(f);
    nf_params_free(P), nf_params_free(S);
    /* a flow whose rows are tied together in training (batch statistics) */
    nf_flow *bn;
    ck_assert_int_eq(nf_flow_create(&bn, "batchnorm, affine-coupling(hidden=4)", D, 0, 1), NF_OK);
    nf_flow_set_training(bn, 1);
    ck_assert_int_eq(nf_flow_log_prob(bn, lw, x, NULL, NULL, N), NF_OK);
    nf_micro_batches mbn = {0};
    ck_assert_int_eq(nf_micro_batches_run(&mbn, bn, lm, x, NULL, NULL, dl, N, 2), NF_OK);
    ck_assert(mbn.rep[0] == NULL && !memcmp(lm, lw, sizeof lw));
    nf_micro_batches_free(&mbn);
    nf_flow_free(bn);
    ck_assert_int_eq(nf_micro_batch_rows(256, 0, 64), 4);
    ck_assert_int_eq(nf_micro_batch_rows(4096, 0, 16), 1);
    ck_assert_int_eq(nf_micro_batch_rows(64, 0, 10), 10);
    ck_assert_int_eq(nf_micro_batch_rows(64, 3, 10), 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("micro_batch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, micro_batches_equal_the_whole_batch_at_any_thread_count);
    tcase_add_test(tc, a_flow_without_replicas_runs_the_batch_whole);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
