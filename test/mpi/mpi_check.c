/*
 * mpi_check: an end-to-end check of an MPI transport (here: Open MPI's cm PML
 * and ofi MTL over evd;ofi_rxm or verbs;ofi_rxm).
 *
 *   mpirun -np 2 mpi_check [-l LABEL] [-s]
 *
 * 1. Ping-pong between ranks 0 and 1 at 1 B, 64 B, 4 KiB, 64 KiB, 1 MiB and
 *    4 MiB, a few round trips each; every byte of every message is checked
 *    against a pattern that depends on the size, the iteration and the
 *    sending rank, and so is the received length.
 * 2. MPI_Allreduce (MPI_SUM of int64 vectors of 1, 1000, 65536 and 1 M
 *    elements, the 1000 one in place) on all ranks, checked exactly.
 * 3. Numbers: 8 B latency (half a round trip) and 1 MiB bandwidth (a stream
 *    of 1 MiB messages from rank 0 to rank 1, then checked as well).
 *
 * Rank 0 prints one TAP line per check, "ok - mpi: [LABEL: ]NAME" or
 * "not ok - mpi: [LABEL: ]NAME", then "# mpi: [LABEL: ]summary ...".
 * Exit status: 0 if every check passed, 1 otherwise (every rank).
 * -s: smoke mode, fewer iterations (for very slow machines).
 * -m BYTES: no message, allreduce vector or bandwidth message larger than
 *    BYTES (across emulated nodes, where a megabyte takes a second).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static const char *label = "";
static int nchecks, nfailed;

/* The byte at offset i of the message of (size, iter) sent by rank src. */
static uint8_t pattern(size_t i, size_t size, int iter, int src)
{
    uint32_t seed = (uint32_t)size * 2654435761u ^ (uint32_t)iter * 40503u ^ (uint32_t)src * 2246822519u;
    uint32_t h = ((uint32_t)i + seed) * 2654435761u;
    h ^= h >> 15;
    h ^= (uint32_t)(i >> 16) * 374761393u;
    return (uint8_t)(h >> 24 ^ h);
}

static void fill(uint8_t *buf, size_t size, int iter, int src)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(i, size, iter, src);
}

/* Number of wrong bytes; the first one is described in *first. */
static size_t verify(const uint8_t *buf, size_t size, int iter, int src, char *first, size_t firstlen)
{
    size_t bad = 0;
    for (size_t i = 0; i < size; i++) {
        uint8_t want = pattern(i, size, iter, src);
        if (buf[i] != want) {
            if (bad == 0)
                snprintf(first, firstlen, "offset %zu: got 0x%02x, want 0x%02x", i, buf[i], want);
            bad++;
        }
    }
    return bad;
}

