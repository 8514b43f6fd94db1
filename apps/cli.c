/* apps/cli.c - helpers shared by the subcommands: error lines and strict flag parsing. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "core/blas.h"
#include "core/error.h"

int cli_fail(const char *cmd)
{
    const char *m = nf_strerror_last();
    fprintf(stderr, "nf %s: %s\n", cmd, m[0] ? m : "failed");
    return 1;
}

int cli_failf(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "nf %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "nf %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (run 'nf %s --help' for the options)\n", cmd);
    return 2;
}

int cli_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return cli_usage_error(cmd, "%s %s: expected an integer from %ld to %ld", flag, s ? s : "(missing)", lo, hi);
    *out = v;
    return 0;
}

int cli_parse_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return cli_usage_error(cmd, "%s %s: expected a number from %g to %g", flag, s ? s : "(missing)", lo, hi);
    *out = v;
    return 0;
}

int cli_is_help(const char *s) { return s && (!strcmp(s, "-h") || !strcmp(s, "--help")); }

void cli_set_threads(int threads)
{
    if (threads > 0) omp_set_num_threads(threads);
    nf_blas_set_threads(threads > 0 ? threads : omp_get_max_threads());
}
