/* flows/coupling2d.c - the affine coupling step of RealNVP / Glow on an image, with a conv net.
 *
 * The first h*w*c entries of each D-vector are an NHWC image (entry (i, j, ch) at (i*w + j)*c + ch);
 * entries after them pass through unchanged with log-det 0 (what a multi-scale flow factored out).
 * The image's entries are split into a conditioning part x_c and a transformed part x_t:
 *
 *   mask=checkerboard  pixels with (i + j) even condition, the odd ones are transformed (all channels);
 *   mask=channel       the first floor(c/2) channels of every pixel condition the other ones;
 *   flip=1             swaps the two roles.
 *
 * The conditioner (nn/convnet.h: conv kxk -> relu -> conv 1x1 -> relu -> conv kxk, last layer zero)
 * reads an image of its own: for checkerboard the whole image with the transformed pixels zeroed (c
 * channels; no extra mask channel: the zeroed pixels already show the pattern, data being almost
 * never exactly 0), for channel the conditioning channels.  A context (class one-hot) enters it as a
 * per-image bias of the first layer.  It outputs two values per transformed channel per pixel,
 * column 2q the raw log-scale r and 2q+1 the shift t (q = the channel's index among the transformed
 * ones; for checkerboard the outputs at conditioning pixels are unused), and
 *
 *   y_c = x_c,   y_t = x_t * exp(s) + t,   log|det J| = sum over transformed entries of s,
 *   scale=tanh (default)  s = clamp * tanh(r / clamp),  ds/dr = 1 - (s / clamp)^2,  clamp=3;
 *   scale=sigmoid (Glow)  exp(s) = sigmoid(r + 2),      ds/dr = 1 - sigmoid(r + 2).
 *
 * Why tanh by default: with the zero-initialised last layer s(0) = 0, so the step starts as the
 * exact identity with log-det 0; s is bounded both ways (no overflow, no zero scale) and symmetric;
 * the same choice as affine-coupling.  Glow's sigmoid scale (bounded in (0, 1), 0.88 at the start)
 * is there to reproduce Glow.  The inverse is exact in one pass: x_c = y_c gives the conditioner
 * the same input, x_t = (y_t - t) exp(-s).
 *
 * Options: h=, w=, c= (flows/image_shape.h: defaults h = w = 1 and c = D / (h*w); h*w*c <= D),
 * mask= (default checkerboard for an image of two pixels or more, channel for one pixel), flip=,
 * hidden=64 (channels of the net), k=3 (its first and last kernel), scale=, clamp=.
 *
 * Speed: the net's convolutions are one product each over the whole batch (nn/conv2d.h); the
 * elementwise work here is O(n*h*w*c) beside them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/bijector.h"
#include "flows/image_shape.h"
#include "nn/convnet.h"

enum { MASK_CHECKERBOARD = 0, MASK_CHANNEL = 1 };
enum { SCALE_TANH = 0, SCALE_SIGMOID = 1 };

typedef struct coupling2d_state {
    int h, w, c, mask, flip, scale;
    nf_real clamp;
    int c0, cin;      /* the conditioning channels [c0, c0 + cin) (checkerboard: all) */
    int t0, ct;       /* the transformed channels [t0, t0 + ct) (checkerboard: all) */
    int cond_parity;  /* checkerboard: pixels with (i + j) % 2 == cond_parity condition */
    nf_convnet net;
} coupling2d_state;

/* Workspace regions (nf_reals, R = n*h*w pixels): the conditioner's input image, its output, the
 * output's gradient, the input's gradient, then the net's own (its caches live until backward). */
typedef struct c2d_ws {
    nf_real *in, *out, *dout, *din, *net;
} c2d_ws;

static c2d_ws layout(const coupling2d_state *st, nf_real *ws, int n)
{
    const size_t R = (size_t)n * st->h * st->w;
    c2d_ws l;
    l.in = ws;
    l.out = l.in + R * st->cin;
    l.dout = l.out + R * 2 * st->ct;
    l.din = l.dout + R * 2 * st->ct;
    l.net = l.din + R * st->cin;
    return l;
}

