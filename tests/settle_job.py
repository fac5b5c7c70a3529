"""An mpirun job for tests/test_settle.py: while rank 0 works alone for WORK_S, how much CPU
does a waiting rank burn in `settle()` and in a plain barrier?

    mpirun -n 2 python tests/settle_job.py

Prints one JSON line from rank 1: the CPU seconds it used in each wait.
"""

from __future__ import annotations

import json
import time

from commbench.measure.transport.mpi import MPICommunicator

WORK_S = 0.4


def waited_cpu(world: MPICommunicator, wait) -> float:
    """CPU seconds this rank spends in `wait` while rank 0 sleeps WORK_S first."""
    world.barrier()
    cpu = time.process_time()
    if world.rank == 0:
        time.sleep(WORK_S)
    wait()
    return time.process_time() - cpu


def main() -> int:
    world = MPICommunicator.world()
    out = {"settle": waited_cpu(world, world.settle), "barrier": waited_cpu(world, world.barrier)}
    if world.rank == 1:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
