/* tests/check_image_model.c - the "image" model kind (training/model_image.h): bits/dim of uniform
 * dequantisation against its closed form on a known discrete distribution; the loss's gradient
 * against finite differences (double build); every architecture's generated spec builds a flow that
 * inverts; a model file round-trips; the likelihood classifier separates two classes it was
 * trained on; reverse alignment: both stages' gradients against finite differences, the encoder
 * learns and then stays frozen, the aligned model round-trips. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas.h"
#include "tests/testutil.h"
#include "training/model_file.h"
#include "training/model_image.h"
#include "training/trainer.h"

static const double LN2 = 0.69314718055994530942;

/* E_u[-log N(y)] for y uniform on [a, b]: (1/2) log 2 pi + (a^2 + ab + b^2) / 6. */
static double expected_nll_cell(double a, double b) { return 0.5 * log(2 * 3.14159265358979323846) + (a * a + a * b + b * b) / 6; }

/* The training loss keys its noise by a count of draws kept in the model's state, so a finite
 * difference must see the same draw each time: the first call after fix_reset() runs as it is and
 * keeps the state it leaves (ActNorm set, the count advanced), every later call starts from that. */
#ifdef NF_DOUBLE /* the finite-difference tests run in the double build */
static nf_real *fix_S;
static size_t fix_n;
static void fix_reset(void)
{
    free(fix_S);
    fix_S = NULL;
    fix_n = 0;
}
static int loss_fixed(nf_model *m, const nf_batch *b, nf_rng *r, double *out)
{
    if (fix_S && fix_n == m->S->n) memcpy(m->S->value, fix_S, fix_n * sizeof *fix_S);
    if (!fix_S) {
        int rc = m->type->loss(m, b, r, out);
        fix_n = m->S->n;
        fix_S = malloc(fix_n * sizeof *fix_S);
        memcpy(fix_S, m->S->value, fix_n * sizeof *fix_S);
        /* run it once more from the kept state, so every call of the test sees the same draw */
        memcpy(m->S->value, fix_S, fix_n * sizeof *fix_S);
        if (rc != NF_OK) return rc;
        nf_params_zero_grad(m->P);
    }
    return m->type->loss(m, b, r, out);
}
#endif

/* A flow that moves nothing (a permutation: log-det 0, so log p(y) = sum_k log N(y_k)) on 2x3x1
 * images of 5 levels: the mean bits/dim over many dequantisation draws must equal
 *   (sum_k E[-log N(y_k)] + D log L) / (D ln 2),  y_k uniform on [x_k / L - 1/2, (x_k + 1) / L - 1/2]. */
START_TEST(dequantised_bits_per_dim_match_the_closed_form)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = 2, c.w = 3, c.c = 1, c.levels = 5, c.arch = NF_IMAGE_SPEC;
    snprintf(c.spec, sizeof c.spec, "permute");
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 20000, D = 6 };
    nf_real *x = malloc(sizeof(nf_real) * N * D), *bpd = malloc(sizeof(nf_real) * N);
    double *want = malloc(sizeof(double) * N);
    nf_rng *r = nf_rng_alloc(2385, 0);
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < D; k++) {
            int v = (int)nf_rng_index(r, 5);
            v = v > 3 && k % 2 ? 1 : v; /* a lopsided distribution, not uniform */
            x[i * D + k] = (nf_real)v;
            s += expected_nll_cell(v / 5.0 - 0.5, (v + 1) / 5.0 - 0.5);
        }
        want[i] = (s + D * log(5.0)) / (D * LN2);
    }
    ck_assert_int_eq(nf_model_image_bpd(m, bpd, x, NULL, N, r), NF_OK);
    double mean = 0, ref = 0, var = 0;
    for (int i = 0; i < N; i++) mean += bpd[i], ref += want[i];
    mean /= N, ref /= N;
    for (int i = 0; i < N; i++) var += (bpd[i] - want[i]) * (bpd[i] - want[i]);
    double se = sqrt(var / N / (N - 1));
    ck_assert_msg(fabs(mean - ref) < 4 * se + 1e-6, "bits/dim %.6f, closed form %.6f (se %.2g)", mean, ref, se);
    ck_assert_msg(se > 0 && se < 2e-3, "standard error %.3g", se);

    /* evaluation: deterministic per image index, and the same expectation */
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, N, D, 0), NF_OK);
    double e1, e2, s1;
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 4096, NULL, &e1, &s1, NULL), NF_OK);
    ck_assert_int_eq(nf_model_evaluate(m, src, 0, 1000, NULL, &e2, NULL, NULL), NF_OK);
    ck_assert_msg(e1 == e2, "evaluation differs between batch sizes: %.9g vs %.9g", e1, e2);
    ck_assert_msg(fabs(-e1 - ref) < 5 * se + 1e-6, "evaluated bits/dim %.6f, closed form %.6f", -e1, ref);

    /* a value outside 0..L-1 is refused with the image and the value named */
    x[3 * D + 2] = 5;
    ck_assert_int_eq(nf_model_image_bpd(m, bpd, x, NULL, 8, r), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "image 3") && strstr(nf_strerror_last(), "0..4"), "%s", nf_strerror_last());
    nf_source_free(src);
    nf_rng_free(r);
    free(x), free(bpd), free(want);
    nf_model_free(m);
}
END_TEST

