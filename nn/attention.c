/* nn/attention.c - causal multi-head self-attention (nn/attention.h): forward, backward, decoding step.
 *
 * Forward cache (N = n*T rows):  qkv (N, 3d) | [qk_norm: qk (N, 2d) normalised q|k, rstd (N, 2H)] |
 *                                stat (n, H, T, 2) each row's softmax max and 1/sum | o (N, d) heads |
 *                                [short pairs: probs (n, H, T, T), each pair's P]
 * Scratch (forward and backward): do (N, d) | dqkv (N, 3d) | [qk_norm: dqk (N, 2d)] |
 *                                tiles (NF_NN_MAX_THREADS, 2, T, T): P and dS of the pair a part runs |
 *                                [qk_norm: gains (n H, 2, dh), each pair's sums for the gains' gradients]
 * The (T, T) probabilities of long pairs are not kept: forward computes them a pair at a time in its
 * part's tile, backward computes them again from q, k and the row statistics, with the same
 * operations, so they are the same bits (one more q k^T product instead of n H T^2 reals per layer in
 * the cache).  Short pairs (short_pair: T <= 64) keep them: at most 16 KB a pair, and their backward
 * then skips a third of its scores, the softmax again and K's transpose (about 4% of a TarFlow step).
 * Each (sequence, head) pair works on strided views: q, k with row stride 3d (2d when normalised),
 * v with 3d, o with d.  Rows are taken in blocks of ATTN_BLOCK and every product stops at the block's
 * diagonal, so about half of the masked triangle is never computed; entries above the diagonal inside
 * a diagonal block are stored as zeros, which is what the later products read there.
 */
/* The softmax loops are arithmetic meant to become SIMD code: see flows/rqspline.c on -ftrapping-math. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "nn/attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/blas.h"
#include "core/simd.h"
#include "core/threads.h"
#include "nn/nn_internal.h"
#include "nn/attention_avx512.h"
/* header-only fast exp (the float build's softmax), the one the flows' kernels use */
#include "flows/fastmath.h"

#define ATTN_BLOCK 64
#define QK_EPS 1e-6

#ifdef NF_DOUBLE
#define EXP exp
#define SQRT sqrt
#else
#define EXP nf_fast_expf
#define SQRT sqrtf
#endif

int nf_attention_init(nf_attention *A, nf_params *P, const char *name, int d, int heads, int qk_norm,
                      nf_rng *rng)
{
    char full[NF_PARAM_NAME_MAX + 32];
    if (d < 1 || heads < 1 || d % heads != 0)
        return nf_error(NF_EINVAL, "attention '%s': width d=%d, heads=%d; expected heads >= 1 dividing d >= 1", name,
                        d, heads);
    if (qk_norm != NF_QK_NONE && qk_norm != NF_QK_RMS)
        return nf_error(NF_EINVAL, "attention '%s': qk_norm=%d; expected 0 (none) or 1 (RMS)", name, qk_norm);
    memset(A, 0, sizeof *A);
    A->d = d;
    A->heads = heads;
    A->dh = d / heads;
    A->qk_norm = qk_norm;
    A->win_group = 1, A->win_back = -1;
    snprintf(full, sizeof full, "%s.qkv", name);
    NF_TRY(nf_linear_init(&A->qkv, P, full, d, 3 * d, 0, NULL, rng));
    snprintf(full, sizeof full, "%s.out", name);
    NF_TRY(nf_linear_init(&A->out, P, full, d, d, 0, NULL, rng));
    if (qk_norm) {
        snprintf(full, sizeof full, "%s.q_gain", name);
        NF_TRY(nf_params_add(P, full, (size_t)A->dh, &A->q_gain));
        snprintf(full, sizeof full, "%s.k_gain", name);
        NF_TRY(nf_params_add(P, full, (size_t)A->dh, &A->k_gain));
        for (int i = 0; i < A->dh; i++) P->value[A->q_gain + i] = P->value[A->k_gain + i] = 1;
    }
    return NF_OK;
}

int nf_attention_set_window(nf_attention *A, int group, int back)
{
    if (group < 1) return nf_error(NF_EINVAL, "attention window: groups of %d tokens; expected at least 1", group);
    A->win_group = group, A->win_back = back < 0 ? -1 : back;
    return NF_OK;
}

/* The first key row i sees, lo(i) (nf_attention_set_window; 0 without a window). */
static int key_lo(const nf_attention *A, int i)
{
    if (A->win_back < 0) return 0;
    const long lo = ((long)(i / A->win_group) - A->win_back) * A->win_group;
    return lo > 0 ? (int)lo : 0;
}

/* The last row that sees key c: lo(i) <= c  <=>  i div group <= c div group + back. */
static int key_last_row(const nf_attention *A, int c, int T)
{
    if (A->win_back < 0) return T - 1;
    const long r = ((long)(c / A->win_group) + A->win_back + 1) * A->win_group - 1;
    return r < T - 1 ? (int)r : T - 1;
}

/* Zeros in row i of a tile left of its window: from where the column products start reading it
 * (its first key's column block, or the row block's first column c0 if that is earlier) to lo. */
static void zero_left_of_window(nf_real *row, int c0, int lo)
{
    const int block = lo / ATTN_BLOCK * ATTN_BLOCK, from = block < c0 ? block : c0;
    for (int c = from; c < lo; c++) row[c] = 0;
}

static int avx512_usable(void);

