/* apps/cmd_info.c - nf info: what an nf file holds (a model, data, samples, log-densities or
 * event sequences).  Reading goes through the library (model files, data sources, names); this
 * file only chooses by the file's format and prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "datasets/names.h"
#include "datasets/causal.h"
#include "datasets/dependent_split.h"
#include "datasets/images.h"
#include "datasets/sequences.h"
#include "datasets/videos.h"
#include "datasets/source.h"
#include "distributions/target.h"
#include "training/model_causal.h"
#include "training/model_dependent.h"
#include "training/model_file.h"
#include "training/model_image.h"
#include "training/model_video.h"

static const char *const INFO_HELP =
    "usage: nf info FILE.h5\n"
    "\n"
    "Describe any nf file, chosen by its format:\n"
    "  model          its kind, flow spec, dimensions and parameter count, the data (its column and\n"
    "                 context names) or target density it was fit to, the training settings, and a\n"
    "                 summary of the training history\n"
    "  data, samples  rows and columns with their names and statistics, the context (per category:\n"
    "                 rows), the true log-density or the model's (/logp_true, /logp), and where the\n"
    "                 data came from (generator, source file, seed, split, model...), and for\n"
    "                 dependent rows their groups or kinship families\n"
    "  log-densities  how many, their mean, the model and data they came from\n"
    "  sequences      sequences, events, marks, windows and mean inter-event time\n"
    "  causal data    units per arm, covariates and outcome widths, the outcome's range per arm, and\n"
    "                 what truth it carries (potential outcomes, their true densities, propensities)\n"
    "An HDF5 file without a format attribute is read as data when it holds /x, as sequences when it\n"
    "holds /times and /offsets.\n"
    "\n"
    "examples:\n"
    "  nf info model.h5\n"
    "  nf info train.h5\n";

/* "label  a, b, c" (the first 20 names), nothing without names. */
static void print_names(const char *label, char *const *names, size_t n)
{
    if (!n) return;
    printf("%-15s ", label);
    for (size_t j = 0; j < n && j < 20; j++) printf("%s%s", j ? ", " : "", names[j]);
    printf("%s\n", n > 20 ? ", ..." : "");
}

/* The history under group g ("/training/checkpoint/history", or a finished stage's) of a stage whose
 * metric is `metric`; `stage` names the stage of a model trained in stages (NULL: none).  Bits/dim
 * and squared errors are minus the stored metric, log-likelihoods as stored; type's loss_per and
 * metric_per, when set, name what the train and val columns are per. */
static void print_history(nf_h5 *f, const char *g, const char *stage, const char *metric, const nf_model_type *type)
{
    const int bits = !strcmp(metric, "neg_bits_per_dim"), mse = !strcmp(metric, "neg_mse");
    const char *unit = bits ? "bpd" : mse ? "mse" : "ll";
    double *ll = NULL, *val = NULL, *ep = NULL, *sec = NULL;
    int64_t *step = NULL;
    size_t n = 0, c;
    char p[5][160], head[96];
    const char *const field[5] = {"step", "train_log_likelihood", "val_log_likelihood", "epoch", "seconds"};
    for (int k = 0; k < 5; k++) snprintf(p[k], sizeof p[k], "%s/%s", g, field[k]);
    snprintf(head, sizeof head, stage ? "history (stage %s)" : "history", stage);
    if (nf_h5_read_int64(f, p[0], &step, &n, &c) != NF_OK || nf_h5_read_double(f, p[1], &ll, &n, &c) != NF_OK ||
        nf_h5_read_double(f, p[2], &val, &n, &c) != NF_OK || nf_h5_read_double(f, p[3], &ep, &n, &c) != NF_OK ||
        nf_h5_read_double(f, p[4], &sec, &n, &c) != NF_OK) {
        printf("%-15s none\n", head);
    } else if (n == 0) {
        printf("%-15s no evaluations yet\n", head);
    } else {
        printf("%-15s %zu evaluations; last: step %lld, epoch %.2f, %.1f s\n", head, n, (long long)step[n - 1],
               ep[n - 1], sec[n - 1]);
        char tr[40], va[40];
        snprintf(tr, sizeof tr, "train %s%s%s", unit, type->loss_per ? "/" : "", type->loss_per ? type->loss_per : "");
        snprintf(va, sizeof va, "val %s%s%s", unit, type->metric_per ? "/" : "", type->metric_per ? type->metric_per : "");
        printf("   %8s %8s %15s %15s\n", "step", "epoch", tr, va);
        size_t show = n < 8 ? n : 8;
        for (size_t k = 0; k < show; k++) {
            size_t i = n <= 8 ? k : (k * (n - 1)) / (show - 1);
            const double sg = bits || mse ? -1 : 1;
            printf("   %8lld %8.2f %15.4f %15.4f\n", (long long)step[i], ep[i], sg * ll[i], sg * val[i]);
        }
    }
    free(step);
    free(ll);
    free(val);
    free(ep);
    free(sec);
}

