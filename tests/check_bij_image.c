/* tests/check_bij_image.c - the image bijectors of multi-scale flows: squeeze, split, actnorm2d and
 * conv1x1 (NHWC images in the first h*w*c entries of a row, the rest passing through).
 *   all        the shared table-driven checks (round trip, forward / inverse log-determinants,
 *              brute-force Jacobian, finite-difference gradients both directions) on a 4x4x2 image
 *              filling D = 32 and inside D = 40 (a pass-through tail), and other shapes; backward and
 *              inverse_backward accumulate; shapes that do not fit are refused with a message naming
 *              the bijector and the numbers; non-finite input is reported;
 *   squeeze    known values (each 2x2 block to one pixel, channel (di*2 + dj)*c + k);
 *   split      known values (first c/2 channels of every pixel in front, the others behind);
 *   chain      squeeze, split, squeeze built as a flow from a spec maps x to the permutation worked
 *              out coordinate by coordinate here, and back; a Glow-like multi-scale flow round trips
 *              and its sampling log-density equals its log_prob;
 *   actnorm2d  init_data and the first training batch give per-channel zero mean and unit variance
 *              (over rows and pixels), log|det| = h w sum s, the tail untouched, no re-initialisation;
 *   conv1x1    every pixel's channels map by the W assembled here from the stored factors,
 *              log|det| = h w log|det W| from GSL, it starts as a rotation, and a stored permutation
 *              or sign that is not one is refused (NF_EDATA).
 */
#include <check.h>
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/bijector.h"
#include "flows/flow.h"
#include "tests/testutil.h"

#ifdef NF_DOUBLE
#define TOL 1e-10
#else
#define TOL 2e-5
#endif

static const nf_bij_case cases[] = {
    /* type        options                  D   C  scale inv skip train */
    {"squeeze", "h=4,w=4,c=2", 32, 0, 0, 0, 0, 0},
    {"squeeze", "h=4,w=4,c=2", 40, 0, 0, 0, 0, 0},       /* tail of 8 */
    {"squeeze", "h=2,w=6,c=1", 13, 2, 1.7, 0, 0, 0},     /* context ignored */
    {"split", "h=4,w=4,c=2", 32, 0, 0, 0, 0, 0},
    {"split", "h=4,w=4,c=2", 40, 0, 0, 0, 0, 0},
    {"split", "h=1,w=3,c=6", 21, 3, 0, 0, 0, 0},
    {"actnorm2d", "h=4,w=4,c=2", 32, 0, 0, 0, 0, 0},
    {"actnorm2d", "h=4,w=4,c=2", 40, 0, 2.385, 0, 0, 1}, /* after the first training batch */
    {"actnorm2d", "h=2,w=3,c=3", 20, 2, 0, 0, 0, 0},
    {"actnorm2d", "h=1,w=2,c=66", 132, 0, 0, 0, 0, 0},   /* two blocks of channels (64 + 2) */
    {"actnorm2d", "h=1,w=2,c=66", 135, 0, 1.3, 0, 0, 1},
    {"conv1x1", "h=4,w=4,c=2", 32, 0, 0, 0, 0, 0},       /* the whole batch as one product */
    {"conv1x1", "h=4,w=4,c=2", 40, 0, 0, 0, 0, 0},       /* one product per row */
    {"conv1x1", "h=2,w=2,c=5", 23, 0, 0.9, 0, 0, 0},
    {"conv1x1", "h=3,w=2,c=1", 7, 3, 0, 0, 0, 0},        /* c = 1: no triangles */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_table)
{
    nf_check_bijector_all(&cases[_i]);
}
END_TEST

/* The same after init_data, for actnorm2d (its data-dependent state). */
START_TEST(test_table_init_data)
{
    static const nf_bij_case c = {"actnorm2d", "h=4,w=4,c=2", 40, 0, 1.9, 0, 0, 0};
    const nf_bij_inputs in = {.init_data = 1};
    nf_check_bijector_all_inputs(&c, &in);
}
END_TEST

/* A bijector with its stores. */
typedef struct {
    nf_bijector b;
    nf_params *P, *S;
    nf_real *ws;
} fix;

static int fix_try(fix *f, const char *type, const char *options, int dim, uint64_t seed)
{
    f->P = nf_params_alloc();
    f->S = nf_params_alloc();
    f->ws = NULL;
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert_msg(nf_bijector_type_find(type) != NULL, "type %s is not registered", type);
    int rc = nf_bijector_create(&f->b, nf_bijector_type_find(type), dim, 0, "b0", options, f->P, f->S, r);
    nf_rng_free(r);
    if (rc != NF_OK) {
        nf_params_free(f->P);
        nf_params_free(f->S);
        return rc;
    }
    f->ws = calloc(f->b.type->workspace(&f->b, 64) + 1, sizeof(nf_real));
    return rc;
}

