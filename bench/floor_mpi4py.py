"""The bare mpi4py floor: allreduce, alltoall and sendrecv timed like commbench, in Python.

Per iteration: Barrier, perf_counter, op, perf_counter; max over ranks per iteration, median
over iterations. mpi4py defaults (thread level "multiple"), float32 numpy views of one send
and one receive buffer sized for the largest point, 2 MiB-aligned with huge pages advised (as
commbench and floor.c allocate), sizes rounded as commbench rounds them. Same arguments as
floor.c:

    mpirun -n 2 python bench/floor_mpi4py.py OP:BYTES:ITERS:WARMUP [...]
"""

from __future__ import annotations

import json
import mmap
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

HUGE = 2 << 20


def alloc(nbytes: int) -> np.ndarray:
    mm = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(mm, dtype=np.uint8)
    start = -raw.ctypes.data % HUGE
    out = raw[start : start + nbytes]
    out.fill(1)
    return out


def rounded(op: str, nbytes: int, p: int) -> int:
    unit = 4 * (p if op == "alltoall" else 1)
    return max(unit, nbytes // unit * unit)


def time_point(
    comm: MPI.Comm, op: str, s: int, iters: int, warmup: int, pool: tuple
) -> tuple[int, float, float]:
    p, r = comm.size, comm.rank
    send, recv = pool[0][:s].view(np.float32), pool[1][:s].view(np.float32)
    if op == "allreduce":
        call = lambda: comm.Allreduce(send, recv, MPI.SUM)  # noqa: E731
    elif op == "alltoall":
        call = lambda: comm.Alltoall(send, recv)  # noqa: E731
    elif op == "sendrecv":
        dest, source = (r + 1) % p, (r - 1) % p
        call = lambda: comm.Sendrecv(send, dest, 0, recv, source, 0)  # noqa: E731
    else:
        raise SystemExit(f"floor_mpi4py: unknown op {op}")
    barrier, clock = comm.Barrier, time.perf_counter
    out = np.empty(iters)
    for i in range(-warmup, iters):
        barrier()
        t0 = clock()
        call()
        t1 = clock()
        if i >= 0:
            out[i] = t1 - t0
    worst = np.empty(iters)
    comm.Reduce(out, worst, MPI.MAX, 0)
    return s, float(np.median(worst)) * 1e6, float(np.min(worst)) * 1e6


def main() -> None:
    comm = MPI.COMM_WORLD
    points = [p.split(":") for p in sys.argv[1:]]
    points = [(op, rounded(op, int(b), comm.size), int(i), int(w)) for op, b, i, w in points]
    most = max(s for _, s, _, _ in points)
    pool = (alloc(most), alloc(most))
    for op, nbytes, iters, warmup in points:
        s, t, tmin = time_point(comm, op, nbytes, iters, warmup, pool)
        if comm.rank == 0:
            rec = {"impl": "mpi4py", "op": op, "bytes": s, "ranks": comm.size}
            rec.update(iters=int(iters), time_us=t, time_min_us=tmin)
            print(json.dumps(rec), flush=True)
    rss = comm.reduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, MPI.MAX, 0)
    if comm.rank == 0:
        print(json.dumps({"impl": "mpi4py", "maxrss_bytes": rss}))


if __name__ == "__main__":
    main()
