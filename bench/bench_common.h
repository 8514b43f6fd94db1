/* bench/bench_common.h - what the benchmark programs share: the configurations, their training data,
 * timing, and JSON output.  Header-only (static functions): each bench program is one .c file linked
 * against build/float/libnf.a, compiled by bench/run.sh.
 *
 * The configurations mirror bench/ref_flows.py's CONFIGS exactly (same presets, widths, batch):
 *   maf        preset maf, 5 layers, MADE 2 x 256, D = 8, batch 512
 *   realnvp    preset realnvp, 8 affine couplings (mask=alt, flip alternating), 2 x 256, D = 64, batch 256
 *   nsf        preset nsf-coupling, 10 spline couplings (8 bins, tail 5, 2 residual blocks of 128) with
 *              an LU linear between them, D = 8, batch 512
 *   maf-small  preset maf, 5 layers, MADE 2 x 64, D = 2, batch 256
 * Training data: a seeded random Gaussian mixture (datasets/data_gmm.c) of the config's dimension,
 * standardised, 16384 rows, taken in consecutive batches.
 */
#ifndef NF_BENCH_COMMON_H
#define NF_BENCH_COMMON_H

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blas.h"
#include "core/clock.h"
#include "datasets/dataset.h"
#include "flows/flow.h"
#include "training/optim.h"

typedef struct bench_config {
    const char *name, *preset;
    int layers, hidden, blocks, bins;
    double tail;
    int dim, batch;
} bench_config;

static const bench_config BENCH_CONFIGS[] = {
    {"maf", "maf", 5, 256, 2, 0, 0, 8, 512},
    {"realnvp", "realnvp", 8, 256, 2, 0, 0, 64, 256},
    {"nsf", "nsf-coupling", 10, 128, 2, 8, 5.0, 8, 512},
    {"maf-small", "maf", 5, 64, 2, 0, 0, 2, 256},
};

#define BENCH_DATA_ROWS 16384

static inline const bench_config *bench_find(const char *name)
{
    for (size_t i = 0; i < sizeof BENCH_CONFIGS / sizeof BENCH_CONFIGS[0]; i++)
        if (!strcmp(BENCH_CONFIGS[i].name, name)) return &BENCH_CONFIGS[i];
    return NULL;
}

/* CPU time of the whole process (all threads): with one thread it is what the work took when the
 * core was ours, whatever else the machine was doing. */
static inline double bench_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void bench_die(const char *what)
{
    fprintf(stderr, "bench: %s: %s\n", what, nf_strerror_last());
    exit(1);
}

static inline void bench_threads(int t)
{
    omp_set_num_threads(t);
    nf_blas_set_threads(t);
}

/* The config's spec (nf_preset_expand) into spec[size]. */
static inline void bench_spec(const bench_config *c, char *spec, size_t size)
{
    nf_preset_knobs k = {.layers = c->layers, .hidden = c->hidden, .blocks = c->blocks, .bins = c->bins,
                         .tail = c->tail, .activation = NULL};
    if (nf_preset_expand(c->preset, &k, spec, size) != NF_OK) bench_die("preset");
}

/* Standardised Gaussian-mixture rows (n, D) in nf_real; caller frees. */
static inline nf_real *bench_data(int D, size_t n, uint64_t seed)
{
    nf_dataset_opts o;
    nf_dataset_opts_default(&o);
    o.dim = D;
    double *x = malloc(n * (size_t)D * sizeof *x);
    nf_real *out = malloc(n * (size_t)D * sizeof *out);
    nf_rng *r = nf_rng_alloc(seed, 0xda7a);
    if (!x || !out || !r) bench_die("data allocation");
    if (nf_dataset_make("gmm", &o, n, r, x, NULL) != NF_OK) bench_die("gmm data");
    for (int j = 0; j < D; j++) {
        double m = 0, s = 0;
        for (size_t i = 0; i < n; i++) m += x[i * D + j];
        m /= (double)n;
        for (size_t i = 0; i < n; i++) s += (x[i * D + j] - m) * (x[i * D + j] - m);
        s = sqrt(s / (double)n) + 1e-12;
        for (size_t i = 0; i < n; i++) out[i * D + j] = (nf_real)((x[i * D + j] - m) / s);
    }
    nf_rng_free(r);
    free(x);
    return out;
}

/* One optimizer step on rows [at, at + batch) of data (wrapping at the end). */
typedef struct bench_trainer {
    nf_flow *flow;
    nf_optim opt;
    const nf_real *data;
    size_t rows, at;
    int batch;
    double nll;
} bench_trainer;

static inline void bench_trainer_init(bench_trainer *t, nf_flow *f, const nf_real *data, size_t rows, int batch)
{
    memset(t, 0, sizeof *t);
    t->flow = f;
    t->data = data;
    t->rows = rows;
    t->batch = batch;
    nf_optim_init(&t->opt, NF_OPTIM_ADAM);
    t->opt.lr = 1e-3;
    nf_flow_set_training(f, 1);
}

static inline void bench_step(bench_trainer *t)
{
    if (t->at + (size_t)t->batch > t->rows) t->at = 0;
    nf_params_zero_grad(t->flow->P);
    if (nf_flow_nll_step(t->flow, t->data + t->at * t->flow->dim, NULL, NULL, t->batch, &t->nll) != NF_OK)
        bench_die("nll step");
    if (nf_optim_step(&t->opt, t->flow->P, t->opt.lr) != NF_OK) bench_die("optimizer step");
    t->at += (size_t)t->batch;
}

/* Matrix-product FLOPs of one step computed densely: forward 1, backward 2 products per linear
 * weight (every "*.weight" slice of the store, masked zeros included). */
static inline double bench_dense_flops(const nf_flow *f, int batch)
{
    double w = 0;
    for (size_t i = 0; i < f->P->nslices; i++) {
        const char *nm = f->P->slices[i].name;
        size_t L = strlen(nm);
        if (L > 7 && !strcmp(nm + L - 7, ".weight")) w += (double)f->P->slices[i].size;
    }
    return 6.0 * batch * w;
}

static inline int bench_count_type(const nf_flow *f, const char *type)
{
    int k = 0;
    for (int i = 0; i < f->nb; i++) k += !strcmp(f->b[i].type->name, type);
    return k;
}

static inline int bench_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

static inline int bench_int_arg(int argc, char **argv, const char *flag, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag)) return atoi(argv[i + 1]);
    return def;
}

#endif
