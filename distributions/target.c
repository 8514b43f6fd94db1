/* distributions/target.c - the built-in unnormalised targets (u1..u4, banana, funnel, gmm), their
 * registry, and the checked entry points.  Definitions and the choice of the u2-u4 wall: target.h.
 *
 * Every log_prob loops over rows independently (OpenMP over rows for large batches) and writes
 * log p~ and, when asked, its gradient.  Instances are read-only after create.
 */
#include "distributions/target.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HALF_LOG_2PI 0.91893853320467274178
#define PI 3.14159265358979323846
#define OMP_MIN_ROWS 2048

/* log(e^a + e^b) and the weight wa = e^a / (e^a + e^b) (then e^b's weight is 1 - wa). */
static double lse2(double a, double b, double *wa)
{
    double m = fmax(a, b);
    if (m == -INFINITY) {
        *wa = 0.5;
        return -INFINITY;
    }
    double ea = exp(a - m), eb = exp(b - m), s = ea + eb;
    *wa = ea / s;
    return m + log(s);
}

/* ---- u1..u4: 2-D energies, p~ = exp(-U); each returns U and writes dU/dz1, dU/dz2 ---------- */

/* U1 = 1/2 ((r - 2)/0.4)^2 - lse(a, b),  r = |z|, a = -1/2 ((z1 - 2)/0.6)^2, b = -1/2 ((z1 + 2)/0.6)^2
 * dU1/dz = (r - 2)/0.16 z/r - (wa da/dz1 + wb db/dz1) e1,  da/dz1 = -(z1 - 2)/0.36, db/dz1 = -(z1 + 2)/0.36
 * (at r = 0 the cone's gradient is undefined; z/r is taken as 0 there). */
static double u1_energy(double z1, double z2, double *g1, double *g2)
{
    double r = hypot(z1, z2), a = -0.5 * (z1 - 2) * (z1 - 2) / 0.36, b = -0.5 * (z1 + 2) * (z1 + 2) / 0.36, wa;
    double l = lse2(a, b, &wa), ring = (r - 2) / 0.16, ir = r > 0 ? 1 / r : 0;
    *g1 = ring * z1 * ir + (wa * (z1 - 2) + (1 - wa) * (z1 + 2)) / 0.36;
    *g2 = ring * z2 * ir;
    return 0.5 * (r - 2) * (r - 2) / 0.16 - l;
}

/* The wall of u2-u4: W(z1) = 1/2 (z1/a)^16, W' = 8 (z1/a)^15 / a. */
static double wall(double z1, double *dw)
{
    double u = z1 / NF_TARGET_WALL, u2 = u * u, u4 = u2 * u2, u8 = u4 * u4, u15 = u8 * u4 * u2 * u;
    *dw = 8 * u15 / NF_TARGET_WALL;
    return 0.5 * u15 * u;
}

/* w1 = sin(pi z1 / 2), w1' = pi/2 cos(pi z1 / 2) */
static double w1f(double z1, double *d)
{
    *d = 0.5 * PI * cos(0.5 * PI * z1);
    return sin(0.5 * PI * z1);
}

/* U2 = 1/2 ((z2 - w1)/0.4)^2 + W(z1)
 * dU2/dz2 = (z2 - w1)/0.16,  dU2/dz1 = -(z2 - w1)/0.16 w1' + W' */
static double u2_energy(double z1, double z2, double *g1, double *g2)
{
    double dw1, dW, w1 = w1f(z1, &dw1), W = wall(z1, &dW), e = (z2 - w1) / 0.16;
    *g1 = -e * dw1 + dW;
    *g2 = e;
    return 0.5 * (z2 - w1) * (z2 - w1) / 0.16 + W;
}

/* Shared by U3 and U4: U = -lse(A, B) + W(z1) with
 *   A = -1/2 (z2 - w1)^2 / sa^2,  B = -1/2 (z2 - w1 + w)^2 / sb^2,   w = w2 (U3) or w3 (U4)
 *   dA/dz2 = -(z2 - w1)/sa^2,       dA/dz1 = (z2 - w1)/sa^2 w1'
 *   dB/dz2 = -(z2 - w1 + w)/sb^2,   dB/dz1 = -(z2 - w1 + w)/sb^2 (w' - w1')
 *   dU = -(wA dA + wB dB) + W' e1,  wA = e^A / (e^A + e^B). */
