/* training/model_tpp.c - the "tpp" kind: an intensity-free temporal point process (Shchur, Bilos and
 * Guennemann, ICLR 2020) trained on event sequences.
 *
 * Sequence b observes [t_start, t_end] with events t_0 <= ... <= t_{L-1} (marks k_j).  With
 * tau_j = t_j - t_{j-1} (t_{-1} = t_start) and tau_L = t_end - t_{L-1} the open last interval,
 *     log L_b = sum_j [ log p(tau_j | c_j) + log p(k_j | c_j) ] + log S(tau_L | c_L),
 * where c_j, the history before event j, is the encoder's state after events 0..j-1 (a GRU, nn/gru.h,
 * or a tanh RNN, nn/rnn.h: --rnn; inputs per
 * event: the standardised log tau_j and a learned embedding of k_j), c_0 the learned initial state.
 * The decoder of tau is one of training/tpp_decoder.h; marks are a softmax of an affine map of c_j.
 * Loss of a batch: -(sum_b log L_b) / (events in the batch), the NLL per event.  The per-item metric
 * is log L_b (higher is better).  A survival term with tau_L = 0 (a window that closes at the last
 * event, as in the benchmark files) is log S(0) = 0 and is skipped.
 *
 * Backward: dL/dlog p and dL/dlog S = -1/E through the decoder into the contexts, the mark
 * log-softmax (dlogits = p - onehot) into the mark head and the contexts, then the contexts' gradients
 * scattered into dL/dh and back through time (nf_gru_backward or nf_rnn_backward) into the encoder,
 * the embedding and h0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "datasets/sequences.h"
#include "training/model_tpp_internal.h"
#include "training/trainer.h"

static const char *const RNN_NAMES[] = {"gru", "rnn"};

int nf_tpp_rnn_parse(const char *name, nf_tpp_rnn_kind *kind)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, RNN_NAMES[i])) {
            *kind = (nf_tpp_rnn_kind)i;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "rnn '%s' (expected one of %s)", name, NF_TPP_RNN_NAMES);
}

const char *nf_tpp_rnn_name(nf_tpp_rnn_kind kind) { return kind <= NF_TPP_RNN_TANH ? RNN_NAMES[kind] : "?"; }

/* ---------------------------------------------------------------- the encoder, either cell */

size_t tpp_enc_workspace(const tpp_state *st, int64_t T, int B)
{
    return st->cfg.rnn == NF_TPP_RNN_TANH ? nf_rnn_workspace(&st->rnn, T, B) : nf_gru_workspace(&st->gru, T, B);
}

void tpp_enc_forward(const tpp_state *st, const nf_params *P, nf_real *h, const nf_real *x, const int64_t *off, int B)
{
    if (st->cfg.rnn == NF_TPP_RNN_TANH) nf_rnn_forward(&st->rnn, P, st->ws, h, x, off, B);
    else nf_gru_forward(&st->gru, P, st->ws, h, x, off, B);
}

void tpp_enc_backward(const tpp_state *st, nf_params *P, nf_real *dx, const nf_real *dh, const nf_real *x,
                      const int64_t *off, int B)
{
    if (st->cfg.rnn == NF_TPP_RNN_TANH) nf_rnn_backward(&st->rnn, P, st->ws, dx, dh, x, off, B);
    else nf_gru_backward(&st->gru, P, st->ws, dx, dh, x, off, B);
}

size_t tpp_enc_step_workspace(const tpp_state *st, int n)
{
    return st->cfg.rnn == NF_TPP_RNN_TANH ? nf_rnn_step_workspace(&st->rnn, n) : nf_gru_step_workspace(&st->gru, n);
}

void tpp_enc_step(const tpp_state *st, const nf_params *P, nf_real *ws, nf_real *h_new, const nf_real *h,
                  const nf_real *x, int n)
{
    if (st->cfg.rnn == NF_TPP_RNN_TANH) nf_rnn_step(&st->rnn, P, ws, h_new, h, x, n);
    else nf_gru_step(&st->gru, P, ws, h_new, h, x, n);
}

