/* tests/check_video_model.c - the "video" model kind (training/model_video.h): a new model's bits/dim
 * against the closed form (the flow starts as the identity and the full codec is a rotation);
 * causality (changing frame t moves no latent of an earlier frame); the loss's gradient against
 * finite differences (double build); token-by-token, whole-video Jacobi and video-aware (frame by
 * frame) Jacobi sampling give the same videos; given frames are kept and condition the rest; a model
 * file round-trips. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "training/model_file.h"
#include "training/model_video.h"
#include "training/video_codec.h"
#include "tests/testutil.h"

static const double LN2 = 0.69314718055994530942, LOG_2PI = 1.8378770664093454836;

/* 4 frames of 8 x 8 in 4 x 4 blocks, 2 x 2 kept: 2 x 2 tokens of 4 values a frame, 64 latent values. */
static void tiny_config(nf_video_config *c)
{
    nf_video_config_init(c);
    c->frames = 4, c->h = c->w = 8, c->c = 1, c->levels = 9;
    c->block = 4, c->keep = 2;
    c->local_blocks = 2, c->local_layers = 1, c->global_blocks = 1, c->global_layers = 2;
    c->width = 8, c->heads = 2;
    c->noise = 0.05;
    c->seed = 3;
}

/* Videos of grey levels: a bright square moving right one pixel a frame, plus seeded speckle. */
static nf_real *tiny_videos(const nf_video_config *c, int n, uint64_t seed)
{
    const int P = c->h * c->w * c->c, D = c->frames * P;
    nf_real *x = malloc((size_t)n * D * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < c->frames; t++)
            for (int p = 0; p < P; p++) {
                int row = p / c->w, col = p % c->w, on = row >= 2 && row < 5 && col >= t + i % 2 && col < t + 3 + i % 2;
                x[(size_t)i * D + (size_t)t * P + p] = (nf_real)(on ? c->levels - 1 : (nf_rng_uniform(r) < 0.2));
            }
    nf_rng_free(r);
    return x;
}

/* With keep = block the codec is orthonormal and square, and a new flow is the identity (TarFlow's
 * output projections start at zero), so log p = sum_k log N(y_k) of the dequantised pixels. */
START_TEST(new_model_bits_per_dim_match_the_closed_form)
{
    nf_video_config c;
    tiny_config(&c);
    c.keep = c.block;
    nf_model *m;
    ck_assert_msg(nf_model_video_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    const int n = 5, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 11);
    double bpd[5];
    nf_rng *r = nf_rng_alloc(21, 0), *r2 = nf_rng_alloc(21, 0);
    ck_assert_int_eq(nf_model_video_bpd(m, bpd, x, n, r), NF_OK);
    for (int i = 0; i < n; i++) {
        double lp = 0;
        for (int k = 0; k < D; k++) {
            double y = (x[(size_t)i * D + k] + nf_rng_uniform(r2)) / c.levels - 0.5;
            lp += -0.5 * y * y - 0.5 * LOG_2PI;
        }
        const double want = -(lp - D * log((double)c.levels)) / (D * LN2);
        ck_assert_msg(fabs(bpd[i] - want) < 1e-4 * fabs(want), "video %d: %.8g bits/dim, closed form %.8g", i, bpd[i], want);
    }
    nf_rng_free(r), nf_rng_free(r2);
    free(x);
    nf_model_free(m);
}
END_TEST

/* The latent z = G(Lc(E y)) of frame s does not depend on frame t > s: move one pixel of frame t
 * and compare.  The weights are moved off their start so the blocks are not the identity. */
