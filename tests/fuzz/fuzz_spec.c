/* tests/fuzz/fuzz_spec.c - libFuzzer harness for the flow-spec parser (flows/spec.c): any text,
 * up to its length limit and beyond. */
#include <stdlib.h>
#include <string.h>

#include "flows/spec.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    nf_spec s;
    if (nf_spec_parse(&s, text) == 0) nf_spec_free(&s);
    free(text);
    return 0;
}
