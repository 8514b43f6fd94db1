/* distributions/target.h - unnormalised target densities p~(x) for variational (reverse-KL) fitting.
 *
 * A flow q is fit to a target by minimising E_q[log q(x) - log p~(x)] = KL(q || p) - log Z, which
 * needs only log p~ and its gradient at the flow's draws, never the normaliser Z = int p~(x) dx.
 * A target is a const type object (name, summary, log_prob, optional exact sampler, plotting box)
 * and an instance made from a name and "k=v" options:
 *
 *   nf_target *t;
 *   if (nf_target_create(&t, "funnel", "dim=10,sigma=3") != NF_OK) ... nf_strerror_last() ...
 *   nf_target_log_prob(t, n, x, logp, grad);        x (n, dim), logp (n), grad (n, dim) or NULL
 *   nf_target_free(t);
 *
 * Targets compute in double whatever the build's nf_real: they are references that a fitted flow
 * is judged against.  log_prob WRITES logp and grad; an instance is read-only after creation, so one
 * instance may be evaluated from several threads at once.  t->log_z is log Z where it is known
 * exactly (then sum_i exp(log p~(x_i) - log_z) / n-style checks are exact), NAN where it is not.
 * Far outside the mass a log-density may underflow to -inf and a gradient overflow to +-inf.
 *
 * The built-in targets (formulas also above each log_prob in target.c):
 *   u1..u4  the 2-D energies of Rezende & Mohamed (2015, Table 1), p~(z) = exp(-U(z)):
 *           U1 = 1/2 ((|z| - 2) / 0.4)^2 - ln(e^{-1/2 ((z1 - 2)/0.6)^2} + e^{-1/2 ((z1 + 2)/0.6)^2})
 *           w1 = sin(2 pi z1 / 4), w2 = 3 e^{-1/2 ((z1 - 1)/0.6)^2}, w3 = 3 sigmoid((z1 - 1)/0.3)
 *           U2 = 1/2 ((z2 - w1)/0.4)^2                                                + W(z1)
 *           U3 = -ln(e^{-1/2 ((z2 - w1)/0.35)^2} + e^{-1/2 ((z2 - w1 + w2)/0.35)^2})    + W(z1)
 *           U4 = -ln(e^{-1/2 ((z2 - w1)/0.4)^2}  + e^{-1/2 ((z2 - w1 + w3)/0.35)^2})    + W(z1)
 *           Confinement: as printed, U2-U4 do not depend on z1 at large |z1|, so exp(-U) is not
 *           integrable and the reverse KL is unbounded.  We add the smooth wall
 *               W(z1) = 1/2 (z1 / 3.5)^16        (NF_TARGET_WALL = 3.5)
 *           which is below 0.003 for |z1| < 2.5 (the pictures are unchanged), 0.04 at 3, 0.5 at 3.5,
 *           4.2 at 4, and leaves 2e-4 of the mass at |z1| > 4: the plotting box [-4, 4]^2 holds 99.98%
 *           of u2 and u3 (u4's lower band dips to z2 = -4 near z1 = 3, so its box holds 97.4%, as in
 *           the paper's figure).  Because the z2 integral of each of U2-U4 is a Gaussian integral for
 *           every z1, log Z is exact:
 *               log Z = log(s sqrt(2 pi)) + log(2 * 3.5 * 2^{1/16} Gamma(17/16)),
 *               s = 0.4 (u2: 1.95892), 0.35 + 0.35 (u3: 2.51854), 0.4 + 0.35 (u4: 2.58753).
 *           U1 is integrable as printed and has no wall; its log Z has no closed form, so t->log_z is
 *           NAN (2-D quadrature in tests/check_target.c gives 1.877502).
 *           No options (dim=2 is accepted); no exact sampler.
 *   banana  Haario's twisted Gaussian in 2-D, normalised (log_z = 0), exact sampler:
 *               x1 ~ N(0, var),  x2 | x1 ~ N(b (x1^2 - var), 1)       options b=0.1, var=10
 *   funnel  Neal's funnel in D dimensions, normalised (log_z = 0), exact sampler:
 *               v = x_0 ~ N(0, sigma^2),  x_i | v ~ N(0, e^v), i = 1..D-1   options dim=2, sigma=3
 *   gmm     an equal-weight mixture of K isotropic Gaussians in D dimensions, scaled by e^{log_z}:
 *               p~(x) = e^{log_z} (1/K) sum_k N(x; mu_k, scale^2 I)
 *           so Z = e^{log_z} exactly (default log_z = 1.5, NF_TARGET_GMM_LOG_Z); exact sampler.
 *           mu_kj = spread * g_{kD+j}, where g_0, g_1, ... are the successive nf_rng_normal draws of
 *           nf_rng_alloc(seed, 0).   options dim=2, k=4, seed=1, spread=4, scale=1, log_z=1.5
 * Dimensions of dim-chosen targets run up to NF_TARGET_DIM_MAX.
 */
