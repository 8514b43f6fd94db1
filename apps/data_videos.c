/* apps/data_videos.c - video data on the command line: nf data make video-sprites|video-balls,
 * nf data import of a video NPY, nf data show of a video file (a PNG filmstrip or an animated GIF).
 * The videos and their file layout are datasets/videos.h; the pictures plot/video_out.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "core/import.h"
#include "datasets/videos.h"
#include "plot/video_out.h"

#define VIDEOS_DEFAULT_N 1000
#define DIGITS_FILE "digits.csv.gz"
#define SHOW_PNG_DEFAULT_N 8
#define SHOW_DEFAULT_DELAY 10   /* hundredths of a second a frame */

static const char *const MAKE_VIDEOS_HELP =
    "usage: nf data make video-sprites|video-balls [-n N] [--frames T] [--size S] [--seed S]\n"
    "                                               [--from DIGITS.csv.gz] [--threads N] -o FILE.h5\n"
    "\n"
    "Video data sets (docs/FORMATS.md, \"Video data\"): /x holds one video per row, T frames of\n"
    "S x S grey levels one after the other (attributes video_shape = (T, S, S, 1) and levels), the\n"
    "classes as /labels, /class_names and a one-hot /context named class=NAME.  Objects move with a\n"
    "constant velocity and bounce off the walls exactly (a reflecting box).\n"
    "\n"
    "  video-sprites    one 8 x 8 handwritten digit drawn 16 x 16, moving 1..3 pixels a frame on\n"
    "                   each axis; 17 levels; class = the digit 0..9 (size at least 20)\n"
    "  video-balls      one or two anti-aliased white discs moving 1..2.5 pixels a frame; 256\n"
    "                   levels; class = the number of discs (1 or 2)\n"
    "  -n, --n N        number of videos                                         [1000]\n"
    "  --frames T       frames a video                                           [16]\n"
    "  --size S         pixels a side of a frame, 16..256 (20..256 for sprites)  [32]\n"
    "  --seed S         seed                                                     [1]\n"
    "  --from FILE      video-sprites: the digits' gzip CSV [data/digits.csv.gz of the nf sources,\n"
    "                   found next to the nf binary or in the current directory]\n"
    "  --threads N      threads drawing the videos (the same videos for any)     [all cores]\n"
    "  -o FILE.h5       output file (required)\n"
    "\n"
    "examples:\n"
    "  nf data make video-balls -n 2000 --frames 16 --size 32 --seed 3 -o balls.h5\n"
    "  nf data make video-sprites -o sprites.h5 && nf data show sprites.h5 -o sprites.gif\n";

static const char *const IMPORT_VIDEOS_HELP =
    "usage: nf data import VIDEOS.npy [--video] [--labels LABELS.npy] [--levels L] -o FILE.h5\n"
    "\n"
    "An NPY video array into a video data file (docs/FORMATS.md, \"Video data\"): (n, T, H, W, C),\n"
    "recognised by its 5 dimensions, or (n, T, H, W) of one channel with --video (without it a\n"
    "4-D array is images (n, H, W, C)); integer grey levels 0..L-1, any integer or real type.\n"
    "\n"
    "  --video          the array is videos (needed for a 4-D array)\n"
    "  --labels FILE    n integer labels 0..K-1 (classes named 0..K-1)\n"
    "  --levels L       grey levels, values 0..L-1                               [256]\n"
    "  -o FILE.h5       output file (required)\n"
    "\n"
    "example:\n"
    "  nf data import clips.npy --video --levels 256 -o clips.h5\n";

static const char *const SHOW_VIDEOS_HELP =
    "usage: nf data show VIDEOS.h5 [--n N] [--first K] [--scale S] [--cols C] [--delay D] -o OUT.png|OUT.gif\n"
    "\n"
    "Draw the videos of a video data file.  OUT.png: a filmstrip, one video a row, its frames left\n"
    "to right.  OUT.gif: an animated GIF that loops, the N videos side by side in a grid.  Values are\n"
    "rounded and clamped to the file's grey levels.\n"
    "\n"
    "  --n N            videos to draw                              [8 for a PNG, 1 for a GIF]\n"
    "  --first K        the first video drawn (0-based)                          [0]\n"
    "  --scale S        screen pixels per pixel       [a frame at least 64 px (PNG), 128 px (GIF)]\n"
    "  --cols C         GIF: videos per row of the grid                          [about square]\n"
    "  --delay D        GIF: hundredths of a second a frame                      [10]\n"
    "  -o OUT           output picture, .png or .gif (written atomically)\n"
    "\n"
    "examples:\n"
    "  nf data show balls.h5 --n 4 -o balls.png\n"
    "  nf data show balls.h5 --n 9 --delay 8 -o balls.gif\n";

void app_data_list_videos(void)
{
    printf("%-13s videos 16 frames of 32x32, 17 levels, 10 classes: a handwritten digit bouncing\n", "video-sprites");
    printf("%-13s videos 16 frames of 32x32, 256 levels, 2 classes: one or two bouncing discs\n", "video-balls");
}

