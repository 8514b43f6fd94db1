/* training/model_image.c - the "image" model kind (see training/model_image.h for the formulas; the
 * configuration and the generated specs are in training/image_config.c, the alignment's encoder and
 * loss in training/image_align.c, the variational dequantiser in training/image_dequant.c). */
#include "training/model_image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "training/image_align.h"
#include "training/image_dequant.h"
#include "training/keyed_noise.h"
#include "training/micro_batch.h"

#define LN2 0.69314718055994530942

/* ---- state and buffers ---------------------------------------------------------------------- */

typedef struct {
    nf_image_config cfg;
    int D;
    int cap;             /* images the buffers hold */
    nf_real *y;          /* (cap, D) dequantised images */
    nf_real *ctx;        /* (cap, classes) */
    nf_real *logp;       /* (cap) */
    nf_real *dlogp;      /* (cap) */
    nf_real *dy;         /* (cap, D) */
    nf_real *y0;         /* (cap, D) clean images (alignment, variational dequantisation) */
    int *cls;            /* (cap) classes (alignment) */
    nf_real *lq;         /* (cap) log q(u | x) of the last dequantisation (0: uniform) */
    nf_real *eps, *v, *dv; /* (cap, D) variational: base draws, v = logit u, dL/dv */
    nf_real *dlqv;       /* (cap) variational: dL/dlog q(v | x) */
    nf_image_align al;   /* encoder and projections (cfg.align) */
    nf_image_dequant dq; /* the dequantiser q(u | x) (cfg.dequant variational) */
    size_t enc_count;    /* stage "encoder" trains P[0, enc_count) */
    size_t s_draws;      /* offset in S of the count of training losses: the key of their noise */
    int64_t *class_counts; /* (classes) training images per class, the classifier's prior; NULL: unknown */
    nf_micro_batches micro; /* training batches in micro-batches (training/micro_batch.h) */
} image_state;

static void free_buffers(image_state *st)
{
    free(st->y), free(st->ctx), free(st->logp), free(st->dlogp), free(st->dy), free(st->y0), free(st->cls);
    free(st->lq), free(st->eps), free(st->v), free(st->dv), free(st->dlqv);
    st->y = st->ctx = st->logp = st->dlogp = st->dy = st->y0 = st->lq = st->eps = st->v = st->dv = st->dlqv = NULL;
    st->cls = NULL;
    st->cap = 0;
}

static int reserve(image_state *st, int n)
{
    if (n <= st->cap) return NF_OK;
    size_t nd = (size_t)n * st->D, K = st->cfg.classes > 0 ? (size_t)st->cfg.classes : 1;
    const int vd = st->cfg.dequant == NF_DEQUANT_VARIATIONAL;
    free_buffers(st);
    if ((st->cfg.align || vd) && !(st->y0 = malloc(nd * sizeof *st->y0)))
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d images of %d values", n, st->D);
    if (st->cfg.align && !(st->cls = malloc((size_t)n * sizeof *st->cls)))
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d images of %d values", n, st->D);
    if (vd && (!(st->eps = malloc(nd * sizeof *st->eps)) || !(st->v = malloc(nd * sizeof *st->v)) ||
               !(st->dv = malloc(nd * sizeof *st->dv)) || !(st->dlqv = malloc((size_t)n * sizeof *st->dlqv)))) {
        free_buffers(st);
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d images of %d values", n, st->D);
    }
    st->y = malloc(nd * sizeof *st->y);
    st->dy = malloc(nd * sizeof *st->dy);
    st->ctx = malloc((size_t)n * K * sizeof *st->ctx);
    st->logp = malloc((size_t)n * sizeof *st->logp);
    st->dlogp = malloc((size_t)n * sizeof *st->dlogp);
    st->lq = malloc((size_t)n * sizeof *st->lq);
    if (!st->y || !st->dy || !st->ctx || !st->logp || !st->dlogp || !st->lq) {
        free_buffers(st);
        return nf_error(NF_ENOMEM, "out of memory for a batch of %d images of %d values", n, st->D);
    }
    st->cap = n;
    return NF_OK;
}

/* Training noise is keyed by (seed, the number of training losses so far, the image's index in
 * the data set), not drawn from a stream (training/keyed_noise.h): the same in any number of
 * processes and after a resume. */
static uint64_t noise_key(const image_state *st, uint64_t draw, size_t idx)
{
    return nf_noise_key(st->cfg.seed, draw, idx);
}

/* The key of image idx's dequantisation noise: draw > 0 a training draw (noise_key), draw 0
 * evaluation's fixed noise. */
static uint64_t image_key(const image_state *st, uint64_t draw, size_t idx)
{
    return draw ? noise_key(st, draw, idx) : nf_mix64(st->cfg.seed * 0x632be59bd9b4e019ULL ^ (uint64_t)idx);
}

/* Every value of the n images x is a grey level 0..L-1, or NF_EDATA naming the image and value. */
static int check_levels(const image_state *st, const nf_real *x, const size_t *idx, int n)
{
    const double L = st->cfg.levels;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < st->D; k++) {
            double v = x[(size_t)i * st->D + k];
            if (!(v >= 0 && v <= L - 1))
                return nf_error(NF_EDATA, "image %zu, value %d is %g; expected a grey level in 0..%d",
                                idx ? idx[i] : (size_t)i, k, v, st->cfg.levels - 1);
        }
    return NF_OK;
}

/* y = (x + u) / L - 1/2 for n images, u hashed from the key of each image (draw as above), or
 * drawn from rng when rng is given (the library calls outside training). */
