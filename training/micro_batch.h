/* training/micro_batch.h - a flow's log-densities and gradient of a training batch in cache-sized
 * micro-batches, on per-thread replicas of the flow.
 *
 * Each micro-batch's forward pass is followed at once by its backward pass, so the activations of
 * one pass (a transformer layer's, a coupling's) are still in the core's cache for the next instead
 * of going out to memory and back, as a whole batch's do (bench/RESULTS.md: a one-thread TarFlow
 * step on 16 x 16 shapes 1.2x faster than the batch of 64 in one pass).  The gradient is the same
 * sum over the batch's rows; only the order of its float additions differs, and that order is fixed:
 * micro-batch k adds into accumulator k mod NF_MICRO_ACCUMULATORS, each accumulator takes its
 * micro-batches in order, and the flow's gradient gets the accumulators' sum in order - the same
 * numbers at any thread count.  Each thread runs whole accumulators on a replica of the flow of its
 * own (nf_flow_replica: the flow's values, a workspace of its own, its gradient pointed at the
 * accumulator in hand), so threads work through whole passes without waiting on each other between
 * layers; inside a replica every pass runs serially.
 *
 * The batch runs whole where the flow ties its rows together (nf_flow_rows_independent: batch
 * statistics, an ActNorm start pending, a batch-level base) or cannot have replicas; the caller sees
 * to it that nothing else of its loss ties rows together.  The models that use it: image
 * (training/model_image.c), video (model_video.c).
 */
#ifndef NF_MICRO_BATCH_H
#define NF_MICRO_BATCH_H

#include "flows/flow.h"

enum { NF_MICRO_ACCUMULATORS = 4 }; /* and so the most threads a batch uses */

typedef struct nf_micro_batches {
    nf_flow *rep[NF_MICRO_ACCUMULATORS]; /* replicas, one a thread, made when first needed */
    nf_real *acc;                        /* (NF_MICRO_ACCUMULATORS, acc_n) the accumulators */
    size_t acc_n;
} nf_micro_batches;

/* Rows per micro-batch: `requested` if > 0, else as many as make about 1,024 values of `dim` each
 * (at least 1), at most n. */
int nf_micro_batch_rows(int dim, int requested, int n);

/* logp (n) = log p(x_i | ctx_i) of the flow and, for dL/dlogp = dlogp (n), the gradient added into
 * flow->P->grad, in micro-batches of `rows` rows on up to nf_blas_get_threads() threads.  x (n, dim),
 * ctx (n, ctx_dim) or NULL, idx (n) or NULL as for nf_flow_log_prob; the flow in training mode.
 * The flow's own workspace is left alone (nf_flow_last_latent and nf_flow_backward do not see
 * this batch), except where the batch runs whole (above). */
int nf_micro_batches_run(nf_micro_batches *mb, nf_flow *flow, nf_real *logp, const nf_real *x, const nf_real *ctx,
                         const size_t *idx, const nf_real *dlogp, int n, int rows);

/* Frees the replicas (before their flow's stores go) and the accumulators; mb stays reusable. */
void nf_micro_batches_free(nf_micro_batches *mb);

#endif
