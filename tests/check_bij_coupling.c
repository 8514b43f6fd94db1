/* tests/check_bij_coupling.c - affine and additive coupling, and fixed permutations.
 *
 * The table runs every row through the shared checks (round trip with a far-tail row, brute-force
 * Jacobian log-determinant, finite-difference gradients of parameters, inputs and context in both
 * directions); the specific tests pin down what the table cannot see: the exact identity at zero
 * initialisation, which dimensions each mask conditions on, the soft clamp under huge log-scales,
 * accumulation of gradients, and the permutation kept in the model state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "flows/bijector.h"
#include "tests/testutil.h"

static const nf_bij_case cases[] = {
    /* affine coupling: masks x flip x odd/even D x context x residual */
    {"affine-coupling", "hidden=8,layers=2,mask=halves", 4, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=halves,flip=1", 5, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=alt", 5, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=alt,flip=1", 4, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=halves,activation=tanh", 3, 2, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=1,mask=alt,flip=1,activation=tanh", 7, 3, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=halves,flip=1,residual=1,activation=tanh", 6, 2, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=1,mask=alt,residual=1", 5, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2,mask=alt,residual=1,activation=silu,clamp=1.7", 8, 1, 0, 0, 0, 0},
    {"affine-coupling", "hidden=6,layers=1,activation=elu,layer_norm=1", 4, 2, 0, 0, 0, 0},
    {"affine-coupling", "hidden=6,layers=1,activation=tanh,weight_norm=1,flip=1", 3, 0, 0, 0, 0, 0},
    {"affine-coupling", "hidden=8,layers=2", 2, 0, 2.9, 0, 0, 0},
    /* additive coupling */
    {"additive-coupling", "hidden=8,layers=2,mask=halves", 4, 0, 0, 0, 0, 0},
    {"additive-coupling", "hidden=8,layers=2,mask=halves,flip=1,activation=tanh", 5, 2, 0, 0, 0, 0},
    {"additive-coupling", "hidden=8,layers=2,mask=alt", 7, 0, 0, 0, 0, 0},
    {"additive-coupling", "hidden=8,layers=1,mask=alt,flip=1,residual=1", 6, 3, 0, 0, 0, 0},
    {"additive-coupling", "hidden=8,layers=2,mask=alt,residual=1,activation=gelu", 3, 1, 0, 0, 0, 0},
    /* permutations */
    {"permute", "", 5, 0, 0, 0, 0, 0},
    {"permute", "order=reverse", 4, 2, 0, 0, 0, 0},
    {"permute", "order=random", 8, 0, 0, 0, 0, 0},
    {"permute", "order=random,seed=2385", 7, 3, 0, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

/* ---- a bijector with its stores, for the specific tests ---- */

static int make(nf_test_bij *m, const char *type, int D, int C, const char *opts, uint64_t seed, int n)
{
    return nf_test_bij_make(m, type, D, C, opts, seed, n, 0);
}

START_TEST(test_zero_init_is_identity)
{
    const char *types[] = {"affine-coupling", "additive-coupling"};
    const char *opts[] = {"hidden=16,mask=halves", "hidden=16,mask=alt,flip=1,residual=1", "hidden=16,layers=3"};
    enum { N = 9, D = 5, C = 2 };
    nf_real x[N * D], y[N * D], x2[N * D], ctx[N * C], ld[N], ld2[N];
    nf_test_fill_normal(x, N * D, 2.385, 3);
    nf_test_fill_normal(ctx, N * C, 1.7, 4);
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 3; o++) {
            nf_test_bij m;
            ck_assert_int_eq(make(&m, types[t], D, C, opts[o], 11, N), NF_OK);
            for (int i = 0; i < N; i++) ld[i] = ld2[i] = (nf_real)(0.375 * i - 1.2);
            ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
            for (int k = 0; k < N * D; k++) ck_assert_msg(y[k] == x[k], "%s(%s): y[%d] = %.9g, x = %.9g", types[t],
                                                          opts[o], k, (double)y[k], (double)x[k]);
            for (int i = 0; i < N; i++) ck_assert(ld[i] == (nf_real)(0.375 * i - 1.2)); /* adds exactly 0 */
            ck_assert_int_eq(m.b.type->inverse(&m.b, x2, ld2, y, ctx, N, m.ws), NF_OK);
            for (int k = 0; k < N * D; k++) ck_assert(x2[k] == x[k]);
            for (int i = 0; i < N; i++) ck_assert(ld2[i] == (nf_real)(0.375 * i - 1.2));
            nf_test_bij_free(&m);
        }
}
END_TEST

