/* datasets/source.c - the data-source interface, the seeded split, and the "rows" kind. */
#include "datasets/source.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "core/import.h"
#include "core/rng.h"

/* ---- batches ----------------------------------------------------------------------------------- */

static int by_item(const void *a, const void *b)
{
    const nf_item_pos *x = a, *y = b;
    if (x->item != y->item) return (x->item > y->item) - (x->item < y->item);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void nf_item_pos_sort(nf_item_pos *a, size_t n) { qsort(a, n, sizeof *a, by_item); }

void nf_batch_free(nf_batch *b)
{
    if (!b) return;
    free(b->idx), free(b->x), free(b->ctx), free(b->offsets), free(b->times), free(b->marks);
    free(b->t_start), free(b->t_end);
    memset(b, 0, sizeof *b);
}

/* Grow *p to hold at least `want` elements of `size` bytes; *cap counts elements. */
static int grow(void **p, size_t *cap, size_t want, size_t size)
{
    if (want <= *cap && *p) return NF_OK;
    void *q = realloc(*p, (want ? want : 1) * size);
    if (!q) return nf_error(NF_ENOMEM, "out of memory for a batch");
    *p = q;
    *cap = want;
    return NF_OK;
}

static int reserve_items(nf_batch *b, int n)
{
    size_t cap = b->cap_items;
    if ((size_t)n <= cap && b->idx) return NF_OK;
    NF_TRY(grow((void **)&b->idx, &cap, (size_t)n, sizeof *b->idx));
    b->cap_items = cap;
    return NF_OK;
}

int nf_batch_reserve_rows(nf_batch *b, int n, int dim, int ctx_dim)
{
    NF_TRY(reserve_items(b, n));
    NF_TRY(grow((void **)&b->x, &b->cap_x, (size_t)n * dim, sizeof *b->x));
    if (ctx_dim > 0) NF_TRY(grow((void **)&b->ctx, &b->cap_ctx, (size_t)n * ctx_dim, sizeof *b->ctx));
    return NF_OK;
}

int nf_batch_reserve_events(nf_batch *b, int n, size_t events, int with_marks)
{
    size_t before = b->cap_items;
    NF_TRY(reserve_items(b, n));
    /* offsets (n + 1), t_start and t_end (n) follow the item capacity */
    if (b->cap_items != before || !b->offsets) {
        size_t c = b->cap_items;
        int64_t *o = realloc(b->offsets, (c + 1) * sizeof *o);
        if (o) b->offsets = o;
        double *s = realloc(b->t_start, c * sizeof *s);
        if (s) b->t_start = s;
        double *e = realloc(b->t_end, c * sizeof *e);
        if (e) b->t_end = e;
        if (!o || !s || !e) return nf_error(NF_ENOMEM, "out of memory for a batch of %d sequences", n);
    }
    size_t cap = b->cap_events;
    if (events > cap || !b->times) {
        double *t = realloc(b->times, (events ? events : 1) * sizeof *t);
        if (!t) return nf_error(NF_ENOMEM, "out of memory for a batch of %zu events", events);
        b->times = t;
        if (b->marks) {
            int32_t *m = realloc(b->marks, (events ? events : 1) * sizeof *m);
            if (!m) return nf_error(NF_ENOMEM, "out of memory for a batch of %zu events", events);
            b->marks = m;
        }
        b->cap_events = events ? events : 1;
    }
    if (with_marks && !b->marks) {
        b->marks = malloc(b->cap_events * sizeof *b->marks);
        if (!b->marks) return nf_error(NF_ENOMEM, "out of memory for a batch of %zu events", events);
    }
    return NF_OK;
}

/* ---- the interface ----------------------------------------------------------------------------- */

int nf_source_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    if (n < 1) return nf_error(NF_EINVAL, "%s: a batch of %d items (expected at least one)", s->name, n);
    for (int i = 0; i < n; i++)
        if (idx[i] >= s->n)
            return nf_error(NF_EINVAL, "%s: item %zu requested, but the source has %zu items", s->name, idx[i], s->n);
    return s->type->fetch(s, idx, n, b);
}

