/* training/model_file.c - saving and loading model files (layout in docs/FORMATS.md). */
#include "training/model_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int save_config(nf_h5 *f, const nf_train_config *c)
{
    const char *g = "/training";
    NF_TRY(nf_h5_group(f, g));
    NF_TRY(nf_h5_attr_set_string(f, g, "optimizer", nf_optim_name(c->optim.type)));
    NF_TRY(nf_h5_attr_set_string(f, g, "schedule", nf_schedule_name(c->schedule.type)));
    struct {
        const char *name;
        double v;
    } a[] = {{"batch", c->batch},
             {"epochs", c->epochs},
             {"max_steps", (double)c->max_steps},
             {"max_seconds", c->max_seconds},
             {"patience", c->patience},
             {"eval_every", (double)c->eval_every},
             {"clip", c->clip},
             {"max_failures", c->max_failures},
             {"good_every", (double)c->good_every},
             {"checkpoint_every", (double)c->checkpoint_every},
             {"seed", (double)c->seed},
             {"lr", c->optim.lr},
             {"beta1", c->optim.beta1},
             {"beta2", c->optim.beta2},
             {"eps", c->optim.eps},
             {"weight_decay", c->optim.weight_decay},
             {"momentum", c->optim.momentum},
             {"warmup", (double)c->schedule.warmup},
             {"schedule_total", (double)c->schedule.total},
             {"final_frac", c->schedule.final_frac},
             {"decay_every", (double)c->schedule.every},
             {"gamma", c->schedule.gamma},
             {"eval_items", (double)c->eval_items},
             {"ema", c->ema}};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) NF_TRY(nf_h5_attr_set_double(f, g, a[i].name, a[i].v));
    return NF_OK;
}

int nf_model_save(const char *path, const nf_model *m, const nf_model_meta *meta, const nf_trainer *t)
{
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    int rc = nf_h5_group(f, "/model");
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/model", "kind", m->type->kind);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/model", "n_params", (int64_t)m->P->n);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/model", "real_type", NF_REAL_NAME);
    if (rc == NF_OK) rc = m->type->save(m, f, "/model");
    if (rc == NF_OK) rc = nf_params_save(m->P, f, "/model/params", 0);
    if (rc == NF_OK) rc = nf_params_save(m->S, f, "/model/state", 0);
    if (rc == NF_OK && meta) {
        rc = nf_h5_group(f, "/data");
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/data", "path", meta->data_path);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/data", "dataset", meta->data_dataset);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/data", "val_path", meta->val_path);
        if (rc == NF_OK) rc = nf_h5_attr_set_double(f, "/data", "val_frac", meta->val_frac);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/data", "n_train", meta->n_train);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/data", "n_val", meta->n_val);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/data", "stream", meta->stream);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/model", "preset", meta->preset);
        if (rc == NF_OK && meta->names) rc = nf_data_names_write(meta->names, f, "/data");
    }
    if (rc == NF_OK && t) {
        rc = save_config(f, &t->cfg);
        if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/training", "stop_reason", t->stop_reason);
        if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/training", "finished", nf_trainer_finished(t));
        if (rc == NF_OK) rc = nf_trainer_save(t, f, "/training/checkpoint");
    }
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}

/* The kind of an open model file: its attribute, or "density" for version 1. */
static int read_kind(nf_h5 *f, char *kind, size_t size)
{
    if (nf_h5_format_version(f) < 2) {
        snprintf(kind, size, "density");
        return NF_OK;
    }
    return nf_h5_attr_get_string(f, "/model", "kind", kind, size);
}

int nf_model_file_kind(const char *path, char *kind, size_t size)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    int rc = read_kind(f, kind, size);
    nf_h5_close(f);
    return rc;
}

static void read_meta(nf_h5 *f, nf_model_meta *meta)
{
    memset(meta, 0, sizeof *meta);
    if (nf_h5_exists(f, "/data")) {
        int64_t v;
        nf_h5_attr_get_string(f, "/data", "path", meta->data_path, sizeof meta->data_path);
        nf_h5_attr_get_string(f, "/data", "dataset", meta->data_dataset, sizeof meta->data_dataset);
        nf_h5_attr_get_string(f, "/data", "val_path", meta->val_path, sizeof meta->val_path);
        nf_h5_attr_get_double(f, "/data", "val_frac", &meta->val_frac);
        if (nf_h5_attr_get_int64(f, "/data", "n_train", &v) == NF_OK) meta->n_train = v;
        if (nf_h5_attr_get_int64(f, "/data", "n_val", &v) == NF_OK) meta->n_val = v;
        if (nf_h5_attr_exists(f, "/data", "stream") && nf_h5_attr_get_int64(f, "/data", "stream", &v) == NF_OK)
            meta->stream = v != 0;
        if (nf_h5_attr_exists(f, "/model", "preset"))
            nf_h5_attr_get_string(f, "/model", "preset", meta->preset, sizeof meta->preset);
    }
    nf_error_clear();
}

