/* training/model_image.h - the "image" model kind: flows on images, scored in bits per dimension.
 *
 * An image (h, w, c) of integer grey levels 0..L-1 (datasets/images.h; NHWC rows of D = h*w*c
 * values) is modelled by a flow on R^D after uniform dequantisation into the unit cube, centred:
 *
 *   y = (x + u) / L - 1/2,   u ~ U(0, 1)^D,
 *   log P(x) >= E_u[ log p(y) ] - D log L                           (Theis et al. 2016; Ho et al. 2019)
 *   bits/dim = -(log p(y) - D log L) / (D ln 2),
 *
 * which is what the image-flow literature reports.  Training minimises the batch mean of bits/dim
 * (one fresh u per image and step); evaluation reports -bits/dim per image (higher is better), one
 * dequantisation draw per image from a stream seeded by the image's index, so the number is
 * reproducible.  With noise augmentation (TarFlow) y + sigma * eps is what the flow sees in
 * training; evaluation stays on the dequantised data.
 *
 * The flow is an ordinary nf_flow over D dimensions (and the class one-hot as context when the data
 * has classes), built from a spec that nf_image_spec generates from the architecture:
 *   glow      per scale: squeeze, K x (actnorm2d, conv1x1, coupling2d mask=channel), split
 *   realnvp   per scale: 3 checkerboard couplings, squeeze, 3 channel couplings, split; at the
 *             last scale 4 checkerboard couplings
 *   tarflow   K blocks of the transformer autoregressive flow over patch tokens, token order
 *             reversed between blocks
 *   spec      any spec the user writes over D dimensions (flows/flow.h)
 * The image bijectors act on the image in the first h*w*c entries of their input and pass the rest
 * through: that is how split factors dimensions out to the base (flows/squeeze.c, flows/split.c).
 *
 * Variational dequantisation (dequant = variational; Ho et al. 2019, Flow++): u is drawn from a
 * learned q(u | x) (training/image_dequant.h: u = sigmoid(v), v a conditional coupling flow of
 * eps ~ N(0, I) whose conv conditioners see the clean image), and every bits/dim becomes the
 * variational bound
 *     bits/dim = -(log p(y) - D log L - log q(u | x)) / (D ln 2),   y = (x + u) / L - 1/2,
 * an upper bound on -log2 P(x) / D in expectation over q (uniform: log q = 0, the formula above).
 * Training minimises its batch mean over the flow's and the dequantiser's parameters jointly: the
 * flow's input gradient dL/dy reaches v through du/dv = sigmoid'(v) / L, the -log q term adds
 * dL/dv = -(1 - 2 sigmoid(v)) / (n D ln 2) and dL/dlog q(v | x) = 1 / (n D ln 2), and the
 * dequantiser's backward takes both to its parameters (one store: "dequant.*" after the flow's
 * entries).  eps is keyed like u (the same keys, other streams), so evaluation is one reproducible
 * draw per image and training noise is the same in any number of processes.  Sampling does not use
 * the dequantiser; the likelihood classifier scores every class with the same u (the q term is then
 * the same for every class).  Not with alignment.
 *
 * Class-conditional models see the class as a one-hot context; with label_drop > 0 training
 * replaces the class by the all-zero context with that probability, so the same flow is also the
 * unconditional model (classifier-free guidance needs both).
 *
 * Reverse representation alignment (align = 1; TarFlow on data with classes; training/image_align.h
 * has the formulas): the model trains in two stages over one store, "encoder" (a small
 * convolutional classifier of the clean image, by cross-entropy; its loss and validation numbers are
 * cross-entropies in nats) and "flow" (the flow and one projection per aligned block, the encoder
 * held fixed), whose loss is
 *     mean bits/dim + align_weight * sum over aligned generative blocks of mean (1 - cos)
 * while its validation metric stays bits/dim.  Such a model is of the type nf_model_image_aligned
 * (kind "image" in files, so nf_model_open finds it); without alignment nothing changes.
 */
#ifndef NF_MODEL_IMAGE_H
#define NF_MODEL_IMAGE_H

#include "training/model.h"

typedef enum nf_image_arch {
    NF_IMAGE_GLOW = 0, NF_IMAGE_REALNVP = 1, NF_IMAGE_TARFLOW = 2, NF_IMAGE_SPEC = 3
} nf_image_arch;
#define NF_IMAGE_ARCH_NAMES "glow|realnvp|tarflow"
int nf_image_arch_parse(const char *name, nf_image_arch *arch);
const char *nf_image_arch_name(nf_image_arch arch);

#define NF_IMAGE_SPEC_MAX 8192

typedef enum nf_image_dequant_kind { NF_DEQUANT_UNIFORM = 0, NF_DEQUANT_VARIATIONAL = 1 } nf_image_dequant_kind;
#define NF_DEQUANT_NAMES "uniform|variational"
int nf_image_dequant_parse(const char *name, nf_image_dequant_kind *kind);
const char *nf_image_dequant_name(nf_image_dequant_kind kind);