/* The loss (mean bits/dim, with class dropout and noise augmentation) and its gradient: central
 * differences of the loss with the same random draws, against P->grad. */
START_TEST(loss_gradient_matches_finite_differences)
{
#ifdef NF_DOUBLE
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = 2, c.w = 2, c.c = 2, c.levels = 7, c.classes = 3, c.arch = NF_IMAGE_SPEC, c.noise = 0.03, c.label_drop = 0.3;
    snprintf(c.spec, sizeof c.spec, "affine-coupling(hidden=6), actnorm, affine-coupling(hidden=6,flip=1)");
    c.micro_batch = 2; /* micro-batches of 2, 2 and 1 images (after the first call, which starts ActNorm) */
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 5, D = 8, K = 3 };
    nf_real x[N * D], ctx[N * K] = {0};
    size_t idx[N];
    nf_rng *r = nf_rng_alloc(11, 0);
    for (int i = 0; i < N; i++) {
        idx[i] = (size_t)i;
        ctx[i * K + i % K] = 1;
        for (int k = 0; k < D; k++) x[i * D + k] = (nf_real)nf_rng_index(r, 7);
    }
    /* move the parameters off their zero initialisation */
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.2 * (nf_rng_uniform(r) - 0.5);
    nf_batch b = {.n = N, .idx = idx, .dim = D, .ctx_dim = K, .x = x, .ctx = ctx};
    double loss;
    fix_reset();
    nf_params_zero_grad(m->P);
    nf_rng *lr = nf_rng_alloc(5, 1);
    ck_assert_int_eq(loss_fixed(m, &b, lr, &loss), NF_OK);
    nf_rng_free(lr);
    ck_assert(isfinite(loss) && loss > 0);
    double worst = 0;
    for (size_t j = 0; j < m->P->n; j += 3) {
        double v = m->P->value[j], h = 1e-6, lp, lm;
        m->P->value[j] = v + h;
        lr = nf_rng_alloc(5, 1);
        ck_assert_int_eq(loss_fixed(m, &b, lr, &lp), NF_OK);
        nf_rng_free(lr);
        m->P->value[j] = v - h;
        lr = nf_rng_alloc(5, 1);
        ck_assert_int_eq(loss_fixed(m, &b, lr, &lm), NF_OK);
        nf_rng_free(lr);
        m->P->value[j] = v;
        double fd = (lp - lm) / (2 * h), an = 0;
        /* the last two calls added their gradients too: recompute the analytic one alone */
        nf_params_zero_grad(m->P);
        lr = nf_rng_alloc(5, 1);
        ck_assert_int_eq(loss_fixed(m, &b, lr, &loss), NF_OK);
        nf_rng_free(lr);
        an = m->P->grad[j];
        double err = fabs(fd - an) / (1e-6 + fabs(fd) + fabs(an));
        if (err > worst) worst = err;
        ck_assert_msg(err < 1e-5, "parameter %zu: finite difference %.9g, gradient %.9g", j, fd, an);
    }
    nf_rng_free(r);
    nf_model_free(m);
#endif
}
END_TEST

/* The loss of one training batch and its gradient, after a first call (which starts ActNorm). */
static void micro_loss(nf_image_arch arch, int micro, int threads, double *loss, nf_real **grad, size_t *np)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = 4, c.w = 4, c.c = 1, c.levels = 5, c.arch = arch, c.micro_batch = micro, c.noise = 0.05;
    c.scales = 1, c.steps = 2, c.hidden = 8, c.width = 16, c.heads = 2, c.layers = 1, c.blocks = 2;
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 11, D = 16 };
    nf_real x[N * D];
    size_t idx[N];
    nf_rng *r = nf_rng_alloc(3, 0);
    for (int i = 0; i < N; i++) {
        idx[i] = (size_t)(7 * i);
        for (int k = 0; k < D; k++) x[i * D + k] = (nf_real)nf_rng_index(r, 5);
    }
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.1 * (nf_rng_uniform(r) - 0.5);
    nf_rng_free(r);
    nf_batch b = {.n = N, .idx = idx, .dim = D, .x = x};
    const int saved = nf_blas_get_threads();
    nf_blas_set_threads(threads);
    nf_model_set_training(m, 1);
    for (int call = 0; call < 3; call++) { /* the last two through the micro-batches */
        nf_params_zero_grad(m->P);
        ck_assert_msg(m->type->loss(m, &b, NULL, loss) == NF_OK, "%s", nf_strerror_last());
    }
    nf_blas_set_threads(saved);
    *np = m->P->n;
    *grad = malloc(*np * sizeof **grad);
    memcpy(*grad, m->P->grad, *np * sizeof **grad);
    nf_model_free(m);
}

