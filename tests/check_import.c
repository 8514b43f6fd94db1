/* tests/check_import.c - CSV and NPY import and data validation.  Files are written byte by byte in a
 * temporary directory: CSV with every delimiter, headers (detected and forced), quoted names, blank
 * lines and CRLF endings; NPY of every supported dtype, both orders and all three format versions;
 * and every error path with its message (file, line, column) checked. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/import.h"

static char tmpdir[256];

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

/* Write text (or bytes) to tmpdir/name; path receives the full path. */
static void put(char *path, size_t size, const char *name, const void *data, size_t n)
{
    snprintf(path, size, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(data, 1, n, fp), n);
    fclose(fp);
}
#define PUT_TEXT(path, name, text) \
    char path[512];                \
    put(path, sizeof path, name, text, strlen(text))

static void expect_error(const char *path, const nf_csv_options *o, int code, const char *part)
{
    nf_table t;
    int rc = nf_import_csv(path, o, &t);
    ck_assert_msg(rc == code, "%s: code %d, expected %d (%s)", path, rc, code, nf_strerror_last());
    HAS(nf_strerror_last(), part);
    ck_assert_ptr_null(t.x);
    ck_assert_ptr_null(t.names);
}

/* ---- CSV ------------------------------------------------------------------------------------ */

START_TEST(test_csv_header_quotes_crlf)
{
    PUT_TEXT(p, "iris.csv",
             "\"sepal \"\"length\"\"\",width,\"petal, len\"\r\n\r\n2.385,1.5,-3e-2\r\n   \r\n4.75, 0.5 ,inf\r\n"
             "nan,-7,+8.125\r\n");
    nf_table t;
    OK(nf_import_csv(p, NULL, &t));
    ck_assert_uint_eq(t.n, 3);
    ck_assert_uint_eq(t.d, 3);
    ck_assert_str_eq(t.names[0], "sepal \"length\"");
    ck_assert_str_eq(t.names[1], "width");
    ck_assert_str_eq(t.names[2], "petal, len");
    ck_assert(t.x[0] == 2.385 && t.x[1] == 1.5 && t.x[2] == -3e-2);
    ck_assert(t.x[3] == 4.75 && t.x[4] == 0.5 && isinf(t.x[5]) && t.x[5] > 0);
    ck_assert(isnan(t.x[6]) && t.x[7] == -7 && t.x[8] == 8.125);
    nf_table_free(&t);
    ck_assert_ptr_null(t.x);
    nf_table_free(&t); /* twice is harmless */
}
END_TEST

START_TEST(test_csv_delimiters)
{
    nf_table t;
    PUT_TEXT(a, "semi.csv", "1.5;2.25\n3;4.125\n");
    OK(nf_import_csv(a, NULL, &t));
    ck_assert(t.n == 2 && t.d == 2 && t.x[1] == 2.25 && t.x[3] == 4.125);
    ck_assert_str_eq(t.names[0], "x0");
    ck_assert_str_eq(t.names[1], "x1");
    nf_table_free(&t);

    PUT_TEXT(b, "tab.tsv", "alpha\tbeta\tgamma\n1\t2.5\t-3\n4\t5\t6.75\n");
    OK(nf_import_csv(b, NULL, &t));
    ck_assert(t.n == 2 && t.d == 3 && t.x[5] == 6.75);
    ck_assert_str_eq(t.names[2], "gamma");
    nf_table_free(&t);

    PUT_TEXT(c, "ws.txt", "  1.5   2.5\t3.5\n4 5    6.125  \n\n7 8 9\n");
    OK(nf_import_csv(c, NULL, &t));
    ck_assert(t.n == 3 && t.d == 3 && t.x[0] == 1.5 && t.x[2] == 3.5 && t.x[5] == 6.125 && t.x[8] == 9);
    nf_table_free(&t);

    PUT_TEXT(d, "one.csv", "1.5\n-2.5\n3.75\n");
    OK(nf_import_csv(d, NULL, &t));
    ck_assert(t.n == 3 && t.d == 1 && t.x[1] == -2.5);
    nf_table_free(&t);

    /* the delimiter that splits both lines alike wins over one that occurs more often in one line */
    PUT_TEXT(e, "mixed.csv", "a;x;y,b\n1.25,2\n");
    OK(nf_import_csv(e, NULL, &t));
    ck_assert(t.n == 1 && t.d == 2 && t.x[0] == 1.25);
    ck_assert_str_eq(t.names[0], "a;x;y");
    nf_table_free(&t);
    /* delimiters inside quotes do not count */
    PUT_TEXT(e2, "quoted.csv", "\"a;b\",\"c;d;e\"\n1.25,2\n");
    OK(nf_import_csv(e2, NULL, &t));
    ck_assert(t.n == 1 && t.d == 2 && t.x[1] == 2);
    ck_assert_str_eq(t.names[1], "c;d;e");
    nf_table_free(&t);

    /* a CSV of many rows: the row array grows */
    size_t rows = 20000, len = 0;
    char *big = malloc(rows * 64);
    for (size_t i = 0; i < rows; i++)
        len += (size_t)sprintf(big + len, "%zu,%.3f,%zu,-%zu.5\n", i, 0.125 * (double)i, 2 * i, i % 7);
    char g[512];
    put(g, sizeof g, "big.csv", big, len);
    OK(nf_import_csv(g, NULL, &t));
    ck_assert(t.n == rows && t.d == 4);
    ck_assert(t.x[4 * 12345 + 1] == 0.125 * 12345 && t.x[4 * (rows - 1) + 3] == -((double)((rows - 1) % 7) + 0.5));
    nf_table_free(&t);
    free(big);
}
END_TEST

