/* training/model_tpp_sample.c - what a fitted point process gives besides its likelihood
 * (training/model_tpp.h): simulated sequences, the conditional intensity along a sequence, the
 * marginal inter-event density over a source's histories, the compensators of a source's intervals
 * (time rescaling) and the accuracy of its mark head.
 *
 * Simulation (nf_model_tpp_simulate) runs sequences in chunks of up to CHUNK, each chunk as one batch of
 * "open" rows, compacted after every round so that the open rows stay contiguous:
 *     tau_r ~ p(. | c_r)                          (one decoder draw for all open rows)
 *     t_r  += tau_r;  row r closes if t_r > t_end (its row leaves the batch)
 *     k_r  ~ softmax(W c_r + b)                   (one product for all rows still open)
 *     c_r   = cell(c_r, [ (log tau_r - shift) / scale, emb(k_r) ])   (one encoder step)
 * The model's encoder starts from its learned h0 (NF_GRU_H0_LEARNED), so a row's context is its
 * state, and one array holds both.  Events go to a log (sequence, time, mark) that grows by
 * doubling; each sequence's events are in it in time order, so a counting pass lays them out.
 *
 * A continued history whose window ends after its last event conditions its first new interval on
 * having lasted that long: drawn by inverting S(tau | c) / S(gap | c) (draw_beyond_gap).
 *
 * The intensity of the intensity-free model is lambda*(t) = p(tau | c) / S(tau | c), with c the
 * context after the events before t and tau the time since the last of them: the hazard rate of
 * the next-interval distribution, exact for every decoder.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/sequences.h"
#include "training/model_tpp_internal.h"

#define CHUNK 4096
#define BISECT_STEPS 60
#define BATCH 64

void nf_tpp_samples_free(nf_tpp_samples *s)
{
    if (!s) return;
    nf_source_free(s->source);
    free(s->offsets), free(s->times), free(s->marks), free(s->t_start), free(s->t_end);
    memset(s, 0, sizeof *s);
}

static int check_model(const nf_model *m)
{
    if (!m || m->type != &nf_model_tpp || !m->state)
        return nf_error(NF_EINVAL, "a '%s' model is not a point process (expected a tpp model)",
                        m && m->type ? m->type->kind : "?");
    return NF_OK;
}

static int check_sequences(const nf_source *s)
{
    if (!s || strcmp(s->type->kind, "sequences"))
        return nf_error(NF_EINVAL, "%s: %s data (expected event sequences)", s ? s->name : "?",
                        s ? s->type->kind : "no");
    return NF_OK;
}

/* The event log: sequence, time and mark of every drawn event, in drawing order. */
typedef struct event_log {
    size_t n, cap;
    size_t *seq;
    double *time;
    int64_t *mark;
} event_log;

static int log_push(event_log *L, size_t seq, double t, int64_t k)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 4096;
        size_t *s = realloc(L->seq, cap * sizeof *s);
        if (s) L->seq = s;
        double *t2 = s ? realloc(L->time, cap * sizeof *t2) : NULL;
        if (t2) L->time = t2;
        int64_t *k2 = t2 ? realloc(L->mark, cap * sizeof *k2) : NULL;
        if (!k2) return nf_error(NF_ENOMEM, "out of memory for %zu simulated events", cap);
        L->mark = k2;
        L->cap = cap;
    }
    L->seq[L->n] = seq, L->time[L->n] = t, L->mark[L->n] = k;
    L->n++;
    return NF_OK;
}

/* Scratch of one chunk of C rows. */
typedef struct sim_rows {
    nf_real *h, *x, *tau, *logits, *ws, *ctx2, *tau2, *ls; /* (C,H) (C,I) (C) (C,K) step ws (C,H) (C) (C) */
    int *id, *redo;                                      /* (C) row -> sequence of the chunk; rows to redraw */
    double *lo, *hi, *mid, *target;                      /* (C) the bracket of a conditional draw */
    int *flag;                                           /* (C) its state */
    double *now, *gap, *t_end;                           /* (C) per sequence of the chunk */
    size_t *count;                                       /* (C) events drawn per sequence of the chunk */
} sim_rows;

