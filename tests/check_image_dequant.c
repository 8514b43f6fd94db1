/* tests/check_image_dequant.c - variational dequantisation of the image kind (training/image_dequant.h,
 * training/model_image.h): the full loss's gradient over every parameter (flow and dequantiser)
 * against finite differences; log q(u | x) against a brute-force Jacobian; the bound is a bound on a
 * known discrete distribution and, trained as long, beats uniform dequantisation; a batch split in
 * two (two processes) gives the loss and gradient of the whole; evaluation does not depend on the
 * batch; model files round-trip; the likelihood classifier scores with the bound; bad settings are
 * refused by name. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "training/image_dequant.h"
#include "training/model_file.h"
#include "training/model_image.h"
#include "training/trainer.h"

static const double LN2 = 0.69314718055994530942;
#ifdef NF_DOUBLE
#define FD_H 1e-6
#define FD_REL 1e-5
#define FD_EPS DBL_EPSILON
#else
#define FD_H 0x1p-8  /* about cbrt(FLT_EPSILON): truncation and rounding errors balance */
#define FD_REL 2e-2
#define FD_EPS FLT_EPSILON
#endif

/* A small variational model: 4x4x2 images of 5 levels, 3 classes with label dropout and noise
 * augmentation (every path of the loss), a flat coupling flow, a 3-coupling dequantiser. */
static nf_image_config small_config(void)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = 4, c.w = 4, c.c = 2, c.levels = 5, c.classes = 3, c.arch = NF_IMAGE_SPEC, c.noise = 0.03, c.label_drop = 0.3;
    snprintf(c.spec, sizeof c.spec, "affine-coupling(hidden=6), actnorm, affine-coupling(hidden=6,flip=1)");
    c.dequant = NF_DEQUANT_VARIATIONAL, c.dequant_layers = 3, c.dequant_hidden = 4;
    return c;
}

static void random_images(nf_real *x, nf_real *ctx, size_t *idx, int n, int D, int L, int K, nf_rng *r)
{
    for (int i = 0; i < n; i++) {
        if (idx) idx[i] = (size_t)(3 * i + 1);
        if (ctx)
            for (int k = 0; k < K; k++) ctx[i * K + k] = k == i % K;
        for (int k = 0; k < D; k++) x[i * D + k] = (nf_real)nf_rng_index(r, (uint64_t)L);
    }
}

/* The loss keys its noise by a count of draws in the model's state: every call here restores the
 * state the first call left (ActNorm initialised, the count advanced), so all see the same draws. */
typedef struct {
    nf_model *m;
    const nf_batch *b;
    nf_real *S;
} fixed_loss;

static void fixed_init(fixed_loss *f, nf_model *m, const nf_batch *b)
{
    double loss;
    f->m = m, f->b = b;
    ck_assert_msg(m->type->loss(m, b, NULL, &loss) == NF_OK, "%s", nf_strerror_last());
    f->S = malloc(m->S->n * sizeof *f->S);
    memcpy(f->S, m->S->value, m->S->n * sizeof *f->S);
    nf_params_zero_grad(m->P);
}

static double fixed_loss_at(fixed_loss *f, const nf_batch *b)
{
    double loss;
    memcpy(f->m->S->value, f->S, f->m->S->n * sizeof *f->S);
    ck_assert_msg(f->m->type->loss(f->m, b ? b : f->b, NULL, &loss) == NF_OK, "%s", nf_strerror_last());
    return loss;
}

static const char *name_of(const nf_params *P, size_t j)
{
    for (size_t k = 0; k < P->nslices; k++)
        if (j >= P->slices[k].offset && j < P->slices[k].offset + P->slices[k].size) return P->slices[k].name;
    return "?";
}

/* Central differences of the mean variational bits/dim over EVERY entry of P (the flow's and the
 * dequantiser's) against P->grad, with the same noise each time.  Double: h = 1e-6, 1e-5 relative;
 * float: h = 2^-8, 2e-2 relative plus the rounding floor 16 eps |L| / h. */
