/* tests/check_tpp_sample.c - what a point-process model gives besides its likelihood
 * (training/model_tpp.h, model_tpp_sample.c): simulated sequences have the right law (Poisson counts
 * from a constant intensity, the log-normal mixture's closed-form interval moments, mark
 * frequencies), are reproducible for a seed and continue histories; the conditional intensity and
 * the marginal interval density match closed forms; the compensators match the closed form and
 * rescale the model's own samples to Exp(1) (time rescaling) but not another model's; the mark
 * accuracy counts argmax hits. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ks.h"
#include "datasets/sequences.h"
#include "training/model_tpp.h"

#define OK(x) ck_assert_msg((x) == NF_OK, "%s", nf_strerror_last())

static nf_real *slice(nf_model *m, const char *name)
{
    const nf_param_slice *s = nf_params_find(m->P, name);
    ck_assert_msg(s != NULL, "no slice %s", name);
    return m->P->value + s->offset;
}

static size_t slice_size(nf_model *m, const char *name) { return nf_params_find(m->P, name)->size; }

/* A model without data: shift, scale, marks as given. */
static nf_model *model(nf_tpp_decoder_kind dec, int K, int num_marks, double shift, double scale, nf_tpp_rnn_kind rnn)
{
    nf_tpp_config c;
    nf_tpp_config_init(&c);
    c.decoder = dec;
    c.rnn = rnn;
    c.hidden = 8;
    c.components = K;
    c.mark_dim = 3;
    c.num_marks = num_marks;
    c.shift = shift;
    c.scale = scale;
    c.seed = 5;
    nf_model *m;
    OK(nf_model_tpp_create(&m, &c, NULL));
    return m;
}

/* exponential decoder with v = 0, b = log rate: lambda = rate whatever the history */
static nf_model *poisson_model(double rate, int num_marks)
{
    nf_model *m = model(NF_TPP_EXPONENTIAL, 1, num_marks, 0, 1, NF_TPP_RNN_GRU);
    memset(slice(m, "decoder.v"), 0, slice_size(m, "decoder.v") * sizeof(nf_real));
    slice(m, "decoder.b")[0] = (nf_real)log(rate);
    return m;
}

static void check_valid(const nf_tpp_samples *s)
{
    for (size_t i = 0; i < s->n; i++) {
        double prev = s->t_start[i];
        for (int64_t j = s->offsets[i]; j < s->offsets[i + 1]; j++) {
            ck_assert_msg(s->times[j] >= prev && s->times[j] <= s->t_end[i], "sequence %zu event %lld at %g", i,
                          (long long)j, s->times[j]);
            prev = s->times[j];
        }
    }
}

/* Counts of a constant intensity 1.9 on windows of length 4.7: Poisson(8.93), mean and variance. */
START_TEST(poisson_counts)
{
    const double rate = 1.9, len = 4.7;
    const size_t n = 4000;
    nf_model *m = poisson_model(rate, 0);
    double *ts = malloc(n * sizeof *ts), *te = malloc(n * sizeof *te);
    for (size_t i = 0; i < n; i++) ts[i] = 0.37 * (double)(i % 7), te[i] = ts[i] + len;
    nf_rng *r = nf_rng_alloc(11, 0);
    nf_tpp_samples s;
    OK(nf_model_tpp_simulate(m, n, ts, te, NULL, NULL, r, 0, &s));
    check_valid(&s);
    ck_assert_ptr_null(s.marks);
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) {
        double c = (double)(s.offsets[i + 1] - s.offsets[i]);
        sum += c, sum2 += c * c;
    }
    double mean = sum / n, var = sum2 / n - mean * mean, lam = rate * len;
    ck_assert_msg(fabs(mean - lam) < 4 * sqrt(lam / n), "mean count %g, expected %g", mean, lam);
    ck_assert_msg(fabs(var - lam) < 4 * sqrt((2 * lam * lam + lam) / n), "count variance %g, expected %g", var, lam);
    ck_assert_int_eq((int)s.source->n, (int)n);
    nf_tpp_samples_free(&s);
    nf_rng_free(r);
    free(ts), free(te);
    nf_model_free(m);
}
END_TEST