static void rows_free(sim_rows *r)
{
    free(r->h), free(r->x), free(r->tau), free(r->logits), free(r->ws), free(r->ctx2), free(r->tau2), free(r->ls);
    free(r->lo), free(r->hi), free(r->mid), free(r->target), free(r->flag);
    free(r->id), free(r->redo), free(r->now), free(r->gap), free(r->t_end), free(r->count);
}

static int rows_alloc(sim_rows *r, const tpp_state *st, int C)
{
    const size_t H = (size_t)st->cfg.hidden, I = (size_t)st->in;
    const size_t K = (size_t)(st->cfg.num_marks > 1 ? st->cfg.num_marks : 1);
    memset(r, 0, sizeof *r);
    r->h = malloc(C * H * sizeof(nf_real));
    r->x = malloc(C * I * sizeof(nf_real));
    r->tau = malloc(C * sizeof(nf_real));
    r->logits = malloc(C * K * sizeof(nf_real));
    r->ws = malloc((tpp_enc_step_workspace(st, C) + 1) * sizeof(nf_real));
    r->ctx2 = malloc(C * H * sizeof(nf_real));
    r->tau2 = malloc(C * sizeof(nf_real));
    r->ls = malloc(C * sizeof(nf_real));
    r->lo = malloc(C * sizeof(double));
    r->hi = malloc(C * sizeof(double));
    r->mid = malloc(C * sizeof(double));
    r->target = malloc(C * sizeof(double));
    r->flag = malloc(C * sizeof(int));
    r->id = malloc(C * sizeof(int));
    r->redo = malloc(C * sizeof(int));
    r->now = malloc(C * sizeof(double));
    r->gap = malloc(C * sizeof(double));
    r->t_end = malloc(C * sizeof(double));
    r->count = calloc((size_t)C, sizeof(size_t));
    if (!r->h || !r->x || !r->tau || !r->logits || !r->ws || !r->ctx2 || !r->tau2 || !r->ls || !r->lo || !r->hi ||
        !r->mid || !r->target || !r->flag || !r->id || !r->redo || !r->now ||
        !r->gap || !r->t_end || !r->count) {
        rows_free(r);
        return nf_error(NF_ENOMEM, "out of memory simulating %d sequences", C);
    }
    return NF_OK;
}

/* log S(tau_q | ctx2_q) for the nr rows, tau_q = t[q], into R->ls. */
static int log_survival(tpp_state *st, sim_rows *R, const double *t, int nr)
{
    for (int q = 0; q < nr; q++) R->tau2[q] = (nf_real)t[q];
    return nf_tpp_decoder_eval(&st->dec, 1, R->ls, R->tau2, R->ctx2, nr);
}

#ifdef NF_DOUBLE
#define NEXT_UP(x) nextafter((x), INFINITY)
#else
#define NEXT_UP(x) nextafterf((x), INFINITY)
#endif

/* The first interval of a continued history, known to exceed g = its t_end - its last event: a
 * draw from p(tau | c, tau > g) by inversion, S(tau) = U S(g) with U ~ U(0, 1), solved on log tau:
 * [g, 2g] doubled until log S(hi) <= log S(g) + log U, then bisection at geometric midpoints (S
 * decreases in tau, and every decoder gives log S exactly, far into the tail).  Exact whatever S(g)
 * is, where drawing until tau > g would take 1 / S(g) draws.  A target beyond tau = 1e30 gives
 * tau = inf (no further event).  Rows redo[0..nr) of the open rows. */
enum { BRACKETING = 0, BRACKETED = 1, BEYOND = 2 };