START_TEST(variational_loss_gradient_matches_finite_differences)
{
    nf_image_config c = small_config();
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 4, D = 32, K = 3 };
    nf_real x[N * D], ctx[N * K];
    size_t idx[N];
    nf_rng *r = nf_rng_alloc(2385, 0);
    random_images(x, ctx, idx, N, D, 5, K, r);
    /* off the zero initialisation of the last layers, so every weight has a gradient */
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += (nf_real)(0.3 * (nf_rng_uniform(r) - 0.5));
    nf_batch b = {.n = N, .idx = idx, .dim = D, .ctx_dim = K, .x = x, .ctx = ctx};
    fixed_loss f;
    fixed_init(&f, m, &b);
    nf_params_zero_grad(m->P);
    double loss = fixed_loss_at(&f, NULL);
    ck_assert(isfinite(loss) && loss > 0);
    nf_real *an = malloc(m->P->n * sizeof *an);
    memcpy(an, m->P->grad, m->P->n * sizeof *an);
    size_t n_deq = 0, nonzero_deq = 0, bad = 0;
    double worst = 0;
    for (size_t j = 0; j < m->P->n; j++) {
        const nf_real v = m->P->value[j];
        m->P->value[j] = v + (nf_real)FD_H;
        double lp = fixed_loss_at(&f, NULL);
        m->P->value[j] = v - (nf_real)FD_H;
        double lm = fixed_loss_at(&f, NULL);
        m->P->value[j] = v;
        double fd = (lp - lm) / (2 * FD_H), err = fabs(fd - an[j]);
        double tol = FD_REL * fmax(fabs(fd), fabs(an[j])) + 16 * FD_EPS * fabs(loss) / FD_H + 1e-12;
        if (err / tol > worst) worst = err / tol;
        if (err > tol && bad++ < 5)
            fprintf(stderr, "parameter %zu (%s): finite difference %.9g, gradient %.9g\n", j, name_of(m->P, j), fd, an[j]);
        if (!strncmp(name_of(m->P, j), "dequant.", 8)) n_deq++, nonzero_deq += an[j] != 0;
    }
    ck_assert_msg(bad == 0, "%zu of %zu gradient entries off (worst error %.3g of its tolerance)", bad, m->P->n, worst);
    /* all but the first coupling's weights on its (zeroed) chain input and dead ReLUs' */
    ck_assert_msg(n_deq > 500 && nonzero_deq > n_deq * 7 / 10, "%zu of %zu dequantiser entries have a gradient", nonzero_deq,
                  n_deq);
    free(an), free(f.S);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* log|det A| of a k x k matrix by Gaussian elimination with partial pivoting, in double. */
static double log_abs_det(double *A, int k)
{
    double s = 0;
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int i = c + 1; i < k; i++)
            if (fabs(A[i * k + c]) > fabs(A[p * k + c])) p = i;
        if (p != c)
            for (int j = 0; j < k; j++) {
                double t = A[c * k + j];
                A[c * k + j] = A[p * k + j], A[p * k + j] = t;
            }
        s += log(fabs(A[c * k + c]));
        for (int i = c + 1; i < k; i++) {
            double f = A[i * k + c] / A[c * k + c];
            for (int j = c; j < k; j++) A[i * k + j] -= f * A[c * k + j];
        }
    }
    return s;
}

/* On a 2x2x2 image (D = 8), log q(u | x) = log q(v | x) - sum log sigmoid'(v) from the dequantiser
 * against log N(eps) - log|det du/deps| with du/deps by central differences; and the dequantiser
 * reads x (another image moves v). */