/* A dependent model's structure and its rho / lambda (the first 8 when there is one per block). */
static void print_dependence(const nf_model *m)
{
    nf_dep_kind kind;
    size_t n;
    int np, learned;
    double th[8];
    nf_dep_source src;
    if (nf_model_dependent_describe(m, &kind, &n, &np, &learned, th, 8) != NF_OK) return;
    int has_src = nf_model_dependent_source(m, &src) == NF_OK;
    const char *name = kind == NF_DEP_EQUI ? "rho" : "lambda";
    printf("dependence      %s over %zu rows", kind == NF_DEP_EQUI ? "block equicorrelation" : "kinship mixture", n);
    if (has_src) printf(" (%s:%s)", src.path, src.dataset);
    printf("; %s %s", learned ? "learned" : "fixed", name);
    if (np == 1) printf(" %.4f\n", th[0]);
    else {
        printf(" per block (%d%s):", np, has_src && src.per_block == 2 ? ", pooled" : "");
        for (int k = 0; k < np && k < 8; k++) printf(" %.3f", th[k]);
        printf("%s\n", np > 8 ? " ..." : "");
    }
    int every = nf_model_dependent_update_every(m);
    if (every == NF_DEP_UPDATE_DOUBLING)
        printf("                %s updated at steps 100, 200, 400, ... from the latents of all rows\n", name);
    else if (every > 0 && kind == NF_DEP_EQUI)
        printf("                %s updated every %d steps (every %d in the first %d) from the latents of all rows\n",
               name, every, every >= 10 ? every / 10 : 1, 5 * every);
    else if (every > 0)
        printf("                %s updated every %d steps from the latents of all rows\n", name, every);
    else if (learned)
        printf("                %s trained by gradient with the flow\n", name);
    nf_error_clear();
}

/* An image model's images and architecture (and its alignment). */
static void print_image(const nf_model *m)
{
    const nf_image_config *c = nf_model_image_config(m);
    if (!c) return;
    printf("images          %dx%dx%d, %d grey levels", c->h, c->w, c->c, c->levels);
    if (c->classes) printf(", conditional on %d classes (trained with the empty class %.0f%% of the time)", c->classes,
                           100 * c->label_drop);
    printf("\n");
    printf("architecture    %s", nf_image_arch_name(c->arch));
    if (c->arch == NF_IMAGE_GLOW || c->arch == NF_IMAGE_REALNVP)
        printf(": %d scales, %d steps per scale, %d conditioner channels", c->scales, c->steps, c->hidden);
    else if (c->arch == NF_IMAGE_TARFLOW)
        printf(": %d blocks of %d layers, width %d, %d heads, %dx%d patches (%d tokens)", c->blocks, c->layers, c->width,
               c->heads, c->patch, c->patch, (c->h / c->patch) * (c->w / c->patch));
    printf("; training noise %g\n", c->noise);
    if (c->align) {
        char layers[256];
        nf_image_align_layers_format(c->align_layers, layers, sizeof layers);
        printf("alignment       generative blocks %s to a frozen %d-class encoder, weight %g\n", layers,
               c->align_classes, c->align_weight);
    }
    if (c->dequant == NF_DEQUANT_VARIATIONAL)
        printf("dequantisation  variational: %d couplings of %d channels (bits/dim are the variational bound)\n",
               c->dequant_layers, c->dequant_hidden);
}