static double two_branch(double z1, double z2, double sa, double sb, double w, double dw, double *g1,
                         double *g2)
{
    double dw1, dW, w1 = w1f(z1, &dw1), W = wall(z1, &dW);
    double ea = (z2 - w1) / (sa * sa), eb = (z2 - w1 + w) / (sb * sb);
    double A = -0.5 * (z2 - w1) * ea, B = -0.5 * (z2 - w1 + w) * eb, wa;
    double l = lse2(A, B, &wa), wb = 1 - wa;
    *g1 = -(wa * ea * dw1 - wb * eb * (dw - dw1)) + dW;
    *g2 = wa * ea + wb * eb;
    return -l + W;
}

/* U3 = -ln(e^{-1/2 ((z2 - w1)/0.35)^2} + e^{-1/2 ((z2 - w1 + w2)/0.35)^2}) + W(z1),
 * w2 = 3 e^{-1/2 ((z1 - 1)/0.6)^2},  w2' = -w2 (z1 - 1)/0.36 */
static double u3_energy(double z1, double z2, double *g1, double *g2)
{
    double w2 = 3 * exp(-0.5 * (z1 - 1) * (z1 - 1) / 0.36), dw2 = -w2 * (z1 - 1) / 0.36;
    return two_branch(z1, z2, 0.35, 0.35, w2, dw2, g1, g2);
}

/* U4 = -ln(e^{-1/2 ((z2 - w1)/0.4)^2} + e^{-1/2 ((z2 - w1 + w3)/0.35)^2}) + W(z1),
 * w3 = 3 sigmoid((z1 - 1)/0.3),  w3' = w3 (1 - sigmoid) / 0.3 */
static double u4_energy(double z1, double z2, double *g1, double *g2)
{
    double s = 1 / (1 + exp(-(z1 - 1) / 0.3)), w3 = 3 * s, dw3 = w3 * (1 - s) / 0.3;
    return two_branch(z1, z2, 0.4, 0.35, w3, dw3, g1, g2);
}

typedef double energy_fn(double z1, double z2, double *g1, double *g2);

/* log p~ = -U, grad = -dU, row by row. */
static int energy_batch(energy_fn *U, size_t n, const double *x, double *logp, double *grad)
{
#pragma omp parallel for schedule(static) if (n > OMP_MIN_ROWS)
    for (long i = 0; i < (long)n; i++) {
        double g1, g2;
        logp[i] = -U(x[2 * i], x[2 * i + 1], &g1, &g2);
        if (grad) grad[2 * i] = -g1, grad[2 * i + 1] = -g2;
    }
    return NF_OK;
}

static int u1_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    (void)t;
    return energy_batch(u1_energy, n, x, logp, grad);
}
static int u2_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    (void)t;
    return energy_batch(u2_energy, n, x, logp, grad);
}
static int u3_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    (void)t;
    return energy_batch(u3_energy, n, x, logp, grad);
}
static int u4_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    (void)t;
    return energy_batch(u4_energy, n, x, logp, grad);
}

/* log Z of u2-u4 = log(s sqrt(2 pi)) + log int e^{-W} dz1, with
 * int e^{-1/2 (z1/a)^16} dz1 = 2 a 2^{1/16} Gamma(17/16)  (substitute w = u^16 / 2). */
static double walled_log_z(double s)
{
    return log(s) + HALF_LOG_2PI + log(2 * NF_TARGET_WALL) + log(2.0) / 16 + lgamma(17.0 / 16);
}

static int u2_create(nf_target *t, nf_opts *o)
{
    (void)o;
    t->log_z = walled_log_z(0.4);
    return NF_OK;
}
static int u3_create(nf_target *t, nf_opts *o)
{
    (void)o;
    t->log_z = walled_log_z(0.35 + 0.35);
    return NF_OK;
}
static int u4_create(nf_target *t, nf_opts *o)
{
    (void)o;
    t->log_z = walled_log_z(0.4 + 0.35);
    return NF_OK;
}

