/* core/params.c - one contiguous parameter buffer with named slices. */
#include "core/params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/simd.h"

nf_params *nf_params_alloc(void) { return nf_calloc(1, sizeof(nf_params), "parameter store"); }

void nf_params_free(nf_params *P)
{
    if (!P) return;
    free(P->value);
    free(P->grad);
    free(P->m);
    free(P->v);
    free(P->slices);
    free(P);
}

static int grow(nf_real **a, size_t old_n, size_t new_cap)
{
    nf_real *p = realloc(*a, new_cap * sizeof(nf_real));
    if (!p) return nf_error(NF_ENOMEM, "out of memory growing the parameter store to %zu entries", new_cap);
    memset(p + old_n, 0, (new_cap - old_n) * sizeof(nf_real));
    *a = p;
    return NF_OK;
}

/* Half the machine's physical memory in bytes (0 when unknown): a store whose four arrays would
 * take more than that is refused before it is allocated, since Linux would otherwise grant it
 * and the process would thrash or be killed long before training started. */
static double memory_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? 0.5 * (double)pages * (double)page : 0;
}

int nf_params_add(nf_params *P, const char *name, size_t size, size_t *offset)
{
    if (strlen(name) >= NF_PARAM_NAME_MAX)
        return nf_error(NF_EINVAL, "parameter name '%s' is longer than %d characters", name, NF_PARAM_NAME_MAX - 1);
    if (nf_params_find(P, name)) return nf_error(NF_EINVAL, "parameter name '%s' is used twice", name);
    if (P->n + size > P->capacity) {
        double need = 4.0 * sizeof(nf_real) * ((double)P->n + (double)size), limit = memory_limit();
        if (limit > 0 && need > limit)
            return nf_error(NF_ENOMEM, "%zu parameters (%s adds %zu) need %.1f GB for their values, gradients and "
                            "optimizer state, more than half this machine's memory (%.1f GB): choose a smaller "
                            "model", P->n + size, name, size, need / 1e9, 2 * limit / 1e9);
        size_t cap = P->capacity ? P->capacity : 1024;
        while (cap < P->n + size) cap *= 2;
        if (limit > 0 && 4.0 * sizeof(nf_real) * (double)cap > limit) cap = P->n + size; /* no doubling past it */
        NF_TRY(grow(&P->value, P->n, cap));
        NF_TRY(grow(&P->grad, P->n, cap));
        NF_TRY(grow(&P->m, P->n, cap));
        NF_TRY(grow(&P->v, P->n, cap));
        P->capacity = cap;
    }
    if (P->nslices == P->slice_capacity) {
        size_t cap = P->slice_capacity ? 2 * P->slice_capacity : 16;
        nf_param_slice *s = realloc(P->slices, cap * sizeof *s);
        if (!s) return nf_error(NF_ENOMEM, "out of memory adding parameter '%s'", name);
        P->slices = s;
        P->slice_capacity = cap;
    }
    nf_param_slice *s = &P->slices[P->nslices++];
    memset(s, 0, sizeof *s);
    strcpy(s->name, name);
    s->offset = P->n;
    s->size = size;
    *offset = P->n;
    P->n += size;
    return NF_OK;
}

const nf_param_slice *nf_params_find(const nf_params *P, const char *name)
{
    for (size_t i = 0; i < P->nslices; i++)
        if (strcmp(P->slices[i].name, name) == 0) return &P->slices[i];
    return NULL;
}

void nf_params_zero_grad(nf_params *P)
{
    if (P->n) memset(P->grad, 0, P->n * sizeof(nf_real));
}

int nf_params_copy(nf_params *dst, const nf_params *src, int with_state)
{
    if (dst->n != src->n)
        return nf_error(NF_EINVAL, "parameter stores differ in size (%zu vs %zu entries)", dst->n, src->n);
    if (!src->n) return NF_OK;
    memcpy(dst->value, src->value, src->n * sizeof(nf_real));
    if (with_state) {
        memcpy(dst->m, src->m, src->n * sizeof(nf_real));
        memcpy(dst->v, src->v, src->n * sizeof(nf_real));
    }
    return NF_OK;
}

NF_SIMD_CLONES static double nf_params_grad_norm_simd(const nf_params *P)
{
    /* One thread, vector lanes summed in a fixed order: the same value for any thread count. */
    double s = 0;
    const nf_real *g = P->grad;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < P->n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
double nf_params_grad_norm(const nf_params *P)
{
    return nf_params_grad_norm_simd(P);
}

int nf_params_all_finite(const nf_params *P)
{
    for (size_t i = 0; i < P->n; i++)
        if (!isfinite(P->value[i]) || !isfinite(P->grad[i])) return 0;
    return 1;
}

nf_params nf_params_view(const nf_params *P, size_t first, size_t count)
{
    nf_params v = *P;
    if (first > P->n) first = P->n;
    if (count > P->n - first) count = P->n - first;
    v.value = P->value ? P->value + first : NULL;
    v.grad = P->grad ? P->grad + first : NULL;
    v.m = P->m ? P->m + first : NULL;
    v.v = P->v ? P->v + first : NULL;
    v.n = count;
    v.capacity = count;
    v.base = P->base + first;
    v.slice_capacity = 0; /* a view never grows */
    return v;
}
