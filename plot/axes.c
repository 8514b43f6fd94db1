/* plot/axes.c - nice ticks and their labels, data limits, the frame and text of a panel, legends. */
#include "plot/axes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plot/plot_internal.h"

/* ---- ticks ---- */

/* 10^e for an integer e, as exact as a double allows: m * 10^e is computed as m * 10^e for e >= 0
 * and as m / 10^-e for e < 0, so that 0.2 is the double nearest 2/10 and not 2 * 0.1. */
static double scale10(double m, int e)
{
    return e >= 0 ? m * pow(10.0, e) : m / pow(10.0, -e);
}

/* The step is s = m 10^e with m in {1, 2, 5, 10} the smallest with s >= (hi - lo) / target; the
 * ticks are k s for the integers k with lo <= k s <= hi (up to 1e-9 of a step, so that the ends
 * of [0, 1] are ticks despite rounding). */
int nf_ticks_nice(nf_ticks *t, double lo, double hi, int target)
{
    if (!t) return nf_error(NF_EINVAL, "nf_ticks_nice: ticks is NULL");
    t->n = 0, t->step = 0.0;
    if (!isfinite(lo) || !isfinite(hi) || !(lo < hi) || !isfinite(hi - lo))
        return nf_error(NF_EINVAL, "ticks for [%g, %g]: expected a finite range with lo < hi", lo, hi);
    if (target < 1 || target > NF_TICKS_MAX - 1)
        return nf_error(NF_EINVAL, "ticks: target count %d, expected 1..%d", target, NF_TICKS_MAX - 1);
    double raw = (hi - lo) / target;
    int e = (int)floor(log10(raw));
    static const double mult[4] = {1.0, 2.0, 5.0, 10.0};
    double m = 10.0, step = scale10(10.0, e);
    for (int i = 0; i < 4; i++)
        if (scale10(mult[i], e) >= raw * (1.0 - 1e-12)) { m = mult[i], step = scale10(m, e); break; }
    if (!(step > 0.0) || !isfinite(step))
        return nf_error(NF_EINVAL, "ticks for [%g, %g]: the range is too small to divide", lo, hi);
    double k0 = ceil(lo / step - 1e-9), k1 = floor(hi / step + 1e-9);
    if (!(k1 - k0 < NF_TICKS_MAX) || fabs(k0) > 1e15 || fabs(k1) > 1e15)
        return nf_error(NF_EINVAL, "ticks for [%.17g, %.17g]: the range is too narrow for its magnitude",
                        lo, hi);
    for (double k = k0; k <= k1; k++) {
        double v = scale10(k * m, e);
        if (v < lo) v = lo;             /* the 1e-9 slack must not leave [lo, hi] */
        if (v > hi) v = hi;
        t->v[t->n++] = v;
    }
    t->step = step;
    return NF_OK;
}

/* Remove the zero padding C puts in exponents: "2e+06" -> "2e6", "4.2e-05" -> "4.2e-5". */
static void compact_exponent(char *s)
{
    char *e = strchr(s, 'e');
    if (!e) return;
    char *src = e + 1, *dst = e + 1;
    if (*src == '+') src++;
    else if (*src == '-') *dst++ = *src++;
    while (*src == '0' && src[1]) src++;
    memmove(dst, src, strlen(src) + 1);
}

void nf_ticks_label(char *buf, size_t cap, double v, double step)
{
    if (!buf || cap == 0) return;
    if (!(step > 0.0) || !isfinite(step)) step = fabs(v) > 0.0 ? fabs(v) : 1.0;
    if (fabs(v) < step * 1e-9) v = 0.0;
    double big = fmax(fabs(v), step);
    if (big >= 1e6 || step < 1e-4) {
        /* exponent form with the significant digits that tell neighbouring ticks apart */
        int digits = v == 0.0 ? 0 : (int)(floor(log10(fabs(v))) - floor(log10(step) + 1e-9));
        if (digits < 0) digits = 0;
        if (digits > 15) digits = 15;
        snprintf(buf, cap, "%.*e", digits, v);
        if (v == 0.0) snprintf(buf, cap, "0");
        compact_exponent(buf);
        return;
    }
    int decimals = (int)ceil(-log10(step) - 1e-9);
    if (decimals < 0) decimals = 0;
    snprintf(buf, cap, "%.*f", decimals, v);
}

