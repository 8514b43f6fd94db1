/* core/import.c - CSV and NPY files into n x d tables, and validation of loaded data.
 *
 * CSV: the delimiter is the one of tab, ';' and ',' that splits the first two lines into the same
 * number of fields (most fields wins), else runs of whitespace (see detect_delimiter).  The first line is a header when one of
 * its fields is not a number while every field of the second line is (or when no field of the first
 * line is a number).  Fields may be quoted ("a ""b"""), blank lines and trailing \r are ignored.
 * NPY: the header is a Python dict literal {'descr': '<f8', 'fortran_order': False, 'shape': (n, d)};
 * the data follows it, element by element in C or Fortran order, decoded byte by byte so the result
 * does not depend on the host's byte order.
 */
#include "core/import.h"
#include "core/import_plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/stat.h>

void nf_table_free(nf_table *t)
{
    if (!t) return;
    if (t->names)
        for (size_t j = 0; j < t->d; j++) free(t->names[j]);
    if (t->ctx_names)
        for (size_t j = 0; j < t->c; j++) free(t->ctx_names[j]);
    for (size_t j = 0; t->skipped && j < t->n_skipped; j++) free(t->skipped[j]);
    free(t->names);
    free(t->x);
    free(t->ctx);
    free(t->ctx_names);
    free(t->skipped);
    memset(t, 0, sizeof *t);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* names[j] = given[j] when non-empty, else "x<j>". */
static int make_names(nf_table *t, char **given, const char *path)
{
    t->names = nf_calloc(t->d, sizeof *t->names, "column names");
    if (!t->names) return NF_ENOMEM;
    for (size_t j = 0; j < t->d; j++) {
        char def[32];
        snprintf(def, sizeof def, "x%zu", j);
        if (!(t->names[j] = dup_str(given && given[j][0] ? given[j] : def)))
            return nf_error(NF_ENOMEM, "%s: out of memory for column names", path);
    }
    return NF_OK;
}

/* ---- CSV ------------------------------------------------------------------------------------- */

typedef struct {
    FILE *fp;
    char *buf;
    size_t cap, lineno;
} reader;

/* The next non-blank line without its line ending (and without a UTF-8 byte order mark); NULL at end. */
static char *next_line(reader *r)
{
    ssize_t len;
    while ((len = getline(&r->buf, &r->cap, r->fp)) >= 0) {
        char *s = r->buf;
        if (++r->lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, len -= 3;
        while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r')) s[--len] = '\0';
        if (s[strspn(s, " \t")] != '\0') return s;
    }
    return NULL;
}

typedef struct {
    char **f;
    size_t n, cap;
} fields;

static int push_field(fields *v, char *s)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 16;
        char **p = realloc(v->f, cap * sizeof *p);
        if (!p) return nf_error(NF_ENOMEM, "out of memory splitting a CSV line into %zu fields", cap);
        v->f = p;
        v->cap = cap;
    }
    v->f[v->n++] = s;
    return NF_OK;
}

static int is_blank(char c, char delim) { return c == ' ' || (c == '\t' && delim != '\t'); }

/* Split a line in place into fields, unquoting "..." (with "" for a quote).  delim ' ' splits on runs
 * of whitespace; otherwise spaces around fields are dropped and an empty field stays empty. */
static int split(char *line, char delim, fields *v, const char *path, size_t lineno)
{
    int ws = delim == ' ';
    char *p = line;
    v->n = 0;
    for (;;) {
        while (is_blank(*p, delim)) p++;
        if (ws && !*p) break;
        size_t col = v->n + 1;
        char *start = p;
        if (*p == '"') {
            char *out = p++;
            for (;;) {
                if (!*p)
                    return nf_error(NF_EFORMAT, "%s line %zu, column %zu: unterminated quote (fields cannot span lines)",
                                    path, lineno, col);
                if (*p == '"' && p[1] == '"') *out++ = '"', p += 2;
                else if (*p == '"') break;
                else *out++ = *p++;
            }
            char *after = ++p;
            while (is_blank(*p, delim)) p++;
            if (*p && (ws ? p == after : *p != delim))
                return nf_error(NF_EFORMAT, "%s line %zu, column %zu: text after the closing quote", path, lineno, col);
            *out = '\0'; /* out < p: the closing quote was consumed */
            NF_TRY(push_field(v, start));
            if (!*p) break;
            if (!ws) p++;
        } else {
            while (*p && (ws ? (*p != ' ' && *p != '\t') : *p != delim)) p++;
            char *end = p;
            int more = *p != '\0';
            while (end > start && is_blank(end[-1], delim)) end--;
            if (more) p++;
            *end = '\0';
            NF_TRY(push_field(v, start));
            if (!more) break;
        }
    }
    return NF_OK;
}

