/* bench/dependent_lookups.c - can a one-thread kinship step hide its table lookups behind the flow's
 * matrix products?
 *
 *   build/float/bench/dependent_lookups [ROUNDS]          (make bench-build)
 *
 * A one-component kinship step reads a batch's b (b + 1) / 2 precision entries at random places of
 * an n x n float table (distributions/dependent.c kin_lookup_rows: 32,896 reads of a 100 MB table at
 * b = 256, n = 5,000), and on one thread those reads add about a third to the small RealNVP's step
 * (bench/RESULTS.md, issue 12).  With two threads they run beside the forward pass.  On one thread
 * the only way to overlap them with work is to issue prefetches of the batch's entries between the
 * forward pass's products and read them afterwards.  This program times, per batch, in one process:
 *
 *   in order:     18 products of 256 x 64 by 64 x 64 (about the forward and backward passes of the
 *                 6 x 64 RealNVP at batch 256), then the lookups as the library reads them (row by
 *                 row, prefetching two rows ahead);
 *   interleaved:  the same products cut into row chunks of CHUNK rows, with an equal share of the
 *                 batch's entries prefetched after each chunk, then the same lookups;
 *
 * for chunks of 256 (one burst a product), 48 and 12 rows.  If the prefetches overlapped the
 * products, the interleaved total would be smaller by about the lookups' time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/clock.h"

enum { N_POINTS = 5000, BATCH = 256, WIDTH = 64, PRODUCTS = 18, PAIRS = BATCH * (BATCH + 1) / 2 };

static nf_real *table;             /* N_POINTS x N_POINTS; entry (hi, lo) read for a pair */
static size_t idx[BATCH];          /* the batch's points */
static size_t where[PAIRS];        /* the table offsets of its pairs, row by row */
static double A_BB[BATCH * BATCH]; /* the lower triangle read */
static nf_real X[BATCH * WIDTH], W[WIDTH * WIDTH], Y[BATCH * WIDTH];
static uint64_t rng_state = 88172645463325252ULL;

static uint64_t next_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A batch of distinct points and its pairs' offsets (j <= i: row max, column min). */
static void draw_batch(void)
{
    static unsigned char seen[N_POINTS];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < BATCH;) {
        size_t p = next_random() % N_POINTS;
        if (!seen[p]) seen[p] = 1, idx[i++] = p;
    }
    int q = 0;
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j <= i; j++) {
            size_t hi = idx[i] > idx[j] ? idx[i] : idx[j], lo = idx[i] ^ idx[j] ^ hi;
            where[q++] = hi * N_POINTS + lo;
        }
}

/* The library's reads: row by row, the entries of row i + 2 prefetched while row i is read. */
static void lookups(void)
{
    int q = 0;
    for (int i = 0; i < BATCH; i++) {
        int ahead = q + (i + 1) + (i + 2);
        for (int j = 0; j <= i + 2 && i + 2 < BATCH; j++) __builtin_prefetch(table + where[ahead + j], 0, 2);
        double *row = A_BB + (size_t)i * BATCH;
        for (int j = 0; j <= i; j++) row[j] = table[where[q++]];
    }
}

/* The products in row chunks, prefetching the batch's entries in equal shares after each chunk
 * (prefetch = 0: none). */
static void products(int chunk, int prefetch)
{
    const int bursts = PRODUCTS * ((BATCH + chunk - 1) / chunk), share = (PAIRS + bursts - 1) / bursts;
    int q = 0;
    for (int p = 0; p < PRODUCTS; p++)
        for (int r = 0; r < BATCH; r += chunk) {
            const int m = BATCH - r < chunk ? BATCH - r : chunk;
            nf_gemm(0, 0, m, WIDTH, WIDTH, 1, X + (size_t)r * WIDTH, WIDTH, W, WIDTH, 0, Y + (size_t)r * WIDTH, WIDTH);
            for (int k = 0; prefetch && k < share && q < PAIRS; k++) __builtin_prefetch(table + where[q++], 0, 2);
        }
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 400, warmup = 20;
    if (rounds < 1) {
        fprintf(stderr, "usage: dependent_lookups [ROUNDS]  (batches timed per variant, default 400)\n");
        return 2;
    }
    nf_blas_set_threads(1);
    const size_t cells = (size_t)N_POINTS * N_POINTS;
    table = malloc(cells * sizeof *table);
    if (!table) {
        fprintf(stderr, "dependent_lookups: out of memory for the %zu MB table\n", cells * sizeof *table >> 20);
        return 1;
    }
    for (size_t c = 0; c < cells; c++) table[c] = (nf_real)(c % 97) * (nf_real)0.01;
    for (int i = 0; i < BATCH * WIDTH; i++) X[i] = (nf_real)0.01 * (nf_real)(i % 13);
    for (int i = 0; i < WIDTH * WIDTH; i++) W[i] = (nf_real)0.02 * (nf_real)(i % 7);
    printf("one thread; per batch of %d points from a %d-point float table (%zu MB), %d batches each\n", BATCH,
           N_POINTS, cells * sizeof *table >> 20, rounds);
    printf("| chunk (rows) | products | lookups | in order | products + prefetches | lookups after | interleaved |\n");
    printf("|---|---|---|---|---|---|---|\n");
    static const int chunks[] = {256, 48, 12};
    double checksum = 0;
    for (int c = 0; c < 3; c++) {
        double t[4] = {0};
        for (int r = 0; r < warmup + rounds; r++) {
            for (int v = 0; v < 2; v++) { /* v = 0 in order, 1 interleaved; a fresh batch each */
                draw_batch();
                double t0 = nf_seconds();
                products(chunks[c], v);
                double t1 = nf_seconds();
                lookups();
                double t2 = nf_seconds();
                checksum += A_BB[BATCH + 1] + Y[3];
                if (r >= warmup) t[2 * v] += t1 - t0, t[2 * v + 1] += t2 - t1;
            }
        }
        for (int k = 0; k < 4; k++) t[k] *= 1e6 / rounds;
        printf("| %d | %.1f us | %.1f us | **%.1f us** | %.1f us | %.1f us | **%.1f us** |\n", chunks[c], t[0], t[1],
               t[0] + t[1], t[2], t[3], t[2] + t[3]);
    }
    fprintf(stderr, "(checksum %g)\n", checksum);
    free(table);
    return 0;
}
