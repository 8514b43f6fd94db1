/* tests/check_sequences.c - the "sequences" source: save/load/fetch round trips with and without
 * marks (and files written without the nf format attribute, as h5py writes them), the seeded split
 * and views (a view of a reordered source, a view reordered into arrays of its own, a wrapped
 * source whose arrays stay untouched), every validation error with the sequence and event it names,
 * interval statistics against hand-computed values, and the import of a matrix of arrival times
 * (through an NPY file and nf_import_npy).  All files are written in a temporary directory. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/h5.h"
#include "core/import.h"
#include "datasets/sequences.h"

static char tmpdir[256];

static void tpath(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", tmpdir, name); }
#define TPATH(var, name) \
    char var[512];       \
    tpath(var, sizeof var, name)

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- a small marked data set: five sequences, one empty, one on a window of length 0 ----------- */

#define NS 5
#define NE 13
static const int64_t OFF[NS + 1] = {0, 4, 4, 7, 8, 13};
static const double TIMES[NE] = {0.7, 1.35, 1.35, 4.02,         /* 0: a tie */
                                 /* 1: no events */
                                 -2.5, -1.2, 3.3,               /* 2: first event at t_start */
                                 10.0,                          /* 3: window [10, 10] */
                                 2.385, 5.1, 7.77, 9.9, 12.8};  /* 4: last event at t_end */
static const double TS[NS] = {0.25, 1.0, -2.5, 10.0, 0.0};
static const double TE[NS] = {6.5, 3.75, 9.125, 10.0, 12.8};
static const int64_t MARKS[NE] = {2, 0, 1, 2, 0, 0, 2, 1, 1, 2, 0, 0, 1};

/* b holds items idx[0..n-1] of the data set above, exactly. */
static void check_batch(const nf_batch *b, const size_t *idx, int n, int with_marks)
{
    ck_assert_int_eq(b->n, n);
    ck_assert_int_eq((int)b->offsets[0], 0);
    ck_assert_int_eq(b->num_marks, with_marks ? 3 : 0);
    if (!with_marks) ck_assert_ptr_null(b->marks);
    for (int i = 0; i < n; i++) {
        size_t r = idx[i];
        ck_assert_uint_eq(b->idx[i], r);
        ck_assert(b->t_start[i] == TS[r] && b->t_end[i] == TE[r]);
        int64_t len = OFF[r + 1] - OFF[r];
        ck_assert_int_eq((int)(b->offsets[i + 1] - b->offsets[i]), (int)len);
        for (int64_t k = 0; k < len; k++) {
            ck_assert(b->times[b->offsets[i] + k] == TIMES[OFF[r] + k]);
            if (with_marks) ck_assert_int_eq(b->marks[b->offsets[i] + k], (int)MARKS[OFF[r] + k]);
        }
    }
}

START_TEST(test_roundtrip_marked)
{
    TPATH(p, "marked.h5");
    OK(nf_sequences_save(p, NS, OFF, TIMES, TS, TE, MARKS, 3));
    ck_assert(file_exists(p));
    nf_h5 *f; /* stamped with the format, and opened by a reader that asks for it */
    OK(nf_h5_open(&f, p, NF_SEQUENCES_FORMAT, NF_SEQUENCES_VERSION));
    ck_assert_int_eq(nf_h5_format_version(f), 1);
    nf_h5_close(f);

    nf_source *s;
    OK(nf_source_sequences_load(&s, p));
    ck_assert_str_eq(s->type->kind, "sequences");
    ck_assert_uint_eq(s->n, NS);
    ck_assert_int_eq(s->num_marks, 3);
    ck_assert_int_eq(s->dim, 0);
    HAS(s->name, "marked.h5");
    nf_batch b = {0};
    size_t one[1] = {2}, all[NS] = {0, 1, 2, 3, 4}, mixed[6] = {4, 1, 0, 3, 2, 0};
    OK(nf_source_fetch(s, one, 1, &b)); /* small first: the buffers must grow for the larger batches */
    check_batch(&b, one, 1, 1);
    OK(nf_source_fetch(s, mixed, 6, &b));
    check_batch(&b, mixed, 6, 1);
    OK(nf_source_fetch(s, all, NS, &b));
    check_batch(&b, all, NS, 1);
    size_t empty_only[2] = {1, 1};
    OK(nf_source_fetch(s, empty_only, 2, &b));
    check_batch(&b, empty_only, 2, 1);
    size_t bad[2] = {0, NS};
    ck_assert_int_eq(nf_source_fetch(s, bad, 2, &b), NF_EINVAL);

    nf_sequences q = nf_source_sequences(s);
    for (int i = 0; i <= NS; i++) ck_assert(q.offsets[i] == OFF[i]);
    for (int j = 0; j < NE; j++) ck_assert(q.times[j] == TIMES[j] && q.marks[j] == MARKS[j]);

    /* the same batch, reused for an unmarked source: marks must read NULL, num_marks 0 */
    TPATH(p2, "plain.h5");
    OK(nf_sequences_save(p2, NS, OFF, TIMES, TS, TE, NULL, 0));
    nf_source *u;
    OK(nf_source_sequences_load(&u, p2));
    ck_assert_int_eq(u->num_marks, 0);
    OK(nf_source_fetch(u, mixed, 6, &b));
    check_batch(&b, mixed, 6, 0);
    ck_assert_ptr_null(nf_source_sequences(u).marks);
    OK(nf_source_fetch(s, mixed, 6, &b)); /* and back */
    check_batch(&b, mixed, 6, 1);
    nf_batch_free(&b);
    nf_source_free(u);
    nf_source_free(s);

    /* no temporary file stays behind */
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while ((e = readdir(d))) ck_assert_msg(!strstr(e->d_name, ".tmp."), "left behind: %s", e->d_name);
    closedir(d);
}
END_TEST

