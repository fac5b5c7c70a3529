/* commbench's timed loop in C: the same barrier, clock, op, clock as transport/base.py's
 * Python loop, without the interpreter's per-call cost inside the timed region.
 *
 * Built lazily by commbench/transport/native.py with the mpicc of the MPI that mpi4py loaded
 * and called through ctypes. Communicator and datatype arrive as the addresses of mpi4py's
 * handle storage (MPI._addressof), so the same source works whatever the MPI's handle type.
 * The clock is CLOCK_MONOTONIC, the clock of Python's time.perf_counter on Linux.
 */
#include <mpi.h>
#include <stddef.h>
#include <time.h>

#define CB_ABI 4

enum {
    CB_ALLREDUCE = 1,
    CB_ALLGATHER = 2,
    CB_REDUCE_SCATTER = 3,
    CB_ALLTOALL = 4,
    CB_ALLTOALLV = 5,
    CB_BROADCAST = 6,
    CB_REDUCE = 7,
    CB_SENDRECV = 8,
    CB_PINGPONG = 9,
    CB_BARRIER = 10,
    CB_GATHER = 11,
    CB_SCATTER = 12,
    CB_ALLGATHERV = 13,
    CB_BW = 14,
    CB_BIBW = 15,
    CB_IALLREDUCE = 16,
};

#define CB_MAX_WINDOW 1024

/* Mirrors transport/native.py's OpDesc field by field. */
typedef struct {
    int kind;
    const void *comm;  /* address of an MPI_Comm */
    const void *dtype; /* address of an MPI_Datatype */
    void *send;
    void *recv;
    int count;  /* elements: the whole buffer, or per peer for allgather/alltoall/reduce_scatter */
    int root;   /* broadcast, reduce */
    int dest;   /* sendrecv (MPI_PROC_NULL allowed), pingpong peer */
    int source; /* sendrecv (MPI_PROC_NULL allowed) */
    int initiator; /* pingpong: sends first (from send, into recv: two buffers) */
    const int *scounts, *sdispls, *rcounts, *rdispls; /* alltoallv; allgatherv: rcounts, rdispls */
    int window;       /* bw, bibw: messages in flight per direction (osu_bw's window) */
    const double *compute_s; /* iallreduce: seconds of busy compute between start and wait */
    int ack; /* rooted ops: CB_ACK_* (ops/spec.py's ACKS), the acknowledgement after */
} cb_op;

enum { CB_ACK_NONE = 0, CB_ACK_TO_ROOT = 1, CB_ACK_FROM_ROOT = 2 };

static MPI_Request cb_requests[2 * CB_MAX_WINDOW + 1];

int cb_abi(void) { return CB_ABI; }

/* Proof that this library is the MPI mpi4py initialised (not a second copy): initialised,
 * and the world communicator handle mpi4py holds is this library's MPI_COMM_WORLD. */
int cb_same_mpi(const void *world) {
    int flag = 0;
    MPI_Initialized(&flag);
    return flag && *(const MPI_Comm *)world == MPI_COMM_WORLD;
}

static inline double cb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Stand-in for compute: spin (not sleep, which would hand the CPU to MPI), as osu_iallreduce. */
static void cb_compute(double seconds) {
    double until = cb_now() + seconds;
    while (cb_now() < until) {
    }
}

/* osu_bw / osu_bibw: `window` messages out (and in), then a 1-element ack back (osu_bw). */
static int cb_window(const cb_op *op, MPI_Comm comm, MPI_Datatype dt, int both) {
    int n = 0, rc, w = op->window, sender = op->initiator;
    if (w > CB_MAX_WINDOW) return -2;
    if (!sender || both) /* receives first, as osu_bw and osu_bibw post them */
        for (int i = 0; i < w; i++)
            if ((rc = MPI_Irecv(op->recv, op->count, dt, op->dest, 2, comm, &cb_requests[n++])))
                return rc;
    if (sender || both)
        for (int i = 0; i < w; i++)
            if ((rc = MPI_Isend(op->send, op->count, dt, op->dest, 2, comm, &cb_requests[n++])))
                return rc;
    if ((rc = MPI_Waitall(n, cb_requests, MPI_STATUSES_IGNORE))) return rc;
    if (both) return 0;
    if (sender) return MPI_Recv(op->recv, 1, dt, op->dest, 3, comm, MPI_STATUS_IGNORE);
    return MPI_Send(op->send, 1, dt, op->dest, 3, comm);
}

