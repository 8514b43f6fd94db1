/* flows/conv1x1.c - Glow's invertible 1x1 convolution, LU-parameterised: one c x c matrix applied to
 * every pixel's channel vector.
 *
 *   forward  y_p = W x_p,   W = P L (U + diag(sign e^{log_s}))     log|det| = h w sum_k log_s_k
 *   inverse  x_p = W^{-1} y_p by two triangular solves            log|det| = -h w sum_k log_s_k
 *
 * for every pixel p of the image (h, w, c) in the first h*w*c entries of a row (NHWC,
 * flows/image_shape.h); the tail after it passes through.  P is a fixed permutation, L unit lower and
 * U strictly upper triangular, sign fixed: the factors of flows/lu_factor.h, with parameters
 * "<name>.lower", "<name>.upper", "<name>.log_s" and state "<name>.perm", "<name>.sign" (so a rebuilt
 * model reloads the permutation and signs it was trained with).  No bias: Glow leaves the shift to
 * the ActNorm beside it.
 *
 * Initialisation, as Glow: a Haar-random rotation from the rng (QR of a Gaussian matrix), decomposed
 * by LU with partial pivoting, which gives P, L, U, sign and log_s; the map starts orthogonal,
 * log|det| = 0 (without an rng, the identity).  Options h=, w=, c=.  Context is ignored.
 *
 * In a row the pixels' channel vectors are the rows of an (h w, c) matrix, so Y_img = X_img W^T is one
 * product per row (one for the whole batch when the image fills the row).  The workspace:
 *   ws = the factors' scratch, NF_LU_FACTOR_WS(c) (Lf, Uf, W, dW, ...) | H (h w, c) | G (h w, c)
 * forward and inverse leave Lf, Uf (and W) there for the backward calls.
 */
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "flows/bijector.h"
#include "flows/image_shape.h"
#include "flows/lu_factor.h"

typedef struct {
    nf_image_shape s;
    nf_lu_factor f; /* c x c */
} conv1x1_state;

static void conv1x1_destroy(nf_bijector *b)
{
    free(b->state);
    b->state = NULL;
}

static int conv1x1_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    if (!b->P || !b->S) return nf_error(NF_EINVAL, "%s: parameter and state stores are required", b->name);
    nf_image_shape s;
    NF_TRY(nf_image_shape_read(&s, b, opts));
    conv1x1_state *st = nf_calloc(1, sizeof *st, "conv1x1 state");
    if (!st) return NF_ENOMEM;
    st->s = s;
    b->state = st;
    int rc = nf_lu_factor_add(&st->f, s.c, b->name, b->P, b->S);
    if (rc == NF_OK) rc = nf_lu_factor_init(&st->f, b->P, b->S, rng);
    if (rc != NF_OK) conv1x1_destroy(b);
    return rc;
}

static size_t conv1x1_workspace(const nf_bijector *b, int n)
{
    (void)n;
    const conv1x1_state *st = b->state;
    return NF_LU_FACTOR_WS(st->s.c) + 2 * (size_t)st->s.n;
}

/* How the image parts of n rows are visited: nblk blocks of `rows` pixel rows (c wide), block k at
 * k * D.  An image filling the row makes the whole batch one block. */
static void conv1x1_blocks(const nf_bijector *b, int n, int *nblk, int *rows)
{
    const conv1x1_state *st = b->state;
    const int whole = st->s.n == b->dim;
    *nblk = whole ? (n > 0) : n;
    *rows = whole ? n * st->s.hw : st->s.hw;
}

/* Y_img = X_img W^T per row;  log|det| = h w sum_k log_s_k. */
static int conv1x1_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx;
    const conv1x1_state *st = b->state;
    const int D = b->dim, c = st->s.c;
    int nblk, rows;
    NF_TRY(nf_lu_factor_check(&st->f, b->S, ws, b->type->name, b->name));
    nf_lu_factor_assemble(&st->f, b->P, b->S, ws, 1);
    conv1x1_blocks(b, n, &nblk, &rows);
    for (int k = 0; k < nblk; k++)
        nf_gemm(0, 1, rows, c, c, 1, x + (size_t)k * D, c, NF_LU_FACTOR_W(ws, c), c, 0, y + (size_t)k * D, c);
    nf_image_tail(&st->s, D, y, x, n, 0);
    const double ld = nf_lu_factor_logdet(&st->f, b->P) * st->s.hw;
    for (int i = 0; i < n; i++) logdet[i] += (nf_real)ld;
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* X_img W^T = Y_img:  X_img U'^T L^T = Y_img P (scatter, then two triangular solves; no inverse
 * matrix);  log|det| = -h w sum_k log_s_k. */
