/* tests/check_video_model.c - the "video" model kind (training/model_video.h): a new model's bits/dim
 * against the closed form (the flow starts as the identity and the full codec is a rotation);
 * causality (changing frame t moves no latent of an earlier frame); the loss's gradient against
 * finite differences (double build); token-by-token, whole-video Jacobi and video-aware (frame by
 * frame) Jacobi sampling give the same videos; given frames are kept and condition the rest; a model
 * file round-trips.  The learned denoiser (flow-score matching): its loss's gradient against finite
 * differences and its target sigma^2 grad log p against central differences of log p (double build);
 * its stage trains no flow entry and learns the score step; samples with both denoisers; a model with
 * one round-trips, and a model without one keeps its parameter count.  The learned autoencoder codec
 * (--codec ae, training/video_autoencoder.h): its loss's gradient against finite differences (double
 * build); encode/decode invert the latent standardisation and agree with the loss's own pass; its
 * stage moves no flow entry and the flow's none of it, the latent scale set in between; a model file
 * round-trips, a DCT model's has no codec attributes. */
#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "training/model_file.h"
#include "training/model_video.h"
#include "training/trainer.h"
#include "training/video_autoencoder.h"
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

/* The latent z = G(Lc(E y)) (or Lc(G(E y)), global_first) of frame s does not depend on frame
 * t > s: move one pixel of frame t and compare.  The weights are moved off their start so the blocks are not the identity. */
static void check_dependence(int independent, int global_first)
{
    nf_video_config c;
    tiny_config(&c);
    c.independent = independent, c.global_first = global_first, c.context = global_first; /* and a window */
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
    for (int global_first = 0; global_first <= 1; global_first++) {
        check_dependence(0, global_first);
        check_dependence(1, global_first);
    }
}
END_TEST

#ifdef NF_DOUBLE
/* Central differences (step 1e-5) of the training loss on batch b (the same noise each call: the
 * state store, which holds the draw count, is restored) against its gradient, on the entries first,
 * first + stride, ... below end; the relative error's floor is floor_rel times the largest gradient
 * there (below it a difference is rounding).  No entry outside [first, end) may get a gradient.
 * Returns how many were checked. */
static int check_loss_fd(nf_model *m, const nf_batch *b, size_t first, size_t end, size_t stride, double floor_rel,
                         const char *what)
{
    nf_real *S0 = malloc(m->S->n * sizeof *S0);
    memcpy(S0, m->S->value, m->S->n * sizeof *S0);
    nf_model_set_training(m, 1);
    double loss;
    nf_params_zero_grad(m->P);
    ck_assert_int_eq(m->type->loss(m, b, NULL, &loss), NF_OK);
    nf_real *an = malloc(m->P->n * sizeof *an);
    memcpy(an, m->P->grad, m->P->n * sizeof *an);
    double gmax = 0;
    for (size_t j = 0; j < m->P->n; j++) {
        if (j < first || j >= end) ck_assert_msg(an[j] == 0, "%s: entry %zu outside got gradient %g", what, j, an[j]);
        else gmax = fmax(gmax, fabs(an[j]));
    }
    ck_assert(gmax > 0);
    int checked = 0;
    for (size_t j = first; j < end; j += stride) {
        const nf_real v = m->P->value[j];
        const double h = 1e-5;
        double lpl, lmi;
        m->P->value[j] = v + h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, b, NULL, &lpl), NF_OK);
        m->P->value[j] = v - h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, b, NULL, &lmi), NF_OK);
        m->P->value[j] = v;
        const double fd = (lpl - lmi) / (2 * h), err = fabs(fd - an[j]) / fmax(floor_rel * gmax, fabs(fd) + fabs(an[j]));
        ck_assert_msg(err < 1e-5, "%s entry %zu: finite difference %.9g, gradient %.9g", what, j - first, fd, an[j]);
        checked++;
    }
    free(an), free(S0);
    return checked;
}

/* The flow's loss on a sample of parameters of every block. */
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
    ck_assert_int_gt(check_loss_fd(m, &b, 0, m->P->n, m->P->n / 97 + 1, 1e-4, "flow"), 50);
    free(x);
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
    /* loop: the global block after the local ones, before them, and with a window of one frame */
    c.global_first = _i == 1, c.context = _i == 2;
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

