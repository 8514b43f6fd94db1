/* tests/check_rqspline.c - the rational-quadratic spline kernel (flows/rqspline.c): identity at zero
 * parameters, a hand-computed value, monotonicity, continuity of value and slope at the knots, linear
 * tails, inverse(forward) inside, near knots and far outside [-B, B], blocked and threaded batches
 * against elements alone, the overwriting backward passes, the fast float exp/log/tanh, the
 * log-derivative against finite differences, and every gradient (input and unnormalised
 * parameters, both directions) against central differences in the double build. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flows/fastmath.h"
#include "flows/rqspline.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL_INV 1e-9
#define TOL_VAL 1e-12
#else
#define TOL_INV 2e-5
#define TOL_VAL 2e-6
#endif

/* m elements, each with random parameters of spread `scale`. */
static nf_real *random_theta(const nf_rqspline *s, int m, double scale, uint64_t seed)
{
    size_t np = (size_t)m * nf_rqspline_nparams(s);
    nf_real *th = malloc(np * sizeof(nf_real));
    nf_test_fill_normal(th, np, scale, seed);
    return th;
}

START_TEST(test_init_errors)
{
    nf_rqspline s;
    ck_assert_int_eq(nf_rqspline_init(&s, 1, 3.0), NF_EINVAL);
    ck_assert_int_eq(nf_rqspline_init(&s, NF_RQSPLINE_MAX_BINS + 1, 3.0), NF_EINVAL);
    ck_assert_int_eq(nf_rqspline_init(&s, 8, 0.0), NF_EINVAL);
    ck_assert_int_eq(nf_rqspline_init(&s, 8, -2.0), NF_EINVAL);
    ck_assert_int_eq(nf_rqspline_init(&s, 8, NAN), NF_EINVAL);
    ck_assert_int_eq(nf_rqspline_init(&s, 8, 3.0), NF_OK);
    ck_assert_int_eq(nf_rqspline_nparams(&s), 23);
    /* the derivative constant makes softplus(0 + c) + min_derivative exactly 1 */
    ck_assert(fabs(log1p(exp(s.dconst)) + s.min_derivative - 1) < 1e-14);
}
END_TEST

START_TEST(test_identity_at_zero)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 8, 3.0);
    const int n = 7, d = 5, P = nf_rqspline_nparams(&s);
    nf_real *th = calloc((size_t)n * d * P, sizeof(nf_real));
    nf_real x[35], y[35], x2[35], lde[35], ld[7] = {0};
    nf_test_fill_uniform(x, 35, -4.7, 4.7, 5);
    nf_rqspline_forward(&s, y, ld, lde, x, th, n, d, d);
    for (int i = 0; i < 35; i++) {
        ck_assert_msg(fabs(y[i] - x[i]) < TOL_VAL * 10, "zero parameters: y = %g, x = %g", (double)y[i], (double)x[i]);
        ck_assert_msg(fabs(lde[i]) < TOL_VAL * 10, "zero parameters: log s' = %g", (double)lde[i]);
    }
    for (int r = 0; r < n; r++) ck_assert(fabs(ld[r]) < TOL_VAL * 50);
    nf_rqspline_inverse(&s, x2, NULL, NULL, y, th, n, d, d);
    for (int i = 0; i < 35; i++) ck_assert(fabs(x2[i] - x[i]) < TOL_VAL * 10);
    free(th);
}
END_TEST

/* K = 2, B = 1.7: widths (0.4, -0.3), heights (log 3, 0), interior derivative u = 0.85, at x = 0.785. */
START_TEST(test_known_value)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 2, 1.7);
    nf_real th[5] = {0.4, -0.3, (nf_real)log(3.0), 0, 0.85};
    const double B = 1.7, m = 1e-3;
    double ew0 = exp(0.4), ew1 = exp(-0.3);
    double w0 = m + (1 - 2 * m) * ew0 / (ew0 + ew1);
    double h0 = m + (1 - 2 * m) * 0.75;
    double xk1 = -B + 2 * B * w0, yk1 = -B + 2 * B * h0;
    double d1 = m + log1p(exp(0.85 + log(expm1(1 - m))));
    double x = 0.785;
    ck_assert(x > xk1); /* bin 1: from (xk1, yk1, d1) to (B, B, 1) */
    double W = B - xk1, H = B - yk1, sl = H / W, xi = (x - xk1) / W, t = xi * (1 - xi);
    double den = sl + (d1 + 1 - 2 * sl) * t;
    double y = yk1 + H * (sl * xi * xi + d1 * t) / den;
    double dydx = sl * sl * (1 * xi * xi + 2 * sl * t + d1 * (1 - xi) * (1 - xi)) / (den * den);
    nf_real xv = (nf_real)x, yv, ld = 0, lde;
    nf_rqspline_forward(&s, &yv, &ld, &lde, &xv, th, 1, 1, 1);
