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
 *
 * Conditional passes work on blocks of rows (st->chunk of them, a fixed number, so results do not
 * depend on the thread count): the block's parameters are one product, Theta = 1 b^T + Ctx W^T
 * (nf_gemm); each row's tables (log pi, e^{-s}) and its value or dL/dtheta_i follow, rows split over
 * nf_threads_run parts, each part with its own tables; backward ends the block with
 * db += colsum(dTheta) (double), dW += dTheta^T Ctx and dCtx += dTheta W (nf_gemm).  With D = 1
 * (the point-process decoder) the rows run as loops over the components that the compiler
 * vectorises (gmm_row1, with a polynomial exp).  log_prob keeps the Theta of all its rows, and a
 * backward on byte-identical contexts and parameters reuses it instead of a second product (the
 * memo, below); with D = 1 log_prob keeps each row's gradient of log p instead, which the backward
 * only scales (its 3K exponentials are not computed twice).  Scratch (per-part tables, the memo)
 * grows with the batch or the thread count and is kept; nothing else is allocated per call.
 * Unconditional calls use one set of tables in the state; one instance must not be used from two
 * threads at once.
 */
#include "distributions/dist.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/simd.h"
#include "core/threads.h"

#define NF_HALF_LOG_2PI 0.91893853320467274178
/* entries of theta per block of conditional rows: 2^17 (512 KB in float) keeps Theta, dTheta and
 * the block's contexts in the cache between the product and the rows */
#define GMM_BLOCK_ENTRIES 131072

/* One row's tables, prepared from its (a, s), and its scratch. */
typedef struct {
    double *cst;       /* (K) log pi_k - sum_j s_kj - D/2 log(2 pi) */
    double *pi;        /* (K) softmax(a) */
    double *lpi;       /* (K) log softmax(a) */
    double *c;         /* (K) per-row component terms, for backward */
    double *isc;       /* (K, D) e^{-s} */
    double *g;         /* (K + 2 K D) one row's dL/dtheta */
    double *gz;        /* (D) one row's dL/dz */
} gmm_tables;

typedef struct {
    int K, fixed;      /* fixed: the logits are state (in S), not trained */
    int m, m0;         /* context weights: rows of W, and the entry of theta its first row maps to */
    nf_params *A;      /* the store of the logits: P, or S with fixed weights */
    size_t a, mu, s;   /* offsets: logits (K) in A; means (K, D), log-scales (K, D) in P */
    size_t W;          /* offset in P of the context weights (m, C); conditional only */
    size_t ntheta;     /* K + 2 K D */
    gmm_tables tab;    /* the unconditional (and serial) tables */
    double *tab_mem;
    gmm_tables *part;  /* (nparts) tables of the parts of a conditional pass */
    double *part_mem;
    int nparts;
    int chunk;         /* rows per block of a conditional pass */
    nf_real *theta;    /* (chunk, ntheta) a block's parameters; conditional only */
    nf_real *dtheta;   /* (chunk, ntheta) a block's dL/dtheta */
    nf_real *memo;     /* (memo_cap, ntheta) Theta of every row of the last conditional log_prob;
                        * for D = 1, each row's dlog p/dtheta instead (see gmm_rows1_part) */
    nf_real *memo_gy;  /* (memo_cap) for D = 1: each row's dlog p/dz */
    nf_real *memo_ctx; /* (memo_cap, C) the contexts it came from */
    nf_real *memo_par; /* (ntheta + m C) the a, mu, s and W it came from */
    int memo_cap, memo_n;  /* rows held; memo_n 0: none */
    double *acc;       /* (ntheta) batch sums of dL/da, dL/dmu, dL/ds (dL/db when conditional) */
    int *comp;         /* (comp_cap) components drawn by the last sample, comp_n of them */
    int comp_cap, comp_n;
} gmm_state;

static size_t gmm_tables_size(int K, int D) { return 5 * (size_t)K + 3 * (size_t)K * D + (size_t)D; }

static void gmm_tables_bind(gmm_tables *t, double *mem, int K, int D)
{
    const size_t KD = (size_t)K * D;
    t->cst = mem;
    t->pi = t->cst + K;
    t->lpi = t->pi + K;
    t->c = t->lpi + K;
    t->isc = t->c + K;
    t->g = t->isc + KD;
    t->gz = t->g + K + 2 * KD;
}

