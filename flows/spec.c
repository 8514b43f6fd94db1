/* flows/spec.c - the flow-spec parser and the named presets.
 *
 *   spec  := chain [ ';' 'base' '=' NAME [ '(' opts ')' ] ]
 *   chain := item { ',' item }
 *   item  := NAME [ '(' opts ')' ]  |  INT '*' '(' chain ')'
 *
 * A recursive-descent parser over the text; repetitions are expanded as they are read.  The text
 * is at most NF_SPEC_MAX_CHARS long and repeats nest at most NF_SPEC_MAX_DEPTH deep, so a hostile
 * spec (from --flow or a model file) cannot exhaust the stack.
 */
#include "flows/spec.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributions/dist.h"
#include "flows/flow.h"

typedef struct parser {
    const char *text, *p;
    nf_spec *out;
    int capacity;
    int depth; /* repeats open around the current item */
} parser;

/* The message quotes the spec (its first 80 characters when longer, so the line stays readable). */
static int perr(const parser *ps, const char *fmt, const char *what)
{
    char msg[1400];
    snprintf(msg, sizeof msg, fmt, what);
    size_t len = strlen(ps->text);
    return nf_error(NF_EINVAL, "flow spec '%.80s%s', position %d: %s", ps->text, len > 80 ? "..." : "",
                    (int)(ps->p - ps->text) + 1, msg);
}

static void skip_ws(parser *ps)
{
    while (isspace((unsigned char)*ps->p)) ps->p++;
}

static int read_name(parser *ps, char *name, size_t size)
{
    size_t k = 0;
    skip_ws(ps);
    while (isalnum((unsigned char)*ps->p) || *ps->p == '-' || *ps->p == '_') {
        if (k + 1 >= size) return perr(ps, "name too long%s", "");
        name[k++] = *ps->p++;
    }
    name[k] = '\0';
    if (!k) return perr(ps, "expected a bijector name, found '%.12s'", *ps->p ? ps->p : "end of spec");
    return NF_OK;
}

/* '(' ... ')' with no nested parentheses; the inside is kept as text. */
static int read_opts(parser *ps, char *opts, size_t size)
{
    opts[0] = '\0';
    skip_ws(ps);
    if (*ps->p != '(') return NF_OK;
    const char *start = ++ps->p;
    while (*ps->p && *ps->p != ')') {
        if (*ps->p == '(') return perr(ps, "unexpected '(' inside options%s", "");
        ps->p++;
    }
    if (*ps->p != ')') return perr(ps, "missing ')' after options%s", "");
    size_t len = (size_t)(ps->p - start);
    if (len + 1 > size) return perr(ps, "options too long%s", "");
    memcpy(opts, start, len);
    opts[len] = '\0';
    ps->p++;
    return NF_OK;
}

static int push(parser *ps, const nf_spec_item *it)
{
    nf_spec *s = ps->out;
    if (s->n >= NF_SPEC_MAX_ITEMS) return perr(ps, "more than %s bijectors", "1024");
    if (s->n == ps->capacity) {
        int cap = ps->capacity ? 2 * ps->capacity : 16;
        nf_spec_item *items = realloc(s->items, (size_t)cap * sizeof *items);
        if (!items) return nf_error(NF_ENOMEM, "out of memory parsing a flow spec");
        s->items = items;
        ps->capacity = cap;
    }
    s->items[s->n++] = *it;
    return NF_OK;
}

static int parse_chain(parser *ps);

