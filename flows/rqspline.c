/* flows/rqspline.c - the monotone rational-quadratic spline kernel (see rqspline.h for the math).
 *
 * Vectorised across elements.  The array functions cut the rows into blocks of up to RQ_BLK
 * elements; a block transposes its elements' 2K softmax parameters into rows T (2K, bs) and every
 * step below is a loop over the block's elements that the compiler turns into SIMD code (`omp
 * simd`):
 *
 *   setup     softmax of the widths and heights (rows of T, overwritten), one pass over the bins
 *             that finds each element's bin and picks its knot, width, height and the running sums
 *             the reverse mode needs, then the two knot derivatives of that bin;
 *   forward   the bin's formula;  inverse: the stable root of its quadratic;
 *   reverse   reverse mode through the formula (per element scalars), then the parameter gradients
 *             of the softmax rows, written over T and transposed back.
 *
 * The setup is most of the cost; a cached forward stores its result per block so the backward
 * starts from the reverse step (the cache holds the doubles bit for bit: same gradients).
 *
 * The softmax runs in nf_real (float in the float build, with the branch-free exp and log of
 * flows/fastmath.h), the knots, the bin's formula and its reverse mode in double.  Elements outside [-B, B]
 * run through the same loops on a clamped copy and are replaced by the identity at the end, so
 * there are no branches per element.  Rows are threaded in fixed chunks (RQ_CHUNK elements) on the
 * worker pool once a call has two of them: results do not depend on the number of threads.
 */
/* The kernels are loops of arithmetic and selects meant to become SIMD code; under the default
 * -ftrapping-math GCC may sink arithmetic whose result only one side of a select uses into a branch,
 * where it counts as possibly trapping and blocks if-conversion.  No FP exception is read here, so
 * this file is compiled without it (the values computed do not change). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "flows/rqspline.h"

#include <math.h>
#include <string.h>

#include "core/blas.h"
#include "core/simd.h"
#include "core/threads.h"
#include "flows/fastmath.h"

#define RQ_PAR_MIN 1024  /* elements below which a call stays on one thread (two chunks) */
#define RQ_BLK 64        /* elements per block */
#define RQ_TCAP 4096     /* transposed parameters per block: 2K rows of bs */
#define RQ_CHUNK 512     /* elements per chunk of rows, the unit of threading */

#ifdef NF_DOUBLE
#define RQ_EXP exp
#define RQ_LOG log
#define RQ_LOG1P log1p
#define RQ_ABS fabs
#else
#define RQ_ABS fabsf
#define RQ_EXP nf_fast_expf
#define RQ_LOG nf_fast_logf
#define RQ_LOG1P nf_fast_log1pf
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

/* One block of elements.  T holds the softmaxes of widths (rows 0..K) and heights (rows K..2K),
 * later their parameter gradients. */
typedef struct rq_blk {
    int m, bs;                          /* elements, row stride of T */
    size_t at[RQ_BLK];                  /* element addresses r * stride + j */
    int row[RQ_BLK];
    int k[RQ_BLK];                      /* bin */
    int in[RQ_BLK];                     /* 1 inside [-B, B] */
    nf_real v[RQ_BLK];                  /* x (bins by x) or y (bins by y) */
    nf_real swk[RQ_BLK], cwk[RQ_BLK];   /* softmax of the bin's width, sum of those before it, */
    nf_real awk[RQ_BLK];                /* and of those after it (not 1 - the others: no cancellation) */
    nf_real shk[RQ_BLK], chk[RQ_BLK], ahk[RQ_BLK]; /* likewise heights */
    nf_real sig0[RQ_BLK], sig1[RQ_BLK]; /* d d_k / du and d d_{k+1} / du (0 at the ends) */
    double xk[RQ_BLK], W[RQ_BLK], yk[RQ_BLK], H[RQ_BLK], d0[RQ_BLK], d1[RQ_BLK];
    double xi[RQ_BLK];                  /* position in the bin, (x - x_k) / W */
    nf_real T[RQ_TCAP];
} rq_blk;

/* Row by row over a block: T[j][e] = softmax_j(T[0..K)[e]). */
NF_SIMD_CLONES static void softmax_rows(nf_real *T, int K, int bs, int m)
{
    nf_real mx[RQ_BLK], z[RQ_BLK];
#pragma omp simd
    for (int e = 0; e < m; e++) mx[e] = T[e], z[e] = 0;
    for (int j = 1; j < K; j++) {
        const nf_real *t = T + (size_t)j * bs;
#pragma omp simd
        for (int e = 0; e < m; e++) mx[e] = t[e] > mx[e] ? t[e] : mx[e];
    }
    for (int j = 0; j < K; j++) {
        nf_real *t = T + (size_t)j * bs;
#pragma omp simd
        for (int e = 0; e < m; e++) {
            t[e] = RQ_EXP(t[e] - mx[e]);
            z[e] += t[e];
        }
    }
#pragma omp simd
    for (int e = 0; e < m; e++) z[e] = 1 / z[e];
    for (int j = 0; j < K; j++) {
        nf_real *t = T + (size_t)j * bs;
#pragma omp simd
        for (int e = 0; e < m; e++) t[e] *= z[e];
    }
}