/* With the context weights at zero (as created) every interval is drawn from the unconditional
 * mixture: log tau = shift + scale y, y ~ sum_k w_k N(m_k, e^{2 s_k}), so with mu_k = shift + scale
 * m_k and sigma_k = scale e^{s_k}:  E tau = sum_k w_k exp(mu_k + sigma_k^2 / 2),  E log tau =
 * sum_k w_k mu_k,  Var log tau = sum_k w_k (sigma_k^2 + mu_k^2) - (E log tau)^2.  The first 8
 * intervals of each sequence (all complete) are iid from it. */
START_TEST(lognormmix_interval_moments)
{
    const double shift = -0.4, scale = 0.8;
    const double a[3] = {0.3, -0.5, 0.1}, mu[3] = {-0.9, 0.4, 1.2}, ls[3] = {-0.6, -0.2, -1.1};
    for (int rnn = 0; rnn < 2; rnn++) {
        nf_model *m = model(NF_TPP_LOGNORMMIX, 3, 0, shift, scale, (nf_tpp_rnn_kind)rnn);
        for (int k = 0; k < 3; k++) {
            slice(m, "decoder.mix.logits")[k] = (nf_real)a[k];
            slice(m, "decoder.mix.mean")[k] = (nf_real)mu[k];
            slice(m, "decoder.mix.log_scale")[k] = (nf_real)ls[k];
        }
        double z = 0, w[3];
        for (int k = 0; k < 3; k++) z += exp(a[k]);
        double e_tau = 0, e_log = 0, e_log2 = 0;
        for (int k = 0; k < 3; k++) {
            w[k] = exp(a[k]) / z;
            double mk = shift + scale * mu[k], sk = scale * exp(ls[k]);
            e_tau += w[k] * exp(mk + sk * sk / 2);
            e_log += w[k] * mk;
            e_log2 += w[k] * (sk * sk + mk * mk);
        }
        double v_log = e_log2 - e_log * e_log;
        const size_t n = 3000, per = 8;
        double *ts = calloc(n, sizeof *ts), *te = malloc(n * sizeof *te);
        for (size_t i = 0; i < n; i++) te[i] = 40 * e_tau;
        nf_rng *r = nf_rng_alloc(3, (uint64_t)rnn);
        nf_tpp_samples s;
        OK(nf_model_tpp_simulate(m, n, ts, te, NULL, NULL, r, 0, &s));
        check_valid(&s);
        double s1 = 0, s2 = 0, l1 = 0, l2 = 0;
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(s.offsets[i + 1] - s.offsets[i] >= (int64_t)per, "sequence %zu has %lld events", i,
                          (long long)(s.offsets[i + 1] - s.offsets[i]));
            double prev = 0;
            for (size_t j = 0; j < per; j++) {
                double t = s.times[s.offsets[i] + (int64_t)j], tau = t - prev;
                prev = t;
                s1 += tau, s2 += tau * tau, l1 += log(tau), l2 += log(tau) * log(tau);
            }
        }
        const double N = (double)(n * per);
        double mt = s1 / N, vt = s2 / N - mt * mt, ml = l1 / N, vl = l2 / N - ml * ml;
        ck_assert_msg(fabs(mt - e_tau) < 4 * sqrt(vt / N), "rnn %d: mean interval %g, closed form %g", rnn, mt, e_tau);
        ck_assert_msg(fabs(ml - e_log) < 4 * sqrt(vl / N), "rnn %d: mean log interval %g, closed form %g", rnn, ml,
                      e_log);
        ck_assert_msg(fabs(vl - v_log) < 0.05 * v_log, "rnn %d: variance of log interval %g, closed form %g", rnn, vl,
                      v_log);
        nf_tpp_samples_free(&s);
        nf_rng_free(r);
        free(ts), free(te);
        nf_model_free(m);
    }
}
END_TEST

