/* core/blas_avx512.c - nf's own AVX-512 matrix product (the `native` kernel of core/blas.h).
 *
 * The only file compiled for AVX-512 (the Makefile adds -mavx512f on x86-64); core/blas.c calls
 * nf_blas_avx512_gemm only after cpuid says the CPU has AVX-512, so the rest of the binary runs on
 * any x86-64.  Without AVX-512 code generation (another architecture or compiler flags) the kernel
 * is left out and nf_blas_avx512_compiled() returns 0.
 *
 * The product, C = alpha op(A) op(B) + beta C, row-major, with V the vector width (16 floats
 * or 8 doubles) and NR = 2V:
 *   for each strip of NR columns of C (j0..j0+NR):
 *     for each block of KC rows of op(B) (k0..k0+KC):
 *       pack op(B)[k0:k0+kc, j0:j0+NR] row by row into a (kc, NR) buffer, zero-padded;
 *       for each tile of MR = 12 rows of C:  acc (MR x NR) = sum_k op(A)[i, k] (broadcast) * packed[k, :]
 *         C_tile = alpha acc + (k0 == 0 ? beta C_tile : C_tile)        (masked stores at the right edge)
 * so a tile's accumulators live in 24 registers, the packed strip (32 KB) in L1, and A is read
 * where it lies (row i of op(A) is A + i lda with unit step, or A + i with step lda when transposed).
 * Each element of C sums over k in the same order whatever the tiling and the thread split.
 */
#include "core/blas_avx512.h"

#include "core/blas.h"
#include "core/threads.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#include <string.h>

#include "core/simd512.h"

#ifdef NF_DOUBLE
typedef __m512d vec;
typedef __mmask8 vmask;
#define VW 8
#define V_ZERO _mm512_setzero_pd
#define V_SET1 _mm512_set1_pd
#define V_LOAD _mm512_load_pd
#define V_LOADU _mm512_loadu_pd
#define V_STORE _mm512_store_pd
#define V_FMA _mm512_fmadd_pd
#define V_MUL _mm512_mul_pd
#define V_ADD _mm512_add_pd
#define V_MLOADU _mm512_maskz_loadu_pd
#define V_MSTOREU _mm512_mask_storeu_pd
#else
typedef __m512 vec;
typedef __mmask16 vmask;
#define VW 16
#define V_ZERO _mm512_setzero_ps
#define V_SET1 _mm512_set1_ps
#define V_LOAD _mm512_load_ps
#define V_LOADU _mm512_loadu_ps
#define V_STORE _mm512_store_ps
#define V_FMA _mm512_fmadd_ps
#define V_MUL _mm512_mul_ps
#define V_ADD _mm512_add_ps
#define V_MLOADU _mm512_maskz_loadu_ps
#define V_MSTOREU _mm512_mask_storeu_ps
#endif

#define NR (2 * VW)
#define MR 12
#define KC 256
/* Below this many flops (2 M N K) a product runs on one thread: waking a sleeping thread costs more. */
#define PAR_MIN_FLOPS 4e6

#ifdef NF_DOUBLE
/* r[q][p] <- r[p][q], 8 x 8 doubles. */
static inline void transpose(vec r[8])
{
    vec t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            r[4 * i + j] = _mm512_shuffle_f64x2(t[4 * i + j], t[4 * i + j + 2], 0x88);
            r[4 * i + j + 2] = _mm512_shuffle_f64x2(t[4 * i + j], t[4 * i + j + 2], 0xdd);
        }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f64x2(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_f64x2(r[j], r[j + 4], 0xdd);
    }
    for (int j = 0; j < 8; j++) r[j] = t[j];
}
#else
/* r[q][p] <- r[p][q], 16 x 16 floats (core/simd512.h). */
static inline void transpose(vec r[16]) { nf_transpose16_ps(r); }
#endif

/* The first n lanes of a vector (n may be <= 0 or >= VW). */
static inline vmask lanes(int n) { return n >= VW ? (vmask)~0u : n <= 0 ? (vmask)0 : (vmask)((1u << n) - 1); }

