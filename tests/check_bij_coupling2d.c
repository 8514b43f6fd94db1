/* tests/check_bij_coupling2d.c - the image coupling step (flows/coupling2d.c).
 *
 * The table runs the shared checks (tests/testutil.c: round trip with a far-tail row, brute-force
 * Jacobian log-determinant, finite-difference gradients of parameters, inputs and context in both
 * directions) on small NHWC images (3 x 4 x 2 = 24 dims and others), both masks, both flips, both
 * scales, kernel sizes 1, 3, 5, with and without context, and with D larger than h*w*c so the
 * pass-through tail is inside every check.  The specific tests pin down what the table cannot see:
 * the exact identity at zero initialisation, which entries each mask conditions on and that a
 * transformed entry moves only itself, the tail copied bit for bit, the context reaching the
 * output, the soft clamp under huge conditioner outputs, and the options refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "flows/bijector.h"
#include "tests/testutil.h"

static const nf_bij_case cases[] = {
    /* checkerboard, 3 x 4 x 2 */
    {"coupling2d", "h=3,w=4,c=2,hidden=6", 24, 0, 0, 0, 0, 0},
    {"coupling2d", "h=3,w=4,c=2,hidden=6,flip=1", 24, 3, 0, 0, 0, 0},
    /* channel, 3 x 4 x 2 and 3 x 4 x 3 (odd c: 1 conditions 2, flipped 2 condition 1) */
    {"coupling2d", "h=3,w=4,c=2,mask=channel,hidden=6", 24, 2, 0, 0, 0, 0},
    {"coupling2d", "h=3,w=4,c=3,mask=channel,hidden=5", 36, 0, 0, 0, 0, 0},
    {"coupling2d", "h=3,w=4,c=3,mask=channel,flip=1,hidden=5,k=1", 36, 2, 0, 0, 0, 0},
    /* a pass-through tail after the image */
    {"coupling2d", "h=3,w=4,c=2,hidden=6,flip=1", 29, 0, 0, 0, 0, 0},
    {"coupling2d", "h=2,w=3,c=2,mask=channel,flip=1,hidden=4", 17, 3, 0, 0, 0, 0},
    /* Glow's sigmoid scale; kernel 5; another clamp */
    {"coupling2d", "h=2,w=3,c=2,hidden=6,scale=sigmoid", 15, 2, 0, 0, 0, 0},
    {"coupling2d", "h=3,w=2,c=3,mask=channel,hidden=4,k=5,clamp=1.5", 18, 1, 0, 0, 0, 0},
    {"coupling2d", "h=4,w=3,c=1,hidden=5,k=1,scale=sigmoid,flip=1", 12, 0, 0, 0, 0, 0},
    /* defaults: h = w = 1, c = D, the channel mask */
    {"coupling2d", "hidden=8", 5, 0, 0, 0, 0, 0},
    {"coupling2d", "hidden=8,flip=1", 6, 3, 2.2, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

/* ---- a bijector with its stores, for the specific tests ---- */

static int make(nf_test_bij *m, int D, int C, const char *opts, uint64_t seed, int n)
{
    return nf_test_bij_make(m, "coupling2d", D, C, opts, seed, n, 0);
}

START_TEST(test_zero_init_is_identity)
{
    const char *opts[] = {"h=3,w=4,c=2,hidden=8", "h=3,w=4,c=2,hidden=8,mask=channel,flip=1", "h=3,w=4,c=3,k=1"};
    enum { N = 5, D = 40, C = 2 };
    nf_real x[N * D], y[N * D], x2[N * D], ctx[N * C], ld[N], ld2[N];
    nf_test_fill_normal(x, N * D, 2.385, 3);
    nf_test_fill_normal(ctx, N * C, 1.7, 4);
    for (int o = 0; o < 3; o++) {
        nf_test_bij m;
        ck_assert_int_eq(make(&m, D, C, opts[o], 11, N), NF_OK);
        for (int i = 0; i < N; i++) ld[i] = ld2[i] = (nf_real)(0.375 * i - 1.2);
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
        for (int k = 0; k < N * D; k++)
            ck_assert_msg(y[k] == x[k], "%s: y[%d] = %.9g, x = %.9g", opts[o], k, (double)y[k], (double)x[k]);
        for (int i = 0; i < N; i++) ck_assert(ld[i] == (nf_real)(0.375 * i - 1.2));
        ck_assert_int_eq(m.b.type->inverse(&m.b, x2, ld2, y, ctx, N, m.ws), NF_OK);
        for (int k = 0; k < N * D; k++) ck_assert(x2[k] == x[k]);
        for (int i = 0; i < N; i++) ck_assert(ld2[i] == (nf_real)(0.375 * i - 1.2));
        nf_test_bij_free(&m);
    }
    /* Glow's sigmoid scale starts at sigmoid(2), not at 1: y_t = x_t sigmoid(2), log-det its log per entry */
    nf_test_bij m;
    ck_assert_int_eq(make(&m, 24, 0, "h=3,w=4,c=2,scale=sigmoid", 11, N), NF_OK);
    memset(ld, 0, sizeof ld);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
    const double s2 = 1 / (1 + exp(-2.0));
    for (int i = 0; i < N; i++) {
        ck_assert(fabs(ld[i] - 12 * log(s2)) < 1e-5);
        for (int p = 0; p < 12; p++)
            for (int ch = 0; ch < 2; ch++) {
                const int k = i * 24 + p * 2 + ch, odd = ((p / 4) + (p % 4)) & 1;
                ck_assert(fabs(y[k] - (odd ? x[k] * s2 : x[k])) < 1e-5 * (1 + fabs(y[k])));
            }
    }
    nf_test_bij_free(&m);
}
END_TEST

/* Which entries condition: y_c == x_c and the tail exactly, every y_t changed, and y_t depends on
 * x_t only through itself (perturbing one x_t entry moves that y entry and nothing else). */
START_TEST(test_mask_split)
{
    struct {
        const char *opts;
        int h, w, c, D;
    } rows[] = {
        {"h=3,w=4,c=2", 3, 4, 2, 27},
        {"h=3,w=4,c=2,flip=1", 3, 4, 2, 24},
        {"h=3,w=4,c=3,mask=channel", 3, 4, 3, 38},
        {"h=3,w=4,c=3,mask=channel,flip=1", 3, 4, 3, 36},
        {"h=2,w=2,c=4,mask=channel,k=1", 2, 2, 4, 17},
        {"h=1,w=5,c=1", 1, 5, 1, 6},
    };
    enum { N = 3, DMAX = 40 };
    nf_real x[N * DMAX], xp[N * DMAX], y[N * DMAX], y2[N * DMAX], ld[N] = {0};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const int D = rows[r].D, w = rows[r].w, c = rows[r].c, m_ = rows[r].h * w * c;
        const int flip = strstr(rows[r].opts, "flip=1") != NULL, channel = strstr(rows[r].opts, "channel") != NULL;
        char opts[96];
        snprintf(opts, sizeof opts, "hidden=10,%s", rows[r].opts);
        nf_test_bij m;
        ck_assert_int_eq(make(&m, D, 0, opts, 5, N), NF_OK);
        nf_test_perturb(m.P, 0.4, 77);
        nf_test_fill_normal(x, (size_t)N * D, 1.45, 8);
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
        char cond[DMAX];
        for (int e = 0; e < D; e++) {
            if (e >= m_) { cond[e] = 1; continue; }
            const int p = e / c, ch = e % c, i = p / w, j = p % w;
            if (channel) cond[e] = (ch < c / 2) != flip;
            else cond[e] = (((i + j) & 1) == 0) != flip;
        }
        for (int n = 0; n < N; n++)
            for (int e = 0; e < D; e++) {
                const int k = n * D + e;
                if (cond[e])
                    ck_assert_msg(y[k] == x[k], "%s D=%d: conditioning or tail entry %d changed", opts, D, e);
                else
                    ck_assert_msg(fabs(y[k] - x[k]) > 1e-4, "%s D=%d: transformed entry %d unchanged", opts, D, e);
            }
        for (int e = 0; e < D; e++) {
            if (cond[e]) continue;
            memcpy(xp, x, sizeof(nf_real) * N * D);
            for (int n = 0; n < N; n++) xp[n * D + e] += (nf_real)0.8125;
            ck_assert_int_eq(m.b.type->forward(&m.b, y2, ld, xp, NULL, N, m.ws), NF_OK);
            for (int n = 0; n < N; n++)
                for (int e2 = 0; e2 < D; e2++) {
                    const int k = n * D + e2;
                    if (e2 == e) ck_assert(y2[k] != y[k]);
                    else ck_assert_msg(y2[k] == y[k], "%s: y[%d] moved with x_t[%d]", opts, e2, e);
                }
        }
        /* and the transformed entries do depend on the conditioning ones (not on the tail) */
        int moved = 0;
        for (int e = 0; e < D; e++) {
            if (!cond[e]) continue;
            memcpy(xp, x, sizeof(nf_real) * N * D);
            xp[e] += (nf_real)0.8125;
            ck_assert_int_eq(m.b.type->forward(&m.b, y2, ld, xp, NULL, N, m.ws), NF_OK);
            int any = 0;
            for (int e2 = 0; e2 < D; e2++) any |= e2 != e && y2[e2] != y[e2];
            if (e >= m_) ck_assert_msg(!any, "%s: the tail entry %d moved other entries", opts, e);
            moved += any;
        }
        ck_assert_msg(moved > 0, "%s: no conditioning entry moves the transformed ones", opts);
        nf_test_bij_free(&m);
    }
}
END_TEST

