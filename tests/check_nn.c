/* tests/check_nn.c - the neural layers: activations, linear (masked, weight-normalised), layer norm,
 * plain and residual MLPs, MADE and residual MADE.
 *
 * Forwards are compared with a naive double-precision implementation written here from the
 * definitions (both builds; loosely in float).  Backwards are compared with fourth-order central
 * finite differences of L = sum(w * y) in the double build, for every parameter entry, input and
 * context entry (gradients must accumulate: buffers are pre-filled and the fill subtracted).  MADE
 * masks are checked by perturbing each input and watching which outputs move.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-11
#define TOL_ACT 1e-13
#else
#define TOL_FWD 3e-4
#define TOL_ACT 1e-5 /* the float build's own exp, tanh and Phi: errors of a few 1e-7 (Phi 2e-6) */
#endif
#define TOL_GRAD 1e-6

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

/* ---------------------------------------------------------------- naive double references */

static double ref_act(nf_activation a, double slope, double x)
{
    switch (a) {
    case NF_ACT_RELU: return x > 0 ? x : 0;
    case NF_ACT_LEAKY_RELU: return x > 0 ? x : slope * x;
    case NF_ACT_ELU: return x > 0 ? x : exp(x) - 1;
    case NF_ACT_SELU: return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (exp(x) - 1));
    case NF_ACT_TANH: return tanh(x);
    case NF_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case NF_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case NF_ACT_SILU: return x / (1 + exp(-x));
    default: return x;
    }
}

/* f'(x), written from the definitions independently of nn/activation.c. */
static double ref_act_grad(nf_activation a, double slope, double x)
{
    const double s = 1 / (1 + exp(-x));
    switch (a) {
    case NF_ACT_RELU: return x > 0;
    case NF_ACT_LEAKY_RELU: return x > 0 ? 1 : slope;
    case NF_ACT_ELU: return x > 0 ? 1 : exp(x);
    case NF_ACT_SELU: return 1.0507009873554805 * (x > 0 ? 1 : 1.6732632423543772 * exp(x));
    case NF_ACT_TANH: return 1 - tanh(x) * tanh(x);
    case NF_ACT_SIGMOID: return s * (1 - s);
    case NF_ACT_GELU: return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * 3.14159265358979323846);
    case NF_ACT_SILU: return s + x * s * (1 - s);
    default: return 1;
    }
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

/* out (n, nout) = in (n, nin) W^T + b, W = g V / |V| with weight norm. */
static void ref_linear(const nf_params *P, const char *name, int wn, const double *in, int nin, double *out,
                       int nout, int n)
{
    const nf_real *W = slice(P, name, "weight", (size_t)nin * nout), *b = slice(P, name, "bias", (size_t)nout);
    const nf_real *g = wn ? slice(P, name, "gain", (size_t)nout) : NULL;
    for (int j = 0; j < nout; j++) {
        double scale = 1;
        if (wn) {
            double s = 0;
            for (int i = 0; i < nin; i++) s += (double)W[j * nin + i] * W[j * nin + i];
            scale = s > 0 ? g[j] / sqrt(s) : 0;
        }
        for (int r = 0; r < n; r++) {
            double s = b[j];
            for (int i = 0; i < nin; i++) s += scale * W[j * nin + i] * in[r * nin + i];
            out[r * nout + j] = s;
        }
    }
}

static void ref_layernorm(const nf_params *P, const char *name, double *v, int n, int H)
{
    const nf_real *gamma = slice(P, name, "gamma", (size_t)H), *beta = slice(P, name, "beta", (size_t)H);
    for (int r = 0; r < n; r++) {
        double mean = 0, var = 0;
        for (int i = 0; i < H; i++) mean += v[r * H + i] / H;
        for (int i = 0; i < H; i++) var += (v[r * H + i] - mean) * (v[r * H + i] - mean) / H;
        for (int i = 0; i < H; i++) v[r * H + i] = (v[r * H + i] - mean) / sqrt(var + 1e-5) * gamma[i] + beta[i];
    }
}

static void ref_acts(const nf_mlp_config *c, double *v, size_t k)
{
    for (size_t i = 0; i < k; i++) v[i] = ref_act(c->act, c->leaky_slope ? c->leaky_slope : 0.01, v[i]);
}

/* [a (n, na) | b (n, nb)] */
static double *cat(const double *a, int na, const nf_real *b, int nb, int n)
{
    double *o = malloc((size_t)n * (na + nb) * sizeof *o);
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < na; i++) o[r * (na + nb) + i] = a[r * na + i];
        for (int i = 0; i < nb; i++) o[r * (na + nb) + na + i] = b[r * nb + i];
    }
    return o;
}

/* The network from its definition in nn/nn.h, reading the parameters by name. */
static void ref_mlp(const nf_mlp_config *c, const nf_params *P, const char *name, const nf_real *x,
                    const nf_real *ctx, int n, double *y)
{
    const int D = c->in, C = c->ctx, H = c->hidden, L = c->layers, wn = c->weight_norm;
    const int out_ctx = c->made && (c->residual || L > 0) ? C : 0;
    char sub[128];
    double *xd = malloc((size_t)n * (D ? D : 1) * sizeof *xd);
    for (int i = 0; i < n * D; i++) xd[i] = x[i];
    double *h = cat(xd, D, ctx, C, n), *a = malloc((size_t)n * (H ? H : 1) * sizeof *a);
    int width = D + C;
    if (!c->residual) {
        for (int l = 0; l < L; l++) {
            snprintf(sub, sizeof sub, "%s.fc%d", name, l);
            ref_linear(P, sub, wn, h, width, a, H, n);
            if (c->layer_norm) {
                snprintf(sub, sizeof sub, "%s.ln%d", name, l);
                ref_layernorm(P, sub, a, n, H);
            }
            ref_acts(c, a, (size_t)n * H);
            double *t = h;
            h = a, a = t, width = H;
            a = realloc(a, (size_t)n * H * sizeof *a);
        }
    } else {
        double *t = malloc((size_t)n * H * sizeof *t);
        snprintf(sub, sizeof sub, "%s.in", name);
        ref_linear(P, sub, wn, h, width, a, H, n); /* a: the residual stream */
        for (int b = 0; b < L; b++) {
            double *u = malloc((size_t)n * H * sizeof *u);
            memcpy(u, a, (size_t)n * H * sizeof *u);
            snprintf(sub, sizeof sub, "%s.block%d.ln0", name, b);
            if (c->layer_norm) ref_layernorm(P, sub, u, n, H);
            ref_acts(c, u, (size_t)n * H);
            snprintf(sub, sizeof sub, "%s.block%d.fc0", name, b);
            ref_linear(P, sub, wn, u, H, t, H, n);
            snprintf(sub, sizeof sub, "%s.block%d.ln1", name, b);
            if (c->layer_norm) ref_layernorm(P, sub, t, n, H);
            ref_acts(c, t, (size_t)n * H);
            snprintf(sub, sizeof sub, "%s.block%d.fc1", name, b);
            ref_linear(P, sub, wn, t, H, u, H, n);
            for (int i = 0; i < n * H; i++) a[i] += u[i];
            free(u);
        }
        ref_acts(c, a, (size_t)n * H);
        free(h);
        h = a, a = t, width = H;
    }
    double *last = out_ctx ? cat(h, width, ctx, out_ctx, n) : h;
    snprintf(sub, sizeof sub, "%s.out", name);
    ref_linear(P, sub, wn, last, width + out_ctx, y, c->out, n);
    if (last != h) free(last);
    free(h);
    free(a);
    free(xd);
}

