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

#endif
