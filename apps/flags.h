/* apps/flags.h - one table-driven flag parser for every nf subcommand.
 *
 * A command describes its flags in a table of flag_spec (ended by an entry whose name is NULL),
 * each pointing at the variable it sets, and calls flags_parse() once:
 *
 *     long n = -1;
 *     const char *out = NULL, *pos[1];
 *     const flag_spec flags[] = {
 *         {.name = "-n", .kind = FLAG_LONG, .dst = &n, .lo = 1, .hi = 1L << 32},
 *         {.name = "--output", .alias = "-o", .kind = FLAG_STRING, .dst = &out},
 *         {0},
 *     };
 *     const flags_cmd c = {.cmd = "sample", .help = SAMPLE_HELP, .flags = flags, .max_pos = 1};
 *     int rc = flags_parse(&c, argc, argv, pos, NULL);
 *     if (rc != FLAGS_OK) return rc == FLAGS_HELP ? 0 : 2;
 *
 * Arguments are read left to right, argv[1] first (argv[0] is the command's name).  A flag takes its
 * value from the next argument, whatever it looks like ("-o --help" writes to a file named
 * "--help"), or, for names beginning "--", from "--name=value".  A repeated flag keeps its last
 * value.  "-h" and "--help" print the help text and stop.  Any other argument beginning with '-'
 * (except "-" alone) must be in the table.  Every other argument is positional.
 *
 * Nothing here exits: a usage error is printed once, as "nf CMD: message (run 'nf CMD --help' for
 * the options)" (cli_usage_error), and reported to the caller, who returns exit status 2.
 * Variables of flags not given keep the values they had, so initialise them to the defaults. */
#ifndef NF_APPS_FLAGS_H
#define NF_APPS_FLAGS_H

typedef enum flag_kind {
    FLAG_BOOL,    /* no value; sets int *dst to 1 */
    FLAG_INT,     /* int *dst, an integer from lo to hi (cli_parse_long's checks and message) */
    FLAG_LONG,    /* long *dst, an integer from lo to hi */
    FLAG_DOUBLE,  /* double *dst, a finite number from lo to hi (cli_parse_double) */
    FLAG_STRING,  /* const char **dst, the value itself (pointing into argv) */
    FLAG_CHOICE   /* int *dst, the index of the value in choices */
} flag_kind;

typedef struct flag_spec {
    const char *name;           /* "--steps", "-n"; NULL ends the table */
    const char *alias;          /* another spelling ("-o" for "--output"), or NULL */
    flag_kind kind;
    void *dst;                  /* the variable set, of the type its kind names */
    double lo, hi;              /* INT, LONG, DOUBLE: accepted range; integer bounds saturate at
                                   the type's limits, so LONG_MAX (or INT_MAX) means "no limit" */
    const char *const *choices; /* CHOICE: the accepted values, NULL-terminated */
    int *seen;                  /* optional: set to 1 when the flag is given */
} flag_spec;

/* --threads N: the worker threads (0, the default, is every core; cli_set_threads). */
#define FLAG_THREADS(threads) {.name = "--threads", .kind = FLAG_INT, .dst = &(threads), .lo = 1, .hi = 4096}

/* The flags every model-kind training command shares (nf tpp fit, nf causal fit), as table entries:
 * tc an nf_train_config, the rest plain variables (lr and val_frac double, seed long, threads and
 * quiet int) that the command turns into its configuration. */
#define FLAGS_TRAINING(tc, lr, val_frac, seed, threads, quiet)                                              \
    {.name = "--steps", .kind = FLAG_LONG, .dst = &(tc).max_steps, .lo = 1, .hi = 1L << 40},                \
    {.name = "--batch", .kind = FLAG_INT, .dst = &(tc).batch, .lo = 1, .hi = 1 << 20},                       \
    {.name = "--lr", .kind = FLAG_DOUBLE, .dst = &(lr), .lo = 0, .hi = 10},                                  \
    {.name = "--clip", .kind = FLAG_DOUBLE, .dst = &(tc).clip, .lo = 0, .hi = 1e12},                         \
    {.name = "--val-frac", .kind = FLAG_DOUBLE, .dst = &(val_frac), .lo = 0, .hi = 0.9},                     \
    {.name = "--eval-every", .kind = FLAG_LONG, .dst = &(tc).eval_every, .lo = 0, .hi = 1L << 40},          \
    {.name = "--patience", .kind = FLAG_INT, .dst = &(tc).patience, .lo = 0, .hi = 1 << 30},                \
    {.name = "--seed", .kind = FLAG_LONG, .dst = &(seed), .lo = 0, .hi = 1L << 53},                          \
    FLAG_THREADS(threads),                                                                                 \
    {.name = "--checkpoint-every", .kind = FLAG_LONG, .dst = &(tc).checkpoint_every, .lo = 0, .hi = 1L << 40}, \
    {.name = "--quiet", .alias = "-q", .kind = FLAG_BOOL, .dst = &(quiet)}

/* --force: a new fit may replace an existing model file (app_check_new_model). */
#define FLAG_FORCE(force) {.name = "--force", .kind = FLAG_BOOL, .dst = &(force)}

/* --ema D: the trainer's moving average of the weights (nf_train_config.ema; 0 = off). */
#define FLAG_EMA(tc) {.name = "--ema", .kind = FLAG_DOUBLE, .dst = &(tc).ema, .lo = 0, .hi = 0.999999}

typedef struct flags_cmd {
    const char *cmd;            /* "sample", "data make": every message begins "nf CMD: " */
    const char *help;           /* printed to stdout for -h / --help */
    const flag_spec *flags;     /* the table */
    int max_pos;                /* positional arguments accepted (pos must hold as many) */
    const char *too_many;       /* the usage error for one more: a printf format given that
                                   argument and the first positional, both strings; NULL for
                                   "unexpected argument '%s'" */
} flags_cmd;

enum {
    FLAGS_OK = 0,     /* parsed; go on */
    FLAGS_HELP = 1,   /* the help text was printed: the command returns 0 */
    FLAGS_USAGE = 2   /* a usage error was printed: the command returns 2 (cli_usage_error's value) */
};

/* Parse argv[1..argc-1] by c's table, setting the flags' variables and collecting the positional
 * arguments in order into pos[0..max_pos-1] (pos may be NULL when max_pos is 0); pos entries left
 * over are set to NULL, and *npos (if npos is not NULL) gets the count.  Stops at the first help
 * flag or error.  Returns FLAGS_OK, FLAGS_HELP or FLAGS_USAGE.
 *
 * Messages: "unknown option '--x'", "--x needs a value", "--x takes no value" (BOOL given
 * "--x=value"), "--x abc: expected an integer from LO to HI" (cli_parse_long), "--x abc: expected a
 * number from LO to HI" (cli_parse_double), "--x abc: expected a, b or c" (CHOICE), and c->too_many
 * for a positional argument beyond max_pos. */
int flags_parse(const flags_cmd *c, int argc, char **argv, const char **pos, int *npos);

/* After flags_parse, for a training command given --resume MODEL: a resumed run keeps every setting
 * stored in its file, so any flag other than --resume, --threads, --quiet and --json (and any
 * positional argument: npos the count) is a usage error naming it, instead of being ignored.
 * Returns FLAGS_OK or FLAGS_USAGE (the message printed). */
int flags_check_resume(const flags_cmd *c, int argc, char **argv, const char *model, int npos);

#endif
