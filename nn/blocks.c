/* nn/blocks.c - masked weights as blocks: skip the products with the all-zero blocks.
 *
 * A MADE mask is about half zeros, and with hidden units sorted by degree (nn/made.c) it is block
 * triangular: cut the rows (outputs) at rb[] and the columns (inputs, then context) at cb[], and each
 * block W[R_a, C_b] is all masked (class 0), all kept (1) or mixed (2).  With y = [x | c] W^T + b:
 *   forward   y[:, R_a] += sum over runs of non-zero blocks b of  [x|c][:, C_b] W[R_a, C_b]^T
 *   backward  d[x|c][:, C_b] (+)= sum over runs of non-zero blocks a of  dy[:, R_a] W[R_a, C_b]
 *             dW[R_a, C_b] += dy[:, R_a]^T [x|c][:, C_b]    (kept blocks straight into the gradient,
 *                                                            mixed ones through scratch and the mask)
 * Zero blocks cost nothing, and masked entries (zero in W) add nothing to y or dx; their gradient
 * stays exactly zero.  A run is a maximal sequence of adjacent non-zero blocks, one product each.
 *
 * The cuts are planned once per layer by a cost model of core/blas.c's kernel (a product of
 * (M x K)(K x N) costs a call, a pack of K x N, and 2 M' N' K flops with N and M rounded up to the
 * kernel's strips and tiles): candidates are blocks of 16..512 rows/columns and the mask's own
 * groups of identical rows or columns merged up to such sizes; the cheapest for a batch of 512 (nf
 * fit's default) wins, the dense layout included.  Over a training step of the MAF benchmark (5
 * MADEs, 256 x 256 hidden masks with 43% zeros) the products drop from 1.10 to 0.77 GFLOP; planning
 * for 512 rows rather than 256 picks cuts that execute 2% more flops in larger products, 10% faster
 * on one thread.  The plan never changes the sums' order between runs: it depends only on the mask.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "nn/nn_internal.h"
#include "core/simd.h"

#define PLAN_BATCH 512        /* batch size the cost model assumes */
#define PLAN_MAX_BLOCKS 64    /* finer cuts than this are not considered */

/* ---- cost model (seconds) ------------------------------------------------------------------------ */

static double gemm_cost(int M, int N, int K)
{
    /* core/blas.c: strips of 32 columns (a last one of <= 16 costs 60%), tiles of 12 rows (the rest
     * in one of 4, 8 or 12); fitted to its times on the benchmark machine (5-15% median error) */
    const double call = 0.3e-6, pack = 0.12e-9, flop = 1 / 200e9;
    const int Ne = N / 32 * 32 + (N % 32 == 0 ? 0 : N % 32 <= 16 ? 19 : 32);
    const int r = M % 12, Me = M / 12 * 12 + (r > 8 ? 12 : r > 4 ? 8 : r > 0 ? 4 : 0);
    return call + pack * (double)K * Ne + flop * 2.0 * Me * Ne * K;
}

/* ---- the plan -------------------------------------------------------------------------------------- */

/* Mask statistics: S[(r)(in+1) + c] = number of kept entries in rows < r, columns < c. */
typedef struct mask_sums {
    const unsigned char *mask;
    int out, in, nx;
    int *S;
} mask_sums;

static int block_class(const mask_sums *m, int r0, int r1, int c0, int c1)
{
    const int w = m->in + 1;
    long s = (long)m->S[r1 * w + c1] - m->S[r0 * w + c1] - m->S[r1 * w + c0] + m->S[r0 * w + c0];
    return s == 0 ? 0 : s == (long)(r1 - r0) * (c1 - c0) ? 1 : 2;
}

/* A run of non-zero blocks starting at b: last index of the run (stops at the data/context cut). */
static int run_end(const nf_blocks *bk, int a, int b, int nx)
{
    while (b + 1 < bk->ncb && bk->cls[a * bk->ncb + b + 1] && bk->cb[b + 1] != nx) b++;
    return b;
}

/* Merge adjacent rows (columns) of blocks whose classes are the same all along (never across the
 * data/context cut nx). */
