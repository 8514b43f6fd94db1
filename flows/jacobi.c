/* flows/jacobi.c - sequential and Jacobi solutions of x = g(x) for autoregressive g (see jacobi.h).
 *
 * The batch is solved row by row in lockstep: every Jacobi sweep runs g on the rows still moving,
 * and a row leaves the sweep as soon as its own largest change has been within the tolerance for
 * two sweeps in a row (its iterate is copied to x then), so late sweeps, which only a few slow rows
 * need, cost little.  Why two: on a strongly coupled map the error travels along the order a few
 * entries a sweep, and while its front crosses entries that hardly depend on what comes before
 * (a TarFlow's background patches) a single sweep can move nothing by more than the tolerance and
 * stop the row far from its solution (a trained TarFlow on 32 x 32 shapes: one image of 64 off by
 * 135 of 256 grey levels at tol 1e-3, and by 3.6 at 1e-4, where two sweeps in a row give 0.23).
 * Rows still moving at the cap (AUTO) or whose iterate blew up finish with sequential passes.
 */
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

/* max |a - b| over len entries, or +inf if any entry of a is not finite. */
static double max_change(const nf_real *a, const nf_real *b, size_t len)
{
    double m = 0;
    int bad = 0;
    for (size_t i = 0; i < len; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        bad |= !isfinite((double)a[i]);
        m = d > m ? d : m;
    }
    return bad ? INFINITY : m;
}

/* Sequential passes for the degrees first..depth, in place, on the listed rows (NULL: all). */
static int sequential(const nf_jacobi_config *cfg, nf_jacobi_rows_fn sweep, void *user, nf_real *x, const int *list,
                      int m, int first, nf_jacobi_result *res)
{
    for (int k = first; k <= cfg->depth; k++) {
        NF_TRY(sweep(user, x, x, list, m, k, k));
        res->sweeps++;
    }
    return NF_OK;
}

