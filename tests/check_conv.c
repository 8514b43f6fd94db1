/* tests/check_conv.c - the NHWC convolution (nn/conv2d.h) and the coupling conditioner net
 * (nn/convnet.h).
 *
 * Forwards are compared with naive direct loops in double written here from the definitions (the
 * 'same' zero padding at every border, NHWC indexing), in both builds.  im2col and col2im are
 * checked to be adjoint (<im2col(x), C> = <x, col2im(C)>).  Backwards are compared with
 * fourth-order central finite differences of L = sum(g * y) in the double build, for every weight,
 * bias, input and context entry; gradient buffers are pre-filled so accumulation is checked too.
 * Sizes are small and odd-shaped (n = 2, 5 x 4 images, 3 channels in, 2 out) so a swapped height and
 * width or a wrong border cannot pass.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "core/rng.h"
#include "nn/conv2d.h"
#include "nn/convnet.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-12
#else
#define TOL_FWD 2e-5
#endif
#define TOL_GRAD 1e-6

enum { N = 2, H = 5, W = 4, CIN = 3, COUT = 2 };

static nf_real *filled(size_t n, double scale, uint64_t seed)
{
    nf_real *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    nf_test_fill_normal(x, n, scale, seed);
    return x;
}

/* y[b,i,j,o] = bias[o] + sum W[o, (di*k + dj)*cin + ch] x[b, i+di-p, j+dj-p, ch] (x = 0 outside), in double. */
static void ref_conv(double *y, const nf_real *x, const nf_real *Wt, const nf_real *bias, int n, int h, int w, int cin,
                     int cout, int k)
{
    const int p = k / 2;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++)
                for (int o = 0; o < cout; o++) {
                    double s = bias[o];
                    for (int di = 0; di < k; di++)
                        for (int dj = 0; dj < k; dj++) {
                            int si = i + di - p, sj = j + dj - p;
                            if (si < 0 || si >= h || sj < 0 || sj >= w) continue;
                            for (int ch = 0; ch < cin; ch++)
                                s += (double)Wt[(size_t)o * k * k * cin + ((size_t)di * k + dj) * cin + ch] *
                                     x[(((size_t)b * h + si) * w + sj) * cin + ch];
                        }
                    y[(((size_t)b * h + i) * w + j) * cout + o] = s;
                }
}

/* The layer shapes the tests run: 3 -> 2 channels (narrowing: columns on the output side when
 * k > 1) and 2 -> 3 (widening: im2col on the input side), kernel sizes 3, 1, 5. */
