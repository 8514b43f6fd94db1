/* flows/rqspline.c - the monotone rational-quadratic spline kernel (see rqspline.h for the math).
 *
 * One element at a time: rq_setup() normalises the parameters (softmax with minimum widths and
 * heights, softplus derivatives), finds the bin and fills an rq_bin; rq_reverse() runs reverse mode
 * through the bin's formula and then through the normalisation.  The array functions loop over
 * rows (OpenMP on large batches: rows are independent, so results do not depend on the threads).
 */
#include "flows/rqspline.h"

#include <math.h>
#include <string.h>

#define RQ_PAR_MIN 16384

/* The softmax exponentials are most of the kernel's cost; in the float build they run in float
 * (expf), which changes the knots by float rounding only, the same in both directions. */
#ifdef NF_DOUBLE
#define SM_EXP(z) exp(z)
#else
#define SM_EXP(z) (double)expf((float)(z))
#endif

int nf_rqspline_init(nf_rqspline *s, int bins, double bound)
{
    if (bins < 2 || bins > NF_RQSPLINE_MAX_BINS)
        return nf_error(NF_EINVAL, "rational-quadratic spline: bins=%d; expected 2..%d", bins, NF_RQSPLINE_MAX_BINS);
    if (!(bound > 0) || !isfinite(bound))
        return nf_error(NF_EINVAL, "rational-quadratic spline: tail bound %g; expected a finite B > 0", bound);
    s->bins = bins;
    s->bound = bound;
    s->min_width = s->min_height = s->min_derivative = 1e-3;
    s->dconst = log(expm1(1.0 - s->min_derivative));
    return NF_OK;
}

int nf_rqspline_nparams(const nf_rqspline *s) { return 3 * s->bins - 1; }

#ifdef NF_DOUBLE
static double softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }
static double sigmoid(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }
#else /* float precision is all the parameters have */
static double softplus(double z)
{
    float f = (float)z;
    return f > 0 ? f + log1pf(expf(-f)) : log1pf(expf(f));
}
static double sigmoid(double z)
{
    float f = (float)z;
    return f >= 0 ? 1 / (1 + expf(-f)) : expf(f) / (1 + expf(f));
}
#endif

/* One element's bin and everything reverse mode needs. */
typedef struct rq_bin {
    int inside;                      /* 0: |x| > B, identity */
    int k;                           /* bin index */
    double sw[NF_RQSPLINE_MAX_BINS]; /* softmax of the widths (before the minimum) */
    double sh[NF_RQSPLINE_MAX_BINS]; /* softmax of the heights */
    double xk, W, yk, H, d0, d1, s, xi;
} rq_bin;

/* sm = softmax(u[0..K)); cum[0..K] = knots -B + 2B sum_{j<k} (m + (1 - K m) sm_j), cum[K] = B exactly.
 * A bin's width is taken as 2B (m + (1 - K m) sm_k) rather than a difference of knots, which would
 * lose digits to cancellation in narrow bins. */
static void knots(double *sm, double *cum, const nf_real *u, int K, double B, double minv)
{
    double mx = u[0], z = 0;
    for (int j = 1; j < K; j++) mx = u[j] > mx ? u[j] : mx;
    for (int j = 0; j < K; j++) z += sm[j] = SM_EXP((double)u[j] - mx);
    const double scale = 1 - K * minv, iz = 1 / z;
    double acc = 0;
    cum[0] = -B;
    for (int j = 0; j < K; j++) {
        sm[j] *= iz;
        acc += minv + scale * sm[j];
        cum[j + 1] = -B + 2 * B * acc;
    }
    cum[K] = B;
}

static double knot_derivative(const nf_rqspline *s, const nf_real *theta, int k)
{
    if (k == 0 || k == s->bins) return 1.0;
    return s->min_derivative + softplus((double)theta[2 * s->bins + k - 1] + s->dconst);
}

/* Fill e from x (forward) or from y (inverse: also solves for xi).  Returns x or y's partner. */
static double rq_setup(const nf_rqspline *s, rq_bin *e, double v, const nf_real *theta, int inverse)
{
    const int K = s->bins;
    const double B = s->bound;
    e->inside = v >= -B && v <= B;
    if (!e->inside) return v;
    double cx[NF_RQSPLINE_MAX_BINS + 1], cy[NF_RQSPLINE_MAX_BINS + 1];
    knots(e->sw, cx, theta, K, B, s->min_width);
    knots(e->sh, cy, theta + K, K, B, s->min_height);
    const double *c = inverse ? cy : cx;
    int k = 0;
    while (k < K - 1 && v >= c[k + 1]) k++;
    e->k = k;
    e->xk = cx[k];
    e->W = 2 * B * (s->min_width + (1 - K * s->min_width) * e->sw[k]);
    e->yk = cy[k];
    e->H = 2 * B * (s->min_height + (1 - K * s->min_height) * e->sh[k]);
    e->d0 = knot_derivative(s, theta, k);
    e->d1 = knot_derivative(s, theta, k + 1);
    e->s = e->H / e->W;
    if (!inverse) {
        e->xi = (v - e->xk) / e->W;
        double t = e->xi * (1 - e->xi);
        double num = e->H * (e->s * e->xi * e->xi + e->d0 * t);
        double den = e->s + (e->d0 + e->d1 - 2 * e->s) * t;
        return e->yk + num / den;
    }
    /* a xi^2 + b xi + c = 0 with the root in [0, 1]; 2c / (-b - sqrt(b^2 - 4ac)) avoids cancellation. */
    double dy = v - e->yk, sum = e->d0 + e->d1 - 2 * e->s;
    double a = e->H * (e->s - e->d0) + dy * sum;
    double b = e->H * e->d0 - dy * sum;
    double cc = -e->s * dy;
    double disc = b * b - 4 * a * cc;
    if (disc < 0) disc = 0; /* rounding only: the exact discriminant is >= 0 for a monotone bin */
    e->xi = 2 * cc / (-b - sqrt(disc));
    return e->xk + e->xi * e->W;
}

