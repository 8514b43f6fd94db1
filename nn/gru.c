/* nn/gru.c - the GRU over ragged batches and its backpropagation through time (see gru.h).
 *
 * Workspace, for T steps in all (8 H T nf_reals):
 *     a   (T, 3H)  batch order (row offsets[b] + s is step s of sequence b): x W_ih^T, then the gates
 *                  [r | z | n] after forward, then their pre-activation gradients after backward
 *     g   (T, 3H)  step order: h W_hh^T, its n part then hn = W_hn h + b_hn (what backward reads),
 *                  then dL/d(h W_hh^T + b_hh) after backward
 *     hp  (T, H)   step order: the state each step reads
 *     dhp (T, H)   step order: dL/d(that state)
 * "Step order" lays out each group of sequences b0 .. b1 - 1 in rows offsets[b0] .. offsets[b1] - 1,
 * step 0 of its sequences that have one (ascending b), then step 1 of those that have one, and so
 * on: the sequences active at step s are a block of consecutive rows, so their hidden product is one
 * nf_gemm (M = active rows), and the rows of a sequence that stays active come first at step s + 1
 * in the same order.  Nothing is sorted: a scan of the group's lengths gives every row's place.
 *
 * Per group, steps ascend in forward and descend in backward, threads running groups side by side.
 * The bias gradients (db_ih = sum da, db_hh = sum dg) are summed by each group as its cells finish,
 * and dW_hh = sum_s dg_s^T hp_s by one product per step while its rows are in cache, into the
 * group's own accumulators (after the 8 H T above: 9H + 3H^2 per group, [db_ih | db_hh | dW_ih |
 * dW_hh]), added to the store in group order afterwards, so no two threads write one entry; so is
 * dW_ih = sum da x with one input (I = 1), whose input product x W_ih^T is then a row of x times
 * W_ih, formed by step_forward where the cell reads it (the point-process encoder: no T x 3H
 * product and no pass over it from memory).  With more inputs x W_ih^T is one product before the
 * steps, and dW_ih = da^T x and dx = da W_ih are products over all T rows after them.
 */
#include "nn/gru.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"
#include "core/simd.h"
#include "nn/nn_internal.h"

