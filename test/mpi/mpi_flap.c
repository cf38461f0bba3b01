/*
 * mpi_flap: MPI traffic across a link failure or a peer's death
 * (test/mpi/run-mpi-flap.sh, test/nodes/mpi.sh).
 *
 *   mpirun -np 2 mpi_flap SECONDS [heartbeat] [stall]
 *
 * Ranks 0 and 1 exchange checked 4 KiB messages (ping-pong, then a broadcast
 * from rank 0) for SECONDS (with more ranks, each pair 2k, 2k+1 its own
 * ping-pong, and the broadcast reaches all), with MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD so that
 * a failed call is seen here instead of aborting inside the library. Rank 0
 * prints "# mpi_flap: N round trips, longest gap G s, ..." and one of
 * "mpi_flap: completed" (exit 0) or "mpi_flap: error CLASS in CALL after T s"
 * (then MPI_Abort with code 3, so the job ends at once instead of hanging).
 * A wrong byte is "mpi_flap: bad data" (exit 4).
 *
 * heartbeat: while a rank waits for any request it also sends its peer a
 *   4 KiB heartbeat once a second and keeps one receive posted for the
 *   peer's. The fabric tells only a sender that its peer is gone (an RC send
 *   nobody acknowledges runs out of retries; a posted receive waits for ever,
 *   and ofi_rxm ties none to a connection), so this is how a rank that is
 *   only waiting to receive learns of a dead peer (fi_evd(7)).
 * stall: rank 1 stops replying after 50 round trips, says so
 *   ("# mpi_flap: rank 1 stops replying ...") and keeps its progress (and
 *   heartbeats) going, so rank 0 is left waiting in a receive: the case of a
 *   peer that dies while this rank only receives, made certain.
 *
 * MPI_FLAP_LOG=PATH: each rank also writes its "mpi_flap: error ..." line to
 * PATH.rankN itself, so a test can read it even when mpirun, which forwards
 * the ranks' output, does not forward it in time.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN 4096
#define DATA_TAG 1
#define REPLY_TAG 2
#define HEARTBEAT_TAG 3
#define STALL_AFTER 50

static int me, peer, heartbeats;
static double t0, hb_last = -1e9;
static uint8_t hb_out[LEN], hb_in[LEN];
static MPI_Request hb_send = MPI_REQUEST_NULL, hb_recv = MPI_REQUEST_NULL;

static void fill(uint8_t *b, long iter, int src)
{
    for (int i = 0; i < LEN; i++)
        b[i] = (uint8_t)(iter * 131 + i * 7 + src * 29);
}

/* A wrong byte in round trip ITER's message from SRC ends the job (exit 4). */
static void expect(const uint8_t *b, long iter, int src)
{
    for (int i = 0; i < LEN; i++)
        if (b[i] != (uint8_t)(iter * 131 + i * 7 + src * 29)) {
            printf("mpi_flap: bad data at round trip %ld\n", iter);
            fflush(stdout);
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
}

/* The error line to MPI_FLAP_LOG.rankN as well (see above). */
static void mirror(const char *line)
{
    const char *base = getenv("MPI_FLAP_LOG");
    char path[4096];
    FILE *f;
    if (!base || !*base || snprintf(path, sizeof path, "%s.rank%d", base, me) >= (int)sizeof path)
        return;
    if ((f = fopen(path, "a"))) {
        fputs(line, f);
        fclose(f);
    }
}

static void fail(const char *what, int err)
{
    char s[MPI_MAX_ERROR_STRING], line[MPI_MAX_ERROR_STRING + 256];
    int n = 0, cls = 0;
    MPI_Error_class(err, &cls);
    MPI_Error_string(err, s, &n);
    snprintf(line, sizeof line, "mpi_flap: error %d in %s after %.2f s on rank %d: %s\n", cls,
             what, MPI_Wtime() - t0, me, s);
    fputs(line, stdout);
    fflush(stdout);
    mirror(line);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* With heartbeats on: the peer's heartbeat received is reposted, and one is
 * sent when the last has completed and a second has passed. */
static void heartbeat(void)
{
    int done = 0, err;
    if (!heartbeats)
        return;
    if ((err = MPI_Test(&hb_recv, &done, MPI_STATUS_IGNORE)))
        fail("heartbeat MPI_Irecv", err);
    if (done && (err = MPI_Irecv(hb_in, LEN, MPI_BYTE, peer, HEARTBEAT_TAG, MPI_COMM_WORLD,
                                 &hb_recv)))
        fail("heartbeat MPI_Irecv", err);
    if ((err = MPI_Test(&hb_send, &done, MPI_STATUS_IGNORE)))
        fail("heartbeat MPI_Isend", err);
    double now = MPI_Wtime();
    if (done && now - hb_last >= 1.0) {
        hb_last = now;
        if ((err = MPI_Isend(hb_out, LEN, MPI_BYTE, peer, HEARTBEAT_TAG, MPI_COMM_WORLD,
                             &hb_send)))
            fail("heartbeat MPI_Isend", err);
    }
}

/* Waits for one request, heartbeats going meanwhile; WHAT names the call.
 * Between tests the rank sleeps 100 us: a rank that spins keeps its VM's
 * vCPU busy under emulation for nothing (every round trip here takes
 * milliseconds), and each MPI_Test still runs the library's progress. */
static void wait_for(MPI_Request *req, const char *what)
{
    const struct timespec pause = {0, 100000};
    for (;;) {
        int done = 0, err;
        if ((err = MPI_Test(req, &done, MPI_STATUS_IGNORE)))
            fail(what, err);
        if (done)
            return;
        heartbeat();
        nanosleep(&pause, NULL);
    }
}

static void transfer(int send, void *buf, int tag, const char *what)
{
    MPI_Request req;
    int err = send ? MPI_Isend(buf, LEN, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req)
                   : MPI_Irecv(buf, LEN, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    if (err)
        fail(what, err);
    wait_for(&req, what);
}

int main(int argc, char **argv)
{
    int n, stall = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    double secs = argc > 1 ? atof(argv[1]) : 20;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "heartbeat"))
            heartbeats = 1;
        else if (!strcmp(argv[i], "stall"))
            stall = 1;
        else {
            if (me == 0)
                printf("mpi_flap: unknown option %s (heartbeat, stall)\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (n % 2) {
        if (me == 0)
            printf("mpi_flap: %d ranks: the ranks pair up (0 with 1, 2 with 3, ...), so an even "
                   "number is needed\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    peer = me ^ 1;
    static uint8_t out[LEN], in[LEN];
    t0 = MPI_Wtime();
    double last = t0, gap = 0, gap_at = 0;
    long iter = 0;
    int go = 1;
    while (go) {
        if (me % 2 == 0) {  /* the first of its pair sends, its peer replies */
            fill(out, iter, 0);
            transfer(1, out, DATA_TAG, "MPI_Send");
            transfer(0, in, REPLY_TAG, "MPI_Recv");
            expect(in, iter, 1);
            double now = MPI_Wtime();
            if (now - last > gap) {
                gap = now - last;
                gap_at = last - t0;
            }
            last = now;
            go = now - t0 < secs;  /* rank 0's is the one broadcast */
            if (iter == 0 && me == 0) {
                printf("# mpi_flap: first round trip after %.2f s\n", now - t0);
                fflush(stdout);
            }
        } else {
            transfer(0, in, DATA_TAG, "MPI_Recv");
            expect(in, iter, 0);
            if (stall && me == 1 && iter == STALL_AFTER) {
                printf("# mpi_flap: rank 1 stops replying after %d round trips (%.2f s)\n",
                       STALL_AFTER, MPI_Wtime() - t0);
                fflush(stdout);
                const struct timespec pause = {0, 100000};
                for (;;) {
                    heartbeat();
                    nanosleep(&pause, NULL);
                }
            }
            fill(out, iter, 1);
            transfer(1, out, REPLY_TAG, "MPI_Send");
        }
        iter++;
        MPI_Request req;
        int err = MPI_Ibcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
        if (err)
            fail("MPI_Bcast", err);
        wait_for(&req, "MPI_Bcast");
    }
    if (me == 0) {
        printf("# mpi_flap: %ld round trips in %.1f s, longest gap %.2f s from %.2f s\n", iter,
               MPI_Wtime() - t0, gap, gap_at);
        printf("mpi_flap: completed\n");
    }
    if (heartbeats) {
        /* the peer's heartbeats still in flight are dropped at finalize */
        MPI_Cancel(&hb_recv);
        MPI_Wait(&hb_recv, MPI_STATUS_IGNORE);
        MPI_Wait(&hb_send, MPI_STATUS_IGNORE);
    }
    /* out before MPI_Finalize, which can itself hang (then the job is killed
     * and buffered output would be lost) */
    printf("# mpi_flap: rank %d: traffic done after %.1f s, finalizing\n", me, MPI_Wtime() - t0);
    fflush(stdout);
    MPI_Finalize();
    printf("# mpi_flap: rank %d: finalized\n", me);
    fflush(stdout);
    return 0;
}
