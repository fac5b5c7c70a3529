"""bw: osu_bw, WINDOW messages of S in flight from position 0 to position 1 of a group, which
answers the window with a 1-element ack. The time is one window's over its WINDOW messages,
so algbw = S / time is the bandwidth OSU prints (MB/s there, GB/s here) and busbw equals it
(factor 1, as send/recv). bibw (ops/bibw.py) is the same both ways at once.

osu_mbw_mr is bw on every pair at once: `run bw --group-size 2 --placement strided` pairs
position i with i + world/2, the groups run concurrently, and the message rate is the pairs
over time_us.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import fill
from commbench.ops.sendrecv import hockney
from commbench.ops.spec import MODELS, POISON, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step

WINDOW = 64  # osu_bw's default window size


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Position 0 sends pattern 0 and must get position 1's first element back as the ack;
    position 1 must receive pattern 0 (every message of the window lands in one buffer, as
    in osu_bw)."""
    assert comm.size == 2, comm.size
    r, n, dt = comm.rank, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    got = fill(0, n, dt) if r == 1 else fill(1, 1, dt)
    return Binding(
        fn=comm.window(s, rv, 1 - r, r == 0, WINDOW, both=False),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv if r == 1 else views.recv(dtype_size(dt)), got)],
        time_scale=1 / WINDOW,
    )


SPEC = OpSpec(
    name="bw",
    doc=f"osu_bw: a window of {WINDOW} messages one way between 2 ranks, per message",
    aliases=("osu_bw", "uni_bw"),
    min_group=2,
    max_group=2,
    bus_formula="1",
    bus_factor=one,
    costs=dict.fromkeys(MODELS, hockney),
    backends=("mpi",),
    bind=bind,
)
