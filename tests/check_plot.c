/* tests/check_plot.c - the plot layer: colour maps, nice ticks, figures written as PNG and read back,
 * heat-map pixels against the colour map, histograms, lines, pair plots and the error paths. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "plot/plot.h"

/* ---- helpers ---- */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_plot_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Remove every file in tmpdir, then tmpdir itself. */
static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        if (rmdir(path) != 0) unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Whole file into a malloc'd buffer. */
static unsigned char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)*len);
    ck_assert_int_eq(fread(buf, 1, (size_t)*len, f), *len);
    fclose(f);
    return buf;
}

/* The 0xRRGGBB of pixel (x, y) of an image read back from PNG. */
static unsigned pixel_rgb(cairo_surface_t *s, int x, int y)
{
    unsigned char *d = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s);
    return ((const uint32_t *)(d + (size_t)y * stride))[x] & 0xffffffu;
}

static int channel_diff(unsigned a, unsigned b)
{
    int m = 0;
    for (int sh = 0; sh <= 16; sh += 8) {
        int d = abs((int)((a >> sh) & 0xff) - (int)((b >> sh) & 0xff));
        if (d > m) m = d;
    }
    return m;
}

static unsigned rgb_hex(const double rgb[3])
{
    return (unsigned)lround(rgb[0] * 255) << 16 | (unsigned)lround(rgb[1] * 255) << 8 |
           (unsigned)lround(rgb[2] * 255);
}

/* Points from two Gaussian blobs, seeded. */
static double *blobs(size_t n, uint64_t seed)
{
    double *pts = malloc(2 * n * sizeof *pts);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < n; i++) {
        int c = i % 3 == 0;
        pts[2 * i] = (c ? 1.3 : -0.9) + 0.55 * nf_rng_normal(r);
        pts[2 * i + 1] = (c ? 0.6 : -1.1) + 0.45 * nf_rng_normal(r);
    }
    nf_rng_free(r);
    return pts;
}

/* The heat-map grid used by the rendering tests: 12 x 9 cells over [-2, 3] x [-1.5, 2.5]. */
enum { HX = 12, HY = 9 };
static const double HX0 = -2.0, HX1 = 3.0, HY0 = -1.5, HY1 = 2.5, VMIN = -3.5, VMAX = 3.5;

static void fill_grid(double *z, double sign)
{
    for (int j = 0; j < HY; j++)
        for (int i = 0; i < HX; i++) z[j * HX + i] = sign * (2.385 * sin(0.7 * i) + 0.9 * cos(0.45 * j + 0.3));
}

/* The three-panel figure: a 2-D histogram, a heat map of z with its colour bar, a scatter. */
static nf_figure *three_panels(const double *z, const double *pts, size_t n, int bilinear)
{
    nf_figure *fig = nf_figure_alloc(1080, 380, 1, 3);
    ck_assert_ptr_nonnull(fig);
    nf_panel *p = nf_figure_panel(fig, 0, 0);
    ck_assert_int_eq(nf_panel_set_limits(p, -3.0, 3.0, -3.0, 3.0), NF_OK);
    nf_heatmap_opts hopts = {.colorbar_label = "count"};
    ck_assert_int_eq(nf_panel_hist2d(p, pts, pts + 1, n, 2, 40, 40, 0, &hopts), NF_OK);
    nf_panel_set_title(p, "2-D histogram");
    nf_panel_set_xlabel(p, "x1");
    nf_panel_set_ylabel(p, "x2");
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_OK);

    p = nf_figure_panel(fig, 0, 1);
    ck_assert_int_eq(nf_panel_set_limits(p, HX0, HX1, HY0, HY1), NF_OK);
    nf_heatmap_opts o = {.vmin = VMIN, .vmax = VMAX, .bilinear = bilinear, .colorbar_label = "log density"};
    ck_assert_int_eq(nf_panel_heatmap(p, z, HX, HY, &o), NF_OK);
    nf_panel_set_title(p, "heat map");
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_OK);

    p = nf_figure_panel(fig, 0, 2);
    ck_assert_int_eq(nf_panel_set_limits(p, -3.0, 3.0, -3.0, 3.0), NF_OK);
    nf_rgba c = nf_plot_color(0);
    c.a = 0.4;
    ck_assert_int_eq(nf_panel_scatter(p, pts, pts + 1, n, 2, c, 0.0, "data"), NF_OK);
    nf_panel_set_title(p, "scatter");
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_OK);
    ck_assert_int_eq(nf_panel_legend(p, NF_LEGEND_UPPER_LEFT), NF_OK);
    return fig;
}

