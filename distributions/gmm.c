/* distributions/gmm.c - a mixture of K diagonal Gaussians on R^D.
 *
 *   p(z) = sum_k pi_k N(z; mu_k, diag(e^{2 s_k})),   pi = softmax(a)
 *
 * Parameters (slices of d->P): "<name>.logits" a (K), initialised to 0 (equal weights);
 * "<name>.mean" mu (K, D), initialised to spread * N(0, 1) draws from the creation stream;
 * "<name>.log_scale" s (K, D), initialised to 0.
 * Options: k=8 (components, 1..4096), spread=1 (scale of the initial means, 0..100).
 *
 * log_prob uses a streaming log-sum-exp over components, so it needs no scratch per row and runs
 * rows in parallel.  Sampling draws a component from pi, then a Gaussian.  sample_backward is NULL:
 * the categorical draw is not reparameterisable (no pathwise gradient for the logits), so reverse-KL
 * training needs a reparameterisable base (normal or diag-normal).
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
    int K;
    size_t a, mu, s;   /* offsets in P: logits (K), means (K, D), log-scales (K, D) */
    double *cst;       /* (K) log pi_k - sum_j s_kj - D/2 log(2 pi) */
    double *pi;        /* (K) softmax(a) */
    double *isc;       /* (K, D) e^{-s} */
    double *c;         /* (K) per-row component log-joint, for backward */
    double *acc;       /* (K + 2 K D) batch sums of dL/da, dL/dmu, dL/ds */
} gmm_state;

static void gmm_destroy(nf_dist *d)
{
    gmm_state *st = d->state;
    if (!st) return;
    free(st->cst);
    free(st->pi);
    free(st->isc);
    free(st->c);
    free(st->acc);
    free(st);
    d->state = NULL;
}

static int gmm_create(nf_dist *d, nf_opts *opts, nf_rng *rng)
{
    int K;
    double spread;
    NF_TRY(nf_opts_int(opts, "k", 8, 1, 4096, &K));
    NF_TRY(nf_opts_double(opts, "spread", 1.0, 0.0, 100.0, &spread));
    if (!d->P) return nf_error(NF_EINVAL, "%s: a parameter store is required", d->name);
    if (!rng) return nf_error(NF_EINVAL, "%s: a random stream is required to initialise the means", d->name);
    gmm_state *st = nf_calloc(1, sizeof *st, "gmm state");
    if (!st) return NF_ENOMEM;
    d->state = st;
    st->K = K;
    const size_t KD = (size_t)K * d->dim;
    char nm[NF_PARAM_NAME_MAX + 32];
    snprintf(nm, sizeof nm, "%s.logits", d->name);
    NF_TRY(nf_params_add(d->P, nm, (size_t)K, &st->a));
    snprintf(nm, sizeof nm, "%s.mean", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->mu));
    snprintf(nm, sizeof nm, "%s.log_scale", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->s));
    nf_real *mu = d->P->value + st->mu;
    for (size_t i = 0; i < KD; i++) mu[i] = (nf_real)(spread * nf_rng_normal(rng));
    st->cst = nf_calloc((size_t)K, sizeof(double), "gmm constants");
    st->pi = nf_calloc((size_t)K, sizeof(double), "gmm weights");
    st->isc = nf_calloc(KD, sizeof(double), "gmm inverse scales");
    st->c = nf_calloc((size_t)K, sizeof(double), "gmm component scratch");
    st->acc = nf_calloc((size_t)K + 2 * KD, sizeof(double), "gmm gradient sums");
    if (!st->cst || !st->pi || !st->isc || !st->c || !st->acc) return NF_ENOMEM;
    return NF_OK;
}

/* Per-call tables: log pi = a - lse(a), pi, e^{-s}, and cst_k = log pi_k - sum_j s_kj - D/2 log 2pi. */
static void gmm_prepare(nf_dist *d)
{
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim;
    const nf_real *a = d->P->value + st->a, *s = d->P->value + st->s;
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
        st->cst[k] = (a[k] - lse) - ss - D * NF_HALF_LOG_2PI;
    }
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

static int gmm_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const size_t *idx, int n)
{
    (void)idx;
    gmm_state *st = d->state;
    const int D = d->dim;
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare(d);
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

/* With responsibilities r_k = exp(c_k - log p(z)):
 *   d log p/d z_j    = -sum_k r_k u_kj e^{-s_kj}
 *   d log p/d a_k    = r_k - pi_k
 *   d log p/d mu_kj  = r_k u_kj e^{-s_kj}
 *   d log p/d s_kj   = r_k (u_kj^2 - 1)                                                            */
static int gmm_backward(nf_dist *d, nf_real *dz, const nf_real *dlogp, const nf_real *z, const size_t *idx,
                        int n)
{
    (void)idx;
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim;
    const size_t KD = (size_t)K * D;
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare(d);
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
    for (int k = 0; k < K; k++) g[st->a + k] += (nf_real)ga[k];
    for (size_t q = 0; q < KD; q++) {
        g[st->mu + q] += (nf_real)gmu[q];
        g[st->s + q] += (nf_real)gs[q];
    }
    return NF_OK;
}

/* k ~ Categorical(pi), eps ~ N(0, I), z = mu_k + e^{s_k} eps; logp is the mixture density at z. */
static int gmm_sample(nf_dist *d, nf_real *z, nf_real *logp, int n, nf_rng *rng)
{
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    gmm_state *st = d->state;
    const int D = d->dim;
    const nf_real *mu = d->P->value + st->mu, *s = d->P->value + st->s;
    gmm_prepare(d);
    for (int i = 0; i < n; i++) {
        size_t k = nf_rng_categorical(rng, st->pi, (size_t)st->K);
        nf_real *zi = z + (size_t)i * D;
        for (int j = 0; j < D; j++)
            zi[j] = (nf_real)(mu[k * D + j] + exp((double)s[k * D + j]) * nf_rng_normal(rng));
    }
    if (logp) return gmm_log_prob(d, logp, z, NULL, n);
    return NF_OK;
}

const nf_dist_type nf_dist_gmm = {
    .name = "gmm",
    .options_help = "k=8 (components) spread=1 (scale of the initial means)",
    .create = gmm_create,
    .destroy = gmm_destroy,
    .log_prob = gmm_log_prob,
    .backward = gmm_backward,
    .sample = gmm_sample,
    .sample_backward = NULL, /* the categorical draw is not reparameterisable */
};
