/* bench/bench_train.c - training throughput of one configuration, and its GEMM-bound rate.
 *
 *   bench_train CONFIG [--steps N] [--warmup W] [--repeats R] [--threads T] [--max-seconds S] [--no-replay]
 *
 * Times R blocks of N optimizer steps (zero gradients, nf_flow_nll_step, Adam) after W warm-up steps
 * and keeps the fastest block (N is lowered so the blocks take about S seconds in all, at least 3
 * steps each, when one step is very slow, as on a machine busy with other work).
 *
 * The GEMM bound: linked with -Wl,--wrap=nf_gemm and nf_gemm_bias, the program records every matrix product one
 * training step asks of core/blas.c (shapes, transposes, strides and the memory they touch), copies
 * that memory into a shadow arena laid out the same way (so products that read what an earlier one
 * wrote still do, and the same bytes stay in cache), and replays the products alone through nf_gemm,
 * R blocks of N steps, fastest block kept: the step rate if a step were nothing but its products.
 * Products made by OpenMP threads on their share of the rows are replayed by the same threads.
 * The same calls replayed through OpenBLAS's cblas_sgemm (T threads) give the machine's sgemm rate
 * for the same shapes.
 *
 * FLOPs: executed = sum of 2 M N K over the recorded products (what the library actually multiplies,
 * after skipping masked zero blocks where it does); dense = 6 n * (all linear weights) (what a dense
 * implementation such as the PyTorch reference multiplies).  Prints one JSON object.
 */
#include <cblas.h>
#include <stdint.h>

#include "bench/bench_common.h"

void openblas_set_num_threads(int num_threads);

/* ---- recording nf_gemm ---------------------------------------------------------------------------- */

typedef struct gemm_call {
    int ta, tb, M, N, K, lda, ldb, ldc;
    nf_real alpha, beta;
    const nf_real *A, *B, *bias; /* bias: a call of nf_gemm_bias (alpha 1, beta unused) */
    nf_real *C;
    int in_parallel, thread; /* made inside an OpenMP parallel region, by which thread */
} gemm_call;

void __real_nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                    const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc);
void __wrap_nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                    const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc);
void __real_nf_gemm_bias(int transA, int transB, int M, int N, int K, const nf_real *A, int lda, const nf_real *B,
                         int ldb, const nf_real *bias, nf_real *C, int ldc);
void __wrap_nf_gemm_bias(int transA, int transB, int M, int N, int K, const nf_real *A, int lda, const nf_real *B,
                         int ldb, const nf_real *bias, nf_real *C, int ldc);

static int recording;
static gemm_call *calls;
static int ncalls, capcalls;

static void record(gemm_call c)
{
    if (!recording || c.M <= 0 || c.N <= 0) return;
#pragma omp critical(bench_record)
    {
        if (ncalls == capcalls) {
            capcalls = capcalls ? 2 * capcalls : 256;
            calls = realloc(calls, (size_t)capcalls * sizeof *calls);
            if (!calls) exit(1);
        }
        calls[ncalls++] = c;
    }
}

void __wrap_nf_gemm(int transA, int transB, int M, int N, int K, nf_real alpha, const nf_real *A, int lda,
                    const nf_real *B, int ldb, nf_real beta, nf_real *C, int ldc)
{
    record((gemm_call){transA != 0, transB != 0, M, N, K, lda, ldb, ldc, alpha, beta, A, B, NULL, C,
                       omp_in_parallel(), omp_get_thread_num()});
    __real_nf_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void __wrap_nf_gemm_bias(int transA, int transB, int M, int N, int K, const nf_real *A, int lda, const nf_real *B,
                         int ldb, const nf_real *bias, nf_real *C, int ldc)
{
    record((gemm_call){transA != 0, transB != 0, M, N, K, lda, ldb, ldc, 1, 0, A, B, bias, C, omp_in_parallel(),
                       omp_get_thread_num()});
    __real_nf_gemm_bias(transA, transB, M, N, K, A, lda, B, ldb, bias, C, ldc);
}

/* ---- the shadow arena ------------------------------------------------------------------------------ */

typedef struct span {
    const char *lo, *hi;
    nf_real *copy, *saved; /* copy keeps lo's alignment modulo 64 bytes */
    void *block;
} span;

/* Bytes a row-major (rows x cols) operand with stride ld spans. */
static size_t extent(int rows, int cols, int ld)
{
    return rows > 0 && cols > 0 ? ((size_t)(rows - 1) * ld + cols) * sizeof(nf_real) : 0;
}

static int cmp_span(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const span *)a)->lo, y = (uintptr_t)((const span *)b)->lo;
    return x < y ? -1 : x > y;
}