void tpp_enc_start(const tpp_state *st, const nf_params *P, nf_real *context, nf_real *state)
{
    if (st->cfg.rnn == NF_TPP_RNN_TANH) nf_rnn_start(&st->rnn, P, context, state);
    else nf_gru_start(&st->gru, P, context, state);
}

void tpp_input_row(const tpp_state *st, const nf_real *P, nf_real *x, double tau, int mark)
{
    const int E = st->cfg.mark_dim;
    x[0] = (nf_real)(tau > 0 ? (log(tau) - st->cfg.shift) / st->cfg.scale : -10.0);
    for (int e = 0; e < E; e++) x[1 + e] = P[st->off_emb + (size_t)mark * E + e];
}

/* Mark head: logits = c W^T + b (one product), then log p_k = logits_k - logsumexp(logits). */
void tpp_mark_log_probs(const tpp_state *st, const nf_real *P, nf_real *logits, const nf_real *ctx, int n)
{
    const int K = st->cfg.num_marks, H = st->cfg.hidden;
    if (n <= 0) return;
    nf_gemm(0, 1, n, K, H, 1, ctx, H, P + st->off_mw, H, 0, logits, K);
    for (int j = 0; j < n; j++) {
        nf_real *lg = logits + (size_t)j * K;
        double mx = -INFINITY;
        for (int k = 0; k < K; k++) {
            lg[k] += P[st->off_mb + k];
            mx = fmax(mx, lg[k]);
        }
        double z = 0;
        for (int k = 0; k < K; k++) z += exp(lg[k] - mx);
        const double lse = mx + log(z);
        for (int k = 0; k < K; k++) lg[k] = (nf_real)(lg[k] - lse);
    }
}

