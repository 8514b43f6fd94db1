/* tests/check_videos.c - video data (datasets/videos.h) and video pictures (plot/video_out.h): the
 * video-sprites and video-balls generators (reproducible whatever the threads, integer levels,
 * exact reflecting-box motion seen in the centre of mass), files written and read back with their
 * labels and one-hot context, the attribute checks and their messages, NPY import of 4-D and 5-D
 * arrays, an animated GIF read back with giflib (frames, size, greys, loop and delay), a filmstrip
 * PNG read back with cairo, and the error paths (nothing left behind). */
#include <cairo.h>
#include <check.h>
#include <dirent.h>
#include <gif_lib.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/videos.h"
#include "plot/video_out.h"

static char tmpdir[256];

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))
#define FAILS(expr, code, part)                                                                          \
    do {                                                                                                 \
        int rc_ = (expr);                                                                                \
        ck_assert_msg(rc_ == (code), "%s: code %d, expected %d (%s)", #expr, rc_, (code), nf_strerror_last()); \
        HAS(nf_strerror_last(), part);                                                                   \
    } while (0)

static void tmp_path(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", tmpdir, name); }

/* Files in tmpdir whose names contain ".tmp" (left-over temporaries). */
static int stray_tmp(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}

/* 10 synthetic 8 x 8 "digits" with 17 levels: digit k a k+1 pixel bar at a known place. */
static void fake_digits(nf_image_set *d)
{
    memset(d, 0, sizeof *d);
    d->info = (nf_image_info){.h = 8, .w = 8, .c = 1, .levels = 17, .n_classes = 10};
    d->n = 10;
    d->x = calloc(10 * 64, sizeof *d->x);
    d->labels = malloc(10 * sizeof *d->labels);
    d->class_names = calloc(10, sizeof *d->class_names);
    for (int k = 0; k < 10; k++) {
        d->labels[k] = k;
        d->class_names[k] = malloc(12);
        snprintf(d->class_names[k], 12, "%d", k);
        for (int j = 0; j <= k && j < 8; j++) d->x[k * 64 + 3 * 8 + j] = 16 - k;
        d->x[k * 64 + 6 * 8 + 1] = 7;
    }
}

/* Intensity centre of mass (x right, y down) of one frame. */
static void com(const double *f, int h, int w, double *cx, double *cy)
{
    double m = 0, sx = 0, sy = 0;
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++) {
            double v = f[i * w + j];
            m += v, sx += v * (j + 0.5), sy += v * (i + 0.5);
        }
    *cx = sx / m, *cy = sy / m;
}

/* ---- generators ------------------------------------------------------------------------------ */

START_TEST(test_sprites)
{
    nf_image_set dg;
    fake_digits(&dg);
    nf_video_set a, b, c;
    omp_set_num_threads(1);
    OK(nf_video_sprites(&a, &dg, 300, 12, 28, 5));
    omp_set_num_threads(2);
    OK(nf_video_sprites(&b, &dg, 300, 12, 28, 5));
    OK(nf_video_sprites(&c, &dg, 300, 12, 28, 6));
    ck_assert_int_eq(a.info.frames, 12); ck_assert_int_eq(a.info.h, 28); ck_assert_int_eq(a.info.w, 28);
    ck_assert_int_eq(a.info.c, 1); ck_assert_int_eq(a.info.levels, 17); ck_assert_int_eq(a.info.n_classes, 10);
    ck_assert_uint_eq(nf_video_info_dim(&a.info), 12 * 28 * 28);
    size_t d = nf_video_info_dim(&a.info);
    ck_assert(!memcmp(a.x, b.x, 300 * d * sizeof *a.x));
    ck_assert(!memcmp(a.labels, b.labels, 300 * sizeof *a.labels));
    size_t differ = 0;
    for (size_t i = 0; i < 300 * d; i++) differ += a.x[i] != c.x[i];
    ck_assert_msg(differ > 300 * 12 * 20, "seeds 5 and 6 differ in only %zu values", differ);
    OK(nf_video_check_values("sprites", &a.info, a.x, a.n));
    /* every frame is the 2x digit of the label pasted at an integer place: the same mass, and the
     * centre of mass moves by whole pixels, at most 3 a frame, constant away from the walls (a step
     * that meets a wall folds back, so may be shorter, even 0) */
    int bounces = 0, steady = 0;
    for (size_t r = 0; r < a.n; r++) {
        double m0 = 0, want = 0;
        for (int e = 0; e < 64; e++) want += 4 * dg.x[a.labels[r] * 64 + e];
        double px = 0, py = 0, pdx = 0, pdy = 0;
        for (int t = 0; t < 12; t++) {
            const double *f = a.x + r * d + (size_t)t * 28 * 28;
            double m = 0;
            for (int e = 0; e < 28 * 28; e++) m += f[e];
            if (t == 0) m0 = m;
            ck_assert_msg(m == m0 && m == want, "video %zu frame %d: mass %g, expected %g", r, t, m, want);
            double x, y;
            com(f, 28, 28, &x, &y);
            if (t > 0) {
                double dx = x - px, dy = y - py;
                ck_assert_msg(fabs(dx - round(dx)) < 1e-9 && fabs(dy - round(dy)) < 1e-9 &&
                              fabs(dx) < 3 + 1e-9 && fabs(dy) < 3 + 1e-9,
                              "video %zu frame %d: centre moved by (%.17g, %.17g)", r, t, dx, dy);
                dx = round(dx), dy = round(dy);
                if (t > 1) {
                    if (dx * pdx < 0 || dy * pdy < 0) bounces++;
                    else if (dx == pdx && dy == pdy) steady++;
                }
                pdx = dx, pdy = dy;
            }
            px = x, py = y;
        }
    }
    ck_assert_msg(bounces > 100 && steady > 1000, "%d bounces, %d steady steps", bounces, steady);
    nf_video_set_free(&a), nf_video_set_free(&b), nf_video_set_free(&c);
    FAILS(nf_video_sprites(&a, &dg, 10, 4, 18, 1), NF_EINVAL, "frame size 18 (expected 20..256");
    FAILS(nf_video_sprites(&a, &dg, 10, 0, 32, 1), NF_EINVAL, "0 frames");
    FAILS(nf_video_sprites(&a, NULL, 10, 4, 32, 1), NF_EINVAL, "no digits");
    dg.info.levels = 256;
    FAILS(nf_video_sprites(&a, &dg, 10, 4, 32, 1), NF_EINVAL, "expected 8 x 8 x 1 grey images with 17 levels");
    nf_image_set_free(&dg);
}
END_TEST

START_TEST(test_balls)
{
    nf_video_set a, b;
    omp_set_num_threads(1);
    OK(nf_video_balls(&a, 200, 16, 32, 9));
    omp_set_num_threads(2);
    OK(nf_video_balls(&b, 200, 16, 32, 9));
    size_t d = nf_video_info_dim(&a.info);
    ck_assert_uint_eq(d, 16 * 32 * 32);
    ck_assert_int_eq(a.info.levels, 256); ck_assert_int_eq(a.info.n_classes, 2);
    ck_assert_str_eq(a.class_names[0], "1"); ck_assert_str_eq(a.class_names[1], "2");
    ck_assert(!memcmp(a.x, b.x, 200 * d * sizeof *a.x));
    OK(nf_video_check_values("balls", &a.info, a.x, a.n));
    /* one disc: the centre of mass moves in a straight line at constant speed between bounces, and
     * a bounce keeps each component's speed: |dx| at most the largest |dx| seen, which most steps
     * reach (the anti-aliased centre is within 0.05 pixels of the true one) */
    int ones = 0;
    for (size_t r = 0; r < a.n; r++) {
        if (a.labels[r] != 0) continue;
        ones++;
        double x[16], y[16];
        for (int t = 0; t < 16; t++) com(a.x + r * d + (size_t)t * 1024, 32, 32, &x[t], &y[t]);
        double mx = 0, my = 0;
        int at_x = 0, at_y = 0;
        for (int t = 1; t < 16; t++) {
            mx = fmax(mx, fabs(x[t] - x[t - 1]));
            my = fmax(my, fabs(y[t] - y[t - 1]));
        }
        double speed = hypot(mx, my);
        ck_assert_msg(speed > 0.9 && speed < 2.6, "video %zu: speed %g (expected 1..2.5)", r, speed);
        for (int t = 1; t < 16; t++) {
            at_x += fabs(fabs(x[t] - x[t - 1]) - mx) < 0.1;
            at_y += fabs(fabs(y[t] - y[t - 1]) - my) < 0.1;
        }
        ck_assert_msg(at_x >= 8 && at_y >= 8, "video %zu: only %d, %d of 15 steps at full speed", r, at_x, at_y);
    }
    ck_assert_msg(ones > 60 && ones < 140, "%d one-disc videos of 200", ones);
    nf_video_set_free(&a), nf_video_set_free(&b);
    FAILS(nf_video_balls(&a, 0, 16, 32, 1), NF_EINVAL, "0 videos");
    FAILS(nf_video_balls(&a, 5, 16, 8, 1), NF_EINVAL, "frame size 8 (expected 16..256");
}
END_TEST

/* ---- files ----------------------------------------------------------------------------------- */

START_TEST(test_file_round_trip)
{
    nf_video_set s, t;
    OK(nf_video_balls(&s, 30, 5, 16, 2));
    char path[512];
    tmp_path(path, sizeof path, "v.h5");
    nf_h5 *f;
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_video_set_write(f, &s));
    OK(nf_h5_commit(f));
    nf_video_info info;
    size_t n = 0;
    OK(nf_video_info_read(path, &info, &n));
    ck_assert_uint_eq(n, 30);
    ck_assert_int_eq(info.frames, 5); ck_assert_int_eq(info.h, 16); ck_assert_int_eq(info.w, 16);
    ck_assert_int_eq(info.c, 1); ck_assert_int_eq(info.levels, 256); ck_assert_int_eq(info.n_classes, 2);
    OK(nf_video_set_load(path, &t));
    ck_assert_uint_eq(t.n, 30);
    ck_assert(!memcmp(s.x, t.x, 30 * nf_video_info_dim(&s.info) * sizeof *s.x));
    ck_assert(!memcmp(s.labels, t.labels, 30 * sizeof *s.labels));
    ck_assert_str_eq(t.class_names[1], "2");
    OK(nf_h5_open(&f, path, "nf-data", 1));
    ck_assert_int_eq(nf_video_file_is(f), 1);
    double *ctx;
    size_t rows, cols;
    OK(nf_h5_read_double(f, "/context", &ctx, &rows, &cols));
    ck_assert_uint_eq(rows, 30); ck_assert_uint_eq(cols, 2);
    for (size_t i = 0; i < 30; i++) ck_assert(ctx[i * 2 + (size_t)s.labels[i]] == 1 && ctx[i * 2 + 1 - (size_t)s.labels[i]] == 0);
    free(ctx);
    char **names;
    OK(nf_h5_read_strings(f, "/context_names", &names, &rows));
    ck_assert_str_eq(names[0], "class=1");
    nf_h5_strings_free(names, rows);
    int64_t shape[4];
    OK(nf_h5_attr_get_int64s(f, "/x", "video_shape", shape, 4));
    ck_assert(shape[0] == 5 && shape[1] == 16 && shape[2] == 16 && shape[3] == 1);
    ck_assert_int_eq(nf_h5_attr_exists(f, "/x", "image_shape"), 0);
    nf_h5_close(f);
    nf_video_set_free(&s), nf_video_set_free(&t);
}
END_TEST

