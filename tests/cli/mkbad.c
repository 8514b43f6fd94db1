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
 * Damage to an existing file, through HDF5 (so checksums stay right and only nf's own checks can
 * catch it), for tests/cli/hardening.sh and tamper.sh:
 *   mkbad setnum FILE OBJ NAME X      attribute NAME of OBJ becomes the float64 X ("nan", "1e300")
 *   mkbad setstr FILE OBJ NAME S      attribute NAME of OBJ becomes the string S
 *   mkbad setint FILE OBJ NAME N      attribute NAME of OBJ becomes the int64 N
 *   mkbad setelem FILE DSET I X       element I of the numeric dataset DSET becomes X
 *   mkbad fillbytes FILE DSET B       every byte of the 8-bit dataset DSET becomes B (0..255)
 *   mkbad declared FILE ROWS COLS     a data file whose /x is declared ROWS x COLS float64 but
 *                                     never written (HDF5 allocates nothing for it)
 * and to the bytes on disk:
 *   mkbad flipdata FILE DSET          flip one bit in the stored data of DSET (its first chunk or
 *                                     its contiguous block), behind HDF5's back
 *   mkbad flip FILE BYTE BIT          flip bit BIT (0..7) of byte BYTE of the file
 * and what a file is made of:
 *   mkbad numattrs FILE               prints "OBJ NAME" for every numeric scalar attribute (the
 *                                     settings a damaged file can misstate)
 *   mkbad vlen FILE                   prints "strings S vlen V unchecked U": string attributes and
 *                                     datasets, how many are variable-length (in the global heap),
 *                                     and how many non-empty datasets lack a Fletcher32 checksum
 *
 * Exit status 0 on success, 1 on any error (message on stderr).  Built by the scripts against the
 * libnf.a of the build under test; only the double-precision h5 calls are used, so it works with
 * either build.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

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

/* ---- damage through HDF5 ---------------------------------------------------------------------- */

static int h5fail(const char *what, const char *path)
{
    fprintf(stderr, "mkbad %s: %s: failed\n", what, path);
    return 1;
}

/* Replace attribute `name` of `obj` with a scalar of type t holding *value. */
static int set_attr(const char *path, const char *obj, const char *name, hid_t t, const void *value)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t o = f < 0 ? -1 : H5Oopen(f, obj, H5P_DEFAULT);
    if (o >= 0 && H5Aexists(o, name) > 0) H5Adelete(o, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = o < 0 ? -1 : H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, t, value) >= 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    if (o >= 0) H5Oclose(o);
    if (f >= 0 && H5Fclose(f) < 0) ok = 0;
    return ok ? 0 : h5fail("set attribute", path);
}

static int set_num(const char *path, const char *obj, const char *name, const char *text)
{
    double v = strtod(text, NULL);
    return set_attr(path, obj, name, H5T_NATIVE_DOUBLE, &v);
}

static int set_int(const char *path, const char *obj, const char *name, const char *text)
{
    long long v = strtoll(text, NULL, 10);
    return set_attr(path, obj, name, H5T_NATIVE_LLONG, &v);
}

static int set_str(const char *path, const char *obj, const char *name, const char *text)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(text) + 1);
    int rc = set_attr(path, obj, name, t, text);
    H5Tclose(t);
    return rc;
}

