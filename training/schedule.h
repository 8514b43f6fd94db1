/* training/schedule.h - learning-rate schedules: the rate as a pure function of the step number.
 *
 * nf_schedule_lr(s, t) depends only on the configuration and t (the number of optimizer steps
 * already taken, so pass nf_optim.t before the step), never on history: a run resumed from a
 * checkpoint at step t continues with exactly the rates it would have used.  With base rate lr,
 * warm-up W >= 0 steps and w(t) = (t + 1) / W for t < W (else 1), so the first step already moves:
 *
 *   constant   lr w(t)
 *   step       lr w(t) gamma^floor(t / every)                         (torch StepLR, plus warm-up)
 *   cosine     lr w(t)                                                 t < W
 *              lr (f + (1 - f) (1 + cos(pi p)) / 2),  p = (t - W) / (T - W)   W <= t < T
 *              lr f                                                    t >= T
 *
 * where T = total steps and f = final_frac (the final rate as a fraction of lr).  Negative t is 0.
 */
#ifndef NF_SCHEDULE_H
#define NF_SCHEDULE_H

#include "core/error.h"

typedef enum nf_schedule_type { NF_SCHED_CONSTANT = 0, NF_SCHED_COSINE = 1, NF_SCHED_STEP = 2 } nf_schedule_type;

#define NF_SCHEDULE_NAMES "constant|cosine|step"

typedef struct nf_schedule {
    nf_schedule_type type;
    double lr;          /* base (peak) rate, >= 0 */
    long warmup;        /* W: linear warm-up steps, >= 0 (0: none) */
    long total;         /* T: cosine: steps over which to decay, > warmup */
    double final_frac;  /* f: cosine: final rate / lr, in [0, 1] */
    long every;         /* step: decay period in steps, >= 1 */
    double gamma;       /* step: factor per period, in (0, 1] */
} nf_schedule;

/* Defaults: warmup 0, total 10000, final_frac 0, every 1000, gamma 0.5. */
void nf_schedule_init(nf_schedule *s, nf_schedule_type type, double lr);
/* "constant" | "cosine" | "step" -> *type; NF_EINVAL naming the text and the choices otherwise. */
int nf_schedule_parse(const char *name, nf_schedule_type *type);
const char *nf_schedule_name(nf_schedule_type type);
/* NF_OK if the fields the type uses are in range, else NF_EINVAL naming the field. */
int nf_schedule_check(const nf_schedule *s);
/* The learning rate for the step taken after `step` steps (formulas above). */
double nf_schedule_lr(const nf_schedule *s, long step);

#endif