/* nf video fit's default model on 16 frames of 32 x 32 (17 levels), its parameters moved off their
 * start by draws of r, and n videos of random levels from r. */
static nf_model *default_model(nf_video_config *c, nf_rng *r, int n, nf_real **videos)
{
    nf_video_config_init(c);
    c->frames = 16, c->h = c->w = 32, c->c = 1, c->levels = 17;
    nf_model *m;
    ck_assert_msg(nf_model_video_create(&m, c) == NF_OK, "%s", nf_strerror_last());
    for (size_t j = 0; j < m->P->n; j++) m->P->value[j] += 0.02 * (nf_rng_uniform(r) - 0.5);
    const size_t D = (size_t)c->frames * c->h * c->w;
    *videos = malloc((size_t)n * D * sizeof **videos);
    for (size_t k = 0; k < (size_t)n * D; k++) (*videos)[k] = (nf_real)nf_rng_index(r, 17);
    return m;
}

/* Evaluation runs the flow in chunks whose workspace stays bounded (nf_flow_chunk_rows): with
 * nf video fit's default model on 16 frames of 32 x 32, a few videos a chunk; the bits/dim of 24
 * videos at once are those of the videos one at a time. */
START_TEST(bits_per_dim_in_chunks_equal_video_by_video)
{
    enum { N = 24 };
    nf_video_config c;
    nf_rng *r = nf_rng_alloc(2385, 0);
    nf_real *x;
    nf_model *m = default_model(&c, r, N, &x);
    const int D = c.frames * c.h * c.w;
    ck_assert_msg(nf_flow_chunk_rows(m->flow, N) < N, "chunks of %d videos: the test needs fewer than %d",
                  nf_flow_chunk_rows(m->flow, N), N);
    double all[N], one[1];
    nf_rng *u = nf_rng_alloc(7, 0); /* dequantisation draws in order (without an rng they are keyed by position) */
    ck_assert_int_eq(nf_model_video_bpd(m, all, x, N, u), NF_OK);
    nf_rng_free(u);
    u = nf_rng_alloc(7, 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(nf_model_video_bpd(m, one, x + (size_t)i * D, 1, u), NF_OK);
        ck_assert_msg(one[0] == all[i], "video %d: %.9g alone, %.9g among %d", i, one[0], all[i], N);
    }
    nf_rng_free(u);
    free(x);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* Sampling in chunks (nf_flow_in_chunks, NF_VIDEO_SAMPLE_ROWS a chunk) gives the videos of sampling
 * them one at a time from the same generator: each chunk's draws, given frames and outputs are its own
 * rows'. */
START_TEST(samples_in_chunks_equal_video_by_video)
{
    enum { N = NF_VIDEO_SAMPLE_ROWS + 8 }; /* a whole chunk and part of one */
    nf_video_config c;
    nf_rng *r = nf_rng_alloc(2386, 0);
    nf_real *prefix;
    nf_model *m = default_model(&c, r, N, &prefix);
    const int D = c.frames * c.h * c.w;
    ck_assert_msg(nf_flow_chunk_rows(m->flow, N) < NF_VIDEO_SAMPLE_ROWS, "chunks of %d videos: the test needs fewer than %d",
                  nf_flow_chunk_rows(m->flow, N), (int)NF_VIDEO_SAMPLE_ROWS);
    nf_real *all = malloc((size_t)N * D * sizeof *all), *one = malloc((size_t)D * sizeof *one);
    for (int given = 0; given <= 3; given += 3) {
        nf_video_sample_config sc;
        nf_video_sample_config_init(&sc);
        sc.given = given, sc.prefix = prefix;
        nf_rng *u = nf_rng_alloc(8, 0);
        ck_assert_msg(nf_model_video_sample(m, all, N, &sc, u, NULL) == NF_OK, "%s", nf_strerror_last());
        nf_rng_free(u);
        u = nf_rng_alloc(8, 0);
        for (int i = 0; i < N; i++) {
            sc.prefix = prefix + (size_t)i * D;
            ck_assert_int_eq(nf_model_video_sample(m, one, 1, &sc, u, NULL), NF_OK);
            for (int k = 0; k < D; k++)
                ck_assert_msg(one[k] == all[(size_t)i * D + k], "given %d, video %d, value %d: %.9g alone, %.9g among %d",
                              given, i, k, one[k], all[(size_t)i * D + k], N);
        }
        nf_rng_free(u);
    }
    free(prefix), free(all), free(one);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* A short fit lowers the held-out bits/dim; the file written by the trainer reloads to the same
 * bits/dim; another kind's command is named when the flow is read as a plain density. */
START_TEST(fits_and_round_trips)
{
    nf_video_config c;
    tiny_config(&c);
    c.global_first = 1; /* the file keeps the order (the flow's spec) and the option */
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
    ck_assert_int_eq(nf_model_video_config(m2)->global_first, 1);
    ck_assert_int_eq(nf_model_video_config(m2)->context, 1);
    nf_model_free(m2);
    /* a file from before the two options, without their attributes, reads as every earlier frame
     * and local blocks first (whatever the defaults of new models are) */
    hid_t fid = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(fid >= 0);
    ck_assert(H5Adelete_by_name(fid, "/model/video", "context", H5P_DEFAULT) >= 0);
    ck_assert(H5Adelete_by_name(fid, "/model/video", "global_first", H5P_DEFAULT) >= 0);
    H5Fclose(fid);
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_video_config(m2)->context, 0);
    ck_assert_int_eq(nf_model_video_config(m2)->global_first, 0);
    ck_assert_str_eq(m2->flow->spec, m->flow->spec);
    ck_assert_msg(strncmp(m->flow->spec, "tarflow(h=8,w=2,c=4,seq_frames=4,window=1,", 42) == 0, "spec: %s", m->flow->spec);
    ck_assert_int_eq(nf_model_video_bpd(m2, again, x, 8, NULL), NF_OK);
    for (int i = 0; i < 8; i++) ck_assert_msg(again[i] == after[i], "video %d: %.9g before saving, %.9g after", i, after[i], again[i]);
    unlink(path);
    nf_model_free(m2);
    nf_source_free(src);
    free(x);
    nf_model_free(m);
}
END_TEST

/* tiny_config with a learned denoiser of one layer of width 8. */
static void dn_config(nf_video_config *c)
{
    tiny_config(c);
    c->denoiser = 1, c->denoiser_layers = 1, c->denoiser_width = 8;
}

#ifdef NF_DOUBLE
/* Stage "denoiser": central differences of its loss (same noise: the draw count restored) against
 * the gradient for every 7th entry of the denoiser, and no gradient added to any flow entry. */
START_TEST(denoiser_loss_gradient_matches_finite_differences)
{
    nf_video_config c;
    dn_config(&c);
    nf_model *m;
    ck_assert_msg(nf_model_video_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_stages(m), 2);
    ck_assert_str_eq(nf_model_stage_name(m, 1), "denoiser");
    nf_test_perturb(m->P, 0.1, 19); /* the flow off the identity, the denoiser off zero */
    ck_assert_int_eq(nf_model_set_stage(m, 1), NF_OK);
    const size_t first = m->train_first, count = m->train_count;
    ck_assert(first > 0 && count == nf_model_video_denoiser_params(m) && first + count == m->P->n);
    const int n = 3, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 22);
    size_t idx[3] = {5, 1, 30};
    nf_batch b = {.n = n, .idx = idx, .dim = D, .x = x};
    ck_assert_int_gt(check_loss_fd(m, &b, first, m->P->n, 7, 1e-4, "denoiser"), 50);
    free(x);
    nf_model_free(m);
}
END_TEST