static int draw_beyond_gap(tpp_state *st, sim_rows *R, int nr, nf_rng *rng)
{
    const int H = st->cfg.hidden;
    for (int q = 0; q < nr; q++) {
        memcpy(R->ctx2 + (size_t)q * H, R->h + (size_t)R->redo[q] * H, (size_t)H * sizeof(nf_real));
        R->lo[q] = R->hi[q] = R->gap[R->id[R->redo[q]]];
        R->flag[q] = BRACKETING;
    }
    NF_TRY(log_survival(st, R, R->lo, nr));
    for (int q = 0; q < nr; q++) R->target[q] = (double)R->ls[q] + log(nf_rng_uniform(rng));
    for (;;) {
        int open = 0;
        for (int q = 0; q < nr; q++) {
            if (R->flag[q] != BRACKETING) continue;
            if (R->hi[q] > 1e30) {
                R->flag[q] = BEYOND;
                continue;
            }
            R->lo[q] = R->hi[q];
            R->hi[q] *= 2;
            open++;
        }
        if (!open) break;
        NF_TRY(log_survival(st, R, R->hi, nr));
        for (int q = 0; q < nr; q++)
            if (R->flag[q] == BRACKETING && (double)R->ls[q] <= R->target[q]) R->flag[q] = BRACKETED;
    }
    for (int k = 0; k < BISECT_STEPS; k++) {
        for (int q = 0; q < nr; q++) R->mid[q] = R->flag[q] == BRACKETED ? sqrt(R->lo[q] * R->hi[q]) : R->hi[q];
        NF_TRY(log_survival(st, R, R->mid, nr));
        for (int q = 0; q < nr; q++) {
            if (R->flag[q] != BRACKETED) continue;
            if ((double)R->ls[q] > R->target[q]) R->lo[q] = R->mid[q];
            else R->hi[q] = R->mid[q];
        }
    }
    for (int q = 0; q < nr; q++) {
        const double g = R->gap[R->id[R->redo[q]]];
        nf_real t = R->flag[q] == BRACKETED ? (nf_real)R->hi[q] : (nf_real)INFINITY;
        while (!((double)t > g)) t = NEXT_UP(t); /* strictly after the history's end, in nf_real */
        R->tau[R->redo[q]] = t;
    }
    return NF_OK;
}

/* tau[r] ~ p(. | h_r) for the m open rows; the first interval of a continued history is drawn
 * again given that it exceeds its gap (draw_beyond_gap). */
static int draw_intervals(tpp_state *st, sim_rows *R, int m, nf_rng *rng)
{
    NF_TRY(nf_tpp_decoder_sample(&st->dec, R->tau, R->h, m, rng));
    int nr = 0;
    for (int r = 0; r < m; r++)
        if (R->gap[R->id[r]] > 0) R->redo[nr++] = r;
    if (nr) NF_TRY(draw_beyond_gap(st, R, nr, rng));
    for (int r = 0; r < m; r++) R->gap[R->id[r]] = 0;
    return NF_OK;
}

/* One chunk: sequences first .. first + C - 1, their rows set up in R (h, now, gap, t_end). */
static int simulate_chunk(nf_model *m, sim_rows *R, int C, size_t first, nf_rng *rng, size_t max_events,
                          event_log *L)
{
    tpp_state *st = m->state;
    const int H = st->cfg.hidden, I = st->in, K = st->cfg.num_marks;
    const nf_real *P = m->P->value;
    int open = C;
    for (int r = 0; r < C; r++) R->id[r] = r;
    while (open > 0) {
        NF_TRY(draw_intervals(st, R, open, rng));
        /* close the rows whose next event falls after their window; compact the others in order */
        int kept = 0;
        for (int r = 0; r < open; r++) {
            const int s = R->id[r];
            const double tau = R->tau[r], t = R->now[s] + tau;
            if (!(tau >= 0) || !(t <= R->t_end[s])) continue;
            if (kept != r) {
                memcpy(R->h + (size_t)kept * H, R->h + (size_t)r * H, (size_t)H * sizeof(nf_real));
                R->tau[kept] = R->tau[r];
                R->id[kept] = s;
            }
            kept++;
        }
        open = kept;
        if (!open) break;
        if (K > 1) tpp_mark_log_probs(st, P, R->logits, R->h, open);
        for (int r = 0; r < open; r++) {
            const int s = R->id[r];
            int k = 0;
            if (K > 1) { /* inversion of the categorical */
                const nf_real *lp = R->logits + (size_t)r * K;
                double u = nf_rng_uniform(rng), c = 0;
                for (k = 0; k < K - 1; k++) {
                    c += exp(lp[k]);
                    if (u < c) break;
                }
            }
            R->now[s] += R->tau[r];
            if (++R->count[s] > max_events)
                return nf_error(NF_EDATA, "simulated sequence %zu passed %zu events before its window's end %g "
                                          "(raise the limit or shorten the window)",
                                first + (size_t)s, max_events, R->t_end[s]);
            NF_TRY(log_push(L, first + (size_t)s, R->now[s], k));
            tpp_input_row(st, P, R->x + (size_t)r * I, R->tau[r], k);
        }
        tpp_enc_step(st, m->P, R->ws, R->h, R->h, R->x, open);
    }
    return NF_OK;
}