static span *spans;
static int nspans;

static void add_span(span *s, int *k, const void *p, size_t bytes)
{
    if (!bytes) return;
    s[*k].lo = p;
    s[*k].hi = (const char *)p + bytes;
    (*k)++;
}

/* Merge every operand's memory range into disjoint spans and copy them. */
static void build_arena(void)
{
    span *s = calloc((size_t)4 * ncalls, sizeof *s);
    int k = 0;
    for (int i = 0; i < ncalls; i++) {
        const gemm_call *c = &calls[i];
        add_span(s, &k, c->A, c->ta ? extent(c->K, c->M, c->lda) : extent(c->M, c->K, c->lda));
        add_span(s, &k, c->B, c->tb ? extent(c->N, c->K, c->ldb) : extent(c->K, c->N, c->ldb));
        add_span(s, &k, c->C, extent(c->M, c->N, c->ldc));
        if (c->bias) add_span(s, &k, c->bias, extent(1, c->N, c->N));
    }
    qsort(s, (size_t)k, sizeof *s, cmp_span);
    int m = 0;
    for (int i = 0; i < k; i++) {
        if (m && (uintptr_t)s[i].lo <= (uintptr_t)s[m - 1].hi) { /* overlapping or touching: merge */
            if ((uintptr_t)s[i].hi > (uintptr_t)s[m - 1].hi) s[m - 1].hi = s[i].hi;
        } else {
            s[m++] = s[i];
        }
    }
    for (int i = 0; i < m; i++) {
        size_t bytes = (size_t)(s[i].hi - s[i].lo);
        size_t mis = (size_t)((uintptr_t)s[i].lo % 64);
        s[i].block = aligned_alloc(64, (bytes + mis + 63) / 64 * 64);
        s[i].copy = s[i].block ? (nf_real *)((char *)s[i].block + mis) : NULL;
        s[i].saved = malloc(bytes);
        if (!s[i].block || !s[i].saved) bench_die("arena allocation");
        memcpy(s[i].saved, s[i].lo, bytes);
    }
    spans = s;
    nspans = m;
}

static nf_real *shadow(const void *p)
{
    int lo = 0, hi = nspans - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((uintptr_t)spans[mid].lo <= (uintptr_t)p) lo = mid;
        else hi = mid - 1;
    }
    return (nf_real *)((char *)spans[lo].copy + ((const char *)p - spans[lo].lo));
}

static void reset_arena(void)
{
    for (int i = 0; i < nspans; i++) memcpy(spans[i].copy, spans[i].saved, (size_t)(spans[i].hi - spans[i].lo));
}

static void replay_one(const gemm_call *r)
{
    if (r->bias) {
        __real_nf_gemm_bias(r->ta, r->tb, r->M, r->N, r->K, r->A, r->lda, r->B, r->ldb, r->bias, r->C, r->ldc);
        return;
    }
    __real_nf_gemm(r->ta, r->tb, r->M, r->N, r->K, r->alpha, r->A, r->lda, r->B, r->ldb, r->beta, r->C, r->ldc);
}

