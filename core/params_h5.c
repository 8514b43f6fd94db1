/* core/params_h5.c - saving a parameter store into an HDF5 group and loading it back.
 *
 * Layout under <group>:  value (n)  [m (n), v (n) with state]  names (nslices strings)
 *                        offsets (nslices int64)  sizes (nslices int64)
 * The slice table is what makes a checkpoint safe to load: a model built from another spec has
 * another table, and loading says which slice differs instead of filling the wrong weights.
 */
#include "core/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_MAX 1024

static int join(char *buf, const char *group, const char *name)
{
    size_t gl = strlen(group);
    int trail = gl > 0 && group[gl - 1] == '/';
    int n = snprintf(buf, GROUP_MAX, "%s%s%s", group, trail ? "" : "/", name);
    if (n < 0 || n >= GROUP_MAX) return nf_error(NF_EINVAL, "parameter group path '%.60s...' is too long", group);
    return NF_OK;
}

int nf_params_save(const nf_params *P, nf_h5 *f, const char *group, int with_state)
{
    char path[GROUP_MAX];
    if (strcmp(group, "/") != 0) NF_TRY(nf_h5_group(f, group));
    size_t ns = P->nslices;
    const char **names = nf_calloc(ns, sizeof *names, "parameter slice names");
    int64_t *off = nf_calloc(ns, sizeof *off, "parameter slice offsets");
    int64_t *size = nf_calloc(ns, sizeof *size, "parameter slice sizes");
    int rc = (!names || !off || !size) ? NF_ENOMEM : NF_OK;
    for (size_t i = 0; rc == NF_OK && i < ns; i++) {
        names[i] = P->slices[i].name;
        off[i] = (int64_t)P->slices[i].offset;
        size[i] = (int64_t)P->slices[i].size;
    }
    if (rc == NF_OK && (rc = join(path, group, "value")) == NF_OK) rc = nf_h5_write_real(f, path, P->value, P->n, 0);
    if (rc == NF_OK && with_state && (rc = join(path, group, "m")) == NF_OK)
        rc = nf_h5_write_real(f, path, P->m, P->n, 0);
    if (rc == NF_OK && with_state && (rc = join(path, group, "v")) == NF_OK)
        rc = nf_h5_write_real(f, path, P->v, P->n, 0);
    if (rc == NF_OK && (rc = join(path, group, "names")) == NF_OK) rc = nf_h5_write_strings(f, path, names, ns);
    if (rc == NF_OK && (rc = join(path, group, "offsets")) == NF_OK) rc = nf_h5_write_int64(f, path, off, ns, 0);
    if (rc == NF_OK && (rc = join(path, group, "sizes")) == NF_OK) rc = nf_h5_write_int64(f, path, size, ns, 0);
    free(names);
    free(off);
    free(size);
    return rc;
}

/* The file's slice table must equal the model's; name the first difference. */
static int check_table(const nf_params *P, const char *where, char **names, size_t nn, const int64_t *off,
                       size_t no, const int64_t *size, size_t nsz)
{
    if (nn != no || nn != nsz)
        return nf_error(NF_EFORMAT, "%s: damaged slice table (%zu names, %zu offsets, %zu sizes)", where, nn, no, nsz);
    if (nn != P->nslices)
        return nf_error(NF_EFORMAT, "%s: the file has %zu parameter slices, the model %zu (built from another spec?)",
                        where, nn, P->nslices);
    for (size_t i = 0; i < nn; i++) {
        const nf_param_slice *s = &P->slices[i];
        if (strcmp(names[i], s->name) != 0)
            return nf_error(NF_EFORMAT, "%s: parameter slice %zu is '%s' in the file but '%s' in the model", where, i,
                            names[i], s->name);
        if (size[i] != (int64_t)s->size)
            return nf_error(NF_EFORMAT, "%s: parameter '%s' has %lld entries in the file but %zu in the model", where,
                            s->name, (long long)size[i], s->size);
        if (off[i] != (int64_t)s->offset)
            return nf_error(NF_EFORMAT, "%s: parameter '%s' starts at %lld in the file but at %zu in the model", where,
                            s->name, (long long)off[i], s->offset);
    }
    return NF_OK;
}

