/* datasets/sequences.h - the "sequences" data source: ragged event sequences for temporal point
 * processes, loaded from HDF5 (format "nf-sequences", docs/FORMATS.md), wrapped around caller
 * arrays, or built from a matrix of arrival times (the TPP benchmark sets).
 *
 * Sequence i observes the window [t_start[i], t_end[i]] and holds the events
 * times[offsets[i] .. offsets[i + 1]) (non-decreasing, inside the window) with optional integer marks
 * in 0 .. num_marks - 1.  All sequences' events lie in one flat array, so a batch, a reorder or a
 * view touches offsets, never per-sequence allocations:
 *
 *   nf_source *all, *train, *val;
 *   nf_source_sequences_load(&all, "seq.h5");        // validated once, here
 *   nf_source_split(all, 0.1, seed, &val, &train);    // datasets/source.h
 *   nf_batch b = {0};
 *   nf_source_fetch(train, idx, 64, &b);              // b.offsets (65), b.times, b.marks, b.t_start ...
 *
 * Validation (load, wrap, save and the matrix import apply the same rules) stops at the first
 * problem with one error naming the file, the dataset, the sequence and the event position, and what
 * was expected: NF_EFORMAT for missing datasets or attributes and arrays whose lengths do not fit
 * together, NF_EDATA for bad values (no sequences, offsets that go back, a NaN or out-of-window or
 * decreasing time, a window that ends before it starts, a mark out of range).
 *
 * A file may carry the truth (nf_sequences_truth below: /log_lik_true, one per sequence); it is
 * checked on loading (length, finite values, a known convention) and follows the sequences through
 * reorder, views and saves.
 *
 * Reorder (what nf_source_split does first) permutes a loaded source in place, so views of it see
 * the new order as they do for rows; a wrapped source or a view reorders into arrays of its own and
 * leaves the caller's (or the parent's) arrays untouched.
 */
#ifndef NF_SEQUENCES_H
#define NF_SEQUENCES_H

#include "datasets/source.h"

#define NF_SEQUENCES_FORMAT "nf-sequences"
#define NF_SEQUENCES_VERSION 1

/* The truth about sequences drawn from (or scored under) a known point process
 * (datasets/tpp_process.h): the exact log-likelihood of every sequence, and the process that gives
 * it.  Stored with the sequences (/log_lik_true, docs/FORMATS.md), carried by reorder, views, splits
 * and saves, so a fitted model can be compared with the truth on exactly the sequences it scores.
 * Two conventions, both per sequence on its own window [t_start, t_end]:
 *   log_lik              "window": sum_i [log lambda*(t_i) - Lambda(t_{i-1}, t_i)] - Lambda(t_n, t_end),
 *                        t_0 := t_start (the first interval from the window start included, the
 *                        log-survival of the open interval after the last event included);
 *   log_lik_no_survival  "to-last-event": the same without the survival term (the TPP benchmarks'
 *                        convention); equal to log_lik when t_end is the last event. */
typedef struct nf_sequences_truth {
    const double *log_lik;             /* (n_seq) required */
    const double *log_lik_no_survival; /* (n_seq) or NULL */
    const char *process;               /* the process's type name ("hawkes"), required */
    const char *options;               /* its canonical options ("mu=0.2,alpha=0.8,beta=1"), or NULL */
    const char *generator;             /* where the sequences came from ("tpp-hawkes", "import"), or NULL */
    long long seed;                    /* the simulation's seed, or -1 */
} nf_sequences_truth;

#define NF_SEQUENCES_CONV_WINDOW "window"
#define NF_SEQUENCES_CONV_TO_LAST "to-last-event"

/* Write sequences to an nf-sequences file, atomically (core/h5.h): offsets (n_seq + 1), times
 * (offsets[n_seq]), t_start and t_end (n_seq), marks (offsets[n_seq]) or NULL with num_marks 0.
 * Validated first with the rules of the loader; nothing is written when they fail. */
int nf_sequences_save(const char *path, size_t n_seq, const int64_t *offsets, const double *times,
                      const double *t_start, const double *t_end, const int64_t *marks /* may be NULL */,
                      int num_marks);
/* The same with the truth (NULL: as nf_sequences_save): /log_lik_true, /log_lik_true_no_survival
 * and the root attributes naming the process and the conventions.  The values must be finite. */
int nf_sequences_save_truth(const char *path, size_t n_seq, const int64_t *offsets, const double *times,
                            const double *t_start, const double *t_end, const int64_t *marks, int num_marks,
                            const nf_sequences_truth *truth);
/* Write the sequences of any sequences source (a view included: its offsets are rebased to 0),
 * with their truth when the source has one. */
int nf_source_sequences_save(const char *path, const nf_source *s);

