/* The overhead floor: allreduce, alltoall and sendrecv timed the way commbench times them,
 * with nothing but C and MPI in the loop.
 *
 * Per iteration: MPI_Barrier, clock, op, clock (CLOCK_MONOTONIC, like Python's perf_counter);
 * an iteration's time is the max over ranks; the point's time is the median over iterations
 * (DESIGN.md section 4). float32 buffers, sizes rounded as commbench rounds them
 * (program.round_bytes): whole elements, and p equal chunks for alltoall. Like commbench's
 * BufferPool, one send and one receive buffer sized for the largest point serve every point,
 * 2 MiB-aligned with transparent huge pages advised (transport/mpi.py alloc) and touched
 * before timing, so both sides pay the same page and TLB costs.
 *
 *   mpirun -n 2 floor OP:BYTES:ITERS:WARMUP [OP:BYTES:ITERS:WARMUP ...]
 *
 * Rank 0 prints one JSON object per point, then the peak RSS of the largest rank.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

typedef struct {
    char op[32];
    int kind;
    long bytes;
    int iters, warmup;
} point;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int npoints = argc - 1;
    point *pts = calloc((size_t)npoints + 1, sizeof(point));
    long most = 4;
    for (int a = 0; a < npoints; a++) {
        point *pt = &pts[a];
        if (sscanf(argv[a + 1], "%31[^:]:%ld:%d:%d", pt->op, &pt->bytes, &pt->iters,
                   &pt->warmup) != 4 ||
            pt->iters < 1 || pt->warmup < 0 || pt->bytes < 1) {
            if (rank == 0) fprintf(stderr, "floor: bad point %s (OP:BYTES:ITERS:WARMUP)\n", argv[a + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        pt->kind = !strcmp(pt->op, "allreduce") ? 0 : !strcmp(pt->op, "alltoall") ? 1
                 : !strcmp(pt->op, "sendrecv") ? 2 : -1;
        if (pt->kind < 0) {
            if (rank == 0) fprintf(stderr, "floor: unknown op %s\n", pt->op);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long unit = 4L * (pt->kind == 1 ? size : 1);
        pt->bytes = pt->bytes / unit * unit;
        if (pt->bytes < unit) pt->bytes = unit;
        if (pt->bytes > most) most = pt->bytes;
    }
    float *send = alloc_buffer((size_t)most), *recv = alloc_buffer((size_t)most);
    if (!send || !recv) {
        fprintf(stderr, "floor: out of memory for %ld bytes\n", most);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int a = 0; a < npoints; a++) {
        const char *op = pts[a].op;
        int kind = pts[a].kind, iters = pts[a].iters, warmup = pts[a].warmup;
        long s = pts[a].bytes;
        int count = (int)(s / 4);
        double *t = malloc(sizeof(double) * (size_t)iters);
        double *tmax = malloc(sizeof(double) * (size_t)iters);
        int dest = (rank + 1) % size, source = (rank - 1 + size) % size;
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
            double med = median(tmax, iters); /* sorts tmax: tmax[0] is then the min */
            printf("{\"impl\": \"c\", \"op\": \"%s\", \"bytes\": %ld, \"ranks\": %d, "
                   "\"iters\": %d, \"warmup\": %d, \"time_us\": %.6f, \"time_min_us\": %.6f}\n",
                   op, s, size, iters, warmup, 1e6 * med, 1e6 * tmax[0]);
        }
        fflush(stdout);
        free(t);
        free(tmax);
    }
    free(send);
    free(recv);
    free(pts);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024.0, rss_max = 0;
    MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("{\"impl\": \"c\", \"maxrss_bytes\": %.0f}\n", rss_max);
    MPI_Finalize();
    return 0;
}
