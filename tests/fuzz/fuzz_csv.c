/* tests/fuzz/fuzz_csv.c - libFuzzer harness for the CSV importer (core/import.c).  The first byte
 * picks the options (detected, or a given delimiter and header mode, or a column selection), the
 * rest is the file. */
#include <string.h>

#include "core/import.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *path = fuzz_file(data + 1, size - 1, ".csv");
    if (!path) return 0;
    nf_table t;
    memset(&t, 0, sizeof t);
    unsigned mode = data[0];
    if (mode < 64) {
        if (nf_import_csv(path, NULL, &t) == 0) nf_table_free(&t);
    } else if (mode < 128) {
        static const char delims[] = {',', ';', '\t', ' '};
        nf_csv_options o;
        memset(&o, 0, sizeof o);
        o.delimiter = delims[mode & 3];
        o.header = (int)((mode >> 2) % 3) - 1; /* -1, 0, 1: whatever the options accept */
        if (nf_import_csv(path, &o, &t) == 0) nf_table_free(&t);
    } else {
        nf_import_select sel;
        memset(&sel, 0, sizeof sel);
        static const char *cols[] = {"0", "1-2", "x0,x1", "a", NULL};
        static const char *ctx[] = {NULL, "1", "kind", "0-1", NULL};
        sel.columns = cols[mode & 3];
        sel.context = ctx[(mode >> 2) & 3];
        static const char *labels[] = {NULL, "0", "id", "1"};
        sel.labels = labels[(mode >> 4) & 3]; /* label columns, alone or beside the others */
        if (nf_import_csv_select(path, NULL, &sel, &t) == 0) nf_table_free(&t);
    }
    return 0;
}
