/* datasets/tpp_process.c - the point-process registry and presets, instances, the checked
 * log-likelihood entry points (one sequence, or every sequence of a source) and the simulation
 * driver.  The processes themselves are in tpp_kinds.c. */
#include "datasets/tpp_process.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/sequences.h"

const nf_tpp_process_type *const nf_tpp_process_types[] = {
    &nf_tpp_poisson, &nf_tpp_hawkes, &nf_tpp_self_correcting, &nf_tpp_renewal,
    &nf_tpp_nonstationary_poisson, &nf_tpp_nonstationary_renewal, NULL,
};

/* The five synthetic sets of the intensity-free TPP paper (../shared/data/tpp/README.md), with the
 * README's true NLL per event (first interval from 0 included, no survival term). */
const nf_tpp_preset nf_tpp_presets[] = {
    {.name = "hawkes1", .type = "hawkes", .options = "mu=0.2,alpha=0.8:0,beta=1:20", .readme_nll = 0.500},
    {.name = "hawkes2", .type = "hawkes", .options = "mu=0.2,alpha=0.4:0.4,beta=1:20", .readme_nll = 0.015},
    {.name = "poisson", .type = "poisson", .options = "rate=1", .readme_nll = 0.995},
    {.name = "renewal", .type = "renewal", .options = "mean=1,sd=6", .readme_nll = 0.260},
    {.name = "self_correcting", .type = "self-correcting", .options = "mu=1,alpha=1", .readme_nll = 0.757},
    {.name = NULL},
};

/* a == b with '_' in a matching '-' in b */
static int name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (*a != *b && !(*a == '_' && *b == '-')) return 0;
    return *a == *b;
}

static void list_names(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; nf_tpp_process_types[i] && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "", nf_tpp_process_types[i]->name);
    for (int i = 0; nf_tpp_presets[i].name && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : " (presets: ", nf_tpp_presets[i].name);
    if (at < size) snprintf(buf + at, size - at, ")");
}

static const nf_tpp_process_type *find_type(const char *name)
{
    for (int i = 0; name && nf_tpp_process_types[i]; i++)
        if (name_eq(name, nf_tpp_process_types[i]->name)) return nf_tpp_process_types[i];
    return NULL;
}

const nf_tpp_preset *nf_tpp_preset_find(const char *name)
{
    for (int i = 0; name && nf_tpp_presets[i].name; i++)
        if (strcmp(name, nf_tpp_presets[i].name) == 0) return &nf_tpp_presets[i];
    return NULL;
}

const nf_tpp_process_type *nf_tpp_process_type_find(const char *name)
{
    const nf_tpp_process_type *t = find_type(name);
    if (t) return t;
    char known[512];
    list_names(known, sizeof known);
    nf_error(NF_EINVAL, "unknown point process '%s': expected one of %s", name ? name : "(null)", known);
    return NULL;
}

int nf_tpp_process_create(nf_tpp_process **out, const char *name, const char *options)
{
    if (!out) return nf_error(NF_EINVAL, "nf_tpp_process_create: output pointer must not be NULL");
    *out = NULL;
    const nf_tpp_process_type *t = find_type(name);
    const nf_tpp_preset *pre = t ? NULL : nf_tpp_preset_find(name);
    if (pre) t = find_type(pre->type);
    if (!t) return nf_tpp_process_type_find(name) ? NF_OK : NF_EINVAL;   /* records the message */
    nf_opts o;
    nf_opts_init(&o, t->name);
    if (t->defaults) NF_TRY(nf_opts_parse(&o, t->defaults));
    if (pre) NF_TRY(nf_opts_parse(&o, pre->options));
    if (options) NF_TRY(nf_opts_parse(&o, options));
    nf_tpp_process *p = nf_calloc(1, sizeof *p, "a point process");
    if (!p) return NF_ENOMEM;
    p->type = t;
    nf_opts_format(&o, p->options, sizeof p->options);
    int rc = t->create(p, &o);
    if (rc == NF_OK) rc = nf_opts_check_used(&o);
    if (rc != NF_OK) {
        nf_tpp_process_free(p);
        return rc;
    }
    *out = p;
    return NF_OK;
}