#define U_TYPE(N, SUMMARY, CREATE)                                                                      \
    const nf_target_type nf_target_u##N = {                                                           \
        .name = "u" #N, .summary = SUMMARY, .dim = 2, .log_prob = u##N##_log_prob, .sample = NULL,    \
        .box = {-4, 4, -4, 4}, .options_help = "(no options)", .create = CREATE, .destroy = NULL,     \
    }

U_TYPE(1, "Rezende-Mohamed U1: a ring with two lobes (2-D, log Z unknown)", NULL);
U_TYPE(2, "Rezende-Mohamed U2: a sine band, walled at |z1| ~ 4 (2-D, exact log Z)", u2_create);
U_TYPE(3, "Rezende-Mohamed U3: a sine band that splits in two, walled (2-D, exact log Z)", u3_create);
U_TYPE(4, "Rezende-Mohamed U4: a sine band with a sigmoid step, walled (2-D, exact log Z)", u4_create);

/* ---- banana: Haario's twisted Gaussian ------------------------------------------------------- */

typedef struct {
    double b, var;
} banana_state;

static int banana_create(nf_target *t, nf_opts *o)
{
    banana_state s;
    NF_TRY(nf_opts_double(o, "b", 0.1, -100, 100, &s.b));
    NF_TRY(nf_opts_double(o, "var", 10, 1e-6, 1e6, &s.var));
    banana_state *st = nf_calloc(1, sizeof *st, "banana target");
    if (!st) return NF_ENOMEM;
    *st = s;
    t->state = st;
    t->log_z = 0;
    return NF_OK;
}

/* log p = -1/2 x1^2/var - 1/2 log(2 pi var) - 1/2 e^2 - 1/2 log(2 pi),  e = x2 - b (x1^2 - var)
 * d/dx1 = -x1/var + 2 b x1 e,   d/dx2 = -e */
static int banana_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    const banana_state *s = t->state;
    const double c = -0.5 * log(s->var) - 2 * HALF_LOG_2PI;
#pragma omp parallel for schedule(static) if (n > OMP_MIN_ROWS)
    for (long i = 0; i < (long)n; i++) {
        double x1 = x[2 * i], e = x[2 * i + 1] - s->b * (x1 * x1 - s->var);
        logp[i] = -0.5 * x1 * x1 / s->var - 0.5 * e * e + c;
        if (grad) grad[2 * i] = -x1 / s->var + 2 * s->b * x1 * e, grad[2 * i + 1] = -e;
    }
    return NF_OK;
}

/* x1 = sqrt(var) g1, x2 = b (x1^2 - var) + g2 */
static int banana_sample(const nf_target *t, nf_rng *rng, size_t n, double *x)
{
    const banana_state *s = t->state;
    for (size_t i = 0; i < n; i++) {
        double x1 = sqrt(s->var) * nf_rng_normal(rng);
        x[2 * i] = x1;
        x[2 * i + 1] = s->b * (x1 * x1 - s->var) + nf_rng_normal(rng);
    }
    return NF_OK;
}

static void free_state(nf_target *t)
{
    free(t->state);
    t->state = NULL;
}

const nf_target_type nf_target_banana = {
    .name = "banana",
    .summary = "twisted Gaussian x1 ~ N(0, var), x2 ~ N(b (x1^2 - var), 1) (2-D, normalised, exact sampler)",
    .dim = 2,
    .log_prob = banana_log_prob,
    .sample = banana_sample,
    .box = {-10, 10, -4, 10},
    .options_help = "b=0.1, var=10",
    .create = banana_create,
    .destroy = free_state,
};

/* ---- funnel: Neal's funnel ---------------------------------------------------------------------- */

typedef struct {
    double sigma;
} funnel_state;

