/* distributions/gmm.c - a mixture of K diagonal Gaussians on R^D.
 *
 *   p(z) = sum_k pi_k N(z; mu_k, diag(e^{2 s_k})),   pi = softmax(a)
 *
 * Parameters (slices of d->P): "<name>.logits" a (K), initialised to 0 (equal weights);
 * "<name>.mean" mu (K, D), initialised to spread * N(0, 1) draws from the creation stream;
 * "<name>.log_scale" s (K, D), initialised to 0.
 * Options: k=8 (components, 1..4096), spread=1 (scale of the initial means, 0..100),
 * fixed_weights=0|1 (1: the logits live in the state store S, same slice name, saved and loaded but
 * never trained), context=none|linear (linear: theta_i = (a, mu, s) + W ctx_i with "<name>.context.W"
 * (m, C), m = K + 2KD rows for (a, mu, s) in that order, or 2KD rows for (mu, s) with fixed weights;
 * W starts at 0).
 *
 * log_prob uses a streaming log-sum-exp over components, so it needs no scratch per row and runs
 * rows in parallel.  Sampling draws a component from pi, then a Gaussian, and remembers the
 * components; sample_backward is pathwise given them (z = mu_k + e^{s_k} eps), so it trains the
 * means and log-scales but not the weights: the categorical draw is not reparameterisable, and with
 * trainable weights sample_backward is an error (use fixed_weights=1).
 * Tails: log P(Z <= z) = lse_k (log pi_k + sum_j log Phi(u_kj)), log P(Z > z) with Phi(-u_kj),
 * u_kj = (z_j - mu_kj) e^{-s_kj}.
 * The unconditional log_prob, backward and sample are the original code; the conditional paths and
 * the tails run row by row, preparing each row's tables from theta_i.
 * Calls write per-call tables (log pi, e^{-s}) into the instance's state, so one instance must not
 * be used from two threads at once.
 */
#include "distributions/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF_HALF_LOG_2PI 0.91893853320467274178

typedef struct {
    int K, fixed;      /* fixed: the logits are state (in S), not trained */
    int m, m0;         /* context weights: rows of W, and the entry of theta its first row maps to */
    nf_params *A;      /* the store of the logits: P, or S with fixed weights */
    size_t a, mu, s;   /* offsets: logits (K) in A; means (K, D), log-scales (K, D) in P */
    size_t W;          /* offset in P of the context weights (m, C); conditional only */
    double *cst;       /* (K) log pi_k - sum_j s_kj - D/2 log(2 pi) */
    double *pi;        /* (K) softmax(a) */
    double *lpi;       /* (K) log softmax(a) */
    double *isc;       /* (K, D) e^{-s} */
    double *c;         /* (K) per-row component log-joint, for backward */
    double *acc;       /* (K + 2 K D) batch sums of dL/da, dL/dmu, dL/ds */
    nf_real *row;      /* (K + 2 K D) a conditional row's theta = (a, mu, s) */
    double *dth;       /* (K + 2 K D) that row's dL/dtheta */
    double *accW;      /* (m, C) batch sums of dL/dW */
    double *gz;        /* (D) one row's dL/dz */
    int *comp;         /* (comp_cap) components drawn by the last sample, comp_n of them */
    int comp_cap, comp_n;
} gmm_state;

static void gmm_destroy(nf_dist *d)
{
    gmm_state *st = d->state;
    if (!st) return;
    free(st->cst);
    free(st->pi);
    free(st->lpi);
    free(st->isc);
    free(st->c);
    free(st->acc);
    free(st->row);
    free(st->dth);
    free(st->accW);
    free(st->gz);
    free(st->comp);
    free(st);
    d->state = NULL;
}

