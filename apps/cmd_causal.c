/* apps/cmd_causal.c - nf causal: interventional densities of potential outcomes (import, fit,
 * density, sample, eval, plot) over the library's causal data (datasets/causal.h), the "causal"
 * model kind (training/model_causal.h) and the one trainer; progress, checkpoints and --resume
 * as nf tpp fit (apps/train_run.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "apps/mpi.h"
#include "apps/train_run.h"
#include "core/h5.h"
#include "core/import.h"
#include "datasets/causal.h"
#include "plot/plot.h"
#include "training/model_causal.h"

static const char *const CAUSAL_HELP =
    "usage: nf causal import|fit|density|sample|eval|plot ...   (nf causal SUBCOMMAND --help)\n"
    "\n"
    "The distribution of an outcome under each treatment, p(Y[a] = y) = E_X p(y | X, A = a), from\n"
    "observational data (covariates X, a binary treatment A, an outcome Y) by interventional\n"
    "normalizing flows (Melnychuk, Frauen and Feuerriegel, ICML 2023): a nuisance flow p(y | x, a) with\n"
    "a propensity model, then one target flow per arm with a one-step bias correction, so the estimate\n"
    "stays right when either the outcome or the propensity model is good.  Outcomes of one column (on\n"
    "a grid) or several (by draws of the nuisance flow; nf data make causal-moons is 2-D).\n"
    "\n"
    "  import   a CSV with named (or numbered) treatment and outcome columns into a causal data file\n"
    "  fit      both stages on a causal data file (checkpoints, --resume)\n"
    "  density  the estimated interventional density of an arm on a grid\n"
    "  sample   draws of an arm's potential outcome\n"
    "  eval     held-out log-density of the potential outcomes per arm, arm means, gaps to the truth,\n"
    "           for the model and its two ablations (plug-in, no bias correction)\n"
    "  plot     estimated against true interventional densities per arm\n"
    "\n"
    "example:\n"
    "  nf data make causal-poly --shift 3 -o poly.h5\n"
    "  nf causal fit poly.h5 -o model.h5\n"
    "  nf data make causal-poly --shift 3 --seed 2 -o test.h5\n"
    "  nf causal eval model.h5 test.h5\n";

static const char *const IMPORT_HELP =
    "usage: nf causal import FILE.csv -o DATA.h5 --treatment COL --outcome COL [--covariates LIST]\n"
    "                        [--counterfactual COL] [--drop LIST]\n"
    "\n"
    "Units from a CSV (or NPY) into a causal data file (docs/FORMATS.md, nf-causal).  Columns are\n"
    "named by their header or by 0-based index; LIST is comma-separated and may hold ranges (5-29).\n"
    "The treatment column must hold 0 and 1 only, both present.  A counterfactual column (the other\n"
    "arm's outcome, as in semi-synthetic benchmarks such as IHDP) keeps both potential outcomes for\n"
    "nf causal eval.\n"
    "\n"
    "  -o FILE              output file (written atomically)\n"
    "  --treatment COL      the treatment column, 0/1\n"
    "  --outcome COL        the observed outcome\n"
    "  --counterfactual COL the outcome under the other treatment                [none]\n"
    "  --covariates LIST    the covariate columns          [every other numeric column]\n"
    "  --drop LIST          columns to leave out of the default covariates       [none]\n"
    "\n"
    "example (IHDP: treatment, y_factual, y_cfactual, mu0, mu1, x1..x25):\n"
    "  nf causal import ihdp_npci_1.csv --treatment 0 --outcome 1 --counterfactual 2 \\\n"
    "      --covariates 5-29 -o ihdp1.h5\n";

static const char *const FIT_HELP =
    "usage: nf causal fit DATA.h5 -o MODEL.h5 [--covariates /x --treatment /a --outcome /y] [options]\n"
    "       nf causal fit --resume MODEL.h5 [--threads N] [--quiet]\n"
    "\n"
    "Fit both stages: the nuisance flow p(y | x, a) with the propensity (outcome NLL + alpha x the\n"
    "propensity cross-entropy), then per arm a target flow on the grid cross-entropy with the bias\n"
    "correction, and the no-correction ablation beside it.  An outcome of several columns has no grid:\n"
    "its cross-entropy is over --draws draws of the nuisance flow per unit and arm, and its target\n"
    "flows are autoregressive splines.  Each stage runs --steps steps.  Progress\n"
    "on stderr; the model (with a resumable checkpoint) goes to MODEL.h5.\n"
    "\n"
    "model:\n"
    "  --repr N             width of the covariate representation R(x)        [16]\n"
    "  --hidden N           width of the spline conditioner                   [32]\n"
    "  --bins N             spline bins                                       [8]\n"
    "  --grid K             grid points over the outcome range (stage 2, 1-D) [200]\n"
    "  --draws M            nuisance draws per unit and arm (stage 2, >= 2-D) [32]\n"
    "  --noise S            training noise on R(x) and the outcome (0..1)     [0.05]\n"
    "  --alpha A            weight of the propensity cross-entropy            [1]\n"
    "  --prop-clip P        units with propensity below P left out of BC      [0.05]\n"
    "  --ema D              moving-average decay of the target flows          [0.995]\n"
    "  --linear-shift       the nuisance flow models each arm's outcome less its least-squares\n"
    "                       line in the covariates, so p(y | x, a) extrapolates the line beyond\n"
    "                       the arm's covariates (for outcomes near linear in x) [off]\n"
    "training:\n"
    "  --steps N            optimizer steps per stage                         [2000]\n"
    "  --batch N            units per step                                    [64]\n"
    "  --lr X               learning rate (Adam, cosine schedule per stage)   [5e-3]\n"
    "  --clip X             gradient-norm clip; 0 = off                       [5]\n"
    "  --val-frac F         units held out for validation                     [0.2]\n"
    "  --eval-every N       validate every N steps                            [100]\n"
    "  --patience N         stop a stage after N validations without gain     [0: never]\n"
    "  --seed S             weights, split and batches                        [1]\n"
    "  --threads N          threads                                           [all cores]\n"
    "  --checkpoint-every N write the model file every N steps                [200]\n"
    "  --quiet              no progress output\n"
    "  --force              replace an existing MODEL.h5 (without it a new fit refuses to start over it)\n"
    "\n"
    "example:\n"
    "  nf causal fit poly.h5 --steps 1500 -o model.h5\n";

static const char *const DENSITY_HELP =
    "usage: nf causal density MODEL.h5 --arm 0|1 --grid LO:HI:N[,LO:HI:N] -o DENS.h5\n"
    "\n"
    "log p(Y[arm] = y) on N evenly spaced points from LO to HI: the target flow (/logp), the\n"
    "no-correction ablation (/logp_nobc) and the plug-in (/logp_plugin); layout in docs/FORMATS.md.\n"
    "A 2-D outcome takes a grid per axis (one LO:HI:N serves both): /y holds the N1 x N2 points\n"
    "(the first axis varying fastest), each /logp* one value per point.\n"
    "\n"
    "examples:\n"
    "  nf causal density model.h5 --arm 1 --grid -5:15:400 -o dens1.h5\n"
    "  nf causal density moons.h5 --arm 0 --grid -3:3:100,-2:2:80 -o dens0.h5\n";

static const char *const SAMPLE_HELP =
    "usage: nf causal sample MODEL.h5 --arm 0|1 -n N -o S.h5 [--seed S]\n"
    "\n"
    "N draws of the potential outcome Y[arm] from the target flow (an nf-data file, /x (N, outcome\n"
    "columns)).\n"
    "\n"
    "example:\n"
    "  nf causal sample model.h5 --arm 1 -n 10000 -o y1.h5\n";

static const char *const EVAL_HELP =
    "usage: nf causal eval MODEL.h5 DATA.h5 [--json]\n"
    "\n"
    "Per arm: the mean log-density of the units' potential outcomes Y[a] (both stored in generated\n"
    "or imported data with counterfactuals; else the observed outcomes of that arm's units) under the\n"
    "target flow, the no-correction ablation and the plug-in; the true density's own mean and the gap\n"
    "to it when the data know it (nf data make causal-*); and the error of each estimate's mean of\n"
    "Y[a] against the true mean (or the units' mean of Y[a]; for outcomes of several columns the\n"
    "means are vectors and the error is their Euclidean distance).  DATA should be held out from\n"
    "training.\n"
    "\n"
    "  --json         one JSON object\n"
    "\n"
    "example:\n"
    "  nf causal eval model.h5 test.h5 --json\n";

static const char *const PLOT_HELP =
    "usage: nf causal plot MODEL.h5 -o PLOT.png [--data DATA.h5] [--grid LO:HI:N[,LO:HI:N]]\n"
    "\n"
    "One panel per arm: the target flow's interventional density, the plug-in and the no-correction\n"
    "ablation, with the true density when DATA.h5 is generated data (nf data make causal-*).  A 2-D\n"
    "outcome gets one row of heat maps per arm (target flow, no BC, plug-in, and the truth), over\n"
    "the range of DATA's potential outcomes (or of draws of the target flow) unless --grid says.\n"
    "\n"
    "example:\n"
    "  nf causal plot model.h5 --data test.h5 -o densities.png\n";

static int register_kind(void)
{
    if (nf_model_type_find("causal")) return NF_OK;
    nf_error_clear();
    return nf_model_type_register(&nf_model_causal);
}

static int open_model(const char *path, nf_model **m, nf_model_meta *meta)
{
    NF_TRY(register_kind());
    return app_open_model_kind(path, "causal", m, meta);
}

/* ---- import ------------------------------------------------------------------------------------ */

