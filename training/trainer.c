/* training/trainer.c - the training loop: batches, divergence recovery, validation, early stopping. */
#include "training/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

void nf_train_config_init(nf_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->batch = 512;
    c->max_failures = 5;
    c->good_every = 100;
    c->seed = 1;
    nf_optim_init(&c->optim, NF_OPTIM_ADAM);
    nf_schedule_init(&c->schedule, NF_SCHED_CONSTANT, c->optim.lr);
}

static nf_params *clone_layout(const nf_params *src)
{
    nf_params *p = nf_params_alloc();
    if (!p) return NULL;
    for (size_t i = 0; i < src->nslices; i++) {
        size_t off;
        if (nf_params_add(p, src->slices[i].name, src->slices[i].size, &off) != NF_OK) {
            nf_params_free(p);
            return NULL;
        }
    }
    return p;
}

int nf_trainer_create(nf_trainer **out, nf_model *model, const nf_train_config *cfg, const nf_source *train,
                      const nf_source *val)
{
    *out = NULL;
    const nf_model_type *mt = model->type;
    if (mt->source_kind) {
        if (!train) return nf_error(NF_EDATA, "no training data (a %s model trains on %s)", mt->kind, mt->source_kind);
        if (train->n == 0) return nf_error(NF_EDATA, "no training data (expected at least one item)");
        const nf_source *srcs[2] = {train, val};
        for (int i = 0; i < 2; i++) {
            const nf_source *s = srcs[i];
            if (!s) continue;
            if (strcmp(s->type->kind, mt->source_kind))
                return nf_error(NF_EINVAL, "%s: %s data, but a %s model trains on %s", s->name, s->type->kind, mt->kind,
                                mt->source_kind);
            if (model->ctx_dim > 0 && s->ctx_dim != model->ctx_dim)
                return nf_error(NF_EINVAL, "%s: the model is conditional (context width %d) but the data has %s", s->name,
                                model->ctx_dim, s->ctx_dim ? "another context width" : "no context");
        }
    } else if (train || val) {
        return nf_error(NF_EINVAL, "a %s model trains without data (no source expected)", mt->kind);
    }
    if (cfg->batch < 1) return nf_error(NF_EINVAL, "batch size %d (expected at least 1)", cfg->batch);
    if (cfg->epochs <= 0 && cfg->max_steps <= 0 && cfg->max_seconds <= 0)
        return nf_error(NF_EINVAL, "training has no limit: set epochs, max_steps or max_seconds");
    if (!(cfg->ema >= 0 && cfg->ema < 1))
        return nf_error(NF_EINVAL, "moving-average decay %g (expected 0 <= d < 1; 0 turns it off)", cfg->ema);
    NF_TRY(nf_optim_check(&cfg->optim));
    NF_TRY(nf_schedule_check(&cfg->schedule));
    size_t n = train ? train->n : 0;
    if (n > UINT32_MAX)
        return nf_error(NF_EINVAL, "%zu training items: one run trains on at most %lu (split the data)", n,
                        (unsigned long)UINT32_MAX);
    nf_trainer *t = nf_calloc(1, sizeof *t, "trainer");
    if (!t) return NF_ENOMEM;
    t->cfg = *cfg;
    if (n && (size_t)t->cfg.batch > n) t->cfg.batch = (int)n;
    if (t->cfg.max_failures < 1) t->cfg.max_failures = 1;
    if (t->cfg.good_every < 1) t->cfg.good_every = 100;
    t->model = model;
    t->train = train;
    t->val = val && val->n ? val : NULL;
    t->n = n;
    t->nv = mt->source_kind ? (t->val ? t->val->n : 0) : (size_t)(cfg->eval_items > 0 ? cfg->eval_items : 0);
    t->best_val = -INFINITY;
    t->best_step = -1;
    t->lr_scale = 1.0;
    t->perm = nf_calloc(n ? n : 1, sizeof *t->perm, "training permutation");
    t->idx = nf_calloc((size_t)t->cfg.batch, sizeof(size_t), "batch indices");
    t->rng = nf_rng_alloc(cfg->seed, 0x73687566);
    t->order_state = t->rng ? nf_calloc(1, nf_rng_state_size(t->rng), "random state") : NULL;
    int rc = t->perm && t->idx && t->rng && t->order_state ? NF_OK : NF_ENOMEM;
    if (rc == NF_OK) nf_rng_state_get(t->rng, t->order_state);
    if (rc == NF_OK && !train) rc = nf_batch_reserve_rows(&t->batch, t->cfg.batch, 0, 0);
    if (rc == NF_OK) {
        t->best_P = clone_layout(model->P);
        t->best_S = clone_layout(model->S);
        t->good_P = clone_layout(model->P);
        t->good_S = clone_layout(model->S);
        if (cfg->ema > 0) t->ema_P = clone_layout(model->P);
        if (!t->best_P || !t->best_S || !t->good_P || !t->good_S || (cfg->ema > 0 && !t->ema_P)) rc = NF_ENOMEM;
    }
    if (rc != NF_OK) {
        nf_trainer_free(t);
        return nf_error(NF_ENOMEM, "out of memory creating the trainer");
    }
    rc = nf_model_set_stage(model, model->stage);
    if (rc != NF_OK) {
        nf_trainer_free(t);
        return rc;
    }
    nf_params_copy(t->good_P, model->P, 1);
    nf_params_copy(t->good_S, model->S, 0);
    nf_params_copy(t->best_P, model->P, 0);
    nf_params_copy(t->best_S, model->S, 0);
    if (t->ema_P) nf_params_copy(t->ema_P, model->P, 0);
    *out = t;
    return NF_OK;
}

