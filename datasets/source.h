/* datasets/source.h - data sources: what a model trains on, as "n items, fetch these ones".
 *
 * The trainer and the evaluators never see arrays or files: they see a source with a number of
 * items and ask it for the batch of items with given indices.  What an item is depends on the
 * source's kind:
 *
 *   "rows"       one row of an (n, dim) array, with an optional (n, ctx_dim) context row: the
 *                i.i.d. samples a density flow is fit to (HDF5 /x and /context);
 *   "sequences"  one event sequence on [t_start, t_end]: its event times, optional integer marks
 *                (datasets/sequences.h; layout in docs/FORMATS.md);
 *
 * and later issues add groups of related rows, treated/control units, images and clips.  Every
 * batch carries its items' indices in the source (`idx`), so a model whose likelihood couples
 * items (the dependency-aware bases) knows which items it holds.
 *
 * A source owns its items (loaded once, validated once) or views a range of another source's
 * items (nf_source_split), without copying them: nf fit's peak memory stays the data plus the
 * model.  The shuffling is the trainer's; the split is here, seeded:
 *
 *   nf_source *all, *train, *val;
 *   nf_source_rows_load(&all, "train.h5", "/x", 0, 0, 1);
 *   nf_source_split(all, 0.1, seed, &val, &train);     // reorders all's items in place
 *   nf_batch b = {0};
 *   nf_source_fetch(train, idx, 512, &b);              // b.x (512, dim), b.idx (512)
 *   nf_batch_free(&b);  nf_source_free(train);  nf_source_free(val);  nf_source_free(all);
 *
 * A batch's buffers grow when a larger batch arrives and are reused after that, so a training loop
 * that fetches batches of one size allocates only on its first fetch.
 */
#ifndef NF_SOURCE_H
#define NF_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct nf_source nf_source;
typedef struct nf_source_type nf_source_type;

/* One batch of items.  Only the fields of the source's kind are filled; the rest stay NULL/0. */
typedef struct nf_batch {
    int n;                  /* items in the batch */
    size_t *idx;            /* (n) the items' indices in the source they were fetched from */
    /* rows */
    int dim, ctx_dim;
    nf_real *x;             /* (n, dim) */
    nf_real *ctx;           /* (n, ctx_dim), NULL without context */
    /* sequences: the events of item i are times[offsets[i] .. offsets[i + 1]) */
    int64_t *offsets;       /* (n + 1), offsets[0] = 0 */
    double *times;          /* (offsets[n]) event times, non-decreasing within an item */
    int32_t *marks;         /* (offsets[n]) mark of each event, NULL without marks */
    double *t_start, *t_end;/* (n) observation window of each item */
    int num_marks;          /* mark types (marks are 0 .. num_marks - 1); 0 without marks */
    /* capacities (internal) */
    size_t cap_items, cap_x, cap_ctx, cap_events;
} nf_batch;

struct nf_source_type {
    const char *kind;       /* "rows", "sequences" */
    /* Fill b with the items idx[0..n-1] (each < s->n); b->idx receives a copy of idx. */
    int (*fetch)(const nf_source *s, const size_t *idx, int n, nf_batch *b);
    /* Reorder the items in place: item i becomes the old item perm[i] (perm is a permutation of
     * 0..n-1, consumed: the call may overwrite it).  NULL for a source that cannot (rows read
     * from a file batch by batch): nf_source_split then gives index views (nf_source_subset). */
    int (*reorder)(nf_source *s, size_t *perm);
    /* A source viewing items [first, first + n) of s (no copy; s must outlive it); NULL with reorder. */
    int (*range)(const nf_source *s, size_t first, size_t n, nf_source **out);
    /* 1 if this process holds item `item` (a share of the data in a parallel run); NULL: all. */
    int (*owns)(const nf_source *s, size_t item);
    void (*destroy)(nf_source *s);
};

struct nf_source {
    const nf_source_type *type;
    size_t n;               /* items */
    int dim, ctx_dim;       /* rows: widths of x and context; sequences: 0, 0 */
    int num_marks;          /* sequences: mark types (0 without marks) */
    int partial;            /* 1: a share of the items in memory (nf_source_rows_load_share) or a view of one */
    char name[1100];        /* "train.h5:/x", for messages */
    void *state;            /* kind-specific */
};

