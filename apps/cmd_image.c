/* apps/cmd_image.c - nf image: flows on images (fit, eval, sample, classify) over the "image" model
 * kind (training/model_image.h), the rows source of an image data file (docs/FORMATS.md "Image
 * data") and the one trainer; progress, checkpoints and --resume as nf fit (apps/train_run.h). */
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
#include "datasets/images.h"
#include "plot/image_grid.h"
#include "training/model_image.h"

static const char *const IMAGE_HELP =
    "usage: nf image fit|eval|sample|classify ...   (nf image SUBCOMMAND --help)\n"
    "\n"
    "Flows on images, scored in bits per dimension: multi-scale coupling flows (Glow, RealNVP) and\n"
    "transformer autoregressive flows (TarFlow), optionally class-conditional.\n"
    "\n"
    "  fit       train a flow on an image data file (checkpoints, --resume)\n"
    "  eval      bits/dim of images (and, class-conditional, the likelihood classifier's accuracy)\n"
    "  sample    draw images into a PNG grid (and an HDF5 file)\n"
    "  classify  the class of each image by its likelihood: argmax_c log p(x | c) + log p(c)\n"
    "\n"
    "example:\n"
    "  nf data make digits -o digits.h5 && nf data split digits.h5 --test 0.2\n"
    "  nf image fit digits.train.h5 -o glow.h5\n"
    "  nf image eval glow.h5 digits.test.h5\n"
    "  nf image sample glow.h5 -o samples.png\n";

static const char *const FIT_HELP =
    "usage: nf image fit IMAGES.h5 -o MODEL.h5 [options]\n"
    "       nf image fit --resume MODEL.h5 [--threads N] [--quiet]\n"
    "\n"
    "Fit a flow to the images of IMAGES.h5 (nf data make shapes|digits, nf data import) by maximum\n"
    "likelihood of the dequantised pixels; the loss is bits per dimension (with --dequant variational\n"
    "its variational bound).  Progress on stderr; the model (with a resumable checkpoint) goes to\n"
    "MODEL.h5.\n"
    "\n"
    "model:\n"
    "  --arch NAME          glow|realnvp|tarflow                                [glow]\n"
    "  --flow SPEC          any flow spec over h*w*c values instead of --arch\n"
    "  --conditional        condition on the class (/context of the data file) [off]\n"
    "  --label-drop P       train on the empty class with probability P        [0.1 if conditional]\n"
    "  --scales N           glow/realnvp: squeeze levels                        [2]\n"
    "  --depth K            glow: steps per scale                              [4]\n"
    "  --hidden N           glow/realnvp: conditioner channels                 [64]\n"
    "  --patch P            tarflow: patch side (tokens are P x P x c)         [2]\n"
    "  --width N            tarflow: transformer width                         [64]\n"
    "  --heads N            tarflow: attention heads                           [4]\n"
    "  --layers N           tarflow: transformer layers per block              [2]\n"
    "  --blocks N           tarflow: flow blocks                               [4]\n"
    "  --noise S            Gaussian noise augmentation (data scale 1 = 0..L)  [0; tarflow 0.05]\n"
    "dequantisation:\n"
    "  --dequant KIND       uniform|variational                                [uniform]\n"
    "                       variational: u from a learned q(u | x) (Flow++), a conditional coupling\n"
    "                       flow trained with the flow; bits/dim are then the variational bound\n"
    "  --dequant-layers N   variational: couplings of the dequantiser          [4]\n"
    "  --dequant-hidden N   variational: channels of their conditioners        [16]\n"
    "alignment (reverse representation alignment, R-REPA; tarflow, data with classes):\n"
    "  --align              train in two stages: 'encoder', a small convolutional classifier of the\n"
    "                       clean images (loss and validation: cross-entropy, nats), then 'flow', the\n"
    "                       flow with its hidden states at --align-layers pulled towards the frozen\n"
    "                       encoder's patch features (loss: bits/dim + W x alignment; validation:\n"
    "                       bits/dim); each stage runs to the limits below          [off]\n"
    "  --align-weight W     weight of the alignment loss, mean (1 - cosine)      [0.5]\n"
    "  --align-layers LIST  generative blocks aligned, 0 = the first block of sampling (the last\n"
    "                       of the density direction): \"0\" or \"0,1\"            [0]\n"
    "training:\n"
    "  --steps N            optimizer steps                                   [2000]\n"
    "  --batch N            images per step                                   [64]\n"
    "  --micro-batch N      images per forward+backward pass (kept in cache; threads take whole\n"
    "                       ones; same result at any --threads); 0 = ~1,024 values' worth [0]\n"
    "  --lr X               learning rate (Adam, cosine schedule)             [1e-3]\n"
    "  --clip X             gradient-norm clip; 0 = off                       [50]\n"
    "  --ema D              validate and keep a moving average of the weights\n"
    "                       over about 1/(1-D) steps; 0 = off                 [0]\n"
    "  --val-frac F         images held out for validation                    [0.1]\n"
    "  --eval-every N       validate every N steps                            [100]\n"
    "  --patience N         stop after N validations without improvement      [20; 0: never]\n"
    "  --seed S             weights, split, batches and dequantisation        [1]\n"
    "  --threads N          threads                                           [all cores]\n"
    "  --checkpoint-every N write the model file every N steps                [200]\n"
    "  --quiet              no progress output\n"
    "  --force              replace an existing MODEL.h5 (without it a new fit refuses to start over it)\n"
    "\n"
    "example:\n"
    "  nf image fit shapes.h5 --arch tarflow --conditional --steps 3000 -o tarflow.h5\n";