/* A file with /x (n, d) and the given video_shape (NULL: none) and levels (0: none). */
static void bad_file(const char *path, size_t n, size_t d, const int64_t *shape, int64_t levels)
{
    nf_h5 *f;
    double *x = calloc(n * d, sizeof *x);
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", x, n, d));
    if (shape) OK(nf_h5_attr_set_int64s(f, "/x", "video_shape", shape, 4));
    if (levels) OK(nf_h5_attr_set_int64(f, "/x", "levels", levels));
    OK(nf_h5_commit(f));
    free(x);
}

START_TEST(test_info_errors)
{
    char path[512];
    nf_video_info info;
    size_t n;
    tmp_path(path, sizeof path, "bad.h5");
    bad_file(path, 3, 12, NULL, 0);
    FAILS(nf_video_info_read(path, &info, &n), NF_EFORMAT, "bad.h5:/x has no attribute video_shape");
    const int64_t s1[4] = {2, 2, 2, 1};
    bad_file(path, 3, 12, s1, 256);
    FAILS(nf_video_info_read(path, &info, &n), NF_EFORMAT, "has 12 columns but video_shape (2, 2, 2, 1) needs 8");
    const int64_t s2[4] = {3, 2, 2, 1};
    bad_file(path, 3, 12, s2, 1);
    FAILS(nf_video_info_read(path, &info, &n), NF_EFORMAT, "levels is 1 (expected 2..65536)");
    const int64_t s3[4] = {3, 2, 2, 5};
    bad_file(path, 3, 60, s3, 4);
    FAILS(nf_video_info_read(path, &info, &n), NF_EFORMAT, "1..4 channels");
    bad_file(path, 3, 12, s2, 4);
    OK(nf_video_info_read(path, &info, &n));
    ck_assert_int_eq(info.frames, 3);
    ck_assert_int_eq(info.n_classes, 0);
    nf_video_set s;
    OK(nf_video_set_load(path, &s));
    ck_assert_ptr_null(s.labels);
    nf_video_set_free(&s);
    tmp_path(path, sizeof path, "missing.h5");
    ck_assert_int_ne(nf_video_info_read(path, &info, &n), NF_OK);
    HAS(nf_strerror_last(), "missing.h5");
}
END_TEST