static void fix_make(fix *f, const char *type, const char *options, int dim, uint64_t seed)
{
    int rc = fix_try(f, type, options, dim, seed);
    ck_assert_msg(rc == NF_OK, "%s(%s): %s", type, options, nf_strerror_last());
}

static void fix_free(fix *f)
{
    nf_bijector_destroy(&f->b);
    nf_params_free(f->P);
    nf_params_free(f->S);
    free(f->ws);
}

static nf_real *slice(fix *f, const char *piece)
{
    char nm[128];
    snprintf(nm, sizeof nm, "b0.%s", piece);
    const nf_param_slice *s = nf_params_find(f->P, nm);
    if (s) return f->P->value + s->offset;
    s = nf_params_find(f->S, nm);
    ck_assert_msg(s != NULL, "slice %s missing", nm);
    return f->S->value + s->offset;
}

/* forward then inverse of x (n, D) and the log-determinants, through the fixture. */
static void fwd(fix *f, nf_real *y, nf_real *ld, const nf_real *x, int n)
{
    ck_assert_msg(f->b.type->forward(&f->b, y, ld, x, NULL, n, f->ws) == NF_OK, "%s forward: %s", f->b.type->name,
                  nf_strerror_last());
}

START_TEST(test_squeeze_values)
{
    /* 2x4 image of one channel, rows 0 1 2 3 / 4 5 6 7, then a tail of 2: pixel (0, 0) gets the block
     * 0 1 / 4 5, pixel (0, 1) the block 2 3 / 6 7, each in row-major order. */
    fix f;
    fix_make(&f, "squeeze", "h=2,w=4,c=1", 10, 1);
    const nf_real x[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8.5f, 9.25f};
    const nf_real want[10] = {0, 1, 4, 5, 2, 3, 6, 7, 8.5f, 9.25f};
    nf_real y[10], back[10], ld[1] = {2.385f};
    fwd(&f, y, ld, x, 1);
    for (int j = 0; j < 10; j++) ck_assert_msg(y[j] == want[j], "y[%d] = %g, expected %g", j, (double)y[j], (double)want[j]);
    ck_assert(ld[0] == (nf_real)2.385f); /* adds 0 */
    ck_assert_int_eq(f.b.type->inverse(&f.b, back, ld, y, NULL, 1, f.ws), NF_OK);
    for (int j = 0; j < 10; j++) ck_assert(back[j] == x[j]);
    fix_free(&f);
    /* 4x4x2 against the formula: y[(I*2 + J)*8 + (di*2 + dj)*2 + k] = x[((2I + di)*4 + 2J + dj)*2 + k] */
    fix_make(&f, "squeeze", "h=4,w=4,c=2", 33, 1);
    nf_real a[33], b[33], l2[1] = {0};
    for (int j = 0; j < 33; j++) a[j] = (nf_real)(j * 1.5 - 7);
    fwd(&f, b, l2, a, 1);
    for (int I = 0; I < 2; I++)
        for (int J = 0; J < 2; J++)
            for (int di = 0; di < 2; di++)
                for (int dj = 0; dj < 2; dj++)
                    for (int k = 0; k < 2; k++)
                        ck_assert(b[(I * 2 + J) * 8 + (di * 2 + dj) * 2 + k] == a[((2 * I + di) * 4 + 2 * J + dj) * 2 + k]);
    ck_assert(b[32] == a[32]);
    fix_free(&f);
}
END_TEST

START_TEST(test_split_values)
{
    /* 1x2 image of 4 channels and a tail of 2: kept (1, 2, 2) = channels 0, 1 of each pixel, then the
     * factored-out channels 2, 3 of each pixel, then the tail. */
    fix f;
    fix_make(&f, "split", "h=1,w=2,c=4", 10, 1);
    const nf_real x[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8.5f, 9.25f};
    const nf_real want[10] = {0, 1, 4, 5, 2, 3, 6, 7, 8.5f, 9.25f};
    nf_real y[10], back[10], ld[1] = {-0.731f};
    fwd(&f, y, ld, x, 1);
    for (int j = 0; j < 10; j++) ck_assert_msg(y[j] == want[j], "y[%d] = %g, expected %g", j, (double)y[j], (double)want[j]);
    ck_assert(ld[0] == (nf_real)-0.731f);
    ck_assert_int_eq(f.b.type->inverse(&f.b, back, ld, y, NULL, 1, f.ws), NF_OK);
    for (int j = 0; j < 10; j++) ck_assert(back[j] == x[j]);
    fix_free(&f);
}
END_TEST