static const char *const EVAL_HELP =
    "usage: nf image eval MODEL.h5 IMAGES.h5 [--json] [--batch N] [--threads N]\n"
    "\n"
    "Bits per dimension of the images under the model (one dequantisation draw per image, seeded by\n"
    "the image's index, so the number is reproducible), with its standard error; for a model fit with\n"
    "--dequant variational, the variational bound (an upper bound on the true bits/dim).  For a\n"
    "class-conditional model also the accuracy of the likelihood classifier on the data's classes.\n"
    "\n"
    "  --json         one JSON object\n"
    "  --batch N      images per batch                     [256]\n"
    "  --threads N    threads                              [all cores]\n"
    "\n"
    "example:\n"
    "  nf image eval glow.h5 digits.test.h5 --json\n";

static const char *const SAMPLE_HELP =
    "usage: nf image sample MODEL.h5 -o GRID.png [options]\n"
    "\n"
    "Draw images from the model into a PNG grid (and, with --h5, an image data file of them).\n"
    "\n"
    "  -n N               images                                      [64]\n"
    "  --class C          class of a conditional model (index)        [all classes in turn]\n"
    "  --temperature T    latent scale (below 1: cleaner, less varied) [1]\n"
    "  --denoise          one score step x + s^2 grad log p(x) (models trained with --noise)\n"
    "  --method M         tarflow inversion: sequential|jacobi|auto; auto is sequential, the\n"
    "                     faster on a CPU (jacobi: fewer, costlier passes)   [auto]; jacobi\n"
    "                     needs few sweeps on many shallow blocks (fit --blocks 12 --layers 1)\n"
    "  --tol X            Jacobi: stop when no value moves more than X (data scale 1 = 0..L) [1e-4]\n"
    "  --jacobi-block M   Jacobi over blocks of M tokens in turn (earlier blocks cached), each\n"
    "                     starting from the previous block; 0: all tokens at once   [0]\n"
    "  --guidance W       classifier-free guidance of a conditional tarflow:\n"
    "                     (1+W) f(class) - W f(none)                  [0]\n"
    "  --h5 FILE          also write the samples (levels 0..L-1, not rounded)\n"
    "  --seed S           random seed                                 [1]\n"
    "  --json             passes (in all and per block, in sampling order) and wall time as JSON\n"
    "  --threads N        threads                                     [all cores]\n"
    "\n"
    "example:\n"
    "  nf image sample tarflow.h5 --class 2 --method jacobi -o triangles.png\n";

static const char *const CLASSIFY_HELP =
    "usage: nf image classify MODEL.h5 IMAGES.h5 [--json] [--batch N] [--threads N]\n"
    "\n"
    "The likelihood classifier of a class-conditional model: each image's class is the one with the\n"
    "highest log p(x | c) + log p(c), p(c) the class frequencies of the training images, which nf image\n"
    "fit stores with the model (add-one smoothed; uniform for a model file written before nf kept them).\n"
    "Prints the accuracy against the data's classes.\n"
    "\n"
    "example:\n"
    "  nf image classify tarflow.h5 shapes.test.h5\n";

