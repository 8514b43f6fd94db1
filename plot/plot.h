/* plot/plot.h - pictures for nf: figures of panels with axes, heat maps, histograms, scatters,
 * curves and pair plots, drawn with cairo and written as PNG.
 *
 * A small layer of our own over cairo, in seven pieces:
 *   plot/figure.h    the canvas: nf_figure_alloc(W, H, rows, cols), panels, nf_figure_save_png
 *   plot/axes.h      limits, nice ticks, frame and labels (nf_panel_draw_axes), legends
 *   plot/colormap.h  viridis and magma colour maps, nf_rgba colours and a palette
 *   plot/heatmap.h   heat maps of gridded values, 2-D histograms, colour bars
 *   plot/series.h    scatter, lines, 1-D histograms (bars or step outlines)
 *   plot/pairplot.h  the k x k pair plot of data against samples
 *   plot/image_grid.h  many small images (a data set, a model's samples) in one PNG
 *
 * The usual order on a panel: set the limits, draw the data (a heat map with its colour bar first),
 * then nf_panel_draw_axes, then nf_panel_legend.  Coordinates are doubles in data units; pixels
 * are used only for sizes (radii, widths) and for nf_panel_plot_rect.  Nothing prints; every call
 * that can fail returns an NF_* code with a message (core/error.h).  Output is deterministic.
 */
#ifndef NF_PLOT_H
#define NF_PLOT_H

#include "plot/axes.h"
#include "plot/colormap.h"
#include "plot/figure.h"
#include "plot/heatmap.h"
#include "plot/image_grid.h"
#include "plot/pairplot.h"
#include "plot/series.h"

#endif
