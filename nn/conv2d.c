/* nn/conv2d.c - stride-1 'same' convolution on NHWC batches by columns and one product per pass.
 *
 * Two ways to lay out the columns, the same arithmetic (FLOPs) either way:
 *   input side (cout >= cin, the widening layers): cols = im2col(x) (R, k*k*cin), y = cols W^T;
 *   output side (cout < cin, the narrowing layers such as a conditioner's last one, k > 1):
 *     Z = x Wt^T (R, k*k*cout) with Wt the filters regrouped by tap (k*k*cout, cin), then every output
 *     pixel sums its k*k taps' slices of Z, shifted into place (R = n*h*w pixels).
 * The output side keeps the product wide (k*k*cout columns instead of cout) and the scratch at
 * R*k*k*cout instead of R*k*k*cin: for a 64 -> 6 layer, 9x less memory and, measured on the 2-core
 * VM with OpenBLAS at 64 images of 32x32, 75 ms instead of 560 ms for the forward pass.
 *
 * Speed: every pass over the batch is one nf_gemm per product (forward: one; backward: the weight
 * gradient and the input gradient), so the matrix kernel sees tall, dense products (n*h*w rows)
 * instead of one small product per image or per pixel.  The column copies and their adjoints are
 * memory-bound loops of runs of cin (or cout) reals per tap, cheap beside the products.  No threads
 * of its own: a product that large is split by nf_gemm (core/blas.h).
 */
#include "nn/conv2d.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"

static int add_slice(nf_params *P, const char *name, const char *part, size_t size, size_t *off)
{
    char full[NF_PARAM_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s.%s", name, part);
    return nf_params_add(P, full, size, off);
}

int nf_conv2d_init(nf_conv2d *L, nf_params *P, const char *name, int cin, int cout, int k, nf_rng *rng)
{
    if (cin < 1 || cout < 1)
        return nf_error(NF_EINVAL, "convolution '%s': channels in=%d, out=%d; expected both >= 1", name, cin, cout);
    if (k < 1 || k > 15 || k % 2 == 0)
        return nf_error(NF_EINVAL, "convolution '%s': kernel size k=%d; expected an odd size in 1..15 ('same' padding)",
                        name, k);
    if (!rng) return nf_error(NF_EINVAL, "convolution '%s': no random number generator to initialise it", name);
    memset(L, 0, sizeof *L);
    L->cin = cin;
    L->cout = cout;
    L->k = k;
    const size_t kc = (size_t)k * k * cin;
    NF_TRY(add_slice(P, name, "weight", (size_t)cout * kc, &L->w));
    NF_TRY(add_slice(P, name, "bias", (size_t)cout, &L->b));
    const double bound = 1.0 / sqrt((double)kc);
    nf_rng_fill_uniform(rng, P->value + L->w, (size_t)cout * kc, -bound, bound);
    nf_rng_fill_uniform(rng, P->value + L->b, (size_t)cout, -bound, bound);
    return NF_OK;
}

void nf_conv2d_zero(nf_conv2d *L, nf_params *P)
{
    memset(P->value + L->w, 0, (size_t)L->cout * L->k * L->k * L->cin * sizeof(nf_real));
    memset(P->value + L->b, 0, (size_t)L->cout * sizeof(nf_real));
}

/* The columns go on the output side when the layer narrows (cout < cin): see the file comment. */
static int output_side(const nf_conv2d *L) { return L->k > 1 && L->cout < L->cin; }

size_t nf_conv2d_workspace(const nf_conv2d *L, int n, int h, int w)
{
    if (L->k == 1 || n <= 0) return 0;
    const size_t kk = (size_t)L->k * L->k;
    if (output_side(L)) return (size_t)n * h * w * kk * L->cout + 2 * kk * L->cout * L->cin;
    return (size_t)n * h * w * kk * L->cin;
}

/* cols[(b*h + i)*w + j, (di*k + dj)*cin + ch] = x[b, i+di-p, j+dj-p, ch], 0 outside the image. */
void nf_conv2d_im2col(nf_real *cols, const nf_real *x, int n, int h, int w, int cin, int k)
{
    const int p = k / 2;
    const size_t kc = (size_t)k * k * cin, run = (size_t)cin * sizeof(nf_real);
    for (int b = 0; b < n; b++) {
        const nf_real *xb = x + (size_t)b * h * w * cin;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                nf_real *row = cols + (((size_t)b * h + i) * w + j) * kc;
                for (int di = 0; di < k; di++) {
                    const int si = i + di - p;
                    if (si < 0 || si >= h) {
                        memset(row + (size_t)di * k * cin, 0, (size_t)k * run);
                        continue;
                    }
                    for (int dj = 0; dj < k; dj++) {
                        const int sj = j + dj - p;
                        nf_real *dst = row + ((size_t)di * k + dj) * cin;
                        if (sj < 0 || sj >= w) memset(dst, 0, run);
                        else memcpy(dst, xb + ((size_t)si * w + sj) * cin, run);
                    }
                }
            }
    }
}