/* d = m_d + softplus(z), z = u + c;  sig = dd/du = sigmoid(z) (both from one exponential). */
static inline nf_real knot_deriv(nf_real z, nf_real md, nf_real *sig)
{
    nf_real q = RQ_EXP(-RQ_ABS(z)), r = 1 / (1 + q), qr = q * r, sp = md + RQ_LOG1P(q);
    *sig = z >= 0 ? r : qr;
    return (z > 0 ? z : 0) + sp;
}

/* Softmaxes, bins and the bin's knots (by b->v against the x knots, or the y knots if by_y).
 * Knot j of the widths is -B + 2B sum_{i<j} w_i with w = m + (1 - K m) softmax; a bin's width is
 * 2B w_k itself (not a difference of knots, which would cancel in narrow bins). */
NF_SIMD_CLONES static void rq_setup(const nf_rqspline *s, rq_blk *b, const nf_real *theta, int by_y)
{
    const int K = s->bins, P = 3 * K - 1, m = b->m, bs = b->bs;
    nf_real *T = b->T;
    for (int e = 0; e < m; e++) {
        const nf_real *th = theta + b->at[e] * P;
        for (int j = 0; j < 2 * K; j++) T[(size_t)j * bs + e] = th[j];
    }
    softmax_rows(T, K, bs, m);
    softmax_rows(T + (size_t)K * bs, K, bs, m);

    const double B = s->bound, B2 = 2 * B;
    const double mw = s->min_width, scw = 1 - K * s->min_width;
    const double mh = s->min_height, sch = 1 - K * s->min_height;
    double ax[RQ_BLK], ay[RQ_BLK]; /* knots accumulate in double: bins join to rounding */
    nf_real cw[RQ_BLK], ch[RQ_BLK];
    const nf_real *sw0 = T, *sh0 = T + (size_t)K * bs;
#pragma omp simd
    for (int e = 0; e < m; e++) { /* bin 0 */
        double wj = mw + scw * (double)sw0[e], hj = mh + sch * (double)sh0[e];
        b->k[e] = 0;
        b->xk[e] = b->yk[e] = -B;
        b->W[e] = B2 * wj;
        b->H[e] = B2 * hj;
        b->swk[e] = sw0[e];
        b->shk[e] = sh0[e];
        b->cwk[e] = b->chk[e] = b->awk[e] = b->ahk[e] = 0;
        ax[e] = wj;
        ay[e] = hj;
        cw[e] = sw0[e];
        ch[e] = sh0[e];
    }
    for (int j = 1; j < K; j++) {
        const nf_real *sw = T + (size_t)j * bs, *sh = T + (size_t)(K + j) * bs;
#pragma omp simd
        for (int e = 0; e < m; e++) {
            double wj = mw + scw * (double)sw[e], hj = mh + sch * (double)sh[e];
            double kx = -B + B2 * ax[e], ky = -B + B2 * ay[e], Wj = B2 * wj, Hj = B2 * hj;
            int sx = b->v[e] >= kx, sy = b->v[e] >= ky;
            int sel = by_y ? sy : sx; /* knots increase: the last bin whose knot is <= v */
            b->k[e] = sel ? j : b->k[e];
            b->xk[e] = sel ? kx : b->xk[e];
            b->W[e] = sel ? Wj : b->W[e];
            b->yk[e] = sel ? ky : b->yk[e];
            b->H[e] = sel ? Hj : b->H[e];
            b->swk[e] = sel ? sw[e] : b->swk[e];
            b->cwk[e] = sel ? cw[e] : b->cwk[e];
            b->shk[e] = sel ? sh[e] : b->shk[e];
            b->chk[e] = sel ? ch[e] : b->chk[e];
            b->awk[e] += sel ? 0 : sw[e]; /* unselected bins are exactly those after the bin */
            b->ahk[e] += sel ? 0 : sh[e];
            ax[e] += wj;
            ay[e] += hj;
            cw[e] += sw[e];
            ch[e] += sh[e];
        }
    }

    /* d_0 = d_K = 1; interior d_k = m_d + softplus(theta[2K + k - 1] + c) */
    nf_real z0[RQ_BLK], z1[RQ_BLK];
    const nf_real c = (nf_real)s->dconst, md = (nf_real)s->min_derivative;
    for (int e = 0; e < m; e++) {
        const nf_real *th = theta + b->at[e] * P + 2 * K;
        int k = b->k[e];
        z0[e] = th[k > 0 ? k - 1 : 0] + c;
        z1[e] = th[k < K - 1 ? k : K - 2] + c;
    }
#pragma omp simd
    for (int e = 0; e < m; e++) {
        nf_real g0, g1, d0 = knot_deriv(z0[e], md, &g0), d1 = knot_deriv(z1[e], md, &g1);
        int first = b->k[e] == 0, last = b->k[e] == K - 1;
        double d0d = d0, d1d = d1;
        b->d0[e] = first ? 1.0 : d0d;
        b->d1[e] = last ? 1.0 : d1d;
        b->sig0[e] = first ? 0 : g0;
        b->sig1[e] = last ? 0 : g1;
    }
}