static int funnel_create(nf_target *t, nf_opts *o)
{
    funnel_state s;
    NF_TRY(nf_opts_int(o, "dim", 2, 2, NF_TARGET_DIM_MAX, &t->dim));
    NF_TRY(nf_opts_double(o, "sigma", 3, 1e-3, 30, &s.sigma));
    funnel_state *st = nf_calloc(1, sizeof *st, "funnel target");
    if (!st) return NF_ENOMEM;
    *st = s;
    t->state = st;
    t->log_z = 0;
    return NF_OK;
}

/* v = x_0, S = sum_{i>=1} x_i^2, D' = D - 1:
 * log p = -1/2 v^2/sigma^2 - log sigma - 1/2 S e^{-v} - D'/2 v - D log sqrt(2 pi)
 * d/dv = -v/sigma^2 + 1/2 S e^{-v} - D'/2,   d/dx_i = -x_i e^{-v}
 * (0 * e^{-v} is kept 0 when e^{-v} overflows, so the neck gives -inf, never NaN). */
static int funnel_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    const funnel_state *s = t->state;
    const int D = t->dim;
    const double is2 = 1 / (s->sigma * s->sigma), c = -log(s->sigma) - D * HALF_LOG_2PI;
#pragma omp parallel for schedule(static) if (n > OMP_MIN_ROWS)
    for (long i = 0; i < (long)n; i++) {
        const double *xi = x + (size_t)i * D;
        double v = xi[0], ev = exp(-v), S = 0;
        for (int j = 1; j < D; j++) S += xi[j] * xi[j];
        double q = S > 0 ? S * ev : 0;
        logp[i] = -0.5 * v * v * is2 - 0.5 * q - 0.5 * (D - 1) * v + c;
        if (grad) {
            double *gi = grad + (size_t)i * D;
            gi[0] = -v * is2 + 0.5 * q - 0.5 * (D - 1);
            for (int j = 1; j < D; j++) gi[j] = xi[j] != 0 ? -xi[j] * ev : 0;
        }
    }
    return NF_OK;
}

/* v = sigma g_0, x_i = e^{v/2} g_i */
static int funnel_sample(const nf_target *t, nf_rng *rng, size_t n, double *x)
{
    const funnel_state *s = t->state;
    const int D = t->dim;
    for (size_t i = 0; i < n; i++) {
        double *xi = x + i * D, v = s->sigma * nf_rng_normal(rng), sd = exp(0.5 * v);
        xi[0] = v;
        for (int j = 1; j < D; j++) xi[j] = sd * nf_rng_normal(rng);
    }
    return NF_OK;
}

const nf_target_type nf_target_funnel = {
    .name = "funnel",
    .summary = "Neal's funnel v ~ N(0, sigma^2), x_i ~ N(0, e^v) (D-dim, normalised, exact sampler)",
    .dim = 0,
    .log_prob = funnel_log_prob,
    .sample = funnel_sample,
    .box = {-9, 9, -15, 15},
    .options_help = "dim=2, sigma=3",
    .create = funnel_create,
    .destroy = free_state,
};

/* ---- gmm: an equal-weight isotropic Gaussian mixture times e^{log_z} ------------------------------- */

typedef struct {
    int K;
    double scale, c;   /* c = log_z - log K - D log(scale sqrt(2 pi)) */
    double *mu;        /* (K, D) */
} gmm_state;

static void gmm_destroy(nf_target *t)
{
    gmm_state *st = t->state;
    if (st) free(st->mu);
    free(st);
    t->state = NULL;
}

