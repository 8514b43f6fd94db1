/* tests/check_tpp_process.c - point processes with known likelihoods (datasets/tpp_process.h).
 *
 * - Each process's log-likelihood (stored by the simulator and recomputed) equals an independent one:
 *   the log-intensities at the events, computed by direct summation over the history, minus GSL
 *   quadrature of that intensity between consecutive events and over the open interval; every
 *   compensator increment is checked too, in both conventions, on sequences with t_start != 0.
 * - Hand-computed likelihoods of short sequences (poisson, hawkes, self-correcting).
 * - Statistics of simulated sequences: Poisson counts (mean and variance), the nonstationary Poisson
 *   mean count R(T) - R(0), the Hawkes mean count against the exact expectation (the linear ODE of
 *   the mean intensity) and mu / (1 - sum alpha) in the long run, renewal interval moments, and
 *   time-rescaling (compensator increments i.i.d. Exp(1), KS test) for every process, with a
 *   negative control that the KS test rejects the wrong process; the KS statistic and p-value
 *   (core/ks.h) against values worked out by hand and from the Kolmogorov series.
 * - The five shared TPP sets (tests/data/tpp, copies of ../shared/data/tpp): the mean NLL per event
 *   over all 64 x 1024 events equals the README's value to 3 decimals, and fresh simulations of the
 *   same presets agree with it statistically.
 * - Errors: unknown process, bad options, non-increasing times, windows, simulation arguments.
 * - Each type's defaults string equals its built-in defaults; simulated sequences saved with their
 *   truth load with a truth equal to the likelihood recomputed from the loaded events.
 */
#include <check.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/import.h"
#include "core/ks.h"
#include "datasets/sequences.h"
#include "datasets/tpp_process.h"

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))
#define PI 3.14159265358979323846

static nf_tpp_process *make(const char *name, const char *opts)
{
    nf_tpp_process *p;
    ck_assert_msg(nf_tpp_process_create(&p, name, opts) == NF_OK, "%s(%s): %s", name, opts ? opts : "",
                  nf_strerror_last());
    return p;
}