static const struct { int cin, cout, k; } shapes[] = {{CIN, COUT, 3}, {CIN, COUT, 1}, {CIN, COUT, 5},
                                                      {COUT, CIN, 3}, {COUT, CIN, 1}, {COUT, CIN, 5}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

START_TEST(test_conv_forward_reference)
{
    for (int t = 0; t < NSHAPES; t++) {
        const int k = shapes[t].k, cin = shapes[t].cin, cout = shapes[t].cout;
        nf_params *P = nf_params_alloc();
        nf_rng *rng = nf_rng_alloc(2385, 0);
        nf_conv2d L;
        ck_assert_int_eq(nf_conv2d_init(&L, P, "conv", cin, cout, k, rng), NF_OK);
        const size_t nx = (size_t)N * H * W * cin, ny = (size_t)N * H * W * cout;
        nf_real *x = filled(nx, 1.3, 7), *y = filled(ny, 1, 8);
        nf_real *ws = calloc(nf_conv2d_workspace(&L, N, H, W) + 1, sizeof(nf_real));
        double *ref = malloc(ny * sizeof *ref);
        nf_conv2d_forward(&L, P, ws, y, x, N, H, W);
        ref_conv(ref, x, P->value + L.w, P->value + L.b, N, H, W, cin, cout, k);
        for (size_t e = 0; e < ny; e++)
            ck_assert_msg(nf_test_relerr(y[e], ref[e], 1) < TOL_FWD,
                          "%d -> %d, k=%d: y[%zu] = %.10g, direct loop %.10g", cin, cout, k, e, (double)y[e], ref[e]);
        const size_t kk = (size_t)k * k, R = (size_t)N * H * W;
        ck_assert_uint_eq(nf_conv2d_workspace(&L, N, H, W),
                          k == 1 ? 0 : cout < cin ? R * kk * cout + 2 * kk * cout * cin : R * kk * cin);
        free(x), free(y), free(ws), free(ref);
        nf_rng_free(rng);
        nf_params_free(P);
    }
}
END_TEST

/* <im2col(x), C> == <x, col2im(C)>: col2im is the adjoint the backward pass relies on. */
START_TEST(test_im2col_adjoint)
{
    const int k = 3;
    const size_t nx = (size_t)N * H * W * CIN, nc = (size_t)N * H * W * k * k * CIN;
    nf_real *x = filled(nx, 1.1, 3), *C = filled(nc, 0.9, 4), *cols = malloc(nc * sizeof(nf_real));
    nf_real *back = calloc(nx, sizeof(nf_real));
    nf_conv2d_im2col(cols, x, N, H, W, CIN, k);
    nf_conv2d_col2im_add(back, C, N, H, W, CIN, k);
    double a = 0, b = 0;
    for (size_t e = 0; e < nc; e++) a += (double)cols[e] * C[e];
    for (size_t e = 0; e < nx; e++) b += (double)x[e] * back[e];
    ck_assert_msg(nf_test_relerr(a, b, 1) < TOL_FWD * 10, "<im2col(x), C> = %.12g, <x, col2im(C)> = %.12g", a, b);
    /* the centre tap of pixel (1, 2) of image 1 is that pixel itself; its corner (0, 0) tap reads (0, 1) */
    const size_t row = ((size_t)1 * H + 1) * W + 2;
    for (int ch = 0; ch < CIN; ch++) {
        ck_assert(cols[row * k * k * CIN + 4 * CIN + ch] == x[(((size_t)1 * H + 1) * W + 2) * CIN + ch]);
        ck_assert(cols[row * k * k * CIN + ch] == x[(((size_t)1 * H + 0) * W + 1) * CIN + ch]);
    }
    /* pixel (0, 0): its top row and left column of taps are padding */
    for (int t = 0; t < k * k; t++)
        if (t / k == 0 || t % k == 0)
            for (int ch = 0; ch < CIN; ch++) ck_assert(cols[(size_t)t * CIN + ch] == 0);
    free(x), free(C), free(cols), free(back);
}
END_TEST

START_TEST(test_errors)
{
    nf_params *P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(1, 0);
    nf_conv2d L;
    ck_assert_int_eq(nf_conv2d_init(&L, P, "c", 3, 2, 2, rng), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "k=2"));
    ck_assert_int_eq(nf_conv2d_init(&L, P, "c", 0, 2, 3, rng), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "in=0"));
    ck_assert_int_eq(nf_conv2d_init(&L, P, "c", 3, 2, 3, NULL), NF_EINVAL);
    nf_convnet m;
    nf_convnet_config cfg = {.in = 2, .ctx = -1, .hidden = 4, .out = 2, .k = 3, .zero_init_output = 1};
    ck_assert_int_eq(nf_convnet_init(&m, P, "net", &cfg, rng), NF_EINVAL);
    cfg.ctx = 0, cfg.k = 4;
    ck_assert_int_eq(nf_convnet_init(&m, P, "net2", &cfg, rng), NF_EINVAL);
    nf_rng_free(rng);
    nf_params_free(P);
}
END_TEST

/* ---- the conv net against a composition of naive layers ---- */

typedef struct net_case {
    nf_convnet m;
    nf_params *P;
    nf_real *x, *ctx, *y, *g, *ws;
    int k, C;
} net_case;