static void check_dependence(int independent)
{
    nf_video_config c;
    tiny_config(&c);
    c.independent = independent;
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    nf_test_perturb(m->P, 0.2, 5);
    nf_dct_codec *codec;
    ck_assert_int_eq(nf_dct_codec_create(&codec, c.h, c.w, c.c, c.block, c.keep), NF_OK);
    const int P = c.h * c.w, D = c.frames * P, F = nf_model_video_frame_latent(m), L = c.frames * F;
    nf_real y0[256], y[256], z0[64], z[2 * 64], lp[1];
    ck_assert(D <= 256 && L <= 64);
    nf_test_fill_uniform(y0, (size_t)D, -0.5, 0.5, 7);
    for (int t = 0; t < c.frames; t++) {
        /* video 0, then video 0 with frame t changed, each alone in the same buffers (the same
         * arithmetic, so an unaffected latent is the same to the bit) */
        for (int v = 0; v < 2; v++) {
            memcpy(y, y0, (size_t)D * sizeof *y);
            if (v) y[t * P + 9] += (nf_real)0.3;
            nf_dct_encode(codec, z0, y, c.frames);
            ck_assert_int_eq(nf_flow_log_prob(m->flow, lp, z0, NULL, NULL, 1), NF_OK);
            ck_assert_int_eq(nf_flow_last_latent(m->flow, z + v * L), NF_OK);
        }
        double before = 0, at = 0, after = 0;
        for (int k = 0; k < L; k++) {
            double d = fabs(z[L + k] - z[k]);
            if (k < t * F) before = fmax(before, d);
            else if (k < (t + 1) * F) at = fmax(at, d);
            else after = fmax(after, d);
        }
        ck_assert_msg(before == 0, "changing frame %d moved an earlier frame's latent by %g", t, before);
        ck_assert_msg(at > 1e-4, "changing frame %d did not move its own latent", t);
        /* the video model carries it forward in time; the frame-independent baseline does not */
        if (independent) ck_assert_msg(after == 0, "baseline: frame %d moved a later frame's latent by %g", t, after);
        else if (t + 1 < c.frames) ck_assert_msg(after > 1e-4, "frame %d moved no later frame's latent", t);
    }
    nf_dct_codec_free(codec);
    nf_model_free(m);
}

START_TEST(later_frames_move_no_earlier_latent)
{
    check_dependence(0);
    check_dependence(1);
}
END_TEST

#ifdef NF_DOUBLE
/* Central differences of the training loss (the same noise each call: its draw count is restored)
 * against the gradient, on a sample of parameters of every block. */
START_TEST(loss_gradient_matches_finite_differences)
{
    nf_video_config c;
    tiny_config(&c);
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    nf_test_perturb(m->P, 0.1, 9);
    const int n = 3, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 12);
    size_t idx[3] = {4, 0, 17};
    nf_batch b = {.n = n, .idx = idx, .dim = D, .x = x};
    nf_real *S0 = malloc(m->S->n * sizeof *S0);
    memcpy(S0, m->S->value, m->S->n * sizeof *S0);
    nf_model_set_training(m, 1);
    double loss;
    nf_params_zero_grad(m->P);
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK);
    nf_real *an = malloc(m->P->n * sizeof *an);
    memcpy(an, m->P->grad, m->P->n * sizeof *an);
    const size_t step = m->P->n / 97 + 1;
    int checked = 0;
    for (size_t j = 0; j < m->P->n; j += step) {
        const nf_real v = m->P->value[j];
        const double h = 1e-5;
        double lpl, lmi;
        m->P->value[j] = v + h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, &b, NULL, &lpl), NF_OK);
        m->P->value[j] = v - h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, &b, NULL, &lmi), NF_OK);
        m->P->value[j] = v;
        const double fd = (lpl - lmi) / (2 * h), err = fabs(fd - an[j]) / fmax(1e-3, fabs(fd) + fabs(an[j]));
        ck_assert_msg(err < 1e-5, "parameter %zu: finite difference %.9g, gradient %.9g", j, fd, an[j]);
        checked++;
    }
    ck_assert(checked > 50);
    free(an), free(S0), free(x);
    nf_model_free(m);
}
END_TEST
#endif

/* Token by token, whole-video Jacobi and frame-by-frame Jacobi draw the same videos from the same
 * latents; with two frames given, those frames come back as given and the drawn frames follow the
 * same latents in all three; the frame-by-frame sweeps are at most the tokens. */