static void gmm_destroy(nf_dist *d)
{
    gmm_state *st = d->state;
    if (!st) return;
    free(st->tab_mem);
    free(st->part);
    free(st->part_mem);
    free(st->theta);
    free(st->dtheta);
    free(st->memo);
    free(st->memo_gy);
    free(st->memo_ctx);
    free(st->memo_par);
    free(st->acc);
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
    st->ntheta = ntheta;
    char nm[NF_PARAM_NAME_MAX + 32];
    snprintf(nm, sizeof nm, "%s.logits", d->name);
    NF_TRY(nf_params_add(st->A, nm, (size_t)K, &st->a));
    snprintf(nm, sizeof nm, "%s.mean", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->mu));
    snprintf(nm, sizeof nm, "%s.log_scale", d->name);
    NF_TRY(nf_params_add(d->P, nm, KD, &st->s));
    nf_real *mu = d->P->value + st->mu;
    for (size_t i = 0; i < KD; i++) mu[i] = (nf_real)(spread * nf_rng_normal(rng));
    st->tab_mem = nf_calloc(gmm_tables_size(K, d->dim), sizeof(double), "gmm tables");
    st->acc = nf_calloc(ntheta, sizeof(double), "gmm gradient sums");
    if (!st->tab_mem || !st->acc) return NF_ENOMEM;
    gmm_tables_bind(&st->tab, st->tab_mem, K, d->dim);
    if (d->ctx_dim > 0) {
        st->m0 = fixed ? K : 0;
        st->m = (int)(ntheta - (size_t)st->m0);
        snprintf(nm, sizeof nm, "%s.context.W", d->name);
        NF_TRY(nf_params_add(d->P, nm, (size_t)st->m * d->ctx_dim, &st->W));
        st->chunk = ntheta >= GMM_BLOCK_ENTRIES ? 1 : (int)(GMM_BLOCK_ENTRIES / ntheta);
        st->theta = nf_calloc((size_t)st->chunk * ntheta, sizeof(nf_real), "gmm block parameters");
        st->dtheta = nf_calloc((size_t)st->chunk * ntheta, sizeof(nf_real), "gmm block gradients");
        st->memo_par = nf_calloc(ntheta + (size_t)st->m * d->ctx_dim, sizeof(nf_real), "gmm remembered parameters");
        if (!st->theta || !st->dtheta || !st->memo_par) return NF_ENOMEM;
    }
    return NF_OK;
}

/* Tables from (a, s): with e_k = e^{a_k - max a} and Z = sum_k e_k,
 *   pi_k = e_k / Z,  log pi_k = a_k - max a - log Z,  e^{-s},
 *   cst_k = log pi_k - sum_j s_kj - D/2 log 2pi.                                                    */
static void gmm_prepare(const gmm_tables *t, const nf_real *a, const nf_real *s, int K, int D)
{
    double amax = a[0];
    for (int k = 1; k < K; k++) amax = a[k] > amax ? a[k] : amax;
    double z = 0;
    for (int k = 0; k < K; k++) {
        t->pi[k] = exp(a[k] - amax);
        z += t->pi[k];
    }
    const double lse = amax + log(z), iz = 1.0 / z;
    for (int k = 0; k < K; k++) {
        double ss = 0;
        for (int j = 0; j < D; j++) {
            ss += s[(size_t)k * D + j];
            t->isc[(size_t)k * D + j] = exp(-(double)s[(size_t)k * D + j]);
        }
        t->pi[k] *= iz;
        t->lpi[k] = a[k] - lse;
        t->cst[k] = (a[k] - lse) - ss - D * NF_HALF_LOG_2PI;
    }
}

/* The unconditional tables, from the stores. */
static void gmm_prepare_store(nf_dist *d)
{
    gmm_state *st = d->state;
    gmm_prepare(&st->tab, st->A->value + st->a, d->P->value + st->s, st->K, d->dim);
}

/* log pi_k + log N(z; mu_k, e^{2 s_k}) = cst_k - 1/2 sum_j u_kj^2,  u_kj = (z_j - mu_kj) e^{-s_kj} */
static inline double gmm_component(const gmm_tables *t, const nf_real *mu, const nf_real *zi, int k, int D)
{
    const nf_real *m = mu + (size_t)k * D;
    const double *is = t->isc + (size_t)k * D;
    double q = 0;
    for (int j = 0; j < D; j++) {
        double u = ((double)zi[j] - m[j]) * is[j];
        q += u * u;
    }
    return t->cst[k] - 0.5 * q;
}

/* log p(z) = lse_k c_k, accumulated as a running (max, sum) pair so no per-row scratch is needed. */
static double gmm_row(const gmm_tables *t, int K, const nf_real *mu, const nf_real *zi, int D)
{
    double m = -INFINITY, sum = 0;
    for (int k = 0; k < K; k++) {
        double c = gmm_component(t, mu, zi, k, D);
        if (c > m) {
            sum = sum * exp(m - c) + 1.0;
            m = c;
        } else {
            sum += exp(c - m);
        }
    }
    return m + log(sum);
}

/* One row of the backward of log p (tables prepared for its theta): adds w dlogp/dtheta into g
 * (K + 2KD: a, mu, s) and w dlogp/dz into gz (D).  With c_k the component terms and
 * r_k = e^{c_k - max c} / sum_l e^{c_l - max c} the responsibilities:
 *   d log p/d z_j    = -sum_k r_k u_kj e^{-s_kj}
 *   d log p/d a_k    = r_k - pi_k
 *   d log p/d mu_kj  = r_k u_kj e^{-s_kj}
 *   d log p/d s_kj   = r_k (u_kj^2 - 1)                                                            */
