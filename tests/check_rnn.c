/* tests/check_rnn.c - the tanh RNN over ragged batches (nn/rnn.h).
 *
 * Forward against a scalar double reference of h' = tanh(W_ih x + b_ih + W_hh h + b_hh) run one
 * sequence at a time, reading the parameters by name; the single-step API against forward; zero-
 * length sequences; and backpropagation through time (sequences of up to 6 steps) against fourth-
 * order central finite differences of L = sum(w * h) for every parameter entry, every input entry
 * and h0, in each initial-state mode, with gradients accumulating onto pre-filled buffers (tight in
 * the double build, float-sized in the float build).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "core/rng.h"
#include "nn/rnn.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-12
#define TOL_GRAD 1e-8
#define FD_STEP 1e-4
#else
#define TOL_FWD 2e-6
#define TOL_GRAD 4e-3
#define FD_STEP 1e-2
#endif

typedef struct rnn_case {
    nf_params *P;
    nf_rnn r;
    int I, H, B;
    int64_t T, *off;
    nf_real *x, *h, *ws, *w;
} rnn_case;

static void setup(rnn_case *c, int I, int H, nf_gru_h0 mode, const int *len, int B, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->P = nf_params_alloc();
    size_t other;
    ck_assert_int_eq(nf_params_add(c->P, "other", 5, &other), NF_OK); /* a slice before: offsets matter */
    nf_rng *rng = nf_rng_alloc(seed, 0);
    ck_assert_int_eq(nf_rnn_init(&c->r, c->P, "enc.rnn", I, H, mode, rng), NF_OK);
    if (mode != NF_GRU_H0_ZERO) nf_rng_fill_uniform(rng, c->P->value + c->r.h0, (size_t)H, -0.7, 0.7);
    c->I = I, c->H = H, c->B = B;
    c->off = malloc((size_t)(B + 1) * sizeof *c->off);
    c->off[0] = 0;
    for (int b = 0; b < B; b++) c->off[b + 1] = c->off[b] + len[b];
    c->T = c->off[B];
    c->x = malloc((size_t)(c->T ? c->T : 1) * I * sizeof *c->x);
    nf_rng_fill_uniform(rng, c->x, (size_t)c->T * I, -1.3, 1.3);
    c->h = malloc((size_t)(c->T + B) * H * sizeof *c->h);
    c->w = malloc((size_t)(c->T + B) * H * sizeof *c->w);
    nf_rng_fill_uniform(rng, c->w, (size_t)(c->T + B) * H, -1, 1);
    c->ws = malloc((nf_rnn_workspace(&c->r, c->T, B) + 1) * sizeof *c->ws);
    nf_rng_free(rng);
}

static void teardown(rnn_case *c)
{
    nf_params_free(c->P);
    free(c->off), free(c->x), free(c->h), free(c->w), free(c->ws);
}

static double loss(void *arg)
{
    rnn_case *c = arg;
    nf_rnn_forward(&c->r, c->P, c->ws, c->h, c->x, c->off, c->B);
    double L = 0;
    for (size_t i = 0; i < (size_t)(c->T + c->B) * c->H; i++) L += (double)c->w[i] * c->h[i];
    return L;
}