static void net_setup(net_case *c, int k, int C, int hidden, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->k = k, c->C = C;
    c->P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(seed, 0);
    nf_convnet_config cfg = {.in = CIN, .ctx = C, .hidden = hidden, .out = COUT, .k = k, .zero_init_output = 1};
    ck_assert_int_eq(nf_convnet_init(&c->m, c->P, "net", &cfg, rng), NF_OK);
    for (size_t i = 0; i < c->P->n; i++) c->P->value[i] += (nf_real)(0.3 * nf_rng_normal(rng)); /* leave zero init */
    nf_rng_free(rng);
    c->x = filled((size_t)N * H * W * CIN, 1.2, seed + 1);
    c->ctx = filled((size_t)N * (C ? C : 1), 0.9, seed + 2);
    c->y = filled((size_t)N * H * W * COUT, 1, seed + 3);
    c->g = filled((size_t)N * H * W * COUT, 0.8, seed + 4);
    c->ws = calloc(nf_convnet_workspace(&c->m, N, H, W) + 1, sizeof(nf_real));
}

static void net_teardown(net_case *c)
{
    nf_params_free(c->P);
    free(c->x), free(c->ctx), free(c->y), free(c->g), free(c->ws);
}

static const nf_real *net_ctx(const net_case *c) { return c->C ? c->ctx : NULL; }

static void ref_net(double *out, const net_case *c)
{
    const nf_convnet *m = &c->m;
    const int Hd = m->cfg.hidden;
    const size_t R = (size_t)N * H * W;
    double *z1 = malloc(R * Hd * sizeof *z1), *z2 = malloc(R * Hd * sizeof *z2);
    nf_real *a = malloc(R * Hd * sizeof *a);
    const nf_real *V = c->P->value;
    ref_conv(z1, c->x, V + m->in.w, V + m->in.b, N, H, W, CIN, Hd, c->k);
    for (size_t r = 0; r < R; r++)
        for (int o = 0; o < Hd; o++) {
            double v = z1[r * Hd + o];
            for (int q = 0; q < c->C; q++)
                v += (double)V[m->wc + (size_t)o * c->C + q] * c->ctx[(r / (H * W)) * c->C + q];
            a[r * Hd + o] = (nf_real)(v > 0 ? v : 0);
        }
    ref_conv(z2, a, V + m->mid.w, V + m->mid.b, N, H, W, Hd, Hd, 1);
    for (size_t e = 0; e < R * Hd; e++) a[e] = (nf_real)(z2[e] > 0 ? z2[e] : 0);
    ref_conv(out, a, V + m->out.w, V + m->out.b, N, H, W, Hd, COUT, c->k);
    free(z1), free(z2), free(a);
}

START_TEST(test_convnet_forward_reference)
{
    const int ks[] = {3, 1, 3}, Cs[] = {0, 2, 3};
    for (int t = 0; t < 3; t++) {
        net_case c;
        net_setup(&c, ks[t], Cs[t], 5, 40 + t);
        const size_t ny = (size_t)N * H * W * COUT;
        double *ref = malloc(ny * sizeof *ref);
        nf_convnet_forward(&c.m, c.P, c.ws, c.y, c.x, net_ctx(&c), N, H, W);
        ref_net(ref, &c);
        for (size_t e = 0; e < ny; e++)
            ck_assert_msg(nf_test_relerr(c.y[e], ref[e], 1) < 10 * TOL_FWD,
                          "k=%d C=%d: y[%zu] = %.10g, reference %.10g", ks[t], Cs[t], e, (double)c.y[e], ref[e]);
        free(ref);
        net_teardown(&c);
    }
}
END_TEST

