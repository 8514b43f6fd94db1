/* apps/cmd_plot.c - nf plot: pictures of a model (density, samples, pair plots) and of its training. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "core/rng.h"
#include "plot/plot.h"
#include "datasets/names.h"
#include "distributions/target.h"
#include "training/model_file.h"

static const char *const PLOT_HELP =
    "usage: nf plot MODEL.h5 [--data DATA.h5] -o FILE.png [options]\n"
    "       nf plot --history MODEL.h5 -o FILE.png\n"
    "\n"
    "2-D models: three panels on the same axes - a histogram of the data, the learned density as a\n"
    "heat map with a colour bar, and a scatter of samples.  Models of more dimensions: a grid of\n"
    "pairwise scatter plots (data against samples) with 1-D marginal histograms on the diagonal.\n"
    "--history draws the training and validation log-likelihood against the step.\n"
    "A variational model (nf fit --target) is drawn next to its target: in 2-D the target's density\n"
    "(normalised), the flow's density and its samples on the target's box; in more dimensions a pair\n"
    "plot of the target's exact samples (where it has a sampler) against the flow's.\n"
    "A conditional model is drawn for one context (--context-value), next to the data rows of that\n"
    "context.  Axes are named as the data's columns (/columns of --data, else of the training data).\n"
    "\n"
    "  --data FILE       data to show next to the model (dataset /x)      [none: samples only]\n"
    "  -o FILE           output PNG (written atomically)\n"
    "  --log             heat map of the log-density instead of the density\n"
    "  --grid N          heat-map resolution, N x N evaluations           [200]\n"
    "  --samples N       samples to draw                                  [5000]\n"
    "  --dims LIST       dimensions for the pair plot, e.g. 0,2,5          [the first 5]\n"
    "  --seed S          seed for the samples (pictures are deterministic) [1]\n"
    "  --dataset PATH    dataset holding the data samples                 [/x]\n"
    "  --context-value SPEC  conditional models: the context drawn, by name (kind=long; see\n"
    "                    nf sample --help)\n"
    "  --threads N       threads                                          [all cores]\n"
    "\n"
    "examples:\n"
    "  nf plot model.h5 --data test.h5 -o density.png\n"
    "  nf plot faithful_model.h5 --data faithful.h5 --context-value kind=long -o long.png\n"
    "  nf plot --history model.h5 -o history.png\n";

typedef struct plot_args {
    const char *model, *data, *out, *dataset, *dims, *ctx_value;
    int history, log_density, threads;
    long grid, samples, seed;
} plot_args;

/* Returns FLAGS_OK, FLAGS_HELP or FLAGS_USAGE (apps/flags.h). */
static int parse(int argc, char **argv, plot_args *a)
{
    const char *cmd = "plot";
    memset(a, 0, sizeof *a);
    a->dataset = "/x";
    a->grid = 200;
    a->samples = 5000;
    a->seed = 1;
    const flag_spec flags[] = {
        {.name = "--history", .kind = FLAG_BOOL, .dst = &a->history},
        {.name = "--log", .kind = FLAG_BOOL, .dst = &a->log_density},
        {.name = "--grid", .kind = FLAG_LONG, .dst = &a->grid, .lo = 10, .hi = 2000},
        {.name = "--samples", .kind = FLAG_LONG, .dst = &a->samples, .lo = 1, .hi = 10000000},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &a->seed, .lo = 0, .hi = 1L << 53},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &a->out},
        {.name = "--data", .kind = FLAG_STRING, .dst = &a->data},
        {.name = "--dataset", .kind = FLAG_STRING, .dst = &a->dataset},
        {.name = "--dims", .kind = FLAG_STRING, .dst = &a->dims},
        {.name = "--context-value", .kind = FLAG_STRING, .dst = &a->ctx_value},
        FLAG_THREADS(a->threads),
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = PLOT_HELP, .flags = flags, .max_pos = 1};
    int rc = flags_parse(&c, argc, argv, &a->model, NULL);
    if (rc != FLAGS_OK) return rc;
    if (!a->model) return cli_usage_error(cmd, "no model file given (expected: nf plot MODEL.h5 -o FILE.png)");
    if (!a->out) return cli_usage_error(cmd, "no output file given (expected -o FILE.png)");
    cli_set_threads(a->threads);
    return FLAGS_OK;
}

