/* apps/cmd_data.c - nf data: make built-in data sets, import CSV/NPY, split into train/val/test
 * (image data sets, PNG and image NPY imports and nf data show: apps/data_images.c).
 *
 * Every file written is an "nf-data" (version 1) HDF5 file written atomically (nf_h5_create writes a
 * temporary and commit renames it into place): /x (n, d) float64, /logp_true (n) where the density
 * is known, /columns (d names) after an import, /context carried by split; root attributes say where
 * the data came from.  All arguments are checked before anything is computed or created, so a bad
 * input leaves no file behind and changes none.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "datasets/dependent_split.h"
#include "core/h5.h"
#include "core/import.h"
#include "datasets/causal.h"
#include "datasets/dataset.h"
#include "datasets/images.h"
#include "datasets/videos.h"

#define DATA_FORMAT "nf-data"
#define DATA_VERSION 1
#define DEFAULT_N 10000
#define DEFAULT_SEED 1
#define DEFAULT_ENTROPY_N 20000

/* nf data make's help, with the defaults filled in, into buf. */
static void make_help_text(char *buf, size_t size)
{
    snprintf(buf, size,
             "usage: nf data make NAME [-n N] [--seed S] [--dim D] [--components K] [--model-seed S]\n"
             "                         [--flow PRESET] [--entropy-n M] [--threads N] -o FILE.h5\n"
             "       nf data make --list\n"
             "       nf data make tpp-NAME ... -o SEQ.h5   (event sequences: nf data make tpp-hawkes --help)\n"
             "       nf data make shapes|digits ... -o IMAGES.h5   (images: nf data make shapes --help)\n"
             "       nf data make video-sprites|video-balls ... -o VIDEOS.h5\n"
             "                                     (videos: nf data make video-balls --help)\n\n"
             "Draw N points from a built-in data set and write /x (N x d, float64), /logp_true (N, the\n"
             "true log-density) and attributes generator, seed, n, dim, density, entropy, entropy_stderr.\n\n"
             "  -n N             number of points (default %d)\n"
             "  --seed S         sampling seed (default %d)\n"
             "  --dim D          gmm, teacher: dimension (default %d)\n"
             "  --components K   gmm: mixture components (default %d)\n"
             "  --model-seed S   gmm, teacher: seed of the random distribution itself, kept fixed when\n"
             "                   drawing train and test files with different --seed (default %d)\n"
             "  --flow PRESET    teacher: flow preset or spec (default %s)\n"
             "  --entropy-n M    points for the entropy estimate: the file's own when N >= M, else an\n"
             "                   independent sample of M (default %d)\n"
             "  --threads N      threads (default: all cores)\n"
             "  -o FILE.h5       output file (required)\n"
             "  --list           list the data sets, one per line (tpp-* for event sequences)\n\n"
             "examples:\n"
             "  nf data make checkerboard -n 50000 --seed 3 -o train.h5\n"
             "  nf data make gmm --dim 8 --components 6 -n 20000 -o gmm8.h5\n",
             DEFAULT_N, DEFAULT_SEED, NF_DATASET_DEFAULT_DIM, NF_DATASET_DEFAULT_COMPONENTS,
             NF_DATASET_DEFAULT_MODEL_SEED, NF_DATASET_DEFAULT_FLOW, DEFAULT_ENTROPY_N);
}

static const char *const IMPORT_HELP =
    "usage: nf data import FILE.csv|FILE.tsv|FILE.txt|FILE.npy [--columns LIST | --drop LIST]\n"
    "                      [--context LIST] [--delimiter C] [--header auto|yes|no] -o FILE.h5\n\n"
    "Convert a CSV table or a NumPy .npy array (1-D or 2-D) into an nf data file: /x (n x d,\n"
    "float64) and /columns (the CSV header, or x0..x{d-1}).  Empty files, ragged rows and\n"
    "non-finite values are refused, naming the row and column.  Text columns (a first data row\n"
    "that is not a number) are left out unless chosen, with a note naming them.\n\n"
    "  --columns LIST   the data columns, in this order: names or 0-based indices, comma-separated,\n"
    "                   A-B for a range of indices (default: every numeric column not otherwise used)\n"
    "  --drop LIST      leave these columns out (instead of --columns)\n"
    "  --context LIST   categorical columns turned into a one-hot /context (a column kind with\n"
    "                   values long and short gives context values kind=long and kind=short,\n"
    "                   named in /context_names), so nf fit learns p(x | kind) and\n"
    "                   nf sample --context-value kind=long draws one category\n"
    "  --delimiter C    CSV field separator: a character, 'tab' or 'space' (default: detected)\n"
    "  --header H       CSV header line: auto, yes or no (default auto)\n"
    "  -o FILE.h5       output file (required)\n"
    "  --sequences      event sequences instead (CSV in long form: id, time[, mark]; NPY: one row\n"
    "                   per sequence) into an nf-sequences file: nf data import --sequences --help\n"
    "  images           a folder of PNG files, or an NPY of 3 or 4 dimensions (n, H, W[, C]), becomes\n"
    "                   an image data file: nf data import DIR --help\n"
    "  videos           an NPY of 5 dimensions (n, T, H, W, C), or 4 (n, T, H, W) with --video,\n"
    "                   becomes a video data file: nf data import --video --help\n\n"
    "examples:\n"
    "  nf data import measurements.csv -o data.h5\n"
    "  nf data import faithful.csv --columns eruptions,waiting --context kind -o faithful.h5\n";