START_TEST(test_csv_options)
{
    nf_table t;
    PUT_TEXT(a, "numhead.csv", "10,20\n1.5,2.5\n");
    nf_csv_options forced = {0, 1};
    OK(nf_import_csv(a, &forced, &t));
    ck_assert(t.n == 1 && t.d == 2 && t.x[1] == 2.5);
    ck_assert_str_eq(t.names[0], "10");
    nf_table_free(&t);
    OK(nf_import_csv(a, NULL, &t));
    ck_assert(t.n == 2 && t.x[0] == 10);
    nf_table_free(&t);

    PUT_TEXT(b, "named.csv", "a,b\n1,2\n");
    nf_csv_options none = {0, 0};
    expect_error(b, &none, NF_EDATA, "named.csv line 1, column 1: 'a' is not a number");

    PUT_TEXT(c, "decimal.csv", "1,5;2\n3,25;4\n");
    nf_csv_options semi = {';', 0};
    expect_error(c, &semi, NF_EDATA, "decimal.csv line 1, column 1: '1,5' is not a number");
    nf_csv_options ws = {' ', -1};
    PUT_TEXT(d, "spaced.txt", "x y\n1.5    2\n");
    OK(nf_import_csv(d, &ws, &t));
    ck_assert(t.n == 1 && t.d == 2 && t.x[0] == 1.5);
    ck_assert_str_eq(t.names[1], "y");
    nf_table_free(&t);
}
END_TEST

START_TEST(test_csv_errors)
{
    PUT_TEXT(r, "data.csv", "a,b,c,d\n1,2,3,4\n5,6,7,8\n\n9,10,11,12\n13,14,15,16\n17,18,19\n");
    expect_error(r, NULL, NF_EDATA, "data.csv line 7: 3 fields, expected 4 as on line 2");
    PUT_TEXT(r2, "long.csv", "1,2\n3,4,5\n");
    expect_error(r2, NULL, NF_EDATA, "long.csv line 2: 3 fields, expected 2 as on line 1");
    PUT_TEXT(r3, "short.csv", "1.5, 2, 3\n4, 5\n");
    expect_error(r3, NULL, NF_EDATA, "short.csv line 2: 2 fields, expected 3 as on line 1");

    char p[512];
    put(p, sizeof p, "data.csv", "x,y\n1,2\n3,4\n5,6\n7,abc\n", 22);
    expect_error(p, NULL, NF_EDATA, "data.csv line 5, column 2: 'abc' is not a number");
    put(p, sizeof p, "data.csv", "", 0);
    expect_error(p, NULL, NF_EDATA, "data.csv: no data rows");
    put(p, sizeof p, "data.csv", "\n  \r\n\n", 6);
    expect_error(p, NULL, NF_EDATA, "data.csv: no data rows");
    put(p, sizeof p, "data.csv", "x,y\n", 4);
    expect_error(p, NULL, NF_EDATA, "data.csv: no data rows");

    PUT_TEXT(h, "head.csv", "a,b,c\n1,2\n");
    expect_error(h, NULL, NF_EDATA, "head.csv line 2: 2 fields, expected 3 as in the header on line 1");
    PUT_TEXT(q, "quote.csv", "a,b\n\"1.5,2\n");
    expect_error(q, NULL, NF_EFORMAT, "quote.csv line 2, column 1: unterminated quote");
    PUT_TEXT(q2, "after.csv", "\"a\"x,b\n1,2\n");
    expect_error(q2, NULL, NF_EFORMAT, "after.csv line 1, column 1: text after the closing quote");
    PUT_TEXT(e, "hole.csv", "1,2,3\n4,,6\n");
    expect_error(e, NULL, NF_EDATA, "hole.csv line 2, column 2: empty field");
    PUT_TEXT(t, "trail.csv", "1,2,\n4,5,\n");
    expect_error(t, NULL, NF_EDATA, "trail.csv line 1, column 3: empty field");
    char m[512];
    snprintf(m, sizeof m, "%s/absent.csv", tmpdir);
    expect_error(m, NULL, NF_EIO, "absent.csv: cannot open (No such file");
}
END_TEST

