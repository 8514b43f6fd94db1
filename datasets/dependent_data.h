/* datasets/dependent_data.h - synthetic dependent data with known marginal densities (the 2-D sets of
 * Kirchler, Lippert, Kloft, ICML 2023): Gaussian inputs g (n x 2) correlated across points, mapped
 * row by row to a 2-D shape; every row's g is N(0, I) marginally, so every row's marginal density
 * is known exactly, and i.i.d. validation and test sets come from the same map of independent g.
 *
 * Shapes (x1 = g1, and x2 = m(x1) + s g2, so log p(x) = log N(x1; 0, 1) + log N(x2; m(x1), s^2)):
 *   sign           m = sign(x1) + x1,   s^2 = e^-3
 *   abs            m = |x1| - 1,        s^2 = e^-3
 *   crescent       m = x1^2 / 2 - 1,    s^2 = e^-2
 *   sine           m = sin(5 x1),       s^2 = e^-2
 *   crescent-cube  m = x1^3 / 5,        s^2 = 1, and the columns swapped: x = (x2, x1)
 *
 * Structures of g across points (each column of g independently):
 *   equi      blocks of sizes 1 + round(Pareto(0.5)) (the Lomax draw U^-2 - 1), capped at 1000 and at
 *             the points left; rho per block uniform in [0.5, 0.99];
 *             g_i = sqrt(rho) c_block + sqrt(1 - rho) e_i;
 *   kinship   Sigma = lambda I + (1 - lambda) K, K sparse and positive definite with unit diagonal,
 *             relatives drawn one of two ways:
 *     families  (the default) families of the equi blocks' sizes, K_ij = kappa_f for two members of
 *               family f, kappa_f uniform in [0.5, 0.99], 0 across families: a shared family effect;
 *               g_i = sqrt(lambda) e_i + sqrt(1 - lambda) (sqrt(kappa_f) c_f + sqrt(1 - kappa_f) e'_i);
 *     pedigree  K = D^-1/2 C C^T D^-1/2, C unit lower triangular with up to two entries per row,
 *               uniform in [0.5, 0.99], at random earlier columns (each point's "parents");
 *               g = sqrt(lambda) e + sqrt(1 - lambda) D^-1/2 C e'.  Relatives correlate by about 0.2
 *               at lambda = 0.5, too little to bias i.i.d. training (bench/RESULTS.md).
 */
#ifndef NF_DEPENDENT_DATA_H
#define NF_DEPENDENT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "distributions/dependent.h"

#define NF_DEP_SHAPES "sign|abs|crescent|sine|crescent-cube"

typedef enum nf_dep_relatives { NF_DEP_FAMILIES, NF_DEP_PEDIGREE } nf_dep_relatives;
#define NF_DEP_RELATIVES "families|pedigree"

typedef struct nf_dep_data {
    size_t n;
    double *x;              /* (n, 2) */
    double *logp;           /* (n) exact marginal log-density of each row */
    nf_dep_kind kind;
    /* equi */
    int64_t *group;         /* (n) block of each row, 0..n_blocks-1 */
    size_t n_blocks;
    double *rho;            /* (n_blocks) */
    /* kinship: K's upper triangle (row <= col) with the diagonal, as triplets */
    nf_dep_relatives relatives;
    size_t nnz;
    int64_t *row, *col;     /* (nnz) */
    double *val;            /* (nnz) */
    double lambda;
} nf_dep_data;

/* 1 if name is one of NF_DEP_SHAPES. */
int nf_dep_shape_known(const char *name);
/* Map g (n x 2) to x (n x 2) and the marginal log-density (may be NULL). */
int nf_dep_shape_apply(const char *name, const double *g, size_t n, double *x, double *logp);
/* n dependent rows of a shape under a structure (kinship: lambda in (0, 1) and how relatives are drawn;
 * equi ignores both). */
int nf_dep_data_make(nf_dep_data *d, const char *shape, nf_dep_kind kind, nf_dep_relatives relatives, size_t n,
                     double lambda, nf_rng *rng);
void nf_dep_data_free(nf_dep_data *d);
/* n i.i.d. rows of a shape with their exact log-densities. */
int nf_dep_data_iid(const char *shape, size_t n, nf_rng *rng, double *x, double *logp);

#endif