static size_t c2d_workspace(const nf_bijector *b, int n)
{
    const coupling2d_state *st = b->state;
    if (n <= 0) return 0;
    const size_t R = (size_t)n * st->h * st->w;
    return R * (2 * (size_t)st->cin + 4 * (size_t)st->ct) + nf_convnet_workspace(&st->net, n, st->h, st->w);
}

static int c2d_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    int mask, flip, hidden, k, scale;
    double clamp;
    nf_image_shape shape;
    NF_TRY(nf_image_shape_read(&shape, b, opts));
    const int h = shape.h, w = shape.w, c = shape.c, hw = shape.hw;
    NF_TRY(nf_opts_choice(opts, "mask", "checkerboard|channel", hw >= 2 ? MASK_CHECKERBOARD : MASK_CHANNEL, &mask));
    NF_TRY(nf_opts_int(opts, "flip", 0, 0, 1, &flip));
    NF_TRY(nf_opts_int(opts, "hidden", 64, 1, 1 << 16, &hidden));
    NF_TRY(nf_opts_int(opts, "k", 3, 1, 15, &k));
    NF_TRY(nf_opts_choice(opts, "scale", "tanh|sigmoid", SCALE_TANH, &scale));
    if (scale == SCALE_SIGMOID && nf_opts_has(opts, "clamp"))
        return nf_error(NF_EINVAL, "coupling2d (%s): clamp= applies to scale=tanh only (scale=sigmoid is bounded by "
                        "itself)", b->name);
    NF_TRY(nf_opts_double(opts, "clamp", 3.0, 1e-3, 1e3, &clamp));
    if (k % 2 == 0)
        return nf_error(NF_EINVAL, "coupling2d (%s): kernel size k=%d; expected an odd size ('same' padding)", b->name,
                        k);
    if (mask == MASK_CHECKERBOARD && hw < 2)
        return nf_error(NF_EINVAL, "coupling2d (%s): mask=checkerboard on a %dx%d image; expected at least 2 pixels "
                        "(use mask=channel)", b->name, h, w);
    if (mask == MASK_CHANNEL && c < 2)
        return nf_error(NF_EINVAL, "coupling2d (%s): mask=channel with c=%d channel; expected c >= 2", b->name, c);

    coupling2d_state *st = nf_calloc(1, sizeof *st, "coupling2d state");
    if (!st) return NF_ENOMEM;
    st->h = h, st->w = w, st->c = c, st->mask = mask, st->flip = flip, st->scale = scale;
    st->clamp = (nf_real)clamp;
    if (mask == MASK_CHECKERBOARD) {
        st->c0 = 0, st->cin = c, st->t0 = 0, st->ct = c;
        st->cond_parity = flip;
    } else {
        const int half = c / 2;
        if (!flip) st->c0 = 0, st->cin = half, st->t0 = half, st->ct = c - half;
        else st->c0 = half, st->cin = c - half, st->t0 = 0, st->ct = half;
    }
    char name[NF_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.net", b->name);
    nf_convnet_config cfg = {.in = st->cin, .ctx = b->ctx_dim, .hidden = hidden, .out = 2 * st->ct, .k = k,
                             .zero_init_output = 1};
    int rc = nf_convnet_init(&st->net, b->P, name, &cfg, rng);
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

static void c2d_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

/* Is pixel (i, j) a conditioning / transformed one?  (channel mask: every pixel is both.) */
static int cond_pixel(const coupling2d_state *st, int i, int j)
{
    return st->mask == MASK_CHANNEL || ((i + j) & 1) == st->cond_parity;
}

static int trans_pixel(const coupling2d_state *st, int i, int j)
{
    return st->mask == MASK_CHANNEL || ((i + j) & 1) != st->cond_parity;
}

/* The conditioner's input (n, h, w, cin): x's conditioning channels at conditioning pixels, 0 elsewhere. */
static void gather_input(const coupling2d_state *st, nf_real *in, const nf_real *x, int D, int n)
{
    const int h = st->h, w = st->w, c = st->c, cin = st->cin;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                nf_real *dst = in + (((size_t)b * h + i) * w + j) * cin;
                if (cond_pixel(st, i, j))
                    memcpy(dst, x + (size_t)b * D + ((size_t)i * w + j) * c + st->c0, (size_t)cin * sizeof *dst);
                else
                    memset(dst, 0, (size_t)cin * sizeof *dst);
            }
}

