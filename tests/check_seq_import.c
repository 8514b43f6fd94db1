/* tests/check_seq_import.c - event sequences from tables (datasets/sequences_import.h): the long form
 * (id, time[, mark] rows in any order) and the wide form (one row per sequence) become the expected
 * nf-sequences files, with default and given windows, and bad rows are refused naming them.  With a
 * true process the files carry each sequence's log-likelihood (checked against the closed form of a
 * Poisson process, independent of datasets/tpp_process), and that truth follows the sequences
 * through loading, reorder (the seeded split), views, saves and nf_sequences_split_save; a truth
 * of the wrong length, a NaN or a foreign convention is refused with one message. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/sequences.h"
#include "core/h5.h"
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
    ck_assert_msg(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, NULL, &sum) == NF_OK, "%s",
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
    ck_assert_int_eq(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, -1, 0.1, 6.25, NULL, &sum), NF_OK);
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
    ck_assert_int_eq(nf_sequences_import_wide(path, "w.npy", &t, NAN, 10, NULL, &sum), NF_OK);
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
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, NULL, NULL), "ev.csv", "row 4");
    t.x[3 * 4 + 1] = 1.75;
    t.x[3 * 2 + 2] = 1.5; /* a fractional mark */
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, NULL, NULL), "row 2", "mark 1.5");
    t.x[3 * 2 + 2] = 2;
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, 0.5, NAN, NULL, NULL), "starts at 0.2",
                   "--t-start");
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, 3.0, NULL, NULL), "after the window end",
                   "--t-end");
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 5, 2, NAN, NAN, NULL, NULL), "column 5",
                   "3 columns");
    nf_table w = {.n = 1, .d = 3};
    double x[] = {0.3, 0.2, 0.9};
    w.x = x;
    expect_refusal(nf_sequences_import_wide(path, "w.npy", &w, NAN, NAN, NULL, NULL), "sequence 0, event 1",
                   "non-decreasing");
    nf_table_free(&t);
    cleanup_dir();
}
END_TEST


/* ---- the truth ------------------------------------------------------------------------------- */

#define TR_NS 6
#define TR_LEN 4
#define TR_RATE 1.7
#define TR_END 9.5
static const double TR_ROWS[TR_NS * TR_LEN] = {
    0.31, 1.2, 2.385, 4.0,  0.05, 0.6, 0.61, 8.9,  1.5, 2.5, 3.5, 4.5,
    0.7, 0.71, 3.3, 9.1,    2.2, 5.0, 7.25, 7.5,   0.9, 1.95, 6.0, 6.1,
};

/* A Poisson process of rate r on [t0, t1]: log L = n log r - r (t1 - t0); without the survival term
 * the window closes at the last event, t1 = t_n.  (Independent of datasets/tpp_process.) */
static double pois_ll(size_t n, double t0, double t1) { return (double)n * log(TR_RATE) - TR_RATE * (t1 - t0); }

/* Every item of v carries the truth of its own events. */
static void check_truth(const nf_source *v)
{
    nf_sequences q = nf_source_sequences(v);
    nf_sequences_truth tr = nf_source_sequences_truth(v);
    ck_assert_ptr_nonnull(tr.log_lik);
    ck_assert_ptr_nonnull(tr.log_lik_no_survival);
    ck_assert_str_eq(tr.process, "poisson");
    ck_assert_str_eq(tr.options, "rate=1.7");
    for (size_t i = 0; i < v->n; i++) {
        size_t n = (size_t)(q.offsets[i + 1] - q.offsets[i]);
        double last = q.times[q.offsets[i + 1] - 1];
        ck_assert_double_eq_tol(tr.log_lik[i], pois_ll(n, q.t_start[i], q.t_end[i]), 1e-12);
        ck_assert_double_eq_tol(tr.log_lik_no_survival[i], pois_ll(n, q.t_start[i], last), 1e-12);
        ck_assert_double_eq(q.t_end[i], TR_END);
    }
}

