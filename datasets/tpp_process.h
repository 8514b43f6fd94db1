/* datasets/tpp_process.h - temporal point processes with known likelihoods: simulation of event
 * sequences and the exact log-likelihood of any sequence under a named process.
 *
 * A process is a const type object found by name (like the data sets), and an instance made from a
 * name and "k=v" options (core/opts.h: unknown keys and out-of-range values are refused, naming the
 * process and the key).  Vector options list their entries separated by ':' ("alpha=0.4:0.4").
 * A preset names a type with options: the five TPP benchmark sets of the intensity-free TPP paper
 * (../shared/data/tpp/README.md) are hawkes1, hawkes2, poisson, renewal, self_correcting.
 *
 *   nf_tpp_process *p;
 *   nf_tpp_process_create(&p, "hawkes", "mu=0.2, alpha=0.4:0.4, beta=1:20");
 *   nf_tpp_sim sim;                                     // arrays as nf_sequences_save takes them
 *   nf_tpp_simulate(&sim, p, rng, 64, 0.0, 100.0, 0);   // 64 sequences on [0, 100] (or 0, INFINITY, 1024:
 *                                                       // 1024 events each, window closing at the last)
 *   nf_sequences_save("seq.h5", sim.n_seq, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0);
 *   // or nf_sequences_save_truth(..., &(nf_sequences_truth){.log_lik = sim.log_lik, .process = ...}):
 *   // the file then carries each sequence's true log-likelihood (what nf data make tpp-NAME writes)
 *   nf_source_sequences_wrap(&src, sim.n_seq, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0);
 *   nf_tpp_log_lik(p, n, t, 0.0, 100.0, NF_TPP_WINDOW, &ll);       // any sequence
 *   nf_tpp_source_log_lik(p, src, NF_TPP_TO_LAST_EVENT, per_seq, &total, &n_events);
 *   nf_tpp_sim_free(&sim);  nf_tpp_process_free(p);
 *
 * Every process is simple and unmarked (marks of a sequence are ignored).  With lambda*(t) the
 * conditional intensity given the events before t, and Lambda(s, t) = int_s^t lambda*(u) du, the
 * log-likelihood of events t_1 < ... < t_n observed on [t0, t1] is
 *
 *     log L = sum_i [ log lambda*(t_i) - Lambda(t_{i-1}, t_i) ]  -  Lambda(t_n, t1),    t_0 := t0,
 *
 * the first interval from the window start included, the last term the log-survival of the open
 * interval.  NF_TPP_TO_LAST_EVENT drops that last term (the window closes at the last event): the
 * convention of the TPP benchmarks and of nf_sequences_from_matrix's windows, under which the five
 * shared sets give their README's true NLL per event.  Every compensator is in closed form; only the
 * sinusoidal time change needs a root (Newton, safeguarded by bisection) when simulating.
 *
 * The processes (t0 the window start; formulas also above the code in tpp_kinds.c):
 *   poisson           lambda = rate                                              rate=1
 *   hawkes            lambda = mu + sum_j sum_{t_i < t} alpha_j beta_j exp(-beta_j (t - t_i))
 *                     alpha_j >= 0, beta_j > 0, sum_j alpha_j < 1 (mean rate mu / (1 - sum alpha)),
 *                     at most NF_TPP_MAX_KERNELS kernels; simulated by Ogata thinning
 *                                                              mu=0.2, alpha=0.8, beta=1
 *   self-correcting   lambda = exp(mu (t - t0) - alpha N(t)),  N(t) = #{t_i < t} (the clock starts at
 *                     the window start); simulated by exact inversion        mu=1, alpha=1
 *   renewal           i.i.d. log-normal intervals (the first from t0: an ordinary renewal process)
 *                     with the given mean and standard deviation: log tau ~ N(m, s^2),
 *                     s^2 = log(1 + sd^2 / mean^2), m = log(mean) - s^2 / 2;
 *                     lambda = f(tau) / S(tau), tau = t - (last event or t0)   mean=1, sd=6
 *   nonstationary-poisson
 *                     lambda = r(t) = a + b sin(2 pi t / period)  (absolute time t), |b| < a;
 *                     simulated by inverting R(t) = int r                  a=1, b=0.99, period=100
 *   nonstationary-renewal
 *                     a log-normal renewal process (mean, sd as above) in the operational time
 *                     R(t) = int_{t0}^t r(u) du with r as for nonstationary-poisson: the intervals
 *                     R(t_i) - R(t_{i-1}) are i.i.d. log-normal, so
 *                     lambda = r(t) h(R(t) - R(t_last)),  h = f / S the log-normal hazard
 *                                                   a=1, b=0.99, period=100, mean=1, sd=0.5
 * Type names accept '_' for '-' (self_correcting), and a type name wins over a preset of the same
 * name (the poisson, renewal and self_correcting presets are their types' defaults).
 *
 * Sequences given to the likelihood must be strictly increasing inside the window:
 * t0 < t_1 < ... < t_n <= t1 (a simple process puts no two events at one time, and none at t0);
 * anything else is NF_EDATA naming the sequence, the event and the times.  Everything is double
 * precision; a simulation is single-threaded and reproducible from the rng; an instance is read-only
 * after creation, so likelihoods may be computed from several threads at once.
 */
