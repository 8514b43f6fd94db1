/* nn/nn_internal.h - what the files of nn/ share and nobody else needs: the nf_mlp structure, its
 * workspace layout, the MADE degree and mask builders, and the re-initialisation of a linear layer. */
#ifndef NF_NN_INTERNAL_H
#define NF_NN_INTERNAL_H

#include "core/blas.h"
#include "core/threads.h"
#include "nn/nn.h"

/* Above this many entries, elementwise loops are split over threads. */
#define NF_NN_PAR_MIN 32768
/* Split an elementwise loop of n entries over threads (the pool's ranges, nf_nn_ranges, or an OpenMP
 * region)?  Not inside a part of a shared pass or a parallel region, where it would only cost a
 * hand-off. */
static inline int nf_nn_par(size_t n) { return n > NF_NN_PAR_MIN && !nf_threads_in_parallel(); }
/* y += x (n entries; nn/transformer_block.c). */
void nf_nn_add(nf_real *y, const nf_real *x, size_t n);
/* nf_threads_ranges on the product threads when nf_nn_par(work), else on the caller alone. */
static inline void nf_nn_ranges(size_t n, size_t align, size_t work, nf_range_fn *fn, void *arg)
{
    nf_threads_ranges(nf_nn_par(work) ? nf_blas_get_threads() : 1, n, align, fn, arg);
}
/* Row sums in a fixed order: lane l of NF_LANES sums the terms i = l, l + NF_LANES, ... in order
 * (NF_LANE_SUM adds TERM, an expression in i, for i = 0..n-1), then the lanes are halved in a tree,
 * lane l + w into lane l for w = 8, 4, 2, 1 (nf_lane_tree, nf_lane_tree_d): the order the AVX-512
 * kernels of nn/ keep in registers (nn/simd512.h), so both give the same bits. */
#define NF_LANES 16
#define NF_LANE_SUM(lane, n, TERM)                                                                                 \
    do {                                                                                                           \
        for (int i0 = 0; i0 + NF_LANES <= (n); i0 += NF_LANES) {                                                   \
            _Pragma("omp simd") for (int l = 0; l < NF_LANES; l++) {                                               \
                const int i = i0 + l;                                                                              \
                lane[l] += (TERM);                                                                                 \
            }                                                                                                      \
        }                                                                                                          \
        for (int i = (n) / NF_LANES * NF_LANES; i < (n); i++) lane[i % NF_LANES] += (TERM);                        \
    } while (0)