/* ---- NPY ------------------------------------------------------------------------------------ */

/* An NPY file: preamble of format version major, the header dict padded to 64 bytes, then data. */
static void write_npy(char *path, size_t size, const char *name, int major, const char *descr, int fortran,
                      const char *shape, const unsigned char *data, size_t nbytes)
{
    char dict[256];
    int hl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                      fortran ? "True" : "False", shape);
    size_t pre = major == 1 ? 10 : 12, total = pre + (size_t)hl + 1;
    size_t pad = (64 - total % 64) % 64, hlen = (size_t)hl + pad + 1;
    unsigned char *b = malloc(total + pad + nbytes);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + pre, dict, (size_t)hl);
    memset(b + pre + hl, ' ', pad);
    b[pre + (size_t)hl + pad] = '\n';
    if (nbytes) memcpy(b + pre + hlen, data, nbytes);
    put(path, size, name, b, pre + hlen + nbytes);
    free(b);
}

static void put_le(unsigned char *p, uint64_t v, int size)
{
    for (int i = 0; i < size; i++) p[i] = (unsigned char)(v >> (8 * i));
}

typedef struct {
    const char *descr;
    char kind;
    int size;
    int64_t v[6];
} int_case;

static const int_case int_cases[] = {
    {"<i1", 'i', 1, {-128, 127, -5, 0, 33, -1}},
    {"|i1", 'i', 1, {-7, 100, 1, -100, 2, 3}},
    {"<u1", 'u', 1, {255, 0, 128, 7, 200, 1}},
    {"|u1", 'u', 1, {254, 3, 129, 9, 0, 77}},
    {"<i2", 'i', 2, {-32768, 32767, -300, 5, 1000, -1}},
    {"<u2", 'u', 2, {65535, 0, 300, 40000, 2, 9}},
    {"<i4", 'i', 4, {INT32_MIN, INT32_MAX, -70000, 12, 0, -3}},
    {"<u4", 'u', 4, {4294967295LL, 0, 3000000000LL, 65536, 1, 8}},
    {"<i8", 'i', 8, {INT64_MIN, 9007199254740993LL, -1, 42, -4294967296LL, 5}},
    {"<u8", 'u', 8, {-1, 0, 4611686018427387904LL, 3, 1, 2}},
};

START_TEST(test_npy_integer_types)
{
    for (size_t c = 0; c < sizeof int_cases / sizeof int_cases[0]; c++) {
        const int_case *ic = &int_cases[c];
        unsigned char data[48];
        for (int i = 0; i < 6; i++) put_le(data + i * ic->size, (uint64_t)ic->v[i], ic->size);
        char p[512], name[32];
        snprintf(name, sizeof name, "int%zu.npy", c);
        write_npy(p, sizeof p, name, 1, ic->descr, 0, "(2, 3)", data, 6 * (size_t)ic->size);
        nf_table t;
        int rc = nf_import_npy(p, &t);
        ck_assert_msg(rc == NF_OK, "%s: %s", ic->descr, nf_strerror_last());
        ck_assert(t.n == 2 && t.d == 3);
        ck_assert_str_eq(t.names[2], "x2");
        for (int i = 0; i < 6; i++) {
            uint64_t mask = ic->size == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * ic->size)) - 1);
            double want = ic->kind == 'i' ? (double)ic->v[i] : (double)((uint64_t)ic->v[i] & mask);
            ck_assert_msg(t.x[i] == want, "%s element %d: %.17g, expected %.17g", ic->descr, i, t.x[i], want);
        }
        nf_table_free(&t);
    }
}
END_TEST