/* The target g = sigma^2 grad log p(zt), computed by the flow's backward, against sigma^2 times
 * central differences of log p in zt, on every latent value of one noisy video. */
START_TEST(denoiser_target_is_the_scaled_score)
{
    nf_video_config c;
    dn_config(&c);
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    nf_test_perturb(m->P, 0.15, 23);
    const int n = 2, L = c.frames * nf_model_video_frame_latent(m);
    nf_real *x = tiny_videos(&c, n, 24), *zt = malloc((size_t)n * L * sizeof *zt),
            *g = malloc((size_t)n * L * sizeof *g);
    double loss;
    ck_assert_int_eq(nf_model_video_denoiser_loss(m, x, NULL, n, 7, &loss, zt, g), NF_OK);
    const double s2 = c.noise * c.noise;
    double gmax = 0;
    for (int k = 0; k < L; k++) {
        nf_real z[64], lp[1];
        const double h = 1e-5;
        double lpl, lmi;
        memcpy(z, zt + L, (size_t)L * sizeof *z); /* video 1 */
        z[k] += h;
        ck_assert_int_eq(nf_flow_log_prob(m->flow, lp, z, NULL, NULL, 1), NF_OK);
        lpl = lp[0];
        z[k] -= 2 * h;
        ck_assert_int_eq(nf_flow_log_prob(m->flow, lp, z, NULL, NULL, 1), NF_OK);
        lmi = lp[0];
        const double fd = s2 * (lpl - lmi) / (2 * h), an = g[L + k];
        ck_assert_msg(fabs(fd - an) <= 1e-6 * fmax(1e-6, fabs(fd)), "latent value %d: sigma^2 FD %.9g, target %.9g", k,
                      fd, an);
        gmax = fmax(gmax, fabs(an));
    }
    ck_assert(gmax > 1e-5);
    free(x), free(zt), free(g);
    nf_model_free(m);
}
END_TEST
#endif

