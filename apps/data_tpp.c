/* apps/data_tpp.c - event-sequence data on the command line:
 *
 *   nf data make tpp-NAME           sequences simulated from a point process (datasets/tpp_process.h),
 *                                   with the exact log-likelihood of each stored next to it
 *   nf tpp import / nf data import --sequences
 *                                   CSV (long form) or NPY (one row per sequence) to an nf-sequences
 *                                   file; --true-process NAME[:OPTIONS] attaches the truth
 *   nf data split SEQ.h5            by whole sequences, the truth carried
 *
 * The library does the work (datasets/sequences.h, sequences_import.h, tpp_process.h); this file
 * parses, checks every argument before anything is computed or created, and reports.  Files are
 * written atomically, so a bad input leaves none behind.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/datafile.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "core/import.h"
#include "datasets/dataset.h"
#include "datasets/sequences.h"
#include "datasets/sequences_import.h"
#include "datasets/tpp_process.h"

/* The shared benchmark sets' settings (../shared/data/tpp/README.md): 64 sequences of 1,024 events. */
#define TPP_DEFAULT_N 64
#define TPP_DEFAULT_EVENTS 1024
#define TPP_DEFAULT_SEED 1
#define TPP_MAX_EVENTS 200000000L /* sequences x events per sequence, in memory at once */

/* a == b with '_' and '-' alike (self_correcting, self-correcting) */
static int same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '_' || *a == '-') && (*b == '_' || *b == '-'))) return 0;
    return *a == *b;
}

void app_data_list_tpp(void)
{
    for (int i = 0; nf_tpp_process_types[i]; i++) {
        const nf_tpp_process_type *t = nf_tpp_process_types[i];
        printf("tpp-%-22s sequences  exact log-lik  %s [%s]", t->name, t->summary, t->options_help);
        for (int k = 0; nf_tpp_presets[k].name; k++)
            if (same_name(nf_tpp_presets[k].name, t->name))
                printf("; the shared set %s: %s, true NLL %.3f per event", nf_tpp_presets[k].name,
                       nf_tpp_presets[k].options, nf_tpp_presets[k].readme_nll);
        printf("\n");
    }
    for (int i = 0; nf_tpp_presets[i].name; i++) {
        const nf_tpp_preset *p = &nf_tpp_presets[i];
        int is_type = 0;
        for (int k = 0; nf_tpp_process_types[k]; k++) is_type |= same_name(p->name, nf_tpp_process_types[k]->name);
        if (!is_type)
            printf("tpp-%-22s sequences  exact log-lik  the shared set %s: %s(%s), true NLL %.3f per event\n",
                   p->name, p->name, p->type, p->options, p->readme_nll);
    }
}

/* ---- nf data make tpp-NAME -------------------------------------------------------------------- */

