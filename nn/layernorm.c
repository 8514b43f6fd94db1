/* nn/layernorm.c - layer normalisation over the last axis (Ba et al. 2016), llm.c style.
 *
 * Forward caches each row's mean and rstd = 1/sqrt(var + eps) (biased variance, eps 1e-5, as
 * torch.nn.LayerNorm) so backward need not recompute them.  A row's sums are in double, in
 * NF_LANE_SUM's order (nn/nn_internal.h), which nn/layernorm_avx512.c keeps in registers, so both
 * give the same bits.
 * (`omp simd reduction` left the order to the compiler, which summed its partial sums in a scalar
 * loop through memory: most of a row's time at TarFlow's width 64.)
 */
#include <math.h>
#include <stdio.h>

#include "nn/nn_internal.h"
#include "nn/layernorm_avx512.h"
#include "core/blas.h"
#include "core/simd.h"

enum { LN_ROWS = 64 }; /* rows a call of the AVX-512 kernels takes (the pool splits the calls) */

#ifndef NF_DOUBLE
/* Rows of a width the AVX-512 kernels take (C % 16 == 0, a CPU with AVX-512)? */
static int ln512(int C) { return C % 16 == 0 && nf_ln512_compiled() && nf_cpu_avx512(); }
#endif

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
    for (int r = 0; r < n; r++) {
        const nf_real *xr = x + (size_t)r * C;
        nf_real *yr = y + (size_t)r * C;
        double lane[NF_LANES] = {0};
        NF_LANE_SUM(lane, C, (double)xr[i]);
        const double mean = nf_lane_tree_d(lane) / C;
        for (int l = 0; l < NF_LANES; l++) lane[l] = 0;
        NF_LANE_SUM(lane, C, ((double)xr[i] - mean) * ((double)xr[i] - mean));
        const double rstd = 1.0 / sqrt(nf_lane_tree_d(lane) / C + LN_EPS);
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
    nf_layernorm_forward_rows(L, P, y, cache, x, n, 1);
}

/* A pass's arguments, for its ranges of rows (nf_nn_ranges: split over the pool when large). */
typedef struct ln_job {
    const nf_layernorm *L;
    const nf_params *P;
    nf_real *out, *cache;
    const nf_real *base, *dy, *x;
    int vector;
} ln_job;

static void forward_range(void *arg, size_t i0, size_t i1)
{
    const ln_job *j = arg;
    const int C = j->L->width, r1 = (int)i1;
#ifndef NF_DOUBLE
    if (j->vector && ln512(C)) { /* blocks of LN_ROWS rows */
        for (int r0 = (int)i0; r0 < r1; r0 += LN_ROWS)
            nf_ln512_forward(j->out + (size_t)r0 * C, j->cache + 2 * (size_t)r0, j->x + (size_t)r0 * C,
                             j->P->value + j->L->gamma, j->P->value + j->L->beta, C, r1 - r0 < LN_ROWS ? r1 - r0 : LN_ROWS,
                             LN_EPS);
        return;
    }
#endif
    nf_layernorm_forward_simd(j->L, j->P, j->out + i0 * C, j->cache + 2 * i0, j->x + i0 * C, r1 - (int)i0);
}

void nf_layernorm_forward_rows(const nf_layernorm *L, const nf_params *P, nf_real *y, nf_real *cache,
                               const nf_real *x, int n, int vector)
{
    if (n <= 0) return;
    ln_job j = {L, P, y, cache, NULL, NULL, x, vector};
    nf_nn_ranges((size_t)n, LN_ROWS, (size_t)n * L->width, forward_range, &j);
}

/* With g = dy * gamma:  dx += rstd (g - mean(g) - xhat mean(g xhat));
 * dgamma += sum_r dy xhat;  dbeta += sum_r dy. */
void nf_layernorm_backward(const nf_layernorm *L, nf_params *P, nf_real *dx, const nf_real *dy,
                           const nf_real *x, const nf_real *cache, int n)
{
    nf_layernorm_backward_onto(L, P, dx, dx, dy, x, cache, n);
}