/* How often c occurs outside quotes. */
static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    int quoted = 0;
    for (; *s; s++) {
        if (*s == '"') quoted = !quoted;
        else if (*s == c && !quoted) n++;
    }
    return n;
}

/* Fields when split on runs of whitespace, outside quotes. */
static size_t count_ws_fields(const char *s)
{
    size_t n = 0;
    int quoted = 0, in_field = 0;
    for (; *s; s++) {
        int blank = !quoted && (*s == ' ' || *s == '\t');
        if (*s == '"') quoted = !quoted;
        if (!blank && !in_field) n++;
        in_field = !blank;
    }
    return n;
}

/* A delimiter that splits both lines alike (the one giving most fields), else whitespace if it does,
 * else the most frequent delimiter (so a ragged comma file is reported as ragged), else whitespace. */
static char detect_delimiter(const char *l1, const char *l2)
{
    static const char cand[] = {'\t', ';', ','};
    char agree = 0, most = 0;
    size_t agree_n = 0, most_n = 0;
    for (int k = 0; k < 3; k++) {
        size_t n1 = count_char(l1, cand[k]);
        size_t n2 = l2 ? count_char(l2, cand[k]) : n1;
        if (n1 > most_n) most = cand[k], most_n = n1;
        if (n1 && n1 == n2 && n1 > agree_n) agree = cand[k], agree_n = n1;
    }
    if (agree) return agree;
    size_t w1 = count_ws_fields(l1);
    if (!most || (w1 > 1 && (!l2 || count_ws_fields(l2) == w1))) return ' ';
    return most;
}

static int parse_number(const char *s, double *out)
{
    if (!*s) return 0;
    char *end;
    *out = strtod(s, &end); /* accepts nan and inf: validation rejects them with their position */
    return *end == '\0';
}

static size_t count_non_numbers(const fields *v)
{
    size_t k = 0;
    double t;
    for (size_t j = 0; j < v->n; j++) k += !parse_number(v->f[j], &t);
    return k;
}

typedef struct {
    const char *path;
    double *x;       /* (cap, d) the data columns */
    int32_t *cat;    /* (cap, plan->nctx) category indices of the context columns */
    size_t n, d, cap;
    size_t nf;       /* fields on every line */
    size_t ref_line; /* the first data line: the field count every row must match */
    nf_colplan *plan;
    char **names;    /* (nf) every column's name, for messages */
} csv_rows;

