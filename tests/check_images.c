/* tests/check_images.c - image data (datasets/images.h) and image grids (plot/image_grid.h): the
 * shapes generator (reproducible, balanced, integer levels, the classes' areas in the ratio of
 * their formulas), files written and read back with their labels and one-hot context, PNG folders
 * (written by the grid writer and by cairo) and NPY arrays of 3 and 4 dimensions in both orders,
 * the digits, and every error path with its message. */
#include <cairo.h>
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/h5.h"
#include "datasets/images.h"
#include "plot/image_grid.h"

static char tmpdir[256];

#define PI 3.14159265358979323846

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))
#define FAILS(expr, code, part)                                                                          \
    do {                                                                                                 \
        int rc_ = (expr);                                                                                \
        ck_assert_msg(rc_ == (code), "%s: code %d, expected %d (%s)", #expr, rc_, (code), nf_strerror_last()); \
        HAS(nf_strerror_last(), part);                                                                   \
    } while (0)

static void tmp_path(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", tmpdir, name); }

/* ---- shapes ---------------------------------------------------------------------------------- */

START_TEST(test_shapes_reproducible)
{
    nf_image_set a, b, c;
    omp_set_num_threads(1);
    OK(nf_image_shapes(&a, 16, 600, 11));
    omp_set_num_threads(2);
    OK(nf_image_shapes(&b, 16, 600, 11));   /* parallel drawing, same images */
    OK(nf_image_shapes(&c, 16, 600, 12));
    ck_assert_uint_eq(a.n, 600);
    ck_assert_int_eq(a.info.h, 16); ck_assert_int_eq(a.info.w, 16); ck_assert_int_eq(a.info.c, 1);
    ck_assert_int_eq(a.info.levels, 256); ck_assert_int_eq(a.info.n_classes, 3);
    ck_assert_str_eq(a.class_names[0], "disc"); ck_assert_str_eq(a.class_names[2], "triangle");
    ck_assert(!memcmp(a.x, b.x, 600 * 256 * sizeof *a.x));
    ck_assert(!memcmp(a.labels, b.labels, 600 * sizeof *a.labels));
    size_t differ = 0;
    for (size_t i = 0; i < 600 * 256; i++) differ += a.x[i] != c.x[i];
    ck_assert_msg(differ > 600 * 256 / 2, "seeds 11 and 12 differ in only %zu values", differ);
    nf_image_set_free(&a), nf_image_set_free(&b), nf_image_set_free(&c);
    ck_assert_ptr_null(a.x);
}
END_TEST

/* The background is the corner pixel (the shapes stay clear of it), the foreground the value
 * farthest from it (some pixel lies wholly inside every shape); the area in pixels is the summed
 * coverage |v - bg| / |fg - bg|. */
static double shape_area(const double *img, int side, int *contrast)
{
    double bg = img[0], fg = bg;
    for (int e = 0; e < side * side; e++)
        if (fabs(img[e] - bg) > fabs(fg - bg)) fg = img[e];
    double area = 0;
    for (int e = 0; e < side * side; e++) area += fabs(img[e] - bg) / fabs(fg - bg);
    *contrast = (int)fabs(fg - bg);
    return area;
}

START_TEST(test_shapes_classes)
{
    nf_image_set s;
    const size_t n = 3000;
    OK(nf_image_shapes(&s, 32, n, 5));
    OK(nf_image_check_values("shapes", &s.info, s.x, s.n));  /* integers 0..255 */
    double lo = 255, hi = 0, area[3] = {0};
    size_t count[3] = {0};
    for (size_t i = 0; i < n; i++) {
        const double *img = s.x + i * 1024;
        for (int e = 0; e < 1024; e++) lo = fmin(lo, img[e]), hi = fmax(hi, img[e]);
        int contrast;
        ck_assert_int_ge(s.labels[i], 0); ck_assert_int_le(s.labels[i], 2);
        area[s.labels[i]] += shape_area(img, 32, &contrast);
        count[s.labels[i]]++;
        ck_assert_int_ge(contrast, 96);
    }
    ck_assert(lo == 0 && hi == 255);
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(count[k] > n / 3 - 120 && count[k] < n / 3 + 120, "class %d: %zu of %zu images", k, count[k], n);
        area[k] /= (double)count[k];
    }
    /* the same circumradii: areas pi R^2, 2 R^2, 3 sqrt3/4 R^2 */
    double sq = area[1] / area[0], tri = area[2] / area[0];
    ck_assert_msg(area[0] > area[1] && area[1] > area[2], "areas %g %g %g", area[0], area[1], area[2]);
    ck_assert_msg(fabs(sq - 2 / PI) < 0.04, "square / disc area %g, expected %g", sq, 2 / PI);
    ck_assert_msg(fabs(tri - 3 * sqrt(3) / 4 / PI) < 0.04, "triangle / disc area %g, expected %g", tri,
                  3 * sqrt(3) / 4 / PI);
    nf_image_set_free(&s);
    FAILS(nf_image_shapes(&s, 24, 10, 1), NF_EINVAL, "expected 16 or 32");
}
END_TEST

/* ---- files --------------------------------------------------------------------------------- */

START_TEST(test_file_round_trip)
{
    char path[512];
    tmp_path(path, sizeof path, "shapes.h5");
    nf_image_set s, t;
    OK(nf_image_shapes(&s, 16, 40, 3));
    nf_h5 *f;
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_image_set_write(f, &s));
    OK(nf_h5_commit(f));
    OK(nf_image_set_load(path, &t));
    ck_assert_uint_eq(t.n, 40);
    ck_assert_int_eq(t.info.h, 16); ck_assert_int_eq(t.info.levels, 256); ck_assert_int_eq(t.info.n_classes, 3);
    ck_assert(!memcmp(s.x, t.x, 40 * 256 * sizeof *s.x));
    ck_assert(!memcmp(s.labels, t.labels, 40 * sizeof *s.labels));
    ck_assert_str_eq(t.class_names[1], "square");
    /* the one-hot context named class=NAME */
    OK(nf_h5_open(&f, path, "nf-data", 1));
    double *ctx;
    size_t rows, cols, nn;
    char **names;
    OK(nf_h5_read_double(f, "/context", &ctx, &rows, &cols));
    OK(nf_h5_read_strings(f, "/context_names", &names, &nn));
    ck_assert_uint_eq(rows, 40); ck_assert_uint_eq(cols, 3); ck_assert_uint_eq(nn, 3);
    ck_assert_str_eq(names[0], "class=disc"); ck_assert_str_eq(names[2], "class=triangle");
    for (size_t i = 0; i < 40; i++)
        for (size_t k = 0; k < 3; k++) ck_assert(ctx[i * 3 + k] == (k == (size_t)s.labels[i]));
    free(ctx);
    nf_h5_strings_free(names, nn);
    nf_h5_close(f);
    nf_image_set_free(&t);

    /* a value beyond the levels is refused, naming the image and pixel */
    s.x[5 * 256 + 3 * 16 + 7] = 256;
    tmp_path(path, sizeof path, "bad.h5");
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_image_set_write(f, &s));
    OK(nf_h5_commit(f));
    FAILS(nf_image_set_load(path, &t), NF_EDATA, "image 5, pixel (3, 7) channel 0 is 256 (expected an integer grey level 0..255)");
    ck_assert_ptr_null(t.x);
    /* a file without image attributes */
    tmp_path(path, sizeof path, "plain.h5");
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", s.x, 4, 256));
    OK(nf_h5_commit(f));
    FAILS(nf_image_set_load(path, &t), NF_EFORMAT, "no attribute image_shape");
    /* a shape that does not fit the columns */
    tmp_path(path, sizeof path, "wrong.h5");
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", s.x, 4, 256));
    int64_t shape[3] = {16, 8, 1};
    OK(nf_h5_attr_set_int64s(f, "/x", "image_shape", shape, 3));
    OK(nf_h5_commit(f));
    FAILS(nf_image_set_load(path, &t), NF_EFORMAT, "needs 128 (h*w*c)");
    nf_image_set_free(&s);
}
END_TEST