/* Micro-batches (training/model_image.c): a batch of 11 images in micro-batches of 2 (six of them,
 * over four accumulators) gives the loss and gradient of the batch in one (micro-batch 11) up to
 * float rounding, and the same numbers to the bit at one, two and three threads. */
START_TEST(micro_batches_give_the_batch_gradient_at_any_thread_count)
{
    const nf_image_arch archs[] = {NF_IMAGE_TARFLOW, NF_IMAGE_GLOW};
    for (int a = 0; a < 2; a++) {
        double whole, l1, l2, l3;
        nf_real *g_whole, *g1, *g2, *g3;
        size_t n, n1, n2, n3;
        micro_loss(archs[a], 11, 1, &whole, &g_whole, &n);
        micro_loss(archs[a], 2, 1, &l1, &g1, &n1);
        micro_loss(archs[a], 2, 2, &l2, &g2, &n2);
        micro_loss(archs[a], 2, 3, &l3, &g3, &n3);
        ck_assert(n1 == n && n2 == n && n3 == n);
        ck_assert_msg(l1 == l2 && l1 == l3 && !memcmp(g1, g2, n * sizeof *g1) && !memcmp(g1, g3, n * sizeof *g1),
                      "%s: micro-batches give other numbers at another thread count", nf_image_arch_name(archs[a]));
        const double tol = sizeof(nf_real) == 8 ? 1e-10 : 2e-4;
        ck_assert_msg(fabs(l1 - whole) <= tol * fabs(whole), "%s: loss %.9g in micro-batches, %.9g whole",
                      nf_image_arch_name(archs[a]), l1, whole);
        double scale = 0, worst = 0;
        for (size_t j = 0; j < n; j++) scale = fmax(scale, fabs(g_whole[j]));
        for (size_t j = 0; j < n; j++) worst = fmax(worst, fabs(g1[j] - g_whole[j]));
        ck_assert_msg(scale > 0 && worst <= tol * scale, "%s: gradient differs by %g (largest entry %g)",
                      nf_image_arch_name(archs[a]), worst, scale);
        free(g_whole), free(g1), free(g2), free(g3);
    }
}
END_TEST

/* Each architecture's spec for 8x8x1 images builds a flow whose inverse undoes its forward, and the
 * model round-trips through a file with the same bits/dim. */
START_TEST(architectures_build_invert_and_round_trip)
{
    const nf_image_arch archs[] = {NF_IMAGE_GLOW, NF_IMAGE_REALNVP, NF_IMAGE_TARFLOW};
    for (int a = 0; a < 3; a++) {
        nf_image_config c;
        nf_image_config_init(&c);
        c.h = c.w = 8, c.c = 1, c.levels = 17, c.arch = archs[a];
        c.scales = 2, c.steps = 2, c.hidden = 8, c.width = 16, c.heads = 2, c.layers = 1, c.blocks = 2;
        nf_model *m;
        ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s: %s", nf_image_arch_name(c.arch), nf_strerror_last());
        enum { N = 6, D = 64 };
        nf_real x[N * D], z[N * D], back[N * D], logp[N], bpd1[N], bpd2[N];
        nf_rng *r = nf_rng_alloc(3 + a, 0);
        for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.05 * (nf_rng_uniform(r) - 0.5);
        for (int k = 0; k < N * D; k++) x[k] = (nf_real)(nf_rng_uniform(r) - 0.5);
        /* forward to the latent by log_prob's first level is internal: invert a base draw instead */
        nf_rng_fill_normal(r, z, N * D);
        ck_assert_int_eq(nf_flow_sample_latent(m->flow, x, NULL, z, NULL, N), NF_OK);
        ck_assert_int_eq(nf_flow_log_prob(m->flow, logp, x, NULL, NULL, N), NF_OK);
        const nf_real *zz = m->flow->h + (size_t)m->flow->nb * N * D; /* the last level of the forward pass */
        memcpy(back, zz, sizeof back);
        double worst = 0;
        for (int k = 0; k < N * D; k++) worst = fmax(worst, fabs(back[k] - z[k]));
        ck_assert_msg(worst < (sizeof(nf_real) == 4 ? 2e-4 : 1e-9), "%s: forward(inverse(z)) - z up to %g",
                      nf_image_arch_name(c.arch), worst);
        for (int k = 0; k < N * D; k++) x[k] = (nf_real)nf_rng_index(r, 17);
        nf_rng *u = nf_rng_alloc(9, 0);
        ck_assert_int_eq(nf_model_image_bpd(m, bpd1, x, NULL, N, u), NF_OK);
        nf_rng_free(u);
        nf_model *m2 = nf_test_model_reopen(m);
        ck_assert_str_eq(m2->type->kind, "image");
        ck_assert_int_eq(nf_model_image_config(m2)->arch, c.arch);
        u = nf_rng_alloc(9, 0);
        ck_assert_int_eq(nf_model_image_bpd(m2, bpd2, x, NULL, N, u), NF_OK);
        nf_rng_free(u);
        for (int i = 0; i < N; i++) ck_assert_msg(bpd1[i] == bpd2[i], "image %d: %g before saving, %g after", i, bpd1[i], bpd2[i]);
        nf_model_free(m2);
        nf_model_free(m);
        nf_rng_free(r);
    }
}
END_TEST