static int dequantize(const image_state *st, nf_real *y, const nf_real *x, const size_t *idx, int n, nf_rng *rng,
                      uint64_t draw)
{
    const int D = st->D;
    const double L = st->cfg.levels;
    NF_TRY(check_levels(st, x, idx, n));
    /* keyed uniforms: each image's from its own key, so the images split over the threads and the
     * values stay the same for any thread count (rng: one stream, in order) */
#pragma omp parallel for schedule(static) if (!rng && n > 1 && (size_t)n * D > 8192)
    for (int i = 0; i < n; i++) {
        const nf_real *xi = x + (size_t)i * D;
        nf_real *yi = y + (size_t)i * D;
        uint64_t key = image_key(st, draw, idx ? idx[i] : (size_t)i);
        for (int k = 0; k < D; k++) {
            double u = rng ? nf_rng_uniform(rng) : nf_keyed_uniform(key, (uint64_t)k);
            yi[k] = (nf_real)((xi[k] + u) / L - 0.5);
        }
    }
    return NF_OK;
}

static double sigmoid(double v)
{
    if (v >= 0) return 1 / (1 + exp(-v));
    const double e = exp(v);
    return e / (1 + e);
}

/* Variational dequantisation of n images: eps_ik standard normal by Box-Muller from the image's key
 * (streams 4D + 2k and 4D + 2k + 1, apart from u's, the noise's and the label drop's) or from rng;
 * v, log q(v | x) = the dequantiser on (eps, y0 = (x + 1/2) / L - 1/2); u = sigmoid(v);
 *   y = (x + u) / L - 1/2,   lq = log q(u | x) = log q(v | x) - sum_k log sigmoid'(v_k). */
static int dequantize_variational(image_state *st, const nf_params *P, const nf_real *x, const size_t *idx, int n,
                                  nf_rng *rng, uint64_t draw)
{
    const int D = st->D;
    const double L = st->cfg.levels;
    NF_TRY(check_levels(st, x, idx, n));
    for (int i = 0; i < n; i++) {
        const uint64_t key = image_key(st, draw, idx ? idx[i] : (size_t)i);
        nf_real *e = st->eps + (size_t)i * D;
        if (rng) {
            nf_rng_fill_normal(rng, e, (size_t)D);
            continue;
        }
        for (int k = 0; k < D; k++) {
            e[k] = (nf_real)nf_keyed_normal(key, 4 * (uint64_t)D + 2 * (uint64_t)k);
        }
    }
    for (size_t k = 0; k < (size_t)n * D; k++) st->y0[k] = (nf_real)((x[k] + 0.5) / L - 0.5);
    NF_TRY(nf_image_dequant_forward(&st->dq, P, st->v, st->lq, st->eps, st->y0, n));
    for (int i = 0; i < n; i++) {
        double lsd = 0;
        for (int k = 0; k < D; k++) {
            const size_t j = (size_t)i * D + k;
            lsd += nf_log_sigmoid_deriv(st->v[j]);
            st->y[j] = (nf_real)((x[j] + sigmoid(st->v[j])) / L - 0.5);
        }
        st->lq[i] = (nf_real)(st->lq[i] - lsd);
    }
    return NF_OK;
}

/* st->y and st->lq (log q(u | x); 0 for uniform dequantisation) of n images x (reserved). */
static int dequant_batch(nf_model *m, const nf_real *x, const size_t *idx, int n, nf_rng *rng, uint64_t draw)
{
    image_state *st = m->state;
    if (st->cfg.dequant == NF_DEQUANT_VARIATIONAL) return dequantize_variational(st, m->P, x, idx, n, rng, draw);
    for (int i = 0; i < n; i++) st->lq[i] = 0;
    return dequantize(st, st->y, x, idx, n, rng, draw);
}

/* The gradient into the dequantiser, after the flow's backward left dL/dy in st->dy, for the loss
 * L = sum_i c (-log p(y_i) + log q(u_i | x_i)) + const (c = 1 / (n D ln 2)):
 *   dL/dv = dL/dy sigmoid'(v) / L - c (1 - 2 sigmoid(v)),   dL/dlog q(v | x) = c. */
static int dequant_backward(nf_model *m, int n, double c)
{
    image_state *st = m->state;
    const double L = st->cfg.levels;
    for (size_t k = 0; k < (size_t)n * st->D; k++) {
        const double s = sigmoid(st->v[k]);
        st->dv[k] = (nf_real)(st->dy[k] * s * (1 - s) / L - c * (1 - 2 * s));
    }
    for (int i = 0; i < n; i++) st->dlqv[i] = (nf_real)c;
    return nf_image_dequant_backward(&st->dq, m->P, st->dv, st->dlqv, n);
}

/* y_ik += sigma eps_ik, eps standard normal by Box-Muller from the image's key (D + k streams, apart
 * from dequantisation's 0..D-1). */
static void add_noise(const image_state *st, nf_real *y, const size_t *idx, int n, uint64_t draw)
{
    const int D = st->D;
#pragma omp parallel for schedule(static) if (n > 1 && (size_t)n * D > 16384)
    for (int i = 0; i < n; i++) {
        uint64_t key = noise_key(st, draw, idx ? idx[i] : (size_t)i);
        for (int k = 0; k < D; k++) {
            y[(size_t)i * D + k] += (nf_real)(st->cfg.noise * nf_keyed_normal(key, (uint64_t)D + 2 * (uint64_t)k));
        }
    }
}

/* The one-hot contexts of classes (n), or copies of given contexts; class -1 (or a dropped label)
 * is the all-zero context. */