static int add_slice(nf_params *P, const char *name, const char *part, size_t size, size_t *off)
{
    char full[NF_PARAM_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s.%s", name, part);
    return nf_params_add(P, full, size, off);
}

int nf_gru_init(nf_gru *g, nf_params *P, const char *name, int in, int hidden, nf_gru_h0 h0, nf_rng *rng)
{
    if (in < 1 || hidden < 1)
        return nf_error(NF_EINVAL, "GRU '%s': sizes in=%d, hidden=%d; expected both >= 1", name, in, hidden);
    if ((int)h0 < NF_GRU_H0_ZERO || (int)h0 > NF_GRU_H0_CONTEXT)
        return nf_error(NF_EINVAL, "GRU '%s': initial state mode %d; expected zero (0), learned (1) or context (2)",
                        name, (int)h0);
    if (!rng) return nf_error(NF_EINVAL, "GRU '%s': no random number generator to initialise it", name);
    memset(g, 0, sizeof *g);
    g->in = in;
    g->hidden = hidden;
    g->h0_mode = h0;
    const size_t H3 = 3 * (size_t)hidden;
    NF_TRY(add_slice(P, name, "weight_ih", H3 * in, &g->w_ih));
    NF_TRY(add_slice(P, name, "weight_hh", H3 * hidden, &g->w_hh));
    NF_TRY(add_slice(P, name, "bias_ih", H3, &g->b_ih));
    NF_TRY(add_slice(P, name, "bias_hh", H3, &g->b_hh));
    if (h0 != NF_GRU_H0_ZERO) NF_TRY(add_slice(P, name, "h0", (size_t)hidden, &g->h0));
    const double k = 1.0 / sqrt((double)hidden);
    nf_rng_fill_uniform(rng, P->value + g->w_ih, H3 * in, -k, k);
    nf_rng_fill_uniform(rng, P->value + g->w_hh, H3 * hidden, -k, k);
    nf_rng_fill_uniform(rng, P->value + g->b_ih, H3, -k, k);
    nf_rng_fill_uniform(rng, P->value + g->b_hh, H3, -k, k);
    return NF_OK;
}

/* nf_reals of one group's accumulators: [db_ih (3H) | db_hh (3H) | dW_ih (3H, I = 1) | dW_hh (3H, H)] */
#define ACC_SIZE(H) (9 * (size_t)(H) + 3 * (size_t)(H) * (size_t)(H))

size_t nf_gru_workspace(const nf_gru *g, int64_t n_steps, int n_seq)
{
    (void)n_seq;
    return n_steps > 0 ? 8 * (size_t)g->hidden * (size_t)n_steps + NF_NN_MAX_THREADS * ACC_SIZE(g->hidden) : 0;
}

size_t nf_gru_step_workspace(const nf_gru *g, int n) { return n > 0 ? 6 * (size_t)g->hidden * (size_t)n : 0; }

/* The context of row 0 and the state the recurrence starts from; NULL is zero. */
static const nf_real *h0_context(const nf_gru *g, const nf_params *P)
{
    return g->h0_mode == NF_GRU_H0_ZERO ? NULL : P->value + g->h0;
}

static const nf_real *h0_state(const nf_gru *g, const nf_params *P)
{
    return g->h0_mode == NF_GRU_H0_LEARNED ? P->value + g->h0 : NULL;
}

/* dst (n) = src, or zero when src is NULL. */
static void copy_or_zero(nf_real *dst, const nf_real *src, int n)
{
    if (src) memcpy(dst, src, (size_t)n * sizeof *dst);
    else memset(dst, 0, (size_t)n * sizeof *dst);
}

void nf_gru_start(const nf_gru *g, const nf_params *P, nf_real *context, nf_real *state)
{
    const nf_real *c = h0_context(g, P), *s = h0_state(g, P);
    if (context) copy_or_zero(context, c, g->hidden);
    if (state) copy_or_zero(state, s, g->hidden);
}

/* ---------------------------------------------------------------- the cell */

/* The cell is inlined into each of the functions that loop over a step's rows, so that their AVX2
 * clones (core/simd.h) compute it with AVX2 too (GCC does not inline it by itself).  Not with clang
 * 14, which then fails to vectorise the cell's loops in the clones (and warns): it keeps one cell at
 * the baseline. */
#if defined(__GNUC__) && !defined(__clang__)
#define CELL_INLINE static inline __attribute__((always_inline))
#else
#define CELL_INLINE static inline
#endif

/* The gates' tanh and sigmoid in the build's precision.  The double build (the tests' reference) uses
 * libm.  The float build needs loops the compiler vectorises, and under GCC's default
 * -ftrapping-math a float comparison in a loop (a clamp, a select on the sign) stays a branch that
 * stops vectorisation; so the float versions compare nothing:
 *     tanh(v)    = sign(v) * -u / (2 + u),  u = e^{-2a} - 1,  a = min(|v|, 9)
 * (tanh(9) is 1 in float), with |v| and its clamp on the bit pattern (positive floats order as
 * integers), the sign copied back by copysign, and v - v added so that NaN (and +-inf) stay NaN;
 *     sigma(v)   = (1 + tanh(v / 2)) / 2.
 * e^x - 1 on [-18, 0]: x = k ln2 + r, |r| <= ln2 / 2, e^x - 1 = 2^k (e^r - 1) + (2^k - 1), e^r - 1 by
 * its Taylor polynomial to degree 8 (no cancellation near 0, where k = 0).  Errors are about one
 * float ulp (absolute 1.5e-7 at most, relative 1.6e-7 for |v| > 1e-3). */
#ifdef NF_DOUBLE
CELL_INLINE nf_real gate_tanh(nf_real v) { return tanh(v); }
CELL_INLINE nf_real gate_sigmoid(nf_real v) { return 1 / (1 + exp(-v)); }
#else
CELL_INLINE float expm1_neg(float x)
{
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    const int32_t bits = ((int32_t)k + 127) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float q = r * (1 / 40320.0f) + 1 / 5040.0f;
    q = r * q + 1 / 720.0f;
    q = r * q + 1 / 120.0f;
    q = r * q + 1 / 24.0f;
    q = r * q + 1 / 6.0f;
    q = r * q + 0.5f;
    q = r + r * r * q;
    return two_k * q + (two_k - 1);
}

CELL_INLINE float gate_tanh(float v)
{
    int32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits &= 0x7fffffff;
    bits = bits < 0x41100000 ? bits : 0x41100000; /* 9.0f */
    float a;
    memcpy(&a, &bits, sizeof a);
    const float u = expm1_neg(-2 * a);
    return copysignf(-u / (2 + u), v) + (v - v);
}

CELL_INLINE float gate_sigmoid(float v) { return 0.5f + 0.5f * gate_tanh(0.5f * v); }
#endif

/* One step of one sequence.  ar (3H): x W_ih^T on entry, [r | z | n] on return; gr (3H): h W_hh^T on
 * entry, its n part hn = W_hn h + b_hn on return; bi, bh: b_ih, b_hh; h (H) the state read, out (H)
 * the state written (may be h):
 *     r, z = sigma(ar_rz + bi_rz + gr_rz + bh_rz),   n = tanh(ar_n + bi_n + r * hn),   h' = n + z (h - n).
 * (The biases are added here rather than copied under the products: one pass less over the rows.) */
CELL_INLINE void cell_forward(int H, nf_real *ar, nf_real *gr, const nf_real *bi, const nf_real *bh, const nf_real *h,
                         nf_real *out)
{
#pragma omp simd
    for (int j = 0; j < 2 * H; j++) ar[j] = gate_sigmoid(ar[j] + bi[j] + gr[j] + bh[j]);
    const nf_real *r = ar, *z = ar + H;
    nf_real *n = ar + 2 * H, *hn = gr + 2 * H;
    bi += 2 * H, bh += 2 * H;
#pragma omp simd
    for (int j = 0; j < H; j++) {
        const nf_real hj = hn[j] + bh[j];
        const nf_real nj = gate_tanh(n[j] + bi[j] + r[j] * hj);
        hn[j] = hj;
        n[j] = nj;
        out[j] = nj + z[j] * (h[j] - nj);
    }
}

/* Its derivative, given d = dL/dh' (dout, plus carry = what later steps sent back to h', or NULL):
 *     dpre_n = d (1 - z) (1 - n^2),   dpre_z = d (h - n) z (1 - z),   dpre_r = dpre_n hn r (1 - r),
 *     dL/d(x W_ih^T + b_ih) = [dpre_r | dpre_z | dpre_n]          (written over ar)
 *     dL/d(h W_hh^T + b_hh) = [dpre_r | dpre_z | dpre_n * r]      (written over gr, after reading hn)
 *     dL/dh = d z + (that) W_hh                                   (dh = d z here; the product follows)
 */
CELL_INLINE void cell_backward(int H, nf_real *ar, nf_real *gr, const nf_real *h, const nf_real *dout,
                          const nf_real *carry, nf_real *dh)
{
    if (carry) { /* d, held in dh until the loop below replaces it */
#pragma omp simd
        for (int j = 0; j < H; j++) dh[j] = dout[j] + carry[j];
    } else {
        memcpy(dh, dout, (size_t)H * sizeof *dh);
    }
    nf_real *r = ar, *z = ar + H, *n = ar + 2 * H;
#pragma omp simd
    for (int j = 0; j < H; j++) {
        const nf_real d = dh[j], rj = r[j], zj = z[j], nj = n[j], hn = gr[2 * H + j];
        const nf_real dn = d * (1 - zj) * (1 - nj * nj);
        const nf_real dz = d * (h[j] - nj) * zj * (1 - zj);
        const nf_real dr = dn * hn * rj * (1 - rj);
        r[j] = dr, z[j] = dz, n[j] = dn;
        gr[j] = dr, gr[H + j] = dz, gr[2 * H + j] = dn * rj;
        dh[j] = d * zj;
    }
}

/* ---------------------------------------------------------------- groups */

/* Cut sequences 0..B-1 into G = clamp(B / group, 1, NF_NN_MAX_THREADS) contiguous groups, each
 * non-empty, cut where the steps before reach k T / G; cuts[0..G].  Depends on the batch only. */
static int cut_groups(const nf_gru *g, const int64_t *off, int B, int *cuts)
{
    const int per = g->group > 0 ? g->group : NF_GRU_GROUP;
    int G = B / per;
    G = G < 1 ? 1 : G > NF_NN_MAX_THREADS ? NF_NN_MAX_THREADS : G;
    const int64_t T = off[B];
    cuts[0] = 0;
    int b = 1;
    for (int k = 1; k < G; k++) {
        const int64_t target = T * k / G;
        if (b <= cuts[k - 1]) b = cuts[k - 1] + 1;
        while (b < B - (G - k) && off[b] < target) b++;
        cuts[k] = b;
    }
    cuts[G] = B;
    return G;
}

typedef struct gru_job {
    const nf_gru *g;
    const nf_params *P;
    nf_real *a, *gg, *hp, *dhp;
    nf_real *acc;               /* backward: each group's accumulators (ACC_SIZE) */
    const nf_real *x;           /* the input: forward (I = 1) forms x W_ih^T from it, backward dW_ih */
    nf_real *h;                 /* forward: the output */
    const nf_real *dh;          /* backward: its gradient */
    const int64_t *off;
    const int *cuts;
} gru_job;

#define LEN(off, b) ((off)[(b) + 1] - (off)[b])

/* Active sequences of [b0, b1) at step s. */
static int active(const int64_t *off, int b0, int b1, int64_t s)
{
    int m = 0;
    for (int b = b0; b < b1; b++) m += LEN(off, b) > s;
    return m;
}

/* The cells of step s of sequences [b0, b1), whose m rows of the step-order buffers start at row
 * start; the states of those with a step s + 1 go on into the next block, whose size is returned.
 * Marked for the AVX2 clone (core/simd.h): the cells are inlined into it. */
static NF_SIMD_CLONES int step_forward(const gru_job *J, int b0, int b1, int64_t s, int64_t start, int m)
{
    const nf_gru *g = J->g;
    const int H = g->hidden, H3 = 3 * H;
    const int64_t *off = J->off;
    const nf_real *bih = J->P->value + g->b_ih, *bhh = J->P->value + g->b_hh, *wih = J->P->value + g->w_ih;
    nf_real *gs = J->gg + (size_t)start * H3, *hps = J->hp + (size_t)start * H;
    nf_real *next = J->hp + (size_t)(start + m) * H;
    int i = 0, i2 = 0;
    for (int b = b0; b < b1; b++) {
        const int64_t L = LEN(off, b);
        if (L <= s) continue;
        nf_real *out = J->h + (size_t)(off[b] + b + s + 1) * H, *ar = J->a + (size_t)(off[b] + s) * H3;
        if (g->in == 1) { /* x W_ih^T of one input: the product's value, x w rounded once */
            const nf_real xv = J->x[off[b] + s];
#pragma omp simd
            for (int j = 0; j < H3; j++) ar[j] = xv * wih[j];
        }
        cell_forward(H, ar, gs + (size_t)i * H3, bih, bhh, hps + (size_t)i * H, out);
        if (L > s + 1) memcpy(next + (size_t)i2++ * H, out, (size_t)H * sizeof *out);
        i++;
    }
    return i2;
}

/* The same backward: cell_backward on step s of sequences [b0, b1) (rows from start), the state
 * after it receiving dh's row plus what step s + 1 sent back (dhp's next block, from end); each
 * row's gradients then go into the group's accumulators acc while they are in cache. */
static NF_SIMD_CLONES void step_backward(const gru_job *J, int b0, int b1, int64_t s, int64_t start, int64_t end,
                                         nf_real *acc)
{
    const int H = J->g->hidden, H3 = 3 * H, one_input = J->g->in == 1;
    const int64_t *off = J->off;
    nf_real *gs = J->gg + (size_t)start * H3, *dhps = J->dhp + (size_t)start * H;
    nf_real *dbi = acc, *dbh = acc + H3, *dwi = acc + 2 * H3;
    const nf_real *hps = J->hp + (size_t)start * H;
    int i = 0, i2 = 0;
    for (int b = b0; b < b1; b++) {
        const int64_t L = LEN(off, b);
        if (L <= s) continue;
        const nf_real *carry = L > s + 1 ? J->dhp + (size_t)(end + i2++) * H : NULL;
        nf_real *ar = J->a + (size_t)(off[b] + s) * H3, *gr = gs + (size_t)i * H3;
        cell_backward(H, ar, gr, hps + (size_t)i * H, J->dh + (size_t)(off[b] + b + s + 1) * H, carry,
                      dhps + (size_t)i * H);
#pragma omp simd
        for (int j = 0; j < H3; j++) dbi[j] += ar[j], dbh[j] += gr[j];
        if (one_input) {
            const nf_real xv = J->x[off[b] + s];
#pragma omp simd
            for (int j = 0; j < H3; j++) dwi[j] += ar[j] * xv;
        }
        i++;
    }
}

/* Forward of the sequences of group `part`: step s reads hp's block of the active sequences, writes
 * their gates into a (batch order), their states into h and, for those with a step s + 1, into
 * hp's next block. */
static void forward_part(void *arg, int part, int nparts)
{
    (void)nparts;
    const gru_job *J = arg;
    const nf_gru *g = J->g;
    const int H = g->hidden, H3 = 3 * H, b0 = J->cuts[part], b1 = J->cuts[part + 1];
    const int64_t *off = J->off;
    const nf_real *Whh = J->P->value + g->w_hh, *s0 = h0_state(g, J->P);
    int64_t start = off[b0];
    int m = 0;
    for (int b = b0; b < b1; b++) {
        if (LEN(off, b) == 0) continue;
        copy_or_zero(J->hp + (size_t)(start + m++) * H, s0, H);
    }
    for (int64_t s = 0; m > 0; s++) {
        nf_gemm(0, 1, m, H3, H, 1, J->hp + (size_t)start * H, H, Whh, H, 0, J->gg + (size_t)start * H3, H3);
        const int next = step_forward(J, b0, b1, s, start, m);
        start += m;
        m = next;
    }
}

/* Backward of group `part`, steps descending: the state after step s gets dh's row plus what step
 * s + 1 sent back (dhp's next block); dhp's block of step s receives dL/d(state read at step s). */
static void backward_part(void *arg, int part, int nparts)
{
    (void)nparts;
    const gru_job *J = arg;
    const nf_gru *g = J->g;
    const int H = g->hidden, H3 = 3 * H, b0 = J->cuts[part], b1 = J->cuts[part + 1];
    const int64_t *off = J->off;
    const nf_real *Whh = J->P->value + g->w_hh;
    int64_t smax = 0;
    for (int b = b0; b < b1; b++) smax = LEN(off, b) > smax ? LEN(off, b) : smax;
    int64_t end = off[b1]; /* the end of step s's block */
    nf_real *acc = J->acc + (size_t)part * ACC_SIZE(H);
    memset(acc, 0, ACC_SIZE(H) * sizeof *acc);
    for (int64_t s = smax - 1; s >= 0; s--) {
        const int m = active(off, b0, b1, s);
        const int64_t start = end - m;
        step_backward(J, b0, b1, s, start, end, acc);
        nf_gemm(0, 0, m, H, H3, 1, J->gg + (size_t)start * H3, H3, Whh, H, 1, J->dhp + (size_t)start * H, H);
        nf_gemm(1, 0, H3, H, m, 1, J->gg + (size_t)start * H3, H3, J->hp + (size_t)start * H, H, 1, acc + 9 * H, H);
        end = start;
    }
}

/* ---------------------------------------------------------------- the layer */

/* The cells of n independent rows (nf_gru_step). */
static NF_SIMD_CLONES void rows_forward(const nf_gru *g, const nf_params *P, nf_real *a, nf_real *gg, const nf_real *h,
                                        nf_real *h_new, int n)
{
    const int H = g->hidden, H3 = 3 * H;
    for (int i = 0; i < n; i++)
        cell_forward(H, a + (size_t)i * H3, gg + (size_t)i * H3, P->value + g->b_ih, P->value + g->b_hh,
                     h + (size_t)i * H, h_new + (size_t)i * H);
}

/* Threads for the groups: nf_nn_threads on the products' flops, at most one per group. */
static int group_threads(int B, int64_t T, int H, int G, double passes)
{
    const int t = nf_nn_threads(B, passes * 6.0 * (double)T * H * H);
    return t < G ? t : G;
}

/* Forward:
 *     a = x W_ih^T for all T steps (one product; with one input, row by row in step_forward), row
 *     offsets[b] + b of h = the context h0, then per group and step s: g_s = hp_s W_hh^T over the
 *     active rows, and the cell (cell_forward, which adds the biases).
 */
void nf_gru_forward(const nf_gru *g, const nf_params *P, nf_real *ws, nf_real *h, const nf_real *x,
                    const int64_t *offsets, int n_seq)
{
    const int H = g->hidden, H3 = 3 * H, I = g->in, B = n_seq;
    if (B <= 0) return;
    const int64_t T = offsets[B];
    const nf_real *c0 = h0_context(g, P);
    for (int b = 0; b < B; b++) copy_or_zero(h + (size_t)(offsets[b] + b) * H, c0, H);
    if (T <= 0) return;
    gru_job J = {.g = g, .P = P, .a = ws, .gg = ws + (size_t)T * H3, .hp = ws + (size_t)T * 2 * H3,
                 .dhp = ws + (size_t)T * (2 * H3 + H), .x = x, .h = h, .off = offsets};
    if (I > 1) nf_gemm(0, 1, (int)T, H3, I, 1, x, I, P->value + g->w_ih, I, 0, J.a, H3);
    int cuts[NF_NN_MAX_THREADS + 1];
    const int G = cut_groups(g, offsets, B, cuts);
    J.cuts = cuts;
    nf_threads_run(group_threads(B, T, H, G, 1), G, forward_part, &J);
}

/* Backward: the groups' steps in reverse (cell_backward, the rows into the group's sums of da and dg
 * (and da x with one input), then dhp_s += dg_s W_hh and the group's dW_hh += dg_s^T hp_s over the
 * active rows), the groups' sums into db_ih, db_hh, dW_hh (and dW_ih) in group order, then over all
 * T rows:
 *     dW_ih += da^T x (I > 1),  dx += da W_ih,
 * and dh0 += sum_b dL/d(row 0 of b) (+ dhp of b's first step when the recurrence starts from h0).
 */
void nf_gru_backward(const nf_gru *g, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dh,
                     const nf_real *x, const int64_t *offsets, int n_seq)
{
    const int H = g->hidden, H3 = 3 * H, I = g->in, B = n_seq;
    if (B <= 0) return;
    const int64_t T = offsets[B];
    nf_real *dh0 = g->h0_mode != NF_GRU_H0_ZERO ? P->grad + g->h0 : NULL;
    if (dh0)
        for (int b = 0; b < B; b++) {
            const nf_real *row = dh + (size_t)(offsets[b] + b) * H;
#pragma omp simd
            for (int j = 0; j < H; j++) dh0[j] += row[j];
        }
    if (T <= 0) return;
    gru_job J = {.g = g, .P = P, .a = ws, .gg = ws + (size_t)T * H3, .hp = ws + (size_t)T * 2 * H3,
                 .dhp = ws + (size_t)T * (2 * H3 + H), .acc = ws + (size_t)T * 8 * H, .x = x, .dh = dh,
                 .off = offsets};
    int cuts[NF_NN_MAX_THREADS + 1];
    const int G = cut_groups(g, offsets, B, cuts);
    J.cuts = cuts;
    nf_threads_run(group_threads(B, T, H, G, 2), G, backward_part, &J);

    if (g->h0_mode == NF_GRU_H0_LEARNED) /* each group's step-0 block: its sequences with a step, in order */
        for (int k = 0; k < G; k++) {
            const nf_real *row = J.dhp + (size_t)offsets[cuts[k]] * H;
            for (int b = cuts[k]; b < cuts[k + 1]; b++) {
                if (LEN(offsets, b) == 0) continue;
#pragma omp simd
                for (int j = 0; j < H; j++) dh0[j] += row[j];
                row += H;
            }
        }
    for (int k = 0; k < G; k++) {
        const nf_real *acc = J.acc + (size_t)k * ACC_SIZE(H);
        nf_real *dbi = P->grad + g->b_ih, *dbh = P->grad + g->b_hh, *dwi = P->grad + g->w_ih;
        nf_real *dwh = P->grad + g->w_hh;
        for (int j = 0; j < H3; j++) dbi[j] += acc[j], dbh[j] += acc[H3 + j];
        if (I == 1)
            for (int j = 0; j < H3; j++) dwi[j] += acc[2 * H3 + j];
        for (size_t j = 0; j < (size_t)H3 * H; j++) dwh[j] += acc[9 * H + j];
    }
    if (I > 1) nf_gemm(1, 0, H3, I, (int)T, 1, J.a, H3, x, I, 1, P->grad + g->w_ih, I);
    if (dx) nf_gemm(0, 0, (int)T, I, H3, 1, J.a, H3, P->value + g->w_ih, I, 1, dx, I);
}

/* One step for n rows: a = x W_ih^T, gg = h W_hh^T (ws: (n, 3H) each), then the cell. */
void nf_gru_step(const nf_gru *g, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                 const nf_real *x, int n)
{
    if (n <= 0) return;
    const int H = g->hidden, H3 = 3 * H, I = g->in;
    nf_real *a = ws, *gg = ws + (size_t)n * H3;
    nf_gemm(0, 1, n, H3, I, 1, x, I, P->value + g->w_ih, I, 0, a, H3);
    nf_gemm(0, 1, n, H3, H, 1, h, H, P->value + g->w_hh, H, 0, gg, H3);
    rows_forward(g, P, a, gg, h, h_new, n);
}
