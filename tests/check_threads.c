/* tests/check_threads.c - the worker pool: every part runs exactly once, on whichever thread; nested
 * jobs and one thread run serially in part order; many jobs in a row, jobs after the workers fell
 * asleep, and jobs in a forked child all complete; a started job (nf_threads_start) runs every part
 * once by its finish, while the caller's own jobs run serially, and refuses one thread or a busy pool;
 * nf_threads_ranges covers every item once, in ranges that start at multiples of the alignment. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/threads.h"

#define MAXP 64

typedef struct count_job {
    _Atomic int runs[MAXP];
    _Atomic int inside; /* parts that saw nf_threads_in_parallel() */
    int record;          /* serial jobs: note the order parts ran in */
    int order[MAXP], at;
    int nested;          /* 1: each part runs a nested job */
} count_job;

static void count_part(void *arg, int part, int nparts)
{
    count_job *j = arg;
    ck_assert(nparts <= MAXP && part >= 0 && part < nparts);
    atomic_fetch_add(&j->runs[part], 1);
    atomic_fetch_add(&j->inside, nf_threads_in_parallel());
    if (j->nested) {
        count_job inner = {0};
        inner.record = 1;
        nf_threads_run(2, 5, count_part, &inner);
        for (int p = 0; p < 5; p++) ck_assert(atomic_load(&inner.runs[p]) == 1 && inner.order[p] == p);
    }
    if (j->record) j->order[j->at++] = part;
}

static void check_once(count_job *j, int nparts)
{
    for (int p = 0; p < nparts; p++) ck_assert_msg(atomic_load(&j->runs[p]) == 1, "part %d ran %d times", p, atomic_load(&j->runs[p]));
    for (int p = nparts; p < MAXP; p++) ck_assert(atomic_load(&j->runs[p]) == 0);
}

typedef struct range_count {
    _Atomic int hits[1000];
    _Atomic int ranges;
    size_t align;
} range_count;

static void count_range(void *arg, size_t i0, size_t i1)
{
    range_count *c = arg;
    ck_assert(i0 < i1 && i1 <= 1000 && i0 % c->align == 0);
    atomic_fetch_add(&c->ranges, 1);
    for (size_t i = i0; i < i1; i++) atomic_fetch_add(&c->hits[i], 1);
}

START_TEST(test_ranges)
{
    const size_t ns[] = {1, 7, 64, 65, 999, 1000};
    const size_t aligns[] = {1, 16, 64};
    for (int t = 1; t <= 3; t++)
        for (int a = 0; a < 3; a++)
            for (int k = 0; k < 6; k++) {
                range_count *c = calloc(1, sizeof *c);
                c->align = aligns[a];
                nf_threads_ranges(t, ns[k], aligns[a], count_range, c);
                for (size_t i = 0; i < 1000; i++)
                    ck_assert_msg(atomic_load(&c->hits[i]) == (i < ns[k]), "threads %d, n %zu, align %zu: item %zu ran %d times",
                                  t, ns[k], aligns[a], i, atomic_load(&c->hits[i]));
                ck_assert(atomic_load(&c->ranges) <= t);
                free(c);
            }
}
END_TEST

START_TEST(test_parts_once)
{
    const int sizes[] = {2, 3, 37, 64};
    for (int t = 2; t <= 4; t++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            count_job j = {0};
            nf_threads_run(t, sizes[k], count_part, &j);
            check_once(&j, sizes[k]);
            ck_assert(atomic_load(&j.inside) == sizes[k]);
        }
    ck_assert(!nf_threads_in_parallel());
}
END_TEST

START_TEST(test_serial_and_nested)
{
    count_job j = {0};
    j.record = 1;
    nf_threads_run(1, 9, count_part, &j); /* one thread: in order, on the caller */
    check_once(&j, 9);
    for (int p = 0; p < 9; p++) ck_assert_int_eq(j.order[p], p);
    count_job n = {0};
    n.nested = 1;
    nf_threads_run(2, 6, count_part, &n);
    check_once(&n, 6);
}
END_TEST

/* Many short jobs back to back (workers spinning), then jobs after the workers fell asleep. */
START_TEST(test_many_jobs_and_sleep)
{
    for (int i = 0; i < 20000; i++) {
        count_job j = {0};
        nf_threads_run(2, 2 + i % 7, count_part, &j);
        check_once(&j, 2 + i % 7);
    }
    for (int i = 0; i < 3; i++) {
        struct timespec d = {0, 3 * NF_THREADS_SPIN_US * 1000L};
        nanosleep(&d, NULL);
        count_job j = {0};
        nf_threads_run(3, 11, count_part, &j);
        check_once(&j, 11);
    }
}
END_TEST

START_TEST(test_forked_child)
{
    count_job j = {0};
    nf_threads_run(2, 8, count_part, &j); /* the pool exists in the parent */
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        count_job c = {0};
        nf_threads_run(2, 13, count_part, &c);
        int ok = 1;
        for (int p = 0; p < 13; p++) ok &= atomic_load(&c.runs[p]) == 1;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

START_TEST(test_started_job)
{
    for (int round = 0; round < 20; round++) {
        count_job j = {0}, mine = {0};
        mine.record = 1;
        ck_assert_int_eq(nf_threads_start(2, 16, count_part, &j), 1);
        ck_assert_int_eq(nf_threads_start(2, 4, count_part, &mine), 0); /* one started job at a time */
        nf_threads_run(2, 6, count_part, &mine); /* the caller's own work: serial meanwhile */
        for (int p = 0; p < 6; p++) ck_assert(atomic_load(&mine.runs[p]) == 1 && mine.order[p] == p);
        if (round % 5 == 4) nanosleep(&(struct timespec){0, 2000000}, NULL); /* workers past their spin */
        nf_threads_finish();
        check_once(&j, 16);
        ck_assert_int_eq(atomic_load(&j.inside), 16); /* every part inside a part, whoever ran it */
    }
    count_job one = {0};
    ck_assert_int_eq(nf_threads_start(1, 4, count_part, &one), 0);
    for (int p = 0; p < 4; p++) ck_assert_int_eq(atomic_load(&one.runs[p]), 0);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_parts_once);
    tcase_add_test(t, test_serial_and_nested);
    tcase_add_test(t, test_many_jobs_and_sleep);
    tcase_add_test(t, test_forked_child);
    tcase_add_test(t, test_started_job);
    tcase_add_test(t, test_ranges);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(threads_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