/* Element i of a numeric dataset, written in its own type by HDF5's conversion from double. */
static int set_elem(const char *path, const char *dset, long i, const char *text)
{
    double v = strtod(text, NULL);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    int ok = 0;
    if (fs >= 0) {
        int rank = H5Sget_simple_extent_ndims(fs);
        hsize_t dims[2] = {1, 1}, coord[2];
        H5Sget_simple_extent_dims(fs, dims, NULL);
        coord[0] = rank == 2 ? (hsize_t)i / dims[1] : (hsize_t)i;
        coord[1] = rank == 2 ? (hsize_t)i % dims[1] : 0;
        hsize_t one = 1;
        hid_t ms = H5Screate_simple(1, &one, NULL);
        hid_t t = H5Dget_type(d);
        ok = H5Sselect_elements(fs, H5S_SELECT_SET, 1, coord) >= 0;
        if (ok && H5Tget_class(t) == H5T_INTEGER) {
            long long iv = (long long)v;
            ok = H5Dwrite(d, H5T_NATIVE_LLONG, ms, fs, H5P_DEFAULT, &iv) >= 0;
        } else if (ok) {
            ok = H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, &v) >= 0;
        }
        H5Tclose(t);
        H5Sclose(ms);
        H5Sclose(fs);
    }
    if (d >= 0) H5Dclose(d);
    if (f >= 0 && H5Fclose(f) < 0) ok = 0;
    return ok ? 0 : h5fail("set element", path);
}

static int fill_bytes(const char *path, const char *dset, int b)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    hssize_t n = fs < 0 ? -1 : H5Sget_simple_extent_npoints(fs);
    unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
    int ok = buf != NULL;
    if (ok) {
        memset(buf, b, (size_t)n);
        ok = H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    }
    free(buf);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    if (f >= 0 && H5Fclose(f) < 0) ok = 0;
    return ok ? 0 : h5fail("fill bytes", path);
}

/* /x declared rows x cols float64, contiguous and allocated late: never written, nothing stored. */
static int declared(const char *path, const char *rows, const char *cols)
{
    nf_h5 *nf;
    if (nf_h5_create(&nf, path, "nf-data", 1) != NF_OK || nf_h5_commit(nf) != NF_OK) return fail(path);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t dims[2] = {(hsize_t)atoll(rows), (hsize_t)atoll(cols)};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
    hid_t d = f < 0 ? -1 : H5Dcreate2(f, "/x", H5T_IEEE_F64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int ok = d >= 0;
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    if (f >= 0 && H5Fclose(f) < 0) ok = 0;
    return ok ? 0 : h5fail("declared", path);
}

static int flip_at(const char *path, long long byte, int bit)
{
    FILE *fp = fopen(path, "r+b");
    int c = fp && fseek(fp, (long)byte, SEEK_SET) == 0 ? fgetc(fp) : EOF;
    int ok = c != EOF && fseek(fp, (long)byte, SEEK_SET) == 0 && fputc(c ^ (1 << bit), fp) != EOF;
    if (fp && fclose(fp) != 0) ok = 0;
    if (!ok) fprintf(stderr, "mkbad flip: %s: cannot flip byte %lld\n", path, byte);
    return ok ? 0 : 1;
}

/* Where the stored bytes of a dataset begin: its first chunk, or its contiguous block. */
static int flip_data(const char *path, const char *dset)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t at = HADDR_UNDEF;
    hsize_t size = 0;
    if (d >= 0) {
        hid_t dcpl = H5Dget_create_plist(d);
        if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
            hid_t fs = H5Dget_space(d);
            hsize_t off[2] = {0, 0};
            unsigned mask;
            if (H5Dget_chunk_info(d, fs, 0, off, &mask, &at, &size) < 0) at = HADDR_UNDEF;
            H5Sclose(fs);
        } else {
            at = H5Dget_offset(d);
            size = H5Dget_storage_size(d);
        }
        H5Pclose(dcpl);
        H5Dclose(d);
    }
    if (f >= 0) H5Fclose(f);
    if (at == HADDR_UNDEF || size == 0) return h5fail("flipdata (no stored data)", path);
    return flip_at(path, (long long)at + (long long)(size / 3), 2);
}

/* ---- what a file is made of ------------------------------------------------------------------- */

typedef struct counts {
    long strings, vlen, unchecked;
} counts;