/* Save fig under tmpdir/name and read it back. */
static cairo_surface_t *save_and_load(nf_figure *fig, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", tmpdir, name);
    int rc = nf_figure_save_png(fig, path);
    ck_assert_msg(rc == NF_OK, "save %s: %s", path, nf_strerror_last());
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    ck_assert_int_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    cairo_surface_flush(img);
    return img;
}

/* ---- colour maps ---- */

START_TEST(test_colormap_endpoints)
{
    double rgb[3];
    nf_colormap_rgb(nf_colormap_viridis, 0.0, rgb);
    ck_assert_int_le(channel_diff(rgb_hex(rgb), 0x440154), 1);
    ck_assert(fabs(rgb[0] - 0x44 / 255.0) <= 1.0 / 255 && fabs(rgb[2] - 0x54 / 255.0) <= 1.0 / 255);
    nf_colormap_rgb(nf_colormap_viridis, 1.0, rgb);
    ck_assert(fabs(rgb[0] - 0xfd / 255.0) <= 1.0 / 255 && fabs(rgb[1] - 0xe7 / 255.0) <= 1.0 / 255 &&
              fabs(rgb[2] - 0x25 / 255.0) <= 1.0 / 255);
    nf_colormap_rgb(nf_colormap_magma, 0.0, rgb);
    ck_assert_int_le(channel_diff(rgb_hex(rgb), 0x000004), 1);
    nf_colormap_rgb(nf_colormap_magma, 1.0, rgb);
    ck_assert_int_le(channel_diff(rgb_hex(rgb), 0xfcfdbf), 1);
    /* the middle of viridis is its teal (#21918c) */
    nf_colormap_rgb(NULL, 0.5, rgb);
    ck_assert_int_le(channel_diff(rgb_hex(rgb), 0x21918c), 1);
    /* clamping: below 0, NaN and -inf give the first colour, above 1 the last */
    double lo[3], hi[3];
    nf_colormap_rgb(nf_colormap_viridis, 0.0, lo);
    nf_colormap_rgb(nf_colormap_viridis, 1.0, hi);
    const double below[3] = {-2.385, NAN, -INFINITY};
    for (int k = 0; k < 3; k++) {
        nf_colormap_rgb(nf_colormap_viridis, below[k], rgb);
        ck_assert(rgb[0] == lo[0] && rgb[1] == lo[1] && rgb[2] == lo[2]);
    }
    nf_colormap_rgb(nf_colormap_viridis, 2.385, rgb);
    ck_assert(rgb[0] == hi[0] && rgb[1] == hi[1] && rgb[2] == hi[2]);
}
END_TEST

/* Perceptually uniform maps rise steadily in lightness: the relative luminance of viridis and magma
 * increases along the map. */
START_TEST(test_colormap_lightness_and_lookup)
{
    const nf_colormap *maps[2] = {nf_colormap_viridis, nf_colormap_magma};
    for (int m = 0; m < 2; m++) {
        double prev = -1.0;
        for (int k = 0; k <= 40; k++) {
            double rgb[3];
            nf_colormap_rgb(maps[m], k / 40.0, rgb);
            double y = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
            ck_assert_msg(y > prev, "%s: luminance falls at t = %g", maps[m]->name, k / 40.0);
            prev = y;
        }
    }
    ck_assert_ptr_eq(nf_colormap_by_name("viridis"), nf_colormap_viridis);
    ck_assert_ptr_eq(nf_colormap_by_name("magma"), nf_colormap_magma);
    ck_assert_ptr_null(nf_colormap_by_name("jet"));
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "jet"));
    nf_rgba c = nf_rgba_hex(0x1f77b4, 0.35);
    ck_assert(fabs(c.r - 0x1f / 255.0) < 1e-12 && fabs(c.b - 0xb4 / 255.0) < 1e-12 && c.a == 0.35);
    nf_rgba c0 = nf_plot_color(0), c10 = nf_plot_color(10), c1 = nf_plot_color(1);
    ck_assert(c0.r == c10.r && c0.g == c10.g && c0.b == c10.b);
    ck_assert(c0.r != c1.r);
}
END_TEST

/* ---- ticks ---- */

