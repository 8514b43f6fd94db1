/* tests/check_bij_autoregressive.c - maf, iaf, spline-ar, spline-iaf and spline-coupling, and the
 * Jacobi / sequential solver of flows/jacobi.c.
 *
 * The table runs the shared checks (round trip with a far-tail row, brute-force Jacobian
 * log-determinant, finite-difference gradients through forward and inverse) on every type with and
 * without context, several MADE orders, residual on and off, 4 and 8 bins, D from 1 to 8.  Then:
 * Jacobi against sequential inversion on a 43-D maf (random and contracting MADE), AUTO falling back
 * to sequential when the sweep cap is too small, gradients after a Jacobi slow pass, the solver on a
 * linear recursion with a known solution, identity at initialisation, and error paths.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/rng.h"
#include "flows/jacobi.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL_AGREE 1e-5
#define TOL_EXACT 1e-12
#else
#define TOL_AGREE 2e-3
#define TOL_EXACT 1e-5
#endif

/* The MADE types start from a random (untrained) MADE, zero_init=0, with the harness's parameter
 * noise off (skip_param_randomize = 1): that noise would also hit the MADE's masked weights, which
 * are kept at zero by masking their gradients, and break the autoregressive structure. */
static const nf_bij_case cases[] = {
    /* maf: affine MADE, forward fast */
    {"maf", "zero_init=0,hidden=16", 1, 0, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=16", 2, 0, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=16,layers=1", 3, 2, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=12,order=reversed,activation=tanh", 5, 0, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=16,order=random,residual=1,clamp=1.5", 6, 3, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=20,layers=0", 4, 1, 0, 0, 1, 0},
    {"maf", "zero_init=0,hidden=16,order=random,activation=elu", 8, 0, 2.1, 0, 1, 0},
    /* iaf: the same map, inverse fast */
    {"iaf", "zero_init=0,hidden=16", 1, 2, 0, 0, 1, 0},
    {"iaf", "zero_init=0,hidden=16", 3, 0, 0, 0, 1, 0},
    {"iaf", "zero_init=0,hidden=16,order=reversed,residual=1", 5, 2, 0, 0, 1, 0},
    {"iaf", "zero_init=0,hidden=16,order=random,activation=silu", 8, 1, 0, 0, 1, 0},
    /* spline-ar */
    {"spline-ar", "zero_init=0,hidden=16,bins=4", 1, 0, 0, 0, 1, 0},
    {"spline-ar", "zero_init=0,hidden=16,bins=8", 2, 0, 0, 0, 1, 0},
    {"spline-ar", "zero_init=0,hidden=16,bins=4,tail=2.5", 3, 2, 0, 0, 1, 0},
    {"spline-ar", "zero_init=0,hidden=16,bins=8,order=reversed,residual=1", 4, 0, 0, 0, 1, 0},
    {"spline-ar", "zero_init=0,hidden=16,bins=5,order=random,activation=tanh", 6, 3, 0, 0, 1, 0},
    {"spline-ar", "zero_init=0,hidden=12,bins=8,order=random", 8, 0, 1.9, 0, 1, 0},
    /* spline-iaf */
    {"spline-iaf", "zero_init=0,hidden=16,bins=4", 1, 1, 0, 0, 1, 0},
    {"spline-iaf", "zero_init=0,hidden=16,bins=8", 3, 0, 0, 0, 1, 0},
    {"spline-iaf", "zero_init=0,hidden=16,bins=6,order=reversed,residual=1", 5, 2, 0, 0, 1, 0},
    {"spline-iaf", "zero_init=0,hidden=12,bins=8,order=random,tail=4", 7, 0, 0, 0, 1, 0},
    /* spline-coupling */
    {"spline-coupling", "hidden=16,bins=4", 2, 0, 0, 0, 0, 0},
    {"spline-coupling", "hidden=16,bins=8,mask=alt", 3, 2, 0, 0, 0, 0},
    {"spline-coupling", "hidden=16,bins=8,flip=1,residual=0,layers=2", 5, 0, 0, 0, 0, 0},
    {"spline-coupling", "hidden=16,bins=4,mask=alt,flip=1,activation=tanh", 6, 1, 0, 0, 0, 0},
    {"spline-coupling", "hidden=16,bins=8,tail=2,layers=1", 8, 3, 1.7, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

#ifdef NF_DOUBLE
/* The harness's gradient check perturbs every parameter, including the MADE's masked weights, whose
 * gradient is masked to zero by design; for the MADE types this suite runs the same check itself and
 * skips the masked entries, recognised as the exact zeros of a zero_init=0 network (every live
 * weight and bias is drawn from a continuous distribution). */
static double made_loss(nf_bijector *b, int inverse_dir, const nf_real *in, const nf_real *ctx, const nf_real *w,
                        const nf_real *u, nf_real *out, nf_real *ld, int n, nf_real *ws)
{
    memset(ld, 0, n * sizeof(nf_real));
    int rc = inverse_dir ? b->type->inverse(b, out, ld, in, ctx, n, ws) : b->type->forward(b, out, ld, in, ctx, n, ws);
    ck_assert_msg(rc == NF_OK, "%s: %s", b->type->name, nf_strerror_last());
    double L = 0;
    for (int i = 0; i < n * b->dim; i++) L += (double)w[i] * out[i];
    for (int i = 0; i < n; i++) L += (double)u[i] * ld[i];
    return L;
}

static void made_gradients(const nf_bij_case *c, int inverse_dir)
{
    enum { N = 6 };
    const int D = c->dim, C = c->ctx_dim;
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(2385, 0);
    nf_bijector b;
    ck_assert_int_eq(nf_bijector_create(&b, nf_bijector_type_find(c->type_name), D, C, "t0", c->options, P, S, rng), NF_OK);
    b.invert_method = NF_INVERT_SEQUENTIAL;
    nf_real *ws = calloc(b.type->workspace(&b, N), sizeof(nf_real));
    nf_real in[N * 8], out[N * 8], w[N * 8], din[N * 8] = {0}, ctx[N * 4], dctx[N * 4] = {0}, u[N], ld[N];
    nf_test_fill_normal(in, (size_t)N * D, c->input_scale > 0 ? c->input_scale : 1.3, 17);
    nf_test_fill_normal(ctx, (size_t)N * C, 0.8, 23);
    nf_test_fill_normal(w, (size_t)N * D, 0.7, 29);
    nf_test_fill_normal(u, N, 0.9, 31);
    const nf_real *cx = C ? ctx : NULL;
    made_loss(&b, inverse_dir, in, cx, w, u, out, ld, N, ws);
    nf_params_zero_grad(P);
    int rc = inverse_dir ? b.type->inverse_backward(&b, din, C ? dctx : NULL, w, u, in, out, cx, N, ws)
                         : b.type->backward(&b, din, C ? dctx : NULL, w, u, in, out, cx, N, ws);
    ck_assert_int_eq(rc, NF_OK);
    nf_real *grad = malloc(P->n * sizeof(nf_real));
    memcpy(grad, P->grad, P->n * sizeof(nf_real));
    const double eps = 1e-6;
    const char *dir = inverse_dir ? "inverse" : "forward";
    size_t checked = 0;
    for (size_t k = 0; k < (P->n < 400 ? P->n : 400); k++) {
        size_t p = P->n < 400 ? k : nf_rng_index(rng, P->n);
        if (P->value[p] == 0) {
            ck_assert_msg(grad[p] == 0, "%s(%s) %s: masked weight %zu has gradient %g", c->type_name, c->options, dir, p,
                          (double)grad[p]);
            continue;
        }
        nf_real keep = P->value[p];
        P->value[p] = keep + eps;
        double Lp = made_loss(&b, inverse_dir, in, cx, w, u, out, ld, N, ws);
        P->value[p] = keep - eps;
        double Lm = made_loss(&b, inverse_dir, in, cx, w, u, out, ld, N, ws);
        P->value[p] = keep;
        double fd = (Lp - Lm) / (2 * eps);
        ck_assert_msg(nf_test_relerr(grad[p], fd, 1e-2) < 1e-6, "%s(%s) %s: d/dtheta[%zu] analytic %.10g, FD %.10g",
                      c->type_name, c->options, dir, p, (double)grad[p], fd);
        checked++;
    }
    ck_assert(checked > 20);
    for (int pass = 0; pass < 2; pass++) {
        nf_real *v = pass ? ctx : in, *g = pass ? dctx : din;
        for (int i = 0; i < N * (pass ? C : D); i++) {
            nf_real keep = v[i];
            v[i] = keep + eps;
            double Lp = made_loss(&b, inverse_dir, in, cx, w, u, out, ld, N, ws);
            v[i] = keep - eps;
            double Lm = made_loss(&b, inverse_dir, in, cx, w, u, out, ld, N, ws);
            v[i] = keep;
            double fd = (Lp - Lm) / (2 * eps);
            ck_assert_msg(nf_test_relerr(g[i], fd, 1e-2) < 1e-6, "%s(%s) %s: d/d%s[%d] analytic %.10g, FD %.10g",
                          c->type_name, c->options, dir, pass ? "ctx" : "input", i, (double)g[i], fd);
        }
    }
    free(grad);
    free(ws);
    nf_bijector_destroy(&b);
    nf_rng_free(rng);
    nf_params_free(P);
    nf_params_free(S);
}
#endif

START_TEST(test_table)
{
    const nf_bij_case *c = &cases[_i];
    if (strcmp(c->type_name, "spline-coupling") == 0) {
        nf_check_bijector_all(c);
        return;
    }
    nf_check_bijector_roundtrip(c);
    nf_check_bijector_logdet(c);
#ifdef NF_DOUBLE
    made_gradients(c, 0);
    made_gradients(c, 1);
#endif
}
END_TEST

/* A bijector with its stores and workspace for batches of up to n. */
typedef struct tb {
    nf_bijector b;
    nf_params *P, *S;
    nf_real *ws;
    int n;
} tb;

static void tb_open(tb *t, const char *type, int D, int C, const char *opts, int n, double perturb, uint64_t seed)
{
    t->P = nf_params_alloc();
    t->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(seed, 0);
    int rc = nf_bijector_create(&t->b, nf_bijector_type_find(type), D, C, "ar0", opts, t->P, t->S, rng);
    ck_assert_msg(rc == NF_OK, "%s(%s): %s", type, opts, nf_strerror_last());
    /* multiplicative noise keeps the MADE's masked (zero) weights at zero */
    for (size_t i = 0; i < t->P->n; i++) t->P->value[i] *= (nf_real)(1 + perturb * nf_rng_normal(rng));
    nf_rng_free(rng);
    t->n = n;
    t->ws = calloc(t->b.type->workspace(&t->b, n), sizeof(nf_real));
}

static void tb_close(tb *t)
{
    nf_bijector_destroy(&t->b);
    nf_params_free(t->P);
    nf_params_free(t->S);
    free(t->ws);
}

static double max_abs_diff(const nf_real *a, const nf_real *b, size_t m)
{
    double d = 0;
    for (size_t i = 0; i < m; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* Slow direction of `type` by `method`; returns last_sweeps. */
static int slow(tb *t, nf_invert_method method, nf_real *out, nf_real *ld, const nf_real *in, const nf_real *ctx,
                int use_forward)
{
    t->b.invert_method = method;
    memset(ld, 0, t->n * sizeof(nf_real));
    int rc = use_forward ? t->b.type->forward(&t->b, out, ld, in, ctx, t->n, t->ws)
                         : t->b.type->inverse(&t->b, out, ld, in, ctx, t->n, t->ws);
    ck_assert_msg(rc == NF_OK, "%s slow direction (method %d): %s", t->b.type->name, (int)method, nf_strerror_last());
    return t->b.last_sweeps;
}

/* Jacobi against sequential on a 43-D maf: perturb = spread of the random weights. */
static void jacobi_vs_sequential(double perturb, double contract, int *sweeps_out)
{
    const int D = 43, n = 9;
    tb t;
    tb_open(&t, "maf", D, 0, "hidden=64,order=random,zero_init=0", n, perturb, 4321);
    for (size_t i = 0; i < t.P->n; i++) t.P->value[i] *= (nf_real)contract;
    nf_real *z = malloc((size_t)n * D * sizeof(nf_real)), *xs = malloc((size_t)n * D * sizeof(nf_real));
    nf_real *xj = malloc((size_t)n * D * sizeof(nf_real)), lds[9], ldj[9];
    nf_test_fill_normal(z, (size_t)n * D, 1.15, 99);
    int seq = slow(&t, NF_INVERT_SEQUENTIAL, xs, lds, z, NULL, 0);
    ck_assert_int_eq(seq, D);
    int jac = slow(&t, NF_INVERT_JACOBI, xj, ldj, z, NULL, 0);
    ck_assert_msg(jac > 0 && jac <= D, "Jacobi used %d sweeps for D = %d", jac, D);
    double dx = max_abs_diff(xs, xj, (size_t)n * D), dl = max_abs_diff(lds, ldj, n);
    ck_assert_msg(dx < TOL_AGREE && dl < 10 * TOL_AGREE, "Jacobi vs sequential: max |dx| = %g, max |dlogdet| = %g "
                  "after %d sweeps", dx, dl, jac);
    /* the solution really inverts the forward map */
    nf_real *z2 = malloc((size_t)n * D * sizeof(nf_real)), ld2[9] = {0};
    ck_assert_int_eq(t.b.type->forward(&t.b, z2, ld2, xj, NULL, n, t.ws), NF_OK);
    ck_assert_msg(max_abs_diff(z2, z, (size_t)n * D) < TOL_AGREE, "forward(Jacobi inverse) differs from z by %g",
                  max_abs_diff(z2, z, (size_t)n * D));
    *sweeps_out = jac;
    free(z); free(xs); free(xj); free(z2);
    tb_close(&t);
}

START_TEST(test_jacobi_random_made)
{
    int sweeps;
    jacobi_vs_sequential(0.3, 1.0, &sweeps);
    fprintf(stderr, "43-D maf, random MADE: Jacobi took %d sweeps\n", sweeps);
}
END_TEST

/* weights 2.5 times larger: far from contracting, Jacobi needs many sweeps but ends exact */
START_TEST(test_jacobi_strong_made)
{
    int sweeps;
    jacobi_vs_sequential(0.3, 2.5, &sweeps);
    fprintf(stderr, "43-D maf, strong MADE: Jacobi took %d sweeps\n", sweeps);
}
END_TEST

START_TEST(test_jacobi_contracting_made)
{
    int sweeps;
    jacobi_vs_sequential(0.3, 0.05, &sweeps);
    fprintf(stderr, "43-D maf, contracting MADE: Jacobi took %d sweeps\n", sweeps);
    /* a contracting map converges long before the 43 passes sequential needs */
    ck_assert_msg(sweeps < 20, "contracting MADE: Jacobi took %d sweeps", sweeps);
}
END_TEST

/* AUTO on a residual MADE (no level-by-level passes, so AUTO means Jacobi): with a sweep cap too
 * small to converge it runs the cap's Jacobi sweeps, falls back, and finishes sequentially with
 * exactly the sequential answer, while JACOBI alone stops at the cap with a wrong one; with room to
 * converge (a contracting map) AUTO stays on Jacobi and needs fewer passes than sequential.  A plain
 * MADE, by contrast, makes AUTO take the sequential solve at once (no Jacobi sweep, no fallback). */
START_TEST(test_auto_falls_back)
{
    const int D = 43, n = 5;
    tb t;
    tb_open(&t, "maf", D, 2, "hidden=48,layers=2,residual=1,zero_init=0", n, 0.3, 777);
    for (size_t i = 0; i < t.P->n; i++) t.P->value[i] *= 2.5; /* far from contracting */
    nf_real *z = malloc((size_t)n * D * sizeof(nf_real)), *xs = malloc((size_t)n * D * sizeof(nf_real));
    nf_real *xa = malloc((size_t)n * D * sizeof(nf_real)), *xj = malloc((size_t)n * D * sizeof(nf_real));
    nf_real ctx[10], lds[5], lda[5], ldj[5];
    nf_test_fill_normal(z, (size_t)n * D, 1.2, 5);
    nf_test_fill_normal(ctx, 10, 0.9, 6);
    int used = slow(&t, NF_INVERT_SEQUENTIAL, xs, lds, z, ctx, 0);
    ck_assert_msg(used == D && !t.b.last_fell_back, "sequential used %d passes (fell back %d), expected %d", used,
                  t.b.last_fell_back, D);
    t.b.jacobi_max_sweeps = 2;
    t.b.jacobi_tol = 1e-300;
    used = slow(&t, NF_INVERT_AUTO, xa, lda, z, ctx, 0);
    ck_assert_msg(t.b.last_fell_back, "AUTO on a residual MADE with a cap of 2 sweeps did not fall back (%d passes)",
                  used);
    ck_assert_msg(used == D, "AUTO with cap 2 used %d passes (2 Jacobi sweeps + %d sequential passes expected)", used,
                  D - 2);
    ck_assert_msg(max_abs_diff(xa, xs, (size_t)n * D) < TOL_EXACT, "AUTO fallback differs from sequential by %g",
                  max_abs_diff(xa, xs, (size_t)n * D));
    ck_assert(max_abs_diff(lda, lds, n) < 10 * TOL_EXACT);
    used = slow(&t, NF_INVERT_JACOBI, xj, ldj, z, ctx, 0);
    ck_assert_int_eq(used, 2);
    ck_assert(!t.b.last_fell_back);
    ck_assert_msg(max_abs_diff(xj, xs, (size_t)n * D) > 0.05, "two Jacobi sweeps should not have converged (%g)",
                  max_abs_diff(xj, xs, (size_t)n * D));
    /* contracting: AUTO converges by Jacobi, in fewer passes than the D sequential ones */
    for (size_t i = 0; i < t.P->n; i++) t.P->value[i] *= (nf_real)(0.05 / 2.5);
    slow(&t, NF_INVERT_SEQUENTIAL, xs, lds, z, ctx, 0);
    t.b.jacobi_max_sweeps = D + 1;
    t.b.jacobi_tol = TOL_EXACT / 10;
    used = slow(&t, NF_INVERT_AUTO, xa, lda, z, ctx, 0);
    ck_assert_msg(!t.b.last_fell_back && used < D / 2, "contracting residual MADE: AUTO used %d passes (fell back %d)",
                  used, t.b.last_fell_back);
    ck_assert_msg(max_abs_diff(xa, xs, (size_t)n * D) < TOL_AGREE, "AUTO (Jacobi) differs from sequential by %g",
                  max_abs_diff(xa, xs, (size_t)n * D));
    free(z); free(xs); free(xa); free(xj);
    tb_close(&t);
    /* a plain MADE: AUTO is the exact level-by-level solve, D passes, never Jacobi */
    tb_open(&t, "maf", D, 0, "hidden=48,zero_init=0", 2, 0.3, 778);
    for (size_t i = 0; i < t.P->n; i++) t.P->value[i] *= 0.05; /* Jacobi would converge quickly */
    nf_real zz[2 * 43], xx[2 * 43], ld2[2];
    nf_test_fill_normal(zz, 2 * 43, 1.2, 7);
    t.b.jacobi_max_sweeps = 2;
    used = slow(&t, NF_INVERT_AUTO, xx, ld2, zz, NULL, 0);
    ck_assert_msg(used == D && !t.b.last_fell_back, "plain MADE: AUTO used %d passes (fell back %d), expected the %d "
                  "sequential ones", used, t.b.last_fell_back, D);
    tb_close(&t);
}
END_TEST

/* The slow direction of each autoregressive type by Jacobi equals the sequential one. */
START_TEST(test_jacobi_all_types)
{
    const char *types[4] = {"maf", "iaf", "spline-ar", "spline-iaf"};
    const int fwd_slow[4] = {0, 1, 0, 1};
    for (int k = 0; k < 4; k++) {
        const int D = 6, n = 7;
        tb t;
        tb_open(&t, types[k], D, 2, k < 2 ? "hidden=24,order=random,zero_init=0" : "hidden=24,order=random,bins=5,zero_init=0",
                n, 0.25, 31 + k);
        nf_real in[42], a[42], b[42], ctx[14], la[7], lb[7];
        nf_test_fill_normal(in, 42, 1.4, 8 + k);
        nf_test_fill_normal(ctx, 14, 0.7, 9);
        slow(&t, NF_INVERT_SEQUENTIAL, a, la, in, ctx, fwd_slow[k]);
        int used = slow(&t, NF_INVERT_JACOBI, b, lb, in, ctx, fwd_slow[k]);
        ck_assert(used >= 1 && used <= D);
        ck_assert_msg(max_abs_diff(a, b, 42) < TOL_AGREE && max_abs_diff(la, lb, 7) < 10 * TOL_AGREE,
                      "%s: Jacobi vs sequential differ by %g", types[k], max_abs_diff(a, b, 42));
        tb_close(&t);
    }
}
END_TEST

/* The exact level-by-level solve runs parts of the rows on the pool's threads: the same values to
 * the bit on one thread and on two, for each autoregressive type (slow inverse or slow forward). */
START_TEST(test_levels_threads)
{
    const char *types[4] = {"maf", "iaf", "spline-ar", "spline-iaf"};
    const int fwd_slow[4] = {0, 1, 0, 1};
    enum { D = 8, C = 2, N = 701 };
    nf_real *in = malloc(N * D * sizeof(nf_real)), *ctx = malloc(N * C * sizeof(nf_real));
    nf_real *a = malloc(N * D * sizeof(nf_real)), *b = malloc(N * D * sizeof(nf_real)), la[N], lb[N];
    nf_test_fill_normal(in, N * D, 1.3, 61);
    nf_test_fill_normal(ctx, N * C, 0.8, 62);
    for (int k = 0; k < 4; k++) {
        tb t;
        tb_open(&t, types[k], D, C, k < 2 ? "hidden=64,order=random,zero_init=0" : "hidden=64,bins=6,zero_init=0",
                N, 0.25, 71 + k);
        nf_blas_set_threads(1);
        int used = slow(&t, NF_INVERT_SEQUENTIAL, a, la, in, ctx, fwd_slow[k]);
        ck_assert_int_eq(used, D);
        nf_blas_set_threads(2);
        used = slow(&t, NF_INVERT_AUTO, b, lb, in, ctx, fwd_slow[k]);
        ck_assert_int_eq(used, D);
        for (int i = 0; i < N * D; i++)
            ck_assert_msg(a[i] == b[i], "%s: entry %d is %.10g on one thread, %.10g on two", types[k], i, (double)a[i],
                          (double)b[i]);
        for (int r = 0; r < N; r++) ck_assert(la[r] == lb[r]);
        tb_close(&t);
    }
    nf_blas_set_threads(0);
    free(in); free(ctx); free(a); free(b);
}
END_TEST

#ifdef NF_DOUBLE
/* Gradients after a Jacobi slow pass equal those after a sequential one: backward reruns the
 * conditioner at the solution, so what the solver left in the workspace does not matter. */
START_TEST(test_backward_after_jacobi)
{
    const char *types[2] = {"maf", "spline-iaf"};
    for (int k = 0; k < 2; k++) {
        const int D = 7, n = 4, use_forward = k == 1;
        tb t;
        tb_open(&t, types[k], D, 2, k == 0 ? "hidden=16,zero_init=0" : "hidden=16,bins=6,zero_init=0", n, 0.3, 55 + k);
        nf_real in[28], out[28], ld[4], ctx[8], w[28], u[4];
        nf_test_fill_normal(in, 28, 1.2, 3);
        nf_test_fill_normal(ctx, 8, 0.8, 4);
        nf_test_fill_normal(w, 28, 0.7, 5);
        nf_test_fill_normal(u, 4, 0.9, 6);
        nf_real *g[2], dctx[2][8];
        for (int m = 0; m < 2; m++) {
            g[m] = calloc(28 + t.P->n, sizeof(nf_real));
            memset(dctx[m], 0, sizeof dctx[m]);
            slow(&t, m == 0 ? NF_INVERT_SEQUENTIAL : NF_INVERT_JACOBI, out, ld, in, ctx, use_forward);
            nf_params_zero_grad(t.P);
            int rc = use_forward ? t.b.type->backward(&t.b, g[m], dctx[m], w, u, in, out, ctx, n, t.ws)
                                 : t.b.type->inverse_backward(&t.b, g[m], dctx[m], w, u, in, out, ctx, n, t.ws);
            ck_assert_int_eq(rc, NF_OK);
            memcpy(g[m] + 28, t.P->grad, t.P->n * sizeof(nf_real));
        }
        ck_assert_msg(max_abs_diff(g[0], g[1], 28 + t.P->n) < 1e-8, "%s: gradients after Jacobi differ by %g",
                      types[k], max_abs_diff(g[0], g[1], 28 + t.P->n));
        ck_assert(max_abs_diff(dctx[0], dctx[1], 8) < 1e-8);
        double norm = 0;
        for (size_t i = 0; i < 28 + t.P->n; i++) norm += fabs(g[0][i]);
        ck_assert(norm > 1e-3);
        free(g[0]); free(g[1]);
        tb_close(&t);
    }
}
END_TEST
#endif

/* The solver on x_i = y_i + a x_{i-1} (degree i+1): solution by recursion. */
typedef struct lin_rec {
    const nf_real *y;
    int D;
    double a;
    int poison;    /* Jacobi sweeps write inf into the last entry this many times */
} lin_rec;

static int lin_sweep(void *user, nf_real *x_new, const nf_real *x_old, int lo, int hi)
{
    lin_rec *L = user;
    for (int i = lo - 1; i < hi; i++) {
        nf_real prev = i ? x_old[i - 1] : 0;
        x_new[i] = (nf_real)(L->y[i] + L->a * prev);
    }
    if (lo < hi && hi == L->D && L->poison > 0) {
        L->poison--;
        x_new[L->D - 1] = (nf_real)INFINITY;
    }
    return NF_OK;
}

START_TEST(test_solver_linear_recursion)
{
    enum { D = 20 };
    nf_real y[D], x[D], tmp[D], ref[D];
    nf_test_fill_normal(y, D, 1.3, 12);
    for (int i = 0; i < D; i++) ref[i] = (nf_real)(y[i] + 0.1 * (i ? ref[i - 1] : 0));
    lin_rec L = {y, D, 0.1, 0};
    nf_jacobi_config cfg = {NF_INVERT_SEQUENTIAL, 1e-9, D + 1, D};
    nf_jacobi_result res;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert_int_eq(res.sweeps, D);
    ck_assert(max_abs_diff(x, ref, D) < TOL_EXACT);
    /* Jacobi: the change shrinks like 0.1^t, so it stops well before D */
    cfg.method = NF_INVERT_JACOBI;
#ifndef NF_DOUBLE
    cfg.tol = 1e-6;
#endif
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert_msg(res.converged && res.sweeps > 3 && res.sweeps < 14, "Jacobi sweeps %d", res.sweeps);
    ck_assert(res.last_change <= cfg.tol);
    ck_assert(max_abs_diff(x, ref, D) < 1e-5);
    /* a = 1.7 does not contract: Jacobi runs to depth and is exact there */
    L.a = 1.7;
    for (int i = 0; i < D; i++) ref[i] = (nf_real)(y[i] + 1.7 * (i ? ref[i - 1] : 0));
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert_int_eq(res.sweeps, D);
    ck_assert(res.converged);
    for (int i = 0; i < D; i++) ck_assert(fabs(x[i] - ref[i]) <= TOL_EXACT * (1 + fabs(ref[i])));
    /* cap 3: JACOBI stops unconverged, AUTO finishes sequentially (3 + 17 passes) */
    cfg.max_sweeps = 3;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert(!res.converged && res.sweeps == 3);
    cfg.method = NF_INVERT_AUTO;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert(res.converged && res.fell_back && res.sweeps == D && res.jacobi_sweeps == 3);
    for (int i = 0; i < D; i++) ck_assert(fabs(x[i] - ref[i]) <= TOL_EXACT * (1 + fabs(ref[i])));
    /* a non-finite iterate: AUTO restarts sequentially, JACOBI reports it */
    L.poison = 1;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_OK);
    ck_assert(res.fell_back && res.sweeps == 1 + D);
    for (int i = 0; i < D; i++) ck_assert(fabs(x[i] - ref[i]) <= TOL_EXACT * (1 + fabs(ref[i])));
    L.poison = 1;
    cfg.method = NF_INVERT_JACOBI;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_ENONFINITE);
    ck_assert(strstr(nf_strerror_last(), "non-finite") != NULL);
    /* bad configuration */
    cfg.depth = 0;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_EINVAL);
    cfg.depth = D;
    cfg.method = (nf_invert_method)9;
    ck_assert_int_eq(nf_jacobi_solve(&cfg, lin_sweep, &L, x, y, tmp, D, &res), NF_EINVAL);
}
END_TEST

/* The row solver on rows of x_i = y_i + a_r x_{i-1}, a different a_r per row: contracting rows stop
 * early (later sweeps see fewer rows), the others need all D; one row blows up at its first sweep. */
enum { RS_ROWS = 7, RS_D = 12 };
typedef struct rows_rec {
    const nf_real *y;
    double a[RS_ROWS];
    int poison_row;      /* its first Jacobi sweep writes inf, once; -1: none */
    long row_passes;     /* sum over calls of the rows handed to the sweep */
} rows_rec;

static int rows_sweep(void *user, nf_real *x_new, const nf_real *x_old, const int *rows, int nrows, int lo, int hi)
{
    rows_rec *R = user;
    ck_assert(nrows >= 1 && nrows <= RS_ROWS && (rows != NULL || nrows == RS_ROWS));
    for (int q = 0; q < nrows; q++) {
        int r = rows ? rows[q] : q;
        if (q) ck_assert(!rows || rows[q] > rows[q - 1]);
        nf_real *xn = x_new + r * RS_D;
        const nf_real *xo = x_old + r * RS_D;
        for (int i = lo - 1; i < hi; i++) xn[i] = (nf_real)(R->y[r * RS_D + i] + R->a[r] * (i ? xo[i - 1] : 0));
        if (r == R->poison_row && lo < hi) {
            xn[RS_D - 1] = (nf_real)INFINITY;
            R->poison_row = -1;
        }
    }
    R->row_passes += nrows;
    return NF_OK;
}

START_TEST(test_solver_rows)
{
    const double a[RS_ROWS] = {0.05, 0.3, 1.7, 0.1, 2.2, 0.02, 0.6};
    nf_real y[RS_ROWS * RS_D], x[RS_ROWS * RS_D], tmp[RS_ROWS * RS_D], ref[RS_ROWS * RS_D];
    int iwork[3 * RS_ROWS];
    nf_test_fill_normal(y, RS_ROWS * RS_D, 1.1, 31);
    for (int r = 0; r < RS_ROWS; r++)
        for (int i = 0; i < RS_D; i++) ref[r * RS_D + i] = (nf_real)(y[r * RS_D + i] + a[r] * (i ? ref[r * RS_D + i - 1] : 0));
    rows_rec R = {y, {0}, -1, 0};
    memcpy(R.a, a, sizeof a);
#ifdef NF_DOUBLE
    const double tol = 1e-10, close = 1e-8;
#else
    const double tol = 1e-6, close = 2e-5;
#endif
    nf_jacobi_config cfg = {NF_INVERT_JACOBI, tol, RS_D + 1, RS_D};
    nf_jacobi_result res;
    /* Jacobi: every row ends at its solution; the rows that contract leave early */
    ck_assert_int_eq(nf_jacobi_solve_rows(&cfg, rows_sweep, &R, x, y, tmp, RS_ROWS, RS_D, iwork, &res), NF_OK);
    ck_assert(res.converged && !res.fell_back && res.sweeps == RS_D && res.jacobi_sweeps == RS_D);
    for (int k = 0; k < RS_ROWS * RS_D; k++) ck_assert(fabs(x[k] - ref[k]) <= close * (1 + fabs(ref[k])));
    /* rows 0, 3, 5 (a = 0.05, 0.1, 0.02) settle (two sweeps within tol) before D: 9 row passes fewer
     * in the double build, 18 in the float one */
    ck_assert_msg(R.row_passes <= (long)RS_ROWS * res.sweeps - 6, "%ld row passes: rows did not leave early", R.row_passes);
    /* AUTO with a row blowing up at sweep 1 and a cap of 3: that row restarts sequentially from y,
     * the two rows that do not contract finish with passes 4..D, all in one list from pass 4 */
    cfg.method = NF_INVERT_AUTO;
    cfg.max_sweeps = 3;
    R.poison_row = 4;
    R.row_passes = 0;
    ck_assert_int_eq(nf_jacobi_solve_rows(&cfg, rows_sweep, &R, x, y, tmp, RS_ROWS, RS_D, iwork, &res), NF_OK);
    ck_assert_msg(res.converged && res.fell_back && res.jacobi_sweeps == 3 && res.sweeps == 3 + RS_D, "sweeps %d (%d Jacobi)",
                  res.sweeps, res.jacobi_sweeps);
    for (int k = 0; k < RS_ROWS * RS_D; k++) ck_assert(fabs(x[k] - ref[k]) <= close * (1 + fabs(ref[k])));
    /* JACOBI reports the blow-up, naming the row */
    cfg.method = NF_INVERT_JACOBI;
    R.poison_row = 2;
    ck_assert_int_eq(nf_jacobi_solve_rows(&cfg, rows_sweep, &R, x, y, tmp, RS_ROWS, RS_D, iwork, &res), NF_ENONFINITE);
    ck_assert(strstr(nf_strerror_last(), "row 2") != NULL);
    /* sequential: D passes over every row, exact */
    cfg.method = NF_INVERT_SEQUENTIAL;
    R.row_passes = 0;
    ck_assert_int_eq(nf_jacobi_solve_rows(&cfg, rows_sweep, &R, x, y, tmp, RS_ROWS, RS_D, iwork, &res), NF_OK);
    ck_assert(res.sweeps == RS_D && R.row_passes == (long)RS_ROWS * RS_D);
    for (int k = 0; k < RS_ROWS * RS_D; k++) ck_assert(fabs(x[k] - ref[k]) <= TOL_EXACT * (1 + fabs(ref[k])));
}
END_TEST

/* maf's element loops cut rows longer than a block (256) into pieces: a 300-D maf still inverts
 * exactly, its log-determinants agree, and (double) its input gradient matches differences at
 * entries on both sides of the cut. */
START_TEST(test_maf_long_rows)
{
    enum { N = 3, D = 300 };
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(2385, 1);
    nf_bijector b;
    ck_assert_int_eq(nf_bijector_create(&b, nf_bijector_type_find("maf"), D, 0, "long", "zero_init=0,hidden=8,layers=1", P, S, rng),
                     NF_OK);
    b.invert_method = NF_INVERT_SEQUENTIAL;
    nf_real *ws = calloc(b.type->workspace(&b, N), sizeof(nf_real));
    nf_real *x = malloc(N * D * sizeof(nf_real)), *y = malloc(N * D * sizeof(nf_real)), *x2 = malloc(N * D * sizeof(nf_real));
    nf_real *w = malloc(N * D * sizeof(nf_real)), *dx = calloc(N * D, sizeof(nf_real)), ld1[N] = {0}, ld2[N] = {0}, u[N];
    nf_test_fill_normal(x, N * D, 0.9, 5);
    nf_test_fill_normal(w, N * D, 0.6, 6);
    nf_test_fill_normal(u, N, 1.1, 7);
    ck_assert_int_eq(b.type->forward(&b, y, ld1, x, NULL, N, ws), NF_OK);
    ck_assert_int_eq(b.type->backward(&b, dx, NULL, w, u, x, y, NULL, N, ws), NF_OK);
    ck_assert_int_eq(b.type->inverse(&b, x2, ld2, y, NULL, N, ws), NF_OK);
    ck_assert_int_eq(b.last_sweeps, D);
    for (int k = 0; k < N * D; k++) ck_assert(fabs(x2[k] - x[k]) <= 20 * TOL_EXACT * (1 + fabs(x[k])));
    for (int r = 0; r < N; r++) ck_assert(fabs(ld1[r] + ld2[r]) <= 1e-3 * TOL_AGREE * (1 + fabs(ld1[r])) + 1e-4);
#ifdef NF_DOUBLE
    const int probe[6] = {0, 17, 255, 256, 299, 2 * D + 257};
    for (int q = 0; q < 6; q++) {
        double L[2];
        for (int side = 0; side < 2; side++) {
            nf_real keep = x[probe[q]], ld[N] = {0};
            x[probe[q]] = keep + (side ? -1e-6 : 1e-6);
            ck_assert_int_eq(b.type->forward(&b, y, ld, x, NULL, N, ws), NF_OK);
            x[probe[q]] = keep;
            L[side] = 0;
            for (int k = 0; k < N * D; k++) L[side] += (double)w[k] * y[k];
            for (int r = 0; r < N; r++) L[side] += (double)u[r] * ld[r];
        }
        double fd = (L[0] - L[1]) / 2e-6;
        ck_assert_msg(nf_test_relerr(dx[probe[q]], fd, 1e-2) < 1e-6, "d/dx[%d] analytic %.10g, FD %.10g", probe[q],
                      (double)dx[probe[q]], fd);
    }
#endif
    free(x); free(y); free(x2); free(w); free(dx); free(ws);
    nf_bijector_destroy(&b);
    nf_rng_free(rng);
    nf_params_free(P);
    nf_params_free(S);
}
END_TEST

/* Zero-initialised conditioners: every type starts as the exact identity. */
START_TEST(test_identity_at_init)
{
    const char *types[5] = {"maf", "iaf", "spline-ar", "spline-iaf", "spline-coupling"};
    for (int k = 0; k < 5; k++) {
        const int D = 5, n = 3;
        tb t;
        tb_open(&t, types[k], D, 1, "hidden=8", n, 0, 1);
        nf_real x[15], y[15], ctx[3] = {0.3, -1.2, 2.1}, ld[3] = {0};
        nf_test_fill_normal(x, 15, 2.3, 4);
        t.b.invert_method = NF_INVERT_AUTO;
        ck_assert_int_eq(t.b.type->forward(&t.b, y, ld, x, ctx, n, t.ws), NF_OK);
        for (int i = 0; i < 15; i++) ck_assert_msg(fabs(y[i] - x[i]) < TOL_EXACT * 10, "%s: not the identity", types[k]);
        for (int i = 0; i < 3; i++) ck_assert(fabs(ld[i]) < TOL_EXACT * 10);
        tb_close(&t);
    }
}
END_TEST

START_TEST(test_errors)
{
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(3, 0);
    nf_bijector b;
    struct {
        const char *type, *opts;
        int D;
        const char *needle;
    } bad[] = {
        {"spline-ar", "bins=1", 3, "bins"},
        {"spline-iaf", "tail=-2", 3, "tail"},
        {"maf", "order=sideways", 3, "order"},
        {"iaf", "residual=1,layers=0", 3, "residual"},
        {"maf", "activation=swish", 3, "activation"},
        {"spline-coupling", "hidden=8", 1, "dimension"},
        {"spline-coupling", "mask=checker", 4, "mask"},
        {"spline-ar", "hidden=8,colour=red", 3, "colour"},
        {"maf", "clamp=0", 3, "clamp"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "e%zu", i);
        int rc = nf_bijector_create(&b, nf_bijector_type_find(bad[i].type), bad[i].D, 0, name, bad[i].opts, P, S, rng);
        ck_assert_msg(rc == NF_EINVAL, "%s(%s) D=%d: expected NF_EINVAL, got %d", bad[i].type, bad[i].opts, bad[i].D, rc);
        ck_assert_msg(strstr(nf_strerror_last(), bad[i].needle) != NULL, "%s(%s): message '%s' does not name '%s'",
                      bad[i].type, bad[i].opts, nf_strerror_last(), bad[i].needle);
    }
    nf_rng_free(rng);
    nf_params_free(P);
    nf_params_free(S);
    /* a NaN input is reported as non-finite, naming the bijector, in each direction */
    const char *types[5] = {"maf", "iaf", "spline-ar", "spline-iaf", "spline-coupling"};
    for (int k = 0; k < 5; k++) {
        tb t;
        tb_open(&t, types[k], 4, 0, k < 4 ? "hidden=8,zero_init=0" : "hidden=8", 2, 0.2, 2);
        nf_real x[8] = {0.3, -0.2, 1.1, 0.7, 0.5, (nf_real)NAN, -0.4, 0.2}, y[8], ld[2] = {0};
        ck_assert_int_eq(t.b.type->forward(&t.b, y, ld, x, NULL, 2, t.ws), NF_ENONFINITE);
        ck_assert_msg(strstr(nf_strerror_last(), "ar0") != NULL, "message: %s", nf_strerror_last());
        ld[0] = ld[1] = 0;
        ck_assert_int_eq(t.b.type->inverse(&t.b, y, ld, x, NULL, 2, t.ws), NF_ENONFINITE);
        tb_close(&t);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bij_autoregressive");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    suite_add_tcase(s, tc);
    TCase *tj = tcase_create("jacobi");
    tcase_set_timeout(tj, 60);
    tcase_add_test(tj, test_jacobi_random_made);
    tcase_add_test(tj, test_jacobi_contracting_made);
    tcase_add_test(tj, test_jacobi_strong_made);
    tcase_add_test(tj, test_auto_falls_back);
    tcase_add_test(tj, test_jacobi_all_types);
    tcase_add_test(tj, test_levels_threads);
#ifdef NF_DOUBLE
    tcase_add_test(tj, test_backward_after_jacobi);
#endif
    tcase_add_test(tj, test_solver_linear_recursion);
    tcase_add_test(tj, test_solver_rows);
    tcase_add_test(tj, test_maf_long_rows);
    suite_add_tcase(s, tj);
    TCase *te = tcase_create("misc");
    tcase_add_test(te, test_identity_at_init);
    tcase_add_test(te, test_errors);
    suite_add_tcase(s, te);
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
