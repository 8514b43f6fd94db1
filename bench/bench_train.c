/* bench/bench_train.c - training throughput of one configuration, and its GEMM-bound rate.
 *
 *   bench_train CONFIG [--steps N] [--warmup W] [--repeats R] [--threads T]
 *
 * Times R blocks of N optimizer steps (zero gradients, nf_flow_nll_step, Adam) after W warm-up steps
 * and keeps the fastest block.  Then the GEMM bound: linked with -Wl,--wrap=cblas_sgemm, the program
 * records every matrix product one training step issues (shapes, transposes, strides and the memory
 * they touch), copies that memory into a shadow arena laid out the same way (so products that read
 * what an earlier one wrote still do, and the same bytes stay in cache), and replays the products
 * alone, R blocks of N steps, fastest block kept.  The time of a step's products alone bounds its
 * step rate: steps_per_sec / gemm_bound_steps_per_sec is the fraction of the bound reached.
 *
 * FLOPs: executed = sum of 2 M N K over the recorded products (what the library actually multiplies,
 * after skipping masked zero blocks if it does); dense = 6 n * (all linear weights) (what a dense
 * implementation such as the PyTorch reference multiplies).  Prints one JSON object.
 */
#include <cblas.h>

#include "bench/bench_common.h"

/* ---- recording cblas_sgemm ---------------------------------------------------------------------- */

typedef struct gemm_call {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int in_parallel;
} gemm_call;

void __real_cblas_sgemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K,
                        float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta, float *C,
                        blasint ldc);
void __wrap_cblas_sgemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K,
                        float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta, float *C,
                        blasint ldc);

static int recording;
static gemm_call *calls;
static int ncalls, capcalls;

void __wrap_cblas_sgemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K,
                        float alpha, const float *A, blasint lda, const float *B, blasint ldb, float beta, float *C,
                        blasint ldc)
{
    if (recording) {
#pragma omp critical(bench_record)
        {
            if (o != CblasRowMajor) {
                fprintf(stderr, "bench_train: column-major sgemm call not supported by the recorder\n");
                exit(1);
            }
            if (ncalls == capcalls) {
                capcalls = capcalls ? 2 * capcalls : 256;
                calls = realloc(calls, (size_t)capcalls * sizeof *calls);
                if (!calls) exit(1);
            }
            calls[ncalls++] = (gemm_call){ta == CblasTrans, tb == CblasTrans, M, N, K, lda, ldb, ldc, alpha, beta,
                                          A, B, C, omp_in_parallel()};
        }
    }
    __real_cblas_sgemm(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- the shadow arena ------------------------------------------------------------------------------ */

typedef struct span {
    const char *lo, *hi;
    float *copy, *saved;
} span;

/* Bytes a row-major (rows x cols) operand with stride ld spans. */
static size_t extent(int rows, int cols, int ld) { return rows > 0 ? ((size_t)(rows - 1) * ld + cols) * 4 : 0; }

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
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
    span *s = calloc((size_t)3 * ncalls, sizeof *s);
    int k = 0;
    for (int i = 0; i < ncalls; i++) {
        const gemm_call *c = &calls[i];
        add_span(s, &k, c->A, c->ta ? extent(c->K, c->M, c->lda) : extent(c->M, c->K, c->lda));
        add_span(s, &k, c->B, c->tb ? extent(c->N, c->K, c->ldb) : extent(c->K, c->N, c->ldb));
        add_span(s, &k, c->C, extent(c->M, c->N, c->ldc));
    }
    qsort(s, (size_t)k, sizeof *s, cmp_span);
    int m = 0;
    for (int i = 0; i < k; i++) {
        if (m && s[i].lo <= s[m - 1].hi) {
            if (s[i].hi > s[m - 1].hi) s[m - 1].hi = s[i].hi;
        } else {
            s[m++] = s[i];
        }
    }
    for (int i = 0; i < m; i++) {
        size_t bytes = (size_t)(s[i].hi - s[i].lo);
        s[i].copy = aligned_alloc(64, (bytes + 63) / 64 * 64);
        s[i].saved = malloc(bytes);
        if (!s[i].copy || !s[i].saved) bench_die("arena allocation");
        memcpy(s[i].saved, s[i].lo, bytes);
    }
    spans = s;
    nspans = m;
}

static float *shadow(const void *p)
{
    int lo = 0, hi = nspans - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (spans[mid].lo <= (const char *)p) lo = mid;
        else hi = mid - 1;
    }
    return (float *)((char *)spans[lo].copy + ((const char *)p - spans[lo].lo));
}

