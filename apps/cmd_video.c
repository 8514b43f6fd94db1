/* apps/cmd_video.c - nf video: latent video flows (fit, eval, sample) over the "video" model kind
 * (training/model_video.h), the rows of a video data file (datasets/videos.h) and the one trainer;
 * progress, checkpoints and --resume as nf fit (apps/train_run.h); samples as animated GIFs or PNG
 * filmstrips (plot/video_out.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "apps/mpi.h"
#include "apps/train_run.h"
#include "core/clock.h"
#include "core/h5.h"
#include "datasets/videos.h"
#include "plot/video_out.h"
#include "training/model_video.h"

static const char *const VIDEO_HELP =
    "usage: nf video fit|eval|sample ...   (nf video SUBCOMMAND --help)\n"
    "\n"
    "Latent video flows in the manner of STARFlow-V: each frame encoded by a block DCT that keeps the\n"
    "low frequencies (or a learned convolutional autoencoder), shallow TarFlow blocks within each\n"
    "frame, a deep causal TarFlow over the whole video (a frame's tokens read every earlier frame),\n"
    "scored in bits per dimension.\n"
    "\n"
    "  fit       train on a video data file (checkpoints, --resume)\n"
    "  eval      bits/dim of videos, and the codec's reconstruction error\n"
    "  sample    draw videos (or continue given frames) into an animated GIF or a PNG filmstrip\n"
    "\n"
    "example:\n"
    "  nf data make video-sprites -n 2000 -o sprites.h5 && nf data split sprites.h5 --test 0.1\n"
    "  nf video fit sprites.train.h5 -o video.h5\n"
    "  nf video eval video.h5 sprites.test.h5\n"
    "  nf video sample video.h5 -n 4 -o videos.gif\n";

static const char *const FIT_HELP =
    "usage: nf video fit VIDEOS.h5 -o MODEL.h5 [options]\n"
    "       nf video fit --resume MODEL.h5 [--threads N] [--quiet]\n"
    "\n"
    "Fit a latent video flow to the videos of VIDEOS.h5 (nf data make video-sprites|video-balls, nf data\n"
    "import of an (n, T, H, W[, C]) NPY array) by maximum likelihood of the dequantised pixels' kept DCT\n"
    "coefficients; the loss is bits per (kept) dimension.  Progress on stderr; the model (with a\n"
    "resumable checkpoint) goes to MODEL.h5.\n"
    "\n"
    "codec:\n"
    "  --codec NAME         dct, or ae: a convolutional autoencoder to the same    [dct]\n"
    "                       latent grid, trained first (a stage \"codec\" on the reconstruction\n"
    "                       error, then frozen; bits/dim are then of its latents)\n"
    "  --block B            DCT block side, dividing the frame sides               [8]\n"
    "                       (ae: the downsampling, a power of two)\n"
    "  --keep K             lowest frequencies kept per block side (K = B: lossless) [4]\n"
    "                       (ae: K x K x channels latent values per block)\n"
    "  --ae-width N         the autoencoder's hidden channels                      [16]\n"
    "flow:\n"
    "  --local-blocks N     TarFlow blocks within each frame                       [2]\n"
    "  --local-layers N     transformer layers in each                             [1]\n"
    "  --global-blocks N    causal TarFlow blocks over the whole video             [1]\n"
    "  --global-layers N    transformer layers in each (the deep one)              [4]\n"
    "  --width N            transformer width                                      [64]\n"
    "  --heads N            attention heads (dividing the width)                   [4]\n"
    "  --noise S            Gaussian noise on the latents in training (1 = 0..L)   [0.02]\n"
    "  --independent        the baseline: global blocks within each frame too (no time)\n"
    "  --context K          earlier frames each global attention layer reads (0: all) [1]\n"
    "  --global-first       the global blocks on the data side (they read the codec's\n"
    "                       coefficients), the local ones after them\n"
    "denoiser (flow-score matching; a second stage \"denoiser\" after the stage \"flow\"):\n"
    "  --denoiser           also train a small causal transformer to predict the flow's score step\n"
    "                       sigma^2 grad log p on noisy latents (sigma = --noise); used by sample\n"
    "  --denoiser-layers N  its transformer layers                                 [2]\n"
    "  --denoiser-width N   its width (a multiple of --heads)                      [32]\n"
    "training:\n"
    "  -o, --output FILE    model file (written atomically at every checkpoint)\n"
    "  --resume FILE        continue a run from its last checkpoint\n"
    "  --steps N            optimizer steps (per stage with --denoiser or --codec ae) [2000]\n"
    "  --batch N            videos per step                                        [16]\n"
    "  --lr X               Adam learning rate, cosine schedule                    [1e-3]\n"
    "  --clip X             gradient norm clip (0: off)                            [50]\n"
    "  --ema D              validate and keep a moving average of the weights over\n"
    "                       about 1/(1-D) steps (0: off)                           [0]\n"
    "  --val-frac F         videos held out for validation                         [0.1]\n"
    "  --eval-every N       validate every N steps (0: never)                      [100]\n"
    "  --patience N         stop after N validations without improvement (0: off)  [20]\n"
    "  --checkpoint-every N checkpoint every N steps                               [200]\n"
    "  --seed S             seed of weights, split, batches and noise              [1]\n"
    "  --threads N          threads                                                [all cores]\n"
    "  -q, --quiet          no progress\n"
    "  --force              replace an existing MODEL.h5 (without it a new fit refuses to start over it)\n"
    "\n"
    "example:\n"
    "  nf video fit sprites.train.h5 --steps 1000 --global-layers 4 -o video.h5\n"
    "  nf video fit sprites.train.h5 --steps 400 --denoiser --noise 0.05 -o denoised.h5\n";

static const char *const EVAL_HELP =
    "usage: nf video eval MODEL.h5 VIDEOS.h5 [--json] [--batch N] [--compare OTHER.h5] [--threads N]\n"
    "\n"
    "Bits per dimension of the videos under the model (one dequantisation draw per video, seeded by its\n"
    "index, so the number is reproducible) with its standard error, per kept DCT coefficient (with\n"
    "--keep equal to --block, per pixel), and the codec's reconstruction error (RMS, grey levels).\n"
    "\n"
    "  --json             one JSON object\n"
    "  --batch N          videos per evaluation batch   [64]\n"
    "  --compare OTHER    also OTHER.h5 (a video model of the same codec) on the same videos, and\n"
    "                     the paired difference MODEL - OTHER with its standard error over videos\n"
    "                     (hard videos are hard for both, so it is far tighter than the two\n"
    "                     errors: is one model better on these videos?)\n"
    "  --threads N        threads                       [all cores]\n"
    "\n"
    "examples:\n"
    "  nf video eval video.h5 sprites.test.h5 --json\n"
    "  nf video eval video.h5 sprites.test.h5 --compare independent.h5\n";

static const char *const SAMPLE_HELP =
    "usage: nf video sample MODEL.h5 -o OUT.gif|OUT.png [options]\n"
    "\n"
    "Draw videos: z ~ N(0, T^2 I), the deep causal blocks inverted first (token by token, or by\n"
    "video-aware Jacobi: each frame's tokens swept together from the previous frame's, the earlier\n"
    "frames cached), then the frame-local blocks, then the DCT decoder.  OUT.gif plays the videos side\n"
    "by side; OUT.png is a filmstrip, one row a video.\n"
    "\n"
    "  -n N               videos                                          [4]\n"
    "  --given K          keep the first K frames of videos from --from: 1 = image-to-video,\n"
    "                     K > 1 = continuation                              [0]\n"
    "  --from VIDEOS.h5   the videos whose first frames are given (video i for sample i, cycling)\n"
    "  --method M         sequential|jacobi                               [sequential]\n"
    "  --tol X            Jacobi: largest change to stop at (1 = 0..L)    [1e-4]\n"
    "  --whole            Jacobi over all tokens at once instead of frame by frame\n"
    "  --compare          also decode token by token: report the time, the passes and the largest\n"
    "                     difference (grey levels) against it\n"
    "  --temperature T    scale of the latent draws                        [1]\n"
    "  --denoise D        none|flow|learned: move the drawn latents to the clean ones'\n"
    "                     posterior mean, by the flow's score step z + s^2 grad log p(z)\n"
    "                     (a backward pass) or the learned causal denoiser z + D(z) (one\n"
    "                     transformer pass; fit --denoiser)  [learned if the model has one, else none]\n"
    "  --compare-denoise  also draw the same videos with each denoising (none, flow and, with a\n"
    "                     denoiser, learned): report their times and RMS differences (grey levels)\n"
    "  --scale S          GIF / PNG pixel magnification                    [4]\n"
    "  --delay CS         GIF: hundredths of a second per frame            [12]\n"
    "  --h5 FILE          also write the videos as a video data file (levels, not rounded)\n"
    "  --seed S           random seed                                      [1]\n"
    "  --json             one JSON object on stdout\n"
    "  --threads N        threads                                          [all cores]\n"
    "\n"
    "example:\n"
    "  nf video sample video.h5 -n 8 --method jacobi --compare -o videos.gif\n"
    "  nf video sample video.h5 -n 4 --given 4 --from sprites.test.h5 -o continued.png\n"
    "  nf video sample denoised.h5 -n 8 --compare-denoise --json -o videos.gif\n";

/* The shape of a video data file into c. */
static int video_shape(const char *path, nf_video_config *c)
{
    nf_video_info info;
    NF_TRY(nf_video_info_read(path, &info, NULL));
    c->frames = info.frames, c->h = info.h, c->w = info.w, c->c = info.c, c->levels = info.levels;
    return NF_OK;
}