/* Fetch with index checks (every idx[i] < s->n, n >= 1): NF_EINVAL naming the source otherwise. */
int nf_source_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b);
void nf_source_free(nf_source *s);     /* NULL is harmless; a view never frees its parent */
void nf_batch_free(nf_batch *b);       /* frees the buffers, zeroes the struct */
/* Make room for n items (and for rows of the given widths, or events): used by the kinds' fetch. */
int nf_batch_reserve_rows(nf_batch *b, int n, int dim, int ctx_dim);
int nf_batch_reserve_events(nf_batch *b, int n, size_t events, int with_marks);
/* A batch position and the item it asks for.  Kinds that read items from a file in ascending order
 * (a point selection walks the file forwards) sort these by item, ties by position, and scatter what
 * they read back to the positions; reentrant (no key array in a global for qsort's comparator). */
typedef struct nf_item_pos {
    size_t item, pos;
} nf_item_pos;
void nf_item_pos_sort(nf_item_pos *a, size_t n);

/* Seeded split: the items are shuffled in place (nf_rng_permutation of a stream seeded by seed),
 * then *first views the first round-down(frac * n) items (at least one when frac > 0 and n >= 2)
 * and *rest the others.  frac 0 gives *first = NULL and *rest all items in their order (no shuffle:
 * item i of *rest is item i of the data, as a dependent fit's structure needs).  NF_EDATA if no item
 * is left for *rest.
 * A source that cannot reorder keeps its order, and the two parts are index views of it
 * (nf_source_subset) holding the same shuffled items. */
int nf_source_split(nf_source *s, double frac, uint64_t seed, nf_source **first, nf_source **rest);
/* A view of the items idx[0..n-1] of s (indices copied; s must outlive it): item i of the view is
 * item idx[i] of s.  Batches fetched from it carry the view's own indices. */
int nf_source_subset(const nf_source *s, const size_t *idx, size_t n, nf_source **out);

/* 1 if the item's data is held by this process: always, except for a share of a data set loaded
 * for data-parallel training (nf_source_rows_load_share) and views of one. */
int nf_source_owns(const nf_source *s, size_t item);

/* ---- rows -------------------------------------------------------------------------------------- */

/* Rows of caller-owned arrays x (n, dim) and ctx (n, ctx_dim) or NULL: no copy, never written or
 * freed (reordering such a source, as nf_source_split does, first gives it a copy of its own). */
int nf_source_rows_wrap(nf_source **s, const nf_real *x, const nf_real *ctx, size_t n, int dim, int ctx_dim);
/* Rows of an HDF5 data file: `dataset` (n x d; 1-D reads as n x 1), /context when want_ctx (required
 * when expect_c > 0), and /logp_true when present.  expect_d / expect_c: 0 accepts any width.
 * Every problem (missing file or dataset, not HDF5, empty, NaN, wrong width, context rows that do not
 * match) is one error naming the file, the dataset and what was expected. */
int nf_source_rows_load(nf_source **s, const char *path, const char *dataset, size_t expect_d, size_t expect_c,
                        int want_ctx);
/* Share `part` of `parts` of the same file, for data-parallel training: only rows [N part / parts,
 * N (part + 1) / parts) are read (an HDF5 hyperslab), but the source has all N items, so every
 * process shuffles and splits the same items; nf_source_owns() says which are in memory (a batch
 * of others is read from the file, slowly: data-dependent initialisation looks at the first rows).
 * parts = 1 is nf_source_rows_load.  /logp_true is not read for a share. */
int nf_source_rows_load_share(nf_source **s, const char *path, const char *dataset, size_t expect_d,
                              size_t expect_c, int want_ctx, int part, int parts);
/* The arrays behind a rows source (or a view of one): x (n, dim), ctx (n, ctx_dim) or NULL, and the
 * true log-density (n) or NULL.  NULL pointers for a source of another kind. */
typedef struct nf_rows {
    const nf_real *x, *ctx;
    const double *logp_true;
} nf_rows;
nf_rows nf_source_rows(const nf_source *s);
/* Drop the true log-densities of a loaded rows source (training does not need them). */
void nf_source_rows_drop_logp_true(nf_source *s);
/* Rows read from the file batch by batch instead of loaded (data larger than memory): the same
 * checks of the file's shape on opening, and each fetched row checked for non-finite values.
 * nf_source_rows() gives NULL arrays for it.  (datasets/source_stream.c) */
int nf_source_rows_open(nf_source **s, const char *path, const char *dataset, size_t expect_d, size_t expect_c,
                        int want_ctx);

#endif