/* One column of the file (by name or index) into a malloc'd (n) array. */
static int import_column(const char *path, const char *flag, const char *col, double **v, size_t *n, char *name,
                         size_t name_size)
{
    nf_import_select sel = {.columns = col, .columns_flag = flag};
    nf_table t = {0};
    NF_TRY(nf_import_file_select(path, NULL, &sel, &t));
    if (t.d != 1) {
        size_t d = t.d;
        nf_table_free(&t);
        return nf_error(NF_EINVAL, "%s: %s '%s' names %zu columns (expected one)", path, flag, col, d);
    }
    snprintf(name, name_size, "%s", t.names[0]);
    *v = t.x, *n = t.n;
    t.x = NULL;
    nf_table_free(&t);
    return NF_OK;
}

static int cmd_import(int argc, char **argv)
{
    const char *cmd = "causal import", *out = NULL, *treat = NULL, *outcome = NULL, *cf = NULL, *cov = NULL,
               *drop = NULL, *pos[1];
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--treatment", .kind = FLAG_STRING, .dst = &treat},
        {.name = "--outcome", .kind = FLAG_STRING, .dst = &outcome},
        {.name = "--counterfactual", .kind = FLAG_STRING, .dst = &cf},
        {.name = "--covariates", .kind = FLAG_STRING, .dst = &cov},
        {.name = "--drop", .kind = FLAG_STRING, .dst = &drop},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = IMPORT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no input file given (expected: nf causal import FILE.csv -o DATA.h5)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o DATA.h5)");
    if (!treat || !outcome) return cli_usage_error(cmd, "--treatment and --outcome are required");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, pos[0], "data file") != NF_OK) return cli_fail(cmd);
    nf_causal_data d;
    memset(&d, 0, sizeof d);
    double *cfv = NULL;
    char tname[256] = "", yname[256] = "", cname[256] = ""; /* set by import_column; empty when it failed */
    size_t n, n2;
    int rc = import_column(pos[0], "--treatment", treat, &d.a, &n, tname, sizeof tname);
    if (rc == NF_OK) rc = import_column(pos[0], "--outcome", outcome, &d.y, &n2, yname, sizeof yname);
    if (rc == NF_OK && cf) rc = import_column(pos[0], "--counterfactual", cf, &cfv, &n2, cname, sizeof cname);
    /* covariates: as given, or every other numeric column */
    char used[1024];
    snprintf(used, sizeof used, "%s,%s%s%s%s%s", tname, yname, cf ? "," : "", cname, drop ? "," : "", drop ? drop : "");
    nf_import_select sel = {.columns = cov, .columns_flag = "--covariates", .drop = cov ? NULL : used};
    nf_table t = {0};
    if (rc == NF_OK) rc = nf_import_file_select(pos[0], NULL, &sel, &t);
    if (rc == NF_OK && t.d == 0) rc = nf_error(NF_EDATA, "%s: no covariate columns left (expected at least one)", pos[0]);
    if (rc == NF_OK) {
        d.n = n, d.dx = (int)t.d, d.dy = 1;
        d.x = t.x;
        t.x = NULL;
        rc = nf_causal_validate(&d, pos[0]);
    }
    if (rc == NF_OK && cfv) {
        d.y0 = malloc(n * sizeof *d.y0);
        d.y1 = malloc(n * sizeof *d.y1);
        if (!d.y0 || !d.y1) rc = nf_error(NF_ENOMEM, "out of memory");
        for (size_t i = 0; rc == NF_OK && i < n; i++) {
            if (!isfinite(cfv[i]))
                rc = nf_error(NF_EDATA, "%s: counterfactual of unit %zu is %g (expected a finite number)", pos[0], i,
                              cfv[i]);
            d.y0[i] = d.a[i] == 1 ? cfv[i] : d.y[i];
            d.y1[i] = d.a[i] == 1 ? d.y[i] : cfv[i];
        }
    }
    if (rc == NF_OK) rc = nf_causal_save(&d, out);
    size_t treated = 0;
    for (size_t i = 0; rc == NF_OK && i < n; i++) treated += d.a[i] == 1;
    if (rc == NF_OK)
        fprintf(stderr, "nf causal import: %zu units (%zu treated), %d covariates, treatment '%s', outcome '%s'%s%s; wrote %s\n",
                n, treated, d.dx, tname, yname, cf ? ", counterfactual " : "", cname, out);
    free(cfv);
    nf_table_free(&t);
    nf_causal_data_free(&d);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- fit --------------------------------------------------------------------------------------- */

