/* tests/check_dist.c - base distributions: known values (log-density, log-CDF, log-survival against
 * GSL's Gaussian density and gsl_cdf_gaussian_P/Q, with conditional parameters recomputed from the
 * slices), finite-difference gradients of log_prob, log_cdf and log_survival wrt parameters, latents and
 * context (double build), sampling gradients (diag-normal, and gmm with fixed weights, alone and in a
 * flow), normalisation in 1-D (GSL quadrature) and 2-D (grid), the tails against quadrature of the
 * density and finite far in the tails, samplers against their densities (moments and a chi-square on a
 * histogram) for a fixed context, and option errors.  Every check loops over the table of cases:
 * each type, unconditional and conditional (context=linear, context width 3), and gmm with fixed
 * weights. */
#include <check.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_sf_erf.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "distributions/dist.h"
#include "flows/flow.h"

#ifdef NF_DOUBLE
#define TOL_VALUE 1e-10
#define TOL_NORM 1e-8
#else
#define TOL_VALUE 2e-5
#define TOL_NORM 2e-5
#endif

typedef struct {
    const char *type, *options;
    int ctx_dim; /* context width supplied by the model (normal ignores it) */
} dist_case;

static const dist_case cases[] = {
    {"normal", "", 0},
    {"diag-normal", "", 0},
    {"gmm", "k=3, spread=0.8", 0},
    {"diag-normal", "context=linear", 3},
    {"gmm", "k=3, spread=0.8, context=linear", 3},
    {"gmm", "k=2, spread=1.3, fixed_weights=1", 0},
    {"gmm", "k=3, spread=0.9, fixed_weights=1, context=linear", 3},
    {"normal", "", 3},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double relerr(double a, double b, double floor)
{
    double m = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / m;
}

/* A distribution with parameters (and state: fixed logits) moved away from their initial values, so no
 * term is trivially zero, and a fixed context row c0 for the checks at one context. */
typedef struct {
    nf_dist d;
    nf_params *P, *S;
    nf_rng *rng;
    const dist_case *c;
    int C;          /* context width supplied */
    nf_real c0[3];  /* the fixed context */
} fixture;

static void fixture_make(fixture *f, const dist_case *c, int dim, uint64_t seed)
{
    f->P = nf_params_alloc();
    f->S = nf_params_alloc();
    f->rng = nf_rng_alloc(seed, 0);
    f->c = c;
    f->C = c->ctx_dim;
    f->c0[0] = (nf_real)0.913, f->c0[1] = (nf_real)-1.472, f->c0[2] = (nf_real)0.385;
    ck_assert_ptr_nonnull(f->P);
    const nf_dist_type *t = nf_dist_type_find(c->type);
    ck_assert_msg(t != NULL, "type %s not registered", c->type);
    int rc = nf_dist_create(&f->d, t, dim, c->ctx_dim, "base", c->options, f->P, f->S, f->rng);
    ck_assert_msg(rc == NF_OK, "%s(%s): create failed: %s", c->type, c->options, nf_strerror_last());
    nf_rng *r = nf_rng_alloc(seed, 7);
    for (size_t i = 0; i < f->P->n; i++) f->P->value[i] += (nf_real)(0.7 * (nf_rng_uniform(r) - 0.5));
    for (size_t i = 0; i < f->S->n; i++) f->S->value[i] += (nf_real)(1.1 * (nf_rng_uniform(r) - 0.5));
    nf_rng_free(r);
}

static void fixture_free(fixture *f)
{
    nf_dist_destroy(&f->d);
    nf_params_free(f->P);
    nf_params_free(f->S);
    nf_rng_free(f->rng);
}

/* n copies of the fixed context (NULL when the case supplies none); free() it. */
static nf_real *ctx_repeat(const fixture *f, int n)
{
    if (!f->C) return NULL;
    nf_real *c = malloc((size_t)n * f->C * sizeof *c);
    for (int i = 0; i < n; i++) memcpy(c + (size_t)i * f->C, f->c0, (size_t)f->C * sizeof *c);
    return c;
}

static const char *case_name(const fixture *f)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "%s(%s) C=%d", f->c->type, f->c->options, f->C);
    return buf;
}

/* log p(z | c0) of one row */
static double logp1(fixture *f, const nf_real *z)
{
    nf_real lp;
    ck_assert_int_eq(f->d.type->log_prob(&f->d, &lp, z, f->C ? f->c0 : NULL, NULL, 1), NF_OK);
    return lp;
}

/* ---- an independent reference: the mixture a, mu, s at context c, recomputed from the slices ---- */

#define RK 8
#define RD 4
typedef struct {
    int K;
    double a[RK], mu[RK * RD], s[RK * RD];
} ref_model;

static const nf_real *slice(const nf_params *P, const char *name, size_t *size)
{
    const nf_param_slice *sl = nf_params_find(P, name);
    if (!sl) return NULL;
    if (size) *size = sl->size;
    return P->value + sl->offset;
}

static void ref_params(const fixture *f, const nf_real *c, ref_model *m)
{
    const int D = f->d.dim;
    ck_assert_int_le(D, RD);
    memset(m, 0, sizeof *m);
    m->K = 1;
    if (strcmp(f->c->type, "normal") == 0) return;
    double th[RK + 2 * RK * RD];
    size_t nth = 0, sz;
    const nf_real *a = NULL;
    if (strcmp(f->c->type, "gmm") == 0) {
        a = slice(f->P, "base.logits", &sz);
        if (!a) a = slice(f->S, "base.logits", &sz);
        ck_assert_ptr_nonnull(a);
        m->K = (int)sz;
        ck_assert_int_le(m->K, RK);
        for (size_t k = 0; k < sz; k++) th[nth++] = a[k];
    }
    const int K = m->K, na = nth;
    const nf_real *mu = slice(f->P, "base.mean", NULL), *s = slice(f->P, "base.log_scale", NULL);
    for (int q = 0; q < K * D; q++) th[nth++] = mu[q];
    for (int q = 0; q < K * D; q++) th[nth++] = s[q];
    const nf_real *W = slice(f->P, "base.context.W", &sz);
    if (strstr(f->c->options, "context=linear")) {
        ck_assert_ptr_nonnull(W);
        const int C = f->C, rows = (int)(sz / C);
        ck_assert_uint_eq((size_t)rows * C, sz);
        /* rows for (a, mu, s), or for (mu, s) only when the logits are fixed */
        const int m0 = (int)nth - rows;
        ck_assert(m0 == 0 || (m0 == na && slice(f->S, "base.logits", NULL)));
        for (int r = 0; r < rows; r++)
            for (int q = 0; q < C; q++) th[m0 + r] += (double)W[r * C + q] * c[q];
    } else {
        ck_assert_ptr_null(W);
    }
    for (int k = 0; k < K; k++) m->a[k] = a ? th[k] : 0;
    for (int q = 0; q < K * D; q++) m->mu[q] = th[na + q], m->s[q] = th[na + K * D + q];
}