static void gmm_row_backward(const gmm_tables *t, int K, const nf_real *mu, const nf_real *zi, int D, double w,
                             double *g, double *gz)
{
    const size_t KD = (size_t)K * D;
    double m = -INFINITY;
    for (int k = 0; k < K; k++) {
        t->c[k] = gmm_component(t, mu, zi, k, D);
        m = t->c[k] > m ? t->c[k] : m;
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
        t->c[k] = exp(t->c[k] - m);
        sum += t->c[k];
    }
    const double isum = 1.0 / sum;
    for (int k = 0; k < K; k++) {
        const double r = t->c[k] * isum, wr = w * r;
        g[k] += w * (r - t->pi[k]);
        if (wr == 0) continue;
        const nf_real *mk = mu + (size_t)k * D;
        const double *is = t->isc + (size_t)k * D;
        for (int j = 0; j < D; j++) {
            double u = ((double)zi[j] - mk[j]) * is[j];
            g[K + (size_t)k * D + j] += wr * u * is[j];
            g[K + KD + (size_t)k * D + j] += wr * (u * u - 1.0);
            gz[j] -= wr * u * is[j];
        }
    }
}

/* sign +1: c_k = log pi_k + sum_j log Phi(u_kj);  sign -1: Phi(-u_kj);  value = lse_k c_k (into t->c). */
static double gmm_tail_row(const gmm_tables *t, int K, const nf_real *mu, const nf_real *zi, int D, double sign)
{
    double m = -INFINITY;
    for (int k = 0; k < K; k++) {
        const nf_real *mk = mu + (size_t)k * D;
        const double *is = t->isc + (size_t)k * D;
        double c = t->lpi[k];
        for (int j = 0; j < D; j++) c += nf_log_ndtr(sign * ((double)zi[j] - mk[j]) * is[j]);
        t->c[k] = c;
        m = c > m ? c : m;
    }
    if (m == -INFINITY) return m;
    double sum = 0;
    for (int k = 0; k < K; k++) sum += exp(t->c[k] - m);
    return m + log(sum);
}

/* One row of a tail's backward: adds w dvalue/dtheta into g and w dvalue/dz into gz.  With
 * r_k = exp(c_k - value) and q_kj = sign phi(sign u_kj) / Phi(sign u_kj):
 *   d/da_k = r_k - pi_k,  d/dz_j = sum_k r_k q_kj e^{-s_kj},
 *   d/dmu_kj = -r_k q_kj e^{-s_kj},  d/ds_kj = -r_k q_kj u_kj                                        */
static void gmm_tail_row_backward(const gmm_tables *t, int K, const nf_real *mu, const nf_real *zi, int D,
                                  double sign, double w, double *g, double *gz)
{
    const size_t KD = (size_t)K * D;
    const double v = gmm_tail_row(t, K, mu, zi, D, sign);
    for (int k = 0; k < K; k++) {
        const double r = exp(t->c[k] - v), wr = w * r;
        g[k] += w * (r - t->pi[k]);
        if (wr == 0) continue;
        const nf_real *mk = mu + (size_t)k * D;
        const double *is = t->isc + (size_t)k * D;
        for (int j = 0; j < D; j++) {
            double u = ((double)zi[j] - mk[j]) * is[j], q = wr * sign * nf_ndtr_ratio(sign * u);
            g[K + (size_t)k * D + j] -= q * is[j];
            g[K + KD + (size_t)k * D + j] -= q * u;
            gz[j] += q * is[j];
        }
    }
}

static int gmm_bad_row(const nf_dist *d, int bad, const char *what)
{
    return nf_error(NF_ENONFINITE, "%s: %s of row %d is not finite (non-finite latent, context or parameters)",
                    d->name, what, bad);
}

static void gmm_zero_sums(nf_dist *d)
{
    gmm_state *st = d->state;
    memset(st->acc, 0, st->ntheta * sizeof(double));
}

/* Batch sums of dL/d(a, mu, s) (of b when conditional) into P->grad (the logits only when they are
 * trained). */
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
}

/* ---- conditional parameters, a block of r rows at a time: Theta = 1 b^T + Ctx W^T ---- */

/* th (r, ntheta) = Theta = 1 b^T + Ctx W^T, b = (a, mu, s) from the stores, Ctx (r, C); W (m, C) maps
 * the context into the entries m0.. of each row. */
static void gmm_theta_block(nf_dist *d, const nf_real *ctx, int r, nf_real *th)
{
    gmm_state *st = d->state;
    const int K = st->K, C = d->ctx_dim;
    const size_t KD = (size_t)K * d->dim, nt = st->ntheta;
    memcpy(th, st->A->value + st->a, (size_t)K * sizeof(nf_real));
    memcpy(th + K, d->P->value + st->mu, KD * sizeof(nf_real));
    memcpy(th + K + KD, d->P->value + st->s, KD * sizeof(nf_real));
    for (int i = 1; i < r; i++) memcpy(th + (size_t)i * nt, th, nt * sizeof(nf_real));
    nf_gemm(0, 1, r, st->m, C, (nf_real)1, ctx, C, d->P->value + st->W, C, (nf_real)1, th + st->m0, (int)nt);
}

/* From the block's dTheta (r, ntheta): db += colsum(dTheta) (in st->acc, double, row order),
 * dW (m, C) += dTheta^T Ctx and dCtx (r, C) += dTheta W, over the entries m0.. of each row. */