/* A class context reaches the output: two classes give two different maps of the same x. */
START_TEST(test_context_matters)
{
    enum { N = 2, D = 24, C = 3 };
    nf_real x[N * D], y[N * D], ctx[N * C] = {1, 0, 0, 0, 0, 1}, ld[N] = {0};
    nf_test_fill_normal(x, D, 1.2, 8);
    memcpy(x + D, x, D * sizeof(nf_real));
    nf_test_bij m;
    ck_assert_int_eq(make(&m, D, C, "h=3,w=4,c=2,hidden=8", 5, N), NF_OK);
    nf_test_perturb(m.P, 0.3, 9);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
    double diff = 0;
    for (int e = 0; e < D; e++) diff += fabs(y[e] - y[D + e]);
    ck_assert_msg(diff > 1e-3, "the same image under two classes maps to the same latent (|diff| = %g)", diff);
    ck_assert(fabs(ld[0] - ld[1]) > 1e-6);
    ck_assert_ptr_nonnull(nf_params_find(m.P, "t0.net.ctx.weight"));
    nf_test_bij_free(&m);
}
END_TEST

/* Huge conditioner outputs: log-scales saturate at +-clamp; outputs, log-dets and the round trip stay finite. */
START_TEST(test_soft_clamp)
{
    enum { N = 3, D = 24 };
    const double clamp = 2.25;
    nf_real x[N * D], y[N * D], x2[N * D], ld[N], ld2[N];
    nf_test_fill_normal(x, N * D, 1.3, 9);
    for (int sign = -1; sign <= 1; sign += 2) {
        nf_test_bij m;
        ck_assert_int_eq(make(&m, D, 0, "h=3,w=4,c=2,mask=channel,hidden=8,clamp=2.25", 5, N), NF_OK);
        const nf_param_slice *bias = nf_params_find(m.P, "t0.net.out.bias");
        ck_assert_ptr_nonnull(bias);
        ck_assert_int_eq((int)bias->size, 2);
        m.P->value[bias->offset] = (nf_real)(sign * 3.7e4); /* the raw log-scale; column 1 is the shift */
        memset(ld, 0, sizeof ld);
        memset(ld2, 0, sizeof ld2);
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(fabs(ld[i] - sign * clamp * 12) < 1e-4, "logdet %g, expected %g", (double)ld[i],
                          sign * clamp * 12);
            for (int p = 0; p < 12; p++)
                ck_assert(fabs(y[i * D + 2 * p + 1] - x[i * D + 2 * p + 1] * exp(sign * clamp)) <
                          1e-4 * (1 + fabs(y[i * D + 2 * p + 1])));
        }
        ck_assert_int_eq(m.b.type->inverse(&m.b, x2, ld2, y, NULL, N, m.ws), NF_OK);
        for (int k = 0; k < N * D; k++) ck_assert(fabs(x2[k] - x[k]) < 1e-4 * (1 + fabs(x[k])));
        for (int i = 0; i < N; i++) ck_assert(fabs(ld[i] + ld2[i]) < 1e-4);
        nf_test_bij_free(&m);
    }
}
END_TEST