#ifndef NF_TPP_PROCESS_H
#define NF_TPP_PROCESS_H

#include "core/opts.h"
#include "core/rng.h"
#include "datasets/source.h"

#define NF_TPP_MAX_KERNELS 8

typedef struct nf_tpp_process nf_tpp_process;
typedef struct nf_tpp_process_type nf_tpp_process_type;

struct nf_tpp_process_type {
    const char *name;           /* "hawkes" */
    const char *summary;        /* one line for listings */
    const char *options_help;   /* the defaults, "mu=0.2, alpha=0.8, beta=1" */
    const char *defaults;       /* the same as options ("mu=0.2,alpha=0.8,beta=1"), read first, so an
                                   instance's options string names every parameter */
    /* Read the options (each read marks the key used) into p->state. */
    int (*create)(nf_tpp_process *p, nf_opts *o);
    void (*destroy)(nf_tpp_process *p);
    /* Per-event terms of one checked sequence t[0..n-1] on [t0, t1] (t1 finite, >= every event):
     *   ll[i]   = log lambda*(t_i) - Lambda(t_{i-1}, t_i),  t_{-1} = t0    (i < n)
     *   comp[i] = Lambda(t_{i-1}, t_i) (i < n),  comp[n] = Lambda(t_{n-1}, t1).
     * ll or comp may be NULL. */
    void (*terms)(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1, double *ll,
                  double *comp);
    /* lambda*(s) given the events t[k] < s among t[0..n-1] (t0 < s), by direct summation over the
     * history: an independent check on the recursions of terms(). */
    double (*intensity)(const nf_tpp_process *p, size_t n, const double *t, double t0, double s);
    /* Append the events after t0 to *t (growing it with nf_tpp_append), stopping before the first
     * event after t1 or once max events are drawn (max 0: no limit; t1 = INFINITY needs max > 0). */
    int (*simulate)(const nf_tpp_process *p, nf_rng *rng, double t0, double t1, size_t max, double **t,
                    size_t *n, size_t *cap);
};

struct nf_tpp_process {
    const nf_tpp_process_type *type;
    char options[256];   /* canonical "k=v,..." of every parameter: the defaults, then a preset's
                            options, then the given ones (the last value of a key wins) */
    void *state;         /* the type's parameters */
};

/* The types (tpp_kinds.c), and the registry, NULL-terminated, in listing order. */
extern const nf_tpp_process_type nf_tpp_poisson, nf_tpp_hawkes, nf_tpp_self_correcting, nf_tpp_renewal,
    nf_tpp_nonstationary_poisson, nf_tpp_nonstationary_renewal;
extern const nf_tpp_process_type *const nf_tpp_process_types[];

/* A named process with options, and the README's true NLL per event of the shared set of that name
 * (NAN if none). */
typedef struct nf_tpp_preset {
    const char *name, *type, *options;
    double readme_nll;
} nf_tpp_preset;
extern const nf_tpp_preset nf_tpp_presets[];   /* terminated by a NULL name */

