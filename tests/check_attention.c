/* tests/check_attention.c - causal multi-head self-attention (nn/attention.h).
 *
 * Forward against a naive double-precision implementation written here from the definitions (the
 * causal mask, 1/sqrt(dh), the RMS QK norm with its gains), reading the parameters by name, in both
 * builds (loosely in float), at T = 5 and at T = 150 (three row blocks of the blocked products).
 * Backward against fourth-order central finite differences of L = sum(w * y) for every parameter
 * entry and input entry, with and without QK norm, in the double build; gradients must accumulate
 * (buffers are pre-filled and the fill subtracted).  Decoding step by step with the key/value cache
 * equals the rows of the full forward, also after rewinding.  Results are bit-identical on one and
 * two threads.  Bad sizes and positions are refused.  The block-causal window (groups of G tokens, each
 * seeing its own and K earlier ones) the same way: the definition with its mask, finite differences,
 * decoding, and a token that moves no output outside the rows that see it.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/params.h"
#include "core/rng.h"
#include "nn/attention.h"
#include "nn/nn_internal.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-12
#define TOL_STEP 1e-12
#else
#define TOL_FWD 2e-5
#define TOL_STEP 2e-5
#endif
#define TOL_GRAD 1e-7
#define FD_STEP 1e-4

typedef struct acase {
    nf_params *P;
    nf_attention A;
    int n, T, d, H, qk;
    nf_real *x, *y, *ws, *sc;
} acase;

/* The window the next acase_setup sets (group 0: none). */
static int win_group = 0, win_back = -1;

/* The first key token t sees under that window. */
static int win_lo(int t) { return win_group > 0 && win_back >= 0 ? (t / win_group - win_back) * win_group : 0; }

static void acase_setup(acase *c, int n, int T, int d, int H, int qk, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->n = n, c->T = T, c->d = d, c->H = H, c->qk = qk;
    c->P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert(c->P && r);
    ck_assert_int_eq(nf_attention_init(&c->A, c->P, "attn", d, H, qk, r), NF_OK);
    if (win_group > 0) ck_assert_int_eq(nf_attention_set_window(&c->A, win_group, win_back), NF_OK);
    /* unremarkable weights: the initial ones plus noise, gains away from 1 */
    nf_real *noise = malloc(c->P->n * sizeof *noise);
    nf_test_fill_uniform(noise, c->P->n, -0.35, 0.35, seed + 1);
    for (size_t i = 0; i < c->P->n; i++) c->P->value[i] += noise[i];
    free(noise);
    nf_rng_free(r);
    const size_t N = (size_t)n * T;
    c->x = malloc(N * d * sizeof *c->x);
    c->y = malloc(N * d * sizeof *c->y);
    nf_test_fill_uniform(c->x, N * d, -1.7, 1.9, seed + 2);
    c->ws = malloc(nf_attention_workspace(&c->A, n, T) * sizeof *c->ws);
    c->sc = malloc(nf_attention_scratch(&c->A, n, T) * sizeof *c->sc);
    ck_assert(c->x && c->y && c->ws && c->sc);
}

static void acase_teardown(acase *c)
{
    free(c->x), free(c->y), free(c->ws), free(c->sc);
    nf_params_free(c->P);
}

static const nf_real *slice(const nf_params *P, const char *name, size_t size)
{
    const nf_param_slice *s = nf_params_find(P, name);
    ck_assert_msg(s != NULL, "no parameter slice %s", name);
    ck_assert_msg(s->size == size, "slice %s has %zu entries, expected %zu", name, s->size, size);
    return P->value + s->offset;
}