/* Shapes that do not fit: the error names the bijector and the numbers. */
START_TEST(test_bad_shapes)
{
    static const struct {
        const char *type, *options;
        int dim;
        const char *says[3];
    } bad[] = {
        {"squeeze", "h=3,w=2,c=1", 6, {"b0", "h=3", "even"}},
        {"squeeze", "h=2,w=5,c=1", 10, {"b0", "w=5", "even"}},
        {"squeeze", "", 4, {"b0", "h=1", "even"}},
        {"split", "h=2,w=2,c=3", 12, {"b0", "c=3", "even"}},
        {"split", "h=1,w=1", 5, {"b0", "c=5", "even"}},
        {"squeeze", "h=4,w=4,c=2", 31, {"32", "31", "h*w*c <= D"}},
        {"split", "h=4,w=4,c=2", 31, {"32", "31", "h*w*c <= D"}},
        {"actnorm2d", "h=4,w=4,c=2", 31, {"32", "31", "h*w*c <= D"}},
        {"conv1x1", "h=4,w=4,c=2", 31, {"32", "31", "h*w*c <= D"}},
        {"conv1x1", "h=4,w=4", 15, {"b0", "16", "15"}},     /* c omitted: h*w alone is too large */
        {"actnorm2d", "h=0,w=2,c=1", 4, {"actnorm2d", "h=0", "from 1"}},
        {"conv1x1", "h=2,w=2,c=1,k=3", 4, {"k", "", ""}},   /* unknown option */
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        fix f;
        nf_error_clear();
        int rc = fix_try(&f, bad[t].type, bad[t].options, bad[t].dim, 1);
        ck_assert_msg(rc == NF_EINVAL, "%s(%s) at D = %d: rc %d, expected NF_EINVAL", bad[t].type, bad[t].options,
                      bad[t].dim, rc);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(strstr(nf_strerror_last(), bad[t].says[k]), "%s(%s): message '%s' does not say '%s'",
                          bad[t].type, bad[t].options, nf_strerror_last(), bad[t].says[k]);
    }
    /* defaults: h = w = 1, c = D; and c = D / (h w) when only h, w are given */
    fix f;
    fix_make(&f, "conv1x1", "", 6, 1);
    ck_assert_ptr_nonnull(nf_params_find(f.P, "b0.lower"));
    ck_assert_int_eq((int)nf_params_find(f.P, "b0.log_s")->size, 6);
    fix_free(&f);
    fix_make(&f, "actnorm2d", "h=2,w=3", 13, 1);
    ck_assert_int_eq((int)nf_params_find(f.P, "b0.loc")->size, 2);
    fix_free(&f);
}
END_TEST

/* The position of x's entry (i, j, k) of a 4x4x2 image (D = 40) after squeeze, split, squeeze,
 * worked out from coordinates: squeeze puts it at pixel (i/2, j/2) channel ((i%2)*2 + j%2)*2 + k of
 * a 2x2x8 image; split keeps channels < 4 as a 2x2x4 image in front and puts channels 4..7 at
 * 16 + pixel*4 + (ch - 4); squeeze makes the kept 2x2x4 one pixel of 16 channels. */
static int chain_position(int i, int j, int k)
{
    const int I = i / 2, J = j / 2, ch = ((i % 2) * 2 + j % 2) * 2 + k;
    if (ch >= 4) return 16 + (I * 2 + J) * 4 + (ch - 4);
    return ((I % 2) * 2 + J % 2) * 4 + ch;
}

