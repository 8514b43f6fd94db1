/* plot/pairplot.c - the k x k grid of pairwise scatters and diagonal histograms of two point sets. */
#include "plot/pairplot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot/axes.h"
#include "plot/plot_internal.h"
#include "plot/series.h"

/* Scatter column i against column j of an (n, k) array, thinned to at most max_rows rows taken
 * every ceil(n / max_rows) rows. */
static int scatter_pair(nf_panel *p, const double *a, size_t n, int k, int j, int i, size_t max_rows,
                        nf_rgba colour, double radius)
{
    if (n == 0) return NF_OK;
    size_t step = (n + max_rows - 1) / max_rows, used = (n + step - 1) / step;
    return nf_panel_scatter(p, a + j, a + i, used, step * (size_t)k, colour, radius, NULL);
}

int nf_figure_pairplot(nf_figure *fig, const double *a, size_t na, const double *b, size_t nb, int k,
                       const nf_pairplot_opts *o)
{
    static const nf_pairplot_opts defaults = {0};
    if (!o) o = &defaults;
    if (!fig) return nf_error(NF_EINVAL, "pair plot: figure is NULL");
    if (k < 1 || fig->rows != k || fig->cols != k)
        return nf_error(NF_EINVAL, "pair plot of %d dimensions needs a %d x %d figure, got %d x %d", k, k, k,
                        fig->rows, fig->cols);
    if ((!a && na > 0) || (!b && nb > 0)) return nf_error(NF_EINVAL, "pair plot: a point set is NULL");
    if (na == 0 && nb == 0) return nf_error(NF_EINVAL, "pair plot: both point sets are empty");
    int bins = o->bins > 0 ? o->bins : 30;
    size_t max_rows = o->max_points > 0 ? o->max_points : 3000;
    double radius = o->radius > 0.0 ? o->radius : 1.4;
    nf_rgba ca = o->colour_a.a > 0.0 ? o->colour_a : nf_plot_color(0);
    nf_rgba cb = o->colour_b.a > 0.0 ? o->colour_b : nf_plot_color(1);
    const char *la = o->label_a ? o->label_a : "data", *lb = o->label_b ? o->label_b : "samples";
    /* translucent dots so that dense regions read darker; bars lighter than the step line over them */
    nf_rgba dot_a = ca, dot_b = cb, bar_a = ca;
    dot_a.a = fmin(ca.a, 0.35), dot_b.a = fmin(cb.a, 0.35), bar_a.a = fmin(ca.a, 0.45);

    double *lim = nf_calloc((size_t)2 * k + 2 * (size_t)bins, sizeof *lim, "pair plot limits");
    if (!lim) return NF_ENOMEM;
    double *da = lim + 2 * k, *db = da + bins;
    int rc = NF_OK;
    for (int d = 0; d < k && rc == NF_OK; d++) {
        const double *src = na > 0 ? a : b;
        size_t n = na > 0 ? na : nb;
        rc = nf_plot_range(&lim[2 * d], &lim[2 * d + 1], src + d, n, (size_t)k);
        if (rc != NF_OK) rc = nf_error_context(rc, "pair plot, dimension %d", d + 1);
        else nf_plot_pad_range(&lim[2 * d], &lim[2 * d + 1], 0.05);
    }
    for (int i = 0; i < k && rc == NF_OK; i++)
        for (int j = 0; j < k && rc == NF_OK; j++) {
            nf_panel *p = nf_figure_panel(fig, i, j);
            char name[32];
            const char *xname = o->names ? o->names[j] : (snprintf(name, sizeof name, "x%d", j + 1), name);
            if (i == k - 1) nf_panel_set_xlabel(p, xname);
            if (i != j) {
                rc = nf_panel_set_limits(p, lim[2 * j], lim[2 * j + 1], lim[2 * i], lim[2 * i + 1]);
                if (rc == NF_OK) rc = scatter_pair(p, a, na, k, j, i, max_rows, dot_a, radius);
                if (rc == NF_OK) rc = scatter_pair(p, b, nb, k, j, i, max_rows, dot_b, radius);
                if (j == 0) {
                    const char *yname = o->names ? o->names[i] : (snprintf(name, sizeof name, "x%d", i + 1), name);
                    nf_panel_set_ylabel(p, yname);
                }
            } else {
                double lo = lim[2 * i], hi = lim[2 * i + 1], top = 0.0;
                if (na > 0) rc = nf_plot_hist_density(da, bins, lo, hi, a + i, na, (size_t)k);
                if (rc == NF_OK && nb > 0) rc = nf_plot_hist_density(db, bins, lo, hi, b + i, nb, (size_t)k);
                for (int q = 0; q < bins; q++) top = fmax(top, fmax(na > 0 ? da[q] : 0.0, nb > 0 ? db[q] : 0.0));
                if (rc == NF_OK) rc = nf_panel_set_limits(p, lo, hi, 0.0, top > 0.0 ? 1.12 * top : 1.0);
                if (rc == NF_OK && na > 0) rc = nf_panel_bars(p, da, bins, lo, hi, bar_a, NF_BARS_FILLED, NULL);
                if (rc == NF_OK && nb > 0) rc = nf_panel_bars(p, db, bins, lo, hi, cb, NF_BARS_STEP, NULL);
                if (j == 0) nf_panel_set_ylabel(p, "density");
            }
            if (rc == NF_OK) rc = nf_panel_draw_axes(p);
        }
    /* one legend, above the first (histogram) panel, naming both sets in the colours of their bars and lines */
    if (rc == NF_OK) {
        nf_panel *p = nf_figure_panel(fig, 0, 0);
        if (na > 0) rc = nf_panel_legend_add(p, NF_LEGEND_PATCH, bar_a, la);
        if (rc == NF_OK && nb > 0) rc = nf_panel_legend_add(p, NF_LEGEND_LINE, cb, lb);
        if (rc == NF_OK) rc = nf_panel_legend(p, NF_LEGEND_ABOVE);
    }
    free(lim);
    return rc;
}