void nf_tpp_process_free(nf_tpp_process *p)
{
    if (!p) return;
    if (p->type->destroy) p->type->destroy(p);
    free(p);
}

int nf_tpp_check_sequence(size_t n, const double *t, double t0, double t1, nf_tpp_convention conv)
{
    if (!isfinite(t0)) return nf_error(NF_EDATA, "window start %g: expected a finite time", t0);
    if (conv == NF_TPP_WINDOW && !(isfinite(t1) && t1 >= t0))
        return nf_error(NF_EDATA, "window [%.17g, %g]: expected a finite end at or after the start", t0, t1);
    for (size_t i = 0; i < n; i++) {
        double prev = i ? t[i - 1] : t0;
        if (!isfinite(t[i])) return nf_error(NF_EDATA, "event %zu: time %g is not finite", i, t[i]);
        if (!(t[i] > prev))
            return nf_error(NF_EDATA,
                            "event %zu: time %.17g is not after %s %.17g (expected strictly increasing times "
                            "after the window start: a simple point process)",
                            i, t[i], i ? "the previous event's" : "the window start", prev);
        if (conv == NF_TPP_WINDOW && t[i] > t1)
            return nf_error(NF_EDATA, "event %zu: time %.17g is after the window end %.17g", i, t[i], t1);
    }
    return NF_OK;
}

int nf_tpp_log_lik_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1,
                         nf_tpp_convention conv, double *ll_ev, double *comp)
{
    if (!p || (n && !t)) return nf_error(NF_EINVAL, "nf_tpp_log_lik: process and times must not be NULL");
    NF_TRY(nf_tpp_check_sequence(n, t, t0, t1, conv));
    if (conv == NF_TPP_TO_LAST_EVENT) t1 = n ? t[n - 1] : t0;
    p->type->terms(p, n, t, t0, t1, ll_ev, comp);
    return NF_OK;
}

/* log L = sum_i ll_i - comp_n  from buf = ll (n) then comp (n + 1), summed in one order everywhere. */
static double sum_terms(size_t n, const double *buf)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += buf[i];
    return s - buf[2 * n];
}

/* log L = sum_i ll_i - comp_n  (ll_i = log lambda*(t_i) - Lambda(t_{i-1}, t_i), comp_n the open
 * interval's compensator, 0 when the window closes at the last event) */
int nf_tpp_log_lik(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1,
                   nf_tpp_convention conv, double *ll)
{
    double *buf = nf_calloc(2 * n + 1, sizeof *buf, "point-process likelihood terms");
    if (!buf) return NF_ENOMEM;
    int rc = nf_tpp_log_lik_terms(p, n, t, t0, t1, conv, buf, buf + n);
    if (rc == NF_OK) *ll = sum_terms(n, buf);
    free(buf);
    return rc;
}

int nf_tpp_source_log_lik(const nf_tpp_process *p, const nf_source *s, nf_tpp_convention conv,
                          double *per_seq, double *total, size_t *n_events)
{
    nf_sequences q = nf_source_sequences(s);
    if (!p || !q.offsets)
        return nf_error(NF_EINVAL, "%s: expected a process and a source of event sequences", s ? s->name : "(null)");
    size_t most = 0, events = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t len = (size_t)(q.offsets[i + 1] - q.offsets[i]);
        if (len > most) most = len;
    }
    double *buf = nf_calloc(2 * most + 1, sizeof *buf, "point-process likelihood terms");
    if (!buf) return NF_ENOMEM;
    double sum = 0;
    int rc = NF_OK;
    for (size_t i = 0; i < s->n && rc == NF_OK; i++) {
        size_t len = (size_t)(q.offsets[i + 1] - q.offsets[i]);
        const double *t = q.times + q.offsets[i];
        rc = nf_tpp_log_lik_terms(p, len, t, q.t_start[i], q.t_end[i], conv, buf, buf + len);
        if (rc != NF_OK) {
            nf_error_context(rc, "%s: sequence %zu (%s)", s->name, i, p->type->name);
            break;
        }
        double ll = sum_terms(len, buf);
        if (per_seq) per_seq[i] = ll;
        sum += ll;
        events += len;
    }
    free(buf);
    if (rc != NF_OK) return rc;
    if (total) *total = sum;
    if (n_events) *n_events = events;
    return NF_OK;
}

