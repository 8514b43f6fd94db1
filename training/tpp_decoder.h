/* training/tpp_decoder.h - distributions of the next inter-event time tau > 0 given a history
 * embedding c (the context), for intensity-free point processes (Shchur et al. 2020).
 *
 * Every decoder gives, per event, log p(tau | c) and the log-survival log P(T > tau | c) (the last
 * open interval of a sequence), their backward (ADDING dL/dc into dctx and parameter gradients into
 * the model's store), sampling, and its parameters in the model's one store under a prefix.  The
 * log-normal mixture and the flow work on y = (log tau - shift) / scale, with (shift, scale) the mean
 * and standard deviation of log tau over the training data, so that
 *     log p(tau | c) = log p_y(y | c) - log scale - log tau,     S(tau | c) = S_y(y | c).
 *
 *   lognormmix   p_y = sum_k w_k(c) N(y; m_k(c), s_k(c)^2): a K-component Gaussian mixture whose
 *                logits, means and log-scales are an affine map of c (distributions/gmm.c with
 *                context=linear): closed-form density, survival and sampling.
 *   flow         p_y from a conditional neural-spline flow on y with c as context
 *                (spline-ar layers on a standard normal base), exact survival (nf_flow_log_survival).
 *   exponential  a constant intensity given the history, lambda = exp(v.c + b):
 *                log p = log lambda - lambda tau,  log S = -lambda tau.
 *   rmtpp        Du et al. 2016, lambda(t) = exp(v.c + w t + b) (w may have either sign):
 *                log p = (v.c + w tau + b) + (e^{v.c+b} - e^{v.c+b+w tau}) / w,
 *                log S = (e^{v.c+b} - e^{v.c+b+w tau}) / w.
 */
#ifndef NF_TPP_DECODER_H
#define NF_TPP_DECODER_H

#include "core/params.h"
#include "core/rng.h"
#include "distributions/dist.h"
#include "flows/flow.h"

typedef enum nf_tpp_decoder_kind {
    NF_TPP_LOGNORMMIX = 0,
    NF_TPP_FLOW = 1,
    NF_TPP_EXPONENTIAL = 2,
    NF_TPP_RMTPP = 3
} nf_tpp_decoder_kind;
#define NF_TPP_DECODER_NAMES "lognormmix|flow|exponential|rmtpp"

typedef struct nf_tpp_decoder {
    nf_tpp_decoder_kind kind;
    int ctx_dim, components, layers, hidden;
    double shift, scale;        /* log tau standardisation (lognormmix, flow) */
    nf_params *P, *S;
    nf_dist mix;                /* lognormmix */
    nf_flow *flow;              /* flow */
    size_t off_v, off_b, off_w; /* exponential, rmtpp: v (ctx_dim), b, w in P */
    int cap;
    nf_real *y, *buf, *buf2;    /* (cap) scratch */
    const nf_real *last_tau, *last_ctx;
    int last_n;
} nf_tpp_decoder;

int nf_tpp_decoder_parse(const char *name, nf_tpp_decoder_kind *kind);
const char *nf_tpp_decoder_name(nf_tpp_decoder_kind kind);
/* Build into the stores P, S under prefix ("decoder."); rng initialises the parameters. */
int nf_tpp_decoder_create(nf_tpp_decoder *d, nf_tpp_decoder_kind kind, int ctx_dim, int components, int layers,
                          int hidden, double shift, double scale, nf_params *P, nf_params *S, const char *prefix,
                          nf_rng *rng);
void nf_tpp_decoder_destroy(nf_tpp_decoder *d);
/* out[i] = log p(tau_i | c_i) (which = 0) or log S(tau_i | c_i) (which = 1), tau (n), ctx (n, ctx_dim). */
int nf_tpp_decoder_eval(nf_tpp_decoder *d, int which, nf_real *out, const nf_real *tau, const nf_real *ctx, int n);
/* After nf_tpp_decoder_eval(which): given dL/dout, ADD into P->grad and dctx (n, ctx_dim; may be NULL). */
int nf_tpp_decoder_backward(nf_tpp_decoder *d, int which, const nf_real *dout, nf_real *dctx);
/* tau[i] ~ p(. | c_i). */
int nf_tpp_decoder_sample(nf_tpp_decoder *d, nf_real *tau, const nf_real *ctx, int n, nf_rng *rng);

#endif
