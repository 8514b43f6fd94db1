/* tests/check_video_autoencoder.c - the learned latent codec of the video kind
 * (training/video_autoencoder.h, nf video fit --codec ae): its reconstruction loss's gradient against
 * finite differences (double build), with no gradient outside its entries; encode/decode invert the
 * latent standardisation and agree with the loss's own pass, and the standardised latents of the
 * frames the statistics came from have mean 0 and variance 1 per channel; the two stages by the one
 * trainer (the codec's error falls while no flow entry moves, the flow's stage begins with the latent
 * scale set and trains no codec entry); a model file round-trips, and a DCT model's file has no codec
 * attributes; bad configurations are refused with a message. */
#include <check.h>
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
#include "tests/testutil.h"

/* 4 frames of 8 x 8, the latent 2 x 2 x 4 (block 4: two halvings), a codec of width 3. */
static void ae_config(nf_video_config *c)
{
    nf_video_config_init(c);
    c->frames = 4, c->h = c->w = 8, c->c = 1, c->levels = 9;
    c->block = 4, c->keep = 2;
    c->local_blocks = 1, c->local_layers = 1, c->global_blocks = 1, c->global_layers = 1;
    c->width = 8, c->heads = 2;
    c->noise = 0.05;
    c->codec = 1, c->ae_width = 3;
    c->seed = 5;
}

/* Videos of grey levels: a bright bar moving right one pixel a frame, plus seeded speckle. */
static nf_real *videos(const nf_video_config *c, int n, uint64_t seed)
{
    const int P = c->h * c->w * c->c, D = c->frames * P;
    nf_real *x = malloc((size_t)n * D * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < c->frames; t++)
            for (int p = 0; p < P; p++) {
                int row = p / c->w, col = p % c->w, on = row >= 2 && row < 6 && col >= t + i % 3 && col < t + 2 + i % 3;
                x[(size_t)i * D + (size_t)t * P + p] = (nf_real)(on ? c->levels - 1 : (nf_rng_uniform(r) < 0.2));
            }
    nf_rng_free(r);
    return x;
}

#ifdef NF_DOUBLE
/* Stage "codec": central differences of its loss (the same dequantisation each call: the draw count
 * restored) against the gradient on every 5th codec entry; no gradient reaches the flow. */
START_TEST(codec_loss_gradient_matches_finite_differences)
{
    nf_video_config c;
    ae_config(&c);
    nf_model *m;
    ck_assert_msg(nf_model_video_create(&m, &c) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_stages(m), 2);
    ck_assert_str_eq(nf_model_stage_name(m, 0), "codec");
    ck_assert_int_eq(m->stage, 0);
    nf_test_perturb(m->P, 0.05, 3);
    const int n = 3, D = c.frames * c.h * c.w;
    nf_real *x = videos(&c, n, 4);
    size_t idx[3] = {2, 9, 0};
    nf_batch b = {.n = n, .idx = idx, .dim = D, .x = x};
    nf_real *S0 = malloc(m->S->n * sizeof *S0);
    memcpy(S0, m->S->value, m->S->n * sizeof *S0);
    nf_model_set_training(m, 1);
    double loss;
    nf_params_zero_grad(m->P);
    ck_assert_int_eq(m->type->loss(m, &b, NULL, &loss), NF_OK);
    nf_real *an = malloc(m->P->n * sizeof *an);
    memcpy(an, m->P->grad, m->P->n * sizeof *an);
    for (size_t j = 0; j < m->train_first; j++) ck_assert_msg(an[j] == 0, "flow entry %zu has a gradient", j);
    ck_assert(m->train_count > 0 && m->train_first + m->train_count == m->P->n);
    int checked = 0;
    for (size_t j = m->train_first; j < m->P->n; j += 5) {
        const nf_real v = m->P->value[j];
        const double h = 1e-6;
        double lp, lm;
        m->P->value[j] = v + h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, &b, NULL, &lp), NF_OK);
        m->P->value[j] = v - h;
        memcpy(m->S->value, S0, m->S->n * sizeof *S0);
        ck_assert_int_eq(m->type->loss(m, &b, NULL, &lm), NF_OK);
        m->P->value[j] = v;
        const double fd = (lp - lm) / (2 * h), err = fabs(fd - an[j]) / fmax(1e-4, fabs(fd) + fabs(an[j]));
        ck_assert_msg(err < 1e-5, "codec entry %zu: finite difference %.9g, gradient %.9g", j, fd, an[j]);
        checked++;
    }
    ck_assert_int_ge(checked, 30);
    free(an), free(S0), free(x);
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
    nf_real *x = videos(&c, n, 11);
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
    for (size_t k = 0; k < m->S->nslices; k++)
        if (!strcmp(m->S->slices[k].name, "codec.latent_scale"))
            for (size_t q = 0; q < m->S->slices[k].size; q++) scale_set += m->S->value[m->S->slices[k].offset + q] != 1;
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
    ae_config(&c);
    c.h = c.w = 12, c.block = 3, c.keep = 1;
    nf_model *m;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "power of two"), "%s", nf_strerror_last());
    ae_config(&c);
    c.ae_width = 0;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "autoencoder width 0"), "%s", nf_strerror_last());
    ae_config(&c);
    c.codec = 2;
    ck_assert_int_eq(nf_model_video_create(&m, &c), NF_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("video_autoencoder");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
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
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
