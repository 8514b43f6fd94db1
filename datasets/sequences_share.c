/* datasets/sequences_share.c - a share of an nf-sequences file for data-parallel training (each
 * process of `mpirun nf tpp fit` holds the events of its sequences only), and the interval
 * statistics of sequences spread over processes (see sequences.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/sequences.h"
#include "datasets/sequences_internal.h"

/* ---- the share ---------------------------------------------------------------------------------- */

/* Sequences [first, first + count) of n with their events in memory: entry offsets[first] of the
 * file is times[0].  Items keep their indices in the whole file.  It cannot reorder: nf_source_split
 * gives index views of it. */
typedef struct {
    int64_t *offsets;          /* (n + 1) of all sequences, as in the file */
    double *t_start, *t_end;   /* (n) */
    double *times;             /* (offsets[first + count] - offsets[first]) the share's events */
    int64_t *marks;            /* the same, or NULL without marks */
    size_t first, count;
    char path[1024];           /* other processes' events are read from here */
} share_state;

static void share_free_arrays(share_state *st)
{
    free(st->offsets), free(st->t_start), free(st->t_end), free(st->times), free(st->marks);
}

static int share_owns(const nf_source *s, size_t item)
{
    const share_state *st = s->state;
    return item >= st->first && item - st->first < st->count;
}

/* The len events of another share from entry at of the file into times (and marks, narrowed to
 * int32), checked as the loader checks its own: finite, non-decreasing, inside the window. */
static int read_other(const nf_source *s, nf_h5 **f, size_t item, double *times, int32_t *marks)
{
    const share_state *st = s->state;
    const int64_t at = st->offsets[item], len = st->offsets[item + 1] - at;
    if (!*f) NF_TRY(nf_h5_open(f, st->path, NULL, 0));
    double *t = NULL;
    int64_t *m = NULL;
    size_t rows, cols;
    int rc = nf_h5_read_double_rows(*f, "/times", (size_t)at, (size_t)len, &t, &rows, &cols, NULL);
    if (rc == NF_OK && marks)
        rc = nf_h5_read_int64_rows(*f, "/marks", (size_t)at, (size_t)len, &m, &rows, &cols, NULL);
    if (rc == NF_OK && rows != (size_t)len)
        rc = nf_error(NF_EFORMAT, "%s:/times: sequence %zu ends after the last event (the file changed?)", st->path, item);
    for (int64_t k = 0; rc == NF_OK && k < len; k++) {
        if (!isfinite(t[k]) || t[k] < st->t_start[item] || t[k] > st->t_end[item] || (k > 0 && t[k] < t[k - 1]) ||
            (m && (m[k] < 0 || m[k] >= s->num_marks)))
            rc = nf_error(NF_EDATA, "%s: sequence %zu, event %lld (entry %lld): time %g%s (expected a finite, "
                                    "non-decreasing time inside the window and a valid mark)", st->path, item,
                          (long long)k, (long long)(at + k), t[k], m ? " or its mark" : "");
        times[k] = t[k];
        if (m) marks[k] = (int32_t)m[k];
    }
    free(t), free(m);
    return rc;
}

/* b receives items idx[0..n-1] as seq_fetch lays them out (sequences.c). */
static int share_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    const share_state *st = s->state;
    const int64_t *off = st->offsets, e0 = off[st->first];
    size_t events = 0;
    for (int i = 0; i < n; i++) events += (size_t)(off[idx[i] + 1] - off[idx[i]]);
    const int with_marks = st->marks != NULL;
    if (!with_marks && b->marks) {
        free(b->marks);
        b->marks = NULL;
    }
    NF_TRY(nf_batch_reserve_events(b, n, events, with_marks));
    nf_h5 *f = NULL;
    int rc = NF_OK;
    int64_t pos = 0;
    b->offsets[0] = 0;
    for (int i = 0; rc == NF_OK && i < n; i++) {
        size_t r = idx[i];
        int64_t a = off[r], len = off[r + 1] - off[r];
        if (!share_owns(s, r)) {
            if (len > 0) rc = read_other(s, &f, r, b->times + pos, with_marks ? b->marks + pos : NULL);
        } else {
            if (len > 0) memcpy(b->times + pos, st->times + (a - e0), (size_t)len * sizeof *b->times);
            if (with_marks)
                for (int64_t k = 0; k < len; k++) b->marks[pos + k] = (int32_t)st->marks[a - e0 + k];
        }
        pos += len;
        b->offsets[i + 1] = pos;
        b->t_start[i] = st->t_start[r];
        b->t_end[i] = st->t_end[r];
        b->idx[i] = r;
    }
    if (f) nf_h5_close(f);
    b->n = n;
    b->num_marks = with_marks ? s->num_marks : 0;
    return rc;
}

static void share_destroy(nf_source *s)
{
    share_state *st = s->state;
    if (st) share_free_arrays(st);
    free(st);
    s->state = NULL;
}

static const nf_source_type share_type = {
    .kind = "sequences",
    .fetch = share_fetch,
    .owns = share_owns,
    .destroy = share_destroy,
};

