/* apps/data_images.c - image data on the command line: nf data make shapes|digits, nf data import
 * of a PNG folder or an image NPY, nf data show (a PNG grid of a file's images).  The images and
 * their file layout are datasets/images.h; the grid is plot/image_grid.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "core/import.h"
#include "datasets/images.h"
#include "plot/image_grid.h"

#define SHAPES_DEFAULT_N 10000
#define SHAPES_DEFAULT_SIZE 16
#define DIGITS_FILE "digits.csv.gz"

static const char *const MAKE_IMAGES_HELP =
    "usage: nf data make shapes [--size 16|32] [-n N] [--seed S] [--threads N] -o FILE.h5\n"
    "       nf data make digits [--from DIGITS.csv.gz] -o FILE.h5\n"
    "\n"
    "Image data sets (docs/FORMATS.md, \"Image data\"): /x holds one image per row (h*w grey levels,\n"
    "attributes image_shape and levels), the classes as /labels, /class_names and a one-hot /context\n"
    "named class=NAME, so nf fit learns p(image) or p(image | class).\n"
    "\n"
    "  shapes           one disc, square or triangle per grey image (classes 0, 1, 2), random centre,\n"
    "                   size, rotation and grey levels, anti-aliased, 256 levels\n"
    "  digits           the 1,797 8 x 8 handwritten digits (UCI optical digits test set), 17 grey\n"
    "                   levels 0..16, classes 0..9\n"
    "  --size S         shapes: 16 or 32 pixels a side                          [16]\n"
    "  -n, --n N        shapes: number of images                                [10000]\n"
    "  --seed S         shapes: seed                                            [1]\n"
    "  --threads N      shapes: threads drawing the images (the same images for any) [all cores]\n"
    "  --from FILE      digits: the gzip CSV (64 pixels, then the label, per line) [data/digits.csv.gz\n"
    "                   of the nf sources, found next to the nf binary or in the current directory]\n"
    "  -o FILE.h5       output file (required)\n"
    "\n"
    "examples:\n"
    "  nf data make shapes --size 32 -n 20000 --seed 3 -o shapes.h5\n"
    "  nf data make digits -o digits.h5 && nf data show digits.h5 -o digits.png\n";

static const char *const IMPORT_IMAGES_HELP =
    "usage: nf data import DIR -o FILE.h5 [--rgb]\n"
    "       nf data import IMAGES.npy [--labels LABELS.npy] [--levels L] -o FILE.h5\n"
    "\n"
    "Images into an image data file (docs/FORMATS.md, \"Image data\").  DIR: every .png in it, sorted\n"
    "by name, or, when it has sub-folders, one class per sub-folder (named by it) of .png files; all\n"
    "of one size; grey as the luma of RGB.  IMAGES.npy: an array (n, H, W) or (n, H, W, C) of\n"
    "integer grey levels 0..L-1, any integer or real type (a 1-D or 2-D NPY is a table: nf data\n"
    "import --help).\n"
    "\n"
    "  --rgb            DIR: keep the three colour channels instead of grey\n"
    "  --labels FILE    NPY: n integer labels 0..K-1 (classes named 0..K-1)\n"
    "  --levels L       NPY: grey levels, values 0..L-1                          [256]\n"
    "  -o FILE.h5       output file (required)\n"
    "\n"
    "examples:\n"
    "  nf data import pictures/ -o pictures.h5\n"
    "  nf data import train_images.npy --labels train_labels.npy -o train.h5\n";

static const char *const SHOW_HELP =
    "usage: nf data show FILE.h5 [--n N] [--first K] [--cols C] [--scale S] [--gap G] -o GRID.png\n"
    "\n"
    "Draw the images of an image data file (or image samples) as a grid in a PNG, each image pixel\n"
    "a block of S x S screen pixels.  Values are rounded and clamped to the file's grey levels.  A video\n"
    "file (nf data make video-*) is drawn as a PNG filmstrip, or with -o ANIM.gif as an animated GIF.\n"
    "\n"
    "  --n N            images to draw                                           [64]\n"
    "  --first K        the first image drawn (0-based)                          [0]\n"
    "  --cols C         images per row                                           [about square]\n"
    "  --scale S        screen pixels per image pixel                 [at least 64 px an image]\n"
    "  --gap G          pixels between the images and around them                 [2]\n"
    "  -o GRID.png      output picture (written atomically)\n"
    "\n"
    "example:\n"
    "  nf data show shapes.h5 --n 100 -o shapes.png\n";

void app_data_list_images(void)
{
    printf("%-13s images 16x16 or 32x32, 256 levels, 3 classes: one disc, square or triangle each\n", "shapes");
    printf("%-13s images 8x8, 17 levels, 10 classes: the 1,797 UCI handwritten digits\n", "digits");
}

int app_data_save(const char *out, int (*write)(nf_h5 *f, const void *set), const void *set, size_t n, size_t dim,
                  const char *generator, const char *source, long seed)
{
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, out, "nf-data", 1));
    int rc = write(f, set);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", generator);
    if (rc == NF_OK && source) rc = nf_h5_attr_set_string(f, "/", "source", source);
    if (rc == NF_OK && seed >= 0) rc = nf_h5_attr_set_int64(f, "/", "seed", seed);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "n", (int64_t)n);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "dim", (int64_t)dim);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "density", "unknown");
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

static int write_images(nf_h5 *f, const void *set) { return nf_image_set_write(f, set); }

static int save_images(const char *out, const nf_image_set *s, const char *generator, const char *source, long seed)
{
    return app_data_save(out, write_images, s, s->n, nf_image_info_dim(&s->info), generator, source, seed);
}

void app_print_classes(const int64_t *labels, size_t n, int n_classes, char *const *names)
{
    if (!labels || n_classes <= 0) return;
    printf(", %d classes (", n_classes);
    for (int k = 0; k < n_classes && k < 10; k++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++) count += labels[i] == k;
        printf("%s%s %zu", k ? ", " : "", names[k], count);
    }
    printf("%s)", n_classes > 10 ? ", ..." : "");
}

/* "OUT: N images of H x W[ x C], L levels[, K classes (a 10, b 12, ...)]" */
static void print_summary(const char *out, const char *what, const nf_image_set *s)
{
    const nf_image_info *in = &s->info;
    printf("%s: %s%s%zu image%s of %d x %d", out, what ? what : "", what ? ", " : "", s->n, s->n == 1 ? "" : "s",
           in->h, in->w);
    if (in->c > 1) printf(" x %d", in->c);
    printf(", %d levels", in->levels);
    app_print_classes(s->labels, s->n, in->n_classes, s->class_names);
    printf("\n");
}