int app_is_video_name(const char *s) { return !strcmp(s, "video-sprites") || !strcmp(s, "video-balls"); }

static int write_videos(nf_h5 *f, const void *set) { return nf_video_set_write(f, set); }

static int save_videos(const char *out, const nf_video_set *s, const char *generator, const char *source, long seed)
{
    return app_data_save(out, write_videos, s, s->n, nf_video_info_dim(&s->info), generator, source, seed);
}

/* "OUT: [WHAT, ]N videos of T frames of H x W[ x C], L levels[, K classes (a 10, b 12, ...)]" */
static void print_summary(const char *out, const char *what, const nf_video_set *s)
{
    const nf_video_info *in = &s->info;
    printf("%s: %s%s%zu video%s of %d frame%s of %d x %d", out, what ? what : "", what ? ", " : "", s->n,
           s->n == 1 ? "" : "s", in->frames, in->frames == 1 ? "" : "s", in->h, in->w);
    if (in->c > 1) printf(" x %d", in->c);
    printf(", %d levels", in->levels);
    app_print_classes(s->labels, s->n, in->n_classes, s->class_names);
    printf("\n");
}


static int make_sprites(nf_video_set *s, const char *from, long n, int frames, int size, long seed)
{
    nf_image_set digits;
    NF_TRY(nf_image_digits(&digits, from));
    int rc = nf_video_sprites(s, &digits, (size_t)n, frames, size, (uint64_t)seed);
    nf_image_set_free(&digits);
    return rc;
}

int app_data_make_videos(int argc, char **argv)
{
    const char *cmd = "data make", *name = NULL, *out = NULL, *from = NULL;
    long n = VIDEOS_DEFAULT_N, seed = 1;
    int frames = NF_VIDEO_DEFAULT_FRAMES, size = NF_VIDEO_DEFAULT_SIZE, threads = 0;
    const flag_spec flags[] = {
        {.name = "--n", .alias = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = NF_VIDEO_GEN_MAX_N},
        {.name = "--frames", .kind = FLAG_INT, .dst = &frames, .lo = 1, .hi = NF_VIDEO_MAX_FRAMES},
        {.name = "--size", .kind = FLAG_INT, .dst = &size, .lo = NF_VIDEO_GEN_MIN_SIZE, .hi = NF_VIDEO_GEN_MAX_SIZE},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "--from", .kind = FLAG_STRING, .dst = &from},
        FLAG_THREADS(threads),
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = MAKE_VIDEOS_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the data set is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &name, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!name) return cli_usage_error(cmd, "no data set named (expected video-sprites or video-balls)");
    if (!app_is_video_name(name))
        return cli_usage_error(cmd, "unknown video data set '%s' (expected video-sprites or video-balls)", name);
    int sprites = !strcmp(name, "video-sprites");
    if (sprites && size < NF_VIDEO_SPRITE_MIN_SIZE)
        return cli_usage_error(cmd, "--size %d: video-sprites needs %d..%d (a 16 x 16 digit and room to move)", size,
                               NF_VIDEO_SPRITE_MIN_SIZE, NF_VIDEO_GEN_MAX_SIZE);
    if (!sprites && from) return cli_usage_error(cmd, "--from applies to video-sprites, not video-balls");
    double bytes = (double)n * frames * size * size * sizeof(double);
    if (bytes > 16e9)
        return cli_usage_error(cmd, "%ld videos of %d frames of %d x %d would take %.0f GB (expected at most 16 GB: "
                                    "fewer videos, frames or pixels)", n, frames, size, size, bytes / 1e9);
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (app_check_output(out) != NF_OK) return cli_fail(cmd);
    char found[PATH_MAX + 64];
    if (sprites && !from && !(from = app_find_digits(found, sizeof found))) return cli_fail(cmd);
    if (from && app_check_not_input(out, from, "digits file") != NF_OK) return cli_fail(cmd);
    cli_set_threads(threads);

    nf_video_set s = {0};
    int rc = sprites ? make_sprites(&s, from, n, frames, size, seed)
                     : nf_video_balls(&s, (size_t)n, frames, size, (uint64_t)seed);
    if (rc == NF_OK) rc = save_videos(out, &s, name, from, seed);
    if (rc == NF_OK) print_summary(out, name, &s);
    nf_video_set_free(&s);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- import ----------------------------------------------------------------------------------- */

int app_is_video_input(const char *path)
{
    FILE *fp = fopen(path, "rb");
    unsigned char magic[6] = {0};
    int npy = fp && fread(magic, 1, 6, fp) == 6 && !memcmp(magic, "\x93NUMPY", 6);
    if (fp) fclose(fp);
    size_t shape[NF_IMPORT_NPY_MAX_DIMS];
    int nd = 0;
    int video = npy && nf_import_npy_shape(path, shape, &nd) == NF_OK && nd == 5;
    nf_error_clear();
    return video;
}

