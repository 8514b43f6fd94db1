/* training/trainer.c - the training loop: batches, divergence recovery, validation, early stopping. */
#include "training/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
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

int nf_trainer_create(nf_trainer **out, nf_flow *flow, const nf_train_config *cfg, const nf_real *x,
                      const nf_real *ctx, size_t n, const nf_real *xv, const nf_real *ctxv, size_t nv)
{
    *out = NULL;
    if (n == 0) return nf_error(NF_EDATA, "no training data (expected at least one sample)");
    if (cfg->batch < 1) return nf_error(NF_EINVAL, "batch size %d (expected at least 1)", cfg->batch);
    if (cfg->epochs <= 0 && cfg->max_steps <= 0 && cfg->max_seconds <= 0)
        return nf_error(NF_EINVAL, "training has no limit: set epochs, max_steps or max_seconds");
    NF_TRY(nf_optim_check(&cfg->optim));
    NF_TRY(nf_schedule_check(&cfg->schedule));
    if (flow->ctx_dim > 0 && (!ctx || (nv && !ctxv)))
        return nf_error(NF_EINVAL, "the flow is conditional (context width %d) but no context was given", flow->ctx_dim);
    nf_trainer *t = nf_calloc(1, sizeof *t, "trainer");
    if (!t) return NF_ENOMEM;
    t->cfg = *cfg;
    if ((size_t)t->cfg.batch > n) t->cfg.batch = (int)n;
    if (t->cfg.max_failures < 1) t->cfg.max_failures = 1;
    if (t->cfg.good_every < 1) t->cfg.good_every = 100;
    t->flow = flow;
    t->x = x;
    t->ctx = flow->ctx_dim ? ctx : NULL;
    t->n = n;
    t->xv = nv ? xv : NULL;
    t->ctxv = nv && flow->ctx_dim ? ctxv : NULL;
    t->nv = nv;
    t->best_val = -INFINITY;
    t->best_step = -1;
    t->lr_scale = 1.0;
    t->perm = nf_calloc(n, sizeof(int64_t), "training permutation");
    t->rng = nf_rng_alloc(cfg->seed, 0x73687566);
    t->xb = nf_calloc((size_t)t->cfg.batch * flow->dim, sizeof(nf_real), "batch buffer");
    t->cb = nf_calloc((size_t)t->cfg.batch * (flow->ctx_dim ? flow->ctx_dim : 1), sizeof(nf_real), "batch buffer");
    t->best_P = clone_layout(flow->P);
    t->best_S = clone_layout(flow->S);
    t->good_P = clone_layout(flow->P);
    t->good_S = clone_layout(flow->S);
    if (!t->perm || !t->rng || !t->xb || !t->cb || !t->best_P || !t->best_S || !t->good_P || !t->good_S) {
        nf_trainer_free(t);
        return nf_error(NF_ENOMEM, "out of memory creating the trainer");
    }
    nf_params_copy(t->good_P, flow->P, 1);
    nf_params_copy(t->good_S, flow->S, 0);
    nf_params_copy(t->best_P, flow->P, 0);
    nf_params_copy(t->best_S, flow->S, 0);
    *out = t;
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
    nf_rng_free(t->rng);
    free(t->xb);
    free(t->cb);
    nf_params_free(t->best_P);
    nf_params_free(t->best_S);
    nf_params_free(t->good_P);
    nf_params_free(t->good_S);
    history_free(&t->hist);
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
    if (t->cfg.epochs > 0) total = t->cfg.epochs * steps_per_epoch(t);
    if (t->cfg.max_steps > 0 && (total == 0 || t->cfg.max_steps < total)) total = t->cfg.max_steps;
    return total;
}