/* ---- files written by hand: any field missing, short, of another type, or wrong ---------------- */

typedef struct {
    const double *times;
    long n_times;          /* -1: no /times */
    const int64_t *offsets;
    long n_off;
    const double *t_start, *t_end;
    long n_ts, n_te;
    const int64_t *marks;
    long n_marks;          /* -1: no /marks */
    double num_marks;      /* NAN: no attribute */
    const char *format;    /* NULL: no format attribute, as h5py writes */
    int version;
    int as_double;         /* integers stored as float64, attribute as a double (h5py users do) */
} raw;

static raw base_raw(void)
{
    return (raw){TIMES, NE, OFF, NS + 1, TS, TE, NS, NS, MARKS, NE, 3, NF_SEQUENCES_FORMAT, 1, 0};
}

static void write_ints(nf_h5 *f, const char *ds, const int64_t *x, long n, int as_double)
{
    if (!as_double) {
        OK(nf_h5_write_int64(f, ds, x, (size_t)n, 0));
        return;
    }
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (long i = 0; i < n; i++) d[i] = (double)x[i];
    OK(nf_h5_write_double(f, ds, d, (size_t)n, 0));
    free(d);
}

static void write_raw(const char *path, const raw *r)
{
    nf_h5 *f;
    OK(nf_h5_create(&f, path, r->format, r->version));
    if (r->n_times >= 0) OK(nf_h5_write_double(f, "/times", r->times, (size_t)r->n_times, 0));
    if (r->n_off >= 0) write_ints(f, "/offsets", r->offsets, r->n_off, r->as_double);
    if (r->n_ts >= 0) OK(nf_h5_write_double(f, "/t_start", r->t_start, (size_t)r->n_ts, 0));
    if (r->n_te >= 0) OK(nf_h5_write_double(f, "/t_end", r->t_end, (size_t)r->n_te, 0));
    if (r->n_marks >= 0) write_ints(f, "/marks", r->marks, r->n_marks, r->as_double);
    if (!isnan(r->num_marks)) {
        if (r->as_double) OK(nf_h5_attr_set_double(f, "/", "num_marks", r->num_marks));
        else OK(nf_h5_attr_set_int64(f, "/", "num_marks", (int64_t)r->num_marks));
    }
    OK(nf_h5_commit(f));
}

START_TEST(test_h5py_style_file)
{
    /* no format attribute, offsets and marks stored as float64, num_marks a double: all accepted */
    TPATH(p, "h5py.h5");
    raw r = base_raw();
    r.format = NULL;
    r.as_double = 1;
    write_raw(p, &r);
    nf_source *s;
    OK(nf_source_sequences_load(&s, p));
    ck_assert_int_eq(s->num_marks, 3);
    nf_batch b = {0};
    size_t idx[4] = {3, 4, 0, 2};
    OK(nf_source_fetch(s, idx, 4, &b));
    check_batch(&b, idx, 4, 1);
    nf_batch_free(&b);
    nf_source_free(s);
}
END_TEST

/* Loading path fails with code and a message holding every part (NULL-terminated list). */
static void expect_load(const char *path, int code, const char *const *parts)
{
    nf_source *s = (nf_source *)1;
    int rc = nf_source_sequences_load(&s, path);
    ck_assert_msg(rc == code, "%s: code %d, expected %d (%s)", path, rc, code, nf_strerror_last());
    ck_assert_ptr_null(s);
    for (int i = 0; parts[i]; i++) HAS(nf_strerror_last(), parts[i]);
}
#define EXPECT_LOAD(path, code, ...) expect_load(path, code, (const char *const[]){__VA_ARGS__, NULL})