static void make_help(char *buf, size_t size)
{
    char names[512];
    size_t at = 0;
    for (int i = 0; nf_tpp_process_types[i] && at < sizeof names; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", nf_tpp_process_types[i]->name);
    snprintf(buf, size,
             "usage: nf data make tpp-NAME [-n N] [--events K | --t-end T] [--t-start T] [--seed S]\n"
             "                             [--params K=V,...] [--KEY VALUE ...] -o SEQ.h5\n\n"
             "Simulate N event sequences from a point process and write an nf-sequences file that also\n"
             "holds the exact log-likelihood of every sequence (/log_lik_true on its window, with the\n"
             "survival of the open interval after the last event; /log_lik_true_no_survival without it)\n"
             "and the process and its parameters as attributes (docs/FORMATS.md).\n\n"
             "NAME: %s,\n"
             "or a shared benchmark set's process (hawkes1, hawkes2, poisson, renewal, self_correcting);\n"
             "'nf data make --list' gives each one's parameters and defaults.\n\n"
             "  -n N             sequences (default %d)\n"
             "  --events K       events per sequence, each window closing at its last event\n"
             "                   (default %d, as in the shared sets, unless --t-end is given)\n"
             "  --t-end T        instead: every sequence observed on [t-start, T]\n"
             "  --t-start T      window start (default 0)\n"
             "  --seed S         simulation seed (default %d)\n"
             "  --params LIST    process parameters, key=value comma-separated (alpha=0.4:0.4,beta=1:20;\n"
             "                   vectors with ':')\n"
             "  --KEY VALUE      one process parameter (--rate 2, --mu 0.3 --alpha 0.5:0.2 --beta 1:10)\n"
             "  -o SEQ.h5        output file (required)\n\n"
             "examples:\n"
             "  nf data make tpp-hawkes --mu 0.2 --alpha 0.4:0.4 --beta 1:20 -o hawkes.h5\n"
             "  nf data make tpp-poisson --rate 2 -n 100 --t-end 50 --seed 3 -o pois.h5\n",
             names, TPP_DEFAULT_N, TPP_DEFAULT_EVENTS, TPP_DEFAULT_SEED);
}

/* The table entry spelled a[0..len) (name or alias), or NULL. */
static const flag_spec *table_flag(const flag_spec *t, const char *a, size_t len)
{
    for (; t->name; t++)
        if ((strlen(t->name) == len && !strncmp(t->name, a, len)) ||
            (t->alias && strlen(t->alias) == len && !strncmp(t->alias, a, len)))
            return t;
    return NULL;
}

/* Move every "--KEY VALUE" or "--KEY=VALUE" whose --KEY is not in the table t out of argv[1..]:
 * appended to opts as ",KEY=VALUE"; the rest stays, in order, in keep[0..*nkeep) (keep[0] =
 * argv[0]).  A flag of the table keeps its value with it.  Returns 0, or 2 after a usage error. */
static int take_params(const char *cmd, const flag_spec *t, int argc, char **argv, char **keep, int *nkeep,
                       char *opts, size_t size)
{
    int n = 0;
    keep[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || !a[2] || cli_is_help(a)) {
            keep[n++] = argv[i];
            if (a[0] == '-' && a[1] && !cli_is_help(a)) { /* a short flag: its value goes with it */
                const flag_spec *f = table_flag(t, a, strlen(a));
                if (f && f->kind != FLAG_BOOL && i + 1 < argc) keep[n++] = argv[++i];
            }
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const flag_spec *f = table_flag(t, a, len);
        if (f) {
            keep[n++] = argv[i];
            if (!eq && f->kind != FLAG_BOOL && i + 1 < argc) keep[n++] = argv[++i];
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) return cli_usage_error(cmd, "%.*s needs a value (a process parameter)", (int)len, a);
        size_t at = strlen(opts);
        if ((size_t)snprintf(opts + at, size - at, ",%.*s=%s", (int)(len - 2), a + 2, v) >= size - at)
            return cli_usage_error(cmd, "process parameters too long");
    }
    *nkeep = n;
    return 0;
}

/* Simulate, score without the survival term too, write. */
static int make_run(const char *out, const char *gen, const nf_tpp_process *p, long n, double t_start, double t_end,
                    long events, long seed, double *ll_sum, size_t *n_events)
{
    nf_rng *rng = nf_rng_alloc((uint64_t)seed, 0);
    if (!rng) return nf_error(NF_ENOMEM, "out of memory");
    nf_tpp_sim sim;
    int rc = nf_tpp_simulate(&sim, p, rng, (size_t)n, t_start, t_end, (size_t)events);
    nf_rng_free(rng);
    if (rc != NF_OK) return rc;
    double *ns = malloc(sim.n_seq * sizeof *ns);
    nf_source *src = NULL;
    rc = ns ? NF_OK : nf_error(NF_ENOMEM, "out of memory");
    if (rc == NF_OK)
        rc = nf_source_sequences_wrap(&src, sim.n_seq, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0);
    if (rc == NF_OK) rc = nf_tpp_source_log_lik(p, src, NF_TPP_TO_LAST_EVENT, ns, NULL, NULL);
    nf_sequences_truth tr = {.log_lik = sim.log_lik, .log_lik_no_survival = ns, .process = p->type->name,
                             .options = p->options, .generator = gen, .seed = seed};
    if (rc == NF_OK)
        rc = nf_sequences_save_truth(out, sim.n_seq, sim.offsets, sim.times, sim.t_start, sim.t_end, NULL, 0, &tr);
    *ll_sum = 0;
    for (size_t i = 0; i < sim.n_seq; i++) *ll_sum += sim.log_lik[i];
    *n_events = sim.n_events;
    nf_source_free(src);
    free(ns);
    nf_tpp_sim_free(&sim);
    return rc;
}

int app_data_make_tpp(int argc, char **argv)
{
    const char *cmd = "data make", *name = NULL, *out = NULL, *params = NULL;
    long n = TPP_DEFAULT_N, events = TPP_DEFAULT_EVENTS, seed = TPP_DEFAULT_SEED;
    double t_start = 0, t_end = NAN;
    int set_events = 0, set_t_end = 0;
    const flag_spec flags[] = {
        {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 10000000},
        {.name = "--events", .kind = FLAG_LONG, .dst = &events, .lo = 1, .hi = (double)TPP_MAX_EVENTS,
         .seen = &set_events},
        {.name = "--t-end", .kind = FLAG_DOUBLE, .dst = &t_end, .lo = -1e15, .hi = 1e15, .seen = &set_t_end},
        {.name = "--t-start", .kind = FLAG_DOUBLE, .dst = &t_start, .lo = -1e15, .hi = 1e15},
        {.name = "--seed", .kind = FLAG_LONG, .dst = &seed, .lo = 0, .hi = (double)LONG_MAX},
        {.name = "--params", .kind = FLAG_STRING, .dst = &params},
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {0},
    };
    char help[4096], opts[1024] = "";
    make_help(help, sizeof help);
    char **keep = malloc((size_t)(argc + 1) * sizeof *keep);
    if (!keep) return cli_failf(cmd, "out of memory");
    int nkeep = 0;
    if (take_params(cmd, flags, argc, argv, keep, &nkeep, opts, sizeof opts)) {
        free(keep);
        return 2;
    }
    const flags_cmd c = {.cmd = cmd, .help = help, .flags = flags, .max_pos = 1,
                         .too_many = "unexpected argument '%s' (the process is already '%s')"};
    int urc = flags_parse(&c, nkeep, keep, &name, NULL);
    free(keep);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!name || strncmp(name, "tpp-", 4) != 0)
        return cli_usage_error(cmd, "no process named (expected tpp-NAME, see 'nf data make --list')");
    const char *pname = name + 4;
    if (!out) return cli_usage_error(cmd, "no output file (expected -o SEQ.h5)");
    if (set_events && set_t_end)
        return cli_usage_error(cmd, "--events %ld and --t-end %g: give one (a number of events per sequence, or a "
                                    "window [t-start, t-end])", events, t_end);
    if (set_t_end && !(t_end > t_start))
        return cli_usage_error(cmd, "--t-end %g: expected a window end after --t-start %g", t_end, t_start);
    if (!set_t_end && n > TPP_MAX_EVENTS / events)
        return cli_usage_error(cmd, "-n %ld sequences of --events %ld: more than %ld events in all", n, events,
                               TPP_MAX_EVENTS);
    /* the --params list first, then the single flags (a key given twice keeps the last) */
    char all[1200];
    snprintf(all, sizeof all, "%s%s", params ? params : "", opts[0] && !(params && params[0]) ? opts + 1 : opts);
    nf_tpp_process *p = NULL;
    if (nf_tpp_process_create(&p, pname, all) != NF_OK) return cli_usage_error(cmd, "%s", nf_strerror_last());
    if (app_check_output(out) != NF_OK) {
        nf_tpp_process_free(p);
        return cli_fail(cmd);
    }
    double ll = 0;
    size_t n_ev = 0;
    int rc = make_run(out, name, p, n, t_start, set_t_end ? t_end : INFINITY, set_t_end ? 0 : events, seed, &ll, &n_ev);
    if (rc == NF_OK)
        printf("%s: %s(%s), %ld sequences, %zu events, true NLL %.5f per event, %.4f per sequence\n", out,
               p->type->name, p->options, n, n_ev, -ll / (double)(n_ev ? n_ev : 1), -ll / (double)n);
    else
        nf_error_context(rc, "%s", name);
    nf_tpp_process_free(p);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- nf tpp import, nf data import --sequences ------------------------------------------------ */

static void import_help(char *buf, size_t size, const char *cmd)
{
    const int data = !strcmp(cmd, "data import");
    snprintf(buf, size,
             "usage: nf %s FILE.csv|FILE.npy%s -o SEQ.h5 [--t-start T] [--t-end T] [--id-col J]\n"
             "          [--time-col J] [--mark-col J] [--true-process NAME[:OPTIONS]]\n"
             "\n"
             "Event sequences into an nf-sequences file (docs/FORMATS.md).  A CSV is read in long form, one\n"
             "event per row: sequence id (text such as user_42, or a number), time and optionally an integer\n"
             "mark (header optional; rows in any order).  An NPY array is read as one sequence per row of\n"
             "arrival times (the TPP benchmark files).  Every sequence is observed on [t_start, t_end]: by\n"
             "default from 0 to its own last event.\n"
             "\n"
             "  -o FILE          output file (written atomically)\n"
             "  --t-start T      start of every window                 [0]\n"
             "  --t-end T        end of every window                   [each sequence's last event]\n"
             "  --id-col J       CSV: column of the sequence id        [0]\n"
             "  --time-col J     CSV: column of the time               [1]\n"
             "  --mark-col J     CSV: column of the mark; -1 for none  [2 when the file has 3 columns, else -1]\n"
             "  --true-process NAME[:OPTIONS]\n"
             "                   the process the data come from (a type or preset of 'nf data make --list',\n"
             "                   without tpp-; options key=value,... after the first ':'): the file then\n"
             "                   holds each sequence's exact log-likelihood under it, on its window and\n"
             "                   without the survival term (the benchmarks' convention), so nf tpp eval\n"
             "                   reports the gap between a model and the truth\n"
             "\n"
             "examples:\n"
             "  nf %s events.csv%s -o seq.h5 --t-end 100\n"
             "  nf %s hawkes1.npy%s --true-process hawkes1 -o hawkes1.h5\n"
             "  nf %s x.npy%s --true-process hawkes:mu=0.2,alpha=0.4:0.4,beta=1:20 -o x.h5\n",
             cmd, data ? " --sequences" : "", cmd, data ? " --sequences" : "", cmd, data ? " --sequences" : "", cmd,
             data ? " --sequences" : "");
}

/* "NAME[:OPTIONS]" -> a process (the options after the first ':', so vector values keep theirs). */
static int parse_true_process(const char *spec, nf_tpp_process **p)
{
    char name[128];
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len == 0 || len >= sizeof name)
        return nf_error(NF_EINVAL, "--true-process '%s': expected NAME[:key=value,...]", spec);
    memcpy(name, spec, len);
    name[len] = '\0';
    return nf_tpp_process_create(p, name, colon ? colon + 1 : NULL);
}

