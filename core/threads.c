/* core/threads.c - the worker pool of nf_threads_run (see threads.h).
 *
 * One job at a time.  The caller publishes a job (fn, arg, nparts) and a new generation in `state`
 * = generation << 32 | next unclaimed part; every thread claims parts by compare-and-swap on state,
 * runs them, and counts them in `done`; the caller returns when done == nparts.  A claim only
 * succeeds while state still holds the job's generation and a part number below nparts.  When every
 * part is done the caller closes the job (part number CLOSED, above any nparts) before it writes
 * the next job's fields: otherwise a worker holding the finished job's state (gen, nparts) could
 * read the next job's larger nparts and still win the claim of part `nparts`, running a part of a
 * job not yet published - twice, and counted in the wrong job's `done` (ThreadSanitizer found it:
 * tests/check_threads.c under `make check-tsan`).  The fields are stored with release and read with
 * acquire, so a worker that sees the next job's fields also sees this job closed.
 * nf_threads_start publishes a job the same way and returns; nf_threads_finish is the caller's side
 * of it (the parts left, the wait, the close).  The caller holds run_lock in between, so its own
 * nf_threads_run calls run serially while the workers take the job's parts.
 * Waiting workers spin on state (pause, then sched_yield so a busy core goes to whoever needs it) for
 * NF_THREADS_SPIN_US, then sleep on a condition variable; `sleepers` (sequentially consistent, read
 * by the caller after publishing, written by a worker before its last look at state) tells the caller
 * whether to signal, without a lost wake-up.
 */
#include "core/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#include "core/clock.h"

typedef struct pool {
    pthread_mutex_t run_lock;   /* held by the caller running a job */
    pthread_mutex_t sleep_lock; /* with wake: workers asleep */
    pthread_cond_t wake;
    _Atomic uint64_t state;     /* generation << 32 | next part */
    _Atomic int done, sleepers, active;
    _Atomic(nf_part_fn *) fn;
    _Atomic(void *) arg;
    _Atomic int nparts;
    int workers;                /* created (guarded by run_lock) */
} pool;

/* Only the locks need initialisers; the atomics start at zero (clang refuses NULL, a (void *) that
 * is not a constant of the atomic function-pointer type, in a static initializer). */
static pool P = {.run_lock = PTHREAD_MUTEX_INITIALIZER, .sleep_lock = PTHREAD_MUTEX_INITIALIZER,
                 .wake = PTHREAD_COND_INITIALIZER};
static _Thread_local int in_part;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

int nf_threads_in_parallel(void)
{
#ifdef _OPENMP
    if (omp_in_parallel()) return 1;
#endif
    return in_part;
}

static double now_us(void) { return 1e6 * nf_seconds(); }

static uint32_t generation(void) { return (uint32_t)(atomic_load(&P.state) >> 32); }

#define CLOSED 0xffffffffu /* the part number of a finished job */

