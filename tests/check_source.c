/* tests/check_source.c - data sources (datasets/source.h): rows loaded and rows streamed from the
 * file give the same batches, the seeded split holds the same items either way, views and index
 * views map their items, wrapped arrays are never written, and bad requests and bad rows are named. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/rng.h"
#include "datasets/source.h"
#include "tests/testutil.h"

enum { N = 1003, D = 3, C = 2 };
static char dir[64], path[128];

/* A file with /x (N, D) and /context (N, C) of unremarkable values; one NaN if bad_row >= 0. */
static void write_file(int bad_row, const char *bad_set)
{
    snprintf(dir, sizeof dir, "/tmp/nf_source_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/rows.h5", dir);
    double *x = malloc(N * D * sizeof *x), *c = malloc(N * C * sizeof *c);
    for (int i = 0; i < N * D; i++) x[i] = 2.385 * sin(0.37 * i) + 0.01 * i;
    for (int i = 0; i < N * C; i++) c[i] = cos(0.91 * i) - 0.5;
    if (bad_row >= 0) (!strcmp(bad_set, "/x") ? x : c)[bad_row * (!strcmp(bad_set, "/x") ? D : C) + 1] = NAN;
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_create(&f, path, "nf-data", 1), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/x", x, N, D), NF_OK);
    ck_assert_int_eq(nf_h5_write_double(f, "/context", c, N, C), NF_OK);
    ck_assert_int_eq(nf_h5_commit(f), NF_OK);
    free(x);
    free(c);
}

static void remove_file(void)
{
    unlink(path);
    rmdir(dir);
}

static void same_batch(const nf_batch *a, const nf_batch *b)
{
    ck_assert_int_eq(a->n, b->n);
    ck_assert_int_eq(a->dim, b->dim);
    ck_assert_int_eq(a->ctx_dim, b->ctx_dim);
    ck_assert(memcmp(a->idx, b->idx, (size_t)a->n * sizeof *a->idx) == 0);
    ck_assert(memcmp(a->x, b->x, (size_t)a->n * a->dim * sizeof *a->x) == 0);
    if (a->ctx_dim) ck_assert(memcmp(a->ctx, b->ctx, (size_t)a->n * a->ctx_dim * sizeof *a->ctx) == 0);
}

