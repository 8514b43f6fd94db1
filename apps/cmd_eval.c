/* apps/cmd_eval.c - nf eval (summary of the log-likelihood of a data set) and nf logprob (per sample). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "datasets/names.h"
#include "distributions/target.h"
#include "training/model_dependent.h"
#include "training/model_file.h"

static const char *const EVAL_HELP =
    "usage: nf eval MODEL.h5 DATA.h5 [--json] [--dataset PATH] [--batch N] [--threads N]\n"
    "       nf eval MODEL.h5 [--draws N] [--seed S] [--json]      (a model fit with nf fit --target)\n"
    "\n"
    "Evaluate a model on a data set: mean log-likelihood in nats with its standard error, bits per\n"
    "dimension, and, when DATA.h5 carries the true log-density of each point (/logp_true), the gap\n"
    "mean(log p_true) - mean(log p_model), an estimate of KL(true || model) in nats.  Columns are\n"
    "named as in the data (/columns) or the training data; a conditional model is also evaluated\n"
    "per context (each distinct context row, up to 20, named like kind=long).\n"
    "\n"
    "  --json            print exactly one JSON object: n, dim, mean_log_prob, stderr, bits_per_dim\n"
    "                    and, when known, true_mean_log_prob, kl_gap, columns and by_context\n"
    "  --dataset PATH    dataset holding the samples      [/x]\n"
    "  --batch N         samples per evaluation batch     [4096]\n"
    "  --threads N       threads                          [all cores]\n"
    "  --joint           a model fit with nf fit --dependence, DATA.h5 its training rows: also the joint\n"
    "                    log-likelihood of the rows under the learned dependence (structure read from\n"
    "                    where the fit read it), next to the i.i.d. sum of their marginal log-densities\n"
    "\n"
    "A variational model (nf fit --target) is evaluated without data, from draws x ~ q of the flow:\n"
    "the ELBO mean(log p~(x) - log q(x)), log Z estimated by importance sampling, the true log Z and\n"
    "KL(q || p) = log Z - ELBO where the target's normaliser is known, and the effective sample size.\n"
    "  --draws N         draws of the flow                [100000]\n"
    "  --seed S          seed of the draws                [1]\n"
    "\n"
    "example:\n"
    "  nf data make checkerboard -n 20000 --seed 7 -o test.h5\n"
    "  nf eval model.h5 test.h5 --json\n";

static const char *const LOGPROB_HELP =
    "usage: nf logprob MODEL.h5 DATA.h5 -o LOGP.h5 [--dataset PATH] [--batch N]\n"
    "\n"
    "Write the model's log-density of every sample of DATA.h5 to LOGP.h5 as /logp (n values, nats).\n"
    "\n"
    "  -o FILE           output file (written atomically)\n"
    "  --dataset PATH    dataset holding the samples      [/x]\n"
    "  --batch N         samples per evaluation batch     [4096]\n"
    "  --threads N       threads                          [all cores]\n"
    "\n"
    "example:\n"
    "  nf logprob model.h5 test.h5 -o logp.h5\n";

typedef struct eval_args {
    const char *model, *data, *out, *dataset;
    int json, threads, joint;
    long batch, draws, seed;
} eval_args;

/* Returns FLAGS_OK, FLAGS_HELP or FLAGS_USAGE (apps/flags.h). */
static int parse(const char *cmd, const char *help, int argc, char **argv, eval_args *a, int need_out)
{
    memset(a, 0, sizeof *a);
    a->dataset = "/x";
    a->batch = 4096;
    a->draws = 100000;
    a->seed = 1;
    const flag_spec eval_flags[] = {
        {.name = "--json", .kind = FLAG_BOOL, .dst = &a->json},
        {.name = "--joint", .kind = FLAG_BOOL, .dst = &a->joint},
        {.name = "--draws", .kind = FLAG_LONG, .dst = &a->draws, .lo = 2, .hi = 1L << 32},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &a->seed, .lo = 0, .hi = 1L << 53},
        {.name = "--dataset", .kind = FLAG_STRING, .dst = &a->dataset},
        {.name = "--batch", .kind = FLAG_LONG, .dst = &a->batch, .lo = 1, .hi = 1L << 24},
        FLAG_THREADS(a->threads),
        {0},
    };
    const flag_spec logprob_flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &a->out},
        {.name = "--dataset", .kind = FLAG_STRING, .dst = &a->dataset},
        {.name = "--batch", .kind = FLAG_LONG, .dst = &a->batch, .lo = 1, .hi = 1L << 24},
        FLAG_THREADS(a->threads),
        {0},
    };
    const flags_cmd c = {.cmd = cmd, .help = help, .flags = need_out ? logprob_flags : eval_flags, .max_pos = 2};
    const char *pos[2];
    int rc = flags_parse(&c, argc, argv, pos, NULL);
    if (rc != FLAGS_OK) return rc;
    a->model = pos[0];
    a->data = pos[1];
    if (!a->model) return cli_usage_error(cmd, "expected MODEL.h5 and DATA.h5");
    if (!a->data && need_out) return cli_usage_error(cmd, "expected MODEL.h5 and DATA.h5");
    if (need_out && !a->out) return cli_usage_error(cmd, "no output file given (expected -o LOGP.h5)");
    cli_set_threads(a->threads);
    return FLAGS_OK;
}

