/* core/opts.h - key=value option lists, as written in flow specs: "hidden=128, bins=8, mask=alt".
 *
 * A bijector's create() reads the options it knows with nf_opts_get_*; each read marks the key as
 * used, and afterwards nf_opts_check_used() refuses any key nobody read, naming it, so a typo in a
 * spec is an error and never silently ignored.  `owner` names the bijector in messages.
 */
#ifndef NF_OPTS_H
#define NF_OPTS_H

#include "core/error.h"

#define NF_OPTS_MAX 32
#define NF_OPT_KEY_MAX 32
#define NF_OPT_VAL_MAX 128

typedef struct nf_opts {
    char owner[64];
    int n;
    char key[NF_OPTS_MAX][NF_OPT_KEY_MAX];
    char val[NF_OPTS_MAX][NF_OPT_VAL_MAX];
    int used[NF_OPTS_MAX];
} nf_opts;

void nf_opts_init(nf_opts *o, const char *owner);
/* Parse "k=v, k=v" (commas or spaces between pairs); appends to o. */
int nf_opts_parse(nf_opts *o, const char *text);
int nf_opts_set(nf_opts *o, const char *key, const char *val);
int nf_opts_has(const nf_opts *o, const char *key);
/* Each returns NF_OK and writes *out (the default when the key is absent), or NF_EINVAL with a
 * message naming owner, key, the bad value and what was expected. */
int nf_opts_int(nf_opts *o, const char *key, int def, int lo, int hi, int *out);
int nf_opts_double(nf_opts *o, const char *key, double def, double lo, double hi, double *out);
int nf_opts_string(nf_opts *o, const char *key, const char *def, const char **out);
/* choices is a "|"-separated list ("halves|alt"); *out receives the index of the chosen one. */
int nf_opts_choice(nf_opts *o, const char *key, const char *choices, int def, int *out);
int nf_opts_check_used(const nf_opts *o);
/* Write the options back as "k=v,k=v" (canonical form stored in model files). */
void nf_opts_format(const nf_opts *o, char *buf, size_t size);

#endif
