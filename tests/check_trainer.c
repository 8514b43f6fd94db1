/* tests/check_trainer.c - the trainer: learning, exact resume, divergence recovery, early stopping,
 * and model files. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distributions/target.h"
#include "tests/testutil.h"
#include "training/model_file.h"

#define SPEC "standardize, affine-coupling(hidden=16), permute(order=reverse), affine-coupling(hidden=16)"

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_trainer_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Correlated 2-D Gaussian data: x2 = 0.8 x1 + 0.6 e. */
static nf_real *make_data(size_t n, uint64_t seed)
{
    nf_real *x = malloc(n * 2 * sizeof(nf_real));
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < n; i++) {
        double a = nf_rng_normal(r), b = nf_rng_normal(r);
        x[2 * i] = (nf_real)(2.5 + 1.5 * a);
        x[2 * i + 1] = (nf_real)(-1.0 + 0.8 * a + 0.6 * b);
    }
    nf_rng_free(r);
    return x;
}

static nf_model *new_model(const nf_real *x, size_t n)
{
    nf_model *m;
    ck_assert_int_eq(nf_model_density_create(&m, SPEC, 2, 0, 42), NF_OK);
    ck_assert_int_eq(nf_flow_init_data(m->flow, x, NULL, (int)n), NF_OK);
    return m;
}

static nf_source *rows(const nf_real *x, size_t n)
{
    nf_source *s;
    ck_assert_int_eq(nf_source_rows_wrap(&s, x, NULL, n, 2, 0), NF_OK);
    return s;
}

/* A trainer over arrays x (n) and xv (nv, may be 0); the sources are freed with free_trainer. */
static nf_source *src_train, *src_val;
static int trainer_on(nf_trainer **t, nf_model *m, const nf_train_config *c, const nf_real *x, size_t n,
                      const nf_real *xv, size_t nv)
{
    src_train = rows(x, n);
    src_val = nv ? rows(xv, nv) : NULL;
    return nf_trainer_create(t, m, c, src_train, src_val);
}

static void free_trainer(nf_trainer *t)
{
    nf_trainer_free(t);
    nf_source_free(src_train);
    nf_source_free(src_val);
    src_train = src_val = NULL;
}

static void base_config(nf_train_config *c)
{
    nf_train_config_init(c);
    c->batch = 64;
    c->max_steps = 60;
    c->seed = 7;
    c->optim.lr = 3e-3;
    nf_schedule_init(&c->schedule, NF_SCHED_COSINE, 3e-3);
    c->schedule.total = 60;
    c->eval_every = 10;
    c->good_every = 7;
}

START_TEST(training_improves_likelihood)
{
    size_t n = 2000;
    nf_real *x = make_data(n, 1), *xv = make_data(500, 2);
    nf_model *m = new_model(x, n);
    nf_flow *f = m->flow;
    double before, after, se;
    ck_assert_int_eq(nf_evaluate(f, xv, NULL, 500, 256, &before, &se, NULL), NF_OK);
    nf_train_config c;
    base_config(&c);
    c.max_steps = 300;
    c.schedule.total = 300;
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, m, &c, x, n, xv, 500), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    ck_assert_int_eq(nf_evaluate(f, xv, NULL, 500, 256, &after, &se, NULL), NF_OK);
    /* true entropy of the data: log(2 pi e) + log(1.5 * 0.6) = 2.733; the model should approach it */
    ck_assert_msg(after > before + 0.3, "validation log-likelihood %g -> %g", before, after);
    ck_assert_msg(after > -2.733 - 0.15, "validation log-likelihood %g, true -2.733", after);
    ck_assert_int_eq(t->step, 300);
    ck_assert(t->hist.n >= 30);
    ck_assert_ptr_nonnull(strstr(t->stop_reason, "300 steps"));
    free_trainer(t);
    nf_model_free(m);
    free(x);
    free(xv);
}
END_TEST

typedef struct stopper {
    long at;
    volatile int flag;
    const char *path;
    nf_model *model;
    int stored_order; /* 1: save the epoch's order as indices, as checkpoints before 2026-12-05 did */
} stopper;

static void stop_at(void *user, const nf_train_progress *p)
{
    stopper *s = user;
    if (p->step >= s->at) s->flag = 1;
}

static int save_ckpt(void *user, nf_trainer *t)
{
    stopper *s = user;
    if (s->stored_order) t->order_stored = 1;
    return nf_model_save(s->path, s->model, NULL, t);
}

/* A run stopped at step 23 and resumed from its file ends bit-identical to an uninterrupted run
 * (with ema > 0 also its moving average of the weights, which validation reads).  The checkpoint
 * keeps the epoch's order as the random state that drew it; with stored_order as the n indices
 * themselves (the format before 2026-12-05), which must resume exactly too. */