START_TEST(test_npy_floats_orders_versions)
{
    const double v[6] = {2.385, -1.25, 0.5, 7.75, -3.125e-3, 1e30};
    for (int major = 1; major <= 3; major++)
        for (int fortran = 0; fortran <= 1; fortran++)
            for (int s = 4; s <= 8; s += 4) {
                unsigned char data[48];
                for (int k = 0; k < 6; k++) {
                    /* element k of the file is (i, j) of the 2 x 3 array in the file's order */
                    int i = fortran ? k % 2 : k / 3, j = fortran ? k / 2 : k % 3;
                    double x = v[i * 3 + j];
                    if (s == 4) {
                        float f = (float)x;
                        uint32_t w;
                        memcpy(&w, &f, 4);
                        put_le(data + 4 * k, w, 4);
                    } else {
                        uint64_t w;
                        memcpy(&w, &x, 8);
                        put_le(data + 8 * k, w, 8);
                    }
                }
                char p[512];
                write_npy(p, sizeof p, "f.npy", major, s == 4 ? "<f4" : "<f8", fortran, "(2, 3)", data, 6 * (size_t)s);
                nf_table t;
                OK(nf_import_npy(p, &t));
                ck_assert(t.n == 2 && t.d == 3);
                for (int k = 0; k < 6; k++) {
                    double want = s == 4 ? (double)(float)v[k] : v[k];
                    ck_assert_msg(t.x[k] == want, "v%d f%d %s: x[%d] = %g, expected %g", major, s, fortran ? "F" : "C",
                                  k, t.x[k], want);
                }
                nf_table_free(&t);
            }
    /* 1-D reads as n x 1 */
    unsigned char data[40];
    for (int k = 0; k < 5; k++) {
        double x = 0.75 * k - 1.125;
        uint64_t w;
        memcpy(&w, &x, 8);
        put_le(data + 8 * k, w, 8);
    }
    char p[512];
    write_npy(p, sizeof p, "vec.npy", 2, "<f8", 0, "(5,)", data, 40);
    nf_table t;
    OK(nf_import_npy(p, &t));
    ck_assert(t.n == 5 && t.d == 1 && t.x[4] == 1.875);
    ck_assert_str_eq(t.names[0], "x0");
    nf_table_free(&t);
}
END_TEST

static void expect_npy_error(const char *path, int code, const char *part)
{
    nf_table t;
    int rc = nf_import_npy(path, &t);
    ck_assert_msg(rc == code, "%s: code %d, expected %d (%s)", path, rc, code, nf_strerror_last());
    HAS(nf_strerror_last(), part);
    ck_assert_ptr_null(t.x);
}

START_TEST(test_npy_errors)
{
    unsigned char data[64] = {0};
    char p[512];
    write_npy(p, sizeof p, "be.npy", 1, ">f8", 0, "(2, 2)", data, 32);
    expect_npy_error(p, NF_EFORMAT, "be.npy: big-endian data ('>f8') is not supported");
    write_npy(p, sizeof p, "c16.npy", 1, "<c16", 0, "(2,)", data, 32);
    expect_npy_error(p, NF_EFORMAT, "c16.npy: dtype '<c16' is not supported");
    write_npy(p, sizeof p, "b1.npy", 1, "|b1", 0, "(2,)", data, 2);
    expect_npy_error(p, NF_EFORMAT, "dtype '|b1' is not supported");
    write_npy(p, sizeof p, "scalar.npy", 1, "<f8", 0, "()", data, 8);
    expect_npy_error(p, NF_EFORMAT, "scalar.npy: a 0-D array");
    write_npy(p, sizeof p, "cube.npy", 1, "<f8", 0, "(2, 2, 2)", data, 64);
    expect_npy_error(p, NF_EFORMAT, "cube.npy: a 3-D array of shape (2, 2, 2); expected a 1-D or 2-D array");
    write_npy(p, sizeof p, "x.npy", 1, "<f8", 0, "(4, 2)", data, 20);
    expect_npy_error(p, NF_EFORMAT, "x.npy: file ends after 20 of 64 bytes of data");
    write_npy(p, sizeof p, "zero.npy", 1, "<f8", 0, "(0, 3)", data, 0);
    expect_npy_error(p, NF_EDATA, "zero.npy: no data rows");
    write_npy(p, sizeof p, "v4.npy", 1, "<f8", 0, "(1,)", data, 8);
    FILE *fp = fopen(p, "r+b");
    fseek(fp, 6, SEEK_SET);
    fputc(4, fp);
    fclose(fp);
    expect_npy_error(p, NF_EFORMAT, "v4.npy: NPY format version 4.0 is not supported");
    put(p, sizeof p, "text.npy", "1,2\n3,4\n", 8);
    expect_npy_error(p, NF_EFORMAT, "text.npy: not an NPY file");
    const char rec[] = "\x93NUMPY\x01\x00\x42\x00{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }";
    put(p, sizeof p, "rec.npy", rec, sizeof rec - 1);
    expect_npy_error(p, NF_EFORMAT, "rec.npy: structured dtype");
    const char junk[] = "\x93NUMPY\x01\x00\x10\x00{'descr' '<f8'} ";
    put(p, sizeof p, "junk.npy", junk, sizeof junk - 1);
    expect_npy_error(p, NF_EFORMAT, "junk.npy: cannot parse the NPY header");
    const char nokey[] = "\x93NUMPY\x01\x00\x1d\x00{'descr': '<f8', 'shape': ()}";
    put(p, sizeof p, "nokey.npy", nokey, sizeof nokey - 1);
    expect_npy_error(p, NF_EFORMAT, "nokey.npy: NPY header lacks 'fortran_order'");
}
END_TEST