static int gmm_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    int K, fixed, linear;
    double spread;
    NF_TRY(nf_opts_int(opts, "k", 8, 1, 4096, &K));
    NF_TRY(nf_opts_double(opts, "spread", 1.0, 0.0, 100.0, &spread));
    NF_TRY(nf_opts_int(opts, "fixed_weights", 0, 0, 1, &fixed));
    NF_TRY(nf_dist_opt_context(d, opts, &linear));
    if (!d->P) return nf_error(NF_EINVAL, "%s: a parameter store is required", d->name);
    if (fixed && !d->S)
        return nf_error(NF_EINVAL, "%s: fixed_weights=1 keeps the logits in the state store, and none was given",
                        d->name);
    if (!rng) return nf_error(NF_EINVAL, "%s: a random stream is required to initialise the means", d->name);
    gmm_state *st = nf_calloc(1, sizeof *st, "gmm state");
    if (!st) return NF_ENOMEM;
    d->state = st;
    st->K = K;
    st->fixed = fixed;
    st->A = fixed ? d->S : d->P;
    const size_t KD = (size_t)K * d->dim, ntheta = (size_t)K + 2 * KD;
    char nm[NF_PARAM_NAME_MAX + 32];
    snprintf(nm, sizeof nm, "%s.logits", d->name);
    NF_TRY(nf_params_add(st->A, nm, (size_t)K, &st->a));
    snprintf(nm, sizeof nm, "%s.mean", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->mu));
    snprintf(nm, sizeof nm, "%s.log_scale", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->s));
    nf_real *mu = d->P->value + st->mu;
    for (size_t i = 0; i < KD; i++) mu[i] = (nf_real)(spread * nf_rng_normal(rng));
    st->cst = nf_calloc((size_t)K, sizeof(double), "gmm constants");
    st->pi = nf_calloc((size_t)K, sizeof(double), "gmm weights");
    st->lpi = nf_calloc((size_t)K, sizeof(double), "gmm log-weights");
    st->isc = nf_calloc(KD, sizeof(double), "gmm inverse scales");
    st->c = nf_calloc((size_t)K, sizeof(double), "gmm component scratch");
    st->acc = nf_calloc(ntheta, sizeof(double), "gmm gradient sums");
    st->dth = nf_calloc(ntheta, sizeof(double), "gmm row gradient");
    st->gz = nf_calloc((size_t)d->dim, sizeof(double), "gmm latent gradient");
    if (!st->cst || !st->pi || !st->lpi || !st->isc || !st->c || !st->acc || !st->dth || !st->gz) return NF_ENOMEM;
    if (d->ctx_dim > 0) {
        st->m0 = fixed ? K : 0;
        st->m = (int)(ntheta - (size_t)st->m0);
        const size_t nw = (size_t)st->m * d->ctx_dim;
        snprintf(nm, sizeof nm, "%s.context.W", d->name);
        NF_TRY(nf_params_add(d->P, nm, nw, &st->W));
        st->row = nf_calloc(ntheta, sizeof(nf_real), "gmm row parameters");
        st->accW = nf_calloc(nw, sizeof(double), "gmm context gradient sums");
        if (!st->row || !st->accW) return NF_ENOMEM;
    }
    return NF_OK;
}

/* Per-call tables: log pi = a - lse(a), pi, e^{-s}, and cst_k = log pi_k - sum_j s_kj - D/2 log 2pi. */
static void gmm_prepare(gmm_state *st, const nf_real *a, const nf_real *s, int D)
{
    const int K = st->K;
    double amax = a[0];
    for (int k = 1; k < K; k++) amax = a[k] > amax ? a[k] : amax;
    double z = 0;
    for (int k = 0; k < K; k++) z += exp(a[k] - amax);
    const double lse = amax + log(z);
    for (int k = 0; k < K; k++) {
        double ss = 0;
        for (int j = 0; j < D; j++) {
            ss += s[(size_t)k * D + j];
            st->isc[(size_t)k * D + j] = exp(-(double)s[(size_t)k * D + j]);
        }
        st->pi[k] = exp(a[k] - lse);
        st->lpi[k] = a[k] - lse;
        st->cst[k] = (a[k] - lse) - ss - D * NF_HALF_LOG_2PI;
    }
}

/* The unconditional tables, from the stores. */
static void gmm_prepare_store(nf_dist *d)
{
    gmm_state *st = d->state;
    gmm_prepare(st, st->A->value + st->a, d->P->value + st->s, d->dim);
}

