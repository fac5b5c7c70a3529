"""broadcast: group position 0 sends its S-byte buffer to every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import fill
from commbench.ops.spec import POISON, ROOTED_COSTS, TO_ROOT, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """The root holds pattern 0, the others junk; all must end with pattern 0. Timed until
    the root has every receiver's acknowledgement (spec.TO_ROOT)."""
    r, n, dt = comm.rank, step.count, step.dtype
    buf = views.recv(step.nbytes)
    first = fill(0, n, dt) if r == 0 else fill(POISON + r, n, dt)
    return Binding(
        fn=comm.acknowledged(comm.broadcast(buf, 0), 0, TO_ROOT),
        inputs=[(buf, first)],
        expected=[(buf, fill(0, n, dt))],
        ack=TO_ROOT,
    )


SPEC = OpSpec(
    name="broadcast",
    doc="root = group position 0",
    aliases=("bcast",),
    rooted=True,
    bus_formula="1",
    bus_factor=one,
    costs=ROOTED_COSTS,
    bind=bind,
)