/* One panel of the history: the series (NULL skips one) against the steps xs, the y range their
 * values span without the lowest 5% (early, very poor values would flatten the curve), padded; for
 * a metric read lower-is-better (bits/dim, squared errors) the upper 5% instead. */
static int history_panel(nf_panel *p, const double *xs, size_t n, const double *tr, const double *va, int lower_better,
                         const char *title, const char *ylabel)
{
    double lo = INFINITY, hi = -INFINITY;
    double *sorted = malloc((2 * n + 1) * sizeof *sorted);
    if (!sorted) return nf_error(NF_ENOMEM, "out of memory drawing the history");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (tr && isfinite(tr[i])) sorted[m++] = tr[i];
        if (va && isfinite(va[i])) sorted[m++] = va[i];
    }
    for (size_t i = 0; i < m; i++) lo = fmin(lo, sorted[i]), hi = fmax(hi, sorted[i]);
    if (!isfinite(lo)) lo = -1, hi = 1;
    for (size_t i = 1; i < m; i++)
        for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    double bottom = lo, top = hi;
    if (m > 10) {
        if (lower_better) top = sorted[m - 1 - m / 20];
        else bottom = sorted[m / 20];
    }
    free(sorted);
    nf_plot_pad_range(&bottom, &top, 0.08);
    double x0 = xs[0], x1 = xs[n - 1];
    if (x1 <= x0) x1 = x0 + 1;
    int rc = nf_panel_set_limits(p, x0 > 0 ? 0 : x0, x1, bottom, top);
    if (rc == NF_OK && tr) rc = nf_panel_line(p, xs, tr, n, 1, nf_plot_color(0), 2.0, "train");
    if (rc == NF_OK && va) rc = nf_panel_line(p, xs, va, n, 1, nf_plot_color(1), 2.0, "validation");
    nf_panel_set_title(p, title);
    nf_panel_set_xlabel(p, "optimizer step");
    nf_panel_set_ylabel(p, ylabel);
    if (rc == NF_OK) rc = nf_panel_draw_axes(p);
    if (rc == NF_OK) rc = nf_panel_legend(p, lower_better ? NF_LEGEND_UPPER_RIGHT : NF_LEGEND_LOWER_RIGHT);
    return rc;
}

/* The training history of a model file in the units of its kind's metric (of the stage its
 * checkpoint is in): log-likelihood in nats, bits/dim, a mean squared error or the ELBO.  Where the
 * training loss and the validation values are per different things (a point process: per event and
 * per sequence), two panels. */