static void print_video(const nf_model *m)
{
    const nf_video_config *c = nf_model_video_config(m);
    if (!c) return;
    printf("videos          %d frames of %dx%dx%d, %d grey levels\n", c->frames, c->h, c->w, c->c, c->levels);
    printf("codec           block DCT %dx%d, %dx%d lowest frequencies kept: %d tokens of %d a frame%s\n", c->block,
           c->block, c->keep, c->keep, nf_model_video_frame_tokens(m), c->keep * c->keep * c->c,
           c->keep == c->block ? " (lossless)" : "");
    printf("architecture    %d frame-local TarFlow blocks of %d layers, %d %s blocks of %d layers; width %d, "
           "%d heads; latent noise %g\n", c->local_blocks, c->local_layers, c->global_blocks,
           c->independent ? "frame-local (independent frames)" : "causal global", c->global_layers, c->width, c->heads,
           c->noise);
    if (!c->independent) {
        char reach[96] = "every earlier frame";
        if (c->context > 0)
            snprintf(reach, sizeof reach, "its own frame and the %d before it", c->context);
        printf("time            each global attention layer reads %s; %s blocks first, on the codec's side\n", reach,
               c->global_first ? "global" : "local");
    }
    if (c->denoiser)
        printf("denoiser        learned (flow-score matching): causal transformer of %d layers, width %d, %zu "
               "parameters; stages: flow, denoiser\n", c->denoiser_layers, c->denoiser_width,
               nf_model_video_denoiser_params(m));
}

/* A causal model's units and its two stages' settings. */
static void print_causal(const nf_model *m)
{
    const nf_causal_config *c = nf_model_causal_config(m);
    if (!c) return;
    printf("units           %d covariate%s, a 0/1 treatment, a %d-D outcome\n", c->dx, c->dx == 1 ? "" : "s", c->dy);
    printf("nuisance        representation %d, spline conditioner %d, %d bins; training noise %g; propensity weight "
           "%g%s\n", c->repr, c->hidden, c->bins, c->noise_r, c->alpha,
           c->shift ? "; each arm's least-squares line removed (--linear-shift)" : "");
    if (c->dy == 1)
        printf("target          per arm a spline flow on a grid of %d points", c->grid);
    else
        printf("target          per arm two autoregressive splines on %d nuisance draws a unit", c->draws);
    printf("; the bias correction leaves out units of propensity below %g; weight average %g\n", c->clip, c->ema);
}