typedef struct causal_describe_ctx {
    const char *cmd;
    const nf_source *train, *val;
    int dx;
    long steps;
} causal_describe_ctx;

static void causal_describe(void *user, const nf_model *m)
{
    const causal_describe_ctx *c = user;
    fprintf(stderr, "nf %s: %zu training and %zu validation units, %d covariates; %zu parameters; stages: "
                    "nuisance, target (%ld steps each)\n",
            c->cmd, c->train->n, c->val ? c->val->n : 0, c->dx, m->P->n, c->steps);
}

static int cmd_fit(int argc, char **argv)
{
    const char *cmd = "causal fit", *out = NULL, *resume = NULL, *pos[1];
    const char *xds = "/x", *ads = "/a", *yds = "/y";
    nf_causal_config mc;
    nf_causal_config_init(&mc);
    nf_train_config tc;
    nf_train_config_init(&tc);
    tc.max_steps = 2000;
    tc.batch = 64;
    tc.clip = 5;
    tc.eval_every = 100;
    tc.checkpoint_every = 200;
    double lr = 5e-3, val_frac = 0.2, noise = 0.05;
    long seed = 1;
    int threads = 0, quiet = 0, force = 0;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--resume", .kind = FLAG_STRING, .dst = &resume},
        {.name = "--covariates", .kind = FLAG_STRING, .dst = &xds},
        {.name = "--treatment", .kind = FLAG_STRING, .dst = &ads},
        {.name = "--outcome", .kind = FLAG_STRING, .dst = &yds},
        {.name = "--repr", .kind = FLAG_INT, .dst = &mc.repr, .lo = 1, .hi = 4096},
        {.name = "--hidden", .kind = FLAG_INT, .dst = &mc.hidden, .lo = 1, .hi = 4096},
        {.name = "--bins", .kind = FLAG_INT, .dst = &mc.bins, .lo = 2, .hi = 64},
        {.name = "--grid", .kind = FLAG_INT, .dst = &mc.grid, .lo = 8, .hi = 100000},
        {.name = "--draws", .kind = FLAG_INT, .dst = &mc.draws, .lo = 1, .hi = 4096},
        {.name = "--noise", .kind = FLAG_DOUBLE, .dst = &noise, .lo = 0, .hi = 1},
        {.name = "--alpha", .kind = FLAG_DOUBLE, .dst = &mc.alpha, .lo = 0, .hi = 1e6},
        {.name = "--prop-clip", .kind = FLAG_DOUBLE, .dst = &mc.clip, .lo = 1e-6, .hi = 0.49},
        {.name = "--ema", .kind = FLAG_DOUBLE, .dst = &mc.ema, .lo = 0, .hi = 0.999999},
        {.name = "--linear-shift", .kind = FLAG_BOOL, .dst = &mc.shift},
        FLAGS_TRAINING(tc, lr, val_frac, seed, threads, quiet),
        FLAG_FORCE(force),
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = FIT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (resume && flags_check_resume(&fc, argc, argv, resume, pos[0] != NULL) != FLAGS_OK) return 2;
    if (!resume && !pos[0]) return cli_usage_error(cmd, "no data file given (expected: nf causal fit DATA.h5 -o MODEL.h5)");
    if (!resume && !out) return cli_usage_error(cmd, "no output file given (expected -o MODEL.h5)");
    /* under mpirun each process computes the units of each batch that it holds */
    if ((urc = app_mpi_start(cmd)) != 0) return urc;
    if (app_mpi_rank() != 0) quiet = 1;
    cli_set_threads(threads);
    mc.noise_r = mc.noise_y = noise;
    nf_model_meta meta = {0};
    char dsets[128], *save = NULL, dataset[sizeof meta.data_dataset] = "";
    app_kind_fit f = {.cmd = cmd, .out = out, .resume = resume, .data = pos[0], .dataset = dataset,
                      .val_frac = val_frac, .meta = &meta, .tc = &tc, .quiet = quiet, .describe = causal_describe};
    int rc = register_kind();
    if (rc == NF_OK) rc = app_kind_fit_open(&f, "causal", "data file", force, lr, seed);
    if (rc == NF_OK && resume) { /* the datasets are stored as "/x,/a,/y" */
        snprintf(dsets, sizeof dsets, "%s", meta.data_dataset);
        xds = strtok_r(dsets, ",", &save);
        ads = xds ? strtok_r(NULL, ",", &save) : NULL;
        yds = ads ? strtok_r(NULL, ",", &save) : NULL;
        if (!yds) rc = nf_error(NF_EFORMAT, "%s: no data datasets recorded (expected /x,/a,/y)", resume);
    }
    if (!resume) snprintf(dataset, sizeof dataset, "%s,%s,%s", xds, ads, yds);
    mc.seed = tc.seed;
    /* under mpirun each process reads its share of the units (by hyperslab) */
    if (rc == NF_OK) rc = nf_causal_source_share(&f.all, f.data, xds, ads, yds, app_mpi_rank(), app_mpi_size());
    if (rc == NF_OK) rc = nf_source_split(f.all, f.val_frac, tc.seed, &f.val, &f.train);
    if (rc == NF_OK && !f.model) rc = nf_model_causal_create_shared(&f.model, &mc, f.train, app_mpi_comm());
    causal_describe_ctx dc = {.cmd = cmd, .train = f.train, .val = f.val, .dx = f.all ? f.all->ctx_dim - 1 : 0,
                              .steps = tc.max_steps};
    f.user = &dc;
    return app_kind_fit_close(&f, app_kind_fit_go(&f, rc));
}

