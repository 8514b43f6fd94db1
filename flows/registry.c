/* flows/registry.c - every bijector type by its spec name.  Adding a bijector: one NF_TYPE line and
 * one entry in the table. */
#include <string.h>

#include "flows/bijector.h"

#define NF_TYPE(sym) extern const nf_bijector_type sym;
NF_TYPE(nf_bijector_affine_coupling)
NF_TYPE(nf_bijector_additive_coupling)
NF_TYPE(nf_bijector_spline_coupling)
NF_TYPE(nf_bijector_maf)
NF_TYPE(nf_bijector_iaf)
NF_TYPE(nf_bijector_spline_ar)
NF_TYPE(nf_bijector_spline_iaf)
NF_TYPE(nf_bijector_actnorm)
NF_TYPE(nf_bijector_batchnorm)
NF_TYPE(nf_bijector_lu)
NF_TYPE(nf_bijector_permute)
NF_TYPE(nf_bijector_fftconv)
NF_TYPE(nf_bijector_logit)
NF_TYPE(nf_bijector_sigmoid)
NF_TYPE(nf_bijector_standardize)
NF_TYPE(nf_bijector_coupling2d)
NF_TYPE(nf_bijector_squeeze)
NF_TYPE(nf_bijector_split)
NF_TYPE(nf_bijector_actnorm2d)
NF_TYPE(nf_bijector_conv1x1)
NF_TYPE(nf_bijector_tarflow)

const nf_bijector_type *const nf_bijector_types[] = {
    &nf_bijector_affine_coupling, &nf_bijector_additive_coupling, &nf_bijector_spline_coupling,
    &nf_bijector_maf, &nf_bijector_iaf, &nf_bijector_spline_ar, &nf_bijector_spline_iaf,
    &nf_bijector_actnorm, &nf_bijector_batchnorm, &nf_bijector_lu, &nf_bijector_permute,
    &nf_bijector_fftconv, &nf_bijector_logit, &nf_bijector_sigmoid, &nf_bijector_standardize,
    &nf_bijector_coupling2d,
    &nf_bijector_squeeze, &nf_bijector_split, &nf_bijector_actnorm2d, &nf_bijector_conv1x1,
    &nf_bijector_tarflow,
};
const size_t nf_bijector_ntypes = sizeof nf_bijector_types / sizeof nf_bijector_types[0];

const nf_bijector_type *nf_bijector_type_find(const char *name)
{
    for (size_t i = 0; i < nf_bijector_ntypes; i++)
        if (nf_bijector_types[i] && strcmp(nf_bijector_types[i]->name, name) == 0) return nf_bijector_types[i];
    return NULL;
}