/* Processes with unremarkable options, then every default. */
typedef struct {
    const char *name, *opts;
} proc_case;
static const proc_case cases[] = {
    {"poisson", "rate=2.385"},
    {"hawkes", "mu=0.35, alpha=0.45:0.3, beta=1.7:13.5"},
    {"self-correcting", "mu=1.3, alpha=0.85"},
    {"renewal", "mean=1.4, sd=2.2"},
    {"nonstationary-poisson", "a=1.6, b=1.1, period=7.3"},
    {"nonstationary-renewal", "a=1.6, b=-1.1, period=7.3, mean=0.9, sd=0.45"},
    {"hawkes", NULL},
    {"self-correcting", NULL},
    {"renewal", NULL},
    {"nonstationary-poisson", NULL},
    {"nonstationary-renewal", NULL},
    {"hawkes2", NULL},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- independent compensator: quadrature of the directly summed intensity --------------------- */

typedef struct {
    const nf_tpp_process *p;
    size_t n;
    const double *t;
    double t0;
} quad_ctx;

static double quad_f(double s, void *v)
{
    const quad_ctx *c = v;
    return nf_tpp_intensity(c->p, c->n, c->t, c->t0, s);
}

/* int_a^b lambda*(u) du, lambda* smooth inside (a, b) (no event there). */
static double quad(const quad_ctx *c, gsl_integration_workspace *w, double a, double b)
{
    if (b <= a) return 0;
    gsl_function F = {.function = quad_f, .params = (void *)c};
    double r, err;
    int st = gsl_integration_qag(&F, a, b, 1e-300, 1e-12, 2000, GSL_INTEG_GAUSS41, w, &r, &err);
    if (st) st = gsl_integration_qags(&F, a, b, 1e-300, 1e-11, 2000, w, &r, &err);
    ck_assert_msg(st == 0, "quadrature on [%g, %g]: %s", a, b, gsl_strerror(st));
    return r;
}

START_TEST(test_vs_quadrature)
{
    const proc_case *pc = &cases[_i];
    nf_tpp_process *p = make(pc->name, pc->opts);
    nf_rng *rng = nf_rng_alloc(2385 + (uint64_t)_i, 0);
    nf_tpp_sim sim;
    const double t0 = 0.37, t1 = 24.9;
    OK(nf_tpp_simulate(&sim, p, rng, 4, t0, t1, 0));
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(2000);
    size_t most = 0;
    for (size_t i = 0; i < sim.n_seq; i++)
        if ((size_t)(sim.offsets[i + 1] - sim.offsets[i]) > most) most = (size_t)(sim.offsets[i + 1] - sim.offsets[i]);
    double *ll_ev = malloc((most + 1) * sizeof *ll_ev), *comp = malloc((most + 1) * sizeof *comp);
    ck_assert_msg(sim.n_events > 8, "%s: only %zu events simulated", pc->name, sim.n_events);
    for (size_t i = 0; i < sim.n_seq; i++) {
        size_t n = (size_t)(sim.offsets[i + 1] - sim.offsets[i]);
        const double *t = sim.times + sim.offsets[i];
        ck_assert(sim.t_start[i] == t0 && sim.t_end[i] == t1);
        for (size_t k = 0; k < n; k++) ck_assert(t[k] > (k ? t[k - 1] : t0) && t[k] <= t1);
        quad_ctx c = {.p = p, .n = n, .t = t, .t0 = t0};
        OK(nf_tpp_log_lik_terms(p, n, t, t0, t1, NF_TPP_WINDOW, ll_ev, comp));
        double want = 0, got = 0, want_last = 0, got_last = 0;
        for (size_t k = 0; k <= n; k++) {
            double a = k ? t[k - 1] : t0, b = k < n ? t[k] : t1, L = quad(&c, w, a, b);
            ck_assert_msg(fabs(comp[k] - L) <= 1e-9 * (1 + fabs(L)), "%s seq %zu interval %zu: compensator %.15g, "
                          "quadrature %.15g", pc->name, i, k, comp[k], L);
            if (k == n) {
                want -= L;
                got -= comp[k];
                break;
            }
            double lam = nf_tpp_intensity(p, n, t, t0, b);
            ck_assert_msg(fabs(ll_ev[k] - (log(lam) - L)) <= 1e-9 * (1 + fabs(log(lam) - L)),
                          "%s seq %zu event %zu: %.15g vs %.15g", pc->name, i, k, ll_ev[k], log(lam) - L);
            want += log(lam) - L;
            got += ll_ev[k];
        }
        want_last = want + comp[n], got_last = got + comp[n];   /* without the survival term */
        ck_assert_msg(fabs(sim.log_lik[i] - want) <= 1e-8 * (1 + fabs(want)), "%s seq %zu: stored %.15g, "
                      "quadrature %.15g", pc->name, i, sim.log_lik[i], want);
        double ll;
        OK(nf_tpp_log_lik(p, n, t, t0, t1, NF_TPP_WINDOW, &ll));
        ck_assert(ll == sim.log_lik[i]);
        OK(nf_tpp_log_lik(p, n, t, t0, t1, NF_TPP_TO_LAST_EVENT, &ll));
        ck_assert_msg(fabs(ll - want_last) <= 1e-8 * (1 + fabs(want_last)) && fabs(ll - got_last) <= 1e-9 * (1 + fabs(ll)),
                      "%s seq %zu, to the last event: %.15g vs %.15g", pc->name, i, ll, want_last);
    }
    /* the same through a source wrapped around the simulated arrays */
    nf_source *src;
    OK(nf_source_sequences_wrap(&src, sim.n_seq, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0));
    double per[4], total, sum = 0;
    size_t ne;
    OK(nf_tpp_source_log_lik(p, src, NF_TPP_WINDOW, per, &total, &ne));
    for (size_t i = 0; i < sim.n_seq; i++) ck_assert(per[i] == sim.log_lik[i]), sum += per[i];
    ck_assert(ne == sim.n_events && fabs(total - sum) <= 1e-12 * fabs(sum));
    nf_source_free(src);
    free(ll_ev);
    free(comp);
    gsl_integration_workspace_free(w);
    gsl_set_error_handler(old);
    nf_tpp_sim_free(&sim);
    nf_rng_free(rng);
    nf_tpp_process_free(p);
}
END_TEST

/* ---- hand-computed values --------------------------------------------------------------------- */

START_TEST(test_hand_values)
{
    double ll;
    const double t[3] = {1.0, 1.5, 3.25};
    /* poisson rate 2.385 on [0, 4]: 3 log 2.385 - 2.385 * 4 */
    nf_tpp_process *p = make("poisson", "rate=2.385");
    OK(nf_tpp_log_lik(p, 3, t, 0, 4, NF_TPP_WINDOW, &ll));
    ck_assert_double_eq_tol(ll, 3 * log(2.385) - 2.385 * 4, 1e-13);
    OK(nf_tpp_log_lik(p, 3, t, 0, 4, NF_TPP_TO_LAST_EVENT, &ll));
    ck_assert_double_eq_tol(ll, 3 * log(2.385) - 2.385 * 3.25, 1e-13);
    nf_tpp_process_free(p);
    /* hawkes mu 0.5, alpha 0.3, beta 2, events 1, 1.5 on [0, 3]:
     * lambda(1) = 0.5, lambda(1.5) = 0.5 + 0.6 e^{-1},
     * Lambda(0, 3) = 1.5 + 0.3 (1 - e^{-4}) + 0.3 (1 - e^{-3}) */
    p = make("hawkes", "mu=0.5,alpha=0.3,beta=2");
    OK(nf_tpp_log_lik(p, 2, t, 0, 3, NF_TPP_WINDOW, &ll));
    ck_assert_double_eq_tol(ll, log(0.5) + log(0.5 + 0.6 * exp(-1)) - 1.5 - 0.3 * (1 - exp(-4)) - 0.3 * (1 - exp(-3)),
                            1e-13);
    ck_assert_double_eq_tol(nf_tpp_intensity(p, 2, t, 0, 2.0), 0.5 + 0.6 * (exp(-2) + exp(-1)), 1e-14);
    nf_tpp_process_free(p);
    /* self-correcting mu 1, alpha 1, events 0.5, 1.7 on [0, 2]: log lambda = 0.5 and 0.7,
     * Lambda = (e^{0.5} - 1) + (e^{0.7} - e^{-0.5}) + (1 - e^{-0.3}) */
    const double u[2] = {0.5, 1.7};
    p = make("self-correcting", NULL);
    OK(nf_tpp_log_lik(p, 2, u, 0, 2, NF_TPP_WINDOW, &ll));
    ck_assert_double_eq_tol(ll, 0.5 + 0.7 - (exp(0.5) - 1) - (exp(0.7) - exp(-0.5)) - (1 - exp(-0.3)), 1e-13);
    /* the clock starts at the window start: the same events shifted by 10 on [10, 12] */
    const double v[2] = {10.5, 11.7};
    double ll2;
    OK(nf_tpp_log_lik(p, 2, v, 10, 12, NF_TPP_WINDOW, &ll2));
    ck_assert_double_eq_tol(ll2, ll, 1e-12);
    /* an empty window: only the survival term */
    OK(nf_tpp_log_lik(p, 0, NULL, 0, 2, NF_TPP_WINDOW, &ll));
    ck_assert_double_eq_tol(ll, -(exp(2) - 1), 1e-13);
    OK(nf_tpp_log_lik(p, 0, NULL, 0, 2, NF_TPP_TO_LAST_EVENT, &ll));
    ck_assert(ll == 0);
    nf_tpp_process_free(p);
    /* renewal: the log-normal density of each interval; mean 1, sd 6 gives s^2 = log 37 */
    p = make("renewal", NULL);
    OK(nf_tpp_log_lik(p, 1, t, 0, 1.0, NF_TPP_TO_LAST_EVENT, &ll));
    double s2 = log(37.0), m = -0.5 * s2;   /* log f(1) = -log sqrt(2 pi s2) - m^2 / (2 s2) */
    ck_assert_double_eq_tol(ll, -0.5 * log(2 * PI * s2) - m * m / (2 * s2), 1e-13);
    nf_tpp_process_free(p);
}
END_TEST

/* ---- statistics of simulated sequences --------------------------------------------------------- */

/* Kolmogorov-Smirnov p-value of x (n, overwritten) against Exp(1) (core/ks.h). */
static double ks_exp1(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = -expm1(-x[i]);
    return nf_ks_pvalue(nf_ks_uniform(x, n), n);
}

/* The statistic on an even grid (D = 1 / (2n)) and on a shifted one; the p-value against the
 * Kolmogorov distribution at lambda = 1 and 1.36 (Q_KS = 0.2700 and 0.0495, by its series) with the
 * small-sample correction undone, and its ends. */
START_TEST(test_ks_statistic_and_pvalue)
{
    enum { N = 50 };
    double u[N];
    for (int i = 0; i < N; i++) u[N - 1 - i] = (i + 0.5) / N; /* reversed: the statistic sorts */
    ck_assert_double_eq_tol(nf_ks_uniform(u, N), 0.5 / N, 1e-15);
    for (int i = 0; i < N; i++) u[i] = (i + 0.5) / N * 0.8;
    ck_assert_double_eq_tol(nf_ks_uniform(u, N), 1 - 0.8 * (N - 0.5) / N, 1e-14);
    const double sn = sqrt(400.0), c = sn + 0.12 + 0.11 / sn;
    ck_assert_double_eq_tol(nf_ks_pvalue(1.0 / c, 400), 0.26999967167735456, 1e-12);
    ck_assert_double_eq_tol(nf_ks_pvalue(1.36 / c, 400), 0.049485876755377876, 1e-12);
    ck_assert(nf_ks_pvalue(0, 400) == 1 && nf_ks_pvalue(0.3, 0) == 1);
    ck_assert(nf_ks_pvalue(1, 400) >= 0 && nf_ks_pvalue(1, 400) < 1e-300);
}
END_TEST

/* The compensator increments of all events of sim under q (the last, open interval left out). */
static double *increments(const nf_tpp_process *q, const nf_tpp_sim *sim, nf_tpp_convention conv)
{
    double *x = malloc((sim->n_events + 1) * sizeof *x);
    for (size_t i = 0; i < sim->n_seq; i++) {
        size_t n = (size_t)(sim->offsets[i + 1] - sim->offsets[i]);
        double *c = malloc((n + 1) * sizeof *c);
        OK(nf_tpp_log_lik_terms(q, n, sim->times + sim->offsets[i], sim->t_start[i], sim->t_end[i], conv, NULL, c));
        memcpy(x + sim->offsets[i], c, n * sizeof *c);
        free(c);
    }
    return x;
}

START_TEST(test_time_rescaling)
{
    const proc_case *pc = &cases[_i];
    nf_tpp_process *p = make(pc->name, pc->opts);
    nf_rng *rng = nf_rng_alloc(4711 + (uint64_t)_i, 0);
    nf_tpp_sim sim;
    for (int mode = 0; mode < 2; mode++) {   /* fixed counts, then a window */
        OK(mode ? nf_tpp_simulate(&sim, p, rng, 40, -3.5, 300, 0) : nf_tpp_simulate(&sim, p, rng, 20, 0, INFINITY, 500));
        if (!mode) ck_assert_uint_eq(sim.n_events, 20 * 500);
        double *x = increments(p, &sim, mode ? NF_TPP_WINDOW : NF_TPP_TO_LAST_EVENT);
        double pv = ks_exp1(x, sim.n_events);
        ck_assert_msg(pv > 1e-3, "%s(%s) %s: compensator increments are not Exp(1): KS p = %g over %zu events",
                      pc->name, pc->opts ? pc->opts : "", mode ? "window" : "fixed count", pv, sim.n_events);
        free(x);
        nf_tpp_sim_free(&sim);
    }
    nf_tpp_process_free(p);
    nf_rng_free(rng);
}
END_TEST

/* The KS test can fail: Hawkes and renewal sequences rescaled by a Poisson process of their mean
 * rate are far from Exp(1). */
START_TEST(test_time_rescaling_rejects)
{
    const char *name[2] = {"hawkes2", "renewal"};
    for (int c = 0; c < 2; c++) {
        nf_tpp_process *p = make(name[c], NULL), *q = make("poisson", "rate=1");
        nf_rng *rng = nf_rng_alloc(99, 0);
        nf_tpp_sim sim;
        OK(nf_tpp_simulate(&sim, p, rng, 10, 0, INFINITY, 500));
        double *x = increments(q, &sim, NF_TPP_TO_LAST_EVENT);
        double pv = ks_exp1(x, sim.n_events);
        ck_assert_msg(pv < 1e-6, "%s rescaled as poisson: KS p = %g", name[c], pv);
        free(x);
        nf_tpp_sim_free(&sim);
        nf_rng_free(rng);
        nf_tpp_process_free(p);
        nf_tpp_process_free(q);
    }
}
END_TEST

static void count_moments(const nf_tpp_sim *s, double *mean, double *var)
{
    double a = 0, b = 0;
    for (size_t i = 0; i < s->n_seq; i++) a += (double)(s->offsets[i + 1] - s->offsets[i]);
    a /= s->n_seq;
    for (size_t i = 0; i < s->n_seq; i++) {
        double d = (double)(s->offsets[i + 1] - s->offsets[i]) - a;
        b += d * d;
    }
    *mean = a;
    *var = b / (s->n_seq - 1);
}

START_TEST(test_poisson_counts)
{
    nf_rng *rng = nf_rng_alloc(17, 0);
    nf_tpp_sim sim;
    double mean, var;
    /* N(T) ~ Poisson(rate T): mean and variance rate T */
    nf_tpp_process *p = make("poisson", "rate=2.385");
    OK(nf_tpp_simulate(&sim, p, rng, 4000, 1.25, 14.95, 0));
    count_moments(&sim, &mean, &var);
    double lt = 2.385 * 13.7;
    ck_assert_msg(fabs(mean - lt) < 4 * sqrt(lt / 4000), "poisson mean count %g, expected %g", mean, lt);
    ck_assert_msg(fabs(var / lt - 1) < 0.1, "poisson count variance %g, expected %g", var, lt);
    nf_tpp_sim_free(&sim);
    nf_tpp_process_free(p);
    /* nonstationary: N ~ Poisson(R(T) - R(t0)), R(t) = a t - (b period / 2 pi) cos(2 pi t / period) */
    p = make("nonstationary-poisson", "a=1.6, b=1.1, period=7.3");
    double t0 = 0.4, t1 = 5.9, w = 2 * PI / 7.3;
    lt = 1.6 * (t1 - t0) - 1.1 / w * (cos(w * t1) - cos(w * t0));
    OK(nf_tpp_simulate(&sim, p, rng, 4000, t0, t1, 0));
    count_moments(&sim, &mean, &var);
    ck_assert_msg(fabs(mean - lt) < 4 * sqrt(lt / 4000), "nonstationary mean count %g, expected %g", mean, lt);
    ck_assert_msg(fabs(var / lt - 1) < 0.1, "nonstationary count variance %g, expected %g", var, lt);
    nf_tpp_sim_free(&sim);
    nf_tpp_process_free(p);
    nf_rng_free(rng);
}
END_TEST

/* E N(T) of a Hawkes process started empty at 0: with y_j(t) = E sum_{t_k < t} beta_j e^{-beta_j (t - t_k)}
 * and m(t) = mu + sum_j alpha_j y_j the mean intensity, y_j' = beta_j (m - y_j), N' = m (RK4). */
static double hawkes_expected_count(double mu, int J, const double *al, const double *be, double T, double *m_end)
{
    double y[NF_TPP_MAX_KERNELS + 1] = {0}, k[4][NF_TPP_MAX_KERNELS + 1], tmp[NF_TPP_MAX_KERNELS + 1];
    int steps = (int)(T / 1e-3);
    double h = T / steps;
    for (int s = 0; s < steps; s++) {
        for (int r = 0; r < 4; r++) {
            double c = r == 0 ? 0 : r == 3 ? h : h / 2;
            for (int j = 0; j <= J; j++) tmp[j] = y[j] + (r ? c * k[r - 1][j] : 0);
            double m = mu;
            for (int j = 0; j < J; j++) m += al[j] * tmp[j];
            for (int j = 0; j < J; j++) k[r][j] = be[j] * (m - tmp[j]);
            k[r][J] = m;
        }
        for (int j = 0; j <= J; j++) y[j] += h / 6 * (k[0][j] + 2 * k[1][j] + 2 * k[2][j] + k[3][j]);
    }
    *m_end = mu;
    for (int j = 0; j < J; j++) *m_end += al[j] * y[j];
    return y[J];
}

START_TEST(test_hawkes_rate)
{
    const double mu = 0.35, al[2] = {0.45, 0.3}, be[2] = {1.7, 13.5}, T = 150;
    nf_tpp_process *p = make("hawkes", "mu=0.35, alpha=0.45:0.3, beta=1.7:13.5");
    nf_rng *rng = nf_rng_alloc(5, 0);
    nf_tpp_sim sim;
    OK(nf_tpp_simulate(&sim, p, rng, 1000, 0, T, 0));
    double mean, var, m_end, want = hawkes_expected_count(mu, 2, al, be, T, &m_end);
    count_moments(&sim, &mean, &var);
    /* the ODE's stationary limit is mu / (1 - sum alpha) */
    ck_assert_msg(fabs(m_end - mu / (1 - 0.75)) < 1e-6, "mean intensity at T %g, expected %g", m_end, mu / 0.25);
    ck_assert_msg(fabs(mean - want) < 4 * sqrt(var / sim.n_seq), "hawkes mean count %g, expected %g (se %g)", mean,
                  want, sqrt(var / sim.n_seq));
    /* long-run rate: fixed counts of 4000 events end near 4000 (1 - sum alpha) / mu */
    nf_tpp_sim_free(&sim);
    OK(nf_tpp_simulate(&sim, p, rng, 50, 0, INFINITY, 4000));
    double rate = 0;
    for (size_t i = 0; i < sim.n_seq; i++) rate += 4000 / sim.t_end[i] / sim.n_seq;
    ck_assert_msg(fabs(rate / (mu / 0.25) - 1) < 0.03, "hawkes long-run rate %g, expected %g", rate, mu / 0.25);
    nf_tpp_sim_free(&sim);
    nf_tpp_process_free(p);
    nf_rng_free(rng);
}
END_TEST

/* Intervals of a log-normal renewal process: mean, sd, and the mean and sd of log tau (m, s). */
START_TEST(test_renewal_moments)
{
    const double mean = 1.7, sd = 0.9;
    nf_tpp_process *p = make("renewal", "mean=1.7, sd=0.9");
    nf_rng *rng = nf_rng_alloc(23, 0);
    nf_tpp_sim sim;
    OK(nf_tpp_simulate(&sim, p, rng, 20, -2.0, INFINITY, 2000));
    size_t N = sim.n_events;
    double a = 0, b = 0, la = 0, lb = 0;
    for (size_t i = 0; i < sim.n_seq; i++)
        for (int64_t k = sim.offsets[i]; k < sim.offsets[i + 1]; k++) {
            double tau = sim.times[k] - (k > sim.offsets[i] ? sim.times[k - 1] : sim.t_start[i]);
            a += tau, b += tau * tau, la += log(tau), lb += log(tau) * log(tau);
        }
    a /= N, b = sqrt(b / N - a * a), la /= N, lb = sqrt(lb / N - la * la);
    double s = sqrt(log1p(sd * sd / (mean * mean))), m = log(mean) - 0.5 * s * s;
    ck_assert_msg(fabs(a - mean) < 4 * sd / sqrt((double)N), "interval mean %g, expected %g", a, mean);
    ck_assert_msg(fabs(b / sd - 1) < 0.05, "interval sd %g, expected %g", b, sd);
    ck_assert_msg(fabs(la - m) < 4 * s / sqrt((double)N), "log-interval mean %g, expected %g", la, m);
    ck_assert_msg(fabs(lb / s - 1) < 4 / sqrt(2.0 * N), "log-interval sd %g, expected %g", lb, s);
    nf_tpp_sim_free(&sim);
    nf_tpp_process_free(p);
    nf_rng_free(rng);
}
END_TEST

/* ---- the five shared sets ------------------------------------------------------------------------ */

START_TEST(test_shared_sets)
{
    const char *dir = getenv("NF_TEST_DATA") ? getenv("NF_TEST_DATA") : "tests/data";
    char path[512];
    snprintf(path, sizeof path, "%s/tpp/hawkes1.npy", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "check_tpp_process: SKIPPED the true-NLL test: %s is absent (copy "
                        "../shared/data/tpp/*.npy into %s/tpp)\n", path, dir);
        return;
    }
    fclose(f);
    for (int i = 0; nf_tpp_presets[i].name; i++) {
        const nf_tpp_preset *pr = &nf_tpp_presets[i];
        snprintf(path, sizeof path, "%s/tpp/%s.npy", dir, pr->name);
        nf_table t;
        OK(nf_import_npy(path, &t));
        ck_assert(t.n == 64 && t.d == 1024);
        nf_source *s;
        OK(nf_sequences_from_matrix(&s, pr->name, t.x, t.n, t.d));
        nf_tpp_process *p = make(pr->name, NULL);
        double total, total_w;
        size_t ne;
        OK(nf_tpp_source_log_lik(p, s, NF_TPP_TO_LAST_EVENT, NULL, &total, &ne));
        OK(nf_tpp_source_log_lik(p, s, NF_TPP_WINDOW, NULL, &total_w, NULL));   /* the window ends there */
        double nll = -total / (double)ne;
        fprintf(stderr, "check_tpp_process: %-16s NLL per event %.6f (README %.3f)\n", pr->name, nll, pr->readme_nll);
        ck_assert_uint_eq(ne, 64 * 1024);
        ck_assert_msg(fabs(nll - pr->readme_nll) < 5e-4, "%s: NLL per event %.6f, README %.3f", pr->name, nll,
                      pr->readme_nll);
        ck_assert(fabs(total_w - total) <= 1e-12 * fabs(total));
        /* fresh draws of the same process: 64 x 1024 events whose NLL per event is within 4 standard
         * errors (over sequences) of the README's */
        nf_rng *rng = nf_rng_alloc(100 + (uint64_t)i, 0);
        nf_tpp_sim sim;
        OK(nf_tpp_simulate(&sim, p, rng, 64, 0, INFINITY, 1024));
        double a = 0, b = 0;
        for (size_t k = 0; k < sim.n_seq; k++) a -= sim.log_lik[k] / 1024, b += sim.log_lik[k] * sim.log_lik[k] / (1024.0 * 1024);
        a /= sim.n_seq;
        double se = sqrt((b / sim.n_seq - a * a) / (sim.n_seq - 1));
        ck_assert_msg(fabs(a - pr->readme_nll) < 4 * se + 1e-3, "%s: simulated NLL per event %.4f (se %.4f), README %.3f",
                      pr->name, a, se, pr->readme_nll);
        nf_tpp_sim_free(&sim);
        nf_rng_free(rng);
        nf_tpp_process_free(p);
        nf_source_free(s);
        nf_table_free(&t);
    }
}
END_TEST

