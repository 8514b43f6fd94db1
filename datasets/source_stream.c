/* datasets/source_stream.c - rows read from an HDF5 file batch by batch, for data larger than memory.
 *
 * nf_source_rows_open() checks the file's shape once and keeps the dataset open; each fetch reads
 * just the batch's rows (an HDF5 point selection of every column of those rows, in ascending row
 * order so the library walks the file forwards, then scattered into the caller's order) and checks
 * them for non-finite values, naming the row.  Memory is the batch, not the data.  Such a source
 * cannot reorder its rows in place, so nf_source_split gives it index views (datasets/source.c).
 */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "datasets/source.h"

typedef struct {
    hid_t file, x, ctx;      /* ctx < 0 without context */
    hsize_t *coord;          /* (cap * max(dim, ctx_dim), 2) point selection */
    nf_item_pos *order;      /* (cap) the batch's rows and positions, sorted by row */
    nf_real *buf;            /* (cap * max(dim, ctx_dim)) rows in ascending order */
    size_t cap;              /* rows the buffers hold */
} stream_state;

static hid_t mem_type(void) { return sizeof(nf_real) == sizeof(double) ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT; }

/* Buffers for n rows of up to `width` values (width is fixed per source). */
static int stream_reserve(stream_state *st, size_t n, int width)
{
    if (n <= st->cap) return NF_OK;
    size_t values = n * (size_t)width;
    hsize_t *c = realloc(st->coord, 2 * values * sizeof *c);
    if (c) st->coord = c;
    nf_real *b = realloc(st->buf, values * sizeof *b);
    if (b) st->buf = b;
    nf_item_pos *o = realloc(st->order, n * sizeof *o);
    if (o) st->order = o;
    if (!c || !b || !o) return nf_error(NF_ENOMEM, "out of memory for a batch of %zu rows", n);
    st->cap = n;
    return NF_OK;
}

/* Rows order[0..n-1].item (ascending) of the (N, w) dataset d into out (n, w) at their positions. */
static int read_rows(const nf_source *s, hid_t d, int w, int n, nf_real *out, const char *what)
{
    stream_state *st = s->state;
    size_t k = 0;
    for (int j = 0; j < n; j++) {
        size_t r = st->order[j].item;
        for (int c = 0; c < w; c++, k++) {
            st->coord[2 * k] = r;
            st->coord[2 * k + 1] = (hsize_t)c;
        }
    }
    hid_t fs = H5Dget_space(d);
    hsize_t count = (hsize_t)n * w;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? H5Sselect_elements(fs, H5S_SELECT_SET, (size_t)count, st->coord) : -1;
    if (e >= 0) e = H5Dread(d, mem_type(), ms, fs, H5P_DEFAULT, st->buf);
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    if (e < 0) return nf_error(NF_EIO, "%s: reading %d rows of %s failed (file damaged or changed?)", s->name, n, what);
    for (int j = 0; j < n; j++) {
        const nf_real *row = st->buf + (size_t)j * w;
        for (int c = 0; c < w; c++)
            if (!isfinite(row[c]))
                return nf_error(NF_EDATA, "%s: %s row %zu, column %d is %g (expected finite values)", s->name, what,
                                st->order[j].item, c, (double)row[c]);
        memcpy(out + st->order[j].pos * (size_t)w, row, (size_t)w * sizeof *row);
    }
    return NF_OK;
}

static int stream_fetch(const nf_source *s, const size_t *idx, int n, nf_batch *b)
{
    stream_state *st = s->state;
    int C = st->ctx >= 0 ? s->ctx_dim : 0, w = s->dim > C ? s->dim : C;
    NF_TRY(nf_batch_reserve_rows(b, n, s->dim, C));
    NF_TRY(stream_reserve(st, (size_t)n, w));
    for (int j = 0; j < n; j++) st->order[j] = (nf_item_pos){.item = idx[j], .pos = (size_t)j};
    nf_item_pos_sort(st->order, (size_t)n);
    NF_TRY(read_rows(s, st->x, s->dim, n, b->x, "data"));
    if (C) NF_TRY(read_rows(s, st->ctx, C, n, b->ctx, "/context"));
    memcpy(b->idx, idx, (size_t)n * sizeof *idx);
    b->n = n;
    b->dim = s->dim;
    b->ctx_dim = C;
    return NF_OK;
}

static void stream_destroy(nf_source *s)
{
    stream_state *st = s->state;
    if (!st) return;
    if (st->ctx >= 0) H5Dclose(st->ctx);
    if (st->x >= 0) H5Dclose(st->x);
    if (st->file >= 0) H5Fclose(st->file);
    free(st->coord), free(st->order), free(st->buf);
    free(st);
    s->state = NULL;
}