/* The default digits file: data/digits.csv.gz of the sources, from the binary (build/DIR/nf, or
 * PREFIX/bin/nf with PREFIX/share/nf), or from the current directory.  NULL and a message listing
 * every place looked at when none holds it. */
const char *app_find_digits(char *buf, size_t size)
{
    char exe[PATH_MAX], tried[4 * PATH_MAX + 64] = "";
    const char *rel[] = {"../../data/", "../share/nf/", "../data/", NULL};
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) slash[1] = '\0';
        for (int i = 0; rel[i]; i++) {
            snprintf(buf, size, "%s%s%s", exe, rel[i], DIGITS_FILE);
            if (access(buf, R_OK) == 0) { /* without the "../.." (the files record it as their source) */
                char *full = realpath(buf, NULL);
                if (full && strlen(full) < size) memcpy(buf, full, strlen(full) + 1);
                free(full);
                return buf;
            }
            size_t at = strlen(tried);
            snprintf(tried + at, sizeof tried - at, "%s, ", buf);
        }
    }
    snprintf(buf, size, "data/%s", DIGITS_FILE);
    if (access(buf, R_OK) == 0) return buf;
    nf_error(NF_EIO, "no digits file: looked for %sand %s in the current directory (expected the nf sources' "
             "data/%s; give it with --from FILE)", tried, buf, DIGITS_FILE);
    return NULL;
}