/* The image attributes of a data file (docs/FORMATS.md): shape, levels, classes. */
static int image_info(const char *path, nf_image_config *c)
{
    nf_h5 *f = NULL;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    int rank;
    size_t dims[2];
    nf_image_info info;
    int rc = nf_h5_shape(f, "/x", &rank, dims);
    if (rc == NF_OK) rc = nf_image_info_read(f, dims[0], dims[1], &info);
    if (rc == NF_OK) c->h = info.h, c->w = info.w, c->c = info.c, c->levels = info.levels;
    nf_h5_close(f);
    return rc;
}

/* The two terms of stage 'flow' on (up to 2048) validation images, after training. */
static void report_alignment(const char *cmd, nf_model *m, const nf_source *val)
{
    nf_rows r = nf_source_rows(val);
    int n = (int)(val->n < 2048 ? val->n : 2048);
    double bpd, al, acc;
    nf_model_set_training(m, 0);
    if (nf_model_image_align_terms(m, r.x, r.ctx, n, &bpd, &al) == NF_OK &&
        nf_model_image_encoder_accuracy(m, r.x, r.ctx, n, &acc) == NF_OK)
        fprintf(stderr, "nf %s: on %d validation images: bits/dim %.4f, alignment %.4f (weight %g included); "
                        "the frozen encoder classifies %.1f%% of them\n",
                cmd, n, bpd, al, nf_model_image_config(m)->align_weight, 100 * acc);
    else
        fprintf(stderr, "nf %s: alignment terms not available: %s\n", cmd, nf_strerror_last());
    nf_error_clear();
}

typedef struct image_describe_ctx {
    const char *cmd;
    const nf_source *train, *val;
} image_describe_ctx;

static void image_describe(void *user, const nf_model *m)
{
    const image_describe_ctx *d = user;
    const nf_image_config *c = nf_model_image_config(m);
    fprintf(stderr, "nf %s: %zu training and %zu validation images of %dx%dx%d (%d levels%s); %s flow, %zu parameters\n",
            d->cmd, d->train->n, d->val ? d->val->n : 0, c->h, c->w, c->c, c->levels,
            c->classes ? ", class-conditional" : "", nf_image_arch_name(c->arch), m->P->n);
    if (c->dequant == NF_DEQUANT_VARIATIONAL)
        fprintf(stderr, "nf %s: variational dequantisation (%d couplings of %d channels); bits/dim are the variational bound\n",
                d->cmd, c->dequant_layers, c->dequant_hidden);
    if (c->align) {
        char layers[256];
        nf_image_align_layers_format(c->align_layers, layers, sizeof layers);
        fprintf(stderr, "nf %s: alignment to a frozen classifier at generative blocks %s, weight %g: stage 'encoder' "
                        "(train/val numbers are its cross-entropy in nats), then stage 'flow' (train: bits/dim + "
                        "alignment; val: bits/dim)\n", d->cmd, layers, c->align_weight);
    }
}

