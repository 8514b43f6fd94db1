/* datasets/sequences.c - the "sequences" source kind: ragged event sequences (temporal point
 * processes) in one flat array of times (and marks) cut by offsets, with the truth (each
 * sequence's exact log-likelihood under a known process) when there is one; loading, validation,
 * saving, the matrix import and interval statistics. */
#include "datasets/sequences.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/sequences_internal.h"

/* ---- validation -------------------------------------------------------------------------------- */

/* Where arrays came from, for messages: a file ("seq.h5:/times: sequence 3, event 7 (entry 25)"),
 * caller arrays ("times array: sequence 3, ...") or a matrix of arrival times ("hawkes1.npy:
 * sequence 3, event 7", one row per sequence). */
enum origin_kind { FROM_FILE, FROM_ARRAYS, FROM_MATRIX };
typedef struct {
    enum origin_kind kind;
    const char *name;  /* the path or the matrix's name; unused for arrays */
} origin;

typedef struct {
    size_t n_seq;
    const int64_t *offsets;       /* (n_seq + 1) */
    const double *times;          /* (offsets[n_seq]) */
    const double *t_start, *t_end;/* (n_seq) */
    const int64_t *marks;         /* (offsets[n_seq]) or NULL */
    int64_t num_marks;            /* >= 1 with marks */
    /* a share (sequences_share.c): only sequences [ev_lo, ev_hi) have their events in times and
     * marks, from entry offsets[ev_lo] on; ev_hi 0: all sequences, from entry 0 */
    size_t ev_lo, ev_hi;
} seq_arrays;

/* "seq.h5:/times", "times array" or "hawkes1.npy" */
static const char *label(char *buf, size_t size, const origin *o, const char *ds)
{
    if (o->kind == FROM_FILE) snprintf(buf, size, "%s:/%s", o->name, ds);
    else if (o->kind == FROM_ARRAYS) snprintf(buf, size, "%s array", ds);
    else snprintf(buf, size, "%s", o->name);
    return buf;
}

/* "sequence 3, event 7 (entry 25)": the event's position in its sequence and in the flat array */
static const char *event_at(char *buf, size_t size, const origin *o, size_t i, int64_t k, int64_t j)
{
    if (o->kind == FROM_MATRIX) snprintf(buf, size, "sequence %zu, event %lld", i, (long long)k);
    else snprintf(buf, size, "sequence %zu, event %lld (entry %lld)", i, (long long)k, (long long)j);
    return buf;
}

/* NF_EDATA for event k of sequence i (entry j of the flat arrays): "<where>: <event>: <what>". */
static int event_error(const origin *o, const char *ds, size_t i, int64_t k, int64_t j, const char *what)
{
    char w[1200], e[96];
    return nf_error(NF_EDATA, "%s: %s: %s", label(w, sizeof w, o, ds), event_at(e, sizeof e, o, i, k, j), what);
}