typedef struct {
    nf_real *flow;   /* the flow's entries when the stage "denoiser" starts */
    size_t count;
    int seen;
} stage_snap;

static int snap_at_stage_start(void *user, nf_trainer *t)
{
    stage_snap *s = user;
    if (t->model->stage == 1 && t->step == 0 && !s->seen) {
        memcpy(s->flow, t->model->P->value, s->count * sizeof *s->flow);
        s->seen = 1;
    }
    return NF_OK;
}

/* A fit with a denoiser runs stage "flow" then "denoiser"; the second changes no flow entry (to the
 * bit) and lowers the held-out denoiser loss; the learned D(zt) is closer to the flow's score step g
 * than zero is (||D - g|| < ||g|| on held-out noisy latents); sampling with either denoiser keeps the
 * given frames, the learned one refused without a denoiser. */
START_TEST(denoiser_stage_learns_the_score_and_keeps_the_flow)
{
    nf_video_config c;
    dn_config(&c);
    c.denoiser_width = 16;
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    ck_assert_int_eq(m->stage, 0);
    const int n = 64, nh = 16, D = c.frames * c.h * c.w, L = c.frames * nf_model_video_frame_latent(m);
    nf_real *x = tiny_videos(&c, n, 25), *xh = tiny_videos(&c, nh, 26);
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, (size_t)n, D, 0), NF_OK);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 80, tc.batch = 8, tc.eval_every = 0, tc.checkpoint_every = 0, tc.optim.lr = 3e-3;
    stage_snap snap = {.count = m->P->n - nf_model_video_denoiser_params(m)};
    snap.flow = malloc(snap.count * sizeof *snap.flow);
    nf_train_hooks hooks = {.user = &snap, .checkpoint = snap_at_stage_start};
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, src, NULL), NF_OK);
    double before_loss = NAN;
    /* the held-out loss of the zero denoiser, once the flow is trained: measured at the snapshot
     * (the denoiser's entries have not moved then, and D = 0) */
    ck_assert_msg(nf_trainer_run(t, &hooks) == NF_OK, "%s", nf_strerror_last());
    ck_assert_msg(snap.seen, "the checkpoint hook never saw the start of stage denoiser");
    ck_assert_int_eq(m->stage, 1);
    ck_assert(nf_trainer_finished(t));
    nf_trainer_free(t);
    for (size_t j = 0; j < snap.count; j++)
        ck_assert_msg(m->P->value[j] == snap.flow[j], "flow entry %zu moved in stage denoiser: %.9g -> %.9g", j,
                      snap.flow[j], m->P->value[j]);
    /* held-out noisy latents: ||D(zt) - g||^2 against ||g||^2 (the loss of D = 0) */
    nf_real *zt = malloc((size_t)nh * L * sizeof *zt), *g = malloc((size_t)nh * L * sizeof *g),
            *d = malloc((size_t)nh * L * sizeof *d);
    double after_loss;
    ck_assert_int_eq(nf_model_video_denoiser_loss(m, xh, NULL, nh, 0, &after_loss, zt, g), NF_OK);
    ck_assert_int_eq(nf_model_video_denoise_latents(m, d, zt, nh), NF_OK);
    double e2 = 0, g2 = 0;
    for (size_t k = 0; k < (size_t)nh * L; k++) e2 += (d[k] - g[k]) * (d[k] - g[k]), g2 += (double)g[k] * g[k];
    before_loss = g2 / ((double)nh * L);
    ck_assert_msg(fabs(after_loss - e2 / ((double)nh * L)) <= 1e-4 * after_loss, "loss %.9g, recomputed %.9g",
                  after_loss, e2 / ((double)nh * L));
    const double rel = sqrt(e2 / g2);
    ck_assert_msg(g2 > 0 && rel < 0.95, "held-out relative error of the learned score step %.4f (zero: 1); loss %.4g "
                  "against %.4g", rel, after_loss, before_loss);
    /* the score step computed for sampling is the target's */
    nf_real *gs = malloc((size_t)nh * L * sizeof *gs);
    ck_assert_int_eq(nf_model_video_flow_score(m, gs, zt, nh), NF_OK);
    for (size_t k = 0; k < (size_t)nh * L; k++) ck_assert(fabs(gs[k] - g[k]) <= 1e-6 * (fabs(g[k]) + 1e-6));
    /* sampling: both denoisers move the drawn frames by about the score step and keep the given */
    const int ns = 2, P = c.h * c.w;
    nf_real *x0 = malloc((size_t)ns * D * sizeof *x0), *xf = malloc((size_t)ns * D * sizeof *xf),
            *xl = malloc((size_t)ns * D * sizeof *xl);
    nf_video_sample_config sc;
    nf_video_sample_config_init_for(&sc, m);
    ck_assert_int_eq(sc.denoise, NF_VIDEO_DENOISE_LEARNED);
    sc.given = 1, sc.prefix = xh;
    nf_real *outs[3] = {x0, xf, xl};
    for (int k = 0; k < 3; k++) {
        sc.denoise = (nf_video_denoise)k;
        nf_rng *r = nf_rng_alloc(41, 0);
        ck_assert_msg(nf_model_video_sample(m, outs[k], ns, &sc, r, NULL) == NF_OK, "%s", nf_strerror_last());
        nf_rng_free(r);
        ck_assert(k == 0 ? nf_model_video_last_denoise_seconds(m) == 0 : nf_model_video_last_denoise_seconds(m) > 0);
        for (int i = 0; i < ns; i++)
            for (int p = 0; p < P; p++) ck_assert(outs[k][(size_t)i * D + p] == xh[(size_t)i * D + p]);
    }
    double df = 0, dl = 0;
    for (size_t k = 0; k < (size_t)ns * D; k++) df = fmax(df, fabs(xf[k] - x0[k])), dl = fmax(dl, fabs(xl[k] - x0[k]));
    ck_assert_msg(df > 1e-4 && dl > 1e-4, "the score steps moved the samples by %g (flow) and %g (learned) levels", df,
                  dl);
    free(x0), free(xf), free(xl), free(gs), free(zt), free(g), free(d), free(snap.flow), free(x), free(xh);
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* A model with a denoiser reloads with the same configuration, stage names and denoiser output; a
 * model without one has the parameter count of the flow alone and refuses learned denoising. */