static const char *const SPLIT_HELP =
    "usage: nf data split FILE.h5 [--val F] [--test F] [--seed S] [-o PREFIX]\n\n"
    "Shuffle the rows of /x (with /logp_true, /context and image labels when present) with a seeded\n"
    "permutation and write PREFIX.train.h5, PREFIX.val.h5 and PREFIX.test.h5 (a part of no\n"
    "rows, such as --val 0, is not written).  An nf-sequences file is split by whole sequences,\n"
    "with their marks and true log-likelihoods; a causal file (nf-causal) by units within each arm,\n"
    "with every array it holds (potential outcomes, true densities, propensities).  Dependent rows\n"
    "(a file with /group ids or a kinship matrix /K, as nf data make dependent-* writes) are split\n"
    "by whole groups of related rows (groups, families of K, joined where they overlap), drawn in a\n"
    "seeded order, each to validation or test while it brings that part closer to its fraction,\n"
    "else to training; each part keeps its rows' ids and K restricted to them, so nf fit PART\n"
    "--dependence reads it as the whole file.\n\n"
    "  --val F          fraction for validation, round(n F) rows (default 0.1)\n"
    "  --test F         fraction for test, round(n F) rows (default 0.1)\n"
    "  --seed S         shuffle seed (default 1)\n"
    "  -o PREFIX        output prefix (default: FILE.h5 without .h5)\n\n"
    "example:\n"
    "  nf data split moons.h5 --val 0.1 --test 0.2 --seed 7\n";

static void data_help(FILE *out)
{
    char make_help[4096];
    make_help_text(make_help, sizeof make_help);
    fprintf(out, "usage: nf data make|import|split|show ...   (nf data SUBCOMMAND --help)\n\n"
                 "  make     draw a built-in data set with its true log-density\n"
                 "  import   convert CSV or NPY (or PNG images) into an nf data file\n"
                 "  split    split a data file into train, validation and test files\n"
                 "  show     draw the images of an image data file as a PNG grid (nf data show --help), or\n"
                 "           the videos of a video file as a PNG filmstrip or an animated GIF\n\n");
    fputs(make_help, out);
    fputc('\n', out);
    fputs(IMPORT_HELP, out);
    fputc('\n', out);
    fputs(SPLIT_HELP, out);
}

static int list_sets(void)
{
    for (int i = 0; nf_dataset_types[i]; i++) {
        const nf_dataset_type *t = nf_dataset_types[i];
        char dim[8];
        snprintf(dim, sizeof dim, "%s", t->dim ? "2" : "D");
        const char *kind = t->density == NF_DENSITY_EXACT ? "exact" : t->density == NF_DENSITY_NUMERICAL ? "numerical" : "none";
        printf("%-13s dim %s  density %-9s  %s\n", t->name, dim, kind, t->summary);
    }
    app_data_list_images();
    app_data_list_videos();
    app_data_list_causal();
    app_data_list_dependent();
    app_data_list_tpp();
    return 0;
}

/* ---- make ------------------------------------------------------------------------------------- */

static int write_make(const char *out, const nf_dataset *ds, long seed, size_t n, const double *x,
                      const double *lp, double H, double se, size_t ent_n)
{
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, out, DATA_FORMAT, DATA_VERSION));
    const nf_dataset_type *t = ds->type;
    int rc = nf_h5_write_double(f, "/x", x, n, (size_t)ds->dim);
    if (rc == NF_OK && lp) rc = nf_h5_write_double(f, "/logp_true", lp, n, 0);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", t->name);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "seed", seed);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "n", (int64_t)n);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "dim", ds->dim);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "density", lp ? t->density_method : "unknown");
    if (rc == NF_OK && lp) rc = nf_h5_attr_set_double(f, "/", "entropy", H);
    if (rc == NF_OK && lp) rc = nf_h5_attr_set_double(f, "/", "entropy_stderr", se);
    if (rc == NF_OK && lp) rc = nf_h5_attr_set_int64(f, "/", "entropy_n", (int64_t)ent_n);
    if (rc == NF_OK && !t->dim) rc = nf_h5_attr_set_int64(f, "/", "model_seed", (int64_t)ds->opts.model_seed);
    if (rc == NF_OK && t == &nf_dataset_gmm) rc = nf_h5_attr_set_int64(f, "/", "components", ds->opts.components);
    if (rc == NF_OK && t == &nf_dataset_teacher) rc = nf_h5_attr_set_string(f, "/", "flow", ds->opts.flow);
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