typedef struct video_describe_ctx {
    const char *cmd;
    const nf_source *train, *val;
} video_describe_ctx;

static void video_describe(void *user, const nf_model *m)
{
    const video_describe_ctx *d = user;
    const nf_video_config *c = nf_model_video_config(m);
    char codec[96];
    if (c->codec == 1) snprintf(codec, sizeof codec, "autoencoder, %dx%d downsampling", c->block, c->block);
    else snprintf(codec, sizeof codec, "DCT %dx%d blocks, %dx%d kept", c->block, c->block, c->keep, c->keep);
    fprintf(stderr, "nf %s: %zu training and %zu validation videos of %d frames %dx%dx%d (%d levels); latent %d x %d "
                    "tokens of %d (%s); %d local + %d global TarFlow blocks, %zu parameters\n",
            d->cmd, d->train->n, d->val ? d->val->n : 0, c->frames, c->h, c->w, c->c, c->levels, c->frames,
            nf_model_video_frame_tokens(m), c->keep * c->keep * c->c, codec, c->local_blocks, c->global_blocks, m->P->n);
    if (c->codec == 1)
        fprintf(stderr, "nf %s: stages: codec (the autoencoder of width %d on its reconstruction, mean squared error "
                        "per value as mse), then flow on its frozen latents\n", d->cmd, c->ae_width);
    if (c->denoiser)
        fprintf(stderr, "nf %s: stages: flow, then denoiser (a causal transformer of %d layers, width %d, %zu of the "
                        "parameters; its stage reports the mean squared error (mse) per latent value)\n",
                d->cmd, c->denoiser_layers, c->denoiser_width,
                nf_model_video_denoiser_params(m));
}