START_TEST(test_chain_flow)
{
    enum { N = 5, D = 40 };
    nf_flow *f;
    int rc = nf_flow_create(&f, "squeeze(h=4,w=4,c=2), split(h=2,w=2,c=8), squeeze(h=2,w=2,c=4)", D, 0, 7);
    ck_assert_msg(rc == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(f->nb, 3);
    nf_real x[N * D], z[N * D], x2[N * D], logp[N], logp2[N];
    nf_test_fill_normal(x, N * D, 1.3, 77);
    for (int r = 0; r < N; r++) {
        for (int t = 32; t < D; t++) z[r * D + t] = x[r * D + t];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 2; k++) z[r * D + chain_position(i, j, k)] = x[r * D + (i * 4 + j) * 2 + k];
    }
    /* forward through the flow's own bijectors reaches z exactly */
    nf_real a[N * D], b[N * D], ld[N] = {0};
    memcpy(a, x, sizeof a);
    for (int l = 0; l < f->nb; l++) {
        nf_bijector *bj = &f->b[l];
        nf_real *ws = calloc(bj->type->workspace(bj, N) + 1, sizeof(nf_real));
        ck_assert_int_eq(bj->type->forward(bj, b, ld, a, NULL, N, ws), NF_OK);
        free(ws);
        memcpy(a, b, sizeof a);
    }
    for (int t = 0; t < N * D; t++) ck_assert_msg(a[t] == z[t], "z[%d] = %g, expected %g", t, (double)a[t], (double)z[t]);
    /* log p(x) is the base density of the permuted x; sampling from z gives x back with the same density */
    ck_assert_int_eq(nf_flow_log_prob(f, logp, x, NULL, NULL, N), NF_OK);
    for (int r = 0; r < N; r++) {
        double want = -0.5 * D * log(2 * M_PI);
        for (int t = 0; t < D; t++) want -= 0.5 * (double)x[r * D + t] * x[r * D + t];
        ck_assert_msg(fabs(logp[r] - want) < TOL * (1 + fabs(want)), "logp %g, expected %g", (double)logp[r], want);
    }
    ck_assert_int_eq(nf_flow_sample_latent(f, x2, logp2, z, NULL, N), NF_OK);
    for (int t = 0; t < N * D; t++) ck_assert(x2[t] == x[t]);
    for (int r = 0; r < N; r++) ck_assert(fabs(logp2[r] - logp[r]) < TOL * (1 + fabs(logp[r])));
    nf_flow_free(f);
}
END_TEST

/* nf_flow_init_data passes the data on in chunks: of 512 samples, or fewer where a sample's workspace
 * is large (the convolutions' im2col buffers).  Its parameters must equal those of the plain
 * procedure done here on the whole batch at once: each data-dependent layer set from all the data
 * reaching it, then the whole batch passed on.  Two flows: 8x8 images over 600 samples (chunks of
 * 512), and 32x32 images with a 64-wide conditioner (chunks of 57 images of the 100). */
static void init_whole(nf_flow *f, const nf_real *x, int n)
{
    const size_t nd = (size_t)n * f->dim;
    nf_real *cur = malloc(nd * sizeof *cur), *next = malloc(nd * sizeof *next), *ld = calloc((size_t)n, sizeof *ld);
    ck_assert(cur && next && ld);
    memcpy(cur, x, nd * sizeof *cur);
    for (int l = 0; l < f->nb; l++) {
        nf_bijector *b = &f->b[l];
        const int training = b->training;
        b->training = 0;
        if (b->type->init_data) ck_assert_int_eq(b->type->init_data(b, cur, n), NF_OK);
        nf_real *ws = calloc(b->type->workspace(b, n) + 1, sizeof *ws);
        ck_assert(ws);
        ck_assert_int_eq(b->type->forward(b, next, ld, cur, NULL, n, ws), NF_OK);
        free(ws);
        b->training = training;
        nf_real *t = cur;
        cur = next, next = t;
    }
    free(cur), free(next), free(ld);
}

START_TEST(test_init_chunks)
{
    static const struct { const char *spec; int side, n; } cases[] = {
        {"actnorm2d(h=8,w=8,c=1), coupling2d(h=8,w=8,c=1,hidden=6), actnorm2d(h=8,w=8,c=1), "
         "coupling2d(h=8,w=8,c=1,hidden=6,flip=1), actnorm2d(h=8,w=8,c=1)", 8, 600},
        {"actnorm2d(h=32,w=32,c=1), coupling2d(h=32,w=32,c=1,hidden=64), actnorm2d(h=32,w=32,c=1)", 32, 100},
    };
    for (int k = 0; k < 2; k++) {
        const int D = cases[k].side * cases[k].side, n = cases[k].n;
        nf_flow *a, *b;
        ck_assert_int_eq(nf_flow_create(&a, cases[k].spec, D, 0, 23), NF_OK);
        ck_assert_int_eq(nf_flow_create(&b, cases[k].spec, D, 0, 23), NF_OK);
        nf_real *x = malloc((size_t)n * D * sizeof *x);
        ck_assert(x);
        nf_test_fill_normal(x, (size_t)n * D, 1, 7 + k);
        for (size_t t = 0; t < (size_t)n * D; t++) x[t] = (nf_real)(0.61 * x[t] + 2.385 + 0.03 * (double)(t % 11));
        ck_assert_int_eq(nf_flow_init_data(a, x, NULL, n), NF_OK);
        init_whole(b, x, n);
        for (int store = 0; store < 2; store++) { /* the parameters, then the state (the init flags) */
            const nf_params *pa = store ? a->S : a->P, *pb = store ? b->S : b->P;
            ck_assert_int_eq(pa->n, pb->n);
            for (size_t p = 0; p < pa->n; p++)
                ck_assert_msg(pa->value[p] == pb->value[p], "case %d, %s %zu: %.9g chunked, %.9g whole", k,
                              store ? "state" : "parameter", p, (double)pa->value[p], (double)pb->value[p]);
        }
        free(x);
        nf_flow_free(a), nf_flow_free(b);
    }
}
END_TEST