/* ---------------------------------------------------------------- activations */

START_TEST(test_activation_names)
{
    const char *names[] = {"relu", "leaky-relu", "elu", "selu", "tanh", "sigmoid", "gelu", "silu", "identity"};
    for (int i = 0; i < 9; i++) {
        nf_activation a;
        ck_assert_int_eq(nf_activation_parse(names[i], &a), NF_OK);
        ck_assert_int_eq((int)a, i);
        ck_assert_str_eq(nf_activation_name(a), names[i]);
    }
    nf_activation a;
    ck_assert_int_eq(nf_activation_parse("relu6", &a), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "relu6") && strstr(nf_strerror_last(), "gelu"),
                  "message should name the input and the choices: %s", nf_strerror_last());
}
END_TEST

START_TEST(test_activation_values)
{
    /* Known values pin down the reference itself. */
    ck_assert(fabs(ref_act(NF_ACT_GELU, 0, 1.0) - 0.8413447460685429) < 1e-15);
    ck_assert(fabs(ref_act(NF_ACT_SELU, 0, -1.0) - (-1.1113307378125628)) < 1e-15);
    const int n = 41;
    nf_real *x = filled((size_t)n, -3.7, 3.7, 11), *y = malloc(n * sizeof *y);
    x[0] = (nf_real)-60.25; /* far tails: no overflow or NaN */
    x[1] = (nf_real)60.25;
    x[2] = (nf_real)-101.5;
    x[3] = (nf_real)101.5;
    nf_real *dy = filled((size_t)n, -1.3, 1.6, 13), *dx = malloc(n * sizeof *dx);
    for (int a = 0; a <= NF_ACT_IDENTITY; a++)
        for (int pass = 0; pass < 2; pass++) {
            double slope = pass ? 0.173 : 0.01;
            if (pass) nf_act_forward_ex((nf_activation)a, slope, y, x, (size_t)n);
            else nf_act_forward((nf_activation)a, y, x, (size_t)n);
            for (int i = 0; i < n; i++) {
                double want = ref_act((nf_activation)a, slope, x[i]);
                ck_assert_msg(isfinite(y[i]) && relerr(y[i], want, 1e-3) < TOL_ACT, "%s(%g) = %g, expected %g",
                              nf_activation_name((nf_activation)a), (double)x[i], (double)y[i], want);
            }
            /* backward: dx += dy f'(x) */
            for (int i = 0; i < n; i++) dx[i] = (nf_real)0.61;
            if (pass) nf_act_backward_ex((nf_activation)a, slope, dx, dy, x, y, (size_t)n, 1);
            else nf_act_backward((nf_activation)a, dx, dy, x, y, (size_t)n);
            for (int i = 0; i < n; i++) {
                double want = 0.61 + dy[i] * ref_act_grad((nf_activation)a, slope, x[i]);
                ck_assert_msg(isfinite(dx[i]) && relerr(dx[i], want, 1e-3) < TOL_ACT,
                              "%s'(%g): dx = %g, expected %g", nf_activation_name((nf_activation)a), (double)x[i],
                              (double)dx[i], want);
            }
        }
    free(dy), free(dx);
    /* In place and in the OpenMP path (more than 32768 entries). */
    const size_t big = 40000;
    nf_real *xb = filled(big, -2.9, 2.9, 12), *yb = malloc(big * sizeof *yb);
    nf_act_forward_ex(NF_ACT_SILU, 0.01, yb, xb, big);
    for (size_t i = 0; i < big; i += 997) ck_assert(relerr(yb[i], ref_act(NF_ACT_SILU, 0, xb[i]), 1e-3) < TOL_ACT);
    memcpy(yb, xb, big * sizeof *yb);
    nf_act_forward(NF_ACT_TANH, xb, xb, big);
    for (size_t i = 0; i < big; i += 997) ck_assert(relerr(xb[i], tanh(yb[i]), 1e-3) < TOL_ACT);
    free(x), free(y), free(xb), free(yb);
}
END_TEST

/* GELU on a dense grid of [-12, 12]: the fused forward-and-derivative pass (what the transformer's
 * MLP runs) gives the same bits as the forward and backward passes, and both are within a few 1e-7
 * of libm's erfc (the float build's Phi and density share one exp: nn/activation.c). */
START_TEST(test_gelu_fused_and_accurate)
{
    const size_t n = 8001;
    nf_real *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g);
    nf_real *one = malloc(n * sizeof *one), *y2 = malloc(n * sizeof *y2), *g2 = malloc(n * sizeof *g2);
    for (size_t i = 0; i < n; i++) x[i] = (nf_real)(-12.0 + 24.0 * (double)i / (double)(n - 1)), one[i] = 1;
    nf_act_forward(NF_ACT_GELU, y, x, n);
    nf_act_backward_ex(NF_ACT_GELU, 0.01, g, one, x, y, n, 0);
    memcpy(g2, x, n * sizeof *g2);
    nf_act_gelu_forward_grad(y2, g2, n);
    double worst_y = 0, worst_g = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(y2[i] == y[i] && g2[i] == g[i], "x = %.9g: fused (%.9g, %.9g) against two passes (%.9g, %.9g)",
                      (double)x[i], (double)y2[i], (double)g2[i], (double)y[i], (double)g[i]);
        const double v = x[i];
        worst_y = fmax(worst_y, fabs(y[i] - ref_act(NF_ACT_GELU, 0, v)));
        worst_g = fmax(worst_g, fabs(g[i] - ref_act_grad(NF_ACT_GELU, 0, v)));
    }
#ifdef NF_DOUBLE
    const double tol_y = 1e-14, tol_g = 1e-14;
#else
    const double tol_y = 2e-6, tol_g = 5e-7; /* GELU = x Phi: Phi's 1e-7 times |x| up to 12 */
#endif
    ck_assert_msg(worst_y < tol_y && worst_g < tol_g, "GELU off by %g, GELU' by %g", worst_y, worst_g);
    free(x), free(y), free(g), free(one), free(y2), free(g2);
}
END_TEST

#ifdef NF_DOUBLE
/* Fourth-order central difference of f at *t. */
typedef double (*loss_fn)(void *);
static double finite_diff(loss_fn f, void *c, nf_real *t)
{
    const double h = 1e-4, s = *t, off[4] = {2, 1, -1, -2};
    double v[4];
    for (int k = 0; k < 4; k++) {
        *t = (nf_real)(s + off[k] * h);
        v[k] = f(c);
    }
    *t = (nf_real)s;
    return (-v[0] + 8 * v[1] - 8 * v[2] + v[3]) / (12 * h);
}

/* Compare analytic[idx] with finite differences over theta[idx], idx = 0..count-1 (every entry). */
static void check_fd(const char *what, loss_fn f, void *c, nf_real *theta, const double *analytic, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        double fd = finite_diff(f, c, &theta[i]);
        ck_assert_msg(relerr(analytic[i], fd, 1e-3) < TOL_GRAD, "%s[%zu]: analytic %.12g, finite difference %.12g",
                      what, i, analytic[i], fd);
    }
}

typedef struct act_case {
    nf_activation a;
    double slope;
    nf_real *x, *y, *w;
    int n;
} act_case;

static double act_loss(void *p)
{
    act_case *c = p;
    nf_act_forward_ex(c->a, c->slope, c->y, c->x, (size_t)c->n);
    double s = 0;
    for (int i = 0; i < c->n; i++) s += c->w[i] * c->y[i];
    return s;
}

