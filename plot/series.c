/* plot/series.c - scatter, lines and 1-D histograms on a panel. */
#include "plot/series.h"

#include <math.h>
#include <stdlib.h>

#include "plot/axes.h"
#include "plot/plot_internal.h"

#define NF_HIST_DEFAULT_BINS 30

static int add_legend(nf_panel *p, int kind, nf_rgba colour, const char *name)
{
    return name ? nf_panel_legend_add(p, kind, colour, name) : NF_OK;
}

static int check_colour(nf_rgba c, const char *what)
{
    if (!(c.r >= 0 && c.r <= 1 && c.g >= 0 && c.g <= 1 && c.b >= 0 && c.b <= 1 && c.a >= 0 && c.a <= 1))
        return nf_error(NF_EINVAL, "%s: colour (%g, %g, %g, %g), expected components in [0, 1]", what, c.r, c.g,
                        c.b, c.a);
    return NF_OK;
}

int nf_panel_scatter(nf_panel *p, const double *x, const double *y, size_t n, size_t stride, nf_rgba colour,
                     double radius, const char *name)
{
    if ((!x || !y) && n > 0) return nf_error(NF_EINVAL, "scatter: coordinates are NULL");
    NF_TRY(check_colour(colour, "scatter"));
    NF_TRY(nf_panel_begin(p, "scatter", 0));
    if (!(radius > 0.0)) radius = 1.6;
    cairo_t *cr = p->fig->cr;
    double px, py, pw, ph;
    nf_panel_plot_rect(p, &px, &py, &pw, &ph);
    nf_panel_clip(p);
    nf_plot_set_rgba(cr, colour);
    for (size_t k = 0; k < n; k++) {
        double u, v;
        nf_panel_to_pixel(p, x[k * stride], y[k * stride], &u, &v);
        /* skips NaN too: only discs that can touch the plot area are drawn */
        if (!(u > px - radius && u < px + pw + radius && v > py - radius && v < py + ph + radius)) continue;
        cairo_new_path(cr);
        cairo_arc(cr, u, v, radius, 0.0, 2.0 * NF_PI);
        cairo_fill(cr);
    }
    cairo_restore(cr);
    NF_TRY(add_legend(p, NF_LEGEND_MARKER, colour, name));
    return nf_plot_cairo_check(p->fig, "scatter");
}

/* Pixel coordinates are limited to a generous box around the plot area before they reach cairo, so
 * that far-away points keep the direction of their segment without overflowing cairo's fixed point. */
static double limit(double a, double lo, double hi)
{
    return a < lo ? lo : a > hi ? hi : a;
}