static int plot_history(const plot_args *a)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, a->model, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    int64_t *step = NULL;
    double *tr = NULL, *va = NULL;
    int64_t stage = 0; /* absent or damaged: the first stage's metric */
    size_t n = 0, c, n2, n3;
    char kind[64] = "";
    nf_h5_attr_get_string(f, "/model", "kind", kind, sizeof kind);
    if (nf_h5_attr_get_int64_in(f, "/training/checkpoint", "stage", 0, 1 << 10, &stage) != NF_OK) stage = 0;
    nf_error_clear();
    const nf_model_type *type = nf_model_type_find(kind);
    int rc = nf_h5_exists(f, "/training/checkpoint/history")
                 ? NF_OK
                 : nf_error(NF_EFORMAT, "%s: no training history (was it made by nf fit?)", a->model);
    if (rc == NF_OK) rc = nf_h5_read_int64(f, "/training/checkpoint/history/step", &step, &n, &c);
    if (rc == NF_OK) rc = nf_h5_read_double(f, "/training/checkpoint/history/train_log_likelihood", &tr, &n2, &c);
    if (rc == NF_OK) rc = nf_h5_read_double(f, "/training/checkpoint/history/val_log_likelihood", &va, &n3, &c);
    nf_h5_close(f);
    if (rc == NF_OK && n == 0) rc = nf_error(NF_EDATA, "%s: the training history is empty (no evaluation yet)", a->model);
    const char *metric = type ? nf_model_type_metric(type, (int)stage) : "log_likelihood";
    const int bits = !strcmp(metric, "neg_bits_per_dim"), mse = !strcmp(metric, "neg_mse"), elbo = !strcmp(metric, "elbo");
    int any_val = 0; /* a fit without validation (--val-frac 0) has none: no line, no legend entry */
    for (size_t i = 0; rc == NF_OK && i < n; i++) any_val |= isfinite(va[i]) != 0;
    if (!any_val) va = (free(va), NULL);
    const int split = type && (type->loss_per || type->metric_per) && va;
    nf_figure *fig = NULL;
    double *xs = NULL;
    if (rc == NF_OK) {
        xs = malloc(n * sizeof *xs);
        fig = nf_figure_alloc(split ? 1400 : 900, 560, 1, split ? 2 : 1);
        if (!xs || !fig) rc = nf_error(NF_ENOMEM, "out of memory drawing the history");
    }
    if (rc == NF_OK) {
        for (size_t i = 0; i < n; i++) {
            xs[i] = (double)step[i];
            if (bits || mse) tr[i] = -tr[i]; /* stored as -bits/dim, -mse: higher is better */
            if ((bits || mse) && va) va[i] = -va[i];
        }
        const char *ylabel = bits ? "bits per dimension" : mse ? "mean squared error" : elbo ? "ELBO (nats)"
                                                                                      : "mean log-likelihood (nats)";
        if (!split && type && type->loss_per) { /* training only, in its own unit */
            char tl[96];
            snprintf(tl, sizeof tl, "log-likelihood per %s (nats)", type->loss_per);
            rc = history_panel(nf_figure_panel(fig, 0, 0), xs, n, tr, NULL, 0, "training history", tl);
        } else if (!split) {
            rc = history_panel(nf_figure_panel(fig, 0, 0), xs, n, tr, va, bits || mse, "training history", ylabel);
        } else {
            char tl[96], vl[96];
            snprintf(tl, sizeof tl, "log-likelihood per %s (nats)", type->loss_per ? type->loss_per : "item");
            snprintf(vl, sizeof vl, "log-likelihood per %s (nats)", type->metric_per ? type->metric_per : "item");
            rc = history_panel(nf_figure_panel(fig, 0, 0), xs, n, tr, NULL, 0, "training", tl);
            if (rc == NF_OK) rc = history_panel(nf_figure_panel(fig, 0, 1), xs, n, NULL, va, 0, "validation", vl);
        }
        if (rc == NF_OK) rc = nf_figure_save_png(fig, a->out);
    }
    nf_figure_free(fig);
    free(xs);
    free(step);
    free(tr);
    free(va);
    return rc;
}

