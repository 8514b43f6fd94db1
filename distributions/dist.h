/* distributions/dist.h - base distributions of flows: log-density, sampling and gradients.
 *
 * Same shape as bijectors: a const type object and an instance with its dimension and slices in the
 * model's parameter store.  log_prob works on a whole batch and WRITES logp[i]; idx (may be NULL)
 * gives each row's index in the data set, for bases that couple the latents of different points.
 * backward ACCUMULATES dz += dL/dz and P->grad += dL/dtheta given dlogp = dL/dlogp_i.
 * sample WRITES z (and logp if not NULL); sample_backward (optional, for reverse-KL training)
 * accumulates the parameter gradients of a reparameterised draw given dL/dz and dL/dlogp.
 * Sums over dimensions accumulate in double.
 */
#ifndef NF_DIST_H
#define NF_DIST_H

#include "core/opts.h"
#include "core/params.h"
#include "core/rng.h"

typedef struct nf_dist nf_dist;
typedef struct nf_dist_type nf_dist_type;

struct nf_dist {
    const nf_dist_type *type;
    int dim;
    char name[64];
    nf_params *P, *S;
    void *state;
};

struct nf_dist_type {
    const char *name;          /* "normal", "diag-normal", "gmm" */
    const char *options_help;
    int (*create)(nf_dist *d, nf_opts *opts, nf_rng *rng);
    void (*destroy)(nf_dist *d);
    int (*log_prob)(nf_dist *d, nf_real *logp, const nf_real *z, const size_t *idx, int n);
    int (*backward)(nf_dist *d, nf_real *dz, const nf_real *dlogp, const nf_real *z, const size_t *idx, int n);
    int (*sample)(nf_dist *d, nf_real *z, nf_real *logp, int n, nf_rng *rng);
    int (*sample_backward)(nf_dist *d, const nf_real *dz, const nf_real *dlogp, const nf_real *z, int n);
};

int nf_dist_create(nf_dist *d, const nf_dist_type *type, int dim, const char *name, const char *options,
                   nf_params *P, nf_params *S, nf_rng *rng);
void nf_dist_destroy(nf_dist *d);

extern const nf_dist_type nf_dist_normal;       /* standard normal, no parameters */
extern const nf_dist_type nf_dist_diag_normal;  /* learnable mean and log-scale */
extern const nf_dist_type nf_dist_gmm;          /* mixture: weights, means, diagonal log-scales */
extern const nf_dist_type *const nf_dist_types[];
const nf_dist_type *nf_dist_type_find(const char *name);

#endif
