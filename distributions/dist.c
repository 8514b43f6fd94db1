/* distributions/dist.c - creating and destroying base distributions, and the registry of types.
 *
 * nf_dist_create fills the common fields, reads the "k=v" options through nf_opts (the type's
 * create() reads what it knows), and then refuses any option nobody read, naming it, so that a typo
 * in "base=gmm(kk=4)" is an error and never silently ignored.
 */
#include "distributions/dist.h"

#include <stdio.h>
#include <string.h>

const nf_dist_type *const nf_dist_types[] = {&nf_dist_normal, &nf_dist_diag_normal, &nf_dist_gmm, NULL};

const nf_dist_type *nf_dist_type_find(const char *name)
{
    if (name)
        for (int i = 0; nf_dist_types[i]; i++)
            if (strcmp(nf_dist_types[i]->name, name) == 0) return nf_dist_types[i];
    char known[256] = "";
    size_t at = 0;
    for (int i = 0; nf_dist_types[i] && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", nf_dist_types[i]->name);
    nf_error(NF_EINVAL, "unknown base distribution '%s': expected one of %s", name ? name : "(null)", known);
    return NULL;
}

int nf_dist_create(nf_dist *d, const nf_dist_type *type, int dim, const char *name, const char *options,
                   nf_params *P, nf_params *S, nf_rng *rng)
{
    if (!d) return nf_error(NF_EINVAL, "nf_dist_create: the distribution must not be NULL");
    memset(d, 0, sizeof *d);
    /* A NULL type usually comes straight from nf_dist_type_find, whose message says which name failed. */
    if (!type) return nf_strerror_last()[0] ? NF_EINVAL : nf_error(NF_EINVAL, "nf_dist_create: no distribution type");
    if (dim < 1) return nf_error(NF_EINVAL, "%s: dimension %d, expected at least 1", type->name, dim);
    if (!name || !name[0]) name = type->name;
    if (strlen(name) >= sizeof d->name)
        return nf_error(NF_EINVAL, "%s: name '%s' is longer than %zu characters", type->name, name,
                        sizeof d->name - 1);
    d->type = type;
    d->dim = dim;
    strcpy(d->name, name);
    d->P = P;
    d->S = S;

    nf_opts opts;
    nf_opts_init(&opts, type->name);
    int rc = options ? nf_opts_parse(&opts, options) : NF_OK;
    if (rc == NF_OK) rc = type->create(d, &opts, rng);
    if (rc != NF_OK) {
        nf_dist_destroy(d);
        return rc;
    }
    if ((rc = nf_opts_check_used(&opts)) != NF_OK) {
        nf_dist_destroy(d);
        return rc;
    }
    return NF_OK;
}

void nf_dist_destroy(nf_dist *d)
{
    if (!d) return;
    if (d->type && d->type->destroy) d->type->destroy(d);
    d->state = NULL;
}
