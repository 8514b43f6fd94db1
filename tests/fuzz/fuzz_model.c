/* tests/fuzz/fuzz_model.c - libFuzzer harness for loading model files (training/model_file.c,
 * core/h5.c, core/params_h5.c, the trainer's checkpoint reader): the input is the whole HDF5 file.
 * A model that loads is also evaluated on a few points, so damage that passes the checks but
 * makes the flow compute garbage shows as a sanitizer report. */
#include <string.h>

#include "core/rng.h"
#include "tests/fuzz/fuzz_util.h"
#include "training/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".h5");
    if (!path) return 0;
    nf_model *m = NULL;
    nf_model_meta meta;
    if (nf_model_open(path, &m, &meta) == 0) {
        if (m->flow && m->flow->dim > 0 && m->flow->dim <= 64 && m->flow->ctx_dim == 0) {
            nf_real x[4 * 64], lp[4];
            for (int i = 0; i < 4 * m->flow->dim; i++) x[i] = (nf_real)(0.37 * (i % 7) - 1.1);
            nf_flow_log_prob(m->flow, lp, x, NULL, NULL, 4);
        }
        nf_model_free(m);
    }
    nf_train_config c;
    nf_model_load_train_config(path, &c);
    return 0;
}
