/* training/image_align.c - the frozen encoder and the reverse alignment loss (training/image_align.h
 * for the formulas). */
#include "training/image_align.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flows/tarflow.h"

int nf_image_align_encoder_init(nf_image_align *a, nf_params *P, int h, int w, int c, int patch, int classes,
                                nf_rng *rng)
{
    memset(a, 0, sizeof *a);
    if (patch < 1 || h % patch || w % patch)
        return nf_error(NF_EINVAL, "alignment: patch %d must divide the image sides %dx%d", patch, h, w);
    if (classes < 2) return nf_error(NF_EINVAL, "alignment: the encoder is a classifier and needs at least 2 classes (got %d)", classes);
    a->h = h, a->w = w, a->c = c, a->patch = patch, a->classes = classes;
    a->T = (h / patch) * (w / patch);
    NF_TRY(nf_conv2d_init(&a->conv1, P, "align.enc.conv1", c, NF_ALIGN_C1, 3, rng));
    NF_TRY(nf_conv2d_init(&a->conv2, P, "align.enc.conv2", NF_ALIGN_C1, NF_ALIGN_FEAT, 3, rng));
    return nf_linear_init(&a->head, P, "align.enc.head", a->T * NF_ALIGN_FEAT, classes, 0, NULL, rng);
}

int nf_image_align_proj_init(nf_image_align *a, nf_params *P, const nf_flow *flow, uint64_t layers, nf_rng *rng)
{
    a->nblk = 0;
    for (int j = 0; j < NF_ALIGN_MAX_BLOCKS; j++) {
        if (!(layers >> j & 1)) continue;
        int k = flow->nb - 1 - j, T, d, rev;
        if (k < 0)
            return nf_error(NF_EINVAL, "alignment layer %d: the flow has %d bijectors (generative blocks 0..%d)", j,
                            flow->nb, flow->nb - 1);
        if (!nf_tarflow_is(&flow->b[k]))
            return nf_error(NF_EINVAL, "alignment layer %d: generative block %d is '%s'; expected a tarflow block", j, j,
                            flow->b[k].name);
        NF_TRY(nf_tarflow_shape(&flow->b[k], &T, &d, &rev));
        if (T != a->T || (a->nblk && d != a->d))
            return nf_error(NF_EINVAL, "alignment layer %d: the block has %d tokens of width %d; expected %d tokens (patch %d)%s",
                            j, T, d, a->T, a->patch, a->nblk ? " and the width of the other aligned blocks" : "");
        char name[64];
        snprintf(name, sizeof name, "align.proj%d", j);
        NF_TRY(nf_linear_init(&a->proj[a->nblk], P, name, d, NF_ALIGN_FEAT, 0, NULL, rng));
        a->gen[a->nblk] = j, a->chain[a->nblk] = k, a->d = d;
        a->nblk++;
    }
    return a->nblk ? NF_OK : nf_error(NF_EINVAL, "alignment: no layers chosen (expected generative blocks like 0 or 0,1)");
}

void nf_image_align_free(nf_image_align *a)
{
    if (!a) return;
    nf_real **p[] = {&a->a1, &a->r1,   &a->a2, &a->r2, &a->pool, &a->logits, &a->dlogits, &a->dpool, &a->d2,
                     &a->d1, &a->cws, &a->feat, &a->q, &a->dq,  &a->hr,     &a->dhr,     &a->dh};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
    a->cap = 0;
}

