/* flows/fftconv.c - circular convolution with a learnable periodic kernel, by FFT (FFTW).
 *
 * A sample of D = c h w values is c channels of an h x w periodic image (h = 1 for 1-D signals), and
 * channel q is convolved with its own kernel k_q of the full size h x w:
 *
 *   forward  y_q[m] = sum_j k_q[j] x_q[m - j]   (indices mod (h, w)),  Y_q = K_q X_q  (DFTs)
 *            log|det| = sum_q sum_w log|K_q(w)|  (the circulant's eigenvalues are the kernel's DFT)
 *   inverse  X_q = Y_q / K_q,  log|det| = -sum_q sum_w log|K_q(w)|
 *
 * Real kernels have Hermitian spectra, so the sums run over the r2c half spectrum (h x (w/2+1)),
 * counting column kw twice unless it is its own mirror (kw = 0, or kw = w/2 for even w).  The inverse
 * refuses (NF_ESINGULAR) a kernel with |K_q(w)| < tol max|K| anywhere: nothing is clamped.
 *
 * Parameters: "<name>.kernel" (c, h, w), a delta at index 0 plus N(0, (0.01)^2 / (h w)) noise, so the
 * map starts near the identity.  Options: channels (default 1), height (default 1), width (default
 * D / (channels height)), tol (default 1e-10 double / 1e-6 float).  Context is ignored.
 *
 * FFTW (fftw3 in the double build, fftw3f in the float build): one r2c and one c2r plan for a single
 * h x w image, made in create with FFTW_ESTIMATE | FFTW_UNALIGNED and run with the new-array execute
 * functions, which are thread-safe and accept the workspace's pointers.  FFTW's transforms are
 * unnormalised (c2r(r2c(x)) = h w x).  Workspace (nf_reals, M = h (w/2+1) complex entries):
 *   Ks (c, M) complex kernel spectra | A (c, M) complex gradient spectra | S1, S2 (M) complex | R (h w)
 */
#include "flows/bijector.h"

#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NF_DOUBLE
#define FC(x) fftw_##x
#define FC_DEFAULT_TOL 1e-10
#else
#define FC(x) fftwf_##x
#define FC_DEFAULT_TOL 1e-6
#endif
typedef FC(complex) fc_complex;

typedef struct {
    int c, h, w, N, M;       /* channels, height, width, N = h w, M = h (w/2 + 1) */
    double tol;
    size_t kernel;           /* offset in P: (c, h, w) */
    FC(plan) r2c, c2r;
} fftconv_state;

static void fftconv_destroy(nf_bijector *b)
{
    fftconv_state *st = b->state;
    if (!st) return;
    if (st->r2c) FC(destroy_plan)(st->r2c);
    if (st->c2r) FC(destroy_plan)(st->c2r);
    free(st);
    b->state = NULL;
}

static int fftconv_plans(nf_bijector *b)
{
    fftconv_state *st = b->state;
    nf_real *re = FC(malloc)(sizeof(nf_real) * (size_t)st->N);
    fc_complex *sp = FC(malloc)(sizeof(fc_complex) * (size_t)st->M);
    int rc = NF_OK;
    if (!re || !sp) {
        rc = nf_error(NF_ENOMEM, "%s: out of memory planning FFTs of size %d x %d", b->name, st->h, st->w);
    } else {
        const unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
        st->r2c = FC(plan_dft_r2c_2d)(st->h, st->w, re, sp, flags);
        st->c2r = FC(plan_dft_c2r_2d)(st->h, st->w, sp, re, flags);
        if (!st->r2c || !st->c2r)
            rc = nf_error(NF_EINVAL, "%s: FFTW could not plan transforms of size %d x %d", b->name, st->h, st->w);
    }
    if (re) FC(free)(re);
    if (sp) FC(free)(sp);
    return rc;
}