START_TEST(samplers_agree_and_keep_given_frames)
{
    nf_video_config c;
    tiny_config(&c);
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    nf_test_perturb(m->P, 0.15, 13);
    const int n = 3, D = c.frames * c.h * c.w, P = c.h * c.w;
    nf_real *xs = malloc((size_t)n * D * sizeof *xs), *xj = malloc((size_t)n * D * sizeof *xj),
            *xf = malloc((size_t)n * D * sizeof *xf), *prefix = tiny_videos(&c, n, 14);
    const double tol = sizeof(nf_real) == 4 ? 1e-3 : 1e-7;
    for (int given = 0; given <= 2; given += 2) {
        nf_video_sample_config sc;
        nf_video_sample_config_init(&sc);
        sc.given = given, sc.prefix = prefix;
        int ps, pj, pf;
        nf_rng *r = nf_rng_alloc(40, 0);
        ck_assert_msg(nf_model_video_sample(m, xs, n, &sc, r, &ps) == NF_OK, "%s", nf_strerror_last());
        nf_rng_free(r);
        sc.method = NF_INVERT_JACOBI, sc.tol = sizeof(nf_real) == 4 ? 1e-6 : 1e-12, sc.by_frame = 0;
        r = nf_rng_alloc(40, 0);
        ck_assert_int_eq(nf_model_video_sample(m, xj, n, &sc, r, &pj), NF_OK);
        nf_rng_free(r);
        sc.by_frame = 1;
        r = nf_rng_alloc(40, 0);
        ck_assert_int_eq(nf_model_video_sample(m, xf, n, &sc, r, &pf), NF_OK);
        nf_rng_free(r);
        ck_assert_msg(pf <= ps, "frame-by-frame Jacobi used %d passes, token by token %d", pf, ps);
        double dj = 0, df = 0;
        for (size_t k = 0; k < (size_t)n * D; k++) dj = fmax(dj, fabs(xs[k] - xj[k])), df = fmax(df, fabs(xs[k] - xf[k]));
        ck_assert_msg(dj < tol * c.levels && df < tol * c.levels, "given %d: Jacobi %.3g, by frame %.3g from token by "
                      "token", given, dj, df);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < given * P; k++) ck_assert(xs[(size_t)i * D + k] == prefix[(size_t)i * D + k]);
    }
    /* refused: as many given frames as the video has, given frames without videos */
    nf_video_sample_config bad;
    nf_video_sample_config_init(&bad);
    bad.given = c.frames, bad.prefix = prefix;
    nf_rng *r = nf_rng_alloc(1, 0);
    ck_assert_int_eq(nf_model_video_sample(m, xs, n, &bad, r, NULL), NF_EINVAL);
    bad.given = 1, bad.prefix = NULL;
    ck_assert_int_eq(nf_model_video_sample(m, xs, n, &bad, r, NULL), NF_EINVAL);
    nf_rng_free(r);
    free(xs), free(xj), free(xf), free(prefix);
    nf_model_free(m);
}
END_TEST

/* A short fit lowers the held-out bits/dim; the file written by the trainer reloads to the same
 * bits/dim; another kind's command is named when the flow is read as a plain density. */
START_TEST(fits_and_round_trips)
{
    nf_video_config c;
    tiny_config(&c);
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    const int n = 48, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 15);
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, (size_t)n, D, 0), NF_OK);
    double before[8], after[8], again[8];
    ck_assert_int_eq(nf_model_video_bpd(m, before, x, 8, NULL), NF_OK);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 60, tc.batch = 8, tc.eval_every = 0, tc.checkpoint_every = 0, tc.optim.lr = 3e-3;
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, src, NULL), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    nf_trainer_free(t);
    ck_assert_int_eq(nf_model_video_bpd(m, after, x, 8, NULL), NF_OK);
    double mb = 0, ma = 0;
    for (int i = 0; i < 8; i++) mb += before[i] / 8, ma += after[i] / 8;
    ck_assert_msg(ma < mb - 0.05, "bits/dim %.4f before, %.4f after 60 steps", mb, ma);
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_video_model_%d.h5", (int)getpid());
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *m2;
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert(nf_model_video_config(m2) && nf_model_video_config(m2)->global_layers == c.global_layers);
    ck_assert_int_eq(nf_model_video_bpd(m2, again, x, 8, NULL), NF_OK);
    for (int i = 0; i < 8; i++) ck_assert_msg(again[i] == after[i], "video %d: %.9g before saving, %.9g after", i, after[i], again[i]);
    unlink(path);
    nf_model_free(m2);
    nf_source_free(src);
    free(x);
    nf_model_free(m);
}
END_TEST

START_TEST(bad_configurations_are_refused)
{
    nf_video_config c;
    tiny_config(&c);
    nf_model *m;
    c.block = 3;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "block 3"), "%s", nf_strerror_last());
    tiny_config(&c);
    c.keep = 5;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    tiny_config(&c);
    c.width = 10, c.heads = 4;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("video_model");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, new_model_bits_per_dim_match_the_closed_form);
    tcase_add_test(t, later_frames_move_no_earlier_latent);
#ifdef NF_DOUBLE
    tcase_add_test(t, loss_gradient_matches_finite_differences);
#endif
    tcase_add_test(t, samplers_agree_and_keep_given_frames);
    tcase_add_test(t, fits_and_round_trips);
    tcase_add_test(t, bad_configurations_are_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