static int add_row(csv_rows *t, const fields *v, size_t lineno)
{
    nf_colplan *p = t->plan;
    if (v->n != t->nf)
        return nf_error(NF_EDATA, "%s line %zu: %zu fields, expected %zu as on line %zu", t->path, lineno, v->n, t->nf,
                        t->ref_line);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        if (cap > SIZE_MAX / sizeof(double) / t->d)
            return nf_error(NF_ENOMEM, "%s: too many rows (%zu x %zu) for memory", t->path, t->n, t->d);
        double *x = realloc(t->x, cap * t->d * sizeof(double));
        if (!x) return nf_error(NF_ENOMEM, "%s: out of memory at line %zu (%zu rows read)", t->path, lineno, t->n);
        t->x = x;
        if (p->nctx) {
            int32_t *c = realloc(t->cat, cap * p->nctx * sizeof *c);
            if (!c) return nf_error(NF_ENOMEM, "%s: out of memory at line %zu (%zu rows read)", t->path, lineno, t->n);
            t->cat = c;
        }
        t->cap = cap;
    }
    double *row = t->x + t->n * t->d;
    for (size_t j = 0; j < t->nf; j++) {
        const char *s = v->f[j];
        int r = p->role[j];
        if (r == -1) continue;
        if (r <= -2) {
            size_t m = (size_t)(-2 - r);
            int rc = nf_colplan_category(p, m, s, &t->cat[t->n * p->nctx + m]);
            if (rc != NF_OK)
                return nf_error_context(rc, "%s line %zu, column %zu ('%s')", t->path, lineno, j + 1, t->names[j]);
            continue;
        }
        if (p->is_label && p->is_label[r]) {
            int rc = nf_colplan_label(p, (size_t)r, s, &row[r]);
            if (rc != NF_OK)
                return nf_error_context(rc, "%s line %zu, column %zu ('%s')", t->path, lineno, j + 1, t->names[j]);
            continue;
        }
        if (!*s) return nf_error(NF_EDATA, "%s line %zu, column %zu: empty field (expected a number)", t->path, lineno, j + 1);
        if (!parse_number(s, &row[r])) {
            if (p->strict)
                return nf_error(NF_EDATA, "%s line %zu, column %zu: '%.40s%s' is not a number", t->path, lineno, j + 1,
                                s, strlen(s) > 40 ? "..." : "");
            return nf_error(NF_EDATA, "%s line %zu, column %zu: '%.40s%s' is not a number (column '%s'; a text column "
                                      "can be left out with --drop or be a categorical --context)",
                            t->path, lineno, j + 1, s, strlen(s) > 40 ? "..." : "", t->names[j]);
        }
    }
    t->n++;
    return NF_OK;
}

int nf_import_csv(const char *path, const nf_csv_options *opt, nf_table *out)
{
    return nf_import_csv_select(path, opt, NULL, out);
}

int nf_import_csv_select(const char *path, const nf_csv_options *opt, const nf_import_select *sel, nf_table *out)
{
    static const nf_csv_options detect = {0, -1};
    memset(out, 0, sizeof *out);
    if (!opt) opt = &detect;
    reader r = {fopen(path, "r"), NULL, 0, 0};
    if (!r.fp) return nf_error(NF_EIO, "%s: cannot open (%s)", path, strerror(errno));
    fields v1 = {0}, v2 = {0};
    nf_colplan plan = {0};
    nf_table all = {0}; /* every column's name (no data) */
    csv_rows t = {.path = path, .plan = &plan};
    char *l1 = NULL, *l2 = NULL, *s;
    size_t ln1 = 0, ln2 = 0;
    int rc = NF_OK, header = opt->header, split2 = 0;

    if ((s = next_line(&r))) l1 = dup_str(s), ln1 = r.lineno;
    if (s && (s = next_line(&r))) l2 = dup_str(s), ln2 = r.lineno;
    if (ferror(r.fp)) rc = nf_error(NF_EIO, "%s: cannot read (%s)", path, strerror(errno));
    else if (!ln1) rc = nf_error(NF_EDATA, "%s: no data rows (the file is empty)", path);
    else if (!l1 || (ln2 && !l2)) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    char delim = opt->delimiter ? opt->delimiter : rc == NF_OK ? detect_delimiter(l1, l2) : ',';
    if (rc == NF_OK) rc = split(l1, delim, &v1, path, ln1);
    if (rc == NF_OK && header < 0) {
        size_t bad1 = count_non_numbers(&v1);
        if (bad1 && l2 && (rc = split(l2, delim, &v2, path, ln2)) == NF_OK) split2 = 1;
        header = bad1 && (!l2 || count_non_numbers(&v2) == 0 || bad1 == v1.n);
    }
    t.nf = v1.n;
    if (rc == NF_OK && header) {
        if (!l2) rc = nf_error(NF_EDATA, "%s: no data rows (only the header on line %zu)", path, ln1);
        if (rc == NF_OK && !split2) rc = split(l2, delim, &v2, path, ln2);
        if (rc == NF_OK && v2.n != t.nf)
            rc = nf_error(NF_EDATA, "%s line %zu: %zu fields, expected %zu as in the header on line %zu", path, ln2,
                          v2.n, t.nf, ln1);
    }
    /* the names (header or x0..), then the plan, which looks at the first data row for text */
    all.d = t.nf;
    if (rc == NF_OK) rc = make_names(&all, header ? v1.f : NULL, path);
    if (rc == NF_OK) rc = nf_colplan_make(&plan, path, all.names, t.nf, header ? v2.f : v1.f, sel);
    t.names = all.names;
    t.d = plan.d;
    if (rc == NF_OK && header) {
        t.ref_line = ln2;
        rc = add_row(&t, &v2, ln2);
    } else if (rc == NF_OK) {
        t.ref_line = ln1;
        rc = add_row(&t, &v1, ln1);
        if (rc == NF_OK && l2 && (rc = split(l2, delim, &v2, path, ln2)) == NF_OK) rc = add_row(&t, &v2, ln2);
    }
    while (rc == NF_OK && (s = next_line(&r)))
        if ((rc = split(s, delim, &v2, path, r.lineno)) == NF_OK) rc = add_row(&t, &v2, r.lineno);
    if (rc == NF_OK && ferror(r.fp)) rc = nf_error(NF_EIO, "%s: cannot read (%s)", path, strerror(errno));

    if (rc == NF_OK) {
        out->n = t.n;
        out->d = t.d;
        out->x = t.x;
        t.x = NULL;
        rc = nf_colplan_finish(&plan, all.names, t.cat, out);
        if (rc != NF_OK) nf_table_free(out);
    }
    free(t.x);
    free(t.cat);
    nf_colplan_free(&plan);
    nf_table_free(&all);
    free(v1.f);
    free(v2.f);
    free(l1);
    free(l2);
    free(r.buf);
    fclose(r.fp);
    return rc;
}

