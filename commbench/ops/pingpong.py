"""pingpong: OSU latency, half the round trip of S bytes between the 2 ranks of a group.

Each side sends from its send buffer and receives into a separate receive buffer, as
osu_latency, IMB PingPong and OMB-Py do: echoing the received buffer back makes the
message just written into the receiver's cache the next one sent, which is neither what
those tools time nor what an application does (at 64 KiB-1 MiB here it cost 2-2.5x).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import fill
from commbench.ops.sendrecv import hockney
from commbench.ops.spec import MODELS, POISON, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Position q sends pattern q and must receive its peer's pattern, its own send buffer
    left untouched; timed per half trip."""
    assert comm.size == 2, comm.size
    r, n, dt = comm.rank, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    return Binding(
        fn=comm.pingpong(s, rv, 1 - r, r == 0),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, fill(1 - r, n, dt)), (s, fill(r, n, dt))],
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
