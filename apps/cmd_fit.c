/* apps/cmd_fit.c - nf fit: train a flow on a data file, with checkpoints and resume.
 *
 * Everything that can be wrong with the input (files, datasets, flags, the flow spec) is checked
 * before the first byte is written; the model file is then replaced atomically at every
 * checkpoint, so killing the process at any moment leaves the previous good file.  SIGINT/SIGTERM
 * stop after the current step and write a final checkpoint that --resume continues from.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "apps/mpi.h"
#include "apps/train_run.h"
#include "core/blas.h"
#include "core/rng.h"
#include "datasets/names.h"
#include "distributions/target.h"
#include "training/model_dependent.h"
#include "training/model_file.h"

/* Early stopping when fitting data with a validation set and no --patience: at 50 validations,
 * a fit that still improves (large data: a validation every epoch or --eval-every steps) is
 * never stopped, while a fit of a few hundred rows (a validation every step) ends soon after
 * its peak. */
#define FIT_DEFAULT_PATIENCE 50
/* The note on small data: more than this many parameters per number of training data. */
#define FIT_PARAMS_PER_NUMBER 100

static const char *const FIT_HELP =
    "usage: nf fit DATA.h5 -o MODEL.h5 [options]\n"
    "       nf fit --target NAME[(OPTIONS)] -o MODEL.h5 [options]\n"
    "       nf fit --resume MODEL.h5 [--threads N] [--quiet]\n"
    "\n"
    "Fit a normalizing flow to the samples in DATA.h5 (dataset /x, n x d) by maximum likelihood, or,\n"
    "with --target, to an unnormalised density by reverse KL (variational inference: no data; the\n"
    "flow draws its own samples and the target scores them).  Progress goes to stderr; the model\n"
    "(with a resumable checkpoint) is written to MODEL.h5.\n"
    "\n"
    "flow:\n"
    "  --flow PRESET|SPEC    preset (realnvp, nice, maf, iaf, nsf-coupling, nsf-ar, glow) or a spec\n"
    "                        such as \"4*(affine-coupling(hidden=64), permute(order=reverse))\"\n"
    "                                                                     [nsf-coupling]\n"
    "  --layers N            preset: number of layers       [preset's: 10 nsf-coupling, 5 maf]\n"
    "  --hidden N            preset: hidden width                         [128]\n"
    "  --blocks N            preset: hidden layers / residual blocks      [2]\n"
    "  --bins K              preset: spline bins                          [8]\n"
    "  --tail B              preset: spline tail bound                    [5]\n"
    "  --activation A        preset: relu|leaky-relu|elu|selu|tanh|sigmoid|gelu|silu  [relu]\n"
    "  --no-standardize      do not standardise the data first (default: a fixed standardize layer\n"
    "                        set from the training data's mean and standard deviation)\n"
    "target (instead of DATA.h5):\n"
    "  --target NAME         u1|u2|u3|u4 (the 2-D energies of Rezende & Mohamed 2015), banana (b=0.1,\n"
    "                        var=10), funnel (dim=2, sigma=3), gmm (dim=2, k=4, seed=1, spread=4,\n"
    "                        scale=1, log_z=1.5); options in parentheses: --target \"gmm(dim=10,k=6)\".\n"
    "                        At the end nf fit reports the ELBO, log Z estimated by importance\n"
    "                        sampling (and the true log Z where known) and the effective sample size\n"
    "  --eval-draws N        draws of q per validation (the same draws every time)   [2048]\n";