static int parse_item(parser *ps)
{
    skip_ws(ps);
    if (isdigit((unsigned char)*ps->p)) {
        char *end;
        long k = strtol(ps->p, &end, 10);
        if (k < 1 || k > NF_SPEC_MAX_ITEMS) return perr(ps, "repeat count must be 1 to 1024%s", "");
        ps->p = end;
        skip_ws(ps);
        if (*ps->p != '*') return perr(ps, "expected '*' after a repeat count, found '%.12s'", ps->p);
        ps->p++;
        skip_ws(ps);
        if (*ps->p != '(') return perr(ps, "expected '(' after 'K*', found '%.12s'", ps->p);
        if (ps->depth >= NF_SPEC_MAX_DEPTH) {
            char lim[16];
            snprintf(lim, sizeof lim, "%d", NF_SPEC_MAX_DEPTH);
            return perr(ps, "repeats nested more than %s deep", lim);
        }
        ps->p++;
        int first = ps->out->n;
        ps->depth++;
        int rc = parse_chain(ps);
        ps->depth--;
        NF_TRY(rc);
        skip_ws(ps);
        if (*ps->p != ')') return perr(ps, "missing ')' to close the repeat, found '%.12s'", *ps->p ? ps->p : "end");
        ps->p++;
        int last = ps->out->n;
        for (long r = 1; r < k; r++)
            for (int i = first; i < last; i++) {
                nf_spec_item copy = ps->out->items[i];
                NF_TRY(push(ps, &copy));
            }
        return NF_OK;
    }
    char name[64];
    nf_spec_item it;
    const char *at = ps->p;
    NF_TRY(read_name(ps, name, sizeof name));
    it.type = nf_bijector_type_find(name);
    if (!it.type) {
        char known[1024] = "";
        for (size_t i = 0; i < nf_bijector_ntypes; i++)
            if (nf_bijector_types[i]) {
                strncat(known, known[0] ? ", " : "", sizeof known - strlen(known) - 1);
                strncat(known, nf_bijector_types[i]->name, sizeof known - strlen(known) - 1);
            }
        ps->p = at;
        char msg[1200]; /* room for the name and every known one */
        snprintf(msg, sizeof msg, "unknown bijector '%s' (known: %s)", name, known);
        return perr(ps, "%s", msg);
    }
    NF_TRY(read_opts(ps, it.options, sizeof it.options));
    return push(ps, &it);
}

static int parse_chain(parser *ps)
{
    NF_TRY(parse_item(ps));
    for (;;) {
        skip_ws(ps);
        if (*ps->p != ',') return NF_OK;
        ps->p++;
        NF_TRY(parse_item(ps));
    }
}

int nf_spec_parse(nf_spec *s, const char *text)
{
    memset(s, 0, sizeof *s);
    strcpy(s->base, "normal");
    if (!text) return nf_error(NF_EINVAL, "flow spec: none given (expected a spec such as \"affine-coupling\")");
    size_t len = strnlen(text, NF_SPEC_MAX_CHARS + 1);
    if (len > NF_SPEC_MAX_CHARS)
        return nf_error(NF_EINVAL, "flow spec '%.40s...': longer than %d characters", text, NF_SPEC_MAX_CHARS);
    parser ps = {text, text, s, 0, 0};
    int rc = parse_chain(&ps);
    if (rc == NF_OK) {
        skip_ws(&ps);
        if (*ps.p == ';') {
            ps.p++;
            skip_ws(&ps);
            if (strncmp(ps.p, "base", 4) != 0) rc = perr(&ps, "expected 'base=NAME' after ';', found '%.12s'", ps.p);
            else {
                ps.p += 4;
                skip_ws(&ps);
                if (*ps.p != '=') rc = perr(&ps, "expected '=' after 'base'%s", "");
                else {
                    ps.p++;
                    const char *at = ps.p;
                    rc = read_name(&ps, s->base, sizeof s->base);
                    if (rc == NF_OK && !nf_dist_type_find(s->base)) {
                        ps.p = at;
                        rc = perr(&ps, "unknown base distribution '%s' (known: normal, diag-normal, gmm)", s->base);
                    }
                    if (rc == NF_OK) rc = read_opts(&ps, s->base_options, sizeof s->base_options);
                }
            }
        }
        skip_ws(&ps);
        if (rc == NF_OK && *ps.p) rc = perr(&ps, "unexpected '%.12s' (items are separated by ',')", ps.p);
    }
    if (rc != NF_OK) nf_spec_free(s);
    return rc;
}