static inline nf_real nf_lane_tree(nf_real *lane)
{
    for (int w = NF_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    return lane[0];
}

static inline double nf_lane_tree_d(double *lane)
{
    for (int w = NF_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    return lane[0];
}

/* Threads that share one network pass at most (each needs its own scratch for masked blocks). */
#define NF_NN_MAX_THREADS 8

/* A masked weight (out, in) cut into blocks (nn/blocks.c): rows at rb[0..nrb], columns at cb[0..ncb]
 * (always cut at the data/context boundary); cls[a * ncb + b] is 0 when block (a, b) is all masked
 * (its products are skipped), 1 when all kept, 2 when mixed. */
typedef struct nf_blocks {
    int nrb, ncb;
    int *rb, *cb;
    unsigned char *cls;
    size_t scratch;            /* nf_reals the weight gradient of the mixed blocks needs */
    double kept;               /* fraction of the weight inside computed blocks */
} nf_blocks;

/* Plan modes: the cost model's choice; exactly the groups of identical rows and columns; none (the
 * network then multiplies densely; only nf_mlp_replan takes it); a positive mode forces blocks of
 * that many rows and columns (tests use the forced modes to reach mixed and fine blocks). */
enum { NF_BLOCKS_AUTO = 0, NF_BLOCKS_GROUPS = -1, NF_BLOCKS_NONE = -2 };
/* Plan the cuts of a mask (out, in) with nx data columns, then in - nx context columns. */
int nf_blocks_plan(nf_blocks *bk, const unsigned char *mask, int out, int in, int nx, int mode);
void nf_blocks_free(nf_blocks *bk);
/* y (n, out) = bias + [x | c] W^T over the non-zero blocks (bias NULL: y +=); x (n, nx), c (n, nc),
 * W (out, in), bias (out). */
void nf_blocks_forward(const nf_blocks *bk, nf_real *y, const nf_real *bias, const nf_real *x, const nf_real *c,
                       int nx, int nc, const nf_real *W, int in, int out, int n);
/* dx (=|+=) dy W[:, :nx] (accumulate), dc += dy W[:, nx:]; either may be NULL. */
void nf_blocks_backward_input(const nf_blocks *bk, nf_real *dx, nf_real *dc, int accumulate, const nf_real *dy,
                              int nx, int nc, const nf_real *W, int in, int out, int n);
/* Rows [rb[a0], rb[a1]) of dW += dy^T [x | c] on the kept entries of mask (mixed blocks go through
 * scratch, bk->scratch entries); dW_dense = 1 instead writes the non-zero blocks of those rows
 * (=, not +=, unmasked) for the caller to mask. */
void nf_blocks_backward_weight(const nf_blocks *bk, const unsigned char *mask, nf_real *dW, int dW_dense,
                               nf_real *scratch, const nf_real *dy, const nf_real *x, const nf_real *c, int nx,
                               int nc, int in, int out, int n, int a0, int a1);
/* The row blocks a0..a1 of share `part` of `parts`, balanced by computed area (may be empty). */
void nf_blocks_share(const nf_blocks *bk, int part, int parts, int *a0, int *a1);
/* The computed area (rows times kept columns) of that share. */
size_t nf_blocks_share_area(const nf_blocks *bk, int part, int parts);

/* Linear layers with a block plan (NULL: dense products); nf_linear_forward_cat and _backward_cat are
 * these with bk = NULL. */
size_t nf_linear_workspace_blocks(const nf_linear *L, const nf_blocks *bk);
void nf_linear_forward_blocks(const nf_linear *L, const nf_blocks *bk, const nf_params *P, nf_real *ws, nf_real *y,
                              const nf_real *x, const nf_real *c, int nc, int accumulate, int n);
void nf_linear_backward_blocks(const nf_linear *L, const nf_blocks *bk, nf_params *P, nf_real *ws, nf_real *dx,
                               nf_real *dc, const nf_real *dy, const nf_real *x, const nf_real *c, int nc,
                               int accumulate, int n);
/* The same in pieces, for threads sharing a pass: prepare writes the effective weight (weight norm)
 * into ws once; apply (forward) and grad_input run on any rows of the batch; grad_params adds the
 * bias and weight gradients of share `part` of `parts` (<= NF_NN_MAX_THREADS) of W's rows over the
 * whole batch, so shares never write the same entry. */
void nf_linear_prepare(const nf_linear *L, const nf_params *P, nf_real *ws);
void nf_linear_apply(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *y,
                     const nf_real *x, const nf_real *c, int nc, int accumulate, int n);
/* y = res + x W^T + b (a residual skip: the same numbers as copying res into y and applying with
 * accumulate = 1, one pass over y fewer). */
void nf_linear_apply_res(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *y,
                         const nf_real *res, const nf_real *x, int n);
void nf_linear_grad_input(const nf_linear *L, const nf_blocks *bk, const nf_params *P, const nf_real *ws, nf_real *dx,
                          nf_real *dc, const nf_real *dy, int nc, int accumulate, int n);
void nf_linear_grad_params(const nf_linear *L, const nf_blocks *bk, nf_params *P, nf_real *ws, const nf_real *dy,
                           const nf_real *x, const nf_real *c, int nc, int n, int part, int parts);

/* Layer norm in the same pieces: dx on any rows; dgamma, dbeta on columns c0..c1 over all n rows. */
void nf_layernorm_grad_input(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *dy,
                             const nf_real *x, const nf_real *cache, int n);
void nf_layernorm_grad_params(const nf_layernorm *L, nf_params *P, const nf_real *dy, const nf_real *x,
                              const nf_real *cache, int n, int c0, int c1);

struct nf_mlp {
    nf_mlp_config cfg;
    double slope;              /* leaky relu slope */
    int nlin;                  /* plain: fc0..fc{L-1}, out; residual: in, (fc0, fc1) per block, out */
    nf_linear *lin;
    int nln;                   /* plain: one per hidden layer; residual: two per block */
    nf_layernorm *ln;
    size_t *lin_ws;            /* offset of each linear's scratch in the workspace */
    size_t fixed_ws;           /* all linear scratch; the activations follow */
    int out_ctx;               /* context columns also fed to the output linear (MADE with hidden layers) */
    int *deg;                  /* MADE: input degrees (in) */
    int *hdeg;                 /* MADE: hidden degrees (hidden), sorted ascending */
    unsigned char *masks;      /* MADE: every mask, one allocation */
    nf_blocks *blocks;         /* MADE: the block plan of each linear (nlin) */
    double flops_per_row;      /* products of one row's forward pass (threading threshold) */
    int param_order[NF_NN_MAX_THREADS]; /* block plans: the weight-gradient shares, largest first */
};

/* The block plan of linear l (NULL: dense products). */
static inline const nf_blocks *nf_mlp_blocks(const nf_mlp *m, int l) { return m->blocks ? &m->blocks[l] : NULL; }

/* MADE: plan the block cuts again in an NF_BLOCKS_* mode (or a forced block size); the workspace
 * size may change.  A plain network ignores it. */
int nf_mlp_replan(nf_mlp *m, int mode);

/* Threads for one network pass over n rows with `flops` of products: 1 inside a parallel part,
 * below NF_NN_PAR_FLOPS or with fewer than NF_NN_MIN_ROWS rows a thread; else nf_blas_get_threads()
 * (at most NF_NN_MAX_THREADS).  A pass runs as jobs of core/threads.h: forward is one job whose
 * parts (one per thread) are slices of the batch's rows, each running every layer on its rows with
 * one-thread products; backward is two, the chain of input gradients on slices of rows, then the
 * parameter gradients in shares of every weight's rows (over the whole batch; one share a thread,
 * or, with block plans, NF_NN_MAX_THREADS shares balanced by computed area, largest first).  Two or three hand-offs per
 * network and step, where splitting every product would cost one per product; and a part computes
 * the same whichever thread runs it, so results do not depend on the thread count. */
#define NF_NN_PAR_FLOPS 4e6
#define NF_NN_MIN_ROWS 16
int nf_nn_threads(int n, double flops);

/* Per-batch part of the workspace (after fixed_ws), and the passes on rows r0..r1 of a batch of n
 * (arrays keep the whole batch's layout), then the parameter gradients' share `part` of `parts`. */
size_t nf_mlp_plain_workspace(const nf_mlp *m, int n);
void nf_mlp_plain_forward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                               const nf_real *ctx, int n, int r0, int r1);
void nf_mlp_plain_backward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int r0, int r1);
void nf_mlp_plain_backward_params(const nf_mlp *m, nf_params *P, nf_real *ws, const nf_real *dy, const nf_real *x,
                                  const nf_real *ctx, int n, int part, int parts);
