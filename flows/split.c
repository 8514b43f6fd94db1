/* flows/split.c - the factor-out of a multi-scale image flow (RealNVP, Glow): half the channels leave.
 *
 * On the image (h, w, c) in the first h*w*c entries of a row (c even, m = c/2, P = h*w pixels):
 *
 *   y[p*m + k]         = x[p*c + k]        k < m   the kept image (h, w, m): every pixel's first m channels
 *   y[P*m + p*m + k]   = x[p*c + m + k]    k < m   the factored-out half (h, w, m): the other m channels
 *   y[j]               = x[j]              j >= h*w*c, the tail
 *
 * so the bijectors after it, built with c = m, act on the kept half in front, and the factored-out
 * half sits just before the tail of earlier scales and reaches the base distribution untouched (the
 * prefix rule, flows/image_shape.h).  A permutation: log|det| = 0; backward applies its inverse to
 * the incoming gradient.  Options h=, w=, c= (c even); no parameters, no state.  Context is ignored.
 */
#include <stdlib.h>

#include "flows/bijector.h"
#include "flows/image_shape.h"

static void split_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int split_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    (void)rng;
    nf_image_shape s;
    NF_TRY(nf_image_shape_read(&s, b, opts));
    if (s.c % 2)
        return nf_error(NF_EINVAL, "%s (%s): image c=%d channels: expected an even number, to keep c/2 and factor "
                        "out the other c/2", b->type->name, b->name, s.c);
    nf_image_shape *st = nf_calloc(1, sizeof *st, "split state");
    if (!st) return NF_ENOMEM;
    *st = s;
    b->state = st;
    return NF_OK;
}

static size_t split_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* One row.  to_split: dst is the split layout and src the image; otherwise the other way round
 * (add: accumulate instead of assign). */
static void split_row(const nf_image_shape *s, nf_real *dst, const nf_real *src, int to_split, int add)
{
    const int m = s->c / 2;
    const size_t half = (size_t)s->hw * m;
    for (int p = 0; p < s->hw; p++)
        for (int part = 0; part < 2; part++) {
            const size_t o = part * half + (size_t)p * m, q = (size_t)p * s->c + (size_t)part * m;
            nf_real *d = dst + (to_split ? o : q);
            const nf_real *r = src + (to_split ? q : o);
            if (add)
                for (int k = 0; k < m; k++) d[k] += r[k];
            else
                for (int k = 0; k < m; k++) d[k] = r[k];
        }
}

static void split_apply(const nf_bijector *b, nf_real *dst, const nf_real *src, int n, int to_split, int add)
{
    const nf_image_shape *s = b->state;
    const int D = b->dim;
    for (int i = 0; i < n; i++) split_row(s, dst + (size_t)i * D, src + (size_t)i * D, to_split, add);
    nf_image_tail(s, D, dst, src, n, add);
}

/* y = S x (the permutation above);  log|det| = 0. */
static int split_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                         nf_real *ws)
{
    (void)ctx, (void)ws;
    split_apply(b, y, x, n, 1, 0);
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* x = S^T y;  log|det| = 0. */
static int split_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                         nf_real *ws)
{
    (void)ctx, (void)ws;
    split_apply(b, x, y, n, 0, 0);
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* dL/dx += S^T dL/dy (no parameters; the log-determinant is constant). */
static int split_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                          const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    if (dx) split_apply(b, dx, dy, n, 0, 1);
    return NF_OK;
}

/* Sampling direction x = S^T y:  dL/dy += S dL/dx. */
static int split_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                  const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx, int n,
                                  nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)y, (void)x, (void)ctx, (void)ws;
    if (dy) split_apply(b, dy, dx, n, 1, 1);
    return NF_OK;
}

const nf_bijector_type nf_bijector_split = {
    .name = "split",
    .options_help = "h=1 w=1 c=D/(h*w) (c even): the image's first c/2 channels stay in front as (h, w, c/2), the other "
                    "c/2 are factored out behind them",
    .create = split_create,
    .destroy = split_destroy,
    .workspace = split_workspace,
    .forward = split_forward,
    .inverse = split_inverse,
    .backward = split_backward,
    .inverse_backward = split_inverse_backward,
    .init_data = NULL,
};
