/* apps/cmd_sample.c - nf sample: draw samples (and their log-densities) from a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "core/rng.h"
#include "datasets/names.h"
#include "training/model_file.h"

static const char *const SAMPLE_HELP =
    "usage: nf sample MODEL.h5 -n N -o SAMPLES.h5 [--seed S] [--method auto|sequential|jacobi]\n"
    "                 [--context-value SPEC | --context FILE] [--batch N] [--threads N]\n"
    "\n"
    "Draw N samples from a model; SAMPLES.h5 gets /x (N x d) and /logp (their log-densities), the\n"
    "column names of the training data (/columns) and, for a conditional model, the context of\n"
    "every sample (/context, /context_names); it is itself a data file that nf eval, nf fit and\n"
    "nf plot accept.\n"
    "\n"
    "  -n N              number of samples (required)\n"
    "  --seed S          random seed                                    [1]\n"
    "  --method M        slow direction of autoregressive layers: jacobi (parallel sweeps),\n"
    "                    sequential (exact, dimension by dimension), auto (sequential where the\n"
    "                    MADE is plain - one network pass in all -, else jacobi, falling back\n"
    "                    to sequential)                                 [auto]\n"
    "  --context-value SPEC\n"
    "                    conditional models: one context for all samples, by name: a category\n"
    "                    of a column imported with nf data import --context (kind=long), a\n"
    "                    number for a numeric context value (temp=21.5), several comma-separated\n"
    "                    (kind=long,site=B); c0=..,c1=.. when the training data named none\n"
    "  --context FILE    conditional models: /context of FILE, one row per sample or a single row\n"
    "                    used for all samples\n"
    "  --batch N         samples drawn per batch                        [4096]\n"
    "  --threads N       threads                                        [all cores]\n"
    "\n"
    "examples:\n"
    "  nf sample model.h5 -n 10000 --seed 3 -o samples.h5\n"
    "  nf sample faithful_model.h5 -n 1000 --context-value kind=long -o long.h5\n";

static const char *const METHODS[] = {"auto", "sequential", "jacobi", NULL};
static const nf_invert_method METHOD_VALUES[] = {NF_INVERT_AUTO, NF_INVERT_SEQUENTIAL, NF_INVERT_JACOBI};

int nf_cmd_sample(int argc, char **argv)
{
    const char *cmd = "sample", *model = NULL, *out = NULL, *ctx_path = NULL, *ctx_value = NULL;
    long n = -1, seed = 1, batch = 4096;
    int mi = 0, threads = 0;
    const flag_spec flags[] = {
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 1L << 32},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = 1L << 53},
        {.name = "--batch", .kind = FLAG_LONG, .dst = &batch, .lo = 1, .hi = 1L << 24},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--context", .kind = FLAG_STRING, .dst = &ctx_path},
        {.name = "--context-value", .kind = FLAG_STRING, .dst = &ctx_value},
        FLAG_THREADS(threads),
        {.name = "--method", .kind = FLAG_CHOICE, .dst = &mi, .choices = METHODS},
        {0},
    };
    const flags_cmd fc = {.cmd = cmd, .help = SAMPLE_HELP, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, &model, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    const char *method = METHODS[mi];
    nf_invert_method im = METHOD_VALUES[mi];
    if (!model) return cli_usage_error(cmd, "no model file given (expected: nf sample MODEL.h5 -n N -o SAMPLES.h5)");
    if (n < 0) return cli_usage_error(cmd, "how many samples? (expected -n N)");
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o SAMPLES.h5)");
    if (ctx_path && ctx_value) return cli_usage_error(cmd, "--context FILE and --context-value: give one of them");
    cli_set_threads(threads);

    nf_flow *flow = NULL;
    app_data cd = {0};
    nf_data_names nm = {0};
    nf_real *x = NULL, *lp = NULL, *cb = NULL, *one = NULL;
    nf_rng *rng = NULL;
    nf_h5 *f = NULL;
    int rc = app_check_output(out);
    if (rc == NF_OK) rc = app_check_not_input(out, model, "model");
    if (rc == NF_OK) rc = app_check_not_input(out, ctx_path, "context file");
    if (rc == NF_OK) rc = nf_model_load(model, &flow, NULL);
    if (rc == NF_OK) rc = nf_data_names_load(&nm, model, "/data", (size_t)flow->dim, (size_t)flow->ctx_dim);
    if (rc == NF_OK && flow->ctx_dim > 0 && !ctx_path && !ctx_value) {
        char list[300] = "", b0[32];
        for (int k = 0, at = 0; k < flow->ctx_dim && at < 240; k++) {
            char b[32];
            int w = snprintf(list + at, sizeof list - (size_t)at, "%s%s", k ? ", " : "",
                             nf_data_names_context(&nm, (size_t)k, b, sizeof b));
            if (w > 0) at += w;
        }
        const char *first = nf_data_names_context(&nm, 0, b0, sizeof b0);
        rc = nf_error(NF_EINVAL, "%s is conditional on %d context values (%s): choose them with --context-value "
                                 "(e.g. --context-value %s%s) or give --context FILE", model, flow->ctx_dim, list,
                      first, strchr(first, '=') ? "" : "=1");
    }
    if (rc == NF_OK && flow->ctx_dim == 0 && (ctx_path || ctx_value))
        rc = nf_error(NF_EINVAL, "%s is not conditional: --context%s is not used", model, ctx_value ? "-value" : "");
    if (rc == NF_OK && ctx_value) {
        one = malloc((size_t)flow->ctx_dim * sizeof *one);
        rc = one ? nf_context_parse(&nm, ctx_value, one) : nf_error(NF_ENOMEM, "out of memory");
        if (rc != NF_OK && one) nf_error_context(rc, "--context-value");
        cd.n = 1; /* one shared row */
        cd.x = one;
    }
    if (rc == NF_OK && ctx_path) {
        rc = app_data_load(ctx_path, "/context", (size_t)flow->ctx_dim, 0, 0, &cd);
        if (rc == NF_OK && cd.n != 1 && cd.n != (size_t)n)
            rc = nf_error(NF_EFORMAT, "%s:/context has %zu rows; expected 1 (shared) or %ld (one per sample)", ctx_path,
                          cd.n, n);
    }
    if (rc == NF_OK) {
        nf_flow_set_invert(flow, im, 0, 0);
        x = malloc((size_t)n * flow->dim * sizeof(nf_real));
        lp = malloc((size_t)n * sizeof(nf_real));
        cb = flow->ctx_dim ? malloc((size_t)batch * flow->ctx_dim * sizeof(nf_real)) : NULL;
        rng = nf_rng_alloc((uint64_t)seed, 0x73616d70);
        if (!x || !lp || (flow->ctx_dim && !cb) || !rng) rc = nf_error(NF_ENOMEM, "out of memory for %ld samples", n);
    }
    long sweeps = 0;
    for (long at = 0; rc == NF_OK && at < n; at += batch) {
        int b = (int)(n - at < batch ? n - at : batch);
        const nf_real *c = NULL;
        if (flow->ctx_dim) {
            for (int i = 0; i < b; i++)
                memcpy(cb + (size_t)i * flow->ctx_dim, cd.x + (cd.n == 1 ? 0 : (size_t)(at + i) * flow->ctx_dim),
                       flow->ctx_dim * sizeof(nf_real));
            c = cb;
        }
        rc = nf_flow_sample(flow, x + (size_t)at * flow->dim, lp + at, c, b, rng);
        sweeps += nf_flow_last_sweeps(flow);
    }
    if (rc == NF_OK) rc = nf_h5_create(&f, out, "nf-data", 1);
    if (rc == NF_OK) rc = nf_h5_write_real(f, "/x", x, (size_t)n, (size_t)flow->dim);
    if (rc == NF_OK) rc = nf_h5_write_real(f, "/logp", lp, (size_t)n, 0);
    if (rc == NF_OK && flow->ctx_dim) { /* the context of every sample (a shared row repeated) */
        nf_real *all = cd.n == (size_t)n ? NULL : malloc((size_t)n * flow->ctx_dim * sizeof *all);
        if (cd.n != (size_t)n && !all) rc = nf_error(NF_ENOMEM, "out of memory for %ld context rows", n);
        for (long i = 0; all && i < n; i++) memcpy(all + (size_t)i * flow->ctx_dim, cd.x, flow->ctx_dim * sizeof *all);
        if (rc == NF_OK) rc = nf_h5_write_real(f, "/context", all ? all : cd.x, (size_t)n, flow->ctx_dim);
        free(all);
    }
    if (rc == NF_OK) rc = nf_data_names_write(&nm, f, "/");
    if (rc == NF_OK && ctx_value) rc = nf_h5_attr_set_string(f, "/", "context_value", ctx_value);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", "nf sample");
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "model", model);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "seed", seed);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "method", method);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "sweeps", sweeps);
    if (rc == NF_OK) rc = nf_h5_commit(f);
    else nf_h5_abort(f);
    free(x);
    free(lp);
    free(cb);
    nf_rng_free(rng);
    if (one) cd.x = NULL, cd.n = 0;
    free(one);
    nf_data_names_free(&nm);
    app_data_free(&cd);
    int dim = flow ? flow->dim : 0;
    nf_flow_free(flow);
    if (rc != NF_OK) return cli_fail(cmd);
    fprintf(stderr, "nf sample: wrote %ld samples of dimension %d to %s\n", n, dim, out);
    return 0;
}
