/* tests/check_tpp.c - the "tpp" model kind (training/model_tpp.h): the loss's gradient through the
 * decoders, the mark head, the survival term and the GRU matches finite differences (double build);
 * ragged batches do not leak between sequences; trained on a Poisson process it reaches the
 * process's NLL per event; a model file round-trips. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "datasets/sequences.h"
#include "training/model_file.h"
#include "training/model_tpp.h"
#include "training/trainer.h"

/* n sequences of a Poisson process of the given rate on [0, t_end], marks cycling 0..K-1 (K 0: none). */
static nf_source *poisson(int n, double rate, double t_end, int K, uint64_t seed, int64_t **off, double **times,
                          double **ts, double **te, int64_t **marks)
{
    nf_rng *r = nf_rng_alloc(seed, 0);
    size_t cap = (size_t)(n * rate * t_end * 2 + 64), T = 0;
    *off = malloc((size_t)(n + 1) * sizeof **off);
    *times = malloc(cap * sizeof **times);
    *marks = K ? malloc(cap * sizeof **marks) : NULL;
    *ts = malloc((size_t)n * sizeof **ts);
    *te = malloc((size_t)n * sizeof **te);
    (*off)[0] = 0;
    for (int s = 0; s < n; s++) {
        double t = -log(nf_rng_uniform(r)) / rate;
        while (t < t_end && T < cap) {
            (*times)[T] = t;
            if (K) (*marks)[T] = (int64_t)(T % (size_t)K);
            T++;
            t += -log(nf_rng_uniform(r)) / rate;
        }
        (*off)[s + 1] = (int64_t)T;
        (*ts)[s] = 0;
        (*te)[s] = t_end;
    }
    nf_rng_free(r);
    nf_source *src;
    ck_assert_msg(nf_source_sequences_wrap(&src, (size_t)n, *off, *times, *ts, *te, *marks, K) == NF_OK, "%s",
                  nf_strerror_last());
    return src;
}

static void free_arrays(int64_t *off, double *times, double *ts, double *te, int64_t *marks)
{
    free(off), free(times), free(ts), free(te), free(marks);
}

START_TEST(gradient_matches_finite_differences)
{
#ifdef NF_DOUBLE
    int64_t *off, *marks;
    double *times, *ts, *te;
    nf_source *src = poisson(4, 1.3, 3.0, 3, 7, &off, &times, &ts, &te, &marks);
    for (int k = 0; k < 8; k++) { /* every decoder with a GRU, then with a tanh RNN */
        nf_tpp_config c;
        nf_tpp_config_init(&c);
        c.decoder = (nf_tpp_decoder_kind)(k % 4);
        c.rnn = (nf_tpp_rnn_kind)(k / 4);
        c.hidden = 4;
        c.components = 3;
        c.flow_layers = 1;
        c.flow_hidden = 4;
        c.mark_dim = 2;
        nf_model *m;
        ck_assert_msg(nf_model_tpp_create(&m, &c, src) == NF_OK, "%s", nf_strerror_last());
        nf_rng *r = nf_rng_alloc(3, (uint64_t)k);
        for (size_t i = 0; i < m->P->n; i++) m->P->value[i] += (nf_real)(0.1 * nf_rng_normal(r));
        nf_rng_free(r);
        size_t idx[4] = {0, 1, 2, 3};
        nf_batch b = {0};
        ck_assert_int_eq(nf_source_fetch(src, idx, 4, &b), NF_OK);
        double loss;
        nf_params_zero_grad(m->P);
        ck_assert_msg(m->type->loss(m, &b, NULL, &loss) == NF_OK, "%s", nf_strerror_last());
        nf_real *g = malloc(m->P->n * sizeof *g);
        memcpy(g, m->P->grad, m->P->n * sizeof *g);
        const double h = 1e-6;
        for (size_t j = 0; j < m->P->n; j++) {
            double lp, lm, keep = m->P->value[j];
            m->P->value[j] = keep + h;
            m->type->loss(m, &b, NULL, &lp);
            m->P->value[j] = keep - h;
            m->type->loss(m, &b, NULL, &lm);
            m->P->value[j] = keep;
            double fd = (lp - lm) / (2 * h);
            const char *slice = "?";
            for (size_t q = 0; q < m->P->nslices; q++)
                if (j >= m->P->slices[q].offset && j < m->P->slices[q].offset + m->P->slices[q].size)
                    slice = m->P->slices[q].name;
            ck_assert_msg(fabs(g[j] - fd) <= 1e-5 * (1 + fabs(fd)), "%s, %s: d/d%s (entry %zu): %g, fd %g",
                          nf_tpp_decoder_name(c.decoder), nf_tpp_rnn_name(c.rnn), slice, j, (double)g[j], fd);
        }
        free(g);
        nf_batch_free(&b);
        nf_model_free(m);
    }
    nf_source_free(src);
    free_arrays(off, times, ts, te, marks);
#endif
}
END_TEST