/* The histories of the chunk: encode them (one batch) and set h, now, gap; check the windows. */
static int start_from_history(nf_model *m, sim_rows *R, int C, size_t first, const nf_source *hist,
                              const size_t *hidx, const double *t_end, nf_batch *b)
{
    tpp_state *st = m->state;
    const int H = st->cfg.hidden;
    NF_TRY(nf_source_fetch(hist, hidx + first, C, b));
    NF_TRY(tpp_encode(m, b));
    for (int s = 0; s < C; s++) {
        const int64_t L = st->off[s + 1] - st->off[s];
        const double last = L ? b->times[b->offsets[s + 1] - 1] : b->t_start[s];
        if (!(b->t_end[s] < t_end[first + s]))
            return nf_error(NF_EINVAL, "%s: sequence %zu ends at %g, not before the simulation's end %g", hist->name,
                            hidx[first + s], b->t_end[s], t_end[first + s]);
        memcpy(R->h + (size_t)s * H, st->h + (size_t)(st->off[s + 1] + s) * H, (size_t)H * sizeof(nf_real));
        R->now[s] = last;
        R->gap[s] = (nf_real)(b->t_end[s] - last) > 0 ? b->t_end[s] - last : 0; /* 0: nothing to condition on */
        R->t_end[s] = t_end[first + s];
    }
    return NF_OK;
}

/* Lay out the histories' events and the log's into out. */
static int assemble(const tpp_state *st, size_t n, const double *t_start, const double *t_end, const nf_source *hist,
                    const size_t *hidx, const event_log *L, nf_tpp_samples *out)
{
    const int K = st->cfg.num_marks > 1 ? st->cfg.num_marks : 0;
    nf_sequences hs = hist ? nf_source_sequences(hist) : (nf_sequences){0};
    out->n = n;
    out->num_marks = K;
    out->offsets = calloc(n + 1, sizeof *out->offsets);
    out->t_start = malloc(n * sizeof *out->t_start);
    out->t_end = malloc(n * sizeof *out->t_end);
    if (!out->offsets || !out->t_start || !out->t_end) return nf_error(NF_ENOMEM, "out of memory");
    for (size_t e = 0; e < L->n; e++) out->offsets[L->seq[e] + 1]++;
    for (size_t i = 0; i < n; i++) {
        int64_t hl = hist ? hs.offsets[hidx[i] + 1] - hs.offsets[hidx[i]] : 0;
        out->offsets[i + 1] += out->offsets[i] + hl;
        out->t_start[i] = hist ? hs.t_start[hidx[i]] : t_start[i];
        out->t_end[i] = t_end[i];
    }
    const size_t T = (size_t)out->offsets[n];
    out->times = malloc((T ? T : 1) * sizeof *out->times);
    out->marks = K ? malloc((T ? T : 1) * sizeof *out->marks) : NULL;
    size_t *fill = malloc(n * sizeof *fill);
    if (!out->times || (K && !out->marks) || !fill) {
        free(fill);
        return nf_error(NF_ENOMEM, "out of memory for %zu simulated events", T);
    }
    for (size_t i = 0; i < n; i++) {
        fill[i] = (size_t)out->offsets[i];
        if (!hist) continue;
        for (int64_t j = hs.offsets[hidx[i]]; j < hs.offsets[hidx[i] + 1]; j++) {
            out->times[fill[i]] = hs.times[j];
            if (K) out->marks[fill[i]] = hs.marks ? hs.marks[j] : 0;
            fill[i]++;
        }
    }
    for (size_t e = 0; e < L->n; e++) {
        size_t i = L->seq[e];
        out->times[fill[i]] = L->time[e];
        if (K) out->marks[fill[i]] = L->mark[e];
        fill[i]++;
    }
    free(fill);
    return nf_source_sequences_wrap(&out->source, n, out->offsets, out->times, out->t_start, out->t_end, out->marks,
                                    K);
}