static void gmm_theta_block_backward(nf_dist *d, const nf_real *ctx, nf_real *dctx, int r)
{
    gmm_state *st = d->state;
    const int C = d->ctx_dim;
    const size_t nt = st->ntheta;
    const nf_real *dth = st->dtheta;
    for (int i = 0; i < r; i++)
        for (size_t q = 0; q < nt; q++) st->acc[q] += dth[(size_t)i * nt + q];
    nf_gemm(1, 0, st->m, C, r, (nf_real)1, dth + st->m0, (int)nt, ctx, C, (nf_real)1, d->P->grad + st->W, C);
    if (dctx)
        nf_gemm(0, 0, r, C, st->m, (nf_real)1, dth + st->m0, (int)nt, d->P->value + st->W, C, (nf_real)1, dctx, C);
}

/* ---- the Theta of the last log_prob, kept for its backward ----
 * Training calls log_prob, then backward with the same contexts and parameters: backward then reads
 * the Theta of every row from the memo instead of a second product (for D = 1, the rows' gradients
 * themselves: gmm_rows1_part).  It is used only when the
 * contexts and the parameters (a, mu, s, W) are byte for byte those log_prob saw (compared, not
 * assumed: callers reuse their buffers), so results are the same with or without it; above
 * GMM_MEMO_BYTES, or when memory is short, there is none. */
#define GMM_MEMO_BYTES ((size_t)256 << 20)

/* The parameters Theta depends on, in one array: a, mu, s, W. */
static void gmm_memo_params(nf_dist *d, nf_real *dst)
{
    gmm_state *st = d->state;
    const size_t K = (size_t)st->K, KD = K * d->dim;
    memcpy(dst, st->A->value + st->a, K * sizeof(nf_real));
    memcpy(dst + K, d->P->value + st->mu, KD * sizeof(nf_real));
    memcpy(dst + K + KD, d->P->value + st->s, KD * sizeof(nf_real));
    memcpy(dst + st->ntheta, d->P->value + st->W, (size_t)st->m * d->ctx_dim * sizeof(nf_real));
}

/* Room for the Theta of n rows (grown when a larger batch arrives); 0 when there is to be no memo. */
static int gmm_memo_reserve(nf_dist *d, int n)
{
    gmm_state *st = d->state;
    const size_t C = (size_t)d->ctx_dim;
    st->memo_n = 0;
    if (n <= 0 || (size_t)n * (st->ntheta + C) * sizeof(nf_real) > GMM_MEMO_BYTES) return 0;
    if (n <= st->memo_cap) return 1;
    free(st->memo);
    free(st->memo_gy);
    free(st->memo_ctx);
    st->memo = malloc((size_t)n * st->ntheta * sizeof(nf_real));
    st->memo_gy = malloc((size_t)n * sizeof(nf_real));
    st->memo_ctx = malloc((size_t)n * C * sizeof(nf_real));
    st->memo_cap = st->memo && st->memo_gy && st->memo_ctx ? n : 0;
    return st->memo_cap > 0;
}

static void gmm_memo_save(nf_dist *d, const nf_real *ctx, int n)
{
    gmm_state *st = d->state;
    memcpy(st->memo_ctx, ctx, (size_t)n * d->ctx_dim * sizeof(nf_real));
    gmm_memo_params(d, st->memo_par);
    st->memo_n = n;
}

/* 1 when the memo holds Theta for exactly these n contexts and the current parameters. */
static int gmm_memo_matches(nf_dist *d, const nf_real *ctx, int n)
{
    gmm_state *st = d->state;
    if (!st->memo_n || st->memo_n != n) return 0;
    if (memcmp(st->memo_ctx, ctx, (size_t)n * d->ctx_dim * sizeof(nf_real))) return 0;
    const size_t K = (size_t)st->K, KD = K * d->dim, nw = (size_t)st->m * d->ctx_dim;
    const nf_real *p = st->memo_par;
    return !memcmp(p, st->A->value + st->a, K * sizeof(nf_real)) &&
           !memcmp(p + K, d->P->value + st->mu, KD * sizeof(nf_real)) &&
           !memcmp(p + K + KD, d->P->value + st->s, KD * sizeof(nf_real)) &&
           !memcmp(p + st->ntheta, d->P->value + st->W, nw * sizeof(nf_real));
}

/* Room for the tables of nparts parts (grows only when more threads arrive). */
static int gmm_reserve_parts(nf_dist *d, int nparts)
{
    gmm_state *st = d->state;
    if (nparts <= st->nparts) return NF_OK;
    const size_t per = gmm_tables_size(st->K, d->dim);
    double *mem = realloc(st->part_mem, (size_t)nparts * per * sizeof(double));
    if (!mem) return nf_error(NF_ENOMEM, "%s: out of memory for the tables of %d threads", d->name, nparts);
    st->part_mem = mem;
    gmm_tables *t = realloc(st->part, (size_t)nparts * sizeof *t);
    if (!t) return nf_error(NF_ENOMEM, "%s: out of memory for the tables of %d threads", d->name, nparts);
    st->part = t;
    for (int p = 0; p < nparts; p++) gmm_tables_bind(&st->part[p], mem + (size_t)p * per, st->K, d->dim);
    st->nparts = nparts;
    return NF_OK;
}

typedef enum { GMM_LOGP, GMM_LOGP_GRAD, GMM_TAIL, GMM_TAIL_GRAD } gmm_pass;