/* ---- registry, simulation layout, reproducibility, errors ---------------------------------------- */

START_TEST(test_registry_and_layout)
{
    int n = 0;
    for (; nf_tpp_process_types[n]; n++) {
        const nf_tpp_process_type *t = nf_tpp_process_types[n];
        ck_assert_ptr_eq(nf_tpp_process_type_find(t->name), t);
        nf_tpp_process_free(make(t->name, NULL));
    }
    ck_assert_int_eq(n, 6);
    ck_assert_ptr_eq(nf_tpp_process_type_find("self_correcting"), &nf_tpp_self_correcting);
    ck_assert_ptr_eq(nf_tpp_process_type_find("nonstationary_renewal"), &nf_tpp_nonstationary_renewal);
    for (int i = 0; nf_tpp_presets[i].name; i++) {
        nf_tpp_process *p = make(nf_tpp_presets[i].name, NULL);
        ck_assert_str_eq(p->type->name, nf_tpp_presets[i].type);
        nf_tpp_process_free(p);
    }
    /* given options override a preset's */
    nf_tpp_process *p = make("hawkes1", "mu=0.3"), *q = make("hawkes", "mu=0.3,alpha=0.8:0,beta=1:20");
    const double t[3] = {0.3, 0.9, 2.2};
    double a, b;
    OK(nf_tpp_log_lik(p, 3, t, 0, 3, NF_TPP_WINDOW, &a));
    OK(nf_tpp_log_lik(q, 3, t, 0, 3, NF_TPP_WINDOW, &b));
    ck_assert(a == b);
    nf_tpp_process_free(p);
    nf_tpp_process_free(q);

    /* window layout, and the same seed draws the same sequences */
    p = make("hawkes2", NULL);
    nf_tpp_sim s1, s2;
    nf_rng *r1 = nf_rng_alloc(8, 0), *r2 = nf_rng_alloc(8, 0);
    OK(nf_tpp_simulate(&s1, p, r1, 7, 2.5, 40, 0));
    OK(nf_tpp_simulate(&s2, p, r2, 7, 2.5, 40, 0));
    ck_assert(s1.offsets[0] == 0 && (size_t)s1.offsets[7] == s1.n_events && s1.n_events == s2.n_events);
    ck_assert(memcmp(s1.times, s2.times, s1.n_events * sizeof *s1.times) == 0);
    ck_assert(memcmp(s1.log_lik, s2.log_lik, 7 * sizeof *s1.log_lik) == 0);
    for (int i = 0; i < 7; i++) {
        ck_assert(s1.offsets[i + 1] >= s1.offsets[i] && s1.t_start[i] == 2.5 && s1.t_end[i] == 40);
        for (int64_t k = s1.offsets[i]; k < s1.offsets[i + 1]; k++) ck_assert(s1.times[k] > 2.5 && s1.times[k] <= 40);
    }
    nf_tpp_sim_free(&s1);
    nf_tpp_sim_free(&s2);
    nf_tpp_sim_free(&s2);   /* twice is harmless */
    nf_tpp_sim_free(NULL);
    nf_rng_free(r1);
    nf_rng_free(r2);
    nf_tpp_process_free(p);
    nf_tpp_process_free(NULL);
}
END_TEST