static void expect_ticks(double lo, double hi, int target, const double *want, int n, double step)
{
    nf_ticks t;
    ck_assert_int_eq(nf_ticks_nice(&t, lo, hi, target), NF_OK);
    ck_assert_msg(t.n == n, "[%g, %g]: %d ticks, expected %d", lo, hi, t.n, n);
    ck_assert_msg(fabs(t.step - step) <= 1e-12 * step, "[%g, %g]: step %g, expected %g", lo, hi, t.step, step);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(t.v[i] - want[i]) <= 1e-12 * step, "[%g, %g]: tick %d is %.17g, expected %g", lo, hi, i,
                      t.v[i], want[i]);
}

START_TEST(test_nice_ticks)
{
    expect_ticks(0.0, 1.0, 5, (const double[]){0.0, 0.2, 0.4, 0.6, 0.8, 1.0}, 6, 0.2);
    expect_ticks(-4.0, 4.0, 5, (const double[]){-4.0, -2.0, 0.0, 2.0, 4.0}, 5, 2.0);
    expect_ticks(0.001, 0.0042, 5, (const double[]){0.001, 0.002, 0.003, 0.004}, 4, 0.001);
    expect_ticks(-0.37, 2.385, 6, (const double[]){0.0, 0.5, 1.0, 1.5, 2.0}, 5, 0.5);
    expect_ticks(1730.0, 1990.0, 6, (const double[]){1750.0, 1800.0, 1850.0, 1900.0, 1950.0}, 5, 50.0);
    /* 0.6 is the double nearest 6/10, not 3 * 0.2 */
    nf_ticks t;
    ck_assert_int_eq(nf_ticks_nice(&t, 0.0, 1.0, 5), NF_OK);
    ck_assert(t.v[3] == 0.6);

    ck_assert_int_eq(nf_ticks_nice(&t, 2.385, 2.385, 5), NF_EINVAL);
    ck_assert_int_eq(nf_ticks_nice(&t, 3.0, -1.0, 5), NF_EINVAL);
    ck_assert_int_eq(nf_ticks_nice(&t, NAN, 1.0, 5), NF_EINVAL);
    ck_assert_int_eq(nf_ticks_nice(&t, 0.0, INFINITY, 5), NF_EINVAL);
    ck_assert_int_eq(nf_ticks_nice(&t, 0.0, 1.0, 0), NF_EINVAL);
    ck_assert_int_eq(nf_ticks_nice(&t, 1e15, 1e15 + 0.25, 5), NF_EINVAL);
}
END_TEST

START_TEST(test_tick_labels)
{
    char s[32];
    nf_ticks_label(s, sizeof s, 3 * 0.2, 0.2);
    ck_assert_str_eq(s, "0.6");
    nf_ticks_label(s, sizeof s, -4.0, 2.0);
    ck_assert_str_eq(s, "-4");
    nf_ticks_label(s, sizeof s, 0.0042, 0.0002);
    ck_assert_str_eq(s, "0.0042");
    nf_ticks_label(s, sizeof s, 0.003, 0.001);
    ck_assert_str_eq(s, "0.003");
    nf_ticks_label(s, sizeof s, -2.7e-17, 0.2);          /* rounding noise at zero */
    ck_assert_str_eq(s, "0.0");
    nf_ticks_label(s, sizeof s, 1950.0, 50.0);
    ck_assert_str_eq(s, "1950");
    nf_ticks_label(s, sizeof s, 2e6, 1e6);
    ck_assert_str_eq(s, "2e6");
    nf_ticks_label(s, sizeof s, -2.5e6, 5e5);
    ck_assert_str_eq(s, "-2.5e6");
    nf_ticks_label(s, sizeof s, 4.2e-5, 1e-6);
    ck_assert_str_eq(s, "4.2e-5");
}
END_TEST

START_TEST(test_ranges)
{
    const double v[] = {2.385, NAN, -1.25, 9.0, INFINITY, 0.5, -7.0};
    double lo, hi;
    ck_assert_int_eq(nf_plot_range(&lo, &hi, v, 7, 1), NF_OK);
    ck_assert(lo == -7.0 && hi == 9.0);
    ck_assert_int_eq(nf_plot_range(&lo, &hi, v, 3, 2), NF_OK);   /* 2.385, -1.25, INFINITY */
    ck_assert(lo == -1.25 && hi == 2.385);
    const double none[] = {NAN, INFINITY};
    ck_assert_int_eq(nf_plot_range(&lo, &hi, none, 2, 1), NF_EDATA);
    lo = -1.0, hi = 3.0;
    nf_plot_pad_range(&lo, &hi, 0.05);
    ck_assert(fabs(lo + 1.2) < 1e-12 && fabs(hi - 3.2) < 1e-12);
    lo = hi = 2.5;
    nf_plot_pad_range(&lo, &hi, 0.05);
    ck_assert(lo < 2.5 && hi > 2.5);
}
END_TEST