static inline int cb_run(const cb_op *op, MPI_Comm comm, MPI_Datatype dt) {
    switch (op->kind) {
    case CB_BARRIER:
        return MPI_Barrier(comm);
    case CB_GATHER:
        return MPI_Gather(op->send, op->count, dt, op->recv, op->count, dt, op->root, comm);
    case CB_SCATTER:
        return MPI_Scatter(op->send, op->count, dt, op->recv, op->count, dt, op->root, comm);
    case CB_ALLGATHERV:
        return MPI_Allgatherv(op->send, op->count, dt, op->recv, op->rcounts, op->rdispls, dt,
                              comm);
    case CB_BW:
        return cb_window(op, comm, dt, 0);
    case CB_BIBW:
        return cb_window(op, comm, dt, 1);
    case CB_IALLREDUCE: {
        MPI_Request req;
        int rc = MPI_Iallreduce(op->send, op->recv, op->count, dt, MPI_SUM, comm, &req);
        if (rc) return rc;
        if (op->compute_s && *op->compute_s > 0) cb_compute(*op->compute_s);
        return MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    case CB_ALLREDUCE:
        return MPI_Allreduce(op->send, op->recv, op->count, dt, MPI_SUM, comm);
    case CB_ALLGATHER:
        return MPI_Allgather(op->send, op->count, dt, op->recv, op->count, dt, comm);
    case CB_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(op->send, op->recv, op->count, dt, MPI_SUM, comm);
    case CB_ALLTOALL:
        return MPI_Alltoall(op->send, op->count, dt, op->recv, op->count, dt, comm);
    case CB_ALLTOALLV:
        return MPI_Alltoallv(op->send, op->scounts, op->sdispls, dt, op->recv, op->rcounts,
                             op->rdispls, dt, comm);
    case CB_BROADCAST:
        return MPI_Bcast(op->recv, op->count, dt, op->root, comm);
    case CB_REDUCE:
        return MPI_Reduce(op->send, op->recv, op->count, dt, MPI_SUM, op->root, comm);
    case CB_SENDRECV:
        return MPI_Sendrecv(op->send, op->count, dt, op->dest, 0, op->recv, op->count, dt,
                            op->source, 0, comm, MPI_STATUS_IGNORE);
    case CB_PINGPONG: {
        int rc;
        if (op->initiator) {
            rc = MPI_Send(op->send, op->count, dt, op->dest, 1, comm);
            return rc ? rc : MPI_Recv(op->recv, op->count, dt, op->dest, 1, comm,
                                      MPI_STATUS_IGNORE);
        }
        rc = MPI_Recv(op->recv, op->count, dt, op->dest, 1, comm, MPI_STATUS_IGNORE);
        return rc ? rc : MPI_Send(op->send, op->count, dt, op->dest, 1, comm);
    }
    default:
        return -1;
    }
}

/* The zero-byte acknowledgement after a rooted op (transport/base.py's `acknowledged`): to the
 * root from every other rank (broadcast), or from the root to every other rank (reduce). */
static int cb_ack(const cb_op *op, MPI_Comm comm) {
    int rank, size, rc = 0;
    if (op->ack == CB_ACK_NONE) return 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int waits = (op->ack == CB_ACK_TO_ROOT) == (rank == op->root);
    if (rank != op->root)
        return waits ? MPI_Recv(NULL, 0, MPI_BYTE, op->root, 4, comm, MPI_STATUS_IGNORE)
                     : MPI_Send(NULL, 0, MPI_BYTE, op->root, 4, comm);
    for (int q = 0; q < size && !rc; q++)
        if (q != rank)
            rc = waits ? MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, 4, comm, MPI_STATUS_IGNORE)
                       : MPI_Send(NULL, 0, MPI_BYTE, q, 4, comm);
    return rc;
}

static inline int cb_run_acked(const cb_op *op, MPI_Comm comm, MPI_Datatype dt) {
    int rc = cb_run(op, comm, dt);
    return rc ? rc : cb_ack(op, comm);
}

/* Off-cache (IMB -off_cache in spirit): read and write one byte per 64-byte line of a scratch
 * larger than the caches, evicting the op's buffers before an iteration. */
static void cb_flush(volatile unsigned char *scratch, size_t n) {
    for (size_t j = 0; j < n; j += 64) scratch[j]++;
}

/* Seconds per call into out[0..iters): per iteration [flush,] barrier, clock, op[, ack], clock;
 * pipelined: one barrier, iters calls back to back, the mean in every slot. Returns an MPI
 * error code (0 on success, -1 for an unknown kind). */
int cb_time_loop(const cb_op *op, int iters, int pipelined, double *out, unsigned char *flush,
                 size_t flush_bytes) {
    MPI_Comm comm = *(const MPI_Comm *)op->comm;
    MPI_Datatype dt = *(const MPI_Datatype *)op->dtype;
    int rc;
    if (pipelined) {
        if ((rc = MPI_Barrier(comm))) return rc;
        double t0 = cb_now();
        for (int i = 0; i < iters; i++)
            if ((rc = cb_run_acked(op, comm, dt))) return rc;
        double each = (cb_now() - t0) / iters;
        for (int i = 0; i < iters; i++) out[i] = each;
        return 0;
    }
    for (int i = 0; i < iters; i++) {
        if (flush) cb_flush(flush, flush_bytes);
        if ((rc = MPI_Barrier(comm))) return rc;
        double t0 = cb_now();
        rc = cb_run_acked(op, comm, dt);
        double t1 = cb_now();
        if (rc) return rc;
        out[i] = t1 - t0;
    }
    return 0;
}

/* One call, for the runner's checked call and other untimed uses. */
int cb_call(const cb_op *op) {
    return cb_run_acked(op, *(const MPI_Comm *)op->comm, *(const MPI_Datatype *)op->dtype);
}
