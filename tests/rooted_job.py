"""An mpirun job for tests/test_rooted_timing.py: a rooted op's 8 B time with and without its
acknowledgement, beside the send/recv latency of the same ranks.

    mpirun -n 4 python tests/rooted_job.py broadcast per-iteration

Binds the op through the seam (the acknowledged form the runner times) and, for the old form,
the bare transport call the binding wraps; sendrecv (a ring, the fitter's latency reference)
on the same world. The three are timed in turn for ROUNDS rounds, each time the median over
iterations of the max over ranks, as the runner reduces a point; rank 0 prints one JSON line
of the medians over rounds (us), after checking the acknowledged call's data exactly.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from commbench.measure.bind import BufferPool, bind
from commbench.measure.transport.mpi import MPICommunicator
from commbench.traffic.program import Step

NBYTES, ITERS, ROUNDS = 8, 300, 5


def timed(world: MPICommunicator, fn, mode: str) -> float:
    """The runner's statistic: median over iterations of the max over ranks (us)."""
    fn()  # warm
    times = world.time_loop(fn, ITERS, mode)
    per_iter = np.max(np.vstack(world.allgather_obj(times)), axis=0)
    return float(np.median(per_iter)) * 1e6


def main(op: str, mode: str) -> int:
    world = MPICommunicator.world()
    pool = BufferPool(world)
    pool.reserve(NBYTES, NBYTES)
    step = Step(op=op, nbytes=NBYTES, dtype="float32")
    acked = bind(world, step, pool)
    acked.prepare()
    acked.checked()
    assert acked.verify() == 0 and acked.binding.ack is not None, acked.binding.ack
    send, recv = pool.send[:NBYTES].view(np.float32), pool.recv[:NBYTES].view(np.float32)
    bare = world.broadcast(recv, 0) if op == "broadcast" else world.reduce(send, recv, 0)
    ring = bind(world, Step(op="sendrecv", nbytes=NBYTES, dtype="float32"), pool).fn
    rounds = [
        (timed(world, bare, mode), timed(world, acked.fn, mode), timed(world, ring, mode))
        for _ in range(ROUNDS)
    ]
    old, new, p2p = (float(np.median(col)) for col in zip(*rounds))
    if world.rank == 0:
        out = {"old_us": old, "new_us": new, "p2p_us": p2p, "ack": acked.binding.ack}
        print(json.dumps({**out, "loop": world.loop_kind(acked.fn)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
