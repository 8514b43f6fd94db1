/* training/model_tpp.h - the "tpp" model kind: intensity-free temporal point processes on event
 * sequences (formulas in training/model_tpp.c): a GRU history encoder (nn/gru.h), a decoder of the
 * next inter-event time (training/tpp_decoder.h) and a categorical mark head, trained by the one
 * trainer on a "sequences" source (datasets/sequences.h). */
#ifndef NF_MODEL_TPP_H
#define NF_MODEL_TPP_H

#include "training/model.h"
#include "training/tpp_decoder.h"

typedef struct nf_tpp_config {
    nf_tpp_decoder_kind decoder;  /* lognormmix (default), flow, exponential, rmtpp */
    int hidden;                   /* GRU width H (64) */
    int components;               /* lognormmix: K (64) */
    int flow_layers, flow_hidden; /* flow decoder: spline-ar layers (2) of width (64) */
    int mark_dim;                 /* mark embedding width (32); unused without marks */
    int num_marks;                /* mark types (0 or 1: no marks); set from the data by create */
    double shift, scale;          /* mean and sd of log tau; set from the data by create */
    uint64_t seed;                /* initial weights */
} nf_tpp_config;

extern const nf_model_type nf_model_tpp;

void nf_tpp_config_init(nf_tpp_config *c);
int nf_tpp_config_check(const nf_tpp_config *c);
/* A model for the training sequences (their log tau statistics and mark count fill the config;
 * train NULL: the config as given). */
int nf_model_tpp_create(nf_model **m, const nf_tpp_config *cfg, const nf_source *train);

#endif