/* The rows of one block, for nf_threads_run: part p takes rows [r p / P, r (p+1) / P). */
typedef struct {
    gmm_state *st;
    gmm_pass pass;
    const nf_real *theta;   /* (rows, ntheta) the block's parameters */
    int rows, D;
    double sign;            /* tails: +1 log-CDF, -1 log-survival */
    const nf_real *z;       /* (rows, D) */
    const nf_real *w;       /* (rows) dL/dvalue (gradient passes) */
    nf_real *out;           /* (rows) values (value passes) */
    nf_real *dz;            /* (rows, D) or NULL (gradient passes) */
    nf_real *unit, *unit_gy; /* D = 1: the memo's rows, (rows, ntheta) and (rows): see gmm_rows1_part */
    int bad[NF_THREADS_MAX]; /* first non-finite row of each part, -1 for none */
} gmm_job;

static void gmm_rows_part(void *arg, int part, int nparts)
{
    gmm_job *J = arg;
    gmm_state *st = J->st;
    const gmm_tables *t = &st->part[part];
    const int K = st->K, D = J->D;
    const size_t KD = (size_t)K * D, nt = st->ntheta;
    const int lo = (int)((long)J->rows * part / nparts), hi = (int)((long)J->rows * (part + 1) / nparts);
    J->bad[part] = -1;
    for (int i = lo; i < hi; i++) {
        const nf_real *th = J->theta + (size_t)i * nt, *mu = th + K, *zi = J->z + (size_t)i * D;
        gmm_prepare(t, th, th + K + KD, K, D);
        if (J->pass == GMM_LOGP || J->pass == GMM_TAIL) {
            /* a probability: rounding in the sum over components must not push it above 1 */
            double v = J->pass == GMM_LOGP ? gmm_row(t, K, mu, zi, D)
                                           : fmin(gmm_tail_row(t, K, mu, zi, D, J->sign), 0.0);
            J->out[i] = (nf_real)v;
            if (!isfinite(v) && J->bad[part] < 0) J->bad[part] = i;
            continue;
        }
        memset(t->g, 0, nt * sizeof(double));
        memset(t->gz, 0, (size_t)D * sizeof(double));
        if (J->pass == GMM_LOGP_GRAD) gmm_row_backward(t, K, mu, zi, D, J->w[i], t->g, t->gz);
        else gmm_tail_row_backward(t, K, mu, zi, D, J->sign, J->w[i], t->g, t->gz);
        nf_real *dth = st->dtheta + (size_t)i * nt;
        for (size_t q = 0; q < nt; q++) dth[q] = (nf_real)t->g[q];
        if (J->dz)
            for (int j = 0; j < D; j++) J->dz[(size_t)i * D + j] += (nf_real)t->gz[j];
    }
}

/* ---- one-dimensional rows (the point-process decoder): loops over components, vectorised ---- */

#if defined(__GNUC__) && !defined(__clang__)
#define GMM_INLINE static inline __attribute__((always_inline))
#else
#define GMM_INLINE static inline
#endif

/* e^x in double for the vectorised loops (glibc's exp is a call the compiler cannot vectorise):
 * x = k ln2 + r, |r| <= ln2/2 (Cody-Waite; k = round(x / ln2) by adding and removing 1.5 * 2^52,
 * whose low bits then hold k as an integer), e^r by its Taylor polynomial to degree 12 (truncation
 * 2e-16 relative), 2^k built on the bits: within 2.2 ulp of exp on [-708, 709] (measured), 0 below
 * (2^k underflows), +inf above; NaN and +-inf give NaN (r = inf - inf), which the callers report as a
 * non-finite row.  Only integer selects: a floating-point comparison would stay a branch under
 * -ftrapping-math and keep the loop scalar. */
GMM_INLINE double gmm_exp(double x)
{
    const double t = x * 1.4426950408889634 + 6755399441055744.0, k = t - 6755399441055744.0;
    int64_t tb;
    memcpy(&tb, &t, sizeof tb);
    const int64_t ki = tb - INT64_C(0x4338000000000000);
    int64_t eb = (int64_t)((uint64_t)(ki + 1023) << 52);
    eb = ki > 1023 ? INT64_C(0x7ff0000000000000) : eb;
    eb = ki < -1022 ? 0 : eb;
    double two_k;
    memcpy(&two_k, &eb, sizeof two_k);
    const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    double p = 1.0 / 479001600;
    p = p * r + 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = (p * r + 1.0) * r + 1.0;
    return p * two_k;
}

/* A row with D = 1, theta = (a, mu, s) (K each), y the latent: the terms of its components
 *   c_k = a_k - s_k - u_k^2 / 2,  u_k = (y - mu_k) e^{-s_k}        (into c, with e^{-s_k} into isc)
 * and log p(y) = lse_k c_k - lse_k a_k - 1/2 log 2pi.  With grad, also its gradient
 *   dlog p/da_k = r_k - pi_k,  dlog p/dmu_k = r_k u_k e^{-s_k},  dlog p/ds_k = r_k (u_k^2 - 1),
 *   dlog p/dy = -sum_k r_k u_k e^{-s_k},
 * r_k = e^{c_k - max c} / sum_l e^{c_l - max c}, pi_k = e^{a_k - max a} / sum_l e^{a_l - max a}:
 * into dth (3K, rounded to nf_real; dth may be th itself: entry k of each third is read before it is
 * written, in the same iteration), dlog p/dy through *gy.  3K exponentials. */