/* The training flags, in a literal of their own (the 4095 characters). */
static const char *const FIT_HELP_TRAIN =
    "training:\n"
    "  --steps N             stop after N optimizer steps                 [5000]\n"
    "  --epochs N            stop after N passes over the data            [no limit]\n"
    "  --time SEC            stop after SEC seconds of training           [no limit]\n"
    "  --batch N             samples per step                             [512]\n"
    "  --lr X                learning rate                                [1e-3]\n"
    "  --optimizer NAME      adam|adamw|sgd                               [adam]\n"
    "  --schedule NAME       constant|cosine|step (cosine decays to 0 at the last step) [cosine]\n"
    "  --warmup N            linear warm-up steps                         [0]\n"
    "  --weight-decay X      L2 (adam, sgd) or decoupled (adamw)          [0]\n"
    "  --clip X              clip the global gradient norm; 0 = off       [5]\n"
    "  --ema D               validate and keep a moving average of the weights over\n"
    "                        about 1/(1-D) steps (0.999: the last ~1000); 0 = off  [0]\n"
    "  --val-frac F          hold out this fraction for validation        [0.1]\n"
    "  --val FILE            validate on FILE instead of a held-out fraction\n"
    "  --eval-every N        validate every N steps (and at each epoch end) [250]\n"
    "  --patience N          stop after N validations with no gain (0: never) [50; 0 with --target]\n"
    "  --seed S              seeds the initial weights, the split and the batches     [1]\n"
    "  --threads N           threads                                      [all cores]\n"
    "  --checkpoint-every N  write the model file every N steps           [500]\n"
    "  --dataset PATH        dataset holding the samples                  [/x]\n"
    "                        (image and video files go to nf image|video fit; given\n"
    "                        explicitly, each image or video is fit as one flat vector)\n"
    "  --stream              read the training rows from DATA.h5 batch by batch instead of loading\n"
    "                        them (data larger than memory; the same model as without, slower steps)\n"
    "  --quiet               no progress output\n"
    "  --force               replace an existing MODEL.h5 (without it, nf fit refuses to start over a\n"
    "                        file that exists, so a new run never loses an earlier model; with it the\n"
    "                        old file is replaced at the first checkpoint)\n";
/* The flags for dependent rows (nf fit --dependence), in a literal of their own (the 4095 characters). */
static const char *const FIT_HELP_DEP =
    "dependent rows (latents correlated across rows; give --val FILE, an i.i.d. set, or --val-frac 0):\n"
    "  --dependence KIND     equi (a group id per row: block equicorrelation rho) or kinship (a known\n"
    "                        relationship matrix K: Sigma = lambda I + (1 - lambda) K)\n"
    "  --groups PATH         equi: dataset of DATA.h5 with the rows' group ids        [/group]\n"
    "  --rho R               equi: starting rho, learned (see --update-every)         [0.5]\n"
    "  --per-block-rho       equi: one rho per group instead of one shared, pooled: each group's rho\n"
    "                        leans toward the other groups' as far as its few points leave it unsure\n"
    "                        (a normal prior on logit rho fitted to all groups, the posterior median)\n"
    "  --unpooled-rho        with --per-block-rho: each group's own maximum-likelihood rho\n"
    "  --kinship FILE        kinship: HDF5 file with /K (n x n, or /K/row, /K/col, /K/value triplets)\n"
    "  --lambda L            kinship: lambda, held fixed                              [0.5]\n"
    "  --learn-lambda        kinship: learn lambda, starting at --lambda\n"
    "  --update-every N      a learned rho or lambda is set to the best value for the latest latents\n"
    "                        of all rows every N steps, rho every N/10 in the first 5N (default:\n"
    "                        rho N = 100; lambda at steps 100, 200, 400, ...: on one component its\n"
    "                        n x n precision is built at the third update, and later moves of more\n"
    "                        than 0.02 rebuild it), and once more for the final flow when the run\n"
    "                        ends; 0: trained by gradient with the flow instead\n";
/* The rest of the help: one literal of it all would pass the 4095 characters C99 promises. */
static const char *const FIT_HELP_END =
    "\n"
    "SIGINT or SIGTERM stops after the current step and writes a checkpoint that --resume continues;\n"
    "a second signal ends the process at once (the last checkpoint stays).  The output may not be the\n"
    "data or --val file.\n"
    "\n"
    "examples:\n"
    "  nf data make checkerboard -n 100000 -o train.h5\n"
    "  nf fit train.h5 -o model.h5\n"
    "  nf fit train.h5 --flow maf --layers 5 --hidden 256 --steps 20000 -o maf.h5\n"
    "  nf fit --target u2 --steps 3000 -o q.h5      # variational fit; nf plot q.h5 draws both\n"
    "  nf fit --resume model.h5          # continue a stopped or killed run\n"
    "  nf fit dep.h5 --dependence equi --groups /group --val iid.h5 -o dep_model.h5\n";

/* What the model builders fill in; the training run itself is apps/train_run.c's. */
typedef struct fit_ctx {
    const char *out;
    nf_model_meta meta;
} fit_ctx;

typedef struct fit_args {
    const char *data, *out, *flow, *val, *dataset, *resume, *target;
    long eval_draws;
    int stream, force;
    nf_preset_knobs knobs;
    int standardize, quiet, threads;
    double val_frac;
    nf_train_config cfg;
    const char *optimizer, *schedule;
    int steps_set, patience_set, dataset_set;
    const char *dependence, *groups, *kinship;   /* --dependence equi|kinship */
    double rho, lambda;
    int per_block, unpooled, learn_lambda, update_every, update_every_set, val_frac_set, dep_flag_set;
} fit_args;