static void normalise(nf_blocks *bk, int nx)
{
    int k = 0;
    for (int a = 0; a < bk->nrb; a++) {
        if (k > 0 && !memcmp(bk->cls + (k - 1) * bk->ncb, bk->cls + a * bk->ncb, (size_t)bk->ncb)) {
            bk->rb[k] = bk->rb[a + 1];
            continue;
        }
        memmove(bk->cls + k * bk->ncb, bk->cls + a * bk->ncb, (size_t)bk->ncb);
        bk->rb[k + 1] = bk->rb[a + 1];
        k++;
    }
    bk->nrb = k;
    int j = 0;
    for (int b = 0; b < bk->ncb; b++) {
        int same = j > 0 && bk->cb[j] != nx;
        for (int a = 0; same && a < bk->nrb; a++) same = bk->cls[a * bk->ncb + j - 1] == bk->cls[a * bk->ncb + b];
        if (same) {
            bk->cb[j] = bk->cb[b + 1];
            continue;
        }
        for (int a = 0; a < bk->nrb; a++) bk->cls[a * bk->ncb + j] = bk->cls[a * bk->ncb + b];
        bk->cb[j + 1] = bk->cb[b + 1];
        j++;
    }
    /* compact the class matrix to the new column count */
    for (int a = 0; a < bk->nrb; a++) memmove(bk->cls + a * j, bk->cls + a * bk->ncb, (size_t)j);
    bk->ncb = j;
}

/* Cost of one training step's products (forward, input gradient, weight gradient) under bk. */
static double plan_cost(const nf_blocks *bk, int nx, int n)
{
    double t = 0;
    for (int a = 0; a < bk->nrb; a++) {
        const int rows = bk->rb[a + 1] - bk->rb[a];
        for (int b = 0; b < bk->ncb; b++) {
            if (!bk->cls[a * bk->ncb + b]) continue;
            int e = run_end(bk, a, b, nx), width = bk->cb[e + 1] - bk->cb[b];
            t += gemm_cost(n, rows, width); /* forward */
            for (int q = b; q <= e;) {      /* weight gradient, kept and mixed runs apart */
                int cls = bk->cls[a * bk->ncb + q], r = q;
                while (r + 1 <= e && bk->cls[a * bk->ncb + r + 1] == cls) r++;
                int w = bk->cb[r + 1] - bk->cb[q];
                t += gemm_cost(rows, w, n) + (cls == 2 ? 0.3e-9 * rows * w : 0);
                q = r + 1;
            }
            b = e;
        }
    }
    for (int b = 0; b < bk->ncb; b++) /* input gradient */
        for (int a = 0; a < bk->nrb; a++) {
            if (!bk->cls[a * bk->ncb + b]) continue;
            int e = a;
            while (e + 1 < bk->nrb && bk->cls[(e + 1) * bk->ncb + b]) e++;
            t += gemm_cost(n, bk->cb[b + 1] - bk->cb[b], bk->rb[e + 1] - bk->rb[a]);
            a = e;
        }
    return t;
}

/* Cuts of 0..len (plus `forced`, when inside) into blocks: of `size` (group < 0), or groups of
 * identical rows/columns (starts in gstart[0..ng)) merged until at least `size` long.  Returns the
 * number of blocks, or -1 if more than `limit`. */
static int make_cuts(int *cut, int len, int forced, int size, const int *gstart, int ng, int group, int limit)
{
    int k = 0;
    cut[k++] = 0;
    const int seg_end[2] = {forced > 0 && forced < len ? forced : len, len};
    int at = 0;
    for (int s = 0; s < 2 && at < len; s++) {
        const int end = seg_end[s];
        if (at >= end) continue;
        int start = at;
        if (!group) {
            for (long p = (long)start + size; p < end; p += size) {
                if (k > limit) return -1;
                cut[k++] = (int)p;
            }
        } else {
            for (int g = 0; g < ng; g++) {
                int p = gstart[g];
                if (p <= start || p >= end) continue;
                if (p - cut[k - 1] >= size) {
                    if (k > limit) return -1;
                    cut[k++] = p;
                }
            }
        }
        if (end < len) cut[k++] = end;
        at = end;
    }
    cut[k] = len;
    return k;
}

/* Classify the blocks of the cuts rb (nrb) x cb (ncb) into bk (arrays sized by the caller). */
static void classify(nf_blocks *bk, const mask_sums *m, const int *rb, int nrb, const int *cb, int ncb, int nx)
{
    bk->nrb = nrb;
    bk->ncb = ncb;
    memcpy(bk->rb, rb, (size_t)(nrb + 1) * sizeof *rb);
    memcpy(bk->cb, cb, (size_t)(ncb + 1) * sizeof *cb);
    for (int a = 0; a < nrb; a++)
        for (int b = 0; b < ncb; b++) bk->cls[a * ncb + b] = (unsigned char)block_class(m, rb[a], rb[a + 1], cb[b], cb[b + 1]);
    normalise(bk, nx);
}

