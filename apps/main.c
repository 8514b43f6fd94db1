/* apps/main.c - the nf command: dispatch to one subcommand per file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "apps/commands.h"
#include "apps/mpi.h"
#include "core/blas.h"
#include "core/error.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"data", nf_cmd_data, "make built-in datasets, import CSV/NPY/PNG, split into train/val/test, show images"},
    {"fit", nf_cmd_fit, "fit a flow to a data file (checkpoints, resume)"},
    {"eval", nf_cmd_eval, "mean log-likelihood, bits/dim and the gap to the true density"},
    {"logprob", nf_cmd_logprob, "log-density of every sample, to a file"},
    {"sample", nf_cmd_sample, "draw samples from a model"},
    {"info", nf_cmd_info, "show what a model file holds"},
    {"plot", nf_cmd_plot, "pictures: data, density and samples; pair plots; training history"},
    {"tpp", nf_cmd_tpp, "temporal point processes: import event sequences, fit, evaluate"},
    {"causal", nf_cmd_causal, "interventional densities of potential outcomes: import, fit, density, sample, eval"},
    {"image", nf_cmd_image, "flows on images (Glow, RealNVP, TarFlow): fit, bits/dim, sample grids, classify"},
    {"video", nf_cmd_video, "latent video flows (STARFlow-V style): fit, bits/dim, sample GIFs, continue videos"},
    {NULL, NULL, NULL},
};

static void usage(FILE *out)
{
    fprintf(out,
            "nf %s - normalizing flows: fit densities, evaluate, sample, plot\n\n"
            "usage: nf COMMAND [options]      (nf COMMAND --help for its options)\n\n"
            "commands:\n",
            NF_VERSION);
    for (const command *c = commands; c->name; c++) fprintf(out, "  %-9s %s\n", c->name, c->summary);
    fprintf(out, "\nexample:\n"
                 "  nf data make checkerboard -n 50000 -o train.h5\n"
                 "  nf fit train.h5 -o model.h5\n"
                 "  nf data make checkerboard -n 20000 --seed 2 -o test.h5\n"
                 "  nf eval model.h5 test.h5\n"
                 "  nf sample model.h5 -n 1000 -o samples.h5\n"
                 "  nf plot model.h5 --data test.h5 -o density.png\n"
                 "\nenvironment:\n"
                 "  OMP_WAIT_POLICY   nf sets PASSIVE (idle threads sleep) and runs itself again once;\n"
                 "                    a value you set is kept\n"
                 "  NF_NO_REEXEC=1    do not run again (for debuggers and profilers; nf skips it by itself\n"
                 "                    under valgrind)\n");
}

/* OpenMP threads that spin while OpenBLAS's own threads work fight over the cores: on two busy
 * cores a spinning wait policy made training 4x slower.  libgomp reads OMP_WAIT_POLICY only when it
 * loads, so set it and run ourselves again once (the user's own setting always wins).  Not under
 * valgrind (its preloaded library is in LD_PRELOAD): the exec would leave the tool's control, and
 * NF_NO_REEXEC=1 turns the re-exec off for any other tool that cannot follow it (gdb, perf). */
static void prefer_passive_waiting(char **argv)
{
    const char *pre = getenv("LD_PRELOAD");
    if (getenv("OMP_WAIT_POLICY") || getenv("NF_NO_REEXEC")) return;
    if (pre && (strstr(pre, "vgpreload") || strstr(pre, "valgrind"))) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("NF_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}

/* glibc serves blocks above a threshold with their own mappings, returned to the system on free,
 * but after the first such free it raises the threshold to that block's size: the next blocks of a
 * few MB (a data split's permutation, an initialisation pass's copies) then come from the heap and
 * stay resident after free.  A fixed threshold keeps every large block returnable, so peak memory
 * is what is live at once (nf fit on 32 MB of data: 88 -> 77 MB). */
static void return_large_blocks(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

int main(int argc, char **argv)
{
    prefer_passive_waiting(argv);
    return_large_blocks();
    if (argc < 2 || cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    /* NF_KERNEL picks the matrix kernel (core/blas.h); a misspelt value would silently do nothing */
    const char *kernel = getenv("NF_KERNEL");
    if (kernel && *kernel && strcmp(kernel, "native") && strcmp(kernel, "blas") && strcmp(kernel, "openblas")) {
        fprintf(stderr, "nf: NF_KERNEL='%s': expected 'native' (the default: AVX-512 where the CPU has it) or 'blas'\n",
                kernel);
        return 2;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("nf %s (%s build; matrix kernel: %s; MPI: %s)\n", NF_VERSION, NF_REAL_NAME, nf_blas_kernel_name(),
               app_mpi_library());
        return 0;
    }
    /* under mpirun only the training commands run (each checks its subcommand: nf tpp fit, nf causal fit) */
    if (strcmp(argv[1], "fit") && strcmp(argv[1], "tpp") && strcmp(argv[1], "causal") && strcmp(argv[1], "image") &&
        strcmp(argv[1], "video") &&
        app_mpi_refuse(argv[1]))
        return 2;
    for (const command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name)) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "nf: unknown command '%s' (run 'nf --help' for the list)\n", argv[1]);
    return 2;
}