/* Loaded and streamed rows: the same rows for any indices, in the order asked. */
START_TEST(streamed_rows_equal_loaded_rows)
{
    write_file(-1, NULL);
    nf_source *l, *s;
    ck_assert_int_eq(nf_source_rows_load(&l, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_msg(nf_source_rows_open(&s, path, "/x", 0, 0, 1) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(s->n, N);
    ck_assert_int_eq(s->dim, D);
    ck_assert_int_eq(s->ctx_dim, C);
    ck_assert_ptr_null(nf_source_rows(s).x);
    size_t idx[300];
    nf_rng *r = nf_rng_alloc(7, 0);
    nf_batch a = {0}, b = {0};
    for (int rep = 0; rep < 4; rep++) {
        int n = 50 + 80 * rep;
        for (int i = 0; i < n; i++) idx[i] = nf_rng_index(r, N);
        idx[0] = N - 1, idx[1] = 0, idx[2] = idx[3]; /* the ends, and a repeat */
        ck_assert_int_eq(nf_source_fetch(l, idx, n, &a), NF_OK);
        ck_assert_int_eq(nf_source_fetch(s, idx, n, &b), NF_OK);
        same_batch(&a, &b);
    }
    idx[0] = N;
    ck_assert_int_eq(nf_source_fetch(s, idx, 1, &b), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "rows.h5"));
    nf_rng_free(r);
    nf_batch_free(&a);
    nf_batch_free(&b);
    nf_source_free(l);
    nf_source_free(s);
    remove_file();
}
END_TEST

/* Two streamed sources fetched from two threads at once: each fetch sorts its batch's rows by a
 * buffer of its own source (a comparator reading the keys from a global, as this once did, lets one
 * thread's sort read the other's batch: ThreadSanitizer names the race, make check-tsan).  Each
 * thread's batches equal the loaded rows'. */
typedef struct {
    nf_source *s;
    const nf_batch *want;
    const size_t *idx;
    int n, mismatches;
} fetch_job;

static void *fetch_repeatedly(void *arg)
{
    fetch_job *J = arg;
    nf_batch b = {0};
    for (int rep = 0; rep < 40; rep++) {
        if (nf_source_fetch(J->s, J->idx, J->n, &b) != NF_OK ||
            memcmp(b.x, J->want->x, (size_t)J->n * D * sizeof *b.x) ||
            memcmp(b.ctx, J->want->ctx, (size_t)J->n * C * sizeof *b.ctx))
            J->mismatches++;
    }
    nf_batch_free(&b);
    return NULL;
}

START_TEST(streamed_fetches_in_two_threads)
{
    write_file(-1, NULL);
    enum { B = 200 };
    nf_source *l, *s[2];
    ck_assert_int_eq(nf_source_rows_load(&l, path, "/x", 0, 0, 1), NF_OK);
    size_t idx[2][B];
    nf_batch want[2] = {{0}, {0}};
    fetch_job job[2];
    for (int t = 0; t < 2; t++) {
        ck_assert_int_eq(nf_source_rows_open(&s[t], path, "/x", 0, 0, 1), NF_OK);
        for (int i = 0; i < B; i++) idx[t][i] = t ? (size_t)(N - 1 - 5 * i) : (size_t)(7 * i + 3) % N;
        ck_assert_int_eq(nf_source_fetch(l, idx[t], B, &want[t]), NF_OK);
        job[t] = (fetch_job){.s = s[t], .want = &want[t], .idx = idx[t], .n = B};
    }
    nf_test_pair_run(fetch_repeatedly, &job[0], &job[1]);
    ck_assert_int_eq(job[0].mismatches, 0);
    ck_assert_int_eq(job[1].mismatches, 0);
    for (int t = 0; t < 2; t++) nf_batch_free(&want[t]), nf_source_free(s[t]);
    nf_source_free(l);
    remove_file();
}
END_TEST

/* The split of loaded rows (reordered in place, range views) and of streamed rows (index views)
 * holds the same items in the same order, and batches carry the view's own indices. */
START_TEST(split_holds_the_same_items_either_way)
{
    write_file(-1, NULL);
    nf_source *l, *s, *lv, *lt, *sv, *st;
    ck_assert_int_eq(nf_source_rows_load(&l, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(nf_source_rows_open(&s, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(nf_source_split(l, 0.15, 2385, &lv, &lt), NF_OK);
    ck_assert_int_eq(nf_source_split(s, 0.15, 2385, &sv, &st), NF_OK);
    ck_assert_int_eq(lv->n, 150);
    ck_assert_int_eq(sv->n, 150);
    ck_assert_int_eq(lt->n, N - 150);
    ck_assert_int_eq(st->n, N - 150);
    ck_assert_str_eq(st->type->kind, "rows");
    size_t idx[N];
    for (size_t i = 0; i < N; i++) idx[i] = i;
    nf_batch a = {0}, b = {0};
    ck_assert_int_eq(nf_source_fetch(lv, idx, 150, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(sv, idx, 150, &b), NF_OK);
    same_batch(&a, &b);
    ck_assert_int_eq(nf_source_fetch(lt, idx + 7, N - 150 - 7, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(st, idx + 7, N - 150 - 7, &b), NF_OK);
    same_batch(&a, &b);
    ck_assert_int_eq(b.idx[0], 7); /* the view's index, not the file's row */
    /* a split of an index view again splits alike */
    nf_source *a1, *a2, *b1, *b2;
    ck_assert_int_eq(nf_source_split(lt, 0.5, 9, &a1, &a2), NF_OK);
    ck_assert_int_eq(nf_source_split(st, 0.5, 9, &b1, &b2), NF_OK);
    ck_assert_int_eq(nf_source_fetch(a2, idx, (int)a2->n, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(b2, idx, (int)b2->n, &b), NF_OK);
    same_batch(&a, &b);
    nf_source *srcs[] = {a1, a2, b1, b2, lv, lt, sv, st, l, s};
    for (int i = 0; i < 10; i++) nf_source_free(srcs[i]);
    nf_batch_free(&a);
    nf_batch_free(&b);
    remove_file();
}
END_TEST

/* A split that holds nothing out keeps every item in its place, loaded or streamed: item i of the
 * training part is row i of the file (a dependent fit's rows are the points of a structure stored in
 * that order; a shuffle here scrambled which rows were related). */
START_TEST(split_of_nothing_keeps_the_order)
{
    write_file(-1, NULL);
    nf_source *l, *s, *lv, *lt, *sv, *st, *ref;
    ck_assert_int_eq(nf_source_rows_load(&l, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(nf_source_rows_load(&ref, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(nf_source_rows_open(&s, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(nf_source_split(l, 0, 2385, &lv, &lt), NF_OK);
    ck_assert_int_eq(nf_source_split(s, 0, 2385, &sv, &st), NF_OK);
    ck_assert_ptr_null(lv);
    ck_assert_ptr_null(sv);
    ck_assert_int_eq(lt->n, N);
    ck_assert_int_eq(st->n, N);
    size_t idx[N];
    for (size_t i = 0; i < N; i++) idx[i] = i;
    nf_batch a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(nf_source_fetch(ref, idx, N, &c), NF_OK);
    ck_assert_int_eq(nf_source_fetch(lt, idx, N, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(st, idx, N, &b), NF_OK);
    same_batch(&a, &c);
    same_batch(&b, &c);
    nf_source *srcs[] = {lt, st, l, s, ref};
    for (int i = 0; i < 5; i++) nf_source_free(srcs[i]);
    nf_batch_free(&a);
    nf_batch_free(&b);
    nf_batch_free(&c);
    remove_file();
}
END_TEST

/* Shares of a file (data-parallel training): the parts partition the rows, each owns its own, a
 * split of every share holds the same items as the split of the whole, and any row can still be
 * fetched (the held ones from memory, others from the file) with the loaded rows' values. */
START_TEST(shares_partition_the_rows)
{
    write_file(-1, NULL);
    enum { K = 3 };
    nf_source *l, *sh[K];
    ck_assert_int_eq(nf_source_rows_load(&l, path, "/x", 0, 0, 1), NF_OK);
    ck_assert_int_eq(l->partial, 0);
    for (int k = 0; k < K; k++) {
        ck_assert_msg(nf_source_rows_load_share(&sh[k], path, "/x", D, C, 1, k, K) == NF_OK, "%s", nf_strerror_last());
        ck_assert_int_eq(sh[k]->n, N);
        ck_assert_int_eq(sh[k]->partial, 1);
        ck_assert_int_eq(sh[k]->ctx_dim, C);
    }
    for (size_t i = 0; i < N; i++) {
        int owners = 0;
        for (int k = 0; k < K; k++) owners += nf_source_owns(sh[k], i);
        ck_assert_msg(owners == 1, "row %zu held by %d shares", i, owners);
        ck_assert(nf_source_owns(l, i));
    }
    ck_assert(nf_source_owns(sh[0], 0) && nf_source_owns(sh[K - 1], N - 1) && !nf_source_owns(sh[0], N - 1));
    size_t idx[N];
    for (size_t i = 0; i < N; i++) idx[i] = (i * 389) % N;
    nf_batch a = {0}, b = {0};
    ck_assert_int_eq(nf_source_fetch(l, idx, N, &a), NF_OK);
    for (int k = 0; k < K; k++) {
        ck_assert_int_eq(nf_source_fetch(sh[k], idx, N, &b), NF_OK); /* mostly rows of other shares */
        same_batch(&a, &b);
        size_t mine[N];
        int m = 0;
        for (size_t i = 0; i < N; i++)
            if (nf_source_owns(sh[k], idx[i])) mine[m++] = idx[i];
        ck_assert_int_eq(nf_source_fetch(l, mine, m, &a), NF_OK);
        ck_assert_int_eq(nf_source_fetch(sh[k], mine, m, &b), NF_OK); /* from memory */
        same_batch(&a, &b);
        ck_assert_int_eq(nf_source_fetch(l, idx, N, &a), NF_OK);
    }
    /* the split: the same items in the same order, and the views know what their share holds */
    nf_source *lv, *lt, *v, *t;
    ck_assert_int_eq(nf_source_split(l, 0.2, 11, &lv, &lt), NF_OK);
    ck_assert_int_eq(nf_source_split(sh[1], 0.2, 11, &v, &t), NF_OK);
    ck_assert_int_eq(t->partial, 1);
    for (size_t i = 0; i < t->n; i++) idx[i] = i;
    ck_assert_int_eq(nf_source_fetch(lt, idx, (int)lt->n, &a), NF_OK);
    ck_assert_int_eq(nf_source_fetch(t, idx, (int)t->n, &b), NF_OK);
    same_batch(&a, &b);
    int held = 0;
    for (size_t i = 0; i < t->n; i++) held += nf_source_owns(t, i);
    ck_assert_int_gt(held, (int)t->n / K - 60);
    ck_assert_int_lt(held, (int)t->n / K + 60);
    /* bad shares */
    nf_source *bad;
    ck_assert_int_eq(nf_source_rows_load_share(&bad, path, "/x", 0, 0, 0, 3, 3), NF_EINVAL);
    ck_assert_int_eq(nf_source_rows_load_share(&bad, path, "/x", 0, 0, 0, 0, N + 1), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "1003 rows for 1004 processes"));
    nf_source *srcs[] = {lv, lt, v, t, sh[0], sh[1], sh[2], l};
    for (int i = 0; i < 8; i++) nf_source_free(srcs[i]);
    nf_batch_free(&a);
    nf_batch_free(&b);
    remove_file();
}
END_TEST

/* Wrapped arrays are the caller's: a split reorders a copy and leaves them as they were. */
START_TEST(wrapped_arrays_are_never_written)
{
    nf_real x[40], keep[40];
    for (int i = 0; i < 40; i++) keep[i] = x[i] = (nf_real)(0.25 * i - 2.385);
    nf_source *w, *v, *t;
    ck_assert_int_eq(nf_source_rows_wrap(&w, x, NULL, 20, 2, 0), NF_OK);
    ck_assert_int_eq(nf_source_split(w, 0.25, 3, &v, &t), NF_OK);
    ck_assert(memcmp(x, keep, sizeof x) == 0);
    size_t idx[15];
    for (int i = 0; i < 15; i++) idx[i] = (size_t)i;
    nf_batch b = {0};
    ck_assert_int_eq(nf_source_fetch(t, idx, 15, &b), NF_OK);
    double sum = 0, all = 0; /* the 15 + 5 rows are the 20 rows, shuffled */
    for (int i = 0; i < 30; i++) sum += b.x[i];
    ck_assert_int_eq(nf_source_fetch(v, idx, 5, &b), NF_OK);
    for (int i = 0; i < 10; i++) sum += b.x[i];
    for (int i = 0; i < 40; i++) all += x[i];
    ck_assert(fabs(sum - all) < 1e-4);
    nf_batch_free(&b);
    nf_source_free(v);
    nf_source_free(t);
    nf_source_free(w);
}
END_TEST

/* A NaN is named when its row is read: in /x or in /context. */
START_TEST(streamed_bad_rows_are_named)
{
    const char *sets[] = {"/x", "/context"};
    for (int k = 0; k < 2; k++) {
        write_file(613, sets[k]);
        nf_source *s;
        ck_assert_int_eq(nf_source_rows_open(&s, path, "/x", 0, 0, 1), NF_OK);
        size_t idx[3] = {5, 613, 9};
        nf_batch b = {0};
        ck_assert_int_eq(nf_source_fetch(s, idx, 2, &b), NF_EDATA);
        const char *m = nf_strerror_last();
        ck_assert_msg(strstr(m, "row 613") && strstr(m, "column 1") && strstr(m, k ? "/context" : "data"), "%s", m);
        idx[1] = 612;
        ck_assert_int_eq(nf_source_fetch(s, idx, 3, &b), NF_OK);
        nf_batch_free(&b);
        nf_source_free(s);
        remove_file();
    }
    write_file(-1, NULL);
    nf_source *s;
    ck_assert_int_eq(nf_source_rows_open(&s, path, "/x", 4, 0, 0), NF_EDATA);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "expected 4"));
    ck_assert_int_eq(nf_source_rows_open(&s, path, "/nope", 0, 0, 0), NF_EFORMAT);
    ck_assert_int_eq(nf_source_rows_open(&s, path, "/x", 0, 5, 1), NF_EDATA);
    remove_file();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("source");
    TCase *tc = tcase_create("source");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, streamed_rows_equal_loaded_rows);
    tcase_add_test(tc, streamed_fetches_in_two_threads);
    tcase_add_test(tc, split_holds_the_same_items_either_way);
    tcase_add_test(tc, split_of_nothing_keeps_the_order);
    tcase_add_test(tc, wrapped_arrays_are_never_written);
    tcase_add_test(tc, shares_partition_the_rows);
    tcase_add_test(tc, streamed_bad_rows_are_named);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
