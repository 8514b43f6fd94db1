/* apps/datafile.h - the data files the commands take, as arrays: a thin view of a rows source
 * (datasets/source.h), which loads and validates them. */
#ifndef NF_APPS_DATAFILE_H
#define NF_APPS_DATAFILE_H

#include <stddef.h>

#include "core/error.h"
#include "datasets/source.h"

typedef struct app_data {
    size_t n, d, c;
    const nf_real *x;         /* (n, d) */
    const nf_real *ctx;       /* (n, c) or NULL */
    const double *logp_true;  /* (n) or NULL */
    nf_source *src;           /* owns the arrays */
} app_data;

/* expect_d / expect_c: 0 accepts any width; want_ctx: read /context (required when expect_c > 0). */
int app_data_load(const char *path, const char *dataset, size_t expect_d, size_t expect_c, int want_ctx,
                  app_data *out);
void app_data_free(app_data *d);
/* Refuse to write to a path whose directory does not exist or is not writable (checked before any
 * work, so a bad -o fails fast and nothing is created). */
int app_check_output(const char *path);
/* The model file of a new fit: app_check_output, and unless force, refuse one that exists (a new
 * run never loses an earlier model; --resume continues it, --force replaces it). */
int app_check_new_model(const char *path, int force);
/* 1 if a and b name the same file: the same device and inode when both exist (hard and symbolic
 * links included), else the same resolved path. */
int app_same_file(const char *a, const char *b);
/* Refuse an output that is the same file as an input (`what` names the input for the message:
 * "data file", "model"); NULL input or output passes.  Every command that writes a file checks
 * each of its inputs with this before any work. */
int app_check_not_input(const char *out, const char *input, const char *what);
/* Refuse two outputs of one command that are the same file (the second would replace the first):
 * what_a and what_b name their options ("-o", "--h5"); a NULL output passes. */
int app_check_outputs_differ(const char *a, const char *what_a, const char *b, const char *what_b);
/* 1 if path is an HDF5 file whose dataset /x carries the attribute attr ("video_shape",
 * "image_shape"); 0 otherwise, including files that cannot be read (no error is left set). */
int app_x_has_attr(const char *path, const char *attr);
/* nf fit's data: refuse an image or video data file (its /x has image_shape or video_shape), whose
 * flows are nf image fit's and nf video fit's (a flat flow over every pixel of a video builds dense
 * d x d layers of hundreds of millions of parameters), naming the command and how to fit the rows as
 * flat vectors anyway (--dataset /x given explicitly).  Anything else, or a file that cannot be
 * read (the loader then says why), passes. */
int app_check_not_images(const char *path);

#endif