void nf_plot_tick_text(char *buf, size_t cap, double v, double step)
{
    char plain[64];
    nf_ticks_label(plain, sizeof plain, v, step);
    if (plain[0] == '-') snprintf(buf, cap, "\xe2\x88\x92%s", plain + 1);   /* U+2212 minus sign */
    else snprintf(buf, cap, "%s", plain);
}

/* ---- ranges and limits ---- */

int nf_plot_range(double *lo, double *hi, const double *v, size_t n, size_t stride)
{
    double a = INFINITY, b = -INFINITY;
    if (!v && n > 0) return nf_error(NF_EINVAL, "nf_plot_range: values are NULL");
    for (size_t i = 0; i < n; i++) {
        double x = v[i * stride];
        if (!isfinite(x)) continue;
        if (x < a) a = x;
        if (x > b) b = x;
    }
    if (!(a <= b)) return nf_error(NF_EDATA, "range of %zu values: none is finite", n);
    *lo = a, *hi = b;
    return NF_OK;
}

void nf_plot_pad_range(double *lo, double *hi, double frac)
{
    double w = *hi - *lo;
    if (!(w > 0.0)) {
        double d = *lo != 0.0 ? 0.1 * fabs(*lo) : 0.5;
        *lo -= d, *hi += d;
        return;
    }
    *lo -= frac * w, *hi += frac * w;
}

int nf_panel_set_limits(nf_panel *p, double x0, double x1, double y0, double y1)
{
    if (!p) return nf_error(NF_EINVAL, "nf_panel_set_limits: panel is NULL");
    if (!(isfinite(x0) && isfinite(x1) && x0 < x1 && isfinite(x1 - x0)))
        return nf_error(NF_EINVAL, "panel (%d, %d): x limits [%g, %g], expected finite x0 < x1", p->row, p->col,
                        x0, x1);
    if (!(isfinite(y0) && isfinite(y1) && y0 < y1 && isfinite(y1 - y0)))
        return nf_error(NF_EINVAL, "panel (%d, %d): y limits [%g, %g], expected finite y0 < y1", p->row, p->col,
                        y0, y1);
    p->x0 = x0, p->x1 = x1, p->y0 = y0, p->y1 = y1;
    p->has_limits = 1;
    return NF_OK;
}

void nf_panel_get_limits(const nf_panel *p, double *x0, double *x1, double *y0, double *y1)
{
    if (x0) *x0 = p->x0;
    if (x1) *x1 = p->x1;
    if (y0) *y0 = p->y0;
    if (y1) *y1 = p->y1;
}

/* u = left + (x - x0) / (x1 - x0) w,   v = top + h - (y - y0) / (y1 - y0) h */
void nf_panel_to_pixel(const nf_panel *p, double x, double y, double *u, double *v)
{
    double px, py, pw, ph;
    nf_panel_plot_rect(p, &px, &py, &pw, &ph);
    *u = px + (x - p->x0) / (p->x1 - p->x0) * pw;
    *v = py + ph - (y - p->y0) / (p->y1 - p->y0) * ph;
}

static void set_text(char *dst, const char *src)
{
    snprintf(dst, NF_PLOT_TEXT_MAX, "%s", src ? src : "");
}

void nf_panel_set_title(nf_panel *p, const char *title) { if (p) set_text(p->title, title); }
void nf_panel_set_xlabel(nf_panel *p, const char *label) { if (p) set_text(p->xlabel, label); }
void nf_panel_set_ylabel(nf_panel *p, const char *label) { if (p) set_text(p->ylabel, label); }

/* ---- the frame, ticks and labels ---- */

/* Ticks for an axis `length` pixels long: the densest nice ticks that are comfortably apart.
 * Going down from the most ticks the helper allows, the target yields ever larger steps; the first
 * whose spacing is at least 50 pixels and the widest label plus 14 (x), or 38 pixels (y), wins,
 * unless it leaves a single tick; then the largest smaller step that gives two or more ticks with
 * labels that do not touch (x: a 10-pixel gap; y: 2.2 digit heights) wins.  *label_w receives the
 * widest label of the chosen ticks. */