int app_data_make_images(int argc, char **argv)
{
    const char *cmd = "data make", *name = NULL, *out = NULL, *from = NULL;
    long n = SHAPES_DEFAULT_N, seed = 1;
    int size = SHAPES_DEFAULT_SIZE, set_n = 0, set_seed = 0, set_size = 0, threads = 0;
    const flag_spec flags[] = {
        {.name = "--size", .kind = FLAG_INT, .dst = &size, .lo = 16, .hi = 32, .seen = &set_size},
        {.name = "--n", .alias = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 10000000, .seen = &set_n},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX, .seen = &set_seed},
        {.name = "--from", .kind = FLAG_STRING, .dst = &from},
        FLAG_THREADS(threads),
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = MAKE_IMAGES_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the data set is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &name, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!name) return cli_usage_error(cmd, "no data set named (expected shapes or digits)");
    int shapes = !strcmp(name, "shapes");
    if (!shapes && strcmp(name, "digits"))
        return cli_usage_error(cmd, "unknown image data set '%s' (expected shapes or digits)", name);
    if (shapes && size != 16 && size != 32) return cli_usage_error(cmd, "--size %d: expected 16 or 32", size);
    if (shapes && from) return cli_usage_error(cmd, "--from applies to digits, not shapes");
    if (!shapes && (set_n || set_seed || set_size))
        return cli_usage_error(cmd, "digits is a fixed set of 1,797 images (--size, -n and --seed apply to shapes)");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (app_check_output(out) != NF_OK) return cli_fail(cmd);
    char found[PATH_MAX + 64];
    if (!shapes && !from && !(from = app_find_digits(found, sizeof found))) return cli_fail(cmd);
    if (from && app_check_not_input(out, from, "digits file") != NF_OK) return cli_fail(cmd);
    cli_set_threads(threads);

    nf_image_set s = {0};
    int rc = shapes ? nf_image_shapes(&s, size, (size_t)n, (uint64_t)seed) : nf_image_digits(&s, from);
    if (rc == NF_OK) rc = save_images(out, &s, name, from, shapes ? seed : -1);
    if (rc == NF_OK) print_summary(out, name, &s);
    nf_image_set_free(&s);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

int app_is_image_input(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 1;
    size_t shape[NF_IMPORT_NPY_MAX_DIMS];
    int nd = 0;
    FILE *fp = fopen(path, "rb");
    unsigned char magic[6] = {0};
    int npy = fp && fread(magic, 1, 6, fp) == 6 && !memcmp(magic, "\x93NUMPY", 6);
    if (fp) fclose(fp);
    int image = npy && nf_import_npy_shape(path, shape, &nd) == NF_OK && nd >= 3;
    nf_error_clear();
    return image;
}