/* The shortest %g form that reads back as v, so 2.9 prints as 2.9 and 1000.0001 does not print as 1000. */
static const char *num(char buf[32], double v)
{
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, 32, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* Check arrays against the format's rules; the first problem is the error.  n_times is the length of
 * the times (and marks) array when known (a file), or -1 (caller arrays: offsets[n_seq] says it). */
static int validate(const seq_arrays *a, long long n_times, const origin *o)
{
    char w[1200], b1[32], b2[32];
    const size_t n = a->n_seq;
    const int64_t *off = a->offsets;
    if (n == 0)
        return nf_error(NF_EDATA, "%s: no sequences (expected at least one)",
                        o->kind == FROM_ARRAYS ? "sequences" : label(w, sizeof w, o, "t_start"));
    if (off[0] != 0)
        return nf_error(NF_EDATA, "%s: offsets[0] = %lld (expected 0: sequence 0 starts at the first event)",
                        label(w, sizeof w, o, "offsets"), (long long)off[0]);
    for (size_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return nf_error(NF_EDATA, "%s: sequence %zu: offsets[%zu] = %lld is below offsets[%zu] = %lld (expected "
                                      "non-decreasing offsets: a sequence cannot end before it starts)",
                            label(w, sizeof w, o, "offsets"), i, i + 1, (long long)off[i + 1], i, (long long)off[i]);
    if (n_times >= 0 && off[n] != n_times) {
        char t[1200];
        return nf_error(NF_EFORMAT, "%s: offsets[%zu] = %lld ends the last sequence, but %s has %lld events "
                                    "(expected the two to agree; is an array truncated?)",
                        label(w, sizeof w, o, "offsets"), n, (long long)off[n], label(t, sizeof t, o, "times"),
                        n_times);
    }
    for (size_t i = 0; i < n; i++) {
        double ts = a->t_start[i], te = a->t_end[i];
        if (!isfinite(ts))
            return nf_error(NF_EDATA, "%s: sequence %zu: t_start = %s (expected a finite number)",
                            label(w, sizeof w, o, "t_start"), i, num(b1, ts));
        if (!isfinite(te))
            return nf_error(NF_EDATA, "%s: sequence %zu: t_end = %s (expected a finite number)",
                            label(w, sizeof w, o, "t_end"), i, num(b1, te));
        if (te < ts)
            return nf_error(NF_EDATA, "%s: sequence %zu: the window [%s, %s] ends before it starts (expected "
                                      "t_start <= t_end)", label(w, sizeof w, o, "t_end"), i, num(b1, ts), num(b2, te));
    }
    const size_t lo = a->ev_hi ? a->ev_lo : 0, hi = a->ev_hi ? a->ev_hi : n;
    const double *times = a->times;   /* entry j of the file is times[j - e0] */
    const int64_t *marks = a->marks, e0 = a->ev_hi ? off[lo] : 0;
    for (size_t i = lo; i < hi; i++) {
        double ts = a->t_start[i], te = a->t_end[i];
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            double t = times[j - e0];
            int64_t k = j - off[i];
            if (!isfinite(t)) {
                snprintf(w, sizeof w, "time %s (expected a finite number)", num(b1, t));
                return event_error(o, "times", i, k, j, w);
            }
            if (k > 0 && t < times[j - 1 - e0]) {
                snprintf(w, sizeof w, "time %s is before the previous event's %s (expected non-decreasing times)",
                         num(b1, t), num(b2, times[j - 1 - e0]));
                return event_error(o, "times", i, k, j, w);
            }
            if (t < ts || t > te) {
                snprintf(w, sizeof w, "time %s is %s the window's %s = %s (expected t_start <= time <= t_end)",
                         num(b1, t), t < ts ? "before" : "after", t < ts ? "start t_start" : "end t_end",
                         num(b2, t < ts ? ts : te));
                return event_error(o, "times", i, k, j, w);
            }
            if (marks && (marks[j - e0] < 0 || marks[j - e0] >= a->num_marks)) {
                snprintf(w, sizeof w, "mark %lld (expected 0 <= mark < num_marks = %lld)", (long long)marks[j - e0],
                         (long long)a->num_marks);
                return event_error(o, "marks", i, k, j, w);
            }
        }
    }
    return NF_OK;
}

/* Arguments of save and wrap: arrays present, num_marks consistent with marks. */
static int check_args(const char *what, size_t n_seq, const int64_t *offsets, const double *times,
                      const double *t_start, const double *t_end, const int64_t *marks, int num_marks)
{
    if (!offsets || !t_start || !t_end)
        return nf_error(NF_EINVAL, "%s: offsets, t_start and t_end are required", what);
    if (n_seq > 0 && offsets[n_seq] > 0 && !times)
        return nf_error(NF_EINVAL, "%s: %lld events without a times array", what, (long long)offsets[n_seq]);
    if (marks && num_marks < 1)
        return nf_error(NF_EINVAL, "%s: marks with num_marks = %d (expected at least 1 mark type)", what, num_marks);
    if (!marks && num_marks != 0)
        return nf_error(NF_EINVAL, "%s: num_marks = %d without marks (expected 0 when there are no marks)", what,
                        num_marks);
    return NF_OK;
}

/* ---- the source kind --------------------------------------------------------------------------- */

/* The names that go with a truth (nf_sequences_truth's strings, held by value so views copy them). */
typedef struct {
    char process[64], options[256], generator[64];
    long long seed;
} truth_names;

typedef struct {
    int64_t *offsets;          /* (n + 1) positions in times/marks; a view's start above 0 */
    double *times;             /* the owner's flat event times */
    int64_t *marks;            /* the owner's marks, or NULL */
    double *t_start, *t_end;   /* (n) */
    double *ll_true;           /* (n) the true log-likelihoods ("window"), or NULL */
    double *ll_true_ns;        /* (n) the same without the survival term, or NULL */
    truth_names names;         /* with ll_true */
    int owns;                  /* 1: the arrays are freed with the source */
} seq_state;

static void state_free_arrays(seq_state *st)
{
    free(st->offsets), free(st->times), free(st->marks), free(st->t_start), free(st->t_end);
    free(st->ll_true), free(st->ll_true_ns);
}

/* b receives items idx[0..n-1]: their events back to back, offsets from 0, marks narrowed to int32
 * (num_marks fits an int, so every valid mark does). */
static int seq_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    const seq_state *st = s->state;
    const int64_t *off = st->offsets;
    size_t events = 0;
    for (int i = 0; i < n; i++) events += (size_t)(off[idx[i] + 1] - off[idx[i]]);
    const int with_marks = st->marks != NULL;
    if (!with_marks && b->marks) { /* a batch reused from a marked source: marks must read NULL */
        free(b->marks);
        b->marks = NULL;
    }
    NF_TRY(nf_batch_reserve_events(b, n, events, with_marks));
    int64_t pos = 0;
    b->offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t r = idx[i];
        int64_t a = off[r], len = off[r + 1] - off[r];
        if (len > 0) memcpy(b->times + pos, st->times + a, (size_t)len * sizeof *b->times);
        if (with_marks)
            for (int64_t k = 0; k < len; k++) b->marks[pos + k] = (int32_t)st->marks[a + k];
        pos += len;
        b->offsets[i + 1] = pos;
        b->t_start[i] = st->t_start[r];
        b->t_end[i] = st->t_end[r];
        b->idx[i] = r;
    }
    b->n = n;
    b->num_marks = with_marks ? s->num_marks : 0;
    return NF_OK;
}

