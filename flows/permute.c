/* flows/permute.c - a fixed permutation of the dimensions (reverse or seeded random).
 *
 *   y_j = x_{p(j)},   x_{p(j)} = y_j,   log|det J| = 0.
 *
 * The permutation is model state: it lives in the non-trainable store b->S as the slice
 * "<name>.perm" (D indices stored as exact integers in nf_real), so a saved model reloads exactly the
 * permutation it was trained with, whatever the rng does at rebuild time.  order=random draws it from
 * seed= when given, else from the rng handed to create (the flow's seed).  Every call checks that the
 * stored indices still form a permutation (cheaply: only when they changed since the last call, e.g.
 * after loading) and refuses a corrupt one with NF_EDATA.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/bijector.h"

typedef struct permute_state {
    size_t off;   /* offset of "<name>.perm" (D) in b->S */
    int *perm;    /* (D) the validated permutation last read from S; perm[0] = -1 forces a re-read */
    int *mark;    /* (D) scratch for validation */
} permute_state;

enum { ORDER_REVERSE = 0, ORDER_RANDOM = 1 };

static void permute_destroy(nf_bijector *b)
{
    permute_state *st = b->state;
    if (!st) return;
    free(st->perm);
    free(st->mark);
    free(st);
}

static int permute_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    int order, seed;
    NF_TRY(nf_opts_choice(opts, "order", "reverse|random", ORDER_REVERSE, &order));
    int has_seed = nf_opts_has(opts, "seed");
    NF_TRY(nf_opts_int(opts, "seed", 0, 0, 2147483647, &seed));
    if (has_seed && order != ORDER_RANDOM)
        return nf_error(NF_EINVAL, "%s (%s): option seed= applies only to order=random", b->type->name, b->name);
    if (order == ORDER_RANDOM && !has_seed && !rng)
        return nf_error(NF_EINVAL, "%s (%s): order=random needs a random stream or a seed= option", b->type->name,
                        b->name);
    const int D = b->dim;
    if (D > (1 << 24)) /* indices are stored as nf_real: exact up to 2^24 even in float */
        return nf_error(NF_EINVAL, "%s (%s): dimension %d: at most %d supported", b->type->name, b->name, D, 1 << 24);
    permute_state *st = nf_calloc(1, sizeof *st, "permute state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    st->perm = nf_calloc((size_t)D, sizeof(int), "permute indices");
    st->mark = nf_calloc((size_t)D, sizeof(int), "permute indices");
    size_t *p = nf_calloc((size_t)D, sizeof(size_t), "permute indices");
    char name[NF_PARAM_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s.perm", b->name);
    int rc = !st->perm || !st->mark || !p ? NF_ENOMEM : nf_params_add(b->S, name, (size_t)D, &st->off);
    if (rc == NF_OK) {
        if (order == ORDER_REVERSE) {
            for (int j = 0; j < D; j++) p[j] = (size_t)(D - 1 - j);
        } else if (has_seed) {
            nf_rng *r = nf_rng_alloc((uint64_t)seed, 0);
            if (!r) rc = nf_error(NF_ENOMEM, "%s (%s): out of memory for a random stream", b->type->name, b->name);
            else nf_rng_permutation(r, p, (size_t)D);
            nf_rng_free(r);
        } else {
            nf_rng_permutation(rng, p, (size_t)D);
        }
    }
    if (rc == NF_OK) {
        for (int j = 0; j < D; j++) b->S->value[st->off + j] = (nf_real)p[j];
        st->perm[0] = -1; /* read and validated on first use */
    }
    free(p);
    if (rc != NF_OK) {
        permute_destroy(b);
        b->state = NULL;
    }
    return rc;
}

static size_t permute_workspace(const nf_bijector *b, int n)
{
    (void)b, (void)n;
    return 0;
}

/* The permutation, re-read and validated if S changed since the last call (e.g. a model load). */
static int permutation(nf_bijector *b, const int **out)
{
    permute_state *st = b->state;
    const nf_real *s = b->S->value + st->off;
    const int D = b->dim;
    int same = 1;
    for (int j = 0; j < D && same; j++) same = (nf_real)st->perm[j] == s[j];
    if (!same) {
        memset(st->mark, 0, (size_t)D * sizeof(int));
        for (int j = 0; j < D; j++) {
            if (!(s[j] >= 0 && s[j] < D && s[j] == floor(s[j])) || st->mark[(int)s[j]]++) {
                st->perm[0] = -1;
                return nf_error(NF_EDATA, "%s (%s): stored permutation entry %d is %g: expected each of 0..%d exactly "
                                "once (corrupt model state?)", b->type->name, b->name, j, (double)s[j], D - 1);
            }
        }
        for (int j = 0; j < D; j++) st->perm[j] = (int)s[j];
    }
    *out = st->perm;
    return NF_OK;
}

/* out[:, j] = in[:, p(j)] (gather, forward) or out[:, p(j)] = in[:, j] (scatter, inverse);
 * then checks every output is finite. */
static int apply(nf_bijector *b, nf_real *out, const nf_real *in, int n, int scatter, const char *dir)
{
    const int *p;
    NF_TRY(permutation(b, &p));
    const int D = b->dim;
    for (int i = 0; i < n; i++) {
        const nf_real *ii = in + (size_t)i * D;
        nf_real *oi = out + (size_t)i * D;
        nf_real probe = 0; /* stays 0 unless some value is inf or NaN */
        if (scatter)
            for (int j = 0; j < D; j++) oi[p[j]] = ii[j];
        else
            for (int j = 0; j < D; j++) oi[j] = ii[p[j]];
        for (int j = 0; j < D; j++) probe += 0 * oi[j];
        if (probe != 0)
            return nf_error(NF_ENONFINITE, "%s (%s): %s input row %d is not finite", b->type->name, b->name, dir, i);
    }
    return NF_OK;
}

/* forward: y_j = x_{p(j)};  logdet += 0. */
static int permute_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)logdet, (void)ctx, (void)ws;
    return apply(b, y, x, n, 0, "forward");
}

/* inverse: x_{p(j)} = y_j;  logdet += 0. */
static int permute_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)logdet, (void)ctx, (void)ws;
    return apply(b, x, y, n, 1, "inverse");
}

/* backward: the Jacobian is the permutation matrix, so dx_{p(j)} += dy_j. */
static int permute_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    const int *p;
    NF_TRY(permutation(b, &p));
    if (!dx) return NF_OK;
    const int D = b->dim;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) dx[(size_t)i * D + p[j]] += dy[(size_t)i * D + j];
    return NF_OK;
}

/* inverse backward: x_{p(j)} = y_j, so dy_j += dx_{p(j)}. */
static int permute_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)dlogdet, (void)x, (void)y, (void)ctx, (void)ws;
    const int *p;
    NF_TRY(permutation(b, &p));
    if (!dy) return NF_OK;
    const int D = b->dim;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) dy[(size_t)i * D + j] += dx[(size_t)i * D + p[j]];
    return NF_OK;
}

const nf_bijector_type nf_bijector_permute = {
    .name = "permute",
    .options_help = "order=reverse|random seed=N (random only; default: the flow's seed)",
    .create = permute_create,
    .destroy = permute_destroy,
    .workspace = permute_workspace,
    .forward = permute_forward,
    .inverse = permute_inverse,
    .backward = permute_backward,
    .inverse_backward = permute_inverse_backward,
    .init_data = NULL,
};