/* Data families with generators and files of their own (event sequences, causal data), one
 * function each (apps/commands.h): `nf data make FAMILY-NAME ...` hands the whole command line to it
 * when the name comes first. */
static const struct {
    const char *prefix;
    int (*make)(int argc, char **argv);
} make_families[] = {
    {"tpp-", app_data_make_tpp},
    {"causal-", app_data_make_causal},
    {"dependent-", app_data_make_dependent},
    {NULL, NULL},
};

static int cmd_make(int argc, char **argv)
{
    for (int i = 0; argc > 1 && make_families[i].prefix; i++)
        if (!strncmp(argv[1], make_families[i].prefix, strlen(make_families[i].prefix)))
            return make_families[i].make(argc, argv);
    for (int i = 1; i < argc; i++) /* the image sets, named anywhere (not as the value of a flag) */
        if ((!strcmp(argv[i], "shapes") || !strcmp(argv[i], "digits")) && strcmp(argv[i - 1], "-o") &&
            strcmp(argv[i - 1], "--output") && strcmp(argv[i - 1], "--flow") && strcmp(argv[i - 1], "--from"))
            return app_data_make_images(argc, argv);
    for (int i = 1; i < argc; i++) /* the video sets, named anywhere (not as the value of a flag) */
        if (app_is_video_name(argv[i]) && strcmp(argv[i - 1], "-o") && strcmp(argv[i - 1], "--output") &&
            strcmp(argv[i - 1], "--from"))
            return app_data_make_videos(argc, argv);
    const char *cmd = "data make", *name = NULL, *out = NULL;
    long n = DEFAULT_N, seed = DEFAULT_SEED, model_seed = 0, ent_n = DEFAULT_ENTROPY_N;
    int list = 0, set_dim = 0, set_k = 0, set_ms = 0, set_flow = 0, threads = 0;
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    const flag_spec flags[] = {
        {.name = "--list", .kind = FLAG_BOOL, .dst = &list},
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 100000000},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "--model-seed", .kind = FLAG_LONG, .dst = &model_seed, .lo = 0, .hi = (double)LONG_MAX, .seen = &set_ms},
        {.name = "--dim", .kind = FLAG_INT, .dst = &o.dim, .lo = 1, .hi = 1024, .seen = &set_dim},
        {.name = "--components", .kind = FLAG_INT, .dst = &o.components, .lo = 1, .hi = 1000, .seen = &set_k},
        {.name = "--entropy-n", .kind = FLAG_LONG, .dst = &ent_n, .lo = 2, .hi = 100000000},
        {.name = "--flow", .kind = FLAG_STRING, .dst = &o.flow, .seen = &set_flow},
        FLAG_THREADS(threads),
        {.name = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    char help[4096];
    make_help_text(help, sizeof help);
    const flags_cmd c = {.cmd = cmd, .help = help, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the data set is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &name, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (list) return list_sets();
    if (set_ms) o.model_seed = (uint64_t)model_seed;
    if (!name) return cli_usage_error(cmd, "no data set named (expected NAME, see 'nf data make --list')");
    const nf_dataset_type *t = nf_dataset_type_find(name);
    if (!t) return cli_usage_error(cmd, "%s", nf_strerror_last());
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (t->dim && (set_dim || set_k || set_ms || set_flow))
        return cli_usage_error(cmd, "%s is %d-dimensional and has no options (--dim, --components, --model-seed and "
                                    "--flow apply to gmm and teacher)", t->name, t->dim);
    if (t == &nf_dataset_gmm && set_flow) return cli_usage_error(cmd, "--flow applies to teacher, not gmm");
    if (t == &nf_dataset_teacher && set_k) return cli_usage_error(cmd, "--components applies to gmm, not teacher");
    if (app_check_output(out) != NF_OK) return cli_fail(cmd);
    cli_set_threads(threads);

    nf_dataset *ds = NULL;
    nf_rng *rng = NULL;
    double *x = NULL, *lp = NULL, H = 0, se = 0;
    int known = t->density != NF_DENSITY_NONE;
    int rc = nf_dataset_alloc(&ds, name, &o);
    if (rc == NF_OK) {
        rng = nf_rng_alloc((uint64_t)seed, 0);
        x = malloc((size_t)n * (size_t)ds->dim * sizeof *x);
        lp = known ? malloc((size_t)n * sizeof *lp) : NULL;
        if (!rng || !x || (known && !lp)) rc = nf_error(NF_ENOMEM, "out of memory for %ld points", n);
    }
    if (rc == NF_OK) rc = nf_dataset_sample(ds, rng, (size_t)n, x, lp);
    if (rc == NF_OK && known) {
        if (n >= ent_n) {
            rc = nf_entropy_from_logp(lp, (size_t)n, &H, &se);
            ent_n = n;
        } else { /* an independent stream, so the data points do not depend on --entropy-n */
            nf_rng *r2 = nf_rng_alloc((uint64_t)seed, 1);
            rc = r2 ? nf_dataset_entropy(ds, r2, (size_t)ent_n, &H, &se) : NF_ENOMEM;
            nf_rng_free(r2);
        }
    }
    if (rc == NF_OK) rc = write_make(out, ds, seed, (size_t)n, x, lp, H, se, (size_t)ent_n);
    if (rc == NF_OK) {
        printf("%s: %s, %ld x %d", out, t->name, n, ds->dim);
        if (known) printf(", entropy %.4f +- %.4f nats", H, se);
        printf("\n");
    }
    free(x);
    free(lp);
    nf_rng_free(rng);
    nf_dataset_free(ds);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- import ----------------------------------------------------------------------------------- */

static const char *const HEADER_CHOICES[] = {"auto", "yes", "no", NULL};
static const int HEADER_VALUES[] = {-1, 1, 0}; /* nf_csv_options.header */

static int cmd_import(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) /* event sequences: the importer of nf tpp import */
        if (!strcmp(argv[i], "--sequences")) return app_tpp_import("data import", argc, argv);
    for (int i = 1; i < argc; i++) /* videos: --video, or an NPY of 5 dimensions */
        if (!strcmp(argv[i], "--video") || (argv[i][0] != '-' && strcmp(argv[i - 1], "-o") &&
                                            strcmp(argv[i - 1], "--labels") && app_is_video_input(argv[i])))
            return app_data_import_videos(argc, argv);
    for (int i = 1; i < argc; i++) /* images: a folder of PNG files, an NPY of 3 or 4 dimensions */
        if (!strncmp(argv[i], "--labels", 8) || !strncmp(argv[i], "--levels", 8) || !strcmp(argv[i], "--rgb") ||
            (argv[i][0] != '-' && strcmp(argv[i - 1], "-o") && strcmp(argv[i - 1], "--delimiter") &&
             app_is_image_input(argv[i])))
            return app_data_import_images(argc, argv);
    const char *cmd = "data import", *in = NULL, *out = NULL, *delimiter = NULL;
    int header = 0, set_header = 0;
    nf_import_select sel = {0};
    const flag_spec flags[] = {
        {.name = "--columns", .kind = FLAG_STRING, .dst = &sel.columns},
        {.name = "--drop", .kind = FLAG_STRING, .dst = &sel.drop},
        {.name = "--context", .kind = FLAG_STRING, .dst = &sel.context},
        {.name = "--delimiter", .kind = FLAG_STRING, .dst = &delimiter},
        {.name = "--header", .kind = FLAG_CHOICE, .dst = &header, .choices = HEADER_CHOICES, .seen = &set_header},
        {.name = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = IMPORT_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    nf_csv_options co = {0, HEADER_VALUES[header]};
    if (delimiter) {
        if (!strcmp(delimiter, "tab")) co.delimiter = '\t';
        else if (!strcmp(delimiter, "space")) co.delimiter = ' ';
        else if (strlen(delimiter) == 1) co.delimiter = delimiter[0];
        else return cli_usage_error(cmd, "--delimiter '%s': expected one character, 'tab' or 'space'", delimiter);
    }
    int csv_opts = delimiter != NULL || set_header;
    if (!in) return cli_usage_error(cmd, "no input file (expected FILE.csv or FILE.npy)");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, in, "input file") != NF_OK) return cli_fail(cmd);

    nf_table tab = {0};
    int rc = csv_opts ? nf_import_csv_select(in, &co, &sel, &tab) : nf_import_file_select(in, NULL, &sel, &tab);
    if (rc == NF_OK) rc = nf_data_validate_double(in, tab.x, tab.n, tab.d, 0);
    nf_h5 *f = NULL;
    if (rc == NF_OK) rc = nf_h5_create(&f, out, DATA_FORMAT, DATA_VERSION);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/x", tab.x, tab.n, tab.d);
    if (rc == NF_OK) rc = nf_h5_write_strings(f, "/columns", (const char *const *)tab.names, tab.d);
    if (rc == NF_OK && tab.c) rc = nf_h5_write_double(f, "/context", tab.ctx, tab.n, tab.c);
    if (rc == NF_OK && tab.c) rc = nf_h5_write_strings(f, "/context_names", (const char *const *)tab.ctx_names, tab.c);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", "import");
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "source", in);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "n", (int64_t)tab.n);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "dim", (int64_t)tab.d);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "density", "unknown");
    if (f) {
        if (rc == NF_OK) rc = nf_h5_commit(f);
        else nf_h5_abort(f);
    }
    if (rc == NF_OK) {
        printf("%s: %zu x %zu from %s", out, tab.n, tab.d, in);
        if (tab.c) printf(", context of %zu values (%s%s)", tab.c, tab.ctx_names[0], tab.c > 1 ? ", ..." : "");
        printf("\n");
        if (tab.n_skipped) {
            fprintf(stderr, "nf data import: left out %zu text column%s:", tab.n_skipped, tab.n_skipped > 1 ? "s" : "");
            for (size_t j = 0; j < tab.n_skipped; j++) fprintf(stderr, "%s '%s'", j ? "," : "", tab.skipped[j]);
            fprintf(stderr, " (a categorical one can be the context: --context %s)\n", tab.skipped[0]);
        }
    }
    nf_table_free(&tab);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- split ------------------------------------------------------------------------------------ */

