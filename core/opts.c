/* core/opts.c - key=value option lists for flow specs. */
#include "core/opts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nf_opts_init(nf_opts *o, const char *owner)
{
    memset(o, 0, sizeof *o);
    snprintf(o->owner, sizeof o->owner, "%s", owner ? owner : "");
}

int nf_opts_set(nf_opts *o, const char *key, const char *val)
{
    if (!key[0]) return nf_error(NF_EINVAL, "%s: empty option name", o->owner);
    if (strlen(key) >= NF_OPT_KEY_MAX || strlen(val) >= NF_OPT_VAL_MAX)
        return nf_error(NF_EINVAL, "%s: option '%s' is too long", o->owner, key);
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->key[i], key) == 0) {
            strcpy(o->val[i], val);
            return NF_OK;
        }
    if (o->n == NF_OPTS_MAX) return nf_error(NF_EINVAL, "%s: more than %d options", o->owner, NF_OPTS_MAX);
    strcpy(o->key[o->n], key);
    strcpy(o->val[o->n], val);
    o->used[o->n] = 0;
    o->n++;
    return NF_OK;
}

static const char *skip_sep(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == ',' || *s == '\n') s++;
    return s;
}

int nf_opts_parse(nf_opts *o, const char *text)
{
    const char *s = skip_sep(text);
    while (*s) {
        char key[NF_OPT_KEY_MAX], val[NF_OPT_VAL_MAX];
        size_t k = 0, v = 0;
        while (*s && *s != '=' && *s != ',' && *s != ' ') {
            if (k + 1 >= sizeof key) return nf_error(NF_EINVAL, "%s: option name too long near '%s'", o->owner, s);
            key[k++] = *s++;
        }
        key[k] = '\0';
        if (*s != '=')
            return nf_error(NF_EINVAL, "%s: expected key=value, got '%s'", o->owner, key);
        s++;
        while (*s && *s != ',' && *s != ' ') {
            if (v + 1 >= sizeof val) return nf_error(NF_EINVAL, "%s: value of '%s' too long", o->owner, key);
            val[v++] = *s++;
        }
        val[v] = '\0';
        if (!v) return nf_error(NF_EINVAL, "%s: option '%s' has no value", o->owner, key);
        NF_TRY(nf_opts_set(o, key, val));
        s = skip_sep(s);
    }
    return NF_OK;
}

static int find(const nf_opts *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->key[i], key) == 0) return i;
    return -1;
}

int nf_opts_has(const nf_opts *o, const char *key) { return find(o, key) >= 0; }

int nf_opts_int(nf_opts *o, const char *key, int def, int lo, int hi, int *out)
{
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return NF_OK;
    }
    o->used[i] = 1;
    char *end;
    errno = 0;
    long v = strtol(o->val[i], &end, 10);
    if (errno || *end || end == o->val[i] || v < lo || v > hi)
        return nf_error(NF_EINVAL, "%s: option %s=%s: expected an integer from %d to %d", o->owner, key,
                        o->val[i], lo, hi);
    *out = (int)v;
    return NF_OK;
}

int nf_opts_double(nf_opts *o, const char *key, double def, double lo, double hi, double *out)
{
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return NF_OK;
    }
    o->used[i] = 1;
    char *end;
    errno = 0;
    double v = strtod(o->val[i], &end);
    if (errno || *end || end == o->val[i] || !isfinite(v) || v < lo || v > hi)
        return nf_error(NF_EINVAL, "%s: option %s=%s: expected a number from %g to %g", o->owner, key,
                        o->val[i], lo, hi);
    *out = v;
    return NF_OK;
}

int nf_opts_string(nf_opts *o, const char *key, const char *def, const char **out)
{
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return NF_OK;
    }
    o->used[i] = 1;
    *out = o->val[i];
    return NF_OK;
}

int nf_opts_choice(nf_opts *o, const char *key, const char *choices, int def, int *out)
{
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return NF_OK;
    }
    o->used[i] = 1;
    const char *c = choices;
    for (int idx = 0; *c; idx++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (strlen(o->val[i]) == len && strncmp(o->val[i], c, len) == 0) {
            *out = idx;
            return NF_OK;
        }
        if (!bar) break;
        c = bar + 1;
    }
    return nf_error(NF_EINVAL, "%s: option %s=%s: expected one of %s", o->owner, key, o->val[i], choices);
}

int nf_opts_check_used(const nf_opts *o)
{
    for (int i = 0; i < o->n; i++)
        if (!o->used[i]) return nf_error(NF_EINVAL, "%s: unknown option '%s'", o->owner, o->key[i]);
    return NF_OK;
}

void nf_opts_format(const nf_opts *o, char *buf, size_t size)
{
    size_t at = 0;
    if (size) buf[0] = '\0';
    for (int i = 0; i < o->n && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s=%s", i ? "," : "", o->key[i], o->val[i]);
}