static int info_model(const char *path)
{
    nf_model *model;
    nf_model_meta meta;
    if (nf_model_open(path, &model, &meta) != NF_OK) return cli_fail("info");
    nf_h5 *f;
    if (nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION) != NF_OK) {
        nf_model_free(model);
        return cli_fail("info");
    }
    char version[64] = "?";
    nf_h5_attr_get_string(f, "/", "nf_version", version, sizeof version);
    printf("model           %s (nf-model v%d, written by nf %s)\n", path, nf_h5_format_version(f), version);
    printf("kind            %s: %s (%s)\n", model->type->kind, model->type->summary, model->type->command);
    if (meta.preset[0]) printf("preset          %s\n", meta.preset);
    const nf_flow *flow = model->flow;
    if (flow) {
        printf("flow spec       %s\n", flow->spec);
        printf("bijectors       %d on a %s base\n", flow->nb, flow->base.type->name);
        printf("dimension       %d", flow->dim);
        if (flow->ctx_dim) printf(" (conditional on %d context values)", flow->ctx_dim);
        printf("\n");
        nf_data_names nm;
        if (nf_data_names_read(&nm, f, "/data", (size_t)flow->dim, (size_t)flow->ctx_dim) == NF_OK) {
            print_names("columns", nm.columns, nm.columns ? nm.d : 0);
            print_names("context", nm.context, nm.context ? nm.c : 0);
            nf_data_names_free(&nm);
        }
    }
    const nf_target *target = nf_model_variational_target(model);
    if (target) {
        printf("target          %s%s%s%s (%s)", target->type->name, target->options[0] ? "(" : "", target->options,
               target->options[0] ? ")" : "", target->type->summary);
        if (isfinite(target->log_z)) printf("; log Z = %.6f", target->log_z);
        printf("\n");
    }
    if (model->type == &nf_model_dependent) print_dependence(model);
    print_image(model);
    print_video(model);
    print_causal(model);
    printf("parameters      %zu trainable, %zu state values\n", model->P->n, model->S->n);
    if (meta.data_path[0]) {
        printf("data            %s:%s (%ld training samples", meta.data_path, meta.data_dataset, meta.n_train);
        if (meta.val_path[0]) printf(", validation file %s with %ld", meta.val_path, meta.n_val);
        else printf(", %ld held out for validation (%.0f%%)", meta.n_val, 100 * meta.val_frac);
        printf(")\n");
    }
    if (nf_h5_exists(f, "/training")) {
        char opt[32] = "", sched[32] = "", reason[128] = "";
        double lr = 0, batch = 0, steps = 0, epochs = 0, seed = 0, bstep = -1, bval = NAN, step = 0, ema = 0, wd = 0;
        nf_h5_attr_get_string(f, "/training", "optimizer", opt, sizeof opt);
        nf_h5_attr_get_string(f, "/training", "schedule", sched, sizeof sched);
        nf_h5_attr_get_string(f, "/training", "stop_reason", reason, sizeof reason);
        nf_h5_attr_get_double(f, "/training", "lr", &lr);
        nf_h5_attr_get_double(f, "/training", "batch", &batch);
        nf_h5_attr_get_double(f, "/training", "max_steps", &steps);
        nf_h5_attr_get_double(f, "/training", "epochs", &epochs);
        nf_h5_attr_get_double(f, "/training", "seed", &seed);
        if (nf_h5_attr_exists(f, "/training", "ema")) nf_h5_attr_get_double(f, "/training", "ema", &ema);
        if (nf_h5_attr_exists(f, "/training", "weight_decay"))
            nf_h5_attr_get_double(f, "/training", "weight_decay", &wd);
        nf_h5_attr_get_double(f, "/training/checkpoint", "step", &step);
        nf_h5_attr_get_double(f, "/training/checkpoint", "best_step", &bstep);
        nf_h5_attr_get_double(f, "/training/checkpoint", "best_val", &bval);
        printf("training        %s, lr %g (%s schedule), batch %.0f, seed %.0f, limit %.0f steps%s", opt, lr, sched,
               batch, seed, steps, epochs > 0 ? " or epochs" : "");
        if (wd > 0) printf("; weight decay %g", wd);
        if (ema > 0) printf("; moving average of the weights, decay %g", ema);
        printf("\n");
        const char *cmd = model->type->command;
        if (reason[0]) printf("progress        step %.0f; %s\n", step, reason);
        else if (!strncmp(cmd, "nf fit", 6))
            printf("progress        step %.0f; not finished (resume with nf fit --resume %s)\n", step, path);
        else printf("progress        step %.0f; not finished (resume with %s fit --resume %s)\n", step, cmd, path);
        /* the metric of the stage the checkpoint is in (a video model's codec and denoiser stages
         * report a mean squared error, its flow bits/dim) */
        int64_t stage = 0; /* absent or damaged: the first stage's metric */
        if (nf_h5_attr_get_int64_in(f, "/training/checkpoint", "stage", 0, 1 << 10, &stage) != NF_OK) stage = 0;
        const char *metric = nf_model_type_metric(model->type, (int)stage);
        const int bits = !strcmp(metric, "neg_bits_per_dim"), mse = !strcmp(metric, "neg_mse");
        if (bstep >= 0 && isfinite(bval))
            printf("best validation %.5f %s%s%s (step %.0f)\n", bits || mse ? -bval : bval,
                   bits ? "bits/dim" : mse ? "mse" : "nats", model->type->metric_per ? " per " : "",
                   model->type->metric_per ? model->type->metric_per : "", bstep);
        /* a model trained in stages: each finished stage's history, then the current one's */
        char g[96], name[64] = "";
        for (int k = 0; k < 16; k++) {
            snprintf(g, sizeof g, "/training/checkpoint/stages/%d", k);
            if (!nf_h5_exists(f, g)) break;
            if (nf_h5_attr_get_string(f, g, "name", name, sizeof name) != NF_OK) snprintf(name, sizeof name, "%d", k);
            print_history(f, g, name, nf_model_type_metric(model->type, k), model->type);
        }
        name[0] = 0;
        if (nf_h5_attr_exists(f, "/training/checkpoint", "stage_name"))
            nf_h5_attr_get_string(f, "/training/checkpoint", "stage_name", name, sizeof name);
        print_history(f, "/training/checkpoint/history", name[0] ? name : NULL, metric, model->type);
    }
    nf_error_clear();
    nf_h5_close(f);
    nf_model_free(model);
    return 0;
}