/* Changing one sequence changes no other sequence's log-likelihood in the same batch. */
START_TEST(ragged_batches_do_not_leak)
{
    int64_t *off, *marks;
    double *times, *ts, *te;
    nf_source *src = poisson(5, 2.0, 4.0, 2, 11, &off, &times, &ts, &te, &marks);
    nf_tpp_config c;
    nf_tpp_config_init(&c);
    c.hidden = 8;
    c.components = 4;
    nf_model *m;
    ck_assert_int_eq(nf_model_tpp_create(&m, &c, src), NF_OK);
    size_t idx[5] = {0, 1, 2, 3, 4};
    nf_batch b = {0};
    ck_assert_int_eq(nf_source_fetch(src, idx, 5, &b), NF_OK);
    double v1[5], v2[5];
    ck_assert_int_eq(m->type->eval(m, &b, NULL, v1), NF_OK);
    /* move sequence 2's second event and flip a mark of it */
    int64_t a = b.offsets[2] + 1;
    ck_assert(b.offsets[3] > a + 1);
    b.times[a] = 0.5 * (b.times[a - 1] + b.times[a]);
    b.marks[a] = 1 - b.marks[a];
    ck_assert_int_eq(m->type->eval(m, &b, NULL, v2), NF_OK);
    for (int s = 0; s < 5; s++) {
        if (s == 2) ck_assert_msg(v1[s] != v2[s], "sequence 2 should change");
        else ck_assert_msg(v1[s] == v2[s], "sequence %d changed: %.17g -> %.17g", s, v1[s], v2[s]);
    }
    nf_batch_free(&b);
    nf_model_free(m);
    nf_source_free(src);
    free_arrays(off, times, ts, te, marks);
}
END_TEST

/* A Poisson process of rate 1.7 has NLL per event 1 - log 1.7 = 0.4694 (events) plus the survival
 * term; the trained model's log-likelihood per sequence comes within 2% of the true one, for the
 * mixture and the exponential decoder.  The file round-trips. */
START_TEST(learns_a_poisson_process)
{
    int64_t *off, *marks;
    double *times, *ts, *te;
    const double rate = 1.7, t_end = 20;
    nf_source *src = poisson(300, rate, t_end, 0, 5, &off, &times, &ts, &te, &marks);
    nf_source *val, *train;
    ck_assert_int_eq(nf_source_split(src, 0.2, 3, &val, &train), NF_OK);
    for (int k = 0; k < 3; k += 2) {
        nf_tpp_config c;
        nf_tpp_config_init(&c);
        c.decoder = (nf_tpp_decoder_kind)k;
        c.hidden = 16;
        c.components = 8;
        nf_model *m;
        ck_assert_int_eq(nf_model_tpp_create(&m, &c, train), NF_OK);
        nf_train_config tc;
        nf_train_config_init(&tc);
        tc.batch = 32;
        tc.max_steps = 300;
        tc.optim.lr = 1e-2;
        tc.clip = 5;
        nf_schedule_init(&tc.schedule, NF_SCHED_COSINE, 1e-2);
        tc.schedule.total = 300;
        nf_trainer *t;
        ck_assert_msg(nf_trainer_create(&t, m, &tc, train, val) == NF_OK, "%s", nf_strerror_last());
        ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
        double mean;
        ck_assert_int_eq(nf_model_evaluate(m, val, 0, 64, NULL, &mean, NULL, NULL), NF_OK);
        /* true log-likelihood of a sequence on [0, T]: N log(rate) - rate T; its mean: rate T (log rate - 1) */
        double truth = rate * t_end * (log(rate) - 1);
        ck_assert_msg(fabs(mean - truth) < 0.02 * fabs(truth) + 0.5, "%s: mean log-likelihood %g, true %g",
                      nf_tpp_decoder_name(c.decoder), mean, truth);
        if (k == 0) {
            char dir[64] = "/tmp/nf_tpp_XXXXXX", path[128];
            ck_assert_ptr_nonnull(mkdtemp(dir));
            snprintf(path, sizeof path, "%s/m.h5", dir);
            ck_assert_int_eq(nf_model_save(path, m, NULL, t), NF_OK);
            nf_model *back;
            ck_assert_msg(nf_model_open(path, &back, NULL) == NF_OK, "%s", nf_strerror_last());
            double mean2;
            ck_assert_int_eq(nf_model_evaluate(back, val, 0, 64, NULL, &mean2, NULL, NULL), NF_OK);
            ck_assert(mean2 == mean);
            nf_model_free(back);
            unlink(path);
            rmdir(dir);
        }
        nf_trainer_free(t);
        nf_model_free(m);
    }
    nf_source_free(val);
    nf_source_free(train);
    nf_source_free(src);
    free_arrays(off, times, ts, te, marks);
}
END_TEST

