/* tests/check_seq_import.c - event sequences from tables (datasets/sequences_import.h): the long form
 * (id, time[, mark] rows in any order) and the wide form (one row per sequence) become the expected
 * nf-sequences files, with default and given windows, and bad rows are refused naming them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/sequences.h"
#include "datasets/sequences_import.h"

static char dir[64], path[128];

static void setup_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/nf_seqimp_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/seq.h5", dir);
}

static void cleanup_dir(void)
{
    unlink(path);
    rmdir(dir);
}

/* rows: id, time, mark - three sequences (ids 7, 3, 11) interleaved and out of time order */
static const double LONG_ROWS[][3] = {
    {7, 2.5, 1}, {3, 0.4, 0}, {7, 0.9, 2}, {11, 5.0, 0}, {3, 1.75, 1}, {7, 0.9, 0}, {3, 0.2, 2},
};

static nf_table long_table(void)
{
    nf_table t = {.n = 7, .d = 3};
    t.x = malloc(21 * sizeof *t.x);
    memcpy(t.x, LONG_ROWS, sizeof LONG_ROWS);
    return t;
}

START_TEST(long_form_groups_sorts_and_windows)
{
    setup_dir();
    nf_table t = long_table();
    nf_seq_import_summary sum;
    ck_assert_msg(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, &sum) == NF_OK, "%s",
                  nf_strerror_last());
    ck_assert_int_eq(sum.n_seq, 3);
    ck_assert_int_eq(sum.n_events, 7);
    ck_assert_int_eq(sum.num_marks, 3);
    nf_source *s;
    ck_assert_int_eq(nf_source_sequences_load(&s, path), NF_OK);
    nf_sequences q = nf_source_sequences(s);
    /* sequence 0 is id 7 (first row): times 0.9 (mark 2), 0.9 (mark 0: ties keep row order), 2.5 */
    const int64_t off[] = {0, 3, 6, 7};
    const double times[] = {0.9, 0.9, 2.5, 0.2, 0.4, 1.75, 5.0};
    const int64_t marks[] = {2, 0, 1, 2, 0, 1, 0};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(q.offsets[i], off[i]);
    for (int i = 0; i < 7; i++) {
        ck_assert_double_eq(q.times[i], times[i]);
        ck_assert_int_eq(q.marks[i], marks[i]);
    }
    ck_assert_double_eq(q.t_start[1], 0);
    ck_assert_double_eq(q.t_end[0], 2.5); /* default: each sequence's last event */
    ck_assert_double_eq(q.t_end[1], 1.75);
    nf_source_free(s);
    /* a given window, and no marks */
    ck_assert_int_eq(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, -1, 0.1, 6.25, &sum), NF_OK);
    ck_assert_int_eq(nf_source_sequences_load(&s, path), NF_OK);
    q = nf_source_sequences(s);
    ck_assert_ptr_null(q.marks);
    ck_assert_double_eq(q.t_end[2], 6.25);
    ck_assert_double_eq(q.t_start[0], 0.1);
    nf_source_free(s);
    nf_table_free(&t);
    cleanup_dir();
}
END_TEST

START_TEST(wide_form)
{
    setup_dir();
    nf_table t = {.n = 2, .d = 3};
    double x[] = {0.3, 0.8, 2.385, 0.1, 0.1, 0.7};
    t.x = x;
    nf_seq_import_summary sum;
    ck_assert_int_eq(nf_sequences_import_wide(path, "w.npy", &t, NAN, 10, &sum), NF_OK);
    nf_source *s;
    ck_assert_int_eq(nf_source_sequences_load(&s, path), NF_OK);
    nf_sequences q = nf_source_sequences(s);
    ck_assert_int_eq(s->n, 2);
    ck_assert_int_eq(q.offsets[2], 6);
    ck_assert_double_eq(q.times[2], 2.385);
    ck_assert_double_eq(q.t_end[1], 10);
    nf_source_free(s);
    cleanup_dir();
}
END_TEST

static void expect_refusal(int rc, const char *want1, const char *want2)
{
    ck_assert_int_ne(rc, NF_OK);
    const char *m = nf_strerror_last();
    ck_assert_msg(strstr(m, want1) && strstr(m, want2), "message: %s", m);
    ck_assert_int_eq(access(path, F_OK), -1); /* nothing written */
}

START_TEST(bad_rows_are_named)
{
    setup_dir();
    nf_table t = long_table();
    t.x[3 * 4 + 1] = NAN; /* row 4's time */
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, NULL), "ev.csv", "row 4");
    t.x[3 * 4 + 1] = 1.75;
    t.x[3 * 2 + 2] = 1.5; /* a fractional mark */
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, NULL), "row 2", "mark 1.5");
    t.x[3 * 2 + 2] = 2;
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, 0.5, NAN, NULL), "starts at 0.2",
                   "--t-start");
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, 3.0, NULL), "after the window end",
                   "--t-end");
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 5, 2, NAN, NAN, NULL), "column 5", "3 columns");
    nf_table w = {.n = 1, .d = 3};
    double x[] = {0.3, 0.2, 0.9};
    w.x = x;
    expect_refusal(nf_sequences_import_wide(path, "w.npy", &w, NAN, NAN, NULL), "sequence 0, event 1", "non-decreasing");
    nf_table_free(&t);
    cleanup_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seq_import");
    TCase *tc = tcase_create("seq_import");
    tcase_add_test(tc, long_form_groups_sorts_and_windows);
    tcase_add_test(tc, wide_form);
    tcase_add_test(tc, bad_rows_are_named);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