/* A Glow-like multi-scale flow on 4x4x2 images: initialised from data, it round trips, and a sample's
 * log-density equals log_prob at the sample. */
START_TEST(test_multiscale_flow)
{
    enum { N = 24, D = 32 };
    const char *spec = "actnorm2d(h=4,w=4,c=2), squeeze(h=4,w=4,c=2), "
                       "2*(actnorm2d(h=2,w=2,c=8), conv1x1(h=2,w=2,c=8)), split(h=2,w=2,c=8), "
                       "squeeze(h=2,w=2,c=4), actnorm2d(h=1,w=1,c=16), conv1x1(h=1,w=1,c=16)";
    nf_flow *f;
    int rc = nf_flow_create(&f, spec, D, 0, 11);
    ck_assert_msg(rc == NF_OK, "%s", nf_strerror_last());
    nf_real x[N * D], x2[N * D], logp[N], logp2[N];
    nf_test_fill_normal(x, N * D, 1, 3);
    for (int t = 0; t < N * D; t++) x[t] = (nf_real)(0.43 * x[t] + 2.385 + 0.1 * (t % 7));
    ck_assert_int_eq(nf_flow_init_data(f, x, NULL, N), NF_OK);
    int inited = 0; /* every actnorm2d, deep in the chain too, was set from the data reaching it */
    for (int l = 0; l < f->nb; l++) {
        if (strcmp(f->b[l].type->name, "actnorm2d") != 0) continue;
        char nm[128];
        snprintf(nm, sizeof nm, "%s.initialized", f->b[l].name);
        const nf_param_slice *sl = nf_params_find(f->S, nm);
        ck_assert_msg(sl && f->S->value[sl->offset] == 1, "%s not initialised", f->b[l].name);
        inited++;
    }
    ck_assert_int_eq(inited, 4);
    ck_assert_int_eq(nf_flow_log_prob(f, logp, x, NULL, NULL, N), NF_OK);
    for (int r = 0; r < N; r++) ck_assert(isfinite(logp[r]));
    /* the latent of x, through the flow's levels: forward once more by hand */
    nf_real a[N * D], b[N * D], ld[N] = {0};
    memcpy(a, x, sizeof a);
    for (int l = 0; l < f->nb; l++) {
        nf_bijector *bj = &f->b[l];
        nf_real *ws = calloc(bj->type->workspace(bj, N) + 1, sizeof(nf_real));
        ck_assert_int_eq(bj->type->forward(bj, b, ld, a, NULL, N, ws), NF_OK);
        free(ws);
        memcpy(a, b, sizeof a);
    }
    ck_assert_int_eq(nf_flow_sample_latent(f, x2, logp2, a, NULL, N), NF_OK);
    for (int t = 0; t < N * D; t++)
        ck_assert_msg(fabs(x2[t] - x[t]) < 100 * TOL * (1 + fabs(x[t])), "x[%d]: %g back as %g", t, (double)x[t],
                      (double)x2[t]);
    for (int r = 0; r < N; r++)
        ck_assert_msg(fabs(logp2[r] - logp[r]) < 100 * TOL * (1 + fabs(logp[r])), "logp %g, sampled %g",
                      (double)logp[r], (double)logp2[r]);
    nf_flow_free(f);
}
END_TEST

/* Per-channel moments over rows and pixels of an (n, D) batch holding an h*w*c image. */
static void channel_moments(const nf_real *y, int n, int D, int hw, int c, int k, double *mean, double *var)
{
    double m = 0, v = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) m += y[(size_t)i * D + (size_t)p * c + k];
    m /= (double)n * hw;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const double d = y[(size_t)i * D + (size_t)p * c + k] - m;
            v += d * d;
        }
    *mean = m, *var = v / ((double)n * hw);
}

