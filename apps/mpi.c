/* apps/mpi.c - data-parallel training over MPI (see mpi.h).  With NF_MPI the two sums of the trainer
 * are MPI_Allreduce(MPI_IN_PLACE, ..., MPI_SUM) on MPI_COMM_WORLD, in the model's real type. */
#include "apps/mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/commands.h"

#ifdef NF_MPI
#include <mpi.h>
#endif

static int started = 0, rank = 0, size = 1;
static nf_train_comm comm;

int app_mpi_launched(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

int app_mpi_refuse(const char *cmd)
{
    int k = app_mpi_launched();
    if (k <= 1) return 0;
    fprintf(stderr, "nf %s: runs in one process, but mpirun started %d (only training commands such as nf fit, "
                    "nf tpp fit and nf causal fit run across processes)\n", cmd, k);
    return 2;
}

#ifdef NF_MPI
static int sum_real(void *user, nf_real *buf, size_t n)
{
    (void)user;
    MPI_Datatype t = sizeof(nf_real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
    /* MPI counts are ints: sum in pieces of at most 2^30 entries */
    for (size_t at = 0; at < n; at += (size_t)1 << 30) {
        int k = (int)(n - at < ((size_t)1 << 30) ? n - at : ((size_t)1 << 30));
        if (MPI_Allreduce(MPI_IN_PLACE, buf + at, k, t, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return nf_error(NF_EIO, "MPI_Allreduce of %d values failed", k);
    }
    return NF_OK;
}

static int reduce_double(double *buf, size_t n, MPI_Op op)
{
    if (MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, op, MPI_COMM_WORLD) != MPI_SUCCESS)
        return nf_error(NF_EIO, "MPI_Allreduce of %zu values failed", n);
    return NF_OK;
}

static int sum_double(void *user, double *buf, size_t n)
{
    (void)user;
    return reduce_double(buf, n, MPI_SUM);
}

static int max_double(void *user, double *buf, size_t n)
{
    (void)user;
    return reduce_double(buf, n, MPI_MAX);
}
#endif

int app_mpi_start(const char *cmd)
{
    int k = app_mpi_launched();
    if (k <= 1 || started) return 0;
#ifdef NF_MPI
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        fprintf(stderr, "nf %s: MPI_Init failed under mpirun (%d processes)\n", cmd, k);
        return 1;
    }
    started = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    comm = (nf_train_comm){.rank = rank, .size = size, .sum_real = sum_real, .sum_double = sum_double,
                           .max_double = max_double};
    return 0;
#else
    fprintf(stderr, "nf %s: mpirun started %d processes, but this nf was built without MPI (install Open MPI, e.g. "
                    "apt-get install libopenmpi-dev openmpi-bin, and rebuild with make MPI=1)\n", cmd, k);
    return 2;
#endif
}

int app_mpi_rank(void) { return rank; }
int app_mpi_size(void) { return size; }
const nf_train_comm *app_mpi_comm(void) { return size > 1 ? &comm : NULL; }

int app_mpi_end(int status)
{
#ifdef NF_MPI
    if (!started) return status;
    started = 0;
    if (status != 0 && status != 130 && size > 1) {
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
    }
    MPI_Finalize();
#endif
    return status;
}

const char *app_mpi_library(void)
{
#ifdef NF_MPI
    static char name[64];
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
#ifdef OMPI_MAJOR_VERSION
    snprintf(name, sizeof name, "Open MPI %d.%d.%d (MPI %d.%d)", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
             OMPI_RELEASE_VERSION, major, minor);
#else
    snprintf(name, sizeof name, "MPI %d.%d", major, minor);
#endif
    return name;
#else
    return "none";
#endif
}
