/* bench/bench_dependent.c - what a kinship batch adds to a training step, in one process: the same
 * flow (6 affine couplings, hidden 64, on 2-D data) scores batches of 256 distinct random rows of
 * n = 5,000 (nf_flow_nll_step: forward, the base's log-density, backward) three ways, interleaved in
 * blocks so that the machine's drift hits all three alike:
 *
 *   i.i.d.            the dependent base without row indices: the marginal N(0, I), no precision
 *   kinship, in step  the estimator with the cached precision, A_BB read inside the log-density
 *   kinship, ahead    the same, A_BB read by the worker pool while the forward pass runs
 *                     (nf_dep_batch_prepare; with two or more threads, the same bits as in step)
 *
 * Prints each way's median milliseconds per step (and quartiles over the blocks) and its ratio to
 * the i.i.d. step.  The structure is Sigma = 0.5 I + 0.5 K with K tridiagonal (0.25 off the
 * diagonal; one connected component, so every pair's entry is read from the whole n x n precision:
 * what that costs depends on n and b, not on K's values; the eigendecomposition and the precision
 * build, once before timing, take about a minute with Debian's OpenBLAS), or K in families, the K of
 * `nf data make dependent-crescent --structure kinship --seed 1` (entries read within families only).
 * With `eigen`, the kinship ways go through the eigenbasis instead of the cached precision (what a
 * learned lambda on one component does before its third update: two passes over the batch's rows of
 * U, no n x n table).  Last, the time of one update of a learned lambda (nf_dep_best_theta on all n
 * latents: a pass over U in double), median of 5.
 *
 *   make bench-build && build/float/bench/bench_dependent [THREADS (2)] [BLOCKS (30)] [tridiagonal|families] [eigen]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "datasets/dependent_data.h"
#include "distributions/dependent.h"
#include "flows/flow.h"

enum { N = 5000, B = 256, STEPS = 60, WARM = 5 };

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_dependent: %s: %s\n", what, nf_strerror_last());
    exit(1);
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2, blocks = argc > 2 ? atoi(argv[2]) : 30;
    const char *structure = argc > 3 ? argv[3] : "tridiagonal";
    const int families = !strcmp(structure, "families"), eigen = argc > 4 && !strcmp(argv[4], "eigen");
    if (threads < 1 || blocks < 1 || (!families && strcmp(structure, "tridiagonal")) || (argc > 4 && !eigen)) {
        fprintf(stderr, "usage: bench_dependent [THREADS >= 1] [BLOCKS >= 1] [tridiagonal|families] [eigen]\n");
        return 2;
    }
    double *K = calloc((size_t)N * N, sizeof *K);
    nf_real *X = malloc(2 * (size_t)N * sizeof *X), *xb = malloc(2 * (size_t)B * sizeof *xb);
    size_t *idx = malloc(B * sizeof *idx);
    unsigned char *used = calloc(N, 1);
    double *ms = malloc(3 * (size_t)blocks * sizeof *ms);
    if (!K || !X || !xb || !idx || !used || !ms) {
        fprintf(stderr, "bench_dependent: out of memory\n");
        return 1;
    }
    if (families) { /* the K of nf data make dependent-crescent --structure kinship --seed 1 */
        nf_dep_data D;
        nf_rng *rng = nf_rng_alloc(1, 0x646570);
        if (!rng || nf_dep_data_make(&D, "crescent", NF_DEP_KINSHIP, NF_DEP_FAMILIES, N, 0.5, rng) != NF_OK)
            die("families");
        for (size_t q = 0; q < D.nnz; q++)
            K[(size_t)D.row[q] * N + (size_t)D.col[q]] = K[(size_t)D.col[q] * N + (size_t)D.row[q]] = D.val[q];
        nf_dep_data_free(&D);
        nf_rng_free(rng);
    } else {
        for (size_t i = 0; i < N; i++) K[i * N + i] = 1;
        for (size_t i = 1; i < N; i++) K[i * N + i - 1] = K[(i - 1) * N + i] = 0.25;
    }
    nf_dep *d;
    if (nf_dep_kinship_create(&d, K, N, N, N) != NF_OK) die("kinship structure");
    free(K);
    if (nf_dep_kinship_cache(d, !eigen) != NF_OK) die("precision cache");
    nf_flow *f;
    const char *spec = "affine-coupling(hidden=64), affine-coupling(hidden=64), affine-coupling(hidden=64), "
                       "affine-coupling(hidden=64), affine-coupling(hidden=64), affine-coupling(hidden=64)";
    if (nf_flow_create(&f, spec, 2, 0, 7) != NF_OK) die("flow");
    nf_dist_destroy(&f->base);
    if (nf_dist_create(&f->base, &nf_dist_dependent, 2, 0, "base", "params=1, init=0, learn=0", f->P, f->S, NULL) !=
            NF_OK ||
        nf_dist_dependent_attach(&f->base, d) != NF_OK)
        die("dependent base");
    nf_blas_set_threads(threads);
    unsigned s = 11;
    for (size_t i = 0; i < 2 * (size_t)N; i++) X[i] = (nf_real)((s = s * 1103515245u + 12345u) >> 8 & 1023) / 512 - 1;
    const char *const way[3] = {"i.i.d.", eigen ? "kinship, eigenbasis" : "kinship, lookups in step",
                                eigen ? "kinship, eigenbasis (prepare: nothing to read)" : "kinship, lookups ahead"};
    for (int blk = 0; blk < blocks; blk++)
        for (int w = 0; w < 3; w++) {
            nf_dep_lookahead(d, w == 2);
            double t0 = 0;
            for (int st = 0; st < WARM + STEPS; st++) {
                if (st == WARM) t0 = nf_seconds();
                memset(used, 0, N);
                for (int i = 0; i < B; i++) {
                    size_t v;
                    do v = ((s = s * 1103515245u + 12345u) >> 8) % N;
                    while (used[v]);
                    used[v] = 1;
                    idx[i] = v;
                    memcpy(xb + 2 * i, X + 2 * v, 2 * sizeof *X);
                }
                double nll;
                nf_params_zero_grad(f->P);
                if (nf_flow_nll_step(f, xb, NULL, w ? idx : NULL, B, &nll) != NF_OK) die("step");
            }
            ms[w * blocks + blk] = (nf_seconds() - t0) / STEPS * 1e3;
        }
    printf("| threads | step | ms per step (median; quartiles over %d blocks of %d) | against i.i.d. |\n", blocks,
           STEPS);
    printf("|---|---|---|---|\n");
    double iid = 0;
    for (int w = 0; w < 3; w++) {
        double *m = ms + w * blocks;
        qsort(m, blocks, sizeof *m, by_value);
        double med = m[blocks / 2];
        if (!w) iid = med;
        printf("| %d | %s | %.3f (%.3f-%.3f) | %.2fx |\n", threads, way[w], med, m[blocks / 4], m[3 * blocks / 4],
               med / iid);
    }
    double upd[5];
    for (int r = 0; r < 5; r++) {
        double theta = 0.5, t0 = nf_seconds();
        if (nf_dep_best_theta(d, X, 2, &theta, 3) != NF_OK) die("lambda update");
        upd[r] = (nf_seconds() - t0) * 1e3;
    }
    qsort(upd, 5, sizeof *upd, by_value);
    printf("\none update of a learned lambda (all %d latents): %.1f ms (median of 5)\n", N, upd[2]);
    nf_flow_free(f);
    nf_dep_free(d);
    free(X), free(xb), free(idx), free(used), free(ms);
    return 0;
}
