/* core/import_select.c - column selection and categorical one-hot context for the importers
 * (core/import_plan.h).
 *
 * A list ("waiting, 0, 2-4") is resolved entry by entry: a column name first (exact, after
 * trimming spaces), else a 0-based index or an index range.  The default data columns are all
 * columns that are not dropped, not context and not text (first data row not a number), so a
 * table with a free-text column imports without naming every numeric column.  Categories are
 * interned in a small open-addressing hash per context column while the rows stream by, and
 * sorted once at the end (numerically when every category is a number), so the one-hot layout
 * does not depend on the row order.
 */
#include "core/import_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int is_number(const char *s, double *v)
{
    if (!*s) return 0;
    char *end;
    *v = strtod(s, &end);
    return *end == '\0';
}

/* "a, b, c" (at most about 400 characters, then "...") into buf, for messages. */
static void list_names(char *buf, size_t size, char *const *names, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t j = 0; j < n; j++) {
        int w = snprintf(buf + at, size - at, "%s%s", j ? ", " : "", names[j]);
        if (w < 0 || (size_t)w >= size - at || at + (size_t)w > 400) {
            snprintf(buf + at, size - at, "%s...", j ? ", " : "");
            return;
        }
        at += (size_t)w;
    }
}

/* Resolve one comma-separated list into file columns: idx[*k..] (at most n_all + 1 entries are
 * stored; more means duplicates, which are refused).  flag names the list in messages. */
static int resolve(const nf_colplan *p, char *const *names, const char *flag, const char *list, size_t *idx,
                   size_t *k)
{
    char all[600];
    const char *s = list;
    *k = 0;
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *a = s, *b = s + len;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        size_t tl = (size_t)(b - a);
        if (tl == 0) return nf_error(NF_EINVAL, "%s '%s': an empty entry (expected column names or indices)", flag, list);
        size_t lo = p->n_all, hi = 0;
        for (size_t j = 0; j < p->n_all && lo == p->n_all; j++)
            if (strlen(names[j]) == tl && !strncmp(names[j], a, tl)) lo = hi = j;
        if (lo == p->n_all) {
            char tok[128], *end;
            snprintf(tok, sizeof tok, "%.*s", (int)(tl < sizeof tok ? tl : sizeof tok - 1), a);
            int digits = tok[0] >= '0' && tok[0] <= '9';
            unsigned long u = digits ? strtoul(tok, &end, 10) : 0, v = u;
            if (digits && *end == '-' && end[1] >= '0' && end[1] <= '9') v = strtoul(end + 1, &end, 10);
            if (digits && !*end && u <= v && v < p->n_all) {
                lo = u, hi = v;
            } else {
                list_names(all, sizeof all, names, p->n_all);
                if (digits && !*end)
                    return nf_error(NF_EINVAL, "%s '%s': %s is not a column of %s (expected indices from 0 to %zu; "
                                               "columns: %s)", flag, list, tok, p->path, p->n_all - 1, all);
                return nf_error(NF_EINVAL, "%s '%s': %s has no column '%s' (columns: %s)", flag, list, p->path, tok, all);
            }
        }
        for (size_t j = lo; j <= hi; j++) {
            for (size_t i = 0; i < *k; i++)
                if (idx[i] == j)
                    return nf_error(NF_EINVAL, "%s '%s': column '%s' is named twice", flag, list, names[j]);
            idx[(*k)++] = j;
        }
        s = comma ? comma + 1 : s + len;
    }
    return NF_OK;
}

static int given(const char *s) { return s && *s; }