/* The definition, in double, one sequence and head at a time. */
static void ref_attention(const acase *c, double *y)
{
    const int n = c->n, T = c->T, d = c->d, H = c->H, dh = d / H;
    const nf_real *Wqkv = slice(c->P, "attn.qkv.weight", (size_t)3 * d * d), *bqkv = slice(c->P, "attn.qkv.bias", 3 * (size_t)d);
    const nf_real *Wo = slice(c->P, "attn.out.weight", (size_t)d * d), *bo = slice(c->P, "attn.out.bias", (size_t)d);
    const nf_real *gq = c->qk ? slice(c->P, "attn.q_gain", (size_t)dh) : NULL;
    const nf_real *gk = c->qk ? slice(c->P, "attn.k_gain", (size_t)dh) : NULL;
    double *qkv = malloc((size_t)T * 3 * d * sizeof *qkv), *o = malloc((size_t)T * d * sizeof *o);
    double *s = malloc((size_t)T * sizeof *s);
    for (int b = 0; b < n; b++) {
        const nf_real *xb = c->x + (size_t)b * T * d;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < 3 * d; j++) {
                double a = bqkv[j];
                for (int i = 0; i < d; i++) a += (double)Wqkv[(size_t)j * d + i] * xb[(size_t)t * d + i];
                qkv[(size_t)t * 3 * d + j] = a;
            }
        if (c->qk)
            for (int t = 0; t < T; t++)
                for (int part = 0; part < 2; part++)
                    for (int h = 0; h < H; h++) {
                        double *u = qkv + (size_t)t * 3 * d + part * d + h * dh, ms = 0;
                        for (int i = 0; i < dh; i++) ms += u[i] * u[i] / dh;
                        for (int i = 0; i < dh; i++) u[i] *= (part ? gk[i] : gq[i]) / sqrt(ms + 1e-6);
                    }
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                double m = -INFINITY, z = 0;
                const int lo = win_lo(t) > 0 ? win_lo(t) : 0;
                for (int u = lo; u <= t; u++) {
                    double a = 0;
                    for (int i = 0; i < dh; i++)
                        a += qkv[(size_t)t * 3 * d + h * dh + i] * qkv[(size_t)u * 3 * d + d + h * dh + i];
                    s[u] = a / sqrt((double)dh);
                    m = fmax(m, s[u]);
                }
                for (int u = lo; u <= t; u++) z += (s[u] = exp(s[u] - m));
                for (int i = 0; i < dh; i++) {
                    double a = 0;
                    for (int u = lo; u <= t; u++) a += s[u] / z * qkv[(size_t)u * 3 * d + 2 * d + h * dh + i];
                    o[(size_t)t * d + h * dh + i] = a;
                }
            }
        for (int t = 0; t < T; t++)
            for (int j = 0; j < d; j++) {
                double a = bo[j];
                for (int i = 0; i < d; i++) a += (double)Wo[(size_t)j * d + i] * o[(size_t)t * d + i];
                y[((size_t)b * T + t) * d + j] = a;
            }
    }
    free(qkv), free(o), free(s);
}

static void check_reference(int n, int T, int d, int H, int qk)
{
    acase c;
    acase_setup(&c, n, T, d, H, qk, 4100 + (uint64_t)T + qk);
    const size_t ny = (size_t)n * T * d;
    double *ref = malloc(ny * sizeof *ref);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, n, T);
    ref_attention(&c, ref);
    double worst = 0;
    for (size_t i = 0; i < ny; i++) worst = fmax(worst, nf_test_relerr(c.y[i], ref[i], 1));
    ck_assert_msg(worst < TOL_FWD, "attention n=%d T=%d d=%d H=%d qk=%d: forward differs from the definition by %g",
                  n, T, d, H, qk, worst);
    free(ref);
    acase_teardown(&c);
}

START_TEST(test_forward_reference)
{
    check_reference(2, 5, 8, 2, NF_QK_NONE);
    check_reference(2, 5, 8, 2, NF_QK_RMS);
    check_reference(3, 1, 6, 3, NF_QK_RMS);
    check_reference(2, 150, 8, 2, NF_QK_NONE);
    check_reference(1, 130, 12, 3, NF_QK_RMS);
    check_reference(2, 37, 64, 4, NF_QK_RMS); /* dh 16: sixteen-row QK norm kernels, and a remainder */
    check_reference(1, 21, 64, 2, NF_QK_RMS); /* dh 32 */
}
END_TEST

/* The QK norm sixteen rows at a time (nn/rms_avx512.c, where the build and CPU have it) gives the
 * bits of the row-at-a-time reference, forward (also in place) and backward, for dh 16, 32 and 24
 * (not a multiple of 16: the reference only), over 37 rows (two groups of 16 and a remainder). */