static int gmm_create(nf_target *t, nf_opts *o)
{
    int K, seed;
    double spread, scale, log_z;
    NF_TRY(nf_opts_int(o, "dim", 2, 1, NF_TARGET_DIM_MAX, &t->dim));
    NF_TRY(nf_opts_int(o, "k", 4, 1, 1024, &K));
    NF_TRY(nf_opts_int(o, "seed", 1, 0, 2147483647, &seed));
    NF_TRY(nf_opts_double(o, "spread", 4, 0, 1e3, &spread));
    NF_TRY(nf_opts_double(o, "scale", 1, 1e-3, 1e3, &scale));
    NF_TRY(nf_opts_double(o, "log_z", NF_TARGET_GMM_LOG_Z, -1e3, 1e3, &log_z));
    const int D = t->dim;
    gmm_state *st = nf_calloc(1, sizeof *st, "gmm target");
    if (!st) return NF_ENOMEM;
    t->state = st;
    st->mu = nf_calloc((size_t)K * D, sizeof *st->mu, "gmm target means");
    if (!st->mu) return NF_ENOMEM;
    nf_rng *r = nf_rng_alloc((uint64_t)seed, 0);
    if (!r) return nf_error(NF_ENOMEM, "gmm target: out of memory for the random stream of seed %d", seed);
    for (size_t q = 0; q < (size_t)K * D; q++) st->mu[q] = spread * nf_rng_normal(r);
    nf_rng_free(r);
    st->K = K;
    st->scale = scale;
    st->c = log_z - log((double)K) - D * (log(scale) + HALF_LOG_2PI);
    t->log_z = log_z;
    return NF_OK;
}

/* l_k = -|x - mu_k|^2 / (2 scale^2),  log p~ = c + lse_k l_k,
 * d/dx = sum_k r_k (mu_k - x) / scale^2,  r = softmax(l).
 * One streaming pass over k: m = max so far, S = sum e^{l_k - m}, G = sum e^{l_k - m} (mu_k - x),
 * rescaled by e^{m_old - m_new} when the maximum moves (G lives in the caller's grad row). */
static int gmm_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    const gmm_state *st = t->state;
    const int D = t->dim, K = st->K;
    const double is2 = 1 / (st->scale * st->scale);
#pragma omp parallel for schedule(static) if (n > OMP_MIN_ROWS / 4)
    for (long i = 0; i < (long)n; i++) {
        const double *xi = x + (size_t)i * D;
        double *G = grad ? grad + (size_t)i * D : NULL;
        double m = -INFINITY, S = 0;
        if (G)
            for (int j = 0; j < D; j++) G[j] = 0;
        for (int k = 0; k < K; k++) {
            const double *mk = st->mu + (size_t)k * D;
            double d2 = 0;
            for (int j = 0; j < D; j++) d2 += (xi[j] - mk[j]) * (xi[j] - mk[j]);
            double l = -0.5 * d2 * is2, e;
            if (l > m) {
                double f = exp(m - l);   /* 0 on the first component */
                S *= f;
                if (G)
                    for (int j = 0; j < D; j++) G[j] *= f;
                m = l;
                e = 1;
            } else {
                e = exp(l - m);
            }
            S += e;
            if (G)
                for (int j = 0; j < D; j++) G[j] += e * (mk[j] - xi[j]);
        }
        logp[i] = st->c + m + log(S);
        if (G)
            for (int j = 0; j < D; j++) G[j] *= is2 / S;
    }
    return NF_OK;
}

/* k uniform in 0..K-1, x = mu_k + scale g */
static int gmm_sample(const nf_target *t, nf_rng *rng, size_t n, double *x)
{
    const gmm_state *st = t->state;
    const int D = t->dim;
    for (size_t i = 0; i < n; i++) {
        const double *mk = st->mu + nf_rng_index(rng, (size_t)st->K) * D;
        for (int j = 0; j < D; j++) x[i * D + j] = mk[j] + st->scale * nf_rng_normal(rng);
    }
    return NF_OK;
}

const nf_target_type nf_target_gmm = {
    .name = "gmm",
    .summary = "equal-weight mixture of k isotropic Gaussians with seeded means, times e^log_z (D-dim, exact sampler)",
    .dim = 0,
    .log_prob = gmm_log_prob,
    .sample = gmm_sample,
    .box = {-12, 12, -12, 12},
    .options_help = "dim=2, k=4, seed=1, spread=4, scale=1, log_z=1.5",
    .create = gmm_create,
    .destroy = gmm_destroy,
};

/* ---- registry and entry points ------------------------------------------------------------------ */