/* Log-densities with nothing to follow, and samples, run in chunks whose workspace stays bounded (a
 * RealNVP on 32x32 images: chunks of a few dozen images, nf_flow_chunk_rows): the bits/dim and the
 * samples of 70 images in one call are those of the images one at a time (the dequantisation draws
 * and the latents taken in the same order). */
START_TEST(bits_per_dim_in_chunks_equal_image_by_image)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = c.w = 32, c.c = 1, c.levels = 17, c.arch = NF_IMAGE_REALNVP, c.scales = 1, c.steps = 2, c.hidden = 64;
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    enum { N = 70, D = 1024 };
    ck_assert_msg(nf_flow_chunk_rows(m->flow, N) < N, "chunks of %d images: the test needs fewer than %d",
                  nf_flow_chunk_rows(m->flow, N), N);
    nf_real *x = malloc(sizeof(nf_real) * N * D), one[1], all[N];
    nf_rng *r = nf_rng_alloc(2385, 0);
    for (int k = 0; k < N * D; k++) x[k] = (nf_real)nf_rng_index(r, 17);
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.03 * (nf_rng_uniform(r) - 0.5);
    nf_source *s;
    ck_assert_int_eq(nf_source_rows_wrap(&s, x, NULL, N, D, 0), NF_OK);
    ck_assert_msg(m->type->init_data(m, s) == NF_OK, "%s", nf_strerror_last()); /* ActNorm started */
    nf_rng *u = nf_rng_alloc(7, 0);
    ck_assert_int_eq(nf_model_image_bpd(m, all, x, NULL, N, u), NF_OK);
    nf_rng_free(u);
    u = nf_rng_alloc(7, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(nf_model_image_bpd(m, one, x + (size_t)i * D, NULL, 1, u), NF_OK);
        ck_assert_msg(one[0] == all[i], "image %d: %.9g alone, %.9g among %d", i, (double)one[0], (double)all[i], N);
    }
    nf_rng_free(u);
    /* and sampling: 70 images in one call are the images drawn one at a time */
    nf_real *xs = malloc(sizeof(nf_real) * N * D), xone[D];
    u = nf_rng_alloc(11, 0);
    ck_assert_int_eq(nf_model_image_sample(m, xs, NULL, N, 0.9, 0, u), NF_OK);
    nf_rng_free(u);
    u = nf_rng_alloc(11, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(nf_model_image_sample(m, xone, NULL, 1, 0.9, 0, u), NF_OK);
        ck_assert_msg(!memcmp(xone, xs + (size_t)i * D, sizeof xone), "sample %d differs drawn alone", i);
    }
    nf_rng_free(u);
    free(xs);
    nf_source_free(s);
    nf_model_free(m);
    nf_rng_free(r);
    free(x);
}
END_TEST

/* Two classes of 2x2 images (class 0 dark, class 1 bright, with noise): a conditional flow trained
 * briefly classifies held-out images by likelihood far above chance; bad configurations are refused. */