/* Item i becomes the old item perm[i].  The sequences are gathered into new arrays; a source that
 * owns its arrays copies them back (so its views see the new order, as views of rows do), while a
 * wrapped source or a view keeps the new arrays as its own and leaves the caller's untouched. */
static int seq_reorder(nf_source *s, size_t *perm)
{
    seq_state *st = s->state;
    const size_t n = s->n;
    const int64_t *off = st->offsets;
    const size_t events = (size_t)(off[n] - off[0]);
    int64_t *o = malloc((n + 1) * sizeof *o), *m = NULL;
    double *t = malloc((events ? events : 1) * sizeof *t);
    double *ts = malloc((n ? n : 1) * sizeof *ts), *te = malloc((n ? n : 1) * sizeof *te);
    double *lt = st->ll_true ? malloc((n ? n : 1) * sizeof *lt) : NULL;
    double *ln = st->ll_true_ns ? malloc((n ? n : 1) * sizeof *ln) : NULL;
    if (st->marks) m = malloc((events ? events : 1) * sizeof *m);
    if (!o || !t || !ts || !te || (st->marks && !m) || (st->ll_true && !lt) || (st->ll_true_ns && !ln)) {
        free(o), free(m), free(t), free(ts), free(te), free(lt), free(ln);
        return nf_error(NF_ENOMEM, "%s: out of memory reordering %zu sequences (%zu events)", s->name, n, events);
    }
    o[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = perm[i];
        int64_t a = off[r], len = off[r + 1] - off[r];
        if (len > 0) memcpy(t + o[i], st->times + a, (size_t)len * sizeof *t);
        if (m && len > 0) memcpy(m + o[i], st->marks + a, (size_t)len * sizeof *m);
        o[i + 1] = o[i] + len;
        ts[i] = st->t_start[r];
        te[i] = st->t_end[r];
        if (lt) lt[i] = st->ll_true[r];
        if (ln) ln[i] = st->ll_true_ns[r];
    }
    if (st->owns) { /* an owner's offsets start at 0 and its arrays hold exactly these events */
        memcpy(st->offsets, o, (n + 1) * sizeof *o);
        if (events) memcpy(st->times, t, events * sizeof *t);
        if (m && events) memcpy(st->marks, m, events * sizeof *m);
        memcpy(st->t_start, ts, n * sizeof *ts);
        memcpy(st->t_end, te, n * sizeof *te);
        if (lt) memcpy(st->ll_true, lt, n * sizeof *lt);
        if (ln) memcpy(st->ll_true_ns, ln, n * sizeof *ln);
        free(o), free(m), free(t), free(ts), free(te), free(lt), free(ln);
    } else {
        *st = (seq_state){.offsets = o, .times = t, .marks = m, .t_start = ts, .t_end = te, .ll_true = lt,
                          .ll_true_ns = ln, .names = st->names, .owns = 1};
    }
    return NF_OK;
}

static void seq_destroy(nf_source *s)
{
    seq_state *st = s->state;
    if (st && st->owns) state_free_arrays(st);
    free(st);
    s->state = NULL;
}

static int seq_range(const nf_source *s, size_t first, size_t n, nf_source **out);

static const nf_source_type seq_type = {
    .kind = "sequences",
    .fetch = seq_fetch,
    .reorder = seq_reorder,
    .range = seq_range,
    .destroy = seq_destroy,
};

/* A source over st (taken over: freed here on failure when st.owns). */
static int seq_new(nf_source **out, const char *name, size_t n, int num_marks, seq_state st)
{
    *out = NULL;
    nf_source *s = nf_calloc(1, sizeof *s, "data source");
    seq_state *p = nf_calloc(1, sizeof *p, "data source");
    if (!s || !p) {
        free(s), free(p);
        if (st.owns) state_free_arrays(&st);
        return NF_ENOMEM;
    }
    *p = st;
    *s = (nf_source){.type = &seq_type, .n = n, .num_marks = st.marks ? num_marks : 0, .state = p};
    snprintf(s->name, sizeof s->name, "%s", name);
    *out = s;
    return NF_OK;
}

/* A view: offsets point into the parent's (still indexing its flat arrays), nothing is copied. */
static int seq_range(const nf_source *s, size_t first, size_t n, nf_source **out)
{
    const seq_state *st = s->state;
    if (first > s->n || n > s->n - first)
        return nf_error(NF_EINVAL, "%s: sequences %zu..%zu do not exist (the source has %zu)", s->name, first,
                        first + n, s->n);
    seq_state v = {.offsets = st->offsets + first,
                   .times = st->times,
                   .marks = st->marks,
                   .t_start = st->t_start + first,
                   .t_end = st->t_end + first,
                   .ll_true = st->ll_true ? st->ll_true + first : NULL,
                   .ll_true_ns = st->ll_true_ns ? st->ll_true_ns + first : NULL,
                   .names = st->names,
                   .owns = 0};
    return seq_new(out, s->name, n, s->num_marks, v);
}