/* A short pair on nn/attention_avx512.c's row kernels: dh 16, one row block of whole vectors
 * (T <= ATTN_BLOCK, a multiple of 16), no window; the float build on an AVX-512 CPU.  Its P is kept
 * in the forward cache. */
static int short_pair(const nf_attention *A, int T)
{
#ifdef NF_DOUBLE
    (void)A, (void)T;
    return 0;
#else
    return A->dh == 16 && T % 16 == 0 && T <= ATTN_BLOCK && A->win_back < 0 && avx512_usable();
#endif
}

size_t nf_attention_workspace(const nf_attention *A, int n, int T)
{
    const size_t N = (size_t)n * T, d = (size_t)A->d;
    size_t s = N * 3 * d + N * 2 * A->heads + N * d;
    if (A->qk_norm) s += N * 2 * d + N * 2 * A->heads;
    if (short_pair(A, T)) s += N * A->heads * T;
    return s;
}

size_t nf_attention_scratch(const nf_attention *A, int n, int T)
{
    const size_t N = (size_t)n * T, d = (size_t)A->d;
    size_t s = N * d + N * 3 * d + (size_t)NF_NN_MAX_THREADS * 2 * T * T;
    if (A->qk_norm) s += N * 2 * d + (size_t)n * 2 * d; /* dqk, and each pair's gain sums */
    return s;
}

/* Pointers into the forward cache and the strides of the q, k views. */
typedef struct views {
    nf_real *qkv, *qk, *rstd, *stat, *o, *probs; /* probs: short pairs' P (else NULL) */
    const nf_real *q, *k, *v;
    int ldq, ldk, ldv;
} views;

static views cache_views(const nf_attention *A, const nf_real *ws, int n, int T)
{
    const size_t N = (size_t)n * T, d = (size_t)A->d;
    views w;
    nf_real *p = (nf_real *)ws;
    w.qkv = p, p += N * 3 * d;
    w.qk = w.rstd = NULL;
    if (A->qk_norm) w.qk = p, p += N * 2 * d, w.rstd = p, p += N * 2 * A->heads;
    w.stat = p, p += N * 2 * A->heads;
    w.o = p, p += N * d;
    w.probs = short_pair(A, T) ? p : NULL;
    w.v = w.qkv + 2 * d, w.ldv = 3 * A->d;
    if (A->qk_norm)
        w.q = w.qk, w.k = w.qk + d, w.ldq = w.ldk = 2 * A->d;
    else
        w.q = w.qkv, w.k = w.qkv + d, w.ldq = w.ldk = 3 * A->d;
    return w;
}

enum { LANES = 16 };

/* RMS norm of one head's row: r = 1/sqrt(mean(u^2) + eps), out = g * u * r (out may be u); returns
 * r.  All in the build's precision; the sums in NF_LANE_SUM's order (nn/attention_avx512.c's). */
static inline nf_real rms_row(nf_real *out, const nf_real *u, const nf_real *g, int dh)
{
    nf_real lane[NF_LANES] = {0};
    NF_LANE_SUM(lane, dh, u[i] * u[i]);
    const nf_real r = 1 / SQRT(nf_lane_tree(lane) / (nf_real)dh + (nf_real)QK_EPS);
    for (int i = 0; i < dh; i++) out[i] = g[i] * u[i] * r;
    return r;
}

/* RMS norm backward of one head's row, u the raw row, r its 1/rms, xhat = u r, out = g xhat:
 *   du = r (g dout - xhat mean(g dout xhat))   (written);  the gains' dg += dout xhat is summed by
 * the callers (nf_attention_rms_rows_backward), in row order. */
static inline void rms_row_backward(nf_real *du, const nf_real *dout, const nf_real *u, nf_real r, const nf_real *g,
                                    int dh)
{
    nf_real lane[NF_LANES] = {0};
    NF_LANE_SUM(lane, dh, g[i] * dout[i] * u[i] * r);
    const nf_real m = nf_lane_tree(lane) / (nf_real)dh;
    for (int i = 0; i < dh; i++) du[i] = r * (g[i] * dout[i] - u[i] * r * m);
}

/* Can nn/attention_avx512.c's kernels run here (the float build, a CPU with AVX-512)?  They are
 * float code: the double build always takes the portable code. */
static int avx512_usable(void)
{
#ifdef NF_DOUBLE
    return 0;
#else
    return nf_rms16_compiled() && nf_cpu_avx512();
#endif
}
#ifndef NF_DOUBLE
static int rms16_usable(int dh) { return dh % 16 == 0 && avx512_usable(); }
#endif

NF_SIMD_CLONES static void rms_rows_simd(nf_real *out, size_t ldo, nf_real *rstd, size_t ldr, const nf_real *u,
                                         size_t ldu, const nf_real *g, int rows, int dh, int vector)
{
    int r = 0;
#ifdef NF_DOUBLE
    (void)vector;
#else
    if (vector && rms16_usable(dh)) {
        nf_real spare[16];
        for (; r + 16 <= rows; r += 16)
            nf_rms16_forward(out + r * ldo, ldo, rstd ? rstd + r * ldr : spare, rstd ? ldr : 1, u + r * ldu, ldu, g,
                             dh, (nf_real)QK_EPS);
    }
#endif
    for (; r < rows; r++) {
        const nf_real rs = rms_row(out + r * ldo, u + r * ldu, g, dh);
        if (rstd) rstd[r * ldr] = rs;
    }
}