static void one_hot(const image_state *st, nf_real *ctx, const int *classes, int n)
{
    const int K = st->cfg.classes;
    memset(ctx, 0, (size_t)n * K * sizeof *ctx);
    for (int i = 0; i < n; i++)
        if (classes && classes[i] >= 0 && classes[i] < K) ctx[(size_t)i * K + classes[i]] = 1;
}

static double bpd_of(const image_state *st, double logp)
{
    return -(logp - st->D * log((double)st->cfg.levels)) / (st->D * LN2);
}

/* The encoder's input: y0 = (x + 1/2) / L - 1/2, the centre of each dequantisation cell. */
static void clean(const image_state *st, nf_real *y0, const nf_real *x, int n)
{
    const double L = st->cfg.levels;
    for (size_t k = 0; k < (size_t)n * st->D; k++) y0[k] = (nf_real)((x[k] + 0.5) / L - 0.5);
}

/* The class of each row of one-hot contexts (n, C): the index of its largest entry, -1 when none is
 * positive. */
static void classes_of(int *cls, const nf_real *ctx, int C, int n)
{
    for (int i = 0; i < n; i++) {
        const nf_real *r = ctx + (size_t)i * C;
        int best = -1;
        for (int k = 0; k < C; k++)
            if (r[k] > 0 && (best < 0 || r[k] > r[best])) best = k;
        cls[i] = best;
    }
}

/* Stage "encoder": the classifier's cross-entropy (per image into ce when not NULL). */
static int encoder_pass(nf_model *m, const nf_batch *b, int grad, double *ce, double *loss)
{
    image_state *st = m->state;
    if (!b->ctx || b->ctx_dim != st->cfg.align_classes)
        return nf_error(NF_EDATA, "the alignment encoder needs the images' classes (a one-hot context of %d values; the batch has %d)",
                        st->cfg.align_classes, b->ctx ? b->ctx_dim : 0);
    NF_TRY(reserve(st, b->n));
    clean(st, st->y0, b->x, b->n);
    classes_of(st->cls, b->ctx, b->ctx_dim, b->n);
    return nf_image_align_encoder_loss(&st->al, m->P, st->y0, st->cls, b->n, grad, ce, loss);
}

/* ---- the kind ---------------------------------------------------------------------------------- */

/* loss = mean_i bpd_i over the batch, with fresh dequantisation (and noise augmentation) draws:
 * dL/dlogp_i = -1 / (n D ln 2).  Aligned models: in stage "encoder" the classifier's mean
 * cross-entropy instead; in stage "flow" + L_align on the clean images, whose gradient reaches the
 * aligned blocks through their hidden states in the same flow backward (training/image_align.h). */
static int image_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    image_state *st = m->state;
    if (st->cfg.align && m->stage == 0) return encoder_pass(m, b, 1, NULL, loss);
    (void)rng; /* the noise is keyed by the count of draws and each image's index (noise_key) */
    const int n = b->n, D = st->D, K = st->cfg.classes;
    NF_TRY(reserve(st, n));
    const uint64_t draw = (uint64_t)m->S->value[st->s_draws] + 1;
    m->S->value[st->s_draws] += 1;
    NF_TRY(dequant_batch(m, b->x, b->idx, n, NULL, draw));
    if (st->cfg.noise > 0) add_noise(st, st->y, b->idx, n, draw);
    const nf_real *ctx = NULL;
    if (K) {
        memcpy(st->ctx, b->ctx, (size_t)n * K * sizeof *st->ctx);
        if (st->cfg.label_drop > 0)
            for (int i = 0; i < n; i++)
                if (nf_keyed_uniform(noise_key(st, draw, b->idx ? b->idx[i] : (size_t)i), 3 * (uint64_t)D) < st->cfg.label_drop)
                    memset(st->ctx + (size_t)i * K, 0, (size_t)K * sizeof *st->ctx);
        ctx = st->ctx;
    }
    for (int i = 0; i < n; i++) st->dlogp[i] = (nf_real)(-1.0 / (n * D * LN2));
    /* uniform dequantisation without alignment: each image's loss its own, in micro-batches (forward
     * and backward); otherwise the forward here and the backward below */
    const int micro = st->cfg.dequant == NF_DEQUANT_UNIFORM && !st->cfg.align;
    if (micro)
        NF_TRY(nf_micro_batches_run(&st->micro, m->flow, st->logp, st->y, ctx, b->idx, st->dlogp, n,
                                    nf_micro_batch_rows(D, st->cfg.micro_batch, n)));
    else
        NF_TRY(nf_flow_log_prob(m->flow, st->logp, st->y, ctx, b->idx, n));
    double s = 0;
    for (int i = 0; i < n; i++) s += bpd_of(st, st->logp[i] - st->lq[i]);
    *loss = s / n;
    if (micro) return NF_OK;
    if (st->cfg.dequant == NF_DEQUANT_VARIATIONAL) {
        memset(st->dy, 0, (size_t)n * D * sizeof *st->dy);
        NF_TRY(nf_flow_backward(m->flow, st->dlogp, st->dy, NULL));
        return dequant_backward(m, n, 1.0 / (n * D * LN2));
    }
    if (!st->cfg.align) return nf_flow_backward(m->flow, st->dlogp, NULL, NULL);
    /* + w sum_j mean (1 - cos): its gradient enters the aligned blocks' hidden states */
    double al = 0;
    clean(st, st->y0, b->x, n);
    int rc = nf_image_align_loss(&st->al, m->P, m->flow, st->y0, n, st->cfg.align_weight, 1, &al);
    if (rc == NF_OK) rc = nf_flow_backward(m->flow, st->dlogp, NULL, NULL);
    nf_image_align_clear(&st->al, m->flow);
    *loss += al;
    return rc;
}

