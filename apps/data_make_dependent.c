/* apps/data_make_dependent.c - `nf data make dependent-SHAPE --structure equi|kinship`: 2-D rows whose
 * latent Gaussian inputs are correlated across rows (datasets/dependent_data.h), with the structure
 * nf fit --dependence reads and i.i.d. validation / test sets; reached from nf data make's table of
 * families (apps/cmd_data.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "datasets/dependent_data.h"

static const char *const MAKE_DEPENDENT_HELP =
    "usage: nf data make dependent-SHAPE -o TRAIN.h5 [--structure equi|kinship] [--val VAL.h5]\n"
    "                    [--test TEST.h5] [-n N] [--n-val M] [--lambda L] [--relatives R] [--seed S]\n"
    "\n"
    "Dependent 2-D training rows (Kirchler, Lippert & Kloft 2023): x1 = g1, x2 = m(x1) + s g2 with\n"
    "inputs g that are N(0, I) for every row but correlated across rows, so the marginal density of a\n"
    "row is known exactly (/logp_true), and i.i.d. validation and test sets of the same density.\n"
    "\n"
    "  SHAPE            sign (m = sign(x1) + x1, s^2 = e^-3), abs (|x1| - 1, e^-3), crescent\n"
    "                   (x1^2/2 - 1, e^-2), sine (sin(5 x1), e^-2), crescent-cube (x1^3/5, 1; columns\n"
    "                   swapped)\n"
    "  --structure S    equi: blocks of Pareto(0.5) sizes (capped at 1000), rho per block uniform in\n"
    "                   [0.5, 0.99], written as /group (block ids) and /rho;  kinship: Sigma =\n"
    "                   lambda I + (1 - lambda) K with a random sparse K of unit diagonal, written as\n"
    "                   /K/row, /K/col, /K/value (upper triangle)                     [equi]\n"
    "  -o FILE          training rows (written atomically)\n"
    "  -n N             training rows                       [10000 equi, 5000 kinship]\n"
    "  --val FILE       i.i.d. validation rows with /logp_true\n"
    "  --test FILE      i.i.d. test rows with /logp_true\n"
    "  --n-val M        rows of each i.i.d. set              [5000]\n"
    "  --lambda L       kinship: lambda                      [0.5]\n"
    "  --relatives R    kinship: families (of the equi blocks' sizes, K_ij = kappa per family, uniform\n"
    "                   in [0.5, 0.99]) or pedigree (up to two random earlier relatives per point,\n"
    "                   K normalised to unit diagonal; weak dependence)   [families]\n"
    "  --seed S         random seed                          [1]\n"
    "\n"
    "example:\n"
    "  nf data make dependent-crescent --structure equi -o train.h5 --val val.h5 --test test.h5\n"
    "  nf fit train.h5 --dependence equi --val val.h5 -o model.h5 && nf eval model.h5 test.h5\n";

static int write_rows(nf_h5 *f, const char *shape, const char *structure, const double *x, const double *logp,
                      size_t n, long seed)
{
    NF_TRY(nf_h5_write_double(f, "/x", x, n, 2));
    NF_TRY(nf_h5_write_double(f, "/logp_true", logp, n, 0));
    NF_TRY(nf_h5_attr_set_string(f, "/", "generator", shape));
    NF_TRY(nf_h5_attr_set_string(f, "/", "structure", structure));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "seed", seed));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "n", (int64_t)n));
    NF_TRY(nf_h5_attr_set_int64(f, "/", "dim", 2));
    return nf_h5_attr_set_string(f, "/", "density", "exact");
}

static int save_train(const nf_dep_data *d, const char *shape, const char *path, long seed)
{
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, "nf-data", 1));
    int rc = write_rows(f, shape, d->kind == NF_DEP_EQUI ? "equi" : "kinship", d->x, d->logp, d->n, seed);
    if (rc == NF_OK && d->kind == NF_DEP_EQUI) {
        rc = nf_h5_write_int64(f, "/group", d->group, d->n, 0);
        if (rc == NF_OK) rc = nf_h5_write_double(f, "/rho", d->rho, d->n_blocks, 0);
    } else if (rc == NF_OK) {
        rc = nf_h5_group(f, "/K");
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/K", "n", (int64_t)d->n);
        if (rc == NF_OK) rc = nf_h5_write_int64(f, "/K/row", d->row, d->nnz, 0);
        if (rc == NF_OK) rc = nf_h5_write_int64(f, "/K/col", d->col, d->nnz, 0);
        if (rc == NF_OK) rc = nf_h5_write_double(f, "/K/value", d->val, d->nnz, 0);
        if (rc == NF_OK) rc = nf_h5_attr_set_double(f, "/", "lambda", d->lambda);
        if (rc == NF_OK)
            rc = nf_h5_attr_set_string(f, "/", "relatives", d->relatives == NF_DEP_PEDIGREE ? "pedigree" : "families");
    }
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

static int save_iid(const char *name, const char *path, size_t n, long seed, uint64_t stream)
{
    const char *shape = name + strlen("dependent-");
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, stream);
    double *x = malloc(n * 2 * sizeof *x), *lp = malloc(n * sizeof *lp);
    int rc = rng && x && lp ? nf_dep_data_iid(shape, n, rng, x, lp) : nf_error(NF_ENOMEM, "out of memory for %zu rows", n);
    nf_h5 *f = NULL;
    if (rc == NF_OK) rc = nf_h5_create(&f, path, "nf-data", 1);
    if (rc == NF_OK) {
        rc = write_rows(f, name, "iid", x, lp, n, seed);
        rc = rc == NF_OK ? nf_h5_commit(f) : (nf_h5_abort(f), rc);
    }
    nf_rng_free(rng);
    free(x), free(lp);
    return rc;
}

int app_data_make_dependent(int argc, char **argv)
{
    const char *cmd = "data make", *out = NULL, *val = NULL, *test = NULL, *structure = "equi", *pos[1];
    const char *relatives = "families";
    long n = 0, n_val = 5000, seed = 1;
    double lambda = 0.5;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--structure", .kind = FLAG_STRING, .dst = &structure},
        {.name = "--val", .kind = FLAG_STRING, .dst = &val},
        {.name = "--test", .kind = FLAG_STRING, .dst = &test},
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 2, .hi = 46340},
        {.name = "--n-val", .kind = FLAG_LONG, .dst = &n_val, .lo = 1, .hi = 100000000},
        {.name = "--lambda", .kind = FLAG_DOUBLE, .dst = &lambda, .lo = 1e-6, .hi = 1 - 1e-6},
        {.name = "--relatives", .kind = FLAG_STRING, .dst = &relatives},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = MAKE_DEPENDENT_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    const char *shape = pos[0] + strlen("dependent-");
    if (!nf_dep_shape_known(shape))
        return cli_usage_error(cmd, "unknown dependent data set '%s' (expected dependent-" NF_DEP_SHAPES ")", pos[0]);
    int equi = !strcmp(structure, "equi");
    if (!equi && strcmp(structure, "kinship"))
        return cli_usage_error(cmd, "--structure '%s' (expected equi or kinship)", structure);
    int pedigree = !strcmp(relatives, "pedigree");
    if (!pedigree && strcmp(relatives, "families"))
        return cli_usage_error(cmd, "--relatives '%s' (expected " NF_DEP_RELATIVES ")", relatives);
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o TRAIN.h5)");
    if (!n) n = equi ? 10000 : 5000;
    if (app_check_output(out) != NF_OK || (val && app_check_output(val) != NF_OK) ||
        (test && app_check_output(test) != NF_OK) || app_check_outputs_differ(out, "-o", val, "--val") != NF_OK ||
        app_check_outputs_differ(out, "-o", test, "--test") != NF_OK ||
        app_check_outputs_differ(val, "--val", test, "--test") != NF_OK)
        return cli_fail(cmd);
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, 0x646570);
    nf_dep_data d;
    int rc = rng ? nf_dep_data_make(&d, shape, equi ? NF_DEP_EQUI : NF_DEP_KINSHIP,
                                          pedigree ? NF_DEP_PEDIGREE : NF_DEP_FAMILIES, (size_t)n, lambda, rng) : NF_ENOMEM;
    nf_rng_free(rng);
    if (rc != NF_OK) return cli_fail(cmd);
    rc = save_train(&d, pos[0], out, seed);
    if (rc == NF_OK && val) rc = save_iid(pos[0], val, (size_t)n_val, seed, 0x76616c);
    if (rc == NF_OK && test) rc = save_iid(pos[0], test, (size_t)n_val, seed, 0x74657374);
    if (rc == NF_OK)
        fprintf(stderr, "nf data make: %s, %zu dependent rows (%s%s%s: %zu %s); wrote %s%s%s%s%s\n", pos[0], d.n,
                structure, equi ? "" : ", ", equi ? "" : relatives, equi ? d.n_blocks : d.nnz,
                equi ? "blocks" : "entries of K's upper triangle", out,
                val ? ", " : "", val ? val : "", test ? ", " : "", test ? test : "");
    nf_dep_data_free(&d);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

void app_data_list_dependent(void)
{
    static const char *const shapes[] = {"sign", "abs", "crescent", "sine", "crescent-cube"};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        char name[40];
        snprintf(name, sizeof name, "dependent-%s", shapes[k]);
        printf("%-23s dim 2  density exact      rows correlated across points (--structure equi|kinship), "
               "each row's marginal density exact\n", name);
    }
}
