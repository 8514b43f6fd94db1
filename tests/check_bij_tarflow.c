/* tests/check_bij_tarflow.c - the transformer autoregressive flow block (flows/tarflow.c).
 *
 * The table runs the shared checks (tests/testutil.c: round trip, brute-force Jacobian
 * log-determinant, finite-difference gradients of parameters, inputs and context) on small images
 * with patches of 1 and 2 pixels, both token orders, with and without QK normalisation and context,
 * and with D larger than h*w*c.  The specific tests: Jacobi sampling equals token-by-token sampling
 * with the key/value cache (and needs no more sweeps than tokens), the map is autoregressive over
 * tokens in its order (changing token t moves no output token before t), a new block is the
 * identity, bad options are refused, and a gradient handed to the transformer's hidden state
 * (flows/tarflow.h) is what finite differences of a loss on it give.  With frames=K (K images
 * stacked vertically, each its own token sequence: the frame-local blocks of the video flow) a
 * frame's outputs depend on that frame only, and the solvers agree frame by frame.  A windowed block
 * (seq_frames=F window=K) passes the table's checks; a window without its frames is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "flows/bijector.h"
#include "flows/tarflow.h"
#include "tests/testutil.h"

static const nf_bij_case cases[] = {
    /* 2 x 2 x 2 image, one-pixel tokens (T = 4, din = 2) */
    {"tarflow", "h=2,w=2,c=2,width=8,heads=2,layers=1", 8, 0, 0, 1, 0, 0},
    {"tarflow", "h=2,w=2,c=2,width=8,heads=2,layers=1,reverse=1,qk=0", 8, 3, 0, 1, 0, 0},
    /* 4 x 2 x 1 in 2 x 2 patches (T = 2, din = 4), a pass-through tail */
    {"tarflow", "h=4,w=2,c=1,patch=2,width=8,heads=2,layers=2", 11, 2, 0, 1, 0, 0},
    /* 2 x 4 x 1, reversed, two layers, context */
    {"tarflow", "h=2,w=4,c=1,width=6,heads=3,layers=2,reverse=1,mlp=2", 8, 2, 1.7, 1, 0, 0},
    /* three 2 x 2 x 2 frames stacked (h = 6), each its own sequence of T = 4 tokens, and a tail;
     * one with 2 x 2 patches of 4 x 2 frames, reversed */
    {"tarflow", "h=6,w=2,c=2,frames=3,width=8,heads=2,layers=1", 26, 0, 0, 1, 0, 0},
    {"tarflow", "h=8,w=2,c=1,patch=2,frames=2,width=8,heads=2,layers=2,reverse=1", 16, 0, 0, 1, 0, 0},
    /* one sequence of 4 frames of 2 x 2 tokens (T = 16), each token attending to its frame and the
     * one before (the video's windowed global block), two layers */
    {"tarflow", "h=8,w=2,c=1,seq_frames=4,window=1,width=8,heads=2,layers=2", 16, 0, 0, 1, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

static int make(nf_test_bij *m, int D, int C, const char *opts, uint64_t seed, int n, double noise)
{
    return nf_test_bij_make(m, "tarflow", D, C, opts, seed, n, noise);
}

/* Jacobi and the cached token-by-token solve give the same x and log-determinant; both invert the
 * forward; Jacobi stops within T sweeps (T + the final pass is not counted). */
START_TEST(test_jacobi_equals_sequential)
{
    enum { N = 7, D = 64 + 3, C = 3 };
    const int T = 16; /* 8 x 8 x 1 in 2 x 2 patches */
    nf_test_bij m;
    ck_assert_msg(make(&m, D, C, "h=8,w=8,c=1,patch=2,width=16,heads=2,layers=2", 5, N, 0.15) == NF_OK, "%s",
                  nf_strerror_last());
    nf_real z[N * D], xs[N * D], xj[N * D], back[N * D], ctx[N * C], lds[N], ldj[N], ldf[N];
    nf_test_fill_normal(z, N * D, 1.0, 7);
    nf_test_fill_normal(ctx, N * C, 1.0, 8);
    memset(lds, 0, sizeof lds), memset(ldj, 0, sizeof ldj), memset(ldf, 0, sizeof ldf);
    m.b.invert_method = NF_INVERT_SEQUENTIAL;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xs, lds, z, ctx, N, m.ws), NF_OK);
    ck_assert_int_eq(m.b.last_sweeps, T);
    m.b.invert_method = NF_INVERT_JACOBI;
    m.b.jacobi_tol = sizeof(nf_real) == 4 ? 1e-6 : 1e-12;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xj, ldj, z, ctx, N, m.ws), NF_OK);
    ck_assert_msg(m.b.last_sweeps >= 1 && m.b.last_sweeps <= T + 1, "%d Jacobi sweeps for %d tokens", m.b.last_sweeps, T);
    double dx = 0, dl = 0;
    for (int k = 0; k < N * D; k++) dx = fmax(dx, fabs(xs[k] - xj[k]));
    for (int i = 0; i < N; i++) dl = fmax(dl, fabs(lds[i] - ldj[i]));
    const double tol = sizeof(nf_real) == 4 ? 2e-4 : 1e-9;
    ck_assert_msg(dx < tol && dl < tol * 10, "Jacobi vs sequential: max |dx| %.3g, |dlogdet| %.3g", dx, dl);
    ck_assert_int_eq(m.b.type->forward(&m.b, back, ldf, xs, ctx, N, m.ws), NF_OK);
    for (int k = 0; k < N * D; k++)
        ck_assert_msg(fabs(back[k] - z[k]) < tol * (1 + fabs(z[k])), "forward(inverse(z))[%d] = %.9g, z %.9g", k,
                      (double)back[k], (double)z[k]);
    for (int i = 0; i < N; i++) ck_assert_msg(fabs(ldf[i] + lds[i]) < tol * 10, "log-dets %g and %g", ldf[i], lds[i]);
    for (int k = 64; k < D; k++) ck_assert(xs[k] == z[k] && xj[k] == z[k]);
    nf_test_bij_free(&m);
}
END_TEST