/* logp (n) of the dequantised images y with nothing to follow (evaluation): in chunks whose
 * workspace stays bounded (nf_flow_chunk_rows), so a validation or test set of many large images
 * does not make the flow reserve workspace for all of them at once; each image's log-density is
 * its own, so the numbers are those of one call. */
static int logp_only(nf_model *m, nf_real *logp, const nf_real *y, const nf_real *ctx, const size_t *idx, int n)
{
    const image_state *st = m->state;
    const int K = st->cfg.classes, rows = nf_flow_rows_independent(m->flow) ? nf_flow_chunk_rows(m->flow, n) : n;
    for (int at = 0; at < n; at += rows) {
        const int k = n - at < rows ? n - at : rows;
        NF_TRY(nf_flow_log_prob(m->flow, logp + at, y + (size_t)at * st->D, ctx ? ctx + (size_t)at * K : NULL,
                                idx ? idx + at : NULL, k));
    }
    return NF_OK;
}

/* values[i] = -bpd of image i (its class as context), deterministic dequantisation (variational: the
 * bound with the image's fixed eps). */
static int image_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    image_state *st = m->state;
    if (st->cfg.align && m->stage == 0) {
        double mean;
        NF_TRY(encoder_pass(m, b, 0, values, &mean));
        for (int i = 0; i < b->n; i++) values[i] = -values[i];
        return NF_OK;
    }
    NF_TRY(reserve(st, b->n));
    NF_TRY(dequant_batch(m, b->x, b->idx, b->n, NULL, 0));
    NF_TRY(logp_only(m, st->logp, st->y, st->cfg.classes ? b->ctx : NULL, b->idx, b->n));
    for (int i = 0; i < b->n; i++) values[i] = -bpd_of(st, st->logp[i] - st->lq[i]);
    return NF_OK;
}

/* ActNorm's data-dependent start from the first (up to) 512 training images, dequantised as in
 * evaluation, so every process of a parallel run starts from the same state. */
/* The training images of each class (the argmax of each one-hot context), in chunks of rows: the
 * likelihood classifier's prior p(c). */
static int count_classes(image_state *st, const nf_source *train)
{
    const int K = st->cfg.classes;
    enum { CHUNK = 4096 };
    free(st->class_counts);
    st->class_counts = calloc((size_t)K, sizeof *st->class_counts);
    size_t *idx = malloc(CHUNK * sizeof *idx);
    int rc = st->class_counts && idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory counting %d classes", K);
    for (size_t at = 0; rc == NF_OK && at < train->n; at += CHUNK) {
        const size_t n = train->n - at < CHUNK ? train->n - at : CHUNK;
        nf_batch b = {0};
        for (size_t i = 0; i < n; i++) idx[i] = at + i;
        rc = nf_source_fetch(train, idx, (int)n, &b);
        for (size_t i = 0; rc == NF_OK && i < n; i++) {
            const nf_real *c = b.ctx + i * (size_t)K;
            int k = 0;
            for (int j = 1; j < K; j++)
                if (c[j] > c[k]) k = j;
            st->class_counts[k]++;
        }
        nf_batch_free(&b);
    }
    free(idx);
    if (rc != NF_OK) free(st->class_counts), st->class_counts = NULL;
    return rc;
}

static int image_init_data(nf_model *m, const nf_source *train)
{
    image_state *st = m->state;
    int n = (int)(train->n < 512 ? train->n : 512), K = st->cfg.classes;
    if (n < 1) return NF_OK;
    size_t *idx = malloc((size_t)n * sizeof *idx);
    nf_real *y = malloc((size_t)n * st->D * sizeof *y);
    nf_batch b = {0};
    int rc = idx && y ? NF_OK : nf_error(NF_ENOMEM, "out of memory initialising from %d images", n);
    for (int i = 0; rc == NF_OK && i < n; i++) idx[i] = (size_t)i;
    if (rc == NF_OK) rc = nf_source_fetch(train, idx, n, &b);
    /* in pieces of at most 64 images, so the (variational) dequantiser's buffers stay batch-sized */
    for (int at = 0; rc == NF_OK && at < n; at += 64) {
        const int k = n - at < 64 ? n - at : 64;
        rc = reserve(st, k);
        if (rc == NF_OK) rc = dequant_batch(m, b.x + (size_t)at * st->D, b.idx + at, k, NULL, 0);
        if (rc == NF_OK) memcpy(y + (size_t)at * st->D, st->y, (size_t)k * st->D * sizeof *y);
    }
    if (rc == NF_OK) rc = nf_flow_init_data(m->flow, y, K ? b.ctx : NULL, n);
    nf_batch_free(&b);
    free(idx), free(y);
    if (rc == NF_OK && K >= 2) rc = count_classes(st, train);
    return rc;
}

static void image_set_training(nf_model *m, int training) { nf_flow_set_training(m->flow, training); }

static const char *const INT_FIELDS[] = {"h", "w", "c", "levels", "classes", "scales", "steps", "hidden",
                                         "patch", "width", "heads", "layers", "blocks"};
static int *int_field(nf_image_config *c, int k)
{
    int *f[] = {&c->h,      &c->w,     &c->c,     &c->levels, &c->classes, &c->scales, &c->steps,
                &c->hidden, &c->patch, &c->width, &c->heads,  &c->layers,  &c->blocks};
    return f[k];
}
#define N_INT_FIELDS ((int)(sizeof INT_FIELDS / sizeof INT_FIELDS[0]))

