/* datasets/data_gmm.c - a seeded random Gaussian mixture in D dimensions (exact density).
 *
 * From model_seed: K weights pi_k proportional to U(0.5, 1.5); means mu_k ~ N(0, 3^2 I); and
 * covariances Sigma_k = L_k L_k^T with L_k lower triangular, diagonal exp(U(-0.9, 0.1)) and
 * entries below it N(0, 0.35^2) (so the components are tilted ellipsoids of scale 0.4 to 1.1).
 *   sample:  k ~ pi, z ~ N(0, I), x = mu_k + L_k z
 *   density: log p(x) = logsumexp_k [log pi_k - |L_k^-1 (x - mu_k)|^2 / 2 - sum_i log L_k,ii
 *                                     - (D/2) log 2 pi]      (forward substitution for L^-1)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/dataset.h"
#include "datasets/ds_internal.h"

typedef struct gmm_state {
    int D, K;
    double *logw;   /* (K) log weights */
    double *mu;     /* (K, D) */
    double *L;      /* (K, D, D) lower-triangular Cholesky factors, row-major */
    double *logdet; /* (K) sum_i log L_ii */
} gmm_state;

static void gmm_destroy(nf_dataset *ds)
{
    gmm_state *s = ds->state;
    if (!s) return;
    free(s->logw);
    free(s->mu);
    free(s->L);
    free(s->logdet);
    free(s);
    ds->state = NULL;
}

static int gmm_create(nf_dataset *ds)
{
    int D = ds->dim, K = ds->opts.components;
    gmm_state *s = nf_calloc(1, sizeof *s, "gmm data set");
    if (!s) return NF_ENOMEM;
    ds->state = s;
    s->D = D;
    s->K = K;
    s->logw = nf_calloc((size_t)K, sizeof *s->logw, "gmm weights");
    s->mu = nf_calloc((size_t)K * D, sizeof *s->mu, "gmm means");
    s->L = nf_calloc((size_t)K * D * D, sizeof *s->L, "gmm Cholesky factors");
    s->logdet = nf_calloc((size_t)K, sizeof *s->logdet, "gmm log-determinants");
    if (!s->logw || !s->mu || !s->L || !s->logdet) return NF_ENOMEM;
    nf_rng *r = nf_rng_alloc(ds->opts.model_seed, 0x9a55);
    if (!r) return NF_ENOMEM;
    double wsum = 0;
    for (int k = 0; k < K; k++) {
        s->logw[k] = 0.5 + nf_rng_uniform(r);
        wsum += s->logw[k];
    }
    for (int k = 0; k < K; k++) {
        s->logw[k] = log(s->logw[k] / wsum);
        for (int i = 0; i < D; i++) s->mu[(size_t)k * D + i] = 3.0 * nf_rng_normal(r);
        double *L = s->L + (size_t)k * D * D;
        s->logdet[k] = 0;
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < i; j++) L[(size_t)i * D + j] = 0.35 * nf_rng_normal(r);
            double ld = -0.9 + nf_rng_uniform(r);
            L[(size_t)i * D + i] = exp(ld);
            s->logdet[k] += ld;
        }
    }
    nf_rng_free(r);
    return NF_OK;
}

static int gmm_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp)
{
    (void)logp;
    const gmm_state *s = ds->state;
    int D = s->D;
    double *wk = malloc((size_t)s->K * sizeof *wk), *z = malloc((size_t)D * sizeof *z);
    if (!wk || !z) {
        free(wk);
        free(z);
        return nf_error(NF_ENOMEM, "gmm: out of memory sampling %zu points", n);
    }
    for (int k = 0; k < s->K; k++) wk[k] = exp(s->logw[k]);
    for (size_t p = 0; p < n; p++) {
        size_t k = nf_rng_categorical(rng, wk, (size_t)s->K);
        const double *L = s->L + k * D * D, *mu = s->mu + k * D;
        for (int i = 0; i < D; i++) z[i] = nf_rng_normal(rng);
        for (int i = 0; i < D; i++) {
            double v = mu[i];
            for (int j = 0; j <= i; j++) v += L[(size_t)i * D + j] * z[j];
            x[p * D + i] = v;
        }
    }
    free(wk);
    free(z);
    return NF_OK;
}

static int gmm_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp)
{
    const gmm_state *s = ds->state;
    int D = s->D, K = s->K, nomem = 0;
#pragma omp parallel reduction(| : nomem)
    {
        double *y = malloc((size_t)D * sizeof *y);
        if (!y) nomem = 1;
#pragma omp for schedule(static)
        for (long p = 0; p < (long)n; p++) {
            if (!y) continue;
            const double *xp = x + (size_t)p * D;
            double acc = -INFINITY;
            for (int k = 0; k < K; k++) {
                const double *L = s->L + (size_t)k * D * D, *mu = s->mu + (size_t)k * D;
                double q = 0;
                for (int i = 0; i < D; i++) { /* forward substitution L y = x - mu */
                    double v = xp[i] - mu[i];
                    for (int j = 0; j < i; j++) v -= L[(size_t)i * D + j] * y[j];
                    y[i] = v / L[(size_t)i * D + i];
                    q += y[i] * y[i];
                }
                acc = nf_ds_logaddexp(acc, s->logw[k] - 0.5 * q - s->logdet[k] - 0.5 * D * NF_DS_LOG_2PI);
            }
            logp[p] = acc;
        }
        free(y);
    }
    if (nomem) return nf_error(NF_ENOMEM, "gmm: out of memory evaluating %zu points", n);
    return NF_OK;
}

/* mean = sum_k pi_k mu_k;  cov = sum_k pi_k (L_k L_k^T + mu_k mu_k^T) - mean mean^T. */
int nf_dataset_gmm_moments(const nf_dataset *ds, double *mean, double *cov)
{
    if (!ds || ds->type != &nf_dataset_gmm)
        return nf_error(NF_EINVAL, "gmm moments: data set %s is not gmm", ds ? ds->type->name : "NULL");
    const gmm_state *s = ds->state;
    int D = s->D;
    for (int i = 0; i < D; i++) mean[i] = 0;
    for (int i = 0; i < D * D; i++) cov[i] = 0;
    for (int k = 0; k < s->K; k++) {
        double w = exp(s->logw[k]);
        const double *L = s->L + (size_t)k * D * D, *mu = s->mu + (size_t)k * D;
        for (int i = 0; i < D; i++) {
            mean[i] += w * mu[i];
            for (int j = 0; j < D; j++) {
                double c = mu[i] * mu[j];
                for (int m = 0; m <= (i < j ? i : j); m++) c += L[(size_t)i * D + m] * L[(size_t)j * D + m];
                cov[i * D + j] += w * c;
            }
        }
    }
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) cov[i * D + j] -= mean[i] * mean[j];
    return NF_OK;
}

const nf_dataset_type nf_dataset_gmm = {
    .name = "gmm",
    .summary = "random Gaussian mixture in --dim D with --components K, full covariances (from --model-seed)",
    .dim = 0,
    .density = NF_DENSITY_EXACT,
    .density_method = "exact: Gaussian mixture with full covariances (Cholesky factors)",
    .create = gmm_create,
    .destroy = gmm_destroy,
    .sample = gmm_sample,
    .log_prob = gmm_log_prob,
};