/* The provenance attributes nf writes on data, sample and log-density files, as "name  value". */
static void print_provenance(nf_h5 *f)
{
    static const char *const strs[] = {"generator", "source", "model", "data", "density", "flow", "method",
                                       "context_value", "split", "split_of", NULL};
    static const char *const ints[] = {"seed", "model_seed", "components", "sweeps", "split_seed", "entropy_n", NULL};
    char buf[1024];
    int64_t iv;
    double dv;
    for (int i = 0; strs[i]; i++)
        if (nf_h5_attr_exists(f, "/", strs[i]) && nf_h5_attr_get_string(f, "/", strs[i], buf, sizeof buf) == NF_OK)
            printf("%-15s %s\n", strs[i], buf);
    for (int i = 0; ints[i]; i++)
        if (nf_h5_attr_exists(f, "/", ints[i]) && nf_h5_attr_get_int64(f, "/", ints[i], &iv) == NF_OK)
            printf("%-15s %lld\n", ints[i], (long long)iv);
    if (nf_h5_attr_exists(f, "/", "entropy") && nf_h5_attr_get_double(f, "/", "entropy", &dv) == NF_OK) {
        double se = NAN;
        nf_h5_attr_get_double(f, "/", "entropy_stderr", &se);
        printf("%-15s %.5f +- %.5f nats (of the true density)\n", "entropy", dv, se);
    }
    nf_error_clear();
}

/* Mean, standard deviation, min and max of column j of an (n, w) array. */
static void column_stats(const nf_real *x, size_t n, size_t w, size_t j, double st[4])
{
    double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = x[i * w + j];
        s += v, s2 += v * v;
        lo = fmin(lo, v), hi = fmax(hi, v);
    }
    double m = s / n, var = n > 1 ? (s2 - n * m * m) / (n - 1) : 0;
    st[0] = m, st[1] = sqrt(var > 0 ? var : 0), st[2] = lo, st[3] = hi;
}

static void header_line(const char *what, const char *path, nf_h5 *f, const char *format)
{
    char version[64] = "";
    nf_h5_attr_get_string(f, "/", "nf_version", version, sizeof version);
    nf_error_clear();
    if (format[0])
        printf("%-15s %s (%s v%d%s%s)\n", what, path, format, nf_h5_format_version(f), version[0] ? ", written by nf " : "",
               version);
    else
        printf("%-15s %s (HDF5 without an nf format attribute)\n", what, path);
}

