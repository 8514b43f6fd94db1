/* nn/activation.c - elementwise activations and their derivatives.
 *
 * Each forward is y = f(x) over n entries; each backward is dx (+)= dy * f'(x), written with y = f(x)
 * where that is cheaper (tanh, sigmoid, elu, selu).  The switch sits outside the loops so each loop
 * is a plain map, marked `omp simd` (entries are independent even when y aliases x, which lets the
 * compiler vectorise without alias checks); large arrays (n > NF_NN_PAR_MIN) are split over OpenMP
 * threads, unless the caller already runs in parallel.  The float build computes exp, tanh and the
 * Gaussian cdf with its own branch-free polynomials so those loops vectorise too.
 */
/* Without -ftrapping-math GCC if-converts the selects and divisions of those polynomials and
 * vectorises the loops (with it, GELU ran scalar: 76 ns per entry against ~2 vectorised; see
 * flows/rqspline.c on the flag). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "core/simd.h"

/* SELU's fixed point constants (Klambauer et al. 2017). */
#define SELU_LAMBDA ((nf_real)1.0507009873554804934193349852946)
#define SELU_ALPHA ((nf_real)1.6732632423543772848170429916717)
#define INV_SQRT2 ((nf_real)0.70710678118654752440)
#define INV_SQRT2PI ((nf_real)0.39894228040143267794)

/* EXP, EXPM1, TANH and the Gaussian cdf PHI(x) = (1 + erf(x / sqrt2)) / 2 in the build's precision. */
#ifdef NF_DOUBLE
/* The double build (the reference for tests) uses libm. */
#define EXP exp
#define EXPM1 expm1
#define TANH tanh
#define PHI(v) (0.5 * erfc(-(v) * INV_SQRT2))
static inline double phi_density(double v, double *density)
{
    *density = INV_SQRT2PI * exp(-0.5 * v * v);
    return PHI(v);
}
#define PHI_DENSITY phi_density
#else
/* The float build uses branch-free versions the compiler vectorises inside `omp simd` loops
 * (glibc's scalar expf/tanhf/erff cost 10-30 ns each, more than the matrix products of small
 * layers).  Relative errors are a few ulp (Phi: about 1e-6), far below what training notices. */
#define EXP fast_exp
#define EXPM1 fast_expm1
#define TANH fast_tanh
#define PHI fast_phi
#define PHI_DENSITY fast_phi_density

/* exp(x) = 2^k exp(r), x = k ln2 + r, |r| <= ln2/2 (Cody-Waite), Cephes' degree-6 polynomial;
 * x clamped to [-87.3, 88] so 2^k stays a normal float. */
static inline float fast_exp(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.0f ? 88.0f : x;
    /* k = round(x / ln2) by adding and removing 1.5 * 2^23 (floorf and a rounding select would
     * keep GCC from vectorising the loop). */
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t ki = (int32_t)k, bits = (ki + 127) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1;
    return p * two_k;
}

/* e^x - 1 = 2^k (e^r - 1) + (2^k - 1) with the same reduction as fast_exp and e^r - 1 by its
 * Taylor polynomial to degree 8 (|r| <= ln2/2): no cancellation near 0, where k = 0, and no select. */
static inline float fast_expm1(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.0f ? 88.0f : x;
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t ki = (int32_t)k, bits = (ki + 127) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float q = r * (1 / 40320.0f) + 1 / 5040.0f;
    q = r * q + 1 / 720.0f;
    q = r * q + 1 / 120.0f;
    q = r * q + 1 / 24.0f;
    q = r * q + 1 / 6.0f;
    q = r * q + 0.5f;
    q = r + r * r * q;
    return two_k * q + (two_k - 1);
}

/* Cephes tanhf: an odd polynomial for |x| < 0.625, 1 - 2 / (e^{2|x|} + 1) beyond. */
static inline float fast_tanh(float x)
{
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float ax = x < 0 ? -x : x;
    float big = 1 - 2 / (fast_exp(2 * ax) + 1);
    big = x < 0 ? -big : big;
    return ax < 0.625f ? small : big;
}