static int cmd_fit(int argc, char **argv)
{
    const char *cmd = "video fit", *out = NULL, *resume = NULL, *pos[1];
    nf_video_config mc;
    nf_video_config_init(&mc);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 2000;
    tc.batch = 16;
    tc.clip = 50;
    tc.eval_every = 100;
    tc.checkpoint_every = 200;
    tc.patience = 20;
    double lr = 1e-3, val_frac = 0.1;
    long seed = 1;
    int threads = 0, quiet = 0, force = 0;
    const char *codec = "dct";
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--resume", .kind = FLAG_STRING, .dst = &resume},
        {.name = "--codec", .kind = FLAG_STRING, .dst = &codec},
        {.name = "--ae-width", .kind = FLAG_INT, .dst = &mc.ae_width, .lo = 1, .hi = 4096},
        {.name = "--block", .kind = FLAG_INT, .dst = &mc.block, .lo = 1, .hi = 32},
        {.name = "--keep", .kind = FLAG_INT, .dst = &mc.keep, .lo = 1, .hi = 32},
        {.name = "--local-blocks", .kind = FLAG_INT, .dst = &mc.local_blocks, .lo = 0, .hi = 64},
        {.name = "--local-layers", .kind = FLAG_INT, .dst = &mc.local_layers, .lo = 1, .hi = 64},
        {.name = "--global-blocks", .kind = FLAG_INT, .dst = &mc.global_blocks, .lo = 1, .hi = 64},
        {.name = "--global-layers", .kind = FLAG_INT, .dst = &mc.global_layers, .lo = 1, .hi = 64},
        {.name = "--width", .kind = FLAG_INT, .dst = &mc.width, .lo = 1, .hi = 4096},
        {.name = "--heads", .kind = FLAG_INT, .dst = &mc.heads, .lo = 1, .hi = 64},
        {.name = "--noise", .kind = FLAG_DOUBLE, .dst = &mc.noise, .lo = 0, .hi = 1},
        {.name = "--independent", .kind = FLAG_BOOL, .dst = &mc.independent},
        {.name = "--global-first", .kind = FLAG_BOOL, .dst = &mc.global_first},
        {.name = "--context", .kind = FLAG_INT, .dst = &mc.context, .lo = 0, .hi = 4096},
        {.name = "--denoiser", .kind = FLAG_BOOL, .dst = &mc.denoiser},
        {.name = "--denoiser-layers", .kind = FLAG_INT, .dst = &mc.denoiser_layers, .lo = 1, .hi = 64},
        {.name = "--denoiser-width", .kind = FLAG_INT, .dst = &mc.denoiser_width, .lo = 1, .hi = 4096},
        FLAGS_TRAINING(tc, lr, val_frac, seed, threads, quiet),
        FLAG_FORCE(force),
        FLAG_EMA(tc),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = FIT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (resume && flags_check_resume(&fc, argc, argv, resume, pos[0] != NULL) != FLAGS_OK) return 2;
    if (!resume && !pos[0]) return cli_usage_error(cmd, "no video file given (expected: nf video fit VIDEOS.h5 -o MODEL.h5)");
    if (!resume && !out) return cli_usage_error(cmd, "no output file given (expected -o MODEL.h5)");
    if (strcmp(codec, "dct") && strcmp(codec, "ae"))
        return cli_usage_error(cmd, "--codec %s: expected dct or ae", codec);
    mc.codec = !strcmp(codec, "ae");
    if ((urc = app_mpi_start(cmd)) != 0) return urc;
    const int part = app_mpi_rank(), parts = app_mpi_size();
    if (part != 0) quiet = 1;
    cli_set_threads(threads);
    nf_model_meta meta = {0};
    app_kind_fit f = {.cmd = cmd, .out = out, .resume = resume, .data = pos[0], .dataset = "/x", .val_frac = val_frac,
                      .meta = &meta, .tc = &tc, .quiet = quiet, .describe = video_describe};
    int rc = app_kind_fit_open(&f, "video", "video file", force, lr, seed);
    if (rc == NF_OK && !resume) rc = video_shape(f.data, &mc);
    if (rc == NF_OK && !resume) rc = nf_video_config_check(&mc);
    mc.seed = tc.seed;
    const nf_video_config *c = f.model ? nf_model_video_config(f.model) : &mc;
    const size_t dim = (size_t)c->frames * c->h * c->w * c->c;
    if (rc == NF_OK) rc = nf_source_rows_load_share(&f.all, f.data, "/x", dim, 0, 0, part, parts);
    if (rc == NF_OK) rc = nf_source_split(f.all, f.val_frac, tc.seed, &f.val, &f.train);
    if (rc == NF_OK && !f.model) rc = nf_model_video_create(&f.model, &mc);
    video_describe_ctx dc = {.cmd = cmd, .train = f.train, .val = f.val};
    f.user = &dc;
    return app_kind_fit_close(&f, app_kind_fit_go(&f, rc));
}

