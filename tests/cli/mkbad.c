/* tests/cli/mkbad.c - test helper for the command-line scripts: writes the HDF5 files that nf
 * refuses to create (NaN, infinite or empty data, the wrong dataset name) and reads back the shape
 * and summary statistics of a dataset, so the scripts need neither Python nor the HDF5 tools.
 *
 *   mkbad nan FILE        /x (120 x 2) with one NaN at row 37, column 1
 *   mkbad inf FILE        /x (120 x 2) with +inf at row 5, column 0
 *   mkbad empty FILE      /x (0 x 2)
 *   mkbad noxy FILE       only /y (120 x 2): no /x
 *   mkbad text FILE       /x holding strings, not numbers
 *   mkbad stats FILE DSET prints "rows cols rank mean std min max finite|nonfinite" (all columns
 *                         pooled; a 1-D dataset has cols 1 and rank 1)
 *   mkbad col FILE DSET J prints "mean std" of column J
 *
 * Exit status 0 on success, 1 on any error (message on stderr).  Built by the scripts against the
 * libnf.a of the build under test; only the double-precision h5 calls are used, so it works with
 * either build.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"

#define ROWS 120

static int fail(const char *what)
{
    const char *m = nf_strerror_last();
    fprintf(stderr, "mkbad %s: %s\n", what, m[0] ? m : "failed");
    return 1;
}

/* A small, ordinary data set with one value replaced. */
static int write_x(const char *path, const char *name, size_t rows, int bad_row, int bad_col, double bad)
{
    double *x = malloc((rows ? rows : 1) * 2 * sizeof *x);
    if (!x) return 1;
    for (size_t i = 0; i < rows; i++) {
        x[2 * i] = 0.385 + 0.01 * (double)i;
        x[2 * i + 1] = -1.25 + 0.5 * sin((double)i);
    }
    if (bad_row >= 0) x[2 * bad_row + bad_col] = bad;
    nf_h5 *f;
    int rc = nf_h5_create(&f, path, "nf-data", 1);
    if (rc == NF_OK) rc = nf_h5_write_double(f, name, x, rows, 2);
    if (rc == NF_OK) rc = nf_h5_commit(f);
    else nf_h5_abort(f);
    free(x);
    return rc == NF_OK ? 0 : fail(path);
}

static int write_text(const char *path)
{
    const char *s[] = {"0.5", "1.5", "2.5"};
    nf_h5 *f;
    int rc = nf_h5_create(&f, path, "nf-data", 1);
    if (rc == NF_OK) rc = nf_h5_write_strings(f, "/x", s, 3);
    if (rc == NF_OK) rc = nf_h5_commit(f);
    else nf_h5_abort(f);
    return rc == NF_OK ? 0 : fail(path);
}

/* Statistics of the whole dataset (col < 0) or of one column. */
static int stats(const char *path, const char *dset, long col)
{
    nf_h5 *f;
    double *x = NULL;
    size_t rows = 0, cols = 0;
    int rank = 0;
    size_t dims[2];
    int rc = nf_h5_open(&f, path, NULL, 0);
    if (rc == NF_OK) rc = nf_h5_shape(f, dset, &rank, dims);
    if (rc == NF_OK) rc = nf_h5_read_double(f, dset, &x, &rows, &cols);
    nf_h5_close(f);
    if (rc != NF_OK) return fail(path);
    if (col >= (long)cols) {
        fprintf(stderr, "mkbad col: %s:%s has %zu columns\n", path, dset, cols);
        free(x);
        return 1;
    }
    double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
    size_t m = 0;
    int finite = 1;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            if (col >= 0 && (long)j != col) continue;
            double v = x[i * cols + j];
            if (!isfinite(v)) finite = 0;
            s += v, s2 += v * v, m++;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    double mean = m ? s / m : NAN, sd = m > 1 ? sqrt(fmax(s2 - s * s / m, 0) / (m - 1)) : NAN;
    if (col >= 0) printf("%.9g %.9g\n", mean, sd);
    else printf("%zu %zu %d %.9g %.9g %.9g %.9g %s\n", rows, cols, rank, mean, sd, lo, hi,
                finite ? "finite" : "nonfinite");
    free(x);
    return 0;
}

int main(int argc, char **argv)
{
    const char *usage = "usage: mkbad nan|inf|empty|noxy|text FILE | stats FILE DSET | col FILE DSET J\n";
    if (argc < 3) {
        fputs(usage, stderr);
        return 2;
    }
    const char *what = argv[1], *path = argv[2];
    if (!strcmp(what, "nan")) return write_x(path, "/x", ROWS, 37, 1, NAN);
    if (!strcmp(what, "inf")) return write_x(path, "/x", ROWS, 5, 0, INFINITY);
    if (!strcmp(what, "empty")) return write_x(path, "/x", 0, -1, 0, 0);
    if (!strcmp(what, "noxy")) return write_x(path, "/y", ROWS, -1, 0, 0);
    if (!strcmp(what, "text")) return write_text(path);
    if (!strcmp(what, "stats") && argc == 4) return stats(path, argv[3], -1);
    if (!strcmp(what, "col") && argc == 5) return stats(path, argv[3], atol(argv[4]));
    fputs(usage, stderr);
    return 2;
}
