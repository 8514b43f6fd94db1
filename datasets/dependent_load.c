/* datasets/dependent_load.c - group ids and kinship matrices from HDF5 files (see dependent_load.h). */
#include "datasets/dependent_load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"

int nf_dep_read_integers(nf_h5 *f, const char *path, const char *what, int64_t **out, size_t *count)
{
    *out = NULL;
    double *v;
    size_t rows, cols;
    NF_TRY(nf_h5_read_double(f, path, &v, &rows, &cols));
    if (cols > 1) {
        free(v);
        return nf_error(NF_EFORMAT, "%s: %s is %zu x %zu (expected %s: one column)", nf_h5_path(f), path, rows, cols,
                        what);
    }
    int64_t *x = malloc((rows ? rows : 1) * sizeof *x);
    if (!x) {
        free(v);
        return nf_error(NF_ENOMEM, "out of memory reading %s", path);
    }
    for (size_t i = 0; i < rows; i++) {
        if (!isfinite(v[i]) || v[i] != floor(v[i]) || fabs(v[i]) > 9007199254740992.0) {
            int rc = nf_error(NF_EDATA, "%s: %s entry %zu is %g (expected %s: whole numbers)", nf_h5_path(f), path, i,
                              v[i], what);
            free(v), free(x);
            return rc;
        }
        x[i] = (int64_t)v[i];
    }
    free(v);
    *out = x;
    *count = rows;
    return NF_OK;
}

static int load_groups(nf_dep **out, nf_h5 *f, const nf_dep_source *s, size_t n)
{
    int64_t *g;
    size_t m;
    NF_TRY(nf_dep_read_integers(f, s->dataset, "group ids", &g, &m));
    int rc = NF_OK;
    if (m != n)
        rc = nf_error(NF_EDATA, "%s: %s has %zu group ids but there are %zu rows (expected one per row)", nf_h5_path(f),
                      s->dataset, m, n);
    if (rc == NF_OK) rc = nf_dep_equi_create(out, g, n, s->per_block);
    free(g);
    return rc;
}

/* Sparse triplets under the group: K_ij = K_ji = v, the rest 0. */
static int read_triplets(nf_h5 *f, const char *group, size_t n, double *K)
{
    char p_row[300], p_col[300], p_val[300];
    snprintf(p_row, sizeof p_row, "%s/row", group);
    snprintf(p_col, sizeof p_col, "%s/col", group);
    snprintf(p_val, sizeof p_val, "%s/value", group);
    int64_t *r = NULL, *c = NULL;
    double *v = NULL;
    size_t nr = 0, nc = 0, nv = 0, vc = 0;
    unsigned char *seen = calloc(n * n, 1);
    int rc = seen ? NF_OK : nf_error(NF_ENOMEM, "out of memory for a %zu x %zu kinship matrix", n, n);
    if (rc == NF_OK) rc = nf_dep_read_integers(f, p_row, "row indices", &r, &nr);
    if (rc == NF_OK) rc = nf_dep_read_integers(f, p_col, "column indices", &c, &nc);
    if (rc == NF_OK) rc = nf_h5_read_double(f, p_val, &v, &nv, &vc);
    if (rc == NF_OK && (nr != nc || nr != nv * (vc ? vc : 1)))
        rc = nf_error(NF_EFORMAT, "%s: %s has %zu rows, %zu columns and %zu values (expected as many of each)",
                      nf_h5_path(f), group, nr, nc, nv);
    for (size_t k = 0; rc == NF_OK && k < nr; k++) {
        if (r[k] < 0 || c[k] < 0 || (uint64_t)r[k] >= n || (uint64_t)c[k] >= n)
            rc = nf_error(NF_EDATA, "%s: %s triplet %zu is (%lld, %lld) (expected indices 0 to %zu)", nf_h5_path(f),
                          group, k, (long long)r[k], (long long)c[k], n - 1);
        else if (!isfinite(v[k]))
            rc = nf_error(NF_EDATA, "%s: %s triplet %zu has value %g (expected finite)", nf_h5_path(f), group, k, v[k]);
        else if (seen[r[k] * n + c[k]])
            rc = nf_error(NF_EDATA, "%s: %s entry (%lld, %lld) is given twice (expected each pair once)",
                          nf_h5_path(f), group, (long long)r[k], (long long)c[k]);
        else {
            seen[r[k] * n + c[k]] = seen[c[k] * n + r[k]] = 1;
            K[r[k] * n + c[k]] = K[c[k] * n + r[k]] = v[k];
        }
    }
    free(seen), free(r), free(c), free(v);
    return rc;
}

static int load_kinship(nf_dep **out, nf_h5 *f, const nf_dep_source *s, size_t n)
{
    char probe[300];
    snprintf(probe, sizeof probe, "%s/row", s->dataset);
    int rc;
    if (nf_h5_exists(f, probe)) {
        int64_t size = -1;
        if (!nf_h5_attr_exists(f, s->dataset, "n") || nf_h5_attr_get_int64(f, s->dataset, "n", &size) != NF_OK)
            return nf_error(NF_EFORMAT, "%s: %s holds triplets but no attribute n (expected the matrix size)",
                            nf_h5_path(f), s->dataset);
        if (size != (int64_t)n)
            return nf_error(NF_EINVAL, "%s:%s: kinship matrix is %lld x %lld but there are %zu points (expected %zu x "
                                       "%zu)", nf_h5_path(f), s->dataset, (long long)size, (long long)size, n, n, n);
        if (n > 46340) return nf_error(NF_EINVAL, "kinship matrix of %zu rows (at most 46340)", n);
        double *K = calloc(n * n, sizeof *K);
        if (!K) return nf_error(NF_ENOMEM, "out of memory for a %zu x %zu kinship matrix", n, n);
        rc = read_triplets(f, s->dataset, n, K);
        if (rc == NF_OK) rc = nf_dep_kinship_create(out, K, n, n, n);
        free(K);
    } else {
        double *K;
        size_t rows, cols;
        NF_TRY(nf_h5_read_double(f, s->dataset, &K, &rows, &cols));
        rc = nf_dep_kinship_create(out, K, rows, cols ? cols : 1, n);
        free(K);
    }
    if (rc != NF_OK) rc = nf_error_context(rc, "%s:%s", nf_h5_path(f), s->dataset);
    return rc;
}

int nf_dep_load(nf_dep **out, const nf_dep_source *s, size_t n)
{
    *out = NULL;
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, s->path, NULL, 0));
    int rc;
    if (!nf_h5_exists(f, s->dataset))
        rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected %s)", s->path, s->dataset,
                      s->kind == NF_DEP_EQUI ? "a group id per row" : "a kinship matrix, dense or as triplets");
    else
        rc = s->kind == NF_DEP_EQUI ? load_groups(out, f, s, n) : load_kinship(out, f, s, n);
    nf_h5_close(f);
    return rc;
}