/* Block Jacobi (jacobi_block m: blocks of m tokens in turn, the earlier ones cached) gives the
 * sequential solve's x and log-determinant, for blocks that divide T and one that does not (5 of
 * 16), with and without guidance; with a loose tolerance it stops early in every block (fewer
 * sweeps than tokens) and stays within a few tolerances of the exact answer; m = 1 is sequential
 * (one sweep per token). */
START_TEST(test_block_jacobi_equals_sequential)
{
    enum { N = 5, D = 64 + 2, C = 3 };
    const int T = 16;
    nf_test_bij m;
    ck_assert_msg(make(&m, D, C, "h=8,w=8,c=1,patch=2,width=16,heads=2,layers=2,reverse=1", 21, N, 0.15) == NF_OK,
                  "%s", nf_strerror_last());
    nf_real z[N * D], xs[N * D], xb[N * D], ctx[N * C] = {0}, lds[N], ldb[N];
    nf_test_fill_normal(z, N * D, 1.0, 22);
    for (int i = 0; i < N; i++) ctx[i * C + i % C] = 1;
    const double tol = sizeof(nf_real) == 4 ? 2e-4 : 1e-9;
    for (int guided = 0; guided < 2; guided++) {
        m.b.guidance = guided ? 0.8 : 0;
        memset(lds, 0, sizeof lds);
        m.b.invert_method = NF_INVERT_SEQUENTIAL;
        ck_assert_int_eq(m.b.type->inverse(&m.b, xs, lds, z, ctx, N, m.ws), NF_OK);
        const int blocks[] = {1, 4, 5, 16, 40};
        for (size_t q = 0; q < sizeof blocks / sizeof blocks[0]; q++) {
            m.b.invert_method = NF_INVERT_JACOBI;
            m.b.jacobi_block = blocks[q];
            m.b.jacobi_tol = sizeof(nf_real) == 4 ? 1e-6 : 1e-12;
            memset(ldb, 0, sizeof ldb);
            ck_assert_int_eq(m.b.type->inverse(&m.b, xb, ldb, z, ctx, N, m.ws), NF_OK);
            ck_assert_msg(m.b.last_sweeps >= (T + blocks[q] - 1) / blocks[q] && m.b.last_sweeps <= T,
                          "blocks of %d: %d sweeps for %d tokens", blocks[q], m.b.last_sweeps, T);
            if (blocks[q] == 1) ck_assert_int_eq(m.b.last_sweeps, T);
            double dx = 0, dl = 0;
            for (int k = 0; k < N * D; k++) dx = fmax(dx, fabs(xs[k] - xb[k]));
            for (int i = 0; i < N; i++) dl = fmax(dl, fabs(lds[i] - ldb[i]));
            ck_assert_msg(dx < tol && dl < tol * 10, "guidance %d, blocks of %d vs sequential: max |dx| %.3g, "
                          "|dlogdet| %.3g", guided, blocks[q], dx, dl);
            for (int k = 64; k < D; k++) ck_assert(xb[k] == z[k]);
            /* tolerance 0: every block swept until nothing moves, so each token comes from the same
             * exact inputs as in the sequential solve: the same bits (a sweep that skipped a token
             * still moving, or read a stale cache entry, would not give them) */
            m.b.jacobi_tol = 0;
            ck_assert_int_eq(m.b.type->inverse(&m.b, xb, ldb, z, ctx, N, m.ws), NF_OK);
            for (int k = 0; k < N * D; k++)
                ck_assert_msg(xb[k] == xs[k], "guidance %d, blocks of %d, tolerance 0: entry %d %.9g, sequential %.9g",
                              guided, blocks[q], k, xb[k], xs[k]);
        }
    }
    nf_test_bij_free(&m);
    /* a weakly coupled block (small weights, as a block starts in training) with tolerance 1e-3:
     * each block of 8 stops after fewer than 8 sweeps and lands within a few tolerances */
    ck_assert_int_eq(make(&m, D, C, "h=8,w=8,c=1,patch=2,width=16,heads=2,layers=2", 23, N, 0.03), NF_OK);
    memset(lds, 0, sizeof lds);
    m.b.invert_method = NF_INVERT_SEQUENTIAL;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xs, lds, z, ctx, N, m.ws), NF_OK);
    m.b.invert_method = NF_INVERT_JACOBI;
    m.b.jacobi_block = 8;
    m.b.jacobi_tol = 1e-3;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xb, ldb, z, ctx, N, m.ws), NF_OK);
    double dx = 0;
    for (int k = 0; k < N * D; k++) dx = fmax(dx, fabs(xs[k] - xb[k]));
    ck_assert_msg(m.b.last_sweeps < T && dx < 1e-2, "tolerance 1e-3: %d sweeps, max |dx| %.3g", m.b.last_sweeps, dx);
    nf_test_bij_free(&m);
}
END_TEST

