/* core/ks.h - the one-sample Kolmogorov-Smirnov test of a sample against a continuous distribution.
 *
 *   D = sup_x |F_n(x) - F(x)|, computed on the values u_i = F(x_i), which are U(0, 1) under the
 *   null: sorted, D = max_i max((i + 1) / n - u_(i), u_(i) - i / n).
 *   p = Q_KS(lambda) = 2 sum_{k >= 1} (-1)^{k-1} exp(-2 k^2 lambda^2),
 *       lambda = (sqrt n + 0.12 + 0.11 / sqrt n) D        (Stephens 1970: within about 1% for n >= 5)
 *
 * The point processes use it for the time-rescaling test (nf_model_tpp_compensators): under the
 * model, the compensators of the inter-event intervals are independent Exp(1), so u = 1 - e^{-L}.
 */
#ifndef NF_KS_H
#define NF_KS_H

#include <stddef.h>

/* D of u (n values in [0, 1], sorted in place) against U(0, 1); 0 when n = 0. */
double nf_ks_uniform(double *u, size_t n);
/* The asymptotic p-value of D for a sample of n (1 when n = 0 or D = 0), in [0, 1]. */
double nf_ks_pvalue(double D, size_t n);

#endif