typedef struct split_input {
    double *x, *lp, *ctx;   /* (n, d), (n), (n, c) */
    size_t n, d, c;
    char **cols, **ctx_names;
    size_t ncols, nctx_names;
    int image;              /* /x has image attributes (datasets/images.h) */
    nf_image_info img;
    int video;              /* /x has video attributes (datasets/videos.h) */
    nf_video_info vid;
    int64_t *labels;        /* (n) image classes, or NULL */
    char **class_names;     /* (n_classes) */
    size_t n_classes;
} split_input;

static void split_input_free(split_input *s)
{
    free(s->x);
    free(s->lp);
    free(s->ctx);
    if (s->cols) nf_h5_strings_free(s->cols, s->ncols);
    if (s->ctx_names) nf_h5_strings_free(s->ctx_names, s->nctx_names);
    free(s->labels);
    if (s->class_names) nf_h5_strings_free(s->class_names, s->n_classes);
}

static int split_read(const char *in, split_input *s)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, in, NULL, 0));
    char what[1100];
    size_t rows, cols;
    int rc = NF_OK;
    if (!nf_h5_exists(f, "/x"))
        rc = nf_error(NF_EFORMAT, "%s: no dataset /x (expected the samples as an n x d array)", in);
    if (rc == NF_OK) rc = nf_h5_read_double(f, "/x", &s->x, &s->n, &s->d);
    snprintf(what, sizeof what, "%s:/x", in);
    if (rc == NF_OK) rc = nf_data_validate_double(what, s->x, s->n, s->d, 0);
    if (rc == NF_OK && nf_h5_exists(f, "/logp_true")) {
        rc = nf_h5_read_double(f, "/logp_true", &s->lp, &rows, &cols);
        if (rc == NF_OK && (rows != s->n || cols != 1))
            rc = nf_error(NF_EFORMAT, "%s:/logp_true has %zu x %zu entries, expected %zu (one per row of /x)", in,
                          rows, cols, s->n);
    }
    if (rc == NF_OK && nf_h5_exists(f, "/context")) {
        rc = nf_h5_read_double(f, "/context", &s->ctx, &rows, &s->c);
        if (rc == NF_OK && rows != s->n)
            rc = nf_error(NF_EFORMAT, "%s:/context has %zu rows, expected %zu (one per row of /x)", in, rows, s->n);
    }
    if (rc == NF_OK && nf_h5_exists(f, "/columns")) {
        rc = nf_h5_read_strings(f, "/columns", &s->cols, &s->ncols);
        if (rc == NF_OK && s->ncols != s->d)
            rc = nf_error(NF_EFORMAT, "%s:/columns has %zu names, expected %zu (one per column of /x)", in, s->ncols,
                          s->d);
    }
    if (rc == NF_OK && s->ctx && nf_h5_exists(f, "/context_names")) {
        rc = nf_h5_read_strings(f, "/context_names", &s->ctx_names, &s->nctx_names);
        if (rc == NF_OK && s->nctx_names != s->c)
            rc = nf_error(NF_EFORMAT, "%s:/context_names has %zu names, expected %zu (one per column of /context)", in,
                          s->nctx_names, s->c);
    }
    if (rc == NF_OK && nf_h5_attr_exists(f, "/x", "image_shape")) {
        s->image = 1;
        rc = nf_image_info_read(f, s->n, s->d, &s->img);
    }
    if (rc == NF_OK && nf_h5_attr_exists(f, "/x", "video_shape")) {
        s->video = 1;
        rc = nf_video_info_read_h5(f, s->n, s->d, &s->vid);
    }
    if (rc == NF_OK) rc = nf_image_labels_read(f, s->n, &s->labels, &s->class_names, &s->n_classes);
    nf_h5_close(f);
    return rc;
}