nf_sequences nf_source_sequences(const nf_source *s)
{
    nf_sequences q = {0};
    if (!s || s->type != &seq_type) return q;
    const seq_state *st = s->state;
    q.offsets = st->offsets;
    q.times = st->times;
    q.marks = st->marks;
    q.t_start = st->t_start;
    q.t_end = st->t_end;
    return q;
}

nf_sequences_truth nf_source_sequences_truth(const nf_source *s)
{
    nf_sequences_truth t = {.seed = -1};
    if (!s || s->type != &seq_type) return t;
    const seq_state *st = s->state;
    if (!st->ll_true) return t;
    t.log_lik = st->ll_true;
    t.log_lik_no_survival = st->ll_true_ns;
    t.process = st->names.process;
    t.options = st->names.options;
    t.generator = st->names.generator;
    t.seed = st->names.seed;
    return t;
}

int nf_source_sequences_wrap(nf_source **s, size_t n_seq, const int64_t *offsets, const double *times,
                             const double *t_start, const double *t_end, const int64_t *marks, int num_marks)
{
    *s = NULL;
    NF_TRY(check_args("sequences", n_seq, offsets, times, t_start, t_end, marks, num_marks));
    seq_arrays a = {.n_seq = n_seq, .offsets = offsets, .times = times, .t_start = t_start, .t_end = t_end,
                    .marks = marks, .num_marks = num_marks};
    origin o = {FROM_ARRAYS, NULL};
    NF_TRY(validate(&a, -1, &o));
    /* the source never writes through these: reorder gathers into arrays of its own */
    seq_state st = {.offsets = (int64_t *)offsets,
                    .times = (double *)times,
                    .marks = (int64_t *)marks,
                    .t_start = (double *)t_start,
                    .t_end = (double *)t_end,
                    .owns = 0};
    return seq_new(s, "sequences", n_seq, num_marks, st);
}

/* ---- files ------------------------------------------------------------------------------------- */

/* The true log-likelihoods (n each; ns may be NULL) must be finite numbers. */
static int validate_truth(const char *path, size_t n, const double *ll, const double *ns)
{
    char b[32];
    for (int k = 0; k < 2; k++) {
        const double *v = k ? ns : ll;
        for (size_t i = 0; v && i < n; i++)
            if (!isfinite(v[i]))
                return nf_error(NF_EDATA, "%s:/%s: sequence %zu: true log-likelihood %s (expected a finite number)",
                                path, k ? "log_lik_true_no_survival" : "log_lik_true", i, num(b, v[i]));
    }
    return NF_OK;
}

static int write_truth(nf_h5 *f, size_t n_seq, const nf_sequences_truth *t)
{
    NF_TRY(nf_h5_write_double(f, "/log_lik_true", t->log_lik, n_seq, 0));
    NF_TRY(nf_h5_attr_set_string(f, "/", "log_lik_true_convention", NF_SEQUENCES_CONV_WINDOW));
    if (t->log_lik_no_survival) {
        NF_TRY(nf_h5_write_double(f, "/log_lik_true_no_survival", t->log_lik_no_survival, n_seq, 0));
        NF_TRY(nf_h5_attr_set_string(f, "/", "log_lik_true_no_survival_convention", NF_SEQUENCES_CONV_TO_LAST));
    }
    if (t->process && t->process[0]) NF_TRY(nf_h5_attr_set_string(f, "/", "true_process", t->process));
    if (t->options && t->options[0]) NF_TRY(nf_h5_attr_set_string(f, "/", "true_process_options", t->options));
    if (t->generator && t->generator[0]) NF_TRY(nf_h5_attr_set_string(f, "/", "generator", t->generator));
    if (t->seed >= 0) NF_TRY(nf_h5_attr_set_int64(f, "/", "seed", (int64_t)t->seed));
    return NF_OK;
}

/* The datasets of checked arrays (and their truth) into a file being written. */
static int write_arrays(nf_h5 *f, const seq_arrays *a, const nf_sequences_truth *truth)
{
    size_t n_seq = a->n_seq, events = (size_t)a->offsets[n_seq];
    NF_TRY(nf_h5_write_double(f, "/times", a->times, events, 0));
    NF_TRY(nf_h5_write_int64(f, "/offsets", a->offsets, n_seq + 1, 0));
    NF_TRY(nf_h5_write_double(f, "/t_start", a->t_start, n_seq, 0));
    NF_TRY(nf_h5_write_double(f, "/t_end", a->t_end, n_seq, 0));
    if (a->marks) NF_TRY(nf_h5_write_int64(f, "/marks", a->marks, events, 0));
    if (a->marks) NF_TRY(nf_h5_attr_set_int64(f, "/", "num_marks", a->num_marks));
    if (truth) NF_TRY(write_truth(f, n_seq, truth));
    return NF_OK;
}

int nf_sequences_save(const char *path, size_t n_seq, const int64_t *offsets, const double *times,
                      const double *t_start, const double *t_end, const int64_t *marks, int num_marks)
{
    return nf_sequences_save_truth(path, n_seq, offsets, times, t_start, t_end, marks, num_marks, NULL);
}

