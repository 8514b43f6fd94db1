/* plot/heatmap.h - heat maps, 2-D histograms and colour bars.
 *
 * A heat map shows an nx x ny grid of values z over the panel's limits: cell (i, j) covers
 * [x0 + i dx, x0 + (i + 1) dx] x [y0 + j dy, y0 + (j + 1) dy] with dx = (x1 - x0) / nx,
 * dy = (y1 - y0) / ny, and its value is z[j * nx + i] (row j = 0 at the bottom, so a density
 * evaluated with y in the outer loop and x in the inner loop is drawn upright).  Values are mapped
 * to [0, 1] by (z - vmin) / (vmax - vmin) and coloured through a colour map; values below vmin or
 * above vmax (and -inf, +inf) take the end colours, NaN cells are left transparent.  The grid is
 * written once into a cairo image of nx x ny pixels and scaled into the plot area, either with
 * nearest cells (sharp squares) or bilinear interpolation between cell centres.
 *
 * With a colorbar_label the panel gets a colour bar on its right with ticks and the label.  The
 * bar takes room from the plot area, so it must be asked for by the first drawing call on the
 * panel (a scatter of the data over the density comes after).
 */
#ifndef NF_PLOT_HEATMAP_H
#define NF_PLOT_HEATMAP_H

#include <stddef.h>

#include "plot/colormap.h"
#include "plot/figure.h"

/* Zero-initialised options (or NULL) mean: viridis, value range from the data, nearest cells,
 * no colour bar. */
typedef struct nf_heatmap_opts {
    const nf_colormap *cmap;        /* NULL: viridis */
    double vmin, vmax;              /* value range; vmin == vmax: the finite range of the data */
    int bilinear;                   /* 0: nearest cells; 1: bilinear between cell centres */
    const char *colorbar_label;     /* NULL: no colour bar; "" a bar without a label */
} nf_heatmap_opts;

/* Draw z (ny rows of nx values, see above) over the panel's limits.  NF_EINVAL for a missing
 * panel, values or limits, nx or ny outside 1..32767, vmin > vmax or non-finite; NF_ENOMEM. */
int nf_panel_heatmap(nf_panel *p, const double *z, int nx, int ny, const nf_heatmap_opts *o);

/* counts (ny, nx) receives how many of the n points (x[k stride], y[k stride]) fall in each cell
 * of the grid over [x0, x1] x [y0, y1] laid out as in a heat map.  Points on the upper edges
 * count in the last cells; points outside or non-finite are skipped.  *inside (if not NULL)
 * receives the number counted. */
int nf_plot_hist2d_counts(double *counts, int nx, int ny, double x0, double x1, double y0, double y1,
                          const double *x, const double *y, size_t n, size_t stride, size_t *inside);

/* A 2-D histogram of the points over the panel's limits, drawn as a heat map of the counts, or of
 * log10(1 + count) when log_counts is set. */
int nf_panel_hist2d(nf_panel *p, const double *x, const double *y, size_t n, size_t stride,
                    int nx, int ny, int log_counts, const nf_heatmap_opts *o);

#endif
