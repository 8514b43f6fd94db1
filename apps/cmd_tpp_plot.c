/* apps/cmd_tpp_plot.c - nf tpp plot: pictures of a fitted point process against event sequences:
 * the inter-event time density (data histogram against the model's marginal density), an event
 * raster of real sequences against simulated ones on the same windows, and the conditional
 * intensity along one sequence (training/model_tpp.h; cairo panels from plot/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "datasets/sequences.h"
#include "plot/plot.h"
#include "training/model_tpp.h"

int app_tpp_open_model(const char *path, nf_model **m); /* apps/cmd_tpp_sample.c */

static const char *const PLOT_HELP =
    "usage: nf tpp plot MODEL.h5 SEQ.h5 -o PLOT.png [--kind all|density|raster|intensity]\n"
    "                   [--sequence I] [options]\n"
    "\n"
    "Pictures of a point process fitted by nf tpp fit, against the sequences of SEQ.h5:\n"
    "  density     the inter-event times of the data (a histogram of log tau) against the model's\n"
    "              density of log tau, the mean of p(tau | history) over the data's events;\n"
    "  raster      the events of the first sequences of the data (top) and of as many sequences\n"
    "              simulated from the model on the same windows (bottom);\n"
    "  intensity   the conditional intensity lambda*(t) = p(tau | history) / S(tau | history) along\n"
    "              one sequence, with its events marked.\n"
    "By default (--kind all) the three panels side by side.  The PNG is written atomically.\n"
    "\n"
    "  --kind K        all, density, raster or intensity                  [all]\n"
    "  --sequence I    the sequence whose intensity is drawn (0-based)    [0]\n"
    "  --rows N        raster: data and simulated sequences shown         [10]\n"
    "  --bins N        density: histogram bins                            [40]\n"
    "  --contexts N    density: histories the model's density averages    [2000]\n"
    "  --grid N        points of the model's curves                       [400]\n"
    "  --seed S        seed of the simulated sequences                    [1]\n"
    "  --threads N     threads                                            [all cores]\n"
    "\n"
    "examples:\n"
    "  nf tpp plot tpp.h5 test.h5 -o tpp.png\n"
    "  nf tpp plot tpp.h5 test.h5 --kind intensity --sequence 3 -o intensity.png\n";

enum { KIND_ALL, KIND_DENSITY, KIND_RASTER, KIND_INTENSITY };
static const char *const KINDS[] = {"all", "density", "raster", "intensity", NULL};

typedef struct plot_opts {
    int kind, sequence, rows, bins, contexts, grid;
    long seed;
} plot_opts;

/* The histogram of log tau over the data's intervals (one per event, from t_start for the first)
 * and the model's density of u = log tau: f(u) = tau p(tau), p the mean over the events' histories. */
static int panel_density(nf_panel *p, nf_model *m, const nf_source *s, const plot_opts *o)
{
    nf_sequences q = nf_source_sequences(s);
    const size_t E = (size_t)(q.offsets[s->n] - q.offsets[0]);
    double *u = malloc((E ? E : 1) * sizeof *u), *ug = malloc((size_t)o->grid * sizeof *ug);
    double *tau = malloc((size_t)o->grid * sizeof *tau), *f = malloc((size_t)o->grid * sizeof *f);
    double *hist = malloc((size_t)o->bins * sizeof *hist);
    int rc = u && ug && tau && f && hist ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; rc == NF_OK && i < s->n; i++) {
        double prev = q.t_start[i];
        for (int64_t j = q.offsets[i]; j < q.offsets[i + 1]; j++) {
            if (q.times[j] > prev) u[n++] = log(q.times[j] - prev);
            prev = q.times[j];
        }
    }
    if (rc == NF_OK && !n) rc = nf_error(NF_EDATA, "%s: no positive inter-event times to draw", s->name);
    double lo = 0, hi = 1, top = 0;
    if (rc == NF_OK) rc = nf_plot_range(&lo, &hi, u, n, 1);
    if (rc == NF_OK) {
        nf_plot_pad_range(&lo, &hi, 0.08);
        for (int g = 0; g < o->grid; g++) {
            ug[g] = lo + (hi - lo) * g / (o->grid - 1);
            tau[g] = exp(ug[g]);
        }
        rc = nf_model_tpp_interval_density(m, s, tau, (size_t)o->grid, (size_t)o->contexts, f);
    }
    if (rc == NF_OK) rc = nf_plot_hist_density(hist, o->bins, lo, hi, u, n, 1);
    for (int g = 0; rc == NF_OK && g < o->grid; g++) {
        f[g] *= tau[g];
        if (isfinite(f[g])) top = fmax(top, f[g]);
    }
    for (int b = 0; rc == NF_OK && b < o->bins; b++) top = fmax(top, hist[b]);
    if (rc == NF_OK) rc = nf_panel_set_limits(p, lo, hi, 0, top > 0 ? 1.08 * top : 1);
    nf_rgba bar = nf_plot_color(0);
    bar.a = 0.6;
    if (rc == NF_OK) rc = nf_panel_bars(p, hist, o->bins, lo, hi, bar, NF_BARS_FILLED, "data");
    if (rc == NF_OK) rc = nf_panel_line(p, ug, f, (size_t)o->grid, 1, nf_plot_color(1), 2.2, "model");
    if (rc == NF_OK) {
        nf_panel_set_title(p, "inter-event times");
        nf_panel_set_xlabel(p, "log inter-event time");
        nf_panel_set_ylabel(p, "density");
        rc = nf_panel_draw_axes(p);
    }
    if (rc == NF_OK) rc = nf_panel_legend(p, NF_LEGEND_UPPER_RIGHT);
    free(u), free(ug), free(tau), free(f), free(hist);
    return rc;
}