static void resume_exact(double ema, int stored_order)
{
    make_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/model.h5", tmpdir);
    size_t n = 700; /* not a multiple of the batch: resume mid-epoch with a partial last batch */
    nf_real *x = make_data(n, 3), *xv = make_data(200, 4);
    nf_train_config c;
    base_config(&c);
    c.ema = ema;

    nf_model *ref = new_model(x, n);
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, ref, &c, x, n, xv, 200), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    free_trainer(t);

    nf_model *a = new_model(x, n);
    stopper s = {.at = 23, .path = path, .model = a, .stored_order = stored_order};
    nf_train_hooks h = {&s, stop_at, save_ckpt, &s.flag};
    ck_assert_int_eq(trainer_on(&t, a, &c, x, n, xv, 200), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, &h), NF_OK);
    ck_assert_int_eq(t->step, 23);
    ck_assert_ptr_nonnull(strstr(t->stop_reason, "request"));
    free_trainer(t);
    nf_model_free(a);

    nf_model *b;
    nf_train_config c2;
    ck_assert_int_eq(nf_model_open(path, &b, NULL), NF_OK);
    ck_assert_int_eq(nf_model_load_train_config(path, &c2), NF_OK);
    ck_assert_int_eq(c2.max_steps, 60);
    ck_assert_int_eq(c2.batch, 64);
    ck_assert(c2.ema == ema);
    if (ema > 0) { /* a checkpoint without the average cannot resume a run that keeps one */
        nf_model *o = new_model(x, n);
        char plain[320];
        snprintf(plain, sizeof plain, "%s/plain.h5", tmpdir);
        nf_train_config c0 = c;
        c0.ema = 0;
        ck_assert_int_eq(trainer_on(&t, o, &c0, x, n, xv, 200), NF_OK);
        ck_assert_int_eq(nf_trainer_step(t, NULL, NULL), NF_OK);
        ck_assert_int_eq(nf_model_save(plain, o, NULL, t), NF_OK);
        free_trainer(t);
        ck_assert_int_eq(trainer_on(&t, o, &c2, x, n, xv, 200), NF_OK);
        ck_assert_int_eq(nf_model_load_trainer(plain, t), NF_EFORMAT);
        ck_assert_msg(strstr(nf_strerror_last(), "moving average"), "%s", nf_strerror_last());
        free_trainer(t);
        nf_model_free(o);
        unlink(plain);
    }
    ck_assert_int_eq(trainer_on(&t, b, &c2, x, n, xv, 200), NF_OK);
    ck_assert_int_eq(nf_model_load_trainer(path, t), NF_OK);
    ck_assert_int_eq(t->step, 23);
    ck_assert_int_eq(t->order_stored, stored_order);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    ck_assert_int_eq(t->order_stored, 0); /* a new epoch's order is drawn, and saved, as a random state */
    ck_assert_int_eq(t->step, 60);
    ck_assert_int_eq(b->P->n, ref->P->n);
    ck_assert_msg(memcmp(b->P->value, ref->P->value, b->P->n * sizeof(nf_real)) == 0,
                  "resumed parameters differ from the uninterrupted run");
    ck_assert(memcmp(b->S->value, ref->S->value, b->S->n * sizeof(nf_real)) == 0);
    free_trainer(t);
    nf_model_free(b);
    nf_model_free(ref);
    free(x);
    free(xv);
    unlink(path);
    rmdir(tmpdir);
}

START_TEST(resume_is_exact)
{
    resume_exact(0, 0);
}
END_TEST

START_TEST(resume_is_exact_with_moving_average)
{
    resume_exact(0.95, 0);
}
END_TEST

START_TEST(resume_is_exact_from_stored_order)
{
    resume_exact(0, 1);
}
END_TEST

/* An order stored as indices is checked: a repeated index is refused, named. */
START_TEST(stored_order_is_checked)
{
    make_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/model.h5", tmpdir);
    size_t n = 300;
    nf_real *x = make_data(n, 3);
    nf_train_config c;
    base_config(&c);
    nf_model *a = new_model(x, n);
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, a, &c, x, n, NULL, 0), NF_OK);
    ck_assert_int_eq(nf_trainer_step(t, NULL, NULL), NF_OK);
    t->order_stored = 1;
    t->perm[5] = t->perm[4];
    ck_assert_int_eq(nf_model_save(path, a, NULL, t), NF_OK);
    free_trainer(t);
    ck_assert_int_eq(trainer_on(&t, a, &c, x, n, NULL, 0), NF_OK);
    ck_assert_int_eq(nf_model_load_trainer(path, t), NF_EFORMAT);
    ck_assert_msg(strstr(nf_strerror_last(), "checkpoint field /training/checkpoint/perm entry 5 is") &&
                      strstr(nf_strerror_last(), "(expected a permutation of 0..299)"),
                  "%s", nf_strerror_last());
    free_trainer(t);
    nf_model_free(a);
    free(x);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* A learning rate that blows up.  Every divergence restores the last good parameters and halves
 * the rate: with max_failures 5 the run recovers and completes; with max_failures 1 it stops at the
 * first divergence with an error, keeping finite, usable parameters. */
static void diverge(int max_failures, int expect_rc)
{
    size_t n = 512;
    nf_real *x = make_data(n, 5);
    nf_model *m = new_model(x, n);
    nf_flow *f = m->flow;
    nf_train_config c;
    base_config(&c);
    /* parameters of this size overflow the squared latents of the base density */
#ifdef NF_DOUBLE
    const double huge = 1e200;
#else
    const double huge = 1e30;
#endif
    c.optim.lr = huge;
    nf_schedule_init(&c.schedule, NF_SCHED_CONSTANT, huge);
    c.max_steps = 12;
    c.max_failures = max_failures;
    c.clip = 0;
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, m, &c, x, n, NULL, 0), NF_OK);
    int rc = nf_trainer_run(t, NULL);
    ck_assert_int_eq(rc, expect_rc);
    if (rc != NF_OK) ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "diverged 1 times"));
    ck_assert_msg(t->lr_scale <= 0.5, "lr_scale %g: no divergence was handled", t->lr_scale);
    for (size_t i = 0; i < f->P->n; i++) ck_assert(isfinite(f->P->value[i]));
    nf_real lp[8];
    int lrc = nf_flow_log_prob(f, lp, x, NULL, NULL, 8);
    ck_assert_msg(lrc == NF_OK, "after divergence (step %ld, failures %d): %s", t->step, t->failures, nf_strerror_last());
    free_trainer(t);
    nf_model_free(m);
    free(x);
}

