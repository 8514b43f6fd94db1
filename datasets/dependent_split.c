/* datasets/dependent_split.c - splitting dependent rows by whole units (see dependent_split.h). */
#include "datasets/dependent_split.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "datasets/dependent_load.h"

void nf_dep_split_free(nf_dep_split *s)
{
    free(s->group);
    free(s->rho);
    free(s->dense);
    free(s->row);
    free(s->col);
    free(s->value);
    memset(s, 0, sizeof *s);
}

static int read_kinship(nf_h5 *f, const char *in, nf_dep_split *s)
{
    size_t rows, cols;
    s->kinship = 1;
    if (!nf_h5_exists(f, "/K/row")) {
        NF_TRY(nf_h5_read_double(f, "/K", &s->dense, &rows, &cols));
        if (rows != s->n || cols != s->n)
            return nf_error(NF_EFORMAT, "%s:/K is %zu x %zu (expected %zu x %zu: one row and column per row of /x)", in,
                            rows, cols, s->n, s->n);
        return NF_OK;
    }
    size_t nc, vc;
    NF_TRY(nf_dep_read_integers(f, "/K/row", "row indices", &s->row, &s->nnz));
    NF_TRY(nf_dep_read_integers(f, "/K/col", "column indices", &s->col, &nc));
    NF_TRY(nf_h5_read_double(f, "/K/value", &s->value, &rows, &vc));
    if (nc != s->nnz || rows * (vc ? vc : 1) != s->nnz)
        return nf_error(NF_EFORMAT, "%s:/K has %zu rows, %zu columns and %zu values (expected as many of each)", in,
                        s->nnz, nc, rows);
    for (size_t k = 0; k < s->nnz; k++)
        if (s->row[k] < 0 || s->col[k] < 0 || (uint64_t)s->row[k] >= s->n || (uint64_t)s->col[k] >= s->n)
            return nf_error(NF_EDATA, "%s:/K triplet %zu is (%lld, %lld) (expected indices 0 to %zu)", in, k,
                            (long long)s->row[k], (long long)s->col[k], s->n - 1);
    return NF_OK;
}

int nf_dep_split_read(nf_h5 *f, const char *in, size_t n, nf_dep_split *s, int *present)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    *present = nf_h5_exists(f, "/group") || nf_h5_exists(f, "/K");
    if (nf_h5_exists(f, "/group")) {
        size_t m;
        NF_TRY(nf_dep_read_integers(f, "/group", "group ids", &s->group, &m));
        if (m != n)
            return nf_error(NF_EFORMAT, "%s:/group has %zu ids, expected %zu (one per row of /x)", in, m, n);
        if (nf_h5_exists(f, "/rho")) {
            size_t cols;
            NF_TRY(nf_h5_read_double(f, "/rho", &s->rho, &s->n_rho, &cols));
        }
    }
    if (nf_h5_exists(f, "/K")) NF_TRY(read_kinship(f, in, s));
    return NF_OK;
}

/* Union-find over the rows: the root of i's unit. */
static size_t root(size_t *up, size_t i)
{
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
}

static void join(size_t *up, size_t a, size_t b)
{
    a = root(up, a), b = root(up, b);
    if (a != b) up[a > b ? a : b] = a < b ? a : b; /* the smaller row is the root: the same units every run */
}

/* unit_of (n) WRITTEN with each row's unit, numbered 0..*nu-1 by their first rows. */
static int find_units(const nf_dep_split *s, const char *in, size_t *unit_of, size_t *nu)
{
    const size_t n = s->n;
    size_t *up = malloc((n ? n : 1) * sizeof *up), *first = NULL;
    nf_dep *eq = NULL;
    int rc = up ? NF_OK : nf_error(NF_ENOMEM, "%s: out of memory for the groups of %zu rows", in, n);
    if (rc == NF_OK && s->group) /* the blocks of nf fit --dependence equi: ids numbered 0..B-1 */
        rc = nf_dep_equi_create(&eq, s->group, n, 0);
    if (rc == NF_OK && eq && !(first = malloc((size_t)eq->n_blocks * sizeof *first)))
        rc = nf_error(NF_ENOMEM, "%s: out of memory for the groups of %zu rows", in, n);
    if (rc != NF_OK) {
        free(up), nf_dep_free(eq);
        return rc;
    }
    for (size_t i = 0; i < n; i++) up[i] = i;
    if (eq) { /* each row joined to its block's first row */
        for (int b = 0; b < eq->n_blocks; b++) first[b] = (size_t)-1;
        for (size_t i = 0; i < n; i++) {
            const int b = eq->block[i];
            if (first[b] == (size_t)-1) first[b] = i;
            else join(up, first[b], i);
        }
    }
    if (s->dense) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (s->dense[i * n + j] != 0 || s->dense[j * n + i] != 0) join(up, i, j);
    } else {
        for (size_t k = 0; k < s->nnz; k++)
            if (s->value[k] != 0) join(up, (size_t)s->row[k], (size_t)s->col[k]);
    }
    *nu = 0;
    for (size_t i = 0; i < n; i++) unit_of[i] = root(up, i) == i ? (*nu)++ : (size_t)-1;
    for (size_t i = 0; i < n; i++) unit_of[i] = unit_of[root(up, i)];
    free(up), free(first);
    nf_dep_free(eq);
    return NF_OK;
}