/* Vertical ticks at the events of sequences first..first+R-1 of (offsets, times), sequence i at
 * height base + (R - 1 - i) + 0.5, as one polyline broken by NaN points. */
static int raster_rows(nf_panel *p, const int64_t *off, const double *times, size_t R, double base, nf_rgba col,
                       const char *name)
{
    const size_t E = (size_t)(off[R] - off[0]);
    double *x = malloc((3 * E + 1) * sizeof *x), *y = malloc((3 * E + 1) * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        return nf_error(NF_ENOMEM, "out of memory for %zu events", E);
    }
    size_t k = 0;
    for (size_t i = 0; i < R; i++)
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            const double mid = base + (double)(R - 1 - i) + 0.5;
            x[k] = times[j], y[k++] = mid - 0.38;
            x[k] = times[j], y[k++] = mid + 0.38;
            x[k] = NAN, y[k++] = NAN;
        }
    int rc = k ? nf_panel_line(p, x, y, k, 1, col, 1.2, name) : nf_panel_legend_add(p, NF_LEGEND_LINE, col, name);
    free(x), free(y);
    return rc;
}

static int panel_raster(nf_panel *p, nf_model *m, const nf_source *s, const plot_opts *o)
{
    nf_sequences q = nf_source_sequences(s);
    const size_t R = (size_t)o->rows < s->n ? (size_t)o->rows : s->n;
    double *ts = malloc(R * sizeof *ts), *te = malloc(R * sizeof *te), lo = INFINITY, hi = -INFINITY;
    int64_t *off = malloc((R + 1) * sizeof *off);
    nf_rng *rng = nf_rng_alloc((uint64_t)o->seed, 0x706c74);
    nf_tpp_samples smp = {0};
    int rc = ts && te && off && rng ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    for (size_t i = 0; rc == NF_OK && i < R; i++) {
        ts[i] = q.t_start[i], te[i] = q.t_end[i];
        off[i] = q.offsets[i] - q.offsets[0];
        lo = fmin(lo, ts[i]), hi = fmax(hi, te[i]);
        if (!(te[i] > ts[i])) /* a window closed at its only event: simulate a little past it */
            te[i] = ts[i] + (hi > lo ? hi - lo : 1);
        hi = fmax(hi, te[i]);
    }
    if (rc == NF_OK) off[R] = q.offsets[R] - q.offsets[0];
    if (rc == NF_OK) rc = nf_model_tpp_simulate(m, R, ts, te, NULL, NULL, rng, 0, &smp);
    if (rc == NF_OK) rc = nf_panel_set_limits(p, lo, hi > lo ? hi : lo + 1, 0, 2.0 * (double)R);
    if (rc == NF_OK) rc = raster_rows(p, off, q.times + q.offsets[0], R, (double)R, nf_plot_color(0), "data (top)");
    if (rc == NF_OK) rc = raster_rows(p, smp.offsets, smp.times, R, 0, nf_plot_color(1), "model (bottom)");
    if (rc == NF_OK) {
        double xs[2] = {lo, hi}, ys[2] = {(double)R, (double)R};
        rc = nf_panel_line(p, xs, ys, 2, 1, (nf_rgba){0.5, 0.5, 0.5, 1}, 1.0, NULL);
    }
    if (rc == NF_OK) {
        nf_panel_set_xlabel(p, "time");
        nf_panel_set_ylabel(p, "sequence");
        rc = nf_panel_draw_axes(p);
    }
    if (rc == NF_OK) rc = nf_panel_legend(p, NF_LEGEND_ABOVE);
    nf_tpp_samples_free(&smp);
    nf_rng_free(rng);
    free(ts), free(te), free(off);
    return rc;
}