static int cmd_fit(int argc, char **argv)
{
    const char *cmd = "image fit", *out = NULL, *resume = NULL, *arch = "glow", *spec = NULL, *pos[1];
    nf_image_config mc;
    nf_image_config_init(&mc);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 2000;
    tc.batch = 64;
    tc.clip = 50;
    tc.eval_every = 100;
    tc.checkpoint_every = 200;
    tc.patience = 20;
    double lr = 1e-3, val_frac = 0.1, noise = -1, label_drop = -1, align_weight = 0.5;
    const char *align_layers = "0";
    long seed = 1;
    int threads = 0, quiet = 0, force = 0, conditional = 0, align = 0, dequant = 0;
    static const char *const DEQUANT[] = {"uniform", "variational", NULL}; /* nf_image_dequant_kind order */
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--resume", .kind = FLAG_STRING, .dst = &resume},
        {.name = "--arch", .kind = FLAG_STRING, .dst = &arch},
        {.name = "--flow", .kind = FLAG_STRING, .dst = &spec},
        {.name = "--conditional", .kind = FLAG_BOOL, .dst = &conditional},
        {.name = "--label-drop", .kind = FLAG_DOUBLE, .dst = &label_drop, .lo = 0, .hi = 0.99},
        {.name = "--scales", .kind = FLAG_INT, .dst = &mc.scales, .lo = 1, .hi = 8},
        {.name = "--depth", .kind = FLAG_INT, .dst = &mc.steps, .lo = 1, .hi = 64},
        {.name = "--hidden", .kind = FLAG_INT, .dst = &mc.hidden, .lo = 1, .hi = 4096},
        {.name = "--patch", .kind = FLAG_INT, .dst = &mc.patch, .lo = 1, .hi = 64},
        {.name = "--width", .kind = FLAG_INT, .dst = &mc.width, .lo = 1, .hi = 4096},
        {.name = "--heads", .kind = FLAG_INT, .dst = &mc.heads, .lo = 1, .hi = 64},
        {.name = "--layers", .kind = FLAG_INT, .dst = &mc.layers, .lo = 1, .hi = 64},
        {.name = "--blocks", .kind = FLAG_INT, .dst = &mc.blocks, .lo = 1, .hi = 64},
        {.name = "--noise", .kind = FLAG_DOUBLE, .dst = &noise, .lo = 0, .hi = 1},
        {.name = "--dequant", .kind = FLAG_CHOICE, .dst = &dequant, .choices = DEQUANT},
        {.name = "--dequant-layers", .kind = FLAG_INT, .dst = &mc.dequant_layers, .lo = 1, .hi = 16},
        {.name = "--dequant-hidden", .kind = FLAG_INT, .dst = &mc.dequant_hidden, .lo = 1, .hi = 1024},
        {.name = "--micro-batch", .kind = FLAG_INT, .dst = &mc.micro_batch, .lo = 0, .hi = 65536},
        {.name = "--align", .kind = FLAG_BOOL, .dst = &align},
        {.name = "--align-weight", .kind = FLAG_DOUBLE, .dst = &align_weight, .lo = 0, .hi = 100},
        {.name = "--align-layers", .kind = FLAG_STRING, .dst = &align_layers},
        FLAGS_TRAINING(tc, lr, val_frac, seed, threads, quiet),
        FLAG_FORCE(force),
        FLAG_EMA(tc),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = FIT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (resume && flags_check_resume(&fc, argc, argv, resume, pos[0] != NULL) != FLAGS_OK) return 2;
    if (!resume && !pos[0]) return cli_usage_error(cmd, "no image file given (expected: nf image fit IMAGES.h5 -o MODEL.h5)");
    if (!resume && !out) return cli_usage_error(cmd, "no output file given (expected -o MODEL.h5)");
    if (spec) {
        mc.arch = NF_IMAGE_SPEC;
        if (strlen(spec) >= sizeof mc.spec) return cli_usage_error(cmd, "--flow: spec longer than %zu characters", sizeof mc.spec - 1);
        snprintf(mc.spec, sizeof mc.spec, "%s", spec);
    } else if (nf_image_arch_parse(arch, &mc.arch) != NF_OK) {
        return cli_usage_error(cmd, "--%s", nf_strerror_last());
    }
    mc.noise = noise >= 0 ? noise : mc.arch == NF_IMAGE_TARFLOW ? 0.05 : 0;
    mc.dequant = (nf_image_dequant_kind)dequant;
    if (align && !resume) {
        mc.align = 1;
        mc.align_weight = align_weight;
        if (nf_image_align_layers_parse(align_layers, &mc.align_layers) != NF_OK)
            return cli_usage_error(cmd, "--%s", nf_strerror_last());
    }
    if ((urc = app_mpi_start(cmd)) != 0) return urc;
    const int part = app_mpi_rank(), parts = app_mpi_size();
    if (part != 0) quiet = 1;
    cli_set_threads(threads);
    nf_model_meta meta = {0};
    app_kind_fit f = {.cmd = cmd, .out = out, .resume = resume, .data = pos[0], .dataset = "/x", .val_frac = val_frac,
                      .meta = &meta, .tc = &tc, .quiet = quiet, .describe = image_describe};
    int rc = app_kind_fit_open(&f, "image", "image file", force, lr, seed);
    nf_model *m = f.model;
    if (rc == NF_OK && m) conditional = nf_model_image_config(m)->classes > 0, align = nf_model_image_config(m)->align;
    if (rc == NF_OK && !resume) rc = image_info(f.data, &mc);
    mc.seed = tc.seed;
    size_t dim = m ? (size_t)m->flow->dim : (size_t)mc.h * mc.w * mc.c;
    if (rc == NF_OK)
        rc = nf_source_rows_load_share(&f.all, f.data, "/x", dim, m ? (size_t)m->ctx_dim : 0, conditional || align,
                                       part, parts);
    if (rc == NF_OK && (conditional || align) && f.all->ctx_dim < 2)
        rc = nf_error(NF_EDATA, "%s: %s needs image classes (a one-hot /context of at least 2 classes)", f.data,
                      conditional ? "--conditional" : "--align (its encoder is a classifier)");
    if (rc == NF_OK) rc = nf_source_split(f.all, f.val_frac, tc.seed, &f.val, &f.train);
    if (rc == NF_OK && !m) {
        mc.classes = conditional ? f.all->ctx_dim : 0;
        mc.label_drop = conditional ? (label_drop >= 0 ? label_drop : 0.1) : 0;
        mc.align_classes = align ? f.all->ctx_dim : 0;
        rc = nf_model_image_create(&f.model, &mc);
        m = f.model;
        if (rc == NF_OK) rc = m->type->init_data(m, f.train);
    }
    image_describe_ctx dc = {.cmd = cmd, .train = f.train, .val = f.val};
    f.user = &dc;
    int status = app_kind_fit_go(&f, rc);
    const nf_image_config *c = m ? nf_model_image_config(m) : NULL;
    if (status == 0 && !quiet && c && c->align && f.val && f.val->n && m->stage == 1) report_alignment(cmd, m, f.val);
    return app_kind_fit_close(&f, status);
}