/* The videos of a data file, which must have the model's shape. */
static int load_videos(const char *path, nf_model *m, nf_source **s)
{
    const nf_video_config *c = nf_model_video_config(m);
    nf_video_config d = *c;
    NF_TRY(video_shape(path, &d));
    if (d.frames != c->frames || d.h != c->h || d.w != c->w || d.c != c->c || d.levels != c->levels)
        return nf_error(NF_EDATA, "%s holds videos of %d frames %dx%dx%d with %d levels; the model was trained on %d "
                                  "frames %dx%dx%d with %d levels", path, d.frames, d.h, d.w, d.c, d.levels, c->frames,
                        c->h, c->w, c->c, c->levels);
    return nf_source_rows_load(s, path, "/x", (size_t)c->frames * c->h * c->w * c->c, 0, 0);
}

/* Per-video bits/dim of the videos s under video model m, read in its stage "flow" (a model with
 * a denoiser or an autoencoder has others, whose metric is not bits/dim): bpd (s->n). */
static int per_video_bpd(nf_model *m, const nf_source *s, int batch, double *bpd)
{
    int rc = NF_OK;
    for (int k = 0; rc == NF_OK && k < nf_model_stages(m); k++)
        if (!strcmp(nf_model_stage_name(m, k), "flow")) rc = nf_model_set_stage(m, k);
    double mean;
    if (rc == NF_OK) rc = nf_model_evaluate(m, s, 0, batch, NULL, &mean, NULL, bpd);
    for (size_t i = 0; rc == NF_OK && i < s->n; i++) bpd[i] = -bpd[i];
    return rc;
}