static int conv1x1_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx;
    const conv1x1_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const nf_real *perm = b->S->value + st->f.perm;
    int nblk, rows;
    NF_TRY(nf_lu_factor_check(&st->f, b->S, ws, b->type->name, b->name));
    nf_lu_factor_assemble(&st->f, b->P, b->S, ws, 0);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const nf_real *yp = y + (size_t)i * D + (size_t)p * c;
            nf_real *xp = x + (size_t)i * D + (size_t)p * c;
            for (int k = 0; k < c; k++) xp[(size_t)perm[k]] = yp[k]; /* (Z P)_{perm_k} = Z_k */
        }
    conv1x1_blocks(b, n, &nblk, &rows);
    for (int k = 0; k < nblk; k++) nf_lu_factor_solve(&st->f, ws, x + (size_t)k * D, c, rows);
    nf_image_tail(&st->s, D, x, y, n, 0);
    const double ld = nf_lu_factor_logdet(&st->f, b->P) * st->s.hw;
    for (int i = 0; i < n; i++) logdet[i] -= (nf_real)ld;
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* y_p = W x_p:  dL/dX_img += dY_img W;  dL/dW = sum_rows dY_img^T X_img;  then the factors' chain
 * rule (flows/lu_factor.c) with ldcoef = h w sum_i dlogdet_i;  the tail: dx += dy.
 * Reads Lf, Uf, W left in ws by forward. */
static int conv1x1_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const conv1x1_state *st = b->state;
    const int D = b->dim, c = st->s.c;
    int nblk, rows;
    nf_real *dW = NF_LU_FACTOR_DW(ws, c);
    conv1x1_blocks(b, n, &nblk, &rows);
    memset(dW, 0, (size_t)c * c * sizeof(nf_real));
    for (int k = 0; k < nblk; k++) {
        const size_t at = (size_t)k * D;
        if (dx) nf_gemm(0, 0, rows, c, c, 1, dy + at, c, NF_LU_FACTOR_W(ws, c), c, 1, dx + at, c);
        nf_gemm(1, 0, c, c, rows, 1, dy + at, c, x + at, c, 1, dW, c);
    }
    if (dx) nf_image_tail(&st->s, D, dx, dy, n, 1);
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    nf_lu_factor_chain(&st->f, b->P, b->S, ws, U * st->s.hw);
    return NF_OK;
}

/* Sampling direction x_p = W^{-1} y_p:  dL/dy_p = W^{-T} dx_p, i.e. the rows G = dX_img W^{-1}, from
 * H = G P solving H L U' = dX_img (two triangular solves), g_k = h_{perm_k};  dL/dY_img += G;
 * dL/dW = -sum_rows G^T X_img;  then the chain rule with ldcoef = -h w sum_i dlogdet_i;  the tail:
 * dy += dx.  Reads Lf, Uf left in ws by inverse. */
static int conv1x1_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const conv1x1_state *st = b->state;
    const int D = b->dim, c = st->s.c, hw = st->s.hw;
    const size_t N = (size_t)st->s.n;
    const nf_real *perm = b->S->value + st->f.perm;
    nf_real *dW = NF_LU_FACTOR_DW(ws, c), *H = ws + NF_LU_FACTOR_WS(c), *G = H + N;
    memset(dW, 0, (size_t)c * c * sizeof(nf_real));
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)i * D;
        memcpy(H, dx + at, N * sizeof(nf_real));
        nf_lu_factor_solve_transposed(&st->f, ws, H, c, hw);
        for (int p = 0; p < hw; p++)
            for (int k = 0; k < c; k++) G[(size_t)p * c + k] = H[(size_t)p * c + (size_t)perm[k]];
        if (dy) nf_axpy((int)N, 1, G, dy + at);
        nf_gemm(1, 0, c, c, hw, -1, G, c, x + at, c, 1, dW, c);
    }
    if (dy) nf_image_tail(&st->s, D, dy, dx, n, 1);
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    nf_lu_factor_chain(&st->f, b->P, b->S, ws, -U * st->s.hw);
    return NF_OK;
}

const nf_bijector_type nf_bijector_conv1x1 = {
    .name = "conv1x1",
    .options_help = "h=1 w=1 c=D/(h*w): y_p = P L (U + diag(sign e^{log_s})) x_p on every pixel of the image in the first "
                    "h*w*c entries, initialised to a random rotation",
    .create = conv1x1_create,
    .destroy = conv1x1_destroy,
    .workspace = conv1x1_workspace,
    .forward = conv1x1_forward,
    .inverse = conv1x1_inverse,
    .backward = conv1x1_backward,
    .inverse_backward = conv1x1_inverse_backward,
    .init_data = NULL,
};