START_TEST(test_samples_save)
{
    char path[512];
    tmp_path(path, sizeof path, "samples.h5");
    nf_real x[2 * 12];
    for (int i = 0; i < 24; i++) x[i] = (nf_real)(0.25 * i);
    OK(nf_image_samples_save(path, x, 2, 2, 2, 3, 7));
    nf_h5 *f;
    OK(nf_h5_open(&f, path, "nf-data", 1));
    nf_image_info in;
    OK(nf_image_info_read(f, 2, 12, &in));
    ck_assert_int_eq(in.h, 2); ck_assert_int_eq(in.c, 3); ck_assert_int_eq(in.levels, 7);
    ck_assert_int_eq(in.n_classes, 0);
    nf_h5_close(f);
    FAILS(nf_image_samples_save(path, x, 2, 2, 2, 5, 7), NF_EINVAL, "1..4 channels");
}
END_TEST

/* ---- PNG folders ------------------------------------------------------------------------------ */

/* One image of s as a PNG of its own size (scale 1, no gap). */
static void write_png(const nf_image_set *s, size_t i, const char *path)
{
    nf_image_grid g = {.h = s->info.h, .w = s->info.w, .c = s->info.c, .levels = s->info.levels, .scale = 1,
                       .gap = -1};
    size_t d = nf_image_info_dim(&s->info);
    nf_real *x = malloc(d * sizeof *x);
    for (size_t e = 0; e < d; e++) x[e] = (nf_real)s->x[i * d + e];
    OK(nf_image_grid_write_png(path, &g, x, 1));
    free(x);
}