int nf_trainer_set_comm(nf_trainer *t, const nf_train_comm *comm)
{
    if (comm && (comm->size < 1 || comm->rank < 0 || comm->rank >= comm->size || !comm->sum_real || !comm->sum_double))
        return nf_error(NF_EINVAL, "process %d of %d (expected 0 <= rank < size, and both sums)", comm ? comm->rank : 0,
                        comm ? comm->size : 0);
    nf_rng_free(t->noise);
    t->noise = NULL;
    t->comm = comm && comm->size > 1 ? comm : NULL;
    if (t->comm && !(t->noise = nf_rng_alloc(nf_mix64(t->cfg.seed ^ 0x6e6f697365ULL), 1 + (uint64_t)comm->rank)))
        return nf_error(NF_ENOMEM, "out of memory for a random stream");
    return NF_OK;
}

static void history_free(nf_history *h)
{
    free(h->step);
    free(h->epoch);
    free(h->train_ll);
    free(h->val_ll);
    free(h->lr);
    free(h->seconds);
    memset(h, 0, sizeof *h);
}

void nf_trainer_free(nf_trainer *t)
{
    if (!t) return;
    free(t->perm);
    free(t->order_state);
    free(t->idx);
    nf_rng_free(t->rng);
    nf_rng_free(t->noise);
    nf_batch_free(&t->batch);
    nf_params_free(t->best_P);
    nf_params_free(t->best_S);
    nf_params_free(t->good_P);
    nf_params_free(t->good_S);
    nf_params_free(t->ema_P);
    history_free(&t->hist);
    for (int k = 0; k < t->n_done; k++) history_free(&t->done[k]);
    free(t->done);
    free(t);
}

static int history_reserve(nf_history *h, long cap)
{
    if (cap <= h->cap) return NF_OK;
    long c = h->cap ? h->cap : 64;
    while (c < cap) c *= 2;
    long *s = realloc(h->step, c * sizeof *s);
    if (s) h->step = s;
    double **cols[] = {&h->epoch, &h->train_ll, &h->val_ll, &h->lr, &h->seconds};
    int ok = s != NULL;
    for (int i = 0; i < 5 && ok; i++) {
        double *p = realloc(*cols[i], c * sizeof *p);
        if (p) *cols[i] = p;
        else ok = 0;
    }
    if (!ok) return nf_error(NF_ENOMEM, "out of memory growing the training history");
    h->cap = c;
    return NF_OK;
}

static long steps_per_epoch(const nf_trainer *t) { return (long)((t->n + t->cfg.batch - 1) / t->cfg.batch); }

static long total_steps(const nf_trainer *t)
{
    long total = 0;
    if (t->cfg.epochs > 0 && t->n) total = t->cfg.epochs * steps_per_epoch(t);
    if (t->cfg.max_steps > 0 && (total == 0 || t->cfg.max_steps < total)) total = t->cfg.max_steps;
    return total;
}

/* The current stage has reached a limit. */
static int stage_finished(const nf_trainer *t)
{
    if (t->cfg.epochs > 0 && t->n && t->epoch >= t->cfg.epochs) return 1;
    if (t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps) return 1;
    if (t->cfg.max_seconds > 0 && t->seconds >= t->cfg.max_seconds) return 1;
    if (t->cfg.patience > 0 && t->nv && t->bad_evals >= t->cfg.patience) return 1;
    return 0;
}

int nf_trainer_finished(const nf_trainer *t)
{
    return stage_finished(t) && t->model->stage >= nf_model_stages(t->model) - 1;
}

/* ---- the moving average of the weights (cfg.ema; see trainer.h) ---- */

/* After a step: e += (theta - e) / w_k, w_k = (1 - d^k) / (1 - d), over the entries this stage trains
 * (the others do not move, and the average of a constant is itself). */
static void ema_update(nf_trainer *t)
{
    if (!t->ema_P) return;
    const double d = t->cfg.ema;
    t->ema_count++;
    const double w = (1 - pow(d, (double)t->ema_count)) / (1 - d);
    const nf_real a = (nf_real)(1 / w);
    nf_params tp = nf_model_trainable(t->model);
    const nf_real *p = tp.value;
    nf_real *e = t->ema_P->value + tp.base;
    for (size_t j = 0; j < tp.n; j++) e[j] += a * (p[j] - e[j]);
}

/* Exchange the model's weights and their average (a second call exchanges them back); nothing to do
 * before the first averaged step. */
static void ema_swap(nf_trainer *t)
{
    if (!t->ema_P || t->ema_count == 0) return;
    nf_real *p = t->model->P->value, *e = t->ema_P->value;
    for (size_t j = 0; j < t->model->P->n; j++) {
        nf_real v = p[j];
        p[j] = e[j];
        e[j] = v;
    }
}

/* A stage or run ends without a validation set to pick its best: it keeps the average. */
static void ema_keep(nf_trainer *t)
{
    if (t->ema_P && t->ema_count > 0) nf_params_copy(t->model->P, t->ema_P, 0);
}

/* The current stage is done: keep its best parameters, file its history, and start the next
 * stage with a fresh optimizer. */