/* ---- density, sample --------------------------------------------------------------------------- */

static int parse_grid(const char *cmd, const char *s, double *lo, double *hi, long *n)
{
    char tail;
    if (!s || sscanf(s, "%lf:%lf:%ld%c", lo, hi, n, &tail) != 3 || !isfinite(*lo) || !isfinite(*hi) || !(*lo < *hi) ||
        *n < 2 || *n > 10000000)
        return cli_usage_error(cmd, "--grid %s: expected LO:HI:N with LO < HI and 2 <= N <= 1e7", s ? s : "(none)");
    return 0;
}

/* A grid per axis, "LO:HI:N" (for every axis) or "LO:HI:N,LO:HI:N" (one per axis of a 2-D
 * outcome); *axes = 1 or 2 specs given. */
typedef struct grid_axes {
    int axes;
    double lo[2], hi[2];
    long n[2];
} grid_axes;

static int parse_grids(const char *cmd, const char *s, grid_axes *g)
{
    const char *comma = s ? strchr(s, ',') : NULL;
    if (!comma) {
        g->axes = 1;
        if (parse_grid(cmd, s, &g->lo[0], &g->hi[0], &g->n[0])) return 2;
        g->lo[1] = g->lo[0], g->hi[1] = g->hi[0], g->n[1] = g->n[0];
        return 0;
    }
    char first[128];
    if ((size_t)(comma - s) >= sizeof first || strchr(comma + 1, ','))
        return cli_usage_error(cmd, "--grid %s: expected LO:HI:N or LO:HI:N,LO:HI:N", s);
    memcpy(first, s, (size_t)(comma - s));
    first[comma - s] = 0;
    g->axes = 2;
    if (parse_grid(cmd, first, &g->lo[0], &g->hi[0], &g->n[0]) || parse_grid(cmd, comma + 1, &g->lo[1], &g->hi[1], &g->n[1]))
        return 2;
    if (g->n[0] * g->n[1] > 10000000)
        return cli_usage_error(cmd, "--grid %s: %ld x %ld points (expected at most 1e7)", s, g->n[0], g->n[1]);
    return 0;
}

/* The grid's points for a dy-column outcome (dy 1 or 2; the first axis fastest) into a new array
 * (caller frees), *count of them; an error naming the model when the grid does not fit it. */
static int grid_points(const grid_axes *g, int dy, const char *model, double **y, size_t *count)
{
    *y = NULL;
    if (dy > 2) return nf_error(NF_EINVAL, "%s: a %d-D outcome has no density grid (expected 1-D or 2-D; draw it with "
                                           "nf causal sample)", model, dy);
    if (dy == 1 && g->axes == 2)
        return nf_error(NF_EINVAL, "%s: a 1-D outcome, but --grid gives two axes (expected LO:HI:N)", model);
    const size_t n0 = (size_t)g->n[0], n1 = dy == 2 ? (size_t)g->n[1] : 1;
    double *p = malloc(n0 * n1 * (size_t)dy * sizeof *p);
    if (!p) return nf_error(NF_ENOMEM, "out of memory for %zu grid points", n0 * n1);
    for (size_t j = 0; j < n1; j++)
        for (size_t i = 0; i < n0; i++) {
            double *q = p + (j * n0 + i) * (size_t)dy;
            q[0] = g->lo[0] + (g->hi[0] - g->lo[0]) * (double)i / (double)(n0 - 1);
            if (dy == 2) q[1] = g->lo[1] + (g->hi[1] - g->lo[1]) * (double)j / (double)(n1 - 1);
        }
    *y = p;
    *count = n0 * n1;
    return NF_OK;
}

