/* core/import_plan.h - internal to the importers (core/import.c, core/import_select.c): the column
 * plan of an import with a selection (nf_import_select).
 *
 * A plan says, for every column of the file, whether it becomes data column k, context column m
 * (categorical, one-hot encoded at the end) or is left out.  The CSV reader makes the plan once it
 * knows the column names and the first data row, then streams the rows through it: numbers into
 * the data, category strings into one dictionary per context column (nf_colplan_category) and
 * label strings into one per label column (nf_colplan_label, their numbers into the data); an
 * all-numeric table (NPY) goes through nf_table_select.  nf_colplan_finish sorts every
 * dictionary's categories and writes the one-hot context and its names into the table.
 */
#ifndef NF_IMPORT_PLAN_H
#define NF_IMPORT_PLAN_H

#include <stdint.h>

#include "core/import.h"

typedef struct nf_catdict {
    char **names;     /* (n) the categories in order of first appearance */
    size_t n;
    int32_t *slot;    /* open-addressing hash table of indices into names, -1 empty */
    size_t nslot;
} nf_catdict;

typedef struct nf_colplan {
    const char *path;       /* for messages */
    int strict;             /* no selection: every column is data and must be a number */
    size_t n_all;           /* columns in the file */
    int *role;              /* (n_all): k >= 0 data column k, -1 left out, -2 - m context column m */
    size_t d, nctx;
    size_t *x_src;          /* (d) file column of each data column */
    size_t *ctx_src;        /* (nctx) file column of each context column */
    nf_catdict *cats;       /* (nctx) */
    nf_catdict *labels;     /* (d) the dictionary of each label data column (NULL: no labels) */
    char *is_label;         /* (d) 1 for a label data column (NULL: no labels) */
    size_t n_skipped;
    char **skipped;         /* text columns left out of the default selection (owned) */
} nf_colplan;

static inline int nf_colplan_role_context(int role) { return -2 - role; }

/* Plan for a file with n_all columns named names[] (no NULL entries).  first_row: the fields of the
 * first data row (text detection for the default selection), or NULL when every value is a number.
 * sel NULL: every column is data, as the plain importers read it. */
int nf_colplan_make(nf_colplan *p, const char *path, char *const *names, size_t n_all, char *const *first_row,
                    const nf_import_select *sel);
/* The index of category s of context column m (added at first sight).  NF_EDATA for an empty s or
 * a column with more than NF_IMPORT_MAX_CATEGORIES categories; the caller adds the position. */
int nf_colplan_category(nf_colplan *p, size_t m, const char *s, int32_t *idx);
/* The number of label s in label data column k (added at first sight; a finite number is written as
 * the shortest decimal that reads back as it first).  NF_EDATA for an empty field or a number that
 * is not finite. */
int nf_colplan_label(nf_colplan *p, size_t k, const char *s, double *value);
/* Fill out's names (the data columns' names from names[]), context, context names and skipped list
 * from the plan; cat holds (out->n, nctx) category indices.  out->n, d, x are the caller's. */
int nf_colplan_finish(nf_colplan *p, char *const *names, const int32_t *cat, nf_table *out);
void nf_colplan_free(nf_colplan *p);

/* Apply a selection to an all-numeric table (NPY): out gets the chosen data columns and the one-hot
 * context of the context columns (categories are the distinct values, written as the shortest
 * decimal that reads back exactly). */
int nf_table_select(const char *path, const nf_table *all, const nf_import_select *sel, nf_table *out);

#endif