/* which 0: log p(z);  1: log P(Z <= z);  2: log P(Z > z)  (componentwise), from GSL */
static double ref_value(const ref_model *m, const nf_real *z, int D, int which)
{
    double amax = m->a[0], za = 0, p = 0;
    for (int k = 1; k < m->K; k++) amax = fmax(amax, m->a[k]);
    for (int k = 0; k < m->K; k++) za += exp(m->a[k] - amax);
    for (int k = 0; k < m->K; k++) {
        double t = exp(m->a[k] - amax) / za;
        for (int j = 0; j < D; j++) {
            double x = z[j] - m->mu[k * D + j], sd = exp(m->s[k * D + j]);
            t *= which == 0 ? gsl_ran_gaussian_pdf(x, sd) : which == 1 ? gsl_cdf_gaussian_P(x, sd)
                                                                       : gsl_cdf_gaussian_Q(x, sd);
        }
        p += t;
    }
    return log(p);
}

/* ---- known values, against GSL's Gaussian density, CDF and survival function ---- */

START_TEST(test_known_values)
{
    const nf_real z[2] = {2.385, -0.713};
    fixture f;
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 11 + c);
        ref_model m;
        ref_params(&f, f.c0, &m);
        const nf_real *cx = f.C ? f.c0 : NULL;
        nf_real v;
        ck_assert_int_eq(f.d.type->log_prob(&f.d, &v, z, cx, NULL, 1), NF_OK);
        double expect = ref_value(&m, z, 2, 0);
        ck_assert_msg(relerr(v, expect, 1) < TOL_VALUE, "%s: log p = %.12g, expected %.12g", case_name(&f), v, expect);
        ck_assert(f.d.type->log_cdf != NULL);
        ck_assert_int_eq(f.d.type->log_cdf(&f.d, &v, z, cx, 1), NF_OK);
        expect = ref_value(&m, z, 2, 1);
        ck_assert_msg(relerr(v, expect, 1) < TOL_VALUE, "%s: log CDF = %.12g, expected %.12g", case_name(&f), v,
                      expect);
        ck_assert_int_eq(f.d.type->log_survival(&f.d, &v, z, cx, 1), NF_OK);
        expect = ref_value(&m, z, 2, 2);
        ck_assert_msg(relerr(v, expect, 1) < TOL_VALUE, "%s: log survival = %.12g, expected %.12g", case_name(&f),
                      v, expect);
        /* the instance reads the context exactly when it is conditional */
        ck_assert_int_eq(f.d.ctx_dim, strstr(cases[c].options, "context=linear") ? cases[c].ctx_dim : 0);
        fixture_free(&f);
    }
}
END_TEST

/* The standard normal log-CDF and its derivative against GSL's log erfc and hazard function, from
 * x = -1000 to 12 (through the switch to the asymptotic series at -30). */
START_TEST(test_log_ndtr)
{
    for (double x = -1000; x < 12; x += (x < -60 ? 37.31 : 0.2385)) {
        /* on the right, log(1 - Q) (GSL's log erfc of a negative argument loses the small Q) */
        double want = x > 0 ? log1p(-gsl_cdf_ugaussian_Q(x)) : gsl_sf_log_erfc(-x / sqrt(2.0)) - log(2.0),
               got = nf_log_ndtr(x);
        ck_assert_msg(isfinite(got) && relerr(got, want, 1e-300) < 1e-12, "log Phi(%g) = %.15g, GSL %.15g", x, got,
                      want);
        double rwant = gsl_sf_hazard(-x), rgot = nf_ndtr_ratio(x);
        ck_assert_msg(isfinite(rgot) && relerr(rgot, rwant, 1e-300) < 1e-10, "phi/Phi(%g) = %.15g, GSL %.15g", x,
                      rgot, rwant);
    }
    /* the right tail keeps 1 - Phi: log Phi(9.5) = log(1 - Q(9.5)) ~ -Q(9.5) */
    ck_assert(relerr(nf_log_ndtr(9.5), -gsl_cdf_ugaussian_Q(9.5), 0) < 1e-10);
    /* no step where the series takes over at -30: the difference quotient across it is the slope */
    const double h = 1e-6, slope = (nf_log_ndtr(-30 + h) - nf_log_ndtr(-30 - h)) / (2 * h);
    ck_assert_msg(relerr(slope, nf_ndtr_ratio(-30), 0) < 1e-6, "slope across -30: %.12g vs %.12g", slope,
                  nf_ndtr_ratio(-30));
}
END_TEST

#ifdef NF_DOUBLE
/* ---- finite-difference gradients of L = sum_i w_i f(z_i | c_i) wrt z, c and every parameter ---- */

#define GN 4
#define GD 3
static const double gw[GN] = {0.83, -1.27, 0.46, 2.05};
static const char *const kind_name[3] = {"log_prob", "log_cdf", "log_survival"};

static void eval_kind(fixture *f, int kind, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    const nf_dist_type *t = f->d.type;
    int rc = kind == 0 ? t->log_prob(&f->d, out, z, ctx, NULL, n)
           : kind == 1 ? t->log_cdf(&f->d, out, z, ctx, n)
                       : t->log_survival(&f->d, out, z, ctx, n);
    ck_assert_msg(rc == NF_OK, "%s %s: %s", case_name(f), kind_name[kind], nf_strerror_last());
}

static double loss(fixture *f, int kind, const nf_real *z, const nf_real *ctx)
{
    nf_real v[GN];
    eval_kind(f, kind, v, z, ctx, GN);
    double L = 0;
    for (int i = 0; i < GN; i++) L += gw[i] * v[i];
    return L;
}

/* Central difference of loss() in the entry *x. */
static double fd_entry(fixture *f, int kind, nf_real *x, const nf_real *z, const nf_real *ctx)
{
    const double h = 1e-5;
    nf_real keep = *x;
    *x = keep + h;
    double Lp = loss(f, kind, z, ctx);
    *x = keep - h;
    double Lm = loss(f, kind, z, ctx);
    *x = keep;
    return (Lp - Lm) / (2 * h);
}