/* frames=K: the K frames are independent sequences with shared weights: changing frame f moves
 * the outputs of frame f only, and equals the same block run on that frame alone as an image
 * (frames=1, same weights: the parameters are named alike); sequential, Jacobi and block Jacobi
 * sampling agree. */
START_TEST(test_frames_are_independent_sequences)
{
    enum { N = 3, K = 3, F = 16, D = K * F };
    nf_test_bij m, one;
    ck_assert_msg(make(&m, D, 0, "h=12,w=4,c=1,patch=2,frames=3,width=8,heads=2,layers=2", 31, N, 0.2) == NF_OK, "%s",
                  nf_strerror_last());
    ck_assert_msg(make(&one, F, 0, "h=4,w=4,c=1,patch=2,width=8,heads=2,layers=2", 31, N * K, 0.2) == NF_OK, "%s",
                  nf_strerror_last());
    ck_assert_int_eq((int)m.P->n, (int)one.P->n);
    memcpy(one.P->value, m.P->value, m.P->n * sizeof(nf_real));
    nf_real x[N * D], y[N * D], y1[N * D], ld[N] = {0}, ld1[N * K] = {0};
    nf_test_fill_normal(x, N * D, 1.0, 32);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, NULL, N, m.ws), NF_OK);
    /* the same memory read as N K frames of 16 */
    ck_assert_int_eq(one.b.type->forward(&one.b, y1, ld1, x, NULL, N * K, one.ws), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert_msg(y[k] == y1[k], "entry %d: %g stacked, %g frame by frame", k, y[k], y1[k]);
    for (int i = 0; i < N; i++) {
        const double sum = (double)ld1[i * K] + ld1[i * K + 1] + ld1[i * K + 2];
        ck_assert_msg(fabs(ld[i] - sum) < 1e-5 * (1 + fabs(sum)), "row %d: log-det %g, frames' sum %g", i, ld[i], sum);
    }
    /* locality: moving one value of frame 1 of row 2 changes nothing outside that frame */
    nf_real x2[N * D], y2[N * D], ld2[N] = {0};
    memcpy(x2, x, sizeof x);
    x2[2 * D + F + 5] += (nf_real)0.7;
    ck_assert_int_eq(m.b.type->forward(&m.b, y2, ld2, x2, NULL, N, m.ws), NF_OK);
    int moved = 0;
    for (int k = 0; k < N * D; k++) {
        const int inside = k >= 2 * D + F && k < 2 * D + 2 * F;
        if (!inside) ck_assert_msg(y2[k] == y[k], "entry %d outside the changed frame moved", k);
        moved += inside && y2[k] != y[k];
    }
    ck_assert(moved > 0);
    /* the sampling direction, three ways */
    nf_real xs[N * D], xj[N * D], xb[N * D], l1[N] = {0}, l2[N] = {0}, l3[N] = {0};
    m.b.invert_method = NF_INVERT_SEQUENTIAL;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xs, l1, y, NULL, N, m.ws), NF_OK);
    m.b.invert_method = NF_INVERT_JACOBI;
    m.b.jacobi_tol = sizeof(nf_real) == 4 ? 1e-6 : 1e-12;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xj, l2, y, NULL, N, m.ws), NF_OK);
    m.b.jacobi_block = 2;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xb, l3, y, NULL, N, m.ws), NF_OK);
    const double tol = sizeof(nf_real) == 4 ? 2e-4 : 1e-9;
    for (int k = 0; k < N * D; k++) {
        ck_assert_msg(fabs(xs[k] - x[k]) < tol * (1 + fabs(x[k])), "inverse(forward(x))[%d] %g, x %g", k, xs[k], x[k]);
        ck_assert_msg(fabs(xj[k] - xs[k]) < tol && fabs(xb[k] - xs[k]) < tol, "entry %d: sequential %g, Jacobi %g, "
                      "blocks %g", k, xs[k], xj[k], xb[k]);
    }
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(l1[i] + ld[i]) < 10 * tol && fabs(l2[i] - l1[i]) < 10 * tol && fabs(l3[i] - l1[i]) < 10 * tol,
                      "row %d: log-dets %g (forward), %g %g %g (inverses)", i, ld[i], l1[i], l2[i], l3[i]);
    nf_test_bij_free(&m);
    nf_test_bij_free(&one);
    /* refused: frames that do not divide the height, frames with a context */
    nf_test_bij bad;
    ck_assert_int_eq(make(&bad, D, 0, "h=12,w=4,c=1,frames=5", 1, 1, 0), NF_EINVAL);
    ck_assert_int_eq(make(&bad, D, 2, "h=12,w=4,c=1,frames=3", 1, 1, 0), NF_EINVAL);
    /* refused: a window without the frames it counts, or frames that do not divide the tokens */
    ck_assert_int_eq(make(&bad, D, 0, "h=12,w=4,c=1,window=1", 1, 1, 0), NF_EINVAL);
    ck_assert_int_eq(make(&bad, D, 0, "h=12,w=4,c=1,seq_frames=5,window=1", 1, 1, 0), NF_EINVAL);
}
END_TEST

