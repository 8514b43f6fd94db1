/* plot/pairplot.h - a k x k grid comparing two point sets dimension by dimension.
 *
 * Panel (i, j) off the diagonal shows the scatter of dimension j (across) against dimension i (up)
 * for set a (the data) and set b (the samples, drawn second, on top); the diagonal panel (i, i)
 * shows both sets' 1-D density histograms of dimension i, a as filled bars and b as a step line.
 * The limits of dimension i come from set a (or b when a is empty), padded by 5%, and are shared
 * by its row and column; points outside are clipped.  Large sets are thinned to an evenly spaced
 * subset of rows for the scatters (the histograms use every point), so the picture stays
 * deterministic and quick.  The figure must have k rows and k columns; about 220 pixels per panel
 * reads well (nf_figure_alloc(220 k, 220 k, k, k)).
 */
#ifndef NF_PLOT_PAIRPLOT_H
#define NF_PLOT_PAIRPLOT_H

#include <stddef.h>

#include "plot/colormap.h"
#include "plot/figure.h"

/* Zero-initialised options (or NULL) give the defaults in the comments. */
typedef struct nf_pairplot_opts {
    const char *const *names;       /* k dimension names; NULL: "x1", ..., "xk" */
    const char *label_a, *label_b;  /* legend entries; NULL: "data", "samples" */
    nf_rgba colour_a, colour_b;     /* alpha 0: palette colours 0 and 1 */
    int bins;                       /* diagonal histogram bins; 0: 30 */
    size_t max_points;              /* rows per set in each scatter; 0: 3000 */
    double radius;                  /* scatter disc radius in pixels; 0: 1.4 */
} nf_pairplot_opts;

/* a: (na, k) and b: (nb, k) row-major (b may be NULL with nb = 0).  NF_EINVAL if the figure is not
 * k x k, k < 1, both sets are empty or a needed array is NULL; NF_EDATA if a dimension has no
 * finite value. */
int nf_figure_pairplot(nf_figure *fig, const double *a, size_t na, const double *b, size_t nb, int k,
                       const nf_pairplot_opts *o);

#endif
