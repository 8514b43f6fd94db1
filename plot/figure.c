/* plot/figure.c - the canvas: allocation, the grid of panels, atomic PNG output, text helpers. */
#include "plot/figure.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plot/plot_internal.h"

#define NF_CAIRO_MAX_SIDE 32767     /* cairo's limit on an image surface's side */

nf_figure *nf_figure_alloc(int width, int height, int rows, int cols)
{
    if (width < 1 || height < 1 || width > NF_CAIRO_MAX_SIDE || height > NF_CAIRO_MAX_SIDE) {
        nf_error(NF_EINVAL, "figure size %d x %d pixels: expected 1..%d on each side", width, height,
                 NF_CAIRO_MAX_SIDE);
        return NULL;
    }
    if (rows < 1 || cols < 1) {
        nf_error(NF_EINVAL, "figure grid %d x %d panels: expected at least 1 x 1", rows, cols);
        return NULL;
    }
    double cw = (double)width / cols, ch = (double)height / rows;
    double need_w = NF_MARGIN_LEFT + NF_MARGIN_RIGHT + NF_PANEL_MIN_PLOT;
    double need_h = NF_MARGIN_TOP + NF_MARGIN_BOTTOM + NF_PANEL_MIN_PLOT;
    if (cw < need_w || ch < need_h) {
        nf_error(NF_EINVAL, "figure %d x %d pixels with %d x %d panels gives cells of %.0f x %.0f pixels; "
                 "each needs at least %.0f x %.0f for its margins and plot area",
                 width, height, rows, cols, cw, ch, need_w, need_h);
        return NULL;
    }
    nf_figure *fig = nf_calloc(1, sizeof *fig, "figure");
    if (!fig) return NULL;
    fig->width = width, fig->height = height, fig->rows = rows, fig->cols = cols;
    fig->panels = nf_calloc((size_t)rows * cols, sizeof *fig->panels, "figure panels");
    if (!fig->panels) { free(fig); return NULL; }
    fig->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
    fig->cr = cairo_create(fig->surface);
    if (cairo_status(fig->cr) != CAIRO_STATUS_SUCCESS) {
        nf_error(NF_ENOMEM, "figure %d x %d pixels: cairo could not create the canvas: %s", width, height,
                 cairo_status_to_string(cairo_status(fig->cr)));
        nf_figure_free(fig);
        return NULL;
    }
    /* Grey-scale anti-aliasing and unhinted metrics: smooth text whose layout scales with size. */
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);
    cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_hint_style(fo, CAIRO_HINT_STYLE_SLIGHT);
    cairo_set_font_options(fig->cr, fo);
    cairo_font_options_destroy(fo);
    cairo_set_source_rgb(fig->cr, 1.0, 1.0, 1.0);
    cairo_paint(fig->cr);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            nf_panel *p = &fig->panels[r * cols + c];
            p->fig = fig, p->row = r, p->col = c;
            p->cell_x = c * cw, p->cell_y = r * ch, p->cell_w = cw, p->cell_h = ch;
            p->x0 = 0.0, p->x1 = 1.0, p->y0 = 0.0, p->y1 = 1.0;
        }
    if (nf_plot_cairo_check(fig, "figure") != NF_OK) { nf_figure_free(fig); return NULL; }
    return fig;
}

void nf_figure_free(nf_figure *fig)
{
    if (!fig) return;
    if (fig->cr) cairo_destroy(fig->cr);
    if (fig->surface) cairo_surface_destroy(fig->surface);
    free(fig->panels);
    free(fig);
}

int nf_figure_width(const nf_figure *fig) { return fig ? fig->width : 0; }
int nf_figure_height(const nf_figure *fig) { return fig ? fig->height : 0; }
int nf_figure_rows(const nf_figure *fig) { return fig ? fig->rows : 0; }
int nf_figure_cols(const nf_figure *fig) { return fig ? fig->cols : 0; }
cairo_t *nf_figure_cairo(nf_figure *fig) { return fig ? fig->cr : NULL; }

nf_panel *nf_figure_panel(nf_figure *fig, int r, int c)
{
    if (!fig) { nf_error(NF_EINVAL, "nf_figure_panel: figure is NULL"); return NULL; }
    if (r < 0 || r >= fig->rows || c < 0 || c >= fig->cols) {
        nf_error(NF_EINVAL, "panel (%d, %d) is outside the figure's %d x %d grid", r, c, fig->rows, fig->cols);
        return NULL;
    }
    return &fig->panels[r * fig->cols + c];
}

/* The plot area: the cell less its margins, with edges on whole pixels so that frames and heat-map
 * cells are crisp. */
void nf_panel_plot_rect(const nf_panel *p, double *x, double *y, double *w, double *h)
{
    double left = round(p->cell_x + NF_MARGIN_LEFT);
    double top = round(p->cell_y + NF_MARGIN_TOP);
    double right = round(p->cell_x + p->cell_w - NF_MARGIN_RIGHT - (p->has_colorbar ? NF_COLORBAR_RESERVE : 0));
    double bottom = round(p->cell_y + p->cell_h - NF_MARGIN_BOTTOM);
    if (x) *x = left;
    if (y) *y = top;
    if (w) *w = right - left;
    if (h) *h = bottom - top;
}