static int parse_args(int argc, char **argv, fit_args *a)
{
    const char *cmd = "fit";
    memset(a, 0, sizeof *a);
    a->dataset = "/x";
    a->flow = "nsf-coupling";
    a->standardize = 1;
    a->val_frac = 0.1;
    nf_train_config_init(&a->cfg);
    a->cfg.max_steps = 5000;
    a->cfg.clip = 5.0;
    a->cfg.checkpoint_every = 500;
    a->cfg.eval_every = 250;
    a->optimizer = "adam";
    a->schedule = "cosine";
    a->eval_draws = 2048;
    a->groups = "/group";
    a->rho = 0.5;
    a->lambda = 0.5;
    double lr = 1e-3, wd = 0, warm = 0;
    long seed = 1;
    int no_standardize = 0;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &a->out},
        {.name = "--flow", .kind = FLAG_STRING, .dst = &a->flow},
        {.name = "--val", .kind = FLAG_STRING, .dst = &a->val},
        {.name = "--dataset", .kind = FLAG_STRING, .dst = &a->dataset, .seen = &a->dataset_set},
        {.name = "--resume", .kind = FLAG_STRING, .dst = &a->resume},
        {.name = "--target", .kind = FLAG_STRING, .dst = &a->target},
        {.name = "--optimizer", .kind = FLAG_STRING, .dst = &a->optimizer},
        {.name = "--schedule", .kind = FLAG_STRING, .dst = &a->schedule},
        {.name = "--activation", .kind = FLAG_STRING, .dst = &a->knobs.activation},
        {.name = "--layers", .kind = FLAG_INT, .dst = &a->knobs.layers, .lo = 1, .hi = 1000},
        {.name = "--hidden", .kind = FLAG_INT, .dst = &a->knobs.hidden, .lo = 1, .hi = 1 << 16},
        {.name = "--blocks", .kind = FLAG_INT, .dst = &a->knobs.blocks, .lo = 1, .hi = 100},
        {.name = "--bins", .kind = FLAG_INT, .dst = &a->knobs.bins, .lo = 2, .hi = 512},
        {.name = "--tail", .kind = FLAG_DOUBLE, .dst = &a->knobs.tail, .lo = 1e-3, .hi = 1e6},
        {.name = "--epochs", .kind = FLAG_INT, .dst = &a->cfg.epochs, .lo = 0, .hi = 1L << 30},
        {.name = "--batch", .kind = FLAG_INT, .dst = &a->cfg.batch, .lo = 1, .hi = 1L << 24},
        {.name = "--patience", .kind = FLAG_INT, .dst = &a->cfg.patience, .lo = 0, .hi = 1L << 30,
         .seen = &a->patience_set},
        {.name = "--eval-every", .kind = FLAG_LONG, .dst = &a->cfg.eval_every, .lo = 0, .hi = 1L << 40},
        {.name = "--checkpoint-every", .kind = FLAG_LONG, .dst = &a->cfg.checkpoint_every, .lo = 0, .hi = 1L << 40},
        {.name = "--eval-draws", .kind = FLAG_LONG, .dst = &a->eval_draws, .lo = 0, .hi = 1L << 24},
        FLAG_THREADS(a->threads),
        {.name = "--lr", .kind = FLAG_DOUBLE, .dst = &lr, .lo = 0, .hi = 10},
        {.name = "--weight-decay", .kind = FLAG_DOUBLE, .dst = &wd, .lo = 0, .hi = 10},
        {.name = "--warmup", .kind = FLAG_DOUBLE, .dst = &warm, .lo = 0, .hi = 1e12},
        {.name = "--clip", .kind = FLAG_DOUBLE, .dst = &a->cfg.clip, .lo = 0, .hi = 1e12},
        FLAG_EMA(a->cfg),
        {.name = "--val-frac", .kind = FLAG_DOUBLE, .dst = &a->val_frac, .lo = 0, .hi = 0.9, .seen = &a->val_frac_set},
        {.name = "--dependence", .kind = FLAG_STRING, .dst = &a->dependence},
        {.name = "--groups", .kind = FLAG_STRING, .dst = &a->groups, .seen = &a->dep_flag_set},
        {.name = "--kinship", .kind = FLAG_STRING, .dst = &a->kinship, .seen = &a->dep_flag_set},
        {.name = "--rho", .kind = FLAG_DOUBLE, .dst = &a->rho, .lo = 1e-6, .hi = 1 - 1e-6, .seen = &a->dep_flag_set},
        {.name = "--lambda", .kind = FLAG_DOUBLE, .dst = &a->lambda, .lo = 1e-6, .hi = 1 - 1e-6, .seen = &a->dep_flag_set},
        {.name = "--per-block-rho", .kind = FLAG_BOOL, .dst = &a->per_block, .seen = &a->dep_flag_set},
        {.name = "--unpooled-rho", .kind = FLAG_BOOL, .dst = &a->unpooled, .seen = &a->dep_flag_set},
        {.name = "--learn-lambda", .kind = FLAG_BOOL, .dst = &a->learn_lambda, .seen = &a->dep_flag_set},
        {.name = "--update-every", .kind = FLAG_INT, .dst = &a->update_every, .lo = 0, .hi = 1 << 30,
         .seen = &a->update_every_set},
        {.name = "--time", .kind = FLAG_DOUBLE, .dst = &a->cfg.max_seconds, .lo = 0, .hi = 1e9},
        {.name = "--steps", .kind = FLAG_LONG, .dst = &a->cfg.max_steps, .lo = 0, .hi = 1L << 40, .seen = &a->steps_set},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = 1L << 53},
        {.name = "--quiet", .alias = "-q", .kind = FLAG_BOOL, .dst = &a->quiet},
        {.name = "--no-standardize", .kind = FLAG_BOOL, .dst = &no_standardize},
        {.name = "--stream", .kind = FLAG_BOOL, .dst = &a->stream},
        {.name = "--force", .kind = FLAG_BOOL, .dst = &a->force},
        {0},
    };
    const char *pos[2];
    int npos = 0;
    static char help[8192];
    snprintf(help, sizeof help, "%s%s%s%s", FIT_HELP, FIT_HELP_TRAIN, FIT_HELP_DEP, FIT_HELP_END);
    const flags_cmd fc = {.cmd = cmd, .help = help, .flags = flags, .max_pos = 2};
    int rc = flags_parse(&fc, argc, argv, pos, &npos);
    if (rc != FLAGS_OK) return rc == FLAGS_HELP ? -1 : 2;
    if (npos == 2) return cli_usage_error(cmd, "more than one data file ('%s' and '%s')", pos[0], pos[1]);
    a->data = npos ? pos[0] : NULL;
    a->cfg.seed = (uint64_t)seed;
    a->standardize = !no_standardize;
    if (a->resume) return flags_check_resume(&fc, argc, argv, a->resume, npos) == FLAGS_OK ? 0 : 2;
    if (a->target && a->data)
        return cli_usage_error(cmd, "--target fits a flow to a density, without data (got the data file '%s')", a->data);
    if (a->target && a->cfg.epochs > 0)
        return cli_usage_error(cmd, "--epochs counts passes over data; with --target give --steps or --time");
    if (a->target && (a->val || a->standardize == 0))
        return cli_usage_error(cmd, "--val and --no-standardize are for fitting data, not a --target");
    if (!a->data && !a->target)
        return cli_usage_error(cmd, "no data file given (expected: nf fit DATA.h5 -o MODEL.h5, or --target NAME)");
    if (!a->out) return cli_usage_error(cmd, "no output file given (expected -o MODEL.h5)");
    if ((a->dep_flag_set || a->update_every_set) && !a->dependence)
        return cli_usage_error(cmd, "--groups/--kinship/--rho/--lambda/--per-block-rho/--unpooled-rho/"
                                    "--learn-lambda/--update-every need --dependence");
    if (a->dependence) {
        int equi = !strcmp(a->dependence, "equi");
        if (!equi && strcmp(a->dependence, "kinship"))
            return cli_usage_error(cmd, "--dependence '%s' (expected equi or kinship)", a->dependence);
        if (!a->data) return cli_usage_error(cmd, "--dependence is for fitting data (expected DATA.h5)");
        if (equi && (a->kinship || a->learn_lambda))
            return cli_usage_error(cmd, "--kinship and --learn-lambda go with --dependence kinship");
        if (a->unpooled && !a->per_block)
            return cli_usage_error(cmd, "--unpooled-rho chooses how one rho per group is learnt: add --per-block-rho");
        if (!equi && a->update_every_set && !a->learn_lambda)
            return cli_usage_error(cmd, "--update-every N sets how a learned lambda is updated: add --learn-lambda");
        if (!equi && !a->kinship) return cli_usage_error(cmd, "--dependence kinship needs --kinship FILE");
        if (!a->val && (!a->val_frac_set || a->val_frac > 0))
            return cli_usage_error(cmd, "--dependence trains on every row of %s, in its order: validate on an "
                                        "i.i.d. file with --val FILE (or give --val-frac 0)", a->data);
    }
    if (nf_optim_parse(a->optimizer, &a->cfg.optim.type)) return cli_usage_error(cmd, "--optimizer: %s", nf_strerror_last());
    nf_train_config defaults;
    nf_train_config_init(&defaults);
    double keep_wd = wd;
    nf_optim_init(&a->cfg.optim, a->cfg.optim.type);
    a->cfg.optim.lr = lr;
    if (keep_wd > 0 || a->cfg.optim.type != NF_OPTIM_ADAMW) a->cfg.optim.weight_decay = keep_wd;
    nf_schedule_type st;
    if (nf_schedule_parse(a->schedule, &st)) return cli_usage_error(cmd, "--schedule: %s", nf_strerror_last());
    nf_schedule_init(&a->cfg.schedule, st, lr);
    a->cfg.schedule.warmup = (long)warm;
    if (a->cfg.epochs > 0 && !a->steps_set) a->cfg.max_steps = 0;
    if (a->cfg.max_steps <= 0 && a->cfg.epochs <= 0 && a->cfg.max_seconds <= 0)
        return cli_usage_error(cmd, "no stopping rule: give --steps, --epochs or --time");
    return 0;
}


