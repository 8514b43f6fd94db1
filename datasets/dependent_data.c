/* datasets/dependent_data.c - synthetic dependent 2-D data with exact marginal densities (see the header). */
#include "datasets/dependent_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HALF_LOG_2PI 0.91893853320467274178

static const char *const shapes[] = {"sign", "abs", "crescent", "sine", "crescent-cube", NULL};

static int shape_index(const char *name)
{
    for (int i = 0; shapes[i]; i++)
        if (!strcmp(shapes[i], name)) return i;
    return -1;
}

int nf_dep_shape_known(const char *name) { return shape_index(name) >= 0; }

/* x1 = g1, x2 = m(x1) + s g2;  log p = log N(x1; 0, 1) + log N(x2; m(x1), s^2) */
int nf_dep_shape_apply(const char *name, const double *g, size_t n, double *x, double *logp)
{
    int k = shape_index(name);
    if (k < 0) return nf_error(NF_EINVAL, "unknown shape '%s' (expected %s)", name, NF_DEP_SHAPES);
    static const double log_var[] = {-3, -3, -2, -2, 0};
    double s = exp(0.5 * log_var[k]);
    for (size_t i = 0; i < n; i++) {
        double x1 = g[2 * i], m;
        switch (k) {
        case 0: m = (x1 > 0) - (x1 < 0) + x1; break;
        case 1: m = fabs(x1) - 1; break;
        case 2: m = 0.5 * x1 * x1 - 1; break;
        case 3: m = sin(5 * x1); break;
        default: m = 0.2 * x1 * x1 * x1; break;
        }
        double x2 = m + s * g[2 * i + 1];
        int swap = k == 4;
        x[2 * i] = swap ? x2 : x1;
        x[2 * i + 1] = swap ? x1 : x2;
        if (logp) logp[i] = -0.5 * x1 * x1 - 0.5 * g[2 * i + 1] * g[2 * i + 1] - 2 * HALF_LOG_2PI - log(s);
    }
    return NF_OK;
}

void nf_dep_data_free(nf_dep_data *d)
{
    if (!d) return;
    free(d->x), free(d->logp), free(d->group), free(d->rho), free(d->row), free(d->col), free(d->val);
    memset(d, 0, sizeof *d);
}

/* The size of the next block (equi) or family (kinship): 1 + round(U^-2 - 1) points (Pareto(0.5) of
 * the Lomax form), capped at 1000 and at the `left` points still without one. */
static size_t block_size(nf_rng *rng, size_t left)
{
    double u = nf_rng_uniform(rng), draw = 1 + round(1 / (u * u) - 1);
    size_t size = draw > 1000 ? 1000 : (size_t)draw;
    return size < left ? size : left;
}

/* Blocks of block_size() points; g per block. */
static int make_equi(nf_dep_data *d, double *g, nf_rng *rng)
{
    size_t n = d->n, at = 0, cap = 64;
    d->group = malloc(n * sizeof *d->group);
    d->rho = malloc(cap * sizeof *d->rho);
    if (!d->group || !d->rho) return nf_error(NF_ENOMEM, "out of memory for %zu dependent rows", n);
    while (at < n) {
        size_t size = block_size(rng, n - at);
        if (d->n_blocks == cap) {
            double *r = realloc(d->rho, 2 * cap * sizeof *r);
            if (!r) return nf_error(NF_ENOMEM, "out of memory for the blocks of %zu rows", n);
            d->rho = r, cap *= 2;
        }
        double rho = 0.5 + 0.49 * nf_rng_uniform(rng);
        d->rho[d->n_blocks] = rho;
        for (int j = 0; j < 2; j++) {
            double c = nf_rng_normal(rng);
            for (size_t i = at; i < at + size; i++) g[2 * i + j] = sqrt(rho) * c + sqrt(1 - rho) * nf_rng_normal(rng);
        }
        for (size_t i = at; i < at + size; i++) d->group[i] = (int64_t)d->n_blocks;
        d->n_blocks++;
        at += size;
    }
    return NF_OK;
}

typedef struct {
    int64_t r, c;
    double v;
} triplet;

static int cmp_triplet(const void *a, const void *b)
{
    const triplet *x = a, *y = b;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return x->c < y->c ? -1 : x->c > y->c;
}

/* Families of block_size() points, K_ij = kappa_f for two members of family f (uniform in [0.5, 0.99]
 * per family), 1 on the diagonal, 0 across families; per column of g and family, one shared draw c_f:
 *     g_i = sqrt(lambda) e_i + sqrt(1 - lambda) (sqrt(kappa_f) c_f + sqrt(1 - kappa_f) e'_i).
 * K's upper triangle goes out family by family, rows ascending, so the triplets are sorted. */