/* Which dimensions condition: y_c == x_c exactly, every y_t changed, and y_t[k] depends on x_t only
 * through x_t[k] (perturbing x_t[k] moves y_t[k] and nothing else). */
START_TEST(test_mask_split)
{
    struct {
        const char *opts;
        int D;
        const char *cond; /* '1' where the dimension conditions */
    } rows[] = {
        {"mask=halves", 5, "11000"},        {"mask=halves,flip=1", 5, "00111"}, {"mask=alt", 5, "10101"},
        {"mask=alt,flip=1", 5, "01010"},    {"mask=halves", 6, "111000"},       {"mask=alt,flip=1", 6, "010101"},
        {"mask=halves", 2, "10"},           {"mask=alt,flip=1", 2, "01"},
    };
    const char *types[] = {"affine-coupling", "additive-coupling"};
    enum { N = 4, DMAX = 6 };
    nf_real x[N * DMAX], xp[N * DMAX], y[N * DMAX], y2[N * DMAX], ld[N] = {0};
    for (int t = 0; t < 2; t++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            int D = rows[r].D;
            char opts[96];
            snprintf(opts, sizeof opts, "hidden=12,activation=tanh,%s", rows[r].opts);
            nf_test_bij m;
            ck_assert_int_eq(make(&m, types[t], D, 0, opts, 5, N), NF_OK);
            nf_test_perturb(m.P, 0.4, 77);
            nf_test_fill_normal(x, (size_t)N * D, 1.45, 8);
            ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
            for (int i = 0; i < N; i++)
                for (int j = 0; j < D; j++) {
                    int k = i * D + j;
                    if (rows[r].cond[j] == '1')
                        ck_assert_msg(y[k] == x[k], "%s(%s) D=%d: conditioning dim %d changed", types[t], opts, D, j);
                    else
                        ck_assert_msg(fabs(y[k] - x[k]) > 1e-4, "%s(%s) D=%d: transformed dim %d unchanged", types[t],
                                      opts, D, j);
                }
            /* triangular structure */
            for (int j = 0; j < D; j++) {
                if (rows[r].cond[j] == '1') continue;
                memcpy(xp, x, sizeof xp);
                for (int i = 0; i < N; i++) xp[i * D + j] += (nf_real)0.8125;
                ck_assert_int_eq(m.b.type->forward(&m.b, y2, ld, xp, NULL, N, m.ws), NF_OK);
                for (int i = 0; i < N; i++)
                    for (int j2 = 0; j2 < D; j2++) {
                        int k = i * D + j2;
                        if (j2 == j) ck_assert(y2[k] != y[k]);
                        else ck_assert_msg(y2[k] == y[k], "%s(%s): y[%d] moved with x_t[%d]", types[t], opts, j2, j);
                    }
            }
            nf_test_bij_free(&m);
        }
}
END_TEST

/* Huge conditioner outputs: log-scales saturate at +-clamp, outputs and log-dets stay finite. */
START_TEST(test_soft_clamp)
{
    enum { N = 5, D = 4 };
    const double clamp = 2.25;
    nf_real x[N * D], y[N * D], x2[N * D], ld[N], ld2[N];
    nf_test_fill_normal(x, N * D, 1.3, 9);
    for (int sign = -1; sign <= 1; sign += 2) {
        nf_test_bij m;
        ck_assert_int_eq(make(&m, "affine-coupling", D, 0, "hidden=8,clamp=2.25", 5, N), NF_OK);
        const nf_param_slice *bias = nf_params_find(m.P, "t0.net.out.bias");
        ck_assert_ptr_nonnull(bias);
        ck_assert_int_eq((int)bias->size, 2 * (D / 2));
        for (size_t k = 1; k < bias->size; k += 2) m.P->value[bias->offset + k] = (nf_real)(sign * 3.7e4);
        memset(ld, 0, sizeof ld);
        memset(ld2, 0, sizeof ld2);
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
        for (int i = 0; i < N; i++) {
            ck_assert(isfinite(ld[i]));
            ck_assert_msg(fabs(ld[i] - sign * clamp * (D / 2)) < 1e-5, "logdet %g, expected %g", (double)ld[i],
                          sign * clamp * (D / 2));
            for (int j = D / 2; j < D; j++)
                ck_assert(fabs(y[i * D + j] - x[i * D + j] * exp(sign * clamp)) < 1e-4 * (1 + fabs(y[i * D + j])));
        }
        ck_assert_int_eq(m.b.type->inverse(&m.b, x2, ld2, y, NULL, N, m.ws), NF_OK);
        for (int k = 0; k < N * D; k++) ck_assert(fabs(x2[k] - x[k]) < 1e-4 * (1 + fabs(x[k])));
        for (int i = 0; i < N; i++) ck_assert(fabs(ld[i] + ld2[i]) < 1e-4);
        nf_test_bij_free(&m);
    }
}
END_TEST