int app_data_import_images(int argc, char **argv)
{
    const char *cmd = "data import", *in = NULL, *out = NULL, *labels = NULL;
    int levels = 0, rgb = 0, set_levels = 0;
    const flag_spec flags[] = {
        {.name = "--labels", .kind = FLAG_STRING, .dst = &labels},
        {.name = "--levels", .kind = FLAG_INT, .dst = &levels, .lo = 2, .hi = NF_IMAGE_MAX_LEVELS, .seen = &set_levels},
        {.name = "--rgb", .kind = FLAG_BOOL, .dst = &rgb},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = IMPORT_IMAGES_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!in) return cli_usage_error(cmd, "no input (expected a folder of PNG files or an image NPY)");
    struct stat st;
    int dir = stat(in, &st) == 0 && S_ISDIR(st.st_mode);
    if (dir && (labels || set_levels))
        return cli_usage_error(cmd, "--labels and --levels apply to an NPY input (a folder's classes are its "
                                    "sub-folders, its levels 256)");
    if (!dir && rgb) return cli_usage_error(cmd, "--rgb applies to a folder of PNG files");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, in, "input file") != NF_OK ||
        app_check_not_input(out, labels, "labels file") != NF_OK)
        return cli_fail(cmd);
    nf_image_set s = {0};
    int rc = dir ? nf_image_import_png_dir(&s, in, rgb) : nf_image_import_npy(&s, in, labels, levels);
    if (rc == NF_OK) rc = save_images(out, &s, "import", in, -1);
    if (rc == NF_OK) print_summary(out, NULL, &s);
    nf_image_set_free(&s);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* Images [first, first + count) of an image file (or image samples; clipped to the file's end) and
 * its attributes: *m images read into *x.  Values are not checked (samples of a model are real
 * numbers: the grid rounds and clamps them). */
static int show_read(const char *path, size_t first, size_t count, nf_real **x, size_t *m, nf_image_info *info)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    int rank = 0;
    size_t dims[2] = {0, 0}, cols = 0;
    int rc = nf_h5_exists(f, "/x") ? NF_OK : nf_error(NF_EFORMAT, "%s: no dataset /x (expected images)", path);
    if (rc == NF_OK) rc = nf_h5_shape(f, "/x", &rank, dims);
    if (rc == NF_OK) rc = nf_image_info_read(f, dims[0], dims[1], info);
    if (rc == NF_OK && first >= dims[0])
        rc = nf_error(NF_EINVAL, "%s: --first %zu, but the file holds %zu images (expected 0..%zu)", path, first,
                      dims[0], dims[0] ? dims[0] - 1 : 0);
    if (rc == NF_OK) rc = nf_h5_read_real_rows(f, "/x", first, count, x, m, &cols, NULL);
    nf_h5_close(f);
    return rc;
}

int app_data_show(int argc, char **argv)
{
    const char *cmd = "data show", *in = NULL, *out = NULL;
    long count = 64, first = 0;
    int gap = 0, set_gap = 0;
    nf_image_grid go = {0};
    const flag_spec flags[] = {
        {.name = "--n", .alias = "-n", .kind = FLAG_LONG, .dst = &count, .lo = 1, .hi = 100000},
        {.name = "--first", .kind = FLAG_LONG, .dst = &first, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "--cols", .kind = FLAG_INT, .dst = &go.cols, .lo = 1, .hi = 10000},
        {.name = "--scale", .kind = FLAG_INT, .dst = &go.scale, .lo = 1, .hi = 1000},
        {.name = "--gap", .kind = FLAG_INT, .dst = &gap, .lo = 0, .hi = 100, .seen = &set_gap},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = SHOW_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (set_gap) go.gap = gap ? gap : -1;
    if (!in) return cli_usage_error(cmd, "no input file (expected an image data file FILE.h5)");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o GRID.png)");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, in, "data file") != NF_OK) return cli_fail(cmd);
    nf_real *x = NULL;
    size_t m = 0;
    nf_image_info info;
    int rc = show_read(in, (size_t)first, (size_t)count, &x, &m, &info);
    if (rc == NF_OK && info.c != 1 && info.c != 3)
        rc = nf_error(NF_EINVAL, "%s: images of %d channels (expected 1, grey, or 3, RGB, to draw)", in, info.c);
    if (rc == NF_OK) {
        go.h = info.h, go.w = info.w, go.c = info.c, go.levels = info.levels;
        rc = nf_image_grid_write_png(out, &go, x, m);
    }
    if (rc == NF_OK) {
        printf("%s: images %zu..%zu of %s (%d x %d", out, (size_t)first, (size_t)first + m - 1, in, info.h, info.w);
        if (info.c > 1) printf(" x %d", info.c);
        printf(", %d levels", info.levels);
        if (info.n_classes) printf(", %d classes", info.n_classes);
        printf(")\n");
    }
    free(x);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}
