/* datasets/dependent_split.h - splitting dependent rows (nf data split): a data file that carries a dependence
 * structure (/group ids, or a kinship matrix /K, dense or as triplets; datasets/dependent_load.h) is
 * split by whole units, so that no two related rows land in different parts: a unit is a group, a
 * family (a connected component of K's graph), or both joined where they overlap.  The units are
 * drawn in a seeded order; each goes to the validation part, else the test part, when it brings that
 * part closer to its fraction of the rows, else to training (so the parts come as close to their
 * fractions as whole units allow, and a unit larger than twice what a part lacks stays out of it).  Each part keeps its rows in the file's order with
 * their group ids (and /rho, the generator's true rho per group, whole) and K restricted to its rows,
 * in the input's form, so `nf fit PART --dependence ...` reads it as it reads the whole file. */
#ifndef NF_DEPENDENT_SPLIT_H
#define NF_DEPENDENT_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/h5.h"

typedef struct nf_dep_split {
    size_t n;               /* rows */
    int64_t *group;         /* (n) group ids, or NULL */
    double *rho;            /* (n_rho) /rho copied whole, or NULL */
    size_t n_rho;
    int kinship;            /* 1: /K present */
    double *dense;          /* (n, n) dense K, or NULL (triplets) */
    int64_t *row, *col;     /* (nnz) triplets */
    double *value;
    size_t nnz;
} nf_dep_split;

/* Read what of the structure the open data file `f` (named `in` in messages) holds for its n rows;
 * *present = 1 if it holds /group or /K.  Errors name the dataset (sizes, indices out of range,
 * ids that are not whole numbers). */
int nf_dep_split_read(nf_h5 *f, const char *in, size_t n, nf_dep_split *s, int *present);
/* The parts by whole units: rows (n) WRITTEN with the train rows, then the validation rows, then the
 * test rows, each ascending; count[k] rows and units[k] units in part k. */
int nf_dep_split_parts(const nf_dep_split *s, const char *in, double val, double test, uint64_t seed, size_t *rows,
                       size_t count[3], size_t units[3]);
/* How many units the rows fall into, and the rows of the largest (nf info). */
int nf_dep_split_count(const nf_dep_split *s, const char *in, size_t *units, size_t *largest);
/* Write the structure of the part of rows[0..m) into f: /group, /rho, /K restricted. */
int nf_dep_split_write(nf_h5 *f, const nf_dep_split *s, const size_t *rows, size_t m);
void nf_dep_split_free(nf_dep_split *s);

#endif