void nf_plot_axis_ticks(cairo_t *cr, nf_ticks *t, double lo, double hi, double length, int horizontal,
                        double *label_w)
{
    nf_ticks fallback;
    double fallback_w = 0.0, last_step = 0.0, last_w = 0.0;
    int have_fallback = 0;
    double digit = nf_plot_digit_height(cr, NF_FONT_TICK);
    for (int target = NF_TICKS_MAX - 1; target >= 1; target--) {
        if (nf_ticks_nice(t, lo, hi, target) != NF_OK) { t->n = 0; return; }
        if (t->step == last_step) continue;
        last_step = t->step;
        double spacing = t->step / (hi - lo) * length, widest = 0.0;
        for (int i = 0; i < t->n; i++) {
            char s[64];
            nf_plot_tick_text(s, sizeof s, t->v[i], t->step);
            widest = fmax(widest, nf_plot_text_width(cr, s, NF_FONT_TICK, 0));
        }
        last_w = widest;
        int apart = spacing >= (horizontal ? widest + 10.0 : 2.2 * digit);
        int comfortable = spacing >= (horizontal ? fmax(widest + 14.0, 50.0) : 38.0);
        if (comfortable && (t->n >= 2 || !have_fallback)) { *label_w = widest; return; }
        if (comfortable) break;
        if (apart && t->n >= 2) fallback = *t, fallback_w = widest, have_fallback = 1;
    }
    if (have_fallback) *t = fallback, *label_w = fallback_w;
    else *label_w = last_w;
}

int nf_panel_draw_axes(nf_panel *p)
{
    NF_TRY(nf_panel_begin(p, "axes", 0));
    cairo_t *cr = p->fig->cr;
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    char s[64];
    cairo_save(cr);
    nf_plot_set_rgba(cr, nf_rgba_hex(NF_INK, 1.0));
    cairo_set_line_width(cr, 1.0);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_SQUARE);
    cairo_rectangle(cr, x + 0.5, y + 0.5, w - 1.0, h - 1.0);
    cairo_stroke(cr);

    nf_ticks t;
    double label_w = 0.0;
    nf_plot_axis_ticks(cr, &t, p->x0, p->x1, w, 1, &label_w);
    for (int i = 0; i < t.n; i++) {
        double u, v;
        nf_panel_to_pixel(p, t.v[i], p->y0, &u, &v);
        u = fmin(fmax(floor(u) + 0.5, x + 0.5), x + w - 0.5);   /* on a pixel centre, inside the frame */
        cairo_move_to(cr, u, y + h);
        cairo_line_to(cr, u, y + h + NF_TICK_LEN);
        cairo_stroke(cr);
        nf_plot_tick_text(s, sizeof s, t.v[i], t.step);
        nf_plot_text(cr, s, u, y + h + NF_TICK_LEN + 3.0, NF_FONT_TICK, 0, NF_HALIGN_CENTER, NF_VALIGN_TOP, 0.0);
    }
    label_w = 0.0;
    nf_plot_axis_ticks(cr, &t, p->y0, p->y1, h, 0, &label_w);
    for (int i = 0; i < t.n; i++) {
        double u, v;
        nf_panel_to_pixel(p, p->x0, t.v[i], &u, &v);
        v = fmin(fmax(floor(v) + 0.5, y + 0.5), y + h - 0.5);
        cairo_move_to(cr, x, v);
        cairo_line_to(cr, x - NF_TICK_LEN, v);
        cairo_stroke(cr);
        nf_plot_tick_text(s, sizeof s, t.v[i], t.step);
        nf_plot_text(cr, s, x - NF_TICK_LEN - 3.0, v, NF_FONT_TICK, 0, NF_HALIGN_RIGHT, NF_VALIGN_MIDDLE, 0.0);
    }
    /* x label under the tick labels; y label turned to read upwards, beside the tick labels but
     * inside the cell; title above the plot area */
    double digit = nf_plot_digit_height(cr, NF_FONT_LABEL);
    double ylabel_x = fmax(x - NF_TICK_LEN - 3.0 - label_w - 8.0, p->cell_x + 5.0 + digit);
    nf_plot_text(cr, p->xlabel, x + 0.5 * w, p->cell_y + p->cell_h - 9.0, NF_FONT_LABEL, 0, NF_HALIGN_CENTER,
                 NF_VALIGN_BASELINE, 0.0);
    nf_plot_text(cr, p->ylabel, ylabel_x, y + 0.5 * h,
                 NF_FONT_LABEL, 0, NF_HALIGN_CENTER, NF_VALIGN_BASELINE, -NF_PI / 2);
    nf_plot_text(cr, p->title, x + 0.5 * w, y - 9.0, NF_FONT_TITLE, 1, NF_HALIGN_CENTER, NF_VALIGN_BASELINE, 0.0);
    cairo_restore(cr);
    return nf_plot_cairo_check(p->fig, "axes");
}

/* ---- legends ---- */

