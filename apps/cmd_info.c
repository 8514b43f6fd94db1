/* apps/cmd_info.c - nf info: what a model file holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"
#include "apps/flags.h"
#include "core/h5.h"
#include "distributions/target.h"
#include "training/model_file.h"

static const char *const INFO_HELP =
    "usage: nf info MODEL.h5\n"
    "\n"
    "Show a model file: its kind, its flow spec, dimensions and parameter count, the data (or the\n"
    "target density) it was fit to, the training settings, and a summary of the training history.\n"
    "\n"
    "example:\n"
    "  nf info model.h5\n";

static void print_history(nf_h5 *f)
{
    double *ll = NULL, *val = NULL, *ep = NULL, *sec = NULL;
    int64_t *step = NULL;
    size_t n = 0, c;
    if (nf_h5_read_int64(f, "/training/checkpoint/history/step", &step, &n, &c) != NF_OK ||
        nf_h5_read_double(f, "/training/checkpoint/history/train_log_likelihood", &ll, &n, &c) != NF_OK ||
        nf_h5_read_double(f, "/training/checkpoint/history/val_log_likelihood", &val, &n, &c) != NF_OK ||
        nf_h5_read_double(f, "/training/checkpoint/history/epoch", &ep, &n, &c) != NF_OK ||
        nf_h5_read_double(f, "/training/checkpoint/history/seconds", &sec, &n, &c) != NF_OK) {
        printf("history         none\n");
    } else if (n == 0) {
        printf("history         no evaluations yet\n");
    } else {
        printf("history         %zu evaluations; last: step %lld, epoch %.2f, %.1f s\n", n, (long long)step[n - 1],
               ep[n - 1], sec[n - 1]);
        printf("   %8s %8s %12s %12s\n", "step", "epoch", "train ll", "val ll");
        size_t show = n < 8 ? n : 8;
        for (size_t k = 0; k < show; k++) {
            size_t i = n <= 8 ? k : (k * (n - 1)) / (show - 1);
            printf("   %8lld %8.2f %12.4f %12.4f\n", (long long)step[i], ep[i], ll[i], val[i]);
        }
    }
    free(step);
    free(ll);
    free(val);
    free(ep);
    free(sec);
}

int nf_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    const flag_spec none[] = {{0}};
    const flags_cmd c = {.cmd = "info", .help = INFO_HELP, .flags = none, .max_pos = 1};
    int urc = flags_parse(&c, argc, argv, &path, NULL);
    if (urc != FLAGS_OK) return urc == FLAGS_HELP ? 0 : 2;
    if (!path) return cli_usage_error("info", "no model file given (expected: nf info MODEL.h5)");
    nf_model *model;
    nf_model_meta meta;
    if (nf_model_open(path, &model, &meta) != NF_OK) return cli_fail("info");
    nf_h5 *f;
    if (nf_h5_open(&f, path, NF_MODEL_FORMAT, NF_MODEL_VERSION) != NF_OK) {
        nf_model_free(model);
        return cli_fail("info");
    }
    char version[64] = "?";
    nf_h5_attr_get_string(f, "/", "nf_version", version, sizeof version);
    printf("model           %s (nf-model v%d, written by nf %s)\n", path, nf_h5_format_version(f), version);
    printf("kind            %s: %s (%s)\n", model->type->kind, model->type->summary, model->type->command);
    if (meta.preset[0]) printf("preset          %s\n", meta.preset);
    const nf_flow *flow = model->flow;
    if (flow) {
        printf("flow spec       %s\n", flow->spec);
        printf("bijectors       %d on a %s base\n", flow->nb, flow->base.type->name);
        printf("dimension       %d", flow->dim);
        if (flow->ctx_dim) printf(" (conditional on %d context values)", flow->ctx_dim);
        printf("\n");
    }
    const nf_target *target = nf_model_variational_target(model);
    if (target) {
        printf("target          %s%s%s%s (%s)", target->type->name, target->options[0] ? "(" : "", target->options,
               target->options[0] ? ")" : "", target->type->summary);
        if (isfinite(target->log_z)) printf("; log Z = %.6f", target->log_z);
        printf("\n");
    }
    printf("parameters      %zu trainable, %zu state values\n", model->P->n, model->S->n);
    if (meta.data_path[0]) {
        printf("data            %s:%s (%ld training samples", meta.data_path, meta.data_dataset, meta.n_train);
        if (meta.val_path[0]) printf(", validation file %s with %ld", meta.val_path, meta.n_val);
        else printf(", %ld held out for validation (%.0f%%)", meta.n_val, 100 * meta.val_frac);
        printf(")\n");
    }
    if (nf_h5_exists(f, "/training")) {
        char opt[32] = "", sched[32] = "", reason[128] = "";
        double lr = 0, batch = 0, steps = 0, epochs = 0, seed = 0, bstep = -1, bval = NAN, step = 0;
        nf_h5_attr_get_string(f, "/training", "optimizer", opt, sizeof opt);
        nf_h5_attr_get_string(f, "/training", "schedule", sched, sizeof sched);
        nf_h5_attr_get_string(f, "/training", "stop_reason", reason, sizeof reason);
        nf_h5_attr_get_double(f, "/training", "lr", &lr);
        nf_h5_attr_get_double(f, "/training", "batch", &batch);
        nf_h5_attr_get_double(f, "/training", "max_steps", &steps);
        nf_h5_attr_get_double(f, "/training", "epochs", &epochs);
        nf_h5_attr_get_double(f, "/training", "seed", &seed);
        nf_h5_attr_get_double(f, "/training/checkpoint", "step", &step);
        nf_h5_attr_get_double(f, "/training/checkpoint", "best_step", &bstep);
        nf_h5_attr_get_double(f, "/training/checkpoint", "best_val", &bval);
        printf("training        %s, lr %g (%s schedule), batch %.0f, seed %.0f, limit %.0f steps%s\n", opt, lr, sched,
               batch, seed, steps, epochs > 0 ? " or epochs" : "");
        printf("progress        step %.0f; %s\n", step, reason[0] ? reason : "not finished (resume with nf fit --resume)");
        if (bstep >= 0 && isfinite(bval)) printf("best validation %.5f nats (step %.0f)\n", bval, bstep);
        print_history(f);
    }
    nf_error_clear();
    nf_h5_close(f);
    nf_model_free(model);
    return 0;
}
