/* datasets/sequences_import.h - event sequences from tables (core/import.h: CSV, NPY) to nf-sequences
 * files (datasets/sequences.h).
 *
 *   long form  one row per event: sequence id, time[, mark] (columns chosen by index); rows of a
 *              sequence in any order (sorted by time, ties kept in order), sequences numbered by
 *              first appearance; marks are whole numbers >= 0 (num_marks = largest + 1).
 *   wide form  one row per sequence of equal length (the TPP benchmark .npy files).
 * Windows: t_start NaN means 0; t_end NaN means each sequence's own last event time (no survival
 * interval after the last event); a given window must hold every event.  Errors name `what` (the
 * input file), the row or sequence and what was expected; nothing is written on error.
 *
 * truth (or NULL): a process the data are known to come from (datasets/tpp_process.h); the file
 * then carries the exact log-likelihood of every sequence under it (nf_sequences_truth: on each
 * window, and without the survival term), computed by nf_tpp_log_lik.  The process needs simple
 * sequences (strictly increasing times after t_start): ties are an error naming the sequence.
 */
#ifndef NF_SEQUENCES_IMPORT_H
#define NF_SEQUENCES_IMPORT_H

#include "core/import.h"
#include "datasets/tpp_process.h"

typedef struct nf_seq_import_summary {
    size_t n_seq, n_events;
    int num_marks;
    double t_start, t_end;   /* t_end NaN when each sequence ends at its last event */
    int t_end_is_last;
    /* with a truth: the sums over all sequences of the true log-likelihoods (window, no survival) */
    int has_truth;
    double true_log_lik, true_log_lik_no_survival;
} nf_seq_import_summary;

int nf_sequences_import_long(const char *out, const char *what, const nf_table *t, int id_col, int time_col,
                             int mark_col, double t_start, double t_end, const nf_tpp_process *truth,
                             nf_seq_import_summary *sum);
int nf_sequences_import_wide(const char *out, const char *what, const nf_table *t, double t_start, double t_end,
                             const nf_tpp_process *truth, nf_seq_import_summary *sum);

#endif
