/* datasets/sequences_internal.h - what the share loader (sequences_share.c) uses of sequences.c:
 * the format check and the validation rules of nf_source_sequences_load (not installed API). */
#ifndef NF_SEQUENCES_INTERNAL_H
#define NF_SEQUENCES_INTERNAL_H

#include "core/h5.h"
#include "datasets/sequences.h"

/* An nf-sequences file of a version this reader knows, or a file without a format attribute. */
int nf_sequences_check_format(nf_h5 *f, const char *path);
/* The loader's checks on the offsets and windows of all n_seq sequences of file `path` (n_times
 * events in all) and on the events of sequences [lo, hi) only, which times and marks (or NULL) hold
 * from the file's entry offsets[lo] on.  lo = hi = n_seq checks no events.  Messages name the
 * file's sequence and entry. */
int nf_sequences_validate_share(const char *path, size_t n_seq, const int64_t *offsets, const double *t_start,
                                const double *t_end, const double *times, const int64_t *marks, int64_t num_marks,
                                long long n_times, size_t lo, size_t hi);

#endif
