/* nn/linear.c - the linear layer y = x W^T + b, optionally masked and weight-normalised.
 *
 * W is (out, in) row-major in the parameter store.  A mask (out, in) of 0/1 owned by the caller marks
 * the entries that exist: masked entries are zero from initialisation on and their gradients are
 * held at zero, so W stays masked under any optimizer and forward multiplies by W as it is.
 * Weight normalisation stores V where W would be and a gain g (out): W_j = g_j V_j / |V_j|; forward
 * writes the effective W into the workspace, where backward finds it again.
 *
 * The _cat variants read the input as the concatenation [x | c] of two arrays (data and context)
 * by splitting the product in two, so nobody copies the concatenation: W_x = W[:, :in-nc] and
 * W_c = W[:, in-nc:], both addressed with the row stride `in`.
 *
 * Inside nf_mlp the passes come in pieces (nn_internal.h) so threads can share them: prepare (the
 * effective weight, once), apply and grad_input on a thread's rows of the batch, grad_params on a
 * thread's rows of W over the whole batch.  A masked layer inside nf_mlp has a block plan
 * (nn/blocks.c) and skips its all-zero blocks.
 */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"
#include "nn/nn_internal.h"
#include "core/simd.h"

static int add_slice(nf_params *P, const char *name, const char *part, size_t size, size_t *off)
{
    char full[NF_PARAM_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s.%s", name, part);
    return nf_params_add(P, full, size, off);
}

int nf_linear_init(nf_linear *L, nf_params *P, const char *name, int in, int out, int weight_norm,
                   const unsigned char *mask, nf_rng *rng)
{
    if (in < 1 || out < 1)
        return nf_error(NF_EINVAL, "linear layer '%s': sizes in=%d, out=%d; expected both >= 1", name, in, out);
    if (!rng) return nf_error(NF_EINVAL, "linear layer '%s': no random number generator to initialise it", name);
    memset(L, 0, sizeof *L);
    L->in = in;
    L->out = out;
    L->weight_norm = weight_norm ? 1 : 0;
    L->mask = mask;
    NF_TRY(add_slice(P, name, "weight", (size_t)out * in, &L->w));
    NF_TRY(add_slice(P, name, "bias", (size_t)out, &L->b));
    if (L->weight_norm) NF_TRY(add_slice(P, name, "gain", (size_t)out, &L->g));
    nf_linear_init_uniform(L, P, 1.0 / sqrt((double)in), rng);
    return NF_OK;
}

/* W, b ~ U(-bound, bound) (as torch.nn.Linear with bound = 1/sqrt(in)); masked W entries zero;
 * with weight norm g_j = |V_j| so the effective W starts equal to V. */
void nf_linear_init_uniform(nf_linear *L, nf_params *P, double bound, nf_rng *rng)
{
    const size_t oi = (size_t)L->out * L->in;
    nf_real *W = P->value + L->w, *b = P->value + L->b;
    nf_rng_fill_uniform(rng, W, oi, -bound, bound);
    nf_rng_fill_uniform(rng, b, (size_t)L->out, -bound, bound);
    if (L->mask)
        for (size_t k = 0; k < oi; k++)
            if (!L->mask[k]) W[k] = 0;
    if (L->weight_norm) {
        nf_real *g = P->value + L->g;
        for (int j = 0; j < L->out; j++) {
            double s = 0;
            for (int i = 0; i < L->in; i++) s += (double)W[(size_t)j * L->in + i] * W[(size_t)j * L->in + i];
            g[j] = (nf_real)sqrt(s);
        }
    }
}

void nf_linear_zero(nf_linear *L, nf_params *P)
{
    memset(P->value + L->b, 0, (size_t)L->out * sizeof(nf_real));
    if (L->weight_norm) /* keep the directions V, so the gain's gradient is not zero */
        memset(P->value + L->g, 0, (size_t)L->out * sizeof(nf_real));
    else
        memset(P->value + L->w, 0, (size_t)L->out * L->in * sizeof(nf_real));
}

/* Workspace: weight norm [W_eff (out,in) | 1/|V_j| (out) | dW (out,in)]; mask without a plan
 * [dW (out,in)]; mask with a plan, the mixed blocks' dW for each of NF_NN_MAX_THREADS threads.
 * It does not grow with n. */
size_t nf_linear_workspace(const nf_linear *L, int n)
{
    (void)n;
    return nf_linear_workspace_blocks(L, NULL);
}

size_t nf_linear_workspace_blocks(const nf_linear *L, const nf_blocks *bk)
{
    const size_t oi = (size_t)L->out * L->in;
    if (L->weight_norm) return 2 * oi + (size_t)L->out;
    if (L->mask) return bk ? NF_NN_MAX_THREADS * bk->scratch : oi;
    return 0;
}

/* W_eff_j = g_j V_j / |V_j| (zero for an all-zero row, e.g. a fully masked one). */
void nf_linear_prepare(const nf_linear *L, const nf_params *P, nf_real *ws)
{
    if (!L->weight_norm) return;
    const int in = L->in;
    const nf_real *V = P->value + L->w, *g = P->value + L->g;
    nf_real *W = ws, *inv = ws + (size_t)L->out * in;
    for (int j = 0; j < L->out; j++) {
        const nf_real *v = V + (size_t)j * in;
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)v[i] * v[i];
        nf_real r = s > 0 ? (nf_real)(1.0 / sqrt(s)) : 0;
        nf_real c = g[j] * r;
        inv[j] = r;
        for (int i = 0; i < in; i++) W[(size_t)j * in + i] = c * v[i];
    }
}

