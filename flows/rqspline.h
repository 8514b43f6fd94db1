/* flows/rqspline.h - the monotone rational-quadratic spline of neural spline flows (Durkan et al.
 * 2019), the elementwise kernel shared by spline-coupling, spline-ar and spline-iaf.
 *
 * Each element x gets its own spline s(x; theta), theta = 3K - 1 unnormalised numbers laid out as
 *
 *   theta[0 .. K)        bin widths   w = m_w + (1 - K m_w) softmax(theta[0..K)),  knots x_k spaced 2B w_k
 *   theta[K .. 2K)       bin heights  h = m_h + (1 - K m_h) softmax(theta[K..2K)), knots y_k spaced 2B h_k
 *   theta[2K .. 3K-1)    interior knot derivatives d_k = m_d + softplus(theta[2K+k-1] + c), k = 1..K-1
 *
 * with m_w = m_h = m_d = 1e-3, d_0 = d_K = 1 and c = log(exp(1 - m_d) - 1), so that zero parameters
 * give equal bins and unit derivatives: the identity.  The spline maps [-B, B] onto itself and is the
 * identity outside (linear tails that join with slope 1).  Inside bin k, with xi = (x - x_k) / W,
 * s = H / W (W, H the bin's width and height):
 *
 *   y  = y_k + H (s xi^2 + d_k xi (1 - xi)) / (s + (d_k + d_{k+1} - 2 s) xi (1 - xi))
 *   dy/dx = s^2 (d_{k+1} xi^2 + 2 s xi (1 - xi) + d_k (1 - xi)^2) / (s + (d_k + d_{k+1} - 2 s) xi (1 - xi))^2
 *
 * The inverse solves the quadratic for xi in its numerically stable form 2c / (-b - sqrt(b^2 - 4ac)).
 * Gradients with respect to x and to every unnormalised parameter (through softmax and softplus) are
 * written by hand.  The kernel is vectorised across elements (blocks of elements, softmax rows
 * transposed); the softmax runs in nf_real (in the float build with the branch-free exp of
 * flows/fastmath.h), the knots, the bin's formula and its reverse mode in double.
 *
 * Array layout.  Every call works on n rows of d elements: element (r, e) of x, y, lde sits at
 * [r * stride + e] and its parameters at theta[(r * stride + e) * P], P = 3K - 1; stride = d for a
 * dense (n, d) array, stride = D with pointers offset by column j to act on one column of (n, D).
 * ld (n) receives, per row, the ADDED sum of the log-determinants of the map applied; lde (if not
 * NULL) receives each element's log s'(x) (always the forward log-derivative, at the input of the
 * forward or the output of the inverse).  Gradients accumulate (+=); NULL gradient outputs are
 * skipped and NULL incoming gradients count as zero.
 */
#ifndef NF_RQSPLINE_H
#define NF_RQSPLINE_H

#include "core/error.h"

#define NF_RQSPLINE_MAX_BINS 128

typedef struct nf_rqspline {
    int bins;               /* K */
    double bound;           /* B: the spline acts on [-B, B] */
    double min_width, min_height, min_derivative;
    double dconst;          /* c = log(exp(1 - min_derivative) - 1) */
} nf_rqspline;

/* K in 2..NF_RQSPLINE_MAX_BINS, B > 0; NF_EINVAL naming the bad value otherwise. */
int nf_rqspline_init(nf_rqspline *s, int bins, double bound);
/* Parameters per element: 3K - 1. */
int nf_rqspline_nparams(const nf_rqspline *s);

/* y = s(x); ld[r] += sum_e log s'(x). */
void nf_rqspline_forward(const nf_rqspline *s, nf_real *y, nf_real *ld, nf_real *lde, const nf_real *x,
                         const nf_real *theta, int n, int d, int stride);
/* x = s^-1(y); ld[r] += -sum_e log s'(x). */
void nf_rqspline_inverse(const nf_rqspline *s, nf_real *x, nf_real *ld, nf_real *lde, const nf_real *y,
                         const nf_real *theta, int n, int d, int stride);
/* After forward at x, with gy = dL/dy (n x d), gl = dL/dld (n):
 *   dx += gy s'(x) + gl d log s'/dx,   dtheta += gy ds/dtheta + gl d log s'/dtheta. */
void nf_rqspline_backward(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                          const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d, int stride);
/* After inverse y -> x, with gx = dL/dx, gl = dL/dld (ld = -log s'(x)):
 *   g = gx - gl d log s'/dx,   dy += g / s'(x),   dtheta += -g (ds/dtheta) / s'(x) - gl d log s'/dtheta. */
void nf_rqspline_inverse_backward(const nf_rqspline *s, nf_real *dy, nf_real *dtheta, const nf_real *dx,
                                  const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d,
                                  int stride);
/* The two backward passes with a choice for dtheta: accumulate = 1 adds (as above), accumulate = 0
 * overwrites all P entries of every element (so the caller need not zero dtheta first).  dx / dy
 * always accumulate. */
void nf_rqspline_backward_ex(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                             const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d, int stride,
                             int accumulate);
void nf_rqspline_inverse_backward_ex(const nf_rqspline *s, nf_real *dy, nf_real *dtheta, const nf_real *dx,
                                     const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d,
                                     int stride, int accumulate);

/* A forward that also keeps, in cache (nf_rqspline_cache_size(s, n, d) nf_reals), what the backward
 * would otherwise recompute (the softmaxes, each element's bin, knots and derivatives); the cached
 * backward then needs neither x nor theta.  Both calls take the same n, d and stride; the cache is
 * laid out the same whatever the number of threads.  dtheta as in nf_rqspline_backward_ex. */
size_t nf_rqspline_cache_size(const nf_rqspline *s, int n, int d);
void nf_rqspline_forward_cached(const nf_rqspline *s, nf_real *y, nf_real *ld, nf_real *lde, const nf_real *x,
                                const nf_real *theta, int n, int d, int stride, nf_real *cache);
void nf_rqspline_backward_cached(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                                 const nf_real *dld, const nf_real *cache, int n, int d, int stride, int accumulate);

/* The knots of one element's spline: xk, yk (K + 1 each) and derivatives dk (K + 1), for tests and plots. */
void nf_rqspline_knots(const nf_rqspline *s, const nf_real *theta, double *xk, double *yk, double *dk);

#endif