int nf_sequences_save_truth(const char *path, size_t n_seq, const int64_t *offsets, const double *times,
                            const double *t_start, const double *t_end, const int64_t *marks, int num_marks,
                            const nf_sequences_truth *truth)
{
    NF_TRY(check_args(path, n_seq, offsets, times, t_start, t_end, marks, num_marks));
    seq_arrays a = {.n_seq = n_seq, .offsets = offsets, .times = times, .t_start = t_start, .t_end = t_end,
                    .marks = marks, .num_marks = num_marks};
    origin o = {FROM_FILE, path};
    NF_TRY(validate(&a, -1, &o));
    if (truth && !truth->log_lik)
        return nf_error(NF_EINVAL, "%s: a truth without log-likelihoods (expected one per sequence)", path);
    if (truth) NF_TRY(validate_truth(path, n_seq, truth->log_lik, truth->log_lik_no_survival));
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, NF_SEQUENCES_FORMAT, NF_SEQUENCES_VERSION));
    int rc = write_arrays(f, &a, truth);
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

int nf_source_sequences_save(const char *path, const nf_source *s)
{
    if (!s || s->type != &seq_type)
        return nf_error(NF_EINVAL, "%s: cannot save a source of kind '%s' as sequences", path,
                        s && s->type ? s->type->kind : "none");
    const seq_state *st = s->state;
    nf_sequences_truth truth = nf_source_sequences_truth(s);
    const nf_sequences_truth *tp = truth.log_lik ? &truth : NULL;
    const int64_t base = st->offsets[0];
    if (base == 0)
        return nf_sequences_save_truth(path, s->n, st->offsets, st->times, st->t_start, st->t_end, st->marks,
                                       s->num_marks, tp);
    int64_t *o = malloc((s->n + 1) * sizeof *o);
    if (!o) return nf_error(NF_ENOMEM, "%s: out of memory saving %zu sequences", path, s->n);
    for (size_t i = 0; i <= s->n; i++) o[i] = st->offsets[i] - base;
    int rc = nf_sequences_save_truth(path, s->n, o, st->times + base, st->t_start, st->t_end,
                                     st->marks ? st->marks + base : NULL, s->num_marks, tp);
    free(o);
    return rc;
}

/* Items idx[0..n-1] of a loaded (validated) sequences source, gathered into arrays of their own:
 * a (pointing into the allocations, freed by free_gathered) and the truth when s has one. */
static int gather_items(const nf_source *s, const size_t *idx, size_t n, seq_arrays *a, nf_sequences_truth *tr,
                        int *has_truth)
{
    const seq_state *st = s->state;
    const int64_t *off = st->offsets;
    size_t events = 0;
    for (size_t i = 0; i < n; i++) events += (size_t)(off[idx[i] + 1] - off[idx[i]]);
    int64_t *o = malloc((n + 1) * sizeof *o), *m = st->marks ? malloc((events ? events : 1) * sizeof *m) : NULL;
    double *t = malloc((events ? events : 1) * sizeof *t), *w = malloc(4 * (n ? n : 1) * sizeof *w);
    if (!o || !t || !w || (st->marks && !m)) {
        free(o), free(m), free(t), free(w);
        return nf_error(NF_ENOMEM, "%s: out of memory for %zu sequences (%zu events)", s->name, n, events);
    }
    o[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = idx[i];
        int64_t from = off[r], len = off[r + 1] - off[r];
        if (len > 0) memcpy(t + o[i], st->times + from, (size_t)len * sizeof *t);
        if (m && len > 0) memcpy(m + o[i], st->marks + from, (size_t)len * sizeof *m);
        o[i + 1] = o[i] + len;
        w[i] = st->t_start[r];
        w[n + i] = st->t_end[r];
        w[2 * n + i] = st->ll_true ? st->ll_true[r] : 0;
        w[3 * n + i] = st->ll_true_ns ? st->ll_true_ns[r] : 0;
    }
    *a = (seq_arrays){.n_seq = n, .offsets = o, .times = t, .t_start = w, .t_end = w + n, .marks = m,
                      .num_marks = s->num_marks};
    *has_truth = st->ll_true != NULL;
    *tr = nf_source_sequences_truth(s);
    tr->log_lik = w + 2 * n;
    tr->log_lik_no_survival = st->ll_true_ns ? w + 3 * n : NULL;
    return NF_OK;
}

static void free_gathered(seq_arrays *a)
{
    free((void *)a->offsets), free((void *)a->times), free((void *)a->marks), free((void *)a->t_start);
}