static int image_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const image_state *st = m->state;
    nf_image_config c = st->cfg;
    char path[256];
    snprintf(path, sizeof path, "%s/image", group);
    NF_TRY(nf_h5_group(f, path));
    NF_TRY(nf_h5_attr_set_string(f, path, "arch", nf_image_arch_name(c.arch)));
    for (int k = 0; k < N_INT_FIELDS; k++) NF_TRY(nf_h5_attr_set_int64(f, path, INT_FIELDS[k], *int_field(&c, k)));
    NF_TRY(nf_h5_attr_set_double(f, path, "noise", c.noise));
    NF_TRY(nf_h5_attr_set_double(f, path, "label_drop", c.label_drop));
    NF_TRY(nf_h5_attr_set_int64(f, path, "seed", (int64_t)c.seed));
    if (st->class_counts) NF_TRY(nf_h5_attr_set_int64s(f, path, "class_counts", st->class_counts, (size_t)c.classes));
    if (c.align) { /* only then: files of unaligned models stay as they were */
        char layers[256];
        nf_image_align_layers_format(c.align_layers, layers, sizeof layers);
        NF_TRY(nf_h5_attr_set_int64(f, path, "align_classes", c.align_classes));
        NF_TRY(nf_h5_attr_set_double(f, path, "align_weight", c.align_weight));
        NF_TRY(nf_h5_attr_set_string(f, path, "align_layers", layers));
    }
    if (c.micro_batch) NF_TRY(nf_h5_attr_set_int64(f, path, "micro_batch", c.micro_batch)); /* likewise */
    if (c.dequant != NF_DEQUANT_UNIFORM) { /* likewise: uniform models' files stay as they were */
        NF_TRY(nf_h5_attr_set_string(f, path, "dequant", nf_image_dequant_name(c.dequant)));
        NF_TRY(nf_h5_attr_set_int64(f, path, "dequant_layers", c.dequant_layers));
        NF_TRY(nf_h5_attr_set_int64(f, path, "dequant_hidden", c.dequant_hidden));
    }
    snprintf(path, sizeof path, "%s/flow", group);
    return nf_model_flow_save(m->flow, f, path);
}

static void image_destroy(nf_model *m)
{
    image_state *st = m->state;
    int shared = m->flow ? !m->flow->owns_params : m->P != NULL;
    if (st) {
        free_buffers(st);
        nf_image_align_free(&st->al);
        nf_image_dequant_free(&st->dq);
        free(st->class_counts);
        nf_micro_batches_free(&st->micro);
    }
    free(st);
    nf_flow_free(m->flow);
    if (shared) nf_params_free(m->P), nf_params_free(m->S);
    m->flow = NULL;
    m->P = m->S = NULL;
    m->state = NULL;
}

static int image_set_stage(nf_model *m, int stage)
{
    const image_state *st = m->state;
    if (stage == 0) m->train_first = 0, m->train_count = st->enc_count;
    else m->train_first = st->enc_count, m->train_count = m->P->n - st->enc_count;
    return NF_OK;
}

/* Build m's components for configuration c (spec filled): the flow from c's spec, or (f not NULL)
 * rebuilt from the file's group.  Unaligned: the flow owns its store.  Aligned: one store, the
 * encoder's entries first (stage "encoder"), then the flow's ("flow.") and the projections (stage
 * "flow"); the flow's weights are those of the unaligned model with the same seed. */
static int build(nf_model *m, const nf_image_config *c, nf_h5 *f, const char *group)
{
    image_state *st = nf_calloc(1, sizeof *st, "image model");
    if (!st) return NF_ENOMEM;
    st->cfg = *c;
    st->D = c->h * c->w * c->c;
    m->state = st;
    m->ctx_dim = c->align ? c->align_classes : c->classes;
    nf_params *P = NULL, *S = NULL;
    nf_rng *rng = NULL;
    int rc = NF_OK;
    if (c->align) {
        m->type = &nf_model_image_aligned;
        m->P = P = nf_params_alloc();
        m->S = S = nf_params_alloc();
        rng = nf_rng_alloc(c->seed, 0xa11970);
        if (!P || !S || !rng) rc = nf_error(NF_ENOMEM, "out of memory building an aligned image model");
        if (rc == NF_OK) rc = nf_image_align_encoder_init(&st->al, P, c->h, c->w, c->c, c->patch, c->align_classes, rng);
        st->enc_count = P ? P->n : 0;
    } else if (c->dequant == NF_DEQUANT_VARIATIONAL) { /* one store for the flow and the dequantiser */
        m->P = P = nf_params_alloc();
        m->S = S = nf_params_alloc();
        if (!P || !S) rc = nf_error(NF_ENOMEM, "out of memory building an image model");
    }
    nf_flow *flow = NULL;
    if (rc == NF_OK)
        rc = f ? nf_model_flow_load(&flow, f, group, P, S)
               : nf_flow_build(&flow, c->spec, st->D, c->classes, c->seed, P, S, c->align ? "flow." : "");
    m->flow = flow;
    if (flow) m->P = flow->P, m->S = flow->S;
    if (rc == NF_OK && (flow->dim != st->D || flow->ctx_dim != c->classes))
        rc = nf_error(NF_EFORMAT, "the flow has %d dimensions and %d context values, the image %dx%dx%d and %d classes",
                      flow->dim, flow->ctx_dim, c->h, c->w, c->c, c->classes);
    if (rc == NF_OK && c->dequant == NF_DEQUANT_VARIATIONAL) {
        /* after the flow's entries, so the flow's weights are those of the uniform model of the seed */
        nf_rng *dr = nf_rng_alloc(c->seed, 0xde9a);
        rc = dr ? nf_image_dequant_init(&st->dq, m->P, c->h, c->w, c->c, c->dequant_layers, c->dequant_hidden, dr)
                : nf_error(NF_ENOMEM, "out of memory building the dequantiser");
        nf_rng_free(dr);
    }
    if (rc == NF_OK) rc = nf_params_add(m->S, "image.draws", 1, &st->s_draws);
    if (rc == NF_OK && c->align) rc = nf_image_align_proj_init(&st->al, P, flow, c->align_layers, rng);
    if (rc == NF_OK && c->align) {
        /* a new model starts with its encoder; a saved one is a density (the stage of flow) unless
         * the trainer resumes it at the stage of its checkpoint */
        m->stage = f ? 1 : 0;
        rc = image_set_stage(m, m->stage);
    }
    nf_rng_free(rng);
    if (rc == NF_OK && !c->align) m->type = c->dequant == NF_DEQUANT_VARIATIONAL ? &nf_model_image_vdequant : &nf_model_image;
    if (rc != NF_OK && !flow && P) nf_params_free(P), nf_params_free(S), m->P = m->S = NULL;
    return rc;
}

