/* datasets/causal.h - observational data for interventional densities: covariates X, a binary
 * treatment A, an outcome Y, and (for generated data) both potential outcomes Y[0], Y[1], the exact
 * interventional log-densities log p(Y[a] = y) at them and the true propensity P(A = 1 | x).
 *
 * Generators with known answers (formulas in datasets/causal.c):
 *   causal-poly   1-D covariate, 1-D outcome; control X ~ N(b, 1), treated X ~ N(0, 1), half each;
 *                 Y[0] = 1.5 + 2.18 X + e, Y[1] = 2 - 1.82 X + X^2 + e, e ~ N(0, 1).
 *   causal-moons  2-D covariates on two moons, A = the moon's label, Y[a] = rot(theta_a) X + e.
 * The truths are functions of the family and its shift, so they can be evaluated anywhere
 * (nf_causal_truth_logp), for grids and plots as well as the stored units.
 *
 * A unit's data reach the trainer as a "rows" source (datasets/source.h): the row is the outcome y
 * (dy wide), the context is [x, a] (dx + 1 wide).  nf_causal_source wraps the arrays that way.
 *
 * File layout (docs/FORMATS.md, format nf-causal version 1): /x (n, dx), /a (n) 0/1, /y (n, dy);
 * optional /y0, /y1 (n, dy), /logp0_true, /logp1_true (n), /propensity (n); root attributes family
 * ("causal-poly", "causal-moons", "" for imported data) and shift.
 */
#ifndef NF_CAUSAL_H
#define NF_CAUSAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/h5.h"
#include "datasets/source.h"

#define NF_CAUSAL_FORMAT "nf-causal"
#define NF_CAUSAL_FORMAT_VERSION 1

typedef struct nf_causal_data {
    size_t n;
    int dx, dy;
    double *x;             /* (n, dx) covariates */
    double *a;             /* (n) treatment, 0 or 1 */
    double *y;             /* (n, dy) observed outcome Y = Y[A] */
    double *y0, *y1;       /* (n, dy) potential outcomes, NULL when unknown */
    double *logp0, *logp1; /* (n) true log p(Y[a] = y_a) at the unit's potential outcomes, or NULL */
    double *propensity;    /* (n) true P(A = 1 | x), or NULL */
    char family[32];       /* generator ("" for imported data) */
    double shift;          /* causal-poly's b */
} nf_causal_data;

/* Generate n units of a family ("causal-poly", "causal-moons") with its shift (causal-poly: the
 * control covariates' mean b; causal-moons: the rotation angle in radians, 0 means pi/4). */
int nf_causal_make(nf_causal_data *d, const char *family, size_t n, double shift, uint64_t seed);
/* out[i] = log p(Y[arm] = y_i) of the family, y (n, dy) as the family's outcome width. */
int nf_causal_truth_logp(const char *family, double shift, int arm, const double *y, size_t n, double *out);
/* True P(A = 1 | x) of the family at x (n, dx). */
int nf_causal_truth_propensity(const char *family, double shift, const double *x, size_t n, double *out);
/* Mean of Y[arm] under the family (exact). */
int nf_causal_truth_mean(const char *family, double shift, int arm, double *mean);

/* Check a data set: n >= 2, finite x and y, a in {0, 1}, both arms non-empty.  `what` names the
 * data in the message ("data.h5"). */
int nf_causal_validate(const nf_causal_data *d, const char *what);
/* Its two parts: each unit's values (finite x and y, a in {0, 1}; messages number the units from
 * `first`, for a share of a file), and the arms (n >= 2 units of which `treated` are treated, both
 * arms present), which a parallel run checks on counts summed over its processes. */
int nf_causal_validate_units(const nf_causal_data *d, size_t first, const char *what);
int nf_causal_check_arms(size_t n, size_t treated, const char *what);
/* The error for a missing dataset ds of path, whose role `what` names ("treatment, 0/1"), saying
 * how to name another dataset or make such a file.  Returns NF_EDATA. */
int nf_causal_missing(const char *path, const char *ds, const char *what);
int nf_causal_save(const nf_causal_data *d, const char *path);
/* The datasets and attributes of nf_causal_save into an open (created, not yet committed) file. */
int nf_causal_write(nf_h5 *f, const nf_causal_data *d);
/* *out = the units idx[0..m) of d, with every array d has (copies; free with nf_causal_data_free). */
int nf_causal_subset(nf_causal_data *out, const nf_causal_data *d, const size_t *idx, size_t m);
/* Read a causal file (or any HDF5 file with the three datasets: other formats accepted as in
 * nf-data), with the datasets for covariates, treatment and outcome named (NULL: /x, /a, /y),
 * validated. */
int nf_causal_load(nf_causal_data *d, const char *path, const char *xds, const char *ads, const char *yds);
void nf_causal_data_free(nf_causal_data *d);

/* The units as a rows source: row i is y_i, its context [x_i, a_i].  The source owns copies in the
 * build's real type. */
int nf_causal_source(nf_source **s, const nf_causal_data *d);
/* The same rows in new arrays (caller frees): *y (n, dy), *c (n, dx + 1) = [x, a]. */
int nf_causal_rows(const nf_causal_data *d, nf_real **y, nf_real **c);
/* Share `part` of `parts` of a causal file, for data-parallel training (each process of `mpirun
 * nf causal fit`): only units [N part / parts, N (part + 1) / parts) of the covariates, treatment and
 * outcome datasets (NULL: /x, /a, /y) are read, by hyperslab, and checked unit by unit (a share may
 * hold one arm only: nf_model_causal_create_shared checks the arms over all processes).  The rows
 * source has all N units, so every process shuffles and splits the same ones; nf_source_owns says
 * which are in memory, and a batch with others (the initialisation's first training units, the
 * plug-in's reference covariates: the same in every process) reads them from the file by a point
 * selection.  parts = 1 is nf_causal_load then nf_causal_source.  (datasets/causal_share.c) */
int nf_causal_source_share(nf_source **s, const char *path, const char *xds, const char *ads, const char *yds,
                           int part, int parts);

#endif
