/* flows/jacobi.h - solving x = g(x) for a map whose outputs depend only on inputs earlier in an order:
 * the slow direction of every autoregressive flow (MAF sampling, IAF density, TarFlow sampling).
 *
 * Each entry of x has a degree in 1..depth, and g's output of degree k reads only inputs of degree
 * < k.  For an autoregressive bijector y = f(x) with conditioner theta(x), g(x) = f^-1(y; theta(x))
 * elementwise: run the conditioner on the current estimate, invert the elementwise map.  Two ways:
 *
 *   sequential  for k = 1..depth: update the entries of degree k from g(current)  (exact, depth passes)
 *   Jacobi      x^{t+1} = g(x^t) for all entries at once, until max |x^{t+1} - x^t| <= tol or
 *               max_sweeps passes; often far fewer than depth passes when the map is contracting.
 *
 * After t Jacobi sweeps from ANY start the entries of degree <= t are exact (induction on the degree),
 * so Jacobi never needs more than depth sweeps and stops there; AUTO runs Jacobi up to max_sweeps and,
 * if it has not converged, finishes with sequential passes for the degrees max_sweeps+1..depth,
 * which gives the sequential result exactly (and with depth <= 2, where Jacobi cannot save a pass,
 * AUTO is sequential from the start).  If a Jacobi iterate becomes non-finite (a wild first
 * guess can overflow an exp), AUTO restarts sequentially from x0 and JACOBI reports NF_ENONFINITE.
 *
 * A batch is many independent systems, one per row: nf_jacobi_solve_rows() iterates them in lockstep
 * and lets each row stop as soon as its own largest change has been within tol for two sweeps in a
 * row, so every sweep runs g only on the rows still moving (and AUTO's sequential finish only on the
 * rows that need it).
 *
 * The caller provides g as a sweep callback and the iterate buffer; nothing is allocated here.
 */
#ifndef NF_JACOBI_H
#define NF_JACOBI_H

#include "flows/bijector.h"

/* One pass of g over the entries whose degree is in lo..hi: x_new[e] = g(x_old)[e] for those, every
 * other entry of x_new left as it is.  x_new may equal x_old (sequential passes run in place: read
 * what you need from x_old before writing).  Returns NF_OK or an error code (which aborts the solve).
 * Jacobi sweep t asks for degrees max(1, t-1)..depth: the lower ones are exact in both iterate
 * buffers by then, so only the entries still moving are recomputed. */
typedef int (*nf_jacobi_sweep_fn)(void *user, nf_real *x_new, const nf_real *x_old, int lo, int hi);

typedef struct nf_jacobi_config {
    nf_invert_method method;   /* AUTO, SEQUENTIAL or JACOBI */
    double tol;                /* Jacobi stops when max |x^{t+1} - x^t| <= tol (a row: two sweeps running) */
    int max_sweeps;            /* Jacobi cap (>= 1) */
    int depth;                 /* largest degree: sequential passes for an exact solution (>= 1) */
} nf_jacobi_config;

typedef struct nf_jacobi_result {
    int sweeps;                /* passes of g used in all (Jacobi sweeps + sequential passes) */
    int jacobi_sweeps;         /* of which Jacobi sweeps */
    int converged;             /* 1: exact (sequential or depth sweeps) or within tol */
    int fell_back;             /* AUTO finished sequentially */
    double last_change;        /* max |x^{t+1} - x^t| of each row's last Jacobi sweep (0 if none) */
} nf_jacobi_result;

/* Solve x = g(x) starting from x0 (len entries; x0 is not modified and must not alias x or tmp).
 * tmp (len) holds the second iterate.  The solution is left in x. */
int nf_jacobi_solve(const nf_jacobi_config *cfg, nf_jacobi_sweep_fn sweep, void *user, nf_real *x,
                    const nf_real *x0, nf_real *tmp, size_t len, nf_jacobi_result *res);

/* The row-wise form: the sweep acts on the rows listed in rows[0..nrows) (ascending), or on every
 * row when rows is NULL; entries of other rows must be left as they are. */
typedef int (*nf_jacobi_rows_fn)(void *user, nf_real *x_new, const nf_real *x_old, const int *rows, int nrows,
                                 int lo, int hi);

/* Solve x_r = g(x)_r for every row r of x (rows, width), each row its own system with the degrees
 * of cfg, from x0 (not modified, aliasing neither x nor tmp); tmp (rows, width) holds the second
 * iterate, iwork (3 rows ints) the row lists and flags.  Each row stops when its own max change has
 * been <= tol in two consecutive sweeps (or after depth sweeps); res->sweeps counts calls of sweep
 * (the passes of the slowest row).  Non-finite iterates and the sweep cap are handled per row as for
 * nf_jacobi_solve. */
int nf_jacobi_solve_rows(const nf_jacobi_config *cfg, nf_jacobi_rows_fn sweep, void *user, nf_real *x,
                         const nf_real *x0, nf_real *tmp, int rows, size_t width, int *iwork, nf_jacobi_result *res);

/* The configuration an autoregressive bijector uses: b's method, tol and cap, with depth given. */
nf_jacobi_config nf_jacobi_config_of(const nf_bijector *b, int depth);

#endif