#ifdef NF_DOUBLE
    const double tol = 1e-13;
#else
    const double tol = 2e-6;
#endif
    ck_assert_msg(fabs(yv - y) < tol, "s(0.785) = %.15g, hand-computed %.15g", (double)yv, y);
    ck_assert_msg(fabs(lde - log(dydx)) < tol, "log s'(0.785) = %.15g, hand-computed %.15g", (double)lde, log(dydx));
    ck_assert(fabs(ld - lde) < tol);
}
END_TEST

START_TEST(test_monotone_and_continuous)
{
    const int bins[2] = {4, 8};
    for (int bi = 0; bi < 2; bi++) {
        nf_rqspline s;
        nf_rqspline_init(&s, bins[bi], 2.5);
        const int K = s.bins, P = nf_rqspline_nparams(&s);
        for (int rep = 0; rep < 5; rep++) {
            nf_real *th = random_theta(&s, 1, 1.7, 100 + rep);
            /* a fine grid over [-3.5, 3.5]: strictly increasing, positive slope */
            const int G = 4001;
            nf_real *x = malloc(G * sizeof(nf_real)), *y = malloc(G * sizeof(nf_real)), *lde = malloc(G * sizeof(nf_real));
            nf_real *thg = malloc((size_t)G * P * sizeof(nf_real));
            for (int g = 0; g < G; g++) {
                x[g] = (nf_real)(-3.5 + 7.0 * g / (G - 1));
                memcpy(thg + (size_t)g * P, th, P * sizeof(nf_real));
            }
            nf_rqspline_forward(&s, y, NULL, lde, x, thg, G, 1, 1);
            for (int g = 1; g < G; g++)
                ck_assert_msg(y[g] > y[g - 1], "K=%d: not increasing at x = %g: %g then %g", K, (double)x[g],
                              (double)y[g - 1], (double)y[g]);
            for (int g = 0; g < G; g++) ck_assert(isfinite(lde[g]));
            /* value and slope at each knot match the knot table from both sides */
            double xk[NF_RQSPLINE_MAX_BINS + 1], yk[NF_RQSPLINE_MAX_BINS + 1], dk[NF_RQSPLINE_MAX_BINS + 1];
            nf_rqspline_knots(&s, th, xk, yk, dk);
            for (int k = 0; k <= K; k++) {
                /* value at the knot; slope limits from each side by Richardson extrapolation
                 * 2 s'(x_k +- h) - s'(x_k +- 2h), since the slope may change fast in a narrow bin */
#ifdef NF_DOUBLE
                const double h = 1e-9, tv = 1e-12, td = 1e-7;
#else
                const double h = 1e-4, tv = 1e-6, td = 2e-2;
#endif
                nf_real xs[5] = {(nf_real)(xk[k] - 2 * h), (nf_real)(xk[k] - h), (nf_real)xk[k], (nf_real)(xk[k] + h),
                                 (nf_real)(xk[k] + 2 * h)}, ys[5], ls[5];
                nf_real th5[5 * (3 * NF_RQSPLINE_MAX_BINS - 1)];
                for (int q = 0; q < 5; q++) memcpy(th5 + q * P, th, P * sizeof(nf_real));
                nf_rqspline_forward(&s, ys, NULL, ls, xs, th5, 5, 1, 1);
                ck_assert_msg(fabs(ys[2] - yk[k]) < tv * (1 + fabs(yk[k])), "K=%d knot %d: s(x_k) = %.15g, knot y = %.15g",
                              K, k, (double)ys[2], yk[k]);
                double left = 2 * exp((double)ls[1]) - exp((double)ls[0]);
                double right = 2 * exp((double)ls[3]) - exp((double)ls[4]);
#ifdef NF_DOUBLE /* in float, h cannot be small enough next to a narrow steep bin */
                ck_assert_msg(fabs(left - dk[k]) < td * (1 + dk[k]) && fabs(right - dk[k]) < td * (1 + dk[k]),
                              "K=%d knot %d: slope limits %.12g (left) and %.12g (right), knot derivative %.12g", K, k, left,
                              right, dk[k]);
#else
                (void)left;
                (void)right;
#endif
                ck_assert(fabs(exp((double)ls[2]) - dk[k]) < td * (1 + dk[k]));
            }
            ck_assert(fabs(dk[0] - 1) < 1e-15 && fabs(dk[K] - 1) < 1e-15);
            ck_assert(xk[0] == -2.5 && xk[K] == 2.5 && yk[0] == -2.5 && yk[K] == 2.5);
            free(x); free(y); free(lde); free(thg); free(th);
        }
    }
}
END_TEST