START_TEST(truth_follows_the_sequences)
{
    setup_dir();
    /* long form (id, time): sequence i holds the first 1 + (i + 1) % TR_LEN events of row i, so every
     * sequence has its own count and last event, and its own truth in both conventions */
    double x[TR_NS * TR_LEN * 2];
    size_t rows = 0;
    double want = 0, want_ns = 0;
    for (int i = 0; i < TR_NS; i++) {
        int len = 1 + (i + 1) % TR_LEN;
        for (int k = 0; k < len; k++, rows++) x[2 * rows] = 100 + i, x[2 * rows + 1] = TR_ROWS[i * TR_LEN + k];
        want += pois_ll((size_t)len, 0, TR_END);
        want_ns += pois_ll((size_t)len, 0, TR_ROWS[i * TR_LEN + len - 1]);
    }
    nf_table t = {.n = rows, .d = 2, .x = x};
    nf_tpp_process *p;
    ck_assert_int_eq(nf_tpp_process_create(&p, "poisson", "rate=1.7"), NF_OK);
    nf_seq_import_summary sum;
    ck_assert_msg(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, -1, NAN, TR_END, p, &sum) == NF_OK, "%s",
                  nf_strerror_last());
    ck_assert(sum.has_truth);
    ck_assert_double_eq_tol(sum.true_log_lik, want, 1e-11);
    ck_assert_double_eq_tol(sum.true_log_lik_no_survival, want_ns, 1e-11);
    nf_source *s, *a, *b, *r;
    ck_assert_int_eq(nf_source_sequences_load(&s, path), NF_OK);
    check_truth(s);
    ck_assert_str_eq(nf_source_sequences_truth(s).generator, "import");
    /* the seeded split reorders s in place and views its two parts */
    nf_sequences q0 = nf_source_sequences(s);
    double first = q0.times[0];
    ck_assert_int_eq(nf_source_split(s, 0.5, 11, &a, &b), NF_OK);
    check_truth(s);
    check_truth(a);
    check_truth(b);
    int moved = nf_source_sequences(s).times[0] != first;
    /* a view saved (offsets rebased) and loaded keeps its items' truth */
    char p2[160];
    snprintf(p2, sizeof p2, "%s/view.h5", dir);
    ck_assert_int_eq(nf_source_sequences_save(p2, b), NF_OK);
    ck_assert_int_eq(nf_source_sequences_load(&r, p2), NF_OK);
    ck_assert_int_eq(r->n, b->n);
    check_truth(r);
    nf_source_free(r);
    unlink(p2);
    /* whole-sequence split into files */
    const size_t idx[TR_NS] = {5, 0, 3, 1, 4, 2}, count[3] = {3, 2, 1};
    char pp[3][160];
    const char *paths[3] = {pp[0], pp[1], pp[2]}, *parts[3] = {"train", "val", "test"};
    for (int k = 0; k < 3; k++) snprintf(pp[k], sizeof pp[k], "%s/part%d.h5", dir, k);
    ck_assert_int_eq(nf_sequences_split_save(s, idx, 3, count, paths, parts, "all.h5", 4), NF_OK);
    nf_sequences qs = nf_source_sequences(s);
    for (int k = 0, at = 0; k < 3; k++) {
        ck_assert_int_eq(nf_source_sequences_load(&r, pp[k]), NF_OK);
        ck_assert_int_eq(r->n, count[k]);
        check_truth(r);
        nf_sequences q = nf_source_sequences(r);
        for (size_t i = 0; i < r->n; i++, at++) /* item i of part k is item idx[at] of s */
            ck_assert_double_eq(q.times[q.offsets[i]], qs.times[qs.offsets[idx[at]]]);
        nf_source_free(r);
        unlink(pp[k]);
    }
    nf_source_free(a);
    nf_source_free(b);
    nf_source_free(s);
    nf_tpp_process_free(p);
    ck_assert_msg(moved, "the split's permutation left the first sequence in place (pick another seed)");
    cleanup_dir();
}
END_TEST

/* A file of 2 sequences with a /log_lik_true of n_ll entries (one NaN if nan), an optional
 * convention attribute and optionally only /log_lik_true_no_survival. */
