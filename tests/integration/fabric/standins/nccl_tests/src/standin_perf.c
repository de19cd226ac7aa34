/* STAND-IN for an nccl-tests *_perf program (tests only): runs no collective. Built with MPI it initialises
 * MPI and prints its rank and size, which shows the MPI wiring of the build is real. */
#include <stdio.h>
#ifdef MPI_SUPPORT
#include <mpi.h>
#endif

int main(int argc, char **argv) {
    int rank = 0, size = 1;
#ifdef MPI_SUPPORT
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
    printf("%s stand-in (nccl-tests source unreachable): rank %d of %d, NCCL_HOME=%s\n", PERF_NAME, rank, size,
           NCCL_HOME_DIR);
#ifdef MPI_SUPPORT
    MPI_Finalize();
#endif
    (void)argc;
    (void)argv;
    return 0;
}
