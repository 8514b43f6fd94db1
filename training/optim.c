/* training/optim.c - Adam, AdamW and SGD with momentum over the parameter store; gradient clipping.
 * Formulas in training/optim.h.  Each entry is updated in nf_real arithmetic (float32 in the default
 * build, as torch.optim computes for float32 parameters); the per-step constants are computed in
 * double.  The loops are branch-free so the compiler vectorises them: the step is bound by the
 * memory traffic of its four arrays. */
#include "training/optim.h"

#include <math.h>
#include <string.h>

#include "core/blas.h"
#include "core/threads.h"
#include "flows/fastmath.h"
#include "core/simd.h"

/* Below this many entries a step runs on one thread: spawning threads costs more than it saves. */
#define NF_OPTIM_PAR_MIN 32768

#ifdef NF_DOUBLE
#define real_sqrt sqrt
#else
#define real_sqrt sqrtf
#endif

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

/* One step's constants; a part updates entries [n p / parts, n (p + 1) / parts). */
typedef struct step_job {
    nf_optim_type type;
    nf_params *P;
    long n;
    nf_real wd, lr, mu;                                 /* SGD (wd also Adam's L2) */
    nf_real b1, b2, c1, c2, eps, step, rbc2, l2, decay; /* Adam / AdamW */
} step_job;

NF_SIMD_CLONES static void step_part(void *arg, int part, int parts)
{
    const step_job *j = arg;
    const long i0 = j->n * part / parts, i1 = j->n * (part + 1) / parts;
    nf_real *restrict th = j->P->value, *restrict m = j->P->m, *restrict v = j->P->v;
    const nf_real *restrict g = j->P->grad;
    if (j->type == NF_OPTIM_SGD) {
        /* g' = g + wd theta;  m = mu m + g' (m starts at 0, so m = g' at t = 1);  theta -= lr m */
        const nf_real mu = j->mu, wd = j->wd, lr = j->lr;
        if (mu > 0) {
#pragma omp simd
            for (long i = i0; i < i1; i++) {
                nf_real mi = mu * m[i] + (g[i] + wd * th[i]);
                m[i] = mi;
                th[i] -= lr * mi;
            }
        } else {
#pragma omp simd
            for (long i = i0; i < i1; i++) th[i] -= lr * (g[i] + wd * th[i]);
        }
        return;
    }
    const nf_real b1 = j->b1, b2 = j->b2, c1 = j->c1, c2 = j->c2, eps = j->eps, step = j->step, rbc2 = j->rbc2,
                  l2 = j->l2, decay = j->decay;
#pragma omp simd
    for (long i = i0; i < i1; i++) {
        nf_real ti = th[i];
        nf_real gi = g[i] + l2 * ti;
        nf_real mi = b1 * m[i] + c1 * gi;
        nf_real vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        th[i] = ti * decay - step * mi / (real_sqrt(vi) * rbc2 + eps);
    }
}

/* Run an elementwise job over n entries on the worker pool (core/threads.h: its threads are already
 * awake from the step's network passes, where an OpenMP region would wake sleeping ones). */
static void run_parts(long n, nf_part_fn *fn, void *arg)
{
    const int T = n > NF_OPTIM_PAR_MIN ? nf_blas_get_threads() : 1;
    nf_threads_run(T, T, fn, arg);
}

typedef struct scale_job {
    nf_real *g, c;
    long n;
} scale_job;

NF_SIMD_CLONES static void scale_part(void *arg, int part, int parts)
{
    const scale_job *j = arg;
    const long i0 = j->n * part / parts, i1 = j->n * (part + 1) / parts;
#pragma omp simd
    for (long i = i0; i < i1; i++) j->g[i] *= j->c;
}

/* Index of the first non-finite gradient, or -1.  Only called once the fast test
 * (nf_any_nonfinite) has found one, to name it. */
static long first_nonfinite(const nf_params *P)
{
    for (size_t i = 0; i < P->n; i++)
        if (!isfinite(P->grad[i])) return (long)i;
    return -1;
}

int nf_optim_step(nf_optim *o, nf_params *P, double lr)
{
    NF_TRY(nf_optim_check(o));
    const char *nm = nf_optim_name(o->type);
    if (!isfinite(lr) || lr < 0) return nf_error(NF_EINVAL, "%s: step lr=%g, expected a finite number >= 0", nm, lr);
    if (nf_any_nonfinite(P->grad, P->n)) {
        long bad = first_nonfinite(P) + (long)P->base; /* an entry of the whole store */
        const char *slice = "?";
        for (size_t s = 0; s < P->nslices; s++)
            if ((size_t)bad >= P->slices[s].offset && (size_t)bad < P->slices[s].offset + P->slices[s].size)
                slice = P->slices[s].name;
        return nf_error(NF_ENONFINITE, "%s: gradient entry %ld (parameter '%s') is not finite; step refused", nm,
                        bad, slice);
    }
    o->t++;
    step_job j = {.type = o->type, .P = P, .n = (long)P->n, .wd = (nf_real)o->weight_decay, .lr = (nf_real)lr,
                  .mu = (nf_real)o->momentum};
    if (o->type != NF_OPTIM_SGD) {
        /* Adam / AdamW: step = lr / (1 - b1^t),  denom = sqrt(v) / sqrt(1 - b2^t) + eps (as torch). */
        const double bc1 = 1.0 - pow(o->beta1, (double)o->t), bc2 = 1.0 - pow(o->beta2, (double)o->t);
        j.b1 = (nf_real)o->beta1, j.b2 = (nf_real)o->beta2, j.eps = (nf_real)o->eps;
        j.c1 = (nf_real)(1.0 - o->beta1), j.c2 = (nf_real)(1.0 - o->beta2);
        j.step = (nf_real)(lr / bc1), j.rbc2 = (nf_real)(1.0 / sqrt(bc2));
        j.l2 = o->type == NF_OPTIM_ADAM ? j.wd : 0;
        j.decay = (nf_real)(o->type == NF_OPTIM_ADAMW ? 1.0 - lr * o->weight_decay : 1.0);
    }
    run_parts(j.n, step_part, &j);
    return NF_OK;
}

double nf_clip_grad_norm(nf_params *P, double max_norm)
{
    /* One-thread sum in double (nf_params_grad_norm): the same value whatever the thread count. */
    const double norm = nf_params_grad_norm(P);
    if (!(max_norm > 0) || !isfinite(norm)) return norm;
    const double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    scale_job j = {P->grad, (nf_real)coef, (long)P->n};
    run_parts(j.n, scale_part, &j);
    return norm;
}