int nf_model_tpp_simulate(nf_model *m, size_t n, const double *t_start, const double *t_end,
                          const nf_source *history, const size_t *history_index, nf_rng *rng, size_t max_events,
                          nf_tpp_samples *out)
{
    memset(out, 0, sizeof *out);
    NF_TRY(check_model(m));
    tpp_state *st = m->state;
    const int K = st->cfg.num_marks, H = st->cfg.hidden;
    if (n < 1) return nf_error(NF_EINVAL, "no sequences to simulate (expected n >= 1)");
    if (!rng) return nf_error(NF_EINVAL, "no random number generator to simulate with");
    if (!max_events) max_events = 1000000;
    if (history) {
        NF_TRY(check_sequences(history));
        if (!history_index) return nf_error(NF_EINVAL, "%s: no history index given", history->name);
        const int hk = history->num_marks;
        if ((K > 1) != (hk > 1) || hk > K)
            return nf_error(NF_EINVAL, "%s: %d mark types, but the model has %d (expected histories with the "
                                       "model's marks)", history->name, hk > 1 ? hk : 0, K > 1 ? K : 0);
    }
    for (size_t i = 0; i < n; i++) {
        if (history && history_index[i] >= history->n)
            return nf_error(NF_EINVAL, "%s: no sequence %zu (it holds %zu)", history->name, history_index[i],
                            history->n);
        if (!isfinite(t_end[i]) || (!history && (!isfinite(t_start[i]) || !(t_end[i] > t_start[i]))))
            return nf_error(NF_EINVAL, "simulation window [%g, %g] of sequence %zu (expected finite, t_end > t_start)",
                            history ? NAN : t_start[i], t_end[i], i);
    }
    const int C = n < CHUNK ? (int)n : CHUNK;
    sim_rows R;
    NF_TRY(rows_alloc(&R, st, C));
    event_log L = {0};
    nf_batch b = {0};
    int rc = NF_OK;
    for (size_t first = 0; rc == NF_OK && first < n; first += (size_t)C) {
        const int c = n - first < (size_t)C ? (int)(n - first) : C;
        memset(R.count, 0, (size_t)c * sizeof *R.count);
        if (history) {
            rc = start_from_history(m, &R, c, first, history, history_index, t_end, &b);
        } else {
            for (int s = 0; s < c; s++) {
                tpp_enc_start(st, m->P, R.h + (size_t)s * H, NULL);
                R.now[s] = t_start[first + s];
                R.gap[s] = 0;
                R.t_end[s] = t_end[first + s];
            }
        }
        if (rc == NF_OK) rc = simulate_chunk(m, &R, c, first, rng, max_events, &L);
    }
    if (rc == NF_OK) rc = assemble(st, n, t_start, t_end, history, history_index, &L, out);
    if (rc != NF_OK) nf_tpp_samples_free(out);
    nf_batch_free(&b);
    free(L.seq), free(L.time), free(L.mark);
    rows_free(&R);
    return rc;
}

/* ---------------------------------------------------------------- intensity and densities */