/* Copy the provenance attributes the input has (silently skipping any of another type). */
static int copy_attrs(nf_h5 *src, nf_h5 *dst)
{
    static const char *const strs[] = {"generator", "density", "source", "flow", "structure", "relatives", NULL};
    static const char *const ints[] = {"seed", "model_seed", "components", NULL};
    static const char *const dbls[] = {"entropy", "entropy_stderr", "lambda", NULL};
    char buf[1024];
    int64_t iv;
    double dv;
    for (int i = 0; strs[i]; i++)
        if (nf_h5_attr_exists(src, "/", strs[i]) && nf_h5_attr_get_string(src, "/", strs[i], buf, sizeof buf) == NF_OK)
            NF_TRY(nf_h5_attr_set_string(dst, "/", strs[i], buf));
    for (int i = 0; ints[i]; i++)
        if (nf_h5_attr_exists(src, "/", ints[i]) && nf_h5_attr_get_int64(src, "/", ints[i], &iv) == NF_OK)
            NF_TRY(nf_h5_attr_set_int64(dst, "/", ints[i], iv));
    for (int i = 0; dbls[i]; i++)
        if (nf_h5_attr_exists(src, "/", dbls[i]) && nf_h5_attr_get_double(src, "/", dbls[i], &dv) == NF_OK)
            NF_TRY(nf_h5_attr_set_double(dst, "/", dbls[i], dv));
    nf_error_clear();
    return NF_OK;
}

