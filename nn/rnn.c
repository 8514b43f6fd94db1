/* nn/rnn.c - the tanh RNN over ragged batches and its backpropagation through time (see rnn.h).
 *
 * Workspace, for T steps in all (4 H T nf_reals):
 *     a   (T, H)  batch order (row offsets[b] + s is step s of sequence b): x W_ih^T, then the new
 *                 state y = tanh(.) after forward, then dL/d(pre-activation) after backward
 *     g   (T, H)  step order: h W_hh^T, then dL/d(pre-activation) after backward
 *     hp  (T, H)  step order: the state each step reads
 *     dhp (T, H)  step order: dL/d(that state)
 * "Step order" puts step 0 of every sequence that has one (ascending b) first, then step 1 of those
 * that have one, and so on, as the GRU does for one group: the sequences active at step s are a
 * block of consecutive rows, so their hidden product is one nf_gemm.
 */
#include "nn/rnn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"

static int add_slice(nf_params *P, const char *name, const char *part, size_t size, size_t *off)
{
    char full[NF_PARAM_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s.%s", name, part);
    return nf_params_add(P, full, size, off);
}

int nf_rnn_init(nf_rnn *r, nf_params *P, const char *name, int in, int hidden, nf_gru_h0 h0, nf_rng *rng)
{
    if (in < 1 || hidden < 1)
        return nf_error(NF_EINVAL, "RNN '%s': sizes in=%d, hidden=%d; expected both >= 1", name, in, hidden);
    if ((int)h0 < NF_GRU_H0_ZERO || (int)h0 > NF_GRU_H0_CONTEXT)
        return nf_error(NF_EINVAL, "RNN '%s': initial state mode %d; expected zero (0), learned (1) or context (2)",
                        name, (int)h0);
    if (!rng) return nf_error(NF_EINVAL, "RNN '%s': no random number generator to initialise it", name);
    memset(r, 0, sizeof *r);
    r->in = in;
    r->hidden = hidden;
    r->h0_mode = h0;
    const size_t H = (size_t)hidden;
    NF_TRY(add_slice(P, name, "weight_ih", H * in, &r->w_ih));
    NF_TRY(add_slice(P, name, "weight_hh", H * H, &r->w_hh));
    NF_TRY(add_slice(P, name, "bias_ih", H, &r->b_ih));
    NF_TRY(add_slice(P, name, "bias_hh", H, &r->b_hh));
    if (h0 != NF_GRU_H0_ZERO) NF_TRY(add_slice(P, name, "h0", H, &r->h0));
    const double k = 1.0 / sqrt((double)hidden);
    nf_rng_fill_uniform(rng, P->value + r->w_ih, H * in, -k, k);
    nf_rng_fill_uniform(rng, P->value + r->w_hh, H * H, -k, k);
    nf_rng_fill_uniform(rng, P->value + r->b_ih, H, -k, k);
    nf_rng_fill_uniform(rng, P->value + r->b_hh, H, -k, k);
    return NF_OK;
}

size_t nf_rnn_workspace(const nf_rnn *r, int64_t n_steps, int n_seq)
{
    (void)n_seq;
    return n_steps > 0 ? 4 * (size_t)r->hidden * (size_t)n_steps : 0;
}

size_t nf_rnn_step_workspace(const nf_rnn *r, int n) { return n > 0 ? 2 * (size_t)r->hidden * (size_t)n : 0; }

static void copy_or_zero(nf_real *dst, const nf_real *src, int n)
{
    if (src) memcpy(dst, src, (size_t)n * sizeof *dst);
    else memset(dst, 0, (size_t)n * sizeof *dst);
}

static const nf_real *h0_context(const nf_rnn *r, const nf_params *P)
{
    return r->h0_mode == NF_GRU_H0_ZERO ? NULL : P->value + r->h0;
}

static const nf_real *h0_state(const nf_rnn *r, const nf_params *P)
{
    return r->h0_mode == NF_GRU_H0_LEARNED ? P->value + r->h0 : NULL;
}

void nf_rnn_start(const nf_rnn *r, const nf_params *P, nf_real *context, nf_real *state)
{
    if (context) copy_or_zero(context, h0_context(r, P), r->hidden);
    if (state) copy_or_zero(state, h0_state(r, P), r->hidden);
}

#ifdef NF_DOUBLE
#define TANH tanh
#else
#define TANH tanhf
#endif

/* out = y = tanh(a + b_ih + g + b_hh), also written over a (backward reads 1 - y^2). */
static void cell_forward(int H, nf_real *a, const nf_real *g, const nf_real *bi, const nf_real *bh, nf_real *out)
{
    for (int j = 0; j < H; j++) {
        const nf_real y = TANH(a[j] + bi[j] + g[j] + bh[j]);
        a[j] = y;
        out[j] = y;
    }
}

#define LEN(off, b) ((off)[(b) + 1] - (off)[b])

/* Forward:
 *     a = x W_ih^T (one product for all T steps); row offsets[b] + b of h = the context h0; then per
 *     step s over the m active sequences: g_s = hp_s W_hh^T, y = tanh(a + b_ih + g_s + b_hh).
 */
void nf_rnn_forward(const nf_rnn *r, const nf_params *P, nf_real *ws, nf_real *h, const nf_real *x,
                    const int64_t *off, int B)
{
    const int H = r->hidden, I = r->in;
    if (B <= 0) return;
    const int64_t T = off[B];
    const nf_real *c0 = h0_context(r, P), *s0 = h0_state(r, P);
    for (int b = 0; b < B; b++) copy_or_zero(h + (size_t)(off[b] + b) * H, c0, H);
    if (T <= 0) return;
    nf_real *a = ws, *g = ws + (size_t)T * H, *hp = ws + (size_t)2 * T * H;
    const nf_real *Whh = P->value + r->w_hh, *bi = P->value + r->b_ih, *bh = P->value + r->b_hh;
    nf_gemm(0, 1, (int)T, H, I, 1, x, I, P->value + r->w_ih, I, 0, a, H);
    int64_t start = 0;
    int m = 0;
    for (int b = 0; b < B; b++)
        if (LEN(off, b) > 0) copy_or_zero(hp + (size_t)m++ * H, s0, H);
    for (int64_t s = 0; m > 0; s++) {
        nf_gemm(0, 1, m, H, H, 1, hp + (size_t)start * H, H, Whh, H, 0, g + (size_t)start * H, H);
        nf_real *next = hp + (size_t)(start + m) * H;
        int i = 0, i2 = 0;
        for (int b = 0; b < B; b++) {
            const int64_t L = LEN(off, b);
            if (L <= s) continue;
            nf_real *out = h + (size_t)(off[b] + b + s + 1) * H;
            cell_forward(H, a + (size_t)(off[b] + s) * H, g + (size_t)(start + i) * H, bi, bh, out);
            if (L > s + 1) memcpy(next + (size_t)i2++ * H, out, (size_t)H * sizeof *out);
            i++;
        }
        start += m;
        m = i2;
    }
}

/* Backward, steps descending: the state after step s of sequence b receives d = dh's row plus what
 * step s + 1 sent back (dhp), and
 *     dpre = d (1 - y^2),   dL/d(state read) = dpre W_hh     (dhp of step s, one product),
 * then over all T rows:  db_ih += sum dpre,  db_hh += sum dpre,  dW_ih += dpre^T x,
 * dx += dpre W_ih,  dW_hh += dpre^T hp;  dh0 += sum_b dL/d(row 0 of b) (+ dhp of b's first step when
 * the recurrence starts from h0).
 */
void nf_rnn_backward(const nf_rnn *r, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dh,
                     const nf_real *x, const int64_t *off, int B)
{
    const int H = r->hidden, I = r->in;
    if (B <= 0) return;
    const int64_t T = off[B];
    nf_real *dh0 = r->h0_mode != NF_GRU_H0_ZERO ? P->grad + r->h0 : NULL;
    if (dh0)
        for (int b = 0; b < B; b++) {
            const nf_real *row = dh + (size_t)(off[b] + b) * H;
            for (int j = 0; j < H; j++) dh0[j] += row[j];
        }
    if (T <= 0) return;
    nf_real *a = ws, *g = ws + (size_t)T * H, *hp = ws + (size_t)2 * T * H, *dhp = ws + (size_t)3 * T * H;
    const nf_real *Whh = P->value + r->w_hh;
    int64_t smax = 0;
    for (int b = 0; b < B; b++) smax = LEN(off, b) > smax ? LEN(off, b) : smax;
    int64_t end = T; /* the end of step s's block */
    for (int64_t s = smax - 1; s >= 0; s--) {
        int m = 0;
        for (int b = 0; b < B; b++) m += LEN(off, b) > s;
        const int64_t start = end - m;
        int i = 0, i2 = 0;
        for (int b = 0; b < B; b++) {
            const int64_t L = LEN(off, b);
            if (L <= s) continue;
            const nf_real *d = dh + (size_t)(off[b] + b + s + 1) * H;
            const nf_real *carry = L > s + 1 ? dhp + (size_t)(end + i2++) * H : NULL;
            nf_real *ab = a + (size_t)(off[b] + s) * H, *gs = g + (size_t)(start + i) * H;
            for (int j = 0; j < H; j++) {
                const nf_real y = ab[j], dj = d[j] + (carry ? carry[j] : 0);
                const nf_real dp = dj * (1 - y * y);
                ab[j] = dp;
                gs[j] = dp;
            }
            i++;
        }
        nf_gemm(0, 0, m, H, H, 1, g + (size_t)start * H, H, Whh, H, 0, dhp + (size_t)start * H, H);
        end = start;
    }
    if (r->h0_mode == NF_GRU_H0_LEARNED) { /* step 0's block: every sequence with a step, in order */
        int m0 = 0;
        for (int b = 0; b < B; b++) m0 += LEN(off, b) > 0;
        for (int i = 0; i < m0; i++)
            for (int j = 0; j < H; j++) dh0[j] += dhp[(size_t)i * H + j];
    }
    nf_real *gbi = P->grad + r->b_ih, *gbh = P->grad + r->b_hh;
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < H; j++) {
            gbi[j] += a[(size_t)t * H + j];
            gbh[j] += a[(size_t)t * H + j];
        }
    nf_gemm(1, 0, H, I, (int)T, 1, a, H, x, I, 1, P->grad + r->w_ih, I);
    if (dx) nf_gemm(0, 0, (int)T, I, H, 1, a, H, P->value + r->w_ih, I, 1, dx, I);
    nf_gemm(1, 0, H, H, (int)T, 1, g, H, hp, H, 1, P->grad + r->w_hh, H);
}

/* One step for n rows: a = x W_ih^T, g = h W_hh^T (ws: (n, H) each), then the cell. */
void nf_rnn_step(const nf_rnn *r, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                 const nf_real *x, int n)
{
    if (n <= 0) return;
    const int H = r->hidden, I = r->in;
    nf_real *a = ws, *g = ws + (size_t)n * H;
    nf_gemm(0, 1, n, H, I, 1, x, I, P->value + r->w_ih, I, 0, a, H);
    nf_gemm(0, 1, n, H, H, 1, h, H, P->value + r->w_hh, H, 0, g, H);
    for (int i = 0; i < n; i++)
        cell_forward(H, a + (size_t)i * H, g + (size_t)i * H, P->value + r->b_ih, P->value + r->b_hh,
                     h_new + (size_t)i * H);
}