START_TEST(denoiser_model_round_trips)
{
    nf_video_config c;
    dn_config(&c);
    nf_model *m, *m0;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    nf_test_perturb(m->P, 0.1, 27);
    c.denoiser = 0;
    ck_assert_int_eq(nf_model_video_create(&m0, &c), NF_OK);
    char spec[NF_VIDEO_SPEC_MAX];
    ck_assert_int_eq(nf_video_spec(&c, spec, sizeof spec), NF_OK);
    nf_flow *alone;
    ck_assert_int_eq(nf_flow_create(&alone, spec, m0->flow->dim, 0, c.seed), NF_OK);
    ck_assert_uint_eq(m0->P->n, alone->P->n);
    ck_assert_int_eq(nf_model_stages(m0), 1);
    ck_assert_uint_eq(nf_model_video_denoiser_params(m0), 0);
    ck_assert_uint_eq(m->P->n, m0->P->n + nf_model_video_denoiser_params(m));
    nf_flow_free(alone);
    const int n = 2, L = c.frames * nf_model_video_frame_latent(m);
    nf_real z[128], d1[128], d2[128];
    nf_test_fill_uniform(z, (size_t)n * L, -1, 1, 28);
    ck_assert_int_eq(nf_model_video_denoise_latents(m0, d1, z, n), NF_EINVAL);
    nf_video_sample_config sc;
    nf_video_sample_config_init_for(&sc, m0);
    ck_assert_int_eq(sc.denoise, NF_VIDEO_DENOISE_NONE);
    sc.denoise = NF_VIDEO_DENOISE_LEARNED;
    nf_real xs[2 * 256];
    nf_rng *r = nf_rng_alloc(1, 0);
    ck_assert_int_eq(nf_model_video_sample(m0, xs, 2, &sc, r, NULL), NF_EINVAL);
    nf_rng_free(r);
    ck_assert_int_eq(nf_model_video_denoise_latents(m, d1, z, n), NF_OK);
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_video_dn_%d.h5", (int)getpid());
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *m2;
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    const nf_video_config *c2 = nf_model_video_config(m2);
    ck_assert(c2 && c2->denoiser == 1 && c2->denoiser_layers == 1 && c2->denoiser_width == 8);
    ck_assert_int_eq(nf_model_stages(m2), 2);
    ck_assert_uint_eq(m2->P->n, m->P->n);
    ck_assert_int_eq(nf_model_video_denoise_latents(m2, d2, z, n), NF_OK);
    for (int k = 0; k < n * L; k++)
        ck_assert_msg(d1[k] == d2[k], "value %d: %.9g before saving, %.9g after", k, d1[k], d2[k]);
    unlink(path);
    /* the model without a denoiser writes no denoiser attributes and reloads as one without */
    ck_assert_int_eq(nf_model_save(path, m0, &meta, NULL), NF_OK);
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION), NF_OK);
    ck_assert(!nf_h5_attr_exists(f, "/model/video", "denoiser"));
    nf_h5_close(f);
    nf_model *m3;
    ck_assert_int_eq(nf_model_open(path, &m3, NULL), NF_OK);
    ck_assert(nf_model_video_config(m3)->denoiser == 0 && m3->P->n == m0->P->n && nf_model_stages(m3) == 1);
    unlink(path);
    nf_model_free(m3);
    nf_model_free(m2);
    nf_model_free(m0);
    nf_model_free(m);
}
END_TEST

