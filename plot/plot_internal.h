/* plot/plot_internal.h - what the plot/ files share and users do not see: the figure and panel
 * structs, the layout of a panel's cell (in pixels), and small text and colour helpers.
 *
 * A cell of cw x ch pixels keeps NF_MARGIN_LEFT for the y label and tick labels, NF_MARGIN_BOTTOM
 * for the x tick labels and label, NF_MARGIN_TOP for the title, NF_MARGIN_RIGHT as air, plus
 * NF_COLORBAR_RESERVE on the right when the panel has a colour bar; the rest is the plot area.
 */
#ifndef NF_PLOT_INTERNAL_H
#define NF_PLOT_INTERNAL_H

#include <cairo.h>

#include "plot/axes.h"
#include "plot/colormap.h"
#include "plot/figure.h"

#define NF_FONT "DejaVu Sans"
#define NF_FONT_TICK 11.0
#define NF_FONT_LABEL 12.5
#define NF_FONT_TITLE 13.5
#define NF_FONT_LEGEND 11.0

#define NF_MARGIN_LEFT 70.0
#define NF_MARGIN_RIGHT 22.0
#define NF_MARGIN_TOP 28.0
#define NF_MARGIN_BOTTOM 44.0
#define NF_COLORBAR_RESERVE 84.0    /* gap, bar, ticks, tick labels and the rotated label */
#define NF_COLORBAR_GAP 12.0
#define NF_COLORBAR_WIDTH 14.0
#define NF_TICK_LEN 4.0

#define NF_INK 0x262626u            /* frame, ticks and text */
#define NF_PI 3.14159265358979323846

typedef struct nf_legend_entry {
    int kind;                       /* enum nf_legend_kind */
    nf_rgba colour;
    char name[64];
} nf_legend_entry;

struct nf_panel {
    nf_figure *fig;
    int row, col;
    double cell_x, cell_y, cell_w, cell_h;   /* the grid cell in figure pixels */
    double x0, x1, y0, y1;                   /* data limits */
    int has_limits;
    int has_colorbar;                        /* plot area narrowed for a colour bar */
    int drawn;                               /* something was drawn: the layout is fixed */
    char title[NF_PLOT_TEXT_MAX], xlabel[NF_PLOT_TEXT_MAX], ylabel[NF_PLOT_TEXT_MAX];
    int nlegend;
    nf_legend_entry legend[NF_LEGEND_MAX];
};

struct nf_figure {
    int width, height, rows, cols;
    cairo_surface_t *surface;                /* ARGB32, width x height */
    cairo_t *cr;
    nf_panel *panels;                        /* (rows, cols) */
};

/* Start a drawing call on p: checks the panel and its limits, reserves the colour bar if asked
 * (only before anything else was drawn), and fixes the layout.  `what` names the call in errors. */
int nf_panel_begin(nf_panel *p, const char *what, int want_colorbar);
/* NF_OK, or NF_ENOMEM naming `what` if cairo has gone into an error state. */
int nf_plot_cairo_check(nf_figure *fig, const char *what);
/* Write an image surface to path atomically (a temporary file next to it, flushed and renamed;
 * path untouched on failure): nf_figure_save_png and the image grids (plot/image_grid.c). */
int nf_plot_surface_save_png(cairo_surface_t *surface, const char *path);
/* cairo_save, then clip to the plot area (pair with cairo_restore). */
void nf_panel_clip(nf_panel *p);

enum { NF_HALIGN_LEFT, NF_HALIGN_CENTER, NF_HALIGN_RIGHT };
enum { NF_VALIGN_BASELINE, NF_VALIGN_MIDDLE, NF_VALIGN_TOP };

/* Draw UTF-8 text in DejaVu Sans at (x, y), aligned horizontally and vertically ("middle" and
 * "top" use the height of a digit, so rows of numbers line up), rotated by angle radians about
 * the anchor, in the current source colour. */
void nf_plot_text(cairo_t *cr, const char *s, double x, double y, double size, int bold, int halign,
                  int valign, double angle);
/* Advance width of s in pixels. */
double nf_plot_text_width(cairo_t *cr, const char *s, double size, int bold);
/* Height of a digit (the cap height) at this size. */
double nf_plot_digit_height(cairo_t *cr, double size);
void nf_plot_set_rgba(cairo_t *cr, nf_rgba c);
/* Nice ticks for an axis `length` pixels long, as many as fit with their labels apart
 * (horizontal: by label widths; vertical: by text height); *label_w receives the widest label. */
void nf_plot_axis_ticks(cairo_t *cr, nf_ticks *t, double lo, double hi, double length, int horizontal,
                        double *label_w);
/* A tick label as drawn: nf_ticks_label with the minus sign as U+2212. */
void nf_plot_tick_text(char *buf, size_t cap, double v, double step);

#endif
