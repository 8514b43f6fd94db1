/* apps/datafile.h - loading the data files the commands take: samples, context, true log-density.
 *
 * A data file is any HDF5 file with the samples as an n x d array (default /x, 1-D read as n x 1);
 * /context (n x c) is read when the model is conditional and /logp_true (n) when present.  Every
 * problem (missing file or dataset, non-HDF5 file, empty, NaN, wrong width) is an error naming the
 * file and dataset and what was expected. */
#ifndef NF_APPS_DATAFILE_H
#define NF_APPS_DATAFILE_H

#include <stddef.h>

#include "core/error.h"

typedef struct app_data {
    size_t n, d, c;
    nf_real *x;         /* (n, d) */
    nf_real *ctx;       /* (n, c) or NULL */
    double *logp_true;  /* (n) or NULL */
} app_data;

/* expect_d / expect_c: 0 accepts any width; want_ctx: read /context (required when expect_c > 0). */
int app_data_load(const char *path, const char *dataset, size_t expect_d, size_t expect_c, int want_ctx,
                  app_data *out);
void app_data_free(app_data *d);
/* Refuse to write to a path whose directory does not exist or is not writable (checked before any
 * work, so a bad -o fails fast and nothing is created). */
int app_check_output(const char *path);

#endif