void nf_source_free(nf_source *s)
{
    if (!s) return;
    if (s->type && s->type->destroy) s->type->destroy(s);
    free(s);
}

int nf_source_owns(const nf_source *s, size_t item)
{
    return !s->type->owns || s->type->owns(s, item);
}

int nf_source_split(nf_source *s, double frac, uint64_t seed, nf_source **first, nf_source **rest)
{
    *first = *rest = NULL;
    if (!(frac >= 0 && frac < 1)) return nf_error(NF_EINVAL, "split fraction %g (expected 0 <= f < 1)", frac);
    size_t nf = (size_t)floor(frac * s->n);
    if (frac > 0 && nf == 0 && s->n >= 2) nf = 1;
    if (nf >= s->n)
        return nf_error(NF_EDATA, "%s: holding out a fraction %g leaves no training items out of %zu", s->name, frac,
                        s->n);
    size_t *perm = malloc(s->n * sizeof *perm);
    nf_rng *r = nf_rng_alloc(seed, 0x73706c74);
    int rc = perm && r ? NF_OK : nf_error(NF_ENOMEM, "out of memory splitting %zu items", s->n);
    /* nothing held out: the items keep their order, so an item's index stays its place in the data
     * (a dependent fit's rows are points of a structure stored in that order) */
    if (rc == NF_OK && nf > 0) nf_rng_permutation(r, perm, s->n);
    for (size_t i = 0; rc == NF_OK && nf == 0 && i < s->n; i++) perm[i] = i;
    nf_rng_free(r);
    if (rc == NF_OK && (!s->type->reorder || !s->type->range)) {
        /* the items stay where they are: two index views of the shuffled order */
        if (nf > 0) rc = nf_source_subset(s, perm, nf, first);
        if (rc == NF_OK) rc = nf_source_subset(s, perm + nf, s->n - nf, rest);
        free(perm);
        if (rc != NF_OK) {
            nf_source_free(*first);
            *first = NULL;
        }
        return rc;
    }
    if (rc == NF_OK) rc = s->type->reorder(s, perm);
    free(perm);
    if (rc == NF_OK && nf > 0) rc = s->type->range(s, 0, nf, first);
    if (rc == NF_OK) rc = s->type->range(s, nf, s->n - nf, rest);
    if (rc != NF_OK) {
        nf_source_free(*first);
        *first = NULL;
    }
    return rc;
}

/* ---- index views ------------------------------------------------------------------------------- */

typedef struct {
    const nf_source *parent;
    size_t *idx;      /* (n) items of the parent */
    size_t *map;      /* (cap) a batch's indices in the parent */
    size_t cap;
} subset_state;

static int subset_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    subset_state *st = s->state;
    if ((size_t)n > st->cap) {
        size_t *m = realloc(st->map, (size_t)n * sizeof *m);
        if (!m) return nf_error(NF_ENOMEM, "out of memory for a batch of %d", n);
        st->map = m;
        st->cap = (size_t)n;
    }
    for (int i = 0; i < n; i++) st->map[i] = st->idx[idx[i]];
    NF_TRY(st->parent->type->fetch(st->parent, st->map, n, b));
    memcpy(b->idx, idx, (size_t)n * sizeof *idx);
    return NF_OK;
}

static int subset_owns(const nf_source *s, size_t item)
{
    const subset_state *st = s->state;
    return nf_source_owns(st->parent, st->idx[item]);
}

/* Reordering a view reorders its index list: item i becomes item perm[i]. */
static int subset_reorder(nf_source *s, size_t *perm)
{
    subset_state *st = s->state;
    size_t *next = malloc((s->n ? s->n : 1) * sizeof *next);
    if (!next) return nf_error(NF_ENOMEM, "out of memory reordering %zu items", s->n);
    for (size_t i = 0; i < s->n; i++) next[i] = st->idx[perm[i]];
    free(st->idx);
    st->idx = next;
    return NF_OK;
}

