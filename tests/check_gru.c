/* tests/check_gru.c - the GRU over ragged batches (nn/gru.h).
 *
 * Forward against a scalar double reference written here from torch.nn.GRU's equations, one sequence
 * at a time, reading the parameters by name (both builds; float loosely), and against a worked
 * example whose numbers come from torch.nn.GRU itself (PyTorch 1.13, float64), so the weight layout
 * and gate order are PyTorch's.  Backpropagation through time against fourth-order central finite
 * differences of L = sum(w * h) for every parameter entry, input entry and h0, in every initial-state
 * mode and grouping (tight in the double build, float-sized in the float build), with gradients
 * accumulating onto pre-filled buffers.  Ragged batches: each sequence's states equal its states run
 * alone, changing one sequence changes no other's states, zero-length sequences give their initial
 * state (and their h0 gradient) only.  Results are bit-identical for any thread count.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/params.h"
#include "core/rng.h"
#include "nn/gru.h"
#include "nn/nn_internal.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-12
#define TOL_GRAD 1e-8
#define FD_STEP 1e-4
#define TOL_ALONE 1e-13
#else
#define TOL_FWD 2e-5  /* float gates (nf_act's own exp and tanh), absolute on states in (-1, 1) */
#define TOL_GRAD 4e-3 /* float forward passes differenced with a step of 1e-2 */
#define FD_STEP 1e-2
#define TOL_ALONE 1e-6
#endif

static double relerr(double a, double b, double floor)
{
    double s = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / s;
}