int nf_panel_legend_add(nf_panel *p, int kind, nf_rgba colour, const char *name)
{
    if (!p) return nf_error(NF_EINVAL, "legend: panel is NULL");
    if (p->nlegend >= NF_LEGEND_MAX)
        return nf_error(NF_EINVAL, "legend of panel (%d, %d): at most %d entries, '%s' is one too many", p->row,
                        p->col, NF_LEGEND_MAX, name ? name : "");
    nf_legend_entry *e = &p->legend[p->nlegend++];
    e->kind = kind, e->colour = colour;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
    return NF_OK;
}

/* The key of one entry, centred vertically on cy, starting at sx, `sample` pixels wide. */
static void legend_key(cairo_t *cr, const nf_legend_entry *e, double sx, double cy, double sample)
{
    nf_rgba c = e->colour;
    if (e->kind == NF_LEGEND_MARKER) {
        c.a = fmax(c.a, 0.8);
        nf_plot_set_rgba(cr, c);
        cairo_arc(cr, sx + 0.5 * sample, cy, 3.5, 0.0, 2.0 * NF_PI);
        cairo_fill(cr);
    } else if (e->kind == NF_LEGEND_PATCH) {
        nf_plot_set_rgba(cr, c);
        cairo_rectangle(cr, sx + 4.0, cy - 5.0, sample - 8.0, 10.0);
        cairo_fill(cr);
    } else {
        c.a = fmax(c.a, 0.8);
        nf_plot_set_rgba(cr, c);
        cairo_set_line_width(cr, 2.0);
        cairo_move_to(cr, sx, cy);
        cairo_line_to(cr, sx + sample, cy);
        cairo_stroke(cr);
    }
    nf_plot_set_rgba(cr, nf_rgba_hex(NF_INK, 1.0));
    nf_plot_text(cr, e->name, sx + sample + 6.0, cy, NF_FONT_LEGEND, 0, NF_HALIGN_LEFT, NF_VALIGN_MIDDLE, 0.0);
}

int nf_panel_legend(nf_panel *p, int corner)
{
    if (!p) return nf_error(NF_EINVAL, "legend: panel is NULL");
    if (corner < NF_LEGEND_UPPER_RIGHT || corner > NF_LEGEND_ABOVE)
        return nf_error(NF_EINVAL, "legend of panel (%d, %d): corner %d is not an nf_legend_corner", p->row, p->col,
                        corner);
    if (p->nlegend == 0) return NF_OK;
    p->drawn = 1;
    cairo_t *cr = p->fig->cr;
    double x, y, w, h;
    nf_panel_plot_rect(p, &x, &y, &w, &h);
    const double pad = 6.0, row = 17.0, sample = 22.0, inset = 6.0, gap = 16.0;
    double text_w[NF_LEGEND_MAX], widest = 0.0, total = 0.0;
    for (int i = 0; i < p->nlegend; i++) {
        text_w[i] = nf_plot_text_width(cr, p->legend[i].name, NF_FONT_LEGEND, 0);
        widest = fmax(widest, text_w[i]);
        total += sample + 6.0 + text_w[i] + (i > 0 ? gap : 0.0);
    }
    cairo_save(cr);
    if (corner == NF_LEGEND_ABOVE) {
        double sx = round(x + 0.5 * (w - total)), cy = y - 13.0;
        for (int i = 0; i < p->nlegend; i++) {
            legend_key(cr, &p->legend[i], sx, cy, sample);
            sx += sample + 6.0 + text_w[i] + gap;
        }
    } else {
        double bw = round(pad + sample + 6.0 + widest + pad), bh = round(2.0 * pad + p->nlegend * row - 3.0);
        int right = corner == NF_LEGEND_UPPER_RIGHT || corner == NF_LEGEND_LOWER_RIGHT;
        int lower = corner == NF_LEGEND_LOWER_RIGHT || corner == NF_LEGEND_LOWER_LEFT;
        double bx = right ? x + w - inset - bw : x + inset, by = lower ? y + h - inset - bh : y + inset;
        cairo_rectangle(cr, bx + 0.5, by + 0.5, bw, bh);
        cairo_set_source_rgba(cr, 1.0, 1.0, 1.0, 0.85);
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, 1.0);
        cairo_set_source_rgba(cr, 0.7, 0.7, 0.7, 1.0);
        cairo_stroke(cr);
        for (int i = 0; i < p->nlegend; i++)
            legend_key(cr, &p->legend[i], bx + pad, by + pad + i * row + 0.5 * (row - 3.0), sample);
    }
    cairo_restore(cr);
    return nf_plot_cairo_check(p->fig, "legend");
}
