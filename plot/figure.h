/* plot/figure.h - a figure: a white W x H pixel canvas cut into a grid of R x C panels.
 *
 * Each panel owns one cell of the grid; inside the cell, margins hold the title (top), the tick
 * labels and the axis labels (left and bottom), and, when a heat map asks for one, a colour bar
 * (right).  What is left is the panel's plot area, where data coordinates (set with
 * nf_panel_set_limits, plot/axes.h) are mapped: x grows to the right, y upwards.  Drawing is
 * immediate, onto one cairo image surface, in the order of the calls: draw the data first, then
 * nf_panel_draw_axes (frame, ticks, labels and title on top), then a legend if wanted.
 *
 *   nf_figure *fig = nf_figure_alloc(1200, 400, 1, 3);
 *   nf_panel *p = nf_figure_panel(fig, 0, 1);
 *   nf_panel_set_limits(p, -4, 4, -4, 4);
 *   nf_panel_heatmap(p, logp, nx, ny, &(nf_heatmap_opts){.colorbar_label = "log density"});
 *   nf_panel_set_title(p, "model");
 *   nf_panel_draw_axes(p);
 *   rc = nf_figure_save_png(fig, "density.png");
 *   nf_figure_free(fig);
 *
 * Rendering is deterministic: the same calls with the same inputs give the same PNG bytes.
 * Text is set in DejaVu Sans through cairo's toy font API.
 */
#ifndef NF_PLOT_FIGURE_H
#define NF_PLOT_FIGURE_H

#include <cairo.h>

#include "core/error.h"

typedef struct nf_figure nf_figure;
typedef struct nf_panel nf_panel;

/* Smallest plot area (pixels, each side) a panel must keep after its margins. */
#define NF_PANEL_MIN_PLOT 24

/* A white figure of width x height pixels holding rows x cols panels.  NULL (with NF_EINVAL or
 * NF_ENOMEM recorded) if a size is not positive, the cells are too small for their margins, or
 * memory runs out. */
nf_figure *nf_figure_alloc(int width, int height, int rows, int cols);
void nf_figure_free(nf_figure *fig);           /* NULL is harmless */

int nf_figure_width(const nf_figure *fig);
int nf_figure_height(const nf_figure *fig);
int nf_figure_rows(const nf_figure *fig);
int nf_figure_cols(const nf_figure *fig);

/* The panel in row r, column c (row 0 at the top); NULL (NF_EINVAL recorded) if out of range. */
nf_panel *nf_figure_panel(nf_figure *fig, int r, int c);

/* Write the figure as a PNG to path, atomically: the bytes go to a new file next to path which is
 * then renamed over it, so path is either the old file or the complete new one, and nothing is left
 * behind on failure.  NF_EIO names the path and the reason. */
int nf_figure_save_png(nf_figure *fig, const char *path);

/* The cairo context drawing on the figure, for pictures this layer does not offer.  Save and
 * restore its state around any change. */
cairo_t *nf_figure_cairo(nf_figure *fig);

/* The panel's plot area in figure pixels: left x, top y, width w, height h.  It narrows when the
 * panel gets a colour bar. */
void nf_panel_plot_rect(const nf_panel *p, double *x, double *y, double *w, double *h);

#endif