/* A value error: the file fails to load, nf_sequences_save refuses the same arrays (writing
 * nothing) and nf_source_sequences_wrap too, each naming the dataset (ds), the position and what. */
static void expect_value_error(const char *name, const raw *r, const char *ds, const char *pos, const char *what)
{
    TPATH(p, name);
    write_raw(p, r);
    char lab[600];
    snprintf(lab, sizeof lab, "%s:/%s", p, ds);
    EXPECT_LOAD(p, NF_EDATA, lab, pos, what);

    TPATH(q, "never_written.h5");
    int rc = nf_sequences_save(q, (size_t)r->n_ts, r->offsets, r->times, r->t_start, r->t_end,
                               r->n_marks >= 0 ? r->marks : NULL, r->n_marks >= 0 ? (int)r->num_marks : 0);
    ck_assert_msg(rc == NF_EDATA, "save of %s: code %d (%s)", name, rc, nf_strerror_last());
    snprintf(lab, sizeof lab, "%s:/%s", q, ds);
    HAS(nf_strerror_last(), lab);
    HAS(nf_strerror_last(), pos);
    HAS(nf_strerror_last(), what);
    ck_assert(!file_exists(q));

    nf_source *s = (nf_source *)1;
    rc = nf_source_sequences_wrap(&s, (size_t)r->n_ts, r->offsets, r->times, r->t_start, r->t_end,
                                  r->n_marks >= 0 ? r->marks : NULL, r->n_marks >= 0 ? (int)r->num_marks : 0);
    ck_assert_msg(rc == NF_EDATA, "wrap of %s: code %d (%s)", name, rc, nf_strerror_last());
    ck_assert_ptr_null(s);
    snprintf(lab, sizeof lab, "%s array", ds);
    HAS(nf_strerror_last(), lab);
    HAS(nf_strerror_last(), pos);
    HAS(nf_strerror_last(), what);
}

START_TEST(test_bad_times)
{
    double t[NE];
    raw r = base_raw();
    r.times = t;

    memcpy(t, TIMES, sizeof t); /* sequence 4, event 2: 4.9 after 5.1 */
    t[10] = 4.9;
    expect_value_error("decreasing.h5", &r, "times", "sequence 4, event 2 (entry 10)",
                       "time 4.9 is before the previous event's 5.1 (expected non-decreasing times)");
    memcpy(t, TIMES, sizeof t); /* sequence 2, event 0: before t_start = -2.5 */
    t[4] = -2.625;
    expect_value_error("early.h5", &r, "times", "sequence 2, event 0 (entry 4)",
                       "time -2.625 is before the window's start t_start = -2.5");
    memcpy(t, TIMES, sizeof t); /* sequence 0, event 3: after t_end = 6.5 */
    t[3] = 6.75;
    expect_value_error("late.h5", &r, "times", "sequence 0, event 3 (entry 3)",
                       "time 6.75 is after the window's end t_end = 6.5");
    memcpy(t, TIMES, sizeof t); /* the window [10, 10] holds 10 only */
    t[7] = 10.000000000000002;
    expect_value_error("late2.h5", &r, "times", "sequence 3, event 0 (entry 7)",
                       "time 10.000000000000002 is after the window's end t_end = 10");
    memcpy(t, TIMES, sizeof t);
    t[12] = NAN;
    expect_value_error("nan.h5", &r, "times", "sequence 4, event 4 (entry 12)", "time nan (expected a finite number)");
    memcpy(t, TIMES, sizeof t);
    t[5] = -INFINITY;
    expect_value_error("inf.h5", &r, "times", "sequence 2, event 1 (entry 5)", "time -inf (expected a finite number)");
}
END_TEST

START_TEST(test_bad_windows)
{
    double ts[NS], te[NS];
    raw r = base_raw();
    r.t_start = ts;
    r.t_end = te;
    memcpy(ts, TS, sizeof ts), memcpy(te, TE, sizeof te);
    te[1] = 0.5;
    expect_value_error("window.h5", &r, "t_end", "sequence 1:", "the window [1, 0.5] ends before it starts "
                                                               "(expected t_start <= t_end)");
    memcpy(ts, TS, sizeof ts), memcpy(te, TE, sizeof te);
    ts[3] = NAN;
    expect_value_error("nan_start.h5", &r, "t_start", "sequence 3:", "t_start = nan (expected a finite number)");
    memcpy(ts, TS, sizeof ts), memcpy(te, TE, sizeof te);
    te[4] = INFINITY;
    expect_value_error("inf_end.h5", &r, "t_end", "sequence 4:", "t_end = inf (expected a finite number)");
}
END_TEST