/* ---- histograms ---- */

START_TEST(test_histogram_counts)
{
    /* x in [0, 2] with 4 bins of width 0.5; y in [-1, 1] with 2 bins */
    const double pts[] = {0.1, -0.9, 0.6, 0.2, 0.6, 0.3, 2.0, 1.0, 2.1, 0.0, NAN, 0.0, 1.2, -0.4};
    double c[8];
    size_t inside = 0;
    ck_assert_int_eq(nf_plot_hist2d_counts(c, 4, 2, 0.0, 2.0, -1.0, 1.0, pts, pts + 1, 7, 2, &inside), NF_OK);
    ck_assert_uint_eq(inside, 5);
    const double want[8] = {1, 0, 1, 0, 0, 2, 0, 1};    /* row 0 (y < 0), then row 1 */
    for (int k = 0; k < 8; k++) ck_assert_msg(c[k] == want[k], "cell %d: %g, expected %g", k, c[k], want[k]);

    double x[7] = {0.1, 0.6, 0.6, 2.0, 2.1, NAN, 1.2}, d[4];
    ck_assert_int_eq(nf_plot_hist_density(d, 4, 0.0, 2.0, x, 7, 1), NF_OK);
    /* 6 finite values, bin width 0.5: density = count / 3 */
    const double wd[4] = {1 / 3.0, 2 / 3.0, 1 / 3.0, 1 / 3.0};
    double mass = 0.0;
    for (int b = 0; b < 4; b++) {
        ck_assert(fabs(d[b] - wd[b]) < 1e-12);
        mass += 0.5 * d[b];
    }
    ck_assert(fabs(mass - 5.0 / 6.0) < 1e-12);           /* the fraction of finite values inside */
    ck_assert_int_eq(nf_plot_hist_density(d, 0, 0.0, 2.0, x, 7, 1), NF_EINVAL);
    ck_assert_int_eq(nf_plot_hist2d_counts(c, 4, 2, 1.0, 1.0, -1.0, 1.0, pts, pts + 1, 7, 2, NULL), NF_EINVAL);
}
END_TEST

/* ---- figures ---- */

START_TEST(test_three_panel_png)
{
    make_tmpdir();
    size_t n = 1500;
    double *pts = blobs(n, 11), z[HX * HY];
    fill_grid(z, 1.0);
    nf_figure *fig = three_panels(z, pts, n, 0);
    char path[256], path2[256];
    cairo_surface_t *img = save_and_load(fig, "three.png", path, sizeof path);
    ck_assert_int_eq(cairo_image_surface_get_width(img), 1080);
    ck_assert_int_eq(cairo_image_surface_get_height(img), 380);
    ck_assert_uint_eq(pixel_rgb(img, 2, 2), 0xffffff);                 /* white background */
    /* the colour bar of the heat map runs from viridis's yellow (top) to its purple (bottom) */
    nf_panel *p = nf_figure_panel(fig, 0, 1);
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    int bar_x = (int)(x + w + 12 + 7);
    ck_assert_int_le(channel_diff(pixel_rgb(img, bar_x, (int)y + 2), 0xfde725), 8);
    ck_assert_int_le(channel_diff(pixel_rgb(img, bar_x, (int)(y + h) - 3), 0x440154), 8);
    cairo_surface_destroy(img);
    nf_figure_free(fig);

    /* deterministic: the same calls give the same bytes */
    fig = three_panels(z, pts, n, 0);
    snprintf(path2, sizeof path2, "%s/three_again.png", tmpdir);
    ck_assert_int_eq(nf_figure_save_png(fig, path2), NF_OK);
    nf_figure_free(fig);
    long la, lb;
    unsigned char *a = read_file(path, &la), *b = read_file(path2, &lb);
    ck_assert_int_eq(la, lb);
    ck_assert(memcmp(a, b, (size_t)la) == 0);
    ck_assert(memcmp(a, "\x89PNG\r\n\x1a\n", 8) == 0);
    free(a), free(b), free(pts);
    remove_tmpdir();
}
END_TEST

