/* training/optim.c - Adam, AdamW and SGD with momentum over the parameter store; gradient clipping.
 * Formulas in training/optim.h.  Each entry is updated in double and stored back as nf_real. */
#include "training/optim.h"

#include <math.h>
#include <string.h>

/* Below this many entries a step runs on one thread: spawning threads costs more than it saves. */
#define NF_OPTIM_PAR_MIN 32768

static const char *const optim_names[] = {"adam", "adamw", "sgd"};

void nf_optim_init(nf_optim *o, nf_optim_type type)
{
    memset(o, 0, sizeof *o);
    o->type = type;
    o->lr = type == NF_OPTIM_SGD ? 1e-2 : 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = type == NF_OPTIM_ADAMW ? 1e-2 : 0.0;
    o->momentum = type == NF_OPTIM_SGD ? 0.9 : 0.0;
    o->t = 0;
}

int nf_optim_parse(const char *name, nf_optim_type *type)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, optim_names[i]) == 0) {
            *type = (nf_optim_type)i;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "unknown optimizer '%s': expected one of %s", name ? name : "(null)",
                    NF_OPTIM_NAMES);
}

const char *nf_optim_name(nf_optim_type type)
{
    return (unsigned)type < 3 ? optim_names[type] : "unknown";
}

int nf_optim_check(const nf_optim *o)
{
    if ((unsigned)o->type >= 3) return nf_error(NF_EINVAL, "optimizer type %d: expected %s", (int)o->type, NF_OPTIM_NAMES);
    const char *nm = nf_optim_name(o->type);
    if (!isfinite(o->lr) || o->lr < 0) return nf_error(NF_EINVAL, "%s: lr=%g, expected a finite number >= 0", nm, o->lr);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return nf_error(NF_EINVAL, "%s: weight_decay=%g, expected a finite number >= 0", nm, o->weight_decay);
    if (o->type == NF_OPTIM_SGD) {
        if (!(o->momentum >= 0 && o->momentum < 1))
            return nf_error(NF_EINVAL, "%s: momentum=%g, expected a number in [0, 1)", nm, o->momentum);
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1))
            return nf_error(NF_EINVAL, "%s: beta1=%g, expected a number in [0, 1)", nm, o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1))
            return nf_error(NF_EINVAL, "%s: beta2=%g, expected a number in [0, 1)", nm, o->beta2);
        if (!(o->eps > 0) || !isfinite(o->eps))
            return nf_error(NF_EINVAL, "%s: eps=%g, expected a finite number > 0", nm, o->eps);
    }
    if (o->t < 0) return nf_error(NF_EINVAL, "%s: step counter t=%lld, expected >= 0", nm, (long long)o->t);
    return NF_OK;
}

/* Index of the first non-finite gradient, or -1.  (A min-reduction, so the answer is deterministic.) */
static long first_nonfinite(const nf_params *P)
{
    const long n = (long)P->n;
    long first = n;
    const nf_real *g = P->grad;
#pragma omp parallel for schedule(static) reduction(min : first) if (n > NF_OPTIM_PAR_MIN)
    for (long i = 0; i < n; i++)
        if (!isfinite(g[i]) && i < first) first = i;
    return first < n ? first : -1;
}

int nf_optim_step(nf_optim *o, nf_params *P, double lr)
{
    NF_TRY(nf_optim_check(o));
    const char *nm = nf_optim_name(o->type);
    if (!isfinite(lr) || lr < 0) return nf_error(NF_EINVAL, "%s: step lr=%g, expected a finite number >= 0", nm, lr);
    long bad = first_nonfinite(P);
    if (bad >= 0) {
        const char *slice = "?";
        for (size_t s = 0; s < P->nslices; s++)
            if ((size_t)bad >= P->slices[s].offset && (size_t)bad < P->slices[s].offset + P->slices[s].size)
                slice = P->slices[s].name;
        return nf_error(NF_ENONFINITE, "%s: gradient entry %ld (parameter '%s') is not finite; step refused", nm,
                        bad, slice);
    }
    o->t++;
    const long n = (long)P->n;
    nf_real *restrict th = P->value, *restrict m = P->m, *restrict v = P->v;
    const nf_real *restrict g = P->grad;
    const double wd = o->weight_decay;

    if (o->type == NF_OPTIM_SGD) {
        /* g' = g + wd theta;  m = mu m + g' (m starts at 0, so m = g' at t = 1);  theta -= lr m */
        const double mu = o->momentum;
#pragma omp parallel for schedule(static) if (n > NF_OPTIM_PAR_MIN)
        for (long i = 0; i < n; i++) {
            double gi = (double)g[i] + wd * th[i];
            if (mu > 0) {
                double mi = mu * m[i] + gi;
                m[i] = (nf_real)mi;
                gi = mi;
            }
            th[i] = (nf_real)(th[i] - lr * gi);
        }
        return NF_OK;
    }

    /* Adam / AdamW: step = lr / (1 - b1^t),  denom = sqrt(v) / sqrt(1 - b2^t) + eps (as torch). */
    const double b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    const double bc1 = 1.0 - pow(b1, (double)o->t), bc2 = 1.0 - pow(b2, (double)o->t);
    const double step = lr / bc1, rbc2 = 1.0 / sqrt(bc2);
    const double l2 = o->type == NF_OPTIM_ADAM ? wd : 0.0;
    const double decay = o->type == NF_OPTIM_ADAMW ? 1.0 - lr * wd : 1.0;
#pragma omp parallel for schedule(static) if (n > NF_OPTIM_PAR_MIN)
    for (long i = 0; i < n; i++) {
        double ti = th[i];
        double gi = (double)g[i] + l2 * ti;
        ti *= decay;
        double mi = b1 * m[i] + (1.0 - b1) * gi;
        double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = (nf_real)mi;
        v[i] = (nf_real)vi;
        th[i] = (nf_real)(ti - step * mi / (sqrt(vi) * rbc2 + eps));
    }
    return NF_OK;
}

double nf_clip_grad_norm(nf_params *P, double max_norm)
{
    /* Serial sum in double (nf_params_grad_norm): same value whatever the thread count. */
    const double norm = nf_params_grad_norm(P);
    if (!(max_norm > 0) || !isfinite(norm)) return norm;
    const double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    const long n = (long)P->n;
    nf_real *g = P->grad;
#pragma omp parallel for schedule(static) if (n > NF_OPTIM_PAR_MIN)
    for (long i = 0; i < n; i++) g[i] = (nf_real)(g[i] * coef);
    return norm;
}