typedef struct nf_image_config {
    int h, w, c;          /* image shape (NHWC) */
    int levels;           /* grey levels L (pixels are 0..L-1) */
    int classes;          /* 0: unconditional; K: class-conditional on a one-hot context */
    nf_image_arch arch;
    char spec[NF_IMAGE_SPEC_MAX]; /* arch spec: the flow spec; otherwise filled by create */
    /* multi-scale (glow, realnvp) */
    int scales;           /* squeeze levels (2); at most log2 of the smaller side */
    int steps;            /* flow steps per scale (glow: 4) */
    int hidden;           /* conditioner channels (64) */
    /* tarflow */
    int patch;            /* patch side p: tokens are p x p x c patches (2) */
    int width;            /* transformer width (64) */
    int heads;            /* attention heads (4) */
    int layers;           /* transformer layers per block (2) */
    int blocks;           /* flow blocks (4) */
    /* training */
    double noise;         /* std of Gaussian noise added to y in training (0: none; TarFlow 0.05) */
    double label_drop;    /* probability of training on the empty class (0.1 with classes) */
    uint64_t seed;        /* weights */
    /* reverse representation alignment */
    int align;            /* 0: off; 1: stages "encoder" then "flow" */
    int align_classes;    /* classes of the data the encoder learns (>= 2; = classes when conditional) */
    double align_weight;  /* weight of the alignment loss (0.5) */
    uint64_t align_layers;/* aligned generative blocks: bit j = block j (block 0 runs first in sampling) */
    /* dequantisation */
    nf_image_dequant_kind dequant; /* uniform (default) or variational (a learned q(u | x)) */
    int dequant_layers;   /* variational: couplings of the dequantiser (4) */
    int dequant_hidden;   /* variational: channels of their conditioners (16) */
    int micro_batch;      /* images per forward and backward pass of a training batch (0: about 1,024
                             values' worth; training/model_image.c, micro-batches) */
} nf_image_config;

/* nf_model_image_vdequant: the same kind ("image" in files) with variational dequantisation. */
extern const nf_model_type nf_model_image, nf_model_image_aligned, nf_model_image_vdequant;

void nf_image_config_init(nf_image_config *c);
/* Checks the configuration (shape, levels, architecture limits) with a message naming the field. */
int nf_image_config_check(const nf_image_config *c);
/* Parse a list of generative block indices "0" or "0,2" into a bit mask; NF_EINVAL naming the list. */
int nf_image_align_layers_parse(const char *list, uint64_t *mask);
/* The list back as text ("0,2"). */
void nf_image_align_layers_format(uint64_t mask, char *buf, size_t size);
/* The flow spec of the configuration's architecture (the spec itself for NF_IMAGE_SPEC). */
int nf_image_spec(const nf_image_config *c, char *spec, size_t size);
int nf_model_image_create(nf_model **m, const nf_image_config *cfg);
/* The configuration of an image model (NULL for another kind). */
const nf_image_config *nf_model_image_config(const nf_model *m);

/* An aligned model's stage-"flow" terms on n images x with their one-hot contexts ctx (n, classes of
 * the data), deterministic dequantisation, evaluation mode: *bpd the mean bits/dim and *align the
 * alignment loss (weight included) at the model's parameters. */
int nf_model_image_align_terms(nf_model *m, const nf_real *x, const nf_real *ctx, int n, double *bpd, double *align);
/* The aligned model's encoder as a classifier: the fraction of n images x whose one-hot context ctx
 * (n, classes) it gets right. */
int nf_model_image_encoder_accuracy(nf_model *m, const nf_real *x, const nf_real *ctx, int n, double *acc);

/* Bits per dimension of n images x (n, D) in level units given their classes (NULL: unconditional,
 * the all-zero context), one dequantisation draw each from rng (variational: the bound with one eps
 * each); bpd (n). */
int nf_model_image_bpd(nf_model *m, nf_real *bpd, const nf_real *x, const int *classes, int n, nf_rng *rng);

/* Draw n images: z ~ N(0, T^2 I) through the inverse flow (T = temperature, 1 is the model), then
 * back to level units, x = (y + 1/2) L - 1/2, clamped to [0, L-1] (not rounded); classes (n) or
 * NULL.  denoise > 0: one score step y + s^2 grad log p(y) with s = the training noise (TarFlow's
 * denoising of samples from a noise-augmented model; no-op when the model had no noise). */
int nf_model_image_sample(nf_model *m, nf_real *x, const int *classes, int n, double temperature, int denoise,
                          nf_rng *rng);

/* The likelihood classifier: for each image, the class c maximising log p(x | c) + log prior[c]
 * (prior NULL: uniform), with the same dequantisation draw for every class.  pred (n); logp (n, K)
 * the class-conditional log-densities log p(y | c) - log q(u | x) when not NULL (uniform: log q = 0). */
int nf_model_image_classify(nf_model *m, int *pred, double *logp, const nf_real *x, const double *prior, int n,
                            nf_rng *rng);
/* The classifier's prior of a class-conditional model: prior (classes) = (n_c + 1) / (n + classes),
 * n_c the training images of class c counted when the model was created (add-one, so that no class is
 * ruled out); uniform for files written before the counts were kept.  Returns 1 when the counts are
 * known, 0 otherwise (also for a model that is not class-conditional, prior untouched). */
int nf_model_image_class_prior(const nf_model *m, double *prior);

#endif