int nf_model_tpp_intensity(nf_model *m, const nf_source *s, size_t item, const double *t, size_t n_grid,
                           double *lambda)
{
    NF_TRY(check_model(m));
    NF_TRY(check_sequences(s));
    if (item >= s->n) return nf_error(NF_EINVAL, "%s: no sequence %zu (it holds %zu)", s->name, item, s->n);
    if (!n_grid) return NF_OK;
    tpp_state *st = m->state;
    const int H = st->cfg.hidden;
    nf_batch b = {0};
    nf_real *tau = malloc(n_grid * sizeof *tau), *ctx = malloc(n_grid * H * sizeof *ctx);
    nf_real *lp = malloc(n_grid * sizeof *lp), *ls = malloc(n_grid * sizeof *ls);
    int rc = tau && ctx && lp && ls ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %zu grid points", n_grid);
    if (rc == NF_OK) rc = nf_source_fetch(s, &item, 1, &b);
    if (rc == NF_OK) rc = tpp_encode(m, &b);
    if (rc == NF_OK) {
        const int64_t L = b.offsets[1];
        for (size_t g = 0; g < n_grid; g++) {
            int64_t lo = 0, hi = L; /* j = events strictly before t[g] */
            while (lo < hi) {
                int64_t mid = (lo + hi) / 2;
                if (b.times[mid] < t[g]) lo = mid + 1;
                else hi = mid;
            }
            const double prev = lo ? b.times[lo - 1] : b.t_start[0], d = t[g] - prev;
            tau[g] = (nf_real)(d > 0 ? d : 1);
            lambda[g] = d > 0 ? 0 : NAN;
            memcpy(ctx + g * H, st->h + (size_t)lo * H, (size_t)H * sizeof *ctx);
        }
        rc = nf_tpp_decoder_eval(&st->dec, 0, lp, tau, ctx, (int)n_grid);
        if (rc == NF_OK) rc = nf_tpp_decoder_eval(&st->dec, 1, ls, tau, ctx, (int)n_grid);
        for (size_t g = 0; rc == NF_OK && g < n_grid; g++)
            if (!isnan(lambda[g])) lambda[g] = exp((double)lp[g] - (double)ls[g]);
    }
    nf_batch_free(&b);
    free(tau), free(ctx), free(lp), free(ls);
    return rc;
}

int nf_model_tpp_interval_density(nf_model *m, const nf_source *s, const double *tau_grid, size_t n_grid,
                                  size_t max_contexts, double *dens)
{
    NF_TRY(check_model(m));
    NF_TRY(check_sequences(s));
    tpp_state *st = m->state;
    const int H = st->cfg.hidden;
    nf_sequences q = nf_source_sequences(s);
    const size_t E = (size_t)(q.offsets[s->n] - q.offsets[0]);
    if (!E) return nf_error(NF_EDATA, "%s: no events to take histories from", s->name);
    for (size_t g = 0; g < n_grid; g++)
        if (!(tau_grid[g] > 0) || !isfinite(tau_grid[g]))
            return nf_error(NF_EINVAL, "inter-event time %g on the grid (expected > 0)", tau_grid[g]);
    const size_t J = max_contexts && max_contexts < E ? max_contexts : E;
    nf_real *ctx = malloc(J * H * sizeof *ctx), *tau = malloc(J * sizeof *tau), *lp = malloc(J * sizeof *lp);
    size_t *idx = malloc(BATCH * sizeof *idx);
    nf_batch b = {0};
    int rc = ctx && tau && lp && idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory for %zu contexts", J);
    /* event e (counted over the source) is taken when floor(e J / E) steps up: J of them, spread */
    size_t e = 0, got = 0;
    for (size_t first = 0; rc == NF_OK && first < s->n; first += BATCH) {
        const int nb = s->n - first < BATCH ? (int)(s->n - first) : BATCH;
        for (int i = 0; i < nb; i++) idx[i] = first + (size_t)i;
        rc = nf_source_fetch(s, idx, nb, &b);
        if (rc == NF_OK) rc = tpp_encode(m, &b);
        for (int i = 0; rc == NF_OK && i < nb; i++)
            for (int64_t j = st->off[i]; j < st->off[i + 1]; j++, e++)
                if (got < J && (e * J) / E == got)
                    memcpy(ctx + got++ * H, st->h + (size_t)(j + i) * H, (size_t)H * sizeof *ctx);
    }
    for (size_t g = 0; rc == NF_OK && g < n_grid; g++) {
        for (size_t j = 0; j < got; j++) tau[j] = (nf_real)tau_grid[g];
        rc = nf_tpp_decoder_eval(&st->dec, 0, lp, tau, ctx, (int)got);
        double sum = 0;
        for (size_t j = 0; rc == NF_OK && j < got; j++) sum += exp((double)lp[j]);
        dens[g] = sum / (double)(got ? got : 1);
    }
    nf_batch_free(&b);
    free(ctx), free(tau), free(lp), free(idx);
    return rc;
}

