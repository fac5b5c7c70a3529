"""An mpirun job for tests/test_osu_ops.py: where pingpong's bytes land, on 2 ranks.

    mpirun -n 2 python tests/pingpong_job.py

Binds pingpong through the op seam on the run's buffer pool, makes the checked call and a
timed loop, and asserts on the pool's raw buffers: each rank's receive buffer holds its
peer's pattern, its send buffer still holds its own, and the two do not share memory (OSU
osu_latency's s_buf and r_buf). Echoing one buffer back leaves rank 0 its own pattern.
"""

from __future__ import annotations

import numpy as np

from commbench.measure.bind import BufferPool, bind
from commbench.measure.transport.mpi import MPICommunicator
from commbench.ops.checkdata import pattern
from commbench.traffic.program import Step

N = 4096  # bytes


def main() -> int:
    world = MPICommunicator.world()
    r = world.rank
    pool = BufferPool(world)
    pool.reserve(N, N)
    bound = bind(world, Step(op="pingpong", nbytes=N, dtype="float32"), pool)
    bound.prepare()
    bound.fn()
    assert bound.verify() == 0
    world.time_loop(bound.fn, 5)
    got = pool.recv[:N].view(np.float32)
    sent = pool.send[:N].view(np.float32)
    assert not np.shares_memory(got, sent)
    assert np.array_equal(got, pattern(1 - r, N // 4, "float32")), f"rank {r} received {got[:4]}"
    assert np.array_equal(sent, pattern(r, N // 4, "float32")), f"rank {r} sent {sent[:4]}"
    print(f"rank {r}: pingpong two buffers ok, loop {world.loop_kind(bound.fn)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
