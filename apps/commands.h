/* apps/commands.h - the nf subcommands, one file each (apps/cmd_<name>.c), and shared CLI helpers.
 *
 * Each command takes argc/argv starting at its own name (argv[0] = "fit"), prints results on stdout,
 * progress and errors on stderr, and returns the process exit status: 0 success, 1 failure (bad
 * input, I/O), 2 usage error.  Errors are printed once, as "nf CMD: message", by cli_fail(). */
#ifndef NF_APPS_COMMANDS_H
#define NF_APPS_COMMANDS_H

#include <stdio.h>

int nf_cmd_data(int argc, char **argv);
int nf_cmd_fit(int argc, char **argv);
int nf_cmd_eval(int argc, char **argv);
int nf_cmd_logprob(int argc, char **argv);
int nf_cmd_sample(int argc, char **argv);
int nf_cmd_info(int argc, char **argv);
int nf_cmd_plot(int argc, char **argv);
int nf_cmd_tpp(int argc, char **argv);

/* Print "nf CMD: <last library error>" (or the formatted message) on stderr; return 1. */
int cli_fail(const char *cmd);
int cli_failf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: "nf CMD: message" plus "run 'nf CMD --help' for the options"; return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict number parsing for flag values; on error print a usage error naming the flag. */
int cli_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* 1 if argv[i] is -h or --help. */
int cli_is_help(const char *s);
/* --threads N of the commands that compute: OpenMP and BLAS threads (threads <= 0: all cores). */
void cli_set_threads(int threads);

#endif