static void write_truth_file(size_t n_ll, int nan, const char *conv, int only_ns)
{
    const double times[] = {0.5, 1.25, 0.75}, ts[] = {0, 0}, te[] = {2, 3}, ll[] = {-1.5, -2.25, -3.0};
    const int64_t off[] = {0, 2, 3};
    double l[3];
    memcpy(l, ll, sizeof l);
    if (nan) l[1] = NAN;
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_create(&f, path, NF_SEQUENCES_FORMAT, NF_SEQUENCES_VERSION), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/times", times, 3, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_int64(f, "/offsets", off, 3, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/t_start", ts, 2, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/t_end", te, 2, 0), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, only_ns ? "/log_lik_true_no_survival" : "/log_lik_true", l, n_ll, 0), NF_OK);
    if (conv) ck_assert_int_eq(nf_h5_attr_set_string(f, "/", "log_lik_true_convention", conv), NF_OK);
    ck_assert_int_eq(nf_h5_commit(f), NF_OK);
}

static void expect_load_refusal(int code, const char *want1, const char *want2)
{
    nf_source *s = NULL;
    ck_assert_int_eq(nf_source_sequences_load(&s, path), code);
    ck_assert_ptr_null(s);
    const char *m = nf_strerror_last();
    ck_assert_msg(strstr(m, want1) && strstr(m, want2), "message: %s", m);
    unlink(path);
}

START_TEST(bad_truth_is_refused)
{
    setup_dir();
    write_truth_file(2, 0, "window", 0); /* the good one loads */
    nf_source *s;
    ck_assert_int_eq(nf_source_sequences_load(&s, path), NF_OK);
    ck_assert_double_eq(nf_source_sequences_truth(s).log_lik[1], -2.25);
    ck_assert_ptr_null(nf_source_sequences_truth(s).log_lik_no_survival);
    ck_assert_str_eq(nf_source_sequences_truth(s).process, "");
    nf_source_free(s);
    unlink(path);
    write_truth_file(3, 0, NULL, 0);
    expect_load_refusal(NF_EFORMAT, "/log_lik_true has 3 entries for 2 sequences", "one true log-likelihood per");
    write_truth_file(1, 0, NULL, 0);
    expect_load_refusal(NF_EFORMAT, "/log_lik_true has 1 entries for 2 sequences", "truncated");
    write_truth_file(2, 1, NULL, 0);
    expect_load_refusal(NF_EDATA, "/log_lik_true: sequence 1", "expected a finite number");
    write_truth_file(2, 0, "no-survival", 0);
    expect_load_refusal(NF_EFORMAT, "log_lik_true_convention = 'no-survival'", "expected 'window'");
    write_truth_file(2, 0, NULL, 1);
    expect_load_refusal(NF_EFORMAT, "/log_lik_true_no_survival without /log_lik_true", "docs/FORMATS.md");
    /* saving refuses a NaN truth and writes nothing */
    const double times[] = {0.5, 1.25, 0.75}, ts[] = {0, 0}, te[] = {2, 3}, ll[] = {-1.5, NAN};
    const int64_t off[] = {0, 2, 3};
    nf_sequences_truth tr = {.log_lik = ll, .process = "poisson", .seed = -1};
    expect_refusal(nf_sequences_save_truth(path, 2, off, times, ts, te, NULL, 0, &tr), "sequence 1", "finite");
    /* a truth needs a simple process: the tie at 0.9 in sequence 0 is named */
    nf_table t = long_table();
    nf_tpp_process *p;
    ck_assert_int_eq(nf_tpp_process_create(&p, "poisson", "rate=2"), NF_OK);
    expect_refusal(nf_sequences_import_long(path, "ev.csv", &t, 0, 1, 2, NAN, NAN, p, NULL),
                   "ev.csv: sequence 0 under the true process poisson(rate=2)", "strictly increasing");
    nf_tpp_process_free(p);
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
    tcase_add_test(tc, truth_follows_the_sequences);
    tcase_add_test(tc, bad_truth_is_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