START_TEST(test_import_file)
{
    nf_table t;
    PUT_TEXT(a, "a.csv", "u,v\n1.5,2.5\n");
    OK(nf_import_file(a, &t));
    ck_assert(t.n == 1 && t.d == 2);
    nf_table_free(&t);
    PUT_TEXT(b, "b.TSV", "a\tb\n1.5 x\t2\n");
    ck_assert_int_eq(nf_import_file(b, &t), NF_EDATA); /* tab-separated: "1.5 x" is one field */
    HAS(nf_strerror_last(), "b.TSV line 2, column 1: '1.5 x' is not a number");
    PUT_TEXT(c, "c.txt", "1 2 3\n4 5 6\n");
    OK(nf_import_file(c, &t));
    ck_assert(t.n == 2 && t.d == 3 && t.x[5] == 6);
    nf_table_free(&t);
    unsigned char data[16];
    double x = 2.385;
    uint64_t w;
    memcpy(&w, &x, 8);
    put_le(data, w, 8);
    put_le(data + 8, w, 8);
    char d[512];
    write_npy(d, sizeof d, "samples.dat", 1, "<f8", 0, "(2,)", data, 16); /* found by its magic bytes */
    OK(nf_import_file(d, &t));
    ck_assert(t.n == 2 && t.d == 1 && t.x[1] == 2.385);
    nf_table_free(&t);
    write_npy(d, sizeof d, "s.npy", 3, "<f8", 0, "(1, 2)", data, 16);
    OK(nf_import_file(d, &t));
    ck_assert(t.n == 1 && t.d == 2);
    nf_table_free(&t);
    PUT_TEXT(e, "notes.dat", "1,2\n");
    ck_assert_int_eq(nf_import_file(e, &t), NF_EFORMAT);
    HAS(nf_strerror_last(), "notes.dat: unknown file type (expected .csv, .tsv, .txt or .npy)");
    char h[512];
    put(h, sizeof h, "data.h5", "\x89HDF\r\n\x1a\n\0\0\0\0", 12);
    ck_assert_int_eq(nf_import_file(h, &t), NF_EFORMAT);
    HAS(nf_strerror_last(), "data.h5: an HDF5 file");
    PUT_TEXT(f, "fake.npy", "1,2\n");
    ck_assert_int_eq(nf_import_file(f, &t), NF_EFORMAT);
    HAS(nf_strerror_last(), "fake.npy: not an NPY file");
}
END_TEST

/* ---- column selection and categorical context ----------------------------------------------- */

/* A table with an id, two numeric columns, a free-text column (quoted, with a comma) and a
 * categorical one whose categories appear out of order. */
static const char *const MIXED =
    "id,eruptions,waiting,station,kind\n"
    "1,3.6,79,\"north gate\",long\n"
    "2,1.8,54,\"south, lot\",short\n"
    "3,3.333,74,\"north gate\",long\n"
    "4,2.283,62,\"south, lot\",medium\n"
    "5,4.533,85,\"north gate\",long\n";

START_TEST(test_select_default_skips_text)
{
    PUT_TEXT(p, "mixed.csv", MIXED);
    nf_table t;
    nf_import_select none = {0};
    OK(nf_import_csv_select(p, NULL, &none, &t));
    ck_assert(t.n == 5 && t.d == 3 && t.c == 0 && t.ctx == NULL);
    ck_assert_str_eq(t.names[0], "id");
    ck_assert_str_eq(t.names[2], "waiting");
    ck_assert(t.x[3 * 3 + 1] == 2.283 && t.x[4 * 3 + 2] == 85);
    ck_assert_uint_eq(t.n_skipped, 2);
    ck_assert_str_eq(t.skipped[0], "station");
    ck_assert_str_eq(t.skipped[1], "kind");
    nf_table_free(&t);
    /* without a selection every column must be a number, as before */
    ck_assert_int_eq(nf_import_csv(p, NULL, &t), NF_EDATA);
    HAS(nf_strerror_last(), "mixed.csv line 2, column 4: 'north gate' is not a number");
    ck_assert_ptr_null(t.x);
}
END_TEST