/* Rows perm[0..m-1] of a (n, w) array into out (m, w). */
static void gather(double *out, const double *a, size_t w, const size_t *perm, size_t m)
{
    for (size_t i = 0; i < m; i++) memcpy(out + i * w, a + perm[i] * w, w * sizeof *a);
}

static int split_write(nf_h5 *f, const char *in, nf_h5 *src, const split_input *s, const nf_dep_split *dep,
                       const size_t *rows, size_t m, const char *part, long seed, double *buf)
{
    gather(buf, s->x, s->d, rows, m);
    NF_TRY(nf_h5_write_double(f, "/x", buf, m, s->d));
    if (s->lp) {
        gather(buf, s->lp, 1, rows, m);
        NF_TRY(nf_h5_write_double(f, "/logp_true", buf, m, 0));
    }
    if (s->ctx) {
        gather(buf, s->ctx, s->c, rows, m);
        NF_TRY(nf_h5_write_double(f, "/context", buf, m, s->c));
    }
    if (s->cols) NF_TRY(nf_h5_write_strings(f, "/columns", (const char *const *)s->cols, s->ncols));
    if (s->ctx_names) NF_TRY(nf_h5_write_strings(f, "/context_names", (const char *const *)s->ctx_names, s->nctx_names));
    if (s->image) NF_TRY(nf_image_attrs_write(f, &s->img));
    if (s->video) NF_TRY(nf_video_attrs_write(f, &s->vid));
    if (s->labels) {
        int64_t *lab = malloc(m * sizeof *lab);
        if (!lab) return nf_error(NF_ENOMEM, "%s: out of memory for %zu labels", in, m);
        for (size_t i = 0; i < m; i++) lab[i] = s->labels[rows[i]];
        int rc = nf_h5_write_int64(f, "/labels", lab, m, 0);
        free(lab);
        NF_TRY(rc);
        NF_TRY(nf_h5_write_strings(f, "/class_names", (const char *const *)s->class_names, s->n_classes));
    }
    if (dep) NF_TRY(nf_dep_split_write(f, dep, rows, m));
    if (src) NF_TRY(copy_attrs(src, f));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "n", (int64_t)m));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "dim", (int64_t)s->d));
    NF_TRY(nf_h5_attr_set_string(f, "/", "split", part));
    NF_TRY(nf_h5_attr_set_string(f, "/", "split_of", in));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "split_seed", seed));
    return NF_OK;
}

/* 1 if path is an nf-causal file (nf data make causal-*, nf causal import). */
static int is_causal_file(const char *path)
{
    nf_h5 *f;
    if (nf_h5_open(&f, path, NULL, 0) != NF_OK) {
        nf_error_clear();
        return 0;
    }
    char fmt[64] = "";
    int yes = nf_h5_attr_exists(f, "/", "format") && nf_h5_attr_get_string(f, "/", "format", fmt, sizeof fmt) == NF_OK &&
              !strcmp(fmt, NF_CAUSAL_FORMAT);
    nf_h5_close(f);
    nf_error_clear();
    return yes;
}

