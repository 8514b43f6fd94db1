/* datasets/dependent_load.h - dependence structures from HDF5 files (layouts in docs/FORMATS.md).
 *
 *   equi     a group id per row: an integer dataset of n entries (n x 1 also accepted), usually in
 *            the data file itself (/group); equal ids share a block;
 *   kinship  a kinship matrix K for the n rows: dense, a dataset /K (n x n, float or double), or
 *            sparse, a group /K with an attribute n (the matrix size) and /K/row, /K/col (integers)
 *            and /K/value (reals) triplets, each (i, j, v) setting K_ij = K_ji = v (entries not given
 *            are 0; a repeated pair is an error).
 *
 * An nf_dep_source names the file and dataset (kept in the model file so nf fit --resume and nf eval
 * can attach the same structure again); nf_dep_load reads it for n rows and builds the structure
 * (distributions/dependent.h), with one error naming the file and dataset for every problem: missing,
 * wrong size, ids that are not integers, indices out of range, K not symmetric or not PSD.
 */
#ifndef NF_DEPENDENT_LOAD_H
#define NF_DEPENDENT_LOAD_H

#include "core/h5.h"
#include "distributions/dependent.h"

typedef struct nf_dep_source {
    nf_dep_kind kind;       /* NF_DEP_EQUI or NF_DEP_KINSHIP */
    char path[1024];        /* the HDF5 file */
    char dataset[256];      /* "/group", "/K" */
    int per_block;          /* equi: one rho per block (1) or shared (0) */
} nf_dep_source;

int nf_dep_load(nf_dep **out, const nf_dep_source *s, size_t n);
/* A 1-D (or n x 1) dataset of whole numbers (read as doubles and checked; `what` names them in the
 * error): *out (count entries), the caller's to free. */
int nf_dep_read_integers(nf_h5 *f, const char *path, const char *what, int64_t **out, size_t *count);

#endif