/* ", "key": value" with JSON's null for what printf would write as nan or inf (not valid JSON). */
static void json_num(const char *key, double v)
{
    if (isfinite(v)) printf(", \"%s\": %.9g", key, v);
    else printf(", \"%s\": null", key);
}

/* A JSON string literal of s. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

/* The names of the data's columns and context values: the data file's, else the training data's
 * (kept in the model file). */
static int eval_names(const eval_args *a, const app_data *d, nf_data_names *nm)
{
    nf_data_names mn;
    NF_TRY(nf_data_names_load(nm, a->data, "/", !strcmp(a->dataset, "/x") ? d->d : 0, d->c));
    int rc = nf_data_names_load(&mn, a->model, "/data", d->d, d->c);
    if (rc != NF_OK) {
        nf_data_names_free(nm);
        return rc;
    }
    nm->d = d->d;
    if (!nm->columns) nm->columns = mn.columns, mn.columns = NULL;
    if (!nm->context) nm->context = mn.context, mn.context = NULL;
    nf_data_names_free(&mn);
    return NF_OK;
}

/* Rows of the same context: up to max groups (first row of each in first[], counts and sums of
 * log p), group[i] of every row; returns the number of groups, or 0 when there are more. */
typedef struct ctx_group {
    size_t first, n;
    double sum, sum2;
} ctx_group;

static size_t group_contexts(const app_data *d, const nf_real *logp, ctx_group *g, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < d->n; i++) {
        const nf_real *c = d->ctx + i * d->c;
        size_t j = 0;
        while (j < k && memcmp(d->ctx + g[j].first * d->c, c, d->c * sizeof *c)) j++;
        if (j == k) {
            if (k == max) return 0;
            g[k++] = (ctx_group){.first = i};
        }
        g[j].n++;
        g[j].sum += logp[i];
        g[j].sum2 += (double)logp[i] * logp[i];
    }
    return k;
}

/* Load model and data and compute every log-density. */
static int compute(const eval_args *a, nf_flow **flow, app_data *d, nf_real **logp, double *mean, double *se)
{
    NF_TRY(nf_model_load(a->model, flow, NULL));
    NF_TRY(app_data_load(a->data, a->dataset, (size_t)(*flow)->dim, (size_t)(*flow)->ctx_dim, 0, d));
    *logp = malloc(d->n * sizeof(nf_real));
    if (!*logp) return nf_error(NF_ENOMEM, "out of memory for %zu log-densities", d->n);
    int rc = nf_evaluate(*flow, d->x, d->ctx, d->n, (int)a->batch, mean, se, *logp);
    if (rc != NF_OK) nf_error_context(rc, "%s", a->data);
    return rc;
}

/* --joint: the joint log-likelihood of DATA.h5's rows under a dependent model's structure, and the
 * i.i.d. sum of their marginal log-densities. */
static int eval_joint(const eval_args *a, double *joint, double *iid)
{
    nf_model *m = NULL;
    nf_source *src = NULL;
    nf_dep_source s;
    nf_dep *dep;
    NF_TRY(nf_model_open(a->model, &m, NULL));
    int rc = m->type == &nf_model_dependent
                 ? NF_OK
                 : nf_error(NF_EINVAL, "%s: --joint is for a model fit with nf fit --dependence (this one is '%s')",
                            a->model, m->type->kind);
    if (rc == NF_OK) rc = nf_model_dependent_source(m, &s);
    if (rc == NF_OK) rc = nf_source_rows_load(&src, a->data, a->dataset, (size_t)m->flow->dim, (size_t)m->ctx_dim, m->ctx_dim > 0);
    if (rc == NF_OK) rc = nf_dep_load(&dep, &s, src->n);
    if (rc == NF_OK) rc = nf_model_dependent_attach(m, dep);
    if (rc == NF_OK) rc = nf_model_dependent_joint(m, src, joint, iid);
    if (rc != NF_OK) nf_error_context(rc, "--joint");
    nf_source_free(src);
    nf_model_free(m);
    return rc;
}