START_TEST(test_qk_norm_rows)
{
    const int rows = 37, ld = 80;
    const int dhs[] = {16, 32, 24};
    const size_t nm = (size_t)rows * ld;
    nf_real *u = malloc(nm * sizeof *u), *dy = malloc(nm * sizeof *dy), *g = malloc(64 * sizeof *g);
    nf_real *o0 = malloc(nm * sizeof *o0), *o1 = malloc(nm * sizeof *o1), *ip = malloc(nm * sizeof *ip);
    nf_real r0[2 * 37], r1[2 * 37];
    ck_assert(u && dy && g && o0 && o1 && ip);
    nf_test_fill_uniform(u, nm, -2.5, 2.1, 901);
    nf_test_fill_uniform(dy, nm, -1.2, 1.4, 902);
    nf_test_fill_uniform(g, 64, 0.4, 1.7, 903);
    for (int k = 0; k < 3; k++) {
        const int dh = dhs[k];
        memset(o0, 0, nm * sizeof *o0), memset(o1, 0, nm * sizeof *o1);
        nf_attention_rms_rows(o0, ld, r0, 2, u, ld, g, rows, dh, 0);
        nf_attention_rms_rows(o1, ld, r1, 2, u, ld, g, rows, dh, 1);
        ck_assert_msg(memcmp(o0, o1, nm * sizeof *o0) == 0, "dh %d: forward rows differ from the reference", dh);
        for (int r = 0; r < rows; r++)
            ck_assert_msg(r0[2 * r] == r1[2 * r] && r0[2 * r] > 0, "dh %d row %d: 1/rms %.9g, reference %.9g", dh, r,
                          (double)r1[2 * r], (double)r0[2 * r]);
        /* one row against its definition */
        double ss = 0;
        for (int i = 0; i < dh; i++) ss += (double)u[5 * ld + i] * u[5 * ld + i];
        const double rr = 1 / sqrt(ss / dh + 1e-6);
        ck_assert_msg(nf_test_relerr(r0[10], rr, 1) < 1e-6, "dh %d: 1/rms %.9g, definition %.9g", dh, (double)r0[10], rr);
        for (int i = 0; i < dh; i++)
            ck_assert_msg(nf_test_relerr(o0[5 * ld + i], g[i] * u[5 * ld + i] * rr, 1) < 1e-5, "dh %d: out[%d]", dh, i);
        memcpy(ip, u, nm * sizeof *ip);
        nf_attention_rms_rows(ip, ld, NULL, 0, ip, ld, g, rows, dh, 1);
        for (int r = 0; r < rows; r++)
            ck_assert_msg(memcmp(ip + r * ld, o0 + r * ld, (size_t)dh * sizeof *ip) == 0, "dh %d: in place, row %d", dh, r);
        nf_real dg0[32], dg1[32];
        for (int i = 0; i < 32; i++) dg0[i] = dg1[i] = (nf_real)(0.1 * i - 1);
        nf_attention_rms_rows_backward(o0, ld, dy, ld, u, ld, r0, 2, g, rows, dh, 0, dg0);
        nf_attention_rms_rows_backward(o1, ld, dy, ld, u, ld, r0, 2, g, rows, dh, 1, dg1);
        ck_assert_msg(memcmp(o0, o1, nm * sizeof *o0) == 0, "dh %d: backward rows differ from the reference", dh);
        ck_assert_msg(memcmp(dg0, dg1, sizeof dg0) == 0, "dh %d: the gains' sums differ from the reference", dh);
        double want = 0.1 * 3 - 1; /* dg[3] against its definition */
        for (int r = 0; r < rows; r++) want += (double)dy[r * ld + 3] * u[r * ld + 3] * r0[2 * r];
        ck_assert_msg(nf_test_relerr(dg0[3], want, 1) < 1e-5, "dh %d: gain sum %.9g, definition %.9g", dh,
                      (double)dg0[3], want);
    }
    free(u), free(dy), free(g), free(o0), free(o1), free(ip);
}
END_TEST

#ifdef NF_DOUBLE /* finite differences need the double build */
/* L = sum(w * y) */
static double loss(acase *c, const nf_real *w)
{
    nf_attention_forward(&c->A, c->P, c->ws, c->sc, c->y, c->x, c->n, c->T);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->n * c->T * c->d; i++) s += (double)w[i] * c->y[i];
    return s;
}

/* Fourth-order central difference of L in the entry v. */
static double fd(acase *c, const nf_real *w, nf_real *v)
{
    const nf_real v0 = *v;
    const double h = FD_STEP;
    double f[4];
    const double off[4] = {-2, -1, 1, 2};
    for (int k = 0; k < 4; k++) {
        *v = (nf_real)(v0 + off[k] * h);
        f[k] = loss(c, w);
    }
    *v = v0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
}