static void reset_arena(void)
{
    for (int i = 0; i < nspans; i++) memcpy(spans[i].copy, spans[i].saved, (size_t)(spans[i].hi - spans[i].lo));
}

static void replay_step(const gemm_call *r, int n)
{
    for (int i = 0; i < n; i++)
        __real_cblas_sgemm(CblasRowMajor, r[i].ta ? CblasTrans : CblasNoTrans, r[i].tb ? CblasTrans : CblasNoTrans,
                           r[i].M, r[i].N, r[i].K, r[i].alpha, r[i].A, r[i].lda, r[i].B, r[i].ldb, r[i].beta, r[i].C,
                           r[i].ldc);
}

/* ---- main ---------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2 || !bench_find(argv[1])) {
        fprintf(stderr, "usage: bench_train maf|realnvp|nsf|maf-small [--steps N] [--warmup W] [--repeats R] "
                        "[--threads T]\n");
        return 2;
    }
    const bench_config *c = bench_find(argv[1]);
    const int steps = bench_int_arg(argc, argv, "--steps", 50), warm = bench_int_arg(argc, argv, "--warmup", 10);
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
    bench_step(&t);
    recording = 0;
    int inpar = 0;
    double flops = 0;
    for (int i = 0; i < ncalls; i++) {
        inpar += calls[i].in_parallel;
        flops += 2.0 * calls[i].M * calls[i].N * calls[i].K;
    }

    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        for (int i = 0; i < steps; i++) bench_step(&t);
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }

    /* The same products alone, on the shadow arena. */
    build_arena();
    gemm_call *rc = malloc((size_t)(ncalls ? ncalls : 1) * sizeof *rc);
    for (int i = 0; i < ncalls; i++) {
        rc[i] = calls[i];
        rc[i].A = shadow(calls[i].A);
        rc[i].B = shadow(calls[i].B);
        rc[i].C = shadow(calls[i].C);
    }
    double gbest = INFINITY;
    for (int r = 0; r < reps; r++) {
        reset_arena();
        replay_step(rc, ncalls);
        double t0 = bench_now();
        for (int i = 0; i < steps; i++) replay_step(rc, ncalls);
        double dt = bench_now() - t0;
        if (dt < gbest) gbest = dt;
    }

    const double sps = steps / best, gsps = steps / gbest, dense = bench_dense_flops(f, c->batch);
    printf("{\"impl\": \"nf\", \"bench\": \"train\", \"config\": \"%s\", \"dim\": %d, \"batch\": %d, \"threads\": %d, "
           "\"steps\": %d, \"repeats\": %d, \"params\": %zu, \"seconds\": %.6f, \"steps_per_sec\": %.4f, "
           "\"gemm_calls_per_step\": %d, \"gemm_calls_in_parallel\": %d, \"gemm_seconds_per_step\": %.8f, "
           "\"gemm_bound_steps_per_sec\": %.4f, \"frac_of_gemm_bound\": %.4f, \"executed_flops_per_step\": %.6g, "
           "\"dense_flops_per_step\": %.6g, \"gflops\": %.3f, \"dense_equiv_gflops\": %.3f, \"gemm_gflops\": %.3f, "
           "\"loss\": %.6f, \"spec\": \"%s\"}\n",
           c->name, c->dim, c->batch, threads, steps, reps, f->P->n, best, sps, ncalls, inpar, gbest / steps, gsps,
           sps / gsps, flops, dense, flops * sps * 1e-9, dense * sps * 1e-9, flops * gsps * 1e-9, t.nll, spec);

    for (int i = 0; i < nspans; i++) {
        free(spans[i].copy);
        free(spans[i].saved);
    }
    free(spans);
    free(rc);
    free(calls);
    free(data);
    nf_flow_free(f);
    return 0;
}