int nf_panel_begin(nf_panel *p, const char *what, int want_colorbar)
{
    if (!p) return nf_error(NF_EINVAL, "%s: panel is NULL", what);
    if (!p->has_limits)
        return nf_error(NF_EINVAL, "%s on panel (%d, %d): the data limits are not set (nf_panel_set_limits)",
                        what, p->row, p->col);
    if (want_colorbar && !p->has_colorbar) {
        if (p->drawn)
            return nf_error(NF_EINVAL, "%s on panel (%d, %d): a colour bar narrows the plot area, so it must "
                            "be asked for by the panel's first drawing call", what, p->row, p->col);
        double w;
        nf_panel_plot_rect(p, NULL, NULL, &w, NULL);
        if (w - NF_COLORBAR_RESERVE < NF_PANEL_MIN_PLOT)
            return nf_error(NF_EINVAL, "%s on panel (%d, %d): the cell is %.0f pixels wide, too narrow for a "
                            "colour bar (needs %.0f)", what, p->row, p->col, p->cell_w,
                            p->cell_w - w + NF_COLORBAR_RESERVE + NF_PANEL_MIN_PLOT);
        p->has_colorbar = 1;
    }
    p->drawn = 1;
    return NF_OK;
}

int nf_plot_cairo_check(nf_figure *fig, const char *what)
{
    cairo_status_t st = cairo_status(fig->cr);
    if (st == CAIRO_STATUS_SUCCESS) return NF_OK;
    return nf_error(NF_ENOMEM, "%s: cairo failed: %s", what, cairo_status_to_string(st));
}

void nf_panel_clip(nf_panel *p)
{
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    cairo_save(p->fig->cr);
    cairo_rectangle(p->fig->cr, x, y, w, h);
    cairo_clip(p->fig->cr);
}

/* ---- PNG output ---- */

typedef struct png_sink {
    FILE *f;
    int err;                        /* errno of the first failed write */
} png_sink;

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int len)
{
    png_sink *s = closure;
    if (fwrite(data, 1, len, s->f) == len) return CAIRO_STATUS_SUCCESS;
    if (!s->err) s->err = errno ? errno : EIO;
    return CAIRO_STATUS_WRITE_ERROR;
}

/* Write to a new file "<path>.tmp<pid>.<n>" created with O_EXCL next to path (so the rename stays
 * on one file system and never replaces someone else's file), flush it to disk, then rename it
 * over path.  On any failure the temporary file is removed and path is untouched. */
int nf_figure_save_png(nf_figure *fig, const char *path)
{
    if (!fig) return nf_error(NF_EINVAL, "nf_figure_save_png: figure is NULL");
    if (!path || !*path) return nf_error(NF_EINVAL, "nf_figure_save_png: the output path is empty");
    NF_TRY(nf_plot_cairo_check(fig, path));
    return nf_plot_surface_save_png(fig->surface, path);
}

int nf_plot_surface_save_png(cairo_surface_t *surface, const char *path)
{
    cairo_surface_flush(surface);
    size_t cap = strlen(path) + 48;
    char *tmp = nf_calloc(cap, 1, "temporary PNG file name");
    if (!tmp) return NF_ENOMEM;
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        snprintf(tmp, cap, "%s.tmp%ld.%d", path, (long)getpid(), attempt);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd < 0) {
        free(tmp);
        return nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(err));
    }
    png_sink sink = {fdopen(fd, "wb"), 0};
    if (!sink.f) {
        err = errno;
        close(fd), unlink(tmp), free(tmp);
        return nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(err));
    }
    cairo_status_t st = cairo_surface_write_to_png_stream(surface, png_write, &sink);
    int rc = NF_OK;
    if (st != CAIRO_STATUS_SUCCESS)
        rc = sink.err ? nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(sink.err))
                      : nf_error(NF_EIO, "cannot write PNG '%s': cairo: %s", path, cairo_status_to_string(st));
    if (rc == NF_OK && (fflush(sink.f) != 0 || fsync(fileno(sink.f)) != 0))
        rc = nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(errno));
    if (fclose(sink.f) != 0 && rc == NF_OK)
        rc = nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(errno));
    if (rc == NF_OK && rename(tmp, path) != 0)
        rc = nf_error(NF_EIO, "cannot write PNG '%s': %s", path, strerror(errno));
    if (rc != NF_OK) unlink(tmp);
    free(tmp);
    return rc;
}

/* ---- text and colour ---- */

static void select_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, NF_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double nf_plot_text_width(cairo_t *cr, const char *s, double size, int bold)
{
    cairo_text_extents_t te;
    select_font(cr, size, bold);
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

double nf_plot_digit_height(cairo_t *cr, double size)
{
    cairo_text_extents_t te;
    select_font(cr, size, 0);
    cairo_text_extents(cr, "0", &te);
    return -te.y_bearing;
}

void nf_plot_text(cairo_t *cr, const char *s, double x, double y, double size, int bold, int halign,
                  int valign, double angle)
{
    if (!s || !*s) return;
    double digit = nf_plot_digit_height(cr, size);
    double w = nf_plot_text_width(cr, s, size, bold);   /* leaves the font selected */
    double dx = halign == NF_HALIGN_CENTER ? -0.5 * w : halign == NF_HALIGN_RIGHT ? -w : 0.0;
    double dy = valign == NF_VALIGN_MIDDLE ? 0.5 * digit : valign == NF_VALIGN_TOP ? digit : 0.0;
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (angle != 0.0) cairo_rotate(cr, angle);
    cairo_move_to(cr, dx, dy);
    cairo_show_text(cr, s);
    cairo_new_path(cr);
    cairo_restore(cr);
}

void nf_plot_set_rgba(cairo_t *cr, nf_rgba c)
{
    cairo_set_source_rgba(cr, c.r, c.g, c.b, c.a);
}