static int fftconv_create(nf_bijector *b, nf_opts *opts, nf_rng *rng)
{
    if (!b->P) return nf_error(NF_EINVAL, "%s: a parameter store is required", b->name);
    fftconv_state *st = nf_calloc(1, sizeof *st, "fftconv state");
    if (!st) return NF_ENOMEM;
    b->state = st;
    const int D = b->dim;
    int rc = nf_opts_int(opts, "channels", 1, 1, D, &st->c);
    if (rc == NF_OK) rc = nf_opts_int(opts, "height", 1, 1, D, &st->h);
    if (rc == NF_OK && D % (st->c * st->h) != 0 && !nf_opts_has(opts, "width"))
        rc = nf_error(NF_EINVAL, "%s: dimension %d is not a multiple of channels x height = %d x %d", b->name, D, st->c,
                      st->h);
    if (rc == NF_OK) rc = nf_opts_int(opts, "width", D / (st->c * st->h), 1, D, &st->w);
    if (rc == NF_OK && (long)st->c * st->h * st->w != D)
        rc = nf_error(NF_EINVAL, "%s: dimension %d does not match channels x height x width = %d x %d x %d = %ld", b->name,
                      D, st->c, st->h, st->w, (long)st->c * st->h * st->w);
    if (rc == NF_OK) rc = nf_opts_double(opts, "tol", FC_DEFAULT_TOL, 0.0, 1.0, &st->tol);
    if (rc == NF_OK) {
        st->N = st->h * st->w;
        st->M = st->h * (st->w / 2 + 1);
        char nm[NF_PARAM_NAME_MAX + 32];
        snprintf(nm, sizeof nm, "%s.kernel", b->name);
        rc = nf_params_add(b->P, nm, (size_t)D, &st->kernel);
    }
    if (rc == NF_OK) rc = fftconv_plans(b);
    if (rc != NF_OK) {
        fftconv_destroy(b);
        return rc;
    }
    nf_real *k = b->P->value + st->kernel;
    const double noise = 0.01 / sqrt((double)st->N);
    for (int q = 0; q < st->c; q++)
        for (int j = 0; j < st->N; j++)
            k[(size_t)q * st->N + j] = (nf_real)((j == 0) + (rng ? noise * nf_rng_normal(rng) : 0));
    return NF_OK;
}

static size_t fftconv_workspace(const nf_bijector *b, int n)
{
    (void)n;
    const fftconv_state *st = b->state;
    return 4 * (size_t)st->c * st->M + 4 * (size_t)st->M + (size_t)st->N;
}

/* How often a half-spectrum column stands for itself and its mirror. */
static int fc_mult(const fftconv_state *st, int kw) { return (kw == 0 || 2 * kw == st->w) ? 1 : 2; }

static void fc_r2c(const fftconv_state *st, const nf_real *in, nf_real *out)
{
    FC(execute_dft_r2c)(st->r2c, (nf_real *)in, (fc_complex *)out); /* r2c out of place keeps its input */
}

/* c2r destroys its (scratch) input. */
static void fc_c2r(const fftconv_state *st, nf_real *in, nf_real *out)
{
    FC(execute_dft_c2r)(st->c2r, (fc_complex *)in, out);
}

/* Ks_q = r2c(k_q) for every channel; returns sum_q sum_w log|K_q(w)| over the full spectrum. */
static double fc_kernel_spectra(const nf_bijector *b, nf_real *Ks)
{
    const fftconv_state *st = b->state;
    const nf_real *k = b->P->value + st->kernel;
    const int W2 = st->w / 2 + 1;
    double ld = 0;
    for (int q = 0; q < st->c; q++) {
        nf_real *K = Ks + 2 * (size_t)q * st->M;
        fc_r2c(st, k + (size_t)q * st->N, K);
        for (int m = 0; m < st->M; m++)
            ld += fc_mult(st, m % W2) * 0.5 * log((double)K[2 * m] * K[2 * m] + (double)K[2 * m + 1] * K[2 * m + 1]);
    }
    return ld;
}

/* Y_q = K_q X_q, y_q = c2r(Y_q) / N;  log|det| = sum_q sum_w log|K_q(w)|. */
static int fftconv_forward(nf_bijector *b, nf_real *y, nf_real *logdet, const nf_real *x, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx;
    const fftconv_state *st = b->state;
    const int N = st->N, M = st->M;
    nf_real *Ks = ws, *S1 = ws + 4 * (size_t)st->c * M;
    const double ld = fc_kernel_spectra(b, Ks);
    const nf_real inv_n = (nf_real)(1.0 / N);
    for (int i = 0; i < n; i++)
        for (int q = 0; q < st->c; q++) {
            const size_t off = ((size_t)i * st->c + q) * N;
            const nf_real *K = Ks + 2 * (size_t)q * M;
            fc_r2c(st, x + off, S1);
            for (int m = 0; m < M; m++) {
                nf_real re = S1[2 * m] * K[2 * m] - S1[2 * m + 1] * K[2 * m + 1];
                nf_real im = S1[2 * m] * K[2 * m + 1] + S1[2 * m + 1] * K[2 * m];
                S1[2 * m] = re * inv_n, S1[2 * m + 1] = im * inv_n;
            }
            fc_c2r(st, S1, y + off);
        }
    for (int i = 0; i < n; i++) logdet[i] += (nf_real)ld;
    return nf_bijector_check_output(b, y, logdet, n, "forward");
}

/* X_q = Y_q / K_q, x_q = c2r(X_q) / N;  log|det| = -sum_q sum_w log|K_q(w)|.  Refuses a (nearly)
 * singular kernel: |K_q(w)| < tol max_{q,w} |K|. */