START_TEST(test_bad_offsets)
{
    int64_t o[NS + 1];
    raw r = base_raw();
    r.offsets = o;
    memcpy(o, OFF, sizeof o);
    o[0] = 1;
    expect_value_error("off0.h5", &r, "offsets", "offsets[0] = 1", "expected 0: sequence 0 starts at the first event");
    memcpy(o, OFF, sizeof o);
    o[3] = 3; /* sequence 2 would end at 3, before its start at 4 */
    expect_value_error("offdown.h5", &r, "offsets", "sequence 2: offsets[3] = 3 is below offsets[2] = 4",
                       "expected non-decreasing offsets");
    memcpy(o, OFF, sizeof o);
    o[4] = -5;
    expect_value_error("offneg.h5", &r, "offsets", "sequence 3: offsets[4] = -5 is below offsets[3] = 7",
                       "expected non-decreasing offsets");

    /* offsets that end before or after the times: a shape problem of the file */
    TPATH(p, "offend.h5");
    memcpy(o, OFF, sizeof o);
    o[5] = 12;
    write_raw(p, &r);
    char lab[600];
    snprintf(lab, sizeof lab, "%s:/offsets", p);
    EXPECT_LOAD(p, NF_EFORMAT, lab, "offsets[5] = 12 ends the last sequence", "/times has 13 events");
}
END_TEST