/* Points near and at knots, inside, at +-B, and far outside. */
static int test_points(nf_real *x, const double *xk, int K, double B)
{
    int m = 0;
    const double far[8] = {-1e3, -47.5, -B - 1e-7, -B, B, B + 3e-6, 38.25, 2.2e4};
    for (int i = 0; i < 8; i++) x[m++] = (nf_real)far[i];
    for (int k = 1; k < K; k++) {
        x[m++] = (nf_real)xk[k];
        x[m++] = (nf_real)(xk[k] * (1 + 1e-7) + 1e-9);
        x[m++] = (nf_real)(xk[k] - 3e-8);
        x[m++] = (nf_real)(0.5 * (xk[k - 1] + xk[k]));
    }
    return m;
}

START_TEST(test_roundtrip)
{
    const int bins[2] = {4, 8};
    for (int bi = 0; bi < 2; bi++) {
        nf_rqspline s;
        nf_rqspline_init(&s, bins[bi], 3.0);
        const int K = s.bins, P = nf_rqspline_nparams(&s);
        nf_real *th1 = random_theta(&s, 1, 2.1, 7 + bi);
        double xk[NF_RQSPLINE_MAX_BINS + 1], yk[NF_RQSPLINE_MAX_BINS + 1], dk[NF_RQSPLINE_MAX_BINS + 1];
        nf_rqspline_knots(&s, th1, xk, yk, dk);
        nf_real x[8 + 4 * NF_RQSPLINE_MAX_BINS + 200];
        int m = test_points(x, xk, K, 3.0);
        nf_test_fill_uniform(x + m, 200, -3.2, 3.2, 77);
        m += 200;
        nf_real *th = malloc((size_t)m * P * sizeof(nf_real)), *y = malloc(m * sizeof(nf_real));
        nf_real *x2 = malloc(m * sizeof(nf_real)), *lf = malloc(m * sizeof(nf_real)), *li = malloc(m * sizeof(nf_real));
        nf_real *ldf = calloc(m, sizeof(nf_real)), *ldi = calloc(m, sizeof(nf_real));
        for (int i = 0; i < m; i++) memcpy(th + (size_t)i * P, th1, P * sizeof(nf_real));
        nf_real *y2 = malloc(m * sizeof(nf_real)), *lf2 = malloc(m * sizeof(nf_real));
        nf_rqspline_forward(&s, y, ldf, lf, x, th, m, 1, 1);
        nf_rqspline_inverse(&s, x2, ldi, li, y, th, m, 1, 1);
        nf_rqspline_forward(&s, y2, NULL, lf2, x2, th, m, 1, 1);
        for (int i = 0; i < m; i++) {
            ck_assert_msg(fabs(x2[i] - x[i]) <= TOL_INV * (1 + fabs(x[i])), "K=%d: inverse(forward(%.12g)) = %.12g", K,
                          (double)x[i], (double)x2[i]);
            /* the inverse's log-determinant is minus the forward one at the point it returns (in float, y's
             * rounding moves that point by up to half an ulp of y over the slope, which in a steep
             * narrow bin changes log s' by more than the tolerance, so x itself is compared in double) */
            ck_assert_msg(fabs(lf2[i] - li[i]) < 10 * TOL_INV && fabs(lf2[i] + ldi[i]) < 10 * TOL_INV,
                          "K=%d: logdets %g and %g do not cancel at x = %g", K, (double)lf2[i], (double)ldi[i],
                          (double)x2[i]);
#ifdef NF_DOUBLE
            ck_assert_msg(fabs(ldf[i] + ldi[i]) < 10 * TOL_INV, "K=%d: logdets %g and %g do not cancel at x = %g", K,
                          (double)ldf[i], (double)ldi[i], (double)x[i]);
#endif
            if (fabs(x[i]) > 3.0) ck_assert(y[i] == x[i] && lf[i] == 0);
        }
        free(y2); free(lf2);
        /* forward(inverse(y)) for y at and near the y-knots */
        m = test_points(x, yk, K, 3.0);
        nf_rqspline_inverse(&s, x2, NULL, NULL, x, th, m, 1, 1);
        nf_rqspline_forward(&s, y, NULL, NULL, x2, th, m, 1, 1);
        for (int i = 0; i < m; i++)
            ck_assert_msg(fabs(y[i] - x[i]) <= TOL_INV * (1 + fabs(x[i])), "K=%d: forward(inverse(%.12g)) = %.12g", K,
                          (double)x[i], (double)y[i]);
        free(th1); free(th); free(y); free(x2); free(lf); free(li); free(ldf); free(ldi);
    }
}
END_TEST