/* Elements outside [-B, B] run the formulas at the nearest end, then take the identity. */
static inline double clampB(double v, double B)
{
    double lo = v < -B ? -B : v;
    return lo > B ? B : lo;
}

/* Where each element sits in its bin (bins by x): in = |x| <= B, xi = (x - x_k) / W (at the nearest
 * end for elements outside, which then take the identity). */
static void rq_locate(const nf_rqspline *s, rq_blk *b)
{
    const double B = s->bound;
#pragma omp simd
    for (int e = 0; e < b->m; e++) {
        double v = b->v[e];
        b->in[e] = (v >= -B) & (v <= B);
        b->xi[e] = (clampB(v, B) - b->xk[e]) / b->W[e];
    }
}

/* Inside bin k, xi = (x - x_k) / W, t = xi (1 - xi), s = H / W:
 *   y = y_k + H (s xi^2 + d_k t) / den,   den = s + (d_k + d_{k+1} - 2 s) t,
 *   log s'(x) = log(s^2 q / den^2),      q = d_{k+1} xi^2 + 2 s t + d_k (1 - xi)^2.
 * out[e] = y (identity outside [-B, B]), l[e] = log s'(x) (0 outside). */
NF_SIMD_CLONES static void rq_forward_blk(const rq_blk *b, nf_real *out, nf_real *l)
{
#pragma omp simd
    for (int e = 0; e < b->m; e++) {
        double W = b->W[e], H = b->H[e], d0 = b->d0[e], d1 = b->d1[e];
        double xi = b->xi[e], t = xi * (1 - xi), S = H / W;
        double den = S + (d0 + d1 - 2 * S) * t;
        double q = d1 * xi * xi + 2 * S * t + d0 * (1 - xi) * (1 - xi);
        double y = b->yk[e] + H * (S * xi * xi + d0 * t) / den;
        nf_real lv = RQ_LOG((nf_real)(S * S * q / (den * den))), yv = (nf_real)y;
        out[e] = b->in[e] ? yv : b->v[e];
        l[e] = b->in[e] ? lv : 0;
    }
}

/* The inverse inside bin k (bins by y): a xi^2 + b xi + c = 0 with
 *   a = H (s - d_k) + dy sum,  b = H d_k - dy sum,  c = -s dy,  dy = y - y_k,  sum = d_k + d_{k+1} - 2s,
 * root in [0, 1] as 2c / (-b - sqrt(b^2 - 4ac)) (no cancellation);  x = x_k + xi W;
 * l[e] = log s'(x) at the solution (0 outside). */
NF_SIMD_CLONES static void rq_inverse_blk(const nf_rqspline *s, const rq_blk *b, nf_real *out, nf_real *l)
{
    const double B = s->bound;
    const int m = b->m;
    double qb[RQ_BLK], qc[RQ_BLK], root[RQ_BLK];
#pragma omp simd
    for (int e = 0; e < m; e++) {
        double W = b->W[e], H = b->H[e], d0 = b->d0[e], d1 = b->d1[e], S = H / W;
        double dy = clampB(b->v[e], B) - b->yk[e], sum = d0 + d1 - 2 * S;
        double qa = H * (S - d0) + dy * sum;
        qb[e] = H * d0 - dy * sum;
        qc[e] = -S * dy;
        double disc = qb[e] * qb[e] - 4 * qa * qc[e];
        root[e] = disc > 0 ? disc : 0; /* rounding only: exactly >= 0 for a monotone bin */
    }
    /* its own loop: with errno semantics sqrt keeps a call for negative arguments, which would stop
     * the loops around it from vectorising */
    for (int e = 0; e < m; e++) root[e] = sqrt(root[e]);
#pragma omp simd
    for (int e = 0; e < m; e++) {
        double v = b->v[e];
        int in = (v >= -B) & (v <= B);
        double W = b->W[e], H = b->H[e], d0 = b->d0[e], d1 = b->d1[e], S = H / W;
        double xi = 2 * qc[e] / (-qb[e] - root[e]), t = xi * (1 - xi);
        double den = S + (d0 + d1 - 2 * S) * t;
        double q = d1 * xi * xi + 2 * S * t + d0 * (1 - xi) * (1 - xi);
        nf_real lv = RQ_LOG((nf_real)(S * S * q / (den * den))), xv = (nf_real)(b->xk[e] + xi * W);
        out[e] = in ? xv : v;
        l[e] = in ? lv : 0;
    }
}