static int next_stage(nf_trainer *t)
{
    nf_model *m = t->model;
    if (t->nv && t->best_step >= 0) {
        nf_params_copy(m->P, t->best_P, 0);
        nf_params_copy(m->S, t->best_S, 0);
    } else {
        ema_keep(t);
    }
    nf_history *d = realloc(t->done, (size_t)(t->n_done + 1) * sizeof *d);
    if (!d) return nf_error(NF_ENOMEM, "out of memory keeping the history of stage %d", m->stage);
    t->done = d;
    t->done[t->n_done++] = t->hist;
    memset(&t->hist, 0, sizeof t->hist);
    NF_TRY(nf_model_set_stage(m, m->stage + 1));
    if (m->type->stage_begin) NF_TRY(m->type->stage_begin(m, t->train));
    t->step = 0;
    t->epoch = 0;
    t->pos = 0;
    t->best_val = -INFINITY;
    t->best_step = -1;
    t->bad_evals = t->failures = 0;
    t->lr_scale = 1.0;
    t->seconds = 0;
    t->acc_ll = 0;
    t->acc_steps = 0;
    t->cfg.optim.t = 0;
    memset(m->P->m, 0, m->P->n * sizeof(nf_real));
    memset(m->P->v, 0, m->P->n * sizeof(nf_real));
    nf_params_copy(t->good_P, m->P, 1);
    nf_params_copy(t->good_S, m->S, 0);
    nf_params_copy(t->best_P, m->P, 0);
    nf_params_copy(t->best_S, m->S, 0);
    if (t->ema_P) nf_params_copy(t->ema_P, m->P, 0);
    t->ema_count = 0;
    return NF_OK;
}

int nf_evaluate(nf_flow *flow, const nf_real *x, const nf_real *ctx, size_t n, int batch, double *mean,
                double *stderr_mean, nf_real *logp_out)
{
    if (n == 0) return nf_error(NF_EDATA, "no samples to evaluate (expected at least one)");
    if (batch < 1) batch = 1024;
    nf_real *lp = logp_out ? NULL : malloc((size_t)(batch < (long)n ? batch : (long)n) * sizeof(nf_real));
    if (!logp_out && !lp) return nf_error(NF_ENOMEM, "out of memory evaluating");
    int training = flow->nb ? flow->b[0].training : 0;
    nf_flow_set_training(flow, 0);
    double s = 0, s2 = 0;
    int rc = NF_OK;
    for (size_t at = 0; at < n && rc == NF_OK; at += batch) {
        int b = (int)(n - at < (size_t)batch ? n - at : (size_t)batch);
        nf_real *out = logp_out ? logp_out + at : lp;
        rc = nf_flow_log_prob(flow, out, x + at * flow->dim, ctx ? ctx + at * flow->ctx_dim : NULL, NULL, b);
        if (rc != NF_OK) rc = nf_error_context(rc, "rows %zu to %zu", at, at + b - 1);
        for (int i = 0; rc == NF_OK && i < b; i++) {
            s += out[i];
            s2 += (double)out[i] * out[i];
        }
    }
    nf_flow_set_training(flow, training);
    free(lp);
    if (rc != NF_OK) return rc;
    *mean = s / n;
    double var = n > 1 ? (s2 - s * s / n) / (n - 1) : 0;
    if (stderr_mean) *stderr_mean = sqrt(var > 0 ? var / n : 0);
    return NF_OK;
}

/* This epoch's order: a Fisher-Yates shuffle of 0..n-1 drawn from the trainer's stream.  The
 * stream's state before the shuffle is kept (order_state): a checkpoint stores that instead of the
 * n indices, and resuming draws the same order again. */
static void shuffle_order(nf_trainer *t)
{
    for (size_t i = 0; i < t->n; i++) t->perm[i] = (uint32_t)i;
    for (size_t i = t->n; i > 1; i--) {
        size_t j = nf_rng_index(t->rng, i);
        uint32_t tmp = t->perm[i - 1];
        t->perm[i - 1] = t->perm[j];
        t->perm[j] = tmp;
    }
}

static void new_epoch_order(nf_trainer *t)
{
    t->order_stored = 0;
    nf_rng_state_get(t->rng, t->order_state);
    shuffle_order(t);
}

/* The next batch: b items of this epoch's order (a kind without data: b indices 0..b-1). */
static int next_batch(nf_trainer *t, int b)
{
    if (!t->train) {
        for (int i = 0; i < b; i++) t->batch.idx[i] = (size_t)i;
        t->batch.n = b;
        return NF_OK;
    }
    for (int i = 0; i < b; i++) t->idx[i] = (size_t)t->perm[t->pos + i];
    return t->train->type->fetch(t->train, t->idx, b, &t->batch);
}

/* The validation metric: the mean over the validation source, or over nv draws of a stream seeded
 * afresh each time (the same draws at every validation, so they compare the parameters alone). */
static int parallel_validation(nf_trainer *t, double *val);

static int validation_metric(nf_trainer *t, double *val)
{
    if (t->comm) return parallel_validation(t, val);
    if (t->train) return nf_model_evaluate(t->model, t->val, 0, 1024, NULL, val, NULL, NULL);
    nf_rng *r = nf_rng_alloc(t->cfg.seed, 0x76616c);
    if (!r) return nf_error(NF_ENOMEM, "out of memory for the validation stream");
    int rc = nf_model_evaluate(t->model, NULL, t->nv, 1024, r, val, NULL, NULL);
    nf_rng_free(r);
    return rc;
}

/* The validation metric of a parallel run: each process evaluates the items it holds (of a kind
 * without data: items rank, rank + size, ... of nv draws from its own stream), then the sums of the
 * values and of their count over all processes give the mean. */