/* The array layout: a column of a wider array (stride > d) touches only that column. */
START_TEST(test_strided_column)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 6, 2.0);
    const int n = 5, D = 4, P = nf_rqspline_nparams(&s), col = 2;
    nf_real *th = random_theta(&s, n * D, 1.4, 3);
    nf_real x[20], y[20], yref[20], ld[5] = {0}, ldref[5] = {0};
    nf_test_fill_uniform(x, 20, -2.3, 2.3, 9);
    for (int i = 0; i < 20; i++) y[i] = (nf_real)-123.25;
    nf_rqspline_forward(&s, y + col, ld, NULL, x + col, th + col * P, n, 1, D);
    nf_rqspline_forward(&s, yref, NULL, NULL, x, th, n, D, D);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < D; j++) {
            if (j == col) ck_assert(y[r * D + j] == yref[r * D + j]);
            else ck_assert(y[r * D + j] == (nf_real)-123.25);
        }
    nf_real lde[20];
    nf_rqspline_forward(&s, yref, ldref, lde, x, th, n, D, D);
    for (int r = 0; r < n; r++) ck_assert(fabs(ld[r] - lde[r * D + col]) < 1e-6);
    free(th);
}
END_TEST

/* The batch is cut into blocks and, on large batches, threads: every element must come out as it
 * does alone.  Many rows (over the threading threshold), odd widths, a strided layout and the
 * largest bin count (a smaller block). */