void nf_spec_free(nf_spec *s)
{
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

/* ---- presets ------------------------------------------------------------------------------- */

int nf_preset_is(const char *name)
{
    static const char *names[] = {"realnvp", "nice", "maf", "iaf", "nsf-coupling", "nsf-ar", "glow"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return 1;
    return 0;
}

typedef struct sbuf {
    char *s;
    size_t size, at;
    int overflow;
} sbuf;

static void add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->at, b->at < b->size ? b->size - b->at : 0, fmt, ap);
    va_end(ap);
    if (k < 0 || b->at + (size_t)k >= b->size) b->overflow = 1;
    else b->at += (size_t)k;
}

int nf_preset_expand(const char *name, const nf_preset_knobs *k, char *spec, size_t size)
{
    nf_preset_knobs d = {0};
    if (k) d = *k;
    const char *act = d.activation ? d.activation : "relu";
    sbuf b = {spec, size, 0, 0};
    spec[0] = '\0';
    if (!strcmp(name, "realnvp") || !strcmp(name, "nice")) {
        int L = d.layers ? d.layers : 8, H = d.hidden ? d.hidden : 128, B = d.blocks ? d.blocks : 2;
        const char *t = name[0] == 'r' ? "affine-coupling" : "additive-coupling";
        for (int i = 0; i < L; i++)
            add(&b, "%s%s(mask=alt,flip=%d,hidden=%d,layers=%d,activation=%s)", i ? ", " : "", t, i % 2, H, B, act);
        if (name[0] == 'n') add(&b, "; base=diag-normal");
    } else if (!strcmp(name, "maf") || !strcmp(name, "iaf")) {
        int L = d.layers ? d.layers : 5, H = d.hidden ? d.hidden : 128, B = d.blocks ? d.blocks : 2;
        for (int i = 0; i < L; i++)
            add(&b, "%s%s(hidden=%d,layers=%d,activation=%s,order=%s)", i ? ", " : "", name, H, B, act,
                i % 2 ? "reversed" : "natural");
    } else if (!strcmp(name, "nsf-coupling")) {
        int L = d.layers ? d.layers : 10, H = d.hidden ? d.hidden : 128, B = d.blocks ? d.blocks : 2;
        int K = d.bins ? d.bins : 8;
        double T = d.tail > 0 ? d.tail : 5.0;
        for (int i = 0; i < L; i++)
            add(&b, "%sspline-coupling(mask=halves,flip=%d,bins=%d,tail=%g,hidden=%d,layers=%d,residual=1,activation=%s)",
                i ? ", lu, " : "", i % 2, K, T, H, B, act);
    } else if (!strcmp(name, "nsf-ar")) {
        int L = d.layers ? d.layers : 5, H = d.hidden ? d.hidden : 128, B = d.blocks ? d.blocks : 2;
        int K = d.bins ? d.bins : 8;
        double T = d.tail > 0 ? d.tail : 5.0;
        for (int i = 0; i < L; i++)
            add(&b, "%sspline-ar(bins=%d,tail=%g,hidden=%d,layers=%d,residual=1,activation=%s,order=%s)",
                i ? ", " : "", K, T, H, B, act, i % 2 ? "reversed" : "natural");
    } else if (!strcmp(name, "glow")) {
        int L = d.layers ? d.layers : 8, H = d.hidden ? d.hidden : 128, B = d.blocks ? d.blocks : 2;
        for (int i = 0; i < L; i++)
            add(&b, "%sactnorm, lu, affine-coupling(mask=halves,flip=%d,hidden=%d,layers=%d,activation=%s)",
                i ? ", " : "", i % 2, H, B, act);
    } else {
        return nf_error(NF_EINVAL, "unknown preset '%s' (expected one of %s, or a spec such as "
                                   "\"4*(affine-coupling(hidden=64), permute(order=reverse))\")",
                        name, NF_PRESET_NAMES);
    }
    if (b.overflow) return nf_error(NF_EINVAL, "preset '%s' expands to more than %zu characters", name, size);
    return NF_OK;
}