/* tiny_config with the learned autoencoder codec (two halvings to the 2 x 2 x 4 latent), width 3. */
static void ae_config(nf_video_config *c)
{
    tiny_config(c);
    c->codec = 1, c->ae_width = 3;
}

#ifdef NF_DOUBLE
/* Stage "codec": its reconstruction loss against central differences on every 5th codec entry; no
 * gradient reaches the flow. */
START_TEST(codec_loss_gradient_matches_finite_differences)
{
    nf_video_config c;
    ae_config(&c);
    nf_model *m;
    ck_assert_msg(nf_model_video_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_stages(m), 2);
    ck_assert_str_eq(nf_model_stage_name(m, 0), "codec");
    ck_assert(m->stage == 0 && m->train_first > 0 && m->train_first + m->train_count == m->P->n);
    nf_test_perturb(m->P, 0.05, 3);
    const int n = 3, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 4);
    size_t idx[3] = {2, 9, 0};
    nf_batch b = {.n = n, .idx = idx, .dim = D, .x = x};
    ck_assert_int_ge(check_loss_fd(m, &b, m->train_first, m->P->n, 5, 1e-4, "codec"), 30);
    free(x);
    nf_model_free(m);
}
END_TEST
#endif

/* On its own: set_stats standardises the latents of the frames it saw; decode(encode(y)) is the
 * reconstruction the loss scores (the standardisation cancels), also for more frames than a chunk. */