static const nf_real *weight(const nf_linear *L, const nf_params *P, const nf_real *ws)
{
    return L->weight_norm ? ws : P->value + L->w;
}

/* Rows r0..r1 of y = res + b, y += b, or y = b. */
NF_SIMD_CLONES static void bias_rows_simd(nf_real *y, const nf_real *res, const nf_real *b, int out, int accumulate,
                                          size_t r0, size_t r1)
{
    for (size_t r = r0; r < r1; r++) {
        nf_real *yr = y + r * out;
        if (res) {
            const nf_real *rr = res + r * out;
#pragma omp simd
            for (int j = 0; j < out; j++) yr[j] = rr[j] + b[j];
        } else if (accumulate) {
#pragma omp simd
            for (int j = 0; j < out; j++) yr[j] += b[j];
        } else {
            memcpy(yr, b, (size_t)out * sizeof *yr);
        }
    }
}

typedef struct bias_job {
    nf_real *y;
    const nf_real *res, *b;
    int out, accumulate;
} bias_job;

static void bias_range(void *arg, size_t r0, size_t r1)
{
    const bias_job *j = arg;
    bias_rows_simd(j->y, j->res, j->b, j->out, j->accumulate, r0, r1);
}

/* y (=|+=) [x | c] W^T + b, with x (n, in-nc), c (n, nc), y (n, out); after nf_linear_prepare. */
/* y = [x | c] W^T + b, or with accumulate y += [x | c] W^T + b, or with a residual res (n, out)
 * y = res + [x | c] W^T + b.  The bias goes in where y is first written: by the product itself when
 * y is overwritten, else in one pass over the rows (y += b, or y = res + b) before the products add
 * into y. */
NF_SIMD_CLONES static void nf_linear_apply_simd(const nf_linear *L, const nf_blocks *bk, const nf_params *P,
                                                const nf_real *ws, nf_real *y, const nf_real *res, const nf_real *x,
                                                const nf_real *c, int nc, int accumulate, int n)
{
    if (n <= 0) return;
    const int in = L->in, out = L->out, nx = in - nc;
    const nf_real *W = weight(L, P, ws), *b = P->value + L->b;
    if (!accumulate && !res && bk) {
        nf_blocks_forward(bk, y, b, x, c, nx, nc, W, in, out, n);
        return;
    }
    if (!accumulate && !res && nx > 0) {
        nf_gemm_bias(0, 1, n, out, nx, x, nx, W, in, b, y, out);
        if (nc > 0) nf_gemm(0, 1, n, out, nc, 1, c, nc, W + nx, in, 1, y, out);
        return;
    }
    /* the bias rows (memory-bound on large batches: split over the pool) */
    bias_job bj = {y, res, b, out, accumulate};
    nf_nn_ranges((size_t)n, 16, (size_t)n * out, bias_range, &bj);
    if (bk) {
        nf_blocks_forward(bk, y, NULL, x, c, nx, nc, W, in, out, n);
        return;
    }
    if (nx > 0) nf_gemm(0, 1, n, out, nx, 1, x, nx, W, in, 1, y, out);
    if (nc > 0) nf_gemm(0, 1, n, out, nc, 1, c, nc, W + nx, in, 1, y, out);
}