START_TEST(divergence_recovers)
{
    diverge(5, NF_OK);
}
END_TEST

START_TEST(divergence_stops_after_max_failures)
{
    diverge(1, NF_ENONFINITE);
}
END_TEST

/* With a zero learning rate the validation score never improves: patience 2 stops after 3 evaluations. */
START_TEST(early_stopping)
{
    size_t n = 256;
    nf_real *x = make_data(n, 6), *xv = make_data(100, 7);
    nf_model *m = new_model(x, n);
    nf_train_config c;
    base_config(&c);
    c.optim.lr = 0;
    nf_schedule_init(&c.schedule, NF_SCHED_CONSTANT, 0);
    c.max_steps = 1000;
    c.eval_every = 1;
    c.patience = 2;
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, m, &c, x, n, xv, 100), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    ck_assert_int_eq(t->step, 3);
    ck_assert_ptr_nonnull(strstr(t->stop_reason, "early stopping"));
    ck_assert_int_eq(t->best_step, 1);
    free_trainer(t);
    nf_model_free(m);
    free(x);
    free(xv);
}
END_TEST

START_TEST(model_file_round_trip_and_refusals)
{
    make_tmpdir();
    char path[300], other[300];
    snprintf(path, sizeof path, "%s/m.h5", tmpdir);
    snprintf(other, sizeof other, "%s/data.h5", tmpdir);
    nf_real *x = make_data(64, 8);
    nf_model *m = new_model(x, 64);
    nf_flow *f = m->flow;
    for (size_t i = 0; i < f->P->n; i++) f->P->value[i] += (nf_real)(0.01 * (i % 7));
    nf_model_meta meta = {0};
    snprintf(meta.data_path, sizeof meta.data_path, "train.h5");
    snprintf(meta.data_dataset, sizeof meta.data_dataset, "/x");
    meta.n_train = 64;
    ck_assert_int_eq(nf_model_save(path, m, &meta, NULL), NF_OK);
    nf_flow *g;
    nf_model_meta m2;
    ck_assert_int_eq(nf_model_load(path, &g, &m2), NF_OK);
    ck_assert_str_eq(m2.data_path, "train.h5");
    ck_assert_str_eq(g->spec, SPEC);
    nf_real a[8], b[8];
    ck_assert_int_eq(nf_flow_log_prob(f, a, x, NULL, NULL, 8), NF_OK);
    ck_assert_int_eq(nf_flow_log_prob(g, b, x, NULL, NULL, 8), NF_OK);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    nf_flow_free(g);
    ck_assert_int_eq(nf_model_has_checkpoint(path), 0);
    nf_train_config c;
    ck_assert_int_eq(nf_model_load_train_config(path, &c), NF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "cannot be resumed"));
    /* a data file is not a model */
    nf_h5 *h;
    ck_assert_int_eq(nf_h5_create(&h, other, "nf-data", 1), NF_OK);
    ck_assert_int_eq(nf_h5_write_real(h, "/x", x, 64, 2), NF_OK);
    ck_assert_int_eq(nf_h5_commit(h), NF_OK);
    ck_assert_int_eq(nf_model_load(other, &g, NULL) == NF_OK, 0);
    ck_assert_ptr_nonnull(strstr(nf_strerror_last(), "nf-model"));
    nf_model_free(m);
    free(x);
    unlink(path);
    unlink(other);
    rmdir(tmpdir);
}
END_TEST

/* A model file written by nf 0.1.0 (format version 1, no kind, flow attributes on /model) loads as a
 * density model and gives the log-densities that version computed (tests/data/v1/README.md). */
START_TEST(v1_model_file_still_loads)
{
    const char *dir = getenv("NF_TEST_DATA") ? getenv("NF_TEST_DATA") : "tests/data";
    char path[512], probe[512], lp[512];
    snprintf(path, sizeof path, "%s/v1/model_v1.h5", dir);
    snprintf(probe, sizeof probe, "%s/v1/probe.h5", dir);
    snprintf(lp, sizeof lp, "%s/v1/lp.h5", dir);
    char kind[64];
    ck_assert_msg(nf_model_file_kind(path, kind, sizeof kind) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(kind, "density");
    nf_model *m;
    nf_model_meta meta;
    ck_assert_msg(nf_model_open(path, &m, &meta) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(m->type->kind, "density");
    ck_assert_str_eq(meta.data_path, "d.h5");
    nf_h5 *h;
    nf_real *x;
    double *want;
    size_t n, d, n2, d2;
    ck_assert_int_eq(nf_h5_open(&h, probe, NULL, 0), NF_OK);
    ck_assert_int_eq(nf_h5_read_real(h, "/x", &x, &n, &d), NF_OK);
    nf_h5_close(h);
    ck_assert_int_eq(nf_h5_open(&h, lp, NULL, 0), NF_OK);
    ck_assert_int_eq(nf_h5_read_double(h, "/logp", &want, &n2, &d2), NF_OK);
    nf_h5_close(h);
    ck_assert_int_eq(n, n2);
    nf_real got[64];
    ck_assert_int_eq(nf_flow_log_prob(m->flow, got, x, NULL, NULL, (int)n), NF_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) < 1e-4 * (1 + fabs(want[i])), "row %zu: %g, version 1 gave %g", i,
                      (double)got[i], want[i]);
    /* its checkpoint restores a trainer too */
    nf_train_config c;
    ck_assert_int_eq(nf_model_load_train_config(path, &c), NF_OK);
    nf_source *tr;
    nf_real *data = calloc(360 * 2, sizeof *data);
    ck_assert_int_eq(nf_source_rows_wrap(&tr, data, NULL, 360, 2, 0), NF_OK);
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, tr, NULL), NF_OK);
    ck_assert_msg(nf_model_load_trainer(path, t) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(t->step, 30);
    nf_trainer_free(t);
    nf_source_free(tr);
    free(data);
    free(x);
    free(want);
    nf_model_free(m);
}
END_TEST

