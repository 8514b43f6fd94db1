/* plot/heatmap.c - gridded values through a colour map, scaled into the plot area; colour bars;
 * 2-D histograms. */
#include "plot/heatmap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "plot/plot_internal.h"

#define NF_HEATMAP_MAX_SIDE 32767

/* One opaque ARGB32 pixel (cairo's native-endian 0xAARRGGBB) for t in [0, 1]. */
static uint32_t cmap_pixel(const nf_colormap *cm, double t)
{
    double rgb[3];
    nf_colormap_rgb(cm, t, rgb);
    uint32_t r = (uint32_t)lround(rgb[0] * 255.0), g = (uint32_t)lround(rgb[1] * 255.0),
             b = (uint32_t)lround(rgb[2] * 255.0);
    return 0xff000000u | r << 16 | g << 8 | b;
}

/* Paint image (iw x ih pixels) into the rectangle (x, y, w, h), its top row at y. */
static void paint_image(cairo_t *cr, cairo_surface_t *img, int iw, int ih, double x, double y, double w,
                        double h, int bilinear)
{
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_clip(cr);
    cairo_translate(cr, x, y);
    cairo_scale(cr, w / iw, h / ih);
    cairo_set_source_surface(cr, img, 0.0, 0.0);
    cairo_pattern_t *pat = cairo_get_source(cr);
    cairo_pattern_set_filter(pat, bilinear ? CAIRO_FILTER_BILINEAR : CAIRO_FILTER_NEAREST);
    cairo_pattern_set_extend(pat, CAIRO_EXTEND_PAD);
    cairo_rectangle(cr, 0.0, 0.0, iw, ih);
    cairo_fill(cr);
    cairo_restore(cr);
}

/* The colour bar to the right of the plot area: the map from vmin (bottom) to vmax (top), its
 * ticks and labels, and the label turned to read upwards beside them. */
static int draw_colorbar(nf_panel *p, const nf_colormap *cm, double vmin, double vmax, const char *label)
{
    cairo_t *cr = p->fig->cr;
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    double bx = x + w + NF_COLORBAR_GAP, bw = NF_COLORBAR_WIDTH;
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, NF_COLORMAP_SIZE);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return nf_error(NF_ENOMEM, "colour bar: cairo could not create its image");
    }
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int k = 0; k < NF_COLORMAP_SIZE; k++)
        *(uint32_t *)(data + (size_t)k * stride) = cmap_pixel(cm, 1.0 - (double)k / (NF_COLORMAP_SIZE - 1));
    cairo_surface_mark_dirty(img);
    paint_image(cr, img, 1, NF_COLORMAP_SIZE, bx, y, bw, h, 1);
    cairo_surface_destroy(img);

    cairo_save(cr);
    nf_plot_set_rgba(cr, nf_rgba_hex(NF_INK, 1.0));
    cairo_set_line_width(cr, 1.0);
    cairo_rectangle(cr, bx + 0.5, y + 0.5, bw - 1.0, h - 1.0);
    cairo_stroke(cr);
    nf_ticks t;
    double label_w = 0.0;
    nf_plot_axis_ticks(cr, &t, vmin, vmax, h, 0, &label_w);
    for (int i = 0; i < t.n; i++) {
        double v = y + h - (t.v[i] - vmin) / (vmax - vmin) * h;
        v = fmin(fmax(floor(v) + 0.5, y + 0.5), y + h - 0.5);
        cairo_move_to(cr, bx + bw, v);
        cairo_line_to(cr, bx + bw + NF_TICK_LEN, v);
        cairo_stroke(cr);
        char s[64];
        nf_plot_tick_text(s, sizeof s, t.v[i], t.step);
        nf_plot_text(cr, s, bx + bw + NF_TICK_LEN + 3.0, v, NF_FONT_TICK, 0, NF_HALIGN_LEFT, NF_VALIGN_MIDDLE, 0.0);
    }
    if (label && *label) {
        /* the rotated text lies left of its baseline: keep it beside the tick labels, inside the cell */
        double digit = nf_plot_digit_height(cr, NF_FONT_LABEL);
        double base = bx + bw + NF_TICK_LEN + 3.0 + label_w + 7.0 + digit;
        base = fmin(base, p->cell_x + p->cell_w - 4.0);
        nf_plot_text(cr, label, base, y + 0.5 * h, NF_FONT_LABEL, 0, NF_HALIGN_CENTER, NF_VALIGN_BASELINE,
                     -NF_PI / 2);
    }
    cairo_restore(cr);
    return NF_OK;
}

/* Cell (i, j) of z goes to image pixel (i, ny - 1 - j): row j = 0 is the bottom of the panel.
 * t = (z - vmin) / (vmax - vmin), clamped by the colour map; NaN stays transparent (0). */