/* log pi_k + log N(z; mu_k, e^{2 s_k}) = cst_k - 1/2 sum_j u_kj^2,  u_kj = (z_j - mu_kj) e^{-s_kj} */
static inline double gmm_component(const gmm_state *st, const nf_real *mu, const nf_real *zi, int k, int D)
{
    const nf_real *m = mu + (size_t)k * D;
    const double *is = st->isc + (size_t)k * D;
    double q = 0;
    for (int j = 0; j < D; j++) {
        double u = ((double)zi[j] - m[j]) * is[j];
        q += u * u;
    }
    return st->cst[k] - 0.5 * q;
}

/* log p(z) = lse_k c_k, accumulated as a running (max, sum) pair so no per-row scratch is needed. */
static double gmm_row(const gmm_state *st, const nf_real *mu, const nf_real *zi, int D)
{
    double m = -INFINITY, sum = 0;
    for (int k = 0; k < st->K; k++) {
        double c = gmm_component(st, mu, zi, k, D);
        if (c > m) {
            sum = sum * exp(m - c) + 1.0;
            m = c;
        } else {
            sum += exp(c - m);
        }
    }
    return m + log(sum);
}

/* ---- conditional parameters: theta_i = b + W ctx_i, theta = (a, mu, s) ---- */

/* Tables for the row with context ci (NULL: the unconditional ones); returns the row's means, and its
 * log-scales in *s. */
static const nf_real *gmm_setup(nf_dist *d, const nf_real *ci, const nf_real **s)
{
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim;
    const size_t KD = (size_t)K * D;
    if (!ci) {
        gmm_prepare_store(d);
        *s = d->P->value + st->s;
        return d->P->value + st->mu;
    }
    const int C = d->ctx_dim;
    nf_real *th = st->row;
    memcpy(th, st->A->value + st->a, (size_t)K * sizeof(nf_real));
    memcpy(th + K, d->P->value + st->mu, KD * sizeof(nf_real));
    memcpy(th + K + KD, d->P->value + st->s, KD * sizeof(nf_real));
    const nf_real *W = d->P->value + st->W;
    for (int r = 0; r < st->m; r++) {
        const nf_real *wr = W + (size_t)r * C;
        double t = th[st->m0 + r];
        for (int c = 0; c < C; c++) t += (double)wr[c] * ci[c];
        th[st->m0 + r] = (nf_real)t;
    }
    gmm_prepare(st, th, th + K + KD, D);
    *s = th + K + KD;
    return th + K;
}

/* A conditional row's dL/dtheta (st->dth) into the batch sums: db += dtheta, dW += dtheta ci^T,
 * dci += W^T dtheta (the logits' rows only when they are trained). */
static void gmm_theta_backward(nf_dist *d, const nf_real *ci, nf_real *dci)
{
    gmm_state *st = d->state;
    const int C = d->ctx_dim;
    const size_t ntheta = (size_t)st->K + 2 * (size_t)st->K * d->dim;
    for (size_t q = 0; q < ntheta; q++) st->acc[q] += st->dth[q];
    const nf_real *W = d->P->value + st->W;
    for (int r = 0; r < st->m; r++) {
        const double g = st->dth[st->m0 + r];
        if (g == 0) continue;
        double *aw = st->accW + (size_t)r * C;
        const nf_real *wr = W + (size_t)r * C;
        for (int c = 0; c < C; c++) aw[c] += g * ci[c];
        if (dci)
            for (int c = 0; c < C; c++) dci[c] += (nf_real)(wr[c] * g);
    }
}

static void gmm_zero_sums(nf_dist *d)
{
    gmm_state *st = d->state;
    const size_t ntheta = (size_t)st->K + 2 * (size_t)st->K * d->dim;
    memset(st->acc, 0, ntheta * sizeof(double));
    if (d->ctx_dim) memset(st->accW, 0, (size_t)st->m * d->ctx_dim * sizeof(double));
}