/* Each heat-map cell is painted with the colour map at its value; changing the values changes the
 * heat-map panel and nothing in the scatter panel. */
START_TEST(test_heatmap_pixels)
{
    make_tmpdir();
    size_t n = 600;
    double *pts = blobs(n, 5), z1[HX * HY], z2[HX * HY];
    fill_grid(z1, 1.0);
    fill_grid(z2, -1.0);
    nf_figure *f1 = three_panels(z1, pts, n, 0), *f2 = three_panels(z2, pts, n, 0), *f3 = three_panels(z1, pts, n, 1);
    char path[256];
    cairo_surface_t *i1 = save_and_load(f1, "z1.png", path, sizeof path);
    cairo_surface_t *i2 = save_and_load(f2, "z2.png", path, sizeof path);
    cairo_surface_t *i3 = save_and_load(f3, "z1_bilinear.png", path, sizeof path);

    nf_panel *hp = nf_figure_panel(f1, 0, 1);
    for (int j = 0; j < HY; j++)
        for (int i = 0; i < HX; i++) {
            double u, v, rgb[3];
            nf_panel_to_pixel(hp, HX0 + (i + 0.5) * (HX1 - HX0) / HX, HY0 + (j + 0.5) * (HY1 - HY0) / HY, &u, &v);
            nf_colormap_rgb(nf_colormap_viridis, (z1[j * HX + i] - VMIN) / (VMAX - VMIN), rgb);
            unsigned got = pixel_rgb(i1, (int)u, (int)v);
            ck_assert_msg(channel_diff(got, rgb_hex(rgb)) <= 1, "cell (%d, %d): pixel %06x, expected %06x", i, j, got,
                          rgb_hex(rgb));
            nf_colormap_rgb(nf_colormap_viridis, (z2[j * HX + i] - VMIN) / (VMAX - VMIN), rgb);
            ck_assert_int_le(channel_diff(pixel_rgb(i2, (int)u, (int)v), rgb_hex(rgb)), 1);
        }
    double x, y, w, h;
    nf_panel_plot_rect(hp, &x, &y, &w, &h);
    long changed = 0, smooth = 0, total = 0;
    for (int v = (int)y + 1; v < (int)(y + h) - 1; v++)
        for (int u = (int)x + 1; u < (int)(x + w) - 1; u++, total++) {
            changed += pixel_rgb(i1, u, v) != pixel_rgb(i2, u, v);
            smooth += pixel_rgb(i1, u, v) != pixel_rgb(i3, u, v);
        }
    ck_assert_msg(changed > total * 8 / 10, "only %ld of %ld heat-map pixels changed", changed, total);
    ck_assert_msg(smooth > total / 4, "bilinear differs from nearest in only %ld of %ld pixels", smooth, total);
    /* the scatter panel does not depend on the heat map */
    nf_panel *sp = nf_figure_panel(f1, 0, 2);
    nf_panel_plot_rect(sp, &x, &y, &w, &h);
    for (int v = (int)y; v < (int)(y + h); v += 3)
        for (int u = (int)x; u < (int)(x + w); u += 3) ck_assert_uint_eq(pixel_rgb(i1, u, v), pixel_rgb(i2, u, v));
    cairo_surface_destroy(i1), cairo_surface_destroy(i2), cairo_surface_destroy(i3);
    nf_figure_free(f1), nf_figure_free(f2), nf_figure_free(f3);
    free(pts);
    remove_tmpdir();
}
END_TEST

/* A 2-D histogram with every point in one cell shows that cell in the top colour and the rest in the
 * bottom colour; NaN heat-map cells stay transparent (white background). */