START_TEST(test_gradients)
{
    fixture f;
    for (int c = 0; c < NCASES; c++) {
        for (int kind = 0; kind < 3; kind++) {
            fixture_make(&f, &cases[c], GD, 21 + c);
            nf_real z[GN * GD], dz[GN * GD], w[GN], ctx[GN * 3], dctx[GN * 3];
            nf_rng *r = nf_rng_alloc(5, 1);
            for (int i = 0; i < GN * GD; i++) z[i] = (nf_real)(1.4 * nf_rng_normal(r));
            for (int i = 0; i < GN * 3; i++) ctx[i] = (nf_real)(1.1 * nf_rng_normal(r));
            nf_rng_free(r);
            const nf_real *cx = f.C ? ctx : NULL;
            for (int i = 0; i < GN; i++) w[i] = (nf_real)gw[i];
            /* Pre-filled buffers: backward must add, not overwrite. */
            for (int i = 0; i < GN * GD; i++) dz[i] = 0.25;
            for (int i = 0; i < GN * 3; i++) dctx[i] = -0.375;
            for (size_t q = 0; q < f.P->n; q++) f.P->grad[q] = 0.125;
            nf_real v[GN];
            eval_kind(&f, kind, v, z, cx, GN);
            const nf_dist_type *t = f.d.type;
            int rc = kind == 0 ? t->backward(&f.d, dz, dctx, w, z, cx, NULL, GN)
                   : kind == 1 ? t->log_cdf_backward(&f.d, dz, dctx, w, z, cx, GN)
                               : t->log_survival_backward(&f.d, dz, dctx, w, z, cx, GN);
            ck_assert_int_eq(rc, NF_OK);
            for (int i = 0; i < GN * GD; i++) {
                double fd = fd_entry(&f, kind, &z[i], z, cx), an = dz[i] - 0.25;
                ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s %s: dL/dz[%d] = %.10g, finite difference %.10g",
                              case_name(&f), kind_name[kind], i, an, fd);
            }
            for (int i = 0; i < GN * f.C; i++) {
                double fd = fd_entry(&f, kind, &ctx[i], z, cx), an = dctx[i] + 0.375;
                ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s %s: dL/dctx[%d] = %.10g, finite difference %.10g",
                              case_name(&f), kind_name[kind], i, an, fd);
            }
            for (size_t q = 0; q < f.P->n; q++) {
                double fd = fd_entry(&f, kind, &f.P->value[q], z, cx), an = f.P->grad[q] - 0.125;
                ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s %s: dL/dtheta[%zu] = %.10g, finite difference %.10g",
                              case_name(&f), kind_name[kind], q, an, fd);
            }
            /* NULL dz and dctx: parameter gradients only */
            rc = kind == 0 ? t->backward(&f.d, NULL, NULL, w, z, cx, NULL, GN)
               : kind == 1 ? t->log_cdf_backward(&f.d, NULL, NULL, w, z, cx, GN)
                           : t->log_survival_backward(&f.d, NULL, NULL, w, z, cx, GN);
            ck_assert_int_eq(rc, NF_OK);
            fixture_free(&f);
        }
    }
}
END_TEST

/* Reparameterised draws: L(theta, c) = sum a_ij z_ij + sum_i w_i logp_i over draws with a fixed seed. */
static double sample_loss(fixture *f, const nf_real *a, const nf_real *ctx, int with_logp)
{
    nf_real z[GN * GD], lp[GN];
    nf_rng *r = nf_rng_alloc(99, 3);
    ck_assert_int_eq(f->d.type->sample(&f->d, z, lp, ctx, GN, r), NF_OK);
    nf_rng_free(r);
    double L = 0;
    for (int i = 0; i < GN * GD; i++) L += a[i] * z[i];
    if (with_logp)
        for (int i = 0; i < GN; i++) L += gw[i] * lp[i];
    return L;
}

static double sample_fd(fixture *f, nf_real *x, const nf_real *a, const nf_real *ctx, int with_logp)
{
    const double h = 1e-5;
    nf_real keep = *x;
    *x = keep + h;
    double Lp = sample_loss(f, a, ctx, with_logp);
    *x = keep - h;
    double Lm = sample_loss(f, a, ctx, with_logp);
    *x = keep;
    return (Lp - Lm) / (2 * h);
}

/* Cases with a pathwise gradient: diag-normal and gmm with fixed weights, each with and without
 * context.  Mode 0: sample_backward(dz, dlogp) alone; mode 1: as a flow does it, backward(dlogp)
 * adding into dz, then sample_backward(dz, NULL). */
START_TEST(test_sample_backward)
{
    static const int pathwise[] = {1, 3, 5, 6, 0, 7};
    fixture f;
    nf_real a[GN * GD], w[GN], z[GN * GD], lp[GN], ctx[GN * 3], dctx[GN * 3], dzb[GN * GD];
    for (int i = 0; i < GN * GD; i++) a[i] = (nf_real)(0.3 + 0.17 * i - 0.021 * i * i);
    for (int i = 0; i < GN; i++) w[i] = (nf_real)gw[i];
    for (int i = 0; i < GN * 3; i++) ctx[i] = (nf_real)(0.61 - 0.233 * i + 0.0417 * i * i);
    for (int pc = 0; pc < (int)(sizeof pathwise / sizeof *pathwise); pc++) {
        for (int mode = 0; mode < 3; mode++) {
            const int with_logp = mode > 0;
            fixture_make(&f, &cases[pathwise[pc]], GD, 31 + pc);
            const nf_real *cx = f.C ? ctx : NULL;
            nf_rng *r = nf_rng_alloc(99, 3);
            ck_assert_int_eq(f.d.type->sample(&f.d, z, lp, cx, GN, r), NF_OK);
            nf_rng_free(r);
            for (size_t q = 0; q < f.P->n; q++) f.P->grad[q] = -0.5;
            for (int i = 0; i < GN * 3; i++) dctx[i] = 0.625;
            if (mode == 2) {
                memcpy(dzb, a, sizeof dzb);
                ck_assert_int_eq(f.d.type->backward(&f.d, dzb, dctx, w, z, cx, NULL, GN), NF_OK);
                ck_assert_msg(f.d.type->sample_backward(&f.d, dctx, dzb, NULL, z, cx, GN) == NF_OK, "%s",
                              nf_strerror_last());
            } else {
                ck_assert_msg(f.d.type->sample_backward(&f.d, dctx, a, with_logp ? w : NULL, z, cx, GN) == NF_OK,
                              "%s", nf_strerror_last());
            }
            for (size_t q = 0; q < f.P->n; q++) {
                double fd = sample_fd(&f, &f.P->value[q], a, cx, with_logp), an = f.P->grad[q] + 0.5;
                ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s sample_backward (mode %d): dtheta[%zu] = %.10g, "
                              "finite difference %.10g", case_name(&f), mode, q, an, fd);
            }
            for (int i = 0; i < GN * f.C; i++) {
                double fd = sample_fd(&f, &ctx[i], a, cx, with_logp), an = dctx[i] - 0.625;
                ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "%s sample_backward (mode %d): dctx[%d] = %.10g, "
                              "finite difference %.10g", case_name(&f), mode, i, an, fd);
            }
            fixture_free(&f);
        }
    }
}
END_TEST

/* Reverse KL through a conditional flow on a gmm base with fixed weights: nf_flow_sample_backward
 * (bijectors, then the base's backward and its pathwise part) against finite differences. */
