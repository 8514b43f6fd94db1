/* tests/testutil.h - helpers shared by the Check suites: random inputs, relative errors,
 * and the table-driven bijector checks (round trip, brute-force Jacobian log-determinant,
 * finite-difference gradients) that every bijector suite runs. */
#ifndef NF_TESTUTIL_H
#define NF_TESTUTIL_H

#include <check.h>
#include <pthread.h>

#include "core/error.h"
#include "flows/bijector.h"
#include "training/trainer.h"

/* |a - b| / max(|a|, |b|, floor): a relative error that tolerates values near zero. */
double nf_test_relerr(double a, double b, double floor);
/* Fill x with uniform values in [lo, hi) from a seeded stream. */
void nf_test_fill_uniform(nf_real *x, size_t n, double lo, double hi, uint64_t seed);
void nf_test_fill_normal(nf_real *x, size_t n, double scale, uint64_t seed);
/* m saved to a temporary model file (empty metadata) and opened again: the copy a later process
 * would read (asserts that both succeed; the file is removed). */
struct nf_model;
struct nf_model *nf_test_model_reopen(const struct nf_model *m);

/* Tolerances that depend on the build: tight in double, loose in float. */
#ifdef NF_DOUBLE
#define NF_TEST_TOL_ROUNDTRIP 1e-9
#define NF_TEST_TOL_GRAD 1e-6
#else
#define NF_TEST_TOL_ROUNDTRIP 2e-4
#define NF_TEST_TOL_GRAD 5e-2
#endif

/* Table-driven bijector checks (tests/testutil.c). */
typedef struct nf_bij_case {
    const char *type_name;   /* registry name, e.g. "affine-coupling" */
    const char *options;     /* "hidden=16,layers=2" */
    int dim, ctx_dim;
    double input_scale;      /* inputs ~ N(0, input_scale^2); 0 means 1.3 */
    int no_inverse_grad;     /* 1: inverse_backward not supported */
    int skip_param_randomize;/* 1: keep initial parameters (otherwise perturbed so maps are not identity) */
    int training;            /* run with b->training = 1 */
} nf_bij_case;

/* Where a case's inputs come from, for maps whose domain is not all of R^D (logit's data in [0, 1],
 * sigmoid's latents in (0, 1)) and for data-dependent state.  Kept apart from nf_bij_case so the
 * suites' positional tables need no new initialisers (-Wextra warns about missing trailing fields);
 * an all-zero nf_bij_inputs (or NULL) means the defaults above. */
typedef struct nf_bij_inputs {
    double lo, hi;  /* when hi > lo: x ~ U(lo, hi) instead of N(0, input_scale^2); the latents fed to the
                       inverse (forward(inverse(z)), inverse gradients) are forward images of such x; and
                       the far-tail row moves each entry to 1/25 of its distance from the nearer bound
                       instead of outward, so it stays inside the domain */
    int init_data;  /* 1: set the type's data-dependent state with type->init_data(x) before the checks */
    double param_noise; /* standard deviation of the noise added to the parameters; 0 means 0.25 */
} nf_bij_inputs;

/* Each returns 0 on success; on failure it ck_assert's with a message naming the case. */
void nf_check_bijector_roundtrip(const nf_bij_case *c);
void nf_check_bijector_logdet(const nf_bij_case *c);        /* brute-force Jacobian, in the build's precision */
void nf_check_bijector_gradients(const nf_bij_case *c);     /* params, inputs, context */
void nf_check_bijector_inverse_gradients(const nf_bij_case *c);
/* All of the above that apply to this build. */
void nf_check_bijector_all(const nf_bij_case *c);
/* The same on inputs drawn as `in` says (NULL: as nf_check_bijector_all). */
void nf_check_bijector_all_inputs(const nf_bij_case *c, const nf_bij_inputs *in);

/* A bijector with its own stores and a workspace for n rows, for a suite's specific tests: type by
 * name, dimension D, context C, options, built with the stream `seed`, then (noise > 0) every
 * parameter moved by noise * N(0, 1) from the same stream so the map is not the identity.  Returns
 * the create's code (the stores are freed on failure); nf_test_bij_free(NULL-safe fields) after. */
typedef struct nf_test_bij {
    nf_bijector b;
    nf_params *P, *S;
    nf_real *ws;
} nf_test_bij;
int nf_test_bij_make(nf_test_bij *m, const char *type, int D, int C, const char *opts, uint64_t seed, int n,
                     double noise);
void nf_test_bij_free(nf_test_bij *m);
/* P's values += scale * N(0, 1) from a stream of its own. */
void nf_test_perturb(nf_params *P, double scale, uint64_t seed);

/* Two threads standing in for the two processes of a parallel run: comm[r] is rank r's
 * nf_train_comm (sums of up to 64 doubles and their maxima, in-place sums of nf_real buffers of
 * up to max_real entries), every call a barrier of both threads.  Each side adds the two buffers in
 * the same order (rank 0 + rank 1), so both receive the same bits. */
typedef struct nf_test_pair nf_test_pair;
struct nf_test_pair {
    nf_train_comm comm[2];
    /* internal */
    pthread_barrier_t bar;
    double d[2][64];
    const nf_real *r[2];
    nf_real *scratch[2];
    struct nf_test_pair_side {
        nf_test_pair *pair;
        int rank;
    } side[2];
};
int nf_test_pair_init(nf_test_pair *p, size_t max_real);
void nf_test_pair_destroy(nf_test_pair *p);
/* Run fn(arg[0]) and fn(arg[1]) in two threads and wait for both. */
void nf_test_pair_run(void *(*fn)(void *), void *arg0, void *arg1);

#endif