START_TEST(encode_decode_match_the_loss)
{
    const int h = 8, w = 8, n = 2 * NF_VIDEO_AE_CHUNK + 5, D = h * w;
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_video_ae *ae;
    ck_assert_msg(nf_video_ae_create(&ae, P, S, h, w, 1, 4, 3, 5, 7) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_video_ae_dim(ae), 2 * 2 * 3);
    nf_test_perturb(P, 0.1, 8);
    nf_real *y = malloc((size_t)n * D * sizeof *y), *r = malloc((size_t)n * D * sizeof *r);
    nf_real *z = malloc((size_t)n * 12 * sizeof *z);
    nf_test_fill_uniform(y, (size_t)n * D, -0.5, 0.5, 9);
    ck_assert_int_eq(nf_video_ae_set_stats(ae, P, S, y, n), NF_OK);
    ck_assert_int_eq(nf_video_ae_encode(ae, P, S, z, y, n), NF_OK);
    for (int ch = 0; ch < 3; ch++) {
        double s = 0, s2 = 0;
        for (int k = 0; k < n * 4; k++) s += z[k * 3 + ch], s2 += z[k * 3 + ch] * z[k * 3 + ch];
        s /= n * 4, s2 /= n * 4;
        ck_assert_msg(fabs(s) < 1e-4 && fabs(s2 - s * s - 1) < 1e-3, "channel %d: mean %g, variance %g", ch, s,
                      s2 - s * s);
    }
    ck_assert_int_eq(nf_video_ae_decode(ae, P, S, r, z, n), NF_OK);
    double mse, *per = malloc((size_t)n * sizeof *per), direct = 0;
    ck_assert_int_eq(nf_video_ae_loss(ae, P, y, n, 0, 1, &mse, per), NF_OK);
    for (int f = 0; f < n; f++) {
        double e = 0;
        for (int q = 0; q < D; q++) e += ((double)r[f * D + q] - y[f * D + q]) * ((double)r[f * D + q] - y[f * D + q]);
        ck_assert_msg(fabs(e / D - per[f]) <= 1e-4 * fmax(per[f], 1e-3), "frame %d: %g from decode(encode), %g in the loss",
                      f, e / D, per[f]);
        direct += e;
    }
    ck_assert_msg(fabs(direct / ((double)n * D) - mse) <= 1e-4 * mse, "mean %g and %g", direct / ((double)n * D), mse);
    free(y), free(r), free(z), free(per);
    nf_video_ae_free(ae);
    nf_params_free(P), nf_params_free(S);
}
END_TEST

/* The store at the last step of the first stage (progress runs before the trainer moves on). */
typedef struct {
    const nf_model *m;
    long last;
    nf_real *at_switch;
} snapshot;

static void keep_first_stage(void *user, const nf_train_progress *p)
{
    snapshot *s = user;
    if (s->m->stage == 0 && p->step == s->last && !s->at_switch) {
        s->at_switch = malloc(s->m->P->n * sizeof *s->at_switch);
        memcpy(s->at_switch, s->m->P->value, s->m->P->n * sizeof *s->at_switch);
    }
}

/* Both stages through the trainer: the codec's error falls and no flow entry moves in its stage;
 * the latent scale is set when the flow's stage begins; the flow's stage moves no codec entry; the
 * file round-trips with its codec. */