START_TEST(test_flow_sampling_gradients)
{
    const char *spec = "affine-coupling(hidden=6), affine-coupling(hidden=6, flip=1); "
                       "base=gmm(k=3, spread=0.9, fixed_weights=1, context=linear)";
    enum { D = 2, C = 3, n = 5 };
    nf_flow *fl;
    ck_assert_msg(nf_flow_create(&fl, spec, D, C, 17) == NF_OK, "%s", nf_strerror_last());
    ck_assert_ptr_nonnull(nf_params_find(fl->S, "base.logits"));
    ck_assert_ptr_null(nf_params_find(fl->P, "base.logits"));
    nf_rng *pr = nf_rng_alloc(8, 0);
    for (size_t i = 0; i < fl->P->n; i++) fl->P->value[i] += (nf_real)(0.4 * (nf_rng_uniform(pr) - 0.5));
    for (size_t i = 0; i < fl->S->n; i++) fl->S->value[i] += (nf_real)(0.9 * (nf_rng_uniform(pr) - 0.5));
    nf_rng_free(pr);
    nf_real x[n * D], lp[n], dx[n * D], dlp[n], ctx[n * C], dctx[n * C] = {0};
    for (int i = 0; i < n * D; i++) dx[i] = (nf_real)(0.7 - 0.19 * i);
    for (int i = 0; i < n; i++) dlp[i] = (nf_real)(-0.45 + 0.31 * i);
    for (int i = 0; i < n * C; i++) ctx[i] = (nf_real)(0.83 * sin(1.7 * i + 0.3));
    nf_rng *r = nf_rng_alloc(3, 0);
    ck_assert_int_eq(nf_flow_sample(fl, x, lp, ctx, n, r), NF_OK);
    nf_rng_free(r);
    nf_params_zero_grad(fl->P);
    ck_assert_msg(nf_flow_sample_backward(fl, dx, dlp, dctx) == NF_OK, "%s", nf_strerror_last());
    const size_t np = fl->P->n;
    for (size_t q = 0; q < np + n * C; q++) {
        nf_real *p = q < np ? &fl->P->value[q] : &ctx[q - np];
        double an = q < np ? fl->P->grad[q] : dctx[q - np];
        if (q < np && fl->P->value[q] == 0 && an == 0) continue; /* masked weight */
        nf_real keep = *p;
        double L[2];
        for (int s = 0; s < 2; s++) {
            *p = keep + (s ? -1e-6 : 1e-6);
            nf_rng *rr = nf_rng_alloc(3, 0);
            ck_assert_int_eq(nf_flow_sample(fl, x, lp, ctx, n, rr), NF_OK);
            nf_rng_free(rr);
            L[s] = 0;
            for (int i = 0; i < n * D; i++) L[s] += dx[i] * x[i];
            for (int i = 0; i < n; i++) L[s] += dlp[i] * lp[i];
        }
        *p = keep;
        double fd = (L[0] - L[1]) / 2e-6;
        ck_assert_msg(relerr(an, fd, 1e-3) < 1e-5, "flow on gmm: d/d%s[%zu] = %.10g, finite difference %.10g",
                      q < np ? "theta" : "ctx", q < np ? q : q - np, an, fd);
    }
    nf_flow_free(fl);

    /* trainable weights: an error that says what to do, also through the flow */
    ck_assert_int_eq(nf_flow_create(&fl, "affine-coupling(hidden=6); base=gmm(k=3)", D, 0, 17), NF_OK);
    r = nf_rng_alloc(3, 0);
    ck_assert_int_eq(nf_flow_sample(fl, x, lp, NULL, n, r), NF_OK);
    nf_rng_free(r);
    ck_assert_int_eq(nf_flow_sample_backward(fl, dx, dlp, NULL), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "mixture weights cannot be trained through sampling") &&
                  strstr(nf_strerror_last(), "base=gmm(fixed_weights=1)"), "message: %s", nf_strerror_last());
    nf_flow_free(fl);
}
END_TEST
#endif

/* ---- normalisation (at the fixed context) ---- */

static double density_1d(double x, void *p)
{
    nf_real z = (nf_real)x;
    return exp(logp1(p, &z));
}

START_TEST(test_normalised_1d)
{
    fixture f;
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(1000);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 1, 41 + c);
        gsl_function F = {density_1d, &f};
        double I, err;
        gsl_integration_qagi(&F, 1e-12, 1e-10, 1000, ws, &I, &err); /* float: may report roundoff, value checked */
        ck_assert_msg(fabs(I - 1) < TOL_NORM, "%s: integral of p over R = %.12g", case_name(&f), I);
        fixture_free(&f);
    }
    gsl_integration_workspace_free(ws);
}
END_TEST

/* Midpoint rule on [-L, L]^2; also returns the first two moments of each coordinate. */
#define GRID 600
static double grid_2d(fixture *f, double L, double mom[5])
{
    static nf_real z[GRID * 2], lp[GRID];
    nf_real *cx = ctx_repeat(f, GRID);
    const double hgrid = 2 * L / GRID;
    double I = 0;
    for (int q = 0; q < 5; q++) mom[q] = 0;
    for (int a = 0; a < GRID; a++) {
        for (int b = 0; b < GRID; b++) {
            z[2 * b] = (nf_real)(-L + (a + 0.5) * hgrid);
            z[2 * b + 1] = (nf_real)(-L + (b + 0.5) * hgrid);
        }
        ck_assert_int_eq(f->d.type->log_prob(&f->d, lp, z, cx, NULL, GRID), NF_OK);
        for (int b = 0; b < GRID; b++) {
            double p = exp(lp[b]) * hgrid * hgrid, x = z[2 * b], y = z[2 * b + 1];
            I += p;
            mom[0] += p * x, mom[1] += p * y, mom[2] += p * x * x, mom[3] += p * y * y, mom[4] += p * x * y;
        }
    }
    free(cx);
    return I;
}

START_TEST(test_normalised_2d)
{
    fixture f;
    double mom[5];
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 51 + c);
        double I = grid_2d(&f, 12.0, mom);
        ck_assert_msg(fabs(I - 1) < TOL_NORM * 10, "%s: integral of p over the 2-D grid = %.12g", case_name(&f), I);
        fixture_free(&f);
    }
}
END_TEST

/* ---- tails: against quadrature of the density in 1-D, and finite far out ---- */

START_TEST(test_tails)
{
    static const double zs[] = {-2.385, -0.713, 0.291, 1.846};
    fixture f;
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(1000);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 1, 81 + c);
        gsl_function F = {density_1d, &f};
        for (int q = 0; q < 4; q++) {
            double lo, hi, err;
            gsl_integration_qagil(&F, zs[q], 1e-13, 1e-10, 1000, ws, &lo, &err);
            gsl_integration_qagiu(&F, zs[q], 1e-13, 1e-10, 1000, ws, &hi, &err);
            nf_real z = (nf_real)zs[q], vc, vs;
            const nf_real *cx = f.C ? f.c0 : NULL;
            ck_assert_int_eq(f.d.type->log_cdf(&f.d, &vc, &z, cx, 1), NF_OK);
            ck_assert_int_eq(f.d.type->log_survival(&f.d, &vs, &z, cx, 1), NF_OK);
            ck_assert_msg(relerr(exp(vc), lo, 1e-3) < TOL_NORM, "%s: P(Z <= %g) = %.12g, quadrature %.12g",
                          case_name(&f), zs[q], exp(vc), lo);
            ck_assert_msg(relerr(exp(vs), hi, 1e-3) < TOL_NORM, "%s: P(Z > %g) = %.12g, quadrature %.12g",
                          case_name(&f), zs[q], exp(vs), hi);
        }
        fixture_free(&f);
    }
    gsl_integration_workspace_free(ws);

    /* +-40 sigma of every component, in 2-D: finite values and gradients; the near side ~ 0 */
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 91 + c);
        ref_model m;
        ref_params(&f, f.c0, &m);
        double lo = INFINITY, hi = -INFINITY;
        for (int q = 0; q < m.K * 2; q++) {
            lo = fmin(lo, m.mu[q] - 40 * exp(m.s[q]));
            hi = fmax(hi, m.mu[q] + 40 * exp(m.s[q]));
        }
        nf_real z[4] = {(nf_real)lo, (nf_real)(lo * 1.05), (nf_real)hi, (nf_real)(hi * 1.05)}, v[2], dz[4] = {0},
                w[2] = {1.0, -0.8};
        nf_real *cx = ctx_repeat(&f, 2), dctx[6] = {0};
        for (int kind = 1; kind <= 2; kind++) {
            int rc = kind == 1 ? f.d.type->log_cdf(&f.d, v, z, cx, 2) : f.d.type->log_survival(&f.d, v, z, cx, 2);
            ck_assert_msg(rc == NF_OK, "%s: %s", case_name(&f), nf_strerror_last());
            /* row 0 is far left: log-CDF hugely negative, log-survival ~ 0; row 1 the mirror */
            const int far = kind == 1 ? 0 : 1, near = 1 - far;
            ck_assert_msg(isfinite(v[far]) && v[far] < -700, "%s: far tail value %g", case_name(&f), v[far]);
            ck_assert_msg(v[near] <= 0 && v[near] > -1e-10, "%s: near side value %g", case_name(&f), v[near]);
            rc = kind == 1 ? f.d.type->log_cdf_backward(&f.d, dz, dctx, w, z, cx, 2)
                           : f.d.type->log_survival_backward(&f.d, dz, dctx, w, z, cx, 2);
            ck_assert_int_eq(rc, NF_OK);
            for (int i = 0; i < 4; i++) ck_assert_msg(isfinite(dz[i]), "%s: dz[%d] = %g", case_name(&f), i, dz[i]);
            for (int i = 0; i < 6; i++) ck_assert(isfinite(dctx[i]));
            ck_assert(nf_params_all_finite(f.P));
        }
        free(cx);
        fixture_free(&f);
    }
}
END_TEST