/* Claim and run parts of job `gen` until none is left (or a newer job replaced it). */
static void work(uint32_t gen)
{
    uint64_t s = atomic_load_explicit(&P.state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != gen) return;
        nf_part_fn *fn = atomic_load_explicit(&P.fn, memory_order_acquire);
        void *arg = atomic_load_explicit(&P.arg, memory_order_acquire);
        const int nparts = atomic_load_explicit(&P.nparts, memory_order_acquire);
        const uint32_t k = (uint32_t)s;
        if (k >= (uint32_t)nparts) return; /* every part claimed, or the job closed */
        if (!atomic_compare_exchange_weak_explicit(&P.state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            continue; /* s now holds the current state */
        fn(arg, (int)k, nparts);
        atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
        s = atomic_load_explicit(&P.state, memory_order_acquire);
    }
}

/* Until a generation other than `seen` is published: spin, then yield, then sleep. */
static uint32_t wait_job(uint32_t seen)
{
    const double t0 = now_us();
    for (int i = 0;; i++) {
        uint32_t g = (uint32_t)(atomic_load_explicit(&P.state, memory_order_acquire) >> 32);
        if (g != seen) return g;
        if (i < 200) {
            CPU_RELAX();
            continue;
        }
        if (now_us() - t0 > NF_THREADS_SPIN_US) break;
        sched_yield();
    }
    pthread_mutex_lock(&P.sleep_lock);
    atomic_fetch_add(&P.sleepers, 1);
    uint32_t g;
    while ((g = generation()) == seen) pthread_cond_wait(&P.wake, &P.sleep_lock);
    atomic_fetch_sub(&P.sleepers, 1);
    pthread_mutex_unlock(&P.sleep_lock);
    return g;
}

static void *worker(void *arg)
{
    const int id = (int)(intptr_t)arg; /* 1.. (the caller is 0) */
    in_part = 1;                       /* everything a worker runs is a part */
    uint32_t seen = generation();
    for (;;) {
        seen = wait_job(seen);
        if (id < atomic_load(&P.active)) work(seen);
    }
    return NULL;
}

/* In a forked child the workers are gone (and a lock may have been held by one). */
static void atfork_child(void)
{
    pthread_mutex_init(&P.run_lock, NULL);
    pthread_mutex_init(&P.sleep_lock, NULL);
    pthread_cond_init(&P.wake, NULL);
    atomic_store(&P.sleepers, 0);
    P.workers = 0;
    in_part = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

static void serial(int nparts, nf_part_fn *fn, void *arg)
{
    for (int p = 0; p < nparts; p++) fn(arg, p, nparts);
}

/* The job opened by nf_threads_start (guarded by run_lock, which its caller holds until finish). */
static uint32_t open_gen;
static int open_nparts;

/* With run_lock held: create the workers, publish the job, wake sleepers; returns its generation. */
static uint32_t publish(int threads, int nparts, nf_part_fn *fn, void *arg)
{
    pthread_once(&atfork_once, register_atfork);
    while (P.workers < threads - 1) { /* on failure, fewer workers: the caller takes their parts */
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, worker, (void *)(intptr_t)(P.workers + 1));
        pthread_attr_destroy(&at);
        if (rc != 0) break;
        P.workers++;
    }
    atomic_store_explicit(&P.done, 0, memory_order_relaxed);
    atomic_store_explicit(&P.fn, fn, memory_order_release);
    atomic_store_explicit(&P.arg, arg, memory_order_release);
    atomic_store_explicit(&P.nparts, nparts, memory_order_release);
    atomic_store_explicit(&P.active, threads, memory_order_relaxed);
    const uint32_t gen = generation() + 1;
    atomic_store(&P.state, (uint64_t)gen << 32);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.sleep_lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.sleep_lock);
    }
    return gen;
}

/* The caller's side of job gen: run the parts left, wait for the rest, close it, release the pool. */
static void join(uint32_t gen, int nparts)
{
    in_part = 1;
    work(gen);
    in_part = 0;
    for (int i = 0; atomic_load_explicit(&P.done, memory_order_acquire) < nparts; i++) {
        if (i < 1000) CPU_RELAX();
        else sched_yield();
    }
    atomic_store(&P.state, (uint64_t)gen << 32 | CLOSED); /* no claim on this job from now on */
    pthread_mutex_unlock(&P.run_lock);
}

void nf_threads_run(int threads, int nparts, nf_part_fn *fn, void *arg)
{
    if (threads > NF_THREADS_MAX) threads = NF_THREADS_MAX;
    if (threads <= 1 || nparts <= 1 || nf_threads_in_parallel() || pthread_mutex_trylock(&P.run_lock) != 0) {
        serial(nparts, fn, arg);
        return;
    }
    join(publish(threads, nparts, fn, arg), nparts);
}

int nf_threads_start(int threads, int nparts, nf_part_fn *fn, void *arg)
{
    if (threads > NF_THREADS_MAX) threads = NF_THREADS_MAX;
    if (threads <= 1 || nparts < 1 || nf_threads_in_parallel() || pthread_mutex_trylock(&P.run_lock) != 0) return 0;
    open_nparts = nparts;
    open_gen = publish(threads, nparts, fn, arg);
    return 1;
}

void nf_threads_finish(void) { join(open_gen, open_nparts); }

typedef struct range_job {
    size_t n, align;
    nf_range_fn *fn;
    void *arg;
} range_job;

static void range_part(void *arg, int part, int nparts)
{
    const range_job *j = arg;
    const size_t blocks = (j->n + j->align - 1) / j->align;
    const size_t b0 = blocks * (size_t)part / (size_t)nparts, b1 = blocks * (size_t)(part + 1) / (size_t)nparts;
    const size_t i0 = b0 * j->align, i1 = b1 * j->align < j->n ? b1 * j->align : j->n;
    if (i0 < i1) j->fn(j->arg, i0, i1);
}

void nf_threads_ranges(int threads, size_t n, size_t align, nf_range_fn *fn, void *arg)
{
    if (n == 0) return;
    if (align < 1) align = 1;
    if (threads > NF_THREADS_MAX) threads = NF_THREADS_MAX;
    if (threads <= 1 || n <= align) {
        fn(arg, 0, n);
        return;
    }
    range_job j = {n, align, fn, arg};
    nf_threads_run(threads, threads, range_part, &j);
}