static int reserve(nf_image_align *a, int n)
{
    if (n <= a->cap) return NF_OK;
    nf_image_align_free(a);
    const size_t N = (size_t)n, px = N * a->h * a->w, nt = N * a->T, d = a->d > 0 ? (size_t)a->d : 1;
    size_t c1 = nf_conv2d_workspace(&a->conv1, n, a->h, a->w), c2 = nf_conv2d_workspace(&a->conv2, n, a->h, a->w);
    struct {
        nf_real **p;
        size_t size;
    } b[] = {{&a->a1, px * NF_ALIGN_C1}, {&a->r1, px * NF_ALIGN_C1}, {&a->a2, px * NF_ALIGN_FEAT},
             {&a->r2, px * NF_ALIGN_FEAT}, {&a->pool, nt * NF_ALIGN_FEAT}, {&a->logits, N * a->classes},
             {&a->dlogits, N * a->classes}, {&a->dpool, nt * NF_ALIGN_FEAT}, {&a->d2, px * NF_ALIGN_FEAT},
             {&a->d1, px * NF_ALIGN_C1}, {&a->cws, (c1 > c2 ? c1 : c2) + 1}, {&a->feat, nt * NF_ALIGN_FEAT},
             {&a->q, nt * NF_ALIGN_FEAT}, {&a->dq, nt * NF_ALIGN_FEAT}, {&a->hr, nt * d}, {&a->dhr, nt * d},
             {&a->dh, (a->nblk ? (size_t)a->nblk : 1) * nt * d}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (!(*b[i].p = malloc(b[i].size * sizeof(nf_real)))) {
            nf_image_align_free(a);
            return nf_error(NF_ENOMEM, "out of memory for the alignment buffers of %d images", n);
        }
    a->cap = n;
    return NF_OK;
}

/* a1 = conv1(y0), r1 = relu(a1), a2 = conv2(r1), r2 = relu(a2), pool[i, r] = e_r = the mean of r2
 * over the p x p pixels of patch r (raster order). */
static void encoder_forward(nf_image_align *a, const nf_params *P, const nf_real *y0, int n)
{
    const size_t px = (size_t)n * a->h * a->w;
    const int p = a->patch, pw = a->w / p, T = a->T;
    nf_conv2d_forward(&a->conv1, P, a->cws, a->a1, y0, n, a->h, a->w);
    nf_act_forward(NF_ACT_RELU, a->r1, a->a1, px * NF_ALIGN_C1);
    nf_conv2d_forward(&a->conv2, P, a->cws, a->a2, a->r1, n, a->h, a->w);
    nf_act_forward(NF_ACT_RELU, a->r2, a->a2, px * NF_ALIGN_FEAT);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < T; r++) {
            double e[NF_ALIGN_FEAT] = {0};
            int bi = r / pw, bj = r % pw;
            for (int di = 0; di < p; di++)
                for (int dj = 0; dj < p; dj++) {
                    const nf_real *v = a->r2 + (((size_t)i * a->h + bi * p + di) * a->w + bj * p + dj) * NF_ALIGN_FEAT;
                    for (int k = 0; k < NF_ALIGN_FEAT; k++) e[k] += v[k];
                }
            nf_real *o = a->pool + ((size_t)i * T + r) * NF_ALIGN_FEAT;
            for (int k = 0; k < NF_ALIGN_FEAT; k++) o[k] = (nf_real)(e[k] / (p * p));
        }
}

/* logits = Wh [e_0, ..., e_{T-1}] + bh; CE_i = logsumexp(logits_i) - logits_i[c_i];
 * backward with dCE_i = 1/n: dlogits = (softmax - onehot)/n, de = dlogits Wh,
 * dr2 = de_r / p^2 at each pixel of patch r, da2 = dr2 relu'(a2), dr1 = conv2'(da2), da1 = dr1 relu'(a1). */
int nf_image_align_encoder_loss(nf_image_align *a, nf_params *P, const nf_real *y0, const int *cls, int n, int grad,
                                double *ce, double *mean)
{
    NF_TRY(reserve(a, n));
    const int K = a->classes;
    for (int i = 0; i < n; i++)
        if (cls[i] < 0 || cls[i] >= K)
            return nf_error(NF_EDATA, "image %d has class %d; the encoder needs a class in 0..%d for every image", i, cls[i], K - 1);
    encoder_forward(a, P, y0, n);
    nf_linear_forward(&a->head, P, NULL, a->logits, a->pool, n);
    double total = 0;
    for (int i = 0; i < n; i++) {
        const nf_real *l = a->logits + (size_t)i * K;
        double mx = l[0], s = 0;
        for (int k = 1; k < K; k++) mx = fmax(mx, l[k]);
        for (int k = 0; k < K; k++) s += exp(l[k] - mx);
        double lse = mx + log(s), ci = lse - l[cls[i]];
        if (ce) ce[i] = ci;
        total += ci;
        for (int k = 0; k < K; k++) a->dlogits[(size_t)i * K + k] = (nf_real)((exp(l[k] - lse) - (k == cls[i])) / n);
    }
    *mean = total / n;
    if (!isfinite(*mean)) return nf_error(NF_ENONFINITE, "encoder cross-entropy is %g", *mean);
    if (!grad) return NF_OK;
    const size_t px = (size_t)n * a->h * a->w;
    const int p = a->patch, pw = a->w / p, T = a->T;
    memset(a->dpool, 0, (size_t)n * T * NF_ALIGN_FEAT * sizeof(nf_real));
    nf_linear_backward(&a->head, P, NULL, a->dpool, a->dlogits, a->pool, n);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < T; r++) {
            const nf_real *de = a->dpool + ((size_t)i * T + r) * NF_ALIGN_FEAT;
            int bi = r / pw, bj = r % pw;
            for (int di = 0; di < p; di++)
                for (int dj = 0; dj < p; dj++) {
                    nf_real *g = a->d2 + (((size_t)i * a->h + bi * p + di) * a->w + bj * p + dj) * NF_ALIGN_FEAT;
                    for (int k = 0; k < NF_ALIGN_FEAT; k++) g[k] = de[k] / (nf_real)(p * p);
                }
        }
    nf_act_backward_ex(NF_ACT_RELU, 0, a->d2, a->d2, a->a2, a->r2, px * NF_ALIGN_FEAT, 0);
    memset(a->d1, 0, px * NF_ALIGN_C1 * sizeof(nf_real));
    nf_conv2d_backward(&a->conv2, P, a->cws, a->d1, a->d2, a->r1, n, a->h, a->w);
    nf_act_backward_ex(NF_ACT_RELU, 0, a->d1, a->d1, a->a1, a->r1, px * NF_ALIGN_C1, 0);
    nf_conv2d_backward(&a->conv1, P, a->cws, NULL, a->d1, y0, n, a->h, a->w);
    return NF_OK;
}