START_TEST(two_stages_train_and_round_trip)
{
    nf_video_config c;
    ae_config(&c);
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_OK);
    const int n = 48, D = c.frames * c.h * c.w;
    nf_real *x = tiny_videos(&c, n, 11);
    nf_source *src;
    ck_assert_int_eq(nf_source_rows_wrap(&src, x, NULL, (size_t)n, D, 0), NF_OK);
    double e0, e1;
    ck_assert_int_eq(nf_model_video_codec_error(m, x, n, &e0), NF_OK);
    const size_t first = m->train_first; /* the codec's entries follow the flow's */
    nf_real *P0 = malloc(m->P->n * sizeof *P0);
    memcpy(P0, m->P->value, m->P->n * sizeof *P0);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 200, tc.batch = 8, tc.eval_every = 0, tc.checkpoint_every = 0, tc.optim.lr = 1e-2;
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &tc, src, NULL), NF_OK);
    snapshot snap = {.m = m, .last = tc.max_steps};
    const nf_train_hooks hooks = {.user = &snap, .progress = keep_first_stage};
    ck_assert_msg(nf_trainer_run(t, &hooks) == NF_OK, "%s", nf_strerror_last());
    nf_trainer_free(t);
    ck_assert_int_eq(m->stage, 1);
    ck_assert_msg(snap.at_switch, "no progress at the codec stage's last step");
    ck_assert_int_eq(nf_model_video_codec_error(m, x, n, &e1), NF_OK);
    ck_assert_msg(e1 < 0.7 * e0, "codec error %.4f levels before, %.4f after", e0, e1);
    int moved[2][2] = {{0, 0}, {0, 0}}; /* [stage][flow entry, codec entry] */
    for (size_t j = 0; j < m->P->n; j++) {
        moved[0][j >= first] += snap.at_switch[j] != P0[j];
        moved[1][j >= first] += m->P->value[j] != snap.at_switch[j];
    }
    ck_assert_msg(moved[0][0] == 0 && moved[0][1] > 0, "stage codec moved %d flow and %d codec entries", moved[0][0],
                  moved[0][1]);
    ck_assert_msg(moved[1][0] > 0 && moved[1][1] == 0, "stage flow moved %d flow and %d codec entries", moved[1][0],
                  moved[1][1]);
    int scale_set = 0;
    const nf_param_slice *sc = nf_params_find(m->S, "codec.latent_scale");
    ck_assert(sc);
    for (size_t q = 0; q < sc->size; q++) scale_set += m->S->value[sc->offset + q] != 1;
    ck_assert_msg(scale_set > 0, "the latent scale was not set when the flow's stage began");
    double bpd[4], again[4];
    ck_assert_int_eq(nf_model_video_bpd(m, bpd, x, 4, NULL), NF_OK);
    char path[64];
    snprintf(path, sizeof path, "/tmp/nf_video_ae_%d.h5", (int)getpid());
    nf_model_meta meta = {0};
    ck_assert_msg(nf_model_save(path, m, &meta, NULL) == NF_OK, "%s", nf_strerror_last());
    nf_model *m2;
    ck_assert_msg(nf_model_open(path, &m2, NULL) == NF_OK, "%s", nf_strerror_last());
    const nf_video_config *c2 = nf_model_video_config(m2);
    ck_assert(c2 && c2->codec == 1 && c2->ae_width == 3 && nf_model_stages(m2) == 2 && m2->P->n == m->P->n);
    ck_assert_int_eq(nf_model_video_bpd(m2, again, x, 4, NULL), NF_OK);
    for (int i = 0; i < 4; i++) ck_assert_msg(again[i] == bpd[i], "video %d: %.9g, after saving %.9g", i, bpd[i], again[i]);
    unlink(path);
    /* a DCT model writes no codec attributes */
    c.codec = 0;
    nf_model *m3;
    ck_assert_int_eq(nf_model_video_create(&m3, &c), NF_OK);
    ck_assert_int_eq(nf_model_stages(m3), 1);
    ck_assert_int_eq(nf_model_save(path, m3, &meta, NULL), NF_OK);
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION), NF_OK);
    ck_assert(!nf_h5_attr_exists(f, "/model/video", "codec"));
    nf_h5_close(f);
    unlink(path);
    nf_model_free(m3);
    nf_model_free(m2);
    free(P0), free(snap.at_switch), free(x);
    nf_source_free(src);
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
    dn_config(&c);
    c.denoiser_width = 9; /* not a multiple of the 2 heads */
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "denoiser width 9"), "%s", nf_strerror_last());
    dn_config(&c);
    c.noise = 0;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    dn_config(&c);
    c.denoiser = 2;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ae_config(&c);
    c.h = c.w = 12, c.block = 3, c.keep = 1;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "power of two"), "%s", nf_strerror_last());
    ae_config(&c);
    c.ae_width = 0;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "autoencoder width 0"), "%s", nf_strerror_last());
    ae_config(&c);
    c.codec = 2;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    nf_video_denoise d;
    ck_assert_int_eq(nf_video_denoise_parse("learned", &d), NF_OK);
    ck_assert_int_eq(d, NF_VIDEO_DENOISE_LEARNED);
    ck_assert_int_eq(nf_video_denoise_parse("tweedie", &d), NF_EINVAL);
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
    tcase_add_test(t, denoiser_loss_gradient_matches_finite_differences);
    tcase_add_test(t, denoiser_target_is_the_scaled_score);
#endif
    tcase_add_test(t, denoiser_stage_learns_the_score_and_keeps_the_flow);
    tcase_add_test(t, denoiser_model_round_trips);
    tcase_add_loop_test(t, samplers_agree_and_keep_given_frames, 0, 3);
    tcase_add_test(t, fits_and_round_trips);
    tcase_add_test(t, bits_per_dim_in_chunks_equal_video_by_video);
    tcase_add_test(t, samples_in_chunks_equal_video_by_video);
#ifdef NF_DOUBLE
    tcase_add_test(t, codec_loss_gradient_matches_finite_differences);
#endif
    tcase_add_test(t, encode_decode_match_the_loss);
    tcase_add_test(t, two_stages_train_and_round_trip);
    tcase_add_test(t, bad_configurations_are_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