/* A variational model without data: how well q matches its target, from fresh draws of q. */
static int eval_variational(const eval_args *a)
{
    nf_model *m = NULL;
    nf_rng *rng = NULL;
    nf_vi_report r;
    int rc = nf_model_open(a->model, &m, NULL);
    if (rc == NF_OK && m->type->source_kind) {
        int status = cli_usage_error("eval", "expected MODEL.h5 and DATA.h5 (%s is a '%s' model, evaluated on data)",
                                     a->model, m->type->kind);
        nf_model_free(m);
        return status;
    } else if (rc == NF_OK && !nf_model_variational_target(m)) {
        rc = nf_error(NF_EINVAL, "%s holds a '%s' model; use %s with it", a->model, m->type->kind, m->type->command);
    }
    if (rc == NF_OK) {
        rng = nf_rng_alloc((uint64_t)a->seed, 0x65766c);
        rc = rng ? nf_model_variational_report(m, (size_t)a->draws, (int)a->batch, rng, &r) : NF_ENOMEM;
    }
    if (rc == NF_OK) {
        const nf_target *t = nf_model_variational_target(m);
        if (a->json) {
            printf("{\"target\": \"%s\", \"draws\": %zu, \"dim\": %d", t->type->name, r.n, t->dim);
            json_num("elbo", r.elbo);
            json_num("elbo_stderr", r.elbo_stderr);
            json_num("log_z", r.log_z);
            json_num("log_z_true", r.log_z_true);
            json_num("ess_fraction", r.ess_frac);
            if (isfinite(r.log_z_true)) json_num("kl", r.log_z_true - r.elbo);
            printf("}\n");
        } else {
            printf("target          %s%s%s%s (dimension %d), %zu draws of the flow\n", t->type->name,
                   t->options[0] ? "(" : "", t->options, t->options[0] ? ")" : "", t->dim, r.n);
            printf("ELBO            %.5f +- %.5f nats (mean log p~(x) - log q(x) over x ~ q)\n", r.elbo, r.elbo_stderr);
            printf("log Z estimate  %.5f (importance sampling with q as proposal)\n", r.log_z);
            if (isfinite(r.log_z_true)) {
                printf("true log Z      %.5f\n", r.log_z_true);
                printf("KL(q || p)      %.5f nats (true log Z - ELBO; 0 is perfect)\n", r.log_z_true - r.elbo);
            }
            printf("ESS             %.1f%% of the draws (effective sample size of the importance weights)\n",
                   100 * r.ess_frac);
        }
    }
    nf_rng_free(rng);
    nf_model_free(m);
    return rc == NF_OK ? 0 : cli_fail("eval");
}