/* The mean of a_i - b_i (b NULL: of a_i) over n values, and its standard error. */
static void mean_stderr(const double *a, const double *b, size_t n, double *mean, double *se)
{
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double v = b ? a[i] - b[i] : a[i];
        s1 += v, s2 += v * v;
    }
    *mean = s1 / n;
    *se = n > 1 ? sqrt(fmax(s2 - s1 * s1 / n, 0) / (n - 1) / n) : 0;
}

static int cmd_eval(int argc, char **argv)
{
    const char *cmd = "video eval", *pos[2], *other = NULL;
    int json = 0, batch = 64, threads = 0;
    const flag_spec flags[] = {
        {.name = "--json", .kind = FLAG_BOOL, .dst = &json},
        {.name = "--batch", .kind = FLAG_INT, .dst = &batch, .lo = 1, .hi = 1 << 20},
        {.name = "--compare", .kind = FLAG_STRING, .dst = &other},
        FLAG_THREADS(threads),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = EVAL_HELP, .flags = flags, .max_pos = 2};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    cli_set_threads(threads);
    if (!pos[0] || !pos[1]) return cli_usage_error(cmd, "expected MODEL.h5 and VIDEOS.h5");
    if (app_mpi_refuse(cmd)) return 2;
    nf_model *m = NULL;
    nf_source *s = NULL;
    double mean = NAN, se = NAN, rms = NAN, omean = NAN, dmean = NAN, dse = NAN;
    double *bpd = NULL, *obpd = NULL;
    int rc = app_open_model_kind(pos[0], "video", &m, NULL);
    if (rc == NF_OK) rc = load_videos(pos[1], m, &s);
    if (rc == NF_OK && !(bpd = malloc(s->n * sizeof *bpd))) rc = nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK) rc = per_video_bpd(m, s, batch, bpd);
    if (rc == NF_OK) rc = nf_model_video_codec_error(m, nf_source_rows(s).x, (int)s->n, &rms);
    if (rc == NF_OK && other) {
        /* the other model on the same videos: the paired difference, video by video */
        nf_model *o = NULL;
        rc = app_open_model_kind(other, "video", &o, NULL);
        const nf_video_config *a = rc == NF_OK ? nf_model_video_config(m) : NULL;
        const nf_video_config *b = rc == NF_OK ? nf_model_video_config(o) : NULL;
        if (rc == NF_OK && (a->frames != b->frames || a->h != b->h || a->w != b->w || a->c != b->c ||
                            a->levels != b->levels || a->codec != b->codec || a->block != b->block ||
                            a->keep != b->keep))
            rc = nf_error(NF_EINVAL, "%s: another video shape or codec than %s (expected the same, so that their "
                                     "bits/dim measure the same latents)", other, pos[0]);
        if (rc == NF_OK && !(obpd = malloc(s->n * sizeof *obpd))) rc = nf_error(NF_ENOMEM, "out of memory");
        if (rc == NF_OK) rc = per_video_bpd(o, s, batch, obpd);
        nf_model_free(o);
    }
    if (rc == NF_OK) mean_stderr(bpd, NULL, s->n, &mean, &se);
    if (rc == NF_OK && obpd) {
        double unused;
        mean_stderr(obpd, NULL, s->n, &omean, &unused);
        mean_stderr(bpd, obpd, s->n, &dmean, &dse);
    }
    if (rc == NF_OK) {
        const nf_video_config *c = nf_model_video_config(m);
        const char *per = c->codec == 1 ? "latent value" : c->keep == c->block ? "pixel" : "kept DCT coefficient";
        if (json) {
            printf("{\"videos\": %zu, \"bits_per_dim\": %.9g, \"bits_per_dim_stderr\": %.9g, \"per\": \"%s\", "
                   "\"codec_rms_levels\": %.9g", s->n, mean, se, per, rms);
            if (other)
                printf(", \"compare\": {\"model\": \"%s\", \"bits_per_dim\": %.9g, \"difference\": %.9g, "
                       "\"difference_stderr\": %.9g}", other, omean, dmean, dse);
            printf("}\n");
        } else {
            printf("data          %s (%zu videos of %d frames %dx%dx%d, %d levels)\n", pos[1], s->n, c->frames, c->h,
                   c->w, c->c, c->levels);
            printf("bits/dim      %.5f +- %.5f (per %s)\n", mean, se, per);
            if (c->codec == 1)
                printf("codec error   %.4f grey levels RMS (autoencoder, width %d, %dx%d downsampling)\n", rms,
                       c->ae_width, c->block, c->block);
            else
                printf("codec error   %.4f grey levels RMS (DCT %dx%d blocks, %dx%d kept)\n", rms, c->block, c->block,
                       c->keep, c->keep);
            if (other)
                printf("against       %s: %.5f bits/dim; this model - that one %+.5f +- %.5f (paired over the videos)\n",
                       other, omean, dmean, dse);
        }
    }
    free(bpd), free(obpd);
    nf_source_free(s);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* n videos of the file `from`, cycling, as the prefixes of the samples (levels). */
