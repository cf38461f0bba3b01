/*
 * mpi_flap: MPI traffic across a link failure (test/mpi/run-mpi-flap.sh).
 *
 *   mpirun -np 2 mpi_flap SECONDS
 *
 * Ranks 0 and 1 exchange checked 4 KiB messages (ping-pong) for SECONDS,
 * with MPI_ERRORS_RETURN on MPI_COMM_WORLD so that a failed call is seen here
 * instead of aborting inside the library. Rank 0 prints
 *   "# mpi_flap: N round trips, longest gap G s, ..." and one of
 *   "mpi_flap: completed" (exit 0) or "mpi_flap: error CLASS after T s" (then
 *   MPI_Abort with code 3, so the job ends at once instead of hanging).
 * A wrong byte is "mpi_flap: bad data" (exit 4).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 4096

static void fill(uint8_t *b, long iter, int src)
{
    for (int i = 0; i < LEN; i++)
        b[i] = (uint8_t)(iter * 131 + i * 7 + src * 29);
}

static int same(const uint8_t *b, long iter, int src)
{
    for (int i = 0; i < LEN; i++)
        if (b[i] != (uint8_t)(iter * 131 + i * 7 + src * 29))
            return 0;
    return 1;
}

static void fail(int rank, const char *what, int err, double t)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0, cls = 0;
    MPI_Error_class(err, &cls);
    MPI_Error_string(err, s, &n);
    printf("mpi_flap: error %d in %s after %.2f s on rank %d: %s\n", cls, what, t, rank, s);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    double secs = argc > 1 ? atof(argv[1]) : 20;
    static uint8_t out[LEN], in[LEN];
    double t0 = MPI_Wtime(), last = t0, gap = 0, gap_at = 0;
    long iter = 0;
    int go = 1;
    while (go) {
        int peer = rank ^ 1, err;
        if (rank == 0) {
            fill(out, iter, 0);
            if ((err = MPI_Send(out, LEN, MPI_BYTE, peer, 1, MPI_COMM_WORLD)))
                fail(rank, "MPI_Send", err, MPI_Wtime() - t0);
            if ((err = MPI_Recv(in, LEN, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE)))
                fail(rank, "MPI_Recv", err, MPI_Wtime() - t0);
            if (!same(in, iter, 1)) {
                printf("mpi_flap: bad data at round trip %ld\n", iter);
                MPI_Abort(MPI_COMM_WORLD, 4);
            }
            double now = MPI_Wtime();
            if (now - last > gap) {
                gap = now - last;
                gap_at = last - t0;
            }
            last = now;
            go = now - t0 < secs;
            if (iter == 0) {
                printf("# mpi_flap: first round trip after %.2f s\n", now - t0);
                fflush(stdout);
            }
        } else {
            if ((err = MPI_Recv(in, LEN, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)))
                fail(rank, "MPI_Recv", err, MPI_Wtime() - t0);
            if (!same(in, iter, 0)) {
                printf("mpi_flap: bad data at round trip %ld\n", iter);
                MPI_Abort(MPI_COMM_WORLD, 4);
            }
            fill(out, iter, 1);
            if ((err = MPI_Send(out, LEN, MPI_BYTE, peer, 2, MPI_COMM_WORLD)))
                fail(rank, "MPI_Send", err, MPI_Wtime() - t0);
        }
        iter++;
        if ((err = MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD)))
            fail(rank, "MPI_Bcast", err, MPI_Wtime() - t0);
    }
    if (rank == 0) {
        printf("# mpi_flap: %ld round trips in %.1f s, longest gap %.2f s from %.2f s\n", iter,
               MPI_Wtime() - t0, gap, gap_at);
        printf("mpi_flap: completed\n");
    }
    /* out before MPI_Finalize, which can itself hang (then the job is killed
     * and buffered output would be lost) */
    printf("# mpi_flap: rank %d: traffic done after %.1f s, finalizing\n", rank, MPI_Wtime() - t0);
    fflush(stdout);
    MPI_Finalize();
    printf("# mpi_flap: rank %d: finalized\n", rank);
    fflush(stdout);
    return 0;
}