size_t nf_mlp_residual_workspace(const nf_mlp *m, int n);
void nf_mlp_residual_forward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                                  const nf_real *ctx, int n, int r0, int r1);
void nf_mlp_residual_backward_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                                   const nf_real *dy, const nf_real *x, const nf_real *ctx, int n, int r0, int r1);
void nf_mlp_residual_backward_params(const nf_mlp *m, nf_params *P, nf_real *ws, const nf_real *dy,
                                     const nf_real *x, const nf_real *ctx, int n, int part, int parts);

/* W, b ~ U(-bound, bound); masked entries zero; with weight norm g_j = |V_j|. */
void nf_linear_init_uniform(nf_linear *L, nf_params *P, double bound, nf_rng *rng);

/* MADE (nn/made.c).  deg (D): input degrees 1..D in the given order (rng for NF_ORDER_RANDOM). */
int nf_made_input_degrees(int *deg, int D, int order, nf_rng *rng);
/* m (H): hidden degrees k % max(1, D-1) + min(1, D-1) (MADE / nflows), then sorted ascending. */
void nf_made_hidden_degrees(int *m, int H, int D);
/* (H, D+C): hidden unit k sees input i iff m_k >= deg_i, and every context column. */
void nf_made_mask_input(unsigned char *mask, const int *m, int H, const int *deg, int D, int C);
/* (H, H): unit k' of the next layer sees unit k iff m_k' >= m_k. */
void nf_made_mask_hidden(unsigned char *mask, const int *m, int H);
/* (D*opi, H+C): output i*opi + k sees hidden unit h iff deg_i > m_h, and every context column. */
void nf_made_mask_output(unsigned char *mask, const int *deg, int D, int opi, const int *m, int H, int C);
/* (D*opi, D+C), no hidden layer: output i*opi + k sees input j iff deg_i > deg_j, and every context column. */
void nf_made_mask_direct(unsigned char *mask, const int *deg, int D, int opi, int C);