int nf_model_open(const char *path, nf_model **out, nf_model_meta *meta)
{
    *out = NULL;
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    char kind[64];
    nf_model *m = NULL;
    int rc = read_kind(f, kind, sizeof kind);
    const nf_model_type *type = rc == NF_OK ? nf_model_type_find(kind) : NULL;
    if (rc == NF_OK && !type) rc = nf_error_context(NF_EFORMAT, "%s", path);
    if (rc == NF_OK) {
        m = nf_calloc(1, sizeof *m, "model");
        if (!m) rc = NF_ENOMEM;
    }
    if (rc == NF_OK) {
        m->type = type;
        rc = type->load(m, f, "/model", nf_h5_format_version(f));
        if (rc != NF_OK) {
            rc = nf_error_context(rc, "%s", path);
            m->type = NULL; /* nothing was built: no destroy */
        }
    }
    if (rc == NF_OK) rc = nf_params_load(m->P, f, "/model/params", 0);
    if (rc == NF_OK) rc = nf_params_load(m->S, f, "/model/state", 0);
    if (rc == NF_OK && meta) read_meta(f, meta);
    nf_h5_close(f);
    if (rc != NF_OK) {
        nf_model_free(m);
        return rc;
    }
    nf_model_set_training(m, 0);
    *out = m;
    return NF_OK;
}

int nf_model_load(const char *path, nf_flow **out, nf_model_meta *meta)
{
    *out = NULL;
    nf_model *m;
    NF_TRY(nf_model_open(path, &m, meta));
    if (!m->flow || !m->flow->owns_params || m->type->flow_on_transformed_data) {
        int rc = nf_error(NF_EINVAL, "%s holds a '%s' model (%s); use %s with it", path, m->type->kind,
                          m->type->summary, m->type->command);
        nf_model_free(m);
        return rc;
    }
    /* The flow owns the model's one store: take it and let the rest of the model go. */
    *out = m->flow;
    m->flow = NULL;
    if (m->type->destroy) m->type->destroy(m);
    free(m);
    return NF_OK;
}

int nf_model_has_checkpoint(const char *path)
{
    nf_h5 *f;
    if (nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION) != NF_OK) return 0;
    int has = nf_h5_exists(f, "/training/checkpoint");
    nf_h5_close(f);
    return has;
}

/* The ranges of the /training settings, in the order nf_model_load_train_config reads them:
 * whole numbers (counts, steps, the seed) and finite reals, so a damaged or hand-edited file is an
 * error naming the setting instead of a run of 2^63 steps or a NaN learning rate. */
static const struct {
    double lo, hi;
    int whole;
} setting_range[22] = {
    {1, 2147483647.0, 1}, /* batch */           {0, 2147483647.0, 1}, /* epochs */
    {0, 9007199254740992.0, 1}, /* max_steps */ {0, 1e300, 0},        /* max_seconds */
    {0, 2147483647.0, 1}, /* patience */        {0, 9007199254740992.0, 1}, /* eval_every */
    {0, 1e300, 0},        /* clip */            {0, 2147483647.0, 1}, /* max_failures */
    {0, 9007199254740992.0, 1}, /* good_every */ {0, 9007199254740992.0, 1}, /* checkpoint_every */
    {0, 18446744073709549568.0, 1}, /* seed */  {0, 1e300, 0},        /* lr */
    {0, 1, 0},            /* beta1 */           {0, 1, 0},            /* beta2 */
    {0, 1e300, 0},        /* eps */             {0, 1e300, 0},        /* weight_decay */
    {0, 1, 0},            /* momentum */        {0, 9007199254740992.0, 1}, /* warmup */
    {0, 9007199254740992.0, 1}, /* schedule_total */ {0, 1, 0},       /* final_frac */
    {0, 9007199254740992.0, 1}, /* decay_every */ {0, 1e300, 0},      /* gamma */
};