START_TEST(test_png_folder)
{
    char dir[512], sub[600], path[700];
    nf_image_set s, t;
    OK(nf_image_shapes(&s, 16, 7, 9));
    tmp_path(dir, sizeof dir, "pngs");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    /* classes from sub-folders, sorted: "a" (images 0..3), "b" (4..6); files sorted by name */
    const char *cls[2] = {"b", "a"};
    for (int k = 0; k < 2; k++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, cls[k]);
        ck_assert_int_eq(mkdir(sub, 0755), 0);
    }
    for (size_t i = 0; i < 7; i++) {
        snprintf(path, sizeof path, "%s/%s/img%zu.png", dir, i < 4 ? "a" : "b", 9 - i);
        write_png(&s, i, path);
    }
    OK(nf_image_import_png_dir(&t, dir, 0));
    ck_assert_uint_eq(t.n, 7);
    ck_assert_int_eq(t.info.h, 16); ck_assert_int_eq(t.info.c, 1); ck_assert_int_eq(t.info.n_classes, 2);
    ck_assert_str_eq(t.class_names[0], "a"); ck_assert_str_eq(t.class_names[1], "b");
    /* a: img6..img9 are images 3..0; b: img3..img5 are images 6..4 */
    const size_t order[7] = {3, 2, 1, 0, 6, 5, 4};
    for (size_t r = 0; r < 7; r++) {
        ck_assert_int_eq(t.labels[r], r < 4 ? 0 : 1);
        ck_assert_msg(!memcmp(t.x + r * 256, s.x + order[r] * 256, 256 * sizeof *s.x), "image %zu differs", r);
    }
    nf_image_set_free(&t);
    /* without sub-folders: no classes */
    snprintf(sub, sizeof sub, "%s/a", dir);
    OK(nf_image_import_png_dir(&t, sub, 0));
    ck_assert_uint_eq(t.n, 4);
    ck_assert_ptr_null(t.labels); ck_assert_int_eq(t.info.n_classes, 0);
    nf_image_set_free(&t);

    /* colour: grey is the luma; --rgb keeps the channels */
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 3, 2);
    cairo_t *cr = cairo_create(img);
    cairo_set_source_rgb(cr, 200 / 255.0, 100 / 255.0, 50 / 255.0);
    cairo_paint(cr);
    cairo_destroy(cr);
    tmp_path(sub, sizeof sub, "colour");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/c.png", sub);
    ck_assert_int_eq(cairo_surface_write_to_png(img, path), CAIRO_STATUS_SUCCESS);
    cairo_surface_destroy(img);
    OK(nf_image_import_png_dir(&t, sub, 0));
    ck_assert_int_eq(t.info.w, 3); ck_assert_int_eq(t.info.h, 2);
    ck_assert(t.x[0] == 124 && t.x[5] == 124);   /* 0.299 200 + 0.587 100 + 0.114 50 = 124.2 */
    nf_image_set_free(&t);
    OK(nf_image_import_png_dir(&t, sub, 1));
    ck_assert_int_eq(t.info.c, 3);
    ck_assert(t.x[0] == 200 && t.x[1] == 100 && t.x[2] == 50 && t.x[17] == 50);
    nf_image_set_free(&t);

    /* a file of another size: named, with the first */
    s.info.h = 8, s.info.w = 8;
    snprintf(path, sizeof path, "%s/a/img7b.png", dir);
    write_png(&s, 0, path);
    snprintf(sub, sizeof sub, "%s/a", dir);
    FAILS(nf_image_import_png_dir(&t, sub, 0), NF_EFORMAT, "img7b.png is 8 x 8 pixels (width x height), but ");
    HAS(nf_strerror_last(), "img6.png, the first image, is 16 x 16");
    ck_assert_ptr_null(t.x);
    /* PNG files beside sub-folders, an empty folder, a file that is not a PNG */
    snprintf(path, sizeof path, "%s/top.png", dir);
    write_png(&s, 1, path);
    FAILS(nf_image_import_png_dir(&t, dir, 0), NF_EFORMAT, "holds both PNG files (top.png) and sub-folders (a)");
    tmp_path(sub, sizeof sub, "empty");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    FAILS(nf_image_import_png_dir(&t, sub, 0), NF_EDATA, "no .png files and no sub-folders");
    snprintf(path, sizeof path, "%s/junk.png", sub);
    FILE *fp = fopen(path, "wb");
    fputs("not a png", fp);
    fclose(fp);
    FAILS(nf_image_import_png_dir(&t, sub, 0), NF_EFORMAT, "junk.png: cannot read the PNG");
    tmp_path(sub, sizeof sub, "missing");
    FAILS(nf_image_import_png_dir(&t, sub, 0), NF_EIO, "cannot open the folder");
    nf_image_set_free(&s);
}
END_TEST

