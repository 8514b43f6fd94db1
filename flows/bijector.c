/* flows/bijector.c - creating and destroying bijector instances; defaults shared by all types. */
#include "flows/bijector.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int nf_bijector_create(nf_bijector *b, const nf_bijector_type *type, int dim, int ctx_dim, const char *name,
                       const char *options, nf_params *P, nf_params *S, nf_rng *rng)
{
    memset(b, 0, sizeof *b);
    if (dim < 1) return nf_error(NF_EINVAL, "%s: dimension %d (expected at least 1)", type->name, dim);
    if (ctx_dim < 0) return nf_error(NF_EINVAL, "%s: context width %d (expected 0 or more)", type->name, ctx_dim);
    b->type = type;
    b->dim = dim;
    b->ctx_dim = ctx_dim;
    snprintf(b->name, sizeof b->name, "%s", name);
    b->P = P;
    b->S = S;
    b->invert_method = NF_INVERT_AUTO;
#ifdef NF_DOUBLE
    b->jacobi_tol = 1e-9;
#else
    b->jacobi_tol = 1e-5;
#endif
    b->jacobi_max_sweeps = dim + 1;
    nf_opts opts;
    nf_opts_init(&opts, type->name);
    int rc = nf_opts_parse(&opts, options ? options : "");
    if (rc == NF_OK) rc = type->create(b, &opts, rng);
    if (rc == NF_OK) {
        rc = nf_opts_check_used(&opts);
        if (rc != NF_OK) nf_bijector_destroy(b);
    }
    if (rc != NF_OK) b->type = NULL;
    return rc;
}

void nf_bijector_destroy(nf_bijector *b)
{
    if (b && b->type && b->type->destroy) b->type->destroy(b);
    if (b) {
        b->state = NULL;
        b->type = NULL;
    }
}

int nf_bijector_check_output(const nf_bijector *b, const nf_real *out, const nf_real *logdet, int n, const char *dir)
{
    const size_t nd = (size_t)n * b->dim;
    for (int i = 0; i < n; i++)
        if (!isfinite(logdet[i]))
            return nf_error(NF_ENONFINITE, "%s: %s log-determinant of row %d is not finite", b->name, dir, i);
    for (size_t k = 0; k < nd; k++)
        if (!isfinite(out[k]))
            return nf_error(NF_ENONFINITE, "%s: %s output row %zu column %zu is not finite", b->name, dir,
                            k / (size_t)b->dim, k % (size_t)b->dim);
    return NF_OK;
}
