/* flows/squeeze.c - the squeeze of a multi-scale image flow (RealNVP, Glow): space to channels.
 *
 *   (h, w, c) -> (h/2, w/2, 4c):  y[(I*(w/2) + J)*4c + (di*2 + dj)*c + k] = x[((2I+di)*w + 2J+dj)*c + k]
 *
 * for I < h/2, J < w/2, di, dj in {0, 1}, k < c: each 2x2 block of pixels becomes one pixel whose 4c
 * channels are the block's pixels in row-major order (top-left, top-right, bottom-left,
 * bottom-right), each pixel's c channels kept together.  Images are NHWC in the first h*w*c entries
 * of a row (flows/image_shape.h); the rest passes through.  A permutation: log|det| = 0, and the
 * backward passes apply the inverse permutation to the incoming gradient.  Options h=, w= (both even)
 * and c=; no parameters, no state.  Context is ignored.
 */
#include <stdlib.h>

#include "flows/bijector.h"
#include "flows/image_shape.h"

static void squeeze_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int squeeze_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    nf_image_shape s;
    NF_TRY(nf_image_shape_read(&s, b, opts));
    if (s.h % 2 || s.w % 2)
        return nf_error(NF_EINVAL, "%s (%s): image h=%d, w=%d: expected even h and w (each 2x2 block of pixels "
                        "becomes one pixel of 4c channels)", b->type->name, b->name, s.h, s.w);
    nf_image_shape *st = nf_calloc(1, sizeof *st, "squeeze state");
    if (!st) return NF_ENOMEM;
    *st = s;
    b->state = st;
    return NF_OK;
}

static size_t squeeze_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* One row.  to_squeezed: dst is the squeezed layout and src the image, dst[o] (+)= src[p]; otherwise
 * dst is the image and src the squeezed layout, dst[p] (+)= src[o]; o is the squeezed index and p
 * the image index of the same entry (add: accumulate instead of assign). */
static void squeeze_row(const nf_image_shape *s, nf_real *dst, const nf_real *src, int to_squeezed, int add)
{
    const int c = s->c, w = s->w, h2 = s->h / 2, w2 = s->w / 2;
    for (int I = 0; I < h2; I++)
        for (int J = 0; J < w2; J++)
            for (int di = 0; di < 2; di++)
                for (int dj = 0; dj < 2; dj++) {
                    const size_t o = ((size_t)I * w2 + J) * 4 * c + (size_t)(di * 2 + dj) * c;
                    const size_t p = ((size_t)(2 * I + di) * w + 2 * J + dj) * c;
                    nf_real *d = dst + (to_squeezed ? o : p);
                    const nf_real *r = src + (to_squeezed ? p : o);
                    if (add)
                        for (int k = 0; k < c; k++) d[k] += r[k];
                    else
                        for (int k = 0; k < c; k++) d[k] = r[k];
                }
}

/* All n rows: the image part through squeeze_row, the tail copied or added. */
static void squeeze_apply(const nf_bijector *b, nf_real *dst, const nf_real *src, int n, int to_squeezed, int add)
{
    const nf_image_shape *s = b->state;
    const int D = b->dim;
    for (int i = 0; i < n; i++) squeeze_row(s, dst + (size_t)i * D, src + (size_t)i * D, to_squeezed, add);
    nf_image_tail(s, D, dst, src, n, add);
}

/* y = S x (the permutation above);  log|det| = 0. */
static int squeeze_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    squeeze_apply(b, y, x, n, 1, 0);
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* x = S^T y;  log|det| = 0. */
static int squeeze_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx, (void)ws;
    squeeze_apply(b, x, y, n, 0, 0);
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* dL/dx += S^T dL/dy (no parameters; the log-determinant is constant). */
static int squeeze_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    if (dx) squeeze_apply(b, dx, dy, n, 0, 1);
    return NF_OK;
}

/* Sampling direction x = S^T y:  dL/dy += S dL/dx. */
static int squeeze_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)y, (void)x, (void)ctx, (void)ws;
    if (dy) squeeze_apply(b, dy, dx, n, 1, 1);
    return NF_OK;
}

const nf_bijector_type nf_bijector_squeeze = {
    .name = "squeeze",
    .options_help = "h=1 w=1 c=D/(h*w): the image (h, w, c) in the first h*w*c entries becomes (h/2, w/2, 4c); h, w even",
    .create = squeeze_create,
    .destroy = squeeze_destroy,
    .workspace = squeeze_workspace,
    .forward = squeeze_forward,
    .inverse = squeeze_inverse,
    .backward = squeeze_backward,
    .inverse_backward = squeeze_inverse_backward,
    .init_data = NULL,
};