int app_tpp_import(const char *cmd, int argc, char **argv)
{
    const char *out = NULL, *truth = NULL, *pos[1];
    double t_start = NAN, t_end = NAN;
    int id_col = 0, time_col = 1, mark_col = -2, sequences = 0;
    const flag_spec flags[] = {
        {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
        {.name = "--t-start", .kind = FLAG_DOUBLE, .dst = &t_start, .lo = -1e300, .hi = 1e300},
        {.name = "--t-end", .kind = FLAG_DOUBLE, .dst = &t_end, .lo = -1e300, .hi = 1e300},
        {.name = "--id-col", .kind = FLAG_INT, .dst = &id_col, .lo = 0, .hi = 1 << 20},
        {.name = "--time-col", .kind = FLAG_INT, .dst = &time_col, .lo = 0, .hi = 1 << 20},
        {.name = "--mark-col", .kind = FLAG_INT, .dst = &mark_col, .lo = -1, .hi = 1 << 20},
        {.name = "--true-process", .kind = FLAG_STRING, .dst = &truth},
        {.name = "--sequences", .kind = FLAG_BOOL, .dst = &sequences}, /* nf data import's switch */
        {0},
    };
    char help[4096];
    import_help(help, sizeof help, cmd);
    const flags_cmd fc = {.cmd = cmd, .help = help, .flags = flags, .max_pos = 1};
    int urc = flags_parse(&fc, argc, argv, pos, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!pos[0]) return cli_usage_error(cmd, "no input file given (expected: nf %s FILE -o SEQ.h5)", cmd);
    if (!out) return cli_usage_error(cmd, "no output file given (expected -o SEQ.h5)");
    nf_tpp_process *p = NULL;
    if (truth && parse_true_process(truth, &p) != NF_OK) return cli_usage_error(cmd, "%s", nf_strerror_last());
    if (app_check_output(out) != NF_OK || app_check_not_input(out, pos[0], "input file") != NF_OK) {
        nf_tpp_process_free(p);
        return cli_fail(cmd);
    }
    nf_table t = {0};
    nf_seq_import_summary sum;
    size_t len = strlen(pos[0]);
    int npy = len > 4 && !strcmp(pos[0] + len - 4, ".npy");
    /* the sequence id column as labels: ids may be text ("user_42") or numbers */
    char id_list[24];
    snprintf(id_list, sizeof id_list, "%d", id_col);
    const nf_import_select ids = {.labels = id_list, .labels_flag = "--id-col"};
    int rc = npy ? nf_import_file(pos[0], &t) : nf_import_file_select(pos[0], NULL, &ids, &t);
    if (rc == NF_OK && npy) {
        rc = nf_sequences_import_wide(out, pos[0], &t, t_start, t_end, p, &sum);
    } else if (rc == NF_OK) {
        if (mark_col == -2) mark_col = t.d >= 3 ? 2 : -1;
        rc = nf_sequences_import_long(out, pos[0], &t, id_col, time_col, mark_col, t_start, t_end, p, &sum);
    }
    nf_table_free(&t);
    if (rc != NF_OK) {
        nf_tpp_process_free(p);
        return cli_fail(cmd);
    }
    char marks[48] = "";
    if (sum.num_marks) snprintf(marks, sizeof marks, ", %d mark types", sum.num_marks);
    fprintf(stderr, "nf %s: %zu sequences, %zu events%s; windows from %g to %s; wrote %s\n", cmd, sum.n_seq,
            sum.n_events, marks, sum.t_start, sum.t_end_is_last ? "each sequence's last event" : "the given --t-end",
            out);
    if (p) {
        double e = (double)(sum.n_events ? sum.n_events : 1);
        fprintf(stderr, "nf %s: true process %s(%s): NLL per event %.6f on the windows, %.6f without the survival "
                        "term (first interval from t_start included)\n", cmd, p->type->name, p->options,
                -sum.true_log_lik / e, -sum.true_log_lik_no_survival / e);
    }
    nf_tpp_process_free(p);
    return 0;
}

/* ---- nf data split of a sequences file -------------------------------------------------------- */

int app_is_sequences_file(const char *path)
{
    nf_h5 *f;
    if (nf_h5_open(&f, path, NULL, 0) != NF_OK) {
        nf_error_clear();
        return 0;
    }
    int yes;
    if (nf_h5_attr_exists(f, "/", "format")) {
        char fmt[64] = "";
        yes = nf_h5_attr_get_string(f, "/", "format", fmt, sizeof fmt) == NF_OK && !strcmp(fmt, NF_SEQUENCES_FORMAT);
    } else { /* an h5py file: the datasets say it */
        yes = nf_h5_exists(f, "/offsets") && nf_h5_exists(f, "/times") && !nf_h5_exists(f, "/x");
    }
    nf_h5_close(f);
    nf_error_clear();
    return yes;
}

int app_data_split_sequences(const char *cmd, const char *in, const char *const path[3], double val, double test,
                             long seed)
{
    static const char *const part[3] = {"train", "val", "test"};
    nf_source *s = NULL;
    size_t *perm = NULL, count[3] = {0, 0, 0};
    int rc = nf_source_sequences_load(&s, in);
    if (rc == NF_OK && !(perm = malloc(s->n * sizeof *perm)))
        rc = nf_error(NF_ENOMEM, "%s: out of memory for %zu sequences", in, s->n);
    if (rc == NF_OK && (size_t)llround((double)s->n * val) + (size_t)llround((double)s->n * test) >= s->n)
        rc = nf_error(NF_EINVAL, "%s: %zu sequences with --val %g and --test %g leave no training sequences "
                                 "(expected smaller fractions)", in, s->n, val, test);
    if (rc == NF_OK && (rc = nf_dataset_split(s->n, val, test, (uint64_t)seed, perm, count)) != NF_OK)
        nf_error_context(rc, "%s", in);
    if (rc == NF_OK) rc = nf_sequences_split_save(s, perm, 3, count, path, part, in, (uint64_t)seed);
    if (rc == NF_OK) {
        printf("%s: %zu train, %zu validation, %zu test sequences%s ->", in, count[0], count[1], count[2],
               nf_source_sequences_truth(s).log_lik ? " (with their true log-likelihoods)" : "");
        for (int k = 0, first = 1; k < 3; k++)
            if (count[k]) printf("%s %s", first ? "" : ",", path[k]), first = 0;
        printf("\n");
    }
    free(perm);
    nf_source_free(s);
    return rc == NF_OK ? 0 : cli_fail(cmd);
}

/* ---- nf tpp eval: the gap to the truth -------------------------------------------------------- */

/* A JSON string value (the names hold no control characters; quotes and backslashes escaped). */
static void json_str(const char *key, const char *v)
{
    printf(", \"%s\": \"", key);
    for (; *v; v++) printf(*v == '"' || *v == '\\' ? "\\%c" : "%c", *v);
    printf("\"");
}

static void json_val(const char *key, double v)
{
    if (isfinite(v)) printf(", \"%s\": %.9g", key, v);
    else printf(", \"%s\": null", key);
}

/* The gap of one convention: d_i = true ll_i - model ll_i (the model's NLL minus the truth's, per
 * sequence), their sum, and the standard error of their mean, sd(d) / sqrt(n), sequences taken as
 * independent draws. */
typedef struct {
    double truth, gap, gap_se; /* sums over sequences of the true ll and of d; se of mean d */
} gap_stats;

static gap_stats gap_of(const double *truth, const double *model, size_t n)
{
    gap_stats g = {0, 0, 0};
    for (size_t i = 0; i < n; i++) g.truth += truth[i], g.gap += truth[i] - model[i];
    double mean = g.gap / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) ss += (truth[i] - model[i] - mean) * (truth[i] - model[i] - mean);
    g.gap_se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : NAN;
    return g;
}