/* Reverse mode through y(x; theta) and l = log s'(x; theta) at the block's bins (by x), given
 * gy[e] = dL/dy and gl[e] = dL/dl:  gx[e] = dL/dx, and the parameter gradients: from the softmax
 * rows Ts (row stride ts: b->T itself, or a cache), the rows of b->T get dL/du for the widths and
 * heights, g0/g1 dL/du of the knot derivatives d_k and d_{k+1} (0 where a derivative is fixed at 1,
 * and 0 outside [-B, B]).
 * Bin formula (num = H (s xi^2 + d0 t), den, q as above), then s = H/W, xi = (x - x_k)/W,
 * x_k = -B + 2B sum_{j<k} w_j, W = 2B w_k (y_k, H likewise from h),
 * w = m + (1 - K m) softmax(u): du_j = (1 - K m) sm_j (gw_j - sum_i sm_i gw_i) with gw_j = 2B g_xk
 * (j < k), 2B g_W (j = k), 0 (j > k);  d = m_d + softplus(u + c): du = dd sigmoid(u + c). */
NF_SIMD_CLONES static void rq_reverse_blk(const nf_rqspline *s, rq_blk *b, const nf_real *Ts, int ts, const double *gy,
                           const double *gl, double *gx, nf_real *g0, nf_real *g1)
{
    const int K = s->bins, m = b->m, bs = b->bs;
    const double B2 = 2 * s->bound;
    nf_real lt_w[RQ_BLK], eq_w[RQ_BLK], gt_w[RQ_BLK], lt_h[RQ_BLK], eq_h[RQ_BLK], gt_h[RQ_BLK];
#pragma omp simd
    for (int e = 0; e < m; e++) {
        int in = b->in[e];
        double W = b->W[e], H = b->H[e], d0 = b->d0[e], d1 = b->d1[e], S = H / W;
        double xi = b->xi[e], t = xi * (1 - xi);
        double num = H * (S * xi * xi + d0 * t);
        double den = S + (d0 + d1 - 2 * S) * t;
        double q = d1 * xi * xi + 2 * S * t + d0 * (1 - xi) * (1 - xi);
        double Gy = gy[e], Gl = gl[e];
        double g_num = Gy / den;
        double g_den = -Gy * num / (den * den) - 2 * Gl / den;
        double g_q = Gl / q;
        double g_s = 2 * Gl / S + g_num * H * xi * xi + g_den * (1 - 2 * t) + g_q * 2 * t;
        double g_H = g_num * (S * xi * xi + d0 * t) + g_s / W;
        double g_d0 = g_num * H * t + g_den * t + g_q * (1 - xi) * (1 - xi);
        double g_d1 = g_den * t + g_q * xi * xi;
        double g_t = g_num * H * d0 + g_den * (d0 + d1 - 2 * S) + g_q * 2 * S;
        double g_xi = g_num * H * S * 2 * xi + g_t * (1 - 2 * xi) + g_q * (2 * d1 * xi - 2 * d0 * (1 - xi));
        double g_W = -g_s * H / (W * W) - g_xi * xi / W;
        double g_xk = -g_xi / W;
        double g_x = g_xi / W, lw0 = B2 * g_xk, ew0 = B2 * g_W, lh0 = B2 * Gy, eh0 = B2 * g_H;
        gx[e] = in ? g_x : Gy;
        double lw = in ? lw0 : 0, ew = in ? ew0 : 0, lh = in ? lh0 : 0, eh = in ? eh0 : 0;
        /* gw_j - sum_i sm_i gw_i for j < k, j = k, j > k, with 1 - cwk = swk + awk and
         * 1 - swk = cwk + awk written out (a narrow last bin would lose them to cancellation) */
        double sw = b->swk[e], cw = b->cwk[e], aw = b->awk[e], sh = b->shk[e], ch = b->chk[e], ah = b->ahk[e];
        lt_w[e] = (nf_real)(lw * (sw + aw) - ew * sw);
        eq_w[e] = (nf_real)(ew * (cw + aw) - lw * cw);
        gt_w[e] = (nf_real)(-lw * cw - ew * sw);
        lt_h[e] = (nf_real)(lh * (sh + ah) - eh * sh);
        eq_h[e] = (nf_real)(eh * (ch + ah) - lh * ch);
        gt_h[e] = (nf_real)(-lh * ch - eh * sh);
        nf_real gd0 = (nf_real)(g_d0 * b->sig0[e]), gd1 = (nf_real)(g_d1 * b->sig1[e]);
        g0[e] = in ? gd0 : 0;
        g1[e] = in ? gd1 : 0;
    }
    const nf_real scw = (nf_real)(1 - K * s->min_width), sch = (nf_real)(1 - K * s->min_height);
    for (int j = 0; j < K; j++) {
        nf_real *tw = b->T + (size_t)j * bs, *th = b->T + (size_t)(K + j) * bs;
        const nf_real *sw = Ts + (size_t)j * ts, *sh = Ts + (size_t)(K + j) * ts;
#pragma omp simd
        for (int e = 0; e < m; e++) {
            int k = b->k[e];
            nf_real cw = j < k ? lt_w[e] : (j == k ? eq_w[e] : gt_w[e]);
            nf_real ch = j < k ? lt_h[e] : (j == k ? eq_h[e] : gt_h[e]);
            tw[e] = scw * sw[e] * cw;
            th[e] = sch * sh[e] * ch;
        }
    }
}

