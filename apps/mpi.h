/* apps/mpi.h - the processes of `mpirun -np K nf fit ...`: data-parallel training over MPI.
 *
 * The library has no MPI in it: the trainer takes a communicator of two sums (nf_train_comm in
 * training/trainer.h), and this file gives it one over MPI_COMM_WORLD when nf was built with Open
 * MPI (the Makefile builds it so when mpicc is found; NF_MPI).  A training command calls
 * app_mpi_start() first: launched by mpirun with K > 1 processes it initialises MPI (or, in a build
 * without MPI, refuses with a line saying how to get one); launched alone it does nothing, so the
 * same binary runs with and without mpirun.  Other commands call app_mpi_refuse(): they are one
 * process's work and would otherwise run K times over the same files.
 */
#ifndef NF_APPS_MPI_H
#define NF_APPS_MPI_H

#include "training/trainer.h"

/* Processes the launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE), 1 when not under mpirun. */
int app_mpi_launched(void);
/* Join the other processes (MPI_Init) when launched with more than one; returns 0, or the exit
 * status after printing "nf CMD: ..." (a build without MPI). */
int app_mpi_start(const char *cmd);
/* 0 if this command may run: one process, or it prints why not and returns 2. */
int app_mpi_refuse(const char *cmd);
int app_mpi_rank(void);
int app_mpi_size(void);
/* The trainer's communicator; NULL for one process. */
const nf_train_comm *app_mpi_comm(void);
/* End of a training command: MPI_Finalize, or MPI_Abort of every process when this one failed
 * (the others would wait for it for ever).  Returns status. */
int app_mpi_end(int status);
/* "Open MPI 4.1.4" (the library nf runs with), or "none" in a build without MPI. */
const char *app_mpi_library(void);

#endif