int nf_dep_split_count(const nf_dep_split *s, const char *in, size_t *units, size_t *largest)
{
    size_t *unit_of = malloc((s->n ? s->n : 1) * sizeof *unit_of), nu = 0, *size = NULL;
    int rc = unit_of ? find_units(s, in, unit_of, &nu) : nf_error(NF_ENOMEM, "%s: out of memory", in);
    if (rc == NF_OK && !(size = calloc(nu ? nu : 1, sizeof *size))) rc = nf_error(NF_ENOMEM, "%s: out of memory", in);
    *units = nu, *largest = 0;
    for (size_t i = 0; rc == NF_OK && i < s->n; i++)
        if (++size[unit_of[i]] > *largest) *largest = size[unit_of[i]];
    free(unit_of), free(size);
    return rc;
}

int nf_dep_split_parts(const nf_dep_split *s, const char *in, double val, double test, uint64_t seed, size_t *rows,
                       size_t count[3], size_t units[3])
{
    const size_t n = s->n;
    size_t *unit_of = malloc((n ? n : 1) * sizeof *unit_of), *order = NULL, *size = NULL;
    int *part_of = NULL;
    size_t nu = 0;
    int rc = unit_of ? find_units(s, in, unit_of, &nu) : nf_error(NF_ENOMEM, "%s: out of memory splitting", in);
    if (rc == NF_OK) {
        order = malloc(nu * sizeof *order);
        size = calloc(nu, sizeof *size);
        part_of = malloc(nu * sizeof *part_of);
        if (!order || !size || !part_of) rc = nf_error(NF_ENOMEM, "%s: out of memory splitting", in);
    }
    if (rc == NF_OK) {
        for (size_t i = 0; i < n; i++) size[unit_of[i]]++;
        nf_rng *r = nf_rng_alloc(seed, 0x5e11);
        if (!r) rc = NF_ENOMEM;
        else nf_rng_permutation(r, order, nu);
        nf_rng_free(r);
    }
    if (rc == NF_OK) {
        /* in the drawn order, each unit to validation, else test, if it brings that part closer to
         * round(n F) rows (|held + size - want| < |held - want|), else to training: a group larger
         * than twice what a part lacks never lands there (Pareto group sizes would otherwise hand a
         * 10% validation part a group of most of the rows) */
        const size_t want[3] = {0, (size_t)llround((double)n * val), (size_t)llround((double)n * test)};
        size_t held[3] = {0, 0, 0};
        for (size_t u = 0; u < nu; u++) {
            const size_t m = size[order[u]];
            int p = 0;
            for (int k = 1; k <= 2 && !p; k++)
                if (held[k] < want[k] && m < 2 * (want[k] - held[k])) p = k;
            part_of[order[u]] = p;
            held[p] += m;
        }
        memset(units, 0, 3 * sizeof *units);
        for (size_t u = 0; u < nu; u++) units[part_of[u]]++;
        for (int q = 0; q < 3; q++) count[q] = held[q];
        if (count[0] == 0)
            rc = nf_error(NF_EINVAL,
                          "%s: the validation and test parts take every one of the %zu groups of related rows (%zu rows), leaving "
                          "none to train on (expected smaller --val and --test)", in, nu, n);
    }
    if (rc == NF_OK) {
        size_t at[3] = {0, count[0], count[0] + count[1]};
        for (size_t i = 0; i < n; i++) rows[at[part_of[unit_of[i]]]++] = i;
    }
    free(unit_of), free(order), free(size), free(part_of);
    return rc;
}

int nf_dep_split_write(nf_h5 *f, const nf_dep_split *s, const size_t *rows, size_t m)
{
    if (s->group) {
        int64_t *g = malloc((m ? m : 1) * sizeof *g);
        if (!g) return nf_error(NF_ENOMEM, "out of memory writing %zu group ids", m);
        for (size_t i = 0; i < m; i++) g[i] = s->group[rows[i]];
        int rc = nf_h5_write_int64(f, "/group", g, m, 0);
        free(g);
        NF_TRY(rc);
        if (s->rho) NF_TRY(nf_h5_write_double(f, "/rho", s->rho, s->n_rho, 0));
    }
    if (!s->kinship) return NF_OK;
    if (s->dense) {
        double *K = malloc((m ? m * m : 1) * sizeof *K);
        if (!K) return nf_error(NF_ENOMEM, "out of memory for a %zu x %zu kinship matrix", m, m);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < m; j++) K[i * m + j] = s->dense[rows[i] * s->n + rows[j]];
        int rc = nf_h5_write_double(f, "/K", K, m, m);
        free(K);
        return rc;
    }
    /* triplets whose two points are both in the part, renumbered */
    int64_t *pos = malloc(s->n * sizeof *pos), *r = malloc((s->nnz ? s->nnz : 1) * sizeof *r),
            *c = malloc((s->nnz ? s->nnz : 1) * sizeof *c);
    double *v = malloc((s->nnz ? s->nnz : 1) * sizeof *v);
    int rc = pos && r && c && v ? NF_OK : nf_error(NF_ENOMEM, "out of memory writing a kinship matrix");
    size_t kept = 0;
    if (rc == NF_OK) {
        for (size_t i = 0; i < s->n; i++) pos[i] = -1;
        for (size_t i = 0; i < m; i++) pos[rows[i]] = (int64_t)i;
        for (size_t k = 0; k < s->nnz; k++)
            if (pos[s->row[k]] >= 0 && pos[s->col[k]] >= 0)
                r[kept] = pos[s->row[k]], c[kept] = pos[s->col[k]], v[kept++] = s->value[k];
        rc = nf_h5_write_int64(f, "/K/row", r, kept, 0);
    }
    if (rc == NF_OK) rc = nf_h5_write_int64(f, "/K/col", c, kept, 0);
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/K/value", v, kept, 0);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/K", "n", (int64_t)m);
    free(pos), free(r), free(c), free(v);
    return rc;
}