static int make_families(nf_dep_data *d, double *g, nf_rng *rng)
{
    size_t n = d->n, at = 0, cap = 0;
    const double sl = sqrt(d->lambda), sk = sqrt(1 - d->lambda);
    while (at < n) {
        size_t size = block_size(rng, n - at), need = d->nnz + size * (size + 1) / 2;
        double kappa = 0.5 + 0.49 * nf_rng_uniform(rng);
        if (need > cap) {
            cap = need > 2 * cap ? need : 2 * cap;
            int64_t *r = realloc(d->row, cap * sizeof *r);
            if (r) d->row = r;
            int64_t *c = r ? realloc(d->col, cap * sizeof *c) : NULL;
            if (c) d->col = c;
            double *v = c ? realloc(d->val, cap * sizeof *v) : NULL;
            if (!v) return nf_error(NF_ENOMEM, "out of memory for a kinship matrix of %zu rows", n);
            d->val = v;
        }
        for (size_t i = at; i < at + size; i++)
            for (size_t j = i; j < at + size; j++, d->nnz++) {
                d->row[d->nnz] = (int64_t)i, d->col[d->nnz] = (int64_t)j;
                d->val[d->nnz] = i == j ? 1 : kappa;
            }
        for (int j = 0; j < 2; j++) {
            double c = nf_rng_normal(rng);
            for (size_t i = at; i < at + size; i++)
                g[2 * i + j] = sl * nf_rng_normal(rng) + sk * (sqrt(kappa) * c + sqrt(1 - kappa) * nf_rng_normal(rng));
        }
        at += size;
    }
    return NF_OK;
}

/* C unit lower triangular with up to two entries in [0.5, 0.99] per row; K = D^-1/2 C C^T D^-1/2,
 * D = diag(C C^T); g = sqrt(lambda) e + sqrt(1 - lambda) D^-1/2 C e'. */
static int make_pedigree(nf_dep_data *d, double *g, nf_rng *rng)
{
    size_t n = d->n;
    enum { PER_ROW = 3 };
    int64_t *ccol = malloc(n * PER_ROW * sizeof *ccol);   /* C's entries of row i: columns, values */
    double *cval = malloc(n * PER_ROW * sizeof *cval), *dg = calloc(n, sizeof *dg);
    int *cnt = calloc(n, sizeof *cnt), *colcnt = calloc(n + 1, sizeof *colcnt);
    if (!ccol || !cval || !dg || !cnt || !colcnt) {
        free(ccol), free(cval), free(dg), free(cnt), free(colcnt);
        return nf_error(NF_ENOMEM, "out of memory for a kinship matrix of %zu rows", n);
    }
    for (size_t i = 0; i < n; i++) {
        ccol[i * PER_ROW] = (int64_t)i;
        cval[i * PER_ROW] = 1;
        cnt[i] = 1;
        for (int e = 0; e < 2 && i > 0; e++) {
            int64_t j = (int64_t)nf_rng_index(rng, i);
            int dup = 0;
            for (int q = 0; q < cnt[i]; q++) dup |= ccol[i * PER_ROW + q] == j;
            if (dup) continue;
            ccol[i * PER_ROW + cnt[i]] = j;
            cval[i * PER_ROW + cnt[i]] = 0.5 + 0.49 * nf_rng_uniform(rng);
            cnt[i]++;
        }
        for (int q = 0; q < cnt[i]; q++) dg[i] += cval[i * PER_ROW + q] * cval[i * PER_ROW + q];
    }
    /* rows of each column of C: (C C^T)_ij = sum_k C_ik C_jk over the rows sharing column k */
    for (size_t i = 0; i < n; i++)
        for (int q = 0; q < cnt[i]; q++) colcnt[ccol[i * PER_ROW + q] + 1]++;
    for (size_t k = 0; k < n; k++) colcnt[k + 1] += colcnt[k];
    size_t total = (size_t)colcnt[n], pairs = 0;
    int64_t *crow = malloc(total * sizeof *crow);
    double *cv = malloc(total * sizeof *cv);
    int *fill = calloc(n, sizeof *fill);
    int rc = crow && cv && fill ? NF_OK : nf_error(NF_ENOMEM, "out of memory for a kinship matrix");
    for (size_t i = 0; rc == NF_OK && i < n; i++)
        for (int q = 0; q < cnt[i]; q++) {
            int64_t k = ccol[i * PER_ROW + q];
            crow[colcnt[k] + fill[k]] = (int64_t)i;
            cv[colcnt[k] + fill[k]] = cval[i * PER_ROW + q];
            fill[k]++;
        }
    for (size_t k = 0; rc == NF_OK && k < n; k++) {
        size_t m = (size_t)(colcnt[k + 1] - colcnt[k]);
        pairs += m * (m + 1) / 2;
    }
    triplet *t = rc == NF_OK ? malloc((pairs ? pairs : 1) * sizeof *t) : NULL;
    if (rc == NF_OK && !t) rc = nf_error(NF_ENOMEM, "out of memory for a kinship matrix");
    size_t nt = 0;
    for (size_t k = 0; rc == NF_OK && k < n; k++)
        for (int a = colcnt[k]; a < colcnt[k + 1]; a++)
            for (int b = a; b < colcnt[k + 1]; b++) {
                int64_t r = crow[a], c = crow[b];
                t[nt++] = (triplet){r < c ? r : c, r < c ? c : r, cv[a] * cv[b]};
            }
    if (rc == NF_OK) {
        qsort(t, nt, sizeof *t, cmp_triplet);
        size_t u = 0;
        for (size_t q = 0; q < nt; q++) {
            if (u > 0 && t[u - 1].r == t[q].r && t[u - 1].c == t[q].c) t[u - 1].v += t[q].v;
            else t[u++] = t[q];
        }
        d->row = malloc(u * sizeof *d->row);
        d->col = malloc(u * sizeof *d->col);
        d->val = malloc(u * sizeof *d->val);
        if (!d->row || !d->col || !d->val) rc = nf_error(NF_ENOMEM, "out of memory for a kinship matrix");
        for (size_t q = 0; rc == NF_OK && q < u; q++) {
            d->row[q] = t[q].r;
            d->col[q] = t[q].c;
            d->val[q] = t[q].v / sqrt(dg[t[q].r] * dg[t[q].c]);
        }
        d->nnz = u;
    }
    /* g: both columns independently */
    double sl = sqrt(d->lambda), sk = sqrt(1 - d->lambda);
    for (int j = 0; rc == NF_OK && j < 2; j++) {
        double *e = malloc(n * sizeof *e);
        if (!e) {
            rc = nf_error(NF_ENOMEM, "out of memory for a kinship matrix");
            break;
        }
        for (size_t i = 0; i < n; i++) e[i] = nf_rng_normal(rng);
        for (size_t i = 0; i < n; i++) {
            double ce = 0;
            for (int q = 0; q < cnt[i]; q++) ce += cval[i * PER_ROW + q] * e[ccol[i * PER_ROW + q]];
            g[2 * i + j] = sl * nf_rng_normal(rng) + sk * ce / sqrt(dg[i]);
        }
        free(e);
    }
    free(t), free(crow), free(cv), free(fill);
    free(ccol), free(cval), free(dg), free(cnt), free(colcnt);
    return rc;
}

