/* bench/mpi_allreduce.c - the communication of one data-parallel step of nf fit: MPI_Allreduce in
 * place of N floats (the gradient buffer) and of 2 doubles (loss and weight) plus the 2 doubles of
 * the stop/time agreement, as the trainer does them.  Prints one JSON line (rank 0): N, processes,
 * microseconds per step (median of 7 blocks of R steps).
 * Usage: mpirun -np K bench/out/bin/mpi_allreduce N [R] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long n = argc > 1 ? atol(argv[1]) : 100000, reps = argc > 2 ? atol(argv[2]) : 200;
    float *g = calloc((size_t)n, sizeof *g);
    double small[2] = {1, 1}, agree[2] = {0, 0}, t[7];
    for (long i = 0; i < n; i++) g[i] = (float)(i % 7) * 1e-3f;
    for (int blk = -1; blk < 7; blk++) { /* block -1 warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long r = 0; r < reps; r++) {
            MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, small, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        double dt = (MPI_Wtime() - t0) / reps;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (blk >= 0) t[blk] = dt;
    }
    qsort(t, 7, sizeof t[0], cmp);
    if (rank == 0)
        printf("{\"params\": %ld, \"processes\": %d, \"bytes\": %ld, \"us_per_step\": %.2f}\n", n, size, 4 * n, t[3] * 1e6);
    free(g);
    MPI_Finalize();
    return 0;
}
