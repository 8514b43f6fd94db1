/* apps/datafile.c - reading data files for the commands. */
#include "apps/datafile.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/import.h"

void app_data_free(app_data *d)
{
    free(d->x);
    free(d->ctx);
    free(d->logp_true);
    memset(d, 0, sizeof *d);
}

int app_data_load(const char *path, const char *dataset, size_t expect_d, size_t expect_c, int want_ctx,
                  app_data *out)
{
    memset(out, 0, sizeof *out);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    char what[1200];
    int rc;
    if (!nf_h5_exists(f, dataset)) {
        rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected the samples as an n x d array; "
                                  "pick another with --dataset)", path, dataset);
        goto done;
    }
    rc = nf_h5_read_real(f, dataset, &out->x, &out->n, &out->d);
    snprintf(what, sizeof what, "%s:%s", path, dataset);
    if (rc == NF_OK) rc = nf_data_validate(what, out->x, out->n, out->d, expect_d);
    if (rc == NF_OK && (want_ctx || expect_c > 0)) {
        if (!nf_h5_exists(f, "/context")) {
            if (expect_c > 0)
                rc = nf_error(NF_EFORMAT, "%s: no dataset /context (the model is conditional on %zu context "
                                          "values per sample)", path, expect_c);
        } else {
            size_t rows;
            rc = nf_h5_read_real(f, "/context", &out->ctx, &rows, &out->c);
            snprintf(what, sizeof what, "%s:/context", path);
            if (rc == NF_OK) rc = nf_data_validate(what, out->ctx, rows, out->c, expect_c);
            if (rc == NF_OK && rows != out->n)
                rc = nf_error(NF_EFORMAT, "%s:/context has %zu rows but %s has %zu (expected one context row per "
                                          "sample)", path, rows, dataset, out->n);
        }
    }
    if (rc == NF_OK && nf_h5_exists(f, "/logp_true")) {
        size_t rows, cols;
        rc = nf_h5_read_double(f, "/logp_true", &out->logp_true, &rows, &cols);
        if (rc == NF_OK && (rows != out->n || cols != 1))
            rc = nf_error(NF_EFORMAT, "%s:/logp_true has %zu x %zu entries, expected %zu (one per sample)", path,
                          rows, cols, out->n);
    }
done:
    nf_h5_close(f);
    if (rc != NF_OK) app_data_free(out);
    return rc;
}

int app_check_output(const char *path)
{
    if (!path || !path[0]) return nf_error(NF_EINVAL, "no output file given (expected -o FILE)");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return nf_error(NF_EIO, "%s: is a directory (expected the name of the output file)", path);
    char *copy = strdup(path);
    if (!copy) return nf_error(NF_ENOMEM, "out of memory");
    const char *dir = dirname(copy);
    int ok = access(dir, W_OK | X_OK) == 0;
    int rc = ok ? NF_OK
                : nf_error(NF_EIO, "%s: cannot write here (directory '%s' does not exist or is not writable)", path,
                           dir);
    free(copy);
    return rc;
}