START_TEST(likelihood_classifier_separates_trained_classes)
{
    enum { N = 600, D = 4, K = 2 };
    nf_real *x = malloc(sizeof(nf_real) * N * D), *ctx = calloc(N * K, sizeof(nf_real));
    nf_rng *r = nf_rng_alloc(21, 0);
    for (int i = 0; i < N; i++) {
        int k = i % 2;
        ctx[i * K + k] = 1;
        for (int j = 0; j < D; j++) {
            double v = (k ? 11 : 4) + 2 * nf_rng_normal(r);
            x[i * D + j] = (nf_real)(v < 0 ? 0 : v > 15 ? 15 : floor(v));
        }
    }
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = c.w = 2, c.c = 1, c.levels = 16, c.classes = K, c.arch = NF_IMAGE_SPEC, c.label_drop = 0.1;
    snprintf(c.spec, sizeof c.spec, "2*(affine-coupling(hidden=16), affine-coupling(hidden=16,flip=1))");
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    nf_source *all, *train, *val;
    ck_assert_int_eq(nf_source_rows_wrap(&all, x, ctx, N, D, K), NF_OK);
    ck_assert_int_eq(nf_source_split(all, 0.25, 1, &val, &train), NF_OK);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 300, tc.batch = 64, tc.eval_every = 0, tc.optim.lr = 5e-3;
    nf_trainer *t;
    ck_assert_msg(nf_trainer_create(&t, m, &tc, train, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    nf_rows v = nf_source_rows(val);
    int pred[N];
    ck_assert_msg(nf_model_image_classify(m, pred, NULL, v.x, NULL, (int)val->n, r) == NF_OK, "%s", nf_strerror_last());
    int ok = 0;
    for (size_t i = 0; i < val->n; i++) ok += v.ctx[i * K + pred[i]] == 1;
    double acc = (double)ok / val->n;
    ck_assert_msg(acc > 0.9, "likelihood classifier accuracy %.3f on %zu held-out images", acc, val->n);
    nf_trainer_free(t);
    nf_source_free(train), nf_source_free(val), nf_source_free(all);
    nf_model_free(m);

    /* unconditional: the classifier refuses; bad shapes and levels are named */
    c.classes = 0;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_OK);
    ck_assert_int_eq(nf_model_image_classify(m, pred, NULL, x, NULL, 4, r), NF_EINVAL);
    nf_model_free(m);
    c.levels = 1;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "levels"), "%s", nf_strerror_last());
    c.levels = 16, c.arch = NF_IMAGE_GLOW, c.h = 6, c.scales = 2;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "divisible by 4"), "%s", nf_strerror_last());
    nf_rng_free(r);
    free(x), free(ctx);
}
END_TEST

/* The classifier's prior: the training images of each class, counted when the model is first given
 * its data, add-one smoothed, kept in the model file; uniform before any data; and it enters the
 * decision (a prior that all but rules out two classes leaves the third). */
START_TEST(class_prior_counts_training_images_and_round_trips)
{
    enum { N = 15, D = 4, K = 3 };
    nf_real x[N * D], ctx[N * K] = {0};
    for (int i = 0; i < N; i++) {
        ctx[i * K + (i < 10 ? 0 : 1)] = 1; /* 10 of class 0, 5 of class 1, none of class 2 */
        for (int j = 0; j < D; j++) x[i * D + j] = (nf_real)((i + j) % 16);
    }
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = c.w = 2, c.c = 1, c.levels = 16, c.classes = K, c.arch = NF_IMAGE_SPEC;
    snprintf(c.spec, sizeof c.spec, "affine-coupling(hidden=8), affine-coupling(hidden=8,flip=1)");
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    double prior[K];
    ck_assert_int_eq(nf_model_image_class_prior(m, prior), 0);
    for (int k = 0; k < K; k++) ck_assert(fabs(prior[k] - 1.0 / K) < 1e-15);
    nf_source *s;
    ck_assert_int_eq(nf_source_rows_wrap(&s, x, ctx, N, D, K), NF_OK);
    ck_assert_msg(m->type->init_data(m, s) == NF_OK, "%s", nf_strerror_last());
    const double want[K] = {11.0 / 18, 6.0 / 18, 1.0 / 18};
    ck_assert_int_eq(nf_model_image_class_prior(m, prior), 1);
    for (int k = 0; k < K; k++) ck_assert_msg(fabs(prior[k] - want[k]) < 1e-15, "prior[%d] %g, expected %g", k, prior[k], want[k]);

    nf_model *m2 = nf_test_model_reopen(m);
    double prior2[K];
    ck_assert_int_eq(nf_model_image_class_prior(m2, prior2), 1);
    for (int k = 0; k < K; k++) ck_assert(prior2[k] == prior[k]);

    const double extreme[K] = {1e-250, 1e-250, 1};
    int pred[N];
    nf_rng *r = nf_rng_alloc(3, 0);
    ck_assert_int_eq(nf_model_image_classify(m2, pred, NULL, x, extreme, N, r), NF_OK);
    for (int i = 0; i < N; i++) ck_assert_int_eq(pred[i], 2);
    nf_rng_free(r);
    nf_model_free(m2);
    nf_model_free(m);
    nf_source_free(s);

    c.classes = 0; /* unconditional: no prior */
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_OK);
    prior[0] = -1;
    ck_assert_int_eq(nf_model_image_class_prior(m, prior), 0);
    ck_assert(prior[0] == -1);
    nf_model_free(m);
}
END_TEST

