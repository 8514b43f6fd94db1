/* core/h5.h - HDF5 files the nf way: atomic writes, self-describing formats, any-size arrays.
 *
 * Writing: nf_h5_create() opens "<path>.tmp.<pid>" and stamps the root group with the attributes
 * `format` (e.g. "nf-model") and `format_version`; nf_h5_commit() closes it and rename()s it over
 * <path>, so a crash or kill never leaves a half-written file where a good one was; nf_h5_abort()
 * removes the temporary file.  Reading: nf_h5_open() refuses a file of another format or of a newer
 * version than the reader understands, with a message naming both; format NULL accepts any HDF5 file
 * (user data written by h5py).  Dataset reads convert whatever numeric type is on disk into the type
 * asked for; a 1-D dataset reads as rows x 1.  HDF5's own error printing is switched off: errors come
 * back as NF_E* codes with a message naming the file and the object.  Paths of objects are absolute
 * ("/x", "/model/params"); intermediate groups are created as needed.
 */
#ifndef NF_H5_H
#define NF_H5_H

#include "core/error.h"

typedef struct nf_h5 nf_h5;

int nf_h5_create(nf_h5 **f, const char *path, const char *format, int version);
int nf_h5_commit(nf_h5 *f);           /* close and rename into place; frees f even on error */
void nf_h5_abort(nf_h5 *f);           /* close and delete the temporary file; NULL is harmless */
int nf_h5_open(nf_h5 **f, const char *path, const char *format, int max_version);
void nf_h5_close(nf_h5 *f);           /* NULL is harmless */
const char *nf_h5_path(const nf_h5 *f);   /* the final path (not the temporary one) */
int nf_h5_format_version(const nf_h5 *f); /* version read on open (0 if the file has none) */

int nf_h5_exists(nf_h5 *f, const char *obj);                 /* 1 if a dataset or group exists */
int nf_h5_group(nf_h5 *f, const char *path);                 /* create (with parents) if missing */
/* rank (1 or 2) and dims of a dataset; dims[1] = 1 for rank 1. */
int nf_h5_shape(nf_h5 *f, const char *path, int *rank, size_t dims[2]);
/* NF_OK if the dataset is a 1-D or 2-D array of numbers of a sane stored type and the file stores
 * every value it declares (the readers below check this before allocating; a caller that reads a
 * dataset piece by piece checks it once). */
int nf_h5_check_numeric(nf_h5 *f, const char *path);

/* Write a rows x cols dataset (cols == 0 writes a 1-D dataset of rows entries). */
int nf_h5_write_real(nf_h5 *f, const char *path, const nf_real *x, size_t rows, size_t cols);
int nf_h5_write_double(nf_h5 *f, const char *path, const double *x, size_t rows, size_t cols);
int nf_h5_write_int64(nf_h5 *f, const char *path, const int64_t *x, size_t rows, size_t cols);
int nf_h5_write_bytes(nf_h5 *f, const char *path, const void *bytes, size_t n);
int nf_h5_write_strings(nf_h5 *f, const char *path, const char *const *s, size_t n);

/* Read into a new malloc'd array (caller frees); rows/cols receive the shape. */
int nf_h5_read_real(nf_h5 *f, const char *path, nf_real **x, size_t *rows, size_t *cols);
/* Rows [first, first + n) of a dataset (n clipped to the end; a 1-D dataset's entries are its rows):
 * *rows the rows read, *total (may be NULL) the dataset's rows. */
int nf_h5_read_real_rows(nf_h5 *f, const char *path, size_t first, size_t n, nf_real **x, size_t *rows, size_t *cols,
                         size_t *total);
int nf_h5_read_double(nf_h5 *f, const char *path, double **x, size_t *rows, size_t *cols);
int nf_h5_read_int64(nf_h5 *f, const char *path, int64_t **x, size_t *rows, size_t *cols);
/* The same rows of a dataset as doubles or int64s (the events of some sequences). */
int nf_h5_read_double_rows(nf_h5 *f, const char *path, size_t first, size_t n, double **x, size_t *rows, size_t *cols,
                           size_t *total);
int nf_h5_read_int64_rows(nf_h5 *f, const char *path, size_t first, size_t n, int64_t **x, size_t *rows, size_t *cols,
                          size_t *total);
/* Rows rows[0..n-1] of a dataset, in that order (ascending reads fastest), as an (n, *cols) array of
 * doubles: the scattered units of a data set that a process of a parallel run does not hold. */
int nf_h5_read_double_points(nf_h5 *f, const char *path, const size_t *rows, size_t n, double **x, size_t *cols);
int nf_h5_read_bytes(nf_h5 *f, const char *path, void **bytes, size_t *n);
/* *s receives n malloc'd strings in one malloc'd array; free with nf_h5_strings_free. */
int nf_h5_read_strings(nf_h5 *f, const char *path, char ***s, size_t *n);
void nf_h5_strings_free(char **s, size_t n);

/* Attributes on an object (obj "/" is the root group). */
int nf_h5_attr_exists(nf_h5 *f, const char *obj, const char *name);
int nf_h5_attr_set_string(nf_h5 *f, const char *obj, const char *name, const char *value);
int nf_h5_attr_set_double(nf_h5 *f, const char *obj, const char *name, double value);
int nf_h5_attr_set_int64(nf_h5 *f, const char *obj, const char *name, int64_t value);
int nf_h5_attr_get_string(nf_h5 *f, const char *obj, const char *name, char *buf, size_t size);
int nf_h5_attr_get_double(nf_h5 *f, const char *obj, const char *name, double *value);
int nf_h5_attr_get_int64(nf_h5 *f, const char *obj, const char *name, int64_t *value);
/* The same, refused unless lo <= value <= hi, naming the attribute, its value and the range (a
 * damaged file's setting never reaches a conversion it would overflow). */
int nf_h5_attr_get_int64_in(nf_h5 *f, const char *obj, const char *name, int64_t lo, int64_t hi, int64_t *value);
/* A 1-D attribute of exactly n integers (an image's shape); reading accepts any integer type, or
 * floats holding whole numbers, and refuses another count naming both. */
int nf_h5_attr_set_int64s(nf_h5 *f, const char *obj, const char *name, const int64_t *v, size_t n);
int nf_h5_attr_get_int64s(nf_h5 *f, const char *obj, const char *name, int64_t *v, size_t n);

#endif
