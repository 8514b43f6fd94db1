/* training/micro_batch.c - see micro_batch.h. */
#include "training/micro_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/blas.h"
#include "core/error.h"
#include "core/threads.h"

int nf_micro_batch_rows(int dim, int requested, int n)
{
    int c = requested > 0 ? requested : 1024 / (dim > 0 ? dim : 1);
    return c < 1 ? 1 : c > n ? n : c;
}

typedef struct {
    nf_micro_batches *mb;
    const nf_flow *flow;
    nf_real *logp;
    const nf_real *x, *ctx, *dlogp;
    const size_t *idx;
    int n, rows, accs, workers;
    int rc[NF_MICRO_ACCUMULATORS];
    char msg[NF_MICRO_ACCUMULATORS][256];
} micro_job;

/* Worker w on replica w: accumulators a = w, w + workers, ..., each zeroed, then forward and
 * backward of its micro-batches k = a, a + NF_MICRO_ACCUMULATORS, ... in turn. */
static void micro_part(void *arg, int w, int nparts)
{
    (void)nparts;
    micro_job *J = arg;
    nf_flow *f = J->mb->rep[w];
    const int D = f->dim, C = f->ctx_dim;
    const size_t np = J->mb->acc_n;
    nf_real *own = f->P->grad;
#ifdef _OPENMP
    const int omp_threads = omp_get_max_threads();
    omp_set_num_threads(1); /* a part is one thread's work: no OpenMP team of its own */
#endif
    nf_flow_replica_sync(f, J->flow);
    int rc = NF_OK;
    for (int a = w; rc == NF_OK && a < J->accs; a += J->workers) {
        f->P->grad = J->mb->acc + (size_t)a * np;
        memset(f->P->grad, 0, np * sizeof *f->P->grad);
        for (int o = a * J->rows; rc == NF_OK && o < J->n; o += NF_MICRO_ACCUMULATORS * J->rows) {
            const int c = J->n - o < J->rows ? J->n - o : J->rows;
            rc = nf_flow_log_prob(f, J->logp + o, J->x + (size_t)o * D, J->ctx ? J->ctx + (size_t)o * C : NULL,
                                  J->idx ? J->idx + o : NULL, c);
            if (rc == NF_OK) rc = nf_flow_backward(f, J->dlogp + o, NULL, NULL);
        }
    }
    f->P->grad = own;
#ifdef _OPENMP
    omp_set_num_threads(omp_threads);
#endif
    J->rc[w] = rc;
    if (rc != NF_OK) snprintf(J->msg[w], sizeof J->msg[w], "%s", nf_strerror_last());
}

int nf_micro_batches_run(nf_micro_batches *mb, nf_flow *flow, nf_real *logp, const nf_real *x, const nf_real *ctx,
                         const size_t *idx, const nf_real *dlogp, int n, int rows)
{
    if (n < 1) return NF_OK;
    if (rows < 1) return nf_error(NF_EINVAL, "micro-batches of %d rows (expected at least 1)", rows);
    if (!nf_flow_replicable(flow) || !nf_flow_rows_independent(flow)) { /* the whole batch at once */
        NF_TRY(nf_flow_log_prob(flow, logp, x, ctx, idx, n));
        return nf_flow_backward(flow, dlogp, NULL, NULL);
    }
    const int chunks = (n + rows - 1) / rows;
    const int accs = chunks < NF_MICRO_ACCUMULATORS ? chunks : NF_MICRO_ACCUMULATORS;
    const int threads = nf_blas_get_threads(), workers = threads < accs ? threads : accs;
    const size_t np = flow->P->n;
    if (mb->acc_n != np) {
        free(mb->acc);
        mb->acc_n = 0;
        if (!(mb->acc = malloc(NF_MICRO_ACCUMULATORS * np * sizeof *mb->acc)))
            return nf_error(NF_ENOMEM, "out of memory for the gradients of %d micro-batches", NF_MICRO_ACCUMULATORS);
        mb->acc_n = np;
    }
    for (int w = 0; w < workers; w++) {
        if (!mb->rep[w]) NF_TRY(nf_flow_replica(&mb->rep[w], flow));
        nf_flow_set_training(mb->rep[w], 1);
    }
    micro_job J = {.mb = mb, .flow = flow, .logp = logp, .x = x, .ctx = ctx, .dlogp = dlogp, .idx = idx,
                   .n = n, .rows = rows, .accs = accs, .workers = workers};
    nf_threads_run(threads, workers, micro_part, &J);
    for (int w = 0; w < workers; w++)
        if (J.rc[w] != NF_OK) return nf_error(J.rc[w], "%s", J.msg[w]);
    nf_real *g = flow->P->grad;
    for (int a = 0; a < accs; a++) {
        const nf_real *ga = mb->acc + (size_t)a * np;
        for (size_t k = 0; k < np; k++) g[k] += ga[k];
    }
    return NF_OK;
}

void nf_micro_batches_free(nf_micro_batches *mb)
{
    for (int w = 0; w < NF_MICRO_ACCUMULATORS; w++) {
        nf_flow_free(mb->rep[w]);
        mb->rep[w] = NULL;
    }
    free(mb->acc);
    mb->acc = NULL;
    mb->acc_n = 0;
}