START_TEST(test_bad_marks)
{
    int64_t m[NE];
    raw r = base_raw();
    r.marks = m;
    memcpy(m, MARKS, sizeof m);
    m[6] = 3;
    expect_value_error("mark3.h5", &r, "marks", "sequence 2, event 2 (entry 6)",
                       "mark 3 (expected 0 <= mark < num_marks = 3)");
    memcpy(m, MARKS, sizeof m);
    m[1] = -1;
    expect_value_error("markneg.h5", &r, "marks", "sequence 0, event 1 (entry 1)",
                       "mark -1 (expected 0 <= mark < num_marks = 3)");

    TPATH(p1, "no_num_marks.h5");
    r = base_raw();
    r.num_marks = NAN;
    write_raw(p1, &r);
    EXPECT_LOAD(p1, NF_EFORMAT, p1, "/marks without the root attribute num_marks");
    TPATH(p2, "zero_num_marks.h5");
    r.num_marks = 0;
    write_raw(p2, &r);
    EXPECT_LOAD(p2, NF_EFORMAT, p2, "num_marks = 0 (expected the number of mark types");
    TPATH(p3, "num_marks_only.h5");
    r = base_raw();
    r.n_marks = -1;
    write_raw(p3, &r);
    EXPECT_LOAD(p3, NF_EFORMAT, p3, "num_marks = 3 but no dataset /marks");

    /* save and wrap: marks and num_marks must agree */
    TPATH(q, "never_written.h5");
    nf_source *s;
    ck_assert_int_eq(nf_sequences_save(q, NS, OFF, TIMES, TS, TE, MARKS, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "num_marks = 0");
    ck_assert_int_eq(nf_sequences_save(q, NS, OFF, TIMES, TS, TE, NULL, 4), NF_EINVAL);
    HAS(nf_strerror_last(), "num_marks = 4 without marks");
    ck_assert_int_eq(nf_source_sequences_wrap(&s, NS, OFF, TIMES, TS, TE, MARKS, -2), NF_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert(!file_exists(q));
}
END_TEST

START_TEST(test_truncated_and_missing)
{
    char lab[600];
    raw r;
    TPATH(p1, "short_times.h5");
    r = base_raw();
    r.n_times = NE - 1;
    r.n_marks = NE - 1;
    write_raw(p1, &r);
    snprintf(lab, sizeof lab, "%s:/times has 12 events", p1);
    EXPECT_LOAD(p1, NF_EFORMAT, "offsets[5] = 13 ends the last sequence", lab, "is an array truncated?");
    TPATH(p2, "short_marks.h5");
    r = base_raw();
    r.n_marks = NE - 2;
    write_raw(p2, &r);
    EXPECT_LOAD(p2, NF_EFORMAT, p2, "/marks has 11 entries but /times has 13 (expected one mark per event");
    TPATH(p3, "short_end.h5");
    r = base_raw();
    r.n_te = NS - 1;
    write_raw(p3, &r);
    EXPECT_LOAD(p3, NF_EFORMAT, p3, "/t_end has 4 entries but /t_start has 5");
    TPATH(p4, "short_offsets.h5");
    r = base_raw();
    r.n_off = NS;
    write_raw(p4, &r);
    EXPECT_LOAD(p4, NF_EFORMAT, p4, "/offsets has 5 entries for 5 sequences (expected n_seq + 1 = 6");
    TPATH(p5, "no_t_end.h5");
    r = base_raw();
    r.n_te = -1;
    write_raw(p5, &r);
    EXPECT_LOAD(p5, NF_EFORMAT, p5, "no dataset /t_end");

    /* a 2-D /times */
    TPATH(p6, "times2d.h5");
    nf_h5 *f;
    OK(nf_h5_create(&f, p6, NF_SEQUENCES_FORMAT, 1));
    OK(nf_h5_write_double(f, "/times", TIMES, 4, 3));
    OK(nf_h5_write_int64(f, "/offsets", OFF, NS + 1, 0));
    OK(nf_h5_write_double(f, "/t_start", TS, NS, 0));
    OK(nf_h5_write_double(f, "/t_end", TE, NS, 0));
    OK(nf_h5_commit(f));
    EXPECT_LOAD(p6, NF_EFORMAT, p6, "/times is a 4 x 3 array (expected a 1-D array)");
}
END_TEST

START_TEST(test_empty_and_foreign)
{
    /* an HDF5 file with nothing in it */
    TPATH(p1, "nothing.h5");
    nf_h5 *f;
    OK(nf_h5_create(&f, p1, NULL, 0));
    OK(nf_h5_commit(f));
    EXPECT_LOAD(p1, NF_EFORMAT, p1, "no dataset /times", "/offsets, /t_start and /t_end");
    /* datasets, but no sequences */
    TPATH(p2, "no_sequences.h5");
    raw r = base_raw();
    r.n_times = r.n_marks = 0;
    r.n_off = 1;
    r.n_ts = r.n_te = 0;
    write_raw(p2, &r);
    EXPECT_LOAD(p2, NF_EDATA, p2, "no sequences (expected at least one)");
    TPATH(q, "never_written.h5");
    ck_assert_int_eq(nf_sequences_save(q, 0, OFF, TIMES, TS, TE, NULL, 0), NF_EDATA);
    HAS(nf_strerror_last(), "no sequences");
    ck_assert(!file_exists(q));
    /* not HDF5, missing */
    TPATH(p3, "zero_bytes.h5");
    FILE *fp = fopen(p3, "wb");
    fclose(fp);
    EXPECT_LOAD(p3, NF_EFORMAT, p3, "not an HDF5 file");
    TPATH(p4, "missing.h5");
    EXPECT_LOAD(p4, NF_EIO, p4, "cannot open");
    /* another nf format, a newer version */
    TPATH(p5, "model.h5");
    r = base_raw();
    r.format = "nf-data";
    write_raw(p5, &r);
    EXPECT_LOAD(p5, NF_EFORMAT, p5, "format 'nf-data' but expected 'nf-sequences'");
    TPATH(p6, "v2.h5");
    r = base_raw();
    r.version = 2;
    write_raw(p6, &r);
    EXPECT_LOAD(p6, NF_EFORMAT, p6, "format version 2 is newer");
}
END_TEST

/* ---- split and views --------------------------------------------------------------------------- */

/* Ten sequences told apart by t_start = 100 i + 0.5, with i % 4 events (some empty) and marks. */
#define SN 10
typedef struct {
    int64_t off[SN + 1];
    double times[64], ts[SN], te[SN];
    int64_t marks[64];
} split_data;

static void make_split_data(split_data *d)
{
    memset(d, 0, sizeof *d);
    d->off[0] = 0;
    for (int i = 0; i < SN; i++) {
        d->ts[i] = 100.0 * i + 0.5;
        d->te[i] = d->ts[i] + 4.25;
        int len = i % 4;
        for (int k = 0; k < len; k++) {
            d->times[d->off[i] + k] = d->ts[i] + 0.37 * (k + 1);
            d->marks[d->off[i] + k] = (i + k) % 3;
        }
        d->off[i + 1] = d->off[i] + len;
    }
}

/* Fetch every item of s; item j must be original sequence ids[j] of d (found from its t_start). */
static void identify(const nf_source *s, const split_data *d, int *ids)
{
    nf_batch b = {0};
    size_t idx[SN];
    for (size_t j = 0; j < s->n; j++) idx[j] = j;
    OK(nf_source_fetch(s, idx, (int)s->n, &b));
    ck_assert_int_eq(b.num_marks, 3);
    for (size_t j = 0; j < s->n; j++) {
        int i = (int)floor(b.t_start[j] / 100.0);
        ck_assert(i >= 0 && i < SN && b.t_start[j] == d->ts[i] && b.t_end[j] == d->te[i]);
        ck_assert_int_eq((int)(b.offsets[j + 1] - b.offsets[j]), i % 4);
        for (int k = 0; k < i % 4; k++) {
            ck_assert(b.times[b.offsets[j] + k] == d->times[d->off[i] + k]);
            ck_assert_int_eq(b.marks[b.offsets[j] + k], (int)d->marks[d->off[i] + k]);
        }
        ids[j] = i;
    }
    nf_batch_free(&b);
}

START_TEST(test_split_views)
{
    split_data d;
    make_split_data(&d);
    TPATH(p, "split.h5");
    OK(nf_sequences_save(p, SN, d.off, d.times, d.ts, d.te, d.marks, 3));
    nf_source *all, *val, *train;
    OK(nf_source_sequences_load(&all, p));
    OK(nf_source_split(all, 0.3, 7, &val, &train));
    ck_assert_uint_eq(val->n, 3);
    ck_assert_uint_eq(train->n, 7);
    ck_assert_str_eq(val->type->kind, "sequences");
    ck_assert_int_eq(val->num_marks, 3);

    int ids_all[SN], ids_val[SN], ids_train[SN], seen[SN] = {0}, moved = 0;
    identify(all, &d, ids_all);
    identify(val, &d, ids_val);
    identify(train, &d, ids_train);
    for (int j = 0; j < 3; j++) ck_assert_int_eq(ids_val[j], ids_all[j]);
    for (int j = 0; j < 7; j++) ck_assert_int_eq(ids_train[j], ids_all[3 + j]);
    for (int j = 0; j < SN; j++) seen[ids_all[j]]++, moved += ids_all[j] != j;
    for (int i = 0; i < SN; i++) ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, 0);
    /* a view's offsets index its owner's flat arrays */
    nf_sequences qv = nf_source_sequences(train);
    ck_assert(qv.offsets == nf_source_sequences(all).offsets + 3);

    /* a view saved rebases its offsets: the file holds exactly train's sequences */
    TPATH(pt, "train.h5");
    OK(nf_source_sequences_save(pt, train));
    nf_source *back;
    OK(nf_source_sequences_load(&back, pt));
    int ids_back[SN];
    ck_assert_uint_eq(back->n, 7);
    identify(back, &d, ids_back);
    for (int j = 0; j < 7; j++) ck_assert_int_eq(ids_back[j], ids_train[j]);
    ck_assert(nf_source_sequences(back).offsets[0] == 0);
    nf_source_free(back);

    /* splitting a view reorders it into arrays of its own: its parent keeps its order */
    nf_source *a, *rest;
    OK(nf_source_split(train, 0.5, 3, &a, &rest));
    ck_assert_uint_eq(a->n, 3);
    ck_assert_uint_eq(rest->n, 4);
    int ids_after[SN], ids_train2[SN], ids_a[SN], ids_rest[SN], in_train[SN] = {0};
    identify(all, &d, ids_after);
    for (int j = 0; j < SN; j++) ck_assert_int_eq(ids_after[j], ids_all[j]);
    identify(train, &d, ids_train2);
    identify(a, &d, ids_a);
    identify(rest, &d, ids_rest);
    for (int j = 0; j < 7; j++) in_train[ids_train[j]]++;
    for (int j = 0; j < 3; j++) {
        ck_assert_int_eq(ids_a[j], ids_train2[j]);
        in_train[ids_a[j]]--;
    }
    for (int j = 0; j < 4; j++) {
        ck_assert_int_eq(ids_rest[j], ids_train2[3 + j]);
        in_train[ids_rest[j]]--;
    }
    for (int i = 0; i < SN; i++) ck_assert_int_eq(in_train[i], 0);
    nf_source_free(a);
    nf_source_free(rest);

    /* a wrapped source splits the same way (same n, same seed) and leaves the caller's arrays alone */
    split_data copy = d;
    nf_source *w, *wval, *wtrain;
    OK(nf_source_sequences_wrap(&w, SN, d.off, d.times, d.ts, d.te, d.marks, 3));
    OK(nf_source_split(w, 0.3, 7, &wval, &wtrain));
    ck_assert(memcmp(&copy, &d, sizeof d) == 0);
    int ids_w[SN];
    identify(w, &d, ids_w);
    for (int j = 0; j < SN; j++) ck_assert_int_eq(ids_w[j], ids_all[j]);
    identify(wtrain, &d, ids_w);
    for (int j = 0; j < 7; j++) ck_assert_int_eq(ids_w[j], ids_all[3 + j]);
    nf_source_free(wval);
    nf_source_free(wtrain);
    nf_source_free(w);

    nf_source_free(val);
    nf_source_free(train);
    nf_source_free(all);
}
END_TEST

/* ---- statistics -------------------------------------------------------------------------------- */

START_TEST(test_stats)
{
    /* intervals: 1.25, 2.375 | 0.625, 0 (a tie), 1.475 | none */
    const int64_t off[4] = {0, 2, 5, 5};
    const double t[5] = {1.5, 3.875, 2.625, 2.625, 4.1}, ts[3] = {0.25, 2.0, 5.0}, te[3] = {4.0, 4.5, 6.0};
    nf_source *s;
    OK(nf_source_sequences_wrap(&s, 3, off, t, ts, te, NULL, 0));
    size_t n;
    double mean, mlog, sdlog;
    OK(nf_sequences_stats(s, &n, &mean, &mlog, &sdlog));
    ck_assert_uint_eq(n, 5);
    ck_assert_double_eq_tol(mean, (1.25 + 2.375 + 0.625 + 0 + 1.475) / 5, 1e-14);
    const double l[4] = {log(1.25), log(2.375), log(0.625), log(1.475)};
    double ml = (l[0] + l[1] + l[2] + l[3]) / 4, ss = 0;
    for (int i = 0; i < 4; i++) ss += (l[i] - ml) * (l[i] - ml);
    ck_assert_double_eq_tol(mlog, ml, 1e-14);
    ck_assert_double_eq_tol(sdlog, sqrt(ss / 3), 1e-14);
    OK(nf_sequences_stats(s, NULL, NULL, NULL, &sdlog)); /* outputs may be NULL */

    /* a view of sequences 1 and 2: intervals 0.625, 0, 1.475 */
    nf_source *v;
    OK(s->type->range(s, 1, 2, &v));
    OK(nf_sequences_stats(v, &n, &mean, &mlog, &sdlog));
    ck_assert_uint_eq(n, 3);
    ck_assert_double_eq_tol(mean, 2.1 / 3, 1e-14);
    ck_assert_double_eq_tol(mlog, (log(0.625) + log(1.475)) / 2, 1e-14);
    ck_assert_double_eq_tol(sdlog, fabs(log(0.625) - log(1.475)) / sqrt(2.0), 1e-14);
    nf_source_free(v);

    /* no events; only zero intervals; another kind */
    OK(s->type->range(s, 2, 1, &v));
    ck_assert_int_eq(nf_sequences_stats(v, &n, &mean, &mlog, &sdlog), NF_EDATA);
    HAS(nf_strerror_last(), "no events");
    nf_source_free(v);
    const int64_t off0[2] = {0, 2};
    const double t0[2] = {3.5, 3.5}, ts0[1] = {3.5}, te0[1] = {8.0};
    OK(nf_source_sequences_wrap(&v, 1, off0, t0, ts0, te0, NULL, 0));
    ck_assert_int_eq(nf_sequences_stats(v, &n, &mean, &mlog, &sdlog), NF_EDATA);
    HAS(nf_strerror_last(), "all 2 intervals are 0");
    nf_source_free(v);
    const nf_real x[4] = {1.5f, 2.5f, 3.5f, 4.5f};
    OK(nf_source_rows_wrap(&v, x, NULL, 2, 2, 0));
    ck_assert_int_eq(nf_sequences_stats(v, &n, &mean, &mlog, &sdlog), NF_EINVAL);
    ck_assert_ptr_null(nf_source_sequences(v).offsets);
    ck_assert_int_eq(nf_source_sequences_save("never.h5", v), NF_EINVAL);
    nf_source_free(v);
    nf_source_free(s);
}
END_TEST

/* ---- a matrix of arrival times ----------------------------------------------------------------- */

static const double MAT[3 * 4] = {0.31, 1.2, 2.385, 4.0,  /* rows increasing, as in the TPP sets */
                                  0.05, 0.05, 0.9, 7.25,  /* a tie */
                                  1.75, 2.5, 3.125, 3.5};

/* A float64 (rows, cols) NPY file, version 1.0, as numpy.save writes it. */
static void write_npy(const char *path, const double *x, int rows, int cols)
{
    char dict[128];
    int hl = snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    size_t total = 10 + (size_t)hl + 1, pad = (64 - total % 64) % 64, hlen = (size_t)hl + pad + 1;
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 255),
                             (unsigned char)(hlen >> 8)};
    fwrite(pre, 1, 10, fp);
    fwrite(dict, 1, (size_t)hl, fp);
    for (size_t i = 0; i < pad; i++) fputc(' ', fp);
    fputc('\n', fp);
    fwrite(x, sizeof *x, (size_t)rows * cols, fp); /* little-endian hosts only, as '<f8' says */
    fclose(fp);
}