int nf_panel_heatmap(nf_panel *p, const double *z, int nx, int ny, const nf_heatmap_opts *o)
{
    static const nf_heatmap_opts defaults = {0};
    if (!o) o = &defaults;
    if (!z) return nf_error(NF_EINVAL, "heat map: values are NULL");
    if (nx < 1 || ny < 1 || nx > NF_HEATMAP_MAX_SIDE || ny > NF_HEATMAP_MAX_SIDE)
        return nf_error(NF_EINVAL, "heat map: grid %d x %d, expected 1..%d cells on each side", nx, ny,
                        NF_HEATMAP_MAX_SIDE);
    double vmin = o->vmin, vmax = o->vmax;
    if (!isfinite(vmin) || !isfinite(vmax) || vmin > vmax)
        return nf_error(NF_EINVAL, "heat map: value range [%g, %g], expected finite vmin <= vmax", vmin, vmax);
    size_t n = (size_t)nx * ny;
    if (vmin == vmax) {
        if (nf_plot_range(&vmin, &vmax, z, n, 1) != NF_OK) vmin = 0.0, vmax = 1.0;   /* all NaN/inf */
        if (vmin == vmax) nf_plot_pad_range(&vmin, &vmax, 0.0);
    }
    NF_TRY(nf_panel_begin(p, "heat map", o->colorbar_label != NULL));
    const nf_colormap *cm = o->cmap ? o->cmap : nf_colormap_viridis;

    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, nx, ny);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return nf_error(NF_ENOMEM, "heat map: cairo could not create a %d x %d image", nx, ny);
    }
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    double scale = 1.0 / (vmax - vmin);
    for (int j = 0; j < ny; j++) {
        uint32_t *row = (uint32_t *)(data + (size_t)(ny - 1 - j) * stride);
        const double *zj = z + (size_t)j * nx;
        for (int i = 0; i < nx; i++)
            row[i] = isnan(zj[i]) ? 0u : cmap_pixel(cm, (zj[i] - vmin) * scale);
    }
    cairo_surface_mark_dirty(img);
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    paint_image(p->fig->cr, img, nx, ny, x, y, w, h, o->bilinear);
    cairo_surface_destroy(img);
    if (o->colorbar_label) NF_TRY(draw_colorbar(p, cm, vmin, vmax, o->colorbar_label));
    return nf_plot_cairo_check(p->fig, "heat map");
}

/* Bin of value v in [lo, hi] split into n: floor((v - lo) / (hi - lo) n), with v == hi in bin n - 1;
 * -1 when v is outside or not finite. */
static long bin_of(double v, double lo, double hi, int n)
{
    if (!(v >= lo && v <= hi)) return -1;
    long b = (long)((v - lo) / (hi - lo) * n);
    return b >= n ? n - 1 : b;
}

int nf_plot_hist2d_counts(double *counts, int nx, int ny, double x0, double x1, double y0, double y1,
                          const double *x, const double *y, size_t n, size_t stride, size_t *inside)
{
    if (!counts || ((!x || !y) && n > 0)) return nf_error(NF_EINVAL, "2-D histogram: an array is NULL");
    if (nx < 1 || ny < 1) return nf_error(NF_EINVAL, "2-D histogram: %d x %d bins, expected at least 1 x 1", nx, ny);
    if (!(isfinite(x0) && isfinite(x1) && x0 < x1 && isfinite(x1 - x0) && isfinite(y0) && isfinite(y1) && y0 < y1 &&
          isfinite(y1 - y0)))
        return nf_error(NF_EINVAL, "2-D histogram: range [%g, %g] x [%g, %g], expected finite lo < hi", x0, x1,
                        y0, y1);
    for (size_t k = 0; k < (size_t)nx * ny; k++) counts[k] = 0.0;
    size_t in = 0;
    for (size_t k = 0; k < n; k++) {
        long i = bin_of(x[k * stride], x0, x1, nx), j = bin_of(y[k * stride], y0, y1, ny);
        if (i < 0 || j < 0) continue;
        counts[(size_t)j * nx + i] += 1.0;
        in++;
    }
    if (inside) *inside = in;
    return NF_OK;
}

int nf_panel_hist2d(nf_panel *p, const double *x, const double *y, size_t n, size_t stride, int nx, int ny,
                    int log_counts, const nf_heatmap_opts *o)
{
    if (!p) return nf_error(NF_EINVAL, "2-D histogram: panel is NULL");
    if (!p->has_limits)
        return nf_error(NF_EINVAL, "2-D histogram on panel (%d, %d): the data limits are not set", p->row, p->col);
    if (nx < 1 || ny < 1 || nx > NF_HEATMAP_MAX_SIDE || ny > NF_HEATMAP_MAX_SIDE)
        return nf_error(NF_EINVAL, "2-D histogram: %d x %d bins, expected 1..%d on each side", nx, ny,
                        NF_HEATMAP_MAX_SIDE);
    double *counts = nf_calloc((size_t)nx * ny, sizeof *counts, "2-D histogram counts");
    if (!counts) return NF_ENOMEM;
    int rc = nf_plot_hist2d_counts(counts, nx, ny, p->x0, p->x1, p->y0, p->y1, x, y, n, stride, NULL);
    if (rc == NF_OK && log_counts)
        for (size_t k = 0; k < (size_t)nx * ny; k++) counts[k] = log10(1.0 + counts[k]);
    if (rc == NF_OK) rc = nf_panel_heatmap(p, counts, nx, ny, o);
    free(counts);
    return rc;
}