static int fftconv_inverse(nf_bijector *b, nf_real *x, nf_real *logdet, const nf_real *y, const nf_real *ctx, int n,
                           nf_real *ws)
{
    (void)ctx;
    const fftconv_state *st = b->state;
    const int N = st->N, M = st->M, W2 = st->w / 2 + 1;
    nf_real *Ks = ws, *S1 = ws + 4 * (size_t)st->c * M;
    const double ld = fc_kernel_spectra(b, Ks);
    double amax = 0, amin = INFINITY;
    int qmin = 0, mmin = 0;
    for (int q = 0; q < st->c; q++)
        for (int m = 0; m < M; m++) {
            const nf_real *K = Ks + 2 * ((size_t)q * M + m);
            double a = hypot(K[0], K[1]);
            if (a > amax) amax = a;
            if (a < amin) amin = a, qmin = q, mmin = m;
        }
    if (!(amin >= st->tol * amax) || !(amax > 0))
        return nf_error(NF_ESINGULAR,
                        "%s: the kernel of channel %d has |K| = %g at frequency (%d, %d), below tol %g x max |K| = %g: "
                        "the convolution cannot be inverted",
                        b->name, qmin, amin, mmin / W2, mmin % W2, st->tol, amax);
    const double inv_n = 1.0 / N;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < st->c; q++) {
            const size_t off = ((size_t)i * st->c + q) * N;
            const nf_real *K = Ks + 2 * (size_t)q * M;
            fc_r2c(st, y + off, S1);
            for (int m = 0; m < M; m++) {
                /* S1 / K = S1 conj(K) / |K|^2 */
                double kr = K[2 * m], ki = K[2 * m + 1], s = inv_n / (kr * kr + ki * ki);
                double re = S1[2 * m] * kr + S1[2 * m + 1] * ki, im = S1[2 * m + 1] * kr - S1[2 * m] * ki;
                S1[2 * m] = (nf_real)(re * s), S1[2 * m + 1] = (nf_real)(im * s);
            }
            fc_c2r(st, S1, x + off);
        }
    for (int i = 0; i < n; i++) logdet[i] -= (nf_real)ld;
    return nf_bijector_check_output(b, x, logdet, n, "inverse");
}

/* dlogdet/dk_q[j] = sum_w e^{-2 pi i w.j/N} / K_q(w) = sum_w conj(1/K_q(w)) e^{+2 pi i w.j/N}
 * (real, since 1/K_q is Hermitian) = c2r(conj(1/K_q))[j], FFTW's unnormalised c2r.  (Equivalently
 * d log|det C|/dC = C^{-T} summed along the circulant's diagonals: N q[-j] with q = IDFT(1/K).)
 * Adds scale times it to gk_q; uses S1 and R as scratch. */
static void fc_logdet_grad(const fftconv_state *st, const nf_real *K, double scale, nf_real *gk, nf_real *S1,
                           nf_real *R)
{
    for (int m = 0; m < st->M; m++) {
        double kr = K[2 * m], ki = K[2 * m + 1], a2 = kr * kr + ki * ki;
        S1[2 * m] = (nf_real)(kr / a2), S1[2 * m + 1] = (nf_real)(ki / a2); /* conj(1/K) = K / |K|^2 */
    }
    fc_c2r(st, S1, R);
    for (int j = 0; j < st->N; j++) gk[j] += (nf_real)(scale * R[j]);
}

/* y = k (*) x.  dL/dx = k correlated with dy:  DX = conj(K) DY;
 * dL/dk[j] = sum_m dy[m] x[m - j]:  DK = sum_rows DY conj(X)  (accumulated in A, one c2r per channel);
 * plus U dlogdet/dk with U = sum_i dlogdet_i. */