static int panel_intensity(nf_panel *p, nf_model *m, const nf_source *s, const plot_opts *o)
{
    if ((size_t)o->sequence >= s->n)
        return nf_error(NF_EINVAL, "%s: no sequence %d (it holds %zu; --sequence counts from 0)", s->name, o->sequence,
                        s->n);
    nf_sequences q = nf_source_sequences(s);
    const size_t i = (size_t)o->sequence, G = (size_t)o->grid * 2;
    double lo = q.t_start[i], hi = q.t_end[i];
    if (!(hi > lo)) hi = lo + 1;
    double *t = malloc(G * sizeof *t), *lam = malloc(G * sizeof *lam);
    int rc = t && lam ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    for (size_t g = 0; rc == NF_OK && g < G; g++) t[g] = lo + (hi - lo) * (double)(g + 1) / (double)G;
    if (rc == NF_OK) rc = nf_model_tpp_intensity(m, s, i, t, G, lam);
    double top = 0;
    for (size_t g = 0; rc == NF_OK && g < G; g++)
        if (isfinite(lam[g])) top = fmax(top, lam[g]);
    top = top > 0 ? 1.1 * top : 1;
    if (rc == NF_OK) rc = nf_panel_set_limits(p, lo, hi, 0, top);
    if (rc == NF_OK) rc = nf_panel_line(p, t, lam, G, 1, nf_plot_color(1), 1.8, "model intensity");
    const int64_t L = q.offsets[i + 1] - q.offsets[i];
    if (rc == NF_OK && L > 0) { /* the events: ticks along the bottom, one polyline broken by NaN */
        double *x = malloc(3 * (size_t)L * sizeof *x), *y = malloc(3 * (size_t)L * sizeof *y);
        if (!x || !y) rc = nf_error(NF_ENOMEM, "out of memory");
        for (int64_t j = 0; rc == NF_OK && j < L; j++) {
            x[3 * j] = x[3 * j + 1] = q.times[q.offsets[i] + j], x[3 * j + 2] = NAN;
            y[3 * j] = 0, y[3 * j + 1] = top / 12, y[3 * j + 2] = NAN;
        }
        if (rc == NF_OK) rc = nf_panel_line(p, x, y, 3 * (size_t)L, 1, nf_plot_color(0), 1.4, "events");
        free(x), free(y);
    }
    if (rc == NF_OK) {
        char title[96];
        snprintf(title, sizeof title, "conditional intensity, sequence %d", o->sequence);
        nf_panel_set_title(p, title);
        nf_panel_set_xlabel(p, "time");
        nf_panel_set_ylabel(p, "intensity");
        rc = nf_panel_draw_axes(p);
    }
    if (rc == NF_OK) rc = nf_panel_legend(p, NF_LEGEND_UPPER_RIGHT);
    free(t), free(lam);
    return rc;
}

int app_tpp_plot(int argc, char **argv)
{
    const char *cmd = "tpp plot", *out = NULL, *pos[2];
    plot_opts o = {.kind = KIND_ALL, .sequence = 0, .rows = 10, .bins = 40, .contexts = 2000, .grid = 400, .seed = 1};
    int threads = 0;
    const flag_spec flags[] = {
        {.name = "--kind", .kind = FLAG_CHOICE, .dst = &o.kind, .choices = KINDS},
        {.name = "--sequence", .kind = FLAG_INT, .dst = &o.sequence, .lo = 0, .hi = 1 << 30},
        {.name = "--rows", .kind = FLAG_INT, .dst = &o.rows, .lo = 1, .hi = 500},
        {.name = "--bins", .kind = FLAG_INT, .dst = &o.bins, .lo = 2, .hi = 1000},
        {.name = "--contexts", .kind = FLAG_INT, .dst = &o.contexts, .lo = 1, .hi = 1 << 24},
        {.name = "--grid", .kind = FLAG_INT, .dst = &o.grid, .lo = 10, .hi = 100000},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &o.seed, .lo = 0, .hi = 1L << 53},
        FLAG_THREADS(threads),
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = PLOT_HELP, .flags = flags, .max_pos = 2};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0] || !pos[1])
        return cli_usage_error(cmd, "expected MODEL.h5 and SEQ.h5 (nf tpp plot MODEL.h5 SEQ.h5 -o PLOT.png)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o PLOT.png)");
    cli_set_threads(threads);
    nf_model *m = NULL;
    nf_source *s = NULL;
    nf_figure *fig = NULL;
    int rc = app_check_output(out);
    if (rc == NF_OK) rc = app_check_not_input(out, pos[0], "model");
    if (rc == NF_OK) rc = app_check_not_input(out, pos[1], "sequences file");
    if (rc == NF_OK) rc = app_tpp_open_model(pos[0], &m);
    if (rc == NF_OK) rc = nf_source_sequences_load(&s, pos[1]);
    if (rc == NF_OK) {
        const int all = o.kind == KIND_ALL;
        fig = all ? nf_figure_alloc(1650, 500, 1, 3) : nf_figure_alloc(900, 560, 1, 1);
        if (!fig) rc = NF_ENOMEM;
    }
    int col = 0;
    if (rc == NF_OK && (o.kind == KIND_ALL || o.kind == KIND_DENSITY))
        rc = panel_density(nf_figure_panel(fig, 0, col++), m, s, &o);
    if (rc == NF_OK && (o.kind == KIND_ALL || o.kind == KIND_RASTER))
        rc = panel_raster(nf_figure_panel(fig, 0, col++), m, s, &o);
    if (rc == NF_OK && (o.kind == KIND_ALL || o.kind == KIND_INTENSITY))
        rc = panel_intensity(nf_figure_panel(fig, 0, col++), m, s, &o);
    if (rc == NF_OK) rc = nf_figure_save_png(fig, out);
    nf_figure_free(fig);
    nf_source_free(s);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}