/* The integral of exp(lp) over the grid (trapezoid weights per axis). */
static double grid_mass(const grid_axes *g, int dy, const double *lp)
{
    const long n0 = g->n[0], n1 = dy == 2 ? g->n[1] : 1;
    const double h0 = (g->hi[0] - g->lo[0]) / (double)(n0 - 1), h1 = dy == 2 ? (g->hi[1] - g->lo[1]) / (double)(n1 - 1) : 1;
    double mass = 0;
    for (long j = 0; j < n1; j++)
        for (long i = 0; i < n0; i++) {
            double w = (i == 0 || i == n0 - 1 ? 0.5 : 1) * (dy == 2 && (j == 0 || j == n1 - 1) ? 0.5 : 1);
            mass += w * h0 * h1 * exp(lp[j * n0 + i]);
        }
    return mass;
}

static const nf_causal_estimator ESTS[3] = {NF_CAUSAL_TARGET, NF_CAUSAL_NOBC, NF_CAUSAL_PLUGIN};
static const char *const EST_NAMES[3] = {"target", "nobc", "plugin"};

static int cmd_density(int argc, char **argv)
{
    const char *cmd = "causal density", *out = NULL, *grid = NULL, *pos[1];
    int arm = -1;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--arm", .kind = FLAG_INT, .dst = &arm, .lo = 0, .hi = 1},
        {.name = "--grid", .kind = FLAG_STRING, .dst = &grid},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = DENSITY_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no model given (expected: nf causal density MODEL.h5 --arm A --grid LO:HI:N)");
    if (arm < 0) return cli_usage_error(cmd, "no --arm given (expected 0 or 1)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o DENS.h5)");
    grid_axes g;
    if (parse_grids(cmd, grid, &g)) return 2;
    if (app_check_output(out) != NF_OK || app_check_not_input(out, pos[0], "model") != NF_OK) return cli_fail(cmd);
    nf_model *m = NULL;
    double *y = NULL, *lp = NULL;
    size_t n = 0;
    int rc = open_model(pos[0], &m, NULL), dy = rc == NF_OK ? nf_model_causal_config(m)->dy : 1;
    if (rc == NF_OK) rc = grid_points(&g, dy, pos[0], &y, &n);
    if (rc == NF_OK && !(lp = malloc(3 * n * sizeof *lp))) rc = nf_error(NF_ENOMEM, "out of memory");
    for (int e = 0; rc == NF_OK && e < 3; e++) rc = nf_causal_logp(m, ESTS[e], arm, y, n, lp + e * n);
    nf_h5 *f = NULL;
    if (rc == NF_OK) rc = nf_h5_create(&f, out, "nf-logprob", 1);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/y", y, n, dy == 1 ? 0 : (size_t)dy);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/logp", lp, n, 0);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/logp_nobc", lp + n, n, 0);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/logp_plugin", lp + 2 * n, n, 0);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "arm", arm);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "model", pos[0]);
    if (rc == NF_OK) rc = nf_h5_commit(f);
    else nf_h5_abort(f);
    /* the target density's integral over the grid: near 1 when the grid covers Y[arm] */
    double mass = rc == NF_OK ? grid_mass(&g, dy, lp) : 0;
    free(y), free(lp);
    nf_model_free(m);
    if (rc != NF_OK) return cli_fail(cmd);
    if (dy == 1)
        fprintf(stderr, "nf causal density: log p(Y[%d] = y) at %zu points of [%g, %g], mass on the grid %.4f; wrote %s\n",
                arm, n, g.lo[0], g.hi[0], mass, out);
    else
        fprintf(stderr, "nf causal density: log p(Y[%d] = y) at %ld x %ld points of [%g, %g] x [%g, %g], mass on the grid "
                        "%.4f; wrote %s\n", arm, g.n[0], g.n[1], g.lo[0], g.hi[0], g.lo[1], g.hi[1], mass, out);
    return 0;
}

static int cmd_sample(int argc, char **argv)
{
    const char *cmd = "causal sample", *out = NULL, *pos[1];
    int arm = -1;
    long n = 0, seed = 1;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--arm", .kind = FLAG_INT, .dst = &arm, .lo = 0, .hi = 1},
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 100000000},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = SAMPLE_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no model given (expected: nf causal sample MODEL.h5 --arm A -n N -o S.h5)");
    if (arm < 0) return cli_usage_error(cmd, "no --arm given (expected 0 or 1)");
    if (n < 1) return cli_usage_error(cmd, "no -n given (expected the number of draws)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o S.h5)");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, pos[0], "model") != NF_OK) return cli_fail(cmd);
    nf_model *m = NULL;
    double *y = NULL;
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, 0x5a3);
    int rc = rng ? open_model(pos[0], &m, NULL) : nf_error(NF_ENOMEM, "out of memory");
    const int dy = rc == NF_OK ? nf_model_causal_config(m)->dy : 1;
    if (rc == NF_OK && !(y = malloc((size_t)n * dy * sizeof *y))) rc = nf_error(NF_ENOMEM, "out of memory for %ld draws", n);
    if (rc == NF_OK) rc = nf_causal_sample(m, NF_CAUSAL_TARGET, arm, (size_t)n, rng, y);
    nf_h5 *f = NULL;
    if (rc == NF_OK) rc = nf_h5_create(&f, out, "nf-data", 1);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/x", y, (size_t)n, (size_t)dy);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "arm", arm);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "model", pos[0]);
    if (rc == NF_OK) rc = nf_h5_commit(f);
    else nf_h5_abort(f);
    free(y);
    nf_rng_free(rng);
    nf_model_free(m);
    if (rc != NF_OK) return cli_fail(cmd);
    fprintf(stderr, "nf causal sample: %ld draws of Y[%d]; wrote %s\n", n, arm, out);
    return 0;
}

/* ---- eval -------------------------------------------------------------------------------------- */

enum { MAX_DY = 16 }; /* nf_causal_config_check's widest outcome */

typedef struct arm_report {
    size_t units;
    int dy;
    const char *outcomes;        /* "potential" or "observed" */
    double logp[3], logp_true;   /* mean log-densities: target, nobc, plugin; truth (NaN if unknown) */
    double mean[3][MAX_DY], mean_ref[MAX_DY]; /* means of Y[a]; the reference (true or the units') */
    double mean_error[3];        /* mean - reference (1-D), or their Euclidean distance */
    const char *mean_ref_kind;   /* "true", "units" */
} arm_report;