int nf_sequences_split_save(const nf_source *s, const size_t *idx, int n_parts, const size_t *count,
                            const char *const *path, const char *const *part, const char *split_of, uint64_t seed)
{
    if (!s || s->type != &seq_type)
        return nf_error(NF_EINVAL, "%s: cannot split a source of kind '%s' as sequences", split_of ? split_of : "split",
                        s && s->type ? s->type->kind : "none");
    size_t total = 0;
    for (int k = 0; k < n_parts; k++) total += count[k];
    if (total > s->n)
        return nf_error(NF_EINVAL, "%s: parts of %zu sequences in all, but it has %zu", s->name, total, s->n);
    nf_h5 *f[8] = {NULL};
    if (n_parts > 8) return nf_error(NF_EINVAL, "%s: %d parts (at most 8)", s->name, n_parts);
    int rc = NF_OK;
    size_t at = 0;
    /* every part written before any is renamed into place; a part of no sequences is not written */
    for (int k = 0; k < n_parts && rc == NF_OK; k++) {
        if (count[k] == 0) continue;
        seq_arrays a = {0};
        nf_sequences_truth tr = {0};
        int has_truth = 0;
        rc = gather_items(s, idx + at, count[k], &a, &tr, &has_truth);
        if (rc != NF_OK) break;
        rc = nf_h5_create(&f[k], path[k], NF_SEQUENCES_FORMAT, NF_SEQUENCES_VERSION);
        if (rc == NF_OK) rc = write_arrays(f[k], &a, has_truth ? &tr : NULL);
        if (rc == NF_OK && part) rc = nf_h5_attr_set_string(f[k], "/", "split", part[k]);
        if (rc == NF_OK && split_of) rc = nf_h5_attr_set_string(f[k], "/", "split_of", split_of);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f[k], "/", "split_seed", (int64_t)seed);
        free_gathered(&a);
        at += count[k];
    }
    for (int k = 0; k < n_parts; k++) {
        if (!f[k]) continue;
        if (rc == NF_OK) rc = nf_h5_commit(f[k]);
        else nf_h5_abort(f[k]);
    }
    return rc;
}

/* Read a 1-D dataset (or n x 1) of doubles or int64s; *n receives its length. */
static int read_vec(nf_h5 *f, const char *path, const char *ds, int is_int, void **x, size_t *n)
{
    size_t rows, cols;
    int rc = is_int ? nf_h5_read_int64(f, ds, (int64_t **)x, &rows, &cols)
                    : nf_h5_read_double(f, ds, (double **)x, &rows, &cols);
    if (rc != NF_OK) return rc;
    if (cols != 1) {
        free(*x);
        *x = NULL;
        return nf_error(NF_EFORMAT, "%s:%s is a %zu x %zu array (expected a 1-D array)", path, ds, rows, cols);
    }
    *n = rows;
    return NF_OK;
}

/* An nf-sequences file of a version this reader knows, or a file with no format attribute. */
static int check_format(nf_h5 *f, const char *path)
{
    if (!nf_h5_attr_exists(f, "/", "format")) return NF_OK;
    char have[128];
    NF_TRY(nf_h5_attr_get_string(f, "/", "format", have, sizeof have));
    if (strcmp(have, NF_SEQUENCES_FORMAT) != 0)
        return nf_error(NF_EFORMAT, "%s: format '%s' but expected '%s' (event sequences: nf tpp import, nf data "
                        "import --sequences or nf data make tpp-... write them; docs/FORMATS.md)", path, have,
                        NF_SEQUENCES_FORMAT);
    if (nf_h5_format_version(f) > NF_SEQUENCES_VERSION)
        return nf_error(NF_EFORMAT, "%s: format version %d is newer than this nf understands (%d); upgrade nf", path,
                        nf_h5_format_version(f), NF_SEQUENCES_VERSION);
    return NF_OK;
}

int nf_sequences_check_format(nf_h5 *f, const char *path) { return check_format(f, path); }

int nf_sequences_validate_share(const char *path, size_t n_seq, const int64_t *offsets, const double *t_start,
                                const double *t_end, const double *times, const int64_t *marks, int64_t num_marks,
                                long long n_times, size_t lo, size_t hi)
{
    seq_arrays a = {.n_seq = n_seq, .offsets = offsets, .times = times, .t_start = t_start, .t_end = t_end,
                    .marks = marks, .num_marks = num_marks, .ev_lo = lo, .ev_hi = hi};
    origin o = {FROM_FILE, path};
    return validate(&a, n_times, &o);
}

/* Root attribute name of f as a string into buf ("" when absent). */
static int opt_string(nf_h5 *f, const char *name, char *buf, size_t size)
{
    buf[0] = '\0';
    return nf_h5_attr_exists(f, "/", name) ? nf_h5_attr_get_string(f, "/", name, buf, size) : NF_OK;
}

/* The optional truth: /log_lik_true (window convention, the attribute saying so when present),
 * /log_lik_true_no_survival (only with it) and the names.  Lengths are checked by the caller. */