int nf_panel_line(nf_panel *p, const double *x, const double *y, size_t n, size_t stride, nf_rgba colour,
                  double width, const char *name)
{
    if (!y && n > 0) return nf_error(NF_EINVAL, "line: y values are NULL");
    NF_TRY(check_colour(colour, "line"));
    NF_TRY(nf_panel_begin(p, "line", 0));
    if (!(width > 0.0)) width = 1.8;
    cairo_t *cr = p->fig->cr;
    double px, py, pw, ph;
    nf_panel_plot_rect(p, &px, &py, &pw, &ph);
    double span = 8.0 * (pw + ph);
    nf_panel_clip(p);
    nf_plot_set_rgba(cr, colour);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_new_path(cr);
    int pen_down = 0;
    for (size_t k = 0; k < n; k++) {
        double xv = x ? x[k * stride] : (double)k, yv = y[k * stride];
        if (!isfinite(xv) || !isfinite(yv)) { pen_down = 0; continue; }   /* a gap in the line */
        double u, v;
        nf_panel_to_pixel(p, xv, yv, &u, &v);
        u = limit(u, px - span, px + pw + span), v = limit(v, py - span, py + ph + span);
        if (pen_down) cairo_line_to(cr, u, v);
        else cairo_move_to(cr, u, v), cairo_line_to(cr, u, v), pen_down = 1;   /* a lone point shows as a dot */
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    NF_TRY(add_legend(p, NF_LEGEND_LINE, colour, name));
    return nf_plot_cairo_check(p->fig, "line");
}

/* Filled: one rectangle per bin from 0 to h[b], with a thin darker edge between neighbours.
 * Step: the outline 0 -> h[0] -> ... -> h[nbins-1] -> 0 along the bin edges. */
int nf_panel_bars(nf_panel *p, const double *h, int nbins, double lo, double hi, nf_rgba colour, int style,
                  const char *name)
{
    if (!h) return nf_error(NF_EINVAL, "bars: heights are NULL");
    if (nbins < 1) return nf_error(NF_EINVAL, "bars: %d bins, expected at least 1", nbins);
    if (!(isfinite(lo) && isfinite(hi) && lo < hi && isfinite(hi - lo)))
        return nf_error(NF_EINVAL, "bars: range [%g, %g], expected finite lo < hi", lo, hi);
    if (style != NF_BARS_FILLED && style != NF_BARS_STEP)
        return nf_error(NF_EINVAL, "bars: style %d, expected NF_BARS_FILLED or NF_BARS_STEP", style);
    NF_TRY(check_colour(colour, "bars"));
    NF_TRY(nf_panel_begin(p, "bars", 0));
    cairo_t *cr = p->fig->cr;
    double px, py, pw, ph;
    nf_panel_plot_rect(p, &px, &py, &pw, &ph);
    double span = 8.0 * (pw + ph), width = (hi - lo) / nbins;
    nf_panel_clip(p);
    cairo_new_path(cr);
    double u0, v0;
    nf_panel_to_pixel(p, lo, 0.0, &u0, &v0);
    u0 = limit(u0, px - span, px + pw + span), v0 = limit(v0, py - span, py + ph + span);
    if (style == NF_BARS_FILLED) {
        for (int b = 0; b < nbins; b++) {
            if (!isfinite(h[b])) continue;
            double ua, ub, v;
            nf_panel_to_pixel(p, lo + b * width, h[b], &ua, &v);
            nf_panel_to_pixel(p, lo + (b + 1) * width, h[b], &ub, &v);
            ua = limit(ua, px - span, px + pw + span), ub = limit(ub, px - span, px + pw + span);
            v = limit(v, py - span, py + ph + span);
            cairo_rectangle(cr, ua, v, ub - ua, v0 - v);
        }
        nf_plot_set_rgba(cr, colour);
        cairo_fill_preserve(cr);
        nf_rgba edge = {0.6 * colour.r, 0.6 * colour.g, 0.6 * colour.b, fmin(1.0, colour.a + 0.3)};
        nf_plot_set_rgba(cr, edge);
        cairo_set_line_width(cr, 0.6);
        cairo_stroke(cr);
    } else {
        cairo_move_to(cr, u0, v0);
        for (int b = 0; b < nbins; b++) {
            double ua, ub, v;
            double hb = isfinite(h[b]) ? h[b] : 0.0;
            nf_panel_to_pixel(p, lo + b * width, hb, &ua, &v);
            nf_panel_to_pixel(p, lo + (b + 1) * width, hb, &ub, &v);
            ua = limit(ua, px - span, px + pw + span), ub = limit(ub, px - span, px + pw + span);
            v = limit(v, py - span, py + ph + span);
            cairo_line_to(cr, ua, v);
            cairo_line_to(cr, ub, v);
        }
        double u1, v1;
        nf_panel_to_pixel(p, hi, 0.0, &u1, &v1);
        cairo_line_to(cr, limit(u1, px - span, px + pw + span), v0);
        nf_plot_set_rgba(cr, colour);
        cairo_set_line_width(cr, 1.8);
        cairo_set_line_join(cr, CAIRO_LINE_JOIN_MITER);
        cairo_stroke(cr);
    }
    cairo_restore(cr);
    NF_TRY(add_legend(p, style == NF_BARS_FILLED ? NF_LEGEND_PATCH : NF_LEGEND_LINE, colour, name));
    return nf_plot_cairo_check(p->fig, "bars");
}

/* dens[b] = count_b / (N_finite (hi - lo) / nbins) */
int nf_plot_hist_density(double *dens, int nbins, double lo, double hi, const double *x, size_t n, size_t stride)
{
    if (!dens || (!x && n > 0)) return nf_error(NF_EINVAL, "histogram: an array is NULL");
    if (nbins < 1) return nf_error(NF_EINVAL, "histogram: %d bins, expected at least 1", nbins);
    if (!(isfinite(lo) && isfinite(hi) && lo < hi && isfinite(hi - lo)))
        return nf_error(NF_EINVAL, "histogram: range [%g, %g], expected finite lo < hi", lo, hi);
    for (int b = 0; b < nbins; b++) dens[b] = 0.0;
    size_t finite = 0;
    for (size_t k = 0; k < n; k++) {
        double v = x[k * stride];
        if (!isfinite(v)) continue;
        finite++;
        if (v < lo || v > hi) continue;
        long b = (long)((v - lo) / (hi - lo) * nbins);
        dens[b >= nbins ? nbins - 1 : b] += 1.0;
    }
    if (finite == 0) return NF_OK;
    double scale = nbins / ((double)finite * (hi - lo));
    for (int b = 0; b < nbins; b++) dens[b] *= scale;
    return NF_OK;
}

int nf_panel_hist1d(nf_panel *p, const double *x, size_t n, size_t stride, int nbins, nf_rgba colour, int style,
                    const char *name)
{
    if (!p) return nf_error(NF_EINVAL, "histogram: panel is NULL");
    if (!p->has_limits)
        return nf_error(NF_EINVAL, "histogram on panel (%d, %d): the data limits are not set", p->row, p->col);
    if (nbins <= 0) nbins = NF_HIST_DEFAULT_BINS;
    double *dens = nf_calloc((size_t)nbins, sizeof *dens, "histogram bins");
    if (!dens) return NF_ENOMEM;
    int rc = nf_plot_hist_density(dens, nbins, p->x0, p->x1, x, n, stride);
    if (rc == NF_OK) rc = nf_panel_bars(p, dens, nbins, p->x0, p->x1, colour, style, name);
    free(dens);
    return rc;
}