/* A 1-D array (or n x 1) of all the entries of a dataset. */
static int read_column(nf_h5 *f, const char *path, const char *ds, int is_int, void **x, size_t *n)
{
    size_t rows, cols;
    int rc = is_int ? nf_h5_read_int64(f, ds, (int64_t **)x, &rows, &cols)
                    : nf_h5_read_double(f, ds, (double **)x, &rows, &cols);
    if (rc == NF_OK && cols != 1) {
        free(*x);
        *x = NULL;
        return nf_error(NF_EFORMAT, "%s:%s is a %zu x %zu array (expected a 1-D array)", path, ds, rows, cols);
    }
    *n = rows;
    return rc;
}

/* Entries of a 1-D dataset (or n x 1), without reading it. */
static int column_length(nf_h5 *f, const char *path, const char *ds, size_t *n)
{
    int rank;
    size_t dims[2];
    NF_TRY(nf_h5_shape(f, ds, &rank, dims));
    if (dims[1] != 1)
        return nf_error(NF_EFORMAT, "%s:%s is a %zu x %zu array (expected a 1-D array)", path, ds, dims[0], dims[1]);
    *n = dims[0];
    return NF_OK;
}

/* The mark count: /marks and the root attribute num_marks come together (as the loader wants). */
static int read_num_marks(nf_h5 *f, const char *path, int64_t *num_marks)
{
    *num_marks = 0;
    int has = nf_h5_exists(f, "/marks"), attr = nf_h5_attr_exists(f, "/", "num_marks");
    if (has && !attr)
        return nf_error(NF_EFORMAT, "%s: /marks without the root attribute num_marks (expected the number of mark "
                                    "types, at least 1)", path);
    if (attr) NF_TRY(nf_h5_attr_get_int64(f, "/", "num_marks", num_marks));
    if (!has && attr)
        return nf_error(NF_EFORMAT, "%s: root attribute num_marks = %lld but no dataset /marks (expected both or "
                                    "neither)", path, (long long)*num_marks);
    if (has && (*num_marks < 1 || *num_marks > INT32_MAX))
        return nf_error(NF_EFORMAT, "%s: root attribute num_marks = %lld (expected the number of mark types, "
                                    "1 to 2^31 - 1)", path, (long long)*num_marks);
    return NF_OK;
}

int nf_source_sequences_load_share(nf_source **out, const char *path, int part, int parts)
{
    *out = NULL;
    if (parts < 1 || part < 0 || part >= parts)
        return nf_error(NF_EINVAL, "share %d of %d (expected 0 <= share < parts)", part, parts);
    if (parts == 1) return nf_source_sequences_load(out, path);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    share_state st = {0};
    size_t n_off = 0, n_seq = 0, n_end = 0, n_times = 0, n_marks = 0, rows, cols;
    int64_t num_marks = 0;
    static const char *required[] = {"/times", "/offsets", "/t_start", "/t_end"};
    int rc = nf_sequences_check_format(f, path);
    for (int i = 0; i < 4 && rc == NF_OK; i++)
        if (!nf_h5_exists(f, required[i]))
            rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected event sequences: /times, /offsets, /t_start and "
                                      "/t_end; docs/FORMATS.md)", path, required[i]);
    /* all offsets and windows (16 bytes a sequence); the events' count without reading them */
    if (rc == NF_OK) rc = column_length(f, path, "/times", &n_times);
    if (rc == NF_OK) rc = read_column(f, path, "/offsets", 1, (void **)&st.offsets, &n_off);
    if (rc == NF_OK) rc = read_column(f, path, "/t_start", 0, (void **)&st.t_start, &n_seq);
    if (rc == NF_OK) rc = read_column(f, path, "/t_end", 0, (void **)&st.t_end, &n_end);
    if (rc == NF_OK) rc = read_num_marks(f, path, &num_marks);
    if (rc == NF_OK && num_marks) rc = column_length(f, path, "/marks", &n_marks);
    if (rc == NF_OK && n_seq == 0) rc = nf_error(NF_EDATA, "%s:/t_start: no sequences (expected at least one)", path);
    if (rc == NF_OK && n_end != n_seq)
        rc = nf_error(NF_EFORMAT, "%s:/t_end has %zu entries but /t_start has %zu (expected one window per sequence; "
                                  "is an array truncated?)", path, n_end, n_seq);
    if (rc == NF_OK && n_off != n_seq + 1)
        rc = nf_error(NF_EFORMAT, "%s:/offsets has %zu entries for %zu sequences (expected n_seq + 1 = %zu; is an "
                                  "array truncated?)", path, n_off, n_seq, n_seq + 1);
    if (rc == NF_OK && num_marks && n_marks != n_times)
        rc = nf_error(NF_EFORMAT, "%s:/marks has %zu entries but /times has %zu (expected one mark per event; is an "
                                  "array truncated?)", path, n_marks, n_times);
    if (rc == NF_OK && n_seq < (size_t)parts)
        rc = nf_error(NF_EDATA, "%s: %zu sequences for %d processes (expected at least one each)", path, n_seq, parts);
    /* the offsets and windows of all, before they say which events to read */
    if (rc == NF_OK)
        rc = nf_sequences_validate_share(path, n_seq, st.offsets, st.t_start, st.t_end, NULL, NULL, num_marks,
                                         (long long)n_times, n_seq, n_seq);
    if (rc == NF_OK) { /* sequences [N part / parts, N (part + 1) / parts) */
        st.first = (size_t)((double)n_seq * part / parts);
        st.count = (size_t)((double)n_seq * (part + 1) / parts) - st.first;
        size_t e0 = (size_t)st.offsets[st.first], ne = (size_t)st.offsets[st.first + st.count] - e0;
        rc = nf_h5_read_double_rows(f, "/times", e0, ne, &st.times, &rows, &cols, NULL);
        if (rc == NF_OK && num_marks) rc = nf_h5_read_int64_rows(f, "/marks", e0, ne, &st.marks, &rows, &cols, NULL);
    }
    if (rc == NF_OK)
        rc = nf_sequences_validate_share(path, n_seq, st.offsets, st.t_start, st.t_end, st.times, st.marks, num_marks,
                                         (long long)n_times, st.first, st.first + st.count);
    nf_h5_close(f);
    nf_source *s = NULL;
    share_state *p = NULL;
    if (rc == NF_OK) {
        s = nf_calloc(1, sizeof *s, "data source");
        p = nf_calloc(1, sizeof *p, "data source");
        if (!s || !p) rc = NF_ENOMEM;
    }
    if (rc != NF_OK) {
        free(s), free(p);
        share_free_arrays(&st);
        return rc;
    }
    snprintf(st.path, sizeof st.path, "%s", path);
    *p = st;
    *s = (nf_source){.type = &share_type, .n = n_seq, .num_marks = (int)num_marks, .partial = 1, .state = p};
    snprintf(s->name, sizeof s->name, "%s", path);
    *out = s;
    return NF_OK;
}