/* Each sequence alone, in double, from the parameters by name. */
START_TEST(test_forward_reference)
{
    const int len[5] = {4, 0, 6, 1, 3};
    for (int mode = 0; mode < 3; mode++) {
        rnn_case c;
        setup(&c, 3, 5, (nf_gru_h0)mode, len, 5, 10 + mode);
        nf_rnn_forward(&c.r, c.P, c.ws, c.h, c.x, c.off, c.B);
        const nf_real *Wi = c.P->value + nf_params_find(c.P, "enc.rnn.weight_ih")->offset;
        const nf_real *Wh = c.P->value + nf_params_find(c.P, "enc.rnn.weight_hh")->offset;
        const nf_real *bi = c.P->value + nf_params_find(c.P, "enc.rnn.bias_ih")->offset;
        const nf_real *bh = c.P->value + nf_params_find(c.P, "enc.rnn.bias_hh")->offset;
        const nf_real *h0 = mode ? c.P->value + nf_params_find(c.P, "enc.rnn.h0")->offset : NULL;
        const int H = c.H, I = c.I;
        for (int b = 0; b < c.B; b++) {
            double h[5], hn[5];
            for (int j = 0; j < H; j++) {
                double ctx = h0 ? h0[j] : 0;
                h[j] = mode == NF_GRU_H0_LEARNED ? ctx : 0;
                ck_assert(fabs(c.h[(size_t)(c.off[b] + b) * H + j] - ctx) < TOL_FWD);
            }
            for (int s = 0; s < len[b]; s++) {
                const nf_real *x = c.x + (size_t)(c.off[b] + s) * I;
                for (int j = 0; j < H; j++) {
                    double a = bi[j] + bh[j];
                    for (int i = 0; i < I; i++) a += (double)Wi[j * I + i] * x[i];
                    for (int i = 0; i < H; i++) a += (double)Wh[j * H + i] * h[i];
                    hn[j] = tanh(a);
                }
                memcpy(h, hn, sizeof h);
                for (int j = 0; j < H; j++) {
                    double got = c.h[(size_t)(c.off[b] + b + s + 1) * H + j];
                    ck_assert_msg(fabs(got - h[j]) < TOL_FWD, "mode %d seq %d step %d: %.15g vs %.15g", mode, b, s, got,
                                  h[j]);
                }
            }
        }
        teardown(&c);
    }
}
END_TEST

/* nf_rnn_step from nf_rnn_start reproduces forward's states, h_new = h in place. */
START_TEST(test_step)
{
    for (int mode = 0; mode < 3; mode++) {
        const int len[2] = {5, 5};
        rnn_case c;
        setup(&c, 2, 4, (nf_gru_h0)mode, len, 2, 30 + mode);
        nf_rnn_forward(&c.r, c.P, c.ws, c.h, c.x, c.off, c.B);
        const int H = c.H;
        nf_real ctx[4], st[8], xs[4], ws[16];
        ck_assert_int_eq((int)nf_rnn_step_workspace(&c.r, 2), 16);
        nf_rnn_start(&c.r, c.P, ctx, st);
        nf_rnn_start(&c.r, c.P, NULL, st + H);
        for (int j = 0; j < H; j++) ck_assert(ctx[j] == c.h[j]);
        for (int s = 0; s < 5; s++) {
            for (int i = 0; i < 2; i++) xs[i] = c.x[(c.off[0] + s) * 2 + i], xs[2 + i] = c.x[(c.off[1] + s) * 2 + i];
            nf_rnn_step(&c.r, c.P, ws, st, st, xs, 2);
            for (int j = 0; j < H; j++) {
                ck_assert(fabs(st[j] - c.h[(size_t)(c.off[0] + s + 1) * H + j]) < 1e-6);
                ck_assert(fabs(st[H + j] - c.h[(size_t)(c.off[1] + 1 + s + 1) * H + j]) < 1e-6);
            }
        }
        teardown(&c);
    }
}
END_TEST

/* Changing one sequence's inputs changes no other sequence's states. */
START_TEST(test_batch_is_separate)
{
    const int len[4] = {3, 5, 0, 2};
    rnn_case c;
    setup(&c, 2, 3, NF_GRU_H0_LEARNED, len, 4, 50);
    nf_rnn_forward(&c.r, c.P, c.ws, c.h, c.x, c.off, c.B);
    const size_t nh = (size_t)(c.T + c.B) * c.H;
    nf_real *h1 = malloc(nh * sizeof *h1);
    memcpy(h1, c.h, nh * sizeof *h1);
    c.x[(c.off[1] + 2) * c.I] += 0.5f;
    nf_rnn_forward(&c.r, c.P, c.ws, c.h, c.x, c.off, c.B);
    for (int b = 0; b < c.B; b++)
        for (int64_t k = c.off[b] + b; k <= c.off[b + 1] + b; k++)
            for (int j = 0; j < c.H; j++) {
                const int changed = b == 1 && k >= c.off[1] + 1 + 3;
                if (changed) ck_assert(c.h[k * c.H + j] != h1[k * c.H + j]);
                else ck_assert(c.h[k * c.H + j] == h1[k * c.H + j]);
            }
    free(h1);
    teardown(&c);
}
END_TEST