/* dtheta (+)= the block's parameter gradients (T, g0, g1); accumulate = 0 writes all P entries. */
NF_SIMD_CLONES static void store_dtheta(const nf_rqspline *s, const rq_blk *b, nf_real *dtheta, const nf_real *g0, const nf_real *g1,
                         int accumulate)
{
    const int K = s->bins, P = 3 * K - 1, bs = b->bs;
    for (int e = 0; e < b->m; e++) {
        nf_real *dt = dtheta + b->at[e] * P, *dd = dt + 2 * K;
        const int k = b->k[e];
        if (accumulate) {
            for (int j = 0; j < 2 * K; j++) dt[j] += b->T[(size_t)j * bs + e];
        } else {
            for (int j = 0; j < 2 * K; j++) dt[j] = b->T[(size_t)j * bs + e];
            for (int j = 0; j < K - 1; j++) dd[j] = 0;
        }
        if (k >= 1) dd[k - 1] += g0[e];
        if (k <= K - 2) dd[k] += g1[e];
    }
}

/* ---- the cache: what a backward would recompute, kept by a forward --------------------------- */

/* Per element: the 2K softmaxes; xi, W, H, d0, d1 as doubles (RQ_DS nf_reals each, copied bit for
 * bit, so the cached backward computes exactly what a recomputing one would); then k, in, sig0,
 * sig1, swk, cwk, awk, shk, chk, ahk.  A block of m elements starting at element g (counted
 * row-major over the n x d elements) sits at cache + g C, each quantity a run of m. */
#define RQ_DS (sizeof(double) / sizeof(nf_real))
#define RQ_CPER(K) (2 * (size_t)(K) + 5 * RQ_DS + 10)

size_t nf_rqspline_cache_size(const nf_rqspline *s, int n, int d)
{
    return n > 0 && d > 0 ? (size_t)n * d * RQ_CPER(s->bins) : 0;
}

static void cache_put(const nf_rqspline *s, const rq_blk *b, nf_real *c)
{
    const int K = s->bins, m = b->m;
    const size_t dm = (size_t)m * sizeof(double);
    for (int j = 0; j < 2 * K; j++) memcpy(c + (size_t)j * m, b->T + (size_t)j * b->bs, (size_t)m * sizeof(nf_real));
    char *dp = (char *)(c + (size_t)2 * K * m);
    memcpy(dp, b->xi, dm);
    memcpy(dp + dm, b->W, dm);
    memcpy(dp + 2 * dm, b->H, dm);
    memcpy(dp + 3 * dm, b->d0, dm);
    memcpy(dp + 4 * dm, b->d1, dm);
    nf_real *f = c + (2 * (size_t)K + 5 * RQ_DS) * m;
#pragma omp simd
    for (int e = 0; e < m; e++) {
        f[e] = (nf_real)b->k[e];
        f[m + e] = (nf_real)b->in[e];
        f[2 * m + e] = b->sig0[e];
        f[3 * m + e] = b->sig1[e];
        f[4 * m + e] = b->swk[e];
        f[5 * m + e] = b->cwk[e];
        f[6 * m + e] = b->awk[e];
        f[7 * m + e] = b->shk[e];
        f[8 * m + e] = b->chk[e];
        f[9 * m + e] = b->ahk[e];
    }
}