START_TEST(test_select_columns_context)
{
    PUT_TEXT(p, "mixed.csv", MIXED);
    nf_table t;
    /* by name, in the order given, with the category as a one-hot context sorted by name */
    nf_import_select s1 = {.columns = "waiting, eruptions", .context = "kind"};
    OK(nf_import_csv_select(p, NULL, &s1, &t));
    ck_assert(t.n == 5 && t.d == 2 && t.c == 3);
    ck_assert_str_eq(t.names[0], "waiting");
    ck_assert_str_eq(t.names[1], "eruptions");
    ck_assert(t.x[0] == 79 && t.x[1] == 3.6 && t.x[7] == 2.283);
    ck_assert_str_eq(t.ctx_names[0], "kind=long");
    ck_assert_str_eq(t.ctx_names[1], "kind=medium");
    ck_assert_str_eq(t.ctx_names[2], "kind=short");
    const double want[5][3] = {{1, 0, 0}, {0, 0, 1}, {1, 0, 0}, {0, 1, 0}, {1, 0, 0}};
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 3; k++) ck_assert(t.ctx[i * 3 + k] == want[i][k]);
    ck_assert_uint_eq(t.n_skipped, 0);
    nf_table_free(&t);
    /* by index and range; two context columns, each its own block; a quoted category with a comma */
    nf_import_select s2 = {.columns = "1-2", .context = "3,kind"};
    OK(nf_import_csv_select(p, NULL, &s2, &t));
    ck_assert(t.d == 2 && t.c == 5);
    ck_assert_str_eq(t.names[0], "eruptions");
    ck_assert_str_eq(t.ctx_names[0], "station=north gate");
    ck_assert_str_eq(t.ctx_names[1], "station=south, lot");
    ck_assert_str_eq(t.ctx_names[2], "kind=long");
    ck_assert(t.ctx[1 * 5 + 1] == 1 && t.ctx[1 * 5 + 4] == 1 && t.ctx[1 * 5 + 0] == 0);
    nf_table_free(&t);
    /* --drop: every other numeric column */
    nf_import_select s3 = {.drop = "id", .context = "kind"};
    OK(nf_import_csv_select(p, NULL, &s3, &t));
    ck_assert(t.d == 2 && t.c == 3 && t.n_skipped == 1);
    ck_assert_str_eq(t.names[0], "eruptions");
    ck_assert_str_eq(t.skipped[0], "station");
    nf_table_free(&t);
    /* numeric categories sort as numbers (2 < 10), written as in the file */
    PUT_TEXT(q, "cyl.csv", "mpg,cyl\n21.5,10\n30.25,2\n18,10\n");
    nf_import_select s4 = {.context = "cyl"};
    OK(nf_import_csv_select(q, NULL, &s4, &t));
    ck_assert(t.d == 1 && t.c == 2);
    ck_assert_str_eq(t.ctx_names[0], "cyl=2");
    ck_assert_str_eq(t.ctx_names[1], "cyl=10");
    ck_assert(t.ctx[0] == 0 && t.ctx[1] == 1 && t.ctx[2] == 1 && t.ctx[3] == 0);
    nf_table_free(&t);
}
END_TEST

static void expect_select_error(const char *path, const nf_import_select *s, int code, const char *part)
{
    nf_table t;
    int rc = nf_import_file_select(path, NULL, s, &t);
    ck_assert_msg(rc == code, "%s: code %d, expected %d (%s)", path, rc, code, nf_strerror_last());
    HAS(nf_strerror_last(), part);
    ck_assert_ptr_null(t.x);
    ck_assert_ptr_null(t.ctx);
}

START_TEST(test_select_errors)
{
    PUT_TEXT(p, "mixed.csv", MIXED);
    nf_import_select a = {.columns = "eruption"};
    expect_select_error(p, &a, NF_EINVAL, "mixed.csv has no column 'eruption' (columns: id, eruptions, waiting");
    HAS(nf_strerror_last(), "--columns 'eruption': ");
    nf_import_select b = {.columns = "1,7"};
    expect_select_error(p, &b, NF_EINVAL, "--columns '1,7': 7 is not a column of");
    nf_import_select c = {.columns = "waiting,2"};
    expect_select_error(p, &c, NF_EINVAL, "column 'waiting' is named twice");
    nf_import_select d = {.columns = "waiting", .drop = "id"};
    expect_select_error(p, &d, NF_EINVAL, "--columns and --drop");
    nf_import_select e = {.columns = "waiting,kind", .context = "kind"};
    expect_select_error(p, &e, NF_EINVAL, "column 'kind' is in --columns and in --context");
    nf_import_select f = {.columns = "eruptions,station"};
    expect_select_error(p, &f, NF_EDATA, "mixed.csv line 2, column 4: 'north gate' is not a number (column 'station'");
    nf_import_select g = {.drop = "id,eruptions,waiting"};
    expect_select_error(p, &g, NF_EINVAL, "no data columns left");
    nf_import_select h = {.columns = "eruptions,,waiting", .context = "kind"};
    expect_select_error(p, &h, NF_EINVAL, "an empty entry");
    PUT_TEXT(q, "gap.csv", "a,kind\n1.5,x\n2.5,\n");
    nf_import_select k = {.context = "kind"};
    expect_select_error(q, &k, NF_EDATA, "gap.csv line 3, column 2 ('kind'): empty field (expected a category)");
    /* too many categories */
    size_t len = 0, rows = NF_IMPORT_MAX_CATEGORIES + 5;
    char *big = malloc(rows * 32);
    len += (size_t)sprintf(big, "v,id\n");
    for (size_t i = 0; i < rows; i++) len += (size_t)sprintf(big + len, "%.3f,u%zu\n", 0.5 * (double)i, i);
    char r[512];
    put(r, sizeof r, "ids.csv", big, len);
    free(big);
    nf_import_select m = {.context = "id"};
    expect_select_error(r, &m, NF_EDATA, "a categorical context takes at most 1000 distinct values");
}
END_TEST