/* Four 4x4 classes, each a bright bar (top row, bottom row, left column, right column) on a dim
 * noisy background, with their one-hot contexts. */
static void bars(nf_real *x, nf_real *ctx, int n, int levels, nf_rng *r)
{
    for (int i = 0; i < n; i++) {
        int k = i % 4;
        for (int j = 0; j < 4; j++) ctx[i * 4 + j] = j == k;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                int on = (k == 0 && a == 0) || (k == 1 && a == 3) || (k == 2 && b == 0) || (k == 3 && b == 3);
                double v = (on ? 0.8 : 0.2) * (levels - 1) + 1.5 * nf_rng_normal(r);
                x[i * 16 + a * 4 + b] = (nf_real)(v < 0 ? 0 : v > levels - 1 ? levels - 1 : floor(v));
            }
    }
}

#ifdef NF_DOUBLE
/* The name of the slice holding entry j of P. */
static const char *name_of(const nf_params *P, size_t j)
{
    for (size_t k = 0; k < P->nslices; k++)
        if (j >= P->slices[k].offset && j < P->slices[k].offset + P->slices[k].size) return P->slices[k].name;
    return "?";
}
#endif

static nf_image_config aligned_config(int conditional)
{
    nf_image_config c;
    nf_image_config_init(&c);
    c.h = c.w = 4, c.c = 1, c.levels = 9, c.arch = NF_IMAGE_TARFLOW, c.patch = 2;
    c.width = 8, c.heads = 2, c.layers = 1, c.blocks = 3;
    c.classes = conditional ? 4 : 0, c.label_drop = conditional ? 0.3 : 0, c.noise = 0.03;
    c.align = 1, c.align_classes = 4, c.align_weight = 0.7, c.align_layers = 5; /* generative blocks 0 and 2 */
    return c;
}

/* The loss of both stages against central differences, with the same random draws: stage
 * "encoder" over the encoder's entries, stage "flow" (bits/dim + alignment) over the flow's and the
 * projections' entries, so the gradient through the projection into the transformers' hidden states
 * is checked; an alignment weight of 0 gives the transformer another gradient (the hidden path is
 * live), and the encoder gets none in stage "flow". */