/* ---- NPY ------------------------------------------------------------------------------------- */

#define NPY_MAX_DIMS NF_IMPORT_NPY_MAX_DIMS

typedef struct {
    char descr[32];
    int fortran, ndim, have_descr, have_order, have_shape;
    size_t shape[NPY_MAX_DIMS];
} npy_header;

typedef struct {
    const char *s;
    size_t i;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r') c->i++;
}

static int accept(cursor *c, char ch)
{
    skip_ws(c);
    if (c->s[c->i] != ch) return 0;
    c->i++;
    return 1;
}

static int parse_pystr(cursor *c, char *buf, size_t size)
{
    skip_ws(c);
    char q = c->s[c->i];
    if (q != '\'' && q != '"') return 0;
    size_t n = 0;
    for (c->i++; c->s[c->i] && c->s[c->i] != q; c->i++)
        if (n + 1 < size) buf[n++] = c->s[c->i];
    buf[n] = '\0';
    if (!c->s[c->i]) return 0;
    c->i++;
    return 1;
}

static int parse_shape(cursor *c, npy_header *h)
{
    if (!accept(c, '(')) return 0;
    h->ndim = 0;
    for (;;) {
        if (accept(c, ')')) return 1;
        skip_ws(c);
        if (c->s[c->i] < '0' || c->s[c->i] > '9' || h->ndim == NPY_MAX_DIMS) return 0;
        size_t v = 0;
        for (; c->s[c->i] >= '0' && c->s[c->i] <= '9'; c->i++) {
            if (v > (SIZE_MAX - 9) / 10) return 0;
            v = 10 * v + (size_t)(c->s[c->i] - '0');
        }
        if (c->s[c->i] == 'L') c->i++; /* written by Python 2 */
        h->shape[h->ndim++] = v;
        if (!accept(c, ',')) return accept(c, ')');
    }
}

