/* training/optim.h - first-order optimizers over the parameter store, and gradient-norm clipping.
 *
 * An nf_optim is a plain configuration plus the step counter t, so a checkpoint saves it as a few
 * numbers and the moments P->m, P->v as datasets of the store; restoring both resumes exactly.
 * One step is one loop over all entries of P (threaded when the store is large; every entry is
 * independent, so the result does not depend on the thread count).  The formulas are PyTorch's
 * (torch.optim.Adam, AdamW, SGD), with g = P->grad, theta = P->value, t counted from 1:
 *
 *   ADAM   g' = g + wd theta                       (L2 penalty added to the gradient)
 *          m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *          theta -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   ADAMW  theta *= 1 - lr wd                      (decoupled decay), then ADAM with wd = 0
 *   SGD    g' = g + wd theta;  m = mu m + g' (m = g' at t = 1);  theta -= lr m
 *          (momentum mu = 0 is plain SGD; P->m is the momentum buffer, P->v is unused)
 *
 * Typical use, with lr from the schedule (training/schedule.h):
 *
 *   nf_optim o;  nf_optim_init(&o, NF_OPTIM_ADAM);  o.lr = 2e-3;
 *   double norm = nf_clip_grad_norm(P, 5.0);
 *   rc = nf_optim_step(&o, P, nf_schedule_lr(&sched, o.t));
 */
#ifndef NF_OPTIM_H
#define NF_OPTIM_H

#include "core/params.h"

typedef enum nf_optim_type { NF_OPTIM_ADAM = 0, NF_OPTIM_ADAMW = 1, NF_OPTIM_SGD = 2 } nf_optim_type;

#define NF_OPTIM_NAMES "adam|adamw|sgd"

typedef struct nf_optim {
    nf_optim_type type;
    double lr;            /* base learning rate (a schedule scales it; nf_optim_step takes the rate to use) */
    double beta1, beta2;  /* Adam moment decays, in [0, 1) */
    double eps;           /* Adam denominator floor, > 0 */
    double weight_decay;  /* >= 0: L2 for ADAM and SGD, decoupled for ADAMW */
    double momentum;      /* SGD momentum, in [0, 1) */
    int64_t t;            /* steps taken so far (saved in checkpoints) */
} nf_optim;

/* PyTorch's defaults for the type: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 (0.01 for
 * ADAMW); SGD: lr 1e-2, momentum 0.9, weight_decay 0.  t = 0. */
void nf_optim_init(nf_optim *o, nf_optim_type type);
/* "adam" | "adamw" | "sgd" -> *type; NF_EINVAL naming the text and the choices otherwise. */
int nf_optim_parse(const char *name, nf_optim_type *type);
const char *nf_optim_name(nf_optim_type type);
/* NF_OK if the configuration is usable, else NF_EINVAL naming the field and its range. */
int nf_optim_check(const nf_optim *o);

/* One update of every entry of P with learning rate lr (>= 0, finite), t incremented first.
 * Refuses (NF_ENONFINITE, P and o untouched) if any gradient is NaN or infinite, and NF_EINVAL for a
 * bad configuration or lr.  Gradients are read, not cleared. */
int nf_optim_step(nf_optim *o, nf_params *P, double lr);

/* As torch.nn.utils.clip_grad_norm_: returns the total norm ||g||_2 before clipping and, when it
 * exceeds max_norm (> 0), scales g by max_norm / (norm + 1e-6).  max_norm <= 0 only measures.
 * A non-finite norm is returned as is and the gradients are left untouched (the caller decides). */
double nf_clip_grad_norm(nf_params *P, double max_norm);

#endif