/* ---- NPY ------------------------------------------------------------------------------------- */

/* An NPY 1.0 file: header for descr and shape, then n bytes of data. */
static void write_npy(const char *path, const char *descr, int fortran, const char *shape, const void *data, size_t n)
{
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                       fortran ? "True" : "False", shape);
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

START_TEST(test_npy_images)
{
    char path[512], lpath[512];
    nf_image_set t;
    /* (3, 2, 4) uint8: image r, pixel (i, j) = 10 r + 4 i + j */
    unsigned char u8[24];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) u8[r * 8 + i * 4 + j] = (unsigned char)(10 * r + 4 * i + j);
    tmp_path(path, sizeof path, "img3.npy");
    write_npy(path, "|u1", 0, "(3, 2, 4)", u8, sizeof u8);
    int64_t lab[3] = {2, 0, 2};
    tmp_path(lpath, sizeof lpath, "lab.npy");
    write_npy(lpath, "<i8", 0, "(3,)", lab, sizeof lab);
    OK(nf_image_import_npy(&t, path, lpath, 0));
    ck_assert_uint_eq(t.n, 3);
    ck_assert_int_eq(t.info.h, 2); ck_assert_int_eq(t.info.w, 4); ck_assert_int_eq(t.info.c, 1);
    ck_assert_int_eq(t.info.levels, 256); ck_assert_int_eq(t.info.n_classes, 3);
    ck_assert_str_eq(t.class_names[2], "2");
    for (int e = 0; e < 24; e++) ck_assert(t.x[e] == u8[e]);
    ck_assert_int_eq(t.labels[0], 2); ck_assert_int_eq(t.labels[1], 0);
    nf_image_set_free(&t);
    /* the same array in Fortran order: element (r, i, j) at r + 3 i + 6 j */
    unsigned char fo[24];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) fo[r + 3 * i + 6 * j] = u8[r * 8 + i * 4 + j];
    tmp_path(path, sizeof path, "img3f.npy");
    write_npy(path, "|u1", 1, "(3, 2, 4)", fo, sizeof fo);
    OK(nf_image_import_npy(&t, path, NULL, 40));
    ck_assert_int_eq(t.info.levels, 40);
    ck_assert_ptr_null(t.labels);
    for (int e = 0; e < 24; e++) ck_assert_msg(t.x[e] == u8[e], "entry %d: %g, expected %d", e, t.x[e], u8[e]);
    nf_image_set_free(&t);

    /* (2, 2, 2, 3) float32 NHWC: image r, pixel (i, j), channel k = 8 r + 4 i + 2 j + k (k < 3) */
    float f4[24];
    for (int e = 0; e < 24; e++) {
        int r = e / 12, i = e / 6 % 2, j = e / 3 % 2, k = e % 3;
        f4[e] = (float)(8 * r + 4 * i + 2 * j + k);
    }
    tmp_path(path, sizeof path, "img4.npy");
    write_npy(path, "<f4", 0, "(2, 2, 2, 3)", f4, sizeof f4);
    OK(nf_image_import_npy(&t, path, NULL, 17));
    ck_assert_int_eq(t.info.h, 2); ck_assert_int_eq(t.info.w, 2); ck_assert_int_eq(t.info.c, 3);
    for (int e = 0; e < 24; e++) ck_assert(t.x[e] == f4[e]);
    nf_image_set_free(&t);
    /* outside the levels: 16 is the last of 17, 17 is not; 2.5 is not a level */
    f4[13] = 17;
    write_npy(path, "<f4", 0, "(2, 2, 2, 3)", f4, sizeof f4);
    FAILS(nf_image_import_npy(&t, path, NULL, 17), NF_EDATA, "image 1, pixel (0, 0) channel 1 is 17 (expected an integer grey level 0..16)");
    ck_assert_ptr_null(t.x);
    f4[13] = 2.5f;
    write_npy(path, "<f4", 0, "(2, 2, 2, 3)", f4, sizeof f4);
    FAILS(nf_image_import_npy(&t, path, NULL, 17), NF_EDATA, "is 2.5");
    uint16_t u16[4] = {0, 255, 256, 3};
    tmp_path(path, sizeof path, "wide.npy");
    write_npy(path, "<u2", 0, "(1, 2, 2)", u16, sizeof u16);
    FAILS(nf_image_import_npy(&t, path, NULL, 0), NF_EDATA, "pixel (1, 0) channel 0 is 256");
    OK(nf_image_import_npy(&t, path, NULL, 300));
    nf_image_set_free(&t);
    /* a 2-D array is a table, not images; labels that do not fit */
    tmp_path(path, sizeof path, "flat.npy");
    write_npy(path, "|u1", 0, "(3, 8)", u8, sizeof u8);
    FAILS(nf_image_import_npy(&t, path, NULL, 0), NF_EFORMAT, "a 2-D array (expected images");
    tmp_path(path, sizeof path, "img3.npy");
    write_npy(lpath, "<i8", 0, "(2,)", lab, 2 * sizeof *lab);
    FAILS(nf_image_import_npy(&t, path, lpath, 0), NF_EFORMAT, "2 x 1 labels for 3 images");
    lab[1] = -1;
    write_npy(lpath, "<i8", 0, "(3,)", lab, sizeof lab);
    FAILS(nf_image_import_npy(&t, path, lpath, 0), NF_EDATA, "label of image 1 is -1");
}
END_TEST