START_TEST(log_q_matches_a_brute_force_jacobian)
{
    enum { H = 2, W = 2, C = 2, D = H * W * C };
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(77, 0);
    nf_image_dequant q;
    ck_assert_int_eq(nf_image_dequant_init(&q, P, H, W, C, 4, 5, r), NF_OK);
    for (size_t j = 0; j < P->n; j++) P->value[j] += (nf_real)(0.6 * (nf_rng_uniform(r) - 0.5));
    nf_real eps[D], x0[D], v[D], lq[1], e2[D], v2[D], lq2[1];
    for (int k = 0; k < D; k++) eps[k] = (nf_real)nf_rng_normal(r), x0[k] = (nf_real)(nf_rng_index(r, 7) / 7.0 + 1 / 14.0 - 0.5);
    ck_assert_int_eq(nf_image_dequant_forward(&q, P, v, lq, eps, x0, 1), NF_OK);
    double lqu = lq[0], e2sum = 0;
    for (int k = 0; k < D; k++) lqu -= nf_log_sigmoid_deriv(v[k]), e2sum += (double)eps[k] * eps[k];
    const double h = sizeof(nf_real) == 8 ? 1e-5 : 0x1p-7;
    double J[D * D];
    for (int j = 0; j < D; j++) {
        double up[D], dn[D];
        for (int s = 0; s < 2; s++) {
            memcpy(e2, eps, sizeof e2);
            e2[j] = (nf_real)(eps[j] + (s ? -h : h));
            ck_assert_int_eq(nf_image_dequant_forward(&q, P, v2, lq2, e2, x0, 1), NF_OK);
            for (int k = 0; k < D; k++) (s ? dn : up)[k] = 1 / (1 + exp(-(double)v2[k]));
        }
        for (int k = 0; k < D; k++) J[k * D + j] = (up[k] - dn[k]) / (2 * h);
    }
    const double want = -0.5 * e2sum - 0.5 * D * log(2 * 3.14159265358979323846) - log_abs_det(J, D);
    const double tol = sizeof(nf_real) == 8 ? 1e-7 : 2e-2;
    ck_assert_msg(fabs(lqu - want) < tol * (1 + fabs(want)), "log q(u | x) %.9g, brute force %.9g", lqu, want);
    /* the couplings are not a fixed map: a far-off x0 gives another v */
    for (int k = 0; k < D; k++) x0[k] = -x0[k];
    ck_assert_int_eq(nf_image_dequant_forward(&q, P, v2, lq2, eps, x0, 1), NF_OK);
    double moved = 0;
    for (int k = 0; k < D; k++) moved = fmax(moved, fabs(v2[k] - v[k]));
    ck_assert_msg(moved > 1e-2, "v moved by %g when x changed", moved);
    nf_image_dequant_free(&q);
    nf_rng_free(r);
    nf_params_free(P);
}
END_TEST

/* Two processes each holding half of a batch: the mean of their losses is the whole batch's loss
 * and the sum of their (half-batch) gradients, halved, its gradient - the noise is keyed by image
 * index and draw count, never by position in a batch.  And evaluation is the same in any batch size. */