/* Classifier-free guidance: w = 0 is the plain inverse; w != 0 changes the samples, and Jacobi and
 * sequential sampling still agree under it (both guide every conditioner output the same way). */
START_TEST(test_guidance)
{
    enum { N = 4, D = 16, C = 3 };
    nf_test_bij m;
    ck_assert_int_eq(make(&m, D, C, "h=4,w=4,c=1,patch=2,width=8,heads=2,layers=2", 13, N, 0.3), NF_OK);
    nf_real z[N * D], ctx[N * C] = {0}, x0[N * D], xs[N * D], xj[N * D], ld[N] = {0};
    nf_test_fill_normal(z, N * D, 1.0, 17);
    for (int i = 0; i < N; i++) ctx[i * C + i % C] = 1;
    m.b.invert_method = NF_INVERT_SEQUENTIAL;
    ck_assert_int_eq(m.b.type->inverse(&m.b, x0, ld, z, ctx, N, m.ws), NF_OK);
    m.b.guidance = 0;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xs, ld, z, ctx, N, m.ws), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(xs[k] == x0[k]);
    m.b.guidance = 1.75;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xs, ld, z, ctx, N, m.ws), NF_OK);
    double moved = 0;
    for (int k = 0; k < N * D; k++) moved = fmax(moved, fabs(xs[k] - x0[k]));
    ck_assert_msg(moved > 1e-3, "guidance 1.75 moved the samples by only %g", moved);
    m.b.invert_method = NF_INVERT_JACOBI;
    m.b.jacobi_tol = sizeof(nf_real) == 4 ? 1e-6 : 1e-12;
    ck_assert_int_eq(m.b.type->inverse(&m.b, xj, ld, z, ctx, N, m.ws), NF_OK);
    double d = 0;
    for (int k = 0; k < N * D; k++) d = fmax(d, fabs(xs[k] - xj[k]));
    ck_assert_msg(d < (sizeof(nf_real) == 4 ? 2e-4 : 1e-9), "guided Jacobi vs sequential: %g", d);
    nf_test_bij_free(&m);
}
END_TEST