/* dx += din at the entries gather_input read. */
static void scatter_input_grad(const coupling2d_state *st, nf_real *dx, const nf_real *din, int D, int n)
{
    const int h = st->h, w = st->w, c = st->c, cin = st->cin;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                if (!cond_pixel(st, i, j)) continue;
                const nf_real *src = din + (((size_t)b * h + i) * w + j) * cin;
                nf_real *dst = dx + (size_t)b * D + ((size_t)i * w + j) * c + st->c0;
                for (int q = 0; q < cin; q++) dst[q] += src[q];
            }
}

/* s from the raw output r, and ds/dr:  tanh: s = clamp tanh(r / clamp), 1 - (s / clamp)^2;
 * sigmoid: s = log sigmoid(r + 2) = -log(1 + exp(-(r + 2))), 1 - sigmoid(r + 2). */
static nf_real log_scale(const coupling2d_state *st, nf_real r, nf_real *ds_dr)
{
    if (st->scale == SCALE_TANH) {
        const nf_real s = st->clamp * (nf_real)tanh((double)(r / st->clamp));
        if (ds_dr) *ds_dr = 1 - (s / st->clamp) * (s / st->clamp);
        return s;
    }
    const double a = (double)r + 2;
    const double s = a >= 0 ? -log1p(exp(-a)) : a - log1p(exp(a));
    if (ds_dr) *ds_dr = (nf_real)(1 - exp(s));
    return (nf_real)s;
}

/* The map in either direction; sign +1: forward y_t = x_t exp(s) + t, logdet += sum s;
 * sign -1: inverse x_t = (y_t - t) exp(-s), logdet -= sum s.  in -> out, every other entry copied. */
static int c2d_apply(nf_bijector *b, nf_real *out, nf_real *logdet, const nf_real *in, const nf_real *ctx, int n,
                     nf_real *ws, int sign)
{
    coupling2d_state *st = b->state;
    const int D = b->dim, h = st->h, w = st->w, c = st->c, ct = st->ct;
    c2d_ws l = layout(st, ws, n);
    gather_input(st, l.in, in, D, n); /* x_c = y_c: the same conditioner input both ways */
    nf_convnet_forward(&st->net, b->P, l.net, l.out, l.in, b->ctx_dim ? ctx : NULL, n, h, w);
    memcpy(out, in, (size_t)n * D * sizeof *out);
    for (int bi = 0; bi < n; bi++) {
        double ld = 0;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                if (!trans_pixel(st, i, j)) continue;
                const size_t e = (size_t)bi * D + ((size_t)i * w + j) * c + st->t0;
                const nf_real *o = l.out + (((size_t)bi * h + i) * w + j) * 2 * ct;
                for (int q = 0; q < ct; q++) {
                    const nf_real s = log_scale(st, o[2 * q], NULL), t = o[2 * q + 1];
                    if (sign > 0) out[e + q] = in[e + q] * (nf_real)exp((double)s) + t;
                    else out[e + q] = (in[e + q] - t) * (nf_real)exp(-(double)s);
                    ld += s;
                }
            }
        logdet[bi] += (nf_real)(sign * ld);
    }
    return nf_bijector_check_output(b, out, logdet, n, sign > 0 ? "forward" : "inverse");
}

static int c2d_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return c2d_apply(b, y, logdet, x, ctx, n, ws, 1);
}

static int c2d_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return c2d_apply(b, x, logdet, y, ctx, n, ws, -1);
}