START_TEST(test_actnorm2d_init)
{
    enum { N = 30, H = 4, W = 3, C = 3, HW = H * W, D = HW * C + 4 };
    const double centre[C] = {2.385, -0.731, 5.12}, spread[C] = {1.7, 0.43, 3.9};
    nf_real x[N * D], y[N * D], ld[N];
    nf_test_fill_normal(x, N * D, 1, 5);
    for (int i = 0; i < N; i++)
        for (int p = 0; p < HW; p++)
            for (int k = 0; k < C; k++) {
                nf_real *v = &x[i * D + p * C + k];
                *v = (nf_real)(centre[k] + spread[k] * *v);
            }
    for (int way = 0; way < 2; way++) { /* 0: init_data, 1: the first training forward */
        fix f;
        fix_make(&f, "actnorm2d", "h=4,w=3,c=3", D, 11);
        ck_assert(*slice(&f, "initialized") == 0);
        if (way == 0) {
            ck_assert_int_eq(f.b.type->init_data(&f.b, x, N), NF_OK);
        } else {
            memset(ld, 0, sizeof ld);
            fwd(&f, y, ld, x, N); /* evaluation mode never initialises */
            ck_assert(*slice(&f, "initialized") == 0);
            for (int t = 0; t < N * D; t++) ck_assert(y[t] == x[t]);
            f.b.training = 1;
        }
        memset(ld, 0, sizeof ld);
        fwd(&f, y, ld, x, N);
        ck_assert(*slice(&f, "initialized") == 1);
        double sum_s = 0;
        for (int k = 0; k < C; k++) {
            double m, v;
            channel_moments(y, N, D, HW, C, k, &m, &v);
            ck_assert_msg(fabs(m) < 1e-5 && fabs(v - 1) < 1e-4, "way %d channel %d: mean %g var %g", way, k, m, v);
            sum_s += slice(&f, "log_scale")[k];
        }
        ck_assert_msg(fabs(ld[0] - HW * sum_s) < 100 * TOL && fabs(ld[N - 1] - HW * sum_s) < 100 * TOL,
                      "logdet %g, h w sum s %g", (double)ld[0], HW * sum_s);
        ck_assert(fabs(sum_s + log(1.7 * 0.43 * 3.9)) < 0.3); /* about -sum log(spread) */
        for (int i = 0; i < N; i++)
            for (int t = HW * C; t < D; t++) ck_assert(y[i * D + t] == x[i * D + t]);
        /* a second batch in training mode does not re-initialise */
        nf_real keep[2 * C], x2[N * D];
        memcpy(keep, slice(&f, "loc"), C * sizeof(nf_real));
        memcpy(keep + C, slice(&f, "log_scale"), C * sizeof(nf_real));
        for (int t = 0; t < N * D; t++) x2[t] = (nf_real)(3.1 * x[t] + 0.77);
        f.b.training = 1;
        fwd(&f, y, ld, x2, N);
        ck_assert(memcmp(keep, slice(&f, "loc"), C * sizeof(nf_real)) == 0);
        ck_assert(memcmp(keep + C, slice(&f, "log_scale"), C * sizeof(nf_real)) == 0);
        double m, v;
        channel_moments(y, N, D, HW, C, 1, &m, &v);
        ck_assert_msg(fabs(v - 9.61) < 1e-3 && fabs(m) > 0.5, "second batch mean %g var %g", m, v);
        fix_free(&f);
    }
    /* init_data refuses non-finite data and too few values */
    fix f;
    fix_make(&f, "actnorm2d", "h=4,w=3,c=3", D, 11);
    nf_real keep = x[7];
    x[7] = NAN;
    ck_assert_int_eq(f.b.type->init_data(&f.b, x, N), NF_EDATA);
    ck_assert_msg(strstr(nf_strerror_last(), "b0") && strstr(nf_strerror_last(), "finite"), "%s", nf_strerror_last());
    x[7] = keep;
    fix_free(&f);
    fix_make(&f, "actnorm2d", "h=1,w=1,c=3", 3, 11);
    ck_assert_int_eq(f.b.type->init_data(&f.b, x, 1), NF_EDATA);
    fix_free(&f);
}
END_TEST