/* Batch sums into P->grad (the logits only when they are trained). */
static void gmm_add_sums(nf_dist *d)
{
    gmm_state *st = d->state;
    const int K = st->K;
    const size_t KD = (size_t)K * d->dim;
    nf_real *g = d->P->grad;
    if (!st->fixed)
        for (int k = 0; k < K; k++) g[st->a + k] += (nf_real)st->acc[k];
    for (size_t q = 0; q < KD; q++) {
        g[st->mu + q] += (nf_real)st->acc[K + q];
        g[st->s + q] += (nf_real)st->acc[K + KD + q];
    }
    const size_t nw = (size_t)st->m * d->ctx_dim;
    for (size_t q = 0; q < nw; q++) g[st->W + q] += (nf_real)st->accW[q];
}

/* One row of the backward of log p (tables prepared for its theta): adds w dlogp/dtheta into g
 * (K + 2KD: a, mu, s) and w dlogp/dz into gz (D).  Formulas above gmm_backward. */
static void gmm_row_backward(const gmm_state *st, const nf_real *mu, const nf_real *zi, int D, double w, double *g,
                             double *gz)
{
    const int K = st->K;
    const size_t KD = (size_t)K * D;
    double m = -INFINITY;
    for (int k = 0; k < K; k++) {
        st->c[k] = gmm_component(st, mu, zi, k, D);
        m = st->c[k] > m ? st->c[k] : m;
    }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += exp(st->c[k] - m);
    const double lp = m + log(sum);
    for (int k = 0; k < K; k++) {
        const double r = exp(st->c[k] - lp), wr = w * r;
        g[k] += w * (r - st->pi[k]);
        if (wr == 0) continue;
        const nf_real *mk = mu + (size_t)k * D;
        const double *is = st->isc + (size_t)k * D;
        for (int j = 0; j < D; j++) {
            double u = ((double)zi[j] - mk[j]) * is[j];
            g[K + (size_t)k * D + j] += wr * u * is[j];
            g[K + KD + (size_t)k * D + j] += wr * (u * u - 1.0);
            gz[j] -= wr * u * is[j];
        }
    }
}

static int gmm_bad_row(const nf_dist *d, int bad, const char *what)
{
    return nf_error(NF_ENONFINITE, "%s: %s of row %d is not finite (non-finite latent, context or parameters)",
                    d->name, what, bad);
}

static int gmm_log_prob_ctx(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, int n)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    const int D = d->dim, C = d->ctx_dim;
    int bad = -1;
    for (int i = 0; i < n; i++) {
        const nf_real *s;
        const nf_real *mu = gmm_setup(d, ctx + (size_t)i * C, &s);
        double lp = gmm_row(d->state, mu, z + (size_t)i * D, D);
        logp[i] = (nf_real)lp;
        if (!isfinite(lp) && bad < 0) bad = i;
    }
    return bad >= 0 ? gmm_bad_row(d, bad, "log-density") : NF_OK;
}

static int gmm_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    if (d->ctx_dim) return gmm_log_prob_ctx(d, logp, z, ctx, n);
    gmm_state *st = d->state;
    const int D = d->dim;
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare_store(d);
    int bad = -1;
#pragma omp parallel for schedule(static) if ((long)n * D * st->K > 32768)
    for (int i = 0; i < n; i++) {
        double lp = gmm_row(st, mu, z + (size_t)i * D, D);
        logp[i] = (nf_real)lp;
        if (!isfinite(lp)) {
#pragma omp critical(nf_gmm_bad)
            if (bad < 0 || i < bad) bad = i;
        }
    }
    if (bad >= 0)
        return nf_error(NF_ENONFINITE, "%s: log-density of row %d is not finite (non-finite latent or parameters)",
                        d->name, bad);
    return NF_OK;
}

/* Conditional backward: per row, the derivatives below into dtheta_i, then through theta = b + W c. */
static int gmm_backward_ctx(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                            const nf_real *ctx, int n)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    gmm_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    const size_t ntheta = (size_t)st->K + 2 * (size_t)st->K * D;
    gmm_zero_sums(d);
    for (int i = 0; i < n; i++) {
        const nf_real *ci = ctx + (size_t)i * C, *s;
        const nf_real *mu = gmm_setup(d, ci, &s);
        memset(st->dth, 0, ntheta * sizeof(double));
        memset(st->gz, 0, (size_t)D * sizeof(double));
        gmm_row_backward(st, mu, z + (size_t)i * D, D, dlogp[i], st->dth, st->gz);
        if (dz)
            for (int j = 0; j < D; j++) dz[(size_t)i * D + j] += (nf_real)st->gz[j];
        gmm_theta_backward(d, ci, dctx ? dctx + (size_t)i * C : NULL);
    }
    gmm_add_sums(d);
    return NF_OK;
}