static void write_npy(const char *path, const char *descr, const char *shape, const void *data, size_t n)
{
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    unsigned hl = (unsigned)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
    fputc((int)(hl & 255), fp), fputc((int)(hl >> 8), fp);
    fwrite(hdr, 1, (size_t)len, fp);
    for (int i = 0; i < pad; i++) fputc(' ', fp);
    fputc('\n', fp);
    fwrite(data, 1, n, fp);
    fclose(fp);
}

START_TEST(test_npy)
{
    char path[512], lpath[512];
    unsigned char u8[2 * 3 * 2 * 2 * 2];
    for (size_t i = 0; i < sizeof u8; i++) u8[i] = (unsigned char)(i * 5 % 40);
    tmp_path(path, sizeof path, "v5.npy");
    write_npy(path, "|u1", "(2, 3, 2, 2, 2)", u8, sizeof u8);
    int64_t lab[2] = {1, 0};
    tmp_path(lpath, sizeof lpath, "lab.npy");
    write_npy(lpath, "<i8", "(2,)", lab, sizeof lab);
    nf_video_set s;
    OK(nf_video_import_npy(&s, path, lpath, 40));
    ck_assert_uint_eq(s.n, 2);
    ck_assert(s.info.frames == 3 && s.info.h == 2 && s.info.w == 2 && s.info.c == 2 && s.info.levels == 40);
    for (size_t i = 0; i < sizeof u8; i++) ck_assert(s.x[i] == u8[i]);
    ck_assert_int_eq(s.info.n_classes, 2);
    ck_assert(s.labels[0] == 1 && s.labels[1] == 0);
    nf_video_set_free(&s);
    tmp_path(path, sizeof path, "v4.npy");
    write_npy(path, "|u1", "(3, 2, 2, 4)", u8, 3 * 16);
    OK(nf_video_import_npy(&s, path, NULL, 0));
    ck_assert(s.n == 3 && s.info.frames == 2 && s.info.h == 2 && s.info.w == 4 && s.info.c == 1 &&
              s.info.levels == 256);
    nf_video_set_free(&s);
    FAILS(nf_video_import_npy(&s, path, NULL, 30), NF_EDATA, "video 0, frame 0, pixel (1, 2) channel 0 is 30");
    tmp_path(path, sizeof path, "v3.npy");
    write_npy(path, "|u1", "(3, 2, 8)", u8, 48);
    FAILS(nf_video_import_npy(&s, path, NULL, 0), NF_EFORMAT, "a 3-D array (expected videos");
    tmp_path(path, sizeof path, "v5.npy");
    write_npy(path, "|u1", "(2, 3, 2, 2, 2)", u8, sizeof u8);
    tmp_path(lpath, sizeof lpath, "lab3.npy");
    write_npy(lpath, "<i8", "(1,)", lab, 8);
    FAILS(nf_video_import_npy(&s, path, lpath, 40), NF_EFORMAT, "1 x 1 labels for 2 videos");
}
END_TEST