START_TEST(test_blocks_match_single)
{
    const int bins[2] = {8, NF_RQSPLINE_MAX_BINS};
    for (int bi = 0; bi < 2; bi++) {
        nf_rqspline s;
        nf_rqspline_init(&s, bins[bi], 2.75);
        const int P = nf_rqspline_nparams(&s), n = bi ? 203 : 4111, d = 5, stride = 7;
        const size_t m = (size_t)n * stride;
        nf_real *th = random_theta(&s, (int)m, 1.2, 90 + bi);
        nf_real *x = malloc(m * sizeof(nf_real)), *y = malloc(m * sizeof(nf_real)), *x2 = malloc(m * sizeof(nf_real));
        nf_real *ld = calloc(n, sizeof(nf_real)), *lde = malloc(m * sizeof(nf_real));
        nf_real *dx = calloc(m, sizeof(nf_real)), *dth = calloc(m * P, sizeof(nf_real)), *gy = malloc(m * sizeof(nf_real));
        nf_real *gl = malloc(n * sizeof(nf_real));
        nf_test_fill_uniform(x, m, -3.1, 3.1, 91);
        nf_test_fill_normal(gy, m, 0.9, 92);
        nf_test_fill_normal(gl, n, 0.7, 93);
        for (size_t i = 0; i < m; i++) y[i] = x2[i] = (nf_real)-7.5; /* columns d..stride stay untouched */
        nf_rqspline_forward(&s, y, ld, lde, x, th, n, d, stride);
        nf_rqspline_inverse(&s, x2, NULL, NULL, y, th, n, d, stride);
        nf_rqspline_backward(&s, dx, dth, gy, gl, x, th, n, d, stride);
        for (int r = 0; r < n; r += bi ? 1 : 37) {
            double sum = 0;
            for (int j = 0; j < stride; j++) {
                size_t at = (size_t)r * stride + j;
                if (j >= d) {
                    ck_assert(y[at] == (nf_real)-7.5 && x2[at] == (nf_real)-7.5 && dx[at] == 0);
                    continue;
                }
                nf_real y1, l1, dx1 = 0, gl1 = gl[r], *dth1 = calloc(P, sizeof(nf_real));
                nf_rqspline_forward(&s, &y1, NULL, &l1, x + at, th + at * P, 1, 1, 1);
                nf_rqspline_backward(&s, &dx1, dth1, gy + at, &gl1, x + at, th + at * P, 1, 1, 1);
                ck_assert_msg(y1 == y[at] && l1 == lde[at], "row %d col %d: %g in the batch, %g alone", r, j,
                              (double)y[at], (double)y1);
                ck_assert(fabs(x2[at] - x[at]) <= TOL_INV * 10 * (1 + fabs(x[at])));
                ck_assert(dx1 == dx[at]);
                for (int p = 0; p < P; p++) ck_assert(dth1[p] == dth[at * P + p]);
                sum += l1;
                free(dth1);
            }
            ck_assert(fabs(ld[r] - sum) <= 1e-5 * (1 + fabs(sum)));
        }
        free(th); free(x); free(y); free(x2); free(ld); free(lde); free(dx); free(dth); free(gy); free(gl);
    }
}
END_TEST

/* The _ex backward passes with accumulate = 0 overwrite all of dtheta (whatever it held, NaN
 * included) with exactly what accumulating into zeros gives; dx / dy still accumulate. */
START_TEST(test_backward_overwrite)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 6, 2.25);
    const int P = nf_rqspline_nparams(&s), n = 9, d = 3, m = n * d;
    nf_real *th = random_theta(&s, m, 1.4, 71);
    nf_real x[27], y[27], gx[27], gl[9], dx0[27], dx1[27];
    nf_real *dt0 = calloc((size_t)m * P, sizeof(nf_real)), *dt1 = malloc((size_t)m * P * sizeof(nf_real));
    nf_test_fill_uniform(x, m, -2.6, 2.6, 72);
    x[5] = (nf_real)3.625; /* a tail element: its parameters get zeros */
    nf_test_fill_normal(gx, m, 1.1, 73);
    nf_test_fill_normal(gl, n, 0.8, 74);
    for (int inv = 0; inv < 2; inv++) {
        for (int i = 0; i < m; i++) dx0[i] = dx1[i] = (nf_real)0.375;
        memset(dt0, 0, (size_t)m * P * sizeof(nf_real));
        for (int p = 0; p < m * P; p++) dt1[p] = p % 3 ? (nf_real)8.5 : (nf_real)NAN;
        if (!inv) {
            nf_rqspline_backward(&s, dx0, dt0, gx, gl, x, th, n, d, d);
            nf_rqspline_backward_ex(&s, dx1, dt1, gx, gl, x, th, n, d, d, 0);
        } else {
            nf_rqspline_inverse(&s, y, NULL, NULL, x, th, n, d, d);
            nf_rqspline_inverse_backward(&s, dx0, dt0, gx, gl, y, th, n, d, d);
            nf_rqspline_inverse_backward_ex(&s, dx1, dt1, gx, gl, y, th, n, d, d, 0);
        }
        for (int i = 0; i < m; i++) ck_assert(dx0[i] == dx1[i] && dx0[i] != (nf_real)0.375);
        for (int p = 0; p < m * P; p++)
            ck_assert_msg(dt0[p] == dt1[p], "%s: dtheta[%d] = %g overwritten, %g accumulated", inv ? "inverse" : "forward",
                          p, (double)dt1[p], (double)dt0[p]);
    }
    for (int p = 0; p < P; p++) ck_assert(dt1[5 * P + p] == 0);
    free(th); free(dt0); free(dt1);
}
END_TEST