/* A model of a kind without a flow of its own is refused by nf_model_load with the kind named;
 * a variational model round-trips through its file with its target. */
START_TEST(model_kinds_in_files)
{
    make_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/vi.h5", tmpdir);
    nf_model *m;
    ck_assert_msg(nf_model_variational_create(&m, "affine-coupling(hidden=8), permute(order=reverse), "
                                                  "affine-coupling(hidden=8)", "banana", "b=0.07", 3) == NF_OK,
                  "%s", nf_strerror_last());
    ck_assert_int_eq(nf_model_save(path, m, NULL, NULL), NF_OK);
    char kind[64];
    ck_assert_int_eq(nf_model_file_kind(path, kind, sizeof kind), NF_OK);
    ck_assert_str_eq(kind, "variational");
    nf_model *g;
    ck_assert_msg(nf_model_open(path, &g, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(g->type->kind, "variational");
    ck_assert_str_eq(nf_model_variational_target(g)->type->name, "banana");
    ck_assert_int_eq(g->P->n, m->P->n);
    ck_assert(memcmp(g->P->value, m->P->value, m->P->n * sizeof(nf_real)) == 0);
    nf_model_free(g);
    nf_flow *f;
    ck_assert_int_eq(nf_model_load(path, &f, NULL), NF_OK); /* its flow samples like any flow */
    ck_assert_int_eq(f->dim, 2);
    nf_flow_free(f);
    nf_model_free(m);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* Reverse KL on the banana (normalised: log Z = 0): the ELBO rises towards 0, log Z estimated by
 * importance sampling comes close to 0, and a run stopped and resumed ends bit-identical. */
START_TEST(variational_learns_and_resumes)
{
    make_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/vi.h5", tmpdir);
    const char *spec = "4*(affine-coupling(hidden=32), permute(order=reverse))";
    nf_train_config c;
    nf_train_config_init(&c);
    c.batch = 128;
    c.max_steps = 400;
    c.seed = 11;
    c.clip = 10;
    c.eval_items = 512;
    c.eval_every = 50;
    c.optim.lr = 3e-3;
    nf_schedule_init(&c.schedule, NF_SCHED_COSINE, 3e-3);
    c.schedule.total = 400;
    nf_model *ref;
    ck_assert_int_eq(nf_model_variational_create(&ref, spec, "banana", "", 5), NF_OK);
    nf_rng *r = nf_rng_alloc(99, 0);
    nf_vi_report before, after;
    ck_assert_int_eq(nf_model_variational_report(ref, 4000, 1000, r, &before), NF_OK);
    nf_trainer *t;
    ck_assert_msg(nf_trainer_create(&t, ref, &c, NULL, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_msg(nf_trainer_run(t, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(t->step, 400);
    ck_assert(t->hist.n == 8);
    nf_trainer_free(t);
    ck_assert_int_eq(nf_model_variational_report(ref, 4000, 1000, r, &after), NF_OK);
    ck_assert_msg(after.elbo > before.elbo + 1.0, "ELBO %g -> %g", before.elbo, after.elbo);
    ck_assert_msg(after.elbo > -0.25 && after.elbo <= 0.05, "ELBO %g (log Z = 0)", after.elbo);
    ck_assert_msg(fabs(after.log_z) < 0.1, "log Z estimate %g (true 0)", after.log_z);
    ck_assert_msg(after.ess_frac > 0.5, "effective sample size %g of n", after.ess_frac);
    ck_assert(after.log_z_true == 0);
    nf_rng_free(r);

    nf_model *a;
    ck_assert_int_eq(nf_model_variational_create(&a, spec, "banana", "", 5), NF_OK);
    stopper s = {.at = 137, .path = path, .model = a};
    nf_train_hooks h = {&s, stop_at, save_ckpt, &s.flag};
    ck_assert_int_eq(nf_trainer_create(&t, a, &c, NULL, NULL), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, &h), NF_OK);
    ck_assert_int_eq(t->step, 137);
    nf_trainer_free(t);
    nf_model_free(a);
    nf_model *b;
    nf_train_config c2;
    ck_assert_int_eq(nf_model_open(path, &b, NULL), NF_OK);
    ck_assert_int_eq(nf_model_load_train_config(path, &c2), NF_OK);
    ck_assert_int_eq(c2.eval_items, 512);
    ck_assert_int_eq(nf_trainer_create(&t, b, &c2, NULL, NULL), NF_OK);
    ck_assert_msg(nf_model_load_trainer(path, t) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    ck_assert_int_eq(t->step, 400);
    ck_assert_msg(memcmp(b->P->value, ref->P->value, b->P->n * sizeof(nf_real)) == 0,
                  "resumed variational parameters differ from the uninterrupted run");
    nf_trainer_free(t);
    nf_model_free(b);
    nf_model_free(ref);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* ---- a model trained in two stages ------------------------------------------------------------
 * A toy kind on 1-D rows x: stage "first" fits a to minimise (a - x)^2 / 2 (a -> mean x); stage
 * "second" fits b to minimise (b - a x)^2 / 2 with a held fixed, although its loss also sends a
 * gradient to a (which must not move it).  Registered like a kind defined outside the library. */
static int toy_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    (void)rng;
    nf_real *v = m->P->value, *g = m->P->grad;
    double s = 0, n = b->n;
    for (int i = 0; i < b->n; i++) {
        double x = b->x[i];
        if (m->stage == 0) {
            double r = v[0] - x;
            s += r * r / 2;
            g[0] += (nf_real)(r / n);
        } else {
            double r = v[1] - v[0] * x;
            s += r * r / 2;
            g[1] += (nf_real)(r / n);
            g[0] += (nf_real)(-x * r / n);
        }
    }
    *loss = s / n;
    return NF_OK;
}

static int toy_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    const nf_real *v = m->P->value;
    for (int i = 0; i < b->n; i++) {
        double r = m->stage == 0 ? v[0] - b->x[i] : v[1] - v[0] * b->x[i];
        values[i] = -r * r / 2;
    }
    return NF_OK;
}

static int toy_set_stage(nf_model *m, int stage)
{
    m->train_first = (size_t)stage; /* "toy.a" then "toy.b" */
    m->train_count = 1;
    return NF_OK;
}

static int toy_save(const nf_model *m, nf_h5 *f, const char *group)
{
    (void)m;
    NF_TRY(nf_h5_group(f, group));
    return nf_h5_attr_set_string(f, group, "toy", "two stages");
}

static int toy_build(nf_model *m)
{
    size_t off;
    m->P = nf_params_alloc();
    m->S = nf_params_alloc();
    if (!m->P || !m->S) return NF_ENOMEM;
    NF_TRY(nf_params_add(m->P, "toy.a", 1, &off));
    NF_TRY(nf_params_add(m->P, "toy.b", 1, &off));
    m->P->value[0] = (nf_real)0.3;
    m->P->value[1] = (nf_real)-0.2;
    return NF_OK;
}

static int toy_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)f, (void)group, (void)version;
    return toy_build(m);
}

static void toy_destroy(nf_model *m)
{
    nf_params_free(m->P);
    nf_params_free(m->S);
    m->P = m->S = NULL;
}

static const char *const toy_stages[] = {"first", "second"};
static const nf_model_type toy_type = {
    .kind = "toy-two-stage",
    .summary = "a test kind trained in two stages",
    .command = "tests/check_trainer",
    .source_kind = "rows",
    .metric = "log_likelihood",
    .loss = toy_loss,
    .eval = toy_eval,
    .save = toy_save,
    .load = toy_load,
    .destroy = toy_destroy,
    .n_stages = 2,
    .stage_names = toy_stages,
    .set_stage = toy_set_stage,
};

static nf_model *toy_new(void)
{
    nf_model *m = calloc(1, sizeof *m);
    m->type = &toy_type;
    ck_assert_int_eq(toy_build(m), NF_OK);
    return m;
}

typedef struct {
    nf_real a_at_switch;
    int switches;
    stopper st;
} toy_watch;

static int toy_checkpoint(void *user, nf_trainer *t)
{
    toy_watch *w = user;
    if (t->model->stage == 1 && t->step == 0 && t->n_done == 1) {
        w->a_at_switch = t->model->P->value[0];
        w->switches++;
    }
    return w->st.path ? nf_model_save(w->st.path, t->model, NULL, t) : NF_OK;
}

static void toy_progress(void *user, const nf_train_progress *p)
{
    toy_watch *w = user;
    if (w->st.at > 0 && w->st.model->stage == 1 && p->step >= w->st.at) w->st.flag = 1;
}

/* Two stages run one after the other: the first fits a, the second fits b with a held fixed;
 * stopped in the second stage and resumed, the run ends bit-identical to an uninterrupted one. */
START_TEST(training_in_stages)
{
    nf_model_type_register(&toy_type); /* NF_EINVAL when a previous test in this process did it */
    make_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/toy.h5", tmpdir);
    size_t n = 600;
    nf_real *x = malloc(n * sizeof *x), *xv = malloc(200 * sizeof *xv);
    nf_rng *r = nf_rng_alloc(4, 0);
    double mean = 0, mean2 = 0;
    for (size_t i = 0; i < n; i++) {
        x[i] = (nf_real)(2.385 + 0.9 * nf_rng_normal(r));
        mean += x[i] / (double)n;
        mean2 += (double)x[i] * x[i] / (double)n;
    }
    for (size_t i = 0; i < 200; i++) xv[i] = (nf_real)(2.385 + 0.9 * nf_rng_normal(r));
    nf_rng_free(r);
    nf_train_config c;
    nf_train_config_init(&c);
    c.batch = 100;
    c.max_steps = 400;
    c.eval_every = 40;
    c.seed = 5;
    c.optim.lr = 0.1;
    nf_schedule_init(&c.schedule, NF_SCHED_COSINE, 0.1);
    c.schedule.total = 400;

    nf_source *tr, *va;
    ck_assert_int_eq(nf_source_rows_wrap(&tr, x, NULL, n, 1, 0), NF_OK);
    ck_assert_int_eq(nf_source_rows_wrap(&va, xv, NULL, 200, 1, 0), NF_OK);
    nf_model *ref = toy_new();
    toy_watch w = {0};
    nf_train_hooks h = {&w, NULL, toy_checkpoint, NULL};
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, ref, &c, tr, va), NF_OK);
    ck_assert_msg(nf_trainer_run(t, &h) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(w.switches, 1);
    ck_assert_int_eq(ref->stage, 1);
    ck_assert_int_eq(t->n_done, 1);
    ck_assert_int_eq(t->step, 400);
    ck_assert_int_eq(t->done[0].n, t->hist.n);
    double a = ref->P->value[0], b = ref->P->value[1];
    ck_assert_msg(fabs(a - mean) < 0.05, "stage 1: a = %g, mean of x %g", a, mean);
    ck_assert_msg(ref->P->value[0] == w.a_at_switch, "a moved in stage 2: %g -> %g", (double)w.a_at_switch, a);
    (void)mean2;
    ck_assert_msg(fabs(b - a * mean) < 0.05, "stage 2: b = %g, expected about a mean(x) = %g", b, a * mean);
    nf_trainer_free(t);

    /* stopped at step 150 of the second stage, saved, reopened from the file, resumed */
    nf_model *m = toy_new();
    toy_watch w2 = {.st = {.at = 150, .path = path, .model = m}};
    nf_train_hooks h2 = {&w2, toy_progress, toy_checkpoint, &w2.st.flag};
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, tr, va), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, &h2), NF_OK);
    ck_assert_int_eq(m->stage, 1);
    ck_assert_int_eq(t->step, 150);
    nf_trainer_free(t);
    nf_model_free(m);
    nf_model *back;
    ck_assert_msg(nf_model_open(path, &back, NULL) == NF_OK, "%s", nf_strerror_last());
    ck_assert_str_eq(back->type->kind, "toy-two-stage");
    nf_train_config c2;
    ck_assert_int_eq(nf_model_load_train_config(path, &c2), NF_OK);
    ck_assert_int_eq(nf_trainer_create(&t, back, &c2, tr, va), NF_OK);
    ck_assert_msg(nf_model_load_trainer(path, t) == NF_OK, "%s", nf_strerror_last());
    ck_assert_int_eq(back->stage, 1);
    ck_assert_int_eq(t->n_done, 1);
    ck_assert_int_eq(t->step, 150);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    ck_assert_msg(back->P->value[0] == ref->P->value[0] && back->P->value[1] == ref->P->value[1],
                  "resumed (%g, %g) differs from uninterrupted (%g, %g)", (double)back->P->value[0],
                  (double)back->P->value[1], (double)ref->P->value[0], (double)ref->P->value[1]);
    nf_trainer_free(t);
    /* a command that works on flows, given this kind, names the kind and the command for it */
    nf_flow *fl;
    ck_assert_int_eq(nf_model_load(path, &fl, NULL), NF_EINVAL);
    ck_assert_msg(strstr(nf_strerror_last(), "'toy-two-stage'") && strstr(nf_strerror_last(), "tests/check_trainer"),
                  "%s", nf_strerror_last());
    nf_model_free(back);
    nf_model_free(ref);
    nf_source_free(tr);
    nf_source_free(va);
    free(x);
    free(xv);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* A caller can own the loop: nf_trainer_step repeated ends where nf_trainer_run does. */
START_TEST(public_step_equals_run)
{
    size_t n = 500;
    nf_real *x = make_data(n, 13), *xv = make_data(100, 14);
    nf_train_config c;
    base_config(&c);
    nf_model *a = new_model(x, n), *b = new_model(x, n);
    nf_trainer *t;
    ck_assert_int_eq(trainer_on(&t, a, &c, x, n, xv, 100), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK);
    long evals = t->hist.n;
    free_trainer(t);
    ck_assert_int_eq(trainer_on(&t, b, &c, x, n, xv, 100), NF_OK);
    int seen = 0;
    while (!nf_trainer_finished(t)) {
        double metric;
        int evaluated;
        ck_assert_int_eq(nf_trainer_step(t, &metric, &evaluated), NF_OK);
        ck_assert(isfinite(metric));
        seen += evaluated;
    }
    ck_assert_int_eq(t->step, 60);
    ck_assert_int_eq(seen, evals);
    /* nf_trainer_run also restores the best validation parameters at the end: compare the current */
    ck_assert_int_eq(nf_trainer_run(t, NULL), NF_OK); /* finished: only the restore and hooks */
    ck_assert(memcmp(a->P->value, b->P->value, a->P->n * sizeof(nf_real)) == 0);
    free_trainer(t);
    nf_model_free(a);
    nf_model_free(b);
    free(x);
    free(xv);
}
END_TEST

/* ---- the moving average of the weights (nf_train_config.ema) ---------------------------------- */

/* Data for the toy kind: n draws of N(2.385, 0.9^2). */
static nf_real *toy_data(size_t n, uint64_t seed)
{
    nf_real *x = malloc(n * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    for (size_t i = 0; i < n; i++) x[i] = (nf_real)(2.385 + 0.9 * nf_rng_normal(r));
    nf_rng_free(r);
    return x;
}

static void toy_config(nf_train_config *c, long steps, double ema)
{
    nf_train_config_init(c);
    c->batch = 20;
    c->max_steps = steps;
    c->seed = 3;
    c->optim.lr = 0.1;
    nf_schedule_init(&c->schedule, NF_SCHED_CONSTANT, 0.1);
    c->ema = ema;
}

/* The average after step k is sum_i d^(k-i) a_i / sum_i d^(k-i) over the raw weights a_1..a_k of
 * the steps so far (checked against that sum, recomputed from the recorded weights after every
 * step), entries a stage does not train keep their value, and a run that ends without a validation
 * set leaves each stage's average in the model: stage 1's average of a is the a stage 2 sees. */
START_TEST(moving_average_is_the_weighted_mean)
{
    nf_model_type_register(&toy_type);
    enum { STEPS = 40 };
    const double d = 0.9;
    size_t n = 400;
    nf_real *x = toy_data(n, 8);
    nf_source *tr;
    ck_assert_int_eq(nf_source_rows_wrap(&tr, x, NULL, n, 1, 0), NF_OK);
    nf_train_config c;
    toy_config(&c, STEPS, d);
    nf_model *m = toy_new();
    nf_real b0 = m->P->value[1];
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, tr, NULL), NF_OK);
    double raw[STEPS], avg = 0, max_gap = 0;
    for (int k = 0; k < STEPS; k++) {
        ck_assert_int_eq(nf_trainer_step(t, NULL, NULL), NF_OK);
        raw[k] = m->P->value[0];
        double num = 0, den = 0;
        for (int i = 0; i <= k; i++) {
            num += pow(d, k - i) * raw[i];
            den += pow(d, k - i);
        }
        avg = num / den;
        ck_assert_msg(fabs(t->ema_P->value[0] - avg) < 1e-5, "step %d: average %.8g, expected %.8g", k + 1,
                      (double)t->ema_P->value[0], avg);
        ck_assert(t->ema_P->value[1] == b0);
        max_gap = fmax(max_gap, fabs(raw[k] - avg));
    }
    ck_assert_msg(max_gap > 1e-3, "the raw weights and their average never differed (%g): a test that cannot fail",
                  max_gap);
    nf_trainer_free(t);
    nf_model_free(m);

    /* nf_trainer_run over both stages: the same batches, so stage 1 ends at the same average */
    m = toy_new();
    toy_watch w = {0};
    nf_train_hooks h = {&w, NULL, toy_checkpoint, NULL};
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, tr, NULL), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t, &h), NF_OK);
    ck_assert_int_eq(w.switches, 1);
    ck_assert_msg(fabs(w.a_at_switch - avg) < 1e-5, "stage 1 kept a = %.8g, its average is %.8g",
                  (double)w.a_at_switch, avg);
    ck_assert(m->P->value[0] == w.a_at_switch);
    ck_assert_int_eq(t->ema_count, STEPS);
    ck_assert(m->P->value[1] == t->ema_P->value[1]); /* stage 2 ended with its own average of b */
    nf_trainer_free(t);
    nf_model_free(m);
    nf_source_free(tr);
    free(x);
}
END_TEST

