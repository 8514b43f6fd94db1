/* nf.h - everything libnf offers, in one include.  Compile with `pkg-config --cflags --libs nf`
 * (the build's real type is fixed at install time: check NF_REAL_NAME). */
#ifndef NF_H
#define NF_H

#include "core/error.h"
#include "core/rng.h"
#include "core/params.h"
#include "core/blas.h"
#include "core/opts.h"
#include "core/h5.h"
#include "core/import.h"
#include "core/ks.h"
#include "nn/nn.h"
#include "nn/conv2d.h"
#include "nn/transformer.h"
#include "distributions/dist.h"
#include "flows/bijector.h"
#include "flows/flow.h"
#include "training/optim.h"
#include "training/schedule.h"
#include "training/trainer.h"
#include "training/model_file.h"
#include "training/model_image.h"
#include "datasets/dataset.h"
#include "datasets/images.h"
#include "plot/plot.h"

#endif
