/* nn/layernorm.c - layer normalisation over the last axis (Ba et al. 2016), llm.c style.
 *
 * Forward caches each row's mean and rstd = 1/sqrt(var + eps) (biased variance, eps 1e-5, as
 * torch.nn.LayerNorm) so backward need not recompute them.
 */
#include <math.h>
#include <stdio.h>

#include "nn/nn_internal.h"
#include "core/simd.h"

#define LN_EPS 1e-5

int nf_layernorm_init(nf_layernorm *L, nf_params *P, const char *name, int width)
{
    char full[NF_PARAM_NAME_MAX + 32];
    if (width < 1) return nf_error(NF_EINVAL, "layer norm '%s': width %d; expected >= 1", name, width);
    L->width = width;
    snprintf(full, sizeof full, "%s.gamma", name);
    NF_TRY(nf_params_add(P, full, (size_t)width, &L->gamma));
    snprintf(full, sizeof full, "%s.beta", name);
    NF_TRY(nf_params_add(P, full, (size_t)width, &L->beta));
    for (int i = 0; i < width; i++) P->value[L->gamma + i] = 1;
    return NF_OK;
}

/* xhat = (x - mean) * rstd,  y = xhat * gamma + beta;  cache[r] = (mean, rstd). */
NF_SIMD_CLONES static void nf_layernorm_forward_simd(const nf_layernorm *L, const nf_params *P, nf_real *y, nf_real *cache,
                                                     const nf_real *x, int n)
{
    const int C = L->width;
    const nf_real *gamma = P->value + L->gamma, *beta = P->value + L->beta;
#pragma omp parallel for schedule(static) if (nf_nn_par((size_t)n * C))
    for (int r = 0; r < n; r++) {
        const nf_real *xr = x + (size_t)r * C;
        nf_real *yr = y + (size_t)r * C;
        double s = 0, ss = 0;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < C; i++) s += xr[i];
        const double mean = s / C;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        const double rstd = 1.0 / sqrt(ss / C + LN_EPS);
        const nf_real mu = (nf_real)mean, rs = (nf_real)rstd;
#pragma omp simd
        for (int i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
        cache[2 * r] = mu;
        cache[2 * r + 1] = rs;
    }
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
void nf_layernorm_forward(const nf_layernorm *L, const nf_params *P, nf_real *y, nf_real *cache,
                          const nf_real *x, int n)
{
    nf_layernorm_forward_simd(L, P, y, cache, x, n);
}

/* With g = dy * gamma:  dx += rstd (g - mean(g) - xhat mean(g xhat));
 * dgamma += sum_r dy xhat;  dbeta += sum_r dy. */
void nf_layernorm_backward(const nf_layernorm *L, nf_params *P, nf_real *dx, const nf_real *dy,
                           const nf_real *x, const nf_real *cache, int n)
{
    if (dx) nf_layernorm_grad_input(L, P, dx, dy, x, cache, n);
    nf_layernorm_grad_params(L, P, dy, x, cache, n, 0, L->width);
}

NF_SIMD_CLONES static void nf_layernorm_grad_input_simd(const nf_layernorm *L, const nf_params *P, nf_real *dx,
                                                        const nf_real *dy, const nf_real *x, const nf_real *cache,
                                                        int n)
{
    const int C = L->width;
    const nf_real *gamma = P->value + L->gamma;
#pragma omp parallel for schedule(static) if (nf_nn_par((size_t)n * C))
    for (int r = 0; r < n; r++) {
        const nf_real *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
        nf_real *dxr = dx + (size_t)r * C;
        const nf_real mu = cache[2 * r], rs = cache[2 * r + 1];
        double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int i = 0; i < C; i++) {
            nf_real g = dyr[i] * gamma[i];
            sg += g;
            sgx += g * (xr[i] - mu) * rs;
        }
        const nf_real mg = (nf_real)(sg / C), mgx = (nf_real)(sgx / C);
#pragma omp simd
        for (int i = 0; i < C; i++) {
            nf_real xhat = (xr[i] - mu) * rs;
            dxr[i] += rs * (dyr[i] * gamma[i] - mg - xhat * mgx);
        }
    }
}

void nf_layernorm_grad_input(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *dy,
                             const nf_real *x, const nf_real *cache, int n)
{
    nf_layernorm_grad_input_simd(L, P, dx, dy, x, cache, n);
}

/* Parameter gradients sum over rows, columns c0..c1 only: callers split the columns, so no two
 * threads write the same entry.  The sums run in local arrays of LN_CHUNK columns (the same additions
 * in the same order as into dgamma and dbeta, which the compiler must otherwise load and store at
 * every row, since they may alias the inputs), in the vector clones. */
#define LN_CHUNK 64
NF_SIMD_CLONES static void grad_params_simd(const nf_layernorm *L, nf_params *P, const nf_real *dy, const nf_real *x,
                                            const nf_real *cache, int n, int c0, int c1)
{
    const int C = L->width;
    nf_real *dgamma = P->grad + L->gamma, *dbeta = P->grad + L->beta;
    for (int j0 = c0; j0 < c1; j0 += LN_CHUNK) {
        const int m = c1 - j0 < LN_CHUNK ? c1 - j0 : LN_CHUNK;
        nf_real ag[LN_CHUNK], ab[LN_CHUNK];
        for (int i = 0; i < m; i++) ag[i] = dgamma[j0 + i], ab[i] = dbeta[j0 + i];
        for (int r = 0; r < n; r++) {
            const nf_real *xr = x + (size_t)r * C + j0, *dyr = dy + (size_t)r * C + j0;
            const nf_real mu = cache[2 * r], rs = cache[2 * r + 1];
#pragma omp simd
            for (int i = 0; i < m; i++) {
                ag[i] += dyr[i] * (xr[i] - mu) * rs;
                ab[i] += dyr[i];
            }
        }
        for (int i = 0; i < m; i++) dgamma[j0 + i] = ag[i], dbeta[j0 + i] = ab[i];
    }
}

void nf_layernorm_grad_params(const nf_layernorm *L, nf_params *P, const nf_real *dy, const nf_real *x,
                              const nf_real *cache, int n, int c0, int c1)
{
    grad_params_simd(L, P, dy, x, cache, n, c0, c1);
}
