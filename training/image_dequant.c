/* training/image_dequant.c - the variational dequantiser q(u | x) (training/image_dequant.h for the
 * formulas). */
#include "training/image_dequant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLAMP 3.0
#define LOG_2PI 1.83787706640934548356

int nf_image_dequant_init(nf_image_dequant *q, nf_params *P, int h, int w, int c, int layers, int hidden, nf_rng *rng)
{
    memset(q, 0, sizeof *q);
    if (h < 1 || w < 1 || c < 1)
        return nf_error(NF_EINVAL, "dequantiser: image shape %dx%dx%d; expected sides >= 1", h, w, c);
    if (layers < 1 || layers > NF_DEQUANT_MAX_LAYERS)
        return nf_error(NF_EINVAL, "dequantiser: %d layers; expected 1..%d", layers, NF_DEQUANT_MAX_LAYERS);
    q->h = h, q->w = w, q->c = c, q->D = h * w * c, q->layers = layers;
    for (int k = 0; k < layers; k++) {
        char name[64];
        snprintf(name, sizeof name, "dequant.c%d", k);
        nf_convnet_config cfg = {.in = 2 * c, .ctx = 0, .hidden = hidden, .out = 2 * c, .k = 3, .zero_init_output = 1};
        NF_TRY(nf_convnet_init(&q->net[k], P, name, &cfg, rng));
    }
    return NF_OK;
}

void nf_image_dequant_free(nf_image_dequant *q)
{
    if (!q) return;
    nf_real **p[] = {&q->a, &q->in, &q->out, &q->ws, &q->g, &q->g2, &q->dout, &q->din};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
    q->cap = 0;
}

static int reserve(nf_image_dequant *q, int n)
{
    if (n <= q->cap) return NF_OK;
    nf_image_dequant_free(q);
    const size_t K = (size_t)q->layers, nd = (size_t)n * q->D, px2 = (size_t)n * q->h * q->w * 2 * q->c;
    size_t ws = 0;
    for (int k = 0; k < q->layers; k++) {
        size_t s = nf_convnet_workspace(&q->net[k], n, q->h, q->w);
        if (s > ws) ws = s;
    }
    q->net_ws = ws;
    q->a = malloc((K + 1) * nd * sizeof *q->a);
    q->in = malloc(K * px2 * sizeof *q->in);
    q->out = malloc(K * px2 * sizeof *q->out);
    q->ws = malloc(K * ws * sizeof *q->ws);
    q->g = malloc(nd * sizeof *q->g);
    q->g2 = malloc(nd * sizeof *q->g2);
    q->dout = malloc(px2 * sizeof *q->dout);
    q->din = malloc(px2 * sizeof *q->din);
    if (!q->a || !q->in || !q->out || !q->ws || !q->g || !q->g2 || !q->dout || !q->din) {
        nf_image_dequant_free(q);
        return nf_error(NF_ENOMEM, "out of memory for the dequantiser's buffers of %d images", n);
    }
    q->cap = n;
    return NF_OK;
}

/* Coupling k transforms pixel (i, j) (every pixel for k = 0, the checkerboard with (i + j + k) odd
 * after); the others condition it (none for k = 0). */
static int transformed(int k, int i, int j) { return k == 0 || ((i + j + k) & 1); }

/* s = 3 tanh(r / 3) and ds/dr = 1 - (s / 3)^2. */
static double log_scale(double r, double *ds_dr)
{
    const double s = CLAMP * tanh(r / CLAMP);
    if (ds_dr) *ds_dr = 1 - (s / CLAMP) * (s / CLAMP);
    return s;
}

double nf_log_sigmoid_deriv(double v)
{
    const double a = fabs(v);
    return -a - 2 * log1p(exp(-a));
}

/* The conditioner's input (n*h*w, 2c): a at the conditioning pixels of coupling k (0 elsewhere),
 * then x0. */
static void gather(const nf_image_dequant *q, int k, nf_real *in, const nf_real *a, const nf_real *x0, int n)
{
    const int h = q->h, w = q->w, c = q->c, D = q->D;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                nf_real *dst = in + (((size_t)b * h + i) * w + j) * 2 * c;
                const size_t e = (size_t)b * D + ((size_t)i * w + j) * c;
                if (transformed(k, i, j)) memset(dst, 0, (size_t)c * sizeof *dst);
                else memcpy(dst, a + e, (size_t)c * sizeof *dst);
                memcpy(dst + c, x0 + e, (size_t)c * sizeof *dst);
            }
}

/* Coupling k on the cached a_k: a_{k+1} = a_k exp(s) + t at transformed entries, a_k elsewhere;
 * logq_b -= sum_p s_p. */
