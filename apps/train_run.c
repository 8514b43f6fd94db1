/* apps/train_run.c - progress, signals and checkpoints around the trainer (see train_run.h). */
#include "apps/train_run.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/mpi.h"

static volatile int stop_requested = 0;
static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct {
    app_train_run *r;
    int tty;
    double last_print;
} run_ctx;

static void fmt_time(char *buf, size_t size, double s)
{
    if (!isfinite(s) || s < 0) snprintf(buf, size, "?");
    else if (s < 3600) snprintf(buf, size, "%d:%02d", (int)s / 60, (int)s % 60);
    else snprintf(buf, size, "%dh%02d", (int)s / 3600, ((int)s % 3600) / 60);
}

/* How a model kind's metric is shown: its short name and the sign that makes it read naturally
 * (the trainer maximises -bits/dim; people read bits/dim). */
static const char *metric_label(const char *metric, double *sign)
{
    *sign = 1;
    if (metric && !strcmp(metric, "elbo")) return "elbo";
    if (metric && !strcmp(metric, "neg_bits_per_dim")) {
        *sign = -1;
        return "bpd";
    }
    if (metric && !strcmp(metric, "neg_mse")) {
        *sign = -1;
        return "mse";
    }
    return "ll";
}

/* A metric's value as progress shows it: 4 decimals, or 4 significant digits for a mean squared
 * error (small numbers). */
static const char *num(char *buf, size_t size, const char *label, double v)
{
    snprintf(buf, size, strcmp(label, "mse") ? "%.4f" : "%.4g", v);
    return buf;
}

static void progress(void *user, const nf_train_progress *p)
{
    run_ctx *c = user;
    if (c->r->quiet) return;
    int last = p->total_steps > 0 && p->step >= p->total_steps;
    if (!c->tty && !last && p->seconds - c->last_print < 5.0) return;
    if (c->tty && !last && p->seconds - c->last_print < 0.1) return;
    c->last_print = p->seconds;
    char eta[32], step[48], val[128], epoch[64] = "";
    double sg = 1;
    const char *m = metric_label(p->metric, &sg);
    /* a kind trained in stages (causal, video with a codec or denoiser): which stage this is */
    const nf_model *model = c->r->model;
    if (nf_model_stages(model) > 1 && nf_model_stage_name(model, model->stage)[0])
        snprintf(epoch, sizeof epoch, "[%s] ", nf_model_stage_name(model, model->stage));
    if (p->has_data) snprintf(epoch + strlen(epoch), sizeof epoch - strlen(epoch), "epoch %d ", p->epoch);
    fmt_time(eta, sizeof eta, p->eta_seconds);
    if (p->total_steps > 0) snprintf(step, sizeof step, "step %ld/%ld", p->step, p->total_steps);
    else snprintf(step, sizeof step, "step %ld", p->step);
    char v1[32], v2[32], v3[32], tl[32], vl[32];
    const nf_model_type *type = c->r->model->type;
    /* "ll/event" and "ll/sequence" where the loss and the metric are per different things (tpp) */
    snprintf(tl, sizeof tl, "%s%s%s", m, type->loss_per ? "/" : "", type->loss_per ? type->loss_per : "");
    snprintf(vl, sizeof vl, "%s%s%s", m, type->metric_per ? "/" : "", type->metric_per ? type->metric_per : "");
    if (isfinite(p->best_val))
        snprintf(val, sizeof val, " | val %s %s (best %s)", vl, num(v1, sizeof v1, m, sg * p->val_ll),
                 num(v2, sizeof v2, m, sg * p->best_val));
    else val[0] = '\0';
    if (!isfinite(p->val_ll) && isfinite(p->best_val))
        snprintf(val, sizeof val, " | best val %s %s", vl, num(v1, sizeof v1, m, sg * p->best_val));
    num(v3, sizeof v3, m, sg * p->train_ll);
    if (c->tty) {
        int width = 24, filled = p->total_steps > 0 ? (int)(width * (double)p->step / p->total_steps) : 0;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %s%s | train %s %s%s | %.0f steps/s | ETA %s\033[K", bar, epoch, step, tl, v3, val,
                p->steps_per_sec, eta);
    } else {
        fprintf(stderr, "%s%s | train %s %s%s | %.0f steps/s | ETA %s\n", epoch, step, tl, v3, val, p->steps_per_sec, eta);
    }
    fflush(stderr);
}

/* A run killed (SIGKILL, power loss) while writing a checkpoint leaves "<out>.tmp.<pid>" next to the
 * intact model file.  Remove those of processes that no longer exist; a live writer's file stays. */
static void remove_stale_temporaries(const char *out)
{
    char *d = strdup(out), *b = strdup(out);
    const char *dir = d ? dirname(d) : NULL, *base = b ? basename(b) : NULL;
    DIR *dp = dir && base ? opendir(dir) : NULL;
    size_t bl = base ? strlen(base) : 0;
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (strncmp(e->d_name, base, bl) != 0 || strncmp(e->d_name + bl, ".tmp.", 5) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + bl + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) remove(path);
    }
    if (dp) closedir(dp);
    free(d);
    free(b);
}

/* In a parallel run every process holds the same model and trainer; the first one writes them. */
static int checkpoint(void *user, nf_trainer *t)
{
    run_ctx *c = user;
    if (app_mpi_rank() != 0) return NF_OK;
    return nf_model_save(c->r->out, c->r->model, c->r->meta, t);
}