int nf_trainer_finished(const nf_trainer *t)
{
    if (t->cfg.epochs > 0 && t->epoch >= t->cfg.epochs) return 1;
    if (t->cfg.max_steps > 0 && t->step >= t->cfg.max_steps) return 1;
    if (t->cfg.max_seconds > 0 && t->seconds >= t->cfg.max_seconds) return 1;
    if (t->cfg.patience > 0 && t->nv && t->bad_evals >= t->cfg.patience) return 1;
    return 0;
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
        rc = nf_flow_log_prob(flow, out, x + at * flow->dim, ctx ? ctx + at * flow->ctx_dim : NULL, b);
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

static void new_epoch_order(nf_trainer *t)
{
    for (size_t i = 0; i < t->n; i++) t->perm[i] = (int64_t)i;
    for (size_t i = t->n; i > 1; i--) {
        size_t j = nf_rng_index(t->rng, i);
        int64_t tmp = t->perm[i - 1];
        t->perm[i - 1] = t->perm[j];
        t->perm[j] = tmp;
    }
}

static int gather_batch(nf_trainer *t, int b)
{
    int D = t->flow->dim, C = t->flow->ctx_dim;
    for (int i = 0; i < b; i++) {
        size_t r = (size_t)t->perm[t->pos + i];
        memcpy(t->xb + (size_t)i * D, t->x + r * D, D * sizeof(nf_real));
        if (C) memcpy(t->cb + (size_t)i * C, t->ctx + r * C, C * sizeof(nf_real));
    }
    return NF_OK;
}

/* Validation and the history entry; updates best parameters and the patience counter. */
static int validate(nf_trainer *t, double lr, nf_train_progress *p)
{
    double val = NAN;
    if (t->nv) {
        NF_TRY(nf_evaluate(t->flow, t->xv, t->ctxv, t->nv, 1024, &val, NULL, NULL));
        if (val > t->best_val) {
            t->best_val = val;
            t->best_step = t->step;
            t->bad_evals = 0;
            nf_params_copy(t->best_P, t->flow->P, 0);
            nf_params_copy(t->best_S, t->flow->S, 0);
        } else {
            t->bad_evals++;
        }
    }
    nf_history *h = &t->hist;
    NF_TRY(history_reserve(h, h->n + 1));
    h->step[h->n] = t->step;
    h->epoch[h->n] = t->epoch + (double)t->pos / t->n;
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

/* One optimizer step, or a divergence handled by restoring the last good parameters. */
static int step_once(nf_trainer *t, double *ll, double *lr_used)
{
    nf_flow *f = t->flow;
    int b = (int)(t->n - t->pos < (size_t)t->cfg.batch ? t->n - t->pos : (size_t)t->cfg.batch);
    gather_batch(t, b);
    nf_params_zero_grad(f->P);
    double nll = NAN;
    int rc = nf_flow_nll_step(f, t->xb, f->ctx_dim ? t->cb : NULL, b, &nll);
    double lr = nf_schedule_lr(&t->cfg.schedule, (long)t->cfg.optim.t) * t->lr_scale;
    *lr_used = lr;
    int diverged = rc == NF_ENONFINITE || (rc == NF_OK && !isfinite(nll));
    if (rc == NF_OK && !diverged) {
        double norm = nf_clip_grad_norm(f->P, t->cfg.clip);
        if (!isfinite(norm)) diverged = 1;
        else {
            /* These parameters just gave a finite loss and gradient: a known-good snapshot. */
            if (t->step % t->cfg.good_every == 0) {
                nf_params_copy(t->good_P, f->P, 1);
                nf_params_copy(t->good_S, f->S, 0);
            }
            rc = nf_optim_step(&t->cfg.optim, f->P, lr);
        }
        if (rc == NF_ENONFINITE) diverged = 1, rc = NF_OK;
    }
    if (rc != NF_OK && !diverged) return rc;
    t->pos += b;
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

int nf_trainer_run(nf_trainer *t, const nf_train_hooks *hooks)
{
    nf_train_hooks none = {0};
    if (!hooks) hooks = &none;
    nf_flow *f = t->flow;
    nf_flow_set_training(f, 1);
    double started = now_seconds(), base_seconds = t->seconds, recent = 0;
    long start_step = t->step, total = total_steps(t);
    int rc = NF_OK;
    t->stop_reason[0] = '\0';
    nf_train_progress p;
    while (!nf_trainer_finished(t)) {
        if (hooks->stop && *hooks->stop) {
            snprintf(t->stop_reason, sizeof t->stop_reason, "stopped on request");
            break;
        }
        if (t->pos == 0) new_epoch_order(t);
        memset(&p, 0, sizeof p);
        p.val_ll = NAN;
        double ll = NAN, lr = 0;
        rc = step_once(t, &ll, &lr);
        if (rc != NF_OK) break;
        t->seconds = base_seconds + (now_seconds() - started);
        if (isfinite(ll)) recent = recent == 0 ? ll : 0.98 * recent + 0.02 * ll;
        if (t->pos >= t->n) {
            t->pos = 0;
            t->epoch++;
            rc = validate(t, lr, &p);
        } else if (t->cfg.eval_every > 0 && t->step % t->cfg.eval_every == 0) {
            rc = validate(t, lr, &p);
        }
        nf_flow_set_training(f, 1);
        if (rc != NF_OK) break;
        if (hooks->progress) {
            double rate = (t->step - start_step) / fmax(t->seconds - base_seconds, 1e-9);
            p.step = t->step;
            p.total_steps = total;
            p.epoch = t->epoch;
            p.epochs = t->cfg.epochs;
            p.train_ll = recent;
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
    nf_flow_set_training(f, 0);
    if (rc == NF_OK && !t->stop_reason[0]) {
        if (t->cfg.patience > 0 && t->nv && t->bad_evals >= t->cfg.patience)
            snprintf(t->stop_reason, sizeof t->stop_reason, "early stopping (no improvement in %d evaluations)",
                     t->cfg.patience);
        else if (t->cfg.epochs > 0 && t->epoch >= t->cfg.epochs)
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
    }
    if (hooks->checkpoint) {
        int rc2 = hooks->checkpoint(hooks->user, t);
        if (rc == NF_OK) rc = rc2;
    }
    return rc;
}

/* ---- checkpoints --------------------------------------------------------------------------- */

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
    snprintf(path, sizeof path, "%s/perm", g);
    NF_TRY(nf_h5_write_int64(f, path, t->perm, t->n, 0));
    size_t rs = nf_rng_state_size(t->rng);
    unsigned char *state = malloc(rs);
    if (!state) return nf_error(NF_ENOMEM, "out of memory saving the random state");
    nf_rng_state_get(t->rng, state);
    snprintf(path, sizeof path, "%s/rng_state", g);
    int rc = nf_h5_write_bytes(f, path, state, rs);
    free(state);
    NF_TRY(rc);
    snprintf(path, sizeof path, "%s/current", g);
    NF_TRY(nf_params_save(t->flow->P, f, path, 1));
    snprintf(path, sizeof path, "%s/current_state", g);
    NF_TRY(nf_params_save(t->flow->S, f, path, 0));
    snprintf(path, sizeof path, "%s/best", g);
    NF_TRY(nf_params_save(t->best_P, f, path, 0));
    snprintf(path, sizeof path, "%s/best_state", g);
    NF_TRY(nf_params_save(t->best_S, f, path, 0));
    snprintf(path, sizeof path, "%s/good", g);
    NF_TRY(nf_params_save(t->good_P, f, path, 1));
    snprintf(path, sizeof path, "%s/good_state", g);
    NF_TRY(nf_params_save(t->good_S, f, path, 0));
    snprintf(path, sizeof path, "%s/history", g);
    NF_TRY(nf_h5_group(f, path));
    return save_history(&t->hist, f, path);
}

int nf_trainer_load(nf_trainer *t, nf_h5 *f, const char *g)
{
    char path[512];
    double v[10];
    const char *names[] = {"step", "epoch", "pos", "best_val", "best_step", "bad_evals", "failures", "lr_scale",
                           "seconds", "optim_t"};
    for (int i = 0; i < 10; i++) NF_TRY(nf_h5_attr_get_double(f, g, names[i], &v[i]));
    if (v[2] < 0 || v[2] >= (double)t->n)
        return nf_error(NF_EFORMAT, "%s: checkpoint position %g does not fit the %zu training rows "
                                    "(was the model trained on other data?)", nf_h5_path(f), v[2], t->n);
    int64_t *perm;
    size_t rows, cols;
    snprintf(path, sizeof path, "%s/perm", g);
    NF_TRY(nf_h5_read_int64(f, path, &perm, &rows, &cols));
    if (rows != t->n) {
        free(perm);
        return nf_error(NF_EFORMAT, "%s: checkpoint was made with %zu training rows, this data has %zu "
                                    "(resume with the same data and --val-frac)", nf_h5_path(f), rows, t->n);
    }
    memcpy(t->perm, perm, rows * sizeof(int64_t));
    free(perm);
    void *state;
    size_t rs;
    snprintf(path, sizeof path, "%s/rng_state", g);
    NF_TRY(nf_h5_read_bytes(f, path, &state, &rs));
    if (rs != nf_rng_state_size(t->rng)) {
        free(state);
        return nf_error(NF_EFORMAT, "%s: random state of %zu bytes, expected %zu", nf_h5_path(f), rs,
                        nf_rng_state_size(t->rng));
    }
    nf_rng_state_set(t->rng, state);
    free(state);
    snprintf(path, sizeof path, "%s/current", g);
    NF_TRY(nf_params_load(t->flow->P, f, path, 1));
    snprintf(path, sizeof path, "%s/current_state", g);
    NF_TRY(nf_params_load(t->flow->S, f, path, 0));
    snprintf(path, sizeof path, "%s/best", g);
    NF_TRY(nf_params_load(t->best_P, f, path, 0));
    snprintf(path, sizeof path, "%s/best_state", g);
    NF_TRY(nf_params_load(t->best_S, f, path, 0));
    snprintf(path, sizeof path, "%s/good", g);
    NF_TRY(nf_params_load(t->good_P, f, path, 1));
    snprintf(path, sizeof path, "%s/good_state", g);
    NF_TRY(nf_params_load(t->good_S, f, path, 0));
    snprintf(path, sizeof path, "%s/history", g);
    NF_TRY(load_history(&t->hist, f, path));
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
    return NF_OK;
}