/* Read one (n) array of the store into a new buffer, checking its length. */
static int read_vector(nf_h5 *f, const char *where, const char *group, const char *name, size_t n, nf_real **x)
{
    char path[GROUP_MAX];
    size_t rows, cols;
    NF_TRY(join(path, group, name));
    if (!nf_h5_exists(f, path))
        return nf_error(NF_EFORMAT, "%s: no dataset '%s'%s", where, name,
                        strcmp(name, "value") ? " (the file was saved without optimizer state)" : "");
    NF_TRY(nf_h5_read_real(f, path, x, &rows, &cols));
    if (rows * cols != n) {
        free(*x);
        *x = NULL;
        return nf_error(NF_EFORMAT, "%s: '%s' has %zu entries but the model has %zu parameters", where, name,
                        rows * cols, n);
    }
    return NF_OK;
}

/* Every loaded number must be finite (and Adam's second moments >= 0): a damaged file is an error
 * naming the entry and its slice, never a model that computes NaN. */
static int check_finite(const nf_params *P, const char *where, const char *name, const nf_real *x, int nonneg)
{
    for (size_t i = 0; i < P->n; i++) {
        if (isfinite(x[i]) && !(nonneg && x[i] < 0)) continue;
        const char *slice = "?";
        for (size_t s = 0; s < P->nslices; s++)
            if (i >= P->slices[s].offset && i < P->slices[s].offset + P->slices[s].size) slice = P->slices[s].name;
        return nf_error(NF_EFORMAT, "%s: '%s' entry %zu (parameter '%s') is %g (expected a finite number%s)", where,
                        name, i, slice, (double)x[i], nonneg ? " >= 0" : "");
    }
    return NF_OK;
}

int nf_params_load(nf_params *P, nf_h5 *f, const char *group, int with_state)
{
    char where[GROUP_MAX + 256], path[GROUP_MAX];
    snprintf(where, sizeof where, "%s:%s", nf_h5_path(f), group);
    char **names = NULL;
    int64_t *off = NULL, *size = NULL;
    nf_real *value = NULL, *m = NULL, *v = NULL;
    size_t nn = 0, no = 0, nsz = 0, c;
    int rc = join(path, group, "names");
    if (rc == NF_OK) rc = nf_h5_read_strings(f, path, &names, &nn);
    if (rc == NF_OK && (rc = join(path, group, "offsets")) == NF_OK) rc = nf_h5_read_int64(f, path, &off, &no, &c);
    if (rc == NF_OK) no *= c;
    if (rc == NF_OK && (rc = join(path, group, "sizes")) == NF_OK) rc = nf_h5_read_int64(f, path, &size, &nsz, &c);
    if (rc == NF_OK) nsz *= c;
    if (rc == NF_OK) rc = check_table(P, where, names, nn, off, no, size, nsz);
    if (rc == NF_OK) rc = read_vector(f, where, group, "value", P->n, &value);
    if (rc == NF_OK && with_state) rc = read_vector(f, where, group, "m", P->n, &m);
    if (rc == NF_OK && with_state) rc = read_vector(f, where, group, "v", P->n, &v);
    if (rc == NF_OK) rc = check_finite(P, where, "value", value, 0);
    if (rc == NF_OK && with_state) rc = check_finite(P, where, "m", m, 0);
    if (rc == NF_OK && with_state) rc = check_finite(P, where, "v", v, 1);
    /* Only a fully checked file touches the store. */
    if (rc == NF_OK && P->n) {
        memcpy(P->value, value, P->n * sizeof(nf_real));
        if (with_state) {
            memcpy(P->m, m, P->n * sizeof(nf_real));
            memcpy(P->v, v, P->n * sizeof(nf_real));
        }
    }
    nf_h5_strings_free(names, nn);
    free(off);
    free(size);
    free(value);
    free(m);
    free(v);
    return rc;
}
