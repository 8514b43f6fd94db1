/* tests/fuzz/fuzz_data.c - libFuzzer harness for the readers of data files: the input is a whole
 * HDF5 file, offered to every reader a command would point at a user's data file.
 *
 *   rows      nf_source_rows_load (nf fit, nf eval: /x, /context, /logp_true) and a few items fetched;
 *             nf_source_rows_open (rows read batch by batch) and the same items fetched
 *   images    nf_image_set_load (nf image fit|eval)
 *   videos    nf_video_set_load (nf video fit|eval)
 *   causal    nf_causal_load (nf causal fit|eval: /x, /a, /y and the truths when present)
 *   dependent nf_dep_load of /group (equi) and /K (kinship, dense or triplets) for the rows /x has,
 *             when they are few (a kinship structure is an n x n eigendecomposition)
 *
 * Data files come from other programs (h5py, MATLAB, R) as often as from nf, so unlike model files
 * they usually carry no checksums: a damaged or odd one reaches the readers' own checks.  Each reader
 * must load the file or return an error; a crash, leak, hang or huge allocation is a finding.
 */
#include "datasets/causal.h"
#include "datasets/dependent_load.h"
#include "datasets/images.h"
#include "datasets/source.h"
#include "datasets/videos.h"
#include "tests/fuzz/fuzz_util.h"

#include <string.h>

enum { FETCH = 4, DEP_MAX_ROWS = 256 };

/* Fetch the first and last items (at most FETCH of them) of a loaded source. */
static void fetch_some(const nf_source *s)
{
    size_t idx[FETCH];
    int k = 0;
    for (size_t i = 0; i < s->n && k < FETCH; i++, k++) idx[k] = k % 2 ? s->n - 1 - i / 2 : i / 2;
    nf_batch b;
    memset(&b, 0, sizeof b);
    if (k > 0) (void)nf_source_fetch(s, idx, k, &b);
    nf_batch_free(&b);
}

static void try_dependence(const char *path, nf_dep_kind kind, const char *dataset, size_t n)
{
    nf_dep_source src;
    memset(&src, 0, sizeof src);
    src.kind = kind;
    src.per_block = 1;
    snprintf(src.path, sizeof src.path, "%s", path);
    snprintf(src.dataset, sizeof src.dataset, "%s", dataset);
    nf_dep *d = NULL;
    if (nf_dep_load(&d, &src, n) == 0) nf_dep_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".h5");
    if (!path) return 0;

    size_t rows = 0;
    nf_source *s = NULL;
    if (nf_source_rows_load(&s, path, "/x", 0, 0, 1) == 0) {
        rows = s->n;
        fetch_some(s);
        nf_source_free(s);
    }
    s = NULL;
    if (nf_source_rows_open(&s, path, "/x", 0, 0, 1) == 0) {
        fetch_some(s);
        nf_source_free(s);
    }

    nf_image_set img;
    memset(&img, 0, sizeof img);
    (void)nf_image_set_load(path, &img);
    nf_image_set_free(&img);

    nf_video_set vid;
    memset(&vid, 0, sizeof vid);
    (void)nf_video_set_load(path, &vid);
    nf_video_set_free(&vid);

    nf_causal_data cd;
    memset(&cd, 0, sizeof cd);
    if (nf_causal_load(&cd, path, NULL, NULL, NULL) == 0) nf_causal_data_free(&cd);

    if (rows >= 2 && rows <= DEP_MAX_ROWS) {
        try_dependence(path, NF_DEP_EQUI, "/group", rows);
        try_dependence(path, NF_DEP_KINSHIP, "/K", rows);
    }
    return 0;
}