static int parse_header(const char *path, const char *text, npy_header *h)
{
    cursor c = {text, 0};
    char key[32], word[8];
    memset(h, 0, sizeof *h);
    if (!accept(&c, '{')) goto bad;
    while (!accept(&c, '}')) {
        if (!parse_pystr(&c, key, sizeof key) || !accept(&c, ':')) goto bad;
        skip_ws(&c);
        if (strcmp(key, "descr") == 0) {
            if (c.s[c.i] == '[')
                return nf_error(NF_EFORMAT, "%s: structured dtype (record array) is not supported (expected plain numbers)", path);
            if (!parse_pystr(&c, h->descr, sizeof h->descr)) goto bad;
            h->have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            size_t n = 0;
            while (n + 1 < sizeof word && ((c.s[c.i] >= 'a' && c.s[c.i] <= 'z') || (c.s[c.i] >= 'A' && c.s[c.i] <= 'Z')))
                word[n++] = c.s[c.i++];
            word[n] = '\0';
            if (strcmp(word, "True") && strcmp(word, "False")) goto bad;
            h->fortran = word[0] == 'T';
            h->have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!parse_shape(&c, h)) goto bad;
            h->have_shape = 1;
        } else {
            goto bad;
        }
        if (accept(&c, '}')) break;
        if (!accept(&c, ',')) goto bad;
    }
    if (!h->have_descr || !h->have_order || !h->have_shape)
        return nf_error(NF_EFORMAT, "%s: NPY header lacks '%s'", path,
                        !h->have_descr ? "descr" : !h->have_order ? "fortran_order" : "shape");
    return NF_OK;
bad:
    return nf_error(NF_EFORMAT, "%s: cannot parse the NPY header near character %zu: %.80s", path, c.i, text);
}

/* Decode one little-endian element of kind 'f', 'i' or 'u' and size bytes. */
static double npy_value(const unsigned char *p, char kind, int size)
{
    uint64_t u = 0;
    for (int b = size - 1; b >= 0; b--) u = u << 8 | p[b];
    if (kind == 'f') {
        if (size == 4) {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, 4);
            return f;
        }
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (kind == 'u') return (double)u;
    if (size < 8 && (u >> (8 * size - 1) & 1)) u |= ~(uint64_t)0 << (8 * size); /* sign-extend */
    int64_t s;
    memcpy(&s, &u, 8);
    return (double)s;
}

/* '<f8' -> kind 'f', size 8; 0 if the dtype is not one we read (message recorded). */
static int npy_dtype(const char *path, const char *descr, char *kind, int *size)
{
    char order = descr[0], k = descr[1];
    int n = descr[1] ? atoi(descr + 2) : 0;
    int known = (k == 'f' && (n == 4 || n == 8)) || ((k == 'i' || k == 'u') && (n == 1 || n == 2 || n == 4 || n == 8));
    known = known && strlen(descr) == 3;
    if (known && order == '>' && n > 1)
        return nf_error(NF_EFORMAT, "%s: big-endian data ('%s') is not supported; save it little-endian, e.g. "
                        "np.save(path, a.astype('<%c%d'))", path, descr, k, n);
    if (!known || !(order == '<' || ((order == '|' || order == '>') && n == 1)))
        return nf_error(NF_EFORMAT, "%s: dtype '%s' is not supported (expected float32, float64 or (u)int8/16/32/64)",
                        path, descr);
    *kind = k;
    *size = n;
    return NF_OK;
}

/* Element k of the file (in its storage order) as a row-major (n, d) position; for a Fortran-order
 * array of more than two dimensions the trailing indices are put back in C order. */
static size_t npy_position(const npy_header *h, size_t k, size_t n, size_t d)
{
    if (!h->fortran) return k;
    if (h->ndim <= 2) return (k % n) * d + k / n;
    size_t i = k % n, j = 0, idx[NPY_MAX_DIMS];
    k /= n;
    for (int a = 1; a < h->ndim; a++) idx[a] = k % h->shape[a], k /= h->shape[a];
    for (int a = 1; a < h->ndim; a++) j = j * h->shape[a] + idx[a];
    return i * d + j;
}