/* ---- pictures -------------------------------------------------------------------------------- */

/* A video (T, h, w) with distinct values per frame and pixel, in 0..levels-1. */
static nf_real *test_video(int n, int T, int h, int w, int levels)
{
    nf_real *x = malloc((size_t)n * T * h * w * sizeof *x);
    for (size_t i = 0; i < (size_t)n * T * h * w; i++) x[i] = (nf_real)((i * 7 + i / 13) % (size_t)levels);
    return x;
}

START_TEST(test_gif)
{
    const int T = 5, h = 6, w = 7, levels = 17, s = 3;
    nf_real *x = test_video(1, T, h, w, levels);
    x[0] = (nf_real)-3.2;   /* clamped to 0 */
    x[1] = (nf_real)40.0;   /* clamped to 16 */
    x[2] = (nf_real)7.6;    /* rounded to 8 */
    char path[512];
    tmp_path(path, sizeof path, "v.gif");
    OK(nf_video_gif_write(path, x, T, h, w, 1, levels, s, 12));
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(DGifSlurp(g), GIF_OK);
    ck_assert_int_eq(g->ImageCount, T);
    ck_assert_int_eq(g->SWidth, w * s);
    ck_assert_int_eq(g->SHeight, h * s);
    ck_assert_ptr_nonnull(g->SColorMap);
    ck_assert_int_eq(g->SColorMap->ColorCount, 256);
    for (int t = 0; t < T; t++) {
        SavedImage *im = &g->SavedImages[t];
        ck_assert(im->ImageDesc.Width == w * s && im->ImageDesc.Height == h * s);
        GraphicsControlBlock gcb;
        ck_assert_int_eq(DGifSavedExtensionToGCB(g, t, &gcb), GIF_OK);
        ck_assert_int_eq(gcb.DelayTime, 12);
        for (int i = 0; i < h * s; i++)
            for (int j = 0; j < w * s; j++) {
                double v = x[(size_t)t * h * w + (size_t)(i / s) * w + j / s];
                v = v < 0 ? 0 : v > levels - 1 ? levels - 1 : round(v);
                int want = (int)lround(v * 255.0 / (levels - 1));
                GifColorType col = g->SColorMap->Colors[im->RasterBits[i * w * s + j]];
                ck_assert_msg(col.Red == want && col.Green == want && col.Blue == want,
                              "frame %d pixel (%d, %d): grey %d, expected %d", t, i, j, col.Red, want);
            }
    }
    int loop = 0; /* the NETSCAPE2.0 block, before the first frame's graphics control */
    for (int e = 0; e < g->SavedImages[0].ExtensionBlockCount; e++) {
        ExtensionBlock *b = &g->SavedImages[0].ExtensionBlocks[e];
        if (b->Function == APPLICATION_EXT_FUNC_CODE && b->ByteCount == 11 && !memcmp(b->Bytes, "NETSCAPE2.0", 11)) {
            ExtensionBlock *sub = b + 1;
            loop = sub->ByteCount == 3 && sub->Bytes[0] == 1 && sub->Bytes[1] == 0 && sub->Bytes[2] == 0;
        }
    }
    ck_assert_msg(loop, "no NETSCAPE2.0 loop-forever extension");
    DGifCloseFile(g, &err);
    free(x);
    /* a grid of 3 videos: 2 columns, a 2-pixel gap */
    x = test_video(3, T, h, w, levels);
    OK(nf_video_gif_write_grid(path, x, 3, 0, T, h, w, 1, levels, 1, 5));
    g = DGifOpenFileName(path, &err);
    ck_assert_int_eq(DGifSlurp(g), GIF_OK);
    ck_assert_int_eq(g->SWidth, 2 * w + 3 * 2);
    ck_assert_int_eq(g->SHeight, 2 * h + 3 * 2);
    ck_assert_int_eq(g->SColorMap->Colors[g->SavedImages[0].RasterBits[0]].Red, NF_VIDEO_GIF_GAP_GREY);
    /* video 2 (row 1, column 0), frame 4, pixel (1, 2) */
    int idx = g->SavedImages[4].RasterBits[(2 + h + 2 + 1) * g->SWidth + 2 + 2];
    double v = x[2 * (size_t)T * h * w + 4 * (size_t)h * w + 1 * w + 2];
    ck_assert_int_eq(g->SColorMap->Colors[idx].Red, (int)lround(v * 255.0 / (levels - 1)));
    DGifCloseFile(g, &err);
    free(x);
    ck_assert_int_eq(stray_tmp(), 0);
}
END_TEST

