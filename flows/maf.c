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
/* Loops of arithmetic meant to become SIMD code: see flows/rqspline.c on -ftrapping-math. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/autoregressive.h"
#include "flows/fastmath.h"
#include "core/simd.h"

typedef struct maf_state {
    nf_ar ar; /* first: nf_ar_type_* (flows/autoregressive.h) read the state as its nf_ar */
    nf_real clamp;
} maf_state;

/* The element maps run over blocks of up to AF_BLK elements: rows r0 .. r0 + nr, columns j0 .. j0 + nj
 * (whole rows while they fit; a row longer than a block is cut in pieces).  Loops gather the block's
 * inputs into local arrays, one vector loop computes, loops scatter, so every layout (dense rows, one
 * column of a wider array) vectorises the same way. */
#define AF_BLK 256

typedef struct af_blk {
    int r0, nr, j0, nj, m;
} af_blk;

/* The block after B (B->m = 0 to start); 0 when every element has been handed out. */
static int af_next(af_blk *B, int n, int d)
{
    if (B->m && B->j0 + B->nj < d) { /* the rest of a long row */
        B->j0 += B->nj;
        B->nj = d - B->j0 < AF_BLK ? d - B->j0 : AF_BLK;
        return B->m = B->nj;
    }
    B->r0 = B->m ? B->r0 + B->nr : 0;
    if (B->r0 >= n) return B->m = 0;
    B->j0 = 0;
    if (d > AF_BLK) {
        B->nr = 1;
        B->nj = AF_BLK;
    } else {
        B->nr = AF_BLK / d < n - B->r0 ? AF_BLK / d : n - B->r0;
        B->nj = d;
    }
    return B->m = B->nr * B->nj;
}

/* dst[e] = src[(r stride + j) mult + off] for the block's elements e = (r, j) in order, mult 1 (the
 * elements) or 2 (a parameter of the pairs (t, a)).  Contiguous when the rows are (nj = stride) or the
 * block is one row piece; a column is one fixed step; otherwise row by row. */
static void gather(nf_real *restrict dst, const nf_real *restrict src, const af_blk *B, int stride, int mult,
                   int off)
{
    const nf_real *p = src + ((size_t)B->r0 * stride + B->j0) * mult + off;
    const int m = B->m;
    if (B->nj == stride || B->nr == 1) {
        if (mult == 1) {
            memcpy(dst, p, (size_t)m * sizeof(nf_real));
        } else {
#pragma omp simd
            for (int e = 0; e < m; e++) dst[e] = p[2 * e];
        }
    } else if (B->nj == 1) {
        const size_t step = (size_t)stride * mult;
#pragma omp simd
        for (int e = 0; e < m; e++) dst[e] = p[e * step];
    } else {
        for (int i = 0, e = 0; i < B->nr; i++)
            for (int q = 0; q < B->nj; q++) dst[e++] = p[((size_t)i * stride + q) * mult];
    }
}

/* dst[(r stride + j) mult + off] = (or +=) src[e]: gather's reverse. */
static void scatter(nf_real *restrict dst, const nf_real *restrict src, const af_blk *B, int stride, int mult,
                    int off, int add)
{
    nf_real *p = dst + ((size_t)B->r0 * stride + B->j0) * mult + off;
    const int m = B->m;
    if (B->nj == stride || B->nr == 1) {
        if (mult == 1 && !add) {
            memcpy(p, src, (size_t)m * sizeof(nf_real));
        } else if (mult == 1) {
#pragma omp simd
            for (int e = 0; e < m; e++) p[e] += src[e];
        } else if (add) {
#pragma omp simd
            for (int e = 0; e < m; e++) p[2 * e] += src[e];
        } else {
#pragma omp simd
            for (int e = 0; e < m; e++) p[2 * e] = src[e];
        }
    } else if (B->nj == 1) {
        const size_t step = (size_t)stride * mult;
        if (add) {
#pragma omp simd
            for (int e = 0; e < m; e++) p[e * step] += src[e];
        } else {
#pragma omp simd
            for (int e = 0; e < m; e++) p[e * step] = src[e];
        }
    } else {
        for (int i = 0, e = 0; i < B->nr; i++)
            for (int q = 0; q < B->nj; q++) {
                nf_real *t = p + ((size_t)i * stride + q) * mult;
                *t = add ? *t + src[e] : src[e];
                e++;
            }
    }
}

/* theta = (t, a) per element; s = clamp tanh(a / clamp). */
static inline nf_real soft_clamp(nf_real clamp, nf_real a) { return clamp * NF_TANH(a / clamp); }