START_TEST(test_activation_gradients)
{
    const int n = 60;
    for (int a = 0; a <= NF_ACT_IDENTITY; a++) {
        act_case c = {(nf_activation)a, 0.137, filled((size_t)n, -2.6, 2.6, 21), malloc(n * sizeof(nf_real)),
                      filled((size_t)n, -1.3, 1.7, 22), n};
        for (int i = 0; i < n; i++) /* keep away from the kinks of relu, leaky relu, elu and selu */
            if (fabs(c.x[i]) < 0.05) c.x[i] = (nf_real)0.3127;
        nf_real *dx = malloc(n * sizeof *dx), *dx2 = malloc(n * sizeof *dx2);
        double *an = malloc(n * sizeof *an);
        act_loss(&c);
        for (int i = 0; i < n; i++) dx[i] = (nf_real)0.731, dx2[i] = (nf_real)-9.5;
        nf_act_backward_ex(c.a, c.slope, dx, c.w, c.x, c.y, (size_t)n, 1);
        nf_act_backward_ex(c.a, c.slope, dx2, c.w, c.x, c.y, (size_t)n, 0);
        for (int i = 0; i < n; i++) {
            an[i] = dx[i] - 0.731;
            ck_assert_msg(fabs(dx2[i] - an[i]) < 1e-12, "%s: overwrite and accumulate disagree",
                          nf_activation_name(c.a));
        }
        char what[64];
        snprintf(what, sizeof what, "%s dx", nf_activation_name(c.a));
        check_fd(what, act_loss, &c, c.x, an, (size_t)n);
        free(c.x), free(c.y), free(c.w), free(dx), free(dx2), free(an);
    }
}
END_TEST
#endif

/* ---------------------------------------------------------------- linear */

typedef struct lin_case {
    nf_linear L;
    nf_params *P;
    unsigned char *mask;
    nf_real *ws, *x, *c, *y, *w;
    int nc, n;
} lin_case;

static void lin_setup(lin_case *c, int in_x, int nc, int out, int wn, int masked, int n, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    const int in = in_x + nc;
    if (masked) {
        c->mask = malloc((size_t)out * in);
        for (int k = 0; k < out * in; k++) c->mask[k] = (k * 7 + k / in) % 3 != 0;
        for (int i = 0; i < in; i++) c->mask[i] = 0; /* a fully masked row */
    }
    ck_assert_int_eq(nf_params_add(c->P, "before", 5, &(size_t){0}), NF_OK); /* offsets are not zero */
    ck_assert_int_eq(nf_linear_init(&c->L, c->P, "lin", in, out, wn, c->mask, r), NF_OK);
    size_t wsz = nf_linear_workspace(&c->L, n);
    ck_assert_uint_eq(wsz, wn ? 2 * (size_t)out * in + out : masked ? (size_t)out * in : 0);
    c->ws = wsz ? malloc(wsz * sizeof(nf_real)) : NULL;
    c->nc = nc, c->n = n;
    c->x = filled((size_t)n * in_x, -1.9, 2.2, seed + 1);
    c->c = nc ? filled((size_t)n * nc, -1.4, 1.2, seed + 2) : NULL;
    c->y = malloc((size_t)n * out * sizeof(nf_real));
    c->w = filled((size_t)n * out, -1.1, 1.3, seed + 3);
    /* Biases and gains away from their initial values. */
    nf_rng_fill_uniform(r, c->P->value + c->L.b, (size_t)out, -0.8, 0.8);
    if (wn) nf_rng_fill_uniform(r, c->P->value + c->L.g, (size_t)out, 0.4, 1.6);
    nf_rng_free(r);
}

static void lin_teardown(lin_case *c)
{
    nf_params_free(c->P);
    free(c->mask), free(c->ws), free(c->x), free(c->c), free(c->y), free(c->w);
}

static double lin_loss(void *p)
{
    lin_case *c = p;
    nf_linear_forward_cat(&c->L, c->P, c->ws, c->y, c->x, c->c, c->nc, 0, c->n);
    double s = 0;
    for (int i = 0; i < c->n * c->L.out; i++) s += c->w[i] * c->y[i];
    return s;
}

START_TEST(test_linear_forward)
{
    for (int v = 0; v < 8; v++) {
        const int wn = v & 1, masked = (v >> 1) & 1, nc = (v >> 2) & 1 ? 3 : 0, in_x = 5, out = 4, n = 7;
        lin_case c;
        lin_setup(&c, in_x, nc, out, wn, masked, n, 100 + v);
        const nf_real *W = c.P->value + c.L.w;
        if (masked)
            for (int k = 0; k < out * (in_x + nc); k++)
                if (!c.mask[k]) ck_assert(W[k] == 0);
        lin_loss(&c);
        double *xd = malloc((size_t)n * in_x * sizeof *xd), *want = malloc((size_t)n * out * sizeof *want);
        for (int i = 0; i < n * in_x; i++) xd[i] = c.x[i];
        double *in = cat(xd, in_x, c.c, nc, n);
        ref_linear(c.P, "lin", wn, in, in_x + nc, want, out, n);
        for (int i = 0; i < n * out; i++)
            ck_assert_msg(relerr(c.y[i], want[i], 1) < TOL_FWD, "variant %d: y[%d] = %g, expected %g", v, i,
                          (double)c.y[i], want[i]);
        /* accumulate = 1 adds the same again. */
        nf_linear_forward_cat(&c.L, c.P, c.ws, c.y, c.x, c.c, nc, 1, n);
        for (int i = 0; i < n * out; i++) ck_assert(relerr(c.y[i], 2 * want[i], 1) < TOL_FWD);
        if (masked) /* the fully masked row gives the bias alone */
            for (int r = 0; r < n; r++) ck_assert(c.y[r * out] == 2 * c.P->value[c.L.b]);
        /* zeroing: outputs exactly zero. */
        nf_linear_zero(&c.L, c.P);
        nf_linear_forward_cat(&c.L, c.P, c.ws, c.y, c.x, c.c, nc, 0, n);
        for (int i = 0; i < n * out; i++) ck_assert(c.y[i] == 0);
        free(xd), free(want), free(in);
        lin_teardown(&c);
    }
}
END_TEST

