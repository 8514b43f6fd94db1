/* datasets/ds_internal.h - small helpers shared by the data set files (not installed API). */
#ifndef NF_DS_INTERNAL_H
#define NF_DS_INTERNAL_H

#include <math.h>

#define NF_DS_LOG_2PI 1.8378770664093454836
#define NF_DS_PI 3.14159265358979323846
#define NF_DS_SQRT2 1.41421356237309504880

/* log(exp(a) + exp(b)) without overflow; -inf + -inf = -inf. */
static inline double nf_ds_logaddexp(double a, double b)
{
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* log N(x; mu, s^2) in one dimension. */
static inline double nf_ds_lognormal1(double x, double mu, double s)
{
    double z = (x - mu) / s;
    return -0.5 * z * z - log(s) - 0.5 * NF_DS_LOG_2PI;
}

/* Error context for OpenMP loops: worker threads cannot record nf_error messages for the caller
 * (messages are per thread), so they note the first failing index and the caller reports it. */
typedef struct nf_ds_fail {
    int code;
    size_t index;
} nf_ds_fail;

#endif