static double finite_diff(rnn_case *c, nf_real *t)
{
    const double h = FD_STEP, s = *t, off[4] = {2, 1, -1, -2};
    double v[4];
    for (int k = 0; k < 4; k++) {
        *t = (nf_real)(s + off[k] * h);
        v[k] = loss(c);
    }
    *t = (nf_real)s;
    return (-v[0] + 8 * v[1] - 8 * v[2] + v[3]) / (12 * h);
}

/* Every parameter entry and input entry through forward and backward over up to 6 steps. */
START_TEST(test_gradients)
{
    const int len[6] = {3, 0, 6, 1, 4, 2};
    for (int mode = 0; mode < 3; mode++) {
        rnn_case c;
        setup(&c, 3, 4, (nf_gru_h0)mode, len, 6, 70 + mode);
        nf_params *P = c.P;
        const size_t nx = (size_t)c.T * c.I;
        for (size_t i = 0; i < P->n; i++) P->grad[i] = (nf_real)0.375;
        nf_real *dx = malloc(nx * sizeof *dx);
        for (size_t i = 0; i < nx; i++) dx[i] = (nf_real)-0.625;
        loss(&c);
        nf_rnn_backward(&c.r, P, c.ws, dx, c.w, c.x, c.off, c.B);
        double *an = malloc((P->n + nx) * sizeof *an);
        for (size_t i = 0; i < P->n; i++) an[i] = P->grad[i] - 0.375;
        for (size_t i = 0; i < nx; i++) an[P->n + i] = dx[i] + 0.625;
        for (size_t i = 0; i < 5; i++) ck_assert(an[i] == 0); /* the other slice */
        for (size_t i = 5; i < P->n + nx; i++) {
            nf_real *t = i < P->n ? &P->value[i] : &c.x[i - P->n];
            const double fd = finite_diff(&c, t);
            const double e = fabs(an[i] - fd) / fmax(fmax(fabs(an[i]), fabs(fd)), 0.05);
            ck_assert_msg(e < TOL_GRAD, "mode %d, %s[%zu]: analytic %.12g, finite difference %.12g", mode,
                          i < P->n ? "theta" : "x", i < P->n ? i : i - P->n, an[i], fd);
        }
        for (size_t i = 5; i < P->n; i++) ck_assert_msg(an[i] != 0, "theta[%zu] has a zero gradient", i);
        free(dx), free(an);
        teardown(&c);
    }
}
END_TEST

START_TEST(test_init_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(1, 0);
    nf_rnn r;
    ck_assert_int_eq(nf_rnn_init(&r, P, "x", 0, 4, NF_GRU_H0_ZERO, rng), NF_EINVAL);
    ck_assert_int_eq(nf_rnn_init(&r, P, "x", 2, 4, (nf_gru_h0)7, rng), NF_EINVAL);
    ck_assert_int_eq(nf_rnn_init(&r, P, "x", 2, 4, NF_GRU_H0_ZERO, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_rnn_init(&r, P, "x", 2, 4, NF_GRU_H0_ZERO, rng), NF_OK);
    ck_assert_int_eq((int)P->n, 4 * 2 + 16 + 8);
    ck_assert_int_eq((int)nf_rnn_workspace(&r, 10, 3), 160);
    nf_rng_free(rng);
    nf_params_free(P);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rnn");
    TCase *t = tcase_create("rnn");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_forward_reference);
    tcase_add_test(t, test_step);
    tcase_add_test(t, test_batch_is_separate);
    tcase_add_test(t, test_gradients);
    tcase_add_test(t, test_init_errors);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