#ifndef NF_TARGET_H
#define NF_TARGET_H

#include "core/opts.h"
#include "core/rng.h"

#define NF_TARGET_DIM_MAX 1024
#define NF_TARGET_WALL 3.5         /* half-width a of the z1 wall 1/2 (z1/a)^16 of u2-u4 */
#define NF_TARGET_GMM_LOG_Z 1.5    /* default log Z of the gmm target */

/* An unnormalised target log-density with its gradient, in double precision. */
typedef struct nf_target nf_target;
typedef struct nf_target_type {
    const char *name;          /* "u1" ... */
    const char *summary;       /* one line for listings / --help */
    int dim;                   /* 0: chosen by the caller (options dim=D) */
    /* logp[i] = log p~(x_i) (unnormalised), grad (n, dim) = d log p~ / dx, may be NULL. Rows x (n, dim). */
    int (*log_prob)(const nf_target *t, size_t n, const double *x, double *logp, double *grad);
    /* optional: exact samples (for tests and plots); NULL if not available */
    int (*sample)(const nf_target *t, nf_rng *rng, size_t n, double *x);
    /* plotting box for 2-D targets: xmin, xmax, ymin, ymax */
    double box[4];
    const char *options_help;  /* "dim=2, sigma=3" (defaults), or "(no options)" */
    /* optional: read options (each read marks the key used), set t->dim when type->dim is 0,
     * t->log_z when known, and t->state; NULL for a target with no options and no state */
    int (*create)(nf_target *t, nf_opts *opts);
    void (*destroy)(nf_target *t);   /* optional: free t->state */
} nf_target_type;

struct nf_target {
    const nf_target_type *type;
    int dim;
    double log_z;              /* log of the normaliser integral of exp(log p~); NAN when unknown */
    char options[256];         /* canonical "k=v,..." as given */
    void *state;
};

extern const nf_target_type nf_target_u1, nf_target_u2, nf_target_u3, nf_target_u4;
extern const nf_target_type nf_target_banana, nf_target_funnel, nf_target_gmm;
extern const nf_target_type *const nf_target_types[];   /* NULL-terminated registry */

/* The registered type called name, or NULL with an NF_EINVAL message listing the names. */
const nf_target_type *nf_target_type_find(const char *name);
/* Make a target from its name and options ("dim=10,k=4,seed=3"; NULL or "" for the defaults).
 * Unknown keys and out-of-range values are refused (NF_EINVAL, naming the target and the key);
 * *t is NULL on failure. */
int nf_target_create(nf_target **t, const char *name, const char *options);
void nf_target_free(nf_target *t);   /* NULL-safe */
/* t->type->log_prob after checking the arguments and that every x is finite (NF_EDATA naming the row
 * and column otherwise).  grad may be NULL. */
int nf_target_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad);
/* n exact draws into x (n, dim); NF_EINVAL when the target has no exact sampler. */
int nf_target_sample(const nf_target *t, nf_rng *rng, size_t n, double *x);

#endif
