/* apps/train_run.h - what every training subcommand (nf fit, nf tpp fit, ...) does around the
 * library's trainer: progress lines on stderr (a bar on a terminal, a line every 5 s otherwise),
 * SIGINT/SIGTERM as "stop after this step and checkpoint", the model file rewritten atomically at
 * every checkpoint, temporaries of killed runs cleaned, and the closing line.  The trainer itself
 * (training/trainer.h) is the library's; this is presentation and process handling only. */
#ifndef NF_APPS_TRAIN_RUN_H
#define NF_APPS_TRAIN_RUN_H

#include "training/model_file.h"

typedef struct app_train_run {
    const char *cmd;          /* "fit", "tpp fit": names the command in messages */
    const char *out;          /* the model file */
    nf_model *model;
    nf_model_meta *meta;
    int quiet;
} app_train_run;

/* Run t to its end or a stop request.  Returns the exit status: 0 done, 130 stopped (checkpoint
 * written, with the line saying how to resume), 1 an error (printed). */
int app_train_run_go(app_train_run *r, nf_trainer *t);

/* A model-kind fit command (nf tpp fit, nf causal fit, nf image fit, nf video fit) from its flags to
 * the end of training: app_kind_fit_open (the resumed model, or the checks and settings of a new
 * run), then the command's own data and model, then app_kind_fit_go and app_kind_fit_close. */
typedef struct app_kind_fit {
    const char *cmd, *out;
    const char *resume;       /* the model file when resuming (its trainer state is loaded), or NULL */
    const char *data, *dataset; /* recorded in the model file of a new model */
    double val_frac;
    nf_model *model;          /* owned: freed by app_kind_fit_close */
    nf_model_meta *meta;
    nf_train_config *tc;
    nf_source *all, *train, *val; /* owned: freed by app_kind_fit_close */
    int quiet;
    void (*describe)(void *user, const nf_model *m); /* the opening line(s), unless quiet; or NULL */
    void *user;
} app_kind_fit;

/* With f->resume, the model of kind `kind` in it (f->model), its training settings (*f->tc) and the
 * data file and validation share it was trained with (f->data, f->val_frac; f->out becomes the
 * resumed file).  Otherwise the checks of a new run (f->out may be written, is not the `input`
 * file f->data, and replaces an existing file only with force) and its seed, learning rate and
 * cosine schedule over f->tc->max_steps.  Returns NF_OK or the error, printed by app_kind_fit_go. */
int app_kind_fit_open(app_kind_fit *f, const char *kind, const char *input, int force, double lr, long seed);

/* The rest, the same for every kind: a trainer, the checkpoint's state when resuming, "already
 * finished" or the run (app_train_run_go).  rc: what building the model and sources returned (an
 * error is printed and ends it).  Returns the exit status; model and sources stay the caller's. */
int app_kind_fit_go(const app_kind_fit *f, int rc);

/* Free f's model and sources and end the MPI run (if any); returns status, the exit status. */
int app_kind_fit_close(app_kind_fit *f, int status);

/* Open the model file at path (meta may be NULL), refusing a model of another kind than `kind`
 * ("image", "video", ...) with one message naming the command that uses it; *m is NULL then. */
int app_open_model_kind(const char *path, const char *kind, nf_model **m, nf_model_meta *meta);

#endif