/* Dependent rows (/group ids, a kinship matrix /K): how the rows are related (nf fit --dependence). */
static void info_dependence(const char *path, nf_h5 *f, size_t n)
{
    nf_dep_split s;
    int present = 0;
    size_t units = 0, largest = 0;
    int rc = nf_dep_split_read(f, path, n, &s, &present);
    if (rc == NF_OK && present) rc = nf_dep_split_count(&s, path, &units, &largest);
    if (rc != NF_OK) /* the rest of the file is still described; nf fit --dependence says the same */
        printf("%-15s unreadable: %s\n", "dependence", nf_strerror_last());
    else if (present) {
        char lam[64] = "";
        double v;
        if (nf_h5_attr_exists(f, "/", "lambda") && nf_h5_attr_get_double(f, "/", "lambda", &v) == NF_OK)
            snprintf(lam, sizeof lam, "; generated with lambda %g", v);
        if (s.group)
            printf("%-15s /group: %zu groups of related rows, the largest %zu rows (nf fit --dependence equi)\n",
                   "dependence", units, largest);
        else
            printf("%-15s /K (%s): %zu families of related rows, the largest %zu rows%s (nf fit --dependence "
                   "kinship --kinship %s)\n", "dependence", s.dense ? "dense" : "triplets", units, largest, lam, path);
    }
    nf_error_clear();
    nf_dep_split_free(&s);
}

/* Images and videos (/x with image_shape or video_shape): their shape and levels, and one line of
 * statistics over all pixels in place of a table of thousands of pixel columns.  Returns 0 for
 * other data (or attributes that do not fit /x: the columns are shown as for any table). */
static int pixel_summary(nf_h5 *f, const nf_real *x, size_t n, size_t d)
{
    nf_video_info vid;
    nf_image_info img;
    if (nf_h5_attr_exists(f, "/x", "video_shape") && nf_video_info_read_h5(f, n, d, &vid) == NF_OK)
        printf("%-15s %d frames of %dx%dx%d, %d levels\n", "videos", vid.frames, vid.h, vid.w, vid.c, vid.levels);
    else if (nf_h5_attr_exists(f, "/x", "image_shape") && nf_image_info_read(f, n, d, &img) == NF_OK)
        printf("%-15s %dx%dx%d, %d levels\n", "images", img.h, img.w, img.c, img.levels);
    else {
        nf_error_clear();
        return 0;
    }
    double st[4];
    column_stats(x, n * d, 1, 0, st);
    printf("%-15s mean %.5g, std %.5g, min %.5g, max %.5g (all %zu values)\n", "pixels", st[0], st[1], st[2], st[3],
           n * d);
    return 1;
}