/* With a validation set, every validation scores the average (the value in the history is the
 * validation metric at the averaged weights, not at the raw ones), and the best average is what the
 * run keeps. */
START_TEST(validation_reads_the_moving_average)
{
    nf_model_type_register(&toy_type);
    size_t n = 400, nv = 300;
    nf_real *x = toy_data(n, 9), *xv = toy_data(nv, 10);
    nf_source *tr, *va;
    ck_assert_int_eq(nf_source_rows_wrap(&tr, x, NULL, n, 1, 0), NF_OK);
    ck_assert_int_eq(nf_source_rows_wrap(&va, xv, NULL, nv, 1, 0), NF_OK);
    nf_train_config c;
    toy_config(&c, 30, 0.8);
    c.eval_every = 3;
    c.max_steps = 30; /* inside stage 1: nf_trainer_step does not change stages */
    nf_model *m = toy_new();
    nf_trainer *t;
    ck_assert_int_eq(nf_trainer_create(&t, m, &c, tr, va), NF_OK);
    int evals = 0, differed = 0;
    double best = -INFINITY, best_a = NAN;
    for (int k = 0; k < 30; k++) {
        int evaluated;
        ck_assert_int_eq(nf_trainer_step(t, NULL, &evaluated), NF_OK);
        if (!evaluated) continue;
        double at_avg = 0, at_raw = 0, a = t->ema_P->value[0], r = m->P->value[0];
        for (size_t i = 0; i < nv; i++) {
            at_avg += -(a - xv[i]) * (a - xv[i]) / 2 / (double)nv;
            at_raw += -(r - xv[i]) * (r - xv[i]) / 2 / (double)nv;
        }
        double logged = t->hist.val_ll[t->hist.n - 1];
        ck_assert_msg(fabs(logged - at_avg) < 1e-6, "step %ld: validation %.9g, at the average %.9g (raw %.9g)",
                      t->step, logged, at_avg, at_raw);
        differed += fabs(at_raw - at_avg) > 1e-5;
        if (at_avg > best) best = at_avg, best_a = a;
        evals++;
    }
    ck_assert_int_eq(evals, 11); /* every 3 steps, and at the end of the epoch (step 20) */
    ck_assert_msg(differed > 0, "raw and averaged weights scored the same at every validation");
    ck_assert(t->best_P->value[0] == (nf_real)best_a);
    nf_trainer_free(t);
    nf_model_free(m);
    nf_source_free(tr);
    nf_source_free(va);
    free(x);
    free(xv);
}
END_TEST