/* W = P L (U + diag(sign e^{log_s})) from the stored slices, in double: (W)_{i} = (L U')_{perm_i}. */
static void conv_matrix(fix *f, int c, double *W)
{
    double *L = calloc((size_t)c * c, sizeof(double)), *U = calloc((size_t)c * c, sizeof(double));
    const nf_real *lo = c > 1 ? slice(f, "lower") : NULL, *up = c > 1 ? slice(f, "upper") : NULL;
    const nf_real *ls = slice(f, "log_s"), *perm = slice(f, "perm"), *sg = slice(f, "sign");
    for (int i = 0, k = 0; i < c; i++) {
        for (int j = 0; j < i; j++) L[i * c + j] = lo[k++];
        L[i * c + i] = 1;
    }
    for (int i = 0, k = 0; i < c; i++) {
        U[i * c + i] = sg[i] * exp((double)ls[i]);
        for (int j = i + 1; j < c; j++) U[i * c + j] = up[k++];
    }
    for (int i = 0; i < c; i++)
        for (int j = 0; j < c; j++) {
            double s = 0;
            for (int m = 0; m < c; m++) s += L[(int)perm[i] * c + m] * U[m * c + j];
            W[i * c + j] = s;
        }
    free(L);
    free(U);
}

START_TEST(test_conv1x1_matrix)
{
    enum { N = 3, H = 2, W = 3, C = 4, HW = H * W, D = HW * C + 3 };
    fix f;
    fix_make(&f, "conv1x1", "h=2,w=3,c=4", D, 21);
    double Wm[C * C], WWt[C * C];
    /* it starts as a rotation: W W^T = I, log|det| = 0 */
    conv_matrix(&f, C, Wm);
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int m = 0; m < C; m++) s += Wm[i * C + m] * Wm[j * C + m];
            WWt[i * C + j] = s;
            ck_assert_msg(fabs(s - (i == j)) < 1e-5, "W W^T [%d][%d] = %g", i, j, s);
        }
    /* perturbed: every pixel maps by W, the tail passes, log|det| = h w log|det W| */
    nf_rng *r = nf_rng_alloc(5, 0);
    for (size_t k = 0; k < f.P->n; k++) f.P->value[k] += (nf_real)(0.4 * nf_rng_normal(r));
    nf_rng_free(r);
    conv_matrix(&f, C, Wm);
    memcpy(WWt, Wm, sizeof Wm);
    gsl_matrix_view m = gsl_matrix_view_array(WWt, C, C);
    gsl_permutation *p = gsl_permutation_alloc(C);
    int sign;
    gsl_linalg_LU_decomp(&m.matrix, p, &sign);
    const double want_ld = HW * gsl_linalg_LU_lndet(&m.matrix);
    gsl_permutation_free(p);
    nf_real x[N * D], y[N * D], ld[N] = {0};
    nf_test_fill_normal(x, N * D, 1.3, 9);
    fwd(&f, y, ld, x, N);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fabs(ld[i] - want_ld) < 100 * TOL * (1 + fabs(want_ld)), "logdet %g, expected %g", (double)ld[i],
                      want_ld);
        for (int px = 0; px < HW; px++)
            for (int a = 0; a < C; a++) {
                double s = 0;
                for (int b = 0; b < C; b++) s += Wm[a * C + b] * x[i * D + px * C + b];
                ck_assert_msg(fabs(y[i * D + px * C + a] - s) < 10 * TOL * (1 + fabs(s)), "y[%d][%d] = %g, W x = %g", i,
                              px * C + a, (double)y[i * D + px * C + a], s);
            }
        for (int t = HW * C; t < D; t++) ck_assert(y[i * D + t] == x[i * D + t]);
    }
    fix_free(&f);
}
END_TEST

/* A stored permutation or sign that is not one (a corrupt or foreign model file) is refused by both
 * directions with NF_EDATA naming the slice, instead of indexing out of bounds. */
START_TEST(test_conv1x1_corrupt_state)
{
    enum { N = 2, D = 12 };
    nf_real x[N * D], y[N * D], ld[N] = {0};
    nf_test_fill_normal(x, N * D, 1, 2);
    for (int what = 0; what < 4; what++) {
        fix f;
        fix_make(&f, "conv1x1", "h=2,w=2,c=3", D, 21);
        nf_real *perm = slice(&f, "perm"), *sg = slice(&f, "sign");
        if (what == 0) perm[1] = perm[0];
        if (what == 1) perm[2] = 3;
        if (what == 2) perm[0] = (nf_real)0.5;
        if (what == 3) sg[2] = (nf_real)0.5;
        const char *says = what == 3 ? "b0.sign[2]" : "b0.perm[";
        ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_EDATA);
        ck_assert_msg(strstr(nf_strerror_last(), says) && strstr(nf_strerror_last(), "conv1x1"), "%s",
                      nf_strerror_last());
        ck_assert_int_eq(f.b.type->inverse(&f.b, y, ld, x, NULL, N, f.ws), NF_EDATA);
        fix_free(&f);
    }
}
END_TEST