/* Steps the cosine schedule decays over: the known total, or the epochs' worth. */
static void fix_schedule_total(nf_train_config *cfg, size_t n_train)
{
    long spe = (long)((n_train + (size_t)cfg->batch - 1) / (size_t)cfg->batch);
    if (spe < 1) spe = 1;
    long total = cfg->max_steps;
    if (cfg->epochs > 0 && (total <= 0 || cfg->epochs * spe < total)) total = cfg->epochs * spe;
    if (total <= cfg->schedule.warmup) total = cfg->schedule.warmup + 1;
    if (total > 0) cfg->schedule.total = total;
}

/* The flow spec from --flow and the preset knobs; *usage set (and 2 returned by the caller) when
 * the knobs were given with a spec. */
static int flow_spec(const char *cmd, fit_args *a, fit_ctx *ctx, char *spec, size_t size, int *usage)
{
    *usage = 0;
    if (nf_preset_is(a->flow)) {
        snprintf(ctx->meta.preset, sizeof ctx->meta.preset, "%s", a->flow);
        return nf_preset_expand(a->flow, &a->knobs, spec, size);
    }
    if (a->knobs.layers || a->knobs.hidden || a->knobs.blocks || a->knobs.bins || a->knobs.tail > 0 ||
        a->knobs.activation) {
        *usage = cli_usage_error(cmd, "--layers/--hidden/--blocks/--bins/--tail/--activation apply to presets; "
                                      "with a spec, write the options in the spec");
        return NF_EINVAL;
    }
    if (strlen(a->flow) >= size) return nf_error(NF_EINVAL, "--flow: the spec is longer than %zu characters", size - 1);
    snprintf(spec, size, "%s", a->flow);
    return NF_OK;
}