static void count_type(hid_t t, counts *c)
{
    if (H5Tget_class(t) != H5T_STRING) return;
    c->strings++;
    if (H5Tis_variable_str(t) > 0) c->vlen++;
}

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a);
    count_type(t, data);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static herr_t object_cb(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
    (void)info;
    counts *c = data;
    hid_t o = H5Oopen(root, name, H5P_DEFAULT);
    if (o < 0) return -1;
    H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, attr_cb, c);
    if (H5Iget_type(o) == H5I_DATASET) {
        hid_t t = H5Dget_type(o), dcpl = H5Dget_create_plist(o), sp = H5Dget_space(o);
        count_type(t, c);
        int checked = 0;
        for (int i = 0; i < H5Pget_nfilters(dcpl); i++) {
            unsigned flags;
            size_t n = 0;
            if (H5Pget_filter2(dcpl, (unsigned)i, &flags, &n, NULL, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32) checked = 1;
        }
        if (!checked && H5Sget_simple_extent_npoints(sp) > 0) c->unchecked++;
        H5Sclose(sp);
        H5Pclose(dcpl);
        H5Tclose(t);
    }
    H5Oclose(o);
    return 0;
}

static int count_strings(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return h5fail("vlen", path);
    counts c = {0, 0, 0};
    H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, attr_cb, &c);
    herr_t e = H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, object_cb, &c);
    H5Fclose(f);
    if (e < 0) return h5fail("vlen", path);
    printf("strings %ld vlen %ld unchecked %ld\n", c.strings, c.vlen, c.unchecked);
    return 0;
}

/* Numeric scalar attributes, "OBJ NAME" a line. */
static herr_t num_attr_cb(hid_t o, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    hid_t a = H5Aopen(o, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t k = H5Tget_class(t);
    if ((k == H5T_INTEGER || k == H5T_FLOAT) && H5Sget_simple_extent_npoints(sp) == 1) printf("%s %s\n", (const char *)data, name);
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static herr_t num_object_cb(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
    (void)info, (void)data;
    hid_t o = H5Oopen(root, name, H5P_DEFAULT);
    if (o < 0) return -1;
    char path[1024];
    snprintf(path, sizeof path, "/%s", name);
    herr_t e = H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, num_attr_cb, path);
    H5Oclose(o);
    return e;
}

static int num_attrs(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return h5fail("numattrs", path);
    herr_t e = H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, num_attr_cb, "/");
    if (e >= 0) e = H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, num_object_cb, NULL);
    H5Fclose(f);
    return e < 0 ? h5fail("numattrs", path) : 0;
}

int main(int argc, char **argv)
{
    const char *usage = "usage: mkbad nan|inf|empty|noxy|text FILE | stats FILE DSET | col FILE DSET J |\n"
                        "       setnum|setstr|setint FILE OBJ NAME VALUE | setelem FILE DSET I X | fillbytes FILE DSET B |\n"
                        "       declared FILE ROWS COLS | flipdata FILE DSET | flip FILE BYTE BIT | vlen FILE | numattrs FILE\n";
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
    if (!strcmp(what, "setnum") && argc == 6) return set_num(path, argv[3], argv[4], argv[5]);
    if (!strcmp(what, "setint") && argc == 6) return set_int(path, argv[3], argv[4], argv[5]);
    if (!strcmp(what, "numattrs") && argc == 3) return num_attrs(path);
    if (!strcmp(what, "setstr") && argc == 6) return set_str(path, argv[3], argv[4], argv[5]);
    if (!strcmp(what, "setelem") && argc == 6) return set_elem(path, argv[3], atol(argv[4]), argv[5]);
    if (!strcmp(what, "fillbytes") && argc == 5) return fill_bytes(path, argv[3], atoi(argv[4]));
    if (!strcmp(what, "declared") && argc == 5) return declared(path, argv[3], argv[4]);
    if (!strcmp(what, "flipdata") && argc == 4) return flip_data(path, argv[3]);
    if (!strcmp(what, "flip") && argc == 5) return flip_at(path, atoll(argv[3]), atoi(argv[4]) & 7);
    if (!strcmp(what, "vlen") && argc == 3) return count_strings(path);
    fputs(usage, stderr);
    return 2;
}
