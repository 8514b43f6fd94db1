/* tests/check_presets.c - every preset is a density, and its sampler draws from that density.
 *
 * For each preset (realnvp, nice, maf, iaf, nsf-coupling, nsf-ar, glow) at D = 2, with parameters
 * moved well away from their identity start (so every layer bends the density):
 *   integral   exp(log p) summed over a 2-D grid (midpoint rule) that holds all of 200000 samples is 1;
 *   samples    the sampler's log-density of each draw equals log_prob at the draw, and the draws
 *              fall into the 16 x 16 cells of the square holding the central 99% of each coordinate
 *              as often as the grid integral of p over each cell says (Pearson's chi-square; the
 *              outside of the square is one more cell, cells with fewer than 40 expected draws are
 *              pooled into one).
 * The first catches a wrong log-determinant or base density anywhere in the chain (a density that
 * does not integrate to 1), the second a sampling direction that is not the inverse of the density
 * direction, or a base sampler that does not draw from the base density, even when the log-densities
 * the sampler reports agree with log_prob.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "flows/flow.h"
#include "tests/testutil.h"

static const char *const presets[] = {"realnvp", "nice", "maf", "iaf", "nsf-coupling", "nsf-ar", "glow"};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

#define NS 200000 /* draws */
#define G 640     /* fine grid points per axis */
#define CG 16     /* coarse cells per axis for the chi-square (each 40 x 40 fine points) */

/* Perturb the parameters away from their (often identity) start, in proportion to scale; entries
 * that are zero with a zero gradient are structural (masked MADE weights) and stay zero. */
static void randomize(nf_flow *f, double scale, uint64_t seed)
{
    enum { N = 8 };
    nf_real x[N * 2], lp[N], w[N];
    nf_test_fill_normal(x, (size_t)N * 2, 1.0, seed + 1);
    for (int i = 0; i < N; i++) w[i] = 1;
    nf_params_zero_grad(f->P);
    ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, N), NF_OK);
    ck_assert_int_eq(nf_flow_backward(f, w, NULL, NULL), NF_OK);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < f->P->n; i++)
        if (f->P->value[i] != 0 || f->P->grad[i] != 0) f->P->value[i] += (nf_real)(scale * nf_rng_normal(r));
    nf_params_zero_grad(f->P);
    nf_rng_free(r);
}

static int cmp_real(const void *a, const void *b)
{
    const nf_real x = *(const nf_real *)a, y = *(const nf_real *)b;
    return (x > y) - (x < y);
}

static nf_flow *preset_flow(int k)
{
    char spec[1 << 14];
    nf_preset_knobs kn = {.layers = 3, .hidden = 16, .blocks = 1, .bins = 6};
    ck_assert_int_eq(nf_preset_expand(presets[k], &kn, spec, sizeof spec), NF_OK);
    nf_flow *f;
    int rc = nf_flow_create(&f, spec, 2, 0, 11 + (uint64_t)k);
    ck_assert_msg(rc == NF_OK, "preset %s: %s", presets[k], nf_strerror_last());
    randomize(f, 0.2, 100 + (uint64_t)k);
    return f;
}

/* The flow's density on the G x G midpoint grid of [lo, hi]^2 (row-major in (x0, x1)): p[i G + j] is
 * p at (lo + (i + 1/2) h, lo + (j + 1/2) h) times the cell area h^2, so sum p = the grid integral. */
static double grid_mass(nf_flow *f, double lo, double hi, double *p)
{
    const double h = (hi - lo) / G;
    nf_real *x = malloc((size_t)G * 2 * sizeof(nf_real)), *lp = malloc(G * sizeof(nf_real));
    double total = 0;
    for (int i = 0; i < G; i++) {
        for (int j = 0; j < G; j++) {
            x[2 * j] = (nf_real)(lo + (i + 0.5) * h);
            x[2 * j + 1] = (nf_real)(lo + (j + 0.5) * h);
        }
        ck_assert_int_eq(nf_flow_log_prob(f, lp, x, NULL, NULL, G), NF_OK);
        for (int j = 0; j < G; j++) {
            double v = exp((double)lp[j]) * h * h;
            ck_assert_msg(isfinite(v), "log p(%g, %g) = %g", (double)x[2 * j], (double)x[2 * j + 1], (double)lp[j]);
            p[(size_t)i * G + j] = v;
            total += v;
        }
    }
    free(x);
    free(lp);
    return total;
}

