/* flows/maf.c - masked autoregressive flow (MAF, Papamakarios et al. 2017) and inverse autoregressive
 * flow (IAF, Kingma et al. 2016): one affine autoregressive map, used in opposite directions.
 *
 * A MADE reads v and gives, for dimension i, a shift t_i and a raw log-scale a_i that depend only on
 * v_<i (in the MADE order) and the context; with the soft clamp of affine-coupling,
 *
 *   w_i = v_i exp(s_i) + t_i,   s_i = clamp tanh(a_i / clamp),   log|det dw/dv| = sum_i s_i.
 *
 * (The y_i = x_i exp(s_i) + t_i convention; the MAF paper's (x_i - m_i) exp(-a_i) is the same family
 * with t = -m exp(-a).)  clamp bounds the per-layer scale to e^-clamp..e^clamp so exp never overflows,
 * and s = 0 at a = 0 makes the zero-initialised MADE the exact identity.
 *
 *   maf  v = data,   w = latent: forward (density) is one MADE pass; inverse (sampling) is slow.
 *   iaf  v = latent, w = data:   inverse (sampling) is one MADE pass; forward (density) is slow.
 *
 * The slow direction is sequential, Jacobi or auto (b->invert_method, flows/jacobi.c).  Both types
 * have exact gradients in both directions: iaf's inverse_backward is the fast one reverse-KL training
 * uses; maf's inverse_backward (and iaf's backward) go through the slow solve and cost up to D MADE
 * backward passes (see autoregressive.h), so prefer iaf when sampling is what you differentiate.
 */
#include <math.h>
#include <stdlib.h>

#include "flows/autoregressive.h"

#ifdef NF_DOUBLE
#define EXP exp
#define TANH tanh
#else
#define EXP expf
#define TANH tanhf
#endif

typedef struct maf_state {
    nf_ar ar;
    nf_real clamp;
} maf_state;

/* theta = (t, a) per element; s = clamp tanh(a / clamp). */
static inline nf_real soft_clamp(nf_real clamp, nf_real a) { return clamp * TANH(a / clamp); }

/* w = v exp(s) + t;  ld += s. */
static void affine_forward(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v,
                           const nf_real *theta, int n, int d, int stride)
{
    const nf_real c = *(const nf_real *)cfg;
    for (int r = 0; r < n; r++) {
        nf_real sum = 0;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            const nf_real *th = theta + 2 * at;
            nf_real s = soft_clamp(c, th[1]);
            w[at] = v[at] * EXP(s) + th[0];
            if (lde) lde[at] = s;
            sum += s;
        }
        if (ld) ld[r] += sum;
    }
}

/* v = (w - t) exp(-s);  ld -= s. */
static void affine_inverse(const void *cfg, nf_real *v, nf_real *ld, nf_real *lde, const nf_real *w,
                           const nf_real *theta, int n, int d, int stride)
{
    const nf_real c = *(const nf_real *)cfg;
    for (int r = 0; r < n; r++) {
        nf_real sum = 0;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            const nf_real *th = theta + 2 * at;
            nf_real s = soft_clamp(c, th[1]);
            v[at] = (w[at] - th[0]) * EXP(-s);
            if (lde) lde[at] = s;
            sum += s;
        }
        if (ld) ld[r] -= sum;
    }
}

/* dv += gw exp(s);  dt += gw;  da += (gw v exp(s) + gl) (1 - (s / clamp)^2). */
static void affine_backward(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                            const nf_real *v, const nf_real *theta, int n, int d, int stride)
{
    const nf_real c = *(const nf_real *)cfg;
    for (int r = 0; r < n; r++) {
        nf_real l = gl ? gl[r] : 0;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            const nf_real *th = theta + 2 * at;
            nf_real g = gw ? gw[at] : 0;
            nf_real s = soft_clamp(c, th[1]), e = EXP(s), q = s / c;
            if (dv) dv[at] += g * e;
            if (dtheta) {
                dtheta[2 * at] += g;
                dtheta[2 * at + 1] += (g * v[at] * e + l) * (1 - q * q);
            }
        }
    }
}