/* Marks from a head with zero weights and biases log(0.2, 0.5, 0.3): those frequencies. */
START_TEST(mark_frequencies)
{
    nf_model *m = poisson_model(3.1, 3);
    memset(slice(m, "marks.weight"), 0, slice_size(m, "marks.weight") * sizeof(nf_real));
    const double p[3] = {0.2, 0.5, 0.3};
    for (int k = 0; k < 3; k++) slice(m, "marks.bias")[k] = (nf_real)log(p[k]);
    const size_t n = 500;
    double *ts = calloc(n, sizeof *ts), *te = malloc(n * sizeof *te);
    for (size_t i = 0; i < n; i++) te[i] = 6.0;
    nf_rng *r = nf_rng_alloc(8, 0);
    nf_tpp_samples s;
    OK(nf_model_tpp_simulate(m, n, ts, te, NULL, NULL, r, 0, &s));
    ck_assert_ptr_nonnull(s.marks);
    ck_assert_int_eq(s.num_marks, 3);
    double c[3] = {0};
    const double T = (double)s.offsets[n];
    for (int64_t j = 0; j < s.offsets[n]; j++) c[s.marks[j]]++;
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs(c[k] / T - p[k]) < 4 * sqrt(p[k] * (1 - p[k]) / T), "mark %d: frequency %g, expected %g", k,
                      c[k] / T, p[k]);
    nf_tpp_samples_free(&s);
    nf_rng_free(r);
    free(ts), free(te);
    nf_model_free(m);
}
END_TEST

/* The same seed gives the same sequences, another seed others; chunks of sequences (more than one
 * chunk of 4096) do not change the law's validity. */
START_TEST(deterministic_for_a_seed)
{
    nf_model *m = model(NF_TPP_LOGNORMMIX, 4, 2, 0.1, 0.9, NF_TPP_RNN_GRU);
    const size_t n = 5000;
    double *ts = calloc(n, sizeof *ts), *te = malloc(n * sizeof *te);
    for (size_t i = 0; i < n; i++) te[i] = 2.5 + 0.001 * (double)i;
    nf_tpp_samples s[3];
    for (int k = 0; k < 3; k++) {
        nf_rng *r = nf_rng_alloc(k == 2 ? 43 : 42, 0);
        OK(nf_model_tpp_simulate(m, n, ts, te, NULL, NULL, r, 0, &s[k]));
        nf_rng_free(r);
    }
    check_valid(&s[0]);
    ck_assert(s[0].offsets[n] > 0);
    ck_assert_int_eq((int)s[0].offsets[n], (int)s[1].offsets[n]);
    ck_assert(!memcmp(s[0].offsets, s[1].offsets, (n + 1) * sizeof(int64_t)));
    ck_assert(!memcmp(s[0].times, s[1].times, (size_t)s[0].offsets[n] * sizeof(double)));
    ck_assert(!memcmp(s[0].marks, s[1].marks, (size_t)s[0].offsets[n] * sizeof(int64_t)));
    ck_assert(s[0].offsets[n] != s[2].offsets[n] ||
              memcmp(s[0].times, s[2].times, (size_t)s[0].offsets[n] * sizeof(double)));
    for (int k = 0; k < 3; k++) nf_tpp_samples_free(&s[k]);
    free(ts), free(te);
    nf_model_free(m);
}
END_TEST

/* Continuing histories: the history comes first unchanged, nothing new before the history's t_end,
 * and (constant intensity, memoryless) Poisson counts after it; bad histories are refused. */