/* ---- digits ---------------------------------------------------------------------------------- */

START_TEST(test_digits)
{
    nf_image_set t;
    const char *src = "data/digits.csv.gz";
    struct stat st;
    if (stat(src, &st) == 0) {
        OK(nf_image_digits(&t, src));
        ck_assert_uint_eq(t.n, 1797);
        ck_assert_int_eq(t.info.h, 8); ck_assert_int_eq(t.info.levels, 17); ck_assert_int_eq(t.info.n_classes, 10);
        OK(nf_image_check_values(src, &t.info, t.x, t.n));
        size_t count[10] = {0};
        for (size_t i = 0; i < t.n; i++) count[t.labels[i]]++;
        for (int k = 0; k < 10; k++) ck_assert_msg(count[k] >= 170 && count[k] <= 190, "digit %d: %zu", k, count[k]);
        ck_assert(t.x[2] == 5 && t.x[3] == 13 && t.labels[0] == 0);   /* the file's first line */
        nf_image_set_free(&t);
    } else {
        fprintf(stderr, "check_images: %s not found (run from the repository root); skipping the real digits\n", src);
    }
    char path[512], line[400];
    tmp_path(path, sizeof path, "bad_digits.csv.gz");
    gzFile gz = gzopen(path, "wb");
    int at = 0;
    for (int k = 0; k < 64; k++) at += snprintf(line + at, sizeof line - (size_t)at, "%d,", k % 17);
    snprintf(line + at, sizeof line - (size_t)at, "7\n");
    gzputs(gz, line);
    char line2[404];
    snprintf(line2, sizeof line2, "17%s", line + 1);   /* first pixel 17 */
    gzputs(gz, line2);
    gzclose(gz);
    FAILS(nf_image_digits(&t, path), NF_EDATA, "line 2, column 1 is 17 (expected a grey level 0..16)");
    gz = gzopen(path, "wb");
    gzputs(gz, "1,2,3\n");
    gzclose(gz);
    FAILS(nf_image_digits(&t, path), NF_EFORMAT, "line 1 has 3 values (expected 65");
    tmp_path(path, sizeof path, "none.csv.gz");
    FAILS(nf_image_digits(&t, path), NF_EIO, "none.csv.gz: cannot open");
}
END_TEST