/* Non-finite inputs are reported, never passed on. */
START_TEST(test_nonfinite_reported)
{
    const char *types[] = {"affine-coupling", "additive-coupling", "permute"};
    enum { N = 3, D = 4 };
    nf_real x[N * D], y[N * D], ld[N] = {0};
    for (int t = 0; t < 3; t++) {
        nf_test_bij m;
        ck_assert_int_eq(make(&m, types[t], D, 0, "", 5, N), NF_OK);
        nf_test_fill_normal(x, N * D, 1.1, 2);
        x[1 * D + 3] = (nf_real)NAN;
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_ENONFINITE);
        ck_assert_ptr_nonnull(strstr(nf_strerror_last(), types[t]));
        ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "row 1"));
        x[1 * D + 3] = (nf_real)INFINITY;
        ck_assert_int_eq(m.b.type->inverse(&m.b, y, ld, x, NULL, N, m.ws), NF_ENONFINITE);
        nf_test_bij_free(&m);
    }
}
END_TEST

START_TEST(test_bad_options)
{
    nf_test_bij m;
    ck_assert_int_eq(make(&m, "affine-coupling", 1, 0, "", 5, 4), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "at least 2"));
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "affine-coupling"));
    ck_assert_int_eq(make(&m, "additive-coupling", 1, 3, "", 5, 4), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "additive-coupling"));
    ck_assert_int_eq(make(&m, "affine-coupling", 4, 0, "mask=diagonal", 5, 4), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "halves|alt"));
    ck_assert_int_eq(make(&m, "affine-coupling", 4, 0, "clamp=-2", 5, 4), NF_EINVAL);
    ck_assert_int_eq(make(&m, "affine-coupling", 4, 0, "activation=swishy", 5, 4), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "swishy"));
    ck_assert_int_eq(make(&m, "additive-coupling", 4, 0, "clamp=2", 5, 4), NF_EINVAL); /* affine only */
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "clamp"));
    ck_assert_int_eq(make(&m, "permute", 4, 0, "order=reverse,seed=3", 5, 4), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "seed"));
    ck_assert_int_eq(make(&m, "permute", 4, 0, "order=sorted", 5, 4), NF_EINVAL);
}
END_TEST

/* backward adds into dx, dctx and P->grad: running it on pre-filled buffers adds the same amounts. */
START_TEST(test_backward_accumulates)
{
    const char *types[] = {"affine-coupling", "additive-coupling"};
    enum { N = 4, D = 5, C = 2 };
    nf_real x[N * D], y[N * D], ctx[N * C], dy[N * D], u[N], ld[N] = {0};
    nf_real dx0[N * D], dc0[N * C], dx1[N * D], dc1[N * C];
    nf_test_fill_normal(x, N * D, 1.2, 1);
    nf_test_fill_normal(ctx, N * C, 0.9, 2);
    nf_test_fill_normal(dy, N * D, 0.6, 3);
    nf_test_fill_normal(u, N, 0.7, 4);
    for (int t = 0; t < 2; t++)
        for (int dir = 0; dir < 2; dir++) {
            nf_test_bij m;
            ck_assert_int_eq(make(&m, types[t], D, C, "hidden=8,mask=alt", 6, N), NF_OK);
            nf_test_perturb(m.P, 0.3, 12);
            int rc = dir ? m.b.type->inverse(&m.b, y, ld, x, ctx, N, m.ws) : m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws);
            ck_assert_int_eq(rc, NF_OK);
            memset(dx0, 0, sizeof dx0);
            memset(dc0, 0, sizeof dc0);
            nf_params_zero_grad(m.P);
            if (dir) m.b.type->inverse_backward(&m.b, dx0, dc0, dy, u, x, y, ctx, N, m.ws);
            else m.b.type->backward(&m.b, dx0, dc0, dy, u, x, y, ctx, N, m.ws);
            nf_real *g0 = calloc(m.P->n, sizeof(nf_real));
            memcpy(g0, m.P->grad, m.P->n * sizeof(nf_real));
            for (int k = 0; k < N * D; k++) dx1[k] = (nf_real)(0.125 * k - 0.5);
            for (int k = 0; k < N * C; k++) dc1[k] = (nf_real)(1.5 - 0.25 * k);
            if (dir) m.b.type->inverse_backward(&m.b, dx1, dc1, dy, u, x, y, ctx, N, m.ws);
            else m.b.type->backward(&m.b, dx1, dc1, dy, u, x, y, ctx, N, m.ws);
            double tol = 1e-5;
            for (int k = 0; k < N * D; k++) ck_assert(fabs(dx1[k] - (0.125 * k - 0.5) - dx0[k]) < tol);
            for (int k = 0; k < N * C; k++) ck_assert(fabs(dc1[k] - (1.5 - 0.25 * k) - dc0[k]) < tol);
            int nonzero = 0;
            for (size_t p = 0; p < m.P->n; p++) {
                ck_assert(fabs(m.P->grad[p] - 2 * g0[p]) < tol * (1 + fabs(g0[p])));
                nonzero += g0[p] != 0;
            }
            ck_assert_int_gt(nonzero, (int)m.P->n / 4);
            free(g0);
            nf_test_bij_free(&m);
        }
}
END_TEST