static void free_buffers(tpp_state *st)
{
    void *p[] = {st->off, st->x, st->dx, st->h, st->dh, st->ws, st->ce, st->dce, st->tau, st->lp, st->dlp, st->logits,
                 st->cs, st->dcs, st->taus, st->ls, st->dls, st->sb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    st->off = NULL;
    st->x = st->dx = st->h = st->dh = st->ws = st->ce = st->dce = st->tau = st->lp = st->dlp = st->logits = NULL;
    st->cs = st->dcs = st->taus = st->ls = st->dls = NULL;
    st->sb = NULL;
    st->cap_t = st->cap_b = 0;
}

int tpp_reserve(tpp_state *st, size_t T, size_t B)
{
    if (T <= st->cap_t && B <= st->cap_b && st->x) return NF_OK;
    T = T > st->cap_t ? T : st->cap_t;
    B = B > st->cap_b ? B : st->cap_b;
    free_buffers(st);
    size_t H = (size_t)st->cfg.hidden, I = (size_t)st->in, K = (size_t)(st->cfg.num_marks ? st->cfg.num_marks : 1);
    size_t t1 = T ? T : 1;
    st->off = malloc((B + 1) * sizeof(int64_t));
    st->x = malloc(t1 * I * sizeof(nf_real));
    st->dx = malloc(t1 * I * sizeof(nf_real));
    st->h = malloc((T + B) * H * sizeof(nf_real));
    st->dh = malloc((T + B) * H * sizeof(nf_real));
    st->ws = malloc((tpp_enc_workspace(st, (int64_t)T, (int)B) + 1) * sizeof(nf_real));
    st->ce = malloc(t1 * H * sizeof(nf_real));
    st->dce = malloc(t1 * H * sizeof(nf_real));
    st->tau = malloc(t1 * sizeof(nf_real));
    st->lp = malloc(t1 * sizeof(nf_real));
    st->dlp = malloc(t1 * sizeof(nf_real));
    st->logits = malloc(t1 * K * sizeof(nf_real));
    st->cs = malloc(B * H * sizeof(nf_real));
    st->dcs = malloc(B * H * sizeof(nf_real));
    st->taus = malloc(B * sizeof(nf_real));
    st->ls = malloc(B * sizeof(nf_real));
    st->dls = malloc(B * sizeof(nf_real));
    st->sb = malloc(B * sizeof(int));
    if (!st->off || !st->x || !st->dx || !st->h || !st->dh || !st->ws || !st->ce || !st->dce || !st->tau || !st->lp ||
        !st->dlp ||
        !st->logits || !st->cs || !st->dcs || !st->taus || !st->ls || !st->dls || !st->sb) {
        free_buffers(st);
        return nf_error(NF_ENOMEM, "out of memory for a batch of %zu sequences with %zu events", B, T);
    }
    st->cap_t = T;
    st->cap_b = B;
    return NF_OK;
}

int tpp_encode(nf_model *m, const nf_batch *b)
{
    tpp_state *st = m->state;
    const int B = b->n, I = st->in, K = st->cfg.num_marks;
    const int64_t o0 = b->offsets[0];
    const size_t T = (size_t)(b->offsets[B] - o0);
    if (K > 1 && T && !b->marks)
        return nf_error(NF_EINVAL, "the model predicts %d mark types but the sequences have no marks", K);
    if (K > 1 && b->num_marks > K)
        return nf_error(NF_EINVAL, "the sequences have %d mark types, the model %d", b->num_marks, K);
    NF_TRY(tpp_reserve(st, T, (size_t)B));
    int64_t *off = st->off;
    for (int i = 0; i <= B; i++) off[i] = b->offsets[i] - o0;
    const nf_real *P = m->P->value;
    /* inputs: standardised log tau and the mark embedding */
    for (int s = 0; s < B; s++) {
        double prev = b->t_start[s];
        for (int64_t j = off[s]; j < off[s + 1]; j++) {
            double t = b->times[j + o0], tau = t - prev;
            prev = t;
            st->tau[j] = (nf_real)tau;
            tpp_input_row(st, P, st->x + (size_t)j * I, tau, st->cfg.mark_dim ? b->marks[j + o0] : 0);
        }
    }
    tpp_enc_forward(st, m->P, st->h, st->x, off, B);
    return NF_OK;
}

/* Everything up to the per-event and per-sequence log-likelihood terms.  Writes st->lp (T: log p of
 * tau plus log p of the mark), st->ls (n_surv), and per_seq (B) if not NULL.  With train set the
 * caches for backward are kept. */
static int forward(nf_model *m, const nf_batch *b, double *per_seq, int *n_surv_out, double *total)
{
    tpp_state *st = m->state;
    const int B = b->n, H = st->cfg.hidden, K = st->cfg.num_marks;
    const int64_t o0 = b->offsets[0];
    const size_t T = (size_t)(b->offsets[B] - o0);
    NF_TRY(tpp_encode(m, b));
    const int64_t *off = st->off;
    const nf_real *P = m->P->value;
    /* contexts: event j of sequence s reads row off[s] + s + (j - off[s]) = j + s */
    int n_surv = 0;
    for (int s = 0; s < B; s++) {
        for (int64_t j = off[s]; j < off[s + 1]; j++)
            memcpy(st->ce + (size_t)j * H, st->h + (size_t)(j + s) * H, (size_t)H * sizeof(nf_real));
        double last = off[s + 1] > off[s] ? b->times[off[s + 1] - 1 + o0] : b->t_start[s];
        double tl = b->t_end[s] - last;
        if (tl > 0) {
            memcpy(st->cs + (size_t)n_surv * H, st->h + (size_t)(off[s + 1] + s) * H, (size_t)H * sizeof(nf_real));
            st->taus[n_surv] = (nf_real)tl;
            st->sb[n_surv++] = s;
        }
    }
    int rc = T ? nf_tpp_decoder_eval(&st->dec, 0, st->lp, st->tau, st->ce, (int)T) : NF_OK;
    /* marks: log softmax of W c + b at the observed mark */
    if (rc == NF_OK && K > 1 && T) {
        tpp_mark_log_probs(st, P, st->logits, st->ce, (int)T);
        for (size_t j = 0; j < T; j++) st->lp[j] += st->logits[j * K + b->marks[j + o0]];
    }
    double tot = 0;
    if (per_seq)
        for (int s = 0; s < B; s++) per_seq[s] = 0;
    for (int s = 0; rc == NF_OK && s < B; s++)
        for (int64_t j = off[s]; j < off[s + 1]; j++) {
            tot += st->lp[j];
            if (per_seq) per_seq[s] += st->lp[j];
        }
    *n_surv_out = n_surv;
    *total = tot;
    return rc;
}

static int survival_terms(nf_model *m, int n_surv, double *per_seq, double *total)
{
    tpp_state *st = m->state;
    if (!n_surv) return NF_OK;
    NF_TRY(nf_tpp_decoder_eval(&st->dec, 1, st->ls, st->taus, st->cs, n_surv));
    for (int i = 0; i < n_surv; i++) {
        *total += st->ls[i];
        if (per_seq) per_seq[st->sb[i]] += st->ls[i];
    }
    return NF_OK;
}

static size_t batch_events(const nf_batch *b) { return (size_t)(b->offsets[b->n] - b->offsets[0]); }

/* The loss is a mean over events: processes of a parallel run combine theirs by their event counts. */
static double tpp_batch_weight(const nf_model *m, const nf_batch *b)
{
    (void)m;
    return (double)batch_events(b);
}

static int tpp_loss(nf_model *m, const nf_batch *b, nf_rng *rng, double *loss)
{
    (void)rng;
    tpp_state *st = m->state;
    const int B = b->n, H = st->cfg.hidden, I = st->in, E = st->cfg.mark_dim, K = st->cfg.num_marks;
    const size_t T = batch_events(b);
    const double norm = 1.0 / (double)(T ? T : 1);
    int n_surv;
    double total;
    NF_TRY(forward(m, b, NULL, &n_surv, &total));
    /* events: decoder backward first (its caches are the events'), then the survival pass */
    memset(st->dh, 0, (T + (size_t)B) * H * sizeof(nf_real));
    memset(st->dce, 0, (T ? T : 1) * H * sizeof(nf_real));
    for (size_t j = 0; j < T; j++) st->dlp[j] = (nf_real)-norm;
    if (T) NF_TRY(nf_tpp_decoder_backward(&st->dec, 0, st->dlp, st->dce));
    const int64_t o0 = b->offsets[0];
    nf_real *g = m->P->grad;
    const nf_real *P = m->P->value;
    if (K > 1 && T) {
        /* d(-norm log softmax_kobs)/dlogit_k = norm (p_k - [k = kobs]), over the log-probabilities in
         * place; then dW += dlogits^T c, db += sum dlogits, dc += dlogits W */
        for (size_t j = 0; j < T; j++) {
            nf_real *lg = st->logits + j * K;
            const int kobs = b->marks[j + o0];
            for (int k = 0; k < K; k++) {
                const double dl = norm * (exp(lg[k]) - (k == kobs));
                lg[k] = (nf_real)dl;
                g[st->off_mb + k] += (nf_real)dl;
            }
        }
        nf_gemm(1, 0, K, H, (int)T, 1, st->logits, K, st->ce, H, 1, g + st->off_mw, H);
        nf_gemm(0, 0, (int)T, H, K, 1, st->logits, K, P + st->off_mw, H, 1, st->dce, H);
    }
    NF_TRY(survival_terms(m, n_surv, NULL, &total));
    memset(st->dcs, 0, (size_t)(n_surv ? n_surv : 1) * H * sizeof(nf_real));
    for (int i = 0; i < n_surv; i++) st->dls[i] = (nf_real)-norm;
    if (n_surv) NF_TRY(nf_tpp_decoder_backward(&st->dec, 1, st->dls, st->dcs));
    /* scatter the contexts' gradients into dL/dh, back through time */
    const int64_t *off = st->off;
    for (int s = 0; s < B; s++)
        for (int64_t j = off[s]; j < off[s + 1]; j++)
            for (int i = 0; i < H; i++) st->dh[(size_t)(j + s) * H + i] += st->dce[(size_t)j * H + i];
    for (int q = 0; q < n_surv; q++) {
        int s = st->sb[q];
        for (int i = 0; i < H; i++) st->dh[(size_t)(off[s + 1] + s) * H + i] += st->dcs[(size_t)q * H + i];
    }
    memset(st->dx, 0, (T ? T : 1) * I * sizeof(nf_real));
    tpp_enc_backward(st, m->P, E ? st->dx : NULL, st->dh, st->x, off, B);
    for (size_t j = 0; E && j < T; j++)
        for (int e = 0; e < E; e++) g[st->off_emb + (size_t)b->marks[j + o0] * E + e] += st->dx[j * I + 1 + e];
    *loss = -total * norm;
    if (!isfinite(*loss)) return nf_error(NF_ENONFINITE, "point-process loss is %g", *loss);
    return NF_OK;
}

static int tpp_eval(nf_model *m, const nf_batch *b, nf_rng *rng, double *values)
{
    (void)rng;
    int n_surv;
    double total;
    NF_TRY(forward(m, b, values, &n_surv, &total));
    return survival_terms(m, n_surv, values, &total);
}

static void tpp_set_training(nf_model *m, int training) { (void)m, (void)training; }

static int tpp_save(const nf_model *m, nf_h5 *f, const char *group)
{
    const tpp_state *st = m->state;
    const nf_tpp_config *c = &st->cfg;
    char path[256];
    snprintf(path, sizeof path, "%s/tpp", group);
    NF_TRY(nf_h5_group(f, path));
    NF_TRY(nf_h5_attr_set_string(f, path, "decoder", nf_tpp_decoder_name(c->decoder)));
    NF_TRY(nf_h5_attr_set_string(f, path, "rnn", nf_tpp_rnn_name(c->rnn)));
    struct {
        const char *name;
        double v;
    } a[] = {{"hidden", c->hidden},         {"components", c->components}, {"flow_layers", c->flow_layers},
             {"flow_hidden", c->flow_hidden}, {"mark_dim", c->mark_dim},   {"num_marks", c->num_marks},
             {"shift", c->shift},           {"scale", c->scale},           {"seed", (double)c->seed}};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) NF_TRY(nf_h5_attr_set_double(f, path, a[i].name, a[i].v));
    return NF_OK;
}