START_TEST(aligned_loss_gradients_match_finite_differences)
{
#ifdef NF_DOUBLE
    for (int conditional = 0; conditional < 2; conditional++) {
        nf_image_config c = aligned_config(conditional);
        nf_model *m;
        ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
        ck_assert_int_eq(nf_model_stages(m), 2);
        ck_assert_str_eq(nf_model_stage_name(m, 0), "encoder");
        enum { N = 5, D = 16, K = 4 };
        nf_real x[N * D], ctx[N * K];
        size_t idx[N];
        nf_rng *r = nf_rng_alloc(17 + conditional, 0);
        bars(x, ctx, N, 9, r);
        for (int i = 0; i < N; i++) idx[i] = (size_t)i;
        for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.3 * (nf_rng_uniform(r) - 0.5);
        nf_batch b = {.n = N, .idx = idx, .dim = D, .ctx_dim = K, .x = x, .ctx = ctx};
        for (int stage = 0; stage < 2; stage++) {
            ck_assert_int_eq(nf_model_set_stage(m, stage), NF_OK);
            size_t first = m->train_first, count = m->train_count;
            ck_assert(count > 0 && first + count <= m->P->n);
            double loss;
            fix_reset();
            nf_params_zero_grad(m->P);
            nf_rng *lr = nf_rng_alloc(5, 1);
            ck_assert_msg(loss_fixed(m, &b, lr, &loss) == NF_OK, "%s", nf_strerror_last());
            nf_rng_free(lr);
            ck_assert(isfinite(loss) && loss > 0);
            nf_real *an = malloc(m->P->n * sizeof *an);
            memcpy(an, m->P->grad, m->P->n * sizeof *an);
            if (stage == 1)
                for (size_t j = 0; j < first; j++) ck_assert_msg(an[j] == 0, "stage flow: encoder entry %zu has gradient %g", j, an[j]);
            int checked = 0;
            for (size_t j = first; j < first + count; j += stage ? 7 : 5) {
                double v = m->P->value[j], h = 1e-6, lp, lm;
                m->P->value[j] = v + h;
                lr = nf_rng_alloc(5, 1);
                ck_assert_int_eq(loss_fixed(m, &b, lr, &lp), NF_OK);
                nf_rng_free(lr);
                m->P->value[j] = v - h;
                lr = nf_rng_alloc(5, 1);
                ck_assert_int_eq(loss_fixed(m, &b, lr, &lm), NF_OK);
                nf_rng_free(lr);
                m->P->value[j] = v;
                double fd = (lp - lm) / (2 * h);
                double err = fabs(fd - an[j]) / (1e-4 + fabs(fd) + fabs(an[j]));
                ck_assert_msg(err < 1e-5, "stage %d, parameter %zu (%s): finite difference %.9g, gradient %.9g", stage, j,
                              name_of(m->P, j), fd, an[j]);
                checked++;
            }
            ck_assert(checked > 20);
            if (stage == 1) {
                /* the projections have gradients, and the alignment changes the transformers' */
                size_t proj = 0, nproj = 0, diff = 0;
                nf_image_config *cfg = (nf_image_config *)nf_model_image_config(m);
                cfg->align_weight = 0;
                nf_params_zero_grad(m->P);
                lr = nf_rng_alloc(5, 1);
                ck_assert_int_eq(loss_fixed(m, &b, lr, &loss), NF_OK);
                nf_rng_free(lr);
                cfg->align_weight = 0.7;
                for (size_t j = first; j < first + count; j++) {
                    const char *name = name_of(m->P, j);
                    if (strstr(name, "align.proj")) nproj++, proj += an[j] != 0;
                    else if (strstr(name, ".tf.")) diff += fabs(an[j] - m->P->grad[j]) > 1e-9 * (1 + fabs(an[j]));
                }
                ck_assert_msg(nproj > 0 && proj > nproj / 2, "%zu of %zu projection entries have a gradient", proj, nproj);
                ck_assert_msg(diff > 100, "the alignment changed the gradient of only %zu transformer entries", diff);
            }
            free(an);
        }
        nf_rng_free(r);
        nf_model_free(m);
    }
#endif
}
END_TEST

typedef struct {
    nf_model *m;
    nf_real *enc;        /* the encoder's entries when stage "flow" began */
    size_t n_enc;
    double acc;          /* the encoder's held-out accuracy then */
    const nf_source *val;
} stage_watch;

static int at_checkpoint(void *user, nf_trainer *t)
{
    stage_watch *w = user;
    if (t->model->stage == 1 && !w->enc) {
        w->n_enc = t->model->train_first;
        w->enc = malloc(w->n_enc * sizeof *w->enc);
        memcpy(w->enc, t->model->P->value, w->n_enc * sizeof *w->enc);
        nf_rows v = nf_source_rows(w->val);
        ck_assert_int_eq(nf_model_image_encoder_accuracy(t->model, v.x, v.ctx, (int)w->val->n, &w->acc), NF_OK);
    }
    return NF_OK;
}

/* The trainer runs stage "encoder" (the classifier learns the four bars far above chance), then
 * stage "flow", which leaves the encoder exactly as it was and lowers bits/dim; the model file keeps
 * the alignment settings, both stages and the same numbers; bad settings are refused by name. */
