/* flows/image_shape.h - the image options every image bijector reads (squeeze, split, actnorm2d,
 * conv1x1).  Internal to flows/.
 *
 * Images are NHWC: an image of height h, width w and c channels is h*w*c consecutive reals, entry
 * (i, j, k) at (i*w + j)*c + k.  An image bijector of dimension D acts on the image in the FIRST
 * h*w*c entries of each row; the entries after it (dimensions factored out at earlier scales) pass
 * through unchanged with log-determinant 0.  Options h=, w=, c= default to 1, 1 and D / (h*w) (so c = D
 * when all three are omitted).
 */
#ifndef NF_IMAGE_SHAPE_H
#define NF_IMAGE_SHAPE_H

#include <string.h>

#include "flows/bijector.h"

typedef struct nf_image_shape {
    int h, w, c;
    int hw; /* pixels, h*w */
    int n;  /* entries of the image, h*w*c <= D; D - n pass through */
} nf_image_shape;

/* Read h=, w=, c= for bijector b; NF_EINVAL naming b when the image does not fit its dimension. */
static inline int nf_image_shape_read(nf_image_shape *s, const nf_bijector *b, nf_opts *opts)
{
    const int D = b->dim;
    memset(s, 0, sizeof *s);
    NF_TRY(nf_opts_int(opts, "h", 1, 1, 1 << 30, &s->h));
    NF_TRY(nf_opts_int(opts, "w", 1, 1, 1 << 30, &s->w));
    const long long hw = (long long)s->h * s->w;
    NF_TRY(nf_opts_int(opts, "c", hw <= D ? (int)(D / hw) : 1, 1, 1 << 30, &s->c));
    const long long n = hw * s->c;
    if (n > D)
        return nf_error(NF_EINVAL,
                        "%s (%s): image h=%d, w=%d, c=%d has h*w*c = %lld entries, more than the dimension %d: "
                        "expected h*w*c <= D (the image occupies the first h*w*c entries)",
                        b->type->name, b->name, s->h, s->w, s->c, n, D);
    s->hw = s->h * s->w;
    s->n = (int)n;
    return NF_OK;
}

/* dst[n..D-1] = src[n..D-1] (add = 0) or += (add = 1) for every row: the pass-through tail. */
static inline void nf_image_tail(const nf_image_shape *s, int D, nf_real *dst, const nf_real *src, int rows, int add)
{
    const int t = D - s->n;
    if (t <= 0) return;
    for (int i = 0; i < rows; i++) {
        nf_real *d = dst + (size_t)i * D + s->n;
        const nf_real *r = src + (size_t)i * D + s->n;
        if (add)
            for (int j = 0; j < t; j++) d[j] += r[j];
        else
            memcpy(d, r, (size_t)t * sizeof(nf_real));
    }
}

#endif