/* Starts of the groups of identical rows (dim 0) or columns (dim 1). */
static int groups(int *start, const unsigned char *mask, int out, int in, int dim)
{
    int ng = 0, len = dim ? in : out;
    for (int i = 0; i < len; i++) {
        int differs = i == 0;
        if (!differs && dim == 0) differs = memcmp(mask + (size_t)i * in, mask + (size_t)(i - 1) * in, (size_t)in) != 0;
        for (int r = 0; !differs && dim == 1 && r < out; r++) differs = mask[(size_t)r * in + i] != mask[(size_t)r * in + i - 1];
        if (differs) start[ng++] = i;
    }
    return ng;
}

void nf_blocks_free(nf_blocks *bk)
{
    if (!bk) return;
    free(bk->rb);
    free(bk->cb);
    free(bk->cls);
    memset(bk, 0, sizeof *bk);
}

int nf_blocks_plan(nf_blocks *bk, const unsigned char *mask, int out, int in, int nx, int mode)
{
    static const int sizes[] = {1, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, INT_MAX};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    memset(bk, 0, sizeof *bk);
    const int limit = mode == NF_BLOCKS_AUTO ? PLAN_MAX_BLOCKS : INT_MAX;
    const int rmax = (out < PLAN_MAX_BLOCKS || limit == INT_MAX ? out : PLAN_MAX_BLOCKS) + 4;
    const int cmax = (in < PLAN_MAX_BLOCKS || limit == INT_MAX ? in : PLAN_MAX_BLOCKS) + 4;
    mask_sums m = {mask, out, in, nx, malloc((size_t)(out + 1) * (in + 1) * sizeof(int))};
    int *rg = malloc((size_t)out * sizeof *rg), *cg = malloc((size_t)in * sizeof *cg);
    int *rcut = malloc((size_t)rmax * sizeof *rcut), *ccut = malloc((size_t)cmax * sizeof *ccut);
    nf_blocks cand = {0}, best = {0};
    for (int k = 0; k < 2; k++) {
        nf_blocks *b = k ? &best : &cand;
        b->rb = malloc((size_t)rmax * sizeof(int));
        b->cb = malloc((size_t)cmax * sizeof(int));
        b->cls = malloc((size_t)rmax * cmax);
    }
    if (!m.S || !rg || !cg || !rcut || !ccut || !cand.rb || !cand.cb || !cand.cls || !best.rb || !best.cb || !best.cls) {
        free(m.S), free(rg), free(cg), free(rcut), free(ccut);
        nf_blocks_free(&cand), nf_blocks_free(&best);
        return nf_error(NF_ENOMEM, "out of memory planning the blocks of a %d x %d masked weight", out, in);
    }
    const int w = in + 1;
    for (int c = 0; c <= in; c++) m.S[c] = 0;
    for (int r = 0; r < out; r++) {
        int row = 0;
        m.S[(r + 1) * w] = 0;
        for (int c = 0; c < in; c++) {
            row += mask[(size_t)r * in + c] != 0;
            m.S[(r + 1) * w + c + 1] = m.S[r * w + c + 1] + row;
        }
    }
    const int nrg = groups(rg, mask, out, in, 0), ncg = groups(cg, mask, out, in, 1);
    if (mode != NF_BLOCKS_AUTO) { /* forced: the groups, or blocks of `mode` rows and columns */
        const int grp = mode == NF_BLOCKS_GROUPS, size = grp ? 1 : mode;
        int nrb = make_cuts(rcut, out, 0, size, rg, nrg, grp, limit);
        int ncb = make_cuts(ccut, in, nx, size, cg, ncg, grp, limit);
        classify(&best, &m, rcut, nrb, ccut, ncb, nx);
    }
    double best_cost = -1;
    for (int ri = 0; mode == NF_BLOCKS_AUTO && ri < 2 * nsizes; ri++) {
        const int rgroup = ri >= nsizes, rsize = sizes[ri % nsizes];
        if (!rgroup && rsize == 1) continue;
        int nrb = make_cuts(rcut, out, 0, rsize, rg, nrg, rgroup, limit);
        if (nrb < 0) continue;
        for (int ci = 0; ci < 2 * nsizes; ci++) {
            const int cgroup = ci >= nsizes, csize = sizes[ci % nsizes];
            if (!cgroup && csize == 1) continue;
            int ncb = make_cuts(ccut, in, nx, csize, cg, ncg, cgroup, limit);
            if (ncb < 0) continue;
            classify(&cand, &m, rcut, nrb, ccut, ncb, nx);
            double cost = plan_cost(&cand, nx, PLAN_BATCH);
            if (best_cost < 0 || cost < best_cost) {
                best_cost = cost;
                nf_blocks t = best;
                best = cand;
                cand = t;
            }
        }
    }
    /* Scratch for the weight gradient of the largest mixed run; the computed fraction. */
    size_t scratch = 0, area = 0;
    for (int a = 0; a < best.nrb; a++) {
        const size_t rows = (size_t)(best.rb[a + 1] - best.rb[a]);
        for (int b = 0; b < best.ncb; b++) {
            const int cls = best.cls[a * best.ncb + b];
            if (!cls) continue;
            if (cls != 2) {
                area += rows * (size_t)(best.cb[b + 1] - best.cb[b]);
                continue;
            }
            int e = b;
            while (e + 1 < best.ncb && best.cls[a * best.ncb + e + 1] == 2 && best.cb[e + 1] != nx) e++;
            size_t s = rows * (size_t)(best.cb[e + 1] - best.cb[b]);
            area += s; /* the whole mixed run (b .. e) */
            scratch = s > scratch ? s : scratch;
            b = e;
        }
    }
    best.scratch = scratch;
    best.kept = out && in ? (double)area / ((double)out * in) : 0;
    *bk = best;
    free(m.S), free(rg), free(cg), free(rcut), free(ccut);
    nf_blocks_free(&cand);
    return NF_OK;
}