/* The class counts of a conditional model's file, when it has them (files before them do not). */
static int load_class_counts(image_state *st, nf_h5 *f, const char *group)
{
    const int K = st->cfg.classes;
    char path[256];
    snprintf(path, sizeof path, "%s/image", group);
    if (!nf_h5_attr_exists(f, path, "class_counts")) return NF_OK;
    st->class_counts = calloc((size_t)K, sizeof *st->class_counts);
    if (!st->class_counts) return nf_error(NF_ENOMEM, "out of memory reading %d class counts", K);
    NF_TRY(nf_h5_attr_get_int64s(f, path, "class_counts", st->class_counts, (size_t)K));
    for (int k = 0; k < K; k++)
        if (st->class_counts[k] < 0)
            return nf_error(NF_EFORMAT, "%s:%s: class_counts[%d] is %lld; expected a count", nf_h5_path(f), path, k,
                            (long long)st->class_counts[k]);
    return NF_OK;
}

static int image_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    nf_image_config c;
    nf_image_config_init(&c);
    char path[256], arch[32];
    snprintf(path, sizeof path, "%s/image", group);
    NF_TRY(nf_h5_attr_get_string(f, path, "arch", arch, sizeof arch));
    if (!strcmp(arch, "spec")) c.arch = NF_IMAGE_SPEC;
    else NF_TRY(nf_image_arch_parse(arch, &c.arch));
    for (int k = 0; k < N_INT_FIELDS; k++) {
        int64_t v;
        NF_TRY(nf_h5_attr_get_int64(f, path, INT_FIELDS[k], &v));
        if (v < 0 || v > (1 << 24)) return nf_error(NF_EFORMAT, "%s:%s: %s is %lld", nf_h5_path(f), path, INT_FIELDS[k], (long long)v);
        *int_field(&c, k) = (int)v;
    }
    int64_t seed;
    NF_TRY(nf_h5_attr_get_double(f, path, "noise", &c.noise));
    NF_TRY(nf_h5_attr_get_double(f, path, "label_drop", &c.label_drop));
    NF_TRY(nf_h5_attr_get_int64(f, path, "seed", &seed));
    c.seed = (uint64_t)seed;
    if (nf_h5_attr_exists(f, path, "align_layers")) {
        int64_t ac;
        char layers[256];
        c.align = 1;
        NF_TRY(nf_h5_attr_get_int64(f, path, "align_classes", &ac));
        NF_TRY(nf_h5_attr_get_double(f, path, "align_weight", &c.align_weight));
        NF_TRY(nf_h5_attr_get_string(f, path, "align_layers", layers, sizeof layers));
        NF_TRY(nf_image_align_layers_parse(layers, &c.align_layers));
        c.align_classes = ac >= 0 && ac <= (1 << 24) ? (int)ac : -1;
    }
    if (nf_h5_attr_exists(f, path, "micro_batch")) {
        int64_t mb;
        NF_TRY(nf_h5_attr_get_int64(f, path, "micro_batch", &mb));
        c.micro_batch = mb >= 0 && mb <= (1 << 24) ? (int)mb : -1; /* checked with the rest below */
    }
    if (nf_h5_attr_exists(f, path, "dequant")) {
        char name[32];
        int64_t dl, dh;
        NF_TRY(nf_h5_attr_get_string(f, path, "dequant", name, sizeof name));
        if (nf_image_dequant_parse(name, &c.dequant) != NF_OK)
            return nf_error(NF_EFORMAT, "%s:%s: dequant is '%s'; expected %s", nf_h5_path(f), path, name, NF_DEQUANT_NAMES);
        NF_TRY(nf_h5_attr_get_int64(f, path, "dequant_layers", &dl));
        NF_TRY(nf_h5_attr_get_int64(f, path, "dequant_hidden", &dh));
        c.dequant_layers = dl >= 0 && dl <= (1 << 24) ? (int)dl : -1;
        c.dequant_hidden = dh >= 0 && dh <= (1 << 24) ? (int)dh : -1;
    }
    snprintf(path, sizeof path, "%s/flow", group);
    /* the flow's canonical spec (as nf_model_flow_load reads it; a longer one than c.spec holds
     * leaves c.spec empty, as before) */
    char *spec = malloc(1 << 16);
    if (!spec) return nf_error(NF_ENOMEM, "out of memory reading a flow spec");
    int rc = nf_h5_attr_get_string(f, path, "spec", spec, 1 << 16);
    if (rc == NF_OK) {
        size_t len = strlen(spec);
        if (len >= sizeof c.spec) len = 0;
        memcpy(c.spec, spec, len);
        c.spec[len] = '\0';
    }
    free(spec);
    if (rc == NF_OK) rc = nf_image_config_check(&c);
    if (rc == NF_OK) rc = build(m, &c, f, path);
    if (rc == NF_OK && c.classes >= 2) rc = load_class_counts(m->state, f, group);
    if (rc != NF_OK) {
        image_destroy(m);
        return nf_error_context(rc, "%s", nf_h5_path(f));
    }
    return NF_OK;
}