/* ---- statistics over processes ------------------------------------------------------------------ */

/* Over the intervals d of the items this process holds: with mean_log NaN, acc[0..3] += count, sum
 * of d, count of d > 0, sum of log d over those; else acc[0] += sum (log d - mean_log)^2 over d > 0.
 * Items in order, events in order: the sums of nf_sequences_stats for a source held whole. */
static int interval_pass(const nf_source *s, double mean_log, double *acc)
{
    enum { CHUNK = 256 };
    size_t idx[CHUNK];
    nf_batch b = {0};
    int rc = NF_OK;
    for (size_t at = 0; rc == NF_OK && at < s->n;) {
        int k = 0;
        for (; at < s->n && k < CHUNK; at++)
            if (nf_source_owns(s, at)) idx[k++] = at;
        if (k == 0) continue;
        rc = nf_source_fetch(s, idx, k, &b);
        for (int i = 0; rc == NF_OK && i < k; i++) {
            double prev = b.t_start[i];
            for (int64_t j = b.offsets[i]; j < b.offsets[i + 1]; j++) {
                double d = b.times[j] - prev;
                prev = b.times[j];
                if (isnan(mean_log)) {
                    acc[0] += 1, acc[1] += d;
                    if (d > 0) acc[2] += 1, acc[3] += log(d);
                } else if (d > 0) {
                    acc[0] += (log(d) - mean_log) * (log(d) - mean_log);
                }
            }
        }
    }
    nf_batch_free(&b);
    return rc;
}

int nf_sequences_stats_shared(const nf_source *s, int (*sum)(void *user, double *buf, size_t n), void *user,
                              size_t *n_events, double *mean_interval, double *mean_log_interval,
                              double *sd_log_interval)
{
    if (!s || !s->type || strcmp(s->type->kind, "sequences"))
        return nf_error(NF_EINVAL, "%s: interval statistics need a source of kind 'sequences', not '%s'",
                        s ? s->name : "(null)", s && s->type ? s->type->kind : "none");
    double acc[4] = {0, 0, 0, 0}, ss = 0;
    NF_TRY(interval_pass(s, NAN, acc));
    if (sum) NF_TRY(sum(user, acc, 4));
    const double count = acc[0], pos = acc[2];
    if (count == 0) return nf_error(NF_EDATA, "%s: no events (interval statistics need at least one)", s->name);
    if (pos == 0)
        return nf_error(NF_EDATA, "%s: all %.0f intervals are 0 (expected at least one positive interval for "
                                  "log-interval statistics)", s->name, count);
    const double mean_log = acc[3] / pos;
    NF_TRY(interval_pass(s, mean_log, &ss));
    if (sum) NF_TRY(sum(user, &ss, 1));
    if (n_events) *n_events = (size_t)count;
    if (mean_interval) *mean_interval = acc[1] / count;
    if (mean_log_interval) *mean_log_interval = mean_log;
    if (sd_log_interval) *sd_log_interval = pos > 1 ? sqrt(ss / (pos - 1)) : 0.0;
    return NF_OK;
}