static int subset_range(const nf_source *s, size_t first, size_t n, nf_source **out)
{
    const subset_state *st = s->state;
    if (first + n > s->n) return nf_error(NF_EINVAL, "%s: items %zu..%zu do not exist", s->name, first, first + n);
    return nf_source_subset(st->parent, st->idx + first, n, out);
}

static void subset_destroy(nf_source *s)
{
    subset_state *st = s->state;
    if (st) free(st->idx), free(st->map);
    free(st);
    s->state = NULL;
}

#define SUBSET_TYPE(k) \
    {.kind = k, .fetch = subset_fetch, .reorder = subset_reorder, .range = subset_range, .owns = subset_owns, \
     .destroy = subset_destroy}
static const nf_source_type subset_types[] = {SUBSET_TYPE("rows"), SUBSET_TYPE("sequences")};
#undef SUBSET_TYPE

int nf_source_subset(const nf_source *s, const size_t *idx, size_t n, nf_source **out)
{
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= s->n) return nf_error(NF_EINVAL, "%s: item %zu of a subset does not exist (%zu items)", s->name,
                                            idx[i], s->n);
    /* the view is of its parent's kind (a model checks the kind of what it trains on) */
    const nf_source_type *t = NULL;
    for (size_t i = 0; i < sizeof subset_types / sizeof subset_types[0]; i++)
        if (!strcmp(subset_types[i].kind, s->type->kind)) t = &subset_types[i];
    if (!t) return nf_error(NF_EINVAL, "%s: no index views of %s sources", s->name, s->type->kind);
    nf_source *v = nf_calloc(1, sizeof *v, "a data source view");
    subset_state *st = nf_calloc(1, sizeof *st, "a data source view");
    size_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!v || !st || !copy) {
        free(v), free(st), free(copy);
        return nf_error(NF_ENOMEM, "out of memory for a view of %zu items", n);
    }
    memcpy(copy, idx, n * sizeof *copy);
    *st = (subset_state){.parent = s, .idx = copy};
    *v = (nf_source){.type = t, .n = n, .dim = s->dim, .ctx_dim = s->ctx_dim, .num_marks = s->num_marks,
                     .partial = s->partial, .state = st};
    snprintf(v->name, sizeof v->name, "%s", s->name);
    *out = v;
    return NF_OK;
}

/* ---- rows -------------------------------------------------------------------------------------- */

typedef struct {
    nf_real *x, *ctx;       /* (n, dim), (n, ctx_dim) or NULL */
    double *logp_true;      /* (n) or NULL */
    int owns;               /* 1: loaded here and freed with the source */
} rows_state;

static int rows_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    const rows_state *st = s->state;
    const int D = s->dim, C = st->ctx ? s->ctx_dim : 0;
    NF_TRY(nf_batch_reserve_rows(b, n, D, C));
    for (int i = 0; i < n; i++) {
        size_t r = idx[i];
        b->idx[i] = r;
        memcpy(b->x + (size_t)i * D, st->x + r * D, (size_t)D * sizeof(nf_real));
        if (C) memcpy(b->ctx + (size_t)i * C, st->ctx + r * C, (size_t)C * sizeof(nf_real));
    }
    b->n = n;
    b->dim = D;
    b->ctx_dim = C;
    return NF_OK;
}

/* Move row perm[i] of the (n, w) array a to row i for every i, in place, following the cycles of
 * the permutation; `seen` marks visited rows (perm itself is left intact for the next array). */
static void permute_rows(void *a, size_t w, const size_t *perm, size_t n, unsigned char *seen, void *tmp)
{
    char *x = a;
    memset(seen, 0, n);
    for (size_t start = 0; start < n; start++) {
        if (seen[start]) continue;
        memcpy(tmp, x + start * w, w);
        size_t j = start;
        for (;;) {
            size_t k = perm[j];
            seen[j] = 1;
            if (k == start) {
                memcpy(x + j * w, tmp, w);
                break;
            }
            memcpy(x + j * w, x + k * w, w);
            j = k;
        }
    }
}