/* backward and inverse_backward add into dx / dy and the parameter gradients. */
START_TEST(test_accumulate)
{
    static const char *types[] = {"squeeze", "split", "actnorm2d", "conv1x1"};
    enum { N = 4, D = 20 };
    for (int t = 0; t < 4; t++)
        for (int dir = 0; dir < 2; dir++) {
            fix f;
            fix_make(&f, types[t], "h=2,w=2,c=4", D, 3);
            for (size_t k = 0; k < f.P->n; k++) f.P->value[k] += (nf_real)(0.1 * (k % 5) - 0.17);
            nf_real x[N * D], y[N * D], g[N * D], d1[N * D], ld[N] = {0}, u[N] = {0.3f, -1.2f, 0.7f, 2.385f};
            nf_test_fill_normal(x, N * D, 1.1, 7);
            nf_test_fill_normal(g, N * D, 0.8, 8);
            memset(d1, 0, sizeof d1);
            if (dir == 0) ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
            else ck_assert_int_eq(f.b.type->inverse(&f.b, y, ld, x, NULL, N, f.ws), NF_OK);
            int (*bw)(nf_bijector *, nf_real *, nf_real *, const nf_real *, const nf_real *, const nf_real *,
                      const nf_real *, const nf_real *, int, nf_real *) =
                dir == 0 ? f.b.type->backward : f.b.type->inverse_backward;
            ck_assert_int_eq(bw(&f.b, d1, NULL, g, u, x, y, NULL, N, f.ws), NF_OK);
            nf_real once[N * D], *pg = malloc((f.P->n + 1) * sizeof(nf_real));
            memcpy(once, d1, sizeof once);
            if (f.P->n) memcpy(pg, f.P->grad, f.P->n * sizeof(nf_real));
            ck_assert_int_eq(bw(&f.b, d1, NULL, g, u, x, y, NULL, N, f.ws), NF_OK);
            double mx = 0;
            for (int k = 0; k < N * D; k++) {
                ck_assert(fabs(d1[k] - 2 * once[k]) <= 1e-5 * (1 + fabs(once[k])));
                mx = fmax(mx, fabs(once[k]));
            }
            for (size_t k = 0; k < f.P->n; k++) ck_assert(fabs(f.P->grad[k] - 2 * pg[k]) <= 1e-4 * (1 + fabs(pg[k])));
            ck_assert_msg(mx > 1e-3, "%s: input gradient is zero", types[t]);
            free(pg);
            fix_free(&f);
        }
}
END_TEST

/* Non-finite inputs are reported with the bijector's name, in the image and in the tail. */
START_TEST(test_nonfinite)
{
    static const char *types[] = {"squeeze", "split", "actnorm2d", "conv1x1"};
    for (int t = 0; t < 4; t++)
        for (int at = 0; at < 2; at++) {
            fix f;
            fix_make(&f, types[t], "h=2,w=2,c=2", 10, 3);
            nf_real x[20], y[20], ld[2] = {0};
            nf_test_fill_normal(x, 20, 1, 4);
            x[at ? 18 : 13] = NAN;
            ck_assert_int_eq(f.b.type->forward(&f.b, y, ld, x, NULL, 2, f.ws), NF_ENONFINITE);
            ck_assert_msg(strstr(nf_strerror_last(), "b0"), "%s: %s", types[t], nf_strerror_last());
            fix_free(&f);
        }
}
END_TEST

static Suite *bij_image_suite(void)
{
    Suite *s = suite_create("bij_image");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_table, 0, NCASES);
    tcase_add_test(tc, test_table_init_data);
    tcase_add_test(tc, test_squeeze_values);
    tcase_add_test(tc, test_split_values);
    tcase_add_test(tc, test_bad_shapes);
    tcase_add_test(tc, test_chain_flow);
    tcase_add_test(tc, test_multiscale_flow);
    tcase_add_test(tc, test_init_chunks);
    tcase_add_test(tc, test_actnorm2d_init);
    tcase_add_test(tc, test_conv1x1_matrix);
    tcase_add_test(tc, test_conv1x1_corrupt_state);
    tcase_add_test(tc, test_accumulate);
    tcase_add_test(tc, test_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bij_image_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