int app_data_import_videos(int argc, char **argv)
{
    const char *cmd = "data import", *in = NULL, *out = NULL, *labels = NULL;
    int levels = 0, video = 0;
    const flag_spec flags[] = {
        {.name = "--video", .kind = FLAG_BOOL, .dst = &video},
        {.name = "--labels", .kind = FLAG_STRING, .dst = &labels},
        {.name = "--levels", .kind = FLAG_INT, .dst = &levels, .lo = 2, .hi = NF_VIDEO_MAX_LEVELS},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = IMPORT_VIDEOS_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!in) return cli_usage_error(cmd, "no input (expected a video NPY (n, T, H, W[, C]))");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o FILE.h5)");
    if (app_check_output(out) != NF_OK || app_check_not_input(out, in, "input file") != NF_OK ||
        app_check_not_input(out, labels, "labels file") != NF_OK)
        return cli_fail(cmd);
    nf_video_set s = {0};
    int rc = nf_video_import_npy(&s, in, labels, levels);
    if (rc == NF_OK) rc = save_videos(out, &s, "import", in, -1);
    if (rc == NF_OK) print_summary(out, NULL, &s);
    nf_video_set_free(&s);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- show ------------------------------------------------------------------------------------- */

int app_is_video_file(const char *path) { return app_x_has_attr(path, "video_shape"); }

int app_data_show_is_video(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *p = argv[i - 1];
        int value = i > 1 && p[0] == '-' && p[1] && !strchr(p, '='); /* argv[i] is a flag's value */
        if (argv[i][0] != '-' && !value && app_is_video_file(argv[i])) return 1;
    }
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* Videos [first, first + count) of a video file (clipped to its end) and its attributes. */
static int show_read(const char *path, size_t first, size_t count, nf_real **x, size_t *m, nf_video_info *info)
{
    size_t n = 0, cols = 0;
    NF_TRY(nf_video_info_read(path, info, &n));
    if (first >= n)
        return nf_error(NF_EINVAL, "%s: --first %zu, but the file holds %zu videos (expected 0..%zu)", path, first, n,
                        n ? n - 1 : 0);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    int rc = nf_h5_read_real_rows(f, "/x", first, count, x, m, &cols, NULL);
    nf_h5_close(f);
    return rc;
}

int app_data_show_video(int argc, char **argv)
{
    const char *cmd = "data show", *in = NULL, *out = NULL;
    long count = 0, first = 0;
    int scale = 0, cols = 0, delay = SHOW_DEFAULT_DELAY;
    const flag_spec flags[] = {
        {.name = "--n", .alias = "-n", .kind = FLAG_LONG, .dst = &count, .lo = 1, .hi = 10000},
        {.name = "--first", .kind = FLAG_LONG, .dst = &first, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "--scale", .kind = FLAG_INT, .dst = &scale, .lo = 1, .hi = 1000},
        {.name = "--cols", .kind = FLAG_INT, .dst = &cols, .lo = 1, .hi = 10000},
        {.name = "--delay", .kind = FLAG_INT, .dst = &delay, .lo = 1, .hi = 65535},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = SHOW_VIDEOS_HELP, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the input is already '%s')"};
    int urc = flags_parse(&c, argc, argv, &in, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!in) return cli_usage_error(cmd, "no input file (expected a video data file FILE.h5)");
    if (!out) return cli_usage_error(cmd, "no output file (expected -o OUT.png or -o OUT.gif)");
    int gif = ends_with(out, ".gif") || ends_with(out, ".GIF");
    if (!gif && !ends_with(out, ".png") && !ends_with(out, ".PNG"))
        return cli_usage_error(cmd, "output '%s': expected a .png (filmstrip) or .gif (animation) file", out);
    if (app_check_output(out) != NF_OK || app_check_not_input(out, in, "data file") != NF_OK) return cli_fail(cmd);
    if (!count) count = gif ? 1 : SHOW_PNG_DEFAULT_N;
    nf_real *x = NULL;
    size_t m = 0;
    nf_video_info info;
    int rc = show_read(in, (size_t)first, (size_t)count, &x, &m, &info);
    if (rc == NF_OK && !scale) {
        int side = info.h < info.w ? info.h : info.w, px = gif ? 128 : 64;
        scale = (px + side - 1) / side;
    }
    if (rc == NF_OK)
        rc = gif ? nf_video_gif_write_grid(out, x, (int)m, cols, info.frames, info.h, info.w, info.c, info.levels,
                                           scale, delay)
                 : nf_video_filmstrip_png(out, x, (int)m, info.frames, info.h, info.w, info.c, info.levels, scale);
    if (rc == NF_OK) {
        printf("%s: videos %zu..%zu of %s (%d frames of %d x %d", out, (size_t)first, (size_t)first + m - 1, in,
               info.frames, info.h, info.w);
        if (info.c > 1) printf(" x %d", info.c);
        printf(", %d levels", info.levels);
        if (info.n_classes) printf(", %d classes", info.n_classes);
        printf(")%s\n", gif ? ", animated GIF" : ", filmstrip");
    }
    free(x);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}
