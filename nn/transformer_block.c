/* nn/transformer_block.c - the pre-norm transformer block (nn/transformer.h):
 *     h = x + Attn(LN1(x)),   y = h + fc2(GELU(fc1(LN2(h)))).
 *
 * Forward cache (N = n*T rows):  a (N, d) = LN1(x) | c1 (N, 2) | attention cache | h (N, d) |
 *                                c2 (N, 2) | b (N, d) = LN2(h) | m (N, r d) = fc1(b), which the GELU
 *                                overwrites with GELU'(m) for backward | g (N, r d) = GELU(m)
 * Scratch:                       dh (N, d) | db, later da (N, d) | dm (N, r d), later the attention's
 *                                scratch (the MLP's gradient is spent before attention backward starts);
 *                                forward lends all of it to the attention
 */
#include <stdio.h>
#include <string.h>

#include "nn/transformer.h"

#include "core/blas.h"
#include "core/simd.h"
#include "nn/nn_internal.h"

/* y += x (n entries), in the vector clones. */
NF_SIMD_CLONES static void add_simd(nf_real *y, const nf_real *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void nf_nn_add(nf_real *y, const nf_real *x, size_t n) { add_simd(y, x, n); }

/* The residual sums y += x (n entries), split over the pool when large (each entry's sum the same
 * whichever range adds it). */
typedef struct add_job {
    nf_real *y;
    const nf_real *x;
} add_job;

static void add_range(void *arg, size_t i0, size_t i1)
{
    const add_job *j = arg;
    add_simd(j->y + i0, j->x + i0, i1 - i0);
}

static void add_into(nf_real *y, const nf_real *x, size_t n)
{
    add_job j = {y, x};
    nf_nn_ranges(n, 16, n, add_range, &j);
}

int nf_tblock_init(nf_tblock *B, nf_params *P, const char *name, int d, int heads, int mlp_ratio, int qk_norm,
                   nf_rng *rng)
{
    char full[NF_PARAM_NAME_MAX + 32];
    if (mlp_ratio < 1) return nf_error(NF_EINVAL, "transformer block '%s': mlp_ratio=%d; expected >= 1", name, mlp_ratio);
    memset(B, 0, sizeof *B);
    B->d = d;
    B->hidden = mlp_ratio * d;
    snprintf(full, sizeof full, "%s.ln1", name);
    NF_TRY(nf_layernorm_init(&B->ln1, P, full, d));
    snprintf(full, sizeof full, "%s.attn", name);
    NF_TRY(nf_attention_init(&B->attn, P, full, d, heads, qk_norm, rng));
    snprintf(full, sizeof full, "%s.ln2", name);
    NF_TRY(nf_layernorm_init(&B->ln2, P, full, d));
    snprintf(full, sizeof full, "%s.fc1", name);
    NF_TRY(nf_linear_init(&B->fc1, P, full, d, B->hidden, 0, NULL, rng));
    snprintf(full, sizeof full, "%s.fc2", name);
    NF_TRY(nf_linear_init(&B->fc2, P, full, B->hidden, d, 0, NULL, rng));
    return NF_OK;
}

size_t nf_tblock_workspace(const nf_tblock *B, int n, int T)
{
    const size_t N = (size_t)n * T;
    return N * (3 * (size_t)B->d + 4 + 2 * (size_t)B->hidden) + nf_attention_workspace(&B->attn, n, T);
}

size_t nf_tblock_scratch(const nf_tblock *B, int n, int T)
{
    const size_t N = (size_t)n * T, mlp = N * B->hidden, att = nf_attention_scratch(&B->attn, n, T);
    return N * 2 * B->d + (mlp > att ? mlp : att);
}

typedef struct bviews {
    nf_real *a, *c1, *att, *h, *c2, *b, *m, *g;
} bviews;

static bviews block_views(const nf_tblock *B, const nf_real *ws, int n, int T)
{
    const size_t N = (size_t)n * T, d = (size_t)B->d;
    bviews v;
    nf_real *p = (nf_real *)ws;
    v.a = p, p += N * d;
    v.c1 = p, p += N * 2;
    v.att = p, p += nf_attention_workspace(&B->attn, n, T);
    v.h = p, p += N * d;
    v.c2 = p, p += N * 2;
    v.b = p, p += N * d;
    v.m = p, p += N * B->hidden;
    v.g = p;
    return v;
}

/* a = LN1(x), h = x + Attn(a), b = LN2(h), m = b W1^T + b1, g = GELU(m), y = h + g W2^T + b2. */
void nf_tblock_forward(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *scratch, nf_real *y,
                       const nf_real *x, int n, int T)
{
    if (n <= 0 || T <= 0) return;
    const int N = n * T;
    const size_t Nd = (size_t)N * B->d;
    bviews v = block_views(B, ws, n, T);
    nf_layernorm_forward(&B->ln1, P, v.a, v.c1, x, N);
    nf_attention_forward(&B->attn, P, v.att, scratch, v.h, v.a, n, T);
    add_into(v.h, x, Nd);
    nf_layernorm_forward(&B->ln2, P, v.b, v.c2, v.h, N);
    nf_linear_forward(&B->fc1, P, NULL, v.m, v.b, N);
    nf_act_gelu_forward_grad(v.g, v.m, (size_t)N * B->hidden); /* v.m now holds GELU'(m) */
    nf_linear_forward_res(&B->fc2, P, NULL, y, v.h, v.g, N);
}

/* Reverse of forward, dy = dL/dy:
 *   dh = dy + LN2'(dm W1),  dm = (dy W2) GELU'(m)   (fc1, fc2, LN2 parameter gradients on the way)
 *   dx = dh + LN1'(Attn'(dh)), added to dx or written over it. */
static void tblock_backward(const nf_tblock *B, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                            int accumulate, const nf_real *dy, const nf_real *x, int n, int T)
{
    if (n <= 0 || T <= 0) return;
    const int N = n * T;
    const size_t Nd = (size_t)N * B->d, Nh = (size_t)N * B->hidden;
    bviews v = block_views(B, ws, n, T);
    nf_real *dh = scratch, *db = dh + Nd, *dm = db + Nd, *att_sc = dm;
    nf_linear_backward_cat(&B->fc2, P, NULL, dm, NULL, dy, v.g, NULL, 0, 0, N);
    nf_act_grad_apply(dm, dm, v.m, Nh); /* dm = (dy W2) GELU'(m), the derivative kept by forward */
    nf_linear_backward_cat(&B->fc1, P, NULL, db, NULL, dm, v.b, NULL, 0, 0, N);
    nf_layernorm_backward_onto(&B->ln2, P, dh, dy, db, v.h, v.c2, N); /* dh = dy + LN2'(db) */
    nf_real *da = db;
    nf_attention_backward_set(&B->attn, P, v.att, att_sc, da, dh, v.a, n, T);
    if (!dx) {
        nf_layernorm_backward(&B->ln1, P, NULL, da, x, v.c1, N);
    } else if (accumulate) {
        nf_layernorm_backward(&B->ln1, P, dx, da, x, v.c1, N);
        add_into(dx, dh, Nd);
    } else {
        nf_layernorm_backward_onto(&B->ln1, P, dx, dh, da, x, v.c1, N); /* dh + LN1', as (0 + LN1') + dh */
    }
}

void nf_tblock_backward(const nf_tblock *B, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                        const nf_real *dy, const nf_real *x, int n, int T)
{
    tblock_backward(B, P, ws, scratch, dx, 1, dy, x, n, T);
}

void nf_tblock_backward_set(const nf_tblock *B, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                            const nf_real *dy, const nf_real *x, int n, int T)
{
    tblock_backward(B, P, ws, scratch, dx, 0, dy, x, n, T);
}

size_t nf_tblock_step_workspace(const nf_tblock *B, int n, int Tmax)
{
    return nf_tblock_block_workspace(B, n, 1, Tmax);
}

size_t nf_tblock_block_workspace(const nf_tblock *B, int n, int m, int Tmax)
{
    const size_t N = (size_t)n * m;
    return N * (3 * (size_t)B->d + 4 + (size_t)B->hidden) + nf_attention_block_workspace(&B->attn, n, m, Tmax);
}

int nf_tblock_step(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                   const nf_real *x, int t, int n)
{
    return nf_tblock_block(B, P, ws, kv, Tmax, y, x, t, 1, n);
}

/* The forward's formulas on m tokens per sequence (n m rows), attention through the cache. */
int nf_tblock_block(const nf_tblock *B, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                    const nf_real *x, int t0, int m, int n)
{
    if (n <= 0) return NF_OK;
    const int N = n * m;
    const size_t nd = (size_t)N * B->d;
    nf_real *a = ws, *h = a + nd, *b = h + nd, *c = b + nd, *u = c + (size_t)N * 4, *aws = u + (size_t)N * B->hidden;
    nf_layernorm_forward(&B->ln1, P, a, c, x, N);
    NF_TRY(nf_attention_block(&B->attn, P, aws, kv, Tmax, h, a, t0, m, n));
    add_into(h, x, nd);
    nf_layernorm_forward(&B->ln2, P, b, c + 2 * (size_t)N, h, N);
    nf_linear_forward(&B->fc1, P, NULL, u, b, N);
    nf_act_forward(NF_ACT_GELU, u, u, (size_t)N * B->hidden);
    nf_linear_forward_res(&B->fc2, P, NULL, y, h, u, N);
    return NF_OK;
}