static int parallel_validation(nf_trainer *t, double *val)
{
    enum { CHUNK = 1024 };
    const nf_train_comm *c = t->comm;
    size_t *idx = malloc(CHUNK * sizeof *idx);
    double *v = malloc(CHUNK * sizeof *v), sum[2] = {0, 0};
    nf_batch bt = {0};
    nf_rng *r = t->val ? NULL : nf_rng_alloc(t->cfg.seed ^ nf_mix64(0x76616c + (uint64_t)c->rank), 0x76616c);
    int rc = idx && v && (t->val || r) ? NF_OK : nf_error(NF_ENOMEM, "out of memory validating");
    if (rc == NF_OK && !t->val) rc = nf_batch_reserve_rows(&bt, CHUNK, 0, 0);
    nf_model_set_training(t->model, 0);
    for (size_t at = 0; rc == NF_OK && at < t->nv;) {
        int k = 0;
        for (; at < t->nv && k < CHUNK; at++)
            if (t->val && t->val->partial ? nf_source_owns(t->val, at) : (int)(at % (size_t)c->size) == c->rank)
                idx[k++] = at;
        if (k == 0) continue;
        if (t->val) {
            rc = nf_source_fetch(t->val, idx, k, &bt);
        } else {
            memcpy(bt.idx, idx, (size_t)k * sizeof *idx);
            bt.n = k;
        }
        if (rc == NF_OK) rc = t->model->type->eval(t->model, &bt, r, v);
        for (int i = 0; rc == NF_OK && i < k; i++) sum[0] += v[i];
        sum[1] += k;
    }
    free(idx), free(v);
    nf_batch_free(&bt);
    nf_rng_free(r);
    if (rc == NF_OK) rc = c->sum_double(c->user, sum, 2);
    if (rc == NF_OK) *val = sum[0] / sum[1];
    return rc;
}

/* Validation and the history entry; updates best parameters and the patience counter. */
static int validate(nf_trainer *t, double lr, nf_train_progress *p)
{
    double val = NAN;
    if (t->nv) {
        ema_swap(t); /* the average is what is validated and kept as the best */
        int rc = validation_metric(t, &val);
        if (rc == NF_OK && val > t->best_val) {
            t->best_val = val;
            t->best_step = t->step;
            t->bad_evals = 0;
            nf_params_copy(t->best_P, t->model->P, 0);
            nf_params_copy(t->best_S, t->model->S, 0);
        } else if (rc == NF_OK) {
            t->bad_evals++;
        }
        ema_swap(t);
        NF_TRY(rc);
    }
    nf_history *h = &t->hist;
    NF_TRY(history_reserve(h, h->n + 1));
    h->step[h->n] = t->step;
    h->epoch[h->n] = t->n ? t->epoch + (double)t->pos / t->n : 0;
    h->train_ll[h->n] = t->acc_steps ? t->acc_ll / t->acc_steps : NAN;
    h->val_ll[h->n] = val;
    h->lr[h->n] = lr;
    h->seconds[h->n] = t->seconds;
    h->n++;
    t->acc_ll = 0;
    t->acc_steps = 0;
    p->val_ll = val;
    p->evaluated = 1;
    return NF_OK;
}

/* The loss and gradient of the global batch of b items in a parallel run (see nf_train_comm): this
 * process's items, its mean loss L_r over w_r units, then W = sum w_r and sum w_r L_r over all
 * processes, the gradient scaled by w_r / W and summed in place.  A non-finite loss anywhere makes
 * the global loss non-finite, so every process sees the same divergence. */
static int parallel_loss(nf_trainer *t, int b, double *nll)
{
    nf_model *f = t->model;
    const nf_train_comm *c = t->comm;
    int k = 0, rc = NF_OK;
    for (int i = 0; i < b; i++) {
        size_t item = t->train ? (size_t)t->perm[t->pos + i] : (size_t)i;
        if (t->train && t->train->partial ? nf_source_owns(t->train, item) : i % c->size == c->rank) t->idx[k++] = item;
    }
    nf_params_zero_grad(f->P);
    double loss = 0, w = 0;
    if (k > 0) {
        if (t->train) {
            rc = t->train->type->fetch(t->train, t->idx, k, &t->batch);
        } else {
            memcpy(t->batch.idx, t->idx, (size_t)k * sizeof *t->idx);
            t->batch.n = k;
        }
        if (rc == NF_OK) rc = f->type->loss(f, &t->batch, t->noise, &loss);
        if (rc == NF_ENONFINITE) loss = NAN, rc = NF_OK;
        w = f->type->batch_weight ? f->type->batch_weight(f, &t->batch) : (double)k;
    }
    NF_TRY(rc);
    double sums[2] = {w, w > 0 ? w * loss : 0};
    NF_TRY(c->sum_double(c->user, sums, 2));
    const nf_real scale = (nf_real)(sums[0] > 0 ? w / sums[0] : 0);
    nf_real *g = f->P->grad;
    for (size_t j = 0; j < f->P->n; j++) g[j] *= scale;
    NF_TRY(c->sum_real(c->user, g, f->P->n));
    *nll = sums[0] > 0 ? sums[1] / sums[0] : NAN;
    return NF_OK;
}

/* One optimizer step, or a divergence handled by restoring the last good parameters. */
static int step_once(nf_trainer *t, double *ll, double *lr_used)
{
    nf_model *f = t->model;
    int b = t->n && t->n - t->pos < (size_t)t->cfg.batch ? (int)(t->n - t->pos) : t->cfg.batch;
    double nll = NAN;
    int rc;
    if (f->type->before_step) f->type->before_step(f);
    if (t->comm) {
        rc = parallel_loss(t, b, &nll);
    } else {
        NF_TRY(next_batch(t, b));
        nf_params_zero_grad(f->P);
        rc = f->type->loss(f, &t->batch, t->rng, &nll);
    }
    double lr = nf_schedule_lr(&t->cfg.schedule, (long)t->cfg.optim.t) * t->lr_scale;
    *lr_used = lr;
    int diverged = rc == NF_ENONFINITE || (rc == NF_OK && !isfinite(nll));
    nf_params tp = nf_model_trainable(f); /* the whole store, or the entries this stage trains */
    if (rc == NF_OK && !diverged) {
        double norm = nf_clip_grad_norm(&tp, t->cfg.clip);
        if (!isfinite(norm)) diverged = 1;
        else {
            /* These parameters just gave a finite loss and gradient: a known-good snapshot. */
            if (t->step % t->cfg.good_every == 0) {
                nf_params_copy(t->good_P, f->P, 1);
                nf_params_copy(t->good_S, f->S, 0);
            }
            rc = nf_optim_step(&t->cfg.optim, &tp, lr);
            if (rc == NF_OK) ema_update(t);
        }
        if (rc == NF_ENONFINITE) diverged = 1, rc = NF_OK;
    }
    if (rc != NF_OK && !diverged) return rc;
    if (t->n) t->pos += b;
    if (diverged) {
        t->failures++;
        nf_params_copy(f->P, t->good_P, 1);
        nf_params_copy(f->S, t->good_S, 0);
        t->lr_scale *= 0.5;
        if (t->failures >= t->cfg.max_failures) {
            snprintf(t->stop_reason, sizeof t->stop_reason, "diverged");
            return nf_error(NF_ENONFINITE,
                            "training diverged %d times in a row (non-finite loss or gradient at step %ld); "
                            "kept the last good parameters; try a smaller --lr or --clip",
                            t->failures, t->step);
        }
        *ll = NAN;
    } else {
        t->failures = 0;
        *ll = -nll;
        t->acc_ll += -nll;
        t->acc_steps++;
    }
    t->step++;
    return NF_OK;
}

