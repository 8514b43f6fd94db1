/* datasets/sequences_import.c - event sequences from tables (CSV, NPY) into nf-sequences files.
 *
 * Two layouts:
 *   long  one row per event: a sequence id column, a time column and optionally a mark column
 *         (header optional); rows of one sequence may come in any order and are sorted by time
 *         (ties keep their order); sequences are numbered in order of first appearance.
 *   wide  one row per sequence of equal length (the TPP benchmark .npy files): row i holds the
 *         arrival times of sequence i.
 * Observation windows: t_start (NaN: 0) and t_end (NaN: each sequence's last event time, so no
 * survival interval follows it); a given window must hold every event.  The result is validated
 * and written by nf_sequences_save_truth (with the true log-likelihoods under a given process), so
 * nothing is written when a rule fails.
 */
#include "datasets/sequences_import.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/sequences.h"

typedef struct {
    size_t seq, row;    /* sequence number, row in the table (for stable ties and messages) */
    double t;
} event_key;

static int by_seq_time(const void *a, const void *b)
{
    const event_key *x = a, *y = b;
    if (x->seq != y->seq) return (x->seq > y->seq) - (x->seq < y->seq);
    if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
    return (x->row > y->row) - (x->row < y->row);
}

typedef struct {
    double id;
    size_t seq;
} id_entry;