/* The exported names call the clones (a multiversioned function must be static for clang). */
void nf_linear_apply(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *y,
                     const nf_real *x, const nf_real *c, int nc, int accumulate, int n)
{
    nf_linear_apply_simd(L, bk, P, ws, y, NULL, x, c, nc, accumulate, n);
}

void nf_linear_apply_res(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *y,
                         const nf_real *res, const nf_real *x, int n)
{
    nf_linear_apply_simd(L, bk, P, ws, y, res, x, NULL, 0, 0, n);
}

void nf_linear_forward_res(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *res,
                           const nf_real *x, int n)
{
    if (n <= 0) return;
    nf_linear_prepare(L, P, ws);
    nf_linear_apply_res(L, NULL, P, ws, y, res, x, n);
}

void nf_linear_forward_cat(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                           const nf_real *c, int nc, int accumulate, int n)
{
    nf_linear_forward_blocks(L, NULL, P, ws, y, x, c, nc, accumulate, n);
}

void nf_linear_forward_blocks(const nf_linear *L, const nf_blocks *bk, const nf_params *P, nf_real *ws, nf_real *y,
                              const nf_real *x, const nf_real *c, int nc, int accumulate, int n)
{
    if (n <= 0) return;
    nf_linear_prepare(L, P, ws);
    nf_linear_apply(L, bk, P, ws, y, x, c, nc, accumulate, n);
}

void nf_linear_forward(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x, int n)
{
    nf_linear_forward_cat(L, P, ws, y, x, NULL, 0, 0, n);
}

/* dx (=|+=) dy W_x,  dc += dy W_c. */
void nf_linear_grad_input(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *dx,
                          nf_real *dc, const nf_real *dy, int nc, int accumulate, int n)
{
    if (n <= 0) return;
    const int in = L->in, out = L->out, nx = in - nc;
    const nf_real *W = weight(L, P, ws);
    if (bk) {
        nf_blocks_backward_input(bk, nx > 0 ? dx : NULL, nc > 0 ? dc : NULL, accumulate, dy, nx, nc, W, in, out, n);
        return;
    }
    if (dx && nx > 0) nf_gemm(0, 0, n, nx, out, 1, dy, out, W, in, accumulate ? 1 : 0, dx, nx);
    if (dc && nc > 0) nf_gemm(0, 0, n, nc, out, 1, dy, out, W + nx, in, 1, dc, nc);
}

/* The rows j0..j1 of W a share of `parts` gets: the plan's row blocks (a0..a1) balanced by their
 * computed area, or equal row ranges without a plan. */
static void param_share(const nf_linear *L, const nf_blocks *bk, int part, int parts, int *j0, int *j1, int *a0,
                        int *a1)
{
    if (!bk) {
        *j0 = (int)((long)L->out * part / parts), *j1 = (int)((long)L->out * (part + 1) / parts);
        return;
    }
    nf_blocks_share(bk, part, parts, a0, a1);
    *j0 = bk->rb[*a0], *j1 = bk->rb[*a1];
}

/* Rows j0..j1 (a share) of:  db += sum_r dy_r,  dW += dy^T [x | c] (masked).
 * Weight norm, with s_j = dW_j . V_j / |V_j| and c_j = g_j / |V_j|:
 *   dg_j += s_j,   dV_j += c_j (dW_j - s_j V_j / |V_j|). */