/* Epoch bookkeeping and validation after a step; sets p->evaluated, p->val_ll. */
static int after_step(nf_trainer *t, double lr, nf_train_progress *p)
{
    int rc = NF_OK;
    if (t->n && t->pos >= t->n) {
        t->pos = 0;
        t->epoch++;
        rc = validate(t, lr, p);
    } else if (t->cfg.eval_every > 0 && t->step % t->cfg.eval_every == 0) {
        rc = validate(t, lr, p);
    }
    nf_model_set_training(t->model, 1);
    return rc;
}

int nf_trainer_step(nf_trainer *t, double *metric, int *evaluated)
{
    nf_train_progress p;
    memset(&p, 0, sizeof p);
    p.val_ll = NAN;
    double lr = 0, ll = NAN;
    nf_model_set_training(t->model, 1);
    if (t->n && t->pos == 0) new_epoch_order(t);
    NF_TRY(step_once(t, &ll, &lr));
    int rc = after_step(t, lr, &p);
    if (metric) *metric = ll;
    if (evaluated) *evaluated = p.evaluated;
    return rc;
}

int nf_trainer_run(nf_trainer *t, const nf_train_hooks *hooks)
{
    nf_train_hooks none = {0};
    if (!hooks) hooks = &none;
    nf_model *f = t->model;
    nf_model_set_training(f, 1);
    double started = nf_seconds(), base_seconds = t->seconds, recent = 0;
    long start_step = t->step, total = total_steps(t);
    int rc = NF_OK;
    t->stop_reason[0] = '\0';
    nf_train_progress p;
    for (;;) {
        int stop = hooks->stop && *hooks->stop;
        if (t->comm) { /* all processes stop together: on any one's request, at the mean elapsed time */
            double v[2] = {stop, t->seconds};
            if ((rc = t->comm->sum_double(t->comm->user, v, 2)) != NF_OK) break;
            stop = v[0] > 0;
            t->seconds = v[1] / t->comm->size;
        }
        if (nf_trainer_finished(t)) break;
        if (stop) {
            snprintf(t->stop_reason, sizeof t->stop_reason, "stopped on request");
            break;
        }
        if (stage_finished(t)) {
            if ((rc = next_stage(t)) != NF_OK) break;
            started = nf_seconds(), base_seconds = 0, start_step = 0, recent = 0;
            total = total_steps(t);
            if (hooks->checkpoint && (rc = hooks->checkpoint(hooks->user, t)) != NF_OK) break;
            continue;
        }
        if (t->n && t->pos == 0) new_epoch_order(t);
        memset(&p, 0, sizeof p);
        p.val_ll = NAN;
        double ll = NAN, lr = 0;
        rc = step_once(t, &ll, &lr);
        if (rc != NF_OK) break;
        t->seconds = base_seconds + (nf_seconds() - started);
        if (isfinite(ll)) recent = recent == 0 ? ll : 0.98 * recent + 0.02 * ll;
        rc = after_step(t, lr, &p);
        if (rc != NF_OK) break;
        if (hooks->progress) {
            double rate = (t->step - start_step) / fmax(t->seconds - base_seconds, 1e-9);
            p.step = t->step;
            p.total_steps = total;
            p.epoch = t->epoch;
            p.epochs = t->n ? t->cfg.epochs : 0;
            p.has_data = t->n > 0;
            p.train_ll = recent;
            p.metric = nf_model_metric(f);
            p.best_val = t->nv && isfinite(t->best_val) ? t->best_val : NAN;
            p.lr = lr;
            p.steps_per_sec = rate;
            p.seconds = t->seconds;
            p.eta_seconds = total > 0 && rate > 0 ? (total - t->step) / rate : NAN;
            if (t->cfg.max_seconds > 0) {
                double left = t->cfg.max_seconds - t->seconds;
                if (!isfinite(p.eta_seconds) || left < p.eta_seconds) p.eta_seconds = left > 0 ? left : 0;
            }
            hooks->progress(hooks->user, &p);
        }
        if (hooks->checkpoint && t->cfg.checkpoint_every > 0 && t->step % t->cfg.checkpoint_every == 0 &&
            !nf_trainer_finished(t)) {
            rc = hooks->checkpoint(hooks->user, t);
            if (rc != NF_OK) break;
        }
    }
    nf_model_set_training(f, 0);
    if (rc == NF_OK && !t->stop_reason[0]) {
        if (t->cfg.patience > 0 && t->nv && t->bad_evals >= t->cfg.patience)
            snprintf(t->stop_reason, sizeof t->stop_reason, "early stopping (no improvement in %d evaluations)",
                     t->cfg.patience);
        else if (t->cfg.epochs > 0 && t->n && t->epoch >= t->cfg.epochs)
            snprintf(t->stop_reason, sizeof t->stop_reason, "reached %d epochs", t->cfg.epochs);
        else if (t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps)
            snprintf(t->stop_reason, sizeof t->stop_reason, "reached %ld steps", t->cfg.max_steps);
        else if (t->cfg.max_seconds > 0 && t->seconds >= t->cfg.max_seconds)
            snprintf(t->stop_reason, sizeof t->stop_reason, "reached the time limit");
    }
    /* A run that ends (not a request to stop mid-way) keeps its best validation parameters. */
    if (rc == NF_OK && nf_trainer_finished(t) && t->nv && t->best_step >= 0) {
        nf_params_copy(f->P, t->best_P, 0);
        nf_params_copy(f->S, t->best_S, 0);
    } else if (rc == NF_OK && nf_trainer_finished(t)) {
        ema_keep(t);
    }
    if (rc == NF_OK && nf_trainer_finished(t) && t->train && f->type->train_end) rc = f->type->train_end(f, t->train);
    if (hooks->checkpoint) {
        int rc2 = hooks->checkpoint(hooks->user, t);
        if (rc == NF_OK) rc = rc2;
    }
    return rc;
}