START_TEST(continues_histories)
{
    const double rate = 2.3;
    nf_model *m = poisson_model(rate, 2);
    /* two histories: events at 0.5, 1.25 (marks 1, 0) on [0.2, 3.0]; none on [1, 2] */
    int64_t off[3] = {0, 2, 2}, mk[2] = {1, 0};
    double times[2] = {0.5, 1.25}, hts[2] = {0.2, 1.0}, hte[2] = {3.0, 2.0};
    nf_source *h;
    OK(nf_source_sequences_wrap(&h, 2, off, times, hts, hte, mk, 2));
    const size_t per = 2000, n = 2 * per;
    size_t *hi = malloc(n * sizeof *hi);
    double *te = malloc(n * sizeof *te);
    for (size_t i = 0; i < n; i++) hi[i] = i % 2, te[i] = 7.0;
    nf_rng *r = nf_rng_alloc(21, 0);
    nf_tpp_samples s;
    OK(nf_model_tpp_simulate(m, n, NULL, te, h, hi, r, 0, &s));
    check_valid(&s);
    double cnt[2] = {0}, cnt2[2] = {0};
    for (size_t i = 0; i < n; i++) {
        const size_t q = hi[i];
        ck_assert(s.t_start[i] == hts[q] && s.t_end[i] == 7.0);
        const int64_t L = off[q + 1] - off[q];
        ck_assert(s.offsets[i + 1] - s.offsets[i] >= L);
        for (int64_t j = 0; j < L; j++) {
            ck_assert(s.times[s.offsets[i] + j] == times[off[q] + j]);
            ck_assert(s.marks[s.offsets[i] + j] == mk[off[q] + j]);
        }
        for (int64_t j = s.offsets[i] + L; j < s.offsets[i + 1]; j++) ck_assert(s.times[j] > hte[q]);
        double c = (double)(s.offsets[i + 1] - s.offsets[i] - L);
        cnt[q] += c, cnt2[q] += c * c;
    }
    for (int q = 0; q < 2; q++) {
        double mean = cnt[q] / per, lam = rate * (7.0 - hte[q]);
        ck_assert_msg(fabs(mean - lam) < 4 * sqrt(lam / per), "history %d: mean new events %g, expected %g", q, mean,
                      lam);
    }
    nf_tpp_samples_free(&s);
    /* a window that ends before the history does */
    te[2] = 2.5; /* history 0 ends at 3 */
    ck_assert_int_eq(nf_model_tpp_simulate(m, n, NULL, te, h, hi, r, 0, &s), NF_EINVAL);
    ck_assert_ptr_null(s.source);
    te[2] = 7.0;
    /* histories without marks for a model with marks */
    nf_source *h0;
    OK(nf_source_sequences_wrap(&h0, 2, off, times, hts, hte, NULL, 0));
    ck_assert_int_eq(nf_model_tpp_simulate(m, n, NULL, te, h0, hi, r, 0, &s), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "mark types") != NULL, "%s", nf_strerror_last());
    nf_source_free(h0);
    nf_source_free(h);
    nf_rng_free(r);
    free(hi), free(te);
    nf_model_free(m);
}
END_TEST

/* A history window that closed long after its last event (here: no events at all on [0, g], g at
 * the log-normal's 99.9th percentile) continues with a first interval drawn from p(tau | tau > g):
 * P(tau > x | tau > g) = S(x) / S(g) at the conditional law's quartiles.  (Drawing until tau > g
 * would need a thousand draws per sequence.) */