static int eval_arm(nf_model *m, const nf_causal_data *d, int a, arm_report *r)
{
    const int dy = d->dy;
    const double *ya = a ? d->y1 : d->y0, *lt = a ? d->logp1 : d->logp0;
    double *y = malloc(d->n * dy * sizeof *y), *lp = malloc(d->n * sizeof *lp), *t = malloc(d->n * sizeof *t);
    if (!y || !lp || !t) {
        free(y), free(lp), free(t);
        return nf_error(NF_ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < d->n; i++)
        if (ya || d->a[i] == a) {
            memcpy(y + k * dy, (ya ? ya : d->y) + i * dy, (size_t)dy * sizeof *y);
            t[k++] = ya && lt ? lt[i] : NAN;
        }
    r->units = k;
    r->dy = dy;
    r->outcomes = ya ? "potential" : "observed";
    int rc = NF_OK;
    for (int e = 0; rc == NF_OK && e < 3; e++) {
        rc = nf_causal_logp(m, ESTS[e], a, y, k, lp);
        double s = 0;
        for (size_t i = 0; i < k; i++) s += lp[i];
        r->logp[e] = s / (double)k;
        if (rc == NF_OK) rc = nf_causal_mean(m, ESTS[e], a, r->mean[e]);
    }
    double s = 0;
    for (size_t i = 0; i < k; i++) s += t[i];
    r->logp_true = s / (double)k;
    r->mean_ref_kind = "units";
    for (int j = 0; j < dy; j++) {
        double sy = 0;
        for (size_t i = 0; i < k; i++) sy += y[i * dy + j];
        r->mean_ref[j] = sy / (double)k;
    }
    if (dy == 1 && d->family[0] && nf_causal_truth_mean(d->family, d->shift, a, r->mean_ref) == NF_OK)
        r->mean_ref_kind = "true";
    nf_error_clear();
    for (int e = 0; e < 3; e++) {
        double d2 = 0;
        for (int j = 0; j < dy; j++) d2 += (r->mean[e][j] - r->mean_ref[j]) * (r->mean[e][j] - r->mean_ref[j]);
        r->mean_error[e] = dy == 1 ? r->mean[e][0] - r->mean_ref[0] : sqrt(d2);
    }
    free(y), free(lp), free(t);
    return rc;
}

static void json_num(const char *key, double v, int first)
{
    if (isfinite(v)) printf("%s\"%s\": %.9g", first ? "" : ", ", key, v);
    else printf("%s\"%s\": null", first ? "" : ", ", key);
}

/* a number (1-D) or an array of dy numbers */
static void json_vec(const char *key, const double *v, int dy, int first)
{
    if (dy == 1) {
        json_num(key, v[0], first);
        return;
    }
    printf("%s\"%s\": [", first ? "" : ", ", key);
    for (int j = 0; j < dy; j++) printf(isfinite(v[j]) ? "%s%.9g" : "%snull", j ? ", " : "", v[j]);
    printf("]");
}

static void print_vec(const double *v, int dy)
{
    if (dy == 1) {
        printf("%.4f", v[0]);
        return;
    }
    for (int j = 0; j < dy; j++) printf("%s%.4f", j ? "," : "(", v[j]);
    printf(")");
}

static int cmd_eval(int argc, char **argv)
{
    const char *cmd = "causal eval", *pos[2];
    int json = 0;
    const flag_spec flags[] = {
        {.name = "--json", .kind = FLAG_BOOL, .dst = &json},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = EVAL_HELP, .flags = flags, .max_pos = 2};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0] || !pos[1]) return cli_usage_error(cmd, "expected MODEL.h5 and DATA.h5");
    nf_model *m = NULL;
    nf_causal_data d = {0};
    arm_report r[2];
    int rc = open_model(pos[0], &m, NULL);
    if (rc == NF_OK) rc = nf_causal_load(&d, pos[1], NULL, NULL, NULL);
    if (rc == NF_OK && d.dx != nf_model_causal_config(m)->dx)
        rc = nf_error(NF_EDATA, "%s: %d covariates, the model %d", pos[1], d.dx, nf_model_causal_config(m)->dx);
    if (rc == NF_OK && d.dy != nf_model_causal_config(m)->dy)
        rc = nf_error(NF_EDATA, "%s: %d outcome columns, the model %d", pos[1], d.dy, nf_model_causal_config(m)->dy);
    for (int a = 0; rc == NF_OK && a < 2; a++) rc = eval_arm(m, &d, a, &r[a]);
    if (rc == NF_OK && json) {
        printf("{\"data\": \"%s\", \"units\": %zu, \"arms\": [", pos[1], d.n);
        for (int a = 0; a < 2; a++) {
            printf("%s{\"arm\": %d, \"units\": %zu, \"outcomes\": \"%s\", \"logp\": {", a ? ", " : "", a, r[a].units,
                   r[a].outcomes);
            for (int e = 0; e < 3; e++) json_num(EST_NAMES[e], r[a].logp[e], e == 0);
            json_num("truth", r[a].logp_true, 0);
            printf("}, \"gap\": {");
            for (int e = 0; e < 3; e++) json_num(EST_NAMES[e], r[a].logp_true - r[a].logp[e], e == 0);
            printf("}, \"mean\": {");
            for (int e = 0; e < 3; e++) json_vec(EST_NAMES[e], r[a].mean[e], r[a].dy, e == 0);
            json_vec("reference", r[a].mean_ref, r[a].dy, 0);
            printf(", \"reference_kind\": \"%s\"}, \"mean_error\": {", r[a].mean_ref_kind);
            for (int e = 0; e < 3; e++) json_num(EST_NAMES[e], r[a].mean_error[e], e == 0);
            printf("}}");
        }
        printf("]}\n");
    } else if (rc == NF_OK) {
        printf("data      %s (%zu units)\n", pos[1], d.n);
        for (int a = 0; a < 2; a++) {
            printf("arm %d     %zu %s outcomes\n", a, r[a].units, r[a].outcomes);
            printf("  mean log p(Y[%d])   target %.4f   no-BC %.4f   plug-in %.4f", a, r[a].logp[0], r[a].logp[1],
                   r[a].logp[2]);
            if (isfinite(r[a].logp_true))
                printf("   truth %.4f (gaps %.4f %.4f %.4f)", r[a].logp_true, r[a].logp_true - r[a].logp[0],
                       r[a].logp_true - r[a].logp[1], r[a].logp_true - r[a].logp[2]);
            printf("\n  mean of Y[%d]       target ", a);
            print_vec(r[a].mean[0], r[a].dy);
            printf("   no-BC ");
            print_vec(r[a].mean[1], r[a].dy);
            printf("   plug-in ");
            print_vec(r[a].mean[2], r[a].dy);
            printf("   %s ", r[a].mean_ref_kind);
            print_vec(r[a].mean_ref, r[a].dy);
            printf("\n");
        }
    }
    nf_model_free(m);
    nf_causal_data_free(&d);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- plot -------------------------------------------------------------------------------------- */

