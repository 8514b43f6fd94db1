/* core/import.h - bring user data into n x d arrays: CSV and NPY import, and validation.
 *
 * An nf_table holds n rows of d columns in double plus the column names (from a CSV header, or
 * "x0".."x{d-1}").  CSV import detects the delimiter (comma, semicolon, tab or whitespace) and a
 * header line unless told; every error names the file, line and column.  NPY import reads format
 * versions 1.0-3.0 with float32, float64 and (u)int 8/16/32/64 data in C or Fortran order, 1-D
 * (n x 1) or 2-D.  nf_data_validate checks loaded data before it is used: empty, wrong dimension,
 * non-finite values (reporting the first bad row and column, counted from 0).
 *
 * Real tables mix numbers with text.  nf_import_file_select picks the columns that become the data
 * (by name or index), leaves text columns out by default, and turns categorical columns into a
 * one-hot context: a column "kind" with values long and short gives two context columns named
 * "kind=long" and "kind=short" (categories sorted: numerically when every value is a number, else
 * by byte order), each row holding a 1 in its category's column and 0 elsewhere.
 */
#ifndef NF_IMPORT_H
#define NF_IMPORT_H

#include "core/error.h"

typedef struct nf_table {
    size_t n, d;
    double *x;          /* (n, d) row-major */
    char **names;       /* d column names */
    /* filled by the _select importers only (0 / NULL otherwise) */
    size_t c;           /* context width: the categories of all context columns together */
    double *ctx;        /* (n, c) one-hot rows, NULL when c == 0 */
    char **ctx_names;   /* c names "column=category" */
    size_t n_skipped;   /* text columns left out of the default selection */
    char **skipped;     /* their names */
} nf_table;

/* Which columns of a table become the data and which a categorical context.  Each is a
 * comma-separated list of column names or 0-based column indices ("2", or "2-5" for 2, 3, 4, 5); a
 * name wins over an index when a header holds a number.  NULL (or "") means not given. */
typedef struct nf_import_select {
    const char *columns;  /* the data columns, in this order; not given: every column that is not
                             dropped, not a context column and not text (a column whose first data
                             row is not a number; such columns are listed in nf_table.skipped) */
    const char *drop;     /* columns to leave out (only without columns) */
    const char *context;  /* categorical columns, each one-hot encoded into the context, in this
                             order; at most NF_IMPORT_MAX_CATEGORIES distinct values each */
    const char *labels;   /* label columns (sequence or subject ids): data columns, kept in the
                             default selection even when text, whose values become numbers, each
                             distinct value its own (0, 1, ... in order of first appearance; a
                             value that is a finite number counts as that number, so 7 and 7.0
                             are one label); any number of distinct values, no empty field.
                             Labels alone (no columns, drop or context): every column is data, as
                             without a selection, and every other one must hold numbers */
    const char *labels_flag; /* how messages name the labels list (NULL: "--labels") */
    const char *columns_flag; /* how messages name the columns list (NULL: "--columns") */
} nf_import_select;

#define NF_IMPORT_MAX_CATEGORIES 1000

typedef struct nf_csv_options {
    char delimiter; /* 0: detect */
    int header;     /* -1: detect, 0: none, 1: first line is a header */
} nf_csv_options;

int nf_import_csv(const char *path, const nf_csv_options *opt, nf_table *out);
int nf_import_npy(const char *path, nf_table *out);
/* An NPY array of any rank up to NF_IMPORT_NPY_MAX_DIMS as out->n = shape[0] rows of the other
 * sides' product, each row in C order (images (n, H, W, C) become (n, H*W*C) rows); shape and
 * *ndim receive the array's own shape. */
#define NF_IMPORT_NPY_MAX_DIMS 8
int nf_import_npy_nd(const char *path, nf_table *out, size_t shape[NF_IMPORT_NPY_MAX_DIMS], int *ndim);
/* Only the shape of an NPY array (its header is read and checked, not its data). */
int nf_import_npy_shape(const char *path, size_t shape[NF_IMPORT_NPY_MAX_DIMS], int *ndim);
/* Picks CSV or NPY from the extension (.csv, .tsv, .txt, .npy) or the NPY magic bytes. */
int nf_import_file(const char *path, nf_table *out);
/* nf_import_csv / nf_import_file with a column selection (sel NULL: every column, all numbers, as
 * the plain importers).  opt applies to CSV (NULL: detect; .tsv files are tab-separated).  A value
 * that is not a number in a data column is an error naming the file, line, column and its name;
 * an empty field in a context column too.  Errors in the lists name the list (--columns, --drop,
 * --context), the entry and the table's columns. */
int nf_import_csv_select(const char *path, const nf_csv_options *opt, const nf_import_select *sel, nf_table *out);
int nf_import_file_select(const char *path, const nf_csv_options *opt, const nf_import_select *sel, nf_table *out);
void nf_table_free(nf_table *t);

/* what names the data in messages ("train.h5:/x").  expect_d == 0 accepts any dimension. */
int nf_data_validate(const char *what, const nf_real *x, size_t n, size_t d, size_t expect_d);
int nf_data_validate_double(const char *what, const double *x, size_t n, size_t d, size_t expect_d);

#endif