/* A density model for the training rows: the spec as the user wrote it is built first, so an error
 * points at their text, not at the standardize layer put in front of it. */
static int build_density(const char *cmd, fit_args *a, fit_ctx *ctx, const nf_source *train, nf_model **model,
                         int *usage)
{
    char body[1 << 15], full[(1 << 15) + 32];
    NF_TRY(flow_spec(cmd, a, ctx, body, sizeof body, usage));
    int rc = nf_model_density_create(model, body, train->dim, train->ctx_dim, a->cfg.seed);
    if (rc != NF_OK) return nf_error_context(rc, "--flow");
    nf_model_free(*model);
    *model = NULL;
    snprintf(full, sizeof full, "%s%s", a->standardize ? "standardize, " : "", body);
    rc = nf_model_density_create(model, full, train->dim, train->ctx_dim, a->cfg.seed);
    if (rc != NF_OK) return nf_error_context(rc, "--flow");
    return (*model)->type->init_data(*model, train);
}

/* A dependent model (--dependence): the structure for the training rows, then the flow as in
 * build_density on a dependent base. */
static int load_structure(const nf_dep_source *s, const nf_source *train, nf_dep **dep)
{
    int rc = nf_dep_load(dep, s, train->n);
    if (rc != NF_OK) nf_error_context(rc, "--dependence %s", s->kind == NF_DEP_EQUI ? "equi" : "kinship");
    return rc;
}

