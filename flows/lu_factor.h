/* flows/lu_factor.h - the LU-factored invertible d x d matrix shared by the lu bijector (flows/lu.c,
 * a map of the whole vector) and conv1x1 (flows/conv1x1.c, the same matrix on every pixel's channels).
 * Internal to flows/.
 *
 *   W = P L U',   U' = U + diag(sign e^{log_s}),   log|det W| = sum_i log_s_i
 *
 * P is a fixed permutation ((P A)_i = A_{perm_i}), L unit lower triangular, U strictly upper.
 * Parameters (in P, registered in this order): "<name>.lower" (d(d-1)/2, the strict lower triangle of
 * L row by row), "<name>.upper" (the strict upper triangle of U row by row), "<name>.log_s" (d); both
 * triangles are absent for d = 1.  State (in S): "<name>.perm" (d) and "<name>.sign" (d, +-1).
 *
 * A caller keeps an nf_lu_factor (offsets only) and hands the helpers a scratch of
 * NF_LU_FACTOR_WS(d) reals laid out as
 *   Lf (d, d) | Uf (d, d) | W (d, d) | dW (d, d) | dM (d, d) | dU (d, d)
 * assemble() fills Lf, Uf (and W); the caller writes dL/dW into dW and chain() turns it into the
 * gradients of the factors.  Rows of a batch are mapped as Y = X W^T.
 */
#ifndef NF_LU_FACTOR_H
#define NF_LU_FACTOR_H

#include "core/params.h"
#include "core/rng.h"

typedef struct nf_lu_factor {
    int d;
    size_t lower, upper, log_s; /* offsets in P (lower, upper unused when d = 1) */
    size_t perm, sign;          /* offsets in S: (d) each */
} nf_lu_factor;

#define NF_LU_FACTOR_WS(d) (6 * (size_t)(d) * (size_t)(d))
/* The assembled matrices in the scratch. */
#define NF_LU_FACTOR_L(ws, d) (ws)
#define NF_LU_FACTOR_U(ws, d) ((ws) + (size_t)(d) * (d))
#define NF_LU_FACTOR_W(ws, d) ((ws) + 2 * (size_t)(d) * (d))
#define NF_LU_FACTOR_DW(ws, d) ((ws) + 3 * (size_t)(d) * (d))

/* Register the slices under `name` (see above). */
int nf_lu_factor_add(nf_lu_factor *f, int d, const char *name, nf_params *P, nf_params *S);
/* Set the factors to those of a Haar-random rotation (QR of a Gaussian matrix from rng, then LU with
 * partial pivoting); with rng NULL, the identity. */
int nf_lu_factor_init(const nf_lu_factor *f, nf_params *P, nf_params *S, nf_rng *rng);
/* NF_EDATA naming the bijector (type, name) unless the stored perm is a permutation of 0..d-1 and every sign is +-1 (a
 * corrupt or foreign state would index out of bounds).  Uses the dM slot of ws as scratch; cheap
 * (O(d)), so forward and inverse call it before assemble(). */
int nf_lu_factor_check(const nf_lu_factor *f, const nf_params *S, nf_real *ws, const char *type, const char *name);
/* sum_i log_s_i = log|det W|. */
double nf_lu_factor_logdet(const nf_lu_factor *f, const nf_params *P);
/* Lf = L, Uf = U'; with_w: W = P L U' as well. */
void nf_lu_factor_assemble(const nf_lu_factor *f, const nf_params *P, const nf_params *S, nf_real *ws, int with_w);
/* Rows of X (m, d; leading dimension ldx) hold Z P (x_{perm_k} = z_k, scattered by the caller);
 * overwrite them with Z W^{-T}, the rows x = W^{-1} z, by two triangular solves.  Needs Lf, Uf. */
void nf_lu_factor_solve(const nf_lu_factor *f, const nf_real *ws, nf_real *x, int ldx, int m);
/* Rows of H (m, d; ldh) hold dX; overwrite them with dX U'^{-1} L^{-1} = G P, so that g_k = h_{perm_k}
 * gives G = dX W^{-1} (the caller gathers).  Needs Lf, Uf. */
void nf_lu_factor_solve_transposed(const nf_lu_factor *f, const nf_real *ws, nf_real *h, int ldh, int m);
/* dL/dW in the dW slot to the factors' gradients, ADDED into P->grad; ldcoef is dL/dlog|det W|. */
void nf_lu_factor_chain(const nf_lu_factor *f, nf_params *P, const nf_params *S, nf_real *ws, double ldcoef);

#endif
