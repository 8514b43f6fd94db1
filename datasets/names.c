/* datasets/names.c - names of data columns and context values; contexts given by name
 * (datasets/names.h).
 *
 * A context name "col=cat" belongs to the one-hot group "col" (the text before its first '='); a
 * name without '=' is a numeric entry of its own.  Parsing marks what each item sets, then checks
 * that every group and every numeric entry was given exactly once, so a forgotten column is an
 * error rather than a silent all-zero one-hot block the model never saw.
 */
#include "datasets/names.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nf_data_names_free(nf_data_names *nm)
{
    if (!nm) return;
    if (nm->columns) nf_h5_strings_free(nm->columns, nm->d);
    if (nm->context) nf_h5_strings_free(nm->context, nm->c);
    memset(nm, 0, sizeof *nm);
}

static int read_list(nf_h5 *f, const char *group, const char *name, size_t want, const char *of, char ***out)
{
    char path[256];
    snprintf(path, sizeof path, "%s%s%s", group, group[strlen(group) - 1] == '/' ? "" : "/", name);
    *out = NULL;
    if (!nf_h5_exists(f, path)) return NF_OK;
    char **s;
    size_t n;
    NF_TRY(nf_h5_read_strings(f, path, &s, &n));
    if (n != want) {
        nf_h5_strings_free(s, n);
        return nf_error(NF_EFORMAT, "%s:%s has %zu names, expected %zu (one per %s)", nf_h5_path(f), path, n, want, of);
    }
    *out = s;
    return NF_OK;
}

int nf_data_names_read(nf_data_names *nm, nf_h5 *f, const char *group, size_t d, size_t c)
{
    memset(nm, 0, sizeof *nm);
    nm->d = d;
    nm->c = c;
    if (d) NF_TRY(read_list(f, group, "columns", d, "column of the data", &nm->columns));
    if (c) {
        int rc = read_list(f, group, "context_names", c, "context value", &nm->context);
        if (rc != NF_OK) {
            nf_data_names_free(nm);
            return rc;
        }
    }
    return NF_OK;
}

int nf_data_names_load(nf_data_names *nm, const char *path, const char *group, size_t d, size_t c)
{
    memset(nm, 0, sizeof *nm);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    int rc = nf_data_names_read(nm, f, group, d, c);
    nf_h5_close(f);
    return rc;
}

int nf_data_names_write(const nf_data_names *nm, nf_h5 *f, const char *group)
{
    char path[256];
    const char *sep = group[strlen(group) - 1] == '/' ? "" : "/";
    if (nm->columns && nm->d) {
        snprintf(path, sizeof path, "%s%scolumns", group, sep);
        NF_TRY(nf_h5_write_strings(f, path, (const char *const *)nm->columns, nm->d));
    }
    if (nm->context && nm->c) {
        snprintf(path, sizeof path, "%s%scontext_names", group, sep);
        NF_TRY(nf_h5_write_strings(f, path, (const char *const *)nm->context, nm->c));
    }
    return NF_OK;
}

static char **copy_list(char *const *s, size_t n, int *rc)
{
    if (!s || !n) return NULL;
    char **o = calloc(n, sizeof *o);
    for (size_t i = 0; o && i < n; i++) {
        size_t len = strlen(s[i]) + 1;
        if (!(o[i] = malloc(len))) {
            nf_h5_strings_free(o, n);
            o = NULL;
            break;
        }
        memcpy(o[i], s[i], len);
    }
    if (!o) *rc = nf_error(NF_ENOMEM, "out of memory copying names");
    return o;
}

int nf_data_names_copy(nf_data_names *dst, const nf_data_names *src)
{
    int rc = NF_OK;
    memset(dst, 0, sizeof *dst);
    dst->d = src->d;
    dst->c = src->c;
    dst->columns = copy_list(src->columns, src->d, &rc);
    if (rc == NF_OK) dst->context = copy_list(src->context, src->c, &rc);
    if (rc != NF_OK) nf_data_names_free(dst);
    return rc;
}

const char *nf_data_names_column(const nf_data_names *nm, size_t j, char *buf, size_t size)
{
    if (nm && nm->columns && j < nm->d) return nm->columns[j];
    snprintf(buf, size, "x%zu", j);
    return buf;
}

const char *nf_data_names_context(const nf_data_names *nm, size_t k, char *buf, size_t size)
{
    if (nm && nm->context && k < nm->c) return nm->context[k];
    snprintf(buf, size, "c%zu", k);
    return buf;
}

/* Length of the group part of a context name ("kind" of "kind=long"); 0 for a numeric entry. */
static size_t group_len(const char *name)
{
    const char *eq = strchr(name, '=');
    return eq ? (size_t)(eq - name) : 0;
}

static int same_group(const char *a, const char *b)
{
    size_t la = group_len(a), lb = group_len(b);
    return la && la == lb && !strncmp(a, b, la);
}

/* "a, b, c" of the context names (at most ~400 characters), for messages. */
static void list_context(const nf_data_names *nm, char *out, size_t size)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t k = 0; k < nm->c; k++) {
        char b[32];
        const char *n = nf_data_names_context(nm, k, b, sizeof b);
        int w = snprintf(out + at, size - at, "%s%s%s", k ? ", " : "", n, group_len(n) ? "" : "=NUMBER");
        if (w < 0 || (size_t)w >= size - at || at + (size_t)w > 400) {
            snprintf(out + at, size - at, ", ...");
            return;
        }
        at += (size_t)w;
    }
}

/* Copy [a, b) into buf without surrounding blanks. */
static void trimmed(char *buf, size_t size, const char *a, const char *b)
{
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
    snprintf(buf, size, "%.*s", (int)(b - a), a);
}