/* The images of a data file for model m (its shape and, conditional, its classes as indices). */
static int load_images(const char *path, nf_model *m, nf_source **s, int **classes)
{
    const nf_image_config *c = nf_model_image_config(m);
    nf_image_config d = *c;
    NF_TRY(image_info(path, &d));
    if (d.h != c->h || d.w != c->w || d.c != c->c || d.levels != c->levels)
        return nf_error(NF_EDATA, "%s holds %dx%dx%d images of %d levels; the model was trained on %dx%dx%d with %d levels",
                        path, d.h, d.w, d.c, d.levels, c->h, c->w, c->c, c->levels);
    NF_TRY(nf_source_rows_load(s, path, "/x", (size_t)c->h * c->w * c->c, (size_t)c->classes, c->classes > 0));
    *classes = NULL;
    if (!c->classes) return NF_OK;
    nf_rows r = nf_source_rows(*s);
    int *k = malloc((*s)->n * sizeof *k);
    if (!k) return nf_error(NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < (*s)->n; i++) {
        k[i] = 0;
        for (int j = 1; j < c->classes; j++)
            if (r.ctx[i * c->classes + j] > r.ctx[i * c->classes + k[i]]) k[i] = j;
    }
    *classes = k;
    return NF_OK;
}

/* Accuracy of the likelihood classifier over a source, with the model's class prior (*counted: 1
 * when it has the training images' class counts, 0 when uniform). */
static int classify_all(nf_model *m, const nf_source *s, const int *classes, int batch, size_t *correct,
                        int *counted)
{
    const nf_image_config *c = nf_model_image_config(m);
    const size_t D = (size_t)c->h * c->w * c->c;
    nf_rows r = nf_source_rows(s);
    int *pred = malloc((size_t)batch * sizeof *pred);
    double *prior = malloc((size_t)c->classes * sizeof *prior);
    nf_rng *rng = nf_rng_alloc(c->seed, 7);
    int rc = pred && prior && rng ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK) *counted = nf_model_image_class_prior(m, prior);
    *correct = 0;
    for (size_t at = 0; rc == NF_OK && at < s->n; at += (size_t)batch) {
        int n = (int)(s->n - at < (size_t)batch ? s->n - at : (size_t)batch);
        rc = nf_model_image_classify(m, pred, NULL, r.x + at * D, prior, n, rng);
        for (int i = 0; rc == NF_OK && i < n; i++) *correct += pred[i] == classes[at + i];
    }
    free(pred), free(prior);
    nf_rng_free(rng);
    return rc;
}

