"""alltoall: S is one rank's send buffer, split evenly; chunk q goes to rank q."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import concat, fill
from commbench.ops.spec import POISON, Binding, OpSpec, Views, collective_costs, frac, lg

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Rank r receives chunk r of every rank's pattern, in rank order."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    c = n // p
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    return Binding(
        fn=comm.alltoall(s, rv),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, concat(fill(q, c, dt, start=r * c) for q in range(p)))],
    )


SPEC = OpSpec(
    name="alltoall",
    doc="S = one rank's send buffer, equal split",
    aliases=("all_to_all",),
    chunks=True,
    per_rank=True,  # osu_alltoall and IMB Alltoall: the message one rank sends (to each peer)
    bus_formula="(p-1)/p",
    bus_factor=frac,
    costs=collective_costs(
        ring=lambda p: (p - 1, frac(p)),
        tree=lambda p: (lg(p), lg(p) / 2),
        rabenseifner=lambda p: (p - 1, frac(p)),
        pairwise=lambda p: (p - 1, frac(p)),
    ),
    bind=bind,
)