START_TEST(test_preset_density)
{
    const int k = _i;
    nf_flow *f = preset_flow(k);
    nf_real *xs = malloc((size_t)NS * 2 * sizeof(nf_real)), *lps = malloc(NS * sizeof(nf_real));
    nf_real *lpc = malloc(NS * sizeof(nf_real));
    nf_rng *r = nf_rng_alloc(2385 + (uint64_t)k, 0);
    ck_assert_int_eq(nf_flow_sample(f, xs, lps, NULL, NS, r), NF_OK);
    nf_rng_free(r);
    ck_assert_int_eq(nf_flow_log_prob(f, lpc, xs, NULL, NULL, NS), NF_OK);
    /* the sampler's log-densities are the density's */
    double worst = 0, ext = 0;
    for (int i = 0; i < NS; i++) {
        worst = fmax(worst, fabs((double)lps[i] - lpc[i]) / (1 + fabs((double)lpc[i])));
        ext = fmax(ext, fmax(fabs((double)xs[2 * i]), fabs((double)xs[2 * i + 1])));
    }
    ck_assert_msg(worst < 50 * NF_TEST_TOL_ROUNDTRIP, "%s: sampler's log p and log_prob differ by %g (relative)",
                  presets[k], worst);
    /* the grid: every draw inside, with a margin */
    const double hi = ceil(1.05 * ext), lo = -hi;
    double *p = malloc((size_t)G * G * sizeof(double));
    const double mass = grid_mass(f, lo, hi, p);
    fprintf(stderr, "%-13s grid [%g, %g]^2: integral of p = %.6f\n", presets[k], lo, hi, mass);
    ck_assert_msg(fabs(mass - 1) < 2e-3, "%s: the density integrates to %.6f over [%g, %g]^2 (holding every one of %d "
                  "draws), expected 1", presets[k], mass, lo, hi, NS);
    /* chi-square of the draws over CG x CG cells of the central square that holds 99% of the draws in
     * each coordinate (its own fine grid gives each cell's probability); the outside is one more cell */
    nf_real *sorted = malloc(NS * sizeof(nf_real));
    double c_lo = INFINITY, c_hi = -INFINITY;
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < NS; i++) sorted[i] = xs[2 * i + d];
        qsort(sorted, NS, sizeof *sorted, cmp_real);
        c_lo = fmin(c_lo, (double)sorted[NS / 200]);
        c_hi = fmax(c_hi, (double)sorted[NS - 1 - NS / 200]);
    }
    free(sorted);
    const double cmass = grid_mass(f, c_lo, c_hi, p);
    static double expect[CG * CG + 1];
    static long count[CG * CG + 1];
    memset(expect, 0, sizeof expect);
    memset(count, 0, sizeof count);
    const int per = G / CG;
    for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++) expect[(i / per) * CG + j / per] += p[(size_t)i * G + j];
    expect[CG * CG] = 1 - cmass; /* outside the square */
    const double h = (c_hi - c_lo) / G;
    for (int s = 0; s < NS; s++) {
        int i = (int)floor(((double)xs[2 * s] - c_lo) / h), j = (int)floor(((double)xs[2 * s + 1] - c_lo) / h);
        count[(i >= 0 && i < G && j >= 0 && j < G) ? (i / per) * CG + j / per : CG * CG]++;
    }
    double chi2 = 0, pool_e = 0;
    long pool_c = 0;
    int df = -1;
    for (int c = 0; c <= CG * CG; c++) {
        const double e = expect[c] * NS;
        if (e < 40) {
            pool_e += e;
            pool_c += count[c];
            continue;
        }
        chi2 += (count[c] - e) * (count[c] - e) / e;
        df++;
    }
    if (pool_e >= 40 || pool_c > 0) {
        const double e = fmax(pool_e, 1.0);
        chi2 += (pool_c - e) * (pool_c - e) / e;
        df++;
    }
    /* chi-square with df degrees of freedom: mean df, standard deviation sqrt(2 df) */
    const double limit = df + 6 * sqrt(2.0 * df);
    fprintf(stderr, "%-13s %d draws in %d cells: chi-square %.1f (limit %.1f)\n", presets[k], NS, df + 1, chi2, limit);
    ck_assert_msg(df >= 20, "%s: only %d cells with enough expected draws", presets[k], df + 1);
    ck_assert_msg(chi2 < limit, "%s: the draws do not follow the density: chi-square %.1f over %d cells (limit %.1f)",
                  presets[k], chi2, df + 1, limit);
    free(p);
    free(xs);
    free(lps);
    free(lpc);
    nf_flow_free(f);
}
END_TEST

static Suite *presets_suite(void)
{
    Suite *s = suite_create("presets");
    TCase *tc = tcase_create("density");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_preset_density, 0, NPRESETS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(presets_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