GMM_INLINE double gmm_row1(const gmm_tables *t, int K, const nf_real *th, double y, int grad, nf_real *dth,
                           double *gy)
{
    const nf_real *a = th, *mu = th + K, *s = th + 2 * K;
    double *c = t->c, *isc = t->isc, *pi = t->pi;
    double amax = -INFINITY;
#pragma omp simd reduction(max : amax)
    for (int k = 0; k < K; k++) amax = amax > a[k] ? amax : a[k];
    double za = 0, cmax = -INFINITY;
#pragma omp simd reduction(+ : za) reduction(max : cmax)
    for (int k = 0; k < K; k++) {
        const double e = gmm_exp((double)a[k] - amax), is = gmm_exp(-(double)s[k]), u = (y - mu[k]) * is;
        pi[k] = e;
        za += e;
        isc[k] = is;
        c[k] = (double)a[k] - s[k] - 0.5 * u * u;
        cmax = cmax > c[k] ? cmax : c[k];
    }
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int k = 0; k < K; k++) {
        c[k] = gmm_exp(c[k] - cmax);
        sum += c[k];
    }
    const double lp = cmax + log(sum) - (amax + log(za)) - NF_HALF_LOG_2PI;
    if (!grad) return lp;
    const double ws = 1 / sum, wa = 1 / za;
    double gz = 0;
#pragma omp simd reduction(+ : gz)
    for (int k = 0; k < K; k++) {
        const double wr = ws * c[k], is = isc[k], u = (y - mu[k]) * is;
        dth[k] = (nf_real)(wr - wa * pi[k]);
        dth[K + k] = (nf_real)(wr * u * is);
        dth[2 * K + k] = (nf_real)(wr * (u * u - 1.0));
        gz -= wr * u * is;
    }
    *gy = gz;
    return lp;
}

/* gmm_rows_part for D = 1 and log p or its gradient (core/simd.h: an AVX2 clone). */
static NF_SIMD_CLONES void gmm_rows1_part(void *arg, int part, int nparts)
{
    gmm_job *J = arg;
    gmm_state *st = J->st;
    const gmm_tables *t = &st->part[part];
    const int K = st->K;
    const size_t nt = st->ntheta;
    const int lo = (int)((long)J->rows * part / nparts), hi = (int)((long)J->rows * (part + 1) / nparts);
    J->bad[part] = -1;
    for (int i = lo; i < hi; i++) {
        const nf_real *th = J->theta + (size_t)i * nt;
        if (J->pass == GMM_LOGP) {
            double gy = 0;
            nf_real *unit = J->unit ? J->unit + (size_t)i * nt : NULL; /* th itself: see gmm_row1 */
            const double v = gmm_row1(t, K, th, J->z[i], unit != NULL, unit, &gy);
            if (J->unit) J->unit_gy[i] = (nf_real)gy;
            J->out[i] = (nf_real)v;
            if (!isfinite(v) && J->bad[part] < 0) J->bad[part] = i;
            continue;
        }
        /* gradient: w times the row's dlog p/dtheta and dlog p/dy, from the memo when log_prob left
         * them there, else computed here the same way (so the results do not depend on the memo) */
        nf_real *dth = st->dtheta + (size_t)i * nt, gy1;
        const nf_real *unit = dth;
        if (J->unit) {
            unit = J->unit + (size_t)i * nt;
            gy1 = J->unit_gy[i];
        } else {
            double gy = 0;
            gmm_row1(t, K, th, J->z[i], 1, dth, &gy);
            gy1 = (nf_real)gy;
        }
        const double w = J->w[i];
#pragma omp simd
        for (size_t q = 0; q < nt; q++) dth[q] = (nf_real)(w * unit[q]);
        if (J->dz) J->dz[i] += (nf_real)(w * gy1);
    }
}

/* A conditional pass over n rows, block by block: values into out (value passes; *bad = the first
 * non-finite row or -1), or gradients given dval into dz, dctx and P->grad. */