/* w = v exp(s) + t (sign 1), or v = (w - t) exp(-s) (sign -1);  ld += sign s, lde = s. */
NF_SIMD_CLONES static void affine_map(nf_real c, nf_real sign, nf_real *out, nf_real *ld, nf_real *lde, const nf_real *in,
                       const nf_real *theta, int n, int d, int stride)
{
    af_blk B = {0, 0, 0, 0, 0};
    nf_real xb[AF_BLK], tb[AF_BLK], ab[AF_BLK], sb[AF_BLK];
    while (af_next(&B, n, d)) {
        const int m = B.m;
        gather(xb, in, &B, stride, 1, 0);
        gather(tb, theta, &B, stride, 2, 0);
        gather(ab, theta, &B, stride, 2, 1);
        if (sign > 0) {
#pragma omp simd
            for (int e = 0; e < m; e++) {
                sb[e] = soft_clamp(c, ab[e]);
                xb[e] = xb[e] * NF_EXP(sb[e]) + tb[e];
            }
        } else {
#pragma omp simd
            for (int e = 0; e < m; e++) {
                sb[e] = soft_clamp(c, ab[e]);
                xb[e] = (xb[e] - tb[e]) * NF_EXP(-sb[e]);
            }
        }
        scatter(out, xb, &B, stride, 1, 0, 0);
        if (lde) scatter(lde, sb, &B, stride, 1, 0, 0);
        for (int i = 0; ld && i < B.nr; i++) { /* a row's sum, then one add */
            nf_real sum = 0;
            for (int q = 0; q < B.nj; q++) sum += sb[i * B.nj + q];
            ld[B.r0 + i] += sign * sum;
        }
    }
}

/* w = v exp(s) + t;  ld += s. */
static void affine_forward(const void *cfg, nf_real *w, nf_real *ld, nf_real *lde, const nf_real *v,
                           const nf_real *theta, int n, int d, int stride)
{
    affine_map(*(const nf_real *)cfg, 1, w, ld, lde, v, theta, n, d, stride);
}

/* v = (w - t) exp(-s);  ld -= s. */
static void affine_inverse(const void *cfg, nf_real *v, nf_real *ld, nf_real *lde, const nf_real *w,
                           const nf_real *theta, int n, int d, int stride)
{
    affine_map(*(const nf_real *)cfg, -1, v, ld, lde, w, theta, n, d, stride);
}

/* dv += gw exp(s);  dt (+)= gw;  da (+)= (gw v exp(s) + gl) (1 - (s / clamp)^2)  (accumulate = 0
 * overwrites dtheta instead of adding). */
NF_SIMD_CLONES static void affine_backward(const void *cfg, nf_real *dv, nf_real *dtheta, const nf_real *gw, const nf_real *gl,
                            const nf_real *v, const nf_real *theta, int n, int d, int stride, int accumulate)
{
    const nf_real c = *(const nf_real *)cfg;
    af_blk B = {0, 0, 0, 0, 0};
    nf_real gb[AF_BLK], lb[AF_BLK], vb[AF_BLK], ab[AF_BLK], eb[AF_BLK];
    while (af_next(&B, n, d)) {
        const int m = B.m;
        if (gw) gather(gb, gw, &B, stride, 1, 0);
        else memset(gb, 0, (size_t)m * sizeof(nf_real));
        for (int i = 0, e = 0; i < B.nr; i++)
            for (int q = 0; q < B.nj; q++) lb[e++] = gl ? gl[B.r0 + i] : 0;
        gather(vb, v, &B, stride, 1, 0);
        gather(ab, theta, &B, stride, 2, 1);
#pragma omp simd
        for (int e = 0; e < m; e++) {
            nf_real se = soft_clamp(c, ab[e]), q = se / c;
            eb[e] = gb[e] * NF_EXP(se);
            ab[e] = (eb[e] * vb[e] + lb[e]) * (1 - q * q);
        }
        if (dv) scatter(dv, eb, &B, stride, 1, 0, 1);
        if (dtheta) {
            scatter(dtheta, gb, &B, stride, 2, 0, accumulate);
            scatter(dtheta, ab, &B, stride, 2, 1, accumulate);
        }
    }
}

static const nf_ar_elem affine_elem = {affine_forward, affine_inverse, affine_backward, NULL, NULL, NULL};

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

/* maf: forward (fast) z = x exp(s(x)) + t(x), logdet += sum s; inverse (slow) x_i = (z_i - t_i(x_<i))
 * exp(-s_i(x_<i)); backward dx += dz exp(s) + MADE^T(dt = dz, da = (dz x exp(s) + dlogdet)(1 - (s/clamp)^2)).
 * iaf: the same map from the latent, x = z exp(s(z)) + t(z): inverse fast, forward slow.
 * flows/autoregressive.h has the directions and the slow direction's gradient. */
const nf_bijector_type nf_bijector_maf = {
    "maf",
    "clamp=3 " NF_AR_OPTIONS_HELP " (forward one pass; inverse sequential/Jacobi)",
    maf_create, nf_ar_type_destroy, nf_ar_type_workspace, nf_ar_type_fast, nf_ar_type_slow, nf_ar_type_fast_backward,
    nf_ar_type_slow_backward, NULL, NULL,
};

const nf_bijector_type nf_bijector_iaf = {
    "iaf",
    "clamp=3 " NF_AR_OPTIONS_HELP " (inverse one pass; forward sequential/Jacobi)",
    maf_create, nf_ar_type_destroy, nf_ar_type_workspace, nf_ar_type_slow, nf_ar_type_fast, nf_ar_type_slow_backward,
    nf_ar_type_fast_backward, NULL, NULL,
};