/* A data file or a sample file: /x with its names and statistics, /context, /logp_true, /logp. */
static int info_data(const char *path, nf_h5 *f, const char *format)
{
    nf_source *src = NULL;
    nf_data_names nm = {0};
    double *logp = NULL;
    size_t nl = 0, cl = 0;
    int rc = nf_source_rows_load(&src, path, "/x", 0, 0, 1);
    size_t n = src ? src->n : 0, d = src ? (size_t)src->dim : 0, c = src ? (size_t)src->ctx_dim : 0;
    if (rc == NF_OK) rc = nf_data_names_read(&nm, f, "/", d, c);
    if (rc == NF_OK && nf_h5_exists(f, "/logp")) {
        rc = nf_h5_read_double(f, "/logp", &logp, &nl, &cl);
        if (rc == NF_OK && (nl != n || cl != 1))
            rc = nf_error(NF_EFORMAT, "%s:/logp has %zu x %zu entries, expected %zu (one per row of /x)", path, nl, cl, n);
    }
    if (rc != NF_OK) {
        nf_source_free(src);
        nf_data_names_free(&nm);
        free(logp);
        return rc;
    }
    nf_rows r = nf_source_rows(src);
    header_line(logp ? "samples" : "data", path, f, format);
    printf("%-15s %zu\n", "rows", n);
    printf("%-15s %zu\n", "columns", d);
    if (!pixel_summary(f, r.x, n, d)) {
        printf("   %-20s %12s %12s %12s %12s\n", "name", "mean", "std", "min", "max");
        for (size_t j = 0; j < d && j < 40; j++) {
            char b[32];
            double st[4];
            column_stats(r.x, n, d, j, st);
            printf("   %-20s %12.5g %12.5g %12.5g %12.5g\n", nf_data_names_column(&nm, j, b, sizeof b), st[0], st[1],
                   st[2], st[3]);
        }
        if (d > 40) printf("   ... %zu more columns\n", d - 40);
    }
    if (c) {
        printf("%-15s %zu values per row%s\n", "context", c, nm.context ? "" : " (no /context_names)");
        for (size_t k = 0; k < c && k < 40; k++) {
            char b[32];
            double st[4];
            column_stats(r.ctx, n, c, k, st);
            int onehot = 1;
            size_t ones = 0;
            for (size_t i = 0; i < n; i++) {
                nf_real v = r.ctx[i * c + k];
                onehot &= v == 0 || v == 1;
                ones += v == 1;
            }
            const char *name = nf_data_names_context(&nm, k, b, sizeof b);
            if (onehot) printf("   %-20s %zu rows\n", name, ones);
            else printf("   %-20s mean %.5g, std %.5g, min %.5g, max %.5g\n", name, st[0], st[1], st[2], st[3]);
        }
        if (c > 40) printf("   ... %zu more context values\n", c - 40);
    }
    if (r.logp_true) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += r.logp_true[i];
        printf("%-15s /logp_true, mean %.5f nats (nf eval reports the KL gap on this file)\n", "true density", s / n);
    }
    if (logp) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += logp[i];
        printf("%-15s /logp (the model's log-density of each sample), mean %.5f nats\n", "log-density", s / n);
    }
    info_dependence(path, f, n);
    print_provenance(f);
    nf_source_free(src);
    nf_data_names_free(&nm);
    free(logp);
    return NF_OK;
}

/* A log-density file of nf logprob. */
static int info_logprob(const char *path, nf_h5 *f, const char *format)
{
    double *lp = NULL, mean = 0;
    size_t n = 0, c = 0;
    if (!nf_h5_exists(f, "/logp")) return nf_error(NF_EFORMAT, "%s: no dataset /logp (expected log-densities)", path);
    NF_TRY(nf_h5_read_double(f, "/logp", &lp, &n, &c));
    for (size_t i = 0; i < n * c; i++) mean += lp[i];
    header_line("log-densities", path, f, format);
    printf("%-15s %zu values, mean %.5f nats\n", "/logp", n * c, n * c > 0 ? mean / (double)(n * c) : NAN);
    print_provenance(f);
    free(lp);
    return NF_OK;
}

/* An event-sequences file. */
static int info_sequences(const char *path, nf_h5 *f, const char *format)
{
    nf_source *s;
    NF_TRY(nf_source_sequences_load(&s, path));
    nf_sequences q = nf_source_sequences(s);
    size_t events = (size_t)(q.offsets[s->n] - q.offsets[0]), longest = 0;
    double t0 = INFINITY, t1 = -INFINITY, mean_iv = NAN;
    for (size_t i = 0; i < s->n; i++) {
        size_t len = (size_t)(q.offsets[i + 1] - q.offsets[i]);
        if (len > longest) longest = len;
        t0 = fmin(t0, q.t_start[i]);
        t1 = fmax(t1, q.t_end[i]);
    }
    header_line("sequences", path, f, format);
    printf("%-15s %zu\n", "sequences", s->n);
    printf("%-15s %zu in all, %.2f per sequence, at most %zu\n", "events", events, (double)events / s->n, longest);
    if (s->num_marks) printf("%-15s %d types\n", "marks", s->num_marks);
    else printf("%-15s none\n", "marks");
    printf("%-15s from %.6g to %.6g\n", "windows", t0, t1);
    if (events && nf_sequences_stats(s, NULL, &mean_iv, NULL, NULL) == NF_OK)
        printf("%-15s %.6g\n", "mean interval", mean_iv);
    nf_error_clear();
    print_provenance(f);
    nf_source_free(s);
    return NF_OK;
}

