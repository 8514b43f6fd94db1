/* apps/data_make_causal.c - `nf data make causal-poly|causal-moons`: observational data with both
 * potential outcomes and the exact interventional densities (datasets/causal.h), reached from
 * nf data make's table of families (apps/cmd_data.c). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "datasets/causal.h"

static const char *const MAKE_CAUSAL_HELP =
    "usage: nf data make causal-poly|causal-moons -o DATA.h5 [-n N] [--shift B] [--seed S]\n"
    "\n"
    "Observational data (covariates X, treatment A, outcome Y) with both potential outcomes, the exact\n"
    "interventional log-densities log p(Y[a] = y) at them and the true propensity, for nf causal\n"
    "(layout: docs/FORMATS.md, nf-causal).\n"
    "\n"
    "  causal-poly    control X ~ N(B, 1), treated X ~ N(0, 1), half each; Y[0] = 1.5 + 2.18 X + e,\n"
    "                 Y[1] = 2 - 1.82 X + X^2 + e, e ~ N(0, 1)  (B: the overlap; larger is harder)\n"
    "  causal-moons   two-moons covariates, A = the moon, Y[a] = X rotated by -+B radians + noise\n"
    "                 (a 2-D outcome; B 0 means pi/4)\n"
    "\n"
    "  -o FILE        output file (written atomically)\n"
    "  -n N           units                                [1000]\n"
    "  --shift B      causal-poly: control covariate mean; causal-moons: angle   [2; 0]\n"
    "  --seed S       random seed                          [1]\n"
    "\n"
    "example:\n"
    "  nf data make causal-poly --shift 3 -n 1000 -o poly.h5\n";

int app_data_make_causal(int argc, char **argv)
{
    const char *cmd = "data make", *out = NULL, *pos[1];
    long n = 1000, seed = 1;
    double shift = 0;
    int set_shift = 0;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 2, .hi = 100000000},
        {.name = "--shift", .kind = FLAG_DOUBLE, .dst = &shift, .lo = -100, .hi = 100, .seen = &set_shift},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = MAKE_CAUSAL_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    const char *family = pos[0];
    if (strcmp(family, "causal-poly") && strcmp(family, "causal-moons"))
        return cli_usage_error(cmd, "unknown causal data set '%s' (expected causal-poly or causal-moons)", family);
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o DATA.h5)");
    if (!set_shift && !strcmp(family, "causal-poly")) shift = 2;
    if (app_check_output(out) != NF_OK) return cli_fail(cmd);
    nf_causal_data d;
    int rc = nf_causal_make(&d, family, (size_t)n, shift, (uint64_t)seed);
    if (rc == NF_OK) rc = nf_causal_save(&d, out);
    if (rc != NF_OK) return cli_fail(cmd);
    size_t treated = 0;
    for (size_t i = 0; i < d.n; i++) treated += d.a[i] == 1;
    fprintf(stderr, "nf data make: %s, %zu units (%zu treated, %zu control), shift %g; wrote %s\n", family, d.n,
            treated, d.n - treated, shift, out);
    nf_causal_data_free(&d);
    return 0;
}

void app_data_list_causal(void)
{
    printf("%-13s units  1-D covariate, 1-D outcome, both potential outcomes and their exact densities; "
           "control X ~ N(--shift, 1), treated N(0, 1)\n", "causal-poly");
    printf("%-13s units  two-moons covariates, 2-D outcome rotated by +-angle per arm, exact densities\n",
           "causal-moons");
}
