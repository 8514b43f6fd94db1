/* nn/activation.c - elementwise activations and their derivatives.
 *
 * Each forward is y = f(x) over n entries; each backward is dx (+)= dy * f'(x), written with y = f(x)
 * where that is cheaper (tanh, sigmoid, elu, selu).  The switch sits outside the loops so each loop
 * is a plain map, marked `omp simd` (entries are independent even when y aliases x, which lets the
 * compiler vectorise without alias checks); large arrays (n > NF_ACT_PAR_MIN) are split over OpenMP
 * threads.
 */
#include "nn/nn.h"

#include <math.h>
#include <string.h>

#define NF_ACT_PAR_MIN 32768

#ifdef NF_DOUBLE
#define EXP exp
#define EXPM1 expm1
#define TANH tanh
#define ERF erf
#else
#define EXP expf
#define EXPM1 expm1f
#define TANH tanhf
#define ERF erff
#endif

/* SELU's fixed point constants (Klambauer et al. 2017). */
#define SELU_LAMBDA ((nf_real)1.0507009873554804934193349852946)
#define SELU_ALPHA ((nf_real)1.6732632423543772848170429916717)
#define INV_SQRT2 ((nf_real)0.70710678118654752440)
#define INV_SQRT2PI ((nf_real)0.39894228040143267794)

static const char *const act_names[] = {"relu", "leaky-relu", "elu", "selu", "tanh",
                                        "sigmoid", "gelu", "silu", "identity"};
#define NACT ((int)(sizeof act_names / sizeof act_names[0]))

int nf_activation_parse(const char *name, nf_activation *out)
{
    for (int i = 0; i < NACT; i++)
        if (name && strcmp(name, act_names[i]) == 0) {
            *out = (nf_activation)i;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "activation '%s' is unknown; expected one of " NF_ACTIVATION_CHOICES,
                    name ? name : "(null)");
}

const char *nf_activation_name(nf_activation a)
{
    return (int)a >= 0 && (int)a < NACT ? act_names[a] : "unknown";
}

/* Numerically stable logistic function: never exponentiates a large positive number. */
static inline nf_real sigm(nf_real v)
{
    if (v >= 0) return 1 / (1 + EXP(-v));
    nf_real e = EXP(v);
    return e / (1 + e);
}

static inline nf_real silu_grad(nf_real v)
{
    nf_real sg = sigm(v);
    return sg * (1 + v * (1 - sg));
}

/* y[i] = EXPR(v) with v = x[i]. */
#define MAP(EXPR)                                                                                       \
    do {                                                                                                \
        if (n > NF_ACT_PAR_MIN) {                                                                       \
            _Pragma("omp parallel for simd schedule(static)") for (size_t i = 0; i < n; i++) {         \
                nf_real v = x[i];                                                                       \
                y[i] = (EXPR);                                                                          \
            }                                                                                           \
        } else {                                                                                        \
            _Pragma("omp simd") for (size_t i = 0; i < n; i++) {                                        \
                nf_real v = x[i];                                                                       \
                y[i] = (EXPR);                                                                          \
            }                                                                                           \
        }                                                                                               \
    } while (0)

/* y = f(x):
 *   relu max(0,x); leaky x>0 ? x : s x; elu x>0 ? x : e^x - 1; selu l (x>0 ? x : a (e^x - 1));
 *   tanh; sigmoid 1/(1+e^-x); gelu x Phi(x) = x (1 + erf(x/sqrt2))/2; silu x sigmoid(x); identity. */
