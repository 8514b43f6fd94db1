/* tests/check_dependent_split.c - splitting dependent rows by whole units (datasets/dependent_split.h):
 * the parts partition the rows, no group or family of K is cut, rows stay in order, validation and
 * test come as close to their fractions as whole units allow, the seed decides the draw; a part written to a file keeps its
 * rows' group ids and K restricted to them (read back through the loader nf fit uses, dense and
 * triplets); validation and test that would take every unit are refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "datasets/dependent_load.h"
#include "datasets/dependent_split.h"

enum { N = 14 };
/* groups: {0,3,9}, {1,4}, {2}, {5,6,7,8}, {10}, {11,12,13}; K links 2 with 10 (joining those two
 * singleton groups into one family) and 1 with 4 (already one group) */
static const int64_t group[N] = {5, 8, 2, 5, 8, 40, 40, 40, 40, 5, 3, 9, 9, 9};
static int64_t krow[] = {2, 1, 0, 5};
static int64_t kcol[] = {10, 4, 0, 5};
static double kval[] = {0.5, 0.25, 1.0, 1.0};

static nf_dep_split structure(void)
{
    nf_dep_split s = {.n = N, .kinship = 1, .nnz = 4};
    s.group = malloc(N * sizeof *s.group);
    memcpy(s.group, group, sizeof group);
    s.row = malloc(sizeof krow), s.col = malloc(sizeof kcol), s.value = malloc(sizeof kval);
    memcpy(s.row, krow, sizeof krow), memcpy(s.col, kcol, sizeof kcol), memcpy(s.value, kval, sizeof kval);
    return s;
}

/* the unit of each row, as the test defines it */
static int unit_of(size_t i)
{
    static const int u[N] = {0, 1, 2, 0, 1, 3, 3, 3, 3, 0, 2, 4, 4, 4};
    return u[i];
}

START_TEST(test_parts_keep_units_whole)
{
    nf_dep_split s = structure();
    for (uint64_t seed = 1; seed <= 20; seed++) {
        size_t rows[N], count[3], units[3];
        ck_assert_msg(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, seed, rows, count, units) == NF_OK, "%s",
                      nf_strerror_last());
        ck_assert_int_eq(count[0] + count[1] + count[2], N);
        ck_assert_int_eq(units[0] + units[1] + units[2], 5);
        ck_assert(count[0] > 0);
        /* round(14 x 0.2) = 3 rows wanted, from units of 2 to 4 rows: each part comes within 1 */
        ck_assert_msg(count[1] >= 2 && count[1] <= 4 && count[2] >= 2 && count[2] <= 4, "seed %d: %zu, %zu",
                      (int)seed, count[1], count[2]);
        int part[N], seen[N] = {0};
        size_t at = 0;
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < count[k]; i++, at++) {
                ck_assert_int_lt(rows[at], N);
                ck_assert_int_eq(seen[rows[at]]++, 0);
                part[rows[at]] = k;
                if (i > 0) ck_assert(rows[at] > rows[at - 1]); /* in the file's order */
            }
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < N; j++)
                if (unit_of(i) == unit_of(j))
                    ck_assert_msg(part[i] == part[j], "seed %d: rows %zu and %zu of one unit in parts %d and %d",
                                  (int)seed, i, j, part[i], part[j]);
    }
    /* the same seed draws the same parts; some other seed draws others */
    size_t a[N], b[N], c[3], u[3];
    ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, 7, a, c, u), NF_OK);
    ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, 7, b, c, u), NF_OK);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    int differs = 0;
    for (uint64_t seed = 8; seed < 20 && !differs; seed++) {
        ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, seed, b, c, u), NF_OK);
        differs = memcmp(a, b, sizeof a) != 0;
    }
    ck_assert(differs);
    /* validation and test that take every unit leave nothing to train */
    ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.6, 0.39, 1, a, c, u), NF_EINVAL);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "t.h5: the validation and test parts take every one of the 5 groups"));
    nf_dep_split_free(&s);
}
END_TEST

