/* core/import.h - bring user data into n x d arrays: CSV and NPY import, and validation.
 *
 * An nf_table holds n rows of d columns in double plus the column names (from a CSV header, or
 * "x0".."x{d-1}").  CSV import detects the delimiter (comma, semicolon, tab or whitespace) and a
 * header line unless told; every error names the file, line and column.  NPY import reads format
 * versions 1.0-3.0 with float32, float64 and (u)int 8/16/32/64 data in C or Fortran order, 1-D
 * (n x 1) or 2-D.  nf_data_validate checks loaded data before it is used: empty, wrong dimension,
 * non-finite values (reporting the first bad row and column, counted from 0).
 */
#ifndef NF_IMPORT_H
#define NF_IMPORT_H

#include "core/error.h"

typedef struct nf_table {
    size_t n, d;
    double *x;     /* (n, d) row-major */
    char **names;  /* d column names */
} nf_table;

typedef struct nf_csv_options {
    char delimiter; /* 0: detect */
    int header;     /* -1: detect, 0: none, 1: first line is a header */
} nf_csv_options;

int nf_import_csv(const char *path, const nf_csv_options *opt, nf_table *out);
int nf_import_npy(const char *path, nf_table *out);
/* Picks CSV or NPY from the extension (.csv, .tsv, .txt, .npy) or the NPY magic bytes. */
int nf_import_file(const char *path, nf_table *out);
void nf_table_free(nf_table *t);

/* what names the data in messages ("train.h5:/x").  expect_d == 0 accepts any dimension. */
int nf_data_validate(const char *what, const nf_real *x, size_t n, size_t d, size_t expect_d);
int nf_data_validate_double(const char *what, const double *x, size_t n, size_t d, size_t expect_d);

#endif