int app_train_run_go(app_train_run *r, nf_trainer *t)
{
    const nf_train_comm *comm = app_mpi_comm();
    if (nf_trainer_set_comm(t, comm) != NF_OK) return cli_fail(r->cmd);
    int lead = app_mpi_rank() == 0, quiet = r->quiet;
    r->quiet = quiet || !lead; /* one process speaks */
    run_ctx c = {.r = r, .tty = isatty(2), .last_print = -1e9};
    if (lead) remove_stale_temporaries(r->out);
    if (comm && !r->quiet)
        fprintf(stderr, "nf %s: %d processes, batches of %d split among them\n", r->cmd, comm->size, t->cfg.batch);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends the process, whatever the loop is doing */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    nf_train_hooks hooks = {&c, progress, checkpoint, &stop_requested};
    int rc = nf_trainer_run(t, &hooks);
    if (c.tty && !r->quiet) fputc('\n', stderr);
    if (rc != NF_OK) return cli_fail(r->cmd);
    if (stop_requested) {
        char launch[32] = "";
        if (comm) snprintf(launch, sizeof launch, "mpirun -np %d ", comm->size);
        if (lead)
            fprintf(stderr, "nf %s: stopped at step %ld; checkpoint in %s (continue with: %snf %s --resume %s)\n",
                    r->cmd, t->step, r->out, launch, r->cmd, r->out);
        return 130;
    }
    if (!r->quiet) {
        double sg = 1;
        const char *m = metric_label(nf_model_metric(r->model), &sg);
        const char *metric = !strcmp(m, "elbo")  ? "ELBO"
                             : !strcmp(m, "bpd") ? "bits/dim"
                             : !strcmp(m, "mse") ? "mean squared error"
                                                 : "log-likelihood";
        char v[32];
        const char *per = r->model->type->metric_per;
        if (t->nv && isfinite(t->best_val))
            fprintf(stderr, "nf %s: done (%s, %.1f s); best validation %s%s%s %s at step %ld; wrote %s\n", r->cmd,
                    t->stop_reason, t->seconds, metric, per ? " per " : "", per ? per : "",
                    num(v, sizeof v, m, sg * t->best_val), t->best_step, r->out);
        else
            fprintf(stderr, "nf %s: done (%s, %.1f s); wrote %s\n", r->cmd, t->stop_reason, t->seconds, r->out);
    }
    return 0;
}

int app_kind_fit_open(app_kind_fit *f, const char *kind, const char *input, int force, double lr, long seed)
{
    nf_train_config *tc = f->tc;
    if (f->resume) {
        f->out = f->resume;
        NF_TRY(app_open_model_kind(f->resume, kind, &f->model, f->meta));
        f->data = f->meta->data_path;
        f->val_frac = f->meta->val_frac;
        return nf_model_load_train_config(f->resume, tc);
    }
    NF_TRY(app_check_new_model(f->out, force));
    NF_TRY(app_check_not_input(f->out, f->data, input));
    tc->seed = (uint64_t)seed;
    tc->optim.lr = lr;
    nf_schedule_init(&tc->schedule, NF_SCHED_COSINE, lr);
    tc->schedule.total = tc->max_steps;
    return NF_OK;
}

int app_kind_fit_close(app_kind_fit *f, int status)
{
    nf_model_free(f->model);
    nf_source_free(f->train);
    nf_source_free(f->val);
    nf_source_free(f->all);
    f->model = NULL, f->train = f->val = f->all = NULL;
    return app_mpi_end(status);
}

int app_kind_fit_go(const app_kind_fit *f, int rc)
{
    nf_trainer *t = NULL;
    nf_model_meta *meta = f->meta;
    int status = 1;
    if (rc == NF_OK && !f->resume) {
        snprintf(meta->data_path, sizeof meta->data_path, "%s", f->data);
        snprintf(meta->data_dataset, sizeof meta->data_dataset, "%s", f->dataset);
        meta->val_frac = f->val_frac;
    }
    if (rc == NF_OK) {
        meta->n_train = (long)f->train->n;
        meta->n_val = f->val ? (long)f->val->n : 0;
        rc = nf_trainer_create(&t, f->model, f->tc, f->train, f->val);
    }
    if (rc == NF_OK && f->resume) rc = nf_model_load_trainer(f->resume, t);
    if (rc != NF_OK) {
        status = cli_fail(f->cmd);
    } else if (f->resume && nf_trainer_finished(t)) {
        fprintf(stderr, "nf %s: %s already finished (step %ld); nothing to resume\n", f->cmd, f->resume, t->step);
        status = 0;
    } else {
        if (!f->quiet && f->describe) f->describe(f->user, f->model);
        app_train_run r = {.cmd = f->cmd, .out = f->out, .model = f->model, .meta = meta, .quiet = f->quiet};
        status = app_train_run_go(&r, t);
    }
    nf_trainer_free(t);
    return status;
}

int app_open_model_kind(const char *path, const char *kind, nf_model **m, nf_model_meta *meta)
{
    NF_TRY(nf_model_open(path, m, meta));
    if (!strcmp((*m)->type->kind, kind)) return NF_OK;
    /* a flow of nf fit (a density, dependent or variational kind) is read by nf eval, sample, plot */
    const char *by = (*m)->type->command;
    int rc = strncmp(by, "nf fit", 6)
                 ? nf_error(NF_EINVAL, "%s holds a '%s' model; use %s with it", path, (*m)->type->kind, by)
                 : nf_error(NF_EINVAL, "%s holds a '%s' model (of %s); use nf eval, nf sample or nf plot with it", path,
                            (*m)->type->kind, by);
    nf_model_free(*m);
    *m = NULL;
    return rc;
}
