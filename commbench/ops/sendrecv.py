"""sendrecv: send S to position+peer while receiving S from position-peer (a ring, as
nccl-tests; `ring=False` makes a chain whose ends skip the missing half)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.errors import UsageError
from commbench.ops.checkdata import fill
from commbench.ops.spec import MODELS, POISON, Binding, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def hockney(p: int) -> tuple[float, float]:
    """One message of S bytes, whatever the algorithm family (Hockney)."""
    return 1.0, 1.0


def sweep_fields(nbytes: int, p: int, peer: int) -> dict[str, int]:
    """`--peer` must name another position of the group."""
    if p > 1 and (peer % p == 0 or abs(peer) >= p):
        raise UsageError(
            f"--peer {peer}: sendrecv in a group of {p} needs a peer offset between "
            f"1 and {p - 1} (or -1 and -{p - 1})"
        )
    return {}


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Each rank expects the pattern of the position it receives from."""
    p, r, k, n, dt = comm.size, comm.rank, step.peer, step.count, step.dtype
    dest: int | None
    source: int | None
    if step.ring:
        dest, source = (r + k) % p, (r - k) % p
    else:
        dest = r + k if 0 <= r + k < p else None
        source = r - k if 0 <= r - k < p else None
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    return Binding(
        fn=comm.sendrecv(s, dest, rv, source),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, fill(source, n, dt))] if source is not None else [],
    )


SPEC = OpSpec(
    name="sendrecv",
    doc="send to position+peer, receive from position-peer (ring, as nccl-tests)",
    aliases=("send_recv",),
    bus_formula="1",
    bus_factor=one,
    costs=dict.fromkeys(MODELS, hockney),
    sweep_fields=sweep_fields,
    bind=bind,
)