static void coupling_forward(nf_image_dequant *q, const nf_params *P, int k, nf_real *logq, const nf_real *x0, int n)
{
    const int h = q->h, w = q->w, c = q->c, D = q->D;
    const size_t nd = (size_t)n * D, px2 = (size_t)n * h * w * 2 * c;
    const nf_real *a = q->a + k * nd;
    nf_real *a1 = q->a + (k + 1) * nd, *in = q->in + k * px2, *out = q->out + k * px2;
    gather(q, k, in, a, x0, n);
    nf_convnet_forward(&q->net[k], P, q->ws + k * q->net_ws, out, in, NULL, n, h, w);
    for (int b = 0; b < n; b++) {
        double ld = 0;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const size_t e = (size_t)b * D + ((size_t)i * w + j) * c;
                const nf_real *o = out + (((size_t)b * h + i) * w + j) * 2 * c;
                const int t = transformed(k, i, j);
                for (int ch = 0; ch < c; ch++) {
                    if (!t) {
                        a1[e + ch] = a[e + ch];
                        continue;
                    }
                    const double s = log_scale(o[2 * ch], NULL);
                    a1[e + ch] = (nf_real)(a[e + ch] * exp(s) + o[2 * ch + 1]);
                    ld += s;
                }
            }
        logq[b] = (nf_real)(logq[b] - ld);
    }
}

/* logq = log N(eps) - sum over couplings of their log-scales; v = the last state. */
int nf_image_dequant_forward(nf_image_dequant *q, const nf_params *P, nf_real *v, nf_real *logq, const nf_real *eps,
                             const nf_real *x0, int n)
{
    NF_TRY(reserve(q, n));
    const int D = q->D;
    const size_t nd = (size_t)n * D;
    memcpy(q->a, eps, nd * sizeof *q->a);
    for (int b = 0; b < n; b++) {
        double e2 = 0;
        for (int d = 0; d < D; d++) e2 += (double)eps[(size_t)b * D + d] * eps[(size_t)b * D + d];
        logq[b] = (nf_real)(-0.5 * e2 - 0.5 * D * LOG_2PI);
    }
    for (int k = 0; k < q->layers; k++) coupling_forward(q, P, k, logq, x0, n);
    memcpy(v, q->a + (size_t)q->layers * nd, nd * sizeof *v);
    for (size_t m = 0; m < nd; m++)
        if (!isfinite(v[m])) return nf_error(NF_ENONFINITE, "dequantiser: value %zu of image %zu is %g", m % D, m / D, (double)v[m]);
    return NF_OK;
}

/* Coupling k backward, g = q->g = dL/da_{k+1}, w_b = dL/d(sum s) = -dL/dlogq_b:
 *   dt = g, ds = g a_k exp(s) + w_b, dr = ds (1 - (s/3)^2) into the net's parameters;
 *   q->g2 = dL/da_k = g exp(s) at transformed entries, g + (the net's input gradient, first c
 *   channels) at the others - not needed for k = 0 (eps is not a parameter). */
static void coupling_backward(nf_image_dequant *q, nf_params *P, int k, const nf_real *dlogq, int n)
{
    const int h = q->h, w = q->w, c = q->c, D = q->D;
    const size_t nd = (size_t)n * D, px2 = (size_t)n * h * w * 2 * c;
    const nf_real *a = q->a + k * nd, *out = q->out + k * px2, *in = q->in + k * px2;
    memset(q->dout, 0, px2 * sizeof *q->dout);
    for (int b = 0; b < n; b++) {
        const double wb = -(double)dlogq[b];
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const size_t e = (size_t)b * D + ((size_t)i * w + j) * c, r = ((size_t)b * h + i) * w + j;
                const int t = transformed(k, i, j);
                for (int ch = 0; ch < c; ch++) {
                    const double g = q->g[e + ch];
                    if (!t) {
                        q->g2[e + ch] = (nf_real)g;
                        continue;
                    }
                    double dsr;
                    const double s = log_scale(out[r * 2 * c + 2 * ch], &dsr), es = exp(s);
                    q->dout[r * 2 * c + 2 * ch + 1] = (nf_real)g;
                    q->dout[r * 2 * c + 2 * ch] = (nf_real)((g * a[e + ch] * es + wb) * dsr);
                    q->g2[e + ch] = (nf_real)(g * es);
                }
            }
    }
    nf_real *ws = q->ws + k * q->net_ws;
    if (k == 0) {
        nf_convnet_backward(&q->net[k], P, ws, NULL, NULL, q->dout, in, NULL, n, h, w);
        return;
    }
    memset(q->din, 0, px2 * sizeof *q->din);
    nf_convnet_backward(&q->net[k], P, ws, q->din, NULL, q->dout, in, NULL, n, h, w);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                if (transformed(k, i, j)) continue;
                const size_t e = (size_t)b * D + ((size_t)i * w + j) * c, r = ((size_t)b * h + i) * w + j;
                for (int ch = 0; ch < c; ch++) q->g2[e + ch] += q->din[r * 2 * c + ch];
            }
}

/* The couplings last to first from g = dL/dv. */
int nf_image_dequant_backward(nf_image_dequant *q, nf_params *P, const nf_real *dv, const nf_real *dlogq, int n)
{
    if (n > q->cap) return nf_error(NF_EINVAL, "dequantiser backward of %d images after a forward of fewer", n);
    memcpy(q->g, dv, (size_t)n * q->D * sizeof *q->g);
    for (int k = q->layers - 1; k >= 0; k--) {
        coupling_backward(q, P, k, dlogq, n);
        nf_real *tmp = q->g;
        q->g = q->g2;
        q->g2 = tmp;
    }
    return NF_OK;
}