/* ---- products ------------------------------------------------------------------------------------- */

/* Column c of [x | c] as a pointer and row stride. */
static inline const nf_real *col_at(const nf_real *x, const nf_real *c, int nx, int nc, int col, int *ld)
{
    *ld = col < nx ? nx : nc;
    return col < nx ? x + col : c + (col - nx);
}

void nf_blocks_forward(const nf_blocks *bk, nf_real *y, const nf_real *bias, const nf_real *x, const nf_real *c,
                       int nx, int nc, const nf_real *W, int in, int out, int n)
{
    for (int a = 0; a < bk->nrb; a++) {
        const int r0 = bk->rb[a], rows = bk->rb[a + 1] - r0;
        int first = bias != NULL; /* the row block's first product writes bias + its share */
        for (int b = 0; b < bk->ncb; b++) {
            if (!bk->cls[a * bk->ncb + b]) continue;
            int e = run_end(bk, a, b, nx), c0 = bk->cb[b], ld;
            const nf_real *src = col_at(x, c, nx, nc, c0, &ld);
            const int K = bk->cb[e + 1] - c0;
            if (first) nf_gemm_bias(0, 1, n, rows, K, src, ld, W + (size_t)r0 * in + c0, in, bias + r0, y + r0, out);
            else nf_gemm(0, 1, n, rows, K, 1, src, ld, W + (size_t)r0 * in + c0, in, 1, y + r0, out);
            first = 0;
            b = e;
        }
        if (first) /* no input reaches these outputs: the bias alone */
            for (int r = 0; r < n; r++) memcpy(y + (size_t)r * out + r0, bias + r0, (size_t)rows * sizeof *y);
    }
}

void nf_blocks_backward_input(const nf_blocks *bk, nf_real *dx, nf_real *dc, int accumulate, const nf_real *dy,
                              int nx, int nc, const nf_real *W, int in, int out, int n)
{
    for (int b = 0; b < bk->ncb; b++) {
        const int c0 = bk->cb[b], width = bk->cb[b + 1] - c0;
        nf_real *dst = c0 < nx ? dx : dc;
        if (!dst) continue;
        const int ld = c0 < nx ? nx : nc;
        dst += c0 < nx ? c0 : c0 - nx;
        nf_real beta = c0 < nx && !accumulate ? 0 : 1;
        for (int a = 0; a < bk->nrb; a++) {
            if (!bk->cls[a * bk->ncb + b]) continue;
            int e = a;
            while (e + 1 < bk->nrb && bk->cls[(e + 1) * bk->ncb + b]) e++;
            const int r0 = bk->rb[a];
            nf_gemm(0, 0, n, width, bk->rb[e + 1] - r0, 1, dy + r0, out, W + (size_t)r0 * in + c0, in, beta, dst, ld);
            beta = 1;
            a = e;
        }
        if (beta == 0) /* no output sees these columns */
            for (int r = 0; r < n; r++) memset(dst + (size_t)r * ld, 0, (size_t)width * sizeof *dst);
    }
}