static void check_gradients(int n, int T, int d, int H, int qk)
{
    acase c;
    acase_setup(&c, n, T, d, H, qk, 5200 + (uint64_t)T + qk);
    const size_t nx = (size_t)n * T * d;
    nf_real *w = malloc(nx * sizeof *w), *dx = malloc(nx * sizeof *dx);
    nf_test_fill_uniform(w, nx, -1.3, 1.1, 77);
    for (size_t i = 0; i < nx; i++) dx[i] = (nf_real)0.37;
    for (size_t i = 0; i < c.P->n; i++) c.P->grad[i] = (nf_real)-0.21;
    /* The difference quotient itself is only good to about eps S / h, S = sum |w y| the scale of
     * L's rounding (a sum of n T d terms, each from a forward pass, in an order that depends on the
     * compiler's vectorisation), divided by the step (the stencil's weights sum to 18/12).  A fixed
     * relative tolerance alone asked 1e-10 of a 1e-3 gradient at T = 70, about this noise, and
     * clang's double build failed by 1.4e-10. */
    loss(&c, w);
    double S = 0;
    for (size_t i = 0; i < nx; i++) S += fabs((double)w[i] * c.y[i]);
    const double noise = 1.5 * 4 * DBL_EPSILON * S / FD_STEP;
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, n, T);
    nf_attention_backward(&c.A, c.P, c.ws, c.sc, dx, w, c.x, n, T);
    for (size_t i = 0; i < c.P->n; i++) {
        const double g = c.P->grad[i] + 0.21, num = fd(&c, w, &c.P->value[i]);
        ck_assert_msg(fabs(g - num) <= TOL_GRAD * fmax(fabs(num), 1e-3) + noise,
                      "qk=%d T=%d: parameter %zu: backward %.12g, FD %.12g (+- %.2g)", qk, T, i, g, num, noise);
    }
    for (size_t i = 0; i < nx; i++) {
        const double g = dx[i] - 0.37, num = fd(&c, w, &c.x[i]);
        ck_assert_msg(fabs(g - num) <= TOL_GRAD * fmax(fabs(num), 1e-3) + noise,
                      "qk=%d T=%d: input %zu: backward %.12g, FD %.12g (+- %.2g)", qk, T, i, g, num, noise);
    }
    /* dx = NULL gives the same parameter gradients */
    nf_real *g1 = malloc(c.P->n * sizeof *g1);
    memcpy(g1, c.P->grad, c.P->n * sizeof *g1);
    nf_params_zero_grad(c.P);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, n, T);
    nf_attention_backward(&c.A, c.P, c.ws, c.sc, NULL, w, c.x, n, T);
    for (size_t i = 0; i < c.P->n; i++)
        ck_assert_msg(fabs(c.P->grad[i] - (g1[i] + 0.21)) < 1e-12, "parameter %zu differs without dx", i);
    free(w), free(dx), free(g1);
    acase_teardown(&c);
}
#endif

START_TEST(test_gradients)
{
#ifdef NF_DOUBLE
    check_gradients(2, 5, 8, 2, NF_QK_NONE);
    check_gradients(2, 5, 8, 2, NF_QK_RMS);
    check_gradients(1, 70, 4, 2, NF_QK_RMS); /* two row blocks */
    check_gradients(1, 18, 32, 2, NF_QK_RMS); /* dh 16 */
#endif
}
END_TEST

static void check_decode(int n, int T, int d, int H, int qk)
{
    acase c;
    acase_setup(&c, n, T, d, H, qk, 6300 + (uint64_t)T + qk);
    const int Tmax = T + 3;
    nf_real *kv = malloc(nf_attention_kv_size(&c.A, n, Tmax) * sizeof *kv);
    nf_real *ws = malloc(nf_attention_step_workspace(&c.A, n, Tmax) * sizeof *ws);
    nf_real *xt = malloc((size_t)n * d * sizeof *xt), *yt = malloc((size_t)n * d * sizeof *yt);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, n, T);
    const int rewind = T / 2;
    for (int pass = 0; pass < 2; pass++) /* pass 1 rewinds to T / 2 after a first full decode */
        for (int t = pass ? rewind : 0; t < T; t++) {
            for (int b = 0; b < n; b++) memcpy(xt + (size_t)b * d, c.x + ((size_t)b * T + t) * d, (size_t)d * sizeof *xt);
            ck_assert_int_eq(nf_attention_step(&c.A, c.P, ws, kv, Tmax, yt, xt, t, n), NF_OK);
            for (int b = 0; b < n; b++)
                for (int j = 0; j < d; j++) {
                    const double full = c.y[((size_t)b * T + t) * d + j], step = yt[(size_t)b * d + j];
                    ck_assert_msg(nf_test_relerr(full, step, 1) < TOL_STEP,
                                  "qk=%d: step t=%d sequence %d column %d: %.10g, full forward %.10g", qk, t, b, j,
                                  step, full);
                }
        }
    free(kv), free(ws), free(xt), free(yt);
    acase_teardown(&c);
}

