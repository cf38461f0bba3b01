/*
 * SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
 * mpi_bench: MPI latency and bandwidth between ranks 0 and 1, one reused
 * buffer per direction (as applications reuse theirs, so that a registration
 * cache below MPI can hit), from 1 B to 4 MiB.
 *
 *   mpirun -np 2 mpi_bench [-q]
 *
 * Latency: half the mean round trip of a blocking ping-pong. Bandwidth: rank
 * 0 streams windows of 16 non-blocking sends of the size, rank 1 answers
 * each window with a 4-byte ack; MB/s = bytes / time. Iterations fall with
 * the size so that every size takes about the same time. The first message
 * of each data set is checked (a registration that is stale would deliver
 * other bytes). Rank 0 prints "size lat_us bw_MBps" per size.
 * -q: fewer iterations.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4u << 20)
#define WINDOW 16

static int iters_for(size_t size, int quick)
{
    int n = size <= 4096 ? 2000 : size <= 65536 ? 400 : size <= (1u << 20) ? 60 : 20;
    return quick ? n / 10 + 1 : n;
}

static int check(const uint8_t *buf, size_t size, uint8_t seed)
{
    for (size_t i = 0; i < size; i++)
        if (buf[i] != (uint8_t)(seed + i * 13))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int rank, nranks, quick = argc > 1 && !strcmp(argv[1], "-q");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2) {
        if (!rank)
            fprintf(stderr, "mpi_bench: run with 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    uint8_t *sbuf = malloc(MAX_SIZE), *rbuf = malloc(MAX_SIZE);
    uint32_t ack = 0;
    int bad = 0;
    MPI_Request req[WINDOW];
    for (size_t size = 1; size <= MAX_SIZE; size *= 4) {
        int n = iters_for(size, quick);
        uint8_t seed = (uint8_t)(size * 7 + 1);
        for (size_t i = 0; i < size; i++)
            sbuf[i] = (uint8_t)(seed + i * 13);
        /* latency (the first exchange, checked, is not timed) */
        int peer = 1 - rank;
        memset(rbuf, 0, size);
        if (rank == 0) {
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
        bad += !check(rbuf, size, seed);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) {
            if (rank == 0) {
                MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
            }
        }
        double lat = (MPI_Wtime() - t0) / n / 2 * 1e6;
        /* bandwidth */
        int windows = n / 4 + 1;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int w = 0; w < windows; w++) {
            for (int k = 0; k < WINDOW; k++) {
                if (rank == 0)
                    MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &req[k]);
                else
                    MPI_Irecv(rbuf, (int)size, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &req[k]);
            }
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            if (rank == 0)
                MPI_Recv(&ack, 1, MPI_UINT32_T, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(&ack, 1, MPI_UINT32_T, 0, 4, MPI_COMM_WORLD);
        }
        double secs = MPI_Wtime() - t0;
        if (rank == 1)
            bad += !check(rbuf, size, seed);
        double mbps = (double)size * WINDOW * windows / secs / 1e6;
        if (rank == 0)
            printf("%zu %.2f %.1f\n", size, lat, mbps);
        fflush(stdout);
    }
    int all_bad = 0;
    MPI_Reduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all_bad)
        printf("# mpi_bench: %d sizes delivered wrong bytes\n", all_bad);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}