static double *to_double(const nf_real *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (d)
        for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Limits shared by the three 2-D panels: the range of the data (or samples), padded. */
static void limits_2d(const double *pts, size_t n, double lim[4])
{
    for (int k = 0; k < 2; k++) {
        double lo, hi;
        if (nf_plot_range(&lo, &hi, pts + k, n, 2) != NF_OK) lo = -1, hi = 1;
        nf_plot_pad_range(&lo, &hi, 0.05);
        lim[2 * k] = lo;
        lim[2 * k + 1] = hi;
    }
}

/* The target's density on the grid (normalised by its known log Z, or else by the grid's own sum,
 * so the two heat maps share a scale). */
static int target_grid(const plot_args *a, const nf_target *t, const nf_real *grid, const double lim[4], int G,
                       double *z)
{
    size_t n = (size_t)G * G;
    double *g = malloc(2 * n * sizeof *g);
    if (!g) return nf_error(NF_ENOMEM, "out of memory drawing the target");
    for (size_t k = 0; k < 2 * n; k++) g[k] = grid[k];
    int rc = nf_target_log_prob(t, n, g, z, NULL);
    free(g);
    if (rc != NF_OK) return rc;
    double log_z = t->log_z;
    if (!isfinite(log_z)) {
        double mx = -INFINITY, s = 0, cell = (lim[1] - lim[0]) * (lim[3] - lim[2]) / n;
        for (size_t k = 0; k < n; k++) mx = fmax(mx, z[k]);
        for (size_t k = 0; k < n; k++) s += exp(z[k] - mx);
        log_z = mx + log(s * cell);
    }
    for (size_t k = 0; k < n; k++) z[k] = a->log_density ? fmax(z[k] - log_z, -30.0) : exp(z[k] - log_z);
    return NF_OK;
}

/* names: the two axes' labels; ctx: the context of a conditional model (ctx_dim values) or NULL,
 * ctx_label its name for the titles. */
static int plot_2d(const plot_args *a, nf_flow *flow, const nf_target *target, const double *data, size_t nd,
                   const double *smp, size_t ns, const char *const names[2], const nf_real *ctx,
                   const char *ctx_label)
{
    double lim[4];
    if (target) memcpy(lim, target->type->box, sizeof lim);
    else limits_2d(data ? data : smp, data ? nd : ns, lim);
    int G = (int)a->grid;
    nf_real *grid = malloc((size_t)G * G * 2 * sizeof(nf_real)), *lp = malloc((size_t)G * G * sizeof(nf_real));
    double *z = malloc((size_t)G * G * sizeof(double)), *zt = malloc((size_t)G * G * sizeof(double));
    nf_real *gc = ctx ? malloc((size_t)G * G * flow->ctx_dim * sizeof(nf_real)) : NULL; /* (G*G, ctx_dim) */
    nf_figure *fig = nf_figure_alloc(1500, 500, 1, 3);
    int rc = grid && lp && z && zt && fig && (!ctx || gc) ? NF_OK : nf_error(NF_ENOMEM, "out of memory drawing the density");
    for (size_t k = 0; rc == NF_OK && ctx && k < (size_t)G * G; k++)
        memcpy(gc + k * flow->ctx_dim, ctx, flow->ctx_dim * sizeof(nf_real));
    if (rc == NF_OK) {
        for (int j = 0; j < G; j++)
            for (int i = 0; i < G; i++) {
                grid[2 * ((size_t)j * G + i)] = (nf_real)(lim[0] + (i + 0.5) * (lim[1] - lim[0]) / G);
                grid[2 * ((size_t)j * G + i) + 1] = (nf_real)(lim[2] + (j + 0.5) * (lim[3] - lim[2]) / G);
            }
        double mean;
        rc = nf_evaluate(flow, grid, gc, (size_t)G * G, 4096, &mean, NULL, lp);
        if (rc == NF_OK && target) rc = target_grid(a, target, grid, lim, G, zt);
    }
    if (rc == NF_OK) {
        for (size_t k = 0; k < (size_t)G * G; k++) z[k] = a->log_density ? fmax(lp[k], -30.0) : exp(lp[k]);
        nf_panel *p0 = nf_figure_panel(fig, 0, 0), *p1 = nf_figure_panel(fig, 0, 1), *p2 = nf_figure_panel(fig, 0, 2);
        nf_panel *ps[3] = {p0, p1, p2};
        for (int k = 0; k < 3 && rc == NF_OK; k++) {
            rc = nf_panel_set_limits(ps[k], lim[0], lim[1], lim[2], lim[3]);
            nf_panel_set_xlabel(ps[k], names[0]);
            nf_panel_set_ylabel(ps[k], names[1]);
        }
        const double *hist = data ? data : smp;
        size_t nh = data ? nd : ns;
        nf_heatmap_opts ho = {0};
        ho.colorbar_label = a->log_density ? "log density" : "density";
        ho.bilinear = 1;
        if (a->log_density) {
            double lo, hi;
            nf_plot_range(&lo, &hi, z, (size_t)G * G, 1);
            ho.vmax = hi;
            ho.vmin = fmax(lo, hi - 12);
        }
        if (target) {
            char title[96];
            snprintf(title, sizeof title, "target %s (%s)", target->type->name,
                     a->log_density ? "log-density" : "density");
            nf_heatmap_opts hot = ho;
            if (a->log_density) {
                double lo, hi;
                nf_plot_range(&lo, &hi, zt, (size_t)G * G, 1);
                hot.vmax = hi;
                hot.vmin = fmax(lo, hi - 12);
            }
            if (rc == NF_OK) rc = nf_panel_heatmap(p0, zt, G, G, &hot);
            nf_panel_set_title(p0, title);
        } else {
            if (rc == NF_OK) rc = nf_panel_hist2d(p0, hist, hist + 1, nh, 2, 80, 80, 0, NULL);
            char title[600];
            snprintf(title, sizeof title, "%s (histogram)%s%s", data ? "data" : "samples", ctx ? ", " : "",
                     ctx ? ctx_label : "");
            nf_panel_set_title(p0, title);
        }
        if (rc == NF_OK) rc = nf_panel_heatmap(p1, z, G, G, &ho);
        char title1[600];
        snprintf(title1, sizeof title1, "%s%s%s",
                 target ? (a->log_density ? "flow log-density" : "flow density")
                        : (a->log_density ? "model log-density" : "model density"),
                 ctx ? ", " : "", ctx ? ctx_label : "");
        nf_panel_set_title(p1, title1);
        if (rc == NF_OK) rc = nf_panel_scatter(p2, smp, smp + 1, ns, 2, (nf_rgba){0.16, 0.35, 0.65, 0.35}, 1.4, NULL);
        char title[64];
        snprintf(title, sizeof title, "%zu model samples", ns);
        nf_panel_set_title(p2, title);
        for (int k = 0; k < 3 && rc == NF_OK; k++) rc = nf_panel_draw_axes(ps[k]);
        if (rc == NF_OK) rc = nf_figure_save_png(fig, a->out);
    }
    nf_figure_free(fig);
    free(grid);
    free(gc);
    free(lp);
    free(z);
    free(zt);
    return rc;
}

static int plot_pairs(const plot_args *a, int D, const double *data, size_t nd, const double *smp, size_t ns,
                      const nf_data_names *nm)
{
    int dims[16], k = 0;
    if (a->dims) {
        const char *s = a->dims;
        while (*s && k < 16) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v < 0 || v >= D)
                return nf_error(NF_EINVAL, "--dims %s: expected comma-separated dimensions from 0 to %d", a->dims, D - 1);
            dims[k++] = (int)v;
            s = *end == ',' ? end + 1 : end;
            if (*end && *end != ',')
                return nf_error(NF_EINVAL, "--dims %s: expected comma-separated dimensions from 0 to %d", a->dims, D - 1);
        }
    } else {
        for (k = 0; k < D && k < 5; k++) dims[k] = k;
    }
    double *da = malloc((nd ? nd : 1) * k * sizeof(double)), *sb = malloc((ns ? ns : 1) * k * sizeof(double));
    char names[16][32];
    const char *np[16];
    for (int i = 0; i < k; i++) np[i] = nf_data_names_column(nm, (size_t)dims[i], names[i], sizeof names[i]);
    int rc = da && sb ? NF_OK : nf_error(NF_ENOMEM, "out of memory for the pair plot");
    if (rc == NF_OK) {
        for (size_t r = 0; r < nd; r++)
            for (int i = 0; i < k; i++) da[r * k + i] = data[r * D + dims[i]];
        for (size_t r = 0; r < ns; r++)
            for (int i = 0; i < k; i++) sb[r * k + i] = smp[r * D + dims[i]];
        nf_figure *fig = nf_figure_alloc(230 * k + 40, 230 * k + 40, k, k);
        if (!fig) rc = NF_ENOMEM;
        nf_pairplot_opts o = {0};
        o.names = np;
        if (rc == NF_OK) rc = nf_figure_pairplot(fig, data ? da : sb, data ? nd : ns, data ? sb : NULL, data ? ns : 0, k, &o);
        if (rc == NF_OK) rc = nf_figure_save_png(fig, a->out);
        nf_figure_free(fig);
    }
    free(da);
    free(sb);
    return rc;
}

