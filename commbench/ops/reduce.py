"""reduce: sum over the group to position 0; send and receive hold S."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import fill, fill_sum, fill_zeros
from commbench.ops.spec import FROM_ROOT, ROOTED_COSTS, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Only the root's output is defined: it must hold the sum of all patterns. Timed until
    every sender has the root's acknowledgement (spec.FROM_ROOT)."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    mine = fill(r, n, dt)
    return Binding(
        fn=comm.acknowledged(comm.reduce(s, rv, 0), 0, FROM_ROOT),
        inputs=[(s, mine), (rv, mine)],
        expected=[(rv, fill_sum(range(p), n, dt))] if r == 0 else [],
        zero_after=[(rv, fill_zeros(n, dt))],
        ack=FROM_ROOT,
    )


SPEC = OpSpec(
    name="reduce",
    doc="sum to group position 0",
    reduces=True,
    rooted=True,
    bus_formula="1",
    bus_factor=one,
    costs=ROOTED_COSTS,
    bind=bind,
)