#ifdef NF_DOUBLE
START_TEST(test_linear_gradients)
{
    for (int v = 0; v < 8; v++) {
        const int wn = v & 1, masked = (v >> 1) & 1, nc = (v >> 2) & 1 ? 2 : 0, in_x = 4, out = 5, n = 6;
        lin_case c;
        lin_setup(&c, in_x, nc, out, wn, masked, n, 200 + v);
        nf_params *P = c.P;
        nf_real *dx = malloc((size_t)n * in_x * sizeof *dx), *dc = malloc((size_t)n * (nc + 1) * sizeof *dc);
        for (size_t i = 0; i < P->n; i++) P->grad[i] = (nf_real)(0.01 * (double)(i % 13) - 0.05);
        for (int i = 0; i < n * in_x; i++) dx[i] = (nf_real)0.417;
        for (int i = 0; i < n * nc; i++) dc[i] = (nf_real)-0.233;
        lin_loss(&c);
        nf_linear_backward_cat(&c.L, P, c.ws, dx, dc, c.w, c.x, c.c, nc, 1, n);
        double *an = malloc(P->n * sizeof *an);
        for (size_t i = 0; i < P->n; i++) an[i] = P->grad[i] - (0.01 * (double)(i % 13) - 0.05);
        char what[64];
        snprintf(what, sizeof what, "linear variant %d dtheta", v);
        for (size_t i = 0; i < P->n; i++) {
            int is_masked = masked && i >= c.L.w && i < c.L.w + (size_t)out * (in_x + nc) && !c.mask[i - c.L.w];
            if (is_masked) {
                ck_assert_msg(an[i] == 0, "%s: masked entry %zu has gradient %g", what, i, an[i]);
                continue;
            }
            double fd = finite_diff(lin_loss, &c, &P->value[i]);
            ck_assert_msg(relerr(an[i], fd, 1e-3) < TOL_GRAD, "%s[%zu]: analytic %.12g, finite difference %.12g",
                          what, i, an[i], fd);
        }
        for (int i = 0; i < n * in_x; i++) an[i] = dx[i] - 0.417;
        snprintf(what, sizeof what, "linear variant %d dx", v);
        check_fd(what, lin_loss, &c, c.x, an, (size_t)n * in_x);
        for (int i = 0; i < n * nc; i++) an[i] = dc[i] + 0.233;
        snprintf(what, sizeof what, "linear variant %d dctx", v);
        check_fd(what, lin_loss, &c, c.c, an, (size_t)n * nc);
        /* accumulate = 0 overwrites dx; dctx still accumulates. */
        for (int i = 0; i < n * in_x; i++) dx[i] = (nf_real)55;
        nf_linear_backward_cat(&c.L, P, c.ws, dx, NULL, c.w, c.x, c.c, nc, 0, n);
        check_fd("overwritten dx", lin_loss, &c, c.x, (double[]){dx[0], dx[1], dx[2]}, 3);
        free(dx), free(dc), free(an);
        lin_teardown(&c);
    }
}
END_TEST
#endif

START_TEST(test_linear_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(5, 0);
    nf_linear L;
    ck_assert_int_eq(nf_linear_init(&L, P, "bad", 0, 3, 0, NULL, r), NF_EINVAL);
    ck_assert(strstr(nf_strerror_last(), "bad") != NULL);
    ck_assert_int_eq(nf_linear_init(&L, P, "ok", 2, 3, 0, NULL, r), NF_OK);
    ck_assert_int_eq(nf_linear_init(&L, P, "ok", 2, 3, 0, NULL, r), NF_EINVAL); /* name used twice */
    nf_rng_free(r);
    nf_params_free(P);
}
END_TEST

/* ---------------------------------------------------------------- layer norm */

typedef struct ln_case {
    nf_layernorm L;
    nf_params *P;
    nf_real *x, *y, *cache, *w;
    int n;
} ln_case;

static double ln_loss(void *p)
{
    ln_case *c = p;
    nf_layernorm_forward(&c->L, c->P, c->y, c->cache, c->x, c->n);
    double s = 0;
    for (int i = 0; i < c->n * c->L.width; i++) s += c->w[i] * c->y[i];
    return s;
}

START_TEST(test_layernorm)
{
    const int n = 5, H = 21; /* a whole vector of 16 and a remainder */
    ln_case c = {.P = nf_params_alloc(), .n = n};
    ck_assert_int_eq(nf_layernorm_init(&c.L, c.P, "ln", H), NF_OK);
    for (int i = 0; i < H; i++) ck_assert(c.P->value[c.L.gamma + i] == 1 && c.P->value[c.L.beta + i] == 0);
    nf_rng *r = nf_rng_alloc(31, 0);
    nf_rng_fill_uniform(r, c.P->value, c.P->n, -1.2, 1.4);
    nf_rng_free(r);
    c.x = filled((size_t)n * H, -2.1, 3.3, 32);
    c.w = filled((size_t)n * H, -1.0, 1.2, 33);
    c.y = malloc((size_t)n * H * sizeof(nf_real));
    c.cache = malloc(2 * (size_t)n * sizeof(nf_real));
    ln_loss(&c);
    double *want = malloc((size_t)n * H * sizeof *want);
    for (int i = 0; i < n * H; i++) want[i] = c.x[i];
    ref_layernorm(c.P, "ln", want, n, H);
    for (int i = 0; i < n * H; i++) ck_assert_msg(relerr(c.y[i], want[i], 1) < TOL_FWD, "y[%d]", i);
#ifdef NF_DOUBLE
    nf_real *dx = malloc((size_t)n * H * sizeof *dx);
    double *an = malloc((size_t)n * H * sizeof *an);
    for (int i = 0; i < n * H; i++) dx[i] = (nf_real)0.25;
    for (size_t i = 0; i < c.P->n; i++) c.P->grad[i] = (nf_real)-0.125;
    nf_layernorm_backward(&c.L, c.P, dx, c.w, c.x, c.cache, n);
    for (int i = 0; i < n * H; i++) an[i] = dx[i] - 0.25;
    check_fd("layer norm dx", ln_loss, &c, c.x, an, (size_t)n * H);
    for (size_t i = 0; i < c.P->n; i++) an[i] = c.P->grad[i] + 0.125;
    check_fd("layer norm dtheta", ln_loss, &c, c.P->value, an, c.P->n);
    free(dx), free(an);
#endif
    free(want), free(c.x), free(c.w), free(c.y), free(c.cache);
    nf_params_free(c.P);
}
END_TEST

/* The rows on nn/layernorm_avx512.c's kernels (where the build and CPU have them) give the bits of
 * the portable code, forward and backward, at widths 64 and 48 (whole vectors) and 20 (the portable
 * code only), over 37 rows; width 64 against the definition too. */
START_TEST(test_layernorm_rows)
{
    const int n = 37, widths[] = {64, 48, 20};
    for (int k = 0; k < 3; k++) {
        const int H = widths[k];
        const size_t nh = (size_t)n * H;
        nf_params *P = nf_params_alloc();
        nf_layernorm L;
        ck_assert_int_eq(nf_layernorm_init(&L, P, "ln", H), NF_OK);
        nf_rng *r = nf_rng_alloc(41 + (uint64_t)H, 0);
        nf_rng_fill_uniform(r, P->value, P->n, -1.2, 1.4);
        nf_rng_free(r);
        nf_real *x = filled(nh, -2.1, 3.3, 42), *dy = filled(nh, -1.0, 1.2, 43);
        nf_real *y0 = malloc(nh * sizeof *y0), *y1 = malloc(nh * sizeof *y1);
        nf_real *c0 = malloc(2 * (size_t)n * sizeof *c0), *c1 = malloc(2 * (size_t)n * sizeof *c1);
        nf_real *d0 = filled(nh, -0.5, 0.5, 44), *d1 = malloc(nh * sizeof *d1);
        memcpy(d1, d0, nh * sizeof *d1);
        nf_layernorm_forward_rows(&L, P, y0, c0, x, n, 0);
        nf_layernorm_forward_rows(&L, P, y1, c1, x, n, 1);
        ck_assert_msg(memcmp(y0, y1, nh * sizeof *y0) == 0 && memcmp(c0, c1, 2 * (size_t)n * sizeof *c0) == 0,
                      "width %d: the forward kernel differs from the portable code", H);
        nf_layernorm_grad_input_rows(&L, P, d0, dy, x, c0, n, 0);
        nf_layernorm_grad_input_rows(&L, P, d1, dy, x, c0, n, 1);
        ck_assert_msg(memcmp(d0, d1, nh * sizeof *d0) == 0, "width %d: the backward kernel differs", H);
        /* onto a separate base, and written (base NULL): as adding onto a copy of the base, and into zeros */
        nf_real *base = filled(nh, -0.5, 0.5, 45), *e0 = malloc(nh * sizeof *e0), *e1 = malloc(nh * sizeof *e1);
        for (int vec = 0; vec < 2; vec++) {
            memcpy(e0, base, nh * sizeof *e0);
            nf_layernorm_grad_input_rows(&L, P, e0, dy, x, c0, n, vec);
            nf_layernorm_grad_input_onto(&L, P, e1, base, dy, x, c0, n, vec);
            ck_assert_msg(memcmp(e0, e1, nh * sizeof *e0) == 0, "width %d, vector %d: onto a base differs", H, vec);
            memset(e0, 0, nh * sizeof *e0);
            nf_layernorm_grad_input_rows(&L, P, e0, dy, x, c0, n, vec);
            nf_layernorm_grad_input_onto(&L, P, e1, NULL, dy, x, c0, n, vec);
            ck_assert_msg(memcmp(e0, e1, nh * sizeof *e0) == 0, "width %d, vector %d: written differs", H, vec);
        }
        free(base), free(e0), free(e1);
        double *want = malloc(nh * sizeof *want);
        for (size_t i = 0; i < nh; i++) want[i] = x[i];
        ref_layernorm(P, "ln", want, n, H);
        for (size_t i = 0; i < nh; i++) ck_assert_msg(relerr(y1[i], want[i], 1) < TOL_FWD, "width %d: y[%zu]", H, i);
        free(x), free(dy), free(y0), free(y1), free(c0), free(c1), free(d0), free(d1), free(want);
        nf_params_free(P);
    }
}
END_TEST