static void tpp_destroy(nf_model *m)
{
    tpp_state *st = m->state;
    if (st) {
        free_buffers(st);
        nf_tpp_decoder_destroy(&st->dec);
        free(st);
    }
    nf_params_free(m->P);
    nf_params_free(m->S);
    m->P = m->S = NULL;
    m->state = NULL;
}

/* Build the components into a fresh store, in a fixed order (so a saved store loads back). */
static int build(nf_model *m, const nf_tpp_config *c)
{
    tpp_state *st = nf_calloc(1, sizeof *st, "point-process model");
    m->P = nf_params_alloc();
    m->S = nf_params_alloc();
    nf_rng *rng = nf_rng_alloc(c->seed, 0x747070);
    m->state = st;
    if (!st || !m->P || !m->S || !rng) {
        nf_rng_free(rng);
        return nf_error(NF_ENOMEM, "out of memory building a point-process model");
    }
    st->cfg = *c;
    st->in = 1 + (c->num_marks > 1 ? c->mark_dim : 0);
    if (c->num_marks <= 1) st->cfg.mark_dim = 0;
    int rc = c->rnn == NF_TPP_RNN_TANH
                 ? nf_rnn_init(&st->rnn, m->P, "encoder.rnn", st->in, c->hidden, NF_GRU_H0_LEARNED, rng)
                 : nf_gru_init(&st->gru, m->P, "encoder.gru", st->in, c->hidden, NF_GRU_H0_LEARNED, rng);
    if (rc == NF_OK && st->cfg.mark_dim) {
        rc = nf_params_add(m->P, "encoder.mark_embedding", (size_t)c->num_marks * c->mark_dim, &st->off_emb);
        for (size_t i = 0; rc == NF_OK && i < (size_t)c->num_marks * c->mark_dim; i++)
            m->P->value[st->off_emb + i] = (nf_real)nf_rng_normal(rng);
    }
    if (rc == NF_OK)
        rc = nf_tpp_decoder_create(&st->dec, c->decoder, c->hidden, c->components, c->flow_layers, c->flow_hidden,
                                   c->shift, c->scale, m->P, m->S, "decoder.", rng);
    if (rc == NF_OK && c->num_marks > 1) {
        rc = nf_params_add(m->P, "marks.weight", (size_t)c->num_marks * c->hidden, &st->off_mw);
        if (rc == NF_OK) rc = nf_params_add(m->P, "marks.bias", (size_t)c->num_marks, &st->off_mb);
        double r = 1 / sqrt((double)c->hidden);
        for (size_t i = 0; rc == NF_OK && i < (size_t)c->num_marks * c->hidden; i++)
            m->P->value[st->off_mw + i] = (nf_real)(r * (2 * nf_rng_uniform(rng) - 1));
    }
    nf_rng_free(rng);
    return rc;
}