static int check_setting(const char *path, const char *name, double v, double lo, double hi, int whole)
{
    if (isfinite(v) && v >= lo && v <= hi && (!whole || v == floor(v))) return NF_OK;
    return nf_error(NF_EFORMAT, "%s: training setting /training/%s is %g (expected %s from %g to %g)", path, name, v,
                    whole ? "a whole number" : "a finite number", lo, hi);
}

int nf_model_load_train_config(const char *path, nf_train_config *c)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    int rc = nf_h5_exists(f, "/training") ? NF_OK
                                           : nf_error(NF_EFORMAT, "%s: no training settings in this model file "
                                                                  "(it cannot be resumed)", path);
    char name[32];
    nf_train_config_init(c);
    if (rc == NF_OK) rc = nf_h5_attr_get_string(f, "/training", "optimizer", name, sizeof name);
    if (rc == NF_OK) rc = nf_optim_parse(name, &c->optim.type);
    if (rc == NF_OK) rc = nf_h5_attr_get_string(f, "/training", "schedule", name, sizeof name);
    if (rc == NF_OK) rc = nf_schedule_parse(name, &c->schedule.type);
    double v[22];
    const char *names[] = {"batch",     "epochs",       "max_steps",  "max_seconds",      "patience", "eval_every",
                           "clip",      "max_failures", "good_every", "checkpoint_every", "seed",     "lr",
                           "beta1",     "beta2",        "eps",        "weight_decay",     "momentum", "warmup",
                           "schedule_total", "final_frac", "decay_every", "gamma"};
    for (int i = 0; i < 22 && rc == NF_OK; i++) rc = nf_h5_attr_get_double(f, "/training", names[i], &v[i]);
    double eval_items = 0, ema = 0;   /* absent in version-1 files; ema: in files before it */
    if (rc == NF_OK && nf_h5_attr_exists(f, "/training", "eval_items"))
        rc = nf_h5_attr_get_double(f, "/training", "eval_items", &eval_items);
    if (rc == NF_OK && nf_h5_attr_exists(f, "/training", "ema")) rc = nf_h5_attr_get_double(f, "/training", "ema", &ema);
    nf_h5_close(f);
    NF_TRY(rc);
    for (int i = 0; i < 22; i++)
        NF_TRY(check_setting(path, names[i], v[i], setting_range[i].lo, setting_range[i].hi, setting_range[i].whole));
    NF_TRY(check_setting(path, "eval_items", eval_items, 0, 9007199254740992.0, 1));
    if (!(ema >= 0 && ema < 1))
        return nf_error(NF_EFORMAT, "%s: training setting /training/ema is %g (expected 0 <= d < 1)", path, ema);
    c->eval_items = (long)eval_items;
    c->ema = ema;
    c->batch = (int)v[0];
    c->epochs = (int)v[1];
    c->max_steps = (long)v[2];
    c->max_seconds = v[3];
    c->patience = (int)v[4];
    c->eval_every = (long)v[5];
    c->clip = v[6];
    c->max_failures = (int)v[7];
    c->good_every = (long)v[8];
    c->checkpoint_every = (long)v[9];
    c->seed = (uint64_t)v[10];
    c->optim.lr = v[11];
    c->optim.beta1 = v[12];
    c->optim.beta2 = v[13];
    c->optim.eps = v[14];
    c->optim.weight_decay = v[15];
    c->optim.momentum = v[16];
    c->schedule.lr = v[11];
    c->schedule.warmup = (long)v[17];
    c->schedule.total = (long)v[18];
    c->schedule.final_frac = v[19];
    c->schedule.every = (long)v[20];
    c->schedule.gamma = v[21];
    /* the combinations the optimizer and schedule accept (beta < 1, eps > 0, total > warmup, ...) */
    rc = nf_optim_check(&c->optim);
    if (rc == NF_OK) rc = nf_schedule_check(&c->schedule);
    if (rc != NF_OK) return nf_error_context(rc, "%s: training settings in /training", path);
    return NF_OK;
}

int nf_model_load_trainer(const char *path, nf_trainer *t)
{
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION));
    int rc = nf_h5_exists(f, "/training/checkpoint")
                 ? nf_trainer_load(t, f, "/training/checkpoint")
                 : nf_error(NF_EFORMAT, "%s: no checkpoint in this model file (it cannot be resumed)", path);
    nf_h5_close(f);
    return rc;
}
