/* bench/bench_dump.c - evidence that the PyTorch reference computes the same function as nf.
 *
 *   bench_dump CONFIG OUT.h5 [--steps S]
 *
 * Builds the configuration, trains it S steps (so no layer is still the identity), and writes its
 * parameters (/P: value, names, offsets, sizes), its state (/S: permutations and signs), a batch of
 * data /x with nf's log-densities /logp, and a sample: latents /z and the samples /xs that nf_flow_sample
 * made from them.  bench/ref_check.py loads the parameters into the PyTorch model and compares.
 */
#include "bench/bench_common.h"
#include "core/h5.h"

#define DUMP_N 256

int main(int argc, char **argv)
{
    if (argc < 3 || !bench_find(argv[1])) {
        fprintf(stderr, "usage: bench_dump maf|realnvp|nsf|maf-small OUT.h5 [--steps S]\n");
        return 2;
    }
    const bench_config *c = bench_find(argv[1]);
    const int steps = bench_int_arg(argc, argv, "--steps", 30);
    bench_threads(1);
    char spec[16384];
    bench_spec(c, spec, sizeof spec);
    nf_flow *f;
    if (nf_flow_create(&f, spec, c->dim, 0, 3) != NF_OK) bench_die("flow");
    nf_real *data = bench_data(c->dim, BENCH_DATA_ROWS, 7);
    bench_trainer t;
    bench_trainer_init(&t, f, data, BENCH_DATA_ROWS, c->batch);
    for (int i = 0; i < steps; i++) bench_step(&t);
    nf_flow_set_training(f, 0);

    const size_t nd = (size_t)DUMP_N * c->dim;
    nf_real *lp = malloc(DUMP_N * sizeof *lp), *xs = malloc(nd * sizeof *xs), *z = malloc(nd * sizeof *z);
    if (nf_flow_log_prob(f, lp, data, NULL, NULL, DUMP_N) != NF_OK) bench_die("log_prob");
    nf_flow_set_invert(f, NF_INVERT_SEQUENTIAL, 0, 0);
    nf_rng *rng = nf_rng_alloc(5, 0);
    if (nf_flow_sample(f, xs, NULL, NULL, DUMP_N, rng) != NF_OK) bench_die("sample");
    memcpy(z, f->h + (size_t)f->nb * nd, nd * sizeof *z); /* the latents the sample started from */

    nf_h5 *h;
    if (nf_h5_create(&h, argv[2], "nf-bench-dump", 1) != NF_OK) bench_die(argv[2]);
    int rc = nf_params_save(f->P, h, "/P", 0);
    if (rc == NF_OK) rc = nf_params_save(f->S, h, "/S", 0);
    if (rc == NF_OK) rc = nf_h5_write_real(h, "/x", data, DUMP_N, (size_t)c->dim);
    if (rc == NF_OK) rc = nf_h5_write_real(h, "/logp", lp, DUMP_N, 0);
    if (rc == NF_OK) rc = nf_h5_write_real(h, "/z", z, DUMP_N, (size_t)c->dim);
    if (rc == NF_OK) rc = nf_h5_write_real(h, "/xs", xs, DUMP_N, (size_t)c->dim);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(h, "/", "spec", spec);
    if (rc != NF_OK) {
        nf_h5_abort(h);
        bench_die(argv[2]);
    }
    if (nf_h5_commit(h) != NF_OK) bench_die(argv[2]);
    nf_rng_free(rng);
    free(lp);
    free(xs);
    free(z);
    free(data);
    nf_flow_free(f);
    return 0;
}