static int build_dependent(const char *cmd, fit_args *a, fit_ctx *ctx, const nf_source *train, nf_model **model,
                           int *usage)
{
    nf_dep_source s = {.kind = strcmp(a->dependence, "equi") ? NF_DEP_KINSHIP : NF_DEP_EQUI,
                       .per_block = a->per_block ? (a->unpooled ? 1 : 2) : 0};
    snprintf(s.path, sizeof s.path, "%s", s.kind == NF_DEP_EQUI ? a->data : a->kinship);
    snprintf(s.dataset, sizeof s.dataset, "%s", s.kind == NF_DEP_EQUI ? a->groups : "/K");
    char body[1 << 15], full[(1 << 15) + 32];
    NF_TRY(flow_spec(cmd, a, ctx, body, sizeof body, usage));
    snprintf(full, sizeof full, "%s%s", a->standardize ? "standardize, " : "", body);
    nf_dep *dep;
    NF_TRY(load_structure(&s, train, &dep));
    if (!a->quiet && s.kind == NF_DEP_KINSHIP) { /* what a batch will cost depends on K's families */
        size_t largest;
        int families = nf_dep_families(dep, &largest);
        if (largest == 1)
            fprintf(stderr, "nf fit: kinship over %zu rows, none related (K is diagonal): the rows are independent "
                    "whatever lambda\n", dep->n);
        else if (families > 1)
            fprintf(stderr, "nf fit: kinship over %zu rows in %d families of relatives (the largest %zu rows), each "
                    "with its own eigenpairs and precision\n", dep->n, families, largest);
        else if (dep->n > NF_DEP_CACHE_MAX || (a->learn_lambda && a->update_every_set && !a->update_every))
            fprintf(stderr, "nf fit: kinship over %zu rows, all related: %s, so batches go through the "
                    "eigenbasis (O(b n) a batch)\n", dep->n,
                    dep->n > NF_DEP_CACHE_MAX ? "too many rows for a cached n x n precision" : "lambda by gradient");
        else
            fprintf(stderr, "nf fit: kinship over %zu rows, all related: batches read the whole %zu x %zu "
                    "precision%s\n", dep->n, dep->n, dep->n,
                    a->learn_lambda ? " from lambda's third update on (through the eigenbasis before)" : "");
    }
    double theta0 = s.kind == NF_DEP_EQUI ? a->rho : a->lambda;
    int rc = nf_model_dependent_create(model, full, train->dim, train->ctx_dim, a->cfg.seed, dep, theta0,
                                       s.kind == NF_DEP_EQUI || a->learn_lambda,
                                       a->update_every_set ? a->update_every
                                       : s.kind == NF_DEP_EQUI ? 100 : NF_DEP_UPDATE_DOUBLING);
    if (rc != NF_OK) return nf_error_context(rc, "--flow");
    NF_TRY(nf_model_dependent_set_source(*model, &s));
    return (*model)->type->init_data(*model, train);
}

/* A resumed dependent model: the structure again, from where the fit read it. */
static int reattach_structure(nf_model *model, const nf_source *train)
{
    nf_dep_source s;
    nf_dep *dep;
    NF_TRY(nf_model_dependent_source(model, &s));
    NF_TRY(load_structure(&s, train, &dep));
    return nf_model_dependent_attach(model, dep);
}

/* A variational model for --target NAME or NAME(options). */
static int build_variational(const char *cmd, fit_args *a, fit_ctx *ctx, nf_model **model, int *usage)
{
    char name[64], opts[256] = "";
    const char *paren = strchr(a->target, '(');
    size_t len = paren ? (size_t)(paren - a->target) : strlen(a->target);
    if (len == 0 || len >= sizeof name) return nf_error(NF_EINVAL, "--target '%s': expected NAME or NAME(options)", a->target);
    memcpy(name, a->target, len);
    name[len] = '\0';
    if (paren) {
        size_t olen = strlen(paren + 1);
        if (olen == 0 || paren[olen] != ')' || olen > sizeof opts)
            return nf_error(NF_EINVAL, "--target '%s': expected NAME(key=value, ...) with a closing ')'", a->target);
        memcpy(opts, paren + 1, olen - 1);
        opts[olen - 1] = '\0';
    }
    char body[1 << 15];
    /* the target alone first, so a bad name or option is reported against --target */
    nf_target *probe;
    int rc = nf_target_create(&probe, name, opts);
    if (rc != NF_OK) return nf_error_context(rc, "--target");
    nf_target_free(probe);
    NF_TRY(flow_spec(cmd, a, ctx, body, sizeof body, usage));
    rc = nf_model_variational_create(model, body, name, opts, a->cfg.seed);
    if (rc != NF_OK) return nf_error_context(rc, "--flow");
    snprintf(ctx->meta.data_path, sizeof ctx->meta.data_path, "%s", "");
    return NF_OK;
}

