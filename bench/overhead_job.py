"""One MPI job that interleaves the floors with commbench, block by block (run by overhead.py).

    mpirun -n N python bench/overhead_job.py LIBFLOOR --ops allreduce --sizes 8 --iters 200 \
        --blocks 5

For every point and block, in an order that rotates per block, rank 0 prints one JSON line per
implementation: the C floor (floor.c built as a library, called through ctypes: the loop is
pure C), the bare mpi4py loop (floor_mpi4py.time_point), and commbench's Runner.measure (the
code path of `commbench run`: bind, exact check, probe, warmup, timed loop, max over ranks,
median) with the native loop and with the Python loop. Interleaving in one job puts every
implementation on the same processes and cores at nearly the same moment, so other load on a
shared machine falls on all of them alike.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

from commbench.measure.runner import Runner, TimingConfig
from commbench.measure.transport import native
from commbench.measure.transport.mpi import MPI, MPICommunicator
from commbench.ops import round_bytes

# commbench first: it initialises MPI (thread level "serialized") before the floor imports it
from commbench.traffic.layout import sweep_mesh
from commbench.traffic.program import Step

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor_mpi4py  # noqa: E402

IMPLS = ("c", "mpi4py", "native", "python")
KINDS = {"allreduce": 0, "alltoall": 1, "sendrecv": 2}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("libfloor")
    ap.add_argument("--ops", default="allreduce,alltoall,sendrecv")
    ap.add_argument("--sizes", default="8,65536,4194304")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=5)
    args = ap.parse_args()
    ops, sizes = args.ops.split(","), [int(s) for s in args.sizes.split(",")]
    comm = MPI.COMM_WORLD
    p = comm.size

    lib = ctypes.CDLL(args.libfloor)
    lib.floor_point.restype = ctypes.c_long
    lib.floor_point.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    lib.floor_point.argtypes += [ctypes.POINTER(ctypes.c_double)] * 2
    med, low = ctypes.c_double(), ctypes.c_double()

    steps = {(op, s): Step(op=op, nbytes=round_bytes(op, s, p, "float32"), dtype="float32")
             for op in ops for s in sizes}  # fmt: skip
    most = max(st.nbytes for st in steps.values())
    info = sweep_mesh(p, p).info("group")
    world = MPICommunicator.world()
    assert world.timing_info()["loop"] == "native", world.timing_info()
    plain = MPICommunicator(comm, world.ranks, None, native.Availability("python", "bench"))
    cfg = TimingConfig(iters=args.iters, warmup=args.warmup)
    runners = {"native": Runner(world, cfg), "python": Runner(plain, cfg)}
    for runner in runners.values():
        runner.reserve([(st, info) for st in steps.values()])
    pool = (floor_mpi4py.alloc(most), floor_mpi4py.alloc(most))
    lib.floor_reserve(ctypes.c_long(most))

    def run(impl: str, op: str, size: int) -> tuple[int, float, float]:
        """(bytes, median us, min us) of one block; meaningful on rank 0."""
        step = steps[(op, size)]
        if impl == "c":
            s = lib.floor_point(KINDS[op], size, args.iters, args.warmup, med, low)
            assert s > 0
            return s, med.value * 1e6, low.value * 1e6
        if impl == "mpi4py":
            return floor_mpi4py.time_point(comm, op, step.nbytes, args.iters, args.warmup, pool)
        rec = runners[impl].measure(step, info)
        if rec is None:
            return step.nbytes, 0.0, 0.0
        assert rec.wrong == 0 and rec.loop == impl, rec
        return rec.bytes, rec.time_us, rec.time_min_us

    for op in ops:
        for size in sizes:
            for block in range(args.blocks):
                k = block % len(IMPLS)
                for impl in IMPLS[k:] + IMPLS[:k]:
                    nbytes, t, tmin = run(impl, op, size)
                    if comm.rank == 0:
                        out = {"impl": impl, "op": op, "size": size, "bytes": nbytes, "ranks": p}
                        out.update(block=block, time_us=t, time_min_us=tmin)
                        print(json.dumps(out), flush=True)
    for runner in runners.values():
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