static int given_videos(const char *from, nf_model *m, int n, nf_real **prefix)
{
    nf_source *s = NULL;
    NF_TRY(load_videos(from, m, &s));
    const nf_video_config *c = nf_model_video_config(m);
    const size_t D = (size_t)c->frames * c->h * c->w * c->c;
    int rc = (*prefix = malloc((size_t)n * D * sizeof **prefix)) ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    for (int i = 0; rc == NF_OK && i < n; i++)
        memcpy(*prefix + (size_t)i * D, nf_source_rows(s).x + ((size_t)i % s->n) * D, D * sizeof **prefix);
    nf_source_free(s);
    return rc;
}

static int save_videos_h5(const char *path, const nf_real *x, int n, const nf_video_config *c)
{
    nf_video_info info = {.frames = c->frames, .h = c->h, .w = c->w, .c = c->c, .levels = c->levels};
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, "nf-data", 1));
    int rc = nf_h5_write_real(f, "/x", x, (size_t)n, nf_video_info_dim(&info));
    if (rc == NF_OK) rc = nf_video_attrs_write(f, &info);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", "nf video sample");
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* The same n videos (the same seed) without denoising, with the flow's score step and, when the
 * model has one, with the learned denoiser: each one's denoising time, RMS change from the
 * undenoised videos (grey levels), and the RMS difference between the two denoisers' videos. */
typedef struct dn_compare {
    double seconds[3], step_rms[3], learned_flow_rms;
} dn_compare;

static double rms_diff(const nf_real *a, const nf_real *b, size_t n)
{
    double s = 0;
    for (size_t k = 0; k < n; k++) s += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
    return sqrt(s / (double)n);
}

static int compare_denoisers(nf_model *m, int n, const nf_video_sample_config *base, uint64_t seed, dn_compare *r)
{
    const nf_video_config *c = nf_model_video_config(m);
    const size_t nd = (size_t)n * c->frames * c->h * c->w * c->c;
    const int kinds = c->denoiser ? 3 : 2;
    nf_real *x[3] = {NULL, NULL, NULL};
    int rc = NF_OK;
    for (int k = 0; k < kinds && rc == NF_OK; k++) {
        nf_video_sample_config sc = *base;
        sc.denoise = (nf_video_denoise)k;
        nf_rng *rng = nf_rng_alloc(seed, 0);
        x[k] = malloc(nd * sizeof *x[k]);
        rc = rng && x[k] ? nf_model_video_sample(m, x[k], n, &sc, rng, NULL) : nf_error(NF_ENOMEM, "out of memory");
        nf_rng_free(rng);
        r->seconds[k] = nf_model_video_last_denoise_seconds(m);
        if (rc == NF_OK) r->step_rms[k] = rms_diff(x[k], x[0], nd);
    }
    if (rc == NF_OK && kinds == 3) r->learned_flow_rms = rms_diff(x[2], x[1], nd);
    free(x[0]), free(x[1]), free(x[2]);
    return rc;
}