int nf_colplan_make(nf_colplan *p, const char *path, char *const *names, size_t n_all, char *const *first_row,
                    const nf_import_select *sel)
{
    memset(p, 0, sizeof *p);
    p->path = path;
    p->n_all = n_all;
    /* no selection, or labels alone: every column is data (and, but for the labels, a number) */
    const int every = !sel || (!given(sel->columns) && !given(sel->drop) && !given(sel->context) && given(sel->labels));
    p->strict = every;
    p->role = malloc((n_all ? n_all : 1) * sizeof *p->role);
    p->x_src = malloc((n_all ? n_all : 1) * sizeof *p->x_src);
    p->ctx_src = malloc((n_all ? n_all : 1) * sizeof *p->ctx_src);
    size_t *tmp = malloc((n_all ? n_all : 1) * sizeof *tmp);
    int rc = p->role && p->x_src && p->ctx_src && tmp ? NF_OK : nf_error(NF_ENOMEM, "%s: out of memory", path);
    for (size_t j = 0; rc == NF_OK && j < n_all; j++) p->role[j] = -1;
    if (rc == NF_OK && every) {
        for (size_t j = 0; j < n_all; j++) p->role[j] = (int)j, p->x_src[j] = j;
        p->d = n_all;
    }
    if (rc != NF_OK || !sel) {
        free(tmp);
        return rc;
    }
    char *label = calloc(n_all ? n_all : 1, 1); /* file column j is a label column */
    if (!label) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    size_t nl = 0;
    if (rc == NF_OK && given(sel->labels)) rc = resolve(p, names, sel->labels_flag ? sel->labels_flag : "--labels", sel->labels, tmp, &nl);
    for (size_t i = 0; rc == NF_OK && i < nl; i++) label[tmp[i]] = 1;
    if (rc == NF_OK && given(sel->columns) && given(sel->drop))
        rc = nf_error(NF_EINVAL, "--columns and --drop: give one of them (--columns lists the data columns, "
                                 "--drop every column but those)");
    if (rc == NF_OK && given(sel->context)) rc = resolve(p, names, "--context", sel->context, p->ctx_src, &p->nctx);
    for (size_t m = 0; rc == NF_OK && m < p->nctx; m++) {
        if (label[p->ctx_src[m]])
            rc = nf_error(NF_EINVAL, "column '%s' is a label and in --context (a label column is data)",
                          names[p->ctx_src[m]]);
        p->role[p->ctx_src[m]] = -2 - (int)m;
    }
    if (rc == NF_OK && p->nctx) {
        p->cats = calloc(p->nctx, sizeof *p->cats);
        if (!p->cats) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    }
    if (rc == NF_OK && given(sel->columns)) {
        rc = resolve(p, names, sel->columns_flag ? sel->columns_flag : "--columns", sel->columns, p->x_src, &p->d);
        for (size_t k = 0; rc == NF_OK && k < p->d; k++) {
            if (p->role[p->x_src[k]] != -1)
                rc = nf_error(NF_EINVAL, "column '%s' is in --columns and in --context (a column is data or "
                                         "context, not both)", names[p->x_src[k]]);
            else
                p->role[p->x_src[k]] = (int)k;
        }
    } else if (rc == NF_OK && !every) {
        size_t nd = 0;
        if (given(sel->drop)) rc = resolve(p, names, "--drop", sel->drop, tmp, &nd);
        char *dropped = rc == NF_OK ? calloc(n_all ? n_all : 1, 1) : NULL;
        if (rc == NF_OK && !dropped) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
        for (size_t i = 0; rc == NF_OK && i < nd; i++) {
            if (p->role[tmp[i]] != -1 || label[tmp[i]])
                rc = nf_error(NF_EINVAL, "column '%s' is in --drop and in --%s", names[tmp[i]],
                              label[tmp[i]] ? "labels" : "context");
            dropped[tmp[i]] = 1;
        }
        if (rc == NF_OK && !(p->skipped = calloc(n_all ? n_all : 1, sizeof *p->skipped)))
            rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
        for (size_t j = 0; rc == NF_OK && j < n_all; j++) {
            double v;
            if (dropped[j] || p->role[j] != -1) continue;
            if (!label[j] && first_row && first_row[j][0] && !is_number(first_row[j], &v)) {
                if (!(p->skipped[p->n_skipped++] = dup_str(names[j]))) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
                continue;
            }
            p->role[j] = (int)p->d;
            p->x_src[p->d++] = j;
        }
        free(dropped);
    }
    if (rc == NF_OK && p->d == 0)
        rc = nf_error(NF_EINVAL, "%s: no data columns left (every column is dropped, a context column or text)", path);
    for (size_t j = 0; rc == NF_OK && j < n_all; j++)
        if (label[j] && p->role[j] < 0)
            rc = nf_error(NF_EINVAL, "label column '%s' is not among the data columns (--columns)", names[j]);
    if (rc == NF_OK && nl) {
        p->labels = calloc(p->d, sizeof *p->labels);
        p->is_label = calloc(p->d, 1);
        if (!p->labels || !p->is_label) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
        for (size_t k = 0; rc == NF_OK && k < p->d; k++) p->is_label[k] = label[p->x_src[k]];
    }
    free(label);
    free(tmp);
    if (rc != NF_OK) nf_colplan_free(p);
    return rc;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The index of s in dictionary c, added at first sight as entry c->n; at most max entries.  The
 * table starts at 4096 slots (more than twice NF_IMPORT_MAX_CATEGORIES, so a context dictionary never
 * grows) and doubles when half full. */
static int intern(nf_catdict *c, const char *s, size_t max, int32_t *idx)
{
    if (c->n * 2 >= c->nslot) {
        size_t nslot = c->nslot ? 2 * c->nslot : 4096;
        int32_t *slot = malloc(nslot * sizeof *slot);
        char **names = realloc(c->names, nslot / 2 * sizeof *names);
        if (!slot || !names) {
            free(slot);
            if (names) c->names = names;
            return nf_error(NF_ENOMEM, "out of memory for %zu distinct values", c->n + 1);
        }
        c->names = names;
        for (size_t i = 0; i < nslot; i++) slot[i] = -1;
        for (size_t i = 0; i < c->n; i++) {
            size_t h = (size_t)(hash_str(names[i]) & (nslot - 1));
            while (slot[h] >= 0) h = (h + 1) & (nslot - 1);
            slot[h] = (int32_t)i;
        }
        free(c->slot);
        c->slot = slot;
        c->nslot = nslot;
    }
    size_t h = (size_t)(hash_str(s) & (c->nslot - 1));
    while (c->slot[h] >= 0) {
        if (!strcmp(c->names[c->slot[h]], s)) {
            *idx = c->slot[h];
            return NF_OK;
        }
        h = (h + 1) & (c->nslot - 1);
    }
    if (c->n == max)
        return nf_error(NF_EDATA, "'%.40s' is category %zu of the column (a categorical context takes at most %zu "
                                  "distinct values)", s, max + 1, max);
    if (!(c->names[c->n] = dup_str(s))) return nf_error(NF_ENOMEM, "out of memory for categories");
    c->slot[h] = (int32_t)c->n;
    *idx = (int32_t)c->n++;
    return NF_OK;
}

int nf_colplan_category(nf_colplan *p, size_t m, const char *s, int32_t *idx)
{
    if (!*s) return nf_error(NF_EDATA, "empty field (expected a category)");
    return intern(&p->cats[m], s, NF_IMPORT_MAX_CATEGORIES, idx);
}

/* The shortest %.*g of v that reads back as v. */
static void shortest(char *buf, size_t size, double v)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

int nf_colplan_label(nf_colplan *p, size_t k, const char *s, double *value)
{
    char buf[40];
    double v;
    if (!*s) return nf_error(NF_EDATA, "empty field (expected a label)");
    if (is_number(s, &v)) {
        if (!isfinite(v)) return nf_error(NF_EDATA, "label %s (expected text or a finite number)", s);
        shortest(buf, sizeof buf, v);
        s = buf;
    }
    int32_t idx;
    NF_TRY(intern(&p->labels[k], s, INT32_MAX, &idx));
    *value = idx;
    return NF_OK;
}

typedef struct cat_key {
    const char *s;
    double v;
    int numeric;
    int32_t old;
} cat_key;

static int cmp_cat(const void *pa, const void *pb)
{
    const cat_key *a = pa, *b = pb;
    if (a->numeric && a->v != b->v) return a->v < b->v ? -1 : 1;
    return strcmp(a->s, b->s);
}

int nf_colplan_finish(nf_colplan *p, char *const *names, const int32_t *cat, nf_table *out)
{
    out->names = calloc(p->d, sizeof *out->names);
    if (!out->names) return nf_error(NF_ENOMEM, "%s: out of memory for column names", p->path);
    for (size_t k = 0; k < p->d; k++)
        if (!(out->names[k] = dup_str(names[p->x_src[k]]))) return nf_error(NF_ENOMEM, "%s: out of memory", p->path);
    out->n_skipped = p->n_skipped;
    out->skipped = p->skipped;
    p->skipped = NULL;
    p->n_skipped = 0;
    if (!p->nctx) return NF_OK;
    size_t c = 0;
    for (size_t m = 0; m < p->nctx; m++) c += p->cats[m].n;
    int32_t *remap = malloc((c ? c : 1) * sizeof *remap);
    cat_key *keys = malloc((c ? c : 1) * sizeof *keys);
    out->ctx_names = calloc(c ? c : 1, sizeof *out->ctx_names);
    out->ctx = calloc(out->n * c > 0 ? out->n * c : 1, sizeof *out->ctx);
    int rc = remap && keys && out->ctx_names && out->ctx ? NF_OK : nf_error(NF_ENOMEM, "%s: out of memory", p->path);
    out->c = c;
    size_t base = 0;
    for (size_t m = 0; rc == NF_OK && m < p->nctx; m++) {
        nf_catdict *d = &p->cats[m];
        int numeric = 1;
        for (size_t i = 0; i < d->n; i++) {
            keys[i] = (cat_key){.s = d->names[i], .old = (int32_t)i};
            numeric &= is_number(d->names[i], &keys[i].v) && !isnan(keys[i].v);
        }
        for (size_t i = 0; i < d->n; i++) keys[i].numeric = numeric;
        qsort(keys, d->n, sizeof *keys, cmp_cat);
        const char *col = names[p->ctx_src[m]];
        for (size_t r = 0; r < d->n && rc == NF_OK; r++) {
            remap[base + (size_t)keys[r].old] = (int32_t)(base + r);
            size_t len = strlen(col) + strlen(keys[r].s) + 2;
            char *nm = malloc(len);
            if (!nm) rc = nf_error(NF_ENOMEM, "%s: out of memory", p->path);
            else snprintf(nm, len, "%s=%s", col, keys[r].s);
            out->ctx_names[base + r] = nm;
        }
        for (size_t i = 0; i < out->n; i++) out->ctx[i * c + (size_t)remap[base + (size_t)cat[i * p->nctx + m]]] = 1;
        base += d->n;
    }
    free(remap);
    free(keys);
    return rc;
}

void nf_colplan_free(nf_colplan *p)
{
    if (!p) return;
    for (size_t m = 0; p->cats && m < p->nctx; m++) {
        for (size_t i = 0; i < p->cats[m].n; i++) free(p->cats[m].names[i]);
        free(p->cats[m].names);
        free(p->cats[m].slot);
    }
    for (size_t k = 0; p->labels && k < p->d; k++) {
        for (size_t i = 0; i < p->labels[k].n; i++) free(p->labels[k].names[i]);
        free(p->labels[k].names);
        free(p->labels[k].slot);
    }
    free(p->labels);
    free(p->is_label);
    for (size_t i = 0; i < p->n_skipped; i++) free(p->skipped[i]);
    free(p->skipped);
    free(p->cats);
    free(p->role);
    free(p->x_src);
    free(p->ctx_src);
    memset(p, 0, sizeof *p);
}

int nf_table_select(const char *path, const nf_table *all, const nf_import_select *sel, nf_table *out)
{
    memset(out, 0, sizeof *out);
    nf_colplan p;
    NF_TRY(nf_colplan_make(&p, path, all->names, all->d, NULL, sel));
    size_t n = all->n, d = p.d;
    int32_t *cat = p.nctx ? malloc(n * p.nctx * sizeof *cat) : NULL;
    out->x = malloc(n * d * sizeof *out->x);
    int rc = out->x && (!p.nctx || cat) ? NF_OK : nf_error(NF_ENOMEM, "%s: out of memory for %zu x %zu values", path, n, d);
    for (size_t i = 0; rc == NF_OK && i < n; i++) {
        const double *row = all->x + i * all->d;
        for (size_t k = 0; rc == NF_OK && k < d; k++) {
            out->x[i * d + k] = row[p.x_src[k]];
            if (p.is_label && p.is_label[k]) {
                char buf[40];
                shortest(buf, sizeof buf, row[p.x_src[k]]);
                if ((rc = nf_colplan_label(&p, k, buf, &out->x[i * d + k])) != NF_OK)
                    nf_error_context(rc, "%s row %zu, column %zu ('%s')", path, i, p.x_src[k], all->names[p.x_src[k]]);
            }
        }
        for (size_t m = 0; rc == NF_OK && m < p.nctx; m++) {
            char buf[40];
            shortest(buf, sizeof buf, row[p.ctx_src[m]]);
            if ((rc = nf_colplan_category(&p, m, buf, &cat[i * p.nctx + m])) != NF_OK)
                nf_error_context(rc, "%s row %zu, column %zu ('%s')", path, i, p.ctx_src[m], all->names[p.ctx_src[m]]);
        }
    }
    if (rc == NF_OK) {
        out->n = n;
        out->d = d;
        rc = nf_colplan_finish(&p, all->names, cat, out);
    }
    if (rc != NF_OK) nf_table_free(out);
    free(cat);
    nf_colplan_free(&p);
    return rc;
}