static void print_vi_summary(nf_model *m, uint64_t seed, int quiet)
{
    if (quiet) return;
    nf_vi_report r;
    nf_rng *rng = nf_rng_alloc(seed, 0x72657074);
    if (rng && nf_model_variational_report(m, 20000, 2048, rng, &r) == NF_OK) {
        fprintf(stderr, "nf fit: ELBO %.4f +- %.4f, log Z ~ %.4f%s, effective sample size %.1f%% (20000 draws)\n",
                r.elbo, r.elbo_stderr, r.log_z, isfinite(r.log_z_true) ? "" : " (true value unknown)",
                100 * r.ess_frac);
        if (isfinite(r.log_z_true)) fprintf(stderr, "nf fit: true log Z %.4f\n", r.log_z_true);
    }
    nf_rng_free(rng);
}

int nf_cmd_fit(int argc, char **argv)
{
    const char *cmd = "fit";
    fit_args a;
    int urc = parse_args(argc, argv, &a);
    if (urc) return urc < 0 ? 0 : urc;
    if ((urc = app_mpi_start(cmd)) != 0) return urc;
    /* under mpirun: each process reads its share of the rows; the first one speaks and writes */
    const int part = app_mpi_rank(), parts = app_mpi_size();
    if (part != 0) a.quiet = 1;
    cli_set_threads(a.threads);

    fit_ctx ctx = {0};
    nf_model *model = NULL;
    nf_trainer *tr = NULL;
    nf_source *all = NULL, *train = NULL, *val = NULL;
    nf_data_names names = {0};
    int rc = NF_OK, status = 1, usage = 0;
    int resuming = a.resume != NULL;

    if (resuming) {
        ctx.out = a.resume;
        if ((rc = nf_model_open(a.resume, &model, &ctx.meta)) != NF_OK) goto fail;
        int quiet = a.quiet, threads = a.threads;
        if ((rc = nf_model_load_train_config(a.resume, &a.cfg)) != NF_OK) goto fail;
        a.quiet = quiet, a.threads = threads;
        if (model->type->source_kind) {
            a.data = ctx.meta.data_path;
            a.dataset = ctx.meta.data_dataset[0] ? ctx.meta.data_dataset : "/x";
            a.val = ctx.meta.val_path[0] ? ctx.meta.val_path : NULL;
            a.val_frac = ctx.meta.val_frac;
            a.stream = ctx.meta.stream;
        } else {
            a.data = NULL;
        }
    } else {
        ctx.out = a.out;
        if ((rc = app_check_output(a.out)) != NF_OK) goto fail;
    }
    /* the model file is rewritten at every checkpoint: it must not be the data it trains on */
    if ((rc = app_check_not_input(ctx.out, a.data, "data file")) != NF_OK) goto fail;
    if ((rc = app_check_not_input(ctx.out, a.val, "--val file")) != NF_OK) goto fail;
    if ((rc = app_check_not_input(ctx.out, a.kinship, "--kinship file")) != NF_OK) goto fail;
    if (!resuming && a.data && !a.dataset_set && (rc = app_check_not_images(a.data)) != NF_OK) goto fail;
    if (a.data) {
        size_t dim = model ? (size_t)model->flow->dim : 0, cdim = model ? (size_t)model->ctx_dim : 0;
        if (a.stream && parts > 1) {
            rc = nf_error(NF_EINVAL, "--stream reads batches from the file in one process; under mpirun each of the "
                                     "%d processes loads its share of the rows instead (leave out --stream)", parts);
            goto fail;
        }
        rc = a.stream ? nf_source_rows_open(&all, a.data, a.dataset, dim, cdim, !model)
                      : nf_source_rows_load_share(&all, a.data, a.dataset, dim, cdim, !model, part, parts);
        if (rc != NF_OK) goto fail;
        nf_source_rows_drop_logp_true(all); /* true log-densities are for nf eval; training does not need them */
        if (a.val) {
            train = all;
            all = NULL;
            if ((rc = nf_source_rows_load_share(&val, a.val, a.dataset, (size_t)train->dim, (size_t)train->ctx_dim,
                                                train->ctx_dim > 0, part, parts)) != NF_OK)
                goto fail;
        } else if ((rc = nf_source_split(all, a.val_frac, a.cfg.seed, &val, &train)) != NF_OK) {
            nf_error_context(rc, "--val-frac");
            goto fail;
        }
        /* the data's column and context names, kept in the model file for samples and pictures */
        size_t nd = resuming || !strcmp(a.dataset, "/x") ? (size_t)train->dim : 0;
        if ((rc = nf_data_names_load(&names, resuming ? a.resume : a.data, resuming ? "/data" : "/", nd,
                                     (size_t)train->ctx_dim)) != NF_OK)
            goto fail;
        ctx.meta.names = &names;
        if (parts > 1 && (a.dependence || (model && model->type == &nf_model_dependent))) {
            rc = nf_error(NF_EINVAL, "--dependence couples the rows of every batch: it trains in one process");
            goto fail;
        }
        if (model && model->type == &nf_model_dependent && (rc = reattach_structure(model, train)) != NF_OK) goto fail;
    }
    if (!model) {
        rc = a.target       ? build_variational(cmd, &a, &ctx, &model, &usage)
             : a.dependence ? build_dependent(cmd, &a, &ctx, train, &model, &usage)
                            : build_density(cmd, &a, &ctx, train, &model, &usage);
        if (usage) {
            status = usage;
            goto out;
        }
        if (rc != NF_OK) goto fail;
        if (train) {
            snprintf(ctx.meta.data_path, sizeof ctx.meta.data_path, "%s", a.data);
            snprintf(ctx.meta.data_dataset, sizeof ctx.meta.data_dataset, "%s", a.dataset);
            snprintf(ctx.meta.val_path, sizeof ctx.meta.val_path, "%s", a.val ? a.val : "");
            ctx.meta.val_frac = a.val ? 0 : a.val_frac;
            ctx.meta.stream = a.stream;
            if (val && !a.patience_set) a.cfg.patience = FIT_DEFAULT_PATIENCE;
        } else {
            a.cfg.eval_items = a.eval_draws;
        }
        fix_schedule_total(&a.cfg, train ? train->n : 0);
    }
    ctx.meta.n_train = train ? (long)train->n : 0;
    ctx.meta.n_val = val ? (long)val->n : 0;
    if (!resuming && part == 0 && (rc = app_check_new_model(a.out, a.force)) != NF_OK) goto fail;
    if ((rc = nf_trainer_create(&tr, model, &a.cfg, train, val)) != NF_OK) goto fail;
    if (resuming) {
        if ((rc = nf_model_load_trainer(a.resume, tr)) != NF_OK) goto fail;
        if (nf_trainer_finished(tr)) {
            fprintf(stderr, "nf fit: %s already finished (step %ld); nothing to resume\n", a.resume, tr->step);
            status = 0;
            goto out;
        }
        if (!a.quiet) fprintf(stderr, "nf fit: resuming %s at step %ld (epoch %d)\n", a.resume, tr->step, tr->epoch);
    } else if (!a.quiet && train) {
        fprintf(stderr, "nf fit: %zu training and %zu validation samples of dimension %d; %zu parameters\n", train->n,
                val ? val->n : 0, train->dim, model->P->n);
        double numbers = (double)train->n * train->dim;
        if ((double)model->P->n > FIT_PARAMS_PER_NUMBER * numbers)
            fprintf(stderr, "nf fit: note: %zu parameters for %.0f numbers of training data (%zu x %d) may overfit; %s, "
                            "and a smaller flow trains faster (%s)\n", model->P->n, numbers, train->n, train->dim,
                    val && a.cfg.patience > 0 ? "early stopping keeps the best validation weights"
                                              : "validate (--val-frac 0.1) to keep the best weights",
                    ctx.meta.preset[0] ? "e.g. --layers 4 --hidden 32" : "fewer or narrower layers");
    } else if (!a.quiet) {
        fprintf(stderr, "nf fit: reverse KL to target %s (dimension %d), %d draws per step; %zu parameters\n", a.target,
                model->flow->dim, a.cfg.batch, model->P->n);
    }
    app_train_run run = {.cmd = cmd, .out = ctx.out, .model = model, .meta = &ctx.meta, .quiet = a.quiet};
    status = app_train_run_go(&run, tr);
    if (status == 0 && !model->type->source_kind) print_vi_summary(model, a.cfg.seed, a.quiet);
    goto out;
fail:
    status = cli_fail(cmd);
out:
    nf_trainer_free(tr);
    nf_model_free(model);
    nf_source_free(train);
    nf_source_free(val);
    nf_source_free(all);
    nf_data_names_free(&names);
    return app_mpi_end(status);
}