/* ---------------------------------------------------------------- networks */

typedef struct net_case {
    nf_mlp_config cfg;
    nf_mlp *m;
    nf_params *P;
    unsigned char *masked; /* (P->n): weight entries that are zero at initialisation (MADE masks) */
    nf_real *ws, *x, *ctx, *y, *w;
    int n;
} net_case;

static nf_mlp_config config(int in, int ctx, int out, int hidden, int layers, nf_activation act)
{
    nf_mlp_config c;
    memset(&c, 0, sizeof c);
    c.in = in, c.ctx = ctx, c.out = out, c.hidden = hidden, c.layers = layers, c.act = act;
    c.out_per_input = 1;
    return c;
}

static int ends_with(const char *s, const char *t)
{
    size_t a = strlen(s), b = strlen(t);
    return a >= b && strcmp(s + a - b, t) == 0;
}

/* Build the network, find its masked entries, and (randomize) draw every other parameter from
 * U(-1.1, 1.1) so nothing is near its special initial value. */
static void net_setup(net_case *c, const nf_mlp_config *cfg, int n, int randomize, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert_int_eq(nf_params_add(c->P, "other", 3, &(size_t){0}), NF_OK);
    int rc = nf_mlp_create(&c->m, cfg, c->P, "net", r);
    ck_assert_msg(rc == NF_OK, "create: %s", nf_strerror_last());
    c->masked = calloc(c->P->n, 1);
    for (size_t s = 0; s < c->P->nslices; s++) {
        const nf_param_slice *sl = &c->P->slices[s];
        if (!ends_with(sl->name, ".weight")) continue;
        for (size_t i = sl->offset; i < sl->offset + sl->size; i++) c->masked[i] = c->P->value[i] == 0;
    }
    if (randomize)
        for (size_t i = 0; i < c->P->n; i++)
            if (!c->masked[i]) c->P->value[i] = (nf_real)(2.2 * nf_rng_uniform(r) - 1.1);
    nf_rng_free(r);
    c->n = n;
    c->ws = malloc(nf_mlp_workspace(c->m, n) * sizeof(nf_real));
    c->x = filled((size_t)n * cfg->in, -1.7, 1.9, seed + 1);
    c->ctx = cfg->ctx ? filled((size_t)n * cfg->ctx, -1.3, 1.5, seed + 2) : NULL;
    c->y = malloc((size_t)n * cfg->out * sizeof(nf_real));
    c->w = filled((size_t)n * cfg->out, -1.2, 1.1, seed + 3);
}

static void net_teardown(net_case *c)
{
    nf_mlp_free(c->m);
    nf_params_free(c->P);
    free(c->masked), free(c->ws), free(c->x), free(c->ctx), free(c->y), free(c->w);
}

static double net_loss(void *p)
{
    net_case *c = p;
    nf_mlp_forward(c->m, c->P, c->ws, c->y, c->x, c->ctx, c->n);
    double s = 0;
    for (int i = 0; i < c->n * c->cfg.out; i++) s += c->w[i] * c->y[i];
    return s;
}

/* The configurations every network test runs. */
typedef struct net_spec {
    const char *label;
    int in, ctx, out, hidden, layers;
    nf_activation act;
    int residual, made, opi, order, layer_norm, weight_norm;
} net_spec;