START_TEST(test_from_matrix)
{
    TPATH(pn, "arrivals.npy");
    write_npy(pn, MAT, 3, 4);
    nf_table tab;
    OK(nf_import_npy(pn, &tab));
    nf_source *s;
    OK(nf_sequences_from_matrix(&s, pn, tab.x, tab.n, tab.d));
    nf_table_free(&tab);
    ck_assert_uint_eq(s->n, 3);
    ck_assert_int_eq(s->num_marks, 0);
    nf_sequences q = nf_source_sequences(s);
    for (int i = 0; i < 3; i++) {
        ck_assert(q.offsets[i] == 4 * i);
        ck_assert(q.t_start[i] == 0.0);
        ck_assert(q.t_end[i] == MAT[4 * i + 3]); /* the window closes at the row's last time */
    }
    ck_assert(q.offsets[3] == 12);
    nf_batch b = {0};
    size_t idx[2] = {2, 1};
    OK(nf_source_fetch(s, idx, 2, &b));
    ck_assert_ptr_null(b.marks);
    for (int k = 0; k < 4; k++) ck_assert(b.times[k] == MAT[8 + k] && b.times[4 + k] == MAT[4 + k]);
    ck_assert(b.offsets[2] == 8);
    nf_batch_free(&b);
    size_t n;
    double mean;
    OK(nf_sequences_stats(s, &n, &mean, NULL, NULL));
    ck_assert_uint_eq(n, 12);
    ck_assert_double_eq_tol(mean, (4.0 + 7.25 + 3.5) / 12, 1e-14); /* intervals telescope to the last times */

    /* importer, then a file: the same sequences come back */
    TPATH(ph, "arrivals.h5");
    OK(nf_source_sequences_save(ph, s));
    nf_source *back;
    OK(nf_source_sequences_load(&back, ph));
    nf_sequences r = nf_source_sequences(back);
    for (int j = 0; j < 12; j++) ck_assert(r.times[j] == MAT[j]);
    for (int i = 0; i < 3; i++) ck_assert(r.t_end[i] == MAT[4 * i + 3] && r.t_start[i] == 0.0);
    nf_source_free(back);
    nf_source_free(s);

    double m[12];
    memcpy(m, MAT, sizeof m);
    m[9] = 1.5; /* row 2 goes back */
    ck_assert_int_eq(nf_sequences_from_matrix(&s, "hawkes.npy", m, 3, 4), NF_EDATA);
    ck_assert_ptr_null(s);
    HAS(nf_strerror_last(), "hawkes.npy: sequence 2, event 1: time 1.5 is before the previous event's 1.75");
    memcpy(m, MAT, sizeof m);
    m[4] = -0.5; /* before the window's start 0 */
    ck_assert_int_eq(nf_sequences_from_matrix(&s, "hawkes.npy", m, 3, 4), NF_EDATA);
    HAS(nf_strerror_last(), "sequence 1, event 0: time -0.5 is before the window's start t_start = 0");
    memcpy(m, MAT, sizeof m);
    m[6] = NAN;
    ck_assert_int_eq(nf_sequences_from_matrix(&s, NULL, m, 3, 4), NF_EDATA);
    HAS(nf_strerror_last(), "matrix: sequence 1, event 2 (row 1, column 2): time nan");
    ck_assert_int_eq(nf_sequences_from_matrix(&s, "e.npy", m, 0, 4), NF_EDATA);
    HAS(nf_strerror_last(), "expected at least one sequence");
}
END_TEST

static Suite *sequences_suite(void)
{
    Suite *s = suite_create("sequences");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_roundtrip_marked);
    tcase_add_test(tc, test_h5py_style_file);
    tcase_add_test(tc, test_bad_times);
    tcase_add_test(tc, test_bad_windows);
    tcase_add_test(tc, test_bad_offsets);
    tcase_add_test(tc, test_bad_marks);
    tcase_add_test(tc, test_truncated_and_missing);
    tcase_add_test(tc, test_empty_and_foreign);
    tcase_add_test(tc, test_split_views);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_from_matrix);
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
        remove(p);
    }
    closedir(d);
    remove(dir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_sequences_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    SRunner *sr = srunner_create(sequences_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_tree(tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