/* dst (kc, NR) = op(B)[k0:k0+kc, j0:j0+nr], columns nr.. zero. */
static __attribute__((noinline)) void pack_strip(nf_real *dst, int transB, const nf_real *B, int ldb, int k0, int kc, int j0, int nr)
{
    if (!transB) {
        const vmask m0 = lanes(nr), m1 = lanes(nr - VW);
        for (int k = 0; k < kc; k++) {
            const nf_real *src = B + (size_t)(k0 + k) * ldb + j0;
            V_STORE(dst + (size_t)k * NR, V_MLOADU(m0, src));
            V_STORE(dst + (size_t)k * NR + VW, V_MLOADU(m1, src + VW));
        }
        return;
    }
    /* op(B)[k, j] = B[j, k]: square blocks of V x V transposed in registers, the edges one by one. */
    if (nr < NR)
        for (int k = 0; k < kc; k++)
            for (int j = nr; j < NR; j++) dst[(size_t)k * NR + j] = 0;
    int j = 0;
    for (; j + VW <= nr; j += VW) {
        const nf_real *src = B + (size_t)(j0 + j) * ldb + k0;
        int k = 0;
        for (; k + VW <= kc; k += VW) {
            vec r[VW];
#pragma GCC unroll 16
            for (int q = 0; q < VW; q++) r[q] = V_LOADU(src + (size_t)q * ldb + k);
            transpose(r);
#pragma GCC unroll 16
            for (int q = 0; q < VW; q++) V_STORE(dst + (size_t)(k + q) * NR + j, r[q]);
        }
        for (; k < kc; k++)
            for (int q = 0; q < VW; q++) dst[(size_t)k * NR + j + q] = src[(size_t)q * ldb + k];
    }
    for (; j < nr; j++) {
        const nf_real *src = B + (size_t)(j0 + j) * ldb + k0;
        for (int k = 0; k < kc; k++) dst[(size_t)k * NR + j] = src[k];
    }
}

/* first: the tile's chunk of K is not the first (0: add to C), the first (FIRST_C: beta C, or nothing
 * when beta = 0), the first of a product with a bias (FIRST_BIAS: the bias, packed as row kc of the
 * strip, where no pointer of its own has to stay in a register through the loop: one more made
 * the compiler spill and cost 20% of the kernel's rate). */
#define FIRST_C 1
#define FIRST_BIAS 2

/* One tile: rows (mr <= R of them) of C from the rows of op(A) at a (row step ars, k step acs) and
 * the packed strip b; NV vectors (1 or 2) of columns, the first nr of them stored.  R and NV are
 * constants at every call, so the accumulators stay in registers.  Rows past mr repeat row 0. */
static inline __attribute__((always_inline)) void tile(const int R, const int NV, int kc, const nf_real *a,
                                                       long ars, long acs, const nf_real *b, nf_real *C, int ldc,
                                                       int mr, int nr, nf_real alpha, nf_real beta, int first)
{
    vec c0[MR], c1[MR];
    const nf_real *ar[MR];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        c0[r] = V_ZERO();
        c1[r] = V_ZERO();
        ar[r] = a + (r < mr ? r : 0) * ars;
    }
    for (int k = 0; k < kc; k++) {
        const vec b0 = V_LOAD(b + (size_t)k * NR);
        const vec b1 = NV > 1 ? V_LOAD(b + (size_t)k * NR + VW) : b0;
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            const vec av = V_SET1(ar[r][k * acs]);
            c0[r] = V_FMA(av, b0, c0[r]);
            if (NV > 1) c1[r] = V_FMA(av, b1, c1[r]);
        }
    }
    const vmask m0 = lanes(nr), m1 = lanes(nr - VW);
    const vec va = V_SET1(alpha), vb = V_SET1(beta);
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        if (r >= mr) break;
        nf_real *cr = C + (size_t)r * ldc;
        vec x0 = V_MUL(va, c0[r]), x1 = V_MUL(va, c1[r]);
        if (!first) {
            x0 = V_ADD(x0, V_MLOADU(m0, cr));
            if (NV > 1) x1 = V_ADD(x1, V_MLOADU(m1, cr + VW));
        } else if (first == FIRST_BIAS) { /* the bias row packed after the strip's kc rows */
            x0 = V_ADD(x0, V_LOAD(b + (size_t)kc * NR));
            if (NV > 1) x1 = V_ADD(x1, V_LOAD(b + (size_t)kc * NR + VW));
        } else if (beta != 0) {
            x0 = V_FMA(vb, V_MLOADU(m0, cr), x0);
            if (NV > 1) x1 = V_FMA(vb, V_MLOADU(m1, cr + VW), x1);
        }
        V_MSTOREU(cr, m0, x0);
        if (NV > 1) V_MSTOREU(cr + VW, m1, x1);
    }
}