/* The plotted range of a 2-D Y[a]: DATA's potential outcomes of the arm (or its units' observed
 * ones), else 4,000 draws of the target flow; their bounding box widened by 10% on each side. */
static int range_2d(nf_model *m, const nf_causal_data *d, int a, double lo[2], double hi[2])
{
    enum { DRAWS = 4000 };
    const double *ya = d->n ? (a ? d->y1 : d->y0) : NULL;
    double *draws = NULL;
    size_t n = 0;
    int rc = NF_OK;
    if (!d->n) {
        nf_rng *rng = nf_rng_alloc(0x9107, (uint64_t)a);
        draws = malloc(2 * DRAWS * sizeof *draws);
        rc = rng && draws ? nf_causal_sample(m, NF_CAUSAL_TARGET, a, DRAWS, rng, draws) : nf_error(NF_ENOMEM, "out of memory");
        nf_rng_free(rng);
        ya = draws, n = DRAWS;
    } else if (ya) n = d->n;
    for (int j = 0; j < 2; j++) lo[j] = INFINITY, hi[j] = -INFINITY;
    for (size_t i = 0; rc == NF_OK && i < (ya ? n : d->n); i++) {
        const double *y = ya ? ya + 2 * i : d->y + 2 * i;
        if (!ya && d->a[i] != a) continue;
        for (int j = 0; j < 2; j++) lo[j] = fmin(lo[j], y[j]), hi[j] = fmax(hi[j], y[j]);
    }
    for (int j = 0; rc == NF_OK && j < 2; j++) {
        double w = hi[j] > lo[j] ? hi[j] - lo[j] : 1;
        lo[j] -= 0.1 * w, hi[j] += 0.1 * w;
    }
    free(draws);
    return rc;
}

/* A 2-D outcome: per arm a row of heat maps of the densities on one colour scale. */
static int plot_2d(nf_model *m, const nf_causal_data *d, const grid_axes *given, const char *model, const char *out)
{
    enum { SIDE = 80 };
    const int truth = d->n && d->family[0], cols = truth ? 4 : 3;
    const char *names[4] = {"target flow", "no BC", "plug-in", "truth"};
    nf_figure *fig = nf_figure_alloc(330 * cols, 640, 2, cols);
    int rc = fig ? NF_OK : nf_error(NF_ENOMEM, "out of memory for the figure");
    double *y = NULL, *p = NULL;
    for (int a = 0; rc == NF_OK && a < 2; a++) {
        grid_axes g = {.axes = 2, .n = {SIDE, SIDE}};
        if (given) g = *given;
        else rc = range_2d(m, d, a, g.lo, g.hi);
        size_t n = 0;
        free(y), free(p), y = NULL, p = NULL;
        if (rc == NF_OK) rc = grid_points(&g, 2, model, &y, &n);
        if (rc == NF_OK && !(p = malloc(4 * n * sizeof *p))) rc = nf_error(NF_ENOMEM, "out of memory");
        for (int e = 0; rc == NF_OK && e < 3; e++) rc = nf_causal_logp(m, ESTS[e], a, y, n, p + e * n);
        if (rc == NF_OK && truth) rc = nf_causal_truth_logp(d->family, d->shift, a, y, n, p + 3 * n);
        double top = 0;
        for (size_t k = 0; rc == NF_OK && k < (size_t)cols * n; k++) p[k] = exp(p[k]), top = fmax(top, p[k]);
        for (int e = 0; rc == NF_OK && e < cols; e++) {
            nf_panel *pan = nf_figure_panel(fig, a, e);
            char title[64];
            snprintf(title, sizeof title, "p(Y[%d] = y): %s", a, names[e]);
            nf_panel_set_title(pan, title);
            nf_panel_set_xlabel(pan, "y1");
            nf_panel_set_ylabel(pan, "y2");
            const nf_heatmap_opts o = {.vmin = 0, .vmax = top > 0 ? top : 1, .bilinear = 1};
            rc = nf_panel_set_limits(pan, g.lo[0], g.hi[0], g.lo[1], g.hi[1]);
            if (rc == NF_OK) rc = nf_panel_heatmap(pan, p + e * n, (int)g.n[0], (int)g.n[1], &o);
            if (rc == NF_OK) rc = nf_panel_draw_axes(pan);
        }
    }
    if (rc == NF_OK) rc = nf_figure_save_png(fig, out);
    nf_figure_free(fig);
    free(y), free(p);
    return rc;
}

