/* flows/spec.h - parsing flow specs into a flat list of bijectors and a base distribution.
 *
 * The grammar is documented in flows/flow.h.  Parsing expands repetitions ("3*(a, b)" becomes
 * a, b, a, b, a, b), checks every bijector name against the registry and reports errors with the
 * position in the text ("flow spec, position 12: unknown bijector 'afine-coupling'").  Options are
 * kept as text and checked by each bijector's create(), which knows its own options.
 */
#ifndef NF_SPEC_H
#define NF_SPEC_H

#include "flows/bijector.h"

#define NF_SPEC_MAX_ITEMS 1024
#define NF_SPEC_MAX_CHARS 65535 /* longest spec text accepted (model files keep it in 64 KiB) */
#define NF_SPEC_MAX_DEPTH 32    /* deepest nesting of K*( ... ) repeats */
#define NF_SPEC_OPTS_MAX 512

typedef struct nf_spec_item {
    const nf_bijector_type *type;
    char options[NF_SPEC_OPTS_MAX];
} nf_spec_item;

typedef struct nf_spec {
    int n;
    nf_spec_item *items;               /* (n) */
    char base[32];                     /* base distribution name, default "normal" */
    char base_options[NF_SPEC_OPTS_MAX];
} nf_spec;

int nf_spec_parse(nf_spec *s, const char *text);
void nf_spec_free(nf_spec *s);

#endif