/* The names of the columns: those of --data (its /columns, when the samples are /x), else those of
 * the training data kept in the model file; and the context names (the model's). */
static int plot_names(const plot_args *a, const nf_flow *flow, nf_data_names *nm)
{
    size_t d = (size_t)flow->dim, c = (size_t)flow->ctx_dim;
    NF_TRY(nf_data_names_load(nm, a->model, "/data", d, c));
    if (!a->data || strcmp(a->dataset, "/x")) return NF_OK;
    nf_data_names dn;
    NF_TRY(nf_data_names_load(&dn, a->data, "/", d, 0));
    if (dn.columns) {
        if (nm->columns) nf_h5_strings_free(nm->columns, d);
        nm->columns = dn.columns;
        dn.columns = NULL;
    }
    nf_data_names_free(&dn);
    return NF_OK;
}

/* A conditional model's context from --context-value: one row (*one) and a batch of 4096 copies
 * (*batch) for sampling; the label names it.  Nothing for an unconditional model. */
static int plot_context(const plot_args *a, const nf_flow *flow, const nf_data_names *nm, nf_real **one,
                        nf_real **batch, char *label, size_t size)
{
    size_t c = (size_t)flow->ctx_dim;
    if (!c && a->ctx_value) return nf_error(NF_EINVAL, "%s is not conditional: --context-value is not used", a->model);
    if (!c) return NF_OK;
    if (!a->ctx_value) {
        char b[32];
        const char *first = nf_data_names_context(nm, 0, b, sizeof b);
        return nf_error(NF_EINVAL, "%s is conditional on %zu context values: choose the context to draw with "
                                   "--context-value (e.g. --context-value %s%s)", a->model, c, first,
                        strchr(first, '=') ? "" : "=1");
    }
    *one = malloc(c * sizeof **one);
    *batch = malloc(4096 * c * sizeof **batch);
    if (!*one || !*batch) return nf_error(NF_ENOMEM, "out of memory");
    int rc = nf_context_parse(nm, a->ctx_value, *one);
    if (rc != NF_OK) return nf_error_context(rc, "--context-value");
    for (size_t i = 0; i < 4096; i++) memcpy(*batch + i * c, *one, c * sizeof **one);
    nf_context_format(nm, *one, label, size);
    return NF_OK;
}