/* With responsibilities r_k = exp(c_k - log p(z)):
 *   d log p/d z_j    = -sum_k r_k u_kj e^{-s_kj}
 *   d log p/d a_k    = r_k - pi_k
 *   d log p/d mu_kj  = r_k u_kj e^{-s_kj}
 *   d log p/d s_kj   = r_k (u_kj^2 - 1)                                                            */
static int gmm_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                        const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    if (d->ctx_dim) return gmm_backward_ctx(d, dz, dctx, dlogp, z, ctx, n);
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim;
    const size_t KD = (size_t)K * D;
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare_store(d);
    double *ga = st->acc, *gmu = st->acc + K, *gs = st->acc + K + KD;
    memset(st->acc, 0, ((size_t)K + 2 * KD) * sizeof(double));
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D;
        const double w = dlogp[i];
        double m = -INFINITY;
        for (int k = 0; k < K; k++) {
            st->c[k] = gmm_component(st, mu, zi, k, D);
            m = st->c[k] > m ? st->c[k] : m;
        }
        double sum = 0;
        for (int k = 0; k < K; k++) sum += exp(st->c[k] - m);
        const double lp = m + log(sum);
        for (int k = 0; k < K; k++) {
            const double r = exp(st->c[k] - lp), wr = w * r;
            ga[k] += w * (r - st->pi[k]);
            if (wr == 0) continue;
            const nf_real *mk = mu + (size_t)k * D;
            const double *is = st->isc + (size_t)k * D;
            for (int j = 0; j < D; j++) {
                double u = ((double)zi[j] - mk[j]) * is[j];
                gmu[(size_t)k * D + j] += wr * u * is[j];
                gs[(size_t)k * D + j] += wr * (u * u - 1.0);
                if (dz) dz[(size_t)i * D + j] -= (nf_real)(wr * u * is[j]);
            }
        }
    }
    nf_real *g = d->P->grad;
    if (!st->fixed)
        for (int k = 0; k < K; k++) g[st->a + k] += (nf_real)ga[k];
    for (size_t q = 0; q < KD; q++) {
        g[st->mu + q] += (nf_real)gmu[q];
        g[st->s + q] += (nf_real)gs[q];
    }
    return NF_OK;
}

/* Room to remember the components of a draw of n rows (grows only when a larger batch arrives). */
static int gmm_reserve_comp(nf_dist *d, int n)
{
    gmm_state *st = d->state;
    st->comp_n = 0;
    if (n <= st->comp_cap) return NF_OK;
    int *c = realloc(st->comp, (size_t)n * sizeof *c);
    if (!c) return nf_error(NF_ENOMEM, "%s: out of memory for the components of %d samples", d->name, n);
    st->comp = c;
    st->comp_cap = n;
    return NF_OK;
}

/* k ~ Categorical(pi), eps ~ N(0, I), z = mu_k + e^{s_k} eps; logp is the mixture density at z.
 * Conditional: the same with theta_i = b + W ctx_i per row. */
