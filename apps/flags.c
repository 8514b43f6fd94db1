/* apps/flags.c - the table-driven flag parser of the nf subcommands (see apps/flags.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/flags.h"

/* An integer bound given as a double, clamped to [min, max]: LONG_MAX as a double rounds up to
 * 2^63, which does not convert back to a long. */
static long bound(double b, long min, long max)
{
    if (b <= (double)min) return min;
    if (b >= (double)max) return max;
    return (long)b;
}

/* The entry whose name or alias is the first len characters of arg; *spelled gets that spelling. */
static const flag_spec *find(const flag_spec *t, const char *arg, size_t len, const char **spelled)
{
    for (; t->name; t++) {
        const char *s[2] = {t->name, t->alias};
        for (int k = 0; k < 2; k++)
            if (s[k] && strlen(s[k]) == len && !strncmp(s[k], arg, len)) {
                *spelled = s[k];
                return t;
            }
    }
    return NULL;
}

/* Set f's variable from the value v given for the spelling flag. */
static int set_value(const char *cmd, const flag_spec *f, const char *flag, const char *v)
{
    long l;
    switch (f->kind) {
    case FLAG_BOOL:
        *(int *)f->dst = 1;
        return FLAGS_OK;
    case FLAG_INT:
        if (cli_parse_long(cmd, flag, v, bound(f->lo, INT_MIN, INT_MAX), bound(f->hi, INT_MIN, INT_MAX), &l))
            return FLAGS_USAGE;
        *(int *)f->dst = (int)l;
        return FLAGS_OK;
    case FLAG_LONG:
        return cli_parse_long(cmd, flag, v, bound(f->lo, LONG_MIN, LONG_MAX), bound(f->hi, LONG_MIN, LONG_MAX),
                              (long *)f->dst)
                   ? FLAGS_USAGE
                   : FLAGS_OK;
    case FLAG_DOUBLE:
        return cli_parse_double(cmd, flag, v, f->lo, f->hi, (double *)f->dst) ? FLAGS_USAGE : FLAGS_OK;
    case FLAG_STRING:
        *(const char **)f->dst = v;
        return FLAGS_OK;
    case FLAG_CHOICE: {
        char list[256] = "";
        size_t used = 0;
        for (int k = 0; f->choices[k]; k++) {
            if (!strcmp(v, f->choices[k])) {
                *(int *)f->dst = k;
                return FLAGS_OK;
            }
            const char *sep = k == 0 ? "" : f->choices[k + 1] ? ", " : " or ";
            int w = snprintf(list + used, sizeof list - used, "%s%s", sep, f->choices[k]);
            if (w > 0) used = used + (size_t)w < sizeof list ? used + (size_t)w : sizeof list - 1;
        }
        return cli_usage_error(cmd, "%s %s: expected %s", flag, v, list);
    }
    }
    return cli_usage_error(cmd, "%s: not a known kind of flag", flag);
}

int flags_parse(const flags_cmd *c, int argc, char **argv, const char **pos, int *npos)
{
    int n = 0;
    for (int k = 0; k < c->max_pos; k++) pos[k] = NULL;
    if (npos) *npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || !arg[1]) { /* positional ("-" alone too: standard input's usual name) */
            if (n < c->max_pos) {
                pos[n++] = arg;
                if (npos) *npos = n;
                continue;
            }
            if (c->too_many) return cli_usage_error(c->cmd, c->too_many, arg, n ? pos[0] : "");
            return cli_usage_error(c->cmd, "unexpected argument '%s'", arg);
        }
        if (cli_is_help(arg)) {
            fputs(c->help, stdout);
            return FLAGS_HELP;
        }
        const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const char *flag;
        const flag_spec *f = find(c->flags, arg, len, &flag);
        if (!f) return cli_usage_error(c->cmd, "unknown option '%.*s'", (int)len, arg);
        const char *v = NULL;
        if (f->kind == FLAG_BOOL) {
            if (eq) return cli_usage_error(c->cmd, "%s takes no value", flag);
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            return cli_usage_error(c->cmd, "%s needs a value", flag);
        }
        if (set_value(c->cmd, f, flag, v) != FLAGS_OK) return FLAGS_USAGE;
        if (f->seen) *f->seen = 1;
    }
    return FLAGS_OK;
}

int flags_check_resume(const flags_cmd *c, int argc, char **argv, const char *model, int npos)
{
    static const char *const keep[] = {"--resume", "--threads", "--quiet", "--json", NULL};
    if (npos > 0) return cli_usage_error(c->cmd, "--resume takes the model file only (the data path is stored in it)");
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || !arg[1] || cli_is_help(arg)) continue;
        const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
        const size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const char *flag;
        const flag_spec *f = find(c->flags, arg, len, &flag);
        if (!f) continue; /* flags_parse has refused it already */
        if (f->kind != FLAG_BOOL && !eq) i++; /* its value */
        int kept = 0;
        for (int k = 0; keep[k]; k++) kept |= !strcmp(f->name, keep[k]);
        if (!kept)
            return cli_usage_error(c->cmd,
                                   "%s does not apply with --resume: the run goes on with the settings stored in %s "
                                   "(only --threads and --quiet may be given; for other settings start a new fit)",
                                   flag, model);
    }
    return FLAGS_OK;
}
