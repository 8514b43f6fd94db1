/* plot/axes.h - data limits, nice ticks, axes, titles and legends of a panel.
 *
 * A panel maps the data rectangle [x0, x1] x [y0, y1] (nf_panel_set_limits) onto its plot area;
 * every drawing call needs the limits first.  nf_panel_draw_axes draws the frame, ticks at "nice"
 * values (steps of 1, 2 or 5 times a power of ten, chosen so that about as many ticks fit as the
 * panel has room for without their labels touching), tick labels with as many decimals as the step
 * needs, the axis labels and the title.  Drawing calls given a name (scatter, lines, bars) add an
 * entry to the panel's legend, which nf_panel_legend draws in a corner of the plot area.
 *
 * nf_ticks_nice and nf_ticks_label are the pure pieces underneath, usable on their own:
 *   nf_ticks t; nf_ticks_nice(&t, 0.0, 1.0, 5);   ->  t.n = 6, t.v = 0, 0.2, ..., 1, t.step = 0.2
 */
#ifndef NF_PLOT_AXES_H
#define NF_PLOT_AXES_H

#include <stddef.h>

#include "plot/colormap.h"
#include "plot/figure.h"

#define NF_TICKS_MAX 32
#define NF_PLOT_TEXT_MAX 128        /* titles and labels are cut to this many bytes */
#define NF_LEGEND_MAX 8             /* entries per panel */

typedef struct nf_ticks {
    int n;                          /* number of ticks */
    double step;                    /* distance between ticks: 1, 2 or 5 x 10^k */
    double v[NF_TICKS_MAX];         /* tick values, increasing, all in [lo, hi] */
} nf_ticks;

/* Ticks for [lo, hi]: the step is the smallest of 1, 2, 5 x 10^k that is at least (hi - lo) /
 * target, and the ticks are its multiples inside [lo, hi].  NF_EINVAL unless lo < hi are finite
 * and 1 <= target <= NF_TICKS_MAX - 1. */
int nf_ticks_nice(nf_ticks *t, double lo, double hi, int target);
/* The label of tick value v for ticks `step` apart: fixed-point with the decimals the step needs
 * ("0.2", "-4", "0.0042"), or exponent form for very large or small magnitudes ("2e+06").  Values
 * within step * 1e-9 of zero print as "0". */
void nf_ticks_label(char *buf, size_t cap, double v, double step);

/* The finite minimum and maximum of v[0], v[stride], ..., v[(n - 1) stride]; NF_EDATA if none. */
int nf_plot_range(double *lo, double *hi, const double *v, size_t n, size_t stride);
/* Widen [lo, hi] by frac of its width on each side; an empty range becomes one around its value. */
void nf_plot_pad_range(double *lo, double *hi, double frac);

/* The data rectangle of the panel; NF_EINVAL unless x0 < x1 and y0 < y1 are finite. */
int nf_panel_set_limits(nf_panel *p, double x0, double x1, double y0, double y1);
void nf_panel_get_limits(const nf_panel *p, double *x0, double *x1, double *y0, double *y1);
/* Figure pixel coordinates (u right, v down) of the data point (x, y). */
void nf_panel_to_pixel(const nf_panel *p, double x, double y, double *u, double *v);

/* Text of the panel (copied; NULL clears); drawn by nf_panel_draw_axes. */
void nf_panel_set_title(nf_panel *p, const char *title);
void nf_panel_set_xlabel(nf_panel *p, const char *label);
void nf_panel_set_ylabel(nf_panel *p, const char *label);

/* Frame, ticks, tick labels, axis labels and title.  NF_EINVAL if the limits are not set. */
int nf_panel_draw_axes(nf_panel *p);

enum nf_legend_kind { NF_LEGEND_LINE, NF_LEGEND_MARKER, NF_LEGEND_PATCH };
enum nf_legend_corner {
    NF_LEGEND_UPPER_RIGHT, NF_LEGEND_UPPER_LEFT, NF_LEGEND_LOWER_RIGHT, NF_LEGEND_LOWER_LEFT,
    NF_LEGEND_ABOVE                 /* in one row above the plot area, in place of a title */
};

/* Add a legend entry (drawing calls with a name do this themselves).  NF_EINVAL when the panel
 * already has NF_LEGEND_MAX entries. */
int nf_panel_legend_add(nf_panel *p, int kind, nf_rgba colour, const char *name);
/* Draw the legend box with the panel's entries in the given corner of the plot area, or in a row
 * above it (nothing if the panel has no entries).  NF_EINVAL for an unknown corner. */
int nf_panel_legend(nf_panel *p, int corner);

#endif