/* The type called name ('_' matching '-'), or NULL with an NF_EINVAL message listing the types and
 * presets. */
const nf_tpp_process_type *nf_tpp_process_type_find(const char *name);
/* The preset called name, or NULL (no message). */
const nf_tpp_preset *nf_tpp_preset_find(const char *name);

/* Make a process from a type or preset name and options (NULL or "" for the defaults; a preset's
 * options come first, so given ones override them).  *p is NULL on failure. */
int nf_tpp_process_create(nf_tpp_process **p, const char *name, const char *options);
void nf_tpp_process_free(nf_tpp_process *p);   /* NULL-safe */

typedef enum nf_tpp_convention {
    NF_TPP_WINDOW = 0,         /* events' terms plus the log-survival from the last event to t1 */
    NF_TPP_TO_LAST_EVENT = 1   /* no survival term: the window closes at the last event (README) */
} nf_tpp_convention;

/* Check one sequence: t0 finite, t1 >= t0 (t1 ignored with NF_TPP_TO_LAST_EVENT), every time
 * finite, t0 < t[0] < t[1] < ... <= t1.  NF_EDATA naming the event (position, time) otherwise. */
int nf_tpp_check_sequence(size_t n, const double *t, double t0, double t1, nf_tpp_convention conv);

/* *ll = log-likelihood of events t[0..n-1] on [t0, t1] (above).  Checked first. */
int nf_tpp_log_lik(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1,
                   nf_tpp_convention conv, double *ll);
/* The per-event terms of the same (type->terms after the check): ll_ev (n) log-densities of each
 * event given its past, comp (n + 1) compensator increments, comp[n] the open interval's (0 with
 * NF_TPP_TO_LAST_EVENT).  Under the process the first n increments are i.i.d. Exp(1)
 * (time-rescaling).  Either may be NULL. */
int nf_tpp_log_lik_terms(const nf_tpp_process *p, size_t n, const double *t, double t0, double t1,
                         nf_tpp_convention conv, double *ll_ev, double *comp);
/* Every sequence of a "sequences" source (a view too) on its window: per_seq (s->n) or NULL, the
 * total and the number of events (either may be NULL).  Mean NLL per event = -total / n_events.
 * Errors name the source, the sequence and the event. */
int nf_tpp_source_log_lik(const nf_tpp_process *p, const nf_source *s, nf_tpp_convention conv,
                          double *per_seq, double *total, size_t *n_events);
/* lambda*(s) given the events of t[0..n-1] before s, by direct summation (s > t0). */
double nf_tpp_intensity(const nf_tpp_process *p, size_t n, const double *t, double t0, double s);

/* Simulated sequences, laid out as nf_sequences_save / nf_source_sequences_wrap take them, with the
 * exact log-likelihood of each on its window (per the window: with survival term in window mode,
 * without in fixed-count mode, where the window ends at the last event). */
typedef struct nf_tpp_sim {
    size_t n_seq;
    int64_t *offsets;          /* (n_seq + 1) */
    double *times;             /* (offsets[n_seq]) */
    double *t_start, *t_end;   /* (n_seq) */
    double *log_lik;           /* (n_seq) */
    size_t n_events;           /* offsets[n_seq] */
} nf_tpp_sim;

/* n_seq sequences from t_start, either on the window [t_start, t_end] (t_end finite, n_events 0: the
 * events in (t_start, t_end]) or of exactly n_events events each (t_end = INFINITY: each window
 * ends at its last event).  Sequences are drawn one after another from rng. */
int nf_tpp_simulate(nf_tpp_sim *out, const nf_tpp_process *p, nf_rng *rng, size_t n_seq, double t_start,
                    double t_end, size_t n_events);
void nf_tpp_sim_free(nf_tpp_sim *s);   /* frees the arrays and zeroes *s; NULL-safe */

/* For simulate(): append v to the growing array *t of *n entries (capacity *cap). */
int nf_tpp_append(double **t, size_t *n, size_t *cap, double v);

#endif
