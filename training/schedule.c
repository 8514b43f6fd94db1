/* training/schedule.c - learning-rate schedules (formulas in training/schedule.h). */
#include "training/schedule.h"

#include <math.h>
#include <string.h>

static const char *const schedule_names[] = {"constant", "cosine", "step"};

void nf_schedule_init(nf_schedule *s, nf_schedule_type type, double lr)
{
    memset(s, 0, sizeof *s);
    s->type = type;
    s->lr = lr;
    s->warmup = 0;
    s->total = 10000;
    s->final_frac = 0.0;
    s->every = 1000;
    s->gamma = 0.5;
}

int nf_schedule_parse(const char *name, nf_schedule_type *type)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, schedule_names[i]) == 0) {
            *type = (nf_schedule_type)i;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "unknown learning-rate schedule '%s': expected one of %s", name ? name : "(null)",
                    NF_SCHEDULE_NAMES);
}

const char *nf_schedule_name(nf_schedule_type type)
{
    return (unsigned)type < 3 ? schedule_names[type] : "unknown";
}

int nf_schedule_check(const nf_schedule *s)
{
    if ((unsigned)s->type >= 3)
        return nf_error(NF_EINVAL, "schedule type %d: expected %s", (int)s->type, NF_SCHEDULE_NAMES);
    const char *nm = nf_schedule_name(s->type);
    if (!isfinite(s->lr) || s->lr < 0) return nf_error(NF_EINVAL, "%s schedule: lr=%g, expected >= 0", nm, s->lr);
    if (s->warmup < 0) return nf_error(NF_EINVAL, "%s schedule: warmup=%ld, expected >= 0", nm, s->warmup);
    if (s->type == NF_SCHED_COSINE) {
        if (s->total <= s->warmup)
            return nf_error(NF_EINVAL, "cosine schedule: total=%ld steps, expected more than warmup=%ld", s->total,
                            s->warmup);
        if (!(s->final_frac >= 0 && s->final_frac <= 1))
            return nf_error(NF_EINVAL, "cosine schedule: final_frac=%g, expected a number in [0, 1]", s->final_frac);
    }
    if (s->type == NF_SCHED_STEP) {
        if (s->every < 1) return nf_error(NF_EINVAL, "step schedule: every=%ld, expected >= 1", s->every);
        if (!(s->gamma > 0 && s->gamma <= 1))
            return nf_error(NF_EINVAL, "step schedule: gamma=%g, expected a number in (0, 1]", s->gamma);
    }
    return NF_OK;
}

double nf_schedule_lr(const nf_schedule *s, long step)
{
    const double pi = 3.14159265358979323846;
    if (step < 0) step = 0;
    const double warm = step < s->warmup ? (double)(step + 1) / (double)s->warmup : 1.0;
    switch (s->type) {
    case NF_SCHED_STEP: {
        const long every = s->every > 0 ? s->every : 1;
        return s->lr * warm * pow(s->gamma, (double)(step / every));
    }
    case NF_SCHED_COSINE: {
        if (step < s->warmup) return s->lr * warm;
        if (step >= s->total) return s->lr * s->final_frac;
        const double p = (double)(step - s->warmup) / (double)(s->total - s->warmup);
        return s->lr * (s->final_frac + (1.0 - s->final_frac) * 0.5 * (1.0 + cos(pi * p)));
    }
    case NF_SCHED_CONSTANT:
    default:
        return s->lr * warm;
    }
}