void nf_act_forward_ex(nf_activation a, double slope, nf_real *y, const nf_real *x, size_t n)
{
    const nf_real s = (nf_real)slope;
    switch (a) {
    case NF_ACT_RELU: MAP(v > 0 ? v : 0); break;
    case NF_ACT_LEAKY_RELU: MAP(v > 0 ? v : s * v); break;
    case NF_ACT_ELU: MAP(v > 0 ? v : EXPM1(v)); break;
    case NF_ACT_SELU: MAP(v > 0 ? SELU_LAMBDA * v : SELU_LAMBDA * SELU_ALPHA * EXPM1(v)); break;
    case NF_ACT_TANH: MAP(TANH(v)); break;
    case NF_ACT_SIGMOID: MAP(sigm(v)); break;
    case NF_ACT_GELU: MAP((nf_real)0.5 * v * (1 + ERF(v * INV_SQRT2))); break;
    case NF_ACT_SILU: MAP(v * sigm(v)); break;
    case NF_ACT_IDENTITY:
    default:
        if (y != x) memcpy(y, x, n * sizeof *y);
        break;
    }
}

void nf_act_forward(nf_activation a, nf_real *y, const nf_real *x, size_t n)
{
    nf_act_forward_ex(a, 0.01, y, x, n);
}

/* dx (+)= EXPR(v, u, g) with v = x[i], u = y[i], g = dy[i]. */
#define BLOOP(OP, EXPR)                                                                                 \
    for (size_t i = 0; i < n; i++) {                                                                    \
        nf_real v = x[i], u = y[i], g = dy[i];                                                          \
        (void)v;                                                                                        \
        (void)u;                                                                                        \
        dx[i] OP(EXPR);                                                                                 \
    }
#define BMAP(EXPR)                                                                                      \
    do {                                                                                                \
        if (n > NF_ACT_PAR_MIN) {                                                                       \
            if (accumulate) {                                                                           \
                _Pragma("omp parallel for simd schedule(static)") BLOOP(+=, EXPR)                       \
            } else {                                                                                    \
                _Pragma("omp parallel for simd schedule(static)") BLOOP(=, EXPR)                        \
            }                                                                                           \
        } else if (accumulate) {                                                                        \
            _Pragma("omp simd") BLOOP(+=, EXPR)                                                         \
        } else {                                                                                        \
            _Pragma("omp simd") BLOOP(=, EXPR)                                                          \
        }                                                                                               \
    } while (0)

/* f'(x): relu 1[x>0]; leaky 1 or s; elu 1 or y + 1; selu l or y + l a; tanh 1 - y^2;
 * sigmoid y (1 - y); gelu Phi(x) + x phi(x); silu sig(x) (1 + x (1 - sig(x))); identity 1. */
void nf_act_backward_ex(nf_activation a, double slope, nf_real *dx, const nf_real *dy, const nf_real *x,
                        const nf_real *y, size_t n, int accumulate)
{
    const nf_real s = (nf_real)slope;
    switch (a) {
    case NF_ACT_RELU: BMAP(v > 0 ? g : 0); break;
    case NF_ACT_LEAKY_RELU: BMAP(v > 0 ? g : s * g); break;
    case NF_ACT_ELU: BMAP(v > 0 ? g : g * (u + 1)); break;
    case NF_ACT_SELU: BMAP(v > 0 ? SELU_LAMBDA * g : g * (u + SELU_LAMBDA * SELU_ALPHA)); break;
    case NF_ACT_TANH: BMAP(g * (1 - u * u)); break;
    case NF_ACT_SIGMOID: BMAP(g * u * (1 - u)); break;
    case NF_ACT_GELU:
        BMAP(g * ((nf_real)0.5 * (1 + ERF(v * INV_SQRT2)) + v * INV_SQRT2PI * EXP((nf_real)-0.5 * v * v)));
        break;
    case NF_ACT_SILU: BMAP(g * silu_grad(v)); break;
    case NF_ACT_IDENTITY:
    default: BMAP(g); break;
    }
}

void nf_act_backward(nf_activation a, nf_real *dx, const nf_real *dy, const nf_real *x, const nf_real *y,
                     size_t n)
{
    nf_act_backward_ex(a, 0.01, dx, dy, x, y, n, 1);
}