NF_SIMD_CLONES static void nf_linear_grad_params_simd(const nf_linear *L, const nf_blocks *bk, nf_params *P, nf_real *ws, const nf_real *dy,
                                                      const nf_real *x, const nf_real *c, int nc, int n, int part, int parts)
{
    if (n <= 0 || part >= parts) return;
    const int in = L->in, out = L->out, nx = in - nc;
    const size_t oi = (size_t)out * in;
    int j0, j1, a0 = 0, a1 = 0;
    param_share(L, bk, part, parts, &j0, &j1, &a0, &a1);
    if (j0 >= j1) return;
    const int rows = j1 - j0;
    nf_real *gW = P->grad + L->w, *gb = P->grad + L->b;

    for (int r = 0; r < n; r++) {
        const nf_real *dyr = dy + (size_t)r * out;
#pragma omp simd
        for (int j = j0; j < j1; j++) gb[j] += dyr[j];
    }
    if (!L->weight_norm && !L->mask) {
        if (nx > 0) nf_gemm(1, 0, rows, nx, n, 1, dy + j0, out, x, nx, 1, gW + (size_t)j0 * in, in);
        if (nc > 0) nf_gemm(1, 0, rows, nc, n, 1, dy + j0, out, c, nc, 1, gW + (size_t)j0 * in + nx, in);
        return;
    }
    if (bk && !L->weight_norm) { /* masked: kept blocks straight into the gradient */
        nf_blocks_backward_weight(bk, L->mask, gW, 0, ws + (size_t)part * bk->scratch, dy, x, c, nx, nc, in, out, n,
                                  a0, a1);
        return;
    }
    nf_real *dW = L->weight_norm ? ws + oi + out : ws;
    if (bk) {
        memset(dW + (size_t)j0 * in, 0, (size_t)rows * in * sizeof *dW);
        nf_blocks_backward_weight(bk, L->mask, dW, 1, NULL, dy, x, c, nx, nc, in, out, n, a0, a1);
    } else {
        if (nx > 0) nf_gemm(1, 0, rows, nx, n, 1, dy + j0, out, x, nx, 0, dW + (size_t)j0 * in, in);
        if (nc > 0) nf_gemm(1, 0, rows, nc, n, 1, dy + j0, out, c, nc, 0, dW + (size_t)j0 * in + nx, in);
    }
    if (L->mask)
        for (size_t k = (size_t)j0 * in; k < (size_t)j1 * in; k++)
            if (!L->mask[k]) dW[k] = 0;
    if (!L->weight_norm) {
#pragma omp simd
        for (size_t k = (size_t)j0 * in; k < (size_t)j1 * in; k++) gW[k] += dW[k];
        return;
    }
    const nf_real *V = P->value + L->w, *g = P->value + L->g, *inv = ws + oi;
    nf_real *gg = P->grad + L->g;
    for (int j = j0; j < j1; j++) {
        const nf_real *v = V + (size_t)j * in, *d = dW + (size_t)j * in;
        nf_real *gv = gW + (size_t)j * in;
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)d[i] * v[i];
        nf_real sj = (nf_real)s * inv[j], cj = g[j] * inv[j], t = sj * inv[j];
        gg[j] += sj;
#pragma omp simd
        for (int i = 0; i < in; i++) gv[i] += cj * (d[i] - t * v[i]);
    }
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
void nf_linear_grad_params(const nf_linear *L, const nf_blocks *bk, nf_params *P, nf_real *ws, const nf_real *dy,
                           const nf_real *x, const nf_real *c, int nc, int n, int part, int parts)
{
    nf_linear_grad_params_simd(L, bk, P, ws, dy, x, c, nc, n, part, parts);
}

void nf_linear_backward_blocks(const nf_linear *L, const nf_blocks *bk, nf_params *P, nf_real *ws, nf_real *dx,
                               nf_real *dc, const nf_real *dy, const nf_real *x, const nf_real *c, int nc,
                               int accumulate, int n)
{
    nf_linear_grad_input(L, bk, P, ws, dx, dc, dy, nc, accumulate, n);
    nf_linear_grad_params(L, bk, P, ws, dy, x, c, nc, n, 0, 1);
}

void nf_linear_backward_cat(const nf_linear *L, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dc,
                            const nf_real *dy, const nf_real *x, const nf_real *c, int nc, int accumulate, int n)
{
    nf_linear_backward_blocks(L, NULL, P, ws, dx, dc, dy, x, c, nc, accumulate, n);
}

void nf_linear_backward(const nf_linear *L, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dy,
                        const nf_real *x, int n)
{
    nf_linear_backward_cat(L, P, ws, dx, NULL, dy, x, NULL, 0, 1, n);
}
