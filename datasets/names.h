/* datasets/names.h - the names of a data file's columns and context values, and contexts given by
 * name.
 *
 * A data file may carry /columns (d strings: the names of the columns of /x) and /context_names
 * (c strings: the names of the c context values).  `nf data import --context kind` writes a
 * categorical column as a one-hot context whose values are named "column=category" (kind=long,
 * kind=short).  nf fit keeps both lists in the model file (/data/columns, /data/context_names), so
 * samples and pictures of a model are labelled like its data, and a context can be chosen by name:
 *
 *   nf_data_names nm;
 *   nf_data_names_load(&nm, "model.h5", "/data", dim, ctx_dim);
 *   nf_context_parse(&nm, "kind=long", ctx);   // ctx (ctx_dim): 1 at kind=long, 0 at kind's others
 *   nf_data_names_free(&nm);
 *
 * Context specs: comma-separated items.  "column=category" picks one entry of a one-hot group (the
 * entries whose names begin "column="; the others of the group are 0); "name=number" sets a
 * numeric entry (a name without '=', e.g. "temperature=21.5").  Every group and every numeric entry
 * must be given exactly once.  Without stored names the entries are called c0, c1, ... (numeric:
 * "c0=1,c1=0"); without stored column names the columns are x0, x1, ...
 */
#ifndef NF_DATA_NAMES_H
#define NF_DATA_NAMES_H

#include <stddef.h>

#include "core/error.h"
#include "core/h5.h"

typedef struct nf_data_names {
    size_t d, c;          /* the widths the names are for */
    char **columns;       /* (d) names of the columns, or NULL when none are stored */
    char **context;       /* (c) names of the context values, or NULL */
} nf_data_names;

/* Read <group>/columns and <group>/context_names (group "/" for a data file, "/data" for a model
 * file) when present.  Their lengths must be d and c (NF_EFORMAT naming the file and dataset
 * otherwise); d == 0 skips the columns (their width is unknown, e.g. another --dataset than /x). */
int nf_data_names_read(nf_data_names *nm, nf_h5 *f, const char *group, size_t d, size_t c);
int nf_data_names_load(nf_data_names *nm, const char *path, const char *group, size_t d, size_t c);
/* Write the lists that are present under group. */
int nf_data_names_write(const nf_data_names *nm, nf_h5 *f, const char *group);
int nf_data_names_copy(nf_data_names *dst, const nf_data_names *src);
void nf_data_names_free(nf_data_names *nm);   /* NULL-safe; zeroes the struct */

/* The name of column j ("x<j>" without stored names) and of context value k ("c<k>"), in buf. */
const char *nf_data_names_column(const nf_data_names *nm, size_t j, char *buf, size_t size);
const char *nf_data_names_context(const nf_data_names *nm, size_t k, char *buf, size_t size);

/* The context vector ctx (nm->c values) of a spec such as "kind=long" or "kind=long,temp=21.5".
 * NF_EINVAL with a message naming the item and listing what is accepted. */
int nf_context_parse(const nf_data_names *nm, const char *spec, nf_real *ctx);
/* A context row written as a spec that nf_context_parse reads back: the set entry of each one-hot
 * group ("kind=long"), and "name=value" for the other entries. */
void nf_context_format(const nf_data_names *nm, const nf_real *ctx, char *buf, size_t size);

#endif