static int tpp_load(nf_model *m, nf_h5 *f, const char *group, int version)
{
    (void)version;
    char path[256], dec[32];
    snprintf(path, sizeof path, "%s/tpp", group);
    nf_tpp_config c;
    nf_tpp_config_init(&c);
    NF_TRY(nf_h5_attr_get_string(f, path, "decoder", dec, sizeof dec));
    NF_TRY(nf_tpp_decoder_parse(dec, &c.decoder));
    if (nf_h5_attr_exists(f, path, "rnn") > 0) { /* files before --rnn: a GRU */
        NF_TRY(nf_h5_attr_get_string(f, path, "rnn", dec, sizeof dec));
        NF_TRY(nf_tpp_rnn_parse(dec, &c.rnn));
    }
    int64_t v[6], seed;
    const char *names[] = {"hidden", "components", "flow_layers", "flow_hidden", "mark_dim", "num_marks"};
    for (int i = 0; i < 6; i++) NF_TRY(nf_h5_attr_get_int64_in(f, path, names[i], 0, 1 << 24, &v[i]));
    c.hidden = (int)v[0], c.components = (int)v[1], c.flow_layers = (int)v[2], c.flow_hidden = (int)v[3];
    c.mark_dim = (int)v[4], c.num_marks = (int)v[5];
    NF_TRY(nf_h5_attr_get_double(f, path, "shift", &c.shift));
    NF_TRY(nf_h5_attr_get_double(f, path, "scale", &c.scale));
    NF_TRY(nf_h5_attr_get_int64_in(f, path, "seed", 0, INT64_MAX, &seed));
    c.seed = (uint64_t)seed;
    NF_TRY(nf_tpp_config_check(&c));
    const int rc = build(m, &c);
    if (rc != NF_OK) tpp_destroy(m); /* the caller destroys only what loaded */
    return rc;
}