/* Token t of the output (in the block's order) depends on input tokens 0..t only, and on token t
 * itself elementwise: perturbing one input entry of token t moves no output token before t. */
START_TEST(test_autoregressive_over_tokens)
{
    for (int rev = 0; rev < 2; rev++) {
        enum { N = 1, D = 16 };
        nf_test_bij m;
        char opts[128];
        snprintf(opts, sizeof opts, "h=4,w=4,c=1,patch=2,width=8,heads=2,layers=2,reverse=%d", rev);
        ck_assert_int_eq(make(&m, D, 0, opts, 9, N, 0.2), NF_OK);
        nf_real x[D], y0[D], y1[D], ld[1] = {0};
        nf_test_fill_normal(x, D, 1.3, 2);
        ck_assert_int_eq(m.b.type->forward(&m.b, y0, ld, x, NULL, N, m.ws), NF_OK);
        /* token index of pixel (i, j) in raster order of 2x2 patches, then the block's order */
        for (int p = 0; p < D; p++) {
            nf_real xp[D];
            memcpy(xp, x, sizeof xp);
            xp[p] += (nf_real)0.7;
            ck_assert_int_eq(m.b.type->forward(&m.b, y1, ld, xp, NULL, N, m.ws), NF_OK);
            int tp = (p / 4 / 2) * 2 + (p % 4) / 2;
            if (rev) tp = 3 - tp;
            for (int q = 0; q < D; q++) {
                int tq = (q / 4 / 2) * 2 + (q % 4) / 2;
                if (rev) tq = 3 - tq;
                if (tq < tp || (tq == tp && q != p))
                    ck_assert_msg(y1[q] == y0[q], "reverse=%d: input %d (token %d) moved output %d (token %d)", rev, p,
                                  tp, q, tq);
            }
            ck_assert_msg(y1[p] != y0[p], "input %d does not move its own output", p);
        }
        nf_test_bij_free(&m);
    }
}
END_TEST

#ifdef NF_DOUBLE
/* L = sum(a y) + sum(c logdet) + sum(v h), h the block's hidden state after the forward. */
static double hook_loss(nf_test_bij *m, const nf_real *x, const nf_real *ctx, const nf_real *a, const nf_real *v, int n, int D,
                        size_t nh)
{
    nf_real y[64], ld[4] = {0};
    ck_assert_int_eq(m->b.type->forward(&m->b, y, ld, x, ctx, n, m->ws), NF_OK);
    const nf_real *h = nf_tarflow_hidden(&m->b, n);
    ck_assert(h != NULL);
    double s = 0;
    for (int k = 0; k < n * D; k++) s += (double)a[k] * y[k];
    for (int i = 0; i < n; i++) s += (0.7 + 0.3 * i) * ld[i];
    for (size_t k = 0; k < nh; k++) s += (double)v[k] * h[k];
    return s;
}

/* Fourth-order central difference of hook_loss in the entry *p. */
static double hook_fd(nf_test_bij *m, nf_real *p, const nf_real *x, const nf_real *ctx, const nf_real *a, const nf_real *v,
                      int n, int D, size_t nh)
{
    const nf_real p0 = *p, h = 1e-4;
    const double off[4] = {-2, -1, 1, 2};
    double f[4];
    for (int k = 0; k < 4; k++) {
        *p = p0 + off[k] * h;
        f[k] = hook_loss(m, x, ctx, a, v, n, D, nh);
    }
    *p = p0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
}
#endif

/* The hidden-state hooks: shape, the state only after a forward of the same rows, and backward with
 * a hidden-state gradient against central differences over parameters and inputs (both orders). */