/* The block's state back from the cache; returns its softmax rows (row stride m). */
static const nf_real *cache_get(const nf_rqspline *s, rq_blk *b, const nf_real *c)
{
    const int K = s->bins, m = b->m;
    const size_t dm = (size_t)m * sizeof(double);
    const char *dp = (const char *)(c + (size_t)2 * K * m);
    memcpy(b->xi, dp, dm);
    memcpy(b->W, dp + dm, dm);
    memcpy(b->H, dp + 2 * dm, dm);
    memcpy(b->d0, dp + 3 * dm, dm);
    memcpy(b->d1, dp + 4 * dm, dm);
    const nf_real *f = c + (2 * (size_t)K + 5 * RQ_DS) * m;
#pragma omp simd
    for (int e = 0; e < m; e++) {
        b->k[e] = (int)f[e];
        b->in[e] = f[m + e] != 0;
        b->sig0[e] = f[2 * m + e];
        b->sig1[e] = f[3 * m + e];
        b->swk[e] = f[4 * m + e];
        b->cwk[e] = f[5 * m + e];
        b->awk[e] = f[6 * m + e];
        b->shk[e] = f[7 * m + e];
        b->chk[e] = f[8 * m + e];
        b->ahk[e] = f[9 * m + e];
    }
    return c;
}

/* ---- the array functions: chunks of rows (threads), blocks of elements (SIMD) ---------------- */

enum { RQ_FORWARD, RQ_INVERSE, RQ_BACKWARD, RQ_INVERSE_BACKWARD };

typedef struct rq_call {
    int mode;
    const nf_real *in;    /* x (forward, both backwards) or y (inverse); NULL for a cached backward */
    nf_real *out;         /* y or x */
    nf_real *ld, *lde;
    const nf_real *theta;
    nf_real *din;         /* dx (backward) or dy (inverse backward) */
    nf_real *dtheta;
    const nf_real *g;     /* dy (backward) or dx (inverse backward), NULL = 0 */
    const nf_real *gl;    /* dld, NULL = 0 */
    int accumulate;       /* dtheta: add (1) or overwrite (0) */
    int n, d, stride;
    nf_real *cache;       /* forward: filled if not NULL;  backward: read instead of recomputing */
} rq_call;