/* log s'(x) = 2 log s + log q - 2 log den, and optionally s'(x) and d log s'/dx. */
static double rq_logderiv(const rq_bin *e, double *deriv, double *dlogdx)
{
    if (!e->inside) {
        if (deriv) *deriv = 1;
        if (dlogdx) *dlogdx = 0;
        return 0;
    }
    const double xi = e->xi, t = xi * (1 - xi), s = e->s, d0 = e->d0, d1 = e->d1;
    const double den = s + (d0 + d1 - 2 * s) * t;
    const double q = d1 * xi * xi + 2 * s * t + d0 * (1 - xi) * (1 - xi);
    if (deriv) *deriv = s * s * q / (den * den);
    if (dlogdx) {
        double q_xi = 2 * d1 * xi + 2 * s * (1 - 2 * xi) - 2 * d0 * (1 - xi);
        double den_xi = (d0 + d1 - 2 * s) * (1 - 2 * xi);
        *dlogdx = (q_xi / q - 2 * den_xi / den) / e->W;
    }
    return log(s * s * q / (den * den)); /* one log: s, q, den are within [1e-6, 1e6] or so */
}

/* Reverse mode through y(x; theta) and l = log s'(x; theta) at the bin e:
 *   given gy = dL/dy and gl = dL/dl, add dL/dtheta into gt (if not NULL) and return dL/dx.
 * Bin formula (t = xi(1-xi), num = H(s xi^2 + d0 t), den = s + (d0+d1-2s) t,
 * q = d1 xi^2 + 2 s t + d0 (1-xi)^2, y = y_k + num/den, l = 2 log s + log q - 2 log den), then
 * s = H/W, xi = (x - x_k)/W, x_k = -B + 2B sum_{j<k} w_j, W = 2B w_k (likewise y_k, H from h),
 * w = m + (1 - K m) softmax(u): du_j = (1 - K m) sm_j (gw_j - sum_i sm_i gw_i),
 * d = m_d + softplus(u + c): du = dd sigmoid(u + c). */
static double rq_reverse(const nf_rqspline *s, const rq_bin *e, const nf_real *theta, double gy, double gl,
                         nf_real *gt)
{
    if (!e->inside) return gy;
    const int K = s->bins, k = e->k;
    const double B = s->bound;
    const double xi = e->xi, t = xi * (1 - xi), S = e->s, H = e->H, W = e->W, d0 = e->d0, d1 = e->d1;
    const double num = H * (S * xi * xi + d0 * t);
    const double den = S + (d0 + d1 - 2 * S) * t;
    const double q = d1 * xi * xi + 2 * S * t + d0 * (1 - xi) * (1 - xi);

    const double g_num = gy / den;
    const double g_den = -gy * num / (den * den) - 2 * gl / den;
    const double g_q = gl / q;
    const double g_s = 2 * gl / S + g_num * H * xi * xi + g_den * (1 - 2 * t) + g_q * 2 * t;
    double g_H = g_num * (S * xi * xi + d0 * t);
    const double g_d0 = g_num * H * t + g_den * t + g_q * (1 - xi) * (1 - xi);
    const double g_d1 = g_den * t + g_q * xi * xi;
    const double g_t = g_num * H * d0 + g_den * (d0 + d1 - 2 * S) + g_q * 2 * S;
    const double g_xi = g_num * H * S * 2 * xi + g_t * (1 - 2 * xi) + g_q * (2 * d1 * xi - 2 * d0 * (1 - xi));
    const double g_yk = gy;
    g_H += g_s / W;
    const double g_W = -g_s * H / (W * W) - g_xi * xi / W;
    const double g_xk = -g_xi / W;
    const double g_x = g_xi / W;
    if (!gt) return g_x;

    /* widths: gw_j = 2B g_xk (j < k), 2B g_W (j = k), 0 (j > k); heights likewise with g_yk, g_H. */
    const double sw_ = 1 - K * s->min_width, sh_ = 1 - K * s->min_height;
    double dotw = 0, doth = 0;
    for (int j = 0; j < k; j++) {
        dotw += e->sw[j];
        doth += e->sh[j];
    }
    dotw = 2 * B * (g_xk * dotw + g_W * e->sw[k]);
    doth = 2 * B * (g_yk * doth + g_H * e->sh[k]);
    for (int j = 0; j < K; j++) {
        double gw = j < k ? 2 * B * g_xk : j == k ? 2 * B * g_W : 0;
        double gh = j < k ? 2 * B * g_yk : j == k ? 2 * B * g_H : 0;
        gt[j] += (nf_real)(sw_ * e->sw[j] * (gw - dotw));
        gt[K + j] += (nf_real)(sh_ * e->sh[j] * (gh - doth));
    }
    if (k >= 1) gt[2 * K + k - 1] += (nf_real)(g_d0 * sigmoid((double)theta[2 * K + k - 1] + s->dconst));
    if (k + 1 <= K - 1) gt[2 * K + k] += (nf_real)(g_d1 * sigmoid((double)theta[2 * K + k] + s->dconst));
    return g_x;
}