int nf_image_align_encoder_predict(nf_image_align *a, const nf_params *P, const nf_real *y0, int n, int *pred)
{
    NF_TRY(reserve(a, n));
    encoder_forward(a, P, y0, n);
    nf_linear_forward(&a->head, P, NULL, a->logits, a->pool, n);
    for (int i = 0; i < n; i++) {
        const nf_real *l = a->logits + (size_t)i * a->classes;
        int best = 0;
        for (int k = 1; k < a->classes; k++)
            if (l[k] > l[best]) best = k;
        pred[i] = best;
    }
    return NF_OK;
}

/* feat[i, r] = e_r / |e_r| (0 for a zero feature). */
static void token_features(nf_image_align *a, int n)
{
    for (size_t m = 0; m < (size_t)n * a->T; m++) {
        const nf_real *e = a->pool + m * NF_ALIGN_FEAT;
        nf_real *f = a->feat + m * NF_ALIGN_FEAT;
        double s2 = 0;
        for (int k = 0; k < NF_ALIGN_FEAT; k++) s2 += (double)e[k] * e[k];
        double inv = s2 > 0 ? 1 / sqrt(s2) : 0;
        for (int k = 0; k < NF_ALIGN_FEAT; k++) f[k] = (nf_real)(e[k] * inv);
    }
}

/* Per aligned block: hr = h in raster order, q = hr W^T + b, cos = q . e_hat / |q|,
 * L += (w / nT) sum (1 - cos);  dq = -(w / nT) (e_hat / |q| - cos q / |q|^2),
 * dhr = dq W (dW, db into P->grad), dh = dhr back in the block's token order. */
int nf_image_align_loss(nf_image_align *a, nf_params *P, nf_flow *flow, const nf_real *y0, int n, double w, int grad,
                        double *loss)
{
    NF_TRY(reserve(a, n));
    encoder_forward(a, P, y0, n);
    token_features(a, n);
    const int T = a->T, d = a->d;
    const size_t nt = (size_t)n * T;
    const double scale = w / (double)nt;
    double total = 0;
    for (int b = 0; b < a->nblk; b++) {
        nf_bijector *bij = &flow->b[a->chain[b]];
        const nf_real *h = nf_tarflow_hidden(bij, n);
        int Tb, db, rev;
        NF_TRY(nf_tarflow_shape(bij, &Tb, &db, &rev));
        if (!h) return nf_error(NF_EINVAL, "alignment: block %s has no hidden state of %d images (log_prob first)", bij->name, n);
        /* hr[i, r] = h[i, t], r the raster patch of position t */
        for (int i = 0; i < n; i++)
            for (int t = 0; t < T; t++)
                memcpy(a->hr + ((size_t)i * T + (rev ? T - 1 - t : t)) * d, h + ((size_t)i * T + t) * d, (size_t)d * sizeof(nf_real));
        nf_linear_forward(&a->proj[b], P, NULL, a->q, a->hr, (int)nt);
        for (size_t m = 0; m < nt; m++) {
            const nf_real *q = a->q + m * NF_ALIGN_FEAT, *e = a->feat + m * NF_ALIGN_FEAT;
            nf_real *dq = a->dq + m * NF_ALIGN_FEAT;
            double qq = 0, qe = 0;
            for (int k = 0; k < NF_ALIGN_FEAT; k++) qq += (double)q[k] * q[k], qe += (double)q[k] * e[k];
            double nq = sqrt(qq), cs = nq > 0 ? qe / nq : 0;
            total += w * (1 - cs);
            for (int k = 0; k < NF_ALIGN_FEAT; k++)
                dq[k] = nq > 0 ? (nf_real)(-scale * (e[k] / nq - cs * q[k] / qq)) : 0;
        }
        if (!grad) continue;
        memset(a->dhr, 0, nt * d * sizeof(nf_real));
        nf_linear_backward(&a->proj[b], P, NULL, a->dhr, a->dq, a->hr, (int)nt);
        nf_real *dh = a->dh + (size_t)b * nt * d;
        for (int i = 0; i < n; i++)
            for (int t = 0; t < T; t++)
                memcpy(dh + ((size_t)i * T + t) * d, a->dhr + ((size_t)i * T + (rev ? T - 1 - t : t)) * d, (size_t)d * sizeof(nf_real));
        nf_tarflow_set_hidden_grad(bij, dh);
    }
    *loss = total / (double)nt;
    if (!isfinite(*loss)) return nf_error(NF_ENONFINITE, "alignment loss is %g", *loss);
    return NF_OK;
}

void nf_image_align_clear(nf_image_align *a, nf_flow *flow)
{
    for (int b = 0; b < a->nblk; b++) nf_tarflow_set_hidden_grad(&flow->b[a->chain[b]], NULL);
}