int nf_dep_data_make(nf_dep_data *d, const char *shape, nf_dep_kind kind, nf_dep_relatives relatives, size_t n,
                     double lambda, nf_rng *rng)
{
    memset(d, 0, sizeof *d);
    if (!nf_dep_shape_known(shape)) return nf_error(NF_EINVAL, "unknown shape '%s' (expected %s)", shape, NF_DEP_SHAPES);
    if (n < 2) return nf_error(NF_EINVAL, "%zu dependent rows (expected at least 2)", n);
    if (kind == NF_DEP_KINSHIP && !(lambda > 0 && lambda < 1))
        return nf_error(NF_EINVAL, "lambda %g (expected strictly between 0 and 1)", lambda);
    d->n = n;
    d->kind = kind;
    d->lambda = lambda;
    d->relatives = relatives;
    d->x = malloc(n * 2 * sizeof *d->x);
    d->logp = malloc(n * sizeof *d->logp);
    double *g = malloc(n * 2 * sizeof *g);
    int rc = d->x && d->logp && g ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %zu dependent rows", n);
    if (rc == NF_OK)
        rc = kind == NF_DEP_EQUI               ? make_equi(d, g, rng)
             : relatives == NF_DEP_FAMILIES ? make_families(d, g, rng)
                                            : make_pedigree(d, g, rng);
    if (rc == NF_OK) rc = nf_dep_shape_apply(shape, g, n, d->x, d->logp);
    free(g);
    if (rc != NF_OK) nf_dep_data_free(d);
    return rc;
}

int nf_dep_data_iid(const char *shape, size_t n, nf_rng *rng, double *x, double *logp)
{
    double *g = malloc(n * 2 * sizeof *g);
    if (!g) return nf_error(NF_ENOMEM, "out of memory for %zu rows", n);
    for (size_t i = 0; i < 2 * n; i++) g[i] = nf_rng_normal(rng);
    int rc = nf_dep_shape_apply(shape, g, n, x, logp);
    free(g);
    return rc;
}
