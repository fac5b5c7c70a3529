"""iallreduce: osu_iallreduce, a non-blocking allreduce with compute in the middle.

Timed twice per point: the op alone (start then wait: time_us, the allreduce's own cost,
busbw as allreduce's 2(p-1)/p), then with a compute stand-in as long as that pure time
spun between start and wait (overall_us). overlap_pct (ops.spec.overlap_pct, as OSU computes
it) is 100 when the communication hides wholly behind the compute, 0 when it only progresses
in the wait (an MPI without asynchronous progress).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from commbench.ops.allreduce import SPEC as ALLREDUCE
from commbench.ops.checkdata import fill, fill_sum, fill_zeros
from commbench.ops.spec import Binding, OpSpec, Views

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """As allreduce; `compute` is the stand-in's seconds, 0 until the runner sets it."""
    p, n, dt = comm.size, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    mine = fill(comm.rank, n, dt)
    compute = np.zeros(1)
    return Binding(
        fn=comm.iallreduce(s, rv, compute),
        inputs=[(s, mine), (rv, mine)],
        expected=[(rv, fill_sum(range(p), n, dt))],
        zero_after=[(rv, fill_zeros(n, dt))],
        compute=compute,
    )


SPEC = OpSpec(
    name="iallreduce",
    doc="osu_iallreduce: non-blocking allreduce, overlap % with a compute stand-in",
    reduces=True,
    bus_formula="2(p-1)/p",
    bus_factor=ALLREDUCE.bus_factor,
    costs=ALLREDUCE.costs,
    backends=("mpi",),
    overlaps=True,
    bind=bind,
)