/* For each batch of `batch` consecutive sequences of s (<= 0: BATCH): run the encoder, gather the
 * contexts of its events into st->ce in event order, and call fn with the batch and its T events
 * (which number `done` events before it); stops at the first error. */
typedef int (*events_fn)(nf_model *m, const nf_batch *b, int64_t T, size_t done, void *arg);

static int each_batch(nf_model *m, const nf_source *s, int batch, events_fn fn, void *arg)
{
    tpp_state *st = m->state;
    const int H = st->cfg.hidden;
    if (batch < 1) batch = BATCH;
    size_t *idx = malloc((size_t)batch * sizeof *idx), done = 0;
    nf_batch b = {0};
    int rc = idx ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    for (size_t first = 0; rc == NF_OK && first < s->n; first += (size_t)batch) {
        const int nb = s->n - first < (size_t)batch ? (int)(s->n - first) : batch;
        for (int i = 0; i < nb; i++) idx[i] = first + (size_t)i;
        rc = nf_source_fetch(s, idx, nb, &b);
        if (rc == NF_OK) rc = tpp_encode(m, &b);
        if (rc != NF_OK) break;
        const int64_t T = st->off[nb];
        for (int i = 0; i < nb; i++)
            for (int64_t j = st->off[i]; j < st->off[i + 1]; j++)
                memcpy(st->ce + (size_t)j * H, st->h + (size_t)(j + i) * H, (size_t)H * sizeof(nf_real));
        rc = fn(m, &b, T, done, arg);
        done += (size_t)T;
    }
    nf_batch_free(&b);
    free(idx);
    return rc;
}

/* lambda[done + j] = -log S(tau_j | c_j) for the batch's events */
static int batch_compensators(nf_model *m, const nf_batch *b, int64_t T, size_t done, void *arg)
{
    (void)b;
    tpp_state *st = m->state;
    double *lambda = arg;
    if (!T) return NF_OK;
    NF_TRY(nf_tpp_decoder_eval(&st->dec, 1, st->lp, st->tau, st->ce, (int)T));
    for (int64_t j = 0; j < T; j++) lambda[done + (size_t)j] = -(double)st->lp[j];
    return NF_OK;
}

int nf_model_tpp_compensators(nf_model *m, const nf_source *s, int batch, double *lambda)
{
    NF_TRY(check_model(m));
    NF_TRY(check_sequences(s));
    return each_batch(m, s, batch, batch_compensators, lambda);
}

/* counts[0] += events whose most probable mark is theirs, counts[1] += events */
static int batch_mark_hits(nf_model *m, const nf_batch *b, int64_t T, size_t done, void *arg)
{
    (void)done;
    tpp_state *st = m->state;
    const int K = st->cfg.num_marks;
    size_t *counts = arg;
    tpp_mark_log_probs(st, m->P->value, st->logits, st->ce, (int)T);
    for (int64_t j = 0; j < T; j++) {
        const nf_real *lg = st->logits + (size_t)j * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lg[k] > lg[best]) best = k;
        counts[0] += best == b->marks[j];
    }
    counts[1] += (size_t)T;
    return NF_OK;
}

int nf_model_tpp_mark_accuracy(nf_model *m, const nf_source *s, int batch, size_t *correct, size_t *total)
{
    NF_TRY(check_model(m));
    NF_TRY(check_sequences(s));
    const tpp_state *st = m->state;
    *correct = *total = 0;
    if (st->cfg.num_marks <= 1)
        return nf_error(NF_EINVAL, "the model has no marks (trained on sequences without mark types)");
    if (s->num_marks <= 1) return nf_error(NF_EINVAL, "%s: the sequences have no marks", s->name);
    size_t counts[2] = {0, 0};
    int rc = each_batch(m, s, batch, batch_mark_hits, counts);
    *correct = counts[0], *total = counts[1];
    return rc;
}