/* ---- samplers against densities (at the fixed context) ---- */

#define NS 200000
#define NBIN 20

START_TEST(test_sampler_1d)
{
    fixture f;
    nf_real *z = malloc(NS * sizeof *z), *lp = malloc(NS * sizeof *lp);
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(1000);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 1, 61 + c);
        gsl_function F = {density_1d, &f};
        /* moments of the density (mean, variance, central 4th moment) by the midpoint rule */
        double m1 = 0, m2 = 0, m4 = 0, err;
        /* 8000 midpoint nodes on [-20, 20] are far more than enough for these Gaussian tails */
        const int M = 8000;
        const double lo = -20, hx = 40.0 / M;
        for (int q = 0; q < M; q++) {
            double x = lo + (q + 0.5) * hx, p = density_1d(x, &f) * hx;
            m1 += p * x, m2 += p * x * x;
        }
        double var = m2 - m1 * m1;
        for (int q = 0; q < M; q++) {
            double x = lo + (q + 0.5) * hx, p = density_1d(x, &f) * hx;
            m4 += p * pow(x - m1, 4);
        }

        nf_real *cx = ctx_repeat(&f, NS);
        ck_assert_int_eq(f.d.type->sample(&f.d, z, lp, cx, NS, f.rng), NF_OK);
        free(cx);
        double s1 = 0, s2 = 0;
        for (int i = 0; i < NS; i++) s1 += z[i];
        s1 /= NS;
        for (int i = 0; i < NS; i++) s2 += (z[i] - s1) * (z[i] - s1);
        s2 /= NS - 1;
        double se_mean = sqrt(var / NS), se_var = sqrt((m4 - var * var) / NS);
        ck_assert_msg(fabs(s1 - m1) < 5 * se_mean, "%s: sample mean %.6g, density mean %.6g (se %.2g)", case_name(&f),
                      s1, m1, se_mean);
        ck_assert_msg(fabs(s2 - var) < 5 * se_var, "%s: sample variance %.6g, density variance %.6g (se %.2g)",
                      case_name(&f), s2, var, se_var);

        /* logp returned by sample is the density at the sample */
        for (int i = 0; i < 50; i++)
            ck_assert_msg(relerr(lp[i], logp1(&f, &z[i]), 1) < TOL_VALUE * 10, "%s: sample logp[%d] = %g, log_prob %g",
                          case_name(&f), i, lp[i], logp1(&f, &z[i]));

        /* chi-square on NBIN bins over mean +- 3 sd plus the two tails */
        double edges[NBIN + 1], expect[NBIN + 2], sd = sqrt(var);
        long count[NBIN + 2] = {0};
        for (int b = 0; b <= NBIN; b++) edges[b] = m1 - 3 * sd + 6 * sd * b / NBIN;
        double tail_lo, tail_hi;
        gsl_integration_qagil(&F, edges[0], 1e-13, 1e-10, 1000, ws, &tail_lo, &err);
        gsl_integration_qagiu(&F, edges[NBIN], 1e-13, 1e-10, 1000, ws, &tail_hi, &err);
        expect[0] = tail_lo * NS, expect[NBIN + 1] = tail_hi * NS;
        for (int b = 0; b < NBIN; b++) {
            double p;
            gsl_integration_qags(&F, edges[b], edges[b + 1], 1e-13, 1e-10, 1000, ws, &p, &err);
            expect[b + 1] = p * NS;
        }
        for (int i = 0; i < NS; i++) {
            int b;
            if (z[i] < edges[0]) b = 0;
            else if (z[i] >= edges[NBIN]) b = NBIN + 1;
            else {
                b = 1 + (int)((z[i] - edges[0]) / (edges[NBIN] - edges[0]) * NBIN);
                if (b > NBIN) b = NBIN;
            }
            count[b]++;
        }
        double chi2 = 0;
        for (int b = 0; b < NBIN + 2; b++) {
            ck_assert_msg(expect[b] > 5, "%s: bin %d expects only %.2f samples", case_name(&f), b, expect[b]);
            chi2 += (count[b] - expect[b]) * (count[b] - expect[b]) / expect[b];
        }
        /* 21 degrees of freedom: mean 21, sd 6.5; 70 is beyond the 1e-6 quantile */
        ck_assert_msg(chi2 < 70, "%s: histogram chi-square %.1f on %d bins", case_name(&f), chi2, NBIN + 2);
        fixture_free(&f);
    }
    gsl_integration_workspace_free(ws);
    free(z);
    free(lp);
}
END_TEST