/* y = s(x), ld += log s'(x) per row. */
void nf_rqspline_forward(const nf_rqspline *s, nf_real *y, nf_real *ld, nf_real *lde, const nf_real *x,
                         const nf_real *theta, int n, int d, int stride)
{
    const int P = 3 * s->bins - 1;
#pragma omp parallel for schedule(static) if ((size_t)n * d > RQ_PAR_MIN)
    for (int r = 0; r < n; r++) {
        double sum = 0;
        rq_bin e;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            const nf_real *th = theta + at * P;
            y[at] = (nf_real)rq_setup(s, &e, x[at], th, 0);
            double l = rq_logderiv(&e, NULL, NULL);
            if (lde) lde[at] = (nf_real)l;
            sum += l;
        }
        if (ld) ld[r] += (nf_real)sum;
    }
}

/* x = s^-1(y), ld -= log s'(x) per row. */
void nf_rqspline_inverse(const nf_rqspline *s, nf_real *x, nf_real *ld, nf_real *lde, const nf_real *y,
                         const nf_real *theta, int n, int d, int stride)
{
    const int P = 3 * s->bins - 1;
#pragma omp parallel for schedule(static) if ((size_t)n * d > RQ_PAR_MIN)
    for (int r = 0; r < n; r++) {
        double sum = 0;
        rq_bin e;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            const nf_real *th = theta + at * P;
            x[at] = (nf_real)rq_setup(s, &e, y[at], th, 1);
            double l = rq_logderiv(&e, NULL, NULL);
            if (lde) lde[at] = (nf_real)l;
            sum += l;
        }
        if (ld) ld[r] -= (nf_real)sum;
    }
}

/* dx += gy s' + gl dl/dx;  dtheta += gy ds/dtheta + gl dl/dtheta. */
void nf_rqspline_backward(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                          const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d, int stride)
{
    const int P = 3 * s->bins - 1;
#pragma omp parallel for schedule(static) if ((size_t)n * d > RQ_PAR_MIN)
    for (int r = 0; r < n; r++) {
        double gl = dld ? dld[r] : 0;
        rq_bin e;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            double gy = dy ? dy[at] : 0;
            if (gy == 0 && gl == 0) continue;
            rq_setup(s, &e, x[at], theta + at * P, 0);
            double gx = rq_reverse(s, &e, theta + at * P, gy, gl, dtheta ? dtheta + at * P : NULL);
            if (dx) dx[at] += (nf_real)gx;
        }
    }
}

/* With g = gx - gl dl/dx at the solution x:  dy += g / s',  dtheta += (-g / s') ds/dtheta - gl dl/dtheta
 * (the second is forward's reverse mode with gy = -g / s' and gl -> -gl). */
void nf_rqspline_inverse_backward(const nf_rqspline *s, nf_real *dy, nf_real *dtheta, const nf_real *dx,
                                  const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d,
                                  int stride)
{
    const int P = 3 * s->bins - 1;
#pragma omp parallel for schedule(static) if ((size_t)n * d > RQ_PAR_MIN)
    for (int r = 0; r < n; r++) {
        double gl = dld ? dld[r] : 0;
        rq_bin e;
        for (int j = 0; j < d; j++) {
            size_t at = (size_t)r * stride + j;
            double gx = dx ? dx[at] : 0;
            if (gx == 0 && gl == 0) continue;
            rq_setup(s, &e, x[at], theta + at * P, 0);
            double deriv, dldx;
            rq_logderiv(&e, &deriv, &dldx);
            double g = gx - gl * dldx;
            if (dy) dy[at] += (nf_real)(g / deriv);
            if (dtheta && e.inside) rq_reverse(s, &e, theta + at * P, -g / deriv, -gl, dtheta + at * P);
        }
    }
}

void nf_rqspline_knots(const nf_rqspline *s, const nf_real *theta, double *xk, double *yk, double *dk)
{
    double sm[NF_RQSPLINE_MAX_BINS];
    knots(sm, xk, theta, s->bins, s->bound, s->min_width);
    knots(sm, yk, theta + s->bins, s->bins, s->bound, s->min_height);
    for (int k = 0; k <= s->bins; k++) dk[k] = knot_derivative(s, theta, k);
}