NF_SIMD_CLONES static void rms_rows_backward_simd(nf_real *du, size_t lddu, const nf_real *dy, size_t lddy,
                                                  const nf_real *u, size_t ldu, const nf_real *rstd, size_t ldr,
                                                  const nf_real *g, int rows, int dh, int vector, nf_real *dg)
{
    int r = 0;
#ifdef NF_DOUBLE
    (void)vector;
#else
    if (vector && rms16_usable(dh))
        for (; r + 16 <= rows; r += 16)
            nf_rms16_backward(du + r * lddu, lddu, dy + r * lddy, lddy, u + r * ldu, ldu, rstd + r * ldr, ldr, g, dh,
                              dg);
#endif
    for (; r < rows; r++) {
        const nf_real *dyr = dy + r * lddy, *ur = u + r * ldu, rs = rstd[r * ldr];
        rms_row_backward(du + r * lddu, dyr, ur, rs, g, dh);
        if (dg)
#pragma omp simd
            for (int i = 0; i < dh; i++) dg[i] += dyr[i] * ur[i] * rs;
    }
}

/* The exported names call the clones (a multiversioned function must be static for clang). */
void nf_attention_rms_rows(nf_real *out, size_t ldo, nf_real *rstd, size_t ldr, const nf_real *u, size_t ldu,
                           const nf_real *g, int rows, int dh, int vector)
{
    rms_rows_simd(out, ldo, rstd, ldr, u, ldu, g, rows, dh, vector);
}

void nf_attention_rms_rows_backward(nf_real *du, size_t lddu, const nf_real *dy, size_t lddy, const nf_real *u,
                                    size_t ldu, const nf_real *rstd, size_t ldr, const nf_real *g, int rows, int dh,
                                    int vector, nf_real *dg)
{
    rms_rows_backward_simd(du, lddu, dy, lddy, u, ldu, rstd, ldr, g, rows, dh, vector, dg);
}

/* The QK norm of rows r0..r1-1, all heads: q and k of qkv (ld 3d) into qk (ld 2d), their 1/rms
 * into rstd (2H per row: q's heads, then k's).  Sixteen rows at a time, every head of them before
 * the next sixteen: the rows' q|k (2d of each 3d) are read in the order they lie, where a pass per
 * (sequence, head) pair read one cache line of each row per head. */
static void qk_norm_rows(nf_real *qk, nf_real *rstd, const nf_real *qkv, const nf_real *gq, const nf_real *gk,
                         size_t r0, size_t r1, int d, int H, int dh)
{
    for (size_t r = r0; r < r1; r += 16) {
        const int rows = r1 - r < 16 ? (int)(r1 - r) : 16;
        for (int c = 0; c < 2 * H; c++) /* column c * dh: q's heads, then k's */
            nf_attention_rms_rows(qk + r * 2 * d + (size_t)c * dh, 2 * (size_t)d, rstd + r * 2 * H + c, 2 * (size_t)H,
                                  qkv + r * 3 * d + (size_t)c * dh, 3 * (size_t)d, c < H ? gq : gk, rows, dh, 1);
    }
}

/* The QK norm's backward of one pair (rows row0..row0+T-1, head h): dq, dk (ld 2d) of the normalised
 * rows into the raw rows' dqkv (ld 3d), and the pair's sums of dq xhat and dk xhat over its rows, in
 * order, written to dgq, dgk (dh each): the gains' gradients, summed over the pairs afterwards. */
static void rms_pair_backward(nf_real *dqkv, const nf_real *dqk, const nf_real *qkv, const nf_real *rstd,
                              const nf_real *gq, const nf_real *gk, nf_real *dgq, nf_real *dgk, size_t row0, int T,
                              int d, int H, int h, int dh)
{
    for (int part = 0; part < 2; part++) {
        const size_t c = (size_t)part * d + (size_t)h * dh;
        nf_real *dg = part ? dgk : dgq;
        for (int i = 0; i < dh; i++) dg[i] = 0;
        nf_attention_rms_rows_backward(dqkv + row0 * 3 * d + c, 3 * (size_t)d, dqk + row0 * 2 * d + c, 2 * (size_t)d,
                                       qkv + row0 * 3 * d + c, 3 * (size_t)d,
                                       rstd + row0 * 2 * H + (size_t)part * H + h, 2 * (size_t)H, part ? gk : gq, T,
                                       dh, 1, dg);
    }
}


/* In place over s[0..len-1]: p_j = exp(s_j - m) / z, m = max_k s_k, z = sum_k exp(s_k - m);
 * stat = (m, 1/z) when not NULL; s[len..padded-1] (finite, padded_len) become 0.  The loops run over
 * the padded length, whole vectors, and select by j < len (no scalar remainder; the padding is not
 * set to -inf, whose exp would be a denormal, slow to compute with). */