/* The adjoint of im2col: x[b, i+di-p, j+dj-p, ch] += cols[(b*h + i)*w + j, (di*k + dj)*cin + ch]
 * for the source pixels inside the image (the padding's entries have nowhere to go). */
void nf_conv2d_col2im_add(nf_real *x, const nf_real *cols, int n, int h, int w, int cin, int k)
{
    const int p = k / 2;
    const size_t kc = (size_t)k * k * cin;
    for (int b = 0; b < n; b++) {
        nf_real *xb = x + (size_t)b * h * w * cin;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const nf_real *row = cols + (((size_t)b * h + i) * w + j) * kc;
                for (int di = 0; di < k; di++) {
                    const int si = i + di - p;
                    if (si < 0 || si >= h) continue;
                    for (int dj = 0; dj < k; dj++) {
                        const int sj = j + dj - p;
                        if (sj < 0 || sj >= w) continue;
                        const nf_real *src = row + ((size_t)di * k + dj) * cin;
                        nf_real *dst = xb + ((size_t)si * w + sj) * cin;
                        for (int ch = 0; ch < cin; ch++) dst[ch] += src[ch];
                    }
                }
            }
    }
}

/* y[b,i,j, :] += sum over taps t = (di, dj) of Z[b, i+di-p, j+dj-p, t*cout : (t+1)*cout] (sources
 * inside the image): the per-tap products, shifted into place and summed. */
static void taps_gather_add(nf_real *y, const nf_real *Z, int n, int h, int w, int cout, int k)
{
    const int p = k / 2;
    const size_t kco = (size_t)k * k * cout;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                nf_real *yr = y + (((size_t)b * h + i) * w + j) * cout;
                for (int di = 0; di < k; di++) {
                    const int si = i + di - p;
                    if (si < 0 || si >= h) continue;
                    for (int dj = 0; dj < k; dj++) {
                        const int sj = j + dj - p;
                        if (sj < 0 || sj >= w) continue;
                        const nf_real *z = Z + (((size_t)b * h + si) * w + sj) * kco + ((size_t)di * k + dj) * cout;
#pragma omp simd
                        for (int o = 0; o < cout; o++) yr[o] += z[o];
                    }
                }
            }
}

/* The adjoint: dZ[b, i+di-p, j+dj-p, t*cout + o] = dy[b,i,j,o]; entries no output pixel reads are 0. */
static void taps_scatter(nf_real *dZ, const nf_real *dy, int n, int h, int w, int cout, int k)
{
    const int p = k / 2;
    const size_t kco = (size_t)k * k * cout;
    memset(dZ, 0, (size_t)n * h * w * kco * sizeof *dZ);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const nf_real *d = dy + (((size_t)b * h + i) * w + j) * cout;
                for (int di = 0; di < k; di++) {
                    const int si = i + di - p;
                    if (si < 0 || si >= h) continue;
                    for (int dj = 0; dj < k; dj++) {
                        const int sj = j + dj - p;
                        if (sj < 0 || sj >= w) continue;
                        memcpy(dZ + (((size_t)b * h + si) * w + sj) * kco + ((size_t)di * k + dj) * cout, d,
                               (size_t)cout * sizeof *d);
                    }
                }
            }
}

/* Wt (k*k*cout, cin): Wt[t*cout + o, ch] = W[o, t*cin + ch], the filters regrouped by tap. */
static void weight_by_tap(nf_real *Wt, const nf_real *W, int cin, int cout, int kk)
{
    for (int t = 0; t < kk; t++)
        for (int o = 0; o < cout; o++)
            memcpy(Wt + ((size_t)t * cout + o) * cin, W + (size_t)o * kk * cin + (size_t)t * cin,
                   (size_t)cin * sizeof *Wt);
}