START_TEST(test_sampler_2d)
{
    const int N = 100000;
    fixture f;
    nf_real *z = malloc(2 * (size_t)N * sizeof *z);
    for (int c = 0; c < NCASES; c++) {
        fixture_make(&f, &cases[c], 2, 71 + c);
        double mom[5];
        grid_2d(&f, 12.0, mom);
        double vx = mom[2] - mom[0] * mom[0], vy = mom[3] - mom[1] * mom[1], cxy = mom[4] - mom[0] * mom[1];
        nf_real *cx = ctx_repeat(&f, N);
        ck_assert_int_eq(f.d.type->sample(&f.d, z, NULL, cx, N, f.rng), NF_OK);
        free(cx);
        double s[5] = {0};
        for (int i = 0; i < N; i++) {
            double x = z[2 * i], y = z[2 * i + 1];
            s[0] += x, s[1] += y, s[2] += x * x, s[3] += y * y, s[4] += x * y;
        }
        for (int q = 0; q < 5; q++) s[q] /= N;
        double svx = s[2] - s[0] * s[0], svy = s[3] - s[1] * s[1], scxy = s[4] - s[0] * s[1];
        const double k = 5 / sqrt((double)N);
        ck_assert_msg(fabs(s[0] - mom[0]) < k * sqrt(vx) && fabs(s[1] - mom[1]) < k * sqrt(vy),
                      "%s: sample mean (%g, %g), density (%g, %g)", case_name(&f), s[0], s[1], mom[0], mom[1]);
        /* variance of a variance estimate <= a few var^2 / N for these light-tailed mixtures */
        ck_assert_msg(fabs(svx - vx) < 3 * k * vx && fabs(svy - vy) < 3 * k * vy,
                      "%s: sample variances (%g, %g), density (%g, %g)", case_name(&f), svx, svy, vx, vy);
        ck_assert_msg(fabs(scxy - cxy) < 3 * k * sqrt(vx * vy), "%s: sample covariance %g, density %g",
                      case_name(&f), scxy, cxy);
        fixture_free(&f);
    }
    free(z);
}
END_TEST

/* A conditional sampler really follows each row's context: two contexts in one batch. */
START_TEST(test_sampler_per_row_context)
{
    enum { N = 40000 };
    fixture f;
    for (int c = 3; c <= 4; c++) {
        fixture_make(&f, &cases[c], 1, 101 + c);
        nf_real *z = malloc(N * sizeof *z), *cx = malloc(N * 3 * sizeof *cx);
        const nf_real c1[3] = {-1.213, 0.547, 2.031};
        for (int i = 0; i < N; i++) memcpy(cx + 3 * i, i % 2 ? c1 : f.c0, sizeof c1);
        ck_assert_int_eq(f.d.type->sample(&f.d, z, NULL, cx, N, f.rng), NF_OK);
        for (int h = 0; h < 2; h++) {
            /* the mean of the density at this context by the midpoint rule vs the rows drawn with it */
            memcpy(f.c0, h ? c1 : cx, sizeof c1);
            double m1 = 0, m2 = 0, s1 = 0;
            for (int q = 0; q < 8000; q++) {
                double x = -20 + (q + 0.5) * 0.005, p = density_1d(x, &f) * 0.005;
                m1 += p * x, m2 += p * x * x;
            }
            for (int i = h; i < N; i += 2) s1 += z[i];
            s1 /= N / 2;
            double se = sqrt((m2 - m1 * m1) / (N / 2));
            ck_assert_msg(fabs(s1 - m1) < 5 * se, "%s: context %d: sample mean %g, density mean %g", case_name(&f), h,
                          s1, m1);
        }
        free(z);
        free(cx);
        fixture_free(&f);
    }
}
END_TEST

/* ---- construction and errors ---- */