double nf_tpp_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s)
{
    return p->type->intensity(p, n, t, t0, s);
}

int nf_tpp_append(double **t, size_t *n, size_t *cap, double v)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        double *g = realloc(*t, c * sizeof *g);
        if (!g) return nf_error(NF_ENOMEM, "out of memory growing simulated events to %zu", c);
        *t = g;
        *cap = c;
    }
    (*t)[(*n)++] = v;
    return NF_OK;
}

void nf_tpp_sim_free(nf_tpp_sim *s)
{
    if (!s) return;
    free(s->offsets);
    free(s->times);
    free(s->t_start);
    free(s->t_end);
    free(s->log_lik);
    memset(s, 0, sizeof *s);
}

/* Each sequence is simulated into the one growing times array, then checked and scored by the same
 * code that scores any given sequence (so the stored log-likelihood is exactly what
 * nf_tpp_log_lik gives for it). */
int nf_tpp_simulate(nf_tpp_sim *out, const nf_tpp_process *p, nf_rng *rng, size_t n_seq, double t_start,
                    double t_end, size_t n_events)
{
    if (!out || !p || !rng) return nf_error(NF_EINVAL, "nf_tpp_simulate: output, process and rng must not be NULL");
    memset(out, 0, sizeof *out);
    const char *name = p->type->name;
    if (n_seq < 1) return nf_error(NF_EINVAL, "%s: simulate %zu sequences: expected at least 1", name, n_seq);
    if (!isfinite(t_start)) return nf_error(NF_EINVAL, "%s: window start %g: expected a finite time", name, t_start);
    int window = n_events == 0;
    if (window && !(isfinite(t_end) && t_end >= t_start))
        return nf_error(NF_EINVAL, "%s: window [%g, %g]: expected a finite end at or after the start (or a number "
                        "of events per sequence)", name, t_start, t_end);
    if (!window && t_end != INFINITY)
        return nf_error(NF_EINVAL, "%s: both a window end (%g) and %zu events per sequence: expected one of them",
                        name, t_end, n_events);
    nf_tpp_sim s = {.n_seq = n_seq};
    s.offsets = nf_calloc(n_seq + 1, sizeof *s.offsets, "simulated offsets");
    s.t_start = nf_calloc(n_seq, sizeof *s.t_start, "simulated windows");
    s.t_end = nf_calloc(n_seq, sizeof *s.t_end, "simulated windows");
    s.log_lik = nf_calloc(n_seq, sizeof *s.log_lik, "simulated log-likelihoods");
    size_t cap = 0;
    int rc = s.offsets && s.t_start && s.t_end && s.log_lik ? NF_OK : NF_ENOMEM;
    for (size_t i = 0; i < n_seq && rc == NF_OK; i++) {
        size_t first = s.n_events;
        rc = p->type->simulate(p, rng, t_start, window ? t_end : INFINITY, n_events, &s.times, &s.n_events, &cap);
        size_t len = s.n_events - first;
        if (rc == NF_OK && !window && len != n_events)
            rc = nf_error(NF_ENONFINITE, "drew %zu of %zu events", len, n_events);
        s.t_start[i] = t_start;
        s.t_end[i] = window ? t_end : (len ? s.times[s.n_events - 1] : t_start);
        if (rc == NF_OK)
            rc = nf_tpp_log_lik(p, len, s.times + first, t_start, s.t_end[i], window ? NF_TPP_WINDOW : NF_TPP_TO_LAST_EVENT,
                                &s.log_lik[i]);
        if (rc != NF_OK) nf_error_context(rc, "%s(%s): simulated sequence %zu", name, p->options, i);
        s.offsets[i + 1] = (int64_t)s.n_events;
    }
    if (rc == NF_OK && !s.times && !(s.times = nf_calloc(1, sizeof *s.times, "simulated events"))) rc = NF_ENOMEM;
    if (rc != NF_OK) {
        nf_tpp_sim_free(&s);
        return rc;
    }
    *out = s;
    return NF_OK;
}