static int cmd_eval_or_classify(int argc, char **argv, int classify)
{
    const char *cmd = classify ? "image classify" : "image eval", *pos[2];
    int json = 0, batch = 256, threads = 0;
    const flag_spec flags[] = {
        {.name = "--json", .kind = FLAG_BOOL, .dst = &json},
        {.name = "--batch", .kind = FLAG_INT, .dst = &batch, .lo = 1, .hi = 1 << 20},
        FLAG_THREADS(threads),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = classify ? CLASSIFY_HELP : EVAL_HELP, .flags = flags, .max_pos = 2};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    cli_set_threads(threads);
    if (!pos[0] || !pos[1]) return cli_usage_error(cmd, "expected MODEL.h5 and IMAGES.h5");
    if (app_mpi_refuse(cmd)) return 2;
    nf_model *m = NULL;
    nf_source *s = NULL;
    int *classes = NULL;
    double mean = NAN, se = NAN;
    size_t correct = 0;
    int counted = 0;
    int rc = app_open_model_kind(pos[0], "image", &m, NULL);
    if (rc == NF_OK) rc = load_images(pos[1], m, &s, &classes);
    const nf_image_config *c = rc == NF_OK ? nf_model_image_config(m) : NULL;
    if (rc == NF_OK && classify && c->classes < 2)
        rc = nf_error(NF_EINVAL, "%s is not class-conditional (train it with nf image fit --conditional)", pos[0]);
    if (rc == NF_OK && !classify) rc = nf_model_evaluate(m, s, 0, batch, NULL, &mean, &se, NULL);
    if (rc == NF_OK && c->classes >= 2) rc = classify_all(m, s, classes, batch, &correct, &counted);
    if (rc == NF_OK) {
        double acc = c->classes >= 2 ? (double)correct / (double)s->n : NAN;
        if (json) {
            printf("{\"images\": %zu", s->n);
            if (!classify) printf(", \"bits_per_dim\": %.9g, \"bits_per_dim_stderr\": %.9g", -mean, se);
            if (c->classes >= 2)
                printf(", \"accuracy\": %.9g, \"correct\": %zu, \"prior\": \"%s\"", acc, correct,
                       counted ? "training class frequencies" : "uniform");
            printf("}\n");
        } else {
            printf("data          %s (%zu images of %dx%dx%d, %d levels)\n", pos[1], s->n, c->h, c->w, c->c, c->levels);
            if (!classify) printf("bits/dim      %.5f +- %.5f\n", -mean, se);
            if (c->classes >= 2)
                printf("accuracy      %.4f (%zu of %zu: the likelihood classifier, argmax_c log p(x | c) + log p(c), p(c) %s)\n",
                       acc, correct, s->n, counted ? "the training class frequencies" : "uniform (a model file without class counts)");
        }
    }
    free(classes);
    nf_source_free(s);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

static int cmd_sample(int argc, char **argv)
{
    const char *cmd = "image sample", *out = NULL, *h5 = NULL, *pos[1];
    int n = 64, cls = -1, denoise = 0, json = 0, method = 0, block = 0, threads = 0;
    long seed = 1;
    double temperature = 1, guidance = 0, tol = 1e-4;
    static const char *const METHODS[] = {"auto", "sequential", "jacobi", NULL};
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "-n", .kind = FLAG_INT, .dst = &n, .lo = 1, .hi = 100000},
        {.name = "--class", .kind = FLAG_INT, .dst = &cls, .lo = 0, .hi = 100000},
        {.name = "--temperature", .kind = FLAG_DOUBLE, .dst = &temperature, .lo = 1e-3, .hi = 10},
        {.name = "--denoise", .kind = FLAG_BOOL, .dst = &denoise},
        {.name = "--tol", .kind = FLAG_DOUBLE, .dst = &tol, .lo = 1e-12, .hi = 1},
        {.name = "--guidance", .kind = FLAG_DOUBLE, .dst = &guidance, .lo = -1, .hi = 100},
        {.name = "--method", .kind = FLAG_CHOICE, .dst = &method, .choices = METHODS},
        {.name = "--jacobi-block", .kind = FLAG_INT, .dst = &block, .lo = 0, .hi = 1 << 20},
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
    if (!pos[0]) return cli_usage_error(cmd, "no model given (expected: nf image sample MODEL.h5 -o GRID.png)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o GRID.png)");
    if (app_mpi_refuse(cmd)) return 2;
    nf_model *m = NULL;
    nf_real *x = NULL;
    int *classes = NULL;
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, 0);
    int rc = rng ? app_check_output(out) : nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK && h5) rc = app_check_output(h5);
    if (rc == NF_OK) rc = app_check_not_input(out, pos[0], "model");
    if (rc == NF_OK) rc = app_check_not_input(h5, pos[0], "model");
    if (rc == NF_OK) rc = app_check_outputs_differ(out, "-o", h5, "--h5");
    if (rc == NF_OK) rc = app_open_model_kind(pos[0], "image", &m, NULL);
    const nf_image_config *c = rc == NF_OK ? nf_model_image_config(m) : NULL;
    if (rc == NF_OK && cls >= 0 && cls >= c->classes)
        rc = nf_error(NF_EINVAL, "--class %d: the model has %d classes%s", cls, c->classes,
                      c->classes ? "" : " (it is unconditional; leave out --class)");
    const size_t D = c ? (size_t)c->h * c->w * c->c : 0;
    if (rc == NF_OK && (!(x = malloc((size_t)n * D * sizeof *x)) || !(classes = malloc((size_t)n * sizeof *classes))))
        rc = nf_error(NF_ENOMEM, "out of memory for %d images", n);
    if (rc == NF_OK && guidance != 0 && c->classes == 0)
        rc = nf_error(NF_EINVAL, "--guidance needs a class-conditional model (nf image fit --conditional)");
    for (int i = 0; rc == NF_OK && i < n; i++) classes[i] = cls >= 0 ? cls : c->classes ? i % c->classes : -1;
    double t0 = nf_seconds();
    if (rc == NF_OK) {
        nf_flow_set_invert(m->flow, (nf_invert_method)method, tol, 0);
        nf_flow_set_jacobi_block(m->flow, block);
        nf_flow_set_guidance(m->flow, guidance);
        rc = nf_model_image_sample(m, x, c->classes ? classes : NULL, n, temperature, denoise, rng);
    }
    double wall = nf_seconds() - t0;
    if (rc == NF_OK) {
        nf_image_grid g = {.h = c->h, .w = c->w, .c = c->c, .levels = c->levels, .cols = 0};
        rc = nf_image_grid_write_png(out, &g, x, n);
    }
    if (rc == NF_OK && h5) rc = nf_image_samples_save(h5, x, n, c->h, c->w, c->c, c->levels);
    if (rc == NF_OK) {
        int passes = nf_flow_last_sweeps(m->flow);
        if (json) { /* and each autoregressive block's passes, in the order the sampler runs them */
            printf("{\"images\": %d, \"passes\": %d, \"block_passes\": [", n, passes);
            for (int i = m->flow->nb - 1, first = 1; i >= 0; i--)
                if (m->flow->b[i].last_sweeps) {
                    printf("%s%d", first ? "" : ", ", m->flow->b[i].last_sweeps);
                    first = 0;
                }
            printf("], \"seconds\": %.6g, \"output\": \"%s\"}\n", wall, out);
        } else if (passes)
            fprintf(stderr, "nf %s: %d images in %.3f s (%d passes of the autoregressive blocks); wrote %s%s%s\n", cmd,
                    n, wall, passes, out, h5 ? " and " : "", h5 ? h5 : "");
        else
            fprintf(stderr, "nf %s: %d images in %.3f s; wrote %s%s%s\n", cmd, n, wall, out, h5 ? " and " : "",
                    h5 ? h5 : "");
    }
    free(x);
    free(classes);
    nf_rng_free(rng);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

int nf_cmd_image(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(IMAGE_HELP, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "fit")) return cmd_fit(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cmd_eval_or_classify(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "classify")) return cmd_eval_or_classify(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "sample")) return cmd_sample(argc - 1, argv + 1);
    return cli_usage_error("image", "unknown subcommand '%s' (expected fit, eval, sample or classify)", argv[1]);
}
