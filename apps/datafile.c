/* apps/datafile.c - reading data files for the commands. */
#include "apps/datafile.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


void app_data_free(app_data *d)
{
    nf_source_free(d->src);
    memset(d, 0, sizeof *d);
}

int app_data_load(const char *path, const char *dataset, size_t expect_d, size_t expect_c, int want_ctx,
                  app_data *out)
{
    memset(out, 0, sizeof *out);
    NF_TRY(nf_source_rows_load(&out->src, path, dataset, expect_d, expect_c, want_ctx));
    nf_rows r = nf_source_rows(out->src);
    out->n = out->src->n;
    out->d = (size_t)out->src->dim;
    out->c = (size_t)out->src->ctx_dim;
    out->x = r.x;
    out->ctx = r.ctx;
    out->logp_true = r.logp_true;
    return NF_OK;
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