/* Calls the library made from inside a parallel region (each thread on its share of the rows) are
 * replayed the same way: each run of them in one parallel region, every thread replaying its own
 * calls in order (the library's barriers inside a run are not reproduced). */
static int replay_threads = 1;

static void replay_nf(const gemm_call *r, int n)
{
    for (int i = 0; i < n;) {
        if (!r[i].in_parallel) {
            replay_one(&r[i++]);
            continue;
        }
        int j = i;
        while (j < n && r[j].in_parallel) j++;
#pragma omp parallel num_threads(replay_threads)
        {
            const int t = omp_get_thread_num();
            for (int k = i; k < j; k++)
                if (r[k].thread == t) replay_one(&r[k]);
        }
        i = j;
    }
}

static void replay_openblas(const gemm_call *r, int n)
{
    for (int i = 0; i < n; i++)
#ifdef NF_DOUBLE
        cblas_dgemm(
#else
        cblas_sgemm(
#endif
            CblasRowMajor, r[i].ta ? CblasTrans : CblasNoTrans, r[i].tb ? CblasTrans : CblasNoTrans, r[i].M, r[i].N,
            r[i].K, r[i].alpha, r[i].A, r[i].lda, r[i].B, r[i].ldb, r[i].bias ? 1 : r[i].beta, r[i].C, r[i].ldc);
    /* (a bias call as nf did before nf_gemm_bias: adding into C, which held the bias rows) */
}

/* Fastest of reps blocks of steps replays (arena reset before each block, outside the timing);
 * *cpu receives the least CPU time of a block. */
static double time_replay(void (*replay)(const gemm_call *, int), const gemm_call *r, int n, int steps, int reps,
                          double *cpu)
{
    double best = INFINITY;
    *cpu = INFINITY;
    for (int k = 0; k < reps; k++) {
        reset_arena();
        replay(r, n);
        double t0 = nf_seconds(), c0 = bench_cpu();
        for (int i = 0; i < steps; i++) replay(r, n);
        double dt = nf_seconds() - t0, dc = bench_cpu() - c0;
        if (dt < best) best = dt;
        if (dc < *cpu) *cpu = dc;
    }
    return best;
}

/* ---- main ---------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2 || !bench_find(argv[1])) {
        fprintf(stderr, "usage: bench_train maf|realnvp|nsf|maf-small [--steps N] [--warmup W] [--repeats R] "
                        "[--threads T] [--max-seconds S]\n");
        return 2;
    }
    const bench_config *c = bench_find(argv[1]);
    int steps = bench_int_arg(argc, argv, "--steps", 50);
    const int warm = bench_int_arg(argc, argv, "--warmup", 10);
    const double max_seconds = bench_int_arg(argc, argv, "--max-seconds", 20);
    const int reps = bench_int_arg(argc, argv, "--repeats", 3), threads = bench_int_arg(argc, argv, "--threads", 1);
    bench_threads(threads);

    char spec[16384];
    bench_spec(c, spec, sizeof spec);
    nf_flow *f;
    if (nf_flow_create(&f, spec, c->dim, 0, 1) != NF_OK) bench_die("flow");
    nf_real *data = bench_data(c->dim, BENCH_DATA_ROWS, 7);
    bench_trainer t;
    bench_trainer_init(&t, f, data, BENCH_DATA_ROWS, c->batch);

    for (int i = 0; i < warm; i++) bench_step(&t);
    recording = 1;
    double t1 = nf_seconds();
    bench_step(&t);
    t1 = nf_seconds() - t1;
    recording = 0;
    /* On a busy machine a step can be many times slower than usual: cap the timed part. */
    if (t1 * steps * reps > max_seconds) {
        steps = (int)(max_seconds / (t1 * reps));
        if (steps < 3) steps = 3;
    }
    int inpar = 0;
    double flops = 0;
    for (int i = 0; i < ncalls; i++) {
        inpar += calls[i].in_parallel;
        flops += 2.0 * calls[i].M * calls[i].N * calls[i].K;
    }

    double best = INFINITY, best_cpu = INFINITY; /* wall time of the fastest block; the least CPU time */
    for (int r = 0; r < reps; r++) {
        double t0 = nf_seconds(), c0 = bench_cpu();
        for (int i = 0; i < steps; i++) bench_step(&t);
        double dt = nf_seconds() - t0, dc = bench_cpu() - c0;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }

    if (bench_flag(argc, argv, "--no-replay")) { /* for profiling the steps alone */
        printf("{\"impl\": \"nf\", \"bench\": \"train-only\", \"config\": \"%s\", \"threads\": %d, \"steps\": %d, "
               "\"seconds\": %.6f, \"cpu_seconds\": %.6f, \"steps_per_sec\": %.4f}\n",
               c->name, threads, steps, best, best_cpu, steps / best);
        free(calls);
        free(data);
        nf_flow_free(f);
        return 0;
    }

    /* The same products alone, on the shadow arena. */
    build_arena();
    gemm_call *rc = malloc((size_t)(ncalls ? ncalls : 1) * sizeof *rc);
    for (int i = 0; i < ncalls; i++) {
        rc[i] = calls[i];
        rc[i].A = shadow(calls[i].A);
        rc[i].B = shadow(calls[i].B);
        rc[i].C = shadow(calls[i].C);
        if (calls[i].bias) rc[i].bias = shadow(calls[i].bias);
    }
    double gcpu, ocpu;
    replay_threads = threads;
    double gbest = time_replay(replay_nf, rc, ncalls, steps, reps, &gcpu);
    openblas_set_num_threads(threads);
    double obest = time_replay(replay_openblas, rc, ncalls, steps, reps, &ocpu);
    openblas_set_num_threads(1);

    const double sps = steps / best, gsps = steps / gbest, dense = bench_dense_flops(f, c->batch);
    printf("{\"impl\": \"nf\", \"bench\": \"train\", \"config\": \"%s\", \"dim\": %d, \"batch\": %d, \"threads\": %d, "
           "\"steps\": %d, \"repeats\": %d, \"params\": %zu, \"seconds\": %.6f, \"steps_per_sec\": %.4f, "
           "\"gemm_calls_per_step\": %d, \"gemm_calls_in_parallel\": %d, \"gemm_seconds_per_step\": %.8f, "
           "\"gemm_bound_steps_per_sec\": %.4f, \"frac_of_gemm_bound\": %.4f, \"executed_flops_per_step\": %.6g, "
           "\"dense_flops_per_step\": %.6g, \"gflops\": %.3f, \"dense_equiv_gflops\": %.3f, \"gemm_gflops\": %.3f, "
           "\"openblas_gemm_seconds_per_step\": %.8f, \"openblas_gflops\": %.3f, \"blas_backend\": \"%s\", "
           "\"cpu_seconds\": %.6f, \"gemm_cpu_seconds_per_step\": %.8f, \"frac_of_gemm_bound_cpu\": %.4f, "
           "\"loss\": %.6f, \"spec\": \"%s\"}\n",
           c->name, c->dim, c->batch, threads, steps, reps, f->P->n, best, sps, ncalls, inpar, gbest / steps, gsps,
           sps / gsps, flops, dense, flops * sps * 1e-9, dense * sps * 1e-9, flops * gsps * 1e-9, obest / steps,
           flops * steps / obest * 1e-9, nf_blas_get_backend() == NF_BLAS_NATIVE ? "native" : "openblas", best_cpu, gcpu / steps, gcpu / best_cpu,
           t.nll, spec);

    for (int i = 0; i < nspans; i++) {
        free(spans[i].block);
        free(spans[i].saved);
    }
    free(spans);
    free(rc);
    free(calls);
    free(data);
    nf_flow_free(f);
    return 0;
}