#define IMAGE_KIND_FIELDS                                                                                            \
    .kind = "image", .command = "nf image", .source_kind = "rows", .metric = "neg_bits_per_dim",                      \
    .flow_on_transformed_data = 1, .loss = image_loss, .eval = image_eval, .init_data = image_init_data,             \
    .set_training = image_set_training, .save = image_save, .load = image_load, .destroy = image_destroy

const nf_model_type nf_model_image = {
    IMAGE_KIND_FIELDS,
    .summary = "a flow on images (multi-scale coupling or TarFlow), in bits per dimension",
};

const nf_model_type nf_model_image_vdequant = {
    IMAGE_KIND_FIELDS,
    .summary = "a flow on images (multi-scale coupling or TarFlow), in bits per dimension, with variational "
               "dequantisation (a learned q(u | x); bits/dim are the variational bound)",
};

static const char *const STAGE_NAMES[] = {"encoder", "flow"};

const nf_model_type nf_model_image_aligned = {
    IMAGE_KIND_FIELDS,
    .summary = "a TarFlow on images in bits per dimension, with reverse representation alignment to a frozen "
               "classifier (stages: encoder, flow)",
    .n_stages = 2,
    .stage_names = STAGE_NAMES,
    .set_stage = image_set_stage,
};

int nf_model_image_create(nf_model **out, const nf_image_config *cfg)
{
    *out = NULL;
    nf_image_config c = *cfg;
    NF_TRY(nf_image_config_check(&c));
    if (c.arch != NF_IMAGE_SPEC) NF_TRY(nf_image_spec(&c, c.spec, sizeof c.spec));
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) return NF_ENOMEM;
    int rc = build(m, &c, NULL, NULL);
    if (rc != NF_OK) {
        image_destroy(m);
        free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

const nf_image_config *nf_model_image_config(const nf_model *m)
{
    return m && (m->type == &nf_model_image || m->type == &nf_model_image_aligned || m->type == &nf_model_image_vdequant)
               ? &((const image_state *)m->state)->cfg
               : NULL;
}

static int check_kind(const nf_model *m, const char *what)
{
    return nf_model_image_config(m) ? NF_OK : nf_error(NF_EINVAL, "%s needs an image model (nf image fit)", what);
}

int nf_model_image_bpd(nf_model *m, nf_real *bpd, const nf_real *x, const int *classes, int n, nf_rng *rng)
{
    NF_TRY(check_kind(m, "bits per dimension"));
    image_state *st = m->state;
    NF_TRY(reserve(st, n));
    NF_TRY(dequant_batch(m, x, NULL, n, rng, 0));
    if (st->cfg.classes) one_hot(st, st->ctx, classes, n);
    NF_TRY(logp_only(m, st->logp, st->y, st->cfg.classes ? st->ctx : NULL, NULL, n));
    for (int i = 0; i < n; i++) bpd[i] = (nf_real)bpd_of(st, st->logp[i] - st->lq[i]);
    return NF_OK;
}

static int sample_chunk(nf_model *m, nf_real *x, const int *classes, int n, double temperature, int denoise,
                        nf_rng *rng)
{
    image_state *st = m->state;
    const int D = st->D;
    NF_TRY(reserve(st, n));
    const nf_real *ctx = NULL;
    if (st->cfg.classes) {
        one_hot(st, st->ctx, classes, n);
        ctx = st->ctx;
    }
    /* z ~ N(0, T^2 I) then the inverse flow (the latent of the base, scaled) */
    nf_rng_fill_normal(rng, st->dy, (size_t)n * D);
    for (size_t k = 0; k < (size_t)n * D; k++) st->dy[k] *= (nf_real)temperature;
    NF_TRY(nf_flow_sample_latent(m->flow, st->y, NULL, st->dy, ctx, n));
    /* score step: y <- y + s^2 d/dy log p(y), the posterior mean of the clean y given the noisy one
     * to first order (Tweedie), with s the training noise */
    if (denoise && st->cfg.noise > 0) {
        NF_TRY(nf_flow_log_prob(m->flow, st->logp, st->y, ctx, NULL, n));
        for (int i = 0; i < n; i++) st->dlogp[i] = 1;
        memset(st->dy, 0, (size_t)n * D * sizeof *st->dy);
        int rc = nf_flow_backward(m->flow, st->dlogp, st->dy, NULL);
        nf_params_zero_grad(m->P);
        NF_TRY(rc);
        double s2 = st->cfg.noise * st->cfg.noise;
        for (size_t k = 0; k < (size_t)n * D; k++) st->y[k] += (nf_real)(s2 * st->dy[k]);
    }
    const double L = st->cfg.levels;
    for (size_t k = 0; k < (size_t)n * D; k++) {
        double v = (st->y[k] + 0.5) * L - 0.5;
        x[k] = (nf_real)(v < 0 ? 0 : v > L - 1 ? L - 1 : v);
    }
    return NF_OK;
}

typedef struct image_draw {
    nf_model *m;
    nf_real *x;
    const int *classes;
    double temperature;
    int denoise;
    nf_rng *rng;
} image_draw;

static int draw_rows(void *arg, int at, int k)
{
    const image_draw *d = arg;
    const size_t D = (size_t)((const image_state *)d->m->state)->D;
    return sample_chunk(d->m, d->x + (size_t)at * D, d->classes ? d->classes + at : NULL, k, d->temperature,
                        d->denoise, d->rng);
}

/* In chunks whose workspace stays bounded (nf_flow_in_chunks: 1,000 images of 32x32 in one pass took
 * 3.4 GB); the latents are drawn in the same order, so the images are those of one pass (Jacobi stops
 * each chunk on its own largest change), and each block's last_sweeps is the most of any chunk. */
int nf_model_image_sample(nf_model *m, nf_real *x, const int *classes, int n, double temperature, int denoise,
                          nf_rng *rng)
{
    NF_TRY(check_kind(m, "image sampling"));
    if (n < 1) return nf_error(NF_EINVAL, "%d images to sample; expected at least 1", n);
    if (!(temperature > 0 && temperature <= 10)) return nf_error(NF_EINVAL, "temperature %g: expected 0 < T <= 10", temperature);
    image_draw d = {.m = m, .x = x, .classes = classes, .temperature = temperature, .denoise = denoise, .rng = rng};
    return nf_flow_in_chunks(m->flow, n, 1, draw_rows, &d);
}

int nf_model_image_class_prior(const nf_model *m, double *prior)
{
    const nf_image_config *c = nf_model_image_config(m);
    if (!c || c->classes < 2) return 0;
    const image_state *st = m->state;
    double total = 0;
    for (int k = 0; st->class_counts && k < c->classes; k++) total += (double)st->class_counts[k];
    for (int k = 0; k < c->classes; k++)
        prior[k] = total > 0 ? ((double)st->class_counts[k] + 1) / (total + c->classes) : 1.0 / c->classes;
    return total > 0;
}

int nf_model_image_classify(nf_model *m, int *pred, double *logp, const nf_real *x, const double *prior, int n,
                            nf_rng *rng)
{
    NF_TRY(check_kind(m, "the likelihood classifier"));
    image_state *st = m->state;
    const int K = st->cfg.classes;
    if (K < 2) return nf_error(NF_EINVAL, "the likelihood classifier needs a class-conditional model (this one has %d classes)", K);
    NF_TRY(reserve(st, n));
    double *best = malloc((size_t)n * sizeof *best);
    int *cls = malloc((size_t)n * sizeof *cls);
    int rc = best && cls ? NF_OK : nf_error(NF_ENOMEM, "out of memory classifying %d images", n);
    /* one dequantisation draw per image, shared by all classes (st->y, st->lq) */
    if (rc == NF_OK) rc = dequant_batch(m, x, NULL, n, rng, 0);
    for (int k = 0; rc == NF_OK && k < K; k++) {
        for (int i = 0; i < n; i++) cls[i] = k;
        one_hot(st, st->ctx, cls, n);
        rc = logp_only(m, st->logp, st->y, st->ctx, NULL, n);
        for (int i = 0; rc == NF_OK && i < n; i++) {
            const double lb = st->logp[i] - st->lq[i], v = lb + (prior ? log(prior[k]) : 0);
            if (logp) logp[(size_t)i * K + k] = lb;
            if (k == 0 || v > best[i]) best[i] = v, pred[i] = k;
        }
    }
    free(best), free(cls);
    return rc;
}

int nf_model_image_align_terms(nf_model *m, const nf_real *x, const nf_real *ctx, int n, double *bpd, double *align)
{
    NF_TRY(check_kind(m, "the alignment terms"));
    image_state *st = m->state;
    if (!st->cfg.align) return nf_error(NF_EINVAL, "the model was trained without alignment (nf image fit --align)");
    if (n < 1) return nf_error(NF_EINVAL, "%d images: expected at least 1", n);
    NF_TRY(reserve(st, n));
    NF_TRY(dequantize(st, st->y, x, NULL, n, NULL, 0));
    NF_TRY(nf_flow_log_prob(m->flow, st->logp, st->y, st->cfg.classes ? ctx : NULL, NULL, n));
    double s = 0;
    for (int i = 0; i < n; i++) s += bpd_of(st, st->logp[i]);
    *bpd = s / n;
    clean(st, st->y0, x, n);
    return nf_image_align_loss(&st->al, m->P, m->flow, st->y0, n, st->cfg.align_weight, 0, align);
}

int nf_model_image_encoder_accuracy(nf_model *m, const nf_real *x, const nf_real *ctx, int n, double *acc)
{
    NF_TRY(check_kind(m, "the encoder's accuracy"));
    image_state *st = m->state;
    if (!st->cfg.align) return nf_error(NF_EINVAL, "the model was trained without alignment (nf image fit --align)");
    if (n < 1 || !ctx) return nf_error(NF_EINVAL, "%d images%s: expected at least 1 with classes", n, ctx ? "" : " without classes");
    NF_TRY(reserve(st, n));
    int *pred = malloc((size_t)n * sizeof *pred);
    if (!pred) return nf_error(NF_ENOMEM, "out of memory for %d predictions", n);
    clean(st, st->y0, x, n);
    classes_of(st->cls, ctx, st->cfg.align_classes, n);
    int rc = nf_image_align_encoder_predict(&st->al, m->P, st->y0, n, pred), ok = 0;
    for (int i = 0; i < n; i++) ok += pred[i] == st->cls[i];
    free(pred);
    *acc = (double)ok / n;
    return rc;
}