START_TEST(test_options_and_errors)
{
    nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(3, 0);
    nf_dist d;
    int rc = nf_dist_create(&d, &nf_dist_gmm, 2, 0, "base", "k=3, bogus=2", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "bogus") && strstr(nf_strerror_last(), "gmm"), "message: %s",
                  nf_strerror_last());
    nf_dist_destroy(&d); /* harmless after a failed create */

    rc = nf_dist_create(&d, &nf_dist_normal, 2, 0, "n", "k=3", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "'k'") && strstr(nf_strerror_last(), "normal"), "message: %s",
                  nf_strerror_last());

    rc = nf_dist_create(&d, &nf_dist_gmm, 2, 0, "g0", "k=0", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "k=0"), "message: %s", nf_strerror_last());

    rc = nf_dist_create(&d, &nf_dist_gmm, 2, 0, "g1", "k=2", P, NULL, NULL);
    ck_assert_int_eq(rc, NF_EINVAL);
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 0, 0, "dn", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "dimension 0"), "message: %s", nf_strerror_last());
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 2, -2, "dn", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "context width -2"), "message: %s", nf_strerror_last());

    /* context=linear without a context; a bad choice; fixed weights without a state store */
    for (int t = 0; t < 2; t++) {
        rc = nf_dist_create(&d, t ? &nf_dist_gmm : &nf_dist_diag_normal, 2, 0, "cl", "context=linear", P, S, r);
        ck_assert_int_eq(rc, NF_EINVAL);
        ck_assert_msg(strstr(nf_strerror_last(), "context=linear") && strstr(nf_strerror_last(), "context width 0"),
                      "message: %s", nf_strerror_last());
    }
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 2, 3, "cq", "context=quadratic", P, S, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "quadratic"), "message: %s", nf_strerror_last());
    rc = nf_dist_create(&d, &nf_dist_gmm, 2, 0, "fw", "fixed_weights=1", P, NULL, r);
    ck_assert_int_eq(rc, NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "fixed_weights=1"), "message: %s", nf_strerror_last());

    ck_assert_int_eq(nf_dist_create(&d, nf_dist_type_find("gaussian-mix"), 2, 0, "base", "", P, NULL, r), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "gaussian-mix") && strstr(nf_strerror_last(), "diag-normal"),
                  "message: %s", nf_strerror_last());
    int ntypes = 0;
    for (int i = 0; nf_dist_types[i]; i++, ntypes++) {
        ck_assert_ptr_eq(nf_dist_type_find(nf_dist_types[i]->name), nf_dist_types[i]);
        ck_assert(nf_dist_types[i]->log_cdf && nf_dist_types[i]->log_survival && nf_dist_types[i]->log_cdf_backward &&
                  nf_dist_types[i]->log_survival_backward && nf_dist_types[i]->sample_backward);
    }
    ck_assert_int_eq(ntypes, 3);

    /* defaults and slice layout: gmm k=8 by default, logits 0, log-scales 0, means not all equal */
    rc = nf_dist_create(&d, &nf_dist_gmm, 3, 0, "mix", NULL, P, NULL, r);
    ck_assert_int_eq(rc, NF_OK);
    const nf_param_slice *a = nf_params_find(P, "mix.logits"), *m = nf_params_find(P, "mix.mean"),
                         *s = nf_params_find(P, "mix.log_scale");
    ck_assert(a && m && s);
    ck_assert_ptr_null(nf_params_find(P, "mix.context.W"));
    ck_assert_uint_eq(a->size, 8);
    ck_assert_uint_eq(m->size, 24);
    ck_assert_uint_eq(s->size, 24);
    double sq = 0;
    for (size_t i = 0; i < 8; i++) ck_assert(P->value[a->offset + i] == 0);
    for (size_t i = 0; i < 24; i++) ck_assert(P->value[s->offset + i] == 0);
    for (size_t i = 0; i < 24; i++) sq += P->value[m->offset + i] * P->value[m->offset + i];
    ck_assert_msg(sq / 24 > 0.3 && sq / 24 < 3, "initial means have mean square %g, expected about 1", sq / 24);
    /* the component draw is not reparameterisable: sampling gradients need fixed weights */
    nf_real zs[6], dzs[6] = {0.41, -0.27, 0.93, 1.21, -0.52, 0.08};
    ck_assert_int_eq(d.type->sample(&d, zs, NULL, NULL, 2, r), NF_OK);
    ck_assert_int_eq(d.type->sample_backward(&d, NULL, dzs, NULL, zs, NULL, 2), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "gmm: the mixture weights cannot be trained through sampling (the "
                                             "component draw is not reparameterisable); use "
                                             "base=gmm(fixed_weights=1)"),
                  "message: %s", nf_strerror_last());
    nf_dist_destroy(&d);

    /* fixed weights: the logits are state (same name, initial 0), not parameters; sample_backward needs
     * the rows of the last sample */
    rc = nf_dist_create(&d, &nf_dist_gmm, 3, 0, "fixmix", "k=4, fixed_weights=1", P, S, r);
    ck_assert_int_eq(rc, NF_OK);
    a = nf_params_find(S, "fixmix.logits");
    ck_assert(a && a->size == 4 && !nf_params_find(P, "fixmix.logits"));
    for (size_t i = 0; i < 4; i++) ck_assert(S->value[a->offset + i] == 0);
    ck_assert_int_eq(d.type->sample_backward(&d, NULL, dzs, NULL, zs, NULL, 2), NF_EINVAL);
    ck_assert_int_eq(d.type->sample(&d, zs, NULL, NULL, 2, r), NF_OK);
    ck_assert_int_eq(d.type->sample_backward(&d, NULL, dzs, NULL, zs, NULL, 1), NF_EINVAL);
    ck_assert_int_eq(d.type->sample_backward(&d, NULL, dzs, NULL, zs, NULL, 2), NF_OK);
    nf_dist_destroy(&d);

    /* diag-normal starts as the standard normal */
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 2, 0, "dn", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_OK);
    nf_real z[2] = {2.385, -0.713}, lp;
    ck_assert_int_eq(d.type->log_prob(&d, &lp, z, NULL, NULL, 1), NF_OK);
    ck_assert(relerr(lp, -0.5 * (2.385 * 2.385 + 0.713 * 0.713) - log(2 * 3.14159265358979323846), 1) < TOL_VALUE);
    /* a non-finite latent is an error naming the row */
    nf_real zz[4] = {0.1, 0.2, NAN, 0.4}, lp2[2];
    ck_assert_int_eq(d.type->log_prob(&d, lp2, zz, NULL, NULL, 2), NF_ENONFINITE);
    ck_assert_msg(strstr(nf_strerror_last(), "row 1"), "message: %s", nf_strerror_last());
    nf_dist_destroy(&d);
    /* an unconditional type given a context width ignores it */
    rc = nf_dist_create(&d, &nf_dist_diag_normal, 2, 5, "dn5", "", P, NULL, r);
    ck_assert_int_eq(rc, NF_OK);
    ck_assert_int_eq(d.ctx_dim, 0);
    ck_assert_ptr_null(nf_params_find(P, "dn5.context.W"));
    nf_dist_destroy(&d);

    /* conditional slices: W (rows of theta, C) starting at 0, so the untrained conditional base is the
     * unconditional one at any context; a missing context is an error */
    static const struct {
        const nf_dist_type *t;
        const char *opts;
        size_t rows;
    } cond[] = {
        {&nf_dist_diag_normal, "context=linear", 2 * 2},
        {&nf_dist_gmm, "k=3, context=linear", 3 + 2 * 3 * 2},
        {&nf_dist_gmm, "k=3, context=linear, fixed_weights=1", 2 * 3 * 2},
    };
    for (int q = 0; q < 3; q++) {
        nf_params *P1 = nf_params_alloc(), *S1 = nf_params_alloc(), *P2 = nf_params_alloc(),
                  *S2 = nf_params_alloc();
        nf_rng *r1 = nf_rng_alloc(29, 0), *r2 = nf_rng_alloc(29, 0);
        nf_dist du, dc;
        const char *uopts = q == 0 ? "" : q == 1 ? "k=3" : "k=3, fixed_weights=1";
        ck_assert_int_eq(nf_dist_create(&du, cond[q].t, 2, 3, "u", uopts, P1, S1, r1), NF_OK);
        ck_assert_int_eq(nf_dist_create(&dc, cond[q].t, 2, 3, "u", cond[q].opts, P2, S2, r2), NF_OK);
        ck_assert_int_eq(dc.ctx_dim, 3);
        const nf_param_slice *w = nf_params_find(P2, "u.context.W");
        ck_assert_msg(w && w->size == cond[q].rows * 3, "%s: context.W size %zu", cond[q].opts, w ? w->size : 0);
        ck_assert_uint_eq(P2->n, P1->n + w->size);
        for (size_t i = 0; i < P1->n; i++) ck_assert(P1->value[i] == P2->value[i]);
        for (size_t i = 0; i < w->size; i++) ck_assert(P2->value[w->offset + i] == 0);
        const nf_real zc[4] = {0.385, -1.127, 2.213, 0.649}, cc[6] = {1.571, -0.287, 0.934, -2.05, 0.113, 0.772};
        nf_real lu[2], lc[2];
        ck_assert_int_eq(du.type->log_prob(&du, lu, zc, NULL, NULL, 2), NF_OK);
        ck_assert_int_eq(dc.type->log_prob(&dc, lc, zc, cc, NULL, 2), NF_OK);
        for (int i = 0; i < 2; i++)
            ck_assert_msg(relerr(lu[i], lc[i], 1) < 1e-6, "%s: %g vs %g", cond[q].opts, lu[i], lc[i]);
        ck_assert_int_eq(dc.type->log_prob(&dc, lc, zc, NULL, NULL, 2), NF_EINVAL);
        ck_assert_msg(strstr(nf_strerror_last(), "no context"), "message: %s", nf_strerror_last());
        ck_assert_int_eq(dc.type->sample(&dc, lc, NULL, NULL, 1, r2), NF_EINVAL);
        nf_dist_destroy(&du);
        nf_dist_destroy(&dc);
        nf_params_free(P1), nf_params_free(S1), nf_params_free(P2), nf_params_free(S2);
        nf_rng_free(r1), nf_rng_free(r2);
    }

    nf_params_free(P);
    nf_params_free(S);
    nf_rng_free(r);
}
END_TEST

/* ---- gmm with D = 1 and a context (the point-process decoder): the vectorised rows, the blocks of
 * Theta = 1 b^T + Ctx W^T, and the Theta that backward reuses from log_prob ---- */

#define G1N 20011 /* more than two blocks of rows (8738 for k=5, D=1) */
#define G1C 3

/* backward of sum_i w_i log p(z_i | ctx_i) from zero: P->grad into g (P->n), dz (n), dctx (n, C) */
static void gmm1_grads(fixture *f, const nf_real *z, const nf_real *ctx, const nf_real *w, int n, nf_real *g,
                       nf_real *dz, nf_real *dctx)
{
    memset(f->P->grad, 0, f->P->n * sizeof(nf_real));
    memset(dz, 0, (size_t)n * sizeof(nf_real));
    memset(dctx, 0, (size_t)n * G1C * sizeof(nf_real));
    ck_assert_int_eq(f->d.type->backward(&f->d, dz, dctx, w, z, ctx, NULL, n), NF_OK);
    memcpy(g, f->P->grad, f->P->n * sizeof(nf_real));
}