static int fftconv_backward(nf_bijector *b, nf_real *dx, nf_real *dctx, const nf_real *dy, const nf_real *dlogdet,
                            const nf_real *x, const nf_real *y, const nf_real *ctx, int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const fftconv_state *st = b->state;
    const int N = st->N, M = st->M;
    nf_real *Ks = ws, *A = Ks + 2 * (size_t)st->c * M, *S1 = A + 2 * (size_t)st->c * M, *S2 = S1 + 2 * (size_t)M,
            *R = S2 + 2 * (size_t)M;
    fc_kernel_spectra(b, Ks);
    memset(A, 0, 2 * (size_t)st->c * M * sizeof(nf_real));
    const nf_real inv_n = (nf_real)(1.0 / N);
    for (int i = 0; i < n; i++)
        for (int q = 0; q < st->c; q++) {
            const size_t off = ((size_t)i * st->c + q) * N;
            const nf_real *K = Ks + 2 * (size_t)q * M;
            nf_real *Aq = A + 2 * (size_t)q * M;
            fc_r2c(st, dy + off, S1);
            fc_r2c(st, x + off, S2);
            for (int m = 0; m < M; m++) { /* A += S1 conj(S2);  S1 <- S1 conj(K) / N */
                nf_real sr = S1[2 * m], si = S1[2 * m + 1], xr = S2[2 * m], xi = S2[2 * m + 1];
                Aq[2 * m] += sr * xr + si * xi;
                Aq[2 * m + 1] += si * xr - sr * xi;
                S1[2 * m] = (sr * K[2 * m] + si * K[2 * m + 1]) * inv_n;
                S1[2 * m + 1] = (si * K[2 * m] - sr * K[2 * m + 1]) * inv_n;
            }
            if (dx) {
                fc_c2r(st, S1, R);
                for (int j = 0; j < N; j++) dx[off + j] += R[j];
            }
        }
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    nf_real *gk = b->P->grad + st->kernel;
    for (int q = 0; q < st->c; q++) {
        fc_c2r(st, A + 2 * (size_t)q * M, R);
        for (int j = 0; j < N; j++) gk[(size_t)q * N + j] += R[j] * inv_n;
        fc_logdet_grad(st, Ks + 2 * (size_t)q * M, U, gk + (size_t)q * N, S1, R);
    }
    return NF_OK;
}

/* x = k^{-1} (*) y.  With dY^ = conj(1/K) DX (the spectrum of dL/dy = C^{-T} dx):
 * dL/dy = c2r(dY^) / N;  dL/dk = -sum_rows (dL/dy correlated with x):  DK = -sum_rows dY^ conj(X);
 * minus U dlogdet/dk (the inverse's log-determinant is the negative). */
static int fftconv_inverse_backward(nf_bijector *b, nf_real *dy, nf_real *dctx, const nf_real *dx,
                                    const nf_real *dlogdet, const nf_real *y, const nf_real *x, const nf_real *ctx,
                                    int n, nf_real *ws)
{
    (void)dctx, (void)y, (void)ctx;
    const fftconv_state *st = b->state;
    const int N = st->N, M = st->M;
    nf_real *Ks = ws, *A = Ks + 2 * (size_t)st->c * M, *S1 = A + 2 * (size_t)st->c * M, *S2 = S1 + 2 * (size_t)M,
            *R = S2 + 2 * (size_t)M;
    fc_kernel_spectra(b, Ks);
    memset(A, 0, 2 * (size_t)st->c * M * sizeof(nf_real));
    const double inv_n = 1.0 / N;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < st->c; q++) {
            const size_t off = ((size_t)i * st->c + q) * N;
            const nf_real *K = Ks + 2 * (size_t)q * M;
            nf_real *Aq = A + 2 * (size_t)q * M;
            fc_r2c(st, dx + off, S1);
            fc_r2c(st, x + off, S2);
            for (int m = 0; m < M; m++) {
                /* T = S1 / conj(K) = S1 K / |K|^2;  A -= T conj(S2);  S1 <- T / N */
                double kr = K[2 * m], ki = K[2 * m + 1], a2 = kr * kr + ki * ki;
                double sr = S1[2 * m], si = S1[2 * m + 1];
                double tr = (sr * kr - si * ki) / a2, ti = (sr * ki + si * kr) / a2;
                double xr = S2[2 * m], xi = S2[2 * m + 1];
                Aq[2 * m] -= (nf_real)(tr * xr + ti * xi);
                Aq[2 * m + 1] -= (nf_real)(ti * xr - tr * xi);
                S1[2 * m] = (nf_real)(tr * inv_n), S1[2 * m + 1] = (nf_real)(ti * inv_n);
            }
            if (dy) {
                fc_c2r(st, S1, R);
                for (int j = 0; j < N; j++) dy[off + j] += R[j];
            }
        }
    double U = 0;
    for (int i = 0; i < n; i++) U += dlogdet[i];
    nf_real *gk = b->P->grad + st->kernel;
    for (int q = 0; q < st->c; q++) {
        fc_c2r(st, A + 2 * (size_t)q * M, R);
        for (int j = 0; j < N; j++) gk[(size_t)q * N + j] += (nf_real)(R[j] * inv_n);
        fc_logdet_grad(st, Ks + 2 * (size_t)q * M, -U, gk + (size_t)q * N, S1, R);
    }
    return NF_OK;
}

const nf_bijector_type nf_bijector_fftconv = {
    .name = "fftconv",
    .options_help = "channels=1 height=1 width=D/(channels*height) tol=1e-6|1e-10 (circular convolution by FFT)",
    .create = fftconv_create,
    .destroy = fftconv_destroy,
    .workspace = fftconv_workspace,
    .forward = fftconv_forward,
    .inverse = fftconv_inverse,
    .backward = fftconv_backward,
    .inverse_backward = fftconv_inverse_backward,
    .init_data = NULL,
};