NF_SIMD_CLONES static void softmax_row(nf_real *s, int len, int padded, nf_real *stat)
{
    /* the max and the sum in LANES partial results, then halved in a tree: `omp simd reduction`
     * combined its lanes in a serial chain of scalar operations, most of the time of a short row */
    nf_real lane[LANES];
    for (int l = 0; l < LANES; l++) lane[l] = s[0];
    for (int j0 = 0; j0 < len; j0 += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) {
            const int j = j0 + l;
            const nf_real v = j < len ? s[j] : s[0];
            lane[l] = v > lane[l] ? v : lane[l];
        }
#pragma GCC unroll 4
    for (int w = LANES / 2; w > 0; w /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < w; l++) lane[l] = lane[l + w] > lane[l] ? lane[l + w] : lane[l];
    const nf_real m = lane[0];
#pragma omp simd
    for (int j = 0; j < padded; j++) s[j] = j < len ? EXP(s[j] - m) : 0;
    for (int l = 0; l < LANES; l++) lane[l] = 0;
    for (int j0 = 0; j0 < padded; j0 += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) lane[l] += j0 + l < padded ? s[j0 + l] : 0;
#pragma GCC unroll 4
    for (int w = LANES / 2; w > 0; w /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    const nf_real inv = 1 / lane[0];
#pragma omp simd
    for (int j = 0; j < padded; j++) s[j] *= inv;
    if (stat) stat[0] = m, stat[1] = inv;
}

/* The same probabilities again from the scores and the saved (m, 1/z). */
NF_SIMD_CLONES static void softmax_row_again(nf_real *s, int len, int padded, const nf_real *stat)
{
    const nf_real m = stat[0], inv = stat[1];
#pragma omp simd
    for (int j = 0; j < padded; j++) s[j] = j < len ? EXP(s[j] - m) * inv : 0;
}

/* The columns a row's passes run over: row i's keys lo..i, padded to a multiple of LANES (a whole
 * AVX-512 vector of floats) while inside the row block's columns (< r1: the block's product wrote
 * them, finite, and they are zeroed right of the diagonal afterwards).  A row is 1 to T keys long:
 * without the padding much of each row's work was the scalar remainder loops after its vectors. */
static int padded_len(int lo, int i, int r1)
{
    const int len = i + 1 - lo, up = (len + LANES - 1) / LANES * LANES;
    return lo + up <= r1 ? up : r1 - lo;
}

/* Softmax backward of one row in place, p the probabilities, s = dP on entry, dS on exit:
 *     dS_j = p_j (dP_j - sum_k p_k dP_k) scale,
 * the dot in double, in LANES partial sums halved in a tree (as softmax_row's). */
NF_SIMD_CLONES static void softmax_grad_row(const nf_real *p, nf_real *s, int n, nf_real scale)
{
    double lane[LANES] = {0};
    for (int j0 = 0; j0 < n; j0 += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) lane[l] += j0 + l < n ? (double)p[j0 + l] * s[j0 + l] : 0;
#pragma GCC unroll 4
    for (int w = LANES / 2; w > 0; w /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    const nf_real dt = (nf_real)lane[0];
#pragma omp simd
    for (int j = 0; j < n; j++) s[j] = p[j] * (s[j] - dt) * scale;
}

/* The two softmax passes on nn/attention_avx512.c's kernels where vec (avx512_usable()) says so:
 * the same bits, without the scalar chains that the clones above make of their trees. */
static void softmax_row_on(int vec, nf_real *s, int len, int padded, nf_real *stat)
{
#ifndef NF_DOUBLE
    if (vec) {
        nf_attn512_softmax_row(s, len, padded, stat);
        return;
    }
#endif
    (void)vec;
    softmax_row(s, len, padded, stat);
}

static void softmax_grad_row_on(int vec, const nf_real *p, nf_real *s, int n, nf_real scale)
{
#ifndef NF_DOUBLE
    if (vec) {
        nf_attn512_softmax_grad_row(p, s, n, scale);
        return;
    }
#endif
    (void)vec;
    softmax_grad_row(p, s, n, scale);
}

void nf_attention_softmax_row(nf_real *s, int len, int padded, nf_real *stat, int vector)
{
    softmax_row_on(vector && avx512_usable(), s, len, padded, stat);
}

void nf_attention_softmax_grad_row(const nf_real *p, nf_real *s, int n, nf_real scale, int vector)
{
    softmax_grad_row_on(vector && avx512_usable(), p, s, n, scale);
}

/* The per-part tiles at the end of the scratch. */
static nf_real *scratch_tiles(const nf_attention *A, nf_real *scratch, int n, int T)
{
    const size_t N = (size_t)n * T, d = (size_t)A->d;
    return scratch + N * 4 * d + (A->qk_norm ? N * 2 * d : 0);
}

/* The pool's share of the (sequence, head) pairs: a fixed contiguous range per part. */
typedef struct pair_job {
    const nf_attention *A;
    const nf_params *P;
    views w;
    nf_real *do_, *dq, *dk, *dv, *tiles;
    nf_real *dqkv;                  /* (N, 3d): dv is its last third; with QK norm dq|dk (N, 2d) go through it */
    int lddq, lddk, n, T;
    nf_real *gains;                 /* with QK norm, backward: each pair's gain sums, (n H, 2, dh) */
} pair_job;

static int pair_threads(int pairs, double flops)
{
    if (nf_threads_in_parallel() || flops < NF_NN_PAR_FLOPS) return 1;
    int t = nf_blas_get_threads();
    t = t < NF_NN_MAX_THREADS ? t : NF_NN_MAX_THREADS;
    t = t < pairs ? t : pairs;
    return t > 1 ? t : 1;
}

/* The causal probabilities of one pair into p (T, T): per row block r0..r1, S = q k^T / sqrt(dh) on
 * columns c0 = lo(r0) .. r1 - 1, each row's softmax over columns lo(i)..i (forward: saving (m, 1/z)
 * in stat; again: reading them), zeros right of the diagonal inside the block and left of lo(i)
 * (zero_left_of_window).  Columns >= r1 are not written (nor, without a window, any left of c0 = 0). */
static void probabilities(const pair_job *j, int b, int h, nf_real *p, nf_real *kt, int again)
{
    const int vec = avx512_usable();
    const nf_attention *A = j->A;
    const int T = j->T, dh = A->dh;
    const size_t row0 = (size_t)b * T;
    const nf_real scale = (nf_real)(1.0 / sqrt((double)dh));
    const nf_real *q = j->w.q + row0 * j->w.ldq + (size_t)h * dh, *k = j->w.k + row0 * j->w.ldk + (size_t)h * dh;
    nf_real *stat = j->w.stat + ((size_t)b * A->heads + h) * T * 2;
    (void)kt;
#ifndef NF_DOUBLE
    if (short_pair(A, T)) { /* the same P as the product below, each row's scores as far as its softmax reads */
        nf_attn512_transpose_k(kt, k, (size_t)j->w.ldk, T);
        for (int i0 = 0; i0 < T; i0 += 8) /* eight rows' scores at once, as far as the last one's softmax reads */
            nf_attn512_score_rows(p + (size_t)i0 * T, (size_t)T, q + (size_t)i0 * j->w.ldq, (size_t)j->w.ldq, kt, T,
                                  padded_len(0, i0 + 7, T) / 16, scale);
        for (int i0 = 0; i0 < T; i0 += 8)
            nf_attn512_softmax_rows8(p + (size_t)i0 * T, (size_t)T, i0, T, stat + 2 * (size_t)i0, again);
        for (int i = 0; i < T; i++)
            for (int c = padded_len(0, i, T); c < T; c++) p[(size_t)i * T + c] = 0;
        return;
    }
#endif
    for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        const int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T, c0 = key_lo(A, r0);
        nf_gemm(0, 1, r1 - r0, r1 - c0, dh, scale, q + (size_t)r0 * j->w.ldq, j->w.ldq, k + (size_t)c0 * j->w.ldk,
                j->w.ldk, 0, p + (size_t)r0 * T + c0, T);
        for (int i = r0; i < r1; i++) {
            nf_real *pi = p + (size_t)i * T;
            const int lo = key_lo(A, i), len = i + 1 - lo, padded = padded_len(lo, i, r1);
            if (again)
                softmax_row_again(pi + lo, len, padded, stat + 2 * (size_t)i);
            else
                softmax_row_on(vec, pi + lo, len, padded, stat + 2 * (size_t)i);
            zero_left_of_window(pi, c0, lo);
            for (int c = lo + padded; c < r1; c++) pi[c] = 0;
        }
    }
}

/* The pair's P in the forward cache (short pairs), or NULL. */
static nf_real *kept_probs(const pair_job *j, int b, int h)
{
    return j->w.probs ? j->w.probs + ((size_t)b * j->A->heads + h) * j->T * j->T : NULL;
}

/* One pair: P = causal softmax(q k^T / sqrt(dh)), then o = P v, row block by row block; P in the
 * cache (short pairs) or the part's tile (T, T), whose second half holds k^T for the row kernels. */
static void forward_pair(const pair_job *j, int b, int h, nf_real *tile)
{
    const nf_attention *A = j->A;
    const int T = j->T, dh = A->dh, d = A->d;
    const size_t row0 = (size_t)b * T;
    const nf_real *v = j->w.v + row0 * j->w.ldv + (size_t)h * dh;
    nf_real *o = j->w.o + row0 * d + (size_t)h * dh, *kept = kept_probs(j, b, h), *p = kept ? kept : tile;
    probabilities(j, b, h, p, tile + (size_t)T * T, 0);
#ifndef NF_DOUBLE
    if (short_pair(A, T)) { /* row i sees keys 0..i: the product's sums without the zeros after them */
        for (int i0 = 0; i0 < T; i0 += 8) /* rows i0..i0+7 see keys up to i0+7 (zeros after each row's own) */
            nf_attn512_pv_rows(o + (size_t)i0 * d, (size_t)d, p + (size_t)i0 * T, (size_t)T, v, (size_t)j->w.ldv, i0 + 8);
        return;
    }
#endif
    for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        const int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T, c0 = key_lo(A, r0);
        nf_gemm(0, 0, r1 - r0, dh, r1 - c0, 1, p + (size_t)r0 * T + c0, T, v + (size_t)c0 * j->w.ldv, j->w.ldv, 0,
                o + (size_t)r0 * d, d);
    }
}