static int read_truth(nf_h5 *f, const char *path, seq_state *st, size_t *n_ll, size_t *n_ns)
{
    int has = nf_h5_exists(f, "/log_lik_true"), has_ns = nf_h5_exists(f, "/log_lik_true_no_survival");
    if (!has && has_ns)
        return nf_error(NF_EFORMAT, "%s: /log_lik_true_no_survival without /log_lik_true (expected both or only "
                                    "/log_lik_true; docs/FORMATS.md)", path);
    if (!has) return NF_OK;
    static const struct {
        const char *attr, *want;
    } conv[] = {{"log_lik_true_convention", NF_SEQUENCES_CONV_WINDOW},
                {"log_lik_true_no_survival_convention", NF_SEQUENCES_CONV_TO_LAST}};
    char c[64];
    for (int k = 0; k < 2; k++) {
        NF_TRY(opt_string(f, conv[k].attr, c, sizeof c));
        if (c[0] && strcmp(c, conv[k].want) != 0)
            return nf_error(NF_EFORMAT, "%s: root attribute %s = '%s' (expected '%s'; docs/FORMATS.md)", path,
                            conv[k].attr, c, conv[k].want);
    }
    NF_TRY(read_vec(f, path, "/log_lik_true", 0, (void **)&st->ll_true, n_ll));
    if (has_ns) NF_TRY(read_vec(f, path, "/log_lik_true_no_survival", 0, (void **)&st->ll_true_ns, n_ns));
    truth_names *nm = &st->names;
    NF_TRY(opt_string(f, "true_process", nm->process, sizeof nm->process));
    NF_TRY(opt_string(f, "true_process_options", nm->options, sizeof nm->options));
    NF_TRY(opt_string(f, "generator", nm->generator, sizeof nm->generator));
    int64_t seed = -1;
    if (nf_h5_attr_exists(f, "/", "seed")) NF_TRY(nf_h5_attr_get_int64(f, "/", "seed", &seed));
    nm->seed = seed;
    return NF_OK;
}

int nf_source_sequences_load(nf_source **out, const char *path)
{
    *out = NULL;
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    seq_state st = {.owns = 1};
    size_t n_times = 0, n_off = 0, n_seq = 0, n_end = 0, n_marks = 0;
    int64_t num_marks = 0;
    static const char *required[] = {"/times", "/offsets", "/t_start", "/t_end"};
    int rc = check_format(f, path);
    for (int i = 0; i < 4 && rc == NF_OK; i++)
        if (!nf_h5_exists(f, required[i]))
            rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected event sequences: /times, /offsets, /t_start and "
                                      "/t_end; docs/FORMATS.md)", path, required[i]);
    if (rc == NF_OK) rc = read_vec(f, path, "/times", 0, (void **)&st.times, &n_times);
    if (rc == NF_OK) rc = read_vec(f, path, "/offsets", 1, (void **)&st.offsets, &n_off);
    if (rc == NF_OK) rc = read_vec(f, path, "/t_start", 0, (void **)&st.t_start, &n_seq);
    if (rc == NF_OK) rc = read_vec(f, path, "/t_end", 0, (void **)&st.t_end, &n_end);
    if (rc == NF_OK && nf_h5_exists(f, "/marks")) {
        rc = read_vec(f, path, "/marks", 1, (void **)&st.marks, &n_marks);
        if (rc == NF_OK && !nf_h5_attr_exists(f, "/", "num_marks"))
            rc = nf_error(NF_EFORMAT, "%s: /marks without the root attribute num_marks (expected the number of mark "
                                      "types, at least 1)", path);
        if (rc == NF_OK) rc = nf_h5_attr_get_int64(f, "/", "num_marks", &num_marks);
        if (rc == NF_OK && (num_marks < 1 || num_marks > INT32_MAX))
            rc = nf_error(NF_EFORMAT, "%s: root attribute num_marks = %lld (expected the number of mark types, "
                                      "1 to 2^31 - 1)", path, (long long)num_marks);
    } else if (rc == NF_OK && nf_h5_attr_exists(f, "/", "num_marks")) {
        rc = nf_h5_attr_get_int64(f, "/", "num_marks", &num_marks);
        if (rc == NF_OK)
            rc = nf_error(NF_EFORMAT, "%s: root attribute num_marks = %lld but no dataset /marks (expected both or "
                                      "neither)", path, (long long)num_marks);
    }
    size_t n_ll = 0, n_ns = 0;
    if (rc == NF_OK) rc = read_truth(f, path, &st, &n_ll, &n_ns);
    nf_h5_close(f);
    if (rc == NF_OK && n_seq == 0)
        rc = nf_error(NF_EDATA, "%s:/t_start: no sequences (expected at least one)", path);
    if (rc == NF_OK && n_end != n_seq)
        rc = nf_error(NF_EFORMAT, "%s:/t_end has %zu entries but /t_start has %zu (expected one window per sequence; "
                                  "is an array truncated?)", path, n_end, n_seq);
    if (rc == NF_OK && n_off != n_seq + 1)
        rc = nf_error(NF_EFORMAT, "%s:/offsets has %zu entries for %zu sequences (expected n_seq + 1 = %zu; is an "
                                  "array truncated?)", path, n_off, n_seq, n_seq + 1);
    if (rc == NF_OK && st.marks && n_marks != n_times)
        rc = nf_error(NF_EFORMAT, "%s:/marks has %zu entries but /times has %zu (expected one mark per event; is an "
                                  "array truncated?)", path, n_marks, n_times);
    for (int k = 0; k < 2 && rc == NF_OK; k++)
        if ((k ? st.ll_true_ns : st.ll_true) && (k ? n_ns : n_ll) != n_seq)
            rc = nf_error(NF_EFORMAT, "%s:/%s has %zu entries for %zu sequences (expected one true log-likelihood "
                                      "per sequence; is an array truncated?)", path,
                          k ? "log_lik_true_no_survival" : "log_lik_true", k ? n_ns : n_ll, n_seq);
    if (rc == NF_OK) {
        seq_arrays a = {.n_seq = n_seq, .offsets = st.offsets, .times = st.times, .t_start = st.t_start,
                        .t_end = st.t_end, .marks = st.marks, .num_marks = num_marks};
        origin o = {FROM_FILE, path};
        rc = validate(&a, (long long)n_times, &o);
    }
    if (rc == NF_OK) rc = validate_truth(path, n_seq, st.ll_true, st.ll_true_ns);
    if (rc != NF_OK) {
        state_free_arrays(&st);
        return rc;
    }
    return seq_new(out, path, n_seq, (int)num_marks, st);
}