/* With the survival term the model's log-likelihood is compared with /log_lik_true, without it with
 * /log_lik_true_no_survival: like for like.  A file without the latter whose windows all close at
 * their last event has both conventions equal, so /log_lik_true serves for both.  Per event, the
 * sums are divided by the number of events (the standard error scaled by n / events). */
void app_tpp_print_truth(const nf_source *s, const double *with, const double *without, size_t events, int json)
{
    nf_sequences_truth tr = nf_source_sequences_truth(s);
    if (!tr.log_lik) return;
    nf_sequences q = nf_source_sequences(s);
    const double *ns = tr.log_lik_no_survival;
    int closes = 1;
    for (size_t i = 0; i < s->n && !ns; i++) {
        double last = q.offsets[i + 1] > q.offsets[i] ? q.times[q.offsets[i + 1] - 1] : q.t_start[i];
        closes &= q.t_end[i] == last;
    }
    if (!ns && closes) ns = tr.log_lik;
    const double n = (double)s->n, e = (double)(events ? events : 1);
    gap_stats w = gap_of(tr.log_lik, with, s->n), o = ns ? gap_of(ns, without, s->n) : (gap_stats){0, 0, 0};
    const char *proc = tr.process && tr.process[0] ? tr.process : "unknown";
    if (json) {
        json_str("true_process", proc);
        json_str("true_process_options", tr.options ? tr.options : "");
        json_val("true_nll_per_event", -w.truth / e);
        json_val("true_nll_per_sequence", -w.truth / n);
        json_val("gap_nll_per_event", w.gap / e);
        json_val("gap_nll_per_event_stderr", w.gap_se * n / e);
        json_val("gap_nll_per_sequence", w.gap / n);
        if (ns) {
            json_val("true_nll_per_event_no_survival", -o.truth / e);
            json_val("true_nll_per_sequence_no_survival", -o.truth / n);
            json_val("gap_nll_per_event_no_survival", o.gap / e);
            json_val("gap_nll_per_event_no_survival_stderr", o.gap_se * n / e);
            json_val("gap_nll_per_sequence_no_survival", o.gap / n);
        }
        return;
    }
    printf("true process        %s(%s), from the data file\n", proc, tr.options ? tr.options : "");
    printf("true NLL per event  %.5f nats (with survival)   gap %+.5f +- %.5f (model - truth)\n", -w.truth / e,
           w.gap / e, w.gap_se * n / e);
    printf("true NLL per seq.   %.5f nats                  gap %+.5f\n", -w.truth / n, w.gap / n);
    if (ns)
        printf("true NLL per event  %.5f nats (no survival)     gap %+.5f +- %.5f (the benchmark sets' convention)\n",
               -o.truth / e, o.gap / e, o.gap_se * n / e);
}