START_TEST(continues_after_a_long_gap)
{
    const double shift = 0.2, scale = 0.9, m0 = 0.1, s0 = -0.3;
    nf_model *m = model(NF_TPP_LOGNORMMIX, 1, 0, shift, scale, NF_TPP_RNN_GRU);
    slice(m, "decoder.mix.mean")[0] = (nf_real)m0;
    slice(m, "decoder.mix.log_scale")[0] = (nf_real)s0;
    const double mu = shift + scale * m0, sigma = scale * exp(s0), z999 = 3.090232306167813;
    const double g = exp(mu + sigma * z999);
    int64_t off[2] = {0, 0};
    double none = 0, hts = 0, hte = g;
    nf_source *h;
    OK(nf_source_sequences_wrap(&h, 1, off, &none, &hts, &hte, NULL, 0));
    const size_t n = 4000;
    size_t *hi = calloc(n, sizeof *hi);
    double *te = malloc(n * sizeof *te);
    for (size_t i = 0; i < n; i++) te[i] = 30 * g;
    nf_rng *r = nf_rng_alloc(17, 0);
    nf_tpp_samples s;
    OK(nf_model_tpp_simulate(m, n, NULL, te, h, hi, r, 0, &s));
    double *first = malloc(n * sizeof *first);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(s.offsets[i + 1] > s.offsets[i], "continuation %zu has no event", i);
        first[i] = s.times[s.offsets[i]];
        ck_assert(first[i] > g);
    }
    const double Sg = 0.5 * erfc(z999 / sqrt(2));
    const double q[3] = {0.75, 0.5, 0.25}; /* conditional survival levels */
    for (int k = 0; k < 3; k++) {
        /* x with S(x) = q S(g): bisection on the closed form */
        double lo = g, hi2 = 100 * g;
        for (int it = 0; it < 200; it++) {
            double mid = sqrt(lo * hi2), S = 0.5 * erfc((log(mid) - mu) / (sigma * sqrt(2)));
            if (S > q[k] * Sg) lo = mid;
            else hi2 = mid;
        }
        double frac = 0;
        for (size_t i = 0; i < n; i++) frac += first[i] > lo;
        frac /= (double)n;
        ck_assert_msg(fabs(frac - q[k]) < 4 * sqrt(q[k] * (1 - q[k]) / n), "P(tau > %g | tau > %g) = %g, expected %g",
                      lo, g, frac, q[k]);
    }
    nf_tpp_samples_free(&s);
    nf_rng_free(r);
    nf_source_free(h);
    free(hi), free(te), free(first);
    nf_model_free(m);
}
END_TEST

/* Windows that are empty or reversed, and runaway sequences, are errors. */
START_TEST(bad_windows)
{
    nf_model *m = poisson_model(50.0, 0);
    double ts[2] = {0, 1}, te[2] = {1, 1};
    nf_rng *r = nf_rng_alloc(1, 0);
    nf_tpp_samples s;
    ck_assert_int_eq(nf_model_tpp_simulate(m, 2, ts, te, NULL, NULL, r, 0, &s), NF_EINVAL);
    te[1] = 30;
    ck_assert_int_eq(nf_model_tpp_simulate(m, 2, ts, te, NULL, NULL, r, 100, &s), NF_EDATA);
    OK(nf_model_tpp_simulate(m, 2, ts, te, NULL, NULL, r, 0, &s));
    nf_tpp_samples_free(&s);
    nf_tpp_samples_free(NULL);
    nf_rng_free(r);
    nf_model_free(m);
}
END_TEST

/* One log-normal component with zero context weights: lambda*(t) is the log-normal hazard of the
 * time since the last event, and the marginal density is the log-normal density. */
static double lognormal_logpdf(double tau, double mu, double sigma)
{
    double u = (log(tau) - mu) / sigma;
    return -0.5 * u * u - log(sigma * tau) - 0.91893853320467274178;
}