int nf_cmd_plot(int argc, char **argv)
{
    plot_args a;
    int urc = parse(argc, argv, &a);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    int rc = app_check_output(a.out);
    if (rc == NF_OK) rc = app_check_not_input(a.out, a.model, "model");
    if (rc == NF_OK) rc = app_check_not_input(a.out, a.data, "data file");
    if (rc == NF_OK && a.history) {
        rc = plot_history(&a);
        if (rc != NF_OK) return cli_fail("plot");
        fprintf(stderr, "nf plot: wrote %s\n", a.out);
        return 0;
    }
    nf_model *model = NULL;
    nf_flow *flow = NULL;
    const nf_target *target = NULL;
    app_data d = {0};
    nf_data_names nm = {0};
    nf_real *smp = NULL, *ctx1 = NULL, *ctxb = NULL;
    double *dd = NULL, *sd = NULL;
    nf_rng *rng = NULL;
    char ctx_label[512] = "", c0[32], c1[32];
    if (rc == NF_OK) rc = nf_model_open(a.model, &model, NULL);
    if (rc == NF_OK && !model->flow)
        rc = nf_error(NF_EINVAL, "%s holds a '%s' model; use %s with it", a.model, model->type->kind, model->type->command);
    if (rc == NF_OK) {
        flow = model->flow;
        target = nf_model_variational_target(model);
        rc = plot_names(&a, flow, &nm);
    }
    if (rc == NF_OK) rc = plot_context(&a, flow, &nm, &ctx1, &ctxb, ctx_label, sizeof ctx_label);
    if (rc == NF_OK && target && !a.data && flow->dim > 2 && target->type->sample) {
        /* the target's own exact samples stand where data would, in the pair plot */
        size_t n = (size_t)a.samples * flow->dim;
        double *tx = malloc(n * sizeof *tx);
        nf_rng *tr = nf_rng_alloc((uint64_t)a.seed, 0x74617267);
        rc = tx && tr ? nf_target_sample(target, tr, (size_t)a.samples, tx) : NF_ENOMEM;
        nf_rng_free(tr);
        if (rc == NF_OK) {
            dd = tx;
            d.n = (size_t)a.samples;
            d.d = (size_t)flow->dim;
        } else {
            free(tx);
        }
    }
    if (rc == NF_OK && a.data)
        rc = app_data_load(a.data, a.dataset, (size_t)flow->dim, (size_t)flow->ctx_dim, flow->ctx_dim > 0, &d);
    if (rc == NF_OK) {
        smp = malloc((size_t)a.samples * flow->dim * sizeof(nf_real));
        rng = nf_rng_alloc((uint64_t)a.seed, 0x706c6f74);
        rc = smp && rng ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %ld samples", a.samples);
    }
    for (long at = 0; rc == NF_OK && at < a.samples; at += 4096) {
        int b = (int)(a.samples - at < 4096 ? a.samples - at : 4096);
        rc = nf_flow_sample(flow, smp + (size_t)at * flow->dim, NULL, ctxb, b, rng);
    }
    if (rc == NF_OK && ctx1 && d.n) { /* the data rows of the chosen context only */
        size_t keep = 0, c = (size_t)flow->ctx_dim;
        for (size_t i = 0; i < d.n; i++) keep += !memcmp(d.ctx + i * c, ctx1, c * sizeof *ctx1);
        dd = malloc((keep ? keep : 1) * d.d * sizeof *dd);
        if (!dd) rc = nf_error(NF_ENOMEM, "out of memory");
        for (size_t i = 0, k = 0; dd && i < d.n; i++)
            if (!memcmp(d.ctx + i * c, ctx1, c * sizeof *ctx1)) {
                for (size_t j = 0; j < d.d; j++) dd[k * d.d + j] = d.x[i * d.d + j];
                k++;
            }
        if (rc == NF_OK && !keep) {
            fprintf(stderr, "nf plot: no rows of %s have the context %s; drawing the model only\n", a.data, ctx_label);
            free(dd);
            dd = NULL;
        }
        d.n = keep;
    }
    if (rc == NF_OK) {
        if (!dd) dd = d.n ? to_double(d.x, d.n * d.d) : NULL;
        sd = to_double(smp, (size_t)a.samples * flow->dim);
        if ((d.n && !dd) || !sd) rc = nf_error(NF_ENOMEM, "out of memory");
    }
    if (rc == NF_OK) {
        const char *names[2] = {nf_data_names_column(&nm, 0, c0, sizeof c0), nf_data_names_column(&nm, 1, c1, sizeof c1)};
        if (flow->dim == 2) rc = plot_2d(&a, flow, target, dd, d.n, sd, (size_t)a.samples, names, ctx1, ctx_label);
        else if (flow->dim == 1) rc = nf_error(NF_EINVAL, "%s is 1-D; nf plot draws models of 2 or more dimensions", a.model);
        else rc = plot_pairs(&a, flow->dim, dd, d.n, sd, (size_t)a.samples, &nm);
    }
    if (rc == NF_OK) {
        fprintf(stderr, "nf plot: wrote %s (columns ", a.out);
        for (int j = 0; j < flow->dim && j < 5; j++) fprintf(stderr, "%s%s", j ? ", " : "", nf_data_names_column(&nm, (size_t)j, c0, sizeof c0));
        fprintf(stderr, "%s%s%s)\n", flow->dim > 5 ? ", ..." : "", ctx1 ? "; context " : "", ctx_label);
    }
    free(smp);
    free(dd);
    free(sd);
    free(ctx1);
    free(ctxb);
    nf_rng_free(rng);
    nf_data_names_free(&nm);
    app_data_free(&d);
    nf_model_free(model);
    if (rc != NF_OK) return cli_fail("plot");
    return 0;
}