/* Give a wrapped source or a view arrays of its own (copies), so reordering leaves the caller's or
 * the parent's arrays as they were. */
static int rows_own(nf_source *s)
{
    rows_state *st = s->state;
    if (st->owns) return NF_OK;
    size_t nx = s->n * (size_t)s->dim, nc = st->ctx ? s->n * (size_t)s->ctx_dim : 0;
    nf_real *x = malloc((nx ? nx : 1) * sizeof *x), *c = nc ? malloc(nc * sizeof *c) : NULL;
    double *lp = st->logp_true ? malloc((s->n ? s->n : 1) * sizeof *lp) : NULL;
    if (!x || (nc && !c) || (st->logp_true && !lp)) {
        free(x), free(c), free(lp);
        return nf_error(NF_ENOMEM, "out of memory copying %zu rows", s->n);
    }
    memcpy(x, st->x, nx * sizeof *x);
    if (nc) memcpy(c, st->ctx, nc * sizeof *c);
    if (lp) memcpy(lp, st->logp_true, s->n * sizeof *lp);
    *st = (rows_state){.x = x, .ctx = c, .logp_true = lp, .owns = 1};
    return NF_OK;
}

static int rows_reorder(nf_source *s, size_t *perm)
{
    rows_state *st = s->state;
    NF_TRY(rows_own(s));
    size_t wx = (size_t)s->dim * sizeof(nf_real), wc = (size_t)s->ctx_dim * sizeof(nf_real);
    size_t wmax = wx > wc ? wx : wc;
    if (wmax < sizeof(double)) wmax = sizeof(double);
    unsigned char *seen = malloc(s->n ? s->n : 1);
    void *tmp = malloc(wmax);
    if (!seen || !tmp) {
        free(seen), free(tmp);
        return nf_error(NF_ENOMEM, "out of memory reordering %zu rows", s->n);
    }
    permute_rows(st->x, wx, perm, s->n, seen, tmp);
    if (st->ctx) permute_rows(st->ctx, wc, perm, s->n, seen, tmp);
    if (st->logp_true) permute_rows(st->logp_true, sizeof(double), perm, s->n, seen, tmp);
    free(seen), free(tmp);
    return NF_OK;
}

static void rows_destroy(nf_source *s)
{
    rows_state *st = s->state;
    if (st && st->owns) free(st->x), free(st->ctx), free(st->logp_true);
    free(st);
    s->state = NULL;
}

static int rows_range(const nf_source *s, size_t first, size_t n, nf_source **out);

static const nf_source_type rows_type = {
    .kind = "rows",
    .fetch = rows_fetch,
    .reorder = rows_reorder,
    .range = rows_range,
    .destroy = rows_destroy,
};

static int rows_new(nf_source **out, const char *name, size_t n, int dim, int ctx_dim, rows_state st)
{
    *out = NULL;
    nf_source *s = nf_calloc(1, sizeof *s, "data source");
    rows_state *p = nf_calloc(1, sizeof *p, "data source");
    if (!s || !p) {
        free(s), free(p);
        return NF_ENOMEM;
    }
    *p = st;
    *s = (nf_source){.type = &rows_type, .n = n, .dim = dim, .ctx_dim = ctx_dim, .state = p};
    snprintf(s->name, sizeof s->name, "%s", name);
    *out = s;
    return NF_OK;
}

static int rows_range(const nf_source *s, size_t first, size_t n, nf_source **out)
{
    const rows_state *st = s->state;
    if (first + n > s->n) return nf_error(NF_EINVAL, "%s: rows %zu..%zu do not exist", s->name, first, first + n);
    rows_state v = {.x = st->x + first * s->dim,
                    .ctx = st->ctx ? st->ctx + first * s->ctx_dim : NULL,
                    .logp_true = st->logp_true ? st->logp_true + first : NULL,
                    .owns = 0};
    return rows_new(out, s->name, n, s->dim, s->ctx_dim, v);
}

