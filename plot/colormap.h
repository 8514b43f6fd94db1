/* plot/colormap.h - colours: perceptually uniform colour maps and a palette for series.
 *
 * A colour map is a const type object (like gsl_rng_type): a name and a 256-entry RGB table.  Pick
 * one by pointer (nf_colormap_viridis) or by name (nf_colormap_by_name("magma")).  nf_colormap_rgb
 * maps t in [0, 1] to a colour by linear interpolation between neighbouring entries, so t = 0 and
 * t = 1 give the table's end colours exactly; t outside [0, 1] (and +-inf) is clamped, NaN gives the
 * colour at 0.  viridis and magma are the tables of van der Walt and Smith (as shipped with
 * matplotlib), which their authors dedicated to the public domain (CC0).
 *
 * Lines, points and bars take an nf_rgba (components in [0, 1], a = opacity).  nf_plot_color(i)
 * is the i-th colour of a ten-colour qualitative palette (blue, orange, green, red, purple, ...),
 * cycling for i >= 10, so series 0, 1, 2 of a plot get distinct colours without choosing any.
 */
#ifndef NF_PLOT_COLORMAP_H
#define NF_PLOT_COLORMAP_H

#define NF_COLORMAP_SIZE 256

typedef struct nf_colormap {
    const char *name;                       /* "viridis" */
    const float (*table)[3];                /* (NF_COLORMAP_SIZE, 3) RGB in [0, 1] */
} nf_colormap;

extern const nf_colormap *const nf_colormap_viridis;
extern const nf_colormap *const nf_colormap_magma;

/* The colour map called `name` ("viridis", "magma"); NULL (and NF_EINVAL recorded) if unknown. */
const nf_colormap *nf_colormap_by_name(const char *name);
/* rgb receives the colour at t (clamped to [0, 1]); cm NULL means viridis. */
void nf_colormap_rgb(const nf_colormap *cm, double t, double rgb[3]);

typedef struct nf_rgba {
    double r, g, b, a;
} nf_rgba;

/* 0xRRGGBB with opacity alpha. */
nf_rgba nf_rgba_hex(unsigned hex, double alpha);
/* The i-th palette colour, opaque. */
nf_rgba nf_plot_color(int i);

#endif