/* Rows i0..i1 of C against one packed strip: tiles of 12 rows; the rest in one tile of 12, 8 or 4
 * (its spare rows repeat the first). */
static __attribute__((noinline)) void strip_rows(int NV, int i0, int i1, int kc, const nf_real *a, long ars, long acs, const nf_real *b,
                       nf_real *C, int ldc, int nr, nf_real alpha, nf_real beta, int first)
{
    int i = i0;
#define TILE(R, V, MR_)                                                                                       \
    tile(R, V, kc, a + i * ars, ars, acs, b, C + (size_t)i * ldc, ldc, MR_, nr, alpha, beta, first)
    if (NV > 1) {
        for (; i + MR <= i1; i += MR) TILE(MR, 2, MR);
        const int rest = i1 - i;
        if (rest > 8) TILE(MR, 2, rest);
        else if (rest > 4) TILE(8, 2, rest);
        else if (rest > 0) TILE(4, 2, rest);
    } else {
        for (; i + MR <= i1; i += MR) TILE(MR, 1, MR);
        const int rest = i1 - i;
        if (rest > 8) TILE(MR, 1, rest);
        else if (rest > 4) TILE(8, 1, rest);
        else if (rest > 0) TILE(4, 1, rest);
    }
#undef TILE
}

/* Strips s0..s1 and rows i0..i1 of C (one thread's share), in blocks of rows whose op(A) panel
 * (rows x KC) and C block (rows x N) stay in L2 (BLOCK_BYTES) while every strip passes over them:
 * for each block of rows, each chunk of K, each strip: pack the strip's chunk, run the block's
 * tiles.  Without the blocks a product with many rows (or a long K) read all of op(A) from memory
 * once per strip: 51-90 GFLOP/s against 130-157 when it fits (2026-12-05, bench/RESULTS.md).  The
 * blocks are whole tiles, and each element of C still sums its chunks in order, so the result does
 * not depend on them. */
#define BLOCK_BYTES (1 << 20)
static void native_part(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                        const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc, int s0,
                        int s1, int i0, int i1)
{
    (void)M;
    _Alignas(64) nf_real pack[KC * NR + NR];
    const long ars = transA ? 1 : lda, acs = transA ? lda : 1;
    const int kmax = K < KC ? K : KC;
    int mb = (int)(BLOCK_BYTES / (sizeof(nf_real) * (size_t)(kmax + (s1 - s0) * NR))) / MR * MR;
    if (mb < MR) mb = MR;
    for (int b0 = i0; b0 < i1; b0 += mb) {
        const int b1 = i1 - b0 > mb ? b0 + mb : i1;
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            for (int s = s0; s < s1; s++) {
                const int j0 = s * NR, nr = N - j0 < NR ? N - j0 : NR, nv = nr > VW ? 2 : 1;
                pack_strip(pack, transB, B, ldb, k0, kc, j0, nr);
                int first = k0 == 0 ? FIRST_C : 0;
                if (first && bias) {
                    memcpy(pack + (size_t)kc * NR, bias + j0, (size_t)nr * sizeof *pack);
                    first = FIRST_BIAS;
                }
                strip_rows(nv, b0, b1, kc, A + k0 * acs, ars, acs, pack, C + j0, ldc, nr, alpha, beta, first);
            }
        }
    }
}