/* Computed area of row block a (its share of the weight-gradient work). */
static size_t row_area(const nf_blocks *bk, int a)
{
    size_t w = 0;
    for (int b = 0; b < bk->ncb; b++)
        if (bk->cls[a * bk->ncb + b]) w += (size_t)(bk->cb[b + 1] - bk->cb[b]);
    return w * (size_t)(bk->rb[a + 1] - bk->rb[a]);
}

void nf_blocks_share(const nf_blocks *bk, int part, int parts, int *a0, int *a1)
{
    size_t total = 0, at = 0;
    for (int a = 0; a < bk->nrb; a++) total += row_area(bk, a);
    /* row block a goes to the share its area's midpoint falls in */
    *a0 = *a1 = bk->nrb;
    int first = 1;
    for (int a = 0; a < bk->nrb; a++) {
        size_t w = row_area(bk, a), mid2 = 2 * at + w; /* twice the midpoint */
        at += w;
        int owner = total ? (int)((double)mid2 * parts / (2.0 * (double)total)) : 0;
        owner = owner >= parts ? parts - 1 : owner;
        if (owner == part && first) *a0 = a, first = 0;
        if (owner == part) *a1 = a + 1;
    }
    if (first) *a0 = *a1 = 0;
}

size_t nf_blocks_share_area(const nf_blocks *bk, int part, int parts)
{
    int a0, a1;
    nf_blocks_share(bk, part, parts, &a0, &a1);
    size_t w = 0;
    for (int a = a0; a < a1; a++) w += row_area(bk, a);
    return w;
}

NF_SIMD_CLONES static void nf_blocks_backward_weight_simd(const nf_blocks *bk, const unsigned char *mask, nf_real *dW, int dW_dense,
                                                          nf_real *scratch, const nf_real *dy, const nf_real *x, const nf_real *c, int nx,
                                                          int nc, int in, int out, int n, int a0, int a1)
{
    for (int a = a0; a < a1; a++) {
        const int r0 = bk->rb[a], rows = bk->rb[a + 1] - r0;
        for (int b = 0; b < bk->ncb;) {
            const int cls = bk->cls[a * bk->ncb + b];
            int e = b;
            /* a run: blocks of the same class (dense dW: of the same zero-ness) */
            while (e + 1 < bk->ncb && bk->cb[e + 1] != nx &&
                   (dW_dense ? (bk->cls[a * bk->ncb + e + 1] != 0) == (cls != 0) : bk->cls[a * bk->ncb + e + 1] == cls))
                e++;
            const int c0 = bk->cb[b], width = bk->cb[e + 1] - c0;
            b = e + 1;
            if (!cls) continue;
            int ld;
            const nf_real *src = col_at(x, c, nx, nc, c0, &ld);
            nf_real *at = dW + (size_t)r0 * in + c0;
            if (dW_dense || cls == 1) { /* straight into dW; a dense dW is masked by the caller */
                nf_gemm(1, 0, rows, width, n, 1, dy + r0, out, src, ld, dW_dense ? 0 : 1, at, in);
                continue;
            }
            nf_gemm(1, 0, rows, width, n, 1, dy + r0, out, src, ld, 0, scratch, width);
            for (int r = 0; r < rows; r++) {
                const unsigned char *mr = mask + (size_t)(r0 + r) * in + c0;
                const nf_real *sr = scratch + (size_t)r * width;
                nf_real *gr = at + (size_t)r * in;
#pragma omp simd
                for (int k = 0; k < width; k++) gr[k] += mr[k] ? sr[k] : 0;
            }
        }
    }
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
void nf_blocks_backward_weight(const nf_blocks *bk, const unsigned char *mask, nf_real *dW, int dW_dense,
                               nf_real *scratch, const nf_real *dy, const nf_real *x, const nf_real *c, int nx,
                               int nc, int in, int out, int n, int a0, int a1)
{
    nf_blocks_backward_weight_simd(bk, mask, dW, dW_dense, scratch, dy, x, c, nx, nc, in, out, n, a0, a1);
}
