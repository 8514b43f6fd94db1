/* flows/elementwise.h - numerically stable scalar helpers shared by the elementwise bijectors
 * (logit, sigmoid): the logistic function and softplus in the build's real type. */
#ifndef NF_ELEMENTWISE_H
#define NF_ELEMENTWISE_H

#include <math.h>

#include "core/error.h"

#ifdef NF_DOUBLE
#define NF_EW_EXP exp
#define NF_EW_LOG log
#define NF_EW_LOG1P log1p
#else
#define NF_EW_EXP expf
#define NF_EW_LOG logf
#define NF_EW_LOG1P log1pf
#endif

/* sigma(z) = 1 / (1 + e^-z), without overflow for either sign of z. */
static inline nf_real nf_ew_sigmoid(nf_real z)
{
    if (z >= 0) return 1 / (1 + NF_EW_EXP(-z));
    nf_real e = NF_EW_EXP(z);
    return e / (1 + e);
}

/* softplus(z) = log(1 + e^z) = max(z, 0) + log1p(e^-|z|); -softplus(-z) = log sigma(z). */
static inline nf_real nf_ew_softplus(nf_real z)
{
    return (z > 0 ? z : 0) + NF_EW_LOG1P(NF_EW_EXP(-(z > 0 ? z : -z)));
}

#endif