START_TEST(test_hist2d_and_nan_cells)
{
    nf_figure *fig = nf_figure_alloc(700, 320, 1, 2);
    ck_assert_ptr_nonnull(fig);
    nf_panel *p = nf_figure_panel(fig, 0, 0);
    ck_assert_int_eq(nf_panel_set_limits(p, 0.0, 4.0, 0.0, 2.0), NF_OK);
    double pts[10] = {2.6, 1.3, 2.7, 1.2, 2.55, 1.45, 9.0, 9.0, 2.9, 1.1};   /* one outside */
    ck_assert_int_eq(nf_panel_hist2d(p, pts, pts + 1, 5, 2, 4, 2, 0, NULL), NF_OK);
    nf_panel *q = nf_figure_panel(fig, 0, 1);
    ck_assert_int_eq(nf_panel_set_limits(q, 0.0, 1.0, 0.0, 1.0), NF_OK);
    double z[4] = {0.25, NAN, -INFINITY, INFINITY};
    ck_assert_int_eq(nf_panel_heatmap(q, z, 2, 2, &(nf_heatmap_opts){.vmin = 0.0, .vmax = 1.0}), NF_OK);
    cairo_surface_t *s = cairo_get_target(nf_figure_cairo(fig));
    cairo_surface_flush(s);
    double u, v;
    nf_panel_to_pixel(p, 2.5, 1.5, &u, &v);                /* the full cell [2, 3] x [1, 2] */
    ck_assert_int_le(channel_diff(pixel_rgb(s, (int)u, (int)v), 0xfde725), 1);
    nf_panel_to_pixel(p, 0.5, 0.5, &u, &v);
    ck_assert_int_le(channel_diff(pixel_rgb(s, (int)u, (int)v), 0x440154), 1);
    nf_panel_to_pixel(q, 0.75, 0.25, &u, &v);              /* NaN: background shows */
    ck_assert_uint_eq(pixel_rgb(s, (int)u, (int)v), 0xffffff);
    nf_panel_to_pixel(q, 0.25, 0.75, &u, &v);              /* -inf: the bottom colour */
    ck_assert_int_le(channel_diff(pixel_rgb(s, (int)u, (int)v), 0x440154), 1);
    nf_panel_to_pixel(q, 0.75, 0.75, &u, &v);              /* +inf: the top colour */
    ck_assert_int_le(channel_diff(pixel_rgb(s, (int)u, (int)v), 0xfde725), 1);
    nf_figure_free(fig);
}
END_TEST

/* Count pixels of the plot area within 12/255 of colour c. */
static long count_colour(nf_figure *fig, nf_panel *p, unsigned c)
{
    cairo_surface_t *s = cairo_get_target(nf_figure_cairo(fig));
    cairo_surface_flush(s);
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    long n = 0;
    for (int v = (int)y; v < (int)(y + h); v++)
        for (int u = (int)x; u < (int)(x + w); u++) n += channel_diff(pixel_rgb(s, u, v), c) <= 12;
    return n;
}

START_TEST(test_line_plot)
{
    nf_figure *fig = nf_figure_alloc(640, 400, 1, 1);
    nf_panel *p = nf_figure_panel(fig, 0, 0);
    double step[120], train[120], valid[120];
    for (int i = 0; i < 120; i++) {
        step[i] = 25.0 * i;
        train[i] = 2.385 * exp(-i / 30.0) + 1.1;
        valid[i] = i == 60 ? NAN : 2.385 * exp(-i / 35.0) + 1.3;    /* a gap */
    }
    ck_assert_int_eq(nf_panel_set_limits(p, 0.0, 3000.0, 1.0, 3.6), NF_OK);
    ck_assert_int_eq(nf_panel_line(p, step, train, 120, 1, nf_plot_color(0), 0.0, "train"), NF_OK);
    ck_assert_int_eq(nf_panel_line(p, step, valid, 120, 1, nf_plot_color(1), 0.0, "validation"), NF_OK);
    ck_assert_int_eq(nf_panel_line(p, NULL, valid, 120, 1, nf_plot_color(2), 0.0, NULL), NF_OK);   /* x = index */
    nf_panel_set_title(p, "training");
    nf_panel_set_xlabel(p, "step");
    nf_panel_set_ylabel(p, "negative log-likelihood");
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_OK);
    ck_assert_int_eq(nf_panel_legend(p, NF_LEGEND_UPPER_RIGHT), NF_OK);
    ck_assert_int_gt(count_colour(fig, p, 0x1f77b4), 150);
    ck_assert_int_gt(count_colour(fig, p, 0xff7f0e), 150);
    ck_assert_int_gt(count_colour(fig, p, 0x2ca02c), 20);
    ck_assert_int_eq(nf_panel_legend(p, 17), NF_EINVAL);
    /* the legend holds NF_LEGEND_MAX entries */
    for (int i = 2; i < NF_LEGEND_MAX; i++)
        ck_assert_int_eq(nf_panel_legend_add(p, NF_LEGEND_LINE, nf_plot_color(i), "more"), NF_OK);
    ck_assert_int_eq(nf_panel_legend_add(p, NF_LEGEND_LINE, nf_plot_color(9), "too many"), NF_EINVAL);
    nf_figure_free(fig);
}
END_TEST