static const nf_source_type stream_type = {
    .kind = "rows",
    .fetch = stream_fetch,
    .reorder = NULL, /* rows stay in the file: nf_source_split gives index views */
    .range = NULL,
    .destroy = stream_destroy,
};

int nf_source_rows_open(nf_source **out, const char *path, const char *dataset, size_t expect_d, size_t expect_c,
                        int want_ctx)
{
    *out = NULL;
    /* shapes first, through the checked reader (format, presence, rank, width, rows of /context) */
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    int rank, rc = NF_OK, has_ctx = 0;
    size_t dims[2] = {0, 0}, cdims[2] = {0, 0};
    if (!nf_h5_exists(f, dataset))
        rc = nf_error(NF_EFORMAT, "%s: no dataset %s (expected the samples as an n x d array; pick another with "
                                  "--dataset)", path, dataset);
    if (rc == NF_OK) rc = nf_h5_shape(f, dataset, &rank, dims);
    if (rc == NF_OK) rc = nf_h5_check_numeric(f, dataset);
    if (rc == NF_OK && (dims[0] == 0 || dims[1] == 0))
        rc = nf_error(NF_EDATA, "%s:%s is empty (expected at least one sample)", path, dataset);
    if (rc == NF_OK && expect_d && dims[1] != expect_d)
        rc = nf_error(NF_EDATA, "%s:%s has %zu columns, expected %zu", path, dataset, dims[1], expect_d);
    if (rc == NF_OK && (want_ctx || expect_c > 0)) {
        has_ctx = nf_h5_exists(f, "/context");
        if (!has_ctx && expect_c > 0)
            rc = nf_error(NF_EFORMAT, "%s: no dataset /context (the model is conditional on %zu context values per "
                                      "sample)", path, expect_c);
        if (rc == NF_OK && has_ctx) rc = nf_h5_shape(f, "/context", &rank, cdims);
        if (rc == NF_OK && has_ctx) rc = nf_h5_check_numeric(f, "/context");
        if (rc == NF_OK && has_ctx && cdims[0] != dims[0])
            rc = nf_error(NF_EFORMAT, "%s:/context has %zu rows but %s has %zu (expected one context row per sample)",
                          path, cdims[0], dataset, dims[0]);
        if (rc == NF_OK && has_ctx && expect_c && cdims[1] != expect_c)
            rc = nf_error(NF_EDATA, "%s:/context has %zu columns, expected %zu", path, cdims[1], expect_c);
    }
    nf_h5_close(f);
    NF_TRY(rc);
    if (dims[1] > (1u << 20) || cdims[1] > (1u << 20))
        return nf_error(NF_EFORMAT, "%s: rows of %zu values (expected at most 2^20)", path, dims[1]);

    stream_state *st = nf_calloc(1, sizeof *st, "a streamed data source");
    nf_source *s = nf_calloc(1, sizeof *s, "a streamed data source");
    if (!st || !s) {
        free(st), free(s);
        return NF_ENOMEM;
    }
    st->file = st->x = st->ctx = -1;
    *s = (nf_source){.type = &stream_type, .n = dims[0], .dim = (int)dims[1], .ctx_dim = has_ctx ? (int)cdims[1] : 0,
                     .state = st};
    snprintf(s->name, sizeof s->name, "%s:%s", path, dataset);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    /* the close degree nf_h5_open uses: HDF5 refuses a second open of the same file (the command
     * reading the data's column names) with another one */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0) H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    st->file = fapl < 0 ? -1 : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    /* nf writes its data in checksummed chunks of about 16 KiB; a batch's scattered rows touch
     * hundreds of them, so keep up to 32 MB of chunks (HDF5's default is 1 MB) */
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (dapl >= 0) H5Pset_chunk_cache(dapl, 100003, (size_t)32 << 20, 1.0);
    hid_t acc = dapl >= 0 ? dapl : H5P_DEFAULT;
    if (st->file >= 0) st->x = H5Dopen2(st->file, dataset, acc);
    if (st->x >= 0 && has_ctx) st->ctx = H5Dopen2(st->file, "/context", acc);
    if (dapl >= 0) H5Pclose(dapl);
    if (st->file < 0 || st->x < 0 || (has_ctx && st->ctx < 0)) {
        nf_source_free(s);
        return nf_error(NF_EIO, "%s: cannot open %s for reading", path, dataset);
    }
    *out = s;
    return NF_OK;
}