/* One block; g is its first element's index (for the cache). */
NF_SIMD_CLONES static void run_block(const nf_rqspline *s, const rq_call *c, rq_blk *b, size_t g)
{
    const int m = b->m;
    nf_real *cache = c->cache ? c->cache + g * RQ_CPER(s->bins) : NULL;
    if (c->in)
        for (int e = 0; e < m; e++) b->v[e] = c->in[b->at[e]];
    if (c->mode == RQ_FORWARD || c->mode == RQ_INVERSE) {
        nf_real out[RQ_BLK], l[RQ_BLK];
        rq_setup(s, b, c->theta, c->mode == RQ_INVERSE);
        if (c->mode == RQ_FORWARD) {
            rq_locate(s, b);
            rq_forward_blk(b, out, l);
            if (cache) cache_put(s, b, cache);
        } else {
            rq_inverse_blk(s, b, out, l);
        }
        for (int e = 0; e < m; e++) c->out[b->at[e]] = out[e];
        if (c->lde)
            for (int e = 0; e < m; e++) c->lde[b->at[e]] = l[e];
        if (c->ld) {
            const nf_real sign = c->mode == RQ_FORWARD ? 1 : -1;
            for (int e = 0; e < m;) { /* one add per row: a row's sum in double */
                int r = b->row[e];
                double sum = 0;
                for (; e < m && b->row[e] == r; e++) sum += l[e];
                c->ld[r] += sign * (nf_real)sum;
            }
        }
        return;
    }
    double gy[RQ_BLK], gl[RQ_BLK], gx[RQ_BLK];
    int any = 0;
    for (int e = 0; e < m; e++) {
        gy[e] = c->g ? c->g[b->at[e]] : 0;
        gl[e] = c->gl ? c->gl[b->row[e]] : 0;
        any |= gy[e] != 0 || gl[e] != 0;
    }
    if (!any && c->accumulate) return; /* nothing to add */
    nf_real g0[RQ_BLK], g1[RQ_BLK];
    const nf_real *Ts = b->T;
    int ts = b->bs;
    if (cache) {
        Ts = cache_get(s, b, cache);
        ts = m;
    } else {
        rq_setup(s, b, c->theta, 0);
        rq_locate(s, b);
    }
    if (c->mode == RQ_BACKWARD) {
        rq_reverse_blk(s, b, Ts, ts, gy, gl, gx, g0, g1);
        if (c->din)
            for (int e = 0; e < m; e++) c->din[b->at[e]] += (nf_real)gx[e];
    } else {
        /* at the solution x: s' and d log s'/dx, then g = gx - gl dl/dx;  dy += g / s';
         * the parameters get forward's reverse mode with gy -> -g / s', gl -> -gl */
#pragma omp simd
        for (int e = 0; e < m; e++) {
            double W = b->W[e], H = b->H[e], d0 = b->d0[e], d1 = b->d1[e], S = H / W;
            double xi = b->xi[e], t = xi * (1 - xi);
            double den = S + (d0 + d1 - 2 * S) * t;
            double q = d1 * xi * xi + 2 * S * t + d0 * (1 - xi) * (1 - xi);
            double deriv = S * S * q / (den * den);
            double q_xi = 2 * d1 * xi + 2 * S * (1 - 2 * xi) - 2 * d0 * (1 - xi);
            double den_xi = (d0 + d1 - 2 * S) * (1 - 2 * xi);
            double dldx = (q_xi / q - 2 * den_xi / den) / W;
            double dl = b->in[e] ? dldx : 0, g = gy[e] - gl[e] * dl, gq = g / deriv;
            double gd = b->in[e] ? gq : g;
            gx[e] = gd;
            gy[e] = -gd;
            gl[e] = -gl[e];
        }
        if (c->din)
            for (int e = 0; e < m; e++) c->din[b->at[e]] += (nf_real)gx[e];
        if (!c->dtheta) return;
        rq_reverse_blk(s, b, Ts, ts, gy, gl, gx, g0, g1);
    }
    if (c->dtheta) store_dtheta(s, b, c->dtheta, g0, g1, c->accumulate);
}

typedef struct rq_job {
    const nf_rqspline *s;
    const rq_call *c;
    int bs, rows; /* elements per block; rows per chunk */
} rq_job;

/* Chunks ch0..ch1 of rows, block by block. */
static void run_chunks(void *arg, size_t ch0, size_t ch1)
{
    const rq_job *j = arg;
    const rq_call *c = j->c;
    const int n = c->n, d = c->d, rows = j->rows;
    for (int ch = (int)ch0; ch < (int)ch1; ch++) {
        rq_blk b;
        b.bs = j->bs;
        b.m = 0;
        size_t g = (size_t)ch * rows * d;
        const int r1 = (ch + 1) * rows < n ? (ch + 1) * rows : n;
        for (int r = ch * rows; r < r1; r++)
            for (int k = 0; k < d; k++) {
                b.at[b.m] = (size_t)r * c->stride + k;
                b.row[b.m++] = r;
                if (b.m == j->bs) {
                    run_block(j->s, c, &b, g);
                    g += (size_t)b.m;
                    b.m = 0;
                }
            }
        if (b.m) run_block(j->s, c, &b, g);
    }
}

/* On the pool (core/threads.h), whose workers are usually still spinning from the network pass
 * before: an OpenMP region here cost a sleeping thread's wake-up, so it paid only from 16384
 * elements, and the nsf bench's couplings (2048 elements a call) ran alone between the passes, 16%
 * of a two-thread step. */
static void run(const nf_rqspline *s, const rq_call *c)
{
    const int n = c->n, d = c->d;
    if (n <= 0 || d <= 0) return;
    int bs = RQ_TCAP / (2 * s->bins);
    bs = bs > RQ_BLK ? RQ_BLK : bs / 8 * 8;
    /* rows per chunk: fixed, so the blocks (row sums, cache layout) do not depend on threads */
    const int rows = RQ_CHUNK / d > 1 ? RQ_CHUNK / d : 1;
    const int chunks = (n + rows - 1) / rows;
    rq_job j = {s, c, bs, rows};
    const int par = (size_t)n * d >= RQ_PAR_MIN && !nf_threads_in_parallel();
    nf_threads_ranges(par ? nf_blas_get_threads() : 1, (size_t)chunks, 1, run_chunks, &j);
}

/* y = s(x), ld += log s'(x) per row. */
void nf_rqspline_forward(const nf_rqspline *s, nf_real *y, nf_real *ld, nf_real *lde, const nf_real *x,
                         const nf_real *theta, int n, int d, int stride)
{
    rq_call c = {RQ_FORWARD, x, y, ld, lde, theta, NULL, NULL, NULL, NULL, 1, n, d, stride, NULL};
    run(s, &c);
}

