/* tests/fuzz/fuzz_sequences.c - libFuzzer harness for the event-sequence loader
 * (datasets/sequences.c): the input is the whole nf-sequences HDF5 file. */
#include "datasets/sequences.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".h5");
    if (!path) return 0;
    nf_source *s = NULL;
    if (nf_source_sequences_load(&s, path) == 0) {
        size_t n;
        double a, b, c;
        nf_sequences_stats(s, &n, &a, &b, &c);
        nf_source_free(s);
    }
    return 0;
}