/* A split into files by whole sequences: part k gets the items idx[at_k .. at_k + count[k]) of s (at_k
 * the sum of the counts before it), in that order, with their marks and truth, and the root
 * attributes split = part[k], split_of and split_seed = seed (part, split_of may be NULL).  A part of
 * no sequences is not written.  All parts are written before any is renamed into place (core/h5.h),
 * so on error none is.  At most 8 parts.  (nf data split: idx and counts from nf_dataset_split.) */
int nf_sequences_split_save(const nf_source *s, const size_t *idx, int n_parts, const size_t *count,
                            const char *const *path, const char *const *part, const char *split_of, uint64_t seed);

/* Load a whole nf-sequences file (or a file without a format attribute, as h5py writes, holding
 * the same datasets) into memory and validate it.  The source is named after the path. */
int nf_source_sequences_load(nf_source **s, const char *path);
/* Share `part` of `parts` of an nf-sequences file, for data-parallel training: the offsets and
 * windows of all N sequences are read (small), the events (/times, /marks) of sequences
 * [N part / parts, N (part + 1) / parts) only, by HDF5 hyperslab (the rule of
 * nf_source_rows_load_share).  The source has all N items in the file's order, so every process
 * shuffles and splits the same items (nf_source_split gives index views of it); nf_source_owns()
 * says which are in memory, and a batch with others reads their events from the file (slowly).
 * The checks of nf_source_sequences_load, on the events of the share.  The truth is not read, and
 * nf_source_sequences() gives NULL arrays for a share.  parts = 1 is nf_source_sequences_load.
 * (datasets/sequences_share.c) */
int nf_source_sequences_load_share(nf_source **s, const char *path, int part, int parts);
/* Sequences over caller-owned arrays (laid out as for nf_sequences_save; no copy, never freed or
 * written: they must outlive the source and its views).  Validated like a file. */
int nf_source_sequences_wrap(nf_source **s, size_t n_seq, const int64_t *offsets, const double *times,
                             const double *t_start, const double *t_end, const int64_t *marks, int num_marks);
/* Sequences from an (n_seq, len) row-major matrix of arrival times, one sequence per row (the TPP
 * benchmark layout: nf_import_npy, then this).  Every row holds len events on the window
 * [0, its last time]: the data carry no observation end, so the window closes at the last event
 * (no survival interval after it).  Rows must be finite, non-decreasing and start at or after 0.
 * name labels messages ("hawkes1.npy"; NULL: "matrix").  The source owns a copy of the times. */
int nf_sequences_from_matrix(nf_source **s, const char *name, const double *x, size_t n_seq, size_t len);

/* The arrays behind a sequences source or a view: item i's events are
 * times[offsets[i] .. offsets[i + 1]) - offsets index the owner's flat arrays, so a view's
 * offsets[0] may be above 0.  All NULL for a source of another kind. */
typedef struct nf_sequences {
    const int64_t *offsets;         /* (n + 1) */
    const double *times;            /* indexed by offsets */
    const int64_t *marks;           /* indexed by offsets; NULL without marks */
    const double *t_start, *t_end;  /* (n) */
} nf_sequences;
nf_sequences nf_source_sequences(const nf_source *s);
/* The truth of a sequences source loaded from a file that carries one, or of a view or reordered
 * source of it: log_lik (s->n entries, in the source's current order) is NULL when there is none. */
nf_sequences_truth nf_source_sequences_truth(const nf_source *s);

/* Statistics over all sequences of s, for standardising a point-process model's inputs.  The
 * intervals are t_1 - t_start and t_k - t_{k-1} within each sequence (one per event; no survival
 * interval to t_end).  *n_events: events in all; *mean_interval: mean interval; *mean_log_interval
 * and *sd_log_interval: mean and standard deviation (divided by count - 1, as numpy's ddof=1; 0 for a
 * single interval) of log(interval) over the positive intervals only (ties give a zero interval,
 * whose log is -inf).  Any output may be NULL.  NF_EDATA when s has no events or no positive
 * interval; NF_EINVAL for a source of another kind. */
int nf_sequences_stats(const nf_source *s, size_t *n_events, double *mean_interval, double *mean_log_interval,
                       double *sd_log_interval);
/* The same statistics over any sequences source (views and shares included) whose items are spread
 * over the processes of a parallel run: each process counts the items it holds (nf_source_owns),
 * and sum(user, buf, n), when not NULL, replaces buf by its sum over all processes (an all-reduce:
 * every process must call this together; nf_train_comm's sum_double).  Every process receives the
 * statistics of all the items, equal to nf_sequences_stats to rounding (sums in another order);
 * with sum NULL, those of the items this process holds. */
int nf_sequences_stats_shared(const nf_source *s, int (*sum)(void *user, double *buf, size_t n), void *user,
                              size_t *n_events, double *mean_interval, double *mean_log_interval,
                              double *sd_log_interval);

#endif
