/* datasets/dataset.h - built-in data sets with known densities: samplers, true log-densities,
 * entropy estimates and train/val/test splits.
 *
 * A data set is a const type object (like gsl_rng_type) found by name in nf_dataset_types[], and an
 * instance built from it with nf_dataset_alloc(), which holds whatever the type needs (a random
 * mixture's means and Cholesky factors, a teacher flow).  The two-dimensional sets follow the
 * definitions of FFJORD (moons, circles, rings, 8gaussians, pinwheel, 2spirals, checkerboard,
 * swissroll) and of the neural spline flow paper (crescent, sinewave); docs/DATASETS.md writes each
 * one down.  Two sets have a dimension chosen by the caller: gmm (a seeded random Gaussian mixture)
 * and teacher (a seeded random normalizing flow).
 *
 * Every set knows its log-density, either in closed form (NF_DENSITY_EXACT) or computed per point
 * (NF_DENSITY_NUMERICAL: adaptive GSL quadrature over the latent curve parameter for moons,
 * swissroll and 2spirals, root finding for the pinwheel's preimages; relative error about 1e-9);
 * type->density_method says how, in words stored in data files.  A log-density may be -INFINITY
 * outside the support (checkerboard).  Everything is double precision (the teacher computes in the
 * flow's nf_real).
 *
 *   nf_dataset *ds;
 *   nf_dataset_alloc(&ds, "moons", NULL);           // NULL options: defaults
 *   nf_dataset_sample(ds, rng, n, x, logp);         // x (n, ds->dim), logp (n) or NULL
 *   nf_dataset_free(ds);
 *
 * Sampling is single-threaded and reproducible from the rng; log_prob may run on OpenMP threads.
 * The GSL error handler is switched off while a numerical density is computed (a quadrature that
 * fails comes back as NF_ENOCONV naming the point) and restored afterwards.
 */
#ifndef NF_DATASET_H
#define NF_DATASET_H

#include "core/rng.h"

typedef enum nf_density_kind {
    NF_DENSITY_NONE = 0,      /* no known density */
    NF_DENSITY_EXACT = 1,     /* closed form */
    NF_DENSITY_NUMERICAL = 2  /* quadrature per point */
} nf_density_kind;

/* Options for the sets that have them; nf_dataset_opts_default() fills the defaults. */
typedef struct nf_dataset_opts {
    int dim;               /* gmm, teacher: dimension D (default 4); ignored by the 2-D sets */
    int components;        /* gmm: number of components K (default 5) */
    uint64_t model_seed;   /* gmm means/covariances, teacher parameters (default 1) - not the
                              sampling seed, so train and test files drawn with different seeds
                              share one distribution */
    const char *flow;      /* teacher: preset name (default "maf") or a flow spec, see flows/flow.h */
} nf_dataset_opts;

#define NF_DATASET_DEFAULT_DIM 4
#define NF_DATASET_DEFAULT_COMPONENTS 5
#define NF_DATASET_DEFAULT_MODEL_SEED 1
#define NF_DATASET_DEFAULT_FLOW "maf"

typedef struct nf_dataset nf_dataset;
typedef struct nf_dataset_type nf_dataset_type;

struct nf_dataset {
    const nf_dataset_type *type;
    int dim;
    nf_dataset_opts opts;  /* a copy; opts.flow points into flow_name */
    char flow_name[256];
    void *state;           /* type-specific */
};

struct nf_dataset_type {
    const char *name;           /* "moons" */
    const char *summary;        /* one line for listings */
    int dim;                    /* 0: chosen by opts->dim */
    nf_density_kind density;
    const char *density_method; /* stored in data files: "exact: ..." or "numerical quadrature: ..." */
    int sample_gives_logp;      /* 1: sample() also fills logp (when not NULL) */
    /* Optional: build ds->state from ds->opts; NULL if stateless. */
    int (*create)(nf_dataset *ds);
    void (*destroy)(nf_dataset *ds);
    /* x (n, dim) from rng; logp (n) too when sample_gives_logp and logp != NULL. */
    int (*sample)(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp);
    /* logp[i] = log p(x_i); NULL when the density is unknown. */
    int (*log_prob)(nf_dataset *ds, size_t n, const double *x, double *logp);
};

/* The registry (datasets/dataset.c), NULL-terminated, in listing order. */
extern const nf_dataset_type *const nf_dataset_types[];
/* NULL and an NF_EINVAL message listing the known names if there is no such set. */
const nf_dataset_type *nf_dataset_type_find(const char *name);

void nf_dataset_opts_default(nf_dataset_opts *o);
/* Build an instance; o == NULL means defaults.  Refuses dim outside 1..1024 (gmm, teacher) and
 * components outside 1..1000 (gmm). */
int nf_dataset_alloc(nf_dataset **ds, const char *name, const nf_dataset_opts *o);
void nf_dataset_free(nf_dataset *ds);   /* NULL is harmless */

/* x (n, dim) drawn from rng; logp (n) the true log-densities, or NULL to skip them. */
int nf_dataset_sample(nf_dataset *ds, nf_rng *rng, size_t n, double *x, double *logp);
/* logp[i] = log p(x_i) for any points (n, dim); NF_EINVAL if the density is unknown. */
int nf_dataset_log_prob(nf_dataset *ds, size_t n, const double *x, double *logp);
/* One call: alloc, sample, free. */
int nf_dataset_make(const char *name, const nf_dataset_opts *o, size_t n, nf_rng *rng, double *x,
                    double *logp);

/* Entropy estimate H = -mean(logp) and its standard error sd(logp)/sqrt(n).  Refuses n < 2 and
 * non-finite values (a sample point outside the support means the density is wrong). */
int nf_entropy_from_logp(const double *logp, size_t n, double *H, double *stderr_);
/* The same from a fresh sample of n points drawn from rng. */
int nf_dataset_entropy(nf_dataset *ds, nf_rng *rng, size_t n, double *H, double *stderr_);

/* Seeded shuffle of 0..n-1 into perm, cut into count[0] train, count[1] validation and count[2]
 * test rows (perm[0..count[0]-1] are the training rows, and so on).  The validation and test
 * counts are round(n * frac); fractions must be in [0, 1) and leave at least one training row. */
int nf_dataset_split(size_t n, double val_frac, double test_frac, uint64_t seed, size_t *perm,
                     size_t count[3]);

/* gmm only: the mixture's exact mean (dim) and covariance (dim, dim), row-major. */
int nf_dataset_gmm_moments(const nf_dataset *ds, double *mean, double *cov);

/* The sets (toy2d.c, curves2d.c, pinwheel.c, data_gmm.c, teacher.c). */
extern const nf_dataset_type nf_dataset_moons, nf_dataset_circles, nf_dataset_rings, nf_dataset_8gaussians,
    nf_dataset_pinwheel, nf_dataset_2spirals, nf_dataset_checkerboard, nf_dataset_swissroll,
    nf_dataset_crescent, nf_dataset_sinewave, nf_dataset_gmm, nf_dataset_teacher;

#endif
