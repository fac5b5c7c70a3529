"""pingpong: OSU latency, half the round trip of S bytes between the 2 ranks of a group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import fill
from commbench.ops.sendrecv import hockney
from commbench.ops.spec import MODELS, POISON, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Position 0 sends pattern 0 and the echo must bring it back; timed per half trip."""
    assert comm.size == 2, comm.size
    r, n, dt = comm.rank, step.count, step.dtype
    buf = views.recv(step.nbytes)
    first = fill(0, n, dt) if r == 0 else fill(POISON, n, dt)
    return Binding(
        fn=comm.pingpong(buf, 1 - r, r == 0),
        inputs=[(buf, first)],
        expected=[(buf, fill(0, n, dt))],
        time_scale=0.5,
    )


SPEC = OpSpec(
    name="pingpong",
    doc="OSU latency: half the round trip between 2 ranks",
    aliases=("latency",),
    min_group=2,
    max_group=2,
    bus_formula="1",
    bus_factor=one,
    costs=dict.fromkeys(MODELS, hockney),
    bind=bind,
)