const nf_model_type nf_model_tpp = {
    .kind = "tpp",
    .summary = "an intensity-free temporal point process (GRU or RNN history, next-time decoder, marks)",
    .command = "nf tpp",
    .source_kind = "sequences",
    .metric = "log_likelihood",
    .loss_per = "event",
    .metric_per = "sequence",
    .loss = tpp_loss,
    .eval = tpp_eval,
    .batch_weight = tpp_batch_weight,
    .set_training = tpp_set_training,
    .save = tpp_save,
    .load = tpp_load,
    .destroy = tpp_destroy,
};

void nf_tpp_config_init(nf_tpp_config *c)
{
    memset(c, 0, sizeof *c);
    c->decoder = NF_TPP_LOGNORMMIX;
    c->hidden = 64;
    c->components = 64;
    c->flow_layers = 2;
    c->flow_hidden = 64;
    c->mark_dim = 32;
    c->scale = 1;
    c->seed = 1;
}

int nf_tpp_config_check(const nf_tpp_config *c)
{
    if ((int)c->rnn < 0 || c->rnn > NF_TPP_RNN_TANH)
        return nf_error(NF_EINVAL, "encoder cell %d (expected %s)", (int)c->rnn, NF_TPP_RNN_NAMES);
    if (c->hidden < 1 || c->hidden > 4096) return nf_error(NF_EINVAL, "hidden width %d (expected 1..4096)", c->hidden);
    if (c->components < 1 || c->components > 1024)
        return nf_error(NF_EINVAL, "%d mixture components (expected 1..1024)", c->components);
    if (c->flow_layers < 1 || c->flow_layers > 64 || c->flow_hidden < 1 || c->flow_hidden > 4096)
        return nf_error(NF_EINVAL, "flow decoder of %d layers of width %d (expected 1..64 and 1..4096)", c->flow_layers,
                        c->flow_hidden);
    if (c->mark_dim < 0 || c->mark_dim > 1024 || c->num_marks < 0 || c->num_marks > 100000)
        return nf_error(NF_EINVAL, "marks: %d types, embedding %d (expected 0..100000 and 0..1024)", c->num_marks,
                        c->mark_dim);
    if (!isfinite(c->shift) || !(c->scale > 0) || !isfinite(c->scale))
        return nf_error(NF_EINVAL, "log inter-event time statistics %g, %g (expected finite, scale > 0)", c->shift,
                        c->scale);
    return NF_OK;
}

