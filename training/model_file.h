/* training/model_file.h - the model file: a model, how it was trained, and how to resume training.
 *
 * One HDF5 file (format "nf-model", version 2; layout in docs/FORMATS.md) holds the model's kind,
 * one group per component with its configuration (a flow's spec, dimensions and construction seed;
 * a target's name and options), the model's one parameter store and state (so nf_model_open
 * rebuilds it exactly), what data it was fit on, the training settings and history, and, when a
 * trainer is given, everything nf_trainer_load needs to resume.  Version-1 files (a density flow,
 * attributes on /model) still load.  Files are written atomically (temporary name, then rename), so
 * a checkpoint replaced while the process is killed leaves either the old or the new file.
 */
#ifndef NF_MODEL_FILE_H
#define NF_MODEL_FILE_H

#include "datasets/names.h"
#include "training/trainer.h"

#define NF_MODEL_FORMAT "nf-model"
#define NF_MODEL_VERSION 2

typedef struct nf_model_meta {
    char data_path[1024];     /* the training data file */
    char data_dataset[128];   /* dataset inside it ("/x") */
    char val_path[1024];      /* separate validation file, or "" */
    double val_frac;          /* held-out fraction when val_path is "" */
    long n_train, n_val;
    char preset[64];          /* preset name if the spec came from one, else "" */
    int stream;               /* 1: training rows were read from the file batch by batch */
    const nf_data_names *names; /* save: the training data's column and context names, written as
                                   /data/columns and /data/context_names when not NULL; open: NULL
                                   (read them with nf_data_names_load(.., path, "/data", d, c)) */
} nf_model_meta;

/* Write the model (+ trainer state and config when t is not NULL) to path atomically. */
int nf_model_save(const char *path, const nf_model *m, const nf_model_meta *meta, const nf_trainer *t);
/* Rebuild the model of any kind from path; meta may be NULL. */
int nf_model_open(const char *path, nf_model **m, nf_model_meta *meta);
/* The kind stored in path ("density" for version-1 files) into kind[size]. */
int nf_model_file_kind(const char *path, char *kind, size_t size);
/* Rebuild the flow of a model that has one with its own store (density, variational) - what
 * nf eval, logprob, sample and plot work on.  A model of a kind without such a flow is an error
 * naming the kind found and the command that handles it. */
int nf_model_load(const char *path, nf_flow **flow, nf_model_meta *meta);
/* Training settings stored in the file (for --resume); NF_EFORMAT if the file has none. */
int nf_model_load_train_config(const char *path, nf_train_config *cfg);
/* Restore a trainer created for the loaded flow from the file's checkpoint. */
int nf_model_load_trainer(const char *path, nf_trainer *t);
/* 1 if the file holds a resumable checkpoint. */
int nf_model_has_checkpoint(const char *path);

#endif