/* A causal file split by units, within each arm: of its n_a units in the seeded order, round(n_a val)
 * validate, round(n_a test) test and the rest train, so every part keeps the arms' proportions and
 * the training part both arms; each part carries every array of the input (potential outcomes, true
 * log-densities, propensities).  All parts are written before any is renamed into place. */
static int split_causal(const char *cmd, const char *in, char *const path[3], double val, double test, long seed)
{
    static const char *const part[3] = {"train", "val", "test"};
    nf_causal_data d, sub[3];
    memset(sub, 0, sizeof sub);
    nf_h5 *f[3] = {NULL, NULL, NULL};
    size_t *perm = NULL, *idx[3] = {NULL, NULL, NULL}, count[3] = {0, 0, 0}, treated[3] = {0, 0, 0}, unused[3];
    int rc = nf_causal_load(&d, in, NULL, NULL, NULL);
    if (rc != NF_OK) return cli_fail(cmd);
    perm = malloc(d.n * sizeof *perm);
    for (int k = 0; k < 3; k++) idx[k] = malloc(d.n * sizeof *idx[k]);
    if (!perm || !idx[0] || !idx[1] || !idx[2]) rc = nf_error(NF_ENOMEM, "%s: out of memory for %zu units", in, d.n);
    if (rc == NF_OK && (rc = nf_dataset_split(d.n, 0, 0, (uint64_t)seed, perm, unused)) != NF_OK)
        nf_error_context(rc, "%s", in);
    for (int arm = 0; arm < 2 && rc == NF_OK; arm++) {
        size_t na = 0, at = 0;
        for (size_t i = 0; i < d.n; i++) na += d.a[i] == arm;
        const size_t nv = (size_t)llround((double)na * val), nt = (size_t)llround((double)na * test);
        if (nv + nt >= na) {
            rc = nf_error(NF_EINVAL, "%s: the %s arm's %zu units with --val %g and --test %g leave none to train on "
                                     "(expected smaller fractions)", in, arm ? "treated" : "control", na, val, test);
            break;
        }
        for (size_t i = 0; i < d.n; i++) {
            if (d.a[perm[i]] != arm) continue;
            const int k = at < nv ? 1 : at < nv + nt ? 2 : 0;
            idx[k][count[k]++] = perm[i];
            treated[k] += arm;
            at++;
        }
    }
    for (int k = 0; k < 3 && rc == NF_OK; k++) {
        if (!count[k]) continue;
        rc = nf_causal_subset(&sub[k], &d, idx[k], count[k]);
        if (rc == NF_OK) rc = nf_h5_create(&f[k], path[k], NF_CAUSAL_FORMAT, NF_CAUSAL_FORMAT_VERSION);
        if (rc == NF_OK) rc = nf_causal_write(f[k], &sub[k]);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f[k], "/", "split", part[k]);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f[k], "/", "split_of", in);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f[k], "/", "split_seed", seed);
    }
    for (int k = 0; k < 3; k++) {
        if (!f[k]) continue;
        if (rc == NF_OK) rc = nf_h5_commit(f[k]);
        else nf_h5_abort(f[k]);
    }
    if (rc == NF_OK) {
        printf("%s: %zu train, %zu validation, %zu test units (treated: %zu, %zu, %zu) ->", in, count[0], count[1],
               count[2], treated[0], treated[1], treated[2]);
        for (int k = 0, first = 1; k < 3; k++)
            if (count[k]) printf("%s %s", first ? "" : ",", path[k]), first = 0;
        printf("\n");
    }
    for (int k = 0; k < 3; k++) nf_causal_data_free(&sub[k]), free(idx[k]);
    nf_causal_data_free(&d);
    free(perm);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

