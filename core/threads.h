/* core/threads.h - a small pool of worker threads for the passes that share work: products
 * (core/blas.c) and network passes (nn/).
 *
 * nf_threads_run(T, nparts, fn, arg) runs fn(arg, p, nparts) for every part p = 0..nparts-1 on up to
 * T threads, the caller included, and returns when all parts are done.  Parts are claimed one at a
 * time by whichever thread gets there first, so a worker that is slow to start (asleep, or waiting
 * for a busy core) costs nothing: the caller takes its parts.  A part must therefore compute the same
 * thing whichever thread runs it; then results do not depend on thread count or timing.
 *
 * Why not OpenMP: on the benchmark machine (a 2-core VM) with OMP_WAIT_POLICY=PASSIVE, which nf
 * uses so idle threads do not spin against busy cores, every parallel region paid ~200 us to wake
 * its sleeping worker and again to wake the caller at the join, as much as a network pass takes.
 * Workers here wait for the next job spinning (yielding the core whenever another thread wants it)
 * for up to NF_THREADS_SPIN_US after each job, then sleep; a training step's passes follow each
 * other closely enough that the worker is awake for all but the first.  The caller never sleeps.
 *
 * Runs serially (in part order) when T <= 1 or nparts <= 1, inside a part or an OpenMP parallel
 * region, or while another thread is running a job.  Workers are created on first use and live until
 * the process ends (a forked child starts without any).
 */
#ifndef NF_THREADS_H
#define NF_THREADS_H

#include <stddef.h>

#define NF_THREADS_MAX 16
#define NF_THREADS_SPIN_US 300

typedef void nf_part_fn(void *arg, int part, int nparts);

void nf_threads_run(int threads, int nparts, nf_part_fn *fn, void *arg);
/* The same job in two halves, for work that can run beside the caller's own: nf_threads_start
 * hands the parts to the pool's workers (up to threads - 1 of them) and returns at once; the caller
 * goes on (its own nf_threads_run calls then run serially, the workers being busy) and later calls
 * nf_threads_finish, which runs the parts no worker has taken and returns when all are done.
 * Returns 0, having started nothing, where nf_threads_run would run serially (threads <= 1, inside a
 * part, the pool busy); then the caller runs the parts itself.  One started job at a time per
 * process; start and finish on the same thread, with no fork in between. */
int nf_threads_start(int threads, int nparts, nf_part_fn *fn, void *arg);
void nf_threads_finish(void);
/* Items 0..n-1 as fn(arg, i0, i1) over `threads` contiguous ranges (multiples of `align` items but
 * the last; one range on the caller when threads <= 1 or n <= align): a large elementwise or row
 * pass on the pool instead of an OpenMP region, whose sleeping worker (OMP_WAIT_POLICY=PASSIVE)
 * costs a wake-up at its start and at its join, where the pool's worker is usually still spinning
 * from the job before.  Each item must be computed the same whichever range holds it. */
typedef void nf_range_fn(void *arg, size_t i0, size_t i1);
void nf_threads_ranges(int threads, size_t n, size_t align, nf_range_fn *fn, void *arg);
/* 1 inside a part run by nf_threads_run or inside an OpenMP parallel region. */
int nf_threads_in_parallel(void);

#endif