/* Read an NPY array of rank 1..max_rank as (shape[0], product of the other sides). */
static int npy_read(const char *path, nf_table *out, int max_rank, size_t *shape, int *ndim)
{
    nf_table none;
    if (!out) out = &none; /* the shape only */
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) return nf_error(NF_EIO, "%s: cannot open (%s)", path, strerror(errno));
    unsigned char pre[12];
    char *text = NULL, kind = 0;
    unsigned char *buf = NULL;
    int rc = NF_OK, size = 0;
    size_t hlen = 0, n = 0, d = 0;
    npy_header h;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        rc = nf_error(NF_EFORMAT, "%s: not an NPY file (it does not start with \\x93NUMPY)", path);
    else if (pre[6] == 1)
        hlen = pre[8] | (size_t)pre[9] << 8;
    else if ((pre[6] == 2 || pre[6] == 3) && fread(pre + 10, 1, 2, fp) == 2)
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    else if (pre[6] == 2 || pre[6] == 3)
        rc = nf_error(NF_EFORMAT, "%s: file ends inside the NPY preamble", path);
    else
        rc = nf_error(NF_EFORMAT, "%s: NPY format version %d.%d is not supported (expected 1.0, 2.0 or 3.0)", path,
                      pre[6], pre[7]);
    if (rc == NF_OK && hlen > (1u << 24)) rc = nf_error(NF_EFORMAT, "%s: NPY header of %zu bytes (damaged file?)", path, hlen);
    if (rc == NF_OK && !(text = malloc(hlen + 1))) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    if (rc == NF_OK && fread(text, 1, hlen, fp) != hlen) rc = nf_error(NF_EFORMAT, "%s: file ends inside the NPY header", path);
    if (rc == NF_OK) text[hlen] = '\0', rc = parse_header(path, text, &h);
    if (rc == NF_OK) rc = npy_dtype(path, h.descr, &kind, &size);
    if (rc == NF_OK && h.ndim == 0)
        rc = nf_error(NF_EFORMAT, "%s: a 0-D array (a single number); expected a 1-D or 2-D array", path);
    if (rc == NF_OK && out == &none) { /* nf_import_npy_shape */
        for (int a = 0; a < h.ndim; a++) shape[a] = h.shape[a];
        *ndim = h.ndim;
        free(text);
        fclose(fp);
        return NF_OK;
    }
    if (rc == NF_OK && h.ndim > max_rank && max_rank == 2)
        rc = nf_error(NF_EFORMAT, "%s: a %d-D array of shape (%zu, %zu, %zu%s); expected a 1-D or 2-D array", path,
                      h.ndim, h.shape[0], h.shape[1], h.shape[2], h.ndim > 3 ? ", ..." : "");
    else if (rc == NF_OK && h.ndim > max_rank)
        rc = nf_error(NF_EFORMAT, "%s: a %d-D array; expected at most %d dimensions", path, h.ndim, max_rank);
    if (rc == NF_OK) {
        n = h.shape[0];
        d = 1;
        for (int a = 1; a < h.ndim; a++) d = h.shape[a] && d > SIZE_MAX / h.shape[a] ? SIZE_MAX : d * h.shape[a];
        if (n == 0 || d == 0) rc = nf_error(NF_EDATA, "%s: no data rows (shape (%zu, %zu))", path, n, d);
        else if (n > SIZE_MAX / d / sizeof(double))
            rc = nf_error(NF_ENOMEM, "%s: array of shape (%zu, %zu) is too large for memory", path, n, d);
    }
    /* the file must hold the declared data before memory is taken for it (a damaged header can
     * declare terabytes) */
    if (rc == NF_OK) {
        long at = ftell(fp);
        struct stat st;
        if (at >= 0 && fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) &&
            (double)(st.st_size - at) < (double)n * (double)d * size)
            rc = nf_error(NF_EFORMAT, "%s: file ends after %lld of %.0f bytes of data", path, (long long)(st.st_size - at),
                          (double)n * (double)d * size);
    }
    if (rc == NF_OK && !(out->x = malloc(n * d * sizeof(double))))
        rc = nf_error(NF_ENOMEM, "%s: out of memory for %zu x %zu values", path, n, d);
    enum { CHUNK = 1 << 16 };
    if (rc == NF_OK && !(buf = malloc(CHUNK * (size_t)size))) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    size_t total = n * d, done = 0;
    while (rc == NF_OK && done < total) {
        size_t want = total - done < CHUNK ? total - done : CHUNK;
        size_t got = fread(buf, 1, want * (size_t)size, fp), whole = got / (size_t)size;
        for (size_t e = 0; e < whole; e++)
            out->x[npy_position(&h, done + e, n, d)] = npy_value(buf + e * (size_t)size, kind, size);
        if (whole < want)
            rc = nf_error(NF_EFORMAT, "%s: file ends after %zu of %zu bytes of data", path, done * (size_t)size + got,
                          total * (size_t)size);
        done += whole;
    }
    if (rc == NF_OK) {
        out->n = n;
        out->d = d;
        rc = make_names(out, NULL, path);
    }
    if (rc == NF_OK && shape) {
        for (int a = 0; a < h.ndim; a++) shape[a] = h.shape[a];
        *ndim = h.ndim;
    }
    if (rc != NF_OK) nf_table_free(out);
    free(buf);
    free(text);
    fclose(fp);
    return rc;
}

