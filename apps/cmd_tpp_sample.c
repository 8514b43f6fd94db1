/* apps/cmd_tpp_sample.c - nf tpp sample: simulated event sequences from a fitted point process
 * (nf_model_tpp_simulate, training/model_tpp.h), from scratch or continuing the sequences of a
 * file, written as an nf-sequences file (datasets/sequences.h, atomically). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "datasets/sequences.h"
#include "training/model_file.h"
#include "training/model_tpp.h"

static const char *const SAMPLE_HELP =
    "usage: nf tpp sample MODEL.h5 -n N --t-end T [--t-start T0] -o SEQ.h5\n"
    "       nf tpp sample MODEL.h5 --history HIST.h5 --t-end T [-n K] -o SEQ.h5\n"
    "\n"
    "Simulate event sequences from a point process fitted by nf tpp fit: each next event time is\n"
    "drawn from the decoder given the history so far, its mark (when the model has marks) from the\n"
    "mark head, one event at a time until the window ends.  All sequences step together.\n"
    "\n"
    "With --history, every sequence of HIST.h5 is continued to --t-end: its events come first,\n"
    "unchanged (its t_start is kept), then simulated ones after its t_end (given that no event came\n"
    "between its last event and its t_end).  -n is then the number of continuations of each history\n"
    "sequence, written history by history (sequence i continues history i / n).\n"
    "The output is an nf-sequences file (written atomically), with marks when the model has them.\n"
    "\n"
    "  -n N             sequences to simulate (required without --history);\n"
    "                   continuations per history sequence with it         [1]\n"
    "  --t-end T        end of every window (required)\n"
    "  --t-start T0     start of every window (not with --history)         [0]\n"
    "  --history FILE   sequences to continue (an nf-sequences file)       [none]\n"
    "  --max-events N   limit of simulated events per sequence             [1000000]\n"
    "  --seed S         random stream                                      [1]\n"
    "  --threads N      threads                                            [all cores]\n"
    "  --quiet          no summary line\n"
    "\n"
    "examples:\n"
    "  nf tpp sample tpp.h5 -n 1000 --t-end 100 -o sim.h5\n"
    "  nf tpp sample tpp.h5 --history test.h5 -n 10 --t-end 150 -o futures.h5\n";

/* Open MODEL.h5 and check it is a point process. */
int app_tpp_open_model(const char *path, nf_model **m)
{
    int rc = nf_model_open(path, m, NULL);
    if (rc == NF_OK && (*m)->type != &nf_model_tpp) {
        rc = nf_error(NF_EINVAL, "%s holds a '%s' model, not a point process (expected a model from nf tpp fit)",
                      path, (*m)->type->kind);
        nf_model_free(*m);
        *m = NULL;
    }
    return rc;
}

int app_tpp_sample(int argc, char **argv)
{
    const char *cmd = "tpp sample", *out = NULL, *history = NULL, *pos[1];
    long n = 0, seed = 1, max_events = 1000000;
    double t_start = 0, t_end = NAN;
    int threads = 0, quiet = 0, seen_n = 0, seen_ts = 0, seen_te = 0;
    const flag_spec flags[] = {
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 1L << 31, .seen = &seen_n},
        {.name = "--t-end", .kind = FLAG_DOUBLE, .dst = &t_end, .lo = -1e300, .hi = 1e300, .seen = &seen_te},
        {.name = "--t-start", .kind = FLAG_DOUBLE, .dst = &t_start, .lo = -1e300, .hi = 1e300, .seen = &seen_ts},
        {.name = "--history", .kind = FLAG_STRING, .dst = &history},
        {.name = "--max-events", .kind = FLAG_LONG, .dst = &max_events, .lo = 1, .hi = 1L << 40},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = 1L << 53},
        FLAG_THREADS(threads),
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--quiet", .alias = "-q", .kind = FLAG_BOOL, .dst = &quiet},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = SAMPLE_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no model file given (expected: nf tpp sample MODEL.h5 ... -o SEQ.h5)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o SEQ.h5)");
    if (!seen_te) return cli_usage_error(cmd, "no --t-end given (expected the end of the simulated windows)");
    if (!history && !seen_n) return cli_usage_error(cmd, "no -n given (expected the number of sequences to simulate)");
    if (history && seen_ts)
        return cli_usage_error(cmd, "--t-start does not go with --history (each history keeps its own start)");
    if (!history && !(t_end > t_start))
        return cli_usage_error(cmd, "--t-end %g is not after --t-start %g (expected t_end > t_start)", t_end, t_start);
    if (history && !seen_n) n = 1;
    cli_set_threads(threads);
    nf_model *m = NULL;
    nf_source *h = NULL;
    nf_rng *rng = NULL;
    nf_tpp_samples smp = {0};
    double *ts = NULL, *te = NULL;
    size_t *hidx = NULL, N = (size_t)n;
    int rc = app_check_output(out);
    if (rc == NF_OK) rc = app_check_not_input(out, pos[0], "model");
    if (rc == NF_OK) rc = app_check_not_input(out, history, "--history file");
    if (rc == NF_OK) rc = app_tpp_open_model(pos[0], &m);
    if (rc == NF_OK && history) {
        rc = nf_source_sequences_load(&h, history);
        if (rc == NF_OK) N = h->n * (size_t)n;
    }
    if (rc == NF_OK) {
        ts = malloc(N * sizeof *ts);
        te = malloc(N * sizeof *te);
        hidx = h ? malloc(N * sizeof *hidx) : NULL;
        rng = nf_rng_alloc((uint64_t)seed, 0x73616d);
        if (!ts || !te || (h && !hidx) || !rng) rc = nf_error(NF_ENOMEM, "out of memory for %zu sequences", N);
    }
    for (size_t i = 0; rc == NF_OK && i < N; i++) {
        ts[i] = t_start, te[i] = t_end;
        if (hidx) hidx[i] = i / (size_t)n;
    }
    if (rc == NF_OK) rc = nf_model_tpp_simulate(m, N, ts, te, h, hidx, rng, (size_t)max_events, &smp);
    if (rc == NF_OK) rc = nf_source_sequences_save(out, smp.source);
    if (rc == NF_OK && !quiet) {
        size_t ev = (size_t)smp.offsets[smp.n];
        fprintf(stderr, "nf %s: %zu sequences%s, %zu events (%.4g per sequence)%s -> %s\n", cmd, smp.n,
                h ? " (histories and continuations)" : "", ev, (double)ev / (double)smp.n,
                smp.num_marks ? ", with marks" : "", out);
    }
    nf_tpp_samples_free(&smp);
    free(ts), free(te), free(hidx);
    nf_rng_free(rng);
    nf_source_free(h);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}