/* forward, input side:  y (n*h*w, cout) = cols(x) W^T + 1 bias^T,  cols (n*h*w, k*k*cin);
 * output side:          Z (n*h*w, k*k*cout) = x Wt^T,  y = bias + sum over taps of shifted Z. */
void nf_conv2d_forward(const nf_conv2d *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x, int n,
                       int h, int w)
{
    if (n <= 0 || h <= 0 || w <= 0) return;
    const int rows = n * h * w, cin = L->cin, cout = L->cout, k = L->k, kk = k * k, kc = kk * cin;
    const nf_real *bias = P->value + L->b;
    if (output_side(L)) {
        for (int r = 0; r < rows; r++) { /* a loop, not a memcpy call per row of 2-64 reals */
            nf_real *yr = y + (size_t)r * cout;
#pragma omp simd
            for (int o = 0; o < cout; o++) yr[o] = bias[o];
        }
        nf_real *Z = ws, *Wt = ws + (size_t)rows * kk * cout;
        weight_by_tap(Wt, P->value + L->w, cin, cout, kk);
        nf_gemm(0, 1, rows, kk * cout, cin, 1, x, cin, Wt, cin, 0, Z, kk * cout);
        taps_gather_add(y, Z, n, h, w, cout, k);
        return;
    }
    const nf_real *A = x;
    if (k > 1) {
        nf_conv2d_im2col(ws, x, n, h, w, cin, k);
        A = ws;
    }
    /* the bias goes in as the product stores y (the same numbers as filling y with it first) */
    nf_gemm_bias(0, 1, rows, cout, kc, A, kc, P->value + L->w, kc, bias, y, cout);
}

/* backward, input side, with cols = im2col(x) rebuilt in ws:
 *   dW (cout, k*k*cin) += dy^T cols;   dbias += sum_r dy_r;
 *   dcols = dy W (n*h*w, k*k*cin),  dx += col2im(dcols)   (k = 1: dx += dy W directly).
 * Output side, with dZ = the taps' adjoint scatter of dy (n*h*w, k*k*cout):
 *   dWt = dZ^T x (added into dW regrouped),  dx += dZ Wt. */
void nf_conv2d_backward(const nf_conv2d *L, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dy,
                        const nf_real *x, int n, int h, int w)
{
    if (n <= 0 || h <= 0 || w <= 0) return;
    const int rows = n * h * w, cin = L->cin, cout = L->cout, k = L->k, kk = k * k, kc = kk * cin;
    nf_real *gb = P->grad + L->b;
    nf_add_row_sums(gb, dy, rows, cout);
    if (output_side(L)) {
        nf_real *dZ = ws, *Wt = ws + (size_t)rows * kk * cout, *dWt = Wt + (size_t)kk * cout * cin;
        nf_real *gW = P->grad + L->w;
        taps_scatter(dZ, dy, n, h, w, cout, k);
        nf_gemm(1, 0, kk * cout, cin, rows, 1, dZ, kk * cout, x, cin, 0, dWt, cin);
        for (int t = 0; t < kk; t++)
            for (int o = 0; o < cout; o++) {
                const nf_real *src = dWt + ((size_t)t * cout + o) * cin;
                nf_real *dst = gW + (size_t)o * kc + (size_t)t * cin;
                for (int ch = 0; ch < cin; ch++) dst[ch] += src[ch];
            }
        if (dx) {
            weight_by_tap(Wt, P->value + L->w, cin, cout, kk);
            nf_gemm(0, 0, rows, cin, kk * cout, 1, dZ, kk * cout, Wt, cin, 1, dx, cin);
        }
        return;
    }
    const nf_real *A = x;
    if (k > 1) {
        nf_conv2d_im2col(ws, x, n, h, w, cin, k);
        A = ws;
    }
    nf_gemm(1, 0, cout, kc, rows, 1, dy, cout, A, kc, 1, P->grad + L->w, kc);
    if (!dx) return;
    if (k == 1) {
        nf_gemm(0, 0, rows, kc, cout, 1, dy, cout, P->value + L->w, kc, 1, dx, kc);
        return;
    }
    nf_gemm(0, 0, rows, kc, cout, 1, dy, cout, P->value + L->w, kc, 0, ws, kc);
    nf_conv2d_col2im_add(dx, ws, n, h, w, cin, k);
}