static nf_real *filled(size_t n, double lo, double hi, uint64_t seed)
{
    nf_real *x = malloc((n ? n : 1) * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert(x && r);
    nf_rng_fill_uniform(r, x, n, lo, hi);
    nf_rng_free(r);
    return x;
}

static int64_t *offsets_of(const int *len, int B)
{
    int64_t *off = malloc((size_t)(B + 1) * sizeof *off);
    off[0] = 0;
    for (int b = 0; b < B; b++) off[b + 1] = off[b] + len[b];
    return off;
}

static const nf_real *slice(const nf_params *P, const char *name, const char *part, size_t size)
{
    char full[256];
    snprintf(full, sizeof full, "%s.%s", name, part);
    const nf_param_slice *s = nf_params_find(P, full);
    ck_assert_msg(s != NULL, "no parameter slice %s", full);
    ck_assert_msg(s->size == size, "slice %s has %zu entries, expected %zu", full, s->size, size);
    return P->value + s->offset;
}

static double sig(double v) { return 1 / (1 + exp(-v)); }

/* The states (T + B, H) from the definition: each sequence on its own, h_0 by mode, then
 * r, z, n, h' = (1 - z) n + z h with PyTorch's row blocks [r; z; n] of weight_ih and weight_hh. */
static void ref_gru(const nf_params *P, const char *name, int I, int H, nf_gru_h0 mode, const nf_real *x,
                    const int64_t *off, int B, double *out)
{
    const nf_real *Wi = slice(P, name, "weight_ih", (size_t)3 * H * I), *Wh = slice(P, name, "weight_hh", (size_t)3 * H * H);
    const nf_real *bi = slice(P, name, "bias_ih", (size_t)3 * H), *bh = slice(P, name, "bias_hh", (size_t)3 * H);
    const nf_real *v = mode == NF_GRU_H0_ZERO ? NULL : slice(P, name, "h0", (size_t)H);
    double *h = malloc((size_t)H * sizeof *h), *hn = malloc((size_t)H * sizeof *hn);
    for (int b = 0; b < B; b++) {
        double *o = out + (size_t)(off[b] + b) * H;
        for (int k = 0; k < H; k++) {
            o[k] = v ? v[k] : 0;
            h[k] = mode == NF_GRU_H0_LEARNED ? v[k] : 0;
        }
        for (int64_t t = off[b]; t < off[b + 1]; t++) {
            const nf_real *xt = x + (size_t)t * I;
            for (int k = 0; k < H; k++) {
                double gi[3], gh[3];
                for (int q = 0; q < 3; q++) {
                    const int row = q * H + k;
                    gi[q] = bi[row], gh[q] = bh[row];
                    for (int i = 0; i < I; i++) gi[q] += (double)Wi[row * I + i] * xt[i];
                    for (int j = 0; j < H; j++) gh[q] += (double)Wh[row * H + j] * h[j];
                }
                const double r = sig(gi[0] + gh[0]), z = sig(gi[1] + gh[1]), n = tanh(gi[2] + r * gh[2]);
                hn[k] = (1 - z) * n + z * h[k];
            }
            memcpy(h, hn, (size_t)H * sizeof *h);
            o += H;
            memcpy(o, h, (size_t)H * sizeof *h);
        }
    }
    free(h), free(hn);
}

/* A GRU in its own store, after a 7-entry slice so offsets are not zero, with every parameter (h0
 * included) drawn away from its initial values. */
typedef struct gru_case {
    nf_gru g;
    nf_params *P;
    int I, H, B;
    int64_t *off, T;
    nf_real *x, *h, *w, *ws;
} gru_case;

static void gru_setup(gru_case *c, int I, int H, nf_gru_h0 mode, int group, const int *len, int B, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert_int_eq(nf_params_add(c->P, "before", 7, &(size_t){0}), NF_OK);
    ck_assert_int_eq(nf_gru_init(&c->g, c->P, "gru", I, H, mode, r), NF_OK);
    c->g.group = group;
    nf_rng_fill_uniform(r, c->P->value + 7, c->P->n - 7, -0.83, 0.91);
    nf_rng_free(r);
    c->I = I, c->H = H, c->B = B;
    c->off = offsets_of(len, B);
    c->T = c->off[B];
    c->x = filled((size_t)c->T * I, -1.7, 1.9, seed + 1);
    c->h = malloc((size_t)(c->T + B) * H * sizeof(nf_real));
    c->w = filled((size_t)(c->T + B) * H, -1.2, 1.3, seed + 2);
    size_t wsz = nf_gru_workspace(&c->g, c->T, B);
    /* 8 H T for the steps, 9 H + 3 H^2 for each of up to 8 groups' sums */
    ck_assert_uint_eq(wsz, c->T ? (size_t)8 * H * c->T + 8 * (9 * (size_t)H + 3 * (size_t)H * H) : 0);
    c->ws = wsz ? malloc(wsz * sizeof(nf_real)) : NULL;
}

static void gru_teardown(gru_case *c)
{
    nf_params_free(c->P);
    free(c->off), free(c->x), free(c->h), free(c->w), free(c->ws);
}

static double gru_loss(void *p)
{
    gru_case *c = p;
    nf_gru_forward(&c->g, c->P, c->ws, c->h, c->x, c->off, c->B);
    double s = 0;
    for (size_t i = 0; i < (size_t)(c->T + c->B) * c->H; i++) s += (double)c->w[i] * c->h[i];
    return s;
}

static void check_reference(gru_case *c, const char *what)
{
    double *want = malloc((size_t)(c->T + c->B) * c->H * sizeof *want);
    ref_gru(c->P, "gru", c->I, c->H, c->g.h0_mode, c->x, c->off, c->B, want);
    nf_gru_forward(&c->g, c->P, c->ws, c->h, c->x, c->off, c->B);
    for (size_t i = 0; i < (size_t)(c->T + c->B) * c->H; i++)
        ck_assert_msg(isfinite(c->h[i]) && fabs(c->h[i] - want[i]) < TOL_FWD, "%s: h[%zu] = %.10g, expected %.10g",
                      what, i, (double)c->h[i], want[i]);
    free(want);
}

/* ---------------------------------------------------------------- construction */

START_TEST(test_init)
{
    for (int mode = 0; mode < 3; mode++) {
        nf_params *P = nf_params_alloc();
        nf_rng *r = nf_rng_alloc(5, 0);
        nf_gru g;
        const int I = 3, H = 7;
        ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", I, H, (nf_gru_h0)mode, r), NF_OK);
        ck_assert_uint_eq(P->n, (size_t)3 * H * (I + H + 2) + (mode ? H : 0));
        const char *parts[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
        const size_t sizes[] = {(size_t)3 * H * I, (size_t)3 * H * H, (size_t)3 * H, (size_t)3 * H};
        const double k = 1 / sqrt((double)H);
        for (int p = 0; p < 4; p++) {
            const nf_real *v = slice(P, "enc.gru", parts[p], sizes[p]);
            double lo = 1, hi = -1;
            for (size_t i = 0; i < sizes[p]; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
            ck_assert_msg(lo >= -k && hi <= k && hi - lo > k, "%s in [%g, %g], expected to fill U(-%g, %g)", parts[p],
                          lo, hi, k, k);
        }
        ck_assert_uint_eq(g.w_ih, nf_params_find(P, "enc.gru.weight_ih")->offset);
        ck_assert_uint_eq(g.b_hh, nf_params_find(P, "enc.gru.bias_hh")->offset);
        if (mode) {
            const nf_real *h0 = slice(P, "enc.gru", "h0", (size_t)H);
            for (int j = 0; j < H; j++) ck_assert(h0[j] == 0);
        } else {
            ck_assert(nf_params_find(P, "enc.gru.h0") == NULL);
        }
        ck_assert_uint_eq(nf_gru_step_workspace(&g, 5), (size_t)6 * H * 5);
        ck_assert_uint_eq(nf_gru_workspace(&g, 0, 4), 0);
        nf_params_free(P);
        nf_rng_free(r);
    }
    /* Errors name the layer and what was expected. */
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(5, 0);
    nf_gru g;
    ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", 0, 4, NF_GRU_H0_ZERO, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "enc.gru") && strstr(nf_strerror_last(), "in=0"), "%s",
                  nf_strerror_last());
    ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", 2, -3, NF_GRU_H0_ZERO, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "hidden=-3"), "%s", nf_strerror_last());
    ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", 2, 3, (nf_gru_h0)7, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "initial state"), "%s", nf_strerror_last());
    ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", 2, 3, NF_GRU_H0_ZERO, NULL), NF_EINVAL);
    ck_assert_uint_eq(P->n, 0);
    /* A second layer under the same name is refused by the store. */
    ck_assert_int_eq(nf_gru_init(&g, P, "enc.gru", 2, 3, NF_GRU_H0_ZERO, r), NF_OK);
    ck_assert_int_ne(nf_gru_init(&g, P, "enc.gru", 2, 3, NF_GRU_H0_ZERO, r), NF_OK);
    nf_params_free(P);
    nf_rng_free(r);
}
END_TEST

/* ---------------------------------------------------------------- PyTorch's layout, worked example */

/* I = 1, H = 2, one sequence of two steps from h0 = (0.173, -0.291) (passed to torch as its h_0):
 *     gru = torch.nn.GRU(1, 2).double();  gru.weight_ih_l0 = WI;  gru.weight_hh_l0 = WH;
 *     gru.bias_ih_l0 = BI;  gru.bias_hh_l0 = BH;  out, _ = gru(X.view(2, 1, 1), H0.view(1, 1, 2))
 * gives the two states below (torch 1.13.1, float64). */
static const double WI[6] = {0.412, -0.237, 0.318, 0.155, -0.526, 0.271};
static const double WH[12] = {0.193, -0.348, 0.267, 0.114, -0.419, 0.362, 0.085, -0.233, 0.441, 0.297, -0.172, 0.388};
static const double BI[6] = {0.061, -0.143, 0.207, 0.092, -0.318, 0.154};
static const double BH[6] = {-0.087, 0.235, 0.049, -0.162, 0.273, -0.096};
static const double X2[2] = {1.385, -0.762};
static const double H0[2] = {0.173, -0.291};
static const double TORCH_STATES[4] = {-0.15369187240766302, 0.015279810465163912, -0.0001949335882594494,
                                      -0.04151139035471443};

/* The same by hand: unit k's gates read rows k (r), 2 + k (z) and 4 + k (n) of every weight. */
static void by_hand(double h[2], double x)
{
    const double h0 = h[0], h1 = h[1];
    double out[2];
    for (int k = 0; k < 2; k++) {
        const double r = sig(WI[k] * x + BI[k] + WH[2 * k] * h0 + WH[2 * k + 1] * h1 + BH[k]);
        const double z = sig(WI[2 + k] * x + BI[2 + k] + WH[4 + 2 * k] * h0 + WH[5 + 2 * k] * h1 + BH[2 + k]);
        const double n = tanh(WI[4 + k] * x + BI[4 + k] + r * (WH[8 + 2 * k] * h0 + WH[9 + 2 * k] * h1 + BH[4 + k]));
        out[k] = (1 - z) * n + z * h[k];
    }
    h[0] = out[0], h[1] = out[1];
}

START_TEST(test_pytorch_example)
{
    double hand[4], h[2] = {H0[0], H0[1]};
    by_hand(h, X2[0]);
    hand[0] = h[0], hand[1] = h[1];
    by_hand(h, X2[1]);
    hand[2] = h[0], hand[3] = h[1];
    for (int i = 0; i < 4; i++)
        ck_assert_msg(fabs(hand[i] - TORCH_STATES[i]) < 1e-14, "by hand %.17g, torch %.17g", hand[i], TORCH_STATES[i]);

    for (int mode = 0; mode < 3; mode++) {
        nf_params *P = nf_params_alloc();
        nf_rng *r = nf_rng_alloc(3, 0);
        nf_gru g;
        ck_assert_int_eq(nf_gru_init(&g, P, "gru", 1, 2, (nf_gru_h0)mode, r), NF_OK);
        for (int i = 0; i < 6; i++) P->value[g.w_ih + i] = (nf_real)WI[i];
        for (int i = 0; i < 12; i++) P->value[g.w_hh + i] = (nf_real)WH[i];
        for (int i = 0; i < 6; i++) P->value[g.b_ih + i] = (nf_real)BI[i], P->value[g.b_hh + i] = (nf_real)BH[i];
        if (mode) P->value[g.h0] = (nf_real)H0[0], P->value[g.h0 + 1] = (nf_real)H0[1];
        /* Two sequences: the example, and an empty one. */
        const int64_t off[3] = {0, 2, 2};
        const nf_real x[2] = {(nf_real)X2[0], (nf_real)X2[1]};
        nf_real out[8], ws[32 + 8 * 30]; /* 8 H T for the steps, 9 H + 3 H^2 for each of up to 8 groups' sums */
        ck_assert_uint_eq(nf_gru_workspace(&g, 2, 2), 32 + 8 * 30);
        nf_gru_forward(&g, P, ws, out, x, off, 2);
        double want[8] = {0};
        if (mode == NF_GRU_H0_LEARNED) {
            for (int i = 0; i < 4; i++) want[2 + i] = TORCH_STATES[i];
        } else { /* from zero, by hand */
            double hz[2] = {0, 0};
            by_hand(hz, X2[0]);
            want[2] = hz[0], want[3] = hz[1];
            by_hand(hz, X2[1]);
            want[4] = hz[0], want[5] = hz[1];
        }
        if (mode) /* row 0 of both sequences is the context h0 */
            want[0] = want[6] = H0[0], want[1] = want[7] = H0[1];
        for (int i = 0; i < 8; i++)
            ck_assert_msg(fabs(out[i] - want[i]) < 1e-6, "mode %d: h[%d] = %.9g, expected %.9g", mode, i,
                          (double)out[i], want[i]);
        nf_params_free(P);
        nf_rng_free(r);
    }
}
END_TEST

/* ---------------------------------------------------------------- forward */

static const int LENS[] = {5, 0, 9, 1, 3, 0, 7, 2, 4, 6, 1, 8};
#define NLENS ((int)(sizeof LENS / sizeof LENS[0]))

START_TEST(test_forward_reference)
{
    const int groups[] = {0, 1, 2, 5};
    for (int mode = 0; mode < 3; mode++)
        for (int gi = 0; gi < 4; gi++) {
            gru_case c;
            gru_setup(&c, 3, 6, (nf_gru_h0)mode, groups[gi], LENS, NLENS, 40 + mode);
            char what[64];
            snprintf(what, sizeof what, "mode %d, group %d", mode, groups[gi]);
            check_reference(&c, what);
            gru_teardown(&c);
        }
    /* One input (x W_ih^T formed row by row in the steps). */
    for (int mode = 0; mode < 3; mode++) {
        gru_case c;
        gru_setup(&c, 1, 6, (nf_gru_h0)mode, 2, LENS, NLENS, 45 + mode);
        check_reference(&c, "one input");
        gru_teardown(&c);
    }
    /* Long sequences, wider layers, the default groups. */
    int len[70];
    nf_rng *r = nf_rng_alloc(77, 0);
    for (int b = 0; b < 70; b++) len[b] = (int)nf_rng_index(r, 60);
    nf_rng_free(r);
    gru_case c;
    gru_setup(&c, 4, 24, NF_GRU_H0_LEARNED, 0, len, 70, 50);
    check_reference(&c, "70 sequences, H = 24");
    gru_teardown(&c);
}
END_TEST

/* Each sequence of a batch gets the states it gets alone; changing one changes no other's states. */
START_TEST(test_batch_is_separate)
{
    for (int mode = 0; mode < 3; mode++) {
        gru_case c;
        gru_setup(&c, 2, 5, (nf_gru_h0)mode, 3, LENS, NLENS, 60 + mode);
        nf_gru_forward(&c.g, c.P, c.ws, c.h, c.x, c.off, c.B);
        const int H = c.H;
        for (int b = 0; b < c.B; b++) {
            const int64_t one[2] = {0, LENS[b]};
            nf_real *h1 = malloc((size_t)(LENS[b] + 1) * H * sizeof *h1);
            nf_real *ws1 = malloc((nf_gru_workspace(&c.g, LENS[b], 1) + 1) * sizeof *ws1);
            nf_gru_forward(&c.g, c.P, ws1, h1, c.x + (size_t)c.off[b] * c.I, one, 1);
            const nf_real *hb = c.h + (size_t)(c.off[b] + b) * H;
            for (int i = 0; i < (LENS[b] + 1) * H; i++)
                ck_assert_msg(fabs(h1[i] - hb[i]) <= TOL_ALONE, "mode %d, sequence %d: batch %.10g, alone %.10g", mode, b,
                              (double)hb[i], (double)h1[i]);
            free(h1), free(ws1);
        }
        /* Change every input of sequence 6: only its rows move, the others are bit-identical. */
        nf_real *before = malloc((size_t)(c.T + c.B) * H * sizeof *before);
        memcpy(before, c.h, (size_t)(c.T + c.B) * H * sizeof *before);
        for (int64_t t = c.off[6]; t < c.off[7]; t++)
            for (int i = 0; i < c.I; i++) c.x[t * c.I + i] += (nf_real)0.637;
        nf_gru_forward(&c.g, c.P, c.ws, c.h, c.x, c.off, c.B);
        for (int b = 0; b < c.B; b++)
            for (int64_t k = c.off[b] + b; k <= c.off[b + 1] + b; k++)
                for (int j = 0; j < H; j++) {
                    const size_t i = (size_t)k * H + j;
                    if (b != 6) ck_assert_msg(c.h[i] == before[i], "sequence %d moved when sequence 6 changed", b);
                    else if (k > c.off[b] + b) ck_assert(c.h[i] != before[i]);
                }
        free(before);
        gru_teardown(&c);
    }
}
END_TEST

/* No events at all, and empty sequences among others: their one row is the context h0, and their
 * gradient reaches h0 (and nothing else). */
START_TEST(test_zero_length)
{
    const int zeros[4] = {0, 0, 0, 0}, some[5] = {0, 3, 0, 0, 2};
    for (int mode = 0; mode < 3; mode++)
        for (int v = 0; v < 2; v++) {
            gru_case c;
            gru_setup(&c, 2, 4, (nf_gru_h0)mode, 1, v ? some : zeros, v ? 5 : 4, 80 + mode);
            if (!v) ck_assert(c.ws == NULL && c.T == 0);
            check_reference(&c, v ? "some empty" : "all empty");
            nf_params_zero_grad(c.P);
            nf_gru_backward(&c.g, c.P, c.ws, NULL, c.w, c.x, c.off, c.B);
            if (!v) {
                for (size_t i = 0; i < c.P->n; i++) {
                    double want = 0;
                    if (mode && i >= c.g.h0 && i < c.g.h0 + (size_t)c.H)
                        for (int b = 0; b < c.B; b++) want += c.w[b * c.H + (i - c.g.h0)];
                    ck_assert_msg(fabs(c.P->grad[i] - want) < 1e-6, "grad[%zu] = %g, expected %g", i,
                                  (double)c.P->grad[i], want);
                }
            }
            ck_assert(nf_params_all_finite(c.P));
            gru_teardown(&c);
        }
}
END_TEST

/* nf_gru_step from nf_gru_start reproduces a sequence's rows, in place too. */
START_TEST(test_step)
{
    for (int mode = 0; mode < 3; mode++) {
        const int len[3] = {6, 4, 6};
        gru_case c;
        gru_setup(&c, 3, 5, (nf_gru_h0)mode, 0, len, 3, 90 + mode);
        nf_gru_forward(&c.g, c.P, c.ws, c.h, c.x, c.off, c.B);
        const int H = c.H;
        nf_real ctx[5], st[10], xs[6], ws[60];
        nf_gru_start(&c.g, c.P, ctx, st);
        nf_gru_start(&c.g, c.P, NULL, st + H);
        for (int j = 0; j < H; j++) {
            ck_assert(ctx[j] == c.h[j]);
            ck_assert(st[j] == (mode == NF_GRU_H0_LEARNED ? ctx[j] : 0));
        }
        /* sequences 0 and 2 (both 6 steps) side by side, two rows at a time, h_new = h */
        for (int s = 0; s < 6; s++) {
            for (int i = 0; i < 3; i++) xs[i] = c.x[(c.off[0] + s) * 3 + i], xs[3 + i] = c.x[(c.off[2] + s) * 3 + i];
            nf_gru_step(&c.g, c.P, ws, st, st, xs, 2);
            for (int j = 0; j < H; j++) {
                ck_assert(fabs(st[j] - c.h[(size_t)(c.off[0] + s + 1) * H + j]) < TOL_ALONE);
                ck_assert(fabs(st[H + j] - c.h[(size_t)(c.off[2] + 2 + s + 1) * H + j]) < TOL_ALONE);
            }
        }
        gru_teardown(&c);
    }
}
END_TEST

/* Far-out inputs saturate the gates without overflow: states stay in [-1, 1] and match the
 * reference; a NaN input gives NaN states from its step on (in its own sequence only). */
START_TEST(test_extreme)
{
    const int len[3] = {4, 3, 2};
    gru_case c;
    gru_setup(&c, 2, 5, NF_GRU_H0_LEARNED, 0, len, 3, 140);
    const double big[8] = {1e30, -1e30, 95.25, -95.25, 44.5, -44.5, 9.75, -9.75};
    for (int i = 0; i < 8; i++) c.x[i] = (nf_real)big[i];
    for (int i = 0; i < 2 * 5; i++) c.P->value[c.g.w_ih + i] *= 60; /* some pre-activations far beyond +-100 */
    check_reference(&c, "far-out inputs");
    for (size_t i = 0; i < (size_t)(c.T + c.B) * c.H; i++) ck_assert(c.h[i] >= -1 && c.h[i] <= 1);
    c.x[(c.off[1] + 1) * c.I] = (nf_real)NAN;
    nf_gru_forward(&c.g, c.P, c.ws, c.h, c.x, c.off, c.B);
    for (int b = 0; b < 3; b++)
        for (int64_t k = c.off[b] + b; k <= c.off[b + 1] + b; k++) {
            const int poisoned = b == 1 && k >= c.off[1] + 1 + 2; /* the states after the NaN step */
            for (int j = 0; j < c.H; j++)
                ck_assert_msg(poisoned ? isnan(c.h[k * c.H + j]) : isfinite(c.h[k * c.H + j]),
                              "sequence %d, row %lld: %g", b, (long long)k, (double)c.h[k * c.H + j]);
        }
    gru_teardown(&c);
}
END_TEST

/* ---------------------------------------------------------------- backward */

/* Fourth-order central difference of f at *t. */
typedef double (*loss_fn)(void *);
static double finite_diff(loss_fn f, void *c, nf_real *t)
{
    const double h = FD_STEP, s = *t, off[4] = {2, 1, -1, -2};
    double v[4];
    for (int k = 0; k < 4; k++) {
        *t = (nf_real)(s + off[k] * h);
        v[k] = f(c);
    }
    *t = (nf_real)s;
    return (-v[0] + 8 * v[1] - 8 * v[2] + v[3]) / (12 * h);
}

/* Every parameter entry and input entry, through forward and backward, in each mode and grouping,
 * with three inputs and with one (whose input product and weight gradient the steps form). */
START_TEST(test_gradients)
{
    const int len[6] = {3, 0, 5, 1, 4, 2};
    const int groups[] = {0, 1, 2};
    for (int I = 1; I <= 3; I += 2) {
        for (int mode = 0; mode < 3; mode++)
            for (int gi = 0; gi < 3; gi++) {
                gru_case c;
                gru_setup(&c, I, 4, (nf_gru_h0)mode, groups[gi], len, 6, 120 + 3 * mode + gi + 10 * I);
                nf_params *P = c.P;
                const size_t nx = (size_t)c.T * c.I;
                /* Pre-filled buffers: backward adds. */
                for (size_t i = 0; i < P->n; i++) P->grad[i] = (nf_real)0.375;
                nf_real *dx = malloc(nx * sizeof *dx);
                for (size_t i = 0; i < nx; i++) dx[i] = (nf_real)-0.625;
                gru_loss(&c);
                nf_gru_backward(&c.g, P, c.ws, dx, c.w, c.x, c.off, c.B);
                double *an = malloc((P->n + nx) * sizeof *an);
                for (size_t i = 0; i < P->n; i++) an[i] = P->grad[i] - 0.375;
                for (size_t i = 0; i < nx; i++) an[P->n + i] = dx[i] + 0.625;
                for (size_t i = 0; i < 7; i++) ck_assert(an[i] == 0); /* the other slice */
                for (size_t i = 7; i < P->n + nx; i++) {
                    nf_real *t = i < P->n ? &P->value[i] : &c.x[i - P->n];
                    const double fd = finite_diff(gru_loss, &c, t), e = relerr(an[i], fd, 0.05);
                    ck_assert_msg(e < TOL_GRAD, "mode %d, group %d, %s[%zu]: analytic %.12g, finite difference %.12g", mode,
                                  groups[gi], i < P->n ? "theta" : "x", i < P->n ? i : i - P->n, an[i], fd);
                }
                /* the gradient is not trivially zero anywhere it should not be */
                for (size_t i = 7; i < P->n; i++) ck_assert_msg(an[i] != 0, "theta[%zu] has a zero gradient", i);
                /* dx = NULL leaves the parameter gradients as they were computed */
                for (size_t i = 0; i < P->n; i++) P->grad[i] = 0;
                gru_loss(&c);
                nf_gru_backward(&c.g, P, c.ws, NULL, c.w, c.x, c.off, c.B);
                for (size_t i = 7; i < P->n; i++) ck_assert(fabs(P->grad[i] - an[i]) < 1e-5 * fmax(1, fabs(an[i])));
                free(dx), free(an);
                gru_teardown(&c);
            }
    }
}
END_TEST

/* A batch large enough for threads: states and gradients on 1, 2 and 3 threads bit-identical with
 * core/blas.c's own kernel (the groups are cut by the batch, and that kernel's sums do not depend on
 * the split), within rounding with OpenBLAS (whose split of the final products may change the sums). */
START_TEST(test_threads)
{
    enum { B = 100 };
    int len[B];
    nf_rng *r = nf_rng_alloc(17, 0);
    for (int b = 0; b < B; b++) len[b] = (int)nf_rng_index(r, 50);
    nf_rng_free(r);
    gru_case c;
    gru_setup(&c, 3, 32, NF_GRU_H0_LEARNED, 0, len, B, 130);
    const size_t nh = (size_t)(c.T + B) * c.H, nx = (size_t)c.T * c.I, np = c.P->n;
    nf_real *h1 = malloc(nh * sizeof *h1), *g1 = malloc(np * sizeof *g1), *dx = malloc(nx * sizeof *dx),
            *dx1 = malloc(nx * sizeof *dx1);
    const int threads[3] = {1, 2, 3}, exact = nf_blas_get_backend() == NF_BLAS_NATIVE;
    const double tol = 10 * TOL_FWD;
    for (int k = 0; k < 3; k++) {
        nf_blas_set_threads(threads[k]);
        ck_assert_msg(nf_nn_threads(B, 6.0 * c.T * c.H * c.H) == threads[k], "the recurrence is not shared");
        nf_params_zero_grad(c.P);
        memset(dx, 0, nx * sizeof *dx);
        nf_gru_forward(&c.g, c.P, c.ws, c.h, c.x, c.off, B);
        nf_gru_backward(&c.g, c.P, c.ws, dx, c.w, c.x, c.off, B);
        if (k == 0) {
            memcpy(h1, c.h, nh * sizeof *h1), memcpy(g1, c.P->grad, np * sizeof *g1), memcpy(dx1, dx, nx * sizeof *dx);
            continue;
        }
        for (size_t i = 0; i < nh; i++)
            ck_assert_msg(exact ? h1[i] == c.h[i] : relerr(h1[i], c.h[i], 1) < tol, "h[%zu] differs on %d threads", i,
                          threads[k]);
        for (size_t i = 0; i < np; i++)
            ck_assert_msg(exact ? g1[i] == c.P->grad[i] : relerr(g1[i], c.P->grad[i], 1) < tol,
                          "grad[%zu] differs on %d threads: %.10g vs %.10g", i, threads[k], (double)g1[i],
                          (double)c.P->grad[i]);
        for (size_t i = 0; i < nx; i++)
            ck_assert_msg(exact ? dx1[i] == dx[i] : relerr(dx1[i], dx[i], 1) < tol, "dx[%zu] differs on %d threads",
                          i, threads[k]);
    }
    nf_blas_set_threads(0);
    check_reference(&c, "100 sequences");
    free(h1), free(g1), free(dx), free(dx1);
    gru_teardown(&c);
}
END_TEST

static Suite *gru_suite(void)
{
    Suite *s = suite_create("gru");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_init);
    tcase_add_test(t, test_pytorch_example);
    tcase_add_test(t, test_forward_reference);
    tcase_add_test(t, test_batch_is_separate);
    tcase_add_test(t, test_zero_length);
    tcase_add_test(t, test_step);
    tcase_add_test(t, test_extreme);
    tcase_add_test(t, test_gradients);
    tcase_add_test(t, test_threads);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(gru_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