/* ---- grids ---------------------------------------------------------------------------------- */

START_TEST(test_grid)
{
    char path[512];
    tmp_path(path, sizeof path, "grid.png");
    nf_real x[5 * 6];   /* five 2 x 3 grey images of 5 levels; values beyond are clamped */
    for (int e = 0; e < 30; e++) x[e] = (nf_real)(e % 7) - (nf_real)1.4;
    nf_image_grid g = {.h = 2, .w = 3, .c = 1, .levels = 5};
    OK(nf_image_grid_write_png(path, &g, x, 5));
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    ck_assert_int_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    /* 3 x 2 cells (ceil(sqrt 5) = 3 columns), scale 32 (64 px on the shorter side), gaps of 2 */
    ck_assert_int_eq(cairo_image_surface_get_width(img), 3 * 3 * 32 + 4 * 2);
    ck_assert_int_eq(cairo_image_surface_get_height(img), 2 * 2 * 32 + 3 * 2);
    const unsigned char *d = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
#define PX(xx, yy) (*(const uint32_t *)(d + (size_t)(yy) * stride + 4 * (size_t)(xx)) & 0xffffffu)
    /* image 1 (second cell), pixel (1, 2): x[6 + 5] = 11 % 7 - 1.4 = 2.6 -> level 3 of 0..4 -> 191 */
    int left = 2 + 1 * (3 * 32 + 2), top = 2;
    ck_assert_uint_eq(PX(left + 2 * 32 + 5, top + 32 + 7), 0xbfbfbfu);
    ck_assert_uint_eq(PX(2, 2), 0x000000u);     /* x[0] = -1.4, clamped to 0 */
    ck_assert_uint_eq(PX(0, 0), 0x404040u);     /* the gap */
    cairo_surface_destroy(img);
    /* an RGB image, explicit layout and scale */
    nf_real rgb[3] = {4, 0, 2};
    nf_image_grid gc = {.h = 1, .w = 1, .c = 3, .levels = 5, .rows = 1, .cols = 2, .scale = 3, .gap = -1};
    OK(nf_image_grid_write_png(path, &gc, rgb, 1));
    img = cairo_image_surface_create_from_png(path);
    ck_assert_int_eq(cairo_image_surface_get_width(img), 6);
    d = cairo_image_surface_get_data(img), stride = cairo_image_surface_get_stride(img);
    ck_assert_uint_eq(PX(1, 1), 0xff0080u);
    cairo_surface_destroy(img);
#undef PX
    gc.cols = 1, gc.rows = 1;
    FAILS(nf_image_grid_write_png(path, &gc, x, 2), NF_EINVAL, "1 x 1 cells cannot hold 2 images");
    gc.c = 2;
    FAILS(nf_image_grid_write_png(path, &gc, x, 1), NF_EINVAL, "2 channels");
    FAILS(nf_image_grid_write_png(path, &g, x, 0), NF_EINVAL, "no images");
    g.scale = 20000;
    FAILS(nf_image_grid_write_png(path, &g, x, 5), NF_EINVAL, "do not fit");
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/grid.png", tmpdir);
    g.scale = 0;
    FAILS(nf_image_grid_write_png(bad, &g, x, 5), NF_EIO, "cannot write PNG");
}
END_TEST

static Suite *images_suite(void)
{
    Suite *s = suite_create("images");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shapes_reproducible);
    tcase_add_test(tc, test_shapes_classes);
    tcase_add_test(tc, test_file_round_trip);
    tcase_add_test(tc, test_samples_save);
    tcase_add_test(tc, test_png_folder);
    tcase_add_test(tc, test_npy_images);
    tcase_add_test(tc, test_digits);
    tcase_add_test(tc, test_grid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_images_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    SRunner *sr = srunner_create(images_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "check_images: could not remove %s\n", tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
