/* tests/check_h5.c - HDF5 files: round trips of every dataset and attribute type, type conversion on
 * read, files written with the plain HDF5 API (fixed-length strings, other integer types), format and
 * version checks, atomic writes (abort, a writer that dies, a failing rename), error messages, and the
 * parameter store's save/load with its slice-table checks. */
#include <check.h>
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/params.h"

static char tmpdir[256];

static void tpath(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", tmpdir, name); }
#define TPATH(var, name) \
    char var[512];       \
    tpath(var, sizeof var, name)

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return b;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

START_TEST(test_real_roundtrip)
{
    TPATH(p, "real.h5");
    nf_h5 *f;
    nf_real a[7 * 3], b[11];
    for (int i = 0; i < 21; i++) a[i] = (nf_real)(2.385 * i - 11.7 + 0.013 * i * i);
    for (int i = 0; i < 11; i++) b[i] = (nf_real)(-0.731 * i + 4.09);
    OK(nf_h5_create(&f, p, "nf-test", 2));
    ck_assert_str_eq(nf_h5_path(f), p);
    ck_assert_int_eq(nf_h5_format_version(f), 2);
    OK(nf_h5_write_real(f, "/grp/sub/a", a, 7, 3));
    OK(nf_h5_write_real(f, "/b", b, 11, 0));
    OK(nf_h5_commit(f));
    ck_assert(file_exists(p));

    OK(nf_h5_open(&f, p, "nf-test", 2));
    ck_assert_int_eq(nf_h5_format_version(f), 2);
    nf_real *x;
    size_t r, c, dims[2];
    int rank;
    OK(nf_h5_read_real(f, "/grp/sub/a", &x, &r, &c));
    ck_assert_uint_eq(r, 7);
    ck_assert_uint_eq(c, 3);
    for (int i = 0; i < 21; i++) ck_assert(x[i] == a[i]);
    free(x);
    OK(nf_h5_shape(f, "/b", &rank, dims));
    ck_assert_int_eq(rank, 1);
    ck_assert_uint_eq(dims[0], 11);
    ck_assert_uint_eq(dims[1], 1);
    OK(nf_h5_shape(f, "/grp/sub/a", &rank, dims));
    ck_assert_int_eq(rank, 2);
    OK(nf_h5_read_real(f, "/b", &x, &r, &c));
    ck_assert_uint_eq(r, 11);
    ck_assert_uint_eq(c, 1);
    for (int i = 0; i < 11; i++) ck_assert(x[i] == b[i]);
    free(x);
    ck_assert_int_eq(nf_h5_exists(f, "/"), 1);
    ck_assert_int_eq(nf_h5_exists(f, "/grp"), 1);
    ck_assert_int_eq(nf_h5_exists(f, "/grp/sub/a"), 1);
    ck_assert_int_eq(nf_h5_exists(f, "/grp/x"), 0);
    ck_assert_int_eq(nf_h5_exists(f, "/nope/deeper/still"), 0);
    ck_assert_int_eq(nf_h5_exists(f, "/b/inside"), 0);
    char s[64];
    OK(nf_h5_attr_get_string(f, "/", "nf_version", s, sizeof s));
    ck_assert_str_eq(s, NF_VERSION);
    nf_h5_close(f);
}
END_TEST

START_TEST(test_typed_roundtrips)
{
    TPATH(p, "typed.h5");
    nf_h5 *f;
    double d[4 * 5];
    int64_t k[3 * 2] = {9007199254740993LL, -4611686018427387904LL, 0, -7, 123456789012LL, 31};
    unsigned char bytes[300];
    for (int i = 0; i < 20; i++) d[i] = 1.0 / (i + 2.385) - 0.3 * i;
    for (int i = 0; i < 300; i++) bytes[i] = (unsigned char)(i * 37 + 11);
    bytes[17] = 0;
    const char *strs[] = {"flow.0.weight", "", "grüße \"quoted\"", "日本", "comma, tab\tend"};
    OK(nf_h5_create(&f, p, "nf-test", 1));
    OK(nf_h5_write_double(f, "/d", d, 4, 5));
    OK(nf_h5_write_double(f, "/d1", d, 20, 0));
    OK(nf_h5_write_int64(f, "/k", k, 3, 2));
    OK(nf_h5_write_int64(f, "/k1", k, 6, 0));
    OK(nf_h5_write_bytes(f, "/raw/bytes", bytes, sizeof bytes));
    OK(nf_h5_write_strings(f, "/s", strs, 5));
    /* writing a dataset twice replaces it */
    OK(nf_h5_write_double(f, "/d1", d + 1, 19, 0));
    OK(nf_h5_commit(f));

    OK(nf_h5_open(&f, p, NULL, 0));
    double *xd;
    int64_t *xk;
    void *xb;
    char **xs;
    size_t r, c, n;
    OK(nf_h5_read_double(f, "/d", &xd, &r, &c));
    ck_assert(r == 4 && c == 5);
    for (int i = 0; i < 20; i++) ck_assert(xd[i] == d[i]);
    free(xd);
    OK(nf_h5_read_double(f, "/d1", &xd, &r, &c));
    ck_assert(r == 19 && c == 1);
    ck_assert(xd[0] == d[1] && xd[18] == d[19]);
    free(xd);
    OK(nf_h5_read_int64(f, "/k", &xk, &r, &c));
    ck_assert(r == 3 && c == 2);
    for (int i = 0; i < 6; i++) ck_assert(xk[i] == k[i]);
    free(xk);
    OK(nf_h5_read_int64(f, "/k1", &xk, &r, &c));
    ck_assert(r == 6 && c == 1 && xk[0] == k[0]);
    free(xk);
    OK(nf_h5_read_bytes(f, "/raw/bytes", &xb, &n));
    ck_assert_uint_eq(n, sizeof bytes);
    ck_assert(memcmp(xb, bytes, n) == 0);
    free(xb);
    OK(nf_h5_read_strings(f, "/s", &xs, &n));
    ck_assert_uint_eq(n, 5);
    for (int i = 0; i < 5; i++) ck_assert_str_eq(xs[i], strs[i]);
    nf_h5_strings_free(xs, n);
    /* reading converts: int64 as real and double, double as real */
    nf_real *xr;
    OK(nf_h5_read_real(f, "/k", &xr, &r, &c));
    ck_assert(xr[3] == (nf_real)-7 && xr[5] == (nf_real)31);
    free(xr);
    OK(nf_h5_read_real(f, "/d", &xr, &r, &c));
    for (int i = 0; i < 20; i++) ck_assert(xr[i] == (nf_real)d[i]);
    free(xr);
    /* strings are not numbers, numbers are not strings or bytes */
    ck_assert_int_eq(nf_h5_read_double(f, "/s", &xd, &r, &c), NF_EFORMAT);
    HAS(nf_strerror_last(), "/s holds strings");
    ck_assert_ptr_null(xd);
    ck_assert_int_eq(nf_h5_read_strings(f, "/d", &xs, &n), NF_EFORMAT);
    HAS(nf_strerror_last(), "/d does not hold strings");
    ck_assert_int_eq(nf_h5_read_bytes(f, "/k", &xb, &n), NF_EFORMAT);
    HAS(nf_strerror_last(), "expected 8-bit integers");
    nf_h5_close(f);
}
END_TEST

START_TEST(test_empty_datasets)
{
    TPATH(p, "empty.h5");
    nf_h5 *f;
    OK(nf_h5_create(&f, p, "nf-test", 1));
    OK(nf_h5_write_real(f, "/x", NULL, 0, 4));
    OK(nf_h5_write_strings(f, "/s", NULL, 0));
    OK(nf_h5_write_bytes(f, "/b", NULL, 0));
    OK(nf_h5_commit(f));
    OK(nf_h5_open(&f, p, "nf-test", 1));
    nf_real *x;
    size_t r = 99, c = 99, n = 99;
    OK(nf_h5_read_real(f, "/x", &x, &r, &c));
    ck_assert_uint_eq(r, 0);
    ck_assert_uint_eq(c, 4);
    ck_assert_ptr_nonnull(x);
    free(x);
    char **s;
    OK(nf_h5_read_strings(f, "/s", &s, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(s);
    nf_h5_strings_free(s, n);
    void *b;
    OK(nf_h5_read_bytes(f, "/b", &b, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(b);
    free(b);
    nf_h5_close(f);
}
END_TEST

START_TEST(test_large)
{
    TPATH(p, "large.h5");
    const size_t n = 200000, d = 8;
    nf_real *a = malloc(n * d * sizeof *a);
    for (size_t i = 0; i < n * d; i++) a[i] = (nf_real)((double)(i % 9973) * 0.0371 - (double)(i / 9973) * 1.25);
    nf_h5 *f;
    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_write_real(f, "/x", a, n, d));
    OK(nf_h5_commit(f));
    OK(nf_h5_open(&f, p, "nf-data", 1));
    nf_real *x;
    double *xd;
    size_t r, c;
    OK(nf_h5_read_real(f, "/x", &x, &r, &c));
    ck_assert(r == n && c == d);
    ck_assert(memcmp(x, a, n * d * sizeof *a) == 0);
    free(x);
    OK(nf_h5_read_double(f, "/x", &xd, &r, &c));
    ck_assert(xd[n * d - 1] == (double)a[n * d - 1] && xd[777777] == (double)a[777777]);
    free(xd);
    nf_h5_close(f);
    free(a);
}
END_TEST

START_TEST(test_attributes)
{
    TPATH(p, "attrs.h5");
    nf_h5 *f;
    double vals[3] = {1.5, 2.5, 3.5};
    OK(nf_h5_create(&f, p, "nf-test", 1));
    OK(nf_h5_group(f, "/g/h"));
    OK(nf_h5_write_double(f, "/g/d", vals, 3, 0));
    const char *objs[] = {"/", "/g/h", "/g/d"};
    for (int i = 0; i < 3; i++) {
        OK(nf_h5_attr_set_string(f, objs[i], "label", "first"));
        OK(nf_h5_attr_set_string(f, objs[i], "label", "ünïcode label"));
        OK(nf_h5_attr_set_double(f, objs[i], "lr", 2.385e-4 * (i + 1)));
        OK(nf_h5_attr_set_int64(f, objs[i], "steps", -9000000000123LL + i));
        OK(nf_h5_attr_set_double(f, objs[i], "whole", 4.0));
    }
    ck_assert_int_eq(nf_h5_attr_set_int64(f, "/missing", "x", 3), NF_EINVAL);
    HAS(nf_strerror_last(), "no object /missing");
    ck_assert_int_eq(nf_h5_group(f, "/g/d/sub"), NF_EINVAL);
    HAS(nf_strerror_last(), "/g/d exists and is not a group");
    ck_assert_int_eq(nf_h5_write_double(f, "/g", vals, 3, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "a group of that name exists");
    ck_assert_int_eq(nf_h5_write_double(f, "relative", vals, 3, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "not absolute");
    OK(nf_h5_commit(f));

    OK(nf_h5_open(&f, p, "nf-test", 1));
    for (int i = 0; i < 3; i++) {
        char s[64];
        double v;
        int64_t k;
        ck_assert_int_eq(nf_h5_attr_exists(f, objs[i], "label"), 1);
        ck_assert_int_eq(nf_h5_attr_exists(f, objs[i], "absent"), 0);
        OK(nf_h5_attr_get_string(f, objs[i], "label", s, sizeof s));
        ck_assert_str_eq(s, "ünïcode label");
        OK(nf_h5_attr_get_double(f, objs[i], "lr", &v));
        ck_assert(v == 2.385e-4 * (i + 1));
        OK(nf_h5_attr_get_int64(f, objs[i], "steps", &k));
        ck_assert(k == -9000000000123LL + i);
        OK(nf_h5_attr_get_double(f, objs[i], "steps", &v));
        ck_assert(v == (double)(-9000000000123LL + i));
        OK(nf_h5_attr_get_int64(f, objs[i], "whole", &k));
        ck_assert(k == 4);
        k = 7; /* in a range: read; outside it: refused, naming the value and the range, k untouched */
        OK(nf_h5_attr_get_int64_in(f, objs[i], "whole", 4, 4, &k));
        ck_assert(k == 4);
        ck_assert_int_eq(nf_h5_attr_get_int64_in(f, objs[i], "whole", 5, 1 << 24, &k), NF_EFORMAT);
        HAS(nf_strerror_last(), "attribute 'whole' on ");
        HAS(nf_strerror_last(), " is 4 (expected 5 to 16777216)");
        ck_assert_int_eq(nf_h5_attr_get_int64_in(f, objs[i], "steps", 0, INT64_MAX, &k), NF_EFORMAT);
        ck_assert_int_eq(nf_h5_attr_get_int64_in(f, objs[i], "lr", 0, 10, &k), NF_EFORMAT);
        HAS(nf_strerror_last(), "expected an integer");
        ck_assert(k == 4);
        ck_assert_int_eq(nf_h5_attr_get_int64(f, objs[i], "lr", &k), NF_EFORMAT);
        HAS(nf_strerror_last(), "expected an integer");
        ck_assert_int_eq(nf_h5_attr_get_string(f, objs[i], "lr", s, sizeof s), NF_EFORMAT);
        HAS(nf_strerror_last(), "is not a string");
        ck_assert_int_eq(nf_h5_attr_get_double(f, objs[i], "label", &v), NF_EFORMAT);
        HAS(nf_strerror_last(), "is not a number");
        ck_assert_int_eq(nf_h5_attr_get_string(f, objs[i], "label", s, 5), NF_EINVAL);
        HAS(nf_strerror_last(), "room for 4");
    }
    ck_assert_int_eq(nf_h5_attr_exists(f, "/nope", "label"), 0);
    double v;
    ck_assert_int_eq(nf_h5_attr_get_double(f, "/g", "absent", &v), NF_EFORMAT);
    HAS(nf_strerror_last(), "no attribute 'absent' on /g");
    HAS(nf_strerror_last(), p);
    /* a file opened for reading is not written */
    ck_assert_int_eq(nf_h5_attr_set_double(f, "/", "x", 1.25), NF_EINVAL);
    HAS(nf_strerror_last(), "opened for reading");
    ck_assert_int_eq(nf_h5_write_double(f, "/new", vals, 3, 0), NF_EINVAL);
    nf_h5_close(f);
}
END_TEST

/* A file as h5py or another program writes it: other integer and float types, fixed-length and
 * variable-length strings (with a NULL entry), no format attribute, shapes nf refuses. */
START_TEST(test_foreign_file)
{
    TPATH(p, "foreign.h5");
    hid_t fid = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(fid >= 0);
    uint16_t u16[2][3] = {{1, 65535, 300}, {7, 0, 42}};
    float f32[4] = {1.25f, -2.5f, 3.75f, 1e-3f};
    int8_t i8[3] = {-128, 127, -5};
    hsize_t d2[2] = {2, 3}, d1[1] = {4}, d3[3] = {2, 2, 2}, d8[1] = {3};
    hid_t s2 = H5Screate_simple(2, d2, NULL), s1 = H5Screate_simple(1, d1, NULL), s8 = H5Screate_simple(1, d8, NULL);
    hid_t s3 = H5Screate_simple(3, d3, NULL), sc = H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(fid, "/u16", H5T_STD_U16BE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, u16);
    H5Dclose(ds);
    ds = H5Dcreate2(fid, "/f32", H5T_IEEE_F32LE, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f32);
    H5Dclose(ds);
    ds = H5Dcreate2(fid, "/i8", H5T_STD_I8LE, s8, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, i8);
    H5Dclose(ds);
    H5Dclose(H5Dcreate2(fid, "/cube", H5T_IEEE_F64LE, s3, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Dclose(H5Dcreate2(fid, "/scalar", H5T_IEEE_F64LE, sc, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    /* fixed-length, space-padded strings */
    hid_t ft = H5Tcopy(H5T_C_S1);
    H5Tset_size(ft, 6);
    H5Tset_strpad(ft, H5T_STR_SPACEPAD);
    ds = H5Dcreate2(fid, "/fixed", ft, s8, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, "alpha beta  gammas");
    H5Dclose(ds);
    hid_t a = H5Acreate2(fid, "title", ft, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, ft, "moons ");
    H5Aclose(a);
    /* fixed-length null-terminated attribute, like numpy bytes */
    hid_t nt = H5Tcopy(H5T_C_S1);
    H5Tset_size(nt, 8);
    H5Tset_strpad(nt, H5T_STR_NULLTERM);
    a = H5Acreate2(fid, "tag", nt, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, nt, "ab\0\0\0\0\0\0");
    H5Aclose(a);
    /* variable-length strings with a NULL entry */
    hid_t vt = H5Tcopy(H5T_C_S1);
    H5Tset_size(vt, H5T_VARIABLE);
    const char *vs[3] = {"x", NULL, "zeta"};
    ds = H5Dcreate2(fid, "/vlen", vt, s8, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, vt, H5S_ALL, H5S_ALL, H5P_DEFAULT, vs);
    H5Dclose(ds);
    const char *hello = "hello";
    a = H5Acreate2(fid, "vattr", vt, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, vt, &hello);
    H5Aclose(a);
    /* an integer attribute of another width */
    int16_t v16 = 1234;
    a = H5Acreate2(fid, "small", H5T_STD_I16LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT16, &v16);
    H5Aclose(a);
    H5Tclose(ft);
    H5Tclose(nt);
    H5Tclose(vt);
    H5Sclose(s1);
    H5Sclose(s2);
    H5Sclose(s3);
    H5Sclose(s8);
    H5Sclose(sc);
    H5Fclose(fid);

    nf_h5 *f;
    OK(nf_h5_open(&f, p, NULL, 0));
    ck_assert_int_eq(nf_h5_format_version(f), 0);
    double *x;
    nf_real *xr;
    int64_t *xk;
    size_t r, c, n;
    OK(nf_h5_read_double(f, "/u16", &x, &r, &c));
    ck_assert(r == 2 && c == 3 && x[1] == 65535.0 && x[2] == 300.0 && x[5] == 42.0);
    free(x);
    OK(nf_h5_read_real(f, "/f32", &xr, &r, &c));
    ck_assert(r == 4 && c == 1 && xr[1] == (nf_real)-2.5f && xr[3] == (nf_real)1e-3f);
    free(xr);
    OK(nf_h5_read_int64(f, "/i8", &xk, &r, &c));
    ck_assert(xk[0] == -128 && xk[1] == 127 && xk[2] == -5);
    free(xk);
    char **s;
    OK(nf_h5_read_strings(f, "/fixed", &s, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(s[0], "alpha");
    ck_assert_str_eq(s[1], "beta");
    ck_assert_str_eq(s[2], "gammas");
    nf_h5_strings_free(s, n);
    OK(nf_h5_read_strings(f, "/vlen", &s, &n));
    ck_assert_str_eq(s[0], "x");
    ck_assert_str_eq(s[1], "");
    ck_assert_str_eq(s[2], "zeta");
    nf_h5_strings_free(s, n);
    char buf[32];
    OK(nf_h5_attr_get_string(f, "/", "title", buf, sizeof buf));
    ck_assert_str_eq(buf, "moons");
    OK(nf_h5_attr_get_string(f, "/", "tag", buf, sizeof buf));
    ck_assert_str_eq(buf, "ab");
    OK(nf_h5_attr_get_string(f, "/", "vattr", buf, sizeof buf));
    ck_assert_str_eq(buf, "hello");
    int64_t k;
    OK(nf_h5_attr_get_int64(f, "/", "small", &k));
    ck_assert(k == 1234);
    ck_assert_int_eq(nf_h5_read_double(f, "/cube", &x, &r, &c), NF_EFORMAT);
    HAS(nf_strerror_last(), "/cube has 3 dimensions (expected a 1-D or 2-D array)");
    ck_assert_int_eq(nf_h5_read_double(f, "/scalar", &x, &r, &c), NF_EFORMAT);
    ck_assert_int_eq(nf_h5_read_double(f, "/x", &x, &r, &c), NF_EFORMAT);
    HAS(nf_strerror_last(), "foreign.h5: no dataset /x (expected");
    nf_h5_close(f);
    /* a file without a format attribute is refused when a format is asked for */
    ck_assert_int_eq(nf_h5_open(&f, p, "nf-data", 1), NF_EFORMAT);
    HAS(nf_strerror_last(), "no 'format' attribute");
    ck_assert_ptr_null(f);
}
END_TEST

START_TEST(test_format_checks)
{
    TPATH(p, "data.h5");
    TPATH(m, "model.h5");
    nf_h5 *f;
    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_commit(f));
    OK(nf_h5_create(&f, m, "nf-model", 3));
    OK(nf_h5_commit(f));
    ck_assert_int_eq(nf_h5_open(&f, p, "nf-model", 2), NF_EFORMAT);
    HAS(nf_strerror_last(), "data.h5: format 'nf-data' but expected 'nf-model'");
    ck_assert_ptr_null(f);
    ck_assert_int_eq(nf_h5_open(&f, m, "nf-model", 2), NF_EFORMAT);
    HAS(nf_strerror_last(), "model.h5: format version 3 is newer than this nf understands (2); upgrade nf");
    ck_assert_ptr_null(f);
    OK(nf_h5_open(&f, m, "nf-model", 3));
    ck_assert_int_eq(nf_h5_format_version(f), 3);
    nf_h5_close(f);
    OK(nf_h5_open(&f, m, NULL, 0));
    ck_assert_int_eq(nf_h5_format_version(f), 3);
    char s[32];
    OK(nf_h5_attr_get_string(f, "/", "format", s, sizeof s));
    ck_assert_str_eq(s, "nf-model");
    nf_h5_close(f);

    TPATH(t, "x.h5");
    FILE *fp = fopen(t, "w");
    fprintf(fp, "a,b\n1.5,2.5\n");
    fclose(fp);
    ck_assert_int_eq(nf_h5_open(&f, t, NULL, 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "x.h5: not an HDF5 file");
    TPATH(e, "empty.bin");
    fclose(fopen(e, "w"));
    ck_assert_int_eq(nf_h5_open(&f, e, NULL, 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "not an HDF5 file");
    TPATH(q, "absent.h5");
    ck_assert_int_eq(nf_h5_open(&f, q, NULL, 0), NF_EIO);
    HAS(nf_strerror_last(), "absent.h5: cannot open (No such file");
    ck_assert_ptr_null(f);
}
END_TEST

/* An existing file is left byte-identical by a writer that aborts, closes, or dies uncommitted. */
START_TEST(test_atomic_writes)
{
    TPATH(p, "keep.h5");
    nf_h5 *f;
    double a[6] = {2.385, -1.5, 7.25, 0.125, 3.0, -9.75};
    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", a, 3, 2));
    OK(nf_h5_commit(f));
    size_t n0, n1;
    unsigned char *before = slurp(p, &n0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());

    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", a + 1, 5, 1));
    ck_assert(file_exists(tmp));
    nf_h5_abort(f);
    ck_assert(!file_exists(tmp));
    unsigned char *after = slurp(p, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);

    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_write_double(f, "/y", a, 6, 0));
    nf_h5_close(f); /* closing a writer without commit discards it */
    ck_assert(!file_exists(tmp));
    after = slurp(p, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);

    /* a writer that dies before commit */
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        nf_h5 *g;
        if (nf_h5_create(&g, p, "nf-data", 1) != NF_OK) _exit(3);
        double big[1000];
        for (int i = 0; i < 1000; i++) big[i] = i * 0.5;
        if (nf_h5_write_double(g, "/x", big, 500, 2) != NF_OK) _exit(4);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    after = slurp(p, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);
    char ctmp[600];
    snprintf(ctmp, sizeof ctmp, "%s.tmp.%ld", p, (long)pid);
    if (file_exists(ctmp)) remove(ctmp);

    OK(nf_h5_open(&f, p, "nf-data", 1));
    double *x;
    size_t r, c;
    OK(nf_h5_read_double(f, "/x", &x, &r, &c));
    ck_assert(r == 3 && c == 2 && x[0] == 2.385 && x[5] == -9.75);
    free(x);
    nf_h5_close(f);
    free(before);
}
END_TEST

START_TEST(test_write_errors)
{
    nf_h5 *f = (nf_h5 *)&f;
    ck_assert_int_eq(nf_h5_create(&f, "/nonexistent_nf_dir/sub/out.h5", "nf-data", 1), NF_EIO);
    HAS(nf_strerror_last(), "/nonexistent_nf_dir/sub/out.h5: cannot write (No such file or directory)");
    ck_assert_ptr_null(f);
    /* the rename fails when a directory stands at the path: reported, temporary file removed */
    TPATH(dir, "adir");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    TPATH(inside, "adir/file");
    fclose(fopen(inside, "w"));
    OK(nf_h5_create(&f, dir, "nf-data", 1));
    ck_assert_int_eq(nf_h5_commit(f), NF_EIO);
    HAS(nf_strerror_last(), "cannot move");
    HAS(nf_strerror_last(), dir);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
    ck_assert(!file_exists(tmp));
    remove(inside);
    remove(dir);
}
END_TEST

/* ---- parameter store ------------------------------------------------------------------------ */

/* An nf-data file at path whose /x (rows x cols of the stored type ftype) was created through HDF5
 * and never written. */
static void empty_data_file(const char *path, hid_t ftype, hsize_t rows, hsize_t cols)
{
    nf_h5 *f;
    OK(nf_h5_create(&f, path, "nf-data", 1));
    OK(nf_h5_commit(f));
    hid_t fid = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t dims[2] = {rows, cols};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(fid, "/x", ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(fid >= 0 && d >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(fid);
}

static nf_params *make_params(const char *const *names, const size_t *sizes, int k, double shift)
{
    nf_params *P = nf_params_alloc();
    size_t off;
    for (int i = 0; i < k; i++) ck_assert_int_eq(nf_params_add(P, names[i], sizes[i], &off), NF_OK);
    for (size_t i = 0; i < P->n; i++) {
        P->value[i] = (nf_real)(shift + 0.37 * i - 1.1);
        P->m[i] = (nf_real)(0.01 * i + shift);
        P->v[i] = (nf_real)(0.002 * i * i + 0.5);
    }
    return P;
}

/* An error's context is added once: a file named by its reader is not named again by its caller. */
START_TEST(test_error_context_once)
{
    nf_error(NF_EFORMAT, "m.h5:/model/flow: dimensions 0 and 0");
    ck_assert_int_eq(nf_error_context(NF_EFORMAT, "%s", "m.h5"), NF_EFORMAT);
    ck_assert_str_eq(nf_strerror_last(), "m.h5:/model/flow: dimensions 0 and 0");
    nf_error_context(NF_EFORMAT, "m.h5");
    ck_assert_str_eq(nf_strerror_last(), "m.h5:/model/flow: dimensions 0 and 0");
    nf_error_context(NF_EFORMAT, "loading %s", "m.h5");
    ck_assert_str_eq(nf_strerror_last(), "loading m.h5: m.h5:/model/flow: dimensions 0 and 0");
    nf_error(NF_EFORMAT, "m.h5x: no such group"); /* another name that merely begins the same */
    nf_error_context(NF_EFORMAT, "m.h5");
    ck_assert_str_eq(nf_strerror_last(), "m.h5: m.h5x: no such group");
}
END_TEST

START_TEST(test_params_roundtrip)
{
    TPATH(p, "params.h5");
    const char *names[] = {"flow.0.w", "flow.0.b", "base.scale"};
    const size_t sizes[] = {6, 3, 2};
    nf_params *P = make_params(names, sizes, 3, 2.385);
    nf_h5 *f;
    OK(nf_h5_create(&f, p, "nf-model", 1));
    OK(nf_params_save(P, f, "/model/params", 1));
    OK(nf_params_save(P, f, "/final", 0));
    OK(nf_h5_commit(f));

    OK(nf_h5_open(&f, p, "nf-model", 1));
    nf_params *Q = make_params(names, sizes, 3, 0.0);
    memset(Q->m, 0, Q->n * sizeof(nf_real));
    memset(Q->v, 0, Q->n * sizeof(nf_real));
    OK(nf_params_load(Q, f, "/final", 0));
    for (size_t i = 0; i < P->n; i++) ck_assert(Q->value[i] == P->value[i] && Q->m[i] == 0 && Q->v[i] == 0);
    OK(nf_params_load(Q, f, "/model/params", 1));
    for (size_t i = 0; i < P->n; i++)
        ck_assert(Q->value[i] == P->value[i] && Q->m[i] == P->m[i] && Q->v[i] == P->v[i]);
    ck_assert_int_eq(nf_params_load(Q, f, "/final", 1), NF_EFORMAT);
    HAS(nf_strerror_last(), "params.h5:/final: no dataset 'm' (the file was saved without optimizer state)");

    /* mismatches: a size, a name, the number of slices; the store is left untouched */
    const size_t sizes2[] = {6, 4, 2};
    nf_params *R = make_params(names, sizes2, 3, 5.5);
    nf_real keep = R->value[4];
    ck_assert_int_eq(nf_params_load(R, f, "/model/params", 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "parameter 'flow.0.b' has 3 entries in the file but 4 in the model");
    ck_assert(R->value[4] == keep);
    const char *names3[] = {"flow.0.w", "flow.0.c", "base.scale"};
    nf_params *S = make_params(names3, sizes, 3, 5.5);
    ck_assert_int_eq(nf_params_load(S, f, "/model/params", 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "parameter slice 1 is 'flow.0.b' in the file but 'flow.0.c' in the model");
    nf_params *T = make_params(names, sizes, 2, 5.5);
    ck_assert_int_eq(nf_params_load(T, f, "/model/params", 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "the file has 3 parameter slices, the model 2");
    ck_assert_int_eq(nf_params_load(T, f, "/nothing", 0), NF_EFORMAT);
    HAS(nf_strerror_last(), "no dataset /nothing/names");
    nf_h5_close(f);
    nf_params_free(P);
    nf_params_free(Q);
    nf_params_free(R);
    nf_params_free(S);
    nf_params_free(T);
}
END_TEST

/* Issue 16: what nf writes carries checksums and fixed-length strings; a flipped bit, a dataset
 * declared larger than stored and a non-finite parameter are errors, not numbers. */
START_TEST(test_integrity)
{
    TPATH(p, "integrity.h5");
    double x[600];
    for (int i = 0; i < 600; i++) x[i] = 0.385 + 0.01 * i;
    const char *names[] = {"alpha", "a much longer name", ""};
    nf_h5 *f;
    OK(nf_h5_create(&f, p, "nf-data", 1));
    OK(nf_h5_write_double(f, "/x", x, 300, 2));
    OK(nf_h5_write_strings(f, "/names", names, 3));
    OK(nf_h5_attr_set_string(f, "/", "note", "2.385 nats"));
    OK(nf_h5_attr_set_string(f, "/", "empty", ""));
    OK(nf_h5_commit(f));

    /* on disk: a chunked dataset with Fletcher32, fixed-length strings */
    hid_t fid = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(fid, "/x", H5P_DEFAULT), dcpl = H5Dget_create_plist(d);
    ck_assert_int_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
    unsigned flags;
    size_t nel = 0;
    ck_assert_int_eq(H5Pget_nfilters(dcpl), 1);
    ck_assert_int_eq(H5Pget_filter2(dcpl, 0, &flags, &nel, NULL, 0, NULL, NULL), H5Z_FILTER_FLETCHER32);
    haddr_t at;
    hsize_t off[2] = {0, 0}, csize;
    hid_t fs = H5Dget_space(d);
    ck_assert(H5Dget_chunk_info(d, fs, 0, off, &flags, &at, &csize) >= 0);
    H5Sclose(fs);
    H5Pclose(dcpl);
    H5Dclose(d);
    hid_t sd = H5Dopen2(fid, "/names", H5P_DEFAULT), st = H5Dget_type(sd);
    ck_assert_int_eq(H5Tis_variable_str(st), 0);
    H5Tclose(st);
    H5Dclose(sd);
    hid_t a = H5Aopen_by_name(fid, "/", "note", H5P_DEFAULT, H5P_DEFAULT), at2 = H5Aget_type(a);
    ck_assert_int_eq(H5Tis_variable_str(at2), 0);
    H5Tclose(at2);
    H5Aclose(a);
    H5Fclose(fid);

    /* read back exactly, fixed-length strings included */
    double *y;
    size_t r, c;
    char **s, buf[64];
    size_t n;
    OK(nf_h5_open(&f, p, "nf-data", 1));
    OK(nf_h5_read_double(f, "/x", &y, &r, &c));
    ck_assert(r == 300 && c == 2 && memcmp(x, y, sizeof x) == 0);
    free(y);
    OK(nf_h5_read_strings(f, "/names", &s, &n));
    ck_assert(n == 3 && !strcmp(s[0], "alpha") && !strcmp(s[1], "a much longer name") && !strcmp(s[2], ""));
    nf_h5_strings_free(s, n);
    OK(nf_h5_attr_get_string(f, "/", "note", buf, sizeof buf));
    ck_assert_str_eq(buf, "2.385 nats");
    OK(nf_h5_attr_get_string(f, "/", "empty", buf, sizeof buf));
    ck_assert_str_eq(buf, "");
    OK(nf_h5_check_numeric(f, "/x"));
    nf_h5_close(f);

    /* one flipped bit in the first chunk of /x: a checksum error naming the dataset */
    FILE *fp = fopen(p, "r+b");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, (long)at + 100, SEEK_SET);
    int byte = fgetc(fp);
    fseek(fp, (long)at + 100, SEEK_SET);
    fputc(byte ^ 0x10, fp);
    fclose(fp);
    OK(nf_h5_open(&f, p, "nf-data", 1));
    ck_assert_int_eq(nf_h5_read_double(f, "/x", &y, &r, &c), NF_EIO);
    HAS(nf_strerror_last(), "integrity.h5: cannot read dataset /x (damaged file: a checksum");
    nf_h5_close(f);

    /* a dataset declared 1e8 x 10 that holds nothing: refused before any allocation */
    TPATH(q, "declared.h5");
    empty_data_file(q, H5T_IEEE_F64LE, 100000000, 10);
    OK(nf_h5_open(&f, q, "nf-data", 1));
    ck_assert_int_eq(nf_h5_check_numeric(f, "/x"), NF_EFORMAT);
    HAS(nf_strerror_last(), "declared.h5: dataset /x declares 1000000000 values (8000000000 bytes) but the file stores 0");
    ck_assert_int_eq(nf_h5_read_double(f, "/x", &y, &r, &c), NF_EFORMAT);
    nf_h5_close(f);

    /* a number type nf does not read (a 16-byte integer) is refused before reading */
    TPATH(q16, "int128.h5");
    hid_t t16 = H5Tcopy(H5T_STD_I64LE);
    ck_assert(H5Tset_size(t16, 16) >= 0);
    empty_data_file(q16, t16, 3, 2);
    H5Tclose(t16);
    OK(nf_h5_open(&f, q16, "nf-data", 1));
    ck_assert_int_eq(nf_h5_check_numeric(f, "/x"), NF_EFORMAT);
    HAS(nf_strerror_last(), "int128.h5: dataset /x: its number type (16 bytes) is damaged or not one nf reads");
    ck_assert_int_eq(nf_h5_read_double(f, "/x", &y, &r, &c), NF_EFORMAT);
    HAS(nf_strerror_last(), "its number type (16 bytes)");
    nf_h5_close(f);

    /* a non-finite parameter or a negative second moment is refused, naming entry and slice */
    const char *pn[] = {"flow.0.w", "flow.0.b"};
    const size_t ps[] = {4, 2};
    nf_params *P = make_params(pn, ps, 2, 2.385);
    TPATH(m, "nanparam.h5");
    for (int k = 0; k < 2; k++) {
        nf_params *Q = make_params(pn, ps, 2, 0.0);
        if (k == 0) P->value[5] = (nf_real)NAN;
        else P->value[5] = 1, P->v[1] = -1;
        OK(nf_h5_create(&f, m, "nf-model", 2));
        OK(nf_params_save(P, f, "/p", 1));
        OK(nf_h5_commit(f));
        OK(nf_h5_open(&f, m, "nf-model", 2));
        ck_assert_int_eq(nf_params_load(Q, f, "/p", 1), NF_EFORMAT);
        HAS(nf_strerror_last(), k == 0 ? "'value' entry 5 (parameter 'flow.0.b') is nan (expected a finite number)"
                                       : "'v' entry 1 (parameter 'flow.0.w') is -1 (expected a finite number >= 0)");
        ck_assert(Q->value[0] == (nf_real)(0.0 - 1.1)); /* the store is untouched */
        nf_h5_close(f);
        nf_params_free(Q);
    }
    nf_params_free(P);
}
END_TEST

static Suite *h5_suite(void)
{
    Suite *s = suite_create("h5");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_real_roundtrip);
    tcase_add_test(tc, test_typed_roundtrips);
    tcase_add_test(tc, test_empty_datasets);
    tcase_add_test(tc, test_large);
    tcase_add_test(tc, test_attributes);
    tcase_add_test(tc, test_foreign_file);
    tcase_add_test(tc, test_format_checks);
    tcase_add_test(tc, test_atomic_writes);
    tcase_add_test(tc, test_write_errors);
    tcase_add_test(tc, test_error_context_once);
    tcase_add_test(tc, test_params_roundtrip);
    tcase_add_test(tc, test_integrity);
    suite_add_tcase(s, tc);
    return s;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[768];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else remove(p);
    }
    closedir(d);
    remove(dir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_h5_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    SRunner *sr = srunner_create(h5_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_tree(tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