int nf_source_rows_wrap(nf_source **s, const nf_real *x, const nf_real *ctx, size_t n, int dim, int ctx_dim)
{
    if (dim < 1) return nf_error(NF_EINVAL, "rows of width %d (expected at least 1)", dim);
    if (ctx_dim < 0 || (ctx_dim > 0 && !ctx)) return nf_error(NF_EINVAL, "context width %d without a context array", ctx_dim);
    /* the arrays stay the caller's: never written (a reorder copies them first) */
    rows_state st = {.x = (nf_real *)x, .ctx = ctx_dim ? (nf_real *)ctx : NULL, .owns = 0};
    return rows_new(s, "data", n, dim, ctx_dim, st);
}

nf_rows nf_source_rows(const nf_source *s)
{
    nf_rows r = {0};
    if (!s || s->type != &rows_type) return r;
    const rows_state *st = s->state;
    r.x = st->x;
    r.ctx = st->ctx;
    r.logp_true = st->logp_true;
    return r;
}

void nf_source_rows_drop_logp_true(nf_source *s)
{
    if (!s || s->type != &rows_type) return;
    rows_state *st = s->state;
    if (st->owns) free(st->logp_true);
    st->logp_true = NULL;
}

/* ---- a share of the rows (data-parallel training) ------------------------------------------------ */

/* The rows [first, first + count) of a data set of n in memory: items keep their indices in the
 * whole set (so every process of a parallel run shuffles and splits the same n items).  A batch
 * with other rows (the first rows that data-dependent initialisation looks at, the same in every
 * process) is read from the file, as a streamed source would.  It cannot reorder: nf_source_split
 * gives index views of it. */
typedef struct {
    rows_state rows;
    size_t first, count;
    nf_source *file;        /* the same rows, streamed from the file */
} share_state;

static int share_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    const share_state *st = s->state;
    const int D = s->dim, C = st->rows.ctx ? s->ctx_dim : 0;
    for (int i = 0; i < n; i++)
        if (idx[i] < st->first || idx[i] - st->first >= st->count) return st->file->type->fetch(st->file, idx, n, b);
    NF_TRY(nf_batch_reserve_rows(b, n, D, C));
    for (int i = 0; i < n; i++) {
        size_t r = idx[i] - st->first;
        b->idx[i] = idx[i];
        memcpy(b->x + (size_t)i * D, st->rows.x + r * D, (size_t)D * sizeof(nf_real));
        if (C) memcpy(b->ctx + (size_t)i * C, st->rows.ctx + r * C, (size_t)C * sizeof(nf_real));
    }
    b->n = n;
    b->dim = D;
    b->ctx_dim = C;
    return NF_OK;
}

static int share_owns(const nf_source *s, size_t item)
{
    const share_state *st = s->state;
    return item >= st->first && item - st->first < st->count;
}

static void share_destroy(nf_source *s)
{
    share_state *st = s->state;
    if (st) free(st->rows.x), free(st->rows.ctx), free(st->rows.logp_true), nf_source_free(st->file);
    free(st);
    s->state = NULL;
}

static const nf_source_type share_type = {
    .kind = "rows",
    .fetch = share_fetch,
    .owns = share_owns,
    .destroy = share_destroy,
};

int nf_source_rows_load(nf_source **out, const char *path, const char *dataset, size_t expect_d, size_t expect_c,
                        int want_ctx)
{
    return nf_source_rows_load_share(out, path, dataset, expect_d, expect_c, want_ctx, 0, 1);
}