/* Phi(x) and the density phi(x) = e^{-x^2/2} / sqrt(2 pi) with one exponential between them.  With
 * z = |x|/sqrt2 and t = 1 / (1 + z/2), erfc(z) = t S(t) e^{-z^2}, where S(t) = erfcx(z) / t is smooth
 * on t in (0, 1] (erfcx(z) ~ 1 / (sqrt(pi) z) as z grows, so S(0) = 1 / (2 sqrt(pi))); S is a
 * degree-8 polynomial fitted to relative error 5e-8 on z in [0, 11] (float Horner: 2e-7), beyond
 * which e^{-z^2} is below float's range anyway.  Phi = erfc/2 for x < 0, 1 - erfc/2 otherwise, and
 * e^{-z^2} = e^{-x^2/2} is the density's exponential too, so GELU and its derivative take one exp
 * (Numerical Recipes' erfcc, used before, is t e^{-z^2 + P(t)}: a second exp for the density). */
/* S(t), fitted by scripts/fit_gelu_erfc.py (relative least squares, reweighted toward minimax). */
#define S_COEF0 2.820850313e-01f
#define S_COEF1 2.823998034e-01f
#define S_COEF2 2.429254800e-01f
#define S_COEF3 2.033921927e-01f
#define S_COEF4 -2.829186618e-02f
#define S_COEF5 2.804841697e-01f
#define S_COEF6 -4.893108010e-01f
#define S_COEF7 2.855934799e-01f
#define S_COEF8 -5.927751958e-02f
static inline float fast_phi_density(float x, float *density)
{
    const float z = (x < 0 ? -x : x) * 0.70710678118654752f;
    const float t = 1 / (1 + 0.5f * z);
    float s = S_COEF8;
    s = s * t + S_COEF7;
    s = s * t + S_COEF6;
    s = s * t + S_COEF5;
    s = s * t + S_COEF4;
    s = s * t + S_COEF3;
    s = s * t + S_COEF2;
    s = s * t + S_COEF1;
    s = s * t + S_COEF0;
    const float e = fast_exp(-z * z);
    *density = INV_SQRT2PI * e;
    const float half_erfc = 0.5f * t * s * e;
    return x < 0 ? half_erfc : 1 - half_erfc;
}

static inline float fast_phi(float x)
{
    float unused;
    return fast_phi_density(x, &unused);
}
#endif

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

/* Logistic function; e^{-v} overflows to inf (double) or is clamped (float) for very negative v,
 * which still gives the right limit 0. */
static inline nf_real sigm(nf_real v) { return 1 / (1 + EXP(-v)); }

/* e^v - 1 is computed on both sides of the select: inside a branch it would stop vectorisation. */
static inline nf_real elu(nf_real v)
{
    nf_real e = EXPM1(v);
    return v > 0 ? v : e;
}

static inline nf_real elu_alpha(nf_real v, nf_real alpha)
{
    nf_real e = alpha * EXPM1(v);
    return v > 0 ? v : e;
}

static inline nf_real silu_grad(nf_real v)
{
    nf_real sg = sigm(v);
    return sg * (1 + v * (1 - sg));
}

/* GELU'(v) = Phi(v) + v phi(v). */
static inline nf_real gelu_grad(nf_real v)
{
    nf_real density;
    const nf_real p = PHI_DENSITY(v, &density);
    return p + v * density;
}