/* The QK RMS norm of attention over `rows` rows of dh values (row r of a matrix at base + r ld):
 * out_r = g u_r / rms(u_r) and rstd[r ldr] = 1 / rms(u_r) (rstd may be NULL; out may be u), and its
 * backward du_r = r (g dy_r - xhat_r mean(g dy_r xhat_r)), adding dy_r xhat_r to dg (dh; NULL: not)
 * row by row in order.  vector = 1 takes sixteen rows at a time
 * where nn/attention_avx512.c can (the same bits as vector = 0, the row-at-a-time reference). */
void nf_attention_rms_rows(nf_real *out, size_t ldo, nf_real *rstd, size_t ldr, const nf_real *u, size_t ldu,
                           const nf_real *g, int rows, int dh, int vector);
void nf_attention_rms_rows_backward(nf_real *du, size_t lddu, const nf_real *dy, size_t lddy, const nf_real *u,
                                    size_t ldu, const nf_real *rstd, size_t ldr, const nf_real *g, int rows, int dh,
                                    int vector, nf_real *dg);

/* Attention's softmax of one row of scores in place (len entries, padded to `padded` with zeros;
 * stat = (max, 1/sum) when not NULL) and its backward (s = dP in, dS out), on nn/attention_avx512.c's
 * kernels where vector = 1 and they can run (the same bits as vector = 0). */
void nf_attention_softmax_row(nf_real *s, int len, int padded, nf_real *stat, int vector);
void nf_attention_softmax_grad_row(const nf_real *p, nf_real *s, int n, nf_real scale, int vector);

/* nf_layernorm_forward and nf_layernorm_grad_input, on nn/layernorm_avx512.c's kernels where
 * vector = 1 and they can run (the same bits as vector = 0, the portable code). */
void nf_layernorm_forward_rows(const nf_layernorm *L, const nf_params *P, nf_real *y, nf_real *cache,
                               const nf_real *x, int n, int vector);
void nf_layernorm_grad_input_rows(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *dy,
                                  const nf_real *x, const nf_real *cache, int n, int vector);
/* dx = base + dL/dx instead of dx += (base NULL: written; base == dx: added); backward likewise. */
void nf_layernorm_grad_input_onto(const nf_layernorm *L, const nf_params *P, nf_real *dx, const nf_real *base,
                                  const nf_real *dy, const nf_real *x, const nf_real *cache, int n, int vector);
void nf_layernorm_backward_onto(const nf_layernorm *L, nf_params *P, nf_real *dx, const nf_real *base,
                                const nf_real *dy, const nf_real *x, const nf_real *cache, int n);

#endif