START_TEST(intensity_and_density_closed_form)
{
    const double shift = 0.3, scale = 0.7, m0 = -0.35, s0 = -0.25;
    nf_model *m = model(NF_TPP_LOGNORMMIX, 1, 0, shift, scale, NF_TPP_RNN_GRU);
    slice(m, "decoder.mix.mean")[0] = (nf_real)m0;
    slice(m, "decoder.mix.log_scale")[0] = (nf_real)s0;
    const double mu = shift + scale * m0, sigma = scale * exp(s0);
    int64_t off[3] = {0, 3, 4};
    double times[4] = {1.0, 2.5, 2.75, 0.9}, ts[2] = {0.0, 0.4}, te[2] = {4.0, 2.0};
    nf_source *src;
    OK(nf_source_sequences_wrap(&src, 2, off, times, ts, te, NULL, 0));
    const double t[6] = {3.9, 0.5, 2.0, 1.0, 2.6, 0.0};
    const double last[6] = {2.75, 0.0, 1.0, 0.0, 2.5, NAN};
    double lam[6];
    OK(nf_model_tpp_intensity(m, src, 0, t, 6, lam));
    for (int g = 0; g < 6; g++) {
        if (isnan(last[g])) {
            ck_assert_msg(isnan(lam[g]), "t = %g: %g, expected NaN", t[g], lam[g]);
            continue;
        }
        double tau = t[g] - last[g], u = (log(tau) - mu) / sigma;
        double want = exp(lognormal_logpdf(tau, mu, sigma)) / (0.5 * erfc(u / sqrt(2)));
        ck_assert_msg(fabs(lam[g] - want) < 1e-4 * want, "t = %g: lambda %g, closed form %g", t[g], lam[g], want);
    }
    ck_assert_int_eq(nf_model_tpp_intensity(m, src, 2, t, 6, lam), NF_EINVAL);
    /* the marginal density, and its integral over tau by the trapezoid rule on log tau */
    const int G = 400;
    double tau[400], dens[400], integral = 0;
    for (int g = 0; g < G; g++) tau[g] = exp(mu - 8 * sigma + 16 * sigma * g / (G - 1));
    OK(nf_model_tpp_interval_density(m, src, tau, (size_t)G, 0, dens));
    for (int g = 0; g < G; g++) {
        double want = exp(lognormal_logpdf(tau[g], mu, sigma));
        ck_assert_msg(fabs(dens[g] - want) < 1e-4 * want + 1e-12, "tau = %g: %g, closed form %g", tau[g], dens[g],
                      want);
        if (g) integral += 0.5 * (dens[g] * tau[g] + dens[g - 1] * tau[g - 1]) * log(tau[g] / tau[g - 1]);
    }
    ck_assert_msg(fabs(integral - 1) < 1e-3, "the density integrates to %g", integral);
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* The exponential decoder's intensity is its rate wherever t falls (on an event included), and its
 * interval density the exponential density, from one context as from all; a tau <= 0 is refused. */
START_TEST(intensity_of_constant_rate)
{
    nf_model *m = poisson_model(1.37, 0);
    int64_t off[2] = {0, 2};
    double times[2] = {0.6, 1.9}, ts = 0, te = 3;
    nf_source *src;
    OK(nf_source_sequences_wrap(&src, 1, off, times, &ts, &te, NULL, 0));
    double t[5] = {0.3, 0.6, 1.0, 2.5, 3.0}, lam[5];
    OK(nf_model_tpp_intensity(m, src, 0, t, 5, lam));
    for (int g = 0; g < 5; g++) ck_assert_msg(fabs(lam[g] - 1.37) < 1e-5, "lambda(%g) = %g", t[g], lam[g]);
    double tau[2] = {0.5, 2.0}, dens[2];
    OK(nf_model_tpp_interval_density(m, src, tau, 2, 1, dens));
    for (int g = 0; g < 2; g++) ck_assert(fabs(dens[g] - 1.37 * exp(-1.37 * tau[g])) < 1e-5);
    tau[1] = -1;
    ck_assert_int_eq(nf_model_tpp_interval_density(m, src, tau, 2, 0, dens), NF_EINVAL);
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* The compensator of each interval, -log S(tau | history), in the closed form of a history-free
 * log-normal decoder (intervals 1.0, 1.5, 0.25 of the first sequence, 0.5 of the second: each
 * first one from t_start), the same for any batching. */
START_TEST(compensators_closed_form)
{
    const double shift = 0.3, scale = 0.7, m0 = -0.35, s0 = -0.25;
    nf_model *m = model(NF_TPP_LOGNORMMIX, 1, 0, shift, scale, NF_TPP_RNN_GRU);
    slice(m, "decoder.mix.mean")[0] = (nf_real)m0;
    slice(m, "decoder.mix.log_scale")[0] = (nf_real)s0;
    const double mu = shift + scale * m0, sigma = scale * exp(s0), tau[4] = {1.0, 1.5, 0.25, 0.5};
    int64_t off[3] = {0, 3, 4};
    double times[4] = {1.0, 2.5, 2.75, 0.9}, ts[2] = {0.0, 0.4}, te[2] = {4.0, 2.0}, lam[4];
    nf_source *src;
    OK(nf_source_sequences_wrap(&src, 2, off, times, ts, te, NULL, 0));
    for (int batch = 1; batch <= 2; batch++) {
        OK(nf_model_tpp_compensators(m, src, batch, lam));
        for (int e = 0; e < 4; e++) {
            double want = -log(0.5 * erfc((log(tau[e]) - mu) / sigma / sqrt(2)));
            ck_assert_msg(fabs(lam[e] - want) < 1e-4 * want, "event %d: %g, closed form %g", e, lam[e], want);
        }
    }
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

/* Every decoder parameter moved by N(0, sd^2), so that the next interval depends on the history,
 * but the flow's masked weights (the first layer's column of y, stored as zeros) kept at zero. */
static void perturb_decoder(nf_model *m, double sd, nf_rng *r)
{
    for (size_t i = 0; i < m->P->nslices; i++) {
        const nf_param_slice *sl = &m->P->slices[i];
        if (strncmp(sl->name, "decoder.", 8)) continue;
        const size_t len = strlen(sl->name);
        const int first_layer = len >= 10 && !strcmp(sl->name + len - 10, "fc0.weight");
        for (size_t j = 0; j < sl->size; j++)
            if (!first_layer || m->P->value[sl->offset + j] != 0)
                m->P->value[sl->offset + j] += (nf_real)(sd * nf_rng_normal(r));
    }
}

/* Time rescaling: the compensators of sequences drawn from a model are independent Exp(1) under
 * that model (KS p-value above 1e-3, mean within 4 standard errors of 1), for a history-dependent
 * log-normal mixture and flow decoder; under a model whose mixture means moved by 0.3 (intervals
 * about 25% longer) the same sequences are rejected (p < 1e-6). */
START_TEST(compensators_rescale_own_samples)
{
    const nf_tpp_decoder_kind kinds[2] = {NF_TPP_LOGNORMMIX, NF_TPP_FLOW};
    for (int k = 0; k < 2; k++) {
        nf_model *m = model(kinds[k], 3, 0, 0.2, 0.8, NF_TPP_RNN_GRU);
        nf_rng *r = nf_rng_alloc(23, (uint64_t)k);
        perturb_decoder(m, 0.3, r);
        enum { N = 8 }; /* long windows: each window's last event is biased short (it fell before t_end) */
        double ts[N], te[N];
        for (int i = 0; i < N; i++) ts[i] = 0, te[i] = 400;
        nf_tpp_samples s;
        OK(nf_model_tpp_simulate(m, N, ts, te, NULL, NULL, r, 0, &s));
        const size_t E = (size_t)s.offsets[N];
        ck_assert_msg(E > 1000, "%zu events", E);
        double *lam = malloc(E * sizeof *lam), sum = 0;
        OK(nf_model_tpp_compensators(m, s.source, 0, lam));
        for (size_t e = 0; e < E; e++) sum += lam[e], lam[e] = -expm1(-lam[e]);
        double p = nf_ks_pvalue(nf_ks_uniform(lam, E), E), mean = sum / (double)E;
        ck_assert_msg(p > 1e-3, "%s: KS p %g of its own samples' compensators", k ? "flow" : "lognormmix", p);
        ck_assert_msg(fabs(mean - 1) < 4 / sqrt((double)E), "%s: mean compensator %g", k ? "flow" : "lognormmix",
                      mean);
        if (kinds[k] == NF_TPP_LOGNORMMIX) {
            nf_real *mu = slice(m, "decoder.mix.mean");
            for (int j = 0; j < 3; j++) mu[j] += 0.3f;
            OK(nf_model_tpp_compensators(m, s.source, 0, lam));
            for (size_t e = 0; e < E; e++) lam[e] = -expm1(-lam[e]);
            p = nf_ks_pvalue(nf_ks_uniform(lam, E), E);
            ck_assert_msg(p < 1e-6, "a shifted model: KS p %g", p);
        }
        free(lam);
        nf_tpp_samples_free(&s);
        nf_rng_free(r);
        nf_model_free(m);
    }
}
END_TEST

/* A head whose weights are zero predicts the mark of its largest bias for every event: its accuracy
 * is the share of events with that mark (3 of 7 for mark 2, 2 of 7 for mark 0), whatever the
 * batching; data or a model without marks are refused. */
START_TEST(mark_accuracy_counts_argmax)
{
    nf_model *m = poisson_model(2.0, 3);
    memset(slice(m, "marks.weight"), 0, slice_size(m, "marks.weight") * sizeof(nf_real));
    slice(m, "marks.bias")[0] = 0.1f, slice(m, "marks.bias")[1] = -0.4f, slice(m, "marks.bias")[2] = 0.7f;
    int64_t off[4] = {0, 4, 4, 7}, marks[7] = {0, 2, 2, 1, 2, 0, 1};
    double times[7] = {0.1, 0.2, 0.4, 0.8, 0.3, 0.5, 0.6}, ts[3] = {0, 0, 0}, te[3] = {1, 1, 1};
    nf_source *src;
    OK(nf_source_sequences_wrap(&src, 3, off, times, ts, te, marks, 3));
    size_t correct, total;
    for (int batch = 1; batch <= 3; batch += 2) {
        OK(nf_model_tpp_mark_accuracy(m, src, batch, &correct, &total));
        ck_assert_int_eq((int)total, 7);
        ck_assert_int_eq((int)correct, 3);
    }
    slice(m, "marks.bias")[0] = 0.9f;
    OK(nf_model_tpp_mark_accuracy(m, src, 2, &correct, &total));
    ck_assert_int_eq((int)correct, 2);
    nf_source *nomarks;
    OK(nf_source_sequences_wrap(&nomarks, 3, off, times, ts, te, NULL, 0));
    ck_assert_int_eq(nf_model_tpp_mark_accuracy(m, nomarks, 2, &correct, &total), NF_EINVAL);
    nf_model *m0 = poisson_model(2.0, 0);
    ck_assert_int_eq(nf_model_tpp_mark_accuracy(m0, src, 2, &correct, &total), NF_EINVAL);
    nf_model_free(m0);
    nf_source_free(nomarks);
    nf_source_free(src);
    nf_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tpp_sample");
    TCase *tc = tcase_create("tpp_sample");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, poisson_counts);
    tcase_add_test(tc, lognormmix_interval_moments);
    tcase_add_test(tc, mark_frequencies);
    tcase_add_test(tc, deterministic_for_a_seed);
    tcase_add_test(tc, continues_histories);
    tcase_add_test(tc, continues_after_a_long_gap);
    tcase_add_test(tc, bad_windows);
    tcase_add_test(tc, intensity_and_density_closed_form);
    tcase_add_test(tc, intensity_of_constant_rate);
    tcase_add_test(tc, compensators_closed_form);
    tcase_add_test(tc, compensators_rescale_own_samples);
    tcase_add_test(tc, mark_accuracy_counts_argmax);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