START_TEST(test_select_npy)
{
    /* (3, 3) float64: columns x0, x1, x2; x2 holds a category code */
    double v[9] = {2.385, -1.5, 7, 0.25, 3.75, 2, -4.125, 0.5, 7};
    unsigned char data[72];
    for (int i = 0; i < 9; i++) {
        uint64_t w;
        memcpy(&w, &v[i], 8);
        put_le(data + 8 * i, w, 8);
    }
    char d[512];
    write_npy(d, sizeof d, "codes.npy", 1, "<f8", 0, "(3, 3)", data, 72);
    nf_table t;
    nf_import_select s = {.columns = "x1,0", .context = "x2"};
    OK(nf_import_file_select(d, NULL, &s, &t));
    ck_assert(t.n == 3 && t.d == 2 && t.c == 2);
    ck_assert_str_eq(t.names[0], "x1");
    ck_assert(t.x[0] == -1.5 && t.x[1] == 2.385 && t.x[5] == -4.125);
    ck_assert_str_eq(t.ctx_names[0], "x2=2");
    ck_assert_str_eq(t.ctx_names[1], "x2=7");
    ck_assert(t.ctx[0] == 0 && t.ctx[1] == 1 && t.ctx[2] == 1 && t.ctx[3] == 0);
    nf_table_free(&t);
    nf_import_select bad = {.drop = "x5"};
    expect_select_error(d, &bad, NF_EINVAL, "codes.npy has no column 'x5' (columns: x0, x1, x2)");
    HAS(nf_strerror_last(), "--drop 'x5': ");
}
END_TEST

/* Label columns (sequence ids): text or numbers, each distinct value numbered in order of first
 * appearance (7 and 7.0 one label), beyond a hash table's first size; alone they keep every other
 * column as data; errors for empty, non-finite and misplaced labels. */
START_TEST(test_select_labels)
{
    PUT_TEXT(p, "ids.csv", "id,time\nuser_a,0.5\nb,0.25\nuser_a,1.5\n7,2\n7.0,3\nb,4\n");
    nf_table t;
    nf_import_select lab = {.labels = "id"};
    OK(nf_import_csv_select(p, NULL, &lab, &t));
    ck_assert(t.n == 6 && t.d == 2 && t.c == 0);
    const double want[6] = {0, 1, 0, 2, 2, 1};
    for (int i = 0; i < 6; i++) ck_assert_msg(t.x[2 * i] == want[i], "row %d: label %g, expected %g", i, t.x[2 * i], want[i]);
    ck_assert(t.x[1] == 0.5 && t.x[11] == 4);
    nf_table_free(&t);
    /* many distinct labels: the dictionary grows past its first 4096 slots */
    size_t cap = 64 * 5000, at = 0;
    char *big = malloc(cap);
    at += (size_t)snprintf(big + at, cap - at, "id,v\n");
    for (int i = 0; i < 5000; i++) at += (size_t)snprintf(big + at, cap - at, "s%d,%d\ns%d,1\n", i, i, i / 2);
    char q[512];
    put(q, sizeof q, "many.csv", big, at);
    free(big);
    OK(nf_import_csv_select(q, NULL, &lab, &t));
    ck_assert_uint_eq(t.n, 10000);
    for (int i = 0; i < 5000; i++) {
        ck_assert(t.x[4 * i] == i);                                    /* s<i>, first seen on row 2i */
        ck_assert(t.x[4 * i + 2] == i / 2);                           /* s<i/2>, seen before */
    }
    nf_table_free(&t);
    /* labels alone: the other columns must be numbers, as without a selection */
    PUT_TEXT(b1, "bad1.csv", "id,time\na,0.5\na,zz\n");
    ck_assert_int_eq(nf_import_csv_select(b1, NULL, &lab, &t), NF_EDATA);
    HAS(nf_strerror_last(), "bad1.csv line 3, column 2: 'zz' is not a number");
    PUT_TEXT(b2, "bad2.csv", "id,time\na,0.5\n,0.7\n");
    ck_assert_int_eq(nf_import_csv_select(b2, NULL, &lab, &t), NF_EDATA);
    HAS(nf_strerror_last(), "bad2.csv line 3, column 1 ('id'): empty field (expected a label)");
    PUT_TEXT(b3, "bad3.csv", "id,time\na,0.5\ninf,0.7\n");
    ck_assert_int_eq(nf_import_csv_select(b3, NULL, &lab, &t), NF_EDATA);
    HAS(nf_strerror_last(), "label inf (expected text or a finite number)");
    nf_import_select notdata = {.columns = "time", .labels = "id"};
    expect_select_error(p, &notdata, NF_EINVAL, "label column 'id' is not among the data columns");
    nf_import_select both = {.context = "id", .labels = "id"};
    expect_select_error(p, &both, NF_EINVAL, "column 'id' is a label and in --context");
    nf_import_select named = {.labels = "9", .labels_flag = "--id-col"};
    expect_select_error(p, &named, NF_EINVAL, "--id-col '9': 9 is not a column of");
}
END_TEST