/* backward accumulates: called twice after one forward it adds the same gradients twice. */
START_TEST(test_backward_accumulates)
{
    enum { N = 3, D = 26, C = 2 };
    nf_real x[N * D], y[N * D], ctx[N * C], dy[N * D], u[N], ld[N] = {0}, dx[N * D] = {0}, dctx[N * C] = {0};
    nf_test_fill_normal(x, N * D, 1.1, 1);
    nf_test_fill_normal(ctx, N * C, 0.9, 2);
    nf_test_fill_normal(dy, N * D, 0.7, 3);
    nf_test_fill_normal(u, N, 0.8, 4);
    nf_test_bij m;
    ck_assert_int_eq(make(&m, D, C, "h=3,w=4,c=2,hidden=6", 5, N), NF_OK);
    nf_test_perturb(m.P, 0.3, 6);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
    nf_params_zero_grad(m.P);
    ck_assert_int_eq(m.b.type->backward(&m.b, dx, dctx, dy, u, x, y, ctx, N, m.ws), NF_OK);
    nf_real *g1 = malloc(m.P->n * sizeof(nf_real)), dx1[N * D], dctx1[N * C];
    memcpy(g1, m.P->grad, m.P->n * sizeof(nf_real));
    memcpy(dx1, dx, sizeof dx);
    memcpy(dctx1, dctx, sizeof dctx);
    ck_assert_int_eq(m.b.type->backward(&m.b, dx, dctx, dy, u, x, y, ctx, N, m.ws), NF_OK);
    for (size_t i = 0; i < m.P->n; i++) ck_assert(fabs(m.P->grad[i] - 2 * g1[i]) <= 1e-5 * (1 + fabs(g1[i])));
    for (int k = 0; k < N * D; k++) ck_assert(fabs(dx[k] - 2 * dx1[k]) <= 1e-5 * (1 + fabs(dx1[k])));
    for (int k = 0; k < N * C; k++) ck_assert(fabs(dctx[k] - 2 * dctx1[k]) <= 1e-5 * (1 + fabs(dctx1[k])));
    /* the tail's gradient is dy itself */
    for (int i = 0; i < N; i++)
        for (int k = 24; k < D; k++) ck_assert(dx1[i * D + k] == dy[i * D + k]);
    free(g1);
    nf_test_bij_free(&m);
}
END_TEST