/* The permutation: reverse is exact, random ones are seeded, and the map follows the state store. */
START_TEST(test_permute_state)
{
    enum { N = 3, D = 6 };
    nf_real x[N * D], y[N * D], x2[N * D], ld[N] = {0};
    for (int k = 0; k < N * D; k++) x[k] = (nf_real)(1.25 * k - 3.5);
    nf_test_bij m;
    ck_assert_int_eq(make(&m, "permute", D, 0, "order=reverse", 5, N), NF_OK);
    ck_assert_ptr_nonnull(nf_params_find(m.S, "t0.perm"));
    ck_assert_int_eq((int)m.P->n, 0);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) ck_assert(y[i * D + j] == x[i * D + D - 1 - j]);
    /* a reloaded state (another valid permutation) is followed exactly */
    const int q[D] = {2, 0, 5, 1, 3, 4};
    for (int j = 0; j < D; j++) m.S->value[j] = (nf_real)q[j];
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) ck_assert(y[i * D + j] == x[i * D + q[j]]);
    ck_assert_int_eq(m.b.type->inverse(&m.b, x2, ld, y, NULL, N, m.ws), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(x2[k] == x[k]);
    /* a corrupt one is refused: a repeated index, then a fraction */
    m.S->value[3] = 5;
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "permut"));
    m.S->value[3] = (nf_real)1.5;
    ck_assert_int_eq(m.b.type->inverse(&m.b, y, ld, x, NULL, N, m.ws), NF_EDATA);
    m.S->value[3] = 1;
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
    for (int i = 0; i < N; i++) ck_assert(ld[i] == 0);
    nf_test_bij_free(&m);

    /* random: the same seed gives the same permutation, whether from seed= or from the rng */
    nf_real p[4][64];
    const char *opts[4] = {"order=random,seed=2385", "order=random,seed=2385", "order=random,seed=2386", "order=random"};
    const uint64_t rseed[4] = {1, 2, 1, 1};
    for (int r = 0; r < 4; r++) {
        nf_test_bij mm;
        ck_assert_int_eq(make(&mm, "permute", 64, 0, opts[r], rseed[r], 1), NF_OK);
        memcpy(p[r], mm.S->value, sizeof p[r]);
        int seen[64] = {0};
        for (int j = 0; j < 64; j++) seen[(int)p[r][j]]++;
        for (int j = 0; j < 64; j++) ck_assert_int_eq(seen[j], 1);
        nf_test_bij_free(&mm);
    }
    ck_assert(memcmp(p[0], p[1], sizeof p[0]) == 0); /* seed= overrides the flow's rng */
    ck_assert(memcmp(p[0], p[2], sizeof p[0]) != 0);
    ck_assert(memcmp(p[0], p[3], sizeof p[0]) != 0);
    nf_test_bij again;
    ck_assert_int_eq(make(&again, "permute", 64, 0, "order=random", 1, 1), NF_OK);
    ck_assert(memcmp(again.S->value, p[3], sizeof p[3]) == 0);
    nf_test_bij_free(&again);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bij_coupling");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_zero_init_is_identity);
    tcase_add_test(tc, test_mask_split);
    tcase_add_test(tc, test_soft_clamp);
    tcase_add_test(tc, test_nonfinite_reported);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_backward_accumulates);
    tcase_add_test(tc, test_permute_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
