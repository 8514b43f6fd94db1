/* bench/bench_sample.c - sampling speed, and Jacobi against sequential inversion of a MAF.
 *
 *   bench_sample CONFIG [--n N] [--repeats R] [--threads T] [--pretrain S]
 *   bench_sample jacobi [--dim 43] [--n N] [--repeats R] [--threads T] [--pretrain S]
 *
 * Both first train the model S steps (Adam 1e-3 on the config's standardised Gaussian-mixture data,
 * bench_common.h): a freshly initialised flow is the identity (zero output layers), which any
 * sampler inverts in one pass and which would say nothing about autoregressive sampling.
 *
 * CONFIG: samples per second of nf_flow_sample (no log-density asked), fastest of R calls of N
 * samples after one warm-up call; for flows with autoregressive layers once with each inversion
 * method (auto = Jacobi with sequential fallback, the default, and sequential), with the passes used.
 * jacobi: the maf configuration on D-dimensional data; the same latent draws inverted sequentially
 * (D network passes per layer, exact) and by Jacobi sweeps; passes per layer, times and the largest
 * absolute difference between the two samples.  Prints JSON objects, one a line.
 */
#include "bench/bench_common.h"

typedef struct sample_result {
    double seconds, cpu_seconds, per_layer_passes;
    int passes;
} sample_result;

/* Fastest of reps calls (after one warm-up); x receives the last call's samples from seed. */
static sample_result time_sampling(nf_flow *f, nf_real *x, int n, int reps, uint64_t seed)
{
    sample_result res = {INFINITY, INFINITY, 0, 0};
    for (int r = 0; r <= reps; r++) {
        nf_rng *rng = nf_rng_alloc(seed, 5);
        double t0 = nf_seconds(), c0 = bench_cpu();
        if (nf_flow_sample(f, x, NULL, NULL, n, rng) != NF_OK) bench_die("sample");
        double dt = nf_seconds() - t0, dc = bench_cpu() - c0;
        nf_rng_free(rng);
        if (r > 0 && dt < res.seconds) res.seconds = dt;
        if (r > 0 && dc < res.cpu_seconds) res.cpu_seconds = dc;
    }
    res.passes = nf_flow_last_sweeps(f);
    int ar = bench_count_type(f, "maf");
    res.per_layer_passes = ar ? (double)res.passes / ar : 0;
    return res;
}

/* Pretraining runs on one thread whatever the timed part uses (it is not measured). */
static nf_flow *trained_flow(const bench_config *c, int dim, int steps, int threads)
{
    bench_threads(1);
    char spec[16384];
    bench_spec(c, spec, sizeof spec);
    nf_flow *f;
    if (nf_flow_create(&f, spec, dim, 0, 1) != NF_OK) bench_die("flow");
    nf_real *data = bench_data(dim, BENCH_DATA_ROWS, 7);
    bench_trainer t;
    bench_trainer_init(&t, f, data, BENCH_DATA_ROWS, c->batch);
    for (int i = 0; i < steps; i++) bench_step(&t);
    nf_flow_set_training(f, 0);
    free(data);
    bench_threads(threads);
    fprintf(stderr, "bench_sample: %s (D = %d) trained %d steps, nll %.4f\n", c->name, dim, steps, t.nll);
    return f;
}

static const char *method_name(nf_invert_method m)
{
    return m == NF_INVERT_SEQUENTIAL ? "sequential" : m == NF_INVERT_JACOBI ? "jacobi" : "auto";
}

static void speed(const bench_config *c, int n, int reps, int threads, int pretrain)
{
    nf_flow *f = trained_flow(c, c->dim, pretrain, threads);
    nf_real *x = malloc((size_t)n * c->dim * sizeof *x);
    int ar = bench_count_type(f, "maf");
    nf_invert_method methods[] = {NF_INVERT_AUTO, NF_INVERT_SEQUENTIAL};
    for (int k = 0; k < (ar ? 2 : 1); k++) {
        nf_flow_set_invert(f, methods[k], 0, 0);
        sample_result r = time_sampling(f, x, n, reps, 11);
        printf("{\"impl\": \"nf\", \"bench\": \"sample\", \"config\": \"%s\", \"dim\": %d, \"n\": %d, \"threads\": %d, "
               "\"method\": \"%s\", \"pretrain\": %d, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
               "\"samples_per_sec\": %.2f, \"passes_per_ar_layer\": %.3f}\n",
               c->name, c->dim, n, threads, method_name(methods[k]), pretrain, r.seconds, r.cpu_seconds,
               n / r.seconds, r.per_layer_passes);
    }
    free(x);
    nf_flow_free(f);
}

static void jacobi(int dim, int n, int reps, int threads, int pretrain)
{
    const bench_config *c = bench_find("maf");
    nf_flow *f = trained_flow(c, dim, pretrain, threads);
    nf_real *xs = malloc((size_t)n * dim * sizeof *xs), *xj = malloc((size_t)n * dim * sizeof *xj);
    nf_flow_set_invert(f, NF_INVERT_SEQUENTIAL, 0, 0);
    sample_result s = time_sampling(f, xs, n, reps, 13);
    nf_flow_set_invert(f, NF_INVERT_JACOBI, 0, 0);
    sample_result j = time_sampling(f, xj, n, reps, 13);
    double maxdiff = 0, maxabs = 0;
    for (size_t k = 0; k < (size_t)n * dim; k++) {
        double d = fabs((double)xs[k] - (double)xj[k]);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN propagates */
        if (fabs((double)xs[k]) > maxabs) maxabs = fabs((double)xs[k]);
    }
    printf("{\"impl\": \"nf\", \"bench\": \"jacobi\", \"config\": \"maf\", \"dim\": %d, \"n\": %d, \"threads\": %d, "
           "\"pretrain\": %d, \"ar_layers\": %d, \"tol\": %g, \"sequential_seconds\": %.6f, "
           "\"sequential_passes_per_layer\": %.3f, \"jacobi_seconds\": %.6f, \"jacobi_passes_per_layer\": %.3f, "
           "\"jacobi_passes_total\": %d, \"max_abs_diff\": %.3e, \"max_abs_x\": %.3f, \"speedup\": %.3f}\n",
           dim, n, threads, pretrain, bench_count_type(f, "maf"), f->b[0].jacobi_tol, s.seconds, s.per_layer_passes,
           j.seconds, j.per_layer_passes, j.passes, maxdiff, maxabs, s.seconds / j.seconds);
    free(xs);
    free(xj);
    nf_flow_free(f);
}

int main(int argc, char **argv)
{
    int is_jacobi = argc >= 2 && !strcmp(argv[1], "jacobi");
    if (argc < 2 || (!is_jacobi && !bench_find(argv[1]))) {
        fprintf(stderr, "usage: bench_sample maf|realnvp|nsf|maf-small|jacobi [--n N] [--repeats R] [--threads T] "
                        "[--pretrain S] [--dim D]\n");
        return 2;
    }
    const int n = bench_int_arg(argc, argv, "--n", 2048), reps = bench_int_arg(argc, argv, "--repeats", 3);
    const int threads = bench_int_arg(argc, argv, "--threads", 1), pretrain = bench_int_arg(argc, argv, "--pretrain", 200);
    if (is_jacobi)
        jacobi(bench_int_arg(argc, argv, "--dim", 43), n, reps, threads, pretrain);
    else
        speed(bench_find(argv[1]), n, reps, threads, pretrain);
    return 0;
}
