/* tests/fuzz/fuzz_npy.c - libFuzzer harness for the NPY importer (core/import.c). */
#include <string.h>

#include "core/import.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".npy");
    if (!path) return 0;
    nf_table t;
    memset(&t, 0, sizeof t);
    if (nf_import_npy(path, &t) == 0) nf_table_free(&t);
    size_t shape[NF_IMPORT_NPY_MAX_DIMS]; /* arrays of any rank: the image importer's reader */
    int nd;
    if (nf_import_npy_nd(path, &t, shape, &nd) == 0) nf_table_free(&t);
    return 0;
}