void nf_layernorm_backward_onto(const nf_layernorm *L, nf_params *P, nf_real *dx, const nf_real *base,
                                const nf_real *dy, const nf_real *x, const nf_real *cache, int n)
{
    if (dx) nf_layernorm_grad_input_onto(L, P, dx, base, dy, x, cache, n, 1);
    nf_layernorm_grad_params(L, P, dy, x, cache, n, 0, L->width);
}

/* dx = base + (the input's gradient), row by row: base NULL reads nothing (0 + v, as into a zeroed
 * dx), base == dx adds. */
NF_SIMD_CLONES static void nf_layernorm_grad_input_simd(const nf_layernorm *L, const nf_params *P, nf_real *dx,
                                                        const nf_real *base, const nf_real *dy, const nf_real *x,
                                                        const nf_real *cache, int n)
{
    const int C = L->width;
    const nf_real *gamma = P->value + L->gamma;
    for (int r = 0; r < n; r++) {
        const nf_real *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C, *br = base ? base + (size_t)r * C : NULL;
        nf_real *dxr = dx + (size_t)r * C;
        const nf_real mu = cache[2 * r], rs = cache[2 * r + 1];
        double lg[NF_LANES] = {0}, lgx[NF_LANES] = {0};
        NF_LANE_SUM(lg, C, (double)(dyr[i] * gamma[i]));
        NF_LANE_SUM(lgx, C, (double)(dyr[i] * gamma[i] * (xr[i] - mu) * rs));
        const double sg = nf_lane_tree_d(lg), sgx = nf_lane_tree_d(lgx);
        const nf_real mg = (nf_real)(sg / C), mgx = (nf_real)(sgx / C);
        if (br) {
#pragma omp simd
            for (int i = 0; i < C; i++) dxr[i] = br[i] + rs * (dyr[i] * gamma[i] - mg - (xr[i] - mu) * rs * mgx);
        } else {
#pragma omp simd
            for (int i = 0; i < C; i++) dxr[i] = 0 + rs * (dyr[i] * gamma[i] - mg - (xr[i] - mu) * rs * mgx);
        }
    }
}

void nf_layernorm_grad_input(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *dy,
                             const nf_real *x, const nf_real *cache, int n)
{
    nf_layernorm_grad_input_onto(L, P, dx, dx, dy, x, cache, n, 1);
}

void nf_layernorm_grad_input_rows(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *dy,
                                  const nf_real *x, const nf_real *cache, int n, int vector)
{
    nf_layernorm_grad_input_onto(L, P, dx, dx, dy, x, cache, n, vector);
}

static void grad_input_range(void *arg, size_t i0, size_t i1)
{
    const ln_job *j = arg;
    const int C = j->L->width, r1 = (int)i1;
#ifndef NF_DOUBLE
    if (j->vector && ln512(C)) {
        for (int r0 = (int)i0; r0 < r1; r0 += LN_ROWS)
            nf_ln512_grad_input(j->out + (size_t)r0 * C, j->base ? j->base + (size_t)r0 * C : NULL, j->dy + (size_t)r0 * C,
                                j->x + (size_t)r0 * C, j->cache + 2 * (size_t)r0, j->P->value + j->L->gamma, C,
                                r1 - r0 < LN_ROWS ? r1 - r0 : LN_ROWS);
        return;
    }
#endif
    nf_layernorm_grad_input_simd(j->L, j->P, j->out + i0 * C, j->base ? j->base + i0 * C : NULL, j->dy + i0 * C,
                                 j->x + i0 * C, j->cache + 2 * i0, r1 - (int)i0);
}

void nf_layernorm_grad_input_onto(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *base,
                                  const nf_real *dy, const nf_real *x, const nf_real *cache, int n, int vector)
{
    if (n <= 0) return;
    ln_job j = {L, P, dx, (nf_real *)cache, base, dy, x, vector};
    nf_nn_ranges((size_t)n, LN_ROWS, (size_t)n * L->width, grad_input_range, &j);
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