START_TEST(test_hist1d_overlay_and_pairplot)
{
    size_t n = 2000;
    int k = 3;
    double *a = malloc(n * k * sizeof *a), *b = malloc(n * k * sizeof *b);
    nf_rng *r = nf_rng_alloc(23, 0);
    for (size_t i = 0; i < n * k; i++) a[i] = 1.3 * nf_rng_normal(r), b[i] = 0.4 + 1.6 * nf_rng_normal(r);
    nf_rng_free(r);

    nf_figure *fig = nf_figure_alloc(420, 320, 1, 1);
    nf_panel *p = nf_figure_panel(fig, 0, 0);
    ck_assert_int_eq(nf_panel_set_limits(p, -5.0, 5.0, 0.0, 0.45), NF_OK);
    nf_rgba ca = nf_plot_color(0);
    ck_assert_int_eq(nf_panel_hist1d(p, a, n, k, 25, ca, NF_BARS_FILLED, "data"), NF_OK);
    ck_assert_int_eq(nf_panel_hist1d(p, b, n, k, 25, nf_plot_color(1), NF_BARS_STEP, "samples"), NF_OK);
    ck_assert_int_eq(nf_panel_hist1d(p, b, n, k, 25, nf_plot_color(1), 7, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_OK);
    ck_assert_int_eq(nf_panel_legend(p, NF_LEGEND_UPPER_RIGHT), NF_OK);
    ck_assert_int_gt(count_colour(fig, p, 0x1f77b4), 1000);
    ck_assert_int_gt(count_colour(fig, p, 0xff7f0e), 200);
    nf_figure_free(fig);

    fig = nf_figure_alloc(3 * 220, 3 * 220, 3, 3);
    nf_pairplot_opts o = {.names = (const char *const[]){"u", "v", "w"}, .max_points = 700};
    ck_assert_int_eq(nf_figure_pairplot(fig, a, n, b, n, k, &o), NF_OK);
    ck_assert_int_gt(count_colour(fig, nf_figure_panel(fig, 1, 1), 0xff7f0e), 100);     /* step line */
    ck_assert_int_gt(count_colour(fig, nf_figure_panel(fig, 2, 0), 0xffffff), 100);     /* not all ink */
    nf_figure_free(fig);
    fig = nf_figure_alloc(2 * 220, 2 * 220, 2, 2);
    ck_assert_int_eq(nf_figure_pairplot(fig, a, n, NULL, 0, 2, NULL), NF_OK);           /* one set only */
    ck_assert_int_eq(nf_figure_pairplot(fig, a, n, b, n, 3, NULL), NF_EINVAL);          /* grid is 2 x 2 */
    nf_figure_free(fig);
    fig = nf_figure_alloc(2 * 220, 2 * 220, 2, 2);
    for (size_t i = 0; i < n; i++) a[i * 2 + 1] = NAN;
    ck_assert_int_eq(nf_figure_pairplot(fig, a, n, NULL, 0, 2, NULL), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "dimension 2"));
    nf_figure_free(fig);
    free(a), free(b);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_save_errors)
{
    make_tmpdir();
    nf_figure *fig = nf_figure_alloc(300, 200, 1, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/no_such_dir/out.png", tmpdir);
    ck_assert_int_eq(nf_figure_save_png(fig, path), NF_EIO);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), path));
    ck_assert(!file_exists(path));
    /* the path is a directory: the rename fails, and the temporary file goes too */
    snprintf(path, sizeof path, "%s/a_directory", tmpdir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(nf_figure_save_png(fig, path), NF_EIO);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), path));
    ck_assert_int_eq(count_entries(tmpdir), 1);
    ck_assert_int_eq(nf_figure_save_png(fig, ""), NF_EINVAL);
    /* an existing file is replaced whole */
    snprintf(path, sizeof path, "%s/old.png", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("not a png", f);
    fclose(f);
    ck_assert_int_eq(nf_figure_save_png(fig, path), NF_OK);
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    ck_assert_int_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    ck_assert_int_eq(cairo_image_surface_get_width(img), 300);
    cairo_surface_destroy(img);
    ck_assert_int_eq(count_entries(tmpdir), 2);
    nf_figure_free(fig);
    remove_tmpdir();
}
END_TEST