int nf_cmd_eval(int argc, char **argv)
{
    eval_args a;
    int urc = parse("eval", EVAL_HELP, argc, argv, &a, 0);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!a.data) return eval_variational(&a);
    nf_flow *flow = NULL;
    app_data d = {0};
    nf_data_names nm = {0};
    nf_real *logp = NULL;
    double mean, se;
    int status = 0;
    enum { MAX_GROUPS = 20 };
    ctx_group groups[MAX_GROUPS];
    size_t ng = 0;
    double joint = NAN, joint_iid = NAN;
    if (compute(&a, &flow, &d, &logp, &mean, &se) != NF_OK || eval_names(&a, &d, &nm) != NF_OK ||
        (a.joint && eval_joint(&a, &joint, &joint_iid) != NF_OK)) {
        status = cli_fail("eval");
    } else {
        if (d.c && d.ctx) ng = group_contexts(&d, logp, groups, MAX_GROUPS);
        double bpd = -mean / (d.d * log(2.0));
        double true_mean = NAN, gap = NAN, gap_se = NAN;
        if (d.logp_true) {
            double s = 0, s2 = 0;
            for (size_t i = 0; i < d.n; i++) {
                s += d.logp_true[i];
                double diff = d.logp_true[i] - logp[i];
                s2 += diff * diff;
            }
            true_mean = s / d.n;
            gap = true_mean - mean;
            double var = d.n > 1 ? (s2 - d.n * gap * gap) / (d.n - 1) : 0;
            gap_se = sqrt(var > 0 ? var / d.n : 0);
        }
        if (a.json) {
            printf("{\"n\": %zu, \"dim\": %zu", d.n, d.d);
            json_num("mean_log_prob", mean);
            json_num("stderr", se);
            json_num("bits_per_dim", bpd);
            if (d.logp_true) {
                json_num("true_mean_log_prob", true_mean);
                json_num("kl_gap", gap);
            }
            if (a.joint) {
                json_num("joint_log_prob", joint);
                json_num("joint_per_row", joint / d.n);
                json_num("iid_log_prob", joint_iid);
            }
            if (nm.columns) {
                printf(", \"columns\": [");
                for (size_t j = 0; j < d.d; j++) {
                    if (j) printf(", ");
                    json_str(nm.columns[j]);
                }
                printf("]");
            }
            if (ng) {
                printf(", \"by_context\": [");
                for (size_t k = 0; k < ng; k++) {
                    char label[512];
                    nf_context_format(&nm, d.ctx + groups[k].first * d.c, label, sizeof label);
                    printf("%s{\"context\": ", k ? ", " : "");
                    json_str(label);
                    printf(", \"n\": %zu", groups[k].n);
                    json_num("mean_log_prob", groups[k].sum / groups[k].n);
                    printf("}");
                }
                printf("]");
            }
            printf("}\n");
        } else {
            printf("data            %s (%zu samples, dimension %zu)\n", a.data, d.n, d.d);
            if (nm.columns) {
                printf("columns         ");
                for (size_t j = 0; j < d.d && j < 20; j++) printf("%s%s", j ? ", " : "", nm.columns[j]);
                printf("%s\n", d.d > 20 ? ", ..." : "");
            }
            printf("log-likelihood  %.5f +- %.5f nats (mean +- standard error)\n", mean, se);
            printf("bits/dim        %.5f\n", bpd);
            if (d.logp_true) {
                printf("true log-lik.   %.5f nats\n", true_mean);
                printf("KL gap          %.5f +- %.5f nats (true - model; 0 is perfect)\n", gap, gap_se);
            }
            if (a.joint)
                printf("joint log-lik.  %.5f nats per row under the learned dependence (%.3f in all; the rows\n"
                       "                as independent: %.5f per row)\n", joint / d.n, joint, joint_iid / d.n);
            for (size_t k = 0; k < ng; k++) {
                char label[512];
                const ctx_group *g = &groups[k];
                double m = g->sum / g->n, var = g->n > 1 ? (g->sum2 - g->n * m * m) / (g->n - 1) : 0;
                nf_context_format(&nm, d.ctx + g->first * d.c, label, sizeof label);
                printf("%-15s %s: %zu samples, log-likelihood %.5f +- %.5f nats\n", k ? "" : "by context", label, g->n,
                       m, sqrt(var > 0 ? var / g->n : 0));
            }
        }
    }
    free(logp);
    nf_data_names_free(&nm);
    app_data_free(&d);
    nf_flow_free(flow);
    return status;
}

int nf_cmd_logprob(int argc, char **argv)
{
    eval_args a;
    int urc = parse("logprob", LOGPROB_HELP, argc, argv, &a, 1);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    nf_flow *flow = NULL;
    app_data d = {0};
    nf_real *logp = NULL;
    double mean, se;
    int rc = app_check_output(a.out);
    if (rc == NF_OK) rc = app_check_not_input(a.out, a.model, "model");
    if (rc == NF_OK) rc = app_check_not_input(a.out, a.data, "data file");
    if (rc == NF_OK) rc = compute(&a, &flow, &d, &logp, &mean, &se);
    nf_h5 *f = NULL;
    if (rc == NF_OK) rc = nf_h5_create(&f, a.out, "nf-logprob", 1);
    if (rc == NF_OK) rc = nf_h5_write_real(f, "/logp", logp, d.n, 0);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "model", a.model);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "data", a.data);
    if (rc == NF_OK) rc = nf_h5_attr_set_double(f, "/", "mean_log_prob", mean);
    if (rc == NF_OK) {
        rc = nf_h5_commit(f);
    } else if (f) {
        nf_h5_abort(f);
    }
    size_t n = d.n;
    free(logp);
    app_data_free(&d);
    nf_flow_free(flow);
    if (rc != NF_OK) return cli_fail("logprob");
    fprintf(stderr, "nf logprob: wrote %zu log-densities (mean %.4f nats) to %s\n", n, mean, a.out);
    return 0;
}
