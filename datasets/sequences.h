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
 * Reorder (what nf_source_split does first) permutes a loaded source in place, so views of it see
 * the new order as they do for rows; a wrapped source or a view reorders into arrays of its own and
 * leaves the caller's (or the parent's) arrays untouched.
 */
#ifndef NF_SEQUENCES_H
#define NF_SEQUENCES_H

#include "datasets/source.h"

#define NF_SEQUENCES_FORMAT "nf-sequences"
#define NF_SEQUENCES_VERSION 1

/* Write sequences to an nf-sequences file, atomically (core/h5.h): offsets (n_seq + 1), times
 * (offsets[n_seq]), t_start and t_end (n_seq), marks (offsets[n_seq]) or NULL with num_marks 0.
 * Validated first with the rules of the loader; nothing is written when they fail. */
int nf_sequences_save(const char *path, size_t n_seq, const int64_t *offsets, const double *times,
                      const double *t_start, const double *t_end, const int64_t *marks /* may be NULL */,
                      int num_marks);
/* Write the sequences of any sequences source (a view included: its offsets are rebased to 0). */
int nf_source_sequences_save(const char *path, const nf_source *s);

/* Load a whole nf-sequences file (or a file without a format attribute, as h5py writes, holding
 * the same datasets) into memory and validate it.  The source is named after the path. */
int nf_source_sequences_load(nf_source **s, const char *path);
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

/* Statistics over all sequences of s, for standardising a point-process model's inputs.  The
 * intervals are t_1 - t_start and t_k - t_{k-1} within each sequence (one per event; no survival
 * interval to t_end).  *n_events: events in all; *mean_interval: mean interval; *mean_log_interval
 * and *sd_log_interval: mean and standard deviation (divided by count - 1, as numpy's ddof=1; 0 for a
 * single interval) of log(interval) over the positive intervals only (ties give a zero interval,
 * whose log is -inf).  Any output may be NULL.  NF_EDATA when s has no events or no positive
 * interval; NF_EINVAL for a source of another kind. */
int nf_sequences_stats(const nf_source *s, size_t *n_events, double *mean_interval, double *mean_log_interval,
                       double *sd_log_interval);

#endif