static void qk_norm_part(void *arg, int part, int nparts)
{
    const pair_job *j = arg;
    const nf_attention *A = j->A;
    const size_t N = (size_t)j->n * j->T;
    qk_norm_rows(j->w.qk, j->w.rstd, j->w.qkv, j->P->value + A->q_gain, j->P->value + A->k_gain, N * part / nparts,
                 N * (part + 1) / nparts, A->d, A->heads, A->dh);
}

static void forward_part(void *arg, int part, int nparts)
{
    const pair_job *j = arg;
    const int pairs = j->n * j->A->heads;
    nf_real *p = j->tiles + (size_t)part * 2 * j->T * j->T;
    for (int a = (int)((long)pairs * part / nparts); a < (int)((long)pairs * (part + 1) / nparts); a++)
        forward_pair(j, a / j->A->heads, a % j->A->heads, p);
}

/* Forward: [q|k|v] = x Wqkv^T + b; q, k RMS-normalised per head (optional); per (sequence, head)
 * P = causal softmax(q k^T / sqrt(dh)), o = P v; y = o Wo^T + bo. */
void nf_attention_forward(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *scratch, nf_real *y,
                          const nf_real *x, int n, int T)
{
    if (n <= 0 || T <= 0) return;
    const int N = n * T, H = A->heads, dh = A->dh;
    views w = cache_views(A, ws, n, T);
    nf_linear_forward(&A->qkv, P, NULL, w.qkv, x, N);
    pair_job j = {A, P, w, NULL, NULL, NULL, NULL, scratch_tiles(A, scratch, n, T), NULL, 0, 0, n, T, NULL};
    const int t = pair_threads(n * H, 2.0 * n * H * (double)T * T * dh);
    if (A->qk_norm) nf_threads_run(t, t, qk_norm_part, &j);
    nf_threads_run(t, t, forward_part, &j);
    nf_linear_forward(&A->out, P, NULL, y, w.o, N);
}

