/* core/ks.c - the one-sample Kolmogorov-Smirnov statistic and p-value (formulas in ks.h). */
#include "core/ks.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double nf_ks_uniform(double *u, size_t n)
{
    qsort(u, n, sizeof *u, cmp_double);
    double D = 0;
    for (size_t i = 0; i < n; i++)
        D = fmax(D, fmax((double)(i + 1) / (double)n - u[i], u[i] - (double)i / (double)n));
    return D;
}

double nf_ks_pvalue(double D, size_t n)
{
    if (!n || !(D > 0)) return 1;
    const double sn = sqrt((double)n), lam = (sn + 0.12 + 0.11 / sn) * D;
    if (lam < 0.2) return 1; /* Q_KS(0.2) = 1 - 5e-13, and below it the series is all cancellation */
    double q = 0;
    for (int k = 1; k <= 100; k++) {
        const double term = exp(-2.0 * k * k * lam * lam);
        q += (k % 2 ? 2 : -2) * term;
        if (term < 1e-300) break;
    }
    return fmin(fmax(q, 0), 1);
}