START_TEST(aligned_stages_train_freeze_and_round_trip)
{
    enum { N = 480, D = 16, K = 4 };
    nf_real *x = malloc(sizeof(nf_real) * N * D), *ctx = malloc(sizeof(nf_real) * N * K);
    nf_rng *r = nf_rng_alloc(33, 0);
    bars(x, ctx, N, 9, r);
    nf_image_config c = aligned_config(1);
    nf_model *m;
    ck_assert_msg(nf_model_image_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(m->stage, 0);
    nf_source *all, *train, *val;
    ck_assert_int_eq(nf_source_rows_wrap(&all, x, ctx, N, D, K), NF_OK);
    ck_assert_int_eq(nf_source_split(all, 0.25, 1, &val, &train), NF_OK);
    nf_rows v = nf_source_rows(val);
    double bpd0, al0, bpd1, al1;
    ck_assert_int_eq(nf_model_image_align_terms(m, v.x, v.ctx, (int)val->n, &bpd0, &al0), NF_OK);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 150, tc.batch = 32, tc.eval_every = 0, tc.optim.lr = 3e-3;
    nf_trainer *t;
    ck_assert_msg(nf_trainer_create(&t, m, &tc, train, NULL) == NF_OK, "%s", nf_strerror_last());
    stage_watch w = {.m = m, .val = val};
    nf_train_hooks hooks = {.user = &w, .checkpoint = at_checkpoint};
    ck_assert_msg(nf_trainer_run(t, &hooks) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(m->stage, 1);
    ck_assert_msg(w.enc != NULL, "stage flow never began");
    ck_assert_msg(w.acc > 0.8, "encoder accuracy %.3f after its stage (chance 0.25)", w.acc);
    for (size_t j = 0; j < w.n_enc; j++)
        ck_assert_msg(m->P->value[j] == w.enc[j], "encoder entry %zu moved in stage flow: %g -> %g", j, w.enc[j], m->P->value[j]);
    ck_assert_int_eq(nf_model_image_align_terms(m, v.x, v.ctx, (int)val->n, &bpd1, &al1), NF_OK);
    ck_assert_msg(bpd1 < bpd0 - 0.1, "bits/dim %.4f before training, %.4f after", bpd0, bpd1);
    ck_assert_msg(al1 < al0, "alignment loss %.4f before training, %.4f after", al0, al1);

    char path[] = "/tmp/nf_image_align_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, t) == NF_OK, "%s", nf_strerror_last());
    nf_model *m2;
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(m2->type->kind, "image");
    ck_assert_int_eq(nf_model_stages(m2), 2);
    ck_assert_int_eq(m2->stage, 1);
    const nf_image_config *c2 = nf_model_image_config(m2);
    ck_assert(c2 && c2->align == 1 && c2->align_layers == 5 && c2->align_classes == 4 && c2->align_weight == 0.7);
    double bpd2, al2, e1, e2;
    ck_assert_int_eq(nf_model_image_align_terms(m2, v.x, v.ctx, (int)val->n, &bpd2, &al2), NF_OK);
    ck_assert_msg(bpd1 == bpd2 && al1 == al2, "bits/dim %.9g and alignment %.9g before saving, %.9g and %.9g after", bpd1, al1,
                  bpd2, al2);
    /* a loaded model evaluates as a density (stage flow), like the trained one */
    ck_assert_int_eq(nf_model_evaluate(m, val, 0, 64, NULL, &e1, NULL, NULL), NF_OK);
    ck_assert_int_eq(nf_model_evaluate(m2, val, 0, 64, NULL, &e2, NULL, NULL), NF_OK);
    ck_assert_msg(e1 == e2 && fabs(-e1 - bpd1) < 1e-5 * (1 + fabs(bpd1)), "evaluation %.9g and %.9g, bits/dim %.9g", e1, e2, bpd1);
    unlink(path);
    nf_model_free(m2);
    nf_trainer_free(t);
    free(w.enc);

    /* refusals: no classes, an architecture without tarflow blocks, a block the flow lacks */
    nf_model_free(m);
    c.align_classes = 0;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "classes"), "%s", nf_strerror_last());
    c = aligned_config(1);
    c.arch = NF_IMAGE_GLOW, c.scales = 1, c.steps = 1, c.hidden = 4;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "tarflow"), "%s", nf_strerror_last());
    c = aligned_config(1);
    c.align_layers = 1u << 3;
    ck_assert_int_eq(nf_model_image_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "0..2"), "%s", nf_strerror_last());
    uint64_t mask;
    ck_assert_int_eq(nf_image_align_layers_parse("0,2", &mask), NF_OK);
    ck_assert_int_eq((int)mask, 5);
    ck_assert_int_eq(nf_image_align_layers_parse("0,x", &mask), NF_EINVAL);
    ck_assert_int_eq(nf_image_align_layers_parse("", &mask), NF_EINVAL);
    nf_source_free(train), nf_source_free(val), nf_source_free(all);
    nf_rng_free(r);
    free(x), free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, dequantised_bits_per_dim_match_the_closed_form);
    tcase_add_test(tc, bits_per_dim_in_chunks_equal_image_by_image);
    tcase_add_test(tc, loss_gradient_matches_finite_differences);
    tcase_add_test(tc, micro_batches_give_the_batch_gradient_at_any_thread_count);
    tcase_add_test(tc, architectures_build_invert_and_round_trip);
    tcase_add_test(tc, likelihood_classifier_separates_trained_classes);
    tcase_add_test(tc, class_prior_counts_training_images_and_round_trips);
    tcase_add_test(tc, aligned_loss_gradients_match_finite_differences);
    tcase_add_test(tc, aligned_stages_train_freeze_and_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
