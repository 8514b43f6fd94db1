/* plot/series.h - points, lines and 1-D histograms on a panel.
 *
 * Series are given as coordinates with a stride, like BLAS vectors: the k-th point is
 * (x[k stride], y[k stride]), so columns i and j of a row-major n x d array are plotted with
 * x = a + i, y = a + j, stride = d.  Points with a non-finite coordinate are skipped (a line is
 * broken there); everything is clipped to the plot area.  A non-NULL name adds a legend entry.
 *
 * Scatter draws small anti-aliased discs, each filled on its own so that overlapping
 * semi-transparent points darken where the data is dense.  Lines are for curves such as training
 * histories (x NULL means x = 0, 1, 2, ...).  Histograms count values into equal bins and are
 * drawn as filled bars or as an outline (a step line), so that a second set can be overlaid on the
 * first (data as bars, samples as a step line).
 */
#ifndef NF_PLOT_SERIES_H
#define NF_PLOT_SERIES_H

#include <stddef.h>

#include "plot/colormap.h"
#include "plot/figure.h"

enum nf_bars_style { NF_BARS_FILLED, NF_BARS_STEP };

/* Discs of the given radius in pixels (<= 0: 1.6) and colour (its alpha makes them see-through). */
int nf_panel_scatter(nf_panel *p, const double *x, const double *y, size_t n, size_t stride,
                     nf_rgba colour, double radius, const char *name);

/* A polyline through the points, width in pixels (<= 0: 1.8); x NULL means x_k = k. */
int nf_panel_line(nf_panel *p, const double *x, const double *y, size_t n, size_t stride,
                  nf_rgba colour, double width, const char *name);

/* Bars of heights h[0..nbins-1] over equal bins of [lo, hi], from y = 0 up. */
int nf_panel_bars(nf_panel *p, const double *h, int nbins, double lo, double hi, nf_rgba colour,
                  int style, const char *name);

/* dens[b] = (points in bin b of [lo, hi]) / (finite points * bin width): a density that
 * integrates to the fraction of finite values inside [lo, hi].  The upper edge counts in the last
 * bin.  All zeros if there are no finite values. */
int nf_plot_hist_density(double *dens, int nbins, double lo, double hi, const double *x, size_t n,
                         size_t stride);

/* The density histogram of x over the panel's x limits, drawn as bars (nbins <= 0: 30). */
int nf_panel_hist1d(nf_panel *p, const double *x, size_t n, size_t stride, int nbins, nf_rgba colour,
                    int style, const char *name);

#endif