int nf_context_parse(const nf_data_names *nm, const char *spec, nf_real *ctx)
{
    size_t c = nm->c;
    char all[512];
    if (c == 0) return nf_error(NF_EINVAL, "'%s': the model takes no context", spec);
    unsigned char *set = calloc(c, 1);
    if (!set) return nf_error(NF_ENOMEM, "out of memory");
    for (size_t k = 0; k < c; k++) ctx[k] = 0;
    int rc = NF_OK;
    const char *s = spec;
    while (rc == NF_OK && *s) {
        /* an item runs to the next comma that is followed by another "name=" (category names may
         * hold commas) */
        const char *end = s, *eq = strchr(s, '=');
        for (;;) {
            const char *comma = strchr(end, ',');
            if (!comma) {
                end = s + strlen(s);
                break;
            }
            const char *next_eq = strchr(comma + 1, '='), *next_comma = strchr(comma + 1, ',');
            end = comma;
            if (next_eq && (!next_comma || next_eq < next_comma)) break;
            end = comma + 1;
        }
        char key[256], val[256], item[520];
        if (!eq || eq >= end) {
            trimmed(item, sizeof item, s, end);
            list_context(nm, all, sizeof all);
            rc = nf_error(NF_EINVAL, "'%s': expected NAME=VALUE (one of: %s)", item, all);
            break;
        }
        trimmed(key, sizeof key, s, eq);
        trimmed(val, sizeof val, eq + 1, end);
        snprintf(item, sizeof item, "%s=%s", key, val);
        size_t hit = c;
        for (size_t k = 0; k < c && hit == c; k++) {
            char b[32];
            const char *n = nf_data_names_context(nm, k, b, sizeof b);
            if (group_len(n) && !strcmp(n, item)) hit = k;
        }
        if (hit < c) { /* one entry of a one-hot group */
            for (size_t k = 0; k < c && rc == NF_OK; k++) {
                char b[32];
                if (k != hit && set[k] && same_group(nf_data_names_context(nm, k, b, sizeof b), item))
                    rc = nf_error(NF_EINVAL, "'%s': %s is given twice", spec, key);
            }
            if (rc == NF_OK && set[hit]) rc = nf_error(NF_EINVAL, "'%s': %s is given twice", spec, key);
            set[hit] = 1;
            ctx[hit] = 1;
        } else {
            for (size_t k = 0; k < c && hit == c; k++) {
                char b[32];
                const char *n = nf_data_names_context(nm, k, b, sizeof b);
                if (!group_len(n) && !strcmp(n, key)) hit = k;
            }
            char *e = val;
            double v = hit < c ? strtod(val, &e) : 0;
            list_context(nm, all, sizeof all);
            if (hit == c)
                rc = nf_error(NF_EINVAL, "'%s': no context value '%s' (expected: %s)", spec, item, all);
            else if (!val[0] || *e || !isfinite(v))
                rc = nf_error(NF_EINVAL, "'%s': %s needs a finite number, not '%s'", spec, key, val);
            else if (set[hit])
                rc = nf_error(NF_EINVAL, "'%s': %s is given twice", spec, key);
            else
                set[hit] = 1, ctx[hit] = (nf_real)v;
        }
        s = *end ? end + 1 : end;
    }
    /* every group and every numeric entry given */
    for (size_t k = 0; rc == NF_OK && k < c; k++) {
        char b[32], b2[32];
        const char *n = nf_data_names_context(nm, k, b, sizeof b);
        int given = set[k];
        for (size_t j = 0; j < c && !given; j++)
            given = set[j] && same_group(nf_data_names_context(nm, j, b2, sizeof b2), n);
        if (!given) {
            char choices[512] = "";
            size_t at = 0;
            for (size_t j = 0; j < c; j++) {
                const char *m = nf_data_names_context(nm, j, b2, sizeof b2);
                if (j != k && !same_group(m, n)) continue;
                int w = snprintf(choices + at, sizeof choices - at, "%s%s%s", at ? ", " : "", m,
                                 group_len(m) ? "" : "=NUMBER");
                if (w < 0 || (size_t)w >= sizeof choices - at) break;
                at += (size_t)w;
            }
            size_t gl = group_len(n);
            rc = nf_error(NF_EINVAL, "'%s': no value for %.*s (expected %s%s)", spec, (int)(gl ? gl : strlen(n)), n,
                          gl ? "one of " : "", choices);
        }
    }
    free(set);
    return rc;
}

void nf_context_format(const nf_data_names *nm, const nf_real *ctx, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < nm->c; k++) {
        char b[32], b2[32];
        const char *n = nf_data_names_context(nm, k, b, sizeof b);
        int w = 0;
        if (group_len(n)) {
            /* one-hot group: name the set entry, once, at the group's first entry */
            int first = 1, ones = 0, others = 0;
            size_t one = k;
            for (size_t j = 0; j < nm->c; j++) {
                const char *m = nf_data_names_context(nm, j, b2, sizeof b2);
                if (!same_group(m, n)) continue;
                if (j < k) first = 0;
                if (ctx[j] == 1) ones++, one = j;
                else if (ctx[j] != 0) others++;
            }
            if (!first) continue;
            if (ones == 1 && !others)
                w = snprintf(buf + at, size - at, "%s%s", at ? "," : "", nf_data_names_context(nm, one, b2, sizeof b2));
            else
                w = snprintf(buf + at, size - at, "%s%.*s=?", at ? "," : "", (int)group_len(n), n);
        } else {
            w = snprintf(buf + at, size - at, "%s%s=%.6g", at ? "," : "", n, (double)ctx[k]);
        }
        if (w < 0 || (size_t)w >= size - at) return;
        at += (size_t)w;
    }
}