/* The cached forward gives the same outputs, and the cached backward exactly the same gradients as
 * the one that recomputes, on a strided batch large enough to be threaded, accumulating and
 * overwriting. */
START_TEST(test_cached_backward)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 7, 2.5);
    const int P = nf_rqspline_nparams(&s), n = 3001, d = 6, stride = 9;
    const size_t m = (size_t)n * stride;
    nf_real *th = random_theta(&s, (int)m, 1.5, 81);
    nf_real *x = malloc(m * sizeof(nf_real)), *gy = malloc(m * sizeof(nf_real)), *gl = malloc(n * sizeof(nf_real));
    nf_real *y0 = calloc(m, sizeof(nf_real)), *y1 = calloc(m, sizeof(nf_real));
    nf_real *ld0 = calloc(n, sizeof(nf_real)), *ld1 = calloc(n, sizeof(nf_real));
    nf_real *dx0 = calloc(m, sizeof(nf_real)), *dx1 = calloc(m, sizeof(nf_real));
    nf_real *dt0 = calloc(m * P, sizeof(nf_real)), *dt1 = malloc(m * P * sizeof(nf_real));
    nf_real *cache = malloc(nf_rqspline_cache_size(&s, n, d) * sizeof(nf_real));
    ck_assert(nf_rqspline_cache_size(&s, n, d) >= (size_t)n * d * (2 * 7 + 15));
    nf_test_fill_uniform(x, m, -2.9, 2.9, 82);
    nf_test_fill_normal(gy, m, 1.2, 83);
    nf_test_fill_normal(gl, n, 0.6, 84);
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        nf_rqspline_forward(&s, y0, ld0, NULL, x, th, n, d, stride);
        nf_rqspline_forward_cached(&s, y1, ld1, NULL, x, th, n, d, stride, cache);
        for (size_t i = 0; i < m; i++) ck_assert(y0[i] == y1[i]);
        for (int r = 0; r < n; r++) ck_assert(ld0[r] == ld1[r]);
        for (size_t p = 0; p < m * P; p++) dt1[p] = accumulate ? dt0[p] : (nf_real)NAN;
        nf_rqspline_backward_ex(&s, dx0, dt0, gy, gl, x, th, n, d, stride, accumulate);
        nf_rqspline_backward_cached(&s, dx1, dt1, gy, gl, cache, n, d, stride, accumulate);
        double worst = 0;
        for (size_t i = 0; i < m; i++) worst = fmax(worst, nf_test_relerr(dx0[i], dx1[i], 1e-3));
        for (size_t p = 0; p < m * P; p++) {
            if ((p / P) % stride >= (size_t)d) continue; /* columns the calls do not touch */
            worst = fmax(worst, nf_test_relerr(dt0[p], dt1[p], 1e-3));
        }
        ck_assert_msg(worst == 0, "cached gradients differ by %g", worst);
    }
    free(th); free(x); free(gy); free(gl); free(y0); free(y1); free(ld0); free(ld1);
    free(dx0); free(dx1); free(dt0); free(dt1); free(cache);
}
END_TEST