START_TEST(test_gif_errors)
{
    nf_real *x = test_video(1, 2, 3, 3, 4);
    char path[512];
    tmp_path(path, sizeof path, "nodir/v.gif");
    FAILS(nf_video_gif_write(path, x, 2, 3, 3, 1, 4, 1, 10), NF_EIO, "nodir/v.gif");
    tmp_path(path, sizeof path, "e.gif");
    FAILS(nf_video_gif_write(path, x, 2, 3, 3, 2, 4, 1, 10), NF_EINVAL, "2 channels (expected 1, grey, or 3, RGB)");
    FAILS(nf_video_gif_write(path, x, 0, 3, 3, 1, 4, 1, 10), NF_EINVAL, "0 frames");
    FAILS(nf_video_gif_write(path, x, 2, 3, 3, 1, 4, 0, 10), NF_EINVAL, "scale 0");
    FAILS(nf_video_gif_write(path, x, 2, 3, 3, 1, 4, 1, -1), NF_EINVAL, "delay -1");
    FAILS(nf_video_gif_write(path, x, 2, 3, 3, 1, 4, 30000, 10), NF_EINVAL, "at most 65535 a side");
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_null(fp);
    /* colour is drawn as its luma: pure red 255 -> round(0.299 * 255) = 76 */
    const nf_real rgb[2 * 3] = {255, 0, 0, 0, 0, 255};
    OK(nf_video_gif_write(path, rgb, 2, 1, 1, 3, 256, 1, 10));
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(DGifSlurp(g), GIF_OK);
    ck_assert_int_eq(g->ImageCount, 2);
    ck_assert_int_eq(g->SColorMap->Colors[g->SavedImages[0].RasterBits[0]].Red, 76);
    ck_assert_int_eq(g->SColorMap->Colors[g->SavedImages[1].RasterBits[0]].Red, 29);
    DGifCloseFile(g, &err);
    ck_assert_int_eq(stray_tmp(), 0);
    free(x);
}
END_TEST