/* The views of one pair (sequence b, head h) that its backward reads and writes. */
typedef struct pair_views {
    const nf_real *q, *k, *v, *dO;
    nf_real *dq, *dk, *dv;
    int ldq, ldk, ldv, lddq, lddk, ldo, lddv;
} pair_views;

/* The pair's products by nf_gemm, row block by row block (any T, any window). */
static void backward_products(const pair_job *j, const pair_views *u, nf_real *p, nf_real *ds, nf_real scale)
{
    const nf_attention *A = j->A;
    const int T = j->T, dh = A->dh, vec = avx512_usable();
    for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        const int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T, c0 = key_lo(A, r0);
        nf_gemm(0, 1, r1 - r0, r1 - c0, dh, 1, u->dO + (size_t)r0 * u->ldo, u->ldo, u->v + (size_t)c0 * u->ldv, u->ldv,
                0, ds + (size_t)r0 * T + c0, T);
        for (int i = r0; i < r1; i++) {
            const nf_real *pi = p + (size_t)i * T;
            nf_real *si = ds + (size_t)i * T;
            const int lo = key_lo(A, i), end = lo + padded_len(lo, i, r1); /* P is 0 right of i */
            softmax_grad_row_on(vec, pi + lo, si + lo, end - lo, scale);
            zero_left_of_window(si, c0, lo);
            for (int c = i + 1; c < r1; c++) si[c] = 0;
        }
        nf_gemm(0, 0, r1 - r0, dh, r1 - c0, 1, ds + (size_t)r0 * T + c0, T, u->k + (size_t)c0 * u->ldk, u->ldk, 0,
                u->dq + (size_t)r0 * u->lddq, u->lddq);
    }
    /* column block c0..c1 of dS and P is non-zero only on rows c0 .. the last that sees column c1 - 1 */
    for (int c0 = 0; c0 < T; c0 += ATTN_BLOCK) {
        const int c1 = c0 + ATTN_BLOCK < T ? c0 + ATTN_BLOCK : T, rows = key_last_row(A, c1 - 1, T) + 1 - c0;
        nf_gemm(1, 0, c1 - c0, dh, rows, 1, p + (size_t)c0 * T + c0, T, u->dO + (size_t)c0 * u->ldo, u->ldo, 0,
                u->dv + (size_t)c0 * u->lddv, u->lddv);
        nf_gemm(1, 0, c1 - c0, dh, rows, 1, ds + (size_t)c0 * T + c0, T, u->q + (size_t)c0 * u->ldq, u->ldq, 0,
                u->dk + (size_t)c0 * u->lddk, u->lddk);
    }
}

#ifndef NF_DOUBLE
/* The same products of a short pair on the row kernels, the same bits (see forward_pair). */
static void backward_short(const pair_views *u, const nf_real *p, nf_real *ds, int T, nf_real scale)
{
    nf_real vt[16 * ATTN_BLOCK];
    nf_attn512_transpose_k(vt, u->v, (size_t)u->ldv, T);
    for (int i0 = 0; i0 < T; i0 += 8) /* dP = dO v^T, as far as each row's softmax backward reads */
        nf_attn512_score_rows(ds + (size_t)i0 * T, (size_t)T, u->dO + (size_t)i0 * u->ldo, (size_t)u->ldo, vt, T,
                              padded_len(0, i0 + 7, T) / 16, 1);
    for (int i = 0; i < T; i++) {
        nf_real *si = ds + (size_t)i * T;
        nf_attn512_softmax_grad_row(p + (size_t)i * T, si, padded_len(0, i, T), scale);
        for (int c = i + 1; c < T; c++) si[c] = 0;
    }
    for (int i0 = 0; i0 < T; i0 += 8) { /* dq = dS k; dv = P^T dO and dk = dS^T q from row i0 on */
        nf_attn512_pv_rows(u->dq + (size_t)i0 * u->lddq, (size_t)u->lddq, ds + (size_t)i0 * T, (size_t)T, u->k,
                           (size_t)u->ldk, i0 + 8);
        nf_attn512_tn_rows(u->dv + (size_t)i0 * u->lddv, (size_t)u->lddv, p + i0, (size_t)T, u->dO, (size_t)u->ldo, i0,
                           T);
        nf_attn512_tn_rows(u->dk + (size_t)i0 * u->lddk, (size_t)u->lddk, ds + i0, (size_t)T, u->q, (size_t)u->ldq, i0,
                           T);
    }
}
#endif

