/* flows/jacobi.c - sequential and Jacobi solutions of x = g(x) for autoregressive g (see jacobi.h). */
#include "flows/jacobi.h"

#include <math.h>
#include <string.h>

nf_jacobi_config nf_jacobi_config_of(const nf_bijector *b, int depth)
{
    nf_jacobi_config c;
    c.method = b->invert_method;
    c.tol = b->jacobi_tol;
    c.max_sweeps = b->jacobi_max_sweeps;
    c.depth = depth;
    return c;
}

/* Passes for the degrees first..depth in place: exact once the degrees below `first` are. */
static int sequential(const nf_jacobi_config *cfg, nf_jacobi_sweep_fn sweep, void *user, nf_real *x, int first,
                      nf_jacobi_result *res)
{
    for (int k = first; k <= cfg->depth; k++) {
        NF_TRY(sweep(user, x, x, k, k));
        res->sweeps++;
    }
    return NF_OK;
}

/* max |a - b|, or +inf if any entry of a is not finite. */
static double max_change(const nf_real *a, const nf_real *b, size_t len)
{
    double m = 0;
    for (size_t i = 0; i < len; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!isfinite((double)a[i])) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

int nf_jacobi_solve(const nf_jacobi_config *cfg, nf_jacobi_sweep_fn sweep, void *user, nf_real *x,
                    const nf_real *x0, nf_real *tmp, size_t len, nf_jacobi_result *res)
{
    memset(res, 0, sizeof *res);
    if (cfg->depth < 1) return nf_error(NF_EINVAL, "Jacobi solve: depth %d; expected at least 1", cfg->depth);
    if (cfg->method != NF_INVERT_AUTO && cfg->method != NF_INVERT_SEQUENTIAL && cfg->method != NF_INVERT_JACOBI)
        return nf_error(NF_EINVAL, "Jacobi solve: inversion method %d is unknown; expected auto (0), sequential (1) "
                        "or jacobi (2)", (int)cfg->method);
    memcpy(x, x0, len * sizeof(nf_real));
    if (cfg->method == NF_INVERT_SEQUENTIAL) {
        NF_TRY(sequential(cfg, sweep, user, x, 1, res));
        res->converged = 1;
        return NF_OK;
    }
    const int cap = cfg->max_sweeps > 0 ? cfg->max_sweeps : 1;
    nf_real *cur = x, *nxt = tmp;
    int nonfinite = 0;
    for (;;) {
        /* after t sweeps the degrees <= t are exact; the buffer written now last held sweep t-1,
         * exact up to degree t-2, so degrees from t-1 on are recomputed */
        int t = res->jacobi_sweeps + 1, lo = t - 1 > 1 ? t - 1 : 1;
        NF_TRY(sweep(user, nxt, cur, lo, cfg->depth));
        res->sweeps++;
        res->jacobi_sweeps++;
        double change = max_change(nxt, cur, len);
        nf_real *swap = cur;
        cur = nxt;
        nxt = swap;
        res->last_change = change;
        if (!isfinite(change)) {
            nonfinite = 1;
            break;
        }
        /* after depth sweeps every degree is exact, whatever the change says */
        if (change <= cfg->tol || res->jacobi_sweeps >= cfg->depth) {
            res->converged = 1;
            break;
        }
        if (res->jacobi_sweeps >= cap) break;
    }
    if (cur != x) memcpy(x, cur, len * sizeof(nf_real));
    if (res->converged) return NF_OK;
    if (cfg->method == NF_INVERT_JACOBI) {
        if (nonfinite)
            return nf_error(NF_ENONFINITE, "Jacobi solve: sweep %d produced a non-finite iterate (the iteration "
                            "diverged; sequential or auto inversion avoids this)", res->jacobi_sweeps);
        return NF_OK; /* not converged: the estimate after max_sweeps, as asked */
    }
    /* AUTO: finish sequentially.  The degrees <= jacobi_sweeps are already exact unless the
     * iterate blew up, in which case start over from x0. */
    res->fell_back = 1;
    int first = res->jacobi_sweeps + 1;
    if (nonfinite) {
        memcpy(x, x0, len * sizeof(nf_real));
        first = 1;
    }
    NF_TRY(sequential(cfg, sweep, user, x, first, res));
    res->converged = 1;
    return NF_OK;
}
