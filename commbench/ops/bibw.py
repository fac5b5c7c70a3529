"""bibw: osu_bibw, windows of WINDOW messages of S both ways at once between the 2 positions
of a group (bw's window, ops/bw.py). The time is one window's over the 2 x WINDOW messages
it moves, so algbw = S / time is the aggregate bandwidth osu_bibw prints; busbw equals it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.bw import WINDOW
from commbench.ops.checkdata import fill
from commbench.ops.sendrecv import hockney
from commbench.ops.spec import MODELS, POISON, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Each position sends its pattern and must receive its peer's."""
    assert comm.size == 2, comm.size
    r, n, dt = comm.rank, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    return Binding(
        fn=comm.window(s, rv, 1 - r, r == 0, WINDOW, both=True),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, fill(1 - r, n, dt)), (s, fill(r, n, dt))],
        time_scale=1 / (2 * WINDOW),
    )


SPEC = OpSpec(
    name="bibw",
    doc=f"osu_bibw: windows of {WINDOW} messages both ways between 2 ranks, per message",
    aliases=("osu_bibw", "bi_bw"),
    min_group=2,
    max_group=2,
    bus_formula="1",  # both directions counted in S / time
    bus_factor=one,
    costs=dict.fromkeys(MODELS, hockney),
    backends=("mpi",),
    bind=bind,
)