static int gmm_ctx_pass(nf_dist *d, gmm_pass pass, double sign, nf_real *out, nf_real *dz, nf_real *dctx,
                        const nf_real *dval, const nf_real *z, const nf_real *ctx, int n, int *bad)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    gmm_state *st = d->state;
    const int D = d->dim, C = d->ctx_dim, grad = pass == GMM_LOGP_GRAD || pass == GMM_TAIL_GRAD;
    int threads = nf_blas_get_threads();
    threads = threads < 1 ? 1 : threads > NF_THREADS_MAX ? NF_THREADS_MAX : threads;
    NF_TRY(gmm_reserve_parts(d, threads));
    if (grad) gmm_zero_sums(d);
    /* log_prob fills the memo, its backward reads it (the tails neither) */
    const int fill = pass == GMM_LOGP && gmm_memo_reserve(d, n);
    const int hit = pass == GMM_LOGP_GRAD && gmm_memo_matches(d, ctx, n);
    *bad = -1;
    for (int i0 = 0; i0 < n; i0 += st->chunk) {
        const int r = n - i0 < st->chunk ? n - i0 : st->chunk;
        nf_real *th = fill || hit ? st->memo + (size_t)i0 * st->ntheta : st->theta;
        if (!hit) gmm_theta_block(d, ctx + (size_t)i0 * C, r, th);
        const int one = D == 1 && (pass == GMM_LOGP || pass == GMM_LOGP_GRAD);
        /* D = 1 with a memo: log_prob replaces each row's Theta there by its gradient, which the
         * backward scales (no second pass over the exponentials) */
        gmm_job J = {.st = st, .pass = pass, .theta = th, .rows = r, .D = D, .sign = sign, .z = z + (size_t)i0 * D,
                     .w = grad ? dval + i0 : NULL, .out = grad ? NULL : out + i0,
                     .dz = dz ? dz + (size_t)i0 * D : NULL,
                     .unit = one && (fill || hit) ? th : NULL,
                     .unit_gy = one && (fill || hit) ? st->memo_gy + i0 : NULL};
        const int parts = threads < r ? threads : r;
        nf_threads_run(threads, parts, one ? gmm_rows1_part : gmm_rows_part, &J);
        for (int p = 0; p < parts && *bad < 0; p++)
            if (J.bad[p] >= 0 && !grad) *bad = i0 + J.bad[p];
        if (grad) gmm_theta_block_backward(d, ctx + (size_t)i0 * C, dctx ? dctx + (size_t)i0 * C : NULL, r);
    }
    if (fill) gmm_memo_save(d, ctx, n);
    if (grad) gmm_add_sums(d);
    return NF_OK;
}

/* ---- the calls ---- */