/* ---- validation ----------------------------------------------------------------------------- */

START_TEST(test_validate)
{
    double x[6] = {2.385, -1.5, 0.25, 7.0, -3.5, 11.125};
    OK(nf_data_validate_double("train.h5:/x", x, 3, 2, 2));
    OK(nf_data_validate_double("train.h5:/x", x, 3, 2, 0));
    ck_assert_int_eq(nf_data_validate_double("train.h5:/x", x, 0, 2, 2), NF_EDATA);
    HAS(nf_strerror_last(), "train.h5:/x: no rows (expected at least one sample)");
    ck_assert_int_eq(nf_data_validate_double("train.h5:/x", x, 2, 3, 2), NF_EFORMAT);
    HAS(nf_strerror_last(), "train.h5:/x: 3 columns, expected 2");
    x[5] = NAN;
    ck_assert_int_eq(nf_data_validate_double("train.h5:/x", x, 3, 2, 2), NF_EDATA);
    HAS(nf_strerror_last(), "train.h5:/x: row 2, column 1 is nan");
    x[2] = -INFINITY;
    ck_assert_int_eq(nf_data_validate_double("train.h5:/x", x, 3, 2, 2), NF_EDATA);
    HAS(nf_strerror_last(), "row 1, column 0 is -inf");

    nf_real r[6] = {(nf_real)2.385, (nf_real)-1.5, (nf_real)0.25, (nf_real)7.0, (nf_real)-3.5, (nf_real)1.125};
    OK(nf_data_validate("val.h5:/x", r, 2, 3, 3));
    ck_assert_int_eq(nf_data_validate("val.h5:/x", r, 2, 3, 4), NF_EFORMAT);
    HAS(nf_strerror_last(), "val.h5:/x: 3 columns, expected 4");
    ck_assert_int_eq(nf_data_validate("val.h5:/x", r, 0, 3, 0), NF_EDATA);
    HAS(nf_strerror_last(), "val.h5:/x: no rows");
    r[4] = (nf_real)INFINITY;
    ck_assert_int_eq(nf_data_validate("val.h5:/x", r, 2, 3, 3), NF_EDATA);
    HAS(nf_strerror_last(), "val.h5:/x: row 1, column 1 is inf");
    /* a table straight from CSV: nan parses, validation rejects it */
    PUT_TEXT(p, "nan.csv", "a,b\n1,2\n3,nan\n");
    nf_table t;
    OK(nf_import_csv(p, NULL, &t));
    ck_assert_int_eq(nf_data_validate_double(p, t.x, t.n, t.d, 0), NF_EDATA);
    HAS(nf_strerror_last(), "nan.csv: row 1, column 1 is nan");
    nf_table_free(&t);
}
END_TEST

static Suite *import_suite(void)
{
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_csv_header_quotes_crlf);
    tcase_add_test(tc, test_csv_delimiters);
    tcase_add_test(tc, test_csv_options);
    tcase_add_test(tc, test_csv_errors);
    tcase_add_test(tc, test_npy_integer_types);
    tcase_add_test(tc, test_npy_floats_orders_versions);
    tcase_add_test(tc, test_npy_errors);
    tcase_add_test(tc, test_import_file);
    tcase_add_test(tc, test_select_default_skips_text);
    tcase_add_test(tc, test_select_columns_context);
    tcase_add_test(tc, test_select_errors);
    tcase_add_test(tc, test_select_npy);
    tcase_add_test(tc, test_select_labels);
    tcase_add_test(tc, test_validate);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_import_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    SRunner *sr = srunner_create(import_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[768];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove(p);
    }
    if (d) closedir(d);
    remove(tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