int nf_jacobi_solve_rows(const nf_jacobi_config *cfg, nf_jacobi_rows_fn sweep, void *user, nf_real *x,
                         const nf_real *x0, nf_real *tmp, int rows, size_t width, int *iwork, nf_jacobi_result *res)
{
    memset(res, 0, sizeof *res);
    if (cfg->depth < 1) return nf_error(NF_EINVAL, "Jacobi solve: depth %d; expected at least 1", cfg->depth);
    if (cfg->method != NF_INVERT_AUTO && cfg->method != NF_INVERT_SEQUENTIAL && cfg->method != NF_INVERT_JACOBI)
        return nf_error(NF_EINVAL, "Jacobi solve: inversion method %d is unknown; expected auto (0), sequential (1) "
                        "or jacobi (2)", (int)cfg->method);
    if (rows < 1) return NF_OK;
    memcpy(x, x0, (size_t)rows * width * sizeof(nf_real));
    /* AUTO with depth <= 2: Jacobi would need as many passes as the exact solution (unless the map
     * is the identity), so take the exact one */
    if (cfg->method == NF_INVERT_SEQUENTIAL || (cfg->method == NF_INVERT_AUTO && cfg->depth <= 2)) {
        NF_TRY(sequential(cfg, sweep, user, x, NULL, rows, 1, res));
        res->converged = 1;
        return NF_OK;
    }
    /* iwork: the rows still moving (act, m of them), the rows whose iterate blew up (bad, nb), and
     * per row whether its last sweep's change was within tol (calm) */
    int *act = iwork, *bad = iwork + rows, *calm = iwork + 2 * (size_t)rows, m = rows, nb = 0;
    for (int r = 0; r < rows; r++) act[r] = r, calm[r] = 0;
    const int cap = cfg->max_sweeps > 0 ? cfg->max_sweeps : 1;
    nf_real *cur = x, *nxt = tmp;
    double moving = 0; /* largest change of the rows still moving after the last sweep */
    while (m > 0) {
        /* after t sweeps the degrees <= t are exact; the buffer written now last held sweep t-1,
         * exact up to degree t-2, so degrees from t-1 on are recomputed (every moving row has had
         * the same sweeps, so this holds row by row) */
        int t = res->jacobi_sweeps + 1, lo = t - 1 > 1 ? t - 1 : 1;
        NF_TRY(sweep(user, nxt, cur, m == rows ? NULL : act, m, lo, cfg->depth));
        res->sweeps++;
        res->jacobi_sweeps++;
        /* after depth sweeps every degree is exact, whatever the change says */
        int keep = 0, exact = res->jacobi_sweeps >= cfg->depth;
        moving = 0;
        for (int i = 0; i < m; i++) {
            const size_t at = (size_t)act[i] * width;
            double change = max_change(nxt + at, cur + at, width);
            if (!isfinite(change)) {
                bad[nb++] = act[i];
                continue;
            }
            const int within = change <= cfg->tol, settled = within && calm[act[i]];
            calm[act[i]] = within;
            if (settled || exact) {
                if (change > res->last_change) res->last_change = change;
                if (nxt != x) memcpy(x + at, nxt + at, width * sizeof(nf_real));
                continue;
            }
            act[keep++] = act[i];
            moving = change > moving ? change : moving;
        }
        m = keep;
        nf_real *swap = cur;
        cur = nxt;
        nxt = swap;
        if (res->jacobi_sweeps >= cap) break;
    }
    /* rows still moving: their last iterate is in cur */
    for (int i = 0; cur != x && i < m; i++)
        memcpy(x + (size_t)act[i] * width, cur + (size_t)act[i] * width, width * sizeof(nf_real));
    if (m > 0 && moving > res->last_change) res->last_change = moving;
    res->converged = m == 0 && nb == 0;
    if (res->converged) return NF_OK;
    if (cfg->method == NF_INVERT_JACOBI) {
        if (nb)
            return nf_error(NF_ENONFINITE, "Jacobi solve: sweep %d produced a non-finite iterate in row %d (the "
                            "iteration diverged; sequential or auto inversion avoids this)",
                            res->jacobi_sweeps, bad[0]);
        return NF_OK; /* not converged: the estimate after max_sweeps, as asked */
    }
    /* AUTO: finish sequentially.  Rows still moving are exact up to degree jacobi_sweeps; rows that
     * blew up start over from x0 and need every pass.  Both lists are ascending; from the first pass
     * the moving rows need, one merged list (in act, which has room for both) serves both groups. */
    res->fell_back = 1;
    for (int i = 0; i < nb; i++)
        memcpy(x + (size_t)bad[i] * width, x0 + (size_t)bad[i] * width, width * sizeof(nf_real));
    const int first_moving = res->jacobi_sweeps + 1;
    for (int k = 1; k <= cfg->depth; k++) {
        if (k == first_moving && nb > 0) { /* merge bad into act, from the back */
            int i = m - 1, j = nb - 1, o = m + nb - 1;
            while (j >= 0) act[o--] = i >= 0 && act[i] > bad[j] ? act[i--] : bad[j--];
            m += nb;
            nb = 0;
        }
        const int *list = k < first_moving ? bad : act;
        const int cnt = k < first_moving ? nb : m;
        if (!cnt) continue;
        NF_TRY(sweep(user, x, x, cnt == rows ? NULL : list, cnt, k, k));
        res->sweeps++;
    }
    res->converged = 1;
    return NF_OK;
}

/* One system of len entries: the row solver with a single row. */
typedef struct one_row {
    nf_jacobi_sweep_fn fn;
    void *user;
} one_row;

static int one_row_sweep(void *user, nf_real *x_new, const nf_real *x_old, const int *rows, int nrows, int lo, int hi)
{
    (void)rows;
    const one_row *o = user;
    return nrows > 0 ? o->fn(o->user, x_new, x_old, lo, hi) : NF_OK;
}

int nf_jacobi_solve(const nf_jacobi_config *cfg, nf_jacobi_sweep_fn sweep, void *user, nf_real *x,
                    const nf_real *x0, nf_real *tmp, size_t len, nf_jacobi_result *res)
{
    one_row o = {sweep, user};
    int iwork[3];
    return nf_jacobi_solve_rows(cfg, one_row_sweep, &o, x, x0, tmp, 1, len, iwork, res);
}