static const net_spec net_specs[] = {
    {"plain tanh ln ctx", 4, 3, 6, 9, 2, NF_ACT_TANH, 0, 0, 1, 0, 1, 0},
    {"plain gelu wn ctx", 3, 2, 5, 8, 3, NF_ACT_GELU, 0, 0, 1, 0, 0, 1},
    {"plain linear only", 3, 2, 4, 0, 0, NF_ACT_TANH, 0, 0, 1, 0, 0, 0},
    {"plain context only", 0, 3, 2, 7, 1, NF_ACT_SIGMOID, 0, 0, 1, 0, 0, 0},
    {"residual silu ln ctx", 4, 2, 8, 7, 2, NF_ACT_SILU, 1, 0, 1, 0, 1, 0},
    {"residual tanh wn", 3, 0, 6, 8, 2, NF_ACT_TANH, 1, 0, 1, 0, 0, 1},
    {"residual no blocks", 3, 1, 3, 5, 0, NF_ACT_ELU, 1, 0, 1, 0, 0, 0},
    {"made sigmoid ctx opi2 random wn", 5, 2, 10, 11, 2, NF_ACT_SIGMOID, 0, 1, 2, NF_ORDER_RANDOM, 0, 1},
    {"made tanh opi3 reversed", 4, 0, 12, 9, 1, NF_ACT_TANH, 0, 1, 3, NF_ORDER_REVERSED, 0, 0},
    {"made direct ctx", 4, 2, 8, 0, 0, NF_ACT_TANH, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
    {"residual made gelu ctx opi3", 4, 3, 12, 10, 2, NF_ACT_GELU, 1, 1, 3, NF_ORDER_NATURAL, 0, 0},
    {"residual made silu wn random", 5, 1, 5, 9, 1, NF_ACT_SILU, 1, 1, 1, NF_ORDER_RANDOM, 0, 1},
};
#define NSPECS ((int)(sizeof net_specs / sizeof net_specs[0]))

static nf_mlp_config spec_config(const net_spec *s)
{
    nf_mlp_config c = config(s->in, s->ctx, s->out, s->hidden, s->layers, s->act);
    c.residual = s->residual, c.made = s->made, c.out_per_input = s->opi, c.order = s->order;
    c.layer_norm = s->layer_norm, c.weight_norm = s->weight_norm;
    return c;
}

START_TEST(test_mlp_forward_reference)
{
    for (int k = 0; k < NSPECS; k++) {
        nf_mlp_config cfg = spec_config(&net_specs[k]);
        net_case c;
        net_setup(&c, &cfg, 7, 1, 300 + k);
        net_loss(&c);
        double *want = malloc((size_t)c.n * cfg.out * sizeof *want);
        ref_mlp(&cfg, c.P, "net", c.x, c.ctx, c.n, want);
        for (int i = 0; i < c.n * cfg.out; i++)
            ck_assert_msg(relerr(c.y[i], want[i], 1) < TOL_FWD, "%s: y[%d] = %.10g, expected %.10g",
                          net_specs[k].label, i, (double)c.y[i], want[i]);
        free(want);
        net_teardown(&c);
    }
}
END_TEST

/* A batch large enough for the OpenMP paths (n * hidden > 32768) gives the same forward as the
 * reference, and the same gradients as the sum over two halves that stay serial. */
START_TEST(test_mlp_large_batch)
{
    for (int residual = 0; residual < 2; residual++) {
        nf_mlp_config cfg = config(6, 2, 6, 64, 2, NF_ACT_GELU);
        cfg.residual = residual, cfg.layer_norm = 1;
        const int n = 600, h = 300;
        net_case c;
        net_setup(&c, &cfg, n, 1, 400 + residual);
        net_loss(&c);
        double *want = malloc((size_t)n * cfg.out * sizeof *want);
        ref_mlp(&cfg, c.P, "net", c.x, c.ctx, n, want);
        for (int i = 0; i < n * cfg.out; i++) ck_assert(relerr(c.y[i], want[i], 1) < 10 * TOL_FWD);
        nf_real *dx = calloc((size_t)n * cfg.in, sizeof *dx), *dctx = calloc((size_t)n * cfg.ctx, sizeof *dctx);
        nf_params_zero_grad(c.P);
        nf_mlp_backward(c.m, c.P, c.ws, dx, dctx, c.w, c.x, c.ctx, n);
        double *full = malloc(c.P->n * sizeof *full);
        for (size_t i = 0; i < c.P->n; i++) full[i] = c.P->grad[i];
        nf_params_zero_grad(c.P);
        nf_real *dx2 = calloc((size_t)n * cfg.in, sizeof *dx2);
        for (int part = 0; part < 2; part++) {
            const nf_real *x = c.x + (size_t)part * h * cfg.in, *ctx = c.ctx + (size_t)part * h * cfg.ctx;
            nf_mlp_forward(c.m, c.P, c.ws, c.y, x, ctx, h);
            nf_mlp_backward(c.m, c.P, c.ws, dx2 + (size_t)part * h * cfg.in, NULL, c.w + (size_t)part * h * cfg.out,
                            x, ctx, h);
        }
        double tol = 50 * TOL_FWD;
        for (size_t i = 0; i < c.P->n; i++)
            ck_assert_msg(relerr(full[i], c.P->grad[i], 1) < tol, "grad[%zu]: %g vs %g", i, full[i],
                          (double)c.P->grad[i]);
        for (int i = 0; i < n * cfg.in; i++) ck_assert(relerr(dx[i], dx2[i], 1) < tol);
        free(want), free(dx), free(dctx), free(full), free(dx2);
        net_teardown(&c);
    }
}
END_TEST

#ifdef NF_DOUBLE
START_TEST(test_mlp_gradients)
{
    const int k = _i;
    nf_mlp_config cfg = spec_config(&net_specs[k]);
    net_case c;
    net_setup(&c, &cfg, 5, 1, 500 + k);
    nf_params *P = c.P;
    const size_t nx = (size_t)c.n * cfg.in, nc = (size_t)c.n * cfg.ctx;
    nf_real *dx = malloc((nx + 1) * sizeof *dx), *dctx = malloc((nc + 1) * sizeof *dctx);
    for (size_t i = 0; i < P->n; i++) P->grad[i] = (nf_real)(0.02 * (double)(i % 11) - 0.1);
    for (size_t i = 0; i < nx; i++) dx[i] = (nf_real)0.318;
    for (size_t i = 0; i < nc; i++) dctx[i] = (nf_real)-0.472;
    net_loss(&c);
    nf_mlp_backward(c.m, P, c.ws, dx, dctx, c.w, c.x, c.ctx, c.n);
    double *an = malloc((P->n + nx + nc) * sizeof *an);
    for (size_t i = 0; i < P->n; i++) an[i] = P->grad[i] - (0.02 * (double)(i % 11) - 0.1);

    /* Every parameter entry of small networks; a seeded subset of 300 of bigger ones. */
    nf_rng *r = nf_rng_alloc(600 + k, 0);
    const size_t checks = P->n <= 1200 ? P->n : 300;
    size_t nmasked = 0;
    for (size_t t = 0; t < checks; t++) {
        size_t i = checks == P->n ? t : nf_rng_index(r, P->n);
        if (c.masked[i]) {
            nmasked++;
            ck_assert_msg(an[i] == 0, "%s: masked entry %zu has gradient %g", net_specs[k].label, i, an[i]);
            continue;
        }
        double fd = finite_diff(net_loss, &c, &P->value[i]);
        ck_assert_msg(relerr(an[i], fd, 1e-3) < TOL_GRAD, "%s: dtheta[%zu] analytic %.12g, finite difference %.12g",
                      net_specs[k].label, i, an[i], fd);
    }
    nf_rng_free(r);
    if (cfg.made && cfg.in > 1) ck_assert_msg(nmasked > 0, "%s: no masked weights found", net_specs[k].label);

    char what[96];
    for (size_t i = 0; i < nx; i++) an[i] = dx[i] - 0.318;
    snprintf(what, sizeof what, "%s dx", net_specs[k].label);
    check_fd(what, net_loss, &c, c.x, an, nx);
    for (size_t i = 0; i < nc; i++) an[i] = dctx[i] + 0.472;
    snprintf(what, sizeof what, "%s dctx", net_specs[k].label);
    check_fd(what, net_loss, &c, c.ctx, an, nc);

    /* Without input gradients the parameter gradients are the same. */
    double *first = malloc(P->n * sizeof *first);
    nf_params_zero_grad(P);
    net_loss(&c);
    nf_mlp_backward(c.m, P, c.ws, dx, dctx, c.w, c.x, c.ctx, c.n);
    for (size_t i = 0; i < P->n; i++) first[i] = P->grad[i];
    nf_params_zero_grad(P);
    nf_mlp_backward(c.m, P, c.ws, NULL, NULL, c.w, c.x, c.ctx, c.n);
    for (size_t i = 0; i < P->n; i++) ck_assert(fabs(first[i] - P->grad[i]) < 1e-13);
    free(first), free(dx), free(dctx), free(an);
    net_teardown(&c);
}
END_TEST
#endif

/* ---------------------------------------------------------------- MADE */

/* Perturb each input (and the context) and record which outputs move: an output of input i may
 * move with input j only if deg_j < deg_i, and must move for every such j (smooth activation,
 * random parameters). */
static void check_made_dependence(const nf_mlp_config *cfg, uint64_t seed, int require_all)
{
    net_case c;
    net_setup(&c, cfg, 3, 1, seed);
    const int D = cfg->in, out = cfg->out, opi = cfg->out_per_input, n = c.n;
    const int *deg = nf_mlp_input_degrees(c.m);
    ck_assert(deg != NULL);
    nf_real *y0 = malloc((size_t)n * out * sizeof *y0);
    nf_mlp_forward(c.m, c.P, c.ws, y0, c.x, c.ctx, n);
    for (int j = 0; j <= D; j++) { /* j == D: the context */
        if (j == D && !cfg->ctx) break;
        nf_real *v = j < D ? c.x : c.ctx;
        const int w = j < D ? D : cfg->ctx, col = j < D ? j : 0;
        nf_real saved[3];
        for (int r = 0; r < n; r++) saved[r] = v[r * w + col], v[r * w + col] += (nf_real)0.37;
        nf_mlp_forward(c.m, c.P, c.ws, c.y, c.x, c.ctx, n);
        for (int r = 0; r < n; r++) v[r * w + col] = saved[r]; /* restored exactly */
        for (int o = 0; o < out; o++) {
            const int i = o / opi;
            int moved = 0;
            for (int r = 0; r < n; r++) moved |= c.y[r * out + o] != y0[r * out + o];
            int allowed = j == D || deg[j] < deg[i];
            if (!allowed)
                ck_assert_msg(!moved, "order %d opi %d: output %d (input %d, degree %d) moved with input %d (degree %d)",
                              cfg->order, opi, o, i, deg[i], j, deg[j]);
            else if (require_all)
                ck_assert_msg(moved, "order %d opi %d: output %d (input %d) ignores %s %d", cfg->order, opi, o, i,
                              j == D ? "the context" : "input", j);
        }
    }
    free(y0);
    net_teardown(&c);
}

START_TEST(test_made_masks)
{
    int seed = 700;
    for (int order = 0; order < 3; order++)
        for (int opi = 1; opi <= 3; opi++)
            for (int variant = 0; variant < 5; variant++) {
                /* plain 2 layers, plain 1 layer + relu, direct, residual, residual + weight norm */
                nf_mlp_config cfg = config(6, variant == 1 ? 0 : 2, 6 * opi, 13, variant == 2 ? 0 : 2, NF_ACT_TANH);
                cfg.made = 1, cfg.out_per_input = opi, cfg.order = order;
                if (variant == 1) cfg.layers = 1, cfg.act = NF_ACT_RELU;
                cfg.residual = variant >= 3;
                cfg.weight_norm = variant == 4;
                check_made_dependence(&cfg, (uint64_t)seed++, variant != 1);
            }
}
END_TEST

START_TEST(test_made_degrees)
{
    nf_mlp_config cfg = config(7, 0, 7, 12, 1, NF_ACT_TANH);
    cfg.made = 1;
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(41, 0);
    nf_mlp *a, *b, *c;
    cfg.order = NF_ORDER_REVERSED;
    ck_assert_int_eq(nf_mlp_create(&a, &cfg, P, "rev", r), NF_OK);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(nf_mlp_input_degrees(a)[i], 7 - i);
    cfg.order = NF_ORDER_RANDOM;
    ck_assert_int_eq(nf_mlp_create(&b, &cfg, P, "rand", r), NF_OK);
    int seen[8] = {0}, natural = 1;
    for (int i = 0; i < 7; i++) {
        int d = nf_mlp_input_degrees(b)[i];
        ck_assert(d >= 1 && d <= 7 && !seen[d]);
        seen[d] = 1;
        natural &= d == i + 1;
    }
    ck_assert(!natural);
    /* The same seed gives the same order (and the same parameters). */
    nf_params *P2 = nf_params_alloc();
    nf_rng *r2 = nf_rng_alloc(41, 0);
    cfg.order = NF_ORDER_REVERSED;
    ck_assert_int_eq(nf_mlp_create(&c, &cfg, P2, "rev", r2), NF_OK);
    nf_mlp_free(c);
    cfg.order = NF_ORDER_RANDOM;
    ck_assert_int_eq(nf_mlp_create(&c, &cfg, P2, "rand", r2), NF_OK);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(nf_mlp_input_degrees(c)[i], nf_mlp_input_degrees(b)[i]);
    ck_assert_uint_eq(P->n, P2->n);
    ck_assert(memcmp(P->value, P2->value, P->n * sizeof *P->value) == 0);
    nf_mlp_free(a), nf_mlp_free(b), nf_mlp_free(c);
    nf_params_free(P), nf_params_free(P2);
    nf_rng_free(r), nf_rng_free(r2);

    /* Hidden degrees: cyclic 1..D-1 counts, sorted ascending; all 0 for D = 1. */
    int m[23];
    nf_made_hidden_degrees(m, 23, 6);
    int count[6] = {0};
    for (int k = 0; k < 23; k++) {
        ck_assert(m[k] >= 1 && m[k] <= 5);
        if (k) ck_assert(m[k] >= m[k - 1]);
        count[m[k]]++;
    }
    for (int d = 1; d <= 5; d++) ck_assert_int_eq(count[d], 23 / 5 + (d - 1 < 23 % 5));
    nf_made_hidden_degrees(m, 4, 1);
    for (int k = 0; k < 4; k++) ck_assert_int_eq(m[k], 0);
    /* A plain network has no degrees. */
    P = nf_params_alloc();
    r = nf_rng_alloc(1, 0);
    nf_mlp_config plain = config(3, 0, 3, 4, 1, NF_ACT_RELU);
    ck_assert_int_eq(nf_mlp_create(&a, &plain, P, "p", r), NF_OK);
    ck_assert(nf_mlp_input_degrees(a) == NULL);
    ck_assert_int_eq(nf_mlp_get_config(a)->hidden, 4);
    nf_mlp_free(a);
    nf_params_free(P);
    nf_rng_free(r);
}
END_TEST

/* D = 1: the outputs depend on nothing but the context and the biases. */
START_TEST(test_made_one_dimension)
{
    for (int residual = 0; residual < 2; residual++)
        for (int with_ctx = 0; with_ctx < 2; with_ctx++) {
            nf_mlp_config cfg = config(1, with_ctx ? 2 : 0, 2, 6, 2, NF_ACT_TANH);
            cfg.made = 1, cfg.out_per_input = 2, cfg.residual = residual;
            net_case c;
            net_setup(&c, &cfg, 4, 1, 800 + 2 * residual + with_ctx);
            nf_mlp_forward(c.m, c.P, c.ws, c.y, c.x, c.ctx, c.n);
            nf_real y0[8];
            memcpy(y0, c.y, sizeof y0);
            for (int r = 0; r < c.n; r++) c.x[r] += (nf_real)1.93;
            nf_mlp_forward(c.m, c.P, c.ws, c.y, c.x, c.ctx, c.n);
            for (int i = 0; i < 8; i++) ck_assert(c.y[i] == y0[i]);
            if (with_ctx) { /* rows have different contexts, so different outputs */
                for (int o = 0; o < 2; o++) ck_assert(c.y[o] != c.y[2 + o]);
            } else {
                for (int i = 2; i < 8; i++) ck_assert(c.y[i] == c.y[i % 2]);
            }
            net_teardown(&c);
        }
}
END_TEST

/* nf_mlp_forward_level: a plain MADE computed level by level gives every output nf_mlp_forward gives,
 * although before level k the inputs of degree >= k hold other values (as in a sequential
 * inversion, where they are not solved yet); networks it does not cover say so. */
START_TEST(test_made_levels)
{
    static const struct { int in, ctx, hidden, layers, opi, order, residual, wn, expect; } cases[] = {
        {5, 2, 11, 2, 2, NF_ORDER_RANDOM, 0, 0, 1},   {4, 0, 12, 1, 3, NF_ORDER_REVERSED, 0, 0, 1},
        {7, 1, 37, 3, 1, NF_ORDER_NATURAL, 0, 0, 1},  {1, 2, 6, 2, 2, NF_ORDER_NATURAL, 0, 0, 1},
        {6, 0, 64, 2, 2, NF_ORDER_RANDOM, 0, 0, 1},   {4, 1, 8, 2, 2, NF_ORDER_NATURAL, 1, 0, 0},
        {4, 1, 8, 2, 2, NF_ORDER_NATURAL, 0, 1, 0},   {4, 1, 8, 0, 2, NF_ORDER_NATURAL, 0, 0, 0},
    };
    for (int t = 0; t < (int)(sizeof cases / sizeof cases[0]); t++) {
        nf_mlp_config cfg = config(cases[t].in, cases[t].ctx, cases[t].in * cases[t].opi, cases[t].hidden,
                                   cases[t].layers, NF_ACT_TANH);
        cfg.made = 1, cfg.out_per_input = cases[t].opi, cfg.order = cases[t].order;
        cfg.residual = cases[t].residual, cfg.weight_norm = cases[t].wn;
        net_case c;
        net_setup(&c, &cfg, 9, 1, 1100 + t);
        ck_assert_msg(nf_mlp_has_levels(c.m) == cases[t].expect, "case %d: has_levels %d", t, nf_mlp_has_levels(c.m));
        if (!cases[t].expect) {
            net_teardown(&c);
            continue;
        }
        const int D = cfg.in, out = cfg.out;
        const int *deg = nf_mlp_input_degrees(c.m);
        nf_mlp_forward(c.m, c.P, c.ws, c.y, c.x, c.ctx, c.n);
        nf_real *yl = malloc((size_t)c.n * out * sizeof *yl), *xs = malloc((size_t)c.n * D * sizeof *xs);
        for (int i = 0; i < c.n * out; i++) yl[i] = NAN;
        const size_t nws = nf_mlp_workspace(c.m, c.n); /* forget the one-pass activations */
        for (size_t i = 0; i < nws; i++) c.ws[i] = NAN;
        for (int k = 1; k <= D; k++) {
            for (int r = 0; r < c.n; r++)
                for (int j = 0; j < D; j++)
                    xs[r * D + j] = deg[j] < k ? c.x[r * D + j] : (nf_real)(3.5 + r + 7 * j + 11 * k);
            nf_mlp_forward_level(c.m, c.P, c.ws, yl, xs, c.ctx, c.n, k);
        }
        for (int i = 0; i < c.n * out; i++)
            ck_assert_msg(relerr(yl[i], c.y[i], 1) < TOL_FWD, "case %d: y[%d] = %.10g level by level, %.10g in one pass",
                          t, i, (double)yl[i], (double)c.y[i]);
        /* in two parts of the rows (as threads run them: each part through every level, the second
         * after the first), the same values to the bit */
        nf_real *yp = malloc((size_t)c.n * out * sizeof *yp);
        for (int i = 0; i < c.n * out; i++) yp[i] = NAN;
        for (size_t i = 0; i < nws; i++) c.ws[i] = NAN;
        const int cut[3] = {0, c.n / 3, c.n};
        for (int p = 0; p < 2; p++)
            for (int k = 1; k <= D; k++) {
                for (int r = cut[p]; r < cut[p + 1]; r++)
                    for (int j = 0; j < D; j++)
                        xs[r * D + j] = deg[j] < k ? c.x[r * D + j] : (nf_real)(3.5 + r + 7 * j + 11 * k);
                nf_mlp_forward_level_rows(c.m, c.P, c.ws, yp, xs, c.ctx, c.n, cut[p], cut[p + 1], k);
            }
        for (int i = 0; i < c.n * out; i++)
            ck_assert_msg(yp[i] == yl[i], "case %d: y[%d] = %.10g in parts of the rows, %.10g on all rows", t, i,
                          (double)yp[i], (double)yl[i]);
        free(yp);
        free(yl);
        free(xs);
        net_teardown(&c);
    }
}
END_TEST

START_TEST(test_zero_init_output)
{
    for (int k = 0; k < NSPECS; k++) {
        nf_mlp_config cfg = spec_config(&net_specs[k]);
        cfg.zero_init_output = 1;
        net_case c;
        net_setup(&c, &cfg, 6, 0, 900 + k);
        nf_mlp_forward(c.m, c.P, c.ws, c.y, c.x, c.ctx, c.n);
        for (int i = 0; i < c.n * cfg.out; i++)
            ck_assert_msg(c.y[i] == 0, "%s: y[%d] = %g", net_specs[k].label, i, (double)c.y[i]);
        /* ...and it can learn: the output layer receives a gradient. */
        nf_params_zero_grad(c.P);
        nf_mlp_backward(c.m, c.P, c.ws, NULL, NULL, c.w, c.x, c.ctx, c.n);
        ck_assert_msg(nf_params_grad_norm(c.P) > 1e-3, "%s: no gradient", net_specs[k].label);
        net_teardown(&c);
    }
}
END_TEST

START_TEST(test_mlp_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(3, 0);
    nf_mlp *m = (nf_mlp *)&m;
    struct {
        nf_mlp_config cfg;
        const char *expect;
    } bad[] = {
        {config(0, 0, 3, 4, 1, NF_ACT_RELU), "in + ctx"},
        {config(2, 0, 0, 4, 1, NF_ACT_RELU), "out=0"},
        {config(2, 0, 3, 0, 1, NF_ACT_RELU), "hidden=0"},
        {config(2, 0, 3, 4, -1, NF_ACT_RELU), "layers=-1"},
        {config(2, 0, 3, 4, 1, (nf_activation)42), "activation 42"},
        {{.in = 3, .out = 5, .hidden = 4, .layers = 1, .made = 1, .out_per_input = 2}, "out=5"},
        {{.in = 3, .out = 3, .hidden = 4, .layers = 1, .made = 1, .order = 7}, "order 7"},
        {{.in = 3, .out = 3, .hidden = 4, .layers = 1, .made = 1, .layer_norm = 1}, "layer norm"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(nf_mlp_create(&m, &bad[k].cfg, P, "cond", r), NF_EINVAL);
        ck_assert(m == NULL);
        ck_assert_msg(strstr(nf_strerror_last(), bad[k].expect) && strstr(nf_strerror_last(), "cond"),
                      "case %zu: message '%s' should mention '%s'", k, nf_strerror_last(), bad[k].expect);
    }
    nf_mlp_config ok = config(2, 0, 3, 4, 1, NF_ACT_RELU);
    ck_assert_int_eq(nf_mlp_create(&m, &ok, P, "cond", NULL), NF_EINVAL);
    ck_assert_int_eq(nf_mlp_create(&m, &ok, P, "cond", r), NF_OK);
    nf_mlp_free(m);
    ck_assert_int_eq(nf_mlp_create(&m, &ok, P, "cond", r), NF_EINVAL); /* names taken */
    ck_assert(m == NULL);
    nf_mlp_free(NULL);
    nf_rng_free(r);
    nf_params_free(P);
}
END_TEST

static Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_activation_names);
    tcase_add_test(t, test_activation_values);
    tcase_add_test(t, test_gelu_fused_and_accurate);
    tcase_add_test(t, test_linear_forward);
    tcase_add_test(t, test_linear_errors);
    tcase_add_test(t, test_layernorm);
    tcase_add_test(t, test_layernorm_rows);
    tcase_add_test(t, test_mlp_forward_reference);
    tcase_add_test(t, test_mlp_large_batch);
    tcase_add_test(t, test_made_masks);
    tcase_add_test(t, test_made_degrees);
    tcase_add_test(t, test_made_one_dimension);
    tcase_add_test(t, test_made_levels);
    tcase_add_test(t, test_zero_init_output);
    tcase_add_test(t, test_mlp_errors);
#ifdef NF_DOUBLE
    tcase_add_test(t, test_activation_gradients);
    tcase_add_test(t, test_linear_gradients);
    tcase_add_loop_test(t, test_mlp_gradients, 0, NSPECS);
#endif
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