static int cmd_split(int argc, char **argv)
{
    const char *cmd = "data split", *in = NULL, *prefix = NULL;
    double val = 0.1, test = 0.1;
    long seed = DEFAULT_SEED;
    const flag_spec flags[] = {
        {.name = "--val", .kind = FLAG_DOUBLE, .dst = &val, .lo = 0, .hi = 0.999999},
        {.name = "--test", .kind = FLAG_DOUBLE, .dst = &test, .lo = 0, .hi = 0.999999},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "-o", .kind = FLAG_STRING, .dst = &prefix},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = SPLIT_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!in) return cli_usage_error(cmd, "no input file (expected FILE.h5)");
    if (val + test >= 1) return cli_usage_error(cmd, "--val %g and --test %g leave no training rows", val, test);
    const char *part[3] = {"train", "val", "test"};
    char *path[3] = {NULL, NULL, NULL};
    size_t pl = strlen(prefix ? prefix : in) + 16;
    for (int k = 0; k < 3; k++) {
        if (!(path[k] = malloc(pl))) {
            for (int j = 0; j < k; j++) free(path[j]);
            return cli_failf(cmd, "out of memory");
        }
        if (prefix) {
            snprintf(path[k], pl, "%s.%s.h5", prefix, part[k]);
        } else {
            size_t L = strlen(in);
            int strip = L > 3 && !strcmp(in + L - 3, ".h5");
            snprintf(path[k], pl, "%.*s.%s.h5", (int)(strip ? L - 3 : L), in, part[k]);
        }
    }
    split_input si = {0};
    size_t *perm = NULL, count[3];
    double *buf = NULL;
    nf_h5 *src = NULL, *f[3] = {NULL, NULL, NULL};
    int rc = NF_OK;
    for (int k = 0; k < 3 && rc == NF_OK; k++) rc = app_check_output(path[k]);
    for (int k = 0; k < 3 && rc == NF_OK; k++) rc = app_check_not_input(path[k], in, "input file");
    if (rc == NF_OK && app_is_sequences_file(in)) {
        int st = app_data_split_sequences(cmd, in, (const char *const *)path, val, test, seed);
        for (int k = 0; k < 3; k++) free(path[k]);
        return st;
    }
    if (rc == NF_OK && is_causal_file(in)) {
        int st = split_causal(cmd, in, path, val, test, seed);
        for (int k = 0; k < 3; k++) free(path[k]);
        return st;
    }
    if (rc == NF_OK) rc = split_read(in, &si);
    if (rc == NF_OK) {
        size_t w = si.d > si.c ? si.d : si.c;
        perm = malloc(si.n * sizeof *perm);
        buf = malloc(si.n * w * sizeof *buf);
        if (!perm || !buf) rc = nf_error(NF_ENOMEM, "%s: out of memory for %zu rows", in, si.n);
    }
    nf_dep_split dep = {0};
    int dependent = 0;
    size_t units[3] = {0, 0, 0};
    if (rc == NF_OK) rc = nf_h5_open(&src, in, NULL, 0);
    if (rc == NF_OK) rc = nf_dep_split_read(src, in, si.n, &dep, &dependent);
    if (rc == NF_OK && dependent)
        rc = nf_dep_split_parts(&dep, in, val, test, (uint64_t)seed, perm, count, units);
    else if (rc == NF_OK && (rc = nf_dataset_split(si.n, val, test, (uint64_t)seed, perm, count)) != NF_OK)
        nf_error_context(rc, "%s", in);
    /* all parts written before any is renamed into place; a part of no rows is not written */
    size_t at = 0;
    for (int k = 0; k < 3 && rc == NF_OK; k++) {
        if (count[k] == 0) continue;
        rc = nf_h5_create(&f[k], path[k], DATA_FORMAT, DATA_VERSION);
        if (rc == NF_OK)
            rc = split_write(f[k], in, src, &si, dependent ? &dep : NULL, perm + at, count[k], part[k], seed, buf);
        at += count[k];
    }
    nf_h5_close(src);
    for (int k = 0; k < 3; k++) {
        if (!f[k]) continue;
        if (rc == NF_OK) {
            rc = nf_h5_commit(f[k]);
        } else {
            nf_h5_abort(f[k]);
        }
    }
    if (rc == NF_OK) {
        printf("%s: %zu train, %zu validation, %zu test rows", in, count[0], count[1], count[2]);
        if (dependent) printf(" (whole groups of related rows: %zu, %zu, %zu)", units[0], units[1], units[2]);
        printf(" ->");
        for (int k = 0, first = 1; k < 3; k++)
            if (count[k]) printf("%s %s", first ? "" : ",", path[k]), first = 0;
        printf("\n");
    }
    split_input_free(&si);
    nf_dep_split_free(&dep);
    free(perm);
    free(buf);
    for (int k = 0; k < 3; k++) free(path[k]);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

int nf_cmd_data(int argc, char **argv)
{
    if (argc < 2) {
        data_help(stderr);
        return 2;
    }
    if (cli_is_help(argv[1])) {
        data_help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "make")) return cmd_make(argc - 1, argv + 1);
    if (!strcmp(argv[1], "import")) return cmd_import(argc - 1, argv + 1);
    if (!strcmp(argv[1], "split")) return cmd_split(argc - 1, argv + 1);
    if (!strcmp(argv[1], "show"))
        return app_data_show_is_video(argc - 1, argv + 1) ? app_data_show_video(argc - 1, argv + 1)
                                                           : app_data_show(argc - 1, argv + 1);
    return cli_usage_error("data", "unknown subcommand '%s' (expected make, import, split or show)", argv[1]);
}
