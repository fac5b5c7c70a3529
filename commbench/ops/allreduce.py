"""allreduce: sum over the group, every rank gets the result; send and receive hold S."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.ops.checkdata import fill, fill_sum, fill_zeros
from commbench.ops.spec import Binding, OpSpec, Views, collective_costs, frac, lg

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def bus_factor(p: int) -> float:
    """2(p-1)/p: a ring reduce-scatter then all-gather (nccl-tests PERFORMANCE.md)."""
    return 2.0 * (p - 1) / p


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Every rank sends its pattern and expects the sum; the in-place sum is zeroed after."""
    p, n, dt = comm.size, step.count, step.dtype
    s, rv = views.send(step.nbytes), views.recv(step.nbytes)
    mine = fill(comm.rank, n, dt)
    return Binding(
        fn=comm.allreduce(s, rv),
        inputs=[(s, mine), (rv, mine)],
        expected=[(rv, fill_sum(range(p), n, dt))],
        zero_after=[(rv, fill_zeros(n, dt))],
    )


SPEC = OpSpec(
    name="allreduce",
    doc="sum over the group, every rank gets the result",
    aliases=("all_reduce",),
    reduces=True,
    bus_formula="2(p-1)/p",
    bus_factor=bus_factor,
    costs=collective_costs(
        ring=lambda p: (2 * (p - 1), 2 * frac(p)),
        tree=lambda p: (lg(p), lg(p)),
        rabenseifner=lambda p: (2 * lg(p), 2 * frac(p)),
        pairwise=lambda p: (2 * (p - 1), 2 * frac(p)),
    ),
    bind=bind,
)