int nf_import_npy(const char *path, nf_table *out) { return npy_read(path, out, 2, NULL, NULL); }

int nf_import_npy_nd(const char *path, nf_table *out, size_t shape[NF_IMPORT_NPY_MAX_DIMS], int *ndim)
{
    return npy_read(path, out, NF_IMPORT_NPY_MAX_DIMS, shape, ndim);
}

int nf_import_npy_shape(const char *path, size_t shape[NF_IMPORT_NPY_MAX_DIMS], int *ndim)
{
    return npy_read(path, NULL, NF_IMPORT_NPY_MAX_DIMS, shape, ndim);
}

/* ---- choosing the importer, validation ------------------------------------------------------- */

int nf_import_file(const char *path, nf_table *out) { return nf_import_file_select(path, NULL, NULL, out); }

/* An NPY file with a selection: the whole array, then the chosen columns. */
static int npy_select(const char *path, const nf_import_select *sel, nf_table *out)
{
    if (!sel) return nf_import_npy(path, out);
    nf_table all;
    NF_TRY(nf_import_npy(path, &all));
    int rc = nf_table_select(path, &all, sel, out);
    nf_table_free(&all);
    return rc;
}

int nf_import_file_select(const char *path, const nf_csv_options *opt, const nf_import_select *sel, nf_table *out)
{
    memset(out, 0, sizeof *out);
    unsigned char magic[8] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) return nf_error(NF_EIO, "%s: cannot open (%s)", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    if (got >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0) return npy_select(path, sel, out);
    if (got == 8 && memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0)
        return nf_error(NF_EFORMAT, "%s: an HDF5 file, not CSV or NPY (HDF5 data needs no import)", path);
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    const char *ext = dot && (!slash || dot > slash) ? dot + 1 : "";
    if (!strcasecmp(ext, "npy")) return npy_select(path, sel, out);
    if (!strcasecmp(ext, "tsv") && !opt) {
        nf_csv_options o = {'\t', -1};
        return nf_import_csv_select(path, &o, sel, out);
    }
    if (!strcasecmp(ext, "csv") || !strcasecmp(ext, "txt") || !strcasecmp(ext, "tsv"))
        return nf_import_csv_select(path, opt, sel, out);
    return nf_error(NF_EFORMAT, "%s: unknown file type (expected .csv, .tsv, .txt or .npy)", path);
}

static int validate_shape(const char *what, size_t n, size_t d, size_t expect_d)
{
    if (n == 0) return nf_error(NF_EDATA, "%s: no rows (expected at least one sample)", what);
    if (d == 0) return nf_error(NF_EDATA, "%s: no columns (expected at least one)", what);
    if (expect_d && d != expect_d) return nf_error(NF_EFORMAT, "%s: %zu columns, expected %zu", what, d, expect_d);
    return NF_OK;
}

static int non_finite(const char *what, size_t k, size_t d, double v)
{
    return nf_error(NF_EDATA, "%s: row %zu, column %zu is %g (expected finite values; counted from 0)", what, k / d,
                    k % d, v);
}

int nf_data_validate_double(const char *what, const double *x, size_t n, size_t d, size_t expect_d)
{
    if (!what) what = "data";
    NF_TRY(validate_shape(what, n, d, expect_d));
    for (size_t k = 0; k < n * d; k++)
        if (!isfinite(x[k])) return non_finite(what, k, d, x[k]);
    return NF_OK;
}

int nf_data_validate(const char *what, const nf_real *x, size_t n, size_t d, size_t expect_d)
{
    if (!what) what = "data";
    NF_TRY(validate_shape(what, n, d, expect_d));
    for (size_t k = 0; k < n * d; k++)
        if (!isfinite(x[k])) return non_finite(what, k, d, (double)x[k]);
    return NF_OK;
}