int nf_source_rows_load_share(nf_source **out, const char *path, const char *dataset, size_t expect_d,
                              size_t expect_c, int want_ctx, int part, int parts)
{
    *out = NULL;
    if (parts < 1 || part < 0 || part >= parts)
        return nf_error(NF_EINVAL, "share %d of %d (expected 0 <= share < parts)", part, parts);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    char what[1200];
    rows_state st = {.owns = 1};
    size_t n = 0, d = 0, c = 0, total = 0, first = 0, count = SIZE_MAX;
    int rc;
    if (!nf_h5_exists(f, dataset)) {
        rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected the samples as an n x d array; "
                                  "pick another with --dataset)", path, dataset);
        goto done;
    }
    /* the width first: a file of another dimension is refused before its rows are read */
    int rank;
    size_t dims[2];
    rc = nf_h5_shape(f, dataset, &rank, dims);
    if (rc == NF_OK && expect_d && dims[0] > 0 && dims[1] != expect_d)
        rc = nf_error(NF_EFORMAT, "%s:%s: %zu columns, expected %zu", path, dataset, dims[1], expect_d);
    if (rc == NF_OK && parts > 1) { /* rows [N part / parts, N (part + 1) / parts) */
        first = (size_t)((double)dims[0] * part / parts);
        count = (size_t)((double)dims[0] * (part + 1) / parts) - first;
        if (dims[0] < (size_t)parts)
            rc = nf_error(NF_EDATA, "%s:%s: %zu rows for %d processes (expected at least one row each)", path, dataset,
                          dims[0], parts);
    }
    if (rc == NF_OK) rc = nf_h5_read_real_rows(f, dataset, first, count, &st.x, &n, &d, &total);
    snprintf(what, sizeof what, "%s:%s", path, dataset);
    if (rc == NF_OK) rc = nf_data_validate(what, st.x, n, d, expect_d);
    if (rc == NF_OK && (want_ctx || expect_c > 0)) {
        if (!nf_h5_exists(f, "/context")) {
            if (expect_c > 0)
                rc = nf_error(NF_EFORMAT, "%s: no dataset /context (the model is conditional on %zu context "
                                          "values per sample)", path, expect_c);
        } else {
            size_t rows, all;
            rc = nf_h5_read_real_rows(f, "/context", first, count, &st.ctx, &rows, &c, &all);
            snprintf(what, sizeof what, "%s:/context", path);
            if (rc == NF_OK) rc = nf_data_validate(what, st.ctx, rows, c, expect_c);
            if (rc == NF_OK && all != total)
                rc = nf_error(NF_EFORMAT, "%s:/context has %zu rows but %s has %zu (expected one context row per "
                                          "sample)", path, all, dataset, total);
        }
    }
    if (rc == NF_OK && parts == 1 && nf_h5_exists(f, "/logp_true")) {
        size_t rows, cols;
        rc = nf_h5_read_double(f, "/logp_true", &st.logp_true, &rows, &cols);
        if (rc == NF_OK && (rows != n || cols != 1))
            rc = nf_error(NF_EFORMAT, "%s:/logp_true has %zu x %zu entries, expected %zu (one per sample)", path,
                          rows, cols, n);
    }
    if (rc == NF_OK && d > (size_t)1 << 30)
        rc = nf_error(NF_EFORMAT, "%s:%s: %zu columns (expected at most 2^30)", path, dataset, d);
    if (rc == NF_OK && parts == 1) {
        rc = rows_new(out, what, n, (int)d, (int)c, st);
    } else if (rc == NF_OK) {
        nf_source *v = nf_calloc(1, sizeof *v, "data source"), *file = NULL;
        share_state *sh = nf_calloc(1, sizeof *sh, "data source");
        if (!v || !sh) rc = NF_ENOMEM;
        else rc = nf_source_rows_open(&file, path, dataset, d, c, c > 0);
        if (rc != NF_OK) {
            free(v), free(sh);
        } else {
            *sh = (share_state){.rows = st, .first = first, .count = n, .file = file};
            *v = (nf_source){.type = &share_type, .n = total, .dim = (int)d, .ctx_dim = (int)c, .partial = 1,
                             .state = sh};
            snprintf(v->name, sizeof v->name, "%.*s", (int)sizeof v->name - 1, what);
            *out = v;
        }
    }
done:
    nf_h5_close(f);
    if (rc != NF_OK) free(st.x), free(st.ctx), free(st.logp_true);
    return rc;
}