START_TEST(test_decode)
{
    check_decode(2, 5, 8, 2, NF_QK_NONE);
    check_decode(2, 5, 8, 2, NF_QK_RMS);
    check_decode(3, 70, 12, 4, NF_QK_RMS);
    check_decode(17, 24, 64, 4, NF_QK_RMS); /* dh 16: the step normalises its 17 sequences 16 at a time */
}
END_TEST

/* Changing token t changes no output before t, and changes output t. */
START_TEST(test_causal)
{
    acase c;
    acase_setup(&c, 2, 9, 8, 2, NF_QK_RMS, 7400);
    const size_t ny = (size_t)c.n * c.T * c.d;
    nf_real *y0 = malloc(ny * sizeof *y0);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, y0, c.x, c.n, c.T);
    for (int t = 0; t < c.T; t++) {
        nf_real *v = &c.x[((size_t)1 * c.T + t) * c.d + 3], v0 = *v;
        *v += (nf_real)0.731;
        nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, c.n, c.T);
        *v = v0;
        for (int b = 0; b < c.n; b++)
            for (int u = 0; u < c.T; u++) {
                double diff = 0;
                for (int j = 0; j < c.d; j++)
                    diff = fmax(diff, fabs(c.y[((size_t)b * c.T + u) * c.d + j] - y0[((size_t)b * c.T + u) * c.d + j]));
                if (b == 0 || u < t)
                    ck_assert_msg(diff == 0, "changing token %d of sequence 1 moved token %d of sequence %d by %g", t, u, b, diff);
                else if (u == t)
                    ck_assert_msg(diff > 1e-4, "changing token %d did not move its own output", t);
            }
    }
    free(y0);
    acase_teardown(&c);
}
END_TEST

/* The window: the forward against the masked definition (windows that start inside and across row
 * blocks of 64, a sliding window of single tokens, a window of its own group only), gradients
 * (double build), decoding, and which outputs a token moves: exactly the rows u >= t with
 * lo(u) <= t. */
static void set_window(int group, int back) { win_group = group, win_back = back; }

START_TEST(test_window)
{
    const int cases[][4] = {{150, 10, 2, 0}, {130, 13, 0, 1}, {9, 1, 2, 1}, {70, 7, 3, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        set_window(cases[k][1], cases[k][2]);
        check_reference(2, cases[k][0], 8, 2, cases[k][3] ? NF_QK_RMS : NF_QK_NONE);
        check_decode(2, cases[k][0], 8, 2, cases[k][3] ? NF_QK_RMS : NF_QK_NONE);
    }
#ifdef NF_DOUBLE
    set_window(7, 2);
    check_gradients(1, 70, 4, 2, NF_QK_RMS);
    set_window(2, 0);
    check_gradients(2, 5, 8, 2, NF_QK_NONE);
#endif
    set_window(3, 1);
    acase c;
    acase_setup(&c, 1, 12, 8, 2, NF_QK_RMS, 7500);
    nf_real *y0 = malloc((size_t)c.T * c.d * sizeof *y0);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, y0, c.x, 1, c.T);
    for (int t = 0; t < c.T; t++) {
        nf_real *v = &c.x[(size_t)t * c.d + 3], v0 = *v;
        *v += (nf_real)0.731;
        nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, 1, c.T);
        *v = v0;
        for (int u = 0; u < c.T; u++) {
            double diff = 0;
            for (int j = 0; j < c.d; j++) diff = fmax(diff, fabs(c.y[(size_t)u * c.d + j] - y0[(size_t)u * c.d + j]));
            if (u >= t && win_lo(u) <= t)
                ck_assert_msg(diff > 1e-6, "token %d did not move output %d, which sees it", t, u);
            else
                ck_assert_msg(diff == 0, "token %d moved output %d (outside its window) by %g", t, u, diff);
        }
    }
    free(y0);
    acase_teardown(&c);
    ck_assert_int_eq(nf_attention_set_window(&c.A, 0, 1), NF_EINVAL);
    set_window(0, -1);
}
END_TEST