/* Both backwards, with g = dL/d(output), u = dL/dlogdet, a = the map's input, o = its output:
 *   forward  (o_t = a_t e^s + t):    da_t += g e^s,   dt = g,       ds = g a_t e^s + u;
 *   inverse  (o_t = (a_t - t) e^-s): da_t += g e^-s,  dt = -g e^-s, ds = -g o_t - u;
 *   dr = ds ds/dr;  da (every other entry) += g;  da_c += (conditioner backward of (dr, dt)). */
static int c2d_grad(nf_bijector *b, nf_real *da, nf_real *dctx, const nf_real *g, const nf_real *dlogdet,
                    const nf_real *a, const nf_real *o, const nf_real *ctx, int n, nf_real *ws, int sign)
{
    coupling2d_state *st = b->state;
    const int D = b->dim, h = st->h, w = st->w, c = st->c, ct = st->ct;
    c2d_ws l = layout(st, ws, n);
    memset(l.dout, 0, (size_t)n * h * w * 2 * ct * sizeof *l.dout);
    for (int bi = 0; bi < n; bi++) {
        const nf_real u = dlogdet ? dlogdet[bi] : 0;
        const nf_real *gb = g + (size_t)bi * D;
        if (da) { /* the entries the map copies: everything but the transformed ones */
            nf_real *dab = da + (size_t)bi * D;
            for (int i = 0; i < h; i++)
                for (int j = 0; j < w; j++) {
                    const int p = (i * w + j) * c, t = trans_pixel(st, i, j);
                    for (int ch = 0; ch < c; ch++)
                        if (!t || ch < st->t0 || ch >= st->t0 + ct) dab[p + ch] += gb[p + ch];
                }
            for (int k = h * w * c; k < D; k++) dab[k] += gb[k];
        }
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                if (!trans_pixel(st, i, j)) continue;
                const size_t e = (size_t)bi * D + ((size_t)i * w + j) * c + st->t0, r = ((size_t)bi * h + i) * w + j;
                const nf_real *of = l.out + r * 2 * ct;
                nf_real *df = l.dout + r * 2 * ct;
                for (int q = 0; q < ct; q++) {
                    nf_real dsr;
                    const nf_real s = log_scale(st, of[2 * q], &dsr), gq = g[e + q];
                    const nf_real es = (nf_real)exp(sign * (double)s);
                    nf_real ds;
                    if (sign > 0) {
                        df[2 * q + 1] = gq;
                        ds = gq * a[e + q] * es + u;
                    } else {
                        df[2 * q + 1] = -gq * es;
                        ds = -gq * o[e + q] - u;
                    }
                    df[2 * q] = ds * dsr;
                    if (da) da[e + q] += gq * es;
                }
            }
    }
    nf_real *din = da ? l.din : NULL;
    if (din) memset(din, 0, (size_t)n * h * w * st->cin * sizeof *din);
    nf_convnet_backward(&st->net, b->P, l.net, din, b->ctx_dim ? dctx : NULL, l.dout, l.in, b->ctx_dim ? ctx : NULL,
                        n, h, w);
    if (din) scatter_input_grad(st, da, din, D, n);
    return NF_OK;
}

static int c2d_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                        const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    return c2d_grad(b, dx, dctx, dy, dlogdet, x, y, ctx, n, ws, 1);
}

static int c2d_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx, const nf_real *dlogdet,
                                const nf_real *y, const nf_real *x, const nf_real *ctx, int n, nf_real *ws)
{
    return c2d_grad(b, dy, dctx, dx, dlogdet, y, x, ctx, n, ws, -1);
}

const nf_bijector_type nf_bijector_coupling2d = {
    .name = "coupling2d",
    .options_help = "h=1 w=1 c=D/(h*w) mask=checkerboard|channel flip=0|1 hidden=64 k=3 scale=tanh|sigmoid clamp=3",
    .create = c2d_create,
    .destroy = c2d_destroy,
    .workspace = c2d_workspace,
    .forward = c2d_forward,
    .inverse = c2d_inverse,
    .backward = c2d_backward,
    .inverse_backward = c2d_inverse_backward,
    .init_data = NULL,
};
