/* datasets/causal_share.c - a share of a causal file for data-parallel training: each process of
 * `mpirun nf causal fit` holds the units [N r / K, N (r + 1) / K) of /x, /a and /y, read by
 * hyperslab (see causal.h).  Units of other shares are read from the file when asked for, by a point
 * selection of their rows: the set-up asks for a few thousand (the same in every process), training
 * never does, since each process computes the units of a batch it holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/causal.h"

/* Units [first, first + count) of n as rows: y (count, dy), context [x, a] (count, dx + 1), as
 * nf_causal_source lays them out.  It cannot reorder: nf_source_split gives index views of it. */
typedef struct {
    nf_real *y, *c;
    size_t first, count;
    int dx, dy;
    char path[1024], ds[3][256]; /* covariates, treatment, outcome: where other units are read */
    nf_item_pos *order;          /* (cap) a batch's units of other shares and their positions, by unit */
    size_t *units;               /* (cap) those units, ascending */
    size_t cap;
} share_state;

static int share_owns(const nf_source *s, size_t item)
{
    const share_state *st = s->state;
    return item >= st->first && item - st->first < st->count;
}

/* Units order[0..k-1].item (ascending) of other shares, read from the file into their batch rows. */
static int read_others(const nf_source *s, size_t k, nf_batch *b)
{
    share_state *st = s->state;
    for (size_t j = 0; j < k; j++) st->units[j] = st->order[j].item;
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, st->path, NULL, 0));
    double *v[3] = {NULL, NULL, NULL};
    size_t w[3];
    int rc = NF_OK;
    for (int d = 0; rc == NF_OK && d < 3; d++) rc = nf_h5_read_double_points(f, st->ds[d], st->units, k, &v[d], &w[d]);
    if (rc == NF_OK && (w[0] != (size_t)st->dx || w[1] != 1 || w[2] != (size_t)st->dy))
        rc = nf_error(NF_EFORMAT, "%s: the datasets changed shape while training (expected %d covariates, one "
                                  "treatment, %d outcomes per unit)", st->path, st->dx, st->dy);
    nf_h5_close(f);
    const int dx = st->dx, dy = st->dy, C = dx + 1;
    for (size_t j = 0; rc == NF_OK && j < k; j++) {
        nf_causal_data u = {.n = 1, .dx = dx, .dy = dy, .x = v[0] + j * dx, .a = v[1] + j, .y = v[2] + j * dy};
        rc = nf_causal_validate_units(&u, st->units[j], st->path);
        size_t i = st->order[j].pos;
        for (int q = 0; rc == NF_OK && q < dy; q++) b->x[i * dy + q] = (nf_real)u.y[q];
        for (int q = 0; rc == NF_OK && q < dx; q++) b->ctx[i * C + q] = (nf_real)u.x[q];
        if (rc == NF_OK) b->ctx[i * C + dx] = (nf_real)u.a[0];
    }
    for (int d = 0; d < 3; d++) free(v[d]);
    return rc;
}

static int share_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    share_state *st = s->state;
    const int dy = st->dy, C = st->dx + 1;
    NF_TRY(nf_batch_reserve_rows(b, n, dy, C));
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        b->idx[i] = idx[i];
        if (!share_owns(s, idx[i])) {
            k++;
            continue;
        }
        size_t r = idx[i] - st->first;
        memcpy(b->x + (size_t)i * dy, st->y + r * dy, (size_t)dy * sizeof(nf_real));
        memcpy(b->ctx + (size_t)i * C, st->c + r * C, (size_t)C * sizeof(nf_real));
    }
    if (k > st->cap) {
        nf_item_pos *o = realloc(st->order, k * sizeof *o);
        size_t *u = o ? realloc(st->units, k * sizeof *u) : NULL;
        if (o) st->order = o;
        if (u) st->units = u;
        if (!u) return nf_error(NF_ENOMEM, "out of memory for a batch of %d units", n);
        st->cap = k;
    }
    if (k) {
        k = 0;
        for (int i = 0; i < n; i++)
            if (!share_owns(s, idx[i])) st->order[k++] = (nf_item_pos){.item = idx[i], .pos = (size_t)i};
        nf_item_pos_sort(st->order, k);
        NF_TRY(read_others(s, k, b));
    }
    b->n = n;
    b->dim = dy;
    b->ctx_dim = C;
    return NF_OK;
}

static void share_destroy(nf_source *s)
{
    share_state *st = s->state;
    if (st) free(st->y), free(st->c), free(st->order), free(st->units);
    free(st);
    s->state = NULL;
}