#ifndef NF_DOUBLE
/* flows/fastmath.h against libm: a few ulp over the kernels' ranges, and the special values. */
START_TEST(test_fastmath)
{
    double worst_exp = 0, worst_log = 0, worst_l1p = 0, worst_tanh = 0;
    for (int i = 0; i <= 200000; i++) {
        float u = (float)(-87.0 + 175.0 * i / 200000.0);
        worst_exp = fmax(worst_exp, fabs((double)nf_fast_expf(u) - exp(u)) / exp(u));
        float v = (float)exp(-80.0 + 160.0 * i / 200000.0);
        worst_log = fmax(worst_log, fabs((double)nf_fast_logf(v) - log(v)) / fmax(fabs(log(v)), 1.0));
        float t = (float)exp(-40.0 + 40.0 * i / 200000.0) * (i % 2 ? 1 : -0.999f);
        worst_l1p = fmax(worst_l1p, fabs((double)nf_fast_log1pf(t) - log1p(t)) / fabs(log1p(t)));
        float z = (float)(-9.0 + 18.0 * i / 200000.0) + 1e-4f;
        worst_tanh = fmax(worst_tanh, fabs((double)nf_fast_tanhf(z) - tanh(z)) / fabs(tanh(z)));
    }
    ck_assert_msg(worst_exp < 5e-7 && worst_log < 3e-7 && worst_l1p < 5e-7 && worst_tanh < 5e-7,
                  "relative errors: exp %g, log %g, log1p %g, tanh %g", worst_exp, worst_log, worst_l1p, worst_tanh);
    ck_assert(isnan(nf_fast_expf(NAN)) && isnan(nf_fast_logf(NAN)) && isnan(nf_fast_tanhf(NAN)));
    ck_assert(isnan(nf_fast_logf(-2.5f)) && nf_fast_logf(0.0f) == -INFINITY && nf_fast_logf(INFINITY) == INFINITY);
    ck_assert(nf_fast_expf(0.0f) == 1.0f && nf_fast_logf(1.0f) == 0.0f && nf_fast_expf(-1000.0f) < 1e-37f);
}
END_TEST
#endif

#ifdef NF_DOUBLE
/* log s'(x) against a central difference of s. */
START_TEST(test_logderiv_fd)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 8, 3.0);
    const int P = nf_rqspline_nparams(&s), m = 300;
    nf_real *th1 = random_theta(&s, 1, 1.9, 41);
    nf_real *th = malloc((size_t)3 * P * sizeof(nf_real));
    for (int q = 0; q < 3; q++) memcpy(th + q * P, th1, P * sizeof(nf_real));
    nf_real xs[300];
    nf_test_fill_uniform(xs, m, -2.99, 2.99, 43);
    const double h = 1e-6;
    for (int i = 0; i < m; i++) {
        nf_real x3[3] = {xs[i] - h, xs[i], xs[i] + h}, y3[3], l3[3];
        nf_rqspline_forward(&s, y3, NULL, l3, x3, th, 3, 1, 1);
        double fd = (y3[2] - y3[0]) / (2 * h);
        ck_assert_msg(nf_test_relerr(exp(l3[1]), fd, 1e-2) < 1e-6, "slope at %g: exp(log s') = %.12g, FD %.12g",
                      (double)xs[i], exp(l3[1]), fd);
    }
    free(th1); free(th);
}
END_TEST

/* L = sum a*out + sum b*ld through forward or inverse; dx (or dy) and dtheta against central differences. */
static double kernel_loss(const nf_rqspline *s, int inverse, const nf_real *in, const nf_real *th, const nf_real *a,
                          const nf_real *b, int n, int d)
{
    nf_real out[64], ld[16] = {0};
    if (!inverse) nf_rqspline_forward(s, out, ld, NULL, in, th, n, d, d);
    else nf_rqspline_inverse(s, out, ld, NULL, in, th, n, d, d);
    double L = 0;
    for (int i = 0; i < n * d; i++) L += (double)a[i] * out[i];
    for (int r = 0; r < n; r++) L += (double)b[r] * ld[r];
    return L;
}