/* ---- checkpoints --------------------------------------------------------------------------- */

/* The parameter stores a checkpoint holds, in one list for writing and reading (so the two cannot
 * drift apart): the current values and state, the best validation ones, the last known-good ones;
 * with_state: the optimizer moments too (the stores a step goes on from). */
typedef struct checkpoint_store {
    const char *name;
    nf_params *P;
    int with_state;
} checkpoint_store;
#define CHECKPOINT_STORES 6

static checkpoint_store checkpoint_store_of(const nf_trainer *t, int k)
{
    const checkpoint_store all[CHECKPOINT_STORES] = {
        {"current", t->model->P, 1}, {"current_state", t->model->S, 0}, {"best", t->best_P, 0},
        {"best_state", t->best_S, 0}, {"good", t->good_P, 1},          {"good_state", t->good_S, 0},
    };
    return all[k];
}

static int save_history(const nf_history *h, nf_h5 *f, const char *g)
{
    char path[1024];
    int64_t *steps = malloc((h->n ? h->n : 1) * sizeof *steps);
    if (!steps) return nf_error(NF_ENOMEM, "out of memory saving the history");
    for (long i = 0; i < h->n; i++) steps[i] = h->step[i];
    snprintf(path, sizeof path, "%s/step", g);
    int rc = nf_h5_write_int64(f, path, steps, h->n, 0);
    free(steps);
    const char *names[] = {"epoch", "train_log_likelihood", "val_log_likelihood", "lr", "seconds"};
    double *cols[] = {h->epoch, h->train_ll, h->val_ll, h->lr, h->seconds};
    for (int i = 0; i < 5 && rc == NF_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", g, names[i]);
        rc = nf_h5_write_double(f, path, cols[i], h->n, 0);
    }
    return rc;
}

static int load_history(nf_history *h, nf_h5 *f, const char *g)
{
    char path[1024];
    int64_t *steps;
    size_t rows, cols;
    snprintf(path, sizeof path, "%s/step", g);
    NF_TRY(nf_h5_read_int64(f, path, &steps, &rows, &cols));
    history_free(h);
    int rc = history_reserve(h, (long)rows + 1);
    for (size_t i = 0; rc == NF_OK && i < rows; i++) h->step[i] = steps[i];
    free(steps);
    const char *names[] = {"epoch", "train_log_likelihood", "val_log_likelihood", "lr", "seconds"};
    double *dst[] = {h->epoch, h->train_ll, h->val_ll, h->lr, h->seconds};
    for (int i = 0; i < 5 && rc == NF_OK; i++) {
        double *v;
        size_t r2, c2;
        snprintf(path, sizeof path, "%s/%s", g, names[i]);
        rc = nf_h5_read_double(f, path, &v, &r2, &c2);
        if (rc == NF_OK && r2 != rows) rc = nf_error(NF_EFORMAT, "%s: %zu entries, expected %zu", path, r2, rows);
        if (rc == NF_OK) memcpy(dst[i], v, rows * sizeof(double));
        if (rc == NF_OK || r2 != rows) free(v);
    }
    h->n = (long)rows;
    return rc;
}