static int gmm_log_prob(nf_dist *d, nf_real *logp, const nf_real *z, const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    gmm_state *st = d->state;
    const int D = d->dim;
    int bad = -1;
    if (d->ctx_dim) {
        NF_TRY(gmm_ctx_pass(d, GMM_LOGP, 0, logp, NULL, NULL, NULL, z, ctx, n, &bad));
        return bad >= 0 ? gmm_bad_row(d, bad, "log-density") : NF_OK;
    }
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare_store(d);
#pragma omp parallel for schedule(static) if ((long)n * D * st->K > 32768)
    for (int i = 0; i < n; i++) {
        double lp = gmm_row(&st->tab, st->K, mu, z + (size_t)i * D, D);
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

/* Derivatives above gmm_row_backward; conditional rows go through theta = b + W c. */
static int gmm_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dlogp, const nf_real *z,
                        const nf_real *ctx, const size_t *idx, int n)
{
    (void)idx;
    int bad;
    if (d->ctx_dim) return gmm_ctx_pass(d, GMM_LOGP_GRAD, 0, NULL, dz, dctx, dlogp, z, ctx, n, &bad);
    gmm_state *st = d->state;
    const int D = d->dim;
    const nf_real *mu = d->P->value + st->mu;
    gmm_prepare_store(d);
    gmm_zero_sums(d);
    for (int i = 0; i < n; i++) {
        memset(st->tab.gz, 0, (size_t)D * sizeof(double));
        gmm_row_backward(&st->tab, st->K, mu, z + (size_t)i * D, D, dlogp[i], st->acc, st->tab.gz);
        if (dz)
            for (int j = 0; j < D; j++) dz[(size_t)i * D + j] += (nf_real)st->tab.gz[j];
    }
    gmm_add_sums(d);
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

/* Row i's draw given its tables, mean and log-scale: k ~ Categorical(pi), z = mu_k + e^{s_k} eps. */
static void gmm_draw(gmm_state *st, const nf_real *mu, const nf_real *s, int D, nf_real *zi, int i, nf_rng *rng)
{
    size_t k = nf_rng_categorical(rng, st->tab.pi, (size_t)st->K);
    st->comp[i] = (int)k;
    for (int j = 0; j < D; j++) zi[j] = (nf_real)(mu[k * D + j] + exp((double)s[k * D + j]) * nf_rng_normal(rng));
}

/* k ~ Categorical(pi), eps ~ N(0, I), z = mu_k + e^{s_k} eps; logp is the mixture density at z.
 * Conditional: the same with theta_i = b + W ctx_i per row (a block's Theta at a time). */
static int gmm_sample(nf_dist *d, nf_real *z, nf_real *logp, const nf_real *ctx, int n, nf_rng *rng)
{
    if (!rng) return nf_error(NF_EINVAL, "%s: sampling needs a random stream", d->name);
    NF_TRY(nf_dist_check_ctx(d, ctx));
    NF_TRY(gmm_reserve_comp(d, n));
    gmm_state *st = d->state;
    const int K = st->K, D = d->dim, C = d->ctx_dim;
    const size_t KD = (size_t)K * D;
    if (C) {
        for (int i0 = 0; i0 < n; i0 += st->chunk) {
            const int r = n - i0 < st->chunk ? n - i0 : st->chunk;
            gmm_theta_block(d, ctx + (size_t)i0 * C, r, st->theta);
            for (int i = 0; i < r; i++) {
                const nf_real *th = st->theta + (size_t)i * st->ntheta;
                gmm_prepare(&st->tab, th, th + K + KD, K, D);
                gmm_draw(st, th + K, th + K + KD, D, z + (size_t)(i0 + i) * D, i0 + i, rng);
            }
        }
    } else {
        gmm_prepare_store(d);
        for (int i = 0; i < n; i++)
            gmm_draw(st, d->P->value + st->mu, d->P->value + st->s, D, z + (size_t)i * D, i, rng);
    }
    st->comp_n = n;
    if (logp) return gmm_log_prob(d, logp, z, ctx, NULL, n);
    return NF_OK;
}

/* Pathwise gradient of the last draw with its components k_i and noise eps held fixed:
 *   z = mu_k + e^{s_k} eps:  dz/dmu_k = 1,  dz/ds_k = e^{s_k} eps = z - mu_k;
 * with dlogp, logp(z(theta), theta) also adds its partial derivatives (gmm_row_backward) and
 * dlogp dlogp/dz enters the path like dz.  The logits have no pathwise gradient: only fixed weights.
 * Into g (ntheta), with the row's tables in st->tab. */
static void gmm_path_row(gmm_state *st, const nf_real *mu, const nf_real *zi, int D, const nf_real *dzi, double w,
                         int dlogp, size_t k, double *g)
{
    const int K = st->K;
    const size_t KD = (size_t)K * D;
    for (int j = 0; j < D; j++) st->tab.gz[j] = dzi ? dzi[j] : 0;
    if (dlogp) gmm_row_backward(&st->tab, K, mu, zi, D, w, g, st->tab.gz);
    for (int j = 0; j < D; j++) {
        g[K + k * D + j] += st->tab.gz[j];
        g[K + KD + k * D + j] += st->tab.gz[j] * ((double)zi[j] - mu[k * D + j]);
    }
}

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
    const size_t KD = (size_t)K * D, nt = st->ntheta;
    gmm_zero_sums(d);
    if (!C) {
        gmm_prepare_store(d);
        for (int i = 0; i < n; i++)
            gmm_path_row(st, d->P->value + st->mu, z + (size_t)i * D, D, dz ? dz + (size_t)i * D : NULL,
                         dlogp ? dlogp[i] : 0, dlogp != NULL, (size_t)st->comp[i], st->acc);
        gmm_add_sums(d);
        return NF_OK;
    }
    for (int i0 = 0; i0 < n; i0 += st->chunk) {
        const int r = n - i0 < st->chunk ? n - i0 : st->chunk;
        gmm_theta_block(d, ctx + (size_t)i0 * C, r, st->theta);
        for (int i = 0; i < r; i++) {
            const nf_real *th = st->theta + (size_t)i * nt;
            const size_t row = (size_t)(i0 + i);
            gmm_prepare(&st->tab, th, th + K + KD, K, D);
            memset(st->tab.g, 0, nt * sizeof(double));
            gmm_path_row(st, th + K, z + row * D, D, dz ? dz + row * D : NULL, dlogp ? dlogp[row] : 0, dlogp != NULL,
                         (size_t)st->comp[row], st->tab.g);
            for (size_t q = 0; q < nt; q++) st->dtheta[(size_t)i * nt + q] = (nf_real)st->tab.g[q];
        }
        gmm_theta_block_backward(d, ctx + (size_t)i0 * C, dctx ? dctx + (size_t)i0 * C : NULL, r);
    }
    gmm_add_sums(d);
    return NF_OK;
}

static int gmm_tail(nf_dist *d, nf_real *out, const nf_real *z, const nf_real *ctx, int n, double sign)
{
    NF_TRY(nf_dist_check_ctx(d, ctx));
    gmm_state *st = d->state;
    const int D = d->dim;
    int bad = -1;
    if (d->ctx_dim) {
        NF_TRY(gmm_ctx_pass(d, GMM_TAIL, sign, out, NULL, NULL, NULL, z, ctx, n, &bad));
    } else {
        gmm_prepare_store(d);
        for (int i = 0; i < n; i++) {
            /* a probability: rounding in the sum over components must not push it above 1 */
            double v = fmin(gmm_tail_row(&st->tab, st->K, d->P->value + st->mu, z + (size_t)i * D, D, sign), 0.0);
            out[i] = (nf_real)v;
            if (!isfinite(v) && bad < 0) bad = i;
        }
    }
    return bad >= 0 ? gmm_bad_row(d, bad, sign > 0 ? "log-CDF" : "log-survival") : NF_OK;
}

/* Derivatives above gmm_tail_row_backward. */
static int gmm_tail_backward(nf_dist *d, nf_real *dz, nf_real *dctx, const nf_real *dval, const nf_real *z,
                             const nf_real *ctx, int n, double sign)
{
    int bad;
    if (d->ctx_dim) return gmm_ctx_pass(d, GMM_TAIL_GRAD, sign, NULL, dz, dctx, dval, z, ctx, n, &bad);
    gmm_state *st = d->state;
    const int D = d->dim;
    gmm_zero_sums(d);
    gmm_prepare_store(d);
    for (int i = 0; i < n; i++) {
        memset(st->tab.gz, 0, (size_t)D * sizeof(double));
        gmm_tail_row_backward(&st->tab, st->K, d->P->value + st->mu, z + (size_t)i * D, D, sign, dval[i], st->acc,
                              st->tab.gz);
        if (dz)
            for (int j = 0; j < D; j++) dz[(size_t)i * D + j] += (nf_real)st->tab.gz[j];
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