static int cmd_plot(int argc, char **argv)
{
    const char *cmd = "causal plot", *out = NULL, *data = NULL, *grid = NULL, *pos[1];
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--data", .kind = FLAG_STRING, .dst = &data},
        {.name = "--grid", .kind = FLAG_STRING, .dst = &grid},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = PLOT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no model given (expected: nf causal plot MODEL.h5 -o PLOT.png)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o PLOT.png)");
    grid_axes g = {0};
    if (grid && parse_grids(cmd, grid, &g)) return 2;
    double lo = grid ? g.lo[0] : NAN, hi = grid ? g.hi[0] : NAN;
    long n = grid ? g.n[0] : 400;
    if (app_check_output(out) != NF_OK || app_check_not_input(out, pos[0], "model") != NF_OK ||
        app_check_not_input(out, data, "--data file") != NF_OK)
        return cli_fail(cmd);
    nf_model *m = NULL;
    nf_causal_data d = {0};
    int rc = open_model(pos[0], &m, NULL);
    const int dy = rc == NF_OK ? nf_model_causal_config(m)->dy : 1;
    if (rc == NF_OK && data) rc = nf_causal_load(&d, data, NULL, NULL, NULL);
    if (rc == NF_OK && data && d.dy != dy)
        rc = nf_error(NF_EDATA, "%s: %d outcome columns, the model %d", data, d.dy, dy);
    if (rc == NF_OK && dy == 1 && grid && g.axes == 2)
        rc = nf_error(NF_EINVAL, "%s: a 1-D outcome, but --grid gives two axes (expected LO:HI:N)", pos[0]);
    if (rc == NF_OK && dy > 2)
        rc = nf_error(NF_EINVAL, "%s: a %d-D outcome (plots are of 1-D and 2-D outcomes)", pos[0], dy);
    if (rc == NF_OK && dy == 2) {
        rc = plot_2d(m, &d, grid ? &g : NULL, pos[0], out);
        nf_model_free(m);
        nf_causal_data_free(&d);
        if (rc != NF_OK) return cli_fail(cmd);
        fprintf(stderr, "nf causal plot: wrote %s\n", out);
        return 0;
    }
    double *y = malloc((size_t)n * sizeof *y), *p = malloc(4 * (size_t)n * sizeof *p);
    if (rc == NF_OK && (!y || !p)) rc = nf_error(NF_ENOMEM, "out of memory");
    nf_figure *fig = rc == NF_OK ? nf_figure_alloc(1200, 480, 1, 2) : NULL;
    if (rc == NF_OK && !fig) rc = nf_error(NF_ENOMEM, "out of memory for the figure");
    for (int a = 0; rc == NF_OK && a < 2; a++) {
        double l = lo, h = hi;
        if (!isfinite(l)) {
            /* the range of the estimate: its 0.1% and 99.9% points from the grid */
            double ma;
            rc = nf_causal_mean(m, NF_CAUSAL_TARGET, a, &ma);
            l = ma - 12, h = ma + 12;
            if (d.n) {
                const double *ya = a ? d.y1 : d.y0;
                if (!ya) ya = d.y;
                l = INFINITY, h = -INFINITY;
                for (size_t i = 0; i < d.n; i++) l = fmin(l, ya[i]), h = fmax(h, ya[i]);
                double w = h - l;
                l -= 0.1 * w, h += 0.1 * w;
            }
        }
        for (long k = 0; k < n; k++) y[k] = l + (h - l) * (double)k / (double)(n - 1);
        for (int e = 0; rc == NF_OK && e < 3; e++) rc = nf_causal_logp(m, ESTS[e], a, y, (size_t)n, p + e * n);
        int truth = rc == NF_OK && d.family[0] &&
                    nf_causal_truth_logp(d.family, d.shift, a, y, (size_t)n, p + 3 * n) == NF_OK;
        nf_error_clear();
        double top = 0;
        for (long k = 0; rc == NF_OK && k < (truth ? 4 : 3) * n; k++) p[k] = exp(p[k]), top = fmax(top, p[k]);
        nf_panel *pan = nf_figure_panel(fig, 0, a);
        char title[64];
        snprintf(title, sizeof title, "p(Y[%d] = y)", a);
        nf_panel_set_title(pan, title);
        nf_panel_set_xlabel(pan, "y");
        if (rc == NF_OK) rc = nf_panel_set_limits(pan, l, h, 0, 1.1 * top);
        const char *names[4] = {"target flow", "no BC", "plug-in", "truth"};
        for (int e = 0; rc == NF_OK && e < (truth ? 4 : 3); e++)
            rc = nf_panel_line(pan, y, p + e * n, (size_t)n, 1, nf_plot_color(e == 3 ? 7 : e), e == 0 ? 2.4 : 1.6,
                               names[e]);
        if (rc == NF_OK) rc = nf_panel_draw_axes(pan);
        if (rc == NF_OK) rc = nf_panel_legend(pan, NF_LEGEND_UPPER_RIGHT);
    }
    if (rc == NF_OK) rc = nf_figure_save_png(fig, out);
    nf_figure_free(fig);
    free(y), free(p);
    nf_model_free(m);
    nf_causal_data_free(&d);
    if (rc != NF_OK) return cli_fail(cmd);
    fprintf(stderr, "nf causal plot: wrote %s\n", out);
    return 0;
}

int nf_cmd_causal(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(CAUSAL_HELP, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const struct {
        const char *name;
        int (*run)(int, char **);
    } sub[] = {{"import", cmd_import}, {"fit", cmd_fit},   {"density", cmd_density},
               {"sample", cmd_sample}, {"eval", cmd_eval}, {"plot", cmd_plot}};
    if (strcmp(argv[1], "fit") && app_mpi_refuse("causal")) return 2; /* only fit runs as several processes */
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
        if (!strcmp(argv[1], sub[i].name)) return sub[i].run(argc - 1, argv + 1);
    return cli_usage_error("causal", "unknown subcommand '%s' (expected import, fit, density, sample, eval or plot)",
                           argv[1]);
}
