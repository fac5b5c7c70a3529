"""An mpirun job for tests/test_heap.py: after commbench opens the MPI world, does the scratch
Open MPI's reduce_scatter mallocs per call stay in the heap once freed?

    mpirun -n 2 python tests/heap_job.py

Rank 0 (the root of reduce_scatter's basic linear reduce, whose temporaries are S each) prints
one JSON line: S, the free bytes the heap keeps after one call (glibc's mallinfo2 fordblks)
and the bytes still mmapped (hblkhd), and what meta.json would say of the policy.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np

from commbench.measure.launch import detect
from commbench.measure.transport import open_world
from commbench.measure.transport.heap import keep_scratch

S = 21845328  # bytes of float32 input: over the 128 KiB glibc mmaps by default


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def main() -> int:
    open_world("mpi", detect(), 60.0)
    from commbench.measure.transport.mpi import MPI

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    comm = MPI.COMM_WORLD
    send = np.ones(S // 4, dtype=np.float32)
    recv = np.empty(S // 4 // comm.size, dtype=np.float32)
    comm.Reduce_scatter_block(send, recv, op=MPI.SUM)
    info = libc.mallinfo2()
    if comm.rank == 0:
        print(json.dumps({"bytes": S, "fordblks": info.fordblks, "hblkhd": info.hblkhd,
                          "heap": keep_scratch()}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