/* x = s^-1(y), ld -= log s'(x) per row. */
void nf_rqspline_inverse(const nf_rqspline *s, nf_real *x, nf_real *ld, nf_real *lde, const nf_real *y,
                         const nf_real *theta, int n, int d, int stride)
{
    rq_call c = {RQ_INVERSE, y, x, ld, lde, theta, NULL, NULL, NULL, NULL, 1, n, d, stride, NULL};
    run(s, &c);
}

/* dx += gy s' + gl dl/dx;  dtheta (+)= gy ds/dtheta + gl dl/dtheta. */
void nf_rqspline_backward_ex(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                             const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d, int stride,
                             int accumulate)
{
    rq_call c = {RQ_BACKWARD, x, NULL, NULL, NULL, theta, dx, dtheta, dy, dld, accumulate, n, d, stride, NULL};
    run(s, &c);
}

void nf_rqspline_backward(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                          const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d, int stride)
{
    nf_rqspline_backward_ex(s, dx, dtheta, dy, dld, x, theta, n, d, stride, 1);
}

/* With g = gx - gl dl/dx at the solution x:  dy += g / s',  dtheta (+)= (-g / s') ds/dtheta - gl dl/dtheta
 * (forward's reverse mode with gy = -g / s' and gl -> -gl). */
void nf_rqspline_inverse_backward_ex(const nf_rqspline *s, nf_real *dy, nf_real *dtheta, const nf_real *dx,
                                     const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d,
                                     int stride, int accumulate)
{
    rq_call c = {RQ_INVERSE_BACKWARD, x, NULL, NULL, NULL, theta, dy, dtheta, dx, dld, accumulate, n, d, stride,
                 NULL};
    run(s, &c);
}

void nf_rqspline_inverse_backward(const nf_rqspline *s, nf_real *dy, nf_real *dtheta, const nf_real *dx,
                                  const nf_real *dld, const nf_real *x, const nf_real *theta, int n, int d,
                                  int stride)
{
    nf_rqspline_inverse_backward_ex(s, dy, dtheta, dx, dld, x, theta, n, d, stride, 1);
}

/* The forward, keeping in cache what the backward would recompute. */
void nf_rqspline_forward_cached(const nf_rqspline *s, nf_real *y, nf_real *ld, nf_real *lde, const nf_real *x,
                                const nf_real *theta, int n, int d, int stride, nf_real *cache)
{
    rq_call c = {RQ_FORWARD, x, y, ld, lde, theta, NULL, NULL, NULL, NULL, 1, n, d, stride, cache};
    run(s, &c);
}

/* The backward from the cache of nf_rqspline_forward_cached (x and theta are in it). */
void nf_rqspline_backward_cached(const nf_rqspline *s, nf_real *dx, nf_real *dtheta, const nf_real *dy,
                                 const nf_real *dld, const nf_real *cache, int n, int d, int stride, int accumulate)
{
    rq_call c = {RQ_BACKWARD, NULL, NULL, NULL, NULL, NULL, dx, dtheta, dy, dld, accumulate, n, d, stride,
                 (nf_real *)cache};
    run(s, &c);
}

/* The same arithmetic as rq_setup, for one element. */
void nf_rqspline_knots(const nf_rqspline *s, const nf_real *theta, double *xk, double *yk, double *dk)
{
    const int K = s->bins;
    rq_blk b; /* one element through the block code keeps the two in step */
    b.m = 1;
    b.bs = 1;
    b.at[0] = 0;
    b.row[0] = 0;
    b.v[0] = 0;
    rq_setup(s, &b, theta, 0);
    const double B = s->bound, B2 = 2 * B;
    const double mw = s->min_width, scw = 1 - K * s->min_width;
    const double mh = s->min_height, sch = 1 - K * s->min_height;
    double ax = 0, ay = 0;
    for (int j = 0; j < K; j++) {
        double wj = mw + scw * (double)b.T[j], hj = mh + sch * (double)b.T[K + j];
        xk[j] = -B + B2 * ax;
        yk[j] = -B + B2 * ay;
        ax += wj;
        ay += hj;
    }
    xk[K] = yk[K] = s->bound;
    dk[0] = dk[K] = 1;
    const nf_real c = (nf_real)s->dconst, md = (nf_real)s->min_derivative;
    for (int k = 1; k < K; k++) {
        nf_real sig;
        dk[k] = (double)knot_deriv(theta[2 * K + k - 1] + c, md, &sig);
    }
}