START_TEST(test_argument_errors)
{
    ck_assert_ptr_null(nf_figure_alloc(0, 200, 1, 1));
    ck_assert_ptr_null(nf_figure_alloc(300, 200, 0, 1));
    ck_assert_ptr_null(nf_figure_alloc(300, 200, 4, 4));          /* 75 x 50 cells are too small */
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "75 x 50"));
    nf_figure_free(NULL);

    nf_figure *fig = nf_figure_alloc(600, 300, 1, 2);
    ck_assert_int_eq(nf_figure_width(fig), 600);
    ck_assert_int_eq(nf_figure_rows(fig), 1);
    ck_assert_ptr_null(nf_figure_panel(fig, 1, 0));
    ck_assert_ptr_null(nf_figure_panel(fig, 0, -1));
    nf_panel *p = nf_figure_panel(fig, 0, 0);
    double z[6] = {0.5, 1.5, 2.5, 3.5, 4.5, 5.5};
    ck_assert_int_eq(nf_panel_heatmap(p, z, 3, 2, NULL), NF_EINVAL);      /* no limits yet */
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "limits"));
    ck_assert_int_eq(nf_panel_draw_axes(p), NF_EINVAL);
    ck_assert_int_eq(nf_panel_set_limits(p, 1.0, 1.0, 0.0, 1.0), NF_EINVAL);
    ck_assert_int_eq(nf_panel_set_limits(p, 0.0, 1.0, NAN, 1.0), NF_EINVAL);
    ck_assert_int_eq(nf_panel_set_limits(p, -1.0, 2.0, -0.5, 0.75), NF_OK);
    ck_assert_int_eq(nf_panel_heatmap(p, z, 0, 2, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_heatmap(p, NULL, 3, 2, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_heatmap(p, z, 3, 2, &(nf_heatmap_opts){.vmin = 2.0, .vmax = 1.0}), NF_EINVAL);
    ck_assert_int_eq(nf_panel_scatter(p, z, z + 1, 3, 2, (nf_rgba){0.2, 0.4, 1.5, 1.0}, 0.0, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_scatter(p, z, z + 1, 3, 2, nf_plot_color(3), 0.0, NULL), NF_OK);
    /* a colour bar cannot come after something else was drawn: it would move the plot area */
    double x0, w0, x1, w1;
    nf_panel_plot_rect(p, &x0, NULL, &w0, NULL);
    ck_assert_int_eq(nf_panel_heatmap(p, z, 3, 2, &(nf_heatmap_opts){.colorbar_label = "late"}), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "colour bar"));
    nf_panel *q = nf_figure_panel(fig, 0, 1);
    ck_assert_int_eq(nf_panel_set_limits(q, -1.0, 2.0, -0.5, 0.75), NF_OK);
    ck_assert_int_eq(nf_panel_heatmap(q, z, 3, 2, &(nf_heatmap_opts){.colorbar_label = ""}), NF_OK);
    nf_panel_plot_rect(q, &x1, NULL, &w1, NULL);
    ck_assert(w1 < w0 - 60.0);                                    /* the bar took its room */
    ck_assert_int_eq(nf_panel_bars(q, z, 3, 0.0, 1.0, nf_plot_color(0), NF_BARS_FILLED, NULL), NF_OK);
    ck_assert_int_eq(nf_panel_bars(q, z, 3, 1.0, 0.0, nf_plot_color(0), NF_BARS_FILLED, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_line(NULL, z, z, 3, 1, nf_plot_color(0), 0.0, NULL), NF_EINVAL);
    ck_assert_int_eq(nf_panel_hist2d(q, z, z, 3, 1, 0, 4, 0, NULL), NF_EINVAL);
    nf_figure_free(fig);
}
END_TEST

/* fontconfig, which cairo asks for DejaVu Sans, keeps the configuration it parses for the life of
 * the process and never frees all of it; tell LeakSanitizer (SANITIZE=1) that this is not ours.
 * Other builds never call the hook. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libfontconfig.so\n";
}
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}

static Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("plot");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_colormap_endpoints);
    tcase_add_test(tc, test_colormap_lightness_and_lookup);
    tcase_add_test(tc, test_nice_ticks);
    tcase_add_test(tc, test_tick_labels);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_histogram_counts);
    tcase_add_test(tc, test_three_panel_png);
    tcase_add_test(tc, test_heatmap_pixels);
    tcase_add_test(tc, test_hist2d_and_nan_cells);
    tcase_add_test(tc, test_line_plot);
    tcase_add_test(tc, test_hist1d_overlay_and_pairplot);
    tcase_add_test(tc, test_save_errors);
    tcase_add_test(tc, test_argument_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(plot_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