START_TEST(test_bad_options)
{
    struct {
        const char *opts;
        int D;
        const char *says;
    } rows[] = {
        {"h=3,w=4,c=2", 23, "more than the dimension 23"},
        {"h=5,w=5", 24, "more than the dimension 24"},
        {"h=1,w=1,c=4,mask=checkerboard", 4, "at least 2 pixels"},
        {"h=2,w=2,c=1,mask=channel", 4, "c >= 2"},
        {"h=2,w=2,c=1,k=2", 4, "odd"},
        {"h=2,w=2,c=1,scale=sigmoid,clamp=2", 4, "clamp="},
        {"h=2,w=2,c=1,mask=stripes", 4, "mask"},
        {"h=2,w=2,c=1,depth=3", 4, "depth"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        nf_test_bij m;
        ck_assert_int_eq(make(&m, rows[r].D, 0, rows[r].opts, 1, 2), NF_EINVAL);
        ck_assert_msg(strstr(nf_strerror_last(), rows[r].says) != NULL, "%s: message '%s' does not say '%s'",
                      rows[r].opts, nf_strerror_last(), rows[r].says);
    }
    /* c defaults to D / (h*w), the rest of D passing through */
    nf_test_bij m;
    ck_assert_int_eq(make(&m, 24, 0, "h=3,w=4,mask=channel", 1, 2), NF_OK);
    nf_test_bij_free(&m);
    ck_assert_int_eq(make(&m, 27, 0, "h=3,w=4,mask=channel", 1, 2), NF_OK);
    nf_test_bij_free(&m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bij_coupling2d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_zero_init_is_identity);
    tcase_add_test(tc, test_mask_split);
    tcase_add_test(tc, test_context_matters);
    tcase_add_test(tc, test_soft_clamp);
    tcase_add_test(tc, test_backward_accumulates);
    tcase_add_test(tc, test_bad_options);
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