static int gmm_sample(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    NF_TRY(nf_dist_check_ctx(d, ctx));
    NF_TRY(gmm_reserve_comp(d, n));
    gmm_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim;
    if (C) {
        for (int i = 0; i < n; i++) {
            const nf_real *s;
            const nf_real *mu = gmm_setup(d, ctx + (size_t)i * C, &s);
            size_t k = nf_rng_categorical(rng, st->pi, (size_t)st->K);
            st->comp[i] = (int)k;
            nf_real *zi = z + (size_t)i * D;
            for (int j = 0; j < D; j++)
                zi[j] = (nf_real)(mu[k * D + j] + exp((double)s[k * D + j]) * nf_rng_normal(rng));
        }
        st->comp_n = n;
        if (logp) return gmm_log_prob_ctx(d, logp, z, ctx, n);
        return NF_OK;
    }
    const nf_real *mu = d->P->value + st->mu, *s = d->P->value + st->s;
    gmm_prepare_store(d);
    for (int i = 0; i < n; i++) {
        size_t k = nf_rng_categorical(rng, st->pi, (size_t)st->K);
        st->comp[i] = (int)k;
        nf_real *zi = z + (size_t)i * D;
        for (int j = 0; j < D; j++)
            zi[j] = (nf_real)(mu[k * D + j] + exp((double)s[k * D + j]) * nf_rng_normal(rng));
    }
    st->comp_n = n;
    if (logp) return gmm_log_prob(d, logp, z, NULL, NULL, n);
    return NF_OK;
}

/* Pathwise gradient of the last draw with its components k_i and noise eps held fixed:
 *   z = mu_k + e^{s_k} eps:  dz/dmu_k = 1,  dz/ds_k = e^{s_k} eps = z - mu_k;
 * with dlogp, logp(z(theta), theta) also adds its partial derivatives (gmm_row_backward) and
 * dlogp dlogp/dz enters the path like dz.  The logits have no pathwise gradient: only fixed weights. */
static int gmm_sample_backward(nf_dist *d, nf_real *dctx, const nf_real *dz, const nf_real *dlogp, const nf_real *z,
                               const nf_real *ctx, int n)
{
    gmm_state *st = d->state;
    if (!st->fixed)
        return nf_error(NF_EINVAL, "gmm: the mixture weights cannot be trained through sampling (the component "
                                   "draw is not reparameterisable); use base=gmm(fixed_weights=1)");
    if (st->comp_n != n)
        return nf_error(NF_EINVAL, "%s: sample_backward of %d rows, but the last sample drew %d", d->name, n,
                        st->comp_n);
    NF_TRY(nf_dist_check_ctx(d, ctx));
    const int K = st->K, D = d->dim, C = d->ctx_dim;
    const size_t KD = (size_t)K * D, ntheta = (size_t)K + 2 * KD;
    gmm_zero_sums(d);
    const nf_real *mu = NULL, *s = NULL;
    if (!C) mu = gmm_setup(d, NULL, &s);
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = C ? ctx + (size_t)i * C : NULL;
        double *g = st->acc;
        if (C) {
            mu = gmm_setup(d, ci, &s);
            g = st->dth;
            memset(g, 0, ntheta * sizeof(double));
        }
        for (int j = 0; j < D; j++) st->gz[j] = dz ? dz[(size_t)i * D + j] : 0;
        if (dlogp) gmm_row_backward(st, mu, zi, D, dlogp[i], g, st->gz);
        const size_t k = (size_t)st->comp[i];
        for (int j = 0; j < D; j++) {
            g[K + k * D + j] += st->gz[j];
            g[K + KD + k * D + j] += st->gz[j] * ((double)zi[j] - mu[k * D + j]);
        }
        if (C) gmm_theta_backward(d, ci, dctx ? dctx + (size_t)i * C : NULL);
    }
    gmm_add_sums(d);
    return NF_OK;
}

/* sign +1: c_k = log pi_k + sum_j log Phi(u_kj);  sign -1: Phi(-u_kj);  value = lse_k c_k (into st->c). */
static double gmm_tail_row(const gmm_state *st, const nf_real *mu, const nf_real *zi, int D, double sign)
{
    double m = -INFINITY;
    for (int k = 0; k < st->K; k++) {
        const nf_real *mk = mu + (size_t)k * D;
        const double *is = st->isc + (size_t)k * D;
        double c = st->lpi[k];
        for (int j = 0; j < D; j++) c += nf_log_ndtr(sign * ((double)zi[j] - mk[j]) * is[j]);
        st->c[k] = c;
        m = c > m ? c : m;
    }
    if (m == -INFINITY) return m;
    double sum = 0;
    for (int k = 0; k < st->K; k++) sum += exp(st->c[k] - m);
    return m + log(sum);
}

