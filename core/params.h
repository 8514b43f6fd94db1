/* core/params.h - the parameter store: every trainable number of a model in one array.
 *
 * value, grad, m and v (the optimizer's first and second moments) are four arrays of the same
 * layout.  Modules register named slices while they are built (nf_params_add returns the slice's
 * offset) and afterwards address their parameters as P->value + offset, never by a saved pointer,
 * because adding a slice may move the arrays.  Zeroing all gradients is one memset, an optimizer step
 * one loop, a checkpoint one dataset, and a gradient check can perturb any entry without knowing the
 * layers.  A model keeps non-trainable state (batch-norm running averages, ActNorm's initialised
 * flag) in a second store of the same type that the optimizer never touches.
 */
#ifndef NF_PARAMS_H
#define NF_PARAMS_H

#include "core/error.h"

#define NF_PARAM_NAME_MAX 96

typedef struct nf_param_slice {
    char name[NF_PARAM_NAME_MAX];
    size_t offset, size;
} nf_param_slice;

typedef struct nf_params {
    size_t n;                /* total number of entries */
    size_t capacity;
    nf_real *value;          /* (n) */
    nf_real *grad;           /* (n) */
    nf_real *m, *v;          /* (n) optimizer moments */
    nf_param_slice *slices;
    size_t nslices, slice_capacity;
    size_t base;             /* a view (nf_params_view): its first entry's offset in the store; else 0 */
} nf_params;

nf_params *nf_params_alloc(void);
void nf_params_free(nf_params *P);
/* Register a zero-filled slice of `size` entries named `name` (unique); *offset receives its start. */
int nf_params_add(nf_params *P, const char *name, size_t size, size_t *offset);
/* A view of entries [first, first + count) of P: the four arrays offset, n = count, the store's
 * slice table (offsets stay the store's: entry i of the view is entry base + i).  Nothing is
 * allocated; the view is valid until P grows.  An optimizer step over a view trains those entries
 * only (a model trained in stages). */
nf_params nf_params_view(const nf_params *P, size_t first, size_t count);
/* Find a slice by name; NULL if absent. */
const nf_param_slice *nf_params_find(const nf_params *P, const char *name);
void nf_params_zero_grad(nf_params *P);
/* Copy values (and, if with_state, m and v) from src; layouts must match. */
int nf_params_copy(nf_params *dst, const nf_params *src, int with_state);
/* sqrt(sum grad^2), accumulated in double. */
double nf_params_grad_norm(const nf_params *P);
/* 1 if every value and gradient is finite. */
int nf_params_all_finite(const nf_params *P);

/* Saving and loading (core/params_h5.c).  A store is written under `group` as datasets value
 * (and m, v when with_state), plus the slice table (names, offsets, sizes).  Loading requires the
 * same slice table as the store built from the same spec, and says which slice differs if not. */
#include "core/h5.h"
int nf_params_save(const nf_params *P, nf_h5 *f, const char *group, int with_state);
int nf_params_load(nf_params *P, nf_h5 *f, const char *group, int with_state);

#endif
