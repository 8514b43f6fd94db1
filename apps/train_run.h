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

/* What a model-kind fit command (nf tpp fit, nf causal fit, nf image fit) has built before training:
 * its model and sources (new, or the resumed model with the sources its file names). */
typedef struct app_kind_fit {
    const char *cmd, *out;
    const char *resume;       /* the model file when resuming (its trainer state is loaded), or NULL */
    const char *data, *dataset; /* recorded in the model file of a new model */
    double val_frac;
    nf_model *model;
    nf_model_meta *meta;
    const nf_train_config *tc;
    const nf_source *train, *val;
    int quiet;
    void (*describe)(void *user, const nf_model *m); /* the opening line(s), unless quiet; or NULL */
    void *user;
} app_kind_fit;

/* The rest, the same for every kind: a trainer, the checkpoint's state when resuming, "already
 * finished" or the run (app_train_run_go).  rc: what building the model and sources returned (an
 * error is printed and ends it).  Returns the exit status; model and sources stay the caller's. */
int app_kind_fit_go(const app_kind_fit *f, int rc);

/* Open the model file at path (meta may be NULL), refusing a model of another kind than `kind`
 * ("image", "video", ...) with one message naming the command that uses it; *m is NULL then. */
int app_open_model_kind(const char *path, const char *kind, nf_model **m, nf_model_meta *meta);

#endif