/* One thread and two threads (pairs split over the pool) give the same bits (with nf's own kernel). */
START_TEST(test_threads)
{
    acase c;
    acase_setup(&c, 4, 128, 64, 4, NF_QK_RMS, 8500);
    const size_t ny = (size_t)c.n * c.T * c.d;
    nf_real *y1 = malloc(ny * sizeof *y1), *dx1 = calloc(ny, sizeof *dx1), *dx2 = calloc(ny, sizeof *dx2);
    nf_real *w = malloc(ny * sizeof *w), *g1 = malloc(c.P->n * sizeof *g1);
    nf_test_fill_uniform(w, ny, -1, 1, 31);
    nf_blas_set_threads(1);
    nf_params_zero_grad(c.P);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, y1, c.x, c.n, c.T);
    nf_attention_backward(&c.A, c.P, c.ws, c.sc, dx1, w, c.x, c.n, c.T);
    memcpy(g1, c.P->grad, c.P->n * sizeof *g1);
    nf_blas_set_threads(2);
    nf_params_zero_grad(c.P);
    nf_attention_forward(&c.A, c.P, c.ws, c.sc, c.y, c.x, c.n, c.T);
    nf_attention_backward(&c.A, c.P, c.ws, c.sc, dx2, w, c.x, c.n, c.T);
    nf_blas_set_threads(0);
    /* OpenBLAS's threaded products (no AVX-512 here) may round the projections' sums differently */
    const int exact = nf_blas_get_backend() == NF_BLAS_NATIVE;
    const double tol = exact ? 0 : (sizeof(nf_real) == sizeof(double) ? 1e-11 : 1e-4);
    for (size_t i = 0; i < ny; i++) {
        ck_assert_msg(nf_test_relerr(y1[i], c.y[i], 1) <= tol, "y[%zu] differs on 2 threads", i);
        ck_assert_msg(nf_test_relerr(dx1[i], dx2[i], 1) <= tol, "dx[%zu] differs on 2 threads", i);
    }
    for (size_t i = 0; i < c.P->n; i++)
        ck_assert_msg(nf_test_relerr(g1[i], c.P->grad[i], 1) <= tol, "grad[%zu] differs on 2 threads", i);
    free(y1), free(dx1), free(dx2), free(w), free(g1);
    acase_teardown(&c);
}
END_TEST

START_TEST(test_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(3, 0);
    nf_attention A;
    ck_assert_int_eq(nf_attention_init(&A, P, "bad", 10, 3, NF_QK_NONE, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "bad") && strstr(nf_strerror_last(), "heads=3"), "message: %s",
                  nf_strerror_last());
    ck_assert_int_eq(nf_attention_init(&A, P, "bad", 8, 2, 7, r), NF_EINVAL);
    ck_assert_int_eq(nf_attention_init(&A, P, "ok", 8, 2, NF_QK_RMS, r), NF_OK);
    nf_real kv[2 * 8 * 3], x[8] = {0.3, -0.2, 0.5, 0.1, 0.9, -0.4, 0.25, 0.6}, y[8];
    ck_assert_uint_eq(nf_attention_kv_size(&A, 1, 3), sizeof kv / sizeof kv[0]);
    nf_real *ws = malloc(nf_attention_step_workspace(&A, 1, 3) * sizeof *ws);
    ck_assert_int_eq(nf_attention_step(&A, P, ws, kv, 3, y, x, 3, 1), NF_EINVAL);
    ck_assert_int_eq(nf_attention_step(&A, P, ws, kv, 3, y, x, -1, 1), NF_EINVAL);
    ck_assert_int_eq(nf_attention_step(&A, P, ws, kv, 3, y, x, 0, 1), NF_OK);
    free(ws);
    nf_rng_free(r);
    nf_params_free(P);
}
END_TEST

/* The softmax of a row and its backward on nn/attention_avx512.c's kernels (where the build and CPU
 * have them) give the bits of the portable code: lengths 1..70, padded to whole vectors or not,
 * scores spread over [-100, 30] (exp's clamp at -87.3 included). */