static int gmm_tail(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n, double sign)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    const int D = d->dim, C = d->ctx_dim;
    const nf_real *mu = NULL, *s;
    if (!C) mu = gmm_setup(d, NULL, &s);
    int bad = -1;
    for (int i = 0; i < n; i++) {
        if (C) mu = gmm_setup(d, ctx + (size_t)i * C, &s);
        /* a probability: rounding in the sum over components must not push it above 1 */
        double v = fmin(gmm_tail_row(d->state, mu, z + (size_t)i * D, D, sign), 0.0);
        out[i] = (nf_real)v;
        if (!isfinite(v) && bad < 0) bad = i;
    }
    return bad >= 0 ? gmm_bad_row(d, bad, sign > 0 ? "log-CDF" : "log-survival") : NF_OK;
}

/* With r_k = exp(c_k - value) and q_kj = sign phi(sign u_kj) / Phi(sign u_kj):
 *   d/da_k = r_k - pi_k,  d/dz_j = sum_k r_k q_kj e^{-s_kj},
 *   d/dmu_kj = -r_k q_kj e^{-s_kj},  d/ds_kj = -r_k q_kj u_kj                                        */
static int gmm_tail_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                             const nf_real *ctx, int n, double sign)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim, C = d->ctx_dim;
    const size_t KD = (size_t)K * D, ntheta = (size_t)K + 2 * KD;
    gmm_zero_sums(d);
    const nf_real *mu = NULL, *s;
    if (!C) mu = gmm_setup(d, NULL, &s);
    for (int i = 0; i < n; i++) {
        const nf_real *zi = z + (size_t)i * D, *ci = C ? ctx + (size_t)i * C : NULL;
        double *g = st->acc;
        if (C) {
            mu = gmm_setup(d, ci, &s);
            g = st->dth;
            memset(g, 0, ntheta * sizeof(double));
        }
        const double w = dval[i], v = gmm_tail_row(st, mu, zi, D, sign);
        for (int k = 0; k < K; k++) {
            const double r = exp(st->c[k] - v), wr = w * r;
            g[k] += w * (r - st->pi[k]);
            if (wr == 0) continue;
            const nf_real *mk = mu + (size_t)k * D;
            const double *is = st->isc + (size_t)k * D;
            for (int j = 0; j < D; j++) {
                double u = ((double)zi[j] - mk[j]) * is[j], q = wr * sign * nf_ndtr_ratio(sign * u);
                g[K + (size_t)k * D + j] -= q * is[j];
                g[K + KD + (size_t)k * D + j] -= q * u;
                if (dz) dz[(size_t)i * D + j] += (nf_real)(q * is[j]);
            }
        }
        if (C) gmm_theta_backward(d, ci, dctx ? dctx + (size_t)i * C : NULL);
    }
    gmm_add_sums(d);
    return NF_OK;
}

static int gmm_log_cdf(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    return gmm_tail(d, out, z, ctx, n, 1.0);
}

static int gmm_log_survival(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n)
{
    return gmm_tail(d, out, z, ctx, n, -1.0);
}

static int gmm_log_cdf_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                const nf_real *ctx, int n)
{
    return gmm_tail_backward(d, dz, dctx, dval, z, ctx, n, 1.0);
}

static int gmm_log_survival_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                                     const nf_real *ctx, int n)
{
    return gmm_tail_backward(d, dz, dctx, dval, z, ctx, n, -1.0);
}

const nf_dist_type nf_dist_gmm = {
    .name = "gmm",
    .options_help = "k=8 (components) spread=1 (scale of the initial means) fixed_weights=0|1 (1: weights are "
                    "state, not trained; needed for sampling gradients) context=none|linear",
    .create = gmm_create,
    .destroy = gmm_destroy,
    .log_prob = gmm_log_prob,
    .backward = gmm_backward,
    .sample = gmm_sample,
    .sample_backward = gmm_sample_backward,
    .log_cdf = gmm_log_cdf,
    .log_survival = gmm_log_survival,
    .log_cdf_backward = gmm_log_cdf_backward,
    .log_survival_backward = gmm_log_survival_backward,
};