static int cmd_sample(int argc, char **argv)
{
    const char *cmd = "video sample", *out = NULL, *h5 = NULL, *from = NULL, *pos[1];
    int n = 4, given = 0, method = 0, whole = 0, compare = 0, json = 0, scale = 4, delay = 12, denoise = -1,
        compare_dn = 0, threads = 0;
    long seed = 1;
    double temperature = 1, tol = 1e-4;
    static const char *const METHODS[] = {"sequential", "jacobi", NULL};
    static const char *const DENOISE[] = {"none", "flow", "learned", NULL}; /* nf_video_denoise's order */
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "-n", .kind = FLAG_INT, .dst = &n, .lo = 1, .hi = 100000},
        {.name = "--given", .kind = FLAG_INT, .dst = &given, .lo = 0, .hi = 4096},
        {.name = "--from", .kind = FLAG_STRING, .dst = &from},
        {.name = "--method", .kind = FLAG_CHOICE, .dst = &method, .choices = METHODS},
        {.name = "--tol", .kind = FLAG_DOUBLE, .dst = &tol, .lo = 1e-12, .hi = 1},
        {.name = "--whole", .kind = FLAG_BOOL, .dst = &whole},
        {.name = "--compare", .kind = FLAG_BOOL, .dst = &compare},
        {.name = "--temperature", .kind = FLAG_DOUBLE, .dst = &temperature, .lo = 1e-3, .hi = 10},
        {.name = "--denoise", .kind = FLAG_CHOICE, .dst = &denoise, .choices = DENOISE},
        {.name = "--compare-denoise", .kind = FLAG_BOOL, .dst = &compare_dn},
        {.name = "--scale", .kind = FLAG_INT, .dst = &scale, .lo = 1, .hi = 64},
        {.name = "--delay", .kind = FLAG_INT, .dst = &delay, .lo = 0, .hi = 65535},
        {.name = "--h5", .kind = FLAG_STRING, .dst = &h5},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = 1L << 53},
        {.name = "--json", .kind = FLAG_BOOL, .dst = &json},
        FLAG_THREADS(threads),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = SAMPLE_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    cli_set_threads(threads);
    if (!pos[0]) return cli_usage_error(cmd, "no model given (expected: nf video sample MODEL.h5 -o VIDEOS.gif)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o VIDEOS.gif or -o FILMSTRIP.png)");
    if (!ends_with(out, ".gif") && !ends_with(out, ".png"))
        return cli_usage_error(cmd, "-o %s: expected a .gif (animation) or .png (filmstrip) file", out);
    if (given > 0 && !from) return cli_usage_error(cmd, "--given %d needs --from VIDEOS.h5 (the videos to continue)", given);
    if (!given && from) return cli_usage_error(cmd, "--from needs --given K (how many of its frames to keep)");
    if (app_mpi_refuse(cmd)) return 2;
    nf_model *m = NULL;
    nf_real *x = NULL, *xref = NULL, *prefix = NULL;
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, 0);
    int rc = rng ? app_check_output(out) : nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK && h5) rc = app_check_output(h5);
    if (rc == NF_OK) rc = app_check_not_input(out, pos[0], "model");
    if (rc == NF_OK) rc = app_check_not_input(out, from, "--from file");
    if (rc == NF_OK) rc = app_check_not_input(h5, pos[0], "model");
    if (rc == NF_OK) rc = app_check_not_input(h5, from, "--from file");
    if (rc == NF_OK) rc = app_check_outputs_differ(out, "-o", h5, "--h5");
    if (rc == NF_OK) rc = app_open_model_kind(pos[0], "video", &m, NULL);
    const nf_video_config *c = rc == NF_OK ? nf_model_video_config(m) : NULL;
    if (rc == NF_OK && given >= c->frames)
        rc = nf_error(NF_EINVAL, "--given %d: the model's videos have %d frames (expected 0..%d)", given, c->frames,
                      c->frames - 1);
    const size_t D = c ? (size_t)c->frames * c->h * c->w * c->c : 0;
    if (rc == NF_OK && (!(x = malloc((size_t)n * D * sizeof *x)) || (compare && !(xref = malloc((size_t)n * D * sizeof *xref)))))
        rc = nf_error(NF_ENOMEM, "out of memory for %d videos", n);
    if (rc == NF_OK && given) rc = given_videos(from, m, n, &prefix);
    nf_video_sample_config sc;
    nf_video_sample_config_init_for(&sc, m);
    if (denoise >= 0) sc.denoise = (nf_video_denoise)denoise;
    if (rc == NF_OK && sc.denoise == NF_VIDEO_DENOISE_LEARNED && !c->denoiser)
        rc = nf_error(NF_EINVAL, "--denoise learned: %s has no learned denoiser (fit it with --denoiser)", pos[0]);
    sc.temperature = temperature, sc.tol = tol, sc.by_frame = !whole, sc.given = given, sc.prefix = prefix;
    sc.method = method ? NF_INVERT_JACOBI : NF_INVERT_SEQUENTIAL;
    int passes = 0, ref_passes = 0;
    double wall = 0, ref_wall = 0, diff = 0, denoise_wall = 0;
    if (rc == NF_OK) {
        double t0 = nf_seconds();
        rc = nf_model_video_sample(m, x, n, &sc, rng, &passes);
        wall = nf_seconds() - t0;
        denoise_wall = nf_model_video_last_denoise_seconds(m);
    }
    if (rc == NF_OK && compare) { /* the same latents, token by token */
        nf_rng *r2 = nf_rng_alloc((uint64_t)seed, 0);
        sc.method = NF_INVERT_SEQUENTIAL;
        double t0 = nf_seconds();
        rc = r2 ? nf_model_video_sample(m, xref, n, &sc, r2, &ref_passes) : nf_error(NF_ENOMEM, "out of memory");
        ref_wall = nf_seconds() - t0;
        nf_rng_free(r2);
        for (size_t k = 0; rc == NF_OK && k < (size_t)n * D; k++) diff = fmax(diff, fabs((double)x[k] - xref[k]));
    }
    dn_compare dc = {0};
    if (rc == NF_OK && compare_dn) rc = compare_denoisers(m, n, &sc, (uint64_t)seed, &dc);
    if (rc == NF_OK)
        rc = ends_with(out, ".gif") ? nf_video_gif_write_grid(out, x, n, 0, c->frames, c->h, c->w, c->c, c->levels, scale, delay)
                                    : nf_video_filmstrip_png(out, x, n, c->frames, c->h, c->w, c->c, c->levels, scale);
    if (rc == NF_OK && h5) rc = save_videos_h5(h5, x, n, c);
    if (rc == NF_OK) {
        const char *how = method ? (whole ? "jacobi" : "jacobi by frame") : "sequential";
        if (json) {
            printf("{\"videos\": %d, \"method\": \"%s\", \"passes\": %d, \"passes_per_frame\": %.4g, \"seconds\": %.6g",
                   n, how, passes, (double)passes / c->frames, wall);
            printf(", \"denoise\": \"%s\", \"denoise_seconds\": %.6g", nf_video_denoise_name(sc.denoise), denoise_wall);
            if (compare)
                printf(", \"sequential_passes\": %d, \"sequential_seconds\": %.6g, \"max_difference_levels\": %.6g",
                       ref_passes, ref_wall, diff);
            if (compare_dn) {
                printf(", \"flow_denoise_seconds\": %.6g, \"flow_step_rms_levels\": %.6g", dc.seconds[1],
                       dc.step_rms[1]);
                if (c->denoiser)
                    printf(", \"learned_denoise_seconds\": %.6g, \"learned_step_rms_levels\": %.6g, "
                           "\"learned_flow_rms_levels\": %.6g", dc.seconds[2], dc.step_rms[2], dc.learned_flow_rms);
            }
            printf(", \"output\": \"%s\"}\n", out);
        } else {
            fprintf(stderr, "nf %s: %d videos in %.3f s (%s: %d passes, %.2f per frame; denoising %s, %.3f s); wrote "
                            "%s%s%s\n", cmd, n, wall, how, passes, (double)passes / c->frames,
                    nf_video_denoise_name(sc.denoise), denoise_wall, out, h5 ? " and " : "", h5 ? h5 : "");
            if (compare)
                fprintf(stderr, "nf %s: token by token: %.3f s, %d passes; largest difference %.3g grey levels\n", cmd,
                        ref_wall, ref_passes, diff);
            if (compare_dn) {
                fprintf(stderr, "nf %s: flow score step: %.3f ms a video, RMS step %.4g grey levels\n", cmd,
                        1e3 * dc.seconds[1] / n, dc.step_rms[1]);
                if (c->denoiser)
                    fprintf(stderr, "nf %s: learned denoiser: %.3f ms a video, RMS step %.4g grey levels, %.4g from the "
                                    "flow's\n", cmd, 1e3 * dc.seconds[2] / n, dc.step_rms[2], dc.learned_flow_rms);
            }
        }
    }
    free(x), free(xref), free(prefix);
    nf_rng_free(rng);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

int nf_cmd_video(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(VIDEO_HELP, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "fit")) return cmd_fit(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample")) return cmd_sample(argc - 1, argv + 1);
    return cli_usage_error("video", "unknown subcommand '%s' (expected fit, eval or sample)", argv[1]);
}