/* Collective: the check passed if no rank saw an error. Rank 0 prints. */
static void report(const char *name, long local_errors, const char *detail)
{
    long total = 0;
    MPI_Allreduce(&local_errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    nchecks++;
    if (total != 0)
        nfailed++;
    if (rank == 0) {
        printf("%s - mpi: %s%s%s", total ? "not ok" : "ok", label, *label ? ": " : "", name);
        if (total)
            printf(" (%ld errors)", total);
        printf("\n");
        fflush(stdout);
    }
    if (detail && *detail) {
        /* Every rank may have something to say; stderr is not synchronised. */
        fprintf(stderr, "# mpi: rank %d: %s: %s\n", rank, name, detail);
        fflush(stderr);
    }
}

static const char *size_name(size_t size, char *out, size_t outlen)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(out, outlen, "%zu MiB", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(out, outlen, "%zu KiB", size >> 10);
    else
        snprintf(out, outlen, "%zu B", size);
    return out;
}

static void pingpong(uint8_t *sbuf, uint8_t *rbuf, size_t size, int iters)
{
    long errors = 0;
    char detail[256] = "";
    char sname[32], name[96];

    if (rank <= 1) {
        int peer = 1 - rank;
        for (int it = 0; it < iters; it++) {
            MPI_Status st;
            int count = -1;
            if (rank == 0) {
                fill(sbuf, size, it, 0);
                MPI_Send(sbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            }
            memset(rbuf, 0xa5, size);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if ((size_t)count != size || st.MPI_SOURCE != peer || st.MPI_TAG != it) {
                if (!errors)
                    snprintf(detail, sizeof detail, "iteration %d: count %d source %d tag %d", it, count,
                             st.MPI_SOURCE, st.MPI_TAG);
                errors++;
            }
            char first[128] = "";
            size_t bad = verify(rbuf, size, it, peer, first, sizeof first);
            if (bad) {
                if (!errors)
                    snprintf(detail, sizeof detail, "iteration %d: %zu bad bytes, first at %s", it, bad, first);
                errors += (long)bad;
            }
            if (rank == 1) {
                fill(sbuf, size, it, 1);
                MPI_Send(sbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            }
        }
    }
    snprintf(name, sizeof name, "pingpong %s x%d", size_name(size, sname, sizeof sname), iters);
    report(name, errors, detail);
}

static int64_t contribution(size_t i, int r)
{
    int64_t a = (int64_t)((uint64_t)i * 2654435761u % 1000000007u) - 500000000;
    return a * (r + 1) + ((int64_t)r << 40) - (int64_t)i;
}

static void allreduce(size_t n, int in_place)
{
    int64_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    long errors = 0;
    char detail[256] = "";
    char name[96];

    if (!in || !out) {
        fprintf(stderr, "# mpi: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < n; i++) {
        in[i] = contribution(i, rank);
        out[i] = in_place ? in[i] : -1;
    }
    MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, (int)n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0; i < n; i++) {
        int64_t want = 0;
        for (int r = 0; r < nranks; r++)
            want += contribution(i, r);
        if (out[i] != want) {
            if (!errors)
                snprintf(detail, sizeof detail, "element %zu: got %lld, want %lld", i, (long long)out[i],
                         (long long)want);
            errors++;
        }
    }
    snprintf(name, sizeof name, "allreduce sum int64 x%zu%s", n, in_place ? " (in place)" : "");
    report(name, errors, detail);
    free(in);
    free(out);
}

/* Half a round trip of 8 B messages, in microseconds (rank 0's view). */
static double latency(uint8_t *sbuf, uint8_t *rbuf, int iters, long *errors)
{
    const int warmup = 2;
    double t0 = 0;
    if (rank > 1)
        return 0;
    for (int it = 0; it < warmup + iters; it++) {
        if (it == warmup)
            t0 = MPI_Wtime();
        if (rank == 0) {
            fill(sbuf, 8, 1000 + it, 0);
            MPI_Send(sbuf, 8, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(rbuf, 8, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            char first[128];
            if (verify(rbuf, 8, 1000 + it, 1, first, sizeof first))
                (*errors)++;
        } else {
            MPI_Recv(rbuf, 8, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            char first[128];
            if (verify(rbuf, 8, 1000 + it, 0, first, sizeof first))
                (*errors)++;
            fill(sbuf, 8, 1000 + it, 1);
            MPI_Send(sbuf, 8, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

/* A stream of nmsg messages of size bytes from rank 0 to rank 1, window
 * `window`, then a 1 B acknowledgement; MB/s (10^6 B/s) on rank 0. */
static double bandwidth(uint8_t *sbuf, uint8_t *rbuf, size_t size, int nmsg, int window, long *errors)
{
    MPI_Request req[16];
    uint8_t ack = 0;
    double t0;
    if (rank > 1)
        return 0;
    if (window > 16)
        window = 16;
    if (rank == 0)
        for (int w = 0; w < window; w++)
            fill(sbuf + (size_t)w * size, size, 2000 + w, 0);
    t0 = MPI_Wtime();
    for (int m = 0; m < nmsg; m += window) {
        int k = nmsg - m < window ? nmsg - m : window;
        for (int w = 0; w < k; w++) {
            if (rank == 0)
                MPI_Isend(sbuf + (size_t)w * size, (int)size, MPI_BYTE, 1, 100 + w, MPI_COMM_WORLD, &req[w]);
            else
                MPI_Irecv(rbuf + (size_t)w * size, (int)size, MPI_BYTE, 0, 100 + w, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    }
    if (rank == 0)
        MPI_Recv(&ack, 1, MPI_BYTE, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
        MPI_Send(&ack, 1, MPI_BYTE, 0, 99, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0;
    if (rank == 1) {
        char first[128];
        int k = nmsg < window ? nmsg : window;
        for (int w = 0; w < k; w++)
            if (verify(rbuf + (size_t)w * size, size, 2000 + w, 0, first, sizeof first))
                (*errors)++;
    }
    return (double)size * nmsg / dt / 1e6;
}

int main(int argc, char **argv)
{
    int smoke = 0;
    size_t cap = (size_t)-1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-l") == 0 && a + 1 < argc)
            label = argv[++a];
        else if (strcmp(argv[a], "-s") == 0)
            smoke = 1;
        else if (strcmp(argv[a], "-m") == 0 && a + 1 < argc && atol(argv[a + 1]) > 0)
            cap = (size_t)atol(argv[++a]);
        else {
            if (rank == 0)
                fprintf(stderr, "usage: mpi_check [-l LABEL] [-s] [-m BYTES]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (nranks < 2) {
        if (rank == 0)
            printf("not ok - mpi: %s%sat least 2 ranks (got %d)\n", label, *label ? ": " : "", nranks);
        MPI_Finalize();
        return 1;
    }

    const size_t max = 4u << 20;
    const int window = 4;
    uint8_t *sbuf = malloc(max * window), *rbuf = malloc(max * window);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "# mpi: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(sbuf, 0, max * window);
    memset(rbuf, 0, max * window);

    static const size_t sizes[] = {1, 64, 4 << 10, 64 << 10, 1 << 20, 4 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t size = sizes[s];
        if (size > cap)
            break;
        int iters = size <= (64 << 10) ? 10 : size <= (1 << 20) ? 4 : 2;
        if (smoke)
            iters = iters > 2 ? 2 : iters;
        pingpong(sbuf, rbuf, size, iters);
    }

    static const size_t counts[] = {1, 1000, 65536, 1 << 20};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        if (counts[c] == 1 || counts[c] * sizeof(int64_t) <= cap)
            allreduce(counts[c], counts[c] == 1000);

    long lat_err = 0, bw_err = 0;
    int lat_iters = smoke ? 10 : 50, bw_msgs = smoke ? 4 : 8;
    double lat = latency(sbuf, rbuf, lat_iters, &lat_err);
    char name[96];
    snprintf(name, sizeof name, "latency 8 B x%d (data checked)", lat_iters);
    report(name, lat_err, lat_err ? "bad 8 B payload" : "");
    size_t bw_size = cap < (1u << 20) ? cap : (1u << 20);
    double bw = bandwidth(sbuf, rbuf, bw_size, bw_msgs, window, &bw_err);
    snprintf(name, sizeof name, "bandwidth stream %d x %zu B (data checked)", bw_msgs, bw_size);
    report(name, bw_err, bw_err ? "bad bandwidth payload" : "");

    if (rank == 0) {
        printf("# mpi: %s%ssummary: %d checks, %d failed, %d ranks; latency 8 B %.1f us (half round trip, %d "
               "iterations); bandwidth %zu B %.2f MB/s (%d messages, window %d)\n",
               label, *label ? ": " : "", nchecks, nfailed, nranks, lat, lat_iters, bw_size, bw, bw_msgs, window);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return nfailed ? 1 : 0;
}