/* One pair's backward, with dO = dL/do and P from the cache or computed again into p:
 *   dP = dO v^T,  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik) / sqrt(dh)   (softmax; zero above the diagonal)
 *   dq = dS k,  dk = dS^T q,  dv = P^T dO   (written, not added: each pair owns its columns). */
static void backward_pair(const pair_job *j, int b, int h, nf_real *p, nf_real *ds)
{
    const nf_attention *A = j->A;
    const int T = j->T, dh = A->dh, d = A->d;
    const size_t row0 = (size_t)b * T, col = (size_t)h * dh;
    const nf_real scale = (nf_real)(1.0 / sqrt((double)dh));
    pair_views u = {j->w.q + row0 * j->w.ldq + col, j->w.k + row0 * j->w.ldk + col, j->w.v + row0 * j->w.ldv + col,
                    j->do_ + row0 * d + col, j->dq + row0 * j->lddq + col, j->dk + row0 * j->lddk + col,
                    j->dv + row0 * 3 * d + col, j->w.ldq, j->w.ldk, j->w.ldv, j->lddq, j->lddk, d, 3 * d};
    const nf_real *kept = kept_probs(j, b, h);
    if (!kept) probabilities(j, b, h, p, NULL, 1);
#ifndef NF_DOUBLE
    if (kept)
        backward_short(&u, kept, ds, T, scale);
    else
#endif
        backward_products(j, &u, p, ds, scale);
    if (A->qk_norm) /* dq, dk above were for the normalised rows: through the RMS norm into dqkv */
        rms_pair_backward(j->dqkv, j->dq, j->w.qkv, j->w.rstd, j->P->value + A->q_gain, j->P->value + A->k_gain,
                          j->gains + ((size_t)b * A->heads + h) * 2 * dh, j->gains + ((size_t)b * A->heads + h) * 2 * dh + dh,
                          row0, T, d, A->heads, h, dh);
}

static void backward_part(void *arg, int part, int nparts)
{
    const pair_job *j = arg;
    const int pairs = j->n * j->A->heads;
    nf_real *p = j->tiles + (size_t)part * 2 * j->T * j->T, *ds = p + (size_t)j->T * j->T;
    for (int a = (int)((long)pairs * part / nparts); a < (int)((long)pairs * (part + 1) / nparts); a++)
        backward_pair(j, a / j->A->heads, a % j->A->heads, p, ds);
}

/* The gains' gradients: dg += the pairs' sums (rms_pair_backward), pair by pair in order (sequence,
 * then head), whatever thread ran each pair. */
NF_SIMD_CLONES static void gain_grads(const nf_attention *A, nf_params *P, const nf_real *gains, int pairs)
{
    const int dh = A->dh;
    nf_real *dgq = P->grad + A->q_gain, *dgk = P->grad + A->k_gain;
    for (int a = 0; a < pairs; a++) {
        const nf_real *sq = gains + (size_t)a * 2 * dh, *sk = sq + dh;
#pragma omp simd
        for (int i = 0; i < dh; i++) dgq[i] += sq[i];
#pragma omp simd
        for (int i = 0; i < dh; i++) dgk[i] += sk[i];
    }
}

static void attention_backward(const nf_attention *A, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                               int accumulate, const nf_real *dy, const nf_real *x, int n, int T)
{
    if (n <= 0 || T <= 0) return;
    const int N = n * T, d = A->d, H = A->heads;
    const size_t Nz = (size_t)N;
    views w = cache_views(A, ws, n, T);
    nf_real *do_ = scratch, *dqkv = do_ + Nz * d, *dqk = dqkv + Nz * 3 * d;
    /* do = dy Wo (written), Wo and bo gradients added */
    nf_linear_backward_cat(&A->out, P, NULL, do_, NULL, dy, w.o, NULL, 0, 0, N);
    pair_job j = {A, P, w, do_, NULL, NULL, dqkv + 2 * d, scratch_tiles(A, scratch, n, T), dqkv, 0, 0, n, T, NULL};
    if (A->qk_norm) j.gains = j.tiles + (size_t)NF_NN_MAX_THREADS * 2 * T * T;
    if (A->qk_norm)
        j.dq = dqk, j.dk = dqk + d, j.lddq = j.lddk = 2 * d;
    else
        j.dq = dqkv, j.dk = dqkv + d, j.lddq = j.lddk = 3 * d;
    const int t = pair_threads(n * H, 5.0 * n * H * (double)T * T * A->dh);
    nf_threads_run(t, t, backward_part, &j);
    if (A->qk_norm) gain_grads(A, P, j.gains, n * H);
    /* dx += dqkv Wqkv (or written), Wqkv and bqkv gradients added */
    nf_linear_backward_cat(&A->qkv, P, NULL, dx, NULL, dqkv, x, NULL, 0, accumulate, N);
}

void nf_attention_backward(const nf_attention *A, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                           const nf_real *dy, const nf_real *x, int n, int T)
{
    attention_backward(A, P, ws, scratch, dx, 1, dy, x, n, T);
}

void nf_attention_backward_set(const nf_attention *A, nf_params *P, const nf_real *ws, nf_real *scratch, nf_real *dx,
                               const nf_real *dy, const nf_real *x, int n, int T)
{
    attention_backward(A, P, ws, scratch, dx, 0, dy, x, n, T);
}

size_t nf_attention_kv_size(const nf_attention *A, int n, int Tmax)
{
    return (size_t)2 * n * Tmax * A->d;
}