START_TEST(split_batches_give_the_whole_batch)
{
    nf_image_config c = small_config();
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 6, D = 32, K = 3 };
    nf_real x[N * D], ctx[N * K];
    size_t idx[N];
    nf_rng *r = nf_rng_alloc(19, 0);
    random_images(x, ctx, idx, N, D, 5, K, r);
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += (nf_real)(0.2 * (nf_rng_uniform(r) - 0.5));
    nf_batch b = {.n = N, .idx = idx, .dim = D, .ctx_dim = K, .x = x, .ctx = ctx};
    nf_batch b1 = {.n = N / 2, .idx = idx, .dim = D, .ctx_dim = K, .x = x, .ctx = ctx};
    nf_batch b2 = {.n = N / 2, .idx = idx + N / 2, .dim = D, .ctx_dim = K, .x = x + N / 2 * D, .ctx = ctx + N / 2 * K};
    fixed_loss f;
    fixed_init(&f, m, &b);
    nf_params_zero_grad(m->P);
    double whole = fixed_loss_at(&f, NULL);
    nf_real *g = malloc(m->P->n * sizeof *g);
    memcpy(g, m->P->grad, m->P->n * sizeof *g);
    nf_params_zero_grad(m->P);
    double half = (fixed_loss_at(&f, &b1) + fixed_loss_at(&f, &b2)) / 2;
    const double tol = sizeof(nf_real) == 8 ? 1e-12 : 1e-5;
    ck_assert_msg(fabs(whole - half) < tol * (1 + whole), "whole batch %.12g, halves %.12g", whole, half);
    for (size_t j = 0; j < m->P->n; j++)
        ck_assert_msg(fabs(g[j] - m->P->grad[j] / 2) < 10 * tol * (1 + fabs(g[j])), "entry %zu (%s): %g whole, %g halves", j,
                      name_of(m->P, j), g[j], m->P->grad[j] / 2);
    free(g), free(f.S);

    nf_source *src;
    enum { M = 50 };
    nf_real *xs = malloc(sizeof(nf_real) * M * D), *cs = malloc(sizeof(nf_real) * M * K);
    random_images(xs, cs, NULL, M, D, 5, K, r);
    ck_assert_int_eq(nf_source_rows_wrap(&src, xs, cs, M, D, K), NF_OK);
    double e1, e2;
    nf_model_set_training(m, 0);
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 64, NULL, &e1, NULL, NULL), NF_OK);
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 7, NULL, &e2, NULL, NULL), NF_OK);
    ck_assert_msg(fabs(e1 - e2) < tol * (1 + fabs(e1)), "evaluation in batches of 64: %.12g, of 7: %.12g", e1, e2);
    nf_source_free(src);
    free(xs), free(cs);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* 2x2 binary images drawn from four patterns of known probabilities: entropy H bits per image.  Both
 * dequantisations give numbers above H / D (bounds), and the variational one, trained with the same
 * flow and steps, ends lower than the uniform one. */
START_TEST(variational_bound_is_a_bound_and_beats_uniform)
{
    enum { N = 4000, D = 4 };
    static const int PAT[4][D] = {{0, 0, 0, 0}, {1, 1, 0, 0}, {1, 0, 1, 0}, {1, 1, 1, 1}};
    static const double PR[4] = {0.4, 0.3, 0.2, 0.1};
    double H = 0;
    for (int k = 0; k < 4; k++) H -= PR[k] * log2(PR[k]);
    nf_real *x = malloc(sizeof(nf_real) * N * D);
    nf_rng *r = nf_rng_alloc(1234, 0);
    for (int i = 0; i < N; i++) {
        double u = nf_rng_uniform(r), acc = 0;
        int k = 0;
        while (k < 3 && u > (acc += PR[k])) k++;
        for (int d = 0; d < D; d++) x[i * D + d] = (nf_real)PAT[k][d];
    }
    nf_source *all, *train, *val;
    ck_assert_int_eq(nf_source_rows_wrap(&all, x, NULL, N, D, 0), NF_OK);
    ck_assert_int_eq(nf_source_split(all, 0.25, 1, &val, &train), NF_OK);
    double bpd[2], se[2];
    for (int vd = 0; vd < 2; vd++) {
        nf_image_config c;
        nf_image_config_init(&c);
        c.h = 2, c.w = 2, c.c = 1, c.levels = 2, c.arch = NF_IMAGE_SPEC;
        snprintf(c.spec, sizeof c.spec, "3*(affine-coupling(hidden=32), affine-coupling(hidden=32,flip=1))");
        c.dequant = vd ? NF_DEQUANT_VARIATIONAL : NF_DEQUANT_UNIFORM, c.dequant_layers = 3, c.dequant_hidden = 16;
        nf_model *m;
        ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
        nf_train_config tc;
        nf_train_config_init(&tc);
        tc.max_steps = 600, tc.batch = 64, tc.eval_every = 0, tc.optim.lr = 3e-3;
        nf_trainer *t;
        ck_assert_msg(nf_trainer_create(&t, m, &tc, train, NULL) == NF_OK, "%s", nf_strerror_last());
        ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
        nf_model_set_training(m, 0);
        ck_assert_int_eq(nf_model_evaluate(m, val, 0, 256, NULL, &bpd[vd], &se[vd], NULL), NF_OK);
        bpd[vd] = -bpd[vd];
        nf_trainer_free(t);
        nf_model_free(m);
    }
    fprintf(stderr, "two-by-two binary patterns: entropy %.4f bits/dim; uniform %.4f +- %.4f, variational %.4f +- %.4f\n",
            H / D, bpd[0], se[0], bpd[1], se[1]);
    for (int vd = 0; vd < 2; vd++)
        ck_assert_msg(bpd[vd] > H / D - 3 * se[vd], "%s dequantisation: %.4f bits/dim below the entropy %.4f",
                      vd ? "variational" : "uniform", bpd[vd], H / D);
    ck_assert_msg(bpd[1] < bpd[0] - 0.02, "variational %.4f bits/dim, uniform %.4f: expected lower", bpd[1], bpd[0]);
    nf_source_free(train), nf_source_free(val), nf_source_free(all);
    nf_rng_free(r);
    free(x);
}
END_TEST

