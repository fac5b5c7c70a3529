"""barrier: osu_barrier and IMB Barrier, no data: S = 0 and a sweep is one point.

nccl-tests has no barrier; its time is a latency, so algbw and busbw are 0 (bus factor 1 of
nothing). The check cannot compare data, so it checks what a barrier promises: the last
position enters WAIT_S late and every other position must have waited for it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from commbench.ops.spec import Binding, InlineCheck, OpSpec, Views, collective_costs, lg, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step

WAIT_S = 0.05  # the last position's late arrival in the checked call


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Timed: the barrier alone. Checked: aligned, then the last position arrives WAIT_S late;
    a position that leaves in under half of that did not wait for it (one wrong each)."""
    fn = comm.barrier_op(views.recv(0))
    inline = InlineCheck()

    def checked() -> None:
        comm.barrier()
        if comm.rank == comm.size - 1:
            time.sleep(WAIT_S)
            fn()
            return
        t0 = time.perf_counter()
        fn()
        inline.wrong += time.perf_counter() - t0 < WAIT_S / 2

    return Binding(fn=fn, inputs=[], expected=[], inline=inline, checked_fn=checked)


SPEC = OpSpec(
    name="barrier",
    doc="osu_barrier / IMB Barrier: no data, S = 0",
    bus_formula="1",  # of S = 0
    bus_factor=one,
    costs=collective_costs(  # dissemination: lg p rounds of empty messages (ring: p-1)
        ring=lambda p: (p - 1, 0.0),
        tree=lambda p: (lg(p), 0.0),
        rabenseifner=lambda p: (lg(p), 0.0),
        pairwise=lambda p: (lg(p), 0.0),
    ),
    buffers=lambda step, p: (0, 0),
    record_bytes=lambda step: 0,
    priced_bytes=lambda step: 0,
    backends=("mpi",),
    sized=False,
    bind=bind,
)