/* y[i] = EXPR(v) with v = x[i]. */
#define MAP(EXPR)                                                                                       \
    do {                                                                                                \
        if (nf_nn_par(n)) {                                                                          \
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
NF_SIMD_CLONES static void nf_act_forward_ex_simd(nf_activation a, double slope, nf_real *y, const nf_real *x, size_t n)
{
    const nf_real s = (nf_real)slope;
    switch (a) {
    case NF_ACT_RELU: MAP(v > 0 ? v : 0); break;
    case NF_ACT_LEAKY_RELU: MAP(v > 0 ? v : s * v); break;
    case NF_ACT_ELU: MAP(elu(v)); break;
    case NF_ACT_SELU: MAP(SELU_LAMBDA * elu_alpha(v, SELU_ALPHA)); break;
    case NF_ACT_TANH: MAP(TANH(v)); break;
    case NF_ACT_SIGMOID: MAP(sigm(v)); break;
    case NF_ACT_GELU: MAP(v * PHI(v)); break;
    case NF_ACT_SILU: MAP(v * sigm(v)); break;
    case NF_ACT_IDENTITY:
    default:
        if (y != x) memcpy(y, x, n * sizeof *y);
        break;
    }
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
void nf_act_forward_ex(nf_activation a, double slope, nf_real *y, const nf_real *x, size_t n)
{
    nf_act_forward_ex_simd(a, slope, y, x, n);
}

void nf_act_forward(nf_activation a, nf_real *y, const nf_real *x, size_t n)
{
    nf_act_forward_ex(a, 0.01, y, x, n);
}

/* GELU forward that keeps its derivative: y = x Phi(x), then x is overwritten with
 * GELU'(x) = Phi(x) + x phi(x), each computed as the two passes compute them (the same bits), so a
 * backward is dx = dy * x (nf_act_grad_apply): Phi once for both directions instead of twice, and no
 * exp left in the backward (the GELU passes were an eighth of a TarFlow step); Phi and phi share one
 * exp (PHI_DENSITY).  Both passes split over the pool (nf_nn_ranges) when large. */
NF_SIMD_CLONES static void gelu_forward_grad_simd(nf_real *y, nf_real *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        const nf_real v = x[i];
        nf_real density;
        const nf_real p = PHI_DENSITY(v, &density);
        y[i] = v * p;
        x[i] = p + v * density;
    }
}

typedef struct pointwise_job {
    nf_real *y, *x;
    const nf_real *a, *b;
} pointwise_job;

static void gelu_range(void *arg, size_t i0, size_t i1)
{
    const pointwise_job *j = arg;
    gelu_forward_grad_simd(j->y + i0, j->x + i0, i1 - i0);
}

void nf_act_gelu_forward_grad(nf_real *y, nf_real *x, size_t n)
{
    pointwise_job j = {y, x, NULL, NULL};
    nf_nn_ranges(n, 64, n, gelu_range, &j);
}

NF_SIMD_CLONES static void mul_simd(nf_real *dx, const nf_real *dy, const nf_real *d, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * d[i];
}

static void mul_range(void *arg, size_t i0, size_t i1)
{
    const pointwise_job *j = arg;
    mul_simd(j->y + i0, j->a + i0, j->b + i0, i1 - i0);
}

void nf_act_grad_apply(nf_real *dx, const nf_real *dy, const nf_real *d, size_t n)
{
    pointwise_job j = {dx, NULL, dy, d};
    nf_nn_ranges(n, 64, n, mul_range, &j);
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
        if (nf_nn_par(n)) {                                                                          \
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
NF_SIMD_CLONES static void nf_act_backward_ex_simd(nf_activation a, double slope, nf_real *dx, const nf_real *dy, const nf_real *x,
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
        BMAP(g * gelu_grad(v));
        break;
    case NF_ACT_SILU: BMAP(g * silu_grad(v)); break;
    case NF_ACT_IDENTITY:
    default: BMAP(g); break;
    }
}

/* The exported name calls the clones (a multiversioned function must be static for clang). */
void nf_act_backward_ex(nf_activation a, double slope, nf_real *dx, const nf_real *dy, const nf_real *x,
                        const nf_real *y, size_t n, int accumulate)
{
    nf_act_backward_ex_simd(a, slope, dx, dy, x, y, n, accumulate);
}

void nf_act_backward(nf_activation a, nf_real *dx, const nf_real *dy, const nf_real *x, const nf_real *y,
                     size_t n)
{
    nf_act_backward_ex(a, 0.01, dx, dy, x, y, n, 1);
}