START_TEST(test_convnet_zero_init)
{
    nf_params *P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(5, 0);
    nf_convnet m;
    nf_convnet_config cfg = {.in = CIN, .ctx = 2, .hidden = 6, .out = COUT, .k = 3, .zero_init_output = 1};
    ck_assert_int_eq(nf_convnet_init(&m, P, "net", &cfg, rng), NF_OK);
    ck_assert_ptr_nonnull(nf_params_find(P, "net.in.weight"));
    ck_assert_ptr_nonnull(nf_params_find(P, "net.mid.bias"));
    ck_assert_ptr_nonnull(nf_params_find(P, "net.out.weight"));
    ck_assert_ptr_nonnull(nf_params_find(P, "net.ctx.weight"));
    nf_real *x = filled((size_t)N * H * W * CIN, 1, 1), *ctx = filled(N * 2, 1, 2);
    nf_real *y = filled((size_t)N * H * W * COUT, 1, 3);
    nf_real *ws = calloc(nf_convnet_workspace(&m, N, H, W), sizeof(nf_real));
    nf_convnet_forward(&m, P, ws, y, x, ctx, N, H, W);
    for (int e = 0; e < N * H * W * COUT; e++) ck_assert(y[e] == 0);
    free(x), free(ctx), free(y), free(ws);
    nf_rng_free(rng);
    nf_params_free(P);
}
END_TEST

#ifdef NF_DOUBLE
typedef double (*loss_fn)(void *);

/* Fourth-order central difference of f at *t. */
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

/* analytic[i] - fill[i] against the finite difference over theta[i], every entry. */
static void check_fd(const char *what, int k, loss_fn f, void *c, nf_real *theta, const nf_real *analytic,
                     const nf_real *fill, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        double fd = finite_diff(f, c, &theta[i]), an = (double)analytic[i] - (fill ? (double)fill[i] : 0);
        ck_assert_msg(nf_test_relerr(an, fd, 1e-3) < TOL_GRAD, "k=%d %s[%zu]: analytic %.12g, finite difference %.12g",
                      k, what, i, an, fd);
    }
}

typedef struct conv_case {
    nf_conv2d L;
    nf_params *P;
    nf_real *x, *y, *g, *ws;
} conv_case;

static double conv_loss(void *p)
{
    conv_case *c = p;
    nf_conv2d_forward(&c->L, c->P, c->ws, c->y, c->x, N, H, W);
    double s = 0;
    for (int e = 0; e < N * H * W * c->L.cout; e++) s += (double)c->g[e] * c->y[e];
    return s;
}

START_TEST(test_conv_gradients)
{
    const int k = shapes[_i].k, cin = shapes[_i].cin, cout = shapes[_i].cout;
    conv_case c;
    c.P = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(77 + _i, 0);
    ck_assert_int_eq(nf_conv2d_init(&c.L, c.P, "conv", cin, cout, k, rng), NF_OK);
    nf_rng_free(rng);
    const size_t nx = (size_t)N * H * W * cin, ny = (size_t)N * H * W * cout, np = c.P->n;
    c.x = filled(nx, 1.3, 11), c.y = filled(ny, 1, 12), c.g = filled(ny, 0.7, 13);
    c.ws = calloc(nf_conv2d_workspace(&c.L, N, H, W) + 1, sizeof(nf_real));
    nf_real *dx = filled(nx, 0.5, 14), *dx0 = malloc(nx * sizeof *dx0), *gp0 = filled(np, 0.5, 15);
    memcpy(dx0, dx, nx * sizeof *dx);
    memcpy(c.P->grad, gp0, np * sizeof *gp0);
    conv_loss(&c);
    nf_conv2d_backward(&c.L, c.P, c.ws, dx, c.g, c.x, N, H, W);
    nf_real *gp = malloc(np * sizeof *gp);
    memcpy(gp, c.P->grad, np * sizeof *gp);
    check_fd("W", k, conv_loss, &c, c.P->value + c.L.w, gp + c.L.w, gp0 + c.L.w, (size_t)cout * k * k * cin);
    check_fd("bias", k, conv_loss, &c, c.P->value + c.L.b, gp + c.L.b, gp0 + c.L.b, cout);
    check_fd("x", k, conv_loss, &c, c.x, dx, dx0, nx);
    /* dx = NULL: the parameter gradients alone, the same again */
    memset(c.P->grad, 0, np * sizeof(nf_real));
    nf_conv2d_backward(&c.L, c.P, c.ws, NULL, c.g, c.x, N, H, W);
    for (size_t i = 0; i < np; i++)
        ck_assert(nf_test_relerr(c.P->grad[i], gp[i] - gp0[i], 1e-9) < 1e-12);
    free(dx), free(dx0), free(gp0), free(gp);
    free(c.x), free(c.y), free(c.g), free(c.ws);
    nf_params_free(c.P);
}
END_TEST

