/* tests/check_sequences_share.c - a share of an nf-sequences file (datasets/sequences_share.c): every
 * share has all items, owns its range, fetches its own and (from the file) others' sequences
 * exactly as the whole file does, and splits into the same items; a share reads and checks only
 * its own events (a bad event elsewhere does not stop it); and the interval statistics of a split
 * spread over three processes (threads with an all-reduce between them) equal those of one. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/sequences.h"

static char tmpdir[256];

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

/* Five marked sequences, one empty, one on a window of length 0 (as in check_sequences.c). */
#define NS 5
#define NE 13
static const int64_t OFF[NS + 1] = {0, 4, 4, 7, 8, 13};
static const double TIMES[NE] = {0.7, 1.35, 1.35, 4.02, -2.5, -1.2, 3.3, 10.0, 2.385, 5.1, 7.77, 9.9, 12.8};
static const double TS[NS] = {0.25, 1.0, -2.5, 10.0, 0.0};
static const double TE[NS] = {6.5, 3.75, 9.125, 10.0, 12.8};
static const int64_t MARKS[NE] = {2, 0, 1, 2, 0, 0, 2, 1, 1, 2, 0, 0, 1};

static void same_batch(const nf_batch *a, const nf_batch *b)
{
    ck_assert_int_eq(a->n, b->n);
    ck_assert_int_eq(a->num_marks, b->num_marks);
    for (int i = 0; i < a->n; i++) {
        ck_assert_uint_eq(a->idx[i], b->idx[i]);
        ck_assert(a->t_start[i] == b->t_start[i] && a->t_end[i] == b->t_end[i]);
        ck_assert(a->offsets[i + 1] == b->offsets[i + 1]);
    }
    for (int64_t j = 0; j < a->offsets[a->n]; j++) {
        ck_assert(a->times[j] == b->times[j]);
        ck_assert_int_eq(a->marks[j], b->marks[j]);
    }
}

START_TEST(test_share_fetch_and_split)
{
    char p[512];
    snprintf(p, sizeof p, "%s/marked.h5", tmpdir);
    OK(nf_sequences_save(p, NS, OFF, TIMES, TS, TE, MARKS, 3));
    nf_source *whole, *wval, *wtrain;
    OK(nf_source_sequences_load(&whole, p));
    nf_batch want = {0}, got = {0};
    size_t all[NS] = {4, 1, 0, 3, 2};
    OK(nf_source_fetch(whole, all, NS, &want));
    for (int parts = 2; parts <= 3; parts++)
        for (int part = 0; part < parts; part++) {
            nf_source *s;
            OK(nf_source_sequences_load_share(&s, p, part, parts));
            ck_assert_uint_eq(s->n, NS);
            ck_assert_int_eq(s->num_marks, 3);
            ck_assert_int_eq(s->partial, 1);
            ck_assert_ptr_null(nf_source_sequences(s).offsets);
            size_t lo = (size_t)(NS * part / parts), hi = (size_t)(NS * (part + 1) / parts);
            for (size_t i = 0; i < NS; i++) ck_assert_int_eq(nf_source_owns(s, i), i >= lo && i < hi);
            OK(nf_source_fetch(s, all, NS, &got)); /* its own from memory, the others from the file */
            same_batch(&got, &want);
            /* the split of one process: the same items in the same order */
            nf_source *val, *train;
            OK(nf_source_split(s, 0.4, 9, &val, &train));
            OK(nf_source_split(whole, 0.4, 9, &wval, &wtrain)); /* reorders whole: reload after */
            size_t idx[3] = {0, 1, 2};
            OK(nf_source_fetch(train, idx, 3, &got));
            nf_batch w2 = {0};
            OK(nf_source_fetch(wtrain, idx, 3, &w2));
            for (int i = 0; i < 3; i++)
                ck_assert(got.t_start[i] == w2.t_start[i] && got.offsets[i + 1] == w2.offsets[i + 1]);
            nf_batch_free(&w2);
            nf_source_free(val), nf_source_free(train), nf_source_free(wval), nf_source_free(wtrain);
            nf_source_free(whole);
            OK(nf_source_sequences_load(&whole, p));
            nf_source_free(s);
        }
    nf_source *bad = NULL;
    ck_assert_int_eq(nf_source_sequences_load_share(&bad, p, 2, 2), NF_EINVAL);
    ck_assert_ptr_null(bad);
    nf_batch_free(&want);
    nf_batch_free(&got);
    nf_source_free(whole);
}
END_TEST

/* A NaN in sequence 4 (entry 12): the whole file and the share holding it refuse, naming it; the
 * share without it loads (its events were never read), and fails only when asked for sequence 4. */
START_TEST(test_share_reads_its_own_events)
{
    char p[512];
    snprintf(p, sizeof p, "%s/bad.h5", tmpdir);
    double t[NE];
    memcpy(t, TIMES, sizeof t);
    t[12] = NAN;
    nf_h5 *f;
    OK(nf_h5_create(&f, p, NF_SEQUENCES_FORMAT, 1));
    OK(nf_h5_write_double(f, "/times", t, NE, 0));
    OK(nf_h5_write_int64(f, "/offsets", OFF, NS + 1, 0));
    OK(nf_h5_write_double(f, "/t_start", TS, NS, 0));
    OK(nf_h5_write_double(f, "/t_end", TE, NS, 0));
    OK(nf_h5_write_int64(f, "/marks", MARKS, NE, 0));
    OK(nf_h5_attr_set_int64(f, "/", "num_marks", 3));
    OK(nf_h5_commit(f));
    nf_source *s = NULL;
    ck_assert_int_eq(nf_source_sequences_load(&s, p), NF_EDATA);
    ck_assert_int_eq(nf_source_sequences_load_share(&s, p, 1, 2), NF_EDATA);
    HAS(nf_strerror_last(), "sequence 4, event 4 (entry 12)");
    OK(nf_source_sequences_load_share(&s, p, 0, 2)); /* sequences 0 and 1 */
    nf_batch b = {0};
    size_t mine[2] = {1, 0}, other[2] = {0, 4};
    OK(nf_source_fetch(s, mine, 2, &b));
    ck_assert(b.times[0] == TIMES[0] && b.offsets[2] == 4);
    ck_assert_int_eq(nf_source_fetch(s, other, 2, &b), NF_EDATA);
    HAS(nf_strerror_last(), "sequence 4");
    nf_batch_free(&b);
    nf_source_free(s);
}
END_TEST