START_TEST(test_softmax_rows)
{
    enum { MAXN = 96 };
    nf_real s0[MAXN], s1[MAXN], p[MAXN], d0[MAXN], d1[MAXN], st0[2], st1[2];
    for (int len = 1; len <= 70; len++)
        for (int pad = 0; pad < 2; pad++) {
            const int padded = pad ? (len + 15) / 16 * 16 : len;
            nf_test_fill_uniform(s0, MAXN, len % 3 ? -4.0 : -100.0, len % 5 ? 4.0 : 30.0, 1000 + (uint64_t)len);
            memcpy(s1, s0, sizeof s0);
            nf_attention_softmax_row(s0, len, padded, st0, 0);
            nf_attention_softmax_row(s1, len, padded, st1, 1);
            ck_assert_msg(memcmp(s0, s1, sizeof s0) == 0 && st0[0] == st1[0] && st0[1] == st1[1],
                          "softmax len %d padded %d: the kernel differs from the portable code", len, padded);
            double sum = 0;
            for (int j = 0; j < padded; j++) sum += s0[j];
            for (int j = len; j < padded; j++) ck_assert(s0[j] == 0);
            ck_assert_msg(fabs(sum - 1) < 1e-5, "softmax len %d: the probabilities sum to %.9g", len, sum);
            memcpy(p, s0, sizeof p);
            nf_test_fill_uniform(d0, MAXN, -2.0, 2.0, 2000 + (uint64_t)len);
            memcpy(d1, d0, sizeof d0);
            nf_attention_softmax_grad_row(p, d0, padded, (nf_real)0.25, 0);
            nf_attention_softmax_grad_row(p, d1, padded, (nf_real)0.25, 1);
            ck_assert_msg(memcmp(d0, d1, sizeof d0) == 0, "softmax backward n %d: the kernel differs", padded);
        }
}
END_TEST

/* Short pairs (dh 16, T 16..64 a multiple of 16, no window) take nn/attention_avx512.c's score and
 * output rows where the CPU has AVX-512; a window that hides nothing (each token sees all before it)
 * takes the products.  Both must give the same bits, forward and backward. */
START_TEST(test_short_pairs)
{
    const int Ts[] = {16, 64};
    for (int k = 0; k < 2; k++) {
        const int n = 3, T = Ts[k], d = 64, H = 4;
        const size_t nx = (size_t)n * T * d;
        acase a, b;
        acase_setup(&a, n, T, d, H, NF_QK_RMS, 8100 + (uint64_t)T);
        set_window(1, T);
        acase_setup(&b, n, T, d, H, NF_QK_RMS, 8100 + (uint64_t)T);
        set_window(0, -1);
        nf_attention_forward(&a.A, a.P, a.ws, a.sc, a.y, a.x, n, T);
        nf_attention_forward(&b.A, b.P, b.ws, b.sc, b.y, b.x, n, T);
        ck_assert_msg(memcmp(a.y, b.y, nx * sizeof *a.y) == 0, "T %d: the short pairs' forward differs", T);
        nf_real *w = malloc(nx * sizeof *w), *dxa = calloc(nx, sizeof *dxa), *dxb = calloc(nx, sizeof *dxb);
        nf_test_fill_uniform(w, nx, -1.3, 1.1, 81);
        nf_params_zero_grad(a.P), nf_params_zero_grad(b.P);
        nf_attention_backward(&a.A, a.P, a.ws, a.sc, dxa, w, a.x, n, T);
        nf_attention_backward(&b.A, b.P, b.ws, b.sc, dxb, w, b.x, n, T);
        ck_assert_msg(memcmp(dxa, dxb, nx * sizeof *dxa) == 0, "T %d: the short pairs' input gradient differs", T);
        ck_assert_msg(memcmp(a.P->grad, b.P->grad, a.P->n * sizeof *a.P->grad) == 0,
                      "T %d: the short pairs' parameter gradients differ", T);
        free(w), free(dxa), free(dxb);
        acase_teardown(&a), acase_teardown(&b);
    }
    check_reference(2, 64, 64, 4, NF_QK_RMS);
    check_decode(3, 32, 32, 2, NF_QK_RMS);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_forward_reference);
    tcase_add_test(t, test_qk_norm_rows);
    tcase_add_test(t, test_softmax_rows);
    tcase_add_test(t, test_short_pairs);
    tcase_add_test(t, test_gradients);
    tcase_add_test(t, test_decode);
    tcase_add_test(t, test_causal);
    tcase_add_test(t, test_threads);
    tcase_add_test(t, test_window);
    tcase_add_test(t, test_errors);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(attention_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
