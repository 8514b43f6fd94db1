/* bench/bench_data.c - write a built-in data set to HDF5 for the quality runs, when `nf data make`
 * is not available in the build: /x (n, d) and /logp_true (n), both double, as nf's data files.
 *
 *   bench_data NAME N SEED OUT.h5 [--dim D]
 */
#include "bench/bench_common.h"
#include "core/h5.h"

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_data NAME N SEED OUT.h5 [--dim D]\n");
        return 2;
    }
    const char *name = argv[1], *out = argv[4];
    size_t n = (size_t)atol(argv[2]);
    uint64_t seed = (uint64_t)atoll(argv[3]);
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.dim = bench_int_arg(argc, argv, "--dim", o.dim);
    nf_dataset *ds;
    if (nf_dataset_alloc(&ds, name, &o) != NF_OK) bench_die(name);
    double *x = malloc(n * (size_t)ds->dim * sizeof *x), *lp = malloc(n * sizeof *lp);
    nf_rng *r = nf_rng_alloc(seed, 0);
    if (!x || !lp || !r) bench_die("allocation");
    if (nf_dataset_sample(ds, r, n, x, lp) != NF_OK) bench_die("sample");
    if (!ds->type->sample_gives_logp && nf_dataset_log_prob(ds, n, x, lp) != NF_OK) bench_die("log_prob");
    nf_h5 *f;
    if (nf_h5_create(&f, out, "nf-data", 1) != NF_OK) bench_die(out);
    if (nf_h5_write_double(f, "/x", x, n, (size_t)ds->dim) != NF_OK ||
        nf_h5_write_double(f, "/logp_true", lp, n, 0) != NF_OK) {
        nf_h5_abort(f);
        bench_die(out);
    }
    if (nf_h5_commit(f) != NF_OK) bench_die(out);
    nf_rng_free(r);
    nf_dataset_free(ds);
    free(x);
    free(lp);
    return 0;
}