size_t nf_attention_step_workspace(const nf_attention *A, int n, int Tmax)
{
    return nf_attention_block_workspace(A, n, 1, Tmax);
}

size_t nf_attention_block_workspace(const nf_attention *A, int n, int m, int Tmax)
{
    return (size_t)n * m * 4 * A->d + (size_t)NF_NN_MAX_THREADS * m * Tmax;
}

typedef struct step_job {
    const nf_attention *A;
    const nf_params *P;
    nf_real *qkv, *o, *s, *kv;
    int Tmax, t0, m, n;
} step_job;

/* Sequences b of a part: normalise the m rows' q, k; store k, v at positions t0..t0+m-1; then per
 * head the scores S = q K_{c0..t0+m-1}^T / sqrt(dh) (m, t0 + m - c0; c0 = lo(t0), 0 without a
 * window), row j's softmax over columns lo(t0+j)..t0+j (zeros outside: causal within the block),
 * o = S V. */
static void step_part(void *arg, int part, int nparts)
{
    const int vec = avx512_usable();
    const step_job *j = arg;
    const nf_attention *A = j->A;
    const int d = A->d, H = A->heads, dh = A->dh, t0 = j->t0, m = j->m, L = t0 + m, Tmax = j->Tmax;
    const nf_real scale = (nf_real)(1.0 / sqrt((double)dh));
    nf_real *s = j->s + (size_t)part * m * Tmax, *Kc = j->kv, *Vc = j->kv + (size_t)j->n * Tmax * d;
    const int b0 = (int)((long)j->n * part / nparts), b1 = (int)((long)j->n * (part + 1) / nparts);
    if (A->qk_norm) /* the part's rows, in place: all its sequences' rows follow each other */
        for (int c = 0; c < 2 * H; c++) {
            nf_real *u = j->qkv + (size_t)b0 * m * 3 * d + (size_t)c * dh; /* q's heads, then k's */
            nf_attention_rms_rows(u, 3 * (size_t)d, NULL, 0, u, 3 * (size_t)d,
                                  j->P->value + (c < H ? A->q_gain : A->k_gain), (b1 - b0) * m, dh, 1);
        }
    for (int b = b0; b < b1; b++) {
        nf_real *rows = j->qkv + (size_t)b * m * 3 * d;
        nf_real *kb = Kc + (size_t)b * Tmax * d, *vb = Vc + (size_t)b * Tmax * d;
        for (int r = 0; r < m; r++) {
            nf_real *row = rows + (size_t)r * 3 * d;
            memcpy(kb + (size_t)(t0 + r) * d, row + d, (size_t)d * sizeof *kb);
            memcpy(vb + (size_t)(t0 + r) * d, row + 2 * d, (size_t)d * sizeof *vb);
        }
        const int c0 = key_lo(A, t0), Lw = L - c0; /* keys c0..L-1: the window's (all without one) */
        for (int h = 0; h < H; h++) {
            nf_gemm(0, 1, m, Lw, dh, scale, rows + (size_t)h * dh, 3 * d, kb + (size_t)c0 * d + (size_t)h * dh, d, 0,
                    s, Lw);
            for (int r = 0; r < m; r++) {
                nf_real *sr = s + (size_t)r * Lw;
                const int lo = key_lo(A, t0 + r) - c0;
                const int len = t0 + r + 1 - c0 - lo;
                softmax_row_on(vec, sr + lo, len, len, NULL);
                for (int c = 0; c < lo; c++) sr[c] = 0;
                for (int c = t0 + r + 1 - c0; c < Lw; c++) sr[c] = 0;
            }
            nf_gemm(0, 0, m, dh, Lw, 1, s, Lw, vb + (size_t)c0 * d + (size_t)h * dh, d, 0,
                    j->o + (size_t)b * m * d + (size_t)h * dh, d);
        }
    }
}

int nf_attention_step(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                      const nf_real *x, int t, int n)
{
    return nf_attention_block(A, P, ws, kv, Tmax, y, x, t, 1, n);
}

/* Tokens t0..t0+m-1 of every sequence b (rows b m + r of x): [q|k|v] = x Wqkv^T + b (normalised as
 * in forward) over all n m rows, k and v stored at their positions, per head p = the causal
 * softmax of q K^T / sqrt(dh) over positions 0..t0+r, o = p V, y = o Wo^T + bo.  Sequences are
 * split over the pool in fixed ranges, each part with its own score tile. */
int nf_attention_block(const nf_attention *A, const nf_params *P, nf_real *ws, nf_real *kv, int Tmax, nf_real *y,
                       const nf_real *x, int t0, int m, int n)
{
    if (t0 < 0 || m < 1 || t0 + m > Tmax)
        return nf_error(NF_EINVAL, "attention step: positions %d..%d; expected 0 <= t0 <= t0 + m - 1 < %d (the "
                                   "cache's length)", t0, t0 + m - 1, Tmax);
    if (n <= 0) return NF_OK;
    const int d = A->d, N = n * m;
    step_job j = {A, P, ws, ws + (size_t)N * 3 * d, ws + (size_t)N * 4 * d, kv, Tmax, t0, m, n};
    nf_linear_forward(&A->qkv, P, NULL, j.qkv, x, N);
    const int parts = pair_threads(n, 4.0 * N * (double)(t0 + m) * d);
    nf_threads_run(parts, parts, step_part, &j);
    nf_linear_forward(&A->out, P, NULL, y, j.o, N);
    return NF_OK;
}