/* A causal data file (nf data make causal-*, nf causal import, nf data split of one). */
static int info_causal(const char *path, nf_h5 *f, const char *format)
{
    nf_causal_data d;
    NF_TRY(nf_causal_load(&d, path, NULL, NULL, NULL));
    size_t n1 = 0;
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
    for (size_t i = 0; i < d.n; i++) {
        const int a = d.a[i] == 1;
        n1 += a;
        const double y = d.y[i * (size_t)d.dy];
        lo[a] = fmin(lo[a], y), hi[a] = fmax(hi[a], y), sum[a] += y;
    }
    header_line("causal data", path, f, format);
    printf("%-15s %zu (%zu control, %zu treated)\n", "units", d.n, d.n - n1, n1);
    printf("%-15s %d\n", "covariates", d.dx);
    printf("%-15s %d column%s\n", "outcome", d.dy, d.dy == 1 ? "" : "s");
    for (int a = 0; a < 2; a++) {
        const size_t na = a ? n1 : d.n - n1;
        printf("%-15s mean %.6g, from %.6g to %.6g%s\n", a ? "observed Y, A=1" : "observed Y, A=0", sum[a] / (double)na,
               lo[a], hi[a], d.dy > 1 ? " (first column)" : "");
    }
    printf("%-15s %s%s%s\n", "truth", d.y0 && d.y1 ? "both potential outcomes" : "no potential outcomes",
           d.logp0 && d.logp1 ? ", their true log-densities" : "", d.propensity ? ", true propensities" : "");
    if (d.family[0]) printf("%-15s %s (shift %g)\n", "family", d.family, d.shift);
    print_provenance(f);
    nf_causal_data_free(&d);
    return NF_OK;
}

int nf_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    const flag_spec none[] = {{0}};
    const flags_cmd c = {.cmd = "info", .help = INFO_HELP, .flags = none, .max_pos = 1};
    int urc = flags_parse(&c, argc, argv, &path, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!path) return cli_usage_error("info", "no file given (expected: nf info FILE.h5)");
    nf_h5 *f;
    if (nf_h5_open(&f, path, NULL, 0) != NF_OK) return cli_fail("info");
    char format[64] = "";
    if (nf_h5_attr_exists(f, "/", "format")) nf_h5_attr_get_string(f, "/", "format", format, sizeof format);
    nf_error_clear();
    int rc;
    if (!strcmp(format, NF_MODEL_FORMAT)) {
        nf_h5_close(f);
        return info_model(path);
    }
    if (!strcmp(format, "nf-logprob")) rc = info_logprob(path, f, format);
    else if (!strcmp(format, NF_SEQUENCES_FORMAT) || (!format[0] && nf_h5_exists(f, "/times") && nf_h5_exists(f, "/offsets")))
        rc = info_sequences(path, f, format);
    else if (!strcmp(format, NF_CAUSAL_FORMAT))
        rc = info_causal(path, f, format);
    else if (!strcmp(format, "nf-data") || (!format[0] && nf_h5_exists(f, "/x")))
        rc = info_data(path, f, format);
    else if (format[0])
        rc = nf_error(NF_EFORMAT, "%s: format '%s' is not one nf knows (expected nf-model, nf-data, nf-logprob, "
                                  "nf-sequences or nf-causal)", path, format);
    else
        rc = nf_error(NF_EFORMAT, "%s: not an nf file (no format attribute, and no /x of data or /times and "
                                  "/offsets of sequences)", path);
    nf_h5_close(f);
    return rc == NF_OK ? 0 : cli_fail("info");
}