/* ---- the point-process benchmark sets ---------------------------------------------------------- */

int nf_sequences_from_matrix(nf_source **out, const char *name, const double *x, size_t n_seq, size_t len)
{
    *out = NULL;
    if (!name) name = "matrix";
    if (n_seq == 0 || len == 0)
        return nf_error(NF_EDATA, "%s: a %zu x %zu matrix of arrival times (expected at least one sequence of at "
                                  "least one event)", name, n_seq, len);
    if (n_seq > (SIZE_MAX / sizeof(double) - 1) / len)
        return nf_error(NF_ENOMEM, "%s: a %zu x %zu matrix is too large for memory", name, n_seq, len);
    /* non-finite values first: the window's end is each row's last value */
    for (size_t i = 0; i < n_seq; i++)
        for (size_t k = 0; k < len; k++)
            if (!isfinite(x[i * len + k])) {
                char b[32];
                return nf_error(NF_EDATA, "%s: sequence %zu, event %zu (row %zu, column %zu): time %s (expected "
                                          "finite arrival times)", name, i, k, i, k, num(b, x[i * len + k]));
            }
    seq_state st = {.owns = 1};
    st.offsets = malloc((n_seq + 1) * sizeof *st.offsets);
    st.times = malloc(n_seq * len * sizeof *st.times);
    st.t_start = malloc(n_seq * sizeof *st.t_start);
    st.t_end = malloc(n_seq * sizeof *st.t_end);
    int rc = NF_OK;
    if (!st.offsets || !st.times || !st.t_start || !st.t_end)
        rc = nf_error(NF_ENOMEM, "%s: out of memory for %zu x %zu arrival times", name, n_seq, len);
    if (rc == NF_OK) {
        memcpy(st.times, x, n_seq * len * sizeof *st.times);
        for (size_t i = 0; i <= n_seq; i++) st.offsets[i] = (int64_t)(i * len);
        for (size_t i = 0; i < n_seq; i++) {
            st.t_start[i] = 0;
            st.t_end[i] = x[i * len + len - 1];
        }
        seq_arrays a = {.n_seq = n_seq, .offsets = st.offsets, .times = st.times, .t_start = st.t_start,
                        .t_end = st.t_end};
        origin o = {FROM_MATRIX, name};
        rc = validate(&a, (long long)(n_seq * len), &o);
    }
    if (rc != NF_OK) {
        free(st.offsets), free(st.times), free(st.t_start), free(st.t_end);
        return rc;
    }
    return seq_new(out, name, n_seq, 0, st);
}

/* ---- statistics -------------------------------------------------------------------------------- */

/* Intervals d = t_1 - t_start, t_k - t_{k-1}.  mean d over all; over d > 0: mean of log d and its
 * standard deviation sqrt(sum (log d - mean)^2 / (count - 1)), two passes, sums in double. */
int nf_sequences_stats(const nf_source *s, size_t *n_events, double *mean_interval, double *mean_log_interval,
                       double *sd_log_interval)
{
    if (!s || s->type != &seq_type)
        return nf_error(NF_EINVAL, "%s: interval statistics need a source of kind 'sequences', not '%s'",
                        s ? s->name : "(null)", s && s->type ? s->type->kind : "none");
    const seq_state *st = s->state;
    const int64_t *off = st->offsets;
    size_t count = 0, pos = 0;
    double sum = 0, sum_log = 0;
    for (size_t i = 0; i < s->n; i++) {
        double prev = st->t_start[i];
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            double d = st->times[j] - prev;
            prev = st->times[j];
            sum += d;
            count++;
            if (d > 0) sum_log += log(d), pos++;
        }
    }
    if (count == 0) return nf_error(NF_EDATA, "%s: no events (interval statistics need at least one)", s->name);
    if (pos == 0)
        return nf_error(NF_EDATA, "%s: all %zu intervals are 0 (expected at least one positive interval for "
                                  "log-interval statistics)", s->name, count);
    const double mean_log = sum_log / (double)pos;
    double ss = 0;
    for (size_t i = 0; i < s->n; i++) {
        double prev = st->t_start[i];
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            double d = st->times[j] - prev;
            prev = st->times[j];
            if (d > 0) ss += (log(d) - mean_log) * (log(d) - mean_log);
        }
    }
    if (n_events) *n_events = count;
    if (mean_interval) *mean_interval = sum / (double)count;
    if (mean_log_interval) *mean_log_interval = mean_log;
    if (sd_log_interval) *sd_log_interval = pos > 1 ? sqrt(ss / (double)(pos - 1)) : 0.0;
    return NF_OK;
}