/* A part written out and read back as nf fit reads it: its group ids, and K restricted to its rows. */
static void check_written_part(nf_dep_split *s, const size_t *rows, size_t m)
{
    char dir[] = "/tmp/nf_dep_split_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/part.h5", dir);
    nf_h5 *f;
    ck_assert_int_eq(nf_h5_create(&f, path, "nf-data", 1), NF_OK);
    ck_assert_msg(nf_dep_split_write(f, s, rows, m) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_h5_commit(f), NF_OK);
    ck_assert_int_eq(nf_h5_open(&f, path, NULL, 0), NF_OK);
    nf_dep_split back;
    int present;
    ck_assert_msg(nf_dep_split_read(f, path, m, &back, &present) == NF_OK, "%s", nf_strerror_last());
    nf_h5_close(f);
    ck_assert_int_eq(present, 1);
    for (size_t i = 0; i < m; i++) ck_assert_int_eq(back.group[i], s->group[rows[i]]);
    /* every entry of the restricted K against the original's */
    double *full = calloc(N * N, sizeof *full), *part = calloc(m * m, sizeof *part);
    if (s->dense) memcpy(full, s->dense, N * N * sizeof *full);
    for (size_t k = 0; k < s->nnz; k++) full[s->row[k] * N + s->col[k]] = full[s->col[k] * N + s->row[k]] = s->value[k];
    if (back.dense) memcpy(part, back.dense, m * m * sizeof *part);
    for (size_t k = 0; k < back.nnz; k++)
        part[back.row[k] * m + back.col[k]] = part[back.col[k] * m + back.row[k]] = back.value[k];
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < m; j++) ck_assert(part[i * m + j] == full[rows[i] * N + rows[j]]);
    /* and the loader of nf fit --dependence accepts it */
    nf_dep *d;
    nf_dep_source src = {.kind = NF_DEP_KINSHIP, .dataset = "/K"};
    snprintf(src.path, sizeof src.path, "%s", path);
    ck_assert_msg(nf_dep_load(&d, &src, m) == NF_OK, "%s", nf_strerror_last());
    nf_dep_free(d);
    free(full), free(part);
    nf_dep_split_free(&back);
    unlink(path);
    rmdir(dir);
}

START_TEST(test_written_parts)
{
    nf_dep_split s = structure();
    /* K must be positive semi-definite for the loader: unit diagonal, the two links small */
    s.nnz = 0;
    int64_t r[N + 2], c[N + 2];
    double v[N + 2];
    for (int i = 0; i < N; i++) r[s.nnz] = c[s.nnz] = i, v[s.nnz++] = 1;
    r[s.nnz] = 2, c[s.nnz] = 10, v[s.nnz++] = 0.5;
    r[s.nnz] = 1, c[s.nnz] = 4, v[s.nnz++] = 0.25;
    free(s.row), free(s.col), free(s.value);
    s.row = malloc(sizeof r), s.col = malloc(sizeof c), s.value = malloc(sizeof v);
    memcpy(s.row, r, sizeof r), memcpy(s.col, c, sizeof c), memcpy(s.value, v, sizeof v);
    size_t rows[N], count[3], units[3];
    ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, 3, rows, count, units), NF_OK);
    check_written_part(&s, rows, count[0]);
    check_written_part(&s, rows + count[0], count[1]);
    /* the same K dense */
    s.dense = calloc(N * N, sizeof *s.dense);
    for (size_t k = 0; k < s.nnz; k++) s.dense[s.row[k] * N + s.col[k]] = s.dense[s.col[k] * N + s.row[k]] = s.value[k];
    free(s.row), free(s.col), free(s.value);
    s.row = s.col = NULL, s.value = NULL, s.nnz = 0;
    size_t rows2[N];
    ck_assert_int_eq(nf_dep_split_parts(&s, "t.h5", 0.2, 0.2, 3, rows2, count, units), NF_OK);
    ck_assert(memcmp(rows, rows2, sizeof rows) == 0); /* the same units either way */
    check_written_part(&s, rows2, count[0]);
    nf_dep_split_free(&s);
}
END_TEST

static Suite *dependent_split_suite(void)
{
    Suite *s = suite_create("dependent_split");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parts_keep_units_whole);
    tcase_add_test(tc, test_written_parts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dependent_split_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
