/* The overhead floor: allreduce, alltoall and sendrecv timed the way commbench times them,
 * with nothing but C and MPI in the loop.
 *
 * Per iteration: MPI_Barrier, clock, op, clock (CLOCK_MONOTONIC, like Python's perf_counter);
 * an iteration's time is the max over ranks; the point's time is the median over iterations
 * (docs/design.md, "Timing"). float32 buffers, sizes rounded as commbench rounds them
 * (program.round_bytes): whole elements, and p equal chunks for alltoall. Like commbench's
 * BufferPool, one send and one receive buffer sized for the largest point serve every point,
 * 2 MiB-aligned with transparent huge pages advised (transport/mpi.py alloc) and touched
 * before timing, so both sides pay the same page and TLB costs.
 *
 * As a program:
 *   mpirun -n 2 floor OP:BYTES:ITERS:WARMUP [OP:BYTES:ITERS:WARMUP ...]
 * rank 0 prints one JSON object per point, then the peak RSS of the largest rank.
 * Built with -DFLOOR_LIBRARY -shared it exports floor_reserve/floor_point instead, so
 * bench/overhead_job.py can interleave it with commbench inside one MPI job.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* As commbench's MPICommunicator.alloc: 2 MiB-aligned, huge pages advised; then touched. */
static void *alloc_buffer(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    memset(p, 1, bytes);
    return p;
}

static float *pool_send, *pool_recv;
static long pool_bytes;

/* -1 for an unknown op name. */
int floor_kind(const char *op) {
    return !strcmp(op, "allreduce") ? 0 : !strcmp(op, "alltoall") ? 1
         : !strcmp(op, "sendrecv") ? 2 : -1;
}

/* S as commbench rounds it: whole float32 elements, p equal chunks for alltoall. */
long floor_round(int kind, long nbytes, int size) {
    long unit = 4L * (kind == 1 ? size : 1);
    long s = nbytes / unit * unit;
    return s < unit ? unit : s;
}

/* Allocate the two buffers for points up to `most` bytes (once; 0 on success). */
int floor_reserve(long most) {
    if (most <= pool_bytes) return 0;
    free(pool_send);
    free(pool_recv);
    pool_send = alloc_buffer((size_t)most);
    pool_recv = alloc_buffer((size_t)most);
    pool_bytes = (pool_send && pool_recv) ? most : 0;
    return pool_bytes ? 0 : 1;
}

/* Time one point on MPI_COMM_WORLD (collective). On rank 0, *med and *min get the median and
 * minimum over iterations of the max over ranks, in seconds. Returns S, or -1 on bad input. */
long floor_point(int kind, long nbytes, int iters, int warmup, double *med, double *min) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long s = floor_round(kind, nbytes, size);
    if (kind < 0 || iters < 1 || warmup < 0 || floor_reserve(s)) return -1;
    int count = (int)(s / 4);
    int dest = (rank + 1) % size, source = (rank - 1 + size) % size;
    float *send = pool_send, *recv = pool_recv;
    double *t = malloc(sizeof(double) * (size_t)iters);
    double *tmax = malloc(sizeof(double) * (size_t)iters);
    for (int i = -warmup; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        if (kind == 0)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (kind == 1)
            MPI_Alltoall(send, count / size, MPI_FLOAT, recv, count / size, MPI_FLOAT,
                         MPI_COMM_WORLD);
        else
            MPI_Sendrecv(send, count, MPI_FLOAT, dest, 0, recv, count, MPI_FLOAT, source, 0,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t1 = now();
        if (i >= 0) t[i] = t1 - t0;
    }
    MPI_Reduce(t, tmax, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        *med = median(tmax, iters); /* sorts tmax: tmax[0] is then the minimum */
        *min = tmax[0];
    }
    free(t);
    free(tmax);
    return s;
}

#ifndef FLOOR_LIBRARY
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = argc - 1, *kinds = calloc((size_t)n + 1, sizeof(int));
    int *iters = calloc((size_t)n + 1, sizeof(int)), *warmups = calloc((size_t)n + 1, sizeof(int));
    long *bytes = calloc((size_t)n + 1, sizeof(long)), most = 4;
    char op[32];
    for (int a = 0; a < n; a++) {
        if (sscanf(argv[a + 1], "%31[^:]:%ld:%d:%d", op, &bytes[a], &iters[a], &warmups[a]) != 4 ||
            (kinds[a] = floor_kind(op)) < 0 || iters[a] < 1 || warmups[a] < 0 || bytes[a] < 1) {
            if (rank == 0) fprintf(stderr, "floor: bad point %s (OP:BYTES:ITERS:WARMUP)\n", argv[a + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long s = floor_round(kinds[a], bytes[a], size);
        if (s > most) most = s;
    }
    if (floor_reserve(most)) {
        fprintf(stderr, "floor: out of memory for %ld bytes\n", most);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int a = 0; a < n; a++) {
        double med = 0, min = 0;
        long s = floor_point(kinds[a], bytes[a], iters[a], warmups[a], &med, &min);
        sscanf(argv[a + 1], "%31[^:]", op);
        if (rank == 0)
            printf("{\"impl\": \"c\", \"op\": \"%s\", \"bytes\": %ld, \"ranks\": %d, "
                   "\"iters\": %d, \"warmup\": %d, \"time_us\": %.6f, \"time_min_us\": %.6f}\n",
                   op, s, size, iters[a], warmups[a], 1e6 * med, 1e6 * min);
        fflush(stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024.0, rss_max = 0;
    MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"impl\": \"c\", \"maxrss_bytes\": %.0f}\n", rss_max);
    MPI_Finalize();
    return 0;
}
#endif