static const nf_ar_elem affine_elem = {affine_forward, affine_inverse, affine_backward};

static int maf_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    double clamp;
    NF_TRY(nf_opts_double(opts, "clamp", 3.0, 1e-3, 1e3, &clamp));
    maf_state *st = nf_calloc(1, sizeof *st, "maf state");
    if (!st) return NF_ENOMEM;
    st->clamp = (nf_real)clamp;
    int rc = nf_ar_create(&st->ar, b, opts, rng, &affine_elem, &st->clamp, 2);
    if (rc != NF_OK) {
        free(st);
        return rc;
    }
    b->state = st;
    return NF_OK;
}

static void maf_destroy(nf_bijector *b)
{
    maf_state *st = b->state;
    if (!st) return;
    nf_ar_free(&st->ar);
    free(st);
}

static size_t maf_workspace(const nf_bijector *b, int n)
{
    const maf_state *st = b->state;
    return nf_ar_workspace(&st->ar, n);
}

#define AR(b) (&((maf_state *)(b)->state)->ar)

/* maf forward (fast): z = x exp(s(x)) + t(x), logdet += sum s. */
static int maf_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return nf_ar_fast(b, AR(b), y, logdet, x, ctx, n, ws);
}

/* maf inverse (slow): x_i = (z_i - t_i(x_<i)) exp(-s_i(x_<i)), logdet -= sum s. */
static int maf_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return nf_ar_slow(b, AR(b), x, logdet, y, ctx, n, ws);
}

/* dx += dz exp(s) + MADE^T(dt = dz, da = (dz x exp(s) + dlogdet)(1 - (s/clamp)^2)). */
static int maf_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                        const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)y;
    return nf_ar_fast_backward(b, AR(b), dx, dctx, dy, dlogdet, x, ctx, n, ws);
}

/* dz += lambda, J^T lambda = dx - dlogdet grad_x(sum s)  (J = dz/dx at the solution; the transposed
 * sweep of autoregressive.h), plus the MADE's weight and context gradients. */
static int maf_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx, const nf_real *dlogdet,
                                const nf_real *y, const nf_real *x, const nf_real *ctx, int n, nf_real *ws)
{
    (void)y;
    return nf_ar_slow_backward(b, AR(b), dy, dctx, dx, dlogdet, x, ctx, n, ws);
}

/* iaf forward (slow): data x = z exp(s(z)) + t(z) solved for the latent z, logdet -= sum s(z). */
static int iaf_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return nf_ar_slow(b, AR(b), y, logdet, x, ctx, n, ws);
}

/* iaf inverse (fast): x = z exp(s(z)) + t(z), logdet += sum s(z). */
static int iaf_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                       nf_real *ws)
{
    return nf_ar_fast(b, AR(b), x, logdet, y, ctx, n, ws);
}

static int iaf_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                        const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)x;
    return nf_ar_slow_backward(b, AR(b), dx, dctx, dy, dlogdet, y, ctx, n, ws);
}

/* dz += dx exp(s) + MADE^T(dt = dx, da = (dx z exp(s) + dlogdet)(1 - (s/clamp)^2)). */
static int iaf_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx, const nf_real *dlogdet,
                                const nf_real *y, const nf_real *x, const nf_real *ctx, int n, nf_real *ws)
{
    (void)x;
    return nf_ar_fast_backward(b, AR(b), dy, dctx, dx, dlogdet, y, ctx, n, ws);
}

const nf_bijector_type nf_bijector_maf = {
    "maf",
    "clamp=3 " NF_AR_OPTIONS_HELP " (forward one pass; inverse sequential/Jacobi)",
    maf_create, maf_destroy, maf_workspace, maf_forward, maf_inverse, maf_backward, maf_inverse_backward, NULL,
};

const nf_bijector_type nf_bijector_iaf = {
    "iaf",
    "clamp=3 " NF_AR_OPTIONS_HELP " (inverse one pass; forward sequential/Jacobi)",
    maf_create, maf_destroy, maf_workspace, iaf_forward, iaf_inverse, iaf_backward, iaf_inverse_backward, NULL,
};