int nf_model_tpp_create(nf_model **out, const nf_tpp_config *cfg, const nf_source *train)
{
    return nf_model_tpp_create_shared(out, cfg, train, NULL);
}

int nf_model_tpp_create_shared(nf_model **out, const nf_tpp_config *cfg, const nf_source *train,
                               const nf_train_comm *comm)
{
    *out = NULL;
    nf_tpp_config c = *cfg;
    if (train) {
        if (strcmp(train->type->kind, "sequences"))
            return nf_error(NF_EINVAL, "%s: %s data, but a point process trains on event sequences", train->name,
                            train->type->kind);
        size_t n_events;
        double mean, mlog, sdlog;
        if (comm && comm->size > 1)
            NF_TRY(nf_sequences_stats_shared(train, comm->sum_double, comm->user, &n_events, &mean, &mlog, &sdlog));
        else
            NF_TRY(nf_sequences_stats(train, &n_events, &mean, &mlog, &sdlog));
        c.shift = mlog;
        c.scale = sdlog > 0 ? sdlog : 1;
        c.num_marks = train->num_marks;
    }
    NF_TRY(nf_tpp_config_check(&c));
    nf_model *m = nf_calloc(1, sizeof *m, "model");
    if (!m) return NF_ENOMEM;
    m->type = &nf_model_tpp;
    int rc = build(m, &c);
    if (rc != NF_OK) {
        nf_model_free(m);
        return rc;
    }
    *out = m;
    return NF_OK;
}

const nf_tpp_config *nf_model_tpp_config(const nf_model *m)
{
    return m && m->type == &nf_model_tpp && m->state ? &((const tpp_state *)m->state)->cfg : NULL;
}