static const nf_source_type share_type = {
    .kind = "rows",
    .fetch = share_fetch,
    .owns = share_owns,
    .destroy = share_destroy,
};

/* Rows [first, first + count) of dataset ds (which must have n rows and, if w, w columns) as
 * doubles; what names it in messages. */
static int read_share(nf_h5 *f, const char *path, const char *ds, const char *what, size_t n, size_t w, size_t first,
                      size_t count, double **v, size_t *cols)
{
    if (!nf_h5_exists(f, ds)) return nf_causal_missing(path, ds, what);
    size_t rows, total;
    NF_TRY(nf_h5_read_double_rows(f, ds, first, count, v, &rows, cols, &total));
    if (total != n || (w && *cols != w)) {
        free(*v);
        *v = NULL;
        return nf_error(NF_EDATA, "%s: %s is %zu x %zu (expected %zu rows%s)", path, ds, total, *cols, n,
                        w == 1 ? ", one column" : "");
    }
    return NF_OK;
}

int nf_causal_source_share(nf_source **s, const char *path, const char *xds, const char *ads, const char *yds,
                           int part, int parts)
{
    *s = NULL;
    xds = xds ? xds : "/x", ads = ads ? ads : "/a", yds = yds ? yds : "/y";
    if (parts < 1 || part < 0 || part >= parts)
        return nf_error(NF_EINVAL, "share %d of %d (expected 0 <= share < parts)", part, parts);
    if (parts == 1) {
        nf_causal_data d;
        NF_TRY(nf_causal_load(&d, path, xds, ads, yds));
        int rc = nf_causal_source(s, &d);
        nf_causal_data_free(&d);
        return rc;
    }
    if (strlen(path) >= sizeof ((share_state *)0)->path || strlen(xds) >= 256 || strlen(ads) >= 256 ||
        strlen(yds) >= 256)
        return nf_error(NF_EINVAL, "%s: the file or dataset name is too long", path);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, NF_CAUSAL_FORMAT_VERSION));
    int rank, rc = NF_OK;
    size_t dims[2] = {0, 0}, wx = 0, wa, wy = 0;
    if (!nf_h5_exists(f, xds)) rc = nf_causal_missing(path, xds, "covariates, one row a unit");
    if (rc == NF_OK) rc = nf_h5_shape(f, xds, &rank, dims);
    const size_t n = dims[0];
    if (rc == NF_OK && n < (size_t)parts)
        rc = nf_error(NF_EDATA, "%s: %zu units for %d processes (expected at least one each)", path, n, parts);
    const size_t first = (size_t)((double)n * part / parts), count = (size_t)((double)n * (part + 1) / parts) - first;
    nf_causal_data d = {.n = count};
    if (rc == NF_OK) rc = read_share(f, path, xds, "covariates, one row a unit", n, 0, first, count, &d.x, &wx);
    if (rc == NF_OK) rc = read_share(f, path, ads, "treatment, 0/1", n, 1, first, count, &d.a, &wa);
    if (rc == NF_OK) rc = read_share(f, path, yds, "outcome", n, 0, first, count, &d.y, &wy);
    nf_h5_close(f);
    d.dx = (int)wx, d.dy = (int)wy;
    if (rc == NF_OK) rc = nf_causal_validate_units(&d, first, path);
    share_state *st = rc == NF_OK ? nf_calloc(1, sizeof *st, "data source") : NULL;
    nf_source *v = st ? nf_calloc(1, sizeof *v, "data source") : NULL;
    if (rc == NF_OK && !v) rc = NF_ENOMEM;
    if (rc == NF_OK) rc = nf_causal_rows(&d, &st->y, &st->c);
    nf_causal_data_free(&d);
    if (rc != NF_OK) {
        free(st), free(v);
        return rc;
    }
    st->first = first, st->count = count, st->dx = (int)wx, st->dy = (int)wy;
    snprintf(st->path, sizeof st->path, "%s", path);
    snprintf(st->ds[0], sizeof st->ds[0], "%s", xds);
    snprintf(st->ds[1], sizeof st->ds[1], "%s", ads);
    snprintf(st->ds[2], sizeof st->ds[2], "%s", yds);
    *v = (nf_source){.type = &share_type, .n = n, .dim = (int)wy, .ctx_dim = (int)wx + 1, .partial = 1, .state = st};
    snprintf(v->name, sizeof v->name, "%.*s", (int)sizeof v->name - 1, path);
    *s = v;
    return NF_OK;
}