START_TEST(test_hidden_state_hooks)
{
    for (int rev = 0; rev < 2; rev++) {
        enum { N = 2, D = 16, C = 2 };
        nf_test_bij m;
        char opts[128];
        snprintf(opts, sizeof opts, "h=4,w=4,c=1,patch=2,width=6,heads=2,layers=1,reverse=%d", rev);
        ck_assert_int_eq(make(&m, D, C, opts, 19 + rev, N, 0.3), NF_OK);
        int T, d, r;
        ck_assert_int_eq(nf_tarflow_shape(&m.b, &T, &d, &r), NF_OK);
        ck_assert(T == 4 && d == 6 && r == rev);
        ck_assert(nf_tarflow_hidden(&m.b, N) == NULL); /* no forward yet */
        const size_t nh = (size_t)N * T * d;
        nf_real x[N * D], ctx[N * C], a[N * D], v[N * 4 * 6], y[N * D], ld[N] = {0}, dx[N * D] = {0}, dld[N] = {0.7, 1.0};
        nf_test_fill_normal(x, N * D, 0.6, 3);
        nf_test_fill_normal(ctx, N * C, 1, 4);
        nf_test_fill_uniform(a, N * D, -1.2, 0.9, 5);
        nf_test_fill_uniform(v, nh, -0.7, 1.3, 6);
        ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
        ck_assert(nf_tarflow_hidden(&m.b, N) != NULL && nf_tarflow_hidden(&m.b, N - 1) == NULL);
        nf_params_zero_grad(m.P);
        nf_tarflow_set_hidden_grad(&m.b, v);
        ck_assert_int_eq(m.b.type->backward(&m.b, dx, NULL, a, dld, x, y, ctx, N, m.ws), NF_OK);
        nf_tarflow_set_hidden_grad(&m.b, NULL);
#ifdef NF_DOUBLE
        for (size_t i = 0; i < m.P->n; i++) {
            double num = hook_fd(&m, &m.P->value[i], x, ctx, a, v, N, D, nh);
            ck_assert_msg(nf_test_relerr(m.P->grad[i], num, 1e-3) < 1e-7, "reverse=%d: parameter %zu: backward %.10g, FD %.10g",
                          rev, i, m.P->grad[i], num);
        }
        for (int k = 0; k < N * D; k++) {
            double num = hook_fd(&m, &x[k], x, ctx, a, v, N, D, nh);
            ck_assert_msg(nf_test_relerr(dx[k], num, 1e-3) < 1e-7, "reverse=%d: input %d: backward %.10g, FD %.10g", rev, k,
                          dx[k], num);
        }
#endif
        /* an inverse overwrites the forward's caches: no hidden state then */
        ck_assert_int_eq(m.b.type->inverse(&m.b, x, ld, y, ctx, N, m.ws), NF_OK);
        ck_assert(nf_tarflow_hidden(&m.b, N) == NULL);
        nf_test_bij_free(&m);
    }
}
END_TEST

START_TEST(test_new_block_is_identity)
{
    enum { N = 3, D = 18 };
    nf_test_bij m;
    ck_assert_int_eq(make(&m, D, 2, "h=4,w=4,c=1,patch=2,width=8,heads=2", 3, N, 0), NF_OK);
    nf_real x[N * D], y[N * D], ctx[N * 2], ld[N] = {0.5, -1, 2};
    nf_test_fill_normal(x, N * D, 2.385, 1);
    nf_test_fill_normal(ctx, N * 2, 1, 2);
    ck_assert_int_eq(m.b.type->forward(&m.b, y, ld, x, ctx, N, m.ws), NF_OK);
    for (int k = 0; k < N * D; k++) ck_assert(y[k] == x[k]);
    ck_assert(ld[0] == (nf_real)0.5 && ld[1] == -1 && ld[2] == 2);
    nf_test_bij_free(&m);
}
END_TEST

START_TEST(test_bad_options)
{
    nf_test_bij m;
    ck_assert_int_eq(make(&m, 16, 0, "h=4,w=4,c=1,patch=3", 1, 1, 0), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "patch=3"), "%s", nf_strerror_last());
    nf_test_bij_free(&m);
    ck_assert_int_eq(make(&m, 16, 0, "h=4,w=4,c=1,width=10,heads=4", 1, 1, 0), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "heads=4"), "%s", nf_strerror_last());
    nf_test_bij_free(&m);
    ck_assert_int_eq(make(&m, 12, 0, "h=4,w=4,c=1", 1, 1, 0), NF_EINVAL);
    nf_test_bij_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bij_tarflow");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_jacobi_equals_sequential);
    tcase_add_test(tc, test_block_jacobi_equals_sequential);
    tcase_add_test(tc, test_frames_are_independent_sequences);
    tcase_add_test(tc, test_autoregressive_over_tokens);
    tcase_add_test(tc, test_guidance);
    tcase_add_test(tc, test_hidden_state_hooks);
    tcase_add_test(tc, test_new_block_is_identity);
    tcase_add_test(tc, test_bad_options);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