/* A narrow C (N <= 8 columns) would fill a fraction of each vector: compute C^T = op(B)^T op(A)^T
 * instead (N rows, M columns: full vectors) in chunks of NARROW_CHUNK rows of C, and add it back
 * transposed.  Only when A is transposed (weight gradients dy^T x), so the new packed operand, A, is
 * packed without a transpose (otherwise packing would cost more than it saves).  The choice must
 * not depend on M: threads that split M must sum each element the same way. */
#define NARROW_N 8
#define NARROW_CHUNK 256
static void native_narrow(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                          const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc)
{
    _Alignas(64) nf_real T[NARROW_N * NARROW_CHUNK];
    for (int i0 = 0; i0 < M; i0 += NARROW_CHUNK) {
        const int mc = M - i0 < NARROW_CHUNK ? M - i0 : NARROW_CHUNK, strips = (mc + NR - 1) / NR;
        const nf_real *Ai = transA ? A + i0 : A + (size_t)i0 * lda;
        native_part(!transB, !transA, N, mc, K, alpha, B, ldb, Ai, lda, 0, NULL, T, mc, 0, strips, 0, N);
        for (int i = 0; i < mc; i++) {
            nf_real *c = C + (size_t)(i0 + i) * ldc;
            for (int j = 0; j < N; j++) c[j] = T[(size_t)j * mc + i] + (beta == 0 ? 0 : beta * c[j]);
        }
    }
}

/* One product split into parts (nf_threads_run): by strips of columns when there are enough of
 * them, else by rows at multiples of MR. */
typedef struct gemm_job {
    int transA, transB, M, N, K, lda, ldb, ldc, strips;
    nf_real alpha, beta;
    const nf_real *A, *B, *bias;
    nf_real *C;
} gemm_job;

static void gemm_part(void *arg, int part, int nparts)
{
    const gemm_job *g = arg;
    if (g->strips >= 2 * nparts) {
        const int s0 = (int)((long)g->strips * part / nparts), s1 = (int)((long)g->strips * (part + 1) / nparts);
        native_part(g->transA, g->transB, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->bias,
                    g->C, g->ldc, s0, s1, 0, g->M);
        return;
    }
    const int tiles = (g->M + MR - 1) / MR;
    int r0 = (int)((long)tiles * part / nparts) * MR, r1 = (int)((long)tiles * (part + 1) / nparts) * MR;
    if (r1 > g->M) r1 = g->M;
    if (r0 < r1)
        native_part(g->transA, g->transB, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->bias,
                    g->C, g->ldc, 0, g->strips, r0, r1);
}

/* With bias (N values), C = alpha op(A) op(B) + bias in every row, beta unused: the bias enters where
 * the first chunk of K would read C, so C is written once instead of filled and read back. */
static void native_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                        const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc)
{
    if (N <= NARROW_N && transA) {
        if (bias) {
            for (int i = 0; i < M; i++) memcpy(C + (size_t)i * ldc, bias, (size_t)N * sizeof *C);
            beta = 1;
        }
        native_narrow(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int strips = (N + NR - 1) / NR;
    int T = nf_blas_get_threads();
    if (2.0 * M * N * K < PAR_MIN_FLOPS || nf_threads_in_parallel()) T = 1;
    if (T > 1 && strips < 2 * T && M < 2 * MR * T) T = 1;
    if (T <= 1) {
        native_part(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc, 0, strips, 0, M);
        return;
    }
    gemm_job g = {transA, transB, M, N, K, lda, ldb, ldc, strips, alpha, beta, A, B, bias, C};
    nf_threads_run(T, T, gemm_part, &g);
}

int nf_blas_avx512_compiled(void) { return 1; }

void nf_blas_avx512_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                         const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc)
{
    native_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}
#else
int nf_blas_avx512_compiled(void) { return 0; }

void nf_blas_avx512_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                         const nf_real *B, int ldb, nf_real beta, const nf_real *bias, nf_real *C, int ldc)
{
    (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)bias, (void)C, (void)ldc;
}
#endif