/* ---- data-parallel training (nf_train_comm) with two threads standing in for two processes ---- */

typedef struct {
    nf_trainer *t;
    int rc;
} fake_rank;

static void *run_rank(void *arg)
{
    fake_rank *me = arg;
    me->rc = nf_trainer_run(me->t, NULL);
    return NULL;
}

/* Two processes, each computing its half of every batch, end with the parameters of one process
 * computing the whole batch (to rounding), and with the same validation history. */
START_TEST(two_processes_equal_one)
{
    size_t n = 900, nv = 300;
    nf_real *x = make_data(n, 3), *xv = make_data(nv, 4);
    nf_train_config c;
    base_config(&c);
    nf_model *ref = new_model(x, n);
    nf_trainer *t0;
    ck_assert_int_eq(trainer_on(&t0, ref, &c, x, n, xv, nv), NF_OK);
    ck_assert_int_eq(nf_trainer_run(t0, NULL), NF_OK);

    nf_test_pair net;
    ck_assert_int_eq(nf_test_pair_init(&net, ref->P->n), NF_OK);
    fake_rank ranks[2];
    nf_model *m[2];
    nf_source *tr[2], *va[2];
    for (int k = 0; k < 2; k++) {
        m[k] = new_model(x, n);
        tr[k] = rows(x, n);
        va[k] = rows(xv, nv);
        ranks[k] = (fake_rank){0};
        ck_assert_int_eq(nf_trainer_create(&ranks[k].t, m[k], &c, tr[k], va[k]), NF_OK);
        ck_assert_int_eq(nf_trainer_set_comm(ranks[k].t, &net.comm[k]), NF_OK);
    }
    nf_test_pair_run(run_rank, &ranks[0], &ranks[1]);
    const double tol = sizeof(nf_real) == sizeof(double) ? 1e-9 : 1e-4;
    double dmax = 0, amax = 0;
    for (size_t i = 0; i < ref->P->n; i++) {
        ck_assert(m[0]->P->value[i] == m[1]->P->value[i]); /* the processes agree exactly */
        dmax = fmax(dmax, fabs((double)m[0]->P->value[i] - ref->P->value[i]));
        amax = fmax(amax, fabs((double)ref->P->value[i]));
    }
    ck_assert_msg(dmax <= tol * amax, "relative difference %g to one process (tolerance %g)", dmax / amax, tol);
    ck_assert_msg(dmax > 0 || sizeof(nf_real) == sizeof(double), "float sums in another order should differ a little");
    for (int k = 0; k < 2; k++) {
        nf_trainer *t = ranks[k].t;
        ck_assert_int_eq(ranks[k].rc, NF_OK);
        ck_assert_int_eq(t->step, t0->step);
        ck_assert_int_eq(t->hist.n, t0->hist.n);
        for (long h = 0; h < t->hist.n; h++)
            ck_assert_msg(fabs(t->hist.val_ll[h] - t0->hist.val_ll[h]) <= 1e3 * tol * fabs(t0->hist.val_ll[h]),
                          "validation %ld: %g against %g", h, t->hist.val_ll[h], t0->hist.val_ll[h]);
        ck_assert_int_eq(t->best_step, t0->best_step);
    }
    /* a bad communicator is refused */
    nf_train_comm bad = net.comm[0];
    bad.rank = 2;
    ck_assert_int_eq(nf_trainer_set_comm(ranks[0].t, &bad), NF_EINVAL);
    for (int k = 0; k < 2; k++) {
        nf_trainer_free(ranks[k].t);
        nf_source_free(tr[k]);
        nf_source_free(va[k]);
        nf_model_free(m[k]);
    }
    nf_test_pair_destroy(&net);
    free_trainer(t0);
    nf_model_free(ref);
    free(x);
    free(xv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trainer");
    TCase *tc = tcase_create("trainer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, training_improves_likelihood);
    tcase_add_test(tc, resume_is_exact);
    tcase_add_test(tc, resume_is_exact_with_moving_average);
    tcase_add_test(tc, resume_is_exact_from_stored_order);
    tcase_add_test(tc, stored_order_is_checked);
    tcase_add_test(tc, divergence_recovers);
    tcase_add_test(tc, divergence_stops_after_max_failures);
    tcase_add_test(tc, early_stopping);
    tcase_add_test(tc, model_file_round_trip_and_refusals);
    tcase_add_test(tc, v1_model_file_still_loads);
    tcase_add_test(tc, model_kinds_in_files);
    tcase_add_test(tc, variational_learns_and_resumes);
    tcase_add_test(tc, training_in_stages);
    tcase_add_test(tc, public_step_equals_run);
    tcase_add_test(tc, moving_average_is_the_weighted_mean);
    tcase_add_test(tc, validation_reads_the_moving_average);
    tcase_add_test(tc, two_processes_equal_one);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