static int by_id(const void *a, const void *b)
{
    const id_entry *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* ll[i] and ns[i]: log-likelihood of sequence i under p on [ts[i], te[i]], with and without the
 * survival term (nf_tpp_log_lik); errors name the input, the sequence and the process. */
static int true_log_lik(const char *what, const nf_tpp_process *p, size_t n_seq, const int64_t *off,
                        const double *times, const double *ts, const double *te, double *ll, double *ns)
{
    for (size_t i = 0; i < n_seq; i++) {
        size_t len = (size_t)(off[i + 1] - off[i]);
        const double *t = times + off[i];
        int rc = nf_tpp_log_lik(p, len, t, ts[i], te[i], NF_TPP_WINDOW, &ll[i]);
        if (rc == NF_OK) rc = nf_tpp_log_lik(p, len, t, ts[i], te[i], NF_TPP_TO_LAST_EVENT, &ns[i]);
        if (rc != NF_OK)
            return nf_error_context(rc, "%s: sequence %zu under the true process %s(%s)", what, i, p->type->name,
                                    p->options);
    }
    return NF_OK;
}

/* Windows, the truth and the write, shared by both layouts; the arrays are the caller's. */
static int finish(const char *out, const char *what, size_t n_seq, const int64_t *off, const double *times,
                  const int64_t *marks, int num_marks, double t_start, double t_end, const nf_tpp_process *truth,
                  nf_seq_import_summary *sum)
{
    double *ts = malloc(n_seq * sizeof *ts), *te = malloc(n_seq * sizeof *te);
    double *ll = truth ? malloc(2 * n_seq * sizeof *ll) : NULL;
    if (!ts || !te || (truth && !ll)) {
        free(ts), free(te), free(ll);
        return nf_error(NF_ENOMEM, "%s: out of memory for %zu sequences", what, n_seq);
    }
    int rc = NF_OK;
    for (size_t i = 0; i < n_seq && rc == NF_OK; i++) {
        size_t a = (size_t)off[i], b = (size_t)off[i + 1];
        ts[i] = isnan(t_start) ? 0 : t_start;
        te[i] = isnan(t_end) ? (b > a ? times[b - 1] : ts[i]) : t_end;
        if (b > a && times[a] < ts[i])
            rc = nf_error(NF_EDATA, "%s: sequence %zu starts at %g, before the window start %g (give --t-start)", what,
                          i, times[a], ts[i]);
        else if (b > a && times[b - 1] > te[i])
            rc = nf_error(NF_EDATA, "%s: sequence %zu has an event at %g, after the window end %g (give a later "
                                    "--t-end)", what, i, times[b - 1], te[i]);
    }
    nf_sequences_truth tr = {.seed = -1};
    if (rc == NF_OK && truth) {
        rc = true_log_lik(what, truth, n_seq, off, times, ts, te, ll, ll + n_seq);
        tr = (nf_sequences_truth){.log_lik = ll, .log_lik_no_survival = ll + n_seq, .process = truth->type->name,
                                  .options = truth->options, .generator = "import", .seed = -1};
    }
    if (rc == NF_OK) rc = nf_sequences_save_truth(out, n_seq, off, times, ts, te, marks, num_marks, truth ? &tr : NULL);
    if (rc == NF_OK && sum) {
        sum->has_truth = truth != NULL;
        sum->true_log_lik = sum->true_log_lik_no_survival = 0;
        for (size_t i = 0; truth && i < n_seq; i++) {
            sum->true_log_lik += ll[i];
            sum->true_log_lik_no_survival += ll[n_seq + i];
        }
        sum->n_seq = n_seq;
        sum->n_events = (size_t)off[n_seq];
        sum->num_marks = num_marks;
        sum->t_end_is_last = isnan(t_end);
        sum->t_start = isnan(t_start) ? 0 : t_start;
        sum->t_end = t_end;
    }
    free(ts), free(te), free(ll);
    return rc;
}

int nf_sequences_import_long(const char *out, const char *what, const nf_table *t, int id_col, int time_col,
                             int mark_col, double t_start, double t_end, const nf_tpp_process *truth,
                             nf_seq_import_summary *sum)
{
    if (t->n == 0) return nf_error(NF_EDATA, "%s: no events (expected rows of: sequence id, time[, mark])", what);
    int cols[3] = {id_col, time_col, mark_col};
    for (int k = 0; k < 3; k++)
        if ((k < 2 || cols[k] >= 0) && (cols[k] < 0 || (size_t)cols[k] >= t->d))
            return nf_error(NF_EINVAL, "%s: column %d does not exist (the table has %zu columns)", what, cols[k], t->d);
    size_t n = t->n;
    event_key *ev = malloc(n * sizeof *ev);
    id_entry *ids = malloc(n * sizeof *ids);
    int64_t *off = NULL, *marks = NULL;
    double *times = malloc(n * sizeof *times);
    int rc = ev && ids && times ? NF_OK : nf_error(NF_ENOMEM, "%s: out of memory for %zu events", what, n);
    /* number the sequences by first appearance: sort (id, row), then walk */
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        double id = t->x[i * t->d + id_col], tm = t->x[i * t->d + time_col];
        if (!isfinite(id) || !isfinite(tm))
            rc = nf_error(NF_EDATA, "%s: row %zu: %s is %g (expected a finite number)", what, i,
                          !isfinite(id) ? "the sequence id" : "the time", !isfinite(id) ? id : tm);
        ids[i] = (id_entry){.id = id, .seq = i};
    }
    /* number the sequences by first appearance: group equal ids, rank the groups by first row */
    size_t n_seq = 0;
    size_t *num = rc == NF_OK ? malloc(n * sizeof *num) : NULL;
    id_entry *groups = rc == NF_OK ? malloc(n * sizeof *groups) : NULL; /* (first row, group) */
    if (rc == NF_OK && (!num || !groups)) rc = nf_error(NF_ENOMEM, "%s: out of memory", what);
    if (rc == NF_OK) {
        qsort(ids, n, sizeof *ids, by_id);
        for (size_t i = 0; i < n;) {
            size_t j = i, lo = ids[i].seq;
            for (; j < n && ids[j].id == ids[i].id; j++) lo = ids[j].seq < lo ? ids[j].seq : lo;
            for (size_t k = i; k < j; k++) num[ids[k].seq] = n_seq; /* group number for now */
            groups[n_seq] = (id_entry){.id = (double)lo, .seq = n_seq};
            n_seq++;
            i = j;
        }
        qsort(groups, n_seq, sizeof *groups, by_id); /* by first row (exact in a double below 2^53) */
        size_t *rank = malloc(n_seq * sizeof *rank); /* group -> sequence number */
        if (!rank) rc = nf_error(NF_ENOMEM, "%s: out of memory", what);
        for (size_t r = 0; rc == NF_OK && r < n_seq; r++) rank[groups[r].seq] = r;
        for (size_t i = 0; rc == NF_OK && i < n; i++)
            ev[i] = (event_key){.seq = rank[num[i]], .row = i, .t = t->x[i * t->d + time_col]};
        free(rank);
    }
    free(num), free(groups);
    if (rc == NF_OK) {
        qsort(ev, n, sizeof *ev, by_seq_time);
        off = calloc(n_seq + 1, sizeof *off);
        if (mark_col >= 0) marks = malloc(n * sizeof *marks);
        if (!off || (mark_col >= 0 && !marks)) rc = nf_error(NF_ENOMEM, "%s: out of memory", what);
    }
    int num_marks = 0;
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        times[i] = ev[i].t;
        off[ev[i].seq + 1]++;
        if (marks) {
            double m = t->x[ev[i].row * t->d + mark_col];
            if (!(m >= 0 && m == floor(m) && m < 2147483647.0))
                rc = nf_error(NF_EDATA, "%s: row %zu: mark %g (expected a whole number >= 0)", what, ev[i].row, m);
            else {
                marks[i] = (int64_t)m;
                if (m + 1 > num_marks) num_marks = (int)m + 1;
            }
        }
    }
    for (size_t i = 0; rc == NF_OK && i < n_seq; i++) off[i + 1] += off[i];
    if (rc == NF_OK) rc = finish(out, what, n_seq, off, times, marks, num_marks, t_start, t_end, truth, sum);
    free(ev), free(ids), free(times), free(off), free(marks);
    return rc;
}

int nf_sequences_import_wide(const char *out, const char *what, const nf_table *t, double t_start, double t_end,
                             const nf_tpp_process *truth, nf_seq_import_summary *sum)
{
    if (t->n == 0 || t->d == 0) return nf_error(NF_EDATA, "%s: no sequences (expected one row of arrival times per sequence)", what);
    int64_t *off = malloc((t->n + 1) * sizeof *off);
    if (!off) return nf_error(NF_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i <= t->n; i++) off[i] = (int64_t)(i * t->d);
    for (size_t i = 0; i < t->n; i++)
        for (size_t j = 0; j < t->d; j++) {
            double v = t->x[i * t->d + j];
            if (!isfinite(v) || (j > 0 && v < t->x[i * t->d + j - 1])) {
                free(off);
                return nf_error(NF_EDATA, "%s: sequence %zu, event %zu: time %g (expected finite, non-decreasing times)",
                                what, i, j, v);
            }
        }
    int rc = finish(out, what, t->n, off, t->x, NULL, 0, t_start, t_end, truth, sum);
    free(off);
    return rc;
}