/* The model file keeps the dequantiser (kind image, its settings, its parameters): the same bits/dim
 * after opening, in evaluation and with a random draw; a uniform model's file has none. */
START_TEST(variational_model_round_trips)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = c.w = 4, c.c = 1, c.levels = 9, c.arch = NF_IMAGE_GLOW, c.scales = 1, c.steps = 2, c.hidden = 8;
    c.dequant = NF_DEQUANT_VARIATIONAL, c.dequant_layers = 2, c.dequant_hidden = 6;
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(m->type->kind, "image");
    ck_assert_ptr_nonnull(nf_params_find(m->P, "dequant.c1.out.weight"));
    enum { N = 12, D = 16 };
    nf_real x[N * D], b1[N], b2[N];
    nf_rng *r = nf_rng_alloc(5, 0);
    random_images(x, NULL, NULL, N, D, 9, 0, r);
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += (nf_real)(0.1 * (nf_rng_uniform(r) - 0.5));
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, N, D, 0), NF_OK);
    double e1, e2;
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 5, NULL, &e1, NULL, NULL), NF_OK);
    nf_rng *u = nf_rng_alloc(9, 0);
    ck_assert_int_eq(nf_model_image_bpd(m, b1, x, NULL, N, u), NF_OK);
    nf_rng_free(u);
    char path[] = "/tmp/nf_image_dequant_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *m2;
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    const nf_image_config *c2 = nf_model_image_config(m2);
    ck_assert(c2 && c2->dequant == NF_DEQUANT_VARIATIONAL && c2->dequant_layers == 2 && c2->dequant_hidden == 6);
    ck_assert_int_eq((int)m2->P->n, (int)m->P->n);
    ck_assert_int_eq(nf_model_evaluate(m2, src, 0, 64, NULL, &e2, NULL, NULL), NF_OK);
    ck_assert_msg(e1 == e2, "bits/dim %.12g before saving, %.12g after", -e1, -e2);
    u = nf_rng_alloc(9, 0);
    ck_assert_int_eq(nf_model_image_bpd(m2, b2, x, NULL, N, u), NF_OK);
    nf_rng_free(u);
    for (int i = 0; i < N; i++) ck_assert_msg(b1[i] == b2[i], "image %d: %g before saving, %g after", i, b1[i], b2[i]);
    /* sampling ignores the dequantiser: it works as for any image model */
    nf_real s[4 * D];
    ck_assert_int_eq(nf_model_image_sample(m2, s, NULL, 4, 1, 0, r), NF_OK);
    unlink(path);
    nf_model_free(m2);
    nf_model_free(m);

    c.dequant = NF_DEQUANT_UNIFORM;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_OK);
    ck_assert_ptr_null(nf_params_find(m->P, "dequant.c0.out.weight"));
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_open(path, &m2, NULL), NF_OK);
    ck_assert_int_eq(nf_model_image_config(m2)->dequant, NF_DEQUANT_UNIFORM);
    unlink(path);
    nf_model_free(m2);
    nf_model_free(m);
    nf_source_free(src);
    nf_rng_free(r);
}
END_TEST