int nf_trainer_save(const nf_trainer *t, nf_h5 *f, const char *g)
{
    char path[512];
    NF_TRY(nf_h5_group(f, g));
    struct {
        const char *name;
        double value;
    } nums[] = {{"step", (double)t->step},        {"epoch", t->epoch},           {"pos", (double)t->pos},
                {"best_val", t->best_val},        {"best_step", (double)t->best_step},
                {"bad_evals", t->bad_evals},      {"failures", t->failures},     {"lr_scale", t->lr_scale},
                {"seconds", t->seconds},          {"optim_t", (double)t->cfg.optim.t}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        NF_TRY(nf_h5_attr_set_double(f, g, nums[i].name, nums[i].value));
    NF_TRY(nf_h5_attr_set_double(f, g, "items", (double)t->n));
    if (t->order_stored) { /* an order read from an old checkpoint: stored as it came */
        int64_t *perm = nf_calloc(t->n ? t->n : 1, sizeof *perm, "training permutation");
        if (!perm) return NF_ENOMEM;
        for (size_t i = 0; i < t->n; i++) perm[i] = t->perm[i];
        snprintf(path, sizeof path, "%s/perm", g);
        int rc = nf_h5_write_int64(f, path, perm, t->n ? t->n : 1, 0);
        free(perm);
        NF_TRY(rc);
    } else {
        snprintf(path, sizeof path, "%s/order_rng_state", g);
        NF_TRY(nf_h5_write_bytes(f, path, t->order_state, nf_rng_state_size(t->rng)));
    }
    size_t rs = nf_rng_state_size(t->rng);
    unsigned char *state = malloc(rs);
    if (!state) return nf_error(NF_ENOMEM, "out of memory saving the random state");
    nf_rng_state_get(t->rng, state);
    snprintf(path, sizeof path, "%s/rng_state", g);
    int rc = nf_h5_write_bytes(f, path, state, rs);
    free(state);
    NF_TRY(rc);
    for (int k = 0; k < CHECKPOINT_STORES; k++) {
        const checkpoint_store c = checkpoint_store_of(t, k);
        snprintf(path, sizeof path, "%s/%s", g, c.name);
        NF_TRY(nf_params_save(c.P, f, path, c.with_state));
    }
    if (t->ema_P) {
        NF_TRY(nf_h5_attr_set_double(f, g, "ema_count", (double)t->ema_count));
        snprintf(path, sizeof path, "%s/ema", g);
        NF_TRY(nf_params_save(t->ema_P, f, path, 0));
    }
    snprintf(path, sizeof path, "%s/history", g);
    NF_TRY(nf_h5_group(f, path));
    NF_TRY(save_history(&t->hist, f, path));
    /* a model trained in stages: which one this is, and the histories of those done */
    if (nf_model_stages(t->model) > 1) {
        NF_TRY(nf_h5_attr_set_double(f, g, "stage", t->model->stage));
        NF_TRY(nf_h5_attr_set_string(f, g, "stage_name", nf_model_stage_name(t->model, t->model->stage)));
        for (int k = 0; k < t->n_done; k++) {
            snprintf(path, sizeof path, "%s/stages/%d", g, k);
            NF_TRY(nf_h5_group(f, path));
            NF_TRY(nf_h5_attr_set_string(f, path, "name", nf_model_stage_name(t->model, k)));
            NF_TRY(save_history(&t->done[k], f, path));
        }
    }
    return NF_OK;
}

/* A checkpoint number that must be an integer in [lo, hi]. */
static int checked_count(const nf_h5 *f, const char *g, const char *name, double v, double lo, double hi)
{
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi)
        return nf_error(NF_EFORMAT, "%s: checkpoint field %s/%s is %g (expected a whole number from %g to %g)",
                        nf_h5_path(f), g, name, v, lo, hi);
    return NF_OK;
}

/* A generator state stored as group/name, checked to be one the trainer's generator can run from;
 * *state is the caller's to free. */
static int read_rng_state(const nf_trainer *t, nf_h5 *f, const char *g, const char *name, void **state)
{
    char path[512];
    size_t rs;
    snprintf(path, sizeof path, "%s/%s", g, name);
    NF_TRY(nf_h5_read_bytes(f, path, state, &rs));
    if (rs != nf_rng_state_size(t->rng) || !nf_rng_state_valid(t->rng, *state)) {
        free(*state);
        *state = NULL;
        return nf_error(NF_EFORMAT, "%s: checkpoint field %s/%s is not a state of the random generator "
                                    "(%zu bytes, expected %zu of a valid mt19937 state)", nf_h5_path(f), g, name, rs,
                        nf_rng_state_size(t->rng));
    }
    return NF_OK;
}

/* This epoch's order from the stream state that drew it (a checkpoint's order_rng_state). */
static int load_order(nf_trainer *t, nf_h5 *f, const char *g)
{
    void *state;
    NF_TRY(read_rng_state(t, f, g, "order_rng_state", &state));
    double items;
    int rc = nf_h5_attr_get_double(f, g, "items", &items);
    if (rc == NF_OK && items != (double)t->n)
        rc = nf_error(NF_EFORMAT, "%s: checkpoint was made with %g training items, this data has %zu "
                                  "(resume with the same data and --val-frac)", nf_h5_path(f), items, t->n);
    if (rc != NF_OK) {
        free(state);
        return rc;
    }
    memcpy(t->order_state, state, nf_rng_state_size(t->rng));
    free(state);
    t->order_stored = 0;
    /* the trainer's own state is read after this from rng_state */
    nf_rng_state_set(t->rng, t->order_state);
    shuffle_order(t);
    return NF_OK;
}

/* This epoch's order as a checkpoint of nf before 2026-12-05 stored it: the n indices themselves
 * (checked to be a permutation of 0..n-1).  Saves store it so until the epoch ends. */
static int load_stored_order(nf_trainer *t, nf_h5 *f, const char *g)
{
    char path[512];
    int64_t *perm;
    size_t rows, cols;
    snprintf(path, sizeof path, "%s/perm", g);
    if (!nf_h5_exists(f, path))
        return nf_error(NF_EFORMAT, "%s: checkpoint has neither %s/order_rng_state nor %s/perm (the order of the "
                                    "epoch it stopped in)", nf_h5_path(f), g, g);
    NF_TRY(nf_h5_read_int64(f, path, &perm, &rows, &cols));
    if (rows != (t->n ? t->n : 1) && !(t->n == 0 && rows == 0)) {
        free(perm);
        return nf_error(NF_EFORMAT, "%s: checkpoint was made with %zu training items, this data has %zu "
                                    "(resume with the same data and --val-frac)", nf_h5_path(f), rows, t->n);
    }
    /* a permutation of 0..n-1: every entry in range and none twice */
    unsigned char *seen = t->n ? calloc(t->n, 1) : NULL;
    if (t->n && !seen) {
        free(perm);
        return nf_error(NF_ENOMEM, "out of memory checking the checkpoint");
    }
    for (size_t i = 0; i < t->n; i++) {
        if (perm[i] < 0 || (uint64_t)perm[i] >= t->n || seen[perm[i]]) {
            int rc = nf_error(NF_EFORMAT, "%s: checkpoint field %s/perm entry %zu is %lld (expected a permutation of "
                                          "0..%zu)", nf_h5_path(f), g, i, (long long)perm[i], t->n - 1);
            free(perm), free(seen);
            return rc;
        }
        seen[perm[i]] = 1;
    }
    free(seen);
    for (size_t i = 0; i < t->n; i++) t->perm[i] = (uint32_t)perm[i];
    free(perm);
    t->order_stored = 1;
    return NF_OK;
}