static double net_loss(void *p)
{
    net_case *c = p;
    nf_convnet_forward(&c->m, c->P, c->ws, c->y, c->x, net_ctx(c), N, H, W);
    double s = 0;
    for (int e = 0; e < N * H * W * COUT; e++) s += (double)c->g[e] * c->y[e];
    return s;
}

START_TEST(test_convnet_gradients)
{
    const int ks[] = {3, 1, 3, 5}, Cs[] = {3, 2, 0, 1};
    net_case c;
    net_setup(&c, ks[_i], Cs[_i], 6, 60 + _i);
    const size_t nx = (size_t)N * H * W * CIN, nc = (size_t)N * c.C, np = c.P->n;
    nf_real *dx = filled(nx, 0.5, 91), *dx0 = malloc(nx * sizeof *dx0), *gp0 = filled(np, 0.5, 92);
    nf_real *dctx = filled(nc + 1, 0.5, 93), *dctx0 = malloc((nc + 1) * sizeof *dctx0);
    memcpy(dx0, dx, nx * sizeof *dx);
    memcpy(dctx0, dctx, (nc + 1) * sizeof *dctx);
    memcpy(c.P->grad, gp0, np * sizeof *gp0);
    net_loss(&c);
    nf_convnet_backward(&c.m, c.P, c.ws, dx, c.C ? dctx : NULL, c.g, c.x, net_ctx(&c), N, H, W);
    nf_real *gp = malloc(np * sizeof *gp);
    memcpy(gp, c.P->grad, np * sizeof *gp);
    check_fd("theta", ks[_i], net_loss, &c, c.P->value, gp, gp0, np);
    check_fd("x", ks[_i], net_loss, &c, c.x, dx, dx0, nx);
    check_fd("ctx", ks[_i], net_loss, &c, c.ctx, dctx, dctx0, nc);
    /* backward leaves the caches intact: a second call adds the same gradients again */
    net_loss(&c);
    memcpy(c.P->grad, gp, np * sizeof *gp);
    nf_convnet_backward(&c.m, c.P, c.ws, NULL, NULL, c.g, c.x, net_ctx(&c), N, H, W);
    nf_convnet_backward(&c.m, c.P, c.ws, NULL, NULL, c.g, c.x, net_ctx(&c), N, H, W);
    for (size_t i = 0; i < np; i++) {
        double want = (double)gp[i] + 2 * ((double)gp[i] - gp0[i]);
        ck_assert_msg(nf_test_relerr(c.P->grad[i], want, 1e-9) < 1e-10, "theta[%zu]: twice %.12g, expected %.12g", i,
                      (double)c.P->grad[i], want);
    }
    free(dx), free(dx0), free(gp0), free(gp), free(dctx), free(dctx0);
    net_teardown(&c);
}
END_TEST
#endif

static Suite *conv_suite(void)
{
    Suite *s = suite_create("conv");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_conv_forward_reference);
    tcase_add_test(t, test_im2col_adjoint);
    tcase_add_test(t, test_errors);
    tcase_add_test(t, test_convnet_forward_reference);
    tcase_add_test(t, test_convnet_zero_init);
#ifdef NF_DOUBLE
    tcase_add_loop_test(t, test_conv_gradients, 0, NSHAPES);
    tcase_add_loop_test(t, test_convnet_gradients, 0, 4);
#endif
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(conv_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