#ifdef NF_DOUBLE
static double gmm1_loss(fixture *f, const nf_real *z, const nf_real *ctx, const nf_real *w, nf_real *lp, int n)
{
    ck_assert_int_eq(f->d.type->log_prob(&f->d, lp, z, ctx, NULL, n), NF_OK);
    double L = 0;
    for (int i = 0; i < n; i++) L += (double)w[i] * lp[i];
    return L;
}
#endif

START_TEST(test_gmm_rows_1d)
{
    static const dist_case c = {"gmm", "k=5, spread=0.8, context=linear", G1C};
    fixture f;
    fixture_make(&f, &c, 1, 29);
    const int n = G1N;
    nf_real *z = malloc(n * sizeof *z), *ctx = malloc((size_t)n * G1C * sizeof *ctx), *lp = malloc(n * sizeof *lp);
    nf_real *ctx2 = malloc((size_t)n * G1C * sizeof *ctx2), *w = malloc(n * sizeof *w);
    nf_real *dz = malloc(n * sizeof *dz), *dctx = malloc((size_t)n * G1C * sizeof *dctx);
    nf_real *dz2 = malloc(n * sizeof *dz2), *dctx2 = malloc((size_t)n * G1C * sizeof *dctx2);
    nf_real *g = malloc(f.P->n * sizeof *g), *g2 = malloc(f.P->n * sizeof *g2);
    nf_rng *r = nf_rng_alloc(31, 0);
    for (int i = 0; i < n; i++) {
        z[i] = (nf_real)(1.3 * nf_rng_normal(r));
        w[i] = (nf_real)(nf_rng_uniform(r) - 0.3);
        for (int j = 0; j < G1C; j++) {
            ctx[(size_t)i * G1C + j] = (nf_real)(0.9 * nf_rng_normal(r));
            ctx2[(size_t)i * G1C + j] = (nf_real)(0.9 * nf_rng_normal(r));
        }
    }
    /* values in every block against the mixture recomputed from the slices (GSL densities) */
    ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, ctx, NULL, n), NF_OK);
    for (int i = 0; i < n; i += 53) {
        ref_model m;
        ref_params(&f, ctx + (size_t)i * G1C, &m);
        double ref = ref_value(&m, z + i, 1, 0);
        ck_assert_msg(relerr(lp[i], ref, 1) < TOL_VALUE, "row %d: log p %.12g, reference %.12g", i, (double)lp[i], ref);
    }
    /* backward right after log_prob (Theta reused) equals backward after a log_prob of other
     * contexts (Theta recomputed), bit for bit */
    ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, ctx2, NULL, n), NF_OK);
    gmm1_grads(&f, z, ctx, w, n, g2, dz2, dctx2);
    ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, ctx, NULL, n), NF_OK);
    gmm1_grads(&f, z, ctx, w, n, g, dz, dctx);
    ck_assert_msg(!memcmp(g, g2, f.P->n * sizeof *g) && !memcmp(dz, dz2, n * sizeof *dz) &&
                      !memcmp(dctx, dctx2, (size_t)n * G1C * sizeof *dctx),
                  "backward differs with and without the Theta of log_prob");
    /* a parameter or a context changed between log_prob and backward: backward sees the change */
    const nf_param_slice *W = nf_params_find(f.P, "base.context.W");
    ck_assert_ptr_nonnull(W);
    for (int what = 0; what < 2; what++) {
        ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, ctx, NULL, n), NF_OK);
        if (what == 0) f.P->value[W->offset + 4] += (nf_real)0.173;
        else ctx[(size_t)(n - 2) * G1C + 1] += (nf_real)0.291;
        gmm1_grads(&f, z, ctx, w, n, g, dz, dctx);
        ck_assert_int_eq(f.d.type->log_prob(&f.d, lp, z, ctx2, NULL, n), NF_OK);
        gmm1_grads(&f, z, ctx, w, n, g2, dz2, dctx2);
        ck_assert_msg(!memcmp(g, g2, f.P->n * sizeof *g) && !memcmp(dz, dz2, n * sizeof *dz) &&
                          !memcmp(dctx, dctx2, (size_t)n * G1C * sizeof *dctx),
                      "backward used a stale Theta after a change of %s", what ? "context" : "parameter");
    }
#ifdef NF_DOUBLE
    /* finite differences of sum_i w_i log p_i over all rows: every parameter, and the latent and
     * context of rows in each block */
    gmm1_grads(&f, z, ctx, w, n, g, dz, dctx);
    const double h = 1e-5;
    for (size_t q = 0; q < f.P->n; q++) {
        const nf_real v = f.P->value[q];
        f.P->value[q] = v + h;
        double lp1 = gmm1_loss(&f, z, ctx, w, lp, n);
        f.P->value[q] = v - h;
        double lm1 = gmm1_loss(&f, z, ctx, w, lp, n);
        f.P->value[q] = v;
        double fd = (lp1 - lm1) / (2 * h);
        ck_assert_msg(relerr(g[q], fd, 1e-3) < 1e-6, "d/dparam[%zu] = %.10g, finite difference %.10g", q, g[q], fd);
    }
    const int rows[] = {0, 8737, 8738, 17477, n - 1};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        for (int j = -1; j < G1C; j++) {
            nf_real *x = j < 0 ? z + rows[k] : ctx + (size_t)rows[k] * G1C + j;
            const double an = j < 0 ? dz[rows[k]] : dctx[(size_t)rows[k] * G1C + j];
            const nf_real v = *x, *zi = z + rows[k], *ci = ctx + (size_t)rows[k] * G1C, *wi = w + rows[k];
            *x = v + h; /* only row rows[k] depends on x: its own term, from a one-row call */
            double lp1 = gmm1_loss(&f, zi, ci, wi, lp, 1);
            *x = v - h;
            double lm1 = gmm1_loss(&f, zi, ci, wi, lp, 1);
            *x = v;
            double fd = (lp1 - lm1) / (2 * h);
            ck_assert_msg(relerr(an, fd, 1e-3) < 1e-6, "row %d, %s %d: %.10g, finite difference %.10g", rows[k],
                          j < 0 ? "latent" : "context", j, an, fd);
        }
    }
#endif
    free(z), free(ctx), free(ctx2), free(lp), free(w), free(dz), free(dctx), free(dz2), free(dctx2), free(g), free(g2);
    nf_rng_free(r);
    fixture_free(&f);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_known_values);
    tcase_add_test(tc, test_log_ndtr);
#ifdef NF_DOUBLE
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_sample_backward);
    tcase_add_test(tc, test_flow_sampling_gradients);
#endif
    tcase_add_test(tc, test_normalised_1d);
    tcase_add_test(tc, test_normalised_2d);
    tcase_add_test(tc, test_tails);
    tcase_add_test(tc, test_sampler_1d);
    tcase_add_test(tc, test_sampler_2d);
    tcase_add_test(tc, test_sampler_per_row_context);
    tcase_add_test(tc, test_options_and_errors);
    tcase_add_test(tc, test_gmm_rows_1d);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    gsl_set_error_handler_off(); /* quadrature of a float density may stop at roundoff: values are checked */
    SRunner *sr = srunner_create(dist_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