int nf_trainer_load(nf_trainer *t, nf_h5 *f, const char *g)
{
    char path[512];
    double v[10];
    const char *names[] = {"step", "epoch", "pos", "best_val", "best_step", "bad_evals", "failures", "lr_scale",
                           "seconds", "optim_t"};
    for (int i = 0; i < 10; i++) NF_TRY(nf_h5_attr_get_double(f, g, names[i], &v[i]));
    const double big = 9007199254740992.0; /* 2^53: counts beyond it are not exact in the file */
    NF_TRY(checked_count(f, g, "step", v[0], 0, big));
    NF_TRY(checked_count(f, g, "epoch", v[1], 0, 2147483647.0));
    if (t->n && (!isfinite(v[2]) || v[2] < 0 || v[2] >= (double)t->n || v[2] != floor(v[2])))
        return nf_error(NF_EFORMAT, "%s: checkpoint position %g does not fit the %zu training items "
                                    "(was the model trained on other data?)", nf_h5_path(f), v[2], t->n);
    if (!t->n) NF_TRY(checked_count(f, g, "pos", v[2], 0, 0));
    if (!(isnan(v[3]) || v[3] == -INFINITY || isfinite(v[3])))
        return nf_error(NF_EFORMAT, "%s: checkpoint field %s/best_val is %g", nf_h5_path(f), g, v[3]);
    NF_TRY(checked_count(f, g, "best_step", v[4], -1, v[0]));
    NF_TRY(checked_count(f, g, "bad_evals", v[5], 0, 2147483647.0));
    NF_TRY(checked_count(f, g, "failures", v[6], 0, 2147483647.0));
    if (!(isfinite(v[7]) && v[7] > 0 && v[7] <= 1))
        return nf_error(NF_EFORMAT, "%s: checkpoint field %s/lr_scale is %g (expected 0 < s <= 1)", nf_h5_path(f), g,
                        v[7]);
    if (!(isfinite(v[8]) && v[8] >= 0))
        return nf_error(NF_EFORMAT, "%s: checkpoint field %s/seconds is %g (expected a finite time >= 0)",
                        nf_h5_path(f), g, v[8]);
    NF_TRY(checked_count(f, g, "optim_t", v[9], 0, big));
    snprintf(path, sizeof path, "%s/order_rng_state", g);
    if (nf_h5_exists(f, path)) NF_TRY(load_order(t, f, g));
    else NF_TRY(load_stored_order(t, f, g));
    void *state;
    NF_TRY(read_rng_state(t, f, g, "rng_state", &state));
    nf_rng_state_set(t->rng, state);
    free(state);
    for (int k = 0; k < CHECKPOINT_STORES; k++) {
        const checkpoint_store c = checkpoint_store_of(t, k);
        snprintf(path, sizeof path, "%s/%s", g, c.name);
        NF_TRY(nf_params_load(c.P, f, path, c.with_state));
    }
    double ema_count = 0;
    if (t->ema_P) {
        snprintf(path, sizeof path, "%s/ema", g);
        if (!nf_h5_exists(f, path) || !nf_h5_attr_exists(f, g, "ema_count"))
            return nf_error(NF_EFORMAT, "%s: the checkpoint has no moving average of the weights (%s), but the "
                                        "settings ask for one (ema %g)", nf_h5_path(f), path, t->cfg.ema);
        NF_TRY(nf_h5_attr_get_double(f, g, "ema_count", &ema_count));
        NF_TRY(checked_count(f, g, "ema_count", ema_count, 0, v[0]));
        NF_TRY(nf_params_load(t->ema_P, f, path, 0));
    }
    snprintf(path, sizeof path, "%s/history", g);
    NF_TRY(load_history(&t->hist, f, path));
    int stages = nf_model_stages(t->model);
    double stage = 0;
    if (nf_h5_attr_exists(f, g, "stage")) NF_TRY(nf_h5_attr_get_double(f, g, "stage", &stage));
    NF_TRY(checked_count(f, g, "stage", stage, 0, stages - 1));
    for (int k = 0; k < t->n_done; k++) history_free(&t->done[k]);
    free(t->done);
    t->done = NULL;
    t->n_done = 0;
    if (stage > 0) {
        t->done = calloc((size_t)stage, sizeof *t->done);
        if (!t->done) return nf_error(NF_ENOMEM, "out of memory loading the stage histories");
        for (int k = 0; k < (int)stage; k++) {
            snprintf(path, sizeof path, "%s/stages/%d", g, k);
            NF_TRY(load_history(&t->done[k], f, path));
            t->n_done = k + 1;
        }
    }
    NF_TRY(nf_model_set_stage(t->model, (int)stage));
    t->step = (long)v[0];
    t->epoch = (int)v[1];
    t->pos = (size_t)v[2];
    t->best_val = v[3];
    t->best_step = (long)v[4];
    t->bad_evals = (int)v[5];
    t->failures = (int)v[6];
    t->lr_scale = v[7];
    t->seconds = v[8];
    t->cfg.optim.t = (int64_t)v[9];
    t->ema_count = (long)ema_count;
    return NF_OK;
}