/* --rnn is saved with the model: a tanh-RNN model reloads as one (same log-likelihoods), and a file
 * written before the field existed (no "rnn" attribute) loads as a GRU. */
START_TEST(rnn_kind_round_trips)
{
    int64_t *off, *marks;
    double *times, *ts, *te;
    nf_source *src = poisson(6, 1.1, 5.0, 2, 13, &off, &times, &ts, &te, &marks);
    char dir[64] = "/tmp/nf_tpp_XXXXXX", path[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.h5", dir);
    for (int k = 0; k < 2; k++) {
        nf_tpp_config c;
        nf_tpp_config_init(&c);
        c.rnn = (nf_tpp_rnn_kind)k;
        c.hidden = 6;
        c.components = 3;
        nf_model *m, *back;
        ck_assert_int_eq(nf_model_tpp_create(&m, &c, src), NF_OK);
        ck_assert_ptr_nonnull(nf_params_find(m->P, k ? "encoder.rnn.weight_hh" : "encoder.gru.weight_hh"));
        ck_assert_ptr_null(nf_params_find(m->P, k ? "encoder.gru.weight_hh" : "encoder.rnn.weight_hh"));
        ck_assert_int_eq(nf_model_save(path, m, NULL, NULL), NF_OK);
        ck_assert_msg(nf_model_open(path, &back, NULL) == NF_OK, "%s", nf_strerror_last());
        ck_assert_int_eq((int)nf_model_tpp_config(back)->rnn, k);
        double a, b;
        ck_assert_int_eq(nf_model_evaluate(m, src, 0, 4, NULL, &a, NULL, NULL), NF_OK);
        ck_assert_int_eq(nf_model_evaluate(back, src, 0, 4, NULL, &b, NULL, NULL), NF_OK);
        ck_assert(a == b);
        nf_model_free(back);
        if (k == 0) { /* an older file: drop the attribute */
            hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
            ck_assert(f >= 0);
            ck_assert(H5Adelete_by_name(f, "/model/tpp", "rnn", H5P_DEFAULT) >= 0);
            H5Fclose(f);
            ck_assert_msg(nf_model_open(path, &back, NULL) == NF_OK, "%s", nf_strerror_last());
            ck_assert_int_eq((int)nf_model_tpp_config(back)->rnn, NF_TPP_RNN_GRU);
            ck_assert_int_eq(nf_model_evaluate(back, src, 0, 4, NULL, &b, NULL, NULL), NF_OK);
            ck_assert(a == b);
            nf_model_free(back);
        }
        unlink(path);
        nf_model_free(m);
    }
    rmdir(dir);
    nf_source_free(src);
    free_arrays(off, times, ts, te, marks);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tpp");
    TCase *tc = tcase_create("tpp");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gradient_matches_finite_differences);
    tcase_add_test(tc, ragged_batches_do_not_leak);
    tcase_add_test(tc, learns_a_poisson_process);
    tcase_add_test(tc, rnn_kind_round_trips);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