static void expect_create_error(const char *name, const char *opts, const char *part)
{
    nf_tpp_process *p = (nf_tpp_process *)1;
    int rc = nf_tpp_process_create(&p, name, opts);
    ck_assert_msg(rc == NF_EINVAL, "%s(%s): expected NF_EINVAL, got %d", name, opts ? opts : "", rc);
    ck_assert_ptr_null(p);
    HAS(nf_strerror_last(), part);
}

START_TEST(test_errors)
{
    expect_create_error("hawks", NULL, "unknown point process 'hawks'");
    HAS(nf_strerror_last(), "hawkes, self-correcting");
    HAS(nf_strerror_last(), "hawkes2");
    expect_create_error("hawkes", "mu=0.2, gamma=3", "hawkes: unknown option 'gamma'");
    expect_create_error("hawkes", "mu=-1", "hawkes: option mu=-1: expected a number");
    expect_create_error("hawkes", "alpha=0.6:0.6, beta=1:2", "hawkes: the alphas sum to 1.2");
    expect_create_error("hawkes", "alpha=0.5, beta=1:2", "alpha has 1 entries and beta 2");
    expect_create_error("hawkes", "alpha=0.3, beta=1:x", "hawkes: option beta=1:x: expected 1 to 8 numbers");
    expect_create_error("hawkes", "alpha=0.1:0.1:0.1:0.1:0.1:0.1:0.1:0.1:0.1", "expected 1 to 8 numbers");
    expect_create_error("poisson", "rate=abc", "poisson: option rate=abc");
    expect_create_error("renewal", "sd=0", "renewal: option sd=0");
    expect_create_error("nonstationary-poisson", "b=1.5", "|b| = 1.5 is not below a = 1");
    expect_create_error("hawkes1", "delta=2", "hawkes: unknown option 'delta'");
    expect_create_error("poisson", "rate", "poisson: expected key=value");

    nf_tpp_process *p = make("hawkes", NULL);
    double ll;
    const double tie[4] = {0.5, 1.2, 1.2, 2.0}, back[3] = {0.5, 1.2, 0.9}, early[2] = {-0.1, 1.0};
    const double late[2] = {0.5, 3.5}, nan_t[2] = {0.5, NAN}, at0[1] = {0.0};
    ck_assert_int_eq(nf_tpp_log_lik(p, 4, tie, 0, 3, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 2: time 1.2 is not after the previous event's 1.2");
    HAS(nf_strerror_last(), "strictly increasing");
    ck_assert_int_eq(nf_tpp_log_lik(p, 3, back, 0, 3, NF_TPP_TO_LAST_EVENT, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 2: time 0.90000000000000002 is not after the previous event's 1.2");
    ck_assert_int_eq(nf_tpp_log_lik(p, 2, early, 0, 3, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 0: time -0.10000000000000001 is not after the window start 0");
    ck_assert_int_eq(nf_tpp_log_lik(p, 1, at0, 0, 3, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 0: time 0 is not after the window start 0");
    ck_assert_int_eq(nf_tpp_log_lik(p, 2, late, 0, 3, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 1: time 3.5 is after the window end 3");
    OK(nf_tpp_log_lik(p, 2, late, 0, 3, NF_TPP_TO_LAST_EVENT, &ll));   /* no window end then */
    ck_assert_int_eq(nf_tpp_log_lik(p, 2, nan_t, 0, 3, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "event 1: time nan is not finite");
    ck_assert_int_eq(nf_tpp_log_lik(p, 0, NULL, 2, 1, NF_TPP_WINDOW, &ll), NF_EDATA);
    HAS(nf_strerror_last(), "expected a finite end at or after the start");

    /* a source with a tie (allowed by the sequences format) names the source and the sequence */
    const int64_t off[3] = {0, 2, 5};
    const double times[5] = {0.4, 1.1, 0.7, 2.0, 2.0}, ts[2] = {0, 0}, te[2] = {3, 3};
    nf_source *s;
    OK(nf_source_sequences_wrap(&s, 2, off, times, ts, te, NULL, 0));
    snprintf(s->name, sizeof s->name, "ties.h5");
    ck_assert_int_eq(nf_tpp_source_log_lik(p, s, NF_TPP_WINDOW, NULL, &ll, NULL), NF_EDATA);
    HAS(nf_strerror_last(), "ties.h5: sequence 1 (hawkes): event 2: time 2 is not after the previous event's 2");

    /* simulation arguments */
    nf_rng *rng = nf_rng_alloc(1, 0);
    nf_tpp_sim sim;
    ck_assert_int_eq(nf_tpp_simulate(&sim, p, rng, 3, 0, 10, 100), NF_EINVAL);
    HAS(nf_strerror_last(), "both a window end (10) and 100 events per sequence");
    ck_assert_int_eq(nf_tpp_simulate(&sim, p, rng, 3, 0, INFINITY, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "expected a finite end");
    ck_assert_int_eq(nf_tpp_simulate(&sim, p, rng, 0, 0, 10, 0), NF_EINVAL);
    HAS(nf_strerror_last(), "expected at least 1");
    ck_assert_int_eq(nf_tpp_simulate(&sim, p, rng, 3, NAN, 10, 0), NF_EINVAL);
    /* an empty window is fine: no events, log-likelihood 0 */
    OK(nf_tpp_simulate(&sim, p, rng, 2, 5, 5, 0));
    ck_assert(sim.n_events == 0 && sim.log_lik[0] == 0 && sim.log_lik[1] == 0 && sim.times);
    nf_tpp_sim_free(&sim);
    nf_rng_free(rng);
    nf_source_free(s);
    nf_tpp_process_free(p);
}
END_TEST


/* Every type's defaults string is its built-in defaults: an instance made without options equals one
 * whose create() saw no options at all, and its options string names every parameter. */
START_TEST(test_defaults_string)
{
    const double t[4] = {0.3, 0.9, 2.2, 3.05};
    for (int i = 0; nf_tpp_process_types[i]; i++) {
        const nf_tpp_process_type *ty = nf_tpp_process_types[i];
        nf_tpp_process raw = {.type = ty};
        nf_opts o;
        nf_opts_init(&o, ty->name);
        OK(ty->create(&raw, &o));
        nf_tpp_process *p = make(ty->name, NULL);
        ck_assert_ptr_nonnull(ty->defaults);
        ck_assert_str_eq(p->options, ty->defaults);
        double a, b;
        OK(nf_tpp_log_lik(&raw, 4, t, 0.1, 4, NF_TPP_WINDOW, &a));
        OK(nf_tpp_log_lik(p, 4, t, 0.1, 4, NF_TPP_WINDOW, &b));
        ck_assert_msg(a == b, "%s: built-in defaults give %.17g, the defaults string %.17g", ty->name, a, b);
        ty->destroy(&raw);
        nf_tpp_process_free(p);
    }
    nf_tpp_process *p = make("hawkes1", "mu=0.3");
    ck_assert_str_eq(p->options, "mu=0.3,alpha=0.8:0,beta=1:20");
    nf_tpp_process_free(p);
}
END_TEST

/* Simulated sequences saved with their truth (nf_sequences_save_truth, what nf data make tpp-*
 * writes) load with a truth equal to the likelihood recomputed from the loaded events, in both
 * conventions, sequence by sequence. */
START_TEST(test_truth_file)
{
    const proc_case *c = &cases[_i];
    nf_tpp_process *p = make(c->name, c->opts);
    nf_rng *rng = nf_rng_alloc(31 + (uint64_t)_i, 0);
    nf_tpp_sim sim;
    OK(nf_tpp_simulate(&sim, p, rng, 5, 1.5, 30, 0));
    nf_source *w, *s;
    double ns[5];
    OK(nf_source_sequences_wrap(&w, 5, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0));
    OK(nf_tpp_source_log_lik(p, w, NF_TPP_TO_LAST_EVENT, ns, NULL, NULL));
    char dir[] = "/tmp/nf_tpptruth_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/seq.h5", dir);
    nf_sequences_truth tr = {.log_lik = sim.log_lik, .log_lik_no_survival = ns, .process = p->type->name,
                             .options = p->options, .generator = "test", .seed = 31};
    OK(nf_sequences_save_truth(path, 5, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0, &tr));
    OK(nf_source_sequences_load(&s, path));
    nf_sequences q = nf_source_sequences(s);
    nf_sequences_truth got = nf_source_sequences_truth(s);
    ck_assert_str_eq(got.process, p->type->name);
    ck_assert_str_eq(got.options, p->options);
    ck_assert_int_eq(got.seed, 31);
    for (size_t i = 0; i < 5; i++) {
        size_t n = (size_t)(q.offsets[i + 1] - q.offsets[i]);
        double a, b;
        OK(nf_tpp_log_lik(p, n, q.times + q.offsets[i], q.t_start[i], q.t_end[i], NF_TPP_WINDOW, &a));
        OK(nf_tpp_log_lik(p, n, q.times + q.offsets[i], q.t_start[i], q.t_end[i], NF_TPP_TO_LAST_EVENT, &b));
        ck_assert_msg(got.log_lik[i] == a && got.log_lik_no_survival[i] == b,
                      "%s sequence %zu: stored %.17g / %.17g, recomputed %.17g / %.17g", c->name, i, got.log_lik[i],
                      got.log_lik_no_survival[i], a, b);
        ck_assert(n == 0 || b >= a); /* the survival term only lowers the likelihood */
    }
    nf_source_free(s);
    nf_source_free(w);
    unlink(path);
    rmdir(dir);
    nf_tpp_sim_free(&sim);
    nf_rng_free(rng);
    nf_tpp_process_free(p);
}
END_TEST

static Suite *tpp_suite(void)
{
    Suite *s = suite_create("tpp_process");
    TCase *tc = tcase_create("tpp_process");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_registry_and_layout);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_hand_values);
    tcase_add_loop_test(tc, test_vs_quadrature, 0, NCASES);
    tcase_add_loop_test(tc, test_time_rescaling, 0, NCASES);
    tcase_add_test(tc, test_time_rescaling_rejects);
    tcase_add_test(tc, test_ks_statistic_and_pvalue);
    tcase_add_test(tc, test_poisson_counts);
    tcase_add_test(tc, test_hawkes_rate);
    tcase_add_test(tc, test_renewal_moments);
    tcase_add_test(tc, test_shared_sets);
    tcase_add_test(tc, test_defaults_string);
    tcase_add_loop_test(tc, test_truth_file, 0, NCASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tpp_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
