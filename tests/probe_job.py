"""An mpirun job for tests/test_osu_ops.py: one preempted probe iteration must not shrink a
point's iteration count.

    mpirun -n 2 python tests/probe_job.py

The Runner sizes a point from its probe; here the op is a near-empty call that sleeps 50 ms
once, on its second call, as a descheduled iteration would. Sized from the slowest of two
probe iterations the point got 5 iterations (0.2 s / 50 ms, clipped to min_iters); from a
median it gets the budget's worth.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from commbench.measure.runner import Runner, TimingConfig
from commbench.measure.transport.mpi import MPICommunicator

STALL_S = 0.05


def main() -> int:
    world = MPICommunicator.world()
    calls = 0

    def op() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            time.sleep(STALL_S)

    runner = Runner(world, TimingConfig(budget_s=0.2))
    warmup, iters = runner._iterations(world, SimpleNamespace(fn=op), world)
    assert iters >= 100, f"rank {world.rank}: {iters} iterations after one stalled probe"
    print(f"rank {world.rank}: probe ok, {iters} iterations", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