/* The likelihood classifier of a conditional variational model scores class c by the bound:
 * logp[i, c] = log p(y | c) - log q(u | x), the same number nf_model_image_bpd turns into bits/dim
 * (-(logp - D log L) / (D ln 2)) for the same draws; the q term is one per image, so the ranking is
 * that of log p(y | c). */
START_TEST(classifier_scores_with_the_bound)
{
    nf_image_config c = small_config();
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 5, D = 32, K = 3 };
    nf_real x[N * D], bpd[N];
    double logp[N * K];
    int pred[N], cls[N];
    nf_rng *r = nf_rng_alloc(8, 0);
    random_images(x, NULL, NULL, N, D, 5, K, r);
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += (nf_real)(0.2 * (nf_rng_uniform(r) - 0.5));
    nf_model_set_training(m, 0);
    nf_rng *u = nf_rng_alloc(3, 0);
    ck_assert_int_eq(nf_model_image_classify(m, pred, logp, x, NULL, N, u), NF_OK);
    nf_rng_free(u);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) cls[i] = k;
        u = nf_rng_alloc(3, 0);
        ck_assert_int_eq(nf_model_image_bpd(m, bpd, x, cls, N, u), NF_OK);
        nf_rng_free(u);
        for (int i = 0; i < N; i++) {
            double want = -(bpd[i] * D * LN2) + D * log(5.0), tol = sizeof(nf_real) == 8 ? 1e-9 : 1e-4;
            ck_assert_msg(fabs(logp[i * K + k] - want) < tol * (1 + fabs(want)), "image %d, class %d: %.9g, from bits/dim %.9g",
                          i, k, logp[i * K + k], want);
        }
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) ck_assert(logp[i * K + pred[i]] >= logp[i * K + k]);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* Bad settings: one message naming what is wrong. */
START_TEST(bad_settings_are_refused_by_name)
{
    nf_image_dequant_kind k;
    ck_assert_int_eq(nf_image_dequant_parse("variational", &k), NF_OK);
    ck_assert_int_eq(k, NF_DEQUANT_VARIATIONAL);
    ck_assert_str_eq(nf_image_dequant_name(NF_DEQUANT_UNIFORM), "uniform");
    ck_assert_int_eq(nf_image_dequant_parse("argmax", &k), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "uniform|variational"), "%s", nf_strerror_last());
    nf_image_config c = small_config();
    nf_model *m;
    c.dequant_layers = 0;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "dequantiser layers 0"), "%s", nf_strerror_last());
    c = small_config();
    c.dequant_hidden = 5000;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "dequantiser hidden"), "%s", nf_strerror_last());
    c = small_config();
    c.arch = NF_IMAGE_TARFLOW, c.h = c.w = 4, c.patch = 2, c.width = 8, c.heads = 2, c.layers = 1, c.blocks = 2;
    c.align = 1, c.align_classes = 3;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "alignment"), "%s", nf_strerror_last());
    /* a value outside the levels is named, as with uniform dequantisation */
    c = small_config();
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_OK);
    nf_real x[2 * 32], bpd[2];
    for (int k2 = 0; k2 < 64; k2++) x[k2] = 2;
    x[32 + 7] = 5;
    nf_rng *r = nf_rng_alloc(1, 0);
    ck_assert_int_eq(nf_model_image_bpd(m, bpd, x, NULL, 2, r), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "image 1") && strstr(nf_strerror_last(), "0..4"), "%s", nf_strerror_last());
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_dequant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, variational_loss_gradient_matches_finite_differences);
    tcase_add_test(tc, log_q_matches_a_brute_force_jacobian);
    tcase_add_test(tc, split_batches_give_the_whole_batch);
    tcase_add_test(tc, variational_bound_is_a_bound_and_beats_uniform);
    tcase_add_test(tc, variational_model_round_trips);
    tcase_add_test(tc, classifier_scores_with_the_bound);
    tcase_add_test(tc, bad_settings_are_refused_by_name);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