const nf_target_type *const nf_target_types[] = {
    &nf_target_u1, &nf_target_u2, &nf_target_u3, &nf_target_u4, &nf_target_banana, &nf_target_funnel, &nf_target_gmm,
    NULL,
};

const nf_target_type *nf_target_type_find(const char *name)
{
    if (name)
        for (int i = 0; nf_target_types[i]; i++)
            if (strcmp(nf_target_types[i]->name, name) == 0) return nf_target_types[i];
    char known[256] = "";
    size_t at = 0;
    for (int i = 0; nf_target_types[i] && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", nf_target_types[i]->name);
    nf_error(NF_EINVAL, "unknown target '%s': expected one of %s", name ? name : "(null)", known);
    return NULL;
}

void nf_target_free(nf_target *t)
{
    if (!t) return;
    if (t->type && t->type->destroy) t->type->destroy(t);
    free(t);
}

/* Options are read by the type's create(); a fixed-dimension type still accepts dim=<its dim>, so a
 * caller may pass dim to any target.  Any key nobody read is refused afterwards. */
int nf_target_create(nf_target **out, const char *name, const char *options)
{
    if (!out) return nf_error(NF_EINVAL, "nf_target_create: the output pointer must not be NULL");
    *out = NULL;
    const nf_target_type *type = nf_target_type_find(name);
    if (!type) return NF_EINVAL;
    nf_opts o;
    nf_opts_init(&o, type->name);
    if (options) NF_TRY(nf_opts_parse(&o, options));
    char canon[NF_OPTS_MAX * (NF_OPT_KEY_MAX + NF_OPT_VAL_MAX + 2)];
    nf_opts_format(&o, canon, sizeof canon);
    nf_target *t = nf_calloc(1, sizeof *t, "target");
    if (!t) return NF_ENOMEM;
    if (strlen(canon) >= sizeof t->options) {
        free(t);
        return nf_error(NF_EINVAL, "%s: options '%s' are longer than %zu characters", type->name, canon,
                        sizeof t->options - 1);
    }
    strcpy(t->options, canon);
    t->type = type;
    t->dim = type->dim;
    t->log_z = NAN;
    int rc = NF_OK;
    if (type->dim > 0) rc = nf_opts_int(&o, "dim", type->dim, type->dim, type->dim, &t->dim);
    if (rc == NF_OK && type->create) rc = type->create(t, &o);
    if (rc == NF_OK) rc = nf_opts_check_used(&o);
    if (rc == NF_OK && (t->dim < 1 || t->dim > NF_TARGET_DIM_MAX))
        rc = nf_error(NF_EINVAL, "%s: dimension %d, expected 1 to %d", type->name, t->dim, NF_TARGET_DIM_MAX);
    if (rc != NF_OK) {
        nf_target_free(t);
        return rc;
    }
    *out = t;
    return NF_OK;
}

int nf_target_log_prob(const nf_target *t, size_t n, const double *x, double *logp, double *grad)
{
    if (!t) return nf_error(NF_EINVAL, "nf_target_log_prob: the target must not be NULL");
    if (n == 0) return NF_OK;
    if (!x || !logp) return nf_error(NF_EINVAL, "%s: log_prob needs the points x and an output logp", t->type->name);
    const size_t D = (size_t)t->dim;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < D; j++)
            if (!isfinite(x[i * D + j]))
                return nf_error(NF_EDATA, "%s: row %zu, column %zu of the points is %g (expected finite values)",
                                t->type->name, i, j, x[i * D + j]);
    return t->type->log_prob(t, n, x, logp, grad);
}

int nf_target_sample(const nf_target *t, nf_rng *rng, size_t n, double *x)
{
    if (!t) return nf_error(NF_EINVAL, "nf_target_sample: the target must not be NULL");
    if (!t->type->sample) return nf_error(NF_EINVAL, "%s: this target has no exact sampler", t->type->name);
    if (n == 0) return NF_OK;
    if (!rng || !x) return nf_error(NF_EINVAL, "%s: sampling needs a random stream and an output array", t->type->name);
    return t->type->sample(t, rng, n, x);
}