static void kernel_gradients(int K, int inverse)
{
    nf_rqspline s;
    nf_rqspline_init(&s, K, 2.75);
    const int n = 6, d = 3, P = nf_rqspline_nparams(&s), m = n * d;
    nf_real *th = random_theta(&s, m, 1.6, 1000 + K + 7 * inverse);
    nf_real in[18], out[18], a[18], b[6], gin[18] = {0};
    nf_real *gth = calloc((size_t)m * P, sizeof(nf_real));
    nf_test_fill_uniform(in, m, -2.6, 2.6, 51 + K);
    in[4] = (nf_real)4.125;   /* one element in the right tail */
    in[11] = (nf_real)-3.5;   /* and one in the left */
    nf_test_fill_normal(a, m, 0.8, 53);
    nf_test_fill_normal(b, n, 1.1, 57);
    if (!inverse) {
        nf_rqspline_backward(&s, gin, gth, a, b, in, th, n, d, d);
    } else {
        nf_rqspline_inverse(&s, out, NULL, NULL, in, th, n, d, d);
        nf_rqspline_inverse_backward(&s, gin, gth, a, b, out, th, n, d, d);
    }
    const double eps = 1e-6;
    for (int i = 0; i < m; i++) {
        nf_real keep = in[i];
        in[i] = keep + eps;
        double Lp = kernel_loss(&s, inverse, in, th, a, b, n, d);
        in[i] = keep - eps;
        double Lm = kernel_loss(&s, inverse, in, th, a, b, n, d);
        in[i] = keep;
        double fd = (Lp - Lm) / (2 * eps);
        ck_assert_msg(nf_test_relerr(gin[i], fd, 1e-2) < 1e-6, "K=%d %s: d/din[%d] = %.12g, FD %.12g", K,
                      inverse ? "inverse" : "forward", i, (double)gin[i], fd);
    }
    for (size_t p = 0; p < (size_t)m * P; p++) {
        nf_real keep = th[p];
        th[p] = keep + eps;
        double Lp = kernel_loss(&s, inverse, in, th, a, b, n, d);
        th[p] = keep - eps;
        double Lm = kernel_loss(&s, inverse, in, th, a, b, n, d);
        th[p] = keep;
        double fd = (Lp - Lm) / (2 * eps);
        ck_assert_msg(nf_test_relerr(gth[p], fd, 1e-2) < 1e-6, "K=%d %s: d/dtheta[%zu] (element %zu, slot %zu) = %.12g, FD %.12g",
                      K, inverse ? "inverse" : "forward", p, p / P, p % P, (double)gth[p], fd);
    }
    /* tails: no parameter gradient */
    for (int q = 0; q < P; q++) ck_assert(gth[4 * P + q] == 0 && gth[11 * P + q] == 0);
    free(th); free(gth);
}

START_TEST(test_gradients_forward)
{
    kernel_gradients(4, 0);
    kernel_gradients(8, 0);
}
END_TEST

START_TEST(test_gradients_inverse)
{
    kernel_gradients(4, 1);
    kernel_gradients(8, 1);
}
END_TEST

/* Backward accumulates: calling it twice doubles the gradients. */
START_TEST(test_backward_accumulates)
{
    nf_rqspline s;
    nf_rqspline_init(&s, 5, 2.0);
    const int P = nf_rqspline_nparams(&s);
    nf_real *th = random_theta(&s, 2, 1.3, 61);
    nf_real x[2] = {0.37, -1.21}, gy[2] = {0.9, -0.4}, gl[1] = {0.65}, gx[2] = {0}, gx2[2] = {0};
    nf_real *gt = calloc(2 * P, sizeof(nf_real)), *gt2 = calloc(2 * P, sizeof(nf_real));
    nf_rqspline_backward(&s, gx, gt, gy, gl, x, th, 1, 2, 2);
    nf_rqspline_backward(&s, gx2, gt2, gy, gl, x, th, 1, 2, 2);
    nf_rqspline_backward(&s, gx2, gt2, gy, gl, x, th, 1, 2, 2);
    for (int i = 0; i < 2; i++) ck_assert(fabs(gx2[i] - 2 * gx[i]) < 1e-12);
    for (int p = 0; p < 2 * P; p++) ck_assert(fabs(gt2[p] - 2 * gt[p]) < 1e-12);
    ck_assert(gx[0] != 0 && gt[0] != 0);
    free(th); free(gt); free(gt2);
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("rqspline");
    TCase *tc = tcase_create("kernel");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_identity_at_zero);
    tcase_add_test(tc, test_known_value);
    tcase_add_test(tc, test_monotone_and_continuous);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_strided_column);
    tcase_add_test(tc, test_blocks_match_single);
    tcase_add_test(tc, test_backward_overwrite);
    tcase_add_test(tc, test_cached_backward);
#ifndef NF_DOUBLE
    tcase_add_test(tc, test_fastmath);
#endif
#ifdef NF_DOUBLE
    tcase_add_test(tc, test_logderiv_fd);
    tcase_add_test(tc, test_gradients_forward);
    tcase_add_test(tc, test_gradients_inverse);
    tcase_add_test(tc, test_backward_accumulates);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