/* ---- statistics over processes: threads with an all-reduce ---------------------------------------- */

#define PARTS 3
typedef struct {
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    double buf[8];
} fake_comm;

static int fake_sum(void *user, double *buf, size_t n)
{
    fake_comm *c = user;
    pthread_barrier_wait(&c->bar);
    pthread_mutex_lock(&c->mu);
    for (size_t k = 0; k < n; k++) c->buf[k] += buf[k];
    pthread_mutex_unlock(&c->mu);
    pthread_barrier_wait(&c->bar);
    for (size_t k = 0; k < n; k++) buf[k] = c->buf[k];
    if (pthread_barrier_wait(&c->bar) == PTHREAD_BARRIER_SERIAL_THREAD) memset(c->buf, 0, sizeof c->buf);
    return NF_OK;
}

typedef struct {
    fake_comm *comm;
    const char *path;
    int part, rc;
    size_t n_events;
    double stats[3];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    nf_source *s = NULL, *val = NULL, *train = NULL;
    w->rc = nf_source_sequences_load_share(&s, w->path, w->part, PARTS);
    if (w->rc == NF_OK) w->rc = nf_source_split(s, 0.25, 5, &val, &train);
    if (w->rc == NF_OK)
        w->rc = nf_sequences_stats_shared(train, fake_sum, w->comm, &w->n_events, &w->stats[0], &w->stats[1],
                                          &w->stats[2]);
    nf_source_free(val), nf_source_free(train), nf_source_free(s);
    return NULL;
}

START_TEST(test_stats_over_processes)
{
    /* 40 sequences of 0..9 events at increasing random gaps (a tie now and then) */
    enum { N = 40 };
    int64_t off[N + 1] = {0};
    double times[400], ts[N], te[N];
    uint64_t r = 2385;
    for (int i = 0; i < N; i++) {
        int len = (int)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 60) % 10;
        double t = ts[i] = 0.5 * i;
        for (int k = 0; k < len; k++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            t += (r >> 61) == 0 ? 0 : (double)(r >> 11) / 9007199254740992.0 * 3;
            times[off[i] + k] = t;
        }
        off[i + 1] = off[i] + len;
        te[i] = t + 1.25;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/stats.h5", tmpdir);
    OK(nf_sequences_save(p, N, off, times, ts, te, NULL, 0));
    /* one process: the whole file, the statistics of its training split */
    nf_source *s, *val, *train;
    OK(nf_source_sequences_load(&s, p));
    OK(nf_source_split(s, 0.25, 5, &val, &train));
    size_t n1, n2;
    double m1, l1, d1, m2, l2, d2;
    OK(nf_sequences_stats(train, &n1, &m1, &l1, &d1));
    OK(nf_sequences_stats_shared(train, NULL, NULL, &n2, &m2, &l2, &d2)); /* whole: the same sums */
    ck_assert(n1 == n2 && m1 == m2 && l1 == l2 && d1 == d2);
    /* three processes, each with its share */
    fake_comm c = {.buf = {0}};
    pthread_barrier_init(&c.bar, NULL, PARTS);
    pthread_mutex_init(&c.mu, NULL);
    pthread_t th[PARTS];
    worker w[PARTS];
    for (int k = 0; k < PARTS; k++) {
        w[k] = (worker){.comm = &c, .path = p, .part = k};
        pthread_create(&th[k], NULL, work, &w[k]);
    }
    for (int k = 0; k < PARTS; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < PARTS; k++) {
        ck_assert_msg(w[k].rc == NF_OK, "process %d: %d", k, w[k].rc);
        ck_assert_uint_eq(w[k].n_events, n1);
        ck_assert_double_eq_tol(w[k].stats[0], m1, 1e-13 * fabs(m1));
        ck_assert_double_eq_tol(w[k].stats[1], l1, 1e-13 * fmax(1, fabs(l1)));
        ck_assert_double_eq_tol(w[k].stats[2], d1, 1e-13 * d1);
    }
    pthread_barrier_destroy(&c.bar);
    pthread_mutex_destroy(&c.mu);
    /* a share alone (no sum): the statistics of the items it holds, fewer events */
    nf_source *sh;
    OK(nf_source_sequences_load_share(&sh, p, 1, PARTS));
    OK(nf_sequences_stats_shared(sh, NULL, NULL, &n2, &m2, &l2, &d2));
    ck_assert_uint_eq(n2, (size_t)(off[2 * N / 3] - off[N / 3]));
    nf_source_free(sh);
    nf_source_free(val), nf_source_free(train), nf_source_free(s);
}
END_TEST

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
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_sequences_share_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    Suite *s = suite_create("sequences_share");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_share_fetch_and_split);
    tcase_add_test(tc, test_share_reads_its_own_events);
    tcase_add_test(tc, test_stats_over_processes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_tree(tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