START_TEST(test_filmstrip)
{
    const int n = 3, T = 4, h = 5, w = 6, levels = 256, s = 2;
    nf_real *x = test_video(n, T, h, w, levels);
    char path[512];
    tmp_path(path, sizeof path, "strip.png");
    OK(nf_video_filmstrip_png(path, x, n, T, h, w, 1, levels, s));
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    ck_assert_int_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    int W = cairo_image_surface_get_width(img), H = cairo_image_surface_get_height(img);
    ck_assert_int_eq(W, T * w * s + (T + 1) * 2);
    ck_assert_int_eq(H, n * h * s + (n + 1) * 2);
    /* video 2, frame 3, pixel (4, 5): row 2, column 3 of the strip */
    const unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    int top = 2 + 2 * (h * s + 2) + 4 * s, left = 2 + 3 * (w * s + 2) + 5 * s;
    uint32_t px = *(const uint32_t *)(data + (size_t)top * stride + 4 * (size_t)left);
    double v = x[2 * (size_t)T * h * w + 3 * (size_t)h * w + 4 * w + 5];
    ck_assert_int_eq((int)(px & 0xff), (int)v);
    cairo_surface_destroy(img);
    tmp_path(path, sizeof path, "nodir/strip.png");
    ck_assert_int_eq(nf_video_filmstrip_png(path, x, n, T, h, w, 1, levels, s), NF_EIO);
    tmp_path(path, sizeof path, "strip2.png");
    FAILS(nf_video_filmstrip_png(path, x, n, T, h, w, 4, levels, s), NF_EINVAL, "4 channels");
    ck_assert_int_eq(stray_tmp(), 0);
    free(x);
}
END_TEST

static Suite *videos_suite(void)
{
    Suite *s = suite_create("videos");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sprites);
    tcase_add_test(tc, test_balls);
    tcase_add_test(tc, test_file_round_trip);
    tcase_add_test(tc, test_info_errors);
    tcase_add_test(tc, test_npy);
    tcase_add_test(tc, test_gif);
    tcase_add_test(tc, test_gif_errors);
    tcase_add_test(tc, test_filmstrip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_videos_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    SRunner *sr = srunner_create(videos_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "check_videos: could not remove %s\n", tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
